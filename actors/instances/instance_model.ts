/**
 * @module
 * The instance-model seam. Every serving instance, whatever its model, is an
 * {@linkcode InstanceActor}: it takes `serve` commands, accepts or drops each
 * one (dropped requests go to the metrics with a reason), reports its status
 * to the router, and sends each finished request to the metrics. A model
 * supplies only what differs — when it refuses a request, how it admits and
 * serves one, and what its status says — and describes itself for the
 * registry (`actors/instances/instance_models.ts`) with an {@linkcode InstanceModel}.
 */
import type { EnginePresetRef, ModelShape, PresetFileNote } from "./engine_presets.ts";
import type { BlockKeys } from "../kv_cache/prefix_keys.ts";
import type {
  CompletionRecord,
  DropReason,
  FirstToken,
  InstanceStatus,
  MetricsCommand,
  Probe,
  ReportTick,
  Request,
  ServeCommand,
} from "../protocol.ts";
import type { Actor, ActorContext, ActorRef, Message } from "../runtime/kernel.ts";
import { StatusReporter, type StatusReportingOptions } from "./status_reporter.ts";

/** Options for `ServingInstance` (actors/instances/serving_instance.ts) (the FIFO model). */
export interface FifoInstanceOptions {
  /** Fixed cost of every prefill, in ms. */
  readonly overheadMs: number;
  /** Prefill cost per uncached prompt token, in ms. */
  readonly prefillMsPerToken: number;
  /** Decode cost per output token, in ms; 0 ends service at the first token. */
  readonly decodeMsPerToken: number;
  /**
   * `deterministic`: prefill time is exactly the formula. `exponential`: it is
   * drawn from an exponential distribution with the formula as its mean (for
   * M/M/1 validation).
   */
  readonly serviceTime: "deterministic" | "exponential";
  /** Prefix groups the LRU cache holds; 0 disables caching. */
  readonly cacheCapacity: number;
  /** Requests that may wait (not counting the one in service); more are dropped. */
  readonly maxQueue: number;
}

/** Options for `BatchingInstance` (actors/instances/batching_instance.ts). */
export interface BatchingInstanceOptions {
  /** Fixed cost of a step, ms. */
  readonly stepMs: number;
  /** Cost per prefill token in a step, ms. */
  readonly prefillMsPerToken: number;
  /** Cost per decoding sequence in a step, ms. */
  readonly decodeMsPerSeq: number;
  /** Per-request overhead outside the engine, added to first-token and end times, ms. */
  readonly requestOverheadMs: number;
  /**
   * Attention's share of prefill, ms per prefill token per token of context
   * before it: a chunk of n tokens after c computed ones adds this ×
   * (n·c + n(n−1)/2). 0 (every H100 preset: BLIS's fits have no such term)
   * keeps step time linear in tokens; a CPU engine, where attention weighs
   * as much as the weights, needs it (scenarios/wire/README.md,
   * "`deno task calibrate`"). @default 0
   */
  readonly prefillMsPerContextToken?: number;
  /** Tokens per KV block. @default 16 */
  readonly blockTokens: number;
  /** KV capacity in blocks. */
  readonly kvBlocks: number;
  /** Token budget of one step (prefill tokens + one per decoding sequence). */
  readonly maxBatchTokens: number;
  /** Most sequences running at once. */
  readonly maxSeqs: number;
  /**
   * Admit a waiting request only when its whole sequence (prompt, and any
   * output a preempted one already has) fits in the free blocks, though
   * blocks are still taken chunk by chunk: vLLM's
   * `scheduler_reserve_full_isl` (`SchedulerConfig`, on by default; the
   * scheduler passes it to `allocate_slots` as `full_sequence_must_fit`),
   * which keeps chunked prefill from over-admitting long prompts and
   * thrashing the cache. false: admit when the first chunk fits (vLLM before
   * the option). @default true
   */
  readonly reserveFullIsl?: boolean;
  /** Reuse cached prefix blocks. @default true */
  readonly prefixCaching: boolean;
  /** Requests that may wait for admission; more are dropped (`queue_full`). */
  readonly maxQueue: number;
  /** The outbound KV link, for the prefill leg of disaggregated requests. @default free: unlimited, no latency */
  readonly kvLink?: KvTransferConfig;
  /** Host-memory KV tier, blocks (0: none). @default 0 */
  readonly hostKvBlocks?: number;
  /** Bandwidth of loads from the host tier, gigabits per second. @default 512 */
  readonly hostKvGbps?: number;
  /** KV bytes per token, for transfers and host-tier loads (the preset's model shape). @default 57344 (Qwen2.5-7B) */
  readonly bytesPerToken?: number;
}

/** The engine (batching or slots model), resolved from a preset plus overrides. */
export interface EngineConfig extends Omit<BatchingInstanceOptions, "maxQueue"> {
  /** The preset the values started from: a built-in preset's name, or a preset file's path as given. */
  readonly preset: EnginePresetRef;
  /** The slots model's slots (llama-server `--parallel`); present for that model only. */
  readonly slots?: number;
  /** The slots model's `--slot-prompt-similarity` (0 disables it); present for that model only. */
  readonly slotSimilarity?: number;
  /** The slots model's attention cost, ms per step token per KV token held (see `SlotInstanceOptions`); slots only. */
  readonly attentionMsPerKvToken?: number;
  /** A preset file's model shape, when it gives one (absent for built-in presets: see `engineShape`). */
  readonly shape?: ModelShape;
  /** What a preset file says of itself (absent for built-in presets). */
  readonly presetFile?: PresetFileNote;
}

/** Instance fleet: how many, which model, and each model's parameters. */
export interface InstancesConfig extends FifoInstanceOptions {
  /** Number of serving instances. */
  readonly count: number;
  /**
   * A registered model's name (`fifo`: the original study's one-at-a-time
   * model; `batching`: continuous batching; `slots`: llama-server's slots). @default "fifo"
   */
  readonly model: string;
  /** The engine (used when `model` is `batching` or `slots`); each pool's engine starts from it. */
  readonly engine: EngineConfig;
  /**
   * The fleet as pools (batching model): mixed engines, or disaggregated
   * prefill and decode pools. Absent: one pool of `count` instances of
   * `engine` serving whole requests. When present, `count` is their total.
   */
  readonly pools?: readonly PoolConfig[];
  /** The KV link of disaggregated serving (each prefill instance's outbound link). */
  readonly kvTransfer?: KvTransferConfig;
}

/** One pool of identical instances. */
export interface PoolConfig {
  /** Its name in reports. */
  readonly name: string;
  /** `both`: serves whole requests; `prefill`, `decode`: one leg of disaggregated requests. */
  readonly role: PoolRole;
  readonly count: number;
  readonly engine: EngineConfig;
}

/** What a pool's instances do. */
export type PoolRole = "both" | "prefill" | "decode";

/** The KV link's bandwidth and latency. */
export interface KvTransferConfig {
  /** Gigabits per second; Infinity for unlimited. @default 400 */
  readonly gbps: number;
  /** Fixed latency of every transfer, ms. @default 0.02 */
  readonly latencyMs: number;
}

/** The fleet's pools: `instances.pools`, or the one pool they describe without it. */
export function fleetPools(instances: InstancesConfig): readonly PoolConfig[] {
  return instances.pools ??
    [{ name: "fleet", role: "both", count: instances.count, engine: instances.engine }];
}

/** The pool instance `index` of the fleet is in (instances are numbered pool by pool). */
export function poolOfInstance(instances: InstancesConfig, index: number): PoolConfig {
  let first = 0;
  for (const pool of fleetPools(instances)) {
    if (index < first + pool.count) return pool;
    first += pool.count;
  }
  throw new RangeError(`instance ${index} is beyond the fleet's ${first} instances`);
}

/** The pool of every instance of the fleet, in instance order. */
export function instancePools(instances: InstancesConfig): PoolConfig[] {
  return fleetPools(instances).flatMap((pool) => Array.from({ length: pool.count }, () => pool));
}

/** Whether the fleet is disaggregated (it has prefill and decode pools). */
export function isDisaggregated(instances: Pick<InstancesConfig, "pools">): boolean {
  return instances.pools?.some((p) => p.role !== "both") ?? false;
}

/** What the rest of a run sees of a serving instance, whatever its model. */
export interface ServingActor extends Actor<ServeCommand> {
  /** This instance's index among the instances. */
  readonly index: number;
  /** Requests waiting to start. */
  readonly waiting: number;
  /** Requests in service. */
  readonly running: number;
  /**
   * Prompt tokens it would find cached for `request` at `nowMs`, for the
   * routing accounting; changes nothing observable. `keys` are the
   * request's block keys at this instance's block size, when the caller has
   * them already.
   */
  cachedPrefixTokens(request: Request, keys?: BlockKeys, nowMs?: number): number;
  /**
   * Applies work it deferred (a decode stretch) up to `untilMs` when a run
   * stops early, and returns the time of the last step so applied
   * (`-Infinity` when none).
   */
  stopAt(untilMs: number): number;
}

/**
 * A model's own instance, with the hooks a fault wrapper drives
 * (actors/dynamics/faulty_instance.ts): it may be asked for its status at any time,
 * slowed down, made to count into counts that outlive it, and retired.
 */
export interface ModelInstance extends ServingActor {
  /** The status a report would carry now (counts only, no cache events). */
  snapshot(): InstanceStatus;
  /**
   * Counts finished requests into `counts` from now on, instead of its own
   * (a wrapper's, which outlive this instance across restarts). Call it
   * before the instance takes any message.
   */
  shareCounts(counts: FinishCounts): void;
  /**
   * Multiplies service time by `factor` (> 0; 1 restores) — see each
   * model for when it takes effect.
   * @throws {RangeError} when `factor` is not a finite number > 0.
   */
  setSlowdown(factor: number, ctx: ActorContext<Message>): void;
  /** The instance is about to be discarded (a crash, a scale-in): it sends what it owes the metrics. */
  retire(ctx: ActorContext<Message>): void;
}

/**
 * Requests finished at an instance (completed, dropped, or failed), in all
 * and per router replica: a replica's in-flight count there is its own
 * routings minus its entry. The per-replica counts exist only once a
 * command from a replica other than 0 was seen, so a run with one replica
 * reports exactly what it did before replicas existed.
 */
export class FinishCounts {
  /** Requests finished so far. */
  total = 0;
  /** Per replica, once a replica > 0 was seen (entry 0 then includes every earlier finish); else undefined. */
  byReplica: number[] | undefined;

  /** Notes a command from `replica` (absent: 0), before it is accepted or refused. */
  see(replica: number | undefined): void {
    if (replica === undefined || replica === 0) return;
    const by = this.byReplica ??= [this.total]; // every earlier finish was replica 0's
    while (by.length <= replica) by.push(0);
  }

  /** Counts one finished request of `replica` (absent: 0). */
  count(replica: number | undefined): void {
    if (replica !== undefined && replica !== 0) this.see(replica);
    this.total++;
    if (this.byReplica !== undefined) this.byReplica[replica ?? 0]++;
  }
}

/**
 * An instance model, described: one file exports it as `model`; the registry
 * lists it; the wiring builds instances through it.
 */
export interface InstanceModel<Name extends string = string> {
  /** The name in scenarios (`instances.model`) and flags (`--model`). */
  readonly name: Name;
  /** One line, for help text and docs. */
  readonly summary: string;
  /**
   * What the router's cache view counts: prefix groups (the whole shared
   * prefix, as the original study) or KV blocks (whose exact view needs the
   * instances' block events).
   */
  readonly cacheUnit: "groups" | "blocks";
  /**
   * Whether it generates output tokens in engine steps, so that TPOT,
   * tokens/s and KV utilisation mean something (reports show them).
   */
  readonly decodes: boolean;
  /** One line naming the model and its settings, for a run's report: `fifo (30 ms + …)`. */
  describe(config: InstancesConfig): string;
  /** What one instance can cache, in `cacheUnit`: the approximate view's default capacity. */
  cacheCapacity(config: InstancesConfig): number;
  /** Builds instance `index`, sending finished requests to `metrics` and reporting as `reporting` says. */
  create(
    index: number,
    config: InstancesConfig,
    metrics: ActorRef<MetricsCommand>,
    reporting: StatusReportingOptions,
  ): ModelInstance;
}

/**
 * The skeleton every model shares: `serve` is accepted or dropped (the drop
 * counts as finished, so the router's in-flight count lets go of it) and
 * answered with a status report; `report_tick` is the periodic reporter's;
 * `probe` is answered at once with the status now; any other message is
 * the model's own (its timers).
 */
export abstract class InstanceActor<Own extends Message>
  implements Actor<ServeCommand | ReportTick | Probe | Own>, ModelInstance {
  /** This instance's index among the instances. */
  readonly index: number;
  /** Where finished and dropped requests are recorded. */
  protected readonly metrics: ActorRef<MetricsCommand>;
  /** Reports status (and cache events) to the router. */
  protected readonly reporter: StatusReporter;
  /** Network delay of every report, ms (a probe's answer too). */
  readonly #reportDelayMs: number;
  /** Requests completed, dropped or failed here: the router's in-flight count lets go of them. */
  #counts = new FinishCounts();
  /** Where first tokens are announced, if anywhere. */
  readonly #firstTokensTo: ActorRef<FirstToken> | undefined;

  constructor(index: number, metrics: ActorRef<MetricsCommand>, reporting: StatusReportingOptions) {
    this.index = index;
    this.metrics = metrics;
    this.#reportDelayMs = reporting.delayMs;
    this.#firstTokensTo = reporting.firstTokensTo;
    this.reporter = new StatusReporter(index, reporting, () => this.snapshot());
  }

  handle(
    message: ServeCommand | ReportTick | Probe | Own,
    ctx: ActorContext<ServeCommand | ReportTick | Own>,
  ): void {
    switch (message.type) {
      case "serve":
        this.#serve(message as ServeCommand, ctx);
        break;
      case "report_tick":
        this.reporter.tick(ctx as ActorContext<ReportTick>);
        break;
      case "probe":
        // Counts only: cache events wait for the reporter's next report.
        ctx.send((message as Probe).replyTo, this.snapshot(), this.#reportDelayMs);
        break;
      default:
        this.onOwn(message as Own, ctx);
    }
  }

  /** Requests finished here so far (completed, dropped, or failed). */
  protected get finished(): number {
    return this.#counts.total;
  }

  /**
   * Counts one finished request, sent by router replica `replica` (absent:
   * 0); `requestId`, when given, is reported to a router that accounts per
   * request.
   */
  protected countFinished(replica: number | undefined, requestId?: number): void {
    this.#counts.count(replica);
    if (requestId !== undefined) this.reporter.finished(requestId);
  }

  /** Counts into `counts` from now on (a fault wrapper's, which outlive this instance). */
  shareCounts(counts: FinishCounts): void {
    this.#counts = counts;
  }

  /**
   * The status a report would carry now (counts only, no cache events),
   * with the per-replica finished counts once a replica other than 0 sent
   * something here (a copy: a report is plain data).
   */
  snapshot(): InstanceStatus {
    const status = this.status();
    const by = this.#counts.byReplica;
    if (by !== undefined) (status as { finishedBy?: readonly number[] }).finishedBy = by.slice();
    return status;
  }

  /**
   * Multiplies service time by `factor` from now on (1 restores); each
   * model says when it takes effect.
   * @throws {RangeError} when `factor` is not a finite number > 0.
   */
  setSlowdown(factor: number, ctx: ActorContext<Message>): void {
    if (!(factor > 0) || factor === Infinity) {
      throw new RangeError(`setSlowdown: factor: expected a finite number > 0, got ${factor}`);
    }
    this.slowed(factor, ctx as ActorContext<ServeCommand | ReportTick | Own>);
  }

  /** The instance is about to be discarded: sends what it owes the metrics. @default nothing */
  retire(_ctx: ActorContext<Message>): void {}

  #serve(command: ServeCommand, ctx: ActorContext<ServeCommand | ReportTick | Own>): void {
    if (command.replica !== undefined) this.#counts.see(command.replica);
    this.arriving(command, ctx);
    const reason = this.refusal(command.request);
    if (reason === undefined) this.admit(command, ctx);
    else {
      ctx.send(this.metrics, {
        type: "dropped",
        requestId: command.request.id,
        instance: this.index,
        timeMs: ctx.now(),
        reason,
        ...(command.request.sloClass !== undefined && { sloClass: command.request.sloClass }),
      });
      this.#counts.count(command.replica);
      this.reporter.finished(command.request.id);
      this.dropped(command, ctx);
    }
    this.reportServed(command, ctx);
  }

  /**
   * The record of `command`'s request as an engine that bills at least one
   * output token (batching, slots) finishes it: its times, cached tokens and
   * preemptions as the engine kept them.
   */
  protected engineRecord(
    command: ServeCommand,
    run: {
      readonly startMs: number;
      readonly firstTokenMs: number;
      readonly endMs: number;
      readonly cachedTokens: number;
      readonly preemptions: number;
    },
  ): CompletionRecord {
    const { request } = command;
    return {
      requestId: request.id,
      instance: this.index,
      arrivalMs: request.arrivalMs,
      startMs: run.startMs,
      firstTokenMs: run.firstTokenMs,
      endMs: run.endMs,
      promptTokens: request.prefixTokens + request.suffixTokens,
      cachedTokens: run.cachedTokens,
      outputTokens: Math.max(1, request.outputTokens),
      preemptions: run.preemptions,
      routing: command.routing,
      ...(request.sloClass !== undefined ? { sloClass: request.sloClass } : {}),
    };
  }

  /** Sends a finished request's record to the metrics and counts it (for the replica that sent `command`). */
  protected complete(
    record: CompletionRecord,
    command: ServeCommand,
    ctx: ActorContext<ServeCommand | ReportTick | Own>,
  ): void {
    ctx.send(this.metrics, { type: "completed", record });
    this.#counts.count(command.replica);
    this.reporter.finished(command.request.id);
  }

  /**
   * Announces request `requestId`'s first token, `delayMs` from now, with
   * `tokenMs` the estimated time of each further token — only when the
   * instance was asked to (`firstTokensTo`) — and has the next status
   * report tell a router that accounts per request.
   */
  protected firstToken(
    requestId: number,
    delayMs: number,
    tokenMs: number,
    ctx: ActorContext<ServeCommand | ReportTick | Own>,
  ): void {
    this.reporter.prefilled(requestId);
    const to = this.#firstTokensTo;
    if (to === undefined) return;
    const timeMs = ctx.now() + delayMs;
    ctx.send(to, { type: "first_token", requestId, instance: this.index, timeMs, tokenMs }, delayMs);
  }

  /** After a `serve` was dropped: let any partner of the request know. @default nothing */
  protected dropped(_command: ServeCommand, _ctx: ActorContext<ServeCommand | ReportTick | Own>): void {}

  /** Before a `serve` is judged: bring deferred work up to now. @default nothing */
  protected arriving(_command: ServeCommand, _ctx: ActorContext<ServeCommand | ReportTick | Own>): void {}

  /** Why this request cannot be taken (it is then dropped), or undefined to admit it. */
  protected abstract refusal(request: Request): DropReason | undefined;

  /** Takes an accepted request: queue it, start it, or both. */
  protected abstract admit(command: ServeCommand, ctx: ActorContext<ServeCommand | ReportTick | Own>): void;

  /** Reports after a `serve` was accepted or dropped: always, to its `replyTo`. */
  protected reportServed(command: ServeCommand, ctx: ActorContext<ServeCommand | ReportTick | Own>): void {
    this.reporter.changed(ctx as ActorContext<ReportTick>, command.replyTo);
  }

  /** Handles the model's own messages (its timers). */
  protected abstract onOwn(message: Own, ctx: ActorContext<ServeCommand | ReportTick | Own>): void;

  /** Applies a validated slowdown factor (see {@linkcode ModelInstance.setSlowdown}). */
  protected abstract slowed(factor: number, ctx: ActorContext<ServeCommand | ReportTick | Own>): void;

  /** The status report the router gets now. */
  protected abstract status(): InstanceStatus;

  /** Requests waiting to start. */
  abstract get waiting(): number;

  /** Requests in service. */
  abstract get running(): number;

  /** Prompt tokens it would find cached for `request` at `nowMs` (see {@linkcode ServingActor}). */
  abstract cachedPrefixTokens(request: Request, keys?: BlockKeys, nowMs?: number): number;

  /** Applies deferred work up to `untilMs` when a run stops early (see {@linkcode ServingActor}). */
  abstract stopAt(untilMs: number): number;
}
