/*
 * lookup_index.h — the broker's shared-memory lookup index: a read-only
 * (for clients) open-addressing hash set of the 16-byte keys of every block
 * the store's lookups can match, so libscdb answers scdb_lookup without a
 * round trip (schema/FORMATS.md, "Lookup index").
 *
 *   broker (one writer at a time: under the store's lock)     clients
 *   ------------------------------------------------------    ---------------
 *   store on_visible(key, 1/0) --> insert / remove --+         hash the prompt
 *   start: scdb_store_foreach_key --> insert         |         (block_key.h),
 *                                                    v         probe keys
 *   a sealed memfd (read-only for all but the broker), handed to   |
 *   clients over the fd socket (fd_pass.h) by its ticket:          |
 *   +----------------------------+------------------------------+   |
 *   | header (4096 B): magic,    | slots: capacity x 32 B        |<--+ mmap
 *   | version, capacity,         |  [key 16 B | tag 8 | 0 (8)]   |  PROT_READ
 *   | instance, block_tokens,    |  tag 0 empty, 1 live,         |
 *   | seq (seqlock), state, ...  |  2 deleted (tombstone)        |
 *   +----------------------------+------------------------------+
 *
 * One table holds every namespace: a key already hashes its namespace (and
 * its whole prefix), so a client probes with its own keys and cannot match
 * another codebook's blocks.  Slot = the key's first 8 bytes (as a native
 * u64) masked by capacity - 1, then linear probing; readers stop at an
 * empty slot or after max_probe + 1 slots.
 *
 * CONSISTENCY.  The broker inserts a key when the store reports the block
 * visible (after its LMDB commit) and removes it when the store stops
 * matching it (staged for eviction or deletion — before that commit —, or
 * found damaged), all under the store's lock: the live keys are, between
 * two writer sections, exactly what scdb_store_lookup would match.  The
 * writer brackets every change with a sequence lock: seq odd while it
 * writes, even after (C11 atomics: relaxed data, release/acquire fences).
 * A reader probes a run of keys between two reads of seq and keeps the
 * answer only if seq was even and unchanged; otherwise it retries, and
 * after SCDB_LIX_READ_TRIES it gives up (SCDB_EBUSY: use the request path).
 * So an index answer equals the store's at one instant during the call.
 * Index lookups do not refresh a block's LRU recency (gets do).
 *
 * GROWTH AND RETIREMENT.  The mapping size is fixed per object.  When live
 * entries would pass half the capacity the broker builds a new object of
 * twice the size, copies the live keys, writes the new one's ticket into
 * the old header's `next` and marks the old one RETIRED (then drops it);
 * readers of a retired index fetch `next` or fall back to the request
 * path.  Tombstones are purged in place (inside one writer section) when
 * live + deleted entries pass 3/4.  A broker that stops cleanly retires its
 * index with no successor.  A broker that dies cannot retire anything, and
 * needs not: its index is an anonymous memfd that lives only while clients
 * map it, and readers see that its broker is gone:
 *
 *   - dead (kill -9, a crash): at once.  The broker's event-loop thread
 *     holds a robust, process-shared mutex that lives in the header
 *     (alive_mutex; alive_lock = 1 while it is held).  Its first word is
 *     the Linux robust-futex word: the owner thread's id, and when that
 *     thread dies the kernel sets FUTEX_OWNER_DIED in it (and clears the
 *     id) before the process is reaped -- in the shared memory every
 *     client maps.  A reader loads that word on each match: a load, no
 *     system call, and valid across PID namespaces (no pid is compared)
 *     and for a broker of another user.  SCDB_ECLOSED, not retired.
 *   - hung or stopped (SIGSTOP, a stuck loop): the liveness word
 *     (alive_ns, refreshed from the broker's event loop) goes stale:
 *     readers refuse a table not refreshed for SCDB_LIX_STALE_NS
 *     (SCDB_ETIMEDOUT).
 *
 * Either way they ask the broker instead, which names its new index when
 * it is back.  So a client never keeps answering from a dead, stopped or
 * hung broker's table.  A grown index is held from the loop's next tick
 * (until then only alive_ns speaks for it); an index without the lock
 * (alive_lock 0: an older broker, a libc whose mutex does not start with
 * the futex word) has alive_ns alone.
 *
 * SHARING MODEL.  Read-only for every client: the object is a memfd sealed
 * with F_SEAL_FUTURE_WRITE, F_SEAL_SHRINK and F_SEAL_GROW right after the
 * broker maps it, so the broker's own mapping stays the only writable one;
 * a client's mmap(PROT_WRITE), mprotect, write or ftruncate fails, and no
 * client can plant or delete keys others see.  It reaches clients as a
 * file descriptor over the broker's fd socket (SCM_RIGHTS), given by the
 * 32-hex ticket HelloReply.lookup_index names, so a broker under its own
 * user or in its own PID namespace serves clients that share only the
 * sockets.  Readers refuse an object without those seals.  Native-endian:
 * clients on the same host only (the magic differs on a host of the other
 * byte order).
 */
#ifndef SCDB_LOOKUP_INDEX_H
#define SCDB_LOOKUP_INDEX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "block_key.h"
#include "scdb_common.h"

#define SCDB_LIX_MAGIC 0x3158494c42444353ull /* "SCDBLIX1" read as LE u64 */
#define SCDB_LIX_VERSION 2u
#define SCDB_LIX_HEADER_BYTES 4096u
#define SCDB_LIX_SLOT_BYTES 32u
#define SCDB_LIX_MIN_CAPACITY 1024u
#define SCDB_LIX_MAX_CAPACITY (1ull << 32)
#define SCDB_LIX_NAME_MAX 48
#define SCDB_LIX_READ_TRIES 64
/* LIVENESS: the broker refreshes alive_ns at least every
 * SCDB_LIX_TICK_NS; a reader trusts the index only while its age is under
 * SCDB_LIX_STALE_NS (a dead, stopped or hung broker's table is not
 * answered from; the lookup goes to the request path).  Same host, same
 * monotonic clock: a client in another time namespace never trusts it. */
#define SCDB_LIX_TICK_NS 100000000ull    /* 100 ms */
#define SCDB_LIX_STALE_NS 1000000000ull  /* 1 s    */
/* The robust-futex word's bits (Linux, Documentation/robust-futex-ABI). */
#define SCDB_LIX_FUTEX_TID_MASK 0x3fffffffu
#define SCDB_LIX_FUTEX_OWNER_DIED 0x40000000u

enum { SCDB_LIX_LIVE = 1, SCDB_LIX_RETIRED = 2 };
enum { SCDB_LIX_EMPTY = 0, SCDB_LIX_USED = 1, SCDB_LIX_DELETED = 2 };

/* The header at offset 0 (schema/FORMATS.md, "Lookup index"). */
typedef struct scdb_lix_header {
    uint64_t magic;                 /* SCDB_LIX_MAGIC                        */
    uint32_t version;               /* SCDB_LIX_VERSION                      */
    uint32_t header_bytes;          /* SCDB_LIX_HEADER_BYTES                 */
    uint32_t slot_bytes;            /* SCDB_LIX_SLOT_BYTES                   */
    uint32_t block_tokens;          /* the store's block size                */
    uint64_t capacity;              /* slots; a power of two                 */
    uint64_t instance;              /* broker_instance of its broker         */
    _Atomic uint64_t seq;           /* sequence lock: odd while written      */
    _Atomic uint32_t state;         /* SCDB_LIX_LIVE / SCDB_LIX_RETIRED      */
    _Atomic uint32_t max_probe;     /* longest probe distance of a live key  */
    _Atomic uint64_t live;          /* USED slots                            */
    _Atomic uint64_t deleted;       /* DELETED slots (tombstones)            */
    char next[SCDB_LIX_NAME_MAX];   /* successor's ticket once RETIRED, or "" */
    _Atomic uint64_t alive_ns;      /* the broker's CLOCK_MONOTONIC, ns, at
                                       its last refresh (scdb_lix_tick)      */
    _Atomic uint32_t alive_lock;    /* 1 while the broker holds alive_mutex  */
    uint32_t reserved0;             /* 0                                     */
    union {                         /* LIVENESS: the broker's robust mutex   */
        pthread_mutex_t m;          /* the broker's (process-shared, robust) */
        _Atomic uint32_t futex;     /* its first word, what readers load     */
        unsigned char bytes[64];
    } alive_mutex;
} scdb_lix_header;

typedef struct scdb_lix_slot {
    _Atomic uint64_t k0, k1;        /* key bytes 0-7 and 8-15 (memcpy)       */
    _Atomic uint64_t tag;           /* SCDB_LIX_EMPTY / USED / DELETED       */
    uint64_t reserved;              /* 0                                     */
} scdb_lix_slot;

typedef struct scdb_lix scdb_lix;

/* ------------------------------------------------------- reader (libscdb) */

/* Map (read-only) the index object fd (the caller keeps and closes fd),
 * checking it before any use, in this order:
 *   SCDB_EMISMATCH   not sealed against writes (F_SEAL_FUTURE_WRITE or
 *                    F_SEAL_WRITE) and resizing (F_SEAL_SHRINK, F_SEAL_GROW)
 *   SCDB_ESYS        fstat / mmap failed (errno logged)
 *   SCDB_ETRUNC      shorter than its header, or than header + slots
 *   SCDB_EFORMAT     wrong magic, header or slot size, capacity not a power
 *                    of two in [SCDB_LIX_MIN_CAPACITY, SCDB_LIX_MAX_CAPACITY],
 *                    longer than header + slots, unknown state
 *   SCDB_EUNSUPPORTED another version
 *   SCDB_EMISMATCH   instance or block_tokens differ from the expected ones
 *                    (0 = do not check)
 *   SCDB_ECLOSED     retired (scdb_lix_retired tells its successor's ticket,
 *                    if any; the handle is returned in *out)
 *   SCDB_EINVAL      fd < 0, NULL out.
 * On any error but SCDB_ECLOSED *out is NULL. */
scdb_err scdb_lix_open_fd(int fd, uint64_t instance, uint32_t block_tokens, scdb_lix **out);

/* Leading keys of keys[0..n) that are present, into *n_present, from one
 * consistent view.  SCDB_OK; SCDB_EBUSY (the writer kept changing the table
 * for SCDB_LIX_READ_TRIES tries); SCDB_ECLOSED (retired, or its broker died:
 * scdb_lix_retired tells which; *n_present 0); SCDB_ETIMEDOUT (the broker
 * has not refreshed it for SCDB_LIX_STALE_NS: stopped or hung; *n_present
 * 0); SCDB_EINVAL (NULL argument). */
scdb_err scdb_lix_match(const scdb_lix *ix, const scdb_key *keys, size_t n, size_t *n_present);

/* A retired index's successor ticket ("" if none) into buf (>=
 * SCDB_LIX_NAME_MAX bytes).  Returns 1 if the index is retired, else 0. */
int scdb_lix_retired(const scdb_lix *ix, char *buf);

/* Unmap, close, free (clients' mappings stay); NULLs *ix; accepts NULL. */
void scdb_lix_close(scdb_lix **ix);

/* ---------------------------------------------------------- writer (broker) */

/* Create a new index object (a memfd reserved with posix_fallocate, a
 * random ticket) with room for at least `entries` keys, mapped read-write
 * here and sealed read-only for everyone else.  Errors: SCDB_EINVAL,
 * SCDB_ETOOBIG (over the maximum capacity), SCDB_EFULL (no memory to
 * reserve), SCDB_ESYS, SCDB_ENOMEM. */
scdb_err scdb_lix_create(uint64_t instance, uint32_t block_tokens, uint64_t entries,
                         scdb_lix **out);

/* The object's ticket (32 hex digits): what clients fetch it by. */
const char *scdb_lix_name(const scdb_lix *ix);
/* The writer's file descriptor of the object (to hand to clients); -1 for a
 * reader's handle. */
int scdb_lix_fd(const scdb_lix *ix);
/* The writer's own (writable) view of the header; NULL for a reader. */
scdb_lix_header *scdb_lix_writer_header(scdb_lix *ix);
uint64_t scdb_lix_count(const scdb_lix *ix);
uint64_t scdb_lix_capacity(const scdb_lix *ix);

/* Refresh the liveness word (now, CLOCK_MONOTONIC); the broker calls it at
 * least every SCDB_LIX_TICK_NS. */
void scdb_lix_tick(scdb_lix *ix);

/* Take the liveness lock (LIVENESS) on the calling thread, which must live
 * as long as the broker serves the index (the event loop's): its death is
 * the broker's, for readers.  No-op when held.  SCDB_EUNSUPPORTED: this
 * libc's mutex does not start with the futex word, or locking failed (the
 * index then has alive_ns alone); SCDB_EINVAL: a reader's handle. */
scdb_err scdb_lix_hold(scdb_lix *ix);
/* 1 while the liveness lock is held (by any thread of ours). */
int scdb_lix_held(const scdb_lix *ix);

/* Add a key (no-op if present).  SCDB_EFULL: live entries would pass half
 * the capacity — grow first (scdb_lix_grow); SCDB_ENOMEM (purging
 * tombstones needs a scratch array); SCDB_EINVAL (read-only handle). */
scdb_err scdb_lix_insert(scdb_lix *ix, const scdb_key *k);
/* Remove a key (no-op if absent). */
void scdb_lix_remove(scdb_lix *ix, const scdb_key *k);

/* A new object of twice the capacity holding ix's live keys (ix is not
 * changed: retire it with scdb_lix_retire once the new one is published).
 * Errors: those of scdb_lix_create. */
scdb_err scdb_lix_grow(const scdb_lix *ix, scdb_lix **out);

/* Mark retired (with successor ticket `next`, may be NULL; a second call
 * keeps the first one's), release the liveness lock, unmap, close, free,
 * NULL *ix; accepts NULL.  SCDB_OK; SCDB_EBUSY: the liveness lock is held
 * by another thread, which alone may release it: only marked retired, *ix
 * is kept (call again on that thread). */
scdb_err scdb_lix_retire(scdb_lix **ix, const char *next);

#endif /* SCDB_LOOKUP_INDEX_H */
