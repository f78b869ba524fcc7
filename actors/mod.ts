/**
 * @module
 * The simulator's public API: the runtime, the actors, the policies and
 * {@linkcode simulate}.
 */
export * from "./runtime/mod.ts";
export * from "./protocol.ts";
export * from "./policies/mod.ts";
export { type PrefixOptions, type WorkloadOptions, WorkloadSource } from "./workload_source.ts";
export { InstanceTable, Router } from "./router.ts";
export { type FifoInstanceOptions, ServingInstance } from "./serving_instance.ts";
export { PrefixCache } from "./prefix_cache.ts";
export { MetricsCollector, type RequestMetrics } from "./metrics_collector.ts";
export { type LengthDistribution, ZipfSampler } from "./distributions.ts";
export {
  type InstancesConfig,
  type RunResult,
  simulate,
  type SimulateOptions,
  type SimulationConfig,
} from "./simulation.ts";
