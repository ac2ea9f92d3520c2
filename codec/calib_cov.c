/* calib_cov.c — covariance algebra: every covariance the fits need, from the session's sums (calib.h; the method is described there). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ covariances */

/* centered covariance [a][b] of (X, Y) from sums */
static void cov_from(const double *xy, const double *sx, const double *sy, long long n, int a,
                     int b, double *out)
{
    for (int i = 0; i < a; i++)
        for (int k = 0; k < b; k++)
            out[(size_t)i * b + k] = xy[(size_t)i * b + k] / n - (sx[i] / n) * (sy[k] / n);
}

/* S_{H_p H_j} at layer l */
void cx_cal_cov_h(const scdb_calib *c, int j, int l, double *out)
{
    size_t d = (size_t)c->d;
    cov_from(c->xh[j] + l * d * d, c->sh[0] + l * d, c->sh[j] + l * d, c->ntok, c->d, c->d, out);
}
static void cov_hh(const scdb_calib *c, int j, int l, double *out)
{
    size_t d = (size_t)c->d;
    cov_from(c->yh[j] + l * d * d, c->sh[j] + l * d, c->sh[j] + l * d, c->ntok, c->d, c->d, out);
}
void cx_cal_cov_k(const scdb_calib *c, int j, int l, double *out)
{
    size_t kv = (size_t)c->kv;
    cov_from(c->xk[j] + l * kv * kv, c->sk[0] + l * kv, c->sk[j] + l * kv, c->ntok, c->kv, c->kv, out);
}
static void cov_kk(const scdb_calib *c, int j, int l, double *out)
{
    size_t kv = (size_t)c->kv;
    cov_from(c->yk[j] + l * kv * kv, c->sk[j] + l * kv, c->sk[j] + l * kv, c->ntok, c->kv, c->kv, out);
}

/* out[a][o] = S[a][b] W^T  with W [o][b] f32 (nn.Linear) */
static void mul_wt(const double *S, int a, int b, const float *W, int o, double *out)
{
    for (int i = 0; i < a; i++)
        for (int k = 0; k < o; k++) {
            double s = 0.0;
            for (int q = 0; q < b; q++) s += S[(size_t)i * b + q] * W[(size_t)k * b + q];
            out[(size_t)i * o + k] = s;
        }
}

/* W S W^T  (o x o) */
void cx_cal_sandwich(const float *W, int o, int b, const double *S, double *out)
{
    double *t = malloc((size_t)b * o * sizeof *t);
    if (!t) return;
    mul_wt(S, b, b, W, o, t);                 /* S W^T  [b][o] */
    for (int i = 0; i < o; i++)
        for (int k = 0; k < o; k++) {
            double s = 0.0;
            for (int q = 0; q < b; q++) s += (double)W[(size_t)i * b + q] * t[(size_t)q * o + k];
            out[(size_t)i * o + k] = s;
        }
    free(t);
}

const float *cx_cal_part_w(const scdb_calib *c, int j, int l, int p)
{
    const scdb_layer_weights *w = scdb_model_layer(c->mod[j], l);
    return p == CX_K ? w->wk : w->wv;
}

/* Cross-covariance of the part's encoder input (producer) with model j's
 * part target: [in][t], and the target covariance's trace. */
scdb_err cx_cal_part_stats(const scdb_calib *c, int l, int p, int j, int post, double *sxy,
                           double *tr_yy)
{
    int d = c->d, kv = c->kv;
    double *S = malloc((size_t)d * d * sizeof *S), *T = malloc((size_t)d * d * sizeof *T);
    if (!S || !T) { free(S); free(T); return SCDB_ENOMEM; }
    if (p == CX_K && post) {
        cx_cal_cov_k(c, j, l, sxy);
        cov_kk(c, j, l, S);
        double tr = 0;
        for (int i = 0; i < kv; i++) tr += S[(size_t)i * kv + i];
        *tr_yy = tr;
    } else if (p == CX_H) {
        cx_cal_cov_h(c, j, l, sxy);
        cov_hh(c, j, l, S);
        double tr = 0;
        for (int i = 0; i < d; i++) tr += S[(size_t)i * d + i];
        *tr_yy = tr;
    } else {
        const float *W = cx_cal_part_w(c, j, l, p);
        cx_cal_cov_h(c, j, l, S);
        mul_wt(S, d, d, W, kv, sxy);
        cov_hh(c, j, l, S);
        cx_cal_sandwich(W, kv, d, S, T);
        double tr = 0;
        for (int i = 0; i < kv; i++) tr += T[(size_t)i * kv + i];
        *tr_yy = tr;
    }
    free(S);
    free(T);
    return SCDB_OK;
}
