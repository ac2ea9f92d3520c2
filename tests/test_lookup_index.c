/* test_lookup_index.c — the shared-memory lookup index (schema/lookup_index.h)
 * on its own: writer operations (insert, remove, tombstone purge, grow,
 * retire), the reader's checks on damaged or foreign objects (garbage,
 * truncated, wrong-shaped, wrong broker, loose mode), and a reader process
 * probing while a writer churns the table: never a wrong answer.  The
 * broker-level behaviour (agreement with the request path) is in
 * test_broker.c. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "lookup_index.h"

#define INST 0x1234abcdull
#define BT 64u

static scdb_key key_of(uint32_t i)
{
    scdb_ns ns;
    scdb_key k;
    int32_t t[4] = {(int32_t)i, 1, 2, 3};
    scdb_ns_make("test", 4, 0, 1, &ns);
    scdb_block_key(NULL, &ns, t, 4, &k);
    return k;
}

static int present(const scdb_lix *ix, uint32_t i)
{
    scdb_key k = key_of(i);
    size_t n = 99;
    assert_int_equal(scdb_lix_match(ix, &k, 1, &n), SCDB_OK);
    return (int)n;
}

/* A writable view of an object by name, to damage it. */
static void *raw_map(const char *name, size_t *size)
{
    struct stat st;
    int fd = shm_open(name, O_RDWR, 0);
    void *p;
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    *size = (size_t)st.st_size;
    p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    return p;
}

static void raw_truncate(const char *name, off_t len)
{
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, len), 0);
    close(fd);
}

/* --------------------------------------------------------------- writer */

static void test_insert_remove(void **state)
{
    scdb_lix *w = NULL, *r = NULL;
    scdb_key keys[8];
    size_t n;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 10, &w), SCDB_OK);
    assert_int_equal(scdb_lix_capacity(w), SCDB_LIX_MIN_CAPACITY);
    assert_int_equal(strncmp(scdb_lix_name(w), "/scdb-lix-", 10), 0);
    assert_int_equal(strlen(scdb_lix_name(w)), 10 + 32);
    assert_int_equal(scdb_lix_open(scdb_lix_name(w), INST, BT, &r), SCDB_OK);
    /* the object is private to our user */
    {
        struct stat st;
        char p[128];
        snprintf(p, sizeof p, "/dev/shm%s", scdb_lix_name(w));
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
    }
    for (uint32_t i = 0; i < 8; i++) keys[i] = key_of(i);
    assert_int_equal(scdb_lix_match(r, keys, 8, &n), SCDB_OK);
    assert_int_equal(n, 0);
    for (uint32_t i = 0; i < 5; i++) assert_int_equal(scdb_lix_insert(w, &keys[i]), SCDB_OK);
    assert_int_equal(scdb_lix_insert(w, &keys[2]), SCDB_OK);      /* present: no-op */
    assert_int_equal(scdb_lix_count(w), 5);
    assert_int_equal(scdb_lix_match(r, keys, 8, &n), SCDB_OK);
    assert_int_equal(n, 5);
    scdb_lix_remove(w, &keys[3]);
    scdb_lix_remove(w, &keys[7]);                                  /* absent: no-op */
    assert_int_equal(scdb_lix_count(w), 4);
    assert_int_equal(scdb_lix_match(r, keys, 8, &n), SCDB_OK);
    assert_int_equal(n, 3);
    assert_int_equal(present(r, 4), 1);
    assert_int_equal(scdb_lix_insert(w, &keys[3]), SCDB_OK);       /* reuses the tombstone */
    assert_int_equal(scdb_lix_match(r, keys, 8, &n), SCDB_OK);
    assert_int_equal(n, 5);
    assert_int_equal(scdb_lix_match(r, keys, 0, &n), SCDB_OK);
    assert_int_equal(n, 0);
    /* a reader cannot write; bad arguments */
    assert_int_equal(scdb_lix_insert(r, &keys[6]), SCDB_EINVAL);
    assert_int_equal(scdb_lix_match(r, NULL, 1, &n), SCDB_EINVAL);
    assert_int_equal(scdb_lix_match(NULL, keys, 1, &n), SCDB_EINVAL);
    scdb_lix_close(&r);
    assert_null(r);
    scdb_lix_close(&r);
    scdb_lix_retire(&w, NULL);
    assert_null(w);
}

/* Half full is full (SCDB_EFULL: grow); churn fills the table with
 * tombstones, which purges remove without losing a key. */
static void test_full_and_purge(void **state)
{
    scdb_lix *w = NULL;
    uint32_t cap;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    cap = (uint32_t)scdb_lix_capacity(w);
    for (uint32_t i = 0; i < cap / 2; i++) {
        scdb_key k = key_of(i);
        assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    }
    {
        scdb_key k = key_of(cap);
        assert_int_equal(scdb_lix_insert(w, &k), SCDB_EFULL);
    }
    /* keep 100 keys, churn the rest many times over */
    for (uint32_t i = 100; i < cap / 2; i++) {
        scdb_key k = key_of(i);
        scdb_lix_remove(w, &k);
    }
    for (uint32_t round = 0; round < 20; round++)
        for (uint32_t i = 0; i < 300; i++) {
            scdb_key k = key_of(10000 + round * 300 + i);
            assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
            if (i % 30) scdb_lix_remove(w, &k);
        }
    assert_int_equal(scdb_lix_count(w), 100 + 20 * 10);
    for (uint32_t i = 0; i < 100; i++) assert_int_equal(present(w, i), 1);
    for (uint32_t i = 100; i < cap / 2; i++) assert_int_equal(present(w, i), 0);
    for (uint32_t round = 0; round < 20; round++)
        for (uint32_t i = 0; i < 300; i++)
            assert_int_equal(present(w, 10000 + round * 300 + i), i % 30 == 0);
    scdb_lix_retire(&w, NULL);
}

/* Grow copies the keys into a bigger object; the retired one names it. */
static void test_grow_retire(void **state)
{
    scdb_lix *w = NULL, *w2 = NULL, *r = NULL, *r2 = NULL;
    char next[SCDB_LIX_NAME_MAX], old_name[SCDB_LIX_NAME_MAX];
    size_t n;
    scdb_key k = key_of(5);
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    for (uint32_t i = 0; i < 300; i++) {
        scdb_key x = key_of(i);
        assert_int_equal(scdb_lix_insert(w, &x), SCDB_OK);
    }
    assert_int_equal(scdb_lix_open(scdb_lix_name(w), INST, BT, &r), SCDB_OK);
    assert_int_equal(scdb_lix_retired(r, next), 0);
    assert_int_equal(scdb_lix_grow(w, &w2), SCDB_OK);
    assert_int_equal(scdb_lix_capacity(w2), 2 * scdb_lix_capacity(w));
    assert_int_equal(scdb_lix_count(w2), 300);
    snprintf(old_name, sizeof old_name, "%s", scdb_lix_name(w));
    scdb_lix_retire(&w, scdb_lix_name(w2));
    /* the old reader: retired, names its successor; the name is gone */
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ECLOSED);
    assert_int_equal(n, 0);
    assert_int_equal(scdb_lix_retired(r, next), 1);
    assert_string_equal(next, scdb_lix_name(w2));
    assert_int_equal(scdb_lix_open(old_name, INST, BT, &r2), SCDB_ENOTFOUND);
    assert_int_equal(scdb_lix_open(next, INST, BT, &r2), SCDB_OK);
    for (uint32_t i = 0; i < 300; i++) assert_int_equal(present(r2, i), 1);
    assert_int_equal(present(r2, 300), 0);
    scdb_lix_close(&r);
    /* retired without successor: a reader of it gets ECLOSED at open too
     * (while it exists), with an empty successor */
    {
        scdb_lix *w3 = NULL, *r3 = NULL;
        char name[SCDB_LIX_NAME_MAX];
        size_t sz;
        scdb_lix_header *h;
        assert_int_equal(scdb_lix_create(INST, BT, 0, &w3), SCDB_OK);
        snprintf(name, sizeof name, "%s", scdb_lix_name(w3));
        h = raw_map(name, &sz);
        atomic_store(&h->state, SCDB_LIX_RETIRED);
        assert_int_equal(scdb_lix_open(name, INST, BT, &r3), SCDB_ECLOSED);
        assert_non_null(r3);
        assert_int_equal(scdb_lix_retired(r3, next), 1);
        assert_string_equal(next, "");
        scdb_lix_close(&r3);
        munmap(h, sz);
        scdb_lix_retire(&w3, NULL);
    }
    scdb_lix_close(&r2);
    scdb_lix_retire(&w2, NULL);
}

/* ------------------------------------------------------------ bad input */

typedef enum {
    BAD_MAGIC, BAD_VERSION, BAD_HEADER_BYTES, BAD_SLOT_BYTES, BAD_CAP_POW2, BAD_CAP_SMALL,
    BAD_CAP_HUGE, BAD_STATE, BAD_INSTANCE, BAD_BLOCK_TOKENS, BAD_GARBAGE, BAD_SHORT_HEADER,
    BAD_EMPTY, BAD_NO_SLOTS, BAD_TOO_LONG, BAD_MODE, BAD_COUNT
} bad_kind;

static scdb_err open_damaged(bad_kind kind)
{
    scdb_lix *w = NULL, *r = NULL;
    char name[SCDB_LIX_NAME_MAX];
    scdb_lix_header *h;
    size_t sz;
    scdb_err e;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    snprintf(name, sizeof name, "%s", scdb_lix_name(w));
    h = raw_map(name, &sz);
    switch (kind) {
    case BAD_MAGIC: h->magic ^= 1; break;
    case BAD_VERSION: h->version = SCDB_LIX_VERSION + 1; break;
    case BAD_HEADER_BYTES: h->header_bytes = 2048; break;
    case BAD_SLOT_BYTES: h->slot_bytes = 16; break;
    case BAD_CAP_POW2: h->capacity = 1000; break;
    case BAD_CAP_SMALL: h->capacity = 512; break;
    case BAD_CAP_HUGE: h->capacity = 1ull << 40; break;
    case BAD_STATE: atomic_store(&h->state, 7); break;
    case BAD_INSTANCE: h->instance ^= 1; break;
    case BAD_BLOCK_TOKENS: h->block_tokens = 32; break;
    case BAD_GARBAGE: {
        uint32_t x = 12345;
        for (size_t i = 0; i < sz; i++) {
            x = x * 1103515245u + 12345u;
            ((uint8_t *)h)[i] = (uint8_t)(x >> 16);
        }
        break;
    }
    case BAD_SHORT_HEADER: raw_truncate(name, 100); break;
    case BAD_EMPTY: raw_truncate(name, 0); break;
    case BAD_NO_SLOTS: raw_truncate(name, SCDB_LIX_HEADER_BYTES + 10 * SCDB_LIX_SLOT_BYTES); break;
    case BAD_TOO_LONG: raw_truncate(name, (off_t)sz + 4096); break;
    case BAD_MODE: {
        int fd = shm_open(name, O_RDWR, 0);
        assert_true(fd >= 0);
        assert_int_equal(fchmod(fd, 0644), 0);
        close(fd);
        break;
    }
    default: break;
    }
    munmap(h, sz);
    e = scdb_lix_open(name, INST, BT, &r);
    if (e) assert_null(r);
    scdb_lix_close(&r);
    /* the writer's own mapping may now extend past the object: drop it
     * without touching it */
    scdb_lix_close(&w);
    shm_unlink(name);
    return e;
}

static void test_open_refuses_bad_objects(void **state)
{
    static const struct {
        bad_kind kind;
        scdb_err want;
    } cases[] = {
        {BAD_MAGIC, SCDB_EFORMAT},        {BAD_VERSION, SCDB_EUNSUPPORTED},
        {BAD_HEADER_BYTES, SCDB_EFORMAT}, {BAD_SLOT_BYTES, SCDB_EFORMAT},
        {BAD_CAP_POW2, SCDB_EFORMAT},     {BAD_CAP_SMALL, SCDB_EFORMAT},
        {BAD_CAP_HUGE, SCDB_EFORMAT},     {BAD_STATE, SCDB_EFORMAT},
        {BAD_INSTANCE, SCDB_EMISMATCH},   {BAD_BLOCK_TOKENS, SCDB_EMISMATCH},
        {BAD_GARBAGE, SCDB_EFORMAT},      {BAD_SHORT_HEADER, SCDB_ETRUNC},
        {BAD_EMPTY, SCDB_ETRUNC},         {BAD_NO_SLOTS, SCDB_ETRUNC},
        {BAD_TOO_LONG, SCDB_EFORMAT},     {BAD_MODE, SCDB_EMISMATCH},
    };
    scdb_lix *r = NULL;
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scdb_err e = open_damaged(cases[i].kind);
        if (e != cases[i].want)
            fail_msg("case %zu: got %s, want %s", i, scdb_strerror(e),
                     scdb_strerror(cases[i].want));
    }
    assert_int_equal(scdb_lix_open("/scdb-lix-does-not-exist", INST, BT, &r), SCDB_ENOTFOUND);
    assert_int_equal(scdb_lix_open("no-slash", INST, BT, &r), SCDB_EINVAL);
    assert_int_equal(scdb_lix_open("/a-name-far-too-long-for-a-lookup-index-object-xxxxxxxx",
                                   INST, BT, &r), SCDB_EINVAL);
    assert_int_equal(scdb_lix_open(NULL, INST, BT, &r), SCDB_EINVAL);
    assert_null(r);
}

/* A table full of garbage that passed the header checks: lookups end
 * (bounded probes) and stay inside the mapping. */
static void test_garbage_slots(void **state)
{
    scdb_lix *w = NULL, *r = NULL;
    scdb_lix_header *h;
    scdb_key keys[64];
    char name[SCDB_LIX_NAME_MAX];
    size_t sz, n;
    uint32_t x = 99;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    snprintf(name, sizeof name, "%s", scdb_lix_name(w));
    h = raw_map(name, &sz);
    for (size_t i = SCDB_LIX_HEADER_BYTES; i < sz; i++) {
        x = x * 1103515245u + 12345u;
        ((uint8_t *)h)[i] = (uint8_t)(x >> 16);
    }
    atomic_store(&h->max_probe, UINT32_MAX);
    assert_int_equal(scdb_lix_open(scdb_lix_name(w), INST, BT, &r), SCDB_OK);
    for (uint32_t i = 0; i < 64; i++) keys[i] = key_of(i);
    assert_int_equal(scdb_lix_match(r, keys, 64, &n), SCDB_OK);
    assert_int_equal(n, 0);
    /* an odd seq that never ends: the reader gives up, it does not hang */
    atomic_store(&h->seq, 1);
    assert_int_equal(scdb_lix_match(r, keys, 1, &n), SCDB_EBUSY);
    munmap(h, sz);
    scdb_lix_close(&r);
    scdb_lix_close(&w);
    shm_unlink(name);
}

/* What a killed broker left: retired and unlinked by name; damaged ones
 * unlinked; missing ones are fine. */
static void test_retire_name(void **state)
{
    scdb_lix *w = NULL, *r = NULL, *w2 = NULL;
    char name[SCDB_LIX_NAME_MAX], name2[SCDB_LIX_NAME_MAX];
    size_t n;
    scdb_key k = key_of(1);
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    snprintf(name, sizeof name, "%s", scdb_lix_name(w));
    assert_int_equal(scdb_lix_open(name, INST, BT, &r), SCDB_OK);
    assert_int_equal(present(r, 1), 1);
    scdb_lix_close(&w);                     /* "killed": still linked, live */
    assert_int_equal(scdb_lix_retire_name(name), SCDB_OK);
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ECLOSED);
    scdb_lix_close(&r);
    assert_int_equal(scdb_lix_open(name, INST, BT, &r), SCDB_ENOTFOUND);
    assert_int_equal(scdb_lix_retire_name(name), SCDB_OK);          /* gone: fine */
    /* damaged: unlinked, reported */
    assert_int_equal(scdb_lix_create(INST, BT, 0, &w2), SCDB_OK);
    snprintf(name2, sizeof name2, "%s", scdb_lix_name(w2));
    scdb_lix_close(&w2);
    raw_truncate(name2, 10);
    assert_int_equal(scdb_lix_retire_name(name2), SCDB_ETRUNC);
    assert_int_equal(scdb_lix_open(name2, INST, BT, &r), SCDB_ENOTFOUND);
    assert_int_equal(scdb_lix_retire_name("bad"), SCDB_EINVAL);
}

/* ---------------------------------------------------------- concurrency */

/* A reader process probes while this process churns the table (inserts,
 * removes, tombstone purges): keys that stay are always found, keys never
 * inserted never are, and a run of stable keys matches whole. */
static void test_reader_process_never_wrong(void **state)
{
    enum { STABLE = 64, CHURN = 300 };
    scdb_lix *w = NULL;
    char name[SCDB_LIX_NAME_MAX];
    int go[2], st;
    pid_t pid;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    snprintf(name, sizeof name, "%s", scdb_lix_name(w));
    for (uint32_t i = 0; i < STABLE; i++) {
        scdb_key k = key_of(i);
        assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    }
    assert_int_equal(pipe(go), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        scdb_lix *r = NULL;
        scdb_key stable[STABLE], never[8];
        long ok = 0, busy = 0, wrong = 0;
        char c;
        close(go[1]);
        if (scdb_lix_open(name, INST, BT, &r)) _exit(2);
        for (uint32_t i = 0; i < STABLE; i++) stable[i] = key_of(i);
        for (uint32_t i = 0; i < 8; i++) never[i] = key_of(1000000 + i);
        if (read(go[0], &c, 1) != 1) _exit(3);
        for (double until = scdb_now() + 1.0; scdb_now() < until;) {
            size_t n;
            scdb_err e = scdb_lix_match(r, stable, STABLE, &n);
            if (e == SCDB_EBUSY) busy++;
            else if (e || n != STABLE) wrong++;
            else ok++;
            e = scdb_lix_match(r, never, 8, &n);
            if (e == SCDB_OK && n != 0) wrong++;
        }
        scdb_lix_close(&r);
        fprintf(stderr, "reader: %ld ok, %ld busy, %ld wrong\n", ok, busy, wrong);
        _exit(wrong ? 1 : ok > 0 ? 0 : 4);
    }
    close(go[0]);
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    {
        uint32_t round = 0;
        for (double until = scdb_now() + 1.2; scdb_now() < until; round++) {
            scdb_lix_tick(w);                  /* the broker's liveness refresh */
            for (uint32_t i = 0; i < CHURN; i++) {
                scdb_key k = key_of(STABLE + 10 + (round % 7) * CHURN + i);
                assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
            }
            for (uint32_t i = 0; i < CHURN; i++) {
                scdb_key k = key_of(STABLE + 10 + (round % 7) * CHURN + i);
                scdb_lix_remove(w, &k);
            }
        }
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    scdb_lix_retire(&w, NULL);
}

/* Liveness: a table its broker has not refreshed for SCDB_LIX_STALE_NS is
 * refused (SCDB_ETIMEDOUT: the client asks the broker instead); a refresh
 * makes it answer again; a reader cannot refresh it. */
static void test_liveness(void **state)
{
    scdb_lix *w = NULL, *r = NULL;
    scdb_key k = key_of(7);
    size_t n = 99;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    assert_int_equal(scdb_lix_open(scdb_lix_name(w), INST, BT, &r), SCDB_OK);
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_OK);
    assert_int_equal(n, 1);
    {   /* age the liveness word as a dead broker's would be */
        int fd = shm_open(scdb_lix_name(w), O_RDWR, 0);
        assert_true(fd >= 0);
        scdb_lix_header *h = mmap(NULL, SCDB_LIX_HEADER_BYTES, PROT_READ | PROT_WRITE,
                                  MAP_SHARED, fd, 0);
        close(fd);
        assert_true(h != MAP_FAILED);
        atomic_store(&h->alive_ns, scdb_now_ns() - 2 * SCDB_LIX_STALE_NS);
        assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ETIMEDOUT);
        assert_int_equal(n, 0);
        scdb_lix_tick(r);                              /* a reader's tick: no-op */
        assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ETIMEDOUT);
        scdb_lix_tick(w);
        assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_OK);
        assert_int_equal(n, 1);
        atomic_store(&h->alive_ns, 0);                 /* never refreshed */
        assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ETIMEDOUT);
        munmap(h, SCDB_LIX_HEADER_BYTES);
    }
    scdb_lix_close(&r);
    scdb_lix_retire(&w, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_remove),
        cmocka_unit_test(test_full_and_purge),
        cmocka_unit_test(test_grow_retire),
        cmocka_unit_test(test_open_refuses_bad_objects),
        cmocka_unit_test(test_garbage_slots),
        cmocka_unit_test(test_retire_name),
        cmocka_unit_test(test_reader_process_never_wrong),
        cmocka_unit_test(test_liveness),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
