/**
 * @module
 * The fault injector: plays a scenario's fault list, sending each instance
 * its `fault` when a fault starts and its `recover` when it ends, at the
 * simulated times the list gives (actors/dynamics/README.md, "Faults").
 */
import type { Fault } from "./faults.ts";
import {
  assertNever,
  type FaultCommand,
  type FaultInjectorCommand,
  type InstanceStatus,
} from "../protocol.ts";
import type { Actor, ActorContext, ActorRef } from "../runtime/kernel.ts";

/** The injector's own timer: the `event`-th of its events is due. */
export type FaultDue = { readonly type: "fault_due"; readonly event: number };

/** One start or end of a fault: what to send to which instance, and when. */
interface FaultEvent {
  readonly atMs: number;
  readonly instance: number;
  readonly command: FaultCommand;
}

/**
 * Sends the faults of a list to the instances. Its first message (`inject`,
 * sent at time 0) schedules every fault's start and, when `forMs` is
 * finite, its end, as background timers (a fault due after the run's
 * work is over never happens: it keeps no run alive); each sends its
 * command when due.
 * Same-time events go in a fixed order: every end before any start (a
 * window that ends as the next begins does not overlap it), and in list
 * order within each.
 *
 * @example
 * ```ts
 * const injector = new FaultInjector([{ instance: 0, kind: "crash", atMs: 100, forMs: 50 }], instances, router);
 * kernel.send(kernel.spawn("faults", injector), { type: "inject" });
 * ```
 */
export class FaultInjector implements Actor<FaultInjectorCommand | FaultDue> {
  readonly #events: readonly FaultEvent[];
  readonly #instances: readonly ActorRef<FaultCommand>[];
  #injected = false;

  /**
   * @param faults The scenario's faults.
   * @param instances Every instance's address, by index.
   * @param router Where an instance reports when it comes back (each command's `replyTo`).
   * @throws {RangeError} when a fault names an instance beyond `instances`, or a time is not a number >= 0.
   */
  constructor(
    faults: readonly Fault[],
    instances: readonly ActorRef<FaultCommand>[],
    router: ActorRef<InstanceStatus>,
  ) {
    this.#instances = instances;
    this.#events = schedule(faults, instances.length, router);
  }

  handle(message: FaultInjectorCommand | FaultDue, ctx: ActorContext<FaultInjectorCommand | FaultDue>): void {
    switch (message.type) {
      case "inject":
        if (this.#injected) return; // one list, played once
        this.#injected = true;
        this.#events.forEach((e, event) =>
          ctx.scheduleBackground(Math.max(e.atMs - ctx.now(), 0), { type: "fault_due", event })
        );
        return;
      case "fault_due": {
        const e = this.#events[message.event];
        ctx.send(this.#instances[e.instance], e.command);
        return;
      }
      default:
        assertNever(message);
    }
  }
}

/**
 * Every fault's start and (finite) end, in delivery order: by time; at one
 * instant, the ends of windows open before it first, then the starts, in
 * list order (a zero-length window's end right after its start).
 */
function schedule(
  faults: readonly Fault[],
  instances: number,
  router: ActorRef<InstanceStatus>,
): FaultEvent[] {
  const events: { event: FaultEvent; phase: number; order: number }[] = [];
  faults.forEach((f, i) => {
    check(f, i, instances);
    const command: FaultCommand = {
      type: "fault",
      kind: f.kind,
      replyTo: router,
      ...(f.kind === "slow" && { factor: f.factor ?? 2 }),
    };
    events.push({ event: { atMs: f.atMs, instance: f.instance, command }, phase: 1, order: 2 * i });
    if (f.forMs === Infinity) return;
    const recover: FaultCommand = { type: "recover", kind: f.kind, replyTo: router };
    events.push({
      event: { atMs: f.atMs + f.forMs, instance: f.instance, command: recover },
      phase: f.forMs > 0 ? 0 : 1,
      order: 2 * i + 1,
    });
  });
  events.sort((a, b) => a.event.atMs - b.event.atMs || a.phase - b.phase || a.order - b.order);
  return events.map((e) => e.event);
}

/** @throws {RangeError} naming the field of fault `i` that is out of range. */
function check(f: Fault, i: number, instances: number): void {
  const at = `faults[${i}]`;
  if (!(Number.isInteger(f.instance) && f.instance >= 0 && f.instance < instances)) {
    throw new RangeError(`${at}.instance: expected an integer in [0, ${instances}), got ${f.instance}`);
  }
  if (!(f.atMs >= 0 && f.atMs < Infinity)) {
    throw new RangeError(`${at}.atMs: expected a finite number >= 0, got ${f.atMs}`);
  }
  if (!(f.forMs >= 0)) throw new RangeError(`${at}.forMs: expected a number >= 0, got ${f.forMs}`);
  if (f.factor !== undefined && !(f.factor > 0 && f.factor < Infinity)) {
    throw new RangeError(`${at}.factor: expected a finite number > 0, got ${f.factor}`);
  }
}
