/* calib_pair.c — a consumer's pair: decoders from the codebook's codes, aligners on the candidate layers, the greedy patch order by measured KL (calib.h; the method is described there). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ pairs */

/* Codes [ns][code_dim] of every sample (token-major rows), f16-rounded as
 * they travel.  SCDB_EUNSUPPORTED for a post-RoPE codebook (K samples are
 * not kept). */
scdb_err cx_cal_sample_codes(const scdb_calib *c, const scdb_codebook *cb, float **out)
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
        const float *W = cx_cal_part_w(c, j, l, pp);
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
    cx_cal_layer_enc_h(cb, l, d, E);
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
                            .verbose = c->o.verbose,
                            .ops = c->ops};      /* NULL: the host; else the session's device */
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

/* The greedy patch order of pair p (its aligners trained) by measured KL on
 * model j's held-back windows, and its default budget (the k <= f->n_patch
 * with the lowest KL); without windows (or f->keep_order) the order stays
 * and the budget is f->n_patch clamped. */
scdb_err cx_cal_patch_order(scdb_calib *c, const scdb_codebook *cb, int j, scdb_pair *p,
                            const scdb_pair_fit *f)
{
    scdb_pair_info *in = &p->info;
    double kl_at[SCDB_CODEC_MAX_LAYERS + 1] = {0};
    scdb_err rc;
    int have_eval = 0;
    for (int i = 0; i < c->nev; i++) have_eval += c->ev[i].j == j;
    if (in->n_aligners > 0 && have_eval && !f->keep_order) {
        /* greedy order by measured KL */
        int chosen[SCDB_CODEC_MAX_LAYERS], nch = 0, rem[SCDB_CODEC_MAX_LAYERS], nrem = in->n_aligners;
        memcpy(rem, in->patch_order, (size_t)nrem * sizeof *rem);
        double kl, t1;
        cx_cal_dec_ctx x = {.cb = cb, .p = p, .n_patch = 0, .only_layer = -1};
        if ((rc = cx_cal_eval_kl(c, j, cx_cal_build_decode, &x, &kl, &t1))) return rc;
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
                if ((rc = cx_cal_eval_kl(c, j, cx_cal_build_decode, &x, &kl, &t1))) return rc;
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
    return SCDB_OK;
}

scdb_err scdb_calib_fit_pair(scdb_calib *c, const scdb_codebook *cb, int ci,
                             const scdb_pair_fit *f, scdb_pair **out)
{
    scdb_pair *p = NULL;
    scdb_pair_fit def = {0};
    float *zall = NULL;
    scdb_err rc;
    if (!c || !cb || !out || ci < -1 || ci >= c->nm - 1) return SCDB_EINVAL;
    *out = NULL;
    if (!f) f = &def;
    int j = ci + 1;
    const char *name = scdb_model_cfg(c->mod[j])->name;
    if (c->ns == 0 || (c->o.samples_only && !f->all_layers && j > 0)) return SCDB_EINVAL;
    /* token input: decoders fitted on samples, h0 the TOKEN layer's, K pre-RoPE */
    if (f->token_input && (!f->all_layers || cb->info.layers[0].kind != SCDB_CB_TOKENS ||
                           cb->info.k_post_rope))
        return SCDB_EINVAL;
    if (!scdb_model_config_same_arch(scdb_model_cfg(c->mod[0]), &cb->info.arch)) return SCDB_EMISMATCH;
    double rk[SCDB_CODEC_MAX_LAYERS] = {0}, rv[SCDB_CODEC_MAX_LAYERS] = {0};
    if ((rc = cx_cal_pair_skeleton(c, cb, j, &p, rk, rv))) return rc;
    if (c->o.samples_only && j > 0)
        VERB(c, "  pair %s -> %s: consumer moments not kept (samples only): decoders fitted on samples\n",
             cb->info.producer, name);
    else
        VERB(c, "  pair %s -> %s: REUSE decoders (relative LS error on calibration statistics)\n",
             cb->info.producer, name);
    for (int l = 0; l < c->L && !(c->o.samples_only && j > 0); l++)
        if (cb->info.layers[l].kind == SCDB_CB_CODED)
            VERB(c, "    layer %d: K %.4f  V %.4f  (code width %d)\n", l, rk[l], rv[l],
                 cb->info.layers[l].width);
        else
            VERB(c, "    layer %d: token layer (regenerated exactly from token ids)\n", l);
    scdb_pair_info *in = &p->info;
    in->hidden = f->hidden > 0 ? f->hidden : 128;
    if (f->all_layers) {
        if ((rc = cx_cal_sample_codes(c, cb, &zall))) goto fail;
        p->all_input = in->all_input = 1;
        VERB(c, "  decoders from every layer's code (%d inputs, %d samples): relative error on samples\n",
             cb->info.code_dim, c->ns);
        if (f->token_input) {
            double r0k[SCDB_CODEC_MAX_LAYERS] = {0}, r0v[SCDB_CODEC_MAX_LAYERS] = {0};
            VERB(c, "  token input: decoders read [z | h0] (%d + %d inputs; h0 = %s's layer-0 H_in of the "
                 "token), relative error on samples without -> with it\n", cb->info.code_dim, c->d, name);
            if ((rc = cx_cal_tok_decoders(c, cb, j, zall, p, rk, rv, r0k, r0v))) goto fail;
            for (int l = 0; l < c->L; l++)
                if (cb->info.layers[l].kind == SCDB_CB_CODED)
                    VERB(c, "    layer %d: K %.4f -> %.4f  V %.4f -> %.4f\n", l, r0k[l], rk[l], r0v[l], rv[l]);
        }
        for (int l = 0; l < c->L && !f->token_input; l++) {
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
    if ((rc = cx_cal_patch_order(c, cb, j, p, f))) goto fail;
    in->late_added = !cx_cal_fitted_here(c, cb);
    snprintf(p->notes, sizeof p->notes,
             "%sdecoders (input: %s%s): least squares on %lld calibration tokens; aligners: SiLU MLP hidden %d + "
             "linear skip, Adam %d steps x batch %d on %d samples; patch order greedy by KL on %d "
             "held-back windows",
             in->late_added ? "late-added: fitted against the frozen codebook (its candidates, its codes); " : "",
             f->all_layers ? "every layer's code, on samples" : "the layer's code",
             f->token_input ? ", plus h0, the consumer's layer-0 H_in of the token" : "", c->ntok, in->hidden,
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
