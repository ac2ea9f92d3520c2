/* metrics.c — the broker's Prometheus endpoint: GET /metrics over HTTP
 * (libmicrohttpd, one thread of its own), the histograms, and the lookup
 * counts clients report.  broker.h, "METRICS", has the design: the HTTP
 * thread formats a snapshot the main loop copies on request; it never
 * reads the broker's counters itself, and the main loop never waits for it.
 *
 *   HTTP thread                          main thread (event loop)
 *   -----------                          ------------------------
 *   lock; want = ++m->want; unlock
 *   write(self-pipe)  ---- wakes ---->   bk_metrics_poll: want > have?
 *   wait (<= 1 s) for have >= want        copy counters, store stats,
 *                                         queue depths into a local snap
 *                     <--- signal ----    lock; m->snap = snap; have = want;
 *   copy m->snap; unlock                  broadcast; unlock
 *   format text, reply
 */
#include "broker_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Upper bounds of the histogram buckets, in seconds (the last bucket of
 * bk_hist counts what is above them all). */
static const double bounds[BK_HIST_BUCKETS] = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
    2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
};

/* The stage histograms' bounds (s): 1 us .. 10 s, 8 per decade (10^(k/8)),
 * fine enough that a p99 read from them is within a third of the true one. */
static const double stage_bounds[BK_STAGE_BUCKETS] = {
    1e-06, 1.334e-06, 1.778e-06, 2.371e-06, 3.162e-06, 4.217e-06, 5.623e-06, 7.499e-06,
    1e-05, 1.334e-05, 1.778e-05, 2.371e-05, 3.162e-05, 4.217e-05, 5.623e-05, 7.499e-05,
    0.0001, 0.0001334, 0.0001778, 0.0002371, 0.0003162, 0.0004217, 0.0005623, 0.0007499,
    0.001, 0.001334, 0.001778, 0.002371, 0.003162, 0.004217, 0.005623, 0.007499,
    0.01, 0.01334, 0.01778, 0.02371, 0.03162, 0.04217, 0.05623, 0.07499,
    0.1, 0.1334, 0.1778, 0.2371, 0.3162, 0.4217, 0.5623, 0.7499,
    1, 1.334, 1.778, 2.371, 3.162, 4.217, 5.623, 7.499, 10,
};
static const char *const stage_names[BK_N_STAGES] = {"dispatch", "queue", "service", "handoff",
                                                     "total"};
/* the job ops the stages are kept for, in h_stage's order */
static const bk_op stage_ops[BK_N_STAGE_OPS] = {OP_GET, OP_LOOKUP, OP_PUT, OP_PUT_STATES,
                                                OP_DELETE, OP_SESSION_EVICT};

#define SNAPSHOT_WAIT_MS 1000

typedef struct bk_metrics bk_metrics;

/* What one scrape shows: the main thread's copy. */
typedef struct snap {
    double taken;               /* scdb_now() when copied                  */
    double uptime_s;
    uint64_t instance;
    scdb_store_stat st;
    int have_store;
    int hot_on_device;
    bk_opstat ops[OP_COUNT];
    uint64_t status_count[OP_COUNT][SCDB_ERR_COUNT];
    bk_hist h_get, h_decode, h_evict;
    bk_stage_hist h_stage[BK_N_STAGES][BK_N_STAGE_OPS];
    uint64_t requests, stale_tokens, clients, arenas, arena_bytes, sessions;
    uint64_t reclaimed_clients, reclaimed_arenas, reclaimed_sessions;
    uint64_t index_lookups, index_fallbacks;
    uint64_t reloads, reload_failures, generation;
    int inflight, q_jobs, q_writes, workers;
    int n_models, n_codebooks, n_pairs, n_policies;
    uint32_t block_tokens;
    scdb_remote_stat rt;        /* the remote tier's counters ...          */
    int have_remote;            /* ... when there is one                   */
    uint64_t remote_kept, remote_refreshed;
} snap;

struct bk_metrics {
    struct MHD_Daemon *d;
    int wake_fd;                /* the broker's self-pipe (write end)      */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t want, have;        /* snapshot requests asked / answered      */
    int valid;                  /* snap holds one                          */
    snap s;
};

/* ------------------------------------------------------------ counters */

static void hist_add(bk_hist *h, uint64_t ns)
{
    double s = ns / 1e9;
    int i = 0;
    while (i < BK_HIST_BUCKETS && s > bounds[i]) i++;
    h->n[i]++;
    h->count++;
    h->sum_ns += ns;
}

static void stage_add(bk_stage_hist *h, uint64_t t_from, uint64_t t_to)
{
    uint64_t ns = t_to > t_from ? t_to - t_from : 0;
    double s = ns / 1e9;
    int lo = 0, hi = BK_STAGE_BUCKETS;   /* first bound >= s: binary search */

    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s > stage_bounds[mid])
            lo = mid + 1;
        else
            hi = mid;
    }
    h->n[lo]++;
    h->count++;
    h->sum_ns += ns;
}

void bk_metrics_job_done(scdb_broker *b, const bk_job *j)
{
    uint64_t now = scdb_now_ns();

    for (int k = 0; k < BK_N_STAGE_OPS; k++) {
        bk_stage_hist *h;
        if (stage_ops[k] != j->op) continue;
        h = &b->h_stage[0][k];
        stage_add(&h[BK_STAGE_DISPATCH * BK_N_STAGE_OPS], j->t0_ns, j->t_queued_ns);
        stage_add(&h[BK_STAGE_QUEUE * BK_N_STAGE_OPS], j->t_queued_ns, j->t_start_ns);
        stage_add(&h[BK_STAGE_SERVICE * BK_N_STAGE_OPS], j->t_start_ns, j->t_end_ns);
        stage_add(&h[BK_STAGE_HANDOFF * BK_N_STAGE_OPS], j->t_end_ns, now);
        stage_add(&h[BK_STAGE_TOTAL * BK_N_STAGE_OPS], j->t0_ns, now);
    }
    if (j->op == OP_GET) {
        hist_add(&b->h_get, scdb_now_ns() - j->t0_ns);
        if (j->work_ns) hist_add(&b->h_decode, j->work_ns);
    } else if (j->op == OP_SESSION_EVICT && j->status == SCDB_OK) {
        hist_add(&b->h_evict, j->work_ns);
    }
}

void bk_metrics_client_report(scdb_broker *b, bk_client *c, uint64_t index_lookups,
                              uint64_t index_fallbacks)
{
    /* cumulative per handle: add the growth (a smaller value is a report
     * from before a reordering, or another handle: take it as the base) */
    if (index_lookups > c->rep_index_lookups)
        b->index_lookups += index_lookups - c->rep_index_lookups;
    if (index_fallbacks > c->rep_index_fallbacks)
        b->index_fallbacks += index_fallbacks - c->rep_index_fallbacks;
    c->rep_index_lookups = index_lookups;
    c->rep_index_fallbacks = index_fallbacks;
}

/* ------------------------------------------------------------ snapshot */

static void take(scdb_broker *b, snap *s)
{
    memset(s, 0, sizeof *s);
    s->taken = scdb_now();
    s->uptime_s = s->taken - b->t_start;
    s->instance = b->instance;
    s->have_store = scdb_store_stats(b->store, &s->st) == SCDB_OK;
    s->hot_on_device = b->hot_on_device;
    memcpy(s->ops, b->ops, sizeof s->ops);
    memcpy(s->status_count, b->status_count, sizeof s->status_count);
    s->h_get = b->h_get;
    s->h_decode = b->h_decode;
    s->h_evict = b->h_evict;
    memcpy(s->h_stage, b->h_stage, sizeof s->h_stage);
    s->requests = b->requests;
    s->stale_tokens = b->stale_tokens;
    s->clients = b->n_clients;
    s->arenas = b->n_arenas;
    s->arena_bytes = b->arena_bytes;
    s->sessions = b->n_sessions;
    s->reclaimed_clients = b->reclaimed_clients;
    s->reclaimed_arenas = b->reclaimed_arenas;
    s->reclaimed_sessions = b->reclaimed_sessions;
    s->index_lookups = b->index_lookups;
    s->index_fallbacks = b->index_fallbacks;
    s->reloads = b->reloads;
    s->reload_failures = b->reload_failures;
    s->generation = b->reg->generation;
    s->inflight = b->inflight;
    s->q_jobs = __atomic_load_n(&b->jobs.len, __ATOMIC_RELAXED);
    s->q_writes = __atomic_load_n(&b->writes.len, __ATOMIC_RELAXED);
    s->workers = b->n_workers;
    s->n_models = b->reg->n_models;
    s->n_codebooks = b->reg->n_codebooks;
    s->n_pairs = b->reg->n_pairs;
    s->n_policies = b->reg->n_policies;
    s->block_tokens = b->block_tokens;
    if (b->remote) {
        scdb_remote_stats(b->remote, &s->rt);
        s->have_remote = 1;
        s->remote_kept = __atomic_load_n(&b->remote_inserted, __ATOMIC_RELAXED);
        s->remote_refreshed = __atomic_load_n(&b->remote_refreshed, __ATOMIC_RELAXED);
    }
}

void bk_metrics_poll(scdb_broker *b)
{
    bk_metrics *m = b->metrics;
    uint64_t want;
    snap *s;

    if (!m) return;
    want = __atomic_load_n(&m->want, __ATOMIC_ACQUIRE);
    if (want == m->have) return;     /* have: written by this thread only */
    s = malloc(sizeof *s);
    if (!s) return;                  /* the scrape gets the previous one  */
    take(b, s);
    pthread_mutex_lock(&m->mu);
    m->s = *s;
    m->valid = 1;
    m->have = want;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    free(s);
}

/* A fresh snapshot into *out, or the last one if the loop does not answer
 * in time; 0 if there is none at all. */
static int fetch(bk_metrics *m, snap *out)
{
    struct timespec until;
    uint64_t want;
    int ok;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += SNAPSHOT_WAIT_MS / 1000;
    until.tv_nsec += (SNAPSHOT_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&m->mu);
    want = __atomic_add_fetch(&m->want, 1, __ATOMIC_RELEASE);
    (void)!write(m->wake_fd, "M", 1);
    while (m->have < want)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &until) == ETIMEDOUT) break;
    ok = m->valid;
    if (ok) *out = m->s;
    pthread_mutex_unlock(&m->mu);
    return ok;
}

/* ------------------------------------------------------------ text format */

typedef struct buf {
    char *p;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *o, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (o->oom) return;
    for (;;) {
        size_t room = o->cap - o->len;
        va_start(ap, fmt);
        n = vsnprintf(o->p + o->len, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = 1;
            return;
        }
        if ((size_t)n < room) break;
        size_t cap = o->cap * 2 + (size_t)n;
        char *q = realloc(o->p, cap);
        if (!q) {
            o->oom = 1;
            return;
        }
        o->p = q;
        o->cap = cap;
    }
    o->len += (size_t)n;
}

static void family(buf *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u(buf *o, const char *name, const char *labels, uint64_t v)
{
    put(o, "%s%s%s%s %llu\n", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "",
        (unsigned long long)v);
}

static void one_u(buf *o, const char *name, const char *type, const char *help, uint64_t v)
{
    family(o, name, type, help);
    sample_u(o, name, NULL, v);
}

static void hist(buf *o, const char *name, const char *help, const bk_hist *h)
{
    uint64_t cum = 0;
    family(o, name, "histogram", help);
    for (int i = 0; i < BK_HIST_BUCKETS; i++) {
        cum += h->n[i];
        put(o, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += h->n[BK_HIST_BUCKETS];
    put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    put(o, "%s_sum %.9f\n", name, h->sum_ns / 1e9);
    put(o, "%s_count %llu\n", name, (unsigned long long)h->count);
}

/* The stage histograms: one family, labelled by op and stage. */
static void stage_hists(buf *o, const snap *s)
{
    family(o, "scdb_job_stage_seconds", "histogram",
           "Where a job's time goes, per op: dispatch (received -> queued, main thread), "
           "queue (waiting for a worker or the writer), service (on that thread), handoff "
           "(finished -> reply sent by the main thread), total (received -> reply sent).");
    for (int k = 0; k < BK_N_STAGE_OPS; k++)
        for (int st = 0; st < BK_N_STAGES; st++) {
            const bk_stage_hist *h = &s->h_stage[st][k];
            const char *op = bk_op_names[stage_ops[k]];
            uint64_t cum = 0;
            for (int i = 0; i < BK_STAGE_BUCKETS; i++) {
                cum += h->n[i];
                put(o, "scdb_job_stage_seconds_bucket{op=\"%s\",stage=\"%s\",le=\"%g\"} %llu\n",
                    op, stage_names[st], stage_bounds[i], (unsigned long long)cum);
            }
            cum += h->n[BK_STAGE_BUCKETS];
            put(o, "scdb_job_stage_seconds_bucket{op=\"%s\",stage=\"%s\",le=\"+Inf\"} %llu\n",
                op, stage_names[st], (unsigned long long)cum);
            put(o, "scdb_job_stage_seconds_sum{op=\"%s\",stage=\"%s\"} %.9f\n", op,
                stage_names[st], h->sum_ns / 1e9);
            put(o, "scdb_job_stage_seconds_count{op=\"%s\",stage=\"%s\"} %llu\n", op,
                stage_names[st], (unsigned long long)h->count);
        }
}

/* "SCDB_ENOTFOUND: not found" -> "SCDB_ENOTFOUND" */
static void err_name(scdb_err e, char *out, size_t len)
{
    const char *s = scdb_strerror(e), *colon = strchr(s, ':');
    snprintf(out, len, "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
}

/* A store tier as the metrics show it.  To add one (the remote tier),
 * give it a row in tiers() with its name and counters. */
typedef struct tier_row {
    const char *name;
    uint64_t hits, misses, bytes, blocks, evictions;
    double capacity;            /* bytes; INFINITY-like: unbounded         */
    int unbounded;
} tier_row;

static int tiers(const snap *s, tier_row *t)
{
    const scdb_store_stat *st = &s->st;
    int n = 0;
    /* a block read first asks the hot tier; what it lacks goes to LMDB */
    t[n++] = (tier_row){.name = s->hot_on_device ? "gpu_hot" : "hot",
                        .hits = st->get_hot_hits,
                        .misses = st->get_disk_hits + st->get_misses,
                        .bytes = st->hot_bytes, .blocks = st->hot_blocks,
                        .evictions = st->hot_evictions,
                        .capacity = (double)st->hot_capacity_bytes};
    t[n++] = (tier_row){.name = "lmdb", .hits = st->get_disk_hits, .misses = st->get_misses,
                        .bytes = st->disk_bytes, .blocks = st->blocks,
                        .evictions = st->evictions,
                        .capacity = (double)st->disk_capacity_bytes,
                        .unbounded = st->disk_capacity_bytes == 0};
    return n;
}

static void format(const snap *s, double age, buf *o)
{
    char lab[160], en[32];
    tier_row t[4];
    int nt;

    family(o, "scdb_build_info", "gauge", "The broker's version and instance (random per start).");
    put(o, "scdb_build_info{version=\"%s\",instance=\"%016llx\"} 1\n", SCDB_BROKER_VERSION,
        (unsigned long long)s->instance);
    family(o, "scdb_uptime_seconds", "gauge", "Seconds since the broker started.");
    put(o, "scdb_uptime_seconds %.3f\n", s->uptime_s);
    family(o, "scdb_metrics_snapshot_age_seconds", "gauge",
           "Age of the counters shown (0 unless the event loop was too busy to answer).");
    put(o, "scdb_metrics_snapshot_age_seconds %.3f\n", age);

    family(o, "scdb_requests_total", "counter",
           "Requests answered, by kind and status (an scdb_err name).");
    for (int op = 1; op < OP_COUNT; op++)
        for (int e = 0; e < SCDB_ERR_COUNT; e++) {
            if (e && !s->status_count[op][e]) continue;
            err_name((scdb_err)e, en, sizeof en);
            snprintf(lab, sizeof lab, "kind=\"%s\",status=\"%s\"", bk_op_names[op], en);
            sample_u(o, "scdb_requests_total", lab, s->status_count[op][e]);
        }
    family(o, "scdb_request_errors_total", "counter",
           "Requests answered with an error, by kind (stale tokens not included).");
    for (int op = 1; op < OP_COUNT; op++) {
        snprintf(lab, sizeof lab, "kind=\"%s\"", bk_op_names[op]);
        sample_u(o, "scdb_request_errors_total", lab, s->ops[op].errors);
    }
    family(o, "scdb_request_seconds_total", "counter",
           "Broker time spent on requests (receipt to reply), by kind.");
    for (int op = 1; op < OP_COUNT; op++)
        put(o, "scdb_request_seconds_total{kind=\"%s\"} %.9f\n", bk_op_names[op],
            s->ops[op].total_ns / 1e9);
    one_u(o, "scdb_stale_token_requests_total", "counter",
          "Requests with a token from before a broker restart or a reclaim: answered "
          "SCDB_ECLOSED so the client registers again; not errors.", s->stale_tokens);

    family(o, "scdb_lookups_total", "counter",
           "Prefix lookups, by who answered: the client's own map of the lookup index "
           "(reported in heartbeats and goodbyes) or the broker (a request).");
    sample_u(o, "scdb_lookups_total", "answered_by=\"index\"", s->index_lookups);
    sample_u(o, "scdb_lookups_total", "answered_by=\"request\"", s->ops[OP_LOOKUP].count);
    one_u(o, "scdb_lookup_index_fallbacks_total", "counter",
          "Client lookups the index could not answer (busy or retired) that became requests.",
          s->index_fallbacks);

    if (s->have_store) {
        const scdb_store_stat *st = &s->st;
        nt = tiers(s, t);
        family(o, "scdb_tier_hits_total", "counter", "Block reads a store tier answered.");
        for (int i = 0; i < nt; i++) {
            snprintf(lab, sizeof lab, "tier=\"%s\"", t[i].name);
            sample_u(o, "scdb_tier_hits_total", lab, t[i].hits);
        }
        family(o, "scdb_tier_misses_total", "counter",
               "Block reads a store tier did not hold (passed to the next tier, or missed).");
        for (int i = 0; i < nt; i++) {
            snprintf(lab, sizeof lab, "tier=\"%s\"", t[i].name);
            sample_u(o, "scdb_tier_misses_total", lab, t[i].misses);
        }
        family(o, "scdb_tier_evictions_total", "counter", "Blocks a store tier evicted.");
        for (int i = 0; i < nt; i++) {
            snprintf(lab, sizeof lab, "tier=\"%s\"", t[i].name);
            sample_u(o, "scdb_tier_evictions_total", lab, t[i].evictions);
        }
        family(o, "scdb_tier_stored_bytes", "gauge", "Bytes a store tier holds.");
        for (int i = 0; i < nt; i++) {
            snprintf(lab, sizeof lab, "tier=\"%s\"", t[i].name);
            sample_u(o, "scdb_tier_stored_bytes", lab, t[i].bytes);
        }
        family(o, "scdb_tier_capacity_bytes", "gauge",
               "A store tier's byte capacity (+Inf: unbounded; 0 for hot: no hot tier).");
        for (int i = 0; i < nt; i++) {
            if (t[i].unbounded)
                put(o, "scdb_tier_capacity_bytes{tier=\"%s\"} +Inf\n", t[i].name);
            else
                put(o, "scdb_tier_capacity_bytes{tier=\"%s\"} %.0f\n", t[i].name,
                    t[i].capacity);
        }
        family(o, "scdb_tier_blocks", "gauge", "Blocks a store tier holds.");
        for (int i = 0; i < nt; i++) {
            snprintf(lab, sizeof lab, "tier=\"%s\"", t[i].name);
            sample_u(o, "scdb_tier_blocks", lab, t[i].blocks);
        }
        family(o, "scdb_store_block_reads_total", "counter",
               "Block reads (get and acquire), every tier together.");
        sample_u(o, "scdb_store_block_reads_total", NULL, st->gets);
        family(o, "scdb_store_blocks_written_total", "counter",
               "Blocks put, by whether they were new or already stored.");
        sample_u(o, "scdb_store_blocks_written_total", "result=\"new\"", st->puts);
        sample_u(o, "scdb_store_blocks_written_total", "result=\"existing\"", st->put_existing);
        family(o, "scdb_store_lookup_blocks_total", "counter",
               "Full blocks of the broker's own prefix lookups, matched or not.");
        sample_u(o, "scdb_store_lookup_blocks_total", "result=\"hit\"", st->lookup_hit_blocks);
        sample_u(o, "scdb_store_lookup_blocks_total", "result=\"miss\"", st->lookup_miss_blocks);
        one_u(o, "scdb_store_lookups_total", "counter", "Prefix lookups the store ran.",
              st->lookups);
        one_u(o, "scdb_checksum_failures_total", "counter",
              "Stored values that failed their checksum (read as misses).",
              st->checksum_failures);
        one_u(o, "scdb_store_pinned_blocks", "gauge", "Blocks pinned by reads in progress.",
              st->pinned_blocks);
        one_u(o, "scdb_lmdb_file_bytes", "gauge", "Size of data.mdb.", st->file_bytes);
        one_u(o, "scdb_lmdb_map_bytes", "gauge", "The LMDB map size.", st->map_bytes);
        one_u(o, "scdb_lmdb_map_growths_total", "counter", "LMDB map growths (MDB_MAP_FULL).",
              st->map_growths);
        one_u(o, "scdb_store_disk_full", "gauge",
              "1 while the store's filesystem is full and puts are refused (SCDB_ENOSPC).",
              st->disk_full);
        one_u(o, "scdb_store_disk_full_refused_blocks_total", "counter",
              "Blocks a put did not store because the store's filesystem was full.",
              st->disk_full_refusals);
    }

    if (s->have_remote) {             /* [remote]: the fleet's Redis Cluster */
        const scdb_remote_stat *rt = &s->rt;
        one_u(o, "scdb_remote_up", "gauge", "1 while the remote tier's cluster answers.",
              (uint64_t)rt->up);
        family(o, "scdb_remote_blocks_total", "counter",
               "Blocks asked of the remote tier past a local prefix, by result.");
        sample_u(o, "scdb_remote_blocks_total", "result=\"hit\"", rt->hits);
        sample_u(o, "scdb_remote_blocks_total", "result=\"miss\"", rt->misses);
        sample_u(o, "scdb_remote_blocks_total", "result=\"refused\"", rt->invalid);
        family(o, "scdb_remote_bytes_total", "counter",
               "Block value bytes moved to and from the cluster.");
        sample_u(o, "scdb_remote_bytes_total", "direction=\"read\"", rt->bytes_read);
        sample_u(o, "scdb_remote_bytes_total", "direction=\"written\"", rt->bytes_written);
        one_u(o, "scdb_remote_writes_total", "counter", "Block values the cluster acknowledged.",
              rt->writes);
        family(o, "scdb_remote_write_failures_total", "counter",
               "Block writes that never reached the cluster, by cause.");
        sample_u(o, "scdb_remote_write_failures_total", "cause=\"queue_full\"", rt->queue_drops);
        sample_u(o, "scdb_remote_write_failures_total", "cause=\"error\"", rt->write_errors);
        one_u(o, "scdb_remote_errors_total", "counter",
              "Failed cluster operations and refused values.", rt->errors);
        one_u(o, "scdb_remote_pending_writes", "gauge",
              "Writes queued for the cluster or in flight.", rt->pending);
        one_u(o, "scdb_remote_kept_blocks_total", "counter",
              "Blocks fetched from the cluster and kept in the local store.", s->remote_kept);
        /* the rest of what `scdb stats` shows of the tier (issue 42 item 8) */
        one_u(o, "scdb_remote_probes_total", "counter",
              "Lookup remainders asked of the cluster (one EXISTS round per node each).",
              rt->probes);
        family(o, "scdb_remote_probe_blocks_total", "counter",
               "Blocks of lookup remainders asked of the cluster, by result.");
        sample_u(o, "scdb_remote_probe_blocks_total", "result=\"hit\"", rt->probe_hit_blocks);
        sample_u(o, "scdb_remote_probe_blocks_total", "result=\"miss\"", rt->probe_miss_blocks);
        one_u(o, "scdb_remote_fetches_total", "counter",
              "Get remainders (and refreshes) fetched from the cluster.", rt->fetches);
        one_u(o, "scdb_remote_state_changes_total", "counter",
              "Changes of the cluster's state between answering and failing.",
              rt->state_changes);
        family(o, "scdb_remote_replace_log_records_total", "counter",
               "Records of the fleet's replace log (replaced or deleted blocks): appended by "
               "this broker, or read from other brokers.");
        sample_u(o, "scdb_remote_replace_log_records_total", "direction=\"appended\"",
                 rt->replace_records);
        sample_u(o, "scdb_remote_replace_log_records_total", "direction=\"read\"",
                 rt->replace_seen);
        one_u(o, "scdb_remote_replace_log_resets_total", "counter",
              "Times the replace log was found rewritten (deleted or evicted) and read again "
              "from its start.", rt->replace_log_resets);
        one_u(o, "scdb_remote_refreshed_blocks_total", "counter",
              "Local copies refreshed or dropped after another broker replaced or deleted "
              "the block.", s->remote_refreshed);
    }

    one_u(o, "scdb_clients", "gauge", "Registered clients.", s->clients);
    one_u(o, "scdb_arenas", "gauge", "Shared-memory arenas live (sessions' included).",
          s->arenas);
    one_u(o, "scdb_arena_bytes", "gauge", "Bytes of all live arenas.", s->arena_bytes);
    one_u(o, "scdb_sessions", "gauge", "Live sessions.", s->sessions);
    one_u(o, "scdb_reclaimed_clients_total", "counter",
          "Clients reclaimed after heartbeat_timeout_ms of silence.", s->reclaimed_clients);
    one_u(o, "scdb_reclaimed_arenas_total", "counter", "Arenas freed with reclaimed clients.",
          s->reclaimed_arenas);
    one_u(o, "scdb_reclaimed_sessions_total", "counter",
          "Sessions closed with reclaimed clients.", s->reclaimed_sessions);
    one_u(o, "scdb_inflight_requests", "gauge", "Requests handed to a thread, not yet answered.",
          (uint64_t)s->inflight);
    family(o, "scdb_queue_depth", "gauge", "Jobs waiting for a thread, by queue.");
    sample_u(o, "scdb_queue_depth", "queue=\"workers\"", (uint64_t)s->q_jobs);
    sample_u(o, "scdb_queue_depth", "queue=\"writer\"", (uint64_t)s->q_writes);
    one_u(o, "scdb_workers", "gauge", "Decode / read threads.", (uint64_t)s->workers);
    one_u(o, "scdb_block_tokens", "gauge", "Tokens per block of the store.", s->block_tokens);

    hist(o, "scdb_get_duration_seconds",
         "Get requests, receipt to reply (queueing, reads and decode).", &s->h_get);
    hist(o, "scdb_decode_duration_seconds", "Decode time of a get's blocks into its arena.",
         &s->h_decode);
    hist(o, "scdb_eviction_duration_seconds",
         "Live-session evictions: score, select and compact.", &s->h_evict);
    stage_hists(o, s);

    family(o, "scdb_config_reloads_total", "counter", "SIGHUP reloads, by result.");
    sample_u(o, "scdb_config_reloads_total", "result=\"applied\"", s->reloads);
    sample_u(o, "scdb_config_reloads_total", "result=\"failed\"", s->reload_failures);
    one_u(o, "scdb_config_generation", "gauge",
          "The loaded configuration: 1 at start, +1 per applied reload.", s->generation);
    family(o, "scdb_registry_entries", "gauge", "What the current configuration loaded.");
    sample_u(o, "scdb_registry_entries", "kind=\"models\"", (uint64_t)s->n_models);
    sample_u(o, "scdb_registry_entries", "kind=\"codebooks\"", (uint64_t)s->n_codebooks);
    sample_u(o, "scdb_registry_entries", "kind=\"pairs\"", (uint64_t)s->n_pairs);
    sample_u(o, "scdb_registry_entries", "kind=\"policies\"", (uint64_t)s->n_policies);
}

/* ------------------------------------------------------------ HTTP */

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type,
                              char *body, size_t len, int must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret;

    if (!r) {
        if (must_free) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_http(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version,
                               const char *upload_data, size_t *upload_data_size,
                               void **req_cls)
{
    static char not_found[] = "scdb-broker: only GET /metrics is served here\n";
    static char bad_method[] = "scdb-broker: GET /metrics only\n";
    static char no_data[] = "scdb-broker: no snapshot of the counters yet\n";
    bk_metrics *m = cls;
    snap *s;
    buf o = {0};

    (void)version;
    (void)upload_data;
    if (!*req_cls) {             /* first call: headers only */
        *req_cls = m;
        return MHD_YES;
    }
    if (*upload_data_size) {     /* a body nobody asked for: drop it */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/metrics"))
        return answer(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found,
                      sizeof not_found - 1, 0);
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", bad_method,
                      sizeof bad_method - 1, 0);
    s = malloc(sizeof *s);
    if (!s) return MHD_NO;
    if (!fetch(m, s)) {
        free(s);
        return answer(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", no_data,
                      sizeof no_data - 1, 0);
    }
    o.cap = 16384;
    o.p = malloc(o.cap);
    if (!o.p) {
        free(s);
        return MHD_NO;
    }
    format(s, scdb_now() - s->taken, &o);
    free(s);
    if (o.oom) {
        free(o.p);
        return MHD_NO;
    }
    return answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", o.p, o.len,
                  1);
}

/* "PORT", "HOST:PORT" or "[V6]:PORT" into an address; HOST defaults to
 * 127.0.0.1 (loopback unless written otherwise). */
static scdb_err parse_listen(const char *spec, struct sockaddr_storage *ss, socklen_t *len,
                             char *errbuf, size_t errlen)
{
    char host[128] = "127.0.0.1", port[128];
    const char *colon = strrchr(spec, ':');
    struct addrinfo hints, *ai = NULL;
    char *end;
    long p;
    int rc;

    if (!colon) {
        snprintf(port, sizeof port, "%s", spec);
    } else {
        size_t hl = (size_t)(colon - spec);
        const char *h = spec;
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
            h++;
            hl -= 2;
        }
        if (hl == 0 || hl >= sizeof host || strlen(colon + 1) >= sizeof port) goto bad;
        memcpy(host, h, hl);
        host[hl] = 0;
        snprintf(port, sizeof port, "%s", colon + 1);
    }
    errno = 0;
    p = strtol(port, &end, 10);
    if (!port[0] || *end || errno || p < 0 || p > 65535) goto bad;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    rc = getaddrinfo(host, port, &hints, &ai);
    if (rc || !ai || ai->ai_addrlen > sizeof *ss) {
        snprintf(errbuf, errlen, "metrics_listen %s: %s", spec,
                 rc ? gai_strerror(rc) : "no address");
        if (ai) freeaddrinfo(ai);
        return SCDB_EINVAL;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return SCDB_OK;
bad:
    snprintf(errbuf, errlen, "metrics_listen '%s': give HOST:PORT, [IPV6]:PORT or PORT", spec);
    return SCDB_EINVAL;
}

scdb_err bk_metrics_start(scdb_broker *b, char *errbuf, size_t errlen)
{
    struct sockaddr_storage ss, bound;
    socklen_t len = 0, blen = sizeof bound;
    pthread_condattr_t ca;
    const union MHD_DaemonInfo *info;
    char host[INET6_ADDRSTRLEN + 2] = "?";
    unsigned port = 0;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    sigset_t all, old;
    bk_metrics *m;
    scdb_err e;

    if (!b->cfg.metrics_listen[0]) return SCDB_OK;
    e = parse_listen(b->cfg.metrics_listen, &ss, &len, errbuf, errlen);
    if (e) return e;
    m = calloc(1, sizeof *m);
    if (!m) return SCDB_ENOMEM;
    m->wake_fd = b->sigpipe[1];
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* its thread never takes the process's signals */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    m->d = MHD_start_daemon(flags, 0, NULL, NULL, on_http, m, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, 32u,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!m->d) {
        snprintf(errbuf, errlen, "metrics_listen %s: cannot listen: %s", b->cfg.metrics_listen,
                 errno ? strerror(errno) : "libmicrohttpd refused");
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return SCDB_ESYS;
    }
    b->metrics = m;
    info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_LISTEN_FD);
    if (info && getsockname(info->listen_fd, (struct sockaddr *)&bound, &blen) == 0) {
        if (bound.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&bound;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
            port = ntohs(a->sin_port);
        } else if (bound.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&bound;
            host[0] = '[';
            inet_ntop(AF_INET6, &a->sin6_addr, host + 1, sizeof host - 2);
            strcat(host, "]");
            port = ntohs(a->sin6_port);
        }
    }
    scdb_info("metrics: http://%s:%u/metrics", host, port);
    return SCDB_OK;
}

void bk_metrics_stop(scdb_broker *b)
{
    bk_metrics *m = b->metrics;

    if (!m) return;
    MHD_stop_daemon(m->d);      /* joins its thread (a scrape waits <= 1 s) */
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    b->metrics = NULL;
}
