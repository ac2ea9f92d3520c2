/*
 * bench_cluster.c — `scdb bench cluster`: a fleet of brokers sharing stored
 * prefixes through a Redis Cluster (the remote tier, store/remote_tier.h),
 * all in one run:
 *
 *   a local Redis Cluster: 3 masters + 3 replicas on loopback ports,
 *   persistence off, maxmemory + allkeys-lru (store/local_cluster.h)
 *        |
 *   N brokers (default 3), separate processes standing for separate hosts,
 *   each with its own LMDB; the bench process holds a producer and a
 *   consumer handle on each
 *
 *   1. hit rate: the trace (Mooncake synthetic by default) replayed twice
 *      over fresh fleets, local tiers only, then with the remote tier.  Per
 *      request, on the broker the route picks (round-robin, or --route
 *      session: the broker of the earlier request it shares its longest
 *      prefix with): the consumer's lookup, a get of what it matched into
 *      its arena (every byte checked against what the producers put), and
 *      the producer's put of the blocks that were missing.  Payloads are
 *      sized like a 7B-class model's codes (32 layers x (r_K + r_V = 256)
 *      f16 per token), scaled down like `scdb bench store` does; the
 *      brokers hold them as the raw KV of a one-layer model of that many
 *      bytes per token.  With the remote tier, each put's remote writes land
 *      before the next request (the trace's requests are a median 175 ms
 *      apart; a write takes about a millisecond).  Ideal = one unbounded
 *      cache seeing every request (computed from the trace alone).
 *   2. latency with the bundled family (models that fit: 64-token blocks):
 *      one-block prefixes that base prefilled on broker A, stored there as
 *      raw KV (raw/base, f16) and as SCD codes (base-scd), read by
 *      consumers on broker B -- base (raw) and code (SCD) -- first as
 *      remote hits (fetch + verify + decode into the arena, end to end as
 *      the client sees it, and the broker's fetch and decode times), then
 *      as local hits.  The goal's remote_get_* / local_get_* are the raw
 *      block (its decode is a conversion to f32); scd_* show the codes,
 *      whose decode dominates.  And 384-token prefixes of SCD codes:
 *      remote-hit time to first token (lookup + get + the last prefix
 *      token re-run) against code's own prefill of the same prefix, in the
 *      same run (medians of 5).
 *   3. a master killed with -9 during a replay (unless --no-kill): client
 *      errors and wrong bytes counted over the whole round.
 *
 * Prints a table, writes JSON (--json FILE) with fleet_hit_rate_local,
 * fleet_hit_rate_remote, ideal_hit_rate, local_get_p99_us,
 * remote_get_p50_us, remote_get_p99_us, remote_hit_ttft_ms, own_prefill_ms,
 * master_kill_client_errors and master_kill_wrong_bytes (plus details).
 */
#include "bench.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block_key.h"
#include "local_cluster.h"
#include "model.h"
#include "scdb_common.h"
#include "trace.h"

#define MAX_BROKERS 16
#define WHO "scdb bench cluster"

/* SIGINT / SIGTERM: stop at the next request and clean up (brokers, the
 * cluster, the temp dir) instead of leaving them behind. */
static volatile sig_atomic_t g_stop;
static void on_stop(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* ------------------------------------------------------------------ options */

typedef struct copts {
    const char *trace_path;
    bool synthetic;
    const char *json;
    bool route_session, no_kill, quiet, keep;
    int brokers;
    size_t requests, kill_requests;
    scdb_bench_shape shape;     /* the codes' shape (raw KV's options are bench store's) */
    int samples, ttft_prefix, ttft_reps;
    const char *data, *dir;
    uint64_t seed;
    uint64_t maxmemory;
} copts;

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench cluster [--trace FILE] [--json FILE] [--route rr|session] [--no-kill]\n"
"                          [options]\n"
"\n"
"A fleet of brokers (separate processes, each with its own LMDB) sharing\n"
"prefixes through a local Redis Cluster (3 masters + 3 replicas on loopback,\n"
"persistence off, allkeys-lru): fleet hit rate with local tiers only and with\n"
"the remote tier against the single-cache ideal, remote and local get latency\n"
"and remote-hit time to first token against the consumer's own prefill (the\n"
"bundled model family), and a master killed during a replay.  Needs\n"
"redis-server and redis-cli (exit 77 without).\n"
"\n"
"  --trace FILE         JSON lines {\"timestamp\":ms,\"input_length\":n,\n"
"                       \"output_length\":m,\"hash_ids\":[...]}; default\n"
"                       traces/" SCDB_TRACE_NAME " in the data\n"
"                       directory (data/traces/; $SCDB_DATA overrides);\n"
"                       missing is an error, not --synthetic\n"
"  --synthetic          the seeded synthetic trace of `scdb bench store`\n"
"  --requests N         replay the first N requests (default: all)\n"
"  --route rr|session   rr: round-robin over the brokers (default); session:\n"
"                       the broker of the earlier request sharing the longest\n"
"                       prefix (a conversation stays on one broker), new\n"
"                       prefixes round-robin\n"
"  --brokers N          brokers in the fleet (default 3)\n"
"  --no-kill            skip the master-kill round\n"
"  --kill-requests N    requests in the master-kill round (default 1200; the\n"
"                       master dies at a quarter)\n"
"  --block-tokens N     tokens per block in the replays (512, the trace's)\n"
"  --layers N, --rank-k N, --rank-v N, --elem-bytes N   the 7B-class code\n"
"                       payload per token (32, 128, 128, 2: 16 KiB/token)\n"
"  --codes-scale F      payload scale (default 1/512: 32 bytes/token, 16 KiB\n"
"                       per 512-token block)\n"
"  --samples N          one-block prefixes for the latency part (default 200)\n"
"  --ttft-prefix N      tokens of the TTFT prefixes (default 384, a multiple\n"
"                       of 64 below the models' 512-token context)\n"
"  --maxmemory SIZE     per Redis node (default 2GiB)\n"
"  --data DIR           the model family (default $SCDB_DATA, else ../share/scdb\n"
"                       beside scdb)\n"
"  --dir DIR            where the brokers' and the cluster's files go ($TMPDIR\n"
"                       or /tmp); removed at the end unless --keep\n"
"  --seed N             token and payload seed (1)\n"
"  --json FILE          also write the results as JSON\n"
"  --quiet              no progress on stderr\n"
"  --help               this text\n");
}

static int parse_opts(int argc, char **argv, copts *o)
{
    enum { O_TRACE = 256, O_SYN, O_JSON, O_ROUTE, O_NOKILL, O_BROKERS, O_REQ, O_KREQ,
           O_SAMPLES, O_TTFT, O_MAXMEM, O_DATA, O_DIR, O_SEED, O_QUIET, O_KEEP, O_HELP };
    static const struct option lo[] = {
        {"trace", 1, 0, O_TRACE}, {"synthetic", 0, 0, O_SYN}, {"json", 1, 0, O_JSON},
        {"route", 1, 0, O_ROUTE}, {"no-kill", 0, 0, O_NOKILL}, {"brokers", 1, 0, O_BROKERS},
        {"requests", 1, 0, O_REQ}, {"kill-requests", 1, 0, O_KREQ},
        SCDB_BENCH_SHAPE_CODES_OPTIONS, {"samples", 1, 0, O_SAMPLES}, {"ttft-prefix", 1, 0, O_TTFT},
        {"maxmemory", 1, 0, O_MAXMEM}, {"data", 1, 0, O_DATA}, {"dir", 1, 0, O_DIR},
        {"seed", 1, 0, O_SEED}, {"quiet", 0, 0, O_QUIET}, {"keep", 0, 0, O_KEEP},
        {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
    int c;

    memset(o, 0, sizeof *o);
    o->brokers = 3;
    o->kill_requests = 1200;
    scdb_bench_shape_defaults(&o->shape);
    o->samples = 200;
    o->ttft_prefix = 384;
    o->ttft_reps = 5;
    o->maxmemory = 2ull << 30;
    o->data = scdb_data_dir();
    o->seed = 1;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char why[160];
        scdb_err bad = SCDB_OK;
        uint64_t u;
        switch (c) {
        case O_TRACE: o->trace_path = optarg; break;
        case O_SYN: o->synthetic = true; break;
        case O_JSON: o->json = optarg; break;
        case O_ROUTE:
            if (!strcmp(optarg, "session")) o->route_session = true;
            else if (strcmp(optarg, "rr")) {
                fprintf(stderr, WHO ": --route takes rr or session\n");
                return 2;
            }
            break;
        case O_NOKILL: o->no_kill = true; break;
        case O_BROKERS:
            bad = scdb_parse_int("--brokers", optarg, 2, MAX_BROKERS, &o->brokers, why, sizeof why);
            break;
        case O_REQ:
            if (!(bad = scdb_parse_u64("--requests", optarg, 0, SIZE_MAX, &u, why, sizeof why)))
                o->requests = (size_t)u;
            break;
        case O_KREQ:
            if (!(bad = scdb_parse_u64("--kill-requests", optarg, 0, SIZE_MAX, &u, why, sizeof why)))
                o->kill_requests = (size_t)u;
            break;
        case O_SAMPLES:
            bad = scdb_parse_int("--samples", optarg, 1, INT_MAX, &o->samples, why, sizeof why);
            break;
        case O_TTFT:   /* a multiple of 64: checked below */
            bad = scdb_parse_int("--ttft-prefix", optarg, 128, 448, &o->ttft_prefix, why, sizeof why);
            break;
        case O_MAXMEM: {   /* a number with an optional G / M (GiB, MB, ...) */
            char *end;
            double v = strtod(optarg, &end);
            uint64_t mul = 1;
            if (*end == 'G' || *end == 'g') mul = 1ull << 30, end++;
            else if (*end == 'M' || *end == 'm') mul = 1ull << 20, end++;
            if (!strcmp(end, "iB") || !strcmp(end, "B")) end += strlen(end);
            if (end == optarg || *end || !(v >= 0)) {
                snprintf(why, sizeof why, "--maxmemory '%s': not a size (want e.g. 2GiB or 512MiB)", optarg);
                bad = SCDB_EINVAL;
            }
            o->maxmemory = (uint64_t)(v * (double)mul);
            break;
        }
        case O_DATA: o->data = optarg; break;
        case O_DIR: o->dir = optarg; break;
        case O_SEED:
            bad = scdb_parse_u64("--seed", optarg, 0, UINT64_MAX, &o->seed, why, sizeof why);
            break;
        case O_QUIET: o->quiet = true; break;
        case O_KEEP: o->keep = true; break;
        case O_HELP: case 'h': usage(stdout); return 1;
        default:
            if (c < SCDB_BENCH_SHAPE_OPT) {
                usage(stderr);
                return 2;
            }
            bad = scdb_bench_shape_parse(&o->shape, c, optarg, why, sizeof why);
        }
        if (bad) {
            fprintf(stderr, WHO ": %s\n", why);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, WHO ": unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o->brokers < 2 || o->brokers > MAX_BROKERS || o->samples < 1 || o->ttft_prefix < 128 ||
        o->ttft_prefix % 64 || o->ttft_prefix > 448 || o->maxmemory < (64ull << 20)) {
        fprintf(stderr, WHO ": an option is out of range (--brokers 2..%d, --ttft-prefix a "
                "multiple of 64 in 128..448, ...)\n", MAX_BROKERS);
        return 2;
    }
    return 0;
}

static void progress(const copts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const copts *o, const char *fmt, ...)
{
    va_list ap;
    if (o->quiet) return;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

/* ------------------------------------------------------------------ a fleet */

typedef struct node {
    pid_t pid;
    char ep[600], cfg[600], log[600], data[600];
    scdb *cons, *prod;
    scdb_arena *arena;
} node;

typedef struct fleet {
    node n[MAX_BROKERS];
    int count;
    bool remote;
} fleet;

/* The replays' model: raw f16 KV of one layer and one KV head of hd dims is
 * 4 * hd bytes per token, the scaled 7B code payload. */
typedef struct replay_model {
    int head_dim;
    uint32_t bt;
    int max_seq;
    uint64_t per_token_unscaled, block_bytes;
} replay_model;

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Start `count` brokers named root/tag-i with config body `models` (model,
 * codebook and pair sections) and [broker] keys `bkeys`, connected to the
 * cluster when seeds is not NULL. */
static int fleet_start(const copts *o, const char *root, const char *tag, int count,
                       const char *bkeys, const char *models, const char *seeds, fleet *f)
{
    memset(f, 0, sizeof *f);
    f->remote = seeds != NULL;
    for (int i = 0; i < count; i++) {
        node *n = &f->n[i];
        char text[8192];
        snprintf(n->ep, sizeof n->ep, "ipc://%s/%s-%d.sock", root, tag, i);
        snprintf(n->cfg, sizeof n->cfg, "%s/%s-%d.ini", root, tag, i);
        snprintf(n->log, sizeof n->log, "%s/%s-%d.log", root, tag, i);
        snprintf(n->data, sizeof n->data, "%s/%s-%d.data", root, tag, i);
        snprintf(text, sizeof text,
                 "[broker]\nendpoint = %s\ndata_dir = %s\nworkers = 2\nno_sync = 1\n"
                 "device = cpu\nheartbeat_timeout_ms = 120000\nlog_level = info\n"
                 "max_request_bytes = 256MiB\n%s\n%s\n%s%s%s",
                 n->ep, n->data, bkeys, models, seeds ? "[remote]\ncluster = " : "",
                 seeds ? seeds : "",
                 seeds ? "\ntimeout_ms = 100\nttl = 86400\nwrite_queue = 256MiB\n" : "");
        if (write_text(n->cfg, text)) {
            fprintf(stderr, WHO ": cannot write %s: %s\n", n->cfg, strerror(errno));
            return -1;
        }
        const char *args[] = {"--config", n->cfg, NULL};
        n->pid = scdb_bench_start_broker(args, n->log);
        if (n->pid <= 0) {
            fprintf(stderr, WHO ": cannot start a broker\n");
            return -1;
        }
        f->count = i + 1;
    }
    (void)o;
    return 0;
}

/* Connect and register a producer and a consumer of model/codebook on
 * every broker (after it answers), with an arena of `slots` slots. */
static int fleet_clients(fleet *f, const char *prod_model, const char *cons_model,
                         const char *codebook, int slots)
{
    for (int i = 0; i < f->count; i++) {
        node *n = &f->n[i];
        scdb_opts so = {.endpoint = n->ep, .timeout_ms = 60000, .name = "bench-cluster"};
        scdb_err e;
        if ((e = scdb_bench_connect(&so, 60, n->pid, &n->cons)) ||
            (e = scdb_bench_connect(&so, 60, n->pid, &n->prod))) {
            fprintf(stderr, WHO ": broker %s did not answer (%s); its log: %s\n", n->ep,
                    scdb_strerror(e), n->log);
            return -1;
        }
        if ((e = scdb_register(n->cons, SCDB_CONSUMER, cons_model, codebook, NULL)) ||
            (e = scdb_register(n->prod, SCDB_PRODUCER, prod_model, codebook, NULL)) ||
            (slots && (e = scdb_arena_new(n->cons, slots, &n->arena)))) {
            fprintf(stderr, WHO ": broker %s: %s (%s)\n", n->ep, scdb_last_error(n->cons),
                    scdb_strerror(e));
            return -1;
        }
    }
    return 0;
}

static void fleet_stop(fleet *f)
{
    for (int i = 0; i < f->count; i++) {
        node *n = &f->n[i];
        scdb_arena_free(&n->arena);
        scdb_close(&n->cons);
        scdb_close(&n->prod);
        if (n->pid > 0) {
            int st = scdb_bench_stop_broker(n->pid, SIGTERM);
            if (st) fprintf(stderr, WHO ": broker %s exited with %d (log %s)\n", n->ep, st, n->log);
            n->pid = 0;
        }
    }
    f->count = 0;
}

/* Wait until broker i's remote writes are all sent (at most 30 s).  0, or
 * -1 on a timeout. */
static int settle(node *n)
{
    for (int k = 0; k < 3000 && !g_stop; k++) {
        scdb_stat st;
        if (scdb_stats(n->prod, &st)) return -1;     /* the broker is gone */
        if (st.remote_pending == 0) return 0;
        usleep(2000);
    }
    return -1;
}

/* Sums of the fleet's remote counters. */
static void fleet_remote(fleet *f, scdb_stat *sum)
{
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < f->count; i++) {
        scdb_stat s;
        if (scdb_stats(f->n[i].prod, &s)) continue;
        sum->remote_hits += s.remote_hits;
        sum->remote_bytes_read += s.remote_bytes_read;
        sum->remote_bytes_written += s.remote_bytes_written;
        sum->remote_writes += s.remote_writes;
        sum->remote_errors += s.remote_errors;
        sum->remote_invalid += s.remote_invalid;
        sum->remote_write_errors += s.remote_write_errors;
        sum->remote_queue_drops += s.remote_queue_drops;
        sum->remote_probes += s.remote_probes;
        sum->errors += s.errors;
        sum->blocks += s.blocks;
    }
}

/* ------------------------------------------------------------ the replay */

/* Payload element e (f16 bits) of the block with trace id `id`: finite
 * values in [1, 2), a deterministic stream per (id, seed). */
static void block_payload(int64_t id, uint64_t seed, uint16_t *dst, size_t n)
{
    uint64_t s = (uint64_t)id * 0x9E3779B97F4A7C15ull ^ seed * 0xD6E8FEB86659FD93ull ^ 0x5bd1e995;
    for (size_t e = 0; e < n; e += 4) {
        uint64_t v = scdb_trace_splitmix(&s);
        for (size_t k = 0; k < 4 && e + k < n; k++)
            dst[e + k] = (uint16_t)(0x3C00u | ((v >> (16 * k)) & 0x3FFu));
    }
}

typedef struct replay_out {
    uint64_t requests, refs, hits, remote_blocks, client_errors, wrong_bytes, checked_bytes;
    uint64_t settle_timeouts, ideal;
    uint64_t hits_after_kill, remote_after_kill, requests_after_kill;
    uint64_t per_broker[MAX_BROKERS];   /* requests routed to each broker */
    double wall_s, kill_s;
    scdb_stat remote;           /* the fleet's remote counters at the end */
    char first_error[256];
} replay_out;

typedef struct replay_ctx {
    const copts *o;
    const scdb_trace *t;
    size_t n_req;
    const replay_model *m;
    uint64_t seed;
    fleet *f;
    lc_cluster *lc;
    size_t kill_at;              /* SIZE_MAX: no kill */
    const uint64_t *chain;       /* chain ids (routing) */
    uint64_t n_chains;
} replay_ctx;

static void note_error(replay_out *out, const char *what, scdb *h, scdb_err e)
{
    out->client_errors++;
    if (!out->first_error[0])
        snprintf(out->first_error, sizeof out->first_error, "%s: %s (%s)", what,
                 scdb_strerror(e), h ? scdb_last_error(h) : "");
}

/* Compare slots [0, n_blocks * bt) of the arena with the payloads of the
 * request's first n_blocks ids; returns wrong payload bytes. */
static uint64_t check_arena(const replay_ctx *c, const int64_t *ids, size_t n_blocks,
                            scdb_kv_cache *kv, uint16_t *scratch, uint64_t *checked)
{
    const uint32_t bt = c->m->bt;
    const int hd = c->m->head_dim;
    uint64_t wrong = 0;
    for (size_t b = 0; b < n_blocks; b++) {
        block_payload(ids[b], c->seed, scratch, (size_t)2 * bt * hd);
        for (uint32_t t = 0; t < bt; t++) {
            int slot = (int)(b * bt + t);
            const float *k = scdb_kv_k(kv, 0, slot), *v = scdb_kv_v(kv, 0, slot);
            if (kv->pos[slot] != slot) wrong += 4;
            for (int d = 0; d < hd; d++) {
                float wk = scdb_f16_to_f32(scratch[(size_t)t * hd + d]);
                float wv = scdb_f16_to_f32(scratch[(size_t)bt * hd + (size_t)t * hd + d]);
                if (memcmp(&wk, &k[d], sizeof wk)) wrong += 2;
                if (memcmp(&wv, &v[d], sizeof wv)) wrong += 2;
            }
        }
        *checked += (uint64_t)2 * bt * hd * 2;
    }
    return wrong;
}

static int replay(const replay_ctx *c, replay_out *out)
{
    const scdb_trace *t = c->t;
    const uint32_t bt = c->m->bt;
    const size_t block_elems = (size_t)2 * bt * c->m->head_dim;
    int32_t *tokens = malloc(t->max_blocks * bt * sizeof *tokens);
    uint16_t *payload = malloc(t->max_blocks * block_elems * sizeof *payload);
    uint16_t *scratch = malloc(block_elems * sizeof *scratch);
    int *owner = calloc(c->n_chains + 1, sizeof *owner);     /* chain -> broker + 1 */
    uint64_t *seen = calloc((c->n_chains + 63) / 64 + 1, sizeof *seen);
    double t0 = scdb_now(), t_prog = t0;
    int rr = 0, rc = -1, killed = -1;

    memset(out, 0, sizeof *out);
    if (!tokens || !payload || !scratch || !owner || !seen) {
        fprintf(stderr, WHO ": out of memory\n");
        goto done;
    }
    for (size_t r = 0; r < c->n_req; r++) {
        const int64_t *ids = t->ids + t->off[r];
        if (g_stop) {
            fprintf(stderr, WHO ": interrupted\n");
            goto done;
        }
        const uint64_t *ch = c->chain + t->off[r];
        size_t nb = t->off[r + 1] - t->off[r], served = 0;
        int k = -1;
        node *n;
        scdb_lookup_result lr;
        scdb_err e;

        if (r == c->kill_at && c->lc) {
            /* the master of slot 0's shard dies; its replica takes over after
             * cluster-node-timeout */
            killed = lc_master_of_slot(c->lc, 0);
            if (killed < 0 || lc_signal(c->lc, killed, SIGKILL)) {
                fprintf(stderr, WHO ": cannot kill a master\n");
                goto done;
            }
            out->kill_s = scdb_now() - t0;
            progress(c->o, "  killed the master on port %d (node %d) at request %zu\n",
                     lc_port(c->lc, killed), killed, r);
        }
        /* route */
        if (c->o->route_session)
            for (size_t i = nb; i-- > 0;)
                if (seen[ch[i] / 64] >> (ch[i] % 64) & 1) {
                    k = owner[ch[i]] - 1;
                    break;
                }
        if (k < 0) k = rr++ % c->f->count;
        n = &c->f->n[k];
        out->per_broker[k]++;
        for (size_t i = 0; i < nb; i++) {
            out->ideal += (seen[ch[i] / 64] >> (ch[i] % 64)) & 1;
            scdb_trace_block_tokens(ids[i], c->seed, tokens + i * bt, bt);
        }
        out->refs += nb;
        /* consumer: lookup, then get what it matched */
        memset(&lr, 0, sizeof lr);
        if ((e = scdb_lookup(n->cons, tokens, nb * bt, &lr))) note_error(out, "lookup", n->cons, e);
        if (!e && lr.n_matched && !g_stop) {
            scdb_get_result gr;
            e = scdb_get(n->cons, tokens, (size_t)lr.n_matched * bt, n->arena, 0, 0, &gr);
            if (e) {
                note_error(out, "get", n->cons, e);
            } else {
                served = gr.tokens_written / bt;
                out->remote_blocks += gr.remote_blocks;
                out->wrong_bytes += check_arena(c, ids, served, scdb_arena_cache(n->arena),
                                                scratch, &out->checked_bytes);
                if (killed >= 0) out->remote_after_kill += gr.remote_blocks;
            }
        }
        out->hits += served;
        if (killed >= 0) {
            out->hits_after_kill += served;
            out->requests_after_kill++;
        }
        /* producer: the blocks that were missing */
        if (served < nb && !g_stop) {
            for (size_t i = served; i < nb; i++)
                block_payload(ids[i], c->seed, payload + (i - served) * block_elems, block_elems);
            scdb_put_result pr;
            e = scdb_put(n->prod, tokens, nb * bt, (uint32_t)served, payload,
                         (nb - served) * c->m->block_bytes, &pr);
            if (e) note_error(out, "put", n->prod, e);
        }
        if (c->f->remote && settle(n)) out->settle_timeouts++;
        for (size_t i = 0; i < nb; i++) {
            seen[ch[i] / 64] |= 1ull << (ch[i] % 64);
            owner[ch[i]] = k + 1;
        }
        out->requests++;
        if (!c->o->quiet && scdb_now() - t_prog > 5) {
            t_prog = scdb_now();
            progress(c->o, "  %zu/%zu requests, hit rate %.4f (ideal %.4f), %llu client errors, "
                     "%.0f s\n", r + 1, c->n_req, (double)out->hits / (double)out->refs,
                     (double)out->ideal / (double)out->refs,
                     (unsigned long long)out->client_errors, t_prog - t0);
        }
    }
    fleet_remote(c->f, &out->remote);
    rc = 0;
done:
    out->wall_s = scdb_now() - t0;
    free(tokens);
    free(payload);
    free(scratch);
    free(owner);
    free(seen);
    return rc;
}

/* --------------------------------------------------------- the family part */

typedef struct lat {
    double get_us[2];           /* remote hit: p50, p99 (client, end to end) */
    double local_us[2];         /* the same get once local (hot tier)        */
    double fetch_us[2];         /* remote hit: fetch + verify (broker)       */
    double decode_us[2];        /* remote hit: decode into the arena         */
    int n_remote, n_local;
} lat;

typedef struct family_out {
    lat raw, scd;               /* raw/base -> base (f16 KV); base-scd -> code */
    double remote_hit_ttft_ms, remote_hit_get_ms, own_prefill_ms;
    int samples, ttft_blocks;
    uint64_t raw_block_bytes, scd_block_bytes;
} family_out;

typedef struct lat_samples {
    double *get, *local, *fetch, *decode;
    int n_remote, n_local;
} lat_samples;

static int samples_alloc(lat_samples *x, int n)
{
    memset(x, 0, sizeof *x);
    x->get = calloc((size_t)n, sizeof(double));
    x->local = calloc((size_t)n, sizeof(double));
    x->fetch = calloc((size_t)n, sizeof(double));
    x->decode = calloc((size_t)n, sizeof(double));
    return x->get && x->local && x->fetch && x->decode ? 0 : -1;
}

static void samples_free(lat_samples *x)
{
    free(x->get), free(x->local), free(x->fetch), free(x->decode);
}

static void samples_pct(lat_samples *x, lat *out)
{
    out->n_remote = x->n_remote;
    out->n_local = x->n_local;
    for (int q = 0; q < 2; q++) {
        double p = q ? 0.99 : 0.5;
        out->get_us[q] = scdb_bench_pct(x->get, (size_t)x->n_remote, p);
        out->fetch_us[q] = scdb_bench_pct(x->fetch, (size_t)x->n_remote, p);
        out->decode_us[q] = scdb_bench_pct(x->decode, (size_t)x->n_remote, p);
        out->local_us[q] = scdb_bench_pct(x->local, (size_t)x->n_local, p);
    }
}

/* One 64-token prefix that only the remote tier has for consumer h: a timed
 * remote-hit get, then (once the broker keeps it) a timed local get.  A
 * sample counts when it was what it should be (record 0: warm-up). */
static scdb_err sample_get(scdb *h, scdb_arena *a, const int32_t *tok, lat_samples *x,
                           int record)
{
    scdb_get_result gr;
    scdb_lookup_result lr;
    double t0, dt;
    scdb_err e;

    t0 = scdb_now();
    e = scdb_get(h, tok, 64, a, 0, 0, &gr);
    dt = (scdb_now() - t0) * 1e6;
    if (e) return e;
    if (record && gr.remote_blocks == 1 && gr.tokens_written == 64) {
        x->get[x->n_remote] = dt;
        x->fetch[x->n_remote] = (double)gr.remote_ns / 1e3;
        x->decode[x->n_remote] = (double)gr.decode_ns / 1e3;
        x->n_remote++;
    }
    /* the broker keeps it through its writer: wait until its index knows */
    for (int k = 0; k < 4000; k++) {
        if (scdb_lookup(h, tok, 64, &lr) == SCDB_OK && lr.n_matched == 1 && !lr.n_remote) break;
        usleep(500);
    }
    t0 = scdb_now();
    e = scdb_get(h, tok, 64, a, 0, 0, &gr);
    dt = (scdb_now() - t0) * 1e6;
    if (e) return e;
    if (record && gr.remote_blocks == 0 && gr.tokens_written == 64) x->local[x->n_local++] = dt;
    return SCDB_OK;
}

static int family(const copts *o, const char *root, const char *seeds, family_out *out)
{
    char models[4096], path[1200], err[512];
    fleet f;
    scdb_model *base = NULL, *code = NULL;
    scdb_arena *states = NULL, *raw_arena = NULL;
    scdb *raw_prod = NULL, *raw_cons = NULL;
    scdb_kv_cache *kv = NULL, *own = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = -1, S = o->samples, W = 5, P = o->ttft_prefix, R = o->ttft_reps;
    lat_samples xr, xs;
    double own_ms[8], ttft_ms[8], get_ms[8];
    float *logits = NULL;
    int32_t tok[512];
    scdb_err e = SCDB_OK;

    memset(out, 0, sizeof *out);
    memset(&f, 0, sizeof f);
    if (samples_alloc(&xr, S) || samples_alloc(&xs, S)) goto done;
    snprintf(models, sizeof models,
             "[model base]\nconfig = %s/models/base/config.json\n\n"
             "[model code]\nconfig = %s/models/code/config.json\n\n"
             "[codebook base-scd]\nkind = scd\nmodel = base\nfile = %s/codebooks/base.safetensors\n\n"
             "[pair base-scd code]\ndecoder = scd\nfile = %s/pairs/base__code.safetensors\n",
             o->data, o->data, o->data, o->data);
    snprintf(path, sizeof path, "%s/models/base", o->data);
    if ((e = scdb_model_load(path, &base, err, sizeof err))) {
        fprintf(stderr, WHO ": %s (%s)\n", err, scdb_strerror(e));
        goto done;
    }
    snprintf(path, sizeof path, "%s/models/code", o->data);
    if ((e = scdb_model_load(path, &code, err, sizeof err))) {
        fprintf(stderr, WHO ": %s (%s)\n", err, scdb_strerror(e));
        goto done;
    }
    scdb_model_heldout_path(o->data, "english", path, sizeof path);
    if ((e = scdb_read_file(path, 64u << 20, &text, &len)) ||
        len < (size_t)(S + W) * 64 + (size_t)R * 4096 + 8192) {
        fprintf(stderr, WHO ": %s: %s\n", path, e ? scdb_strerror(e) : "too short");
        goto done;
    }
    if (fleet_start(o, root, "family", 2, "block_tokens = 64\n", models, seeds, &f) ||
        fleet_clients(&f, "base", "code", "base-scd", 512))
        goto done;
    {
        scdb_opts so = {.timeout_ms = 60000, .name = "bench-cluster-raw"};
        so.endpoint = f.n[0].ep;
        if ((e = scdb_bench_connect(&so, 60, f.n[0].pid, &raw_prod)) ||
            (e = scdb_register(raw_prod, SCDB_PRODUCER, "base", NULL, NULL)))
            goto broker_fail;
        so.endpoint = f.n[1].ep;
        if ((e = scdb_bench_connect(&so, 60, f.n[1].pid, &raw_cons)) ||
            (e = scdb_register(raw_cons, SCDB_CONSUMER, "base", NULL, NULL)) ||
            (e = scdb_arena_new(raw_cons, 512, &raw_arena)))
            goto broker_fail;
    }
    out->scd_block_bytes = scdb_get_info(f.n[0].prod)->block_bytes;
    out->raw_block_bytes = scdb_get_info(raw_prod)->block_bytes;
    if ((e = scdb_states_arena_new(f.n[0].prod, 512, &states))) goto broker_fail;
    {
        /* broker A: base prefills each prefix, capturing its states into
         * shared memory; A encodes and stores the SCD codes, and stores the
         * raw KV of the same prefill too; its remote tier shares both */
        scdb_capture cap = {0};
        cap.h_in = scdb_arena_states(states, NULL, NULL, NULL);
        for (int i = 0; i < W + S + R; i++) {
            int n = i < W + S ? 64 : P;
            size_t off = i < W + S ? (size_t)i * 64 : (size_t)(W + S) * 64 + 4096 + (size_t)(i - W - S) * 4096;
            scdb_put_result pr;
            scdb_tokenize_bytes(text + off, (size_t)n, tok);
            scdb_kv_cache_free(&kv);
            if ((e = scdb_model_cache_new(base, n, &kv)) ||
                (e = scdb_model_forward(base, tok, NULL, n, kv, NULL, &cap)) ||
                (e = scdb_put_states(f.n[0].prod, tok, (size_t)n, 0, states, &pr)) ||
                (i < W + S && (e = scdb_put_cache(raw_prod, tok, (size_t)n, kv, &pr))))
                goto broker_fail;
        }
        if (settle(&f.n[0])) fprintf(stderr, WHO ": broker A's remote writes did not settle\n");
        progress(o, "  %d one-block prefixes and %d prefixes of %d tokens put on broker A\n",
                 W + S, R, P);
    }
    /* broker B: each one-block prefix a remote hit (B has nothing), then a
     * local one; raw KV and SCD codes */
    for (int i = 0; i < W + S; i++) {
        if (g_stop) goto done;
        scdb_tokenize_bytes(text + (size_t)i * 64, 64, tok);
        if ((e = sample_get(raw_cons, raw_arena, tok, &xr, i >= W)) ||
            (e = sample_get(f.n[1].cons, f.n[1].arena, tok, &xs, i >= W)))
            goto broker_fail;
    }
    out->samples = S;
    samples_pct(&xr, &out->raw);
    samples_pct(&xs, &out->scd);
    progress(o, "  %d + %d remote and %d + %d local gets of one 64-token block on broker B\n",
             xr.n_remote, xs.n_remote, xr.n_local, xs.n_local);

    /* time to first token: the consumer's own prefill vs a remote hit */
    {
        const scdb_model_config *cf = scdb_model_cfg(code);
        int V = cf->vocab_size;
        scdb_kv_cache *akv = scdb_arena_cache(f.n[1].arena);
        if (!(logits = malloc((size_t)P * V * sizeof *logits))) goto done;
        for (int j = 0; j < R; j++) {
            size_t off = (size_t)(W + S) * 64 + 4096 + (size_t)j * 4096;
            scdb_lookup_result lr;
            scdb_get_result gr;
            double t0;
            scdb_tokenize_bytes(text + off, (size_t)P, tok);
            scdb_kv_cache_free(&own);
            if ((e = scdb_model_cache_new(code, P, &own))) goto done;
            t0 = scdb_now();
            if ((e = scdb_model_forward(code, tok, NULL, P, own, logits, NULL))) goto done;
            own_ms[j] = (scdb_now() - t0) * 1e3;
            t0 = scdb_now();
            if ((e = scdb_lookup(f.n[1].cons, tok, (size_t)P, &lr)) ||
                (e = scdb_get(f.n[1].cons, tok, (size_t)P, f.n[1].arena, 0, 0, &gr)))
                goto broker_fail;
            get_ms[j] = (scdb_now() - t0) * 1e3;
            if ((int)gr.tokens_written != P || gr.remote_blocks != (uint32_t)(P / 64)) {
                fprintf(stderr, WHO ": the %d-token prefix was not a whole remote hit on B (%u "
                        "tokens, %u remote blocks)\n", P, gr.tokens_written, gr.remote_blocks);
                goto done;
            }
            /* the first token's logits: re-run the last prefix token */
            akv->n = P - 1;
            if ((e = scdb_model_forward(code, tok + P - 1, NULL, 1, akv, logits, NULL))) goto done;
            ttft_ms[j] = (scdb_now() - t0) * 1e3;
            out->ttft_blocks = P / 64;
        }
        out->own_prefill_ms = scdb_bench_median(own_ms, (size_t)R);
        out->remote_hit_ttft_ms = scdb_bench_median(ttft_ms, (size_t)R);
        out->remote_hit_get_ms = scdb_bench_median(get_ms, (size_t)R);
        progress(o, "  TTFT of %d tokens: own prefill %.1f ms, remote hit %.1f ms\n", P,
                 out->own_prefill_ms, out->remote_hit_ttft_ms);
    }
    rc = 0;
    goto done;
broker_fail:
    fprintf(stderr, WHO ": family part: %s (%s)\n",
            f.count > 1 && f.n[1].cons ? scdb_last_error(f.n[1].cons) : "", scdb_strerror(e));
done:
    scdb_arena_free(&states);
    scdb_arena_free(&raw_arena);
    scdb_close(&raw_prod);
    scdb_close(&raw_cons);
    fleet_stop(&f);
    scdb_kv_cache_free(&kv);
    scdb_kv_cache_free(&own);
    scdb_model_free(&base);
    scdb_model_free(&code);
    free(text);
    free(logits);
    samples_free(&xr);
    samples_free(&xs);
    return rc;
}

/* --------------------------------------------------------------- reports */

static double rate(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0; }

static cJSON *replay_json(const replay_out *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "requests", (double)r->requests);
    cJSON_AddNumberToObject(j, "block_refs", (double)r->refs);
    cJSON_AddNumberToObject(j, "block_hits", (double)r->hits);
    cJSON_AddNumberToObject(j, "ideal_hits", (double)r->ideal);
    cJSON_AddNumberToObject(j, "hit_rate", rate(r->hits, r->refs));
    cJSON_AddNumberToObject(j, "ideal_hit_rate", rate(r->ideal, r->refs));
    cJSON_AddNumberToObject(j, "remote_blocks_served", (double)r->remote_blocks);
    cJSON_AddNumberToObject(j, "client_errors", (double)r->client_errors);
    cJSON_AddNumberToObject(j, "wrong_bytes", (double)r->wrong_bytes);
    cJSON_AddNumberToObject(j, "checked_bytes", (double)r->checked_bytes);
    cJSON_AddNumberToObject(j, "remote_bytes_read", (double)r->remote.remote_bytes_read);
    cJSON_AddNumberToObject(j, "remote_bytes_written", (double)r->remote.remote_bytes_written);
    cJSON_AddNumberToObject(j, "remote_errors", (double)r->remote.remote_errors);
    cJSON_AddNumberToObject(j, "remote_invalid", (double)r->remote.remote_invalid);
    cJSON_AddNumberToObject(j, "remote_write_errors", (double)r->remote.remote_write_errors);
    cJSON_AddNumberToObject(j, "remote_queue_drops", (double)r->remote.remote_queue_drops);
    cJSON_AddNumberToObject(j, "settle_timeouts", (double)r->settle_timeouts);
    cJSON_AddNumberToObject(j, "wall_s", r->wall_s);
    {
        cJSON *pb = cJSON_AddArrayToObject(j, "requests_per_broker");
        for (int i = 0; i < MAX_BROKERS && (i == 0 || r->per_broker[i]); i++)
            cJSON_AddItemToArray(pb, cJSON_CreateNumber((double)r->per_broker[i]));
    }
    if (r->first_error[0]) cJSON_AddStringToObject(j, "first_error", r->first_error);
    return j;
}

/* ------------------------------------------------------------------ main */

int scdb_bench_cluster(int argc, char **argv)
{
    copts o;
    scdb_trace t = {0};
    char trace_path[1200] = "", root[700] = "", why[512], models[1024], bkeys[256];
    lc_cluster *lc = NULL;
    fleet f;
    replay_model m;
    replay_out local = {0}, remote = {0}, kill = {0};
    family_out fam;
    uint64_t *chain = NULL, n_chains = 0, kill_chains = 0, *kchain = NULL;
    cJSON *json = NULL;
    int prc, rc = 1, have_kill = 0, have_family = 0;
    size_t n_req;

    if ((prc = parse_opts(argc, argv, &o))) return prc == 1 ? 0 : prc;
    memset(&f, 0, sizeof f);
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    memset(&fam, 0, sizeof fam);
    if (!lc_available(why, sizeof why)) {
        fprintf(stderr, WHO ": %s\n", why);
        return 77;
    }
    if (!o.dir) {
        const char *tmp = getenv("TMPDIR");
        o.dir = tmp && *tmp ? tmp : "/tmp";
    }
    /* the trace */
    if (!o.synthetic && !o.trace_path) {
        if (scdb_trace_default_path(trace_path, sizeof trace_path)) {
            fprintf(stderr, "%s: the trace %s is missing (it ships as data/traces/%s); "
                    "pass --trace FILE, or --synthetic for the built-in seeded trace\n",
                    WHO, trace_path, SCDB_TRACE_NAME);
            return 1;
        }
    } else if (o.trace_path) {
        snprintf(trace_path, sizeof trace_path, "%s", o.trace_path);
    }
    if (o.synthetic ? scdb_trace_synthetic(4000, o.seed, &t)
                    : scdb_trace_load(trace_path, 0, WHO, &t))
        return 1;
    n_req = o.requests && o.requests < t.n_req ? o.requests : t.n_req;
    if (!(chain = malloc(t.n_ids * sizeof *chain)) ||
        scdb_trace_chain_ids(&t, n_req, chain, &n_chains)) {
        fprintf(stderr, WHO ": out of memory\n");
        goto done;
    }
    /* the replays' model */
    memset(&m, 0, sizeof m);
    m.bt = o.shape.block_tokens;
    m.per_token_unscaled = scdb_bench_shape_codes_per_token(&o.shape);
    m.head_dim = (int)((double)m.per_token_unscaled * o.shape.codes_scale / 4.0 + 0.5);
    if (m.head_dim < 1) m.head_dim = 1;
    m.block_bytes = (uint64_t)4 * m.head_dim * m.bt;
    m.max_seq = (int)(t.max_blocks * m.bt);
    snprintf(models, sizeof models,
             "[model m7b]\nn_layers = 1\nn_kv_heads = 1\nhead_dim = %d\nmax_seq_len = %d\n"
             "raw_dtype = f16\n", m.head_dim, m.max_seq);
    snprintf(bkeys, sizeof bkeys, "block_tokens = %u\nhot_capacity = 256MiB\n", m.bt);

    snprintf(root, sizeof root, "%s/scdb-bench-cluster-XXXXXX", o.dir);
    if (!mkdtemp(root)) {
        fprintf(stderr, WHO ": mkdtemp %s: %s\n", root, strerror(errno));
        root[0] = 0;
        goto done;
    }
    /* the cluster first: it forks, before any client thread exists */
    {
        lc_options lo = {.masters = 3, .replicas = 1, .node_timeout_ms = 2000};
        char mm[32];
        progress(&o, "%s: starting a local Redis Cluster (3 masters + 3 replicas)\n", WHO);
        if (lc_start(&lo, &lc, why, sizeof why) != LC_OK) {
            fprintf(stderr, WHO ": the cluster did not start: %s\n", why);
            goto done;
        }
        snprintf(mm, sizeof mm, "%llu", (unsigned long long)o.maxmemory);
        for (int i = 0; i < lc_size(lc); i++) {
            redisReply *r1 = lc_cmd(lc, i, "CONFIG SET maxmemory %s", mm);
            redisReply *r2 = lc_cmd(lc, i, "CONFIG SET maxmemory-policy allkeys-lru");
            int ok = r1 && r2 && r1->type == REDIS_REPLY_STATUS && r2->type == REDIS_REPLY_STATUS;
            if (r1) freeReplyObject(r1);
            if (r2) freeReplyObject(r2);
            if (!ok) {
                fprintf(stderr, WHO ": CONFIG SET on node %d failed\n", i);
                goto done;
            }
        }
    }
    progress(&o, "%s: trace %s, %zu requests, %u-token blocks of %llu bytes (7B-class codes "
             "%llu B/token scaled by %g), %d brokers, route %s\n", WHO, t.source, n_req, m.bt,
             (unsigned long long)m.block_bytes, (unsigned long long)m.per_token_unscaled,
             o.shape.codes_scale, o.brokers, o.route_session ? "session" : "round-robin");

    {
        replay_ctx c = {.o = &o, .t = &t, .n_req = n_req, .m = &m, .seed = o.seed, .f = &f,
                        .lc = NULL, .kill_at = SIZE_MAX, .chain = chain, .n_chains = n_chains};
        progress(&o, "1a. local tiers only\n");
        if (fleet_start(&o, root, "local", o.brokers, bkeys, models, NULL, &f) ||
            fleet_clients(&f, "m7b", "m7b", NULL, m.max_seq) || replay(&c, &local))
            goto done;
        fleet_stop(&f);
        progress(&o, "1b. with the remote tier\n");
        if (fleet_start(&o, root, "remote", o.brokers, bkeys, models, lc_seeds(lc), &f) ||
            fleet_clients(&f, "m7b", "m7b", NULL, m.max_seq) || replay(&c, &remote))
            goto done;
        fleet_stop(&f);
    }
    progress(&o, "2. latency and TTFT with the bundled family (%s)\n", o.data);
    have_family = family(&o, root, lc_seeds(lc), &fam) == 0;
    if (g_stop) goto done;
    if (!o.no_kill) {
        size_t kn = o.kill_requests < n_req ? o.kill_requests : n_req;
        progress(&o, "3. a master killed during a replay of %zu requests\n", kn);
        /* an empty cluster and fresh brokers; new tokens (another seed) */
        for (int i = 0; i < lc_size(lc); i++) {
            redisReply *r = lc_cmd(lc, i, "FLUSHALL");
            if (r) freeReplyObject(r);
        }
        if (!(kchain = malloc(t.n_ids * sizeof *kchain)) ||
            scdb_trace_chain_ids(&t, kn, kchain, &kill_chains))
            goto done;
        replay_ctx c = {.o = &o, .t = &t, .n_req = kn, .m = &m, .seed = o.seed + 1, .f = &f,
                        .lc = lc, .kill_at = kn / 4, .chain = kchain, .n_chains = kill_chains};
        if (fleet_start(&o, root, "kill", o.brokers, bkeys, models, lc_seeds(lc), &f) ||
            fleet_clients(&f, "m7b", "m7b", NULL, m.max_seq) || replay(&c, &kill))
            goto done;
        fleet_stop(&f);
        have_kill = 1;
    }

    /* ---------------------------------------------------------- report */
    {
        double hl = rate(local.hits, local.refs), hr = rate(remote.hits, remote.refs);
        double ideal = rate(remote.ideal, remote.refs);
        uint64_t moved = remote.remote.remote_bytes_read + remote.remote.remote_bytes_written;
        printf("# scdb bench cluster\n\n");
        printf("trace: %s, %zu requests, %llu block references; %d brokers (separate processes, "
               "own LMDB each, no fsync), route %s; Redis Cluster of 3 masters + 3 replicas on "
               "loopback, persistence off, maxmemory %llu per node, allkeys-lru\n",
               t.source, n_req, (unsigned long long)remote.refs, o.brokers,
               o.route_session ? "session" : "round-robin", (unsigned long long)o.maxmemory);
        printf("replay payloads: 7B-class codes, %llu B/token (%u layers x (r_K + r_V = %llu) x %u "
               "bytes) SCALED by %g to %llu bytes per %u-token block; every byte served checked\n\n",
               (unsigned long long)m.per_token_unscaled, o.shape.layers,
               (unsigned long long)o.shape.rank_k + o.shape.rank_v, o.shape.elem_bytes,
               o.shape.codes_scale, (unsigned long long)m.block_bytes, m.bt);
        printf("| measure | value |\n|---|---|\n");
        printf("| fleet hit rate, local tiers only | %.4f (%.1f%% of ideal) |\n", hl,
               ideal > 0 ? 100 * hl / ideal : 0);
        printf("| fleet hit rate, with the remote tier | %.4f (%.1f%% of ideal) |\n", hr,
               ideal > 0 ? 100 * hr / ideal : 0);
        printf("| single-cache ideal | %.4f |\n", ideal);
        printf("| blocks served from the remote tier | %llu of %llu hits |\n",
               (unsigned long long)remote.remote_blocks, (unsigned long long)remote.hits);
        printf("| remote bytes moved (read + written) | %.1f MiB (%.1f + %.1f) |\n",
               (double)moved / 1048576, (double)remote.remote.remote_bytes_read / 1048576,
               (double)remote.remote.remote_bytes_written / 1048576);
        printf("| replay wall time, local / remote | %.0f s / %.0f s |\n", local.wall_s,
               remote.wall_s);
        printf("| requests per broker |");
        for (int i = 0; i < o.brokers; i++)
            printf("%s %llu", i ? " /" : "", (unsigned long long)remote.per_broker[i]);
        printf(" |\n");
        if (have_family) {
            printf("| get of one 64-token block of raw KV (%llu B), local hit p50 / p99 | %.0f / "
                   "%.0f us |\n", (unsigned long long)fam.raw_block_bytes, fam.raw.local_us[0],
                   fam.raw.local_us[1]);
            printf("| get of one 64-token block of raw KV, remote hit p50 / p99 | %.0f / %.0f us "
                   "(fetch + verify %.0f / %.0f us) |\n", fam.raw.get_us[0], fam.raw.get_us[1],
                   fam.raw.fetch_us[0], fam.raw.fetch_us[1]);
            printf("| get of one 64-token block of SCD codes (%llu B), local hit p50 / p99 | %.0f "
                   "/ %.0f us |\n", (unsigned long long)fam.scd_block_bytes, fam.scd.local_us[0],
                   fam.scd.local_us[1]);
            printf("| get of one 64-token block of SCD codes, remote hit p50 / p99 | %.0f / %.0f "
                   "us (fetch + verify %.0f / %.0f us, SCD decode %.0f / %.0f us) |\n",
                   fam.scd.get_us[0], fam.scd.get_us[1], fam.scd.fetch_us[0], fam.scd.fetch_us[1],
                   fam.scd.decode_us[0], fam.scd.decode_us[1]);
            printf("| TTFT of %d tokens, remote hit (lookup + get of %d blocks of SCD codes + last "
                   "token) | %.1f ms (lookup + get %.1f ms) |\n", o.ttft_prefix, fam.ttft_blocks,
                   fam.remote_hit_ttft_ms, fam.remote_hit_get_ms);
            printf("| consumer's own prefill of the same %d tokens | %.1f ms (%.1fx the remote "
                   "hit) |\n", o.ttft_prefix, fam.own_prefill_ms,
                   fam.remote_hit_ttft_ms > 0 ? fam.own_prefill_ms / fam.remote_hit_ttft_ms : 0);
        } else {
            printf("| latency and TTFT part | FAILED (see stderr) |\n");
        }
        if (have_kill)
            printf("| master killed at request %zu of %llu: client errors / wrong bytes | %llu / "
                   "%llu (of %.1f MiB checked); %llu remote blocks served after the kill; hit "
                   "rate %.4f (ideal %.4f) |\n", o.kill_requests < n_req ? o.kill_requests / 4 : n_req / 4,
                   (unsigned long long)kill.requests, (unsigned long long)kill.client_errors,
                   (unsigned long long)kill.wrong_bytes, (double)kill.checked_bytes / 1048576,
                   (unsigned long long)kill.remote_after_kill, rate(kill.hits, kill.refs),
                   rate(kill.ideal, kill.refs));
        else
            printf("| master-kill round | not run (--no-kill) |\n");
        if (local.client_errors + remote.client_errors + local.wrong_bytes + remote.wrong_bytes)
            printf("\nWARNING: replay client errors %llu / %llu, wrong bytes %llu / %llu (first: "
                   "%s%s)\n", (unsigned long long)local.client_errors,
                   (unsigned long long)remote.client_errors,
                   (unsigned long long)local.wrong_bytes, (unsigned long long)remote.wrong_bytes,
                   local.first_error, remote.first_error);
        if (remote.settle_timeouts)
            printf("\nnote: %llu requests did not see their remote writes land within 30 s\n",
                   (unsigned long long)remote.settle_timeouts);
        printf("\nGoals: remote >= 99%% of ideal: %s; remote hit >= 5x faster than own prefill: "
               "%s; remote get p99 < 2 ms: %s; master kill: 0 client errors and 0 wrong bytes: "
               "%s\n", ideal > 0 && hr >= 0.99 * ideal ? "met" : "NOT met",
               have_family && fam.own_prefill_ms >= 5 * fam.remote_hit_ttft_ms ? "met" : "NOT met",
               have_family && fam.raw.get_us[1] < 2000 ? "met" : "NOT met",
               !have_kill ? "not run" : kill.client_errors + kill.wrong_bytes ? "NOT met" : "met");

        json = cJSON_CreateObject();
        cJSON_AddStringToObject(json, "bench", "cluster");
        cJSON_AddStringToObject(json, "trace", t.source);
        cJSON_AddNumberToObject(json, "requests", (double)n_req);
        cJSON_AddNumberToObject(json, "brokers", o.brokers);
        cJSON_AddStringToObject(json, "route", o.route_session ? "session" : "rr");
        cJSON_AddNumberToObject(json, "fleet_hit_rate_local", hl);
        cJSON_AddNumberToObject(json, "fleet_hit_rate_remote", hr);
        cJSON_AddNumberToObject(json, "ideal_hit_rate", ideal);
        if (have_family) {
            /* the goal's figures: one 64-token block end to end (raw KV,
             * whose decode is a conversion); SCD codes in scd_* */
            cJSON_AddNumberToObject(json, "local_get_p50_us", fam.raw.local_us[0]);
            cJSON_AddNumberToObject(json, "local_get_p99_us", fam.raw.local_us[1]);
            cJSON_AddNumberToObject(json, "remote_get_p50_us", fam.raw.get_us[0]);
            cJSON_AddNumberToObject(json, "remote_get_p99_us", fam.raw.get_us[1]);
            cJSON_AddNumberToObject(json, "remote_fetch_p50_us", fam.raw.fetch_us[0]);
            cJSON_AddNumberToObject(json, "remote_fetch_p99_us", fam.raw.fetch_us[1]);
            cJSON_AddNumberToObject(json, "remote_get_block_bytes", (double)fam.raw_block_bytes);
            cJSON_AddNumberToObject(json, "scd_local_get_p50_us", fam.scd.local_us[0]);
            cJSON_AddNumberToObject(json, "scd_local_get_p99_us", fam.scd.local_us[1]);
            cJSON_AddNumberToObject(json, "scd_remote_get_p50_us", fam.scd.get_us[0]);
            cJSON_AddNumberToObject(json, "scd_remote_get_p99_us", fam.scd.get_us[1]);
            cJSON_AddNumberToObject(json, "scd_remote_fetch_p50_us", fam.scd.fetch_us[0]);
            cJSON_AddNumberToObject(json, "scd_remote_fetch_p99_us", fam.scd.fetch_us[1]);
            cJSON_AddNumberToObject(json, "scd_decode_p50_us", fam.scd.decode_us[0]);
            cJSON_AddNumberToObject(json, "scd_decode_p99_us", fam.scd.decode_us[1]);
            cJSON_AddNumberToObject(json, "scd_block_bytes", (double)fam.scd_block_bytes);
            cJSON_AddNumberToObject(json, "remote_hit_ttft_ms", fam.remote_hit_ttft_ms);
            cJSON_AddNumberToObject(json, "remote_hit_get_ms", fam.remote_hit_get_ms);
            cJSON_AddNumberToObject(json, "own_prefill_ms", fam.own_prefill_ms);
            cJSON_AddNumberToObject(json, "ttft_prefix_tokens", o.ttft_prefix);
            cJSON_AddNumberToObject(json, "latency_samples", fam.samples);
        } else {
            const char *names[] = {"local_get_p99_us", "remote_get_p50_us", "remote_get_p99_us",
                                   "remote_hit_ttft_ms", "own_prefill_ms"};
            for (size_t i = 0; i < SCDB_ARRAY_LEN(names); i++) cJSON_AddNullToObject(json, names[i]);
        }
        if (have_kill) {
            cJSON_AddNumberToObject(json, "master_kill_client_errors", (double)kill.client_errors);
            cJSON_AddNumberToObject(json, "master_kill_wrong_bytes", (double)kill.wrong_bytes);
            cJSON_AddItemToObject(json, "master_kill", replay_json(&kill));
        } else {
            cJSON_AddNullToObject(json, "master_kill_client_errors");
            cJSON_AddNullToObject(json, "master_kill_wrong_bytes");
        }
        cJSON_AddNumberToObject(json, "remote_bytes_moved", (double)moved);
        cJSON_AddNumberToObject(json, "block_tokens", m.bt);
        cJSON_AddNumberToObject(json, "payload_bytes_per_block", (double)m.block_bytes);
        cJSON_AddNumberToObject(json, "payload_scale", o.shape.codes_scale);
        cJSON_AddNumberToObject(json, "unscaled_bytes_per_token", (double)m.per_token_unscaled);
        cJSON_AddItemToObject(json, "replay_local", replay_json(&local));
        cJSON_AddItemToObject(json, "replay_remote", replay_json(&remote));
        if (o.json && scdb_bench_write_json(o.json, json, WHO)) goto done;
    }
    rc = 0;
done:
    fleet_stop(&f);
    lc_stop(&lc);
    if (root[0] && !o.keep) scdb_rm_tree(root);
    else if (root[0]) fprintf(stderr, WHO ": kept %s\n", root);
    cJSON_Delete(json);
    free(chain);
    free(kchain);
    scdb_trace_free(&t);
    return rc;
}
