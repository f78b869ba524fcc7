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
} from "./workload/workload_source.ts";
export { createArrivalProcess, expectedArrivals } from "./workload/arrival_process.ts";
export type {
  AutoscaleBehavior,
  AutoscaleConfig,
  AutoscaleSignal,
  Fault,
  ScalingPolicy,
  ScalingRules,
  SelectPolicy,
} from "./dynamics/faults.ts";
export { FaultyInstance } from "./dynamics/faulty_instance.ts";
export { FaultInjector } from "./dynamics/fault_injector.ts";
export { Autoscaler } from "./dynamics/autoscaler.ts";
export {
  type FleetCache,
  InstanceTable,
  type InstanceTableOptions,
  Router,
  type RouterOptions,
} from "./router/router.ts";
export { type FifoInstanceOptions, ServingInstance } from "./instances/serving_instance.ts";
export { BatchingInstance, type BatchingInstanceOptions } from "./instances/batching_instance.ts";
export { SLOT_DEFAULTS, SlotInstance, type SlotInstanceOptions } from "./instances/slot_instance.ts";
export {
  type EngineConfig,
  InstanceActor,
  type InstanceModel,
  type InstancesConfig,
  type ServingActor,
} from "./instances/instance_model.ts";
export { instanceModel, MODEL_NAMES, type ModelName, MODELS } from "./instances/instance_models.ts";
export {
  ACTOR_NAMES,
  checkConservation,
  type Placement,
  type RouterConfig,
  type RunActors,
  type SimulationConfig,
  wire,
} from "./topology.ts";
export { PrefixCache } from "./kv_cache/prefix_cache.ts";
export { MetricsCollector, type RequestMetrics } from "./metrics/metrics_collector.ts";
export { type LengthDistribution, ZipfSampler } from "./workload/distributions.ts";
export {
  type GeneratedRequest,
  mooncakeLine,
  type MooncakeRow,
  TRACE_GENERATOR_DEFAULTS,
  TRACE_GENERATOR_PARAMETERS,
  TraceGenerator,
  type TraceGeneratorOptions,
} from "./traces/trace_generator.ts";
export { type RunResult, simulate, type SimulateOptions } from "./simulation.ts";
