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

function fnvByte(h: number, byte: number): number {
  return Math.imul(h ^ byte, FNV_PRIME);
}

/** Folds code point `c`'s UTF-8 bytes (WTF-8 for a lone surrogate) into FNV-1a hash `h`. */
function fnvCodePoint(h: number, c: number): number {
  if (c < 0x80) return fnvByte(h, c);
  if (c < 0x800) return fnvByte(fnvByte(h, 0xc0 | (c >> 6)), 0x80 | (c & 63));
  if (c < 0x10000) {
    return fnvByte(fnvByte(fnvByte(h, 0xe0 | (c >> 12)), 0x80 | ((c >> 6) & 63)), 0x80 | (c & 63));
  }
  h = fnvByte(fnvByte(h, 0xf0 | (c >> 18)), 0x80 | ((c >> 12) & 63));
  return fnvByte(fnvByte(h, 0x80 | ((c >> 6) & 63)), 0x80 | (c & 63));
}

/**
 * Whether UTF-16 code unit `c` is whitespace by JavaScript's `\s` (Unicode
 * White_Space plus U+FEFF): the tokenizer's word separator, tested one code
 * unit at a time instead of by a regular expression's match objects.
 */
function isSpace(c: number): boolean {
  if (c <= 32) return c === 32 || (c >= 9 && c <= 13);
  if (c < 0xa0) return false;
  return c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 ||
    c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
}

/** The end (exclusive) of the word starting at `from` (a non-space): the next whitespace, or the text's end. */
function wordEnd(text: string, from: number): number {
  let i = from + 1;
  while (i < text.length && !isSpace(text.charCodeAt(i))) i++;
  return i;
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
  const known = recentPrompts.get(text);
  if (known !== undefined) return known.slice();
  const tokens = tokenizeText(text);
  if (text.length >= RECENT_PROMPT_MIN_UNITS) {
    if (recentPrompts.size >= RECENT_PROMPTS) recentPrompts.clear();
    recentPrompts.set(text, tokens.slice());
  }
  return tokens;
}

/**
 * The tokens of the prompts tokenized last (at most RECENT_PROMPTS, then it
 * starts again). `serve` tokenizes each prompt twice in one process, in the
 * gateway (to route) and in the instance (to serve): the second is a lookup.
 */
const recentPrompts = new Map<string, readonly number[]>();
const RECENT_PROMPTS = 256;
/** Shorter texts are tokenized again: a lookup would cost about as much. */
const RECENT_PROMPT_MIN_UNITS = 256;

/** {@linkcode tokenize}'s rule, applied. */
function tokenizeText(text: string): number[] {
  // One pass, hashing as it goes: `h` is the current chunk's FNV-1a, `units` its UTF-16 code units.
  const tokens: number[] = [];
  let h = FNV_OFFSET, units = 0;
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c > 32 && c < 0x80) { // the common case: a printable ASCII character, one byte
      if (units === WORD_CHUNK_UNITS) {
        tokens.push(h >>> 0);
        h = FNV_OFFSET, units = 0;
      }
      h = fnvByte(h, c);
      units++;
      continue;
    }
    if (isSpace(c)) {
      if (units > 0) tokens.push(h >>> 0);
      h = FNV_OFFSET, units = 0;
      continue;
    }
    if (units === WORD_CHUNK_UNITS) {
      tokens.push(h >>> 0);
      h = FNV_OFFSET, units = 0;
    }
    // A surrogate pair is one code point only when both halves fall in this chunk.
    if (c >= 0xd800 && c <= 0xdbff && units + 1 < WORD_CHUNK_UNITS && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
        units++;
      }
    }
    h = fnvCodePoint(h, c);
    units++;
  }
  if (units > 0) tokens.push(h >>> 0);
  return tokens;
}

/** How many tokens `tokenize(text)` gives, without hashing. */
export function countTokens(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    if (isSpace(text.charCodeAt(i))) continue;
    const end = wordEnd(text, i);
    n += Math.ceil((end - i) / WORD_CHUNK_UNITS);
    i = end;
  }
  return n;
}

/** Whether `text` has at least one token (`countTokens(text) > 0`): any character that is not whitespace. */
export function hasTokens(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (!isSpace(text.charCodeAt(i))) return true;
  return false;
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
/** The alphabet's character codes, and a word's codes as they are made (one `String.fromCharCode` per word). */
const WORD_CODES = Array.from(WORD_ALPHABET, (c) => c.charCodeAt(0));
const wordCodes = new Array<number>(2 * HALF_WORD).fill(0);

/** Writes `value`'s HALF_WORD base-62 digits, least significant first, into `wordCodes` from `at`. */
function base62(value: number, at: number): void {
  for (let i = 0; i < HALF_WORD; i++) {
    wordCodes[at + i] = WORD_CODES[value % 62];
    value = Math.floor(value / 62);
  }
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
  base62(finish(h) % 916_132_832, 0);
  base62(finish(mixWord(h, 0x27d4eb2f)) % 916_132_832, HALF_WORD);
  const c = wordCodes;
  return String.fromCharCode(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]);
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
  const parts: string[] = [];
  for (const run of promptRuns(request, nonce, freshShared)) {
    parts.push(run.shared ? sharedWords(run) : words(run));
  }
  return parts.join(" ");
}

/** One stretch of a prompt whose tokens come from one key: tokens [from, to). */
interface PromptRun {
  readonly key: number;
  readonly from: number;
  readonly to: number;
  /** The key is shared with other requests (a block's, a group's), not the request's own. */
  readonly shared: boolean;
}

/** The words of `run`, joined by spaces. */
function words(run: PromptRun): string {
  const out = new Array<string>(run.to - run.from);
  for (let t = run.from; t < run.to; t++) out[t - run.from] = tokenWord(run.key, t);
  return out.join(" ");
}

/** Shared runs' text, by key and range: requests that share a prefix share its text, written once. */
const sharedText = new Map<string, string>();
/** Entries {@linkcode sharedText} holds at most (then it starts again): ≈ 10 MB of 64-token runs. */
const SHARED_TEXT_MAX = 16_384;

function sharedWords(run: PromptRun): string {
  const id = `${run.key}:${run.from}:${run.to}`;
  let text = sharedText.get(id);
  if (text === undefined) {
    if (sharedText.size >= SHARED_TEXT_MAX) sharedText.clear();
    text = words(run);
    sharedText.set(id, text);
  }
  return text;
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
  const tokens = new Array<T>(request.prefixTokens + request.suffixTokens);
  for (const { key, from, to } of promptRuns(request, nonce, freshShared)) {
    for (let t = from; t < to; t++) tokens[t] = token(key, t);
  }
  return tokens;
}

/**
 * The prompt's tokens as runs of one key each, in order and covering every
 * token once: each keyed block, then the rest of a shared prefix (the
 * group's key), then the request's own tokens.
 */
function promptRuns(request: Request, nonce: number, freshShared: boolean): PromptRun[] {
  const total = request.prefixTokens + request.suffixTokens;
  const keys = request.prefixKeys;
  const keyTokens = request.keyTokens ?? 1;
  const covered = keys !== undefined && request.keyTokens !== undefined ? keys.length * keyTokens : 0;
  const runs: PromptRun[] = [];
  const add = (key: number, from: number, to: number, shared: boolean) => {
    if (to > from) runs.push({ key, from, to, shared });
  };
  for (let b = 0; b * keyTokens < Math.min(covered, total); b++) {
    const key = freshShared ? derivedKey(SHARED_TAG, keys![b], nonce) : keys![b];
    add(key, b * keyTokens, Math.min(total, (b + 1) * keyTokens), true);
  }
  let at = Math.min(covered, total);
  if (request.prefixGroup >= 0) {
    const groupKey = freshShared
      ? derivedKey(GROUP_TAG, request.prefixGroup, nonce)
      : derivedKey(GROUP_TAG, request.prefixGroup);
    const to = Math.max(at, Math.min(total, request.prefixTokens));
    add(groupKey, at, to, true);
    at = to;
  }
  add(derivedKey(UNIQUE_TAG, nonce, request.id), at, total, false);
  return runs;
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
