/* bench_fleet.c — `scdb bench fleet`: one producer's stored prefixes served
 * to a whole fleet of consumers (full fine-tunes and LoRA adapters) through
 * one real broker.
 *
 * The fleet: each model in data/models and each adapter in data/adapters
 * with a pair <producer>__<consumer>.safetensors in the pairs directory
 * (checked here against its models first).  The bench starts a broker
 * process (`scdb serve`) on a private temp dir and:
 *
 *   1. registration (issue 23 item 5): the broker starts with the producer
 *      and its codebook but no consumer; consumers are added one at a time
 *      by rewriting its config and a SIGHUP, each reload timed (SIGHUP to
 *      the broker's reload counter moving) and the broker's RSS read from
 *      /proc after it; a client registers as each new consumer and stays
 *      connected through the later reloads (every one must still answer
 *      at the end: a reload drops no client).  rss_per_pair_kb is the
 *      least-squares slope of RSS over pairs added, register_ms that of
 *      the reload time (the cost of loading one more pair); a broker
 *      started afresh with every pair gives rss_per_pair_kb_fresh.  The
 *      adapters without a pair are then registered in one more reload as
 *      raw-reuse consumers ([pair raw/<producer> NAME]), so that the whole
 *      fleet is registered in one broker (registered_consumers).
 *   2. quality and TTFT, on that fresh broker: the producer (the codebook's,
 *      data/models/<producer>) prefills each held-out window's prefix and
 *      has the broker encode and store its states (int8 codes by default),
 *      once per prefix whatever the number of consumers.  Every consumer
 *      then continues teacher-forced from a prefix cache built three ways:
 *
 *        oracle   its own prefill of the prefix
 *        scd      lookup + get from the broker over its socket: the stored
 *                 codes decoded with its pair into its shared-memory arena
 *        raw      the producer's f16 KV reused as is (what a cache that
 *                 ignores the adapter serves: the cross-adapter hit bug)
 *
 *      and ppl (ratio to the oracle's), KL(oracle || method) and top-1
 *      agreement over the continuation are recorded.  TTFT: lookup + get
 *      into the arena + the forward of the first continuation token over
 *      it, vs the consumer's own prefill of the prefix + that forward (best
 *      of --reps per window, median over windows).
 *
 * The consumer's text is the SECOND half of its domain's held-out text (an
 * adapter's domain is its name: data/heldout/<adapter>.txt), or --text
 * FILE|DIR for every consumer.  Fleet totals: bytes the producer's codes
 * take (one copy per prefix) vs what a cache keyed by adapter stores (one
 * raw f16 KV copy per consumer that uses the prefix), and the prefill
 * tokens the consumers did not spend.  Fails (exit 1) if a pair does not
 * load or match its models, the broker does not start or a reload fails,
 * a client is dropped, a put or a get does not succeed (or returns fewer
 * tokens than stored), or a consumer has no evaluated token. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "codec.h"
#include "model.h"

#define MAX_CONSUMERS 64
#define MAX_TEXTS 64
#define FLEET_CB "fleet-scd"
#define WAIT_S 120.0

typedef struct fopts {
    const char *data, *codebook, *pairs, *text, *json, *png, *only;
    int prefix, cont, windows, reps, int8;
} fopts;

typedef struct facc { double nll, kl, agree; long n; } facc;

typedef struct ftext {
    char name[256];
    unsigned char *buf;
    size_t len;
    int users;          /* consumers evaluated on it */
    int windows;        /* windows cut from it (the stored prefixes) */
} ftext;

/* one consumer of the fleet, checked */
typedef struct fcons {
    char name[256], dir[1300], pair[1500];
    long long pair_bytes;
} fcons;

/* the broker the bench runs */
typedef struct fbroker {
    char tmp[256], cfg[300], sock[320], log[300];
    const char *data, *producer, *cbpath;
    int int8, block_tokens;
    pid_t pid;
} fbroker;

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench fleet [--data DIR] [--codebook FILE] [--pairs DIR] [--text FILE|DIR]\n"
"                        [--consumers a,b,...] [--prefix P] [--cont C] [--windows N]\n"
"                        [--reps R] [--f16] [--json FILE] [--png FILE]\n\n"
"One producer's stored prefixes served through one broker to every consumer\n"
"of the fleet: the models in DATA/models and the adapters in DATA/adapters\n"
"that have a pair PAIRS/<producer>__<consumer>.safetensors.  The bench starts\n"
"the broker (`scdb serve`) with no consumer, adds them one at a time by SIGHUP\n"
"(reload time and broker RSS per added pair), then the adapters that have no\n"
"pair as raw-reuse consumers in one more reload; every client registered on\n"
"the way must stay connected.  Then per (consumer, text): SCD (int8 codes, got\n"
"from the broker into the consumer's shared-memory arena) and raw reuse vs the\n"
"consumer's own prefill: ppl ratio, KL, top-1; TTFT via the broker (lookup +\n"
"get + first token) vs own prefill + first token; pair bytes; calibration\n"
"seconds (from the pair's calibration log when there).  Totals: bytes stored\n"
"once vs one raw KV copy per consumer (per-adapter keying).\n\n"
"  --data DIR        data directory (default: scdb's, e.g. data)\n"
"  --codebook FILE   default DATA/codebooks/base.safetensors\n"
"  --pairs DIR       default DATA/pairs\n"
"  --text FILE|DIR   evaluate every consumer on FILE, or on every *.txt of DIR\n"
"                    (default: each on the second half of its own domain's\n"
"                    held-out text)\n"
"  --consumers LIST  only these consumers (names)\n"
"  --prefix P        prefix tokens (320; the broker stores blocks of 64, or of\n"
"                    16 when P is not a multiple of 64: the consumer prefills\n"
"                    any tail itself, inside its TTFT)\n"
"  --cont C          continuation (64)\n"
"  --windows N       windows per text (4)    --reps R   TTFT repetitions (3)\n"
"  --f16             f16 codes instead of int8\n"
"  --json FILE       rows as JSON            --png FILE plot (tools/plot_fleet.py)\n"
"exit status: 0 measured, 1 a step failed (a pair, the broker, a reload, a put\n"
"or a get), 2 usage error.\n");
}

static int pos_int(const char *what, const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 1 << 20) {
        fprintf(stderr, "bench fleet: %s wants a positive integer, not '%s'\n", what, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void score(const float *logits, const float *ologp, const int32_t *next, int C, int V, float *lp,
                  facc *a)
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

/* seconds recorded in a pair's calibration log: the consumer's own line of
 * a fleet run ("  consumer NAME: S s"), else "calibrated in S s"; NAN */
static double calib_seconds(const char *pairs, const char *prod, const char *name)
{
    char path[1400], line[512], want[300];
    double s = NAN, total = NAN;
    snprintf(path, sizeof path, "%s/%s__%s.calibration.log", pairs, prod, name);
    FILE *f = fopen(path, "r");
    snprintf(want, sizeof want, "  consumer %s: %%lf s", name);
    if (!f) {   /* a fleet run's log: <producer>__fleet.calibration.log */
        snprintf(path, sizeof path, "%s/%s__fleet.calibration.log", pairs, prod);
        if (!(f = fopen(path, "r"))) return NAN;
        total = NAN;
        while (fgets(line, sizeof line, f)) {
            double x;
            if (sscanf(line, want, &x) == 1) s = x;
        }
        fclose(f);
        return s;
    }
    while (fgets(line, sizeof line, f)) {
        double x;
        if (sscanf(line, want, &x) == 1) s = x;
        else if (sscanf(line, "calibrated in %lf s", &x) == 1) total = x;
    }
    fclose(f);
    return isnan(s) ? total : s;
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

/* consumer directories: DATA/models/<x> and DATA/adapters/<x>, sorted */
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

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int load_text_arg(const char *arg, ftext *t, int max)
{
    struct stat st;
    int n = 0;
    if (stat(arg, &st)) { fprintf(stderr, "bench fleet: --text %s: no such file\n", arg); return -1; }
    char *files[MAX_TEXTS];
    int nf = 0;
    if (S_ISDIR(st.st_mode)) {
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
    } else {
        files[nf++] = strdup(arg);
    }
    for (int i = 0; i < nf && n < max; i++) {
        if (scdb_codec_read_text(files[i], (size_t)1 << 26, &t[n].buf, &t[n].len)) {
            fprintf(stderr, "bench fleet: cannot read %s\n", files[i]);
            for (int k = i; k < nf; k++) free(files[k]);
            return -1;
        }
        snprintf(t[n].name, sizeof t[n].name, "%s", base_name(files[i]));
        n++;
        free(files[i]);
    }
    return n;
}

/* find (or add) the text for a consumer's own held-out second half */
static int own_text(const scdb_model *m, ftext *t, int *nt)
{
    char name[256];
    snprintf(name, sizeof name, "%.200s.txt (second half)", scdb_codec_text_domain(m));
    for (int i = 0; i < *nt; i++)
        if (!strcmp(t[i].name, name)) return i;
    if (*nt == MAX_TEXTS) return -1;
    ftext *x = &t[*nt];
    if (scdb_codec_domain_text(m, SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 26, &x->buf, &x->len, NULL, 0)) {
        fprintf(stderr, "bench fleet: no held-out text for '%s' (domain %s)\n", scdb_model_cfg(m)->name,
                scdb_codec_text_domain(m));
        return -1;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    return (*nt)++;
}

/* ------------------------------------------------------------ the broker */

/* The broker's config serving the first n consumers of c, and the nr
 * adapters of raw (no pair: served base's KV as is, raw reuse). */
static int broker_config(const fbroker *b, const fcons *c, int n, const fcons *raw, int nr)
{
    FILE *f = fopen(b->cfg, "w");
    if (!f) {
        fprintf(stderr, "bench fleet: cannot write %s\n", b->cfg);
        return -1;
    }
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/store\nblock_tokens = %d\nlog_level = info\n"
               "heartbeat_timeout_ms = 30000\nmodels_dir = %s/models\n\n",
            b->sock, b->tmp, b->block_tokens, b->data);
    fprintf(f, "[model %s]\nconfig = %s/models/%s/config.json\n\n", b->producer, b->data, b->producer);
    fprintf(f, "[codebook " FLEET_CB "]\nkind = scd\nmodel = %s\ncodes_dtype = %s\nfile = %s\n\n",
            b->producer, b->int8 ? "int8" : "f16", b->cbpath);
    for (int i = 0; i < n; i++) {
        /* a model directory or an adapter directory (its base in models_dir) */
        if (strcmp(c[i].name, b->producer))
            fprintf(f, "[model %s]\nconfig = %s\n\n", c[i].name, c[i].dir);
        fprintf(f, "[pair " FLEET_CB " %s]\ndecoder = scd\nfile = %s\n\n", c[i].name, c[i].pair);
    }
    for (int i = 0; i < nr; i++)
        fprintf(f, "[model %s]\nconfig = %s\n\n[pair raw/%s %s]\ndecoder = raw\n\n", raw[i].name, raw[i].dir,
                b->producer, raw[i].name);
    if (fclose(f)) {
        fprintf(stderr, "bench fleet: cannot write %s\n", b->cfg);
        return -1;
    }
    return 0;
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

static scdb_err broker_connect(const fbroker *b, scdb **h)
{
    scdb_opts o = {.endpoint = b->sock, .timeout_ms = 30000, .name = "bench fleet"};
    return scdb_bench_connect(&o, WAIT_S, b->pid, h);
}

/* Start the broker on its config; wait until it answers. */
static int broker_start(fbroker *b)
{
    const char *args[] = {"--config", b->cfg, NULL};
    scdb *h = NULL;
    b->pid = scdb_bench_start_broker(args, b->log);
    if (b->pid < 0 || broker_connect(b, &h)) {
        fprintf(stderr, "bench fleet: the broker did not start (its log: %s)\n", b->log);
        if (b->pid > 0) scdb_bench_stop_broker(b->pid, SIGKILL);
        b->pid = -1;
        return -1;
    }
    scdb_close(&h);
    return 0;
}

static int broker_stop(fbroker *b)
{
    int st = b->pid > 0 ? scdb_bench_stop_broker(b->pid, SIGTERM) : 0;
    b->pid = -1;
    if (st) fprintf(stderr, "bench fleet: the broker exited with status %d (its log: %s)\n", st, b->log);
    return st ? -1 : 0;
}

/* SIGHUP and wait for reload `want` to be applied; its seconds, < 0 if it
 * failed or never came. */
static double broker_reload(const fbroker *b, scdb *stats_h, uint64_t want)
{
    double t0 = scdb_now(), until = t0 + WAIT_S;
    if (kill(b->pid, SIGHUP)) return -1;
    for (;;) {
        scdb_stat s;
        if (scdb_stats(stats_h, &s)) return -1;
        if (s.reload_failures) {
            fprintf(stderr, "bench fleet: reload %llu failed (the broker's log: %s)\n",
                    (unsigned long long)want, b->log);
            return -1;
        }
        if (s.reloads >= want) return scdb_now() - t0;
        if (scdb_now() > until) {
            fprintf(stderr, "bench fleet: reload %llu never applied in %.0f s\n",
                    (unsigned long long)want, WAIT_S);
            return -1;
        }
        usleep(500);
    }
}

/* least-squares slope of y over x = 1..n */
static double slope(const double *y, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    if (n < 2) return n == 1 ? y[0] : NAN;
    for (int i = 0; i < n; i++) {
        double x = i + 1;
        sx += x; sy += y[i]; sxx += x * x; sxy += x * y[i];
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

typedef struct fscale {
    long rss0_kb, rss_fresh_kb;
    long rss_kb[MAX_CONSUMERS];
    double reload_ms[MAX_CONSUMERS], client_ms[MAX_CONSUMERS];
    double rss_per_pair_kb, rss_per_pair_kb_fresh, register_ms, client_register_ms, raw_reload_ms;
    long rss_raw_kb;
    int n, n_raw, clients_kept;
} fscale;

/* Phase 1: 0 pairs, then one more per SIGHUP, then the nr adapters without
 * a pair (raw reuse) in one more; the clients stay. */
static int measure_registration(fbroker *b, const fcons *c, int n, const fcons *raw, int nr, fscale *sc)
{
    scdb *stats_h = NULL, *held[2 * MAX_CONSUMERS] = {0};
    double rss_d[MAX_CONSUMERS];
    int ok = 0;

    memset(sc, 0, sizeof *sc);
    sc->n = n;
    sc->n_raw = nr;
    if (broker_config(b, c, 0, raw, 0) || broker_start(b)) return -1;
    usleep(200000);     /* settle: its threads started, the store opened */
    sc->rss0_kb = rss_kb(b->pid);
    {
        scdb_opts o = {.endpoint = b->sock, .timeout_ms = 30000, .no_heartbeat = 1};
        if (scdb_bench_connect(&o, WAIT_S, b->pid, &stats_h)) goto done;
    }
    for (int i = 0; i < n; i++) {
        scdb_err e;
        if (broker_config(b, c, i + 1, raw, 0)) goto done;
        double s = broker_reload(b, stats_h, (uint64_t)i + 1);
        if (s < 0) goto done;
        sc->reload_ms[i] = s * 1e3;
        sc->rss_kb[i] = rss_kb(b->pid);
        rss_d[i] = (double)(sc->rss_kb[i] - sc->rss0_kb);
        double t0 = scdb_now();
        if ((e = broker_connect(b, &held[i])) ||
            (e = scdb_register(held[i], SCDB_CONSUMER, c[i].name, FLEET_CB, NULL))) {
            fprintf(stderr, "bench fleet: %s does not register after its reload: %s (%s)\n", c[i].name,
                    held[i] ? scdb_last_error(held[i]) : "", scdb_strerror(e));
            goto done;
        }
        sc->client_ms[i] = (scdb_now() - t0) * 1e3;
        fprintf(stderr, "bench fleet: registration %d/%d %s: reload %.1f ms, broker RSS %ld KiB\n", i + 1,
                n, c[i].name, sc->reload_ms[i], sc->rss_kb[i]);
    }
    /* the adapters without a pair, in one more reload */
    if (nr) {
        char cbn[300];
        snprintf(cbn, sizeof cbn, "raw/%s", b->producer);
        if (broker_config(b, c, n, raw, nr)) goto done;
        double s = broker_reload(b, stats_h, (uint64_t)n + 1);
        if (s < 0) goto done;
        sc->raw_reload_ms = s * 1e3;
        sc->rss_raw_kb = rss_kb(b->pid);
        for (int i = 0; i < nr; i++) {
            scdb_err e;
            if ((e = broker_connect(b, &held[n + i])) ||
                (e = scdb_register(held[n + i], SCDB_CONSUMER, raw[i].name, cbn, NULL))) {
                fprintf(stderr, "bench fleet: %s does not register after its reload: %s (%s)\n", raw[i].name,
                        held[n + i] ? scdb_last_error(held[n + i]) : "", scdb_strerror(e));
                goto done;
            }
        }
        fprintf(stderr, "bench fleet: registration: %d adapters without a pair (raw reuse) in one reload: "
                "%.1f ms, broker RSS %ld KiB\n", nr, sc->raw_reload_ms, sc->rss_raw_kb);
    }
    /* every client registered along the way still answers, and none was
     * reclaimed: a reload drops no client */
    for (int i = 0; i < n + nr; i++) {
        scdb_err e = scdb_ping(held[i], NULL);
        if (e) {
            fprintf(stderr, "bench fleet: %s's client was dropped by a later reload: %s\n",
                    i < n ? c[i].name : raw[i - n].name, scdb_strerror(e));
            goto done;
        }
        sc->clients_kept++;
    }
    {
        scdb_stat s;
        if (scdb_stats(stats_h, &s) || s.clients < (uint64_t)(n + nr) || s.reclaimed_clients ||
            s.stale_tokens) {
            fprintf(stderr, "bench fleet: the broker counts %llu clients (%d registered), %llu reclaimed, "
                    "%llu stale tokens\n", (unsigned long long)s.clients, n + nr,
                    (unsigned long long)s.reclaimed_clients, (unsigned long long)s.stale_tokens);
            goto done;
        }
    }
    sc->rss_per_pair_kb = slope(rss_d, n);
    sc->register_ms = slope(sc->reload_ms, n);
    {
        double tmp[MAX_CONSUMERS];
        memcpy(tmp, sc->client_ms, (size_t)n * sizeof *tmp);
        sc->client_register_ms = scdb_bench_median(tmp, (size_t)n);
    }
    ok = 1;
done:
    for (int i = 0; i < n + nr; i++) scdb_close(&held[i]);
    scdb_close(&stats_h);
    if (broker_stop(b)) ok = 0;
    if (!ok) return -1;
    /* afresh, every pair from the start: the broker phase 2 uses */
    if (broker_config(b, c, n, raw, 0) || broker_start(b)) return -1;
    usleep(200000);
    sc->rss_fresh_kb = rss_kb(b->pid);
    sc->rss_per_pair_kb_fresh = (double)(sc->rss_fresh_kb - sc->rss0_kb) / n;
    return 0;
}

typedef struct frow {
    char consumer[256], text[256];
    int lora;
    facc scd, raw, orc;
    double ttft_ms, own_ms, pair_bytes, calib_s, decode_ms;
    int nw;             /* windows evaluated */
} frow;

/* the broker's side of one consumer's evaluation */
typedef struct fconn {
    scdb *prod, *cons;              /* registered handles                  */
    scdb_arena *states, *arena;     /* producer's states, consumer's KV    */
    int block_tokens;
} fconn;

/* lookup + get of the prefix into the consumer's arena; its cache holds
 * the prefix after it (a tail shorter than a block prefilled here).  *have:
 * the tokens the broker wrote. */
static scdb_err get_prefix(const fconn *fc, const scdb_model *cons, const int32_t *tok, int P,
                           scdb_kv_cache **kv, int *have, uint64_t *decode_ns)
{
    scdb_lookup_result lr;
    scdb_get_result gr;
    int want = P / fc->block_tokens * fc->block_tokens;
    scdb_err rc;
    if ((rc = scdb_lookup(fc->cons, tok, (size_t)P, &lr)) ||
        (rc = scdb_get(fc->cons, tok, (size_t)P, fc->arena, 0, 0, &gr)))
        return rc;
    *have = (int)gr.tokens_written;
    if (decode_ns) *decode_ns = gr.decode_ns;
    if (*have < want || *have > P) return SCDB_ENOTFOUND;
    *kv = scdb_arena_cache(fc->arena);
    (*kv)->n = *have;
    if (*have < P) return scdb_model_forward(cons, tok + *have, NULL, P - *have, *kv, NULL, NULL);
    return SCDB_OK;
}

/* one consumer on one text: every window through oracle, scd and raw */
static int eval_one(const fopts *o, const scdb_model *prod, const scdb_model *cons, const fconn *fc,
                    ftext *t, frow *r)
{
    const scdb_model_config *pc = scdb_model_cfg(prod);
    const int P = o->prefix, C = o->cont, L = pc->n_layers, V = pc->vocab_size;
    const int kv = scdb_model_kv_dim(pc), need = P + C + 1;
    int want = o->windows, ok = 0;
    int32_t *tok = malloc((size_t)need * sizeof *tok);
    float *ologp = malloc((size_t)C * V * sizeof *ologp), *logits = malloc((size_t)C * V * sizeof *logits);
    float *lp = malloc((size_t)V * sizeof *lp);
    double *tt = calloc((size_t)want + 1, sizeof *tt), *ow = calloc((size_t)want + 1, sizeof *ow);
    double *dm = calloc((size_t)want + 1, sizeof *dm);
    scdb_kv_cache *pcache = NULL, *cache = NULL, *akv = NULL;
    scdb_err rc = SCDB_ENOMEM;
    const char *what = "memory";
    int nw = 0, have = 0;

    if (!tok || !ologp || !logits || !lp || !tt || !ow || !dm) goto done;
    if ((rc = scdb_model_cache_new(prod, P, &pcache)) || (rc = scdb_model_cache_new(cons, P + C, &cache)))
        goto done;
    if (t->len < (size_t)need) {
        fprintf(stderr, "bench fleet: text %s is shorter than one window (%d bytes)\n", t->name, need);
        rc = SCDB_EINVAL;
        goto done;
    }
    size_t span = t->len - (size_t)need;
    if ((size_t)want > t->len / (size_t)need) want = (int)(t->len / (size_t)need);
    for (int w = 0; w < want; w++) {
        size_t off = want > 1 ? span * (size_t)w / (size_t)(want - 1) : 0;
        scdb_tokenize_bytes(t->buf + off, (size_t)need, tok);
        /* the producer: its states into the shared-memory arena, encoded
         * and stored by the broker (once: a prefix already stored is not
         * added again) */
        scdb_capture cap = {.h_in = scdb_arena_states(fc->states, NULL, NULL, NULL)};
        scdb_put_result pr;
        pcache->n = 0;
        what = "producer prefill";
        if ((rc = scdb_model_forward(prod, tok, NULL, P, pcache, NULL, &cap))) goto done;
        what = "put";
        if ((rc = scdb_put_states(fc->prod, tok, (size_t)P, 0, fc->states, &pr))) goto done;
        if ((int)pr.n_stored * fc->block_tokens != P / fc->block_tokens * fc->block_tokens) {
            fprintf(stderr, "bench fleet: the broker stored %u blocks of the %d-token prefix\n", pr.n_stored, P);
            rc = SCDB_EIO;
            goto done;
        }
        /* oracle: own prefill */
        what = "own prefill";
        cache->n = 0;
        if ((rc = scdb_model_forward(cons, tok, NULL, P, cache, NULL, NULL)) ||
            (rc = scdb_model_forward(cons, tok + P, NULL, C, cache, logits, NULL)))
            goto done;
        for (int i = 0; i < C; i++)
            scdb_k_log_softmax_cpu(logits + (size_t)i * V, V, ologp + (size_t)i * V);
        score(logits, ologp, tok + P + 1, C, V, lp, &r->orc);
        /* scd: the stored codes, got from the broker through the
         * consumer's pair into its arena */
        what = "get";
        if ((rc = get_prefix(fc, cons, tok, P, &akv, &have, NULL))) goto done;
        what = "forward over the arena";
        if ((rc = scdb_model_forward(cons, tok + P, NULL, C, akv, logits, NULL))) goto done;
        score(logits, ologp, tok + P + 1, C, V, lp, &r->scd);
        /* raw: the producer's KV as is */
        for (int l = 0; l < L; l++) {
            memcpy(scdb_kv_k(cache, l, 0), scdb_kv_k(pcache, l, 0), (size_t)P * kv * sizeof(float));
            memcpy(scdb_kv_v(cache, l, 0), scdb_kv_v(pcache, l, 0), (size_t)P * kv * sizeof(float));
        }
        memcpy(cache->pos, pcache->pos, (size_t)P * sizeof(int32_t));
        cache->n = P;
        what = "raw";
        if ((rc = scdb_model_forward(cons, tok + P, NULL, C, cache, logits, NULL))) goto done;
        score(logits, ologp, tok + P + 1, C, V, lp, &r->raw);
        /* TTFT: lookup + get over the socket into the arena + the first
         * token, vs own prefill + the first token */
        double bs = INFINITY, bo = INFINITY, bd = INFINITY;
        for (int k = 0; k < o->reps; k++) {
            uint64_t dns = 0;
            double t0 = scdb_now();
            what = "get";
            if ((rc = get_prefix(fc, cons, tok, P, &akv, &have, &dns))) goto done;
            what = "first token over the arena";
            if ((rc = scdb_model_forward(cons, tok + P, NULL, 1, akv, logits, NULL))) goto done;
            double t1 = scdb_now();
            cache->n = 0;
            what = "own prefill";
            if ((rc = scdb_model_forward(cons, tok, NULL, P, cache, NULL, NULL)) ||
                (rc = scdb_model_forward(cons, tok + P, NULL, 1, cache, logits, NULL)))
                goto done;
            double t2 = scdb_now();
            if (t1 - t0 < bs) bs = t1 - t0;
            if (t2 - t1 < bo) bo = t2 - t1;
            if ((double)dns * 1e-6 < bd) bd = (double)dns * 1e-6;
        }
        tt[nw] = bs * 1e3;
        ow[nw] = bo * 1e3;
        dm[nw] = bd;
        nw++;
    }
    r->ttft_ms = scdb_bench_median(tt, (size_t)nw);
    r->own_ms = scdb_bench_median(ow, (size_t)nw);
    r->decode_ms = scdb_bench_median(dm, (size_t)nw);
    r->nw = nw;
    if (nw > t->windows) t->windows = nw;
    ok = 1;
done:
    if (!ok && rc) {
        scdb *h = !strcmp(what, "put") ? fc->prod : fc->cons;
        fprintf(stderr, "bench fleet: %s on %s: %s failed: %s%s%s\n", r->consumer, t->name, what,
                scdb_strerror(rc), !strcmp(what, "get") || !strcmp(what, "put") ? ": " : "",
                !strcmp(what, "get") || !strcmp(what, "put") ? scdb_last_error(h) : "");
        if (!strcmp(what, "get") && rc == SCDB_ENOTFOUND)
            fprintf(stderr, "bench fleet: %s: the get wrote %d tokens of the %d stored\n", r->consumer, have,
                    P / fc->block_tokens * fc->block_tokens);
    }
    free(tok); free(ologp); free(logits); free(lp);
    free(tt); free(ow); free(dm);
    scdb_kv_cache_free(&pcache);
    scdb_kv_cache_free(&cache);
    return ok ? 0 : -1;
}

static double ppl(const facc *a) { return a->n ? exp(a->nll / (double)a->n) : NAN; }

static void jnum(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

int scdb_bench_fleet(int argc, char **argv)
{
    fopts o = {.prefix = 320, .cont = 64, .windows = 4, .reps = 3, .int8 = 1};
    char cbpath[1200], pairs[1200], dirs_root[1300];
    char *dirs[2 * MAX_CONSUMERS];
    int nd = 0, ret = 1, nt = 0, nrows = 0, ncons = 0, failed = 0;
    static ftext texts[MAX_TEXTS];
    static fcons cons_list[MAX_CONSUMERS], raw_list[MAX_CONSUMERS];
    int nraw = 0;
    static fbroker fb;
    static fscale sc;
    fconn fc = {0};
    frow *rows = NULL;
    scdb_codebook *cb = NULL;
    scdb_model *prod = NULL;
    char err[512] = "";
    scdb_err rc;

    memset(texts, 0, sizeof texts);
    memset(&fb, 0, sizeof fb);
    fb.pid = -1;
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
        else if (!strcmp(a, "--f16")) o.int8 = 0;
        else if (!strcmp(a, "--prefix") && more) { if (pos_int(a, argv[++i], &o.prefix)) return 2; }
        else if (!strcmp(a, "--cont") && more) { if (pos_int(a, argv[++i], &o.cont)) return 2; }
        else if (!strcmp(a, "--windows") && more) { if (pos_int(a, argv[++i], &o.windows)) return 2; }
        else if (!strcmp(a, "--reps") && more) { if (pos_int(a, argv[++i], &o.reps)) return 2; }
        else {
            fprintf(stderr, "bench fleet: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (o.prefix < 16) {
        fprintf(stderr, "bench fleet: --prefix %d: the broker stores blocks of at least 16 tokens\n", o.prefix);
        return 2;
    }
    if (!o.data) o.data = scdb_data_dir();
    snprintf(cbpath, sizeof cbpath, "%s", o.codebook ? o.codebook : "");
    if (!o.codebook) snprintf(cbpath, sizeof cbpath, "%s/codebooks/base.safetensors", o.data);
    if (o.pairs) snprintf(pairs, sizeof pairs, "%s", o.pairs);
    else snprintf(pairs, sizeof pairs, "%s/pairs", o.data);
    if ((rc = scdb_codebook_load(cbpath, &cb, err, sizeof err))) {
        fprintf(stderr, "bench fleet: %s: %s (%s)\n", cbpath, err, scdb_strerror(rc));
        return 1;
    }
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    snprintf(dirs_root, sizeof dirs_root, "%s/models/%s", o.data, ci->producer);
    if ((rc = scdb_model_load(dirs_root, &prod, err, sizeof err)) ||
        (rc = scdb_codebook_check_producer(cb, prod, err, sizeof err))) {
        fprintf(stderr, "bench fleet: producer %s: %s (%s)\n", dirs_root, err, scdb_strerror(rc));
        goto done;
    }
    if (o.int8 && (rc = scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8))) {
        fprintf(stderr, "bench fleet: int8 codes: %s\n", scdb_strerror(rc));
        goto done;
    }
    if (o.prefix + o.cont + 1 > scdb_model_cfg(prod)->max_seq_len) {
        fprintf(stderr, "bench fleet: --prefix + --cont exceed the model's %d positions\n",
                scdb_model_cfg(prod)->max_seq_len);
        goto done;
    }
    if (o.text && (nt = load_text_arg(o.text, texts, MAX_TEXTS)) < 1) {
        if (nt == 0) fprintf(stderr, "bench fleet: --text %s: no *.txt\n", o.text);
        nt = 0;
        goto done;
    }
    snprintf(dirs_root, sizeof dirs_root, "%s/models", o.data);
    nd = list_dirs(dirs_root, dirs, MAX_CONSUMERS);
    snprintf(dirs_root, sizeof dirs_root, "%s/adapters", o.data);
    nd += list_dirs(dirs_root, dirs + nd, MAX_CONSUMERS);

    /* the fleet: every consumer with a pair that loads and matches its models */
    for (int i = 0; i < nd; i++) {
        const char *name = base_name(dirs[i]);
        fcons *fcn;
        struct stat st;
        scdb_model *cons = NULL;
        scdb_pair *pair = NULL;
        if (!listed(o.only, name)) continue;
        if (ncons == MAX_CONSUMERS) {
            fprintf(stderr, "bench fleet: more than %d consumers with a pair: %s and the rest not measured "
                    "(--consumers to choose)\n", MAX_CONSUMERS, name);
            failed = 1;
            break;
        }
        fcn = &cons_list[ncons];
        snprintf(fcn->pair, sizeof fcn->pair, "%s/%s__%s.safetensors", pairs, ci->producer, name);
        if (stat(fcn->pair, &st)) {
            fprintf(stderr, "bench fleet: %s: no pair %s (skipped; registered as a raw-reuse consumer "
                    "in the registration phase)\n", name, fcn->pair);
            if (strstr(dirs[i], "/adapters/") && nraw < MAX_CONSUMERS) {
                snprintf(raw_list[nraw].name, sizeof raw_list[nraw].name, "%s", name);
                snprintf(raw_list[nraw].dir, sizeof raw_list[nraw].dir, "%s", dirs[i]);
                nraw++;
            }
            continue;
        }
        if ((rc = scdb_model_load(dirs[i], &cons, err, sizeof err)) ||
            (rc = scdb_pair_load(fcn->pair, cb, &pair, err, sizeof err)) ||
            (rc = scdb_pair_check_models(pair, prod, cons, err, sizeof err))) {
            fprintf(stderr, "bench fleet: %s: %s (%s)\n", name, err, scdb_strerror(rc));
            failed = 1;
        } else {
            snprintf(fcn->name, sizeof fcn->name, "%s", name);
            snprintf(fcn->dir, sizeof fcn->dir, "%s", dirs[i]);
            fcn->pair_bytes = (long long)st.st_size;
            ncons++;
        }
        scdb_pair_free(&pair);
        scdb_model_free(&cons);
    }
    if (ncons == 0) {
        fprintf(stderr, "bench fleet: no consumer with a pair in %s\n", pairs);
        goto done;
    }
    rows = calloc((size_t)ncons * (size_t)(nt ? nt : 1) + 1, sizeof *rows);
    if (!rows) goto done;

    /* the broker: a private temp dir, blocks that tile the prefix */
    {
        const char *td = getenv("TMPDIR");
        snprintf(fb.tmp, sizeof fb.tmp, "%.200s/scdb-bench-fleet-XXXXXX", td && *td ? td : "/tmp");
        if (!mkdtemp(fb.tmp)) {
            perror("bench fleet: mkdtemp");
            fb.tmp[0] = 0;
            goto done;
        }
        snprintf(fb.cfg, sizeof fb.cfg, "%s/broker.ini", fb.tmp);
        snprintf(fb.sock, sizeof fb.sock, "ipc://%s/broker.sock", fb.tmp);
        snprintf(fb.log, sizeof fb.log, "%s/broker.log", fb.tmp);
        fb.data = o.data;
        fb.producer = ci->producer;
        fb.cbpath = cbpath;
        fb.int8 = o.int8;
        fb.block_tokens = o.prefix % 64 == 0 ? 64 : 16;
    }
    fprintf(stderr, "bench fleet: phase 1: %d consumers registered one SIGHUP at a time\n", ncons);
    if (measure_registration(&fb, cons_list, ncons, raw_list, nraw, &sc)) { failed = 1; goto done; }

    /* phase 2: the producer stores, every consumer gets */
    scdb_err e;
    fc.block_tokens = fb.block_tokens;
    if ((e = broker_connect(&fb, &fc.prod)) ||
        (e = scdb_register(fc.prod, SCDB_PRODUCER, ci->producer, FLEET_CB, NULL)) ||
        (e = scdb_states_arena_new(fc.prod, o.prefix, &fc.states))) {
        fprintf(stderr, "bench fleet: producer %s: %s (%s)\n", ci->producer,
                fc.prod ? scdb_last_error(fc.prod) : "", scdb_strerror(e));
        failed = 1;
        goto done;
    }
    const scdb_info *binfo = scdb_get_info(fc.prod);
    const scdb_model_config *pc = scdb_model_cfg(prod);
    const double raw_tok = (double)pc->n_layers * 2 * scdb_model_kv_dim(pc) * 2;
    const double scd_tok = (double)binfo->block_bytes / binfo->block_tokens;
    for (int i = 0; i < ncons; i++) {
        const char *name = cons_list[i].name;
        scdb_model *cons = NULL;
        if ((rc = scdb_model_load(cons_list[i].dir, &cons, err, sizeof err))) {
            fprintf(stderr, "bench fleet: %s: %s (%s)\n", name, err, scdb_strerror(rc));
            failed = 1;
            continue;
        }
        if ((e = broker_connect(&fb, &fc.cons)) ||
            (e = scdb_register(fc.cons, SCDB_CONSUMER, name, FLEET_CB, NULL)) ||
            (e = scdb_arena_new(fc.cons, o.prefix + o.cont, &fc.arena))) {
            fprintf(stderr, "bench fleet: consumer %s: %s (%s)\n", name, fc.cons ? scdb_last_error(fc.cons) : "",
                    scdb_strerror(e));
            failed = 1;
            goto next;
        }
        int lora = !strcmp(scdb_model_cfg(cons)->finetune, "lora");
        int t0 = 0, t1 = nt;
        if (!o.text) {
            if ((t0 = own_text(cons, texts, &nt)) < 0) { failed = 1; goto next; }
            t1 = t0 + 1;
        }
        for (int k = t0; k < t1; k++) {
            frow *r = &rows[nrows];
            snprintf(r->consumer, sizeof r->consumer, "%s", name);
            snprintf(r->text, sizeof r->text, "%s", texts[k].name);
            r->lora = lora;
            r->pair_bytes = (double)cons_list[i].pair_bytes;
            r->calib_s = calib_seconds(pairs, ci->producer, name);
            fprintf(stderr, "bench fleet: %s (%s) on %s\n", name, lora ? "lora" : "full", texts[k].name);
            if (eval_one(&o, prod, cons, &fc, &texts[k], r) || r->scd.n == 0 || r->raw.n == 0) {
                fprintf(stderr, "bench fleet: %s on %s: no evaluated token\n", name, texts[k].name);
                failed = 1;
                continue;
            }
            texts[k].users++;
            nrows++;
        }
    next:
        scdb_arena_free(&fc.arena);
        scdb_close(&fc.cons);
        scdb_model_free(&cons);
    }

    /* fleet totals */
    double stored = 0, keyed = 0, saved_tok = 0, all_tok = 0, own_ms = 0, ttft_ms = 0;
    int prefixes = 0;
    for (int k = 0; k < nt; k++) {
        if (texts[k].users) prefixes += texts[k].windows;
        double tokens = (double)texts[k].windows * o.prefix;
        stored += tokens * scd_tok;
        keyed += tokens * raw_tok * texts[k].users;
        all_tok += tokens * texts[k].users;
        if (texts[k].users) saved_tok += tokens * (texts[k].users - 1);   /* the producer prefilled once */
    }
    for (int i = 0; i < nrows; i++) {
        own_ms += rows[i].own_ms * rows[i].nw;
        ttft_ms += rows[i].ttft_ms * rows[i].nw;
    }

    printf("## Fleet: one producer (%s), %d consumers, %s codes (codebook %s), one broker\n\n", ci->producer,
           ncons, o.int8 ? "int8" : "f16", ci->id_hex);
    printf("registration: %d pairs added one SIGHUP at a time: broker RSS %ld KiB with none, %ld KiB with "
           "all (%+.0f KiB per pair, slope; %+.0f KiB per pair started afresh with all: %ld KiB); reload "
           "%.1f ms with one pair, %.1f ms with all (%.2f ms per pair, slope); a client's registration "
           "%.2f ms (median)",
           sc.n, sc.rss0_kb, sc.rss_kb[sc.n - 1], sc.rss_per_pair_kb, sc.rss_per_pair_kb_fresh, sc.rss_fresh_kb,
           sc.reload_ms[0], sc.reload_ms[sc.n - 1], sc.register_ms, sc.client_register_ms);
    if (sc.n_raw)
        printf("; then %d adapters without a pair as raw-reuse consumers in one more reload (%.1f ms, RSS %ld "
               "KiB)", sc.n_raw, sc.raw_reload_ms, sc.rss_raw_kb);
    printf(": %d consumers registered in one broker, %d of %d clients stayed connected through every later "
           "reload\n\n", sc.n + sc.n_raw, sc.clients_kept, sc.n + sc.n_raw);
    printf("prefix %d + continuation %d tokens, %d windows per text; vs each consumer's own prefill; the\n"
           "prefix got from the broker (blocks of %d tokens) into the consumer's shared-memory arena\n\n",
           o.prefix, o.cont, o.windows, fb.block_tokens);
    printf("| consumer | kind | text | SCD ppl | SCD KL | SCD top-1 | raw ppl | raw KL | raw top-1 | KL raw/SCD | "
           "TTFT ms | (decode ms) | own prefill ms | speedup | pair KB | calib s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    cJSON *root = cJSON_CreateObject(), *jr = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < nrows; i++) {
        frow *r = &rows[i];
        double po = ppl(&r->orc), ps = ppl(&r->scd) / po, pr = ppl(&r->raw) / po;
        double kl = r->scd.kl / r->scd.n, rkl = r->raw.kl / r->raw.n;
        double t1 = r->scd.agree / r->scd.n, rt1 = r->raw.agree / r->raw.n;
        printf("| %s | %s | %s | %+.2f%% | %.4f | %.3f | %+.2f%% | %.4f | %.3f | %.1fx | %.2f | %.2f | %.2f | %.2fx | "
               "%.0f | %s |\n",
               r->consumer, r->lora ? "lora" : "full", r->text, (ps - 1) * 100, kl, t1, (pr - 1) * 100, rkl,
               rt1, kl > 0 ? rkl / kl : NAN, r->ttft_ms, r->decode_ms, r->own_ms, r->own_ms / r->ttft_ms,
               r->pair_bytes / 1024, isnan(r->calib_s) ? "-" : (snprintf(err, sizeof err, "%.1f", r->calib_s), err));
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "consumer", r->consumer);
        cJSON_AddStringToObject(j, "kind", r->lora ? "lora" : "full");
        cJSON_AddStringToObject(j, "text", r->text);
        jnum(j, "bytes_per_token", scd_tok);
        jnum(j, "raw_bytes_per_token", raw_tok);
        jnum(j, "ppl_ratio", ps);
        jnum(j, "kl", kl);
        jnum(j, "top1", t1);
        jnum(j, "raw_ppl_ratio", pr);
        jnum(j, "raw_kl", rkl);
        jnum(j, "raw_top1", rt1);
        jnum(j, "ttft_ms", r->ttft_ms);
        jnum(j, "own_prefill_ms", r->own_ms);
        jnum(j, "decode_ms", r->decode_ms);
        jnum(j, "pair_bytes", r->pair_bytes);
        jnum(j, "calib_s", r->calib_s);
        jnum(j, "tokens", (double)r->scd.n);
        cJSON_AddItemToArray(jr, j);
    }
    printf("\nstored by scdb: %.0f bytes (%d prefixes x %d tokens x %.1f B/token, once); per-adapter keying: "
           "%.0f bytes (one raw f16 KV copy, %.0f B/token, per consumer using the prefix): 1/%.1f\n",
           stored, prefixes, o.prefix, scd_tok, keyed, raw_tok, keyed / stored);
    printf("prefill tokens saved: %.0f of %.0f (%.1f%%): every consumer but the producer's one prefill "
           "per prefix; consumer-side time to first token %.1f ms via the broker vs %.1f ms own prefill\n",
           saved_tok, all_tok, all_tok > 0 ? 100.0 * saved_tok / all_tok : 0.0, ttft_ms, own_ms);
    printf("(machine: shared and loaded while measured; the broker runs on the same cores as the consumer)\n");
    jnum(root, "stored_bytes", stored);
    jnum(root, "stored_bytes_per_adapter_keying", keyed);
    cJSON_AddNumberToObject(root, "consumers", ncons);
    jnum(root, "prefill_tokens_saved", saved_tok);
    jnum(root, "prefill_tokens_total", all_tok);
    cJSON_AddStringToObject(root, "producer", ci->producer);
    cJSON_AddStringToObject(root, "codebook", ci->id_hex);
    cJSON_AddStringToObject(root, "codes", o.int8 ? "int8" : "f16");
    cJSON_AddNumberToObject(root, "prefix", o.prefix);
    cJSON_AddNumberToObject(root, "cont", o.cont);
    cJSON_AddNumberToObject(root, "windows", o.windows);
    cJSON_AddNumberToObject(root, "block_tokens", fb.block_tokens);
    cJSON_AddStringToObject(root, "ttft_includes",
                            "consumer: lookup + get from the broker over its socket into the consumer's "
                            "shared-memory arena (the broker decodes with the pair) + the first token's "
                            "forward; own: prefill of the prefix + the first token's forward");
    /* registration (item 5) */
    jnum(root, "rss_per_pair_kb", sc.rss_per_pair_kb);
    jnum(root, "rss_per_pair_kb_fresh", sc.rss_per_pair_kb_fresh);
    jnum(root, "register_ms", sc.register_ms);
    jnum(root, "client_register_ms", sc.client_register_ms);
    jnum(root, "broker_rss0_kb", (double)sc.rss0_kb);
    jnum(root, "broker_rss_fresh_kb", (double)sc.rss_fresh_kb);
    cJSON_AddNumberToObject(root, "clients_kept", sc.clients_kept);
    cJSON_AddNumberToObject(root, "registered_consumers", sc.n + sc.n_raw);
    cJSON_AddNumberToObject(root, "raw_consumers", sc.n_raw);
    jnum(root, "raw_reload_ms", sc.n_raw ? sc.raw_reload_ms : NAN);
    {
        cJSON *jl = cJSON_AddArrayToObject(root, "reload_ms"), *jm = cJSON_AddArrayToObject(root, "rss_kb");
        for (int i = 0; i < sc.n; i++) {
            cJSON_AddItemToArray(jl, cJSON_CreateNumber(sc.reload_ms[i]));
            cJSON_AddItemToArray(jm, cJSON_CreateNumber((double)sc.rss_kb[i]));
        }
    }
    int wrote = 0;
    if (o.json) {
        if (scdb_bench_write_json(o.json, root, "bench fleet")) { cJSON_Delete(root); goto done; }
        wrote = 1;
    }
    if (o.png) {
        char script[1200], jpath[1200], cmd[4000];
        snprintf(script, sizeof script, "%s/tools/plot_fleet.py", scdb_share_dir());
        snprintf(jpath, sizeof jpath, "%s", o.json ? o.json : "/tmp/scdb_bench_fleet.json");
        if (!wrote && scdb_bench_write_json(jpath, root, "bench fleet")) { cJSON_Delete(root); goto done; }
        if (access(script, R_OK) || access("/usr/bin/python3", X_OK)) {
            fprintf(stderr, "bench fleet: no PNG: %s or /usr/bin/python3 is missing\n", script);
        } else {
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, jpath, o.png);
            if (system(cmd) != 0) fprintf(stderr, "bench fleet: no PNG: plot_fleet.py failed (matplotlib missing?)\n");
        }
    }
    cJSON_Delete(root);
    ret = failed ? 1 : 0;
done:
    scdb_arena_free(&fc.states);
    scdb_close(&fc.prod);
    if (fb.pid > 0 && broker_stop(&fb)) failed = ret = 1;
    if (failed) fprintf(stderr, "bench fleet: FAILED: a consumer could not be evaluated (above)\n");
    if (fb.tmp[0]) {
        if (ret == 0 && scdb_rm_tree(fb.tmp)) fprintf(stderr, "bench fleet: could not remove %s\n", fb.tmp);
        else if (ret) fprintf(stderr, "bench fleet: kept %s (the broker's config and log)\n", fb.tmp);
    }
    for (int i = 0; i < nd; i++) free(dirs[i]);
    for (int k = 0; k < nt; k++) free(texts[k].buf);
    free(rows);
    scdb_model_free(&prod);
    scdb_codebook_free(&cb);
    return ret;
}
