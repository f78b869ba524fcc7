/** The pooled Worker runtime: many actors per Worker, each with its own stream, in the kernel's exact order. */
import { assert, assertEquals, assertGreater, assertRejects } from "@std/assert";
import { type Actor, type ActorRef, Kernel, type Message } from "../actors/runtime/kernel.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { WallClock } from "../actors/runtime/wall_clock.ts";
import { WorkerRuntime } from "../actors/runtime/worker_runtime.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import { createRelay, type Hop, type Token } from "./fixtures/pooled_actors.ts";
import { createCanceller } from "./fixtures/contract_actors.ts";
import { Recorder } from "./_recorder.ts";

const ENTRY = new URL("./fixtures/pooled_worker.ts", import.meta.url);
const RELAYS = 7;
const TOKENS = 5;

/** Sends each token to a relay, all at time 0 and 1 (ties between Workers from the first hop). */
function startTokens(
  send: (to: ActorRef<Token>, message: Token, delayMs: number) => void,
  relays: ActorRef<Token>[],
  replyTo: ActorRef<Hop>,
) {
  for (let token = 0; token < TOKENS; token++) {
    send(
      relays[token % relays.length],
      { type: "token", token, hops: 40, peers: relays, replyTo },
      token % 2,
    );
  }
}

Deno.test("a pool of 2 Workers hosting 7 relays delivers in the virtual kernel's order, each relay with its own stream", async (t) => {
  const kernel = new Kernel({ seed: 11 });
  const expected = new Recorder<Hop>();
  const expectedSink = kernel.spawn("sink", expected);
  const virtualRelays = Array.from({ length: RELAYS }, (_, i) => kernel.spawn(`relay/${i}`, createRelay()));
  startTokens((to, m, d) => kernel.send(to, m, d), virtualRelays, expectedSink);
  kernel.run();

  // The sink runs at once when it declares it sends nothing, else it waits its turn: the same order either way.
  for (const sinkLookahead of [undefined, () => Infinity]) {
    await t.step(`the sink ${sinkLookahead ? "declares it sends nothing" : "declares nothing"}`, async () => {
      const runtime = new WorkerRuntime({ seed: 11, wallTime: systemWallTime, poolSize: 2 });
      try {
        const recorder = new Recorder<Hop>();
        const sink = runtime.spawnLocal("sink", recorder, { lookaheadMs: sinkLookahead });
        const relays = Array.from(
          { length: RELAYS },
          (_, i) =>
            runtime.spawnRemote<Token>(`relay/${i}`, { entry: ENTRY, factory: "createRelay", args: [] }),
        );
        assertEquals(runtime.workerCount, 2);
        startTokens((to, m, d) => runtime.kernel.send(to, m, d), relays, sink);
        await runtime.start();
        await runtime.run(new WallClock(systemWallTime, 1000));

        assertEquals(recorder.received.length, TOKENS * 41);
        assertEquals(recorder.received, expected.received);
        // Ties happened (so the order was at stake) and every relay drew from its own stream.
        const times = recorder.received.map((r) => r.timeMs);
        assertGreater(times.length - new Set(times).size, 20);
        for (let i = 0; i < RELAYS; i++) {
          const draws = recorder.received.filter((r) => r.message.by === `relay/${i}`).map((r) =>
            r.message.draw
          );
          const stream = createRandomStream(11, `relay/${i}`);
          assert(draws.length > 0, `relay/${i} never handled a token`);
          assertEquals(draws, draws.map(() => stream()));
        }
      } finally {
        runtime.terminate();
      }
    });
  }
});

Deno.test("a Worker-hosted actor that sends sooner than its declared lookahead fails the run with invariant_broken", async () => {
  const runtime = new WorkerRuntime({ seed: 1, wallTime: systemWallTime, poolSize: 1 });
  try {
    const sink = runtime.spawnLocal("sink", new Recorder<Hop>());
    const relay = runtime.spawnRemote<Token>("relay", {
      entry: ENTRY,
      factory: "createRelay",
      args: [],
      lookaheadMs: () => 1, // a relay reports each hop at once: a false declaration
    });
    runtime.kernel.send(relay, { type: "token", token: 0, hops: 0, peers: [relay], replyTo: sink }, 3);
    await runtime.start();
    const error = await assertRejects(
      () => runtime.run(new WallClock(systemWallTime, 1000)),
      SimulationError,
      "earlier than its declared lookahead allows",
    );
    assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
      "invariant_broken",
      "relay",
      "token",
      3,
    ]);
  } finally {
    runtime.terminate();
  }
});

Deno.test("actors that declare they send nothing and send fail the run with invariant_broken, in a Worker or here", async (t) => {
  await t.step("in a Worker", async () => {
    const runtime = new WorkerRuntime({ seed: 1, wallTime: systemWallTime, poolSize: 1 });
    try {
      const sink = runtime.spawnLocal("sink", new Recorder<Hop>());
      const relay = runtime.spawnRemote<Token>("relay", {
        entry: ENTRY,
        factory: "createRelay",
        args: [],
        lookaheadMs: () => Infinity,
      });
      runtime.kernel.send(relay, { type: "token", token: 0, hops: 0, peers: [relay], replyTo: sink }, 2);
      await runtime.start();
      const error = await assertRejects(
        () => runtime.run(new WallClock(systemWallTime, 1000)),
        SimulationError,
        "(it sends nothing)",
      );
      assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
        "invariant_broken",
        "relay",
        "token",
        2,
      ]);
    } finally {
      runtime.terminate();
    }
  });
  await t.step("in this thread", async () => {
    const runtime = new WorkerRuntime({ seed: 1, wallTime: systemWallTime, poolSize: 1 });
    try {
      const sink = runtime.spawnLocal("sink", new Recorder<Hop>());
      const chatty = runtime.spawnLocal<Message>("chatty", {
        handle: (_m, ctx) => ctx.send(sink, { type: "hop", by: "chatty", token: 0, draw: 0, at: ctx.now() }),
      }, { lookaheadMs: () => Infinity });
      runtime.kernel.send(chatty, { type: "poke" }, 5);
      await runtime.start();
      const error = await assertRejects(
        () => runtime.run(new WallClock(systemWallTime, 1000)),
        SimulationError,
        'it sent "hop", though it declared a lookahead of Infinity',
      );
      assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
        "invariant_broken",
        "chatty",
        "poke",
        5,
      ]);
    } finally {
      runtime.terminate();
    }
  });
});

Deno.test("an actor that ends its pooled Worker with close() fails the run at once, naming it and its message", async () => {
  const runtime = new WorkerRuntime({
    seed: 1,
    wallTime: systemWallTime,
    poolSize: 1,
    handlerTimeoutMs: 60_000,
  });
  try {
    runtime.spawnRemote("relay", { entry: ENTRY, factory: "createRelay", args: [] });
    const closer = runtime.spawnRemote<Message>("closer", {
      entry: ENTRY,
      factory: "createCloser",
      args: [],
    });
    runtime.kernel.send(closer, { type: "poke" }, 3);
    await runtime.start();
    const error = await assertRejects(
      () => runtime.run(new WallClock(systemWallTime, 1000)),
      SimulationError,
      "the Worker was ended by close()",
    );
    assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
      "worker_crashed",
      "closer",
      "poke",
      3,
    ]);
  } finally {
    runtime.terminate();
  }
});

Deno.test("an actor whose Worker ends without a word fails the run at its delivery timeout", async () => {
  const runtime = new WorkerRuntime({
    seed: 1,
    wallTime: systemWallTime,
    poolSize: 1,
    handlerTimeoutMs: 200,
  });
  try {
    const quitter = runtime.spawnRemote<Message>("quitter", {
      entry: ENTRY,
      factory: "createSilentQuitter",
      args: [],
    });
    runtime.kernel.send(quitter, { type: "poke" }, 2);
    await runtime.start();
    const error = await assertRejects(
      () => runtime.run(new WallClock(systemWallTime, 1000)),
      SimulationError,
      'did not answer message "poke" within 200 ms of wall time',
    );
    assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
      "actor_timeout",
      "quitter",
      "poke",
      2,
    ]);
  } finally {
    runtime.terminate();
  }
});

Deno.test("a forged failure from an untrusted Worker is the actor's own: kind actor_threw, no error class taken", async () => {
  const runtime = new WorkerRuntime({ seed: 1, wallTime: systemWallTime, poolSize: 1 });
  try {
    const forger = runtime.spawnRemote<Message>("forger", {
      entry: ENTRY,
      factory: "createForger",
      args: [],
    });
    runtime.kernel.send(forger, { type: "poke" }, 1);
    await runtime.start();
    const error = await assertRejects(
      () => runtime.run(new WallClock(systemWallTime, 1000)),
      SimulationError,
      "forged",
    );
    assertEquals([error.kind, error.actor, error.cause], ["actor_threw", "forger", undefined]);
  } finally {
    runtime.terminate();
  }
});

Deno.test("a local actor whose delivery waits for a Worker's answer still cancels its own timer due at that instant", async () => {
  const runtime = new WorkerRuntime({ seed: 1, wallTime: systemWallTime, poolSize: 1 });
  try {
    const recorder = new Recorder<Message>();
    const sink = runtime.spawnLocal("sink", recorder);
    const canceller = runtime.spawnLocal<Message>("canceller", createCanceller() as Actor<Message>);
    const relay = runtime.spawnRemote<Token>("relay", { entry: ENTRY, factory: "createRelay", args: [] });
    // At t=5, in send order: "go" arms a zero-delay timer (nothing is unanswered yet, so it runs at once);
    // the relay's token goes to its Worker; "stop" must then wait for that answer, and cancels the timer
    // before it can be handed out.
    runtime.kernel.send(canceller, { type: "go", replyTo: sink } as Message, 5);
    runtime.kernel.send(relay, { type: "token", token: 0, hops: 0, peers: [relay], replyTo: sink }, 5);
    runtime.kernel.send(canceller, { type: "stop" }, 5);
    await runtime.start();
    await runtime.run(new WallClock(systemWallTime, 1000));
    assertEquals(recorder.received.map((r) => [r.timeMs, r.message.type]), [[5, "hop"]]);
  } finally {
    runtime.terminate();
  }
});

Deno.test("a Worker-hosted actor's timer due now is held while that actor has a handler unanswered, which may cancel it", async () => {
  const runtime = new WorkerRuntime({ seed: 1, wallTime: systemWallTime, poolSize: 1 });
  const entry = new URL("./fixtures/contract_worker.ts", import.meta.url);
  try {
    const recorder = new Recorder<Message>();
    const sink = runtime.spawnLocal("sink", recorder);
    const canceller = runtime.spawnRemote<Message>("canceller", {
      entry,
      factory: "createCanceller",
      args: [],
    });
    // At t=5: "go" arms a zero-delay timer; the sink's "poke" waits for that answer (a local delivery
    // takes its turn), so the timer is queued before "stop" goes out; the timer, due at the same
    // instant, must then wait for the answer to "stop", which cancels it.
    runtime.kernel.send(canceller, { type: "go", replyTo: sink } as Message, 5);
    runtime.kernel.send(sink, { type: "poke" }, 5);
    runtime.kernel.send(canceller, { type: "stop" }, 5);
    await runtime.start();
    await runtime.run(new WallClock(systemWallTime, 1000));
    assertEquals(recorder.received.map((r) => [r.timeMs, r.message.type]), [[5, "poke"]]);
  } finally {
    runtime.terminate();
  }
});
