/* mlp.c — the learned policy's network (n_in -> hidden -> hidden -> 1,
 * tanh), its forward / backward pass, and its safetensors file (FORMATS.md,
 * "Eviction policy file"; version 3 names the inputs, evict/inputs.c
 * computes them). */
#include "evict_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

#define NF SCDB_EVICT_N_FEATURES
#define NI SCDB_EVICT_N_INPUTS
#define MAX_HIDDEN 1024
#define MAX_PROTECT (1 << 20)
#define MAX_POOL 63
#define POLICY_FORMAT "scdb-evict-policy"
#define POLICY_VERSION "2"
#define POLICY_VERSION_3 "3"
#define POLICY_VERSION_4 "4"   /* version 3 + the window head */
#define POLICY_VERSION_5 "5"   /* version 3 + the budget-modulated skip (+ the head, optional) */
#define POLICY_VERSION_6 "6"   /* version 3 + the per-head scorer (+ the head, optional) */
#define POLICY_FEATURES "alpha,vnorm,sigma,ent,pos,mass,budget"
#define POLICY_FEATURES_V1 "alpha,vnorm,sigma,ent,pos"   /* version 1: no mass */
#define NF_V1 5
#define POLICY_ACTIVATION "tanh"


static size_t count_params(int h, int n_in)
{
    return (size_t)h * n_in + h + (size_t)h * h + h + h + 1;
}

static void bind_params(scdb_evict_mlp *m)
{
    int h = m->hidden;
    float *p = m->params;
    m->w1 = p; p += (size_t)h * m->n_in;
    m->b1 = p; p += h;
    m->w2 = p; p += (size_t)h * h;
    m->b2 = p; p += h;
    m->w3 = p; p += h;
    m->b3 = p;
}

/* ids NULL: the seven version-2 inputs */
static scdb_err mlp_alloc(int hidden, const int *ids, int n_in, scdb_evict_mlp **out)
{
    scdb_evict_mlp *m;
    *out = NULL;
    if (!ids) n_in = NI;
    if (hidden < 1 || hidden > MAX_HIDDEN || n_in < 1 || n_in > SCDB_EVICT_MAX_INPUTS)
        return SCDB_EINVAL;
    for (int i = 0; ids && i < n_in; i++) {
        if (ids[i] < 0 || ids[i] >= SCDB_EVICT_N_ALL_INPUTS) return SCDB_EINVAL;
        for (int j = 0; j < i; j++)
            if (ids[j] == ids[i]) return SCDB_EINVAL;
    }
    if (!(m = calloc(1, sizeof *m))) return SCDB_ENOMEM;
    m->hidden = hidden;
    m->n_in = n_in;
    for (int i = 0; i < n_in; i++) m->in_id[i] = ids ? ids[i] : i;
    m->n_params = count_params(hidden, n_in);
    if (!(m->params = calloc(m->n_params, sizeof *m->params))) { free(m); return SCDB_ENOMEM; }
    bind_params(m);
    m->pool = 1;
    for (int i = 0; i < SCDB_EVICT_MAX_INPUTS; i++) { m->in_mean[i] = 0.0f; m->in_std[i] = 1.0f; }
    *out = m;
    return SCDB_OK;
}

/* the network reads exactly the seven version-2 inputs, in order */
static int is_v2(const scdb_evict_mlp *m)
{
    if (m->n_in != NI) return 0;
    for (int i = 0; i < NI; i++)
        if (m->in_id[i] != i) return 0;
    return 1;
}

static double urand(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}

scdb_err scdb_evict_mlp_new(int hidden, uint64_t seed, scdb_evict_mlp **out)
{
    return scdb_evict_mlp_new_inputs(hidden, NULL, NI, seed, out);
}

scdb_err scdb_evict_mlp_new_inputs(int hidden, const int *ids, int n_in, uint64_t seed,
                                   scdb_evict_mlp **out)
{
    scdb_err rc;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (!out) return SCDB_EINVAL;
    if ((rc = mlp_alloc(hidden, ids, n_in, out))) return rc;
    scdb_evict_mlp *m = *out;
    n_in = m->n_in;
    float a1 = 1.0f / sqrtf((float)n_in), a2 = 1.0f / sqrtf((float)hidden);
    for (int i = 0; i < hidden * n_in; i++) m->w1[i] = a1 * (float)(2.0 * urand(&s) - 1.0);
    for (int i = 0; i < hidden * hidden; i++) m->w2[i] = a2 * (float)(2.0 * urand(&s) - 1.0);
    for (int i = 0; i < hidden; i++) m->w3[i] = a2 * (float)(2.0 * urand(&s) - 1.0);
    m->sinks = 4;
    m->recent = 8;
    m->pool = 1;
    return SCDB_OK;
}

void scdb_evict_mlp_free(scdb_evict_mlp **pm)
{
    if (!pm || !*pm) return;
    free((*pm)->params);
    free(*pm);
    *pm = NULL;
}

scdb_err scdb_evict_mlp_copy(scdb_evict_mlp *dst, const scdb_evict_mlp *src)
{
    if (!dst || !src) return SCDB_EINVAL;
    if (dst->hidden != src->hidden || dst->n_in != src->n_in) return SCDB_ESHAPE;
    memcpy(dst->in_id, src->in_id, sizeof dst->in_id);
    memcpy(dst->params, src->params, src->n_params * sizeof *src->params);
    memcpy(dst->in_mean, src->in_mean, sizeof dst->in_mean);
    memcpy(dst->in_std, src->in_std, sizeof dst->in_std);
    dst->sinks = src->sinks;
    dst->recent = src->recent;
    dst->recent_frac = src->recent_frac;
    dst->pool = src->pool;
    dst->n_win = src->n_win;
    memcpy(dst->win_frac, src->win_frac, sizeof dst->win_frac);
    memcpy(dst->win_w, src->win_w, sizeof dst->win_w);
    dst->skip = src->skip;
    memcpy(dst->skip_w, src->skip_w, sizeof dst->skip_w);
    dst->heads = src->heads;
    return SCDB_OK;
}

int scdb_evict_mlp_window(const scdb_evict_mlp *m, int budget, float *probs, float *z_out)
{
    float z = log2f((float)(budget > 1 ? budget : 1) / 64.0f), lg[SCDB_EVICT_MAX_WIN], mx;
    int best = 0;
    if (z_out) *z_out = z;
    if (!m || m->n_win < 1) return -1;
    for (int c = 0; c < m->n_win; c++) {
        lg[c] = m->win_w[2 * c] + m->win_w[2 * c + 1] * z;
        if (lg[c] > lg[best]) best = c;
    }
    if (probs) {
        double sum = 0.0;
        mx = lg[best];
        for (int c = 0; c < m->n_win; c++) sum += (probs[c] = expf(lg[c] - mx));
        for (int c = 0; c < m->n_win; c++) probs[c] = (float)(probs[c] / sum);
    }
    return best;
}

void scdb_evict_mlp_protect_choice(const scdb_evict_mlp *m, int budget, int choice, int *sinks,
                                   int *recent)
{
    int r = m->recent;
    float frac = m->recent_frac;
    if (m->n_win > 0) {
        if (choice < 0 || choice >= m->n_win) choice = scdb_evict_mlp_window(m, budget, NULL, NULL);
        frac = m->win_frac[choice];
    }
    if (frac > 0.0f && budget > 0) {
        int f = (int)floor((double)frac * budget);
        if (f > r) r = f;
    }
    *sinks = m->sinks;
    *recent = r;
}

void scdb_evict_mlp_protect(const scdb_evict_mlp *m, int budget, int *sinks, int *recent)
{
    scdb_evict_mlp_protect_choice(m, budget, -1, sinks, recent);
}

/* forward of one standardised row; h1, h2 receive the activations */
static float forward_row(const scdb_evict_mlp *m, const float *x, float *h1, float *h2)
{
    int H = m->hidden, NIN = m->n_in;
    for (int j = 0; j < H; j++) {
        float s = m->b1[j];
        for (int k = 0; k < NIN; k++) s += m->w1[j * NIN + k] * x[k];
        h1[j] = scdb_evict_tanh(s);
    }
    float out = m->b3[0];
    for (int j = 0; j < H; j++) {
        float s = m->b2[j];
        const float *w = m->w2 + (size_t)j * H;
        for (int k = 0; k < H; k++) s += w[k] * h1[k];
        h2[j] = scdb_evict_tanh(s);
        out += m->w3[j] * h2[j];
    }
    return out;
}

/* scores[i] = the network on rows x[n][n_in] at once: two GEMMs and the
 * activations over whole blocks (what deployment runs; forward_row is the
 * per-row twin the backward pass uses, equal up to float rounding) */
SCDB_EVICT_CLONES
static scdb_err forward_rows(const scdb_evict_mlp *m, const float *x, int n, float *scores)
{
    const int H = m->hidden;
    float *h1 = malloc((size_t)n * H * sizeof *h1), *h2 = malloc((size_t)n * H * sizeof *h2);
    if (!h1 || !h2) { free(h1); free(h2); return SCDB_ENOMEM; }
    for (int i = 0; i < n; i++) memcpy(h1 + (size_t)i * H, m->b1, (size_t)H * sizeof *h1);
    scdb_k_gemm_cpu(0, 1, n, H, m->n_in, 1.0f, x, m->n_in, m->w1, m->n_in, 1.0f, h1, H);
    for (size_t i = 0; i < (size_t)n * H; i++) h1[i] = scdb_evict_tanh(h1[i]);
    for (int i = 0; i < n; i++) memcpy(h2 + (size_t)i * H, m->b2, (size_t)H * sizeof *h2);
    scdb_k_gemm_cpu(0, 1, n, H, H, 1.0f, h1, H, m->w2, H, 1.0f, h2, H);
    for (size_t i = 0; i < (size_t)n * H; i++) h2[i] = scdb_evict_tanh(h2[i]);
    for (int i = 0; i < n; i++) {
        const float *h = h2 + (size_t)i * H;
        float s = m->b3[0];
        for (int j = 0; j < H; j++) s += m->w3[j] * h[j];
        scores[i] = s;
    }
    free(h1);
    free(h2);
    return SCDB_OK;
}

/* standardise the inputs the network reads from one row of all inputs */
static void gather_row(const scdb_evict_mlp *m, const float *all, float *x)
{
    for (int k = 0; k < m->n_in; k++) x[k] = (all[m->in_id[k]] - m->in_mean[k]) / m->in_std[k];
}

void scdb_evict_mlp_add_skip(const scdb_evict_mlp *m, const float *x, int n, int budget,
                             float *scores)
{
    float c[SCDB_EVICT_MAX_INPUTS], z;
    if (!m || !m->skip) return;
    z = log2f((float)(budget > 1 ? budget : 1) / 64.0f);
    for (int k = 0; k < m->n_in; k++) c[k] = m->skip_w[2 * k] + m->skip_w[2 * k + 1] * z;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * m->n_in;
        float t = 0.0f;
        for (int k = 0; k < m->n_in; k++) t += c[k] * xi[k];
        scores[i] += t;
    }
}

void scdb_evict_mlp_gather(const scdb_evict_mlp *m, const float *all, float *x)
{
    gather_row(m, all, x);
}

scdb_err scdb_evict_mlp_forward_x(const scdb_evict_mlp *m, const float *x, int n, int budget,
                                  float *scores)
{
    scdb_err rc;
    if (!m || n < 0 || (n > 0 && (!x || !scores))) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if ((rc = forward_rows(m, x, n, scores))) return rc;
    scdb_evict_mlp_add_skip(m, x, n, budget, scores);
    return SCDB_OK;
}

void scdb_evict_mlp_score_budget(const scdb_evict_mlp *m, const float *feats, int n, int budget,
                                 float *scores, float *x_out)
{
    float h1[MAX_HIDDEN], h2[MAX_HIDDEN], all[SCDB_EVICT_N_ALL_INPUTS], x[SCDB_EVICT_MAX_INPUTS];
    float ls = logf((float)(budget > 1 ? budget : 1));
    float *rows = n > 0 ? malloc((size_t)n * m->n_in * sizeof *rows) : NULL;
    for (int i = 0; i < n; i++) {
        /* inputs beyond the seven need the accumulators: at their mean */
        for (int k = 0; k < m->n_in; k++) all[m->in_id[k]] = m->in_mean[k];
        scdb_evict_mlp_transform(feats + (size_t)i * NF, all);
        all[SCDB_EVICT_IN_BUDGET] = ls;
        gather_row(m, all, x);
        if (x_out) memcpy(x_out + (size_t)i * m->n_in, x, (size_t)m->n_in * sizeof *x);
        if (rows) memcpy(rows + (size_t)i * m->n_in, x, (size_t)m->n_in * sizeof *x);
        else {   /* no memory: row by row */
            scores[i] = forward_row(m, x, h1, h2);
            scdb_evict_mlp_add_skip(m, x, 1, budget, scores + i);
        }
    }
    if (rows && forward_rows(m, rows, n, scores))
        for (int i = 0; i < n; i++) scores[i] = forward_row(m, rows + (size_t)i * m->n_in, h1, h2);
    if (rows) scdb_evict_mlp_add_skip(m, rows, n, budget, scores);
    free(rows);
}

scdb_err scdb_evict_mlp_score_rows(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                   int lo, int hi, float *scores, float *x_out)
{
    float x[SCDB_EVICT_MAX_INPUTS];
    float *f, *all;
    scdb_err rc;
    const int n = a ? a->n : 0;
    if (!m || !a || budget < 1 || lo < 0 || hi > n || lo > hi || (hi > lo && !scores))
        return SCDB_EINVAL;
    if (hi == lo) return SCDB_OK;
    if (!(f = malloc((size_t)n * NF * sizeof *f))) return SCDB_ENOMEM;
    if ((rc = scdb_evict_features(a, f))) { free(f); return rc; }
    if (is_v2(m)) {   /* row by row from the features: only the rows asked for */
        scdb_evict_mlp_score_budget(m, f + (size_t)lo * NF, hi - lo, budget, scores + lo,
                                    x_out ? x_out + (size_t)lo * m->n_in : NULL);
        free(f);
        return SCDB_OK;
    }
    if (!(all = malloc((size_t)n * SCDB_EVICT_N_ALL_INPUTS * sizeof *all))) {
        free(f);
        return SCDB_ENOMEM;
    }
    /* every slot's inputs (the ranks and the per-cache values are over all
     * of them), then the rows asked for standardised in place at the front
     * of `all` and one batched pass over them */
    if (!(rc = scdb_evict_inputs(a, f, budget, all))) {
        for (int i = lo; i < hi; i++) {
            gather_row(m, all + (size_t)i * SCDB_EVICT_N_ALL_INPUTS, x);
            memcpy(all + (size_t)(i - lo) * m->n_in, x, (size_t)m->n_in * sizeof *x);
        }
        if (x_out) memcpy(x_out + (size_t)lo * m->n_in, all, (size_t)(hi - lo) * m->n_in * sizeof *x_out);
        rc = forward_rows(m, all, hi - lo, scores + lo);
        if (!rc) scdb_evict_mlp_add_skip(m, all, hi - lo, budget, scores + lo);
    }
    free(all);
    free(f);
    return rc;
}

scdb_err scdb_evict_mlp_score_acc(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                  float *scores, float *x_out)
{
    if (!a) return SCDB_EINVAL;
    return scdb_evict_mlp_score_rows(m, a, budget, 0, a->n, scores, x_out);
}

void scdb_evict_mlp_score(const scdb_evict_mlp *m, const float *feats, int n,
                          float *scores, float *x_out)
{
    scdb_evict_mlp_score_budget(m, feats, n, n, scores, x_out);
}

void scdb_evict_maxpool(const float *s, int n, int k, float *pooled, int *arg)
{
    int h = k > 1 ? k / 2 : 0;
    for (int j = 0; j < n; j++) {
        int lo = j - h < 0 ? 0 : j - h, hi = j + h >= n ? n - 1 : j + h, b = lo;
        for (int i = lo + 1; i <= hi; i++) if (s[i] > s[b]) b = i;
        pooled[j] = s[b];
        if (arg) arg[j] = b;
    }
}

void scdb_evict_mlp_backward(const scdb_evict_mlp *m, const float *x, int n,
                             const float *dscore, float *grad)
{
    int H = m->hidden, NIN = m->n_in;
    float h1[MAX_HIDDEN], h2[MAX_HIDDEN], d1[MAX_HIDDEN], d2[MAX_HIDDEN];
    float *gw1 = grad, *gb1 = gw1 + (size_t)H * NIN, *gw2 = gb1 + H, *gb2 = gw2 + (size_t)H * H,
          *gw3 = gb2 + H, *gb3 = gw3 + H;
    for (int i = 0; i < n; i++) {
        float g = dscore[i];
        const float *xi = x + (size_t)i * NIN;
        if (g == 0.0f) continue;
        forward_row(m, xi, h1, h2);
        gb3[0] += g;
        for (int j = 0; j < H; j++) {
            gw3[j] += g * h2[j];
            d2[j] = g * m->w3[j] * (1.0f - h2[j] * h2[j]);
        }
        for (int k = 0; k < H; k++) d1[k] = 0.0f;
        for (int j = 0; j < H; j++) {
            const float *w = m->w2 + (size_t)j * H;
            float *gw = gw2 + (size_t)j * H;
            gb2[j] += d2[j];
            for (int k = 0; k < H; k++) {
                gw[k] += d2[j] * h1[k];
                d1[k] += d2[j] * w[k];
            }
        }
        for (int k = 0; k < H; k++) {
            float d = d1[k] * (1.0f - h1[k] * h1[k]);
            gb1[k] += d;
            for (int f = 0; f < NIN; f++) gw1[k * NIN + f] += d * xi[f];
        }
    }
}

/* ------------------------------------------------------------ file */

scdb_err scdb_evict_mlp_save(const scdb_evict_mlp *m, const char *path,
                             const char *const *keys, const char *const *vals, int n_extra)
{
    scdb_st_writer *w = NULL;
    int64_t H = m ? m->hidden : 0, NIN = m ? m->n_in : 0;
    int64_t s5[1] = {NIN}, s1[1] = {1}, sh[1] = {H}, sh5[2] = {H, NIN}, shh[2] = {H, H},
            s1h[2] = {1, H};
    int64_t swin[2] = {m ? m->n_win : 0, 2}, sskip[2] = {NIN, 2};
    char num[32], names[SCDB_EVICT_MAX_INPUTS * 16] = "", fracs[SCDB_EVICT_MAX_WIN * 16] = "";
    scdb_err rc;

    if (!m || !path || m->n_win < 0 || m->n_win > SCDB_EVICT_MAX_WIN || (n_extra > 0 && (!keys || !vals)) || !(m->recent_frac >= 0.0f) ||
        !(m->recent_frac < 1.0f) || (m->heads.on && (m->skip || m->heads.n_win < 1 ||
                                     m->heads.n_win > SCDB_EVICT_HEAD_MAX_WIN ||
                                     !(m->heads.split > 0.0f && m->heads.split <= 1.0f) ||
                                     m->heads.sinks < 0 || m->heads.sinks > MAX_PROTECT)))
        return SCDB_EINVAL;
    for (int i = 0; i < m->n_in; i++) {
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s", i ? "," : "", scdb_evict_input_name(m->in_id[i]));
    }
    for (int c = 0; c < m->n_win; c++) {
        size_t l = strlen(fracs);
        if (!(m->win_frac[c] >= 0.0f && m->win_frac[c] < 1.0f)) return SCDB_EINVAL;
        snprintf(fracs + l, sizeof fracs - l, "%s%.9g", c ? "," : "", (double)m->win_frac[c]);
    }
    if ((rc = scdb_st_writer_new(&w))) return rc;
    if ((rc = scdb_st_writer_meta(w, "format", POLICY_FORMAT)) ||
        (rc = scdb_st_writer_meta(w, "version", m->heads.on ? POLICY_VERSION_6
                                               : m->skip ? POLICY_VERSION_5
                                               : m->n_win > 0 ? POLICY_VERSION_4
                                               : is_v2(m) ? POLICY_VERSION : POLICY_VERSION_3)) ||
        (rc = scdb_st_writer_meta(w, "features",
                                    is_v2(m) && m->n_win == 0 && !m->skip && !m->heads.on
                                        ? POLICY_FEATURES : names)) ||
        (rc = scdb_st_writer_meta(w, "activation", POLICY_ACTIVATION)))
        goto done;
    snprintf(num, sizeof num, "%d", m->sinks);
    if ((rc = scdb_st_writer_meta(w, "sinks", num))) goto done;
    snprintf(num, sizeof num, "%d", m->recent);
    if ((rc = scdb_st_writer_meta(w, "recent", num))) goto done;
    snprintf(num, sizeof num, "%.9g", (double)m->recent_frac);
    if ((rc = scdb_st_writer_meta(w, "recent_frac", num))) goto done;
    snprintf(num, sizeof num, "%d", m->pool);
    if ((rc = scdb_st_writer_meta(w, "pool", num))) goto done;
    if (m->n_win > 0 && ((rc = scdb_st_writer_meta(w, "window_choices", fracs)) ||
                         (rc = scdb_st_writer_add(w, "window.weight", SCDB_F32, 2, swin, m->win_w))))
        goto done;
    if (m->skip && (rc = scdb_st_writer_add(w, "skip.weight", SCDB_F32, 2, sskip, m->skip_w)))
        goto done;
    if (m->heads.on) {
        char hf[SCDB_EVICT_HEAD_MAX_WIN * 16] = "";
        int64_t sa[2] = {SCDB_EVICT_HEAD_FEATS, SCDB_EVICT_HEAD_CTX},
                sd[2] = {m->heads.n_win, SCDB_EVICT_HEAD_CTX};
        for (int c = 0; c < m->heads.n_win; c++) {
            size_t l = strlen(hf);
            if (!(m->heads.win_frac[c] >= 0.0f && m->heads.win_frac[c] < 1.0f)) {
                rc = SCDB_EINVAL;
                goto done;
            }
            snprintf(hf + l, sizeof hf - l, "%s%.9g", c ? "," : "", (double)m->heads.win_frac[c]);
        }
        snprintf(num, sizeof num, "%.9g", (double)m->heads.split);
        if ((rc = scdb_st_writer_meta(w, "heads_split", num))) goto done;
        snprintf(num, sizeof num, "%d", m->heads.sinks);
        if ((rc = scdb_st_writer_meta(w, "heads_sinks", num)) ||
            (rc = scdb_st_writer_meta(w, "heads_window_choices", hf)) ||
            (rc = scdb_st_writer_add(w, "heads.a", SCDB_F32, 2, sa, m->heads.a)) ||
            (rc = scdb_st_writer_add(w, "heads.d", SCDB_F32, 2, sd, m->heads.d)))
            goto done;
        int64_t sg[1] = {SCDB_EVICT_GATE_N};
        if (m->heads.has_gate &&
            (rc = scdb_st_writer_add(w, "heads.gate", SCDB_F32, 1, sg, m->heads.gate)))
            goto done;
    }
    for (int i = 0; i < n_extra; i++)
        if ((rc = scdb_st_writer_meta(w, keys[i], vals[i]))) goto done;
    if ((rc = scdb_st_writer_add(w, "input.mean", SCDB_F32, 1, s5, m->in_mean)) ||
        (rc = scdb_st_writer_add(w, "input.std", SCDB_F32, 1, s5, m->in_std)) ||
        (rc = scdb_st_writer_add(w, "fc1.weight", SCDB_F32, 2, sh5, m->w1)) ||
        (rc = scdb_st_writer_add(w, "fc1.bias", SCDB_F32, 1, sh, m->b1)) ||
        (rc = scdb_st_writer_add(w, "fc2.weight", SCDB_F32, 2, shh, m->w2)) ||
        (rc = scdb_st_writer_add(w, "fc2.bias", SCDB_F32, 1, sh, m->b2)) ||
        (rc = scdb_st_writer_add(w, "out.weight", SCDB_F32, 2, s1h, m->w3)) ||
        (rc = scdb_st_writer_add(w, "out.bias", SCDB_F32, 1, s1, m->b3)))
        goto done;
    rc = scdb_st_writer_write(w, path);
done:
    scdb_st_writer_free(&w);
    return rc;
}

/* Parse a non-negative decimal integer metadata value. */
static int parse_count(const char *s, int *out)
{
    char *end;
    long v;
    if (!s || !*s) return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > MAX_PROTECT) return -1;
    *out = (int)v;
    return 0;
}

/* Parse a metadata fraction in [0, 1). */
static int parse_frac(const char *s, float *out)
{
    char *end;
    double v;
    if (!s || !*s) return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0.0 || v >= 1.0) return -1;
    *out = (float)v;
    return 0;
}

static int all_finite(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return 0;
    return 1;
}

void scdb_evict_meta_free(scdb_evict_meta *md)
{
    if (!md) return;
    for (int i = 0; i < md->n; i++) { free(md->keys[i]); free(md->vals[i]); }
    free(md->keys);
    free(md->vals);
    memset(md, 0, sizeof *md);
}

static scdb_err copy_meta(scdb_evict_meta *md, const scdb_st_file *f)
{
    int n = scdb_st_meta_count(f);
    md->keys = calloc((size_t)(n > 0 ? n : 1), sizeof *md->keys);
    md->vals = calloc((size_t)(n > 0 ? n : 1), sizeof *md->vals);
    if (!md->keys || !md->vals) return SCDB_ENOMEM;
    for (int i = 0; i < n; i++) {
        const char *k, *v;
        if (scdb_st_meta_at(f, i, &k, &v)) continue;
        md->keys[md->n] = strdup(k);
        md->vals[md->n] = strdup(v);
        if (!md->keys[md->n] || !md->vals[md->n]) {
            free(md->keys[md->n]);
            free(md->vals[md->n]);
            return SCDB_ENOMEM;
        }
        md->n++;
    }
    return SCDB_OK;
}

/* A version-6 file's per-head scorer: its metadata (split, sinks, window
 * choices) and its two tensors (FORMATS.md). */
static scdb_err load_heads(const scdb_st_file *f, const char *path, scdb_evict_heads *h,
                           char *errbuf, size_t errlen)
{
    const scdb_st_tensor *t;
    const char *wc = scdb_st_meta(f, "heads_window_choices");
    char buf[SCDB_EVICT_HEAD_MAX_WIN * 24 + 1], *save = NULL, *tok;
    scdb_err rc;
    memset(h, 0, sizeof *h);
    {
        const char *sp = scdb_st_meta(f, "heads_split");
        char *end = NULL;
        double x = sp && *sp ? strtod(sp, &end) : NAN;
        if (!sp || !*sp || *end || !(x > 0.0 && x <= 1.0)) {
            scdb_errf(errbuf, errlen, "%s: metadata 'heads_split' must be a fraction in (0, 1]", path);
            return SCDB_ERANGE;
        }
        h->split = (float)x;
    }
    if (parse_count(scdb_st_meta(f, "heads_sinks"), &h->sinks)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'heads_sinks' must be an integer in [0, %d]", path,
                  MAX_PROTECT);
        return SCDB_ERANGE;
    }
    int bad = !wc || strlen(wc) >= sizeof buf || scdb_list_has_empty_field(wc);
    if (!bad) {
        snprintf(buf, sizeof buf, "%s", wc);
        for (tok = strtok_r(buf, ",", &save); tok && !bad; tok = strtok_r(NULL, ",", &save)) {
            bad = h->n_win == SCDB_EVICT_HEAD_MAX_WIN || parse_frac(tok, &h->win_frac[h->n_win]);
            if (!bad) h->n_win++;
        }
        bad |= h->n_win == 0;
    }
    if (bad) {
        scdb_errf(errbuf, errlen, "%s: metadata 'heads_window_choices' is %s%s%s, want 1 to %d "
                  "fractions in [0, 1), comma-separated", path, wc ? "\"" : "missing", wc ? wc : "",
                  wc ? "\"" : "", SCDB_EVICT_HEAD_MAX_WIN);
        return SCDB_ERANGE;
    }
    int64_t sa[2] = {SCDB_EVICT_HEAD_FEATS, SCDB_EVICT_HEAD_CTX}, sd[2] = {h->n_win, SCDB_EVICT_HEAD_CTX};
    if ((rc = scdb_st_expect(f, "heads.a", SCDB_F32, 2, sa, &t, errbuf, errlen))) return rc;
    memcpy(h->a, t->data, t->nbytes);
    if ((rc = scdb_st_expect(f, "heads.d", SCDB_F32, 2, sd, &t, errbuf, errlen))) return rc;
    memcpy(h->d, t->data, t->nbytes);
    if (scdb_st_find(f, "heads.gate")) {
        int64_t sg[1] = {SCDB_EVICT_GATE_N};
        if ((rc = scdb_st_expect(f, "heads.gate", SCDB_F32, 1, sg, &t, errbuf, errlen))) return rc;
        memcpy(h->gate, t->data, t->nbytes);
        h->has_gate = 1;
    }
    if (!all_finite(h->a, SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX) ||
        !all_finite(h->d, (size_t)h->n_win * SCDB_EVICT_HEAD_CTX) ||
        !all_finite(h->gate, SCDB_EVICT_GATE_N)) {
        scdb_errf(errbuf, errlen, "%s: non-finite weights in the per-head scorer", path);
        return SCDB_ERANGE;
    }
    h->on = 1;
    return SCDB_OK;
}

scdb_err scdb_evict_mlp_load(const char *path, scdb_evict_mlp **out, scdb_evict_meta *meta,
                             char *errbuf, size_t errlen)
{
    scdb_st_file *f = NULL;
    scdb_evict_mlp *mlp = NULL;
    const scdb_st_tensor *t;
    const char *v;
    int sinks, recent, pool, nf;
    float recent_frac;
    const char *want_features;
    int64_t H;
    scdb_err rc;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (meta) memset(meta, 0, sizeof *meta);
    if (!path) return SCDB_EINVAL;
    if ((rc = scdb_st_open(path, &f, errbuf, errlen))) return rc;

    static const struct { const char *key, *want; } fixed[] = {
        {"format", POLICY_FORMAT}, {"activation", POLICY_ACTIVATION}};
    for (size_t i = 0; i < SCDB_ARRAY_LEN(fixed); i++) {
        v = scdb_st_meta(f, fixed[i].key);
        if (!v || strcmp(v, fixed[i].want)) {
            scdb_errf(errbuf, errlen, "%s: metadata '%s' is %s%s%s, want \"%s\"", path, fixed[i].key,
                 v ? "\"" : "missing", v ? v : "", v ? "\"" : "", fixed[i].want);
            rc = SCDB_EMISMATCH;
            goto fail;
        }
    }
    /* version 1: five features (no mass); version 2: six and the budget;
     * version 3: the inputs named in `features` */
    v = scdb_st_meta(f, "version");
    int v3 = 0, v4 = 0, v5 = 0, v6 = 0, n_ids = 0, ids[SCDB_EVICT_MAX_INPUTS], n_win = 0;
    float win_frac[SCDB_EVICT_MAX_WIN];
    if (v && !strcmp(v, "1")) nf = NF_V1, want_features = POLICY_FEATURES_V1;
    else if (v && !strcmp(v, POLICY_VERSION)) nf = NI, want_features = POLICY_FEATURES;
    else if (v && !strcmp(v, POLICY_VERSION_3)) nf = 0, want_features = NULL, v3 = 1;
    else if (v && !strcmp(v, POLICY_VERSION_4)) nf = 0, want_features = NULL, v3 = 1, v4 = 1;
    else if (v && !strcmp(v, POLICY_VERSION_5)) {
        /* version 5: the skip, and the head if the file has one */
        nf = 0, want_features = NULL, v3 = 1, v5 = 1;
        v4 = scdb_st_meta(f, "window_choices") != NULL;
    } else if (v && !strcmp(v, POLICY_VERSION_6)) {
        /* version 6: the per-head scorer, and the head if the file has one */
        nf = 0, want_features = NULL, v3 = 1, v6 = 1;
        v4 = scdb_st_meta(f, "window_choices") != NULL;
    } else {
        scdb_errf(errbuf, errlen, "%s: metadata 'version' is %s%s%s, want \"1\", \"%s\", \"%s\", \"%s\", \"%s\" or \"%s\"",
             path, v ? "\"" : "missing", v ? v : "", v ? "\"" : "", POLICY_VERSION, POLICY_VERSION_3,
             POLICY_VERSION_4, POLICY_VERSION_5, POLICY_VERSION_6);
        rc = SCDB_EMISMATCH;
        goto fail;
    }
    v = scdb_st_meta(f, "features");
    if (v3) {
        /* comma-separated input names, each known, none twice */
        char buf[SCDB_EVICT_MAX_INPUTS * 16 + 1], *save = NULL, *tok;
        int bad = !v || strlen(v) >= sizeof buf;
        bad = bad || scdb_list_has_empty_field(v);      /* ",age", "age,,alpha", "age," */
        if (!bad) {
            snprintf(buf, sizeof buf, "%s", v);
            for (tok = strtok_r(buf, ",", &save); tok && !bad; tok = strtok_r(NULL, ",", &save)) {
                int id = scdb_evict_input_parse(tok);
                bad = id < 0 || n_ids == SCDB_EVICT_MAX_INPUTS;
                for (int j = 0; !bad && j < n_ids; j++) bad = ids[j] == id;
                if (!bad) ids[n_ids++] = id;
            }
            bad |= n_ids == 0;
        }
        if (bad) {
            scdb_errf(errbuf, errlen, "%s: metadata 'features' is %s%s%s, want distinct input names (alpha, ..., "
                 "ctx_n) for version %s", path, v ? "\"" : "missing", v ? v : "", v ? "\"" : "",
                 v6 ? POLICY_VERSION_6 : v5 ? POLICY_VERSION_5 : v4 ? POLICY_VERSION_4 : POLICY_VERSION_3);
            rc = SCDB_EMISMATCH;
            goto fail;
        }
        nf = n_ids;
    } else if (!v || strcmp(v, want_features)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'features' is %s%s%s, want \"%s\" for version %d", path,
             v ? "\"" : "missing", v ? v : "", v ? "\"" : "", want_features, nf == NI ? 2 : 1);
        rc = SCDB_EMISMATCH;
        goto fail;
    }
    if (parse_count(scdb_st_meta(f, "sinks"), &sinks) ||
        parse_count(scdb_st_meta(f, "recent"), &recent)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'sinks' and 'recent' must be integers in [0, %d]", path, MAX_PROTECT);
        rc = SCDB_ERANGE;
        goto fail;
    }
    recent_frac = 0.0f;
    if (scdb_st_meta(f, "recent_frac") && parse_frac(scdb_st_meta(f, "recent_frac"), &recent_frac)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'recent_frac' must be a number in [0, 1)", path);
        rc = SCDB_ERANGE;
        goto fail;
    }
    pool = 1;
    if (scdb_st_meta(f, "pool") &&
        (parse_count(scdb_st_meta(f, "pool"), &pool) || pool % 2 == 0 || pool > MAX_POOL)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'pool' must be an odd integer in [1, %d]", path, MAX_POOL);
        rc = SCDB_ERANGE;
        goto fail;
    }

    if (v4) {
        /* comma-separated fractions in [0, 1), 1..SCDB_EVICT_MAX_WIN of them */
        const char *wc = scdb_st_meta(f, "window_choices");
        char buf[SCDB_EVICT_MAX_WIN * 24 + 1], *save = NULL, *tok;
        int bad = !wc || strlen(wc) >= sizeof buf;
        bad = bad || scdb_list_has_empty_field(wc);     /* ",0.5", "0,,0.5", "0.5," */
        if (!bad) {
            snprintf(buf, sizeof buf, "%s", wc);
            for (tok = strtok_r(buf, ",", &save); tok && !bad; tok = strtok_r(NULL, ",", &save)) {
                bad = n_win == SCDB_EVICT_MAX_WIN || parse_frac(tok, &win_frac[n_win]);
                if (!bad) n_win++;
            }
            bad |= n_win == 0;
        }
        if (bad) {
            scdb_errf(errbuf, errlen, "%s: metadata 'window_choices' is %s%s%s, want 1 to %d fractions "
                      "in [0, 1), comma-separated, for a window head", path, wc ? "\"" : "missing",
                      wc ? wc : "", wc ? "\"" : "", SCDB_EVICT_MAX_WIN);
            rc = SCDB_ERANGE;
            goto fail;
        }
    }

    /* every tensor is one this version defines: a head's weights without
     * its choices, or a skip in a file of another version, would be
     * silently dropped otherwise */
    for (int i = 0; i < scdb_st_count(f); i++) {
        static const char *const known[] = {"input.mean", "input.std", "fc1.weight", "fc1.bias",
                                            "fc2.weight", "fc2.bias",  "out.weight", "out.bias"};
        const char *name = scdb_st_at(f, i)->name;
        int ok = (v4 && !strcmp(name, "window.weight")) || (v5 && !strcmp(name, "skip.weight")) ||
                 (v6 && (!strcmp(name, "heads.a") || !strcmp(name, "heads.d") ||
                         !strcmp(name, "heads.gate")));
        for (size_t k = 0; !ok && k < SCDB_ARRAY_LEN(known); k++) ok = !strcmp(name, known[k]);
        if (!ok) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s' is not one of this file's (version %s%s)", path,
                      name, scdb_st_meta(f, "version"),
                      !strcmp(name, "window.weight") ? ": a head needs metadata 'window_choices'" : "");
            rc = SCDB_EMISMATCH;
            goto fail;
        }
    }
    if (!(t = scdb_st_find(f, "fc1.weight"))) {
        scdb_errf(errbuf, errlen, "%s: tensor 'fc1.weight' missing", path);
        rc = SCDB_ENOTFOUND;
        goto fail;
    }
    if (t->dtype != SCDB_F32) {
        scdb_errf(errbuf, errlen, "%s: tensor 'fc1.weight' has dtype %s, want F32", path, scdb_dtype_name(t->dtype));
        rc = SCDB_EDTYPE;
        goto fail;
    }
    if (t->ndim != 2 || t->shape[1] != nf || t->shape[0] < 1 || t->shape[0] > MAX_HIDDEN) {
        scdb_errf(errbuf, errlen, "%s: tensor 'fc1.weight' must be [hidden <= %d, %d]", path, MAX_HIDDEN, nf);
        rc = SCDB_ESHAPE;
        goto fail;
    }
    H = t->shape[0];
    if ((rc = mlp_alloc((int)H, v3 ? ids : NULL, n_ids, &mlp))) goto fail;
    mlp->sinks = sinks;
    mlp->recent = recent;
    mlp->recent_frac = recent_frac;
    mlp->pool = pool;
    mlp->n_win = n_win;
    memcpy(mlp->win_frac, win_frac, (size_t)n_win * sizeof *win_frac);
    if (v4) {
        int64_t shape[2] = {n_win, 2};
        if ((rc = scdb_st_expect(f, "window.weight", SCDB_F32, 2, shape, &t, errbuf, errlen)))
            goto fail;
        memcpy(mlp->win_w, t->data, t->nbytes);
        if (!all_finite(mlp->win_w, (size_t)2 * n_win)) {
            scdb_errf(errbuf, errlen, "%s: non-finite weights in 'window.weight'", path);
            rc = SCDB_ERANGE;
            goto fail;
        }
    }
    if (v5) {
        int64_t shape[2] = {nf, 2};
        if ((rc = scdb_st_expect(f, "skip.weight", SCDB_F32, 2, shape, &t, errbuf, errlen)))
            goto fail;
        memcpy(mlp->skip_w, t->data, t->nbytes);
        mlp->skip = 1;
        if (!all_finite(mlp->skip_w, (size_t)2 * nf)) {
            scdb_errf(errbuf, errlen, "%s: non-finite weights in 'skip.weight'", path);
            rc = SCDB_ERANGE;
            goto fail;
        }
    }
    if (v6 && (rc = load_heads(f, path, &mlp->heads, errbuf, errlen))) goto fail;
    {
        /* rows of nf inputs land in rows of NI (a version-1 file's missing
         * mass and budget inputs: weight 0, mean 0, std 1, so it scores as
         * before) */
        struct { const char *name; int ndim; int64_t d0, d1; float *dst; int dst_row; } spec[] = {
            {"input.mean", 1, nf, 0, mlp->in_mean, 0}, {"input.std", 1, nf, 0, mlp->in_std, 0},
            {"fc1.weight", 2, H, nf, mlp->w1, mlp->n_in}, {"fc1.bias", 1, H, 0, mlp->b1, 0},
            {"fc2.weight", 2, H, H, mlp->w2, 0}, {"fc2.bias", 1, H, 0, mlp->b2, 0},
            {"out.weight", 2, 1, H, mlp->w3, 0}, {"out.bias", 1, 1, 0, mlp->b3, 0}};
        for (size_t i = 0; i < SCDB_ARRAY_LEN(spec); i++) {
            int64_t shape[2] = {spec[i].d0, spec[i].d1};
            if ((rc = scdb_st_expect(f, spec[i].name, SCDB_F32, spec[i].ndim, shape, &t,
                                     errbuf, errlen)))
                goto fail;
            if (spec[i].dst_row && spec[i].dst_row != spec[i].d1) {
                const float *src = t->data;
                for (int64_t r = 0; r < spec[i].d0; r++)
                    memcpy(spec[i].dst + r * spec[i].dst_row, src + r * spec[i].d1,
                           (size_t)spec[i].d1 * sizeof *src);
            } else {
                memcpy(spec[i].dst, t->data, t->nbytes);
            }
        }
    }
    if (!all_finite(mlp->params, mlp->n_params) ||
        !all_finite(mlp->in_mean, (size_t)mlp->n_in) ||
        !all_finite(mlp->in_std, (size_t)mlp->n_in)) {
        scdb_errf(errbuf, errlen, "%s: non-finite weights", path);
        rc = SCDB_ERANGE;
        goto fail;
    }
    for (int i = 0; i < mlp->n_in; i++)
        if (!(mlp->in_std[i] > 0.0f)) {
            scdb_errf(errbuf, errlen, "%s: input.std[%d] must be > 0", path, i);
            rc = SCDB_ERANGE;
            goto fail;
        }
    if (meta && (rc = copy_meta(meta, f))) goto fail;
    scdb_st_close(&f);
    *out = mlp;
    return SCDB_OK;
fail:
    scdb_evict_meta_free(meta);
    scdb_evict_mlp_free(&mlp);
    scdb_st_close(&f);
    return rc;
}

scdb_err scdb_evict_mlp_clone(const scdb_evict_mlp *m, scdb_evict_mlp **out)
{
    scdb_err rc;
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!m) return SCDB_EINVAL;
    if ((rc = mlp_alloc(m->hidden, m->in_id, m->n_in, out)) || (rc = scdb_evict_mlp_copy(*out, m)))
        scdb_evict_mlp_free(out);
    return rc;
}
