/* calibrate.c — offline SCD calibration (codec.h, "calibration").
 *
 * Statistics.  For every calibration window the producer (model 0) and each
 * consumer (models 1..m) run over the same tokens with capture; per layer l
 * the session accumulates, in double precision,
 *     sum H_j,  sum H_p^T H_j,  sum H_j^T H_j             (H = H_in, d x d)
 *     sum K_j,  sum K_p^T K_j,  sum K_j^T K_j             (K after RoPE, for
 *                                                          the post-RoPE ablation)
 * Because K_pre = H_in Wk^T and V = H_in Wv^T, every covariance the linear
 * fits need follows from these exactly (e.g. cov(H_p, K_j) = cov(H_p, H_j) Wk_j^T).
 * Every `sample_stride`-th token's H_in of every model is also kept, for the
 * aligners.
 *
 * Codebook (reduced-rank regression).  For a part (K, V or H) of layer l,
 * with X = producer H_in[l] and targets Y_j = the part's state in model j
 * (producer included, so the identity pair and later consumers are served),
 * each block weighted to unit total variance:
 *     B = (S_xx + lambda I)^-1 S_xy          ridge OLS to all targets at once
 *     S_fit = B^T S_xx B                    covariance of the fitted values
 *     V_r = top-r eigenvectors of S_fit     (right singular subspace of X B)
 *     E = B V_r                              encoder: z = (x - mean) E
 * PCA ablation: E = the top-r principal directions of the producer's own
 * state (for K: Wk^T U_r, U_r from Wk S_xx Wk^T).
 *
 * Decoders: least squares from the layer's whole code to the consumer's K
 * (pre-RoPE) and V, from the same statistics.
 *
 * Candidates and patch layers are chosen by measured next-token KL on
 * held-back windows (prefix cached, continuation teacher-forced, compared
 * with the consumer's own prefill):
 *  - candidates (codebook): the layers whose REUSE decode, substituted alone
 *    into the consumer's own cache, raises KL the most, summed over the
 *    consumers ("criticality");
 *  - patch order (pair): greedy, each step adding the candidate whose
 *    aligner (trained first) lowers the KL of the full decode the most.
 */
#include "codec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CX_MAXM 9

/* All encoder directions of one (layer, part) for one fitting setting, most
 * important first: the rank-r encoder is the first r columns. */
typedef struct cx_basis {
    int valid, pca, post;
    double ridge;
    int in, R;
    double *E;              /* [in][R] */
} cx_basis;

typedef struct ewin {
    int j;                  /* model index of the consumer (0 = producer) */
    int32_t *tok;           /* P + C + 1 */
    float *ph, *pk;         /* producer h_in [L][P][d], k_post [L][P][kv] */
    scdb_kv_cache *oracle;  /* the consumer's own prefix cache */
    float *ologp;           /* [C][V] oracle log-probabilities */
} ewin;

struct scdb_calib {
    const scdb_model *mod[CX_MAXM];
    int nm;
    scdb_calib_opts o;
    int L, d, kv, V;
    int nwin;
    long long ntok;
    double *sh[CX_MAXM], *xh[CX_MAXM], *yh[CX_MAXM];
    double *sk[CX_MAXM], *xk[CX_MAXM], *yk[CX_MAXM];
    float **samp[CX_MAXM];  /* [L] -> [scap][d] */
    int ns, scap;
    ewin *ev;
    int nev;
    cx_basis *basis;        /* [L][3] cached encoder bases */
};

#define VERB(c, ...) do { if ((c)->o.verbose) fprintf(stderr, __VA_ARGS__); } while (0)

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
    if (c->basis) for (int i = 0; i < c->L * 3; i++) free(c->basis[i].E);
    free(c->basis);
    free(c);
    *pc = NULL;
}

int scdb_calib_windows(const scdb_calib *c) { return c ? c->nwin : 0; }

/* acc[a][b] += sum_t X[t][a] Y[t][b] (float GEMM per window, double sum) */
static void acc_xty(double *acc, const float *X, const float *Y, int n, int a, int b, float *tmp)
{
    scdb_k_gemm_cpu(1, 0, a, b, n, 1.0f, X, a, Y, b, 0.0f, tmp, b);
    for (size_t i = 0; i < (size_t)a * b; i++) acc[i] += tmp[i];
}

static scdb_err add_window(scdb_calib *c, const int32_t *tok, int n)
{
    const int L = c->L, d = c->d, kv = c->kv;
    float *h[CX_MAXM] = {0}, *k[CX_MAXM] = {0}, *tmp = NULL;
    scdb_kv_cache *cache = NULL;
    scdb_err rc = SCDB_ENOMEM;

    tmp = malloc((size_t)d * d * sizeof *tmp);
    if (!tmp) goto done;
    if ((rc = scdb_model_cache_new(c->mod[0], n, &cache))) goto done;
    rc = SCDB_ENOMEM;
    for (int j = 0; j < c->nm; j++) {
        h[j] = malloc((size_t)L * n * d * sizeof(float));
        k[j] = malloc((size_t)L * n * kv * sizeof(float));
        if (!h[j] || !k[j]) goto done;
        scdb_capture cap = {.h_in = h[j], .k_post = k[j]};
        cache->n = 0;
        if ((rc = scdb_model_forward(c->mod[j], tok, NULL, n, cache, NULL, &cap))) goto done;
    }
    /* samples */
    int take = (n + c->o.sample_stride - 1) / c->o.sample_stride;
    if (c->ns + take > c->scap) {
        int nc = c->scap ? c->scap * 2 : 4096;
        while (nc < c->ns + take) nc *= 2;
        for (int j = 0; j < c->nm; j++)
            for (int l = 0; l < L; l++) {
                float *q = realloc(c->samp[j][l], (size_t)nc * d * sizeof(float));
                if (!q) { rc = SCDB_ENOMEM; goto done; }
                c->samp[j][l] = q;
            }
        c->scap = nc;
    }
    for (int j = 0; j < c->nm; j++)
        for (int l = 0; l < L; l++)
            for (int i = 0, s = c->ns; i < n; i += c->o.sample_stride, s++)
                memcpy(c->samp[j][l] + (size_t)s * d, h[j] + ((size_t)l * n + i) * d,
                       (size_t)d * sizeof(float));
    c->ns += take;
    /* moments */
    for (int l = 0; l < L; l++) {
        const float *hp = h[0] + (size_t)l * n * d, *kp = k[0] + (size_t)l * n * kv;
        for (int j = 0; j < c->nm; j++) {
            const float *hj = h[j] + (size_t)l * n * d, *kj = k[j] + (size_t)l * n * kv;
            double *sh = c->sh[j] + (size_t)l * d, *sk = c->sk[j] + (size_t)l * kv;
            for (int t = 0; t < n; t++) {
                for (int a = 0; a < d; a++) sh[a] += hj[(size_t)t * d + a];
                for (int a = 0; a < kv; a++) sk[a] += kj[(size_t)t * kv + a];
            }
            acc_xty(c->xh[j] + (size_t)l * d * d, hp, hj, n, d, d, tmp);
            acc_xty(c->yh[j] + (size_t)l * d * d, hj, hj, n, d, d, tmp);
            acc_xty(c->xk[j] + (size_t)l * kv * kv, kp, kj, n, kv, kv, tmp);
            acc_xty(c->yk[j] + (size_t)l * kv * kv, kj, kj, n, kv, kv, tmp);
        }
    }
    c->ntok += n;
    c->nwin++;
    rc = SCDB_OK;
done:
    for (int j = 0; j < CX_MAXM; j++) { free(h[j]); free(k[j]); }
    free(tmp);
    scdb_kv_cache_free(&cache);
    return rc;
}

scdb_err scdb_calib_add_text(scdb_calib *c, const unsigned char *text, size_t len,
                             int max_windows, int *added)
{
    int W = c->o.window, n = 0;
    int32_t *tok;
    scdb_err rc = SCDB_OK;
    if (added) *added = 0;
    if (!c || (!text && len)) return SCDB_EINVAL;
    tok = malloc((size_t)W * sizeof *tok);
    if (!tok) return SCDB_ENOMEM;
    for (size_t off = 0; off + (size_t)W <= len; off += (size_t)W) {
        if (max_windows > 0 && n >= max_windows) break;
        scdb_tokenize_bytes(text + off, (size_t)W, tok);
        if ((rc = add_window(c, tok, W))) break;
        n++;
        if (c->o.verbose) fprintf(stderr, "\r  statistics: %d windows (%lld tokens)", c->nwin, c->ntok);
    }
    if (c->o.verbose) fprintf(stderr, "\n");
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
    scdb_capture cap = {.h_in = w.ph, .k_post = w.pk};
    if ((rc = scdb_model_forward(c->mod[0], w.tok, NULL, P, pc, NULL, &cap))) goto fail;
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

scdb_err scdb_calib_add_eval(scdb_calib *c, int ci, const unsigned char *text, size_t len)
{
    int need = c->o.eval_prefix + c->o.eval_cont + 1;
    int32_t *tok;
    scdb_err rc = SCDB_OK;
    if (!c || !text || len < (size_t)need || ci < -1 || ci >= c->nm - 1) return SCDB_EINVAL;
    tok = malloc((size_t)need * sizeof *tok);
    if (!tok) return SCDB_ENOMEM;
    scdb_tokenize_bytes(text, (size_t)need, tok);
    if (ci >= 0 || c->nm == 1) {
        rc = add_eval_one(c, ci + 1, tok);
    } else {
        for (int j = 1; j < c->nm && !rc; j++) rc = add_eval_one(c, j, tok);
    }
    free(tok);
    return rc;
}

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
static void cov_h(const scdb_calib *c, int j, int l, double *out)
{
    size_t d = (size_t)c->d;
    cov_from(c->xh[j] + l * d * d, c->sh[0] + l * d, c->sh[j] + l * d, c->ntok, c->d, c->d, out);
}
static void cov_hh(const scdb_calib *c, int j, int l, double *out)
{
    size_t d = (size_t)c->d;
    cov_from(c->yh[j] + l * d * d, c->sh[j] + l * d, c->sh[j] + l * d, c->ntok, c->d, c->d, out);
}
static void cov_k(const scdb_calib *c, int j, int l, double *out)
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
static void sandwich(const float *W, int o, int b, const double *S, double *out)
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

static const float *part_w(const scdb_calib *c, int j, int l, int p)
{
    const scdb_layer_weights *w = scdb_model_layer(c->mod[j], l);
    return p == CX_K ? w->wk : w->wv;
}

/* Cross-covariance of the part's encoder input (producer) with model j's
 * part target: [in][t], and the target covariance's trace. */
static scdb_err part_stats(const scdb_calib *c, int l, int p, int j, int post, double *sxy,
                           double *tr_yy)
{
    int d = c->d, kv = c->kv;
    double *S = malloc((size_t)d * d * sizeof *S), *T = malloc((size_t)d * d * sizeof *T);
    if (!S || !T) { free(S); free(T); return SCDB_ENOMEM; }
    if (p == CX_K && post) {
        cov_k(c, j, l, sxy);
        cov_kk(c, j, l, S);
        double tr = 0;
        for (int i = 0; i < kv; i++) tr += S[(size_t)i * kv + i];
        *tr_yy = tr;
    } else if (p == CX_H) {
        cov_h(c, j, l, sxy);
        cov_hh(c, j, l, S);
        double tr = 0;
        for (int i = 0; i < d; i++) tr += S[(size_t)i * d + i];
        *tr_yy = tr;
    } else {
        const float *W = part_w(c, j, l, p);
        cov_h(c, j, l, S);
        mul_wt(S, d, d, W, kv, sxy);
        cov_hh(c, j, l, S);
        sandwich(W, kv, d, S, T);
        double tr = 0;
        for (int i = 0; i < kv; i++) tr += T[(size_t)i * kv + i];
        *tr_yy = tr;
    }
    free(S);
    free(T);
    return SCDB_OK;
}

/* ------------------------------------------------------------ codebook fit */

/* Rank of the basis computed for (l, p) under f. */
static int basis_rank(const scdb_calib *c, int p, const scdb_cb_fit *f)
{
    int post = f->k_post_rope && p == CX_K;
    int in = post ? c->kv : c->d, t = p == CX_H ? c->d : c->kv, q = c->nm * t;
    if (f->pca) return (p == CX_H || post) ? in : t;
    return q < in ? q : in;
}

static scdb_err compute_basis(const scdb_calib *c, int l, int p, const scdb_cb_fit *f, double *E)
{
    int post = f->k_post_rope && p == CX_K;
    int in = post ? c->kv : c->d;
    int t = p == CX_H ? c->d : c->kv;
    int q = c->nm * t;
    int r = basis_rank(c, p, f);
    double *Sxx = malloc((size_t)in * in * sizeof *Sxx);
    double *Sxy = malloc((size_t)in * q * sizeof *Sxy);
    double *blk = malloc((size_t)in * t * sizeof *blk);
    double *G = malloc((size_t)q * q * sizeof *G), *Vq = malloc((size_t)q * q * sizeof *Vq);
    double *w = malloc((size_t)q * sizeof *w);
    double *tmp = malloc((size_t)in * q * sizeof *tmp);
    scdb_err rc = SCDB_ENOMEM;

    if (!Sxx || !Sxy || !blk || !G || !Vq || !w || !tmp) goto done;
    if (post) cov_k(c, 0, l, Sxx);
    else cov_h(c, 0, l, Sxx);

    if (f->pca) {
        /* principal directions of the producer's own state */
        if (p == CX_H || post) {
            memcpy(G, Sxx, (size_t)in * in * sizeof *G);
            cx_sym_eig(G, in, w, Vq);
            for (int a = 0; a < in; a++)
                for (int k = 0; k < r; k++) E[(size_t)a * r + k] = Vq[(size_t)a * in + k];
        } else {
            const float *W = part_w(c, 0, l, p);
            sandwich(W, t, in, Sxx, G);
            cx_sym_eig(G, t, w, Vq);
            /* E = W^T U_r */
            for (int a = 0; a < in; a++)
                for (int k = 0; k < r; k++) {
                    double s = 0.0;
                    for (int o = 0; o < t; o++) s += (double)W[(size_t)o * in + a] * Vq[(size_t)o * t + k];
                    E[(size_t)a * r + k] = s;
                }
        }
    } else {
        /* stacked, variance-normalised targets */
        for (int j = 0; j < c->nm; j++) {
            double tr;
            if ((rc = part_stats(c, l, p, j, post, blk, &tr))) goto done;
            rc = SCDB_ENOMEM;
            double s = 1.0 / sqrt(tr > 1e-20 ? tr : 1e-20);
            for (int a = 0; a < in; a++)
                for (int k = 0; k < t; k++) Sxy[(size_t)a * q + (size_t)j * t + k] = s * blk[(size_t)a * t + k];
        }
        /* B = (Sxx + lambda I)^-1 Sxy */
        double ridge = f->ridge > 0 ? f->ridge : 1e-3, tr = 0.0;
        for (int a = 0; a < in; a++) tr += Sxx[(size_t)a * in + a];
        double *A = malloc((size_t)in * in * sizeof *A);
        if (!A) goto done;
        memcpy(A, Sxx, (size_t)in * in * sizeof *A);
        for (int a = 0; a < in; a++) A[(size_t)a * in + a] += ridge * tr / in + 1e-12;
        if (cx_cholesky(A, in)) { free(A); rc = SCDB_ERANGE; goto done; }
        memcpy(tmp, Sxy, (size_t)in * q * sizeof *tmp);
        cx_chol_solve(A, in, tmp, q);                   /* tmp = B [in][q] */
        free(A);
        /* G = B^T Sxx B */
        double *SB = malloc((size_t)in * q * sizeof *SB);
        if (!SB) goto done;
        for (int a = 0; a < in; a++)
            for (int k = 0; k < q; k++) {
                double s = 0.0;
                for (int b = 0; b < in; b++) s += Sxx[(size_t)a * in + b] * tmp[(size_t)b * q + k];
                SB[(size_t)a * q + k] = s;
            }
        for (int a = 0; a < q; a++)
            for (int k = 0; k <= a; k++) {
                double s = 0.0;
                for (int b = 0; b < in; b++) s += tmp[(size_t)b * q + a] * SB[(size_t)b * q + k];
                G[(size_t)a * q + k] = G[(size_t)k * q + a] = s;
            }
        free(SB);
        cx_sym_eig(G, q, w, Vq);
        /* E = B V_r */
        for (int a = 0; a < in; a++)
            for (int k = 0; k < r; k++) {
                double s = 0.0;
                for (int b = 0; b < q; b++) s += tmp[(size_t)a * q + b] * Vq[(size_t)b * q + k];
                E[(size_t)a * r + k] = s;
            }
    }
    rc = SCDB_OK;
done:
    free(Sxx); free(Sxy); free(blk); free(G); free(Vq); free(w); free(tmp);
    return rc;
}

/* The rank-r encoder of (l, p): the first r directions of the cached basis. */
static scdb_err fit_part(scdb_calib *c, int l, int p, int r, const scdb_cb_fit *f, cx_enc *e)
{
    int post = f->k_post_rope && p == CX_K;
    int in = post ? c->kv : c->d;
    double ridge = f->ridge > 0 ? f->ridge : 1e-3;
    cx_basis *b = &c->basis[l * 3 + p];
    scdb_err rc;
    if (!b->valid || b->pca != !!f->pca || b->post != post || b->ridge != ridge) {
        free(b->E);
        memset(b, 0, sizeof *b);
        b->R = basis_rank(c, p, f);
        b->in = in;
        b->E = malloc((size_t)in * b->R * sizeof *b->E);
        if (!b->E) return SCDB_ENOMEM;
        if ((rc = compute_basis(c, l, p, f, b->E))) { free(b->E); b->E = NULL; return rc; }
        b->valid = 1;
        b->pca = !!f->pca;
        b->post = post;
        b->ridge = ridge;
    }
    if (r < 1 || r > b->R) return SCDB_EINVAL;
    e->in_dim = in;
    e->r = r;
    e->mean = malloc((size_t)in * sizeof(float));
    e->enc = malloc((size_t)r * in * sizeof(float));
    if (!e->mean || !e->enc) return SCDB_ENOMEM;
    const double *sum = post ? c->sk[0] + (size_t)l * c->kv : c->sh[0] + (size_t)l * c->d;
    for (int a = 0; a < in; a++) e->mean[a] = (float)(sum[a] / c->ntok);
    for (int k = 0; k < r; k++)
        for (int a = 0; a < in; a++) e->enc[(size_t)k * in + a] = (float)b->E[(size_t)a * b->R + k];
    return SCDB_OK;
}


/* ------------------------------------------------------------ decoders */

/* Encoder matrix of layer l restricted to the parts that read H_in (all of
 * them unless K is post-RoPE): E [d][w] with zero columns for other parts. */
static void layer_enc_h(const scdb_codebook *cb, int l, int d, double *E)
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
    scdb_err rc = SCDB_ENOMEM;
    P->mk = calloc((size_t)kv, sizeof(float));
    P->mv = calloc((size_t)kv, sizeof(float));
    P->dk = calloc((size_t)kv * (w ? w : 1), sizeof(float));
    P->dv = calloc((size_t)kv * (w ? w : 1), sizeof(float));
    if (!E || !Sxx || !Sxy || !D || !P->mk || !P->mv || !P->dk || !P->dv) goto done;
    /* means */
    const double *mh = c->sh[j] + (size_t)l * d;
    for (int pp = 0; pp < 2; pp++) {
        const float *W = part_w(c, j, l, pp);
        float *m = pp ? P->mv : P->mk;
        for (int o = 0; o < kv; o++) {
            double s = 0.0;
            if (pp == 0 && post) s = c->sk[j][(size_t)l * kv + o];
            else for (int a = 0; a < d; a++) s += mh[a] * W[(size_t)o * d + a];
            m[o] = (float)(s / c->ntok);
        }
    }
    if (w == 0) { rc = SCDB_OK; *relk = *relv = 1.0; goto done; }
    layer_enc_h(cb, l, d, E);
    cov_h(c, 0, l, Sxx);
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
            cov_k(c, 0, l, Skk);
            if ((rc = part_stats(c, l, CX_K, j, 1, Sky, &tr)) ||
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
        if ((rc = part_stats(c, l, pp, j, 0, Sxy, &tr))) goto done;
        if ((rc = ls_decode(E, d, w, Sxx, Sxy, kv, tr, D, rel))) goto done;
        for (int o = 0; o < kv; o++)
            for (int k = 0; k < w; k++) dst[(size_t)o * w + k] = (float)D[(size_t)k * kv + o];
    }
    rc = SCDB_OK;
done:
    free(E); free(Sxx); free(Sxy); free(D);
    return rc;
}

/* A pair with decoders only (no aligners) for model j. */
static scdb_err pair_skeleton(const scdb_calib *c, const scdb_codebook *cb, int j, scdb_pair **out,
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
    if ((rc = scdb_codec_weights_fp(scdb_model_dir(m), in->consumer_fp))) goto fail;
    in->n_layers = mc->n_layers;
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

/* ------------------------------------------------------------ measured KL */

typedef scdb_err (*build_fn)(const scdb_calib *c, const ewin *w, void *ctx, scdb_kv_cache *cache);

typedef struct dec_ctx {
    const scdb_codebook *cb;
    const scdb_pair *p;
    int n_patch;
    int only_layer;   /* >= 0: oracle cache with only this layer decoded */
} dec_ctx;

static scdb_err build_decode(const scdb_calib *c, const ewin *w, void *vctx, scdb_kv_cache *cache)
{
    dec_ctx *x = vctx;
    int P = c->o.eval_prefix;
    size_t D = (size_t)x->cb->info.code_dim;
    uint16_t *codes = malloc(((size_t)P * D + 1) * sizeof *codes);
    int32_t *pos = malloc((size_t)P * sizeof *pos);
    scdb_err rc = SCDB_ENOMEM;
    if (!codes || !pos) goto done;
    for (int i = 0; i < P; i++) pos[i] = i;
    scdb_codec_states st = {.h_in = w->ph, .k_post = w->pk};
    if ((rc = scdb_codec_encode(x->cb, &st, P, codes))) goto done;
    if ((rc = scdb_pair_decode(x->p, x->cb, codes, P, pos, w->tok, x->n_patch, cache, 0))) goto done;
    if (x->only_layer >= 0) {
        size_t kv = (size_t)c->kv;
        for (int l = 0; l < c->L; l++) {
            if (l == x->only_layer) continue;
            memcpy(scdb_kv_k(cache, l, 0), scdb_kv_k(w->oracle, l, 0), (size_t)P * kv * sizeof(float));
            memcpy(scdb_kv_v(cache, l, 0), scdb_kv_v(w->oracle, l, 0), (size_t)P * kv * sizeof(float));
        }
    }
done:
    free(codes);
    free(pos);
    return rc;
}

/* mean KL(oracle || built) and top-1 agreement over model j's eval windows */
static scdb_err eval_kl(const scdb_calib *c, int j, build_fn fn, void *ctx, double *kl, double *top1)
{
    int P = c->o.eval_prefix, C = c->o.eval_cont, V = c->V, count = 0;
    scdb_kv_cache *cache = NULL;
    float *logits = malloc((size_t)C * V * sizeof *logits), *lp = malloc((size_t)V * sizeof *lp);
    double skl = 0.0, agree = 0.0;
    scdb_err rc = SCDB_ENOMEM;
    if (!logits || !lp) goto done;
    if ((rc = scdb_model_cache_new(c->mod[j], P + C, &cache))) goto done;
    for (int i = 0; i < c->nev; i++) {
        const ewin *w = &c->ev[i];
        if (w->j != j) continue;
        cache->n = 0;
        if ((rc = fn(c, w, ctx, cache))) goto done;
        cache->n = P;
        if ((rc = scdb_model_forward(c->mod[j], w->tok + P, NULL, C, cache, logits, NULL))) goto done;
        for (int t = 0; t < C; t++) {
            const float *o = w->ologp + (size_t)t * V;
            scdb_k_log_softmax_cpu(logits + (size_t)t * V, V, lp);
            double k = 0.0;
            int ao = 0, am = 0;
            for (int v = 0; v < V; v++) {
                k += exp((double)o[v]) * ((double)o[v] - lp[v]);
                if (o[v] > o[ao]) ao = v;
                if (lp[v] > lp[am]) am = v;
            }
            skl += k;
            agree += ao == am;
            count++;
        }
    }
    *kl = count ? skl / count : NAN;
    *top1 = count ? agree / count : NAN;
    rc = count ? SCDB_OK : SCDB_ENOTFOUND;
done:
    free(logits);
    free(lp);
    scdb_kv_cache_free(&cache);
    return rc;
}

scdb_err scdb_calib_eval(scdb_calib *c, const scdb_codebook *cb, const scdb_pair *p, int ci,
                         int n_patch, double *kl, double *top1)
{
    if (!c || !cb || !p || ci < -1 || ci >= c->nm - 1 || !kl || !top1) return SCDB_EINVAL;
    dec_ctx x = {.cb = cb, .p = p, .n_patch = n_patch, .only_layer = -1};
    return eval_kl(c, ci + 1, build_decode, &x, kl, top1);
}

/* ------------------------------------------------------------ codebook */

/* rk / rv: per-layer K / V widths of the non-candidate layers (NULL: the
 * uniform f->r_k / f->r_v).  verbose: progress on stderr. */
static scdb_err make_codebook(scdb_calib *c, const scdb_cb_fit *f, const int *cand,
                              const int *rk, const int *rv, int verbose, scdb_codebook **out)
{
    scdb_codebook *cb = cx_codebook_alloc();
    scdb_err rc;
    if (!cb) return SCDB_ENOMEM;
    if ((rc = cx_codebook_set_producer(cb, c->mod[0]))) goto fail;
    scdb_codebook_info *in = &cb->info;
    in->k_post_rope = f->k_post_rope;
    snprintf(in->method, sizeof in->method, "%s", f->pca ? "pca" : "rrr");
    for (int l = 0; l < c->L; l++) {
        scdb_cb_layer *L = &in->layers[l];
        if (l == 0 && f->token_layer0) { L->kind = SCDB_CB_TOKENS; continue; }
        L->kind = SCDB_CB_CODED;
        int isc = cand && cand[l];
        L->r_k = isc && !f->candidate_kv ? 0 : rk ? rk[l] : f->r_k;
        L->r_v = isc && !f->candidate_kv ? 0 : rv ? rv[l] : f->r_v;
        L->r_h = isc ? f->r_h : 0;
        for (int p = 0; p < 3; p++) {
            int r = p == CX_K ? L->r_k : p == CX_V ? L->r_v : L->r_h;
            if (r && (rc = fit_part(c, l, p, r, f, &cb->part[l][p]))) goto fail;
        }
        if (verbose) VERB(c, "\r  codebook: layer %d/%d fitted", l + 1, c->L);
    }
    if (verbose) VERB(c, "\n");
    snprintf(cb->notes, sizeof cb->notes,
             "method=%s; %d windows x %d tokens (%lld tokens); ridge=%g; producer=%s; models=%d",
             in->method, c->nwin, c->o.window, c->ntok, f->ridge > 0 ? f->ridge : 1e-3,
             scdb_model_cfg(c->mod[0])->name, c->nm);
    if ((rc = cx_codebook_finish(cb))) goto fail;
    *out = cb;
    return SCDB_OK;
fail:
    scdb_codebook_free(&cb);
    return rc;
}

/* relative drift ||H_j - H_p||^2 / ||H_j||^2 (uncentered) at layer l */
static double drift_h(const scdb_calib *c, int j, int l)
{
    size_t d = (size_t)c->d;
    const double *x = c->xh[j] + l * d * d, *yj = c->yh[j] + l * d * d, *yp = c->yh[0] + l * d * d;
    double a = 0, b = 0, cr = 0;
    for (size_t i = 0; i < d; i++) { a += yj[i * d + i]; b += yp[i * d + i]; cr += x[i * d + i]; }
    return (a + b - 2 * cr) / a;
}

/* relative drift of K (pre-RoPE) or V between producer and model j */
static double drift_kv(const scdb_calib *c, int j, int l, int p)
{
    size_t d = (size_t)c->d;
    int kv = c->kv;
    const float *Wp = part_w(c, 0, l, p), *Wj = part_w(c, j, l, p);
    const double *X = c->xh[j] + l * d * d, *Yj = c->yh[j] + l * d * d, *Yp = c->yh[0] + l * d * d;
    double a = 0, b = 0, cr = 0;
    for (int o = 0; o < kv; o++)
        for (size_t u = 0; u < d; u++)
            for (size_t v = 0; v < d; v++) {
                a += (double)Wj[o * d + u] * Yj[u * d + v] * Wj[o * d + v];
                b += (double)Wp[o * d + u] * Yp[u * d + v] * Wp[o * d + v];
                cr += (double)Wp[o * d + u] * X[u * d + v] * Wj[o * d + v];
            }
    return (a + b - 2 * cr) / a;
}

/* Measured rank allocation (f->budget > 0): the code values per token left
 * after the candidates' H parts go to the K and V parts of the other coded
 * layers.  Errors compound across layers, so each part is measured in
 * context: KL(oracle || full REUSE decode) with every part at the uniform
 * ranks (f->r_k, f->r_v) except part (l, p), which is set to rank r, for r
 * in a few levels (summed over consumers, on the held-back windows; made
 * non-increasing in r).  Treating the changes as additive, the allocation
 * minimising the summed KL within the budget is a multiple-choice knapsack,
 * solved exactly by dynamic programming over (part, budget). */
static const int LEVELS[] = {2, 4, 6, 8, 12, 16, 24, 32};
#define NLEV ((int)(sizeof LEVELS / sizeof LEVELS[0]))

static scdb_err allocate_ranks(scdb_calib *c, const scdb_cb_fit *f, const int *cand, int *rk, int *rv)
{
    int L = c->L, kv = c->kv, nlev = 0, npart = 0, part_l[2 * SCDB_CODEC_MAX_LAYERS];
    double *kl = NULL, *dp = NULL;
    int *choice = NULL;
    scdb_err rc = SCDB_OK;
    while (nlev < NLEV && LEVELS[nlev] <= kv) nlev++;
    int spent = 0;
    for (int l = 0; l < L; l++) {
        if (l == 0 && f->token_layer0) continue;
        if (cand[l]) { spent += f->r_h + (f->candidate_kv ? f->r_k + f->r_v : 0); continue; }
        part_l[npart++] = 2 * l;       /* K */
        part_l[npart++] = 2 * l + 1;   /* V */
    }
    int units = (f->budget - spent) / 2;   /* levels are even */
    if (nlev == 0 || npart == 0 || units < npart * LEVELS[0] / 2) return SCDB_EINVAL;
    kl = calloc((size_t)npart * NLEV, sizeof *kl);
    dp = malloc((size_t)(npart + 1) * (units + 1) * sizeof *dp);
    choice = malloc((size_t)(npart + 1) * (units + 1) * sizeof *choice);
    if (!kl || !dp || !choice) { rc = SCDB_ENOMEM; goto done; }
    VERB(c, "  rank allocation: %d code values per token, %d for the candidates; measured KL of the\n"
            "  full REUSE decode with all parts at K %d / V %d except this one at rank r:\n",
         f->budget, spent, f->r_k, f->r_v);
    VERB(c, "    %5s %4s", "layer", "part");
    for (int i = 0; i < nlev; i++) VERB(c, "   r=%-5d", LEVELS[i]);
    VERB(c, "\n");
    for (int q = 0; q < npart; q++) {
        int l = part_l[q] / 2, p = part_l[q] % 2;
        VERB(c, "    %5d %4s", l, p ? "V" : "K");
        for (int i = 0; i < nlev; i++) {
            int ak[SCDB_CODEC_MAX_LAYERS], av[SCDB_CODEC_MAX_LAYERS];
            for (int m = 0; m < L; m++) { ak[m] = f->r_k; av[m] = f->r_v; }
            if (p) av[l] = LEVELS[i];
            else ak[l] = LEVELS[i];
            scdb_codebook *cb = NULL;
            if ((rc = make_codebook(c, f, cand, ak, av, 0, &cb))) goto done;
            for (int j = 1; j < c->nm && !rc; j++) {
                scdb_pair *pp = NULL;
                double k1, t1;
                if ((rc = pair_skeleton(c, cb, j, &pp, NULL, NULL))) break;
                dec_ctx x = {.cb = cb, .p = pp, .n_patch = 0, .only_layer = -1};
                rc = eval_kl(c, j, build_decode, &x, &k1, &t1);
                scdb_pair_free(&pp);
                kl[(size_t)q * NLEV + i] += k1;
            }
            scdb_codebook_free(&cb);
            if (rc) goto done;
            if (i > 0 && kl[(size_t)q * NLEV + i] > kl[(size_t)q * NLEV + i - 1])
                kl[(size_t)q * NLEV + i] = kl[(size_t)q * NLEV + i - 1];
            VERB(c, " %9.5f", kl[(size_t)q * NLEV + i]);
        }
        VERB(c, "\n");
    }
    /* dp[q][b]: least summed KL of parts [0, q) using exactly <= b units */
    const double INF = 1e300;
    for (int b = 0; b <= units; b++) dp[b] = 0.0;
    for (int q = 0; q < npart; q++)
        for (int b = 0; b <= units; b++) {
            double best = INF;
            int bi = -1;
            for (int i = 0; i < nlev; i++) {
                int cost = LEVELS[i] / 2;
                if (cost > b) break;
                double v = dp[(size_t)q * (units + 1) + b - cost];
                if (v >= INF) continue;
                v += kl[(size_t)q * NLEV + i];
                if (v < best) { best = v; bi = i; }
            }
            dp[(size_t)(q + 1) * (units + 1) + b] = best;
            choice[(size_t)(q + 1) * (units + 1) + b] = bi;
        }
    for (int l = 0; l < L; l++) { rk[l] = f->r_k; rv[l] = f->r_v; }
    int b = units, used = 0;
    for (int q = npart; q > 0; q--) {
        int i = choice[(size_t)q * (units + 1) + b];
        if (i < 0) { rc = SCDB_EINVAL; goto done; }
        int l = part_l[q - 1] / 2, p = part_l[q - 1] % 2;
        if (p) rv[l] = LEVELS[i];
        else rk[l] = LEVELS[i];
        b -= LEVELS[i] / 2;
        used += LEVELS[i];
    }
    VERB(c, "  allocation (K/V per layer):");
    for (int q = 0; q < npart; q += 2) VERB(c, " %d:%d/%d", part_l[q] / 2, rk[part_l[q] / 2], rv[part_l[q] / 2]);
    VERB(c, "  (%d of %d values; predicted summed KL %.5f)\n", used + spent, f->budget,
         dp[(size_t)npart * (units + 1) + units]);
done:
    free(kl);
    free(dp);
    free(choice);
    return rc;
}

/* The final codebook: allocated ranks when f->budget > 0, else uniform. */
static scdb_err finish_codebook(scdb_calib *c, const scdb_cb_fit *f, const int *cand,
                                scdb_codebook **out)
{
    int rk[SCDB_CODEC_MAX_LAYERS], rv[SCDB_CODEC_MAX_LAYERS];
    scdb_err rc;
    if (f->budget <= 0) return make_codebook(c, f, cand, NULL, NULL, 1, out);
    if ((rc = allocate_ranks(c, f, cand, rk, rv))) return rc;
    return make_codebook(c, f, cand, rk, rv, 1, out);
}

scdb_err scdb_calib_fit_codebook(scdb_calib *c, const scdb_cb_fit *f, scdb_codebook **out)
{
    int cand[SCDB_CODEC_MAX_LAYERS] = {0};
    scdb_codebook *tmp = NULL;
    scdb_pair *pp = NULL;
    scdb_err rc = SCDB_OK;

    if (!c || !f || !out) return SCDB_EINVAL;
    *out = NULL;
    if (c->nwin == 0) return SCDB_EINVAL;
    int maxk = f->k_post_rope ? c->kv : c->d;
    if (f->r_k < 0 || f->r_v < 0 || f->r_h < 0 || f->r_k > maxk || f->r_v > c->d ||
        f->r_h > c->d || f->n_candidates < 0 || f->n_candidates > c->L - (f->token_layer0 ? 1 : 0) ||
        (f->n_candidates > 0 && f->r_h < 1) || f->r_k + f->r_v < 1)
        return SCDB_EINVAL;
    if (f->n_candidates == 0 && f->budget <= 0) return make_codebook(c, f, NULL, NULL, NULL, 1, out);
    if (f->n_candidates == 0) return finish_codebook(c, f, cand, out);
    if (f->candidates) {
        for (int i = 0; i < f->n_candidates; i++) {
            int l = f->candidates[i];
            if (l < 0 || l >= c->L || (l == 0 && f->token_layer0)) return SCDB_EINVAL;
            cand[l] = 1;
        }
        return finish_codebook(c, f, cand, out);
    }
    /* measured choice: criticality of every layer under REUSE */
    double crit[SCDB_CODEC_MAX_LAYERS] = {0};
    scdb_cb_fit f0 = *f;
    f0.n_candidates = 0;
    f0.budget = 0;
    if ((rc = make_codebook(c, &f0, NULL, NULL, NULL, 1, &tmp))) return rc;
    VERB(c, "  per-layer drift and REUSE criticality (KL when only this layer is decoded):\n");
    VERB(c, "  %-9s %5s %10s %10s %10s %10s %10s %12s\n", "consumer", "layer", "drift_H",
         "drift_K", "drift_V", "recon_K", "recon_V", "crit_KL");
    for (int j = 1; j < c->nm; j++) {
        double rk[SCDB_CODEC_MAX_LAYERS] = {0}, rv[SCDB_CODEC_MAX_LAYERS] = {0};
        if ((rc = pair_skeleton(c, tmp, j, &pp, rk, rv))) goto done;
        for (int l = 0; l < c->L; l++) {
            double kl = 0, t1 = 0;
            if (tmp->info.layers[l].kind == SCDB_CB_CODED) {
                dec_ctx x = {.cb = tmp, .p = pp, .n_patch = 0, .only_layer = l};
                if ((rc = eval_kl(c, j, build_decode, &x, &kl, &t1))) goto done;
            }
            crit[l] += kl;
            VERB(c, "  %-9s %5d %10.4f %10.4f %10.4f %10.4f %10.4f %12.5f\n",
                 scdb_model_cfg(c->mod[j])->name, l, drift_h(c, j, l), drift_kv(c, j, l, CX_K),
                 drift_kv(c, j, l, CX_V), rk[l], rv[l], kl);
        }
        scdb_pair_free(&pp);
    }
    for (int k = 0; k < f->n_candidates; k++) {
        int best = -1;
        for (int l = 0; l < c->L; l++) {
            if (cand[l] || (l == 0 && f->token_layer0)) continue;
            if (best < 0 || crit[l] > crit[best]) best = l;
        }
        cand[best] = 1;
        VERB(c, "  candidate %d: layer %d (summed criticality KL %.5f)\n", k + 1, best, crit[best]);
    }
    rc = finish_codebook(c, f, cand, out);
done:
    scdb_pair_free(&pp);
    scdb_codebook_free(&tmp);
    return rc;
}

/* ------------------------------------------------------------ pairs */

/* Codes [ns][code_dim] of every sample (token-major rows), f16-rounded as
 * they travel.  SCDB_EUNSUPPORTED for a post-RoPE codebook (K samples are
 * not kept). */
static scdb_err sample_codes(const scdb_calib *c, const scdb_codebook *cb, float **out)
{
    const scdb_codebook_info *in = &cb->info;
    int n = c->ns, d = c->d, D = in->code_dim;
    *out = NULL;
    if (in->k_post_rope) return SCDB_EUNSUPPORTED;
    float *z = calloc((size_t)n * (D ? D : 1), sizeof *z), *x = malloc((size_t)n * d * sizeof *x);
    if (!z || !x) { free(z); free(x); return SCDB_ENOMEM; }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *L = &in->layers[l];
        int col = L->offset;
        for (int p = 0; p < 3; p++) {
            const cx_enc *e = &cb->part[l][p];
            int r = p == CX_K ? L->r_k : p == CX_V ? L->r_v : L->r_h;
            if (!r) continue;
            for (int i = 0; i < n; i++)
                for (int a = 0; a < d; a++) x[(size_t)i * d + a] = c->samp[0][l][(size_t)i * d + a] - e->mean[a];
            scdb_k_gemm_cpu(0, 1, n, r, d, 1.0f, x, d, e->enc, d, 0.0f, z + col, D);
            col += r;
        }
    }
    for (size_t i = 0; i < (size_t)n * D; i++) z[i] = scdb_f16_to_f32(scdb_f32_to_f16(z[i]));
    free(x);
    *out = z;
    return SCDB_OK;
}

/* REUSE decoders of model j, layer l from the samples' whole code rows. */
static scdb_err fit_decoders_rows(const scdb_calib *c, const scdb_codebook *cb, int j, int l,
                                  const float *zall, cx_player *P, double *relk, double *relv)
{
    int n = c->ns, d = c->d, kv = c->kv, D = cb->info.code_dim;
    float *T = malloc((size_t)n * kv * sizeof *T), *Y = malloc((size_t)n * kv * sizeof *Y);
    scdb_err rc = SCDB_ENOMEM;
    free(P->dk); free(P->dv); free(P->mk); free(P->mv);
    P->dk = malloc((size_t)kv * D * sizeof(float));
    P->dv = malloc((size_t)kv * D * sizeof(float));
    P->mk = malloc((size_t)kv * sizeof(float));
    P->mv = malloc((size_t)kv * sizeof(float));
    if (!T || !Y || !P->dk || !P->dv || !P->mk || !P->mv) goto done;
    for (int pp = 0; pp < 2; pp++) {
        const float *W = part_w(c, j, l, pp);
        float *dst = pp ? P->dv : P->dk, *m = pp ? P->mv : P->mk;
        scdb_k_linear_cpu(c->samp[j][l], W, n, d, kv, T);
        if ((rc = cx_ols(zall, T, n, D, kv, dst, m))) goto done;
        /* relative error on the samples */
        for (int i = 0; i < n; i++) memcpy(Y + (size_t)i * kv, m, (size_t)kv * sizeof *Y);
        scdb_k_gemm_cpu(0, 1, n, kv, D, 1.0f, zall, D, dst, D, 1.0f, Y, kv);
        double se = 0, var = 0, mu[1024] = {0};
        for (int i = 0; i < n; i++) for (int o = 0; o < kv && o < 1024; o++) mu[o] += T[(size_t)i * kv + o] / n;
        for (int i = 0; i < n; i++)
            for (int o = 0; o < kv && o < 1024; o++) {
                double e = Y[(size_t)i * kv + o] - T[(size_t)i * kv + o], v = T[(size_t)i * kv + o] - mu[o];
                se += e * e;
                var += v * v;
            }
        *(pp ? relv : relk) = var > 0 ? se / var : 0;
    }
    rc = SCDB_OK;
done:
    free(T);
    free(Y);
    return rc;
}

/* zin: NULL, or the samples' whole code rows [ns][win] (an "all" pair) */
static scdb_err train_aligner(const scdb_calib *c, const scdb_codebook *cb, int j, int l,
                              const scdb_pair_fit *f, cx_player *P, const float *zin, int win)
{
    int d = c->d, kv = c->kv, w = zin ? win : cb->info.layers[l].width, n = c->ns;
    float *z = malloc((size_t)n * w * sizeof *z), *x = malloc((size_t)n * d * sizeof *x);
    scdb_err rc = SCDB_ENOMEM;
    if (!z || !x) goto done;
    if (zin) {
        memcpy(z, zin, (size_t)n * w * sizeof *z);
        goto train;
    }
    /* codes of the samples: the layer's parts, as encode computes them */
    double *E = malloc((size_t)d * w * sizeof *E);
    if (!E) goto done;
    layer_enc_h(cb, l, d, E);
    const float *mean = NULL;
    for (int p = 0; p < 3 && !mean; p++)
        if (cb->part[l][p].mean && !(p == CX_K && cb->info.k_post_rope)) mean = cb->part[l][p].mean;
    float *Ef = malloc((size_t)d * w * sizeof *Ef);
    if (!Ef || !mean) {   /* !mean: a candidate always has an H part */
        free(E);
        free(Ef);
        rc = Ef ? SCDB_EINVAL : SCDB_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < (size_t)d * w; i++) Ef[i] = (float)E[i];
    free(E);
    for (int i = 0; i < n; i++)
        for (int a = 0; a < d; a++) x[(size_t)i * d + a] = c->samp[0][l][(size_t)i * d + a] - mean[a];
    cx_gemm_nn(n, w, d, x, d, Ef, w, 0.0f, z, w);
    free(Ef);
    /* f16 round trip, as the codes travel */
    for (size_t i = 0; i < (size_t)n * w; i++) z[i] = scdb_f16_to_f32(scdb_f32_to_f16(z[i]));
train:;
    const scdb_layer_weights *lw = scdb_model_layer(c->mod[j], l);
    scdb_aligner_train t = {.hidden = f->hidden > 0 ? f->hidden : 128,
                            .steps = f->steps > 0 ? f->steps : 1500,
                            .batch = f->batch > 0 ? f->batch : 256,
                            .lr = f->lr > 0 ? f->lr : 2e-3f,
                            .seed = 0x5cdb0000ull + (uint64_t)l * 131 + (uint64_t)j,
                            .verbose = c->o.verbose};
    if ((rc = scdb_aligner_fit(z, c->samp[j][l], n, w, d, lw->wk, lw->wv, kv, &t, &P->al,
                               &P->align_loss_before, &P->align_loss_after)))
        goto done;
    P->has_aligner = 1;
    P->wk = malloc((size_t)kv * d * sizeof(float));
    P->wv = malloc((size_t)kv * d * sizeof(float));
    if (!P->wk || !P->wv) { rc = SCDB_ENOMEM; goto done; }
    memcpy(P->wk, lw->wk, (size_t)kv * d * sizeof(float));
    memcpy(P->wv, lw->wv, (size_t)kv * d * sizeof(float));
    rc = SCDB_OK;
done:
    free(z);
    free(x);
    return rc;
}

scdb_err scdb_calib_fit_pair(scdb_calib *c, const scdb_codebook *cb, int ci,
                             const scdb_pair_fit *f, scdb_pair **out)
{
    scdb_pair *p = NULL;
    scdb_pair_fit def = {0};
    float *zall = NULL;
    double kl_at[SCDB_CODEC_MAX_LAYERS + 1] = {0};
    scdb_err rc;
    if (!c || !cb || !out || ci < -1 || ci >= c->nm - 1) return SCDB_EINVAL;
    *out = NULL;
    if (!f) f = &def;
    int j = ci + 1;
    const char *name = scdb_model_cfg(c->mod[j])->name;
    if (c->ns == 0) return SCDB_EINVAL;
    if (!scdb_model_config_same_arch(scdb_model_cfg(c->mod[0]), &cb->info.arch)) return SCDB_EMISMATCH;
    double rk[SCDB_CODEC_MAX_LAYERS] = {0}, rv[SCDB_CODEC_MAX_LAYERS] = {0};
    if ((rc = pair_skeleton(c, cb, j, &p, rk, rv))) return rc;
    VERB(c, "  pair %s -> %s: REUSE decoders (relative LS error on calibration statistics)\n",
         cb->info.producer, name);
    for (int l = 0; l < c->L; l++)
        if (cb->info.layers[l].kind == SCDB_CB_CODED)
            VERB(c, "    layer %d: K %.4f  V %.4f  (code width %d)\n", l, rk[l], rv[l],
                 cb->info.layers[l].width);
        else
            VERB(c, "    layer %d: token layer (regenerated exactly from token ids)\n", l);
    scdb_pair_info *in = &p->info;
    in->hidden = f->hidden > 0 ? f->hidden : 128;
    if (f->all_layers) {
        if ((rc = sample_codes(c, cb, &zall))) goto fail;
        p->all_input = in->all_input = 1;
        VERB(c, "  decoders from every layer's code (%d inputs, %d samples): relative error on samples\n",
             cb->info.code_dim, c->ns);
        for (int l = 0; l < c->L; l++) {
            if (cb->info.layers[l].kind != SCDB_CB_CODED) continue;
            if ((rc = fit_decoders_rows(c, cb, j, l, zall, &p->L[l], &rk[l], &rv[l]))) goto fail;
            VERB(c, "    layer %d: K %.4f  V %.4f\n", l, rk[l], rv[l]);
        }
    }
    if (!f->no_train) {
        for (int k = 0; k < cb->info.n_candidates; k++) {
            int l = cb->info.candidates[k];
            VERB(c, "  aligner layer %d (%d samples, input %d -> hidden %d -> %d):\n", l, c->ns,
                 f->all_layers ? cb->info.code_dim : cb->info.layers[l].width, in->hidden, c->d);
            if ((rc = train_aligner(c, cb, j, l, f, &p->L[l], zall, cb->info.code_dim))) goto fail;
            VERB(c, "    validation loss (relative MSE of regenerated K + V): linear start %.4f -> trained %.4f\n",
                 p->L[l].align_loss_before, p->L[l].align_loss_after);
            in->patch_order[in->n_aligners++] = l;
        }
    }
    cx_pair_finish(p);
    int have_eval = 0;
    for (int i = 0; i < c->nev; i++) have_eval += c->ev[i].j == j;
    if (in->n_aligners > 0 && have_eval && !f->keep_order) {
        /* greedy order by measured KL */
        int chosen[SCDB_CODEC_MAX_LAYERS], nch = 0, rem[SCDB_CODEC_MAX_LAYERS], nrem = in->n_aligners;
        memcpy(rem, in->patch_order, (size_t)nrem * sizeof *rem);
        double kl, t1;
        dec_ctx x = {.cb = cb, .p = p, .n_patch = 0, .only_layer = -1};
        if ((rc = eval_kl(c, j, build_decode, &x, &kl, &t1))) goto fail;
        kl_at[0] = kl;
        VERB(c, "  greedy patch order by measured KL (held-back windows):\n");
        VERB(c, "    k=0 (REUSE only): KL %.5f top-1 %.4f\n", kl, t1);
        while (nrem > 0) {
            int best = -1;
            double bkl = 0, bt1 = 0;
            for (int r = 0; r < nrem; r++) {
                memcpy(in->patch_order, chosen, (size_t)nch * sizeof *chosen);
                in->patch_order[nch] = rem[r];
                x.n_patch = nch + 1;
                if ((rc = eval_kl(c, j, build_decode, &x, &kl, &t1))) goto fail;
                VERB(c, "      try layer %d: KL %.5f top-1 %.4f\n", rem[r], kl, t1);
                if (best < 0 || kl < bkl) { best = r; bkl = kl; bt1 = t1; }
            }
            chosen[nch++] = rem[best];
            kl_at[nch] = bkl;
            VERB(c, "    k=%d: + layer %d -> KL %.5f top-1 %.4f\n", nch, rem[best], bkl, bt1);
            rem[best] = rem[--nrem];
        }
        memcpy(in->patch_order, chosen, (size_t)nch * sizeof *chosen);
    }
    in->n_patch = f->n_patch < 0 ? 0 : f->n_patch > in->n_aligners ? in->n_aligners : f->n_patch;
    if (have_eval && in->n_aligners > 0 && !f->keep_order) {
        /* default budget: the k <= n_patch with the lowest measured KL */
        int bk = 0;
        for (int k = 1; k <= in->n_patch; k++) if (kl_at[k] < kl_at[bk]) bk = k;
        if (bk != in->n_patch)
            VERB(c, "  default patch budget %d (lowest held-back KL among k <= %d)\n", bk, in->n_patch);
        in->n_patch = bk;
    }
    snprintf(p->notes, sizeof p->notes,
             "decoders (input: %s): least squares on %lld calibration tokens; aligners: SiLU MLP hidden %d + "
             "linear skip, Adam %d steps x batch %d on %d samples; patch order greedy by KL on %d "
             "held-back windows",
             f->all_layers ? "every layer's code, on samples" : "the layer's code", c->ntok, in->hidden,
             f->steps > 0 ? f->steps : 1500, f->batch > 0 ? f->batch : 256,
             c->ns, have_eval);
    free(zall);
    *out = p;
    return SCDB_OK;
fail:
    free(zall);
    scdb_pair_free(&p);
    return rc;
}
