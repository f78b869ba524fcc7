/**
 * @module
 * Indexes the router keeps over a large fleet so that a decision never scans
 * every instance: the available instances ordered by load, and the holders of
 * each prefix group or first block run. They are updated from what the router
 * already applies — reports, its own routings, failures, cache events — at
 * O(log keys + bucket) per change, and answer a decision at O(log keys), or
 * O(holders) where a policy compares the holders' matches (design.md,
 * "Decisions that do not scan the fleet").
 */
import type { FleetLoad, IndexList, RandomStream } from "../policies/policy.ts";

/**
 * A set of instance indices kept sorted, in a typed array grown by doubling:
 * insertion and removal move the tail (a `copyWithin`), the lowest member and
 * the k-th are O(1).
 */
export class SortedIndices implements IndexSet {
  #members = new Int32Array(4);
  #size = 0;

  /** Number of members. */
  get size(): number {
    return this.#size;
  }

  /** The `k`-th lowest member (0-based); undefined behaviour outside [0, size). */
  at(k: number): number {
    return this.#members[k];
  }

  /** Adds `i`; no effect when present. */
  add(i: number): void {
    const at = this.#search(i);
    if (at < this.#size && this.#members[at] === i) return;
    if (this.#size === this.#members.length) {
      const grown = new Int32Array(this.#members.length * 2);
      grown.set(this.#members);
      this.#members = grown;
    }
    this.#members.copyWithin(at + 1, at, this.#size);
    this.#members[at] = i;
    this.#size++;
  }

  /** Removes `i`; no effect when absent. */
  delete(i: number): void {
    const at = this.#search(i);
    if (at >= this.#size || this.#members[at] !== i) return;
    this.#members.copyWithin(at, at + 1, this.#size);
    this.#size--;
  }

  /** The position of the first member >= `i`. */
  #search(i: number): number {
    const members = this.#members;
    let lo = 0, hi = this.#size;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (members[mid] < i) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** A set of instance indices: its `k`-th member of `size`, in some order. */
export interface IndexSet extends IndexList {
  add(i: number): void;
  delete(i: number): void;
}

/**
 * A set of instance indices in no particular order (the order of its
 * history: deterministic), with O(1) insertion and removal: the last member
 * moves into a removed one's place. `position` is shared by every set an
 * instance can be in at most one of.
 */
class UnorderedIndices implements IndexSet {
  #members = new Int32Array(4);
  #size = 0;
  readonly #position: Int32Array;

  constructor(position: Int32Array) {
    this.#position = position;
  }

  get size(): number {
    return this.#size;
  }

  at(k: number): number {
    return this.#members[k];
  }

  add(i: number): void {
    if (this.#has(i)) return;
    if (this.#size === this.#members.length) {
      const grown = new Int32Array(this.#members.length * 2);
      grown.set(this.#members);
      this.#members = grown;
    }
    this.#members[this.#size] = i;
    this.#position[i] = this.#size++;
  }

  delete(i: number): void {
    if (!this.#has(i)) return;
    const at = this.#position[i], last = this.#members[--this.#size];
    this.#members[at] = last;
    this.#position[last] = at;
  }

  #has(i: number): boolean {
    const at = this.#position[i];
    return at < this.#size && this.#members[at] === i;
  }
}

/**
 * Instances grouped by a numeric key (a load), the distinct keys kept in
 * order: the least and greatest key, and the members of any key — in index
 * order when `ordered` (insertion and removal move a bucket's tail), else in
 * the order of their history (O(1) each: for loads only drawn from). Each
 * instance is under one key at most; the caller remembers which (it moves
 * members between keys).
 */
export class LoadBuckets {
  /** Distinct keys with at least one member, ascending. */
  readonly #keys: number[] = [];
  /** Key → its members (a key leaves when its bucket empties: loads can take any value). */
  readonly #buckets = new Map<number, IndexSet>();
  /** The last emptied bucket, reused by the next new key (a load moving on to the next value). */
  #spare: IndexSet | undefined;
  #size = 0;
  /** Unordered: each instance's position in its bucket. */
  readonly #position: Int32Array | undefined;

  /** @param instanceCount Unordered buckets: the instances there can be (ordered: unused). */
  constructor(ordered = true, instanceCount = 0) {
    this.#position = ordered ? undefined : new Int32Array(instanceCount);
  }

  /** Members in all buckets. */
  get size(): number {
    return this.#size;
  }

  /** The least key with a member; `Infinity` when empty. */
  minKey(): number {
    return this.#keys.length === 0 ? Infinity : this.#keys[0];
  }

  /** The greatest key with a member; `-Infinity` when empty. */
  maxKey(): number {
    return this.#keys.length === 0 ? -Infinity : this.#keys[this.#keys.length - 1];
  }

  /** Distinct keys with a member. */
  get keyCount(): number {
    return this.#keys.length;
  }

  /** The `j`-th least key with a member. */
  keyAt(j: number): number {
    return this.#keys[j];
  }

  /** The members of `key` (undefined or empty when none). */
  bucket(key: number): IndexSet | undefined {
    return this.#buckets.get(key);
  }

  /** The members of the least key (undefined when empty). */
  least(): IndexSet | undefined {
    return this.#keys.length === 0 ? undefined : this.#buckets.get(this.#keys[0]);
  }

  /** Adds `i` under `key` (it must not be a member). */
  add(i: number, key: number): void {
    let bucket = this.#buckets.get(key);
    if (bucket === undefined) {
      bucket = this.#spare ??
        (this.#position === undefined ? new SortedIndices() : new UnorderedIndices(this.#position));
      this.#spare = undefined;
      this.#buckets.set(key, bucket);
      this.#keys.splice(this.#keyPosition(key), 0, key);
    }
    bucket.add(i);
    this.#size++;
  }

  /** Removes `i` from under `key` (where it must be). */
  delete(i: number, key: number): void {
    const bucket = this.#buckets.get(key);
    if (bucket === undefined) return;
    const before = bucket.size;
    bucket.delete(i);
    if (bucket.size === before) return;
    this.#size--;
    if (bucket.size === 0) {
      this.#keys.splice(this.#keyPosition(key), 1);
      this.#buckets.delete(key);
      this.#spare = bucket;
    }
  }

  /** The position of the first key >= `key`. */
  #keyPosition(key: number): number {
    const keys = this.#keys;
    let lo = 0, hi = keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (keys[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

const SIGNALS: readonly FleetLoad[] = ["active", "inFlight", "prefillDecode"];

/** What a {@linkcode FleetIndex} reads: the router's table of the instances. */
export interface IndexedTable {
  readonly instanceCount: number;
  readonly waiting: ArrayLike<number>;
  readonly running: ArrayLike<number>;
  readonly inFlight: ArrayLike<number>;
  readonly pendingPrefillTokens: ArrayLike<number>;
  readonly decodeBlocks: ArrayLike<number>;
  readonly blockTokens: number;
  readonly capacity: ArrayLike<number>;
  readonly available: ArrayLike<number>;
  readonly availableCount: number;
}

/** One load signal's index: the available instances by key, and each one's key as filed. */
class LoadIndex {
  readonly buckets: LoadBuckets;
  /** Per instance: its key as filed, NaN when not filed (unavailable). */
  readonly filed: Float64Array;
  constructor(instanceCount: number, ordered: boolean) {
    this.buckets = new LoadBuckets(ordered, instanceCount);
    this.filed = new Float64Array(instanceCount).fill(NaN);
  }
}

/**
 * The router's indexes over one table's instances: the available instances
 * by load (per {@linkcode FleetLoad}, each built on first use), and the
 * available holders of each cache key the view reports (a prefix group, or a
 * prompt's first block run). The least loaded holder of a key is found by
 * walking its holders when they are few, else by probing the least loads'
 * instances at random for one: a per-key load order would cost a refiling in
 * every key an instance holds at each change of its load.
 *
 * The table calls {@linkcode FleetIndex.loadChanged} and
 * {@linkcode FleetIndex.availabilityChanged}, and its cache view
 * {@linkcode FleetIndex.holderChanged}, whenever what it believes changes;
 * every answer is then what a scan of the table would find, in O(log keys).
 * Ties: `first*` answers give the lowest index (as a scan that keeps the
 * first of equals); `pick*` answers one uniform draw among the tied (a scan
 * draws once per tie it meets: same distribution, different draws —
 * design.md, "Decisions that do not scan the fleet").
 */
export class FleetIndex {
  readonly #table: IndexedTable;
  readonly #loads: (LoadIndex | undefined)[] = [undefined, undefined, undefined];
  /** Key → the available instances believed to hold it, in index order. */
  readonly #holders = new Map<number, SortedIndices>();
  /** Per instance: the keys it is believed to hold (available or not). */
  readonly #held: Set<number>[];
  /** The available instances, in index order; built once a policy asks while some are not. */
  #available: SortedIndices | undefined;
  /** Sum of `inFlight` over available instances (integers: exact in any order), once a policy asks. */
  #inFlightSum = 0;
  /** Sum of `capacity` over available instances, summed in index order (as a scan does); NaN: to recompute. */
  #capacitySum = NaN;
  /** Per instance: the `inFlight` counted in `#inFlightSum` (0 when unavailable); kept once a policy asks. */
  #countedInFlight: Float64Array | undefined;

  constructor(table: IndexedTable) {
    this.#table = table;
    this.#held = Array.from({ length: table.instanceCount }, () => new Set<number>());
  }

  /** Instance `i`'s key under `signal`, computed as a scan computes it. */
  #key(signal: FleetLoad, i: number): number {
    const t = this.#table;
    switch (signal) {
      case "active":
        return (t.waiting[i] + t.running[i]) / t.capacity[i];
      case "inFlight":
        return t.inFlight[i] / t.capacity[i];
      case "prefillDecode":
        return (t.pendingPrefillTokens[i] + t.decodeBlocks[i] * t.blockTokens) / t.capacity[i];
    }
  }

  #index(signal: FleetLoad): LoadIndex {
    const s = SIGNALS.indexOf(signal);
    const existing = this.#loads[s];
    if (existing !== undefined) return existing;
    // Only `inFlight` is asked for its lowest index (SGLang's first of equals); the others are drawn from.
    const index = new LoadIndex(this.#table.instanceCount, signal === "inFlight");
    for (let i = 0; i < this.#table.instanceCount; i++) this.#file(index, signal, i);
    this.#loads[s] = index;
    return index;
  }

  /** Files (or refiles, or removes) instance `i` in `index` from the table's current state. */
  #file(index: LoadIndex, signal: FleetLoad, i: number): void {
    const old = index.filed[i];
    const key = this.#table.available[i] === 1 ? this.#key(signal, i) : NaN;
    if (old === key || (old !== old && key !== key)) return;
    if (old === old) index.buckets.delete(i, old);
    if (key === key) index.buckets.add(i, key);
    index.filed[i] = key;
  }

  #countInFlight(i: number, countedInFlight: Float64Array): void {
    const t = this.#table, counted = t.available[i] === 1 ? t.inFlight[i] : 0;
    this.#inFlightSum += counted - countedInFlight[i];
    countedInFlight[i] = counted;
  }

  /** Instance `i`'s load signals may have changed (a report, a routing, a failure, a sync). */
  loadChanged(i: number): void {
    const loads = this.#loads;
    if (loads[0] !== undefined) this.#file(loads[0], "active", i);
    if (loads[1] !== undefined) this.#file(loads[1], "inFlight", i);
    if (loads[2] !== undefined) this.#file(loads[2], "prefillDecode", i);
    if (this.#countedInFlight !== undefined) this.#countInFlight(i, this.#countedInFlight);
  }

  /** Instance `i` became available or unavailable. */
  availabilityChanged(i: number): void {
    const available = this.#table.available[i] === 1;
    for (const key of this.#held[i]) {
      if (available) this.#holdersOf(key).add(i);
      else this.#dropHolder(i, key);
    }
    if (available) this.#available?.add(i);
    else this.#available?.delete(i);
    this.#capacitySum = NaN;
    this.loadChanged(i);
  }

  #holdersOf(key: number): SortedIndices {
    let holders = this.#holders.get(key);
    if (holders === undefined) {
      holders = new SortedIndices();
      this.#holders.set(key, holders);
    }
    return holders;
  }

  /** The view now believes `i` holds `key` (`held`), or no longer does. */
  holderChanged(i: number, key: number, held: boolean): void {
    const heldBy = this.#held[i];
    if (held === heldBy.has(key)) return;
    if (held) heldBy.add(key);
    else heldBy.delete(key);
    if (this.#table.available[i] !== 1) return;
    if (held) this.#holdersOf(key).add(i);
    else this.#dropHolder(i, key);
  }

  /** Takes `i` out of `key`'s available holders; a key no one holds leaves the map (keys come and go). */
  #dropHolder(i: number, key: number): void {
    const holders = this.#holders.get(key);
    if (holders === undefined) return;
    holders.delete(i);
    if (holders.size === 0) this.#holders.delete(key);
  }

  /** How many keys have an available holder (the holder map's size: it never keeps a key no one holds). */
  get holderKeyCount(): number {
    return this.#holders.size;
  }

  /** The available instances believed to hold `key`, in index order (empty: none). */
  holders(key: number): SortedIndices {
    return this.#holders.get(key) ?? NO_HOLDERS;
  }

  /** The least key of `signal` among available instances; `Infinity` with none. */
  minLoad(signal: FleetLoad): number {
    return this.#index(signal).buckets.minKey();
  }

  /** The greatest key of `signal` among available instances; `-Infinity` with none. */
  maxLoad(signal: FleetLoad): number {
    return this.#index(signal).buckets.maxKey();
  }

  /**
   * The lowest-indexed available instance of least `signal`; -1 with none.
   * O(1) for `inFlight` (kept in index order); the other loads' buckets are
   * unordered, and their least is walked.
   */
  firstLeast(signal: FleetLoad): number {
    const least = this.#index(signal).buckets.least();
    if (least === undefined || least.size === 0) return -1;
    if (signal === "inFlight") return least.at(0);
    let lowest = least.at(0);
    for (let k = 1; k < least.size; k++) lowest = Math.min(lowest, least.at(k));
    return lowest;
  }

  /** A uniformly drawn available instance of least `signal` (one draw when several tie); -1 with none. */
  pickLeast(signal: FleetLoad, random: RandomStream): number {
    return pickFrom(this.#index(signal).buckets.least(), random);
  }

  /**
   * A uniformly drawn available holder of `key` with the least `active`
   * load (one draw when several tie); -1 with none.
   */
  pickLeastActiveHolder(key: number, random: RandomStream): number {
    const holders = this.#holders.get(key);
    if (holders === undefined || holders.size === 0) return -1;
    const active = this.#index("active");
    if (holders.size <= FEW_HOLDERS) return pickLeastOf(holders, active.filed, random);
    // Many holders: walk the loads upward; at each, probe its instances at random for a holder
    // (the first found is uniform among that load's holders), then count them exactly.
    const heldBy = this.#held, buckets = active.buckets;
    for (let level = 0; level < buckets.keyCount; level++) {
      const load = buckets.keyAt(level), bucket = buckets.bucket(load)!;
      for (let probe = 0; probe < HOLDER_PROBES; probe++) {
        const i = bucket.at(Math.min(bucket.size - 1, Math.floor(random() * bucket.size)));
        if (heldBy[i].has(key)) return i;
      }
      const found = bucket.size <= holders.size
        ? pickWhere(bucket, (i) => heldBy[i].has(key), random)
        : pickWhere(holders, (i) => active.filed[i] === load, random);
      if (found >= 0) return found;
    }
    return -1;
  }

  /** A uniformly drawn available instance (one draw); -1 with none. */
  pickAvailable(random: RandomStream): number {
    const t = this.#table;
    if (t.availableCount === t.instanceCount) {
      return t.instanceCount === 1
        ? 0
        : Math.min(t.instanceCount - 1, Math.floor(random() * t.instanceCount));
    }
    if (this.#available === undefined) {
      this.#available = new SortedIndices();
      for (let i = 0; i < t.instanceCount; i++) if (t.available[i] === 1) this.#available.add(i);
    }
    return pickFrom(this.#available, random);
  }

  /** The sum of `inFlight` over available instances. */
  inFlightSum(): number {
    if (this.#countedInFlight === undefined) {
      this.#countedInFlight = new Float64Array(this.#table.instanceCount);
      for (let i = 0; i < this.#table.instanceCount; i++) this.#countInFlight(i, this.#countedInFlight);
    }
    return this.#inFlightSum;
  }

  /** The sum of `capacity` over available instances, in index order (as a scan adds them). */
  capacitySum(): number {
    if (this.#capacitySum !== this.#capacitySum) {
      const t = this.#table;
      let sum = 0;
      for (let i = 0; i < t.instanceCount; i++) if (t.available[i] === 1) sum += t.capacity[i];
      this.#capacitySum = sum;
    }
    return this.#capacitySum;
  }
}

const NO_HOLDERS = new SortedIndices();

/**
 * Per key (a block run), the instances whose real cache holds it, in index
 * order: the god's-eye routing note's candidates (an instance that does not
 * hold a request's first run has nothing of it cached). Fed by the caches'
 * `onRunChange`.
 */
export class KeyHolders {
  readonly #holders = new Map<number, SortedIndices>();

  /** Instance `i`'s cache now holds `key` (`held`) or no longer does. */
  change(i: number, key: number, held: boolean): void {
    let holders = this.#holders.get(key);
    if (held) {
      if (holders === undefined) {
        holders = new SortedIndices();
        this.#holders.set(key, holders);
      }
      holders.add(i);
    } else if (holders !== undefined) {
      holders.delete(i);
      if (holders.size === 0) this.#holders.delete(key);
    }
  }

  /** The instances holding `key`, in index order (empty: none). */
  holders(key: number): IndexList {
    return this.#holders.get(key) ?? NO_HOLDERS;
  }
}

/** Up to this many holders, the least loaded holder is found by walking them all. */
const FEW_HOLDERS = 32;

/** Random probes of a load's instances for a holder before counting its holders exactly. */
const HOLDER_PROBES = 32;

/** The member of `list` with the least `filed` key, one uniform draw among equals; -1 when empty. */
function pickLeastOf(list: SortedIndices, filed: Float64Array, random: RandomStream): number {
  let least = Infinity, ties = 0;
  for (let k = 0; k < list.size; k++) {
    const key = filed[list.at(k)];
    if (key < least) {
      least = key;
      ties = 1;
    } else if (key === least) ties++;
  }
  if (ties === 0) return -1;
  let chosen = ties === 1 ? 0 : Math.min(ties - 1, Math.floor(random() * ties));
  for (let k = 0; k < list.size; k++) {
    if (filed[list.at(k)] === least && chosen-- === 0) return list.at(k);
  }
  return -1;
}

/** A uniformly drawn member of `list` that `test` accepts (one draw); -1 when none does. */
function pickWhere(list: IndexSet, test: (i: number) => boolean, random: RandomStream): number {
  let count = 0;
  for (let k = 0; k < list.size; k++) if (test(list.at(k))) count++;
  if (count === 0) return -1;
  let chosen = count === 1 ? 0 : Math.min(count - 1, Math.floor(random() * count));
  for (let k = 0; k < list.size; k++) {
    if (test(list.at(k)) && chosen-- === 0) return list.at(k);
  }
  return -1;
}

/** One uniform draw among `tied` (none when only one ties); -1 when empty. */
function pickFrom(tied: IndexSet | undefined, random: RandomStream): number {
  if (tied === undefined || tied.size === 0) return -1;
  if (tied.size === 1) return tied.at(0);
  return tied.at(Math.min(tied.size - 1, Math.floor(random() * tied.size)));
}
