/* broker_kv.h — deterministic prefixes for the broker tests: the tokens of
 * prefix `seed` and the KV a producer would have computed for them, so a
 * consumer process can check what it got bit for bit. */
#ifndef SCDB_TESTS_BROKER_KV_H
#define SCDB_TESTS_BROKER_KV_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

static inline uint32_t bkv_hash(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Token i of prefix seed (bytes, like the byte tokenizer). */
static inline int32_t bkv_token(uint32_t seed, size_t i)
{
    return (int32_t)(bkv_hash(seed * 2654435761u + (uint32_t)i) & 0xff);
}

static inline void bkv_tokens(uint32_t seed, int32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++) t[i] = bkv_token(seed, i);
}

/* The value of K (kv = 0) or V (kv = 1) at (layer, token, dim): depends on
 * the tokens up to and including `token`, like real KV, through the seed. */
static inline float bkv_value(uint32_t seed, int kv, int layer, int token, int dim)
{
    uint32_t h = bkv_hash(seed ^ bkv_hash((uint32_t)(kv * 7919 + layer * 104729) ^
                                          bkv_hash((uint32_t)token * 31u + (uint32_t)dim)));
    return ((float)(h & 0xffff) - 32768.0f) / 4096.0f;
}

/* Fill slots [0, n) of c as the producer of prefix seed would. */
static inline void bkv_fill(uint32_t seed, scdb_kv_cache *c, int n)
{
    int d = scdb_kv_dim(c);
    for (int l = 0; l < c->n_layers; l++)
        for (int t = 0; t < n; t++)
            for (int j = 0; j < d; j++) {
                scdb_kv_k(c, l, t)[j] = bkv_value(seed, 0, l, t, j);
                scdb_kv_v(c, l, t)[j] = bkv_value(seed, 1, l, t, j);
            }
    for (int t = 0; t < n; t++) c->pos[t] = t;
    if (c->n < n) c->n = n;
}

/* Check slots [slot0, slot0 + n) of c against prefix seed's tokens
 * [tok0, tok0 + n) at positions pos0 + i, after the payload's dtype
 * (F16 rounds).  Returns the index of the first bad element + 1, 0 if all
 * are identical. */
static inline long bkv_check(uint32_t seed, const scdb_kv_cache *c, int slot0, int tok0, int n,
                             int32_t pos0, int f16)
{
    int d = scdb_kv_dim(c);
    long idx = 0;
    for (int t = 0; t < n; t++) {
        if (c->pos[slot0 + t] != pos0 + t) return idx + 1;
        for (int l = 0; l < c->n_layers; l++)
            for (int j = 0; j < d; j++)
                for (int kv = 0; kv < 2; kv++) {
                    float want = bkv_value(seed, kv, l, tok0 + t, j);
                    float got = kv ? scdb_kv_v(c, l, slot0 + t)[j] : scdb_kv_k(c, l, slot0 + t)[j];
                    if (f16) want = scdb_f16_to_f32(scdb_f32_to_f16(want));
                    idx++;
                    if (memcmp(&want, &got, sizeof want)) return idx;
                }
    }
    return 0;
}

#endif /* SCDB_TESTS_BROKER_KV_H */
