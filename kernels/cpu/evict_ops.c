/* evict_ops.c — the eviction module's per-slot compute on the CPU: the six
 * policy features from the accumulator arrays, deterministic top-B
 * selection with protected slots, and order-preserving row compaction
 * (contracts in kernels.h; evict/ computes the same, tests/test_evict.c
 * checks it). */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

scdb_err scdb_k_evict_features_cpu(const scdb_k_acc_arrays *a, int n, float *f)
{
    if (!a || n < 0 || (n > 0 && (!f || !a->pos || !a->n_obs || !a->rel || !a->var ||
                                  !a->ent_num || !a->ent_den || !a->vnorm || !a->mass)))
        return SCDB_EINVAL;
    float denom = (float)(a->last_pos + 1);
    for (int i = 0; i < n; i++) {
        float *r = f + (size_t)i * SCDB_K_EVICT_N_FEATURES;
        float no = a->n_obs[i];
        r[0] = no > 0.0f ? a->rel[i] / no : 0.0f;
        r[1] = a->vnorm[i];
        r[2] = no > 0.0f ? a->var[i] / no : 0.0f;
        r[3] = a->ent_den[i] > 0.0f ? a->ent_num[i] / a->ent_den[i] : 0.0f;
        float p = denom > 0.0f ? (float)(a->pos[i] + 1) / denom : 1.0f;
        r[4] = p > 1.0f ? 1.0f : p;
        r[5] = a->mass[i];
    }
    return SCDB_OK;
}

/* Slot i ranks before slot j: higher score, ties to the higher slot. */
typedef struct ranked { float s; int i; } ranked;

static int cmp_ranked(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return (a->i < b->i) - (a->i > b->i);
}

scdb_err scdb_k_select_topb_cpu(const float *scores, int n, int budget, int sinks,
                                int recent, int *keep, int *n_keep)
{
    ranked *cand;
    unsigned char *flag;
    int nc = 0, m, nk = 0;

    if (!keep || !n_keep || n < 0 || budget < 1 || sinks < 0 || recent < 0 ||
        (!scores && n > 0))
        return SCDB_EINVAL;
    if (n <= budget) {
        for (int i = 0; i < n; i++) keep[i] = i;
        *n_keep = n;
        return SCDB_OK;
    }
    /* the protected counts shrink to fit the budget, sinks first */
    if (sinks > budget) sinks = budget;
    if (recent > budget - sinks) recent = budget - sinks;
    m = budget - sinks - recent;
    cand = malloc((size_t)n * sizeof *cand);
    flag = calloc((size_t)n, 1);
    if (!cand || !flag) { free(cand); free(flag); return SCDB_ENOMEM; }
    /* NaN ranks as -inf (kernels.h): a total order, so the keep set is
     * always budget slots, whatever the scores hold */
    for (int i = sinks; i < n - recent; i++)
        cand[nc++] = (ranked){isnan(scores[i]) ? -INFINITY : scores[i], i};
    qsort(cand, (size_t)nc, sizeof *cand, cmp_ranked);
    for (int i = 0; i < sinks; i++) flag[i] = 1;
    for (int i = 0; i < m; i++) flag[cand[i].i] = 1;
    for (int i = n - recent; i < n; i++) flag[i] = 1;
    for (int i = 0; i < n; i++) if (flag[i]) keep[nk++] = i;
    free(cand);
    free(flag);
    *n_keep = nk;
    return SCDB_OK;
}

scdb_err scdb_k_compact_rows_cpu(void *x, int n_mats, size_t mat_stride, size_t row_bytes,
                                 int n, const int *keep, int n_keep, void *scratch)
{
    (void)scratch;
    if (!x || n_mats < 0 || n < 0 || n_keep < 0 || n_keep > n || (n_keep > 0 && !keep) ||
        (n_mats > 1 && mat_stride < (size_t)n * row_bytes))
        return SCDB_EINVAL;
    for (int i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= n || (i > 0 && keep[i] <= keep[i - 1])) return SCDB_EINVAL;
    /* keep[i] >= i, so a forward gather never overwrites a row it has yet
     * to read (scdb_kv_cache_compact and scdb_evict_acc_compact do the same) */
    for (int m = 0; m < n_mats; m++) {
        char *base = (char *)x + (size_t)m * mat_stride;
        for (int i = 0; i < n_keep; i++)
            if (keep[i] != i) memcpy(base + (size_t)i * row_bytes, base + (size_t)keep[i] * row_bytes, row_bytes);
    }
    return SCDB_OK;
}
