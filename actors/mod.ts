/**
 * @module
 * The simulator's public API: the runtime, the actors, the policies and
 * {@linkcode simulate}.
 */
export * from "./runtime/mod.ts";
export * from "./protocol.ts";
export * from "./policies/mod.ts";
export {
  type ArrivalOptions,
  type PrefixOptions,
  type RateProfile,
  type WorkloadOptions,
  WorkloadSource,
} from "./workload_source.ts";
export { createArrivalProcess, expectedArrivals } from "./arrival_process.ts";
export type {
  AutoscaleBehavior,
  AutoscaleConfig,
  AutoscaleSignal,
  Fault,
  ScalingPolicy,
  ScalingRules,
  SelectPolicy,
} from "./faults.ts";
export { FaultyInstance } from "./faulty_instance.ts";
export { FaultInjector } from "./fault_injector.ts";
export { Autoscaler } from "./autoscaler.ts";
export {
  type FleetCache,
  InstanceTable,
  type InstanceTableOptions,
  Router,
  type RouterOptions,
} from "./router.ts";
export { type FifoInstanceOptions, ServingInstance } from "./serving_instance.ts";
export { BatchingInstance, type BatchingInstanceOptions } from "./batching_instance.ts";
export { SLOT_DEFAULTS, SlotInstance, type SlotInstanceOptions } from "./slot_instance.ts";
export {
  type EngineConfig,
  InstanceActor,
  type InstanceModel,
  type InstancesConfig,
  type ServingActor,
} from "./instance_model.ts";
export { instanceModel, MODEL_NAMES, type ModelName, MODELS } from "./instance_models.ts";
export {
  ACTOR_NAMES,
  checkConservation,
  type Placement,
  type RouterConfig,
  type RunActors,
  type SimulationConfig,
  wire,
} from "./topology.ts";
export { PrefixCache } from "./prefix_cache.ts";
export { MetricsCollector, type RequestMetrics } from "./metrics_collector.ts";
export { type LengthDistribution, ZipfSampler } from "./distributions.ts";
export {
  type GeneratedRequest,
  mooncakeLine,
  type MooncakeRow,
  TRACE_GENERATOR_DEFAULTS,
  TRACE_GENERATOR_PARAMETERS,
  TraceGenerator,
  type TraceGeneratorOptions,
} from "./trace_generator.ts";
export { type RunResult, simulate, type SimulateOptions } from "./simulation.ts";
