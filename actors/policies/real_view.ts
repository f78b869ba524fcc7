/**
 * @module
 * A run's default router view, from what its policy's real system sees
 * ({@linkcode RealView}): which cache view, how large, in what chunks, and
 * how stale the load — resolved against the fleet, so that a scenario that
 * sets none of it runs the router as the real one would (design.md, "What
 * each router sees").
 */
import type { PolicyDescriptor, RealView } from "./policy.ts";

/**
 * Characters per token where a real index counts characters: llm-d's own
 * estimate (`averageCharactersPerToken`, the approximate prefix plugin),
 * about right for English text under BPE tokenisers.
 */
export const CHARS_PER_TOKEN = 4;

/** What the defaults depend on in the fleet. */
export interface ViewFleet {
  /** What the instances cache: whole prefix groups (FIFO) or KV blocks. */
  readonly cacheUnit: "groups" | "blocks";
  /** Tokens per KV block. */
  readonly blockTokens: number;
  /** Tokens of one prefix group (FIFO: the synthetic workload's prefix length). */
  readonly groupTokens: number;
}

/** The router settings a policy's real view gives (each unset one takes it). */
export interface ViewDefaults {
  /** `exact`: the engines' own events; `approximate`: a router-side index. */
  readonly cacheView: "exact" | "approximate";
  /**
   * Entries per instance of the approximate index (groups or blocks):
   * undefined = as large as the engine's cache; null = unbounded.
   */
  readonly approxCapacity: number | null | undefined;
  /** The index matches whole chunks of this many blocks. */
  readonly indexChunkBlocks: number;
  /** Leading blocks of a prompt the index matches and inserts; null = all. */
  readonly indexMaxBlocks: number | null;
  /** Status reports at most once per this many ms (0: on every change). */
  readonly statusIntervalMs: number;
}

/**
 * The router settings of `descriptor`'s real view on `fleet`, for a policy
 * run with `params` (a parameter that sizes the index, such as llm-d's
 * `maxPrefixBlocks`, sizes it here too).
 */
export function realViewDefaults(
  descriptor: PolicyDescriptor,
  fleet: ViewFleet,
  params: Readonly<Record<string, unknown>> = {},
): ViewDefaults {
  const view: RealView = descriptor.view, cache = view.cache;
  const statusIntervalMs = view.load.source === "scraped" ? view.load.refreshMs : 0;
  // The original study's router read its simulator's caches; the FIFO model is that simulator.
  const indexed = cache.source === "router_index";
  const engineFed = !indexed || (view.originalStudy === true && fleet.cacheUnit === "groups");
  return {
    cacheView: engineFed ? "exact" : "approximate",
    // The index's own size and chunks, for whichever view runs (a scenario may ask for the index).
    approxCapacity: indexed ? capacityEntries(cache.capacity, cache.unit, fleet) : undefined,
    indexChunkBlocks: indexed && cache.chunkCharacters !== undefined
      ? Math.max(1, Math.round(cache.chunkCharacters / CHARS_PER_TOKEN / fleet.blockTokens))
      : 1,
    indexMaxBlocks: indexed ? maxBlocks(cache, params) : null,
    statusIntervalMs,
  };
}

/** The leading blocks the index matches and inserts: the sizing parameter's value when given, else the declared one (null: all). */
function maxBlocks(cache: RealView["cache"], params: Readonly<Record<string, unknown>>): number | null {
  const given = cache.maxBlocksParameter === undefined ? undefined : params[cache.maxBlocksParameter];
  return typeof given === "number" ? given : cache.maxBlocks ?? null;
}

/** A real capacity in the view's entries: blocks, or prefix groups (FIFO); undefined = the engine's; null = unbounded. */
function capacityEntries(
  capacity: RealView["cache"]["capacity"],
  unit: RealView["cache"]["unit"],
  fleet: ViewFleet,
): number | null | undefined {
  if (capacity === "engine") return undefined;
  if (capacity === "unbounded") return null;
  const tokens = unit === "characters"
    ? capacity / CHARS_PER_TOKEN
    : unit === "tokens"
    ? capacity
    : capacity * fleet.blockTokens;
  const perEntry = fleet.cacheUnit === "blocks" ? fleet.blockTokens : Math.max(1, fleet.groupTokens);
  return Math.max(1, Math.floor(tokens / perEntry));
}
