/**
 * @module
 * The kernel's pending-message queue, ordered by `(timeMs, seq)`: a binary
 * min-heap over parallel arrays, beside a FIFO run that takes, in O(1), the
 * entries pushed in order (a workload's arrivals) — the hot path allocates nothing.
 */

/** The run's first capacity (a power of two): a workload source's batch of arrivals and its timer. */
const RUN_START = 128;

/**
 * A priority queue of messages keyed by delivery time, then by sequence number.
 *
 * Two entries never compare equal because the kernel gives every message a
 * distinct `seq`, so the delivery order is total and same-time messages leave
 * in the order they were pushed.
 *
 * An entry that sorts after the last one appended to the _run_ (or any entry,
 * when the run is empty) is appended to it, a FIFO; any other goes to the
 * heap. The run is sorted by construction, so `pop` takes the smaller of its
 * head and the heap's top: the order is exactly the heap's alone.
 *
 * @example
 * ```ts
 * const q = new EventQueue<string>();
 * q.push(5, 0, 1, "late");
 * q.push(1, 1, 1, "early");
 * q.pop(); // "early"
 * ```
 */
export class EventQueue<T> {
  #time: number[] = [];
  #seq: number[] = [];
  #to: number[] = [];
  #item: T[] = [];
  #size = 0;
  /** The run: a ring buffer (capacity a power of two) of entries in increasing `(timeMs, seq)`. */
  #runTime: number[] = new Array(RUN_START).fill(0);
  #runSeq: number[] = new Array(RUN_START).fill(0);
  #runTo: number[] = new Array(RUN_START).fill(0);
  #runItem: (T | undefined)[] = new Array(RUN_START).fill(undefined);
  #runHead = 0;
  #runSize = 0;
  #runMask = RUN_START - 1;
  /** Key of the entry last appended to the run (valid while it is not empty). */
  #runLastTime = 0;
  #runLastSeq = 0;
  /** The earliest time waiting (the smaller of the heap's top and the run's head), `Infinity` when empty. */
  #nextTimeMs = Infinity;

  /** Time of the entry last returned by {@linkcode EventQueue.pop}. */
  poppedTimeMs = 0;
  /** Sequence number of the entry last returned by `pop`. */
  poppedSeq = 0;
  /** Recipient of the entry last returned by `pop`. */
  poppedTo = 0;

  /** Number of entries waiting. */
  get size(): number {
    return this.#size + this.#runSize;
  }

  /** Delivery time of the next entry, or `Infinity` when empty. */
  peekTimeMs(): number {
    return this.#nextTimeMs;
  }

  /** Adds an entry. `seq` must be unique within this queue. */
  push(timeMs: number, seq: number, to: number, item: T): void {
    if (timeMs < this.#nextTimeMs) this.#nextTimeMs = timeMs;
    if (
      this.#runSize === 0 || timeMs > this.#runLastTime ||
      (timeMs === this.#runLastTime && seq > this.#runLastSeq)
    ) {
      this.#append(timeMs, seq, to, item);
      return;
    }
    const time = this.#time, seqs = this.#seq, tos = this.#to, items = this.#item;
    let i = this.#size++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pt = time[p];
      if (pt < timeMs || (pt === timeMs && seqs[p] < seq)) break;
      time[i] = pt;
      seqs[i] = seqs[p];
      tos[i] = tos[p];
      items[i] = items[p];
      i = p;
    }
    time[i] = timeMs;
    seqs[i] = seq;
    tos[i] = to;
    items[i] = item;
  }

  /**
   * Removes and returns the earliest entry; its time, seq and recipient are
   * left in `poppedTimeMs`, `poppedSeq` and `poppedTo`.
   * @throws {RangeError} when the queue is empty.
   */
  pop(): T {
    const n = this.#size;
    if (this.#runSize !== 0) {
      const head = this.#runHead;
      const rt = this.#runTime[head];
      if (n === 0 || rt < this.#time[0] || (rt === this.#time[0] && this.#runSeq[head] < this.#seq[0])) {
        return this.#shift(head, rt);
      }
    }
    if (n === 0) throw new RangeError("EventQueue.pop: the queue is empty");
    const time = this.#time, seqs = this.#seq, tos = this.#to, items = this.#item;
    const top = items[0];
    this.poppedTimeMs = time[0];
    this.poppedSeq = seqs[0];
    this.poppedTo = tos[0];
    const last = n - 1;
    this.#size = last;
    if (last > 0) {
      const t = time[last], s = seqs[last], to = tos[last], item = items[last];
      let i = 0;
      const half = last >> 1;
      while (i < half) {
        let c = 2 * i + 1;
        let ct = time[c], cs = seqs[c];
        const r = c + 1;
        if (r < last) {
          const rt = time[r];
          if (rt < ct || (rt === ct && seqs[r] < cs)) {
            c = r;
            ct = rt;
            cs = seqs[r];
          }
        }
        if (t < ct || (t === ct && s < cs)) break;
        time[i] = ct;
        seqs[i] = cs;
        tos[i] = tos[c];
        items[i] = items[c];
        i = c;
      }
      time[i] = t;
      seqs[i] = s;
      tos[i] = to;
      items[i] = item;
    }
    items[last] = undefined as T; // let the message be collected
    this.#nextTimeMs = this.#earliest();
    return top;
  }

  /** Visits every waiting entry, in no particular order. */
  forEach(visit: (item: T, to: number, timeMs: number, seq: number) => void): void {
    for (let i = 0; i < this.#size; i++) {
      visit(this.#item[i], this.#to[i], this.#time[i], this.#seq[i]);
    }
    for (let k = 0; k < this.#runSize; k++) {
      const i = (this.#runHead + k) & this.#runMask;
      visit(this.#runItem[i]!, this.#runTo[i], this.#runTime[i], this.#runSeq[i]);
    }
  }

  /** Appends to the run's tail (growing its ring when full). */
  #append(timeMs: number, seq: number, to: number, item: T): void {
    if (this.#runSize > this.#runMask) this.#grow();
    const i = (this.#runHead + this.#runSize++) & this.#runMask;
    this.#runTime[i] = timeMs;
    this.#runSeq[i] = seq;
    this.#runTo[i] = to;
    this.#runItem[i] = item;
    this.#runLastTime = timeMs;
    this.#runLastSeq = seq;
  }

  /** Removes the run's head (at `head`, stamped `timeMs`) and returns it. */
  #shift(head: number, timeMs: number): T {
    const item = this.#runItem[head]!;
    this.poppedTimeMs = timeMs;
    this.poppedSeq = this.#runSeq[head];
    this.poppedTo = this.#runTo[head];
    this.#runItem[head] = undefined; // let the message be collected
    this.#runHead = (head + 1) & this.#runMask;
    this.#runSize--;
    this.#nextTimeMs = this.#earliest();
    return item;
  }

  /** The earliest time waiting, computed from the heap's top and the run's head. */
  #earliest(): number {
    const heap = this.#size === 0 ? Infinity : this.#time[0];
    if (this.#runSize === 0) return heap;
    const run = this.#runTime[this.#runHead];
    return run < heap ? run : heap;
  }

  /** Doubles the run's ring, its entries unwrapped to start at 0. */
  #grow(): void {
    const head = this.#runHead, n = this.#runSize;
    const unwrap = <V>(ring: V[]) => ring.slice(head).concat(ring.slice(0, head));
    this.#runTime = unwrap(this.#runTime).concat(new Array(n).fill(0));
    this.#runSeq = unwrap(this.#runSeq).concat(new Array(n).fill(0));
    this.#runTo = unwrap(this.#runTo).concat(new Array(n).fill(0));
    this.#runItem = unwrap(this.#runItem).concat(new Array(n).fill(undefined));
    this.#runHead = 0;
    this.#runMask = 2 * n - 1;
  }
}
