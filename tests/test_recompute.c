/* test_recompute.c — fidelity on demand (issue 40): the recompute settings
 * (schema/recompute.h), scdb_get_recompute (libscdb) against a real broker
 * process, the fidelity default a registration carries (the broker config's
 * `fidelity`, else the pair's), and the reference engine's restore
 * (engine/engine.h):
 *
 *   - each policy takes out exactly the tokens it says (positions, counts,
 *     token ids), and every other restored slot is the plain get's, in
 *     order, at its position;
 *   - recomputing every token (each policy at 100%) gives the consumer's
 *     own prefill: the continuation's logits within f32 tolerance;
 *   - bad settings are refused by name before anything is fetched (a count
 *     beyond the prefix, a negative count, an unknown policy, a fraction
 *     out of range, selective without a scorer), as are bad texts;
 *   - a percentage recomputes exactly its share, and its text round-trips;
 *   - a registration's default is clamped to the prefix, never refused;
 *   - the engine's restore refuses what its forward would before the get,
 *     and leaves the arena as it was on a failure;
 *   - the CacheBlend scorer ranks a NaN first and scores a LoRA adapter
 *     loaded low-rank as the same adapter merged.
 * Skipped (77) without the model family (data/models/base, code). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "broker.h"
#include "broker_proc.h"
#include "engine.h"
#include "model.h"
#include "scdb.h"
#include "scdb.pb-c.h"

/* client/conn.c (libscdb_int.h): the hello's default off the wire */
scdb_err cl_recompute_from_wire(const Scdb__Recompute *w, scdb_recompute *out, char *why,
                                size_t whylen);

#define P 192          /* prefix: 3 blocks of 64 */
#define C 32           /* continuation scored against own prefill */

static bp_broker bp;
static int have_family;
static scdb_model *cons_model;
static int32_t toks[P + C];

static scdb *connect_as(scdb_role role, const char *model, const char *cb)
{
    scdb_opts o = {.endpoint = bp.endpoint, .timeout_ms = 20000, .name = "test_recompute"};
    scdb *h = NULL;
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    assert_int_equal(scdb_register(h, role, model, cb, NULL), SCDB_OK);
    return h;
}

/* the producer's states of the prefix, stored under codebook cb */
static void put_prefix(const char *cb)
{
    scdb_model *base = NULL;
    scdb_kv_cache *kv = NULL;
    scdb_arena *a = NULL;
    scdb_put_result pr;
    scdb_capture cap = {0};
    char err[256];
    int L, D, cap_n;
    scdb *h = connect_as(SCDB_PRODUCER, "base", cb);

    assert_int_equal(scdb_model_load(SCDB_DATA_DIR "/models/base", &base, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_states_arena_new(h, P, &a), SCDB_OK);
    cap.h_in = scdb_arena_states(a, &L, &D, &cap_n);
    assert_non_null(cap.h_in);
    assert_int_equal(scdb_model_cache_new(base, P, &kv), SCDB_OK);
    assert_int_equal(scdb_model_forward(base, toks, NULL, P, kv, NULL, &cap), SCDB_OK);
    assert_int_equal(scdb_put_states(h, toks, P, 0, a, &pr), SCDB_OK);
    assert_int_equal(pr.n_stored, P / 64);
    scdb_arena_free(&a);
    scdb_kv_cache_free(&kv);
    scdb_model_free(&base);
    scdb_close(&h);
}

static int setup(void **state)
{
    static const char text[] =
        "Recompute a small part of a restored prefix to buy fidelity with time: the tail, "
        "the first tokens, or the ones whose KV deviates most. ";
    char ini[4096], err[256];
    (void)state;
    have_family = access(SCDB_DATA_DIR "/models/base/model.safetensors", R_OK) == 0 &&
                  access(SCDB_DATA_DIR "/models/code/config.json", R_OK) == 0 &&
                  access(SCDB_DATA_DIR "/pairs/base__code.safetensors", R_OK) == 0;
    if (!have_family) return 0;
    for (int i = 0; i < P + C; i++) toks[i] = (unsigned char)text[i % (sizeof text - 1)];
    snprintf(ini, sizeof ini,
             "[model base]\nconfig = " SCDB_DATA_DIR "/models/base/config.json\n"
             "[model code]\nconfig = " SCDB_DATA_DIR "/models/code/config.json\n"
             "[codebook base-scd]\nkind = scd\nmodel = base\n"
             "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n"
             "[pair base-scd code]\ndecoder = scd\n"
             "file = " SCDB_DATA_DIR "/pairs/base__code.safetensors\n"
             "fidelity = initial:8\n"
             "[codebook base-scd8]\nkind = scd\nmodel = base\ncodes_dtype = int8\n"
             "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n"
             "[pair base-scd8 code]\ndecoder = scd\n"
             "file = " SCDB_DATA_DIR "/pairs/base__code.safetensors\n"
             "[codebook base-scdt]\nkind = scd\nmodel = base\n"
             "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n"
             "[pair base-scdt code]\ndecoder = scd\n"
             "file = " SCDB_DATA_DIR "/pairs/base__code.safetensors\n"
             "fidelity = tail:100\n");
    if (bp_start(&bp, SCDB_BROKER_BIN, ini)) return -1;
    if (scdb_model_load(SCDB_DATA_DIR "/models/code", &cons_model, err, sizeof err)) return -1;
    put_prefix("base-scd8");
    put_prefix("base-scd");
    put_prefix("base-scdt");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!have_family) return 0;
    scdb_model_free(&cons_model);
    bp_cleanup(&bp);
    return 0;
}

#define NEED_FAMILY()                                                                    \
    do {                                                                                 \
        if (!have_family) {                                                              \
            print_message("skipped: no model family under " SCDB_DATA_DIR "\n");        \
            skip();                                                                      \
        }                                                                                \
    } while (0)

/* a deterministic scorer: token i scores (i * 37) % P */
static int fake_score(void *arg, const scdb_kv_cache *c, int slot0, int n, const int32_t *t,
                      float *s)
{
    (void)arg, (void)c, (void)slot0, (void)t;
    for (int i = 0; i < n; i++) s[i] = (float)((i * 37) % P);
    return 0;
}

static int failing_score(void *arg, const scdb_kv_cache *c, int slot0, int n, const int32_t *t,
                         float *s)
{
    (void)arg, (void)c, (void)slot0, (void)n, (void)t, (void)s;
    return -1;
}

static int is_chosen(const int *want, int n, int i)
{
    for (int j = 0; j < n; j++)
        if (want[j] == i) return 1;
    return 0;
}

/* One setting through scdb_get_recompute: exactly `want` (ascending prefix
 * indices) taken out, every other slot the plain get's. */
static void check_policy(scdb *h, const scdb_kv_cache *ref, scdb_recompute rc,
                         scdb_recompute_score_fn score, const int *want, int n_want)
{
    scdb_arena *a = NULL;
    scdb_get_recompute_opts o;
    scdb_get_recompute_result r = {.size = sizeof r};
    char name[48];
    scdb_kv_cache *c;
    int d;

    scdb_recompute_format(&rc, name, sizeof name);
    assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
    scdb_get_recompute_init(&o);
    o.recompute = rc;
    o.score = score;
    assert_int_equal(scdb_get_recompute(h, toks, P, a, 0, 0, &o, &r), SCDB_OK);
    print_message("%s: %u tokens recomputed, cache %u slots\n", name, r.n_recompute, r.get.cache_n);
    assert_int_equal(r.get.tokens_written, P);
    assert_int_equal(r.n_recompute, n_want);
    assert_int_equal(r.from_default, 0);
    assert_int_equal(r.next_pos, P);
    assert_int_equal(r.applied.policy, rc.policy);
    for (int i = 0; i < n_want; i++) {
        assert_int_equal(r.pos[i], want[i]);
        assert_int_equal(r.tokens[i], toks[want[i]]);
    }
    c = scdb_arena_cache(a);
    assert_int_equal(c->n, P - n_want);
    assert_int_equal(r.get.cache_n, P - n_want);
    d = scdb_kv_dim(c);
    for (int i = 0, s = 0; i < P; i++) {
        if (is_chosen(want, n_want, i)) continue;
        assert_int_equal(c->pos[s], i);
        for (int l = 0; l < c->n_layers; l++) {
            assert_memory_equal(scdb_kv_k(c, l, s), scdb_kv_k(ref, l, i), (size_t)d * sizeof(float));
            assert_memory_equal(scdb_kv_v(c, l, s), scdb_kv_v(ref, l, i), (size_t)d * sizeof(float));
        }
        s++;
    }
    scdb_arena_free(&a);
}

static void test_policies_choose(void **state)
{
    scdb_arena *ra = NULL;
    scdb_get_result gr;
    scdb_kv_cache *ref;
    int want[P], n;
    (void)state;
    NEED_FAMILY();
    scdb *h = connect_as(SCDB_CONSUMER, "code", "base-scd8");
    /* the plain get: no recompute, whatever the registration's default */
    assert_int_equal(scdb_arena_new(h, P, &ra), SCDB_OK);
    assert_int_equal(scdb_get(h, toks, P, ra, 0, 0, &gr), SCDB_OK);
    assert_int_equal(gr.tokens_written, P);
    ref = scdb_arena_cache(ra);
    assert_int_equal(ref->n, P);

    for (int i = 0; i < 16; i++) want[i] = P - 16 + i;                  /* tail:16 */
    check_policy(h, ref, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 16, 0}, NULL, want, 16);
    for (int i = 0; i < 8; i++) want[i] = i;                            /* initial:8 */
    check_policy(h, ref, (scdb_recompute){SCDB_RECOMPUTE_INITIAL, 8, 0}, NULL, want, 8);
    n = (int)ceil(0.1 * P);                                             /* tail:10% */
    for (int i = 0; i < n; i++) want[i] = P - n + i;
    check_policy(h, ref, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 0.1f}, NULL, want, n);
    /* selective:20 with scores (i * 37) % P: the 20 highest are the i with
     * (i * 37) % P in [172, 192) */
    n = 0;
    for (int i = 0; i < P; i++)
        if ((i * 37) % P >= P - 20) want[n++] = i;
    assert_int_equal(n, 20);
    check_policy(h, ref, (scdb_recompute){SCDB_RECOMPUTE_SELECTIVE, 20, 0}, fake_score, want, 20);
    /* 0 tokens and none: nothing taken out */
    check_policy(h, ref, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 0}, NULL, want, 0);
    check_policy(h, ref, (scdb_recompute){SCDB_RECOMPUTE_NONE, 0, 0}, NULL, want, 0);
    /* the prefix itself: tokens of the whole prompt asked, a count up to
     * n_tokens is fine, clamped to what was restored */
    {
        scdb_arena *a = NULL;
        scdb_get_recompute_opts o;
        scdb_get_recompute_result r = {.size = sizeof r};
        scdb_get_recompute_init(&o);
        o.recompute = (scdb_recompute){SCDB_RECOMPUTE_INITIAL, P + C, 0};
        assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
        assert_int_equal(scdb_get_recompute(h, toks, P + C, a, 0, 0, &o, &r), SCDB_OK);
        assert_int_equal(r.get.tokens_written, P);
        assert_int_equal(r.n_recompute, P);
        assert_int_equal(scdb_arena_cache(a)->n, 0);
        scdb_arena_free(&a);
    }
    scdb_arena_free(&ra);
    scdb_close(&h);
}

/* own prefill of the prefix and the continuation: logits [C][V] */
static void own_logits(float *logits)
{
    scdb_kv_cache *kv = NULL;
    assert_int_equal(scdb_model_cache_new(cons_model, P + C, &kv), SCDB_OK);
    assert_int_equal(scdb_model_forward(cons_model, toks, NULL, P, kv, NULL, NULL), SCDB_OK);
    assert_int_equal(scdb_model_forward(cons_model, toks + P, NULL, C, kv, logits, NULL), SCDB_OK);
    scdb_kv_cache_free(&kv);
}

static double restore_and_score(scdb *h, scdb_recompute rc, const float *own, float *logits,
                                scdb_engine_restore_result *rr)
{
    scdb_arena *a = NULL;
    scdb_engine_restore_opts o;
    scdb_kv_cache *c;
    const int V = scdb_model_cfg(cons_model)->vocab_size;
    double worst = 0;

    assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
    scdb_engine_restore_init(&o);
    o.recompute = rc;
    assert_int_equal(scdb_engine_restore(h, cons_model, toks, P, a, 0, &o, rr), SCDB_OK);
    c = scdb_arena_cache(a);
    assert_int_equal(c->n, P);
    for (int i = 0; i < P; i++) assert_int_equal(c->pos[i], i);   /* position order */
    /* the continuation as after an own prefill: positions continue */
    assert_int_equal(scdb_model_forward(cons_model, toks + P, NULL, C, c, logits, NULL), SCDB_OK);
    for (size_t i = 0; i < (size_t)C * V; i++) {
        double dd = fabs((double)logits[i] - own[i]);
        if (dd > worst) worst = dd;
    }
    scdb_arena_free(&a);
    return worst;
}

static void test_recompute_all_is_own_prefill(void **state)
{
    const int V = 256;
    float *own = malloc((size_t)C * V * sizeof *own), *lg = malloc((size_t)C * V * sizeof *lg);
    scdb_engine_restore_result rr;
    double scale = 0, dn;
    (void)state;
    NEED_FAMILY();
    assert_int_equal(scdb_model_cfg(cons_model)->vocab_size, V);
    scdb *h = connect_as(SCDB_CONSUMER, "code", "base-scd8");
    own_logits(own);
    for (size_t i = 0; i < (size_t)C * V; i++) scale = fmax(scale, fabs(own[i]));

    static const scdb_recompute all[] = {{SCDB_RECOMPUTE_TAIL, 0, 1.0f},
                                         {SCDB_RECOMPUTE_INITIAL, P, 0},
                                         {SCDB_RECOMPUTE_SELECTIVE, 0, 1.0f}};
    for (int k = 0; k < 3; k++) {
        char name[48];
        scdb_recompute_format(&all[k], name, sizeof name);
        double d = restore_and_score(h, all[k], own, lg, &rr);
        print_message("%s: every token recomputed: max |logit diff| to own prefill %.3g (max "
                      "|logit| %.3g)\n", name, d, scale);
        assert_int_equal(rr.recomputed, P);
        assert_int_equal(rr.restored, 0);
        assert_true(d <= 1e-4 * (1.0 + scale));
    }
    /* nothing recomputed: the decoded prefix, measurably off (so the test
     * above is not vacuous) */
    dn = restore_and_score(h, (scdb_recompute){SCDB_RECOMPUTE_NONE, 0, 0}, own, lg, &rr);
    print_message("none: max |logit diff| %.3g\n", dn);
    assert_true(dn > 1e-2);
    /* part of it, each policy: the cache is the prefix's, in order */
    static const scdb_recompute part[] = {{SCDB_RECOMPUTE_TAIL, 32, 0},
                                          {SCDB_RECOMPUTE_INITIAL, 16, 0},
                                          {SCDB_RECOMPUTE_SELECTIVE, 0, 0.25f}};
    for (int k = 0; k < 3; k++) {
        char name[48];
        scdb_recompute_format(&part[k], name, sizeof name);
        double d = restore_and_score(h, part[k], own, lg, &rr);
        print_message("%s: %d recomputed, max |logit diff| %.3g\n", name, rr.recomputed, d);
        assert_int_equal(rr.recomputed, scdb_recompute_count(&part[k], P));
        assert_int_equal(rr.restored + rr.recomputed, P);
    }
    scdb_close(&h);
    free(own);
    free(lg);
}

static void expect_refused(scdb *h, scdb_recompute rc, scdb_recompute_score_fn score,
                           size_t n_tokens, scdb_err want, const char *words)
{
    scdb_arena *a = NULL;
    scdb_get_recompute_opts o;
    scdb_get_recompute_result r = {.size = sizeof r};
    assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
    scdb_get_recompute_init(&o);
    o.recompute = rc;
    o.score = score;
    assert_int_equal(scdb_get_recompute(h, toks, n_tokens, a, 0, 0, &o, &r), want);
    print_message("refused: %s\n", scdb_last_error(h));
    assert_non_null(strstr(scdb_last_error(h), words));
    /* a bad setting is refused before the get; a failed scorer leaves the
     * whole restored prefix */
    assert_int_equal(scdb_arena_cache(a)->n, score == failing_score ? P : 0);
    scdb_arena_free(&a);
}

static void test_bad_settings(void **state)
{
    scdb_recompute r;
    char err[200];
    (void)state;
    /* the text form */
    assert_int_equal(scdb_recompute_parse("tail:32", &r, err, sizeof err), SCDB_OK);
    assert_true(r.policy == SCDB_RECOMPUTE_TAIL && r.tokens == 32 && r.fraction == 0.0f);
    assert_int_equal(scdb_recompute_parse("selective:15%", &r, err, sizeof err), SCDB_OK);
    assert_true(r.policy == SCDB_RECOMPUTE_SELECTIVE && fabsf(r.fraction - 0.15f) < 1e-7f);
    assert_int_equal(scdb_recompute_parse("48", &r, err, sizeof err), SCDB_OK);
    assert_true(r.policy == SCDB_RECOMPUTE_TAIL && r.tokens == 48);
    assert_int_equal(scdb_recompute_parse("exact", &r, err, sizeof err), SCDB_OK);
    assert_true(r.policy == SCDB_RECOMPUTE_TAIL && r.fraction == 1.0f);
    assert_int_equal(scdb_recompute_parse("fast", &r, err, sizeof err), SCDB_OK);
    assert_int_equal(r.policy, SCDB_RECOMPUTE_NONE);
    assert_int_equal(scdb_recompute_parse("pair", &r, err, sizeof err), SCDB_OK);
    assert_int_equal(r.policy, SCDB_RECOMPUTE_DEFAULT);
    assert_int_equal(scdb_recompute_parse("exact-top1", &r, err, sizeof err), SCDB_OK);
    assert_int_equal(r.policy, SCDB_RECOMPUTE_DEFAULT);
    static const char *bad[][2] = {{"bogus:3", "unknown policy"}, {"tail:-3", "count"},
                                   {"tail:", "needs a count"},    {"tail", "needs a count"},
                                   {"tail:0%", "percentage"},     {"tail:101%", "percentage"},
                                   {"tail:3x", "count"},          {"none:3", "takes no count"},
                                   {"default:2", "takes no count"}, {"", "unknown policy"},
                                   {"tail:1e3", "count"},         {"selective:nan%", "percentage"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(scdb_recompute_parse(bad[i][0], &r, err, sizeof err), SCDB_EINVAL);
        if (!strstr(err, bad[i][1])) print_message("'%s': %s\n", bad[i][0], err);
        assert_non_null(strstr(err, bad[i][1]));
    }
    {   /* format then parse gives the setting back */
        static const scdb_recompute rt[] = {{SCDB_RECOMPUTE_INITIAL, 7, 0},
                                            {SCDB_RECOMPUTE_SELECTIVE, 0, 0.125f},
                                            {SCDB_RECOMPUTE_NONE, 0, 0}};
        for (int i = 0; i < 3; i++) {
            char t[48];
            scdb_recompute_format(&rt[i], t, sizeof t);
            assert_int_equal(scdb_recompute_parse(t, &r, err, sizeof err), SCDB_OK);
            assert_true(r.policy == rt[i].policy && r.tokens == rt[i].tokens &&
                        fabsf(r.fraction - rt[i].fraction) < 1e-6f);
        }
    }
    /* choosing without a scorer, or for default */
    {
        int idx[8], n = -1;
        scdb_recompute s = {SCDB_RECOMPUTE_SELECTIVE, 2, 0}, dflt = {SCDB_RECOMPUTE_DEFAULT, 0, 0};
        assert_int_equal(scdb_recompute_select(&s, 8, NULL, idx, &n), SCDB_EINVAL);
        assert_int_equal(scdb_recompute_select(&dflt, 8, NULL, idx, &n), SCDB_EINVAL);
        float sc[8] = {1, NAN, 3, 3, 0, -1, 2, 0};   /* ties: the later token; NaN lowest */
        assert_int_equal(scdb_recompute_select(&s, 8, sc, idx, &n), SCDB_OK);
        assert_int_equal(n, 2);
        assert_int_equal(idx[0], 2);
        assert_int_equal(idx[1], 3);
        s.tokens = 1;
        assert_int_equal(scdb_recompute_select(&s, 8, sc, idx, &n), SCDB_OK);
        assert_int_equal(idx[0], 3);
    }
    NEED_FAMILY();
    /* through the call, by name, nothing fetched */
    scdb *h = connect_as(SCDB_CONSUMER, "code", "base-scd8");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_TAIL, P + 1, 0}, NULL, P, SCDB_ERANGE,
                   "recompute.tokens 193 is beyond the prefix's 192 tokens");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_TAIL, -1, 0}, NULL, P, SCDB_EINVAL,
                   "recompute.tokens -1");
    expect_refused(h, (scdb_recompute){(scdb_recompute_policy)99, 4, 0}, NULL, P, SCDB_EINVAL,
                   "recompute.policy 99");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 1.5f}, NULL, P, SCDB_EINVAL,
                   "recompute.fraction");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, NAN}, NULL, P, SCDB_EINVAL,
                   "recompute.fraction");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 4, 0.5f}, NULL, P, SCDB_EINVAL,
                   "both set");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_NONE, 4, 0}, NULL, P, SCDB_EINVAL,
                   "takes no count");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_DEFAULT, 4, 0}, NULL, P, SCDB_EINVAL,
                   "takes no count");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_SELECTIVE, 4, 0}, NULL, P, SCDB_EINVAL,
                   "scorer");
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_SELECTIVE, 4, 0}, failing_score, P,
                   SCDB_EINVAL, "scorer failed");
    scdb_close(&h);
}

/* The registration's default: the config's `fidelity` for base-scd -> code
 * ("config"), the pair file's for base-scd8 -> code (none, or what the
 * shipped pair stores: "pair"); a request's DEFAULT uses it, a plain get
 * never recomputes. */
static void test_default(void **state)
{
    scdb_recompute d;
    char src[16];
    scdb_arena *a = NULL;
    scdb_get_recompute_opts o;
    scdb_get_recompute_result r = {.size = sizeof r};
    scdb_get_result gr;
    (void)state;
    NEED_FAMILY();
    scdb *h = connect_as(SCDB_CONSUMER, "code", "base-scd");
    assert_int_equal(scdb_recompute_default(h, &d, src), SCDB_OK);
    assert_int_equal(d.policy, SCDB_RECOMPUTE_INITIAL);
    assert_int_equal(d.tokens, 8);
    assert_string_equal(src, "config");
    assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
    assert_int_equal(scdb_get(h, toks, P, a, 0, 0, &gr), SCDB_OK);   /* old call: no recompute */
    assert_int_equal(scdb_arena_cache(a)->n, P);
    scdb_arena_cache(a)->n = 0;
    scdb_get_recompute_init(&o);                    /* DEFAULT */
    assert_int_equal(scdb_get_recompute(h, toks, P, a, 0, 0, &o, &r), SCDB_OK);
    assert_int_equal(r.from_default, 1);
    assert_int_equal(r.n_recompute, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(r.pos[i], i);
    assert_int_equal(scdb_arena_cache(a)->n, P - 8);
    scdb_arena_free(&a);
    scdb_close(&h);

    h = connect_as(SCDB_CONSUMER, "code", "base-scd8");
    assert_int_equal(scdb_recompute_default(h, &d, src), SCDB_OK);
    print_message("base-scd8 -> code default: %s (%s)\n", scdb_recompute_policy_name(d.policy),
                  src[0] ? src : "none");
    assert_true(d.policy == SCDB_RECOMPUTE_NONE ? src[0] == 0 : !strcmp(src, "pair"));
    scdb_close(&h);
}

/* The broker config's `fidelity` ([pair] and [consumers]): a setting, or
 * "pair" (the pair file's); anything else is refused by name at load. */
static void test_config_fidelity(void **state)
{
    char path[] = "/tmp/test_recompute_cfg.XXXXXX", err[512];
    static const char *good[] = {"tail:16", "selective:15%", "pair", "exact-top1", "exact", "32"};
    static const char *badv[] = {"bogus", "tail:-1", "default:3", "tail:200%", ""};
    (void)state;
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 11; i++) {
            const char *v = i < 6 ? good[i] : badv[i - 6];
            scdb_broker_config c;
            FILE *f = fopen(path, "w");
            assert_non_null(f);
            fprintf(f, g ? "[consumers fleet]\ndirs = /nonexistent/*\nfidelity = %s\n"
                         : "[pair cb m]\nfidelity = %s\n", v);
            fclose(f);
            scdb_broker_config_defaults(&c);
            err[0] = 0;
            scdb_err e = scdb_broker_config_load(&c, path, err, sizeof err);
            if (i < 6) {
                assert_int_equal(e, SCDB_OK);
                assert_string_equal(g ? c.groups[0].fidelity : c.pairs[0].fidelity, v);
            } else {
                assert_int_equal(e, SCDB_EFORMAT);
                assert_non_null(strstr(err, "fidelity"));
            }
            scdb_broker_config_clear(&c);
        }
    unlink(path);
}

/* A broker's hello default is checked before it is used: a bad value from
 * the wire (an unknown policy, DEFAULT, a count and a fraction both, a
 * fraction out of range, a count past int) is refused and none used. */
static void test_wire_default(void **state)
{
    Scdb__Recompute w = SCDB__RECOMPUTE__INIT;
    scdb_recompute r;
    char why[160];
    (void)state;
    assert_int_equal(cl_recompute_from_wire(NULL, &r, why, sizeof why), SCDB_OK);
    assert_int_equal(r.policy, SCDB_RECOMPUTE_NONE);
    w.policy = SCDB__RECOMPUTE_POLICY__RECOMPUTE_TAIL;
    w.tokens = 32;
    assert_int_equal(cl_recompute_from_wire(&w, &r, why, sizeof why), SCDB_OK);
    assert_true(r.policy == SCDB_RECOMPUTE_TAIL && r.tokens == 32);
    static const struct { int policy; uint32_t tokens; float fraction; const char *words; } bad[] = {
        {99, 4, 0, "recompute.policy 99"},
        {SCDB_RECOMPUTE_DEFAULT, 0, 0, "default"},
        {SCDB_RECOMPUTE_TAIL, 4, 0.5f, "both set"},
        {SCDB_RECOMPUTE_TAIL, 0, 1.5f, "recompute.fraction"},
        {SCDB_RECOMPUTE_TAIL, 0, -0.5f, "recompute.fraction"},
        {SCDB_RECOMPUTE_TAIL, 0x80000000u, 0, "recompute.tokens -1"},
        {SCDB_RECOMPUTE_NONE, 3, 0, "takes no count"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        w.policy = (Scdb__RecomputePolicy)bad[i].policy;
        w.tokens = bad[i].tokens;
        w.fraction = bad[i].fraction;
        why[0] = 0;
        assert_int_equal(cl_recompute_from_wire(&w, &r, why, sizeof why), SCDB_EINVAL);
        assert_int_equal(r.policy, SCDB_RECOMPUTE_NONE);
        if (!strstr(why, bad[i].words)) print_message("%zu: %s\n", i, why);
        assert_non_null(strstr(why, bad[i].words));
    }
    w.fraction = NAN;
    w.policy = SCDB__RECOMPUTE_POLICY__RECOMPUTE_TAIL;
    w.tokens = 0;
    assert_int_equal(cl_recompute_from_wire(&w, &r, why, sizeof why), SCDB_EINVAL);
}

/* A percentage recomputes exactly its share of the prefix: the float of
 * "10%" (0.100000001) times 320 is not 32 but a hair above, and the ceiling
 * of that was 33.  The text is plain decimal: a sign, an exponent, hex or a
 * percentage whose fraction is 0 as a float (recompute nothing, against
 * the at-least-one) is refused.  A setting's text parses back to it. */
static void test_text_exact(void **state)
{
    static const int Ps[] = {1, 8, 20, 40, 100, 192, 320, 448, 640, 1000, 4096, 100003};
    scdb_recompute r, back;
    char err[200], in[96], t[96];
    (void)state;
    for (int pct = 1; pct <= 100; pct++) {
        snprintf(in, sizeof in, "tail:%d%%", pct);
        assert_int_equal(scdb_recompute_parse(in, &r, err, sizeof err), SCDB_OK);
        for (size_t i = 0; i < sizeof Ps / sizeof Ps[0]; i++) {
            int want = (int)(((int64_t)pct * Ps[i] + 99) / 100);
            if (scdb_recompute_count(&r, Ps[i]) != want)
                print_message("%s of %d: %d, not %d\n", in, Ps[i], scdb_recompute_count(&r, Ps[i]),
                              want);
            assert_int_equal(scdb_recompute_count(&r, Ps[i]), want);
        }
    }
    static const struct { const char *text; int np, want; } dec[] = {
        {"tail:12.5%", 8, 1},         {"tail:12.5%", 16, 2},     {"selective:33.33%", 300, 100},
        {"initial:0.05%", 20, 1},     {"tail:0.001%", 100000, 1}, {"tail:0.00101%", 100000, 2},
        {"tail:99.99999%", 1000, 1000}, {"tail:50%", INT32_MAX, 1073741824},
        {"tail:.5%", 400, 2},         {"tail:5.%", 40, 2},       {"tail:0.0001%", 50, 1},
        {"exact", 77, 77},
    };
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) {
        assert_int_equal(scdb_recompute_parse(dec[i].text, &r, err, sizeof err), SCDB_OK);
        if (scdb_recompute_count(&r, dec[i].np) != dec[i].want)
            print_message("%s of %d: %d\n", dec[i].text, dec[i].np, scdb_recompute_count(&r, dec[i].np));
        assert_int_equal(scdb_recompute_count(&r, dec[i].np), dec[i].want);
    }
    static const char *bad[] = {"tail:+5%", "+5%", "tail:1e1%", "1e2%", "tail:0x10%",
                                "tail:1e-50%", "tail:1e-300%", "tail:0x1p-200%", "tail:inf%",
                                "tail:.%", "tail:1.2.3%", "tail:-5%", "tail: 5%", "tail:5 %",
                                "tail:\t5%", "tail:%", "tail:0.0%"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (scdb_recompute_parse(bad[i], &r, err, sizeof err) != SCDB_EINVAL)
            print_message("'%s' taken\n", bad[i]);
        assert_int_equal(scdb_recompute_parse(bad[i], &r, err, sizeof err), SCDB_EINVAL);
        assert_non_null(strstr(err, "percentage"));
    }
    /* digits, but a fraction below the smallest float; below 0.0001% */
    snprintf(in, sizeof in, "tail:0.%060d1%%", 0);
    err[0] = 0;
    assert_int_equal(scdb_recompute_parse(in, &r, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "too small"));
    assert_int_equal(scdb_recompute_parse("tail:0.00009%", &r, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "too small"));
    assert_int_equal(scdb_recompute_parse("tail:0.0001%", &r, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_recompute_check(&(scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 1e-7f}, -1, err,
                                          sizeof err), SCDB_EINVAL);

    /* the text gives the very float back, in the fewest digits that do */
    assert_int_equal(scdb_recompute_parse("tail:12.3456789%", &r, err, sizeof err), SCDB_OK);
    scdb_recompute_format(&r, t, sizeof t);
    assert_int_equal(scdb_recompute_parse(t, &back, err, sizeof err), SCDB_OK);
    assert_true(back.fraction == r.fraction);
    scdb_recompute_format(&(scdb_recompute){SCDB_RECOMPUTE_SELECTIVE, 0, 0.15f}, t, sizeof t);
    assert_string_equal(t, "selective:15%");
    scdb_recompute_format(&(scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 0.1f}, t, sizeof t);
    assert_string_equal(t, "tail:10%");
    /* floats of [1e-6, 1] across every binade (every 7th just below 1),
     * and the edges: the smallest, ones whose %g has an exponent; every
     * text fits the 48 bytes settings are formatted into */
    static const float edge[] = {SCDB_RECOMPUTE_MIN_FRACTION, 1.5e-6f, 1e-5f, 0.123456789f,
                                 0.999999940f, 1.0f};
    const int n_edge = (int)(sizeof edge / sizeof edge[0]);
    for (int i = 0; i < n_edge + 4096; i++) {
        uint32_t u = i % 7 ? (uint32_t)(i - n_edge) * 0x3f801u + 1 : 0x3f800000u - (uint32_t)i;
        float f;
        memcpy(&f, &u, sizeof f);
        if (i < n_edge) f = edge[i];
        assert_true(f > 0.0f && f <= 1.0f);
        if (f < SCDB_RECOMPUTE_MIN_FRACTION) continue;
        r = (scdb_recompute){SCDB_RECOMPUTE_SELECTIVE, 0, f};
        assert_true(scdb_recompute_format(&r, t, sizeof t) < 48);
        if (scdb_recompute_parse(t, &back, err, sizeof err) || back.fraction != f)
            print_message("%.9g: '%s' parses to %.9g\n", (double)f, t, (double)back.fraction);
        assert_int_equal(scdb_recompute_parse(t, &back, err, sizeof err), SCDB_OK);
        assert_true(back.policy == r.policy && back.fraction == f);
    }
}

/* The registration's default is no request of the caller's: base-scdt ->
 * code has the config's tail:100, and a prompt shorter than 100 tokens is
 * served (the default clamped to what was restored), where a request's own
 * tail:100 is still refused for it. */
static void test_default_clamped(void **state)
{
    scdb_recompute d;
    char src[16];
    (void)state;
    NEED_FAMILY();
    scdb *h = connect_as(SCDB_CONSUMER, "code", "base-scdt");
    assert_int_equal(scdb_recompute_default(h, &d, src), SCDB_OK);
    assert_true(d.policy == SCDB_RECOMPUTE_TAIL && d.tokens == 100 && !strcmp(src, "config"));
    static const int ns[] = {P, 128, 64, 40};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        scdb_arena *a = NULL;
        scdb_get_recompute_opts o;
        scdb_get_recompute_result r = {.size = sizeof r};
        int w, nr;
        assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
        scdb_get_recompute_init(&o);
        scdb_err e = scdb_get_recompute(h, toks, (size_t)ns[k], a, 0, 0, &o, &r);
        if (e) print_message("n %d: %s\n", ns[k], scdb_last_error(h));
        assert_int_equal(e, SCDB_OK);
        w = (int)r.get.tokens_written;
        nr = w < 100 ? w : 100;
        print_message("default tail:100, %d tokens asked: %d restored, %u recomputed\n", ns[k], w,
                      r.n_recompute);
        assert_int_equal(w, ns[k] / 64 * 64);
        assert_int_equal(r.from_default, 1);
        assert_int_equal(r.n_recompute, nr);
        for (int i = 0; i < nr; i++) assert_int_equal(r.pos[i], w - nr + i);
        assert_int_equal(scdb_arena_cache(a)->n, w - nr);
        scdb_arena_free(&a);
    }
    /* a request's count is still checked against what it asks for */
    expect_refused(h, (scdb_recompute){SCDB_RECOMPUTE_TAIL, 100, 0}, NULL, 64, SCDB_ERANGE,
                   "recompute.tokens 100 is beyond the prefix's 64 tokens");
    {   /* and the engine's restore with the default: every token recomputed */
        scdb_arena *a = NULL;
        scdb_engine_restore_result rr;
        assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
        assert_int_equal(scdb_engine_restore(h, cons_model, toks, 64, a, 0, NULL, &rr), SCDB_OK);
        assert_int_equal(rr.recomputed, 64);
        assert_int_equal(rr.restored, 0);
        assert_int_equal(scdb_arena_cache(a)->n, 64);
        for (int i = 0; i < 64; i++) assert_int_equal(scdb_arena_cache(a)->pos[i], i);
        scdb_arena_free(&a);
    }
    scdb_close(&h);
}

/* What the engine's forward would refuse is refused before the get (the
 * get takes the chosen tokens out of the arena: a forward failing after it
 * left their slots missing), and the arena is as it was. */
static void test_restore_refused(void **state)
{
    scdb_engine_restore_result rr;
    scdb_engine_restore_opts o;
    scdb_arena *a = NULL;
    scdb_kv_cache *c;
    int32_t bad[P];
    (void)state;
    NEED_FAMILY();
    scdb *h = connect_as(SCDB_CONSUMER, "code", "base-scd");     /* default initial:8 */
    scdb_engine_restore_init(&o);
    /* an arena of 128 slots for 192 tokens */
    assert_int_equal(scdb_arena_new(h, 128, &a), SCDB_OK);
    c = scdb_arena_cache(a);
    assert_int_equal(scdb_engine_restore(h, cons_model, toks, P, a, 0, &o, &rr), SCDB_EFULL);
    assert_int_equal(c->n, 0);
    assert_int_equal(rr.rc.get.tokens_written, 0);                /* nothing fetched */
    /* 100 slots the caller holds already: 28 free */
    c->n = 100;
    for (int i = 0; i < 100; i++) c->pos[i] = i;
    assert_int_equal(scdb_engine_restore(h, cons_model, toks, 64, a, 100, &o, &rr), SCDB_EFULL);
    assert_int_equal(c->n, 100);
    scdb_arena_free(&a);
    /* a token the model has no embedding for, after two restorable blocks */
    memcpy(bad, toks, sizeof bad);
    bad[P - 1] = scdb_model_cfg(cons_model)->vocab_size;
    assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
    c = scdb_arena_cache(a);
    for (int k = 0; k < 2; k++) {
        o.recompute = k ? (scdb_recompute){SCDB_RECOMPUTE_SELECTIVE, 8, 0}
                        : (scdb_recompute){SCDB_RECOMPUTE_DEFAULT, 0, 0};
        assert_int_equal(scdb_engine_restore(h, cons_model, bad, P, a, 0, &o, &rr), SCDB_EINVAL);
        assert_int_equal(c->n, 0);
        assert_int_equal(rr.rc.get.tokens_written, 0);
    }
    /* positions past INT32_MAX */
    scdb_engine_restore_init(&o);
    assert_int_equal(scdb_engine_restore(h, cons_model, toks, P, a, INT32_MAX - 100, &o, &rr),
                     SCDB_EINVAL);
    assert_int_equal(c->n, 0);
    /* and the same arena restores fine afterwards */
    assert_int_equal(scdb_engine_restore(h, cons_model, toks, P, a, 0, &o, &rr), SCDB_OK);
    assert_int_equal(rr.recomputed, 8);
    assert_int_equal(c->n, P);
    for (int i = 0; i < P; i++) assert_int_equal(c->pos[i], i);
    scdb_arena_free(&a);
    {   /* scdb_engine_recompute_cache: refused with the cache whole */
        scdb_kv_cache *kv = NULL;
        scdb_recompute rc = {SCDB_RECOMPUTE_INITIAL, 8, 0};
        int nr = -1;
        assert_int_equal(scdb_model_cache_new(cons_model, P, &kv), SCDB_OK);
        assert_int_equal(scdb_model_forward(cons_model, toks, NULL, P, kv, NULL, NULL), SCDB_OK);
        assert_int_equal(scdb_engine_recompute_cache(cons_model, kv, 0, P, bad, &rc, &nr, NULL),
                         SCDB_EINVAL);
        assert_int_equal(kv->n, P);
        for (int i = 0; i < P; i++) assert_int_equal(kv->pos[i], i);
        scdb_kv_cache_free(&kv);
    }
    scdb_close(&h);
}

/* The CacheBlend scorer: a token whose restored KV is NaN or inf is the
 * most broken, first to recompute (a NaN score ranked last); a LoRA adapter
 * loaded low-rank (no single weight matrix: model.h) scores as the same
 * adapter merged. */
static void test_cacheblend_scorer(void **state)
{
    static float sc[P], sm[P];
    scdb_kv_cache *kv = NULL, *kv2 = NULL;
    scdb_recompute two = {SCDB_RECOMPUTE_SELECTIVE, 2, 0};
    int idx[P], n = -1;
    (void)state;
    NEED_FAMILY();
    /* the "restored" prefix: the code model's own KV, a raw reuse for an
     * adapter of base */
    assert_int_equal(scdb_model_cache_new(cons_model, P, &kv), SCDB_OK);
    assert_int_equal(scdb_model_forward(cons_model, toks, NULL, P, kv, NULL, NULL), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons_model, P, &kv2), SCDB_OK);
    assert_int_equal(scdb_model_forward(cons_model, toks, NULL, P, kv2, NULL, NULL), SCDB_OK);
    scdb_kv_k(kv2, 1, 5)[0] = NAN;
    scdb_kv_v(kv2, 1, 9)[3] = INFINITY;
    assert_int_equal(scdb_engine_score_cacheblend((void *)cons_model, kv2, 0, P, toks, sc), 0);
    print_message("NaN K: score %g, inf V: score %g\n", (double)sc[5], (double)sc[9]);
    assert_true(isinf(sc[5]) && sc[5] > 0);
    assert_true(isinf(sc[9]) && sc[9] > 0);
    for (int i = 0; i < P; i++)
        if (i != 5 && i != 9) assert_true(isfinite(sc[i]));
    assert_int_equal(scdb_recompute_select(&two, P, sc, idx, &n), SCDB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(idx[0], 5);
    assert_int_equal(idx[1], 9);
    scdb_kv_cache_free(&kv2);

    if (access(SCDB_DATA_DIR "/adapters/html/adapter_model.safetensors", R_OK)) {
        print_message("no adapter under " SCDB_DATA_DIR "/adapters/html: low-rank part skipped\n");
    } else {
        scdb_model *merged = NULL, *lowrank = NULL;
        scdb_model_load_opts lo = {.models_dir = SCDB_DATA_DIR "/models", .lora = SCDB_LORA_MERGED};
        char err[256];
        double worst = 0, scale = 0;
        int nr = -1;
        assert_int_equal(scdb_model_load_ex(SCDB_DATA_DIR "/adapters/html", &lo, &merged, err,
                                            sizeof err), SCDB_OK);
        lo.lora = SCDB_LORA_LOWRANK;
        assert_int_equal(scdb_model_load_ex(SCDB_DATA_DIR "/adapters/html", &lo, &lowrank, err,
                                            sizeof err), SCDB_OK);
        assert_null(scdb_model_layer(lowrank, 1));   /* what the scorer cannot use */
        assert_int_equal(scdb_engine_score_cacheblend((void *)merged, kv, 0, P, toks, sm), 0);
        assert_int_equal(scdb_engine_score_cacheblend((void *)lowrank, kv, 0, P, toks, sc), 0);
        for (int i = 0; i < P; i++) {
            assert_true(isfinite(sc[i]));
            worst = fmax(worst, fabs((double)sc[i] - sm[i]));
            scale = fmax(scale, fabs((double)sm[i]));
        }
        print_message("low-rank vs merged adapter: max |score diff| %.3g (max score %.3g)\n",
                      worst, scale);
        assert_true(scale > 0 && worst <= 1e-3 * scale);
        /* and a selective recompute with it */
        assert_int_equal(scdb_engine_recompute_cache(lowrank, kv, 0, P, toks,
                                                     &(scdb_recompute){SCDB_RECOMPUTE_SELECTIVE,
                                                                       16, 0},
                                                     &nr, NULL),
                         SCDB_OK);
        assert_int_equal(nr, 16);
        assert_int_equal(kv->n, P);
        for (int i = 0; i < P; i++) assert_int_equal(kv->pos[i], i);
        scdb_model_free(&merged);
        scdb_model_free(&lowrank);
    }
    scdb_kv_cache_free(&kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policies_choose),
        cmocka_unit_test(test_recompute_all_is_own_prefill),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_config_fidelity),
        cmocka_unit_test(test_wire_default),
        cmocka_unit_test(test_text_exact),
        cmocka_unit_test(test_default_clamped),
        cmocka_unit_test(test_restore_refused),
        cmocka_unit_test(test_cacheblend_scorer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
