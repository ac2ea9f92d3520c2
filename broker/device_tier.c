/* device_tier.c — a store memory tier (store.h, "memory tiers") in a
 * device's memory through a kernels.h ops table: the GPU hot tier
 * (gpu_hot_capacity) on the CUDA table.  As the host tier, it only
 * allocates and copies; the store does the capacity accounting, LRU and
 * pinning.  On the CPU table it is a host tier by another road, which is
 * how tests check it without a GPU. */
#include "broker_int.h"

#include <stdlib.h>

static const scdb_k_ops *tier_ops(scdb_tier *t) { return t->impl; }

static scdb_err dev_alloc(scdb_tier *t, size_t len, void **slot)
{
    scdb_err e = tier_ops(t)->alloc(len ? len : 1, slot);
    /* the store reads SCDB_ENOMEM as "no room"; a device says SCDB_EDEVICE */
    return e == SCDB_EDEVICE ? SCDB_ENOMEM : e;
}

static scdb_err dev_write(scdb_tier *t, void *slot, size_t off, const void *src, size_t len)
{
    return len ? tier_ops(t)->upload((char *)slot + off, src, len) : SCDB_OK;
}

static scdb_err dev_read(scdb_tier *t, const void *slot, size_t off, void *dst, size_t len)
{
    return len ? tier_ops(t)->download(dst, (const char *)slot + off, len) : SCDB_OK;
}

static void *dev_addr(scdb_tier *t, void *slot)
{
    (void)t;
    return slot;
}

static void dev_free(scdb_tier *t, void *slot) { tier_ops(t)->release(slot); }

static void dev_destroy(scdb_tier *t) { free(t); }

static const scdb_tier_ops cuda_tier_ops = {
    .name = SCDB_TIER_CUDA, .alloc = dev_alloc, .write = dev_write, .read = dev_read,
    .addr = dev_addr, .free = dev_free, .destroy = dev_destroy,
};
static const scdb_tier_ops cpu_tier_ops = {
    .name = SCDB_TIER_DEVICE_CPU, .alloc = dev_alloc, .write = dev_write, .read = dev_read,
    .addr = dev_addr, .free = dev_free, .destroy = dev_destroy,
};

scdb_err scdb_tier_device_new(scdb_device dev, uint64_t capacity_bytes, scdb_tier **out)
{
    const scdb_k_ops *ops = scdb_k_ops_get(dev);
    scdb_tier *t;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!ops) return SCDB_EINVAL;
    if (dev == SCDB_DEV_CUDA && scdb_k_cuda_device_count() <= 0) {
#ifdef SCDB_HAVE_CUDA
        return SCDB_EDEVICE;
#else
        return SCDB_EUNSUPPORTED;
#endif
    }
    if (!(t = calloc(1, sizeof *t))) return SCDB_ENOMEM;
    t->ops = dev == SCDB_DEV_CUDA ? &cuda_tier_ops : &cpu_tier_ops;
    t->capacity_bytes = capacity_bytes;
    t->impl = (void *)ops;
    *out = t;
    return SCDB_OK;
}
