/**
 * @module
 * The two runtimes behind one small interface, so one contract suite can run
 * against both (Hono's `runTest({ newRouter })` idea).
 */
import { type Actor, type ActorRef, Kernel, type Message } from "../actors/runtime/kernel.ts";
import { WallClock } from "../actors/runtime/wall_clock.ts";
import { WorkerRuntime } from "../actors/runtime/worker_runtime.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import * as factories from "./fixtures/contract_actors.ts";
import { Recorder } from "./_recorder.ts";

/** A runtime as the contract suite sees it. */
export interface RuntimeHarness {
  /** Builds a contract actor by factory name (in a Worker, for the Worker runtime). */
  spawn(name: string, factory: keyof typeof factories): ActorRef<Message>;
  /** A recorder in the test's own thread. */
  recorder(name: string): { ref: ActorRef<Message>; recorder: Recorder<Message> };
  send(to: ActorRef<Message>, message: Message, delayMs?: number): void;
  /** Runs until nothing is pending. */
  run(): Promise<void>;
  close(): void;
}

/** The in-process kernel under the virtual clock. */
export function inProcess(seed: number): RuntimeHarness {
  const kernel = new Kernel({ seed });
  return {
    spawn: (name, factory) => kernel.spawn(name, (factories[factory] as () => Actor<Message>)()),
    recorder(name) {
      const recorder = new Recorder<Message>();
      return { ref: kernel.spawn(name, recorder), recorder };
    },
    send: (to, message, delayMs = 0) => void kernel.send(to, message, delayMs),
    run: () => Promise.resolve(kernel.run()),
    close() {},
  };
}

/** How the Worker runtime hosts the contract actors. */
export interface WorkerHarnessOptions {
  /** Workers in the pool. @default 1: every actor shares one Worker */
  readonly poolSize?: number;
  /** Give each actor a Worker of its own instead. @default false */
  readonly ownWorker?: boolean;
  /** @default 5000 */
  readonly handlerTimeoutMs?: number;
}

/** Actors in Workers, the kernel paced by the wall clock at 1000 simulated ms per wall ms. */
export function inWorkers(seed: number, options: WorkerHarnessOptions = {}): RuntimeHarness {
  const runtime = new WorkerRuntime({
    seed,
    wallTime: systemWallTime,
    handlerTimeoutMs: options.handlerTimeoutMs ?? 5000,
    poolSize: options.poolSize ?? 1,
  });
  const entry = new URL("./fixtures/contract_worker.ts", import.meta.url);
  const ownWorker = options.ownWorker ?? false;
  return {
    spawn: (name, factory) => runtime.spawnRemote(name, { entry, factory, args: [], ownWorker }),
    recorder(name) {
      const recorder = new Recorder<Message>();
      return { ref: runtime.spawnLocal(name, recorder), recorder };
    },
    send: (to, message, delayMs = 0) => void runtime.kernel.send(to, message, delayMs),
    async run() {
      await runtime.start();
      await runtime.run(new WallClock(systemWallTime, 1000));
    },
    close: () => runtime.terminate(),
  };
}
