/*
 * store_int.h — private declarations shared by the files of store/.
 *
 *   block_key.c    chained keys and namespaces (block_key.h; also in libscdb)
 *   block_value.c  value header encode/parse/verify
 *   lmdb_env.c     the LMDB environment: open, map growth, reader check
 *   block_index.c  in-memory key -> node hash table
 *   lru.c          per-tier LRU order of evictable nodes (binary heap)
 *   hot_tier.c     the host-RAM scdb_tier
 *   store.c        the store's state, open/close, stats (and its locking rules)
 *   store_write.c  batched puts with eviction, the undo/commit log, delete
 *   store_read.c   lookup, get, acquire/release, pin/unpin
 */
#ifndef SCDB_STORE_INT_H
#define SCDB_STORE_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <stdbool.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no malloc per key */
#include <xxhash.h>
/* On x86-64, libxxhash's runtime dispatch picks AVX2/AVX-512 code when the
 * CPU has it (4-5x faster checksums than the SSE2 baseline; same hashes). */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#include "store.h"

#define SCDB_NONE UINT32_MAX

/* ---------------------------------------------------------- block_value.c */

/* Field checks shared by encode and put (sections, payload size, parent vs
 * index).  SCDB_ERANGE, SCDB_ETOOBIG, SCDB_EINVAL. */
scdb_err st_block_info_check(const scdb_block_info *info);
/* Write the header of `info` (checksum zeroed) into dst
 * (scdb_block_header_len(info->n_sections) bytes). */
scdb_err st_block_value_header(const scdb_block_info *info, uint8_t *dst);
/* Compute and write the checksum of a complete value in place. */
void st_block_value_seal(uint8_t *value, size_t len);
/* Structural checks only (no checksum); reads only the header bytes.
 * Errors as scdb_block_value_decode minus SCDB_ECHECKSUM/SCDB_EMISMATCH. */
scdb_err st_block_value_parse(const void *value, size_t len,
                                scdb_block_info *info, size_t *hdr_len);

/* ------------------------------------------------------------- lmdb_env.c */

typedef struct st_lmdb {
    MDB_env *env;
    MDB_dbi blocks;             /* key -> block value            */
    MDB_dbi meta;               /* "format", "block_tokens"      */
    char *dir;
    uint64_t map_size;
    uint64_t max_map_size;
    unsigned page_size;
    uint64_t growths;
    /* Held shared by every thread while it has a transaction open, and
     * exclusively to resize the map (LMDB: no transactions may be active in
     * the process during mdb_env_set_mapsize). */
    pthread_rwlock_t map_lock;
    bool map_lock_init;
} st_lmdb;

scdb_err st_lmdb_open(st_lmdb *l, const char *dir, uint64_t map_size,
                        uint64_t max_map_size, unsigned max_readers,
                        bool no_sync);
void st_lmdb_close(st_lmdb *l);
/* Map an LMDB return code to scdb_err, logging `what` with the call site. */
scdb_err st_lmdb_fail(int rc, const char *what, const char *file, int line);
#define SCDB_LMDB_FAIL(rc, what) st_lmdb_fail((rc), (what), __FILE__, __LINE__)
/* Begin a read txn with map_lock held shared (handles MDB_MAP_RESIZED);
 * end it with st_lmdb_read_end. */
scdb_err st_lmdb_read_begin(st_lmdb *l, MDB_txn **txn);
void st_lmdb_read_end(st_lmdb *l, MDB_txn *txn);
/* Begin / end (commit or abort) a write txn, map_lock held shared. */
scdb_err st_lmdb_write_begin(st_lmdb *l, MDB_txn **txn);
int st_lmdb_write_commit(st_lmdb *l, MDB_txn *txn);   /* LMDB rc */
void st_lmdb_write_abort(st_lmdb *l, MDB_txn *txn);
/* Double the map (no txn of this process may be open, except in other
 * threads, which are waited for).  SCDB_EFULL at max_map_size, SCDB_EIO. */
scdb_err st_lmdb_grow(st_lmdb *l);
/* Pages a value of vlen bytes takes (as bytes): the store's disk accounting. */
uint64_t st_lmdb_footprint(const st_lmdb *l, size_t vlen);
/* data.mdb size in bytes (0 if unknown). */
uint64_t st_lmdb_file_bytes(const st_lmdb *l);
/* Free bytes of the data directory's filesystem for unprivileged writers
 * (UINT64_MAX if unknown). */
uint64_t scdb_lmdb_free_bytes(const st_lmdb *l);
/* Whether a write that failed with LMDB code rc failed for a full
 * filesystem: ENOSPC or EDQUOT, or EIO (LMDB's code for a short write) while
 * less than need bytes (plus some pages) are free.  *free_bytes: free space. */
bool scdb_lmdb_disk_full(const st_lmdb *l, int rc, uint64_t need, uint64_t *free_bytes);

/* -------------------------------------------------------------- nodes */

enum {
    NODE_FREE = 0,
    NODE_PENDING,    /* written in the open write txn, not yet visible   */
    NODE_STORED,     /* committed and readable                           */
    NODE_EVICTING,   /* deleted in the open write txn                    */
    NODE_BAD         /* on disk but failed its checksum: a miss          */
};

enum { LRU_DISK = 0, LRU_HOT = 1 };

typedef struct st_node {
    scdb_key key;
    uint64_t tick;            /* last use; LRU order                          */
    uint64_t disk_bytes;      /* accounted footprint on disk                  */
    uint64_t hot_payload;     /* payload bytes in the hot tier                */
    void *hot_slot;           /* tier slot, NULL if not hot                    */
    uint8_t *hot_hdr;         /* verified header bytes of the hot copy         */
    uint32_t hot_hdr_len;
    uint32_t parent;          /* node id of the stored parent, or SCDB_NONE    */
    uint32_t children;        /* stored or pending children                    */
    uint32_t pins;            /* readers' and callers' pins: both tiers        */
    uint32_t wpins;           /* the writer's batch guard: disk only           */
    uint32_t block_index;
    int32_t heap_pos[2];      /* position in LRU_DISK / LRU_HOT heap, -1 = out */
    uint8_t state;
    uint8_t replacing;        /* a replace of its value is staged: readers
                                 read LMDB (old value until the commit, new
                                 after), nothing caches it in the hot tier  */
} st_node;

/* ---------------------------------------------------------- block_index.c */

typedef struct st_index {
    uint32_t *slots;          /* node id + 1; 0 = empty                       */
    size_t cap;               /* power of two                                 */
    size_t n;
} st_index;

scdb_err st_index_init(st_index *ix, size_t expect);
void st_index_free(st_index *ix);
/* Node id holding key, or SCDB_NONE. */
uint32_t st_index_find(const st_index *ix, const st_node *nodes,
                         const scdb_key *key);
/* Insert node id (its key must be absent).  SCDB_ENOMEM (on growth). */
scdb_err st_index_insert(st_index *ix, const st_node *nodes, uint32_t id);
/* Remove node id (must be present). */
void st_index_remove(st_index *ix, const st_node *nodes, uint32_t id);

/* ------------------------------------------------------------------ lru.c */

/* Min-heap of node ids ordered by (tick, id): the root is the least recently
 * used evictable node.  Its array is sized by the caller to the node
 * capacity, so push never allocates. */
typedef struct st_lru {
    uint32_t *heap;
    size_t n;
    int which;                /* LRU_DISK or LRU_HOT: which heap_pos slot     */
} st_lru;

void st_lru_push(st_lru *h, st_node *nodes, uint32_t id);
void st_lru_remove(st_lru *h, st_node *nodes, uint32_t id);
/* Restore order after nodes[id].tick changed. */
void st_lru_update(st_lru *h, st_node *nodes, uint32_t id);
/* Least recently used node, or SCDB_NONE. */
uint32_t st_lru_peek(const st_lru *h);

/* ------------------------------------------------- the store (store*.c) */

#define DEFAULT_MAP (256ull << 20)
#define DEFAULT_MAX_MAP (1ull << 40)
#define TXN_BYTES (256ull << 20)   /* split put batches above this          */
#define STORE_FORMAT 1u
#define LOOKUP_CHUNK 64
#define ST(x) (1u << (x))          /* node state bit for store_find */

enum { OP_NEW, OP_REWRITE, OP_EVICT, OP_REPLACE };

typedef struct op_rec {
    uint32_t id;
    uint8_t kind;
    uint8_t old_state;
    uint64_t old_bytes;
    size_t blk;                  /* batch position (NEW / REWRITE)         */
} op_rec;

struct scdb_store {
    st_lmdb db;
    uint32_t block_tokens;
    uint64_t disk_cap;
    scdb_tier *hot;
    bool hot_on_put;
    void (*on_evict)(void *, const scdb_key *);
    void *on_evict_ctx;
    void (*on_visible)(void *, const scdb_key *, int);
    void *on_visible_ctx;
    void (*on_written)(void *, const scdb_block_info *, const void *, int);
    void *on_written_ctx;

    pthread_mutex_t mu;
    pthread_mutex_t write_mu;
    bool locks_init;

    /* under mu */
    st_node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *free_ids;
    size_t n_free;
    st_index index;
    st_lru lru[2];
    uint64_t clock;
    uint64_t disk_used, hot_used;
    uint64_t n_disk, n_hot, n_pinned;
    scdb_store_stat ctr;         /* counters only; gauges filled by stats() */

    /* writer scratch (write_mu) */
    op_rec *ops;
    size_t n_ops, cap_ops;
    uint32_t *tpins;
    size_t n_tpins, cap_tpins;
    scdb_key *dels;
    size_t n_dels, cap_dels;
    scdb_block_info *winfo;      /* header scratch                         */
};

/* store.c: helpers shared by store.c, store_write.c and store_read.c.
 * "(mu)" = call with s->mu held. */
scdb_err store_grow_array(void **p, size_t *cap, size_t need, size_t elem);
void store_lock(scdb_store *s);
void store_unlock(scdb_store *s);
void store_refresh(scdb_store *s, uint32_t id);              /* (mu) heaps  */
void store_touch(scdb_store *s, uint32_t id);                /* (mu) MRU    */
void store_pin_node(scdb_store *s, uint32_t id);             /* (mu)        */
void store_unpin_node(scdb_store *s, uint32_t id);           /* (mu)        */
scdb_err store_node_alloc(scdb_store *s, uint32_t *out);     /* (mu)        */
void store_node_release(scdb_store *s, uint32_t id);         /* (mu)        */
/* (mu) node holding k in one of `states` (ST(NODE_x) bits), or SCDB_NONE */
uint32_t store_find(const scdb_store *s, const scdb_key *k, unsigned states);
void store_hot_drop(scdb_store *s, uint32_t id);             /* (mu)        */
/* (mu) tell opts.on_visible that node id's key became (in)visible */
void store_visible(scdb_store *s, uint32_t id, int visible);
scdb_err store_hot_attach(scdb_store *s, uint32_t id, void *slot, uint8_t *hdr,
                          uint32_t hdr_len, uint64_t plen);  /* (mu)        */
scdb_err store_hot_fill(scdb_store *s, const uint8_t *hdr, size_t hdr_len,
                        const void *payload, uint64_t plen, void **slot,
                        uint8_t **hdr_copy);
/* store_write.c: the write log, also used by open to trim and clean. */
scdb_err store_evict_one(scdb_store *s, uint32_t v);          /* (mu)       */
scdb_err store_make_room(scdb_store *s, uint64_t need);       /* (mu)       */
scdb_err store_flush_dels(scdb_store *s, MDB_txn *txn, int *rc_out);
void store_undo_ops(scdb_store *s, size_t keep);              /* (mu)       */
void store_commit_ops(scdb_store *s);                         /* (mu)       */

#endif /* SCDB_STORE_INT_H */
