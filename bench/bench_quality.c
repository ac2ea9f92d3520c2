/* bench_quality.c — `scdb bench quality`: the SCD paper's quality table on
 * the bundled model family.
 *
 * For each consumer (every data/pairs/<producer>__<consumer>.safetensors
 * with consumer != producer), windows of held-out text from the consumer's
 * domain (the SECOND half of data/heldout/<domain>.txt; calibration only
 * ever reads training files or the first half), each PREFIX tokens followed
 * by CONT tokens (+1 target).  The consumer continues teacher-forced from a
 * prefix cache built by each method; everything is compared with the
 * consumer's own prefill (oracle) in the same run:
 *
 *   oracle      the consumer prefills the prefix itself
 *   raw         the producer's KV as is (f16 payload)
 *   quant4      the producer's KV, 4-bit: asymmetric uniform, groups of
 *               head_dim channels (one head of one token), f16 min and
 *               scale per group
 *   droidspeak  producer KV reused on all layers except a contiguous range
 *               [a, a+g) that the consumer recomputes with its own layers,
 *               starting from the producer's residual stream entering layer
 *               a (payload: the reused layers' KV + that residual, f16);
 *               g = --ds-layers (2), a chosen per consumer by KL on windows
 *               of the held-out FIRST half
 *   scd_reuse   SCD codes, decoded with the pair's REUSE decoders only
 *   scd_full    SCD codes, REUSE + the pair's default patch layers
 *
 * Metrics per method: perplexity of the continuation, mean KL(oracle ||
 * method) and top-1 agreement with the oracle over the continuation's
 * next-token distributions, payload bytes per prefix token, and time to
 * first token of the continuation: oracle = prefill of the prefix + forward
 * of the first continuation token; the others = building the consumer's
 * prefix cache from the payload already in memory (copy / dequantise /
 * recompute / SCD decode incl. patch regeneration) + that forward.  Producer
 * prefill, encoding and any transfer are not included.  Median over
 * windows of the best of --reps runs.
 *
 * Device (--device): the consumer runs through scdb_model_dev on that
 * device's ops table (the CPU table is the host forward bit for bit), its
 * prefix cache lives there, and each method builds it there: raw uploads
 * the KV, quant4 uploads the codes and dequantises with the q4 twin,
 * droidspeak uploads the reused layers and the residual and recomputes with
 * the device's layers, SCD decodes with scdb_pair_dev.  On CUDA the TTFT of
 * the non-oracle methods therefore includes the upload of the payload from
 * host memory.  The producer (capture, encoding) runs on the host.
 *
 * Ablations (JSON "ablations", also printed): patch budget sweep 0..all
 * aligners of the shipped pair; and on an in-process calibration (statistics
 * from the family's training files, else the held-out first half) REUSE-only
 * codebooks with r_K and r_V varied separately, PCA vs reduced-rank
 * regression, post- vs pre-RoPE K coding, layer 0 coded vs regenerated
 * from tokens. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "codec.h"
#include "model.h"

int scdb_bench_quality(int argc, char **argv);

#define MAXC 8
enum { M_ORACLE, M_RAW, M_QUANT4, M_DROID, M_REUSE, M_FULL, M_COUNT };
static const char *MNAME[M_COUNT] = {"oracle", "raw", "quant4", "droidspeak", "scd_reuse", "scd_full"};

typedef struct qopts {
    const char *data, *models, *artifacts, *producer, *text, *json, *png;
    int prefix, cont, windows, reps, ds_layers, abl_windows, ablations, verbose;
} qopts;

/* one evaluation window, everything the methods need */
typedef struct qwin {
    int32_t *tok;            /* P + C + 1 */
    float *ph, *pk, *pres;   /* producer h_in [L][P][d], k_post [L][P][kv], resid [L+1][P][d] */
    scdb_kv_cache *pcache;   /* producer's prefix cache */
    float *ologp;            /* oracle log-probs [C][V] */
    double oracle_ms;
} qwin;

typedef struct acc { double nll, kl, agree; long n; double *ms; int nms; } acc;

typedef struct ctx {
    const qopts *o;
    const scdb_model *prod, *cons;
    scdb_device dev;
    scdb_model_dev *cd;      /* the consumer on dev */
    const scdb_k_ops *ops;   /* dev's table */
    int L, d, kv, V, P, C;
    qwin *w;
    int nw;
    scdb_kv_cache *cache;    /* consumer cache, P + C slots, in dev's memory */
    float *dlogits;          /* [C][V] in dev's memory */
    void *dscr;              /* payload staging in dev's memory */
    size_t dscr_bytes;
    float *logits, *lp;
} ctx;

/* dev's staging buffer of at least `bytes` */
static scdb_err staging(ctx *c, size_t bytes, void **out)
{
    if (bytes > c->dscr_bytes) {
        void *p = NULL;
        scdb_err rc = c->ops->alloc(bytes, &p);
        if (rc) return rc;
        c->ops->release(c->dscr);
        c->dscr = p;
        c->dscr_bytes = bytes;
    }
    *out = c->dscr;
    return SCDB_OK;
}

/* the consumer's forward on dev, logits back to the host */
static scdb_err cforward(ctx *c, const int32_t *tok, int n, float *logits)
{
    scdb_err rc = scdb_model_dev_forward(c->cd, tok, NULL, n, c->cache, logits ? c->dlogits : NULL,
                                         NULL);
    if (!rc && logits) rc = c->ops->download(logits, c->dlogits, (size_t)n * c->V * sizeof(float));
    return rc;
}

/* a consumer model and its cache on the context's device */
static scdb_err ctx_consumer(ctx *c, const scdb_model *cons)
{
    scdb_err rc;
    scdb_model_dev_cache_free(c->cd, &c->cache);
    scdb_model_dev_free(&c->cd);
    c->cons = cons;
    if ((rc = scdb_model_dev_new(cons, c->dev, &c->cd))) return rc;
    return scdb_model_dev_cache_new(c->cd, c->P + c->C, &c->cache);
}

/* ------------------------------------------------------------ helpers */

static void acc_logits(ctx *c, const qwin *w, acc *a)
{
    for (int t = 0; t < c->C; t++) {
        const float *o = w->ologp + (size_t)t * c->V;
        scdb_k_log_softmax_cpu(c->logits + (size_t)t * c->V, c->V, c->lp);
        double k = 0.0;
        int ao = 0, am = 0;
        for (int v = 0; v < c->V; v++) {
            k += exp((double)o[v]) * ((double)o[v] - c->lp[v]);
            if (o[v] > o[ao]) ao = v;
            if (c->lp[v] > c->lp[am]) am = v;
        }
        a->kl += k;
        a->agree += ao == am;
        a->nll -= c->lp[w->tok[c->P + 1 + t]];
        a->n++;
    }
}

static void acc_free(acc *a) { free(a->ms); memset(a, 0, sizeof *a); }

static int acc_ms(acc *a, double ms)
{
    double *g = realloc(a->ms, (size_t)(a->nms + 1) * sizeof *g);
    if (!g) return -1;
    a->ms = g;
    a->ms[a->nms++] = ms;
    return 0;
}

/* ------------------------------------------------------------ builders */

typedef scdb_err (*builder)(ctx *c, const qwin *w, void *arg);

/* the producer's KV of layers [0, L) but [skip0, skip1) into the cache */
static scdb_err put_kv(ctx *c, const qwin *w, int skip0, int skip1)
{
    size_t n = (size_t)c->P * c->kv;
    scdb_err rc;
    for (int l = 0; l < c->L; l++) {
        if (l >= skip0 && l < skip1) continue;
        if ((rc = c->ops->upload(scdb_kv_k(c->cache, l, 0), scdb_kv_k(w->pcache, l, 0),
                                 n * sizeof(float))) ||
            (rc = c->ops->upload(scdb_kv_v(c->cache, l, 0), scdb_kv_v(w->pcache, l, 0),
                                 n * sizeof(float))))
            return rc;
    }
    return c->ops->upload(c->cache->pos, w->pcache->pos, (size_t)c->P * sizeof(int32_t));
}

static scdb_err b_raw(ctx *c, const qwin *w, void *arg)
{
    (void)arg;
    scdb_err rc = put_kv(c, w, 0, 0);
    c->cache->n = c->P;
    return rc;
}

/* quant4: uint8 pairs of nibbles + f16 (min, scale) per group of `g` values
 * (kernels.h, scdb_k_q4_encode_cpu / scdb_k_q4_decode_cpu) */
typedef struct q4set { uint8_t *q[2]; uint16_t *ms[2]; } q4set;   /* K, V over all layers */

static scdb_err b_quant4(ctx *c, const qwin *w, void *arg)
{
    const q4set *qs = arg;
    int g = scdb_model_cfg(c->cons)->head_dim;
    size_t n = (size_t)c->P * c->kv, qb = (size_t)c->L * n / 2, mb = (size_t)c->L * (n / g) * 4;
    void *st;
    scdb_err e;
    /* the codes up (the payload), dequantised where the cache is */
    if ((e = staging(c, 2 * (qb + mb), &st))) return e;
    uint8_t *dq[2] = {st, (uint8_t *)st + qb};
    uint16_t *dm[2] = {(uint16_t *)((uint8_t *)st + 2 * qb), (uint16_t *)((uint8_t *)st + 2 * qb + mb)};
    for (int t = 0; t < 2; t++)
        if ((e = c->ops->upload(dq[t], qs->q[t], qb)) || (e = c->ops->upload(dm[t], qs->ms[t], mb)))
            return e;
    for (int l = 0; l < c->L; l++) {
        e = c->ops->q4_decode(dq[0] + l * n / 2, dm[0] + 2 * (l * n / g), n, g,
                              scdb_kv_k(c->cache, l, 0));
        if (!e) e = c->ops->q4_decode(dq[1] + l * n / 2, dm[1] + 2 * (l * n / g), n, g,
                                      scdb_kv_v(c->cache, l, 0));
        if (e) return e;
    }
    if ((e = c->ops->upload(c->cache->pos, w->pcache->pos, (size_t)c->P * sizeof(int32_t))))
        return e;
    c->cache->n = c->P;
    return SCDB_OK;
}

typedef struct dsarg { int a, g; float *x; } dsarg;

static scdb_err b_droid(ctx *c, const qwin *w, void *arg)
{
    dsarg *ds = arg;
    size_t xb = (size_t)c->P * c->d * sizeof(float);
    void *dx;
    scdb_err rc;
    if ((rc = put_kv(c, w, ds->a, ds->a + ds->g))) return rc;
    /* the producer's residual entering layer a, f16 on the wire */
    const float *r = w->pres + (size_t)ds->a * c->P * c->d;
    for (size_t i = 0; i < (size_t)c->P * c->d; i++) ds->x[i] = scdb_f16_to_f32(scdb_f32_to_f16(r[i]));
    if ((rc = staging(c, xb, &dx)) || (rc = c->ops->upload(dx, ds->x, xb))) return rc;
    for (int l = ds->a; l < ds->a + ds->g; l++) {
        rc = scdb_model_dev_layer_forward(c->cd, l, dx, w->pcache->pos, c->P, c->cache, 0, NULL, 0);
        if (rc) return rc;
    }
    c->cache->n = c->P;
    return SCDB_OK;
}

typedef struct scdarg {
    const scdb_codebook *cb;
    const scdb_pair *p;
    scdb_pair_dev *pd;      /* the pair's weights on the context's device */
    int n_patch;
    uint16_t *codes;        /* per window: filled before timing */
} scdarg;

static scdb_err b_scd(ctx *c, const qwin *w, void *arg)
{
    scdarg *s = arg;
    scdb_err rc = scdb_pair_dev_decode_range(s->pd, s->cb, s->codes, c->P, 0, c->P, w->pcache->pos,
                                             w->tok, s->n_patch, c->cache, 0);
    c->cache->n = c->P;
    return rc;
}

/* quality: build, forward the continuation; timing: build + first token */
static scdb_err run_method(ctx *c, const qwin *w, builder fn, void *arg, acc *a, int timed)
{
    scdb_err rc;
    c->cache->n = 0;
    if ((rc = fn(c, w, arg))) return rc;
    if ((rc = cforward(c, w->tok + c->P, c->C, c->logits))) return rc;
    acc_logits(c, w, a);
    if (!timed) return SCDB_OK;
    double best = INFINITY;
    for (int r = 0; r < c->o->reps; r++) {
        double t0 = scdb_now();
        c->cache->n = 0;
        if ((rc = fn(c, w, arg))) return rc;
        if ((rc = cforward(c, w->tok + c->P, 1, c->logits))) return rc;
        double ms = (scdb_now() - t0) * 1e3;
        if (ms < best) best = ms;
    }
    return acc_ms(a, best) ? SCDB_ENOMEM : SCDB_OK;
}

/* ------------------------------------------------------------ windows */

static void free_windows(ctx *c)
{
    for (int i = 0; i < c->nw; i++) {
        free(c->w[i].tok); free(c->w[i].ph); free(c->w[i].pk); free(c->w[i].pres); free(c->w[i].ologp);
        scdb_kv_cache_free(&c->w[i].pcache);
    }
    free(c->w);
    c->w = NULL;
    c->nw = 0;
}

/* Cut `want` windows spread evenly over text; run producer (capture) and
 * oracle (timed).  oracle acc gets the oracle's own quality. */
static scdb_err make_windows(ctx *c, const unsigned char *text, size_t len, int want, acc *oracle)
{
    int need = c->P + c->C + 1;
    scdb_err rc = SCDB_OK;
    if (len < (size_t)need) return SCDB_EINVAL;
    size_t span = len - (size_t)need;
    int maxw = (int)(len / (size_t)need);
    if (want > maxw) want = maxw;
    c->w = calloc((size_t)want, sizeof *c->w);
    if (!c->w) return SCDB_ENOMEM;
    for (int i = 0; i < want; i++) {
        qwin *w = &c->w[c->nw++];
        size_t off = want > 1 ? span * (size_t)i / (size_t)(want - 1) : 0;
        w->tok = malloc((size_t)need * sizeof *w->tok);
        w->ph = malloc((size_t)c->L * c->P * c->d * sizeof(float));
        w->pk = malloc((size_t)c->L * c->P * c->kv * sizeof(float));
        w->pres = malloc((size_t)(c->L + 1) * c->P * c->d * sizeof(float));
        w->ologp = malloc((size_t)c->C * c->V * sizeof(float));
        if (!w->tok || !w->ph || !w->pk || !w->pres || !w->ologp) return SCDB_ENOMEM;
        scdb_tokenize_bytes(text + off, (size_t)need, w->tok);
        if ((rc = scdb_model_cache_new(c->prod, c->P, &w->pcache))) return rc;
        scdb_capture cap = {.h_in = w->ph, .k_post = w->pk, .resid = w->pres};
        if ((rc = scdb_model_forward(c->prod, w->tok, NULL, c->P, w->pcache, NULL, &cap))) return rc;
        /* oracle quality */
        c->cache->n = 0;
        if ((rc = cforward(c, w->tok, c->P, NULL))) return rc;
        if ((rc = cforward(c, w->tok + c->P, c->C, c->logits))) return rc;
        for (int t = 0; t < c->C; t++)
            scdb_k_log_softmax_cpu(c->logits + (size_t)t * c->V, c->V, w->ologp + (size_t)t * c->V);
        if (oracle) {
            acc_logits(c, w, oracle);
            double best = INFINITY;
            for (int r = 0; r < c->o->reps; r++) {
                double t0 = scdb_now();
                c->cache->n = 0;
                if ((rc = cforward(c, w->tok, c->P, NULL)) ||
                    (rc = cforward(c, w->tok + c->P, 1, c->logits)))
                    return rc;
                double ms = (scdb_now() - t0) * 1e3;
                if (ms < best) best = ms;
            }
            w->oracle_ms = best;
            if (acc_ms(oracle, best)) return SCDB_ENOMEM;
        }
        if (c->o->verbose) fprintf(stderr, "\r  windows: %d/%d", c->nw, want);
    }
    if (c->o->verbose) fprintf(stderr, "\n");
    return SCDB_OK;
}

static scdb_err encode_window(const scdb_codebook *cb, const ctx *c, const qwin *w, uint16_t *codes)
{
    scdb_codec_states st = {.h_in = w->ph, .k_post = w->pk};
    return scdb_codec_encode(cb, &st, c->P, codes);
}

/* scd over all windows for (cb, p, n_patch) -> acc (quality only) */
static scdb_err eval_scd(ctx *c, const scdb_codebook *cb, const scdb_pair *p, int n_patch, acc *a,
                         int timed)
{
    scdarg s = {.cb = cb, .p = p, .n_patch = n_patch};
    scdb_err rc = scdb_pair_dev_new(p, c->dev, &s.pd);
    if (rc) return rc;
    s.codes = malloc((scdb_codec_codes_len(scdb_codebook_get_info(cb), c->P) + 1) * sizeof(uint16_t));
    if (!s.codes) {
        scdb_pair_dev_free(&s.pd);
        return SCDB_ENOMEM;
    }
    for (int i = 0; i < c->nw && !rc; i++) {
        if ((rc = encode_window(cb, c, &c->w[i], s.codes))) break;
        rc = run_method(c, &c->w[i], b_scd, &s, a, timed);
    }
    free(s.codes);
    scdb_pair_dev_free(&s.pd);
    return rc;
}

/* ------------------------------------------------------------ output */

static cJSON *row(const char *consumer, const char *method, const acc *a, double bytes)
{
    cJSON *r = cJSON_CreateObject();
    double ms[1] = {NAN};
    double *copy = a->nms ? malloc((size_t)a->nms * sizeof *copy) : NULL;
    if (copy) { memcpy(copy, a->ms, (size_t)a->nms * sizeof *copy); ms[0] = scdb_bench_median(copy, (size_t)a->nms); }
    free(copy);
    cJSON_AddStringToObject(r, "consumer", consumer);
    cJSON_AddStringToObject(r, "method", method);
    cJSON_AddNumberToObject(r, "ppl", exp(a->nll / (double)a->n));
    cJSON_AddNumberToObject(r, "kl", a->kl / (double)a->n);
    cJSON_AddNumberToObject(r, "top1", a->agree / (double)a->n);
    cJSON_AddNumberToObject(r, "bytes_per_token", bytes);
    if (a->nms) cJSON_AddNumberToObject(r, "ttft_ms", ms[0]);
    else cJSON_AddNullToObject(r, "ttft_ms");
    cJSON_AddNumberToObject(r, "predictions", (double)a->n);
    return r;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench quality [--text FILE] [--json FILE] [--png FILE] [--prefix N]\n"
"                          [--cont N] [--windows N] [--reps N] [--ds-layers G]\n"
"                          [--no-ablations] [--ablation-windows N] [--data DIR]\n"
"                          [--models DIR] [--artifacts DIR] [--producer NAME]\n"
"                          [--device D] [-q]\n\n"
"SCD quality table: oracle, raw, quant4, droidspeak, scd_reuse, scd_full for every\n"
"calibrated pair (DIR/pairs/<producer>__<consumer>.safetensors), on windows of the\n"
"SECOND half of each consumer's held-out text (or --text FILE for all consumers).\n"
"  --prefix N (384, >= 1)  --cont N (64)  --windows N (8 per consumer)\n"
"  --reps N   timing repetitions, best kept (3)\n"
"  --ds-layers G  layers DroidSpeak recomputes (2)\n"
"  --data DIR  assets (default $SCDB_DATA, else ../share/scdb beside scdb); --models and\n"
"              --artifacts (codebooks/, pairs/) override its parts\n"
"  --png FILE  quality vs payload plot through tools/plot_quality.py (python3 +\n"
"              matplotlib)\n"
"  --device D  auto | cpu | cuda (default auto: CUDA when a device answers).  The\n"
"              consumers, their caches and every method's cache build run there\n"
"              (the producer's capture and encoding on the CPU); on CUDA the TTFT of\n"
"              the non-oracle methods includes uploading their payload\n");
}

static scdb_err choose_droid(ctx *c, const unsigned char *cal, size_t cal_len, int g, int *best_a,
                             cJSON *jds)
{
    /* windows of the held-out first half, end part */
    ctx cc = *c;
    cc.w = NULL;
    cc.nw = 0;
    scdb_err rc;
    size_t need = (size_t)(c->P + c->C + 1) * 4;
    const unsigned char *t = cal_len > need ? cal + cal_len - need : cal;
    if ((rc = make_windows(&cc, t, cal_len > need ? need : cal_len, 4, NULL))) { free_windows(&cc); return rc; }
    dsarg ds = {.g = g, .x = malloc((size_t)c->P * c->d * sizeof(float))};
    if (!ds.x) { free_windows(&cc); return SCDB_ENOMEM; }
    /* (cc shares c's device buffers; the staging one is handed back below) */
    double bkl = INFINITY;
    for (int a = 0; a + g <= c->L; a++) {
        acc ac = {0};
        ds.a = a;
        for (int i = 0; i < cc.nw && !rc; i++) rc = run_method(&cc, &cc.w[i], b_droid, &ds, &ac, 0);
        if (rc) break;
        double kl = ac.kl / ac.n;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "first_layer", a);
        cJSON_AddNumberToObject(e, "kl", kl);
        cJSON_AddItemToArray(jds, e);
        if (kl < bkl) { bkl = kl; *best_a = a; }
    }
    free(ds.x);
    free_windows(&cc);
    c->dscr = cc.dscr;             /* the staging buffer may have grown */
    c->dscr_bytes = cc.dscr_bytes;
    return rc;
}

int scdb_bench_quality(int argc, char **argv)
{
    qopts o = {.prefix = 384, .cont = 64, .windows = 8, .reps = 3, .ds_layers = 2,
               .abl_windows = 48, .ablations = 1, .verbose = 1, .producer = "base"};
    o.data = scdb_data_dir();
    scdb_device_pref dev_pref = SCDB_DEVPREF_AUTO;
    scdb_device dev;
    char why[384];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--text") && more) o.text = argv[++i];
        else if (!strcmp(a, "--json") && more) o.json = argv[++i];
        else if (!strcmp(a, "--png") && more) o.png = argv[++i];
        else if (!strcmp(a, "--prefix") && more) o.prefix = atoi(argv[++i]);
        else if (!strcmp(a, "--cont") && more) o.cont = atoi(argv[++i]);
        else if (!strcmp(a, "--windows") && more) o.windows = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && more) o.reps = atoi(argv[++i]);
        else if (!strcmp(a, "--ds-layers") && more) o.ds_layers = atoi(argv[++i]);
        else if (!strcmp(a, "--ablation-windows") && more) o.abl_windows = atoi(argv[++i]);
        else if (!strcmp(a, "--no-ablations")) o.ablations = 0;
        else if (!strcmp(a, "--data") && more) o.data = argv[++i];
        else if (!strcmp(a, "--models") && more) o.models = argv[++i];
        else if (!strcmp(a, "--artifacts") && more) o.artifacts = argv[++i];
        else if (!strcmp(a, "--producer") && more) o.producer = argv[++i];
        else if (!strcmp(a, "-q")) o.verbose = 0;
        else if (!strcmp(a, "--device") && more) {
            if (scdb_device_parse(argv[++i], &dev_pref)) {
                fprintf(stderr, "bench quality: --device wants auto, cpu or cuda, not '%s'\n\n", argv[i]);
                usage(stderr);
                return 2;
            }
        }
        else { fprintf(stderr, "bench quality: unknown or incomplete option '%s'\n\n", a); usage(stderr); return 2; }
    }
    if (o.prefix < 1 || o.cont < 1 || o.windows < 1 || o.reps < 1 || o.ds_layers < 1) {
        usage(stderr);
        return 2;
    }
    if (scdb_device_resolve(dev_pref, &dev, why, sizeof why)) {
        fprintf(stderr, "bench quality: %s\n", why);
        return 1;
    }
    fprintf(stderr, "bench quality: device %s (%s)\n", scdb_device_name(dev), why);
    char models[1024], arts[1024], path[2200], err[512];
    snprintf(models, sizeof models, "%s", o.models ? o.models : "");
    if (!o.models) snprintf(models, sizeof models, "%s/models", o.data);
    snprintf(arts, sizeof arts, "%s", o.artifacts ? o.artifacts : o.data);

    scdb_model *prod = NULL, *cons[MAXC] = {0};
    scdb_codebook *cb = NULL;
    scdb_pair *pairs[MAXC] = {0};
    scdb_calib *cal = NULL;
    char cnames[MAXC][128];
    int nc = 0, ret = 1;
    cJSON *root = cJSON_CreateObject(), *jres = cJSON_AddArrayToObject(root, "results");
    cJSON *jabl = cJSON_AddObjectToObject(root, "ablations");
    cJSON *jcfg = cJSON_AddObjectToObject(root, "config");
    ctx c = {0};
    scdb_err rc;

    snprintf(path, sizeof path, "%s/%s", models, o.producer);
    if ((rc = scdb_model_load(path, &prod, err, sizeof err))) {
        fprintf(stderr, "bench quality: producer %s: %s\n", path, err);
        goto done;
    }
    snprintf(path, sizeof path, "%s/codebooks/%s.safetensors", arts, o.producer);
    if ((rc = scdb_codebook_load(path, &cb, err, sizeof err)) ||
        (rc = scdb_codebook_check_producer(cb, prod, err, sizeof err))) {
        fprintf(stderr, "bench quality: codebook %s: %s (%s); run `scdb calibrate` first\n", path, err,
                scdb_strerror(rc));
        goto done;
    }
    snprintf(path, sizeof path, "%s/pairs", arts);
    DIR *dir = opendir(path);
    if (!dir) { fprintf(stderr, "bench quality: no %s\n", path); goto done; }
    struct dirent *de;
    char names[MAXC][256];
    int nn = 0;
    size_t plen = strlen(o.producer);
    while ((de = readdir(dir)) && nn < MAXC) {
        const char *ext = strstr(de->d_name, ".safetensors");
        if (strncmp(de->d_name, o.producer, plen) || strncmp(de->d_name + plen, "__", 2) || !ext) continue;
        snprintf(names[nn], sizeof names[nn], "%.*s", (int)(ext - de->d_name - plen - 2), de->d_name + plen + 2);
        if (strcmp(names[nn], o.producer)) nn++;
    }
    closedir(dir);
    for (int i = 0; i < nn; i++)       /* stable order */
        for (int k = i + 1; k < nn; k++)
            if (strcmp(names[k], names[i]) < 0) { char t[256]; memcpy(t, names[i], 256); memcpy(names[i], names[k], 256); memcpy(names[k], t, 256); }
    for (int i = 0; i < nn; i++) {
        snprintf(path, sizeof path, "%s/%.120s", models, names[i]);
        if ((rc = scdb_model_load(path, &cons[nc], err, sizeof err))) {
            fprintf(stderr, "bench quality: consumer %s: %s\n", path, err);
            goto done;
        }
        snprintf(path, sizeof path, "%s/pairs/%s__%.120s.safetensors", arts, o.producer, names[i]);
        if ((rc = scdb_pair_load(path, cb, &pairs[nc], err, sizeof err)) ||
            (rc = scdb_pair_check_models(pairs[nc], prod, cons[nc], err, sizeof err))) {
            fprintf(stderr, "bench quality: pair %s: %s (%s)\n", path, err, scdb_strerror(rc));
            goto done;
        }
        snprintf(cnames[nc], sizeof cnames[nc], "%.120s", names[i]);
        nc++;
    }
    if (nc == 0) { fprintf(stderr, "bench quality: no pairs %s__*.safetensors under %s/pairs\n", o.producer, arts); goto done; }

    const scdb_model_config *pc = scdb_model_cfg(prod);
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    c.o = &o;
    c.prod = prod;
    c.dev = dev;
    c.ops = scdb_k_ops_get(dev);
    c.L = pc->n_layers; c.d = pc->d_model; c.kv = scdb_model_kv_dim(pc); c.V = pc->vocab_size;
    c.P = o.prefix; c.C = o.cont;
    if (c.P + c.C > pc->max_seq_len) {
        fprintf(stderr, "bench quality: prefix + cont = %d exceeds the context (%d)\n", c.P + c.C, pc->max_seq_len);
        goto done;
    }
    if (o.ds_layers > c.L) o.ds_layers = c.L;
    c.logits = malloc((size_t)c.C * c.V * sizeof(float));
    c.lp = malloc((size_t)c.V * sizeof(float));
    if (!c.logits || !c.lp) goto done;
    {
        void *dl = NULL;
        if ((rc = c.ops->alloc((size_t)c.C * c.V * sizeof(float), &dl))) goto done;
        c.dlogits = dl;
    }
    double raw_bytes = (double)c.L * 2 * c.kv * 2;
    double q4_bytes = (double)c.L * 2 * (c.kv / 2.0 + 4.0 * c.kv / pc->head_dim);
    double ds_bytes = (double)(c.L - o.ds_layers) * 2 * c.kv * 2 + 2.0 * c.d;
    double scd_bytes = (double)scdb_codebook_token_bytes(cb);

    cJSON_AddStringToObject(jcfg, "producer", o.producer);
    cJSON_AddStringToObject(jcfg, "device", scdb_device_name(dev));
    cJSON_AddStringToObject(jcfg, "device_choice", why);
    cJSON_AddStringToObject(jcfg, "codebook", ci->id_hex);
    cJSON_AddNumberToObject(jcfg, "prefix", c.P);
    cJSON_AddNumberToObject(jcfg, "cont", c.C);
    cJSON_AddNumberToObject(jcfg, "windows_per_consumer", o.windows);
    cJSON_AddNumberToObject(jcfg, "raw_f16_bytes_per_token", raw_bytes);
    cJSON_AddNumberToObject(jcfg, "ds_layers", o.ds_layers);
    cJSON_AddNumberToObject(jcfg, "scd_code_dim", ci->code_dim);
    cJSON_AddStringToObject(jcfg, "scd_decoder_input", scdb_pair_get_info(pairs[0])->all_input ? "all" : "layer");
    cJSON_AddStringToObject(jcfg, "ttft_includes",
                            "oracle: consumer prefill of the prefix + first continuation token; others: "
                            "building the consumer's prefix cache from the in-memory payload (copy, "
                            "dequantise, recompute, SCD decode + patch regeneration) + first token; no "
                            "producer prefill, encode or transfer");
    cJSON_AddStringToObject(jcfg, "quant4", "asymmetric uniform 4-bit, groups of head_dim channels "
                            "(one head of one token), f16 min and scale per group");
    cJSON_AddStringToObject(jcfg, "text", o.text ? o.text : "second half of each consumer's held-out text");
    cJSON *jds = cJSON_AddObjectToObject(jabl, "droidspeak_range");
    cJSON *jpb = cJSON_AddArrayToObject(jabl, "patch_budget");
    cJSON *jgoals = cJSON_AddArrayToObject(root, "goals");

    printf("# SCD quality: producer %s, codebook %s, prefix %d + continuation %d tokens, %d windows per consumer\n\n",
           o.producer, ci->id_hex, c.P, c.C, o.windows);
    printf("| consumer | method | ppl | ppl vs oracle | KL(oracle‖m) | top-1 | bytes/token | vs raw f16 | TTFT ms | TTFT speed-up |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");

    for (int k = 0; k < nc; k++) {
        const scdb_pair_info *pi = scdb_pair_get_info(pairs[k]);
        acc a[M_COUNT] = {{0}};
        unsigned char *text = NULL, *cal_text = NULL;
        size_t tl = 0, cl = 0;
        char desc[600] = "";
        if ((rc = ctx_consumer(&c, cons[k]))) {
            fprintf(stderr, "bench quality: %s on the %s: %s\n", cnames[k], scdb_device_name(dev),
                    scdb_strerror(rc));
            goto done;
        }
        if (o.text) {
            rc = scdb_codec_read_text(o.text, (size_t)1 << 30, &text, &tl);
            snprintf(desc, sizeof desc, "%s", o.text);
        } else {
            rc = scdb_codec_domain_text(cons[k], SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 30, &text, &tl, desc, sizeof desc);
        }
        if (rc) { fprintf(stderr, "bench quality: no evaluation text for %s (%s)\n", cnames[k], scdb_strerror(rc)); goto done; }
        if (o.verbose) fprintf(stderr, "bench quality: %s: %s\n", cnames[k], desc);
        rc = make_windows(&c, text, tl, o.windows, &a[M_ORACLE]);
        free(text);
        if (rc) { fprintf(stderr, "bench quality: %s: windows: %s\n", cnames[k], scdb_strerror(rc)); goto done; }

        /* droidspeak range on the held-out first half */
        int ds_a = 0;
        if ((rc = scdb_codec_domain_text(cons[k], SCDB_TEXT_HELDOUT_FIRST, (size_t)1 << 30, &cal_text, &cl, NULL, 0)) == SCDB_OK) {
            cJSON *arr = cJSON_AddArrayToObject(jds, cnames[k]);
            rc = choose_droid(&c, cal_text, cl, o.ds_layers, &ds_a, arr);
            free(cal_text);
            if (rc) goto done;
        }
        if (o.verbose) fprintf(stderr, "  droidspeak: recompute layers %d..%d\n", ds_a, ds_a + o.ds_layers - 1);

        /* producer-side payloads, then each method */
        size_t n = (size_t)c.P * c.kv;
        int g = pc->head_dim;
        q4set qs;
        for (int t = 0; t < 2; t++) {
            qs.q[t] = malloc((size_t)c.L * n / 2 + 1);
            qs.ms[t] = malloc((size_t)c.L * (n / g) * 2 * sizeof(uint16_t) + 2);
        }
        dsarg ds = {.a = ds_a, .g = o.ds_layers, .x = malloc((size_t)c.P * c.d * sizeof(float))};
        if (!qs.q[0] || !qs.q[1] || !qs.ms[0] || !qs.ms[1] || !ds.x) goto done;
        for (int i = 0; i < c.nw && !rc; i++) {
            qwin *w = &c.w[i];
            for (int l = 0; l < c.L; l++) {
                /* g = head_dim: even, divides n (the kernel's requirements) */
                scdb_k_q4_encode_cpu(scdb_kv_k(w->pcache, l, 0), n, g, qs.q[0] + l * n / 2,
                                     qs.ms[0] + 2 * (l * n / g));
                scdb_k_q4_encode_cpu(scdb_kv_v(w->pcache, l, 0), n, g, qs.q[1] + l * n / 2,
                                     qs.ms[1] + 2 * (l * n / g));
            }
            if ((rc = run_method(&c, w, b_raw, NULL, &a[M_RAW], 1)) ||
                (rc = run_method(&c, w, b_quant4, &qs, &a[M_QUANT4], 1)) ||
                (rc = run_method(&c, w, b_droid, &ds, &a[M_DROID], 1)))
                break;
        }
        for (int t = 0; t < 2; t++) { free(qs.q[t]); free(qs.ms[t]); }
        free(ds.x);
        if (rc) goto done;
        if ((rc = eval_scd(&c, cb, pairs[k], 0, &a[M_REUSE], 1)) ||
            (rc = eval_scd(&c, cb, pairs[k], -1, &a[M_FULL], 1)))
            goto done;
        double bytes[M_COUNT] = {0, raw_bytes, q4_bytes, ds_bytes, scd_bytes, scd_bytes};
        cJSON *rows[M_COUNT];
        for (int m = 0; m < M_COUNT; m++) {
            rows[m] = row(cnames[k], MNAME[m], &a[m], bytes[m]);
            if (m == M_DROID) cJSON_AddNumberToObject(rows[m], "ds_first_layer", ds_a);
            if (m == M_FULL) cJSON_AddNumberToObject(rows[m], "patch_layers", pi->n_patch);
            cJSON_AddItemToArray(jres, rows[m]);
        }
        double oppl = jnum(rows[M_ORACLE], "ppl"), ottft = jnum(rows[M_ORACLE], "ttft_ms");
        for (int m = 0; m < M_COUNT; m++) {
            double ppl = jnum(rows[m], "ppl"), tt = jnum(rows[m], "ttft_ms");
            char bb[32] = "—", vr[32] = "—";
            if (m != M_ORACLE) { snprintf(bb, sizeof bb, "%.0f", bytes[m]); snprintf(vr, sizeof vr, "1/%.1f", raw_bytes / bytes[m]); }
            printf("| %s | %s | %.3f | %+.1f%% | %.4f | %.3f | %s | %s | %.2f | %.1fx |\n", cnames[k],
                   MNAME[m], ppl, 100.0 * (ppl / oppl - 1.0), jnum(rows[m], "kl"),
                   jnum(rows[m], "top1"), bb, vr, tt, ottft / tt);
        }
        /* goals */
        {
            double fppl = jnum(rows[M_FULL], "ppl"), ft1 = jnum(rows[M_FULL], "top1");
            double fkl = jnum(rows[M_FULL], "kl");
            cJSON *gg = cJSON_CreateObject();
            cJSON_AddStringToObject(gg, "consumer", cnames[k]);
            cJSON_AddNumberToObject(gg, "scd_full_ppl_vs_oracle", fppl / oppl - 1.0);
            cJSON_AddBoolToObject(gg, "ppl_within_5pct", fppl <= 1.05 * oppl);
            cJSON_AddNumberToObject(gg, "scd_full_top1", ft1);
            cJSON_AddBoolToObject(gg, "top1_ge_95pct", ft1 >= 0.95);
            cJSON_AddNumberToObject(gg, "payload_fraction_of_raw", scd_bytes / raw_bytes);
            cJSON_AddBoolToObject(gg, "payload_le_1_8", scd_bytes <= raw_bytes / 8);
            cJSON_AddNumberToObject(gg, "raw_ppl_vs_oracle", jnum(rows[M_RAW], "ppl") / oppl - 1.0);
            int beats = 1;
            for (int m = M_RAW; m < M_FULL; m++)
                if (m != M_RAW && !(fkl < jnum(rows[m], "kl") && scd_bytes <= bytes[m])) beats = 0;
            cJSON_AddBoolToObject(gg, "full_dominates_reuse_quant4_droidspeak", beats);
            cJSON_AddNumberToObject(gg, "ttft_speedup", ottft / jnum(rows[M_FULL], "ttft_ms"));
            cJSON_AddBoolToObject(gg, "ttft_speedup_ge_2_65", ottft / jnum(rows[M_FULL], "ttft_ms") >= 2.65);
            cJSON_AddItemToArray(jgoals, gg);
        }
        /* patch budget sweep */
        for (int b = 0; b <= pi->n_aligners; b++) {
            acc ab = {0};
            if ((rc = eval_scd(&c, cb, pairs[k], b, &ab, 0))) goto done;
            cJSON *e = row(cnames[k], "scd", &ab, scd_bytes);
            cJSON_AddNumberToObject(e, "patch_layers", b);
            cJSON_AddItemToArray(jpb, e);
            acc_free(&ab);
        }
        for (int m = 0; m < M_COUNT; m++) acc_free(&a[m]);
        free_windows(&c);
        fflush(stdout);
    }

    printf("\npayload: raw = f16 K+V of %d layers x %d channels; quant4 = 4-bit + f16 (min, scale) per %d values; "
           "droidspeak = f16 KV of the %d reused layers + the f16 residual entering the first recomputed layer; "
           "SCD = %d f16 codes per token.\n",
           c.L, 2 * c.kv, pc->head_dim, c.L - o.ds_layers, ci->code_dim);
    printf("TTFT: oracle = consumer prefill + first token; others = cache build from the payload in memory + first token "
           "(no producer prefill, encode or transfer). Best of %d runs, median over windows.\n", o.reps);

    printf("\n## Patch budget sweep (scd, shipped pairs)\n\n| consumer | patch layers | ppl | KL | top-1 |\n|---|---|---|---|---|\n");
    for (int i = 0; i < cJSON_GetArraySize(jpb); i++) {
        cJSON *e = cJSON_GetArrayItem(jpb, i);
        printf("| %s | %d | %.3f | %.4f | %.3f |\n", cJSON_GetObjectItem(e, "consumer")->valuestring,
               (int)jnum(e, "patch_layers"), jnum(e, "ppl"), jnum(e, "kl"), jnum(e, "top1"));
    }

    if (o.ablations) {
        /* in-process calibration on all consumers; evaluated on the last
         * consumer's windows (still in c) and each consumer's own windows */
        scdb_calib_opts co = {.window = 384, .n_eval = 1, .sample_stride = 2, .verbose = 0};
        if (o.verbose) fprintf(stderr, "bench quality: ablation calibration (%d windows)\n", o.abl_windows);
        if ((rc = scdb_calib_new(prod, (const scdb_model *const *)cons, nc, &co, &cal))) goto done;
        if (dev != SCDB_DEV_CPU && (rc = scdb_calib_set_device(cal, dev))) goto done;
        const scdb_model *dm[MAXC + 1];
        int nd = 0;
        const scdb_model *all[MAXC + 1];
        all[0] = prod;
        for (int i = 0; i < nc; i++) all[i + 1] = cons[i];
        for (int i = 0; i <= nc; i++) {
            int dup = 0;
            for (int q = 0; q < nd; q++) dup |= !strcmp(scdb_model_cfg(dm[q])->domain, scdb_model_cfg(all[i])->domain);
            if (!dup) dm[nd++] = all[i];
        }
        char srcdesc[2048] = "";
        for (int q = 0; q < nd; q++) {
            unsigned char *t;
            size_t len;
            char desc[600];
            int per = (o.abl_windows + nd - 1) / nd, added;
            if (scdb_codec_domain_text(dm[q], SCDB_TEXT_AUTO, (size_t)per * 384 + 384, &t, &len, desc, sizeof desc)) continue;
            rc = scdb_calib_add_text(cal, t, len, per, &added);
            free(t);
            if (rc) goto done;
            size_t ol = strlen(srcdesc);
            snprintf(srcdesc + ol, sizeof srcdesc - ol, "%s%s", ol ? "; " : "", desc);
        }
        cJSON_AddStringToObject(jabl, "calibration_text", srcdesc);
        int tok0 = ci->layers[0].kind == SCDB_CB_TOKENS;
        int rk0 = 0, rv0 = 0;
        for (int l = 0; l < c.L; l++)
            if (ci->layers[l].kind == SCDB_CB_CODED && ci->layers[l].r_k > 0) { rk0 = ci->layers[l].r_k; rv0 = ci->layers[l].r_v; break; }
        if (!rk0) { rk0 = 4; rv0 = 8; }
        int all0 = scdb_pair_get_info(pairs[0])->all_input;
        typedef struct { const char *group; int rk, rv, pca, post, tok, all; } abl_cfg;
        abl_cfg cfgs[32];
        int ncfg = 0;
        int sweep[] = {2, 4, 8, 16, 32};
        for (int i = 0; i < 5; i++) cfgs[ncfg++] = (abl_cfg){"rank_k", sweep[i], rv0, 0, 0, tok0, all0};
        for (int i = 0; i < 5; i++) cfgs[ncfg++] = (abl_cfg){"rank_v", rk0, sweep[i], 0, 0, tok0, all0};
        cfgs[ncfg++] = (abl_cfg){"decoder_input", rk0, rv0, 0, 0, tok0, !all0};
        cfgs[ncfg++] = (abl_cfg){"decoder_input", rk0, rv0, 0, 0, tok0, all0};
        cfgs[ncfg++] = (abl_cfg){"encoder", rk0, rv0, 1, 0, tok0, all0};
        cfgs[ncfg++] = (abl_cfg){"encoder", rk0, rv0, 0, 0, tok0, all0};
        /* post-RoPE K codes: K samples are not kept, so layer-input decoders */
        cfgs[ncfg++] = (abl_cfg){"k_space", rk0, rv0, 0, 1, tok0, 0};
        cfgs[ncfg++] = (abl_cfg){"k_space", rk0, rv0, 0, 0, tok0, 0};
        cfgs[ncfg++] = (abl_cfg){"token_layer0", rk0, rv0, 0, 0, !tok0, all0};
        cfgs[ncfg++] = (abl_cfg){"token_layer0", rk0, rv0, 0, 0, tok0, all0};
        printf("\n## Ablations (REUSE only; in-process calibration, %d windows; consumer windows as above)\n\n", scdb_calib_windows(cal));
        printf("| group | consumer | r_K | r_V | encoder | K coded | layer 0 | decoder input | bytes/token | ppl | KL | top-1 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        /* evaluate each consumer on fresh windows (the main ones were freed) */
        for (int k = 0; k < nc; k++) {
            {
                unsigned char *text = NULL;
                size_t tl = 0;
                free_windows(&c);
                if ((rc = ctx_consumer(&c, cons[k]))) goto done;
                rc = o.text ? scdb_codec_read_text(o.text, (size_t)1 << 30, &text, &tl)
                            : scdb_codec_domain_text(cons[k], SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 30, &text, &tl, NULL, 0);
                if (rc) goto done;
                rc = make_windows(&c, text, tl, o.windows, NULL);
                free(text);
                if (rc) goto done;
            }
            for (int q = 0; q < ncfg; q++) {
                scdb_cb_fit f = {.r_k = cfgs[q].rk, .r_v = cfgs[q].rv, .pca = cfgs[q].pca,
                                 .k_post_rope = cfgs[q].post, .token_layer0 = cfgs[q].tok};
                scdb_codebook *acb = NULL;
                scdb_pair *ap = NULL;
                scdb_pair_fit pf = {.no_train = 1, .all_layers = cfgs[q].all};
                acc ab = {0};
                if (f.r_k > (f.k_post_rope ? c.kv : c.d) || f.r_k > c.kv || f.r_v > c.kv) continue;
                if ((rc = scdb_calib_fit_codebook(cal, &f, &acb)) ||
                    (rc = scdb_calib_fit_pair(cal, acb, k, &pf, &ap)) ||
                    (rc = eval_scd(&c, acb, ap, 0, &ab, 0))) {
                    scdb_codebook_free(&acb);
                    scdb_pair_free(&ap);
                    goto done;
                }
                double by = (double)scdb_codebook_token_bytes(acb);
                cJSON *arr = cJSON_GetObjectItemCaseSensitive(jabl, cfgs[q].group);
                if (!arr) arr = cJSON_AddArrayToObject(jabl, cfgs[q].group);
                cJSON *e = row(cnames[k], "scd_reuse", &ab, by);
                cJSON_AddNumberToObject(e, "r_k", f.r_k);
                cJSON_AddNumberToObject(e, "r_v", f.r_v);
                cJSON_AddStringToObject(e, "encoder", f.pca ? "pca" : "rrr");
                cJSON_AddStringToObject(e, "k_space", f.k_post_rope ? "post_rope" : "pre_rope");
                cJSON_AddBoolToObject(e, "token_layer0", f.token_layer0);
                cJSON_AddStringToObject(e, "decoder_input", cfgs[q].all ? "all" : "layer");
                cJSON_AddItemToArray(arr, e);
                printf("| %s | %s | %d | %d | %s | %s | %s | %s | %.0f | %.3f | %.4f | %.3f |\n", cfgs[q].group,
                       cnames[k], f.r_k, f.r_v, f.pca ? "pca" : "rrr", f.k_post_rope ? "post-RoPE" : "pre-RoPE",
                       f.token_layer0 ? "tokens" : "coded", cfgs[q].all ? "all layers" : "own layer", by,
                       jnum(e, "ppl"), jnum(e, "kl"), jnum(e, "top1"));
                fflush(stdout);
                scdb_codebook_free(&acb);
                scdb_pair_free(&ap);
            }
        }
    }

    printf("\n## Goals (measured)\n\n");
    for (int i = 0; i < cJSON_GetArraySize(jgoals); i++) {
        cJSON *g = cJSON_GetArrayItem(jgoals, i);
        printf("- %s: scd_full ppl %+.1f%% vs oracle (goal <= +5%%: %s), top-1 %.3f (goal >= 0.95: %s), payload 1/%.1f of raw "
               "(goal <= 1/8: %s), raw reuse %+.1f%%, dominates scd_reuse/quant4/droidspeak on KL at <= payload: %s, "
               "TTFT speed-up %.1fx (goal >= 2.65x: %s)\n",
               cJSON_GetObjectItem(g, "consumer")->valuestring, 100 * jnum(g, "scd_full_ppl_vs_oracle"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "ppl_within_5pct")) ? "yes" : "NO", jnum(g, "scd_full_top1"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "top1_ge_95pct")) ? "yes" : "NO",
               1.0 / jnum(g, "payload_fraction_of_raw"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "payload_le_1_8")) ? "yes" : "NO",
               100 * jnum(g, "raw_ppl_vs_oracle"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "full_dominates_reuse_quant4_droidspeak")) ? "yes" : "NO",
               jnum(g, "ttft_speedup"), cJSON_IsTrue(cJSON_GetObjectItem(g, "ttft_speedup_ge_2_65")) ? "yes" : "NO");
    }

    char tmpjson[256] = "";
    const char *jpath = o.json;
    if (!jpath && o.png) {
        snprintf(tmpjson, sizeof tmpjson, "/tmp/scdb_bench_quality_%d.json", (int)getpid());
        jpath = tmpjson;
    }
    if (jpath) {
        if (scdb_bench_write_json(jpath, root, "bench quality")) goto done;
        if (o.json) fprintf(stderr, "bench quality: wrote %s\n", o.json);
    }
    if (o.png) {
        char script[1200], cmd[4096];
        struct stat sb;
        snprintf(script, sizeof script, "%s/tools/plot_quality.py", scdb_share_dir());
        if (stat(script, &sb) || stat("/usr/bin/python3", &sb)) {
            fprintf(stderr, "bench quality: no PNG: %s or /usr/bin/python3 is missing\n", script);
        } else {
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, jpath, o.png);
            if (system(cmd) != 0) fprintf(stderr, "bench quality: no PNG: plot_quality.py failed (matplotlib missing?)\n");
            else fprintf(stderr, "bench quality: wrote %s\n", o.png);
        }
        if (tmpjson[0]) unlink(tmpjson);
    }
    ret = 0;
done:
    free_windows(&c);
    scdb_model_dev_cache_free(c.cd, &c.cache);
    scdb_model_dev_free(&c.cd);
    if (c.ops) {
        c.ops->release(c.dlogits);
        c.ops->release(c.dscr);
    }
    free(c.logits);
    free(c.lp);
    scdb_calib_free(&cal);
    for (int i = 0; i < MAXC; i++) { scdb_pair_free(&pairs[i]); scdb_model_free(&cons[i]); }
    scdb_codebook_free(&cb);
    scdb_model_free(&prod);
    cJSON_Delete(root);
    return ret;
}
