/* aligner.c — the patch aligner MLP  h = W2 silu(W1 z + b1) + b2 + S z  and
 * its training by Adam, written out in C (forward, backward, update).
 *
 * Loss: mean over samples of e M e^T with e = h - h*, where
 *   M = Wk^T Wk / var(K*) + Wv^T Wv / var(V*)     (MSE of the regenerated K
 *   and V, each relative to its total variance), or I / var(h*) without Wk/Wv.
 * Start: the skip S and b2 are the ordinary least-squares map z -> h* (which
 * minimises every such weighted loss among linear maps), W2 = 0, W1 small
 * random: the MLP starts exactly at the linear solution.  Every 10th sample
 * is held out: the validation loss is checked every 100 steps and the best
 * parameters seen (the linear start included) are kept, so a layer where the
 * MLP overfits falls back towards the linear map.  Inputs are standardised
 * per dimension during training and the scaling is folded back into W1 and
 * S at the end.
 *
 * The Adam loop runs through a kernels.h ops table (scdb_aligner_train.ops;
 * the CPU table by default, whose twins are this loop's former inline loops
 * and BLAS calls, in the same order): the training samples, the metric, the
 * parameters and their moments live on the table's device; each step's
 * batch indices go up and the parameters come down only every 100 steps,
 * for the validation on the host. */
#include "codec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void scdb_aligner_clear(scdb_aligner *a)
{
    if (!a) return;
    free(a->w1); free(a->b1); free(a->w2); free(a->b2); free(a->skip);
    memset(a, 0, sizeof *a);
}

static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

scdb_err scdb_aligner_apply(const scdb_aligner *a, const float *z, int ldz, int n, float *h)
{
    float *s = malloc((size_t)n * a->hidden * sizeof *s);
    if (!s) return SCDB_ENOMEM;
    for (int i = 0; i < n; i++) memcpy(s + (size_t)i * a->hidden, a->b1, (size_t)a->hidden * sizeof *s);
    scdb_k_gemm_cpu(0, 1, n, a->hidden, a->r, 1.0f, z, ldz, a->w1, a->r, 1.0f, s, a->hidden);
    for (size_t i = 0; i < (size_t)n * a->hidden; i++) s[i] = s[i] * sigm(s[i]);
    for (int i = 0; i < n; i++) memcpy(h + (size_t)i * a->d, a->b2, (size_t)a->d * sizeof *h);
    scdb_k_gemm_cpu(0, 1, n, a->d, a->hidden, 1.0f, s, a->hidden, a->w2, a->hidden, 1.0f, h, a->d);
    scdb_k_gemm_cpu(0, 1, n, a->d, a->r, 1.0f, z, ldz, a->skip, a->r, 1.0f, h, a->d);
    free(s);
    return SCDB_OK;
}

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static float gauss(uint64_t *s)
{
    double u1 = ((xs(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (xs(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* mean of e M e^T over rows, e = h - t */
static double weighted_loss(const float *h, const float *t, int n, int d, const float *M)
{
    double tot = 0.0;
    float *e = malloc((size_t)d * sizeof *e), *em = malloc((size_t)d * sizeof *em);
    if (!e || !em) { free(e); free(em); return NAN; }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < d; j++) e[j] = h[(size_t)i * d + j] - t[(size_t)i * d + j];
        scdb_k_gemm_cpu(0, 0, 1, d, d, 1.0f, e, d, M, d, 0.0f, em, d);
        for (int j = 0; j < d; j++) tot += (double)e[j] * em[j];
    }
    free(e);
    free(em);
    return tot / n;
}

/* Ordinary least squares [z 1] -> h: skip [d][r], b [d]. */
scdb_err cx_ols(const float *z, const float *h, int n, int r, int d, float *skip, float *b)
{
    int p = r + 1;
    double *A = calloc((size_t)p * p, sizeof *A), *B = calloc((size_t)p * d, sizeof *B);
    if (!A || !B) { free(A); free(B); return SCDB_ENOMEM; }
    for (int i = 0; i < n; i++) {
        const float *zi = z + (size_t)i * r, *hi = h + (size_t)i * d;
        for (int a = 0; a < p; a++) {
            double za = a < r ? zi[a] : 1.0;
            for (int c = 0; c <= a; c++) A[(size_t)a * p + c] += za * (c < r ? zi[c] : 1.0);
            for (int c = 0; c < d; c++) B[(size_t)a * d + c] += za * hi[c];
        }
    }
    double tr = 0.0;
    for (int a = 0; a < p; a++) {
        for (int c = 0; c < a; c++) A[(size_t)c * p + a] = A[(size_t)a * p + c];
        tr += A[(size_t)a * p + a];
    }
    for (int a = 0; a < r; a++) A[(size_t)a * p + a] += 1e-6 * tr / p + 1e-12;
    if (cx_cholesky(A, p)) { free(A); free(B); return SCDB_ERANGE; }
    cx_chol_solve(A, p, B, d);
    for (int c = 0; c < d; c++) {
        for (int a = 0; a < r; a++) skip[(size_t)c * r + a] = (float)B[(size_t)a * d + c];
        b[c] = (float)B[(size_t)r * d + c];
    }
    free(A);
    free(B);
    return SCDB_OK;
}

scdb_err scdb_aligner_fit(const float *z, const float *h, int n, int r, int d,
                          const float *wk, const float *wv, int kv_dim,
                          const scdb_aligner_train *t, scdb_aligner *out,
                          double *loss_before, double *loss_after)
{
    scdb_aligner a = {0};
    int H = t && t->hidden > 0 ? t->hidden : 128;
    int steps = t && t->steps >= 0 ? t->steps : 1500;
    int B = t && t->batch > 0 ? t->batch : 256;
    float lr0 = t && t->lr > 0 ? t->lr : 2e-3f;
    uint64_t seed = t && t->seed ? t->seed : 0x9e3779b97f4a7c15ull;
    const scdb_k_ops *o = t && t->ops ? t->ops : scdb_k_ops_get(SCDB_DEV_CPU);
    float *M = NULL, *zs = NULL, *scale = NULL;
    float *zt = NULL, *ht = NULL, *zv = NULL, *hv = NULL, *hov = NULL, *best[5] = {0};
    int32_t *idx = NULL;
    /* on o's device: samples, metric, batch buffers, parameters, gradients,
     * moments (one allocation each, released together) */
    enum { D_ZT, D_HT, D_M, D_ZB, D_TB, D_AB, D_SB, D_HB, D_GH, D_GS, D_IDX,
           D_P0, D_G0 = D_P0 + 5, D_M0 = D_G0 + 5, D_V0 = D_M0 + 5, D_N = D_V0 + 5 };
    void *dv[D_N] = {0};
    scdb_progress prog;
    scdb_err rc = SCDB_ENOMEM;

    if (!z || !h || n < 2 || r < 1 || d < 1 || !out || ((wk || wv) && kv_dim < 1)) return SCDB_EINVAL;
    scdb_progress_begin(&prog, t && t->verbose ? stderr : NULL, steps);
    if (B > n) B = n;
    memset(out, 0, sizeof *out);
    a.r = r; a.hidden = H; a.d = d;
    a.w1 = calloc((size_t)H * r, sizeof(float));
    a.b1 = calloc((size_t)H, sizeof(float));
    a.w2 = calloc((size_t)d * H, sizeof(float));
    a.b2 = calloc((size_t)d, sizeof(float));
    a.skip = calloc((size_t)d * r, sizeof(float));
    M = calloc((size_t)d * d, sizeof *M);
    zs = malloc((size_t)n * r * sizeof *zs);
    scale = malloc((size_t)r * sizeof *scale);
    if (!a.w1 || !a.b1 || !a.w2 || !a.b2 || !a.skip || !M || !zs || !scale) goto done;

    /* loss metric M */
    double var[3] = {0, 0, 0};
    {
        double *mu = calloc((size_t)d, sizeof *mu);
        if (!mu) goto done;
        for (int i = 0; i < n; i++) for (int j = 0; j < d; j++) mu[j] += h[(size_t)i * d + j];
        for (int j = 0; j < d; j++) mu[j] /= n;
        /* covariance of h* (d x d) -> var of K* = tr(Wk C Wk^T) */
        double *C = calloc((size_t)d * d, sizeof *C);
        if (!C) { free(mu); goto done; }
        for (int i = 0; i < n; i++) {
            const float *hi = h + (size_t)i * d;
            for (int p = 0; p < d; p++) {
                double dp = hi[p] - mu[p];
                for (int q = 0; q <= p; q++) C[(size_t)p * d + q] += dp * (hi[q] - mu[q]);
            }
        }
        for (int p = 0; p < d; p++) for (int q = 0; q <= p; q++) {
            C[(size_t)p * d + q] /= n;
            C[(size_t)q * d + p] = C[(size_t)p * d + q];
        }
        const float *W[2] = {wk, wv};
        for (int w = 0; w < 2; w++) {
            if (!W[w]) continue;
            double s = 0.0;
            for (int k = 0; k < kv_dim; k++)
                for (int p = 0; p < d; p++) {
                    double acc = 0.0;
                    for (int q = 0; q < d; q++) acc += C[(size_t)p * d + q] * W[w][(size_t)k * d + q];
                    s += acc * W[w][(size_t)k * d + p];
                }
            var[w] = s > 1e-12 ? s : 1e-12;
        }
        for (int p = 0; p < d; p++) var[2] += C[(size_t)p * d + p];
        free(C);
        free(mu);
    }
    if (wk || wv) {
        const float *W[2] = {wk, wv};
        for (int w = 0; w < 2; w++) {
            if (!W[w]) continue;
            for (int p = 0; p < d; p++)
                for (int q = 0; q < d; q++) {
                    double s = 0.0;
                    for (int k = 0; k < kv_dim; k++)
                        s += (double)W[w][(size_t)k * d + p] * W[w][(size_t)k * d + q];
                    M[(size_t)p * d + q] += (float)(s / var[w]);
                }
        }
    } else {
        for (int p = 0; p < d; p++) M[(size_t)p * d + p] = (float)(1.0 / (var[2] > 1e-12 ? var[2] : 1e-12));
    }

    /* standardise inputs */
    for (int j = 0; j < r; j++) {
        double s2 = 0.0;
        for (int i = 0; i < n; i++) s2 += (double)z[(size_t)i * r + j] * z[(size_t)i * r + j];
        scale[j] = (float)sqrt(s2 / n);
        if (!(scale[j] > 1e-8f)) scale[j] = 1.0f;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < r; j++) zs[(size_t)i * r + j] = z[(size_t)i * r + j] / scale[j];

    /* split: every 10th sample validates (all of them when there are few) */
    int nv = n >= 20 ? n / 10 : n, nt = n >= 20 ? n - nv : n;
    zt = malloc((size_t)nt * r * sizeof *zt);
    ht = malloc((size_t)nt * d * sizeof *ht);
    zv = malloc((size_t)nv * r * sizeof *zv);
    hv = malloc((size_t)nv * d * sizeof *hv);
    hov = malloc((size_t)nv * d * sizeof *hov);
    if (!zt || !ht || !zv || !hv || !hov) goto done;
    for (int i = 0, it = 0, iv = 0; i < n; i++) {
        int val = n >= 20 ? (i % 10 == 9 && iv < nv) : 1, trn = n >= 20 ? !val : 1;
        if (val) {
            memcpy(zv + (size_t)iv * r, zs + (size_t)i * r, (size_t)r * sizeof *zv);
            memcpy(hv + (size_t)iv * d, h + (size_t)i * d, (size_t)d * sizeof *hv);
            iv++;
        }
        if (trn && it < nt) {
            memcpy(zt + (size_t)it * r, zs + (size_t)i * r, (size_t)r * sizeof *zt);
            memcpy(ht + (size_t)it * d, h + (size_t)i * d, (size_t)d * sizeof *ht);
            it++;
        }
    }
    if ((rc = cx_ols(zt, ht, nt, r, d, a.skip, a.b2))) goto done;
    rc = SCDB_ENOMEM;
    float wscale = 1.0f / sqrtf((float)r);
    for (size_t i = 0; i < (size_t)H * r; i++) a.w1[i] = wscale * gauss(&seed);
    for (int i = 0; i < H; i++) a.b1[i] = 0.1f * gauss(&seed);

    /* validation loss of the linear start; it is the first "best" */
    if (scdb_aligner_apply(&a, zv, r, nv, hov)) goto done;
    double best_val = weighted_loss(hov, hv, nv, d, M);
    if (loss_before) *loss_before = best_val;
    size_t psz[5] = {(size_t)H * r, (size_t)H, (size_t)d * H, (size_t)d, (size_t)d * r};
    float *cur[5] = {a.w1, a.b1, a.w2, a.b2, a.skip};
    for (int i = 0; i < 5; i++) {
        best[i] = malloc(psz[i] * sizeof(float));
        if (!best[i]) goto done;
        memcpy(best[i], cur[i], psz[i] * sizeof(float));
    }
    int best_step = 0;

    size_t dsz[D_N] = {[D_ZT] = (size_t)nt * r, [D_HT] = (size_t)nt * d, [D_M] = (size_t)d * d,
                       [D_ZB] = (size_t)B * r, [D_TB] = (size_t)B * d, [D_AB] = (size_t)B * H,
                       [D_SB] = (size_t)B * H, [D_HB] = (size_t)B * d, [D_GH] = (size_t)B * d,
                       [D_GS] = (size_t)B * H, [D_IDX] = (size_t)B};
    for (int i = 0; i < 5; i++)
        dsz[D_P0 + i] = dsz[D_G0 + i] = dsz[D_M0 + i] = dsz[D_V0 + i] = psz[i];
    if (!(idx = malloc((size_t)B * sizeof *idx))) goto done;
    for (int i = 0; i < D_N; i++)
        if ((rc = o->alloc(dsz[i] * sizeof(float), &dv[i]))) goto done;
    float *dzt = dv[D_ZT], *dht = dv[D_HT], *dM = dv[D_M], *zb = dv[D_ZB], *tb = dv[D_TB],
          *ab = dv[D_AB], *sb = dv[D_SB], *hb = dv[D_HB], *gh = dv[D_GH], *gs = dv[D_GS];
    int32_t *didx = dv[D_IDX];
    float *dp[5], *dg[5], *dm[5], *dvv[5];
    for (int i = 0; i < 5; i++) {
        dp[i] = dv[D_P0 + i];
        dg[i] = dv[D_G0 + i];
        dm[i] = dv[D_M0 + i];
        dvv[i] = dv[D_V0 + i];
        if ((rc = o->upload(dp[i], cur[i], psz[i] * sizeof(float))) ||
            (rc = o->zero(dm[i], psz[i] * sizeof(float))) ||
            (rc = o->zero(dvv[i], psz[i] * sizeof(float))))
            goto done;
    }
    if ((rc = o->upload(dzt, zt, dsz[D_ZT] * sizeof(float))) ||
        (rc = o->upload(dht, ht, dsz[D_HT] * sizeof(float))) ||
        (rc = o->upload(dM, M, dsz[D_M] * sizeof(float))))
        goto done;
    float *w1 = dp[0], *b1 = dp[1], *w2 = dp[2], *b2 = dp[3], *skip = dp[4];
    float *gw1 = dg[0], *gb1 = dg[1], *gw2 = dg[2], *gb2 = dg[3], *gsk = dg[4];

    for (int step = 1; step <= steps; step++) {
        /* batch (the indices from the host's generator) */
        for (int i = 0; i < B; i++) idx[i] = (int32_t)(xs(&seed) % (uint64_t)nt);
        if ((rc = o->upload(didx, idx, (size_t)B * sizeof *idx)) ||
            (rc = o->gather_rows(dzt, r, didx, B, zb)) || (rc = o->gather_rows(dht, d, didx, B, tb)))
            goto done;
        /* forward */
        if ((rc = o->bias_rows(ab, b1, B, H)) ||
            (rc = o->gemm(0, 1, B, H, r, 1.0f, zb, r, w1, r, 1.0f, ab, H)) ||
            (rc = o->silu(ab, (size_t)B * H, sb)) || (rc = o->bias_rows(hb, b2, B, d)) ||
            (rc = o->gemm(0, 1, B, d, H, 1.0f, sb, H, w2, H, 1.0f, hb, d)) ||
            (rc = o->gemm(0, 1, B, d, r, 1.0f, zb, r, skip, r, 1.0f, hb, d)) ||
            /* gh = 2 (h - t) M / B */
            (rc = o->sub(hb, tb, (size_t)B * d)) ||
            (rc = o->gemm(0, 0, B, d, d, 2.0f / B, hb, d, dM, d, 0.0f, gh, d)) ||
            /* grads */
            (rc = o->gemm(1, 0, d, H, B, 1.0f, gh, d, sb, H, 0.0f, gw2, H)) ||
            (rc = o->gemm(1, 0, d, r, B, 1.0f, gh, d, zb, r, 0.0f, gsk, r)) ||
            (rc = o->colsum(gh, B, d, gb2)) ||
            (rc = o->gemm(0, 0, B, H, d, 1.0f, gh, d, w2, H, 0.0f, gs, H)) ||
            (rc = o->silu_backward(gs, ab, (size_t)B * H)) ||
            (rc = o->gemm(1, 0, H, r, B, 1.0f, gs, H, zb, r, 0.0f, gw1, r)) ||
            (rc = o->colsum(gs, B, H, gb1)))
            goto done;
        /* cosine-decayed Adam */
        float lr = lr0 * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * (float)step / (float)steps)));
        for (int i = 0; i < 5; i++)
            if ((rc = o->adam_step(dp[i], dg[i], dm[i], dvv[i], psz[i], lr, step))) goto done;
        if (step % 100 == 0 || step == steps) {
            for (int i = 0; i < 5; i++)
                if ((rc = o->download(cur[i], dp[i], psz[i] * sizeof(float)))) goto done;
            rc = SCDB_ENOMEM;
            if (scdb_aligner_apply(&a, zv, r, nv, hov)) goto done;
            double vl = weighted_loss(hov, hv, nv, d, M);
            if (vl < best_val) {
                best_val = vl;
                best_step = step;
                for (int i = 0; i < 5; i++) memcpy(best[i], cur[i], psz[i] * sizeof(float));
            }
        }
        scdb_progress_step(&prog, step, "    adam step %d/%d", step, steps);
    }
    scdb_progress_end(&prog);
    for (int i = 0; i < 5; i++) memcpy(cur[i], best[i], psz[i] * sizeof(float));
    if (loss_after) *loss_after = best_val;
    if (t && t->verbose)
        fprintf(stderr, "    kept the parameters of step %d (best validation loss)\n", best_step);
    /* fold the input scaling back */
    for (int i = 0; i < H; i++) for (int j = 0; j < r; j++) a.w1[(size_t)i * r + j] /= scale[j];
    for (int i = 0; i < d; i++) for (int j = 0; j < r; j++) a.skip[(size_t)i * r + j] /= scale[j];
    *out = a;
    memset(&a, 0, sizeof a);
    rc = SCDB_OK;
done:
    scdb_progress_end(&prog);
    scdb_aligner_clear(&a);
    for (int i = 0; i < D_N; i++) o->release(dv[i]);
    free(idx);
    free(M); free(zs); free(scale);
    free(zt); free(ht); free(zv); free(hv); free(hov);
    for (int i = 0; i < 5; i++) free(best[i]);
    return rc;
}
