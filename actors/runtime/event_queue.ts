/**
 * @module
 * The kernel's pending-message queue: a binary min-heap ordered by
 * `(timeMs, seq)`, stored in parallel arrays so the hot path allocates nothing.
 */

/**
 * A min-heap of messages keyed by delivery time, then by sequence number.
 *
 * Two entries never compare equal because the kernel gives every message a
 * distinct `seq`, so the delivery order is total and same-time messages leave
 * in the order they were pushed.
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

  /** Time of the entry last returned by {@linkcode EventQueue.pop}. */
  poppedTimeMs = 0;
  /** Sequence number of the entry last returned by `pop`. */
  poppedSeq = 0;
  /** Recipient of the entry last returned by `pop`. */
  poppedTo = 0;

  /** Number of entries waiting. */
  get size(): number {
    return this.#size;
  }

  /** Delivery time of the next entry, or `Infinity` when empty. */
  peekTimeMs(): number {
    return this.#size === 0 ? Infinity : this.#time[0];
  }

  /** Adds an entry. `seq` must be unique within this queue. */
  push(timeMs: number, seq: number, to: number, item: T): void {
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
    return top;
  }

  /** Visits every waiting entry, in no particular order. */
  forEach(visit: (item: T, to: number, timeMs: number, seq: number) => void): void {
    for (let i = 0; i < this.#size; i++) {
      visit(this.#item[i], this.#to[i], this.#time[i], this.#seq[i]);
    }
  }
}
