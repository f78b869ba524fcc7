/**
 * @module
 * A small HTTP/1.1 client on `Deno.connect` with a keep-alive pool, for the
 * wire's two hot clients: the gateway's requests to its upstreams and the
 * load generator's requests. `fetch` costs 110–160 µs of CPU per streamed
 * request in Deno 2.9.6 (Request, Headers, AbortSignal and stream objects
 * around hyper); this client writes a request in one write and reads its
 * answer with a few `read`s, about 20 µs. Other schemes than `http:` (https)
 * go through `fetch`, behind the same interface.
 */
import { ByteQueue } from "./byte_queue.ts";

/** Options for {@linkcode HttpClient}. */
export interface HttpClientOptions {
  /** Wall ms an idle pooled connection is kept before it is closed. @default 4000 */
  readonly idleTimeoutMs?: number;
  /** Idle connections kept per origin at most; more are closed when released. @default 256 */
  readonly maxIdlePerOrigin?: number;
}

/** A request for {@linkcode HttpClient.request}. */
export interface ClientRequestInit {
  /** @default "GET" */
  readonly method?: string;
  /** Header fields, written as given (a `host` and a `content-length` are added). */
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string | Uint8Array;
  /** Aborting it closes the connection: a pending request or body read rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
}

/** A response's header fields (names case-insensitive; repeated fields joined by ", "). */
export interface ClientHeaders {
  get(name: string): string | null;
}

/** Reads a body piece by piece: the shape of a `ReadableStreamDefaultReader` that the SSE readers use. */
export interface ByteReader {
  read(): Promise<ReadableStreamReadResult<Uint8Array>>;
  cancel(): Promise<void>;
  releaseLock(): void;
}

/** A body that hands out one reader: what `readSseEvents` takes (a `ReadableStream<Uint8Array>` is one). */
export interface ByteStream {
  getReader(): ByteReader;
}

/** A response: its head at once, its body read on demand (to its end, or cancelled). */
export interface ClientResponse {
  readonly status: number;
  /** Whether the status is 2xx. */
  readonly ok: boolean;
  readonly headers: ClientHeaders;
  /** The body (empty for HEAD, 1xx, 204 and 304). */
  readonly body: ByteStream;
  /** Whether the body was read or cancelled. */
  readonly bodyUsed: boolean;
  /** The whole body as UTF-8 text. */
  text(): Promise<string>;
  /** Drops the rest of the body (the connection is closed unless the body was over). */
  cancel(): Promise<void>;
}

/** The connection closed, or sent something that is not HTTP/1.1, before the answer was whole. */
export class HttpClientError extends Error {}

const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");
const READ_BYTES = 65_536;
/** Largest response head accepted. */
const MAX_HEAD_BYTES = 65_536;

/** Where requests to one URL go: the origin's address and the request target. */
interface Target {
  readonly origin: string;
  readonly hostname: string;
  readonly port: number;
  readonly host: string;
  readonly path: string;
}

/**
 * An HTTP/1.1 client with keep-alive: one request at a time per connection,
 * idle connections pooled per origin and closed after `idleTimeoutMs`.
 * A request sent on a pooled connection that the server closed before it
 * answered a byte is sent again once on a new connection (the server closed
 * it idle, unread; a client cannot tell a request the server dropped unread
 * from one it dropped after reading, and servers close idle connections only).
 *
 * @example
 * ```ts
 * const client = new HttpClient();
 * const response = await client.request("http://127.0.0.1:8000/health");
 * console.log(response.status, await response.text());
 * client.close();
 * ```
 */
export class HttpClient {
  readonly #idleTimeoutMs: number;
  readonly #maxIdle: number;
  readonly #idle = new Map<string, ClientConnection[]>();
  readonly #targets = new Map<string, Target>();
  #sweep: ReturnType<typeof setInterval> | undefined;
  #closed = false;

  constructor(options: HttpClientOptions = {}) {
    this.#idleTimeoutMs = options.idleTimeoutMs ?? 4000;
    this.#maxIdle = options.maxIdlePerOrigin ?? 256;
    if (!(this.#idleTimeoutMs > 0)) {
      throw new RangeError(
        `HttpClientOptions.idleTimeoutMs: expected a number > 0, got ${this.#idleTimeoutMs}`,
      );
    }
  }

  /**
   * Sends a request and resolves with the response's head.
   * @throws what `Deno.connect` throws (refused, out of descriptors), an
   *   {@linkcode HttpClientError} for a connection that closed or spoke
   *   something else than HTTP/1.1, `init.signal.reason` once aborted.
   */
  async request(url: string | URL, init: ClientRequestInit = {}): Promise<ClientResponse> {
    const href = typeof url === "string" ? url : url.href;
    if (!href.startsWith("http://")) return await fetchResponse(href, init);
    const target = this.#target(href);
    const signal = init.signal;
    signal?.throwIfAborted();
    const bytes = requestBytes(target, init);
    const method = init.method ?? "GET";
    for (let attempt = 0;; attempt++) {
      const pooled = this.#take(target.origin);
      const connection = pooled ?? await ClientConnection.open(target, signal);
      try {
        return await connection.exchange(bytes, method, signal, (c) => this.#release(c));
      } catch (error) {
        // A pooled connection the server had closed: send again (once) if the server cannot have acted on it.
        if (
          pooled !== undefined && attempt === 0 && error instanceof StaleConnection &&
          (error.unsent || IDEMPOTENT.has(method))
        ) continue;
        throw error instanceof StaleConnection ? new HttpClientError(error.message) : error;
      }
    }
  }

  /** Closes the idle connections (requests in progress finish on theirs, which then close). */
  close(): void {
    this.#closed = true;
    clearInterval(this.#sweep);
    this.#sweep = undefined;
    for (const list of this.#idle.values()) for (const c of list) c.close();
    this.#idle.clear();
  }

  #target(href: string): Target {
    let target = this.#targets.get(href);
    if (target === undefined) {
      const url = new URL(href);
      const port = url.port === "" ? 80 : Number(url.port);
      const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
      target = {
        origin: `${hostname}:${port}`,
        hostname,
        port,
        host: url.host,
        path: `${url.pathname}${url.search}`,
      };
      if (this.#targets.size >= 1024) this.#targets.clear();
      this.#targets.set(href, target);
    }
    return target;
  }

  /** The most recently used idle connection to `origin` that is still open, if any. */
  #take(origin: string): ClientConnection | undefined {
    const list = this.#idle.get(origin);
    while (list !== undefined && list.length > 0) {
      const connection = list.pop()!;
      if (connection.reusable) return connection;
      connection.close();
    }
    return undefined;
  }

  /** A connection whose exchange ended cleanly goes back to its origin's pool. */
  #release(connection: ClientConnection): void {
    if (this.#closed || !connection.reusable) return connection.close();
    let list = this.#idle.get(connection.origin);
    if (list === undefined) this.#idle.set(connection.origin, list = []);
    if (list.length >= this.#maxIdle) return connection.close();
    connection.idleSince = performance.now();
    connection.watchIdle();
    list.push(connection);
    this.#sweep ??= this.#startSweep();
  }

  /** Closes idle connections past the idle timeout, every quarter of it (at most a second). */
  #startSweep(): ReturnType<typeof setInterval> {
    const timer = setInterval(() => {
      const oldest = performance.now() - this.#idleTimeoutMs;
      for (const [origin, list] of this.#idle) {
        const kept = list.filter((c) => c.reusable && c.idleSince > oldest);
        for (const c of list) if (!kept.includes(c)) c.close();
        if (kept.length === 0) this.#idle.delete(origin);
        else this.#idle.set(origin, kept);
      }
      if (this.#idle.size === 0) {
        clearInterval(timer);
        this.#sweep = undefined;
      }
    }, Math.min(1000, this.#idleTimeoutMs / 4));
    Deno.unrefTimer(timer);
    return timer;
  }
}

/** The request's bytes: its head and body in one buffer (one write). */
function requestBytes(target: Target, init: ClientRequestInit): Uint8Array {
  const body = typeof init.body === "string" ? encoder.encode(init.body) : init.body;
  let head = `${init.method ?? "GET"} ${target.path} HTTP/1.1\r\nhost: ${target.host}\r\n`;
  for (const name in init.headers) head += `${name}: ${init.headers[name]}\r\n`;
  if (body !== undefined) head += `content-length: ${body.length}\r\n`;
  head += "\r\n";
  const headBytes = encoder.encode(head);
  if (body === undefined || body.length === 0) return headBytes;
  const all = new Uint8Array(headBytes.length + body.length);
  all.set(headBytes, 0);
  all.set(body, headBytes.length);
  return all;
}

/**
 * A pooled connection closed by the server before any byte of the answer.
 * `unsent`: the request's write failed, so the server never had all of it and
 * it may be sent again; else the server may have read it and acted, and only
 * an idempotent request is sent again (Go's `net/http` rule).
 */
class StaleConnection extends Error {
  constructor(message: string, readonly unsent = false) {
    super(message);
  }
}

/** Methods a server must be able to receive twice (RFC 9110 §9.2.2, less PUT and DELETE: never sent here). */
const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS"]);

/** How a response's body ends. */
type Framing = { kind: "none" } | { kind: "length"; left: number } | { kind: "chunked" } | {
  kind: "close";
};

/** One connection to an origin: one exchange at a time. */
class ClientConnection {
  readonly origin: string;
  readonly #conn: Deno.TcpConn;
  /** Bytes read and not yet consumed. */
  readonly #bytes = new ByteQueue(READ_BYTES);
  #eof = false;
  #closed = false;
  /** The read in progress, shared (an idle connection keeps one going to see the server close it). */
  #reading: Promise<void> | undefined;
  #readError: unknown;
  readonly #chunk = new Uint8Array(READ_BYTES);
  /** When it last went idle (performance.now()). */
  idleSince = 0;
  /** The server may take another request on it. */
  #keepAlive = true;
  /** An exchange is using it (else it is idle in the pool, or new). */
  #inUse = false;
  /** A byte of the current exchange's response has arrived (before one, a failure may be a stale connection). */
  #heard = false;

  private constructor(origin: string, conn: Deno.TcpConn) {
    this.origin = origin;
    this.#conn = conn;
  }

  static async open(target: Target, signal: AbortSignal | undefined): Promise<ClientConnection> {
    const conn = await Deno.connect({ hostname: target.hostname, port: target.port, transport: "tcp" });
    if (signal?.aborted) {
      conn.close();
      throw signal.reason;
    }
    try {
      conn.setNoDelay(true);
    } catch { /* closed already */ }
    return new ClientConnection(target.origin, conn);
  }

  /** Whether it can carry another request: open, kept alive, and nothing unread from the server. */
  get reusable(): boolean {
    return !this.#closed && !this.#eof && this.#keepAlive && this.#bytes.size === 0 &&
      this.#readError === undefined;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch { /* already */ }
  }

  /** While idle, a read: the server closing the connection (or sending anything) takes it out of use. */
  watchIdle(): void {
    this.#inUse = false;
    this.#readMore().then(() => {
      if (!this.#inUse && !this.reusable) this.close();
    });
  }

  /**
   * Writes `bytes` (a whole request) and reads the response's head; the body
   * is read through the response. `release` is called once the body has
   * been read to its end on a connection that may be reused.
   */
  async exchange(
    bytes: Uint8Array,
    method: string,
    signal: AbortSignal | undefined,
    release: (c: ClientConnection) => void,
  ): Promise<ClientResponse> {
    this.#inUse = true;
    this.#heard = false;
    const onAbort = () => this.close();
    signal?.addEventListener("abort", onAbort, { once: true });
    let done = false;
    const finish = (reusable: boolean) => {
      if (done) return;
      done = true;
      signal?.removeEventListener("abort", onAbort);
      if (reusable) release(this);
      else this.close();
    };
    try {
      try {
        let at = 0;
        while (at < bytes.length) at += await this.#conn.write(bytes.subarray(at));
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        // Written to a pooled connection the server closed: the caller may send it again.
        throw new StaleConnection(`the connection closed: ${(error as Error).message}`, true);
      }
      let head: { status: number; headers: Map<string, string>; version: string };
      while (true) {
        head = await this.#readHead(signal);
        if (head.status >= 200 || head.status === 101) break; // 1xx before the answer: skipped
      }
      const framing = this.#framing(head.status, head.headers, method);
      const connection = head.headers.get("connection")?.toLowerCase() ?? "";
      this.#keepAlive = framing.kind !== "close" &&
        (head.version === "1.1" ? !connection.includes("close") : connection.includes("keep-alive"));
      return new PooledResponse(head.status, head.headers, new Body(this, framing, signal, finish));
    } catch (error) {
      finish(false);
      throw error;
    }
  }

  async #readHead(
    signal: AbortSignal | undefined,
  ): Promise<{ status: number; headers: Map<string, string>; version: string }> {
    let scanned = 0;
    while (true) {
      const bytes = this.#bytes.view();
      const end = findHeadEnd(bytes, Math.max(0, scanned - 3));
      if (end >= 0) {
        const text = latin1.decode(bytes.subarray(0, end));
        this.#bytes.skip(end + 4);
        return parseResponseHead(text);
      }
      scanned = bytes.length;
      if (scanned > MAX_HEAD_BYTES) {
        throw new HttpClientError(`the response's head is over ${MAX_HEAD_BYTES} bytes`);
      }
      if (this.#eof) {
        const message = "the connection closed before a whole response head";
        throw this.#heard ? new HttpClientError(message) : new StaleConnection(message);
      }
      await this.#fill(signal);
      if (this.#bytes.size > 0) this.#heard = true;
    }
  }

  /** Reads more (or throws the read's error, or the abort's reason). */
  async fill(signal: AbortSignal | undefined): Promise<void> {
    await this.#fill(signal);
  }

  async #fill(signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) throw signal.reason;
    if (this.#eof && this.#readError === undefined) return;
    if (!this.#eof) await this.#readMore();
    if (signal?.aborted) throw signal.reason;
    if (this.#readError !== undefined) {
      const error = this.#readError;
      if (!this.#heard && this.#bytes.size === 0) {
        throw new StaleConnection(`the connection failed: ${(error as Error)?.message ?? error}`);
      }
      throw error;
    }
  }

  #readMore(): Promise<void> {
    return this.#reading ??= (async () => {
      try {
        const n = await this.#conn.read(this.#chunk);
        if (n === null) this.#eof = true;
        else this.#bytes.append(this.#chunk.subarray(0, n));
      } catch (error) {
        this.#eof = true;
        if (!this.#closed) this.#readError = error;
        else this.#readError ??= new HttpClientError("the connection was closed");
      } finally {
        this.#reading = undefined;
      }
    })();
  }

  get eof(): boolean {
    return this.#eof;
  }

  get available(): number {
    return this.#bytes.size;
  }

  /** Up to `max` buffered bytes, copied out and consumed. */
  take(max: number): Uint8Array {
    return this.#bytes.take(max);
  }

  /** The buffered bytes, not consumed (valid until the next read). */
  peek(): Uint8Array {
    return this.#bytes.view();
  }

  skip(n: number): void {
    this.#bytes.skip(n);
  }

  #framing(status: number, headers: Map<string, string>, method: string): Framing {
    if (method === "HEAD" || status < 200 || status === 204 || status === 304) return { kind: "none" };
    const te = headers.get("transfer-encoding");
    if (te !== undefined) {
      if (te.trim().toLowerCase().endsWith("chunked")) return { kind: "chunked" };
      return { kind: "close" };
    }
    const length = headers.get("content-length");
    if (length !== undefined) {
      const n = Number(length.split(",")[0].trim());
      if (!Number.isInteger(n) || n < 0) {
        throw new HttpClientError(`bad content-length ${JSON.stringify(length)}`);
      }
      return n === 0 ? { kind: "none" } : { kind: "length", left: n };
    }
    return { kind: "close" };
  }
}

/** A response's body as it arrives: chunked coding decoded; several pieces already here come as one. */
class Body implements ByteStream, ByteReader {
  #framing: Framing;
  /** Bytes left in the current chunk (chunked). */
  #inChunk = 0;
  #done = false;
  #used = false;
  constructor(
    readonly connection: ClientConnection,
    framing: Framing,
    readonly signal: AbortSignal | undefined,
    readonly finish: (reusable: boolean) => void,
  ) {
    this.#framing = framing;
    if (framing.kind === "none") this.#end(true);
  }

  get used(): boolean {
    return this.#used;
  }

  getReader(): ByteReader {
    this.#used = true;
    return this;
  }

  releaseLock(): void {}

  async cancel(): Promise<void> {
    this.#used = true;
    if (!this.#done) this.#end(false);
    await Promise.resolve();
  }

  #end(reusable: boolean): void {
    this.#done = true;
    this.finish(reusable);
  }

  async read(): Promise<ReadableStreamReadResult<Uint8Array>> {
    this.#used = true;
    try {
      const value = await this.#next();
      return value === null ? { done: true, value: undefined } : { done: false, value };
    } catch (error) {
      if (!this.#done) this.#end(false);
      throw error;
    }
  }

  /** The next bytes of the body, or null at its end. */
  async #next(): Promise<Uint8Array | null> {
    if (this.#done) return null;
    const c = this.connection;
    const framing = this.#framing;
    if (framing.kind === "length") {
      while (c.available === 0) {
        if (c.eof) throw new HttpClientError("the connection closed mid-body");
        await c.fill(this.signal);
      }
      const bytes = c.take(framing.left);
      framing.left -= bytes.length;
      if (framing.left === 0) this.#end(true);
      return bytes;
    }
    if (framing.kind === "close") {
      while (c.available === 0) {
        if (c.eof) {
          this.#end(false);
          return null;
        }
        await c.fill(this.signal);
      }
      return c.take(c.available);
    }
    return await this.#chunked();
  }

  /** Every whole chunk's data already buffered (at least some of one), or null after the last chunk. */
  async #chunked(): Promise<Uint8Array | null> {
    const c = this.connection;
    const parts: Uint8Array[] = [];
    let length = 0;
    while (true) {
      if (this.#inChunk > 0) {
        if (c.available === 0) {
          if (length > 0) break; // what is here goes now; the rest with the next read
          if (c.eof) throw new HttpClientError("the connection closed mid-body");
          await c.fill(this.signal);
          continue;
        }
        const bytes = c.take(this.#inChunk);
        this.#inChunk -= bytes.length;
        parts.push(bytes);
        length += bytes.length;
        continue;
      }
      // A chunk's end (CRLF, after its data) and the next size line, or the last chunk and trailers.
      const line = this.#line();
      if (line === undefined) {
        if (length > 0) break;
        if (c.eof) throw new HttpClientError("the connection closed mid-body");
        await c.fill(this.signal);
        continue;
      }
      if (line === "done") {
        this.#end(true);
        break;
      }
    }
    if (length === 0) return null;
    if (parts.length === 1) return parts[0];
    const all = new Uint8Array(length);
    let at = 0;
    for (const part of parts) {
      all.set(part, at);
      at += part.length;
    }
    return all;
  }

  /** A chunk's data was read: its CRLF comes before the next size line. */
  #afterData = false;

  /**
   * Reads the next chunk's size line (after the last chunk's CRLF) when it
   * is whole: "next" with #inChunk set; "done" after the last chunk and its
   * trailers; undefined when more bytes are needed.
   */
  #line(): "next" | "done" | undefined {
    const c = this.connection;
    const bytes = c.peek();
    let at = 0;
    if (this.#afterData) {
      if (bytes.length < 2) return undefined;
      if (bytes[0] !== 13 || bytes[1] !== 10) throw new HttpClientError("a chunk does not end with CRLF");
      at = 2;
    }
    const eol = indexOfCrlf(bytes, at);
    if (eol < 0) {
      if (bytes.length - at > 1024) throw new HttpClientError("a chunk size line is too long");
      return undefined;
    }
    const sizeText = latin1.decode(bytes.subarray(at, eol)).split(";", 1)[0].trim();
    if (!/^[0-9a-fA-F]{1,12}$/.test(sizeText)) {
      throw new HttpClientError(`bad chunk size ${JSON.stringify(sizeText)}`);
    }
    const size = parseInt(sizeText, 16);
    if (size > 0) {
      c.skip(eol + 2);
      this.#inChunk = size;
      this.#afterData = true;
      return "next";
    }
    // The last chunk: trailers up to an empty line.
    let from = eol + 2;
    while (true) {
      const end = indexOfCrlf(bytes, from);
      if (end < 0) return undefined;
      if (end === from) {
        c.skip(end + 2);
        this.#afterData = false;
        return "done";
      }
      from = end + 2;
    }
  }
}

class PooledResponse implements ClientResponse {
  readonly headers: ClientHeaders;
  constructor(readonly status: number, headers: Map<string, string>, readonly body: Body) {
    this.headers = { get: (name) => headers.get(name.toLowerCase()) ?? null };
  }

  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  get bodyUsed(): boolean {
    return this.body.used;
  }

  async text(): Promise<string> {
    const reader = this.body.getReader();
    const decoder = new TextDecoder();
    let text = "";
    while (true) {
      const { done, value } = await reader.read();
      if (done) return text + decoder.decode();
      text += decoder.decode(value, { stream: true });
    }
  }

  cancel(): Promise<void> {
    return this.body.cancel();
  }
}

/** Index of the first CRLF in `bytes` from `from`, or -1. */
function indexOfCrlf(bytes: Uint8Array, from: number): number {
  for (let i = from; i + 1 < bytes.length; i++) if (bytes[i] === 13 && bytes[i + 1] === 10) return i;
  return -1;
}

/** Index of the `\r\n\r\n` ending a head in `bytes` (searching from `from`), or -1. */
function findHeadEnd(bytes: Uint8Array, from: number): number {
  for (let i = from; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) return i;
  }
  return -1;
}

/** The status line and header fields of a response head (without its final CRLFCRLF). */
function parseResponseHead(text: string): { status: number; headers: Map<string, string>; version: string } {
  const lines = text.split("\r\n");
  const statusLine = lines[0];
  const match = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(statusLine);
  if (match === null) throw new HttpClientError(`bad status line ${JSON.stringify(statusLine.slice(0, 80))}`);
  const headers = new Map<string, string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(":");
    if (colon <= 0) throw new HttpClientError(`bad header line ${JSON.stringify(line.slice(0, 80))}`);
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const had = headers.get(name);
    headers.set(name, had === undefined ? value : `${had}, ${value}`);
  }
  return { status: Number(match[2]), headers, version: `1.${match[1]}` };
}

/** A request to another scheme (https), through `fetch`, as a {@linkcode ClientResponse}. */
async function fetchResponse(url: string, init: ClientRequestInit): Promise<ClientResponse> {
  const response = await fetch(url, {
    method: init.method,
    headers: init.headers,
    body: init.body as BodyInit | undefined,
    signal: init.signal,
  });
  const stream = response.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  const body: ByteStream = { getReader: () => stream.getReader() };
  return {
    status: response.status,
    ok: response.ok,
    headers: response.headers,
    body,
    get bodyUsed() {
      return response.bodyUsed;
    },
    text: () => response.text(),
    cancel: async () => {
      await response.body?.cancel().catch(() => {});
    },
  };
}
