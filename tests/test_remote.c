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
 * (store/local_cluster.h), so ctest -j2 is safe.  Nothing here
 * times anything: waits are polls with generous "does not hang" limits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "helpers/broker_kv.h"
#include "helpers/broker_proc.h"
#include "helpers/log_lines.h"
#include "local_cluster.h"
#include "helpers/signal_pid.h"
#include "redis_cluster.h"
#include "remote_tier.h"
#include "scdb.h"
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
    int replaced[16];
    int n;
} written;

static void on_written(void *ctx, const scdb_block_info *info, const void *payload, int replaced)
{
    written *w = ctx;
    if (w->n < 16) {
        w->keys[w->n] = info->key;
        w->plen[w->n] = info->payload_len;
        w->first[w->n] = payload ? *(const uint8_t *)payload : 0;
        w->replaced[w->n] = replaced;
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
    assert_false(w.replaced[0] || w.replaced[1]);
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
    assert_true(w.replaced[2]);                 /* said so: it goes on the replace log */
    assert_memory_equal(w.keys[3].b, c.keys[3].b, 16);
    assert_false(w.replaced[3]);
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

/* A GET refreshes the block's TTL (GETEX): a hot prefix does not expire
 * from the cluster while it is read (issue 25 item 2). */
static void test_read_refreshes_ttl(void **state)
{
    chain c;
    (void)state;
    scdb_remote *r = open_tier(lc_seeds(g_cluster), "ttlread:", 3600 * 1000, 0);
    chain_make(&c, "tier-ns", 40, 4, 512, 0);
    put_chain(r, &c);
    for (size_t b = 0; b < 4; b++) {        /* as if written long ago */
        char key[SCDB_REMOTE_KEY_MAX];
        size_t kl = scdb_remote_key(r, &c.keys[b], key);
        key[kl] = 0;
        int node = lc_master_of_slot(g_cluster, scdb_rc_slot(key, kl));
        redisReply *rp = lc_cmd(g_cluster, node, "PEXPIRE %s 100000", key);
        assert_non_null(rp);
        assert_int_equal(rp->integer, 1);
        freeReplyObject(rp);
        assert_true(key_pttl("ttlread:", &c.keys[b]) <= 100000);
    }
    assert_int_equal(fetch_check(r, &c, 2), 2);       /* blocks 2, 3 read */
    for (size_t b = 0; b < 4; b++) {
        long long t = key_pttl("ttlread:", &c.keys[b]);
        if (b < 2) assert_true(t <= 100000);         /* not read: as it was */
        else assert_true(t > 3500 * 1000 && t <= 3600 * 1000);
    }
    scdb_remote_close(&r);
}

/* What a replace log watcher was handed. */
typedef struct seen {
    pthread_mutex_t mu;
    scdb_key keys[64];
    size_t n;
} seen;

static void on_seen(void *ctx, const scdb_key *keys, size_t n)
{
    seen *w = ctx;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < n && w->n < 64; i++) w->keys[w->n++] = keys[i];
    pthread_mutex_unlock(&w->mu);
}

static size_t seen_wait(seen *w, size_t want)
{
    size_t n = 0;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&w->mu);
        n = w->n;
        pthread_mutex_unlock(&w->mu);
        if (n >= want) break;
        nap_ms(10);
    }
    return n;
}

/* The replace log (remote_tier.h, "REPLACES AND DELETES"): a replace queued on one tier
 * is announced, after its SET, to every other tier watching, not to its
 * own; a watcher opened later reads the log from its start; a log that is
 * deleted and written anew is read again from 0 (counted). */
static void test_replace_log(void **state)
{
    chain c, v2;
    scdb_block_info info;
    scdb_remote_stat st;
    seen s1 = {.mu = PTHREAD_MUTEX_INITIALIZER}, s2 = {.mu = PTHREAD_MUTEX_INITIALIZER},
         s3 = {.mu = PTHREAD_MUTEX_INITIALIZER};
    (void)state;
    scdb_remote *r1 = open_tier(lc_seeds(g_cluster), "rlog:", 0, 0);
    scdb_remote *r2 = open_tier(lc_seeds(g_cluster), "rlog:", 0, 0);
    scdb_remote_watch_replaces(r1, on_seen, &s1);
    scdb_remote_watch_replaces(r2, on_seen, &s2);
    chain_make(&c, "tier-ns", 50, 4, 512, 0);
    chain_make(&v2, "tier-ns", 50, 4, 512, 7);
    put_chain(r1, &c);                       /* plain puts: no record */
    for (size_t b = 1; b <= 2; b++) {
        chain_info(&v2, b, &info);
        assert_int_equal(scdb_remote_replace(r1, &info, v2.payload[b]), SCDB_OK);
    }
    wait_written(r1);
    assert_int_equal(seen_wait(&s2, 2), 2);
    assert_memory_equal(s2.keys[0].b, c.keys[1].b, 16);
    assert_memory_equal(s2.keys[1].b, c.keys[2].b, 16);
    {   /* a record is read after its SET: the new values are there */
        chain v3;
        chain_make(&v3, "tier-ns", 50, 3, 512, 7);
        assert_int_equal(fetch_check(r2, &v3, 1), 2);
    }
    scdb_remote_stats(r1, &st);
    assert_int_equal(st.replace_records, 2);
    nap_ms(3 * SCDB_REMOTE_REPLACE_POLL_MS);
    assert_int_equal(seen_wait(&s1, 0), 0);          /* r1's own: not handed back */
    /* opened later: the log from its start */
    scdb_remote *r3 = open_tier(lc_seeds(g_cluster), "rlog:", 0, 0);
    scdb_remote_watch_replaces(r3, on_seen, &s3);
    assert_int_equal(seen_wait(&s3, 2), 2);
    /* the log deleted (an operator; eviction): written anew, read from 0 */
    {
        const char *lk = "rlog:" SCDB_REMOTE_LOG_NAME;
        redisReply *rp = lc_cmd(g_cluster, lc_master_of_slot(g_cluster, scdb_rc_slot(lk, strlen(lk))),
                                "DEL %s", lk);
        assert_non_null(rp);
        assert_int_equal(rp->integer, 1);
        freeReplyObject(rp);
    }
    nap_ms(3 * SCDB_REMOTE_REPLACE_POLL_MS);
    chain_info(&v2, 3, &info);
    assert_int_equal(scdb_remote_replace(r1, &info, v2.payload[3]), SCDB_OK);
    wait_written(r1);
    assert_int_equal(seen_wait(&s2, 3), 3);
    assert_memory_equal(s2.keys[2].b, c.keys[3].b, 16);
    scdb_remote_stats(r2, &st);
    assert_int_equal(st.replace_seen, 3);
    assert_int_equal(st.replace_log_resets, 1);
    /* stopped: nothing more handed over */
    scdb_remote_watch_replaces(r2, NULL, NULL);
    chain_info(&v2, 0, &info);
    assert_int_equal(scdb_remote_replace(r1, &info, v2.payload[0]), SCDB_OK);
    wait_written(r1);
    assert_int_equal(seen_wait(&s3, 4), 4);          /* r3 still watches */
    nap_ms(2 * SCDB_REMOTE_REPLACE_POLL_MS);
    assert_int_equal(seen_wait(&s2, 0), 3);
    /* an explicit delete is announced too (issue 42 item 3), once its DEL
     * is acknowledged: the block is gone when a watcher hears of it */
    assert_int_equal(scdb_remote_del(r1, &c.keys[3]), SCDB_OK);
    wait_written(r1);
    assert_int_equal(seen_wait(&s3, 5), 5);
    assert_memory_equal(s3.keys[4].b, c.keys[3].b, 16);
    {
        size_t n;
        assert_int_equal(scdb_remote_probe(r3, c.keys, 4, &n), SCDB_OK);
        assert_int_equal(n, 3);
    }
    scdb_remote_close(&r3);
    scdb_remote_close(&r2);
    scdb_remote_close(&r1);
}

static const struct CMUnitTest tier_tests[] = {
    cmocka_unit_test(test_read_refreshes_ttl),
    cmocka_unit_test(test_replace_log),
    cmocka_unit_test(test_write_read_ttl),
    cmocka_unit_test(test_refused_values),
    cmocka_unit_test(test_replace_order_and_delete),
};

/* ============================================================== brokers */

/* A broker process of the fleet: its own data dir (LMDB), socket, log. */
typedef struct bproc {
    char name[32], ep[400], cfg[400], log[400], data[400];
    pid_t pid;
} bproc;

static int g_brokers;       /* names: b1, b2, ... (fresh data dirs) */

static void write_file(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void write_file(const char *path, const char *fmt, ...)
{
    FILE *f = fopen(path, "w");
    va_list ap;
    assert_non_null(f);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

/* A new broker's config; `extra` more [broker] keys, `remote` the
 * [remote] keys ("" none). */
static void bproc_conf_extra(bproc *bp, const char *extra, const char *remote)
{
    memset(bp, 0, sizeof *bp);
    snprintf(bp->name, sizeof bp->name, "b%d", ++g_brokers);
    snprintf(bp->ep, sizeof bp->ep, "ipc://%s/%s.sock", g_tmp, bp->name);
    snprintf(bp->cfg, sizeof bp->cfg, "%s/%s.ini", g_tmp, bp->name);
    snprintf(bp->log, sizeof bp->log, "%s/%s.log", g_tmp, bp->name);
    snprintf(bp->data, sizeof bp->data, "%s/%s.data", g_tmp, bp->name);
    write_file(bp->cfg,
               "[broker]\nendpoint = %s\ndata_dir = %s\nworkers = 2\nheartbeat_ms = 300\n"
               "heartbeat_timeout_ms = 10000\nhot_capacity = 64MiB\nno_sync = 1\n"
               "drain_timeout_ms = 10000\nlog_level = info\n%s\n"
               "[model m16]\nn_layers = 4\nn_kv_heads = 2\nhead_dim = 16\nmax_seq_len = 4096\n"
               "raw_dtype = f16\n\n%s%s\n",
               bp->ep, bp->data, extra, remote[0] ? "[remote]\n" : "", remote);
}

static void bproc_conf(bproc *bp, const char *remote)
{
    bproc_conf_extra(bp, "", remote);
}

static void remote_keys(char *buf, size_t len, const char *extra)
{
    snprintf(buf, len, "cluster = %s\ntimeout_ms = 500\nttl = 3600\n%s", lc_seeds(g_cluster),
             extra ? extra : "");
}

static scdb *bconnect(const bproc *bp, int timeout_ms)
{
    scdb_opts o = {.endpoint = bp->ep, .timeout_ms = timeout_ms, .name = "test_remote"};
    scdb *h = NULL;
    scdb_connect(&o, &h);
    return h;
}

/* Start it; 0 when it answers, else its exit status (it stopped). */
static int bproc_start(bproc *bp)
{
    int st;
    bp->pid = bp_spawn(SCDB_BROKER_BIN, bp->cfg, bp->log);
    assert_true(bp->pid > 0);
    if (bp_wait_ready(bp->pid, bp->ep, 60, &st) == 0) return 0;
    assert_true(st >= 0);     /* it stopped, rather than never answering */
    bp->pid = 0;
    return st;
}

static int bproc_stop(bproc *bp)
{
    double until = scdb_now() + 30;
    int st;
    if (bp->pid <= 0) return -1;
    signal_pid(bp->pid, SIGTERM);
    for (;;) {
        pid_t r = waitpid(bp->pid, &st, WNOHANG);
        if (r == bp->pid) break;
        if (scdb_now() > until) {
            signal_pid(bp->pid, SIGKILL);
            waitpid(bp->pid, &st, 0);
            break;
        }
        nap_ms(10);
    }
    bp->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Lines of the broker's log that contain `what` (-1: no log to read). */
static int log_count(const bproc *bp, const char *what)
{
    return scdb_test_count_lines(bp->log, what);
}

/* Print the first log line of bp that contains `what` (what a user sees). */
static void log_show(const bproc *bp, const char *what)
{
    char line[2048];
    FILE *f = fopen(bp->log, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strstr(line, what)) {
            print_message("%s: %s", bp->name, line);
            break;
        }
    fclose(f);
}

/* Print the last n lines of bp's log. */
static void log_tail(const bproc *bp, int n)
{
    char line[64][512];
    int k = 0;
    FILE *f;
    if (n < 1) return;
    if (n > 64) n = 64;
    if (!(f = fopen(bp->log, "r"))) return;
    while (fgets(line[k % n], sizeof line[0], f)) k++;
    fclose(f);
    for (int i = k > n ? k - n : 0; i < k; i++) print_message("%s: %s", bp->name, line[i % n]);
}

/* Run argv with stdout to `out`; its exit status. */
static int run_to_file(const char *const *argv, const char *out)
{
    int st;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) dup2(fd, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static double json_num(const cJSON *o, const char *a, const char *b, const char *c)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    if (c) x = cJSON_GetObjectItemCaseSensitive(x, c);
    assert_true(cJSON_IsNumber(x) || cJSON_IsBool(x));
    return cJSON_IsBool(x) ? (double)cJSON_IsTrue(x) : x->valuedouble;
}

static scdb *bclient(const bproc *bp, scdb_role role)
{
    scdb *h = bconnect(bp, 10000);
    assert_non_null(h);
    scdb_err e = scdb_register(h, role, "m16", NULL, NULL);
    if (e) print_message("register: %s\n", scdb_last_error(h));
    assert_int_equal(e, SCDB_OK);
    return h;
}

static scdb_stat bstats(const bproc *bp)
{
    scdb_stat st;
    scdb *h = bconnect(bp, 10000);
    assert_non_null(h);
    assert_int_equal(scdb_stats(h, &st), SCDB_OK);
    scdb_close(&h);
    return st;
}

/* Poll until the broker's remote writes have all been sent. */
static void bwait_written(const bproc *bp)
{
    for (int i = 0; i < 3000; i++) {
        scdb_stat st = bstats(bp);
        if (st.remote_pending == 0) return;
        nap_ms(10);
    }
    fail_msg("%s: remote writes still pending after 30 s", bp->name);
}

/* The producer's KV of prefix seed (n blocks), put on p. */
static void put_prefix(scdb *p, uint32_t seed, int n)
{
    int32_t t[16 * BT];
    scdb_kv_cache *c = NULL;
    scdb_put_result pr;
    assert_true(n <= 16);
    assert_int_equal(scdb_kv_cache_new(4, 2, 16, n * BT, &c), SCDB_OK);
    bkv_tokens(seed, t, (size_t)n * BT);
    bkv_fill(seed, c, n * BT);
    scdb_err e = scdb_put_cache(p, t, (size_t)n * BT, c, &pr);
    if (e) print_message("put: %s\n", scdb_last_error(p));
    assert_int_equal(e, SCDB_OK);
    assert_int_equal(pr.n_stored, n);
    scdb_kv_cache_free(&c);
}

/* Replace blocks [first, first + count) of prefix seed (n blocks) on p
 * with prefix `with`'s KV at those positions. */
static scdb_put_result replace_blocks(scdb *p, uint32_t seed, int n, int first, int count,
                                      uint32_t with)
{
    int32_t t[16 * BT];
    scdb_kv_cache *kv = NULL;
    size_t bb = scdb_get_info(p)->block_bytes;
    uint8_t *pl = malloc((size_t)count * bb);
    scdb_put_result pr;
    assert_non_null(pl);
    assert_int_equal(scdb_kv_cache_new(4, 2, 16, n * BT, &kv), SCDB_OK);
    bkv_fill(with, kv, n * BT);
    for (int k = 0; k < count; k++)
        assert_int_equal(scdb_raw_block(kv, (first + k) * BT, BT, SCDB_F16, pl + k * bb, bb), SCDB_OK);
    bkv_tokens(seed, t, (size_t)n * BT);
    assert_int_equal(scdb_replace(p, t, (size_t)n * BT, (uint32_t)first, pl, (size_t)count * bb, &pr),
                     SCDB_OK);
    free(pl);
    scdb_kv_cache_free(&kv);
    return pr;
}

/* Get prefix seed (n blocks) into a fresh arena of consumer h; every slot
 * written must hold the producer's bytes.  Returns the status; *gr, and
 * *arena when asked (else freed). */
static scdb_err get_prefix(scdb *h, uint32_t seed, int n, scdb_get_result *gr, scdb_arena **keep)
{
    int32_t t[16 * BT];
    scdb_arena *a = NULL;
    scdb_err e;
    bkv_tokens(seed, t, (size_t)n * BT);
    assert_int_equal(scdb_arena_new(h, 16 * BT, &a), SCDB_OK);
    memset(gr, 0, sizeof *gr);
    e = scdb_get(h, t, (size_t)n * BT, a, 0, 0, gr);
    if (!e && gr->tokens_written) {
        long bad = bkv_check(seed, scdb_arena_cache(a), 0, 0, (int)gr->tokens_written, 0, 1);
        if (bad) print_message("prefix %u: element %ld differs\n", seed, bad - 1);
        assert_int_equal(bad, 0);
    }
    if (keep) *keep = a;
    else scdb_arena_free(&a);
    return e;
}

static scdb_lookup_result lookup_prefix(scdb *h, uint32_t seed, int n)
{
    int32_t t[16 * BT];
    scdb_lookup_result lr;
    bkv_tokens(seed, t, (size_t)n * BT);
    memset(&lr, 0, sizeof lr);
    assert_int_equal(scdb_lookup(h, t, (size_t)n * BT, &lr), SCDB_OK);
    return lr;
}

/* The same slots of two arenas hold the same bytes. */
static void assert_same_arena(scdb_arena *x, scdb_arena *y, int n)
{
    scdb_kv_cache *a = scdb_arena_cache(x), *b = scdb_arena_cache(y);
    size_t d = (size_t)scdb_kv_dim(a);
    assert_memory_equal(a->pos, b->pos, (size_t)n * sizeof *a->pos);
    for (int l = 0; l < a->n_layers; l++) {
        assert_memory_equal(scdb_kv_k(a, l, 0), scdb_kv_k(b, l, 0), (size_t)n * d * sizeof(float));
        assert_memory_equal(scdb_kv_v(a, l, 0), scdb_kv_v(b, l, 0), (size_t)n * d * sizeof(float));
    }
}

/* The m16 raw namespace's keys of prefix seed. */
static void prefix_keys(uint32_t seed, int n, scdb_key *keys)
{
    int32_t t[16 * BT];
    scdb_ns ns;
    size_t nk;
    bkv_tokens(seed, t, (size_t)n * BT);
    assert_int_equal(scdb_ns_make("raw/m16", 7, SCDB_F16, 1, &ns), SCDB_OK);
    assert_int_equal(scdb_block_key_chain(&ns, t, (size_t)n * BT, BT, keys, 16, &nk), SCDB_OK);
}

static bproc g_a, g_b;      /* the broker group's two brokers */

static int broker_setup(void **state)
{
    char rk[1024];
    (void)state;
    if (cluster_setup(3, -1, 5000)) return -1;
    remote_keys(rk, sizeof rk, NULL);
    bproc_conf(&g_a, rk);
    bproc_conf_extra(&g_b, "metrics_listen = 127.0.0.1:0\n", rk);
    if (bproc_start(&g_a) || bproc_start(&g_b)) {
        print_message("a broker did not start (logs in %s)\n", g_tmp);
        return -1;
    }
    return 0;
}

/* B's /metrics holds the remote tier's counters (curl; promtool when
 * there) -- skipped with a message without curl. */
static void check_metrics(const bproc *bp, uint64_t hits)
{
    char cmd[1600], out[400], line[2048], want[128];
    int port = 0, found = 0;
    FILE *f = fopen(bp->log, "r");
    assert_non_null(f);
    while (!port && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "metrics: http://127.0.0.1:");
        if (p) port = atoi(p + strlen("metrics: http://127.0.0.1:"));
    }
    fclose(f);
    assert_true(port > 0);
    if (system("command -v curl >/dev/null 2>&1")) {
        print_message("no curl: /metrics not checked\n");
        return;
    }
    snprintf(out, sizeof out, "%s/metrics.txt", g_tmp);
    snprintf(cmd, sizeof cmd, "curl -s --max-time 30 -o %s http://127.0.0.1:%d/metrics", out, port);
    assert_int_equal(system(cmd), 0);
    snprintf(want, sizeof want, "scdb_remote_blocks_total{result=\"hit\"} %llu",
             (unsigned long long)hits);
    f = fopen(out, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        found += !strncmp(line, want, strlen(want)) || !strncmp(line, "scdb_remote_up 1", 16);
    fclose(f);
    assert_int_equal(found, 2);
    if (!system("command -v promtool >/dev/null 2>&1")) {
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s >&2", out);
        assert_int_equal(system(cmd), 0);
    }
}

static int broker_teardown(void **state)
{
    int ra = 0, rb = 0;
    (void)state;
    /* a clean exit 0 (under ASan: no error, no leak at exit) */
    if (g_a.pid > 0) ra = bproc_stop(&g_a);
    if (g_b.pid > 0) rb = bproc_stop(&g_b);
    lc_stop(&g_cluster);
    if (ra || rb) print_message("brokers exited with %d and %d (logs %s, %s)\n", ra, rb, g_a.log,
                                g_b.log);
    return ra || rb ? -1 : 0;
}

/* Put on A; lookup + get on B, which has nothing locally: byte-identical to
 * A's own get; B then keeps the blocks (its lookup index knows them). */
static void test_put_a_get_b(void **state)
{
    scdb_get_result ga, gb;
    scdb_arena *aa = NULL, *ab = NULL;
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *ca = bclient(&g_a, SCDB_CONSUMER);
    scdb *cb = bclient(&g_b, SCDB_CONSUMER);
    assert_true(scdb_get_info(cb)->remote_tier);
    put_prefix(pa, 1, 8);
    bwait_written(&g_a);
    scdb_lookup_result lr = lookup_prefix(cb, 1, 8);
    assert_int_equal(lr.n_full, 8);
    assert_int_equal(lr.n_matched, 8);
    assert_int_equal(lr.n_remote, 8);
    scdb_stat hs;
    assert_int_equal(scdb_stats(cb, &hs), SCDB_OK);
    assert_int_equal(hs.remote_lookups, 1);     /* the index answered 0, then one request */
    assert_int_equal(get_prefix(ca, 1, 8, &ga, &aa), SCDB_OK);
    assert_int_equal(ga.remote_blocks, 0);
    assert_int_equal(get_prefix(cb, 1, 8, &gb, &ab), SCDB_OK);
    assert_int_equal(gb.tokens_written, 8 * BT);
    assert_int_equal(gb.n_matched, 8);
    assert_int_equal(gb.remote_blocks, 8);
    assert_same_arena(aa, ab, 8 * BT);
    scdb_arena_free(&aa);
    scdb_arena_free(&ab);
    /* kept locally (through B's writer): lookups become local, gets too */
    for (int i = 0; i < 1000 && lookup_prefix(cb, 1, 8).n_remote; i++) nap_ms(10);
    /* the writer attaches the hot copies just after the commit that made
     * the lookups local (store_write.c, hot_after_put): a get in between
     * reads LMDB, so wait for them (under load that window was hit) */
    for (int i = 0; i < 1000 && bstats(&g_b).hot_blocks < 8; i++) nap_ms(10);
    lr = lookup_prefix(cb, 1, 8);
    assert_int_equal(lr.n_matched, 8);
    assert_int_equal(lr.n_remote, 0);
    assert_int_equal(get_prefix(cb, 1, 8, &gb, NULL), SCDB_OK);
    assert_int_equal(gb.tokens_written, 8 * BT);
    assert_int_equal(gb.remote_blocks, 0);
    scdb_stat sb = bstats(&g_b);
    assert_int_equal(sb.remote, 1);
    assert_int_equal(sb.remote_hits, 8);
    assert_int_equal(sb.remote_inserted, 8);
    assert_int_equal(sb.remote_invalid, 0);
    assert_int_equal(sb.remote_writes, 0);      /* fetched blocks are not written back */
    assert_true(sb.get_hot_hits >= 8);          /* the second get read the hot tier */
    /* `scdb stats` shows the remote tier: the table and the JSON (one
     * field table: the same keys in both) */
    {
        char out[400], *txt = NULL;
        size_t len;
        const char *tab[] = {SCDB_CLI_BIN, "stats", "--endpoint", g_b.ep, NULL};
        const char *js[] = {SCDB_CLI_BIN, "stats", "--endpoint", g_b.ep, "--json", NULL};
        snprintf(out, sizeof out, "%s/stats.out", g_tmp);
        assert_int_equal(run_to_file(tab, out), 0);
        assert_int_equal(scdb_read_file(out, 1 << 20, &txt, &len), SCDB_OK);
        assert_non_null(strstr(txt, "| remote tier | |"));
        assert_non_null(strstr(txt, "| blocks read from the cluster (hits) | 8 |"));
        assert_non_null(strstr(txt, "| cluster answering (1: up) | 1 |"));
        assert_non_null(strstr(txt, "| writes dropped (queue full) | 0 |"));
        free(txt);
        assert_int_equal(run_to_file(js, out), 0);
        assert_int_equal(scdb_read_file(out, 1 << 20, &txt, &len), SCDB_OK);
        cJSON *j = cJSON_Parse(txt);
        free(txt);
        assert_non_null(j);
        assert_int_equal(json_num(j, "remote_hits", NULL, NULL), 8);
        assert_int_equal(json_num(j, "remote_up", NULL, NULL), 1);
        assert_int_equal(json_num(j, "remote_queue_drops", NULL, NULL), 0);
        assert_int_equal(json_num(j, "remote_inserted", NULL, NULL), 8);
        assert_true(json_num(j, "remote_bytes_read", NULL, NULL) > 8 * 32768);
        assert_true(json_num(j, "get_hot_hits", NULL, NULL) >= 8);
        check_metrics(&g_b, 8);
        cJSON_Delete(j);
    }
    /* a longer prompt: B's local 8 blocks, then A's 4 more from the cluster */
    put_prefix(pa, 1, 12);
    bwait_written(&g_a);
    lr = lookup_prefix(cb, 1, 12);
    assert_int_equal(lr.n_matched, 12);
    assert_int_equal(lr.n_remote, 4);
    assert_int_equal(get_prefix(cb, 1, 12, &gb, NULL), SCDB_OK);
    assert_int_equal(gb.tokens_written, 12 * BT);
    assert_int_equal(gb.remote_blocks, 4);
    /* a prompt nobody stored: one request, nothing matched, no error */
    lr = lookup_prefix(cb, 999, 4);
    assert_int_equal(lr.n_matched, 0);
    assert_int_equal(get_prefix(cb, 999, 4, &gb, NULL), SCDB_OK);
    assert_int_equal(gb.tokens_written, 0);
    /* a put on B that continues A's prefix where only the cluster has the
     * parents (a lookup found them, no get brought them in) */
    scdb *pb = bclient(&g_b, SCDB_PRODUCER);
    put_prefix(pa, 2, 6);
    bwait_written(&g_a);
    {
        int32_t t[8 * BT];
        scdb_kv_cache *c = NULL;
        uint8_t *pl = malloc(2 * 4 * BT * 32 * 2 * 2);
        scdb_put_result pr;
        bkv_tokens(2, t, 8 * BT);
        assert_int_equal(scdb_kv_cache_new(4, 2, 16, 8 * BT, &c), SCDB_OK);
        bkv_fill(2, c, 8 * BT);
        size_t bb = scdb_get_info(pb)->block_bytes;
        for (int k = 0; k < 2; k++)
            assert_int_equal(scdb_raw_block(c, (6 + k) * BT, BT, SCDB_F16, pl + k * bb, bb),
                             SCDB_OK);
        scdb_err e = scdb_put(pb, t, 8 * BT, 6, pl, 2 * bb, &pr);
        if (e) print_message("put: %s\n", scdb_last_error(pb));
        assert_int_equal(e, SCDB_OK);
        assert_int_equal(pr.n_stored, 8);
        assert_int_equal(pr.n_new, 2);
        free(pl);
        scdb_kv_cache_free(&c);
    }
    assert_int_equal(get_prefix(cb, 2, 8, &gb, NULL), SCDB_OK);
    assert_int_equal(gb.tokens_written, 8 * BT);
    assert_int_equal(gb.remote_blocks, 0);
    scdb_close(&pb);
    scdb_close(&pa);
    scdb_close(&ca);
    scdb_close(&cb);
}

/* A replace on A is written to the cluster: a broker that fetches after it
 * gets the new value. */
static void test_replace_reaches_new_broker(void **state)
{
    char rk[1024];
    bproc c;
    scdb_get_result g;
    scdb_arena *a = NULL;
    int32_t t[4 * BT];
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER);
    put_prefix(pa, 3, 4);
    /* block 1 replaced with prefix 33's KV at those positions */
    replace_blocks(pa, 3, 4, 1, 1, 33);
    bkv_tokens(3, t, 4 * BT);
    bwait_written(&g_a);
    remote_keys(rk, sizeof rk, NULL);
    bproc_conf(&c, rk);
    assert_int_equal(bproc_start(&c), 0);
    scdb *cc = bclient(&c, SCDB_CONSUMER);
    assert_int_equal(scdb_arena_new(cc, 4 * BT, &a), SCDB_OK);
    assert_int_equal(scdb_get(cc, t, 4 * BT, a, 0, 0, &g), SCDB_OK);
    assert_int_equal(g.tokens_written, 4 * BT);
    assert_int_equal(g.remote_blocks, 4);
    scdb_kv_cache *kv = scdb_arena_cache(a);
    assert_int_equal(bkv_check(3, kv, 0, 0, BT, 0, 1), 0);
    assert_int_equal(bkv_check(33, kv, BT, BT, BT, BT, 1), 0);   /* the replaced value */
    assert_int_equal(bkv_check(3, kv, 2 * BT, 2 * BT, 2 * BT, 2 * BT, 1), 0);
    scdb_arena_free(&a);
    scdb_close(&cc);
    scdb_close(&pa);
    assert_int_equal(bproc_stop(&c), 0);
}

/* After a replace the fleet agrees (issue 25 item 2): B fetched and kept
 * the old block 1 from the cluster; A replaces it; within the bound of
 * remote_tier.h ("REPLACES AND DELETES": A's write, B's poll of the replace log, one
 * fetch) B serves the new bytes from its own store.  The replace says
 * what it did: n_replaced 1, n_new 0 (it answered n_new for blocks that
 * existed). */
static void test_replace_reaches_fleet(void **state)
{
    scdb_get_result g;
    scdb_put_result pr;
    int32_t t[4 * BT];
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *cb = bclient(&g_b, SCDB_CONSUMER);
    put_prefix(pa, 5, 4);
    bwait_written(&g_a);
    assert_int_equal(get_prefix(cb, 5, 4, &g, NULL), SCDB_OK);
    assert_int_equal(g.remote_blocks, 4);
    for (int i = 0; i < 1000 && lookup_prefix(cb, 5, 4).n_remote; i++) nap_ms(10);
    assert_int_equal(lookup_prefix(cb, 5, 4).n_remote, 0);   /* B holds the old ones */
    /* blocks 1 and 2 replaced on A with prefix 55's KV at those positions */
    pr = replace_blocks(pa, 5, 4, 1, 2, 55);
    assert_int_equal(pr.n_new, 0);                     /* said 2: blocks that existed */
    assert_int_equal(pr.n_replaced, 2);
    bkv_tokens(5, t, 4 * BT);
    double t0 = scdb_now();
    bwait_written(&g_a);
    /* B converges: its local copies refreshed, read locally */
    scdb_arena *a = NULL;
    int same = 0;
    assert_int_equal(scdb_arena_new(cb, 4 * BT, &a), SCDB_OK);
    while (scdb_now() - t0 < 20) {
        double tg = scdb_now();
        scdb_err ge = scdb_get(cb, t, 4 * BT, a, 0, 0, &g);
        if (ge) {   /* say what and when, and what B logged: not reproducible at will */
            print_message("get on B failed %.0f ms into convergence, after %.0f ms: %s (%s)\n",
                          (tg - t0) * 1e3, (scdb_now() - tg) * 1e3, scdb_strerror(ge),
                          scdb_last_error(cb));
            log_tail(&g_b, 20);
        }
        assert_int_equal(ge, SCDB_OK);
        assert_int_equal(g.tokens_written, 4 * BT);
        scdb_kv_cache *kv = scdb_arena_cache(a);
        same = bkv_check(55, kv, BT, BT, 2 * BT, BT, 1) == 0;
        if (same) {
            assert_int_equal(g.remote_blocks, 0);                     /* from B's own store */
            assert_int_equal(bkv_check(5, kv, 0, 0, BT, 0, 1), 0);
            assert_int_equal(bkv_check(5, kv, 3 * BT, 3 * BT, BT, 3 * BT, 1), 0);
            break;
        }
        nap_ms(20);
    }
    print_message("B served the replaced blocks %.0f ms after the replace was acknowledged\n",
                  (scdb_now() - t0) * 1e3);
    assert_true(same);
    scdb_stat sb = bstats(&g_b);
    assert_true(sb.remote_refreshed >= 2);
    scdb_arena_free(&a);
    scdb_close(&cb);
    scdb_close(&pa);
}

/* After a delete the fleet agrees (issue 42 item 3): B fetched and kept
 * blocks 0-3 from the cluster; A deletes blocks 2 and 3; within the bound
 * of a replace (remote_tier.h, "REPLACES AND DELETES": A's DEL and its
 * record, B's poll of the replace log, one fetch that finds nothing) B
 * drops its copies: its lookups and gets stop at block 2, and nothing of
 * the deleted blocks is left in the cluster to fetch again. */
static void test_delete_reaches_fleet(void **state)
{
    scdb_get_result g;
    scdb_lookup_result lr;
    int32_t t[4 * BT];
    uint32_t nd = 0;
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *cb = bclient(&g_b, SCDB_CONSUMER);
    put_prefix(pa, 6, 4);
    bwait_written(&g_a);
    assert_int_equal(get_prefix(cb, 6, 4, &g, NULL), SCDB_OK);
    assert_int_equal(g.remote_blocks, 4);
    for (int i = 0; i < 1000 && lookup_prefix(cb, 6, 4).n_remote; i++) nap_ms(10);
    lr = lookup_prefix(cb, 6, 4);
    assert_int_equal(lr.n_matched, 4);
    assert_int_equal(lr.n_remote, 0);                  /* B holds all four */
    uint64_t refreshed0 = bstats(&g_b).remote_refreshed;
    bkv_tokens(6, t, 4 * BT);
    assert_int_equal(scdb_delete(pa, t, 4 * BT, 2, &nd), SCDB_OK);
    assert_int_equal(nd, 2);
    double t0 = scdb_now();
    bwait_written(&g_a);
    /* B converges: its own copies of blocks 2 and 3 are gone */
    while (scdb_now() - t0 < 20 && (lr = lookup_prefix(cb, 6, 4)).n_matched != 2) nap_ms(20);
    print_message("B stopped serving the deleted blocks %.0f ms after the delete was "
                  "acknowledged\n", (scdb_now() - t0) * 1e3);
    assert_int_equal(lr.n_matched, 2);
    assert_int_equal(lr.n_remote, 0);
    assert_int_equal(get_prefix(cb, 6, 4, &g, NULL), SCDB_OK);
    assert_int_equal(g.tokens_written, 2 * BT);
    assert_int_equal(g.remote_blocks, 0);
    assert_int_equal(bstats(&g_b).remote_refreshed, refreshed0 + 2);
    /* the blocks before the delete stay, on both */
    assert_int_equal(lookup_prefix(pa, 6, 4).n_matched, 2);
    scdb_close(&cb);
    scdb_close(&pa);
}

/* A planted value that is not what it should be is a shorter hit on B: a
 * miss, a counted error and a log line, never data.  The block's next put
 * rewrites it. */
static void test_bad_value_is_a_miss(void **state)
{
    scdb_key keys[16];
    scdb_get_result g;
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *cb = bclient(&g_b, SCDB_CONSUMER);
    put_prefix(pa, 4, 6);
    bwait_written(&g_a);
    prefix_keys(4, 6, keys);
    plant(&keys[3], "garbage, not a block value", 26);
    scdb_stat s0 = bstats(&g_b);
    int logged0 = log_count(&g_b, "refused");
    /* the probe only sees that the key exists ... */
    assert_int_equal(lookup_prefix(cb, 4, 6).n_matched, 6);
    /* ... the get reads and refuses it */
    assert_int_equal(get_prefix(cb, 4, 6, &g, NULL), SCDB_OK);
    assert_int_equal(g.tokens_written, 3 * BT);
    assert_int_equal(g.remote_blocks, 3);
    scdb_stat s1 = bstats(&g_b);
    assert_int_equal(s1.remote_invalid - s0.remote_invalid, 1);
    assert_true(s1.remote_errors - s0.remote_errors >= 1);
    assert_int_equal(log_count(&g_b, "refused") - logged0, 1);
    /* B's producer prefills and puts the rest: the value is whole again */
    for (int i = 0; i < 1000 && lookup_prefix(cb, 4, 6).n_remote != 3; i++) nap_ms(10);
    scdb *pb = bclient(&g_b, SCDB_PRODUCER);
    put_prefix(pb, 4, 6);
    bwait_written(&g_b);
    scdb_remote *r = open_tier(lc_seeds(g_cluster), NULL, 0, 0);
    scdb_remote_block got[6];
    size_t n = 0;
    scdb_remote_expect x;
    memset(&x, 0, sizeof x);
    assert_int_equal(scdb_ns_make("raw/m16", 7, SCDB_F16, 1, &x.ns), SCDB_OK);
    x.token_count = BT;
    x.payload_len = scdb_get_info(pb)->block_bytes;
    x.payload_dtype = SCDB_F16;
    assert_int_equal(scdb_remote_fetch(r, keys, 6, &x, got, &n), SCDB_OK);
    assert_int_equal(n, 6);
    scdb_remote_blocks_free(got, n);
    scdb_remote_close(&r);
    scdb_close(&pb);
    scdb_close(&pa);
    scdb_close(&cb);
}

/* MOVED and ASK while redis-cli moves slots between masters: every get on
 * B of a prefix only A stored is whole and right. */
static void test_reshard(void **state)
{
    char id_from[41], id_to[41], addr[64], slots[16], why[256];
    int rounds = 0, full = 0, st;
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *cb = bclient(&g_b, SCDB_CONSUMER);
    int from = lc_master_of_slot(g_cluster, 0), to = lc_master_of_slot(g_cluster, 16383);
    assert_true(from >= 0 && to >= 0 && from != to);
    assert_int_equal(lc_node_id(g_cluster, from, id_from), 0);
    assert_int_equal(lc_node_id(g_cluster, to, id_to), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", lc_port(g_cluster, from));
    snprintf(slots, sizeof slots, "%d", 1500);
    char *argv[] = {"redis-cli", "--cluster", "reshard", addr, "--cluster-from", id_from,
                    "--cluster-to", id_to, "--cluster-slots", slots, "--cluster-yes",
                    "--cluster-pipeline", "10", NULL};
    pid_t cli = lc_spawn_cli(g_cluster, argv, "reshard.log");
    assert_true(cli > 0);
    for (;;) {
        uint32_t seed = 1000 + (uint32_t)rounds;
        scdb_get_result g;
        put_prefix(pa, seed, 4);
        bwait_written(&g_a);
        assert_int_equal(get_prefix(cb, seed, 4, &g, NULL), SCDB_OK);   /* bytes checked */
        full += g.tokens_written == 4 * BT;
        rounds++;
        if (waitpid(cli, &st, WNOHANG) == cli) break;
        assert_true(rounds < 5000);
    }
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(lc_wait_ready(g_cluster, 30000, why, sizeof why), LC_OK);
    print_message("reshard of 1500 slots: %d prefixes put on A and read on B, %d whole\n",
                  rounds, full);
    /* writes during a migration may fail once (ASK to a node importing the
     * slot is followed; a TRYAGAIN is not an error): whatever is stored is
     * right, and after it every get is whole */
    for (int i = 0; i < 10; i++) {
        scdb_get_result g;
        put_prefix(pa, 5000 + (uint32_t)i, 4);
        bwait_written(&g_a);
        assert_int_equal(get_prefix(cb, 5000 + (uint32_t)i, 4, &g, NULL), SCDB_OK);
        assert_int_equal(g.tokens_written, 4 * BT);
    }
    scdb_close(&pa);
    scdb_close(&cb);
}

/* ACL users: the right password works; a wrong one stops the broker at
 * start with a clear message (exit 2: a configuration error). */
/* An ACL command on every node (ACLs are per node in Redis Cluster). */
static void acl_on_all(const char *cmd)
{
    for (int i = 0; i < lc_size(g_cluster); i++) {
        redisReply *r = lc_cmd(g_cluster, i, cmd);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
}

/* A cluster whose ACL user has only the permissions documented before
 * the TTL refresh and the replace log (no +getex +append +getrange): reads
 * fall back to GET, the replace log is off, each said once; the tier stays
 * up and serves. */
static void test_older_acl(void **state)
{
    char rk[1024], pw[300], extra[700];
    bproc e, f;
    scdb_get_result g;
    (void)state;
    acl_on_all("ACL SETUSER scdbold reset on >0ld ~scdb:* +get +set +exists +del +asking "
               "+cluster|slots +ping");
    snprintf(pw, sizeof pw, "%s/pw-old", g_tmp);
    write_file(pw, "0ld\n");
    snprintf(extra, sizeof extra, "user = scdbold\npassword_file = %s\n", pw);
    remote_keys(rk, sizeof rk, extra);
    bproc_conf(&e, rk);
    bproc_conf(&f, rk);
    assert_int_equal(bproc_start(&e), 0);
    assert_int_equal(bproc_start(&f), 0);
    scdb *pe = bclient(&e, SCDB_PRODUCER), *cf = bclient(&f, SCDB_CONSUMER);
    put_prefix(pe, 8, 2);
    put_prefix(pe, 8, 2);
    /* a replace (the same bytes): its record is refused, the SET is not */
    assert_int_equal(replace_blocks(pe, 8, 2, 1, 1, 8).n_replaced, 1);
    bwait_written(&e);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(get_prefix(cf, 8, 2, &g, NULL), SCDB_OK);   /* byte-checked */
        assert_int_equal(g.tokens_written, 2 * BT);
    }
    for (int i = 0; i < 500 && !log_count(&f, "refuses getrange"); i++) nap_ms(10);
    assert_int_equal(log_count(&f, "refuses GETEX"), 1);
    assert_int_equal(log_count(&f, "refuses getrange"), 1);
    assert_int_equal(log_count(&e, "refuses getrange") + log_count(&e, "refuses append"), 1);
    log_show(&f, "refuses GETEX");
    log_show(&f, "refuses getrange");
    scdb_stat se = bstats(&e), sf = bstats(&f);
    assert_int_equal(se.remote_up, 1);
    assert_int_equal(sf.remote_up, 1);
    assert_int_equal(se.remote_write_errors, 0);
    assert_int_equal(se.remote_writes, 3);
    assert_true(sf.remote_hits >= 2);
    assert_int_equal(log_count(&f, "cluster failing"), 0);
    scdb_close(&pe);
    scdb_close(&cf);
    assert_int_equal(bproc_stop(&e), 0);
    assert_int_equal(bproc_stop(&f), 0);
}

static void test_wrong_password(void **state)
{
    char rk[1024], pw[300], bad[300], extra[700];
    bproc c, d;
    (void)state;
    acl_on_all("ACL SETUSER scdbtest on >s3cret ~scdb:* +@all");
    snprintf(pw, sizeof pw, "%s/pw-good", g_tmp);
    snprintf(bad, sizeof bad, "%s/pw-bad", g_tmp);
    write_file(pw, "s3cret\n");
    write_file(bad, "not-the-password\n");
    snprintf(extra, sizeof extra, "user = scdbtest\npassword_file = %s\n", bad);
    remote_keys(rk, sizeof rk, extra);
    bproc_conf(&d, rk);
    assert_int_equal(bproc_start(&d), 2);
    log_show(&d, "cannot start");
    assert_true(log_count(&d, "scdbtest") >= 1);
    assert_true(log_count(&d, "cannot start") >= 1);
    snprintf(extra, sizeof extra, "user = scdbtest\npassword_file = %s/no-such-file\n", g_tmp);
    remote_keys(rk, sizeof rk, extra);
    bproc_conf(&d, rk);
    assert_int_equal(bproc_start(&d), 2);
    log_show(&d, "cannot start");
    assert_true(log_count(&d, "password file") >= 1);
    snprintf(extra, sizeof extra, "user = scdbtest\npassword_file = %s\n", pw);
    remote_keys(rk, sizeof rk, extra);
    bproc_conf(&c, rk);
    assert_int_equal(bproc_start(&c), 0);
    scdb *pc = bclient(&c, SCDB_PRODUCER);
    put_prefix(pc, 6, 2);
    bwait_written(&c);
    scdb_stat sc = bstats(&c);
    assert_int_equal(sc.remote_writes, 2);
    assert_int_equal(sc.remote_write_errors, 0);
    scdb_close(&pc);
    assert_int_equal(bproc_stop(&c), 0);
    /* a bad [remote] setting is a configuration error too */
    remote_keys(rk, sizeof rk, "key_prefix = scdb:{x}:\n");
    bproc_conf(&d, rk);
    assert_int_equal(bproc_start(&d), 2);
    assert_true(log_count(&d, "hash tag") >= 1);
    remote_keys(rk, sizeof rk, "colour = blue\n");
    bproc_conf(&d, rk);
    assert_int_equal(bproc_start(&d), 2);
    log_show(&d, "unknown key");
}

static const struct CMUnitTest broker_tests[] = {
    cmocka_unit_test(test_put_a_get_b),
    cmocka_unit_test(test_replace_reaches_new_broker),
    cmocka_unit_test(test_replace_reaches_fleet),
    cmocka_unit_test(test_delete_reaches_fleet),
    cmocka_unit_test(test_bad_value_is_a_miss),
    cmocka_unit_test(test_wrong_password),
    cmocka_unit_test(test_older_acl),
    cmocka_unit_test(test_reshard),
};

/* ================================================================ faults */

static int faults_setup(void **state)
{
    char rk[1024];
    (void)state;
    if (cluster_setup(3, 1, 2000)) return -1;
    remote_keys(rk, sizeof rk, NULL);
    bproc_conf(&g_a, rk);
    bproc_conf(&g_b, rk);
    if (bproc_start(&g_a) || bproc_start(&g_b)) {
        print_message("a broker did not start (logs in %s)\n", g_tmp);
        return -1;
    }
    return 0;
}

/* Calls through B (prefixes seed0.. put on A, read on B) until B's remote
 * tier says up (it changes state with calls only). */
static void bwait_up(const bproc *bp, scdb *pa, scdb *cb, uint32_t seed0)
{
    scdb_get_result g;
    for (uint32_t i = 0; i < 500; i++) {
        if (bstats(bp).remote_up) return;
        put_prefix(pa, seed0 + i, 1);
        bwait_written(&g_a);
        assert_int_equal(get_prefix(cb, seed0 + i, 1, &g, NULL), SCDB_OK);
        nap_ms(20);
    }
    fail_msg("%s: the remote tier did not come up", bp->name);
}

/* A master killed with -9 while A puts and B gets: every call succeeds,
 * every byte served is right, and after the failover gets are whole
 * remote hits again. */
static void test_master_killed(void **state)
{
    enum { PRE = 300 };
    char why[256];
    int killed, short_hits = 0, whole_run = 0, i;
    uint64_t served = 0;
    double t_kill, t_whole = 0;
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *cb = bclient(&g_b, SCDB_CONSUMER);
    /* prefixes only A stores (and so the cluster): B's gets are remote hits */
    for (i = 0; i < PRE; i++) put_prefix(pa, 20000 + (uint32_t)i, 6);
    bwait_written(&g_a);
    killed = lc_master_of_slot(g_cluster, 8000);
    assert_true(killed >= 0);
    assert_int_equal(lc_signal(g_cluster, killed, SIGKILL), 0);
    t_kill = scdb_now();
    /* until 20 whole remote hits in a row, however long the failover takes
     * on a loaded machine (bounded at 120 s); past the PRE stored prefixes
     * A stores a fresh one before each of B's gets, so every get is still
     * a remote read (B keeps what it fetched) */
    for (i = 0; scdb_now() - t_kill < 120; i++) {
        scdb_get_result g;
        if (i >= PRE) {
            put_prefix(pa, 20000 + (uint32_t)i, 6);
            bwait_written(&g_a);
        }
        /* A keeps putting (never fails, its writes retry or are given up) */
        put_prefix(pa, 40000 + (uint32_t)i, 2);
        /* B: every get succeeds, every byte it wrote is checked */
        assert_int_equal(get_prefix(cb, 20000 + (uint32_t)i, 6, &g, NULL), SCDB_OK);
        served += g.tokens_written;
        if (g.tokens_written < 6 * BT) {
            short_hits++;
            whole_run = 0;
        } else if (++whole_run == 20 && !t_whole) {
            t_whole = scdb_now();
        }
        if (t_whole) break;
        nap_ms(15);
    }
    print_message("master %d killed: %d gets shorter during the failover, all gets whole again "
                  "%.1f s after the kill (%llu tokens served, every byte checked)\n", killed,
                  short_hits, t_whole - t_kill, (unsigned long long)served);
    assert_true(t_whole > 0);
    scdb_stat sa = bstats(&g_a), sb = bstats(&g_b);
    assert_int_equal(sa.errors, 0);
    assert_int_equal(sb.errors, 0);
    assert_int_equal(sb.remote_invalid, 0);
    /* the dead node back as a replica of the promoted one */
    assert_int_equal(lc_restart(g_cluster, killed, why, sizeof why), LC_OK);
    assert_int_equal(lc_wait_ready(g_cluster, 60000, why, sizeof why), LC_OK);
    scdb_close(&pa);
    scdb_close(&cb);
}

/* The whole cluster down: B serves what it has locally, lookups and gets of
 * what only the cluster had answer the local part, puts succeed; one log
 * line when it goes, one when it is back; then remote hits again. */
static void test_cluster_down_and_back(void **state)
{
    char why[256];
    scdb_get_result g;
    (void)state;
    scdb *pa = bclient(&g_a, SCDB_PRODUCER), *ca = bclient(&g_a, SCDB_CONSUMER);
    scdb *cb = bclient(&g_b, SCDB_CONSUMER), *pb = bclient(&g_b, SCDB_PRODUCER);
    put_prefix(pa, 40, 6);
    put_prefix(pa, 41, 6);
    bwait_written(&g_a);
    assert_int_equal(get_prefix(cb, 40, 6, &g, NULL), SCDB_OK);     /* B keeps prefix 40 */
    assert_int_equal(g.tokens_written, 6 * BT);
    for (int i = 0; i < 1000 && lookup_prefix(cb, 40, 6).n_remote; i++) nap_ms(10);
    /* the state changes with calls only: make some until B says up */
    bwait_up(&g_b, pa, cb, 7000);
    int down0 = log_count(&g_b, "remote tier: cluster failing");
    int up0 = log_count(&g_b, "remote tier: cluster answering again");
    for (int i = 0; i < lc_size(g_cluster); i++)
        if (lc_alive(g_cluster, i)) assert_int_equal(lc_signal(g_cluster, i, SIGKILL), 0);
    for (int round = 0; round < 30; round++) {
        /* local: whole; remote only: nothing, but no error */
        assert_int_equal(get_prefix(cb, 40, 6, &g, NULL), SCDB_OK);
        assert_int_equal(g.tokens_written, 6 * BT);
        scdb_lookup_result lr = lookup_prefix(cb, 41, 6);
        assert_int_equal(lr.n_matched, 0);
        assert_int_equal(get_prefix(cb, 41, 6, &g, NULL), SCDB_OK);
        assert_int_equal(g.tokens_written, 0);
        put_prefix(pb, 500 + (uint32_t)round, 2);
    }
    if (log_count(&g_b, "remote tier: cluster failing") - down0 != 1) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "grep 'remote tier' %s >&2", g_b.log);
        (void)!system(cmd);
    }
    assert_int_equal(log_count(&g_b, "remote tier: cluster failing") - down0, 1);
    scdb_stat sb = bstats(&g_b);
    assert_int_equal(sb.remote_up, 0);
    assert_true(sb.remote_errors > 0);
    assert_int_equal(sb.errors, 0);
    for (int i = 0; i < lc_size(g_cluster); i++)
        assert_int_equal(lc_restart(g_cluster, i, why, sizeof why), LC_OK);
    assert_int_equal(lc_wait_ready(g_cluster, 60000, why, sizeof why), LC_OK);
    /* persistence is off: the cluster came back empty; new puts are shared */
    int ok = 0;
    for (int round = 0; round < 3000 && ok < 5; round++) {
        put_prefix(pa, 600 + (uint32_t)round, 3);
        bwait_written(&g_a);
        assert_int_equal(get_prefix(cb, 600 + (uint32_t)round, 3, &g, NULL), SCDB_OK);
        ok = g.remote_blocks == 3 ? ok + 1 : 0;
        nap_ms(20);
    }
    assert_int_equal(ok, 5);
    bwait_up(&g_b, pa, cb, 9000);
    assert_int_equal(log_count(&g_b, "remote tier: cluster answering again") - up0, 1);
    assert_int_equal(log_count(&g_b, "remote tier: cluster failing") - down0, 1);
    assert_int_equal(bstats(&g_b).errors, 0);
    assert_int_equal(bstats(&g_a).errors, 0);
    scdb_close(&pa);
    scdb_close(&ca);
    scdb_close(&cb);
    scdb_close(&pb);
}

static const struct CMUnitTest faults_tests[] = {
    cmocka_unit_test(test_master_killed),
    cmocka_unit_test(test_cluster_down_and_back),
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
    if (strcmp(group, "unit")) {
        char why[256];
        if (!lc_available(why, sizeof why)) {
            printf("skipped%s: %s\n", all ? " (the cluster groups)" : "", why);
            scdb_rm_tree(g_tmp);
            return all ? (failed ? 1 : 0) : 77;
        }
    }
    if (all || !strcmp(group, "tier"))
        failed |= cmocka_run_group_tests_name("remote_tier", tier_tests, tier_setup,
                                              cluster_teardown);
    if (all || !strcmp(group, "broker"))
        failed |= cmocka_run_group_tests_name("remote_broker", broker_tests, broker_setup,
                                              broker_teardown);
    if (all || !strcmp(group, "faults"))
        failed |= cmocka_run_group_tests_name("remote_faults", faults_tests, faults_setup,
                                              broker_teardown);
    scdb_rm_tree(g_tmp);
    return failed ? 1 : 0;
}
