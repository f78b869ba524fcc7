import { assert, assertAlmostEquals, assertEquals, assertThrows } from "@std/assert";
import { simulate } from "../actors/simulation.ts";
import { TraceFormatError, TraceReader } from "../actors/traces/trace_reader.ts";
import { scenario } from "./_scenarios.ts";

const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).pathname;
const SHARED_TRACE = new URL("../../shared/data/traces/synthetic_trace.jsonl", import.meta.url).pathname;

function readAll(reader: TraceReader) {
  const out = [];
  for (let r = reader.next(); r; r = reader.next()) out.push(r);
  reader.close();
  return out;
}

Deno.test("the Mooncake reader maps each line to a request with its 512-token block keys", () => {
  const rows = readAll(
    new TraceReader({
      path: fixture("mooncake_sample.jsonl"),
      format: "mooncake",
      speed: 1,
      skipInvalid: false,
    }),
  );
  assertEquals(rows.length, 40);
  assertEquals(rows[0].prefixTokens, 40160);
  assertEquals(rows[0].prefixKeys!.length, Math.ceil(40160 / 512));
  assertEquals([rows[0].keyTokens, rows[0].prefixGroup, rows[0].outputTokens], [512, 0, 6]);
  assert(rows.every((r, i) => i === 0 || r.arrivalMs >= rows[i - 1].arrivalMs));
});

Deno.test("trace speed compresses time", () => {
  const slow = readAll(
    new TraceReader({
      path: fixture("mooncake_sample.jsonl"),
      format: "mooncake",
      speed: 1,
      skipInvalid: false,
    }),
  );
  const fast = readAll(
    new TraceReader({
      path: fixture("mooncake_sample.jsonl"),
      format: "mooncake",
      speed: 4,
      skipInvalid: false,
    }),
  );
  assertAlmostEquals(fast.at(-1)!.arrivalMs * 4, slow.at(-1)!.arrivalMs, 1e-6);
});

Deno.test("the Azure reader parses timestamps to ms since the first request, with no prefix", () => {
  const rows = readAll(
    new TraceReader({ path: fixture("azure_sample.csv"), format: "azure", speed: 1, skipInvalid: false }),
  );
  assertEquals(rows.length, 200);
  assertEquals([rows[0].arrivalMs, rows[0].suffixTokens, rows[0].outputTokens, rows[0].prefixGroup], [
    0,
    374,
    44,
    -1,
  ]);
  // 18:15:46.6805900 → 18:15:50.9951690
  assertAlmostEquals(rows[1].arrivalMs, 4314.579, 1e-6);
});

Deno.test("a malformed line is an error naming the file and the line; --skip-invalid counts it instead", () => {
  const path = fixture("mooncake_malformed.jsonl");
  const error = assertThrows(
    () => readAll(new TraceReader({ path, format: "mooncake", speed: 1, skipInvalid: false })),
    TraceFormatError,
    `${path}:7: input_length: expected an integer >= 1, got "lots"`,
  );
  assertEquals(error.line, 7);
  const reader = new TraceReader({ path, format: "mooncake", speed: 1, skipInvalid: true });
  assertEquals(readAll(reader).length, 38);
  assertEquals(reader.skipped, 2);
});

Deno.test("a simulation replays a trace and reports the lines it skipped", () => {
  const r = simulate(scenario({
    instances: { model: "batching", count: 2 },
    workload: { trace: { path: fixture("mooncake_malformed.jsonl"), skipInvalid: true } },
  }));
  assertEquals([r.requests, r.completed, r.skippedInvalid], [38, 38, 2]);
});

Deno.test("one instance with an unlimited cache replaying the Mooncake trace hits 65.1% of prompt tokens (±0.5 points)", () => {
  try {
    Deno.statSync(SHARED_TRACE);
  } catch {
    throw new Error(
      `needs ../shared/data/traces/synthetic_trace.jsonl beside the repository (looked at ${SHARED_TRACE})`,
    );
  }
  const r = simulate(scenario({
    instances: { count: 1, model: "batching", engine: { kvBlocks: 1_000_000_000 } },
    workload: { trace: { path: SHARED_TRACE } },
  }));
  assertEquals(r.completed, 3993);
  assertAlmostEquals(r.tokenHitRate!, 0.651, 0.005);
});
