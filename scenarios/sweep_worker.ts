/**
 * @module
 * A sweep Worker: simulates the runs it is sent, one message per run, and
 * posts each result back with the run's index.
 */
/// <reference lib="deno.worker" />
import { type RunResult, simulate, type SimulationConfig } from "../actors/simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";

/** A run for the worker. */
export interface WorkerTask {
  readonly id: number;
  readonly config: SimulationConfig;
}

/** The worker's answer: a result or the failure's message. */
export type WorkerReply =
  | { readonly id: number; readonly result: RunResult }
  | { readonly id: number; readonly error: string };

self.onmessage = (event: MessageEvent<WorkerTask>) => {
  const { id, config } = event.data;
  try {
    self.postMessage({ id, result: simulate(config) } satisfies WorkerReply);
  } catch (error) {
    const message = error instanceof SimulationError
      ? error.message
      : String((error as Error)?.stack ?? error);
    self.postMessage({ id, error: message } satisfies WorkerReply);
  }
};
