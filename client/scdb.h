/*
 * scdb.h — libscdb, the C client of the scdb broker.
 *
 * A serving process opens a handle on the broker (scdb_connect), registers
 * as the producer or a consumer of one model and codebook (scdb_register),
 * and then:
 *
 *   producer                                 consumer
 *   --------                                 --------
 *   prefill the prompt                        scdb_lookup(tokens)  -> matched
 *   scdb_put(tokens, block payloads)          scdb_arena_new(capacity)
 *     (raw KV: scdb_put_cache(tokens, cache)) scdb_get(tokens, arena)
 *                                              -> KV of the matched prefix
 *                                                 decoded into the arena
 *                                             prefill only the suffix, in
 *                                             place, on scdb_arena_cache()
 *
 *            +-----------+  ZeroMQ DEALER   +----------------------------+
 *   process  | scdb *h   |----------------->| broker (ROUTER)            |
 *            |  heartbeat|  ipc:// | tcp:// |  store: LMDB + hot tier    |
 *            |  thread   |  (CURVE on tcp)  |  workers decode blocks ... |
 *            +-----------+                  +-------------|--------------+
 *                 | mmap                                  | writes
 *                 v                                       v
 *            [ arena: POSIX shm, 4 KiB header + one slot-indexed KV cache ]
 *
 * Requests and replies are protobuf messages (schema/scdb.proto); bulk
 * bytes travel as raw ZeroMQ frames (put) or through the arena (get), never
 * inside protobuf.  An arena is created by the broker (a sealed memfd, mode
 * 0600), mapped here, then closed by the broker: only the two processes can
 * reach it.
 * The cache inside it has exactly the layout of kv_cache.h (scdb_kv_cache),
 * so the KV a get decodes is where attention reads it: zero copy.
 * scdb_get_copy() instead copies into a cache the caller owns.
 *
 * Payloads.  A put sends, per full block of block_tokens tokens, the
 * block's payload in the codebook's encoding: for the "raw/<model>"
 * codebooks that is the block's K and V (schema/wire.h: K [L][T][D] then
 * V, F16 or F32), which scdb_raw_block() / scdb_put_cache() build from a
 * KV cache.  For "scd" codebooks the payload is the codec's codes: either
 * the producer encodes them itself (codec/codec.h, scdb_codec_encode) and
 * calls scdb_put, or it hands its states to the broker through shared
 * memory and the broker encodes (scdb_put_states).
 *
 * Errors.  Every call returns an scdb_err; when the broker refused a
 * request, scdb_last_error() holds its message ("unknown model 'x'", ...).
 * Common to all calls that talk to the broker: SCDB_ETIMEDOUT (no reply
 * within the handle's timeout; the socket is reset), SCDB_ECLOSED (the
 * broker is shutting down), SCDB_EPROTO (a reply that is not a scdb.Reply),
 * SCDB_ENOMEM, SCDB_EINVAL (NULL handle or argument), SCDB_EINTR (the
 * interrupt check said stop: Caveats, "Signals"), SCDB_EAUTH (tcp: CURVE
 * handshake refused).  Puts also SCDB_ENOSPC: the broker's disk is full
 * (nothing of the refused blocks is stored).
 *
 * CAVEATS
 * -------
 * Threads.  A handle is not thread-safe: use one handle per thread, or
 * serialise calls with a mutex.  Handles are independent (each has its own
 * ZeroMQ context and sockets).  Each registered handle runs one background
 * thread that sends heartbeats (scdb_opts.no_heartbeat turns it off: then
 * your own calls must come more often than the broker's heartbeat timeout,
 * or its arenas are reclaimed).
 *
 * Fork.  Do not use a handle across fork(): the child shares the parent's
 * sockets' state but not its threads.  In a child, call nothing on an
 * inherited handle (not even scdb_close); connect a new one.  Arena
 * mappings are inherited by the child like any MAP_SHARED memory.
 *
 * Timeouts.  Every call that talks to the broker waits at most the
 * handle's timeout (scdb_opts.timeout_ms, default 5000 ms; change it with
 * scdb_set_timeout()).  A get that decodes a long prefix may need more.
 * After a timeout the request may still be executed by the broker later;
 * its reply is discarded.  Puts are idempotent, so retrying is safe.
 *
 * Signals.  A signal that interrupts a call's wait does not end the call by
 * itself (the wait resumes, bounded by the timeout), unless the
 * application set an interrupt check (scdb_set_interrupt) that says stop:
 * then the call returns SCDB_EINTR within about 50 ms.  Every wait of a
 * call asks it: for the broker's reply, and for the memory of an arena,
 * a session's statistics or the lookup index over the fd socket (an
 * arena interrupted there is freed again).  The Python module
 * sets one that runs Python's signal handlers, so Ctrl-C raises
 * KeyboardInterrupt during a call.  The heartbeat thread blocks every
 * signal: they go to the application's threads.
 *
 * Access and credentials.  Over ipc://, a user outside the broker socket's
 * group gets SCDB_EACCESS from scdb_connect at once (the message names the
 * socket and its group).  Over tcp://, a CURVE handshake the broker refuses
 * (a client key not in its curve_allow_file, a curve_server_key that is not
 * the broker's) is SCDB_EAUTH at once, not a timeout.
 *
 * Broker restarts.  The handle reconnects by itself; the first call after
 * a restart registers again (same role, model, codebook) and is retried
 * once, so callers see no error.  Stored prefixes survive (LMDB); arenas do
 * not: calls on an arena from before the restart return SCDB_ECLOSED and
 * the arena should be freed and created anew (scdb_get_copy does this by
 * itself for its internal arena).
 *
 * Lookups.  scdb_lookup normally makes no request: the broker publishes a
 * read-only shared-memory index of the keys of every stored block
 * (schema/lookup_index.h; schema/FORMATS.md, "Lookup index"), mapped at
 * each registration; the handle hashes the prompt's blocks itself and
 * probes the index.  The answer is the broker's: a block is in the index
 * exactly while the store's lookups match it (added after its put
 * commits, removed when its eviction or delete is staged), and a put's
 * blocks are visible to every handle by the time its reply arrives.  If
 * there is no usable index (lookup_index = 0, a tcp:// endpoint, an
 * object without its read-only seals: scdb_stat.index_error says why), or
 * the broker is rewriting the table at that instant, or the broker
 * stopped or stopped refreshing it, the lookup is sent as a request
 * instead — same result.
 * Index lookups do not make blocks recently used for eviction (gets do),
 * cost the broker nothing; the handle reports how many it answered in its
 * heartbeats and goodbye, which the broker counts in its metrics
 * (scdb_stat.reported_index_lookups; scdb_stat also has this handle's
 * own).  scdb_opts.no_lookup_index or $SCDB_LOOKUP_INDEX=0 force
 * the request path.  A clean stop retires the index; a killed broker's
 * says so at once (the kernel marks the lock its event loop held in the
 * index dead when the process dies: no pid is compared, so a broker in
 * another PID namespace counts too) and a hung one's goes stale within a
 * second, so a handle never answers from a dead broker's table.  A lookup
 * that finds its broker gone, and nothing listening on the ipc:// socket
 * in its place, fails at once with SCDB_ECLOSED ("the broker is gone")
 * instead of waiting for the timeout; a broker that is back answers the
 * request, and the handle re-maps its index.
 *
 * Remote tier.  A broker of a fleet may share blocks with the others
 * through a Redis Cluster (scdb_info.remote_tier; the broker's [remote]
 * section).  The lookup index holds only the blocks this broker stores
 * locally, so a lookup whose indexed prefix stops short of the prompt's
 * full blocks asks the broker for the remainder: one request, in which a
 * worker probes the cluster (one pipelined EXISTS round per cluster node,
 * stopping at the first absent block) and answers local + remote
 * (scdb_lookup_result.n_remote).  What a lookup costs, by path:
 *   - every full block stored locally, index mapped: no request, a hash
 *     and a probe of shared memory per block (about a microsecond for a
 *     few blocks);
 *   - the local prefix stops short, remote tier present: that, plus one
 *     round trip to the broker, a hop to a worker and one round trip to
 *     the cluster's nodes in parallel (hundreds of microseconds on one
 *     host; add the network between hosts) -- also for a prompt nobody
 *     stored yet;
 *   - no index (or no remote tier): one round trip to the broker, whose
 *     main thread answers from memory (tens of microseconds).
 * A get does the same for the blocks it decodes: the local prefix, then
 * the rest fetched from the cluster (pipelined GETs), each value verified
 * (checksum, namespace, position in the chain) before it is decoded, then
 * kept locally so the next lookup and get are local
 * (scdb_get_result.remote_blocks, remote_ns).  A slow or unreachable
 * cluster never fails a lookup or a get: it costs at most the broker's
 * remote timeout (timeout_ms, 100 ms by default) until the broker marks
 * it down, then nothing, and the answer is the local one.  A block another
 * broker has only just put may not be in the cluster yet (writes are
 * asynchronous: usually about a millisecond).  Producers: put from what
 * the get wrote (tokens_written), not from what a lookup promised; a put
 * whose earlier blocks only the cluster holds makes the broker fetch them
 * first, and fails with SCDB_ENOTFOUND if the cluster cannot give them.
 *
 * Shared memory.  Arenas, session statistics and the lookup index come
 * from the broker as file descriptors over a Unix socket beside its ipc://
 * socket (PATH.fd, schema/fd_pass.h), fetched with the ticket in the reply
 * that created them: the client needs no user, group or PID namespace in
 * common with the broker, only permission to connect to its sockets (the
 * broker's socket_group and socket_mode).  Memory is reserved when the
 * arena is created: none left is SCDB_EFULL then, never a SIGBUS later.  The broker frees a client's
 * arenas when the client says goodbye (scdb_close) or stops heartbeating;
 * a mapping this process holds stays valid memory until scdb_arena_free.
 *
 * CUDA IPC arenas (scdb_arena_new_cuda).  The KV cache of such an arena
 * is device memory the broker allocated on its GPU and exported with
 * cudaIpcGetMemHandle; this library opens the handle (cudaIpcOpenMemHandle)
 * and the broker's decode kernels write the consumer's KV straight into it,
 * with no host round-trip.  Conditions and caveats:
 *   - same host as the broker, and a GPU the broker runs on (it must run
 *     with device = cuda, or auto on a machine where a device answers);
 *     otherwise the call fails with SCDB_EUNSUPPORTED and says why.  The
 *     GPU is found by PCI bus id, so CUDA_VISIBLE_DEVICES may differ.
 *   - libscdb does not link the CUDA runtime: it loads libcudart with
 *     dlopen at the first CUDA arena (one the process already has, else
 *     $SCDB_CUDART, libcudart.so, .so.13, .so.12, then
 *     /usr/local/cuda/lib64/libcudart.so); none: SCDB_EUNSUPPORTED.
 *   - CUDA context: the memory is opened in the device's primary context
 *     (what the runtime API and most frameworks use); use the pointers of
 *     scdb_arena_cache_device() on that device.  The caller's current
 *     device is left as it was.  Not in the broker's own process (CUDA
 *     refuses to open a handle in the process that exported it).
 *   - fork: CUDA contexts do not survive fork(); a child must not touch an
 *     inherited CUDA arena (nor free it): create its own.
 *   - the handle is only ever sent to the client that created the arena,
 *     in the reply to its ArenaCreate; scdb_arena_free and scdb_close
 *     close our mapping before the broker frees the device memory; a
 *     reclaimed client's device memory is freed by the broker.  After a
 *     re-registration or a broker restart the arena is stale (as any
 *     arena: SCDB_ECLOSED): do not touch its device memory, free it.
 *   - a get writes pos, K and V on the device and is complete when
 *     scdb_get returns (the broker synchronises before replying); the
 *     header (n, gen) stays in shared memory.  Live sessions work on CUDA
 *     arenas too: see "Live sessions", "On a CUDA arena".
 *   - this path is compile-checked only so far: the CUDA twins it runs are
 *     tested op by op on a GPU (tests/test_kernels_cuda.c), and the decode
 *     and session sequences on the CPU twins (test_codec, test_evict,
 *     test_broker), but the IPC path itself is exercised only by
 *     tests/test_cuda_ipc.c, which skips without a GPU.
 *
 * Live sessions: see the section of that name below.
 */
#ifndef SCDB_H
#define SCDB_H

#include <stddef.h>
#include <stdint.h>

#include "kv_cache.h"
#include "recompute.h"
#include "scdb_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct scdb scdb;
typedef struct scdb_arena scdb_arena;

typedef enum scdb_role { SCDB_PRODUCER = 1, SCDB_CONSUMER = 2 } scdb_role;

typedef struct scdb_opts {
    const char *endpoint;          /* NULL: $SCDB_ENDPOINT, else the broker's
                                      default ipc path (schema/wire.h)      */
    int timeout_ms;                /* per call; 0 = 5000                    */
    int no_heartbeat;              /* 1: no heartbeat thread (see Caveats)  */
    const char *name;              /* shown in broker logs; NULL: "pid N"   */
    /* tcp:// only (CURVE; all Z85, 40 characters) */
    const char *curve_server_key;  /* the broker's public key (required)    */
    const char *curve_public_key;  /* ours; NULL with secret NULL: a fresh  */
    const char *curve_secret_key;  /* keypair per handle                    */
    int no_lookup_index;           /* 1: scdb_lookup always asks the broker
                                      (also $SCDB_LOOKUP_INDEX=0); see
                                      Caveats, "Lookups"                    */
} scdb_opts;

/* Open a handle and check that a broker answers (an anonymous ping).
 * o may be NULL (all defaults; a NULL or "" endpoint is the default one).
 * An ipc:// endpoint fails at once, without waiting for the timeout, when
 * nothing can answer.  Errors: SCDB_ENOTFOUND (no socket file at the ipc
 * path), SCDB_ECLOSED (a socket file nothing listens on), SCDB_ETIMEDOUT
 * (no reply within the timeout: a busy or stopped broker, a tcp peer),
 * SCDB_EINVAL (no known scheme, not a socket, bad or missing CURVE keys),
 * SCDB_EACCESS (no permission to connect to the ipc socket: its group),
 * SCDB_EAUTH (tcp: the broker refused the CURVE handshake), SCDB_EINTR
 * (scdb_set_interrupt), SCDB_ESYS (ZeroMQ), SCDB_ENOMEM.  On error *out is NULL and
 * scdb_connect_error() says why. */
scdb_err scdb_connect(const scdb_opts *o, scdb **out);

/* Why the calling thread's last scdb_connect failed ("" after a success):
 * what there is to read before there is a handle.  Valid until that
 * thread's next scdb_connect. */
const char *scdb_connect_error(void);

/* Say goodbye (the broker frees this client's arenas), unmap every arena,
 * stop the heartbeat thread, close.  NULLs *h; accepts NULL. */
void scdb_close(scdb **h);

/* Per-call timeout in milliseconds (> 0). */
void scdb_set_timeout(scdb *h, int timeout_ms);

/* Interrupting blocking calls (process-wide; see Caveats, "Signals").
 * While a call waits for the broker it calls fn(arg) every 50 ms and after
 * each signal that interrupts its wait; when fn returns nonzero the call
 * stops and returns SCDB_EINTR (its request may still be served, as after
 * a timeout; the handle stays usable).  fn runs on the calling thread and
 * must not call into libscdb.  NULL fn: no check (the default; calls then
 * wait in one piece).  Set it before threads use libscdb. */
typedef int (*scdb_interrupt_fn)(void *arg);
void scdb_set_interrupt(scdb_interrupt_fn fn, void *arg);

/* The broker's message for the last failed call, or a local explanation;
 * "" after a success.  Valid until the next call on h. */
const char *scdb_last_error(const scdb *h);

/* What the broker told us at registration. */
typedef struct scdb_info {
    uint32_t block_tokens;         /* tokens per stored block               */
    uint64_t block_bytes;          /* payload bytes of one block            */
    uint32_t payload_dtype;        /* scdb_dtype of payloads (raw: F16/F32) */
    int n_layers, n_kv_heads, head_dim, max_seq_len; /* our model's KV      */
    int n_heads;                   /* its query heads (0: the broker does not
                                      know; sessions then take the caller's) */
    int vocab_size;                /* tokens must be below it (0: not known) */
    char decoder[32];              /* consumers: "raw", ...                 */
    char codebook_kind[16];        /* "raw" (payload = KV), "scd" (codes)   */
    int states_layers, states_dim; /* producers: scdb_put_states of n tokens
                                      reads H_in [states_layers][n][states_dim]
                                      (scdb_states_row); 0: the broker does
                                      not encode this codebook             */
    uint32_t max_tokens;           /* per request                           */
    uint64_t max_request_bytes;
    uint32_t heartbeat_ms, heartbeat_timeout_ms;
    uint64_t broker_instance;      /* changes when the broker restarts      */
    int remote_tier;               /* 1: the broker has a remote tier (a
                                      Redis Cluster its fleet shares): see
                                      Caveats, "Lookups"                   */
} scdb_info;

/* Register as producer or consumer of `model` under `codebook` (NULL or "":
 * "raw/<model>", the model's raw KV).  A handle holds one registration;
 * registering again replaces it (and frees the old one's arenas).  info
 * may be NULL.  Errors: SCDB_ENOTFOUND (unknown model or codebook, or no
 * pair decodes the codebook into this consumer), SCDB_EMISMATCH (a
 * producer whose model is not the codebook's producer, or whose weights
 * fingerprint, scdb_set_weights_fp, is not the one the codebook was fitted
 * for; a consumer whose weights fingerprint is not the one its pair was
 * calibrated for), SCDB_EPROTO (protocol version mismatch), plus the
 * common ones. */
scdb_err scdb_register(scdb *h, scdb_role role, const char *model, const char *codebook,
                       scdb_info *info);
/* Stale pairs.  A pair is calibrated for one consumer's weights and records
 * their fingerprint (schema/FORMATS.md, "Weights fingerprint": 32 hex
 * digits over the tensors, the same for scdb's own layout and a one-file or
 * sharded Hugging Face checkpoint of the same weights).  A consumer that
 * tells the broker the fingerprint of the weights it runs is refused at
 * registration (SCDB_EMISMATCH, the message naming both fingerprints) when
 * its pair was calibrated for other weights, instead of being served KV
 * decoded for another model; one that tells nothing is not checked.  So is
 * a producer whose codebook was fitted for other weights than it runs (the
 * codebook's producer_fp), instead of storing codes that every consumer
 * would decode as the codebook producer's.
 *
 * scdb_weights_fingerprint: the fingerprint of a model directory or a
 * llama GGUF model file (llama.cpp's; the same weights, the same
 * fingerprint) into fp[33]; of a LoRA adapter, a PEFT directory
 * (adapter_config.json) or a GGUF adapter file, that of its merged weights
 * over its base, found beside it (PEFT: ADAPTER/.., ADAPTER/../../models,
 * an absolute base_model_name_or_path; GGUF: NAME.gguf in its folder, NAME
 * its general.base_model.0.name).  Reads every weight once (mmap).
 * Errors: SCDB_ENOTFOUND (no config.json or weight file, a shard the index
 * names, an adapter's base), SCDB_EFORMAT, SCDB_ERANGE, SCDB_EDTYPE (also a
 * quantized GGUF tensor), SCDB_ETRUNC (bad files: errbuf, may be NULL, says
 * which), SCDB_EUNSUPPORTED, SCDB_ESHAPE (an adapter scdb does not apply,
 * or that does not fit its base), SCDB_EIO, SCDB_ENOMEM, SCDB_EINVAL.
 * scdb_weights_fingerprint_adapter: the same for an adapter over the base
 * given (a model directory or GGUF file), as llama.cpp names the two
 * (llama_model_load_from_file + llama_adapter_lora_init); SCDB_EINVAL also
 * when `adapter` is not an adapter.  Since 0.3 (SCDB_0.3).
 * scdb_set_weights_fp: the fingerprint this handle's registrations, as
 * producer or consumer, send from now on (scdb_register and every
 * re-registration after a broker restart); NULL or "": none.  SCDB_EINVAL
 * (not 32 lowercase hex digits).
 * scdb_set_weights_dir: the same, computed from a model directory: the
 * errors of scdb_weights_fingerprint (message in scdb_last_error). */
scdb_err scdb_weights_fingerprint(const char *model_dir, char fp[33], char *errbuf, size_t errlen);
scdb_err scdb_weights_fingerprint_adapter(const char *base, const char *adapter, char fp[33], char *errbuf,
                                          size_t errlen);
scdb_err scdb_set_weights_fp(scdb *h, const char *fp);
scdb_err scdb_set_weights_dir(scdb *h, const char *model_dir);

/* The registration's info (zeroed before scdb_register). */
const scdb_info *scdb_get_info(const scdb *h);

/* Round trip to the broker; rtt_us (may be NULL) gets the time in µs. */
scdb_err scdb_ping(scdb *h, double *rtt_us);

typedef struct scdb_put_result {
    uint32_t n_full;               /* full blocks in the tokens             */
    uint32_t n_stored;             /* leading blocks stored after the call  */
    uint32_t n_new;                /* blocks this call added (new)          */
    uint32_t n_replaced;           /* stored blocks it overwrote (replace;
                                      0 from brokers before the count, which
                                      included them in n_new)               */
} scdb_put_result;

/* Store full blocks [first_block, first_block + n) of tokens, where n =
 * payload_len / block_bytes and payload is their payloads back to back.
 * Blocks before first_block must be stored already; blocks stored already
 * are skipped (out->n_new counts the others).  Producers only.  out may be
 * NULL.  Errors: SCDB_ESHAPE (payload_len not a multiple of block_bytes, or
 * more blocks than the tokens hold), SCDB_ETOOBIG (over max_tokens or
 * max_request_bytes), SCDB_ERANGE (more tokens than the model's max_seq_len,
 * a token outside its vocabulary, or a payload of F32/F16/BF16 values with
 * a NaN or an infinity: nothing stored), SCDB_ENOTFOUND (an earlier block
 * is not stored), SCDB_EFULL (store full of pinned blocks), SCDB_EINVAL
 * (not registered as a producer; negative token), SCDB_EIO, common ones. */
scdb_err scdb_put(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                  const void *payload, size_t payload_len, scdb_put_result *out);

/* As scdb_put, but blocks stored already are overwritten with these
 * payloads: for a producer that knows what it stored is wrong.  Keys follow
 * tokens, not values, so stored blocks after them (this prompt's or any
 * other's) stay valid.  Consumers' later gets decode the new values.
 * Errors: those of scdb_put, SCDB_EBUSY (a block is being read at this
 * instant: the blocks before it were replaced; call again). */
scdb_err scdb_replace(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                      const void *payload, size_t payload_len, scdb_put_result *out);

/* Raw-KV codebooks: put every full block of tokens from a cache whose slots
 * [0, n_tokens) hold them (as after a prefill).  Errors: those of
 * scdb_put, SCDB_ESHAPE (cache geometry is not the model's, or it holds
 * fewer than the full blocks' tokens), SCDB_EUNSUPPORTED (not a raw
 * codebook: encode with the codec and use scdb_put). */
scdb_err scdb_put_cache(scdb *h, const int32_t *tokens, size_t n_tokens,
                        const scdb_kv_cache *cache, scdb_put_result *out);

/* Broker-side encode (codebooks of kind "scd": info.states_dim > 0).  The
 * producer writes the states of tokens [0, n) — H_in, the normalised input
 * of each layer's attention — into a states arena, then scdb_put_states
 * has the broker encode every full block from first_block with the codebook
 * and store it.  Only codes are kept; no payload crosses the socket.
 *
 * THE LAYOUT is packed by the put's n, not by the arena's capacity:
 *
 *     states of token t, layer l:  states + (l * n + t) * states_dim
 *                                  (scdb_states_row below)
 *
 * f32 [states_layers][n][states_dim], exactly what model.h's
 * scdb_capture.h_in receives from one forward of the n tokens (pass the
 * arena's memory as capture.h_in: zero copy).  Every row starts as NaN, and
 * the rows a put_states encodes go back to NaN once stored, so a row read
 * but never written since — a producer that used the capacity as the
 * stride, or re-sent a put without writing its states again — is refused
 * (SCDB_ERANGE, nothing stored), never encoded.
 *
 * scdb_states_arena_new: a states arena for up to `capacity` tokens (0:
 * the model's max_seq_len).  Errors: SCDB_EUNSUPPORTED (not a producer of
 * a codebook the broker encodes), those of scdb_arena_new.
 * scdb_arena_states: its memory (NULL for a KV arena), states_layers,
 * states_dim and the most tokens one put may cover (its capacity).
 * scdb_put_states errors: those of scdb_put, SCDB_ERANGE (more tokens than
 * the arena holds; a row of an encoded block not finite or not written:
 * the message says which tokens), SCDB_EINVAL (not a states arena),
 * SCDB_EUNSUPPORTED, SCDB_ECLOSED (arena from before a broker restart).
 * scdb_replace_states: as scdb_put_states, overwriting stored blocks (see
 * scdb_replace).  Free the arena with scdb_arena_free. */
scdb_err scdb_states_arena_new(scdb *h, int capacity, scdb_arena **out);
float *scdb_arena_states(scdb_arena *a, int *n_layers, int *dim, int *max_tokens);
scdb_err scdb_put_states(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                         scdb_arena *a, scdb_put_result *out);
scdb_err scdb_replace_states(scdb *h, const int32_t *tokens, size_t n_tokens,
                             uint32_t first_block, scdb_arena *a, scdb_put_result *out);
/* Where the states of token t of layer `layer` go for a put_states of
 * n_tokens tokens (dim = states_dim). */
static inline float *scdb_states_row(float *states, int dim, size_t n_tokens, int layer,
                                     size_t t)
{
    return states + ((size_t)layer * n_tokens + t) * (size_t)dim;
}

/* The raw payload of cache slots [slot0, slot0 + n_tokens) in dtype (F16 or
 * F32): K [n_layers][n_tokens][kv_dim] then V, into dst (cap bytes).
 * Errors: SCDB_EINVAL (slots outside the cache), SCDB_EDTYPE, SCDB_ETOOBIG
 * (cap too small). */
scdb_err scdb_raw_block(const scdb_kv_cache *c, int slot0, int n_tokens, scdb_dtype dtype,
                        void *dst, size_t cap);

typedef struct scdb_lookup_result {
    uint32_t n_full;               /* full blocks in the tokens             */
    uint32_t n_matched;            /* leading blocks stored (local + remote) */
    uint32_t matched_tokens;       /* n_matched * block_tokens              */
    uint32_t n_remote;             /* of n_matched: found only in the
                                      broker's remote tier (a get fetches
                                      them, then they are local)           */
} scdb_lookup_result;

/* Longest stored prefix of tokens under our codebook: from the broker's
 * shared-memory lookup index when one is mapped (no request), else by a
 * request; same answer (Caveats, "Lookups").  With a remote tier
 * (info.remote_tier), a local prefix that stops short is continued by one
 * request to the broker, which probes the cluster (out->n_remote); a
 * cluster that is slow or down makes that the local answer, never an
 * error.  Errors: SCDB_ETOOBIG (over
 * max_tokens), SCDB_ERANGE (a token outside our model's vocabulary),
 * SCDB_EINVAL (negative token, not registered), SCDB_ECLOSED (the broker
 * is gone and nothing listens in its place: at once), common (only when a
 * request is made). */
scdb_err scdb_lookup(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_lookup_result *out);

/* A shared-memory arena holding one KV cache of `capacity` slots (0: the
 * model's max_seq_len) shaped for our model.  Errors: SCDB_ETOOBIG (over
 * the broker's max_arena_bytes), SCDB_EFULL (per-client arena count or
 * bytes, total arena bytes, or memory full), SCDB_ESYS (the fd socket
 * refused us — its path and errno in scdb_last_error — or mmap failed),
 * SCDB_EPROTO (bad arena header), common. */
scdb_err scdb_arena_new(scdb *h, int capacity, scdb_arena **out);
/* The arena's cache (slot-indexed, kv_cache.h).  n is updated by every get;
 * the caller may append slots itself (prefill the suffix) and move n.
 * NULL for a CUDA IPC arena (its memory is on the GPU). */
scdb_kv_cache *scdb_arena_cache(scdb_arena *a);
/* A KV arena whose cache lives in the broker's CUDA device memory, opened
 * here through CUDA IPC (Caveats, "CUDA IPC arenas"); gets decode into it
 * on the GPU.  Errors: SCDB_EUNSUPPORTED (the broker does not run on a CUDA
 * device, its decoder for our pair cannot write device memory, or no CUDA
 * runtime library here), SCDB_EDEVICE (cudaSetDevice /
 * cudaIpcOpenMemHandle failed: another host or GPU, ...), and those of
 * scdb_arena_new. */
scdb_err scdb_arena_new_cuda(scdb *h, int capacity, scdb_arena **out);
/* A CUDA IPC arena's cache: pos, k and v are device pointers, valid on CUDA
 * device *cuda_device (this process's numbering; may be NULL); n is kept on
 * the host as for scdb_arena_cache.  NULL for a host arena. */
scdb_kv_cache *scdb_arena_cache_device(scdb_arena *a, int *cuda_device);
/* Tell the broker, unmap, free.  NULLs *a; accepts NULL.  Must be called
 * before scdb_close of its handle or not at all (close frees them). */
void scdb_arena_free(scdb_arena **a);

typedef struct scdb_get_result {
    uint32_t n_full;               /* full blocks in the tokens             */
    uint32_t n_matched;            /* leading blocks stored                 */
    uint32_t tokens_written;       /* slots [slot0, slot0 + this) written   */
    uint32_t cache_n;              /* the cache's live slots after the get  */
    uint64_t decode_ns;            /* broker time spent decoding            */
    uint32_t remote_blocks;        /* of n_matched: fetched from the remote
                                      tier (after the local prefix, only as
                                      far as the arena has room), verified
                                      and kept locally                     */
    uint64_t remote_ns;            /* broker time fetching them             */
    int partial;                   /* 1: fewer tokens written than matched
                                      (tokens_written < n_matched x
                                      block_tokens): the arena had no room
                                      for the rest; the call still returns
                                      SCDB_OK                               */
} scdb_get_result;

/* Decode the longest stored prefix of tokens into the arena: block i goes
 * to slots slot0 + i*block_tokens .. with absolute positions pos0 +
 * i*block_tokens ..  Whole blocks only, as many as fit the arena: a prefix
 * longer than the room from slot0 is a PARTIAL result (SCDB_OK,
 * out->partial = 1, tokens_written < the matched tokens), never an error;
 * prefill the rest yourself.  The cache's n becomes max(n, slot0 +
 * tokens_written).  out may be NULL.
 * Errors: SCDB_ECLOSED (arena from before a broker restart), SCDB_EBUSY
 * (another get on this arena is in progress), SCDB_ERANGE (slot0 past the
 * arena, negative pos0), SCDB_ESHAPE / SCDB_ECHECKSUM (a stored block is
 * damaged: the blocks before it were written), common ones. */
scdb_err scdb_get(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_arena *a, int slot0,
                  int32_t pos0, scdb_get_result *out);

/* Per-get options of scdb_get_ex. */
typedef struct scdb_get_opts {
    /* SCD pairs: patch layers to decode with, the first of the pair's
     * patch layers in its greedy order, clamped to those it has aligners
     * for: fewer is a faster decode at lower quality (0: REUSE on every
     * layer; docs/BENCHMARKS.md "Rate knob" has measured figures).  -1:
     * the pair's default budget.  Raw decoders ignore it. */
    int patch_layers;
} scdb_get_opts;

/* As scdb_get, with options (NULL: as scdb_get, i.e. patch_layers -1).
 * Errors: those of scdb_get, SCDB_EINVAL (patch_layers below -1). */
scdb_err scdb_get_ex(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_arena *a, int slot0,
                     int32_t pos0, const scdb_get_opts *opts, scdb_get_result *out);

/* ------------------------------------------------------------ fidelity on demand
 *
 * A restored prefix is close to the consumer's own KV, not equal to it (the
 * pair decodes the producer's codes; docs/BENCHMARKS.md "What per-token
 * decoding can reach").  scdb_get_recompute buys fidelity with time: it
 * gets the prefix as scdb_get_ex does, then takes the tokens a setting
 * chooses (recompute.h: tail, initial, selective, or the registration's
 * default) out of the arena's cache -- their slots removed, order kept,
 * every other slot keeping its position -- and returns their absolute
 * positions and token ids.  The caller's engine forwards those tokens at
 * those positions over the cache (attention is causal by position, so each
 * attends exactly as at its place: to the restored KV before it and to the
 * recomputed tokens), then its suffix from out->next_pos on:
 *
 *   scdb_get_recompute(h, tokens, n, arena, slot0, pos0, &o, &r)
 *   forward r.tokens[0..r.n_recompute) at r.pos[..]     (any order of the
 *   forward the suffix at r.next_pos, r.next_pos + 1 ..  two in one batch)
 *
 * Recomputing every token gives the consumer's own prefill (tests/
 * test_broker.c checks the logits).  libscdb does not compute: the engine
 * is the caller's.  Which engines can: tail needs nothing but appending at
 * the end (llama.cpp can: the tail's positions are pos_max + 1 ..); initial
 * and selective need a forward at explicit positions over a cache causal by
 * position (scdb's reference model, model.h; not llama.cpp, whose KV cells
 * must be appended in order: there use tail, and a selective setting is
 * refused by its consumer).  selective needs the caller's scorer (o.score):
 * e.g. CacheBlend's, the engine's own first layer over the restored KV,
 * scoring each token by how far its next layer's KV is from the restored
 * one (the reference engine's: bench/ and cli/ use it).  The broker is not
 * asked for anything new: the default comes with the registration
 * (scdb_recompute_default), and the removal is a local edit of the arena
 * (host arenas only: a CUDA IPC arena is SCDB_EUNSUPPORTED for any setting
 * but none).
 *
 * A live session on the arena is fine: a get may only append there, and
 * the slots taken out are among the ones it appended, before any
 * statistics are folded for them. */

/* Options of scdb_get_recompute; scdb_get_recompute_init fills the
 * defaults (patch_layers -1, recompute default, no scorer).  `size` is
 * sizeof(scdb_get_recompute_opts) as the caller was compiled: fields added
 * later are read only when it covers them. */
typedef int (*scdb_recompute_score_fn)(void *arg, const scdb_kv_cache *cache, int slot0, int n,
                                       const int32_t *tokens, float *scores);
typedef struct scdb_get_recompute_opts {
    size_t size;
    int patch_layers;              /* as scdb_get_opts                      */
    scdb_recompute recompute;      /* SCDB_RECOMPUTE_DEFAULT: the
                                      registration's (scdb_recompute_default);
                                      NONE: a plain get                     */
    /* selective: score the n restored slots [slot0, slot0 + n) of cache
     * (their token ids: tokens), scores[i] for slot slot0 + i, higher
     * recomputed first (ties: the later token; NaN lowest); return 0, or
     * nonzero to fail the call (SCDB_EINVAL; the arena keeps the whole
     * restored prefix).  NULL with a selective setting: SCDB_EINVAL. */
    scdb_recompute_score_fn score;
    void *score_arg;
} scdb_get_recompute_opts;

typedef struct scdb_get_recompute_result {
    size_t size;                   /* sizeof as the caller was compiled     */
    scdb_get_result get;           /* the get's, cache_n after the removal  */
    scdb_recompute applied;        /* the setting used (default resolved)   */
    int from_default;              /* 1: it was the registration's default  */
    uint32_t n_recompute;          /* tokens taken out                      */
    const int32_t *pos;            /* [n_recompute] their absolute positions,
                                      ascending                             */
    const int32_t *tokens;         /* [n_recompute] their token ids         */
    int32_t next_pos;              /* pos0 + get.tokens_written: the first
                                      suffix token's position               */
} scdb_get_recompute_result;

/* The defaults: size set, patch_layers -1, recompute DEFAULT. */
void scdb_get_recompute_init(scdb_get_recompute_opts *o);

/* Get the longest stored prefix of tokens into the arena (scdb_get_ex),
 * then take out the tokens the setting chooses among the tokens_written
 * restored ones (a count the request gives is checked against n_tokens,
 * what the caller asks for; the registration's default, which the caller
 * did not give, is not; either is clamped to what was restored: the rest
 * of a shorter hit is the caller's to prefill anyway).  out->pos and
 * out->tokens belong to the handle, valid until its next
 * scdb_get_recompute or scdb_close.  o NULL: the defaults.  Errors: those
 * of scdb_get_ex; SCDB_EINVAL (a bad setting, named: an unknown policy, a
 * negative count, a fraction outside [0, 1], both set, selective without a
 * scorer, the scorer failed), SCDB_ERANGE (a request's count beyond
 * n_tokens: "recompute.tokens 500 is beyond the prefix's 448 tokens"),
 * SCDB_EUNSUPPORTED (a CUDA IPC arena and a setting other than none). */
scdb_err scdb_get_recompute(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_arena *a,
                            int slot0, int32_t pos0, const scdb_get_recompute_opts *o,
                            scdb_get_recompute_result *out);

/* The registration's fidelity default: the broker config's `fidelity` for
 * this pair, else the pair's calibrated `recompute`, else none (also from
 * a broker older than the setting).  source (may be NULL, 16 bytes) gets
 * "config", "pair" (a calibrated none too: calibration found no recompute
 * needed) or "" (no default anywhere).  SCDB_EINVAL (NULL h or out, not registered). */
scdb_err scdb_recompute_default(const scdb *h, scdb_recompute *out, char *source);

/* As scdb_get, through an arena the handle keeps, then copied into dst
 * (any scdb_kv_cache of our model's geometry) at slots slot0.. .  Errors:
 * those of scdb_get and scdb_arena_new, SCDB_ESHAPE (dst geometry). */
scdb_err scdb_get_copy(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_kv_cache *dst,
                       int slot0, int32_t pos0, scdb_get_result *out);

/* Delete stored blocks [from_block, n_matched) of tokens, last first.
 * n_deleted may be NULL.  Producers only.  Errors: SCDB_EBUSY (a block is
 * pinned or has other stored children: the blocks after it were deleted),
 * SCDB_EINVAL, SCDB_EIO, common. */
scdb_err scdb_delete(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t from_block,
                     uint32_t *n_deleted);

/* ------------------------------------------------------------ live sessions
 *
 * A live session keeps an arena's cache within a slot budget while this
 * process decodes into it, with one of the broker's eviction policies
 * (evict/evict.h: full, streaming, h2o, snapkv, tova, the per-head
 * h2o_head, snapkv_head, tova_layer, or a learned DistillCache policy the
 * broker loaded, e.g. "distillcache").  A policy that keeps a set of slots
 * per (layer, KV group) at the session's budget (the per-head kinds; a
 * learned policy below its split) gets the per-head statistics layout: the
 * cache still holds n slots, slot i of KV group g in layer l being the i-th
 * token that set kept, and ev.slot_pos[i] (and cache->pos[i]) the newest of
 * the sets' positions at slot i; each set's own positions are in the
 * accumulators (scdb_session_accumulators, FORMATS.md "Version 2").  The
 * cache is attended exactly as before.
 *
 *   scdb_arena_new + scdb_get          the prefix, decoded into the arena
 *   scdb_session_open(arena, budget, policy, cadence)
 *   loop:
 *     forward one token into scdb_arena_cache(arena) (slot n, n++),
 *       capturing its attention (model.h: scdb_capture.probs)
 *     scdb_session_step(s, probs, slots, 1, &ev)
 *       folds the statistics into shared memory (no message); every
 *       `cadence` tokens, if n > budget, the broker scores, selects and
 *       compacts the cache in place (one round trip): ev.evicted, and
 *       ev.slot_pos[i] = the original position of slot i
 *   scdb_session_close(&s)
 *
 * Compaction keeps order and each slot's original position (cache->pos),
 * so attention stays causal by position and RoPE'd keys stay valid; the
 * next token's position is the sequence's, not cache->n.  A get into the
 * arena may only append (slot0 == n: SCDB_EINVAL otherwise).  Do not touch the
 * cache while an eviction is in flight (the call is synchronous).  Caveats:
 * a session belongs to its arena; freeing the arena ends it; after a
 * broker restart, or if an eviction timed out, calls return SCDB_ECLOSED
 * (close it; the cache's contents are not defined after a timed-out
 * eviction).  Sessions must be closed before scdb_close or not at all.
 *
 * On a CUDA arena (scdb_arena_new_cuda) the session's accumulators are
 * device memory too, on the arena's GPU (the broker exports them with the
 * cache; the same layout), and the whole loop stays on the device:
 *   - probs given to scdb_session_add_stats / _step is a DEVICE pointer
 *     (the forward's attention where it computed it); libscdb folds it with
 *     its own CUDA kernels, launched through the CUDA driver (libcuda.so.1,
 *     dlopen'd like the runtime: $SCDB_LIBCUDA overrides) in the device's
 *     primary context, on the session's stream (scdb_session_set_stream;
 *     default: the legacy default stream), with no copy to the host and no
 *     message.
 *   - an eviction (scdb_session_evict, or _step on its cadence) first
 *     synchronises that stream, then the broker scores, selects and
 *     compacts on its GPU and synchronises before it replies.  Work that
 *     writes the cache on other streams must be complete before an
 *     eviction (as for the host: do not touch the cache while one runs).
 *   - fold only through scdb_session_add_stats: libscdb keeps the
 *     accumulators' slot count itself (reading it back from the device
 *     would cost a round trip per step); scdb_session_accumulators returns
 *     the device pointer, for reading.
 *   - a libscdb built without nvcc has no kernels: add_stats fails with
 *     SCDB_EUNSUPPORTED (the session opens; evictions work on what was
 *     folded, i.e. nothing). */

typedef struct scdb_session scdb_session;

typedef struct scdb_session_opts {
    uint32_t budget;               /* slots to keep (1 .. arena capacity)   */
    const char *policy;            /* NULL: "streaming"                     */
    uint32_t cadence;              /* scdb_session_step evicts every this
                                      many appended tokens; 0: only
                                      scdb_session_evict                     */
    int n_heads;                   /* our model's query heads               */
    int window;                    /* SnapKV observation window; 0: 32      */
} scdb_session_opts;

typedef struct scdb_session_info {
    uint64_t id;
    uint32_t budget, cadence;
    uint32_t sinks, recent;        /* slots the policy always keeps         */
    uint64_t stats_bytes;          /* shared accumulators                   */
    int cuda;                      /* 1: they are device memory (a CUDA
                                      arena's session)                      */
} scdb_session_info;

typedef struct scdb_session_evict_result {
    int evicted;                   /* 1: slots were removed                 */
    uint32_t n_before, n_kept;     /* live slots before / after             */
    const int32_t *slot_pos;       /* [n_kept]: slot -> original position;
                                      valid until the next session call     */
    uint64_t evict_ns;             /* broker time in the policy            */
} scdb_session_evict_result;

/* Open a live session on arena a (one per arena).  Errors: SCDB_ENOTFOUND
 * (unknown policy: the message lists the broker's), SCDB_ERANGE (budget 0
 * or over the arena's capacity), SCDB_ESHAPE (n_heads not the model's),
 * SCDB_EBUSY (the arena has a session), SCDB_EFULL (arena limits: the
 * statistics take one; or the broker's max_sessions_per_client),
 * SCDB_ECLOSED (arena from before a restart),
 * common ones. */
scdb_err scdb_session_open(scdb_arena *a, const scdb_session_opts *o, scdb_session **out);
const scdb_session_info *scdb_session_get_info(const scdb_session *s);

/* Fold the statistics of the n_new newest cache slots (just appended by a
 * forward) into the shared accumulators: probs is that forward's attention
 * (on a CUDA arena: in device memory, see above)
 * [n_layers][n_heads][n_new][probs_slots] (probs_slots >= cache n).  Slots
 * appended before them without statistics (a get) are recorded first with
 * no attention.  probs NULL with n_new 0 records only those.  No message.
 * Errors: SCDB_EINVAL (more new slots than the cache grew by, probs_slots
 * too small), SCDB_ECLOSED. */
scdb_err scdb_session_add_stats(scdb_session *s, const float *probs, int probs_slots, int n_new);

/* add_stats, then, if `cadence` tokens were appended since the last
 * eviction and the cache holds more than the budget, scdb_session_evict(s,
 * 0, out).  out (may be NULL) is zeroed when no eviction ran. */
scdb_err scdb_session_step(scdb_session *s, const float *probs, int probs_slots, int n_new,
                           scdb_session_evict_result *out);

/* Evict down to budget (0: the session's) now: the broker scores, selects
 * and compacts the cache and the accumulators in place; the cache's n
 * becomes out->n_kept.  Errors: SCDB_EMISMATCH (statistics out of step with
 * the cache), SCDB_EFORMAT (the shared accumulators were overwritten),
 * SCDB_EBUSY (a get into the arena is in progress), SCDB_ERANGE, common. */
scdb_err scdb_session_evict(scdb_session *s, uint32_t budget, scdb_session_evict_result *out);

/* The shared accumulators (layout: schema/FORMATS.md, "Eviction policy
 * file and feature accumulators"), for a process that computes the
 * statistics with its own kernels instead of scdb_session_add_stats; bytes
 * (may be NULL) gets the size.  The broker checks them at every eviction. */
void *scdb_session_accumulators(scdb_session *s, size_t *bytes);

/* The CUDA stream (a cudaStream_t / CUstream of the arena's device) the
 * folds of a CUDA arena's session run on; NULL: the legacy default stream.
 * SCDB_EINVAL for a session on a host arena. */
scdb_err scdb_session_set_stream(scdb_session *s, void *cuda_stream);

/* End the session (the arena stays).  NULLs *s; accepts NULL. */
void scdb_session_close(scdb_session **s);

#define SCDB_STAT_MAX_OPS 16

typedef struct scdb_stat {
    /* store */
    uint64_t blocks, disk_bytes, disk_capacity_bytes, hot_blocks, hot_bytes,
        hot_capacity_bytes, pinned_blocks, lookups, lookup_hit_blocks, lookup_miss_blocks,
        gets, get_hot_hits, get_disk_hits, get_misses, puts, put_existing, evictions,
        checksum_failures;
    /* broker */
    uint64_t clients, arenas, arena_bytes, sessions, inflight, requests, errors,
        reclaimed_clients, reclaimed_arenas, reclaimed_sessions, broker_instance;
    uint64_t stale_tokens;         /* requests with a token from before a
                                      broker restart or a reclaim (answered
                                      SCDB_ECLOSED, libscdb registers again):
                                      not in errors                         */
    uint64_t reloads, reload_failures, registry_generation; /* SIGHUP       */
    uint64_t reported_index_lookups; /* clients' index lookups (heartbeats) */
    uint64_t hot_evictions;
    double uptime_s;
    uint32_t workers, block_tokens;
    /* remote tier (all 0 without one; broker.h, REMOTE TIER) */
    int remote, remote_up;
    uint64_t remote_probes, remote_probe_hit_blocks, remote_fetches, remote_hits,
        remote_misses, remote_bytes_read, remote_invalid, remote_errors, remote_writes,
        remote_bytes_written, remote_write_errors, remote_queue_drops, remote_pending,
        remote_inserted, remote_state_changes, remote_replace_records, remote_refreshed,
        remote_replace_log_resets;
    int n_ops;
    struct {
        char op[16];
        uint64_t count, errors, total_ns, max_ns;
    } ops[SCDB_STAT_MAX_OPS];
    /* this handle (not the broker): how its scdb_lookup calls were answered */
    uint64_t index_lookups;        /* from the shared-memory lookup index   */
    uint64_t request_lookups;      /* by a request to the broker            */
    uint64_t index_fallbacks;      /* index busy or retired: request instead */
    uint64_t remote_lookups;       /* index answers that stopped short and
                                      asked the broker's remote tier       */
    scdb_err index_error;          /* SCDB_OK while an index is mapped; else
                                      why not: SCDB_EUNSUPPORTED (none
                                      offered or turned off), or the error
                                      that refused it (SCDB_EFORMAT,
                                      SCDB_ETRUNC, SCDB_EMISMATCH, ...)     */
} scdb_stat;

/* Broker and store counters (works before scdb_register too). */
scdb_err scdb_stats(scdb *h, scdb_stat *out);

#ifdef __cplusplus
}
#endif

#endif /* SCDB_H */
