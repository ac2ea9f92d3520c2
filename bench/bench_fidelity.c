/* bench_fidelity.c — `scdb bench fidelity`: what each recompute setting
 * buys (issue 40, "fidelity on demand"), per consumer of the fleet, through
 * one real broker.
 *
 * The fleet is bench fleet's: every model in DATA/models but the producer
 * and every adapter in DATA/adapters with a pair PAIRS/<producer>__<name>.
 * The bench starts a broker (`scdb serve`, int8 codes) serving all of them;
 * the producer prefills each window's prefix and has the broker encode and
 * store its states.  Then, per consumer, text, prefix length and window, the
 * consumer's cache of the prefix is built each way below and the
 * continuation is forwarded over it, teacher-forced, against the
 * consumer's own prefill (ppl ratio, KL(own || method), top-1 agreement):
 *
 *   own          its own prefill of the prefix (the reference; TTFT only)
 *   scd  POLICY  get from the broker with a recompute setting and the
 *                recompute done by the reference engine (engine.h:
 *                scdb_engine_restore): none, tail / initial / selective at
 *                each --budgets fraction, and the pair's calibrated default
 *                (is_default) when it has one (has_default)
 *   raw  POLICY  the producer's KV as is (raw reuse), the same policies
 *                (CacheBlend- and EPIC-like baselines: selective is
 *                CacheBlend's own-layer-0 scorer on the raw KV)
 *   scd, raw  layers:K   DroidSpeak: the consumer's own first K layers over
 *                every prefix token, the rest restored (recompute_fraction
 *                K / n_layers of the compute; recompute_tokens the prefix)
 *
 * TTFT: restore (lookup + get + recompute for scd; the KV copy + recompute
 * for raw) + the first continuation token, best of --reps per window,
 * median over windows; own prefill + the first token likewise.  The
 * consumer's text is the second half of its own domain's held-out text, or
 * every *.txt of --text DIR / the FILE (rows' `text`).  Rows go to --json
 * {consumer, text, method, policy, recompute_tokens, recompute_fraction,
 * prefix_tokens, ttft_ms, own_prefill_ms, speedup, ppl_ratio, kl, top1,
 * raw_kl, is_default, has_default, default_source}; is_default only when
 * the consumer has a default (scdb_recompute_default's source not empty:
 * without one it says none, and no row is the default); --png draws a
 * Pareto plot per consumer (tools/plot_fidelity.py).  Exit 1 if the broker,
 * a put, a get or a forward fails, or a requested (consumer, text, prefix)
 * gives no rows (a text too short: warned), or no row is written. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "codec.h"
#include "engine.h"
#include "model.h"

#define MAX_CONS 64
#define MAX_TEXTS 64
#define MAX_CFG 64
#define MAX_PREFIX 4
#define CB_NAME "fleet-scd"
#define WAIT_S 120.0

typedef struct acc { double nll, kl, agree; long n; } acc;

/* one way of building the prefix cache */
typedef struct cfg {
    int raw;                 /* 0 scd, 1 raw, 2 own                      */
    scdb_recompute rc;       /* policy + budget (layers: policy NONE)    */
    int layers;              /* DroidSpeak: own first layers, else 0      */
    int is_default;
    char policy[48];
} cfg;

typedef struct row {
    const cfg *c;
    acc a;
    double *ttft;            /* [windows] */
    double rec_tokens;       /* summed over windows */
    int nw;
} row;

typedef struct text { char name[256]; unsigned char *buf; size_t len; } text;

typedef struct cons { char name[256], dir[1300], pair[1500]; } cons;

typedef struct opts {
    const char *data, *codebook, *pairs, *text, *json, *png, *only;
    int prefix[MAX_PREFIX], n_prefix, cont, windows, reps, droid, default_only;
    double budgets[16];
    int n_budgets;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench fidelity [--data DIR] [--codebook FILE] [--pairs DIR] [--consumers a,b]\n"
"                           [--text FILE|DIR] [--prefix 320,448] [--cont C] [--windows N]\n"
"                           [--reps R] [--budgets 0.02,0.05,...] [--droid K] [--default-only]\n"
"                           [--json FILE] [--png FILE]\n\n"
"Per consumer of the fleet: TTFT against ppl / KL / top-1 (vs its own prefill)\n"
"for SCD and raw reuse, each with no recompute, tail / initial / selective\n"
"recompute at each budget (fraction of the prefix), DroidSpeak layer recompute\n"
"(own first 1..K layers), and SCD at the pair's calibrated default; own prefill.\n\n"
"  --data DIR        data directory (default: scdb's)\n"
"  --codebook FILE   default DATA/codebooks/base.safetensors\n"
"  --pairs DIR       default DATA/pairs\n"
"  --consumers LIST  only these consumers\n"
"  --text FILE|DIR   evaluate every consumer on FILE or every *.txt of DIR\n"
"                    (default: the second half of its own held-out text)\n"
"  --prefix LIST     prefix lengths (320,448; the family's context is 512)\n"
"  --cont C          continuation tokens scored (64)\n"
"  --windows N       windows per text (4)   --reps R  TTFT repetitions (2)\n"
"  --budgets LIST    recompute fractions (0.02,0.05,0.1,0.2,0.35)\n"
"  --droid K         DroidSpeak rows for 1..K layers (2; 0: none)\n"
"  --default-only    only none, the pair's default and raw reuse (for many texts)\n"
"  --json FILE       rows as JSON          --png FILE  Pareto plots (tools/plot_fidelity.py)\n"
"                    is_default: the row is the pair's default setting (SCD);\n"
"                    has_default: the consumer has a default at all (calibrated\n"
"                    in its pair or set in the broker config; default_source\n"
"                    \"pair\", \"config\" or \"\"): false, no row is_default\n"
"exit status: 0 measured, 1 a step failed or a requested (text, prefix) gave\n"
"no rows (a text shorter than prefix + --cont + 1 tokens: warned) or no row\n"
"was written, 2 usage error.\n");
}

static int parse_list_int(const char *s, int *out, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 16 || v > 1 << 20) return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int parse_list_f(const char *s, double *out, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0 && v <= 1)) return -1;
        out[n++] = v;
        if (*end && *end != ',') return -1;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int listed(const char *only, const char *name)
{
    if (!only) return 1;
    size_t n = strlen(name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, name, n)) return 1;
        p += k + (e != NULL);
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_dirs(const char *root, char **out, int max)
{
    DIR *d = opendir(root);
    struct dirent *e;
    int n = 0;
    if (!d) return 0;
    while ((e = readdir(d)) && n < max) {
        char p[1200];
        struct stat st;
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        if (stat(p, &st) || !S_ISDIR(st.st_mode)) continue;
        out[n++] = strdup(p);
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, cmp_str);
    return n;
}

static int read_text(const char *path, text *t)
{
    FILE *f = fopen(path, "rb");
    long n;
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    t->buf = malloc((size_t)n + 1);
    if (!t->buf || fread(t->buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(t->buf);
        t->buf = NULL;
        return -1;
    }
    fclose(f);
    t->len = (size_t)n;
    const char *b = strrchr(path, '/');
    snprintf(t->name, sizeof t->name, "%s", b ? b + 1 : path);
    return 0;
}

static int load_texts(const char *arg, text *t, int max)
{
    struct stat st;
    int n = 0;
    if (stat(arg, &st)) return -1;
    if (!S_ISDIR(st.st_mode)) return read_text(arg, t) ? -1 : 1;
    char *files[MAX_TEXTS];
    int nf = 0;
    DIR *d = opendir(arg);
    struct dirent *e;
    while (d && (e = readdir(d)) && nf < MAX_TEXTS) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".txt")) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", arg, e->d_name);
            files[nf++] = strdup(p);
        }
    }
    if (d) closedir(d);
    qsort(files, (size_t)nf, sizeof *files, cmp_str);
    for (int i = 0; i < nf; i++) {
        if (n < max && !read_text(files[i], &t[n])) n++;
        free(files[i]);
    }
    return n;
}

static void score(const float *logits, const float *ologp, const int32_t *next, int C, int V,
                  float *lp, acc *a)
{
    for (int t = 0; t < C; t++) {
        const float *o = ologp + (size_t)t * V;
        scdb_k_log_softmax_cpu(logits + (size_t)t * V, V, lp);
        double k = 0.0;
        int ao = 0, am = 0;
        for (int v = 0; v < V; v++) {
            k += exp((double)o[v]) * ((double)o[v] - lp[v]);
            if (o[v] > o[ao]) ao = v;
            if (lp[v] > lp[am]) am = v;
        }
        a->kl += k;
        a->agree += ao == am;
        a->nll -= lp[next[t]];
        a->n++;
    }
}

/* ------------------------------------------------------------ the broker */

typedef struct broker {
    char tmp[256], cfg[300], sock[320], log[300];
    pid_t pid;
} broker;

static int broker_up(broker *b, const opts *o, const char *producer, const char *cbpath,
                     const cons *c, int n, int block_tokens)
{
    const char *td = getenv("TMPDIR");
    const char *args[] = {"--config", b->cfg, NULL};
    scdb_opts so = {.timeout_ms = 30000, .name = "bench fidelity"};
    scdb *h = NULL;
    FILE *f;

    snprintf(b->tmp, sizeof b->tmp, "%.200s/scdb-bench-fidelity-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(b->tmp)) return -1;
    snprintf(b->cfg, sizeof b->cfg, "%s/broker.ini", b->tmp);
    snprintf(b->sock, sizeof b->sock, "ipc://%s/broker.sock", b->tmp);
    snprintf(b->log, sizeof b->log, "%s/broker.log", b->tmp);
    if (!(f = fopen(b->cfg, "w"))) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/store\nblock_tokens = %d\n"
               "heartbeat_timeout_ms = 30000\nmodels_dir = %s/models\n\n",
            b->sock, b->tmp, block_tokens, o->data);
    fprintf(f, "[model %s]\nconfig = %s/models/%s/config.json\n\n", producer, o->data, producer);
    fprintf(f, "[codebook " CB_NAME "]\nkind = scd\nmodel = %s\ncodes_dtype = int8\nfile = %s\n\n",
            producer, cbpath);
    for (int i = 0; i < n; i++)
        fprintf(f, "[model %s]\nconfig = %s\n\n[pair " CB_NAME " %s]\ndecoder = scd\nfile = %s\n\n",
                c[i].name, c[i].dir, c[i].name, c[i].pair);
    if (fclose(f)) return -1;
    b->pid = scdb_bench_start_broker(args, b->log);
    so.endpoint = b->sock;
    if (b->pid < 0 || scdb_bench_connect(&so, WAIT_S, b->pid, &h)) {
        fprintf(stderr, "bench fidelity: the broker did not start (its log: %s)\n", b->log);
        if (b->pid > 0) scdb_bench_stop_broker(b->pid, SIGKILL);
        b->pid = -1;
        return -1;
    }
    scdb_close(&h);
    return 0;
}

static scdb_err connect_as(const broker *b, scdb_role role, const char *model, scdb **h)
{
    scdb_opts so = {.endpoint = b->sock, .timeout_ms = 30000, .name = "bench fidelity"};
    scdb_err e = scdb_bench_connect(&so, WAIT_S, b->pid, h);
    if (!e) e = scdb_register(*h, role, model, CB_NAME, NULL);
    return e;
}

/* ------------------------------------------------------------ settings */

static int same_setting(const scdb_recompute *a, const scdb_recompute *b)
{
    return a->policy == b->policy && a->tokens == b->tokens && fabsf(a->fraction - b->fraction) < 1e-6f;
}

static int add_cfg(cfg *list, int n, int raw, scdb_recompute rc, int layers, int is_default)
{
    if (n >= MAX_CFG) return n;
    cfg *c = &list[n];
    c->raw = raw;
    c->rc = rc;
    c->layers = layers;
    c->is_default = is_default;
    if (layers) snprintf(c->policy, sizeof c->policy, "layers:%d", layers);
    else scdb_recompute_format(&rc, c->policy, sizeof c->policy);
    return n + 1;
}

/* the settings measured for one consumer; exists: the registration has a
 * default (scdb_recompute_default's source not empty).  Without one,
 * scdb_recompute_default says none, and no row is the default. */
static int make_cfgs(const opts *o, const scdb_recompute *dflt, int exists, cfg *list)
{
    static const scdb_recompute_policy pol[] = {SCDB_RECOMPUTE_TAIL, SCDB_RECOMPUTE_INITIAL,
                                                SCDB_RECOMPUTE_SELECTIVE};
    scdb_recompute none = {SCDB_RECOMPUTE_NONE, 0, 0};
    int n = 0, have_default = !exists || dflt->policy == SCDB_RECOMPUTE_NONE;
    n = add_cfg(list, n, 0, none, 0, exists && dflt->policy == SCDB_RECOMPUTE_NONE);
    n = add_cfg(list, n, 1, none, 0, 0);
    if (!o->default_only)
        for (int p = 0; p < 3; p++)
            for (int b = 0; b < o->n_budgets; b++) {
                scdb_recompute rc = {pol[p], 0, (float)o->budgets[b]};
                int d = exists && same_setting(&rc, dflt);
                have_default |= d;
                n = add_cfg(list, n, 0, rc, 0, d);
                n = add_cfg(list, n, 1, rc, 0, 0);
            }
    if (!have_default) {
        n = add_cfg(list, n, 0, *dflt, 0, 1);
        n = add_cfg(list, n, 1, *dflt, 0, 0);
    }
    if (!o->default_only)
        for (int k = 1; k <= o->droid; k++) {
            n = add_cfg(list, n, 0, none, k, 0);
            n = add_cfg(list, n, 1, none, k, 0);
        }
    return n;
}

/* ------------------------------------------------------------ one window */

typedef struct ctx {
    const opts *o;
    const scdb_model *prod, *cons;
    scdb *hp, *hc;
    scdb_arena *states, *arena;
    scdb_kv_cache *pcache, *cache;
    int32_t *tok;
    float *ologp, *logits, *lp;
    int block_tokens;
} ctx;

/* build the prefix cache of P tokens per c into *kv; the recomputed count
 * into *nrec */
static scdb_err build(ctx *x, const cfg *c, int P, scdb_kv_cache **kv, int *nrec)
{
    const int L = scdb_model_cfg(x->cons)->n_layers, d = scdb_model_kv_dim(scdb_model_cfg(x->cons));
    scdb_err e;
    *nrec = 0;
    if (c->raw == 0) {
        scdb_engine_restore_opts ro;
        scdb_engine_restore_result rr;
        scdb_kv_cache *a = scdb_arena_cache(x->arena);
        scdb_lookup_result lr;
        a->n = 0;
        scdb_engine_restore_init(&ro);
        ro.recompute = c->layers ? (scdb_recompute){SCDB_RECOMPUTE_NONE, 0, 0} : c->rc;
        if ((e = scdb_lookup(x->hc, x->tok, (size_t)P, &lr)) ||
            (e = scdb_engine_restore(x->hc, x->cons, x->tok, P, x->arena, 0, &ro, &rr)))
            return e;
        if ((int)rr.rc.get.tokens_written != P / x->block_tokens * x->block_tokens) return SCDB_ENOTFOUND;
        *nrec = rr.recomputed;
        if (c->layers) {
            if ((e = scdb_engine_recompute_layers(x->cons, a, 0, P, x->tok, c->layers))) return e;
            *nrec = P;
        }
        *kv = a;
        return SCDB_OK;
    }
    /* raw: the producer's KV as is, then the same recompute */
    for (int l = 0; l < L; l++) {
        memcpy(scdb_kv_k(x->cache, l, 0), scdb_kv_k(x->pcache, l, 0), (size_t)P * d * sizeof(float));
        memcpy(scdb_kv_v(x->cache, l, 0), scdb_kv_v(x->pcache, l, 0), (size_t)P * d * sizeof(float));
    }
    memcpy(x->cache->pos, x->pcache->pos, (size_t)P * sizeof(int32_t));
    x->cache->n = P;
    *kv = x->cache;
    if (c->layers) {
        *nrec = P;
        return scdb_engine_recompute_layers(x->cons, x->cache, 0, P, x->tok, c->layers);
    }
    return scdb_engine_recompute_cache(x->cons, x->cache, 0, P, x->tok, &c->rc, nrec, NULL);
}

static int eval_window(ctx *x, int P, const cfg *cf, int ncf, row *rows, acc *own, double *own_ms)
{
    const int C = x->o->cont, V = scdb_model_cfg(x->cons)->vocab_size;
    scdb_put_result pr;
    scdb_capture cap = {.h_in = scdb_arena_states(x->states, NULL, NULL, NULL)};
    scdb_kv_cache *kv = NULL;
    scdb_err e;
    const char *what;
    int nrec;

    what = "producer prefill";
    x->pcache->n = 0;
    if ((e = scdb_model_forward(x->prod, x->tok, NULL, P, x->pcache, NULL, &cap))) goto fail;
    what = "put";
    if ((e = scdb_put_states(x->hp, x->tok, (size_t)P, 0, x->states, &pr))) goto fail;
    /* own prefill: the reference and its TTFT */
    what = "own prefill";
    double best = INFINITY;
    for (int r = 0; r < x->o->reps; r++) {
        double t0 = scdb_now();
        x->cache->n = 0;
        if ((e = scdb_model_forward(x->cons, x->tok, NULL, P, x->cache, NULL, NULL)) ||
            (e = scdb_model_forward(x->cons, x->tok + P, NULL, 1, x->cache, x->logits, NULL)))
            goto fail;
        if (scdb_now() - t0 < best) best = scdb_now() - t0;
    }
    *own_ms = best * 1e3;
    if ((e = scdb_model_forward(x->cons, x->tok + P + 1, NULL, C - 1, x->cache,
                                x->logits + (size_t)V, NULL)))
        goto fail;
    for (int i = 0; i < C; i++)
        scdb_k_log_softmax_cpu(x->logits + (size_t)i * V, V, x->ologp + (size_t)i * V);
    score(x->logits, x->ologp, x->tok + P + 1, C, V, x->lp, own);
    for (int k = 0; k < ncf; k++) {
        row *r = &rows[k];
        what = cf[k].raw ? "raw" : "get + recompute";
        best = INFINITY;
        for (int rep = 0; rep < x->o->reps; rep++) {
            double t0 = scdb_now();
            if ((e = build(x, &cf[k], P, &kv, &nrec))) goto fail;
            if ((e = scdb_model_forward(x->cons, x->tok + P, NULL, 1, kv, x->logits, NULL))) goto fail;
            if (scdb_now() - t0 < best) best = scdb_now() - t0;
        }
        if (!kv) return -1;          /* --reps >= 1: built at least once */
        if ((e = scdb_model_forward(x->cons, x->tok + P + 1, NULL, C - 1, kv, x->logits + (size_t)V,
                                    NULL)))
            goto fail;
        score(x->logits, x->ologp, x->tok + P + 1, C, V, x->lp, &r->a);
        r->ttft[r->nw++] = best * 1e3;
        r->rec_tokens += nrec;
    }
    return 0;
fail:
    fprintf(stderr, "bench fidelity: %s failed: %s (%s)\n", what, scdb_strerror(e),
            !strcmp(what, "put") ? scdb_last_error(x->hp) : scdb_last_error(x->hc));
    return -1;
}

static void jnum(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

/* the fidelity target (issue 40): top-1 >= 0.95 and ppl <= +1% */
#define TARGET_TOP1 0.95
#define TARGET_PPL 1.01

/* one (consumer, text, prefix): JSON rows and a table line */
static void report(const opts *o, const char *consumer, const char *tname, int P, int n_layers,
                   const char *dsource, row *rows, int ncf, const acc *own, double *own_ms, int nw,
                   cJSON *jrows)
{
    double om = scdb_bench_median(own_ms, (size_t)nw);
    double raw_kl = rows[1].a.kl / rows[1].a.n;          /* raw, none */
    int idef = -1, bs = -1, br = -1;
    double met[MAX_CFG] = {0};
    (void)o;
    for (int k = 0; k < ncf; k++) {
        row *r = &rows[k];
        double kl = r->a.kl / r->a.n, t1 = r->a.agree / r->a.n;
        double pr = exp((r->a.nll - own->nll) / (double)r->a.n);
        double tt = scdb_bench_median(r->ttft, (size_t)r->nw), rt = r->rec_tokens / nw;
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "consumer", consumer);
        cJSON_AddStringToObject(j, "text", tname);
        cJSON_AddStringToObject(j, "method", r->c->raw ? "raw" : "scd");
        cJSON_AddStringToObject(j, "policy", r->c->policy);
        jnum(j, "recompute_tokens", rt);
        jnum(j, "recompute_fraction", r->c->layers ? (double)r->c->layers / n_layers : rt / P);
        jnum(j, "prefix_tokens", P);
        jnum(j, "ttft_ms", tt);
        jnum(j, "own_prefill_ms", om);
        jnum(j, "speedup", om / tt);
        jnum(j, "ppl_ratio", pr);
        jnum(j, "kl", kl);
        jnum(j, "top1", t1);
        jnum(j, "raw_kl", raw_kl);
        jnum(j, "windows", nw);
        cJSON_AddBoolToObject(j, "is_default", r->c->is_default && !r->c->raw);
        /* the consumer's registration has a fidelity default at all, and
         * where it comes from ("pair": calibrated, "config": the broker's) */
        cJSON_AddBoolToObject(j, "has_default", dsource[0] != 0);
        cJSON_AddStringToObject(j, "default_source", dsource);
        cJSON_AddItemToArray(jrows, j);
        if (r->c->is_default && !r->c->raw) idef = k;
        met[k] = t1 >= TARGET_TOP1 && pr <= TARGET_PPL;
        if (met[k] && !r->c->layers) {
            int *b = r->c->raw ? &br : &bs;
            if (*b < 0 || rt < rows[*b].rec_tokens / nw) *b = k;
        }
    }
    char ds[160] = "no default | - | - | - | - | -", ss[96] = "not met", rs[96] = "not met";
    if (idef >= 0) {
        row *r = &rows[idef];
        double tt = scdb_bench_median(r->ttft, (size_t)r->nw);
        snprintf(ds, sizeof ds, "%s | %.1f | %.1fx | %.3f | %+.1f%% | %.3f", r->c->policy, tt, om / tt,
                 r->a.agree / r->a.n, (exp((r->a.nll - own->nll) / (double)r->a.n) - 1) * 100,
                 (r->a.kl / r->a.n) / raw_kl);
    }
    if (bs >= 0)
        snprintf(ss, sizeof ss, "%s (%.0f, %.1f ms)", rows[bs].c->policy, rows[bs].rec_tokens / nw,
                 scdb_bench_median(rows[bs].ttft, (size_t)rows[bs].nw));
    if (br >= 0)
        snprintf(rs, sizeof rs, "%s (%.0f, %.1f ms)", rows[br].c->policy, rows[br].rec_tokens / nw,
                 scdb_bench_median(rows[br].ttft, (size_t)rows[br].nw));
    printf("| %s | %s | %d | %.1f | %s | %s | %s |\n", consumer, tname, P, om, ds, ss, rs);
    fflush(stdout);
}

int scdb_bench_fidelity(int argc, char **argv)
{
    opts o = {.cont = 64, .windows = 4, .reps = 2, .droid = 2,
              .prefix = {320, 448}, .n_prefix = 2,
              .budgets = {0.02, 0.05, 0.1, 0.2, 0.35}, .n_budgets = 5};
    char cbpath[1200], pairs[1200], root[1300], err[512] = "";
    char *dirs[2 * MAX_CONS];
    static cons cl[MAX_CONS];
    static text texts[MAX_TEXTS];
    int nd = 0, nc = 0, nt = 0, ret = 1;
    scdb_codebook *cb = NULL;
    scdb_model *prod = NULL;
    broker b = {.pid = -1};
    cJSON *jrows = NULL;   /* made once the options are read: no early return leaks it */
    scdb_err rc;
    scdb *hp = NULL;
    scdb_arena *states = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--data") && more) o.data = argv[++i];
        else if (!strcmp(a, "--codebook") && more) o.codebook = argv[++i];
        else if (!strcmp(a, "--pairs") && more) o.pairs = argv[++i];
        else if (!strcmp(a, "--text") && more) o.text = argv[++i];
        else if (!strcmp(a, "--consumers") && more) o.only = argv[++i];
        else if (!strcmp(a, "--json") && more) o.json = argv[++i];
        else if (!strcmp(a, "--png") && more) o.png = argv[++i];
        else if (!strcmp(a, "--default-only")) o.default_only = 1;
        else if (!strcmp(a, "--prefix") && more) {
            if ((o.n_prefix = parse_list_int(argv[++i], o.prefix, MAX_PREFIX)) < 1) {
                fprintf(stderr, "bench fidelity: --prefix '%s': lengths >= 16, comma-separated\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--budgets") && more) {
            if ((o.n_budgets = parse_list_f(argv[++i], o.budgets, 16)) < 1) {
                fprintf(stderr, "bench fidelity: --budgets '%s': fractions in (0, 1], comma-separated\n",
                        argv[i]);
                return 2;
            }
        } else if ((!strcmp(a, "--cont") || !strcmp(a, "--windows") || !strcmp(a, "--reps") ||
                    !strcmp(a, "--droid")) && more) {
            int v;
            if (scdb_parse_int(a, argv[++i], !strcmp(a, "--droid") ? 0 : 1, 1 << 16, &v, err, sizeof err)) {
                fprintf(stderr, "bench fidelity: %s\n", err);
                return 2;
            }
            if (!strcmp(a, "--cont")) o.cont = v;
            else if (!strcmp(a, "--windows")) o.windows = v;
            else if (!strcmp(a, "--reps")) o.reps = v;
            else o.droid = v;
        } else {
            fprintf(stderr, "bench fidelity: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (o.cont < 2) {
        fprintf(stderr, "bench fidelity: --cont must be at least 2\n");
        return 2;
    }
    if (!o.data) o.data = scdb_data_dir();
    if (o.codebook) snprintf(cbpath, sizeof cbpath, "%s", o.codebook);
    else snprintf(cbpath, sizeof cbpath, "%s/codebooks/base.safetensors", o.data);
    if (o.pairs) snprintf(pairs, sizeof pairs, "%s", o.pairs);
    else snprintf(pairs, sizeof pairs, "%s/pairs", o.data);
    if ((rc = scdb_codebook_load(cbpath, &cb, err, sizeof err))) {
        fprintf(stderr, "bench fidelity: %s: %s (%s)\n", cbpath, err, scdb_strerror(rc));
        return 1;
    }
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    if (!(jrows = cJSON_CreateArray())) {
        fprintf(stderr, "bench fidelity: out of memory\n");
        goto done;
    }
    snprintf(root, sizeof root, "%s/models/%s", o.data, ci->producer);
    if ((rc = scdb_model_load(root, &prod, err, sizeof err))) {
        fprintf(stderr, "bench fidelity: producer %s: %s\n", root, err);
        goto done;
    }
    int maxP = 0;
    for (int i = 0; i < o.n_prefix; i++) maxP = o.prefix[i] > maxP ? o.prefix[i] : maxP;
    if (maxP + o.cont > scdb_model_cfg(prod)->max_seq_len) {   /* forwarded: P + C tokens */
        fprintf(stderr, "bench fidelity: prefix + --cont exceed the model's %d positions\n",
                scdb_model_cfg(prod)->max_seq_len);
        goto done;
    }
    if (o.text && (nt = load_texts(o.text, texts, MAX_TEXTS)) < 1) {
        fprintf(stderr, "bench fidelity: --text %s: no text\n", o.text);
        goto done;
    }
    snprintf(root, sizeof root, "%s/models", o.data);
    nd = list_dirs(root, dirs, MAX_CONS);
    snprintf(root, sizeof root, "%s/adapters", o.data);
    nd += list_dirs(root, dirs + nd, MAX_CONS);
    for (int i = 0; i < nd && nc < MAX_CONS; i++) {
        const char *s = strrchr(dirs[i], '/'), *name = s ? s + 1 : dirs[i];
        struct stat st;
        if (!strcmp(name, ci->producer) || !listed(o.only, name)) continue;
        snprintf(cl[nc].pair, sizeof cl[nc].pair, "%s/%s__%s.safetensors", pairs, ci->producer, name);
        if (stat(cl[nc].pair, &st)) continue;
        snprintf(cl[nc].name, sizeof cl[nc].name, "%s", name);
        snprintf(cl[nc].dir, sizeof cl[nc].dir, "%s", dirs[i]);
        nc++;
    }
    if (!nc) {
        fprintf(stderr, "bench fidelity: no consumer with a pair in %s\n", pairs);
        goto done;
    }
    int bt = 64;
    for (int i = 0; i < o.n_prefix; i++)
        if (o.prefix[i] % 64) bt = 16;
    if (broker_up(&b, &o, ci->producer, cbpath, cl, nc, bt)) goto done;
    if ((rc = connect_as(&b, SCDB_PRODUCER, ci->producer, &hp)) ||
        (rc = scdb_states_arena_new(hp, maxP, &states))) {
        fprintf(stderr, "bench fidelity: producer: %s (%s)\n", hp ? scdb_last_error(hp) : "",
                scdb_strerror(rc));
        goto done;
    }
    fprintf(stderr, "bench fidelity: %d consumers, prefixes", nc);
    for (int i = 0; i < o.n_prefix; i++) fprintf(stderr, " %d", o.prefix[i]);
    fprintf(stderr, ", %d windows, %d continuation tokens\n", o.windows, o.cont);
    printf("| consumer | text | P | own ms | default | its ms | speed-up | top-1 | ppl | KL / raw KL | "
           "cheapest scd to target (tokens, TTFT) | cheapest raw to target |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");

    int failed = 0, unmeasured = 0;
    for (int ic = 0; ic < nc && !failed; ic++) {
        scdb_model *cm = NULL;
        ctx x = {.o = &o, .prod = prod, .hp = hp, .states = states, .block_tokens = bt};
        scdb_recompute dflt;
        char dsource[16] = "";   /* "pair", "config", or "": no default */
        text own = {{0}, NULL, 0};
        if ((rc = scdb_model_load(cl[ic].dir, &cm, err, sizeof err))) {
            fprintf(stderr, "bench fidelity: %s: %s\n", cl[ic].name, err);
            failed = 1;
            break;
        }
        x.cons = cm;
        const int V = scdb_model_cfg(cm)->vocab_size;
        if ((rc = connect_as(&b, SCDB_CONSUMER, cl[ic].name, &x.hc)) ||
            (rc = scdb_arena_new(x.hc, maxP + o.cont, &x.arena)) ||
            (rc = scdb_recompute_default(x.hc, &dflt, dsource)) ||
            (rc = scdb_model_cache_new(prod, maxP, &x.pcache)) ||
            (rc = scdb_model_cache_new(cm, maxP + o.cont, &x.cache))) {
            fprintf(stderr, "bench fidelity: %s: %s (%s)\n", cl[ic].name,
                    x.hc ? scdb_last_error(x.hc) : "", scdb_strerror(rc));
            failed = 1;
            goto next;
        }
        dsource[sizeof dsource - 1] = 0;
        if (!dsource[0])
            fprintf(stderr, "bench fidelity: %s: no fidelity default (neither calibrated in its pair nor "
                    "set in the broker config): no row is_default, rows say has_default false\n", cl[ic].name);
        x.tok = malloc((size_t)(maxP + o.cont + 1) * sizeof *x.tok);
        x.ologp = malloc((size_t)o.cont * V * sizeof *x.ologp);
        x.logits = malloc((size_t)o.cont * V * sizeof *x.logits);
        x.lp = malloc((size_t)V * sizeof *x.lp);
        if (!x.tok || !x.ologp || !x.logits || !x.lp) { failed = 1; goto next; }
        if (!nt) {
            if (scdb_codec_domain_text(cm, SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 26, &own.buf, &own.len,
                                       NULL, 0)) {
                fprintf(stderr, "bench fidelity: %s: no held-out text\n", cl[ic].name);
                failed = 1;
                goto next;
            }
            snprintf(own.name, sizeof own.name, "%.200s.txt (second half)", scdb_codec_text_domain(cm));
        }
        for (int it = 0; it < (nt ? nt : 1) && !failed; it++) {
            const text *t = nt ? &texts[it] : &own;
            for (int ip = 0; ip < o.n_prefix && !failed; ip++) {
                const int P = o.prefix[ip], need = P + o.cont + 1;
                cfg cf[MAX_CFG];
                row rows[MAX_CFG];
                int ncf = make_cfgs(&o, &dflt, dsource[0] != 0, cf), w_n = o.windows, nw = 0;
                double own_ms[64];
                acc own_acc = {0};
                if (t->len < (size_t)need) {
                    fprintf(stderr, "bench fidelity: %s: text %s has %zu tokens (bytes), fewer than prefix "
                            "%d + --cont %d + 1: no rows for it at prefix %d\n", cl[ic].name, t->name, t->len,
                            P, o.cont, P);
                    unmeasured++;
                    continue;
                }
                if ((size_t)w_n > t->len / (size_t)need) w_n = (int)(t->len / (size_t)need);
                if (w_n > 64) w_n = 64;
                memset(rows, 0, sizeof rows);
                for (int k = 0; k < ncf; k++) {
                    rows[k].c = &cf[k];
                    rows[k].ttft = calloc((size_t)w_n, sizeof(double));
                }
                for (int w = 0; w < w_n && !failed; w++) {
                    size_t span = t->len - (size_t)need;
                    size_t off = w_n > 1 ? span * (size_t)w / (size_t)(w_n - 1) : 0;
                    scdb_tokenize_bytes(t->buf + off, (size_t)need, x.tok);
                    if (eval_window(&x, P, cf, ncf, rows, &own_acc, &own_ms[nw])) failed = 1;
                    else nw++;
                }
                if (!failed && nw)
                    report(&o, cl[ic].name, t->name, P, scdb_model_cfg(cm)->n_layers, dsource, rows, ncf,
                           &own_acc, own_ms, nw, jrows);
                else if (!failed)
                    unmeasured++;
                for (int k = 0; k < ncf; k++) free(rows[k].ttft);
            }
        }
    next:
        free(own.buf);
        free(x.tok); free(x.ologp); free(x.logits); free(x.lp);
        scdb_kv_cache_free(&x.pcache);
        scdb_kv_cache_free(&x.cache);
        scdb_arena_free(&x.arena);
        scdb_close(&x.hc);
        scdb_model_free(&cm);
    }
    ret = failed;
    if (!failed && (unmeasured || cJSON_GetArraySize(jrows) == 0)) {
        fprintf(stderr, "bench fidelity: %d requested (consumer, text, prefix) produced no rows, %d rows "
                "written in all: failing\n", unmeasured, cJSON_GetArraySize(jrows));
        ret = 1;
    }
    {
        double la[3] = {0};
        FILE *lf = fopen("/proc/loadavg", "r");
        if (lf) {
            if (fscanf(lf, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = la[1] = la[2] = NAN;
            fclose(lf);
        }
        if (o.json) {
            cJSON *jr = cJSON_CreateObject();
            cJSON_AddStringToObject(jr, "bench", "fidelity");
            cJSON_AddStringToObject(jr, "producer", ci->producer);
            cJSON_AddNumberToObject(jr, "target_top1", TARGET_TOP1);
            cJSON_AddNumberToObject(jr, "target_ppl_ratio", TARGET_PPL);
            jnum(jr, "loadavg_1m_at_end", la[0]);
            cJSON_AddItemToObject(jr, "rows", jrows);
            jrows = NULL;
            if (scdb_bench_write_json(o.json, jr, "bench fidelity")) ret = 1;
            cJSON_Delete(jr);
        }
        fprintf(stderr, "bench fidelity: load average at the end %.2f %.2f %.2f (a shared machine: "
                "timings vary)\n", la[0], la[1], la[2]);
        if (o.png && o.json) {
            char cmd[4000];
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/plot_fidelity.py '%s' '%s'", scdb_share_dir(),
                     o.json, o.png);
            if (system(cmd)) fprintf(stderr, "bench fidelity: the plot failed (%s)\n", cmd);
        } else if (o.png) {
            fprintf(stderr, "bench fidelity: --png needs --json\n");
        }
    }
done:
    scdb_arena_free(&states);
    scdb_close(&hp);
    if (b.pid > 0 && scdb_bench_stop_broker(b.pid, SIGTERM)) ret = 1;
    if (b.tmp[0]) scdb_rm_tree(b.tmp);
    for (int i = 0; i < nd; i++) free(dirs[i]);
    for (int i = 0; i < nt; i++) free(texts[i].buf);
    scdb_model_free(&prod);
    scdb_codebook_free(&cb);
    cJSON_Delete(jrows);
    return ret;
}
