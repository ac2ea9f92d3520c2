/* evict_ops.c — the eviction module's per-slot compute on the CPU: the six
 * policy features from the accumulator arrays, deterministic top-B
 * selection with protected slots, and order-preserving row compaction
 * (contracts in kernels.h; evict/ computes the same, tests/test_evict.c
 * checks it). */
#include "kernels.h"

#include <math.h>
#include <stdint.h>
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

/* Slot i as one 64-bit key, larger = kept first: the score's order (NaN as
 * -inf, -0 as +0), then the slot (ties to the higher slot). */
static uint64_t keep_key(float s, int i)
{
    uint32_t u;
    if (isnan(s)) s = -INFINITY;
    if (s == 0.0f) s = 0.0f;
    memcpy(&u, &s, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);     /* ascending as unsigned */
    return ((uint64_t)u << 32) | (uint32_t)i;
}

/* Reorder k[0..n) so that k[0..m) are its m largest (in no order):
 * quickselect, expected O(n). */
static void select_top(uint64_t *k, int n, int m)
{
    int lo = 0, hi = n - 1;
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (lo < hi) {
        /* pivot: median of three, one of them at a pseudo-random place */
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int r = lo + (int)(rng % (uint64_t)(hi - lo + 1)), mid = lo + (hi - lo) / 2;
        uint64_t a = k[lo], b = k[mid], c = k[r];
        uint64_t p = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        /* Hoare partition, larger first (keys are distinct) */
        int i = lo, j = hi;
        while (i <= j) {
            while (k[i] > p) i++;
            while (k[j] < p) j--;
            if (i <= j) {
                uint64_t t = k[i];
                k[i] = k[j];
                k[j] = t;
                i++;
                j--;
            }
        }
        /* now [lo, j] >= p >= [i, hi], and (j, i) equal to p */
        if (m - 1 <= j) hi = j;
        else if (m - 1 >= i) lo = i;
        else return;
    }
}

scdb_err scdb_k_select_topb_cpu(const float *scores, int n, int budget, int sinks,
                                int recent, int *keep, int *n_keep)
{
    uint64_t *k;
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
    k = malloc((size_t)n * sizeof *k);
    flag = calloc((size_t)n, 1);
    if (!k || !flag) {
        free(k);
        free(flag);
        return SCDB_ENOMEM;
    }
    /* NaN ranks as -inf (kernels.h): a total order, so the keep set is
     * always budget slots, whatever the scores hold; a partial selection,
     * not a sort: the set, not its order, is what is kept */
    for (int i = sinks; i < n - recent; i++) k[nc++] = keep_key(scores[i], i);
    if (m > 0 && m < nc) select_top(k, nc, m);
    for (int i = 0; i < sinks; i++) flag[i] = 1;
    for (int i = 0; i < m && i < nc; i++) flag[(uint32_t)k[i]] = 1;
    for (int i = n - recent; i < n; i++) flag[i] = 1;
    for (int i = 0; i < n; i++)
        if (flag[i]) keep[nk++] = i;
    free(k);
    free(flag);
    *n_keep = nk;
    return SCDB_OK;
}

/* keep[] is n_keep strictly increasing slots below n */
static int bad_keep(int n, const int *keep, int n_keep)
{
    if (n < 0 || n_keep < 0 || n_keep > n || (n_keep > 0 && !keep)) return 1;
    for (int i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= n || (i > 0 && keep[i] <= keep[i - 1])) return 1;
    return 0;
}

/* The runs of consecutive kept rows that move: (dst, src, len) triples. */
static int keep_runs(const int *keep, int n_keep, int *run)
{
    int nr = 0;
    for (int i = 0; i < n_keep;) {
        int j = i + 1;
        while (j < n_keep && keep[j] == keep[j - 1] + 1) j++;
        if (keep[i] != i) {
            run[3 * nr] = i;
            run[3 * nr + 1] = keep[i];
            run[3 * nr + 2] = j - i;
            nr++;
        }
        i = j;
    }
    return nr;
}

/* The runs moved in n_mats matrices from x, mat_stride bytes apart. */
static void move_runs(void *x, int n_mats, size_t mat_stride, size_t row_bytes, const int *run,
                      int nr)
{
    for (int m = 0; m < n_mats; m++) {
        char *base = (char *)x + (size_t)m * mat_stride;
        for (int r = 0; r < nr; r++) {
            const int d = run[3 * r], src = run[3 * r + 1], len = run[3 * r + 2];
            if (row_bytes == 4 && len <= 16) {
                uint32_t *xd = (uint32_t *)(void *)base;
                for (int t = 0; t < len; t++) xd[d + t] = xd[src + t];   /* forward: d < src */
            } else
                memmove(base + (size_t)d * row_bytes, base + (size_t)src * row_bytes,
                        (size_t)len * row_bytes);
        }
    }
}

/* Row by row, without the runs' memory. */
static void move_rows(void *x, int n_mats, size_t mat_stride, size_t row_bytes, const int *keep,
                      int n_keep)
{
    for (int m = 0; m < n_mats; m++) {
        char *base = (char *)x + (size_t)m * mat_stride;
        for (int i = 0; i < n_keep; i++)
            if (keep[i] != i)
                memcpy(base + (size_t)i * row_bytes, base + (size_t)keep[i] * row_bytes, row_bytes);
    }
}

scdb_err scdb_k_compact_rows_cpu(void *x, int n_mats, size_t mat_stride, size_t row_bytes,
                                 int n, const int *keep, int n_keep, void *scratch)
{
    scdb_k_compact_group g = {x, n_mats, mat_stride};
    (void)scratch;
    if (!x) return SCDB_EINVAL;
    return scdb_k_compact_groups_cpu(&g, 1, row_bytes, n, keep, n_keep);
}

scdb_err scdb_k_compact_groups_cpu(const scdb_k_compact_group *g, int n_groups, size_t row_bytes,
                                   int n, const int *keep, int n_keep)
{
    if (!g || n_groups < 0 || bad_keep(n, keep, n_keep)) return SCDB_EINVAL;
    for (int k = 0; k < n_groups; k++)
        if (!g[k].x || g[k].n_mats < 0 ||
            (g[k].n_mats > 1 && g[k].mat_stride < (size_t)n * row_bytes))
            return SCDB_EINVAL;
    /* keep[i] >= i, so a forward gather never overwrites a row it has yet
     * to read (scdb_kv_cache_compact and scdb_evict_acc_compact do the same).
     * Run by run: the keep list is a few runs of consecutive rows (an
     * eviction after the first drops a few slots), found once for every
     * group and moved in every matrix with one memmove each (a copy call
     * per row of a 4-byte array cost more than its bytes); short runs of
     * 4-byte rows inline */
    int *run = malloc((size_t)(n_keep > 0 ? n_keep : 1) * 3 * sizeof *run);
    if (!run) {   /* no memory: row by row */
        for (int k = 0; k < n_groups; k++)
            move_rows(g[k].x, g[k].n_mats, g[k].mat_stride, row_bytes, keep, n_keep);
        return SCDB_OK;
    }
    int nr = keep_runs(keep, n_keep, run);
    for (int k = 0; k < n_groups; k++)
        move_runs(g[k].x, g[k].n_mats, g[k].mat_stride, row_bytes, run, nr);
    free(run);
    return SCDB_OK;
}
