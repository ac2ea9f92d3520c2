/*
 * bench_store.c — `scdb bench store`: replay a prefix-caching request trace
 * against the store at several capacities, and the very same operations on a
 * bare LMDB environment as the physical reference, in the same run.
 *
 * Trace: one JSON object per line, {"timestamp": ms, "input_length": n,
 * "output_length": m, "hash_ids": [...]}: the prompt as a sequence of
 * fixed-size blocks (512 tokens in Mooncake's traces); equal ids = equal
 * block content; a shared leading run of ids = a shared prefix.  Each id is
 * mapped to a deterministic block of tokens (splitmix64 seeded by the id and
 * --seed), so a request's tokens are the concatenation of its blocks and the
 * store's chained keys reproduce the trace's prefix semantics.  Every id is a
 * full block (the trace's last block of a request is usually partial; we
 * count it as a full one, as the trace's block accounting does).
 *
 * Per request, both sides: longest-prefix lookup (hashing the request's
 * full blocks, then probing), then one write transaction that stores the
 * missing blocks.  The bare side deletes exactly the keys the store evicted
 * in that request (reported by the store's on_evict hook), so both hold the
 * same keys after every request and see the same hits.  Payload bytes are
 * identical (a shared random buffer at a key-dependent offset); the store
 * adds its header (with a per-layer section table) and checksum.
 *
 * Ideal hit rate: computed from the trace alone, independently of the store:
 * a block reference hits iff its exact prefix chain (ids[0..i]) occurred in
 * an earlier request (a map from (parent chain id, hash id) to chain id).
 *
 * Payloads (per block of B tokens, scaled by --scale, see --help):
 *   codes: layers x (rank_k + rank_v) x 2 bytes per token: a 7B-class model
 *          (32 layers, r_K = r_V = 128, f16) -> 16 KiB/token, 8 MiB/block.
 *   raw:   layers x 2 x kv_dim x 2 bytes per token: 32 x 2 x 4096 x 2 =
 *          512 KiB/token -> 256 MiB/block.
 * Neither fits this machine at full size over the whole trace (43,924
 * distinct blocks: 343 GiB of codes, 11 TiB of raw KV), so payloads are
 * scaled down and raw KV replays only a leading part of the trace; the
 * output says so on every row.
 */
#include "bench.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <lmdb.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scdb_common.h"
#include "store.h"
#include "trace.h"


/* ------------------------------------------------------------------ options */

#define MAX_CAPS 16

typedef struct bopts {
    const char *trace_path;
    bool synthetic;
    size_t synth_requests;
    const char *json;
    scdb_bench_shape shape;
    char payloads[64];
    size_t requests, raw_requests;
    double caps[MAX_CAPS];
    int n_caps;
    double hot_frac;
    bool no_sync, no_lmdb, quiet;
    const char *dir;
    uint64_t seed;
} bopts;

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench store [options]\n"
"\n"
"Replays a prefix-caching request trace against the store (lookup the\n"
"longest stored prefix, then put the missing blocks in one batch) at several\n"
"capacities, and the same operations on a bare LMDB environment in the same\n"
"run.  Prints a markdown table; progress goes to stderr.\n"
"\n"
"Trace\n"
"  --trace FILE         JSON lines {\"timestamp\":ms,\"input_length\":n,\n"
"                       \"output_length\":m,\"hash_ids\":[...]}; each id is one\n"
"                       block.  Default: traces/" SCDB_TRACE_NAME "\n"
"                       in the data directory (data/traces/; $SCDB_DATA\n"
"                       overrides); missing is an error, not --synthetic.\n"
"  --synthetic          built-in seeded trace: 64 shared system prompts\n"
"                       (2-12 blocks, ~1/rank popularity), 40%% new sessions\n"
"                       (prompt + 1-16 blocks), 60%% continued sessions\n"
"                       (previous prompt + 1-6 blocks), <= 400 blocks each\n"
"  --synthetic-requests N   requests in the synthetic trace (4000)\n"
"  --requests N         replay only the first N requests (0 = all; default 0)\n"
"  --block-tokens N     tokens per block (512, the Mooncake trace's block)\n"
"  --seed N             seed for block tokens and the synthetic trace (1)\n"
"\n"
"Payloads (per block; both sides store the same payload bytes)\n"
"  --payload LIST       comma list of: codes, raw (default codes,raw)\n"
"  --layers N           model layers (32: a 7B-class model)\n"
"  --rank-k N, --rank-v N   code ranks per layer (128 each): codes are\n"
"                       layers x (rank_k + rank_v) x elem bytes per token\n"
"  --kv-dim N           K (and V) width per layer for raw KV (4096): raw KV is\n"
"                       layers x 2 x kv_dim x elem bytes per token\n"
"  --elem-bytes N       bytes per value (2: f16)\n"
"  --codes-scale F      multiply the codes payload by F (default 1/512: a 7B\n"
"                       block of codes is 8 MiB; 43,924 of them would not fit)\n"
"  --raw-scale F        multiply the raw payload by F (default 1/512)\n"
"  --raw-requests N     raw KV replays only the first N requests (default 100)\n"
"\n"
"Capacity and store options\n"
"  --capacities LIST    comma list of fractions of the unbounded footprint\n"
"                       (default 1,0.5,0.25,0.1; 1 = unbounded; always run)\n"
"  --hot-fraction F     hot tier bytes as a fraction of the disk capacity\n"
"                       (default 0: no hot tier, as the bare side has none)\n"
"  --nosync             MDB_NOSYNC on both sides (default: fsync each commit,\n"
"                       the store's durable default)\n"
"  --no-lmdb            skip the bare LMDB reference\n"
"  --dir DIR            where to make the temporary environments ($TMPDIR or\n"
"                       /tmp); they are removed at the end\n"
"\n"
"Output\n"
"  --json FILE          also write {\"rows\":[...], ...}\n"
"  --quiet              no progress on stderr\n"
"  --help               this text\n");
}

static int parse_list(const char *s, double *out, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        double v = strtod(s, &end);
        if (end == s || v <= 0 || v > 1) return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int parse_opts(int argc, char **argv, bopts *o)
{
    enum { O_TRACE = 256, O_SYN, O_SYNREQ, O_JSON, O_PAY, O_REQ, O_RREQ, O_CAPS, O_HOT,
           O_NOSYNC, O_NOLMDB, O_DIR, O_SEED, O_QUIET, O_HELP };
    static const struct option lo[] = {
        {"trace", 1, 0, O_TRACE}, {"synthetic", 0, 0, O_SYN},
        {"synthetic-requests", 1, 0, O_SYNREQ}, {"json", 1, 0, O_JSON},
        {"payload", 1, 0, O_PAY}, SCDB_BENCH_SHAPE_CODES_OPTIONS, SCDB_BENCH_SHAPE_RAW_OPTIONS,
        {"requests", 1, 0, O_REQ}, {"raw-requests", 1, 0, O_RREQ},
        {"capacities", 1, 0, O_CAPS}, {"hot-fraction", 1, 0, O_HOT},
        {"nosync", 0, 0, O_NOSYNC}, {"no-lmdb", 0, 0, O_NOLMDB}, {"dir", 1, 0, O_DIR},
        {"seed", 1, 0, O_SEED}, {"quiet", 0, 0, O_QUIET}, {"help", 0, 0, O_HELP},
        {0, 0, 0, 0}};
    int c;

    memset(o, 0, sizeof *o);
    o->synth_requests = 4000;
    scdb_bench_shape_defaults(&o->shape);
    snprintf(o->payloads, sizeof o->payloads, "codes,raw");
    o->raw_requests = 100;
    o->caps[0] = 1, o->caps[1] = 0.5, o->caps[2] = 0.25, o->caps[3] = 0.1;
    o->n_caps = 4;
    o->seed = 1;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char why[160];
        scdb_err bad = SCDB_OK;
        uint64_t u;
        switch (c) {
        case O_TRACE: o->trace_path = optarg; break;
        case O_SYN: o->synthetic = true; break;
        case O_SYNREQ:
            if (!(bad = scdb_parse_u64("--synthetic-requests", optarg, 0, SIZE_MAX, &u, why, sizeof why)))
                o->synth_requests = (size_t)u;
            break;
        case O_JSON: o->json = optarg; break;
        case O_PAY: {
            /* one or two of codes, raw, each once */
            char *w[2];
            int n = strlen(optarg) < sizeof o->payloads ? scdb_split_list(optarg, w, 2) : -1;
            int no = n < 1 || (n == 2 && !strcmp(w[0], w[1]));
            for (int i = 0; i < n; i++) {
                no = no || (strcmp(w[i], "codes") && strcmp(w[i], "raw"));
                free(w[i]);
            }
            if (no) bad = SCDB_EINVAL;
            if (bad) snprintf(why, sizeof why, "--payload '%s': want codes, raw or both, comma-separated", optarg);
            else snprintf(o->payloads, sizeof o->payloads, "%s", optarg);
            break;
        }
        case O_REQ:
            if (!(bad = scdb_parse_u64("--requests", optarg, 0, SIZE_MAX, &u, why, sizeof why)))
                o->requests = (size_t)u;
            break;
        case O_RREQ:
            if (!(bad = scdb_parse_u64("--raw-requests", optarg, 0, SIZE_MAX, &u, why, sizeof why)))
                o->raw_requests = (size_t)u;
            break;
        case O_CAPS:
            if ((o->n_caps = parse_list(optarg, o->caps, MAX_CAPS)) <= 0) {
                fprintf(stderr, "scdb bench store: --capacities wants fractions in (0, 1]\n");
                return 2;
            }
            break;
        case O_HOT:
            bad = scdb_parse_f64("--hot-fraction", optarg, 0, DBL_MAX, &o->hot_frac, why, sizeof why);
            break;
        case O_NOSYNC: o->no_sync = true; break;
        case O_NOLMDB: o->no_lmdb = true; break;
        case O_DIR: o->dir = optarg; break;
        case O_SEED:
            bad = scdb_parse_u64("--seed", optarg, 0, UINT64_MAX, &o->seed, why, sizeof why);
            break;
        case O_QUIET: o->quiet = true; break;
        case O_HELP: case 'h': usage(stdout); return 1;
        default:
            if (c < SCDB_BENCH_SHAPE_OPT) {
                usage(stderr);
                return 2;
            }
            bad = scdb_bench_shape_parse(&o->shape, c, optarg, why, sizeof why);
        }
        if (bad) {
            fprintf(stderr, "scdb bench store: %s\n", why);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "scdb bench store: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* ------------------------------------------------------------------ replay */

typedef struct profile {
    const char *name;
    uint64_t per_token;        /* unscaled payload bytes per token     */
    uint64_t block_bytes;      /* scaled payload bytes per block       */
    double scale;
    size_t n_req;
    uint32_t n_sections;       /* K and V per layer                    */
} profile;

typedef struct row {
    const char *profile;
    double frac;
    uint64_t capacity;
    uint64_t refs, hits, ideal;
    uint64_t puts, lookups, lmdb_puts;
    double put_s, lookup_s, lmdb_put_s, lmdb_lookup_s;
    double p50, p99, lmdb_p50, lmdb_p99;
    uint64_t disk_bytes, accounted_bytes, lmdb_disk_bytes, evictions;
    uint64_t mismatches;
    uint64_t truncated_puts;     /* requests longer than the capacity */
    uint64_t block_bytes;
    size_t n_req;
    double wall_s;
} row;

typedef struct ev_list {
    scdb_key *k;
    size_t n, cap;
    bool oom;
} ev_list;

static void on_evict(void *ctx, const scdb_key *key)
{
    ev_list *l = ctx;
    if (l->n == l->cap) {
        size_t c = l->cap ? 2 * l->cap : 256;
        scdb_key *p = realloc(l->k, c * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->k = p;
        l->cap = c;
    }
    l->k[l->n++] = *key;
}

static uint64_t file_size(const char *dir)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/data.mdb", dir);
    return stat(p, &st) ? 0 : (uint64_t)st.st_size;
}

#define LMDB_TRY(call, what)                                                   \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_) {                                                             \
            fprintf(stderr, "scdb bench store: lmdb %s: %s\n", what,           \
                    mdb_strerror(rc_));                                        \
            goto out;                                                          \
        }                                                                      \
    } while (0)

static int replay(const bopts *o, const scdb_trace *t, const profile *p, double frac,
                  uint64_t capacity, uint64_t map_bytes, row *out)
{
    char base[1024], sdir[1100], ldir[1100];
    scdb_store_opts so = {0};
    scdb_store *s = NULL;
    scdb_store_stat st;
    MDB_env *env = NULL;
    MDB_dbi dbi = 0;
    scdb_ns ns;
    ev_list ev = {0};
    const uint32_t bt = o->shape.block_tokens;
    int32_t *tokens = malloc(t->max_blocks * bt * sizeof *tokens);
    scdb_key *keys = malloc(t->max_blocks * sizeof *keys);
    scdb_key *bkeys = malloc(t->max_blocks * sizeof *bkeys);
    scdb_block_put *puts = calloc(t->max_blocks, sizeof *puts);
    uint64_t *sections = malloc(p->n_sections * sizeof *sections);
    uint8_t *payload = malloc(2 * p->block_bytes + 16);
    double *lat = malloc(p->n_req * sizeof *lat), *blat = malloc(p->n_req * sizeof *blat);
    double t_start = scdb_now(), t_prog = t_start;
    int rc = -1;
    scdb_err e;

    memset(out, 0, sizeof *out);
    out->profile = p->name;
    out->frac = frac;
    out->capacity = capacity;
    out->block_bytes = p->block_bytes;
    out->n_req = p->n_req;
    snprintf(base, sizeof base, "%s/scdb-bench-store-XXXXXX", o->dir);
    if (!tokens || !keys || !bkeys || !puts || !sections || !payload || !lat || !blat) {
        fprintf(stderr, "scdb bench store: out of memory\n");
        free(tokens), free(keys), free(bkeys), free(puts), free(sections), free(payload);
        free(lat), free(blat);
        return -1;
    }
    if (!mkdtemp(base)) {
        fprintf(stderr, "scdb bench store: mkdtemp %s: %s\n", base, strerror(errno));
        base[0] = '\0';
        goto out;
    }
    snprintf(sdir, sizeof sdir, "%s/store", base);
    snprintf(ldir, sizeof ldir, "%s/lmdb", base);
    {
        uint64_t r = o->seed ^ 0xC0DE;
        for (uint64_t i = 0; i < 2 * p->block_bytes + 16; i += 8) {
            uint64_t v = scdb_trace_splitmix(&r);
            memcpy(payload + i, &v, 2 * p->block_bytes + 16 - i < 8 ? 2 * p->block_bytes + 16 - i : 8);
        }
    }
    for (uint32_t i = 0; i < p->n_sections; i++)
        sections[i] = p->block_bytes / p->n_sections * i;
    scdb_ns_make("bench-7b-codebook", 17, SCDB_F16, 1, &ns);

    so.path = sdir;
    so.block_tokens = bt;
    so.disk_capacity_bytes = capacity;
    so.hot_capacity_bytes = (uint64_t)(o->hot_frac * (double)(capacity ? capacity : map_bytes / 2));
    so.no_sync = o->no_sync;
    so.map_size = map_bytes;
    so.on_evict = on_evict;
    so.on_evict_ctx = &ev;
    if ((e = scdb_store_open(&so, &s))) {
        fprintf(stderr, "scdb bench store: store open: %s\n", scdb_strerror(e));
        goto out;
    }
    if (!o->no_lmdb) {
        MDB_txn *txn;
        mkdir(ldir, 0755);
        LMDB_TRY(mdb_env_create(&env), "env_create");
        LMDB_TRY(mdb_env_set_mapsize(env, map_bytes), "set_mapsize");
        LMDB_TRY(mdb_env_open(env, ldir, MDB_NOTLS | (o->no_sync ? MDB_NOSYNC : 0), 0644),
                 "env_open");
        LMDB_TRY(mdb_txn_begin(env, NULL, 0, &txn), "txn_begin");
        LMDB_TRY(mdb_dbi_open(txn, NULL, 0, &dbi), "dbi_open");
        LMDB_TRY(mdb_txn_commit(txn), "commit");
    }

    for (size_t r = 0; r < p->n_req; r++) {
        size_t nb = t->off[r + 1] - t->off[r], full = 0, m = 0, bm = 0, nk = 0;
        size_t n_tok = nb * bt;
        for (size_t i = 0; i < nb; i++)
            scdb_trace_block_tokens(t->ids[t->off[r] + i], o->seed, tokens + i * bt, bt);

        for (int side = 0; side < 2; side++) {
            /* alternate which side goes first */
            bool store_side = (side == 0) == ((r & 1) == 0);
            if (store_side) {
                uint64_t t0 = scdb_now_ns();
                e = scdb_store_lookup(s, &ns, tokens, n_tok, keys, t->max_blocks, &full, &m);
                lat[r] = (double)(scdb_now_ns() - t0) / 1e3;
                out->lookup_s += lat[r] / 1e6;
                if (e) {
                    fprintf(stderr, "scdb bench store: lookup: %s\n", scdb_strerror(e));
                    goto out;
                }
            } else if (env) {
                MDB_txn *txn;
                uint64_t t0 = scdb_now_ns();
                scdb_block_key_chain(&ns, tokens, n_tok, bt, bkeys, t->max_blocks, &nk);
                LMDB_TRY(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), "txn_begin");
                for (bm = 0; bm < nk; bm++) {
                    MDB_val k = {16, bkeys[bm].b}, v;
                    int grc = mdb_get(txn, dbi, &k, &v);
                    if (grc == MDB_NOTFOUND) break;
                    if (grc) mdb_txn_abort(txn);
                    LMDB_TRY(grc, "get");
                }
                mdb_txn_abort(txn);
                blat[r] = (double)(scdb_now_ns() - t0) / 1e3;
                out->lmdb_lookup_s += blat[r] / 1e6;
            }
        }
        out->refs += full;
        out->hits += m;
        out->lookups++;
        if (env && bm != m) out->mismatches++;

        if (m < full) {
            size_t n_put = full - m, stored = 0;
            uint64_t t0;
            for (size_t i = m; i < full; i++) {
                scdb_block_put *b = &puts[i - m];
                uint64_t lo;
                memcpy(&lo, keys[i].b, 8);
                b->key = keys[i];
                memset(b->parent.b, 0, 16);
                if (i) b->parent = keys[i - 1];
                b->block_index = (uint32_t)i;
                b->payload_dtype = SCDB_F16;
                b->n_sections = p->n_sections;
                b->section_off = sections;
                b->payload = payload + lo % (p->block_bytes + 1);
                b->payload_len = p->block_bytes;
            }
            ev.n = 0;
            t0 = scdb_now_ns();
            e = scdb_store_put_batch(s, &ns, puts, n_put, &stored);
            out->put_s += (double)(scdb_now_ns() - t0) / 1e9;
            if (e == SCDB_EFULL) {
                /* a request longer than the whole capacity: its leading
                 * blocks are stored (they cannot evict each other) */
                out->truncated_puts++;
                n_put = stored;
                e = SCDB_OK;
            }
            if (e || ev.oom) {
                fprintf(stderr, "scdb bench store: put of %zu blocks at request %zu: %s\n",
                        n_put, r, e ? scdb_strerror(e) : "out of memory");
                goto out;
            }
            out->puts += n_put;
            if (env) {
                MDB_txn *txn;
                t0 = scdb_now_ns();
                LMDB_TRY(mdb_txn_begin(env, NULL, 0, &txn), "txn_begin");
                for (size_t i = 0; i < ev.n; i++) {
                    MDB_val k = {16, ev.k[i].b};
                    int drc = mdb_del(txn, dbi, &k, NULL);
                    if (drc && drc != MDB_NOTFOUND) {
                        mdb_txn_abort(txn);
                        LMDB_TRY(drc, "del");
                    }
                }
                for (size_t i = 0; i < n_put; i++) {
                    MDB_val k = {16, puts[i].key.b},
                            v = {(size_t)puts[i].payload_len, (void *)puts[i].payload};
                    int prc = mdb_put(txn, dbi, &k, &v, 0);
                    if (prc) {
                        mdb_txn_abort(txn);
                        LMDB_TRY(prc, "put");
                    }
                }
                LMDB_TRY(mdb_txn_commit(txn), "commit"); /* frees txn on error too */
                out->lmdb_put_s += (double)(scdb_now_ns() - t0) / 1e9;
                out->lmdb_puts += n_put;
            }
        }
        if (!o->quiet && scdb_now() - t_prog > 2.0) {
            t_prog = scdb_now();
            fprintf(stderr, "  [%s, capacity %s%.0f%%] %zu/%zu requests, hit rate %.3f, %.0f s\n",
                    p->name, frac >= 1 ? "unbounded " : "", frac * 100, r + 1, p->n_req,
                    out->refs ? (double)out->hits / (double)out->refs : 0, t_prog - t_start);
        }
    }
    scdb_store_stats(s, &st);
    out->evictions = st.evictions;
    out->accounted_bytes = st.disk_bytes;
    out->disk_bytes = st.file_bytes;
    out->lmdb_disk_bytes = env ? file_size(ldir) : 0;
    out->p50 = scdb_bench_pct(lat, p->n_req, 0.50);
    out->p99 = scdb_bench_pct(lat, p->n_req, 0.99);
    if (env) {
        out->lmdb_p50 = scdb_bench_pct(blat, p->n_req, 0.50);
        out->lmdb_p99 = scdb_bench_pct(blat, p->n_req, 0.99);
    }
    rc = 0;
out:
    scdb_store_close(&s);
    if (env) mdb_env_close(env);
    if (base[0]) scdb_rm_tree(base);
    free(tokens), free(keys), free(bkeys), free(puts), free(sections), free(payload);
    free(lat), free(blat), free(ev.k);
    out->wall_s = scdb_now() - t_start;
    return rc;
}

/* ------------------------------------------------------------------ report */

static double ratio_ovh(double store_s, double lmdb_s)
{
    return lmdb_s > 0 ? (store_s / lmdb_s - 1) * 100 : 0;
}

static void print_row(const row *w)
{
    char cap[64];
    if (w->frac >= 1) snprintf(cap, sizeof cap, "unbounded");
    else snprintf(cap, sizeof cap, "%.0f%% (%.1f MiB)", w->frac * 100, (double)w->capacity / 1048576);
    printf("| %s | %s | %.4f | %.4f | %.0f | %.0f | %+.1f%% | %.0f | %.0f | %+.1f%% | %.1f | %.1f | %.1f | %.1f | %llu |\n",
           w->profile, cap, w->refs ? (double)w->hits / (double)w->refs : 0,
           w->refs ? (double)w->ideal / (double)w->refs : 0,
           w->put_s > 0 ? (double)w->puts / w->put_s : 0,
           w->lmdb_put_s > 0 ? (double)w->lmdb_puts / w->lmdb_put_s : 0,
           ratio_ovh(w->put_s, w->lmdb_put_s),
           w->lookup_s > 0 ? (double)w->lookups / w->lookup_s : 0,
           w->lmdb_lookup_s > 0 ? (double)w->lookups / w->lmdb_lookup_s : 0,
           ratio_ovh(w->lookup_s, w->lmdb_lookup_s), w->p50, w->p99,
           (double)w->disk_bytes / 1048576, (double)w->lmdb_disk_bytes / 1048576,
           (unsigned long long)w->evictions);
}

static cJSON *row_json(const row *w, const profile *p)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "payload", w->profile);
    cJSON_AddNumberToObject(j, "capacity_fraction", w->frac);
    cJSON_AddNumberToObject(j, "capacity_bytes", (double)w->capacity);
    cJSON_AddNumberToObject(j, "hit_rate", w->refs ? (double)w->hits / (double)w->refs : 0);
    cJSON_AddNumberToObject(j, "ideal_hit_rate", w->refs ? (double)w->ideal / (double)w->refs : 0);
    cJSON_AddNumberToObject(j, "put_ops_s", w->put_s > 0 ? (double)w->puts / w->put_s : 0);
    cJSON_AddNumberToObject(j, "lookup_ops_s", w->lookup_s > 0 ? (double)w->lookups / w->lookup_s : 0);
    cJSON_AddNumberToObject(j, "lookup_p50_us", w->p50);
    cJSON_AddNumberToObject(j, "lookup_p99_us", w->p99);
    cJSON_AddNumberToObject(j, "lmdb_put_ops_s",
                            w->lmdb_put_s > 0 ? (double)w->lmdb_puts / w->lmdb_put_s : 0);
    cJSON_AddNumberToObject(j, "lmdb_lookup_ops_s",
                            w->lmdb_lookup_s > 0 ? (double)w->lookups / w->lmdb_lookup_s : 0);
    cJSON_AddNumberToObject(j, "lmdb_lookup_p50_us", w->lmdb_p50);
    cJSON_AddNumberToObject(j, "lmdb_lookup_p99_us", w->lmdb_p99);
    cJSON_AddNumberToObject(j, "put_overhead_pct", ratio_ovh(w->put_s, w->lmdb_put_s));
    cJSON_AddNumberToObject(j, "lookup_overhead_pct", ratio_ovh(w->lookup_s, w->lmdb_lookup_s));
    cJSON_AddNumberToObject(j, "disk_bytes", (double)w->disk_bytes);
    cJSON_AddNumberToObject(j, "accounted_bytes", (double)w->accounted_bytes);
    cJSON_AddNumberToObject(j, "lmdb_disk_bytes", (double)w->lmdb_disk_bytes);
    cJSON_AddNumberToObject(j, "block_refs", (double)w->refs);
    cJSON_AddNumberToObject(j, "block_hits", (double)w->hits);
    cJSON_AddNumberToObject(j, "ideal_hits", (double)w->ideal);
    cJSON_AddNumberToObject(j, "blocks_put", (double)w->puts);
    cJSON_AddNumberToObject(j, "lookups", (double)w->lookups);
    cJSON_AddNumberToObject(j, "evictions", (double)w->evictions);
    cJSON_AddNumberToObject(j, "side_mismatches", (double)w->mismatches);
    cJSON_AddNumberToObject(j, "requests_longer_than_capacity", (double)w->truncated_puts);
    cJSON_AddNumberToObject(j, "requests", (double)w->n_req);
    cJSON_AddNumberToObject(j, "payload_bytes_per_block", (double)w->block_bytes);
    cJSON_AddNumberToObject(j, "payload_scale", p->scale);
    cJSON_AddNumberToObject(j, "unscaled_bytes_per_token", (double)p->per_token);
    cJSON_AddNumberToObject(j, "wall_s", w->wall_s);
    return j;
}

int scdb_bench_store(int argc, char **argv)
{
    bopts o;
    scdb_trace t = {0};
    profile prof[2];
    int n_prof = 0, prc;
    row *rows = NULL;
    size_t n_rows = 0;
    cJSON *json = NULL, *jrows = NULL;
    char trace_path[1200] = "";
    const char *tmp = getenv("TMPDIR");
    int rc = 1;

    if ((prc = parse_opts(argc, argv, &o))) return prc == 1 ? 0 : prc;
    if (!o.dir) o.dir = tmp && *tmp ? tmp : "/tmp";

    /* the trace */
    if (!o.synthetic && !o.trace_path) {
        if (scdb_trace_default_path(trace_path, sizeof trace_path)) {
            fprintf(stderr, "%s: the trace %s is missing (it ships as data/traces/%s); "
                    "pass --trace FILE, or --synthetic for the built-in seeded trace\n",
                    "scdb bench store", trace_path, SCDB_TRACE_NAME);
            return 1;
        }
    } else if (o.trace_path) {
        snprintf(trace_path, sizeof trace_path, "%s", o.trace_path);
    }
    if (o.synthetic ? scdb_trace_synthetic(o.synth_requests, o.seed, &t)
                    : scdb_trace_load(trace_path, 0, "scdb bench store", &t))
        return 1;
    if (o.requests && o.requests < t.n_req) t.n_req = o.requests;

    /* the payload profiles */
    {
        char list[64], *save = NULL;
        snprintf(list, sizeof list, "%s", o.payloads);
        /* checked at parse time: one or two of codes, raw */
        for (char *w = strtok_r(list, ",", &save); w && n_prof < 2; w = strtok_r(NULL, ",", &save)) {
            profile *p = &prof[n_prof];
            memset(p, 0, sizeof *p);
            if (!strcmp(w, "codes")) {
                p->name = "codes";
                p->per_token = scdb_bench_shape_codes_per_token(&o.shape);
                p->scale = o.shape.codes_scale;
                p->n_req = t.n_req;
            } else if (!strcmp(w, "raw")) {
                p->name = "raw";
                p->per_token = scdb_bench_shape_raw_per_token(&o.shape);
                p->scale = o.shape.raw_scale;
                p->n_req = o.raw_requests && o.raw_requests < t.n_req ? o.raw_requests : t.n_req;
            } else {
                fprintf(stderr, "scdb bench store: unknown payload '%s' (codes, raw)\n", w);
                goto done;
            }
            p->block_bytes = (uint64_t)((double)(p->per_token * o.shape.block_tokens) * p->scale + 0.5);
            if (p->block_bytes < 16) p->block_bytes = 16;
            if (p->block_bytes > SCDB_BLOCK_MAX_PAYLOAD) {
                fprintf(stderr, "scdb bench store: %s blocks of %llu bytes exceed the store's "
                        "%llu-byte limit: lower the scale\n", p->name,
                        (unsigned long long)p->block_bytes,
                        (unsigned long long)SCDB_BLOCK_MAX_PAYLOAD);
                goto done;
            }
            p->n_sections = 2 * o.shape.layers <= SCDB_BLOCK_MAX_SECTIONS ? 2 * o.shape.layers : 0;
            n_prof++;
        }
    }

    rows = calloc((size_t)n_prof * (size_t)(o.n_caps + 1), sizeof *rows);
    json = cJSON_CreateObject();
    jrows = cJSON_AddArrayToObject(json, "rows");
    cJSON_AddStringToObject(json, "bench", "store");
    cJSON_AddStringToObject(json, "trace", t.source);
    cJSON_AddNumberToObject(json, "block_tokens", o.shape.block_tokens);
    cJSON_AddBoolToObject(json, "sync", !o.no_sync);
    cJSON_AddNumberToObject(json, "hot_fraction", o.hot_frac);
    {
        cJSON *notes = cJSON_AddArrayToObject(json, "notes");

        printf("# scdb bench store\n\n");
        printf("trace: %s, %zu requests; %u tokens per block; commits %s; hot tier %s\n\n",
               t.source, t.n_req, o.shape.block_tokens,
               o.no_sync ? "not synced (MDB_NOSYNC, both sides)" : "fsync'd (both sides)",
               o.hot_frac > 0 ? "on" : "off");
        for (int pi = 0; pi < n_prof; pi++) {
            profile *p = &prof[pi];
            uint64_t hits, refs, distinct, footprint = 0;
            char note[512];
            if (scdb_trace_ideal_hits(&t, p->n_req, &hits, &refs, &distinct)) {
                fprintf(stderr, "scdb bench store: out of memory\n");
                goto done;
            }
            snprintf(note, sizeof note,
                     "%s: %llu bytes/token unscaled (%s) = %.1f MiB per %u-token block; "
                     "SCALED by %g to %llu bytes per block (%u-entry section table)%s; "
                     "first %zu of %zu requests: %llu block references, %llu distinct blocks",
                     p->name, (unsigned long long)p->per_token,
                     !strcmp(p->name, "codes") ? "layers x (r_K + r_V) x f16" : "layers x 2 x kv_dim x f16",
                     (double)(p->per_token * o.shape.block_tokens) / 1048576, o.shape.block_tokens, p->scale,
                     (unsigned long long)p->block_bytes, p->n_sections,
                     p->n_req < t.n_req ? "; a SUBSET of the trace" : "", p->n_req, t.n_req,
                     (unsigned long long)refs, (unsigned long long)distinct);
            printf("- %s\n", note);
            cJSON_AddItemToArray(notes, cJSON_CreateString(note));
            {
                /* generous, sparse map: both sides get the same and never grow */
                uint64_t per = (p->block_bytes + 4096 + 2 * 4096);
                uint64_t map = distinct * per * 3 / 2 + (64ull << 20);
                for (int ci = -1; ci < o.n_caps; ci++) {
                    double frac = ci < 0 ? 1.0 : o.caps[ci];
                    row *w = &rows[n_rows];
                    if (ci >= 0 && frac >= 1) continue; /* the unbounded run is done */
                    if (!o.quiet)
                        fprintf(stderr, "%s: replaying %zu requests at %s%.0f%% capacity\n",
                                p->name, p->n_req, frac >= 1 ? "unbounded, " : "", frac * 100);
                    if (replay(&o, &t, p, frac, frac >= 1 ? 0 : (uint64_t)(frac * (double)footprint),
                               map, w))
                        goto done;
                    w->ideal = hits;
                    if (frac >= 1) footprint = w->accounted_bytes;
                    cJSON_AddItemToArray(jrows, row_json(w, p));
                    n_rows++;
                }
            }
        }
    }

    printf("\n| payload | capacity | hit rate | ideal | put/s | LMDB put/s | put overhead "
           "| lookup/s | LMDB lookup/s | lookup overhead | lookup p50 us | p99 us "
           "| disk MiB | LMDB disk MiB | evictions |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n_rows; i++) print_row(&rows[i]);
    printf("\nput/s: blocks written per second of put-batch time (one write txn per request\n"
           "on both sides); lookup/s: longest-prefix lookups (hash every full block, then\n"
           "probe) per second.  overhead = store time / LMDB time - 1 for the same\n"
           "operations (goal: <= +20%%).  The store answers lookups from its in-memory\n"
           "index; the bare side probes LMDB.\n");
    {
        bool ok = true;
        for (size_t i = 0; i < n_rows; i++) {
            if (rows[i].frac >= 1 && rows[i].hits != rows[i].ideal) ok = false;
            if (rows[i].truncated_puts)
                printf("note: %s at %.0f%%: %llu requests were longer than the whole capacity; "
                       "their leading blocks were stored\n", rows[i].profile,
                       rows[i].frac * 100, (unsigned long long)rows[i].truncated_puts);
            if (rows[i].mismatches)
                printf("WARNING: %s at %.0f%%: %llu requests where the two sides disagreed\n",
                       rows[i].profile, rows[i].frac * 100,
                       (unsigned long long)rows[i].mismatches);
        }
        printf("\nhit rate at unbounded capacity == ideal: %s\n", ok ? "yes" : "NO");
        cJSON_AddBoolToObject(json, "unbounded_hit_rate_equals_ideal", ok);
    }
    if (o.json && scdb_bench_write_json(o.json, json, "scdb bench store")) goto done;
    rc = 0;
done:
    cJSON_Delete(json);
    free(rows);
    scdb_trace_free(&t);
    return rc;
}
