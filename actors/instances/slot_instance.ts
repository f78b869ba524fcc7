/**
 * @module
 * A llama.cpp `llama-server` instance (`instances.model: "slots"`): N slots,
 * each serving one request at a time and keeping the KV of its last prompt;
 * a request takes the idle slot whose cached prompt it shares most of, else
 * the least recently used one; one engine step packs a decode token per
 * generating slot, then prompt tokens slot by slot up to `n_batch`.
 */
import { presetLabel } from "./engine_presets.ts";
import { InstanceActor, type InstanceModel, type InstancesConfig } from "./instance_model.ts";
import { type BlockKeys, blockKeys, type CachedRuns, leadingCachedBlocks } from "../kv_cache/prefix_keys.ts";
import { PriorityFifo } from "./priority_fifo.ts";
import {
  assertNever,
  type DropReason,
  type InstanceStats,
  type InstanceStatus,
  type MetricsCommand,
  type Request,
  type ServeCommand,
  type SlotCommand,
} from "../protocol.ts";
import type { ActorContext, ActorRef } from "../runtime/kernel.ts";
import { EVENT_DRIVEN, type StatusReportingOptions } from "./status_reporter.ts";

/**
 * llama-server's defaults for the settings the slots model adds (snapshot
 * of 2025-02-20): `common_params::n_parallel` = 1 (`--parallel`, `-np`),
 * `common_params::slot_prompt_similarity` = 0.5 (`--slot-prompt-similarity`)
 * and `common_params::n_batch` = 2048 (`--batch-size`), all in
 * `common/common.h`.
 */
export const SLOT_DEFAULTS = Object.freeze({ slots: 1, slotSimilarity: 0.5, maxBatchTokens: 2048 });

/** Options for {@linkcode SlotInstance}. */
export interface SlotInstanceOptions {
  /** Fixed cost of a step, ms. */
  readonly stepMs: number;
  /** Cost per prompt token in a step, ms. */
  readonly prefillMsPerToken: number;
  /** Cost per generating slot in a step, ms. */
  readonly decodeMsPerSeq: number;
  /**
   * Attention's cost, ms per token of a step per token held in the KV
   * cache once the step's tokens are in: llama.cpp keeps one cache for all
   * its slots and every token of a batch attends every occupied cell up to
   * the highest (`kv_self.n`, padded; other slots' cells are masked, still
   * computed: `llama_decode_impl` in src/llama.cpp), so on a CPU a step
   * costs more when the other slots hold long prompts. @default 0
   */
  readonly attentionMsPerKvToken?: number;
  /** Per-request overhead outside the engine, added to first-token and end times, ms. */
  readonly requestOverheadMs: number;
  /** Tokens per block: the granularity at which a slot's cached prompt is matched. */
  readonly blockTokens: number;
  /** KV capacity in blocks (llama-server's `n_ctx` = kvBlocks × blockTokens, shared by the slots). */
  readonly kvBlocks: number;
  /** Tokens one step may hold (llama-server's `n_batch`). @default 2048 */
  readonly maxBatchTokens: number;
  /** Slots (llama-server's `--parallel`). @default 1 */
  readonly slots: number;
  /**
   * The least share of a slot's cached tokens a prompt must share for the
   * slot to be picked by similarity (`--slot-prompt-similarity`); 0 turns
   * the similarity pass off. @default 0.5
   */
  readonly slotSimilarity: number;
  /** Reuse a slot's cached prompt (llama-server's `cache_prompt`, on by default). @default true */
  readonly prefixCaching: boolean;
  /** Requests that may wait for a slot; more are dropped (`queue_full`). */
  readonly maxQueue: number;
}

/** The slots model's own timer. */
type Own = Exclude<SlotCommand, ServeCommand | { readonly type: "report_tick" }>;

const STEP_DONE: Own = Object.freeze({ type: "step_done" });

/** A request waiting for a slot, or served by one. */
interface Task {
  readonly command: ServeCommand;
  readonly request: Request;
  readonly keys: BlockKeys;
  /** Prompt tokens (at least 1: one token is always evaluated). */
  readonly target: number;
  /** Prompt tokens in the slot's KV (cached, then computed). */
  computed: number;
  /** Output tokens produced. */
  generated: number;
  /** Prompt tokens found cached in its slot. */
  cachedTokens: number;
  /** Tokens it has in the step in progress: a prompt chunk, or 1 to decode (0: not in it). */
  chunk: number;
  startMs: number;
  firstTokenMs: number;
}

/** One slot: the KV of its last prompt, as leading keyed blocks by run (see prefix_keys.ts). */
class Slot implements CachedRuns {
  /** Its task, while busy. */
  task: Task | undefined;
  /** Tokens in its KV (llama-server's `cache_tokens.size()`): prompt, then the tokens it decoded. */
  tokens = 0;
  /** When it was last released, as an order (llama-server's `t_last_used`); −1: never used. */
  lastUsed = -1;
  /** Run key → leading blocks of it the slot holds. */
  runs = new Map<number, number>();

  constructor(readonly id: number) {}

  cachedBlocks(runKey: number): number {
    return this.runs.get(runKey) ?? 0;
  }

  /** Leading keyed blocks of `keys` it holds (its longest common prefix with them, in blocks). */
  commonBlocks(keys: BlockKeys): number {
    return this.runs.size === 0 ? 0 : leadingCachedBlocks(keys, keys.count, this);
  }
}

/** llama.cpp's `n_ubatch` default (common/common.h): a batch is computed in micro-batches of this many tokens. */
export const LLAMA_CPP_UBATCH = 512;

/**
 * Token × KV-cell pairs a llama.cpp step's attention computes: its `tokens`
 * go through in micro-batches of `ubatch` (`llama_decode_impl` splits the
 * batch by `n_ubatch`), and every token of a micro-batch attends every
 * occupied cell once the micro-batch is in (`kv_self.n`, the highest
 * occupied cell, whatever slot holds it), `kvBefore` of them before the step.
 */
export function kvAttentionWork(kvBefore: number, tokens: number, ubatch = LLAMA_CPP_UBATCH): number {
  let work = 0, done = 0;
  while (done < tokens) {
    const u = Math.min(ubatch, tokens - done);
    done += u;
    work += u * (kvBefore + done);
  }
  return work;
}

/** The runs of the leading `blocks` keyed blocks of `keys`: run key → blocks. */
function runsOf(keys: BlockKeys, blocks: number): Map<number, number> {
  const runs = new Map<number, number>(), per = keys.runBlocks;
  for (let r = 0; r * per < blocks; r++) runs.set(keys.runKey(r), Math.min(per, blocks - r * per));
  return runs;
}

/**
 * Serves requests as llama-server does (design notes: "The slots model").
 * Reports `status` to the router on every accepted request and after each
 * step that changed its counts, each finished request to the metrics, and
 * its running totals (`instance_stats`) whenever it goes idle.
 */
export class SlotInstance extends InstanceActor<Own> {
  readonly #options: SlotInstanceOptions;
  readonly #slots: Slot[];
  /** Tokens of context each slot has (llama-server's `n_ctx / n_parallel`). */
  readonly slotTokens: number;
  readonly #queue = new PriorityFifo<Task>((task) => task.request.priority);
  #waitingPromptTokens = 0;
  #stepping = false;
  #replyTo: ActorRef<InstanceStatus> | undefined;
  /** Run key → most leading blocks of it any slot holds: what the router's exact view hears of. */
  readonly #held = new Map<number, number>();
  readonly #groupOfFirstKey = new Map<number, number>();
  /** What the last report said: waiting, running, finished, prefilling, then the load signals. */
  readonly #lastReported = new Float64Array(7).fill(NaN);
  /** Busy slots still owed their first token. */
  #prefilling = 0;
  /** Releases so far: the order of `lastUsed`. */
  #releases = 0;
  /** Tokens in all slots' KV. */
  #kvTokens = 0;
  #kvTokenMs = 0;
  #lastAccountMs = 0;
  #busyMs = 0;
  #steps = 0;
  /** The factor on step time (a `slow` fault); 1: none. */
  #slowdown = 1;

  /** @throws {RangeError} when the slots leave a slot no token of context. */
  constructor(
    index: number,
    options: SlotInstanceOptions,
    metrics: ActorRef<MetricsCommand>,
    reporting: StatusReportingOptions = EVENT_DRIVEN,
  ) {
    super(index, metrics, reporting);
    this.#options = options;
    this.slotTokens = Math.floor(options.kvBlocks * options.blockTokens / options.slots);
    if (!(Number.isInteger(options.slots) && options.slots >= 1 && this.slotTokens >= 1)) {
      throw new RangeError(
        `SlotInstance: slots: expected an integer in [1, kvBlocks × blockTokens], got ${options.slots}`,
      );
    }
    this.#slots = Array.from({ length: options.slots }, (_, id) => new Slot(id));
  }

  /** Requests waiting for a slot. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** Busy slots. */
  get running(): number {
    let busy = 0;
    for (const slot of this.#slots) if (slot.task !== undefined) busy++;
    return busy;
  }

  /** Each slot's cached prompt: tokens in its KV, and the run key → blocks it holds (for tests and diagnostics). */
  slotContents(): { tokens: number; runs: Map<number, number>; busy: boolean }[] {
    return this.#slots.map((s) => ({ tokens: s.tokens, runs: new Map(s.runs), busy: s.task !== undefined }));
  }

  /**
   * Prompt tokens `request` would find cached: in the slot it would take
   * now, or, when none is idle, in the slot that shares most of its prompt
   * (it may get another). Never the whole prompt (one token is always
   * evaluated). No side effects: the router's accounting reads it.
   */
  cachedPrefixTokens(
    request: Request,
    keys: BlockKeys = blockKeys(request, this.#options.blockTokens),
    _nowMs?: number,
  ): number {
    if (!this.#options.prefixCaching) return 0;
    const slot = this.waiting === 0 ? this.#availableSlot(keys) : undefined;
    let blocks = slot?.commonBlocks(keys) ?? 0;
    if (slot === undefined) { for (const s of this.#slots) blocks = Math.max(blocks, s.commonBlocks(keys)); }
    return this.#cachedTokens(blocks, request.prefixTokens + request.suffixTokens);
  }

  /** Nothing is deferred: a stopped run needs no catching up. */
  stopAt(_untilMs: number): number {
    return -Infinity;
  }

  protected onOwn(message: Own, ctx: ActorContext<SlotCommand>): void {
    switch (message.type) {
      case "step_done":
        return this.#stepDone(ctx);
      default:
        assertNever(message.type);
    }
  }

  protected override arriving(command: ServeCommand, _ctx: ActorContext<SlotCommand>): void {
    this.#replyTo = command.replyTo;
  }

  /**
   * `too_long` when prompt and output exceed a slot's context (llama-server
   * would truncate the prompt or shift the context instead: not modelled);
   * `queue_full` when no slot is idle and the queue is full.
   */
  protected refusal(request: Request): DropReason | undefined {
    const prompt = request.prefixTokens + request.suffixTokens;
    if (prompt + Math.max(1, request.outputTokens) > this.slotTokens) return "too_long";
    return this.waiting >= this.#options.maxQueue && !this.#slots.some((s) => s.task === undefined)
      ? "queue_full"
      : undefined;
  }

  protected admit(command: ServeCommand, ctx: ActorContext<SlotCommand>): void {
    const { request } = command;
    const keys = blockKeys(request, this.#options.blockTokens);
    const task: Task = {
      command,
      request,
      keys,
      target: Math.max(1, request.prefixTokens + request.suffixTokens),
      computed: 0,
      generated: 0,
      cachedTokens: 0,
      chunk: 0,
      startMs: -1,
      firstTokenMs: -1,
    };
    // Advertise the request's group at once, as the other models do.
    if (request.prefixGroup >= 0 && this.#options.prefixCaching && keys.count > 0) {
      const first = keys.runKey(0);
      if (!this.#groupOfFirstKey.has(first)) {
        this.#groupOfFirstKey.set(first, request.prefixGroup);
        this.reporter.groupAdded(request.prefixGroup);
      }
    }
    this.#queue.enqueue(task);
    this.#waitingPromptTokens += task.target;
    this.#assignSlots(ctx.now());
    if (!this.#stepping) this.#startStep(ctx);
  }

  /** Always reports after a `serve`. */
  protected override reportServed(_command: ServeCommand, ctx: ActorContext<SlotCommand>): void {
    this.#report(ctx, true);
  }

  /** Slows the engine: every step from the next one on takes `factor` times as long. */
  protected slowed(factor: number, _ctx: ActorContext<SlotCommand>): void {
    this.#slowdown = factor;
  }

  /** About to be discarded: sends its running totals up to now to the metrics. */
  override retire(ctx: ActorContext<SlotCommand>): void {
    this.#account(ctx.now());
    ctx.send(this.metrics, this.#stats());
  }

  /** Cached tokens for a common prefix of `blocks` keyed blocks: "we have to evaluate at least 1 token". */
  #cachedTokens(blocks: number, prompt: number): number {
    const cached = Math.min(blocks * this.#options.blockTokens, prompt);
    return cached >= prompt ? Math.max(0, prompt - 1) : cached;
  }

  /**
   * The idle slot a prompt with `keys` takes (llama-server's
   * `get_available_slot`): among idle slots holding a prompt, the one with
   * the longest common prefix whose share of the slot's cached tokens
   * exceeds `slotSimilarity` (first such slot on ties; the pass is off at
   * 0); else the least recently released (never used first, lowest id on
   * ties). Undefined when every slot is busy.
   */
  #availableSlot(keys: BlockKeys): Slot | undefined {
    const o = this.#options;
    if (o.slotSimilarity !== 0 && o.prefixCaching) {
      let best: Slot | undefined, bestTokens = 0;
      for (const slot of this.#slots) {
        if (slot.task !== undefined || slot.tokens === 0) continue;
        const common = slot.commonBlocks(keys) * o.blockTokens;
        if (common > bestTokens && common / slot.tokens > o.slotSimilarity) {
          best = slot;
          bestTokens = common;
        }
      }
      if (best !== undefined) return best;
    }
    let lru: Slot | undefined;
    for (const slot of this.#slots) {
      if (slot.task === undefined && (lru === undefined || slot.lastUsed < lru.lastUsed)) lru = slot;
    }
    return lru;
  }

  /** Gives waiting requests idle slots, in queue order, while there are both. */
  #assignSlots(now: number): void {
    while (this.#queue.size > 0 && this.#slots.some((s) => s.task === undefined)) {
      const head = this.#queue.dequeue()!;
      this.#waitingPromptTokens -= head.target;
      this.#launch(this.#availableSlot(head.keys)!, head, now);
    }
  }

  /**
   * Starts `task` on `slot` (llama-server's `launch_slot_with_task`, then
   * the prompt's first pass in `update_slots`): the common prefix of the
   * slot's cached prompt and the new one is kept (`common_lcp`, here per
   * block), at most all but the prompt's last token; the rest of the
   * slot's KV is dropped (`llama_kv_cache_seq_rm`).
   */
  #launch(slot: Slot, task: Task, now: number): void {
    const cached = this.#options.prefixCaching
      ? this.#cachedTokens(slot.commonBlocks(task.keys), task.target)
      : 0;
    this.#account(now);
    this.#setTokens(slot, cached);
    this.#hold(slot, task.keys, Math.floor(cached / this.#options.blockTokens));
    slot.task = task;
    task.computed = cached;
    task.cachedTokens = cached;
    task.startMs = now;
    this.#prefilling++;
  }

  /** Sets `slot`'s KV tokens, keeping the instance's total. */
  #setTokens(slot: Slot, tokens: number): void {
    this.#kvTokens += tokens - slot.tokens;
    slot.tokens = tokens;
  }

  /**
   * `slot` now holds the leading `blocks` keyed blocks of `keys` (none
   * without prompt caching): the instance's held runs follow, and the
   * router hears of each run whose most-held length changed.
   */
  #hold(slot: Slot, keys: BlockKeys, blocks: number): void {
    const before = slot.runs;
    const after = this.#options.prefixCaching ? runsOf(keys, Math.min(blocks, keys.count)) : new Map();
    slot.runs = after;
    for (const key of before.keys()) if (after.get(key) !== before.get(key)) this.#runChanged(key);
    for (const key of after.keys()) if (!before.has(key)) this.#runChanged(key);
  }

  /** Run `key`'s most-held length may have changed: keep it, and tell the router and the group view. */
  #runChanged(key: number): void {
    let most = 0;
    for (const slot of this.#slots) most = Math.max(most, slot.cachedBlocks(key));
    if ((this.#held.get(key) ?? 0) === most) return;
    if (most > 0) this.#held.set(key, most);
    else this.#held.delete(key);
    if (this.reporter.wantsBlockEvents) this.reporter.runChanged(key, most);
    if (most > 0) return;
    const group = this.#groupOfFirstKey.get(key);
    if (group !== undefined) {
      this.#groupOfFirstKey.delete(key);
      this.reporter.groupEvicted(group);
    }
  }

  /**
   * Builds and starts the next step, if any slot has work (one iteration of
   * llama-server's `update_slots`): one token per generating slot first,
   * then the prompt tokens of each prefilling slot in slot order, until the
   * step holds `n_batch` tokens. A prompt's tokens are in its slot's cache
   * as soon as they are in a step.
   */
  #startStep(ctx: ActorContext<SlotCommand>): void {
    const o = this.#options;
    let tokens = 0, prefill = 0, decoding = 0;
    for (const slot of this.#slots) {
      const task = slot.task;
      if (task === undefined || task.generated === 0) continue;
      task.chunk = 1;
      decoding++;
      tokens++;
    }
    for (const slot of this.#slots) {
      const task = slot.task;
      if (tokens >= o.maxBatchTokens) break;
      if (task === undefined || task.generated > 0) continue;
      const chunk = Math.min(task.target - task.computed, o.maxBatchTokens - tokens);
      task.chunk = chunk;
      tokens += chunk;
      prefill += chunk;
      this.#hold(slot, task.keys, Math.floor((task.computed + chunk) / o.blockTokens));
    }
    if (tokens === 0) {
      this.#stepping = false;
      this.#account(ctx.now());
      ctx.send(this.metrics, this.#stats());
      return;
    }
    this.#stepping = true;
    this.#steps++;
    const attention = o.attentionMsPerKvToken ?? 0;
    const stepMs = (o.stepMs + o.prefillMsPerToken * prefill + o.decodeMsPerSeq * decoding +
      (attention > 0 ? attention * kvAttentionWork(this.#kvTokens, tokens) : 0)) * this.#slowdown;
    this.#busyMs += stepMs;
    ctx.schedule(stepMs, STEP_DONE);
  }

  /**
   * The step ended: prompts it completed yield their first token, the
   * generating slots one more; finished requests release their slots (in
   * slot order, as `process_token` runs), waiting requests take idle slots,
   * and the next step starts.
   */
  #stepDone(ctx: ActorContext<SlotCommand>): void {
    const now = ctx.now(), o = this.#options;
    this.#account(now);
    // A decode step of the running slots: each token attends every KV cell held (as #startStep prices it).
    const attention = o.attentionMsPerKvToken ?? 0;
    const tokenMs = (o.stepMs + o.decodeMsPerSeq * this.running +
      (attention > 0 ? attention * kvAttentionWork(this.#kvTokens, this.running) : 0)) * this.#slowdown;
    for (const slot of this.#slots) {
      const task = slot.task;
      if (task === undefined || task.chunk === 0) continue;
      if (task.generated > 0) {
        task.generated++;
        this.#setTokens(slot, slot.tokens + 1);
      } else {
        task.computed += task.chunk;
        this.#setTokens(slot, task.computed);
        if (task.computed >= task.target) {
          task.generated = 1;
          task.firstTokenMs = now + o.requestOverheadMs;
          this.#prefilling--;
          this.firstToken(task.request.id, o.requestOverheadMs, tokenMs, ctx);
        }
      }
      task.chunk = 0;
      if (task.generated >= Math.max(1, task.request.outputTokens)) this.#finish(slot, task, now, ctx);
    }
    this.#stepping = false;
    this.#assignSlots(now);
    this.#startStep(ctx);
    this.#report(ctx, false);
  }

  /** Sends `task`'s record and releases its slot, which keeps its KV (llama-server's `release`). */
  #finish(slot: Slot, task: Task, now: number, ctx: ActorContext<SlotCommand>): void {
    slot.task = undefined;
    slot.lastUsed = this.#releases++;
    const record = this.engineRecord(task.command, {
      startMs: task.startMs,
      firstTokenMs: task.firstTokenMs,
      endMs: now + this.#options.requestOverheadMs,
      cachedTokens: task.cachedTokens,
      preemptions: 0,
    });
    this.complete(record, task.command, ctx);
  }

  /** The running totals, as the metrics get them (KV in blocks of `blockTokens` tokens, fractions kept). */
  #stats(): InstanceStats {
    return {
      type: "instance_stats",
      instance: this.index,
      kvBlockMs: this.#kvTokenMs / this.#options.blockTokens,
      kvBlocks: this.#options.kvBlocks,
      preemptions: 0,
      steps: this.#steps,
      busyMs: this.#busyMs,
    };
  }

  /** Integrates KV tokens in use up to `now`. */
  #account(now: number): void {
    this.#kvTokenMs += this.#kvTokens * (now - this.#lastAccountMs);
    this.#lastAccountMs = now;
  }

  /** Reports status when counts changed (or always, on accept and drop); cache events ride along. */
  #report(ctx: ActorContext<SlotCommand>, always: boolean): void {
    const replyTo = this.#replyTo;
    if (replyTo === undefined) return;
    const last = this.#lastReported;
    const running = this.running;
    let same = last[0] === this.waiting && last[1] === running && last[2] === this.finished &&
      last[3] === this.#prefilling;
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
    last[1] = running;
    last[2] = this.finished;
    last[3] = this.#prefilling;
    this.reporter.changed(ctx, replyTo);
  }

  /**
   * Running = busy slots, waiting = queued requests; KV utilisation = tokens
   * in all slots' KV (an idle slot's cached prompt included, as
   * llama-server's `kv_cache_usage_ratio`) / `n_ctx`.
   */
  protected status(): InstanceStatus {
    const B = this.#options.blockTokens;
    let pending = this.#waitingPromptTokens, decodeBlocks = 0, running = 0;
    for (const slot of this.#slots) {
      const task = slot.task;
      if (task === undefined) continue;
      running++;
      if (task.generated === 0) pending += task.target - task.computed;
      else decodeBlocks += Math.ceil(slot.tokens / B);
    }
    return {
      type: "status",
      instance: this.index,
      waiting: this.waiting,
      running,
      queued: this.waiting + this.#prefilling,
      finished: this.finished,
      pendingPrefillTokens: pending,
      decodeBlocks,
      kvUtilization: this.#kvTokens / (this.#options.kvBlocks * B),
    };
  }
}

/** The slots model's options from a fleet's config (slot settings at llama-server's defaults when unset). */
export function slotOptions(config: InstancesConfig): SlotInstanceOptions {
  const e = config.engine;
  return {
    stepMs: e.stepMs,
    prefillMsPerToken: e.prefillMsPerToken,
    decodeMsPerSeq: e.decodeMsPerSeq,
    ...(e.attentionMsPerKvToken !== undefined && { attentionMsPerKvToken: e.attentionMsPerKvToken }),
    requestOverheadMs: e.requestOverheadMs,
    blockTokens: e.blockTokens,
    kvBlocks: e.kvBlocks,
    maxBatchTokens: e.maxBatchTokens,
    slots: e.slots ?? SLOT_DEFAULTS.slots,
    slotSimilarity: e.slotSimilarity ?? SLOT_DEFAULTS.slotSimilarity,
    prefixCaching: e.prefixCaching,
    maxQueue: config.maxQueue,
  };
}

/** llama.cpp's llama-server, described for the registry (actors/instances/instance_models.ts). */
export const model: InstanceModel<"slots"> = {
  name: "slots",
  summary: "llama.cpp llama-server: N slots each keeping its last prompt's KV; steps of up to n_batch tokens",
  cacheUnit: "blocks",
  decodes: true,
  describe: (config) => {
    const e = config.engine, o = slotOptions(config);
    const context = Math.floor(o.kvBlocks * o.blockTokens / o.slots);
    return `slots ${
      presetLabel(e)
    } (${o.slots} slots of ${context} tokens, similarity ${o.slotSimilarity}, ` +
      `step ${o.stepMs} ms + ${o.prefillMsPerToken} ms/prefill token + ${o.decodeMsPerSeq} ms/decoding seq, ` +
      ((o.attentionMsPerKvToken ?? 0) > 0 ? `+ ${o.attentionMsPerKvToken} ms/step token/KV token, ` : "") +
      `n_batch ${o.maxBatchTokens} tokens, KV ${o.kvBlocks} blocks of ${o.blockTokens})`;
  },
  cacheCapacity: (config) => config.engine.kvBlocks,
  create: (index, config, metrics, reporting) =>
    new SlotInstance(index, slotOptions(config), metrics, reporting),
};
