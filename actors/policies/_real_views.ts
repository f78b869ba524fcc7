/**
 * @module
 * The pieces of {@linkcode RealView} several policies share: no cache at all,
 * a router-side index sized like the engine's cache, and the load sources.
 */
import type { RealCacheView, RealLoadView } from "./policy.ts";

/** The policy reads no cache. */
export const NO_CACHE: RealCacheView = Object.freeze({
  source: "none",
  unit: "blocks",
  capacity: "unbounded",
});

/**
 * A router-side index of blocks, inserted at routing time and as large as
 * the engine's cache, least recently used evicted first: what any real
 * implementation of "route to the instance that has the prefix" keeps when
 * no engine tells it what it caches.
 */
export const ENGINE_SIZED_INDEX: RealCacheView = Object.freeze({
  source: "router_index",
  unit: "blocks",
  capacity: "engine",
  eviction: "on_insert",
});

/** The policy reads no load. */
export const NO_LOAD: RealLoadView = Object.freeze({ source: "none", refreshMs: 0 });

/** The router counts what it dispatched (in-flight requests): always current. */
export const ROUTER_LOAD: RealLoadView = Object.freeze({ source: "router", refreshMs: 0 });

/** The engines report their queues and KV use on every change. */
export const PUSHED_LOAD: RealLoadView = Object.freeze({ source: "pushed", refreshMs: 0 });
