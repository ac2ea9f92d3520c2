/*
 * kv_cache.h — the slot-indexed KV cache: the one layout the reference
 * model, the broker's arenas and every decoded prefix use, and the only
 * part of kernels/ a client needs (installed with scdb.h; libscdb exports
 * these functions).
 *
 * One layout is used everywhere (the reference model, broker arenas, decoded
 * prefixes), so decoded KV lands where attention reads it, with no copy:
 *
 *   pos  int32 [capacity]                  absolute position of each slot
 *   K    f32   [n_layers][capacity][kv_dim] after RoPE at pos[slot]
 *   V    f32   [n_layers][capacity][kv_dim]
 *                                    kv_dim = n_kv_heads * head_dim
 *
 *   slot:   0    1    2    3   ...  n-1 | n ... capacity-1
 *   pos:    0    1    2    7   ...  511 | (free)
 *
 * Slots [0, n) are live.  A query at absolute position p attends to every
 * live slot whose pos <= p (causal by position, not by slot), so a cache that
 * was compacted by eviction — slots gathered in order, original positions
 * kept — is attended exactly like the full one minus the evicted tokens.
 * The buffer can be caller-provided memory (shared memory arenas): see
 * scdb_kv_cache_bytes() and scdb_kv_cache_view().
 */
#ifndef SCDB_KV_CACHE_H
#define SCDB_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct scdb_kv_cache {
    int n_layers, n_kv_heads, head_dim, capacity;
    int n;              /* live slots [0, n) */
    int32_t *pos;       /* [capacity] */
    float *k;           /* [n_layers][capacity][kv_dim] */
    float *v;           /* [n_layers][capacity][kv_dim] */
    void *mem;          /* the one buffer holding pos, k, v */
    int owns_mem;
} scdb_kv_cache;

/* Bytes of one cache buffer (pos, then K, then V; 64-byte aligned parts). */
size_t scdb_kv_cache_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity);
/* Allocate a zeroed cache.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_kv_cache_new(int n_layers, int n_kv_heads, int head_dim,
                           int capacity, scdb_kv_cache **out);
/* Lay a cache over caller memory of at least scdb_kv_cache_bytes() bytes
 * (64-byte aligned); n starts at 0.  SCDB_EINVAL. */
scdb_err scdb_kv_cache_view(void *mem, size_t len, int n_layers, int n_kv_heads,
                            int head_dim, int capacity, scdb_kv_cache **out);
void scdb_kv_cache_free(scdb_kv_cache **c);
static inline int scdb_kv_dim(const scdb_kv_cache *c) { return c->n_kv_heads * c->head_dim; }
static inline float *scdb_kv_k(const scdb_kv_cache *c, int layer, int slot)
{
    return c->k + ((size_t)layer * c->capacity + slot) * (size_t)scdb_kv_dim(c);
}
static inline float *scdb_kv_v(const scdb_kv_cache *c, int layer, int slot)
{
    return c->v + ((size_t)layer * c->capacity + slot) * (size_t)scdb_kv_dim(c);
}
/* Keep only slots keep[0..n_keep) (strictly increasing), gathered in order
 * into [0, n_keep) of every layer; positions travel with their slots.
 * SCDB_EINVAL (not increasing / out of range). */
scdb_err scdb_kv_cache_compact(scdb_kv_cache *c, const int *keep, int n_keep);

#ifdef __cplusplus
}
#endif

#endif /* SCDB_KV_CACHE_H */
