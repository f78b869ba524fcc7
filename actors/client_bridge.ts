/**
 * @module
 * The client bridge: what simulated instances send about their requests,
 * handed to the clients waiting outside the simulation (`deno task serve`'s
 * HTTP servers, scenarios/wire/sim_server.ts). Instances address it as their
 * metrics collector and as their first-token listener; it paces each
 * request's further tokens at the instance's own estimate of the time per
 * token, on its own timers, so a stream keeps simulated time at any speed.
 * Its clients are an injected {@linkcode ClientSink}: the bridge does no I/O.
 */
import {
  assertNever,
  type CompletionRecord,
  type DropReason,
  type FirstToken,
  type InstanceStatus,
  type MetricsCommand,
} from "./protocol.ts";
import type { Actor, ActorContext } from "./runtime/kernel.ts";

/** The clients' side of the bridge: each call is one event of one request (by id). */
export interface ClientSink {
  /** The request's first token exists (at `timeMs`). */
  firstToken(requestId: number, timeMs: number): void;
  /**
   * One more token exists; returns whether another may follow before the
   * completion (false: stop pacing this request — its last token comes with
   * its completion, or its client is gone).
   */
  token(requestId: number, timeMs: number): boolean;
  /** The request finished: every token not sent yet, then the end. */
  completed(record: CompletionRecord): void;
  /** The instance refused the request. */
  dropped(requestId: number, reason: DropReason, timeMs: number): void;
}

/** The bridge's own timer: the next token of a request is due. */
export interface TokenTick {
  readonly type: "token_tick";
  readonly requestId: number;
  readonly tokenMs: number;
}

/** Everything the bridge accepts. */
export type ClientBridgeCommand = MetricsCommand | FirstToken | InstanceStatus | TokenTick;

/** Shortest pacing interval, simulated ms: an instance that decodes faster streams its tokens with its completion. */
const MIN_TOKEN_MS = 0.5;

/** Hands instances' outputs to the clients. */
export class ClientBridge implements Actor<ClientBridgeCommand> {
  readonly #sink: ClientSink;

  constructor(sink: ClientSink) {
    this.#sink = sink;
  }

  handle(message: ClientBridgeCommand, ctx: ActorContext<ClientBridgeCommand>): void {
    switch (message.type) {
      case "first_token":
        this.#sink.firstToken(message.requestId, message.timeMs);
        if (message.tokenMs >= MIN_TOKEN_MS) {
          ctx.schedule(message.tokenMs, {
            type: "token_tick",
            requestId: message.requestId,
            tokenMs: message.tokenMs,
          });
        }
        return;
      case "token_tick":
        if (this.#sink.token(message.requestId, ctx.now())) ctx.schedule(message.tokenMs, message);
        return;
      case "completed":
        // An instance sends its record when the engine is done; the client
        // sees the end after the request's overhead, at the record's endMs.
        if (message.record.endMs > ctx.now()) ctx.schedule(message.record.endMs - ctx.now(), message);
        else this.#sink.completed(message.record);
        return;
      case "dropped":
        this.#sink.dropped(message.requestId, message.reason, message.timeMs);
        return;
      // Load is read from the instances themselves at a scrape; failures and scaling do not occur here.
      case "status":
      case "instance_stats":
      case "attempt_failed":
      case "scaled":
      case "slo_probe":
        return;
      default:
        assertNever(message);
    }
  }
}
