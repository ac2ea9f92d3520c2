/* session.c — live sessions: an arena kept within a slot budget by
 * the broker's eviction policy while this process decodes into it (see the
 * "Live sessions" part of scdb.h and broker/sessions.c for the broker's
 * side).  Statistics are folded into the shared accumulators here, with no
 * message; only an eviction is a round trip.
 *
 * On a CUDA IPC arena the accumulators are device memory the broker
 * exported beside the cache (opened like the arena, cuda.c), and each fold
 * is scdb_evict_dev_fold on libscdb's CUDA table: the accumulator kernels on
 * the session's stream, the caller's probabilities read where they are.
 * The accumulators' slot count is kept here (reading it back would be a
 * device round trip per step); an eviction synchronises the stream first
 * so the broker's kernels see every fold. */
#include "libscdb_int.h"

#include "evict.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct scdb_session {
    scdb_arena *a;
    uint64_t id;
    uint32_t gen;                /* handle registration generation          */
    void *map;                   /* the accumulators (shared)               */
    size_t size;
    scdb_evict_acc *acc;
    scdb_session_info info;
    uint32_t since_evict;        /* tokens appended since the last eviction */
    int broken;                  /* an eviction's outcome is unknown        */
    int32_t *slot_pos;           /* the last eviction's map                 */
    int slot_pos_cap;
    /* a CUDA arena's session (map, acc NULL) */
    int cuda;
    void *dev_map;               /* the accumulators, opened on cuda_device */
    int cuda_device;
    scdb_evict_acc geom;         /* their header as opened                  */
    scdb_k_acc_buf buf;          /* addresses in dev_map                    */
    int acc_n;                   /* slots they hold                         */
    void *dev_scratch;           /* the kernels' scratch (ours)             */
    cl_cuda_launch launch;  /* device and stream of the folds          */
};

/* Slots the accumulators hold. */
static int acc_count(const scdb_session *s) { return s->cuda ? s->acc_n : s->acc->n; }

static scdb_err session_request(scdb *h, Scdb__Request *req, Scdb__Reply **rep)
{
    return cl_request(h, req, NULL, NULL, 0, rep);
}

static scdb_err check_live(scdb_session *s)
{
    scdb *h = s->a->h;

    if (s->gen != h->gen || s->a->gen != h->gen)
        return cl_fail(h, SCDB_ECLOSED, "session %llu is from before a broker restart: close "
                        "it and open a new one on a new arena", (unsigned long long)s->id);
    if (s->broken)
        return cl_fail(h, SCDB_ECLOSED, "session %llu: an eviction timed out or failed "
                        "midway; the cache's state is unknown: close the session",
                        (unsigned long long)s->id);
    return SCDB_OK;
}

/* A CUDA arena's session: open the accumulators' IPC handle on the arena's
 * GPU, check their header (it comes down once, here), get the kernels and
 * their scratch ready. */
static scdb_err open_device_stats(scdb *h, scdb_arena *a, const scdb_session_opts *o,
                                  const Scdb__SessionOpenReply *r, scdb_session *s)
{
    _Alignas(64) unsigned char hb[sizeof(scdb_evict_acc)];
    scdb_evict_acc *acc = NULL;
    scdb_err e;

    if (!r->cuda || r->stats_cuda_ipc_handle.len != SCDB_CUDA_IPC_HANDLE_BYTES)
        return cl_fail(h, SCDB_EPROTO, "session reply for CUDA arena %llu without a device "
                            "handle", (unsigned long long)a->id);
    if ((e = cl_cuda_open(h, r->stats_cuda_ipc_handle.data, r->stats_cuda_ipc_handle.len,
                               r->cuda_device, r->cuda_pci_bus_id, &s->dev_map, &s->cuda_device)))
        return e;
    if ((e = cl_cuda_prepare(s->cuda_device)) ||
        (e = cl_cuda_download(s->cuda_device, hb, s->dev_map, sizeof hb)))
        return cl_fail(h, e, "session on CUDA arena %llu: %s", (unsigned long long)a->id,
                            cl_cuda_error());
    e = scdb_evict_acc_attach(hb, (size_t)r->stats_size, &acc);
    if (e || acc->n_layers != h->info.n_layers || acc->n_kv_heads != h->info.n_kv_heads ||
        acc->n_heads != o->n_heads || acc->capacity != a->cache->capacity ||
        acc->bytes != r->stats_size)
        return cl_fail(h, SCDB_EPROTO, "session statistics have an unexpected header (%s)",
                            scdb_strerror(e));
    s->cuda = 1;
    s->geom = *acc;
    s->size = (size_t)r->stats_size;
    s->acc_n = acc->n;
    scdb_evict_acc_buf(&s->geom, s->dev_map, &s->buf);
    s->launch.device = s->cuda_device;
    s->launch.stream = NULL;
    if ((e = cl_cuda_alloc(s->cuda_device, scdb_k_acc_update_scratch_bytes(&s->buf),
                                &s->dev_scratch)))
        return cl_fail(h, e, "session on CUDA arena %llu: %s", (unsigned long long)a->id,
                            cl_cuda_error());
    return SCDB_OK;
}

scdb_err scdb_session_open(scdb_arena *a, const scdb_session_opts *o, scdb_session **out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__SessionOpen so = SCDB__SESSION_OPEN__INIT;
    Scdb__Reply *rep = NULL;
    scdb_session *s = NULL;
    struct stat st;
    scdb *h;
    int fd = -1;
    scdb_err e;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!a || !o) return SCDB_EINVAL;
    h = a->h;
    if (!a->cache)
        return cl_fail(h, SCDB_EINVAL, "arena %llu is a states arena, not a KV cache",
                        (unsigned long long)a->id);
    if (a->session)
        return cl_fail(h, SCDB_EBUSY, "arena %llu already has a live session",
                        (unsigned long long)a->id);
    if (a->gen != h->gen)
        return cl_fail(h, SCDB_ECLOSED, "arena %llu is from before a broker restart",
                        (unsigned long long)a->id);
    if (o->n_heads <= 0 || o->window < 0)
        return cl_fail(h, SCDB_EINVAL, "session: n_heads must be > 0, window >= 0");
    so.arena = a->id;
    so.budget = o->budget;
    so.policy = (char *)(o->policy && *o->policy ? o->policy : "streaming");
    so.cadence = o->cadence;
    so.n_heads = (uint32_t)o->n_heads;
    so.window = (uint32_t)o->window;
    req.body_case = SCDB__REQUEST__BODY_SESSION_OPEN;
    req.session_open = &so;
    e = session_request(h, &req, &rep);
    if (e == SCDB_ETIMEDOUT) {
        /* the broker may have opened it: close whatever is on the arena
         * (best effort), so the arena is not left locked */
        Scdb__Request cr = SCDB__REQUEST__INIT;
        Scdb__SessionClose sc = SCDB__SESSION_CLOSE__INIT;
        Scdb__Reply *r2 = NULL;
        char keep[sizeof h->err];
        memcpy(keep, h->err, sizeof keep);
        sc.arena = a->id;
        cr.body_case = SCDB__REQUEST__BODY_SESSION_CLOSE;
        cr.session_close = &sc;
        session_request(h, &cr, &r2);
        if (r2) scdb__reply__free_unpacked(r2, NULL);
        memcpy(h->err, keep, sizeof keep);
    }
    if (e) goto done;
    if (rep->body_case != SCDB__REPLY__BODY_SESSION_OPEN) {
        e = cl_fail(h, SCDB_EPROTO, "session reply without a body");
        goto done;
    }
    if (!(s = calloc(1, sizeof *s))) {
        e = cl_fail(h, SCDB_ENOMEM, "out of memory");
        goto close_it;
    }
    if (a->dev) {
        if ((e = open_device_stats(h, a, o, rep->session_open, s))) goto close_it;
        goto opened;
    }
    if ((e = cl_fetch_fd(h, &rep->session_open->stats_fd_ticket, "session statistics",
                              &fd)))
        goto close_it;
    if (fstat(fd, &st) || (uint64_t)st.st_size < rep->session_open->stats_size) {
        e = cl_fail(h, SCDB_EPROTO, "session statistics smaller than announced");
        goto close_it;
    }
    s->map = mmap(NULL, rep->session_open->stats_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                  0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        e = cl_fail(h, SCDB_ESYS, "cannot map session statistics: %s", strerror(errno));
        goto close_it;
    }
    s->size = rep->session_open->stats_size;
    e = scdb_evict_acc_attach(s->map, s->size, &s->acc);
    if (e || s->acc->n_layers != h->info.n_layers || s->acc->n_kv_heads != h->info.n_kv_heads ||
        s->acc->n_heads != o->n_heads || s->acc->capacity != a->cache->capacity) {
        e = cl_fail(h, SCDB_EPROTO, "session statistics have an unexpected header (%s)",
                     scdb_strerror(e));
        goto close_it;
    }
opened:
    s->a = a;
    s->gen = h->gen;
    s->id = rep->session_open->session;
    s->info.id = s->id;
    s->info.budget = rep->session_open->budget;
    s->info.cadence = rep->session_open->cadence;
    s->info.sinks = rep->session_open->sinks;
    s->info.recent = rep->session_open->recent;
    s->info.stats_bytes = s->size;
    s->info.cuda = s->cuda;
    {   /* confirm the mapping: the broker unlinks the name */
        Scdb__Request mr = SCDB__REQUEST__INIT;
        Scdb__ArenaMapped m = SCDB__ARENA_MAPPED__INIT;
        Scdb__Reply *r2 = NULL;
        m.arena = rep->session_open->stats_arena;
        mr.body_case = SCDB__REQUEST__BODY_ARENA_MAPPED;
        mr.arena_mapped = &m;
        e = session_request(h, &mr, &r2);
        if (r2) scdb__reply__free_unpacked(r2, NULL);
        if (e) goto close_it;
    }
    if (fd >= 0) close(fd);
    a->session = s;
    *out = s;
    scdb__reply__free_unpacked(rep, NULL);
    return SCDB_OK;
close_it:
    if (fd >= 0) close(fd);
    {   /* best effort: the broker frees the statistics with the session */
        Scdb__Request cr = SCDB__REQUEST__INIT;
        Scdb__SessionClose sc = SCDB__SESSION_CLOSE__INIT;
        Scdb__Reply *r2 = NULL;
        char keep[sizeof h->err];
        memcpy(keep, h->err, sizeof keep);
        sc.session = rep->session_open->session;
        cr.body_case = SCDB__REQUEST__BODY_SESSION_CLOSE;
        cr.session_close = &sc;
        session_request(h, &cr, &r2);
        if (r2) scdb__reply__free_unpacked(r2, NULL);
        memcpy(h->err, keep, sizeof keep);
    }
    if (s && s->map) munmap(s->map, s->size);
    if (s && s->dev_scratch) cl_cuda_free(s->cuda_device, s->dev_scratch);
    if (s && s->dev_map) cl_cuda_close(s->dev_map, s->cuda_device);
    free(s);
done:
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

const scdb_session_info *scdb_session_get_info(const scdb_session *s)
{
    return s ? &s->info : NULL;
}

void *scdb_session_accumulators(scdb_session *s, size_t *bytes)
{
    if (bytes) *bytes = s ? s->size : 0;
    return s ? (s->cuda ? s->dev_map : s->map) : NULL;
}

scdb_err scdb_session_set_stream(scdb_session *s, void *cuda_stream)
{
    if (!s) return SCDB_EINVAL;
    if (!s->cuda)
        return cl_fail(s->a->h, SCDB_EINVAL, "session %llu is not on a CUDA arena",
                            (unsigned long long)s->id);
    s->launch.stream = cuda_stream;
    return SCDB_OK;
}

scdb_err scdb_session_add_stats(scdb_session *s, const float *probs, int probs_slots, int n_new)
{
    scdb_kv_cache *c, view;
    scdb *h;
    int missing;
    scdb_err e;

    if (!s) return SCDB_EINVAL;
    h = s->a->h;
    if ((e = check_live(s))) return e;
    c = s->a->cache;
    if (n_new < 0 || (probs && n_new == 0) || (probs && probs_slots < c->n))
        return cl_fail(h, SCDB_EINVAL, "add_stats: n_new %d, probs_slots %d for %d slots",
                        n_new, probs_slots, c->n);
    missing = c->n - acc_count(s);
    if (missing < n_new)
        return cl_fail(h, SCDB_EINVAL, "add_stats: %d new slots but the cache grew by %d "
                        "since the last fold (append the slots first)", n_new, missing);
    if (s->cuda) {
        e = scdb_evict_dev_fold(cl_cuda_session_ops(), &s->buf, &s->acc_n, c, probs,
                                probs_slots, n_new, s->dev_scratch, &s->launch);
        if (e)
            return cl_fail(h, e, "add_stats: accumulator update on CUDA device %d failed: %s",
                                s->cuda_device, cl_cuda_error());
        s->since_evict += (uint32_t)missing;
        return SCDB_OK;
    }
    /* slots appended without statistics (a get) come first, unseen */
    if (missing > n_new) {
        view = *c;
        view.n = c->n - n_new;
        e = scdb_evict_acc_update(s->acc, &view, NULL, 0, missing - n_new);
        if (e) return cl_fail(h, e, "add_stats: cannot record %d slots", missing - n_new);
    }
    if (n_new > 0) {
        e = scdb_evict_acc_update(s->acc, c, probs, probs_slots, n_new);
        if (e) return cl_fail(h, e, "add_stats: accumulator update failed");
    }
    s->since_evict += (uint32_t)missing;
    return SCDB_OK;
}

scdb_err scdb_session_evict(scdb_session *s, uint32_t budget, scdb_session_evict_result *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__SessionEvict se = SCDB__SESSION_EVICT__INIT;
    Scdb__Reply *rep = NULL;
    scdb_kv_cache *c;
    scdb *h;
    scdb_err e;

    if (!s) return SCDB_EINVAL;
    h = s->a->h;
    if ((e = check_live(s))) return e;
    c = s->a->cache;
    if (acc_count(s) != c->n && (e = scdb_session_add_stats(s, NULL, 0, 0))) return e;
    /* the broker's kernels must see every fold: they run in its process */
    if (s->cuda && (e = cl_cuda_sync(s->cuda_device, s->launch.stream)))
        return cl_fail(h, e, "evict: cannot synchronise the session's stream: %s",
                            cl_cuda_error());
    __atomic_store_n(&s->a->hdr->n, (uint32_t)c->n, __ATOMIC_RELEASE);
    se.session = s->id;
    se.budget = budget;
    req.body_case = SCDB__REQUEST__BODY_SESSION_EVICT;
    req.session_evict = &se;
    e = session_request(h, &req, &rep);
    if (e == SCDB_ETIMEDOUT || e == SCDB_ECLOSED) s->broken = 1;
    if (e) goto done;
    if (rep->body_case != SCDB__REPLY__BODY_SESSION_EVICT ||
        rep->session_evict->n_slot_pos != rep->session_evict->n_kept ||
        rep->session_evict->n_kept > (uint32_t)c->capacity) {
        s->broken = 1;
        e = cl_fail(h, SCDB_EPROTO, "eviction reply without a (consistent) body");
        goto done;
    }
    {
        uint32_t n = __atomic_load_n(&s->a->hdr->n, __ATOMIC_ACQUIRE);
        int k = (int)rep->session_evict->n_kept;
        if (n != (uint32_t)k) {
            s->broken = 1;
            e = cl_fail(h, SCDB_EPROTO, "arena holds %u slots after an eviction to %d", n, k);
            goto done;
        }
        c->n = k;
        if (s->cuda) s->acc_n = k;       /* the broker compacted them with the cache */
        if (k > s->slot_pos_cap) {
            int32_t *p = realloc(s->slot_pos, sizeof *p * (size_t)k);
            if (!p) {
                e = cl_fail(h, SCDB_ENOMEM, "out of memory");
                goto done;
            }
            s->slot_pos = p;
            s->slot_pos_cap = k;
        }
        if (k) memcpy(s->slot_pos, rep->session_evict->slot_pos, sizeof *s->slot_pos * (size_t)k);
        s->since_evict = 0;
        if (out) {
            out->evicted = rep->session_evict->n_kept < rep->session_evict->n_before;
            out->n_before = rep->session_evict->n_before;
            out->n_kept = rep->session_evict->n_kept;
            out->slot_pos = s->slot_pos;
            out->evict_ns = rep->session_evict->evict_ns;
        }
    }
done:
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_session_step(scdb_session *s, const float *probs, int probs_slots, int n_new,
                           scdb_session_evict_result *out)
{
    scdb_err e;

    if (out) memset(out, 0, sizeof *out);
    if (!s) return SCDB_EINVAL;
    if ((e = scdb_session_add_stats(s, probs, probs_slots, n_new))) return e;
    if (s->info.cadence && s->since_evict >= s->info.cadence &&
        s->a->cache->n > (int)s->info.budget)
        return scdb_session_evict(s, 0, out);
    return SCDB_OK;
}

void cl_session_drop(scdb_session *s)
{
    if (!s) return;
    if (s->a) s->a->session = NULL;
    if (s->map) munmap(s->map, s->size);
    if (s->dev_scratch) cl_cuda_free(s->cuda_device, s->dev_scratch);
    if (s->dev_map) cl_cuda_close(s->dev_map, s->cuda_device);
    free(s->slot_pos);
    free(s);
}

void scdb_session_close(scdb_session **sp)
{
    scdb_session *s;
    scdb *h;

    if (!sp || !*sp) return;
    s = *sp;
    h = s->a->h;
    if (h->registered && s->gen == h->gen) {
        Scdb__Request req = SCDB__REQUEST__INIT;
        Scdb__SessionClose sc = SCDB__SESSION_CLOSE__INIT;
        Scdb__Reply *rep = NULL;
        sc.session = s->id;
        req.body_case = SCDB__REQUEST__BODY_SESSION_CLOSE;
        req.session_close = &sc;
        session_request(h, &req, &rep);
        if (rep) scdb__reply__free_unpacked(rep, NULL);
    }
    cl_session_drop(s);
    *sp = NULL;
}
