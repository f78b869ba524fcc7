/**
 * @module
 * The deterministic stand-in for a tokenizer that turns prompts arriving over
 * HTTP into tokens, the tokens into KV block keys, and those into the
 * simulator's {@linkcode Request}; and, the other way, a request's sharing
 * structure into prompt text (the load generator's prompts).
 *
 * The rule:
 * - **Words.** `tokenize(text)` splits the text at whitespace (JavaScript's
 *   `\s`: Unicode White_Space plus U+FEFF); every maximal run of other
 *   characters is a word. A word of at most {@linkcode WORD_CHUNK_UNITS} (12)
 *   UTF-16 code units is one token; a longer one is cut into chunks of 12 code
 *   units (the last may be shorter), each one token. Whitespace makes no token.
 * - **Token ids.** A token's id is the FNV-1a 32-bit hash of its chunk's UTF-8
 *   bytes, unsigned (0..2^32−1). A chunk boundary that splits a surrogate pair
 *   leaves a lone surrogate, encoded as its 3-byte (WTF-8) form.
 * - **Token-id prompts.** A prompt given as token ids is used as it is.
 * - **Block keys.** `blockKeys(tokens, B)` gives one key per FULL block of B
 *   tokens: key_i = mix(key_{i−1}, the block's tokens), key_{−1} a fixed seed,
 *   each an integer in [0, 2^31−1). Equal key i ⇔ equal first (i+1)·B tokens
 *   (up to hash collisions), exactly vLLM's chained block hashes.
 * - **Requests.** `promptRequest` keys every full block (`prefixKeys`, which
 *   the batching model caches, as vLLM does) and, for the FIFO model, names
 *   the first P tokens (the scenario's `workload.prefix.tokens`, rounded down
 *   to whole blocks, at least one) as one cacheable group keyed by their content.
 * - **Chat.** `renderChat` renders messages as `<|{role}|>\n{content}\n` each,
 *   then `<|assistant|>\n`; content given as parts joins the text parts with "\n".
 */
import type { Request } from "../../actors/protocol.ts";

/** Longest word, in UTF-16 code units, that is one token; longer words are cut into chunks this long. */
export const WORD_CHUNK_UNITS = 12;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
/** Keys are reduced modulo this (2^31 − 1), so they lie in [0, 2^31−1). */
const KEY_MODULUS = 0x7fffffff;
/** key_{−1} of every chain. */
const CHAIN_SEED = 0x5eed_b10c;
const WORDS = /\S+/g;

function fnvByte(h: number, byte: number): number {
  return Math.imul(h ^ byte, FNV_PRIME);
}

/** FNV-1a 32-bit of the UTF-8 (WTF-8 for lone surrogates) bytes of `text[from, to)`. */
function fnv1a(text: string, from: number, to: number): number {
  let h = FNV_OFFSET;
  for (let i = from; i < to; i++) {
    let c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < to) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c < 0x80) {
      h = fnvByte(h, c);
    } else if (c < 0x800) {
      h = fnvByte(fnvByte(h, 0xc0 | (c >> 6)), 0x80 | (c & 63));
    } else if (c < 0x10000) {
      h = fnvByte(fnvByte(fnvByte(h, 0xe0 | (c >> 12)), 0x80 | ((c >> 6) & 63)), 0x80 | (c & 63));
    } else {
      h = fnvByte(fnvByte(h, 0xf0 | (c >> 18)), 0x80 | ((c >> 12) & 63));
      h = fnvByte(fnvByte(h, 0x80 | ((c >> 6) & 63)), 0x80 | (c & 63));
    }
  }
  return h >>> 0;
}

/**
 * The token ids of `text` by the module's rule: words split at whitespace,
 * words over 12 UTF-16 code units cut into 12-unit chunks, each chunk's id the
 * FNV-1a 32-bit hash of its UTF-8 bytes.
 *
 * @example
 * ```ts
 * tokenize("  hello   world\n").length; // 2
 * tokenize("a".repeat(30)).length; // 3 (12 + 12 + 6 code units)
 * ```
 */
export function tokenize(text: string): number[] {
  const tokens: number[] = [];
  for (const match of text.matchAll(WORDS)) {
    const start = match.index;
    const end = start + match[0].length;
    for (let from = start; from < end; from += WORD_CHUNK_UNITS) {
      tokens.push(fnv1a(text, from, Math.min(end, from + WORD_CHUNK_UNITS)));
    }
  }
  return tokens;
}

/** How many tokens `tokenize(text)` gives, without hashing. */
export function countTokens(text: string): number {
  let n = 0;
  for (const match of text.matchAll(WORDS)) n += Math.ceil(match[0].length / WORD_CHUNK_UNITS);
  return n;
}

/** MurmurHash3's step: folds a 32-bit word into the running hash. */
function mixWord(h: number, word: number): number {
  let k = Math.imul(word, 0xcc9e2d51);
  k = (k << 15) | (k >>> 17);
  h ^= Math.imul(k, 0x1b873593);
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/** MurmurHash3's finaliser: a 32-bit avalanche. */
function finish(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * One key per FULL block of `blockTokens` tokens, chained: key i identifies
 * the first (i+1)·blockTokens tokens, so two prompts' keys agree exactly up
 * to the last full block they share (up to hash collisions). Keys are
 * integers in [0, 2^31−1). A partial last block gets no key.
 *
 * @throws {RangeError} when `blockTokens` is not a positive integer.
 */
export function blockKeys(tokens: readonly number[], blockTokens: number): number[] {
  if (!Number.isInteger(blockTokens) || blockTokens < 1) {
    throw new RangeError(`blockTokens: expected an integer >= 1, got ${blockTokens}`);
  }
  const count = Math.floor(tokens.length / blockTokens);
  const keys = new Array<number>(count);
  let key = CHAIN_SEED;
  for (let b = 0; b < count; b++) {
    let h = key;
    const end = (b + 1) * blockTokens;
    for (let t = b * blockTokens; t < end; t++) h = mixWord(h, tokens[t]);
    key = finish(h ^ blockTokens) % KEY_MODULUS;
    keys[b] = key;
  }
  return keys;
}

/** How `promptRequest` turns tokens into a request: the block size and the FIFO model's cacheable prefix. */
export interface PromptRequestOptions {
  /** Tokens per KV block (`instances.engine.blockTokens`). */
  readonly blockTokens: number;
  /**
   * Leading tokens cached as one unit by the group (FIFO) model, from the
   * scenario's `workload.prefix.tokens`; rounded down to whole blocks.
   */
  readonly prefixTokens: number;
}

/**
 * The simulator's request for a prompt of `tokens`: every full block keyed
 * (`prefixKeys`, `keyTokens` = the block size) and the first
 * `options.prefixTokens` tokens (rounded down to whole blocks, at least one,
 * capped at the full blocks) named as the prefix group, keyed by their
 * content. A prompt shorter than one block: no group (−1), no prefix, no keys.
 */
export function promptRequest(
  id: number,
  arrivalMs: number,
  tokens: readonly number[],
  outputTokens: number,
  options: PromptRequestOptions,
): Request {
  const { blockTokens } = options;
  const keys = blockKeys(tokens, blockTokens);
  const fullTokens = keys.length * blockTokens;
  // At least one block: every prompt of a full block or more is cached (as vLLM's), whatever P.
  const wanted = Math.max(1, Math.floor(options.prefixTokens / blockTokens)) * blockTokens;
  const g = Math.min(wanted, fullTokens);
  if (g < blockTokens) {
    return { id, arrivalMs, prefixGroup: -1, prefixTokens: 0, suffixTokens: tokens.length, outputTokens };
  }
  return {
    id,
    arrivalMs,
    prefixGroup: keys[g / blockTokens - 1],
    prefixTokens: g,
    suffixTokens: tokens.length - g,
    outputTokens,
    prefixKeys: keys,
    keyTokens: blockTokens,
  };
}

/** One part of a chat message's content given as an array. */
export interface ChatContentPart {
  /** Part type; only `"text"` parts reach the template. */
  readonly type: string;
  /** The text of a `"text"` part. */
  readonly text?: string;
}

/** A chat message as the template reads it. */
export interface ChatMessage {
  /** `system`, `user`, `assistant`, `tool`, … (written as is). */
  readonly role: string;
  /** The content: a string, text parts, or null/absent (an assistant's tool call) for empty. */
  readonly content?: string | readonly ChatContentPart[] | null;
}

/**
 * The chat template: `<|{role}|>\n{content}\n` for each message, then
 * `<|assistant|>\n`. Content given as parts joins its `text` parts with "\n"
 * (other parts are skipped here; the OpenAI surface rejects them first).
 *
 * @example
 * ```ts
 * renderChat([{ role: "user", content: "Hi" }]); // "<|user|>\nHi\n<|assistant|>\n"
 * ```
 */
export function renderChat(messages: readonly ChatMessage[]): string {
  let text = "";
  for (const message of messages) {
    const content = message.content;
    const body = typeof content === "string"
      ? content
      : (content ?? []).filter((part) => part.type === "text").map((part) => part.text ?? "").join("\n");
    text += `<|${message.role}|>\n${body}\n`;
  }
  return text + "<|assistant|>\n";
}

const WORD_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/** Characters per half of a token word: 62^5 ≈ 2^29.8 values each, ≈ 59.5 bits per word. */
const HALF_WORD = 5;

function base62(value: number, digits: number): string {
  let s = "";
  for (let i = 0; i < digits; i++) {
    s += WORD_ALPHABET[value % 62];
    value = Math.floor(value / 62);
  }
  return s;
}

/** Folds a safe integer (or any finite number) into the hash as two 32-bit words. */
function mixNumber(h: number, value: number): number {
  const low = value % 0x1_0000_0000;
  const high = Math.floor(value / 0x1_0000_0000);
  return mixWord(mixWord(h, low | 0), high | 0);
}

/**
 * A word that tokenizes to exactly one token (10 letters and digits, no
 * whitespace): deterministic in `(key, position)`, and distinct pairs give
 * distinct words with overwhelming probability (≈ 59.5 bits).
 */
export function tokenWord(key: number, position: number): string {
  const h = mixNumber(mixNumber(0x3c6ef372, key), position);
  const a = finish(h);
  const b = finish(mixWord(h, 0x27d4eb2f));
  return base62(a % 916_132_832, HALF_WORD) + base62(b % 916_132_832, HALF_WORD);
}

/** A 53-bit key from a tag and integers, for the words of a group's or a request's own tokens. */
function derivedKey(tag: number, ...values: readonly number[]): number {
  let h = mixWord(0x1b873593, tag);
  for (const value of values) h = mixNumber(h, value);
  const high = finish(h) & 0x1fffff;
  const low = finish(mixWord(h, 0x6a09e667));
  return high * 0x1_0000_0000 + low;
}

const GROUP_TAG = 1;
const UNIQUE_TAG = 2;
const SHARED_TAG = 3;

/**
 * Prompt text whose tokenization reproduces `request`'s sharing structure:
 * token t (0 ≤ t < prefixTokens + suffixTokens) is `tokenWord(k, t)`, with k
 * = prefixKeys[⌊t / keyTokens⌋] where the keys cover t; else, inside a shared
 * prefix (prefixGroup ≥ 0, t < prefixTokens), a key derived from the group;
 * else a key derived from `(nonce, request.id)`, unique to this request. Two
 * requests share their first n tokens of text iff they share them in the model.
 *
 * @param nonce distinguishes one load run's unique tokens from another's (so a
 *   second run against the same servers does not hit the first run's cache).
 */
export function promptText(request: Request, nonce: number, freshShared = false): string {
  return promptTokens(request, nonce, tokenWord, freshShared).join(" ");
}

/**
 * The lowest token id {@linkcode promptTokenIds} uses: above every special
 * and byte token of the common vocabularies (Llama's SPM puts its 256 byte
 * tokens at 3–258).
 */
export const FIRST_PROMPT_ID = 1000;
/** One past the highest id it uses: 32,000, the smallest vocabulary in common use (Llama 2's). */
export const PROMPT_ID_LIMIT = 32_000;

/**
 * The same prompt as {@linkcode promptText}, as token ids for an engine's own
 * tokenizer: token t is an id in [1000, 32000) derived from the same key and
 * position, so a real engine (vLLM, SGLang, llama.cpp's server all take a
 * completion `prompt` as a list of ids) sees exactly the simulated number of
 * tokens and the simulated sharing. Different keys give different ids at a
 * position with probability 1 − 1/31,000, so two prompts that differ in the
 * model differ within a few tokens.
 */
export function promptTokenIds(request: Request, nonce: number, freshShared = false): number[] {
  return promptTokens(request, nonce, tokenId, freshShared);
}

/** A token id in [FIRST_PROMPT_ID, PROMPT_ID_LIMIT), deterministic in `(key, position)`. */
export function tokenId(key: number, position: number): number {
  const h = finish(mixNumber(mixNumber(0x3c6ef372, key), position));
  return FIRST_PROMPT_ID + h % (PROMPT_ID_LIMIT - FIRST_PROMPT_ID);
}

/**
 * The prompt's tokens, each `token(key, position)` of the key covering it
 * (see {@linkcode promptText}); with `freshShared`, the shared keys (a
 * group's, a trace's) are mixed with the nonce too, so that another nonce's
 * run finds none of this one's prefixes cached (a cold start).
 */
function promptTokens<T>(
  request: Request,
  nonce: number,
  token: (key: number, position: number) => T,
  freshShared: boolean,
): T[] {
  const total = request.prefixTokens + request.suffixTokens;
  const keys = request.prefixKeys;
  const keyTokens = request.keyTokens ?? 1;
  const covered = keys !== undefined && request.keyTokens !== undefined ? keys.length * keyTokens : 0;
  const groupKey = request.prefixGroup < 0
    ? -1
    : freshShared
    ? derivedKey(GROUP_TAG, request.prefixGroup, nonce)
    : derivedKey(GROUP_TAG, request.prefixGroup);
  const uniqueKey = derivedKey(UNIQUE_TAG, nonce, request.id);
  const tokens = new Array<T>(total);
  for (let t = 0; t < total; t++) {
    const key = t < covered
      ? (freshShared
        ? derivedKey(SHARED_TAG, keys![Math.floor(t / keyTokens)], nonce)
        : keys![Math.floor(t / keyTokens)])
      : groupKey >= 0 && t < request.prefixTokens
      ? groupKey
      : uniqueKey;
    tokens[t] = token(key, t);
  }
  return tokens;
}

const OUTPUT_WORDS = [
  "the",
  "quick",
  "brown",
  "fox",
  "jumps",
  "over",
  "a",
  "lazy",
  "dog",
  "and",
  "then",
  "rests",
] as const;

/**
 * The text of generated token `index` (0-based): a space and a word, cycling
 * through a fixed list of twelve words.
 */
export function outputWord(index: number): string {
  return " " + OUTPUT_WORDS[index % OUTPUT_WORDS.length];
}
