/**
 * @module
 * The Worker side of the real-time runtime: hosts the actors the runtime
 * spawns in this Worker — one or many — each built by a factory named in its
 * `spawn` command and with its own context and random stream, and runs the
 * addressed actor's `handle` on each delivery. Whatever the actor sends,
 * schedules or cancels goes back to the central clock in one `handled` reply;
 * the actor code is the very code the virtual kernel runs. A Worker entry
 * module calls {@linkcode serveActor} with the factories it offers (imported
 * statically, so the Worker needs no read permission to load them).
 */
/// <reference lib="deno.worker" />
import type { Actor, ActorContext, ActorRef, Message, TimerId } from "./kernel.ts";
import { createRandomStream, type RandomStream } from "./random_stream.ts";
import { errorToData, SimulationError } from "./simulation_error.ts";
import { assertBuiltInsIntact, explainLockdown } from "./plugin_lockdown.ts";
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
  scheduleBackground(delayMs: number, message: Message): TimerId {
    checkDelay(delayMs, message);
    const timer = this.#timers++;
    this.outbox.push({ op: "schedule", timer, message, delayMs, background: true });
    return timer as TimerId;
  }
  scheduleAt(timeMs: number, message: Message): TimerId {
    const delayMs = timeMs - this.timeMs;
    checkDelay(delayMs, message);
    const timer = this.#timers++;
    // The instant itself, as the virtual kernel keeps it: no `now + (t − now)` rounding moves it.
    this.outbox.push({ op: "schedule", timer, message, delayMs, atMs: timeMs });
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

/** An actor of any protocol, as a factory returns it. */
// deno-lint-ignore no-explicit-any
export type AnyActor = Actor<any>;

/** A factory's result when it has something to tell the host besides the actor, such as a plugin's name. */
export interface DescribedActor {
  readonly actor: AnyActor;
  /** Short text the runtime makes available as `aboutOf(ref)`. */
  readonly about: string;
}

/** Builds an actor from structured-cloneable arguments. */
export type ActorFactory = (
  ...args: readonly never[]
) => AnyActor | DescribedActor | Promise<AnyActor | DescribedActor>;

/**
 * An error's message, after its class when that says more than `Error`
 * (`NotCapable: Requires read access…`); in a Worker locked down for a
 * plugin, a change to a frozen built-in says which rule it broke.
 */
function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const explained = explainLockdown(error.message);
  if (explained !== error.message || error.name === "PluginSandboxError") return explained;
  return error.name && error.name !== "Error" ? `${error.name}: ${error.message}` : error.message;
}

/**
 * Makes this Worker host the actors the runtime spawns in it, each built by
 * one of `factories`.
 */
export function serveActor(factories: Readonly<Record<string, unknown>>): void {
  const actors: Actor<Message>[] = [];
  const contexts: HostContext[] = [];
  // Captured before any actor code runs (a plugin may replace or lock them).
  const reply = self.postMessage.bind(self) as (r: HostReply) => void;
  const close = self.close.bind(self);
  reportExits(reply);
  // An error outside any handler (an asynchronous throw) kills the Worker:
  // report it as a crash instead of letting Deno print a stack trace.
  self.addEventListener("error", (event) => {
    event.preventDefault();
    reply({ type: "crashed", message: event.message.replace(/^Uncaught (\(in promise\) )?/, "") });
    close();
  });
  self.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    reply({ type: "crashed", message: String(event.reason?.message ?? event.reason) });
    close();
  });

  const spawn = async (command: Extract<HostCommand, { type: "spawn" }>) => {
    // Sent before the factory runs: the runtime's loading deadline starts here.
    reply({ type: "building", actor: command.actor });
    try {
      const factory = factories[command.factory] as ActorFactory | undefined;
      if (typeof factory !== "function") throw new TypeError(`no actor factory named "${command.factory}"`);
      const built = await factory(...command.args as never[]);
      const described = "actor" in built && typeof built.about === "string";
      actors[command.actor] = described ? built.actor : built as Actor<Message>;
      contexts[command.actor] = new HostContext(
        command.self as ActorRef<Message>,
        command.name,
        command.seed,
      );
      reply({ type: "ready", actor: command.actor, about: described ? built.about : undefined });
    } catch (error) {
      reply({
        type: "spawn_failed",
        actor: command.actor,
        message: errorText(error),
        error: errorToData(error),
      });
    }
  };

  // A listener, not `onmessage`, which a plugin could reassign; and only the
  // host's messages: an event a plugin dispatches itself is not trusted.
  self.addEventListener("message", (event: MessageEvent<HostCommand>) => {
    if (!event.isTrusted) return;
    const command = event.data;
    if (command.type === "spawn") return void spawn(command);
    // A batch: each delivery in order, one answer for all (and a failure after the ones handled).
    const outboxes: Outgoing[][] = [];
    for (const delivery of command.deliveries) {
      const ctx = contexts[delivery.actor];
      ctx.timeMs = delivery.timeMs;
      ctx.outbox = [];
      try {
        // A plugin's code may have run since the last delivery (a timer, a promise).
        assertBuiltInsIntact();
        actors[delivery.actor].handle(delivery.message, ctx);
        outboxes.push(ctx.outbox);
      } catch (error) {
        if (outboxes.length !== 0) reply({ type: "handled", outboxes });
        const kind = error instanceof SimulationError ? error.kind : "actor_threw";
        const message = error instanceof SimulationError ? error.detail : errorText(error);
        return reply({ type: "failed", kind, message, error: errorToData(error) });
      }
    }
    reply({ type: "handled", outboxes });
  });
}

/**
 * Makes `Deno.exit` and `close()` say so before they end the Worker, which
 * they otherwise do silently: the runtime then fails the run at once rather
 * than at the delivery timeout. (The properties stay writable and
 * configurable, so a plugin loader may still lock them.)
 */
function reportExits(reply: (r: HostReply) => void): void {
  const exit = Deno.exit;
  const close = self.close.bind(self);
  const replace = (target: object, key: string, value: unknown) =>
    Object.defineProperty(target, key, { value, writable: true, configurable: true });
  replace(Deno, "exit", (code?: number) => {
    reply({ type: "crashed", message: `the Worker was ended by Deno.exit(${code ?? ""})` });
    return exit(code);
  });
  replace(self, "close", () => {
    reply({ type: "crashed", message: "the Worker was ended by close()" });
    close();
  });
}
