import { assert, assertEquals, assertNotEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import { type Actor, type ActorContext, Kernel } from "../actors/runtime/kernel.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { SYNCHRONIZED, VirtualClock } from "../actors/runtime/clock.ts";
import { Recorder } from "./_recorder.ts";

type Note = { readonly type: "note"; readonly label: string };
const note = (label: string): Note => ({ type: "note", label });

Deno.test("kernel delivers same-time messages in send order", () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const ref = kernel.spawn("sink", sink);
  for (const label of ["a", "b", "c", "d"]) kernel.send(ref, note(label), 10);
  kernel.send(ref, note("early"), 5);
  kernel.run();
  assertEquals(sink.received.map((r) => [r.timeMs, r.message.label]), [
    [5, "early"],
    [10, "a"],
    [10, "b"],
    [10, "c"],
    [10, "d"],
  ]);
});

Deno.test("kernel delivers a zero-delay reply after messages already due at that time", () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const sinkRef = kernel.spawn("sink", sink);
  const relay = kernel.spawn<Note>("relay", {
    handle: (m, ctx) => ctx.send(sinkRef, note(`relayed ${m.label}`)),
  });
  kernel.send(relay, note("x"), 1);
  kernel.send(sinkRef, note("direct"), 1);
  kernel.run();
  assertEquals(sink.received.map((r) => r.message.label), ["direct", "relayed x"]);
});

Deno.test("kernel time never decreases, whatever the delays actors choose", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 2 ** 31 }),
      fc.array(fc.double({ min: 0, max: 100, noNaN: true }), { minLength: 1, maxLength: 50 }),
      (seed, delays) => {
        const kernel = new Kernel({ seed });
        const times: number[] = [];
        let hops = 0;
        const ref = kernel.spawn<Note>("bouncer", {
          handle(_m, ctx) {
            times.push(ctx.now());
            if (hops++ < 500) {
              ctx.send(ctx.self, note("hop"), delays[Math.floor(ctx.random() * delays.length)]);
              if (ctx.random() < 0.3) ctx.schedule(delays[0], note("extra"));
            }
          },
        });
        for (const d of delays) kernel.send(ref, note("seed"), d);
        kernel.run();
        for (let i = 1; i < times.length; i++) assert(times[i] >= times[i - 1], `time went back at ${i}`);
      },
    ),
    { numRuns: 50 },
  );
});

Deno.test("kernel keeps FIFO order per sender/receiver pair for equal delays", () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 100 }), (bursts) => {
      const kernel = new Kernel();
      const sink = new Recorder<Note>();
      const sinkRef = kernel.spawn("sink", sink);
      let n = 0;
      const sender = kernel.spawn<Note>("sender", {
        handle(_m, ctx) {
          for (const size of bursts) for (let i = 0; i < size; i++) ctx.send(sinkRef, note(String(n++)), 3);
        },
      });
      kernel.send(sender, note("go"));
      kernel.run();
      assertEquals(sink.received.map((r) => Number(r.message.label)), [...Array(n).keys()]);
    }),
  );
});

type Numbered = { readonly type: "numbered"; readonly id: number };

Deno.test("kernel delivers in-order arrivals, same-time replies and out-of-order timers in (time, send order)", () => {
  // Arrivals sent ahead in time order (the workload's pattern: the event queue's run), each
  // answered at once (the lane) and by a timer that lands before later arrivals (the heap).
  const kernel = new Kernel();
  const log: [number, string][] = [];
  const sink = kernel.spawn<Note>("sink", { handle: (m, ctx) => log.push([ctx.now(), m.label]) });
  const server = kernel.spawn<Note>("server", {
    handle(m, ctx) {
      log.push([ctx.now(), m.label]);
      if (m.label.startsWith("arrival")) {
        ctx.send(sink, note(`reply ${m.label}`));
        ctx.schedule(m.label === "arrival 1" ? 25 : 5, note(`timer ${m.label}`));
      }
    },
  });
  for (const [i, t] of [0, 10, 20, 20, 40].entries()) kernel.send(server, note(`arrival ${i}`), t);
  kernel.send(sink, note("outsider"), 25); // sent before the run: before the timers sent at 20 for 25
  kernel.run();
  assertEquals(log, [
    [0, "arrival 0"],
    [0, "reply arrival 0"],
    [5, "timer arrival 0"],
    [10, "arrival 1"],
    [10, "reply arrival 1"],
    [20, "arrival 2"],
    [20, "arrival 3"],
    [20, "reply arrival 2"],
    [20, "reply arrival 3"],
    [25, "outsider"],
    [25, "timer arrival 2"],
    [25, "timer arrival 3"],
    [35, "timer arrival 1"],
    [40, "arrival 4"],
    [40, "reply arrival 4"],
    [45, "timer arrival 4"],
  ]);
});

Deno.test("kernel delivery order matches a reference sort by (time, send order) over any mix of sends", () => {
  // Each delivery of message k acts out plan[k % plan.length]: sends at the same instant, in time
  // order after the last in-order one (a source's arrivals), anywhere ahead (timers), at an
  // absolute time, and cancels. Every message carries its send index, which is the kernel's seq order.
  const action = fc.record({
    kind: fc.constantFrom("now", "in_order", "ahead", "at", "cancel"),
    step: fc.integer({ min: 0, max: 30 }),
    to: fc.integer({ min: 0, max: 2 }),
  });
  fc.assert(
    fc.property(
      fc.array(fc.array(action, { maxLength: 3 }), { minLength: 1, maxLength: 20 }),
      fc.array(fc.integer({ min: 0, max: 8 }), { minLength: 1, maxLength: 30 }),
      (plan, arrivalGaps) => {
        const kernel = new Kernel();
        const sent: { timeMs: number; id: number }[] = [];
        const cancelled = new Set<number>();
        const timers: [number, number][] = []; // [id, timer]
        const delivered: { timeMs: number; id: number }[] = [];
        let lastInOrderMs = 0;
        const refs: number[] = [];
        const actor: Actor<Numbered> = {
          handle(m, ctx) {
            delivered.push({ timeMs: ctx.now(), id: m.id });
            if (sent.length > 2000) return;
            for (const { kind, step, to } of plan[m.id % plan.length]) {
              const id = sent.length, message: Numbered = { type: "numbered", id };
              if (kind === "cancel") {
                const victim = timers[step % Math.max(1, timers.length)];
                if (victim !== undefined && !delivered.some((d) => d.id === victim[0])) {
                  cancelled.add(victim[0]);
                  ctx.cancel(victim[1]);
                }
                continue;
              }
              let timeMs = ctx.now();
              if (kind === "in_order") timeMs = lastInOrderMs = Math.max(lastInOrderMs, ctx.now()) + step;
              if (kind === "ahead" || kind === "at") timeMs += step / 4;
              sent.push({ timeMs, id });
              if (kind === "at") timers.push([id, ctx.scheduleAt(timeMs, message)]);
              else if (kind === "ahead" && to === 0) {
                timers.push([id, ctx.schedule(timeMs - ctx.now(), message)]);
              } else ctx.send(refs[to], message, timeMs - ctx.now());
            }
          },
        };
        for (let i = 0; i < 3; i++) refs.push(kernel.spawn(`actor/${i}`, actor));
        for (const gap of arrivalGaps) {
          lastInOrderMs += gap;
          const id = sent.length;
          sent.push({ timeMs: lastInOrderMs, id });
          kernel.send(refs[id % 3], { type: "numbered", id }, lastInOrderMs);
        }
        kernel.run();
        const expected = sent.filter((s) => !cancelled.has(s.id))
          .sort((a, b) => a.timeMs - b.timeMs || a.id - b.id);
        assertEquals(delivered, expected);
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("scheduling in the past is a RangeError", async (t) => {
  const kernel = new Kernel();
  const ref = kernel.spawn("sink", new Recorder<Note>());
  for (const delay of [-1, -0.001, NaN, Infinity]) {
    await t.step(`delay ${delay}`, () => {
      assertThrows(() => kernel.send(ref, note("x"), delay), RangeError, "delayMs");
    });
  }
});

Deno.test("an actor scheduling in the past fails the run, naming actor, message and time", () => {
  const kernel = new Kernel();
  const ref = kernel.spawn<Note>("timetraveller", { handle: (_m, ctx) => ctx.schedule(-5, note("back")) });
  kernel.send(ref, note("go"), 7);
  const error = assertThrows(() => kernel.run(), SimulationError, "timetraveller");
  assertEquals(error.kind, "actor_threw");
  assertEquals(error.messageType, "note");
  assertEquals(error.timeMs, 7);
  assert(error.cause instanceof RangeError);
});

Deno.test("cancelled timers never fire; others still do", () => {
  const kernel = new Kernel();
  const fired: string[] = [];
  const ref = kernel.spawn<Note>("timers", {
    handle(m, ctx) {
      if (m.label !== "setup") {
        fired.push(m.label);
        return;
      }
      const a = ctx.schedule(5, note("a"));
      ctx.schedule(5, note("b"));
      const c = ctx.schedule(1, note("c"));
      ctx.cancel(a);
      ctx.cancel(c);
      ctx.cancel(c);
    },
  });
  kernel.send(ref, note("setup"));
  kernel.run();
  assertEquals(fired, ["b"]);
  assertEquals(kernel.messagesDelivered, 2);
});

Deno.test("a message to an unknown address is a SimulationError naming the sender", () => {
  const kernel = new Kernel();
  const ref = kernel.spawn<Note>("lost", { handle: (_m, ctx) => ctx.send(42 as never, note("void")) });
  kernel.send(ref, note("go"));
  const error = assertThrows(() => kernel.run(), SimulationError, "lost");
  assertEquals(error.kind, "unknown_actor");
});

Deno.test("an actor that throws fails the run with actor_threw", () => {
  const kernel = new Kernel();
  const ref = kernel.spawn<Note>("faulty", {
    handle: () => {
      throw new Error("boom");
    },
  });
  kernel.send(ref, note("poke"), 3);
  const error = assertThrows(() => kernel.run(), SimulationError, "boom");
  assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
    "actor_threw",
    "faulty",
    "note",
    3,
  ]);
});

Deno.test("spawning two actors under one name is a TypeError", () => {
  const kernel = new Kernel();
  kernel.spawn("twin", new Recorder<Note>());
  assertThrows(() => kernel.spawn("twin", new Recorder<Note>()), TypeError, "twin");
});

Deno.test("run stops before messages later than untilMs and can resume", () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const ref = kernel.spawn("sink", sink);
  kernel.send(ref, note("a"), 1);
  kernel.send(ref, note("b"), 10);
  kernel.run({ untilMs: 5 });
  assertEquals(sink.received.length, 1);
  assertEquals(kernel.pendingCount, 1);
  kernel.run();
  assertEquals(sink.received.map((r) => r.timeMs), [1, 10]);
});

Deno.test("each actor's random stream depends only on the seed and its own name", () => {
  const draws = (seed: number, names: string[]) => {
    const kernel = new Kernel({ seed });
    const out: Record<string, number[]> = {};
    for (const name of names) {
      const actor: Actor<Note> = {
        handle: (_m, ctx: ActorContext<Note>) => (out[name] = [ctx.random(), ctx.random()]),
      };
      kernel.send(kernel.spawn(name, actor), note("draw"));
    }
    kernel.run();
    return out;
  };
  const a = draws(1, ["source", "router"]);
  const b = draws(1, ["extra", "router", "source"]);
  assertEquals(a.source, b.source);
  assertEquals(a.router, b.router);
  assertNotEquals(a.source, a.router);
  assertNotEquals(draws(2, ["source"]).source, a.source);
});

Deno.test("runWithClock asks the clock before each delivery and once more at the end", async () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const ref = kernel.spawn("sink", sink);
  kernel.send(ref, note("a"), 2);
  kernel.send(ref, note("b"), 4);
  const asked: number[] = [];
  const synced: [number, number][] = [];
  let waited = false;
  await kernel.runWithClock({
    synchronize(t) {
      asked.push(t);
      // The first time it is asked about 4, the clock makes the kernel wait.
      if (t === 4 && !waited) return Promise.resolve(void (waited = true));
      return { lagMs: t / 2 };
    },
  }, { onSync: (status, t) => synced.push([t, status.lagMs]) });
  assertEquals(asked, [2, 4, 4, Infinity]);
  assertEquals(synced, [[2, 1], [4, 2]]);
  assertEquals(sink.received.map((r) => r.timeMs), [2, 4]);
});

Deno.test("runWithClock reads the queue again after a wait: a message added meanwhile goes first", async () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const ref = kernel.spawn("sink", sink);
  kernel.send(ref, note("late"), 10);
  let added = false;
  await kernel.runWithClock({
    synchronize(_t) {
      if (added) return SYNCHRONIZED;
      added = true;
      // Work outside the kernel (a Worker's answer) adds an earlier message while the clock waits.
      return Promise.resolve().then(() => void kernel.send(ref, note("early"), 3));
    },
  }, { untilMs: 20 });
  assertEquals(sink.received.map((r) => r.message.label), ["early", "late"]);
});

Deno.test("runWithClock with the virtual clock delivers as run() does", async () => {
  const build = () => {
    const kernel = new Kernel({ seed: 3 });
    const sink = new Recorder<Note>();
    const ref = kernel.spawn("sink", sink);
    for (const t of [5, 1, 3, 3, 8]) kernel.send(ref, note(`t${t}`), t);
    return { kernel, sink };
  };
  const a = build(), b = build();
  a.kernel.run({ untilMs: 5 });
  await b.kernel.runWithClock(new VirtualClock(), { untilMs: 5 });
  assertEquals(b.sink.received, a.sink.received);
  assertEquals(b.kernel.nowMs, a.kernel.nowMs);
});

Deno.test("kernel: a cancelled message does not move the clock", () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const ref = kernel.spawn("sink", sink);
  kernel.send(ref, note("kept"), 1);
  kernel.cancel(kernel.send(ref, note("cancelled"), 5));
  kernel.run();
  assertEquals(sink.received.map((r) => r.message.label), ["kept"]);
  assertEquals(kernel.nowMs, 1);
});

Deno.test("runWithClock reports a status only for deliveries, and waits on any thenable a clock returns", async () => {
  const kernel = new Kernel();
  const sink = new Recorder<Note>();
  const ref = kernel.spawn("sink", sink);
  kernel.cancel(kernel.send(ref, note("cancelled"), 1));
  kernel.send(ref, note("kept"), 2);
  const synced: number[] = [];
  let waits = 0;
  await kernel.runWithClock({
    synchronize(t) {
      // A clock built on another promise library: a thenable, not a native Promise.
      if (waits++ % 2 === 0 && t !== Infinity) {
        return { then: (resolve: () => void) => resolve() } as unknown as Promise<void>;
      }
      return SYNCHRONIZED;
    },
  }, { onSync: (_status, t) => synced.push(t) });
  assertEquals(sink.received.map((r) => r.message.label), ["kept"]);
  assertEquals(synced, [2]);
  assertEquals(kernel.messagesDelivered, 1);
});
