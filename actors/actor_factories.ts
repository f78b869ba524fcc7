/**
 * @module
 * The factories a Worker builds the run's actors with, from plain,
 * structured-cloneable arguments (actors/model_worker.ts serves them). Each
 * is the topology's builder (actors/topology.ts), so the virtual and the
 * real-time run build the same actors the same way; only the router's
 * differs, in loading a plugin in its own Worker.
 */
import type { PoolRole } from "./instances/instance_model.ts";
import { createPolicy } from "./policies/mod.ts";
import { loadPolicyModule } from "./policies/plugin_policy.ts";
import type { MetricsCommand, ServeCommand } from "./protocol.ts";
import type { ActorRef } from "./runtime/kernel.ts";
import { PLUGIN_SANDBOX } from "./runtime/plugin_lockdown.ts";
import type { DescribedActor } from "./runtime/worker_host.ts";
import { buildInstance, buildMetrics, buildRouter, buildSource, type SimulationConfig } from "./topology.ts";

/**
 * The router for `config`, with its built-in policy or, when `pluginUrl` is
 * given, a plugin's (imported here, in the router's Worker, and nowhere else
 * in a real-time run): for every pool without a policy of its own, or, with
 * `pluginPool`, for that pool of a disaggregated fleet only. Tells the host
 * the run's policy's name (the plugin's, unless it routes one pool).
 */
export async function createRouter(
  instances: readonly ActorRef<ServeCommand>[],
  config: SimulationConfig,
  pluginUrl?: string,
  pluginPool?: Exclude<PoolRole, "both">,
  metrics?: ActorRef<MetricsCommand>,
): Promise<DescribedActor> {
  const plugin = pluginUrl ? await loadPolicyModule(pluginUrl, PLUGIN_SANDBOX) : undefined;
  const policy = plugin && pluginPool === undefined ? plugin : createPolicy(config.policy);
  const pools = {
    prefill: pluginPool === "prefill" ? plugin : config.prefillPolicy && createPolicy(config.prefillPolicy),
    decode: pluginPool === "decode" ? plugin : config.decodePolicy && createPolicy(config.decodePolicy),
  };
  return { actor: buildRouter(instances, config, policy, undefined, pools, metrics), about: policy.name };
}

/** One serving instance of the configured model (`pluginPolicy`: the router runs a plugin). */
export const createInstance = buildInstance;

/** The workload source: synthetic, or a trace replay. */
export const createSource = buildSource;

/** The metrics collector. */
export const createMetrics = buildMetrics;
