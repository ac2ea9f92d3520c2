/* kv_cache.c — the slot-indexed KV cache (layout in kernels.h). */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t scdb_kv_cache_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity)
{
    size_t kv = (size_t)n_layers * capacity * n_kv_heads * head_dim * sizeof(float);
    return align64((size_t)capacity * sizeof(int32_t)) + 2 * align64(kv);
}

static scdb_err layout(scdb_kv_cache *c, void *mem, int n_layers, int n_kv_heads,
                       int head_dim, int capacity)
{
    size_t kv = (size_t)n_layers * capacity * n_kv_heads * head_dim * sizeof(float);
    char *p = mem;
    c->n_layers = n_layers;
    c->n_kv_heads = n_kv_heads;
    c->head_dim = head_dim;
    c->capacity = capacity;
    c->n = 0;
    c->mem = mem;
    c->pos = (int32_t *)p;
    p += align64((size_t)capacity * sizeof(int32_t));
    c->k = (float *)p;
    p += align64(kv);
    c->v = (float *)p;
    return SCDB_OK;
}

static int bad_dims(int n_layers, int n_kv_heads, int head_dim, int capacity)
{
    return n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || capacity <= 0 ||
           n_layers > 4096 || n_kv_heads > 4096 || head_dim > 65536 ||
           capacity > (1 << 26);
}

scdb_err scdb_kv_cache_new(int n_layers, int n_kv_heads, int head_dim,
                           int capacity, scdb_kv_cache **out)
{
    scdb_kv_cache *c;
    void *mem;
    size_t bytes;

    *out = NULL;
    if (bad_dims(n_layers, n_kv_heads, head_dim, capacity)) return SCDB_EINVAL;
    bytes = scdb_kv_cache_bytes(n_layers, n_kv_heads, head_dim, capacity);
    c = calloc(1, sizeof *c);
    if (!c) return SCDB_ENOMEM;
    if (posix_memalign(&mem, 64, bytes) != 0) { free(c); return SCDB_ENOMEM; }
    memset(mem, 0, bytes);
    layout(c, mem, n_layers, n_kv_heads, head_dim, capacity);
    c->owns_mem = 1;
    *out = c;
    return SCDB_OK;
}

scdb_err scdb_kv_cache_view(void *mem, size_t len, int n_layers, int n_kv_heads,
                            int head_dim, int capacity, scdb_kv_cache **out)
{
    scdb_kv_cache *c;

    *out = NULL;
    if (!mem || ((uintptr_t)mem & 63) || bad_dims(n_layers, n_kv_heads, head_dim, capacity) ||
        len < scdb_kv_cache_bytes(n_layers, n_kv_heads, head_dim, capacity))
        return SCDB_EINVAL;
    c = calloc(1, sizeof *c);
    if (!c) return SCDB_ENOMEM;
    layout(c, mem, n_layers, n_kv_heads, head_dim, capacity);
    *out = c;
    return SCDB_OK;
}

void scdb_kv_cache_free(scdb_kv_cache **c)
{
    if (!c || !*c) return;
    if ((*c)->owns_mem) free((*c)->mem);
    free(*c);
    *c = NULL;
}

scdb_err scdb_kv_cache_compact(scdb_kv_cache *c, const int *keep, int n_keep)
{
    size_t d;

    if (!c || n_keep < 0 || n_keep > c->n || (n_keep > 0 && !keep)) return SCDB_EINVAL;
    for (int i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= c->n || (i > 0 && keep[i] <= keep[i - 1]))
            return SCDB_EINVAL;
    d = (size_t)scdb_kv_dim(c);
    /* keep[i] >= i, so a forward in-place gather never overwrites a slot it
     * has yet to read */
    for (int i = 0; i < n_keep; i++) {
        int s = keep[i];
        if (s == i) continue;
        c->pos[i] = c->pos[s];
        for (int l = 0; l < c->n_layers; l++) {
            memcpy(scdb_kv_k(c, l, i), scdb_kv_k(c, l, s), d * sizeof(float));
            memcpy(scdb_kv_v(c, l, i), scdb_kv_v(c, l, s), d * sizeof(float));
        }
    }
    c->n = n_keep;
    return SCDB_OK;
}
