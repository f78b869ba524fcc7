/**
 * @module
 * A router under test with a fleet of fake instances: each serves a request
 * in a fixed time and reports its status (with `finishedBy` once it has seen
 * a replica > 0), answers probes, and can be made to refuse requests (a
 * `request_failed`) or to fall silent (a partition) — for the router's
 * replica and fault tests, without the instance models.
 */
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import type {
  FailReason,
  InstanceStatus,
  MetricsCommand,
  Probe,
  Request,
  RequestFailed,
  RouterCommand,
  ServeCommand,
} from "../actors/protocol.ts";
import { Router, type RouterOptions } from "../actors/router/router.ts";
import { type Actor, type ActorContext, type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import type { Received } from "./_recorder.ts";
import { Recorder } from "./_recorder.ts";

/** What a fake instance accepts: serves, probes, and its own completion timer. */
export type FakeCommand = ServeCommand | Probe | { readonly type: "done"; readonly command: ServeCommand };

/** A serving instance reduced to counts: it serves each request alone in `serviceMs`, all in parallel. */
export class FakeInstance implements Actor<FakeCommand> {
  readonly served: Received<ServeCommand>[] = [];
  /** Probes received. */
  probes = 0;
  /** Refuse every serve with this reason (a crashed or draining instance). @default accept */
  refuse: FailReason | undefined;
  /** Send nothing at all — no status, no probe answer, no failure — and swallow serves (a partition). */
  silent = false;
  /** Report `draining: true`. */
  draining = false;
  running = 0;
  finished = 0;
  readonly finishedBy: number[] = [];
  #seenReplica = false;

  constructor(readonly index: number, readonly serviceMs = 10, readonly delayMs = 0) {}

  handle(message: FakeCommand, ctx: ActorContext<FakeCommand>): void {
    switch (message.type) {
      case "serve": {
        this.served.push({ timeMs: ctx.now(), message });
        if (this.silent) return;
        if ((message.replica ?? 0) > 0) this.#seenReplica = true;
        if (this.refuse !== undefined) {
          this.#finish(message);
          const failed: RequestFailed = {
            type: "request_failed",
            command: message,
            instance: this.index,
            reason: this.refuse,
          };
          ctx.send(message.replyTo as ActorRef<InstanceStatus | RequestFailed>, failed, this.delayMs);
          return;
        }
        this.running++;
        ctx.schedule(this.serviceMs, { type: "done", command: message });
        return this.report(ctx, message.replyTo, message.request.prefixGroup);
      }
      case "done":
        this.running--;
        this.#finish(message.command);
        return this.report(ctx, message.command.replyTo);
      case "probe":
        this.probes++;
        if (!this.silent) this.report(ctx, message.replyTo);
    }
  }

  #finish(command: ServeCommand): void {
    this.finished++;
    const r = command.replica ?? 0;
    while (this.finishedBy.length <= r) this.finishedBy.push(0);
    this.finishedBy[r]++;
  }

  /** Sends its status to `to` (after its network delay), optionally advertising `group`. */
  report(ctx: ActorContext<FakeCommand>, to: ActorRef<InstanceStatus>, group = -1, extra = {}): void {
    if (this.silent) return;
    ctx.send(to, this.status(group, extra), this.delayMs);
  }

  /** Its status now. */
  status(group = -1, extra: Partial<InstanceStatus> = {}): InstanceStatus {
    return {
      type: "status",
      instance: this.index,
      waiting: 0,
      running: this.running,
      queued: 0,
      finished: this.finished,
      pendingPrefillTokens: 0,
      decodeBlocks: 0,
      kvUtilization: 0,
      ...(group >= 0 ? { cacheAdded: group } : {}),
      ...(this.#seenReplica ? { finishedBy: [...this.finishedBy] } : {}),
      ...(this.draining ? { draining: true } : {}),
      ...extra,
    };
  }
}

/** One delivery as the kernel's tap saw it, serialised: for message-for-message comparisons. */
export type Delivery = string;

/** A router, its fleet and a metrics recorder, in a kernel whose every delivery is logged. */
export interface RouterFleet {
  readonly kernel: Kernel;
  readonly router: Router;
  readonly ref: ActorRef<RouterCommand>;
  readonly instances: FakeInstance[];
  readonly metrics: Recorder<MetricsCommand>;
  readonly deliveries: Delivery[];
}

/** Options of {@linkcode routerFleet}. */
export interface FleetOptions {
  readonly instances?: number;
  readonly serviceMs?: number;
  /** The instances' network delay, ms. @default 0 */
  readonly delayMs?: number;
  readonly seed?: number;
  /** Pass the metrics recorder to the router as `metrics`. @default false */
  readonly reportFailures?: boolean;
}

/** Builds a router with `policy` and `options` over fake instances. */
export function routerFleet(
  policy: RoutingPolicy,
  options: RouterOptions = {},
  fleet: FleetOptions = {},
): RouterFleet {
  const deliveries: Delivery[] = [];
  const kernel = new Kernel({
    seed: fleet.seed ?? 1,
    onDeliver: (message, to, timeMs) => deliveries.push(`${timeMs} → ${to}: ${JSON.stringify(message)}`),
  });
  const instances = Array.from(
    { length: fleet.instances ?? 3 },
    (_, i) => new FakeInstance(i, fleet.serviceMs, fleet.delayMs),
  );
  const refs = instances.map((instance, i) => kernel.spawn<FakeCommand>(`instance/${i}`, instance));
  const metrics = new Recorder<MetricsCommand>();
  const metricsRef = kernel.spawn<MetricsCommand>("metrics", metrics);
  const router = new Router(refs, policy, {
    ...options,
    ...(fleet.reportFailures === true ? { metrics: metricsRef } : {}),
  });
  const ref = kernel.spawn<RouterCommand>("router", router);
  return { kernel, router, ref, instances, metrics, deliveries };
}

/** A request of prefix group `group` (two 16-token blocks of prefix) and optional session. */
export function request(id: number, group = -1, session?: number, arrivalMs = 0): Request {
  return {
    id,
    arrivalMs,
    prefixGroup: group,
    prefixTokens: 32,
    suffixTokens: 10,
    outputTokens: 1,
    ...(session === undefined ? {} : { session }),
  };
}

/** Sends `request` to the router at its arrival time. */
export function arrive(fleet: RouterFleet, r: Request): void {
  fleet.kernel.send(fleet.ref, { type: "route", request: r }, r.arrivalMs - fleet.kernel.nowMs);
}

/** Round robin over the instances the view holds available (a stand-in for any policy that honours `available`). */
export function availableRoundRobin(): RoutingPolicy {
  let next = 0;
  return {
    name: "available_round_robin",
    choose: (_request, view) => {
      for (let step = 0; step < view.instanceCount; step++) {
        const i = (next + step) % view.instanceCount;
        if (view.available[i] === 1) {
          next = i + 1;
          return i;
        }
      }
      throw new Error("asked to choose with no instance available");
    },
  };
}

/** Every serve the fleet received, as `[timeMs, instance, request id, attempt, replica]` in delivery order. */
export function serves(fleet: RouterFleet): [number, number, number, number, number | undefined][] {
  return fleet.instances
    .flatMap((instance) =>
      instance.served.map((r) =>
        [r.timeMs, instance.index, r.message.request.id, r.message.attempt ?? 0, r.message.replica] as [
          number,
          number,
          number,
          number,
          number | undefined,
        ]
      )
    )
    .sort((a, b) => a[0] - b[0] || a[2] - b[2] || a[3] - b[3]);
}
