/*
 * remote_tier.h — the store's remote tier: blocks shared by every broker of
 * a fleet through a Redis Cluster (docs/DESIGN.md "Remote tier", issue 12).
 * Redis Cluster owns sharding, replication and failover; this module is its
 * client, over redis_cluster.h.
 *
 *     broker A                          Redis Cluster                 broker B
 *     put -> LMDB commit -> on_written  +-----------------+
 *            (store.h)        |         | scdb:<hex key>  |  GET  fetch <- get misses
 *                             v         |   = the block's |------> verify   locally
 *            [write queue] -> writer -->|   checksummed   |        decode, insert
 *            bounded bytes,   thread    |   store value,  | EXISTS         locally
 *            drops counted    SET PX ttl|   TTL           |------> probe <- lookup
 *                                       +-----------------+               remainder
 *
 * KEYS AND VALUES
 * ---------------
 * One Redis key per block: key_prefix (default "scdb:") + the block key in
 * 32 lower-case hex digits, e.g. "scdb:1076de85e1a1cf4a486d7376eac73569".
 * No hash tags (a prefix with '{' or '}' is refused), so blocks hash freely
 * over the 16384 slots.  The value is byte for byte the value LMDB holds
 * (schema/FORMATS.md, "Store block format": header, section table,
 * payload, XXH3-128 checksum over all of it): no separate metadata key
 * that could outlive its data.
 *
 * Every value read is verified before use (scdb_remote_verify): the value
 * checks of scdb_block_value_decode (magic, sizes, section table,
 * checksum, key field = the key it was read under), then what the reader
 * expects of that block: its namespace, its block index, its parent (the
 * key before it in the chain), its token count, payload length and dtype.
 * A value that fails -- another fleet's namespace under our prefix, a
 * truncated or corrupted value, garbage -- is a miss, a counted error
 * (`invalid`) and a log line, never data; the chain stops there.  The
 * broker then prefills and puts the block again, which rewrites it.
 *
 * REPLACES AND DELETES: ONE ANSWER FLEET-WIDE
 * --------------------------------------------
 * A put with replace overwrites a block's value on the broker that took
 * it and, through its SET, in the cluster; an explicit delete removes the
 * block there and, through its DEL, from the cluster.  But every other
 * broker that had fetched the block keeps its local copy (LMDB, hot tier)
 * and would serve the old bytes, or the deleted block, for as long as it
 * holds them.  So replaces and deletes are announced on a replace log, one
 * Redis string per fleet:
 *
 *     key_prefix + "replaced" = record record record ...   (APPEND only)
 *     record (24 bytes)       = block key (16) | writer's instance (8, LE)
 *
 * A record says "this block's value in the cluster changed: re-read it";
 * it does not say how, so a delete needs no record kind of its own and
 * brokers of the release before deletes were announced follow them too.
 * The writer thread appends the records of a batch's replaced blocks
 * (scdb_remote_replace) and deleted ones (scdb_remote_del) once their
 * SETs or DELs were acknowledged -- never before, so a reader that acts
 * on a record finds the new value, or none -- in one APPEND (atomic:
 * records never interleave).  Every tier with an on_replaced hook reads
 * the log from where it stopped, every replace_poll_ms (its writer
 * thread, GETRANGE from its offset, re-reading the last record it saw to
 * detect a log that was deleted or evicted and written anew: then it
 * starts over at 0, counted in replace_log_resets and logged), and hands
 * the keys of other instances' records to on_replaced.  The broker then
 * refreshes every such block it holds with the cluster's value, or drops
 * its copy when the cluster has none (broker/remote.c), so
 *
 *     time to one answer <= the writer's send of the SET or DEL and the
 *       APPEND (one cluster call, timeout_ms; up to 5 s while it retries
 *       a failing node) + replace_poll_ms + one fetch and one local write
 *       on the reader
 *
 * while the cluster answers.  A tier starts at offset 0: a broker that
 * was down while a block was replaced or deleted catches up at its first
 * poll.  The log has no TTL and grows by 24 bytes per replaced or deleted
 * block; deleting it (an operator, or the cluster's eviction under memory
 * pressure) loses only the records not read yet by some broker.
 * Evictions are not announced (WRITE PATH).
 *
 * TTL ON READ
 * -----------
 * Every fetch is GETEX key PX ttl (Redis >= 6.2): a block that is read
 * gets its full TTL again, so a hot prefix never expires while it is in
 * use; the TTL bounds how long an unread block stays.
 *
 * READ PATH (fetch, probe)
 * ------------------------
 * scdb_remote_probe: how many leading keys of a run exist: one pipelined
 * EXISTS round per node (scdb_rc_probe), stopping at the first miss.  No
 * value is read (as a local lookup reads none).
 * scdb_remote_fetch: the verified values of the leading present keys of a
 * run: pipelined GETs, at most SCDB_REMOTE_FETCH_BYTES of expected values
 * per round, one round after another while every key is found, stopping at
 * the first miss or refused value.  The caller decodes from the returned
 * values and hands them to the store (scdb_store_put_batch with
 * from_remote: LMDB and the hot tier), so the next read is local.
 *
 * WRITE PATH (put, del)
 * ---------------------
 * scdb_remote_put encodes a block's value (the same bytes as LMDB's) into
 * a queue entry and returns: the caller (the store's writer, through
 * on_written, after its commit) never waits for Redis.  The queue is
 * bounded in bytes (write_queue); a value that does not fit is dropped and
 * counted (`queue_drops`), and the put that made it has succeeded anyway.
 * One writer thread sends the queue in pipelined batches of SET key value
 * PX ttl (ttl 0: no expiry); a batch never holds two commands on one key,
 * so a replace queued after the original lands after it.  A SET that fails
 * (node down, timeout) is retried once, in order, after a backoff; then it
 * is counted in `write_errors` and dropped.  scdb_remote_del queues a DEL
 * the same way (an explicit delete of a local block), announced on the
 * replace log once acknowledged (REPLACES AND DELETES).  Evictions are not
 * propagated: the remote tier is a cache shared by the fleet and ages out
 * on its own (TTL, then the cluster's eviction policy).
 *
 * THE CLUSTER'S EVICTION POLICY
 * -----------------------------
 * Run every master with maxmemory set and maxmemory-policy allkeys-lru.
 * Every key under the prefix is a cache entry that the fleet can
 * recompute (a prefill), so any key may go; least recently used matches
 * how prefixes are reused (a popular system prompt is read by every GET
 * that extends it and stays).  allkeys rather than volatile-lru so that
 * ttl = 0 (no expiry) cannot make the cluster refuse writes (OOM) once
 * full; LRU rather than LFU because a new conversation's blocks must be
 * able to stay against old, once-popular ones.  Redis evicts key by key,
 * not leaf first: a parent may go before its children, which are then
 * unreachable (probes and fetches stop at the first miss) and age out in
 * turn -- a shorter hit, never a wrong one.  The TTL bounds how long a
 * block that nobody reads keeps memory before LRU pressure would evict it.
 *
 * FAULTS
 * ------
 * Nothing here fails a caller's request because Redis is slow or down:
 * every call has the cluster client's deadline (timeout_ms) and backoff (a
 * dead node is skipped at once until its backoff ends), and a failed fetch
 * or probe still returns the leading verified part (often none): the
 * caller serves from the local tiers.  Errors are counted; the tier's
 * state (up / down) is logged once per change -- down at the first failed
 * call, up again once calls have succeeded for a second with no error
 * (hysteresis: a failover does not log per request) -- never per request.
 * A killed master costs the keys of its slots until a replica is promoted
 * (cluster-node-timeout), after which the cluster client's map refresh
 * finds it and reads and writes resume.
 *
 * THREADS
 * -------
 * A scdb_remote is shared by all threads: fetch and probe borrow one of
 * `readers` cluster handles (each with its own connections; a caller waits
 * when all are in use), the writer thread has its own.  No lock of the
 * caller's is held across Redis I/O by this module; the store's lock is
 * never involved (the broker calls this beside the store, not inside it).
 * Open before threads that use it start; close after they stopped.
 */
#ifndef SCDB_REMOTE_TIER_H
#define SCDB_REMOTE_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_common.h"
#include "store.h"

#define SCDB_REMOTE_DEFAULT_PREFIX "scdb:"
#define SCDB_REMOTE_PREFIX_MAX 64
#define SCDB_REMOTE_KEY_MAX (SCDB_REMOTE_PREFIX_MAX + 33)
#define SCDB_REMOTE_DEFAULT_QUEUE_BYTES (64ull << 20)
#define SCDB_REMOTE_DEFAULT_TIMEOUT_MS 100
/* Expected value bytes one fetch round asks for (at least one key). */
#define SCDB_REMOTE_FETCH_BYTES (8ull << 20)

typedef struct scdb_remote scdb_remote;

typedef struct scdb_remote_config {
    const char *cluster;        /* seeds "host:port[,host:port...]", required */
    const char *user;           /* ACL user (NULL: the default user)          */
    const char *password_file;  /* first line: the password (NULL: no AUTH)   */
    const char *key_prefix;     /* NULL or "": "scdb:"                        */
    uint64_t ttl_ms;            /* expiry of every value written; 0: none     */
    uint64_t queue_bytes;       /* write queue bound; 0: 64 MiB               */
    int timeout_ms;             /* deadline of one cluster call; 0: 100       */
    int readers;                /* concurrent fetch/probe calls; 0: 1         */
    int backoff_min_ms, backoff_max_ms; /* a failed node's; 0: the cluster
                                   client's defaults (100, 2000)             */
    int replace_poll_ms;        /* how often the replace log is read (once
                                   scdb_remote_watch_replaces); 0: 500       */
} scdb_remote_config;

#define SCDB_REMOTE_REPLACE_POLL_MS 500
#define SCDB_REMOTE_REPLACED_MAX 256
#define SCDB_REMOTE_LOG_NAME "replaced"     /* key_prefix + this          */
#define SCDB_REMOTE_LOG_RECORD 24

/* What a fetched block must be: the run keys[0..n) continues a chain whose
 * block before keys[0] is `parent` (zero when keys[0] is block 0). */
typedef struct scdb_remote_expect {
    scdb_ns ns;
    scdb_key parent;
    uint32_t first_index;       /* block index of keys[0]                    */
    uint32_t token_count;       /* the store's block_tokens                  */
    uint64_t payload_len;       /* per block                                 */
    uint32_t payload_dtype;
} scdb_remote_expect;

/* A fetched, verified block. */
typedef struct scdb_remote_block {
    scdb_block_info info;       /* its header                                */
    const void *payload;        /* into value                                */
    void *value;                /* malloc'd; scdb_remote_blocks_free         */
    size_t value_len;
} scdb_remote_block;

typedef struct scdb_remote_stat {
    uint64_t probes;            /* probe calls                               */
    uint64_t probe_hit_blocks;  /* keys found present by probes              */
    uint64_t probe_miss_blocks; /* keys asked past the present run           */
    uint64_t fetches;           /* fetch calls                               */
    uint64_t hits;              /* blocks fetched and verified               */
    uint64_t misses;            /* blocks asked for and not served           */
    uint64_t bytes_read;        /* value bytes of the hits                   */
    uint64_t invalid;           /* values refused by verification            */
    uint64_t errors;            /* failed cluster operations + invalid values */
    uint64_t writes;            /* values written (SET acknowledged)         */
    uint64_t bytes_written;
    uint64_t write_errors;      /* SET/DEL given up after the retry          */
    uint64_t deletes;           /* DELs acknowledged                         */
    uint64_t queue_drops;       /* values dropped: queue full                */
    uint64_t queued;            /* gauge: entries waiting                    */
    uint64_t queued_bytes;      /* gauge                                     */
    uint64_t pending;           /* gauge: waiting + being sent               */
    uint64_t state_changes;     /* up <-> down transitions                   */
    uint64_t replace_records;   /* records appended to the replace log:
                                   replaces and deletes                     */
    uint64_t replace_seen;      /* other instances' records read             */
    uint64_t replace_log_resets; /* the log was found rewritten: from 0     */
    int up;                     /* gauge: 1 the cluster answers, 0 down      */
} scdb_remote_stat;

/* Check a configuration without connecting (what scdb_remote_open checks
 * first).  SCDB_EINVAL with msg: no cluster, a key_prefix that is too long
 * or holds '{', '}', a space or a control character, a negative setting. */
scdb_err scdb_remote_config_check(const scdb_remote_config *c, char *msg, size_t msg_len);

/* Open: check the config, open `readers` + 1 cluster handles (lazily: a
 * cluster that does not answer yet is not an error, the tier starts down),
 * start the writer thread.  On failure *out is NULL and msg says why.
 *   SCDB_EINVAL    bad config (scdb_remote_config_check)
 *   SCDB_EAUTH     a node refused the credentials (or wants some)
 *   SCDB_ENOTFOUND the password file does not exist
 *   SCDB_EIO, SCDB_ETOOBIG  the password file cannot be read / is too big
 *   SCDB_ESYS      the writer thread
 *   SCDB_ENOMEM */
scdb_err scdb_remote_open(const scdb_remote_config *c, scdb_remote **out, char *msg,
                          size_t msg_len);

/* Stop the writer (what it can send within about a second goes out; the
 * rest is dropped, counted and logged), close the handles, free.  NULLs
 * *r; accepts NULL and &NULL. */
void scdb_remote_close(scdb_remote **r);

/* The Redis key of block key k: prefix + 32 hex digits, NUL-terminated
 * into buf (SCDB_REMOTE_KEY_MAX bytes).  Returns its length. */
size_t scdb_remote_key(const scdb_remote *r, const scdb_key *k, char *buf);

/* Verify a value read under block key `key`, block i of a run described by
 * x (parent: i == 0 ? x->parent : prev_key).  On SCDB_OK *info and
 * *payload (into value) are filled.  Errors: those of
 * scdb_block_value_decode (SCDB_ETRUNC, SCDB_EFORMAT, SCDB_EUNSUPPORTED,
 * SCDB_ETOOBIG, SCDB_ERANGE, SCDB_ECHECKSUM, SCDB_EMISMATCH for the key
 * field), SCDB_EMISMATCH (another namespace, block index, parent, token
 * count, payload length or dtype), SCDB_EINVAL (NULL argument). */
scdb_err scdb_remote_verify(const void *value, size_t len, const scdb_key *key,
                            const scdb_key *prev_key, uint32_t i, const scdb_remote_expect *x,
                            scdb_block_info *info, const void **payload);

/* Longest present run: *n_present leading keys of keys[0..n) exist in the
 * cluster.  SCDB_OK: exact; on an error (counted; the state may turn down)
 * *n_present is a safe lower bound (leading keys known present).
 * SCDB_EINVAL: NULL argument. */
scdb_err scdb_remote_probe(scdb_remote *r, const scdb_key *keys, size_t n, size_t *n_present);

/* Fetch and verify the leading present blocks of keys[0..n) (see READ
 * PATH) into out[0..*n_got) (caller's array of n).  Stops at the first
 * miss (SCDB_OK), refused value (SCDB_OK: counted and logged) or failed
 * call (its error, counted).  Whatever the result, out[0..*n_got) are
 * verified and must be freed with scdb_remote_blocks_free.  SCDB_EINVAL:
 * NULL argument; SCDB_ENOMEM. */
scdb_err scdb_remote_fetch(scdb_remote *r, const scdb_key *keys, size_t n,
                           const scdb_remote_expect *x, scdb_remote_block *out, size_t *n_got);
/* Free the values of blocks[0..n) (the array itself is the caller's). */
void scdb_remote_blocks_free(scdb_remote_block *blocks, size_t n);

/* Queue the value of a block for writing (see WRITE PATH); never blocks on
 * Redis.  SCDB_EFULL: the queue has no room, dropped (counted);
 * SCDB_ETOOBIG: the value is larger than the queue or Redis's limit
 * (dropped, counted); SCDB_ERANGE / SCDB_EINVAL: a header the store would
 * not write; SCDB_ENOMEM (dropped, counted). */
scdb_err scdb_remote_put(scdb_remote *r, const scdb_block_info *info, const void *payload);
/* scdb_remote_put of a block that replaced a stored value: once its SET
 * is acknowledged, a record goes on the replace log (REPLACES AND DELETES).
 * Errors as scdb_remote_put. */
scdb_err scdb_remote_replace(scdb_remote *r, const scdb_block_info *info, const void *payload);
/* Read the replace log (REPLACES AND DELETES) from now on and call fn with
 * the keys of blocks other tiers replaced or deleted: on the writer thread, up to
 * SCDB_REMOTE_REPLACED_MAX keys at a time; fn must not block for long (the
 * broker queues a job).  The first read starts at the log's beginning.
 * fn NULL stops it: once this returns, fn is not running and will not be
 * called again.  Until the first call the log is only written. */
void scdb_remote_watch_replaces(scdb_remote *r, void (*fn)(void *ctx, const scdb_key *keys, size_t n),
                                void *ctx);
/* Queue a DEL of block key k (an explicit delete, never an eviction): once
 * the cluster acknowledged it (or had no such key), a record goes on the
 * replace log, so other brokers drop their copies (REPLACES AND DELETES).
 * SCDB_EFULL, SCDB_ENOMEM as put. */
scdb_err scdb_remote_del(scdb_remote *r, const scdb_key *k);

/* A snapshot of the counters and gauges.  Both non-NULL (else nothing). */
void scdb_remote_stats(scdb_remote *r, scdb_remote_stat *out);

#endif /* SCDB_REMOTE_TIER_H */
