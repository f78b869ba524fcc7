/**
 * @module
 * The Mooncake trace format's one constant, shared by the trace reader (which
 * reads the format) and the trace generator (which writes it).
 */

/** Tokens each Mooncake `hash_ids` entry covers. */
export const MOONCAKE_BLOCK_TOKENS = 512;
