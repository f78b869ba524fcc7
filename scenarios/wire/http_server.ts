/**
 * @module
 * The HTTP/1.1 server of `serve`'s gateway and simulated instances, on
 * `Deno.listen`. `Deno.serve` (and `node:http`, measured in Deno 2.9.6) end
 * their accept loop, and with it the process, at the descriptor limit
 * (EMFILE), and have no timeout for a client that never finishes its headers
 * or idles on a keep-alive connection. This server holds the connection
 * policy itself:
 *
 * - at most `maxConnections` connections per server, and at most a
 *   {@linkcode ConnectionPool}'s size over the servers sharing it: at the
 *   bound it stops accepting (new connections wait in the kernel's backlog,
 *   as nginx does when its `worker_connections` are taken);
 * - out of descriptors (EMFILE, ENFILE), it stops accepting and retries with
 *   a backoff, saying so once on `onWarning`: it never exits;
 * - a connection that has not sent complete headers within
 *   `headersTimeoutMs` (from its accept, or from the first byte of a later
 *   request), that idles between requests for `idleTimeoutMs`, or that
 *   does not take a response's bytes for `idleTimeoutMs`, is closed.
 *
 * Handlers see the web `Request`/`Response` of `Deno.serve`. A request's
 * `signal` aborts when its client closes the connection before the answer.
 * A `text/event-stream` response is written chunk by chunk as it is produced
 * (chunked encoding, TCP_NODELAY); any other is read whole and sent with its
 * `content-length`.
 */

import { ByteQueue } from "./byte_queue.ts";
import { plural } from "../cli/plural.ts";
import { osErrorCode } from "../cli/file_system_error.ts";

/** What one server accepts of its clients. */
export interface ConnectionLimits {
  /** Wall ms a client may take to send a request's complete headers (from the accept, or from the request's first byte). */
  readonly headersTimeoutMs: number;
  /** Wall ms a keep-alive connection may idle between requests, and a client may take to read a response's next bytes. */
  readonly idleTimeoutMs: number;
  /** Connections this server holds at most; the next wait in the kernel's backlog. */
  readonly maxConnections: number;
  /** Largest request line and headers, bytes (431 past it). */
  readonly maxHeaderBytes: number;
}

/** The default wall ms for complete headers (nginx's `client_header_timeout` is 60 s, Node's `headersTimeout` 60 s; 30 s is the issue's bound). */
export const DEFAULT_HEADERS_TIMEOUT_MS = 30_000;

/** The default wall ms a keep-alive connection may idle (Node's `keepAliveTimeout` is 5 s, nginx's `keepalive_timeout` 75 s). */
export const DEFAULT_IDLE_TIMEOUT_MS = 30_000;

/** The default largest head, bytes: Node's `--max-http-header-size` (16 KiB). */
export const DEFAULT_MAX_HEADER_BYTES = 16_384;

/** Most header fields in one request (hyper's default, which `Deno.serve` uses). */
const MAX_HEADER_FIELDS = 100;

/** Bytes of a request body the server reads and drops after an answer that left them unread, to keep the connection. */
const MAX_DISCARD_BYTES = 65_536;

/**
 * Connection slots shared by the servers of one process, so that together
 * they stay under the process's descriptor limit.
 */
export class ConnectionPool {
  #used = 0;
  #waiters: (() => void)[] = [];

  /** @param size slots in all. */
  constructor(readonly size: number) {
    if (!(Number.isInteger(size) && size >= 1)) {
      throw new RangeError(`ConnectionPool.size: expected an integer >= 1, got ${size}`);
    }
  }

  /** Slots taken now. */
  get used(): number {
    return this.#used;
  }

  /** Takes a slot; false when none is free. */
  tryAcquire(): boolean {
    if (this.#used >= this.size) return false;
    this.#used++;
    return true;
  }

  /** Gives a slot back and wakes whoever waits for one. */
  release(): void {
    this.#used--;
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  /** Resolves at the next release (or at once if a slot is free). */
  freed(): Promise<void> {
    if (this.#used < this.size) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/** What a server has seen of its connections. */
export interface ConnectionStats {
  /** Connections open now. */
  readonly open: number;
  readonly accepted: number;
  /** Closed for not sending complete headers in time. */
  readonly headersTimedOut: number;
  /** Closed for idling between requests, or not reading a response, past the idle timeout. */
  readonly idleTimedOut: number;
  /** Accepts that failed for want of descriptors (EMFILE, ENFILE). */
  readonly descriptorErrors: number;
  /** Times it stopped accepting at its connection bound. */
  readonly atBound: number;
  /** Requests refused before the handler: malformed (400), head too large (431). */
  readonly malformed: number;
}

/** The stats of a server that has seen nothing (or is not running). */
export const NO_CONNECTIONS: ConnectionStats = Object.freeze({
  open: 0,
  accepted: 0,
  headersTimedOut: 0,
  idleTimedOut: 0,
  descriptorErrors: 0,
  atBound: 0,
  malformed: 0,
});

/** Options for {@linkcode serveHttp}. */
export interface HttpServerOptions {
  readonly hostname: string;
  /** 0 for an ephemeral port. */
  readonly port: number;
  /** Answers one request. A throw answers 500 (the handler should answer its own errors). */
  readonly handler: (request: Request) => Response | Promise<Response>;
  /** @default the DEFAULT_* constants, and 1024 connections */
  readonly limits?: Partial<ConnectionLimits>;
  /** Slots shared with the process's other servers. @default this server's own, of `maxConnections` */
  readonly pool?: ConnectionPool;
  /** Its name in warnings ("gateway", "instance 0"). */
  readonly name?: string;
  /** One line when it stops accepting (descriptors, bound) and when it accepts again. @default console.error */
  readonly onWarning?: (line: string) => void;
}

/** A listening server. */
export interface HttpServer {
  readonly addr: Deno.NetAddr;
  stats(): ConnectionStats;
  /** Stops accepting, closes idle connections, and resolves when every connection has ended (those mid-request finish first). */
  shutdown(): Promise<void>;
}

/** The full limits: `partial` over the defaults, each checked. */
export function connectionLimits(partial: Partial<ConnectionLimits> = {}): ConnectionLimits {
  const limits: ConnectionLimits = {
    headersTimeoutMs: DEFAULT_HEADERS_TIMEOUT_MS,
    idleTimeoutMs: DEFAULT_IDLE_TIMEOUT_MS,
    maxConnections: 1024,
    maxHeaderBytes: DEFAULT_MAX_HEADER_BYTES,
    ...partial,
  };
  for (const [field, value] of Object.entries(limits)) {
    const integer = field === "maxConnections" || field === "maxHeaderBytes";
    if (!(value > 0 && Number.isFinite(value) && (!integer || Number.isInteger(value)))) {
      throw new RangeError(
        `limits.${field}: expected ${integer ? "an integer" : "a finite number"} > 0, got ${value}`,
      );
    }
  }
  return limits;
}

/**
 * Listens on `options.hostname:options.port` (at once: the address is bound
 * when this returns) and serves HTTP/1.1 with `options.handler`.
 *
 * @example
 * ```ts
 * const server = serveHttp({ hostname: "127.0.0.1", port: 0, handler: () => new Response("ok") });
 * console.log(serverUrl(server.addr));
 * await server.shutdown();
 * ```
 */
export function serveHttp(options: HttpServerOptions): HttpServer {
  const limits = connectionLimits(options.limits);
  const listener = Deno.listen({ hostname: options.hostname, port: options.port, transport: "tcp" });
  return new Server(listener, options, limits);
}

const STATUS_TEXT: Readonly<Record<number, string>> = {
  100: "Continue",
  200: "OK",
  204: "No Content",
  304: "Not Modified",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  413: "Content Too Large",
  415: "Unsupported Media Type",
  422: "Unprocessable Content",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  499: "Client Closed Request",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
  505: "HTTP Version Not Supported",
};

const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");
const CHUNKED_END = encoder.encode("0\r\n\r\n");
const CRLF = encoder.encode("\r\n");

/** The bodies that came whole with their heads, by request (see {@linkcode wholeBodyOf}). */
const wholeBodies = new WeakMap<Request, Uint8Array>();

/**
 * The body of a request this server read whole before calling the handler
 * (a small body comes in the same packets as its head), or undefined (a
 * body still arriving, or a request from elsewhere): a JSON body then needs
 * no stream, reader or timer. Reading the request's own `body` still works.
 */
export function wholeBodyOf(request: Request): Uint8Array | undefined {
  return request.bodyUsed ? undefined : wholeBodies.get(request);
}

/** Whether `error` is the process (or system) running out of descriptors. */
export function isDescriptorExhaustion(error: unknown): boolean {
  const code = osErrorCode(error);
  return code === "EMFILE" || code === "ENFILE";
}

class Server implements HttpServer {
  readonly addr: Deno.NetAddr;
  readonly #listener: Deno.Listener<Deno.TcpConn, Deno.NetAddr>;
  readonly #options: HttpServerOptions;
  readonly #limits: ConnectionLimits;
  readonly #pool: ConnectionPool;
  readonly #connections = new Set<Connection>();
  readonly #warn: (line: string) => void;
  #closed = false;
  #accepting: Promise<void>;
  #slotFreed: (() => void) | undefined;
  /** Resolves the shutdown's wait for the last connection. */
  #allEnded: (() => void) | undefined;
  /** The timer that closes connections past their deadline. */
  readonly #sweep: ReturnType<typeof setInterval>;
  /** When it last said it stopped accepting, and the stops since that it did not say. */
  #lastStopLineMs = -Infinity;
  #unsaid = 0;
  readonly #stats: { -readonly [K in Exclude<keyof ConnectionStats, "open">]: number } = {
    ...NO_CONNECTIONS,
  };

  constructor(
    listener: Deno.Listener<Deno.TcpConn, Deno.NetAddr>,
    options: HttpServerOptions,
    limits: ConnectionLimits,
  ) {
    this.#listener = listener;
    this.addr = listener.addr;
    this.#options = options;
    this.#limits = limits;
    this.#pool = options.pool ?? new ConnectionPool(limits.maxConnections);
    this.#warn = options.onWarning ?? ((line) => console.error(line));
    this.#accepting = this.#acceptLoop();
    // One timer per server, not per request: it closes the connections past their deadline.
    const tickMs = Math.min(1000, Math.max(10, Math.min(limits.headersTimeoutMs, limits.idleTimeoutMs) / 4));
    this.#sweep = setInterval(() => {
      const now = performance.now();
      for (const connection of this.#connections) connection.expire(now);
    }, tickMs);
    Deno.unrefTimer(this.#sweep);
  }

  get limits(): ConnectionLimits {
    return this.#limits;
  }

  get handler(): HttpServerOptions["handler"] {
    return this.#options.handler;
  }

  /** Counts a connection closed by a timeout, or a malformed request. */
  count(what: "headersTimedOut" | "idleTimedOut" | "malformed"): void {
    this.#stats[what]++;
  }

  /** The connection has ended: its slot is free. */
  ended(connection: Connection): void {
    if (!this.#connections.delete(connection)) return;
    this.#pool.release();
    this.#slotFreed?.();
    this.#slotFreed = undefined;
    if (this.#closed && this.#connections.size === 0) this.#allEnded?.();
  }

  get closed(): boolean {
    return this.#closed;
  }

  stats(): ConnectionStats {
    return { ...this.#stats, open: this.#connections.size };
  }

  async shutdown(): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      this.#slotFreed?.();
      try {
        this.#listener.close();
      } catch { /* already closed */ }
    }
    await this.#accepting;
    const ended = new Promise<void>((resolve) => {
      this.#allEnded = resolve;
    });
    for (const connection of [...this.#connections]) connection.closeIfIdle();
    if (this.#connections.size > 0) await ended;
    clearInterval(this.#sweep);
  }

  /** The name warnings begin with. */
  get #name(): string {
    return this.#options.name ?? `server ${this.addr.hostname}:${this.addr.port}`;
  }

  /** Says that it stopped accepting: at most one line per 10 s, counting the stops it did not say. */
  #stopped(line: string): number {
    const now = performance.now();
    if (now - this.#lastStopLineMs < 10_000) {
      this.#unsaid++;
      return now;
    }
    const more = this.#unsaid > 0 ? ` (stopped ${this.#unsaid} more times since the last such line)` : "";
    this.#warn(line + more);
    this.#unsaid = 0;
    this.#lastStopLineMs = now;
    return now;
  }

  async #acceptLoop(): Promise<void> {
    let backoffMs = 0;
    let stoppedSince: number | undefined;
    while (!this.#closed) {
      if (this.#connections.size >= this.#limits.maxConnections) {
        stoppedSince ??= this.#atBound(plural(this.#limits.maxConnections, "connection"));
        await this.#ownSlot();
        continue;
      }
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
      } catch (error) {
        if (this.#closed || error instanceof Deno.errors.BadResource) return;
        if (isDescriptorExhaustion(error)) {
          this.#stats.descriptorErrors++;
          stoppedSince ??= this.#stopped(
            `${this.#name}: out of file descriptors (${(error as { code?: string }).code ?? "EMFILE"}) with ${
              plural(this.#connections.size, "connection")
            } open: not accepting for a while; ` +
              `raise the limit (ulimit -n) or lower --max-connections`,
          );
        }
        // Never an exit: wait, then accept again (10 ms doubling to 1 s).
        backoffMs = Math.min(1000, Math.max(10, backoffMs * 2));
        await new Promise((resolve) => setTimeout(resolve, backoffMs));
        continue;
      }
      backoffMs = 0;
      this.#stats.accepted++;
      // Accepted first, then a slot of the shared pool: a server waiting in accept holds none. Without
      // one, the connection waits here, unread (one per server at most), and nothing more is accepted.
      while (!this.#closed && !this.#pool.tryAcquire()) {
        stoppedSince ??= this.#atBound(
          `${plural(this.#pool.size, "connection")} shared by this process's servers`,
        );
        await this.#slot();
      }
      if (this.#closed) {
        conn.close();
        return;
      }
      if (stoppedSince !== undefined) {
        const stoppedMs = performance.now() - stoppedSince;
        if (stoppedMs >= 1000) {
          this.#warn(`${this.#name}: accepting again after ${(stoppedMs / 1000).toFixed(1)} s`);
        }
        stoppedSince = undefined;
      }
      try {
        conn.setNoDelay(true);
      } catch { /* closed already */ }
      const connection = new Connection(conn, this);
      this.#connections.add(connection);
      connection.serve();
    }
  }

  /** Counts and says (see #stopped) that it stopped at a bound; when. */
  #atBound(bound: string): number {
    this.#stats.atBound++;
    return this.#stopped(`${this.#name}: at its connection bound (${bound}): not accepting until one closes`);
  }

  /** Resolves when one of this server's own connections ends (or at shutdown). */
  #ownSlot(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#slotFreed = resolve;
    });
  }

  /** Resolves when one of this server's connections, or a slot of the shared pool, is freed (or at shutdown). */
  #slot(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#slotFreed = resolve;
      this.#pool.freed().then(resolve);
    });
  }
}

/** A malformed request: answered with `status` and the connection closed. */
class BadRequest extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

interface Head {
  readonly method: string;
  readonly target: string;
  readonly version: "1.0" | "1.1";
  readonly headers: Headers;
}

/** One client connection: its requests, one after another. */
class Connection {
  readonly #conn: Deno.TcpConn;
  readonly #server: Server;
  /** Bytes read and not yet consumed. */
  readonly #bytes = new ByteQueue(4096);
  #eof = false;
  #closed = false;
  /** The read in progress, if any (one at a time). */
  #reading: Promise<void> | undefined;
  /** performance.now() past which the server's sweep closes the connection (see Server's sweep); Infinity: none. */
  #deadlineAt = Infinity;
  #deadlineKind: "headersTimedOut" | "idleTimedOut" = "idleTimedOut";
  /** Waiting for the next request with no byte of it yet: may be closed at shutdown. */
  #idle = true;
  readonly #chunk = new Uint8Array(16_384);
  /** Cancels the response being streamed, when the client leaves. */
  #onGone: (() => void) | undefined;

  constructor(conn: Deno.TcpConn, server: Server) {
    this.#conn = conn;
    this.#server = server;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#deadlineAt = Infinity;
    try {
      this.#conn.close();
    } catch { /* already */ }
    this.#server.ended(this);
  }

  closeIfIdle(): void {
    if (this.#idle) this.close();
  }

  /** The server's sweep closes the connection `ms` from now unless the deadline is moved or cleared; counted as `what`. */
  #deadline(ms: number, what: "headersTimedOut" | "idleTimedOut"): void {
    this.#deadlineAt = performance.now() + ms;
    this.#deadlineKind = what;
  }

  #clearDeadline(): void {
    this.#deadlineAt = Infinity;
  }

  /** Closes the connection if its deadline has passed at `now` (the server's sweep). */
  expire(now: number): void {
    if (now < this.#deadlineAt) return;
    this.#server.count(this.#deadlineKind);
    this.close();
  }

  /** Reads more bytes into the buffer (false at the end of the stream); concurrent callers share one read. */
  #readMore(): Promise<void> {
    return this.#reading ??= (async () => {
      try {
        const n = await this.#conn.read(this.#chunk);
        if (n === null) {
          this.#eof = true;
          return;
        }
        this.#bytes.append(this.#chunk.subarray(0, n));
      } catch {
        this.#eof = true; // closed by a timeout, reset by the client
      } finally {
        this.#reading = undefined;
      }
    })();
  }

  get #available(): number {
    return this.#bytes.size;
  }

  /** Serves requests until the client closes, a timeout, an error or a `connection: close`. */
  async serve(): Promise<void> {
    const limits = this.#server.limits;
    let first = true;
    try {
      while (!this.#closed) {
        this.#idle = true;
        if (this.#server.closed) break;
        this.#deadline(
          first ? limits.headersTimeoutMs : limits.idleTimeoutMs,
          first ? "headersTimedOut" : "idleTimedOut",
        );
        while (this.#available === 0 && !this.#eof && !this.#closed) await this.#readMore();
        if (this.#available === 0) break;
        this.#idle = false;
        if (!first) this.#deadline(limits.headersTimeoutMs, "headersTimedOut");
        first = false;
        const head = await this.#readHead(limits.maxHeaderBytes);
        this.#clearDeadline();
        if (head === undefined) break;
        const keepAlive = await this.#exchange(head);
        if (!keepAlive) break;
      }
    } catch (error) {
      if (error instanceof BadRequest && !this.#closed) {
        this.#server.count("malformed");
        if (await this.#writeError(error.status, error.message)) await this.#linger();
      }
    } finally {
      this.close();
    }
  }

  /** The request line and headers, or undefined when the client left first. */
  async #readHead(maxBytes: number): Promise<Head | undefined> {
    let scanned = 0;
    while (true) {
      const bytes = this.#bytes.view();
      const end = findHeadEnd(bytes, Math.max(0, scanned - 3));
      if (end >= 0) {
        if (end > maxBytes) throw new BadRequest(431, `the request's headers are over ${maxBytes} bytes`);
        const text = latin1.decode(bytes.subarray(0, end));
        this.#bytes.skip(end + 4);
        return parseHead(text);
      }
      scanned = bytes.length;
      if (scanned > maxBytes) throw new BadRequest(431, `the request's headers are over ${maxBytes} bytes`);
      if (this.#eof || this.#closed) return undefined;
      await this.#readMore();
    }
  }

  /** The request's body as its head frames it: whole bytes, a reader, or none. */
  #body(headers: Headers): { bytes?: Uint8Array<ArrayBuffer>; body?: BodyReader } {
    const transferEncoding = headers.get("transfer-encoding");
    const contentLength = headers.get("content-length");
    if (transferEncoding !== null) {
      if (contentLength !== null) throw new BadRequest(400, "both transfer-encoding and content-length");
      if (transferEncoding.trim().toLowerCase() !== "chunked") {
        throw new BadRequest(501, `transfer-encoding ${JSON.stringify(transferEncoding)} is not supported`);
      }
      return { body: new BodyReader(this, null) };
    }
    if (contentLength === null) return {};
    if (!/^\d{1,15}$/.test(contentLength.trim())) {
      throw new BadRequest(400, `content-length ${JSON.stringify(contentLength)} is not a length`);
    }
    const length = Number(contentLength.trim());
    if (length === 0) return {};
    // Already here whole (a small JSON body comes with its head): handed over as bytes, not a stream.
    return this.#available >= length
      ? { bytes: this.takeNow(length) }
      : { body: new BodyReader(this, length) };
  }

  /** One request and its response; whether the connection may carry another. */
  async #exchange(head: Head): Promise<boolean> {
    const headers = head.headers;
    const { bytes, body } = this.#body(headers);
    if (body !== undefined && headers.get("expect")?.toLowerCase() === "100-continue") {
      await this.#write(encoder.encode("HTTP/1.1 100 Continue\r\n\r\n"));
    }
    const keepAlive = !this.#server.closed &&
      (head.version === "1.1"
        ? headers.get("connection")?.toLowerCase() !== "close"
        : headers.get("connection")?.toLowerCase() === "keep-alive");
    const gone = new AbortController();
    let request: Request;
    try {
      const host = `${
        this.#server.addr.hostname.includes(":")
          ? `[${this.#server.addr.hostname}]`
          : this.#server.addr.hostname
      }:${this.#server.addr.port}`;
      request = new Request(`http://${host}${head.target}`, {
        method: head.method,
        headers,
        body: bytes ?? body?.stream(),
        signal: gone.signal,
        // @ts-ignore: Deno's RequestInit takes duplex for a streamed body
        duplex: "half",
      });
    } catch (error) {
      throw new BadRequest(400, `the request is malformed: ${(error as Error).message}`);
    }
    if (bytes !== undefined) wholeBodies.set(request, bytes);
    let responding = true;
    // Once the body is in (or there is none), a read that ends the stream means the client left.
    const watch = async () => {
      await body?.finished;
      while (!this.#eof && !this.#closed && responding) {
        if (this.#available > MAX_DISCARD_BYTES) return; // pipelined far ahead: stop reading
        await this.#readMore();
      }
      if (this.#eof && responding) {
        gone.abort();
        this.#onGone?.();
      }
    };
    watch();
    let response: Response;
    try {
      response = await this.#server.handler(request);
    } catch (error) {
      const line = String((error as Error)?.message ?? error).split("\n", 1)[0];
      console.error(`${head.method} ${head.target}: the handler failed: ${line}`);
      response = new Response(
        JSON.stringify({
          error: { message: `Internal error: ${line}`, type: "server_error", param: null, code: null },
        }),
        { status: 500, headers: { "content-type": "application/json" } },
      );
    }
    const written = await this.#respond(head, response, keepAlive);
    this.#onGone = undefined;
    responding = false;
    if (!written || this.#closed) return false;
    if (body !== undefined && !body.done) return keepAlive && await body.discard(MAX_DISCARD_BYTES);
    return keepAlive;
  }

  /** Writes `response`; false when the client went away (or stopped reading) meanwhile. */
  async #respond(head: Head, response: Response, keepAlive: boolean): Promise<boolean> {
    const status = response.status;
    let head_ = `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? ""}\r\n`;
    for (const [name, value] of response.headers) {
      if (name === "content-length" || name === "transfer-encoding" || name === "connection") continue;
      head_ += `${name}: ${value}\r\n`;
    }
    const bodiless = head.method === "HEAD" || status === 204 || status === 304 || status < 200;
    const eventStream = (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
    const streamed = response.body !== null && !bodiless && eventStream;
    // HTTP/1.0 has no chunked coding: a stream's end is the connection's.
    const raw = streamed && head.version === "1.0";
    head_ += keepAlive && !raw ? "connection: keep-alive\r\n" : "connection: close\r\n";
    if (!streamed) {
      let bytes: Uint8Array;
      try {
        if (bodiless && eventStream) await response.body?.cancel(); // a HEAD of a stream: nothing to wait for
        bytes = response.body === null || response.bodyUsed
          ? new Uint8Array()
          : new Uint8Array(await response.arrayBuffer());
      } catch {
        return false; // the body failed: no answer, the connection closed (never a 200 with nothing)
      }
      if (status !== 204 && status !== 304) head_ += `content-length: ${bytes.length}\r\n`;
      head_ += "\r\n";
      const headBytes = encoder.encode(head_);
      if (bodiless || bytes.length === 0) return await this.#write(headBytes);
      const all = new Uint8Array(headBytes.length + bytes.length);
      all.set(headBytes, 0);
      all.set(bytes, headBytes.length);
      return await this.#write(all);
    }
    head_ += raw ? "\r\n" : "transfer-encoding: chunked\r\n\r\n";
    const reader = response.body!.getReader();
    // The client left while the stream waits for its next event: end it now (its producer sees the cancel).
    this.#onGone = () => reader.cancel().catch(() => {});
    if (this.#eof) this.#onGone();
    // What is ready goes out in one write: the head with the events already queued behind it, and the
    // events a producer queued together (a short answer's token, usage and end: one write, not five).
    const out = new WriteBatch(raw);
    out.addHead(encoder.encode(head_));
    while (true) {
      const read = reader.read();
      let next: ReadableStreamReadResult<Uint8Array> | undefined;
      try {
        next = await Promise.race([read, NOTHING_QUEUED]);
        if ((next === undefined || out.full) && !await this.#write(out.take())) {
          await reader.cancel().catch(() => {});
          return false;
        }
        next ??= await read;
      } catch {
        await this.#write(out.take());
        return false; // the body failed mid-way: the client sees a cut stream
      }
      if (next.done) {
        if (!raw && !this.#eof) out.addEnd();
        return await this.#write(out.take()) && !raw && !this.#eof;
      }
      out.add(next.value);
    }
  }

  /** Writes all of `bytes` within the idle timeout; false (and closed) when the client is gone or not reading. */
  async #write(bytes: Uint8Array): Promise<boolean> {
    if (this.#closed) return false;
    if (bytes.length === 0) return true;
    // A client that does not read: its window fills, the write waits, and the sweep closes it.
    this.#deadline(this.#server.limits.idleTimeoutMs, "idleTimedOut");
    try {
      let at = 0;
      while (at < bytes.length) at += await this.#conn.write(bytes.subarray(at));
      return true;
    } catch {
      this.close();
      return false;
    } finally {
      this.#clearDeadline();
    }
  }

  async #writeError(status: number, message: string): Promise<boolean> {
    const body = JSON.stringify({
      error: {
        message: `Malformed request: ${message}`,
        type: "invalid_request_error",
        param: null,
        code: null,
      },
    });
    return await this.#write(
      encoder.encode(
        `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? ""}\r\ncontent-type: application/json\r\n` +
          `content-length: ${encoder.encode(body).length}\r\nconnection: close\r\n\r\n${body}`,
      ),
    );
  }

  /**
   * After an error answer, with the client's request maybe still coming:
   * ends our side and reads (and drops) what it still sends, for at most 1 s
   * or 64 KiB, so that closing does not reset the connection before the
   * client has read the answer.
   */
  async #linger(): Promise<void> {
    try {
      await this.#conn.closeWrite();
    } catch {
      return;
    }
    const until = performance.now() + 1000;
    let dropped = 0;
    this.#deadline(1000, "idleTimedOut");
    while (!this.#eof && !this.#closed && performance.now() < until && dropped < MAX_DISCARD_BYTES) {
      dropped += this.#available;
      this.#bytes.clear();
      await this.#readMore();
    }
    this.#clearDeadline();
  }

  // ---- For BodyReader --------------------------------------------------------

  /** `n` buffered bytes, consumed (the caller checked they are there). */
  takeNow(n: number): Uint8Array<ArrayBuffer> {
    return this.#bytes.take(n);
  }

  /** Up to `max` buffered bytes (reading when none are), or null at the end of the stream. */
  async take(max: number): Promise<Uint8Array | null> {
    while (this.#available === 0) {
      if (this.#eof || this.#closed) return null;
      await this.#readBodyMore();
    }
    return this.#bytes.take(max);
  }

  /** One CRLF-terminated line (without it), or null at the end of the stream. */
  async line(maxBytes: number): Promise<string | null> {
    let scanned = 0;
    while (true) {
      const bytes = this.#bytes.view();
      for (let i = scanned; i + 1 < bytes.length; i++) {
        if (bytes[i] === 13 && bytes[i + 1] === 10) {
          if (i > maxBytes) throw new BadRequest(400, "a chunked body's line is too long");
          const text = latin1.decode(bytes.subarray(0, i));
          this.#bytes.skip(i + 2);
          return text;
        }
      }
      scanned = Math.max(0, bytes.length - 1);
      if (bytes.length > maxBytes) throw new BadRequest(400, "a chunked body's line is too long");
      if (this.#eof || this.#closed) return null;
      await this.#readBodyMore();
    }
  }

  /** Reads more of a request's body: a client that sends none of it for the idle timeout is closed. */
  async #readBodyMore(): Promise<void> {
    this.#deadline(this.#server.limits.idleTimeoutMs, "idleTimedOut");
    try {
      await this.#readMore();
    } finally {
      this.#clearDeadline();
    }
  }
}

/** Settled at once: raced with a stream's read, it says whether a chunk was queued already (the read wins then). */
const NOTHING_QUEUED: Promise<undefined> = Promise.resolve(undefined);

/** Bytes a streamed response gathers before it writes them (without waiting for more). */
const WRITE_BATCH_BYTES = 65_536;

/** A streamed response's bytes not written yet: the head, chunks framed (unless `raw`), the end. */
class WriteBatch {
  #parts: Uint8Array[] = [];
  #bytes = 0;

  /** @param raw write chunks as they are (HTTP/1.0), not in chunked coding. */
  constructor(readonly raw: boolean) {}

  /** Whether it holds enough to write now. */
  get full(): boolean {
    return this.#bytes >= WRITE_BATCH_BYTES;
  }

  addHead(head: Uint8Array): void {
    this.#push(head);
  }

  /** One chunk of the body (an empty one is nothing: in chunked coding it would end the body). */
  add(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    if (!this.raw) this.#push(encoder.encode(`${chunk.length.toString(16)}\r\n`));
    this.#push(chunk);
    if (!this.raw) this.#push(CRLF);
  }

  /** The last chunk of chunked coding. */
  addEnd(): void {
    this.#push(CHUNKED_END);
  }

  /** Everything held, as one buffer (empty when nothing is), and empties the batch. */
  take(): Uint8Array {
    const parts = this.#parts;
    const all = parts.length === 1 ? parts[0] : new Uint8Array(this.#bytes);
    if (parts.length > 1) {
      let at = 0;
      for (const part of parts) {
        all.set(part, at);
        at += part.length;
      }
    }
    this.#parts = [];
    this.#bytes = 0;
    return all;
  }

  #push(bytes: Uint8Array): void {
    this.#parts.push(bytes);
    this.#bytes += bytes.length;
  }
}

/** Reads one request's body from its connection: `length` bytes, or chunked when `length` is null. */
class BodyReader {
  #remaining: number;
  /** Bytes left in the current chunk (chunked). */
  #inChunk = 0;
  #done = false;
  #cancelled = false;
  /** A read failed (malformed, or the client left): the connection's framing is lost. */
  #failed = false;
  /** Reads one after another, whoever asks (the handler's stream, then the discard). */
  #queue: Promise<unknown> = Promise.resolve();
  readonly #finished = Promise.withResolvers<void>();

  constructor(readonly connection: Connection, readonly length: number | null) {
    this.#remaining = length ?? 0;
  }

  /** Resolves once the body is read whole, cancelled, or broken. */
  get finished(): Promise<void> {
    return this.#finished.promise;
  }

  /** Whether the body was read to its end. */
  get done(): boolean {
    return this.#done;
  }

  #finish(done: boolean): void {
    this.#done = done;
    this.#finished.resolve();
  }

  /** The next piece of the body, or null at its end; throws when the stream ends early or is malformed. */
  next(): Promise<Uint8Array | null> {
    const read = this.#queue.then(() => this.#next()).catch((error) => {
      this.#failed = true;
      throw error;
    });
    this.#queue = read.catch(() => {});
    return read;
  }

  async #next(): Promise<Uint8Array | null> {
    if (this.#failed) throw new Error("the body could not be read");
    if (this.#done) return null;
    if (this.length !== null) {
      if (this.#remaining === 0) {
        this.#finish(true);
        return null;
      }
      const bytes = await this.connection.take(this.#remaining);
      if (bytes === null) throw new Error("the client closed the connection mid-body");
      this.#remaining -= bytes.length;
      if (this.#remaining === 0) this.#finish(true);
      return bytes;
    }
    if (this.#inChunk === 0) {
      const line = await this.connection.line(1024);
      if (line === null) throw new Error("the client closed the connection mid-body");
      const size = line.split(";", 1)[0].trim();
      if (!/^[0-9a-fA-F]{1,12}$/.test(size)) {
        throw new BadRequest(400, `bad chunk size ${JSON.stringify(size)}`);
      }
      this.#inChunk = parseInt(size, 16);
      if (this.#inChunk === 0) {
        // Trailers, up to the empty line.
        while (true) {
          const trailer = await this.connection.line(8192);
          if (trailer === null) throw new Error("the client closed the connection mid-body");
          if (trailer === "") break;
        }
        this.#finish(true);
        return null;
      }
    }
    const bytes = await this.connection.take(this.#inChunk);
    if (bytes === null) throw new Error("the client closed the connection mid-body");
    this.#inChunk -= bytes.length;
    if (this.#inChunk === 0) {
      const end = await this.connection.line(2);
      if (end !== "") throw new BadRequest(400, "a chunk does not end with CRLF");
    }
    return bytes;
  }

  /** The body as the handler's `request.body`. */
  stream(): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        try {
          const bytes = await this.next();
          if (bytes === null) controller.close();
          else controller.enqueue(bytes);
        } catch (error) {
          this.#failed = true;
          this.#finish(false);
          controller.error(error);
        }
      },
      cancel: () => {
        this.#cancelled = true;
        if (!this.#done) this.#finish(false);
      },
    }, { highWaterMark: 0 });
  }

  /** Reads and drops what is left, up to `maxBytes`; whether the connection can carry another request. */
  async discard(maxBytes: number): Promise<boolean> {
    if (this.#failed || (this.#cancelled && !this.#done)) return false;
    let dropped = 0;
    try {
      while (!this.#done) {
        const bytes = await this.next();
        if (bytes === null) break;
        dropped += bytes.length;
        if (dropped > maxBytes) return false;
      }
      return true;
    } catch {
      return false;
    }
  }
}

/** Index of the `\r\n\r\n` ending a head in `bytes` (searching from `from`), or -1. */
function findHeadEnd(bytes: Uint8Array, from: number): number {
  for (let i = from; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) return i;
  }
  return -1;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The request line and header fields of `text` (the head without its final CRLFCRLF). */
function parseHead(text: string): Head {
  const lines = text.split("\r\n");
  // A client may send empty lines before a request (RFC 9112 §2.2).
  while (lines.length > 0 && lines[0] === "") lines.shift();
  const requestLine = lines.shift() ?? "";
  const parts = requestLine.split(" ");
  if (parts.length !== 3) {
    throw new BadRequest(400, `bad request line ${JSON.stringify(requestLine.slice(0, 80))}`);
  }
  const [method, target, protocol] = parts;
  if (!TOKEN.test(method)) throw new BadRequest(400, `bad method ${JSON.stringify(method.slice(0, 20))}`);
  if (!target.startsWith("/") || hasControlOrSpace(target)) {
    throw new BadRequest(400, `bad request target ${JSON.stringify(target.slice(0, 80))}`);
  }
  if (protocol !== "HTTP/1.1" && protocol !== "HTTP/1.0") {
    throw new BadRequest(505, `unsupported protocol ${JSON.stringify(protocol.slice(0, 20))}`);
  }
  if (lines.length > MAX_HEADER_FIELDS) {
    throw new BadRequest(431, `more than ${MAX_HEADER_FIELDS} header fields`);
  }
  const headers = new Headers();
  for (const line of lines) {
    const colon = line.indexOf(":");
    const name = colon < 0 ? "" : line.slice(0, colon);
    if (!TOKEN.test(name)) throw new BadRequest(400, `bad header line ${JSON.stringify(line.slice(0, 80))}`);
    try {
      headers.append(name, line.slice(colon + 1).trim());
    } catch {
      throw new BadRequest(400, `bad header ${JSON.stringify(name)}`);
    }
  }
  return { method, target, version: protocol === "HTTP/1.1" ? "1.1" : "1.0", headers };
}

/** Whether `text` has a space, a control character or DEL (not allowed in a request target). */
function hasControlOrSpace(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c <= 32 || c === 127) return true;
  }
  return false;
}

/** Descriptors `serve` leaves for everything but client connections: Deno itself, Workers, files, scrapes. */
export const RESERVED_DESCRIPTORS = 64;

/** The free descriptors assumed where they cannot be counted: the usual soft `ulimit -n` of 1024, less what a process holds. */
export const FALLBACK_FREE_DESCRIPTORS = 1000;

/** How many descriptors {@linkcode freeDescriptors} counts at most. */
export const DESCRIPTOR_PROBE_MAX = 8192;

/**
 * How many more descriptors this process may open (its `ulimit -n` less
 * those open), counted by opening `/dev/null` until the limit (EMFILE) or
 * `max`, then closing them all: Deno grants `/proc/self/limits` to
 * `--allow-all` only. `limited` says the limit was met below `max`;
 * undefined when `/dev/null` cannot be opened (no read permission, not a
 * POSIX system).
 */
export function freeDescriptors(max = DESCRIPTOR_PROBE_MAX): { free: number; limited: boolean } | undefined {
  const files: Deno.FsFile[] = [];
  try {
    while (files.length < max) files.push(Deno.openSync("/dev/null"));
    return { free: files.length, limited: false };
  } catch (error) {
    return isDescriptorExhaustion(error) ? { free: files.length, limited: true } : undefined;
  } finally {
    for (const file of files) file.close();
  }
}
