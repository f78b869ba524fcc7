/**
 * @module
 * HTTP helpers shared by the simulated servers, the gateway and the load
 * generator: a bounded JSON body reader, JSON and OpenAI-error responses, and
 * Server-Sent Events writing and reading (the `data: <JSON>\n\n` framing of
 * OpenAI's streams, ending with `data: [DONE]`).
 */
import type { ByteReader, ByteStream } from "./http_client.ts";
import { wholeBodyOf } from "./http_server.ts";
import { OpenAIError, refuseDeepNesting } from "./openai.ts";

/** Largest request body accepted by default, in bytes (1 MiB). */
export const DEFAULT_MAX_BODY_BYTES = 1_048_576;

function tooLarge(maxBytes: number): OpenAIError {
  return new OpenAIError(413, `Request body too large: the limit is ${maxBytes} bytes`, {
    code: "request_too_large",
  });
}

/** Reads `reader`'s stream whole, refusing (and cancelling the rest) once it passes `maxBytes`. */
async function readBounded(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  maxBytes: number,
): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let length = 0;
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) break;
      length += value.byteLength;
      if (length > maxBytes) {
        await reader.cancel().catch(() => {});
        throw tooLarge(maxBytes);
      }
      chunks.push(value);
    }
  } finally {
    // A cancelled read (a timeout) still holds the lock here: nothing is left to read.
    reader.releaseLock();
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

/** Wall ms a client may take to send its whole body: a stalled upload must not hold a handler (and a shutdown) forever. */
export const BODY_TIMEOUT_MS = 30_000;

/** The body, within `timeoutMs` (else 408), and a client that goes away mid-body as a 400 (nobody reads it). */
async function readWithin(
  body: ReadableStream<Uint8Array>,
  maxBytes: number,
  timeoutMs: number,
): Promise<Uint8Array> {
  const reader = body.getReader();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reader.cancel().catch(() => {});
      reject(
        new OpenAIError(408, `The request body did not arrive within ${timeoutMs} ms.`, { code: "timeout" }),
      );
    }, timeoutMs);
  });
  try {
    return await Promise.race([readBounded(reader, maxBytes), expired]);
  } catch (error) {
    if (error instanceof OpenAIError) throw error;
    throw new OpenAIError(400, `The request body could not be read: ${(error as Error)?.message ?? error}`);
  } finally {
    clearTimeout(timer);
  }
}

/** Options for {@linkcode readJsonBody}. */
export interface ReadJsonBodyOptions {
  /** Wall ms the client may take to send its whole body (else 408). @default BODY_TIMEOUT_MS */
  readonly timeoutMs?: number;
  /**
   * Refuse (400) a body whose `Content-Type` is not `application/json`
   * (parameters such as `charset` aside), a missing one included, as vLLM's
   * `validate_json_request` does on its OpenAI routes. @default false
   */
  readonly requireJsonContentType?: boolean;
}

/**
 * The 400 for a `Content-Type` other than `application/json`, in the words of
 * vLLM's `validate_json_request` (vllm/entrypoints/openai/api_server.py),
 * which compares the media type (lowercased, before any `;`) exactly.
 */
function unsupportedMediaType(contentType: string | null): OpenAIError | undefined {
  const mediaType = (contentType ?? "").split(";", 1)[0].trim().toLowerCase();
  if (mediaType === "application/json") return undefined;
  const got = contentType === null ? "no content-type header" : `content-type ${JSON.stringify(contentType)}`;
  return new OpenAIError(
    400,
    `Unsupported Media Type: Only 'application/json' is allowed, got ${got}`,
    { code: "unsupported_media_type" },
  );
}

/**
 * A request's JSON object body, read as a stream and never buffered past
 * `maxBytes` (+ one chunk): a `Content-Length` over the limit is refused
 * before reading. A body nested deeper than `MAX_JSON_DEPTH` (openai.ts) is
 * refused before the caller can walk it.
 *
 * @throws {OpenAIError} 400 `unsupported_media_type` for a content type other
 *   than JSON when `options.requireJsonContentType` (before reading); 413
 *   (`request_too_large`) past the limit; 408 when it takes longer than
 *   `options.timeoutMs` to arrive; 400 "Invalid JSON body: …" for bytes that
 *   are not UTF-8 JSON, JSON that is not an object, or JSON nested too deep.
 */
export async function readJsonBody(
  request: Request,
  maxBytes: number,
  options: ReadJsonBodyOptions = {},
): Promise<Record<string, unknown>> {
  const { timeoutMs = BODY_TIMEOUT_MS, requireJsonContentType = false } = options;
  const mediaError = requireJsonContentType
    ? unsupportedMediaType(request.headers.get("content-type"))
    : undefined;
  const declared = request.headers.get("content-length");
  const refusal = mediaError ??
    (declared !== null && Number(declared) > maxBytes ? tooLarge(maxBytes) : undefined);
  if (refusal !== undefined) {
    await request.body?.cancel().catch(() => {});
    throw refusal;
  }
  const whole = wholeBodyOf(request);
  if (whole !== undefined && whole.length > maxBytes) {
    await request.body?.cancel().catch(() => {});
    throw tooLarge(maxBytes);
  }
  const bytes = whole ??
    (request.body === null ? new Uint8Array() : await readWithin(request.body, maxBytes, timeoutMs));
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new OpenAIError(400, "Invalid JSON body: not valid UTF-8");
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    const reason = text.trim() === "" ? "the body is empty" : (error as Error).message;
    throw new OpenAIError(400, `Invalid JSON body: ${reason}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    const got = value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
    throw new OpenAIError(400, `Invalid JSON body: expected a JSON object, got ${got}`);
  }
  // JSON.parse is iterative in V8; what walks the value next may not be.
  refuseDeepNesting(value);
  return value as Record<string, unknown>;
}

/** A listening server's base URL (`http://host:port`; an IPv6 address in brackets). */
export function serverUrl(addr: Deno.NetAddr): string {
  return `http://${addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname}:${addr.port}`;
}

/** A JSON response (`content-type: application/json`). */
export function jsonResponse(status: number, body: unknown, headers?: HeadersInit): Response {
  const merged = new Headers(headers);
  merged.set("content-type", "application/json");
  return new Response(JSON.stringify(body), { status, headers: merged });
}

/** `error`'s OpenAI body with its status. */
export function errorResponse(error: OpenAIError, headers?: HeadersInit): Response {
  return jsonResponse(error.status, error.body(), headers);
}

const encoder = new TextEncoder();
const DONE = encoder.encode("data: [DONE]\n\n");

/**
 * A Server-Sent Events response body written event by event: `send` writes
 * `data: <JSON>\n\n`, `done` writes `data: [DONE]\n\n` and closes.
 *
 * @example
 * ```ts
 * const sse = new SseWriter(() => abort.abort());
 * sse.send({ choices: [] });
 * sse.done();
 * return sse.response();
 * ```
 */
export class SseWriter {
  /** The body to answer with (or use `response()`). */
  readonly stream: ReadableStream<Uint8Array>;
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  #closed = false;

  /**
   * An open stream, written by `send` and ended by `done` or `close`.
   *
   * @param onCancel called once if the client goes away (the stream is
   *   cancelled) before the writer closed it.
   */
  constructor(onCancel?: () => void) {
    this.stream = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.#controller = controller;
      },
      cancel: () => {
        if (this.#closed) return;
        this.#closed = true;
        onCancel?.();
      },
    });
  }

  /** Whether the stream is closed (by `done`/`close`, or the client went away). */
  get closed(): boolean {
    return this.#closed;
  }

  /** A 200 `text/event-stream` response (no-cache) over the stream. */
  response(headers?: HeadersInit): Response {
    const merged = new Headers(headers);
    merged.set("content-type", "text/event-stream; charset=utf-8");
    merged.set("cache-control", "no-cache");
    return new Response(this.stream, { status: 200, headers: merged });
  }

  /** Writes one `data: <JSON>` event; false once closed or the client went away. */
  send(data: unknown): boolean {
    return this.#enqueue(encoder.encode(`data: ${JSON.stringify(data)}\n\n`));
  }

  /** Writes `data: [DONE]` and closes. */
  done(): void {
    if (this.#enqueue(DONE)) this.close();
  }

  /** Closes the stream (what was written is still delivered). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#controller.close();
    } catch {
      // Already cancelled or errored: nothing to close.
    }
  }

  #enqueue(bytes: Uint8Array): boolean {
    if (this.#closed) return false;
    try {
      this.#controller.enqueue(bytes);
      return true;
    } catch {
      this.#closed = true;
      return false;
    }
  }
}

/** Splits SSE text into complete lines (CR, LF or CRLF ends one), keeping an unfinished tail. */
function takeLines(buffer: string, final: boolean): { lines: string[]; rest: string } {
  const lines: string[] = [];
  let start = 0;
  for (let i = 0; i < buffer.length; i++) {
    const c = buffer.charCodeAt(i);
    if (c !== 10 && c !== 13) continue;
    if (c === 13 && i + 1 === buffer.length && !final) break; // maybe the CR of a CRLF split in two
    lines.push(buffer.slice(start, i));
    if (c === 13 && buffer.charCodeAt(i + 1) === 10) i++;
    start = i + 1;
  }
  return { lines, rest: buffer.slice(start) };
}

/**
 * The `data` payload of each event of an SSE body (several `data:` lines of
 * one event joined by "\n"), including the final `[DONE]`; chunks may split
 * the stream anywhere (inside a line, a CRLF or a UTF-8 sequence). Comments
 * (`:` lines) and other fields are ignored; an event that has data but no
 * blank line before the end of the body is still yielded. Stopping the
 * iteration early cancels the body.
 */
export async function* readSseData(body: ReadableStream<Uint8Array> | ByteStream): AsyncGenerator<string> {
  for await (const events of readSseEvents(body)) yield* events;
}

/**
 * The same events as {@linkcode readSseData}, as the batches that each read
 * of the body completed (never empty): a relay that handles a batch at once
 * passes events that arrived together on together (one write, not one per
 * event). Stopping the iteration early cancels the body.
 */
export async function* readSseEvents(
  body: ReadableStream<Uint8Array> | ByteStream,
): AsyncGenerator<string[]> {
  const reader: ByteReader = body instanceof ReadableStream ? body.getReader() : body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let finished = false;
  try {
    while (!finished) {
      const { done, value } = await reader.read();
      finished = done;
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      const { lines, rest } = takeLines(buffer, done);
      buffer = rest;
      if (done && rest !== "") lines.push(rest);
      const events: string[] = [];
      for (const line of lines) {
        if (line === "") {
          if (data.length > 0) events.push(data.join("\n"));
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        if (field !== "data") continue;
        const value = colon < 0 ? "" : line.slice(line.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1);
        data.push(value);
      }
      if (done && data.length > 0) events.push(data.join("\n"));
      if (events.length > 0) yield events;
    }
  } finally {
    if (!finished) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
