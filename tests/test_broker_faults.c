/* test_broker_faults.c — allocation fault injection on the broker's request
 * handlers: a broker in this process (tests/helpers/broker_inproc.h, the
 * small model family of tests/fuzz/seeds), every kind of request, and for
 * each the n-th allocation failed for every n until the request runs
 * clean (tests/helpers/alloc_fault.h).  Each time: exactly one reply with
 * the request's id and a clean status (SCDB_OK or SCDB_ENOMEM), no job
 * left in flight, no arena, session or client left over once the test
 * undoes what a success made, and the broker still serving.  Leaks: the
 * ASan build's leak check at exit (every fault path runs under it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_fault.h"
#include "broker_inproc.h"
#include "wire_records.h"

#define BT WR_BLOCK_TOKENS

static bi_broker *bi;
static uint64_t tok[4];       /* raw producer, raw consumer, scd producer, scd consumer */
static const struct {
    int role;
    const char *model, *codebook;
} who[4] = {
    {SCDB__ROLE__PRODUCER, "tiny", NULL},
    {SCDB__ROLE__CONSUMER, "tiny", NULL},
    {SCDB__ROLE__PRODUCER, "tiny", "tiny-scd"},
    {SCDB__ROLE__CONSUMER, "cons", "tiny-scd"},
};
static int32_t stored[16];    /* a prefix stored under raw/tiny and tiny-scd */
static uint64_t seq;          /* fresh tokens for puts */

/* ---------------------------------------------------------------- requests */

typedef struct packed {
    uint8_t *buf;
    size_t len;
    const void *frames[8];
    size_t flen[8];
    int nf;
} packed;

static void pack(Scdb__Request *rq, int client, packed *p)
{
    rq->version = SCDB_PROTO_VERSION;
    rq->id = ++bi->next_id;
    rq->client = client >= 0 ? tok[client] : 0;
    p->len = scdb__request__get_packed_size(rq);
    p->buf = malloc(p->len ? p->len : 1);
    assert_non_null(p->buf);
    scdb__request__pack(rq, p->buf);
}

/* A request outside any fault window: its status, the reply in *out. */
static int plain(Scdb__Request *rq, int client, const void *const *frames, const size_t *fl,
                 int nf, Scdb__Reply **out)
{
    packed p = {0};
    Scdb__Reply *r = NULL;
    int st;
    pack(rq, client, &p);
    assert_int_equal(bi_call(bi, p.buf, p.len, frames, fl, nf, 10000, &r), 0);
    assert_non_null(r);
    free(p.buf);
    st = r->status;
    if (out)
        *out = r;
    else
        scdb__reply__free_unpacked(r, NULL);
    return st;
}

static uint64_t arena_new(int client, uint32_t cap, int states)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__ArenaCreate a = SCDB__ARENA_CREATE__INIT;
    Scdb__Reply *r;
    uint64_t id;
    a.capacity = cap;
    a.kind = states ? SCDB__ARENA_KIND__ARENA_STATES : SCDB__ARENA_KIND__ARENA_KV;
    rq.body_case = SCDB__REQUEST__BODY_ARENA_CREATE;
    rq.arena_create = &a;
    assert_int_equal(plain(&rq, client, NULL, NULL, 0, &r), SCDB_OK);
    id = r->arena->arena;
    scdb__reply__free_unpacked(r, NULL);
    return id;
}

static bk_client *client(int i)
{
    bk_client *c = bk_client_find(bi->b, tok[i]);
    assert_non_null(c);
    return c;
}

static bk_arena *arena(int i, uint64_t id)
{
    return bk_arena_find(client(i), id);
}

/* Free every arena (and session) of our clients, drop any other client. */
static void undo_all(void)
{
    scdb_broker *b = bi->b;
    bk_client *extra[64];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        bk_client *c = client(i);
        while (c->sessions) bk_session_close(b, c, c->sessions);
        while (c->arenas) bk_client_free_arena(b, c, c->arenas);
    }
    for (size_t i = 0; i < BK_BUCKETS; i++)
        for (bk_client *c = b->buckets[i]; c && n < 64; c = c->next)
            if (c->token != tok[0] && c->token != tok[1] && c->token != tok[2] &&
                c->token != tok[3])
                extra[n++] = c;
    for (int i = 0; i < n; i++) bk_client_drop(b, extra[i], NULL);
}

static void fresh_tokens(int32_t *t, int n)
{
    seq++;
    for (int i = 0; i < n; i++) t[i] = (int32_t)((seq * 131 + (uint64_t)i * 7) % 256);
    t[0] = (int32_t)(seq % 256);
    t[1] = (int32_t)((seq / 256) % 256);
}

static void put_raw(const int32_t *t, int n_tokens)
{
    static uint8_t pay[8][BT * 64];
    const void *f[8];
    size_t fl[8];
    int nb = n_tokens / BT;
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__PutRequest p = SCDB__PUT_REQUEST__INIT;
    for (int i = 0; i < nb; i++) {
        for (size_t k = 0; k < sizeof pay[i]; k += 2) {
            pay[i][k] = (uint8_t)(k + i);
            pay[i][k + 1] = 0x30;
        }
        f[i] = pay[i];
        fl[i] = sizeof pay[i];
    }
    p.tokens = (int32_t *)t;
    p.n_tokens = (size_t)n_tokens;
    p.n_blocks = (uint32_t)nb;
    rq.body_case = SCDB__REQUEST__BODY_PUT;
    rq.put = &p;
    assert_int_equal(plain(&rq, 0, f, fl, nb, NULL), SCDB_OK);
}

static void fill_states(int client_i, uint64_t id)
{
    bk_arena *a = arena(client_i, id);
    float *h = (float *)((char *)a->map + SCDB_ARENA_HEADER_BYTES);
    size_t n = (a->size - SCDB_ARENA_HEADER_BYTES) / sizeof *h;
    for (size_t i = 0; i < n; i++) h[i] = 0.1f * sinf((float)i);
}

/* ---------------------------------------------------------------- the loop */

typedef struct fault_case {
    const char *what;
    int client;                               /* -1: anonymous */
    /* before each run: state and the request (into rq); ctx is the case's */
    void (*build)(Scdb__Request *rq, packed *p, void *ctx);
    void *ctx;
    int expect;                               /* the status of a clean run */
} fault_case;

/* Run the case with the n-th allocation failing for n = 0, 1, ... until a
 * run sees no fault.  Returns the number of faulted runs. */
static long fault_loop(const fault_case *fc)
{
    scdb_broker *b = bi->b;
    uint64_t arenas0, sessions0, clients0;
    long n;
    int statuses[64] = {0};

    undo_all();
    arenas0 = b->n_arenas;
    sessions0 = b->n_sessions;
    clients0 = b->n_clients;
    for (n = 0; n < 100000; n++) {
        Scdb__Request rq = SCDB__REQUEST__INIT;
        packed p = {0};
        Scdb__Reply *r = NULL;
        uint64_t id, a_before, s_before, c_before;
        int rc, fired;

        fc->build(&rq, &p, fc->ctx);
        id = bi->next_id;
        a_before = b->n_arenas;
        s_before = b->n_sessions;
        c_before = b->n_clients;
        alloc_fault_arm(n);
        rc = bi_call(bi, p.buf, p.len, p.frames, p.flen, p.nf, 10000, &r);
        fired = alloc_fault_fired();
        alloc_fault_disarm();
        free(p.buf);
        if (rc || !r)
            fail_msg("%s, allocation %ld failed: no reply (every request gets one)", fc->what, n);
        assert_int_equal(r->id, id);
        if (r->status != fc->expect && r->status != SCDB_ENOMEM)
            fail_msg("%s, allocation %ld failed: status %d (%s) is neither %s nor ENOMEM: %s",
                     fc->what, n, r->status, scdb_strerror((scdb_err)r->status),
                     scdb_strerror((scdb_err)fc->expect), r->message);
        if (!fired) assert_int_equal(r->status, fc->expect);
        if (r->status == SCDB_OK) {
            /* a success under a fault is a whole success */
            if (r->body_case == SCDB__REPLY__BODY_PUT) assert_int_equal(r->put->n_stored, r->put->n_full);
            if (r->body_case == SCDB__REPLY__BODY_GET) assert_int_equal(r->get->tokens_written, 16);
            if (r->body_case == SCDB__REPLY__BODY_SESSION_EVICT)
                assert_int_equal(r->session_evict->n_kept, 8);
        }
        if (r->status != SCDB_OK) {
            /* a refusal leaves nothing behind that the client cannot name */
            if (b->n_arenas > a_before || b->n_sessions > s_before || b->n_clients > c_before)
                fail_msg("%s, allocation %ld failed: refused (%s) but the broker now holds "
                         "%llu arenas (%llu before), %llu sessions (%llu), %llu clients (%llu)",
                         fc->what, n, scdb_strerror((scdb_err)r->status),
                         (unsigned long long)b->n_arenas, (unsigned long long)a_before,
                         (unsigned long long)b->n_sessions, (unsigned long long)s_before,
                         (unsigned long long)b->n_clients, (unsigned long long)c_before);
        }
        if (r->status >= 0 && r->status < 64) statuses[r->status]++;
        scdb__reply__free_unpacked(r, NULL);
        assert_int_equal(b->inflight, 0);
        undo_all();
        assert_int_equal(b->n_arenas, arenas0);
        assert_int_equal(b->n_sessions, sessions0);
        assert_int_equal(b->n_clients, clients0);
        {   /* still serving */
            Scdb__Request pq = SCDB__REQUEST__INIT;
            Scdb__Ping pg = SCDB__PING__INIT;
            pq.body_case = SCDB__REQUEST__BODY_PING;
            pq.ping = &pg;
            assert_int_equal(plain(&pq, 1, NULL, NULL, 0, NULL), SCDB_OK);
        }
        if (!fired) break;
    }
    printf("    %-28s %3ld run(s), one allocation failed in each: %d ENOMEM, %d %s\n",
           fc->what, n, statuses[SCDB_ENOMEM], statuses[fc->expect] - 1,
           fc->expect ? "refused as without the fault" : "succeeded anyway");
    return n;
}

/* ---------------------------------------------------------------- cases */

static void b_ping(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__Ping pg = SCDB__PING__INIT;
    (void)ctx;
    rq->body_case = SCDB__REQUEST__BODY_PING;
    rq->ping = &pg;
    pack(rq, -1, p);
}

static void b_stats(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__StatsRequest s = SCDB__STATS_REQUEST__INIT;
    (void)ctx;
    rq->body_case = SCDB__REQUEST__BODY_STATS;
    rq->stats = &s;
    pack(rq, 1, p);
}

static void b_hello(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__Hello h = SCDB__HELLO__INIT;
    int i = (int)(intptr_t)ctx;
    h.client_name = (char *)"faults";
    h.role = who[i].role;
    h.model = (char *)who[i].model;
    h.codebook = (char *)(who[i].codebook ? who[i].codebook : "");
    rq->body_case = SCDB__REQUEST__BODY_HELLO;
    rq->hello = &h;
    pack(rq, -1, p);
}

static void b_lookup(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__LookupRequest l = SCDB__LOOKUP_REQUEST__INIT;
    (void)ctx;
    l.tokens = stored;
    l.n_tokens = 16;
    rq->body_case = SCDB__REQUEST__BODY_LOOKUP;
    rq->lookup = &l;
    pack(rq, 1, p);
}

static int32_t put_toks[16];
static uint8_t put_pay[4][BT * 64];

/* ctx 1: fresh tokens (new blocks every run); 0: the stored prefix */
static void b_put(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__PutRequest pr = SCDB__PUT_REQUEST__INIT;
    if (ctx)
        fresh_tokens(put_toks, 16);
    else
        memcpy(put_toks, stored, sizeof put_toks);
    pr.tokens = put_toks;
    pr.n_tokens = 16;
    pr.n_blocks = 4;
    rq->body_case = SCDB__REQUEST__BODY_PUT;
    rq->put = &pr;
    pack(rq, 0, p);
    for (int i = 0; i < 4; i++) {
        memset(put_pay[i], 0x31 + i, sizeof put_pay[i]);
        p->frames[i] = put_pay[i];
        p->flen[i] = sizeof put_pay[i];
    }
    p->nf = 4;
}

static void b_delete(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__DeleteRequest d = SCDB__DELETE_REQUEST__INIT;
    (void)ctx;
    fresh_tokens(put_toks, 16);
    put_raw(put_toks, 16);
    d.tokens = put_toks;
    d.n_tokens = 16;
    d.from_block = 1;
    rq->body_case = SCDB__REQUEST__BODY_DEL;
    rq->del = &d;
    pack(rq, 0, p);
}

/* ctx: client 1 (KV) or 2 (states) */
static void b_arena_create(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__ArenaCreate a = SCDB__ARENA_CREATE__INIT;
    int i = (int)(intptr_t)ctx;
    a.capacity = 32;
    a.kind = i == 2 ? SCDB__ARENA_KIND__ARENA_STATES : SCDB__ARENA_KIND__ARENA_KV;
    rq->body_case = SCDB__REQUEST__BODY_ARENA_CREATE;
    rq->arena_create = &a;
    pack(rq, i, p);
}

/* ctx 0: ArenaMapped, 1: ArenaFree */
static void b_arena_mapped(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__ArenaMapped m = SCDB__ARENA_MAPPED__INIT;
    static Scdb__ArenaFree f = SCDB__ARENA_FREE__INIT;
    uint64_t id = arena_new(1, 16, 0);
    if (ctx) {
        f.arena = id;
        rq->body_case = SCDB__REQUEST__BODY_ARENA_FREE;
        rq->arena_free = &f;
    } else {
        m.arena = id;
        rq->body_case = SCDB__REQUEST__BODY_ARENA_MAPPED;
        rq->arena_mapped = &m;
    }
    pack(rq, 1, p);
}

/* ctx: client 1 (raw) or 3 (scd) */
static void b_get(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__GetRequest g = SCDB__GET_REQUEST__INIT;
    int i = (int)(intptr_t)ctx;
    g.arena = arena_new(i, 32, 0);
    g.tokens = stored;
    g.n_tokens = 16;
    rq->body_case = SCDB__REQUEST__BODY_GET;
    rq->get = &g;
    pack(rq, i, p);
}

static void b_put_states(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__PutStatesRequest ps = SCDB__PUT_STATES_REQUEST__INIT;
    (void)ctx;
    ps.arena = arena_new(2, 16, 1);
    fill_states(2, ps.arena);
    fresh_tokens(put_toks, 16);
    ps.tokens = put_toks;
    ps.n_tokens = 16;
    rq->body_case = SCDB__REQUEST__BODY_PUT_STATES;
    rq->put_states = &ps;
    pack(rq, 2, p);
}

/* An arena holding the stored prefix (a get), and its live session. */
static uint64_t arena_with_prefix(void)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__GetRequest g = SCDB__GET_REQUEST__INIT;
    g.arena = arena_new(1, 32, 0);
    g.tokens = stored;
    g.n_tokens = 16;
    rq.body_case = SCDB__REQUEST__BODY_GET;
    rq.get = &g;
    assert_int_equal(plain(&rq, 1, NULL, NULL, 0, NULL), SCDB_OK);
    return g.arena;
}

static uint64_t session_on(uint64_t kv, const char *policy, uint64_t *stats)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__SessionOpen so = SCDB__SESSION_OPEN__INIT;
    Scdb__Reply *r;
    uint64_t id;
    so.arena = kv;
    so.budget = 8;
    so.policy = (char *)policy;
    so.n_heads = 4;
    so.window = 4;
    rq.body_case = SCDB__REQUEST__BODY_SESSION_OPEN;
    rq.session_open = &so;
    assert_int_equal(plain(&rq, 1, NULL, NULL, 0, &r), SCDB_OK);
    id = r->session_open->session;
    if (stats) *stats = r->session_open->stats_arena;
    scdb__reply__free_unpacked(r, NULL);
    return id;
}

static void b_session_open(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__SessionOpen so = SCDB__SESSION_OPEN__INIT;
    so.arena = arena_with_prefix();
    so.budget = 8;
    so.policy = (char *)ctx;
    so.n_heads = 4;
    so.window = 4;
    rq->body_case = SCDB__REQUEST__BODY_SESSION_OPEN;
    rq->session_open = &so;
    pack(rq, 1, p);
}

static void b_session_evict(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__SessionEvict se = SCDB__SESSION_EVICT__INIT;
    uint64_t stats, kv = arena_with_prefix();
    bk_arena *st;
    se.session = session_on(kv, (const char *)ctx, &stats);
    /* the client's fold of the 16 decoded slots (no attention yet) */
    st = arena(1, stats);
    ((scdb_evict_acc *)st->map)->n = 16;
    for (int i = 0; i < 16; i++) scdb_evict_acc_pos(st->map)[i] = i;
    rq->body_case = SCDB__REQUEST__BODY_SESSION_EVICT;
    rq->session_evict = &se;
    pack(rq, 1, p);
}

static void b_session_close(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__SessionClose sc = SCDB__SESSION_CLOSE__INIT;
    (void)ctx;
    sc.session = session_on(arena_with_prefix(), "h2o", NULL);
    rq->body_case = SCDB__REQUEST__BODY_SESSION_CLOSE;
    rq->session_close = &sc;
    pack(rq, 1, p);
}

static uint64_t extra_token;

static void b_goodbye(Scdb__Request *rq, packed *p, void *ctx)
{
    static Scdb__Goodbye g = SCDB__GOODBYE__INIT;
    (void)ctx;
    assert_int_equal(bi_hello(bi, SCDB__ROLE__CONSUMER, "tiny", NULL, &extra_token), 0);
    rq->body_case = SCDB__REQUEST__BODY_GOODBYE;
    rq->goodbye = &g;
    pack(rq, -1, p);
    /* repack with the extra client's token */
    free(p->buf);
    rq->client = extra_token;
    p->len = scdb__request__get_packed_size(rq);
    p->buf = malloc(p->len);
    assert_non_null(p->buf);
    scdb__request__pack(rq, p->buf);
}

/* bad input takes its error paths under faults too */
static void b_bad_tokens(Scdb__Request *rq, packed *p, void *ctx)
{
    static int32_t t[8] = {1, 2, -3, 4, 5, 6, 7, 8};
    static Scdb__LookupRequest l = SCDB__LOOKUP_REQUEST__INIT;
    (void)ctx;
    l.tokens = t;
    l.n_tokens = 8;
    rq->body_case = SCDB__REQUEST__BODY_LOOKUP;
    rq->lookup = &l;
    pack(rq, 1, p);
}

static void b_garbage(Scdb__Request *rq, packed *p, void *ctx)
{
    (void)rq;
    (void)ctx;
    p->len = 9;
    p->buf = malloc(p->len);
    assert_non_null(p->buf);
    memcpy(p->buf, "\xff\xfe garbage", 9);
    bi->next_id = 0;    /* an unreadable request is answered with id 0 */
}

/* ---------------------------------------------------------------- tests */

static void run_cases(const fault_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) assert_true(fault_loop(&cases[i]) >= 1);
}

static void test_inline_requests(void **state)
{
    (void)state;
    const fault_case cases[] = {
        {"ping (anonymous)", -1, b_ping, NULL, SCDB_OK},
        {"stats", 1, b_stats, NULL, SCDB_OK},
        {"hello raw consumer", -1, b_hello, (void *)(intptr_t)1, SCDB_OK},
        {"hello scd producer", -1, b_hello, (void *)(intptr_t)2, SCDB_OK},
        {"lookup", 1, b_lookup, NULL, SCDB_OK},
        {"lookup, negative token", 1, b_bad_tokens, NULL, SCDB_EINVAL},
        {"unparseable request", -1, b_garbage, NULL, SCDB_EPROTO},
        {"goodbye", -1, b_goodbye, NULL, SCDB_OK},
    };
    run_cases(cases, SCDB_ARRAY_LEN(cases));
}

static void test_arena_requests(void **state)
{
    (void)state;
    const fault_case cases[] = {
        {"arena create (KV)", 1, b_arena_create, (void *)(intptr_t)1, SCDB_OK},
        {"arena create (states)", 2, b_arena_create, (void *)(intptr_t)2, SCDB_OK},
        {"arena mapped", 1, b_arena_mapped, (void *)(intptr_t)0, SCDB_OK},
        {"arena free", 1, b_arena_mapped, (void *)(intptr_t)1, SCDB_OK},
    };
    run_cases(cases, SCDB_ARRAY_LEN(cases));
}

static void test_job_requests(void **state)
{
    (void)state;
    const fault_case cases[] = {
        {"put (new blocks)", 0, b_put, (void *)(intptr_t)1, SCDB_OK},
        {"put (stored blocks)", 0, b_put, (void *)(intptr_t)0, SCDB_OK},
        {"delete", 0, b_delete, NULL, SCDB_OK},
        {"get (raw)", 1, b_get, (void *)(intptr_t)1, SCDB_OK},
        {"get (scd decode)", 3, b_get, (void *)(intptr_t)3, SCDB_OK},
        {"put_states (scd encode)", 2, b_put_states, NULL, SCDB_OK},
    };
    run_cases(cases, SCDB_ARRAY_LEN(cases));
}

static void test_session_requests(void **state)
{
    (void)state;
    const fault_case cases[] = {
        {"session open (h2o)", 1, b_session_open, (void *)"h2o", SCDB_OK},
        {"session open (learned)", 1, b_session_open, (void *)"learned", SCDB_OK},
        {"session evict (snapkv)", 1, b_session_evict, (void *)"snapkv", SCDB_OK},
        {"session evict (learned)", 1, b_session_evict, (void *)"learned", SCDB_OK},
        {"session close", 1, b_session_close, NULL, SCDB_OK},
    };
    run_cases(cases, SCDB_ARRAY_LEN(cases));
}

static int setup(void **state)
{
    char ini[2048], err[512];
    (void)state;
    snprintf(ini, sizeof ini, WR_CONFIG_FMT, SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS);
    if (bi_open(ini, &bi, err, sizeof err)) {
        fprintf(stderr, "cannot start the broker: %s\n", err);
        return -1;
    }
    scdb_log_set_level(SCDB_LOG_OFF);
    for (int i = 0; i < 4; i++)
        if (bi_hello(bi, who[i].role, who[i].model, who[i].codebook, &tok[i])) return -1;
    for (int i = 0; i < 16; i++) stored[i] = (i * 37 + 11) & 0xff;
    put_raw(stored, 16);
    {   /* the same prefix as SCD codes, encoded by the broker */
        Scdb__Request rq = SCDB__REQUEST__INIT;
        Scdb__PutStatesRequest ps = SCDB__PUT_STATES_REQUEST__INIT;
        ps.arena = arena_new(2, 16, 1);
        fill_states(2, ps.arena);
        ps.tokens = stored;
        ps.n_tokens = 16;
        rq.body_case = SCDB__REQUEST__BODY_PUT_STATES;
        rq.put_states = &ps;
        if (plain(&rq, 2, NULL, NULL, 0, NULL) != SCDB_OK) return -1;
        undo_all();
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bi_close(&bi);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_requests),
        cmocka_unit_test(test_arena_requests),
        cmocka_unit_test(test_job_requests),
        cmocka_unit_test(test_session_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
