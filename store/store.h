/*
 * store.h — scdb's block store: deterministic prefix keys, LMDB persistence,
 * a bounded hot tier in memory, leaf-first LRU eviction and longest-prefix
 * lookup.
 *
 * BLOCKS AND KEYS
 * ---------------
 * A token sequence (int32 token ids) is cut into fixed blocks of
 * `block_tokens` tokens; only full blocks are stored (a trailing partial
 * block is recomputed by its consumer).  Block i's key chains over all the
 * blocks before it:
 *
 *      tokens  | t0 ........ t63 | t64 ...... t127 | t128 ..... t191 | t192..
 *              +-------+---------+--------+--------+--------+--------+ (partial:
 *                      |                  |                 |          not stored)
 *      h_-1 = 0 -----> h_0 -------------> h_1 ------------> h_2
 *               H(0, ns, blk0)    H(h_0, ns, blk1)   H(h_1, ns, blk2)
 *
 *      H(parent, ns, blk) = XXH3-128, seed 0, over the little-endian bytes
 *          "scdb.blk" | parent (16) | ns (16) | u32 token count | i32 tokens...
 *
 *      ns = XXH3-128 over "scdb.ns1" | u32 len | producer codebook id bytes |
 *           u32 payload dtype | u32 payload format version
 *
 * so equal keys mean equal prefixes (up to and including that block) for the
 * same producer codebook and payload encoding.  Keys are 16 bytes in XXH3's
 * canonical (big-endian) form: identical across processes, machines and
 * restarts.  A refitted codebook gets a new id, hence a new namespace: its
 * blocks never collide with old ones, which age out through eviction.
 *
 * Default block size: 64 tokens.  Our reference models have 512-token
 * contexts and prompts of a few hundred tokens; at 64 tokens a request
 * recomputes at most 63 tokens past its longest stored prefix, a prompt spans
 * ~8 blocks, and the per-block overhead (one LMDB key, a ~100-600 byte header,
 * a ~120 byte index node) stays below 2% of a block's codes (8 layers x 32
 * code values x f16 x 64 tokens = 32 KiB).  Large-model deployments and the
 * Mooncake trace replay use 512-token blocks (`block_tokens` option).
 *
 * VALUES (see schema/FORMATS.md, "Store block format")
 * ------
 *      LMDB key: the 16-byte block key.  LMDB value:
 *      0         8         24        40         56        72
 *      +--------+---------+---------+----------+---------+-------------------+
 *      | magic  |checksum | key     | parent   | ns      | block idx, tokens,|
 *      | ver,hl | XXH3-128|         |          |         | dtype, n_sections,|
 *      +--------+---------+---------+----------+---------+ payload len, flags|
 *      104: section table (n_sections x u64 offsets into the payload:   -----+
 *           e.g. one per layer and K/V), zero-padded to 16 bytes  |
 *      header_len: payload (opaque typed bytes, 16-byte aligned)  |
 *
 * The checksum covers the whole value except itself.  Every read from LMDB
 * verifies it; a mismatch is a miss and a logged error, never data
 * (SCDB_ECHECKSUM from scdb_store_get, counted in the stats).
 *
 * PERSISTENCE
 * -----------
 * Puts are batched and two-phase: a batch's blocks are written inside one
 * LMDB write transaction, so a block is visible only once all of it (and all
 * of its batch) is committed.  Default sync mode: every commit fsyncs data
 * and meta page (LMDB's default), so an acknowledged put survives kill -9 and
 * power loss.  `no_sync` (MDB_NOSYNC) skips the fsync: commits still survive
 * kill -9 of the process (the pages are in the OS page cache) but not an OS
 * crash; it is off by default.  The map is sized explicitly and doubled on
 * MDB_MAP_FULL; maxreaders is raised and stale reader slots are cleared at
 * open.  Never open a store before fork() and use it in the child: open it
 * in the process that uses it.
 *
 * TIERS AND CAPACITY
 * ------------------
 *      lookup/get ---> [ hot tier: payload copies, bounded bytes ] (scdb_tier)
 *                                   |  miss: read + verify, promote
 *                      [ LMDB: every stored block, bounded bytes  ]
 *                                   :  (the broker, beside the store)
 *                      [ remote tier: a Redis Cluster the fleet shares,
 *                        remote_tier.h: committed blocks are reported by
 *                        on_written and queued there; what a local miss
 *                        finds there comes back as puts with from_remote ]
 *
 * Disk (LMDB) is the store of record; a memory tier caches a subset of its
 * payloads (host RAM, or CUDA device memory: the broker's GPU hot tier,
 * broker/device_tier.c, plugs in through the same scdb_tier vtable; then
 * acquire hands out device pointers).  Both have byte capacities (0 = unbounded disk / no hot tier).
 * Disk eviction is LRU over LEAVES: a block with a stored child is never
 * evicted before that child, so every stored block's ancestors are stored
 * and a prefix is always matchable from block 0.  The hot tier is plain LRU
 * (disk still holds every hot block's ancestors).  Pinned blocks are never
 * evicted from either; when capacity is exhausted by pinned blocks (and their
 * ancestors) a put returns SCDB_EFULL.  Recency is not persisted: after a
 * restart all blocks are equally old.  Disk bytes are accounted as LMDB page
 * footprint (a large value takes whole overflow pages).
 *
 * THREADS
 * -------
 * One writer, many readers: scdb_store_put_batch and scdb_store_delete must
 * be called from one thread at a time (the broker's writer thread; a mutex
 * enforces it, so a second writer just waits).  lookup, get, acquire,
 * release, pin, unpin and stats may be called from any number of threads
 * concurrently with each other and with the writer (LMDB is opened with
 * MDB_NOTLS; in-memory state is under a mutex held only for short,
 * non-blocking sections — never across I/O or an fsync).  open and close
 * must not race with anything.
 */
#ifndef SCDB_STORE_H
#define SCDB_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "block_key.h"
#include "scdb_common.h"

/* Keys (scdb_key, scdb_ns, scdb_ns_make, scdb_block_key_chain, ...) are in
 * block_key.h, which libscdb compiles too: clients derive the same keys. */

/* ---------------------------------------------------- block value format */

#define SCDB_BLOCK_MAGIC "SCBV"
#define SCDB_BLOCK_FORMAT_VERSION 1u
#define SCDB_BLOCK_FIXED_HEADER 104u
#define SCDB_BLOCK_MAX_SECTIONS 256u
/* Largest payload one block may carry (a raw f16 KV block of a 7B model at
 * 512 tokens is 256 MiB; one LMDB write txn must hold it). */
#define SCDB_BLOCK_MAX_PAYLOAD (512ull << 20)

/* A block's header fields (what a value says about itself). */
typedef struct scdb_block_info {
    scdb_key key;
    scdb_key parent;            /* all zero for block 0                      */
    scdb_ns ns;
    uint32_t block_index;       /* position in the chain, 0-based            */
    uint32_t token_count;
    uint32_t payload_dtype;     /* scdb_dtype or a producer-defined code     */
    uint32_t n_sections;        /* <= SCDB_BLOCK_MAX_SECTIONS                */
    uint64_t payload_len;
    uint64_t section_off[SCDB_BLOCK_MAX_SECTIONS]; /* ascending, < payload_len
                                                      (or == 0 when empty)   */
} scdb_block_info;

/* Header bytes for n_sections sections (fixed part + table, 16-aligned). */
size_t scdb_block_header_len(uint32_t n_sections);

/* Encode a complete value: header from `info` (payload_len included) and
 * `payload` into dst (capacity dst_cap), checksum last.  *out_len = header
 * length + payload_len.
 * Errors: SCDB_EINVAL (NULL argument, non-zero parent on block 0 or zero
 * parent on a later block), SCDB_ERANGE (too many sections, offsets not
 * ascending or past the payload), SCDB_ETOOBIG (payload > max, or dst_cap
 * too small: *out_len still says what is needed). */
scdb_err scdb_block_value_encode(const scdb_block_info *info,
                                 const void *payload, void *dst,
                                 size_t dst_cap, size_t *out_len);

/* Decode and verify a value.  On SCDB_OK, *info holds the header and
 * *payload points into `value` (payload_len bytes).  `expect_key` (may be
 * NULL) must equal the value's key field.  Checks, in order:
 *   SCDB_ETRUNC      shorter than its fixed header or than header + payload
 *   SCDB_EFORMAT     wrong magic, or a header length that does not match
 *                    its section count, or non-zero reserved flags (and,
 *                    after the section table, a parent field that does not
 *                    fit the block index: zero exactly on block 0)
 *   SCDB_EUNSUPPORTED unknown format version
 *   SCDB_ETOOBIG     longer than header + payload, or payload > max
 *   SCDB_ERANGE      section table out of order or past the payload
 *   SCDB_ECHECKSUM   checksum mismatch
 *   SCDB_EMISMATCH   key field differs from expect_key
 *   SCDB_EINVAL      NULL value/info/payload. */
scdb_err scdb_block_value_decode(const void *value, size_t len,
                                 const scdb_key *expect_key,
                                 scdb_block_info *info, const void **payload);

/* ------------------------------------------------------------- memory tiers
 *
 * A memory tier stores payload bytes; the store decides what goes where and
 * does all capacity accounting and eviction, so a tier only allocates and
 * copies.  Slots are opaque.  `addr` gives the address a consumer uses
 * (a host pointer for the host tier, a device pointer for a GPU tier).
 * Calls are made with the store's lock NOT held for write/read (copies may be
 * long) and may come from several threads: an implementation must be
 * thread-safe for distinct slots. */
typedef struct scdb_tier scdb_tier;
typedef struct scdb_tier_ops {
    const char *name;                                            /* "host" */
    /* SCDB_ENOMEM / SCDB_EDEVICE */
    scdb_err (*alloc)(scdb_tier *t, size_t len, void **slot);
    /* host src -> slot[off..off+len); SCDB_EDEVICE */
    scdb_err (*write)(scdb_tier *t, void *slot, size_t off, const void *src,
                      size_t len);
    /* slot[off..off+len) -> host dst; SCDB_EDEVICE */
    scdb_err (*read)(scdb_tier *t, const void *slot, size_t off, void *dst,
                     size_t len);
    void *(*addr)(scdb_tier *t, void *slot);
    void (*free)(scdb_tier *t, void *slot);
    void (*destroy)(scdb_tier *t);
} scdb_tier_ops;

struct scdb_tier {
    const scdb_tier_ops *ops;
    uint64_t capacity_bytes;    /* the store evicts to stay within this      */
    void *impl;                 /* implementation state                      */
};

/* Host-RAM tier (malloc'd payload copies).  Errors: SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_tier_host_new(uint64_t capacity_bytes, scdb_tier **out);
/* Destroys a tier not handed to a store (the store destroys its own). */
void scdb_tier_free(scdb_tier **t);

/* ------------------------------------------------------------------- store */

typedef struct scdb_store scdb_store;

typedef struct scdb_store_opts {
    const char *path;            /* LMDB directory; created if missing       */
    uint32_t block_tokens;       /* 0 = SCDB_BLOCK_TOKENS_DEFAULT; recorded in
                                    the env, a reopen must match             */
    uint64_t disk_capacity_bytes;/* 0 = unbounded                            */
    uint64_t hot_capacity_bytes; /* 0 = no hot tier (unless hot_tier given)  */
    scdb_tier *hot_tier;         /* optional; the store takes ownership (also
                                    on failure); NULL = host tier of
                                    hot_capacity_bytes                        */
    int no_hot_on_put;           /* 1: puts do not copy into the hot tier;
                                    blocks get there on first get            */
    uint64_t map_size;           /* initial LMDB map; 0 = 256 MiB or 2 x disk
                                    capacity, whichever is larger            */
    uint64_t max_map_size;       /* growth limit; 0 = 1 TiB                  */
    unsigned max_readers;        /* 0 = 1024                                 */
    int no_sync;                 /* 1: MDB_NOSYNC (see PERSISTENCE); default 0 */
    int verify_on_open;          /* 1: verify every value's checksum at open
                                    (reads everything); failures are deleted */
    /* Called (with the store's lock held: do not call back into the store)
     * for each block evicted from disk, after its eviction is committed. */
    void (*on_evict)(void *ctx, const scdb_key *key);
    void *on_evict_ctx;
    /* Called (with the store's lock held: do not call back into the store,
     * do not block) whenever a block becomes visible to lookups (visible 1:
     * its put committed, or a block that had failed verification was
     * rewritten) or stops being visible (visible 0: staged for eviction or
     * deletion, found damaged by a read).  So between calls the keys
     * reported visible are exactly the keys scdb_store_lookup matches; an
     * eviction that is rolled back reports the block visible again.  Keys
     * visible at open are not reported: list them with
     * scdb_store_foreach_key.  The broker mirrors this set into its
     * shared-memory lookup index (schema/lookup_index.h). */
    void (*on_visible)(void *ctx, const scdb_key *key, int visible);
    void *on_visible_ctx;
    /* Called by the writer (the thread in scdb_store_put_batch) after each
     * commit, outside the store's lock, once for every block that commit
     * wrote -- new, rewritten after damage, or replaced (replaced 1: a
     * stored value overwritten by a put with replace) -- in batch order,
     * except blocks put with from_remote.  info (token_count, ns and all)
     * and payload are the stored value's and valid during the call only;
     * the call must not block for long nor call the store's writer.  The
     * broker hands each block to the remote tier's write queue
     * (remote_tier.h), a replaced one with a replace-log record. */
    void (*on_written)(void *ctx, const scdb_block_info *info, const void *payload, int replaced);
    void *on_written_ctx;
} scdb_store_opts;

/* Open (or create) a store.
 * Errors: SCDB_EINVAL (NULL opts/out/path, block_tokens > max), SCDB_ESYS
 * (mkdir), SCDB_EIO (LMDB open), SCDB_EMISMATCH (env written with another
 * block size or store format), SCDB_ENOMEM. */
scdb_err scdb_store_open(const scdb_store_opts *o, scdb_store **out);

/* Close; NULLs *s; accepts NULL and *s == NULL.  Outstanding acquired blocks
 * must have been released. */
void scdb_store_close(scdb_store **s);

uint32_t scdb_store_block_tokens(const scdb_store *s);

/* One block to put. */
typedef struct scdb_block_put {
    scdb_key key;                /* from scdb_block_key_chain / lookup       */
    scdb_key parent;             /* zero for block 0                         */
    uint32_t block_index;
    uint32_t payload_dtype;
    uint32_t n_sections;
    const uint64_t *section_off; /* n_sections offsets (may be NULL if 0)   */
    const void *payload;
    uint64_t payload_len;
    int replace;                 /* 1: a stored block's value is overwritten
                                    (the producer knows it is wrong); its
                                    children stay valid: keys follow tokens,
                                    not values.  0: stored blocks are skipped */
    int from_remote;             /* 1: a verified copy of a block read from
                                    the remote tier: stored like any other,
                                    but not reported to on_written (the
                                    remote tier has it already)              */
} scdb_block_put;

/* Store blocks in order, under namespace ns, with token_count =
 * block_tokens.  Each block's parent must be stored already or come earlier
 * in the batch (the first block of a chain has a zero parent and index 0;
 * otherwise index = parent's index + 1).  Blocks already stored are skipped
 * (and count as stored).  All blocks go into one write transaction (large
 * batches are split at ~256 MiB, at block boundaries), evicting LRU leaves
 * as needed; nothing is visible until its transaction commits.  Writer
 * thread only.  *n_stored (may be NULL) = how many leading blocks are stored
 * on return.  Argument errors (NULL payload, bad section table, oversize)
 * reject the whole batch before anything is written; a block that cannot be
 * placed (missing parent, wrong index, no room) stops the batch there and
 * the blocks before it are committed; an LMDB failure rolls back the open
 * transaction (earlier ~256 MiB chunks stay committed).
 * Errors: SCDB_EINVAL (NULL argument, bad index/parent relation),
 * SCDB_ENOTFOUND (parent neither stored nor in the batch), SCDB_ERANGE (bad
 * section table), SCDB_ETOOBIG (a block larger than SCDB_BLOCK_MAX_PAYLOAD
 * or than the disk capacity), SCDB_EFULL (capacity held by pinned blocks or
 * map growth limit reached), SCDB_ENOSPC (the filesystem of opts.path is
 * full: LMDB's ENOSPC / EDQUOT, or its EIO for a short write with the disk
 * out of space; logged once per change to full, counted in
 * disk_full_refusals; the refused blocks are not stored and later puts
 * work again once space is freed), SCDB_EIO (other LMDB error),
 * SCDB_ENOMEM. */
scdb_err scdb_store_put_batch(scdb_store *s, const scdb_ns *ns,
                              const scdb_block_put *blocks, size_t n,
                              size_t *n_stored);

/* Longest stored prefix of tokens[0..n_tokens) under ns.  Computes the keys
 * of all full blocks (up to max_keys) into keys_out (may be NULL with
 * max_keys 0: then only the matched count is computed, hashing stops at the
 * first miss), *n_full = number of full blocks in the sequence, *n_matched
 * = leading blocks that are stored (matched tokens = n_matched x
 * block_tokens).  Matched blocks become most recently used.  A lookup never
 * reads values: a block that fails its checksum is found out (and from then
 * on missed) by get or acquire.  Allocates nothing.
 * Errors: SCDB_EINVAL (NULL argument). */
scdb_err scdb_store_lookup(scdb_store *s, const scdb_ns *ns,
                           const int32_t *tokens, size_t n_tokens,
                           scdb_key *keys_out, size_t max_keys,
                           size_t *n_full, size_t *n_matched);

/* Copy a block's payload out (from the hot tier, or from LMDB after checksum
 * verification; a verified disk read is promoted to the hot tier).  `info`
 * (may be NULL) receives the header.  dst may be NULL with dst_cap 0 to
 * learn the size: then SCDB_ETOOBIG and info->payload_len.
 * Errors: SCDB_EINVAL, SCDB_ENOTFOUND (not stored), SCDB_ECHECKSUM (the
 * value failed verification — magic, sizes, section table, checksum or key:
 * the specific error is logged, the failure counted once, and the block is a
 * miss for lookups until it is put again, which rewrites it), SCDB_ETOOBIG
 * (dst_cap < payload_len), SCDB_EIO, SCDB_EDEVICE, SCDB_ENOMEM. */
scdb_err scdb_store_get(scdb_store *s, const scdb_key *key, void *dst,
                        size_t dst_cap, scdb_block_info *info);

/* A pinned, readable block.  Fields are read-only. */
typedef struct scdb_block {
    scdb_block_info info;
    const void *payload;         /* tier address (host pointer for the host
                                    tier or a private copy); valid until
                                    release                                  */
    const char *tier;            /* "host", "copy" (no hot tier) or the
                                    tier's name                              */
    uint32_t node_;              /* private */
    void *copy_;                 /* private */
} scdb_block;

/* Pin a block and make its payload addressable: served from the hot tier
 * (loaded and verified from LMDB if needed) or, without a hot tier or while
 * a replace of it is being committed, from a private verified copy (then the
 * old value or the new, whichever LMDB holds).  The block is not evicted,
 * nor replaced, until release.
 * Errors: as scdb_store_get, plus SCDB_EFULL (hot tier full of pinned
 * blocks). */
scdb_err scdb_store_acquire(scdb_store *s, const scdb_key *key,
                            scdb_block **out);
/* Unpin and free the handle; NULLs *b; accepts NULL. */
void scdb_store_release(scdb_store *s, scdb_block **b);

/* Pin / unpin a stored block (counted: n pins need n unpins).  Pinned blocks
 * (and, because eviction is leaf-first, their ancestors) are never evicted.
 * Errors: SCDB_EINVAL, SCDB_ENOTFOUND; unpin also SCDB_EINVAL when the block
 * is not pinned. */
scdb_err scdb_store_pin(scdb_store *s, const scdb_key *key);
scdb_err scdb_store_unpin(scdb_store *s, const scdb_key *key);

/* Call fn(ctx, key) for every block lookups can match now (committed and
 * not found damaged), with the store's lock held for the whole walk (fn
 * must not call back into the store).  Together with on_visible this lets
 * a caller mirror the visible set without missing a change.
 * Errors: SCDB_EINVAL (NULL s or fn). */
scdb_err scdb_store_foreach_key(scdb_store *s, void (*fn)(void *ctx, const scdb_key *key),
                                void *ctx);

/* Delete a stored leaf block.  Writer thread only.
 * Errors: SCDB_EINVAL, SCDB_ENOTFOUND, SCDB_EBUSY (pinned, or has stored
 * children: delete them first), SCDB_ENOSPC (as put), SCDB_EIO. */
scdb_err scdb_store_delete(scdb_store *s, const scdb_key *key);

typedef struct scdb_store_stat {
    uint64_t blocks;             /* on disk (incl. any that failed verification
                                    and await rewrite or eviction)           */
    uint64_t disk_bytes;         /* accounted LMDB footprint                 */
    uint64_t disk_capacity_bytes;/* 0 = unbounded                            */
    uint64_t file_bytes;         /* data.mdb size                            */
    uint64_t map_bytes;          /* current LMDB map size                    */
    uint64_t hot_blocks;
    uint64_t hot_bytes;
    uint64_t hot_capacity_bytes;
    uint64_t pinned_blocks;
    uint64_t lookups;
    uint64_t lookup_hit_blocks;  /* matched blocks over all lookups          */
    uint64_t lookup_miss_blocks; /* full blocks past the match               */
    uint64_t gets;               /* get + acquire                            */
    uint64_t get_hot_hits;
    uint64_t get_disk_hits;
    uint64_t get_misses;
    uint64_t puts;               /* blocks written                           */
    uint64_t put_existing;       /* blocks skipped: already stored           */
    uint64_t put_replaced;       /* stored blocks overwritten (replace)     */
    uint64_t evictions;          /* disk evictions                           */
    uint64_t hot_evictions;
    uint64_t checksum_failures;
    uint64_t map_growths;
    uint64_t disk_full;          /* 1 while writes fail for a full filesystem
                                    (SCDB_ENOSPC), 0 after the next commit  */
    uint64_t disk_free_bytes;    /* free bytes of the data directory's
                                    filesystem when it was last found full  */
    uint64_t disk_full_refusals; /* blocks not stored because it was full    */
} scdb_store_stat;

/* The LMDB directory the store was opened on (opts.path). */
const char *scdb_store_path(const scdb_store *s);

/* A snapshot of the counters.  Errors: SCDB_EINVAL. */
scdb_err scdb_store_stats(scdb_store *s, scdb_store_stat *out);

#endif /* SCDB_STORE_H */
