/** The production routers' rules at their edges (REFERENCE §2). */
import { assert, assertEquals, assertGreater, assertLess } from "@std/assert";
import { ExactCacheView } from "../actors/router/cache_view.ts";
import { createPolicy, policyDescriptor, type PolicySpec } from "../actors/policies/mod.ts";
import type { Request } from "../actors/protocol.ts";
import { InstanceTable } from "../actors/router/router.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { status } from "./_status.ts";

/** A request of group 7 whose prompt is 160 prefix tokens (10 blocks) + `suffix`. */
const req = (suffix = 0, group = 7, id = 0): Request => ({
  id,
  arrivalMs: 0,
  prefixGroup: group,
  prefixTokens: 160,
  suffixTokens: suffix,
  outputTokens: 1,
});

interface Instance {
  inFlight?: number;
  waiting?: number;
  kv?: number;
  pending?: number;
  decode?: number;
  holds?: boolean;
}

function view(instances: Instance[]): InstanceTable {
  const t = new InstanceTable(instances.length, {
    cacheView: new ExactCacheView(instances.length, "groups"),
  });
  instances.forEach((x, i) => {
    t.apply(status(i, {
      waiting: x.waiting ?? 0,
      kvUtilization: x.kv ?? 0,
      pendingPrefillTokens: x.pending ?? 0,
      decodeBlocks: x.decode ?? 0,
      ...(x.holds ? { cacheAdded: 7 } : {}),
    }));
    t.inFlight[i] = x.inFlight ?? 0;
    // Dynamo counts its own prefill and blocks: `pending` and `decode` stand for them too.
    t.activePrefillTokens[i] = x.pending ?? 0;
    t.activeBlocks[i] = x.decode ?? 0;
  });
  return t;
}

const choose = (spec: PolicySpec, instances: Instance[], request = req(), seed = 1) =>
  createPolicy(spec).choose(request, view(instances), createRandomStream(seed, "router"));

const tally = (spec: PolicySpec, instances: Instance[], runs = 2000) => {
  const counts = new Array(instances.length).fill(0);
  const policy = createPolicy(spec), v = view(instances), random = createRandomStream(3, "router");
  for (let k = 0; k < runs; k++) counts[policy.choose(req(0, 7, k), v, random)]++;
  return counts;
};

Deno.test("the rules below are checked at the shipped defaults the registry declares", () => {
  const defaults = (name: string) =>
    Object.fromEntries(Object.entries(policyDescriptor(name)!.params).map(([key, p]) => [key, p.default]));
  assertEquals(defaults("sglang_cache_aware"), {
    balanceAbs: 64,
    balanceRel: 1.5,
    cacheThreshold: 0.3,
    hostCredit: 0.8,
  });
  assertEquals(defaults("llmd_weighted"), {
    prefixWeight: 3,
    queueWeight: 2,
    kvWeight: 2,
    hostCredit: 0.8,
    maxPrefixBlocks: 256,
  });
  assertEquals(defaults("dynamo_kv"), { temperature: 0, overlapWeight: 1, hostCredit: 0.8 });
  assertEquals(defaults("chwbl"), { loadFactor: 1.25, ringPoints: 256 });
  for (const name of ["preble_e2", "vllm_prefix"]) assertEquals(defaults(name), { hostCredit: 0.8 });
  assertEquals(defaults("power_of_two"), {});
});

Deno.test("sglang_cache_aware: balances only when both gates open (abs > 64 and rel > 1.5)", async (t) => {
  const sglang: PolicySpec = { name: "sglang_cache_aware" };
  await t.step("gap 100 and ratio 3: least loaded, despite the cache", () => {
    assertEquals(choose(sglang, [{ inFlight: 150, holds: true }, { inFlight: 50 }]), 1);
  });
  await t.step("gap 100 but ratio 1.4: no balancing, the cache wins", () => {
    assertEquals(choose(sglang, [{ inFlight: 350, holds: true }, { inFlight: 250 }]), 0);
  });
  await t.step("ratio 3 but gap 60: no balancing, the cache wins", () => {
    assertEquals(choose(sglang, [{ inFlight: 90, holds: true }, { inFlight: 30 }]), 0);
  });
  await t.step("match share 160/600 = 0.27 <= 0.3: least loaded", () => {
    assertEquals(choose(sglang, [{ inFlight: 5, holds: true }, { inFlight: 2 }], req(440)), 1);
  });
  await t.step("match share 160/400 = 0.4 > 0.3: the holder", () => {
    assertEquals(choose(sglang, [{ inFlight: 5, holds: true }, { inFlight: 2 }], req(240)), 0);
  });
});

Deno.test("llmd_weighted: equal queues all score 1 on the queue scorer, so prefix and KV decide", () => {
  // Queues all 3: queue score 1 everywhere. Instance 1 holds the prefix (+3); instance 2 has free KV (+2 × 0.9).
  assertEquals(
    choose({ name: "llmd_weighted" }, [{ waiting: 3, kv: 0.5 }, { waiting: 3, kv: 0.5, holds: true }, {
      waiting: 3,
      kv: 0.1,
    }]),
    1,
  );
  // Without the prefix, the emptier KV wins.
  assertEquals(
    choose({ name: "llmd_weighted" }, [{ waiting: 3, kv: 0.5 }, { waiting: 3, kv: 0.5 }, {
      waiting: 3,
      kv: 0.1,
    }], req(0, -1)),
    2,
  );
  // Queue normalisation: q = 0, 5, 10 → 1, 0.5, 0 (× 2); the shortest queue beats a prefix hit at weight 1.
  assertEquals(
    choose({ name: "llmd_weighted", prefixWeight: 1 }, [{ waiting: 0 }, { waiting: 5 }, {
      waiting: 10,
      holds: true,
    }]),
    0,
  );
});

Deno.test("dynamo_kv: lowest cost wins at T = 0, equal trees tie at random; T > 0 samples by range-normalised cost", () => {
  // cost = (active prefill + prompt − overlap)/16 + active blocks + new blocks (all 10 here: no active request
  // shares them). Instance 0: (0 + 160 − 160)/16 + 5 + 10 = 15; 1: 160/16 + 0 + 10 = 20.
  assertEquals(choose({ name: "dynamo_kv" }, [{ holds: true, decode: 5 }, {}]), 0);
  const ties = tally({ name: "dynamo_kv" }, [{}, {}, {}]);
  for (const c of ties) assert(c > 550 && c < 780, `ties ${ties}`);
  // Costs 20 and 30, range 10: normalised 0 and 1; at T = 1, p(0) = 1 / (1 + e^-1) ≈ 0.731.
  const warm = tally({ name: "dynamo_kv", temperature: 1 }, [{ pending: 0 }, { pending: 160 }]);
  assertGreater(warm[0] / 2000, 0.70);
  assertLess(warm[0] / 2000, 0.76);
});

Deno.test("chwbl: a prefix sticks to its ring owner until that owner exceeds 1.25 × (total + 1) / N", () => {
  const owner = choose({ name: "chwbl" }, [{}, {}, {}, {}]);
  for (let id = 0; id < 20; id++) {
    assertEquals(choose({ name: "chwbl" }, [{}, {}, {}, {}], req(0, 7, id)), owner);
  }
  // total in flight 8 → bound 1.25 × 9 / 4 = 2.81: an owner at 3 is skipped, at 2 it is kept.
  const loads = (ownerLoad: number) =>
    [0, 1, 2, 3].map((i) => ({ inFlight: i === owner ? ownerLoad : (8 - ownerLoad) / 3 }));
  assertEquals(choose({ name: "chwbl" }, loads(2)), owner);
  assert(choose({ name: "chwbl" }, loads(3)) !== owner);
});

Deno.test("power_of_two: never picks the busier of the two it draws", () => {
  // With one instance far busier, it is chosen only when both draws... cannot be it: it loses every pair.
  const counts = tally({ name: "power_of_two" }, [{ inFlight: 9 }, { inFlight: 0 }, { inFlight: 0 }, {
    inFlight: 0,
  }]);
  assertEquals(counts[0], 0);
});

Deno.test("preble_e2: exploits a match longer than the new tokens, explores otherwise", () => {
  // 160 matched vs 40 new → exploit the holder although it is busier.
  assertEquals(choose({ name: "preble_e2" }, [{ holds: true, pending: 5000 }, { pending: 0 }], req(40)), 0);
  // 160 matched vs 400 new → explore: the lighter instance.
  assertEquals(choose({ name: "preble_e2" }, [{ holds: true, pending: 5000 }, { pending: 0 }], req(400)), 1);
});

Deno.test("vllm_prefix: random among the longest matches, random when nothing matches, no load term", () => {
  assertEquals(choose({ name: "vllm_prefix" }, [{ inFlight: 50, holds: true }, { inFlight: 0 }]), 0);
  const both = tally({ name: "vllm_prefix" }, [{ holds: true }, { holds: true }, {}]);
  assertEquals(both[2], 0);
  assert(Math.abs(both[0] - both[1]) < 200, `${both}`);
});
