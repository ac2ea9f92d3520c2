/* hot_tier.c — the host-RAM memory tier: each slot is one malloc'd payload
 * copy.  Capacity and eviction are the store's business (store.h "TIERS AND
 * CAPACITY"); this file only allocates and copies, so a GPU tier is the same
 * five functions over cudaMalloc/cudaMemcpy. */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

static scdb_err host_alloc(scdb_tier *t, size_t len, void **slot)
{
    (void)t;
    *slot = malloc(len ? len : 1);
    return *slot ? SCDB_OK : SCDB_ENOMEM;
}

static scdb_err host_write(scdb_tier *t, void *slot, size_t off,
                           const void *src, size_t len)
{
    (void)t;
    if (len) memcpy((char *)slot + off, src, len);
    return SCDB_OK;
}

static scdb_err host_read(scdb_tier *t, const void *slot, size_t off,
                          void *dst, size_t len)
{
    (void)t;
    if (len) memcpy(dst, (const char *)slot + off, len);
    return SCDB_OK;
}

static void *host_addr(scdb_tier *t, void *slot)
{
    (void)t;
    return slot;
}

static void host_free(scdb_tier *t, void *slot)
{
    (void)t;
    free(slot);
}

static void host_destroy(scdb_tier *t)
{
    free(t);
}

static const scdb_tier_ops host_ops = {
    .name = "host",
    .alloc = host_alloc,
    .write = host_write,
    .read = host_read,
    .addr = host_addr,
    .free = host_free,
    .destroy = host_destroy,
};

scdb_err scdb_tier_host_new(uint64_t capacity_bytes, scdb_tier **out)
{
    scdb_tier *t;
    if (!out) return SCDB_EINVAL;
    if (!(t = calloc(1, sizeof *t))) return SCDB_ENOMEM;
    t->ops = &host_ops;
    t->capacity_bytes = capacity_bytes;
    *out = t;
    return SCDB_OK;
}

void scdb_tier_free(scdb_tier **t)
{
    if (!t || !*t) return;
    (*t)->ops->destroy(*t);
    *t = NULL;
}
