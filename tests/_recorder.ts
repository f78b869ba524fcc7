/**
 * @module
 * A test double: an actor that records every message it receives and when,
 * standing in for an actor's peers in protocol tests.
 */
import type { Actor, ActorContext, Message } from "../actors/runtime/kernel.ts";

/** One received message and its delivery time. */
export interface Received<M> {
  readonly timeMs: number;
  readonly message: M;
}

/** Records what it is sent. */
export class Recorder<M extends Message> implements Actor<M> {
  readonly received: Received<M>[] = [];
  handle(message: M, ctx: ActorContext<M>): void {
    this.received.push({ timeMs: ctx.now(), message });
  }
  /** The received messages of one `type`. */
  ofType<T extends M["type"]>(type: T): Received<Extract<M, { type: T }>>[] {
    return this.received.filter((r) => r.message.type === type) as Received<Extract<M, { type: T }>>[];
  }
}
