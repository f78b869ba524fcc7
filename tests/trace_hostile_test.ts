/**
 * Hostile traces (issue 25): a line of 48 MB, JSON that is not an object,
 * dates that do not exist, and a replay that overloads its fleet. Each is
 * refused naming the file and line (exit 2), or skipped and counted under
 * `--skip-invalid`, or — the overload — warned about once, on stderr only.
 */
import { assert, assertEquals, assertMatch, assertThrows } from "@std/assert";
import fc from "fast-check";
import { type RunProgress, simulate } from "../actors/simulation.ts";
import {
  BoundedLineReader,
  MAX_TRACE_LINE_BYTES,
  OVERLONG_LINE,
  TraceFormatError,
  TraceReader,
  type TraceRequest,
} from "../actors/traces/trace_reader.ts";
import { TRACE_GENERATOR_DEFAULTS, TraceGenerator } from "../actors/traces/trace_generator.ts";
import { traceChunks, TraceTally } from "../scenarios/scenario/trace_file.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { messageLine, runCli } from "./_cli.ts";
import { scenario } from "./_scenarios.ts";

const MB = 1 << 20;
const row = (timestamp: number) =>
  `{"timestamp": ${timestamp}, "input_length": 1, "output_length": 1, "hash_ids": [${timestamp}]}`;

/** A temporary file holding `text`, removed after `body`. */
async function withFile<T>(text: string, suffix: string, body: (path: string) => T | Promise<T>): Promise<T> {
  const path = await Deno.makeTempFile({ prefix: "rrs_hostile_", suffix });
  try {
    await Deno.writeTextFile(path, text);
    return await body(path);
  } finally {
    await Deno.remove(path);
  }
}

function readAll(reader: TraceReader): TraceRequest[] {
  const out = [];
  try {
    for (let r = reader.next(); r; r = reader.next()) out.push(r);
  } finally {
    reader.close();
  }
  return out;
}

const mooncake = (path: string, skipInvalid = false) =>
  new TraceReader({ path, format: "mooncake", speed: 1, skipInvalid });
const azure = (path: string, skipInvalid = false) =>
  new TraceReader({ path, format: "azure", speed: 1, skipInvalid });

// --- 11: long lines ---------------------------------------------------------

Deno.test("a 48 MB line is refused naming its file and line, and skipped and counted under skipInvalid", async () => {
  const text = `${row(0)}\n{"pad": "${"a".repeat(48 * MB)}"}\n${row(1)}\nnull\n`;
  await withFile(text, ".jsonl", (path) => {
    assertThrows(
      () => readAll(mooncake(path)),
      TraceFormatError,
      `${path}:2: line longer than ${MAX_TRACE_LINE_BYTES} bytes`,
    );
    // Skipped, the count goes on: the `null` after it is still line 4.
    const reader = mooncake(path, true);
    assertEquals(readAll(reader).map((r) => r.prefixKeys), [[0], [1]]);
    assertEquals(reader.skipped, 2);
    const lines = new BoundedLineReader(path, MAX_TRACE_LINE_BYTES);
    assertEquals([lines.next(), lines.next(), lines.next()], [row(0), OVERLONG_LINE, row(1)]);
    lines.close();
  });
});

Deno.test("a line of exactly MAX_TRACE_LINE_BYTES bytes is read, one byte more is refused", async () => {
  // JSON allows spaces: pad a valid row to the length wanted (its newline not counted).
  const padded = (bytes: number) => row(5).replace("{", "{" + " ".repeat(bytes - row(5).length));
  assertEquals(new TextEncoder().encode(padded(MAX_TRACE_LINE_BYTES)).length, MAX_TRACE_LINE_BYTES);
  await withFile(`${padded(MAX_TRACE_LINE_BYTES)}\n`, ".jsonl", (path) => {
    assertEquals(readAll(mooncake(path)).map((r) => r.prefixKeys), [[5]]);
  });
  // Also with no newline at the end of the file.
  await withFile(padded(MAX_TRACE_LINE_BYTES + 1), ".jsonl", (path) => {
    assertThrows(() => readAll(mooncake(path)), TraceFormatError, `${path}:1: line longer than`);
  });
});

Deno.test("refusing a long line holds at most the bound, never the line", async () => {
  await withFile(`${row(0)}\n${"x".repeat(48 * MB)}\n${row(1)}\n`, ".jsonl", async (path) => {
    const lines = new BoundedLineReader(path, MAX_TRACE_LINE_BYTES);
    const read = [];
    for (let line = lines.next(); line !== undefined; line = lines.next()) read.push(line);
    lines.close();
    assertEquals(read, [row(0), OVERLONG_LINE, row(1)]);
    assertEquals(lines.bytesRead, (await Deno.stat(path)).size);
    assert(lines.peakHeldBytes <= MAX_TRACE_LINE_BYTES, `held ${lines.peakHeldBytes} bytes`);
  });
});

Deno.test("refusing a 16 MB line takes less time than reading 16 MB of ordinary lines (linear, not quadratic)", async () => {
  // A ratio within one run, not an absolute time. Measured: refusing takes
  // about 0.08 of the ordinary lines' time (6 ms against 80); the reader that
  // rescanned the growing line at each 64 KiB buffer (the bug) took 8.5 times
  // it (1,180 ms against 138), and the gap grows with the line.
  const ordinary: string[] = [];
  for (let bytes = 0, t = 0; bytes < 16 * MB; t++) {
    ordinary.push(row(t));
    bytes += row(t).length + 1;
  }
  const long = `${row(0)}\n{"pad": "${"a".repeat(16 * MB)}"}\n${row(1)}\n`;
  const fastest = (path: string) => {
    let best = Infinity;
    for (let i = 0; i < 3; i++) {
      const start = performance.now();
      readAll(mooncake(path, true));
      best = Math.min(best, performance.now() - start);
    }
    return best;
  };
  const ordinaryMs = await withFile(ordinary.join("\n") + "\n", ".jsonl", fastest);
  const longMs = await withFile(long, ".jsonl", fastest);
  assert(
    longMs < ordinaryMs,
    `refusing took ${longMs.toFixed(0)} ms, ordinary lines ${ordinaryMs.toFixed(0)} ms`,
  );
});

Deno.test("the line reader splits any text as split('\\n') does, marking lines past the bound", async () => {
  const encoder = new TextEncoder();
  // Short pieces, multi-byte characters among them, so lines and UTF-8
  // sequences straddle every buffer boundary a small bound makes.
  const piece = fc.constantFrom("a", "é", "€", "😀", "\n", "\r\n", "{}", "\ufeff");
  await fc.assert(
    fc.asyncProperty(
      fc.array(piece, { maxLength: 120 }),
      fc.integer({ min: 1, max: 40 }),
      async (pieces, bound) => {
        const text = pieces.join("");
        const expected = text.split("\n").map((line, i) => {
          const shown = i === 0 && line.startsWith("\ufeff") ? line.slice(1) : line;
          return encoder.encode(line).length > bound ? OVERLONG_LINE : shown;
        });
        if (text === "" || text.endsWith("\n")) expected.pop();
        const got = await withFile(text, ".txt", (path) => {
          const lines = new BoundedLineReader(path, bound);
          const out = [];
          for (let line = lines.next(); line !== undefined; line = lines.next()) out.push(line);
          lines.close();
          assert(lines.peakHeldBytes <= bound);
          return out;
        });
        assertEquals(got, expected);
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("trace-gen refuses to write a row longer than the reader reads, naming the row", () => {
  // First messages lognormal with a mean of 10M tokens: a few exceed the ~50M tokens (~100,000 ids) a 1 MiB line holds.
  const generator = new TraceGenerator({
    ...TRACE_GENERATOR_DEFAULTS,
    requests: 300,
    firstMessageTokens: 10_000_000,
  });
  const tally = new TraceTally();
  const error = assertThrows(() => [...traceChunks(generator, tally)], UsageError);
  const m =
    /^trace generator: row (\d+) would be a line of (\d+) bytes \(input_length \d+\), longer than the 1048576 bytes/
      .exec(error.message);
  assert(m, error.message);
  assert(Number(m[2]) > MAX_TRACE_LINE_BYTES);
  assertEquals(tally.requests, Number(m[1]) - 1, "rows before it were counted, it was not");
});

// --- 12: JSON that is not an object -----------------------------------------

Deno.test("a Mooncake line that is JSON but not an object is refused naming file and line, or skipped", async (t) => {
  for (const literal of ["null", "42", "[1, 2]", '"text"', "true", "false"]) {
    await t.step(literal, async () => {
      await withFile(`${row(0)}\n${literal}\n${row(1)}\n`, ".jsonl", (path) => {
        assertThrows(
          () => readAll(mooncake(path)),
          TraceFormatError,
          `${path}:2: expected a JSON object with timestamp, input_length, output_length and hash_ids, got ${
            JSON.stringify(JSON.parse(literal))
          }`,
        );
        const reader = mooncake(path, true);
        assertEquals(readAll(reader).length, 2);
        assertEquals(reader.skipped, 1);
      });
    });
  }
});

Deno.test("a null line exits 2 with one line naming file:line, and --skip-invalid counts it", async () => {
  await withFile(`${row(0)}\nnull\n${row(1)}\n`, ".jsonl", async (path) => {
    const failed = await runCli("--trace", path, "--model", "batching");
    assertEquals(failed.code, 2, failed.stderr);
    assertEquals(
      messageLine(failed.stderr),
      `error: ${path}:2: expected a JSON object with timestamp, input_length, output_length and hash_ids, got null`,
    );
    const skipped = await runCli("--trace", path, "--model", "batching", "--skip-invalid");
    assertEquals(skipped.code, 0, skipped.stderr);
    assertMatch(skipped.stdout, /requests +2 +completed 2 .*\(skipped 1 malformed trace line\)/);
  });
});

Deno.test("a 48 MB line exits 2 with one line naming file:line", async () => {
  await withFile(`${row(0)}\n${"[".repeat(48 * MB)}\n`, ".jsonl", async (path) => {
    const { code, stderr } = await runCli("--trace", path, "--model", "batching");
    assertEquals(code, 2, stderr);
    assertEquals(messageLine(stderr), `error: ${path}:2: line longer than ${MAX_TRACE_LINE_BYTES} bytes`);
  });
});

Deno.test("an infinite timestamp is refused, and a long bad value is cut in the message", async () => {
  await withFile(
    `{"timestamp": 1e999, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n`,
    ".jsonl",
    (path) => {
      assertThrows(
        () => readAll(mooncake(path)),
        TraceFormatError,
        `${path}:1: timestamp: expected a finite number >= 0, got null`,
      );
    },
  );
  const long = `{"timestamp": "${
    "9".repeat(100_000)
  }", "input_length": 1, "output_length": 1, "hash_ids": [0]}`;
  await withFile(`${long}\n`, ".jsonl", (path) => {
    const error = assertThrows(() => readAll(mooncake(path)), TraceFormatError);
    assert(error.message.length < path.length + 150, error.message);
    assertMatch(
      error.message,
      /timestamp: expected a finite number >= 0, got "9{59}… \(100002 characters\)$/,
    );
  });
});

// --- 15: dates that do not exist --------------------------------------------

const AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens";

Deno.test("an Azure date that does not exist is refused naming file and line, or skipped", async (t) => {
  const cases: [string, string][] = [
    ["2023-13-45 99:99:99", "month 13 is not 01-12"],
    ["2023-00-10 10:00:00", "month 00 is not 01-12"],
    ["2023-11-00 10:00:00", "day 00 is not in 2023-11 (01-30)"],
    ["2023-11-31 10:00:00", "day 31 is not in 2023-11 (01-30)"],
    ["2023-02-29 10:00:00", "day 29 is not in 2023-02 (01-28)"],
    ["1900-02-29 10:00:00", "day 29 is not in 1900-02 (01-28)"],
    ["2023-11-16 24:00:00", "hour 24 is not 00-23"],
    ["2023-11-16 10:60:00", "minute 60 is not 00-59"],
    ["2023-12-31 23:59:60.5", "second 60 is not 00-59"],
  ];
  for (const [date, problem] of cases) {
    await t.step(date, async () => {
      const text = `${AZURE_HEADER}\n2023-01-01 00:00:00,10,1\n${date},10,1\n2025-01-01 00:00:00,10,1\n`;
      await withFile(text, ".csv", (path) => {
        assertThrows(
          () => readAll(azure(path)),
          TraceFormatError,
          `${path}:3: TIMESTAMP: ${problem}, got "${date}"`,
        );
        const reader = azure(path, true);
        assertEquals(readAll(reader).length, 2);
        assertEquals(reader.skipped, 1);
      });
    });
  }
});

Deno.test("Azure dates at the calendar's edges are read, leap days included", async () => {
  const dates = [
    "2000-02-29 00:00:00",
    "2023-01-31 23:59:59.9999999",
    "2023-04-30 00:00:00",
    "2023-12-31 23:59:59",
    "2024-02-29 12:00:00",
  ];
  await withFile(`${AZURE_HEADER}\n${dates.map((d) => `${d},10,1`).join("\n")}\n`, ".csv", (path) => {
    const rows = readAll(azure(path));
    const expected = dates.map((d) =>
      Date.parse(`${d.replace(" ", "T")}Z`) - Date.parse("2000-02-29T00:00:00Z")
    );
    assertEquals(rows.length, dates.length);
    // Date.parse keeps milliseconds only: the trace's 0.9999999 s is 0.1 µs short of a whole second.
    rows.forEach((r, i) => assert(Math.abs(r.arrivalMs - expected[i]) < 1, `${dates[i]}: ${r.arrivalMs}`));
  });
});

// --- 16: an overloaded replay -----------------------------------------------

/**
 * A replay 400 times faster than one instance serves it: its queue grows to
 * tens of thousands. (80,000 requests: with reports pulled, not sent, a request
 * costs about 3 messages, and the run needs several 65,536-delivery slices
 * over the limit.)
 */
const overloaded = (maxQueue: number | null = null) =>
  scenario({
    instances: { model: "batching", count: 1, maxQueue },
    workload: { trace: { generate: { requests: 80_000, ratePerSec: 2000, outputTokens: 4, turnsMean: 1 } } },
  });

Deno.test("an overloaded replay warns once that its queues grow, and its results do not change", () => {
  const warnings: string[] = [];
  const overLimit: RunProgress[] = [];
  const warned = simulate(overloaded(), {
    queueWarningRequests: 2000,
    onWarning: (line) => warnings.push(line),
    onProgress: (p) => p.arrived - p.finished > 2000 && overLimit.push(p),
  });
  assert(overLimit.length >= 2, `over the limit at ${overLimit.length} checks`);
  assertEquals(warnings.length, 1, warnings.join("\n"));
  const m =
    /^warning: (\d+) requests in flight at [\d.]+ s simulated \(more than 2000\): .*instances\.maxQueue/
      .exec(warnings[0]);
  assert(m, warnings[0]);
  assertEquals(Number(m[1]), overLimit[0].arrived - overLimit[0].finished);
  const silent = simulate(overloaded(), {
    queueWarningRequests: Infinity,
    onWarning: () => warnings.push(""),
  });
  assertEquals(warned, silent);
  assertEquals(warnings.length, 1);
});

Deno.test("a replay bounded by instances.maxQueue does not warn; it drops instead", () => {
  const warnings: string[] = [];
  const r = simulate(overloaded(50), {
    queueWarningRequests: 2000,
    onWarning: (line) => warnings.push(line),
  });
  assertEquals(warnings, []);
  assert(r.dropped > 30_000, `dropped ${r.dropped}`);
});

Deno.test("the overload warning goes to stderr by default, and nothing to stdout", () => {
  const { error, log } = console;
  const errors: unknown[][] = [], logs: unknown[][] = [];
  console.error = (...args: unknown[]) => errors.push(args);
  console.log = (...args: unknown[]) => logs.push(args);
  try {
    simulate(overloaded(), { queueWarningRequests: 2000 });
  } finally {
    console.error = error;
    console.log = log;
  }
  assertEquals(logs, []);
  assertEquals(errors.length, 1);
  assertMatch(String(errors[0][0]), /^warning: \d+ requests in flight .*instances\.maxQueue/);
});
