import { assert, assertEquals, assertNotEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import type { Request } from "../actors/protocol.ts";
import {
  blockKeys,
  countTokens,
  outputWord,
  promptRequest,
  promptText,
  renderChat,
  tokenize,
  tokenWord,
} from "../scenarios/wire/tokenizer.ts";

/** Reference FNV-1a 32-bit over bytes. */
function fnv(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h >>> 0;
}

/** UTF-8 by code point; a lone surrogate (a pair cut in two) gets its 3-byte WTF-8 form. */
function wtf8(text: string): Uint8Array {
  const bytes: number[] = [];
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    if (c < 0x80) bytes.push(c);
    else if (c < 0x800) bytes.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) bytes.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else bytes.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return new Uint8Array(bytes);
}

/** Reference tokenizer written from the rule. */
function referenceTokenize(text: string): number[] {
  const out: number[] = [];
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    for (let i = 0; i < word.length; i += 12) out.push(fnv(wtf8(word.slice(i, i + 12))));
  }
  return out;
}

Deno.test("tokenize hashes each word with FNV-1a 32-bit of its UTF-8 bytes", () => {
  assertEquals(tokenize("a"), [0xe40c292c]);
  assertEquals(tokenize("foobar"), [0xbf9cf968]);
  assertEquals(tokenize("é"), [fnv(new TextEncoder().encode("é"))]);
  assertEquals(tokenize("😀"), [fnv(new Uint8Array([0xf0, 0x9f, 0x98, 0x80]))]);
});

Deno.test("tokenize splits at Unicode whitespace and makes no token of it", async (t) => {
  const rows: [string, string, number][] = [
    ["runs of ASCII whitespace", " a  b\t\nc \r\n", 3],
    ["no-break space", "a\u00a0b", 2],
    ["ideographic space", "語\u3000語", 2],
    ["line separator", "a\u2028b", 2],
    ["only whitespace", " \t\n\u00a0 ", 0],
    ["empty", "", 0],
    ["accents and CJK stay in the word", "héllo wörld 日本語", 3],
  ];
  for (const [name, text, count] of rows) {
    await t.step(name, () => {
      assertEquals(tokenize(text).length, count);
      assertEquals(countTokens(text), count);
    });
  }
  assertEquals(tokenize(" a  b\t\nc "), tokenize("a b c"));
});

Deno.test("tokenize separates words at exactly JavaScript's \\s, every UTF-16 code unit checked", () => {
  for (let c = 0; c < 0x10000; c++) {
    const text = `ab${String.fromCharCode(c)}cd`;
    const words = /\s/.test(String.fromCharCode(c)) ? 2 : 1;
    if (tokenize(text).length !== words || countTokens(text) !== words) {
      throw new Error(
        `U+${c.toString(16).padStart(4, "0")}: expected ${words} tokens, got ${tokenize(text).length}`,
      );
    }
  }
  // Between two words a lone surrogate is a word character, as a pair is.
  assertEquals(tokenize("a\ud800 b"), referenceTokenize("a\ud800 b"));
});

Deno.test("tokenize cuts words longer than 12 code units into 12-unit chunks", () => {
  assertEquals(tokenize("a".repeat(12)).length, 1);
  assertEquals(tokenize("a".repeat(13)).length, 2);
  assertEquals(tokenize("a".repeat(30)).length, 3);
  assertEquals(tokenize("abcdefghijklABC"), [...tokenize("abcdefghijkl"), ...tokenize("ABC")]);
  // A surrogate pair cut at the boundary: two tokens, each lone half hashed as its WTF-8 bytes.
  const split = tokenize("a".repeat(11) + "😀");
  assertEquals(split.length, 2);
  assertEquals(split[1], fnv(new Uint8Array([0xed, 0xb8, 0x80]))); // U+DE00
  assertNotEquals(split[0], split[1]);
});

Deno.test("tokenize agrees with a reference implementation on random well-formed text", () => {
  const text = fc.array(
    fc.oneof(fc.string({ unit: "grapheme", maxLength: 20 }), fc.constantFrom(" ", "\n", "\t", "\u3000")),
    { maxLength: 30 },
  ).map((parts) => parts.join(""));
  fc.assert(fc.property(text, (s) => {
    assertEquals(tokenize(s), referenceTokenize(s));
    assertEquals(countTokens(s), tokenize(s).length);
  }));
});

Deno.test("blockKeys gives one key per full block, each in [0, 2^31 - 1)", () => {
  assertEquals(blockKeys([1, 2, 3], 4), []);
  assertEquals(blockKeys([1, 2, 3, 4, 5], 4).length, 1);
  assertThrows(() => blockKeys([1], 0), RangeError, "blockTokens");
  fc.assert(fc.property(
    fc.array(fc.integer({ min: 0, max: 0xffffffff }), { maxLength: 200 }),
    fc.integer({ min: 1, max: 16 }),
    (tokens, b) => {
      const keys = blockKeys(tokens, b);
      assertEquals(keys.length, Math.floor(tokens.length / b));
      for (const key of keys) assert(Number.isInteger(key) && key >= 0 && key < 2 ** 31 - 1, `key ${key}`);
    },
  ));
});

Deno.test("blockKeys: key i agrees exactly when the first (i+1) blocks agree", () => {
  fc.assert(fc.property(
    fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 60 }),
    fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 40 }),
    fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 40 }),
    fc.integer({ min: 1, max: 8 }),
    (common, tailA, tailB, b) => {
      const a = [...common, ...tailA], c = [...common, ...tailB];
      let shared = 0;
      while (shared < Math.min(a.length, c.length) && a[shared] === c[shared]) shared++;
      const ka = blockKeys(a, b), kc = blockKeys(c, b);
      for (let i = 0; i < Math.min(ka.length, kc.length); i++) {
        assertEquals(ka[i] === kc[i], (i + 1) * b <= shared, `block ${i} of ${b}, shared ${shared}`);
      }
    },
  ));
});

Deno.test("promptRequest keys every full block and names the prefix group by content", async (t) => {
  const tokens = Array.from({ length: 100 }, (_, i) => i * 7919);
  const keys = blockKeys(tokens, 16);
  await t.step("prefix rounded down to whole blocks", () => {
    const r = promptRequest(5, 12.5, tokens, 30, { blockTokens: 16, prefixTokens: 40 });
    assertEquals(r, {
      id: 5,
      arrivalMs: 12.5,
      prefixGroup: keys[1],
      prefixTokens: 32,
      suffixTokens: 68,
      outputTokens: 30,
      prefixKeys: keys,
      keyTokens: 16,
    });
  });
  await t.step("prefix capped at the full blocks", () => {
    const r = promptRequest(0, 0, tokens, 1, { blockTokens: 16, prefixTokens: 1000 });
    assertEquals([r.prefixGroup, r.prefixTokens, r.suffixTokens], [keys[5], 96, 4]);
  });
  await t.step(
    "under one block of prefix: the first block is the group, and every full block is keyed",
    () => {
      for (const prefixTokens of [0, 15]) {
        const r = promptRequest(1, 2, tokens, 3, { blockTokens: 16, prefixTokens });
        const keys = blockKeys(tokens, 16);
        assertEquals(r, {
          id: 1,
          arrivalMs: 2,
          prefixGroup: keys[0],
          prefixTokens: 16,
          suffixTokens: 84,
          outputTokens: 3,
          prefixKeys: keys,
          keyTokens: 16,
        });
      }
    },
  );
  await t.step("prompt shorter than a block: no group, no keys", () => {
    const r = promptRequest(1, 2, tokens.slice(0, 10), 3, { blockTokens: 16, prefixTokens: 64 });
    assertEquals([r.prefixGroup, r.prefixTokens, r.suffixTokens, r.prefixKeys], [-1, 0, 10, undefined]);
  });
  await t.step("same prefix content, same group; different content, different group", () => {
    const other = [...tokens.slice(0, 32), ...tokens.slice(32).map((x) => x + 1)];
    const a = promptRequest(0, 0, tokens, 1, { blockTokens: 16, prefixTokens: 32 });
    const b = promptRequest(1, 0, other, 1, { blockTokens: 16, prefixTokens: 32 });
    const c = promptRequest(2, 0, [9, ...tokens.slice(1)], 1, { blockTokens: 16, prefixTokens: 32 });
    assertEquals(a.prefixGroup, b.prefixGroup);
    assertNotEquals(a.prefixGroup, c.prefixGroup);
  });
});

Deno.test("renderChat renders each message as <|role|>, its content, then the assistant's turn", () => {
  assertEquals(renderChat([]), "<|assistant|>\n");
  assertEquals(
    renderChat([{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }]),
    "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n",
  );
  assertEquals(
    renderChat([{
      role: "user",
      content: [{ type: "text", text: "one" }, { type: "image_url" }, { type: "text", text: "two" }],
    }, { role: "assistant", content: null }]),
    "<|user|>\none\ntwo\n<|assistant|>\n\n<|assistant|>\n",
  );
  // Messages sharing a history share the rendered prefix, so their tokens share a prefix too.
  const history = [{ role: "user", content: "tell me a story" }];
  const a = tokenize(renderChat([...history, { role: "assistant", content: "once" }]));
  const b = tokenize(renderChat(history));
  assertEquals(a.slice(0, b.length - 1), b.slice(0, b.length - 1));
});

Deno.test("tokenWord is one whitespace-free token, deterministic and distinct per (key, position)", () => {
  const seen = new Set<string>();
  for (let key = 0; key < 100; key++) {
    for (let position = 0; position < 200; position++) {
      const word = tokenWord(key * 1_000_003, position);
      assert(word.length <= 12 && !/\s/.test(word), word);
      assertEquals(tokenize(word).length, 1);
      seen.add(word);
    }
  }
  assertEquals(seen.size, 20_000);
  assertEquals(tokenWord(7, 3), tokenWord(7, 3));
  assertNotEquals(tokenWord(2 ** 40, 0), tokenWord(0, 0));
});

Deno.test("outputWord is a space and one token, cycling through a fixed list", () => {
  for (let i = 0; i < 30; i++) {
    assert(outputWord(i).startsWith(" "));
    assertEquals(tokenize(outputWord(i)).length, 1);
  }
  assertEquals(outputWord(0), outputWord(12));
  assertNotEquals(outputWord(0), outputWord(1));
});

/** Who token t of `r` is in the model (what `promptText` must reproduce). */
function modelToken(r: Request, t: number): string {
  if (r.prefixKeys !== undefined && r.keyTokens !== undefined && t < r.prefixKeys.length * r.keyTokens) {
    return `k${r.prefixKeys[Math.floor(t / r.keyTokens)]}`;
  }
  if (r.prefixGroup >= 0 && t < r.prefixTokens) return `g${r.prefixGroup}@${t}`;
  return `u${r.id}@${t}`;
}

function sharedTokens(a: Request, b: Request): number {
  const n = Math.min(a.prefixTokens + a.suffixTokens, b.prefixTokens + b.suffixTokens);
  let t = 0;
  while (t < n && modelToken(a, t) === modelToken(b, t)) t++;
  return t;
}

/** A request of one of the three kinds: a shared group, a unique prefix, explicit chained keys. */
function requestArbitrary(blockTokens: number, groupTokens: readonly number[]) {
  const group = fc.record({
    group: fc.integer({ min: 0, max: groupTokens.length - 1 }),
    suffix: fc.integer({ min: 0, max: 40 }),
  }).map(({ group, suffix }) => ({
    prefixGroup: group,
    prefixTokens: groupTokens[group],
    suffixTokens: suffix,
  }));
  const unique = fc.record({
    prefix: fc.integer({ min: 0, max: 60 }),
    suffix: fc.integer({ min: 0, max: 40 }),
  })
    .map(({ prefix, suffix }) => ({ prefixGroup: -1, prefixTokens: prefix, suffixTokens: suffix }));
  const keyed = fc.record({
    per: fc.integer({ min: 1, max: 3 }),
    path: fc.array(fc.integer({ min: 0, max: 1 }), { minLength: 1, maxLength: 6 }),
    extra: fc.integer({ min: 0, max: 30 }),
  }).map(({ per, path, extra }) => {
    const keyTokens = per * blockTokens;
    // Key i names the whole path up to i (a trie node), as chained keys must.
    const prefixKeys = path.map((_, i) => parseInt("1" + path.slice(0, i + 1).join(""), 2));
    const prompt = (path.length - 1) * keyTokens + 1 + extra;
    return { prefixGroup: prefixKeys[0], prefixTokens: prompt, suffixTokens: 0, prefixKeys, keyTokens };
  });
  return fc.oneof(group, unique, keyed);
}

Deno.test("promptText round-trips: keys of the tokenized text agree exactly where the requests share a prefix", () => {
  const scenario = fc.integer({ min: 0, max: 2 }).chain((b) => {
    const blockTokens = [4, 8, 16][b];
    return fc.record({
      blockTokens: fc.constant(blockTokens),
      nonce: fc.integer({ min: 0, max: 1000 }),
      requests: fc.array(requestArbitrary(blockTokens, [8, 20, 33]), { minLength: 2, maxLength: 6 }),
    });
  });
  fc.assert(
    fc.property(scenario, ({ blockTokens, nonce, requests }) => {
      const originals: Request[] = requests.map((r, id) => ({ id, arrivalMs: 0, outputTokens: 1, ...r }));
      const copies = originals.map((r) => {
        const tokens = tokenize(promptText(r, nonce));
        assertEquals(tokens.length, r.prefixTokens + r.suffixTokens);
        return promptRequest(r.id, 0, tokens, 1, { blockTokens, prefixTokens: Number.MAX_SAFE_INTEGER });
      });
      for (let i = 0; i < originals.length; i++) {
        for (let j = i + 1; j < originals.length; j++) {
          const shared = sharedTokens(originals[i], originals[j]);
          const a = copies[i].prefixKeys ?? [], b = copies[j].prefixKeys ?? [];
          for (let k = 0; k < Math.min(a.length, b.length); k++) {
            assertEquals(a[k] === b[k], (k + 1) * blockTokens <= shared, `requests ${i},${j} block ${k}`);
          }
        }
      }
    }),
    { numRuns: 200 },
  );
});

Deno.test("promptText: a different nonce changes a request's own tokens, not its shared ones", () => {
  const r: Request = {
    id: 3,
    arrivalMs: 0,
    prefixGroup: 2,
    prefixTokens: 8,
    suffixTokens: 4,
    outputTokens: 1,
  };
  const a = tokenize(promptText(r, 1)), b = tokenize(promptText(r, 2));
  assertEquals(a.slice(0, 8), b.slice(0, 8));
  for (let t = 8; t < 12; t++) assertNotEquals(a[t], b[t]);
});
