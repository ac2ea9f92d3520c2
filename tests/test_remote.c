/*
 * test_remote.c — the remote tier (store/remote_tier.h) alone and inside
 * brokers (broker/remote.c).  Groups, one CTest entry each (argv[1]; no
 * argument runs all):
 *
 *   unit     no Redis needed: configurations refused, Redis key names,
 *            value verification (garbage, truncated, another namespace,
 *            wrong checksum, wrong index / parent / size), a cluster that
 *            is not there (fetch and probe fail fast, writes retry then are
 *            given up, the bounded queue drops and counts), the store's
 *            on_written hook (what a commit reports, from_remote excluded)
 *   tier     a real cluster: queued values land with their TTL and read
 *            back byte-identical; probes stop at the first miss; planted
 *            values that are garbage, truncated, of another namespace, of
 *            a wrong checksum or of another chain are refused and counted;
 *            a replace queued after its original lands last; deletes
 *   broker   a real cluster and real brokers (scdb-broker processes, each
 *            with its own LMDB): put on A, lookup + get on B byte-identical
 *            to A's local get (the lookup index's local prefix stops short:
 *            the remainder comes from the broker); B keeps what it fetched
 *            (LMDB + hot tier, lookup index); a replace on A reaches a new
 *            broker; a planted bad value is a shorter hit on B, never data;
 *            MOVED / ASK while `redis-cli --cluster reshard` moves slots;
 *            a wrong password stops the broker at start (exit 2, says why)
 *   faults   a real cluster with a short cluster-node-timeout and brokers:
 *            a master killed with -9 while B serves gets -- no client
 *            error, no wrong byte, remote reads resume after the failover;
 *            the whole cluster down -- B serves its local blocks, lookups
 *            and gets succeed with the local part, one log line per state
 *            change -- and back (remote hits again)
 *
 * The cluster groups exit 77 (skipped) when redis-server or redis-cli is
 * missing (scripts/install-deps.sh installs them).  Each starts its own
 * cluster on free loopback ports in its own temp dir
 * (tests/helpers/local_cluster.h), so ctest -j2 is safe.  Nothing here
 * times anything: waits are polls with generous "does not hang" limits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/local_cluster.h"
#include "helpers/signal_pid.h"
#include "redis_cluster.h"
#include "remote_tier.h"
#include "store.h"

#define BT 64

static lc_cluster *g_cluster;
static char g_tmp[256];

/* ------------------------------------------------------------- helpers */

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* A chain of n blocks of prefix `seed` under ns: keys, and per block a
 * payload of plen bytes that depends on (seed, block, version). */
typedef struct chain {
    scdb_ns ns;
    int32_t tokens[16 * BT];
    scdb_key keys[16];
    size_t n;
    uint64_t plen;
    uint8_t payload[16][4096];
    uint64_t sections[2];
} chain;

static void chain_make(chain *c, const char *ns_id, uint32_t seed, size_t n, uint64_t plen,
                       uint32_t version)
{
    size_t nk = 0;
    assert_true(n <= 16 && plen <= 4096 && plen >= 64);
    memset(c, 0, sizeof *c);
    assert_int_equal(scdb_ns_make(ns_id, strlen(ns_id), SCDB_F16, 1, &c->ns), SCDB_OK);
    for (size_t i = 0; i < n * BT; i++) c->tokens[i] = (int32_t)(mix(seed * 7919u + (uint32_t)i) & 0xff);
    assert_int_equal(scdb_block_key_chain(&c->ns, c->tokens, n * BT, BT, c->keys, 16, &nk),
                     SCDB_OK);
    assert_int_equal(nk, n);
    c->n = n;
    c->plen = plen;
    c->sections[0] = 0;
    c->sections[1] = plen / 2;
    for (size_t b = 0; b < n; b++)
        for (uint64_t j = 0; j < plen; j++)
            c->payload[b][j] = (uint8_t)mix(seed ^ mix((uint32_t)(b * 131 + j) ^ version * 0x9e37u));
}

static void chain_info(const chain *c, size_t b, scdb_block_info *info)
{
    memset(info, 0, sizeof *info);
    info->key = c->keys[b];
    if (b) info->parent = c->keys[b - 1];
    info->ns = c->ns;
    info->block_index = (uint32_t)b;
    info->token_count = BT;
    info->payload_dtype = SCDB_F16;
    info->n_sections = 2;
    info->payload_len = c->plen;
    memcpy(info->section_off, c->sections, sizeof c->sections);
}

/* The encoded store value of block b (malloc'd). */
static uint8_t *chain_value(const chain *c, size_t b, size_t *len)
{
    scdb_block_info info;
    size_t cap = scdb_block_header_len(2) + c->plen;
    uint8_t *v = malloc(cap);
    assert_non_null(v);
    chain_info(c, b, &info);
    assert_int_equal(scdb_block_value_encode(&info, c->payload[b], v, cap, len), SCDB_OK);
    return v;
}

static scdb_remote_expect chain_expect(const chain *c, size_t from)
{
    scdb_remote_expect x;
    memset(&x, 0, sizeof x);
    x.ns = c->ns;
    if (from) x.parent = c->keys[from - 1];
    x.first_index = (uint32_t)from;
    x.token_count = BT;
    x.payload_len = c->plen;
    x.payload_dtype = SCDB_F16;
    return x;
}

static scdb_remote *open_tier(const char *seeds, const char *prefix, uint64_t ttl_ms,
                              uint64_t queue_bytes)
{
    scdb_remote_config cfg = {.cluster = seeds, .key_prefix = prefix, .ttl_ms = ttl_ms,
                              .queue_bytes = queue_bytes, .timeout_ms = 500, .readers = 2};
    scdb_remote *r = NULL;
    char msg[512] = "";
    scdb_err e = scdb_remote_open(&cfg, &r, msg, sizeof msg);
    if (e) print_message("open: %s: %s\n", scdb_strerror(e), msg);
    assert_int_equal(e, SCDB_OK);
    return r;
}

/* Poll until the write queue is empty and nothing is in flight. */
static void wait_written(scdb_remote *r)
{
    scdb_remote_stat st;
    for (int i = 0; i < 3000; i++) {
        scdb_remote_stats(r, &st);
        if (st.pending == 0) return;
        nap_ms(10);
    }
    fail_msg("the write queue did not drain in 30 s (%llu pending)",
             (unsigned long long)st.pending);
}

/* ================================================================ unit */

static void test_config_refused(void **state)
{
    char msg[256];
    scdb_remote *r = NULL;
    (void)state;
    scdb_remote_config c = {0};
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_EINVAL);
    assert_non_null(strstr(msg, "cluster"));
    c.cluster = "127.0.0.1:1";
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_OK);
    c.key_prefix = "scdb:{fleet}:";
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_EINVAL);
    assert_non_null(strstr(msg, "hash tag"));
    c.key_prefix = "a b";
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_EINVAL);
    c.key_prefix = "0123456789012345678901234567890123456789012345678901234567890123456789";
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_EINVAL);
    c.key_prefix = NULL;
    c.user = "scdb";
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_EINVAL);
    assert_non_null(strstr(msg, "password_file"));
    c.user = NULL;
    c.timeout_ms = -1;
    assert_int_equal(scdb_remote_config_check(&c, msg, sizeof msg), SCDB_EINVAL);
    c.timeout_ms = 0;
    c.password_file = "/nonexistent/scdb-password";
    assert_int_equal(scdb_remote_open(&c, &r, msg, sizeof msg), SCDB_ENOTFOUND);
    assert_null(r);
    assert_non_null(strstr(msg, "password"));
    assert_int_equal(scdb_remote_open(NULL, &r, msg, sizeof msg), SCDB_EINVAL);
    scdb_remote_close(&r);
    scdb_remote_close(NULL);
}

static void test_key_names(void **state)
{
    char buf[SCDB_REMOTE_KEY_MAX], hex[33];
    chain c;
    (void)state;
    chain_make(&c, "unit-ns", 1, 1, 64, 0);
    /* a seed nobody listens on: lazy open works, the tier starts down */
    scdb_remote *r = open_tier("127.0.0.1:1", NULL, 0, 0);
    size_t n = scdb_remote_key(r, &c.keys[0], buf);
    assert_int_equal(n, 5 + 32);
    assert_memory_equal(buf, "scdb:", 5);
    assert_string_equal(buf + 5, scdb_key_hex(&c.keys[0], hex));
    scdb_remote_stat st;
    scdb_remote_stats(r, &st);
    assert_int_equal(st.up, 0);
    scdb_remote_close(&r);
    r = open_tier("127.0.0.1:1", "fleet7/", 0, 0);
    n = scdb_remote_key(r, &c.keys[0], buf);
    assert_int_equal(n, 7 + 32);
    assert_memory_equal(buf, "fleet7/", 7);
    scdb_remote_close(&r);
}

static void test_verify(void **state)
{
    chain c, other;
    scdb_block_info info;
    const void *payload;
    size_t len, len2;
    uint8_t *v, *w;
    (void)state;
    chain_make(&c, "unit-ns", 2, 3, 256, 0);
    chain_make(&other, "another-ns", 2, 3, 256, 0);
    scdb_remote_expect x = chain_expect(&c, 1);
    v = chain_value(&c, 1, &len);
    /* the right value */
    assert_int_equal(scdb_remote_verify(v, len, &c.keys[1], NULL, 0, &x, &info, &payload),
                     SCDB_OK);
    assert_memory_equal(payload, c.payload[1], 256);
    assert_int_equal(info.block_index, 1);
    /* as block 1 of a run that starts at 0 (prev key given) */
    scdb_remote_expect x0 = chain_expect(&c, 0);
    assert_int_equal(scdb_remote_verify(v, len, &c.keys[1], &c.keys[0], 1, &x0, &info, &payload),
                     SCDB_OK);
    /* truncated, garbage, a flipped payload byte, a flipped header byte */
    assert_int_equal(scdb_remote_verify(v, len - 1, &c.keys[1], NULL, 0, &x, &info, &payload),
                     SCDB_ETRUNC);
    assert_int_equal(scdb_remote_verify(v, 3, &c.keys[1], NULL, 0, &x, &info, &payload),
                     SCDB_ETRUNC);
    assert_int_equal(scdb_remote_verify("hello world, not a block value", 30, &c.keys[1], NULL,
                                        0, &x, &info, &payload), SCDB_EFORMAT);
    v[len - 7] ^= 0x40;
    assert_int_equal(scdb_remote_verify(v, len, &c.keys[1], NULL, 0, &x, &info, &payload),
                     SCDB_ECHECKSUM);
    v[len - 7] ^= 0x40;
    v[76] ^= 1;                                      /* token count */
    assert_int_equal(scdb_remote_verify(v, len, &c.keys[1], NULL, 0, &x, &info, &payload),
                     SCDB_ECHECKSUM);
    v[76] ^= 1;
    /* read under another key: the key field says so */
    assert_int_equal(scdb_remote_verify(v, len, &c.keys[2], &c.keys[1], 1, &x, &info, &payload),
                     SCDB_EMISMATCH);
    /* another namespace under our key (a foreign fleet, a collision) */
    {
        scdb_block_info fi;
        size_t cap = scdb_block_header_len(2) + 256;
        w = malloc(cap);
        chain_info(&c, 1, &fi);
        fi.ns = other.ns;
        assert_int_equal(scdb_block_value_encode(&fi, c.payload[1], w, cap, &len2), SCDB_OK);
        assert_int_equal(scdb_remote_verify(w, len2, &c.keys[1], NULL, 0, &x, &info, &payload),
                         SCDB_EMISMATCH);
        /* another parent, index, payload size */
        chain_info(&c, 1, &fi);
        fi.parent = other.keys[0];
        assert_int_equal(scdb_block_value_encode(&fi, c.payload[1], w, cap, &len2), SCDB_OK);
        assert_int_equal(scdb_remote_verify(w, len2, &c.keys[1], NULL, 0, &x, &info, &payload),
                         SCDB_EMISMATCH);
        chain_info(&c, 1, &fi);
        fi.block_index = 2;
        assert_int_equal(scdb_block_value_encode(&fi, c.payload[1], w, cap, &len2), SCDB_OK);
        assert_int_equal(scdb_remote_verify(w, len2, &c.keys[1], NULL, 0, &x, &info, &payload),
                         SCDB_EMISMATCH);
        chain_info(&c, 1, &fi);
        fi.payload_len = 128;
        fi.section_off[1] = 64;
        assert_int_equal(scdb_block_value_encode(&fi, c.payload[1], w, cap, &len2), SCDB_OK);
        assert_int_equal(scdb_remote_verify(w, len2, &c.keys[1], NULL, 0, &x, &info, &payload),
                         SCDB_EMISMATCH);
        free(w);
    }
    assert_int_equal(scdb_remote_verify(NULL, len, &c.keys[1], NULL, 0, &x, &info, &payload),
                     SCDB_EINVAL);
    assert_int_equal(scdb_remote_verify(v, len, &c.keys[1], NULL, 1, &x, &info, &payload),
                     SCDB_EINVAL);
    free(v);
}

/* No cluster: reads fail fast with a counted error, writes are retried and
 * given up, a full queue drops and counts; nothing blocks. */
static void test_no_cluster(void **state)
{
    chain c;
    scdb_remote_block got[4];
    scdb_remote_stat st;
    size_t n = 99;
    scdb_block_info info;
    (void)state;
    chain_make(&c, "unit-ns", 3, 10, 1024, 0);
    size_t vlen = scdb_block_header_len(2) + 1024;
    scdb_remote *r = open_tier("127.0.0.1:1", NULL, 1000, 3 * vlen);
    scdb_remote_expect x = chain_expect(&c, 0);
    assert_int_not_equal(scdb_remote_fetch(r, c.keys, 4, &x, got, &n), SCDB_OK);
    assert_int_equal(n, 0);
    assert_int_not_equal(scdb_remote_probe(r, c.keys, 4, &n), SCDB_OK);
    assert_int_equal(n, 0);
    size_t refused = 0;
    for (size_t b = 0; b < 10; b++) {
        chain_info(&c, b, &info);
        scdb_err e = scdb_remote_put(r, &info, c.payload[b]);
        assert_true(e == SCDB_OK || e == SCDB_EFULL);
        refused += e == SCDB_EFULL;
    }
    /* at most the queue's bound waiting plus one batch in flight */
    assert_true(refused >= 4);
    scdb_remote_stats(r, &st);
    assert_int_equal(st.queue_drops, refused);
    assert_int_equal(st.up, 0);
    assert_true(st.errors >= 2);
    assert_true(st.queued_bytes <= 6 * vlen);
    /* an oversize value is refused at once */
    chain_make(&c, "unit-ns", 3, 1, 4096, 0);
    scdb_remote_close(&r);
    r = open_tier("127.0.0.1:1", NULL, 0, 1024);
    chain_info(&c, 0, &info);
    assert_int_equal(scdb_remote_put(r, &info, c.payload[0]), SCDB_ETOOBIG);
    assert_int_equal(scdb_remote_put(NULL, &info, c.payload[0]), SCDB_EINVAL);
    scdb_remote_stats(r, &st);
    assert_int_equal(st.queue_drops, 1);
    scdb_remote_close(&r);   /* what is still queued is dropped and counted, no hang */
}

/* ------------------------------------------------ the store's on_written */

typedef struct written {
    scdb_key keys[16];
    uint64_t plen[16];
    uint8_t first[16];
    int n;
} written;

static void on_written(void *ctx, const scdb_block_info *info, const void *payload)
{
    written *w = ctx;
    if (w->n < 16) {
        w->keys[w->n] = info->key;
        w->plen[w->n] = info->payload_len;
        w->first[w->n] = payload ? *(const uint8_t *)payload : 0;
        w->n++;
    }
}

static void test_store_on_written(void **state)
{
    char dir[300];
    chain c;
    written w = {0};
    scdb_store *s = NULL;
    scdb_block_put puts[4];
    size_t stored;
    (void)state;
    snprintf(dir, sizeof dir, "%s/store-hook", g_tmp);
    chain_make(&c, "unit-ns", 4, 4, 256, 0);
    scdb_store_opts o = {.path = dir, .block_tokens = BT, .hot_capacity_bytes = 1 << 20,
                         .no_sync = 1, .on_written = on_written, .on_written_ctx = &w};
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    memset(puts, 0, sizeof puts);
    for (int b = 0; b < 4; b++) {
        puts[b].key = c.keys[b];
        if (b) puts[b].parent = c.keys[b - 1];
        puts[b].block_index = (uint32_t)b;
        puts[b].payload_dtype = SCDB_F16;
        puts[b].n_sections = 2;
        puts[b].section_off = c.sections;
        puts[b].payload = c.payload[b];
        puts[b].payload_len = c.plen;
    }
    /* blocks 0-1 new; block 2 from the remote tier: stored, not reported */
    puts[2].from_remote = 1;
    assert_int_equal(scdb_store_put_batch(s, &c.ns, puts, 3, &stored), SCDB_OK);
    assert_int_equal(stored, 3);
    assert_int_equal(w.n, 2);
    assert_memory_equal(w.keys[0].b, c.keys[0].b, 16);
    assert_memory_equal(w.keys[1].b, c.keys[1].b, 16);
    /* again: all stored already, nothing written, nothing reported */
    assert_int_equal(scdb_store_put_batch(s, &c.ns, puts, 3, &stored), SCDB_OK);
    assert_int_equal(w.n, 2);
    /* a replace is reported with the new value; block 3 new */
    uint8_t repl[256];
    memset(repl, 0xab, sizeof repl);
    puts[1].replace = 1;
    puts[1].payload = repl;
    puts[2].from_remote = 0;
    assert_int_equal(scdb_store_put_batch(s, &c.ns, puts + 1, 3, &stored), SCDB_OK);
    assert_int_equal(w.n, 4);
    assert_memory_equal(w.keys[2].b, c.keys[1].b, 16);
    assert_int_equal(w.first[2], 0xab);
    assert_memory_equal(w.keys[3].b, c.keys[3].b, 16);
    assert_int_equal(w.plen[3], 256);
    scdb_store_close(&s);
}

static const struct CMUnitTest unit_tests[] = {
    cmocka_unit_test(test_config_refused),
    cmocka_unit_test(test_key_names),
    cmocka_unit_test(test_verify),
    cmocka_unit_test(test_no_cluster),
    cmocka_unit_test(test_store_on_written),
};

/* ================================================================ tier */

static int cluster_setup(int masters, int replicas, int node_timeout_ms)
{
    char why[512];
    lc_options o = {.masters = masters, .replicas = replicas, .node_timeout_ms = node_timeout_ms};
    int r = lc_start(&o, &g_cluster, why, sizeof why);
    if (r != LC_OK) {
        print_message("cluster did not start: %s\n", why);
        return -1;
    }
    return 0;
}

static int tier_setup(void **state)
{
    (void)state;
    return cluster_setup(3, -1, 5000);
}

static int cluster_teardown(void **state)
{
    (void)state;
    lc_stop(&g_cluster);
    return 0;
}

/* SET a raw value under block key k (prefix "scdb:") on its master. */
static void plant(const scdb_key *k, const void *v, size_t len)
{
    char key[SCDB_REMOTE_KEY_MAX], hex[33];
    snprintf(key, sizeof key, "scdb:%s", scdb_key_hex(k, hex));
    int node = lc_master_of_slot(g_cluster, scdb_rc_slot(key, strlen(key)));
    assert_true(node >= 0);
    redisReply *rep = lc_cmd(g_cluster, node, "SET %s %b", key, v, len);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
}

static long long key_pttl(const char *prefix, const scdb_key *k)
{
    char key[SCDB_REMOTE_KEY_MAX], hex[33];
    snprintf(key, sizeof key, "%s%s", prefix, scdb_key_hex(k, hex));
    int node = lc_master_of_slot(g_cluster, scdb_rc_slot(key, strlen(key)));
    assert_true(node >= 0);
    redisReply *rep = lc_cmd(g_cluster, node, "PTTL %s", key);
    assert_non_null(rep);
    long long t = rep->integer;
    freeReplyObject(rep);
    return t;
}

static void put_chain(scdb_remote *r, const chain *c)
{
    scdb_block_info info;
    for (size_t b = 0; b < c->n; b++) {
        chain_info(c, b, &info);
        assert_int_equal(scdb_remote_put(r, &info, c->payload[b]), SCDB_OK);
    }
    wait_written(r);
}

/* Fetch keys[from..n) and check what came against the chain; returns the
 * count. */
static size_t fetch_check(scdb_remote *r, const chain *c, size_t from)
{
    scdb_remote_block got[16];
    size_t n = 0;
    scdb_remote_expect x = chain_expect(c, from);
    assert_int_equal(scdb_remote_fetch(r, c->keys + from, c->n - from, &x, got, &n), SCDB_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(got[i].info.block_index, from + i);
        assert_int_equal(got[i].info.payload_len, c->plen);
        assert_memory_equal(got[i].payload, c->payload[from + i], c->plen);
        size_t len;
        uint8_t *v = chain_value(c, from + i, &len);
        assert_int_equal(got[i].value_len, len);
        assert_memory_equal(got[i].value, v, len);     /* LMDB's bytes, exactly */
        free(v);
    }
    scdb_remote_blocks_free(got, n);
    return n;
}

static void test_write_read_ttl(void **state)
{
    chain c;
    scdb_remote_stat st;
    size_t n;
    (void)state;
    scdb_remote *r = open_tier(lc_seeds(g_cluster), NULL, 3600 * 1000, 0);
    chain_make(&c, "tier-ns", 10, 12, 4096, 0);
    put_chain(r, &c);
    scdb_remote_stats(r, &st);
    assert_int_equal(st.writes, 12);
    assert_int_equal(st.queue_drops, 0);
    assert_int_equal(st.up, 1);
    for (size_t b = 0; b < 12; b += 5) {
        long long t = key_pttl("scdb:", &c.keys[b]);
        assert_true(t > 3500 * 1000 && t <= 3600 * 1000);
    }
    assert_int_equal(fetch_check(r, &c, 0), 12);
    assert_int_equal(fetch_check(r, &c, 7), 5);
    assert_int_equal(scdb_remote_probe(r, c.keys, 12, &n), SCDB_OK);
    assert_int_equal(n, 12);
    /* a longer chain: the probe and the fetch stop at the first absent key */
    chain longer;
    chain_make(&longer, "tier-ns", 10, 14, 4096, 0);
    assert_memory_equal(longer.keys[11].b, c.keys[11].b, 16);
    assert_int_equal(scdb_remote_probe(r, longer.keys, 14, &n), SCDB_OK);
    assert_int_equal(n, 12);
    assert_int_equal(fetch_check(r, &longer, 0), 12);
    scdb_remote_stats(r, &st);
    assert_int_equal(st.hits, 12 + 5 + 12);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.invalid, 0);
    assert_int_equal(st.errors, 0);
    /* no TTL: none set */
    scdb_remote_close(&r);
    r = open_tier(lc_seeds(g_cluster), "nottl:", 0, 0);
    put_chain(r, &c);
    assert_int_equal(key_pttl("nottl:", &c.keys[0]), -1);
    scdb_remote_close(&r);
}

static void test_refused_values(void **state)
{
    chain c, other;
    scdb_remote_stat st0, st;
    size_t len;
    (void)state;
    scdb_remote *r = open_tier(lc_seeds(g_cluster), NULL, 0, 0);
    chain_make(&c, "tier-ns", 20, 6, 1024, 0);
    chain_make(&other, "another-fleet", 20, 6, 1024, 0);
    put_chain(r, &c);
    assert_int_equal(fetch_check(r, &c, 0), 6);
    scdb_remote_stats(r, &st0);
    uint8_t *good = chain_value(&c, 3, &len);
    uint8_t *bad = malloc(len);
    memcpy(bad, good, len);
    /* garbage */
    plant(&c.keys[3], "not a block value at all", 24);
    assert_int_equal(fetch_check(r, &c, 0), 3);
    /* truncated */
    plant(&c.keys[3], good, len - 100);
    assert_int_equal(fetch_check(r, &c, 0), 3);
    /* a wrong checksum (one payload bit) */
    bad[len - 1] ^= 1;
    plant(&c.keys[3], bad, len);
    assert_int_equal(fetch_check(r, &c, 0), 3);
    /* another namespace's value under our key */
    {
        scdb_block_info fi;
        size_t l2;
        chain_info(&c, 3, &fi);
        fi.ns = other.ns;
        assert_int_equal(scdb_block_value_encode(&fi, c.payload[3], bad, len, &l2), SCDB_OK);
        plant(&c.keys[3], bad, l2);
        assert_int_equal(fetch_check(r, &c, 0), 3);
    }
    /* another block's (valid) value under this key */
    {
        size_t l4;
        uint8_t *v4 = chain_value(&c, 4, &l4);
        plant(&c.keys[3], v4, l4);
        free(v4);
        assert_int_equal(fetch_check(r, &c, 0), 3);
    }
    scdb_remote_stats(r, &st);
    assert_int_equal(st.invalid - st0.invalid, 5);
    assert_int_equal(st.errors - st0.errors, 5);
    /* the broker rewrites it with the next put: whole again */
    plant(&c.keys[3], good, len);
    assert_int_equal(fetch_check(r, &c, 0), 6);
    free(good);
    free(bad);
    scdb_remote_close(&r);
}

static void test_replace_order_and_delete(void **state)
{
    chain v1, v2;
    scdb_block_info info;
    size_t n;
    (void)state;
    scdb_remote *r = open_tier(lc_seeds(g_cluster), NULL, 0, 0);
    chain_make(&v1, "tier-ns", 30, 8, 512, 1);
    chain_make(&v2, "tier-ns", 30, 8, 512, 2);
    for (int round = 0; round < 10; round++) {
        for (size_t b = 0; b < 8; b++) {
            chain_info(&v1, b, &info);
            assert_int_equal(scdb_remote_put(r, &info, v1.payload[b]), SCDB_OK);
            assert_int_equal(scdb_remote_put(r, &info, v2.payload[b]), SCDB_OK);
        }
        wait_written(r);
        assert_int_equal(fetch_check(r, &v2, 0), 8);     /* the later value won */
    }
    assert_int_equal(scdb_remote_del(r, &v2.keys[5]), SCDB_OK);
    wait_written(r);
    assert_int_equal(scdb_remote_probe(r, v2.keys, 8, &n), SCDB_OK);
    assert_int_equal(n, 5);
    scdb_remote_stat st;
    scdb_remote_stats(r, &st);
    assert_int_equal(st.deletes, 1);
    assert_int_equal(st.write_errors, 0);
    scdb_remote_close(&r);
}

static const struct CMUnitTest tier_tests[] = {
    cmocka_unit_test(test_write_read_ttl),
    cmocka_unit_test(test_refused_values),
    cmocka_unit_test(test_replace_order_and_delete),
};

/* ================================================================ main */

int main(int argc, char **argv)
{
    const char *group = argc > 1 ? argv[1] : "all";
    bool all = !strcmp(group, "all");
    const char *tmp = getenv("TMPDIR");
    int failed = 0;

    if (!all && strcmp(group, "unit") && strcmp(group, "tier") && strcmp(group, "broker") &&
        strcmp(group, "faults")) {
        fprintf(stderr, "usage: %s [unit|tier|broker|faults|all]\n", argv[0]);
        return 2;
    }
    snprintf(g_tmp, sizeof g_tmp, "%s/test_remote.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    if (all || !strcmp(group, "unit"))
        failed |= cmocka_run_group_tests_name("remote_unit", unit_tests, NULL, NULL);
    if (!all && strcmp(group, "unit")) {
        char why[256];
        if (!lc_available(why, sizeof why)) {
            printf("skipped: %s\n", why);
            scdb_rm_tree(g_tmp);
            return 77;
        }
    }
    if (all || !strcmp(group, "tier"))
        failed |= cmocka_run_group_tests_name("remote_tier", tier_tests, tier_setup,
                                              cluster_teardown);
    scdb_rm_tree(g_tmp);
    return failed ? 1 : 0;
}
