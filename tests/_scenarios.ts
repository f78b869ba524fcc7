/**
 * @module
 * Scenario builders for tests: the default scenario, with overrides.
 */
import type { SimulationConfig } from "../actors/simulation.ts";
import { parseScenario, type ScenarioInput } from "../scenarios/scenario/scenario.ts";

/** The default scenario with `overrides` merged in (validated like a file). */
export function scenario(overrides: ScenarioInput = {}): SimulationConfig {
  return parseScenario(overrides);
}
