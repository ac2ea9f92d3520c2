/* test_lookup_index.c — the shared-memory lookup index (schema/lookup_index.h)
 * on its own: writer operations (insert, remove, tombstone purge, grow,
 * retire), read-only for everyone but the writer (sealed memfd), the
 * reader's checks on damaged or foreign objects (garbage, truncated,
 * wrong-shaped, wrong broker, unsealed), liveness, and a reader process
 * probing while a writer churns the table: never a wrong answer.  The
 * broker-level behaviour (agreement with the request path, the fd socket)
 * is in test_broker.c. */
/* memfd_create */
#define _GNU_SOURCE
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

/* A reader of writer w's object, as a client maps it (from the fd). */
static scdb_err open_r(const scdb_lix *w, scdb_lix **r)
{
    return scdb_lix_open_fd(scdb_lix_fd(w), INST, BT, r);
}

/* A copy of w's object in a new, still unsealed memfd (a mapping of it in
 * *map, *size bytes): damage it, then seal() it and open it as a reader. */
static int copy_of(const scdb_lix *w, void **map, size_t *size)
{
    struct stat st;
    int fd = memfd_create("damaged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(fstat(scdb_lix_fd(w), &st), 0);
    *size = (size_t)st.st_size;
    assert_int_equal(ftruncate(fd, (off_t)*size), 0);
    *map = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(*map != MAP_FAILED);
    assert_int_equal(pread(scdb_lix_fd(w), *map, *size, 0), (ssize_t)*size);
    return fd;
}

static void seal(int fd)
{
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE),
                     0);
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
    assert_int_equal(strlen(scdb_lix_name(w)), 32);             /* the ticket */
    assert_int_equal(open_r(w, &r), SCDB_OK);
    assert_int_equal(scdb_lix_fd(r), -1);                       /* readers hold no fd */
    /* read-only for everyone but its writer: no writable mapping, no write,
     * no resize, no writable protection on the reader's mapping */
    {
        int fd = scdb_lix_fd(w);
        size_t sz = SCDB_LIX_HEADER_BYTES + scdb_lix_capacity(w) * SCDB_LIX_SLOT_BYTES;
        uint8_t b = 0x55;
        void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(m == MAP_FAILED);
        assert_int_equal(errno, EPERM);
        assert_int_equal(pwrite(fd, &b, 1, 100), -1);
        assert_int_equal(errno, EPERM);
        assert_int_equal(ftruncate(fd, 0), -1);
        assert_int_equal(errno, EPERM);
        m = mmap(NULL, sz, PROT_READ, MAP_SHARED, fd, 0);
        assert_true(m != MAP_FAILED);
        assert_int_equal(mprotect(m, sz, PROT_READ | PROT_WRITE), -1);
        munmap(m, sz);
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
    assert_int_equal(open_r(w, &r), SCDB_OK);
    assert_int_equal(scdb_lix_retired(r, next), 0);
    assert_int_equal(scdb_lix_grow(w, &w2), SCDB_OK);
    assert_int_equal(scdb_lix_capacity(w2), 2 * scdb_lix_capacity(w));
    assert_int_equal(scdb_lix_count(w2), 300);
    snprintf(old_name, sizeof old_name, "%s", scdb_lix_name(w));
    scdb_lix_retire(&w, scdb_lix_name(w2));
    /* the old reader: retired, names its successor's ticket */
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ECLOSED);
    assert_int_equal(n, 0);
    assert_int_equal(scdb_lix_retired(r, next), 1);
    assert_string_equal(next, scdb_lix_name(w2));
    assert_string_not_equal(next, old_name);
    assert_int_equal(open_r(w2, &r2), SCDB_OK);
    for (uint32_t i = 0; i < 300; i++) assert_int_equal(present(r2, i), 1);
    assert_int_equal(present(r2, 300), 0);
    scdb_lix_close(&r);
    /* retired without successor: a reader of it gets ECLOSED at open too,
     * with an empty successor */
    {
        scdb_lix *w3 = NULL, *r3 = NULL;
        void *m;
        size_t sz;
        int fd;
        assert_int_equal(scdb_lix_create(INST, BT, 0, &w3), SCDB_OK);
        fd = copy_of(w3, &m, &sz);
        atomic_store(&((scdb_lix_header *)m)->state, SCDB_LIX_RETIRED);
        seal(fd);
        assert_int_equal(scdb_lix_open_fd(fd, INST, BT, &r3), SCDB_ECLOSED);
        assert_non_null(r3);
        assert_int_equal(scdb_lix_retired(r3, next), 1);
        assert_string_equal(next, "");
        scdb_lix_close(&r3);
        munmap(m, sz);
        close(fd);
        scdb_lix_retire(&w3, NULL);
    }
    scdb_lix_close(&r2);
    scdb_lix_retire(&w2, NULL);
}

/* ------------------------------------------------------------ bad input */

typedef enum {
    BAD_MAGIC, BAD_VERSION, BAD_HEADER_BYTES, BAD_SLOT_BYTES, BAD_CAP_POW2, BAD_CAP_SMALL,
    BAD_CAP_HUGE, BAD_STATE, BAD_INSTANCE, BAD_BLOCK_TOKENS, BAD_GARBAGE, BAD_SHORT_HEADER,
    BAD_EMPTY, BAD_NO_SLOTS, BAD_TOO_LONG, BAD_UNSEALED, BAD_COUNT
} bad_kind;

static scdb_err open_damaged(bad_kind kind)
{
    scdb_lix *w = NULL, *r = NULL;
    scdb_lix_header *h;
    void *m;
    size_t sz;
    scdb_err e;
    int fd;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    fd = copy_of(w, &m, &sz);
    h = m;
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
        uint64_t x = 12345;
        for (size_t i = 0; i < sz; i++) ((uint8_t *)h)[i] = (uint8_t)scdb_splitmix64(&x);
        break;
    }
    case BAD_SHORT_HEADER: assert_int_equal(ftruncate(fd, 100), 0); break;
    case BAD_EMPTY: assert_int_equal(ftruncate(fd, 0), 0); break;
    case BAD_NO_SLOTS:
        assert_int_equal(ftruncate(fd, SCDB_LIX_HEADER_BYTES + 10 * SCDB_LIX_SLOT_BYTES), 0);
        break;
    case BAD_TOO_LONG: assert_int_equal(ftruncate(fd, (off_t)sz + 4096), 0); break;
    default: break;
    }
    munmap(m, sz);
    if (kind != BAD_UNSEALED) seal(fd);
    e = scdb_lix_open_fd(fd, INST, BT, &r);
    if (e) assert_null(r);
    scdb_lix_close(&r);
    close(fd);
    scdb_lix_retire(&w, NULL);
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
        {BAD_TOO_LONG, SCDB_EFORMAT},     {BAD_UNSEALED, SCDB_EMISMATCH},
    };
    scdb_lix *r = NULL;
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scdb_err e = open_damaged(cases[i].kind);
        if (e != cases[i].want)
            fail_msg("case %zu: got %s, want %s", i, scdb_strerror(e),
                     scdb_strerror(cases[i].want));
    }
    assert_int_equal(scdb_lix_open_fd(-1, INST, BT, &r), SCDB_EINVAL);
    {   /* not an index at all: a sealed file of zeros / of one page */
        int fd = memfd_create("zeros", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assert_int_equal(ftruncate(fd, 1 << 20), 0);
        seal(fd);
        assert_int_equal(scdb_lix_open_fd(fd, INST, BT, &r), SCDB_EFORMAT);
        close(fd);
        fd = memfd_create("short", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assert_int_equal(ftruncate(fd, 10), 0);
        seal(fd);
        assert_int_equal(scdb_lix_open_fd(fd, INST, BT, &r), SCDB_ETRUNC);
        close(fd);
    }
    assert_int_equal(scdb_lix_open_fd(0, INST, BT, NULL), SCDB_EINVAL);
    assert_null(r);
}

/* A table full of garbage that passed the header checks: lookups end
 * (bounded probes) and stay inside the mapping. */
static void test_garbage_slots(void **state)
{
    scdb_lix *w = NULL, *r = NULL;
    scdb_lix_header *h;
    scdb_key keys[64];
    void *m;
    size_t sz, n;
    uint64_t x = 99;
    int fd;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    fd = copy_of(w, &m, &sz);
    h = m;
    for (size_t i = SCDB_LIX_HEADER_BYTES; i < sz; i++) ((uint8_t *)h)[i] = (uint8_t)scdb_splitmix64(&x);
    atomic_store(&h->max_probe, UINT32_MAX);
    seal(fd);
    assert_int_equal(scdb_lix_open_fd(fd, INST, BT, &r), SCDB_OK);
    for (uint32_t i = 0; i < 64; i++) keys[i] = key_of(i);
    assert_int_equal(scdb_lix_match(r, keys, 64, &n), SCDB_OK);
    assert_int_equal(n, 0);
    /* an odd seq that never ends: the reader gives up, it does not hang
     * (the copy's own mapping is still writable: sealed after it) */
    atomic_store(&h->seq, 1);
    assert_int_equal(scdb_lix_match(r, keys, 1, &n), SCDB_EBUSY);
    munmap(m, sz);
    close(fd);
    scdb_lix_close(&r);
    scdb_lix_retire(&w, NULL);
}

/* ---------------------------------------------------------- concurrency */

/* A reader process probes while this process churns the table (inserts,
 * removes, tombstone purges): keys that stay are always found, keys never
 * inserted never are, and a run of stable keys matches whole. */
static void test_reader_process_never_wrong(void **state)
{
    enum { STABLE = 64, CHURN = 300 };
    scdb_lix *w = NULL;
    int go[2], st;
    pid_t pid;
    (void)state;

    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
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
        if (scdb_lix_open_fd(scdb_lix_fd(w), INST, BT, &r)) _exit(2);
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
    assert_int_equal(open_r(w, &r), SCDB_OK);
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_OK);
    assert_int_equal(n, 1);
    {   /* age the liveness word as a dead broker's would be (through the
         * writer's own mapping: nobody else can write it) */
        scdb_lix_header *h = scdb_lix_writer_header(w);
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
    }
    scdb_lix_close(&r);
    scdb_lix_retire(&w, NULL);
}

static void *hold_and_exit(void *w)
{
    return (void *)(intptr_t)scdb_lix_hold(w);
}

static void *retire_elsewhere(void *wp)
{
    return (void *)(intptr_t)scdb_lix_retire(wp, "successor");
}

/* The liveness lock (lookup_index.h, LIVENESS; issue 42 item 4): while
 * its holder lives the table answers; when the holder dies -- a kill -9
 * of the process that holds it, or just its thread's exit -- the very next
 * match says SCDB_ECLOSED without the index being retired, long before
 * the liveness word would go stale.  Retiring from another thread than
 * the holder only marks it retired (SCDB_EBUSY); the holder then releases
 * and unmaps it. */
static void test_liveness_lock(void **state)
{
    scdb_lix *w = NULL, *r = NULL;
    scdb_key k = key_of(9);
    size_t n = 99;
    pthread_t t;
    void *ret;
    int st;
    pid_t pid;
    (void)state;

    /* held by a child process, which is then killed */
    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    assert_int_equal(open_r(w, &r), SCDB_OK);
    assert_int_equal(atomic_load(&scdb_lix_writer_header(w)->alive_lock), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {         /* the broker: holds it on its (only) thread */
        if (scdb_lix_hold(w)) _exit(1);
        for (;;) pause();
    }
    while (atomic_load(&scdb_lix_writer_header(w)->alive_lock) != 1) usleep(1000);
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    scdb_lix_tick(w);                                  /* its word is fresh */
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ECLOSED);
    assert_int_equal(n, 0);
    assert_int_equal(scdb_lix_retired(r, NULL), 0);    /* dead, not retired */
    scdb_lix_close(&r);
    scdb_lix_close(&w);     /* the lock is the dead child's: nothing to release */

    /* held by a thread that exits */
    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    assert_int_equal(open_r(w, &r), SCDB_OK);
    assert_int_equal(pthread_create(&t, NULL, hold_and_exit, w), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    assert_int_equal((intptr_t)ret, SCDB_OK);
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ECLOSED);
    assert_int_equal(scdb_lix_retire(&w, NULL), SCDB_EBUSY);   /* not the holder */
    assert_non_null(w);
    scdb_lix_close(&r);
    scdb_lix_close(&w);

    /* held here: answers; another thread's retire only marks it */
    assert_int_equal(scdb_lix_create(INST, BT, 0, &w), SCDB_OK);
    assert_int_equal(scdb_lix_insert(w, &k), SCDB_OK);
    assert_int_equal(open_r(w, &r), SCDB_OK);
    assert_int_equal(scdb_lix_hold(w), SCDB_OK);
    assert_int_equal(scdb_lix_hold(w), SCDB_OK);       /* no-op */
    assert_true(scdb_lix_held(w));
    assert_int_equal(scdb_lix_hold(r), SCDB_EINVAL);   /* a reader cannot */
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(pthread_create(&t, NULL, retire_elsewhere, &w), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    assert_int_equal((intptr_t)ret, SCDB_EBUSY);
    assert_non_null(w);
    assert_int_equal(scdb_lix_match(r, &k, 1, &n), SCDB_ECLOSED);
    {
        char next[SCDB_LIX_NAME_MAX];
        assert_int_equal(scdb_lix_retired(r, next), 1);
        assert_string_equal(next, "successor");
    }
    assert_int_equal(scdb_lix_retire(&w, NULL), SCDB_OK);  /* the holder: released */
    assert_null(w);
    {
        char next[SCDB_LIX_NAME_MAX];
        assert_int_equal(scdb_lix_retired(r, next), 1);
        assert_string_equal(next, "successor");        /* kept by the second call */
    }
    scdb_lix_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_remove),
        cmocka_unit_test(test_full_and_purge),
        cmocka_unit_test(test_grow_retire),
        cmocka_unit_test(test_open_refuses_bad_objects),
        cmocka_unit_test(test_garbage_slots),
        cmocka_unit_test(test_reader_process_never_wrong),
        cmocka_unit_test(test_liveness),
        cmocka_unit_test(test_liveness_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
