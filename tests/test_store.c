/*
 * test_store.c — store/: keys, value format, puts/lookups/gets, leaf-first
 * LRU eviction, pins, hot tier, restart, map growth, on-disk corruption and
 * kill -9 durability.
 *
 * Environment: SCDB_STORE_CRASH_ROUNDS (default 5) sets the number of kill -9
 * rounds.  Each test works in its own mkdtemp directory under $TMPDIR.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "log_lines.h"

#include "signal_pid.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "store_crash_payload.h"

#ifndef SCDB_STORE_CRASH_WRITER
#define SCDB_STORE_CRASH_WRITER SCDB_BIN_DIR "/store/store_crash_writer"
#endif

/* ------------------------------------------------------------ helpers */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

typedef struct fixture {
    char dir[256];
    char mnt[256];              /* a filesystem a test mounted (teardown unmounts) */
    scdb_ns ns;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/scdb-store-test-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(f->dir)) return -1;
    strcat(f->dir, "/env");
    scdb_ns_make("test-codebook", 13, SCDB_F16, 1, &f->ns);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char *slash = strrchr(f->dir, '/');
    *slash = '\0';
    if (f->mnt[0] && umount2(f->mnt, MNT_DETACH)) fprintf(stderr, "umount %s: %s\n", f->mnt, strerror(errno));
    nftw(f->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void fill_tokens(int32_t *t, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(scdb_splitmix64(&seed) % 32000);
}

/* Payload bytes derived from the key. */
static void fill_payload(const scdb_key *k, uint8_t *p, size_t len)
{
    uint64_t s;
    memcpy(&s, k->b, 8);
    for (size_t i = 0; i < len; i++) p[i] = (uint8_t)scdb_splitmix64(&s);
}

#define BT 4u          /* block tokens in most tests */
#define PLEN 5000u     /* payload bytes in most tests */

/* A chain: tokens, keys and one payload per block. */
typedef struct chain {
    int32_t tokens[64 * BT];
    scdb_key keys[64];
    size_t n;
} chain;

static void make_chain(const fixture *f, chain *c, size_t n, uint64_t seed)
{
    size_t nk;
    c->n = n;
    fill_tokens(c->tokens, n * BT, seed);
    assert_int_equal(scdb_block_key_chain(&f->ns, c->tokens, n * BT, BT, c->keys, 64, &nk),
                     SCDB_OK);
    assert_int_equal(nk, n);
}

/* Put blocks [from, to) of c with payloads of plen bytes. */
static scdb_err put_range(scdb_store *s, const fixture *f, const chain *c, size_t from,
                          size_t to, size_t plen, size_t *n_stored)
{
    scdb_block_put puts[64];
    uint8_t *bufs[64];
    scdb_err e;
    memset(puts, 0, sizeof puts);
    for (size_t i = from; i < to; i++) {
        scdb_block_put *p = &puts[i - from];
        memset(p, 0, sizeof *p);
        p->key = c->keys[i];
        if (i) p->parent = c->keys[i - 1];
        p->block_index = (uint32_t)i;
        p->payload_dtype = SCDB_F16;
        p->payload_len = plen;
        bufs[i - from] = malloc(plen);
        fill_payload(&c->keys[i], bufs[i - from], plen);
        p->payload = bufs[i - from];
    }
    e = scdb_store_put_batch(s, &f->ns, puts, to - from, n_stored);
    for (size_t i = from; i < to; i++) free(bufs[i - from]);
    return e;
}

static size_t matched(scdb_store *s, const fixture *f, const chain *c)
{
    size_t full, m;
    assert_int_equal(scdb_store_lookup(s, &f->ns, c->tokens, c->n * BT, NULL, 0, &full, &m),
                     SCDB_OK);
    assert_int_equal(full, c->n);
    return m;
}

static void expect_payload(scdb_store *s, const scdb_key *k, size_t plen)
{
    uint8_t *got = malloc(plen), *want = malloc(plen);
    scdb_block_info *info = malloc(sizeof *info);
    assert_int_equal(scdb_store_get(s, k, got, plen, info), SCDB_OK);
    assert_int_equal(info->payload_len, plen);
    fill_payload(k, want, plen);
    assert_memory_equal(got, want, plen);
    free(got), free(want), free(info);
}

static scdb_store *open_store(const fixture *f, uint64_t disk_cap, uint64_t hot_cap)
{
    scdb_store_opts o = {0};
    scdb_store *s = NULL;
    o.path = f->dir;
    o.block_tokens = BT;
    o.disk_capacity_bytes = disk_cap;
    o.hot_capacity_bytes = hot_cap;
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    return s;
}

static uint64_t block_footprint(const fixture *f)
{
    /* measured, not assumed: one block in a scratch store */
    fixture g = *f;
    chain c;
    scdb_store_stat st;
    scdb_store *s;
    strcat(g.dir, "-probe");
    s = open_store(&g, 0, 0);
    make_chain(&g, &c, 1, 999);
    assert_int_equal(put_range(s, &g, &c, 0, 1, PLEN, NULL), SCDB_OK);
    scdb_store_stats(s, &st);
    scdb_store_close(&s);
    unlink(strcat(g.dir, "/data.mdb"));
    *strrchr(g.dir, '/') = 0;
    unlink(strcat(g.dir, "/lock.mdb"));
    *strrchr(g.dir, '/') = 0;
    rmdir(g.dir);
    return st.disk_bytes;
}

/* ------------------------------------------------------------------ keys */

/* Known answers.  Derived independently of block_key.c with python3: the
 * message bytes built by struct.pack('<...') exactly as store.h specifies,
 * hashed by libxxhash's XXH3_128bits through ctypes, printed in canonical
 * (big-endian high64, low64) order:
 *
 *   cid = b"scdb-test-codebook"
 *   ns  = xxh128(b"scdb.ns1" + pack("<I", len(cid)) + cid + pack("<II", 1, 1))
 *   toks = [0, 1, -1, 2147483647, 65536, 7, 8, 9, 10]      # 2 blocks of 4 + 1
 *   k0 = xxh128(b"scdb.blk" + bytes(16) + ns + pack("<I", 4) + pack("<4i", *toks[0:4]))
 *   k1 = xxh128(b"scdb.blk" + k0 + ns + pack("<I", 4) + pack("<4i", *toks[4:8]))
 *
 * If these ever change, stored data everywhere becomes unreachable: that is
 * a format change, not a test to update. */
static void test_key_known_answer(void **state)
{
    static const int32_t toks[] = {0, 1, -1, 2147483647, 65536, 7, 8, 9, 10};
    scdb_ns ns;
    scdb_key keys[4], one;
    char hex[33];
    size_t n;
    (void)state;

    assert_int_equal(scdb_ns_make("scdb-test-codebook", 18, SCDB_F16, 1, &ns), SCDB_OK);
    assert_string_equal(scdb_key_hex((scdb_key *)&ns, hex), "224ea5a1f1dd68467eea632fd148f9dc");
    assert_int_equal(scdb_block_key_chain(&ns, toks, 9, 4, keys, 4, &n), SCDB_OK);
    assert_int_equal(n, 2); /* the partial third block has no key */
    assert_string_equal(scdb_key_hex(&keys[0], hex), "1076de85e1a1cf4a486d7376eac73569");
    assert_string_equal(scdb_key_hex(&keys[1], hex), "217718d1d82807da02a4d80b707a192e");
    /* the single-block helper agrees with the chain */
    assert_int_equal(scdb_block_key(&keys[0], &ns, toks + 4, 4, &one), SCDB_OK);
    assert_memory_equal(&one, &keys[1], 16);
    assert_int_equal(scdb_block_key(NULL, &ns, toks, 4, &one), SCDB_OK);
    assert_memory_equal(&one, &keys[0], 16);
}

static void test_key_chaining_and_namespace(void **state)
{
    int32_t t[32], u[32];
    scdb_key a[8], b[8], c[8];
    scdb_ns ns, ns2, ns3, ns4;
    size_t n;
    (void)state;

    fill_tokens(t, 32, 1);
    scdb_ns_make("cb", 2, SCDB_F16, 1, &ns);
    assert_int_equal(scdb_block_key_chain(&ns, t, 32, 4, a, 8, &n), SCDB_OK);
    /* deterministic */
    assert_int_equal(scdb_block_key_chain(&ns, t, 32, 4, b, 8, &n), SCDB_OK);
    assert_memory_equal(a, b, sizeof a);
    /* changing block 2 changes keys 2.. and not 0..1 */
    memcpy(u, t, sizeof t);
    u[9] ^= 1;
    scdb_block_key_chain(&ns, u, 32, 4, b, 8, &n);
    assert_memory_equal(a, b, 2 * sizeof a[0]);
    for (int i = 2; i < 8; i++) assert_memory_not_equal(&a[i], &b[i], 16);
    /* the same block content under a different prefix gets a different key */
    memcpy(u, t, sizeof t);
    u[0] ^= 1;
    scdb_block_key_chain(&ns, u, 32, 4, b, 8, &n);
    for (int i = 0; i < 8; i++) assert_memory_not_equal(&a[i], &b[i], 16);
    /* max_keys truncates */
    assert_int_equal(scdb_block_key_chain(&ns, t, 32, 4, c, 3, &n), SCDB_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(a, c, 3 * sizeof a[0]);
    /* namespace: codebook id, dtype, format version each matter */
    scdb_ns_make("cc", 2, SCDB_F16, 1, &ns2);
    scdb_ns_make("cb", 2, SCDB_BF16, 1, &ns3);
    scdb_ns_make("cb", 2, SCDB_F16, 2, &ns4);
    assert_memory_not_equal(&ns, &ns2, 16);
    assert_memory_not_equal(&ns, &ns3, 16);
    assert_memory_not_equal(&ns, &ns4, 16);
    scdb_block_key_chain(&ns2, t, 32, 4, b, 8, &n);
    for (int i = 0; i < 8; i++) assert_memory_not_equal(&a[i], &b[i], 16);
    /* block size matters (token count is hashed) */
    scdb_block_key_chain(&ns, t, 32, 8, b, 8, &n);
    assert_int_equal(n, 4);
    assert_memory_not_equal(&a[0], &b[0], 16);
    /* bad arguments */
    assert_int_equal(scdb_block_key_chain(&ns, t, 32, 0, b, 8, &n), SCDB_EINVAL);
    assert_int_equal(scdb_block_key_chain(NULL, t, 32, 4, b, 8, &n), SCDB_EINVAL);
    assert_int_equal(scdb_ns_make(NULL, 3, 0, 0, &ns), SCDB_EINVAL);
}

/* ----------------------------------------------------------- value format */

static uint8_t *encode_sample(scdb_block_info *info, size_t plen, size_t *len)
{
    uint8_t *payload = malloc(plen), *v;
    size_t need;
    memset(info, 0, sizeof *info);
    memset(info->key.b, 0xAB, 16);
    memset(info->parent.b, 0xCD, 16);
    info->block_index = 3;
    info->token_count = 4;
    info->payload_dtype = SCDB_F16;
    info->n_sections = 3;
    info->section_off[0] = 0;
    info->section_off[1] = plen / 2;
    info->section_off[2] = plen - 1;
    info->payload_len = plen;
    for (size_t i = 0; i < plen; i++) payload[i] = (uint8_t)(i * 7);
    assert_int_equal(scdb_block_value_encode(info, payload, NULL, 0, &need), SCDB_ETOOBIG);
    assert_int_equal(need, scdb_block_header_len(3) + plen);
    v = malloc(need + 64);
    assert_int_equal(scdb_block_value_encode(info, payload, v, need + 64, len), SCDB_OK);
    assert_int_equal(*len, need);
    free(payload);
    return v;
}

static void test_value_roundtrip(void **state)
{
    scdb_block_info *in = malloc(sizeof *in), *out = malloc(sizeof *out);
    const void *payload;
    size_t len;
    uint8_t *v = encode_sample(in, 1000, &len);
    (void)state;

    assert_int_equal(scdb_block_header_len(0), 112);
    assert_int_equal(scdb_block_header_len(3), 128);
    assert_int_equal(scdb_block_value_decode(v, len, &in->key, out, &payload), SCDB_OK);
    assert_memory_equal(&out->key, &in->key, 16);
    assert_memory_equal(&out->parent, &in->parent, 16);
    assert_int_equal(out->block_index, 3);
    assert_int_equal(out->token_count, 4);
    assert_int_equal(out->payload_dtype, SCDB_F16);
    assert_int_equal(out->n_sections, 3);
    assert_int_equal(out->section_off[1], 500);
    assert_int_equal(out->payload_len, 1000);
    assert_ptr_equal(payload, v + 128);
    assert_int_equal(((const uint8_t *)payload)[10], 70);
    assert_int_equal(((uintptr_t)payload - (uintptr_t)v) % 16, 0);
    free(v), free(in), free(out);
}

static void test_value_bad_input(void **state)
{
    scdb_block_info *in = malloc(sizeof *in), *out = malloc(sizeof *out);
    const void *payload;
    size_t len;
    uint8_t *v = encode_sample(in, 1000, &len), *w = malloc(len + 16);
    scdb_key other;
    (void)state;

    /* truncated: every length short of the full value */
    for (size_t l = 0; l < len; l += (l < 200 ? 1 : 97))
        assert_int_equal(scdb_block_value_decode(v, l, NULL, out, &payload), SCDB_ETRUNC);
    /* oversized: trailing bytes past header + payload */
    memcpy(w, v, len);
    assert_int_equal(scdb_block_value_decode(w, len + 16, NULL, out, &payload), SCDB_ETOOBIG);
    /* wrong magic */
    memcpy(w, v, len);
    w[0] = 'X';
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_EFORMAT);
    /* garbage */
    for (size_t i = 0; i < len; i++) w[i] = (uint8_t)(i * 31 + 5);
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_EFORMAT);
    /* wrong version */
    memcpy(w, v, len);
    w[4] = 2;
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_EUNSUPPORTED);
    /* header length inconsistent with the section count */
    memcpy(w, v, len);
    w[6] += 16;
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_EFORMAT);
    /* payload length field huge */
    memcpy(w, v, len);
    w[88 + 7] = 0x7f;
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_ETOOBIG);
    /* section table out of order / past the payload */
    memcpy(w, v, len);
    w[104 + 8] = 0xff, w[104 + 9] = 0xff; /* section 1 = 65535 > 1000 */
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_ERANGE);
    /* too many sections */
    memcpy(w, v, len);
    w[84] = 0xff, w[85] = 0xff;
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_ERANGE);
    /* one flipped bit anywhere outside the checksum field: checksum */
    for (size_t pos = 24; pos < len; pos += 37) {
        if (pos >= 104 && pos < 128) continue; /* section table: checked above */
        memcpy(w, v, len);
        w[pos] ^= 0x10;
        scdb_err e = scdb_block_value_decode(w, len, NULL, out, &payload);
        if (pos >= 72 && pos < 104) /* structural fields may fail earlier */
            assert_true(e != SCDB_OK);
        else
            assert_int_equal(e, SCDB_ECHECKSUM);
    }
    memcpy(w, v, len);
    w[len - 1] ^= 1;
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_ECHECKSUM);
    memcpy(w, v, len);
    w[9] ^= 1; /* the checksum itself */
    assert_int_equal(scdb_block_value_decode(w, len, NULL, out, &payload), SCDB_ECHECKSUM);
    /* valid value under the wrong key */
    memset(other.b, 1, 16);
    assert_int_equal(scdb_block_value_decode(v, len, &other, out, &payload), SCDB_EMISMATCH);
    /* encode refuses bad tables and parent/index mismatch */
    in->section_off[1] = 2000;
    assert_int_equal(scdb_block_value_encode(in, v, w, len + 16, &len), SCDB_ERANGE);
    in->section_off[1] = 500;
    in->block_index = 0; /* non-zero parent on block 0 */
    assert_int_equal(scdb_block_value_encode(in, v, w, len + 16, &len), SCDB_EINVAL);
    assert_int_equal(scdb_block_value_decode(NULL, 10, NULL, out, &payload), SCDB_EINVAL);
    free(v), free(w), free(in), free(out);
}

/* -------------------------------------------------------- puts and lookups */

static void test_put_lookup_get(void **state)
{
    fixture *f = *state;
    scdb_store *s = open_store(f, 0, 0);
    scdb_store_stat st;
    scdb_block_info *info = malloc(sizeof *info);
    scdb_block *blk = NULL;
    scdb_key keys[16];
    chain c, d;
    size_t n_stored, full, m;
    uint8_t small[10];

    make_chain(f, &c, 6, 1);
    assert_int_equal(matched(s, f, &c), 0);
    assert_int_equal(put_range(s, f, &c, 0, 4, PLEN, &n_stored), SCDB_OK);
    assert_int_equal(n_stored, 4);
    assert_int_equal(matched(s, f, &c), 4);
    /* keys come back for every full block, matched or not, and a partial
     * trailing block is ignored */
    assert_int_equal(scdb_store_lookup(s, &f->ns, c.tokens, 6 * BT + 3, keys, 16, &full, &m),
                     SCDB_OK);
    assert_int_equal(full, 6);
    assert_int_equal(m, 4);
    assert_memory_equal(keys, c.keys, 6 * sizeof keys[0]);
    /* keys_out smaller than the match still counts the full match */
    assert_int_equal(scdb_store_lookup(s, &f->ns, c.tokens, 6 * BT, keys, 2, &full, &m), SCDB_OK);
    assert_int_equal(m, 4);
    /* another namespace sees nothing */
    {
        fixture g = *f;
        scdb_ns_make("other", 5, SCDB_F16, 1, &g.ns);
        assert_int_equal(matched(s, &g, &c), 0);
    }
    /* extend: blocks 0..3 are skipped, 4..5 written */
    assert_int_equal(put_range(s, f, &c, 0, 6, PLEN, &n_stored), SCDB_OK);
    assert_int_equal(n_stored, 6);
    assert_int_equal(matched(s, f, &c), 6);
    for (size_t i = 0; i < 6; i++) expect_payload(s, &c.keys[i], PLEN);
    assert_int_equal(scdb_store_get(s, &c.keys[5], NULL, 0, info), SCDB_ETOOBIG);
    assert_int_equal(info->payload_len, PLEN);
    assert_int_equal(info->block_index, 5);
    assert_int_equal(info->token_count, BT);
    assert_memory_equal(&info->parent, &c.keys[4], 16);
    assert_memory_equal(&info->ns, &f->ns, 16);
    assert_int_equal(scdb_store_get(s, &c.keys[5], small, sizeof small, info), SCDB_ETOOBIG);
    /* a pinned handle (no hot tier: a private verified copy) */
    assert_int_equal(scdb_store_acquire(s, &c.keys[2], &blk), SCDB_OK);
    assert_string_equal(blk->tier, "copy");
    assert_int_equal(blk->info.payload_len, PLEN);
    {
        uint8_t *want = malloc(PLEN);
        fill_payload(&c.keys[2], want, PLEN);
        assert_memory_equal(blk->payload, want, PLEN);
        free(want);
    }
    scdb_store_stats(s, &st);
    assert_int_equal(st.pinned_blocks, 1);
    scdb_store_release(s, &blk);
    assert_null(blk);
    scdb_store_release(s, &blk); /* NULL is fine */
    /* a sibling chain shares nothing with c */
    make_chain(f, &d, 3, 2);
    assert_int_equal(matched(s, f, &d), 0);
    /* unknown key */
    assert_int_equal(scdb_store_get(s, &d.keys[0], small, sizeof small, NULL), SCDB_ENOTFOUND);
    scdb_store_stats(s, &st);
    assert_int_equal(st.blocks, 6);
    assert_int_equal(st.puts, 6);
    assert_int_equal(st.put_existing, 4);
    assert_int_equal(st.checksum_failures, 0);
    assert_true(st.disk_bytes >= 6 * (PLEN + 112));
    assert_true(st.file_bytes > 0);
    assert_int_equal(st.pinned_blocks, 0);
    free(info);
    scdb_store_close(&s);
    assert_null(s);
    scdb_store_close(&s);
    scdb_store_close(NULL);
}

static void test_put_errors(void **state)
{
    fixture *f = *state;
    scdb_store *s = open_store(f, 0, 0);
    scdb_block_put p;
    uint64_t secs[2] = {10, 5};
    uint8_t buf[64] = {0};
    chain c;
    size_t n_stored = 99;

    make_chain(f, &c, 3, 3);
    /* parent not stored */
    assert_int_equal(put_range(s, f, &c, 1, 3, PLEN, &n_stored), SCDB_ENOTFOUND);
    assert_int_equal(n_stored, 0);
    assert_int_equal(matched(s, f, &c), 0);
    /* index must follow the parent */
    assert_int_equal(put_range(s, f, &c, 0, 1, PLEN, NULL), SCDB_OK);
    memset(&p, 0, sizeof p);
    p.key = c.keys[1];
    p.parent = c.keys[0];
    p.block_index = 5;
    p.payload = buf;
    p.payload_len = sizeof buf;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_EINVAL);
    /* block 0 with a parent, and a zero key */
    p.block_index = 0;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_EINVAL);
    p.block_index = 1;
    memset(p.key.b, 0, 16);
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_EINVAL);
    p.key = c.keys[1];
    /* bad section table */
    p.n_sections = 2;
    p.section_off = secs;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_ERANGE);
    secs[0] = 0, secs[1] = 64;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_ERANGE);
    secs[1] = 32;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_OK);
    assert_int_equal(n_stored, 1);
    {
        scdb_block_info *info = malloc(sizeof *info);
        assert_int_equal(scdb_store_get(s, &c.keys[1], buf, sizeof buf, info), SCDB_OK);
        assert_int_equal(info->n_sections, 2);
        assert_int_equal(info->section_off[1], 32);
        free(info);
    }
    /* too big */
    p.n_sections = 0;
    p.payload_len = SCDB_BLOCK_MAX_PAYLOAD + 1;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, &n_stored), SCDB_ETOOBIG);
    assert_int_equal(scdb_store_put_batch(NULL, &f->ns, &p, 1, &n_stored), SCDB_EINVAL);
    assert_int_equal(scdb_store_put_batch(s, &f->ns, NULL, 1, &n_stored), SCDB_EINVAL);
    scdb_store_close(&s);
}

static void test_delete(void **state)
{
    fixture *f = *state;
    scdb_store *s = open_store(f, 0, 1 << 20);
    chain c;

    make_chain(f, &c, 3, 4);
    assert_int_equal(put_range(s, f, &c, 0, 3, PLEN, NULL), SCDB_OK);
    assert_int_equal(scdb_store_delete(s, &c.keys[1]), SCDB_EBUSY); /* has a child */
    assert_int_equal(scdb_store_pin(s, &c.keys[2]), SCDB_OK);
    assert_int_equal(scdb_store_delete(s, &c.keys[2]), SCDB_EBUSY); /* pinned */
    assert_int_equal(scdb_store_unpin(s, &c.keys[2]), SCDB_OK);
    assert_int_equal(scdb_store_unpin(s, &c.keys[2]), SCDB_EINVAL);
    assert_int_equal(scdb_store_delete(s, &c.keys[2]), SCDB_OK);
    assert_int_equal(scdb_store_delete(s, &c.keys[2]), SCDB_ENOTFOUND);
    assert_int_equal(matched(s, f, &c), 2);
    assert_int_equal(scdb_store_delete(s, &c.keys[1]), SCDB_OK);
    assert_int_equal(matched(s, f, &c), 1);
    scdb_store_close(&s);
    s = open_store(f, 0, 0);
    assert_int_equal(matched(s, f, &c), 1);
    scdb_store_close(&s);
}

/* ------------------------------------------------------ capacity, eviction */

typedef struct evict_log {
    scdb_key keys[64];
    size_t n;
} evict_log;

static void on_evict(void *ctx, const scdb_key *k)
{
    evict_log *l = ctx;
    l->keys[l->n++] = *k;
}

static scdb_store *open_logged(const fixture *f, uint64_t cap, evict_log *log)
{
    scdb_store_opts o = {0};
    scdb_store *s = NULL;
    o.path = f->dir;
    o.block_tokens = BT;
    o.disk_capacity_bytes = cap;
    o.on_evict = on_evict;
    o.on_evict_ctx = log;
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    return s;
}

static void test_eviction_leaves_first(void **state)
{
    fixture *f = *state;
    uint64_t fp = block_footprint(f);
    evict_log log = {0};
    scdb_store *s = open_logged(f, 3 * fp + fp / 2, &log); /* room for 3 blocks */
    scdb_store_stat st;
    chain x, y, z, w;

    make_chain(f, &x, 2, 10);
    make_chain(f, &y, 1, 11);
    make_chain(f, &z, 1, 12);
    make_chain(f, &w, 1, 13);
    /* x0 (oldest), x1, y0: full */
    assert_int_equal(put_range(s, f, &x, 0, 2, PLEN, NULL), SCDB_OK);
    assert_int_equal(put_range(s, f, &y, 0, 1, PLEN, NULL), SCDB_OK);
    assert_int_equal(log.n, 0);
    /* z0 needs room: x0 is the least recently used block but it has a
     * stored child, so the LRU leaf x1 goes first */
    assert_int_equal(put_range(s, f, &z, 0, 1, PLEN, NULL), SCDB_OK);
    assert_int_equal(log.n, 1);
    assert_memory_equal(&log.keys[0], &x.keys[1], 16);
    assert_int_equal(matched(s, f, &x), 1);
    /* that lookup touched x0; touch y0 and z0 after it so that x0, now a
     * leaf, is the least recently used one */
    assert_int_equal(matched(s, f, &y), 1);
    assert_int_equal(matched(s, f, &z), 1);
    assert_int_equal(put_range(s, f, &w, 0, 1, PLEN, NULL), SCDB_OK);
    assert_int_equal(log.n, 2);
    assert_memory_equal(&log.keys[1], &x.keys[0], 16);
    assert_int_equal(matched(s, f, &x), 0);
    assert_int_equal(matched(s, f, &y), 1);
    assert_int_equal(matched(s, f, &z), 1);
    assert_int_equal(matched(s, f, &w), 1);
    scdb_store_stats(s, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.blocks, 3);
    assert_true(st.disk_bytes <= st.disk_capacity_bytes);
    scdb_store_close(&s);
}

static void test_eviction_lru_order_and_batches(void **state)
{
    fixture *f = *state;
    uint64_t fp = block_footprint(f);
    evict_log log = {0};
    scdb_store *s = open_logged(f, 4 * fp + fp / 2, &log); /* 4 blocks */
    chain a, b, c;

    make_chain(f, &a, 3, 20);
    make_chain(f, &b, 1, 21);
    make_chain(f, &c, 3, 22);
    assert_int_equal(put_range(s, f, &a, 0, 3, PLEN, NULL), SCDB_OK); /* a0 a1 a2 */
    assert_int_equal(put_range(s, f, &b, 0, 1, PLEN, NULL), SCDB_OK); /* b0 */
    assert_int_equal(matched(s, f, &a), 3); /* a is now more recent than b */
    /* a 3-block batch needs 3 slots: b0 (LRU leaf), then a2, then a1 — each
     * parent only once its child is gone; a0 survives */
    assert_int_equal(put_range(s, f, &c, 0, 3, PLEN, NULL), SCDB_OK);
    assert_int_equal(log.n, 3);
    assert_memory_equal(&log.keys[0], &b.keys[0], 16);
    assert_memory_equal(&log.keys[1], &a.keys[2], 16);
    assert_memory_equal(&log.keys[2], &a.keys[1], 16);
    assert_int_equal(matched(s, f, &a), 1);
    assert_int_equal(matched(s, f, &c), 3);
    scdb_store_close(&s);
}

static void test_pinning(void **state)
{
    fixture *f = *state;
    uint64_t fp = block_footprint(f);
    evict_log log = {0};
    scdb_store *s = open_logged(f, 3 * fp + fp / 2, &log); /* 3 blocks */
    scdb_store_stat st;
    scdb_block *h = NULL;
    chain a, b, c, d, e;
    size_t n_stored;

    make_chain(f, &e, 1, 34);
    make_chain(f, &a, 2, 30);
    make_chain(f, &b, 1, 31);
    make_chain(f, &c, 2, 32);
    make_chain(f, &d, 1, 33);
    assert_int_equal(put_range(s, f, &a, 0, 2, PLEN, NULL), SCDB_OK);
    assert_int_equal(put_range(s, f, &b, 0, 1, PLEN, NULL), SCDB_OK);
    /* pin the leaf a1 (so a0 is kept too) and b0 via a handle */
    assert_int_equal(scdb_store_pin(s, &a.keys[1]), SCDB_OK);
    assert_int_equal(scdb_store_pin(s, &a.keys[1]), SCDB_OK); /* counted */
    assert_int_equal(scdb_store_acquire(s, &b.keys[0], &h), SCDB_OK);
    scdb_store_stats(s, &st);
    assert_int_equal(st.pinned_blocks, 2);
    /* nothing evictable: EFULL, nothing stored */
    assert_int_equal(put_range(s, f, &d, 0, 1, PLEN, &n_stored), SCDB_EFULL);
    assert_int_equal(n_stored, 0);
    assert_int_equal(log.n, 0);
    assert_int_equal(matched(s, f, &a), 2);
    scdb_store_release(s, &h);
    /* b0 is free again: a 2-block batch stores c0 (evicting b0) and then
     * fails on c1 (c0 is its own parent, a0/a1 pinned): c0 stays committed */
    assert_int_equal(put_range(s, f, &c, 0, 2, PLEN, &n_stored), SCDB_EFULL);
    assert_int_equal(n_stored, 1);
    assert_int_equal(matched(s, f, &c), 1);
    assert_int_equal(log.n, 1);
    assert_memory_equal(&log.keys[0], &b.keys[0], 16);
    /* one unpin of two: a1 stays pinned, so d0 takes c0's place */
    assert_int_equal(scdb_store_unpin(s, &a.keys[1]), SCDB_OK);
    assert_int_equal(put_range(s, f, &d, 0, 1, PLEN, &n_stored), SCDB_OK);
    assert_int_equal(log.n, 2);
    assert_memory_equal(&log.keys[1], &c.keys[0], 16);
    /* the last unpin: now a1 is the least recently used leaf */
    assert_int_equal(scdb_store_unpin(s, &a.keys[1]), SCDB_OK);
    assert_int_equal(put_range(s, f, &e, 0, 1, PLEN, &n_stored), SCDB_OK);
    assert_int_equal(log.n, 3);
    assert_memory_equal(&log.keys[2], &a.keys[1], 16);
    assert_int_equal(matched(s, f, &a), 1); /* a1 went, a0 stays */
    scdb_store_stats(s, &st);
    assert_int_equal(st.pinned_blocks, 0);
    assert_int_equal(scdb_store_pin(s, &b.keys[0]), SCDB_ENOTFOUND);
    assert_int_equal(scdb_store_unpin(s, &b.keys[0]), SCDB_ENOTFOUND);
    /* a block larger than the whole capacity */
    assert_int_equal(put_range(s, f, &b, 0, 1, 4 * fp, &n_stored), SCDB_ETOOBIG);
    scdb_store_close(&s);
}

static void test_hot_tier(void **state)
{
    fixture *f = *state;
    uint64_t charge = PLEN + 112;     /* payload + header of a section-less block */
    scdb_store *s = open_store(f, 0, 2 * charge + charge / 2); /* 2 hot blocks */
    scdb_store_stat st;
    scdb_block *h1 = NULL, *h2 = NULL, *h3 = NULL;
    chain c;

    make_chain(f, &c, 3, 40);
    assert_int_equal(put_range(s, f, &c, 0, 3, PLEN, NULL), SCDB_OK);
    scdb_store_stats(s, &st);
    assert_int_equal(st.hot_blocks, 2); /* written through: the newest that fit */
    assert_int_equal(st.hot_evictions, 0);
    assert_true(st.hot_bytes <= st.hot_capacity_bytes);
    expect_payload(s, &c.keys[2], PLEN); /* hot */
    expect_payload(s, &c.keys[0], PLEN); /* from disk, promoted */
    scdb_store_stats(s, &st);
    assert_int_equal(st.get_hot_hits, 1);
    assert_int_equal(st.get_disk_hits, 1);
    assert_int_equal(st.hot_blocks, 2);
    assert_int_equal(st.hot_evictions, 1); /* c1, the least recently used */
    expect_payload(s, &c.keys[0], PLEN); /* now hot */
    scdb_store_stats(s, &st);
    assert_int_equal(st.get_hot_hits, 2);
    /* handles point into the hot tier and pin there */
    assert_int_equal(scdb_store_acquire(s, &c.keys[0], &h1), SCDB_OK);
    assert_string_equal(h1->tier, "host");
    assert_int_equal(scdb_store_acquire(s, &c.keys[2], &h2), SCDB_OK);
    /* c1 is on disk only and both hot slots are pinned */
    assert_int_equal(scdb_store_acquire(s, &c.keys[1], &h3), SCDB_EFULL);
    assert_null(h3);
    scdb_store_release(s, &h2);
    assert_int_equal(scdb_store_acquire(s, &c.keys[1], &h3), SCDB_OK);
    {
        uint8_t *want = malloc(PLEN);
        fill_payload(&c.keys[1], want, PLEN);
        assert_memory_equal(h3->payload, want, PLEN);
        fill_payload(&c.keys[0], want, PLEN);
        assert_memory_equal(h1->payload, want, PLEN);
        free(want);
    }
    scdb_store_release(s, &h1);
    scdb_store_release(s, &h3);
    scdb_store_stats(s, &st);
    assert_int_equal(st.pinned_blocks, 0);
    assert_int_equal(st.hot_blocks, 2);
    scdb_store_close(&s);
}

/* Replace: a stored block's value is overwritten in place (hot copy too),
 * its children stay stored and readable, the index sees it throughout; a
 * block being read is refused (SCDB_EBUSY); replace of an absent block is a
 * plain put; the new value survives a restart. */
static void put_one(scdb_store *s, const fixture *f, const chain *c, size_t i, uint8_t fill,
                    int replace, scdb_err want)
{
    uint8_t *buf = malloc(PLEN);
    scdb_block_put p;
    memset(&p, 0, sizeof p);
    memset(buf, fill, PLEN);
    p.key = c->keys[i];
    if (i) p.parent = c->keys[i - 1];
    p.block_index = (uint32_t)i;
    p.payload_dtype = SCDB_F16;
    p.payload = buf;
    p.payload_len = PLEN;
    p.replace = replace;
    assert_int_equal(scdb_store_put_batch(s, &f->ns, &p, 1, NULL), want);
    free(buf);
}

static void expect_fill(scdb_store *s, const scdb_key *k, uint8_t fill)
{
    uint8_t *got = malloc(PLEN);
    assert_int_equal(scdb_store_get(s, k, got, PLEN, NULL), SCDB_OK);
    for (size_t i = 0; i < PLEN; i++) assert_int_equal(got[i], fill);
    free(got);
}

/* Acquire while the writer replaces the block (issue found by
 * test_remote's fleet replace, SCDB_EBUSY "cannot read it" on a get): a
 * replace staged and committing is read from LMDB, old bytes or new, never
 * refused and never mixed.  A writer thread replaces block 1 over and over
 * (a pinned block is refused: it tries again) while this thread acquires
 * it, until some acquire landed inside a staged replace (served from a
 * private copy although the store has a hot tier) or 20 s passed. */
typedef struct replacer_arg {
    scdb_store *s;
    const fixture *f;
    const chain *c;
    atomic_int *stop;
    int replaced, bad;
} replacer_arg;

static void *replacer(void *ud)
{
    replacer_arg *a = ud;
    uint8_t *buf = malloc(PLEN);
    for (int k = 0; buf && !atomic_load(a->stop); k++) {
        scdb_block_put p;
        memset(&p, 0, sizeof p);
        memset(buf, 0xa0 + k % 16, PLEN);
        p.key = a->c->keys[1];
        p.parent = a->c->keys[0];
        p.block_index = 1;
        p.payload_dtype = SCDB_F16;
        p.payload = buf;
        p.payload_len = PLEN;
        p.replace = 1;
        scdb_err e = scdb_store_put_batch(a->s, &a->f->ns, &p, 1, NULL);
        if (e == SCDB_OK) a->replaced++;
        else if (e != SCDB_EBUSY) a->bad++;
    }
    free(buf);
    return NULL;
}

static void test_acquire_during_replace(void **state)
{
    fixture *f = *state;
    scdb_store *s = open_store(f, 0, 4 * (PLEN + 112));
    chain c;
    atomic_int stop = 0;
    make_chain(f, &c, 2, 91);
    put_one(s, f, &c, 0, 0x01, 0, SCDB_OK);
    put_one(s, f, &c, 1, 0xa0, 0, SCDB_OK);
    replacer_arg ra = {s, f, &c, &stop, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, replacer, &ra);
    int acquired = 0, copies = 0, hot = 0, mixed = 0;
    scdb_err bad = SCDB_OK;
    double t0 = scdb_now();
    while (copies < 3 && scdb_now() - t0 < 20) {
        scdb_block *h = NULL;
        scdb_err e = scdb_store_acquire(s, &c.keys[1], &h);
        if (e) {
            bad = e;
            break;
        }
        acquired++;
        const uint8_t *pl = h->payload;
        for (size_t i = 1; i < PLEN; i++) mixed += pl[i] != pl[0];
        mixed += (pl[0] & 0xf0) != 0xa0;
        if (!strcmp(h->tier, "copy")) copies++;
        else hot++;
        scdb_store_release(s, &h);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    print_message("%d acquires during %d replaces: %d inside a staged replace (a private "
                  "copy), %d from the hot tier\n", acquired, ra.replaced, copies, hot);
    if (bad) fail_msg("acquire during a replace: %s", scdb_strerror(bad));
    assert_int_equal(mixed, 0);
    assert_int_equal(ra.bad, 0);
    assert_true(copies >= 1);     /* the window was exercised */
    scdb_store_close(&s);
}

static void test_replace(void **state)
{
    fixture *f = *state;
    uint64_t charge = PLEN + 112;
    scdb_store *s = open_store(f, 0, 4 * charge);      /* room for every block hot */
    scdb_store_stat st0, st;
    scdb_block *h = NULL;
    chain c;

    make_chain(f, &c, 3, 77);
    for (size_t i = 0; i < 3; i++) put_one(s, f, &c, i, (uint8_t)(0x10 + i), 0, SCDB_OK);
    expect_fill(s, &c.keys[1], 0x11);                  /* a hot copy now */
    scdb_store_stats(s, &st0);
    /* without replace a stored block is skipped */
    put_one(s, f, &c, 1, 0xee, 0, SCDB_OK);
    expect_fill(s, &c.keys[1], 0x11);
    /* with replace it is overwritten, hot copy included */
    put_one(s, f, &c, 1, 0xab, 1, SCDB_OK);
    expect_fill(s, &c.keys[1], 0xab);
    scdb_store_stats(s, &st);
    assert_int_equal(st.put_replaced, st0.put_replaced + 1);
    assert_int_equal(st.blocks, st0.blocks);
    assert_int_equal(st.disk_bytes, st0.disk_bytes);
    assert_int_equal(matched(s, f, &c), 3);             /* children stay */
    expect_fill(s, &c.keys[2], 0x12);
    expect_fill(s, &c.keys[0], 0x10);
    /* a block a reader holds is refused, and is replaced once released */
    assert_int_equal(scdb_store_acquire(s, &c.keys[2], &h), SCDB_OK);
    put_one(s, f, &c, 2, 0xcd, 1, SCDB_EBUSY);
    for (size_t i = 0; i < PLEN; i++) assert_int_equal(((uint8_t *)h->payload)[i], 0x12);
    scdb_store_release(s, &h);
    put_one(s, f, &c, 2, 0xcd, 1, SCDB_OK);
    expect_fill(s, &c.keys[2], 0xcd);
    /* replace of a block that is not stored is a plain put */
    {
        chain d;
        make_chain(f, &d, 1, 78);
        put_one(s, f, &d, 0, 0x42, 1, SCDB_OK);
        expect_fill(s, &d.keys[0], 0x42);
    }
    /* the new values are what LMDB holds */
    scdb_store_close(&s);
    s = open_store(f, 0, 0);
    expect_fill(s, &c.keys[1], 0xab);
    expect_fill(s, &c.keys[2], 0xcd);
    assert_int_equal(matched(s, f, &c), 3);
    scdb_store_close(&s);
}

/* --------------------------------------------------- restart and map growth */

static void test_restart_persistence(void **state)
{
    fixture *f = *state;
    scdb_store_opts o = {0};
    scdb_store *s = open_store(f, 0, 1 << 20);
    scdb_store_stat st;
    chain c, d;
    uint64_t fp;

    make_chain(f, &c, 5, 50);
    make_chain(f, &d, 2, 51);
    assert_int_equal(put_range(s, f, &c, 0, 5, PLEN, NULL), SCDB_OK);
    assert_int_equal(put_range(s, f, &d, 0, 2, PLEN, NULL), SCDB_OK);
    scdb_store_stats(s, &st);
    fp = st.disk_bytes / 7;
    scdb_store_close(&s);

    s = open_store(f, 0, 0);
    assert_int_equal(matched(s, f, &c), 5);
    assert_int_equal(matched(s, f, &d), 2);
    for (size_t i = 0; i < 5; i++) expect_payload(s, &c.keys[i], PLEN);
    scdb_store_stats(s, &st);
    assert_int_equal(st.blocks, 7);
    assert_int_equal(st.checksum_failures, 0);
    scdb_store_close(&s);

    /* another block size: refused */
    o.path = f->dir;
    o.block_tokens = BT * 2;
    assert_int_equal(scdb_store_open(&o, &s), SCDB_EMISMATCH);
    assert_null(s);

    /* reopen with a smaller capacity: trimmed at open, leaves first, so
     * every remaining block's prefix is intact */
    s = open_store(f, 4 * fp + fp / 2, 0);
    scdb_store_stats(s, &st);
    assert_int_equal(st.blocks, 4);
    assert_int_equal(st.evictions, 3);
    {
        size_t mc = matched(s, f, &c), md = matched(s, f, &d);
        assert_int_equal(mc + md, 4);
    }
    scdb_store_close(&s);
}

static void test_map_growth(void **state)
{
    fixture *f = *state;
    scdb_store_opts o = {0};
    scdb_store *s = NULL;
    scdb_store_stat st;
    chain c[4];

    o.path = f->dir;
    o.block_tokens = BT;
    o.map_size = 64 << 10; /* 16 pages: the first batch already overflows it */
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    for (int i = 0; i < 4; i++) {
        make_chain(f, &c[i], 20, 60 + i);
        assert_int_equal(put_range(s, f, &c[i], 0, 20, 64 << 10, NULL), SCDB_OK);
    }
    scdb_store_stats(s, &st);
    print_message("map growths %llu, map %llu\n", (unsigned long long)st.map_growths,
                  (unsigned long long)st.map_bytes);
    assert_true(st.map_growths >= 4);
    assert_true(st.map_bytes >= 80 * (64 << 10));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(matched(s, f, &c[i]), 20);
        expect_payload(s, &c[i].keys[19], 64 << 10);
    }
    scdb_store_close(&s);
    /* the grown map is adopted on reopen even when asked for less */
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    assert_int_equal(matched(s, f, &c[3]), 20);
    scdb_store_close(&s);
}

/* -------------------------------------------------------- on-disk damage */

#define MARKER "<<scdb-corrupt-me-marker>>"

static void put_marked(scdb_store *s, const fixture *f, const chain *c)
{
    scdb_block_put p[2];
    uint8_t *buf[2];
    for (int i = 0; i < 2; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].key = c->keys[i];
        if (i) p[i].parent = c->keys[0];
        p[i].block_index = (uint32_t)i;
        p[i].payload_len = 3 * PLEN;
        buf[i] = malloc(3 * PLEN);
        fill_payload(&c->keys[i], buf[i], 3 * PLEN);
        p[i].payload = buf[i];
    }
    memcpy(buf[1] + 2000, MARKER, strlen(MARKER)); /* only in block 1 */
    assert_int_equal(scdb_store_put_batch(s, &f->ns, p, 2, NULL), SCDB_OK);
    free(buf[0]), free(buf[1]);
}

/* Flip one byte 100 bytes past the marker inside data.mdb. */
static void corrupt_on_disk(const fixture *f)
{
    char path[300];
    FILE *fp;
    uint8_t *data;
    long len;
    size_t hits = 0;
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    len = ftell(fp);
    data = malloc((size_t)len);
    fseek(fp, 0, SEEK_SET);
    assert_int_equal(fread(data, 1, (size_t)len, fp), (size_t)len);
    for (long i = 0; i + (long)strlen(MARKER) <= len; i++) {
        if (memcmp(data + i, MARKER, strlen(MARKER))) continue;
        hits++;
        fseek(fp, i + 100, SEEK_SET);
        fputc(data[i + 100] ^ 0x5a, fp);
    }
    assert_true(hits >= 1); /* also in freed pages of a rewritten value */
    fclose(fp);
    free(data);
}

static void test_corruption_on_disk(void **state)
{
    fixture *f = *state;
    scdb_store_opts o = {0};
    scdb_store *s = open_store(f, 0, 0);
    scdb_store_stat st;
    scdb_block *h = NULL;
    uint8_t *buf = malloc(3 * PLEN);
    chain c;

    make_chain(f, &c, 2, 70);
    put_marked(s, f, &c);
    scdb_store_close(&s);
    corrupt_on_disk(f);

    s = open_store(f, 0, 1 << 20);
    /* lookups do not read values: both blocks still look stored ... */
    assert_int_equal(matched(s, f, &c), 2);
    /* ... but the read verifies and reports it, never the bytes */
    memset(buf, 0, 3 * PLEN);
    assert_int_equal(scdb_store_get(s, &c.keys[1], buf, 3 * PLEN, NULL), SCDB_ECHECKSUM);
    assert_int_equal(buf[0], 0); /* nothing is copied before verification */
    scdb_store_stats(s, &st);
    assert_int_equal(st.checksum_failures, 1);
    assert_int_equal(st.get_misses, 1);
    assert_int_equal(st.hot_blocks, 0); /* never cached */
    /* from now on it is a miss for lookups, gets and handles */
    assert_int_equal(matched(s, f, &c), 1);
    assert_int_equal(scdb_store_get(s, &c.keys[1], buf, 3 * PLEN, NULL), SCDB_ECHECKSUM);
    assert_int_equal(scdb_store_acquire(s, &c.keys[1], &h), SCDB_ECHECKSUM);
    scdb_store_stats(s, &st);
    assert_int_equal(st.checksum_failures, 1); /* counted once */
    expect_payload(s, &c.keys[0], 3 * PLEN);   /* the parent is fine */
    /* a put of the same block heals it */
    put_marked(s, f, &c);
    assert_int_equal(matched(s, f, &c), 2);
    assert_int_equal(scdb_store_get(s, &c.keys[1], buf, 3 * PLEN, NULL), SCDB_OK);
    assert_memory_equal(buf + 2000, MARKER, strlen(MARKER));
    scdb_store_close(&s);

    /* verify_on_open finds it at open and deletes it */
    corrupt_on_disk(f);
    o.path = f->dir;
    o.block_tokens = BT;
    o.verify_on_open = 1;
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    scdb_store_stats(s, &st);
    assert_int_equal(st.checksum_failures, 1);
    assert_int_equal(st.blocks, 1);
    assert_int_equal(matched(s, f, &c), 1);
    scdb_store_close(&s);
    free(buf);
}

/* ------------------------------------------ visibility callbacks (on_visible) */

/* What a mirror of on_visible holds (the broker's lookup index does this). */
typedef struct mirror {
    scdb_key keys[256];
    size_t n;
    int bad;                     /* an add of a present key, a remove of an absent one */
} mirror;

static long mirror_find(const mirror *m, const scdb_key *k)
{
    for (size_t i = 0; i < m->n; i++)
        if (!memcmp(m->keys[i].b, k->b, 16)) return (long)i;
    return -1;
}

static void on_visible(void *ctx, const scdb_key *k, int visible)
{
    mirror *m = ctx;
    long i = mirror_find(m, k);
    if (visible) {
        if (i >= 0 || m->n == 256) m->bad++;
        else m->keys[m->n++] = *k;
    } else {
        if (i < 0) m->bad++;
        else m->keys[i] = m->keys[--m->n];
    }
}

static void mirror_fill(void *ctx, const scdb_key *k) { on_visible(ctx, k, 1); }

static scdb_store *open_mirrored(const fixture *f, uint64_t cap, uint64_t hot, mirror *m)
{
    scdb_store_opts o = {0};
    scdb_store *s = NULL;
    o.path = f->dir;
    o.block_tokens = BT;
    o.disk_capacity_bytes = cap;
    o.hot_capacity_bytes = hot;
    o.on_visible = on_visible;
    o.on_visible_ctx = m;
    assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
    m->n = 0;
    m->bad = 0;
    assert_int_equal(scdb_store_foreach_key(s, mirror_fill, m), SCDB_OK);
    return s;
}

/* The mirror's answer for chain c (leading keys present) equals lookup's. */
static void assert_mirror_agrees(scdb_store *s, const fixture *f, const mirror *m,
                                 const chain *c)
{
    size_t k = 0;
    while (k < c->n && mirror_find(m, &c->keys[k]) >= 0) k++;
    assert_int_equal(k, matched(s, f, c));
    assert_int_equal(m->bad, 0);
}

/* Puts, eviction, delete, damage found by a read, healing, reopen: a
 * mirror fed by on_visible (and foreach_key at open) always answers as
 * lookup does, and holds nothing else. */
static void test_visible_mirror(void **state)
{
    fixture *f = *state;
    uint64_t fp = block_footprint(f);
    mirror *m = calloc(1, sizeof *m), *m2 = calloc(1, sizeof *m2);
    scdb_store *s = open_mirrored(f, 3 * fp + fp / 2, 0, m);   /* 3 blocks */
    scdb_store_stat st;
    chain x, y, z;

    make_chain(f, &x, 2, 20);
    make_chain(f, &y, 1, 21);
    make_chain(f, &z, 1, 22);
    assert_int_equal(m->n, 0);
    assert_int_equal(put_range(s, f, &x, 0, 2, PLEN, NULL), SCDB_OK);
    assert_int_equal(put_range(s, f, &y, 0, 1, PLEN, NULL), SCDB_OK);
    assert_int_equal(m->n, 3);
    assert_mirror_agrees(s, f, m, &x);
    assert_mirror_agrees(s, f, m, &y);
    assert_int_equal(put_range(s, f, &z, 0, 1, PLEN, NULL), SCDB_OK);  /* evicts x1 */
    assert_int_equal(m->n, 3);
    assert_mirror_agrees(s, f, m, &x);
    assert_mirror_agrees(s, f, m, &z);
    assert_int_equal(scdb_store_delete(s, &z.keys[0]), SCDB_OK);
    assert_mirror_agrees(s, f, m, &z);
    assert_int_equal(scdb_store_delete(s, &z.keys[0]), SCDB_ENOTFOUND);
    assert_int_equal(m->n, 2);
    /* foreach_key lists exactly the mirror */
    m2->n = 0;
    assert_int_equal(scdb_store_foreach_key(s, mirror_fill, m2), SCDB_OK);
    assert_int_equal(m2->n, m->n);
    for (size_t i = 0; i < m2->n; i++) assert_true(mirror_find(m, &m2->keys[i]) >= 0);
    assert_int_equal(scdb_store_foreach_key(NULL, mirror_fill, m2), SCDB_EINVAL);
    assert_int_equal(scdb_store_foreach_key(s, NULL, m2), SCDB_EINVAL);
    scdb_store_stats(s, &st);
    assert_int_equal(st.blocks, m->n);
    scdb_store_close(&s);

    /* damage found by a read leaves the mirror; a put of it comes back */
    {
        chain c;
        uint8_t *buf = malloc(3 * PLEN);
        s = open_mirrored(f, 0, 0, m);
        assert_int_equal(m->n, 2);
        make_chain(f, &c, 2, 71);
        put_marked(s, f, &c);
        scdb_store_close(&s);
        corrupt_on_disk(f);
        s = open_mirrored(f, 0, 0, m);
        assert_int_equal(m->n, 4);
        assert_mirror_agrees(s, f, m, &c);
        assert_int_equal(scdb_store_get(s, &c.keys[1], buf, 3 * PLEN, NULL), SCDB_ECHECKSUM);
        assert_int_equal(m->n, 3);
        assert_mirror_agrees(s, f, m, &c);
        put_marked(s, f, &c);
        assert_int_equal(m->n, 4);
        assert_mirror_agrees(s, f, m, &c);
        assert_mirror_agrees(s, f, m, &x);
        assert_mirror_agrees(s, f, m, &y);
        scdb_store_close(&s);
        free(buf);
    }
    free(m);
    free(m2);
}

/* ------------------------------------------------------- kill -9 durability */

typedef struct acked {
    scdb_key *keys;
    size_t n, cap;
} acked;

static void ack_add(acked *a, const char *line)
{
    scdb_key k;
    if (strncmp(line, "ACK ", 4) || strlen(line) < 36) return;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        sscanf(line + 4 + 2 * i, "%2x", &v);
        k.b[i] = (uint8_t)v;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->keys = realloc(a->keys, a->cap * sizeof *a->keys);
    }
    a->keys[a->n++] = k;
}

/* Every value in the env decodes, verifies, and has its parent stored:
 * checked with raw LMDB, independently of the store's own loader. */
static void check_env_raw(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    scdb_block_info *info = malloc(sizeof *info);
    size_t n = 0;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 2);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "blocks", 0, &dbi), 0);
    assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
    while (mdb_cursor_get(cur, &k, &v, n ? MDB_NEXT : MDB_FIRST) == 0) {
        const void *payload;
        assert_int_equal(k.mv_size, 16);
        assert_int_equal(scdb_block_value_decode(v.mv_data, v.mv_size, k.mv_data, info, &payload),
                         SCDB_OK);
        if (!scdb_key_is_zero(&info->parent)) {
            MDB_val pk = {16, info->parent.b}, pv;
            assert_int_equal(mdb_get(txn, dbi, &pk, &pv), 0);
        }
        n++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    free(info);
}

static void test_kill9_durability(void **state)
{
    fixture *f = *state;
    const char *env_rounds = getenv("SCDB_STORE_CRASH_ROUNDS");
    int rounds = env_rounds ? atoi(env_rounds) : 5;
    acked a = {0};
    uint64_t rng = (uint64_t)time(NULL);
    scdb_ns ns;

    scdb_ns_make(CRASH_NS_ID, strlen(CRASH_NS_ID), SCDB_F16, 1, &ns);
    print_message("kill -9 durability: %d rounds (SCDB_STORE_CRASH_ROUNDS), seed %llu\n",
                  rounds, (unsigned long long)rng);
    for (int r = 0; r < rounds; r++) {
        int pfd[2];
        pid_t pid;
        FILE *in;
        char line[128], seed[32];
        size_t before = a.n, kill_after = 1 + scdb_splitmix64(&rng) % 40;
        int status;
        scdb_store_opts o = {0};
        scdb_store *s = NULL;
        scdb_store_stat st;

        assert_int_equal(pipe(pfd), 0);
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)scdb_splitmix64(&rng));
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            /* the child opens the env itself (after exec): nothing LMDB
             * crosses the fork */
            dup2(pfd[1], 1);
            close(pfd[0]);
            close(pfd[1]);
            execl(SCDB_STORE_CRASH_WRITER, "store_crash_writer", f->dir, seed, "1000000",
                  (char *)NULL);
            _exit(127);
        }
        close(pfd[1]);
        in = fdopen(pfd[0], "r");
        while (a.n - before < kill_after && fgets(line, sizeof line, in)) ack_add(&a, line);
        /* land the kill at a random point inside the next batches */
        usleep((useconds_t)(scdb_splitmix64(&rng) % 20000));
        signal_pid(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status)); /* it was still writing: a real crash */
        /* lines already in the pipe were acknowledged before the kill */
        while (fgets(line, sizeof line, in)) ack_add(&a, line);
        fclose(in);
        assert_true(a.n > before);

        check_env_raw(f->dir);
        o.path = f->dir;
        o.block_tokens = CRASH_BLOCK_TOKENS;
        o.verify_on_open = 1;
        assert_int_equal(scdb_store_open(&o, &s), SCDB_OK);
        scdb_store_stats(s, &st);
        assert_int_equal(st.checksum_failures, 0); /* no torn value */
        assert_true(st.blocks >= a.n);
        for (size_t i = 0; i < a.n; i++) {
            uint64_t len = crash_payload_len(&a.keys[i]);
            uint8_t *got = malloc(len), *want = malloc(len);
            crash_payload_fill(&a.keys[i], want, len);
            assert_int_equal(scdb_store_get(s, &a.keys[i], got, len, NULL), SCDB_OK);
            assert_memory_equal(got, want, len);
            free(got), free(want);
        }
        scdb_store_close(&s);
        print_message("  round %d: %zu acknowledged blocks, all present (%llu stored)\n", r,
                      a.n, (unsigned long long)st.blocks);
    }
    free(a.keys);
}

/* ---------------------------------------------------- readers and a writer */

typedef struct reader_arg {
    scdb_store *s;
    const fixture *f;
    chain *chains;
    int n_chains;
    atomic_int *stop;
    size_t ok, miss;
    int bad;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *r = p;
    uint64_t rng = (uint64_t)(uintptr_t)r;
    uint8_t *buf = malloc(PLEN), *want = malloc(PLEN);
    while (!atomic_load(r->stop)) {
        chain *c = &r->chains[scdb_splitmix64(&rng) % (uint64_t)r->n_chains];
        size_t full, m;
        scdb_store_lookup(r->s, &r->f->ns, c->tokens, c->n * BT, NULL, 0, &full, &m);
        for (size_t i = 0; i < m; i++) {
            scdb_block *h = NULL;
            scdb_err e = (i & 1) ? scdb_store_get(r->s, &c->keys[i], buf, PLEN, NULL)
                                 : scdb_store_acquire(r->s, &c->keys[i], &h);
            if (e == SCDB_ENOTFOUND) {
                r->miss++;
                continue;
            }
            if (e) {
                fprintf(stderr, "reader: %s (%s block %zu)\n", scdb_strerror(e),
                        (i & 1) ? "get" : "acquire", i);
                r->bad++;
                continue;
            }
            fill_payload(&c->keys[i], want, PLEN);
            if (memcmp(h ? h->payload : buf, want, PLEN)) r->bad++;
            scdb_store_release(r->s, &h);
            r->ok++;
        }
    }
    free(buf), free(want);
    return NULL;
}

static void test_concurrent_readers(void **state)
{
    fixture *f = *state;
    uint64_t fp = block_footprint(f);
    scdb_store *s = open_store(f, 24 * fp, 4 * (PLEN + 112));
    enum { NCH = 16, NR = 3 };
    chain *chains = malloc(NCH * sizeof *chains);
    reader_arg args[NR];
    pthread_t th[NR];
    atomic_int stop = 0;
    size_t ok = 0;

    for (int i = 0; i < NCH; i++) make_chain(f, &chains[i], 4, 80 + (uint64_t)i);
    for (int i = 0; i < NR; i++) {
        args[i] = (reader_arg){s, f, chains, NCH, &stop, 0, 0, 0};
        pthread_create(&th[i], NULL, reader, &args[i]);
    }
    for (int round = 0; round < 150; round++) {
        chain *c = &chains[round % NCH];
        size_t full, m;
        scdb_store_lookup(s, &f->ns, c->tokens, c->n * BT, NULL, 0, &full, &m);
        assert_int_equal(put_range(s, f, c, m, c->n, PLEN, NULL), SCDB_OK);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NR; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
        ok += args[i].ok;
    }
    assert_true(ok > 0);
    free(chains);
    scdb_store_close(&s);
}

/* ------------------------------------------------- allocation failures */

/* The test is linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc:
 * every allocation made by code linked statically (the store library, this
 * file) goes through these, and the Nth one fails while fail_countdown
 * runs.  LMDB's own allocations (a shared library) are not affected. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
static long fail_countdown = -1;
static long alloc_calls;

static bool fail_now(void)
{
    if (fail_countdown < 0) return false;
    alloc_calls++;
    return fail_countdown-- == 0;
}
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }

static bool ok_or_nomem(scdb_err e) { return e == SCDB_OK || e == SCDB_ENOMEM; }

/* SQLite-style: fail the Nth allocation of a whole open/put/lookup/get/
 * acquire/close sequence, for every N until the sequence runs clean; each
 * call must return SCDB_OK or SCDB_ENOMEM, leak nothing (ASan build) and
 * leave a store that reopens consistently. */
static void test_allocation_failures(void **state)
{
    fixture *f = *state;
    static uint8_t payload[3][PLEN], buf[PLEN];
    chain c;
    long n;

    make_chain(f, &c, 3, 90);
    for (int i = 0; i < 3; i++) fill_payload(&c.keys[i], payload[i], PLEN);
    for (n = 0; n < 10000; n++) {
        scdb_store_opts o = {0};
        scdb_store *s = NULL;
        scdb_block_put puts[3];
        scdb_block *h = NULL;
        size_t n_stored = 0, full = 0, m = 0;
        char path[300];
        scdb_err e;
        bool exhausted;

        snprintf(path, sizeof path, "%s/data.mdb", f->dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/lock.mdb", f->dir);
        unlink(path);
        memset(puts, 0, sizeof puts);
        for (int i = 0; i < 3; i++) {
            puts[i].key = c.keys[i];
            if (i) puts[i].parent = c.keys[i - 1];
            puts[i].block_index = (uint32_t)i;
            puts[i].payload = payload[i];
            puts[i].payload_len = PLEN;
        }
        o.path = f->dir;
        o.block_tokens = BT;
        o.hot_capacity_bytes = 2 * (PLEN + 112);
        o.disk_capacity_bytes = 1 << 20;

        alloc_calls = 0;
        fail_countdown = n;
        e = scdb_store_open(&o, &s);
        assert_true(ok_or_nomem(e));
        if (!e) {
            assert_true(ok_or_nomem(scdb_store_put_batch(s, &f->ns, puts, 3, &n_stored)));
            assert_true(ok_or_nomem(scdb_store_lookup(s, &f->ns, c.tokens, 3 * BT, NULL, 0,
                                                      &full, &m)));
            assert_true(ok_or_nomem(scdb_store_get(s, &c.keys[0], buf, PLEN, NULL)) ||
                        n_stored == 0);
            e = scdb_store_acquire(s, &c.keys[1], &h);
            assert_true(ok_or_nomem(e) || (e == SCDB_ENOTFOUND && n_stored < 2));
            scdb_store_release(s, &h);
            scdb_store_close(&s);
        } else {
            assert_null(s);
        }
        exhausted = fail_countdown >= 0; /* no failure was injected: done */
        fail_countdown = -1;

        /* what was acknowledged is there, and nothing else is half-there */
        s = open_store(f, 0, 0);
        m = matched(s, f, &c);
        assert_true(m >= n_stored);
        for (size_t i = 0; i < m; i++) expect_payload(s, &c.keys[i], PLEN);
        scdb_store_close(&s);
        if (exhausted) break;
    }
    print_message("allocation failures: %ld allocation points covered\n", n);
    assert_true(n > 10);
}

/* ------------------------------------------------------------- disk full */

/* Fill `c` one 64 KiB block at a time from block `from` until a put fails;
 * the index of the block that failed (c->n if none did). */
static size_t put_until_full(scdb_store *s, const fixture *f, const chain *c, size_t from,
                             scdb_err *e)
{
    size_t i;
    for (i = from, *e = SCDB_OK; i < c->n; i++)
        if ((*e = put_range(s, f, c, i, i + 1, 65536, NULL))) break;
    return i;
}

/* A real full filesystem: the store on a 2 MiB tmpfs (mounting needs root;
 * skipped otherwise).  LMDB reports a full disk as ENOSPC or, for a short
 * write, EIO: either way the store says SCDB_ENOSPC, logs the transition
 * once (full -> ok -> full: two "disk full" lines, one "space again"),
 * counts the refused blocks, serves what it has, stores again once space is
 * freed, and everything acknowledged survives a reopen.  The log goes to a
 * file while the store runs, so the checks come after stderr is back. */
static void test_disk_full(void **state)
{
    fixture *f = *state, g = *f;
    char filler[300], logp[300];
    static uint8_t junk[768 << 10];
    scdb_store_stat st1, st2, st3;
    scdb_err e1, e2, e3, e4, e5;
    size_t ok1, ok2, m1, m2;
    scdb_store *s;
    chain c;
    int saved, logfd, fd;

    snprintf(f->mnt, sizeof f->mnt, "%s", f->dir);
    *strrchr(f->mnt, '/') = 0;
    snprintf(logp, sizeof logp, "%s/log", f->mnt);
    strcat(f->mnt, "/fs");
    assert_int_equal(mkdir(f->mnt, 0700), 0);
    if (mount("tmpfs", f->mnt, "tmpfs", 0, "size=2m")) {
        fprintf(stderr, "test_disk_full: SKIPPED: cannot mount a tmpfs on %s (%s): needs root\n",
                f->mnt, strerror(errno));
        f->mnt[0] = 0;
        skip();
    }
    snprintf(g.dir, sizeof g.dir, "%s/env", f->mnt);
    snprintf(filler, sizeof filler, "%s/filler", f->mnt);
    assert_true((fd = open(filler, O_WRONLY | O_CREAT, 0600)) >= 0);
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
    close(fd);
    s = open_store(&g, 0, 0);
    make_chain(&g, &c, 64, 77);

    /* the store's log lines go to a file we can count */
    fflush(stderr);
    saved = dup(2);
    assert_true((logfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600)) >= 0);
    dup2(logfd, 2);
    close(logfd);
    scdb_log_set_level(SCDB_LOG_INFO);
    ok1 = put_until_full(s, &g, &c, 0, &e1);
    /* refused again, without another log line */
    e2 = put_range(s, &g, &c, ok1, ok1 + 1, 65536, NULL);
    e3 = put_range(s, &g, &c, ok1, ok1 + 2, 65536, NULL);
    scdb_store_stats(s, &st1);
    m1 = matched(s, &g, &c);
    /* space freed: puts resume (and fill it again) */
    e4 = unlink(filler) ? SCDB_ESYS : SCDB_OK;
    ok2 = put_until_full(s, &g, &c, ok1, &e5);
    scdb_store_stats(s, &st2);
    m2 = matched(s, &g, &c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    scdb_log_set_level(SCDB_LOG_OFF);

    assert_true(ok1 > 2 && ok1 < c.n);
    assert_int_equal(e1, SCDB_ENOSPC);
    assert_int_equal(e2, SCDB_ENOSPC);
    assert_int_equal(e3, SCDB_ENOSPC);
    assert_int_equal(m1, ok1);                /* what is there is served */
    expect_payload(s, &c.keys[ok1 - 1], 65536);
    assert_int_equal(st1.disk_full, 1);
    assert_int_equal(st1.disk_full_refusals, 4);
    assert_true(st1.disk_free_bytes < 65536);
    assert_int_equal(e4, SCDB_OK);
    assert_true(ok2 > ok1 + 2);
    assert_int_equal(m2, ok2);
    if (ok2 < c.n) {
        assert_int_equal(e5, SCDB_ENOSPC);
        assert_int_equal(st2.disk_full, 1);
    }
    assert_int_equal(scdb_test_count_lines(logp, "disk full"), ok2 < c.n ? 2 : 1);
    assert_int_equal(scdb_test_count_lines(logp, "space again"), 1);
    assert_int_equal(scdb_test_count_lines(logp, "lmdb"), 0);
    assert_int_equal(scdb_test_count_lines(logp, g.dir), ok2 < c.n ? 3 : 2); /* each names the directory */
    scdb_store_close(&s);

    /* everything acknowledged is there after a reopen */
    s = open_store(&g, 0, 0);
    assert_int_equal(matched(s, &g, &c), ok2);
    for (size_t i = 0; i < ok2; i++) expect_payload(s, &c.keys[i], 65536);
    scdb_store_stats(s, &st3);
    assert_int_equal(st3.disk_full, 0);
    scdb_store_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_known_answer),
        cmocka_unit_test(test_key_chaining_and_namespace),
        cmocka_unit_test(test_value_roundtrip),
        cmocka_unit_test(test_value_bad_input),
        cmocka_unit_test_setup_teardown(test_put_lookup_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_leaves_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_lru_order_and_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pinning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_tier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acquire_during_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_on_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_visible_mirror, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_durability, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_readers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
    };
    scdb_log_set_level(SCDB_LOG_OFF); /* the corruption tests log errors on purpose */
    if (getenv("SCDB_TEST_FILTER")) cmocka_set_test_filter(getenv("SCDB_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
