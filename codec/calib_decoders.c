/* calib_decoders.c — decoders: least squares from a layer's codes to a consumer's K and V, and a pair's skeleton (decoders of every layer, no aligners yet) (calib.h; the method is described there). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ decoders */

/* Encoder matrix of layer l restricted to the parts that read H_in (all of
 * them unless K is post-RoPE): E [d][w] with zero columns for other parts. */
void cx_cal_layer_enc_h(const scdb_codebook *cb, int l, int d, double *E)
{
    const scdb_cb_layer *L = &cb->info.layers[l];
    int w = L->width, col = 0;
    memset(E, 0, (size_t)d * (w ? w : 1) * sizeof *E);
    for (int p = 0; p < 3; p++) {
        const cx_enc *e = &cb->part[l][p];
        int r = p == CX_K ? L->r_k : p == CX_V ? L->r_v : L->r_h;
        if (r && !(p == CX_K && cb->info.k_post_rope))
            for (int k = 0; k < r; k++)
                for (int a = 0; a < d; a++) E[(size_t)a * w + col + k] = e->enc[(size_t)k * d + a];
        col += r;
    }
}

/* D = (E^T Sxx E + eps)^-1 E^T Sxy : [w][t]; returns relative error via *rel */
static scdb_err ls_decode(const double *E, int in, int w, const double *Sxx, const double *Sxy,
                          int t, double tr_yy, double *D, double *rel)
{
    double *SE = malloc((size_t)in * w * sizeof *SE), *A = malloc((size_t)w * w * sizeof *A);
    double *R = malloc((size_t)w * t * sizeof *R);
    if (!SE || !A || !R) { free(SE); free(A); free(R); return SCDB_ENOMEM; }
    for (int a = 0; a < in; a++)
        for (int k = 0; k < w; k++) {
            double s = 0.0;
            for (int b = 0; b < in; b++) s += Sxx[(size_t)a * in + b] * E[(size_t)b * w + k];
            SE[(size_t)a * w + k] = s;
        }
    double tr = 0.0;
    for (int k = 0; k < w; k++)
        for (int m = 0; m <= k; m++) {
            double s = 0.0;
            for (int a = 0; a < in; a++) s += E[(size_t)a * w + k] * SE[(size_t)a * w + m];
            A[(size_t)k * w + m] = A[(size_t)m * w + k] = s;
        }
    for (int k = 0; k < w; k++) tr += A[(size_t)k * w + k];
    for (int k = 0; k < w; k++) {
        int zero = 1;
        for (int a = 0; a < in; a++) if (E[(size_t)a * w + k] != 0.0) { zero = 0; break; }
        A[(size_t)k * w + k] += (zero ? 1.0 : 1e-9 * tr / (w ? w : 1)) + 1e-30;
    }
    for (int k = 0; k < w; k++)
        for (int o = 0; o < t; o++) {
            double s = 0.0;
            for (int a = 0; a < in; a++) s += E[(size_t)a * w + k] * Sxy[(size_t)a * t + o];
            R[(size_t)k * t + o] = s;
        }
    memcpy(D, R, (size_t)w * t * sizeof *D);
    if (cx_cholesky(A, w)) { free(SE); free(A); free(R); return SCDB_ERANGE; }
    cx_chol_solve(A, w, D, t);
    double expl = 0.0;
    for (size_t i = 0; i < (size_t)w * t; i++) expl += D[i] * R[i];
    if (rel) *rel = tr_yy > 0 ? (tr_yy - expl) / tr_yy : 0.0;
    free(SE); free(A); free(R);
    return SCDB_OK;
}

/* Decoders of model j for layer l into pair layer L. */
static scdb_err fit_decoders(const scdb_calib *c, const scdb_codebook *cb, int j, int l,
                             cx_player *P, double *relk, double *relv)
{
    int d = c->d, kv = c->kv, w = cb->info.layers[l].width;
    int post = cb->info.k_post_rope;
    double *E = malloc((size_t)d * (w ? w : 1) * sizeof *E), *Sxx = malloc((size_t)d * d * sizeof *Sxx);
    double *Sxy = malloc((size_t)d * d * sizeof *Sxy), *D = malloc((size_t)(w ? w : 1) * d * sizeof *D);
    double *mh_s = NULL;
    scdb_err rc = SCDB_ENOMEM;
    P->mk = calloc((size_t)kv, sizeof(float));
    P->mv = calloc((size_t)kv, sizeof(float));
    P->dk = calloc((size_t)kv * (w ? w : 1), sizeof(float));
    P->dv = calloc((size_t)kv * (w ? w : 1), sizeof(float));
    if (!E || !Sxx || !Sxy || !D || !P->mk || !P->mv || !P->dk || !P->dv) goto done;
    /* means; a samples-only consumer's from its samples (no moments kept) */
    const double *mh = c->sh[j] + (size_t)l * d;
    if (c->o.samples_only && j > 0) {
        if (!(mh_s = malloc((size_t)d * sizeof *mh_s))) goto done;
        for (int a = 0; a < d; a++) {
            double s = 0.0;
            for (int i = 0; i < c->ns; i++) s += c->samp[j][l][(size_t)i * d + a];
            mh_s[a] = s * (double)c->ntok / (c->ns ? c->ns : 1);   /* scaled as a sum */
        }
        mh = mh_s;
    }
    for (int pp = 0; pp < 2; pp++) {
        const float *W = cx_cal_part_w(c, j, l, pp);
        float *m = pp ? P->mv : P->mk;
        for (int o = 0; o < kv; o++) {
            double s = 0.0;
            if (pp == 0 && post) s = c->sk[j][(size_t)l * kv + o];
            else for (int a = 0; a < d; a++) s += mh[a] * W[(size_t)o * d + a];
            m[o] = (float)(s / c->ntok);
        }
    }
    if (w == 0) { rc = SCDB_OK; *relk = *relv = 1.0; goto done; }
    cx_cal_layer_enc_h(cb, l, d, E);
    cx_cal_cov_h(c, 0, l, Sxx);
    for (int pp = 0; pp < 2; pp++) {
        double tr;
        float *dst = pp ? P->dv : P->dk;
        double *rel = pp ? relv : relk;
        if (pp == 0 && post) {
            /* K after RoPE: from the K part only (input: producer K post-RoPE) */
            const scdb_cb_layer *CL = &cb->info.layers[l];
            int r = CL->r_k;
            const cx_enc *e = &cb->part[l][CX_K];
            double *Ek = calloc((size_t)kv * (r ? r : 1), sizeof *Ek), *Skk = malloc((size_t)kv * kv * sizeof *Skk);
            double *Sky = malloc((size_t)kv * kv * sizeof *Sky), *Dk = malloc((size_t)(r ? r : 1) * kv * sizeof *Dk);
            if (!Ek || !Skk || !Sky || !Dk) { free(Ek); free(Skk); free(Sky); free(Dk); goto done; }
            for (int k = 0; k < r; k++) for (int a = 0; a < kv; a++) Ek[(size_t)a * r + k] = e->enc[(size_t)k * kv + a];
            cx_cal_cov_k(c, 0, l, Skk);
            if ((rc = cx_cal_part_stats(c, l, CX_K, j, 1, Sky, &tr)) ||
                (r && (rc = ls_decode(Ek, kv, r, Skk, Sky, kv, tr, Dk, rel)))) {
                free(Ek); free(Skk); free(Sky); free(Dk);
                goto done;
            }
            if (!r) *rel = 1.0;
            for (int o = 0; o < kv; o++)
                for (int k = 0; k < r; k++) dst[(size_t)o * w + k] = (float)Dk[(size_t)k * kv + o];
            free(Ek); free(Skk); free(Sky); free(Dk);
            continue;
        }
        if ((rc = cx_cal_part_stats(c, l, pp, j, 0, Sxy, &tr))) goto done;
        if ((rc = ls_decode(E, d, w, Sxx, Sxy, kv, tr, D, rel))) goto done;
        for (int o = 0; o < kv; o++)
            for (int k = 0; k < w; k++) dst[(size_t)o * w + k] = (float)D[(size_t)k * kv + o];
    }
    rc = SCDB_OK;
done:
    free(E); free(Sxx); free(Sxy); free(D); free(mh_s);
    return rc;
}

/* A pair with decoders only (no aligners) for model j. */
scdb_err cx_cal_pair_skeleton(const scdb_calib *c, const scdb_codebook *cb, int j, scdb_pair **out,
                              double *relk, double *relv)
{
    const scdb_model *m = c->mod[j];
    const scdb_model_config *mc = scdb_model_cfg(m);
    scdb_pair *p = cx_pair_alloc();
    scdb_err rc;
    if (!p) return SCDB_ENOMEM;
    scdb_pair_info *in = &p->info;
    in->codebook_id = cb->info.id;
    memcpy(in->codebook_hex, cb->info.id_hex, sizeof in->codebook_hex);
    snprintf(in->producer, sizeof in->producer, "%s", cb->info.producer);
    snprintf(in->consumer, sizeof in->consumer, "%s", mc->name);
    memcpy(in->producer_fp, cb->info.producer_fp, sizeof in->producer_fp);
    memcpy(in->arch_fp, cb->info.arch_fp, sizeof in->arch_fp);
    if ((rc = cx_model_fp(m, in->consumer_fp, NULL, 0))) goto fail;
    in->n_layers = mc->n_layers;
    if ((rc = cx_pair_alloc_layers(p, in->n_layers))) goto fail;
    in->d_model = mc->d_model;
    in->n_kv_heads = mc->n_kv_heads;
    in->head_dim = mc->head_dim;
    in->kv_dim = scdb_model_kv_dim(mc);
    in->vocab_size = mc->vocab_size;
    in->rope_theta = mc->rope_theta;
    in->norm_eps = mc->norm_eps;
    p->k_post_rope = cb->info.k_post_rope;
    for (int l = 0; l < in->n_layers; l++) p->layers[l] = cb->info.layers[l];
    p->code_dim = cb->info.code_dim;
    for (int l = 0; l < in->n_layers; l++) {
        double rk = 0, rv = 0;
        if (p->layers[l].kind != SCDB_CB_CODED) continue;
        if ((rc = fit_decoders(c, cb, j, l, &p->L[l], &rk, &rv))) goto fail;
        if (relk) relk[l] = rk;
        if (relv) relv[l] = rv;
    }
    if (cb->info.layers[0].kind == SCDB_CB_TOKENS) {
        /* the token layer: the consumer's embedding, attention norm, Wk, Wv */
        const scdb_layer_weights *w0 = scdb_model_layer(m, 0);
        size_t d = (size_t)in->d_model, kv = (size_t)in->kv_dim;
        in->has_tokens = 1;
        p->emb = malloc((size_t)in->vocab_size * d * sizeof(float));
        p->norm0 = malloc(d * sizeof(float));
        p->wk0 = malloc(kv * d * sizeof(float));
        p->wv0 = malloc(kv * d * sizeof(float));
        if (!p->emb || !p->norm0 || !p->wk0 || !p->wv0) { rc = SCDB_ENOMEM; goto fail; }
        int32_t t;
        for (t = 0; t < in->vocab_size; t++)
            if ((rc = scdb_model_embed(m, &t, 1, p->emb + (size_t)t * d))) goto fail;
        memcpy(p->norm0, w0->attn_norm, d * sizeof(float));
        memcpy(p->wk0, w0->wk, kv * d * sizeof(float));
        memcpy(p->wv0, w0->wv, kv * d * sizeof(float));
    }
    *out = p;
    return SCDB_OK;
fail:
    scdb_pair_free(&p);
    return rc;
}

/* ------------------------------------------------------------ token input */

struct cx_ls {
    int n, p;
    const float *X;
    double *A;        /* Cholesky factor of [X 1]^T [X 1] + ridge, (p + 1)^2 */
};

scdb_err cx_ls_new(const float *X, int n, int p, int pt, cx_ls **out)
{
    int q = p + 1;
    cx_ls *s = calloc(1, sizeof *s);
    double *A = calloc((size_t)q * q, sizeof *A);
    *out = NULL;
    if (!s || !A) { free(s); free(A); return SCDB_ENOMEM; }
    /* lower triangle, row by row (cx_ols's sums, in double) */
    for (int i = 0; i < n; i++) {
        const float *x = X + (size_t)i * p;
        for (int a = 0; a < q; a++) {
            double xa = a < p ? x[a] : 1.0;
            double *Ar = A + (size_t)a * q;
            for (int c = 0; c < p && c <= a; c++) Ar[c] += xa * x[c];
            if (a == p) Ar[p] += 1.0;
        }
    }
    double tr = 0.0;
    for (int a = 0; a < q; a++) {
        for (int c = 0; c < a; c++) A[(size_t)c * q + a] = A[(size_t)a * q + c];
        tr += A[(size_t)a * q + a];
    }
    for (int a = 0; a < p; a++) A[(size_t)a * q + a] += 1e-6 * tr / q + 1e-12;
    /* the last pt columns (h0): a ridge relative to their mean variance */
    double vt = 0.0;
    for (int a = p - pt; a < p; a++) {
        double sa = A[(size_t)p * q + a];
        vt += A[(size_t)a * q + a] - sa * sa / (n ? n : 1);
    }
    for (int a = p - pt; a < p && pt > 0; a++) A[(size_t)a * q + a] += CX_TOK_RIDGE * vt / pt;
    if (cx_cholesky(A, q)) { free(s); free(A); return SCDB_ERANGE; }
    s->n = n; s->p = p; s->X = X; s->A = A;
    *out = s;
    return SCDB_OK;
}

void cx_ls_free(cx_ls **ps)
{
    if (!ps || !*ps) return;
    free((*ps)->A);
    free(*ps);
    *ps = NULL;
}

scdb_err cx_ls_fit(const cx_ls *s, const float *Y, int o, float *W, float *b, double *rel)
{
    int n = s->n, p = s->p, q = p + 1;
    double *B = calloc((size_t)q * o, sizeof *B), *mu = calloc((size_t)o, sizeof *mu);
    if (!B || !mu) { free(B); free(mu); return SCDB_ENOMEM; }
    for (int i = 0; i < n; i++) {
        const float *x = s->X + (size_t)i * p, *y = Y + (size_t)i * o;
        for (int a = 0; a < q; a++) {
            double xa = a < p ? x[a] : 1.0, *Br = B + (size_t)a * o;
            for (int c = 0; c < o; c++) Br[c] += xa * y[c];
        }
    }
    for (int c = 0; c < o; c++) mu[c] = B[(size_t)p * o + c] / (n ? n : 1);
    cx_chol_solve(s->A, q, B, o);
    for (int c = 0; c < o; c++) {
        for (int a = 0; a < p; a++) W[(size_t)c * p + a] = (float)B[(size_t)a * o + c];
        b[c] = (float)B[(size_t)p * o + c];
    }
    if (rel) {
        /* on the rows, with the f32 weights as decode uses them */
        double se = 0.0, var = 0.0;
        float *pr = malloc((size_t)n * o * sizeof *pr);
        if (!pr) { free(B); free(mu); return SCDB_ENOMEM; }
        for (int i = 0; i < n; i++) memcpy(pr + (size_t)i * o, b, (size_t)o * sizeof *pr);
        scdb_k_gemm_cpu(0, 1, n, o, p, 1.0f, s->X, p, W, p, 1.0f, pr, o);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < o; c++) {
                double y = Y[(size_t)i * o + c], e = pr[(size_t)i * o + c] - y, dv = y - mu[c];
                se += e * e;
                var += dv * dv;
            }
        free(pr);
        *rel = var > 0 ? se / var : 0.0;
    }
    free(B);
    free(mu);
    return SCDB_OK;
}

scdb_err cx_cal_tok_rows(const scdb_calib *c, const float *zall, int D, int j, float **out)
{
    int n = c->ns, d = c->d, w = D + d;
    float *X = malloc((size_t)n * w * sizeof *X);
    *out = NULL;
    if (!X) return SCDB_ENOMEM;
    for (int i = 0; i < n; i++) {
        memcpy(X + (size_t)i * w, zall + (size_t)i * D, (size_t)D * sizeof *X);
        memcpy(X + (size_t)i * w + D, c->samp[j][0] + (size_t)i * d, (size_t)d * sizeof *X);
    }
    *out = X;
    return SCDB_OK;
}

scdb_err cx_cal_tok_split(const float *W, int o, int D, int d, float **dst, float **g)
{
    if (!*dst) *dst = malloc((size_t)o * (D ? D : 1) * sizeof **dst);
    free(*g);
    *g = malloc((size_t)o * d * sizeof **g);
    if (!*dst || !*g) return SCDB_ENOMEM;
    for (int r = 0; r < o; r++) {
        memcpy(*dst + (size_t)r * D, W + (size_t)r * (D + d), (size_t)D * sizeof **dst);
        memcpy(*g + (size_t)r * d, W + (size_t)r * (D + d) + D, (size_t)d * sizeof **g);
    }
    return SCDB_OK;
}

scdb_err cx_cal_tok_decoders(const scdb_calib *c, const scdb_codebook *cb, int j, const float *zall,
                             scdb_pair *p, double *relk, double *relv, double *rel0k, double *rel0v)
{
    int n = c->ns, d = c->d, kv = c->kv, D = cb->info.code_dim, w = D + d;
    float *X = NULL, *T = malloc((size_t)n * kv * sizeof *T), *W = malloc((size_t)kv * w * sizeof *W);
    float *b = malloc((size_t)kv * sizeof *b);
    cx_ls *ls = NULL, *ls0 = NULL;
    scdb_err rc = SCDB_ENOMEM;
    if (!T || !W || !b) goto done;
    if ((rc = cx_cal_tok_rows(c, zall, D, j, &X)) || (rc = cx_ls_new(X, n, w, d, &ls))) goto done;
    if (rel0k && rel0v && (rc = cx_ls_new(zall, n, D, 0, &ls0))) goto done;
    for (int l = 0; l < c->L; l++) {
        cx_player *P = &p->L[l];
        if (cb->info.layers[l].kind != SCDB_CB_CODED) continue;
        for (int pp = 0; pp < 2; pp++) {
            float **dst = pp ? &P->dv : &P->dk, **g = pp ? &P->gv : &P->gk, **m = pp ? &P->mv : &P->mk;
            scdb_k_linear_cpu(c->samp[j][l], cx_cal_part_w(c, j, l, pp), n, d, kv, T);
            if (!*m && !(*m = malloc((size_t)kv * sizeof **m))) { rc = SCDB_ENOMEM; goto done; }
            if ((rc = cx_ls_fit(ls, T, kv, W, *m, pp ? &relv[l] : &relk[l]))) goto done;
            free(*dst);
            *dst = NULL;
            if ((rc = cx_cal_tok_split(W, kv, D, d, dst, g))) goto done;
            if (ls0 && (rc = cx_ls_fit(ls0, T, kv, W, b, pp ? &rel0v[l] : &rel0k[l]))) goto done;
        }
    }
    p->info.token_input = 1;
    rc = SCDB_OK;
done:
    cx_ls_free(&ls);
    cx_ls_free(&ls0);
    free(X); free(T); free(W); free(b);
    return rc;
}
