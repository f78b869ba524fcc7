/**
 * @module
 * What the loopback path — the load generator, a gateway, a simulated
 * instance, and the machine's timers under whatever else runs — adds to a
 * TTFT right now, measured in the calling test's own run so that a test
 * comparing wire TTFTs with the simulator's allows for its machine's load
 * instead of assuming an idle one (a fixed allowance in ms is an absolute
 * time: 127.5 ms allowed, 159 ms seen on a loaded machine).
 */
import type { SimulationConfig } from "../actors/topology.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import { runLoad } from "../scenarios/wire/load_generator.ts";
import { loopbackFleet, loopbackGateway } from "./_wire.ts";

/** Speed of the probe's instance: a simulated TTFT of 130 ms lasts 1.3 µs of wall time. */
const PROBE_SPEED = 100_000;
/** Requests the probe sends, and how many it sends per wall second (one at a time: no queue). */
const PROBE_REQUESTS = 30;
const PROBE_PER_WALL_SECOND = 20;

/**
 * The mean wall TTFT, ms, of {@linkcode PROBE_REQUESTS} requests shaped like
 * `config`'s, sent one at a time through a gateway to one instance of
 * `config`'s model served {@linkcode PROBE_SPEED} times faster than real time:
 * their simulated TTFTs are microseconds, so what is measured is the path's
 * own cost at this moment.
 */
export async function transportMs(config: SimulationConfig): Promise<number> {
  const probe: SimulationConfig = {
    ...config,
    instances: { ...config.instances, count: 1 },
    workload: {
      ...config.workload,
      requests: PROBE_REQUESTS,
      ratePerSec: PROBE_PER_WALL_SECOND / PROBE_SPEED,
    },
  };
  const fleet = await loopbackFleet(probe, PROBE_SPEED);
  const gateway = await loopbackGateway(probe, fleet.urls, PROBE_SPEED);
  try {
    const result = await runLoad({
      url: gateway.url,
      config: probe,
      speed: PROBE_SPEED,
      endpoint: "completion",
      model: "sim",
      nonce: 97,
      requestTimeoutMs: 10_000,
      wallTime: systemWallTime,
    });
    if (result.ttftMeanMs === null || result.completed < PROBE_REQUESTS) {
      throw new Error(`the transport probe completed ${result.completed} of ${PROBE_REQUESTS} requests`);
    }
    return result.ttftMeanMs;
  } finally {
    await gateway.close(1000);
    await fleet.close(1000);
  }
}
