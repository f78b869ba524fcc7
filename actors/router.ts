/**
 * @module
 * The router actor: keeps a view of the instances built only from their status
 * messages, and places each arriving request with a routing policy.
 */
import type { RouterView, RoutingPolicy } from "./policies/policy.ts";
import { type CacheView, ExactCacheView } from "./cache_view.ts";
import { type BlockKeys, blockKeys } from "./prefix_keys.ts";
import {
  assertNever,
  type InstanceStatus,
  type Request,
  type RouterCommand,
  type ServeCommand,
} from "./protocol.ts";
import type { Actor, ActorContext, ActorRef } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";

/** Options for {@linkcode InstanceTable}. */
export interface InstanceTableOptions {
  /** What the router believes is cached. @default exact, group-level */
  readonly cacheView?: CacheView;
  /** Tokens per KV block for block matching. @default 16 */
  readonly blockTokens?: number;
}

/** The router's picture of the instances, as their reports (and its own routings) left it. */
export class InstanceTable implements RouterView {
  readonly instanceCount: number;
  routedCount = 0;
  readonly waiting: Int32Array;
  readonly running: Int32Array;
  readonly inFlight: Int32Array;
  readonly kvUtilization: Float64Array;
  readonly pendingPrefillTokens: Float64Array;
  readonly decodeBlocks: Float64Array;
  readonly blockTokens: number;
  readonly cacheView: CacheView;
  readonly #routedTo: Int32Array;
  readonly #finished: Int32Array;
  #memoRequest: Request | undefined;
  #memoKeys: BlockKeys | undefined;
  readonly #memoMatched: Int32Array;

  constructor(instanceCount: number, options: InstanceTableOptions = {}) {
    this.instanceCount = instanceCount;
    this.waiting = new Int32Array(instanceCount);
    this.running = new Int32Array(instanceCount);
    this.inFlight = new Int32Array(instanceCount);
    this.kvUtilization = new Float64Array(instanceCount);
    this.pendingPrefillTokens = new Float64Array(instanceCount);
    this.decodeBlocks = new Float64Array(instanceCount);
    this.#routedTo = new Int32Array(instanceCount);
    this.#finished = new Int32Array(instanceCount);
    this.#memoMatched = new Int32Array(instanceCount);
    this.blockTokens = options.blockTokens ?? 16;
    this.cacheView = options.cacheView ?? new ExactCacheView(instanceCount, "groups");
  }

  holds(instance: number, group: number): boolean {
    return this.cacheView.holds(instance, group);
  }

  requestBlocks(request: Request): number {
    return this.#keys(request).count;
  }

  matchedBlocks(instance: number, request: Request): number {
    const keys = this.#keys(request);
    const memo = this.#memoMatched;
    if (memo[instance] < 0) memo[instance] = this.cacheView.matchedBlocks(instance, request, keys);
    return memo[instance];
  }

  /** Records that the router sent `request` to `instance`. */
  routed(instance: number, request: Request): void {
    this.routedCount++;
    this.#routedTo[instance]++;
    this.inFlight[instance]++;
    if (this.cacheView.learnsFromRouting) this.cacheView.routed(instance, request, this.#keys(request));
  }

  /** Applies one status report. */
  apply(status: InstanceStatus): void {
    const i = status.instance;
    this.waiting[i] = status.waiting;
    this.running[i] = status.running;
    this.#finished[i] = status.finished;
    this.inFlight[i] = this.#routedTo[i] - status.finished;
    this.kvUtilization[i] = status.kvUtilization;
    this.pendingPrefillTokens[i] = status.pendingPrefillTokens;
    this.decodeBlocks[i] = status.decodeBlocks;
    this.cacheView.apply(status);
    this.#memoRequest = undefined;
  }

  #keys(request: Request): BlockKeys {
    if (request !== this.#memoRequest) {
      this.#memoRequest = request;
      this.#memoKeys = blockKeys(request, this.blockTokens);
      this.#memoMatched.fill(-1);
    }
    return this.#memoKeys!;
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

  constructor(
    instances: readonly ActorRef<ServeCommand>[],
    policy: RoutingPolicy,
    options: InstanceTableOptions = {},
  ) {
    this.#instances = instances;
    this.#policy = policy;
    this.view = new InstanceTable(instances.length, options);
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
        view.routed(choice, message.request);
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
