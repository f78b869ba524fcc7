/** One contract, both runtimes: the in-process kernel and actors in Workers (pooled, or one Worker each). */
import { assert, assertEquals, assertRejects } from "@std/assert";
import type { Message } from "../actors/runtime/kernel.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { inProcess, inWorkers, type RuntimeHarness } from "./_runtimes.ts";
import type { Report } from "./fixtures/contract_actors.ts";

function runtimeContract(label: string, newRuntime: (seed: number) => RuntimeHarness) {
  Deno.test(`${label}: replies arrive at send time + delay, with the actor's own seeded draws`, async () => {
    const rt = newRuntime(7);
    try {
      const echo = rt.spawn("echo", "createEcho");
      const { ref, recorder } = rt.recorder("sink");
      rt.send(echo, { type: "ping", replyTo: ref, delayMs: 5, label: "x" } as Message, 10);
      rt.send(echo, { type: "ping", replyTo: ref, delayMs: 0, label: "y" } as Message, 20);
      await rt.run();
      const expected = createRandomStream(7, "echo");
      assertEquals(recorder.received, [
        { timeMs: 15, message: { type: "pong", label: "x", draw: expected(), at: 10 } },
        { timeMs: 20, message: { type: "pong", label: "y", draw: expected(), at: 20 } },
      ]);
    } finally {
      rt.close();
    }
  });

  Deno.test(`${label}: timers fire at their time and cancelled timers never fire`, async () => {
    const rt = newRuntime(1);
    try {
      const timers = rt.spawn("timers", "createTimers");
      const { ref, recorder } = rt.recorder("sink");
      rt.send(timers, { type: "arm", replyTo: ref } as Message, 1);
      await rt.run();
      assertEquals(
        recorder.received.map((r) => [r.timeMs, (r.message as Report & { label: string }).label]),
        [[6, "a"], [16, "c"]],
      );
    } finally {
      rt.close();
    }
  });

  Deno.test(`${label}: background timers fire while other work is pending, and keep no run alive`, async () => {
    const rt = newRuntime(1);
    try {
      const heart = rt.spawn("heart", "createHeartbeat");
      const { ref, recorder } = rt.recorder("sink");
      rt.send(heart, { type: "arm", replyTo: ref } as Message, 0);
      await rt.run();
      assertEquals(
        recorder.received.map((r) => [r.timeMs, (r.message as Report & { label: string }).label]),
        [[10, "beat"], [20, "beat"], [30, "beat"], [35, "last"]],
      );
    } finally {
      rt.close();
    }
  });

  Deno.test(`${label}: a timer cancelled by a later handler at the same instant never fires`, async () => {
    const rt = newRuntime(1);
    try {
      const canceller = rt.spawn("canceller", "createCanceller");
      const { ref, recorder } = rt.recorder("sink");
      rt.send(canceller, { type: "go", replyTo: ref } as Message, 5);
      rt.send(canceller, { type: "stop" }, 5);
      await rt.run();
      assertEquals(recorder.received, []);
    } finally {
      rt.close();
    }
  });

  Deno.test(`${label}: messages on one channel with equal delays arrive in send order`, async () => {
    const rt = newRuntime(1);
    try {
      const burst = rt.spawn("burst", "createBurst");
      const { ref, recorder } = rt.recorder("sink");
      rt.send(burst, { type: "burst", replyTo: ref, count: 50 } as Message);
      await rt.run();
      assertEquals(recorder.received.map((r) => (r.message as Report & { index: number }).index), [
        ...Array(50).keys(),
      ]);
      assertEquals(recorder.received.every((r) => r.timeMs === 2), true);
    } finally {
      rt.close();
    }
  });

  Deno.test(`${label}: an actor that throws fails the run naming actor, message type and time`, async () => {
    const rt = newRuntime(1);
    try {
      const faulty = rt.spawn("faulty", "createFaulty");
      rt.send(faulty, { type: "poke" }, 4);
      const error = await assertRejects(() => rt.run(), SimulationError, "faulty actor refuses");
      assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
        "actor_threw",
        "faulty",
        "poke",
        4,
      ]);
    } finally {
      rt.close();
    }
  });
}

runtimeContract("in-process kernel", inProcess);
runtimeContract("Worker runtime, actors pooled in one Worker", (seed) => inWorkers(seed, { poolSize: 1 }));
runtimeContract("Worker runtime, a Worker per actor", (seed) => inWorkers(seed, { ownWorker: true }));

Deno.test("Worker runtime: a crash after the last reply fails the run at the current virtual time", async () => {
  const rt = inWorkers(1);
  try {
    const crasher = rt.spawn("crasher", "createAsyncCrasher");
    const { ref } = rt.recorder("sink");
    rt.send(crasher, { type: "poke" }, 4);
    // Keeps the clock running (3 s of wall time at 1000×) while the crash arrives with no delivery pending.
    rt.send(ref, { type: "keepalive" }, 3_000_000);
    const error = await assertRejects(() => rt.run(), SimulationError, "crashed after replying");
    assertEquals([error.kind, error.actor], ["worker_crashed", "crasher"]);
    assert(
      typeof error.timeMs === "number" && error.timeMs >= 4 && error.timeMs < 3_000_000,
      `timeMs: ${error.timeMs}`,
    );
  } finally {
    rt.close();
  }
});
