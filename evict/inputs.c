/* inputs.c — every input a learned policy can read (the SCDB_EI_* list in
 * evict.h), computed at an eviction from the accumulators, the six raw
 * features and the budget.  Beyond DistillCache's per-token features they
 * are scale-free by construction, so that one network means the same thing
 * at every budget, cache length, model and text: the slot's age in budget
 * units, its rank by each heuristic's signal relative to the budget (the
 * heuristics' own decisions, as inputs), its V norm standardised within the
 * cache, and two per-cache context values. */
#include "evict_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[SCDB_EVICT_N_ALL_INPUTS] = {
    "alpha",  "vnorm",       "sigma",       "ent",       "pos",     "mass",
    "budget", "age",         "rank_mass",   "rank_alpha", "rank_window", "rank_snapkv",
    "rank_last", "vnorm_z",  "life",        "rank_life", "ctx_ent", "ctx_n"};

const char *scdb_evict_input_name(int id)
{
    return id >= 0 && id < SCDB_EVICT_N_ALL_INPUTS ? NAMES[id] : NULL;
}

int scdb_evict_input_parse(const char *name)
{
    for (int i = 0; name && i < SCDB_EVICT_N_ALL_INPUTS; i++)
        if (!strcmp(name, NAMES[i])) return i;
    return -1;
}

scdb_err scdb_evict_features(const scdb_evict_acc *a, float *f)
{
    if (!a || (!f && a->n > 0)) return SCDB_EINVAL;
    if (scdb_evict_acc_mode(a) == SCDB_EVICT_MODE_SPLIT) return SCDB_EMISMATCH;   /* one set's features */
    scdb_k_acc_arrays arr = {scdb_evict_acc_pos(a), scdb_evict_acc_n_obs(a), scdb_evict_acc_rel(a),
                             scdb_evict_acc_var(a), scdb_evict_acc_ent_num(a),
                             scdb_evict_acc_ent_den(a), scdb_evict_acc_vnorm(a), a->last_pos,
                             scdb_evict_acc_mass(a)};
    return scdb_k_evict_features_cpu(&arr, a->n, f);
}


/* max(x, 0) + eps then its log: the kernels' branch-free log (within ~1
 * ulp of logf, a third of its cost; NaN counts as 0, as fmaxf has it) */
static inline float log_pos(float x, float eps)
{
    return scdb_k_logf_fast((x > 0.0f ? x : 0.0f) + eps);
}

void scdb_evict_mlp_transform(const float *raw, float *x)
{
    x[SCDB_EF_ALPHA] = log_pos(raw[SCDB_EF_ALPHA], 1e-3f);
    x[SCDB_EF_VNORM] = log_pos(raw[SCDB_EF_VNORM], 1e-6f);
    x[SCDB_EF_SIGMA] = log_pos(raw[SCDB_EF_SIGMA], 1e-6f);
    x[SCDB_EF_ENT] = raw[SCDB_EF_ENT];
    x[SCDB_EF_POS] = log_pos(1.0f - raw[SCDB_EF_POS], 1e-3f);
    x[SCDB_EF_MASS] = log_pos(raw[SCDB_EF_MASS], 1e-6f);
}

/* x[idx[k] * stride + col] = lrank[k] = log(k + 1) - log B for the order of
 * v (highest first, ties: the newer slot first, as selection breaks them) */
static scdb_err rank_into(const float *v, int n, int *idx, const float *lrank, float *x, int col)
{
    scdb_err rc;
    for (int i = 0; i < n; i++) idx[i] = i;
    if ((rc = scdb_evict_rank(v, idx, n))) return rc;
    for (int k = 0; k < n; k++) x[(size_t)idx[k] * SCDB_EVICT_N_ALL_INPUTS + col] = lrank[k];
    return SCDB_OK;
}

scdb_err scdb_evict_inputs(const scdb_evict_acc *a, const float *feats, int budget, float *x)
{
    const int n = a ? a->n : 0, NA = SCDB_EVICT_N_ALL_INPUTS;
    float *v = NULL, *w = NULL, *lrank = NULL;
    int *idx = NULL;
    scdb_err rc = SCDB_ENOMEM;

    if (!a || (n > 0 && (!feats || !x)) || budget < 1) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    const float lb = logf((float)budget);
    v = malloc((size_t)n * sizeof *v);
    w = malloc((size_t)n * sizeof *w);
    idx = malloc((size_t)n * sizeof *idx);
    lrank = malloc((size_t)n * sizeof *lrank);
    if (!v || !w || !idx || !lrank) goto done;
    for (int k = 0; k < n; k++) lrank[k] = scdb_k_logf_fast((float)(k + 1)) - lb;   /* once for six ranks */

    const int32_t *pos = scdb_evict_acc_pos(a);
    const float *mass = scdb_evict_acc_mass(a), *last = scdb_evict_acc_last(a);
    double vs = 0.0, vq = 0.0, es = 0.0;
    for (int i = 0; i < n; i++) {
        const float *f = feats + (size_t)i * SCDB_EVICT_N_FEATURES;
        float *r = x + (size_t)i * NA;
        scdb_evict_mlp_transform(f, r);
        r[SCDB_EI_BUDGET] = lb;
        r[SCDB_EI_AGE] = scdb_k_logf_fast((float)(n - i)) - lb;
        int seen = a->last_pos - pos[i] + 1;
        float life = seen > 0 ? mass[i] * (float)n / (float)seen : 0.0f;
        r[SCDB_EI_LIFE] = log_pos(life, 1e-3f);
        vs += r[SCDB_EI_VNORM];
        vq += (double)r[SCDB_EI_VNORM] * r[SCDB_EI_VNORM];
        es += f[SCDB_EF_ENT];
    }
    double vm = vs / n, vsd = sqrt(fmax(vq / n - vm * vm, 0.0));
    for (int i = 0; i < n; i++) {
        float *r = x + (size_t)i * NA;
        r[SCDB_EI_VNORM_Z] = vsd > 1e-6 ? (float)((r[SCDB_EI_VNORM] - vm) / vsd) : 0.0f;
        r[SCDB_EI_CTX_ENT] = (float)(es / n);
        r[SCDB_EI_CTX_N] = logf((float)n) - lb;
    }

    /* ranks: mass, alpha, life, last, the window (unpooled and SnapKV's pooled) */
    for (int i = 0; i < n; i++) v[i] = feats[(size_t)i * SCDB_EVICT_N_FEATURES + SCDB_EF_MASS];
    if ((rc = rank_into(v, n, idx, lrank, x, SCDB_EI_R_MASS))) goto done;
    for (int i = 0; i < n; i++) v[i] = feats[(size_t)i * SCDB_EVICT_N_FEATURES + SCDB_EF_ALPHA];
    if ((rc = rank_into(v, n, idx, lrank, x, SCDB_EI_R_ALPHA))) goto done;
    for (int i = 0; i < n; i++) v[i] = x[(size_t)i * NA + SCDB_EI_LIFE];
    if ((rc = rank_into(v, n, idx, lrank, x, SCDB_EI_R_LIFE))) goto done;
    if ((rc = rank_into(last, n, idx, lrank, x, SCDB_EI_R_LAST))) goto done;
    {
        /* the window's attention as SnapKV scores it (the kernels' twin:
         * each KV group's sum over the ring max-pooled, the groups
         * averaged; pool 1: the unpooled average) */
        /* one pass over the ring for both: the ring is [window][G][capacity],
         * G sets to the sets' kernel, which returns each group's sum and its
         * pool; averaged here as snapkv_score averages them (0 + each
         * group's / G in group order: the same bits, half the ring reads) */
        const float *win = scdb_evict_acc_win(a);
        const int G = a->n_kv_heads;
        float *gs = malloc((size_t)G * n * 2 * sizeof *gs);
        if (!gs) { rc = SCDB_ENOMEM; goto done; }
        if ((rc = scdb_k_snapkv_score_sets_cpu(win, a->ring_fill, G, a->capacity, n,
                                               SCDB_EVICT_SNAPKV_POOL, gs, gs + (size_t)G * n))) {
            free(gs);
            goto done;
        }
        memset(v, 0, (size_t)n * sizeof *v);
        memset(w, 0, (size_t)n * sizeof *w);
        for (int g = 0; g < G; g++) {
            const float *pk = gs + (size_t)g * n, *sk = gs + (size_t)(G + g) * n;
            for (int i = 0; i < n; i++) {
                v[i] += sk[i] / (float)G;
                w[i] += pk[i] / (float)G;
            }
        }
        free(gs);
    }
    if ((rc = rank_into(v, n, idx, lrank, x, SCDB_EI_R_WIN))) goto done;
    if ((rc = rank_into(w, n, idx, lrank, x, SCDB_EI_R_SNAPKV))) goto done;
    rc = SCDB_OK;
done:
    free(v);
    free(w);
    free(idx);
    free(lrank);
    return rc;
}
