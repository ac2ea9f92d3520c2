/* sessions.c — live sessions: a client's KV arena kept within a slot budget
 * by an eviction policy (evict/evict.h) while the client decodes into it.
 *
 *   client process                          broker
 *   --------------                          ------
 *   SessionOpen(arena, budget, policy) ---> shm object for the accumulators
 *                                   <--- session id, shm name, protected counts
 *   map it, ArenaMapped(stats)      --->    unlink the name
 *   per step: forward into the arena's
 *     cache, fold the step's attention
 *     into the accumulators (libscdb,
 *     no message)
 *   every `cadence` tokens:
 *   SessionEvict(session)           --->    worker: copy + check the
 *                                           accumulators, score, select,
 *                                           compact cache + accumulators
 *                                   <---    n_kept, slot -> position map
 *   SessionClose                    --->    free the accumulators
 *
 * Trust: the client can write both shared objects at any time.  The
 * broker therefore never follows a length or offset it did not create: the
 * cache geometry is its own view, the live-slot count is clamped, and an
 * eviction works on a private copy of the accumulators, checked against the
 * geometry recorded at open (geom), and copies the compacted result back.
 * A damaged header is an error reply (SCDB_EFORMAT), never a crash.
 *
 * CUDA IPC arenas: the accumulators live beside the cache in the GPU's
 * memory (bk_cuda_stats_create: the same layout, exported with its own IPC
 * handle in the SessionOpen reply), libscdb folds each step there with the
 * CUDA kernels, and the eviction runs on the device (evict_dev.c): only its
 * 64-byte header comes down to be checked, and the slot -> position map.
 *
 * Threads: open/close and the prepare step run on the main thread; the
 * eviction itself on a worker, holding references on both arenas and the
 * KV arena's busy flag (so a get cannot write into it meanwhile). */
#include "broker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WINDOW 4096
#define MAX_HEADS 4096

static bk_session *session_find(bk_client *c, uint64_t id)
{
    for (bk_session *s = c->sessions; s; s = s->next)
        if (s->id == id) return s;
    return NULL;
}

void bk_on_session_open(scdb_broker *b, bk_client *c, const Scdb__SessionOpen *so,
                        Scdb__Reply *r, Scdb__SessionOpenReply *sr, scdb_err *status,
                        char *msg, size_t msglen)
{
    const scdb_broker_model *m = c->model;
    const bk_policy *pol;
    scdb_evict_acc_shape shape;
    scdb_evict_acc *acc = NULL;
    bk_arena *kv, *st = NULL;
    bk_session *s;
    size_t bytes;
    int sinks, recent;
    scdb_err e;

    kv = bk_arena_find(c, so->arena);
    if (!kv || kv->kind != BK_ARENA_KV) {
        *status = SCDB_ENOTFOUND;
        snprintf(msg, msglen, "no KV arena %llu for this client", (unsigned long long)so->arena);
        return;
    }
    if (kv->busy) {
        *status = SCDB_EBUSY;
        snprintf(msg, msglen, "arena %llu has a get or an eviction in progress",
                 (unsigned long long)kv->id);
        return;
    }
    if (kv->session) {
        *status = SCDB_EBUSY;
        snprintf(msg, msglen, "arena %llu already has live session %llu",
                 (unsigned long long)kv->id, (unsigned long long)kv->session->id);
        return;
    }
    if (so->budget < 1 || so->budget > (uint32_t)kv->cache->capacity) {
        *status = SCDB_ERANGE;
        snprintf(msg, msglen, "budget %u slots: give 1 .. the arena's %d", so->budget,
                 kv->cache->capacity);
        return;
    }
    pol = bk_policy_find(b, so->policy);
    if (!pol) {
        char names[512];
        size_t o = 0;
        names[0] = 0;
        for (int i = 0; i < b->reg->n_policies && o < sizeof names; i++)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "",
                                  b->reg->policies[i].name);
        *status = SCDB_ENOTFOUND;
        snprintf(msg, msglen, "unknown eviction policy '%.64s' (this broker has: %s)",
                 so->policy, names);
        return;
    }
    if (so->n_heads < 1 || so->n_heads > MAX_HEADS || so->n_heads % (uint32_t)m->n_kv_heads ||
        (m->n_heads && so->n_heads != (uint32_t)m->n_heads)) {
        *status = SCDB_ESHAPE;
        if (m->n_heads)
            snprintf(msg, msglen, "n_heads %u: model %s has %d query heads", so->n_heads,
                     m->name, m->n_heads);
        else
            snprintf(msg, msglen, "n_heads %u must be a positive multiple of model %s's %d KV "
                     "heads (at most %d)", so->n_heads, m->name, m->n_kv_heads, MAX_HEADS);
        return;
    }
    if (so->window > MAX_WINDOW) {
        *status = SCDB_ERANGE;
        snprintf(msg, msglen, "window %u exceeds %d", so->window, MAX_WINDOW);
        return;
    }
    if (b->cfg.max_sessions_per_client && c->n_sessions >= b->cfg.max_sessions_per_client) {
        *status = SCDB_EFULL;
        snprintf(msg, msglen, "client holds %u live sessions (max_sessions_per_client)",
                 c->n_sessions);
        return;
    }
    if (c->n_arenas >= b->cfg.max_arenas_per_client) {
        *status = SCDB_EFULL;
        snprintf(msg, msglen, "client holds %u arenas (max_arenas_per_client; a session "
                 "takes one for its statistics)", c->n_arenas);
        return;
    }
    /* the statistics' layout: a keep set per (layer, KV group) where the
     * policy wants one at this budget (evict.h, "Keep sets per head"); in
     * host memory only: a device session keeps one set (a learned policy
     * decides there with its network; the per-head kinds cannot) */
    int per_head = scdb_evict_policy_per_head(pol->policy, (int)so->budget, kv->cache->capacity);
    if (per_head && kv->dev) {
        if (!scdb_evict_policy_runs_on(pol->policy, 0)) {
            *status = SCDB_EUNSUPPORTED;
            snprintf(msg, msglen, "policy %s keeps a set of slots per head, which a CUDA arena's "
                     "session cannot (it keeps one set): use snapkv, h2o, tova, streaming or a "
                     "learned policy", pol->name);
            return;
        }
        per_head = 0;
    }
    shape = (scdb_evict_acc_shape){m->n_layers, (int)so->n_heads, m->n_kv_heads,
                                   kv->cache->capacity, (int)so->window, per_head};
    bytes = scdb_evict_acc_bytes(&shape);
    if (!bytes) {
        *status = SCDB_ESHAPE;
        snprintf(msg, msglen, "no accumulator shape for %d layers x %u heads x %d slots",
                 m->n_layers, so->n_heads, kv->cache->capacity);
        return;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        *status = SCDB_ENOMEM;
        snprintf(msg, msglen, "out of memory");
        return;
    }
    if (kv->dev) {
        /* a CUDA IPC arena: the accumulators go beside its cache, in device
         * memory exported the same way (the client folds on the device) */
        e = bk_cuda_stats_create(b, c, &shape, &s->geom, &st, msg, msglen);
        if (e) {
            free(s);
            *status = e;
            return;
        }
        acc = &s->geom;
    } else {
        e = bk_shm_create(b, c, bytes, BK_ARENA_SESSION, &st, msg, msglen);
        if (e) {
            free(s);
            *status = e;
            return;
        }
        e = scdb_evict_acc_init(st->map, st->size, &shape, &acc);
        if (e) {
            bk_arena_remove(b, c, st);
            free(s);
            *status = e;
            snprintf(msg, msglen, "cannot lay out the accumulators: %s", scdb_strerror(e));
            return;
        }
    }
    /* the accumulators follow the cache from its current length: slots
     * already there (a get) are recorded by the client's first fold */
    s->id = ++b->next_session_id;
    s->kv = kv;
    kv->refs++;
    kv->session = s;
    s->stats = st;
    st->refs++;
    s->policy = pol;
    s->reg = bk_registry_ref(b->reg);   /* where pol lives */
    s->geom = *acc;
    s->budget = so->budget;
    s->cadence = so->cadence;
    s->next = c->sessions;
    c->sessions = s;
    c->n_sessions++;
    b->n_sessions++;
    scdb_evict_policy_protect(pol->policy, acc, (int)so->budget + 1, (int)so->budget, &sinks,
                              &recent);
    scdb_debug("client %s: session %llu on arena %llu, policy %s, budget %u, cadence %u",
               c->label, (unsigned long long)s->id, (unsigned long long)kv->id, pol->name,
               s->budget, s->cadence);

    sr->session = s->id;
    if (st->dev) {
        /* the handle goes in this reply only, to the arena's owner */
        sr->cuda = 1;
        sr->stats_cuda_ipc_handle.data = st->ipc_handle;
        sr->stats_cuda_ipc_handle.len = sizeof st->ipc_handle;
        sr->cuda_device = b->cuda_ordinal;
        sr->cuda_pci_bus_id = st->pci_bus_id;
        sr->stats_size = s->geom.bytes;
    } else {
        sr->stats_fd_ticket.data = st->ticket;
        sr->stats_fd_ticket.len = sizeof st->ticket;
        sr->stats_size = st->size;
    }
    sr->stats_shm_name = (char *)"";
    sr->stats_arena = st->id;
    sr->budget = s->budget;
    sr->cadence = s->cadence;
    sr->sinks = (uint32_t)sinks;
    sr->recent = (uint32_t)recent;
    r->body_case = SCDB__REPLY__BODY_SESSION_OPEN;
    r->session_open = sr;
    *status = SCDB_OK;
}

void bk_session_close(scdb_broker *b, bk_client *c, bk_session *s)
{
    bk_session **pp = &c->sessions;

    while (*pp && *pp != s) pp = &(*pp)->next;
    if (!*pp) return;
    *pp = s->next;
    c->n_sessions--;
    b->n_sessions--;
    s->kv->session = NULL;
    scdb_debug("client %s: session %llu closed after %llu eviction(s), %llu slots evicted",
               c->label, (unsigned long long)s->id, (unsigned long long)s->evictions,
               (unsigned long long)s->evicted_slots);
    bk_arena_unref(b, s->kv);
    bk_arena_remove(b, c, s->stats);    /* leaves the client's list */
    bk_arena_unref(b, s->stats);        /* the session's own reference */
    bk_registry_unref(s->reg);
    free(s);
}

scdb_err bk_session_close_id(scdb_broker *b, bk_client *c, uint64_t id, uint64_t arena,
                             char *msg, size_t msglen)
{
    bk_session *s;

    if (id == 0) {
        bk_arena *a = bk_arena_find(c, arena);
        s = a && a->kind == BK_ARENA_KV ? a->session : NULL;
        if (!s) {
            snprintf(msg, msglen, "no session on arena %llu of this client",
                     (unsigned long long)arena);
            return SCDB_ENOTFOUND;
        }
    } else if (!(s = session_find(c, id))) {
        snprintf(msg, msglen, "no session %llu for this client", (unsigned long long)id);
        return SCDB_ENOTFOUND;
    }
    bk_session_close(b, c, s);
    return SCDB_OK;
}

scdb_err bk_session_evict_prepare(scdb_broker *b, bk_client *c, const Scdb__SessionEvict *se,
                                  bk_job *j, char *msg, size_t msglen)
{
    bk_session *s = session_find(c, se->session);

    (void)b;
    if (!s) {
        snprintf(msg, msglen, "no session %llu for this client",
                 (unsigned long long)se->session);
        return SCDB_ENOTFOUND;
    }
    if (se->budget > (uint32_t)s->kv->cache->capacity) {
        snprintf(msg, msglen, "budget %u exceeds the arena's %d slots", se->budget,
                 s->kv->cache->capacity);
        return SCDB_ERANGE;
    }
    if (s->kv->busy) {
        snprintf(msg, msglen, "arena %llu has a get or an eviction in progress",
                 (unsigned long long)s->kv->id);
        return SCDB_EBUSY;
    }
    j->arena = s->kv;
    s->kv->refs++;
    s->kv->busy = 1;
    j->stats = s->stats;
    s->stats->refs++;
    j->policy = s->policy;
    j->reg = bk_registry_ref(s->reg);
    j->geom = s->geom;
    j->budget = se->budget ? se->budget : s->budget;
    j->session = s->id;
    j->client = c->token;
    return SCDB_OK;
}

/* An eviction, on a worker.  One path for both kinds of arena; what
 * differs is where the accumulators are:
 *
 *   host arena (shm)                      CUDA IPC arena (device memory)
 *   ----------------                      ------------------------------
 *   private copy of the whole buffer      its 64-byte header comes down
 *           \______________ checked against geom, live count clamped,
 *                           covered slots == live slots, map allocated
 *   scdb_evict_run on the copy            scdb_evict_dev_run in place
 *   compacted copy back (header last)     (nothing to copy back)
 *           \______________ the cache's count published, reply filled
 *
 * On the device no private copy is needed: nothing the client can write
 * is ever used there as a length, an offset or an index (the geometry is
 * geom, the live count the checked header's and the arena's, the keep
 * list select_topb's, valid whatever the scores hold), so a client that
 * writes them during an eviction can only spoil its own session.
 *
 * evict_ns (the reply's, the job's work_ns and the eviction histogram's)
 * is the policy's own time on both paths: score, select and compact
 * (scdb_evict_run / scdb_evict_dev_run); copying or downloading the
 * accumulators is the worker's service time around it (metrics.c's
 * stage histograms). */

/* The shared accumulators match what the broker created (geom)? */
static int acc_matches(const scdb_evict_acc *a, const scdb_evict_acc *g)
{
    return a->n_layers == g->n_layers && a->n_heads == g->n_heads &&
           a->n_kv_heads == g->n_kv_heads && a->capacity == g->capacity &&
           a->window == g->window && a->bytes == g->bytes;
}

/* The accumulators the policy will run on: a private host copy of the
 * whole buffer (*copy, freed by the caller), or the device buffer's header
 * downloaded into hb.  *hdr gets their header (attached, not yet checked). */
static scdb_err evict_fetch(const bk_job *j, void **copy, unsigned char *hb, size_t hb_len,
                            scdb_evict_acc **hdr, char *msg, size_t msglen)
{
    const bk_arena *st = j->stats;
    scdb_err e;

    if (j->arena->dev) {
        e = scdb_k_ops_get(SCDB_DEV_CUDA)->download(hb, st->dev, hb_len);
        if (e) {
            snprintf(msg, msglen, "cannot read the session's accumulator header: %s",
                     scdb_strerror(e));
            return e;
        }
        e = scdb_evict_acc_attach(hb, (size_t)j->geom.bytes, hdr);
    } else {
        /* a private copy: the client cannot change what we validated */
        if (posix_memalign(copy, 64, st->size)) {
            *copy = NULL;
            snprintf(msg, msglen, "out of memory");
            return SCDB_ENOMEM;
        }
        memcpy(*copy, st->map, st->size);
        e = scdb_evict_acc_attach(*copy, st->size, hdr);
    }
    if (e || !acc_matches(*hdr, &j->geom)) {
        snprintf(msg, msglen,
                 "the session's accumulator header was overwritten (%s): close the session",
                 e ? scdb_strerror(e) : "geometry differs from the one created");
        return SCDB_EFORMAT;
    }
    return SCDB_OK;
}

/* The live count from the arena header (the client's to write: clamped),
 * which the accumulators must cover exactly. */
static scdb_err evict_live_count(bk_job *j, const scdb_evict_acc *acc, char *msg, size_t msglen)
{
    scdb_kv_cache *cache = j->arena->cache;
    uint32_t hdr_n = __atomic_load_n(&j->arena->hdr->n, __ATOMIC_ACQUIRE);

    if (hdr_n > (uint32_t)cache->capacity) {
        snprintf(msg, msglen, "arena header says %u live slots; the arena holds %d", hdr_n,
                 cache->capacity);
        return SCDB_ERANGE;
    }
    cache->n = (int)hdr_n;
    if (acc->n != cache->n) {
        snprintf(msg, msglen,
                 "the accumulators cover %d slots but the cache holds %d: fold every appended "
                 "slot in first (scdb_session_add_stats)", acc->n, cache->n);
        return SCDB_EMISMATCH;
    }
    return SCDB_OK;
}

/* Host arena: the compacted private copy back into the shared buffer,
 * the header last (a client reading it sees a consistent buffer). */
static void evict_publish_host(const bk_job *j, const scdb_evict_acc *acc)
{
    scdb_evict_acc *shared = j->stats->map;

    memcpy((char *)shared + sizeof *shared, (const char *)acc + sizeof *acc,
           acc->bytes - sizeof *acc);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(shared, acc, sizeof *acc);
}

void bk_session_run_evict(scdb_broker *b, bk_job *j)
{
    bk_arena *kv = j->arena;
    scdb_kv_cache *cache = kv->cache;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__SessionEvictReply er = SCDB__SESSION_EVICT_REPLY__INIT;
    _Alignas(64) unsigned char hb[sizeof(scdb_evict_acc)];
    scdb_evict_acc *acc = NULL;
    int32_t *map = NULL;
    void *copy = NULL;
    char msg[256] = "";
    int n_keep = 0, before = 0;
    uint64_t t0;
    scdb_err e;

    (void)b;
    if ((e = evict_fetch(j, &copy, hb, sizeof hb, &acc, msg, sizeof msg)) ||
        (e = evict_live_count(j, acc, msg, sizeof msg)))
        goto out;
    before = cache->n;
    if (!(map = malloc(sizeof *map * (size_t)(before ? before : 1)))) {
        e = SCDB_ENOMEM;
        snprintf(msg, sizeof msg, "out of memory");
        goto out;
    }
    t0 = scdb_now_ns();
    if (kv->dev)
        e = scdb_evict_dev_run(scdb_k_ops_get(SCDB_DEV_CUDA), j->policy->policy, cache, acc,
                               j->stats->dev, (int)j->budget, j->stats->dev_scratch, map,
                               &n_keep);
    else
        e = scdb_evict_run(j->policy->policy, cache, acc, (int)j->budget, map, &n_keep);
    er.evict_ns = scdb_now_ns() - t0;
    j->work_ns = er.evict_ns;
    if (e) {
        snprintf(msg, sizeof msg, "policy %s failed%s: %s", j->policy->name,
                 kv->dev ? " on the device" : "", scdb_strerror(e));
        goto out;
    }
    if (!kv->dev) evict_publish_host(j, acc);
    __atomic_store_n(&kv->hdr->n, (uint32_t)cache->n, __ATOMIC_RELEASE);
    __atomic_add_fetch(&kv->hdr->gen, 1, __ATOMIC_RELEASE);
    j->n_before = (uint32_t)before;
    j->n_kept = (uint32_t)n_keep;
    er.n_before = (uint32_t)before;
    er.n_kept = (uint32_t)n_keep;
    er.n_slot_pos = (size_t)n_keep;
    er.slot_pos = map;
    r.body_case = SCDB__REPLY__BODY_SESSION_EVICT;
    r.session_evict = &er;
out:
    bk_job_finish(j, e, e ? NULL : &r, "%s", msg);
    free(map);
    free(copy);
}

void bk_session_evict_done(scdb_broker *b, bk_client *c, bk_job *j)
{
    bk_session *s = c ? session_find(c, j->session) : NULL;

    if (j->stats) bk_arena_unref(b, j->stats);
    j->stats = NULL;
    if (!s || j->status) return;
    if (j->n_kept < j->n_before) s->evictions++;
    s->evicted_slots += j->n_before - j->n_kept;
}
