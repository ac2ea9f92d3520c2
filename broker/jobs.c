/* jobs.c — jobs (work a request hands off: made by handlers.c, run by a
 * thread, done on the main thread), the worker pool (get: read blocks --
 * local, then the remote tier's continuation -- and decode them into an
 * arena; lookups that continue in the remote tier; session evictions) and
 * the single writer thread (put, put_states, delete: the store's one LMDB
 * writer; and internal jobs that keep blocks a get fetched from the remote
 * tier, which nobody waits for).  Each thread pops
 * jobs from its queue, packs the reply, and hands the job back to the main
 * thread over an inproc PUSH socket; bk_job_done sends the reply and
 * releases what the job held. */
#define _GNU_SOURCE 1
#include "broker_int.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels.h"

#define DONE_ENDPOINT "inproc://scdb-done"

/* ------------------------------------------------------------------ jobs */

bk_job *bk_job_new(int sock, zmq_msg_t *ident, uint64_t req_id, uint64_t t0_ns,
                   Scdb__Request *req, bk_op op)
{
    bk_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->op = op;
    j->sock = sock;
    zmq_msg_init(&j->ident);
    zmq_msg_copy(&j->ident, ident);
    j->req_id = req_id;
    j->t0_ns = t0_ns;
    j->req = req;
    return j;
}

void bk_job_free(bk_job *j)
{
    if (!j) return;
    if (j->rblocks) {
        scdb_remote_blocks_free(j->rblocks, j->n_rblocks);
        free(j->rblocks);
    }
    free(j->rkeys);
    zmq_msg_close(&j->ident);
    for (int i = 0; i < j->n_frames; i++) zmq_msg_close(&j->frames[i]);
    free(j->frames);
    if (j->req) scdb__request__free_unpacked(j->req, NULL);
    free(j->reply);
    free(j);
}

void bk_job_done(scdb_broker *b, bk_job *j)
{
    if (j->reply)
        bk_send_reply(b, j->sock, &j->ident, j->reply, j->reply_len);
    else
        bk_send_status(b, j->sock, &j->ident, j->req_id, SCDB_ENOMEM, "out of memory (reply)");
    bk_account(b, j->op, j->status, j->t0_ns);
    bk_metrics_job_done(b, j);
    if (j->req) {   /* the client's share of max_inflight_per_client */
        bk_client *c = bk_client_find(b, j->req->client);
        if (c && c->inflight > 0) c->inflight--;
    }
    if (j->op == OP_SESSION_EVICT) bk_session_evict_done(b, bk_client_find(b, j->client), j);
    if (j->arena) {
        j->arena->busy = 0;
        bk_arena_unref(b, j->arena);
    }
    b->inflight--;
    bk_registry_unref(j->reg);
    bk_job_free(j);
}

/* ------------------------------------------------------------------ get */

static void run_get(scdb_broker *b, bk_job *j)
{
    const Scdb__GetRequest *g = j->req->get;
    const bk_pair *pair = j->pair;
    bk_arena *a = j->arena;
    scdb_kv_cache *cache = a->cache;
    uint32_t bt = b->block_tokens;
    size_t n_full = g->n_tokens / bt, n_matched = 0, fit;
    uint64_t block_bytes = (uint64_t)bt * j->cb->token_bytes, t0;
    scdb_key *keys = NULL;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__GetReply gr = SCDB__GET_REPLY__INIT;
    scdb_err e = SCDB_OK;
    char msg[256] = "";
    uint32_t written = 0, hdr_n;
    void *host_copy = NULL;     /* a GPU-hot-tier block going to a host arena */
    scdb_remote_block *rb = NULL;   /* the remote tier's continuation */
    size_t n_remote = 0;
    int gap = 0;

    if (n_full && !(keys = malloc(n_full * sizeof *keys))) {
        bk_job_finish(j, SCDB_ENOMEM, NULL, "out of memory");
        return;
    }
    e = scdb_store_lookup(b->store, &j->cb->ns, g->tokens, g->n_tokens, keys, n_full, &n_full,
                          &n_matched);
    if (e) {
        free(keys);
        bk_job_finish(j, e, NULL, "lookup failed");
        return;
    }
    /* the client may have appended slots itself: its count is the start
     * (clamped: the header is writable by the client; the geometry used
     * here is the broker's private view) */
    hdr_n = __atomic_load_n(&a->hdr->n, __ATOMIC_ACQUIRE);
    cache->n = hdr_n > (uint32_t)cache->capacity ? cache->capacity : (int)hdr_n;
    fit = ((size_t)cache->capacity - g->slot0) / bt;
    if (g->max_tokens && g->max_tokens / bt < fit) fit = g->max_tokens / bt;
    if (fit > n_full) fit = n_full;
    /* a local prefix that stops short of what fits continues in the remote
     * tier: fetched and verified now, decoded below after the local blocks,
     * then kept locally by the writer (a slow or down cluster only makes
     * the hit shorter) */
    if (b->remote && n_matched < fit) {
        uint64_t r0 = scdb_now_ns();
        n_remote = bk_remote_fetch(b, j->cb, keys, n_matched, fit, &rb);
        gr.remote_ns = scdb_now_ns() - r0;
    }
    if (fit > n_matched + n_remote) fit = n_matched + n_remote;

    t0 = scdb_now_ns();
    for (size_t i = 0; i < fit; i++) {
        scdb_block *blk = NULL;
        scdb_decode_block db = {0};

        if (i >= n_matched) {         /* from the remote tier: verified host bytes */
            const scdb_remote_block *rbk = &rb[i - n_matched];
            db.payload = rbk->payload;
            db.payload_len = rbk->info.payload_len;
            db.payload_dtype = rbk->info.payload_dtype;
            db.tokens = g->tokens + i * bt;
            db.n_tokens = (int)bt;
            db.block_index = (uint32_t)i;
            if (!a->dev)
                e = pair->dec.decode(pair->dec.ctx, &db, cache, (int)(g->slot0 + i * bt),
                                     (int32_t)(g->pos0 + (int64_t)(i * bt)), (int)bt);
            else if (pair->dec.decode_dev)
                e = pair->dec.decode_dev(pair->dec.ctx, scdb_k_ops_get(SCDB_DEV_CUDA), &db,
                                         cache, (int)(g->slot0 + i * bt),
                                         (int32_t)(g->pos0 + (int64_t)(i * bt)), (int)bt);
            else
                e = SCDB_EUNSUPPORTED;
            if (e) {
                snprintf(msg, sizeof msg, "block %zu: %s decoder failed", i, pair->dec.name);
                break;
            }
            written += bt;
            continue;
        }
        e = scdb_store_acquire(b->store, &keys[i], &blk);
        if (e == SCDB_ENOTFOUND) { /* evicted since the lookup: a shorter hit */
            e = SCDB_OK;
            gap = 1;                  /* what the remote tier gave no longer connects */
            break;
        }
        if (e) {
            snprintf(msg, sizeof msg, "block %zu: cannot read it", i);
            break;
        }
        if (blk->info.payload_len != block_bytes) {
            snprintf(msg, sizeof msg, "block %zu holds %llu bytes, codebook %s expects %llu", i,
                     (unsigned long long)blk->info.payload_len, j->cb->name,
                     (unsigned long long)block_bytes);
            scdb_store_release(b->store, &blk);
            e = SCDB_ESHAPE;
            break;
        }
        db.payload = blk->payload;
        db.payload_len = blk->info.payload_len;
        db.payload_dtype = blk->info.payload_dtype;
        db.payload_on_device = b->hot_on_device && !strcmp(blk->tier, SCDB_TIER_CUDA);
        if (db.payload_on_device && (!a->dev || !pair->dec.decode_dev)) {
            /* host decode of a block the GPU hot tier holds: bring it down */
            if (!host_copy && !(host_copy = malloc((size_t)block_bytes))) e = SCDB_ENOMEM;
            if (!e)
                e = scdb_k_ops_get(SCDB_DEV_CUDA)->download(host_copy, blk->payload,
                                                            (size_t)block_bytes);
            if (e) {
                snprintf(msg, sizeof msg, "block %zu: cannot copy it from the GPU hot tier", i);
                scdb_store_release(b->store, &blk);
                break;
            }
            db.payload = host_copy;
            db.payload_on_device = 0;
        }
        db.tokens = g->tokens + i * bt;
        db.n_tokens = (int)bt;
        db.block_index = (uint32_t)i;
        if (g->patch) {
            db.has_patch = 1;
            db.n_patch = g->patch->layers > INT32_MAX ? INT32_MAX : (int)g->patch->layers;
        }
        if (!a->dev)
            e = pair->dec.decode(pair->dec.ctx, &db, cache, (int)(g->slot0 + i * bt),
                                 (int32_t)(g->pos0 + (int64_t)(i * bt)), (int)bt);
        else if (pair->dec.decode_dev)   /* CUDA IPC arena: the device twins */
            e = pair->dec.decode_dev(pair->dec.ctx, scdb_k_ops_get(SCDB_DEV_CUDA), &db, cache,
                                     (int)(g->slot0 + i * bt),
                                     (int32_t)(g->pos0 + (int64_t)(i * bt)), (int)bt);
        else
            e = SCDB_EUNSUPPORTED;
        scdb_store_release(b->store, &blk);
        if (e) {
            snprintf(msg, sizeof msg, "block %zu: %s decoder failed", i, pair->dec.name);
            break;
        }
        written += bt;
    }
    gr.decode_ns = scdb_now_ns() - t0;
    j->work_ns = gr.decode_ns;
    free(host_copy);
    if (n_remote && !gap) {
        /* keep them: LMDB and the hot tier, through the writer (a put of
         * the same blocks queued after this get finds them there) */
        bk_job *ins = calloc(1, sizeof *ins);
        if (ins) {
            ins->op = BK_JOB_REMOTE_INSERT;
            ins->rblocks = rb;
            ins->n_rblocks = n_remote;
            zmq_msg_init(&ins->ident);
            bk_queue_push(&b->writes, ins);
            rb = NULL;
        }
    }
    if (rb) {
        scdb_remote_blocks_free(rb, n_remote);
        free(rb);
    }
    __atomic_store_n(&a->hdr->n, (uint32_t)cache->n, __ATOMIC_RELEASE);
    __atomic_add_fetch(&a->hdr->gen, 1, __ATOMIC_RELEASE);
    free(keys);

    gr.n_full = (uint32_t)n_full;
    gr.n_matched = (uint32_t)(n_matched + n_remote);
    gr.remote_blocks = (uint32_t)n_remote;
    gr.tokens_written = written;
    gr.cache_n = (uint32_t)cache->n;
    r.body_case = SCDB__REPLY__BODY_GET;
    r.get = &gr;
    bk_job_finish(j, e, &r, "%s", msg);
}

/* ------------------------------------------------------------- put, delete */

/* Store blocks [first, first + n_blocks) of tokens, block i's payload at
 * payloads[i] (block_bytes each), and finish the job with a PutReply. */
static void store_blocks(scdb_broker *b, bk_job *j, const int32_t *tokens, size_t n_tokens,
                         uint32_t first, uint32_t n_blocks, const void *const *payloads,
                         uint64_t block_bytes, int replace)
{
    const scdb_broker_codebook *cb = j->cb;
    uint32_t bt = b->block_tokens;
    size_t n_full = n_tokens / bt, nk = 0, n_stored = 0, nf, nm = 0;
    scdb_key *keys = NULL;
    scdb_block_put *puts = NULL;
    scdb_store_stat before, after;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__PutReply pr = SCDB__PUT_REPLY__INIT;
    scdb_err e = SCDB_OK;

    if (n_full && !(keys = malloc(n_full * sizeof *keys))) goto nomem;
    if (n_blocks && !(puts = calloc(n_blocks, sizeof *puts))) goto nomem;
    e = scdb_block_key_chain(&cb->ns, tokens, n_tokens, bt, keys, n_full, &nk);
    if (e) goto fail;
    for (uint32_t i = 0; i < n_blocks; i++) {
        uint32_t bi = first + i;
        scdb_block_put *u = &puts[i];
        u->key = keys[bi];
        if (bi) u->parent = keys[bi - 1];
        u->block_index = bi;
        u->payload_dtype = cb->payload_dtype;
        u->payload = payloads[i];
        u->payload_len = block_bytes;
        u->replace = replace;
    }
    scdb_store_stats(b->store, &before);
    e = scdb_store_put_batch(b->store, &cb->ns, puts, n_blocks, &n_stored);
    if (e == SCDB_ENOTFOUND && n_stored == 0 && b->remote && first) {
        /* the blocks before `first` are in the remote tier only (a lookup
         * found them there and no get brought them in): fetch, keep, retry */
        size_t nf0 = 0, nl = 0;
        if (!scdb_store_lookup(b->store, &cb->ns, tokens, n_tokens, NULL, 0, &nf0, &nl) &&
            bk_remote_fill_parents(b, cb, keys, nl, first)) {
            scdb_store_stats(b->store, &before);
            e = scdb_store_put_batch(b->store, &cb->ns, puts, n_blocks, &n_stored);
        }
    }
    scdb_store_stats(b->store, &after);
    if (scdb_store_lookup(b->store, &cb->ns, tokens, n_tokens, NULL, 0, &nf, &nm)) nm = 0;
    free(keys);
    free(puts);
    pr.n_full = (uint32_t)n_full;
    pr.n_stored = (uint32_t)nm;
    /* the store counts a replaced block in puts and in put_replaced: the
     * writer runs one job at a time, so the deltas are this call's */
    pr.n_replaced = (uint32_t)(after.put_replaced - before.put_replaced);
    pr.n_new = (uint32_t)(after.puts - before.puts) - pr.n_replaced;
    r.body_case = SCDB__REPLY__BODY_PUT;
    r.put = &pr;
    if (e == SCDB_ENOTFOUND)
        bk_job_finish(j, e, &r, "block %u's parent is not stored: put the blocks before it first",
               first);
    else if (e == SCDB_EBUSY && replace)
        bk_job_finish(j, e, &r, "block %zu is being read: replace it again", first + n_stored);
    else if (e == SCDB_ENOSPC)
        bk_job_finish(j, e, &r, "the filesystem of the broker's data directory %s is full (%llu "
                      "bytes free): block %zu of the batch and those after it are not stored",
                      scdb_store_path(b->store), (unsigned long long)after.disk_free_bytes,
                      first + n_stored);
    else if (e)
        bk_job_finish(j, e, &r, "store refused block %zu of the batch", first + n_stored);
    else
        bk_job_finish(j, e, &r, NULL);
    return;
nomem:
    e = SCDB_ENOMEM;
fail:
    free(keys);
    free(puts);
    bk_job_finish(j, e, NULL, "put failed");
}

static void run_put(scdb_broker *b, bk_job *j)
{
    const Scdb__PutRequest *p = j->req->put;
    uint64_t block_bytes = (uint64_t)b->block_tokens * j->cb->token_bytes;
    const void **pl = NULL;

    if (p->n_blocks && !(pl = malloc(p->n_blocks * sizeof *pl))) {
        bk_job_finish(j, SCDB_ENOMEM, NULL, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < p->n_blocks; i++) {
        size_t bad;
        char why[256] = "";
        pl[i] = zmq_msg_data(&j->frames[i]);
        /* a payload of NaN or Inf (or an int8 code's bad scale) would be
         * stored and decoded into every consumer's cache: refused, nothing
         * stored; the codebook's kind checks its own payloads */
        if (j->cb->check) {
            scdb_err ce = j->cb->check(j->cb->ctx, pl[i], (size_t)block_bytes, (int)b->block_tokens,
                                       why, sizeof why);
            if (ce) {
                bk_job_finish(j, ce, NULL, "block %u's payload: %s (nothing stored)",
                              p->first_block + i, why);
                free(pl);
                return;
            }
            continue;
        }
        if (scdb_k_find_nonfinite(pl[i], (size_t)block_bytes, (scdb_dtype)j->cb->payload_dtype,
                                  &bad)) {
            bk_job_finish(j, SCDB_ERANGE, NULL,
                          "block %u's payload is not finite: %s element %zu is NaN or Inf "
                          "(nothing stored)", p->first_block + i,
                          scdb_dtype_name((scdb_dtype)j->cb->payload_dtype), bad);
            free(pl);
            return;
        }
    }
    store_blocks(b, j, p->tokens, p->n_tokens, p->first_block, p->n_blocks, pl, block_bytes,
                 p->replace);
    free(pl);
}

/* Broker-side encode: the codebook encodes each block's rows of the
 * producer's states arena, then the blocks are stored as a put's. */
static void run_put_states(scdb_broker *b, bk_job *j)
{
    const Scdb__PutStatesRequest *p = j->req->put_states;
    const scdb_broker_codebook *cb = j->cb;
    uint32_t bt = b->block_tokens;
    uint32_t n_blocks = p->n_blocks ? p->n_blocks
                                    : (uint32_t)(p->n_tokens / bt) - p->first_block;
    uint64_t block_bytes = (uint64_t)bt * cb->token_bytes;
    /* packed: [states_layers][n_tokens][states_dim] (schema/FORMATS.md) */
    float *h_in = (float *)((char *)j->arena->map + SCDB_ARENA_HEADER_BYTES);
    const void **pl = NULL;
    char *buf = NULL;
    scdb_err e;

    uint32_t first = p->first_block;

    if (!p->replace && n_blocks) {
        /* blocks stored already are skipped, not encoded: a re-put of a
         * stored prompt reads no rows (they may be NaN: consumed) */
        size_t nf = 0, nm = 0;
        if (scdb_store_lookup(b->store, &cb->ns, p->tokens, p->n_tokens, NULL, 0, &nf, &nm))
            nm = 0;
        if (nm > first) {
            uint32_t skip = (uint32_t)nm - first < n_blocks ? (uint32_t)nm - first : n_blocks;
            first += skip;
            n_blocks -= skip;
        }
    }
    if (n_blocks == 0) {
        store_blocks(b, j, p->tokens, p->n_tokens, first, 0, NULL, block_bytes, p->replace);
        return;
    }
    if (!(pl = malloc(n_blocks * sizeof *pl)) || !(buf = malloc(n_blocks * block_bytes))) {
        free(pl);
        bk_job_finish(j, SCDB_ENOMEM, NULL, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n_blocks; i++) {
        int t0 = (int)((first + i) * bt);
        pl[i] = buf + i * block_bytes;
        e = cb->encode(cb->ctx, h_in, (int)p->n_tokens, t0, (int)bt, buf + i * block_bytes);
        if (e) {
            if (e == SCDB_ERANGE)
                bk_job_finish(j, e, NULL,
                              "block %u: the states of tokens %d..%d are not all finite or "
                              "were not written since the last put_states (NaN), or their "
                              "codes overflow f16: states are packed, token t of layer l "
                              "at row l * n_tokens + t (n_tokens = %zu, not the arena's "
                              "capacity %u); nothing stored", first + i, t0,
                              t0 + (int)bt - 1, p->n_tokens, j->arena->capacity);
            else
                bk_job_finish(j, e, NULL, "block %u: encode failed", first + i);
            free(pl);
            free(buf);
            return;
        }
    }
    store_blocks(b, j, p->tokens, p->n_tokens, first, n_blocks, pl, block_bytes, p->replace);
    if (j->status == SCDB_OK) {
        /* consumed: the encoded rows go back to NaN, so a later put_states
         * cannot encode them again without the producer writing them */
        size_t t0 = (size_t)first * bt, rows = (size_t)n_blocks * bt;
        for (int l = 0; l < cb->states_layers; l++)
            bk_states_poison(h_in + ((size_t)l * p->n_tokens + t0) * (size_t)cb->states_dim,
                             rows * (size_t)cb->states_dim);
    }
    free(pl);
    free(buf);
}

static void run_delete(scdb_broker *b, bk_job *j)
{
    const Scdb__DeleteRequest *d = j->req->del;
    uint32_t bt = b->block_tokens;
    size_t n_full = d->n_tokens / bt, nm = 0;
    scdb_key *keys = NULL;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__DeleteReply dr = SCDB__DELETE_REPLY__INIT;
    uint32_t deleted = 0;
    scdb_err e;

    if (n_full && !(keys = malloc(n_full * sizeof *keys))) {
        bk_job_finish(j, SCDB_ENOMEM, NULL, "out of memory");
        return;
    }
    e = scdb_store_lookup(b->store, &j->cb->ns, d->tokens, d->n_tokens, keys, n_full, &n_full,
                          &nm);
    for (size_t i = nm; !e && i > d->from_block; i--) {
        e = scdb_store_delete(b->store, &keys[i - 1]);
        if (!e) {
            deleted++;
            bk_remote_del(b, &keys[i - 1]);    /* the fleet's copy goes too */
        }
    }
    free(keys);
    dr.n_matched = (uint32_t)nm;
    dr.n_deleted = deleted;
    r.body_case = SCDB__REPLY__BODY_DEL;
    r.del = &dr;
    if (e == SCDB_EBUSY)
        bk_job_finish(j, e, &r, "block %u is pinned or has stored children", (unsigned)(nm - deleted - 1));
    else
        bk_job_finish(j, e, &r, e ? "delete failed" : NULL);
}

/* --------------------------------------------------------------- lookup */

/* A lookup that continues in the remote tier (LookupRequest.remote): the
 * local prefix, then one EXISTS round per cluster node for the rest. */
static void run_lookup(scdb_broker *b, bk_job *j)
{
    const Scdb__LookupRequest *l = j->req->lookup;
    uint32_t bt = b->block_tokens;
    size_t n_full = l->n_tokens / bt, n_local = 0, n_remote = 0;
    scdb_key *keys = NULL;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__LookupReply lr = SCDB__LOOKUP_REPLY__INIT;
    char lix_name[SCDB_LIX_NAME_MAX];
    scdb_err e;

    if (n_full && !(keys = malloc(n_full * sizeof *keys))) {
        bk_job_finish(j, SCDB_ENOMEM, NULL, "out of memory");
        return;
    }
    e = scdb_store_lookup(b->store, &j->cb->ns, l->tokens, l->n_tokens, keys, n_full, &n_full,
                          &n_local);
    if (e) {
        free(keys);
        bk_job_finish(j, e, NULL, "lookup failed");
        return;
    }
    n_remote = bk_remote_probe(b, keys, n_local, n_full);
    free(keys);
    lr.n_full = (uint32_t)n_full;
    lr.n_matched = (uint32_t)(n_local + n_remote);
    lr.matched_tokens = (uint32_t)((n_local + n_remote) * bt);
    lr.block_tokens = bt;
    lr.n_remote = (uint32_t)n_remote;
    bk_lix_name(b, lix_name, sizeof lix_name);
    lr.lookup_index = lix_name;
    r.body_case = SCDB__REPLY__BODY_LOOKUP;
    r.lookup = &lr;
    bk_job_finish(j, SCDB_OK, &r, NULL);
}

/* --------------------------------------------------------------- threads */

/* THREADING MODEL.  The broker's CPU work runs on its job threads
 * (cfg.workers workers and one writer); each is one core's worth of work
 * at most: BLAS runs single-threaded inside them (scdb_k_cpu_threads(1)
 * at start), since OpenBLAS's own threads, one set per calling thread,
 * spin in sched_yield against the workers and the clients for the same
 * cores.  Besides them, cfg.evict_threads eviction threads (default 1)
 * take session evictions and nothing else: an eviction is a few hundred
 * us of work on a decoding client's critical path, and with only the
 * workers it waited for whatever decode (tens of ms) held them all.  They
 * sleep unless an eviction is queued (the workers take evictions too
 * when they are free), so they add no steady CPU.  Placement: worker_cpus
 * pins every job thread to those cores; worker_nice sets the priority of
 * the workers and the writer, evict_nice that of the eviction threads,
 * each relative to the broker's own nice value when the threads start
 * (per thread: Linux's setpriority on a thread id).  An eviction is short
 * and a decode long: with both at one priority, a woken eviction thread
 * (and the main thread that hands its reply on) waits for the scheduler
 * to take a core from a decode, so evict_nice below worker_nice lets
 * evictions cut in.  The main thread is left where the process runs
 * (systemd's CPUAffinity= and Nice= place the whole process).  Threads
 * are named scdb-worker, scdb-evict and scdb-writer (top -H, perf). */

/* At start: the job threads report that they placed themselves. */
typedef struct placing {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;                   /* threads that tried                      */
    int err;                    /* the first failure's errno (0: none)     */
} placing;

typedef struct thread_arg {
    scdb_broker *b;
    bk_queue *q;
    int lane;                   /* the one lane it takes, or -1: any       */
    placing *pl;                /* NULL once reported                      */
    int nice;                   /* its nice value (absolute), or INT_MIN:
                                   the broker's own                        */
    const char *name;           /* its thread name                         */
} thread_arg;

/* Refresh what another broker replaced, drop what it deleted; what could
 * not be done now (a block being read, the cluster failing) goes to the
 * back of the queue, tried again after a short nap, up to REFRESH_ATTEMPTS
 * times. */
#define REFRESH_ATTEMPTS 100
static void run_refresh(scdb_broker *b, bk_job *j)
{
    size_t n_again = 0;
    int stopping;
    if (j->attempts) {
        struct timespec ts = {0, 20 * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    bk_remote_refresh(b, j->rkeys, j->n_rkeys, j->rkeys, &n_again);
    pthread_mutex_lock(&b->writes.mu);
    stopping = b->writes.stop;
    pthread_mutex_unlock(&b->writes.mu);
    if (n_again && ++j->attempts < REFRESH_ATTEMPTS && !stopping) {
        j->n_rkeys = n_again;
        bk_queue_push(&b->writes, j);
        return;
    }
    if (n_again)
        scdb_warn("remote tier: %zu block(s) replaced or deleted by another broker could not be "
                  "refreshed or dropped here (being read, stored children here, or the cluster "
                  "failing): their old local copies stay",
                  n_again);
    bk_job_free(j);
}

/* worker_cpus as a cpu_set_t: how many cores, -1 if it is not a list. */
static int cpu_set_of(const char *list, cpu_set_t *set)
{
    unsigned char cpus[SCDB_BROKER_MAX_CPUS];
    int n = scdb_broker_cpu_list(list, cpus);

    CPU_ZERO(set);
    for (int i = 0; n > 0 && i < SCDB_BROKER_MAX_CPUS && i < CPU_SETSIZE; i++)
        if (cpus[i]) CPU_SET(i, set);
    return n;
}

/* Pin and renice the calling thread as the config says (nice: absolute,
 * INT_MIN to leave it): 0 or an errno. */
static int place_thread(const scdb_broker_config *c, int nice)
{
    if (c->worker_cpus[0]) {
        cpu_set_t set;
        int rc;
        if (cpu_set_of(c->worker_cpus, &set) < 0) return EINVAL;
        if ((rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set))) return rc;
    }
    if (nice != INT_MIN && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice))
        return errno;
    return 0;
}

static void *thread_main(void *arg)
{
    thread_arg ta = *(thread_arg *)arg;
    scdb_broker *b = ta.b;
    void *push = zmq_socket(b->zctx, ZMQ_PUSH);
    int hwm = 0, pe;
    bk_job *j;

    free(arg);
    if (!push || zmq_setsockopt(push, ZMQ_SNDHWM, &hwm, sizeof hwm) ||
        zmq_connect(push, DONE_ENDPOINT)) {
        scdb_error("worker: cannot connect %s: %s", DONE_ENDPOINT, zmq_strerror(zmq_errno()));
        abort();    /* inproc to our own context: a programming error */
    }
    pthread_setname_np(pthread_self(), ta.name);
    pe = place_thread(&b->cfg, ta.nice);
    pthread_mutex_lock(&ta.pl->mu);
    if (pe && !ta.pl->err) ta.pl->err = pe;
    ta.pl->done++;
    pthread_cond_signal(&ta.pl->cv);
    pthread_mutex_unlock(&ta.pl->mu);
    while ((j = ta.lane < 0 ? bk_queue_pop(ta.q) : bk_queue_pop_lane(ta.q, ta.lane))) {
        if (j->op == BK_JOB_REMOTE_INSERT) {   /* internal: nobody waits for it */
            bk_remote_insert(b, j->rblocks, j->n_rblocks);
            bk_job_free(j);
            continue;
        }
        if (j->op == BK_JOB_REMOTE_REFRESH) {  /* internal: another broker's replace */
            run_refresh(b, j);
            continue;
        }
        switch (j->op) {
        case OP_GET: run_get(b, j); break;
        case OP_LOOKUP: run_lookup(b, j); break;
        case OP_PUT: run_put(b, j); break;
        case OP_PUT_STATES: run_put_states(b, j); break;
        case OP_DELETE: run_delete(b, j); break;
        case OP_SESSION_EVICT: bk_session_run_evict(b, j); break;
        default: bk_job_finish(j, SCDB_EPROTO, NULL, "not a job"); break;
        }
        j->t_end_ns = scdb_now_ns();
        while (zmq_send(push, &j, sizeof j, 0) < 0 && zmq_errno() == EINTR) {}
    }
    zmq_close(push);
    return NULL;
}

static int start(scdb_broker *b, bk_queue *q, int lane, pthread_t *t, placing *pl, int nice,
                 const char *name)
{
    thread_arg *a = malloc(sizeof *a);
    if (!a) return -1;
    a->b = b;
    a->q = q;
    a->lane = lane;
    a->pl = pl;
    a->nice = nice;
    a->name = name;
    if (pthread_create(t, NULL, thread_main, a)) {
        free(a);
        return -1;
    }
    return 0;
}

scdb_err bk_threads_start(scdb_broker *b, char *errbuf, size_t errlen)
{
    const scdb_broker_config *c = &b->cfg;
    sigset_t all, old;
    placing pl = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    int n_cpus = 0, n_started, own, wnice, enice;
    cpu_set_t set;

    if (c->worker_cpus[0] && (n_cpus = cpu_set_of(c->worker_cpus, &set)) < 0) {
        snprintf(errbuf, errlen, "bad worker_cpus '%s'", c->worker_cpus);
        return SCDB_EINVAL;
    }
    if (!n_cpus && !sched_getaffinity(0, sizeof set, &set)) n_cpus = CPU_COUNT(&set);
    /* one BLAS thread per job thread: workers x BLAS never exceed the cores */
    scdb_k_cpu_threads(1);
    if (n_cpus > 0 && c->workers > n_cpus)
        scdb_warn("%d workers on %d core%s (%s): more workers than cores only adds "
                  "switches; workers = %d is the most that helps", c->workers, n_cpus,
                  n_cpus > 1 ? "s" : "", c->worker_cpus[0] ? "worker_cpus" : "the process's",
                  n_cpus);
    bk_queue_init(&b->jobs);
    bk_queue_init(&b->writes);
    b->workers = calloc((size_t)c->workers, sizeof *b->workers);
    b->evictors = calloc((size_t)c->evict_threads + 1, sizeof *b->evictors);
    if (!b->workers || !b->evictors) {
        snprintf(errbuf, errlen, "out of memory");
        return SCDB_ENOMEM;
    }
    /* threads never take the signals: the main thread does */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    errno = 0;
    own = getpriority(PRIO_PROCESS, 0);
    if (own == -1 && errno) own = 0;
    /* relative to the broker's own; setpriority clamps to -20 .. 19 */
    wnice = c->worker_nice ? own + c->worker_nice : INT_MIN;
    enice = c->evict_nice ? own + c->evict_nice : INT_MIN;
    if (start(b, &b->writes, -1, &b->writer, &pl, wnice, "scdb-writer") == 0) b->writer_started = 1;
    for (int i = 0; b->writer_started && i < c->workers; i++) {
        if (start(b, &b->jobs, -1, &b->workers[i], &pl, wnice, "scdb-worker")) break;
        b->n_workers++;
    }
    for (int i = 0; b->n_workers == c->workers && i < c->evict_threads; i++) {
        if (start(b, &b->jobs, BK_LANE_BACK, &b->evictors[i], &pl, enice, "scdb-evict")) break;
        b->n_evictors++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* every started thread reports before it takes a job (pl lives here) */
    n_started = b->writer_started + b->n_workers + b->n_evictors;
    pthread_mutex_lock(&pl.mu);
    while (pl.done < n_started) pthread_cond_wait(&pl.cv, &pl.mu);
    pthread_mutex_unlock(&pl.mu);
    pthread_mutex_destroy(&pl.mu);
    pthread_cond_destroy(&pl.cv);
    if (!b->writer_started || b->n_workers != c->workers || b->n_evictors != c->evict_threads) {
        snprintf(errbuf, errlen, "cannot start threads (%d of %d workers, %d of %d eviction "
                 "threads and %s writer)", b->n_workers, c->workers, b->n_evictors,
                 c->evict_threads, b->writer_started ? "the" : "no");
        return SCDB_ESYS;
    }
    if (pl.err) {
        int place_errno = pl.err;
        snprintf(errbuf, errlen, "cannot place the job threads (worker_cpus '%s', worker_nice "
                 "%d, evict_nice %d): %s%s", c->worker_cpus, c->worker_nice, c->evict_nice,
                 strerror(place_errno),
                 place_errno == EPERM || place_errno == EACCES
                     ? " (a negative worker_nice or evict_nice needs CAP_SYS_NICE: "
                       "AmbientCapabilities=CAP_SYS_NICE, or systemd's Nice= for the whole "
                       "process)"
                 : place_errno == EINVAL ? " (a core outside the ones this process may use?)"
                                         : "");
        return SCDB_ESYS;
    }
    if (c->worker_cpus[0] || c->worker_nice || c->evict_nice)
        scdb_info("job threads on cores %s; nice: broker %d, workers and writer %d, eviction "
                  "threads %d", c->worker_cpus[0] ? c->worker_cpus : "(any)", own,
                  wnice == INT_MIN ? own : wnice, enice == INT_MIN ? own : enice);
    return SCDB_OK;
}

void bk_threads_stop(scdb_broker *b)
{
    if (!b->workers && !b->evictors && !b->writer_started) return;
    /* workers first: a get may still hand the writer blocks to keep */
    bk_queue_stop(&b->jobs);
    for (int i = 0; i < b->n_workers; i++) pthread_join(b->workers[i], NULL);
    for (int i = 0; i < b->n_evictors; i++) pthread_join(b->evictors[i], NULL);
    bk_queue_stop(&b->writes);
    if (b->writer_started) pthread_join(b->writer, NULL);
    free(b->workers);
    free(b->evictors);
    b->workers = NULL;
    b->evictors = NULL;
    b->n_workers = 0;
    b->n_evictors = 0;
    b->writer_started = 0;
    bk_queue_destroy(&b->jobs);
    bk_queue_destroy(&b->writes);
}
