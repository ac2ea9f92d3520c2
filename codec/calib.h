/* calib.h — private to codec/'s calibration (codec.h, "calibration"): the
 * session and the functions one stage hands the next.  The stages, one file
 * each, call one way:
 *
 *   calib_stats.c     session, window statistics
 *   calib_cov.c       covariances from the statistics
 *   calib_decoders.c  least-squares decoders, pair skeletons
 *   calib_eval.c      measured KL on held-back windows
 *   calib_codebook.c  codebook: bases, ranks, candidates
 *   calib_pair.c      pairs: aligners, patch order
 *
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
#ifndef SCDB_CODEC_CALIB_H
#define SCDB_CODEC_CALIB_H

#include "codec_internal.h"


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
    int32_t *wtok;          /* [nwin][window] the statistics windows' tokens */
    int wcap;
    int producer_passes;    /* producer forwards over statistics windows */
    ewin *ev;
    int nev;
    cx_basis *basis;        /* [L][3] cached encoder bases */
    /* scdb_calib_set_device: the device's table (NULL: the host path) and
     * the models on it; scratch in its memory (grown on demand) */
    const scdb_k_ops *ops;
    scdb_model_dev *mdev[CX_MAXM];
    void *dscr;
    size_t dscr_bytes;
    scdb_codec_id *fitted;  /* ids of the codebooks fitted in this session */
    int n_fitted;
    /* scdb_calib_set_engine: states and tokens from another engine */
    scdb_calib_engine eng;
    int has_eng;
};

/* calib_stats.c: device scratch of at least `bytes` (c->ops's memory). */
scdb_err cx_cal_dscratch(scdb_calib *c, size_t bytes, void **out);
/* calib_codebook.c: 1 if the session fitted codebook cb (its pairs are joint
 * fits), 0 if cb came from elsewhere (a frozen codebook: late-added pairs). */
int cx_cal_fitted_here(const scdb_calib *c, const scdb_codebook *cb);

#define VERB(c, ...) do { if ((c)->o.verbose) fprintf(stderr, __VA_ARGS__); } while (0)

/* ------------------------------------------------------------ across stages */

/* calib_cov.c: covariance of producer H_in with model j's H_in / K (post
 * RoPE) at layer l, d x d / d x kv; W S W^T; the weight of part p (K or V)
 * of model j's layer l; the regression statistics of part p of layer l for
 * target model j (post: K after RoPE). */
void cx_cal_cov_h(const scdb_calib *c, int j, int l, double *out);
void cx_cal_cov_k(const scdb_calib *c, int j, int l, double *out);
void cx_cal_sandwich(const float *W, int o, int b, const double *S, double *out);
const float *cx_cal_part_w(const scdb_calib *c, int j, int l, int p);
scdb_err cx_cal_part_stats(const scdb_calib *c, int l, int p, int j, int post, double *sxy,
                           double *tr_yy);

/* calib_decoders.c: layer l's H encoder as [d][r_h] doubles; a pair for
 * consumer model j with every layer's decoders fitted (relative errors of K
 * and V per layer into relk / relv, may be NULL). */
void cx_cal_layer_enc_h(const scdb_codebook *cb, int l, int d, double *E);
scdb_err cx_cal_pair_skeleton(const scdb_calib *c, const scdb_codebook *cb, int j,
                              scdb_pair **out, double *relk, double *relv);

/* calib_decoders.c, token input (codec.h, scdb_pair_info.token_input):
 * least squares with an intercept of many targets on one input X [n][p]
 * (cx_ols's ridge: 1e-6 of the mean diagonal on the non-intercept
 * columns; the last pt columns, h0's, CX_TOK_RIDGE more), its Gram factored once: W [o][p], b [o], relative error on the
 * rows into *rel (may be NULL); the rows [z | h0] [n][D + d] of the
 * samples' codes and model j's layer-0 H_in (h0: what the TOKEN layer
 * computes from the token); and the token-input REUSE decoders of every
 * coded layer of pair p for model j (dk, dv [kv][D], gk, gv [kv][d], means),
 * relative errors into relk / relv (and, without token input, rel0k /
 * rel0v when not NULL). */
typedef struct cx_ls cx_ls;
scdb_err cx_ls_new(const float *X, int n, int p, int pt, cx_ls **out);
/* The ridge of h0's columns (the last pt of cx_ls_new's, a token-input
 * correction's): this times their mean centred variance.  h0 spans only
 * the tokens of the samples and says nothing of their context, so its
 * decoders fit the calibration text's token statistics; measured on the
 * fleet's held-back windows (13 adapters, scdb calibrate --lora-pairs;
 * the notes since folded into docs/DESIGN.md "Calibrate", in full in
 * git show 2c04360:docs/incoming-tokdec.md): 1e-6 (cx_ols's alone) made
 * html's REUSE KL 0.083 -> 0.111 (worse than no token input), 1e-2 0.074,
 * best or within 5% of the best on 12 of 13; 1e-1 lost most of the gain
 * elsewhere. */
#define CX_TOK_RIDGE 1e-2
scdb_err cx_ls_fit(const cx_ls *s, const float *Y, int o, float *W, float *b, double *rel);
void cx_ls_free(cx_ls **s);
scdb_err cx_cal_tok_rows(const scdb_calib *c, const float *zall, int D, int j, float **out);
scdb_err cx_cal_tok_decoders(const scdb_calib *c, const scdb_codebook *cb, int j, const float *zall,
                             scdb_pair *p, double *relk, double *relv, double *rel0k, double *rel0v);
/* W [o][D + d] -> dst [o][D] (allocated when *dst is NULL) and g [o][d] */
scdb_err cx_cal_tok_split(const float *W, int o, int D, int d, float **dst, float **g);

/* calib_eval.c: a cache built for one held-back window; the decode builder
 * (codes of the window decoded with cb/p, optionally only one layer over
 * the oracle cache); mean KL and top-1 over model j's windows. */
typedef scdb_err (*cx_cal_build_fn)(const scdb_calib *c, const ewin *w, void *ctx,
                                    scdb_kv_cache *cache);
typedef struct cx_cal_dec_ctx {
    const scdb_codebook *cb;
    const scdb_pair *p;
    int n_patch;
    int only_layer;   /* >= 0: oracle cache with only this layer decoded */
} cx_cal_dec_ctx;
scdb_err cx_cal_build_decode(const scdb_calib *c, const ewin *w, void *vctx,
                             scdb_kv_cache *cache);
scdb_err cx_cal_eval_kl(const scdb_calib *c, int j, cx_cal_build_fn fn, void *ctx, double *kl,
                        double *top1);

/* calib_pair.c: the samples' whole code rows [ns][code_dim], f16-rounded
 * (SCDB_EUNSUPPORTED for a post-RoPE codebook); a pair's greedy patch
 * order by measured KL on model j's windows and its default budget. */
scdb_err cx_cal_sample_codes(const scdb_calib *c, const scdb_codebook *cb, float **out);
scdb_err cx_cal_patch_order(scdb_calib *c, const scdb_codebook *cb, int j, scdb_pair *p,
                            const scdb_pair_fit *f);

#endif
