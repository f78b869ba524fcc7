/**
 * @module
 * A deterministic, streaming generator of Mooncake-format traces shaped like
 * chat and agent traffic: shared system prompts, multi-turn sessions whose
 * turns extend their previous context, Poisson session arrivals.
 */
import { ZipfSampler } from "../workload/distributions.ts";
import { EventQueue } from "../runtime/event_queue.ts";
import { createRandomStream, type RandomStream } from "../runtime/random_stream.ts";
import { MOONCAKE_BLOCK_TOKENS } from "./mooncake_format.ts";

/** The generator's parameters (defaults: {@linkcode TRACE_GENERATOR_DEFAULTS}). */
export interface TraceGeneratorOptions {
  /** Seed of the generator's random streams. @default 1 */
  readonly seed: number;
  /** Rows to generate; sessions still open after the last are cut. @default 12000 */
  readonly requests: number;
  /** Mean request rate, requests per second; sessions start at `ratePerSec / turnsMean`. @default 10/3 */
  readonly ratePerSec: number;
  /** Distinct system prompts, Zipf(1) popularity. @default 1 */
  readonly systemPrompts: number;
  /** Tokens of each system prompt, a multiple of 512 (0: none). @default 2048 */
  readonly systemPromptTokens: number;
  /** Mean turns per session (geometric, >= 1). @default 8 */
  readonly turnsMean: number;
  /** Mean time between a chat session's turns, ms (lognormal, σ = 1). @default 60000 */
  readonly thinkTimeMs: number;
  /** Share of sessions that are agents (tool-call waits instead of think times). @default 0.3 */
  readonly agentFrac: number;
  /** Mean time between an agent session's turns, ms (exponential). @default 2000 */
  readonly toolWaitMs: number;
  /** Mean tokens of a session's first message, after the system prompt (lognormal, σ = 1). @default 2500 */
  readonly firstMessageTokens: number;
  /** Mean tokens of each later message or tool result (lognormal, σ = 1). @default 725 */
  readonly messageTokens: number;
  /** Mean output tokens of a request (lognormal, σ = 1). @default 340 */
  readonly outputTokens: number;
}

/** One parameter of the generator: flag, documentation, bounds and default. */
export interface TraceGeneratorParameter {
  /** Command-line flag of `deno task trace-gen`, without `--`. */
  readonly flag: string;
  /** Placeholder of the flag's value in the help (`N`, `R`, `MS`…). */
  readonly placeholder: string;
  /** One-line description. */
  readonly doc: string;
  /** Default value. */
  readonly default: number;
  /** The default as the help shows it, when its number would read badly. @default String(default) */
  readonly shownDefault?: string;
  /** Whole numbers only. */
  readonly integer: boolean;
  /** Lower bound. */
  readonly min: number;
  /** Whether `min` itself is excluded. @default false */
  readonly exclusiveMin?: boolean;
  /** Upper bound, inclusive. @default none */
  readonly max?: number;
  /** The value must be a multiple of this. @default none */
  readonly multipleOf?: number;
}

/**
 * Every parameter of the generator. The command-line flags, their help and
 * the scenario schema (`workload.trace.generate`) derive from this table.
 */
export const TRACE_GENERATOR_PARAMETERS: {
  readonly [K in keyof TraceGeneratorOptions]: TraceGeneratorParameter;
} = {
  seed: {
    flag: "seed",
    placeholder: "N",
    doc: "seed of the generator's random streams",
    default: 1,
    integer: true,
    min: 0,
  },
  requests: {
    flag: "requests",
    placeholder: "N",
    doc: "rows to write (sessions still open are cut)",
    default: 12_000,
    integer: true,
    min: 1,
    max: 1e12,
  },
  ratePerSec: {
    flag: "rate",
    placeholder: "R",
    doc: "mean request rate, requests/s (sessions start at rate / turns-mean)",
    default: 10 / 3,
    shownDefault: "10/3, i.e. 12,000 an hour",
    integer: false,
    min: 0,
    exclusiveMin: true,
  },
  systemPrompts: {
    flag: "system-prompts",
    placeholder: "N",
    doc: "distinct system prompts, Zipf(1) popularity",
    default: 1,
    integer: true,
    min: 1,
    max: 10_000,
  },
  systemPromptTokens: {
    flag: "system-prompt-tokens",
    placeholder: "N",
    doc: "tokens of each system prompt, whole 512-token blocks (0: none)",
    default: 2048,
    integer: true,
    min: 0,
    max: 1_048_576,
    multipleOf: MOONCAKE_BLOCK_TOKENS,
  },
  turnsMean: {
    flag: "turns-mean",
    placeholder: "X",
    doc: "mean turns per session (geometric)",
    default: 8,
    integer: false,
    min: 1,
    max: 10_000,
  },
  thinkTimeMs: {
    flag: "think-time-ms",
    placeholder: "MS",
    doc: "mean time between a chat session's turns, ms (lognormal, sigma 1)",
    default: 60_000,
    integer: false,
    min: 0,
  },
  agentFrac: {
    flag: "agent-frac",
    placeholder: "F",
    doc: "share of sessions that are agents",
    default: 0.3,
    integer: false,
    min: 0,
    max: 1,
  },
  toolWaitMs: {
    flag: "tool-wait-ms",
    placeholder: "MS",
    doc: "mean time between an agent session's turns (tool call), ms (exponential)",
    default: 2000,
    integer: false,
    min: 0,
  },
  firstMessageTokens: {
    flag: "first-message-tokens",
    placeholder: "N",
    doc: "mean tokens of a session's first message (lognormal, sigma 1)",
    default: 2500,
    integer: false,
    min: 1,
    max: 10_000_000,
  },
  messageTokens: {
    flag: "message-tokens",
    placeholder: "N",
    doc: "mean tokens of a later message or tool result (lognormal, sigma 1)",
    default: 725,
    integer: false,
    min: 1,
    max: 10_000_000,
  },
  outputTokens: {
    flag: "output-tokens",
    placeholder: "N",
    doc: "mean output tokens of a request (lognormal, sigma 1)",
    default: 340,
    integer: false,
    min: 1,
    max: 10_000_000,
  },
};

/** The parameters' names, in the table's order. */
export const TRACE_GENERATOR_PARAMETER_NAMES = Object.keys(
  TRACE_GENERATOR_PARAMETERS,
) as readonly (keyof TraceGeneratorOptions)[];

/** Every parameter at its default: ≈ 12,000 requests over an hour, ≈ 12,000-token prompts. */
export const TRACE_GENERATOR_DEFAULTS: TraceGeneratorOptions = Object.fromEntries(
  TRACE_GENERATOR_PARAMETER_NAMES.map((name) => [name, TRACE_GENERATOR_PARAMETERS[name].default]),
) as unknown as TraceGeneratorOptions;

/** What a parameter accepts, as an error or the help states it: `an integer >= 1`, `a number in [0, 1]`. */
export function describeBounds(parameter: TraceGeneratorParameter): string {
  const kind = parameter.integer ? "an integer" : "a number";
  const lower = `${parameter.exclusiveMin ? ">" : ">="} ${parameter.min}`;
  const bounds = parameter.max === undefined
    ? `${kind} ${lower}`
    : parameter.exclusiveMin
    ? `${kind} ${lower} and <= ${parameter.max}`
    : `${kind} in [${parameter.min}, ${parameter.max}]`;
  return parameter.multipleOf === undefined ? bounds : `${bounds}, a multiple of ${parameter.multipleOf}`;
}

/**
 * Checks one parameter's value.
 * @returns undefined when valid, else what was expected (`expected a number > 0`).
 */
export function checkParameter(parameter: TraceGeneratorParameter, value: unknown): string | undefined {
  if (typeof value !== "number" || !Number.isFinite(value)) return "expected a number";
  if (parameter.integer && !Number.isSafeInteger(value)) return "expected an integer";
  if (parameter.exclusiveMin ? !(value > parameter.min) : !(value >= parameter.min)) {
    return `expected a number ${parameter.exclusiveMin ? ">" : ">="} ${parameter.min}`;
  }
  if (parameter.max !== undefined && value > parameter.max) return `expected a number <= ${parameter.max}`;
  if (parameter.multipleOf !== undefined && value % parameter.multipleOf !== 0) {
    return `expected a multiple of ${parameter.multipleOf}`;
  }
  return undefined;
}

/**
 * The complete options: `options` over the defaults, each checked.
 * @throws {RangeError} naming the first invalid parameter, its value and what was expected.
 */
export function resolveTraceGeneratorOptions(
  options: Partial<TraceGeneratorOptions> = {},
): TraceGeneratorOptions {
  const resolved = { ...TRACE_GENERATOR_DEFAULTS, ...options };
  for (const name of TRACE_GENERATOR_PARAMETER_NAMES) {
    const problem = checkParameter(TRACE_GENERATOR_PARAMETERS[name], resolved[name]);
    if (problem) throw new RangeError(`trace generator: ${name}: ${problem}, got ${String(resolved[name])}`);
  }
  const minRate = minGeneratorRatePerSec(resolved.requests);
  if (resolved.ratePerSec < minRate) {
    throw new RangeError(
      `trace generator: ratePerSec: expected a number >= ${minRate} (below it ${resolved.requests} requests ` +
        `span over 2^50 ms, past the integer milliseconds a timestamp holds exactly), got ${resolved.ratePerSec}`,
    );
  }
  return resolved;
}

/** Longest expected span of a generated trace, ms: 2^50, an eighth of the exact integers of a double. */
export const MAX_TRACE_SPAN_MS = 2 ** 50;

/** The lowest `ratePerSec` at which `requests` rows span, on average, at most {@linkcode MAX_TRACE_SPAN_MS}. */
export function minGeneratorRatePerSec(requests: number): number {
  const exact = 1000 * requests / MAX_TRACE_SPAN_MS;
  const unit = 10 ** (Math.floor(Math.log10(exact)) - 2);
  return Number((Math.ceil(exact / unit) * unit).toPrecision(3));
}

/** One request of a Mooncake trace, as a JSONL line holds it. */
export interface MooncakeRow {
  /** Arrival, integer ms from the start of the trace. */
  readonly timestamp: number;
  /** Prompt tokens. */
  readonly input_length: number;
  /** Output tokens. */
  readonly output_length: number;
  /** One id per 512-token block of the prompt; an id names its block and every block before it. */
  readonly hash_ids: readonly number[];
}

/** A generated row with what the trace format leaves out (for tests and statistics). */
export interface GeneratedRequest extends MooncakeRow {
  /** The session, numbered in start order (sessions started before the trace's window included). */
  readonly session: number;
  /** The turn within its session, from 1. */
  readonly turn: number;
  /** Whether the session is an agent's. */
  readonly agent: boolean;
}

/** The JSONL line of a row: its four Mooncake fields, nothing else. */
export function mooncakeLine(row: MooncakeRow): string {
  return JSON.stringify({
    timestamp: row.timestamp,
    input_length: row.input_length,
    output_length: row.output_length,
    hash_ids: row.hash_ids,
  });
}

/** Shape of every lognormal the generator draws (token lengths, think times). */
export const LOGNORMAL_SIGMA = 1;

/**
 * Sessions are generated from this many mean session lengths before the
 * trace's window opens, so the window starts in steady state (sessions
 * already in progress, the request rate already `ratePerSec`).
 */
export const WARM_UP_SESSION_LENGTHS = 10;

/** At most this many requests (expected) are generated and discarded to warm up. */
export const MAX_WARM_UP_REQUESTS = 1_000_000;

interface Session {
  readonly id: number;
  readonly random: RandomStream;
  readonly agent: boolean;
  readonly systemPrompt: number;
  /** Turns still to come. */
  turnsLeft: number;
  /** Turns made so far. */
  turn: number;
  /** The previous turn's prompt and output, tokens. */
  promptTokens: number;
  outputTokens: number;
  /** The previous turn's hash ids (reused in place for the next turn). */
  readonly ids: number[];
  /** Whether a row of this session was returned. */
  seen: boolean;
}

/**
 * Generates a Mooncake trace row by row, in non-decreasing time order, in
 * memory proportional to the sessions open at once (never to the rows).
 *
 * The model (design.md, "Generated traces"): sessions start as a Poisson
 * process at `ratePerSec / turnsMean`; each has a geometric number of turns
 * (mean `turnsMean`), is an agent with probability `agentFrac`, and uses one
 * of `systemPrompts` system prompts (Zipf(1)). Turn 1's prompt is the system
 * prompt and a first message; turn k+1's is turn k's prompt, its output and a
 * new message, so its `hash_ids` keep every full block of turn k's prompt,
 * give turn k's partial last block a new id (its content changed) and new
 * blocks fresh ids. Chat turns are a lognormal think time apart, agent turns
 * an exponential tool wait. The trace is a window of steady-state traffic:
 * sessions start {@linkcode WARM_UP_SESSION_LENGTHS} mean session lengths
 * before it opens, and rows before it are not written.
 *
 * Draws: arrivals from the stream `trace-generator/arrivals`; everything about
 * session n from its own stream `trace-generator/session/n` — at its start,
 * agent or not, system prompt, turns; at each turn, message length, output
 * length, then the wait to its next turn. The first N rows therefore do not
 * depend on `requests` (a longer trace extends a shorter one).
 *
 * @example
 * ```ts
 * const generator = new TraceGenerator({ requests: 100, seed: 7 });
 * for (const row of generator) console.log(mooncakeLine(row));
 * ```
 */
export class TraceGenerator implements Iterable<GeneratedRequest> {
  /** The complete, checked options. */
  readonly options: TraceGeneratorOptions;
  readonly #arrivals: RandomStream;
  readonly #zipf: ZipfSampler;
  readonly #pending = new EventQueue<Session>();
  readonly #meanSessionGapMs: number;
  readonly #systemBlocks: number;
  readonly #firstMu: number;
  readonly #messageMu: number;
  readonly #outputMu: number;
  readonly #thinkMu: number;
  #seq = 0;
  #nextStartMs: number;
  #sessions = 0;
  #nextId: number;
  #generated = 0;
  #sessionsSeen = 0;
  #maxOpen = 0;

  /**
   * @param options Parameters over {@linkcode TRACE_GENERATOR_DEFAULTS}.
   * @throws {RangeError} for an invalid parameter (named, with its value and what was expected).
   */
  constructor(options: Partial<TraceGeneratorOptions> = {}) {
    const o = this.options = resolveTraceGeneratorOptions(options);
    this.#arrivals = createRandomStream(o.seed, "trace-generator/arrivals");
    this.#zipf = new ZipfSampler(o.systemPrompts, 1);
    this.#meanSessionGapMs = 1000 * o.turnsMean / o.ratePerSec;
    this.#systemBlocks = o.systemPromptTokens / MOONCAKE_BLOCK_TOKENS;
    this.#nextId = o.systemPrompts * this.#systemBlocks;
    this.#firstMu = lognormalMu(o.firstMessageTokens);
    this.#messageMu = lognormalMu(o.messageTokens);
    this.#outputMu = lognormalMu(o.outputTokens);
    this.#thinkMu = lognormalMu(o.thinkTimeMs);
    this.#nextStartMs = -warmUpMs(o);
  }

  /** Rows returned so far. */
  get generated(): number {
    return this.#generated;
  }

  /** Sessions with at least one row returned so far. */
  get sessions(): number {
    return this.#sessionsSeen;
  }

  /** Sessions open now (started, not finished): the generator's memory is proportional to it. */
  get openSessions(): number {
    return this.#pending.size;
  }

  /** The most sessions open at once so far. */
  get maxOpenSessions(): number {
    return this.#maxOpen;
  }

  /** The next row, or undefined after `requests` rows. */
  next(): GeneratedRequest | undefined {
    if (this.#generated >= this.options.requests) return undefined;
    const pending = this.#pending;
    for (;;) {
      if (this.#nextStartMs <= pending.peekTimeMs()) {
        this.#startSession();
        continue;
      }
      const session = pending.pop();
      const timeMs = pending.poppedTimeMs;
      const inWindow = timeMs >= 0;
      const row = this.#takeTurn(session, timeMs, inWindow);
      if (session.turnsLeft > 0) pending.push(timeMs + this.#waitMs(session), this.#seq++, 0, session);
      if (row === undefined) continue;
      this.#generated++;
      if (!session.seen) {
        session.seen = true;
        this.#sessionsSeen++;
      }
      return row;
    }
  }

  /** Iterates over the remaining rows. */
  *[Symbol.iterator](): Iterator<GeneratedRequest> {
    for (let row = this.next(); row !== undefined; row = this.next()) yield row;
  }

  #startSession(): void {
    const o = this.options;
    const id = this.#sessions++;
    const random = createRandomStream(o.seed, `trace-generator/session/${id}`);
    const agent = random() < o.agentFrac;
    const systemPrompt = this.#zipf.sample(random);
    const p = 1 / o.turnsMean;
    const u = random();
    const turns = p >= 1 ? 1 : 1 + Math.floor(Math.log(1 - u) / Math.log(1 - p));
    const session: Session = {
      id,
      random,
      agent,
      systemPrompt,
      turnsLeft: turns,
      turn: 0,
      promptTokens: 0,
      outputTokens: 0,
      ids: [],
      seen: false,
    };
    this.#pending.push(this.#nextStartMs, this.#seq++, 0, session);
    if (this.#pending.size > this.#maxOpen) this.#maxOpen = this.#pending.size;
    this.#nextStartMs += -this.#meanSessionGapMs * Math.log(1 - this.#arrivals());
  }

  /** Makes a session's next turn; returns its row when `emit`. */
  #takeTurn(session: Session, timeMs: number, emit: boolean): GeneratedRequest | undefined {
    const r = session.random, ids = session.ids;
    let prompt: number;
    if (session.turn === 0) {
      prompt = this.options.systemPromptTokens + lognormalLength(this.#firstMu, r);
      const first = session.systemPrompt * this.#systemBlocks;
      for (let j = 0; j < this.#systemBlocks; j++) ids.push(first + j);
    } else {
      prompt = session.promptTokens + session.outputTokens + lognormalLength(this.#messageMu, r);
      // Full blocks of the previous prompt stay; its partial last block changed content.
      ids.length = Math.floor(session.promptTokens / MOONCAKE_BLOCK_TOKENS);
    }
    const blocks = Math.ceil(prompt / MOONCAKE_BLOCK_TOKENS);
    while (ids.length < blocks) ids.push(this.#nextId++);
    const output = lognormalLength(this.#outputMu, r);
    session.promptTokens = prompt;
    session.outputTokens = output;
    session.turn++;
    session.turnsLeft--;
    if (!emit) return undefined;
    return {
      timestamp: Math.floor(timeMs),
      input_length: prompt,
      output_length: output,
      hash_ids: ids.slice(),
      session: session.id,
      turn: session.turn,
      agent: session.agent,
    };
  }

  /** The wait after a turn: a chat's think time or an agent's tool call. */
  #waitMs(session: Session): number {
    const o = this.options;
    if (session.agent) return -o.toolWaitMs * Math.log(1 - session.random());
    return o.thinkTimeMs === 0 ? 0 : Math.exp(this.#thinkMu + LOGNORMAL_SIGMA * normal(session.random));
  }
}

/**
 * How long before the window opens the first session starts:
 * {@linkcode WARM_UP_SESSION_LENGTHS} mean session lengths ((turnsMean − 1) ×
 * the mean wait between turns), capped at the time
 * {@linkcode MAX_WARM_UP_REQUESTS} requests take.
 */
export function warmUpMs(options: TraceGeneratorOptions): number {
  const meanWaitMs = (1 - options.agentFrac) * options.thinkTimeMs + options.agentFrac * options.toolWaitMs;
  const sessionMs = (options.turnsMean - 1) * meanWaitMs;
  return Math.min(WARM_UP_SESSION_LENGTHS * sessionMs, 1000 * MAX_WARM_UP_REQUESTS / options.ratePerSec);
}

/** μ of the lognormal with mean `mean` and σ = {@linkcode LOGNORMAL_SIGMA}. */
function lognormalMu(mean: number): number {
  return Math.log(mean) - LOGNORMAL_SIGMA * LOGNORMAL_SIGMA / 2;
}

/** A lognormal token count, rounded, at least 1. */
function lognormalLength(mu: number, random: RandomStream): number {
  return Math.max(1, Math.round(Math.exp(mu + LOGNORMAL_SIGMA * normal(random))));
}

/** A standard normal variate (Box–Muller, two uniform draws, the cosine branch). */
function normal(random: RandomStream): number {
  const radius = Math.sqrt(-2 * Math.log(1 - random()));
  return radius * Math.cos(2 * Math.PI * random());
}
