/**
 * The cached prompt tokens of an upstream's answer (scenarios/wire/cached_tokens.ts):
 * stated in the usage, or derived from llama-server's timings, and written back.
 */
import { assertEquals } from "@std/assert";
import { cachedTokensOf, fillCachedTokens } from "../scenarios/wire/cached_tokens.ts";

Deno.test("cachedTokensOf takes the first rule that applies: stated, cache_n, prompt tokens minus prompt_n", async (t) => {
  const cases: [string, unknown, unknown, number | undefined][] = [
    ["stated in the usage (vLLM, SGLang)", {
      prompt_tokens: 34,
      prompt_tokens_details: { cached_tokens: 16 },
    }, {
      prompt_n: 1,
    }, 16],
    ["stated 0 wins over timings", { prompt_tokens: 34, prompt_tokens_details: { cached_tokens: 0 } }, {
      prompt_n: 1,
    }, 0],
    ["timings.cache_n (recent llama.cpp)", { prompt_tokens: 34 }, { cache_n: 30, prompt_n: 4 }, 30],
    ["cache_n capped at the prompt", { prompt_tokens: 34 }, { cache_n: 40, prompt_n: 4 }, 34],
    ["prompt_tokens − prompt_n (llama.cpp b5000-era)", { prompt_tokens: 34 }, { prompt_n: 1 }, 33],
    ["details null, derived", { prompt_tokens: 61, prompt_tokens_details: null }, { prompt_n: 19 }, 42],
    [
      "details without the count, derived",
      { prompt_tokens: 61, prompt_tokens_details: {} },
      { prompt_n: 19 },
      42,
    ],
    ["nothing cached", { prompt_tokens: 5 }, { prompt_n: 5 }, 0],
    ["never below 0", { prompt_tokens: 5 }, { prompt_n: 9 }, 0],
    ["prompt_n -1: not measured", { prompt_tokens: 34 }, { prompt_n: -1 }, undefined],
    ["no timings", { prompt_tokens: 34 }, undefined, undefined],
    ["no usage", undefined, { prompt_n: 1 }, undefined],
    ["a usage that is not an object", "34", { prompt_n: 1 }, undefined],
    ["a fractional count is no count", { prompt_tokens: 34.5 }, { prompt_n: 1 }, undefined],
    [
      "a stated count that is no count falls through",
      {
        prompt_tokens: 34,
        prompt_tokens_details: { cached_tokens: -3 },
      },
      { prompt_n: 4 },
      30,
    ],
  ];
  for (const [name, usage, timings, expected] of cases) {
    await t.step(name, () => assertEquals(cachedTokensOf(usage, timings), expected));
  }
});

Deno.test("fillCachedTokens writes a derived count into the usage, keeps other details, and leaves a stated one alone", () => {
  const body: Record<string, unknown> = {
    usage: { prompt_tokens: 34, completion_tokens: 3, prompt_tokens_details: { audio_tokens: 0 } },
    timings: { prompt_n: 1 },
  };
  assertEquals(fillCachedTokens(body), 33);
  assertEquals(body.usage, {
    prompt_tokens: 34,
    completion_tokens: 3,
    prompt_tokens_details: { audio_tokens: 0, cached_tokens: 33 },
  });
  const stated = { usage: { prompt_tokens: 34, prompt_tokens_details: { cached_tokens: 8 } } };
  assertEquals(fillCachedTokens(stated, { prompt_n: 1 }), 8);
  assertEquals(stated.usage.prompt_tokens_details, { cached_tokens: 8 });
  const unknown: Record<string, unknown> = { usage: { prompt_tokens: 34 } };
  assertEquals(fillCachedTokens(unknown), undefined);
  assertEquals(unknown.usage, { prompt_tokens: 34 });
  // A stream's timings may come from an earlier chunk.
  const chunk: Record<string, unknown> = { choices: [], usage: { prompt_tokens: 10 } };
  assertEquals(fillCachedTokens(chunk, { prompt_n: 4 }), 6);
  assertEquals(chunk.usage, { prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 6 } });
});
