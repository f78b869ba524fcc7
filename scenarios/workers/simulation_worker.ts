/**
 * @module
 * A simulation Worker: runs whole simulations for the host (the sweep's pool,
 * or `run` with a router plugin), one message per run. A Worker started with
 * a plugin locks itself down and loads it once, by dynamic `import()`, with no
 * permission but reading the files of its import graph; while the plugin
 * decides, a shared watch buffer tells the watchdog which request it is
 * deciding, so that a run that hangs in user code ends.
 */
/// <reference lib="deno.worker" />
import type { PoolRole } from "../../actors/instances/instance_model.ts";
import {
  type RunResult,
  simulate,
  type SimulateOptions,
  type SimulationConfig,
} from "../../actors/simulation.ts";
import { type ErrorData, errorToData, SimulationError } from "../../actors/runtime/simulation_error.ts";
import { createPolicy } from "../../actors/policies/mod.ts";
import type { RoutingPolicy } from "../../actors/policies/policy.ts";
import { loadPolicyModule } from "../../actors/policies/plugin_policy.ts";
import {
  assertBuiltInsIntact,
  explainLockdown,
  PLUGIN_SANDBOX,
} from "../../actors/runtime/plugin_lockdown.ts";
import { WatchSlot, WorkerPhase } from "./worker_watch.ts";

/** Host → Worker. */
export type SimulationWorkerCommand =
  | {
    readonly type: "init";
    /**
     * The private channel for every later command and reply, captured before
     * any plugin code runs: the plugin never sees this port, and may not post
     * at all (its Worker is locked down, actors/runtime/plugin_lockdown.ts).
     */
    readonly port: MessagePort;
    /** The shared watch buffer (see {@linkcode WatchSlot}). */
    readonly watch: SharedArrayBuffer;
    /** A router plugin to load (`file:` URL); it replaces every run's policy (or one pool's: `pluginPool`). */
    readonly pluginUrl?: string;
    /** The one pool of a disaggregated fleet the plugin routes; absent: it replaces the run's policy. */
    readonly pluginPool?: Exclude<PoolRole, "both">;
  }
  | { readonly type: "run"; readonly id: number; readonly config: SimulationConfig };

/** Worker → host. */
export type SimulationWorkerReply =
  | { readonly type: "ready"; readonly pluginName?: string }
  | { readonly type: "load_failed"; readonly message: string }
  | { readonly type: "result"; readonly id: number; readonly result: RunResult; readonly wallMs: number }
  | {
    readonly type: "error";
    readonly id: number;
    /**
     * The failure, class and fields kept (see {@linkcode errorToData}); its
     * first line only, with Deno's advice about flags replaced.
     */
    readonly error: ErrorData;
  };

let watch: WatchSlot | undefined;
let policy: RoutingPolicy | undefined;
let pluginPool: Exclude<PoolRole, "both"> | undefined;
let pluginExpected = false;
let reply: (message: SimulationWorkerReply) => void = () => {};

/** A plugin's name goes into reports and terminals: one short line of printable text. */
const PLUGIN_NAME = /^[\x20-\x7e]{1,80}$/;

/**
 * What a plugin did against its sandbox, said so: Deno's permission message
 * without its advice to re-run with a flag (which cannot apply to a plugin),
 * plus what a plugin may do; V8's complaint about a frozen built-in, with the
 * rule it broke. Anything else unchanged.
 */
export function explainSandbox(message: string): string {
  if (!/^Requires \w+ access/.test(message)) return explainLockdown(message);
  return `${message.replace(/, run again with the --allow-[\w-]+ flag.*$/s, "")} ` +
    `(a router plugin has no permission but reading the files it imports)`;
}

/** Wraps the plugin so the watch buffer shows each decision while it runs. */
function watched(plugin: RoutingPolicy, slot: WatchSlot): RoutingPolicy {
  const name = plugin.name;
  const choose = plugin.choose.bind(plugin);
  return {
    name,
    choose(request, view, random) {
      slot.enterDecision(request.id, request.arrivalMs);
      // A choice that is not an index is the router's to refuse, as in every
      // mode; it describes it without running the plugin's code.
      const choice = choose(request, view, random);
      slot.leaveDecision();
      return choice;
    },
  };
}

async function init(command: Extract<SimulationWorkerCommand, { type: "init" }>): Promise<void> {
  const slot = new WatchSlot(command.watch);
  watch = slot;
  const port = command.port;
  const post = port.postMessage.bind(port);
  reply = (message) => post(message);
  port.onmessage = (event: MessageEvent<SimulationWorkerCommand>) => {
    if (event.data.type === "run") run(event.data);
  };
  if (command.pluginUrl === undefined) return reply({ type: "ready" });
  pluginExpected = true;
  pluginPool = command.pluginPool;
  slot.setPhase(WorkerPhase.Loading);
  try {
    const plugin = await loadPolicyModule(command.pluginUrl, PLUGIN_SANDBOX);
    if (typeof plugin.name !== "string" || !PLUGIN_NAME.test(plugin.name)) {
      throw new TypeError(
        `its name must be 1 to 80 printable ASCII characters, got ${
          JSON.stringify(String(plugin.name)).slice(0, 100)
        }`,
      );
    }
    policy = watched(plugin, slot);
    slot.setPhase(WorkerPhase.Idle);
    reply({ type: "ready", pluginName: plugin.name });
  } catch (error) {
    slot.setPhase(WorkerPhase.Idle);
    const message = String((error as Error)?.message ?? error).split("\n")[0];
    reply({ type: "load_failed", message: explainSandbox(message) });
  }
}

function run(command: Extract<SimulationWorkerCommand, { type: "run" }>): void {
  const { id, config } = command;
  watch?.startTask(id);
  if (pluginExpected && policy === undefined) {
    // Never fall back to the scenario's built-in policy in a plugin's Worker.
    const error = new SimulationError("actor_threw", "the router plugin is not loaded");
    return reply({ type: "error", id, error: errorToData(error) });
  }
  try {
    // The plugin's code may have run since the last run (a timer, a promise).
    assertBuiltInsIntact();
    const start = performance.now();
    const result = simulate(config, runPolicies(config));
    reply({ type: "result", id, result, wallMs: performance.now() - start });
  } catch (error) {
    // Described before the watch goes idle: a plugin's error could spin in its getters.
    reply({ type: "error", id, error: failureData(error) });
  } finally {
    // Also ends a decision that threw.
    watch?.setPhase(WorkerPhase.Idle);
  }
}

/**
 * The policies of a run here: none of ours (the scenario's), or the plugin
 * for every pool, or the plugin for its pool and the other pool's built-in —
 * watched too, so that its decisions count as the run's progress (in a
 * decode-first run that prefills locally, the prefill pool's plugin may not
 * be asked for a long while) and a stall in them, in the plugin's Worker,
 * is the plugin's.
 */
function runPolicies(config: SimulationConfig): SimulateOptions {
  if (policy === undefined || pluginPool === undefined || watch === undefined) return { policy };
  const other = pluginPool === "prefill" ? config.decodePolicy : config.prefillPolicy;
  const builtIn = watched(createPolicy(other ?? config.policy), watch);
  return pluginPool === "prefill"
    ? { prefillPolicy: policy, decodePolicy: builtIn }
    : { prefillPolicy: builtIn, decodePolicy: policy };
}

/** A run's failure as data for the host: its text on one line, a permission error explained. */
function failureData(error: unknown): ErrorData {
  const data = errorToData(error);
  const oneLine = (text: string) => explainSandbox(text.split("\n")[0]);
  const detail = data.fields.detail;
  return data.name === "SimulationError" && typeof detail === "string"
    ? { ...data, fields: { ...data.fields, detail: oneLine(detail) } }
    : { ...data, message: oneLine(data.message) };
}

// Only the first message (init) comes this way; the rest use its private port.
self.onmessage = (event: MessageEvent<SimulationWorkerCommand>) => {
  self.onmessage = null;
  if (event.data.type === "init") void init(event.data);
};
