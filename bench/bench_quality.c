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
 *               (both twice: f16 codes and int8 codes with an f16 scale per
 *               token and coded layer, JSON "codes_dtype")
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
 * aligners of the shipped pair, f16 and int8 codes, with the decode time of
 * each budget; and on an in-process calibration (statistics
 * from the family's training files, else the held-out first half) REUSE-only
 * codebooks with r_K and r_V varied separately, PCA vs reduced-rank
 * regression, post- vs pre-RoPE K coding, layer 0 coded vs regenerated
 * from tokens.
 *
 * --sweep (JSON "sweep"): the rate knob -- payload vs quality over code
 * dtype (f16, int8), ranks (in-process calibrations at --sweep-ranks, with
 * the shipped codebook's patch candidates, aligners and greedy patch order)
 * and patch budget (0..all), so an operator can pick a point; the points
 * meeting the int8 goals on every consumer are listed.
 *
 * Every SCD row carries "codes_dtype" ("f16", "int8"; null for the other
 * methods) and "late_added" (the pair was fitted later against the frozen
 * codebook, `scdb calibrate --codebook`: scdb_pair_info.late_added). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
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
enum { M_ORACLE, M_RAW, M_QUANT4, M_DROID, M_REUSE, M_FULL, M_REUSE8, M_FULL8, M_COUNT };
static const char *MNAME[M_COUNT] = {"oracle", "raw", "quant4", "droidspeak", "scd_reuse", "scd_full",
                                     "scd_reuse", "scd_full"};
/* code dtype of each method's payload (NULL: not SCD codes) */
static const char *MCODES[M_COUNT] = {NULL, NULL, NULL, NULL, "f16", "f16", "int8", "int8"};

#define MAXRANKS 8

typedef struct qopts {
    const char *data, *models, *artifacts, *producer, *text, *json, *png;
    const char *baseline;        /* --baseline DIR: another codebook + pairs, compared */
    int budgets;                 /* the patch budget sweep (0: --no-patch-sweep) */
    int prefix, cont, windows, reps, ds_layers, abl_windows, ablations, verbose;
    int sweep, sweep_windows, sweep_steps, n_ranks;
    int ranks[MAXRANKS][3];      /* --sweep-ranks: r_K, r_V, r_H per point */
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
    void *codes;            /* per window: filled before timing */
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
    scdb_progress prog;
    scdb_progress_begin(&prog, c->o->verbose ? stderr : NULL, want);
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
        scdb_progress_step(&prog, c->nw, "  windows: %d/%d", c->nw, want);
    }
    scdb_progress_end(&prog);
    return SCDB_OK;
}

static scdb_err encode_window(const scdb_codebook *cb, const ctx *c, const qwin *w, void *codes)
{
    scdb_codec_states st = {.h_in = w->ph, .k_post = w->pk};
    return scdb_codec_encode(cb, &st, c->P, codes);
}

/* scd over all windows for (cb with code dtype dt, p, n_patch) -> acc
 * (quality; TTFT when timed).  cb is left with f16 codes. */
static scdb_err eval_scd(ctx *c, scdb_codebook *cb, scdb_code_dtype dt, const scdb_pair *p,
                         int n_patch, acc *a, int timed)
{
    scdarg s = {.cb = cb, .p = p, .n_patch = n_patch};
    scdb_err rc = scdb_codebook_set_code_dtype(cb, dt);
    if (rc) return rc;
    if ((rc = scdb_pair_dev_new(p, c->dev, &s.pd))) return rc;
    s.codes = malloc(scdb_codec_payload_bytes(cb, c->P) + 16);
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
    scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16);
    return rc;
}

/* Decode time of the prefix at every (code dtype, patch budget) of a pair,
 * interleaved: in each of --reps rounds every window is decoded at every
 * point in turn, so a load burst on a shared machine falls on all points
 * alike; per point the best round of each window, median over windows.
 * ms[dt][b] for dt = f16, int8 and b = 0 .. n_aligners.  cb is left with
 * f16 codes. */
static scdb_err time_budgets(ctx *c, scdb_codebook *cb, const scdb_pair *p,
                             double ms[2][SCDB_CODEC_MAX_LAYERS + 1])
{
    int nb = scdb_pair_get_info(p)->n_aligners + 1, nw = c->nw;
    scdarg s = {.cb = cb, .p = p};
    unsigned char *codes[2] = {NULL, NULL};
    size_t pb[2];
    double *best = malloc(sizeof *best * 2 * (size_t)nb * (size_t)nw + 1);
    scdb_err rc;

    if (!best) return SCDB_ENOMEM;
    if ((rc = scdb_pair_dev_new(p, c->dev, &s.pd))) { free(best); return rc; }
    for (int dt = 0; dt < 2 && !rc; dt++) {
        scdb_codebook_set_code_dtype(cb, (scdb_code_dtype)dt);
        pb[dt] = scdb_codec_payload_bytes(cb, c->P);
        if (!(codes[dt] = malloc(pb[dt] * (size_t)nw + 16))) { rc = SCDB_ENOMEM; break; }
        for (int i = 0; i < nw && !rc; i++) rc = encode_window(cb, c, &c->w[i], codes[dt] + pb[dt] * i);
    }
    for (size_t i = 0; i < 2 * (size_t)nb * (size_t)nw; i++) best[i] = INFINITY;
    for (int r = 0; r < c->o->reps && !rc; r++)
        for (int i = 0; i < nw && !rc; i++)
            for (int dt = 0; dt < 2 && !rc; dt++) {
                scdb_codebook_set_code_dtype(cb, (scdb_code_dtype)dt);
                s.codes = codes[dt] + pb[dt] * i;
                for (int b = 0; b < nb && !rc; b++) {
                    double t0 = scdb_now(), *x = &best[((size_t)dt * nb + b) * nw + i];
                    s.n_patch = b;
                    c->cache->n = 0;
                    rc = b_scd(c, &c->w[i], &s);          /* synchronous on every device */
                    double t = (scdb_now() - t0) * 1e3;
                    if (t < *x) *x = t;
                }
            }
    for (int dt = 0; dt < 2; dt++)
        for (int b = 0; b < nb; b++)
            ms[dt][b] = rc ? NAN : scdb_bench_median(&best[((size_t)dt * nb + b) * nw], (size_t)nw);
    scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16);
    free(codes[0]);
    free(codes[1]);
    free(best);
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

/* The fields every row gains: the code dtype ("f16", "int8"; null: not SCD
 * codes) and whether the consumer's pair was added later (late_added). */
static cJSON *row_tag(cJSON *r, const char *codes, int late_added)
{
    if (codes) cJSON_AddStringToObject(r, "codes_dtype", codes);
    else cJSON_AddNullToObject(r, "codes_dtype");
    cJSON_AddBoolToObject(r, "late_added", late_added);
    return r;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
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

/* ------------------------------------------------------------ the rate sweep */

typedef struct sweep_in {
    const scdb_model *prod;
    scdb_model *const *cons;
    char (*cnames)[128];
    const int *late;
    int nc;
    const scdb_codebook_info *ci;   /* the shipped codebook: candidates, layer 0 */
    int all_input;                  /* the shipped pairs' decoder input */
    double raw_bytes;
} sweep_in;

/* Statistics windows for cal, `windows` in all, split over the distinct
 * domains of prod and cons[0..n) (training files, else the held-out first
 * half); the texts' descriptions, "; "-separated, into desc (NULL: none). */
static scdb_err add_domain_texts(scdb_calib *cal, const scdb_model *prod, scdb_model *const *cons, int n,
                                 int windows, char *desc, size_t desc_len)
{
    const scdb_model *dm[MAXC + 1], *all[MAXC + 1];
    int nd = 0;

    all[0] = prod;
    for (int i = 0; i < n; i++) all[i + 1] = cons[i];
    for (int i = 0; i <= n; i++) {
        int dup = 0;
        for (int q = 0; q < nd; q++) dup |= !strcmp(scdb_model_cfg(dm[q])->domain, scdb_model_cfg(all[i])->domain);
        if (!dup) dm[nd++] = all[i];
    }
    if (desc && desc_len) desc[0] = 0;
    for (int q = 0; q < nd; q++) {
        unsigned char *t;
        size_t len;
        char d[600];
        int per = (windows + nd - 1) / nd, added;
        scdb_err rc;
        if (scdb_codec_domain_text(dm[q], SCDB_TEXT_AUTO, (size_t)per * 384 + 384, &t, &len, d, sizeof d)) continue;
        rc = scdb_calib_add_text(cal, t, len, per, &added);
        free(t);
        if (rc) return rc;
        if (desc && desc_len) {
            size_t ol = strlen(desc);
            snprintf(desc + ol, desc_len - ol, "%s%s", ol ? "; " : "", d);
        }
    }
    return SCDB_OK;
}

/* A calibration session over cons[0..n) as `scdb calibrate` makes one:
 * statistics windows split over the distinct domains (training files, else
 * the held-out first half), 6 held-back KL windows per consumer from the
 * end of its held-out first half (greedy patch order). */
static scdb_err sweep_session(const qopts *o, const scdb_model *prod, scdb_model *const *cons, int n,
                              scdb_device dev, scdb_calib **out)
{
    scdb_calib_opts co = {.window = 384, .n_eval = 6, .verbose = 0};
    scdb_calib *cal = NULL;
    int need = 320 + 64 + 1;
    scdb_err rc;

    if ((rc = scdb_calib_new(prod, (const scdb_model *const *)cons, n, &co, &cal))) return rc;
    if (dev != SCDB_DEV_CPU && (rc = scdb_calib_set_device(cal, dev))) goto fail;
    for (int i = 0; i < n; i++) {
        unsigned char *t;
        size_t len, span = 6 * (size_t)need;
        if ((rc = scdb_codec_domain_text(cons[i], SCDB_TEXT_HELDOUT_FIRST, (size_t)1 << 30, &t, &len,
                                         NULL, 0)))
            goto fail;
        for (int k = 0; k < 6 && !rc && len >= 2 * span; k++)
            rc = scdb_calib_add_eval(cal, i, t + len - span + (size_t)k * need, (size_t)need);
        free(t);
        if (rc) goto fail;
    }
    if ((rc = add_domain_texts(cal, prod, cons, n, o->sweep_windows, NULL, 0))) goto fail;
    *out = cal;
    return SCDB_OK;
fail:
    scdb_calib_free(&cal);
    return rc;
}

static void sweep_print(const cJSON *e)
{
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(e, "codebook");
    printf("| %s | %s | %s | %d%s | %.0f | 1/%.1f | %.3f | %+.1f%% | %.4f | %.3f | %.2f |\n",
           cJSON_GetObjectItem(e, "consumer")->valuestring, cJSON_IsString(cb) ? cb->valuestring : "?",
           cJSON_GetObjectItem(e, "codes_dtype")->valuestring, (int)jnum(e, "patch_layers"),
           cJSON_IsTrue(cJSON_GetObjectItem(e, "default_patch")) ? " (default)" : "",
           jnum(e, "bytes_per_token"), jnum(e, "raw_f16_bytes_per_token") / jnum(e, "bytes_per_token"),
           jnum(e, "ppl"), 100 * jnum(e, "ppl_vs_oracle"), jnum(e, "kl"), jnum(e, "top1"),
           jnum(e, "decode_ms"));
    fflush(stdout);
}

/* Fit a codebook per rank point (the shipped one's candidates and layer 0)
 * and, per consumer, its pair (aligners, greedy order); evaluate every
 * (codes dtype, patch budget) on the consumer's windows.  Rows go to
 * jsweep (which already holds the shipped codebook's, from the patch
 * budget sweep). */
static scdb_err run_sweep(ctx *c, const sweep_in *in, cJSON *jsweep)
{
    const qopts *o = c->o;
    scdb_calib *cal = NULL, *cal_late = NULL;
    scdb_codebook *cbs[MAXRANKS] = {0};
    double t0 = scdb_now();
    scdb_err rc;

    /* as the fleet has it: codebooks fitted with the jointly fitted
     * consumers, late-added ones (their shipped pair's late_added) fitted
     * afterwards against the frozen codebooks in a session of their own */
    scdb_model *joint[MAXC], *later[MAXC];
    int nj = 0, nl = 0, at[MAXC];
    for (int k = 0; k < in->nc; k++) {
        if (in->late[k]) { at[k] = nl; later[nl++] = in->cons[k]; }
        else { at[k] = nj; joint[nj++] = in->cons[k]; }
    }
    if (!nj) return SCDB_EINVAL;
    fprintf(stderr, "bench quality: sweep: calibration (%d statistics windows, %d rank points, %d Adam "
            "steps per aligner; %d consumers fitted with the codebooks, %d late)\n", o->sweep_windows,
            o->n_ranks, o->sweep_steps, nj, nl);
    if ((rc = sweep_session(o, in->prod, joint, nj, c->dev, &cal))) goto done;
    if (nl && (rc = sweep_session(o, in->prod, later, nl, c->dev, &cal_late))) goto done;
    fprintf(stderr, "bench quality: sweep: %d + %d windows of statistics (%.0f s)\n", scdb_calib_windows(cal),
            cal_late ? scdb_calib_windows(cal_late) : 0, scdb_now() - t0);
    for (int q = 0; q < o->n_ranks; q++) {
        scdb_cb_fit f = {.r_k = o->ranks[q][0], .r_v = o->ranks[q][1], .r_h = o->ranks[q][2],
                         .n_candidates = in->ci->n_candidates, .candidates = in->ci->candidates,
                         .token_layer0 = in->ci->layers[0].kind == SCDB_CB_TOKENS};
        if ((rc = scdb_calib_fit_codebook(cal, &f, &cbs[q]))) {
            fprintf(stderr, "bench quality: sweep: ranks %d,%d,%d: %s\n", f.r_k, f.r_v, f.r_h, scdb_strerror(rc));
            goto done;
        }
    }
    for (int k = 0; k < in->nc; k++) {
        unsigned char *text = NULL;
        size_t tl = 0;
        acc oracle = {0};
        free_windows(c);
        if ((rc = ctx_consumer(c, in->cons[k]))) goto done;
        rc = o->text ? scdb_codec_read_text(o->text, (size_t)1 << 30, &text, &tl)
                     : scdb_codec_domain_text(in->cons[k], SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 30, &text,
                                              &tl, NULL, 0);
        if (!rc) rc = make_windows(c, text, tl, o->windows, &oracle);
        free(text);
        if (rc) goto done;
        double oppl = exp(oracle.nll / (double)oracle.n);
        acc_free(&oracle);
        for (int q = 0; q < o->n_ranks; q++) {
            scdb_pair *p = NULL;
            scdb_pair_fit pf = {.n_patch = in->ci->n_candidates, .hidden = 128, .steps = o->sweep_steps,
                                .all_layers = in->all_input};
            char name[48];
            snprintf(name, sizeof name, "fit %d,%d,%d", o->ranks[q][0], o->ranks[q][1], o->ranks[q][2]);
            fprintf(stderr, "bench quality: sweep: %s: %s pair (%.0f s)\n", in->cnames[k], name, scdb_now() - t0);
            if ((rc = scdb_calib_fit_pair(in->late[k] ? cal_late : cal, cbs[q], at[k], &pf, &p))) goto done;
            const scdb_pair_info *pi = scdb_pair_get_info(p);
            double tms[2][SCDB_CODEC_MAX_LAYERS + 1];
            rc = time_budgets(c, cbs[q], p, tms);
            for (int dt = SCDB_CODES_F16; dt <= SCDB_CODES_INT8 && !rc; dt++)
                for (int b = 0; b <= pi->n_aligners && !rc; b++) {
                    acc ab = {0};
                    double dms = tms[dt][b];
                    if ((rc = eval_scd(c, cbs[q], (scdb_code_dtype)dt, p, b, &ab, 0))) break;
                    scdb_codebook_set_code_dtype(cbs[q], (scdb_code_dtype)dt);
                    double by = (double)scdb_codebook_token_bytes(cbs[q]);
                    scdb_codebook_set_code_dtype(cbs[q], SCDB_CODES_F16);
                    cJSON *e = row(in->cnames[k], "scd", &ab, by);
                    acc_free(&ab);
                    row_tag(e, scdb_code_dtype_name((scdb_code_dtype)dt), pi->late_added);
                    cJSON_AddStringToObject(e, "codebook", name);
                    cJSON_AddNumberToObject(e, "r_k", o->ranks[q][0]);
                    cJSON_AddNumberToObject(e, "r_v", o->ranks[q][1]);
                    cJSON_AddNumberToObject(e, "r_h", o->ranks[q][2]);
                    cJSON_AddNumberToObject(e, "patch_layers", b);
                    cJSON_AddBoolToObject(e, "default_patch", b == pi->n_patch);
                    cJSON_AddNumberToObject(e, "decode_ms", dms);
                    cJSON_AddNumberToObject(e, "ppl_vs_oracle", jnum(e, "ppl") / oppl - 1.0);
                    cJSON_AddNumberToObject(e, "raw_f16_bytes_per_token", in->raw_bytes);
                    cJSON_AddItemToArray(jsweep, e);
                    sweep_print(e);
                }
            scdb_pair_free(&p);
            if (rc) goto done;
        }
    }
    fprintf(stderr, "bench quality: sweep done (%.0f s)\n", scdb_now() - t0);
done:
    for (int q = 0; q < MAXRANKS; q++) scdb_codebook_free(&cbs[q]);
    scdb_calib_free(&cal);
    scdb_calib_free(&cal_late);
    return rc;
}

/* The sweep's points (codebook, codes, patch) that meet a goal on every
 * consumer: bytes <= raw / ratio, ppl within ppl_tol of oracle, top-1 >= t1. */
static void sweep_pick(const cJSON *jsweep, int nc, double ratio, double ppl_tol, double t1,
                       const char *codes, cJSON *out)
{
    int n = cJSON_GetArraySize(jsweep);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(jsweep, i);
        const char *cb = cJSON_GetObjectItem(e, "codebook")->valuestring;
        int b = (int)jnum(e, "patch_layers"), seen = 0, ok = 1, first = 1;
        if (strcmp(cJSON_GetObjectItem(e, "codes_dtype")->valuestring, codes)) continue;
        for (int j = 0; j < i && first; j++) {     /* one entry per point */
            const cJSON *f = cJSON_GetArrayItem(jsweep, j);
            if (!strcmp(cJSON_GetObjectItem(f, "codebook")->valuestring, cb) &&
                !strcmp(cJSON_GetObjectItem(f, "codes_dtype")->valuestring, codes) &&
                (int)jnum(f, "patch_layers") == b)
                first = 0;
        }
        if (!first) continue;
        double worst_ppl = -1, worst_t1 = 2;
        for (int j = 0; j < n; j++) {
            const cJSON *f = cJSON_GetArrayItem(jsweep, j);
            if (strcmp(cJSON_GetObjectItem(f, "codebook")->valuestring, cb) ||
                strcmp(cJSON_GetObjectItem(f, "codes_dtype")->valuestring, codes) ||
                (int)jnum(f, "patch_layers") != b)
                continue;
            seen++;
            if (jnum(f, "ppl_vs_oracle") > worst_ppl) worst_ppl = jnum(f, "ppl_vs_oracle");
            if (jnum(f, "top1") < worst_t1) worst_t1 = jnum(f, "top1");
            if (jnum(f, "bytes_per_token") * ratio > jnum(f, "raw_f16_bytes_per_token") ||
                jnum(f, "ppl_vs_oracle") > ppl_tol || jnum(f, "top1") < t1)
                ok = 0;
        }
        if (!ok || seen < nc) continue;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "codebook", cb);
        cJSON_AddStringToObject(p, "codes_dtype", codes);
        cJSON_AddNumberToObject(p, "patch_layers", b);
        cJSON_AddNumberToObject(p, "bytes_per_token", jnum(e, "bytes_per_token"));
        cJSON_AddNumberToObject(p, "worst_ppl_vs_oracle", worst_ppl);
        cJSON_AddNumberToObject(p, "worst_top1", worst_t1);
        cJSON_AddItemToArray(out, p);
    }
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench quality [--text FILE] [--json FILE] [--png FILE] [--prefix N]\n"
"                          [--cont N] [--windows N] [--reps N] [--ds-layers G]\n"
"                          [--no-ablations] [--ablation-windows N] [--sweep]\n"
"                          [--sweep-ranks rK,rV,rH[;...]] [--sweep-windows N]\n"
"                          [--sweep-steps S] [--data DIR] [--models DIR]\n"
"                          [--artifacts DIR] [--producer NAME] [--device D]\n"
"                          [--baseline DIR] [--no-patch-sweep] [-q]\n\n"
"SCD quality table: oracle, raw, quant4, droidspeak, scd_reuse and scd_full (f16 and\n"
"int8 codes) for every calibrated pair (DIR/pairs/<producer>__<consumer>.safetensors),\n"
"on windows of the SECOND half of each consumer's held-out text (or --text FILE for\n"
"all consumers); the patch budget sweep with decode times; ablations.\n"
"  --prefix N (384, >= 1)  --cont N (64)  --windows N (8 per consumer)\n"
"  --reps N   timing repetitions, best kept (3)\n"
"  --ds-layers G  layers DroidSpeak recomputes (2)\n"
"  --sweep    the rate knob: payload vs quality over code dtype (f16, int8), ranks\n"
"             and patch budget, from in-process calibrations (about a minute per\n"
"             rank point and consumer here; progress on stderr)\n"
"  --sweep-ranks L  rank points, ';'-separated r_K,r_V,r_H (default\n"
"             4,8,12;8,10,14;8,12,16)\n"
"  --sweep-windows N  statistics windows of the sweep's calibration (256, as\n"
"             scdb calibrate)\n"
"  --sweep-steps S    Adam steps per aligner in the sweep (1500, as scdb calibrate)\n"
"  --data DIR  assets (default $SCDB_DATA, else ../share/scdb beside scdb); --models and\n"
"              --artifacts (codebooks/, pairs/) override its parts\n"
"  --baseline DIR  compare with another codebook: DIR/codebooks/<producer>.safetensors\n"
"             and DIR/pairs/<producer>__<consumer>.safetensors (e.g. the previous\n"
"             release's); scd full of both on the same windows, f16 and int8 codes,\n"
"             new/old ratios in a table and under \"baseline\" in the JSON\n"
"  --no-patch-sweep  leave out the per-consumer patch budget sweep\n"
"  --png FILE  quality vs payload plot through tools/plot_quality.py (python3 +\n"
"              matplotlib)\n"
"  --device D  auto | cpu | cuda (default auto: CUDA when a device answers).  The\n"
"              consumers, their caches and every method's cache build run there\n"
"              (the producer's capture and encoding on the CPU); on CUDA the TTFT of\n"
"              the non-oracle methods includes uploading their payload\n");
}

/* "a,b,c;d,e,f" -> o->ranks; -1 on a malformed list */
static int parse_ranks(const char *s, qopts *o)
{
    o->n_ranks = 0;
    while (*s) {
        int r[3], used = 0;
        if (o->n_ranks == MAXRANKS || sscanf(s, "%d,%d,%d%n", &r[0], &r[1], &r[2], &used) != 3) return -1;
        if (r[0] < 0 || r[1] < 0 || r[2] < 0 || r[0] + r[1] + r[2] == 0) return -1;
        memcpy(o->ranks[o->n_ranks++], r, sizeof r);
        s += used;
        if (*s == ';') s++;
        else if (*s) return -1;
    }
    return o->n_ranks ? 0 : -1;
}

/* argv -> *o and *pref: -1 to run, else the exit code (0 for --help, 2 for
 * a bad command line, after a message naming the option) */
static int parse_opts(int argc, char **argv, qopts *o, scdb_device_pref *pref)
{
    const char *sweep_ranks = "4,8,12;8,10,14;8,12,16";
    char why[160];

    *o = (qopts){.prefix = 384, .cont = 64, .windows = 8, .reps = 3, .ds_layers = 2,
                 .abl_windows = 48, .ablations = 1, .verbose = 1, .producer = "base",
                 .sweep_windows = 256, .sweep_steps = 1500, .budgets = 1};
    o->data = scdb_data_dir();
    *pref = SCDB_DEVPREF_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        scdb_err bad = SCDB_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--text") && more) o->text = argv[++i];
        else if (!strcmp(a, "--json") && more) o->json = argv[++i];
        else if (!strcmp(a, "--png") && more) o->png = argv[++i];
        else if (!strcmp(a, "--prefix") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->prefix, why, sizeof why);
        else if (!strcmp(a, "--cont") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->cont, why, sizeof why);
        else if (!strcmp(a, "--windows") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->windows, why, sizeof why);
        else if (!strcmp(a, "--reps") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->reps, why, sizeof why);
        else if (!strcmp(a, "--ds-layers") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->ds_layers, why, sizeof why);
        else if (!strcmp(a, "--ablation-windows") && more)
            bad = scdb_parse_int(a, argv[++i], 0, INT_MAX, &o->abl_windows, why, sizeof why);
        else if (!strcmp(a, "--no-ablations")) o->ablations = 0;
        else if (!strcmp(a, "--sweep")) o->sweep = 1;
        else if (!strcmp(a, "--sweep-ranks") && more) sweep_ranks = argv[++i];
        else if (!strcmp(a, "--sweep-windows") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->sweep_windows, why, sizeof why);
        else if (!strcmp(a, "--sweep-steps") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o->sweep_steps, why, sizeof why);
        else if (!strcmp(a, "--data") && more) o->data = argv[++i];
        else if (!strcmp(a, "--models") && more) o->models = argv[++i];
        else if (!strcmp(a, "--artifacts") && more) o->artifacts = argv[++i];
        else if (!strcmp(a, "--baseline") && more) o->baseline = argv[++i];
        else if (!strcmp(a, "--no-patch-sweep")) o->budgets = 0;
        else if (!strcmp(a, "--producer") && more) o->producer = argv[++i];
        else if (!strcmp(a, "-q")) o->verbose = 0;
        else if (!strcmp(a, "--device") && more) {
            if (scdb_device_parse(argv[++i], pref)) {
                fprintf(stderr, "bench quality: --device wants auto, cpu or cuda, not '%s'\n\n", argv[i]);
                usage(stderr);
                return 2;
            }
        }
        else { fprintf(stderr, "bench quality: unknown or incomplete option '%s'\n\n", a); usage(stderr); return 2; }
        if (bad) {
            fprintf(stderr, "bench quality: %s\n\n", why);
            usage(stderr);
            return 2;
        }
    }
    if (parse_ranks(sweep_ranks, o)) {
        fprintf(stderr, "bench quality: --sweep-ranks '%s': want rK,rV,rH[;...]\n\n", sweep_ranks);
        usage(stderr);
        return 2;
    }
    return -1;
}

/* ------------------------------------------------------------ the family */

/* the producer, its codebook, and every consumer with a pair */
typedef struct qfamily {
    scdb_model *prod, *cons[MAXC];
    scdb_codebook *cb;
    scdb_pair *pairs[MAXC];
    char cnames[MAXC][128];
    int late[MAXC];           /* scdb_pair_info.late_added: scdb calibrate --codebook */
    int nc;
    scdb_codebook *bcb;       /* --baseline: its codebook and each consumer's pair (NULL: none) */
    scdb_pair *bpairs[MAXC];
} qfamily;

static void family_free(qfamily *f)
{
    for (int i = 0; i < MAXC; i++) {
        scdb_pair_free(&f->pairs[i]);
        scdb_pair_free(&f->bpairs[i]);
        scdb_model_free(&f->cons[i]);
    }
    scdb_codebook_free(&f->cb);
    scdb_codebook_free(&f->bcb);
    scdb_model_free(&f->prod);
}

/* Load the producer and its codebook, then each consumer of a
 * <producer>__<consumer>.safetensors under arts/pairs, in name order.  0, or
 * -1 after a message. */
static int load_family(const qopts *o, const char *models, const char *arts, qfamily *f)
{
    char path[2200], err[512], names[MAXC][256];
    struct dirent *de;
    size_t plen = strlen(o->producer);
    int nn = 0;
    scdb_err rc;
    DIR *dir;

    snprintf(path, sizeof path, "%s/%s", models, o->producer);
    if ((rc = scdb_model_load(path, &f->prod, err, sizeof err))) {
        fprintf(stderr, "bench quality: producer %s: %s\n", path, err);
        return -1;
    }
    snprintf(path, sizeof path, "%s/codebooks/%s.safetensors", arts, o->producer);
    if ((rc = scdb_codebook_load(path, &f->cb, err, sizeof err)) ||
        (rc = scdb_codebook_check_producer(f->cb, f->prod, err, sizeof err))) {
        fprintf(stderr, "bench quality: codebook %s: %s (%s); run `scdb calibrate` first\n", path, err,
                scdb_strerror(rc));
        return -1;
    }
    snprintf(path, sizeof path, "%s/pairs", arts);
    if (!(dir = opendir(path))) { fprintf(stderr, "bench quality: no %s\n", path); return -1; }
    while ((de = readdir(dir)) && nn < MAXC) {
        const char *ext = strstr(de->d_name, ".safetensors");
        if (strncmp(de->d_name, o->producer, plen) || strncmp(de->d_name + plen, "__", 2) || !ext) continue;
        snprintf(names[nn], sizeof names[nn], "%.*s", (int)(ext - de->d_name - plen - 2), de->d_name + plen + 2);
        struct stat mst;
        snprintf(path, sizeof path, "%s/%.120s/config.json", models, names[nn]);
        if (stat(path, &mst)) {   /* an adapter's pair: scdb bench fleet measures those */
            fprintf(stderr, "bench quality: %s__%s: no model %s/%s (an adapter? see scdb bench fleet): skipped\n",
                    o->producer, names[nn], models, names[nn]);
            continue;
        }
        if (strcmp(names[nn], o->producer)) nn++;
    }
    closedir(dir);
    for (int i = 0; i < nn; i++)       /* stable order */
        for (int k = i + 1; k < nn; k++)
            if (strcmp(names[k], names[i]) < 0) { char t[256]; memcpy(t, names[i], 256); memcpy(names[i], names[k], 256); memcpy(names[k], t, 256); }
    for (int i = 0; i < nn; i++) {
        int n = f->nc;
        snprintf(path, sizeof path, "%s/%.120s", models, names[i]);
        if ((rc = scdb_model_load(path, &f->cons[n], err, sizeof err))) {
            fprintf(stderr, "bench quality: consumer %s: %s\n", path, err);
            return -1;
        }
        snprintf(path, sizeof path, "%s/pairs/%s__%.120s.safetensors", arts, o->producer, names[i]);
        if ((rc = scdb_pair_load(path, f->cb, &f->pairs[n], err, sizeof err)) ||
            (rc = scdb_pair_check_models(f->pairs[n], f->prod, f->cons[n], err, sizeof err))) {
            fprintf(stderr, "bench quality: pair %s: %s (%s)\n", path, err, scdb_strerror(rc));
            return -1;
        }
        f->late[n] = scdb_pair_get_info(f->pairs[n])->late_added;
        snprintf(f->cnames[n], sizeof f->cnames[n], "%.120s", names[i]);
        f->nc++;
    }
    if (f->nc == 0) {
        fprintf(stderr, "bench quality: no pairs %s__*.safetensors under %s/pairs\n", o->producer, arts);
        return -1;
    }
    return 0;
}

/* --baseline DIR: its codebook (for the same producer) and the pair of each
 * consumer of f found under DIR/pairs (a consumer without one is compared
 * with nothing, said so).  0, or -1 after a message. */
static int load_baseline(const qopts *o, const char *dir, qfamily *f)
{
    char path[2200], err[512];
    scdb_err rc;
    snprintf(path, sizeof path, "%s/codebooks/%s.safetensors", dir, o->producer);
    if ((rc = scdb_codebook_load(path, &f->bcb, err, sizeof err)) ||
        (rc = scdb_codebook_check_producer(f->bcb, f->prod, err, sizeof err))) {
        fprintf(stderr, "bench quality: --baseline codebook %s: %s (%s)\n", path, err, scdb_strerror(rc));
        return -1;
    }
    for (int i = 0; i < f->nc; i++) {
        snprintf(path, sizeof path, "%s/pairs/%s__%s.safetensors", dir, o->producer, f->cnames[i]);
        if ((rc = scdb_pair_load(path, f->bcb, &f->bpairs[i], err, sizeof err)) ||
            (rc = scdb_pair_check_models(f->bpairs[i], f->prod, f->cons[i], err, sizeof err))) {
            fprintf(stderr, "bench quality: --baseline pair %s: %s (%s): %s not compared\n", path, err,
                    scdb_strerror(rc), f->cnames[i]);
            scdb_pair_free(&f->bpairs[i]);
        }
    }
    return 0;
}

/* payload bytes per prefix token of each method */
typedef struct qbytes { double raw, q4, ds, scd, scd8; } qbytes;

static qbytes payload_bytes(const ctx *c, scdb_codebook *cb)
{
    const scdb_model_config *pc = scdb_model_cfg(c->prod);
    qbytes b = {.raw = (double)c->L * 2 * c->kv * 2,
                .q4 = (double)c->L * 2 * (c->kv / 2.0 + 4.0 * c->kv / pc->head_dim),
                .ds = (double)(c->L - c->o->ds_layers) * 2 * c->kv * 2 + 2.0 * c->d,
                .scd = (double)scdb_codebook_token_bytes(cb)};
    scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8);
    b.scd8 = (double)scdb_codebook_token_bytes(cb);
    scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16);
    return b;
}

/* The context on dev for prefix + cont tokens of the producer's shape: 0, or
 * -1 (after a message where the reason is not an allocation) */
static int ctx_init(ctx *c, const qopts *o, const scdb_model *prod, scdb_device dev)
{
    const scdb_model_config *pc = scdb_model_cfg(prod);
    void *dl = NULL;

    c->o = o;
    c->prod = prod;
    c->dev = dev;
    c->ops = scdb_k_ops_get(dev);
    c->L = pc->n_layers; c->d = pc->d_model; c->kv = scdb_model_kv_dim(pc); c->V = pc->vocab_size;
    c->P = o->prefix; c->C = o->cont;
    if (c->P + c->C > pc->max_seq_len) {
        fprintf(stderr, "bench quality: prefix + cont = %d exceeds the context (%d)\n", c->P + c->C, pc->max_seq_len);
        return -1;
    }
    c->logits = malloc((size_t)c->C * c->V * sizeof(float));
    c->lp = malloc((size_t)c->V * sizeof(float));
    if (!c->logits || !c->lp) return -1;
    if (c->ops->alloc((size_t)c->C * c->V * sizeof(float), &dl)) return -1;
    c->dlogits = dl;
    return 0;
}

static void ctx_free(ctx *c)
{
    free_windows(c);
    scdb_model_dev_cache_free(c->cd, &c->cache);
    scdb_model_dev_free(&c->cd);
    if (c->ops) {
        c->ops->release(c->dlogits);
        c->ops->release(c->dscr);
    }
    free(c->logits);
    free(c->lp);
}

/* ------------------------------------------------------------ the JSON document */

/* its sections, filled as the bench goes */
typedef struct qout { cJSON *root, *res, *abl, *cfg, *ds, *pb, *sweep, *goals, *cmp; } qout;

static void config_json(const ctx *c, const qfamily *f, const qbytes *by, const char *dev_why, cJSON *jcfg)
{
    const qopts *o = c->o;
    const scdb_codebook_info *ci = scdb_codebook_get_info(f->cb);
    cJSON_AddStringToObject(jcfg, "producer", o->producer);
    cJSON_AddStringToObject(jcfg, "device", scdb_device_name(c->dev));
    cJSON_AddStringToObject(jcfg, "device_choice", dev_why);
    cJSON_AddStringToObject(jcfg, "codebook", ci->id_hex);
    cJSON_AddNumberToObject(jcfg, "prefix", c->P);
    cJSON_AddNumberToObject(jcfg, "cont", c->C);
    cJSON_AddNumberToObject(jcfg, "windows_per_consumer", o->windows);
    cJSON_AddNumberToObject(jcfg, "raw_f16_bytes_per_token", by->raw);
    cJSON_AddNumberToObject(jcfg, "ds_layers", o->ds_layers);
    cJSON_AddNumberToObject(jcfg, "scd_code_dim", ci->code_dim);
    cJSON_AddNumberToObject(jcfg, "scd_f16_bytes_per_token", by->scd);
    cJSON_AddNumberToObject(jcfg, "scd_int8_bytes_per_token", by->scd8);
    cJSON_AddStringToObject(jcfg, "int8_codes", "one f16 scale per token and coded layer (max|z| / 127, "
                            "rounded up), codes round(z / scale) in [-127, 127]; decoded as f16(q * scale)");
    cJSON_AddStringToObject(jcfg, "scd_decoder_input", scdb_pair_get_info(f->pairs[0])->all_input ? "all" : "layer");
    cJSON_AddStringToObject(jcfg, "ttft_includes",
                            "oracle: consumer prefill of the prefix + first continuation token; others: "
                            "building the consumer's prefix cache from the in-memory payload (copy, "
                            "dequantise, recompute, SCD decode + patch regeneration) + first token; no "
                            "producer prefill, encode or transfer");
    cJSON_AddStringToObject(jcfg, "quant4", "asymmetric uniform 4-bit, groups of head_dim channels "
                            "(one head of one token), f16 min and scale per group");
    cJSON_AddStringToObject(jcfg, "text", o->text ? scdb_path_relative(o->text, o->data)
                                                  : "second half of each consumer's held-out text");
}

/* ------------------------------------------------------------ per consumer */

/* raw, quant4 and droidspeak (recomputing [ds_a, ds_a + ds_layers)) on every
 * window of c: the producer-side payloads, then each method's build */
static scdb_err eval_baselines(ctx *c, int ds_a, acc *a)
{
    size_t n = (size_t)c->P * c->kv;
    int g = scdb_model_cfg(c->prod)->head_dim;
    q4set qs;
    scdb_err rc = SCDB_OK;
    for (int t = 0; t < 2; t++) {
        qs.q[t] = malloc((size_t)c->L * n / 2 + 1);
        qs.ms[t] = malloc((size_t)c->L * (n / g) * 2 * sizeof(uint16_t) + 2);
    }
    dsarg ds = {.a = ds_a, .g = c->o->ds_layers, .x = malloc((size_t)c->P * c->d * sizeof(float))};
    if (!qs.q[0] || !qs.q[1] || !qs.ms[0] || !qs.ms[1] || !ds.x) rc = SCDB_ENOMEM;
    for (int i = 0; i < c->nw && !rc; i++) {
        qwin *w = &c->w[i];
        for (int l = 0; l < c->L; l++) {
            /* g = head_dim: even, divides n (the kernel's requirements) */
            scdb_k_q4_encode_cpu(scdb_kv_k(w->pcache, l, 0), n, g, qs.q[0] + l * n / 2,
                                 qs.ms[0] + 2 * (l * n / g));
            scdb_k_q4_encode_cpu(scdb_kv_v(w->pcache, l, 0), n, g, qs.q[1] + l * n / 2,
                                 qs.ms[1] + 2 * (l * n / g));
        }
        if ((rc = run_method(c, w, b_raw, NULL, &a[M_RAW], 1)) ||
            (rc = run_method(c, w, b_quant4, &qs, &a[M_QUANT4], 1)) ||
            (rc = run_method(c, w, b_droid, &ds, &a[M_DROID], 1)))
            break;
    }
    for (int t = 0; t < 2; t++) { free(qs.q[t]); free(qs.ms[t]); }
    free(ds.x);
    return rc;
}

/* consumer k's rows (JSON and table) and its goals; the oracle's ppl */
static double consumer_rows(const ctx *c, const qfamily *f, int k, const qbytes *by, const acc *a,
                          int ds_a, const qout *out)
{
    const scdb_pair_info *pi = scdb_pair_get_info(f->pairs[k]);
    double bytes[M_COUNT] = {0, by->raw, by->q4, by->ds, by->scd, by->scd, by->scd8, by->scd8};
    cJSON *rows[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        rows[m] = row_tag(row(f->cnames[k], MNAME[m], &a[m], bytes[m]), MCODES[m], f->late[k]);
        if (m == M_DROID) cJSON_AddNumberToObject(rows[m], "ds_first_layer", ds_a);
        if (m == M_FULL || m == M_FULL8) cJSON_AddNumberToObject(rows[m], "patch_layers", pi->n_patch);
        cJSON_AddItemToArray(out->res, rows[m]);
    }
    double oppl = jnum(rows[M_ORACLE], "ppl"), ottft = jnum(rows[M_ORACLE], "ttft_ms");
    for (int m = 0; m < M_COUNT; m++) {
        double ppl = jnum(rows[m], "ppl"), tt = jnum(rows[m], "ttft_ms");
        char bb[32] = "—", vr[32] = "—";
        if (m != M_ORACLE) { snprintf(bb, sizeof bb, "%.0f", bytes[m]); snprintf(vr, sizeof vr, "1/%.1f", by->raw / bytes[m]); }
        printf("| %s | %s | %s | %.3f | %+.1f%% | %.4f | %.3f | %s | %s | %.2f | %.1fx |\n", f->cnames[k],
               MNAME[m], MCODES[m] ? MCODES[m] : "—", ppl, 100.0 * (ppl / oppl - 1.0), jnum(rows[m], "kl"),
               jnum(rows[m], "top1"), bb, vr, tt, ottft / tt);
    }
    /* goals */
    double fppl = jnum(rows[M_FULL], "ppl"), ft1 = jnum(rows[M_FULL], "top1");
    double fkl = jnum(rows[M_FULL], "kl");
    cJSON *gg = cJSON_CreateObject();
    cJSON_AddStringToObject(gg, "consumer", f->cnames[k]);
    cJSON_AddNumberToObject(gg, "scd_full_ppl_vs_oracle", fppl / oppl - 1.0);
    cJSON_AddBoolToObject(gg, "ppl_within_5pct", fppl <= 1.05 * oppl);
    cJSON_AddNumberToObject(gg, "scd_full_top1", ft1);
    cJSON_AddBoolToObject(gg, "top1_ge_95pct", ft1 >= 0.95);
    cJSON_AddNumberToObject(gg, "payload_fraction_of_raw", by->scd / by->raw);
    cJSON_AddBoolToObject(gg, "payload_le_1_8", by->scd <= by->raw / 8);
    cJSON_AddNumberToObject(gg, "raw_ppl_vs_oracle", jnum(rows[M_RAW], "ppl") / oppl - 1.0);
    int beats = 1;
    for (int m = M_RAW; m < M_FULL; m++)
        if (m != M_RAW && !(fkl < jnum(rows[m], "kl") && by->scd <= bytes[m])) beats = 0;
    cJSON_AddBoolToObject(gg, "full_dominates_reuse_quant4_droidspeak", beats);
    cJSON_AddNumberToObject(gg, "ttft_speedup", ottft / jnum(rows[M_FULL], "ttft_ms"));
    cJSON_AddBoolToObject(gg, "ttft_speedup_ge_2_65", ottft / jnum(rows[M_FULL], "ttft_ms") >= 2.65);
    /* the rate knob: int8 codes at >= 16x, within 3% and top-1 0.95 */
    double ippl = jnum(rows[M_FULL8], "ppl"), it1 = jnum(rows[M_FULL8], "top1");
    cJSON_AddNumberToObject(gg, "int8_full_ppl_vs_oracle", ippl / oppl - 1.0);
    cJSON_AddBoolToObject(gg, "int8_ppl_within_3pct", ippl <= 1.03 * oppl);
    cJSON_AddNumberToObject(gg, "int8_full_top1", it1);
    cJSON_AddBoolToObject(gg, "int8_top1_ge_95pct", it1 >= 0.95);
    cJSON_AddNumberToObject(gg, "int8_payload_fraction_of_raw", by->scd8 / by->raw);
    cJSON_AddBoolToObject(gg, "int8_payload_le_1_16", by->scd8 <= by->raw / 16);
    cJSON_AddBoolToObject(gg, "late_added", f->late[k]);
    cJSON_AddItemToArray(out->goals, gg);
    return oppl;
}

/* patch budget sweep of consumer k, both code dtypes, with the decode time;
 * the rows also seed the rate sweep's (out->sweep) */
static scdb_err patch_budgets(ctx *c, const qfamily *f, int k, const qbytes *by, double oppl,
                              const qout *out)
{
    const scdb_pair_info *pi = scdb_pair_get_info(f->pairs[k]);
    double tms[2][SCDB_CODEC_MAX_LAYERS + 1];
    scdb_err rc;
    if ((rc = time_budgets(c, f->cb, f->pairs[k], tms))) return rc;
    for (int dt = SCDB_CODES_F16; dt <= SCDB_CODES_INT8; dt++)
        for (int b = 0; b <= pi->n_aligners; b++) {
            acc ab = {0};
            double dms = tms[dt][b];
            if ((rc = eval_scd(c, f->cb, (scdb_code_dtype)dt, f->pairs[k], b, &ab, 0))) return rc;
            cJSON *e = row(f->cnames[k], "scd", &ab, dt == SCDB_CODES_INT8 ? by->scd8 : by->scd);
            acc_free(&ab);
            row_tag(e, scdb_code_dtype_name((scdb_code_dtype)dt), f->late[k]);
            cJSON_AddNumberToObject(e, "patch_layers", b);
            cJSON_AddBoolToObject(e, "default_patch", b == pi->n_patch);
            cJSON_AddNumberToObject(e, "decode_ms", dms);
            cJSON_AddNumberToObject(e, "ppl_vs_oracle", jnum(e, "ppl") / oppl - 1.0);
            cJSON_AddNumberToObject(e, "raw_f16_bytes_per_token", by->raw);
            cJSON_AddItemToArray(out->pb, e);
            if (out->sweep) {
                cJSON *d = cJSON_Duplicate(e, 1);
                cJSON_AddStringToObject(d, "codebook", "shipped");
                cJSON_AddItemToArray(out->sweep, d);
            }
        }
    return SCDB_OK;
}

/* --baseline: SCD full (every patch layer of the pair's default budget) with
 * the baseline's codebook and pair on the same windows as the shipped one,
 * both code dtypes; one row per dtype: both sides and new / old ratios. */
static scdb_err compare_baseline(ctx *c, const qfamily *f, int k, const qbytes *by, const acc *a,
                                 const char *text, const qout *out)
{
    const scdb_codebook_info *nci = scdb_codebook_get_info(f->cb), *oci = scdb_codebook_get_info(f->bcb);
    double oppl = exp(a[M_ORACLE].nll / (double)a[M_ORACLE].n);
    for (int dt = SCDB_CODES_F16; dt <= SCDB_CODES_INT8; dt++) {
        acc b = {0};
        const acc *n = &a[dt == SCDB_CODES_INT8 ? M_FULL8 : M_FULL];
        scdb_err rc = eval_scd(c, f->bcb, (scdb_code_dtype)dt, f->bpairs[k], -1, &b, 0);
        if (rc) { acc_free(&b); return rc; }
        scdb_codebook_set_code_dtype(f->bcb, (scdb_code_dtype)dt);
        double obytes = (double)scdb_codebook_token_bytes(f->bcb);
        scdb_codebook_set_code_dtype(f->bcb, SCDB_CODES_F16);
        double nbytes = dt == SCDB_CODES_INT8 ? by->scd8 : by->scd;
        double np = exp(n->nll / (double)n->n), op = exp(b.nll / (double)b.n);
        double nkl = n->kl / (double)n->n, okl = b.kl / (double)b.n;
        double nt = n->agree / (double)n->n, ot = b.agree / (double)b.n;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "consumer", f->cnames[k]);
        cJSON_AddStringToObject(r, "text", text);
        cJSON_AddStringToObject(r, "codes_dtype", scdb_code_dtype_name((scdb_code_dtype)dt));
        cJSON_AddStringToObject(r, "new_codebook", nci->id_hex);
        cJSON_AddStringToObject(r, "old_codebook", oci->id_hex);
        cJSON_AddNumberToObject(r, "raw_f16_bytes_per_token", by->raw);
        cJSON_AddNumberToObject(r, "new_bytes_per_token", nbytes);
        cJSON_AddNumberToObject(r, "old_bytes_per_token", obytes);
        cJSON_AddNumberToObject(r, "new_raw_ratio", by->raw / nbytes);
        cJSON_AddNumberToObject(r, "old_raw_ratio", by->raw / obytes);
        cJSON_AddNumberToObject(r, "oracle_ppl", oppl);
        cJSON_AddNumberToObject(r, "new_ppl_vs_oracle", np / oppl - 1.0);
        cJSON_AddNumberToObject(r, "old_ppl_vs_oracle", op / oppl - 1.0);
        cJSON_AddNumberToObject(r, "ppl_ratio", np / op);
        cJSON_AddNumberToObject(r, "new_kl", nkl);
        cJSON_AddNumberToObject(r, "old_kl", okl);
        cJSON_AddNumberToObject(r, "kl_ratio", nkl / okl);
        cJSON_AddNumberToObject(r, "new_top1", nt);
        cJSON_AddNumberToObject(r, "old_top1", ot);
        cJSON_AddNumberToObject(r, "predictions", (double)n->n);
        cJSON_AddItemToArray(out->cmp, r);
        acc_free(&b);
    }
    return SCDB_OK;
}

/* the --baseline table: new (shipped) vs old codebook, scd full */
static void print_compare(const cJSON *cmp)
{
    const cJSON *r;
    if (!cmp || cJSON_GetArraySize(cmp) == 0) return;
    r = cJSON_GetArrayItem(cmp, 0);
    printf("\n## Codebook %s (new) vs %s (old, --baseline): scd full, same windows\n\n",
           cJSON_GetObjectItem(r, "new_codebook")->valuestring, cJSON_GetObjectItem(r, "old_codebook")->valuestring);
    printf("| consumer | text | codes | bytes/token new (old) | vs raw new (old) | ppl vs oracle new (old) | "
           "KL new (old) | KL new/old | top-1 new (old) |\n|---|---|---|---|---|---|---|---|---|\n");
    cJSON_ArrayForEach(r, cmp)
        printf("| %s | %s | %s | %.0f (%.0f) | 1/%.1f (1/%.1f) | %+.2f%% (%+.2f%%) | %.4f (%.4f) | %.2f | %.3f (%.3f) |\n",
               cJSON_GetObjectItem(r, "consumer")->valuestring, cJSON_GetObjectItem(r, "text")->valuestring,
               cJSON_GetObjectItem(r, "codes_dtype")->valuestring, jnum(r, "new_bytes_per_token"),
               jnum(r, "old_bytes_per_token"), jnum(r, "new_raw_ratio"), jnum(r, "old_raw_ratio"),
               100 * jnum(r, "new_ppl_vs_oracle"), 100 * jnum(r, "old_ppl_vs_oracle"), jnum(r, "new_kl"),
               jnum(r, "old_kl"), jnum(r, "kl_ratio"), jnum(r, "new_top1"), jnum(r, "old_top1"));
    fflush(stdout);
}

/* Consumer k: its windows, the droidspeak range, every method, its rows,
 * goals and patch budget sweep.  0, or -1 (after a message where the
 * original cause is known). */
static int eval_consumer(ctx *c, const qfamily *f, int k, const qbytes *by, const qout *out)
{
    const qopts *o = c->o;
    acc a[M_COUNT] = {{0}};
    unsigned char *text = NULL, *cal_text = NULL;
    size_t tl = 0, cl = 0;
    char desc[600] = "";
    int ds_a = 0, ret = -1;
    scdb_err rc;

    if ((rc = ctx_consumer(c, f->cons[k]))) {
        fprintf(stderr, "bench quality: %s on the %s: %s\n", f->cnames[k], scdb_device_name(c->dev),
                scdb_strerror(rc));
        goto done;
    }
    if (o->text) {
        rc = scdb_codec_read_text(o->text, (size_t)1 << 30, &text, &tl);
        snprintf(desc, sizeof desc, "%s", scdb_path_relative(o->text, o->data));
    } else {
        rc = scdb_codec_domain_text(f->cons[k], SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 30, &text, &tl, desc, sizeof desc);
    }
    if (rc) { fprintf(stderr, "bench quality: no evaluation text for %s (%s)\n", f->cnames[k], scdb_strerror(rc)); goto done; }
    if (o->verbose) fprintf(stderr, "bench quality: %s: %s\n", f->cnames[k], desc);
    rc = make_windows(c, text, tl, o->windows, &a[M_ORACLE]);
    free(text);
    if (rc) { fprintf(stderr, "bench quality: %s: windows: %s\n", f->cnames[k], scdb_strerror(rc)); goto done; }

    /* droidspeak range on the held-out first half */
    if ((rc = scdb_codec_domain_text(f->cons[k], SCDB_TEXT_HELDOUT_FIRST, (size_t)1 << 30, &cal_text, &cl, NULL, 0)) == SCDB_OK) {
        cJSON *arr = cJSON_AddArrayToObject(out->ds, f->cnames[k]);
        rc = choose_droid(c, cal_text, cl, o->ds_layers, &ds_a, arr);
        free(cal_text);
        if (rc) goto done;
    }
    if (o->verbose) fprintf(stderr, "  droidspeak: recompute layers %d..%d\n", ds_a, ds_a + o->ds_layers - 1);

    /* the methods, then the rows, goals and patch budgets */
    if ((rc = eval_baselines(c, ds_a, a))) goto done;
    if ((rc = eval_scd(c, f->cb, SCDB_CODES_F16, f->pairs[k], 0, &a[M_REUSE], 1)) ||
        (rc = eval_scd(c, f->cb, SCDB_CODES_F16, f->pairs[k], -1, &a[M_FULL], 1)) ||
        (rc = eval_scd(c, f->cb, SCDB_CODES_INT8, f->pairs[k], 0, &a[M_REUSE8], 1)) ||
        (rc = eval_scd(c, f->cb, SCDB_CODES_INT8, f->pairs[k], -1, &a[M_FULL8], 1)))
        goto done;
    double oppl = consumer_rows(c, f, k, by, a, ds_a, out);
    if (o->budgets && (rc = patch_budgets(c, f, k, by, oppl, out))) goto done;
    if (f->bpairs[k] && (rc = compare_baseline(c, f, k, by, a, desc, out))) goto done;
    ret = 0;
done:
    for (int m = 0; m < M_COUNT; m++) acc_free(&a[m]);
    free_windows(c);
    fflush(stdout);
    return ret;
}

/* ------------------------------------------------------------ after the consumers */

/* the notes under the main table, and the patch budget table */
static void print_patch_table(const ctx *c, const qfamily *f, const qbytes *by, const cJSON *jpb)
{
    const scdb_codebook_info *ci = scdb_codebook_get_info(f->cb);
    printf("\npayload: raw = f16 K+V of %d layers x %d channels; quant4 = 4-bit + f16 (min, scale) per %d values; "
           "droidspeak = f16 KV of the %d reused layers + the f16 residual entering the first recomputed layer; "
           "SCD = %d codes per token, f16 (%.0f B) or int8 + an f16 scale per token and coded layer (%d layers: %.0f B).\n",
           c->L, 2 * c->kv, scdb_model_cfg(c->prod)->head_dim, c->L - c->o->ds_layers, ci->code_dim, by->scd,
           ci->n_scaled, by->scd8);
    printf("TTFT: oracle = consumer prefill + first token; others = cache build from the payload in memory + first token "
           "(no producer prefill, encode or transfer). Best of %d runs, median over windows.\n", c->o->reps);

    printf("\n## Patch budget sweep (scd, shipped pairs; the per-get patch budget, scdb_get_ex)\n\n"
           "| consumer | codes | patch layers | bytes/token | ppl | ppl vs oracle | KL | top-1 | decode ms |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < cJSON_GetArraySize(jpb); i++) {
        cJSON *e = cJSON_GetArrayItem(jpb, i);
        printf("| %s | %s | %d%s | %.0f | %.3f | %+.1f%% | %.4f | %.3f | %.2f |\n",
               cJSON_GetObjectItem(e, "consumer")->valuestring, cJSON_GetObjectItem(e, "codes_dtype")->valuestring,
               (int)jnum(e, "patch_layers"), cJSON_IsTrue(cJSON_GetObjectItem(e, "default_patch")) ? " (default)" : "",
               jnum(e, "bytes_per_token"), jnum(e, "ppl"), 100 * jnum(e, "ppl_vs_oracle"), jnum(e, "kl"),
               jnum(e, "top1"), jnum(e, "decode_ms"));
    }
    printf("\ndecode ms: the consumer's whole %d-token prefix cache built from the codes in memory (REUSE "
           "decoders, aligners and K/V regeneration on the patched layers); every (codes, patch layers) point "
           "decoded in turn, %d rounds, best round per window, median over windows.\n",
           c->P, c->o->reps);
    fflush(stdout);
}

/* one ablation: a REUSE-only codebook fitted in-process with these knobs */
typedef struct abl_cfg { const char *group; int rk, rv, pca, post, tok, all; } abl_cfg;

/* The ablation grid around the shipped codebook's ranks, layer 0 and decoder
 * input: r_K and r_V varied separately, then each switch both ways. */
static int ablation_grid(const ctx *c, const qfamily *f, abl_cfg *cfgs)
{
    const scdb_codebook_info *ci = scdb_codebook_get_info(f->cb);
    int tok0 = ci->layers[0].kind == SCDB_CB_TOKENS;
    int rk0 = 0, rv0 = 0, ncfg = 0;
    for (int l = 0; l < c->L; l++)
        if (ci->layers[l].kind == SCDB_CB_CODED && ci->layers[l].r_k > 0) { rk0 = ci->layers[l].r_k; rv0 = ci->layers[l].r_v; break; }
    if (!rk0) { rk0 = 4; rv0 = 8; }
    int all0 = scdb_pair_get_info(f->pairs[0])->all_input;
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
    return ncfg;
}

/* A calibration session on the statistics of every distinct domain of the
 * family (training files, else the held-out first half), its source
 * description into jabl "calibration_text". */
static scdb_err ablation_session(const ctx *c, const qfamily *f, cJSON *jabl, scdb_calib **out)
{
    scdb_calib_opts co = {.window = 384, .n_eval = 1, .sample_stride = 2, .verbose = 0};
    char srcdesc[2048];
    scdb_err rc;

    if (c->o->verbose) fprintf(stderr, "bench quality: ablation calibration (%d windows)\n", c->o->abl_windows);
    if ((rc = scdb_calib_new(f->prod, (const scdb_model *const *)f->cons, f->nc, &co, out))) return rc;
    if (c->dev != SCDB_DEV_CPU && (rc = scdb_calib_set_device(*out, c->dev))) return rc;
    if ((rc = add_domain_texts(*out, f->prod, f->cons, f->nc, c->o->abl_windows, srcdesc, sizeof srcdesc)))
        return rc;
    cJSON_AddStringToObject(jabl, "calibration_text", srcdesc);
    return SCDB_OK;
}

/* Consumer k's fresh windows (the main ones were freed) and one row per
 * ablation into jabl's group arrays, printed as it goes. */
static scdb_err ablations_of(ctx *c, const qfamily *f, int k, scdb_calib *cal, const abl_cfg *cfgs,
                             int ncfg, cJSON *jabl)
{
    const qopts *o = c->o;
    unsigned char *text = NULL;
    size_t tl = 0;
    scdb_err rc;

    free_windows(c);
    if ((rc = ctx_consumer(c, f->cons[k]))) return rc;
    rc = o->text ? scdb_codec_read_text(o->text, (size_t)1 << 30, &text, &tl)
                 : scdb_codec_domain_text(f->cons[k], SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 30, &text, &tl, NULL, 0);
    if (rc) return rc;
    rc = make_windows(c, text, tl, o->windows, NULL);
    free(text);
    if (rc) return rc;
    for (int q = 0; q < ncfg; q++) {
        scdb_cb_fit fit = {.r_k = cfgs[q].rk, .r_v = cfgs[q].rv, .pca = cfgs[q].pca,
                           .k_post_rope = cfgs[q].post, .token_layer0 = cfgs[q].tok};
        scdb_codebook *acb = NULL;
        scdb_pair *ap = NULL;
        scdb_pair_fit pf = {.no_train = 1, .all_layers = cfgs[q].all};
        acc ab = {0};
        if (fit.r_k > (fit.k_post_rope ? c->kv : c->d) || fit.r_k > c->kv || fit.r_v > c->kv) continue;
        if ((rc = scdb_calib_fit_codebook(cal, &fit, &acb)) ||
            (rc = scdb_calib_fit_pair(cal, acb, k, &pf, &ap)) ||
            (rc = eval_scd(c, acb, SCDB_CODES_F16, ap, 0, &ab, 0))) {
            scdb_codebook_free(&acb);
            scdb_pair_free(&ap);
            return rc;
        }
        double by = (double)scdb_codebook_token_bytes(acb);
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(jabl, cfgs[q].group);
        if (!arr) arr = cJSON_AddArrayToObject(jabl, cfgs[q].group);
        cJSON *e = row_tag(row(f->cnames[k], "scd_reuse", &ab, by), "f16", 0);
        cJSON_AddNumberToObject(e, "r_k", fit.r_k);
        cJSON_AddNumberToObject(e, "r_v", fit.r_v);
        cJSON_AddStringToObject(e, "encoder", fit.pca ? "pca" : "rrr");
        cJSON_AddStringToObject(e, "k_space", fit.k_post_rope ? "post_rope" : "pre_rope");
        cJSON_AddBoolToObject(e, "token_layer0", fit.token_layer0);
        cJSON_AddStringToObject(e, "decoder_input", cfgs[q].all ? "all" : "layer");
        cJSON_AddItemToArray(arr, e);
        printf("| %s | %s | %d | %d | %s | %s | %s | %s | %.0f | %.3f | %.4f | %.3f |\n", cfgs[q].group,
               f->cnames[k], fit.r_k, fit.r_v, fit.pca ? "pca" : "rrr", fit.k_post_rope ? "post-RoPE" : "pre-RoPE",
               fit.token_layer0 ? "tokens" : "coded", cfgs[q].all ? "all layers" : "own layer", by,
               jnum(e, "ppl"), jnum(e, "kl"), jnum(e, "top1"));
        fflush(stdout);
        scdb_codebook_free(&acb);
        scdb_pair_free(&ap);
    }
    return SCDB_OK;
}

/* The ablations (REUSE only) on an in-process calibration over all
 * consumers, each evaluated on its own windows. */
static scdb_err run_ablations(ctx *c, const qfamily *f, cJSON *jabl)
{
    scdb_calib *cal = NULL;
    abl_cfg cfgs[32];
    int ncfg = ablation_grid(c, f, cfgs);
    scdb_err rc = ablation_session(c, f, jabl, &cal);

    if (rc == SCDB_OK) {
        printf("\n## Ablations (REUSE only; in-process calibration, %d windows; consumer windows as above)\n\n", scdb_calib_windows(cal));
        printf("| group | consumer | r_K | r_V | encoder | K coded | layer 0 | decoder input | bytes/token | ppl | KL | top-1 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    for (int k = 0; k < f->nc && rc == SCDB_OK; k++) rc = ablations_of(c, f, k, cal, cfgs, ncfg, jabl);
    scdb_calib_free(&cal);
    return rc;
}

/* --sweep: the rate knob over code dtype, ranks and patch budget, and the
 * points that meet the int8 goals on every consumer */
static scdb_err rate_sweep(ctx *c, const qfamily *f, const qbytes *by, const qout *out)
{
    const scdb_codebook_info *ci = scdb_codebook_get_info(f->cb);
    sweep_in si = {.prod = f->prod, .cons = f->cons, .cnames = (char (*)[128])f->cnames, .late = f->late,
                   .nc = f->nc, .ci = ci, .all_input = scdb_pair_get_info(f->pairs[0])->all_input,
                   .raw_bytes = by->raw};
    scdb_err rc;

    printf("\n## Rate sweep: payload vs quality over code dtype, ranks and patch budget\n\n"
           "(shipped: the shipped codebook and pairs, from the patch budget sweep above; fit rK,rV,rH: "
           "in-process calibration on %d statistics windows, the shipped codebook's %d patch candidates, "
           "aligners of %d Adam steps, greedy patch order)\n\n"
           "| consumer | codebook | codes | patch layers | bytes/token | vs raw f16 | ppl | ppl vs oracle | KL | top-1 | decode ms |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n", c->o->sweep_windows, ci->n_candidates, c->o->sweep_steps);
    for (int i = 0; i < cJSON_GetArraySize(out->sweep); i++) sweep_print(cJSON_GetArrayItem(out->sweep, i));
    if ((rc = run_sweep(c, &si, out->sweep))) {
        fprintf(stderr, "bench quality: sweep: %s\n", scdb_strerror(rc));
        return rc;
    }
    cJSON *picks = cJSON_AddArrayToObject(out->root, "sweep_meets_int8_goals");
    sweep_pick(out->sweep, f->nc, 16.0, 0.03, 0.95, "int8", picks);
    printf("\nPoints meeting the int8 goals (>= 16x smaller than raw f16 KV, ppl within 3%% of oracle, "
           "top-1 >= 0.95) on every consumer:");
    for (int i = 0; i < cJSON_GetArraySize(picks); i++) {
        cJSON *e = cJSON_GetArrayItem(picks, i);
        printf("%s %s int8, %d patch layers (%.0f B/token; worst ppl %+.1f%%, worst top-1 %.3f)", i ? ";" : "",
               cJSON_GetObjectItem(e, "codebook")->valuestring, (int)jnum(e, "patch_layers"),
               jnum(e, "bytes_per_token"), 100 * jnum(e, "worst_ppl_vs_oracle"), jnum(e, "worst_top1"));
    }
    printf("%s\n", cJSON_GetArraySize(picks) ? "" : " none");
    return SCDB_OK;
}

static void print_goals(const cJSON *jgoals)
{
    printf("\n## Goals (measured)\n\n");
    for (int i = 0; i < cJSON_GetArraySize(jgoals); i++) {
        const cJSON *g = cJSON_GetArrayItem(jgoals, i);
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
        printf("- %s, int8 codes: scd_full ppl %+.1f%% vs oracle (goal <= +3%%: %s), top-1 %.3f (goal >= 0.95: %s), "
               "payload 1/%.1f of raw (goal <= 1/16: %s)%s\n",
               cJSON_GetObjectItem(g, "consumer")->valuestring, 100 * jnum(g, "int8_full_ppl_vs_oracle"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "int8_ppl_within_3pct")) ? "yes" : "NO", jnum(g, "int8_full_top1"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "int8_top1_ge_95pct")) ? "yes" : "NO",
               1.0 / jnum(g, "int8_payload_fraction_of_raw"),
               cJSON_IsTrue(cJSON_GetObjectItem(g, "int8_payload_le_1_16")) ? "yes" : "NO",
               cJSON_IsTrue(cJSON_GetObjectItem(g, "late_added")) ? " (late-added pair)" : "");
    }
}

/* --json, and --png through tools/plot_quality.py.  0, or -1 when the JSON
 * could not be written (a missing plot is only reported). */
static int write_outputs(const qopts *o, cJSON *root)
{
    char tmpjson[256] = "";
    const char *jpath = o->json;
    if (!jpath && o->png) {
        snprintf(tmpjson, sizeof tmpjson, "/tmp/scdb_bench_quality_%d.json", (int)getpid());
        jpath = tmpjson;
    }
    if (jpath) {
        if (scdb_bench_write_json(jpath, root, "bench quality")) return -1;
        if (o->json) fprintf(stderr, "bench quality: wrote %s\n", o->json);
    }
    if (o->png) {
        char script[1200], cmd[4096];
        struct stat sb;
        snprintf(script, sizeof script, "%s/tools/plot_quality.py", scdb_share_dir());
        if (stat(script, &sb) || stat("/usr/bin/python3", &sb)) {
            fprintf(stderr, "bench quality: no PNG: %s or /usr/bin/python3 is missing\n", script);
        } else {
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, jpath, o->png);
            if (system(cmd) != 0) fprintf(stderr, "bench quality: no PNG: plot_quality.py failed (matplotlib missing?)\n");
            else fprintf(stderr, "bench quality: wrote %s\n", o->png);
        }
        if (tmpjson[0]) unlink(tmpjson);
    }
    return 0;
}

/* ------------------------------------------------------------ main */

int scdb_bench_quality(int argc, char **argv)
{
    qopts o;
    scdb_device_pref dev_pref;
    scdb_device dev;
    char why[384], models[1024], arts[1024];
    qfamily f = {0};
    qbytes by;
    qout out = {0};
    ctx c = {0};
    int ret = parse_opts(argc, argv, &o, &dev_pref);

    if (ret >= 0) return ret;
    if (scdb_device_resolve(dev_pref, &dev, why, sizeof why)) {
        fprintf(stderr, "bench quality: %s\n", why);
        return 1;
    }
    fprintf(stderr, "bench quality: device %s (%s)\n", scdb_device_name(dev), why);
    snprintf(models, sizeof models, "%s", o.models ? o.models : "");
    if (!o.models) snprintf(models, sizeof models, "%s/models", o.data);
    snprintf(arts, sizeof arts, "%s", o.artifacts ? o.artifacts : o.data);

    ret = 1;
    out.root = cJSON_CreateObject();
    out.res = cJSON_AddArrayToObject(out.root, "results");
    out.abl = cJSON_AddObjectToObject(out.root, "ablations");
    out.cfg = cJSON_AddObjectToObject(out.root, "config");
    if (load_family(&o, models, arts, &f) || ctx_init(&c, &o, f.prod, dev)) goto done;
    if (o.baseline && load_baseline(&o, o.baseline, &f)) goto done;
    if (o.ds_layers > c.L) o.ds_layers = c.L;
    by = payload_bytes(&c, f.cb);
    config_json(&c, &f, &by, why, out.cfg);
    out.ds = cJSON_AddObjectToObject(out.abl, "droidspeak_range");
    out.pb = cJSON_AddArrayToObject(out.abl, "patch_budget");
    out.sweep = o.sweep ? cJSON_AddArrayToObject(out.root, "sweep") : NULL;
    out.goals = cJSON_AddArrayToObject(out.root, "goals");
    out.cmp = o.baseline ? cJSON_AddArrayToObject(out.root, "baseline") : NULL;

    printf("# SCD quality: producer %s, codebook %s, prefix %d + continuation %d tokens, %d windows per consumer\n\n",
           o.producer, scdb_codebook_get_info(f.cb)->id_hex, c.P, c.C, o.windows);
    printf("| consumer | method | codes | ppl | ppl vs oracle | KL(oracle‖m) | top-1 | bytes/token | vs raw f16 | TTFT ms | TTFT speed-up |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < f.nc; k++)
        if (eval_consumer(&c, &f, k, &by, &out)) goto done;
    print_patch_table(&c, &f, &by, out.pb);
    print_compare(out.cmp);
    if (o.ablations && run_ablations(&c, &f, out.abl)) goto done;
    if (o.sweep && rate_sweep(&c, &f, &by, &out)) goto done;
    print_goals(out.goals);
    if (write_outputs(&o, out.root)) goto done;
    ret = 0;
done:
    ctx_free(&c);
    family_free(&f);
    cJSON_Delete(out.root);
    return ret;
}
