/**
 * @module
 * Stand-in for `jsr:@std/assert`, which this environment cannot reach (JSR is
 * blocked): the few std assertion names our tests use, delegating to
 * `node:assert/strict`. `deno.json` maps `@std/assert` here; switching to the
 * real package later is a one-line change there.
 */
import assert from "node:assert/strict";

/** Asserts that `condition` is truthy. */
export function assertOk(condition: unknown, message?: string): asserts condition {
  assert.ok(condition, message);
}
export { assertOk as assert };

/** Asserts deep, strict equality. */
export function assertEquals<T>(actual: unknown, expected: T, message?: string): asserts actual is T {
  assert.deepStrictEqual(actual, expected, message);
}

/** Asserts that two values are not deeply equal. */
export function assertNotEquals(actual: unknown, expected: unknown, message?: string): void {
  assert.notDeepStrictEqual(actual, expected, message);
}

/** Asserts `|actual − expected| <= tolerance` (default 1e-7). */
export function assertAlmostEquals(
  actual: number,
  expected: number,
  tolerance = 1e-7,
  message?: string,
): void {
  assert.ok(
    Math.abs(actual - expected) <= tolerance,
    message ?? `expected ${actual} to be within ${tolerance} of ${expected}`,
  );
}

/** Asserts `actual > expected`. */
export function assertGreater(actual: number, expected: number, message?: string): void {
  assert.ok(actual > expected, message ?? `expected ${actual} > ${expected}`);
}

/** Asserts `actual < expected`. */
export function assertLess(actual: number, expected: number, message?: string): void {
  assert.ok(actual < expected, message ?? `expected ${actual} < ${expected}`);
}

/** Asserts that `text` matches `pattern`. */
export function assertMatch(text: string, pattern: RegExp, message?: string): void {
  assert.match(text, pattern, message);
}

/** Asserts that `text` contains `expected`. */
export function assertStringIncludes(text: string, expected: string, message?: string): void {
  assert.ok(
    text.includes(expected),
    message ?? `expected ${JSON.stringify(text)} to include ${JSON.stringify(expected)}`,
  );
}

/** Asserts that `fn` throws an instance of `ErrorClass` whose message includes `includes`. */
export function assertThrows<E extends Error>(
  fn: () => unknown,
  // deno-lint-ignore no-explicit-any
  ErrorClass: new (...args: any[]) => E,
  includes?: string,
): E {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ErrorClass, `expected ${ErrorClass.name}, got ${String(error)}`);
    if (includes !== undefined) assertStringIncludes(error.message, includes);
    return error;
  }
  throw new assert.AssertionError({ message: `expected ${ErrorClass.name} to be thrown` });
}

/** Asserts that `fn` rejects with an instance of `ErrorClass` whose message includes `includes`. */
export async function assertRejects<E extends Error>(
  fn: () => Promise<unknown>,
  // deno-lint-ignore no-explicit-any
  ErrorClass: new (...args: any[]) => E,
  includes?: string,
): Promise<E> {
  try {
    await fn();
  } catch (error) {
    assert.ok(error instanceof ErrorClass, `expected ${ErrorClass.name}, got ${String(error)}`);
    if (includes !== undefined) assertStringIncludes(error.message, includes);
    return error;
  }
  throw new assert.AssertionError({ message: `expected ${ErrorClass.name} to be rejected` });
}
