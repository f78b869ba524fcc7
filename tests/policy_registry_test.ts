/**
 * The policy registry (actors/policies/mod.ts) and everything derived from
 * it: each descriptor's defaults, bounds and factory agree; names, flags and
 * labels are unique; the scenario schema enforces the declared bounds and
 * fills in the defaults; the declared `reads` are all a policy needs; and
 * README's policy table is the rendered registry.
 */
import { assert, assertEquals, assertNotEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import { ExactCacheView } from "../actors/router/cache_view.ts";
import {
  createPolicy,
  inBounds,
  POLICIES,
  POLICY_NAMES,
  type PolicyDescriptor,
  policyLabel,
  type PolicySpec,
} from "../actors/policies/mod.ts";
import type { Request } from "../actors/protocol.ts";
import { InstanceTable } from "../actors/router/router.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { simulate, type SimulationConfig } from "../actors/simulation.ts";
import {
  NUMERIC_FLAGS,
  PARAMETER_FLAGS,
  parameterFlag,
  SCENARIO_OPTIONS,
} from "../scenarios/scenario/command_line.ts";
import { POLICY_TABLE_MARKERS, policyTableSection } from "../scenarios/docs/policy_docs.ts";
import { parseScenario } from "../scenarios/scenario/scenario.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { scenario } from "./_scenarios.ts";
import { status } from "./_status.ts";

const ROOT = new URL("..", import.meta.url);

/** Every parameter's declared default, by name. */
const defaults = (d: PolicyDescriptor) =>
  Object.fromEntries(Object.entries(d.params).map(([key, p]) => [key, p.default]));

/** The spec of `d` with every parameter at its default. */
const defaultSpec = (d: PolicyDescriptor) => ({ name: d.name, ...defaults(d) }) as PolicySpec;

Deno.test("every descriptor's defaults are within its bounds and its factory builds a policy of its name", async (t) => {
  for (const d of POLICIES) {
    await t.step(d.name, () => {
      for (const [key, p] of Object.entries(d.params)) {
        assert(inBounds(p, p.default), `${d.name}.${key}: default ${p.default} out of its bounds`);
        assert(p.doc.length > 0, `${d.name}.${key}: no doc`);
      }
      assert(d.summary.length > 0, `${d.name}: no summary`);
      // Reports name a run's policy by the created policy's name; a plugin is told apart by it.
      assertEquals(d.create(defaults(d)).name, d.name);
      assertEquals(d.create({}).name, d.name);
      assertEquals(createPolicy({ name: d.name }).name, d.name);
    });
  }
});

Deno.test("policy names are unique, and so are the parameter flags and the labels at defaults", () => {
  assertEquals(new Set(POLICY_NAMES).size, POLICIES.length);
  assertEquals(POLICY_NAMES, POLICIES.map((d) => d.name));
  const labels = POLICIES.map((d) => policyLabel(defaultSpec(d)));
  assertEquals(new Set(labels).size, labels.length, labels.join(", "));
  // Two parameters may share a flag only if they share a name (the flag then sets `policy.<name>`).
  for (const d of POLICIES) {
    for (const key of Object.keys(d.params)) assertEquals(PARAMETER_FLAGS[parameterFlag(key)], key);
  }
});

/** A few values around a parameter's bounds and default. */
function probes(p: PolicyDescriptor["params"][string]): number[] {
  const values = [p.min - 1, p.min, p.min + 0.5, p.default, p.default + 1, p.default * 4 + 0.25];
  if (p.max !== undefined) values.push(p.max, p.max + 0.5, p.max + 1);
  return [...new Set(values)];
}

Deno.test("the scenario schema and createPolicy accept a parameter value exactly when it is within the declared bounds", async (t) => {
  for (const d of POLICIES) {
    for (const [key, p] of Object.entries(d.params)) {
      await t.step(`${d.name}.${key}`, () => {
        for (const value of probes(p)) {
          const spec = { name: d.name, [key]: value } as PolicySpec;
          if (inBounds(p, value)) {
            assertEquals(parseScenario({ policy: spec }).policy, { ...defaultSpec(d), [key]: value });
            createPolicy(spec);
          } else {
            assertThrows(
              () => parseScenario({ policy: spec }),
              UsageError,
              `scenario.policy.${key}: expected `,
            );
            assertThrows(() => createPolicy(spec), RangeError, `${d.name}: ${key} must be `);
          }
        }
      });
    }
  }
});

Deno.test("a parsed scenario's policy carries every parameter, defaults filled in; another policy's parameter is refused", async (t) => {
  assertEquals(parseScenario({}).policy, { name: "hybrid", threshold: 1, hostCredit: 0.8 });
  for (const d of POLICIES) {
    await t.step(d.name, () => {
      assertEquals(parseScenario({ policy: { name: d.name } }).policy, defaultSpec(d));
      const foreign = POLICIES.flatMap((other) => Object.keys(other.params)).find((key) =>
        !(key in d.params)
      );
      const names = Object.keys(d.params).join(", ") || "none";
      assertThrows(
        () => parseScenario({ policy: { name: d.name, [foreign ?? "bogus"]: 1 } }),
        UsageError,
        `scenario.policy.${foreign ?? "bogus"}: not a parameter of ${d.name} (its parameters: ${names})`,
      );
    });
  }
});

Deno.test("a key every object inherits (constructor, toString) is no policy's parameter", () => {
  for (const key of ["constructor", "toString", "__proto__"]) {
    const spec = JSON.parse(`{ "name": "round_robin", "${key}": 1 }`);
    assertThrows(
      () => parseScenario({ policy: spec }),
      UsageError,
      `scenario.policy.${key}: not a parameter`,
    );
    assertThrows(() => createPolicy(spec), RangeError, `round_robin: ${key} is not a parameter`);
  }
});

Deno.test("labels show a parameter when it is always labelled or differs from its default, by its short name", async (t) => {
  for (const d of POLICIES) {
    await t.step(d.name, () => {
      const label = policyLabel(defaultSpec(d));
      const always = Object.entries(d.params).filter(([, p]) => p.alwaysLabelled);
      assertEquals(
        label,
        always.length === 0
          ? d.name
          : `${d.name}(${always.map(([key, p]) => `${p.short ?? key}=${p.default}`).join(",")})`,
      );
      assertEquals(policyLabel({ name: d.name }), label, "absent parameters are at their defaults");
      for (const [key, p] of Object.entries(d.params)) {
        const other = p.max !== undefined && p.default + 1 > p.max ? p.min : p.default + 1;
        const changed = policyLabel({ ...defaultSpec(d), [key]: other });
        assertNotEquals(changed, label);
        assert(changed.includes(`${p.short ?? key}=${other}`), changed);
      }
    });
  }
  assertEquals(policyLabel({ name: "hybrid", threshold: 1 }), "hybrid(thr=1)");
  assertEquals(policyLabel({ name: "round_robin" }), "round_robin");
  assertEquals(
    policyLabel({ name: "sglang_cache_aware", balanceAbs: 32 }),
    "sglang_cache_aware(balanceAbs=32)",
  );
});

// ---- Factories and declared defaults ---------------------------------------

interface InstanceState {
  readonly waiting: number;
  readonly running: number;
  readonly inFlight: number;
  readonly pending: number;
  readonly decode: number;
  readonly kv: number;
  readonly groups: readonly number[];
}

const instanceState = fc.record({
  waiting: fc.integer({ min: 0, max: 6 }),
  running: fc.integer({ min: 0, max: 3 }),
  inFlight: fc.integer({ min: 0, max: 120 }),
  pending: fc.integer({ min: 0, max: 4000 }),
  decode: fc.integer({ min: 0, max: 200 }),
  kv: fc.double({ min: 0, max: 1, noNaN: true }),
  groups: fc.array(fc.integer({ min: 0, max: 4 }), { maxLength: 3 }),
});

function view(instances: readonly InstanceState[], routed: number): InstanceTable {
  const t = new InstanceTable(instances.length, {
    cacheView: new ExactCacheView(instances.length, "groups"),
  });
  instances.forEach((x, i) => {
    const counts = {
      waiting: x.waiting,
      running: x.running,
      pendingPrefillTokens: x.pending,
      decodeBlocks: x.decode,
      kvUtilization: x.kv,
    };
    t.apply(status(i, counts));
    for (const group of x.groups) t.apply(status(i, { ...counts, cacheAdded: group }));
    t.inFlight[i] = x.inFlight;
  });
  t.routedCount = routed;
  return t;
}

const request = (group: number, suffixTokens: number): Request => ({
  id: 3,
  arrivalMs: 0,
  prefixGroup: group,
  prefixTokens: 160,
  suffixTokens,
  outputTokens: 1,
});

Deno.test("each factory's own defaults are the declared ones: no parameters and every default choose alike", () => {
  fc.assert(
    fc.property(
      fc.array(instanceState, { minLength: 1, maxLength: 6 }),
      fc.integer({ min: -1, max: 4 }),
      fc.integer({ min: 0, max: 600 }),
      fc.integer({ min: 0, max: 1000 }),
      (instances, group, suffix, seed) => {
        const v = view(instances, seed);
        for (const d of POLICIES) {
          const bare = createRandomStream(seed, "router"), declared = createRandomStream(seed, "router");
          const a = d.create({}).choose(request(group, suffix), v, bare);
          const b = d.create(defaults(d)).choose(request(group, suffix), v, declared);
          assertEquals(a, b, d.name);
          assertEquals(bare(), declared(), `${d.name}: same number of draws`);
        }
      },
    ),
    { numRuns: 200 },
  );
});

// ---- Flags -------------------------------------------------------------------

/** Option names written out in a tool's source (`name: { type: "string" }`). */
async function literalOptions(file: string): Promise<string[]> {
  const source = await Deno.readTextFile(new URL(file, ROOT));
  return [...source.matchAll(/[\s{,]"?([a-z][a-z-]*)"?: \{ type: "(?:string|boolean)"/g)].map((m) => m[1]);
}

Deno.test("each parameter has a kebab-case flag that collides with no other flag of the scenario tools", async () => {
  assertEquals(parameterFlag("balanceAbs"), "balance-abs");
  assertEquals(parameterFlag("threshold"), "threshold");
  const parameterFlags = Object.keys(PARAMETER_FLAGS);
  assertEquals(
    new Set(parameterFlags),
    new Set(POLICIES.flatMap((d) => Object.keys(d.params).map(parameterFlag))),
  );
  const others = new Set([
    ...Object.keys(NUMERIC_FLAGS),
    ...await literalOptions("scenarios/scenario/command_line.ts"),
    ...await literalOptions("scenarios/run.ts"),
    ...await literalOptions("scenarios/realtime.ts"),
  ]);
  for (const flag of ["policy", "scenario", "seed", "progress", "speed"]) assert(others.has(flag), flag);
  for (const flag of parameterFlags) assert(!others.has(flag), `--${flag} is also another flag`);
  // Nothing in SCENARIO_OPTIONS was overwritten by a later entry.
  assertEquals(
    Object.keys(SCENARIO_OPTIONS).length,
    new Set([...others].filter((f) => f in SCENARIO_OPTIONS)).size + parameterFlags.length,
  );
  for (const flag of parameterFlags) {
    assertEquals(SCENARIO_OPTIONS[flag as keyof typeof SCENARIO_OPTIONS], { type: "string" });
  }
});

// ---- Declared reads ------------------------------------------------------------

/**
 * What decides where requests went: per-instance completions and the cache
 * outcome (a policy that sees different signals routes differently, and
 * these move).
 */
function routing(config: SimulationConfig, asPlugin: boolean) {
  const r = simulate(config, asPlugin ? { policy: createPolicy(config.policy) } : {});
  return {
    perInstanceCompleted: r.perInstanceCompleted,
    hitRate: r.hitRate,
    tokenHitRate: r.tokenHitRate,
    ttftMeanMs: r.ttftMeanMs,
  };
}

/** Small scenarios where every signal matters: batching with sessions (exact view), and FIFO. */
const READS_SCENARIOS: Record<string, (policy: PolicySpec) => SimulationConfig> = {
  "batching, exact view": (policy) =>
    scenario({
      policy,
      instances: { count: 4, model: "batching", engine: { kvBlocks: 2000 } },
      workload: {
        requests: 400,
        ratePerSec: 60,
        prefix: { groups: 8, tokens: 512 },
        sessions: { turnsMean: 3, thinkTimeMs: 500 },
      },
    }),
  fifo: (policy) =>
    scenario({ policy, instances: { count: 4 }, workload: { requests: 400, ratePerSec: 120 } }),
};

Deno.test("declared reads suffice: each built-in policy routes exactly as it does with every status signal on", async (t) => {
  for (const [what, build] of Object.entries(READS_SCENARIOS)) {
    for (const d of POLICIES) {
      await t.step(`${what}: ${d.name}`, () => {
        const config = build({ name: d.name });
        // Passing the policy makes simulate treat it as a plugin, which may read anything.
        assertEquals(routing(config, false), routing(config, true));
      });
    }
  }
});

// ---- Docs ------------------------------------------------------------------------

Deno.test("actors/policies/README.md's policy table is the one rendered from the registry", async () => {
  const page = await Deno.readTextFile(new URL("actors/policies/README.md", ROOT));
  const begin = page.indexOf(POLICY_TABLE_MARKERS.begin), end = page.indexOf(POLICY_TABLE_MARKERS.end);
  assert(begin >= 0 && end > begin, "actors/policies/README.md has no policy table markers");
  const expected = policyTableSection();
  const actual = page.slice(begin, end + POLICY_TABLE_MARKERS.end.length);
  assert(
    actual === expected,
    `actors/policies/README.md's policy table is stale; replace it with (deno run scenarios/docs/policy_docs.ts):\n${expected}`,
  );
});

Deno.test("scenarios/README.md's scenario-field rows for policy.* defer to the generated table and name no parameter the registry lacks", async () => {
  const page = await Deno.readTextFile(new URL("scenarios/README.md", ROOT));
  const rows = page.split("\n").filter((line) => line.startsWith("| `policy."));
  assert(rows.length > 0, "no policy.* rows in scenarios/README.md's scenario-field table");
  const named = new Set(
    rows.flatMap((row) => [...row.matchAll(/`([^`]+)`/g)].map((m) => m[1].replace(/^policy\./, ""))),
  );
  named.delete("name");
  assert(named.delete("<parameter>"), "no policy.<parameter> row");
  const known = new Set(POLICIES.flatMap((d) => Object.keys(d.params)));
  assertEquals([...named].filter((p) => !known.has(p)), []);
  const row = rows.find((r) => r.includes("policy.<parameter>"))!;
  assert(
    row.includes("(../actors/policies/README.md#the-built-in-policies)"),
    "the policy.<parameter> row does not point to the policy table",
  );
});
