/* test_broker_quotas.c — per-client quotas (broker.h, QUOTAS): one client
 * at its limit is refused (SCDB_EBUSY for jobs in flight, SCDB_EFULL for
 * arena bytes and live sessions) while another client is still served, and
 * the quota comes back when the client's jobs finish or it frees what it
 * holds.  Deterministic on a broker in this process (broker_inproc: jobs
 * stay in flight until the test drains them); then against a real broker
 * process, a client that sends requests without reading a single reply and
 * one that creates arenas as fast as it can, beside a libscdb client whose
 * every call must succeed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_inproc.h"
#include "broker_proc.h"
#include "scdb.h"
#include "wire_records.h"

#define BT WR_BLOCK_TOKENS
#define QUOTAS                                                                      \
    "max_inflight_per_client = 3\n"                                                 \
    "max_sessions_per_client = 2\n"                                                 \
    "max_client_arena_bytes = 40KiB\n"

static bi_broker *bi;
static uint64_t prod_a, prod_b, cons_a, cons_b;
static uint64_t seq;

/* ---------------------------------------------------------------- helpers */

static void fresh_tokens(int32_t *t, int n)
{
    seq++;
    for (int i = 0; i < n; i++) t[i] = (int32_t)((seq * 131 + (uint64_t)i * 7) % 256);
    t[0] = (int32_t)(seq % 256);
    t[1] = (int32_t)((seq / 256) % 256);
}

static uint8_t *pack(Scdb__Request *rq, uint64_t client, size_t *len)
{
    uint8_t *buf;
    rq->version = SCDB_PROTO_VERSION;
    rq->id = ++bi->next_id;
    rq->client = client;
    *len = scdb__request__get_packed_size(rq);
    buf = malloc(*len);
    assert_non_null(buf);
    scdb__request__pack(rq, buf);
    return buf;
}

/* Hand a put of one new block to the broker (no wait for the job). */
static void send_put(uint64_t client)
{
    static uint8_t pay[BT * 64];
    const void *f[1] = {pay};
    size_t fl[1] = {sizeof pay}, len;
    int32_t t[BT];
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__PutRequest p = SCDB__PUT_REQUEST__INIT;
    uint8_t *buf;

    fresh_tokens(t, BT);
    p.tokens = t;
    p.n_tokens = BT;
    p.n_blocks = 1;
    rq.body_case = SCDB__REQUEST__BODY_PUT;
    rq.put = &p;
    buf = pack(&rq, client, &len);
    assert_int_equal(bi_send(bi, buf, len, f, fl, 1), 0);
    free(buf);
}

static int recv_status(char *msg, size_t cap)
{
    Scdb__Reply *r = NULL;
    int st;
    assert_int_equal(bi_recv(bi, 10000, &r), 0);
    assert_non_null(r);
    st = r->status;
    if (msg) snprintf(msg, cap, "%s", r->message);
    scdb__reply__free_unpacked(r, NULL);
    return st;
}

/* No reply is waiting (the job replies come only after a drain). */
static void no_reply_yet(void)
{
    assert_int_equal(bi_recv(bi, 50, NULL), -1);
}

static int call(Scdb__Request *rq, uint64_t client, Scdb__Reply **out)
{
    size_t len;
    uint8_t *buf = pack(rq, client, &len);
    Scdb__Reply *r = NULL;
    int st;
    assert_int_equal(bi_call(bi, buf, len, NULL, NULL, 0, 10000, &r), 0);
    free(buf);
    assert_non_null(r);
    st = r->status;
    if (out)
        *out = r;
    else
        scdb__reply__free_unpacked(r, NULL);
    return st;
}

static int arena_create(uint64_t client, uint32_t cap, uint64_t *id)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__ArenaCreate a = SCDB__ARENA_CREATE__INIT;
    Scdb__Reply *r;
    int st;
    if (id) *id = 0;   /* a refused create names no arena (the callers free it) */
    a.capacity = cap;
    rq.body_case = SCDB__REQUEST__BODY_ARENA_CREATE;
    rq.arena_create = &a;
    st = call(&rq, client, &r);
    if (st == SCDB_OK && id) *id = r->arena->arena;
    scdb__reply__free_unpacked(r, NULL);
    return st;
}

static int arena_free(uint64_t client, uint64_t id)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__ArenaFree f = SCDB__ARENA_FREE__INIT;
    f.arena = id;
    rq.body_case = SCDB__REQUEST__BODY_ARENA_FREE;
    rq.arena_free = &f;
    return call(&rq, client, NULL);
}

static int session_open(uint64_t client, uint64_t arena, uint64_t *id)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__SessionOpen so = SCDB__SESSION_OPEN__INIT;
    Scdb__Reply *r;
    int st;
    if (id) *id = 0;   /* a refused open names no session */
    so.arena = arena;
    so.budget = 4;
    so.policy = (char *)"h2o";
    so.n_heads = 4;
    rq.body_case = SCDB__REQUEST__BODY_SESSION_OPEN;
    rq.session_open = &so;
    st = call(&rq, client, &r);
    if (st == SCDB_OK && id) *id = r->session_open->session;
    scdb__reply__free_unpacked(r, NULL);
    return st;
}

static int session_close(uint64_t client, uint64_t id)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__SessionClose sc = SCDB__SESSION_CLOSE__INIT;
    sc.session = id;
    rq.body_case = SCDB__REQUEST__BODY_SESSION_CLOSE;
    rq.session_close = &sc;
    return call(&rq, client, NULL);
}

/* ---------------------------------------------------------------- in process */

static void test_inflight_per_client(void **state)
{
    char msg[512];
    (void)state;
    /* A fills its quota of 3 jobs; the 4th is refused at once */
    for (int i = 0; i < 3; i++) send_put(prod_a);
    no_reply_yet();
    assert_int_equal(bi->b->inflight, 3);
    send_put(prod_a);
    assert_int_equal(recv_status(msg, sizeof msg), SCDB_EBUSY);
    assert_non_null(strstr(msg, "max_inflight_per_client"));
    /* B is not: it has its own 3 */
    for (int i = 0; i < 3; i++) send_put(prod_b);
    no_reply_yet();
    send_put(prod_b);
    assert_int_equal(recv_status(NULL, 0), SCDB_EBUSY);
    /* inline requests cost no job: a lookup of A's is answered now */
    {
        Scdb__Request rq = SCDB__REQUEST__INIT;
        Scdb__LookupRequest l = SCDB__LOOKUP_REQUEST__INIT;
        int32_t t[BT] = {1, 2, 3, 4};
        size_t len;
        uint8_t *buf;
        l.tokens = t;
        l.n_tokens = BT;
        rq.body_case = SCDB__REQUEST__BODY_LOOKUP;
        rq.lookup = &l;
        buf = pack(&rq, cons_a, &len);
        assert_int_equal(bi_send(bi, buf, len, NULL, NULL, 0), 0);
        free(buf);
        assert_int_equal(recv_status(NULL, 0), SCDB_OK);
    }
    /* the six jobs finish and answer; the quota is back */
    assert_int_equal(bi_drain(bi, 10000), 0);
    for (int i = 0; i < 6; i++) assert_int_equal(recv_status(NULL, 0), SCDB_OK);
    assert_int_equal(bi->b->inflight, 0);
    for (int i = 0; i < 3; i++) send_put(prod_a);
    assert_int_equal(bi_drain(bi, 10000), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(recv_status(NULL, 0), SCDB_OK);
}

static void test_arena_bytes_per_client(void **state)
{
    uint64_t ids[8];
    int n = 0, st;
    (void)state;
    /* 64-slot arenas of the tiny model: ~12.5 KiB each, 3 fit in 40 KiB */
    while ((st = arena_create(cons_a, 64, &ids[n])) == SCDB_OK) {
        n++;
        assert_true(n < 8);
    }
    assert_int_equal(st, SCDB_EFULL);
    assert_int_equal(n, 3);
    /* another client is not affected */
    {
        uint64_t other;
        assert_int_equal(arena_create(cons_b, 64, &other), SCDB_OK);
        assert_int_equal(arena_free(cons_b, other), SCDB_OK);
    }
    /* freeing one makes room again */
    assert_int_equal(arena_free(cons_a, ids[--n]), SCDB_OK);
    assert_int_equal(arena_create(cons_a, 64, &ids[n]), SCDB_OK);
    n++;
    while (n) assert_int_equal(arena_free(cons_a, ids[--n]), SCDB_OK);
}

static void test_sessions_per_client(void **state)
{
    uint64_t arenas[3], sess[3], ob, os;
    (void)state;
    for (int i = 0; i < 3; i++) assert_int_equal(arena_create(cons_a, 8, &arenas[i]), SCDB_OK);
    assert_int_equal(session_open(cons_a, arenas[0], &sess[0]), SCDB_OK);
    assert_int_equal(session_open(cons_a, arenas[1], &sess[1]), SCDB_OK);
    assert_int_equal(session_open(cons_a, arenas[2], &sess[2]), SCDB_EFULL);
    assert_int_equal(arena_create(cons_b, 8, &ob), SCDB_OK);
    assert_int_equal(session_open(cons_b, ob, &os), SCDB_OK);
    assert_int_equal(session_close(cons_a, sess[0]), SCDB_OK);
    assert_int_equal(session_open(cons_a, arenas[2], &sess[2]), SCDB_OK);
    assert_int_equal(session_close(cons_a, sess[1]), SCDB_OK);
    assert_int_equal(session_close(cons_a, sess[2]), SCDB_OK);
    assert_int_equal(session_close(cons_b, os), SCDB_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(arena_free(cons_a, arenas[i]), SCDB_OK);
    assert_int_equal(arena_free(cons_b, ob), SCDB_OK);
    assert_int_equal(bi->b->n_sessions, 0);
    assert_int_equal(bi->b->n_arenas, 0);
}

/* ---------------------------------------------------------------- real broker */

/* A raw DEALER that said hello (its token), for misbehaving on purpose. */
static void *rogue(void *zctx, const char *endpoint, int role, const char *model, uint64_t *token)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__Hello h = SCDB__HELLO__INIT;
    Scdb__Reply *r;
    uint8_t buf[256];
    int linger = 0, hwm = 100000, rcvto = 10000;
    size_t n;
    zmq_msg_t m;

    assert_non_null(s);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &rcvto, sizeof rcvto);
    assert_int_equal(zmq_connect(s, endpoint), 0);
    h.client_name = (char *)"rogue";
    h.role = role;
    h.model = (char *)model;
    h.codebook = (char *)"";
    rq.version = SCDB_PROTO_VERSION;
    rq.id = 1;
    rq.body_case = SCDB__REQUEST__BODY_HELLO;
    rq.hello = &h;
    n = scdb__request__pack(&rq, buf);
    assert_true(zmq_send(s, buf, n, 0) == (int)n);
    zmq_msg_init(&m);
    assert_true(zmq_msg_recv(&m, s, 0) > 0);
    r = scdb__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    zmq_msg_close(&m);
    assert_non_null(r);
    assert_int_equal(r->status, SCDB_OK);
    *token = r->hello->client;
    scdb__reply__free_unpacked(r, NULL);
    return s;
}

static bp_broker bp;   /* teardown stops it, also after a failure */

typedef struct flooder {
    void *flood, *hog;
    uint64_t tf, th;
    const uint8_t *pay;
    atomic_int stop;
    atomic_long sent;
} flooder;

static void *flood_main(void *arg)
{
    flooder *f = arg;
    for (long i = 0; !atomic_load(&f->stop); i++) {
        Scdb__Request rq = SCDB__REQUEST__INIT;
        Scdb__PutRequest p = SCDB__PUT_REQUEST__INIT;
        Scdb__ArenaCreate ac = SCDB__ARENA_CREATE__INIT;
        int32_t t[4 * BT];
        uint8_t buf[512];
        size_t n;
        for (int k = 0; k < 4 * BT; k++) t[k] = (int32_t)((i * 7 + k * 13 + (i >> 8)) & 0xff);
        t[0] = (int32_t)(i & 0xff);
        t[1] = (int32_t)((i >> 8) & 0xff);
        t[2] = 300;   /* outside the good clients' tokens */
        p.tokens = t;
        p.n_tokens = 4 * BT;
        p.n_blocks = 4;
        rq.version = SCDB_PROTO_VERSION;
        rq.id = (uint64_t)i + 10;
        rq.client = f->tf;
        rq.body_case = SCDB__REQUEST__BODY_PUT;
        rq.put = &p;
        n = scdb__request__pack(&rq, buf);
        zmq_send(f->flood, buf, n, ZMQ_SNDMORE);
        for (int b = 0; b < 4; b++)
            zmq_send(f->flood, f->pay + b * BT * 64, BT * 64, b < 3 ? ZMQ_SNDMORE : 0);
        ac.capacity = 64;
        rq.client = f->th;
        rq.body_case = SCDB__REQUEST__BODY_ARENA_CREATE;
        rq.arena_create = &ac;
        n = scdb__request__pack(&rq, buf);
        zmq_send(f->hog, buf, n, 0);
        atomic_fetch_add(&f->sent, 1);
    }
    return NULL;
}

static void test_rogue_clients(void **state)
{
    char ini[3072];
    void *zctx = zmq_ctx_new();
    void *flood, *hog;
    uint64_t tf, th;
    scdb *prod = NULL, *cons = NULL;
    /* "served", not "fast": the bound only catches starvation (an ASan
     * build under a flood on a loaded machine is slow) */
    scdb_opts o = {.timeout_ms = 30000, .name = "good"};
    static uint8_t pay[BT * 64 * 4];
    static flooder fl;
    pthread_t thr;
    int hog_full = 0, hog_ok = 0, hog_replies = 0, first_status = -1;
    (void)state;

    /* synced commits: the writer is slower than the flood, its queue fills */
    snprintf(ini, sizeof ini,
             "max_inflight_per_client = 4\nmax_inflight = 16\nheartbeat_timeout_ms = 600000\n" WR_CONFIG_FMT
             "\n[broker]\nno_sync = 0\n", SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS);
    assert_int_equal(bp_start(&bp, SCDB_BROKER_BIN, ini), 0);
    o.endpoint = bp.endpoint;
    flood = rogue(zctx, bp.endpoint, SCDB__ROLE__PRODUCER, "tiny", &tf);
    hog = rogue(zctx, bp.endpoint, SCDB__ROLE__CONSUMER, "tiny", &th);
    assert_int_equal(scdb_connect(&o, &prod), SCDB_OK);
    assert_int_equal(scdb_register(prod, SCDB_PRODUCER, "tiny", NULL, NULL), SCDB_OK);
    assert_int_equal(scdb_connect(&o, &cons), SCDB_OK);
    assert_int_equal(scdb_register(cons, SCDB_CONSUMER, "tiny", NULL, NULL), SCDB_OK);

    /* the flooder: puts of 4 blocks as fast as it can, no reply ever read;
     * the hog: an arena request after each, none confirmed; both until the
     * good clients are done */
    fl.flood = flood;
    fl.hog = hog;
    fl.tf = tf;
    fl.th = th;
    fl.pay = pay;
    atomic_store(&fl.stop, 0);
    assert_int_equal(pthread_create(&thr, NULL, flood_main, &fl), 0);
    while (atomic_load(&fl.sent) < 200) usleep(1000);
    /* meanwhile the good clients are served, every call */
    for (int i = 0; i < 50; i++) {
        int32_t t[4 * BT];
        scdb_lookup_result lr;
        scdb_arena *a = NULL;
        scdb_get_result gr;
        fresh_tokens(t, 4 * BT);
        assert_int_equal(scdb_put(prod, t, 4 * BT, 0, pay, sizeof pay, NULL), SCDB_OK);
        assert_int_equal(scdb_lookup(cons, t, 4 * BT, &lr), SCDB_OK);
        assert_int_equal(lr.n_matched, 4);
        assert_int_equal(scdb_arena_new(cons, 32, &a), SCDB_OK);
        assert_int_equal(scdb_get(cons, t, 4 * BT, a, 0, 0, &gr), SCDB_OK);
        assert_int_equal(gr.tokens_written, 4 * BT);
        scdb_arena_free(&a);
    }
    atomic_store(&fl.stop, 1);
    pthread_join(thr, NULL);
    /* the hog met its arena quota (max_arenas_per_client 8): EFULL replies */
    for (long i = 0; i < atomic_load(&fl.sent); i++) {
        zmq_msg_t m;
        Scdb__Reply *r;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, hog, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        r = scdb__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        zmq_msg_close(&m);
        assert_non_null(r);
        if (!hog_replies++) first_status = r->status;
        hog_full += r->status == SCDB_EFULL;
        hog_ok += r->status == SCDB_OK;
        scdb__reply__free_unpacked(r, NULL);
    }
    /* (replies past the queue to a peer that does not read are dropped,
     * the first ones kept) */
    if (hog_ok != 8)
        fail_msg("the hog's replies: %d, %d ok, %d SCDB_EFULL (first status %d) of %ld requests",
                 hog_replies, hog_ok, hog_full, first_status, (long)atomic_load(&fl.sent));
    assert_int_equal(hog_ok, 8);
    assert_true(hog_full >= 1);
    assert_int_equal(hog_ok + hog_full, hog_replies);
    {   /* the broker still holds only the hog's 8 arenas */
        scdb_stat st;
        assert_int_equal(scdb_stats(cons, &st), SCDB_OK);
        assert_int_equal(st.arenas, 8);
    }
    zmq_close(flood);
    zmq_close(hog);
    zmq_ctx_term(zctx);
    scdb_close(&prod);
    scdb_close(&cons);
    assert_int_equal(bp_stop(&bp, SIGTERM), 0);
}

/* ---------------------------------------------------------------- setup */

static int setup(void **state)
{
    char ini[3072], err[512];
    (void)state;
    snprintf(ini, sizeof ini, QUOTAS WR_CONFIG_FMT, SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS,
             SCDB_FUZZ_SEEDS);
    if (bi_open(ini, &bi, err, sizeof err)) {
        fprintf(stderr, "cannot start the broker: %s\n", err);
        return -1;
    }
    scdb_log_set_level(SCDB_LOG_OFF);
    if (bi_hello(bi, SCDB__ROLE__PRODUCER, "tiny", NULL, &prod_a) ||
        bi_hello(bi, SCDB__ROLE__PRODUCER, "tiny", NULL, &prod_b) ||
        bi_hello(bi, SCDB__ROLE__CONSUMER, "tiny", NULL, &cons_a) ||
        bi_hello(bi, SCDB__ROLE__CONSUMER, "tiny", NULL, &cons_b))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bi_close(&bi);
    bp_cleanup(&bp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inflight_per_client),
        cmocka_unit_test(test_arena_bytes_per_client),
        cmocka_unit_test(test_sessions_per_client),
        cmocka_unit_test(test_rogue_clients),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
