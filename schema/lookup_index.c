/* lookup_index.c — the shared-memory lookup index (lookup_index.h): the
 * broker's writer side (create, insert, remove, purge, grow, retire) and
 * libscdb's reader side (open with checks, seqlocked probes).  Compiled
 * into both. */
/* memfd_create, file seals */
#define _GNU_SOURCE
#include "lookup_index.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

_Static_assert(sizeof(scdb_lix_header) <= SCDB_LIX_HEADER_BYTES, "lix header");
_Static_assert(offsetof(scdb_lix_header, alive_lock) == 128 &&
                   offsetof(scdb_lix_header, alive_mutex) == 136 &&
                   sizeof(pthread_mutex_t) <= 64,
               "lix header layout (schema/FORMATS.md)");
/* LIVENESS reads the robust mutex's futex word as its first 4 bytes: so it
 * is in glibc (struct __pthread_mutex_s starts with int __lock) */
#if defined(__GLIBC__)
#define LIX_MUTEX_FUTEX_FIRST 1
_Static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0, "glibc mutex: futex word first");
#else
#define LIX_MUTEX_FUTEX_FIRST 0
#endif
_Static_assert(sizeof(scdb_lix_slot) == SCDB_LIX_SLOT_BYTES, "lix slot");
_Static_assert(offsetof(scdb_lix_header, seq) == 40 && offsetof(scdb_lix_header, state) == 48 &&
                   offsetof(scdb_lix_header, next) == 72 &&
                   offsetof(scdb_lix_header, alive_ns) == 120,
               "lix header layout (schema/FORMATS.md)");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && ATOMIC_LLONG_LOCK_FREE == 2,
               "the lookup index needs lock-free 64-bit atomics");

struct scdb_lix {
    char name[SCDB_LIX_NAME_MAX];   /* the ticket, 32 hex (lookup_index.h)  */
    int fd;                          /* the writer's memfd; -1 for readers   */
    void *map;
    size_t size;
    int writable;
    scdb_lix_header *hdr;
    scdb_lix_slot *slots;
    uint64_t mask;
    int held;                        /* the writer holds alive_mutex ...     */
    pthread_t holder;                /* ... on this thread                   */
};

static uint64_t key_word(const scdb_key *k, int i)
{
    uint64_t w;
    memcpy(&w, k->b + 8 * i, 8);
    return w;
}

static int is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* ------------------------------------------------------------------ reader */

static scdb_err map_errno(int err)
{
    if (err == ENOENT) return SCDB_ENOTFOUND;
    if (err == ENOMEM) return SCDB_ENOMEM;
    return SCDB_ESYS;
}

/* Checks of lookup_index.h on a mapping of `size` bytes. */
static scdb_err check_header(const scdb_lix_header *h, size_t size, uint64_t instance,
                             uint32_t block_tokens)
{
    uint32_t state;

    if (size < SCDB_LIX_HEADER_BYTES) return SCDB_ETRUNC;
    if (h->magic != SCDB_LIX_MAGIC) return SCDB_EFORMAT;
    if (h->version != SCDB_LIX_VERSION) return SCDB_EUNSUPPORTED;
    if (h->header_bytes != SCDB_LIX_HEADER_BYTES || h->slot_bytes != SCDB_LIX_SLOT_BYTES ||
        !is_pow2(h->capacity) || h->capacity < SCDB_LIX_MIN_CAPACITY ||
        h->capacity > SCDB_LIX_MAX_CAPACITY)
        return SCDB_EFORMAT;
    if ((size - SCDB_LIX_HEADER_BYTES) / SCDB_LIX_SLOT_BYTES < h->capacity) return SCDB_ETRUNC;
    if (size != SCDB_LIX_HEADER_BYTES + h->capacity * SCDB_LIX_SLOT_BYTES) return SCDB_EFORMAT;
    state = atomic_load_explicit(&h->state, memory_order_acquire);
    if (state != SCDB_LIX_LIVE && state != SCDB_LIX_RETIRED) return SCDB_EFORMAT;
    if ((instance && h->instance != instance) || (block_tokens && h->block_tokens != block_tokens))
        return SCDB_EMISMATCH;
    return state == SCDB_LIX_RETIRED ? SCDB_ECLOSED : SCDB_OK;
}

#define SCDB_LIX_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

scdb_err scdb_lix_open_fd(int fd, uint64_t instance, uint32_t block_tokens, scdb_lix **out)
{
    struct stat st;
    scdb_lix *ix = NULL;
    scdb_err e;
    int seals;

    if (fd < 0 || !out) return SCDB_EINVAL;
    *out = NULL;
    /* only a sealed object: one that could shrink would SIGBUS the reader,
     * one still writable through new mappings could be changed by anyone
     * holding it */
    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SCDB_LIX_SEALS) != SCDB_LIX_SEALS ||
        !(seals & (F_SEAL_FUTURE_WRITE | F_SEAL_WRITE)))
        return SCDB_EMISMATCH;
    if (fstat(fd, &st)) return map_errno(errno);
    if ((uint64_t)st.st_size < SCDB_LIX_HEADER_BYTES) return SCDB_ETRUNC;
    if (!(ix = calloc(1, sizeof *ix))) return SCDB_ENOMEM;
    ix->fd = -1;
    ix->size = (size_t)st.st_size;
    ix->map = mmap(NULL, ix->size, PROT_READ, MAP_SHARED, fd, 0);
    if (ix->map == MAP_FAILED) {
        ix->map = NULL;
        e = map_errno(errno);
        goto fail;
    }
    ix->hdr = ix->map;
    e = check_header(ix->hdr, ix->size, instance, block_tokens);
    if (e && e != SCDB_ECLOSED) goto fail;
    ix->slots = (scdb_lix_slot *)((uint8_t *)ix->map + SCDB_LIX_HEADER_BYTES);
    /* from the mapping's size (checked to equal the header's capacity), never
     * from the header again */
    ix->mask = (ix->size - SCDB_LIX_HEADER_BYTES) / SCDB_LIX_SLOT_BYTES - 1;
    *out = ix;
    return e;
fail:
    scdb_lix_close(&ix);
    return e;
}

int scdb_lix_fd(const scdb_lix *ix) { return ix && ix->writable ? ix->fd : -1; }

scdb_lix_header *scdb_lix_writer_header(scdb_lix *ix) { return ix && ix->writable ? ix->hdr : NULL; }

/* 1 if k is a live key, from relaxed loads (validated by the caller's seq
 * check).  Never reads outside the slots, whatever the table holds. */
static int probe(const scdb_lix *ix, uint64_t k0, uint64_t k1, uint64_t limit)
{
    uint64_t i = k0 & ix->mask;
    for (uint64_t d = 0; d <= limit; d++, i = (i + 1) & ix->mask) {
        const scdb_lix_slot *s = &ix->slots[i];
        uint64_t tag = atomic_load_explicit(&s->tag, memory_order_relaxed);
        if (tag == SCDB_LIX_EMPTY) return 0;
        if (tag == SCDB_LIX_USED && atomic_load_explicit(&s->k0, memory_order_relaxed) == k0 &&
            atomic_load_explicit(&s->k1, memory_order_relaxed) == k1)
            return 1;
    }
    return 0;
}

scdb_err scdb_lix_match(const scdb_lix *ix, const scdb_key *keys, size_t n, size_t *n_present)
{
    const scdb_lix_header *h;

    if (!ix || (!keys && n) || !n_present) return SCDB_EINVAL;
    *n_present = 0;
    h = ix->hdr;
    for (int tries = 0; tries < SCDB_LIX_READ_TRIES; tries++) {
        uint64_t s1 = atomic_load_explicit(&h->seq, memory_order_acquire), s2, limit;
        size_t m = 0;

        if (s1 & 1) {                       /* a writer section is open */
            if (tries > 8) sched_yield();
            continue;
        }
        if (atomic_load_explicit(&h->state, memory_order_relaxed) != SCDB_LIX_LIVE)
            return SCDB_ECLOSED;
        if (tries == 0) {                   /* is its broker still there? */
            uint64_t alive = atomic_load_explicit(&h->alive_ns, memory_order_relaxed);
            if (atomic_load_explicit(&h->alive_lock, memory_order_acquire) == 1) {
                /* dead: the kernel marked the lock's owner gone (LIVENESS) */
                uint32_t w = atomic_load_explicit(&h->alive_mutex.futex, memory_order_relaxed);
                if (!(w & SCDB_LIX_FUTEX_TID_MASK) || (w & SCDB_LIX_FUTEX_OWNER_DIED))
                    return SCDB_ECLOSED;
            }
            if (scdb_now_ns() - alive > SCDB_LIX_STALE_NS) return SCDB_ETIMEDOUT;
        }
        limit = atomic_load_explicit(&h->max_probe, memory_order_relaxed);
        if (limit > ix->mask) limit = ix->mask;
        while (m < n && probe(ix, key_word(&keys[m], 0), key_word(&keys[m], 1), limit)) m++;
        atomic_thread_fence(memory_order_acquire);
        s2 = atomic_load_explicit(&h->seq, memory_order_relaxed);
        if (s1 == s2) {
            *n_present = m;
            return SCDB_OK;
        }
    }
    return SCDB_EBUSY;
}

int scdb_lix_retired(const scdb_lix *ix, char *buf)
{
    if (!ix) return 0;
    if (atomic_load_explicit(&ix->hdr->state, memory_order_acquire) != SCDB_LIX_RETIRED) return 0;
    if (buf) {
        memcpy(buf, ix->hdr->next, SCDB_LIX_NAME_MAX);
        buf[SCDB_LIX_NAME_MAX - 1] = 0;
    }
    return 1;
}

void scdb_lix_close(scdb_lix **ixp)
{
    scdb_lix *ix;
    if (!ixp || !(ix = *ixp)) return;
    if (ix->map) munmap(ix->map, ix->size);
    if (ix->fd >= 0) close(ix->fd);
    free(ix);
    *ixp = NULL;
}

/* ------------------------------------------------------------------ writer */

const char *scdb_lix_name(const scdb_lix *ix) { return ix ? ix->name : ""; }

void scdb_lix_tick(scdb_lix *ix)
{
    if (ix && ix->writable)
        atomic_store_explicit(&ix->hdr->alive_ns, scdb_now_ns(), memory_order_relaxed);
}

scdb_err scdb_lix_hold(scdb_lix *ix)
{
    pthread_mutexattr_t a;
    uint32_t w;
    int rc;

    if (!ix || !ix->writable) return SCDB_EINVAL;
    if (ix->held) return SCDB_OK;
    if (!LIX_MUTEX_FUTEX_FIRST) return SCDB_EUNSUPPORTED;
    if (pthread_mutexattr_init(&a)) return SCDB_EUNSUPPORTED;
    rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) ||
         pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) ||
         pthread_mutex_init(&ix->hdr->alive_mutex.m, &a);
    pthread_mutexattr_destroy(&a);
    if (rc || pthread_mutex_lock(&ix->hdr->alive_mutex.m)) return SCDB_EUNSUPPORTED;
    /* the word readers load must name this thread, or they would judge
     * another thing than the kernel marks */
    w = atomic_load_explicit(&ix->hdr->alive_mutex.futex, memory_order_relaxed);
    if ((w & SCDB_LIX_FUTEX_TID_MASK) != ((uint32_t)syscall(SYS_gettid) & SCDB_LIX_FUTEX_TID_MASK)) {
        pthread_mutex_unlock(&ix->hdr->alive_mutex.m);
        return SCDB_EUNSUPPORTED;
    }
    ix->held = 1;
    ix->holder = pthread_self();
    atomic_store_explicit(&ix->hdr->alive_lock, 1, memory_order_release);
    return SCDB_OK;
}

int scdb_lix_held(const scdb_lix *ix) { return ix && ix->held; }
uint64_t scdb_lix_count(const scdb_lix *ix)
{
    return ix ? atomic_load_explicit(&ix->hdr->live, memory_order_relaxed) : 0;
}
uint64_t scdb_lix_capacity(const scdb_lix *ix) { return ix ? ix->hdr->capacity : 0; }

scdb_err scdb_lix_create(uint64_t instance, uint32_t block_tokens, uint64_t entries,
                         scdb_lix **out)
{
    uint8_t rnd[16];
    uint64_t cap = SCDB_LIX_MIN_CAPACITY;
    scdb_lix *ix = NULL;
    scdb_err e = SCDB_OK;
    int fd = -1, rc;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    while (cap / 2 < entries + 1 && cap < SCDB_LIX_MAX_CAPACITY) cap *= 2;
    if (cap / 2 < entries + 1) return SCDB_ETOOBIG;
    if (!(ix = calloc(1, sizeof *ix))) return SCDB_ENOMEM;
    ix->fd = -1;
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        e = SCDB_ESYS;
        goto fail;
    }
    for (int i = 0, n = 0; i < 16; i++) n += snprintf(ix->name + n, sizeof ix->name - n, "%02x", rnd[i]);
    fd = memfd_create("scdb-lookup-index", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        scdb_error("lookup index: memfd_create: %s", strerror(errno));
        e = SCDB_ESYS;
        goto fail;
    }
    ix->size = SCDB_LIX_HEADER_BYTES + cap * SCDB_LIX_SLOT_BYTES;
    if ((rc = posix_fallocate(fd, 0, (off_t)ix->size))) {
        scdb_error("lookup index: reserving %zu bytes: %s", ix->size, strerror(rc));
        e = rc == ENOSPC ? SCDB_EFULL : SCDB_ESYS;
        goto fail;
    }
    ix->map = mmap(NULL, ix->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ix->map == MAP_FAILED) {
        ix->map = NULL;
        e = SCDB_ESYS;
        goto fail;
    }
    /* read-only for everyone else from now on: this mapping stays writable,
     * no new one can be (F_SEAL_FUTURE_WRITE), and nobody can resize it */
    if (fcntl(fd, F_ADD_SEALS, SCDB_LIX_SEALS | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) {
        scdb_error("lookup index: sealing: %s", strerror(errno));
        e = SCDB_ESYS;
        goto fail;
    }
    ix->fd = fd;
    fd = -1;
    ix->writable = 1;
    ix->hdr = ix->map;
    ix->slots = (scdb_lix_slot *)((uint8_t *)ix->map + SCDB_LIX_HEADER_BYTES);
    ix->mask = cap - 1;
    /* fallocate zero-filled everything: all slots EMPTY, seq 0 */
    ix->hdr->version = SCDB_LIX_VERSION;
    ix->hdr->header_bytes = SCDB_LIX_HEADER_BYTES;
    ix->hdr->slot_bytes = SCDB_LIX_SLOT_BYTES;
    ix->hdr->block_tokens = block_tokens;
    ix->hdr->capacity = cap;
    ix->hdr->instance = instance;
    atomic_store_explicit(&ix->hdr->state, SCDB_LIX_LIVE, memory_order_relaxed);
    atomic_store_explicit(&ix->hdr->alive_ns, scdb_now_ns(), memory_order_relaxed);
    ix->hdr->magic = SCDB_LIX_MAGIC;
    atomic_thread_fence(memory_order_release);
    *out = ix;
    return SCDB_OK;
fail:
    if (fd >= 0) close(fd);
    scdb_lix_close(&ix);
    return e;
}

/* Sequence-lock writer sections (Boehm, "Can seqlocks get along with
 * programming language memory models?"): seq odd, release fence, relaxed
 * data stores, seq even with release. */
static void write_begin(scdb_lix *ix)
{
    uint64_t s = atomic_load_explicit(&ix->hdr->seq, memory_order_relaxed);
    atomic_store_explicit(&ix->hdr->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void write_end(scdb_lix *ix)
{
    uint64_t s = atomic_load_explicit(&ix->hdr->seq, memory_order_relaxed);
    atomic_store_explicit(&ix->hdr->seq, s + 1, memory_order_release);
}

/* Slot of key k if live, else UINT64_MAX (writer: no concurrent writer). */
static uint64_t find_slot(const scdb_lix *ix, uint64_t k0, uint64_t k1)
{
    uint64_t limit = atomic_load_explicit(&ix->hdr->max_probe, memory_order_relaxed);
    uint64_t i = k0 & ix->mask;
    for (uint64_t d = 0; d <= limit && d <= ix->mask; d++, i = (i + 1) & ix->mask) {
        scdb_lix_slot *s = &ix->slots[i];
        uint64_t tag = atomic_load_explicit(&s->tag, memory_order_relaxed);
        if (tag == SCDB_LIX_EMPTY) break;
        if (tag == SCDB_LIX_USED && atomic_load_explicit(&s->k0, memory_order_relaxed) == k0 &&
            atomic_load_explicit(&s->k1, memory_order_relaxed) == k1)
            return i;
    }
    return UINT64_MAX;
}

/* Put a key known to be absent into the first free (empty or deleted)
 * slot of its probe sequence (inside a writer section). */
static void place(scdb_lix *ix, uint64_t k0, uint64_t k1)
{
    scdb_lix_header *h = ix->hdr;
    uint64_t i = k0 & ix->mask, d = 0;
    for (;; d++, i = (i + 1) & ix->mask) {
        uint64_t tag = atomic_load_explicit(&ix->slots[i].tag, memory_order_relaxed);
        if (tag != SCDB_LIX_USED) {
            if (tag == SCDB_LIX_DELETED)
                atomic_store_explicit(&h->deleted, atomic_load_explicit(&h->deleted,
                                      memory_order_relaxed) - 1, memory_order_relaxed);
            break;
        }
    }
    atomic_store_explicit(&ix->slots[i].k0, k0, memory_order_relaxed);
    atomic_store_explicit(&ix->slots[i].k1, k1, memory_order_relaxed);
    atomic_store_explicit(&ix->slots[i].tag, SCDB_LIX_USED, memory_order_relaxed);
    atomic_store_explicit(&h->live, atomic_load_explicit(&h->live, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (d > atomic_load_explicit(&h->max_probe, memory_order_relaxed))
        atomic_store_explicit(&h->max_probe, (uint32_t)d, memory_order_relaxed);
}

/* Rebuild the table in place without tombstones (one writer section:
 * readers retry or fall back meanwhile). */
static scdb_err purge(scdb_lix *ix)
{
    scdb_lix_header *h = ix->hdr;
    uint64_t n = atomic_load_explicit(&h->live, memory_order_relaxed), m = 0;
    uint64_t *keys = malloc((n ? n : 1) * 2 * sizeof *keys);

    if (!keys) return SCDB_ENOMEM;
    for (uint64_t i = 0; i <= ix->mask && m < n; i++)
        if (atomic_load_explicit(&ix->slots[i].tag, memory_order_relaxed) == SCDB_LIX_USED) {
            keys[2 * m] = atomic_load_explicit(&ix->slots[i].k0, memory_order_relaxed);
            keys[2 * m + 1] = atomic_load_explicit(&ix->slots[i].k1, memory_order_relaxed);
            m++;
        }
    write_begin(ix);
    for (uint64_t i = 0; i <= ix->mask; i++) {
        atomic_store_explicit(&ix->slots[i].tag, SCDB_LIX_EMPTY, memory_order_relaxed);
        atomic_store_explicit(&ix->slots[i].k0, 0, memory_order_relaxed);
        atomic_store_explicit(&ix->slots[i].k1, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&h->live, 0, memory_order_relaxed);
    atomic_store_explicit(&h->deleted, 0, memory_order_relaxed);
    atomic_store_explicit(&h->max_probe, 0, memory_order_relaxed);
    for (uint64_t j = 0; j < m; j++) place(ix, keys[2 * j], keys[2 * j + 1]);
    write_end(ix);
    free(keys);
    return SCDB_OK;
}

scdb_err scdb_lix_insert(scdb_lix *ix, const scdb_key *k)
{
    scdb_lix_header *h;
    uint64_t k0, k1, live, deleted;

    if (!ix || !k || !ix->writable) return SCDB_EINVAL;
    h = ix->hdr;
    k0 = key_word(k, 0);
    k1 = key_word(k, 1);
    if (find_slot(ix, k0, k1) != UINT64_MAX) return SCDB_OK;
    live = atomic_load_explicit(&h->live, memory_order_relaxed);
    deleted = atomic_load_explicit(&h->deleted, memory_order_relaxed);
    if ((live + 1) * 2 > h->capacity) return SCDB_EFULL;
    if ((live + deleted + 1) * 4 > h->capacity * 3) {
        scdb_err e = purge(ix);
        if (e) return e;
    }
    write_begin(ix);
    place(ix, k0, k1);
    write_end(ix);
    return SCDB_OK;
}

void scdb_lix_remove(scdb_lix *ix, const scdb_key *k)
{
    scdb_lix_header *h;
    uint64_t i;

    if (!ix || !k || !ix->writable) return;
    h = ix->hdr;
    i = find_slot(ix, key_word(k, 0), key_word(k, 1));
    if (i == UINT64_MAX) return;
    write_begin(ix);
    atomic_store_explicit(&ix->slots[i].tag, SCDB_LIX_DELETED, memory_order_relaxed);
    atomic_store_explicit(&h->live, atomic_load_explicit(&h->live, memory_order_relaxed) - 1,
                          memory_order_relaxed);
    atomic_store_explicit(&h->deleted,
                          atomic_load_explicit(&h->deleted, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    write_end(ix);
}

scdb_err scdb_lix_grow(const scdb_lix *ix, scdb_lix **out)
{
    scdb_lix *nx;
    scdb_err e;

    if (!ix || !out) return SCDB_EINVAL;
    e = scdb_lix_create(ix->hdr->instance, ix->hdr->block_tokens, ix->hdr->capacity - 1, &nx);
    if (e) return e;
    /* nobody maps nx yet: no writer section needed */
    for (uint64_t i = 0; i <= ix->mask; i++)
        if (atomic_load_explicit(&ix->slots[i].tag, memory_order_relaxed) == SCDB_LIX_USED)
            place(nx, atomic_load_explicit(&ix->slots[i].k0, memory_order_relaxed),
                  atomic_load_explicit(&ix->slots[i].k1, memory_order_relaxed));
    *out = nx;
    return SCDB_OK;
}

scdb_err scdb_lix_retire(scdb_lix **ixp, const char *next)
{
    scdb_lix *ix;

    if (!ixp || !(ix = *ixp)) return SCDB_OK;
    if (ix->writable &&
        atomic_load_explicit(&ix->hdr->state, memory_order_relaxed) != SCDB_LIX_RETIRED) {
        memset(ix->hdr->next, 0, sizeof ix->hdr->next);
        if (next) snprintf(ix->hdr->next, sizeof ix->hdr->next, "%s", next);
        write_begin(ix);            /* readers in a section retry, then see it */
        atomic_store_explicit(&ix->hdr->state, SCDB_LIX_RETIRED, memory_order_release);
        write_end(ix);
    }
    if (ix->held) {
        /* only its owner may unlock a robust mutex, and it must be unlocked
         * (off the thread's robust list) before its memory is unmapped */
        if (!pthread_equal(ix->holder, pthread_self())) return SCDB_EBUSY;
        atomic_store_explicit(&ix->hdr->alive_lock, 0, memory_order_release);
        pthread_mutex_unlock(&ix->hdr->alive_mutex.m);
        ix->held = 0;
    }
    scdb_lix_close(ixp);
    return SCDB_OK;
}
