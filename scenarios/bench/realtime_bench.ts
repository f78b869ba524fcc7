/**
 * @module
 * The bench's `realtime` part: how many requests per second the real-time
 * mode (actors in Workers, paced by the wall clock) sustains with its
 * delivery lag in bounds — the FIFO model on 4 instances and the batching
 * model on 8, at fixed rates and on a ladder of speeds.
 */
import { type LiveHandles, simulateRealtime } from "../../actors/realtime_simulation.ts";
import type { SimulationConfig } from "../../actors/simulation.ts";
import type { LagStats } from "../../actors/runtime/worker_runtime.ts";
import { parseScenario } from "../scenario/scenario.ts";
import { systemWallTime } from "../cli/wall_time.ts";

/** The p99 delivery lag under which a rate counts as sustained, wall ms (the `realtime` task's default tolerance). */
export const SUSTAINED_P99_LAG_MS = 50;

/** Wall ms at the start of a run left out of its steady-state lag: the Workers' and this thread's JIT warm-up. */
export const WARM_UP_WALL_MS = 2000;

/** One real-time run's figures. */
export interface RealtimeFigure {
  /** Requests offered per wall second: the scenario's rate × the speed. */
  readonly offeredPerSec: number;
  /** Requests finished per wall second, from the clock's start to the run's end. */
  readonly achievedPerSec: number;
  /** Delivery lag over the whole run (warm-up included). */
  readonly lag: LagStats;
  /** Delivery lag after the first {@linkcode WARM_UP_WALL_MS} of wall time (JIT warm-up excluded). */
  readonly steadyLag: LagStats;
  /** Kernel deliveries per wall second. */
  readonly deliveriesPerSec: number;
}

/** A bench workload: `instances` instances of `model` at `ratePerSec`, `requests` long. */
export function realtimeScenario(
  model: "fifo" | "batching",
  instances: number,
  ratePerSec: number,
  requests: number,
): SimulationConfig {
  return parseScenario({ instances: { model, count: instances }, workload: { ratePerSec, requests } });
}

/**
 * Runs `config` in real time at `speed` and measures it.
 * @param poolSize Workers in the instances' pool. @default the cores
 */
export async function measureRealtime(
  config: SimulationConfig,
  speed: number,
  poolSize?: number,
): Promise<RealtimeFigure> {
  let startedMs = 0, warmDeliveries = 0;
  let live: LiveHandles | undefined;
  let warmUp: ReturnType<typeof setTimeout> | undefined;
  try {
    const result = await simulateRealtime(config, {
      speed,
      wallTime: systemWallTime,
      poolSize,
      onStart: (handles) => {
        live = handles;
        startedMs = performance.now();
        warmUp = setTimeout(() => warmDeliveries = handles.lag(Infinity).deliveries, WARM_UP_WALL_MS);
      },
    });
    const wallSec = (performance.now() - startedMs) / 1000;
    const steady = result.lag.deliveries - warmDeliveries;
    return {
      offeredPerSec: config.workload.ratePerSec * speed,
      achievedPerSec: (result.completed + result.dropped + result.failed) / wallSec,
      lag: result.lag,
      // A run shorter than the warm-up has no steady state: its whole lag stands for it.
      steadyLag: warmDeliveries === 0 || live === undefined ? result.lag : live.lag(steady),
      deliveriesPerSec: result.messages / wallSec,
    };
  } finally {
    clearTimeout(warmUp);
  }
}

/** The one-minute load average, for the line beside a figure (n/a without --allow-sys=loadavg). */
function load(): string {
  try {
    return Deno.loadavg()[0].toFixed(2);
  } catch {
    return "n/a";
  }
}

/** One figure as a bench line, with the machine's load beside it. */
export function formatFigure(label: string, figure: RealtimeFigure): string {
  const { lag, steadyLag } = figure;
  const sustained = lag.p99Ms < SUSTAINED_P99_LAG_MS ? "sustained" : "NOT sustained";
  return `  ${label.padEnd(30)} offered ${figure.offeredPerSec.toFixed(0).padStart(5)}/s · achieved ${
    figure.achievedPerSec.toFixed(0).padStart(5)
  } req/s · ${(figure.deliveriesPerSec / 1000).toFixed(1)} k deliveries/s · lag p50 ${
    lag.p50Ms.toFixed(1)
  } p99 ${lag.p99Ms.toFixed(1)} max ${lag.maxMs.toFixed(1)} ms (after ${WARM_UP_WALL_MS / 1000} s: p99 ${
    steadyLag.p99Ms.toFixed(1)
  }) · ${sustained} · load ${load()}`;
}

/** What one ladder climbs: a model, a fleet, a simulated rate and the speeds tried. */
interface Ladder {
  readonly label: string;
  readonly model: "fifo" | "batching";
  readonly instances: number;
  readonly ratePerSec: number;
  /** Wall seconds each run should last at its offered rate. */
  readonly wallSec: number;
  readonly speeds: readonly number[];
}

const LADDERS: readonly Ladder[] = [
  {
    label: "FIFO, 4 instances",
    model: "fifo",
    instances: 4,
    ratePerSec: 50,
    wallSec: 8,
    speeds: [10, 30, 50, 70],
  },
  {
    label: "batching, 8 instances",
    model: "batching",
    instances: 8,
    ratePerSec: 100,
    wallSec: 8,
    speeds: [2.5, 5, 7.5, 10],
  },
];

/**
 * The `realtime` bench part: for each ladder, runs of about `wallSec` wall
 * seconds at rising speeds; prints each run's offered and achieved rate and
 * lag (with the load average), then the highest offered rate sustained with
 * p99 lag under {@linkcode SUSTAINED_P99_LAG_MS}. The targets are 2,500
 * FIFO requests/s on 4 instances (speed 50) and 500 batching requests/s on
 * 8 (speed 5).
 */
export async function realtimeBench(): Promise<void> {
  console.log(
    `realtime (actors in Workers, ${navigator.hardwareConcurrency} cores; p99 lag < ${SUSTAINED_P99_LAG_MS} ms = sustained):`,
  );
  for (const ladder of LADDERS) {
    let best = 0, bestSteady = 0;
    for (const speed of ladder.speeds) {
      const offered = ladder.ratePerSec * speed;
      const requests = Math.round(offered * ladder.wallSec);
      const config = realtimeScenario(ladder.model, ladder.instances, ladder.ratePerSec, requests);
      const figure = await measureRealtime(config, speed);
      console.log(formatFigure(`${ladder.label}, speed ${speed}×`, figure));
      if (figure.lag.p99Ms < SUSTAINED_P99_LAG_MS) best = Math.max(best, figure.offeredPerSec);
      if (figure.steadyLag.p99Ms < SUSTAINED_P99_LAG_MS) {
        bestSteady = Math.max(bestSteady, figure.offeredPerSec);
      }
    }
    console.log(
      `  ${ladder.label}: highest sustained ${best.toFixed(0)} requests/s ` +
        `(${bestSteady.toFixed(0)} after the warm-up) · load ${load()}`,
    );
  }
}
