/**
 * @module
 * The watchdog's Worker (see scenarios/workers/plugin_watchdog.ts): on its own timer,
 * in a thread no plugin runs in, it reads the process's resident memory, the
 * watch buffers of plugin Workers and the main thread's heartbeat, and posts
 * its verdict to the main thread; when the main thread does not take it in
 * time (a flood of messages can starve it), it writes the verdict's line to
 * stderr itself and ends the process.
 */
/// <reference lib="deno.worker" />
import { errorToData, SimulationError } from "../../actors/runtime/simulation_error.ts";
import { Heartbeat, memoryVerdict, type WatchdogCommand, type WatchdogVerdict } from "./plugin_watchdog.ts";
import { processNowMs, SlotWatch, WatchSlot } from "./worker_watch.ts";

/** Runs the watchdog in this Worker. */
function serveWatchdog(): void {
  const post = self.postMessage.bind(self);
  const encoder = new TextEncoder();
  const slots = new Map<number, SlotWatch>();
  let verdict: { error: SimulationError; atMs: number } | undefined;

  /** The first failure seen at `now`: a plugin Worker's, the memory's, or the main thread's stall. */
  const judge = (start: StartCommand, heartbeat: Heartbeat, now: number): SimulationError | undefined => {
    for (const slot of slots.values()) {
      const found = slot.verdict(now);
      if (found) return found;
    }
    const memory = memoryVerdict(start.plugin, start.budgetBytes);
    if (memory || start.stallMs === undefined) return memory;
    const stallMs = now - heartbeat.lastBeatMs();
    if (stallMs <= start.stallMs) return undefined;
    const { plugin } = start;
    return new SimulationError(
      "plugin_timeout",
      `the main thread did not run for ${stallMs.toFixed(0)} ms while plugin ${
        plugin.name ?? plugin.path
      } was loaded (a flood from the plugin's Worker?)`,
      { actor: plugin.actor },
    );
  };

  /**
   * The verdict's line on stderr (unless the main thread took the verdict and
   * wrote it), then the end of the process: `Deno.exit` in a Worker ends only
   * the Worker, while SIGKILL to our own process needs no permission and no
   * help from a busy main thread.
   */
  const endProcess = (start: StartCommand, heartbeat: Heartbeat, error: SimulationError) => {
    const line = `${start.lastResort!.linePrefix}${error.message.replace(/\s*\n\s*/g, " / ")}\n`;
    if (!heartbeat.taken()) Deno.stderr.writeSync(encoder.encode(line));
    Deno.kill(Deno.pid, "SIGKILL");
  };

  const look = (start: StartCommand, heartbeat: Heartbeat) => {
    const now = processNowMs();
    if (verdict === undefined) {
      const error = judge(start, heartbeat, now);
      if (error === undefined) return;
      verdict = { error, atMs: now };
      post({ type: "verdict", error: errorToData(error) } satisfies WatchdogVerdict);
    } else if (start.lastResort && now - verdict.atMs > start.lastResort.graceMs) {
      endProcess(start, heartbeat, verdict.error);
    }
  };

  self.onmessage = (event: MessageEvent<WatchdogCommand>) => {
    const command = event.data;
    switch (command.type) {
      case "start": {
        const heartbeat = new Heartbeat(command.heartbeat);
        setInterval(() => look(command, heartbeat), command.pollMs);
        break;
      }
      case "watch":
        slots.set(
          command.id,
          new SlotWatch(new WatchSlot(command.buffer), command.plugin, command.timeoutMs),
        );
        break;
      case "unwatch":
        slots.delete(command.id);
        break;
    }
  };
}

type StartCommand = Extract<WatchdogCommand, { type: "start" }>;

serveWatchdog();
