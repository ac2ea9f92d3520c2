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

/* log(x) for x >= FLT_MIN (musl's logf, within ~1 ulp; finite at 0 and for
 * subnormals, so x log x needs no test); branch-free, so the entropy loop
 * vectorises (logf was most of an update). */
static inline float fast_log(float x)
{
    /* musl's logf: x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), by integer
     * arithmetic on the bits (no select, so loops vectorise) */
    uint32_t ix;
    memcpy(&ix, &x, sizeof ix);
    ix += 0x3f800000u - 0x3f3504f3u;
    float k = (float)((int)(ix >> 23) - 0x7f);
    ix = (ix & 0x007fffffu) + 0x3f3504f3u;
    float m;
    memcpy(&m, &ix, sizeof m);
    float f = m - 1.0f, s = f / (2.0f + f), z = s * s, w = z * z;
    float t1 = w * (0.40000972152f + w * 0.24279078841f);
    float t2 = z * (0.66666662693f + w * 0.28498786688f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + t1 + t2) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

/* Zero every per-slot value of slot j (all arrays but pos, every ring row). */
static void clear_slot(const scdb_k_acc_buf *a, int j)
{
    float *arrs[] = {a->n_obs, a->mass, a->rel, a->var, a->ent_num, a->ent_den, a->vnorm, a->last};
    for (size_t k = 0; k < sizeof arrs / sizeof *arrs; k++) arrs[k][j] = 0.0f;
    for (int r = 0; r < a->window * a->n_kv_heads; r++) a->win[(size_t)r * a->capacity + j] = 0.0f;
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
                /* the p log p terms first (a map, which vectorises), then
                 * their sum in order */
                for (int j = 0; j < n; j++)   /* fast_log(0) is finite: 0 adds 0 */
                    sq[j] = row[j] * fast_log(row[j]);
                for (int j = 0; j < n; j++) e -= sq[j];
            } else
                for (int j = 0; j < n; j++)
                    if (row[j] > 1e-30f && c->pos[j] <= qp) e -= row[j] * fast_log(row[j]);
            ent[lh] = nvis > 1 ? e / lognv : 0.0f;
        }
        memset(sum, 0, (size_t)n * sizeof *sum);
        memset(sq, 0, (size_t)n * sizeof *sq);
        memset(grp, 0, (size_t)G * n * sizeof *grp);
        for (int j = 0; j < n; j++) {
            a->n_obs[j] *= a->decay;
            a->rel[j] *= a->decay;
            a->var[j] *= a->decay;
            a->ent_num[j] *= a->decay;
            a->ent_den[j] *= a->decay;
        }
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                int lh = l * H + h;
                const float *row = probs + ((size_t)lh * n_new + q) * (size_t)probs_slots;
                float *gr = grp + (size_t)(h / hpg) * n;
                const float el = ent[lh];
                if (nvis == n)
                    for (int j = 0; j < n; j++) {
                        float p = row[j];
                        sum[j] += p;
                        sq[j] += p * p;
                        a->ent_num[j] += p * el;
                        a->ent_den[j] += p;
                        gr[j] += p;
                    }
                else
                    for (int j = 0; j < n; j++) {
                        float p = c->pos[j] <= qp ? row[j] : 0.0f;
                        sum[j] += p;
                        sq[j] += p * p;
                        a->ent_num[j] += p * el;
                        a->ent_den[j] += p;
                        gr[j] += p;
                    }
            }
        int ring = *a->ring_next;
        if (ring < 0 || ring >= a->window) ring = 0;
        float *wrow = a->win + (size_t)ring * G * a->capacity;
        for (int g = 0; g < G; g++) {
            float *dst = wrow + (size_t)g * a->capacity;
            const float *src = grp + (size_t)g * n;
            for (int j = 0; j < n; j++) dst[j] = src[j] / (float)(L * hpg);
            memset(dst + n, 0, (size_t)(a->capacity - n) * sizeof *dst);
        }
        *a->ring_next = (ring + 1) % a->window;
        if (*a->ring_fill < a->window) (*a->ring_fill)++;

        for (int j = 0; j < n; j++) {
            if (c->pos[j] > qp) { a->last[j] = 0.0f; continue; }
            float m = sum[j] / (float)lh_count;                  /* mean a */
            float mr = m * (float)nvis;                          /* mean a * nvis */
            float v = sq[j] / (float)lh_count * (float)nvis * (float)nvis - mr * mr;
            a->n_obs[j] += 1.0f;
            a->mass[j] += m;
            a->rel[j] += mr;
            a->var[j] += v > 0.0f ? v : 0.0f;
            a->last[j] = m;
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
static void snapkv_set(const float *win, size_t stride, int ring_fill, int n, int pool,
                       float *s, float *mx, float *out, float scale, int accumulate)
{
    int half = pool / 2;
    /* the interior [half, n - half) needs no bounds test */
    int ilo = half < n ? half : n, ihi = n - half > ilo ? n - half : ilo;
    memset(s, 0, (size_t)n * sizeof *s);
    for (int r = 0; r < ring_fill; r++) {
        const float *row = win + (size_t)r * stride;
        for (int j = 0; j < n; j++) s[j] += row[j];
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

scdb_err scdb_k_snapkv_score_sets_cpu(const float *win, int ring_fill, int n_sets, int capacity,
                                      int n, int pool, float *scores)
{
    float *s;

    if (n < 0 || n_sets <= 0 || ring_fill < 0 || capacity < n || pool < 1 || pool % 2 == 0 ||
        (n > 0 && (!scores || (ring_fill > 0 && !win))))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if (!(s = malloc((size_t)n * 2 * sizeof *s))) return SCDB_ENOMEM;
    for (int k = 0; k < n_sets; k++)
        snapkv_set(win + (size_t)k * capacity, (size_t)n_sets * capacity, ring_fill, n, pool, s,
                   s + n, scores + (size_t)k * n, 1.0f, 0);
    free(s);
    return SCDB_OK;
}
