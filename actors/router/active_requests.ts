/**
 * @module
 * The router's own count of what it sent each instance and has not heard
 * finished — Dynamo's `ActiveSequences` (lib/kv-router, the slot tracker):
 * prompt tokens still to prefill (from dispatch to first token, less the
 * prefix the router believed cached) and the distinct prompt blocks of the
 * active requests (shared prefix blocks once), from dispatch to finish.
 */
import { NumberTable } from "../kv_cache/number_table.ts";
import type { BlockKeys } from "../kv_cache/prefix_keys.ts";
import type { Request } from "../protocol.ts";

/** One dispatched request, as the router accounts for it. */
interface Entry {
  /** Prompt tokens still counted as prefill (0 once its first token came). */
  prefillTokens: number;
  /** Its keyed blocks, as `[runKey, blocks of that run, …]` pairs. */
  readonly runs: readonly number[];
  /** Its blocks no other request shares (the prompt's unkeyed full and partial blocks). */
  readonly privateBlocks: number;
}

/** Per instance: the active requests' prefill tokens and distinct blocks. */
export class ActiveRequests {
  /** Per instance: prompt tokens dispatched and not yet past their first token. */
  readonly prefillTokens: Float64Array;
  /** Per instance: distinct prompt blocks of the requests dispatched and not finished. */
  readonly blocks: Float64Array;
  /**
   * Per instance: request id → its entry. Tables, not `Map`s: a long-lived
   * `Map` reallocates its table in the old generation whenever it grows or
   * shrinks, and this one churns with every request (design.md, "Performance").
   */
  readonly #entries: NumberTable<Entry>[];
  /** Per instance: run key → the blocks of that run each active request uses. */
  readonly #runs: NumberTable<number[]>[];
  readonly #blockTokens: number;

  constructor(instanceCount: number, blockTokens: number) {
    this.prefillTokens = new Float64Array(instanceCount);
    this.blocks = new Float64Array(instanceCount);
    this.#entries = Array.from({ length: instanceCount }, () => new NumberTable<Entry>(16));
    this.#runs = Array.from({ length: instanceCount }, () => new NumberTable<number[]>(16));
    this.#blockTokens = blockTokens;
  }

  /**
   * `request` was sent to `instance`, where the router believed its first
   * `overlapBlocks` blocks cached: Dynamo's `isl − overlap × block_size`
   * prefill tokens, and its blocks, become active there.
   */
  add(instance: number, request: Request, keys: BlockKeys, overlapBlocks: number): void {
    const entries = this.#entries[instance];
    if (entries.get(request.id) !== undefined) this.#remove(instance, request.id);
    const B = this.#blockTokens, prompt = request.prefixTokens + request.suffixTokens;
    const prefillTokens = Math.max(0, prompt - overlapBlocks * B);
    const runs: number[] = [];
    const per = keys.runBlocks, table = this.#runs[instance];
    let added = 0;
    for (let r = 0, start = 0; start < keys.count; r++, start += per) {
      const key = keys.runKey(r), extent = Math.min(per, keys.count - start);
      runs.push(key, extent);
      let extents = table.get(key);
      if (extents === undefined) table.set(key, extents = []);
      const before = maxOf(extents);
      extents.push(extent);
      added += Math.max(0, extent - before);
    }
    const privateBlocks = Math.ceil(prompt / B) - keys.count;
    entries.set(request.id, { prefillTokens, runs, privateBlocks });
    this.prefillTokens[instance] += prefillTokens;
    this.blocks[instance] += added + privateBlocks;
  }

  /** Prompt blocks of `request` that `instance`'s active requests do not hold (all of them, but a shared leading run). */
  newBlocks(instance: number, request: Request, keys: BlockKeys): number {
    const B = this.#blockTokens, total = Math.ceil((request.prefixTokens + request.suffixTokens) / B);
    const per = keys.runBlocks, table = this.#runs[instance];
    let shared = 0;
    for (let r = 0, start = 0; start < keys.count; r++, start += per) {
      const extent = Math.min(per, keys.count - start);
      const held = maxOf(table.get(keys.runKey(r)));
      shared += Math.min(extent, held);
      // Block hashes chain: past a block none holds, nothing is shared.
      if (held < extent) break;
    }
    return total - shared;
  }

  /** Request `requestId` produced its first token at `instance`: its prefill tokens are done. */
  prefilled(instance: number, requestId: number): void {
    const entry = this.#entries[instance].get(requestId);
    if (entry === undefined) return;
    this.prefillTokens[instance] -= entry.prefillTokens;
    entry.prefillTokens = 0;
  }

  /**
   * `instance` restarted cold (a crash, or provisioned anew): nothing the
   * router sent the one before is active there. Its requests in flight
   * failed and were let go one by one; this also lets go of those whose
   * finish the old instance never got to report.
   */
  forget(instance: number): void {
    this.#entries[instance].clear();
    this.#runs[instance].clear();
    this.prefillTokens[instance] = 0;
    this.blocks[instance] = 0;
  }

  /** Request `requestId` finished (or failed) at `instance`: nothing of it is active there any more. */
  finished(instance: number, requestId: number): void {
    if (this.#entries[instance].get(requestId) !== undefined) this.#remove(instance, requestId);
  }

  #remove(instance: number, requestId: number): void {
    const entries = this.#entries[instance], entry = entries.get(requestId)!;
    entries.delete(requestId);
    this.prefillTokens[instance] -= entry.prefillTokens;
    const table = this.#runs[instance], runs = entry.runs;
    let removed = entry.privateBlocks;
    for (let j = 0; j < runs.length; j += 2) {
      const extents = table.get(runs[j])!;
      const before = maxOf(extents);
      extents.splice(extents.indexOf(runs[j + 1]), 1);
      if (extents.length === 0) table.delete(runs[j]);
      removed += before - maxOf(extents);
    }
    this.blocks[instance] -= removed;
  }
}

/** The largest of `extents` (0 for none). */
function maxOf(extents: readonly number[] | undefined): number {
  let max = 0;
  if (extents !== undefined) { for (const e of extents) if (e > max) max = e; }
  return max;
}
