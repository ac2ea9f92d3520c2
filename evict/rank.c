/* rank.c — orders of slots by a score (highest first, ties: the newer slot
 * first, the order scdb_evict_select keeps by): the full order the rank
 * inputs (inputs.c) and the trainer's Gumbel draws (episode.c) need, and
 * the partial one an eviction needs (which slots are in the top m, not in
 * what order).  No dependency inside the module.
 *
 * Costs at n live slots: scdb_evict_rank is a radix sort (four byte passes
 * over the scores' bits, O(n)), where a comparison sort costs O(n log n)
 * compares with an unpredictable branch each; scdb_evict_select (the
 * kernels' CPU select_topb) a quickselect of the m-th best (O(n) expected)
 * instead of sorting every candidate.  Both give exactly the order / set
 * the full sorts give (tests/test_evict.c compares them with a merge sort
 * on random scores with ties). */
#include "evict_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ full order */

/* Merge sort of indices by score, highest first (ties: the higher index
 * first): a stable total order, no global state, so it is thread-safe. */
static int before(const float *s, int i, int j)
{
    return s[i] > s[j] || (s[i] == s[j] && i > j);
}

static void msort(const float *s, int *v, int *tmp, int n)
{
    if (n < 2) return;
    int h = n / 2, i = 0, j = h, k = 0;
    msort(s, v, tmp, h);
    msort(s, v + h, tmp, n - h);
    while (i < h && j < n) tmp[k++] = before(s, v[j], v[i]) ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

scdb_err scdb_evict_rank_ref(const float *scores, int *idx, int n)
{
    int *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return SCDB_ENOMEM;
    msort(scores, idx, tmp, n);
    free(tmp);
    return SCDB_OK;
}

/* The bits of x as an unsigned key that orders as x does, highest score
 * lowest key (so an ascending sort ranks highest first); -0 and +0 are one
 * key, as they compare equal. */
static uint32_t desc_key(float x)
{
    uint32_t u;
    if (x == 0.0f) x = 0.0f;
    memcpy(&u, &x, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* idx strictly ascending / descending (the callers' usual orders) */
static int monotone(const int *idx, int n, int dir)
{
    for (int i = 1; i < n; i++)
        if (dir > 0 ? idx[i] <= idx[i - 1] : idx[i] >= idx[i - 1]) return 0;
    return 1;
}

scdb_err scdb_evict_rank(const float *scores, int *idx, int n)
{
    if (n < 2) return SCDB_OK;
    int asc = monotone(idx, n, 1);
    if (!asc && !monotone(idx, n, -1)) return scdb_evict_rank_ref(scores, idx, n);
    for (int i = 0; i < n; i++)
        if (isnan(scores[idx[i]])) return scdb_evict_rank_ref(scores, idx, n);   /* no total order */
    uint32_t *key = malloc((size_t)n * 2 * sizeof *key);
    int *tmp = malloc((size_t)n * sizeof *tmp);
    if (!key || !tmp) {
        free(key);
        free(tmp);
        return SCDB_ENOMEM;
    }
    uint32_t *key2 = key + n;
    /* a stable sort keeps equal scores in input order: start from the
     * indices descending, so ties come out higher index first */
    if (asc)
        for (int i = 0; i < n / 2; i++) {
            int t = idx[i];
            idx[i] = idx[n - 1 - i];
            idx[n - 1 - i] = t;
        }
    for (int i = 0; i < n; i++) key[i] = desc_key(scores[idx[i]]);
    int *src = idx, *dst = tmp;
    uint32_t *ks = key, *kd = key2;
    /* the four bytes' counts in one pass over the keys (a pass permutes
     * the keys, not which byte values occur) */
    int cnts[4][257] = {{0}};
    for (int i = 0; i < n; i++) {
        const uint32_t k = key[i];
        cnts[0][(k & 0xffu) + 1]++;
        cnts[1][((k >> 8) & 0xffu) + 1]++;
        cnts[2][((k >> 16) & 0xffu) + 1]++;
        cnts[3][(k >> 24) + 1]++;
    }
    for (int shift = 0; shift < 32; shift += 8) {
        int *cnt = cnts[shift / 8];
        if (cnt[((ks[0] >> shift) & 0xffu) + 1] == n) continue;   /* one byte value: in order */
        for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
        for (int i = 0; i < n; i++) {
            int at = cnt[(ks[i] >> shift) & 0xffu]++;
            kd[at] = ks[i];
            dst[at] = src[i];
        }
        int *ti = src; src = dst; dst = ti;
        uint32_t *tk = ks; ks = kd; kd = tk;
    }
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof *idx);
    free(key);
    free(tmp);
    return SCDB_OK;
}

/* ------------------------------------------------------------ top m */

/* The kernels' CPU select_topb is the partial selection (one 64-bit key per
 * slot, quickselect: kernels/cpu/evict_ops.c); this is it under evict's
 * name, so host and device paths keep the same sets by the same code. */
scdb_err scdb_evict_select(const float *scores, int n, int budget, int sinks, int recent,
                           int *keep, int *n_keep)
{
    return scdb_k_select_topb_cpu(scores, n, budget, sinks, recent, keep, n_keep);
}
