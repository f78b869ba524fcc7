/**
 * @module
 * The router actor: keeps a view of the instances built only from their status
 * messages, and places each arriving request with a routing policy.
 */
import type { RouterView, RoutingPolicy } from "./policies/policy.ts";
import { assertNever, type InstanceStatus, type RouterCommand, type ServeCommand } from "./protocol.ts";
import type { Actor, ActorContext, ActorRef } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";

/** The router's picture of the instances, as their reports left it. */
export class InstanceTable implements RouterView {
  readonly instanceCount: number;
  routedCount = 0;
  readonly waiting: Int32Array;
  readonly running: Int32Array;
  readonly #held: Set<number>[];

  constructor(instanceCount: number) {
    this.instanceCount = instanceCount;
    this.waiting = new Int32Array(instanceCount);
    this.running = new Int32Array(instanceCount);
    this.#held = Array.from({ length: instanceCount }, () => new Set<number>());
  }

  holds(instance: number, group: number): boolean {
    return this.#held[instance].has(group);
  }

  /** Groups an instance is known to hold. */
  heldBy(instance: number): ReadonlySet<number> {
    return this.#held[instance];
  }

  /** Applies one status report. */
  apply(status: InstanceStatus): void {
    const i = status.instance;
    this.waiting[i] = status.waiting;
    this.running[i] = status.running;
    if (status.cacheEvicted !== undefined) this.#held[i].delete(status.cacheEvicted);
    if (status.cacheAdded !== undefined) this.#held[i].add(status.cacheAdded);
  }
}

/**
 * Routes `route` commands to instances and applies their `status` reports.
 * The policy's choice is checked: anything but a valid instance index fails
 * the run with an `invalid_choice` error naming the policy.
 */
export class Router implements Actor<RouterCommand> {
  readonly view: InstanceTable;
  readonly #instances: readonly ActorRef<ServeCommand>[];
  readonly #policy: RoutingPolicy;

  constructor(instances: readonly ActorRef<ServeCommand>[], policy: RoutingPolicy) {
    this.#instances = instances;
    this.#policy = policy;
    this.view = new InstanceTable(instances.length);
  }

  handle(message: RouterCommand, ctx: ActorContext<RouterCommand>): void {
    switch (message.type) {
      case "route": {
        const view = this.view;
        const choice = this.#policy.choose(message.request, view, ctx.random);
        if (!(Number.isInteger(choice) && choice >= 0 && choice < view.instanceCount)) {
          throw new SimulationError(
            "invalid_choice",
            `policy "${this.#policy.name}" returned ${
              String(choice)
            }; expected an integer in [0, ${view.instanceCount})`,
            { actor: ctx.name, messageType: message.type, timeMs: ctx.now() },
          );
        }
        view.routedCount++;
        ctx.send(this.#instances[choice], { type: "serve", request: message.request, replyTo: ctx.self });
        break;
      }
      case "status":
        this.view.apply(message);
        break;
      default:
        assertNever(message);
    }
  }
}
