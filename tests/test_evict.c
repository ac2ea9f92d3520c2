/* test_evict.c — live-cache eviction (evict/evict.h): the accumulator
 * buffer (layout, attach, position independence), each feature against a
 * hand-computed example, each heuristic's keep set on a constructed
 * attention pattern, selection rules, compaction order and the slot ->
 * position map, the policy file's validation, the MLP and Plackett-Luce
 * gradients against finite differences, and the measurement protocol on a
 * tiny random model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evict.h"
#include "evict_internal.h"
#include "evict_train.h"
#include "helpers/assert_close.h"
#include "model.h"
#include "safetensors.h"
#include "tiny_model.h"

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_evict_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

#define NF SCDB_EVICT_N_FEATURES
#define NI SCDB_EVICT_N_INPUTS

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* ------------------------------------------------------------ accumulator buffer */

static void test_acc_layout_attach(void **state)
{
    (void)state;
    scdb_evict_acc_shape s = {8, 4, 2, 512, 0, 0};
    size_t n = scdb_evict_acc_bytes(&s);
    /* 64 header + 9 slot arrays of 2048 + ring 32 x 2 x 512 floats */
    assert_int_equal(n, 64 + 9 * 2048 + 32 * 2 * 512 * 4);
    scdb_evict_acc_shape bad = {8, 4, 3, 512, 0, 0};     /* 4 heads, 3 groups */
    assert_int_equal(scdb_evict_acc_bytes(&bad), 0);

    void *mem = NULL, *mem2 = NULL;
    assert_int_equal(posix_memalign(&mem, 64, n + 64), 0);
    assert_int_equal(posix_memalign(&mem2, 64, n), 0);
    scdb_evict_acc *a = NULL, *b = NULL;
    assert_int_equal(scdb_evict_acc_init((char *)mem + 8, n, &s, &a), SCDB_EINVAL); /* misaligned */
    assert_int_equal(scdb_evict_acc_init(mem, n - 1, &s, &a), SCDB_EINVAL);         /* short */
    assert_int_equal(scdb_evict_acc_init(mem, n, &s, &a), SCDB_OK);
    assert_ptr_equal(a, mem);
    assert_int_equal(a->window, SCDB_EVICT_DEFAULT_WINDOW);
    assert_int_equal(a->last_pos, -1);
    assert_true((uintptr_t)scdb_evict_acc_win(a) % 64 == 0);
    scdb_evict_acc_mass(a)[3] = 7.0f;
    scdb_evict_acc_pos(a)[3] = 42;
    a->n = 4;

    /* position independent: the bytes copied elsewhere are the same state */
    memcpy(mem2, mem, n);
    assert_int_equal(scdb_evict_acc_attach(mem2, n, &b), SCDB_OK);
    assert_int_equal(b->n, 4);
    assert_true(scdb_evict_acc_mass(b)[3] == 7.0f);
    assert_int_equal(scdb_evict_acc_pos(b)[3], 42);

    assert_int_equal(scdb_evict_acc_attach(mem2, n - 1, &b), SCDB_ETRUNC);
    assert_int_equal(scdb_evict_acc_attach(mem2, 10, &b), SCDB_ETRUNC);
    ((scdb_evict_acc *)mem2)->n = 513;
    assert_int_equal(scdb_evict_acc_attach(mem2, n, &b), SCDB_ERANGE);
    ((scdb_evict_acc *)mem2)->n = 4;
    ((scdb_evict_acc *)mem2)->capacity = 100;         /* bytes no longer match */
    assert_int_equal(scdb_evict_acc_attach(mem2, n, &b), SCDB_ERANGE);
    ((scdb_evict_acc *)mem2)->version = 99;
    assert_int_equal(scdb_evict_acc_attach(mem2, n, &b), SCDB_EUNSUPPORTED);
    memset(mem2, 0xAB, 64);
    assert_int_equal(scdb_evict_acc_attach(mem2, n, &b), SCDB_EFORMAT);
    assert_null(b);
    free(mem);
    free(mem2);
}

/* ------------------------------------------------------------ features by hand */

/* One layer, one KV head of dim 2, two query heads. */
static scdb_kv_cache *small_cache(int cap)
{
    scdb_kv_cache *c = NULL;
    assert_int_equal(scdb_kv_cache_new(1, 1, 2, cap, &c), SCDB_OK);
    return c;
}

static scdb_evict_acc *small_acc(int cap, int window)
{
    scdb_evict_acc_shape s = {1, 2, 1, cap, window, 0};
    scdb_evict_acc *a = NULL;
    assert_int_equal(scdb_evict_acc_new(&s, &a), SCDB_OK);
    return a;
}

static void test_features_hand(void **state)
{
    (void)state;
    scdb_kv_cache *c = small_cache(8);
    scdb_evict_acc *a = small_acc(8, 4);
    float f[3 * SCDB_EVICT_N_FEATURES];

    /* two tokens: V = (3, 4) and (0, 1) */
    c->pos[0] = 0; c->pos[1] = 1;
    scdb_kv_v(c, 0, 0)[0] = 3; scdb_kv_v(c, 0, 0)[1] = 4;
    scdb_kv_v(c, 0, 1)[0] = 0; scdb_kv_v(c, 0, 1)[1] = 1;
    c->n = 2;
    /* probs [L=1][H=2][n_q=2][slots=2]:
     *   query 0 (pos 0) sees slot 0 only: both heads (1, 0)
     *   query 1 (pos 1): head 0 (0.9, 0.1), head 1 (0.5, 0.5) */
    float probs[2][2][2] = {{{1, 0}, {0.9f, 0.1f}}, {{1, 0}, {0.5f, 0.5f}}};
    assert_int_equal(scdb_evict_acc_update(a, c, &probs[0][0][0], 2, 2), SCDB_OK);
    assert_int_equal(a->n, 2);
    assert_int_equal(a->last_pos, 1);
    assert_int_equal(scdb_evict_features(a, f), SCDB_OK);

    /* Every EMA decays by d = 31/32 before each query.  h0, h1: the
     * normalised entropies of q1's rows, H(0.9, 0.1) / ln 2 and 1. */
    double d = 31.0 / 32.0, h0 = -(0.9 * log(0.9) + 0.1 * log(0.1)) / log(2.0), h1 = 1.0;
    /* alpha: EMA-weighted mean over queries of (mean over heads) x nvis.
     *   slot 0: q0 1 x 1, q1 0.7 x 2 -> (d * 1 + 1.4) / (d + 1)
     *   slot 1: q1 0.3 x 2 = 0.6 */
    assert_near(f[0 * NF + SCDB_EF_ALPHA], (d + 1.4) / (d + 1), 1e-6);
    assert_near(f[1 * NF + SCDB_EF_ALPHA], 0.6, 1e-6);
    assert_near(scdb_evict_acc_n_obs(a)[0], d + 1, 1e-6);
    /* vnorm: |(3,4)| = 5, |(0,1)| = 1 */
    assert_near(f[0 * NF + SCDB_EF_VNORM], 5.0, 1e-6);
    assert_near(f[1 * NF + SCDB_EF_VNORM], 1.0, 1e-6);
    /* sigma: variance across heads of mass x nvis, EMA-mean over queries.
     *   slot 0: q0 var(1, 1) = 0, q1 var(1.8, 1.0) = 0.16 -> 0.16 / (d + 1)
     *   slot 1: q1 var(0.2, 1.0) = 0.16 */
    assert_near(f[0 * NF + SCDB_EF_SIGMA], 0.16 / (d + 1), 1e-6);
    assert_near(f[1 * NF + SCDB_EF_SIGMA], 0.16, 1e-6);
    /* ent: attention-weighted entropy of the queries (q0's rows see one
     * slot: entropy 0):
     *   slot 0: (0.9 h0 + 0.5 h1) / (2 d + 1.4)
     *   slot 1: (0.1 h0 + 0.5 h1) / 0.6 */
    assert_near(f[0 * NF + SCDB_EF_ENT], (0.9 * h0 + 0.5 * h1) / (2 * d + 1.4), 1e-5);
    assert_near(f[1 * NF + SCDB_EF_ENT], (0.1 * h0 + 0.5 * h1) / 0.6, 1e-5);
    /* pos: (pos + 1) / (last_pos + 1) */
    assert_near(f[0 * NF + SCDB_EF_POS], 0.5, 1e-6);
    assert_near(f[1 * NF + SCDB_EF_POS], 1.0, 1e-6);
    /* the mass feature is H2O's cumulative mass, checked next */
    assert_near(f[0 * NF + SCDB_EF_MASS], 1.7, 1e-6);
    assert_near(f[1 * NF + SCDB_EF_MASS], 0.3, 1e-6);
    /* H2O's cumulative mass (plain sum), TOVA's last-query attention and
     * SnapKV's ring row of q1 (mean over the two heads of the KV group) */
    assert_near(scdb_evict_acc_mass(a)[0], 1.7, 1e-6);
    assert_near(scdb_evict_acc_mass(a)[1], 0.3, 1e-6);
    assert_near(scdb_evict_acc_last(a)[0], 0.7, 1e-6);
    assert_near(scdb_evict_acc_last(a)[1], 0.3, 1e-6);
    assert_near(scdb_evict_acc_win(a)[1 * 8 + 1], 0.3, 1e-6);

    /* one decode step: token at pos 2, V = (0, 2), uniform attention in both
     * heads -> every slot gets 1/3, x nvis = 1; its own features start fresh */
    c->pos[2] = 2;
    scdb_kv_v(c, 0, 2)[1] = 2;
    c->n = 3;
    float p2[2][1][3] = {{{1 / 3.f, 1 / 3.f, 1 / 3.f}}, {{1 / 3.f, 1 / 3.f, 1 / 3.f}}};
    assert_int_equal(scdb_evict_acc_update(a, c, &p2[0][0][0], 3, 1), SCDB_OK);
    assert_int_equal(scdb_evict_features(a, f), SCDB_OK);
    double w0 = d * (d + 1) + 1;                              /* slot 0's EMA weight */
    assert_near(scdb_evict_acc_n_obs(a)[0], w0, 1e-6);
    assert_near(scdb_evict_acc_n_obs(a)[2], 1.0, 1e-6);
    assert_near(f[0 * NF + SCDB_EF_ALPHA], (d * (d + 1.4) + 1) / w0, 1e-6);
    assert_near(f[1 * NF + SCDB_EF_ALPHA], (d * 0.6 + 1) / (d + 1), 1e-6);
    assert_near(f[2 * NF + SCDB_EF_ALPHA], 1.0, 1e-6);
    assert_near(f[2 * NF + SCDB_EF_VNORM], 2.0, 1e-6);
    assert_near(f[0 * NF + SCDB_EF_SIGMA], d * 0.16 / w0, 1e-6);
    assert_near(f[2 * NF + SCDB_EF_SIGMA], 0.0, 1e-6);
    assert_near(f[2 * NF + SCDB_EF_ENT], 1.0, 1e-5);                 /* uniform rows: entropy 1 */
    assert_near(f[1 * NF + SCDB_EF_ENT], (d * (0.1 * h0 + 0.5 * h1) + 2.0 / 3) / (d * 0.6 + 2.0 / 3), 1e-5);
    assert_near(f[0 * NF + SCDB_EF_POS], 1.0 / 3, 1e-6);
    assert_near(scdb_evict_acc_mass(a)[0], 1.7 + 1.0 / 3, 1e-6);
    assert_near(scdb_evict_acc_last(a)[0], 1.0 / 3, 1e-6);
    assert_int_equal(a->ring_fill, 3);
    /* ring: the three queries' head-averaged rows */
    const float *win = scdb_evict_acc_win(a);
    assert_near(win[0 * 8 + 0], 1.0, 1e-6);
    assert_near(win[1 * 8 + 0], 0.7, 1e-6);
    assert_near(win[2 * 8 + 2], 1.0 / 3, 1e-6);

    /* misuse */
    assert_int_equal(scdb_evict_acc_update(a, c, &p2[0][0][0], 3, 1), SCDB_EINVAL); /* n mismatch */
    assert_int_equal(scdb_evict_acc_update(a, c, &p2[0][0][0], 2, 0), SCDB_EINVAL);
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);
}

/* ------------------------------------------------------------ heuristics */

/* 12 tokens; query q at pos q sees slots 0..q with weights
 *   1 + 20 [j = 5] + 10 [j = 2] + (q = 11 ? 40 [j = 7] : 0), normalised,
 * identical in both heads. */
static void pattern(scdb_kv_cache **cp, scdb_evict_acc **ap)
{
    enum { N = 12 };
    scdb_kv_cache *c = small_cache(16);
    scdb_evict_acc *a = small_acc(16, 32);   /* the ring sees all 12 queries */
    static float probs[2][N][N];
    for (int i = 0; i < N; i++) {
        c->pos[i] = i;
        scdb_kv_v(c, 0, i)[0] = 1.0f;
    }
    c->n = N;
    memset(probs, 0, sizeof probs);
    for (int q = 0; q < N; q++) {
        float w[N], z = 0;
        for (int j = 0; j <= q; j++) {
            w[j] = 1.0f + 20.0f * (j == 5) + 10.0f * (j == 2) + (q == 11 ? 40.0f * (j == 7) : 0.0f);
            z += w[j];
        }
        for (int h = 0; h < 2; h++)
            for (int j = 0; j <= q; j++) probs[h][q][j] = w[j] / z;
    }
    assert_int_equal(scdb_evict_acc_update(a, c, &probs[0][0][0], N, N), SCDB_OK);
    *cp = c;
    *ap = a;
}

static void keep_of(scdb_evict_policy *p, int budget, int *keep, int *nk)
{
    scdb_kv_cache *c;
    scdb_evict_acc *a;
    int32_t map[16];
    pattern(&c, &a);
    assert_int_equal(scdb_evict_run(p, c, a, budget, map, nk), SCDB_OK);
    for (int i = 0; i < *nk; i++) keep[i] = map[i];     /* positions == original slots */
    assert_int_equal(c->n, *nk);
    assert_int_equal(a->n, *nk);
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);
}

static void expect_keep(scdb_evict_kind kind, int budget, const int *want, int n_want)
{
    scdb_evict_policy *p = NULL;
    int keep[16], nk = -1;
    assert_int_equal(scdb_evict_policy_new(kind, &p), SCDB_OK);
    keep_of(p, budget, keep, &nk);
    assert_int_equal(nk, n_want);
    for (int i = 0; i < nk; i++) {
        if (keep[i] != want[i]) fprintf(stderr, "%s: keep[%d] = %d, want %d\n",
                                        scdb_evict_kind_name(kind), i, keep[i], want[i]);
        assert_int_equal(keep[i], want[i]);
    }
    scdb_evict_policy_free(&p);
}

static void test_heuristic_keep_sets(void **state)
{
    (void)state;
    scdb_kv_cache *c;
    scdb_evict_acc *a;
    pattern(&c, &a);
    const float *mass = scdb_evict_acc_mass(a);
    /* cumulative attention: slot 2 (early, heavy) > slot 5 > slot 0 > the rest of 0..8 */
    assert_true(mass[2] > mass[5] && mass[5] > mass[0]);
    for (int j = 0; j < 9; j++)
        if (j != 0 && j != 2 && j != 5) assert_true(mass[j] < mass[0]);
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);

    /* full: nothing evicted */
    const int full[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    expect_keep(SCDB_EVICT_FULL, 6, full, 12);
    /* StreamingLLM: 4 sinks + the 2 most recent */
    const int streaming[] = {0, 1, 2, 3, 10, 11};
    expect_keep(SCDB_EVICT_STREAMING, 6, streaming, 6);
    /* H2O: recent 3 + the 3 heaviest cumulative hitters among 0..8 */
    const int h2o[] = {0, 2, 5, 9, 10, 11};
    expect_keep(SCDB_EVICT_H2O, 6, h2o, 6);
    /* TOVA: the newest token + the top 5 of the last query's attention:
     * 7 (40), 5 (20), 2 (10), then ties at weight 1 resolved towards the
     * newer slots 10, 9 */
    const int tova[] = {2, 5, 7, 9, 10, 11};
    expect_keep(SCDB_EVICT_TOVA, 6, tova, 6);
    /* SnapKV: observation window min(32, 6/2) = 3 recent; window attention
     * max-pooled with kernel 7: slots 0..5 all see slot 2's sum (the
     * largest), 6..8 slot 5's; ties towards newer slots -> 3, 4, 5 */
    const int snapkv[] = {3, 4, 5, 9, 10, 11};
    expect_keep(SCDB_EVICT_SNAPKV, 6, snapkv, 6);
    /* budget >= n keeps everything for every policy */
    expect_keep(SCDB_EVICT_H2O, 12, full, 12);
}

/* A hand-built MLP: score increases with recency (-log(1 - pos + 1e-3)). */
static scdb_evict_mlp *recency_mlp(int sinks, int recent)
{
    scdb_evict_mlp *m = NULL;
    assert_int_equal(scdb_evict_mlp_new(1, 1, &m), SCDB_OK);
    memset(m->params, 0, m->n_params * sizeof *m->params);
    m->w1[SCDB_EF_POS] = -1.0f;
    m->w2[0] = 1.0f;
    m->w3[0] = 1.0f;
    m->sinks = sinks;
    m->recent = recent;
    return m;
}

static void test_learned_keep_set(void **state)
{
    (void)state;
    scdb_evict_mlp *m = recency_mlp(0, 0);
    scdb_evict_policy *p = NULL;
    int keep[16], nk;
    assert_int_equal(scdb_evict_policy_from_mlp(m, &p), SCDB_OK);
    assert_int_equal(scdb_evict_policy_kind(p), SCDB_EVICT_LEARNED);
    assert_true(scdb_evict_policy_needs_acc(p));
    keep_of(p, 6, keep, &nk);
    const int newest[] = {6, 7, 8, 9, 10, 11};
    assert_int_equal(nk, 6);
    assert_memory_equal(keep, newest, sizeof newest);
    scdb_evict_policy_free(&p);
    m->sinks = 2;
    assert_int_equal(scdb_evict_policy_from_mlp(m, &p), SCDB_OK);
    keep_of(p, 6, keep, &nk);
    const int sinks[] = {0, 1, 8, 9, 10, 11};
    assert_memory_equal(keep, sinks, sizeof sinks);
    scdb_evict_policy_free(&p);

    /* pooling: an MLP increasing in alpha (the EMA attention share, largest
     * at slot 5) with a kernel of 3 keeps slot 5's neighbours 4 and 6 too */
    scdb_evict_mlp *q = NULL;
    assert_int_equal(scdb_evict_mlp_new(1, 1, &q), SCDB_OK);
    memset(q->params, 0, q->n_params * sizeof *q->params);
    q->w1[SCDB_EF_ALPHA] = 4.0f;
    q->w2[0] = 4.0f;
    q->w3[0] = 1.0f;
    q->sinks = 0;
    q->recent = 2;
    q->pool = 1;
    assert_int_equal(scdb_evict_policy_from_mlp(q, &p), SCDB_OK);
    keep_of(p, 5, keep, &nk);
    scdb_evict_policy_free(&p);
    q->pool = 3;
    assert_int_equal(scdb_evict_policy_from_mlp(q, &p), SCDB_OK);
    int keep3[16], nk3;
    keep_of(p, 5, keep3, &nk3);
    const int pooled[] = {4, 5, 6, 10, 11};
    assert_int_equal(nk3, 5);
    assert_memory_equal(keep3, pooled, sizeof pooled);
    assert_true(memcmp(keep, keep3, sizeof pooled) != 0);   /* pooling changed the set */
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&q);

    /* the pool itself: values and where each maximum came from */
    float sv[6] = {0, 5, 1, 1, 7, 2}, pv[6];
    int av[6];
    scdb_evict_maxpool(sv, 6, 3, pv, av);
    const float wantp[6] = {5, 5, 5, 7, 7, 7};
    const int wanta[6] = {1, 1, 1, 4, 4, 4};
    assert_memory_equal(pv, wantp, sizeof wantp);
    assert_memory_equal(av, wanta, sizeof wanta);
    scdb_evict_maxpool(sv, 6, 1, pv, av);
    assert_memory_equal(pv, sv, sizeof sv);
    scdb_evict_mlp_free(&m);
}

/* ------------------------------------------------------------ select, compact */

/* The keep set by a full sort (the reference the partial selection must
 * equal): candidates [sinks, n - recent) in scdb_evict_rank_ref's order
 * (NaN as -inf), the first m kept. */
static int ref_select(const float *s, int n, int budget, int sinks, int recent, int *keep)
{
    if (n <= budget) {
        for (int i = 0; i < n; i++) keep[i] = i;
        return n;
    }
    if (sinks > budget) sinks = budget;
    if (recent > budget - sinks) recent = budget - sinks;
    int m = budget - sinks - recent, nc = 0, nk = 0;
    int *cand = malloc((size_t)n * sizeof *cand);
    float *v = malloc((size_t)n * sizeof *v);
    char *flag = calloc((size_t)n, 1);
    assert_non_null(cand);
    assert_non_null(v);
    assert_non_null(flag);
    for (int i = 0; i < n; i++) v[i] = isnan(s[i]) ? -INFINITY : s[i];
    for (int i = sinks; i < n - recent; i++) cand[nc++] = i;
    assert_int_equal(scdb_evict_rank_ref(v, cand, nc), SCDB_OK);
    for (int i = 0; i < sinks; i++) flag[i] = 1;
    for (int i = 0; i < m; i++) flag[cand[i]] = 1;
    for (int i = n - recent; i < n; i++) flag[i] = 1;
    for (int i = 0; i < n; i++)
        if (flag[i]) keep[nk++] = i;
    free(cand);
    free(v);
    free(flag);
    return nk;
}

/* scores with many ties (a few distinct values), both zeros, infinities
 * and (nan_ok) NaN */
static void tie_scores(float *s, int n, int levels, int nan_ok)
{
    for (int i = 0; i < n; i++) {
        float u = frand();
        if (levels > 0) s[i] = (float)(int)((u + 1.0f) * 0.5f * (float)levels);
        else s[i] = u;
        int r = (int)((frand() + 1.0f) * 50.0f);
        if (r == 0) s[i] = -0.0f;
        else if (r == 1) s[i] = 0.0f;
        else if (r == 2) s[i] = INFINITY;
        else if (r == 3) s[i] = -INFINITY;
        else if (r == 4 && nan_ok) s[i] = NAN;
    }
}

/* Partial selection (scdb_evict_select: quickselect) and the radix rank
 * (scdb_evict_rank) against full sorts on random scores with ties, at the
 * edges of the budget (1, n - 1, n, beyond n) and of the protection; and
 * the learned policy's eviction, which scores only the candidates, against
 * the same policy scoring every slot. */
static void test_partial_selection(void **state)
{
    (void)state;
    enum { MAXN = 300 };
    float s[MAXN];
    int keep[MAXN], ref[MAXN], nk;
    for (int t = 0; t < 400; t++) {
        int n = 1 + (int)((frand() + 1.0f) * 0.5f * (MAXN - 1));
        if (n > MAXN) n = MAXN;
        tie_scores(s, n, t % 4 == 0 ? 0 : 1 + t % 7, t % 3 == 0);
        int budgets[6] = {1, n - 1, n, n + 3, 1 + (int)((frand() + 1.0f) * 0.5f * n), 2};
        for (int b = 0; b < 6; b++) {
            int B = budgets[b] < 1 ? 1 : budgets[b];
            int sinks = t % 5 == 0 ? 0 : (int)((frand() + 1.0f) * 4.0f);
            int recent = t % 6 == 0 ? 0 : (int)((frand() + 1.0f) * 0.3f * B);
            if (t % 11 == 0) recent = B;   /* protection beyond the budget */
            assert_int_equal(scdb_evict_select(s, n, B, sinks, recent, keep, &nk), SCDB_OK);
            int nr = ref_select(s, n, B, sinks, recent, ref);
            assert_int_equal(nk, nr);
            assert_int_equal(nk, n < B ? n : B);
            assert_memory_equal(keep, ref, (size_t)nk * sizeof *keep);
        }
        /* the full order: ascending, descending and shuffled index lists */
        int idx[MAXN], idr[MAXN];
        for (int order = 0; order < 3; order++) {
            for (int i = 0; i < n; i++) idx[i] = order == 1 ? n - 1 - i : i;
            if (order == 2)
                for (int i = n - 1; i > 0; i--) {
                    int j = (int)((frand() + 1.0f) * 0.5f * (float)i);
                    if (j > i) j = i;
                    int tmp = idx[i]; idx[i] = idx[j]; idx[j] = tmp;
                }
            memcpy(idr, idx, (size_t)n * sizeof *idx);
            assert_int_equal(scdb_evict_rank(s, idx, n), SCDB_OK);
            assert_int_equal(scdb_evict_rank_ref(s, idr, n), SCDB_OK);
            assert_memory_equal(idx, idr, (size_t)n * sizeof *idx);
        }
    }

    /* a learned policy reading every input, pooled: scdb_evict_run (the
     * network on the candidates and what their pool reads) keeps what
     * scoring every slot and selecting keeps */
    int ids[SCDB_EVICT_N_ALL_INPUTS];
    for (int i = 0; i < SCDB_EVICT_N_ALL_INPUTS; i++) ids[i] = i;
    const int pools[3] = {1, 3, 5}, sk[3] = {0, 1, 4};
    for (int pi = 0; pi < 3; pi++)
        for (int si = 0; si < 3; si++) {
            scdb_evict_mlp *m = NULL;
            assert_int_equal(scdb_evict_mlp_new_inputs(8, ids, SCDB_EVICT_N_ALL_INPUTS,
                                                       (uint64_t)(7 + pi * 3 + si), &m), SCDB_OK);
            m->pool = pools[pi];
            m->sinks = sk[si];
            m->recent = 1;
            m->recent_frac = 0.25f;
            scdb_evict_policy *p = NULL;
            assert_int_equal(scdb_evict_policy_from_mlp(m, &p), SCDB_OK);
            for (int B = 1; B < 12; B++) {
                scdb_kv_cache *c;
                scdb_evict_acc *a;
                float sc[16];
                int want[16], got[16], ng, sinks, recent;
                int32_t map[16];
                pattern(&c, &a);
                if (B == 1) {   /* a range outside the cache or backwards is refused */
                    assert_int_equal(scdb_evict_learned_score(m, a, B, 5, 4, sc), SCDB_EINVAL);
                    assert_int_equal(scdb_evict_learned_score(m, a, B, -1, 2, sc), SCDB_EINVAL);
                    assert_int_equal(scdb_evict_learned_score(m, a, B, 0, a->n + 1, sc), SCDB_EINVAL);
                    assert_int_equal(scdb_evict_learned_score(m, NULL, B, 0, 1, sc), SCDB_EINVAL);
                    assert_int_equal(scdb_evict_learned_score(m, a, B, 0, 1, NULL), SCDB_EINVAL);
                }
                assert_int_equal(scdb_evict_policy_score_budget(p, a, B, sc), SCDB_OK);
                scdb_evict_policy_protect(p, a, a->n, B, &sinks, &recent);
                int nw = ref_select(sc, a->n, B, sinks, recent, want);
                assert_int_equal(scdb_evict_run(p, c, a, B, map, &ng), SCDB_OK);
                for (int i = 0; i < ng; i++) got[i] = map[i];
                assert_int_equal(ng, nw);
                assert_memory_equal(got, want, (size_t)ng * sizeof *got);
                scdb_evict_acc_free(&a);
                scdb_kv_cache_free(&c);
            }
            scdb_evict_policy_free(&p);
            scdb_evict_mlp_free(&m);
        }
}



static void test_select_rules(void **state)
{
    (void)state;
    float s[10] = {5, 0, 9, 1, 1, 1, 8, 0, 0, 0};
    int keep[10], nk;
    /* budget 5, 1 sink, 2 recent: 0, 8, 9 + top 2 of 1..7 = 2, 6 */
    assert_int_equal(scdb_evict_select(s, 10, 5, 1, 2, keep, &nk), SCDB_OK);
    const int w1[] = {0, 2, 6, 8, 9};
    assert_int_equal(nk, 5);
    assert_memory_equal(keep, w1, sizeof w1);
    /* ties (1, 1, 1 at slots 3..5): the newer slot wins */
    assert_int_equal(scdb_evict_select(s, 10, 6, 0, 0, keep, &nk), SCDB_OK);
    /* top 6 by score: 9 (slot 2), 8 (6), 5 (0), then the 1s: 5, 4, 3 */
    const int w3[] = {0, 2, 3, 4, 5, 6};
    assert_memory_equal(keep, w3, sizeof w3);
    assert_int_equal(scdb_evict_select(s, 10, 4, 0, 0, keep, &nk), SCDB_OK);
    const int w4[] = {0, 2, 5, 6};            /* 9, 8, 5, then the newest 1 (slot 5) */
    assert_memory_equal(keep, w4, sizeof w4);
    /* protection larger than the budget is clipped: sinks first */
    assert_int_equal(scdb_evict_select(s, 10, 3, 2, 5, keep, &nk), SCDB_OK);
    const int w5[] = {0, 1, 9};
    assert_int_equal(nk, 3);
    assert_memory_equal(keep, w5, sizeof w5);
    /* n <= budget: everything */
    assert_int_equal(scdb_evict_select(s, 4, 8, 0, 0, keep, &nk), SCDB_OK);
    assert_int_equal(nk, 4);
    assert_int_equal(scdb_evict_select(s, 10, 0, 0, 0, keep, &nk), SCDB_EINVAL);
    assert_int_equal(scdb_evict_select(s, 10, 3, -1, 0, keep, &nk), SCDB_EINVAL);

    scdb_evict_kind k;
    assert_int_equal(scdb_evict_kind_parse("snapkv", &k), SCDB_OK);
    assert_int_equal(k, SCDB_EVICT_SNAPKV);
    assert_int_equal(scdb_evict_kind_parse("lru", &k), SCDB_ENOTFOUND);
    scdb_evict_policy *p = NULL;
    assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_LEARNED, &p), SCDB_EINVAL);
    assert_null(p);
}

static void test_compact_order_and_map(void **state)
{
    (void)state;
    scdb_kv_cache *c = NULL;
    scdb_evict_acc *a = NULL;
    scdb_evict_acc_shape s = {2, 2, 1, 10, 3, 0};
    assert_int_equal(scdb_kv_cache_new(2, 1, 2, 10, &c), SCDB_OK);
    assert_int_equal(scdb_evict_acc_new(&s, &a), SCDB_OK);
    for (int i = 0; i < 10; i++) {
        c->pos[i] = 3 * i;
        scdb_evict_acc_pos(a)[i] = 3 * i;
        scdb_evict_acc_mass(a)[i] = (float)i;
        scdb_evict_acc_vnorm(a)[i] = 10.0f + i;
        for (int l = 0; l < 2; l++) {
            scdb_kv_k(c, l, i)[0] = 100.0f * l + i;
            scdb_kv_v(c, l, i)[1] = -100.0f * l - i;
        }
        for (int r = 0; r < 3; r++) scdb_evict_acc_win(a)[r * 10 + i] = 100.0f * r + i;
    }
    c->n = 10;
    a->n = 10;
    const int keep[] = {0, 2, 3, 7, 9};
    int32_t map[5];
    assert_int_equal(scdb_evict_compact(c, a, keep, 5, map), SCDB_OK);
    const int32_t want_map[] = {0, 6, 9, 21, 27};
    assert_memory_equal(map, want_map, sizeof want_map);
    assert_int_equal(c->n, 5);
    assert_int_equal(a->n, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(c->pos[i], 3 * keep[i]);
        assert_int_equal(scdb_evict_acc_pos(a)[i], 3 * keep[i]);
        assert_true(scdb_evict_acc_mass(a)[i] == (float)keep[i]);
        assert_true(scdb_evict_acc_vnorm(a)[i] == 10.0f + keep[i]);
        for (int l = 0; l < 2; l++) {
            assert_true(scdb_kv_k(c, l, i)[0] == 100.0f * l + keep[i]);
            assert_true(scdb_kv_v(c, l, i)[1] == -100.0f * l - keep[i]);
        }
        for (int r = 0; r < 3; r++)
            assert_true(scdb_evict_acc_win(a)[r * 10 + i] == 100.0f * r + keep[i]);
    }
    /* bad keep lists change nothing */
    const int dup[] = {0, 0, 1}, back[] = {2, 1}, out[] = {0, 5};
    assert_int_equal(scdb_evict_compact(c, a, dup, 3, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_evict_compact(c, a, back, 2, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_evict_compact(c, a, out, 2, NULL), SCDB_EINVAL);
    assert_int_equal(c->n, 5);
    a->n = 4;                                      /* out of step with the cache */
    assert_int_equal(scdb_evict_compact(c, a, keep, 2, NULL), SCDB_EINVAL);
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);
}

/* ------------------------------------------------------------ policy file */

typedef struct {
    const char *skip, *bad_shape, *i32, *meta_key, *meta_val, *nan_tensor;
    int drop_meta;
    int v1;                 /* write a version-1 file: five features, no mass */
} variant;

static void write_policy(const char *path, const scdb_evict_mlp *m, variant v)
{
    scdb_st_writer *w;
    int64_t H = m->hidden;
    int nf = v.v1 ? 5 : NI;
    static float w1[1024 * NI];
    for (int64_t r = 0; r < H; r++)           /* version 1: drop the mass and budget columns */
        memcpy(w1 + r * nf, m->w1 + r * NI, (size_t)nf * sizeof *w1);
    struct { const char *n; int nd; int64_t d0, d1; const float *p; } t[] = {
        {"input.mean", 1, nf, 0, m->in_mean}, {"input.std", 1, nf, 0, m->in_std},
        {"fc1.weight", 2, H, nf, w1}, {"fc1.bias", 1, H, 0, m->b1},
        {"fc2.weight", 2, H, H, m->w2}, {"fc2.bias", 1, H, 0, m->b2},
        {"out.weight", 2, 1, H, m->w3}, {"out.bias", 1, 1, 0, m->b3}};
    static float big[4096], nanbuf[4096];
    const char *mk[] = {"format", "version", "features", "activation", "sinks", "recent", "pool",
                        "recent_frac"};
    const char *mv[] = {"scdb-evict-policy", v.v1 ? "1" : "2",
                        v.v1 ? "alpha,vnorm,sigma,ent,pos" : "alpha,vnorm,sigma,ent,pos,mass,budget",
                        "tanh", "4", "8", "3", "0.25"};

    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    for (int i = 0; i < (v.v1 ? 7 : 8); i++) {
        const char *val = mv[i];
        if (v.meta_key && !strcmp(v.meta_key, mk[i])) {
            if (v.drop_meta) continue;
            val = v.meta_val;
        }
        assert_int_equal(scdb_st_writer_meta(w, mk[i], val), SCDB_OK);
    }
    for (size_t i = 0; i < SCDB_ARRAY_LEN(t); i++) {
        int64_t shape[2] = {t[i].d0, t[i].d1};
        const float *p = t[i].p;
        if (v.skip && !strcmp(v.skip, t[i].n)) continue;
        if (v.bad_shape && !strcmp(v.bad_shape, t[i].n)) { shape[t[i].nd - 1] += 1; p = big; }
        if (v.nan_tensor && !strcmp(v.nan_tensor, t[i].n)) {
            size_t n = (size_t)t[i].d0 * (t[i].nd == 2 ? (size_t)t[i].d1 : 1);
            memcpy(nanbuf, p, n * sizeof *p);
            nanbuf[0] = NAN;
            p = nanbuf;
        }
        scdb_dtype dt = v.i32 && !strcmp(v.i32, t[i].n) ? SCDB_I32 : SCDB_F32;
        assert_int_equal(scdb_st_writer_add(w, t[i].n, dt, t[i].nd, shape, p), SCDB_OK);
    }
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
}

static scdb_err load_variant(const scdb_evict_mlp *m, variant v, char *err, size_t errlen)
{
    char path[512];
    scdb_evict_policy *p = (scdb_evict_policy *)1;
    snprintf(path, sizeof path, "%s/variant.safetensors", tmpdir);
    write_policy(path, m, v);
    err[0] = '\0';
    scdb_err rc = scdb_evict_policy_load(path, &p, err, errlen);
    if (rc) {
        assert_null(p);
        assert_true(err[0] != '\0');
    }
    scdb_evict_policy_free(&p);
    return rc;
}

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void test_policy_file(void **state)
{
    (void)state;
    char path[512], err[512];
    scdb_evict_mlp *m = NULL;
    scdb_evict_policy *p = NULL;

    assert_int_equal(scdb_evict_mlp_new(6, 7, &m), SCDB_OK);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] = frand();
    for (int i = 0; i < NI; i++) { m->in_mean[i] = 0.1f * i; m->in_std[i] = 1.0f + 0.5f * i; }
    m->sinks = 3;
    m->recent = 5;
    m->recent_frac = 0.375f;
    m->pool = 5;

    /* round trip: same scores, protection and metadata */
    snprintf(path, sizeof path, "%s/good.safetensors", tmpdir);
    const char *k[] = {"trained_on"}, *v[] = {"base"};
    assert_int_equal(scdb_evict_mlp_save(m, path, k, v, 1), SCDB_OK);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_evict_policy_meta(p, "trained_on"), "base");
    assert_null(scdb_evict_policy_meta(p, "nope"));
    const scdb_evict_mlp *lm = scdb_evict_policy_mlp(p);
    assert_int_equal(lm->hidden, 6);
    assert_int_equal(lm->sinks, 3);
    assert_int_equal(lm->recent, 5);
    assert_int_equal(lm->pool, 5);
    assert_true(lm->recent_frac == 0.375f);
    assert_string_equal(scdb_evict_policy_meta(p, "version"), "2");
    float feats[4 * NF], s1[4], s2[4];
    for (int i = 0; i < 4 * NF; i++) feats[i] = 0.5f + 0.4f * frand();
    scdb_evict_mlp_score(m, feats, 4, s1, NULL);
    scdb_evict_mlp_score(lm, feats, 4, s2, NULL);
    assert_memory_equal(s1, s2, sizeof s1);
    /* the mass feature matters to this network */
    for (int i = 0; i < 4; i++) feats[i * NF + SCDB_EF_MASS] *= 3.0f;
    scdb_evict_mlp_score(lm, feats, 4, s2, NULL);
    assert_true(memcmp(s1, s2, sizeof s1) != 0);
    for (int i = 0; i < 4; i++) feats[i * NF + SCDB_EF_MASS] /= 3.0f;
    /* ... and so does the budget; scdb_evict_mlp_score is budget = n */
    scdb_evict_mlp_score_budget(lm, feats, 4, 64, s2, NULL);
    assert_true(memcmp(s1, s2, sizeof s1) != 0);
    scdb_evict_mlp_score_budget(lm, feats, 4, 4, s2, NULL);
    assert_memory_equal(s1, s2, sizeof s1);
    /* protection: recent = max(5, floor(0.375 budget)) */
    int sk, rc_;
    scdb_evict_policy_protect(p, NULL, 100, 12, &sk, &rc_);
    assert_int_equal(sk, 3);
    assert_int_equal(rc_, 5);
    scdb_evict_policy_protect(p, NULL, 100, 20, &sk, &rc_);
    assert_int_equal(rc_, 7);
    scdb_evict_policy_protect(p, NULL, 100, 64, &sk, &rc_);
    assert_int_equal(rc_, 24);
    scdb_evict_policy_protect(p, NULL, 10, 64, &sk, &rc_);   /* clamped to n - sinks */
    assert_int_equal(sk + rc_, 10);
    scdb_evict_policy_free(&p);

    /* a version-1 file (five features) still loads: zero weights on mass
     * and budget, so it scores as the five-feature network did whatever the
     * mass and the budget */
    scdb_evict_mlp *m5 = NULL;
    assert_int_equal(scdb_evict_mlp_new(6, 7, &m5), SCDB_OK);
    assert_int_equal(scdb_evict_mlp_copy(m5, m), SCDB_OK);
    for (int r = 0; r < m5->hidden; r++) {
        m5->w1[r * NI + SCDB_EF_MASS] = 0.0f;
        m5->w1[r * NI + SCDB_EVICT_IN_BUDGET] = 0.0f;
    }
    for (int i = SCDB_EF_MASS; i < NI; i++) { m5->in_mean[i] = 0.0f; m5->in_std[i] = 1.0f; }
    snprintf(path, sizeof path, "%s/v1.safetensors", tmpdir);
    write_policy(path, m5, (variant){.v1 = 1});
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    lm = scdb_evict_policy_mlp(p);
    assert_true(lm->recent_frac == 0.0f);
    assert_int_equal(lm->recent, 8);
    scdb_evict_mlp_score(m5, feats, 4, s1, NULL);
    scdb_evict_mlp_score(lm, feats, 4, s2, NULL);
    assert_memory_equal(s1, s2, sizeof s1);
    for (int i = 0; i < 4; i++) feats[i * NF + SCDB_EF_MASS] *= 3.0f;
    scdb_evict_mlp_score_budget(lm, feats, 4, 100, s1, NULL);
    assert_memory_equal(s1, s2, sizeof s1);
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m5);
    /* version 1 with six-wide tensors, or version 2 with five: refused */
    assert_int_equal(load_variant(m, (variant){.v1 = 1, .meta_key = "features",
                                               .meta_val = "alpha,vnorm,sigma,ent,pos,mass"},
                                  err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, "features"));
    assert_int_equal(load_variant(m, (variant){.meta_key = "features",
                                               .meta_val = "alpha,vnorm,sigma,ent,pos"},
                                  err, sizeof err), SCDB_EMISMATCH);

    /* every kind of bad file has its own error, and a message */
    assert_int_equal(load_variant(m, (variant){0}, err, sizeof err), SCDB_OK);
    assert_int_equal(load_variant(m, (variant){.skip = "fc2.bias"}, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "fc2.bias"));
    assert_int_equal(load_variant(m, (variant){.skip = "fc1.weight"}, err, sizeof err), SCDB_ENOTFOUND);
    assert_int_equal(load_variant(m, (variant){.bad_shape = "fc2.weight"}, err, sizeof err), SCDB_ESHAPE);
    assert_non_null(strstr(err, "fc2.weight"));
    assert_int_equal(load_variant(m, (variant){.bad_shape = "fc1.weight"}, err, sizeof err), SCDB_ESHAPE);
    assert_int_equal(load_variant(m, (variant){.bad_shape = "input.std"}, err, sizeof err), SCDB_ESHAPE);
    assert_int_equal(load_variant(m, (variant){.i32 = "out.weight"}, err, sizeof err), SCDB_EDTYPE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "format", .meta_val = "scdb-codec-pair"},
                                  err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, "format"));
    assert_int_equal(load_variant(m, (variant){.meta_key = "format", .drop_meta = 1}, err, sizeof err),
                     SCDB_EMISMATCH);
    assert_int_equal(load_variant(m, (variant){.meta_key = "version", .meta_val = "7"}, err, sizeof err),
                     SCDB_EMISMATCH);
    assert_non_null(strstr(err, "version"));
    assert_int_equal(load_variant(m, (variant){.meta_key = "version", .drop_meta = 1}, err, sizeof err),
                     SCDB_EMISMATCH);
    assert_int_equal(load_variant(m, (variant){.v1 = 1}, err, sizeof err), SCDB_OK);
    assert_int_equal(load_variant(m, (variant){.meta_key = "recent_frac", .meta_val = "1"},
                                  err, sizeof err), SCDB_ERANGE);
    assert_non_null(strstr(err, "recent_frac"));
    assert_int_equal(load_variant(m, (variant){.meta_key = "recent_frac", .meta_val = "-0.1"},
                                  err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "recent_frac", .meta_val = "nan"},
                                  err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "recent_frac", .meta_val = "0.5x"},
                                  err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "recent_frac", .drop_meta = 1},
                                  err, sizeof err), SCDB_OK);   /* optional: 0 */
    assert_int_equal(load_variant(m, (variant){.meta_key = "features", .meta_val = "alpha,pos"},
                                  err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(load_variant(m, (variant){.meta_key = "sinks", .meta_val = "four"}, err, sizeof err),
                     SCDB_ERANGE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "recent", .meta_val = "-1"}, err, sizeof err),
                     SCDB_ERANGE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "pool", .meta_val = "4"}, err, sizeof err),
                     SCDB_ERANGE);
    assert_int_equal(load_variant(m, (variant){.meta_key = "pool", .drop_meta = 1}, err, sizeof err),
                     SCDB_OK);                                  /* optional: no pooling */
    assert_int_equal(load_variant(m, (variant){.nan_tensor = "fc2.weight"}, err, sizeof err), SCDB_ERANGE);
    m->in_std[2] = 0.0f;
    assert_int_equal(load_variant(m, (variant){0}, err, sizeof err), SCDB_ERANGE);
    m->in_std[2] = 1.0f;

    /* truncated and garbage files: the reader's errors */
    char *buf;
    size_t len;
    assert_int_equal(scdb_read_file(path, 1 << 20, &buf, &len), SCDB_OK);
    uint64_t hl;
    memcpy(&hl, buf, 8);
    snprintf(path, sizeof path, "%s/trunc.safetensors", tmpdir);
    write_bytes(path, buf, 8 + hl / 2);                         /* inside the header */
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_ETRUNC);
    write_bytes(path, buf, 5);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_ETRUNC);
    write_bytes(path, buf, len - 16);                           /* inside the data */
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_ERANGE);
    free(buf);
    unsigned char junk[64];
    memset(junk, 0, sizeof junk);
    junk[0] = 40;                                               /* plausible length */
    for (int i = 8; i < 64; i++) junk[i] = (unsigned char)(37 * i + 11);
    write_bytes(path, junk, sizeof junk);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_EFORMAT);
    write_bytes(path, "this is not a policy file at all", 32);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_ETOOBIG);
    assert_int_equal(scdb_evict_policy_load("/nonexistent/p.safetensors", &p, err, sizeof err),
                     SCDB_ENOTFOUND);
    assert_null(p);
    scdb_evict_mlp_free(&m);
}

/* ------------------------------------------------------------ gradients */

static void test_mlp_backward(void **state)
{
    (void)state;
    enum { N = 3, H = 5 };
    scdb_evict_mlp *m = NULL;
    float feats[N * NF], x[N * NI], s[N], c[N] = {0.7f, -1.3f, 0.4f};
    assert_int_equal(scdb_evict_mlp_new(H, 3, &m), SCDB_OK);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] = 0.8f * frand();
    for (int i = 0; i < N * NF; i++) feats[i] = 0.5f + 0.45f * frand();
    scdb_evict_mlp_score_budget(m, feats, N, 7, s, x);
    float *g = calloc(m->n_params, sizeof *g);
    scdb_evict_mlp_backward(m, x, N, c, g);
    for (size_t i = 0; i < m->n_params; i++) {
        float keep = m->params[i], eps = 1e-2f;
        double lp = 0, lm = 0;
        m->params[i] = keep + eps;
        scdb_evict_mlp_score_budget(m, feats, N, 7, s, NULL);
        for (int r = 0; r < N; r++) lp += c[r] * s[r];
        m->params[i] = keep - eps;
        scdb_evict_mlp_score_budget(m, feats, N, 7, s, NULL);
        for (int r = 0; r < N; r++) lm += c[r] * s[r];
        m->params[i] = keep;
        double fd = (lp - lm) / (2 * eps);
        assert_near(g[i], fd, 2e-3 + 1e-2 * fabs(fd));
    }
    free(g);
    scdb_evict_mlp_free(&m);
}

static void test_plackett_luce_gradient(void **state)
{
    (void)state;
    enum { N = 9 };
    float sc[N];
    int order[3] = {6, 2, 4};
    scdb_evict_decision d = {.step = 0, .n = N, .sinks = 1, .recent = 2, .m = 3,
                             .x = NULL, .s = sc, .order = order};
    double inv[N], ent, ent2;
    char drawn[N];
    float ds[N], dsh[N];
    for (int i = 0; i < N; i++) sc[i] = 1.5f * frand();
    memset(ds, 0, sizeof ds);
    memset(dsh, 0, sizeof dsh);
    double lp = scdb_evict_pl_grad(&d, 1.0f, 0.0f, ds, &ent, inv, drawn);
    scdb_evict_pl_grad(&d, 0.0f, 1.0f, dsh, &ent2, inv, drawn);
    /* log p by hand: candidates 1..6 */
    double want = 0.0;
    int used[N] = {0};
    for (int k = 0; k < 3; k++) {
        double z = 0;
        for (int j = 1; j < N - 2; j++) if (!used[j]) z += exp(sc[j]);
        want += sc[order[k]] - log(z);
        used[order[k]] = 1;
    }
    assert_near(lp, want, 1e-5);
    assert_true(ds[0] == 0.0f && ds[7] == 0.0f && ds[8] == 0.0f);   /* protected: no gradient */
    for (int j = 0; j < N; j++) {
        float keep = sc[j], eps = 1e-3f;
        double e1, e2, g1, g2;
        float tmp[N];
        sc[j] = keep + eps;
        memset(tmp, 0, sizeof tmp);
        g1 = scdb_evict_pl_grad(&d, 1.0f, 0.0f, tmp, &e1, inv, drawn);
        sc[j] = keep - eps;
        g2 = scdb_evict_pl_grad(&d, 1.0f, 0.0f, tmp, &e2, inv, drawn);
        sc[j] = keep;
        assert_near(ds[j], (g1 - g2) / (2 * eps), 2e-3);
        assert_near(dsh[j], (e1 - e2) / (2 * eps), 2e-3);
    }
    (void)ent2;
}

/* ------------------------------------------------------------ training smoke */

/* A tiny random model with sharper attention than tiny_model.h's default
 * scales, so the policy has something to learn. */
static void write_tiny(const char *dir)
{
    static const float scales[TINY_N_SCALES] = {1.0f, 0, 0.5f, 0, 0.8f, 0.8f, 0.6f, 0.5f,
                                                0,    0.3f, 0.3f, 0.3f};
    tiny_model t = {.name = "tiny", .scales = scales, .rng = &rng};
    tiny_model_write(dir, &t);
}

/* The protocol (episode.c) on a tiny model: a saved and reloaded network
 * evicts and is measured; the full cache reproduces the teacher exactly. */
static void test_window_protocol(void **state)
{
    (void)state;
    char dir[300], path[512], err[256] = "";
    snprintf(dir, sizeof dir, "%s/tiny", tmpdir);
    write_tiny(dir);
    static unsigned char text[4096];
    const char *src = "the quick brown fox jumps over the lazy dog; "
                      "pack my box with five dozen liquor jugs. ";
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)src[i % strlen(src)];

    scdb_evict_mlp *m = NULL;
    assert_int_equal(scdb_evict_mlp_new(8, 3, &m), SCDB_OK);
    m->sinks = 1;
    m->recent = 2;
    m->pool = 3;
    m->recent_frac = 0.25f;
    snprintf(path, sizeof path, "%s/protocol.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
    scdb_evict_policy *p = NULL;
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_evict_policy_mlp(p)->pool, 3);
    assert_true(scdb_evict_policy_mlp(p)->recent_frac == 0.25f);
    scdb_model *model = NULL;
    assert_int_equal(scdb_model_load(dir, &model, err, sizeof err), SCDB_OK);
    int32_t tok[41];
    scdb_tokenize_bytes(text + 100, 41, tok);
    scdb_evict_window *w = NULL;
    scdb_evict_eval e;
    assert_int_equal(scdb_evict_window_new(model, tok, 24, 16, &w), SCDB_OK);
    assert_int_equal(scdb_evict_window_eval(w, p, 10, 4, NULL, &e), SCDB_OK);
    assert_true(e.kl >= 0.0 && isfinite(e.kl) && e.top1 >= 0.0 && e.top1 <= 1.0);
    assert_true(e.evictions > 0);
    /* the full cache reproduces the teacher exactly */
    scdb_evict_policy *full = NULL;
    assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_FULL, &full), SCDB_OK);
    assert_int_equal(scdb_evict_window_eval(w, full, 10, 4, NULL, &e), SCDB_OK);
    assert_near(e.kl, 0.0, 1e-9);
    assert_near(e.top1, 1.0, 0);
    assert_int_equal(e.evictions, 0);
    /* bad arguments */
    assert_int_equal(scdb_evict_window_eval(w, p, 0, 4, NULL, &e), SCDB_EINVAL);
    assert_int_equal(scdb_evict_window_eval(w, p, 10, 0, NULL, &e), SCDB_EINVAL);
    scdb_evict_policy_free(&full);
    scdb_evict_window_free(&w);
    scdb_model_free(&model);
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m);
}

/* ------------------------------------------------------------ kernel twins
 * This module runs its per-slot compute on kernels.h's eviction twins (what
 * the CUDA backend is tested against).  Checked here against independent
 * references: features from their definitions, keep sets from
 * scdb_evict_rank's merge sort (not the twin's qsort), compaction against a
 * copy gathered slot by slot. */

static void test_kernel_twins(void **state)
{
    (void)state;
    scdb_evict_acc_shape s = {3, 4, 2, 300, 5, 0};
    scdb_evict_acc *a = NULL, *b = NULL;
    assert_int_equal(scdb_evict_acc_new(&s, &a), SCDB_OK);
    assert_int_equal(scdb_evict_acc_new(&s, &b), SCDB_OK);
    int n = 257;
    a->n = n;
    a->last_pos = 2 * n + 3;
    for (int i = 0; i < n; i++) {
        scdb_evict_acc_pos(a)[i] = 2 * i + (i % 3);
        float *arrs[8] = {scdb_evict_acc_n_obs(a), scdb_evict_acc_mass(a), scdb_evict_acc_rel(a),
                          scdb_evict_acc_var(a), scdb_evict_acc_ent_num(a), scdb_evict_acc_ent_den(a),
                          scdb_evict_acc_vnorm(a), scdb_evict_acc_last(a)};
        for (int k = 0; k < 8; k++) arrs[k][i] = i % 11 == 0 ? 0.0f : fabsf(frand()) * 3.0f;
    }
    for (int r = 0; r < s.window * s.n_kv_heads; r++)
        for (int i = 0; i < n; i++) scdb_evict_acc_win(a)[(size_t)r * s.capacity + i] = frand();
    assert_int_equal(scdb_evict_acc_copy(b, a), SCDB_OK);

    /* features from their definitions (evict.h) */
    assert_int_equal(SCDB_K_EVICT_N_FEATURES, SCDB_EVICT_N_FEATURES);
    float *f1 = malloc((size_t)n * SCDB_EVICT_N_FEATURES * sizeof *f1);
    assert_int_equal(scdb_evict_features(a, f1), SCDB_OK);
    for (int i = 0; i < n; i++) {
        const float *r = f1 + (size_t)i * SCDB_EVICT_N_FEATURES;
        float no = scdb_evict_acc_n_obs(a)[i], ed = scdb_evict_acc_ent_den(a)[i];
        float pos = (float)(scdb_evict_acc_pos(a)[i] + 1) / (float)(a->last_pos + 1);
        assert_true(r[SCDB_EF_ALPHA] == (no > 0 ? scdb_evict_acc_rel(a)[i] / no : 0.0f));
        assert_true(r[SCDB_EF_VNORM] == scdb_evict_acc_vnorm(a)[i]);
        assert_true(r[SCDB_EF_SIGMA] == (no > 0 ? scdb_evict_acc_var(a)[i] / no : 0.0f));
        assert_true(r[SCDB_EF_ENT] == (ed > 0 ? scdb_evict_acc_ent_num(a)[i] / ed : 0.0f));
        assert_true(r[SCDB_EF_POS] == (pos > 1.0f ? 1.0f : pos));
        assert_true(r[SCDB_EF_MASS] == scdb_evict_acc_mass(a)[i]);
    }

    /* keep sets: scores on a coarse grid, so ties are common */
    float *sc = malloc((size_t)n * sizeof *sc);
    int *k1 = malloc((size_t)n * sizeof *k1), *ref = malloc((size_t)n * sizeof *ref), nk1;
    unsigned char *flag = malloc((size_t)n);
    for (int i = 0; i < n; i++) sc[i] = floorf(frand() * 8.0f);
    int cases[][3] = {{64, 4, 32}, {10, 0, 0}, {200, 50, 50}, {300, 4, 4}, {5, 4, 8}};
    for (size_t c = 0; c < SCDB_ARRAY_LEN(cases); c++) {
        int budget = cases[c][0], sinks = cases[c][1], recent = cases[c][2], nr = 0, nc = 0;
        assert_int_equal(scdb_evict_select(sc, n, budget, sinks, recent, k1, &nk1), SCDB_OK);
        if (n <= budget) {
            for (int i = 0; i < n; i++) ref[nr++] = i;
        } else {
            if (sinks > budget) sinks = budget;
            if (recent > budget - sinks) recent = budget - sinks;
            int *cand = malloc((size_t)n * sizeof *cand);
            for (int i = sinks; i < n - recent; i++) cand[nc++] = i;
            assert_int_equal(scdb_evict_rank(sc, cand, nc), SCDB_OK);
            memset(flag, 0, (size_t)n);
            for (int i = 0; i < sinks; i++) flag[i] = 1;
            for (int i = 0; i < budget - sinks - recent; i++) flag[cand[i]] = 1;
            for (int i = n - recent; i < n; i++) flag[i] = 1;
            for (int i = 0; i < n; i++) if (flag[i]) ref[nr++] = i;
            free(cand);
        }
        assert_int_equal(nk1, nr);
        assert_memory_equal(k1, ref, (size_t)nr * sizeof *ref);
    }

    /* compaction of every slot array and ring row, with the first keep set,
     * against b's arrays gathered one slot at a time */
    assert_int_equal(scdb_evict_select(sc, n, 64, 4, 32, k1, &nk1), SCDB_OK);
    assert_int_equal(scdb_evict_acc_compact(a, k1, nk1), SCDB_OK);
    assert_int_equal(a->n, nk1);
    for (int i = 0; i < nk1; i++) {
        int j = k1[i];
        assert_int_equal(scdb_evict_acc_pos(a)[i], scdb_evict_acc_pos(b)[j]);
        float *xa[8] = {scdb_evict_acc_n_obs(a), scdb_evict_acc_mass(a), scdb_evict_acc_rel(a),
                        scdb_evict_acc_var(a), scdb_evict_acc_ent_num(a), scdb_evict_acc_ent_den(a),
                        scdb_evict_acc_vnorm(a), scdb_evict_acc_last(a)};
        float *xb[8] = {scdb_evict_acc_n_obs(b), scdb_evict_acc_mass(b), scdb_evict_acc_rel(b),
                        scdb_evict_acc_var(b), scdb_evict_acc_ent_num(b), scdb_evict_acc_ent_den(b),
                        scdb_evict_acc_vnorm(b), scdb_evict_acc_last(b)};
        for (int k = 0; k < 8; k++) assert_true(xa[k][i] == xb[k][j]);
        for (int r = 0; r < s.window * s.n_kv_heads; r++)
            assert_true(scdb_evict_acc_win(a)[(size_t)r * s.capacity + i] ==
                        scdb_evict_acc_win(b)[(size_t)r * s.capacity + j]);
    }
    /* bad keep lists are refused and change nothing */
    int bad[2] = {3, 3};
    assert_int_equal(scdb_evict_acc_compact(a, bad, 2), SCDB_EINVAL);
    assert_int_equal(a->n, nk1);
    free(f1); free(sc); free(k1); free(ref); free(flag);
    scdb_evict_acc_free(&a);
    scdb_evict_acc_free(&b);
}

/* ------------------------------------------------------------ on a device
 * A session whose cache and accumulators are device memory runs the loop of
 * evict.h through an ops table (acc_dev.c, evict_dev.c).  On the CPU table
 * it must compute what the host loop computes: the same statistics step by
 * step (scdb_session_add_stats' two updates vs scdb_evict_dev_fold), the
 * same evictions (scdb_evict_run vs scdb_evict_dev_run), for every policy,
 * over a get, a prefill chunk and decode steps with evictions between them.
 * Exact, but for the entropy numerators, compared within 1e-5 relative: the
 * twin computes them as acc.c does, but acc.c may vectorise its entropy
 * loop differently (the CUDA twin differs there by logf and its reduction
 * order: tests/test_kernels_cuda.c). */

#define DL 3
#define DH 4
#define DG 2
#define DHD 8
#define DCAP 96

/* one forward's probabilities: softmax of random logits over the slots
 * query q can see (slot pos <= its pos), 0 elsewhere */
static void dev_probs(const scdb_kv_cache *c, int n_new, int slots, float *probs)
{
    for (int lh = 0; lh < DL * DH; lh++)
        for (int q = 0; q < n_new; q++) {
            float *row = probs + ((size_t)lh * n_new + q) * slots;
            int32_t qp = c->pos[c->n - n_new + q];
            double z = 0.0;
            for (int j = 0; j < slots; j++) {
                row[j] = j < c->n && c->pos[j] <= qp ? expf(3.0f * frand()) : 0.0f;
                z += row[j];
            }
            for (int j = 0; j < slots; j++) row[j] = (float)(row[j] / z);
        }
}

static void dev_append(scdb_kv_cache *a, scdb_kv_cache *b, int n, int32_t p0)
{
    for (int i = 0; i < n; i++) {
        int s = a->n + i;
        a->pos[s] = b->pos[s] = p0 + i;
        for (int l = 0; l < DL; l++)
            for (int d = 0; d < DG * DHD; d++) {
                scdb_kv_k(a, l, s)[d] = scdb_kv_k(b, l, s)[d] = frand();
                scdb_kv_v(a, l, s)[d] = scdb_kv_v(b, l, s)[d] = frand();
            }
    }
    a->n += n;
    b->n += n;
}

static void dev_same_acc(const scdb_evict_acc *h, const scdb_evict_acc *d)
{
    size_t ent = scdb_evict_acc_offset(h, 5), end = scdb_evict_acc_offset(h, 6);
    assert_int_equal(h->bytes, d->bytes);
    assert_memory_equal(h, d, ent);
    assert_memory_equal((const char *)h + end, (const char *)d + end, (size_t)h->bytes - end);
    const float *x = (const float *)((const char *)h + ent), *y = (const float *)((const char *)d + ent);
    for (int i = 0; i < h->capacity; i++)
        if (!(fabsf(x[i] - y[i]) <= 1e-7f + 1e-5f * fabsf(x[i])))
            fail_msg("ent_num[%d]: host %g device sequence %g", i, x[i], y[i]);
}

static void dev_sequence(const scdb_evict_policy *p)
{
    const scdb_k_ops *ops = scdb_k_ops_get(SCDB_DEV_CPU);
    scdb_evict_acc_shape sh = {DL, DH, DG, DCAP, 5, 0};
    size_t bytes = scdb_evict_acc_bytes(&sh);
    scdb_kv_cache *ca, *cb;
    scdb_evict_acc *ha = NULL, *da = NULL;
    void *dmem = NULL, *scratch = NULL;
    scdb_k_acc_buf buf;
    float *probs = malloc((size_t)DL * DH * 5 * DCAP * sizeof *probs);
    int32_t mh[DCAP], md[DCAP];
    int acc_n = 0, nkh, nkd, evictions = 0, budget = 16;

    assert_non_null(probs);
    assert_int_equal(scdb_kv_cache_new(DL, DG, DHD, DCAP, &ca), SCDB_OK);
    assert_int_equal(scdb_kv_cache_new(DL, DG, DHD, DCAP, &cb), SCDB_OK);
    assert_int_equal(scdb_evict_acc_new(&sh, &ha), SCDB_OK);
    /* what the broker does: lay the header over the buffer it exports */
    assert_int_equal(ops->alloc(bytes, &dmem), SCDB_OK);
    assert_int_equal(scdb_evict_acc_init(dmem, bytes, &sh, &da), SCDB_OK);
    scdb_evict_acc_buf(da, dmem, &buf);
    assert_int_equal(ops->alloc(scdb_evict_dev_scratch_bytes(DCAP), &scratch), SCDB_OK);

    /* a get of 20 slots, then a prefill chunk of 5 with statistics */
    dev_append(ca, cb, 20, 0);
    dev_append(ca, cb, 5, 20);
    dev_probs(ca, 5, DCAP, probs);
    {
        scdb_kv_cache view = *ca;
        view.n = 20;
        assert_int_equal(scdb_evict_acc_update(ha, &view, NULL, 0, 20), SCDB_OK);
        assert_int_equal(scdb_evict_acc_update(ha, ca, probs, DCAP, 5), SCDB_OK);
    }
    assert_int_equal(scdb_evict_dev_fold(ops, &buf, &acc_n, cb, probs, DCAP, 5, NULL, NULL),
                     SCDB_OK);
    assert_int_equal(acc_n, 25);
    dev_same_acc(ha, da);
    /* decode steps, an eviction every 8 */
    for (int t = 0; t < 40; t++) {
        dev_append(ca, cb, 1, ca->pos[ca->n - 1] + 1);
        dev_probs(ca, 1, ca->n + 3, probs);
        assert_int_equal(scdb_evict_acc_update(ha, ca, probs, ca->n + 3, 1), SCDB_OK);
        assert_int_equal(scdb_evict_dev_fold(ops, &buf, &acc_n, cb, probs, ca->n + 3, 1, NULL,
                                             NULL), SCDB_OK);
        if (t % 8 != 7) continue;
        scdb_evict_acc hdr = *da;                 /* the broker's checked copy */
        assert_int_equal(scdb_evict_run(p, ca, ha, budget, mh, &nkh), SCDB_OK);
        assert_int_equal(scdb_evict_dev_run(ops, p, cb, &hdr, dmem, budget, scratch, md, &nkd),
                         SCDB_OK);
        assert_int_equal(nkd, nkh);
        assert_int_equal(cb->n, ca->n);
        assert_memory_equal(md, mh, (size_t)nkh * sizeof *mh);
        evictions += nkh < hdr.n;
        acc_n = cb->n;
        dev_same_acc(ha, da);
        assert_memory_equal(ca->mem, cb->mem, scdb_kv_cache_bytes(DL, DG, DHD, DCAP));
    }
    if (scdb_evict_policy_kind(p) != SCDB_EVICT_FULL) assert_int_equal(evictions, 5);
    /* refusals: statistics that do not match the cache, a header out of step */
    assert_int_equal(scdb_evict_dev_fold(ops, &buf, &acc_n, cb, probs, ca->n + 3, 1, NULL, NULL),
                     SCDB_EINVAL);                 /* no slot was appended */
    assert_int_equal(scdb_evict_dev_fold(ops, &buf, &acc_n, cb, probs, 1, 0, NULL, NULL),
                     SCDB_EINVAL);
    if (scdb_evict_policy_kind(p) != SCDB_EVICT_FULL) {
        scdb_evict_acc hdr = *da;
        dev_append(ca, cb, budget, ca->pos[ca->n - 1] + 1);   /* over budget, unfolded */
        assert_int_equal(scdb_evict_dev_run(ops, p, cb, &hdr, dmem, budget, scratch, md, &nkd),
                         SCDB_EINVAL);
    }
    ops->release(scratch);
    ops->release(dmem);
    scdb_evict_acc_free(&ha);
    scdb_kv_cache_free(&ca);
    scdb_kv_cache_free(&cb);
    free(probs);
}

static void test_device_sequence(void **state)
{
    (void)state;
    for (int k = 0; k < SCDB_EVICT_KIND_COUNT; k++) {
        scdb_evict_policy *p = NULL;
        /* a device keeps one set (the per-head kinds' refusal there:
         * test_evict_heads.c) */
        if (scdb_evict_kind_per_head((scdb_evict_kind)k)) continue;
        if (k == SCDB_EVICT_LEARNED) {
            scdb_evict_mlp *m = NULL;
            assert_int_equal(scdb_evict_mlp_new(16, 7, &m), SCDB_OK);
            m->pool = 5;
            m->sinks = 2;
            m->recent = 3;
            assert_int_equal(scdb_evict_policy_from_mlp(m, &p), SCDB_OK);
            scdb_evict_mlp_free(&m);
        } else {
            assert_int_equal(scdb_evict_policy_new((scdb_evict_kind)k, &p), SCDB_OK);
        }
        dev_sequence(p);
        scdb_evict_policy_free(&p);
    }
    {   /* a version-3 network (ranks, ages, context: the accumulators come
         * down whole) decides as on the host too */
        int ids[] = {SCDB_EI_BUDGET, SCDB_EI_AGE, SCDB_EI_R_MASS, SCDB_EI_R_SNAPKV,
                     SCDB_EI_R_LAST, SCDB_EI_VNORM_Z, SCDB_EI_LIFE, SCDB_EI_CTX_N};
        scdb_evict_mlp *m = NULL;
        scdb_evict_policy *p = NULL;
        assert_int_equal(scdb_evict_mlp_new_inputs(16, ids, (int)(sizeof ids / sizeof ids[0]), 9, &m),
                         SCDB_OK);
        m->pool = 3;
        m->sinks = 2;
        m->recent = 3;
        assert_int_equal(scdb_evict_policy_from_mlp(m, &p), SCDB_OK);
        scdb_evict_mlp_free(&m);
        dev_sequence(p);
        scdb_evict_policy_free(&p);
    }
    /* the twins alone: SnapKV's score against the policy's, and NaN scores
     * (memory a client can write) still select budget valid slots */
    {
        scdb_kv_cache *c;
        scdb_evict_acc *a;
        float s1[16], s2[16];
        int keep[16], nk;
        pattern(&c, &a);
        scdb_evict_policy *p = NULL;
        assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_SNAPKV, &p), SCDB_OK);
        assert_int_equal(scdb_evict_policy_score(p, a, s1), SCDB_OK);
        assert_int_equal(scdb_k_snapkv_score_cpu(scdb_evict_acc_win(a), a->ring_fill, a->n_kv_heads,
                                                 a->capacity, a->n, SCDB_EVICT_SNAPKV_POOL, s2),
                         SCDB_OK);
        assert_memory_equal(s1, s2, (size_t)a->n * sizeof *s1);
        assert_int_equal(scdb_k_snapkv_score_cpu(scdb_evict_acc_win(a), a->ring_fill, 2, 16, 12, 4,
                                                 s2), SCDB_EINVAL);   /* even pool */
        for (int i = 0; i < 12; i++) s1[i] = i % 3 ? NAN : (float)i;
        assert_int_equal(scdb_k_select_topb_cpu(s1, 12, 6, 1, 1, keep, &nk), SCDB_OK);
        assert_int_equal(nk, 6);
        int want[6] = {0, 3, 6, 9, 10, 11};  /* sink, 3 numbers, the highest NaN (-inf) slot, recent */
        assert_memory_equal(keep, want, sizeof want);
        scdb_evict_policy_free(&p);
        scdb_evict_acc_free(&a);
        scdb_kv_cache_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acc_layout_attach),
        cmocka_unit_test(test_features_hand),
        cmocka_unit_test(test_heuristic_keep_sets),
        cmocka_unit_test(test_learned_keep_set),
        cmocka_unit_test(test_select_rules),
        cmocka_unit_test(test_partial_selection),
        cmocka_unit_test(test_compact_order_and_map),
        cmocka_unit_test(test_kernel_twins),
        cmocka_unit_test(test_policy_file),
        cmocka_unit_test(test_mlp_backward),
        cmocka_unit_test(test_plackett_luce_gradient),
        cmocka_unit_test(test_window_protocol),
        cmocka_unit_test(test_device_sequence),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
