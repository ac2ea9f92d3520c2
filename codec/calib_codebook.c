/* calib_codebook.c — the producer codebook: reduced-rank bases per (layer, part), rank allocation, candidate patch layers by measured criticality (calib.h; the method is described there). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (post) cx_cal_cov_k(c, 0, l, Sxx);
    else cx_cal_cov_h(c, 0, l, Sxx);

    if (f->pca) {
        /* principal directions of the producer's own state */
        if (p == CX_H || post) {
            memcpy(G, Sxx, (size_t)in * in * sizeof *G);
            cx_sym_eig(G, in, w, Vq);
            for (int a = 0; a < in; a++)
                for (int k = 0; k < r; k++) E[(size_t)a * r + k] = Vq[(size_t)a * in + k];
        } else {
            const float *W = cx_cal_part_w(c, 0, l, p);
            cx_cal_sandwich(W, t, in, Sxx, G);
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
            if ((rc = cx_cal_part_stats(c, l, p, j, post, blk, &tr))) goto done;
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


/* ------------------------------------------------------------ codebook */

/* rk / rv: per-layer K / V widths of the non-candidate layers (NULL: the
 * uniform f->r_k / f->r_v).  verbose: progress on stderr. */
static scdb_err make_codebook(scdb_calib *c, const scdb_cb_fit *f, const int *cand,
                              const int *rk, const int *rv, int verbose, scdb_codebook **out)
{
    scdb_codebook *cb = cx_codebook_alloc();
    scdb_progress prog;
    scdb_err rc;
    if (!cb) return SCDB_ENOMEM;
    scdb_progress_begin(&prog, verbose && c->o.verbose ? stderr : NULL, c->L);
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
        scdb_progress_step(&prog, l + 1, "  codebook: layer %d/%d fitted", l + 1, c->L);
    }
    scdb_progress_end(&prog);
    snprintf(cb->notes, sizeof cb->notes,
             "method=%s; %d windows x %d tokens (%lld tokens); ridge=%g; producer=%s; models=%d",
             in->method, c->nwin, c->o.window, c->ntok, f->ridge > 0 ? f->ridge : 1e-3,
             scdb_model_cfg(c->mod[0])->name, c->nm);
    if ((rc = cx_codebook_finish(cb))) goto fail;
    *out = cb;
    return SCDB_OK;
fail:
    scdb_progress_end(&prog);
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
    const float *Wp = cx_cal_part_w(c, 0, l, p), *Wj = cx_cal_part_w(c, j, l, p);
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
                if ((rc = cx_cal_pair_skeleton(c, cb, j, &pp, NULL, NULL))) break;
                cx_cal_dec_ctx x = {.cb = cb, .p = pp, .n_patch = 0, .only_layer = -1};
                rc = cx_cal_eval_kl(c, j, cx_cal_build_decode, &x, &k1, &t1);
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

static scdb_err fit_codebook(scdb_calib *c, const scdb_cb_fit *f, scdb_codebook **out)
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
        if ((rc = cx_cal_pair_skeleton(c, tmp, j, &pp, rk, rv))) goto done;
        for (int l = 0; l < c->L; l++) {
            double kl = 0, t1 = 0;
            if (tmp->info.layers[l].kind == SCDB_CB_CODED) {
                cx_cal_dec_ctx x = {.cb = tmp, .p = pp, .n_patch = 0, .only_layer = l};
                if ((rc = cx_cal_eval_kl(c, j, cx_cal_build_decode, &x, &kl, &t1))) goto done;
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

/* The session remembers the id of every codebook it fitted: a pair fitted
 * against any other codebook is late-added (calib_pair.c). */
scdb_err scdb_calib_fit_codebook(scdb_calib *c, const scdb_cb_fit *f, scdb_codebook **out)
{
    if (c && c->o.samples_only && c->nm > 1) return SCDB_EINVAL;   /* it needs the consumers' moments */
    scdb_err rc = fit_codebook(c, f, out);
    if (rc) return rc;
    scdb_codec_id *g = realloc(c->fitted, (size_t)(c->n_fitted + 1) * sizeof *g);
    if (!g) {
        scdb_codebook_free(out);
        return SCDB_ENOMEM;
    }
    c->fitted = g;
    c->fitted[c->n_fitted++] = (*out)->info.id;
    return SCDB_OK;
}

int cx_cal_fitted_here(const scdb_calib *c, const scdb_codebook *cb)
{
    for (int i = 0; i < c->n_fitted; i++)
        if (!memcmp(&c->fitted[i], &cb->info.id, sizeof cb->info.id)) return 1;
    return 0;
}
