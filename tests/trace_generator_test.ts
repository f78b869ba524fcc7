/**
 * The trace generator: deterministic by seed, rows the Mooncake reader
 * accepts, the structure of chat and agent sessions in the hash ids, the
 * defaults' statistics, and memory that does not grow with the trace.
 */
import { assert, assertAlmostEquals, assertEquals, assertNotEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import {
  type GeneratedRequest,
  mooncakeLine,
  TRACE_GENERATOR_DEFAULTS,
  TraceGenerator,
  type TraceGeneratorOptions,
} from "../actors/traces/trace_generator.ts";
import { GeneratedTraceReader } from "../actors/traces/generated_trace_reader.ts";
import { MOONCAKE_BLOCK_TOKENS, TraceReader, type TraceRequest } from "../actors/traces/trace_reader.ts";
import { traceChunks, TraceTally } from "../scenarios/scenario/trace_file.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const B = MOONCAKE_BLOCK_TOKENS;

const rows = (
  options: Partial<TraceGeneratorOptions>,
): GeneratedRequest[] => [...new TraceGenerator(options)];
const text = (options: Partial<TraceGeneratorOptions>) => rows(options).map(mooncakeLine).join("\n");

Deno.test("the same parameters give the same trace, byte for byte; another seed another trace", () => {
  const options = { requests: 2000, seed: 7, agentFrac: 0.5 };
  assertEquals(text(options), text(options));
  assertNotEquals(text(options), text({ ...options, seed: 8 }));
});

Deno.test("a shorter trace is the start of a longer one (requests only says where to stop)", () => {
  const long = rows({ requests: 3000, seed: 3 });
  const short = rows({ requests: 500, seed: 3 });
  assertEquals(long.length, 3000);
  assertEquals(short, long.slice(0, 500));
});

Deno.test("every row is one the Mooncake reader accepts, in time order", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  const path = `${dir}/trace.jsonl`;
  const generator = new TraceGenerator({ requests: 3000, seed: 5, systemPrompts: 3 });
  await Deno.writeTextFile(path, [...traceChunks(generator, new TraceTally())].join(""));
  const reader = new TraceReader({ path, format: "mooncake", speed: 1, skipInvalid: false });
  const read: TraceRequest[] = [];
  for (let r = reader.next(); r; r = reader.next()) read.push(r);
  reader.close();
  assertEquals(read.length, 3000);
  assert(read.every((r, i) => i === 0 || r.arrivalMs >= read[i - 1].arrivalMs));
  await Deno.remove(dir, { recursive: true });
});

Deno.test("the generated reader yields exactly what the file reader reads from the written trace", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  const path = `${dir}/trace.jsonl`;
  const generate = { ...TRACE_GENERATOR_DEFAULTS, requests: 1500, seed: 11 };
  await Deno.writeTextFile(path, [...traceChunks(new TraceGenerator(generate), new TraceTally())].join(""));
  const all = (reader: { next(): TraceRequest | undefined }) => {
    const out: TraceRequest[] = [];
    for (let r = reader.next(); r; r = reader.next()) out.push(r);
    return out;
  };
  for (const [speed, maxRequests] of [[1, undefined], [2.5, 700]] as const) {
    const file = new TraceReader({ path, format: "mooncake", speed, skipInvalid: false, maxRequests });
    assertEquals(
      all(new GeneratedTraceReader({ generate, format: "mooncake", speed, maxRequests })),
      all(file),
    );
    file.close();
  }
  await Deno.remove(dir, { recursive: true });
});

/**
 * Checks the structure a trace of `options` must have; returns counts that
 * show the checks had something to check.
 */
function checkStructure(options: TraceGeneratorOptions, trace: readonly GeneratedRequest[]) {
  const systemBlocks = options.systemPromptTokens / B;
  const last = new Map<number, GeneratedRequest>();
  /** id → "position/parent", which must never change (an id names its block and every block before it). */
  const chain = new Map<number, string>();
  /** id → the session that made it (system-prompt ids aside). */
  const owner = new Map<number, number>();
  const partialIds = new Set<number>();
  let followUps = 0, previousMs = 0;
  for (const row of trace) {
    assert(Number.isInteger(row.timestamp) && row.timestamp >= previousMs, `timestamp ${row.timestamp}`);
    previousMs = row.timestamp;
    assert(Number.isInteger(row.input_length) && row.input_length >= 1);
    assert(Number.isInteger(row.output_length) && row.output_length >= 1);
    const ids = row.hash_ids;
    assertEquals(ids.length, Math.ceil(row.input_length / B));
    // The system prompt's blocks first: whole blocks, the same ids for every session using it.
    const system = ids.slice(0, systemBlocks);
    assert(system.length === systemBlocks && system.every((id, j) => id === system[0] + j));
    assert(
      system.length === 0 ||
        (system[0] % systemBlocks === 0 && system[0] / systemBlocks < options.systemPrompts),
    );
    ids.forEach((id, j) => {
      const link = `${j}/${j === 0 ? -1 : ids[j - 1]}`;
      assertEquals(chain.get(id) ?? link, link, `id ${id} names two different prefixes`);
      chain.set(id, link);
      if (j >= systemBlocks) {
        assertEquals(owner.get(id) ?? row.session, row.session, `id ${id} shared by two sessions`);
        owner.set(id, row.session);
      }
      assert(!partialIds.has(id), `id ${id} of a partial block appears again`);
    });
    if (row.input_length % B !== 0) partialIds.add(ids[ids.length - 1]);
    const previous = last.get(row.session);
    if (previous) {
      assertEquals(row.turn, previous.turn + 1);
      const full = Math.floor(previous.input_length / B);
      assertEquals(ids.slice(0, full), previous.hash_ids.slice(0, full), "full blocks of the last turn kept");
      assert(
        row.input_length > previous.input_length + previous.output_length,
        "prompt = last + output + message",
      );
      assert(!previous.hash_ids.includes(ids[full]), "the first block after them is new");
      followUps++;
    }
    last.set(row.session, row);
  }
  return { followUps, sessions: last.size };
}

Deno.test("turns extend their session's context: full blocks kept, changed and new blocks get fresh ids", () => {
  const options = { ...TRACE_GENERATOR_DEFAULTS, requests: 5000, seed: 2, systemPrompts: 4 };
  const { followUps, sessions } = checkStructure(options, rows(options));
  assert(followUps > 3000 && sessions > 400, `${followUps} follow-ups, ${sessions} sessions`);
});

Deno.test("with one system prompt every request shares block 0, and only the system prompt's blocks", () => {
  const trace = rows({ requests: 4000, seed: 9 });
  assert(trace.every((r) => r.hash_ids[0] === 0 && r.hash_ids[3] === 3));
  const sessionsOf = new Map<number, Set<number>>();
  for (const r of trace) {
    for (const id of r.hash_ids.slice(4)) {
      sessionsOf.set(id, (sessionsOf.get(id) ?? new Set()).add(r.session));
    }
  }
  assert([...sessionsOf.values()].every((s) => s.size === 1));
});

Deno.test("the structure holds over random parameters (property)", () => {
  fc.assert(
    fc.property(
      fc.record({
        seed: fc.nat(1000),
        requests: fc.integer({ min: 1, max: 400 }),
        ratePerSec: fc.double({ min: 0.5, max: 50, noNaN: true }),
        systemPrompts: fc.integer({ min: 1, max: 5 }),
        systemPromptTokens: fc.integer({ min: 0, max: 4 }).map((n) => n * B),
        turnsMean: fc.double({ min: 1, max: 10, noNaN: true }),
        thinkTimeMs: fc.double({ min: 0, max: 20_000, noNaN: true }),
        agentFrac: fc.double({ min: 0, max: 1, noNaN: true }),
        toolWaitMs: fc.double({ min: 0, max: 5000, noNaN: true }),
        firstMessageTokens: fc.double({ min: 1, max: 3000, noNaN: true }),
        messageTokens: fc.double({ min: 1, max: 1500, noNaN: true }),
        outputTokens: fc.double({ min: 1, max: 600, noNaN: true }),
      }),
      (options) => {
        const trace = rows(options);
        assertEquals(trace.length, options.requests);
        checkStructure(options, trace);
      },
    ),
    { numRuns: 60 },
  );
});

Deno.test("the defaults give ≈ 12,000 requests an hour, ≈ 12,000-token prompts, ≈ 340 output tokens", () => {
  // Seeds 1–5 pooled. Measured over 200 seeds (design.md): per trace, mean input 12,014 ± 304,
  // output 340.1 ± 4.2, span 3,608 ± 120 s, 23.96 ± 0.59 blocks; the tolerances are about 4 sd of a 5-seed mean.
  let requests = 0, input = 0, output = 0, blocks = 0, spanMs = 0, agentRows = 0;
  for (let seed = 1; seed <= 5; seed++) {
    const trace = rows({ seed });
    assertEquals(trace.length, 12_000);
    assert(trace.every((r) => r.hash_ids[0] === 0));
    for (const r of trace) {
      requests++;
      input += r.input_length;
      output += r.output_length;
      blocks += r.hash_ids.length;
      if (r.agent) agentRows++;
    }
    spanMs += trace.at(-1)!.timestamp - trace[0].timestamp;
  }
  assertAlmostEquals(input / requests, 12_003, 600);
  assertAlmostEquals(output / requests, 340, 10);
  assertAlmostEquals(blocks / requests, 24, 1.2);
  assertAlmostEquals(spanMs / 5 / 1000, 3600, 216);
  assertAlmostEquals(agentRows / requests, 0.3, 0.03);
});

Deno.test("the trace is a window of steady traffic: the first minutes run at the full rate", () => {
  // Without the warm-up the first 5 minutes would hold about half their share (sessions still ramping up).
  let early = 0, all = 0;
  for (let seed = 1; seed <= 20; seed++) {
    for (const r of new TraceGenerator({ seed })) {
      all++;
      if (r.timestamp < 300_000) early++;
    }
  }
  assertAlmostEquals(early / 20 / 300, 10 / 3, 0.25);
  assertEquals(all, 20 * 12_000);
});

Deno.test("an invalid parameter is a RangeError naming it, its value and what was expected", async (t) => {
  const cases: [Partial<TraceGeneratorOptions>, string][] = [
    [{ requests: 0 }, "trace generator: requests: expected a number >= 1, got 0"],
    [{ ratePerSec: 0 }, "trace generator: ratePerSec: expected a number > 0, got 0"],
    [{ agentFrac: 2 }, "trace generator: agentFrac: expected a number <= 1, got 2"],
    [{ systemPromptTokens: 100 }, "trace generator: systemPromptTokens: expected a multiple of 512, got 100"],
    [{ turnsMean: 0.5 }, "trace generator: turnsMean: expected a number >= 1, got 0.5"],
    [{ seed: 1.5 }, "trace generator: seed: expected an integer, got 1.5"],
    [{ ratePerSec: 1e-12 }, "trace generator: ratePerSec: expected a number >= 1.07e-8"],
  ];
  for (const [options, message] of cases) {
    await t.step(message, () => {
      assertThrows(() => new TraceGenerator(options), RangeError, message);
    });
  }
});

Deno.test("generating 200,000 requests holds only the open sessions: the heap does not grow", async () => {
  // A separate process, so the heap can be measured after a forced GC.
  const output = await new Deno.Command("deno", {
    args: [
      "run",
      "--no-prompt",
      "--v8-flags=--expose-gc",
      "tests/fixtures/trace_generator_memory.ts",
      "200000",
    ],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assertEquals(output.code, 0, new TextDecoder().decode(output.stderr));
  const m = JSON.parse(new TextDecoder().decode(output.stdout));
  assertEquals(m.rows, 200_000);
  // Keeping the rows would take ≈ 60 MB (24 ids each); the open sessions take well under 1 MB.
  assert(m.heapGrowthMb < 3, `heap grew ${m.heapGrowthMb} MB from 20,000 to 200,000 requests`);
  assert(m.maxOpenSessions < 300, `${m.maxOpenSessions} sessions open at once`);
});
