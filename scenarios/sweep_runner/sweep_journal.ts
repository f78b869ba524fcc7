/**
 * @module
 * The sweep journal: an append-only JSONL file recording each finished point
 * (all its runs' results) as it completes, flushed to disk, so an interrupted
 * sweep resumes where it stopped and shards can be merged. The first line
 * identifies the sweep; each later line is one point with a checksum, so a
 * torn last line (a crash mid-write) is detected and that point re-run.
 */
import type { RunResult } from "../../actors/simulation.ts";
import { fnv1a } from "../../actors/policies/chwbl.ts";
import { SIMULATOR_VERSION } from "../../actors/version.ts";
import { withPath } from "../cli/file_system_error.ts";
import { UsageError } from "../cli/usage_error.ts";

/** What a journal belongs to. */
export interface JournalHeader {
  readonly kind: "request-routing-sim sweep journal";
  /** Simulator version that produced it. */
  readonly version: string;
  /** The sweep spec as read (so `merge` can rebuild the sweep), and its hash. */
  readonly spec: unknown;
  readonly specHash: string;
  /** A plugin added to the sweep, if any. */
  readonly plugin?: { readonly name: string; readonly url: string };
  /** This journal's share of the points: shard `index` of `count` (1/1 for a whole sweep). */
  readonly shard: { readonly index: number; readonly count: number };
  /** Points this journal is responsible for. */
  readonly points: readonly number[];
}

/** One finished point. */
export interface JournalPoint {
  readonly point: number;
  /** Its runs' results, in run order. */
  readonly runs: readonly RunResult[];
}

/** A stable hash of a JSON value (keys in written order, as read from the spec file). */
export function specHash(spec: unknown): string {
  return fnv1a(JSON.stringify(spec)).toString(16).padStart(8, "0");
}

/** Which points shard `index` of `count` owns: every `count`-th point, from `index − 1`. */
export function shardPoints(totalPoints: number, index: number, count: number): number[] {
  const points = [];
  for (let p = index - 1; p < totalPoints; p += count) points.push(p);
  return points;
}

/**
 * Appends finished points to a journal file, flushing each record. A failed
 * write (a full disk) does not reject {@linkcode JournalWriter.add}, which a
 * sweep chains from its progress callback: it is kept in `failure` and
 * reported to `onFailure` once, and later records are skipped.
 */
export class JournalWriter {
  readonly #file: Deno.FsFile;
  readonly #path: string;
  readonly #encoder = new TextEncoder();
  /** The first write error, if any (its message names the journal). */
  failure: Error | undefined;
  /** Called once, with the first write error. */
  onFailure: ((error: Error) => void) | undefined;

  private constructor(file: Deno.FsFile, path: string) {
    this.#file = file;
    this.#path = path;
  }

  /** Starts a fresh journal (truncating any old one) with `header`. */
  static async create(path: string, header: JournalHeader): Promise<JournalWriter> {
    const file = await Deno.open(path, { write: true, create: true, truncate: true });
    const writer = new JournalWriter(file, path);
    await writer.#append(JSON.stringify(header));
    return writer;
  }

  /** Continues an existing journal: drops a torn tail so new records start on a clean line. */
  static async resume(path: string, validBytes: number): Promise<JournalWriter> {
    const file = await Deno.open(path, { write: true });
    await file.truncate(validBytes);
    await file.seek(validBytes, Deno.SeekMode.Start);
    return new JournalWriter(file, path);
  }

  /** Records one finished point and flushes it to disk (a failure goes to `failure`, see the class). */
  async add(point: JournalPoint): Promise<void> {
    if (this.failure !== undefined) return;
    const runs = JSON.stringify(point.runs);
    try {
      await this.#append(`{"point":${point.point},"crc":"${checksum(point.point, runs)}","runs":${runs}}`);
    } catch (error) {
      this.failure = error as Error;
      this.onFailure?.(this.failure);
    }
  }

  async #append(line: string): Promise<void> {
    const bytes = this.#encoder.encode(line + "\n");
    try {
      let written = 0;
      while (written < bytes.length) written += await this.#file.write(bytes.subarray(written));
      await this.#file.syncData();
    } catch (error) {
      throw withPath(error, "write", this.#path); // a full disk names the journal
    }
  }

  close(): void {
    this.#file.close();
  }
}

/** Checksum of one record: its point number and its runs' JSON. */
function checksum(point: number, runsJson: string): string {
  return fnv1a(`${point}:${runsJson}`).toString(16);
}

/** A journal read back: its header, its intact points, and where the intact part ends. */
export interface JournalContents {
  /** Undefined when even the header line was torn (the sweep died as it started): nothing to resume. */
  readonly header: JournalHeader | undefined;
  readonly points: ReadonlyMap<number, readonly RunResult[]>;
  /** Bytes of intact records (a torn tail after this is ignored). */
  readonly validBytes: number;
  /** Whether a torn or corrupt record was found (and ignored). */
  readonly torn: boolean;
}

/**
 * Reads a journal. A record that does not parse or whose checksum fails ends
 * the intact part: it and anything after it are ignored (their points re-run).
 * @throws {UsageError} when the file is missing or its header is not a journal's.
 */
export async function readJournal(path: string): Promise<JournalContents> {
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (error) {
    throw new UsageError(
      `cannot read sweep journal "${path}": ${
        error instanceof Deno.errors.NotFound ? "no such file" : (error as Error).message
      }`,
    );
  }
  const text = new TextDecoder().decode(bytes);
  const lines = text.split("\n");
  if (lines.length === 1) {
    return { header: undefined, points: new Map(), validBytes: 0, torn: text.length > 0 };
  }
  let header: JournalHeader;
  try {
    header = JSON.parse(lines[0]);
  } catch {
    throw new UsageError(`"${path}" is not a sweep journal (its first line is not JSON)`);
  }
  if (header?.kind !== "request-routing-sim sweep journal") {
    throw new UsageError(`"${path}" is not a sweep journal`);
  }
  const encoder = new TextEncoder();
  let validBytes = encoder.encode(lines[0] + "\n").length;
  const points = new Map<number, readonly RunResult[]>();
  let torn = false;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const last = i === lines.length - 1;
    if (last && line === "") break; // the file ends with a newline
    try {
      if (last) throw new Error("no newline: torn write");
      const record = JSON.parse(line) as { point: number; crc: string; runs: unknown };
      if (checksum(record.point, JSON.stringify(record.runs)) !== record.crc) {
        throw new Error("checksum mismatch");
      }
      points.set(record.point, record.runs as RunResult[]);
      validBytes += encoder.encode(line + "\n").length;
    } catch {
      torn = true;
      break;
    }
  }
  return { header, points, validBytes, torn };
}

/** The header a sweep would write, for comparison with an existing journal. */
export function journalHeader(
  spec: unknown,
  shard: { index: number; count: number },
  points: readonly number[],
  plugin?: { name: string; url: string },
): JournalHeader {
  return {
    kind: "request-routing-sim sweep journal",
    version: SIMULATOR_VERSION,
    spec,
    specHash: specHash(spec),
    ...(plugin ? { plugin } : {}),
    shard,
    points,
  };
}
