/* test_evict_heads.c — keep sets per (layer, KV group) (evict.h, "Keep
 * sets per head"): the per-head accumulator layout and its bad headers, the
 * fold against sums written out from the attention probabilities, each
 * per-head heuristic's sets against a reference selection, the per-set
 * compaction of K, V, positions and statistics, the layout rules (which
 * policy runs on which layout, the device path's refusal), the version-6
 * policy file and its bad inputs, and the protocol on a tiny model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evict.h"
#include "evict_internal.h"
#include "evict_train.h"
#include "helpers/tiny_model.h"
#include "model.h"
#include "safetensors.h"

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_evict_heads_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A tiny model (2 layers, 4 query heads over 2 KV groups: 4 keep sets)
 * on disk, loaded. */
static scdb_model *tiny(void)
{
    char dir[400], err[256];
    uint64_t r = 42;
    tiny_model t = {.name = "tiny", .rng = &r};
    snprintf(dir, sizeof dir, "%s/tiny", tmpdir);
    tiny_model_write(dir, &t);
    scdb_model *m = NULL;
    assert_int_equal(scdb_model_load(dir, &m, err, sizeof err), SCDB_OK);
    return m;
}

static void tokens(int32_t *tok, int n, int seed)
{
    const char *src = "the quick brown fox jumps over the lazy dog; pack my box with five dozen "
                      "liquor jugs. sphinx of black quartz, judge my vow! ";
    size_t l = strlen(src);
    for (int i = 0; i < n; i++) tok[i] = (unsigned char)src[(size_t)(i * 7 + seed) % l];
}

/* ------------------------------------------------------------ layout */

static void test_heads_layout(void **state)
{
    (void)state;
    scdb_evict_acc_shape s1 = {8, 4, 2, 512, 0, 0}, s2 = {8, 4, 2, 512, 0, 1};
    size_t b1 = scdb_evict_acc_bytes(&s1), b2 = scdb_evict_acc_bytes(&s2);
    /* version 1's buffer, the mode block, then 16 sets: 3 arrays of 16 x
     * 512 and a ring of 32 x 16 x 512 */
    assert_int_equal(b1, 64 + 9 * 512 * 4 + 32 * 2 * 512 * 4);
    assert_int_equal(b2, b1 + 64 + 3 * 16 * 512 * 4 + 32 * 16 * 512 * 4);
    scdb_evict_acc_shape bad = s2;
    bad.per_head = 2;
    assert_int_equal(scdb_evict_acc_bytes(&bad), 0);

    scdb_evict_acc *a = NULL, *v1 = NULL, *got = NULL;
    assert_int_equal(scdb_evict_acc_new(&s2, &a), SCDB_OK);
    assert_int_equal(scdb_evict_acc_new(&s1, &v1), SCDB_OK);
    assert_true(scdb_evict_acc_per_head(a));
    assert_false(scdb_evict_acc_per_head(v1));
    assert_int_equal(scdb_evict_acc_n_sets(a), 16);
    assert_int_equal(scdb_evict_acc_n_sets(v1), 1);
    assert_int_equal(a->version, SCDB_EVICT_ACC_VERSION_HEADS);
    assert_int_equal(a->bytes, b2);
    /* the arrays tile the buffer, 64-byte aligned: version 1's where they
     * are in version 1, the sets' after the mode block */
    assert_ptr_equal((char *)scdb_evict_acc_win(a) - (char *)a, (char *)scdb_evict_acc_win(v1) - (char *)v1);
    assert_int_equal((char *)scdb_evict_acc_head_pos(a) - (char *)a, b1 + 64);
    assert_int_equal((char *)scdb_evict_acc_head_mass(a) - (char *)a, b1 + 64 + 16 * 512 * 4);
    assert_int_equal((char *)scdb_evict_acc_head_win(a) - (char *)a, b1 + 64 + 3 * 16 * 512 * 4);
    assert_int_equal(scdb_evict_acc_mode(a), SCDB_EVICT_MODE_NONE);
    assert_int_equal(scdb_evict_acc_mode(v1), SCDB_EVICT_MODE_SHARED);
    /* a damaged mode word */
    *(uint32_t *)((char *)a + b1) = 7;
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)a->bytes, &got), SCDB_ERANGE);
    *(uint32_t *)((char *)a + b1) = SCDB_EVICT_MODE_SPLIT;
    assert_int_equal(scdb_evict_acc_mode(a), SCDB_EVICT_MODE_SPLIT);

    assert_int_equal(scdb_evict_acc_attach(a, (size_t)a->bytes, &got), SCDB_OK);
    assert_ptr_equal(got, a);
    /* one buffer's size but the other layout's version: the sizes disagree */
    a->version = SCDB_EVICT_ACC_VERSION;
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)a->bytes, &got), SCDB_ERANGE);
    a->version = 3;
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)a->bytes, &got), SCDB_EUNSUPPORTED);
    a->version = SCDB_EVICT_ACC_VERSION_HEADS;
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)a->bytes - 1, &got), SCDB_ETRUNC);
    a->bytes += 64;
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)a->bytes, &got), SCDB_ERANGE);
    a->bytes -= 64;
    a->n_layers = 4;   /* a shape whose size is not the buffer's */
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)b2, &got), SCDB_ERANGE);
    a->n_layers = 8;
    assert_int_equal(scdb_evict_acc_attach(a, (size_t)b2, &got), SCDB_OK);
    /* copies stay within a layout */
    assert_int_equal(scdb_evict_acc_copy(v1, a), SCDB_ESHAPE);
    /* one set's features only while the sets are the same */
    float f[6];
    a->n = 1;
    assert_int_equal(scdb_evict_features(a, f), SCDB_EMISMATCH);   /* split */
    scdb_evict_acc_set_mode(a, SCDB_EVICT_MODE_SHARED);
    assert_int_equal(scdb_evict_features(a, f), SCDB_OK);
    scdb_evict_acc_free(&a);
    scdb_evict_acc_free(&v1);
}

/* ------------------------------------------------------------ fold */

static void test_heads_fold(void **state)
{
    (void)state;
    scdb_model *m = tiny();
    const scdb_model_config *c = scdb_model_cfg(m);
    const int L = c->n_layers, H = c->n_heads, G = c->n_kv_heads, K = L * G, hpg = H / G;
    const int P = 40, cap = 64, window = 6;
    int32_t tok[P];
    tokens(tok, P, 1);
    scdb_kv_cache *kv = NULL;
    assert_int_equal(scdb_model_cache_new(m, cap, &kv), SCDB_OK);
    float *probs = calloc((size_t)L * H * P * P, sizeof *probs);
    scdb_capture capt = {0};
    capt.probs = probs;
    capt.probs_slots = P;
    assert_int_equal(scdb_model_forward(m, tok, NULL, P, kv, NULL, &capt), SCDB_OK);

    scdb_evict_acc_shape sh = {L, H, G, cap, window, 1}, s1 = {L, H, G, cap, window, 0};
    scdb_evict_acc *a = NULL, *one = NULL;
    assert_int_equal(scdb_evict_acc_new(&sh, &a), SCDB_OK);
    assert_int_equal(scdb_evict_acc_new(&s1, &one), SCDB_OK);
    assert_int_equal(scdb_evict_acc_update(a, kv, probs, P, P), SCDB_OK);
    assert_int_equal(scdb_evict_acc_update(one, kv, probs, P, P), SCDB_OK);
    assert_int_equal(a->n, P);
    assert_int_equal(a->last_pos, P - 1);
    assert_int_equal(a->ring_fill, window);
    assert_int_equal((int)a->n_queries, P);

    /* every set's sums written out from the probabilities */
    double worst = 0.0;
    for (int l = 0; l < L; l++)
        for (int g = 0; g < G; g++) {
            int k = l * G + g;
            for (int j = 0; j < P; j++) {
                double mass = 0.0, last = 0.0;
                for (int q = j; q < P; q++) {
                    double s = 0.0;
                    for (int h = g * hpg; h < (g + 1) * hpg; h++)
                        s += probs[(((size_t)l * H + h) * P + q) * P + j];
                    mass += s / hpg;
                    if (q == P - 1) last = s / hpg;
                    /* the ring holds the last `window` queries; query q is row q % window */
                    if (q >= P - window) {
                        float w = scdb_evict_acc_head_win(a)[((size_t)(q % window) * K + k) * cap + j];
                        worst = fmax(worst, fabs(w - s / hpg));
                    }
                }
                assert_int_equal(scdb_evict_acc_head_pos(a)[(size_t)k * cap + j], j);
                worst = fmax(worst, fabs(scdb_evict_acc_head_mass(a)[(size_t)k * cap + j] - mass));
                worst = fmax(worst, fabs(scdb_evict_acc_head_last(a)[(size_t)k * cap + j] - last));
            }
        }
    assert_true(worst < 1e-5);
    /* the sets' mean is the one-set layout's mass (H2O's score) */
    for (int j = 0; j < P; j++) {
        double s = 0.0;
        for (int k = 0; k < K; k++) s += scdb_evict_acc_head_mass(a)[(size_t)k * cap + j];
        assert_true(fabs(s / K - scdb_evict_acc_mass(one)[j]) < 1e-4);
    }
    /* a slot appended without queries: recorded in every set, no statistics */
    int32_t t1 = 'x';
    assert_int_equal(scdb_model_forward(m, &t1, NULL, 1, kv, NULL, NULL), SCDB_OK);
    assert_int_equal(scdb_evict_acc_update(a, kv, NULL, 0, 1), SCDB_OK);
    for (int k = 0; k < K; k++) {
        assert_int_equal(scdb_evict_acc_head_pos(a)[(size_t)k * cap + P], P);
        assert_true(scdb_evict_acc_head_mass(a)[(size_t)k * cap + P] == 0.0f);
    }
    /* bad calls */
    assert_int_equal(scdb_evict_acc_update(a, kv, probs, P, 0), SCDB_EINVAL);
    assert_int_equal(scdb_evict_acc_update(a, kv, NULL, 0, 1), SCDB_EINVAL);   /* n + 1 != cache n */
    scdb_evict_acc_free(&a);
    scdb_evict_acc_free(&one);
    free(probs);
    scdb_kv_cache_free(&kv);
    scdb_model_free(&m);
}

/* ------------------------------------------------------------ sets and compaction */

/* The reference selection of one set: protected [0, sinks) and the last
 * `recent`, then the highest scores (ties: the higher slot). */
static void ref_select(const float *s, int n, int budget, int sinks, int recent, int *keep)
{
    char *in = calloc((size_t)n, 1);
    int m = budget - sinks - recent, nk = 0;
    for (int i = 0; i < sinks; i++) in[i] = 1;
    for (int i = n - recent; i < n; i++) in[i] = 1;
    for (int t = 0; t < m; t++) {
        int b = -1;
        for (int i = 0; i < n; i++)
            if (!in[i] && (b < 0 || s[i] > s[b] || (s[i] == s[b] && i > b))) b = i;
        in[b] = 1;
    }
    for (int i = 0; i < n; i++)
        if (in[i]) keep[nk++] = i;
    free(in);
}

/* a prefilled tiny cache with per-head accumulators */
typedef struct fixture {
    scdb_model *m;
    scdb_kv_cache *kv, *orig;
    scdb_evict_acc *a;
    int L, G, K, hd, P, cap;
} fixture;

static void fixture_make(fixture *f, int P, int window)
{
    f->m = tiny();
    const scdb_model_config *c = scdb_model_cfg(f->m);
    f->L = c->n_layers;
    f->G = c->n_kv_heads;
    f->K = f->L * f->G;
    f->hd = c->head_dim;
    f->P = P;
    f->cap = P + 8;
    int32_t *tok = malloc((size_t)P * sizeof *tok);
    tokens(tok, P, 3);
    float *probs = calloc((size_t)f->L * c->n_heads * P * P, sizeof *probs);
    scdb_capture capt = {0};
    capt.probs = probs;
    capt.probs_slots = P;
    assert_int_equal(scdb_model_cache_new(f->m, f->cap, &f->kv), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(f->m, f->cap, &f->orig), SCDB_OK);
    assert_int_equal(scdb_model_forward(f->m, tok, NULL, P, f->kv, NULL, &capt), SCDB_OK);
    assert_int_equal(scdb_evict_cache_copy(f->orig, f->kv), SCDB_OK);
    scdb_evict_acc_shape sh = {f->L, c->n_heads, f->G, f->cap, window, 1};
    assert_int_equal(scdb_evict_acc_new(&sh, &f->a), SCDB_OK);
    assert_int_equal(scdb_evict_acc_update(f->a, f->kv, probs, P, P), SCDB_OK);
    free(probs);
    free(tok);
}

static void fixture_free(fixture *f)
{
    scdb_evict_acc_free(&f->a);
    scdb_kv_cache_free(&f->kv);
    scdb_kv_cache_free(&f->orig);
    scdb_model_free(&f->m);
}

/* After an eviction to B: every set kept what the reference selects on its
 * own score, its K / V rows are the original ones of those positions, its
 * statistics moved with them, and the cache's positions are the sets'
 * newest. */
static void check_sets(const fixture *f, const scdb_evict_acc *before, const float *score,
                       int B, int sinks, const int *recent)
{
    const int n = before->n, cap = f->cap;
    int *keep = malloc((size_t)B * sizeof *keep);
    assert_int_equal(f->kv->n, B);
    assert_int_equal(f->a->n, B);
    for (int l = 0; l < f->L; l++)
        for (int g = 0; g < f->G; g++) {
            int k = l * f->G + g;
            ref_select(score + (size_t)k * n, n, B, sinks, recent[k], keep);
            for (int i = 0; i < B; i++) {
                int32_t p = scdb_evict_acc_head_pos(before)[(size_t)k * cap + keep[i]];
                assert_int_equal(scdb_evict_acc_head_pos(f->a)[(size_t)k * cap + i], p);
                assert_true(scdb_evict_acc_head_mass(f->a)[(size_t)k * cap + i] ==
                            scdb_evict_acc_head_mass(before)[(size_t)k * cap + keep[i]]);
                assert_true(scdb_evict_acc_head_win(f->a)[((size_t)2 * f->K + k) * cap + i] ==
                            scdb_evict_acc_head_win(before)[((size_t)2 * f->K + k) * cap + keep[i]]);
                /* no earlier eviction: position == original slot */
                assert_memory_equal(scdb_kv_k(f->kv, l, i) + (size_t)g * f->hd,
                                    scdb_kv_k(f->orig, l, p) + (size_t)g * f->hd,
                                    (size_t)f->hd * sizeof(float));
                assert_memory_equal(scdb_kv_v(f->kv, l, i) + (size_t)g * f->hd,
                                    scdb_kv_v(f->orig, l, p) + (size_t)g * f->hd,
                                    (size_t)f->hd * sizeof(float));
            }
            /* the newest slot is in every set */
            assert_int_equal(keep[B - 1], n - 1);
        }
    for (int i = 0; i < B; i++) {
        int32_t mx = -1;
        for (int k = 0; k < f->K; k++) {
            int32_t p = scdb_evict_acc_head_pos(f->a)[(size_t)k * cap + i];
            if (p > mx) mx = p;
        }
        assert_int_equal(f->kv->pos[i], mx);
        if (i) assert_true(f->kv->pos[i] > f->kv->pos[i - 1]);
    }
    free(keep);
}

static void test_heads_heuristics(void **state)
{
    (void)state;
    const int P = 60, B = 20, window = 8;
    for (int kind = SCDB_EVICT_H2O_HEAD; kind <= SCDB_EVICT_TOVA_LAYER; kind++) {
        fixture f;
        fixture_make(&f, P, window);
        scdb_evict_acc *before = NULL;
        scdb_evict_acc_shape sh = {f.L, 4, f.G, f.cap, window, 1};
        assert_int_equal(scdb_evict_acc_new(&sh, &before), SCDB_OK);
        assert_int_equal(scdb_evict_acc_copy(before, f.a), SCDB_OK);
        /* the reference scores, from their definitions */
        float *score = calloc((size_t)f.K * P, sizeof *score);
        int recent[16];
        for (int k = 0; k < f.K; k++) {
            const int cap = f.cap;
            float *sk = score + (size_t)k * P;
            if (kind == SCDB_EVICT_H2O_HEAD) {
                for (int j = 0; j < P; j++) sk[j] = scdb_evict_acc_head_mass(before)[(size_t)k * cap + j];
                recent[k] = B / 2;
            } else if (kind == SCDB_EVICT_SNAPKV_HEAD) {
                float sum[64];
                for (int j = 0; j < P; j++) {
                    sum[j] = 0.0f;
                    for (int r = 0; r < before->ring_fill; r++)
                        sum[j] += scdb_evict_acc_head_win(before)[((size_t)r * f.K + k) * cap + j];
                }
                for (int j = 0; j < P; j++) {
                    float mx = sum[j];
                    for (int d = -3; d <= 3; d++)
                        if (j + d >= 0 && j + d < P && sum[j + d] > mx) mx = sum[j + d];
                    sk[j] = mx;
                }
                recent[k] = window < B / 2 ? window : B / 2;
            } else {
                int l = k / f.G;
                for (int j = 0; j < P; j++) {
                    float v = 0.0f;
                    for (int g = 0; g < f.G; g++)
                        v += scdb_evict_acc_head_last(before)[((size_t)l * f.G + g) * cap + j];
                    sk[j] = v / (float)f.G;
                }
                recent[k] = 1;
            }
        }
        scdb_evict_policy *p = NULL;
        int nk = 0;
        int32_t map[64];
        assert_int_equal(scdb_evict_policy_new((scdb_evict_kind)kind, &p), SCDB_OK);
        assert_true(scdb_evict_policy_per_head(p, B, f.cap));
        assert_true(scdb_evict_policy_needs_acc(p));
        assert_int_equal(scdb_evict_run(p, f.kv, f.a, B, map, &nk), SCDB_OK);
        assert_int_equal(nk, B);
        assert_memory_equal(map, f.kv->pos, (size_t)B * sizeof *map);
        check_sets(&f, before, score, B, 0, recent);
        if (kind == SCDB_EVICT_TOVA_LAYER)   /* one set per layer */
            for (int l = 0; l < f.L; l++)
                assert_memory_equal(scdb_evict_acc_head_pos(f.a) + (size_t)(l * f.G) * f.cap,
                                    scdb_evict_acc_head_pos(f.a) + (size_t)(l * f.G + 1) * f.cap,
                                    (size_t)B * sizeof(int32_t));
        /* the sets differ somewhere (the heads attend differently) */
        int differ = 0;
        for (int k = 1; k < f.K; k++)
            differ |= memcmp(scdb_evict_acc_head_pos(f.a), scdb_evict_acc_head_pos(f.a) + (size_t)k * f.cap,
                             (size_t)B * sizeof(int32_t)) != 0;
        assert_true(differ);
        /* the model decodes on from the compacted cache (one length) */
        int32_t t1 = 'q';
        float logits[256];
        assert_int_equal(scdb_model_forward(f.m, &t1, NULL, 1, f.kv, logits, NULL), SCDB_OK);
        assert_int_equal(f.kv->pos[f.kv->n - 1], P);
        for (int i = 0; i < 256; i++) assert_true(isfinite(logits[i]));
        scdb_evict_policy_free(&p);
        free(score);
        scdb_evict_acc_free(&before);
        fixture_free(&f);
    }
}

/* ------------------------------------------------------------ rules */

/* One more decoded token folded into (kv, a), so the cache is over a smaller budget. */
static void append_slot(const scdb_model *m, scdb_kv_cache *kv, scdb_evict_acc *a)
{
    const scdb_model_config *c = scdb_model_cfg(m);
    float *probs = calloc((size_t)c->n_layers * c->n_heads * kv->capacity, sizeof *probs);
    scdb_capture capt = {0};
    capt.probs = probs;
    capt.probs_slots = kv->capacity;
    int32_t t = 'z';
    assert_int_equal(scdb_model_forward(m, &t, NULL, 1, kv, NULL, &capt), SCDB_OK);
    assert_int_equal(scdb_evict_acc_update(a, kv, probs, kv->capacity, 1), SCDB_OK);
    free(probs);
}

static void test_heads_rules(void **state)
{
    (void)state;
    static const char *const names[] = {"h2o_head", "snapkv_head", "tova_layer"};
    for (int i = 0; i < 3; i++) {
        scdb_evict_kind k;
        assert_int_equal(scdb_evict_kind_parse(names[i], &k), SCDB_OK);
        assert_int_equal(k, SCDB_EVICT_H2O_HEAD + i);
        assert_string_equal(scdb_evict_kind_name(k), names[i]);
        assert_true(scdb_evict_kind_per_head(k));
    }
    for (int k = SCDB_EVICT_FULL; k <= SCDB_EVICT_LEARNED; k++)
        assert_false(scdb_evict_kind_per_head((scdb_evict_kind)k));

    fixture f;
    fixture_make(&f, 40, 4);
    scdb_evict_acc_shape s1 = {f.L, 4, f.G, f.cap, 4, 0};
    scdb_evict_acc *one = NULL;
    assert_int_equal(scdb_evict_acc_new(&s1, &one), SCDB_OK);
    assert_int_equal(scdb_evict_acc_update(one, f.kv, NULL, 0, f.kv->n), SCDB_OK);
    int nk;
    float sc[64];
    scdb_evict_acc_shape s2 = {f.L, 4, f.G, f.cap, 4, 1};
    scdb_evict_acc *b = NULL;
    assert_int_equal(scdb_evict_acc_new(&s2, &b), SCDB_OK);
    scdb_kv_cache *kv2 = NULL;
    assert_int_equal(scdb_model_cache_new(f.m, f.cap, &kv2), SCDB_OK);
    for (int k = SCDB_EVICT_STREAMING; k < SCDB_EVICT_KIND_COUNT; k++) {
        if (k == SCDB_EVICT_LEARNED) continue;
        scdb_evict_policy *p = NULL;
        assert_int_equal(scdb_evict_policy_new((scdb_evict_kind)k, &p), SCDB_OK);
        int ph = scdb_evict_kind_per_head((scdb_evict_kind)k);
        assert_int_equal(scdb_evict_policy_runs_on(p, 1), ph || k == SCDB_EVICT_STREAMING);
        assert_int_equal(scdb_evict_policy_runs_on(p, 0), !ph);
        /* a per-head kind on one set's layout: refused, nothing compacted */
        if (ph) assert_int_equal(scdb_evict_run(p, f.kv, one, 10, NULL, &nk), SCDB_EMISMATCH);
        assert_int_equal(f.kv->n, 40);
        /* a one-set kind on the per-head layout, the sets still the same:
         * it keeps one set for all, what it keeps on version 1 */
        assert_int_equal(scdb_evict_acc_copy(b, f.a), SCDB_OK);
        assert_int_equal(scdb_evict_cache_copy(kv2, f.kv), SCDB_OK);
        if (!ph) {
            scdb_evict_acc *o1 = NULL;
            scdb_kv_cache *kv1 = NULL;
            int32_t m1[16], m2[16];
            assert_int_equal(scdb_evict_acc_new(&s1, &o1), SCDB_OK);
            assert_int_equal(scdb_model_cache_new(f.m, f.cap, &kv1), SCDB_OK);
            assert_int_equal(scdb_evict_cache_copy(kv1, f.kv), SCDB_OK);
            memcpy(o1, b, (size_t)o1->bytes);   /* version 1's part of the buffer */
            o1->version = SCDB_EVICT_ACC_VERSION;
            o1->bytes = scdb_evict_acc_bytes(&s1);
            assert_int_equal(scdb_evict_policy_score_budget(p, b, 10, sc), SCDB_OK);
            assert_int_equal(scdb_evict_run(p, kv2, b, 10, m2, &nk), SCDB_OK);
            assert_int_equal(scdb_evict_run(p, kv1, o1, 10, m1, &nk), SCDB_OK);
            assert_memory_equal(m1, m2, 10 * sizeof *m1);
            assert_int_equal(scdb_evict_acc_mode(b), SCDB_EVICT_MODE_SHARED);
            for (int q = 0; q < f.K; q++)
                assert_memory_equal(scdb_evict_acc_head_pos(b) + (size_t)q * f.cap, m1,
                                    10 * sizeof *m1);
            scdb_evict_acc_free(&o1);
            scdb_kv_cache_free(&kv1);
        } else {
            /* a per-head kind splits the sets; then one set's kinds are refused */
            assert_int_equal(scdb_evict_run(p, kv2, b, 10, NULL, &nk), SCDB_OK);
            assert_int_equal(scdb_evict_acc_mode(b), SCDB_EVICT_MODE_SPLIT);
            scdb_evict_policy *h2o = NULL;
            assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_H2O, &h2o), SCDB_OK);
            append_slot(f.m, kv2, b);
            assert_int_equal(scdb_evict_run(h2o, kv2, b, 8, NULL, &nk), SCDB_EMISMATCH);
            assert_int_equal(scdb_evict_policy_score_budget(h2o, b, 8, sc), SCDB_EMISMATCH);
            assert_int_equal(scdb_evict_features(b, sc), SCDB_EMISMATCH);
            /* a one-set compaction of split sets */
            int kp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
            assert_int_equal(scdb_evict_compact(kv2, b, kp, 8, NULL), SCDB_EINVAL);
            scdb_evict_policy_free(&h2o);
        }
        scdb_evict_policy_free(&p);
    }
    scdb_evict_acc_free(&b);
    scdb_kv_cache_free(&kv2);
    /* streaming on the per-head layout: the same window in every set */
    scdb_evict_policy *st = NULL;
    assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_STREAMING, &st), SCDB_OK);
    assert_int_equal(scdb_evict_run(st, f.kv, f.a, 10, NULL, &nk), SCDB_OK);
    assert_int_equal(nk, 10);
    for (int k = 0; k < f.K; k++) {
        const int32_t *pk = scdb_evict_acc_head_pos(f.a) + (size_t)k * f.cap;
        for (int i = 0; i < 4; i++) assert_int_equal(pk[i], i);
        for (int i = 4; i < 10; i++) assert_int_equal(pk[i], 40 - 10 + i);
    }
    /* compaction with bad keep lists */
    int keep[2 * 4 * 8];
    for (int k = 0; k < f.K; k++)
        for (int i = 0; i < 8; i++) keep[k * 8 + i] = i;
    keep[8 + 3] = keep[8 + 2];   /* set 1 not increasing */
    assert_int_equal(scdb_evict_compact_heads(f.kv, f.a, keep, 8, NULL), SCDB_EINVAL);
    keep[8 + 3] = 99;            /* out of range */
    assert_int_equal(scdb_evict_compact_heads(f.kv, f.a, keep, 8, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_evict_compact_heads(f.kv, one, keep, 8, NULL), SCDB_EINVAL);
    int bad[8] = {0, 1, 2, 3, 3, 5, 6, 7};
    assert_int_equal(scdb_evict_compact(f.kv, f.a, bad, 8, NULL), SCDB_EINVAL);
    assert_int_equal(f.kv->n, 10);
    /* a device keeps one set: the per-head layout and kinds are refused */
    const scdb_k_ops *ops = scdb_k_ops_get(SCDB_DEV_CPU);
    char scratch[1 << 12];
    int32_t map[64];
    scdb_evict_policy *hp = NULL;
    assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_SNAPKV_HEAD, &hp), SCDB_OK);
    assert_int_equal(scdb_evict_dev_run(ops, st, f.kv, f.a, f.a, 4, scratch, map, &nk),
                     SCDB_EUNSUPPORTED);
    assert_int_equal(scdb_evict_dev_run(ops, hp, f.kv, one, one, 4, scratch, map, &nk),
                     SCDB_EUNSUPPORTED);
    scdb_evict_policy_free(&hp);
    scdb_evict_policy_free(&st);
    scdb_evict_acc_free(&one);
    fixture_free(&f);
}

/* ------------------------------------------------------------ the learned scorer, its file */

/* A network (any: in sessions with one set it decides) with a scorer that
 * ranks by each set's SnapKV score and protects half the budget. */
static scdb_evict_mlp *snap_scorer(float split)
{
    scdb_evict_mlp *m = NULL;
    assert_int_equal(scdb_evict_mlp_new(4, 5, &m), SCDB_OK);
    memset(&m->heads, 0, sizeof m->heads);
    m->heads.on = 1;
    m->heads.split = split;
    m->heads.sinks = 0;
    m->heads.n_win = 3;
    m->heads.win_frac[0] = 0.0f;
    m->heads.win_frac[1] = 0.25f;
    m->heads.win_frac[2] = 0.5f;
    m->heads.a[0 * SCDB_EVICT_HEAD_CTX + SCDB_EVICT_HEAD_CTX - 1] = 1.0f;   /* snap */
    m->heads.d[2 * SCDB_EVICT_HEAD_CTX + SCDB_EVICT_HEAD_CTX - 1] = 1.0f;   /* half */
    return m;
}

static void test_heads_scorer(void **state)
{
    (void)state;
    /* at B = 16 SnapKV per head protects min(window 8, 8): half the budget,
     * and the scorer's log(1e-3 + share) orders as the score: the same sets */
    const int B = 16;
    fixture f1, f2;
    fixture_make(&f1, 50, 8);
    fixture_make(&f2, 50, 8);
    scdb_evict_mlp *m = snap_scorer(0.5f);
    scdb_evict_policy *lp = NULL, *sp = NULL;
    assert_int_equal(scdb_evict_policy_from_mlp(m, &lp), SCDB_OK);
    assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_SNAPKV_HEAD, &sp), SCDB_OK);
    assert_true(scdb_evict_policy_per_head(lp, B, f1.cap));
    assert_true(scdb_evict_policy_runs_on(lp, 1));
    assert_true(scdb_evict_policy_runs_on(lp, 0));
    int n1, n2;
    assert_int_equal(scdb_evict_run(lp, f1.kv, f1.a, B, NULL, &n1), SCDB_OK);
    assert_int_equal(scdb_evict_run(sp, f2.kv, f2.a, B, NULL, &n2), SCDB_OK);
    assert_int_equal(n1, n2);
    assert_memory_equal(scdb_evict_acc_head_pos(f1.a), scdb_evict_acc_head_pos(f2.a),
                        (size_t)f1.K * f1.cap * sizeof(int32_t));
    assert_memory_equal(f1.kv->k, f2.kv->k, (size_t)f1.L * f1.cap * f1.G * f1.hd * sizeof(float));
    /* the split: per-head sets at budget <= split x capacity only */
    assert_true(scdb_evict_mlp_heads_at(m, (int)(0.5f * f1.cap), f1.cap));
    assert_false(scdb_evict_mlp_heads_at(m, (int)(0.5f * f1.cap) + 1, f1.cap));
    m->heads.on = 0;
    assert_false(scdb_evict_mlp_heads_at(m, 1, f1.cap));
    scdb_evict_policy *np = NULL;
    assert_int_equal(scdb_evict_policy_from_mlp(m, &np), SCDB_OK);
    assert_false(scdb_evict_policy_runs_on(np, 1));   /* no scorer: one set only */
    scdb_evict_policy_free(&np);
    /* the context the scorer reads: shares in [0, 1], z = log2(B / 64) */
    float sc[4 * 64], ctx[4 * SCDB_EVICT_HEAD_CTX];
    int sinks, rec[4];
    m->heads.on = 1;
    fixture f3;
    fixture_make(&f3, 50, 8);
    assert_int_equal(scdb_evict_heads_score_ctx(&m->heads, f3.a, 32, sc, &sinks, rec, ctx), SCDB_OK);
    for (int k = 0; k < f3.K; k++) {
        const float *c = ctx + k * SCDB_EVICT_HEAD_CTX;
        for (int i = 0; i < 3; i++) assert_true(c[i] >= 0.0f && c[i] <= 1.0f + 1e-6f);
        assert_true(fabsf(c[3] - (-1.0f)) < 1e-6f);
        assert_true(c[4] == (float)(k / f3.G));   /* depth: 2 layers, 0 and 1 */
        assert_true(c[5] == 1.0f);
        assert_int_equal(rec[k], 16);
    }
    assert_int_equal(scdb_evict_heads_score_ctx(&m->heads, f3.a, 0, sc, &sinks, rec, ctx), SCDB_EINVAL);
    fixture_free(&f3);
    /* the gate: at the first eviction, the scorer's sets (gate . g > 0) or
     * the network's one set for the rest of the session */
    for (int sign = -1; sign <= 1; sign += 2) {
        fixture fg;
        fixture_make(&fg, 50, 8);
        scdb_evict_mlp *gm = snap_scorer(0.5f);
        gm->heads.has_gate = 1;
        gm->heads.gate[SCDB_EVICT_GATE_N - 1] = (float)sign;   /* its bias alone */
        float g[SCDB_EVICT_GATE_N];
        assert_int_equal(scdb_evict_heads_gate_input(fg.a, B, g), SCDB_OK);
        assert_true(g[SCDB_EVICT_GATE_N - 1] == 1.0f);
        assert_true(g[6] == -2.0f);   /* log2(16 / 64) */
        for (int i = 0; i < 3; i++) assert_true(g[i] >= 0.0f && g[i] <= 1.0f);
        assert_int_equal(scdb_evict_mlp_heads_choose(gm, fg.a, B), sign > 0);
        scdb_evict_policy *gp = NULL;
        assert_int_equal(scdb_evict_policy_from_mlp(gm, &gp), SCDB_OK);
        assert_int_equal(scdb_evict_run(gp, fg.kv, fg.a, B, NULL, &n1), SCDB_OK);
        assert_int_equal(scdb_evict_acc_mode(fg.a), sign > 0 ? SCDB_EVICT_MODE_SPLIT : SCDB_EVICT_MODE_SHARED);
        /* the gate is not asked again: the mode holds */
        gm->heads.gate[SCDB_EVICT_GATE_N - 1] = (float)-sign;
        scdb_evict_policy *gq = NULL;
        assert_int_equal(scdb_evict_policy_from_mlp(gm, &gq), SCDB_OK);
        append_slot(fg.m, fg.kv, fg.a);
        assert_int_equal(scdb_evict_run(gq, fg.kv, fg.a, B - 2, NULL, &n1), SCDB_OK);
        assert_int_equal(scdb_evict_acc_mode(fg.a), sign > 0 ? SCDB_EVICT_MODE_SPLIT : SCDB_EVICT_MODE_SHARED);
        assert_int_equal(fg.kv->n, B - 2);
        scdb_evict_policy_free(&gp);
        scdb_evict_policy_free(&gq);
        scdb_evict_mlp_free(&gm);
        fixture_free(&fg);
    }
    scdb_evict_policy_free(&lp);
    scdb_evict_policy_free(&sp);
    scdb_evict_mlp_free(&m);
    fixture_free(&f1);
    fixture_free(&f2);
}

/* More window choices for a fitted scorer (train-policy --init F
 * --heads-windows): the extended scorer decides as the start at every
 * budget; a choice the start has and the new list lacks, a fraction out of
 * range, too many choices or no margin are refused. */
static void test_heads_extend(void **state)
{
    (void)state;
    scdb_evict_mlp *m = snap_scorer(0.5f);
    uint64_t r = 7;
    for (int i = 0; i < SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX; i++)
        m->heads.a[i] = (float)(scdb_evict_urand(&r) - 0.5);
    for (int i = 0; i < m->heads.n_win * SCDB_EVICT_HEAD_CTX; i++)
        m->heads.d[i] = (float)(2.0 * scdb_evict_urand(&r) - 1.0);
    m->heads.d[3 * SCDB_EVICT_HEAD_CTX - 1] += 3.0f;   /* 0.5 wins wherever its row is high */
    const float fr[5] = {0.9375f, 0.5f, 0.0f, 0.125f, 0.25f};   /* new, reordered */
    scdb_evict_heads h;
    char err[256];
    assert_int_equal(scdb_evict_heads_extend(&m->heads, 5, fr, 0.3f, &h, err, sizeof err), SCDB_OK);
    assert_int_equal(h.n_win, 5);
    assert_memory_equal(h.a, m->heads.a, sizeof h.a);
    /* 0.5's row is the start's row 2; 0.9375's is 0.5's lowered by 0.3 */
    assert_memory_equal(h.d + 1 * SCDB_EVICT_HEAD_CTX, m->heads.d + 2 * SCDB_EVICT_HEAD_CTX,
                        SCDB_EVICT_HEAD_CTX * sizeof *h.d);
    assert_true(h.d[SCDB_EVICT_HEAD_CTX - 1] == m->heads.d[3 * SCDB_EVICT_HEAD_CTX - 1] - 0.3f);
    fixture f;
    fixture_make(&f, 50, 8);
    float s1[4 * 64], s2[4 * 64], c1[4 * SCDB_EVICT_HEAD_CTX], c2[4 * SCDB_EVICT_HEAD_CTX];
    int k1, k2, r1[4], r2[4], half = 0;
    for (int b = 4; b <= 48; b += 4) {
        assert_int_equal(scdb_evict_heads_score_ctx(&m->heads, f.a, b, s1, &k1, r1, c1), SCDB_OK);
        assert_int_equal(scdb_evict_heads_score_ctx(&h, f.a, b, s2, &k2, r2, c2), SCDB_OK);
        assert_int_equal(k1, k2);
        assert_memory_equal(r1, r2, (size_t)f.K * sizeof *r1);
        assert_memory_equal(s1, s2, (size_t)f.K * f.a->n * sizeof *s1);
        for (int k = 0; k < f.K; k++) half += r1[k] == b / 2;
    }
    /* the start takes 0.5, the new choice's nearest, somewhere: without the
     * margin the new 0.9375 would win there */
    assert_true(half > 0);
    fixture_free(&f);
    /* refused: the start's 0.25 missing; 1.0; nine choices; margin 0 / NaN */
    const float miss[3] = {0.0f, 0.5f, 0.75f}, one[4] = {0.0f, 0.25f, 0.5f, 1.0f};
    const float nine[9] = {0.0f, 0.25f, 0.5f, 0.1f, 0.2f, 0.3f, 0.4f, 0.6f, 0.7f};
    assert_int_equal(scdb_evict_heads_extend(&m->heads, 3, miss, 0.3f, &h, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "0.25"));
    assert_int_equal(scdb_evict_heads_extend(&m->heads, 4, one, 0.3f, &h, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "not a fraction"));
    assert_int_equal(scdb_evict_heads_extend(&m->heads, 9, nine, 0.3f, &h, err, sizeof err), SCDB_EINVAL);
    assert_int_equal(scdb_evict_heads_extend(&m->heads, 3, fr + 1, 0.0f, &h, err, sizeof err), SCDB_EINVAL);
    assert_int_equal(scdb_evict_heads_extend(&m->heads, 3, fr + 1, NAN, &h, err, sizeof err), SCDB_EINVAL);
    scdb_evict_mlp_free(&m);
}

/* A version-6 file with one thing changed. */
typedef struct v6 {
    const char *meta_key, *meta_val;   /* set (or, drop, remove) one metadata value */
    int drop;
    const char *skip;                  /* leave this tensor out */
    const char *extra;                 /* add this tensor */
    int short_d, nan_a;
} v6;

static scdb_err load_v6(const scdb_evict_mlp *m, v6 v, char *err, size_t errlen)
{
    char path[512];
    snprintf(path, sizeof path, "%s/v6.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
    /* read it back and rewrite it with the change */
    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open(path, &f, err, errlen), SCDB_OK);
    scdb_st_writer *w = NULL;
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    static const char *const keys[] = {"format", "version", "features", "activation", "sinks",
                                       "recent", "recent_frac", "pool", "window_choices", "heads_split", "heads_sinks",
                                       "heads_window_choices"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *val = scdb_st_meta(f, keys[i]);
        if (v.meta_key && !strcmp(v.meta_key, keys[i])) {
            if (v.drop) continue;
            val = v.meta_val;
        }
        if (val) assert_int_equal(scdb_st_writer_meta(w, keys[i], val), SCDB_OK);
    }
    float buf[64], z[2] = {0};
    for (int i = 0; i < scdb_st_count(f); i++) {
        const scdb_st_tensor *t = scdb_st_at(f, i);
        if (v.skip && !strcmp(v.skip, t->name)) continue;
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 0};
        const void *data = t->data;
        if (!strcmp(t->name, "heads.d") && v.short_d) shape[0] -= 1;
        if (!strcmp(t->name, "heads.a") && v.nan_a) {
            memcpy(buf, t->data, t->nbytes);
            buf[3] = NAN;
            data = buf;
        }
        assert_int_equal(scdb_st_writer_add(w, t->name, SCDB_F32, t->ndim, shape, data), SCDB_OK);
    }
    if (v.extra) {
        int64_t shape[1] = {2};
        assert_int_equal(scdb_st_writer_add(w, v.extra, SCDB_F32, 1, shape, z), SCDB_OK);
    }
    snprintf(path, sizeof path, "%s/v6b.safetensors", tmpdir);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);   /* before f's data goes */
    scdb_st_writer_free(&w);
    scdb_st_close(&f);
    scdb_evict_policy *p = NULL;
    err[0] = 0;
    scdb_err rc = scdb_evict_policy_load(path, &p, err, errlen);
    if (rc == SCDB_OK) assert_true(scdb_evict_policy_mlp(p)->heads.on);
    scdb_evict_policy_free(&p);
    return rc;
}

static void test_heads_file(void **state)
{
    (void)state;
    char path[512], err[512];
    scdb_evict_mlp *m = snap_scorer(0.1875f);
    m->heads.sinks = 2;
    for (int i = 0; i < SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX; i++) m->heads.a[i] += 0.01f * i;
    m->n_win = 2;
    m->win_frac[0] = 0.25f;
    m->win_frac[1] = 0.5f;
    snprintf(path, sizeof path, "%s/good6.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
    scdb_evict_policy *p = NULL;
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_evict_policy_meta(p, "version"), "6");
    const scdb_evict_heads *h = &scdb_evict_policy_mlp(p)->heads;
    assert_true(h->on);
    assert_true(h->split == 0.1875f);
    assert_int_equal(h->sinks, 2);
    assert_int_equal(h->n_win, 3);
    assert_memory_equal(h->win_frac, m->heads.win_frac, 3 * sizeof(float));
    assert_memory_equal(h->a, m->heads.a, sizeof h->a);
    assert_memory_equal(h->d, m->heads.d, 3 * SCDB_EVICT_HEAD_CTX * sizeof(float));
    assert_int_equal(scdb_evict_policy_mlp(p)->n_win, 2);   /* the network's head travels too */
    scdb_evict_policy_free(&p);

    /* every bad part has its own error, naming it */
    assert_int_equal(load_v6(m, (v6){0}, err, sizeof err), SCDB_OK);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_split", .meta_val = "0"}, err, sizeof err), SCDB_ERANGE);
    assert_non_null(strstr(err, "heads_split"));
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_split", .meta_val = "1.5"}, err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_split", .meta_val = "nan"}, err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_split", .meta_val = "0.2x"}, err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_split", .drop = 1}, err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_split", .meta_val = "1"}, err, sizeof err), SCDB_OK);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_sinks", .meta_val = "-1"}, err, sizeof err), SCDB_ERANGE);
    assert_non_null(strstr(err, "heads_sinks"));
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_sinks", .drop = 1}, err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_window_choices", .meta_val = ",0.5"}, err,
                             sizeof err), SCDB_ERANGE);
    assert_non_null(strstr(err, "heads_window_choices"));
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_window_choices", .meta_val = "0,1"}, err,
                             sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_window_choices", .meta_val = "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8"},
                             err, sizeof err), SCDB_ERANGE);   /* nine: more than the most */
    /* two choices named, three rows stored: the shape says so */
    assert_int_equal(load_v6(m, (v6){.meta_key = "heads_window_choices", .meta_val = "0,0.5"}, err,
                             sizeof err), SCDB_ESHAPE);
    assert_non_null(strstr(err, "heads.d"));
    assert_int_equal(load_v6(m, (v6){.short_d = 1}, err, sizeof err), SCDB_ESHAPE);
    assert_int_equal(load_v6(m, (v6){.skip = "heads.a"}, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "heads.a"));
    assert_int_equal(load_v6(m, (v6){.nan_a = 1}, err, sizeof err), SCDB_ERANGE);
    assert_int_equal(load_v6(m, (v6){.extra = "heads.bias"}, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, "heads.bias"));
    /* the gate: optional, [8], finite */
    m->heads.has_gate = 1;
    for (int i = 0; i < SCDB_EVICT_GATE_N; i++) m->heads.gate[i] = 0.1f * (float)i - 0.3f;
    snprintf(path, sizeof path, "%s/gate6.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_true(scdb_evict_policy_mlp(p)->heads.has_gate);
    assert_memory_equal(scdb_evict_policy_mlp(p)->heads.gate, m->heads.gate, sizeof m->heads.gate);
    scdb_evict_policy_free(&p);
    assert_int_equal(load_v6(m, (v6){0}, err, sizeof err), SCDB_OK);
    m->heads.gate[2] = NAN;
    assert_int_equal(load_v6(m, (v6){0}, err, sizeof err), SCDB_ERANGE);
    m->heads.gate[2] = 0.0f;
    m->heads.has_gate = 0;
    assert_int_equal(load_v6(m, (v6){.extra = "heads.gate"}, err, sizeof err), SCDB_ESHAPE);  /* [2] */
    assert_non_null(strstr(err, "heads.gate"));
    /* the scorer's tensors in a file of another version */
    assert_int_equal(load_v6(m, (v6){.meta_key = "version", .meta_val = "4"}, err, sizeof err),
                     SCDB_EMISMATCH);
    assert_non_null(strstr(err, "heads."));
    /* the save refuses what the loader would */
    m->heads.split = 0.0f;
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_EINVAL);
    m->heads.split = 0.25f;
    m->heads.win_frac[1] = 1.0f;
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_EINVAL);
    scdb_evict_mlp_free(&m);
}

/* ------------------------------------------------------------ the protocol */

static void test_heads_protocol(void **state)
{
    (void)state;
    scdb_model *m = tiny();
    int32_t tok[49];
    tokens(tok, 49, 5);
    scdb_evict_window *w = NULL;
    assert_int_equal(scdb_evict_window_new(m, tok, 32, 16, &w), SCDB_OK);
    scdb_evict_eval e, e2;
    for (int k = SCDB_EVICT_H2O_HEAD; k <= SCDB_EVICT_TOVA_LAYER; k++) {
        scdb_evict_policy *p = NULL;
        assert_int_equal(scdb_evict_policy_new((scdb_evict_kind)k, &p), SCDB_OK);
        assert_int_equal(scdb_evict_window_eval(w, p, 12, 4, NULL, &e), SCDB_OK);
        assert_true(e.kl > 0.0 && isfinite(e.kl) && e.evictions > 0);
        /* deterministic */
        assert_int_equal(scdb_evict_window_eval(w, p, 12, 4, NULL, &e2), SCDB_OK);
        assert_true(e.kl == e2.kl);
        /* the protocol's training branches keep one set */
        assert_int_equal(scdb_evict_window_reset(w), SCDB_OK);
        double s;
        assert_int_equal(scdb_evict_window_steps(w, p, 12, 4, 4, &s), SCDB_EMISMATCH);
        scdb_evict_policy_free(&p);
    }
    /* the learned policy: its scorer below the split, its network above */
    scdb_evict_mlp *lm = snap_scorer(0.3f);   /* capacity 48: sets per head up to 14 */
    scdb_evict_policy *lp = NULL, *sp = NULL;
    assert_int_equal(scdb_evict_policy_from_mlp(lm, &lp), SCDB_OK);
    assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_SNAPKV_HEAD, &sp), SCDB_OK);
    assert_int_equal(scdb_evict_window_eval(w, lp, 12, 4, NULL, &e), SCDB_OK);
    assert_int_equal(scdb_evict_window_eval(w, sp, 12, 4, NULL, &e2), SCDB_OK);
    assert_true(e.kl == e2.kl);   /* B/2 = 6 < window: the same sets as SnapKV per head */
    lm->heads.on = 0;
    scdb_evict_policy *np = NULL;
    assert_int_equal(scdb_evict_policy_from_mlp(lm, &np), SCDB_OK);
    assert_int_equal(scdb_evict_window_eval(w, lp, 20, 4, NULL, &e), SCDB_OK);
    assert_int_equal(scdb_evict_window_eval(w, np, 20, 4, NULL, &e2), SCDB_OK);
    assert_true(e.kl == e2.kl);   /* 20 > 14: the network decides, one set */
    scdb_evict_policy_free(&np);
    scdb_evict_policy_free(&lp);
    scdb_evict_policy_free(&sp);
    scdb_evict_mlp_free(&lm);
    scdb_evict_window_free(&w);
    scdb_model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heads_layout),     cmocka_unit_test(test_heads_fold),
        cmocka_unit_test(test_heads_heuristics), cmocka_unit_test(test_heads_rules),
        cmocka_unit_test(test_heads_scorer),     cmocka_unit_test(test_heads_file),
        cmocka_unit_test(test_heads_protocol),   cmocka_unit_test(test_heads_extend),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
