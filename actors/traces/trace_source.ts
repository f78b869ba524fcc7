/**
 * @module
 * The trace source actor: replays a request trace to the router, streaming
 * it from disk (or from its generator), with the same batching of arrivals as
 * the synthetic source.
 */
import { GeneratedTraceReader } from "./generated_trace_reader.ts";
import { assertNever, type RouteCommand, type SourceCommand } from "../protocol.ts";
import type { RequestClasses } from "../workload/request_classes.ts";
import type { Actor, ActorContext, ActorRef } from "../runtime/kernel.ts";
import {
  type TraceOptions,
  TraceReader,
  type TraceRequest,
  type TraceRequestReader,
} from "./trace_reader.ts";

const EMIT: SourceCommand = Object.freeze({ type: "emit" });

/**
 * Opens the reader of a trace: the file's, or the generator's when the trace
 * is named by generator parameters.
 *
 * @throws {RangeError} for an invalid generator parameter; a file-system error for an unreadable file.
 */
export function openTrace(options: TraceOptions): TraceRequestReader {
  return options.generate !== undefined ? new GeneratedTraceReader(options) : new TraceReader(options);
}

/**
 * Emits each trace line as a request at its (scaled) time. Opens the trace
 * when constructed and closes it after the last line.
 *
 * @throws {TraceFormatError} from a handler, for a malformed line (unless skipping).
 */
export class TraceSource implements Actor<SourceCommand> {
  readonly #reader: TraceRequestReader;
  readonly #router: ActorRef<RouteCommand>;
  readonly #batchSize: number;
  readonly #classes: RequestClasses | undefined;
  #lookahead: TraceRequest | undefined;
  #emitted = 0;
  #started = false;

  /**
   * @param trace The trace's options (see {@linkcode openTrace}), or any reader of requests.
   * @param router Where the requests go.
   * @param batchSize Arrivals sent per handler call.
   * @param classes Draws each replayed request's class (from its own stream); absent: requests carry none.
   */
  constructor(
    trace: TraceOptions | TraceRequestReader,
    router: ActorRef<RouteCommand>,
    batchSize = 64,
    classes?: RequestClasses,
  ) {
    this.#reader = "next" in trace ? trace : openTrace(trace);
    this.#router = router;
    this.#batchSize = batchSize;
    this.#classes = classes;
  }

  /** Requests sent to the router so far. */
  get emitted(): number {
    return this.#emitted;
  }

  /** Malformed lines skipped (with `skipInvalid`). */
  get skipped(): number {
    return this.#reader.skipped;
  }

  handle(message: SourceCommand, ctx: ActorContext<SourceCommand>): void {
    switch (message.type) {
      case "start":
        if (this.#started) return;
        this.#started = true;
        this.#lookahead = this.#reader.next();
        this.#emitBatch(ctx);
        break;
      case "emit":
        this.#emitBatch(ctx);
        break;
      default:
        assertNever(message);
    }
  }

  #emitBatch(ctx: ActorContext<SourceCommand>): void {
    const now = ctx.now();
    let lastMs = now;
    for (let n = 0; n < this.#batchSize && this.#lookahead !== undefined; n++) {
      const traced = this.#lookahead;
      const arrivalMs = Math.max(now, traced.arrivalMs);
      const request = { ...traced, id: this.#emitted, arrivalMs };
      ctx.send(
        this.#router,
        { type: "route", request: this.#classes === undefined ? request : this.#classes.assign(request) },
        arrivalMs - now,
      );
      this.#emitted++;
      lastMs = arrivalMs;
      this.#lookahead = this.#reader.next();
    }
    if (this.#lookahead !== undefined) ctx.schedule(lastMs - now, EMIT);
    else this.#reader.close();
  }
}
