import { assertEquals } from "@std/assert";
import fc from "fast-check";
import { NumberTable } from "../actors/kv_cache/number_table.ts";

Deno.test("NumberTable behaves as a Map under any sequence of sets and deletes (property)", () => {
  const key = fc.oneof(
    fc.integer({ min: -40, max: 40 }),
    fc.integer(),
    fc.constantFrom(2 ** 40, -(2 ** 33), 0.5),
  );
  const op = fc.tuple(fc.constantFrom("set", "delete", "get"), key, fc.nat());
  fc.assert(
    fc.property(fc.array(op, { maxLength: 400, size: "max" }), (ops) => {
      const table = new NumberTable<number>(4), map = new Map<number, number>();
      for (const [kind, k, v] of ops) {
        if (kind === "set") {
          table.set(k, v);
          map.set(k, v);
        } else if (kind === "delete") assertEquals(table.delete(k), map.delete(k));
        assertEquals(table.get(k), map.get(k));
        assertEquals(table.size, map.size);
      }
      for (const [k, v] of map) assertEquals(table.get(k), v);
      assertEquals([...table.values()].sort(), [...map.values()].sort());
    }),
    { numRuns: 300 },
  );
});
