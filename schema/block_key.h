/*
 * block_key.h — scdb's chained 128-bit block keys and key namespaces (the
 * derivation is described in store.h, "BLOCKS AND KEYS", and in
 * schema/FORMATS.md, "Keys").
 *
 * One source (block_key.c) computes keys for the store, the broker and
 * libscdb: clients hash their own prompts to look them up in the broker's
 * shared-memory lookup index (schema/lookup_index.h), so they must derive
 * exactly the store's keys.  block_key.c compiles xxHash inline
 * (XXH_INLINE_ALL), so libscdb needs no libxxhash at run time.
 */
#ifndef SCDB_BLOCK_KEY_H
#define SCDB_BLOCK_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_common.h"

/* A 128-bit key, canonical (big-endian XXH3) byte order. */
typedef struct scdb_key {
    uint8_t b[16];
} scdb_key;

/* A key namespace: producer codebook id + payload dtype + format version. */
typedef struct scdb_ns {
    uint8_t b[16];
} scdb_ns;

#define SCDB_BLOCK_TOKENS_DEFAULT 64u
#define SCDB_BLOCK_TOKENS_MAX (1u << 20)

/* ns = XXH3-128("scdb.ns1" | u32 id_len | id | u32 dtype | u32 fmt_version).
 * `id` is the producer codebook id: a string or a 128-bit id (id_len 16).
 * Errors: SCDB_EINVAL (NULL out, NULL id with id_len > 0, id_len > 4096). */
scdb_err scdb_ns_make(const void *id, size_t id_len, uint32_t payload_dtype,
                      uint32_t format_version, scdb_ns *out);

/* One block's key: H(parent, ns, tokens[0..n_tokens)); parent NULL = first
 * block (all-zero parent).
 * Errors: SCDB_EINVAL (NULL ns/out, NULL tokens with n_tokens > 0,
 * n_tokens > SCDB_BLOCK_TOKENS_MAX). */
scdb_err scdb_block_key(const scdb_key *parent, const scdb_ns *ns,
                        const int32_t *tokens, size_t n_tokens, scdb_key *out);

/* Keys of the full blocks of tokens[0..n_tokens): writes
 * min(n_tokens / block_tokens, max_keys) keys to keys_out and that count to
 * *n_keys.
 * Errors: SCDB_EINVAL (NULL argument, block_tokens 0 or > max). */
scdb_err scdb_block_key_chain(const scdb_ns *ns, const int32_t *tokens,
                              size_t n_tokens, uint32_t block_tokens,
                              scdb_key *keys_out, size_t max_keys,
                              size_t *n_keys);

/* Keys of n_blocks consecutive full blocks of block_tokens tokens that
 * continue a chain: the first block's parent is `parent` (NULL: it is
 * block 0).  Chunked callers (longest-prefix lookups that stop at the first
 * miss) pass the last key of the previous chunk.
 * Errors: SCDB_EINVAL (NULL ns, NULL tokens or keys_out with n_blocks > 0,
 * block_tokens 0 or > max). */
scdb_err scdb_block_key_continue(const scdb_key *parent, const scdb_ns *ns,
                                 const int32_t *tokens, size_t n_blocks,
                                 uint32_t block_tokens, scdb_key *keys_out);

/* 1 if k is all zero (the parent of a first block), else 0. */
int scdb_key_is_zero(const scdb_key *k);
/* 32 lowercase hex digits + NUL into buf (>= 33 bytes); returns buf. */
char *scdb_key_hex(const scdb_key *k, char *buf);

#endif /* SCDB_BLOCK_KEY_H */
