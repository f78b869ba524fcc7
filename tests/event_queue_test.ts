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
