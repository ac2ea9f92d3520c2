/* raw.c — raw-KV payloads: a block's K and V from a cache, and a put of a
 * whole cache for the "raw/<model>" codebooks. */
#include "libscdb_int.h"

#include <stdlib.h>
#include <string.h>

scdb_err scdb_raw_block(const scdb_kv_cache *c, int slot0, int n_tokens, scdb_dtype dtype,
                        void *dst, size_t cap)
{
    size_t es = scdb_dtype_size(dtype), d, per_layer;
    char *out = dst;

    if (!c || !dst || n_tokens <= 0 || slot0 < 0 || slot0 > c->capacity - n_tokens)
        return SCDB_EINVAL;
    if (dtype != SCDB_F16 && dtype != SCDB_F32) return SCDB_EDTYPE;
    d = (size_t)scdb_kv_dim(c);
    per_layer = (size_t)n_tokens * d * es;
    if (cap < 2 * (size_t)c->n_layers * per_layer) return SCDB_ETOOBIG;
    for (int kv = 0; kv < 2; kv++)
        for (int l = 0; l < c->n_layers; l++) {
            const float *src = kv ? scdb_kv_v(c, l, slot0) : scdb_kv_k(c, l, slot0);
            char *o = out + ((size_t)kv * c->n_layers + l) * per_layer;
            if (dtype == SCDB_F32)
                memcpy(o, src, per_layer);
            else
                scdb_f32_to_f16_n(src, (uint16_t *)(void *)o, (size_t)n_tokens * d);
        }
    return SCDB_OK;
}

scdb_err scdb_put_cache(scdb *h, const int32_t *tokens, size_t n_tokens,
                        const scdb_kv_cache *cache, scdb_put_result *out)
{
    size_t bt, n_blocks, bb;
    char *payload;
    scdb_err e;

    if (!h || !cache || (!tokens && n_tokens)) return SCDB_EINVAL;
    if (!h->registered) return cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    if (strcmp(h->info.codebook_kind, "raw"))
        return cl_fail(h, SCDB_EUNSUPPORTED, "codebook kind %s is not raw KV: encode and put",
                        h->info.codebook_kind);
    if (!cl_same_geometry(h, cache))
        return cl_fail(h, SCDB_ESHAPE, "cache is %dx%dx%d, model is %dx%dx%d",
                        cache->n_layers, cache->n_kv_heads, cache->head_dim, h->info.n_layers,
                        h->info.n_kv_heads, h->info.head_dim);
    bt = h->info.block_tokens;
    bb = h->info.block_bytes;
    n_blocks = n_tokens / bt;
    if ((size_t)cache->n < n_blocks * bt)
        return cl_fail(h, SCDB_ESHAPE, "cache holds %d slots, %zu full blocks need %zu",
                        cache->n, n_blocks, n_blocks * bt);
    payload = malloc(n_blocks ? n_blocks * bb : 1);
    if (!payload) return cl_fail(h, SCDB_ENOMEM, "out of memory");
    for (size_t i = 0; i < n_blocks; i++) {
        e = scdb_raw_block(cache, (int)(i * bt), (int)bt, (scdb_dtype)h->info.payload_dtype,
                           payload + i * bb, bb);
        if (e) {
            free(payload);
            return cl_fail(h, e, "cannot build raw block %zu", i);
        }
    }
    e = scdb_put(h, tokens, n_tokens, 0, payload, n_blocks * bb, out);
    free(payload);
    return e;
}
