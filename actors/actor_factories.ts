/**
 * @module
 * Builds each actor of the model from plain, structured-cloneable arguments,
 * so a Worker can construct it from a message. The virtual and the real-time
 * runs use the same actor classes; only where they are built differs.
 */
import { MetricsCollector } from "./metrics_collector.ts";
import { createPolicy, type PolicySpec } from "./policies/mod.ts";
import { loadPolicyModule } from "./policies/plugin_policy.ts";
import type { MetricsCommand, RouteCommand, ServeCommand } from "./protocol.ts";
import { Router } from "./router.ts";
import type { ActorRef } from "./runtime/kernel.ts";
import type { BatchingInstance } from "./batching_instance.ts";
import type { ServingInstance } from "./serving_instance.ts";
import {
  createServingInstance,
  createWorkloadSource,
  type InstancesConfig,
  type SimulationConfig,
} from "./simulation.ts";
import type { TraceSource } from "./trace_source.ts";
import type { WorkloadSource } from "./workload_source.ts";

/** The router, with a built-in policy or, when `pluginUrl` is given, a plugin's. */
export async function createRouter(
  instances: readonly ActorRef<ServeCommand>[],
  policy: PolicySpec,
  pluginUrl?: string,
): Promise<Router> {
  return new Router(instances, pluginUrl ? await loadPolicyModule(pluginUrl) : createPolicy(policy));
}

/** One serving instance of the configured model. */
export function createInstance(
  index: number,
  options: InstancesConfig,
  metrics: ActorRef<MetricsCommand>,
): ServingInstance | BatchingInstance {
  return createServingInstance(index, options, metrics);
}

/** The workload source: synthetic, or a trace replay. */
export function createSource(
  options: SimulationConfig["workload"],
  router: ActorRef<RouteCommand>,
): WorkloadSource | TraceSource {
  return createWorkloadSource(options, router);
}

/** The metrics collector. */
export function createMetrics(instanceCount: number): MetricsCollector {
  return new MetricsCollector(instanceCount);
}
