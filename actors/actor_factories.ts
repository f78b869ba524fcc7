/**
 * @module
 * Builds each actor of the model from plain, structured-cloneable arguments,
 * so a Worker can construct it from a message. The virtual and the real-time
 * runs use the same actor classes; only where they are built differs.
 */
import { MetricsCollector } from "./metrics_collector.ts";
import { createPolicy } from "./policies/mod.ts";
import { loadPolicyModule } from "./policies/plugin_policy.ts";
import type { MetricsCommand, RouteCommand, ServeCommand } from "./protocol.ts";
import { Router } from "./router.ts";
import type { ActorRef } from "./runtime/kernel.ts";
import type { DescribedActor } from "./runtime/worker_host.ts";
import type { BatchingInstance } from "./batching_instance.ts";
import type { ServingInstance } from "./serving_instance.ts";
import {
  createServingInstance,
  createWorkloadSource,
  routerOptions,
  type SimulationConfig,
  statusReporting,
} from "./simulation.ts";
import type { TraceSource } from "./trace_source.ts";
import type { WorkloadSource } from "./workload_source.ts";

/**
 * The router for `config`, with its built-in policy or, when `pluginUrl` is
 * given, a plugin's (imported here, in the router's Worker, and nowhere else
 * in a real-time run). Tells the host the policy's name.
 */
export async function createRouter(
  instances: readonly ActorRef<ServeCommand>[],
  config: SimulationConfig,
  pluginUrl?: string,
): Promise<DescribedActor> {
  const policy = pluginUrl ? await loadPolicyModule(pluginUrl) : createPolicy(config.policy);
  return { actor: new Router(instances, policy, routerOptions(config)), about: policy.name };
}

/** One serving instance of the configured model, reporting as `config.router` says. */
export function createInstance(
  index: number,
  config: SimulationConfig,
  metrics: ActorRef<MetricsCommand>,
  pluginPolicy: boolean,
): ServingInstance | BatchingInstance {
  return createServingInstance(index, config.instances, metrics, statusReporting(config, pluginPolicy));
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
