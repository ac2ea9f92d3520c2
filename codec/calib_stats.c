/* calib_stats.c — the calibration session: opening it over a producer and its consumers, and the statistics of every calibration window (and the held-back evaluation windows) (calib.h; the method is described there). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ session */

scdb_err scdb_calib_new(const scdb_model *producer, const scdb_model *const *consumers,
                        int n_consumers, const scdb_calib_opts *opts, scdb_calib **out)
{
    scdb_calib *c;
    if (!producer || !out || n_consumers < 0 || n_consumers > CX_MAXM - 1 ||
        (n_consumers && !consumers))
        return SCDB_EINVAL;
    *out = NULL;
    const scdb_model_config *pc = scdb_model_cfg(producer);
    if (pc->n_layers > SCDB_CODEC_MAX_LAYERS) return SCDB_ERANGE;
    for (int i = 0; i < n_consumers; i++)
        if (!consumers[i] || !scdb_model_config_same_arch(pc, scdb_model_cfg(consumers[i])))
            return SCDB_EMISMATCH;
    c = calloc(1, sizeof *c);
    if (!c) return SCDB_ENOMEM;
    c->mod[0] = producer;
    for (int i = 0; i < n_consumers; i++) c->mod[i + 1] = consumers[i];
    c->nm = n_consumers + 1;
    if (opts) c->o = *opts;
    if (c->o.window <= 0) c->o.window = 384;
    if (c->o.eval_prefix <= 0) c->o.eval_prefix = 320;
    if (c->o.eval_cont <= 0) c->o.eval_cont = 64;
    if (c->o.n_eval <= 0) c->o.n_eval = 6;
    if (c->o.sample_stride <= 0) c->o.sample_stride = 8;
    if (c->o.window > pc->max_seq_len) c->o.window = pc->max_seq_len;
    if (c->o.eval_prefix + c->o.eval_cont > pc->max_seq_len) {
        free(c);
        return SCDB_EINVAL;
    }
    c->L = pc->n_layers;
    c->d = pc->d_model;
    c->kv = scdb_model_kv_dim(pc);
    c->V = pc->vocab_size;
    size_t L = (size_t)c->L, d = (size_t)c->d, kv = (size_t)c->kv;
    c->basis = calloc(L * 3, sizeof *c->basis);
    if (!c->basis) { free(c); return SCDB_ENOMEM; }
    for (int j = 0; j < c->nm; j++) {
        c->sh[j] = calloc(L * d, sizeof(double));
        c->xh[j] = calloc(L * d * d, sizeof(double));
        c->yh[j] = calloc(L * d * d, sizeof(double));
        c->sk[j] = calloc(L * kv, sizeof(double));
        c->xk[j] = calloc(L * kv * kv, sizeof(double));
        c->yk[j] = calloc(L * kv * kv, sizeof(double));
        c->samp[j] = calloc(L, sizeof(float *));
        if (!c->sh[j] || !c->xh[j] || !c->yh[j] || !c->sk[j] || !c->xk[j] || !c->yk[j] ||
            !c->samp[j]) {
            scdb_calib_free(&c);
            return SCDB_ENOMEM;
        }
    }
    *out = c;
    return SCDB_OK;
}

void scdb_calib_free(scdb_calib **pc)
{
    if (!pc || !*pc) return;
    scdb_calib *c = *pc;
    for (int j = 0; j < CX_MAXM; j++) {
        free(c->sh[j]); free(c->xh[j]); free(c->yh[j]);
        free(c->sk[j]); free(c->xk[j]); free(c->yk[j]);
        if (c->samp[j]) for (int l = 0; l < c->L; l++) free(c->samp[j][l]);
        free(c->samp[j]);
    }
    for (int i = 0; i < c->nev; i++) {
        free(c->ev[i].tok); free(c->ev[i].ph); free(c->ev[i].pk); free(c->ev[i].ologp);
        scdb_kv_cache_free(&c->ev[i].oracle);
    }
    free(c->ev);
    free(c->wtok);
    if (c->basis) for (int i = 0; i < c->L * 3; i++) free(c->basis[i].E);
    free(c->basis);
    free(c->fitted);
    for (int j = 0; j < CX_MAXM; j++) scdb_model_dev_free(&c->mdev[j]);
    if (c->ops) c->ops->release(c->dscr);
    free(c);
    *pc = NULL;
}

scdb_err scdb_calib_set_device(scdb_calib *c, scdb_device dev)
{
    const scdb_k_ops *ops = scdb_k_ops_get(dev);
    scdb_err rc;

    if (!c || !ops || c->nwin || c->nev || c->ops) return SCDB_EINVAL;
    if (c->has_eng) return SCDB_EUNSUPPORTED;
    for (int j = 0; j < c->nm; j++)
        if ((rc = scdb_model_dev_new(c->mod[j], dev, &c->mdev[j]))) {
            for (int k = 0; k < j; k++) scdb_model_dev_free(&c->mdev[k]);
            return rc;
        }
    c->ops = ops;
    return SCDB_OK;
}

scdb_err cx_cal_dscratch(scdb_calib *c, size_t bytes, void **out)
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

int scdb_calib_windows(const scdb_calib *c) { return c ? c->nwin : 0; }

scdb_err scdb_calib_set_engine(scdb_calib *c, const scdb_calib_engine *e)
{
    if (!c || !e || !e->tokenize || !e->states || c->nwin || c->nev) return SCDB_EINVAL;
    if (c->ops) return SCDB_EUNSUPPORTED;
    c->eng = *e;
    c->has_eng = 1;
    return SCDB_OK;
}

/* Model m's states over tok[0, n) from position 0 -- h_in [L][n][d],
 * k_post [L][n][kv] -- from the session's engine, else a reference forward
 * into cache (emptied first). */
static scdb_err states_of(const scdb_calib *c, const scdb_model *m, const int32_t *tok, int n,
                          scdb_kv_cache *cache, float *h, float *k)
{
    if (c->has_eng) return c->eng.states(c->eng.ud, m, tok, n, h, k);
    scdb_capture cap = {.h_in = h, .k_post = k};
    cache->n = 0;
    return scdb_model_forward(m, tok, NULL, n, cache, NULL, &cap);
}

/* text -> token ids (*tok malloc'd): the engine's tokenizer, else bytes */
static scdb_err tokens_of(const scdb_calib *c, const unsigned char *text, size_t len, int32_t **tok,
                          size_t *n)
{
    *tok = NULL;
    *n = 0;
    if (c->has_eng) return c->eng.tokenize(c->eng.ud, text, len, tok, n);
    *tok = malloc((len ? len : 1) * sizeof **tok);
    if (!*tok) return SCDB_ENOMEM;
    scdb_tokenize_bytes(text, len, *tok);
    *n = len;
    return SCDB_OK;
}

/* acc[a][b] += sum_t X[t][a] Y[t][b] (float GEMM per window, double sum) */
static void acc_xty(double *acc, const float *X, const float *Y, int n, int a, int b, float *tmp)
{
    scdb_k_gemm_cpu(1, 0, a, b, n, 1.0f, X, a, Y, b, 0.0f, tmp, b);
    for (size_t i = 0; i < (size_t)a * b; i++) acc[i] += tmp[i];
}

/* The same product on c's device: X and Y there, the f32 product comes
 * down into tmp and is summed in double as acc_xty does. */
static scdb_err acc_xty_dev(const scdb_calib *c, double *acc, const float *X, const float *Y, int n,
                            int a, int b, float *dtmp, float *tmp)
{
    scdb_err rc = c->ops->gemm(1, 0, a, b, n, 1.0f, X, a, Y, b, 0.0f, dtmp, b);
    if (!rc) rc = c->ops->download(tmp, dtmp, (size_t)a * b * sizeof *tmp);
    if (rc) return rc;
    for (size_t i = 0; i < (size_t)a * b; i++) acc[i] += tmp[i];
    return SCDB_OK;
}

/* The window's forwards on c's device (scdb_calib_set_device): the states
 * stay there in dh / dk (scratch) for the moments and come down into h / k
 * for the samples and sums. */
static scdb_err window_forwards_dev(scdb_calib *c, const int32_t *tok, int n, float **h, float **k,
                                    float **dh, float **dk, float **dtmp)
{
    const int L = c->L, d = c->d, kv = c->kv;
    size_t hb = (size_t)L * n * d * sizeof(float), kb = (size_t)L * n * kv * sizeof(float);
    size_t cb = scdb_kv_cache_bytes(L, scdb_model_cfg(c->mod[0])->n_kv_heads,
                                    scdb_model_cfg(c->mod[0])->head_dim, n);
    size_t tb = (size_t)d * d * sizeof(float), a64 = 64;
    size_t per = (hb + a64) / a64 * a64 + (kb + a64) / a64 * a64;
    scdb_kv_cache *cache = NULL;
    void *s;
    scdb_err rc;

    if ((rc = cx_cal_dscratch(c, (size_t)c->nm * per + (cb + a64) / a64 * a64 + tb, &s))) return rc;
    char *p = s;
    for (int j = 0; j < c->nm; j++) {
        dh[j] = (float *)p;
        dk[j] = (float *)(p + (hb + a64) / a64 * a64);
        p += per;
    }
    if ((rc = scdb_kv_cache_view(p, cb, L, scdb_model_cfg(c->mod[0])->n_kv_heads,
                                 scdb_model_cfg(c->mod[0])->head_dim, n, &cache)))
        return rc;
    *dtmp = (float *)(p + (cb + a64) / a64 * a64);
    for (int j = 0; j < c->nm && !rc; j++) {
        scdb_capture cap = {.h_in = dh[j], .k_post = dk[j]};
        cache->n = 0;
        if (!(rc = scdb_model_dev_forward(c->mdev[j], tok, NULL, n, cache, NULL, &cap)) &&
            !(rc = c->ops->download(h[j], dh[j], hb)))
            rc = c->ops->download(k[j], dk[j], kb);
    }
    scdb_kv_cache_free(&cache);       /* the view only */
    return rc;
}

/* Samples [s0, s0 + ceil(n / stride)) of model j from its window states h. */
static void keep_samples(scdb_calib *c, int j, const float *h, int n, int s0)
{
    for (int l = 0; l < c->L; l++)
        for (int i = 0, s = s0; i < n; i += c->o.sample_stride, s++)
            memcpy(c->samp[j][l] + (size_t)s * c->d, h + ((size_t)l * n + i) * c->d,
                   (size_t)c->d * sizeof(float));
}

/* Model j's moments of one window against the producer's states (h[0],
 * k[0]); on c's device from dh / dk when c->ops. */
static scdb_err add_moments(scdb_calib *c, int j, float *const *h, float *const *k,
                            float *const *dh, float *const *dk, float *dtmp, int n, float *tmp)
{
    const int L = c->L, d = c->d, kv = c->kv;
    scdb_err rc;
    for (int l = 0; l < L; l++) {
        const float *hp = h[0] + (size_t)l * n * d, *kp = k[0] + (size_t)l * n * kv;
        const float *hj = h[j] + (size_t)l * n * d, *kj = k[j] + (size_t)l * n * kv;
        double *sh = c->sh[j] + (size_t)l * d, *sk = c->sk[j] + (size_t)l * kv;
        for (int t = 0; t < n; t++) {
            for (int a = 0; a < d; a++) sh[a] += hj[(size_t)t * d + a];
            for (int a = 0; a < kv; a++) sk[a] += kj[(size_t)t * kv + a];
        }
        if (c->ops) {
            const float *dhp = dh[0] + (size_t)l * n * d, *dkp = dk[0] + (size_t)l * n * kv;
            const float *dhj = dh[j] + (size_t)l * n * d, *dkj = dk[j] + (size_t)l * n * kv;
            if ((rc = acc_xty_dev(c, c->xh[j] + (size_t)l * d * d, dhp, dhj, n, d, d, dtmp, tmp)) ||
                (rc = acc_xty_dev(c, c->yh[j] + (size_t)l * d * d, dhj, dhj, n, d, d, dtmp, tmp)) ||
                (rc = acc_xty_dev(c, c->xk[j] + (size_t)l * kv * kv, dkp, dkj, n, kv, kv, dtmp, tmp)) ||
                (rc = acc_xty_dev(c, c->yk[j] + (size_t)l * kv * kv, dkj, dkj, n, kv, kv, dtmp, tmp)))
                return rc;
            continue;
        }
        acc_xty(c->xh[j] + (size_t)l * d * d, hp, hj, n, d, d, tmp);
        acc_xty(c->yh[j] + (size_t)l * d * d, hj, hj, n, d, d, tmp);
        acc_xty(c->xk[j] + (size_t)l * kv * kv, kp, kj, n, kv, kv, tmp);
        acc_xty(c->yk[j] + (size_t)l * kv * kv, kj, kj, n, kv, kv, tmp);
    }
    return SCDB_OK;
}

/* Grow every model's sample arrays to hold `need` samples. */
static scdb_err grow_samples(scdb_calib *c, int need)
{
    if (need <= c->scap) return SCDB_OK;
    int nc = c->scap ? c->scap * 2 : 4096;
    while (nc < need) nc *= 2;
    for (int j = 0; j < c->nm; j++)
        for (int l = 0; l < c->L; l++) {
            float *q = realloc(c->samp[j][l], (size_t)nc * c->d * sizeof(float));
            if (!q) return SCDB_ENOMEM;
            c->samp[j][l] = q;
        }
    c->scap = nc;
    return SCDB_OK;
}

static scdb_err add_window(scdb_calib *c, const int32_t *tok, int n)
{
    const int L = c->L, d = c->d, kv = c->kv;
    float *h[CX_MAXM] = {0}, *k[CX_MAXM] = {0}, *tmp = NULL;
    float *dh[CX_MAXM] = {0}, *dk[CX_MAXM] = {0}, *dtmp = NULL;   /* on c->ops's device */
    scdb_kv_cache *cache = NULL;
    scdb_err rc = SCDB_ENOMEM;

    /* the window's tokens are kept: a consumer swapped in later
     * (scdb_calib_swap_consumer) runs over the same windows */
    if (c->nwin == c->wcap) {
        int nc = c->wcap ? c->wcap * 2 : 64;
        int32_t *g = realloc(c->wtok, (size_t)nc * c->o.window * sizeof *g);
        if (!g) return SCDB_ENOMEM;
        c->wtok = g;
        c->wcap = nc;
    }
    if (n != c->o.window) return SCDB_EINVAL;
    memcpy(c->wtok + (size_t)c->nwin * c->o.window, tok, (size_t)n * sizeof *tok);
    tmp = malloc((size_t)d * d * sizeof *tmp);
    if (!tmp) goto done;
    if (!c->ops && (rc = scdb_model_cache_new(c->mod[0], n, &cache))) goto done;
    rc = SCDB_ENOMEM;
    for (int j = 0; j < c->nm; j++) {
        h[j] = malloc((size_t)L * n * d * sizeof(float));
        k[j] = malloc((size_t)L * n * kv * sizeof(float));
        if (!h[j] || !k[j]) goto done;
        if (c->ops) continue;
        if ((rc = states_of(c, c->mod[j], tok, n, cache, h[j], k[j]))) goto done;
    }
    if (c->ops && (rc = window_forwards_dev(c, tok, n, h, k, dh, dk, &dtmp))) goto done;
    c->producer_passes++;
    int take = (n + c->o.sample_stride - 1) / c->o.sample_stride;
    if ((rc = grow_samples(c, c->ns + take))) goto done;
    for (int j = 0; j < c->nm; j++) keep_samples(c, j, h[j], n, c->ns);
    c->ns += take;
    /* moments: the producer's always; the consumers' unless samples_only */
    for (int j = 0; j < (c->o.samples_only ? 1 : c->nm); j++)
        if ((rc = add_moments(c, j, h, k, dh, dk, dtmp, n, tmp))) goto done;
    c->ntok += n;
    c->nwin++;
    rc = SCDB_OK;
done:
    for (int j = 0; j < CX_MAXM; j++) { free(h[j]); free(k[j]); }
    free(tmp);
    scdb_kv_cache_free(&cache);
    return rc;
}

static void drop_evals(scdb_calib *c, int j)
{
    int kept = 0;
    for (int i = 0; i < c->nev; i++) {
        ewin *w = &c->ev[i];
        if (w->j != j) { c->ev[kept++] = *w; continue; }
        free(w->tok); free(w->ph); free(w->pk); free(w->ologp);
        scdb_kv_cache_free(&w->oracle);
    }
    c->nev = kept;
}

scdb_err scdb_calib_swap_consumer(scdb_calib *c, int ci, const scdb_model *m)
{
    const int L = c ? c->L : 0, d = c ? c->d : 0, kv = c ? c->kv : 0;
    float *h[2] = {0}, *k[2] = {0}, *tmp = NULL;
    scdb_kv_cache *cache = NULL;
    scdb_progress prog;
    scdb_err rc;

    scdb_progress_begin(&prog, NULL, 0);   /* quiet until the windows start */
    if (!c || !m || ci < 0 || ci >= c->nm - 1) return SCDB_EINVAL;
    if (!scdb_model_config_same_arch(scdb_model_cfg(c->mod[0]), scdb_model_cfg(m)))
        return SCDB_EMISMATCH;
    if (c->ops) return SCDB_EUNSUPPORTED;
    const int j = ci + 1, n = c->o.window, take = (n + c->o.sample_stride - 1) / c->o.sample_stride;
    drop_evals(c, j);
    c->mod[j] = m;
    memset(c->sh[j], 0, (size_t)L * d * sizeof(double));
    memset(c->xh[j], 0, (size_t)L * d * d * sizeof(double));
    memset(c->yh[j], 0, (size_t)L * d * d * sizeof(double));
    memset(c->sk[j], 0, (size_t)L * kv * sizeof(double));
    memset(c->xk[j], 0, (size_t)L * kv * kv * sizeof(double));
    memset(c->yk[j], 0, (size_t)L * kv * kv * sizeof(double));
    rc = SCDB_ENOMEM;
    tmp = malloc((size_t)d * d * sizeof *tmp);
    for (int x = 0; x < 2; x++) {
        h[x] = malloc((size_t)L * n * d * sizeof(float));
        k[x] = malloc((size_t)L * n * kv * sizeof(float));
        if (!h[x] || !k[x]) goto done;
    }
    if (!tmp || (rc = scdb_model_cache_new(m, n, &cache))) goto done;
    scdb_progress_begin(&prog, c->o.verbose ? stderr : NULL, c->nwin);
    for (int w = 0; w < c->nwin; w++) {
        const int32_t *tok = c->wtok + (size_t)w * n;
        if ((rc = states_of(c, m, tok, n, cache, h[1], k[1]))) goto done;
        keep_samples(c, j, h[1], n, w * take);
        if (!c->o.samples_only) {
            /* the moments pair the consumer's states with the producer's:
             * those are recomputed (counted in scdb_calib_producer_passes) */
            if ((rc = states_of(c, c->mod[0], tok, n, cache, h[0], k[0]))) goto done;
            c->producer_passes++;
            float *hh[CX_MAXM] = {h[0]}, *kk[CX_MAXM] = {k[0]};
            hh[j] = h[1];
            kk[j] = k[1];
            if ((rc = add_moments(c, j, hh, kk, NULL, NULL, NULL, n, tmp))) goto done;
        }
        scdb_progress_step(&prog, w + 1, "  consumer '%s': %d/%d windows", scdb_model_cfg(m)->name, w + 1, c->nwin);
    }
    rc = SCDB_OK;
done:
    scdb_progress_end(&prog);
    for (int x = 0; x < 2; x++) { free(h[x]); free(k[x]); }
    free(tmp);
    scdb_kv_cache_free(&cache);
    return rc;
}

int scdb_calib_producer_passes(const scdb_calib *c) { return c ? c->producer_passes : 0; }

scdb_err scdb_calib_add_text(scdb_calib *c, const unsigned char *text, size_t len,
                             int max_windows, int *added)
{
    if (added) *added = 0;
    if (!c || (!text && len)) return SCDB_EINVAL;
    int W = c->o.window, n = 0;
    int32_t *tok;
    size_t ntok;
    /* the text is tokenized once; windows are consecutive runs of W tokens */
    scdb_err rc = tokens_of(c, text, len, &tok, &ntok);
    if (rc) return rc;
    scdb_progress prog;
    long avail = (long)(ntok / (size_t)W);
    scdb_progress_begin(&prog, c->o.verbose ? stderr : NULL,
                        max_windows > 0 && max_windows < avail ? max_windows : avail);
    for (size_t off = 0; off + (size_t)W <= ntok; off += (size_t)W) {
        if (max_windows > 0 && n >= max_windows) break;
        if ((rc = add_window(c, tok + off, W))) break;
        n++;
        scdb_progress_step(&prog, n, "  statistics: %d windows (%lld tokens)", c->nwin, c->ntok);
    }
    scdb_progress_end(&prog);
    free(tok);
    if (added) *added = n;
    return rc;
}

static scdb_err add_eval_one(scdb_calib *c, int j, const int32_t *tok)
{
    const int L = c->L, d = c->d, kv = c->kv, P = c->o.eval_prefix, C = c->o.eval_cont;
    ewin w = {0};
    scdb_kv_cache *pc = NULL, *full = NULL;
    float *logits = NULL;
    scdb_err rc = SCDB_ENOMEM;

    ewin *grown = realloc(c->ev, (size_t)(c->nev + 1) * sizeof *grown);
    if (!grown) return SCDB_ENOMEM;
    c->ev = grown;
    w.j = j;
    w.tok = malloc((size_t)(P + C + 1) * sizeof *w.tok);
    w.ph = malloc((size_t)L * P * d * sizeof(float));
    w.pk = malloc((size_t)L * P * kv * sizeof(float));
    w.ologp = malloc((size_t)C * c->V * sizeof(float));
    logits = malloc((size_t)C * c->V * sizeof(float));
    if (!w.tok || !w.ph || !w.pk || !w.ologp || !logits) goto fail;
    memcpy(w.tok, tok, (size_t)(P + C + 1) * sizeof *tok);
    if ((rc = scdb_model_cache_new(c->mod[0], P, &pc))) goto fail;
    if ((rc = states_of(c, c->mod[0], w.tok, P, pc, w.ph, w.pk))) goto fail;
    if ((rc = scdb_model_cache_new(c->mod[j], P + C, &full))) goto fail;
    if ((rc = scdb_model_forward(c->mod[j], w.tok, NULL, P, full, NULL, NULL))) goto fail;
    if ((rc = scdb_model_forward(c->mod[j], w.tok + P, NULL, C, full, logits, NULL))) goto fail;
    for (int i = 0; i < C; i++) scdb_k_log_softmax_cpu(logits + (size_t)i * c->V, c->V, w.ologp + (size_t)i * c->V);
    full->n = P;   /* keep only the prefix: that is the oracle prefix cache */
    w.oracle = full;
    full = NULL;
    c->ev[c->nev++] = w;
    scdb_kv_cache_free(&pc);
    free(logits);
    return SCDB_OK;
fail:
    free(w.tok); free(w.ph); free(w.pk); free(w.ologp); free(logits);
    scdb_kv_cache_free(&pc);
    scdb_kv_cache_free(&full);
    return rc;
}

/* one held-back window of tokens for slot ci (-1: every consumer) */
static scdb_err add_eval_tokens(scdb_calib *c, int ci, const int32_t *tok)
{
    scdb_err rc = SCDB_OK;
    if (ci >= 0 || c->nm == 1) return add_eval_one(c, ci + 1, tok);
    for (int j = 1; j < c->nm && !rc; j++) rc = add_eval_one(c, j, tok);
    return rc;
}

scdb_err scdb_calib_add_eval(scdb_calib *c, int ci, const unsigned char *text, size_t len)
{
    if (!c || !text || ci < -1 || ci >= c->nm - 1) return SCDB_EINVAL;
    int need = c->o.eval_prefix + c->o.eval_cont + 1;
    if (!c->has_eng && len < (size_t)need) return SCDB_EINVAL;
    int32_t *tok;
    size_t n;
    /* the byte tokenizer reads the window's bytes only; an engine the whole
     * span, its first `need` tokens being the window */
    scdb_err rc = tokens_of(c, text, c->has_eng ? len : (size_t)need, &tok, &n);
    if (rc) return rc;
    rc = n < (size_t)need ? SCDB_ERANGE : add_eval_tokens(c, ci, tok);
    free(tok);
    return rc;
}

scdb_err scdb_calib_add_eval_text(scdb_calib *c, int ci, const unsigned char *text, size_t len,
                                  int n_windows, size_t *n_tokens)
{
    if (n_tokens) *n_tokens = 0;
    if (!c || !text || n_windows < 1 || ci < -1 || ci >= c->nm - 1) return SCDB_EINVAL;
    size_t need = (size_t)(c->o.eval_prefix + c->o.eval_cont + 1), span = need * (size_t)n_windows;
    int32_t *tok;
    size_t n;
    /* the byte tokenizer needs only the last span bytes (the same tokens) */
    if (!c->has_eng && len > span) {
        text += len - span;
        len = span;
    }
    scdb_err rc = tokens_of(c, text, len, &tok, &n);
    if (rc) return rc;
    if (n_tokens) *n_tokens = n;
    if (n < span) rc = SCDB_ERANGE;
    for (int k = 0; k < n_windows && !rc; k++) rc = add_eval_tokens(c, ci, tok + n - span + (size_t)k * need);
    free(tok);
    return rc;
}
