import { assertEquals, assertThrows } from "@std/assert";
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import { createPolicy } from "../actors/policies/mod.ts";
import type { Request, RouterCommand, ServeCommand } from "../actors/protocol.ts";
import { Router } from "../actors/router/router.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { Recorder } from "./_recorder.ts";
import { status } from "./_status.ts";

/** A request whose prefix is two 16-token blocks, so block-level policies see its group. */
const request = (id: number, group = -1): Request => ({
  id,
  arrivalMs: 0,
  prefixGroup: group,
  prefixTokens: 32,
  suffixTokens: 10,
  outputTokens: 1,
});

function setup(policy: RoutingPolicy, instances = 3) {
  const kernel = new Kernel({ seed: 1 });
  const recorders = Array.from({ length: instances }, () => new Recorder<ServeCommand>());
  const refs = recorders.map((r, i) => kernel.spawn(`instance/${i}`, r));
  const router = new Router(refs, policy);
  const ref = kernel.spawn<RouterCommand>("router", router);
  return { kernel, recorders, router, ref };
}

Deno.test("router forwards each request to the chosen instance with itself as replyTo", () => {
  const { kernel, recorders, ref } = setup(createPolicy({ name: "round_robin" }));
  for (let i = 0; i < 4; i++) kernel.send(ref, { type: "route", request: request(i) }, i);
  kernel.run();
  assertEquals(
    recorders.map((r) => r.received.map((x) => [x.timeMs, x.message.request.id, x.message.replyTo])),
    [
      [[0, 0, ref], [3, 3, ref]],
      [[1, 1, ref]],
      [[2, 2, ref]],
    ],
  );
});

Deno.test("router view follows status reports, cache additions and evictions", () => {
  const { kernel, router, ref } = setup(createPolicy({ name: "least_load" }));
  kernel.send(ref, status(1, { waiting: 2, running: 1, cacheAdded: 7 }));
  kernel.send(ref, status(2, { waiting: 0, running: 1, cacheAdded: 7 }));
  kernel.send(ref, status(2, { waiting: 0, running: 0, cacheEvicted: 7, cacheAdded: 8 }));
  kernel.run();
  assertEquals([...router.view.waiting], [0, 2, 0]);
  assertEquals([...router.view.running], [0, 1, 0]);
  assertEquals([router.view.holds(1, 7), router.view.holds(2, 7), router.view.holds(2, 8)], [
    true,
    false,
    true,
  ]);
});

Deno.test("router sends a prefix-aware request to the instance holding its group", () => {
  const { kernel, recorders, ref } = setup(createPolicy({ name: "prefix_aware" }));
  kernel.send(ref, status(2, { waiting: 3, running: 1, cacheAdded: 4 }));
  kernel.send(ref, { type: "route", request: request(0, 4) });
  kernel.run();
  assertEquals(recorders.map((r) => r.received.length), [0, 0, 1]);
});

Deno.test("router fails the run when a policy returns an invalid instance", async (t) => {
  for (const bad of [-1, 3, 1.5, NaN]) {
    await t.step(`choice ${bad}`, () => {
      const { kernel, ref } = setup({ name: "broken", choose: () => bad });
      kernel.send(ref, { type: "route", request: request(0) }, 2);
      const error = assertThrows(() => kernel.run(), SimulationError, "broken");
      assertEquals([error.kind, error.actor, error.messageType, error.timeMs], [
        "invalid_choice",
        "router",
        "route",
        2,
      ]);
    });
  }
});
