/* test_client_faults.c — allocation fault injection on every libscdb call,
 * against a real scdb-broker process (the small family of
 * tests/fuzz/seeds: raw and SCD codebooks, a learned policy).  For each
 * call and every n until it runs clean, the n-th allocation of this
 * process fails (tests/helpers/alloc_fault.h; libscdb is linked in
 * statically): the call must return SCDB_OK or a clean error (SCDB_ENOMEM,
 * or for a few calls the error the missing memory really causes), a
 * success must be a whole one (a get's KV equal to a clean get's), the
 * same handle must work again right after, and the broker must keep
 * serving with no arena or session of ours left behind.  The ASan build's
 * leak check at exit covers every fault path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_fault.h"
#include "broker_proc.h"
#include "scdb.h"
#include "scdb_common.h"
#include "wire_records.h"

#define BT WR_BLOCK_TOKENS
#define N_TOK 16

static bp_broker bp;
static const char *endpoint = bp.endpoint;
static scdb *prod, *cons, *sprod, *scons, *watch;
static int32_t stored[N_TOK];
static scdb_kv_cache *ref_raw, *ref_scd;   /* clean gets of the stored prefix */
static uint64_t seq;

/* ---------------------------------------------------------------- helpers */

static scdb_err open_handle(int role, const char *model, const char *codebook, int no_index,
                            scdb **out)
{
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 5000, .no_heartbeat = 1,
                   .name = "faults", .no_lookup_index = no_index};
    scdb_err e = scdb_connect(&o, out);
    if (e || !role) return e;
    e = scdb_register(*out, (scdb_role)role, model, codebook, NULL);
    if (e) scdb_close(out);
    return e;
}

static void fresh_tokens(int32_t *t, int n)
{
    seq++;
    for (int i = 0; i < n; i++) t[i] = (int32_t)((seq * 131 + (uint64_t)i * 7) % 256);
    t[0] = (int32_t)(seq % 256);
    t[1] = (int32_t)((seq / 256) % 256);
}

static uint8_t payload[N_TOK / BT][BT * 64];

static void fill_payload(void)
{
    for (size_t b = 0; b < N_TOK / BT; b++)
        for (size_t k = 0; k < sizeof payload[b]; k += 2) {
            payload[b][k] = (uint8_t)(k + b);
            payload[b][k + 1] = 0x30;
        }
}

static void fill_states(scdb_arena *a, int n)
{
    int layers, dim, cap;
    float *h = scdb_arena_states(a, &layers, &dim, &cap);
    assert_non_null(h);
    for (int l = 0; l < layers; l++)
        for (int t = 0; t < n; t++)
            for (int d = 0; d < dim; d++)
                h[((size_t)l * cap + t) * dim + d] = 0.1f * sinf((float)(l * 1000 + t * dim + d));
}

/* The broker holds no arena or session (of any client) and answers. */
static void broker_clean(const char *what, long n)
{
    scdb_stat st;
    assert_int_equal(scdb_stats(watch, &st), SCDB_OK);
    if (st.arenas || st.sessions)
        fail_msg("%s, allocation %ld failed: the broker still holds %llu arena(s), %llu "
                 "session(s) of ours", what, n, (unsigned long long)st.arenas,
                 (unsigned long long)st.sessions);
}

static int same_cache(const scdb_kv_cache *a, const scdb_kv_cache *b, int n)
{
    if (a->n < n || b->n < n) return 0;
    for (int l = 0; l < a->n_layers; l++)
        for (int i = 0; i < n; i++)
            if (memcmp(scdb_kv_k(a, l, i), scdb_kv_k(b, l, i), sizeof(float) * scdb_kv_dim(a)) ||
                memcmp(scdb_kv_v(a, l, i), scdb_kv_v(b, l, i), sizeof(float) * scdb_kv_dim(a)))
                return 0;
    return 1;
}

/* ---------------------------------------------------------------- the loop */

typedef struct fcase {
    const char *what;
    /* one attempt: returns the call's status; *fired whether a fault hit
     * inside the call itself (set up and clean up outside arm/disarm) */
    scdb_err (*run)(long n, int *fired);
    scdb_err also;            /* another clean error this call may give (0: none) */
} fcase;

#define ARMED(n, call, fired)                                                       \
    ({                                                                              \
        alloc_fault_arm(n);                                                         \
        scdb_err e_ = (call);                                                       \
        *(fired) = alloc_fault_fired();                                             \
        alloc_fault_disarm();                                                       \
        e_;                                                                         \
    })

static void fault_loop(const fcase *fc)
{
    long n;
    int counts[3] = {0};     /* ok, ENOMEM, also */

    for (n = 0; n < 100000; n++) {
        int fired = 0;
        scdb_err e = fc->run(n, &fired);
        if (e != SCDB_OK && e != SCDB_ENOMEM && !(fc->also && e == fc->also))
            fail_msg("%s, allocation %ld failed: %s is not a clean error", fc->what, n,
                     scdb_strerror(e));
        if (!fired && e != SCDB_OK)
            fail_msg("%s: failed (%s) with no fault", fc->what, scdb_strerror(e));
        counts[e == SCDB_OK ? 0 : e == SCDB_ENOMEM ? 1 : 2]++;
        broker_clean(fc->what, n);
        if (!fired) break;
    }
    printf("    %-26s %3ld run(s) with a failed allocation: %d ENOMEM, %d %s, %d ok\n",
           fc->what, n, counts[1], counts[2], fc->also ? scdb_strerror(fc->also) : "other",
           counts[0] - 1);
}

/* ---------------------------------------------------------------- calls */

static scdb_err c_connect(long n, int *fired)
{
    scdb *h = NULL;
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 5000, .no_heartbeat = 1};
    scdb_err e = ARMED(n, scdb_connect(&o, &h), fired);
    assert_true((e == SCDB_OK) == (h != NULL));
    scdb_close(&h);
    return e;
}

static scdb_err c_register(long n, int *fired)
{
    scdb *h = NULL;
    scdb_info info;
    scdb_err e;
    assert_int_equal(open_handle(0, NULL, NULL, 0, &h), SCDB_OK);
    e = ARMED(n, scdb_register(h, SCDB_CONSUMER, "cons", "tiny-scd", &info), fired);
    /* registered or not, the handle registers when asked again */
    assert_int_equal(scdb_register(h, SCDB_CONSUMER, "cons", "tiny-scd", &info), SCDB_OK);
    scdb_close(&h);
    return e;
}

static scdb_err c_register_heartbeat(long n, int *fired)
{
    /* with the heartbeat thread: its start is part of the call */
    scdb *h = NULL;
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 5000};
    scdb_err e;
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    e = ARMED(n, scdb_register(h, SCDB_PRODUCER, "tiny", NULL, NULL), fired);
    scdb_close(&h);
    return e;
}

static scdb_err c_ping(long n, int *fired)
{
    double rtt;
    scdb_err e = ARMED(n, scdb_ping(cons, &rtt), fired);
    assert_int_equal(scdb_ping(cons, &rtt), SCDB_OK);
    return e;
}

static scdb_err c_stats(long n, int *fired)
{
    scdb_stat st;
    return ARMED(n, scdb_stats(cons, &st), fired);
}

static scdb_err lookup_on(scdb *h, long n, int *fired)
{
    scdb_lookup_result r;
    scdb_err e = ARMED(n, scdb_lookup(h, stored, N_TOK, &r), fired);
    if (e == SCDB_OK) assert_int_equal(r.n_matched, N_TOK / BT);
    assert_int_equal(scdb_lookup(h, stored, N_TOK, &r), SCDB_OK);
    assert_int_equal(r.n_matched, N_TOK / BT);
    return e;
}

static scdb *cons_req;     /* a consumer that always asks the broker */
static scdb_err c_lookup_index(long n, int *fired) { return lookup_on(cons, n, fired); }
static scdb_err c_lookup_request(long n, int *fired) { return lookup_on(cons_req, n, fired); }

static scdb_err c_put(long n, int *fired)
{
    int32_t t[N_TOK];
    scdb_put_result r;
    scdb_lookup_result lr;
    scdb_err e;
    fresh_tokens(t, N_TOK);
    e = ARMED(n, scdb_put(prod, t, N_TOK, 0, payload, sizeof payload, &r), fired);
    if (e == SCDB_OK) {
        assert_int_equal(r.n_stored, N_TOK / BT);
        assert_int_equal(scdb_lookup(cons_req, t, N_TOK, &lr), SCDB_OK);
        assert_int_equal(lr.n_matched, N_TOK / BT);
    }
    assert_int_equal(scdb_put(prod, t, N_TOK, 0, payload, sizeof payload, NULL), SCDB_OK);
    return e;
}

static scdb_err c_put_cache(long n, int *fired)
{
    int32_t t[N_TOK];
    scdb_err e;
    fresh_tokens(t, N_TOK);
    e = ARMED(n, scdb_put_cache(prod, t, N_TOK, ref_raw, NULL), fired);
    return e;
}

static scdb_err c_delete(long n, int *fired)
{
    int32_t t[N_TOK];
    uint32_t nd = 0;
    fresh_tokens(t, N_TOK);
    assert_int_equal(scdb_put(prod, t, N_TOK, 0, payload, sizeof payload, NULL), SCDB_OK);
    return ARMED(n, scdb_delete(prod, t, N_TOK, 1, &nd), fired);
}

static scdb_err c_arena_new(long n, int *fired)
{
    scdb_arena *a = NULL;
    scdb_err e = ARMED(n, scdb_arena_new(cons, 32, &a), fired);
    assert_true((e == SCDB_OK) == (a != NULL));
    scdb_arena_free(&a);
    return e;
}

static scdb_err c_arena_free(long n, int *fired)
{
    scdb_arena *a = NULL;
    assert_int_equal(scdb_arena_new(cons, 32, &a), SCDB_OK);
    alloc_fault_arm(n);
    scdb_arena_free(&a);
    *fired = alloc_fault_fired();
    alloc_fault_disarm();
    assert_null(a);
    return SCDB_OK;
}

/* ctx: the consumer and its reference */
static scdb_err get_on(scdb *h, const scdb_kv_cache *ref, long n, int *fired)
{
    scdb_arena *a = NULL;
    scdb_get_result r;
    scdb_err e;
    assert_int_equal(scdb_arena_new(h, 32, &a), SCDB_OK);
    e = ARMED(n, scdb_get(h, stored, N_TOK, a, 0, 0, &r), fired);
    if (e == SCDB_OK) {
        assert_int_equal(r.tokens_written, N_TOK);
        assert_true(same_cache(scdb_arena_cache(a), ref, N_TOK));
    }
    scdb_arena_free(&a);
    return e;
}

static scdb_err c_get_raw(long n, int *fired) { return get_on(cons, ref_raw, n, fired); }
static scdb_err c_get_scd(long n, int *fired) { return get_on(scons, ref_scd, n, fired); }

static scdb_err c_get_copy(long n, int *fired)
{
    scdb_kv_cache *c = NULL;
    scdb_get_result r;
    scdb_err e;
    assert_int_equal(scdb_kv_cache_new(ref_raw->n_layers, ref_raw->n_kv_heads, ref_raw->head_dim,
                                       32, &c), SCDB_OK);
    e = ARMED(n, scdb_get_copy(cons, stored, N_TOK, c, 0, 0, &r), fired);
    if (e == SCDB_OK) assert_true(same_cache(c, ref_raw, N_TOK));
    scdb_kv_cache_free(&c);
    /* the handle's own arena: freed so the broker is clean between runs */
    assert_int_equal(scdb_register(cons, SCDB_CONSUMER, "tiny", NULL, NULL), SCDB_OK);
    return e;
}

static scdb_err c_states_arena(long n, int *fired)
{
    scdb_arena *a = NULL;
    scdb_err e = ARMED(n, scdb_states_arena_new(sprod, 16, &a), fired);
    assert_true((e == SCDB_OK) == (a != NULL));
    scdb_arena_free(&a);
    return e;
}

static scdb_err c_put_states(long n, int *fired)
{
    scdb_arena *a = NULL;
    int32_t t[N_TOK];
    scdb_put_result r;
    scdb_err e;
    assert_int_equal(scdb_states_arena_new(sprod, N_TOK, &a), SCDB_OK);
    fill_states(a, N_TOK);
    fresh_tokens(t, N_TOK);
    e = ARMED(n, scdb_put_states(sprod, t, N_TOK, 0, a, &r), fired);
    if (e == SCDB_OK) assert_int_equal(r.n_stored, N_TOK / BT);
    scdb_arena_free(&a);
    return e;
}

/* An arena holding the stored prefix, with a live session on it. */
static scdb_arena *prefix_arena(void)
{
    scdb_arena *a = NULL;
    assert_int_equal(scdb_arena_new(cons, 32, &a), SCDB_OK);
    assert_int_equal(scdb_get(cons, stored, N_TOK, a, 0, 0, NULL), SCDB_OK);
    return a;
}

static const scdb_session_opts sess_opts = {.budget = 8, .policy = "learned", .cadence = 4,
                                            .n_heads = 4, .window = 4};

static scdb_err c_session_open(long n, int *fired)
{
    scdb_arena *a = prefix_arena();
    scdb_session *s = NULL;
    scdb_err e = ARMED(n, scdb_session_open(a, &sess_opts, &s), fired);
    assert_true((e == SCDB_OK) == (s != NULL));
    scdb_session_close(&s);
    scdb_arena_free(&a);
    return e;
}

/* probs for one appended token: [layers][heads][1][slots] */
static float probs[2 * 4 * 64];

static scdb_err c_session_step(long n, int *fired)
{
    scdb_arena *a = prefix_arena();
    scdb_session *s = NULL;
    scdb_kv_cache *c = scdb_arena_cache(a);
    scdb_session_evict_result r;
    scdb_err e = SCDB_OK;
    assert_int_equal(scdb_session_open(a, &sess_opts, &s), SCDB_OK);
    assert_int_equal(scdb_session_add_stats(s, NULL, 0, 0), SCDB_OK);
    /* four appended tokens; the faults hit the first step, which evicts */
    for (int step = 0; step < 4 && e == SCDB_OK; step++) {
        int slot = c->n;
        for (int l = 0; l < c->n_layers; l++) {
            memset(scdb_kv_k(c, l, slot), 0, sizeof(float) * scdb_kv_dim(c));
            memset(scdb_kv_v(c, l, slot), 0, sizeof(float) * scdb_kv_dim(c));
        }
        c->pos[slot] = N_TOK + step;
        c->n++;
        for (size_t i = 0; i < SCDB_ARRAY_LEN(probs); i++) probs[i] = 1.0f / (float)c->n;
        e = step > 0 ? scdb_session_step(s, probs, 64, 1, &r)
                     : ARMED(n, scdb_session_step(s, probs, 64, 1, &r), fired);
        if (step == 0 && e == SCDB_OK) assert_true(r.evicted && r.n_kept == 8);
        assert_true(step == 0 || e == SCDB_OK);
    }
    /* the first step evicted to the budget (the get's 16 slots were over
     * it); the others appended */
    if (e == SCDB_OK) assert_int_equal(c->n, 8 + 3);
    scdb_session_close(&s);
    scdb_arena_free(&a);
    return e;
}

static scdb_err c_session_evict(long n, int *fired)
{
    scdb_arena *a = prefix_arena();
    scdb_session *s = NULL;
    scdb_session_evict_result r;
    scdb_err e;
    assert_int_equal(scdb_session_open(a, &sess_opts, &s), SCDB_OK);
    assert_int_equal(scdb_session_add_stats(s, NULL, 0, 0), SCDB_OK);
    e = ARMED(n, scdb_session_evict(s, 6, &r), fired);
    if (e == SCDB_OK) {
        assert_int_equal(r.n_kept, 6);
        assert_int_equal(scdb_arena_cache(a)->n, 6);
    }
    scdb_session_close(&s);
    scdb_arena_free(&a);
    return e;
}

static scdb_err c_session_close(long n, int *fired)
{
    scdb_arena *a = prefix_arena();
    scdb_session *s = NULL;
    assert_int_equal(scdb_session_open(a, &sess_opts, &s), SCDB_OK);
    alloc_fault_arm(n);
    scdb_session_close(&s);
    *fired = alloc_fault_fired();
    alloc_fault_disarm();
    assert_null(s);
    scdb_arena_free(&a);
    return SCDB_OK;
}

static scdb_err c_close(long n, int *fired)
{
    scdb *h = NULL;
    scdb_arena *a = NULL;
    assert_int_equal(open_handle(SCDB_CONSUMER, "tiny", NULL, 0, &h), SCDB_OK);
    assert_int_equal(scdb_arena_new(h, 16, &a), SCDB_OK);
    alloc_fault_arm(n);
    scdb_close(&h);          /* says goodbye: the broker frees the arena */
    *fired = alloc_fault_fired();
    alloc_fault_disarm();
    assert_null(h);
    return SCDB_OK;
}

/* ---------------------------------------------------------------- tests */

static void test_handle_calls(void **state)
{
    (void)state;
    const fcase cases[] = {
        {"connect", c_connect, 0},
        {"register", c_register, 0},
        {"register (heartbeat)", c_register_heartbeat, SCDB_ESYS},
        {"ping", c_ping, 0},
        {"stats", c_stats, 0},
        {"close", c_close, 0},
    };
    for (size_t i = 0; i < SCDB_ARRAY_LEN(cases); i++) fault_loop(&cases[i]);
}

static void test_block_calls(void **state)
{
    (void)state;
    const fcase cases[] = {
        {"lookup (index)", c_lookup_index, 0},
        {"lookup (request)", c_lookup_request, 0},
        {"put", c_put, 0},
        {"put_cache", c_put_cache, 0},
        {"delete", c_delete, 0},
        {"arena_new", c_arena_new, 0},
        {"arena_free", c_arena_free, 0},
        {"get (raw)", c_get_raw, 0},
        {"get (scd)", c_get_scd, 0},
        {"get_copy", c_get_copy, 0},
        {"states_arena_new", c_states_arena, 0},
        {"put_states", c_put_states, 0},
    };
    for (size_t i = 0; i < SCDB_ARRAY_LEN(cases); i++) fault_loop(&cases[i]);
}

static void test_session_calls(void **state)
{
    (void)state;
    const fcase cases[] = {
        {"session_open", c_session_open, 0},
        {"session_step (evicts)", c_session_step, 0},
        {"session_evict", c_session_evict, 0},
        {"session_close", c_session_close, 0},
    };
    for (size_t i = 0; i < SCDB_ARRAY_LEN(cases); i++) fault_loop(&cases[i]);
}

/* ---------------------------------------------------------------- setup */

static int setup(void **state)
{
    char ini[3072];
    scdb_arena *a = NULL;
    (void)state;

    snprintf(ini, sizeof ini, "heartbeat_timeout_ms = 600000\n" WR_CONFIG_FMT, SCDB_FUZZ_SEEDS,
             SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS);
    if (bp_start(&bp, SCDB_BROKER_BIN, ini)) return -1;
    if (open_handle(0, NULL, NULL, 0, &watch)) return -1;
    if (open_handle(SCDB_PRODUCER, "tiny", NULL, 0, &prod) ||
        open_handle(SCDB_CONSUMER, "tiny", NULL, 0, &cons) ||
        open_handle(SCDB_CONSUMER, "tiny", NULL, 1, &cons_req) ||
        open_handle(SCDB_PRODUCER, "tiny", "tiny-scd", 0, &sprod) ||
        open_handle(SCDB_CONSUMER, "cons", "tiny-scd", 0, &scons))
        return -1;
    fill_payload();
    for (int i = 0; i < N_TOK; i++) stored[i] = (i * 37 + 11) & 0xff;
    if (scdb_put(prod, stored, N_TOK, 0, payload, sizeof payload, NULL)) return -1;
    if (scdb_states_arena_new(sprod, N_TOK, &a)) return -1;
    fill_states(a, N_TOK);
    if (scdb_put_states(sprod, stored, N_TOK, 0, a, NULL)) return -1;
    scdb_arena_free(&a);
    {   /* references: clean gets of the stored prefix */
        const scdb_info *in = scdb_get_info(cons);
        if (scdb_kv_cache_new(in->n_layers, in->n_kv_heads, in->head_dim, 32, &ref_raw) ||
            scdb_kv_cache_new(in->n_layers, in->n_kv_heads, in->head_dim, 32, &ref_scd) ||
            scdb_get_copy(cons, stored, N_TOK, ref_raw, 0, 0, NULL) ||
            scdb_get_copy(scons, stored, N_TOK, ref_scd, 0, 0, NULL))
            return -1;
        /* the handles' own get_copy arenas go: the broker starts clean */
        if (scdb_register(cons, SCDB_CONSUMER, "tiny", NULL, NULL) ||
            scdb_register(scons, SCDB_CONSUMER, "cons", "tiny-scd", NULL))
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    scdb_kv_cache_free(&ref_raw);
    scdb_kv_cache_free(&ref_scd);
    scdb_close(&prod);
    scdb_close(&cons);
    scdb_close(&cons_req);
    scdb_close(&sprod);
    scdb_close(&scons);
    scdb_close(&watch);
    bp_cleanup(&bp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_calls),
        cmocka_unit_test(test_block_calls),
        cmocka_unit_test(test_session_calls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
