/**
 * @module
 * The bytes a connection has read and not yet consumed, for the server's and
 * the client's HTTP/1.1 parsers: appended at the back, viewed, taken or
 * skipped at the front, in one buffer that grows by doubling and is reused
 * from its start whenever it empties.
 */

/**
 * A FIFO of bytes in one growable buffer.
 *
 * @example
 * ```ts
 * const queue = new ByteQueue();
 * queue.append(new TextEncoder().encode("GET / HTTP/1.1\r\n"));
 * queue.skip(4);
 * new TextDecoder().decode(queue.take(1)); // "/"
 * ```
 */
export class ByteQueue {
  #buffer: Uint8Array<ArrayBuffer>;
  #start = 0;
  #end = 0;

  constructor(initialBytes = 4096) {
    this.#buffer = new Uint8Array(initialBytes);
  }

  /** Bytes waiting. */
  get size(): number {
    return this.#end - this.#start;
  }

  /** Adds `bytes` at the back (copied). */
  append(bytes: Uint8Array): void {
    if (this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#end + bytes.length > this.#buffer.length) {
      const live = this.#end - this.#start;
      const size = Math.max(this.#buffer.length, 2 ** Math.ceil(Math.log2(live + bytes.length)));
      const next = size > this.#buffer.length ? new Uint8Array(size) : this.#buffer;
      next.set(this.#buffer.subarray(this.#start, this.#end), 0);
      this.#buffer = next;
      this.#end = live;
      this.#start = 0;
    }
    this.#buffer.set(bytes, this.#end);
    this.#end += bytes.length;
  }

  /** The waiting bytes, not consumed: a view, valid until the next `append`. */
  view(): Uint8Array {
    return this.#buffer.subarray(this.#start, this.#end);
  }

  /** Up to `max` waiting bytes, copied out and consumed. */
  take(max: number): Uint8Array<ArrayBuffer> {
    const n = Math.min(max, this.#end - this.#start);
    const bytes = this.#buffer.slice(this.#start, this.#start + n);
    this.#start += n;
    return bytes;
  }

  /** Consumes `n` waiting bytes (at most all of them). */
  skip(n: number): void {
    this.#start = Math.min(this.#end, this.#start + n);
  }

  /** Consumes every waiting byte. */
  clear(): void {
    this.#start = this.#end;
  }
}
