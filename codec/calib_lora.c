/* calib_lora.c — pairs sized for an adapter fleet (codec.h, "Adapter pairs"):
 * a shared part fitted once on the mean of the fleet's states, and per
 * adapter only its own parts: low-rank corrections of the shared decoders
 * and aligners fitted on the residual of its states, its means, and its
 * Wk/Wv deltas (calib.h; the session's consumer slot 0 holds the adapter).
 *
 * Why the mean: the fleet's consumers see the same producer codes, so
 * least squares (and the aligners' MSE) over every adapter's samples at
 * once is the fit to the mean target plus a constant; the mean is kept
 * instead of every adapter's targets.
 *
 * A correction is reduced-rank regression of the residual R = T - shared(z)
 * on the centred codes: C = G^-1 Zc^T Rc (G = Zc^T Zc + ridge), then the
 * top-r eigenvectors U of the fitted values' covariance Rc^T Zc C give
 * u = U, v = U^T C^T; the mean follows as the intercept. */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights_fp.h"

struct scdb_calib_fleet {
    int n, cap;                 /* adapters added */
    int ns, L, d, kv;
    float **samp;               /* [n] -> [L][ns][d]: each adapter's samples */
    const scdb_model **mod;     /* [n] */
    float *kbar, *vbar, *hbar;  /* [L][ns][kv] [L][ns][kv] [L][ns][d]: sums */
};

scdb_err scdb_calib_fleet_new(const scdb_calib *c, scdb_calib_fleet **out)
{
    if (!c || !out || c->nm != 2 || !c->o.samples_only || c->ns == 0) return SCDB_EINVAL;
    scdb_calib_fleet *f = calloc(1, sizeof *f);
    if (!f) return SCDB_ENOMEM;
    f->ns = c->ns; f->L = c->L; f->d = c->d; f->kv = c->kv;
    size_t nk = (size_t)c->L * c->ns * c->kv, nh = (size_t)c->L * c->ns * c->d;
    f->kbar = calloc(nk, sizeof(float));
    f->vbar = calloc(nk, sizeof(float));
    f->hbar = calloc(nh, sizeof(float));
    if (!f->kbar || !f->vbar || !f->hbar) { scdb_calib_fleet_free(&f); return SCDB_ENOMEM; }
    *out = f;
    return SCDB_OK;
}

void scdb_calib_fleet_free(scdb_calib_fleet **pf)
{
    if (!pf || !*pf) return;
    scdb_calib_fleet *f = *pf;
    for (int i = 0; i < f->n; i++) free(f->samp[i]);
    free(f->samp); free(f->mod); free(f->kbar); free(f->vbar); free(f->hbar);
    free(f);
    *pf = NULL;
}

int scdb_calib_fleet_size(const scdb_calib_fleet *f) { return f ? f->n : 0; }

/* A session the fleet's samples fit: a pair session of the same shapes,
 * keeping samples (the fleet was made from such a session). */
static int fleet_fits(const scdb_calib_fleet *f, const scdb_calib *c)
{
    return f && c && c->nm == 2 && c->ns == f->ns && c->L == f->L && c->d == f->d && c->kv == f->kv &&
           c->o.samples_only;
}

scdb_err scdb_calib_fleet_add(scdb_calib_fleet *f, const scdb_calib *c)
{
    if (!fleet_fits(f, c)) return SCDB_EINVAL;
    if (f->n == f->cap) {
        int nc = f->cap ? f->cap * 2 : 16;
        float **s = realloc(f->samp, (size_t)nc * sizeof *s);
        if (!s) return SCDB_ENOMEM;
        f->samp = s;
        const scdb_model **m = realloc(f->mod, (size_t)nc * sizeof *m);
        if (!m) return SCDB_ENOMEM;
        f->mod = m;
        f->cap = nc;
    }
    size_t per = (size_t)f->ns * f->d;
    float *s = malloc((size_t)f->L * per * sizeof *s), *t = malloc((size_t)f->ns * f->kv * sizeof *t);
    if (!s || !t) { free(s); free(t); return SCDB_ENOMEM; }
    for (int l = 0; l < f->L; l++) {
        memcpy(s + (size_t)l * per, c->samp[1][l], per * sizeof *s);
        float *hb = f->hbar + (size_t)l * per;
        for (size_t i = 0; i < per; i++) hb[i] += c->samp[1][l][i];
        for (int pp = 0; pp < 2; pp++) {
            scdb_k_linear_cpu(c->samp[1][l], cx_cal_part_w(c, 1, l, pp), f->ns, f->d, f->kv, t);
            float *acc = (pp ? f->vbar : f->kbar) + (size_t)l * f->ns * f->kv;
            for (size_t i = 0; i < (size_t)f->ns * f->kv; i++) acc[i] += t[i];
        }
    }
    free(t);
    f->samp[f->n] = s;
    f->mod[f->n++] = c->mod[1];
    return SCDB_OK;
}

scdb_err scdb_calib_fleet_use(scdb_calib_fleet *f, scdb_calib *c, int k)
{
    if (!fleet_fits(f, c) || k < 0 || k >= f->n) return SCDB_EINVAL;
    /* the old consumer's held-back windows go, as scdb_calib_swap_consumer drops them */
    int kept = 0;
    for (int i = 0; i < c->nev; i++) {
        ewin *w = &c->ev[i];
        if (w->j != 1) { c->ev[kept++] = *w; continue; }
        free(w->tok); free(w->ph); free(w->pk); free(w->ologp);
        scdb_kv_cache_free(&w->oracle);
    }
    c->nev = kept;
    c->mod[1] = f->mod[k];
    size_t per = (size_t)f->ns * f->d;
    for (int l = 0; l < f->L; l++) memcpy(c->samp[1][l], f->samp[k] + (size_t)l * per, per * sizeof(float));
    return SCDB_OK;
}

/* ------------------------------------------------------------ shared part */

scdb_err scdb_calib_fit_shared(scdb_calib *c, const scdb_codebook *cb, const scdb_calib_fleet *f,
                               const scdb_pair_fit *pf, scdb_pair **out)
{
    scdb_pair *p = NULL;
    float *zall = NULL, *kb = NULL, *vb = NULL, *hb = NULL;
    scdb_pair_fit def = {0};
    scdb_err rc;
    float *X = NULL, *W = NULL;   /* token input: rows [z | h0], weights */
    cx_ls *ls = NULL;
    if (!cb || !out || !fleet_fits(f, c) || f->n < 1) return SCDB_EINVAL;
    *out = NULL;
    if (!pf) pf = &def;
    if (pf->token_input && (cb->info.layers[0].kind != SCDB_CB_TOKENS || cb->info.k_post_rope)) return SCDB_EINVAL;
    const int n = c->ns, d = c->d, kv = c->kv, D = cb->info.code_dim;
    /* the producer's skeleton: its info, its token layer (the base's) */
    if ((rc = cx_cal_pair_skeleton(c, cb, 0, &p, NULL, NULL))) return rc;
    scdb_pair_info *in = &p->info;
    in->kind = SCDB_PAIR_SHARED;
    snprintf(in->consumer, sizeof in->consumer, "%s", SCDB_PAIR_SHARED_STEM);
    if ((rc = cx_model_fp(c->mod[0], in->base_fp, NULL, 0))) goto fail;
    memcpy(in->consumer_fp, in->base_fp, sizeof in->consumer_fp);
    in->hidden = pf->hidden > 0 ? pf->hidden : 128;
    p->all_input = in->all_input = 1;
    if ((rc = cx_cal_sample_codes(c, cb, &zall))) goto fail;
    rc = SCDB_ENOMEM;
    kb = malloc((size_t)n * kv * sizeof *kb);
    vb = malloc((size_t)n * kv * sizeof *vb);
    hb = malloc((size_t)n * d * sizeof *hb);
    if (!kb || !vb || !hb) goto fail;
    if (pf->token_input) {
        /* h0: the base's layer-0 H_in, every adapter's too (check_adapter) */
        if ((rc = cx_cal_tok_rows(c, zall, D, 0, &X)) || (rc = cx_ls_new(X, n, D + d, d, &ls))) goto fail;
        rc = SCDB_ENOMEM;
        if (!(W = malloc((size_t)kv * (D + d) * sizeof *W))) goto fail;
        in->token_input = 1;
    }
    VERB(c, "  shared part of %d adapters: decoders from every layer's code%s on the fleet's mean states "
         "(%d inputs, %d samples)\n", f->n, pf->token_input ? " and h0 (token input)" : "",
         D + (pf->token_input ? d : 0), n);
    for (int l = 0; l < c->L; l++) {
        if (cb->info.layers[l].kind != SCDB_CB_CODED) continue;
        cx_player *P = &p->L[l];
        for (size_t i = 0; i < (size_t)n * kv; i++) {
            kb[i] = f->kbar[(size_t)l * n * kv + i] / (float)f->n;
            vb[i] = f->vbar[(size_t)l * n * kv + i] / (float)f->n;
        }
        free(P->dk); free(P->dv);
        P->dk = malloc((size_t)kv * D * sizeof(float));
        P->dv = malloc((size_t)kv * D * sizeof(float));
        if (!P->dk || !P->dv) goto fail;
        if (ls) {
            double rk, rv;
            if ((rc = cx_ls_fit(ls, kb, kv, W, P->mk, &rk)) || (rc = cx_cal_tok_split(W, kv, D, d, &P->dk, &P->gk)) ||
                (rc = cx_ls_fit(ls, vb, kv, W, P->mv, &rv)) || (rc = cx_cal_tok_split(W, kv, D, d, &P->dv, &P->gv)))
                goto fail;
            VERB(c, "    layer %d: relative error of the mean K %.4f  V %.4f (token input)\n", l, rk, rv);
            continue;
        }
        if ((rc = cx_ols(zall, kb, n, D, kv, P->dk, P->mk)) || (rc = cx_ols(zall, vb, n, D, kv, P->dv, P->mv)))
            goto fail;
    }
    for (int k = 0; k < cb->info.n_candidates && !pf->no_train; k++) {
        int l = cb->info.candidates[k];
        cx_player *P = &p->L[l];
        const scdb_layer_weights *lw = scdb_model_layer(c->mod[0], l);
        for (size_t i = 0; i < (size_t)n * d; i++) hb[i] = f->hbar[(size_t)l * n * d + i] / (float)f->n;
        scdb_aligner_train t = {.hidden = in->hidden,
                                .steps = pf->steps > 0 ? pf->steps : 1500,
                                .batch = pf->batch > 0 ? pf->batch : 256,
                                .lr = pf->lr > 0 ? pf->lr : 2e-3f,
                                .seed = 0x5cdbf000ull + (uint64_t)l * 131,
                                .verbose = c->o.verbose,
                                .ops = c->ops};
        VERB(c, "  shared aligner layer %d (%d samples of the fleet's mean H_in, input %d -> hidden %d -> %d):\n",
             l, n, D, in->hidden, d);
        if ((rc = scdb_aligner_fit(zall, hb, n, D, d, lw->wk, lw->wv, kv, &t, &P->al, &P->align_loss_before,
                                   &P->align_loss_after)))
            goto fail;
        VERB(c, "    validation loss (relative MSE of regenerated K + V): linear start %.4f -> trained %.4f\n",
             P->align_loss_before, P->align_loss_after);
        P->has_aligner = 1;
        P->wk = malloc((size_t)kv * d * sizeof(float));
        P->wv = malloc((size_t)kv * d * sizeof(float));
        if (!P->wk || !P->wv) { rc = SCDB_ENOMEM; goto fail; }
        memcpy(P->wk, lw->wk, (size_t)kv * d * sizeof(float));
        memcpy(P->wv, lw->wv, (size_t)kv * d * sizeof(float));
        in->patch_order[in->n_aligners++] = l;
    }
    in->n_patch = in->n_aligners;
    in->late_added = !cx_cal_fitted_here(c, cb);
    snprintf(p->notes, sizeof p->notes,
             "shared part of a fleet of %d adapters: decoders (every layer's code) by least squares and "
             "aligners (SiLU MLP hidden %d + linear skip, Adam %d steps) on the mean of the adapters' states "
             "over %lld calibration tokens (%d samples); Wk/Wv and the token layer are the base's%s",
             f->n, in->hidden, pf->steps > 0 ? pf->steps : 1500, c->ntok, n,
             pf->token_input ? "; decoders read h0 too (token input: the base's layer-0 H_in of the token)" : "");
    cx_pair_finish(p);
    if ((rc = cx_pair_checksum(p, in->checksum))) goto fail;
    free(zall); free(kb); free(vb); free(hb); free(X); free(W);
    cx_ls_free(&ls);
    *out = p;
    return SCDB_OK;
fail:
    free(zall); free(kb); free(vb); free(hb); free(X); free(W);
    cx_ls_free(&ls);
    scdb_pair_free(&p);
    return rc;
}

/* ------------------------------------------------------------ an adapter's own parts */

/* Rank-r regression of R [n][o] on Z [n][D] (zbar, Gf: the centred codes'
 * mean and Cholesky factor of G): u [o][r], v [r][D] (f32, not rounded). */
static scdb_err rrr(const float *Z, const double *zbar, const double *Gf, int n, int D, const float *R,
                    int o, int r, float *u, float *v)
{
    float *Xf = malloc((size_t)D * o * sizeof *Xf);
    double *C = malloc((size_t)D * o * sizeof *C), *F = malloc((size_t)o * o * sizeof *F);
    double *w = malloc((size_t)o * sizeof *w), *E = malloc((size_t)o * o * sizeof *E);
    double *rbar = calloc((size_t)o, sizeof *rbar);
    if (!Xf || !C || !F || !w || !E || !rbar) {
        free(Xf); free(C); free(F); free(w); free(E); free(rbar);
        return SCDB_ENOMEM;
    }
    for (int i = 0; i < n; i++) for (int b = 0; b < o; b++) rbar[b] += R[(size_t)i * o + b];
    for (int b = 0; b < o; b++) rbar[b] /= n;
    scdb_k_gemm_cpu(1, 0, D, o, n, 1.0f, Z, D, R, o, 0.0f, Xf, o);   /* Z^T R */
    for (int a = 0; a < D; a++)
        for (int b = 0; b < o; b++)
            C[(size_t)a * o + b] = (double)Xf[(size_t)a * o + b] - n * zbar[a] * rbar[b];   /* Zc^T Rc */
    double *X = malloc((size_t)D * o * sizeof *X);
    if (!X) { free(Xf); free(C); free(F); free(w); free(E); free(rbar); return SCDB_ENOMEM; }
    memcpy(X, C, (size_t)D * o * sizeof *X);
    cx_chol_solve(Gf, D, C, o);                                       /* C = G^-1 X: [D][o] */
    for (int a = 0; a < o; a++)
        for (int b = 0; b <= a; b++) {
            double s = 0;
            for (int k = 0; k < D; k++) s += X[(size_t)k * o + a] * C[(size_t)k * o + b];
            F[(size_t)a * o + b] = F[(size_t)b * o + a] = s;
        }
    cx_sym_eig(F, o, w, E);
    for (int a = 0; a < o; a++)
        for (int k = 0; k < r; k++) u[(size_t)a * r + k] = (float)E[(size_t)a * o + k];
    for (int k = 0; k < r; k++)
        for (int b = 0; b < D; b++) {
            double s = 0;
            for (int a = 0; a < o; a++) s += E[(size_t)a * o + k] * C[(size_t)b * o + a];
            v[(size_t)k * D + b] = (float)s;
        }
    free(Xf); free(C); free(F); free(w); free(E); free(rbar); free(X);
    return SCDB_OK;
}

static void round16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = scdb_f16_to_f32(scdb_f32_to_f16(x[i]));
}

/* Intercept of T ~ Z (base + u v)^T: mean[o] = mean(T) - zbar (base + u v)^T;
 * base [o][D] may be NULL (zero). */
static void intercept(const float *T, int n, int o, const double *zbar, int D, const float *base,
                      const float *u, const float *v, int r, float *mean)
{
    for (int b = 0; b < o; b++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += T[(size_t)i * o + b];
        s /= n;
        for (int a = 0; a < D; a++) {
            double w = base ? base[(size_t)b * D + a] : 0.0;
            for (int k = 0; k < r; k++) w += (double)u[(size_t)b * r + k] * v[(size_t)k * D + a];
            s -= zbar[a] * w;
        }
        mean[b] = (float)s;
    }
}

/* Delta W_a - W_b [kv][d] as B [kv][lr] A [lr][d] (B = top eigenvectors of
 * dW dW^T; A = B^T dW): the numerical rank into *rank (eigenvalues above
 * 1e-9 of the largest), B and A of lr columns / rows (lr >= *rank; zero
 * beyond it) when b_out. */
static scdb_err delta_factor(const float *Wa, const float *Wb, int kv, int d, int lr, int *rank,
                             float *b_out, float *a_out)
{
    double *dW = malloc((size_t)kv * d * sizeof *dW), *S = malloc((size_t)kv * kv * sizeof *S);
    double *w = malloc((size_t)kv * sizeof *w), *E = malloc((size_t)kv * kv * sizeof *E);
    if (!dW || !S || !w || !E) { free(dW); free(S); free(w); free(E); return SCDB_ENOMEM; }
    for (size_t i = 0; i < (size_t)kv * d; i++) dW[i] = (double)Wa[i] - (double)Wb[i];
    for (int a = 0; a < kv; a++)
        for (int b = 0; b <= a; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += dW[(size_t)a * d + k] * dW[(size_t)b * d + k];
            S[(size_t)a * kv + b] = S[(size_t)b * kv + a] = s;
        }
    cx_sym_eig(S, kv, w, E);
    int r = 0;
    while (r < kv && w[r] > 1e-9 * w[0] && w[0] > 1e-24) r++;
    *rank = r;
    if (b_out)
        for (int k = 0; k < lr; k++) {
            for (int a = 0; a < kv; a++) b_out[(size_t)a * lr + k] = k < r ? (float)E[(size_t)a * kv + k] : 0.0f;
            for (int c = 0; c < d; c++) {
                double s = 0;
                if (k < r) for (int a = 0; a < kv; a++) s += E[(size_t)a * kv + k] * dW[(size_t)a * d + c];
                a_out[(size_t)k * d + c] = (float)s;
            }
        }
    free(dW); free(S); free(w); free(E);
    return SCDB_OK;
}

static int is_lora_layer(const scdb_pair *p, int l)
{
    if (l == 0 && p->info.has_tokens) return 1;
    for (int i = 0; i < p->info.n_aligners; i++) if (p->info.patch_order[i] == l) return 1;
    return 0;
}

/* The consumer must be an adapter of the codebook's producer: its base's
 * weights are the producer's, and the tensors a lora pair takes from the
 * base (embedding, layer 0's norm) are the producer's. */
static scdb_err check_adapter(const scdb_calib *c, const scdb_codebook *cb, char *why, size_t whylen)
{
    const scdb_model *m = c->mod[1];
    const char *bd = scdb_model_base_dir(m);
    char fp[SCDB_WEIGHTS_FP_HEX + 1];
    if (!bd) {
        snprintf(why, whylen, "consumer '%s' is not a LoRA adapter (an adapter pair needs one)",
                 scdb_model_cfg(m)->name);
        return SCDB_EINVAL;
    }
    scdb_err rc = scdb_weights_fp_ex(bd, NULL, fp, why, whylen);
    if (rc) return rc;
    if (strcmp(fp, cb->info.producer_fp)) {
        snprintf(why, whylen, "adapter '%s' has base %s with weights %s, the codebook's producer '%s' has %s",
                 scdb_model_cfg(m)->name, bd, fp, cb->info.producer, cb->info.producer_fp);
        return SCDB_EMISMATCH;
    }
    const scdb_layer_weights *a = scdb_model_layer(m, 0), *b = scdb_model_layer(c->mod[0], 0);
    float *ea = malloc((size_t)c->d * sizeof *ea), *eb = malloc((size_t)c->d * sizeof *eb);
    if (!ea || !eb) {
        free(ea);
        free(eb);
        return SCDB_ENOMEM;
    }
    int bad = memcmp(a->attn_norm, b->attn_norm, (size_t)c->d * sizeof(float)) != 0;
    for (int32_t t = 0; t < c->V && !bad; t++) {
        if (scdb_model_embed(m, &t, 1, ea) || scdb_model_embed(c->mod[0], &t, 1, eb)) { bad = 1; break; }
        bad = memcmp(ea, eb, (size_t)c->d * sizeof(float)) != 0;
    }
    free(ea);
    free(eb);
    if (bad) {
        snprintf(why, whylen, "adapter '%s' changes the embedding or layer 0's norm of its base: fit a full pair",
                 scdb_model_cfg(m)->name);
        return SCDB_EMISMATCH;
    }
    return SCDB_OK;
}

/* Token-input corrections' rows X = [z | h0] [n][D + d] (h0: the adapter's
 * layer-0 H_in, its base's), the same rows centred (Xc: what rrr reads,
 * with a zero mean, so that no cross-product cancels), their mean and the
 * Cholesky factor of their centred Gram (in double: h0 spans only the
 * tokens the samples hold, so the Gram is singular but for the ridge) plus
 * the ridge of the z-only corrections (below). */
static scdb_err tok_gram(const scdb_calib *c, const float *zall, int D, float **X, float **Xc, double **Gf,
                         double **xbar)
{
    int n = c->ns, w = D + c->d;
    scdb_err rc = cx_cal_tok_rows(c, zall, D, 1, X);
    if (rc) return rc;
    double *G = calloc((size_t)w * w, sizeof *G), *m = calloc((size_t)w, sizeof *m);
    float *xc = malloc((size_t)n * w * sizeof *xc);
    double *row = malloc((size_t)w * sizeof *row);
    if (!G || !m || !xc || !row) { free(G); free(m); free(xc); free(row); return SCDB_ENOMEM; }
    for (int i = 0; i < n; i++) for (int a = 0; a < w; a++) m[a] += (*X)[(size_t)i * w + a];
    for (int a = 0; a < w; a++) m[a] /= n;
    for (int i = 0; i < n; i++) {
        for (int a = 0; a < w; a++) {
            row[a] = (double)(*X)[(size_t)i * w + a] - m[a];
            xc[(size_t)i * w + a] = (float)row[a];
        }
        for (int a = 0; a < w; a++) {
            double ra = row[a], *Ga = G + (size_t)a * w;
            for (int b = 0; b <= a; b++) Ga[b] += ra * row[b];
        }
    }
    free(row);
    double tr = 0;
    for (int a = 0; a < w; a++) {
        for (int b = 0; b < a; b++) G[(size_t)b * w + a] = G[(size_t)a * w + b];
        tr += G[(size_t)a * w + a];
    }
    for (int a = 0; a < w; a++) G[(size_t)a * w + a] += 1e-6 * tr / w + 1e-12;
    double vt = 0.0;   /* h0's columns: cx_ls_new's ridge */
    for (int a = D; a < w; a++) vt += G[(size_t)a * w + a];
    for (int a = D; a < w; a++) G[(size_t)a * w + a] += CX_TOK_RIDGE * vt / c->d;
    if (cx_cholesky(G, w)) { free(G); free(m); free(xc); return SCDB_ERANGE; }
    *Xc = xc;
    *Gf = G;
    *xbar = m;
    return SCDB_OK;
}

scdb_err scdb_calib_fit_lora_pair(scdb_calib *c, const scdb_codebook *cb, const scdb_pair *shared,
                                  const scdb_lora_fit *lf, scdb_pair **out, char *why, size_t whylen)
{
    scdb_pair *own = NULL, *p = NULL;
    float *zall = NULL, *T = NULL, *R = NULL, *H = NULL;
    double *G = NULL, *zbar = NULL;
    float *Xt = NULL, *Xtc = NULL, *BT = NULL;   /* token_corr: rows [z | h0] (centred), shared [ds | g] */
    double *Gt = NULL, *ztbar = NULL, *zero = NULL;   /* ... their Gram factor and mean */
    scdb_lora_fit def = {0};
    char whyb[512];
    scdb_err rc;
    if (!why) { why = whyb; whylen = sizeof whyb; }
    why[0] = '\0';
    if (!c || !cb || !shared || !out || c->nm != 2 || c->ns == 0) return SCDB_EINVAL;
    *out = NULL;
    if (!lf) lf = &def;
    const scdb_pair_info *si = &shared->info;
    if (si->kind != SCDB_PAIR_SHARED || memcmp(&si->codebook_id, &cb->info.id, sizeof si->codebook_id) ||
        !shared->all_input) {
        snprintf(why, whylen, "the shared part is not a shared part of codebook %s", cb->info.id_hex);
        return SCDB_EMISMATCH;
    }
    if ((rc = check_adapter(c, cb, why, whylen))) return rc;
    const int n = c->ns, d = c->d, kv = c->kv, D = cb->info.code_dim;
    int rdec = lf->dec_rank > 0 ? lf->dec_rank : 16, ral = lf->align_rank > 0 ? lf->align_rank : 32;
    if (rdec > kv) rdec = kv;
    if (ral > d) ral = d;
    if (lf->dec_rank < 0) rdec = 0;
    if (lf->align_rank < 0) ral = 0;

    own = cx_pair_alloc();
    if (!own) return SCDB_ENOMEM;
    scdb_pair_info *in = &own->info;
    *in = *si;
    if ((rc = cx_pair_alloc_layers(own, si->n_layers))) goto fail;
    own->k_post_rope = shared->k_post_rope;
    own->all_input = 1;
    memcpy(own->layers, shared->layers, sizeof own->layers);
    own->code_dim = shared->code_dim;
    in->kind = SCDB_PAIR_LORA;
    const scdb_model_config *mc = scdb_model_cfg(c->mod[1]);
    snprintf(in->consumer, sizeof in->consumer, "%s", mc->name);
    if ((rc = cx_model_fp(c->mod[1], in->consumer_fp, why, whylen))) goto fail;
    snprintf(in->base, sizeof in->base, "%s", scdb_model_cfg(c->mod[0])->name);
    snprintf(in->shared, sizeof in->shared, "%s__%s", cb->info.producer, SCDB_PAIR_SHARED_STEM);
    memcpy(in->shared_id, si->checksum, sizeof in->shared_id);
    in->checksum[0] = '\0';
    in->dec_rank = rdec;
    in->align_rank = ral;
    in->late_added = 1;

    /* the codes of the samples, their mean and Gram factor */
    if ((rc = cx_cal_sample_codes(c, cb, &zall))) goto fail;
    rc = SCDB_ENOMEM;
    G = malloc((size_t)D * D * sizeof *G);
    zbar = calloc((size_t)D, sizeof *zbar);
    float *Gf = malloc((size_t)D * D * sizeof *Gf);
    T = malloc((size_t)n * (kv > d ? kv : d) * sizeof *T);
    R = malloc((size_t)n * (kv > d ? kv : d) * sizeof *R);
    H = malloc((size_t)n * d * sizeof *H);
    if (!G || !zbar || !Gf || !T || !R || !H) { free(Gf); goto fail; }
    scdb_k_gemm_cpu(1, 0, D, D, n, 1.0f, zall, D, zall, D, 0.0f, Gf, D);
    for (int i = 0; i < n; i++) for (int a = 0; a < D; a++) zbar[a] += zall[(size_t)i * D + a];
    for (int a = 0; a < D; a++) zbar[a] /= n;
    double tr = 0;
    for (int a = 0; a < D; a++)
        for (int b = 0; b < D; b++) G[(size_t)a * D + b] = (double)Gf[(size_t)a * D + b] - n * zbar[a] * zbar[b];
    free(Gf);
    for (int a = 0; a < D; a++) tr += G[(size_t)a * D + a];
    for (int a = 0; a < D; a++) G[(size_t)a * D + a] += 1e-6 * tr / D + 1e-12;
    if (cx_cholesky(G, D)) { rc = SCDB_ERANGE; goto fail; }

    /* token input (a token-input shared part): the corrections read [z | h0]
     * (token_corr, default) or z only, the shared h0 term kept as it is */
    int tok = si->token_input, tcorr = tok && rdec > 0 && lf->token_corr >= 0;
    in->token_input = tok;
    in->token_corr = tcorr;
    if (tcorr && (rc = tok_gram(c, zall, D, &Xt, &Xtc, &Gt, &ztbar))) goto fail;
    if (tcorr && (!(BT = malloc((size_t)kv * (D + d) * sizeof *BT)) || !(zero = calloc((size_t)(D + d), sizeof *zero)))) {
        rc = SCDB_ENOMEM;
        goto fail;
    }
    /* decoders: the adapter's K / V against the shared decoders' prediction */
    VERB(c, "  pair %s -> %s (lora, shared part %s): decoder corrections rank %d%s, aligner corrections rank %d\n",
         cb->info.producer, mc->name, in->shared_id, rdec,
         !tok ? "" : tcorr ? " (input [z | h0]: token input)" : " (input z; h0's decoders the shared part's)", ral);
    for (int l = 0; l < c->L; l++) {
        if (cb->info.layers[l].kind != SCDB_CB_CODED) continue;
        const cx_player *S = &shared->L[l];
        cx_player *O = &own->L[l];
        double rel[2][2];
        for (int pp = 0; pp < 2; pp++) {
            const float *ds = pp ? S->dv : S->dk, *ms = pp ? S->mv : S->mk;
            float **u = pp ? &O->cvu : &O->cku, **v = pp ? &O->cvv : &O->ckv, **m = pp ? &O->mv : &O->mk;
            /* the corrections' input: z, or (token_corr) [z | h0] with the shared
             * decoders [ds | g] */
            const float *Zd = zall, *bd = ds, *gs = pp ? S->gv : S->gk;
            const double *zb = zbar, *Gd = G;
            int Dd = D;
            if (tcorr) {
                Zd = Xt; zb = ztbar; Gd = Gt; Dd = D + d; bd = BT;
                for (int o = 0; o < kv; o++) {
                    memcpy(BT + (size_t)o * Dd, ds + (size_t)o * D, (size_t)D * sizeof *BT);
                    memcpy(BT + (size_t)o * Dd + D, gs + (size_t)o * d, (size_t)d * sizeof *BT);
                }
            }
            scdb_k_linear_cpu(c->samp[1][l], cx_cal_part_w(c, 1, l, pp), n, d, kv, T);
            /* token input, corrections of z only: the shared h0 term off the targets */
            if (tok && !tcorr) scdb_k_gemm_cpu(0, 1, n, kv, d, -1.0f, c->samp[1][0], d, gs, d, 1.0f, T, kv);
            for (int i = 0; i < n; i++) memcpy(R + (size_t)i * kv, ms, (size_t)kv * sizeof *R);
            scdb_k_gemm_cpu(0, 1, n, kv, Dd, 1.0f, Zd, Dd, bd, Dd, 1.0f, R, kv);   /* shared prediction */
            double se0 = 0, var = 0;
            for (int o = 0; o < kv; o++) {
                double mu = 0;
                for (int i = 0; i < n; i++) mu += T[(size_t)i * kv + o];
                mu /= n;
                for (int i = 0; i < n; i++) {
                    double e = T[(size_t)i * kv + o] - R[(size_t)i * kv + o], dv = T[(size_t)i * kv + o] - mu;
                    se0 += e * e;
                    var += dv * dv;
                }
            }
            for (size_t i = 0; i < (size_t)n * kv; i++) R[i] = T[i] - R[i];
            *m = malloc((size_t)kv * sizeof **m);
            if (!*m) { rc = SCDB_ENOMEM; goto fail; }
            if (rdec > 0) {
                *u = malloc((size_t)kv * rdec * sizeof **u);
                *v = malloc((size_t)rdec * Dd * sizeof **v);
                if (!*u || !*v) { rc = SCDB_ENOMEM; goto fail; }
                if ((rc = rrr(tcorr ? Xtc : Zd, tcorr ? zero : zb, Gd, n, Dd, R, kv, rdec, *u, *v))) goto fail;
                round16(*u, (size_t)kv * rdec);
                round16(*v, (size_t)rdec * Dd);
            }
            intercept(T, n, kv, zb, Dd, bd, *u, *v, rdec, *m);
            /* relative error after the correction */
            for (int i = 0; i < n; i++) memcpy(R + (size_t)i * kv, *m, (size_t)kv * sizeof *R);
            scdb_k_gemm_cpu(0, 1, n, kv, Dd, 1.0f, Zd, Dd, bd, Dd, 1.0f, R, kv);
            if (rdec > 0) {
                float *zu = malloc((size_t)n * rdec * sizeof *zu);
                if (!zu) { rc = SCDB_ENOMEM; goto fail; }
                scdb_k_gemm_cpu(0, 1, n, rdec, Dd, 1.0f, Zd, Dd, *v, Dd, 0.0f, zu, rdec);
                scdb_k_gemm_cpu(0, 1, n, kv, rdec, 1.0f, zu, rdec, *u, rdec, 1.0f, R, kv);
                free(zu);
            }
            double se1 = 0;
            for (size_t i = 0; i < (size_t)n * kv; i++) se1 += (double)(T[i] - R[i]) * (T[i] - R[i]);
            rel[pp][0] = var > 0 ? se0 / var : 0;
            rel[pp][1] = var > 0 ? se1 / var : 0;
            if (tcorr) {
                /* v [rdec][D + d] -> its code part and its h0 part */
                float *vz = NULL, **vt = pp ? &O->ctv : &O->ctk;
                if ((rc = cx_cal_tok_split(*v, rdec, D, d, &vz, vt))) { free(vz); goto fail; }
                free(*v);
                *v = vz;
            }
        }
        VERB(c, "    layer %d: relative error K %.4f -> %.4f  V %.4f -> %.4f (shared -> corrected)\n", l,
             rel[0][0], rel[0][1], rel[1][0], rel[1][1]);
    }
    /* aligners: the adapter's H_in against the shared aligner's */
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i];
        const cx_player *S = &shared->L[l];
        cx_player *O = &own->L[l];
        if ((rc = scdb_aligner_apply(&S->al, zall, D, n, H))) goto fail;
        const float *Y = c->samp[1][l];
        double se0 = 0, var = 0;
        for (int o = 0; o < d; o++) {
            double mu = 0;
            for (int k = 0; k < n; k++) mu += Y[(size_t)k * d + o];
            mu /= n;
            for (int k = 0; k < n; k++) {
                double e = Y[(size_t)k * d + o] - H[(size_t)k * d + o], dv = Y[(size_t)k * d + o] - mu;
                se0 += e * e;
                var += dv * dv;
            }
        }
        for (size_t k = 0; k < (size_t)n * d; k++) R[k] = Y[k] - H[k];
        O->adb2 = malloc((size_t)d * sizeof *O->adb2);
        if (!O->adb2) { rc = SCDB_ENOMEM; goto fail; }
        if (ral > 0) {
            O->au = malloc((size_t)d * ral * sizeof *O->au);
            O->av = malloc((size_t)ral * D * sizeof *O->av);
            if (!O->au || !O->av) { rc = SCDB_ENOMEM; goto fail; }
            if ((rc = rrr(zall, zbar, G, n, D, R, d, ral, O->au, O->av))) goto fail;
            round16(O->au, (size_t)d * ral);
            round16(O->av, (size_t)ral * D);
        }
        intercept(R, n, d, zbar, D, NULL, O->au, O->av, ral, O->adb2);
        double se1 = 0;
        {
            float *zu = ral > 0 ? malloc((size_t)n * ral * sizeof *zu) : NULL;
            if (ral > 0 && !zu) { rc = SCDB_ENOMEM; goto fail; }
            for (int k = 0; k < n; k++) memcpy(T + (size_t)k * d, O->adb2, (size_t)d * sizeof *T);
            if (ral > 0) {
                scdb_k_gemm_cpu(0, 1, n, ral, D, 1.0f, zall, D, O->av, D, 0.0f, zu, ral);
                scdb_k_gemm_cpu(0, 1, n, d, ral, 1.0f, zu, ral, O->au, ral, 1.0f, T, d);
            }
            free(zu);
            for (size_t k = 0; k < (size_t)n * d; k++) se1 += (double)(R[k] - T[k]) * (R[k] - T[k]);
        }
        VERB(c, "    aligner layer %d: relative error of H_in %.4f -> %.4f (shared -> corrected)\n", l,
             var > 0 ? se0 / var : 0, var > 0 ? se1 / var : 0);
    }
    /* Wk / Wv deltas on the token layer and the patch layers */
    int rk = 0, rv = 0;
    for (int l = 0; l < c->L; l++) {
        if (!is_lora_layer(own, l)) continue;
        int r;
        if ((rc = delta_factor(cx_cal_part_w(c, 1, l, 0), cx_cal_part_w(c, 0, l, 0), kv, d, 0, &r, NULL, NULL)))
            goto fail;
        if (r > rk) rk = r;
        if ((rc = delta_factor(cx_cal_part_w(c, 1, l, 1), cx_cal_part_w(c, 0, l, 1), kv, d, 0, &r, NULL, NULL)))
            goto fail;
        if (r > rv) rv = r;
    }
    in->lora_rank = rk > rv ? rk : rv;
    snprintf(in->lora_targets, sizeof in->lora_targets, "%s", rk && rv ? "k,v" : rk ? "k" : rv ? "v" : "");
    int lr = in->lora_rank;
    for (int l = 0; l < c->L && lr > 0; l++) {
        if (!is_lora_layer(own, l)) continue;
        cx_player *O = &own->L[l];
        int r;
        for (int pp = 0; pp < 2; pp++) {
            if (!(pp ? rv : rk)) continue;
            float **B = pp ? &O->lvb : &O->lkb, **A = pp ? &O->lva : &O->lka;
            *B = malloc((size_t)kv * lr * sizeof **B);
            *A = malloc((size_t)lr * d * sizeof **A);
            if (!*B || !*A) { rc = SCDB_ENOMEM; goto fail; }
            if ((rc = delta_factor(cx_cal_part_w(c, 1, l, pp), cx_cal_part_w(c, 0, l, pp), kv, d, lr, &r, *B, *A)))
                goto fail;
            round16(*B, (size_t)kv * lr);   /* as its file keeps them */
            round16(*A, (size_t)lr * d);
        }
    }
    VERB(c, "    Wk/Wv deltas of the adapter on layers 0 and the patch layers: rank %d (targets '%s')\n", lr,
         in->lora_targets);
    snprintf(own->notes, sizeof own->notes,
             "lora pair: shared part %s (%s) + rank-%d decoder and rank-%d aligner corrections fitted by "
             "reduced-rank regression on the adapter's states (%d samples, %lld calibration tokens), its means, "
             "and its Wk/Wv deltas (rank %d) on the base's%s",
             in->shared, in->shared_id, rdec, ral, n, c->ntok, lr,
             !tok ? "" : tcorr ? "; token input: the decoder corrections read [z | h0] too"
                               : "; token input: h0's decoders are the shared part's");
    /* the pair as loaded (low-rank, with the shared part), then its patch
     * order by measured KL */
    if ((rc = cx_pair_attach(own, (scdb_pair *)shared))) goto fail;   /* its count changes, not it */
    p = own;
    own = NULL;
    scdb_pair_fit pf = {.n_patch = lf->n_patch, .keep_order = lf->keep_order};
    if ((rc = cx_cal_patch_order(c, cb, 1, p, &pf))) goto fail;
    free(zall); free(T); free(R); free(H); free(G); free(zbar);
    free(Xt); free(Xtc); free(BT); free(Gt); free(ztbar); free(zero);
    *out = p;
    return SCDB_OK;
fail:
    free(zall); free(T); free(R); free(H); free(G); free(zbar);
    free(Xt); free(Xtc); free(BT); free(Gt); free(ztbar); free(zero);
    scdb_pair_free(&own);
    scdb_pair_free(&p);
    return rc;
}
