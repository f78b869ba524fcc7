/**
 * @module
 * A continuous-batching serving instance (vLLM v1-like): the engine runs
 * steps; each step packs the decoding sequences and prefill chunks up to a
 * token budget and a sequence limit; step time = stepMs + prefillMsPerToken ×
 * prefill tokens + decodeMsPerSeq × decoding sequences. KV memory is counted
 * in blocks, taken per scheduled chunk; full keyed blocks are cached (hits for
 * others) as soon as they are scheduled; unreferenced blocks are evicted LRU;
 * a sequence that cannot get its next chunk's blocks preempts the newest.
 */
import { HostKvTier } from "../kv_cache/host_kv_tier.ts";
import { KvBlockCache } from "../kv_cache/kv_block_cache.ts";
import { type BlockKeys, blockKeys } from "../kv_cache/prefix_keys.ts";
import { engineShape, kvBytesPerToken, presetLabel } from "./engine_presets.ts";
import { type BatchingInstanceOptions, InstanceActor, type InstanceModel } from "./instance_model.ts";

export type { BatchingInstanceOptions };
import {
  assertNever,
  type BatchingCommand,
  type CompletionRecord,
  type DropReason,
  type InstanceStats,
  type InstanceStatus,
  type KvArrived,
  type KvPull,
  type MetricsCommand,
  type PdAbandoned,
  type PdLeg,
  type PrefillDone,
  type PrefilledCommand,
  type Request,
  type ServeCommand,
} from "../protocol.ts";
import type { ActorContext, ActorRef, TimerId } from "../runtime/kernel.ts";
import { EVENT_DRIVEN, type StatusReportingOptions } from "./status_reporter.ts";

/**
 * A link on which KV transfers queue, one at a time in request order (a
 * prefill instance's outbound link; the host tier's PCIe link): a transfer of
 * n tokens occupies it n × bytes per token × 8 / (Gb/s × 10⁹) s and arrives
 * `latencyMs` after it leaves (design.md, "Disaggregated serving").
 */
class KvLink {
  /** When the link is next free, ms. */
  #freeMs = 0;

  constructor(
    readonly bytesPerToken: number,
    readonly gbps: number,
    readonly latencyMs: number,
  ) {}

  /** Queues a transfer of `tokens` at `nowMs`; returns when it starts on the link (its arrival: {@linkcode arrivalMs}). */
  reserve(tokens: number, nowMs: number): number {
    const startMs = Math.max(nowMs, this.#freeMs);
    this.#freeMs = startMs + this.#wireMs(tokens);
    return startMs;
  }

  /** When a transfer of `tokens` that started at `startMs` arrives. */
  arrivalMs(tokens: number, startMs: number): number {
    return startMs + this.#wireMs(tokens) + this.latencyMs;
  }

  #wireMs(tokens: number): number {
    return tokens * this.bytesPerToken * 8e-6 / this.gbps;
  }
}

/** The batching model's own messages: its timers and the disaggregated legs' KV handshake. */
type Own =
  | { readonly type: "step_done" }
  | { readonly type: "kv_sent"; readonly requestId: number }
  | { readonly type: "host_loaded"; readonly requestId: number }
  | KvPull
  | KvArrived
  | PdAbandoned;

const STEP_DONE: Own = Object.freeze({ type: "step_done" });

/** One admitted request. */
interface Sequence {
  readonly command: ServeCommand;
  readonly request: Request;
  /**
   * Tokens whose KV the sequence holds once computed: the prompt, then one
   * more per decode step; after a preemption, prompt + tokens generated.
   */
  target: number;
  /** Tokens of `target` computed (cached tokens count as computed). */
  computed: number;
  /** Output tokens produced. */
  generated: number;
  /** Prompt tokens found cached at first admission. */
  cachedTokens: number;
  /**
   * Cached keyed blocks this sequence references (`0..keys−1`): its hits, and
   * its own keyed blocks from the step that scheduled them on.
   */
  keys: number;
  /**
   * Blocks held privately: unkeyed ones (suffix, output), and keyed ones not
   * cached (yet: a pull or host load on the way; ever: prefix caching off).
   */
  privateBlocks: number;
  /** Tokens scheduled in the current step (0: not in the step). */
  chunk: number;
  startMs: number;
  firstTokenMs: number;
  preemptions: number;
  /** The prompt's keyed blocks, in runs. */
  readonly blockKeys: BlockKeys;
  /** Full blocks of the prompt that carry a key. */
  readonly keyedBlocks: number;
  /** Disaggregated: the leg served here (absent: the whole request). */
  leg: PdLeg | undefined;
  /** Its KV is on the way (a decode leg's pull, a host-tier load): the engine skips it until it arrives. */
  awaitingKv: boolean;
  /** Prefill leg: its prefill finished; it leaves the engine and waits for its pull. */
  handOff: boolean;
  /** Prompt tokens loaded from the host tier at admission. */
  hostTokens: number;
  kvTransferMs: number;
  kvQueueMs: number;
  /** When its load from the host tier ends, ms. */
  loadedMs: number;
  /** Prefill leg, held: when its pull came, when its transfer started on the link, and who pulled. */
  pulledMs: number;
  linkStartMs: number;
  pulledBy: KvPull["replyTo"] | undefined;
}

/**
 * A stretch of identical decode steps the instance runs as one event
 * (design.md, "Block runs and decode stretches"): every running sequence decodes, nobody
 * waits, and nothing anyone could observe happens until its last step ends —
 * no request finishes, no allocation fails, no eviction is reported. The
 * steps in between are applied lazily, with the same arithmetic in the same
 * order, when a message arrives or the stretch ends.
 */
interface Stretch {
  /** Duration of each step, ms. */
  readonly stepMs: number;
  /** Steps in the stretch, K; its timer fires at the end of step K − 1. */
  readonly steps: number;
  /** Sequences per phase: `phase[p]` = sequences whose KV tokens ≡ p (mod block size) at step 0. */
  readonly phase: Int32Array;
  /** Step boundaries applied so far (step j starts at boundary j; boundary 0 is the stretch's start). */
  applied: number;
  /** Time of boundary `applied`. */
  appliedMs: number;
  /** Time of boundary `applied + 1`. */
  nextMs: number;
  readonly timer: TimerId;
}

/**
 * Serves requests by continuous batching. Reports `status` to the router on
 * every accepted request and after each step that changed its counts, each
 * finished request to the metrics collector, and its running totals
 * (`instance_stats`) whenever it goes idle.
 */
export class BatchingInstance extends InstanceActor<Own> {
  readonly cache: KvBlockCache;
  readonly #options: BatchingInstanceOptions;
  /** Waiting sequences from `#waitingHead` on; admitted ones leave an empty slot (nothing retains them). */
  #waiting: (Sequence | undefined)[] = [];
  #waitingHead = 0;
  readonly #running: Sequence[] = [];
  #stepping = false;
  #replyTo: ActorRef<InstanceStatus> | undefined;
  readonly #groupOfFirstKey = new Map<number, number>();
  /** What the last report said: waiting, running, finished, prefilling, then the load signals. */
  readonly #lastReported = new Float64Array(7).fill(NaN);
  #waitingPromptTokens = 0;
  #busyMs = 0;
  #preemptions = 0;
  #steps = 0;
  #kvBlockMs = 0;
  #lastAccountMs = 0;
  #stretch: Stretch | undefined;
  readonly #coalesce: boolean;
  readonly #eventDriven: boolean;
  /**
   * Reports go on a board and the router reads load signals: a stretch's
   * skipped step boundaries are posted when the router asks (`#pullStretch`)
   * or the stretch ends, instead of breaking every stretch into steps.
   */
  readonly #pullsLoad: boolean;
  /** Step boundaries of the stretch in progress whose state is posted (0: its start's). */
  #postedBoundary = 0;
  /** The board's puller of this instance's stretch (see `#pullsLoad`). */
  readonly #pullStretch = (nowMs: number): boolean => {
    const stretch = this.#stretch;
    if (stretch === undefined) return false;
    this.#catchUp(nowMs, false);
    this.#postBoundaries(stretch);
    return true;
  };
  /** Admitted sequences still owed their first token. */
  #prefilling = 0;
  /** Sequences by KV tokens mod block size, for the stretch in progress. */
  readonly #phase: Int32Array;
  /** Prefill legs done here, holding their KV until their decode instance pulls it, by request id. */
  readonly #held = new Map<number, Sequence>();
  /** Decode legs whose KV is on its way, by request id. */
  readonly #pulling = new Map<number, Sequence>();
  /** The outbound link, for the prefill legs' KV. */
  readonly #link: KvLink;
  /** The host-memory tier, if any; blocks evicted from GPU go there. */
  readonly host: HostKvTier | undefined;
  /** Sequences whose prefix is loading from the host tier, by request id. */
  readonly #loading = new Map<number, Sequence>();
  /** The host tier's link (PCIe), for loads. */
  readonly #hostLink: KvLink;
  /** The factor on step time (a `slow` fault); 1: none. */
  #slowdown = 1;

  constructor(
    index: number,
    options: BatchingInstanceOptions,
    metrics: ActorRef<MetricsCommand>,
    reporting: StatusReportingOptions = EVENT_DRIVEN,
  ) {
    super(index, metrics, reporting);
    this.#options = options;
    const bytesPerToken = options.bytesPerToken ?? 57344;
    this.#link = new KvLink(bytesPerToken, options.kvLink?.gbps ?? Infinity, options.kvLink?.latencyMs ?? 0);
    this.#hostLink = new KvLink(bytesPerToken, options.hostKvGbps ?? 512, 0);
    this.cache = new KvBlockCache(options.kvBlocks, options.prefixCaching);
    const host = this.host = (options.hostKvBlocks ?? 0) > 0
      ? new HostKvTier(options.hostKvBlocks!)
      : undefined;
    this.#phase = new Int32Array(options.blockTokens);
    const reporter = this.reporter;
    const wantsBlocks = reporter.wantsBlockEvents;
    this.cache.onRunChange = (key, cached) => {
      host?.gpuChanged(key, cached);
      if (wantsBlocks) reporter.runChanged(key, cached);
      if (cached > 0) return;
      const group = this.#groupOfFirstKey.get(key);
      if (group !== undefined) {
        this.#groupOfFirstKey.delete(key);
        reporter.groupEvicted(group);
      }
    };
    // Stretches keep every report where it was: none is due inside one when
    // the instance reports on change and no load signal is watched — or the
    // load signals are pulled, their changes posted at their boundaries.
    this.#eventDriven = reporting.intervalMs === 0;
    this.#pullsLoad = reporter.pulled && reporter.wantsLoadSignals;
    this.#coalesce = this.#eventDriven && (!reporter.wantsLoadSignals || this.#pullsLoad);
  }

  /** Requests waiting for admission. */
  get waiting(): number {
    return this.#waiting.length - this.#waitingHead;
  }

  /**
   * Prompt tokens admission would find cached for `request` at `nowMs` (the
   * same cap as admission: keyed blocks, never the prompt's last token). The
   * router's accounting reads it (with the request's keys at this instance's
   * block size, when it has them already). It changes nothing observable: a
   * decode stretch in progress is first brought up to the step boundaries
   * before `nowMs` (a boundary at `nowMs` itself is left to the instance's
   * own next message), whose evictions a step-by-step run would have made.
   */
  cachedPrefixTokens(
    request: Request,
    keys: BlockKeys = blockKeys(request, this.#options.blockTokens),
    nowMs = -Infinity,
  ): number {
    this.#catchUp(nowMs, false);
    const B = this.#options.blockTokens;
    const prompt = request.prefixTokens + request.suffixTokens;
    const limit = Math.min(keys.count, Math.floor((prompt - 1) / B));
    return Math.min(this.cache.matchPrefix(keys, limit) * B, prompt);
  }

  /** Sequences admitted and not finished. */
  get running(): number {
    return this.#running.length;
  }

  /** Preemptions so far (vLLM's `vllm:num_preemptions`). */
  get preemptions(): number {
    return this.#preemptions;
  }

  protected onOwn(message: Own, ctx: ActorContext<BatchingCommand>): void {
    switch (message.type) {
      case "step_done":
        return this.#stepDone(ctx);
      case "kv_pull":
        return this.#pull(message, ctx);
      case "kv_sent":
        return this.#sent(message.requestId, ctx);
      case "kv_arrived":
        return this.#arrived(message, ctx);
      case "host_loaded":
        return this.#hostLoaded(message.requestId, ctx);
      case "pd_abandoned":
        this.#replyTo = message.replyTo;
        this.countFinished(message.replica, message.requestId);
        return this.#report(ctx, true);
      default:
        assertNever(message);
    }
  }

  /**
   * A dropped leg lets its partner go: a dropped decode leg cancels its pull
   * (the prefill instance frees the KV); a dropped prefill leg whose decode
   * instance was chosen first tells it the request will not come.
   */
  protected override dropped(command: ServeCommand, ctx: ActorContext<BatchingCommand>): void {
    const leg = command.leg;
    if (leg?.phase === "decode") {
      ctx.send(leg.prefill.ref, {
        type: "kv_pull",
        requestId: command.request.id,
        tokens: -1,
        replyTo: ctx.self,
      });
    } else if (leg?.phase === "prefill" && leg.decode !== undefined) {
      ctx.send(leg.decode.ref, {
        type: "pd_abandoned",
        requestId: command.request.id,
        replyTo: command.replyTo,
        ...(command.replica !== undefined && { replica: command.replica }),
      });
    }
  }

  /** The prefill leg hands off: it leaves the engine, keeps its KV, and tells who picks (or is) its decode instance. */
  #handOff(seq: Sequence, ctx: ActorContext<BatchingCommand>): void {
    const { request, command } = seq;
    this.#held.set(request.id, seq);
    // The prefill is done: a router counting its own active prefill (Dynamo) lets go of it now.
    this.reporter.prefilled(request.id);
    const prefill: PrefillDone = {
      index: this.index,
      ref: ctx.self,
      startMs: seq.startMs,
      cachedTokens: seq.cachedTokens,
      hostCachedTokens: seq.hostTokens,
    };
    const decode = (seq.leg as Extract<PdLeg, { phase: "prefill" }>).decode;
    if (decode !== undefined) {
      ctx.send(decode.ref, {
        type: "serve",
        request,
        replyTo: command.replyTo,
        routing: command.routing,
        leg: { phase: "decode", prefill },
        ...(command.replica !== undefined && { replica: command.replica }),
      });
    } else {
      const router = command.replyTo as unknown as ActorRef<PrefilledCommand>;
      ctx.send(router, {
        type: "prefilled",
        request,
        routing: command.routing,
        prefill,
        ...(command.replica !== undefined && { replica: command.replica }),
      });
    }
  }

  /** A decode instance pulls a held prefill's KV: the transfer queues on the link (or, cancelled, the KV is freed). */
  #pull(message: KvPull, ctx: ActorContext<BatchingCommand>): void {
    const now = ctx.now();
    if (message.tokens < 0) return this.#letGo(message.requestId, now, ctx);
    const startMs = this.#link.reserve(message.tokens, now);
    const seq = this.#held.get(message.requestId)!;
    seq.pulledMs = now;
    seq.linkStartMs = startMs;
    seq.pulledBy = message.replyTo;
    ctx.scheduleAt(this.#link.arrivalMs(message.tokens, startMs), {
      type: "kv_sent",
      requestId: message.requestId,
    });
  }

  /** A transfer left the link and arrived: the KV is freed here, and its decode instance told. */
  #sent(requestId: number, ctx: ActorContext<BatchingCommand>): void {
    const now = ctx.now();
    const seq = this.#held.get(requestId)!;
    ctx.send(seq.pulledBy!, {
      type: "kv_arrived",
      requestId,
      transferMs: now - seq.pulledMs,
      queueMs: seq.linkStartMs - seq.pulledMs,
    });
    this.#letGo(requestId, now, ctx);
  }

  /** Frees a held prefill's KV; the request is finished here. */
  #letGo(requestId: number, now: number, ctx: ActorContext<BatchingCommand>): void {
    const seq = this.#held.get(requestId)!;
    this.#held.delete(requestId);
    if (this.#stretch !== undefined) this.#endStretch(ctx);
    this.#account(now);
    this.cache.release(seq.blockKeys, seq.keys, seq.privateBlocks);
    this.countFinished(seq.command.replica, requestId);
    // The freed blocks may admit a request that was waiting for them.
    if (!this.#stepping) this.#startStep(ctx);
    this.#report(ctx, false);
  }

  /** A decode leg's KV arrived: its prompt blocks are cached here now, and it decodes from the next step. */
  #arrived(message: KvArrived, ctx: ActorContext<BatchingCommand>): void {
    const seq = this.#pulling.get(message.requestId)!;
    this.#pulling.delete(message.requestId);
    seq.kvTransferMs = message.transferMs;
    seq.kvQueueMs = message.queueMs;
    if (!seq.awaitingKv) return; // preempted while pulling: it recomputes here instead
    if (this.#stretch !== undefined) this.#endStretch(ctx);
    seq.awaitingKv = false;
    // vLLM's `_update_waiting_for_remote_kv`: the pulled blocks are cached once they are here.
    this.#cacheUpTo(seq, seq.target, ctx.now());
    if (!this.#stepping) this.#startStep(ctx);
  }

  /**
   * Loads the `blocks` after a sequence's GPU hits from the host tier (they
   * are allocated already): the sequence waits, out of the engine's steps,
   * until they arrive on the host link (one load at a time).
   */
  #loadFromHost(seq: Sequence, blocks: number, ctx: ActorContext<BatchingCommand>): void {
    const tokens = blocks * this.#options.blockTokens;
    seq.awaitingKv = true;
    seq.loadedMs = this.#hostLink.arrivalMs(tokens, this.#hostLink.reserve(tokens, ctx.now()));
    this.#loading.set(seq.request.id, seq);
    ctx.scheduleAt(seq.loadedMs, { type: "host_loaded", requestId: seq.request.id });
  }

  /** A host-tier load finished: the sequence prefills the rest of its prompt from the next step. */
  #hostLoaded(requestId: number, ctx: ActorContext<BatchingCommand>): void {
    const seq = this.#loading.get(requestId);
    // Preempted while loading (it recomputes instead), or an earlier load's timer.
    if (seq === undefined || ctx.now() < seq.loadedMs) return;
    this.#loading.delete(requestId);
    if (this.#stretch !== undefined) this.#endStretch(ctx);
    seq.awaitingKv = false;
    // Loaded blocks are cached once they are here, as a pull's are.
    this.#cacheUpTo(seq, seq.computed, ctx.now());
    if (!this.#stepping) this.#startStep(ctx);
  }

  /** A stretch in progress ends before anything new happens here. */
  protected override arriving(command: ServeCommand, ctx: ActorContext<BatchingCommand>): void {
    if (this.#stretch !== undefined) this.#endStretch(ctx);
    this.#replyTo = command.replyTo;
  }

  /** `too_long` when prompt and output could never fit in KV; `queue_full` when the admission queue is. */
  protected refusal(request: Request): DropReason | undefined {
    const options = this.#options;
    const prompt = request.prefixTokens + request.suffixTokens;
    if (Math.ceil((prompt + Math.max(1, request.outputTokens)) / options.blockTokens) > options.kvBlocks) {
      return "too_long";
    }
    return this.waiting >= options.maxQueue ? "queue_full" : undefined;
  }

  protected admit(command: ServeCommand, ctx: ActorContext<BatchingCommand>): void {
    const { request } = command;
    const seq = this.#sequence(command);
    this.#enqueue(seq);
    // Advertise the request's group at once, as the FIFO model does: by the
    // time later requests run, this one will have computed it.
    if (request.prefixGroup >= 0 && this.#options.prefixCaching && seq.keyedBlocks > 0) {
      const first = seq.blockKeys.runKey(0);
      if (!this.#groupOfFirstKey.has(first)) {
        this.#groupOfFirstKey.set(first, request.prefixGroup);
        this.reporter.groupAdded(request.prefixGroup);
      }
    }
    if (!this.#stepping) this.#startStep(ctx);
  }

  /** Always reports after a `serve` (periodic reports keep their rhythm: no stretches then, see the constructor). */
  protected override reportServed(_command: ServeCommand, ctx: ActorContext<BatchingCommand>): void {
    this.#report(ctx, true);
  }

  /** Queues `seq` for admission: behind every request of its priority or higher (FIFO without priorities). */
  #enqueue(seq: Sequence): void {
    const waiting = this.#waiting, priority = seq.request.priority;
    if (priority === undefined || waiting.length === this.#waitingHead) waiting.push(seq);
    else {
      let at = waiting.length;
      while (at > this.#waitingHead && (waiting[at - 1]!.request.priority ?? 0) < priority) at--;
      waiting.splice(at, 0, seq);
    }
    this.#waitingPromptTokens += this.#toPrefill(seq);
  }

  /** Prompt tokens `seq` will prefill here once admitted: none for a decode leg, whose KV is pulled. */
  #toPrefill(seq: Sequence): number {
    return seq.leg?.phase === "decode" ? 0 : seq.target;
  }

  #sequence(command: ServeCommand): Sequence {
    const { request } = command;
    const keys = blockKeys(request, this.#options.blockTokens);
    return {
      command,
      request,
      target: request.prefixTokens + request.suffixTokens,
      computed: 0,
      generated: 0,
      cachedTokens: -1,
      keys: 0,
      privateBlocks: 0,
      chunk: 0,
      startMs: -1,
      firstTokenMs: -1,
      preemptions: 0,
      blockKeys: keys,
      keyedBlocks: keys.count,
      leg: command.leg,
      awaitingKv: false,
      handOff: false,
      hostTokens: 0,
      kvTransferMs: -1,
      kvQueueMs: -1,
      loadedMs: 0,
      pulledMs: 0,
      linkStartMs: 0,
      pulledBy: undefined,
    };
  }

  /**
   * Builds and starts the next step, if there is work: vLLM v1's `schedule()`.
   * Running sequences first, in admission order: each gets its next chunk
   * (prefill) or token (decode) and the blocks for it, preempting the newest
   * when there are none; then, unless that preempted anyone, waiting requests
   * in order while budget, sequence slots and blocks allow.
   */
  #startStep(ctx: ActorContext<BatchingCommand>): void {
    const o = this.#options;
    let budget = o.maxBatchTokens;
    let prefillTokens = 0, decoding = 0, contextPairs = 0;
    const running = this.#running, preemptionsBefore = this.#preemptions;
    const attention = o.prefillMsPerContextToken ?? 0;
    for (let i = 0; i < running.length && budget > 0; i++) {
      const seq = running[i];
      if (seq.awaitingKv) continue;
      const prefill = seq.computed < seq.target;
      const chunk = prefill ? Math.min(seq.target - seq.computed, budget) : 1;
      // Preempted itself: it was the newest, so nothing after it is left.
      if (!this.#allocateOrPreempt(seq, seq.computed + chunk, ctx)) break;
      seq.chunk = chunk;
      budget -= chunk;
      if (prefill) {
        prefillTokens += chunk;
        if (attention > 0) contextPairs += contextPairsOf(seq.computed, chunk);
        this.#cacheScheduled(seq, ctx.now());
      } else decoding++;
    }
    // vLLM admits nobody in a step that preempted, unless the step would be
    // empty (its next, immediate schedule() would admit them).
    const mayAdmit = this.#preemptions === preemptionsBefore || prefillTokens + decoding === 0;
    while (mayAdmit && budget > 0 && running.length < o.maxSeqs && this.waiting > 0) {
      const seq = this.#waiting[this.#waitingHead]!;
      if (!this.#admit(seq, budget, ctx)) break;
      this.#waiting[this.#waitingHead++] = undefined;
      this.#waitingPromptTokens -= this.#toPrefill(seq);
      running.push(seq);
      if (seq.awaitingKv) continue;
      seq.chunk = Math.min(seq.target - seq.computed, budget);
      budget -= seq.chunk;
      prefillTokens += seq.chunk;
      if (attention > 0) contextPairs += contextPairsOf(seq.computed, seq.chunk);
      this.#cacheScheduled(seq, ctx.now());
    }
    if (this.#waitingHead === this.#waiting.length) this.#waiting.length = this.#waitingHead = 0;
    else if (this.#waitingHead > 1024 && this.#waitingHead * 2 > this.#waiting.length) {
      this.#waiting = this.#waiting.slice(this.#waitingHead);
      this.#waitingHead = 0;
    }
    if (prefillTokens === 0 && decoding === 0) {
      this.#stepping = false;
      // Idle, but still holding KV for a transfer or waiting for one: its
      // totals go out when it lets the last of them go and idles again.
      if (running.length > 0 || this.#held.size > 0) return;
      this.#account(ctx.now());
      ctx.send(this.metrics, this.#stats());
      return;
    }
    this.#stepping = true;
    this.#steps++;
    const stepMs = (o.stepMs + o.prefillMsPerToken * prefillTokens + o.decodeMsPerSeq * decoding +
      (attention > 0 ? attention * contextPairs : 0)) * this.#slowdown;
    this.#busyMs += stepMs;
    const stretch = this.#coalesce && prefillTokens === 0 && decoding === running.length &&
      this.waiting === 0 &&
      this.#planStretch(stepMs, ctx);
    if (!stretch) ctx.schedule(stepMs, STEP_DONE);
  }

  /**
   * Starts a stretch of identical decode steps from the one starting now, if
   * more than one can run as one: up to the first step that finishes a
   * sequence, stopping before a step whose allocations could fail (a
   * preemption), would evict a block the router must hear of, or would evict
   * a group's first block. Returns whether it did.
   */
  #planStretch(stepMs: number, ctx: ActorContext<BatchingCommand>): boolean {
    const running = this.#running, B = this.#options.blockTokens, cache = this.cache;
    let finishIn = Infinity;
    for (const seq of running) {
      // A decode leg's first token is news (its TTFT): never inside a stretch.
      if (seq.generated === 0) return false;
      const left = Math.max(1, seq.request.outputTokens) - seq.generated;
      if (left < finishIn) finishIn = left;
    }
    if (finishIn <= 1) return false;
    // Each sequence takes a block at every boundary where its KV fills one.
    const phase = this.#phase.fill(0);
    let allocations = 0;
    for (const seq of running) {
      phase[seq.target % B]++;
      allocations += Math.floor((seq.target + finishIn - 1) / B) - Math.floor(seq.target / B);
    }
    const free = cache.free;
    let steps = finishIn;
    if (allocations > free) {
      // Evictions allowed: none when the router hears of every block; else up
      // to the first that would empty a group's first run (a reported event).
      const room = free + cache.evictable;
      const evictions = this.reporter.wantsBlockEvents
        ? 0
        : cache.evictionsKeeping(Math.min(room, allocations) - free, this.#groupOfFirstKey);
      let total = 0;
      for (steps = 1; steps < finishIn; steps++) {
        const next = total + phase[(B - (steps % B)) % B];
        if (next > room || next - free > evictions) break;
        total = next;
      }
      if (steps <= 1) return false;
    }
    const now = ctx.now();
    let endMs = now;
    for (let j = 0; j < steps; j++) endMs += stepMs; // as the kernel adds each step's delay
    this.#stretch = {
      stepMs,
      steps,
      phase,
      applied: 0,
      appliedMs: now,
      nextMs: now + stepMs,
      timer: ctx.scheduleAt(endMs, STEP_DONE),
    };
    if (this.#pullsLoad) {
      this.#postedBoundary = 0;
      this.reporter.board!.watch(this.index, this.#pullStretch);
    }
    return true;
  }

  /**
   * Applies the stretch's step boundaries up to `now` (`inclusive`: and at
   * it; never its last: that is its timer's), and returns the time of the
   * last boundary applied.
   */
  #catchUp(now: number, inclusive = true): number {
    const stretch = this.#stretch;
    if (stretch === undefined) return -Infinity;
    if (!(inclusive ? stretch.nextMs <= now : stretch.nextMs < now) || stretch.applied + 1 >= stretch.steps) {
      return stretch.appliedMs;
    }
    const B = this.#options.blockTokens, phase = stretch.phase, cache = this.cache;
    const from = stretch.applied;
    let j = from, t = stretch.appliedMs, next = stretch.nextMs;
    while (j + 1 < stretch.steps && (inclusive ? next <= now : next < now)) {
      j++;
      t = next;
      next = t + stretch.stepMs;
      // Boundary j: every sequence advanced one token; those whose KV now
      // fills its last block take one more (as `#startStep` would, in order).
      const allocations = phase[(B - (j % B)) % B];
      if (allocations > 0) {
        this.#account(t);
        cache.allocate(allocations);
      }
      this.#busyMs += stretch.stepMs;
      this.#steps++;
    }
    const steps = j - from;
    for (const seq of this.#running) {
      seq.privateBlocks += Math.floor((seq.target + steps) / B) - Math.floor(seq.target / B);
      seq.generated += steps;
      seq.target += steps;
      seq.computed += steps;
    }
    stretch.applied = j;
    stretch.appliedMs = t;
    stretch.nextMs = next;
    return t;
  }

  /**
   * A run stopped at `untilMs`: applies the stretch's boundaries up to it, as
   * a step-by-step run would have delivered them, and returns the time of the
   * last one (−∞ when there is no stretch), so the run's clock ends where it
   * would have.
   */
  stopAt(untilMs: number): number {
    return this.#catchUp(untilMs);
  }

  /** A message arrived mid-stretch: apply it up to now and go on step by step from the step in progress. */
  #endStretch(ctx: ActorContext<BatchingCommand>): void {
    const stretch = this.#stretch!;
    if (this.#pullsLoad) {
      // The boundaries before now stand for reports sent before now; one at now, for one sent now.
      this.#catchUp(ctx.now(), false);
      this.#postBoundaries(stretch);
    }
    this.#catchUp(ctx.now());
    if (this.#pullsLoad) this.#postBoundaries(stretch);
    this.#stretch = undefined;
    if (stretch.applied + 1 < stretch.steps) {
      ctx.cancel(stretch.timer);
      ctx.scheduleAt(stretch.nextMs, STEP_DONE);
    }
  }

  /**
   * Admits `seq` if there are blocks for it (vLLM's `get_computed_blocks`,
   * the connector's match, then `allocate_slots`): its cached prefix — which
   * includes blocks that sequences scheduled earlier in this same step are
   * computing now — is referenced; its host-tier blocks (loaded before it
   * runs) and its first chunk, at most `budget` tokens, get new blocks; a
   * decode leg gets blocks for its whole prompt, which arrives whole. Changes
   * nothing and returns false when the blocks are not there.
   */
  #admit(seq: Sequence, budget: number, ctx: ActorContext<BatchingCommand>): boolean {
    const B = this.#options.blockTokens;
    const cache = this.cache, keys = seq.blockKeys, leg = seq.leg;
    // At least one token is always computed, so a full hit still runs one step.
    const limit = Math.min(seq.keyedBlocks, Math.floor((seq.target - 1) / B));
    const hits = cache.matchPrefix(keys, limit);
    // The host tier continues the GPU's match.
    const loaded = this.host === undefined || leg?.phase === "decode"
      ? 0
      : this.host.match(keys, hits, limit);
    const computed = (hits + loaded) * B;
    const tokens = leg?.phase === "decode" ? seq.target : loaded > 0
      ? computed // its first chunk waits for the load
      : computed + Math.min(seq.target - computed, budget);
    const needed = Math.ceil(tokens / B) - hits;
    // The gate counts the whole sequence (vLLM's full_sequence_must_fit); only the chunk's blocks are taken.
    const gate = this.#options.reserveFullIsl === false
      ? needed
      : Math.max(needed, Math.ceil(seq.target / B) - hits);
    if (gate + cache.unreferenced(keys, hits) > cache.free + cache.evictable) return false;
    this.#account(ctx.now());
    if (loaded > 0) this.host!.take(keys, hits, loaded);
    cache.acquire(keys, hits);
    cache.allocate(needed);
    seq.keys = hits;
    seq.privateBlocks = needed;
    if (seq.generated === 0) this.#prefilling++;
    seq.computed = computed;
    if (loaded > 0) this.#loadFromHost(seq, loaded, ctx);
    if (leg?.phase === "decode") {
      // Its KV comes from the prefill instance: all but the blocks held here.
      const local = Math.min(hits * B, seq.target);
      seq.computed = seq.target;
      seq.awaitingKv = true;
      seq.cachedTokens = leg.prefill.cachedTokens;
      seq.hostTokens = leg.prefill.hostCachedTokens;
      seq.startMs = leg.prefill.startMs;
      this.#pulling.set(seq.request.id, seq);
      ctx.send(leg.prefill.ref, {
        type: "kv_pull",
        requestId: seq.request.id,
        tokens: seq.target - local,
        replyTo: ctx.self,
      });
    } else if (seq.cachedTokens < 0) {
      const prompt = seq.request.prefixTokens + seq.request.suffixTokens;
      seq.cachedTokens = Math.min(computed, prompt);
      seq.hostTokens = seq.cachedTokens - Math.min(hits * B, prompt);
      seq.startMs = ctx.now();
    }
    return true;
  }

  /**
   * Gives `seq` the blocks to hold `tokens` KV tokens (its next chunk or
   * decode token), preempting the newest running sequences while there are
   * none — vLLM's FCFS `self.running.pop()`. Returns false when `seq` itself
   * was preempted.
   */
  #allocateOrPreempt(seq: Sequence, tokens: number, ctx: ActorContext<BatchingCommand>): boolean {
    const needed = Math.ceil(tokens / this.#options.blockTokens) - seq.keys - seq.privateBlocks;
    if (needed <= 0) return true;
    this.#account(ctx.now());
    while (!this.cache.allocate(needed)) {
      const victim = this.#running[this.#running.length - 1];
      this.#preempt(victim);
      if (victim === seq) return false;
    }
    seq.privateBlocks += needed;
    return true;
  }

  /** The full keyed blocks of the chunk just scheduled for `seq` are cached: hits for any request from now on. */
  #cacheScheduled(seq: Sequence, now: number): void {
    this.#cacheUpTo(seq, seq.computed + seq.chunk, now);
  }

  /**
   * Caches `seq`'s private keyed blocks among its first `tokens` tokens
   * (vLLM's `cache_blocks(request, num_tokens)` caches every full block;
   * only prompt blocks carry keys here: design.md, "Block life").
   */
  #cacheUpTo(seq: Sequence, tokens: number, now: number): void {
    const to = Math.min(seq.keyedBlocks, Math.floor(tokens / this.#options.blockTokens));
    if (!this.#options.prefixCaching || to <= seq.keys) return;
    this.#account(now);
    this.cache.publish(seq.blockKeys, seq.keys, to);
    seq.privateBlocks -= to - seq.keys;
    seq.keys = to;
  }

  /**
   * Recompute preemption: frees every block and puts the sequence back at the
   * head of the queue. A decode leg preempted before its KV arrived stops
   * waiting for it and recomputes its prompt here (as vLLM would).
   */
  #preempt(seq: Sequence): void {
    this.#running.pop();
    if (seq.awaitingKv) {
      // A pull stays registered: its transfer still ends, and is still measured (#arrived).
      this.#loading.delete(seq.request.id);
      seq.awaitingKv = false;
    }
    if (seq.leg?.phase === "decode") seq.leg = undefined;
    if (seq.generated === 0) this.#prefilling--;
    this.cache.release(seq.blockKeys, seq.keys, seq.privateBlocks);
    seq.keys = 0;
    seq.privateBlocks = 0;
    seq.target = seq.request.prefixTokens + seq.request.suffixTokens + seq.generated;
    seq.computed = 0;
    seq.chunk = 0;
    seq.preemptions++;
    this.#preemptions++;
    if (this.#waitingHead > 0) this.#waiting[--this.#waitingHead] = seq;
    else this.#waiting.unshift(seq);
    this.#waitingPromptTokens += seq.target;
  }

  #stepDone(ctx: ActorContext<BatchingCommand>): void {
    const now = ctx.now();
    if (this.#stretch !== undefined) {
      this.#catchUp(now);
      // Its last boundaries (all before now) stand for reports sent before this step's.
      if (this.#pullsLoad) this.#postBoundaries(this.#stretch);
      this.#stretch = undefined;
    }
    const running = this.#running;
    let kept = 0;
    for (let i = 0; i < running.length; i++) {
      const seq = running[i];
      if (seq.chunk > 0) {
        const fresh = seq.firstTokenMs < 0;
        this.#advance(seq, now);
        if (fresh && seq.firstTokenMs >= 0) {
          this.firstToken(seq.request.id, this.#options.requestOverheadMs, this.#decodeStepMs(), ctx);
        }
      }
      seq.chunk = 0;
      if (seq.handOff) this.#handOff(seq, ctx);
      else if (seq.generated >= Math.max(1, seq.request.outputTokens)) this.#finish(seq, now, ctx);
      else running[kept++] = seq;
    }
    running.length = kept;
    this.#startStep(ctx);
    this.#report(ctx, false);
  }

  /** A decode step of the running batch, ms: a first token's estimate of the time each further token takes. */
  #decodeStepMs(): number {
    const o = this.#options;
    return (o.stepMs + o.decodeMsPerSeq * this.#running.length) * this.#slowdown;
  }

  #advance(seq: Sequence, now: number): void {
    if (seq.computed < seq.target) {
      seq.computed += seq.chunk;
      if (seq.computed < seq.target) return;
      // Prefill complete (its keyed blocks were cached when scheduled).
      if (seq.leg?.phase === "prefill") {
        // A prefill leg's first token is its decode instance's to produce.
        seq.handOff = true;
        this.#prefilling--;
        return;
      }
      // The prefill's last position yields the next token: the first one, or,
      // after a recompute, the one after those already generated.
      if (seq.generated === 0) {
        seq.firstTokenMs = now + this.#options.requestOverheadMs;
        this.#prefilling--;
      }
      seq.generated++;
      return;
    }
    if (seq.generated === 0) {
      // A decode leg's first step: its first token.
      seq.firstTokenMs = now + this.#options.requestOverheadMs;
      this.#prefilling--;
    }
    seq.generated++;
    seq.target++;
    seq.computed++;
  }

  #finish(seq: Sequence, now: number, ctx: ActorContext<BatchingCommand>): void {
    this.#account(now);
    this.cache.release(seq.blockKeys, seq.keys, seq.privateBlocks);
    const record: CompletionRecord = {
      ...this.engineRecord(seq.command, {
        startMs: seq.startMs,
        firstTokenMs: seq.firstTokenMs,
        endMs: now + this.#options.requestOverheadMs,
        cachedTokens: seq.cachedTokens,
        preemptions: seq.preemptions,
      }),
      ...(seq.hostTokens > 0 ? { hostCachedTokens: seq.hostTokens } : {}),
      ...(seq.command.leg?.phase === "decode" ? { prefillInstance: seq.command.leg.prefill.index } : {}),
      ...(seq.kvTransferMs >= 0 ? { kvTransferMs: seq.kvTransferMs, kvQueueMs: seq.kvQueueMs } : {}),
    };
    this.complete(record, seq.command, ctx);
  }

  /** The running totals, as the metrics get them. */
  #stats(): InstanceStats {
    return {
      type: "instance_stats",
      instance: this.index,
      kvBlockMs: this.#kvBlockMs,
      kvBlocks: this.#options.kvBlocks,
      preemptions: this.#preemptions,
      steps: this.#steps,
      busyMs: this.#busyMs,
    };
  }

  /**
   * Slows the engine: every step from the next one on takes `factor` times
   * as long (the step in progress keeps its time). A decode stretch in
   * progress ends first, so that its steps after this one are timed anew.
   */
  protected slowed(factor: number, ctx: ActorContext<BatchingCommand>): void {
    if (this.#stretch !== undefined) this.#endStretch(ctx);
    this.#slowdown = factor;
  }

  /**
   * About to be discarded (a crash, a scale-in): sends its running totals
   * up to now — the decode stretch in progress applied up to now, and the
   * step in progress counted whole — to the metrics.
   */
  override retire(ctx: ActorContext<BatchingCommand>): void {
    const now = ctx.now();
    this.#catchUp(now);
    this.#account(now);
    ctx.send(this.metrics, this.#stats());
  }

  /** Integrates KV blocks in use up to `now`. */
  #account(now: number): void {
    this.#kvBlockMs += this.cache.held * (now - this.#lastAccountMs);
    this.#lastAccountMs = now;
  }

  /**
   * Posts the state of `stretch`'s last applied step boundary, if the board
   * has not had it yet, as the report a step-by-step run would have sent
   * there (when anything it carries changed).
   */
  #postBoundaries(stretch: Stretch): void {
    if (stretch.applied <= this.#postedBoundary) return;
    this.#postedBoundary = stretch.applied;
    this.#report(undefined, false, stretch.appliedMs);
  }

  /**
   * Reports status when counts changed (or always, on accept and drop);
   * cache events ride along. On a board, `atMs` dates a report of a step
   * boundary a stretch skipped (and `ctx` may be absent).
   */
  #report(ctx: ActorContext<BatchingCommand> | undefined, always: boolean, atMs?: number): void {
    const replyTo = this.#replyTo;
    if (replyTo === undefined) return;
    // On change, a prefill finishing is news too (hybrid gates on `queued`); a
    // periodic scrape keeps its own rhythm, paced by the counts as before.
    const last = this.#lastReported;
    const prefilling = this.#eventDriven || this.reporter.wantsLoadSignals ? this.#prefilling : 0;
    let same = last[0] === this.waiting && last[1] === this.#running.length && last[2] === this.finished &&
      last[3] === prefilling;
    // Policies that read load signals get a report whenever those change (every step, in practice).
    if (this.reporter.wantsLoadSignals) {
      const c = this.status();
      same &&= last[4] === c.pendingPrefillTokens && last[5] === c.decodeBlocks &&
        last[6] === c.kvUtilization;
      last[4] = c.pendingPrefillTokens;
      last[5] = c.decodeBlocks;
      last[6] = c.kvUtilization;
    }
    if (!always && same && !this.reporter.hasEvents) return;
    last[0] = this.waiting;
    last[1] = this.#running.length;
    last[2] = this.finished;
    last[3] = prefilling;
    this.reporter.changed(ctx, replyTo, atMs);
  }

  protected status(): InstanceStatus {
    let prefill = this.#waitingPromptTokens, decodeBlocks = 0;
    for (const seq of this.#running) {
      if (seq.computed < seq.target) prefill += seq.target - seq.computed;
      else decodeBlocks += seq.keys + seq.privateBlocks;
    }
    return {
      type: "status",
      instance: this.index,
      waiting: this.waiting,
      running: this.#running.length,
      queued: this.waiting + this.#prefilling,
      finished: this.finished,
      pendingPrefillTokens: prefill,
      decodeBlocks,
      kvUtilization: this.cache.held / this.cache.capacity,
    };
  }
}

/** The continuous-batching model, described for the registry (actors/instances/instance_models.ts). */
export const model: InstanceModel<"batching"> = {
  name: "batching",
  summary: "vLLM-like continuous batching: engine steps, KV blocks with prefix caching, preemption",
  cacheUnit: "blocks",
  decodes: true,
  describe: ({ engine: e }) =>
    `batching ${
      presetLabel(e)
    } (step ${e.stepMs} ms + ${e.prefillMsPerToken} ms/prefill token + ${e.decodeMsPerSeq} ms/decoding seq, ` +
    ((e.prefillMsPerContextToken ?? 0) > 0
      ? `+ ${e.prefillMsPerContextToken} ms/prefill token/context token, `
      : "") +
    `${e.kvBlocks} KV blocks of ${e.blockTokens}, budget ${e.maxBatchTokens} tokens, ${e.maxSeqs} seqs)`,
  cacheCapacity: (config) => config.engine.kvBlocks,
  create: (index, config, metrics, reporting) =>
    new BatchingInstance(
      index,
      {
        ...config.engine,
        maxQueue: config.maxQueue,
        kvLink: config.kvTransfer,
        bytesPerToken: kvBytesPerToken(engineShape(config.engine)),
      },
      metrics,
      reporting,
    ),
};

/**
 * Token pairs a prefill chunk's attention covers: each of its `chunk` tokens
 * attends to the `computed` tokens before the chunk and to those of the
 * chunk before it, n·c + n(n−1)/2.
 */
export function contextPairsOf(computed: number, chunk: number): number {
  return chunk * computed + chunk * (chunk - 1) / 2;
}
