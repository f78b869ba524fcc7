/**
 * @module
 * The Worker side of the real-time runtime: hosts one actor, built by a
 * factory named in the `init` message, and runs its `handle` on each delivery.
 * Whatever the actor sends, schedules or cancels goes back to the central
 * clock in one `handled` reply; the actor code is the very code the virtual
 * kernel runs. A Worker entry module calls {@linkcode serveActor} with the
 * factories it offers (imported statically, so the Worker needs no read
 * permission to load them).
 */
/// <reference lib="deno.worker" />
import type { Actor, ActorContext, ActorRef, Message, TimerId } from "./kernel.ts";
import { createRandomStream, type RandomStream } from "./random_stream.ts";
import { SimulationError } from "./simulation_error.ts";
import type { HostCommand, HostReply, Outgoing } from "./worker_runtime.ts";

class HostContext implements ActorContext<Message> {
  readonly random: RandomStream;
  outbox: Outgoing[] = [];
  timeMs = 0;
  #timers = 0;
  constructor(readonly self: ActorRef<Message>, readonly name: string, seed: number) {
    this.random = createRandomStream(seed, name);
  }
  now(): number {
    return this.timeMs;
  }
  send<T extends Message>(to: ActorRef<T>, message: T, delayMs = 0): void {
    checkDelay(delayMs, message);
    this.outbox.push({ op: "send", to, message, delayMs });
  }
  schedule(delayMs: number, message: Message): TimerId {
    checkDelay(delayMs, message);
    const timer = this.#timers++;
    this.outbox.push({ op: "schedule", timer, message, delayMs });
    return timer as TimerId;
  }
  cancel(timer: TimerId): void {
    this.outbox.push({ op: "cancel", timer });
  }
}

function checkDelay(delayMs: number, message: Message): void {
  if (!(delayMs >= 0) || delayMs === Infinity) {
    throw new RangeError(
      `send: delayMs must be a finite number >= 0, got ${delayMs} (message "${message.type}")`,
    );
  }
}

/** Builds an actor from structured-cloneable arguments. */
// deno-lint-ignore no-explicit-any
export type ActorFactory = (...args: any[]) => Actor<any> | Promise<Actor<any>>;

/** Makes this Worker host one actor built by one of `factories`. */
export function serveActor(factories: Readonly<Record<string, unknown>>): void {
  let actor: Actor<Message> | undefined;
  let ctx: HostContext | undefined;
  const reply = (r: HostReply) => self.postMessage(r);
  // An error outside any handler (an asynchronous throw) kills the actor:
  // report it as a crash instead of letting Deno print a stack trace.
  self.addEventListener("error", (event) => {
    event.preventDefault();
    reply({
      type: "failed",
      kind: "worker_crashed",
      message: event.message.replace(/^Uncaught (\(in promise\) )?/, ""),
    });
    self.close();
  });
  self.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    reply({ type: "failed", kind: "worker_crashed", message: String(event.reason?.message ?? event.reason) });
    self.close();
  });

  self.onmessage = async (event: MessageEvent<HostCommand>) => {
    const command = event.data;
    if (command.type === "init") {
      try {
        const factory = factories[command.factory] as ActorFactory | undefined;
        if (typeof factory !== "function") throw new TypeError(`no actor factory named "${command.factory}"`);
        actor = await factory(...command.args);
        ctx = new HostContext(command.self as ActorRef<Message>, command.name, command.seed);
        reply({ type: "ready" });
      } catch (error) {
        reply({
          type: "failed",
          kind: "actor_threw",
          message: `could not start: ${(error as Error).message}`,
        });
      }
      return;
    }
    ctx!.timeMs = command.timeMs;
    ctx!.outbox = [];
    try {
      actor!.handle(command.message, ctx!);
      reply({ type: "handled", outbox: ctx!.outbox });
    } catch (error) {
      const kind = error instanceof SimulationError ? error.kind : "actor_threw";
      const message = error instanceof SimulationError
        ? error.detail
        : (error as Error)?.message ?? String(error);
      reply({ type: "failed", kind, message });
    }
  };
}
