/**
 * @module
 * A count and its noun, in the singular for one ("1 upstream", "2 upstreams"),
 * for the lines every command-line tool prints (`deno task run`, `realtime`,
 * `merge`, `serve`, `load` and the gateway).
 */

/**
 * `count` and `noun`, plural unless `count` is 1.
 *
 * @param pluralForm the plural when it is not `noun` + "s". @default `${noun}s`
 * @example
 * ```ts
 * plural(1, "upstream"); // "1 upstream"
 * plural(3, "delivery", "deliveries"); // "3 deliveries"
 * ```
 */
export function plural(count: number, noun: string, pluralForm = `${noun}s`): string {
  return `${count} ${count === 1 ? noun : pluralForm}`;
}
