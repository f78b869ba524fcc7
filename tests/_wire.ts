/**
 * @module
 * Over-the-wire fixtures: a simulated fleet and a gateway on 127.0.0.1 with
 * the defaults `deno task serve` uses, each overridable.
 */
import type { SimulationConfig } from "../actors/topology.ts";
import { type Gateway, type GatewayOptions, startGateway } from "../scenarios/wire/gateway.ts";
import { type SimFleet, type SimFleetOptions, startSimFleet } from "../scenarios/wire/sim_server.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";

/** `config`'s instances as HTTP servers on ephemeral loopback ports, model `sim`. */
export function loopbackFleet(
  config: SimulationConfig,
  speed: number,
  overrides: Partial<SimFleetOptions> = {},
): Promise<SimFleet> {
  return startSimFleet({
    config,
    speed,
    host: "127.0.0.1",
    servedModelName: "sim",
    maxBodyBytes: 1 << 20,
    maxModelLen: 32768,
    wallTime: systemWallTime,
    ...overrides,
  });
}

/** A gateway on an ephemeral loopback port in front of `upstreams`, routing with `config`'s policy. */
export function loopbackGateway(
  config: SimulationConfig,
  upstreams: readonly string[],
  speed: number,
  overrides: Partial<GatewayOptions> = {},
): Promise<Gateway> {
  return startGateway({
    config,
    upstreams,
    host: "127.0.0.1",
    port: 0,
    speed,
    wallTime: systemWallTime,
    maxBodyBytes: 1 << 20,
    scrapeMs: 100,
    upstreamTimeoutMs: 10_000,
    onFatal: () => {},
    ...overrides,
  });
}
