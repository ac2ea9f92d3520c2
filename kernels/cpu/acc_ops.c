/* acc_ops.c — the CPU twins of the accumulator ops (kernels.h): the
 * per-step fold of one forward's attention into evict.h's feature
 * accumulators, over raw arrays, and SnapKV's score.  acc_update is the one
 * implementation of the fold on a CPU: evict/acc.c's scdb_evict_acc_update
 * calls it over the host buffer, so a session whose cache lives on a
 * device, run through the CPU ops table, computes what a host session
 * computes by construction (tests/test_evict.c checks it). */
#include "kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int bad_buf(const scdb_k_acc_buf *a)
{
    return !a || a->n_layers <= 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
           a->n_heads % a->n_kv_heads || a->capacity <= 0 || a->window <= 0 || !a->pos ||
           !a->n_obs || !a->mass || !a->rel || !a->var || !a->ent_num || !a->ent_den ||
           !a->vnorm || !a->last || !a->win || !a->n || !a->ring_next || !a->ring_fill ||
           !a->last_pos || !a->n_queries;
}

/* The fold's per-slot loops are maps and element-wise sums over contiguous
 * arrays (vectorised: kernels/CMakeLists.txt).  On x86-64 Linux with GCC
 * the fold is also built for AVX2, picked at load time where the CPU has
 * it: twice the lanes of the SSE2 baseline.  The same bits either way: no
 * loop reorders a sum, and ISO C (-std=c11) contracts no multiply-add. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__has_attribute)
#if __has_attribute(target_clones)
#define SCDB_ACC_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef SCDB_ACC_CLONES
#define SCDB_ACC_CLONES
#endif

#define fast_log scdb_k_logf_fast   /* kernels.h */

/* Zero every per-slot value of slot j (all arrays but pos, every ring row). */
static void clear_slot(const scdb_k_acc_buf *a, int j)
{
    float *arrs[] = {a->n_obs, a->mass, a->rel, a->var, a->ent_num, a->ent_den, a->vnorm, a->last};
    for (size_t k = 0; k < sizeof arrs / sizeof *arrs; k++) arrs[k][j] = 0.0f;
    for (int r = 0; r < a->window * a->n_kv_heads; r++) a->win[(size_t)r * a->capacity + j] = 0.0f;
}

/* One query's sums over every (layer, head) row of its attention, JB slots
 * at a time: grp[g][j] = sum of group g's rows, sum[j] = of all rows,
 * sq[j] = of p^2, and the decayed entropy numerator and denominator plus
 * this query's p * ent[row] and p, stored into ent_num / ent_den.  Rows in
 * (layer, head) order and each sum started as the CUDA twin starts it
 * (kernels/cuda/acc_kernels.cuh, query_slots), so both give the same bits
 * (tests/test_kernels_cuda.c compares them); the block's sums stay in
 * registers and are stored once (a row-at-a-time loop read and wrote five
 * arrays per row).  pos non-NULL: a prefill chunk's query, slots after qp
 * read as 0. */
#define JB 16
/* (always inlined: a separate function would be built for the baseline
 * only, outside the AVX2 clone of its one caller; it was half the fold) */
#if defined(__GNUC__)
#define SCDB_ACC_INLINE static inline __attribute__((always_inline))
#else
#define SCDB_ACC_INLINE static inline
#endif
SCDB_ACC_INLINE void fold_rows(const float *probs, int probs_slots, int n_new, int q, int L, int H,
                             int G, int n, const float *ent, const int32_t *pos, int32_t qp,
                             float dk, float *ent_num, float *ent_den, float *sum, float *sq,
                             float *grp)
{
    const int hpg = H / G;
    for (int j0 = 0; j0 < n; j0 += JB) {
        const int jn = n - j0 < JB ? n - j0 : JB;
        float tot[JB] = {0}, s2[JB] = {0}, en[JB], ed[JB];
        for (int t = 0; t < jn; t++) {
            en[t] = ent_num[j0 + t] * dk;
            ed[t] = ent_den[j0 + t] * dk;
        }
        for (int g = 0; g < G; g++) memset(grp + (size_t)g * n + j0, 0, (size_t)jn * sizeof *grp);
        /* rows in (layer, head) order; g = the row's KV group, counted
         * (a division per row was a fifth of this loop) */
        for (int lh = 0, g = 0, hh = 0; lh < L * H; lh++) {
            const float *row = probs + ((size_t)lh * n_new + q) * (size_t)probs_slots + j0;
            float *gr = grp + (size_t)g * n + j0;
            const float el = ent[lh];
            if (jn == JB && !pos)
                for (int t = 0; t < JB; t++) {
                    float p = row[t];
                    tot[t] += p;
                    s2[t] += p * p;
                    en[t] += p * el;
                    ed[t] += p;
                    gr[t] += p;
                }
            else
                for (int t = 0; t < jn; t++) {
                    float p = !pos || pos[j0 + t] <= qp ? row[t] : 0.0f;
                    tot[t] += p;
                    s2[t] += p * p;
                    en[t] += p * el;
                    ed[t] += p;
                    gr[t] += p;
                }
            if (++hh == hpg) {
                hh = 0;
                if (++g == G) g = 0;
            }
        }
        for (int t = 0; t < jn; t++) {
            sum[j0 + t] = tot[t];
            sq[j0 + t] = s2[t];
            ent_num[j0 + t] = en[t];
            ent_den[j0 + t] = ed[t];
        }
    }
}

SCDB_ACC_CLONES
scdb_err scdb_k_acc_update_cpu(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                               const float *probs, int probs_slots, int n_new, void *scratch,
                               void *stream)
{
    int L, H, G, n, hd, lh_count;
    float *ent = NULL, *sum = NULL, *sq = NULL, *grp = NULL;
    scdb_err rc = SCDB_ENOMEM;

    (void)scratch;
    (void)stream;
    if (bad_buf(a) || !c || n_new <= 0 || n_old < 0) return SCDB_EINVAL;
    L = a->n_layers;
    H = a->n_heads;
    G = a->n_kv_heads;
    if (c->n_layers != L || c->n_kv_heads != G || c->capacity > a->capacity) return SCDB_ESHAPE;
    n = c->n;
    if (n_old + n_new != n || (probs && probs_slots < n)) return SCDB_EINVAL;
    hd = c->head_dim;
    lh_count = L * H;

    ent = malloc((size_t)lh_count * sizeof *ent);
    sum = malloc((size_t)n * sizeof *sum);
    sq = malloc((size_t)n * sizeof *sq);
    grp = malloc((size_t)G * n * sizeof *grp);
    if (!ent || !sum || !sq || !grp) goto done;

    /* new slots: position and mean V norm over layers and KV heads */
    for (int j = n_old; j < n; j++) {
        double s = 0.0;
        clear_slot(a, j);
        a->pos[j] = c->pos[j];
        for (int l = 0; l < L; l++) {
            const float *v = scdb_kv_v(c, l, j);
            for (int g = 0; g < G; g++) {
                double ss = 0.0;
                for (int d = 0; d < hd; d++) ss += (double)v[g * hd + d] * v[g * hd + d];
                s += sqrt(ss);
            }
        }
        a->vnorm[j] = (float)(s / (L * G));
    }

    for (int q = 0; probs && q < n_new; q++) {
        int32_t qp = c->pos[n_old + q];
        int nvis = 0;
        for (int j = 0; j < n; j++) nvis += c->pos[j] <= qp;
        float lognv = nvis > 1 ? logf((float)nvis) : 1.0f;
        int hpg = H / G;

        /* per-row normalised entropy (a decode step's query sees every
         * slot: no position test in that loop, which then vectorises) */
        for (int lh = 0; lh < lh_count; lh++) {
            const float *row = probs + ((size_t)lh * n_new + q) * (size_t)probs_slots;
            float e = 0.0f;
            if (nvis == n) {
                /* the p log p terms summed in eight lanes, j mod 8, then
                 * the lanes pairwise: an order the C fixes (so every build
                 * and clone gets the same bits), not one chain of n
                 * dependent adds; fast_log(0) is finite: 0 adds 0 */
                float l8[8] = {0};
                int j8 = n - n % 8;
                for (int j = 0; j < j8; j += 8)
                    for (int t = 0; t < 8; t++) l8[t] += row[j + t] * fast_log(row[j + t]);
                for (int j = j8; j < n; j++) l8[j - j8] += row[j] * fast_log(row[j]);
                e = -(((l8[0] + l8[1]) + (l8[2] + l8[3])) + ((l8[4] + l8[5]) + (l8[6] + l8[7])));
            } else
                for (int j = 0; j < n; j++)
                    if (row[j] > 1e-30f && c->pos[j] <= qp) e -= row[j] * fast_log(row[j]);
            ent[lh] = nvis > 1 ? e / lognv : 0.0f;
        }
        /* the attention sums, JB slots at a time (fold_rows) */
        if (nvis == n)
            fold_rows(probs, probs_slots, n_new, q, L, H, G, n, ent, NULL, 0, a->decay, a->ent_num,
                      a->ent_den, sum, sq, grp);
        else
            fold_rows(probs, probs_slots, n_new, q, L, H, G, n, ent, c->pos, qp, a->decay,
                      a->ent_num, a->ent_den, sum, sq, grp);
        int ring = *a->ring_next;
        if (ring < 0 || ring >= a->window) ring = 0;
        float *wrow = a->win + (size_t)ring * G * a->capacity;
        /* the row beyond n zeroed, as the CUDA twin writes it (the same
         * bytes on both: tests/test_kernels_cuda.c) */
        for (int g = 0; g < G; g++) {
            float *dst = wrow + (size_t)g * a->capacity;
            const float *src = grp + (size_t)g * n;
            for (int j = 0; j < n; j++) dst[j] = src[j] / (float)(L * hpg);
            memset(dst + n, 0, (size_t)(a->capacity - n) * sizeof *dst);
        }
        *a->ring_next = (ring + 1) % a->window;
        if (*a->ring_fill < a->window) (*a->ring_fill)++;

        /* the decay and this query's terms in one pass (a decode step's
         * query sees every slot: the position test then vectorises as a
         * select); ent_num and ent_den are fold_rows' */
        const float f_lh = (float)lh_count, fnv = (float)nvis, dk = a->decay;
        for (int j = 0; j < n; j++) {
            int vis = nvis == n || c->pos[j] <= qp;
            float m = sum[j] / f_lh;                            /* mean a */
            float mr = m * fnv;                                   /* mean a * nvis */
            float v = sq[j] / f_lh * fnv * fnv - mr * mr;
            a->n_obs[j] = a->n_obs[j] * dk + (vis ? 1.0f : 0.0f);
            a->rel[j] = a->rel[j] * dk + (vis ? mr : 0.0f);
            a->var[j] = a->var[j] * dk + (vis && v > 0.0f ? v : 0.0f);
            a->mass[j] += vis ? m : 0.0f;
            a->last[j] = vis ? m : 0.0f;
        }
        *a->last_pos = qp;
        (*a->n_queries)++;
    }
    *a->n = n;
    rc = SCDB_OK;
done:
    free(ent);
    free(sum);
    free(sq);
    free(grp);
    return rc;
}

/* One set's SnapKV sum over the ring (rows `stride` floats apart) and its
 * max-pool: out[j] = scale * max over |k - j| <= pool / 2 of s[k] (with
 * accumulate, out[j] += that instead).  s and mx: room for n each. */
SCDB_ACC_INLINE void snapkv_set(const float *win, size_t stride, int ring_fill, int n, int pool,
                                float *s, float *mx, float *out, float scale, int accumulate)
{
    int half = pool / 2;
    /* the interior [half, n - half) needs no bounds test */
    int ilo = half < n ? half : n, ihi = n - half > ilo ? n - half : ilo;
    /* the ring's rows summed in row order from 0, JB slots at a time in
     * registers (a row at a time read and wrote s once per row: most of a
     * per-head eviction's scoring); the same adds in the same order */
    for (int j0 = 0; j0 < n; j0 += JB) {
        const int jn = n - j0 < JB ? n - j0 : JB;
        float acc[JB] = {0};
        if (jn == JB)
            for (int r = 0; r < ring_fill; r++) {
                const float *row = win + (size_t)r * stride + j0;
                for (int t = 0; t < JB; t++) acc[t] += row[t];
            }
        else
            for (int r = 0; r < ring_fill; r++) {
                const float *row = win + (size_t)r * stride + j0;
                for (int t = 0; t < jn; t++) acc[t] += row[t];
            }
        memcpy(s + j0, acc, (size_t)jn * sizeof *s);
    }
    /* mx[j] = s[j], then s[j + d] where greater, d = -half .. half in
     * that order (d = 0 changes nothing): the neighbours in the order
     * the edge loop below takes them, so both give the same value;
     * the inner loops are selects over contiguous arrays (vectorised) */
    memcpy(mx + ilo, s + ilo, (size_t)(ihi - ilo) * sizeof *mx);
    for (int d = -half; d <= half; d++) {
        if (d == 0) continue;
        const float *sd = s + d;
        for (int j = ilo; j < ihi; j++) mx[j] = sd[j] > mx[j] ? sd[j] : mx[j];
    }
    for (int j = 0; j < n; j++) {
        float m = mx[j];
        if (j < ilo || j >= ihi) {
            m = s[j];
            for (int k = j - half; k <= j + half; k++)
                if (k >= 0 && k < n && s[k] > m) m = s[k];
        }
        if (accumulate) out[j] += m / scale;
        else out[j] = m;
    }
}

SCDB_ACC_CLONES
scdb_err scdb_k_snapkv_score_cpu(const float *win, int ring_fill, int n_kv_heads, int capacity,
                                 int n, int pool, float *scores)
{
    int G = n_kv_heads;
    float *s;

    if (n < 0 || G <= 0 || ring_fill < 0 || capacity < n || pool < 1 || pool % 2 == 0 ||
        (n > 0 && (!scores || (ring_fill > 0 && !win))))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if (!(s = malloc((size_t)n * 2 * sizeof *s))) return SCDB_ENOMEM;
    memset(scores, 0, (size_t)n * sizeof *scores);
    for (int g = 0; g < G; g++)
        snapkv_set(win + (size_t)g * capacity, (size_t)G * capacity, ring_fill, n, pool, s, s + n,
                   scores, (float)G, 1);
    free(s);
    return SCDB_OK;
}

SCDB_ACC_CLONES
scdb_err scdb_k_snapkv_score_sets_cpu(const float *win, int ring_fill, int n_sets, int capacity,
                                      int n, int pool, float *scores, float *sums)
{
    float *s;

    if (n < 0 || n_sets <= 0 || ring_fill < 0 || capacity < n || pool < 1 || pool % 2 == 0 ||
        (n > 0 && (!scores || (ring_fill > 0 && !win))))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if (!(s = malloc((size_t)n * 2 * sizeof *s))) return SCDB_ENOMEM;
    for (int k = 0; k < n_sets; k++) {
        snapkv_set(win + (size_t)k * capacity, (size_t)n_sets * capacity, ring_fill, n, pool, s,
                   s + n, scores + (size_t)k * n, 1.0f, 0);
        if (sums) memcpy(sums + (size_t)k * n, s, (size_t)n * sizeof *s);
    }
    free(s);
    return SCDB_OK;
}
