/* arena.c — shared-memory arenas: sealed memfds in a client's arena list
 * (KV caches, CUDA IPC KV caches, producer states, live-session
 * statistics), their headers (schema/wire.h), references and release.
 * Main thread only; a job that uses an arena holds a reference.  Knows
 * nothing of sessions: clients.c closes an arena's session before it
 * removes the arena. */
/* memfd_create, file seals */
#define _GNU_SOURCE
#include "broker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bk_arena *bk_arena_find(bk_client *c, uint64_t id)
{
    for (bk_arena *a = c->arenas; a; a = a->next)
        if (a->id == id) return a;
    return NULL;
}

void bk_arena_unlink(scdb_broker *b, bk_arena *a)
{
    if (!a->linked) return;
    bk_fd_remove(b, a->ticket);     /* only the two mappings keep it now */
    a->linked = 0;
}

void bk_arena_unref(scdb_broker *b, bk_arena *a)
{
    if (--a->refs > 0) return;
    bk_arena_unlink(b, a);
    scdb_kv_cache_free(&a->cache);
    if (a->map) munmap(a->map, a->size);
    if (a->dev) scdb_k_ops_get(SCDB_DEV_CUDA)->release(a->dev);
    if (a->dev_scratch) scdb_k_ops_get(SCDB_DEV_CUDA)->release(a->dev_scratch);
    b->n_arenas--;
    b->arena_bytes -= a->size + a->dev_bytes;
    free(a);
}

void bk_arena_remove(scdb_broker *b, bk_client *c, bk_arena *a)
{
    bk_arena **pp = &c->arenas;

    while (*pp && *pp != a) pp = &(*pp)->next;
    if (!*pp) return;
    *pp = a->next;
    c->n_arenas--;
    c->arena_bytes -= a->size + a->dev_bytes;
    bk_arena_unlink(b, a);
    bk_arena_unref(b, a);
}

scdb_err bk_shm_create(scdb_broker *b, bk_client *c, size_t size, bk_arena_kind kind,
                       bk_arena **out, char *errbuf, size_t errlen)
{
    bk_arena *a = NULL;
    int fd = -1, rc;
    scdb_err e;

    if (c->n_arenas >= b->cfg.max_arenas_per_client) {
        snprintf(errbuf, errlen, "client holds %u arenas (max_arenas_per_client)", c->n_arenas);
        return SCDB_EFULL;
    }
    if (b->cfg.max_arena_bytes && size > b->cfg.max_arena_bytes) {
        snprintf(errbuf, errlen, "arena of %zu bytes exceeds max_arena_bytes %llu", size,
                 (unsigned long long)b->cfg.max_arena_bytes);
        return SCDB_ETOOBIG;
    }
    if (b->cfg.max_client_arena_bytes && c->arena_bytes + size > b->cfg.max_client_arena_bytes) {
        snprintf(errbuf, errlen, "client's arenas are full (%llu of max_client_arena_bytes %llu "
                 "in use)", (unsigned long long)c->arena_bytes,
                 (unsigned long long)b->cfg.max_client_arena_bytes);
        return SCDB_EFULL;
    }
    if (b->cfg.arena_total_bytes && b->arena_bytes + size > b->cfg.arena_total_bytes) {
        snprintf(errbuf, errlen, "arena memory full (%llu of arena_total_bytes %llu in use)",
                 (unsigned long long)b->arena_bytes,
                 (unsigned long long)b->cfg.arena_total_bytes);
        return SCDB_EFULL;
    }
    a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(errbuf, errlen, "out of memory");
        return SCDB_ENOMEM;
    }
    /* an anonymous memory file, sealed against shrinking: a client can
     * write the arena but never truncate it under the broker (SIGBUS) */
    fd = memfd_create("scdb-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) goto sys;
    /* reserve the pages now: no memory left is an error reply here rather
     * than a SIGBUS in a worker later */
    rc = posix_fallocate(fd, 0, (off_t)size);
    if (rc) {
        errno = rc;
        if (rc == ENOSPC) {
            snprintf(errbuf, errlen, "no memory left for an arena of %zu bytes", size);
            e = SCDB_EFULL;
            goto fail;
        }
        goto sys;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) goto sys;
    /* MAP_POPULATE: the broker's page tables too, here at creation, so
     * that no get or eviction takes a page fault per page it writes */
    a->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (a->map == MAP_FAILED) {
        a->map = NULL;
        goto sys;
    }
    /* the owner fetches it by ticket over the fd socket until it confirms
     * its mapping (ArenaMapped) */
    if ((e = bk_fd_add(b, fd, a->ticket))) {
        snprintf(errbuf, errlen, "cannot register the arena: %s", scdb_strerror(e));
        munmap(a->map, size);
        goto fail;
    }
    fd = -1;
    a->linked = 1;
    a->size = size;
    a->kind = kind;
    a->id = ++b->next_arena_id;
    a->refs = 1;
    a->next = c->arenas;
    c->arenas = a;
    c->n_arenas++;
    c->arena_bytes += size;
    b->n_arenas++;
    b->arena_bytes += size;
    *out = a;
    return SCDB_OK;
sys:
    snprintf(errbuf, errlen, "cannot create an arena of %zu bytes: %s", size, strerror(errno));
    scdb_error("%s", errbuf);
    e = SCDB_ESYS;
fail:
    if (fd >= 0) close(fd);
    free(a);
    return e;
}

/* The arena header every kind starts with (schema/wire.h): for KV kinds the
 * model's geometry, for states (n_kv_heads 1, head_dim d_model). */
static void fill_header(bk_arena *a, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                        uint32_t capacity, uint32_t kind, uint64_t cache_offset,
                        uint64_t cache_bytes)
{
    a->hdr = a->map;
    memcpy(a->hdr->magic, SCDB_ARENA_MAGIC, 8);
    a->hdr->version = SCDB_ARENA_VERSION;
    a->hdr->header_bytes = SCDB_ARENA_HEADER_BYTES;
    a->hdr->arena_id = a->id;
    a->hdr->n_layers = n_layers;
    a->hdr->n_kv_heads = n_kv_heads;
    a->hdr->head_dim = head_dim;
    a->hdr->capacity = capacity;
    a->hdr->dtype = SCDB_F32;
    a->hdr->kind = kind;
    a->hdr->cache_offset = cache_offset;
    a->hdr->cache_bytes = cache_bytes;
    a->capacity = capacity;
}

static void fill_kv_header(bk_arena *a, const scdb_broker_model *m, uint32_t capacity,
                           uint32_t kind, uint64_t cache_offset, uint64_t cache_bytes)
{
    fill_header(a, (uint32_t)m->n_layers, (uint32_t)m->n_kv_heads, (uint32_t)m->head_dim,
                capacity, kind, cache_offset, cache_bytes);
}

scdb_err bk_arena_create(scdb_broker *b, bk_client *c, uint32_t capacity, bk_arena **out,
                         char *errbuf, size_t errlen)
{
    const scdb_broker_model *m = c->model;
    bk_arena *a;
    size_t cache_bytes;
    scdb_err e;

    if (capacity == 0) capacity = (uint32_t)m->max_seq_len;
    if (capacity > (1u << 26)) {
        snprintf(errbuf, errlen, "arena capacity %u slots is too large", capacity);
        return SCDB_ETOOBIG;
    }
    cache_bytes = scdb_kv_cache_bytes(m->n_layers, m->n_kv_heads, m->head_dim, (int)capacity);
    e = bk_shm_create(b, c, SCDB_ARENA_HEADER_BYTES + cache_bytes, BK_ARENA_KV, &a, errbuf,
                      errlen);
    if (e) return e;
    fill_kv_header(a, m, capacity, SCDB_ARENA_KIND_KV, SCDB_ARENA_HEADER_BYTES, cache_bytes);
    e = scdb_kv_cache_view((char *)a->map + SCDB_ARENA_HEADER_BYTES, cache_bytes, m->n_layers,
                           m->n_kv_heads, m->head_dim, (int)capacity, &a->cache);
    if (e) {
        snprintf(errbuf, errlen, "cannot lay a KV cache over the arena: %s", scdb_strerror(e));
        bk_arena_remove(b, c, a);
        return e;
    }
    *out = a;
    return SCDB_OK;
}

scdb_err bk_cuda_arena_create(scdb_broker *b, bk_client *c, uint32_t capacity, bk_arena **out,
                              char *errbuf, size_t errlen)
{
    const scdb_broker_model *m = c->model;
    const scdb_k_ops *ops = scdb_k_ops_get(SCDB_DEV_CUDA);
    bk_arena *a;
    size_t cache_bytes;
    scdb_err e;

    if (b->device != SCDB_DEV_CUDA) {
        snprintf(errbuf, errlen, "CUDA IPC arenas need a broker on a CUDA device; this one "
                 "decodes on the CPU (device = %s%s)", scdb_device_pref_name(b->cfg.device),
                 scdb_k_cuda_device_count() > 0 ? "" : "; no CUDA device answers here");
        return SCDB_EUNSUPPORTED;
    }
    if (!c->pair || !c->pair->dec.decode_dev) {
        snprintf(errbuf, errlen, "the %s decoder into model %s cannot write device memory",
                 c->pair ? c->pair->dec.name : "(no)", m->name);
        return SCDB_EUNSUPPORTED;
    }
    if (capacity == 0) capacity = (uint32_t)m->max_seq_len;
    if (capacity > (1u << 26)) {
        snprintf(errbuf, errlen, "arena capacity %u slots is too large", capacity);
        return SCDB_ETOOBIG;
    }
    cache_bytes = scdb_kv_cache_bytes(m->n_layers, m->n_kv_heads, m->head_dim, (int)capacity);
    if (b->cfg.max_arena_bytes && SCDB_ARENA_HEADER_BYTES + cache_bytes > b->cfg.max_arena_bytes) {
        snprintf(errbuf, errlen, "arena of %zu bytes exceeds max_arena_bytes %llu",
                 SCDB_ARENA_HEADER_BYTES + cache_bytes,
                 (unsigned long long)b->cfg.max_arena_bytes);
        return SCDB_ETOOBIG;
    }
    if (b->cfg.max_client_arena_bytes &&
        c->arena_bytes + SCDB_ARENA_HEADER_BYTES + cache_bytes > b->cfg.max_client_arena_bytes) {
        snprintf(errbuf, errlen, "client's arenas are full (%llu of max_client_arena_bytes %llu "
                 "in use)", (unsigned long long)c->arena_bytes,
                 (unsigned long long)b->cfg.max_client_arena_bytes);
        return SCDB_EFULL;
    }
    if (b->cfg.arena_total_bytes &&
        b->arena_bytes + SCDB_ARENA_HEADER_BYTES + cache_bytes > b->cfg.arena_total_bytes) {
        snprintf(errbuf, errlen, "arena memory full (%llu of arena_total_bytes %llu in use)",
                 (unsigned long long)b->arena_bytes,
                 (unsigned long long)b->cfg.arena_total_bytes);
        return SCDB_EFULL;
    }
    e = bk_shm_create(b, c, SCDB_ARENA_HEADER_BYTES, BK_ARENA_KV, &a, errbuf, errlen);
    if (e) return e;
    e = ops->alloc(cache_bytes, &a->dev);
    if (e) {
        snprintf(errbuf, errlen, "cannot allocate %zu bytes of CUDA device memory: %s",
                 cache_bytes, scdb_strerror(e));
        a->dev = NULL;
        goto fail;
    }
    a->dev_bytes = cache_bytes;
    c->arena_bytes += cache_bytes;
    b->arena_bytes += cache_bytes;
    if ((e = ops->zero(a->dev, cache_bytes)) || (e = ops->sync()) ||
        (e = scdb_k_cuda_ipc_handle(a->dev, a->ipc_handle))) {
        snprintf(errbuf, errlen, "cannot export the arena's device memory: %s", scdb_strerror(e));
        goto fail;
    }
    if (scdb_k_cuda_pci_bus_id(b->cuda_ordinal, a->pci_bus_id, sizeof a->pci_bus_id))
        a->pci_bus_id[0] = 0;         /* the client falls back to the ordinal */
    fill_kv_header(a, m, capacity, SCDB_ARENA_KIND_KV_CUDA, 0, cache_bytes);
    e = scdb_kv_cache_view(a->dev, cache_bytes, m->n_layers, m->n_kv_heads, m->head_dim,
                           (int)capacity, &a->cache);
    if (e) {
        snprintf(errbuf, errlen, "cannot lay a KV cache over the device memory: %s",
                 scdb_strerror(e));
        goto fail;
    }
    *out = a;
    return SCDB_OK;
fail:
    bk_arena_remove(b, c, a);        /* frees the device memory too */
    return e;
}

scdb_err bk_cuda_stats_create(scdb_broker *b, bk_client *c, const scdb_evict_acc_shape *shape,
                              scdb_evict_acc *hdr_out, bk_arena **out, char *errbuf,
                              size_t errlen)
{
    const scdb_k_ops *ops = scdb_k_ops_get(SCDB_DEV_CUDA);
    size_t bytes = scdb_evict_acc_bytes(shape), scratch;
    scdb_evict_acc *hdr = NULL;
    bk_arena *a;
    scdb_err e;

    if (b->device != SCDB_DEV_CUDA) {
        snprintf(errbuf, errlen, "device statistics need a broker on a CUDA device");
        return SCDB_EUNSUPPORTED;
    }
    if (!bytes) {
        snprintf(errbuf, errlen, "no accumulator shape for %d layers x %d heads x %d slots",
                 shape->n_layers, shape->n_heads, shape->capacity);
        return SCDB_ESHAPE;
    }
    scratch = scdb_evict_dev_scratch_bytes(shape->capacity);
    if (c->n_arenas >= b->cfg.max_arenas_per_client) {
        snprintf(errbuf, errlen, "client holds %u arenas (max_arenas_per_client; a session "
                 "takes one for its statistics)", c->n_arenas);
        return SCDB_EFULL;
    }
    if (b->cfg.max_arena_bytes && bytes + scratch > b->cfg.max_arena_bytes) {
        snprintf(errbuf, errlen, "session statistics of %zu bytes exceed max_arena_bytes %llu",
                 bytes + scratch, (unsigned long long)b->cfg.max_arena_bytes);
        return SCDB_ETOOBIG;
    }
    if (b->cfg.max_client_arena_bytes &&
        c->arena_bytes + bytes + scratch > b->cfg.max_client_arena_bytes) {
        snprintf(errbuf, errlen, "client's arenas are full (%llu of max_client_arena_bytes %llu "
                 "in use)", (unsigned long long)c->arena_bytes,
                 (unsigned long long)b->cfg.max_client_arena_bytes);
        return SCDB_EFULL;
    }
    if (b->cfg.arena_total_bytes && b->arena_bytes + bytes + scratch > b->cfg.arena_total_bytes) {
        snprintf(errbuf, errlen, "arena memory full (%llu of arena_total_bytes %llu in use)",
                 (unsigned long long)b->arena_bytes,
                 (unsigned long long)b->cfg.arena_total_bytes);
        return SCDB_EFULL;
    }
    if (!(a = calloc(1, sizeof *a))) {
        snprintf(errbuf, errlen, "out of memory");
        return SCDB_ENOMEM;
    }
    a->kind = BK_ARENA_SESSION;
    a->id = ++b->next_arena_id;
    a->refs = 1;
    a->next = c->arenas;
    c->arenas = a;
    c->n_arenas++;
    b->n_arenas++;
    if ((e = ops->alloc(bytes, &a->dev)) || (e = ops->alloc(scratch, &a->dev_scratch))) {
        snprintf(errbuf, errlen, "cannot allocate %zu bytes of CUDA device memory: %s",
                 bytes + scratch, scdb_strerror(e));
        goto fail;
    }
    a->dev_bytes = bytes + scratch;
    c->arena_bytes += a->dev_bytes;
    b->arena_bytes += a->dev_bytes;
    /* zeroed arrays under the header the client attaches to and the broker
     * checks at every eviction (the same bytes scdb_evict_acc_init lays) */
    if ((e = scdb_evict_acc_new(shape, &hdr))) {
        snprintf(errbuf, errlen, "cannot lay out the accumulators: %s", scdb_strerror(e));
        goto fail;
    }
    if ((e = ops->zero(a->dev, bytes)) || (e = ops->upload(a->dev, hdr, sizeof *hdr)) ||
        (e = ops->sync()) || (e = scdb_k_cuda_ipc_handle(a->dev, a->ipc_handle))) {
        snprintf(errbuf, errlen, "cannot export the session's device memory: %s",
                 scdb_strerror(e));
        goto fail;
    }
    if (scdb_k_cuda_pci_bus_id(b->cuda_ordinal, a->pci_bus_id, sizeof a->pci_bus_id))
        a->pci_bus_id[0] = 0;
    *hdr_out = *hdr;
    scdb_evict_acc_free(&hdr);
    *out = a;
    return SCDB_OK;
fail:
    scdb_evict_acc_free(&hdr);
    bk_arena_remove(b, c, a);        /* frees the device memory too */
    return e;
}

scdb_err bk_states_arena_create(scdb_broker *b, bk_client *c, uint32_t capacity,
                                bk_arena **out, char *errbuf, size_t errlen)
{
    const scdb_broker_codebook *cb = c->cb;
    bk_arena *a;
    uint64_t bytes;
    scdb_err e;

    if (capacity == 0) capacity = (uint32_t)c->model->max_seq_len;
    bytes = 4ull * (uint64_t)cb->states_layers * capacity * (uint64_t)cb->states_dim;
    if (capacity > (1u << 26) || bytes > (1ull << 40)) {
        snprintf(errbuf, errlen, "states arena of %u tokens is too large", capacity);
        return SCDB_ETOOBIG;
    }
    e = bk_shm_create(b, c, SCDB_ARENA_HEADER_BYTES + (size_t)bytes, BK_ARENA_STATES, &a,
                      errbuf, errlen);
    if (e) return e;
    fill_header(a, (uint32_t)cb->states_layers, 1, (uint32_t)cb->states_dim, capacity,
                SCDB_ARENA_KIND_STATES, SCDB_ARENA_HEADER_BYTES, bytes);
    /* NaN until the producer writes a row: a row read but never written (a
     * wrong layout, a stale arena) is refused, never encoded */
    bk_states_poison((float *)((char *)a->map + SCDB_ARENA_HEADER_BYTES), (size_t)(bytes / 4));
    *out = a;
    return SCDB_OK;
}

void bk_states_poison(float *x, size_t n)
{
    const uint32_t qnan = 0x7fc00000u;
    for (size_t i = 0; i < n; i++) memcpy(&x[i], &qnan, sizeof qnan);
}
