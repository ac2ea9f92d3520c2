/* arena.c — shared-memory arenas (map, confirm, free), get into an arena
 * (zero copy) or into the caller's cache (copy). */
#include "libscdb_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tell the broker about an arena (mapped: it may unlink; free: drop it). */
static scdb_err arena_notify(scdb *h, uint64_t id, int free_it)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__ArenaMapped m = SCDB__ARENA_MAPPED__INIT;
    Scdb__ArenaFree f = SCDB__ARENA_FREE__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e;

    if (free_it) {
        f.arena = id;
        req.body_case = SCDB__REQUEST__BODY_ARENA_FREE;
        req.arena_free = &f;
    } else {
        m.arena = id;
        req.body_case = SCDB__REQUEST__BODY_ARENA_MAPPED;
        req.arena_mapped = &m;
    }
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

static scdb_err arena_map(scdb *h, const Scdb__ArenaCreateReply *ar, scdb_arena **out)
{
    char what[48];
    scdb_arena *a = calloc(1, sizeof *a);
    const scdb_arena_header *hd;
    struct stat st;
    int fd = -1;
    scdb_err e;

    if (!a) {
        e = cl_fail(h, SCDB_ENOMEM, "out of memory");
        goto fail;
    }
    snprintf(what, sizeof what, "arena %llu", (unsigned long long)ar->arena);
    if ((e = cl_fetch_fd(h, &ar->fd_ticket, what, &fd))) goto fail;
    if (fstat(fd, &st) || (uint64_t)st.st_size < ar->size || ar->size < SCDB_ARENA_HEADER_BYTES) {
        e = cl_fail(h, SCDB_EPROTO, "%s is smaller than announced", what);
        goto fail;
    }
    a->map = mmap(NULL, ar->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->map == MAP_FAILED) {
        a->map = NULL;
        e = cl_fail(h, SCDB_ESYS, "cannot map %s: %s", what, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    a->size = ar->size;
    a->hdr = a->map;
    hd = a->hdr;
    if (ar->kind == SCDB__ARENA_KIND__ARENA_STATES) {
        if (memcmp(hd->magic, SCDB_ARENA_MAGIC, 8) || hd->version != SCDB_ARENA_VERSION ||
            hd->arena_id != ar->arena || hd->kind != SCDB_ARENA_KIND_STATES ||
            hd->cache_offset != ar->cache_offset || hd->cache_offset % 64 ||
            hd->cache_offset + hd->cache_bytes > ar->size || !ar->states_dim ||
            (int)hd->n_layers != h->info.states_layers ||
            (int)hd->head_dim != h->info.states_dim || hd->capacity != ar->capacity ||
            hd->cache_bytes != 4ull * hd->n_layers * hd->capacity * hd->head_dim) {
            e = cl_fail(h, SCDB_EPROTO, "states %s has an unexpected header", what);
            goto fail;
        }
        a->states = (float *)((char *)a->map + hd->cache_offset);
        a->states_layers = (int)hd->n_layers;
        a->states_dim = (int)hd->head_dim;
        goto mapped;
    }
    if (ar->cuda) {
        /* CUDA IPC: the header here, the cache in the broker's device memory */
        if (memcmp(hd->magic, SCDB_ARENA_MAGIC, 8) || hd->version != SCDB_ARENA_VERSION ||
            hd->arena_id != ar->arena || hd->kind != SCDB_ARENA_KIND_KV_CUDA ||
            hd->cache_offset != 0 || ar->cache_offset != 0 ||
            hd->cache_bytes != ar->cache_bytes || hd->capacity != ar->capacity ||
            (int)hd->n_layers != h->info.n_layers || (int)hd->n_kv_heads != h->info.n_kv_heads ||
            (int)hd->head_dim != h->info.head_dim || hd->dtype != SCDB_F32 ||
            hd->cache_bytes != scdb_kv_cache_bytes(h->info.n_layers, h->info.n_kv_heads,
                                                   h->info.head_dim, (int)hd->capacity)) {
            e = cl_fail(h, SCDB_EPROTO, "CUDA %s has an unexpected header", what);
            goto fail;
        }
        e = cl_cuda_open(h, ar->cuda_ipc_handle.data, ar->cuda_ipc_handle.len, ar->cuda_device,
                          ar->cuda_pci_bus_id, &a->dev, &a->cuda_device);
        if (e) goto fail;
        e = scdb_kv_cache_view(a->dev, hd->cache_bytes, h->info.n_layers, h->info.n_kv_heads,
                               h->info.head_dim, (int)hd->capacity, &a->cache);
        if (e) {
            cl_fail(h, e, "cannot view the arena's device memory as a cache");
            goto fail;
        }
        a->cache->n = 0;
        goto mapped;
    }
    if (memcmp(hd->magic, SCDB_ARENA_MAGIC, 8) || hd->version != SCDB_ARENA_VERSION ||
        hd->arena_id != ar->arena || hd->cache_offset != ar->cache_offset ||
        hd->cache_offset % 64 || hd->cache_offset + hd->cache_bytes > ar->size ||
        (int)hd->n_layers != h->info.n_layers || (int)hd->n_kv_heads != h->info.n_kv_heads ||
        (int)hd->head_dim != h->info.head_dim || hd->capacity != ar->capacity ||
        hd->dtype != SCDB_F32 ||
        hd->cache_bytes != scdb_kv_cache_bytes(h->info.n_layers, h->info.n_kv_heads,
                                               h->info.head_dim, (int)hd->capacity)) {
        e = cl_fail(h, SCDB_EPROTO, "%s has an unexpected header", what);
        goto fail;
    }
    e = scdb_kv_cache_view((char *)a->map + hd->cache_offset, hd->cache_bytes, h->info.n_layers,
                           h->info.n_kv_heads, h->info.head_dim, (int)hd->capacity, &a->cache);
    if (e) {
        cl_fail(h, e, "cannot view the arena's cache");
        goto fail;
    }
    a->cache->n = 0;
mapped:
    a->capacity = ar->capacity;
    a->id = ar->arena;
    a->h = h;
    a->gen = h->gen;
    a->next = h->arenas;
    h->arenas = a;
    e = arena_notify(h, a->id, 0);        /* the broker unlinks the name now */
    if (e) {
        scdb_arena_free(&a);
        return e;
    }
    *out = a;
    return SCDB_OK;
fail:
    if (fd >= 0) close(fd);
    if (a && a->dev) cl_cuda_close(a->dev, a->cuda_device);
    if (a) scdb_kv_cache_free(&a->cache);
    if (a && a->map) munmap(a->map, ar->size);
    free(a);
    {   /* best effort: let it go, keeping this failure's message */
        char why[sizeof h->err];
        memcpy(why, h->err, sizeof why);
        arena_notify(h, ar->arena, 1);
        memcpy(h->err, why, sizeof why);
    }
    return e;
}

/* Ask the broker for an arena of `kind` (cuda: device memory) and map it. */
static scdb_err arena_request(scdb *h, int capacity, Scdb__ArenaKind kind, int cuda,
                              scdb_arena **out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__ArenaCreate ac = SCDB__ARENA_CREATE__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e;

    if (!h || !out) return SCDB_EINVAL;
    *out = NULL;
    if (!h->registered) return cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    if (capacity < 0) return cl_fail(h, SCDB_EINVAL, "negative arena capacity");
    if (kind == SCDB__ARENA_KIND__ARENA_STATES && !h->info.states_dim)
        return cl_fail(h, SCDB_EUNSUPPORTED, "the broker does not encode codebook %s for "
                        "this client (producers of an scd codebook only): put payloads",
                        h->codebook[0] ? h->codebook : "raw");
    ac.capacity = (uint32_t)capacity;
    ac.kind = kind;
    ac.cuda = cuda;
    req.body_case = SCDB__REQUEST__BODY_ARENA_CREATE;
    req.arena_create = &ac;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (!e && (rep->body_case != SCDB__REPLY__BODY_ARENA ||
               rep->arena->kind != kind || (cuda && !rep->arena->cuda)))
        e = cl_fail(h, SCDB_EPROTO, "arena reply without a body of the kind asked for");
    if (!e) e = arena_map(h, rep->arena, out);
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_arena_new(scdb *h, int capacity, scdb_arena **out)
{
    return arena_request(h, capacity, SCDB__ARENA_KIND__ARENA_KV, 0, out);
}

scdb_kv_cache *scdb_arena_cache(scdb_arena *a) { return a && !a->dev ? a->cache : NULL; }

scdb_err scdb_arena_new_cuda(scdb *h, int capacity, scdb_arena **out)
{
    return arena_request(h, capacity, SCDB__ARENA_KIND__ARENA_KV, 1, out);
}

scdb_kv_cache *scdb_arena_cache_device(scdb_arena *a, int *cuda_device)
{
    if (!a || !a->dev) return NULL;
    if (cuda_device) *cuda_device = a->cuda_device;
    return a->cache;
}

scdb_err scdb_states_arena_new(scdb *h, int capacity, scdb_arena **out)
{
    return arena_request(h, capacity, SCDB__ARENA_KIND__ARENA_STATES, 0, out);
}

float *scdb_arena_states(scdb_arena *a, int *n_layers, int *dim, int *max_tokens)
{
    if (!a || !a->states) return NULL;
    if (n_layers) *n_layers = a->states_layers;
    if (dim) *dim = a->states_dim;
    if (max_tokens) *max_tokens = (int)a->capacity;
    return a->states;
}

void scdb_arena_free(scdb_arena **ap)
{
    scdb_arena *a, **pp;
    scdb *h;

    if (!ap || !*ap) return;
    a = *ap;
    h = a->h;
    /* freeing the arena ends its session on the broker too */
    if (a->session) cl_session_drop(a->session);
    /* our mapping of the device memory goes before the broker frees it */
    if (a->dev) cl_cuda_close(a->dev, a->cuda_device);
    if (h->registered && a->gen == h->gen) arena_notify(h, a->id, 1);
    for (pp = &h->arenas; *pp && *pp != a; pp = &(*pp)->next) {}
    if (*pp) *pp = a->next;
    if (h->scratch == a) h->scratch = NULL;
    scdb_kv_cache_free(&a->cache);
    if (a->map) munmap(a->map, a->size);
    free(a);
    *ap = NULL;
}

/* ------------------------------------------------------------------ get */

scdb_err scdb_get(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_arena *a, int slot0,
                  int32_t pos0, scdb_get_result *out)
{
    return scdb_get_ex(h, tokens, n_tokens, a, slot0, pos0, NULL, out);
}

scdb_err scdb_get_ex(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_arena *a, int slot0,
                     int32_t pos0, const scdb_get_opts *opts, scdb_get_result *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__GetRequest g = SCDB__GET_REQUEST__INIT;
    Scdb__PatchBudget pb = SCDB__PATCH_BUDGET__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e;

    if (!h || !a || a->h != h || (!tokens && n_tokens)) return SCDB_EINVAL;
    if (opts && opts->patch_layers < -1)
        return cl_fail(h, SCDB_EINVAL, "patch_layers %d: -1 (the pair's default) or >= 0",
                            opts->patch_layers);
    if (!h->registered) return cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    if (a->gen != h->gen)
        return cl_fail(h, SCDB_ECLOSED, "arena %llu is from before a broker restart: free it "
                        "and create a new one", (unsigned long long)a->id);
    if (!a->cache)
        return cl_fail(h, SCDB_EINVAL, "arena %llu is a states arena, not a KV cache",
                        (unsigned long long)a->id);
    if (slot0 < 0 || pos0 < 0) return cl_fail(h, SCDB_ERANGE, "negative slot0 or pos0");
    __atomic_store_n(&a->hdr->n, (uint32_t)a->cache->n, __ATOMIC_RELEASE);
    g.tokens = (int32_t *)tokens;
    g.n_tokens = n_tokens;
    g.arena = a->id;
    g.slot0 = (uint32_t)slot0;
    g.pos0 = pos0;
    if (opts && opts->patch_layers >= 0) {
        pb.layers = (uint32_t)opts->patch_layers;
        g.patch = &pb;
    }
    req.body_case = SCDB__REQUEST__BODY_GET;
    req.get = &g;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (rep && rep->body_case == SCDB__REPLY__BODY_GET) {
        uint32_t n = __atomic_load_n(&a->hdr->n, __ATOMIC_ACQUIRE);
        a->cache->n = n <= a->hdr->capacity ? (int)n : a->cache->n;
        if (out) {
            out->n_full = rep->get->n_full;
            out->n_matched = rep->get->n_matched;
            out->tokens_written = rep->get->tokens_written;
            out->cache_n = (uint32_t)a->cache->n;
            out->decode_ns = rep->get->decode_ns;
            out->remote_blocks = rep->get->remote_blocks;
            out->remote_ns = rep->get->remote_ns;
            out->partial = rep->get->tokens_written <
                           (uint64_t)rep->get->n_matched * h->info.block_tokens;
        }
    } else if (!e) {
        e = cl_fail(h, SCDB_EPROTO, "get reply without a body");
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_get_copy(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_kv_cache *dst,
                       int slot0, int32_t pos0, scdb_get_result *out)
{
    scdb_get_result r = {0};
    size_t bt, room, n_use, want;
    scdb_kv_cache *src;
    scdb_err e;

    if (!h || !dst || (!tokens && n_tokens)) return SCDB_EINVAL;
    if (!h->registered) return cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    if (!cl_same_geometry(h, dst))
        return cl_fail(h, SCDB_ESHAPE, "destination cache is %dx%dx%d, model is %dx%dx%d",
                        dst->n_layers, dst->n_kv_heads, dst->head_dim, h->info.n_layers,
                        h->info.n_kv_heads, h->info.head_dim);
    if (slot0 < 0 || slot0 > dst->capacity)
        return cl_fail(h, SCDB_ERANGE, "slot0 %d outside the destination cache", slot0);
    bt = h->info.block_tokens;
    room = (size_t)(dst->capacity - slot0) / bt;      /* whole blocks that fit */
    n_use = n_tokens / bt < room ? n_tokens : room * bt;
    want = n_use / bt * bt;
    if (want == 0) want = bt;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (h->scratch && (h->scratch->gen != h->gen || (size_t)h->scratch->cache->capacity < want))
            scdb_arena_free(&h->scratch);
        if (!h->scratch) {
            e = scdb_arena_new(h, (int)want, &h->scratch);
            if (e) return e;
        }
        h->scratch->cache->n = 0;
        e = scdb_get(h, tokens, n_use, h->scratch, 0, pos0, &r);
        if (e != SCDB_ECLOSED) break;
    }
    if (e && !r.tokens_written) return e;
    src = h->scratch->cache;
    if (r.tokens_written) {
        size_t d = (size_t)scdb_kv_dim(dst), w = r.tokens_written;
        memcpy(dst->pos + slot0, src->pos, w * sizeof *dst->pos);
        for (int l = 0; l < dst->n_layers; l++) {
            memcpy(scdb_kv_k(dst, l, slot0), scdb_kv_k(src, l, 0), w * d * sizeof(float));
            memcpy(scdb_kv_v(dst, l, slot0), scdb_kv_v(src, l, 0), w * d * sizeof(float));
        }
        if (dst->n < slot0 + (int)w) dst->n = slot0 + (int)w;
    }
    r.cache_n = (uint32_t)dst->n;
    if (out) *out = r;
    return e;
}

