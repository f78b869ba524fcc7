import { assertEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import { EventQueue } from "../actors/runtime/event_queue.ts";

Deno.test("event queue pops by time, then by seq", () => {
  const q = new EventQueue<string>();
  q.push(5, 0, 0, "c");
  q.push(1, 1, 0, "a");
  q.push(5, 2, 0, "d");
  q.push(3, 3, 0, "b");
  assertEquals([q.pop(), q.pop(), q.pop(), q.pop()], ["a", "b", "c", "d"]);
  assertEquals(q.size, 0);
});

Deno.test("event queue pop on an empty queue is a RangeError", () => {
  assertThrows(() => new EventQueue<number>().pop(), RangeError, "empty");
});

Deno.test("event queue drains any interleaving of pushes and pops in (time, seq) order", () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.integer({ min: 0, max: 20 }), fc.boolean()), { maxLength: 300 }),
      (ops) => {
        const q = new EventQueue<number>();
        const model: { t: number; s: number }[] = [];
        let seq = 0;
        for (const [t, popFirst] of ops) {
          if (popFirst && model.length > 0) {
            model.sort((a, b) => a.t - b.t || a.s - b.s);
            const expected = model.shift()!;
            assertEquals(q.pop(), expected.s);
            assertEquals(q.poppedTimeMs, expected.t);
          }
          q.push(t, seq, 0, seq);
          model.push({ t, s: seq++ });
        }
        model.sort((a, b) => a.t - b.t || a.s - b.s);
        for (const expected of model) assertEquals(q.pop(), expected.s);
        assertEquals(q.size, 0);
      },
    ),
  );
});

/** Drains `q`, returning each entry as [timeMs, seq, item]. */
function drain<T>(q: EventQueue<T>): [number, number, T][] {
  const out: [number, number, T][] = [];
  while (q.size > 0) {
    const item = q.pop();
    out.push([q.poppedTimeMs, q.poppedSeq, item]);
  }
  return out;
}

Deno.test("event queue pops in-order pushes interleaved with out-of-order ones in (time, seq) order", async (t) => {
  // Each row: pushes as [timeMs, seq]; the run takes those at or after its last, the heap the rest.
  const rows: [string, [number, number][]][] = [
    ["in order only", [[1, 0], [2, 1], [2, 2], [5, 3], [9, 4]]],
    ["an earlier one after in-order ones", [[1, 0], [5, 1], [9, 2], [3, 3], [6, 4]]],
    ["a later one's tie with the run's head", [[4, 0], [8, 1], [4, 2], [8, 3], [4, 4]]],
    ["a smaller seq at the run's last time", [[2, 5], [7, 6], [7, 3], [7, 9], [2, 1]]],
    ["reverse order", [[9, 0], [7, 1], [5, 2], [3, 3], [1, 4]]],
    ["same time throughout", [[3, 0], [3, 1], [3, 2], [3, 3]]],
  ];
  for (const [name, pushes] of rows) {
    await t.step(name, () => {
      const q = new EventQueue<string>();
      for (const [time, seq] of pushes) q.push(time, seq, seq % 3, `${time}/${seq}`);
      const expected = [...pushes].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      assertEquals(q.peekTimeMs(), expected[0][0]);
      assertEquals(drain(q), expected.map(([time, seq]) => [time, seq, `${time}/${seq}`]));
      assertEquals(q.peekTimeMs(), Infinity);
    });
  }
});

Deno.test("event queue keeps its order while the run wraps around and grows past its first size", () => {
  const q = new EventQueue<number>();
  const popped: number[] = [];
  let seq = 0;
  // In-order pushes, two pushed for every one popped: the ring wraps, then grows (128 → 256 → …).
  for (let round = 0; round < 400; round++) {
    q.push(round, seq++, 0, round);
    q.push(round + 0.5, seq++, 0, round + 0.5);
    if (round % 7 === 3) q.push(round - 0.25, seq++, 0, round - 0.25); // out of order: to the heap
    popped.push(q.pop());
  }
  while (q.size > 0) popped.push(q.pop());
  assertEquals(popped, [...popped].sort((a, b) => a - b));
  assertEquals(popped.length, seq);
});

Deno.test("event queue visits every waiting entry, in its run and in its heap", () => {
  const q = new EventQueue<string>();
  q.push(1, 0, 7, "run a");
  q.push(2, 1, 8, "run b");
  q.push(1.5, 2, 9, "heap");
  const seen: [string, number, number, number][] = [];
  q.forEach((item, to, time, seq) => seen.push([item, to, time, seq]));
  assertEquals(seen.sort((a, b) => a[3] - b[3]), [["run a", 7, 1, 0], ["run b", 8, 2, 1], [
    "heap",
    9,
    1.5,
    2,
  ]]);
});

Deno.test("event queue matches a reference sort over any mix of in-order, out-of-order and same-time pushes", () => {
  // An op pushes at the last pushed time plus a step (in order), at the last time again (same time),
  // at a random earlier or later time (out of order), or pops.
  const op = fc.oneof(
    fc.record({ kind: fc.constant("after" as const), step: fc.integer({ min: 0, max: 5 }) }),
    fc.record({ kind: fc.constant("same" as const), step: fc.constant(0) }),
    fc.record({ kind: fc.constant("anywhere" as const), step: fc.integer({ min: 0, max: 60 }) }),
    fc.record({ kind: fc.constant("pop" as const), step: fc.constant(0) }),
  );
  fc.assert(
    fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
      const q = new EventQueue<number>();
      const model: { t: number; s: number }[] = [];
      const byKey = (a: { t: number; s: number }, b: { t: number; s: number }) => a.t - b.t || a.s - b.s;
      let seq = 0, last = 0, floor = 0; // floor: the last popped time (the kernel never sends earlier)
      for (const { kind, step } of ops) {
        if (kind === "pop") {
          if (model.length === 0) continue;
          model.sort(byKey);
          const expected = model.shift()!;
          assertEquals(q.pop(), expected.s);
          assertEquals([q.poppedTimeMs, q.poppedSeq, q.poppedTo], [expected.t, expected.s, expected.s % 5]);
          floor = expected.t;
        } else {
          const t = kind === "anywhere" ? floor + step : Math.max(floor, last + step);
          q.push(t, seq, seq % 5, seq);
          model.push({ t, s: seq++ });
          last = t;
        }
        assertEquals(q.size, model.length);
        assertEquals(q.peekTimeMs(), model.length === 0 ? Infinity : Math.min(...model.map((m) => m.t)));
      }
      model.sort(byKey);
      assertEquals(drain(q).map(([t, s]) => ({ t, s })), model);
    }),
    { numRuns: 300 },
  );
});
