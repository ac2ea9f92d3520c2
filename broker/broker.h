/*
 * broker.h — the scdb broker: a long-running daemon that keeps prefixes as
 * codes in the store and decodes them into consumers' shared-memory KV
 * arenas.  `scdb serve` and the `scdb-broker` executable both run
 * scdb_broker_main().
 *
 * THREADS
 * -------
 *
 *   clients (DEALER)                       broker process
 *   ----------------+      +-------------------------------------------------+
 *   libscdb  ipc:// |----->| main thread: ROUTER (ipc, + tcp with CURVE)     |
 *   libscdb  tcp:// |----->|  parse + validate every frame, reply to errors  |
 *                   |      |  hello/ping/heartbeat/stats/arenas/lookup inline|
 *                   |      |  (lookup = in-memory index, no I/O; most        |
 *                   |      |  lookups never come: clients probe the shm      |
 *                   |      |  lookup index, see LOOKUP INDEX)                |
 *                   |      |     | get            | put, delete              |
 *                   |      |     v                v                          |
 *                   |      |  [job queue]      [write queue]                 |
 *                   |      |  N workers        1 writer thread               |
 *                   |      |  acquire blocks   scdb_store_put_batch /        |
 *                   |      |  (hot tier/LMDB)  scdb_store_delete             |
 *                   |      |  decode -> arena  (the only LMDB writer)        |
 *                   |      |     |                |                          |
 *                   |      |     +--> inproc PUSH/PULL "done" --> main sends |
 *                   |      |                                   the reply    |
 *                   |      +-------------------------------------------------+
 *
 * Only the main thread touches ZeroMQ's client-facing sockets and the client
 * and arena tables, so those need no locks; a job carries everything its
 * thread needs (the unpacked request, its payload frames, a reference on
 * the arena) and comes back packed as a reply.  A long decode occupies one
 * worker; lookups, heartbeats and other clients' requests go on.  Both
 * queues are lanes of per-client FIFOs served round robin (gets and
 * evictions in separate lanes: broker_int.h, bk_queue), so one client's
 * burst never holds another's get; evict_threads threads take evictions
 * only, so an eviction never waits for the workers' decodes; BLAS runs single-threaded inside the
 * job threads, which worker_cpus / worker_nice / evict_nice can pin and renice (jobs.c,
 * THREADING MODEL); every job's time is split into stages on /metrics
 * (scdb_job_stage_seconds: dispatch, queue, service, handoff, total).
 *
 * CLIENTS, HEARTBEATS, RECLAIM
 * ----------------------------
 * Hello registers a client (role, model, codebook) and returns a random
 * 64-bit token that every later request carries; requests are routed by
 * token, not by ZeroMQ identity, so a client that reconnects (new socket,
 * broker restart) keeps working: an unknown token is answered SCDB_ECLOSED
 * and libscdb says hello again.  Any request renews the client's lease;
 * libscdb sends a Heartbeat every heartbeat_ms from a thread of its own.  A
 * client silent for heartbeat_timeout_ms is reclaimed: its arenas are
 * unlinked and unmapped (once no job uses them) and its live sessions closed.
 *
 * QUOTAS.  One client cannot take the others' share: its jobs in flight
 * (get, put, put_states, delete, session_evict queued or running) are
 * capped by max_inflight_per_client (SCDB_EBUSY: a client that sends
 * without reading its replies stops there, the others' requests still find
 * room under max_inflight), its arenas by max_arenas_per_client and
 * max_client_arena_bytes, its live sessions by max_sessions_per_client
 * (SCDB_EFULL); arena_total_bytes bounds all arenas together.  Inline
 * requests (lookup, stats, ping) cost no job.  The ROUTER fair-queues
 * incoming messages between peers, and a reply to a peer whose queue is
 * full is dropped, never waited for.
 *
 * LOOKUP INDEX
 * ------------
 * Lookups mostly never reach this process: the broker mirrors the keys of
 * every block the store's lookups match into a shared-memory hash set
 * (lookup_index.h; schema/FORMATS.md, "Lookup index") that clients map
 * read-only and probe with keys they derive themselves (schema/block_key.c
 * is compiled into libscdb; HelloReply gives the index name and the
 * namespace).  The store reports every visibility change (on_visible:
 * after a put commits; when an eviction or delete is staged; when a read
 * finds damage), under its lock, from whichever thread made it — the
 * writer, or a worker — and lookup_publish.c applies it inside a seqlock
 * writer section, so the table equals the store's matchable set between
 * sections.  At start the index is filled from the store
 * (scdb_store_foreach_key) before any thread runs; it doubles into a new
 * object when half full (the old one is retired, naming its successor).
 * Sharing model: a memfd sealed read-only for everyone but the broker's
 * own mapping, handed to registered clients by ticket over the fd socket
 * (fdpass.c); a clean stop retires it, and a killed broker's table goes
 * stale within SCDB_LIX_STALE_NS (its liveness word stops), so no client
 * keeps trusting a table nobody updates.  lookup_index = 0 turns it off.
 *
 * ARENAS
 * ------
 * Created by the broker per client: memfd_create, mode 0600, pages reserved
 * with posix_fallocate (no memory left is an error reply, not a SIGBUS),
 * sealed against shrinking and growing (a client can write the arena but
 * never truncate it under a worker: no SIGBUS in the broker), mapped by the
 * broker.  The client fetches the fd by the reply's ticket from the fd
 * socket (fdpass.c, schema/fd_pass.h: no user or PID namespace in common
 * needed), maps it and confirms (ArenaMapped); the broker then drops the
 * ticket and closes its fd, so nothing outlives the two mappings and
 * nothing is named anywhere, even after a SIGKILL.  Layout: a 4096-byte header (schema/wire.h) then one
 * slot-indexed KV cache (kernels.h), where get decodes the consumer's KV
 * directly; or, for producers, room for their states (put_states).
 *
 * CUDA ARENAS (device = auto | cpu | cuda; compile-checked only so far)
 * -----------
 * At start the broker resolves its device (kernels.h scdb_device_resolve,
 * one log line: which and why); cuda without a device is a start error.
 * On CUDA a client may ask for a CUDA IPC arena (ArenaCreate.cuda): the
 * header stays in shm (kind SCDB_ARENA_KIND_KV_CUDA, wire.h), the cache --
 * pos, K, V in kernels.h's layout, pos at its start -- is one zeroed
 * cudaMalloc on device 0, exported with cudaIpcGetMemHandle; the 64-byte
 * handle, the device ordinal and its PCI bus id go only in the owner's
 * ArenaCreateReply.  A get on it calls the pair decoder's decode_dev with
 * the CUDA ops table (kernels.h): raw uploads the payload (F16 converted on
 * the device), scd runs codec.h's scdb_pair_dev (the pair's weights are
 * uploaded at its first device decode, under a mutex); the worker
 * synchronises before the reply.  The device memory is freed with the
 * arena's last reference (free, reclaim, shutdown) and counts in the arena
 * byte limits.  A live session on it keeps its accumulators in device
 * memory too (see LIVE SESSIONS).
 * The device path of each decoder is checked on the CPU ops table against
 * its host decode (test_broker); the IPC path itself by test_cuda_ipc,
 * which skips without a GPU.
 *
 * GPU hot tier (gpu_hot_capacity > 0 on a CUDA broker): the store's hot
 * tier is device memory (device_tier.c over the CUDA ops table) instead of
 * RAM, same LRU and pinning rules, filled from LMDB on a miss (the store
 * verifies the value on the host, then uploads the payload).  A get's
 * acquired block is then a device pointer: into a CUDA IPC arena the
 * decoder's decode_dev reads it in place (payload_on_device; raw: device
 * to device copies / conversion, scd: the codes come down, they are
 * small); into a host arena the worker first copies it down.  On a CPU
 * broker the key is ignored with a warning.
 *
 * REMOTE TIER (remote.c; store/remote_tier.h)
 * -----------
 * With a [remote] section the store gets a second level shared by every
 * broker of a fleet: a Redis Cluster (one key per block, the value LMDB
 * holds).  It sits beside the store, glued here, so that no Redis I/O ever
 * runs under the store's lock or on the main thread:
 *
 *   put (writer)   commit -> store on_written -> tier write queue -> its
 *                  thread SETs (async; full queue: dropped, counted)
 *   lookup         main thread: local lookup; if it stops short and the
 *                  request asks (LookupRequest.remote), a worker probes the
 *                  rest (EXISTS) and replies local + remote
 *   get (worker)   local lookup; the rest that fits the arena is fetched
 *                  (GET), verified, decoded after the local blocks; then a
 *                  writer job keeps them (put_batch from_remote: LMDB + hot
 *                  tier, the lookup index) -- not written back
 *   put whose parents only the cluster has (a lookup found them, no get
 *                  brought them in): the writer fetches and keeps them first
 *   delete         the remote copies are deleted too (queued DELs), and
 *                  announced on the replace log like a replace
 *   replace log    (the tier's writer thread polls it) blocks other brokers
 *                  replaced or deleted -> a writer job refreshes each one
 *                  held here with the cluster's value, or drops it
 *
 * A slow or unreachable cluster costs a request at most timeout_ms until
 * the cluster client marks the node down, then nothing: answers are the
 * local ones, errors are counted (stats remote_*), and the tier logs once
 * per up/down change.  The lookup index stays local-only: libscdb learns
 * from HelloReply.remote_tier that a short local answer is worth a request.
 * Replaced and deleted blocks reach the other brokers' local copies
 * within the bound of store/remote_tier.h, "REPLACES AND DELETES".
 *
 * LIVE SESSIONS (sessions.c)
 * -------------
 * A consumer may keep one of its arenas within a slot budget while it
 * decodes: SessionOpen(arena, budget, policy, cadence) creates a second
 * shared-memory object holding the session's feature accumulators
 * (evict/evict.h), which the client maps and writes every step itself (no
 * message); SessionEvict runs the policy on a worker — a private, checked
 * copy of the accumulators, score -> select -> compact of the arena's cache
 * and the accumulators in place — and replies with the slot -> original
 * position map.  Policies: the heuristics by kind name and the learned
 * ones of [policy NAME] sections.  A session ends with SessionClose, with
 * its arena, or with its client (goodbye or reclaim).  On a CUDA IPC arena
 * the accumulators are a device allocation exported beside the cache (the
 * handle in the SessionOpen reply only), libscdb folds each step on the
 * device, and the worker evicts there (evict/evict_dev.c on the CUDA ops
 * table: only the 64-byte header comes down to be checked; the learned
 * policy's features come down for its MLP, its scores go up); the same
 * refusals, limits and reclaim as a host session.
 *
 * DECODERS (the codec hook)
 * -------------------------
 * A codebook (store namespace) has a kind; each (codebook, consumer model)
 * pair has an scdb_decoder whose decode() turns one stored block's payload
 * into the consumer's KV at given slots and absolute positions.  The kinds
 * live in one table (broker/codec_kinds.c): "raw" is built in — the payload
 * IS the block's F16/F32 KV in the consumer's own layout (wire.h) — and the
 * SCD codec plugs in there as one more row (open a codebook file: namespace
 * id, payload bytes per token; open a pair file: a decoder).  Every model
 * gets a "raw/<model>" codebook and its identity pair automatically.
 *
 * METRICS (metrics.c)
 * -------
 * metrics_listen = HOST:PORT serves GET /metrics in the Prometheus text
 * format (libmicrohttpd, its own thread; loopback unless another address
 * is written).  The counters belong to the main thread and are never read
 * by the HTTP thread: a scrape asks the main loop (a byte on the self-pipe)
 * for a snapshot, the loop copies its counters, the store's and the queue
 * depths into it under a mutex held for that copy only, and the HTTP
 * thread formats the copy.  A loop that does not answer within 1 s (it
 * is stuck in a long call) gets the previous snapshot served, with its age
 * in scdb_metrics_snapshot_age_seconds.  Clients report how many lookups
 * their local copy of the lookup index answered in their heartbeats and
 * goodbye (cumulative per handle, the hello gives the starting point), so
 * scdb_lookups_total{answered_by="index"} counts what the broker never saw.
 *
 * RELOAD (reload.c)
 * ------
 * SIGHUP re-reads the configuration (the same file and flags) on a thread
 * of its own and builds a complete new registry (every model config,
 * codebook, pair and policy file loaded and checked); the event loop goes
 * on meanwhile.  A load that fails keeps the running set and logs why.  On
 * success the main thread swaps registries between two requests: new
 * hellos use the new set; each registered client moves to it when its
 * model (same geometry), codebook (same namespace, payload) and pair are
 * all there, else keeps the old entries until it registers again; a live
 * session moves to the new policy of its name, if any.  Jobs in flight keep
 * the set they started with: registries are reference-counted and an old
 * one is freed with its last user (on the main thread), then the heap is
 * trimmed (malloc_trim: the reload thread's malloc arena would keep the
 * freed weights) by the trimmer thread, scdb-trim (heap_trim.c), never on
 * the event loop.  Run-time settings (log_level,
 * heartbeats, request and arena limits, max_inflight, drain timeout) are
 * applied; the others (endpoint, data_dir, block_tokens, workers, store
 * sizes, device, metrics_listen, ...) are reported and left as they were.
 * Under systemd: RELOADING=1, then READY=1 (notify.c).
 *
 * SHUTDOWN
 * --------
 * SIGTERM / SIGINT: stop taking work (new requests are answered
 * SCDB_ECLOSED "shutting down"), finish every job in flight and send its
 * reply, join the threads, retire and unlink the lookup index, close the store
 * (LMDB) and the sockets (the ipc socket file is removed), exit 0.  After
 * drain_timeout_ms the drain gives up, logs what it abandons and exits 1.
 */
#ifndef SCDB_BROKER_H
#define SCDB_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "recompute.h"
#include "scdb_common.h"
#include "store.h"

#define SCDB_BROKER_NAME_MAX 128

/* ------------------------------------------------------------- registry */

/* A configured model: the KV geometry its consumers' arenas have. */
typedef struct scdb_broker_model {
    char name[SCDB_BROKER_NAME_MAX];
    int n_layers, n_kv_heads, head_dim, max_seq_len;
    int n_heads;               /* query heads (live-session accumulators);
                                  0: not configured, the client's is used  */
    int vocab_size;            /* tokens must be below it (from config.json);
                                  0: not configured, not checked           */
    scdb_dtype raw_dtype;      /* payload dtype of its "raw/<name>" codebook */
} scdb_broker_model;

/* A codebook = a store namespace with a fixed payload size per token. */
typedef struct scdb_broker_codebook {
    char name[SCDB_BROKER_NAME_MAX];   /* what clients name in Hello        */
    char kind[16];                     /* "raw", ...                        */
    const scdb_broker_model *producer;
    scdb_ns ns;
    uint32_t payload_dtype;
    uint64_t token_bytes;              /* payload bytes per token           */
    /* The weights fingerprint of the producer the codes were fitted for
     * (schema/FORMATS.md, "Weights fingerprint"; 16 hex digits in codebooks
     * written before it), or "" when the payload does not depend on the
     * producer's weights (raw).  Set by open_codebook.  A producer
     * registering with another one is refused (SCDB_EMISMATCH). */
    char producer_fp[33];
    void *ctx;                         /* the kind's state (loaded codebook) */
    void (*destroy)(void *ctx);
    /* Broker-side encode (optional; NULL: producers put payloads): the
     * payload of tokens [t0, t0 + n) from producer states h_in
     * [states_layers][rows][states_dim] (f32, t0 + n <= rows) into payload
     * (n * token_bytes).  Called from the writer thread.  SCDB_ERANGE
     * (non-finite states), SCDB_ENOMEM. */
    int states_layers, states_dim;
    scdb_err (*encode)(void *ctx, const float *h_in, int rows, int t0, int n, void *payload);
    /* The [codebook] section's codes_dtype ("" = the kind's default), set
     * before open_codebook; scd: "f16" or "int8" (codec.h, "Code dtype"). */
    char codes_dtype[8];
    /* Optional check of a put's payload of n tokens (NULL: payloads of
     * F32/F16/BF16 payload_dtype are checked for NaN and Inf): SCDB_ERANGE
     * (a value the decoders must not see), SCDB_ESHAPE; msg says which. */
    scdb_err (*check)(void *ctx, const void *payload, size_t bytes, int n, char *msg,
                      size_t msglen);
} scdb_broker_codebook;

/* One stored block handed to a decoder. */
typedef struct scdb_decode_block {
    const void *payload;
    uint64_t payload_len;
    uint32_t payload_dtype;
    const int32_t *tokens;     /* the block's tokens                        */
    int n_tokens;              /* tokens in the block (block_tokens)        */
    uint32_t block_index;
    int payload_on_device;     /* payload is device memory (the GPU hot tier):
                                  only decode_dev is given such a block,
                                  with the table of that device           */
    int has_patch;             /* scd: 1 = decode with n_patch patch layers
                                  (clamped to the pair's aligners), 0 = the
                                  pair's default: GetRequest.patch; other
                                  kinds ignore both                       */
    int n_patch;
} scdb_decode_block;

/* The decode hook of one (codebook, consumer) pair.  decode() writes the
 * first n tokens of blk into cache slots [slot0, slot0 + n) with absolute
 * positions p0 .. p0 + n - 1 (K after RoPE at those positions, V, pos[]),
 * then sets cache->n = max(cache->n, slot0 + n).  It is called from several
 * worker threads at once (distinct caches or slots) and must keep no
 * per-call state in ctx.  Errors: SCDB_ESHAPE (cache geometry or payload
 * size), SCDB_EINVAL (slots outside the cache, n > blk->n_tokens),
 * SCDB_ENOMEM, or the codec's own. */
typedef struct scdb_decoder {
    const char *name;
    scdb_err (*decode)(void *ctx, const scdb_decode_block *blk, scdb_kv_cache *cache,
                       int slot0, int32_t p0, int n);
    void (*destroy)(void *ctx);
    void *ctx;
    /* Optional (NULL: host memory only): the same into a cache whose pos, K
     * and V live in the memory of ops->device (kernels.h's ops tables; the
     * broker passes the CUDA table for a CUDA IPC arena), synchronous: the
     * KV is in place when it returns.  Device state (weights) may be
     * created on first use, thread-safely, and lives until destroy.  Plus
     * the table's errors (SCDB_EDEVICE, SCDB_EUNSUPPORTED). */
    scdb_err (*decode_dev)(void *ctx, const scdb_k_ops *ops, const scdb_decode_block *blk,
                           scdb_kv_cache *cache, int slot0, int32_t p0, int n);
    /* The weights fingerprint of the consumer the pair was calibrated for
     * (schema/FORMATS.md, "Weights fingerprint"; 16 hex digits in pairs
     * written before it), or "" when decoding does not depend on the
     * consumer's weights (raw).  A consumer registering with another one is
     * refused (SCDB_EMISMATCH). */
    char consumer_fp[33];
    /* The pair's calibrated recompute default (schema/recompute.h; policy
     * NONE when it has none): a consumer's fidelity default unless the
     * config's `fidelity` overrides it. */
    scdb_recompute recompute;
    /* 1: the pair file carries a default, none included (calibration found
     * that no recompute meets the target: its figures say so); 0: none */
    int recompute_set;
} scdb_decoder;

/* A codebook kind: how to open a codebook and build a pair's decoder.
 * open_codebook fills cb->ns, payload_dtype, token_bytes, ctx, destroy
 * (name, kind and producer are set); `file` and `dtype` come from the
 * [codebook] section (dtype: for raw).  new_decoder builds the decoder from
 * the pair's `file` (may be empty).  errbuf says what is wrong. */
typedef struct scdb_codec_kind {
    const char *name;
    scdb_err (*open_codebook)(scdb_broker_codebook *cb, const char *file, scdb_dtype dtype,
                              char *errbuf, size_t errlen);
    scdb_err (*new_decoder)(const scdb_broker_codebook *cb, const scdb_broker_model *consumer,
                            const char *file, scdb_decoder *out, char *errbuf, size_t errlen);
} scdb_codec_kind;

/* The kinds the broker knows (codec_kinds.c); NULL if unknown. */
const scdb_codec_kind *scdb_codec_kind_find(const char *name);

/* The built-in raw decoder for consumer geometry m and payload dtype (F16
 * or F32).  SCDB_EDTYPE, SCDB_ENOMEM. */
scdb_err scdb_decoder_raw_new(const scdb_broker_model *m, scdb_dtype dtype, scdb_decoder *out);

/* A store memory tier in a device's memory (store.h "memory tiers";
 * device_tier.c): the GPU hot tier on SCDB_DEV_CUDA (tier name
 * SCDB_TIER_CUDA; slots are device pointers), or the same code over host
 * memory on SCDB_DEV_CPU (SCDB_TIER_DEVICE_CPU: tests).  The store does the
 * accounting, LRU and pinning as for the host tier.  SCDB_EINVAL,
 * SCDB_ENOMEM, SCDB_EDEVICE (no CUDA device answers), SCDB_EUNSUPPORTED (no
 * CUDA backend in this build). */
#define SCDB_TIER_CUDA "cuda"
#define SCDB_TIER_DEVICE_CPU "device-cpu"
scdb_err scdb_tier_device_new(scdb_device dev, uint64_t capacity_bytes, scdb_tier **out);

/* -------------------------------------------------------------- config */

typedef struct scdb_broker_model_cfg {
    char name[SCDB_BROKER_NAME_MAX];
    char config[512];          /* config.json path, a model or a LoRA adapter
                                  directory, or empty: dims below            */
    int n_layers, n_kv_heads, head_dim, max_seq_len, n_heads;
    scdb_dtype raw_dtype;
} scdb_broker_model_cfg;

typedef struct scdb_broker_codebook_cfg {
    char name[SCDB_BROKER_NAME_MAX];
    char kind[16];             /* default "raw"                              */
    char model[SCDB_BROKER_NAME_MAX]; /* producer                            */
    char file[512];
    scdb_dtype dtype;          /* raw payload dtype                          */
    char codes_dtype[8];       /* scd: f16 (default) or int8 codes           */
} scdb_broker_codebook_cfg;

typedef struct scdb_broker_pair_cfg {
    char codebook[SCDB_BROKER_NAME_MAX];
    char consumer[SCDB_BROKER_NAME_MAX];
    char decoder[16];          /* kind; default: the codebook's kind         */
    char file[512];
    char fidelity[32];         /* the consumers' recompute default
                                  (schema/recompute.h text form; "" or
                                  "pair": the pair file's)                 */
} scdb_broker_pair_cfg;

/* [consumers GROUP]: every directory a glob of `dirs` matches that holds a
 * model (config.json) or a LoRA adapter (adapter_config.json) is a
 * [model NAME] (NAME: the directory's name; a [model NAME] section of its
 * own wins), with this raw_dtype; with `codebook`, each also gets
 * [pair CODEBOOK NAME] with `decoder` and `file` ("{name}" in it replaced by
 * NAME; a consumer whose file does not exist gets no pair).  Expanded when
 * the file is loaded, so SIGHUP picks up new directories. */
#define SCDB_BROKER_MAX_GROUPS 16
typedef struct scdb_broker_consumers_cfg {
    char name[SCDB_BROKER_NAME_MAX];
    char dirs[1024];           /* globs separated by spaces                 */
    scdb_dtype raw_dtype;
    char codebook[SCDB_BROKER_NAME_MAX];
    char decoder[16];
    char file[512];
    char fidelity[32];         /* as [pair]'s, for every pair of the group  */
} scdb_broker_consumers_cfg;

/* A learned eviction policy file for live sessions (evict/evict.h); the
 * heuristics (full, streaming, h2o, snapkv, tova) are always available. */
typedef struct scdb_broker_policy_cfg {
    char name[SCDB_BROKER_NAME_MAX];
    char file[512];
} scdb_broker_policy_cfg;

typedef struct scdb_broker_config {
    char endpoint[512];        /* ipc://PATH (default: scdb_default_endpoint) */
    char tcp_endpoint[512];    /* optional tcp://HOST:PORT; CURVE required    */
    char curve_secret_file[512]; /* file holding the server's Z85 secret key */
    char curve_allow_file[512];  /* client public keys (Z85, one per line)
                                    allowed on tcp; empty: any CURVE client
                                    that knows the server's public key       */
    char data_dir[512];        /* LMDB directory (default ./scdb-data)        */
    char models_dir[512];      /* where a LoRA adapter's base is looked up by
                                  name (empty: beside the adapter)           */
    uint32_t block_tokens;     /* 0 = store default (64)                      */
    uint64_t map_size, max_map_size, disk_capacity, hot_capacity;
    uint64_t gpu_hot_capacity; /* bytes of CUDA device memory for the hot
                                  tier, which then replaces the RAM one
                                  (0: none; ignored, with a warning, when
                                  the broker runs on the CPU)               */
    int no_sync;
    int lookup_index;          /* publish the shared-memory lookup index (1)  */
    uint32_t lookup_index_entries; /* keys the index is sized for at start,
                                  at least (0: 16384); it doubles as needed */
    int workers;               /* decode / read threads (default 2)           */
    int evict_threads;         /* threads that take session evictions only,
                                  so that one never waits for a decode (1;
                                  0: the workers alone run them)           */
    int heartbeat_ms;          /* advertised client heartbeat interval (1000) */
    int heartbeat_timeout_ms;  /* reclaim after this much silence (10000)     */
    uint64_t max_request_bytes;/* all frames of one request (64 MiB)          */
    uint32_t max_tokens;       /* tokens per request (1 Mi)                   */
    uint32_t max_arenas_per_client; /* (64)                                   */
    uint64_t max_client_arena_bytes; /* all arenas of one client (0 = unbounded):
                                  over it, arena_create and session_open
                                  answer SCDB_EFULL                         */
    uint32_t max_sessions_per_client; /* live sessions of one client (32):
                                  over it, SCDB_EFULL                       */
    int max_inflight_per_client; /* one client's queued + running jobs (64);
                                  more: SCDB_EBUSY, so that a client that
                                  floods (or never reads its replies)
                                  cannot take the others' share of
                                  max_inflight                               */
    uint64_t max_arena_bytes;  /* one arena (4 GiB)                           */
    uint64_t arena_total_bytes;/* all arenas together (0 = unbounded)         */
    int drain_timeout_ms;      /* SIGTERM drain limit (30000)                 */
    int max_inflight;          /* queued + running jobs; more: SCDB_EBUSY (1024) */
    unsigned socket_mode;      /* ipc socket file mode (0660; stricter only)  */
    char socket_group[64];     /* group of the ipc and fd sockets ("": the
                                  broker's): who besides its user may be a
                                  client                                  */
    scdb_log_level log_level;  /* (info)                                      */
    scdb_device_pref device;   /* auto | cpu | cuda (auto): where gets decode
                                  into CUDA IPC arenas; see CUDA ARENAS      */
    char worker_cpus[128];     /* cores the job threads (workers and the
                                  writer) are pinned to, "0,1" or "0-3,6"
                                  ("": not pinned)                          */
    int worker_nice;           /* the workers' and the writer's nice value
                                  relative to the broker's own, -20 .. 19
                                  (0: the broker's own; below it needs
                                  CAP_SYS_NICE)                            */
    int evict_nice;            /* the eviction threads', likewise (0: the
                                  broker's own): below worker_nice, an
                                  eviction cuts in on a decode             */
    char metrics_listen[128];  /* HOST:PORT (or PORT: 127.0.0.1) for GET
                                  /metrics over HTTP; empty: off (METRICS)   */
    /* [remote]: the fleet's Redis Cluster (see REMOTE TIER); keys
     * remote_<name> as flags.  cluster "" = no remote tier. */
    char remote_cluster[1024];     /* seeds host:port,...                    */
    char remote_user[128];         /* ACL user ("": the default user)        */
    char remote_password_file[512];/* its first line ("": no AUTH)           */
    char remote_key_prefix[65];    /* ("scdb:"); no braces                   */
    uint64_t remote_ttl;           /* seconds a value lives (86400; 0: ever) */
    uint64_t remote_write_queue;   /* bytes of writes waiting (64 MiB)       */
    int remote_timeout_ms;         /* one cluster call's deadline (100)      */
    scdb_broker_model_cfg *models;
    int n_models;
    scdb_broker_codebook_cfg *codebooks;
    int n_codebooks;
    scdb_broker_pair_cfg *pairs;
    int n_pairs;
    scdb_broker_policy_cfg *policies;
    int n_policies;
    scdb_broker_consumers_cfg groups[SCDB_BROKER_MAX_GROUPS];
    int n_groups;
} scdb_broker_config;

/* Fill the defaults.  SCDB_OK. */
void scdb_broker_config_defaults(scdb_broker_config *c);
/* Free the model/codebook/pair arrays; accepts NULL. */
void scdb_broker_config_clear(scdb_broker_config *c);
/* Parse an ini file (libinih) into c (on top of what it holds): a [broker]
 * section with the scalar keys above (names as the fields), [model NAME],
 * [codebook NAME], [pair CODEBOOK CONSUMER] and [policy NAME] sections.  Unknown sections
 * or keys and bad values are errors.  SCDB_ENOTFOUND (no such file),
 * SCDB_EFORMAT (errbuf names the line), SCDB_ENOMEM. */
scdb_err scdb_broker_config_load(scdb_broker_config *c, const char *path, char *errbuf,
                                 size_t errlen);
/* Set one [broker] key ("workers", "heartbeat_timeout_ms", ...; '-' may
 * replace '_'); sizes accept K/M/G/T and KiB/MiB/GiB/TiB suffixes.
 * SCDB_ENOTFOUND (unknown key), SCDB_EINVAL (bad value). */
scdb_err scdb_broker_config_set(scdb_broker_config *c, const char *key, const char *value,
                                char *errbuf, size_t errlen);
/* A CPU list as worker_cpus takes it: comma-separated cores or ranges
 * ("0,1", "2-5,8"), each below SCDB_BROKER_MAX_CPUS: cpus[i] set to 1 for
 * each core named (the rest 0).  Returns how many, -1 when s is not such a
 * list (empty, garbage, a range backwards or out of bounds). */
#define SCDB_BROKER_MAX_CPUS 1024
int scdb_broker_cpu_list(const char *s, unsigned char cpus[SCDB_BROKER_MAX_CPUS]);
/* The name of [broker] key i (0, 1, ...), NULL past the last. */
const char *scdb_broker_config_key(int i);
/* 1 when a SIGHUP reload applies a change of [broker] key `key` to the
 * running broker, 0 when the change waits for a restart (reload.c). */
int scdb_broker_config_reloadable(const char *key);
/* Key `key`'s value in c, formatted as the ini file would give it (sizes
 * in bytes, modes in octal).  SCDB_ENOTFOUND (unknown key). */
scdb_err scdb_broker_config_get(const scdb_broker_config *c, const char *key, char *buf,
                                size_t len);
/* Add a model from a command-line spec "NAME=DIR" (DIR/config.json) or
 * "NAME:n_layers:n_kv_heads:head_dim[:max_seq_len[:f16|f32]]".
 * SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_broker_config_add_model(scdb_broker_config *c, const char *spec, char *errbuf,
                                      size_t errlen);

/* -------------------------------------------------------------- broker */

typedef struct scdb_broker scdb_broker;

/* Build the registry, open the store, bind the sockets.  Errors:
 * SCDB_EINVAL (bad config: plaintext tcp, bad socket mode, unknown model in
 * a pair, ...), SCDB_EBUSY (another broker holds the data dir or answers on
 * the endpoint), SCDB_ESYS (bind, mkdir, threads), the store's open errors,
 * SCDB_ENOMEM.  errbuf says what is wrong. */
scdb_err scdb_broker_new(const scdb_broker_config *c, scdb_broker **out, char *errbuf,
                         size_t errlen);
/* Install a decoder for (codebook, consumer) before run, replacing any the
 * config made; the broker owns dec->ctx from now on (also on error).  It
 * lives in the current registry only: a SIGHUP reload builds the new one
 * from the configuration, without it (clients using it keep it).
 * SCDB_ENOTFOUND (unknown codebook or model), SCDB_ENOMEM. */
scdb_err scdb_broker_add_pair(scdb_broker *b, const char *codebook, const char *consumer,
                              const scdb_decoder *dec);
/* How a SIGHUP reloads: load(ctx, out, ...) fills *out with the whole
 * configuration again (defaults, file, flags: what scdb_broker_new got);
 * the broker clears it after use.  Without one a SIGHUP is logged and
 * ignored.  Call before run. */
void scdb_broker_set_reload(scdb_broker *b,
                            scdb_err (*load)(void *ctx, scdb_broker_config *out,
                                             char *errbuf, size_t errlen),
                            void *ctx);
/* Serve until scdb_broker_stop() or SIGTERM/SIGINT (handlers installed
 * here), then drain.  SCDB_OK after a clean drain, SCDB_ETIMEDOUT if the
 * drain timed out, SCDB_ESYS on a fatal socket error. */
scdb_err scdb_broker_run(scdb_broker *b);
/* Ask run() to drain and return; async-signal-safe. */
void scdb_broker_stop(scdb_broker *b);
/* Catch SIGTERM/SIGINT (and SIGHUP) from now on (before scdb_broker_new): a stop signal
 * that arrives during start-up makes the next run() drain at once and
 * return SCDB_OK instead of the process dying half-started. */
void scdb_broker_catch_signals(void);
/* Close everything (store included); NULLs *b; accepts NULL. */
void scdb_broker_free(scdb_broker **b);

/* `scdb serve` / scdb-broker: argv[0] is the command name.  Exit codes: 0
 * clean shutdown, 1 runtime failure (data dir or endpoint taken, bind, store
 * I/O, drain timeout), 2 usage or configuration error (a bad setting, or a
 * model / codebook / pair / policy file it names that is missing or
 * invalid). */
int scdb_broker_main(int argc, char **argv);

#endif /* SCDB_BROKER_H */
