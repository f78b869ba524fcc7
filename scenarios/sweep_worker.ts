/**
 * @module
 * A sweep Worker: simulates the runs it is sent, one message per run, and
 * posts each result back with the run's index.
 */
/// <reference lib="deno.worker" />
import { type RunResult, simulate, type SimulationConfig } from "../actors/simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import { loadPolicyModule } from "../actors/policies/plugin_policy.ts";

/** A run for the worker. */
export interface WorkerTask {
  readonly id: number;
  readonly config: SimulationConfig;
  /** A router plugin replacing the config's policy. */
  readonly pluginUrl?: string;
}

/** The worker's answer: a result or the failure's message. */
export type WorkerReply =
  | { readonly id: number; readonly result: RunResult }
  | { readonly id: number; readonly error: string };

const plugins = new Map<string, Promise<RoutingPolicy>>();

self.onmessage = async (event: MessageEvent<WorkerTask>) => {
  const { id, config, pluginUrl } = event.data;
  try {
    let policy: RoutingPolicy | undefined;
    if (pluginUrl) {
      if (!plugins.has(pluginUrl)) plugins.set(pluginUrl, loadPolicyModule(pluginUrl));
      policy = await plugins.get(pluginUrl);
    }
    self.postMessage({ id, result: simulate(config, { policy }) } satisfies WorkerReply);
  } catch (error) {
    const message = error instanceof SimulationError
      ? error.message
      : String((error as Error)?.stack ?? error);
    self.postMessage({ id, error: message } satisfies WorkerReply);
  }
};
