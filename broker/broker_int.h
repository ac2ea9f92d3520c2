/* broker_int.h — the broker's internal structures (see broker.h for the
 * design).  Everything here except the job queues is owned by the main
 * thread. */
#ifndef SCDB_BROKER_INT_H
#define SCDB_BROKER_INT_H

#include <pthread.h>
#include <stdint.h>
#include <zmq.h>

#include "broker.h"
#include "evict.h"
#include "fd_pass.h"
#include "lookup_index.h"
#include "remote_tier.h"
#include "scdb.pb-c.h"
#include "wire.h"

/* Request kinds, for dispatch and per-op statistics. */
typedef enum bk_op {
    OP_INVALID = 0, OP_HELLO, OP_PING, OP_HEARTBEAT, OP_PUT, OP_LOOKUP, OP_GET, OP_DELETE,
    OP_STATS, OP_ARENA_CREATE, OP_ARENA_MAPPED, OP_ARENA_FREE, OP_GOODBYE, OP_SESSION_OPEN,
    OP_SESSION_EVICT, OP_SESSION_CLOSE, OP_PUT_STATES, OP_COUNT,
    /* internal writer jobs (no request, no reply, not counted) */
    BK_JOB_REMOTE_INSERT, BK_JOB_REMOTE_REFRESH
} bk_op;

extern const char *const bk_op_names[OP_COUNT];

typedef struct bk_pair {
    const scdb_broker_codebook *cb;
    const scdb_broker_model *consumer;
    scdb_decoder dec;
    scdb_recompute fidelity;    /* consumers' recompute default: the config's
                                   `fidelity`, else the pair's, else none */
    const char *fidelity_source; /* "config", "pair" or ""                */
} bk_pair;

struct bk_policy;
typedef struct bk_trimmer bk_trimmer;   /* heap_trim.c */

/* What a configuration loads (registry.c): models, codebooks, pairs and
 * policies, pointing only into themselves.  A SIGHUP reload (reload.c)
 * builds a new one beside the current and swaps it in; whoever keeps
 * pointers into one holds a reference — the broker on its current one, a
 * client on the one it registered with (or moved to), a session on its
 * policy's, a job on what it decodes or encodes with — so an old set is
 * freed when its last client, session and job let go.  refs: main thread. */
typedef struct bk_registry {
    scdb_broker_model *models;
    int n_models;
    scdb_broker_codebook *codebooks;
    int n_codebooks;
    bk_pair *pairs;
    int n_pairs;
    struct bk_policy *policies;
    int n_policies;
    uint64_t generation;        /* 1 at start, +1 per successful reload     */
    int refs;
    bk_trimmer *trim;           /* the broker's: trims the heap after the
                                   last unref frees this (NULL: inline)    */
} bk_registry;

/* A named eviction policy (registry.c): the heuristics plus [policy NAME]. */
typedef struct bk_policy {
    char name[SCDB_BROKER_NAME_MAX];
    scdb_evict_policy *policy;
} bk_policy;

/* What a shared-memory object holds. */
typedef enum bk_arena_kind {
    BK_ARENA_KV = 0,            /* arena header + one KV cache              */
    BK_ARENA_SESSION = 1,       /* a live session's feature accumulators    */
    BK_ARENA_STATES = 2,        /* header + producer states (put_states)    */
} bk_arena_kind;

struct bk_session;

/* A shared-memory arena.  refs: one for its owner's list plus one per job
 * using it; unmapped when the last goes. */
typedef struct bk_arena {
    uint64_t id;
    bk_arena_kind kind;
    uint8_t ticket[SCDB_FD_TICKET_BYTES]; /* what the owner fetches the memfd
                                   by over the fd socket (fd_pass.h)        */
    int linked;                 /* ticket registered (unconfirmed)         */
    void *map;
    size_t size;
    uint32_t capacity;          /* slots (KV) or token rows (states)       */
    scdb_arena_header *hdr;
    scdb_kv_cache *cache;       /* view at map + SCDB_ARENA_HEADER_BYTES,
                                   or over dev (CUDA IPC arenas)           */
    void *dev;                  /* CUDA IPC arena: the cache's device
                                   allocation (pos, K, V); a CUDA session's
                                   statistics: the accumulators'; NULL
                                   otherwise                               */
    void *dev_scratch;          /* a CUDA session's statistics: the
                                   eviction's private device scratch (never
                                   exported: scores, keep list, features) */
    size_t dev_bytes;           /* its size, counted in the arena limits   */
    uint8_t ipc_handle[SCDB_CUDA_IPC_HANDLE_BYTES];
    char pci_bus_id[64];
    int refs;
    int busy;                   /* a get or an eviction is writing into it */
    struct bk_session *session; /* KV arena: its live session, if any      */
    struct bk_arena *next;      /* owner's list                            */
} bk_arena;

typedef struct bk_client {
    uint64_t token;
    bk_registry *reg;           /* referenced: model, cb, pair live there  */
    char name[64];
    char label[96];             /* for log lines: "NAME (pid N)" or "pid N" */
    uint32_t pid;
    int role;                   /* SCDB__ROLE__PRODUCER / CONSUMER          */
    const scdb_broker_model *model;
    const scdb_broker_codebook *cb;
    const bk_pair *pair;        /* decoder into model (NULL: none)         */
    char weights_fp[33];        /* the weights it registered with ("": not
                                   told; a reload keeps it off pairs and
                                   codebooks for other weights)            */
    double last_seen;
    bk_arena *arenas;
    uint32_t n_arenas;
    uint64_t arena_bytes;
    struct bk_session *sessions;
    uint32_t n_sessions;
    uint64_t rep_index_lookups, rep_index_fallbacks; /* its last report    */
    int inflight;               /* its jobs queued or running              */
    struct bk_client *next;     /* hash chain                              */
} bk_client;

/* A live session (sessions.c): a client's KV arena kept within `budget`
 * slots by `policy`, with its feature accumulators in a second
 * shared-memory object (stats, in the owner's arena list).  geom is the
 * broker's private copy of the accumulator header as created: the client
 * can write the shared copy, so every eviction checks it against geom. */
typedef struct bk_session {
    uint64_t id;
    bk_arena *kv;               /* referenced; kv->session == this          */
    bk_arena *stats;            /* referenced                               */
    const bk_policy *policy;
    scdb_evict_acc geom;
    uint32_t budget, cadence;
    uint64_t evictions, evicted_slots;
    bk_registry *reg;           /* referenced: policy lives there          */
    struct bk_session *next;    /* owner's list                             */
} bk_session;

/* Work handed to the worker pool (get) or the writer (put, delete). */
typedef struct bk_job {
    bk_op op;
    int sock;                   /* router index the request came in on     */
    zmq_msg_t ident;
    uint64_t req_id;
    uint64_t t0_ns;
    Scdb__Request *req;         /* owned; freed by the main thread         */
    zmq_msg_t *frames;          /* payload frames (put)                    */
    int n_frames;
    const scdb_broker_codebook *cb;
    const bk_pair *pair;
    bk_arena *arena;            /* get, evict: referenced                  */
    bk_arena *stats;            /* evict: the session's stats, referenced  */
    const bk_policy *policy;    /* evict                                   */
    scdb_evict_acc geom;        /* evict: accumulator geometry             */
    uint32_t budget;            /* evict                                   */
    uint64_t session, client;   /* evict: for the counters at completion   */
    uint32_t n_before, n_kept;  /* evict: the result                       */
    bk_registry *reg;           /* referenced: cb, pair, policy live there */
    uint64_t work_ns;           /* get: decode time; evict: policy time    */
    uint8_t *reply;             /* packed Reply, set by the thread         */
    size_t reply_len;
    scdb_err status;
    scdb_remote_block *rblocks; /* BK_JOB_REMOTE_INSERT: fetched blocks to
                                   keep locally (owned; made by a worker,
                                   so no registry reference, no cb)        */
    size_t n_rblocks;
    scdb_key *rkeys;            /* BK_JOB_REMOTE_REFRESH: blocks another
                                   broker replaced (owned)                 */
    size_t n_rkeys;
    int attempts;               /* ... tries so far (blocks being read)    */
    /* job_queue.c: its lane, its client's FIFO, and the stage clock (ns):
     * t0_ns received, t_queued_ns pushed, t_start_ns taken by a thread,
     * t_end_ns finished there (metrics.c's stage histograms) */
    int lane;
    uint64_t flow;              /* the client's token (0: internal job)    */
    struct bk_job *flow_next;   /* its client's next job in this lane      */
    struct bk_job *flow_tail;   /* in a flow's first job: its last one     */
    struct bk_job *next;        /* the lane's ring of flows (first jobs)   */
    uint64_t t_queued_ns, t_start_ns, t_end_ns;
} bk_job;

/* A job queue (job_queue.c): lanes, each a ring of per-client FIFOs.
 *
 *   lane READ   get, lookup (workers); put, put_states, delete (writer)
 *   lane BACK   session_evict (workers); remote-tier inserts (writer)
 *
 *   lane READ:  [client 7: g g g g] -> [client 3: g] -> [client 9: g g]
 *                 ^ next pop takes client 7's first get, then moves
 *                   client 7 (if it has more) behind client 9
 *
 * A pop takes the first job of the lane's first client and moves that
 * client to the back of the ring: round robin over clients, one job per
 * turn, so a client's burst delays another's job by at most one job of
 * its own.  With both lanes non-empty, pops alternate between them: a get
 * waits behind at most one eviction per thread, and evictions never
 * starve.  A client's own jobs keep their order within a lane.
 *
 * A thread may also pop from one lane only (bk_queue_pop_lane): the
 * broker's eviction threads take session evictions and nothing else, so
 * an eviction (a few hundred us, on a decoding client's critical path)
 * never waits for the workers' decodes (tens of ms).  Such threads wait on
 * their lane's own condition variable; a push wakes one of them when one
 * is idle and not already woken, else a thread that takes any lane, so a
 * job is never left queued while a thread that could run it sleeps. */
#define BK_LANE_READ 0
#define BK_LANE_BACK 1
#define BK_LANES 2
typedef struct bk_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* threads that take any lane wait here    */
    pthread_cond_t lane_cv[BK_LANES]; /* ... those of one lane, here       */
    struct { bk_job *head, *tail; } lane[BK_LANES];
    int idle_lane[BK_LANES];    /* one-lane threads waiting on lane_cv     */
    int woken_lane[BK_LANES];   /* ... signalled, not yet awake            */
    int next_lane;              /* where the next pop looks first          */
    int len;                    /* queued, not yet taken (atomic reads)    */
    int stop;
} bk_queue;

typedef struct bk_opstat {
    uint64_t count, errors, total_ns, max_ns;
} bk_opstat;

/* The stages a job's time is split into (metrics.c): dispatch (received
 * -> queued, main thread), queue (waiting for a thread), service (on the
 * thread), hand-off (finished -> back on the main thread, reply sent),
 * total (received -> reply sent).  Per job op: get, lookup, put,
 * put_states, delete, session_evict. */
enum { BK_STAGE_DISPATCH, BK_STAGE_QUEUE, BK_STAGE_SERVICE, BK_STAGE_HANDOFF, BK_STAGE_TOTAL,
       BK_N_STAGES };
#define BK_N_STAGE_OPS 6
#define BK_STAGE_BUCKETS 57     /* 1 us .. 10 s, 8 per decade (metrics.c) */
typedef struct bk_stage_hist {
    uint64_t n[BK_STAGE_BUCKETS + 1];
    uint64_t count, sum_ns;
} bk_stage_hist;

#define BK_BUCKETS 1024
#define BK_MAX_ROUTERS 2

/* A latency histogram (metrics.c): per-bucket counts, not cumulative. */
#define BK_HIST_BUCKETS 20
typedef struct bk_hist {
    uint64_t n[BK_HIST_BUCKETS + 1];   /* the last one: above every bound  */
    uint64_t count, sum_ns;
} bk_hist;

/* Loads the configuration again for a reload (serve.c gives the one that
 * re-reads its --config file and flags). */
typedef scdb_err (*bk_reload_fn)(void *ctx, scdb_broker_config *out, char *errbuf,
                                 size_t errlen);
struct bk_metrics;
struct bk_reload;

struct scdb_broker {
    scdb_broker_config cfg;     /* scalars only (arrays not kept)           */
    scdb_device device;         /* cfg.device resolved at start             */
    int cuda_ordinal;           /* the CUDA device arenas live on (0)       */
    int hot_on_device;          /* the store's hot tier is CUDA memory      */
    bk_registry *reg;           /* the current one (referenced)            */
    bk_trimmer *trim;           /* heap_trim.c: malloc_trim off this thread */

    scdb_store *store;
    uint32_t block_tokens;
    int lock_fd;                /* flock on data_dir/broker.lock           */

    void *zctx;
    void *router[BK_MAX_ROUTERS];
    int n_router;
    void *done;                 /* PULL: finished jobs                     */
    void *zap;                  /* REP on inproc://zeromq.zap.01 (tcp with
                                   curve_allow_file): CURVE client allow-list */
    uint8_t (*allow)[32];       /* allowed client public keys               */
    int n_allow;
    char ipc_path[256];         /* socket file of the ipc endpoint         */
    int sigpipe[2];

    pthread_t *workers;
    int n_workers;
    pthread_t *evictors;        /* evict_threads: session evictions only   */
    int n_evictors;
    pthread_t writer;
    int writer_started;
    bk_queue jobs, writes;

    bk_client *buckets[BK_BUCKETS];
    uint64_t n_clients, n_arenas, arena_bytes;
    uint64_t next_arena_id;
    uint64_t n_sessions, next_session_id;
    uint64_t instance;
    int inflight;
    volatile int stopping;      /* set by the signal handler / stop()       */
    int draining;
    double t_start, next_sweep;

    uint64_t requests, errors, reclaimed_clients, reclaimed_arenas, reclaimed_sessions;
    bk_opstat ops[OP_COUNT];
    /* requests that named a token this broker does not know (it restarted,
     * or reclaimed the client): answered SCDB_ECLOSED so libscdb registers
     * again, counted here and not in errors */
    uint64_t stale_tokens;

    /* metrics.c: the counters only it reads (main thread), and its HTTP
     * endpoint (NULL: metrics_listen unset) */
    uint64_t status_count[OP_COUNT][SCDB_ERR_COUNT];
    bk_hist h_get, h_decode, h_evict;
    bk_stage_hist h_stage[BK_N_STAGES][BK_N_STAGE_OPS];
    uint64_t index_lookups, index_fallbacks; /* reported by clients          */
    struct bk_metrics *metrics;

    /* reload.c: SIGHUP */
    bk_reload_fn reload_fn;
    void *reload_ctx;
    struct bk_reload *reload;   /* a reload in progress (NULL: none)       */
    int reload_again;           /* another SIGHUP came during it           */
    uint64_t reloads, reload_failures;

    /* fdpass.c: the fd socket, its tickets and its thread */
    pthread_mutex_t fd_mu;
    int fd_mu_init;
    struct bk_fdent *fds;       /* ticket -> fd (the table owns the fds)    */
    int n_fds, cap_fds;
    int fd_listen;              /* -1: not listening                        */
    int fd_wake[2];             /* stops the thread                         */
    pthread_t fd_thread;
    int fd_started;
    char fd_path[300];          /* the socket file (unlinked at teardown)   */

    /* lookup_publish.c: the shared-memory lookup index.  lix_mu guards lix
     * (taken inside the store's lock by on_visible, alone by hello). */
    pthread_mutex_t lix_mu;
    int lix_mu_init;
    scdb_lix *lix;              /* NULL: not published                     */
    scdb_lix *lix_prev;         /* retired, its liveness lock still held by
                                   the loop's thread: unmapped at its tick */
    int lix_no_hold;            /* the liveness lock failed: not tried again */
    uint64_t lix_tick_ns;       /* last liveness refresh (main thread)      */

    /* remote.c: the remote tier (NULL: none); thread-safe */
    scdb_remote *remote;
    uint64_t remote_inserted;   /* fetched blocks kept locally (atomic)    */
    uint64_t remote_refreshed;  /* local copies given another broker's
                                   replaced value, or dropped (atomic)     */
};

/* The broker's files, bottom to top: each calls only files listed before
 * it (registry.c and lookup_publish.c stand apart, called by the handlers
 * and broker.c):
 *
 *   reply.c     op names, packing and sending replies, per-op counters,
 *               finishing a job
 *   fdpass.c    the fd socket: tickets -> memfds, handed over by SCM_RIGHTS
 *   arena.c     shared-memory arenas in a client's list
 *   sessions.c  live sessions over a client's arenas
 *   clients.c   the client table; dropping a client closes its sessions
 *               and frees its arenas
 *   job_queue.c the job queues: lanes of per-client FIFOs, round robin
 *   jobs.c      jobs, the worker pool and the writer
 *   handlers.c  one request: checks, inline answers, jobs
 *   listen.c    the sockets: ipc, tcp with CURVE, the ZAP allow-list
 *   broker.c    lifecycle and the event loop
 *
 * remote.c stands apart too (the remote tier: called by jobs.c, handlers.c
 * and broker.c, it calls only the store and store/remote_tier.h), and
 * heap_trim.c below them all (the trimmer thread: called by registry.c and
 * broker.c, it calls nothing of the broker). */

/* heap_trim.c: malloc_trim(0) on a thread of its own ("scdb-trim"), so
 * that giving a freed registry's pages back never stalls the event loop.
 * new: SCDB_ENOMEM, SCDB_ESYS.  request: wakes it (a request during a
 * pass makes one more pass; t NULL: trims inline); any thread.  count: the
 * passes made so far, *last_ns the last one's duration.  free: finishes a
 * pass asked for, joins, NULLs *t; accepts NULL. */
scdb_err bk_trimmer_new(bk_trimmer **out);
void bk_trimmer_request(bk_trimmer *t);
uint64_t bk_trimmer_count(bk_trimmer *t, uint64_t *last_ns);
void bk_trimmer_free(bk_trimmer **t);

/* registry.c */
/* Load every model, codebook, pair and policy of c into a new registry
 * (refs 1).  Nothing else is touched: a reload runs it on a thread of its
 * own.  Errors as scdb_broker_new's configuration errors; errbuf says why. */
scdb_err bk_registry_new(const scdb_broker_config *c, bk_registry **out, char *errbuf,
                         size_t errlen);
bk_registry *bk_registry_ref(bk_registry *r);
/* Drop a reference; the last one frees it (decoders, codebooks, policies).
 * Accepts NULL. */
void bk_registry_unref(bk_registry *r);
const scdb_broker_model *bk_reg_model(const bk_registry *r, const char *name);
const scdb_broker_codebook *bk_reg_codebook(const bk_registry *r, const char *name);
const bk_pair *bk_reg_pair(const bk_registry *r, const scdb_broker_codebook *cb,
                           const scdb_broker_model *consumer);
const struct bk_policy *bk_reg_policy(const bk_registry *r, const char *name);
/* The same in the broker's current registry. */
const scdb_broker_model *bk_model_find(const scdb_broker *b, const char *name);
const scdb_broker_codebook *bk_codebook_find(const scdb_broker *b, const char *name);
const bk_pair *bk_pair_find(const scdb_broker *b, const scdb_broker_codebook *cb,
                            const scdb_broker_model *consumer);
const bk_policy *bk_policy_find(const scdb_broker *b, const char *name);

/* reply.c */
/* Pack a reply (status, message, optional body) into a malloc'd buffer. */
scdb_err bk_pack_reply(uint64_t id, scdb_err status, const char *msg, Scdb__Reply *body_in,
                       uint8_t **out, size_t *len);
/* Send packed reply bytes to the peer `ident` on router `sock` (a gone peer:
 * dropped). */
void bk_send_reply(scdb_broker *b, int sock, zmq_msg_t *ident, const void *buf, size_t len);
/* Send a reply with only a status and a short message, packed without
 * allocating: the answer when a reply cannot be packed for want of memory,
 * so that no request goes unanswered. */
void bk_send_status(scdb_broker *b, int sock, zmq_msg_t *ident, uint64_t id, scdb_err status,
                    const char *msg);
/* Count one request of kind op that took since t0 (ns) and ended in status. */
void bk_account(scdb_broker *b, bk_op op, scdb_err status, uint64_t t0);
/* Count a request answered SCDB_ECLOSED for an unknown token apart from
 * the errors (after bk_account, which counted it as one). */
void bk_account_stale(scdb_broker *b, bk_op op);
/* A thread's end of a job: its status and packed reply (printf message). */
void bk_job_finish(bk_job *j, scdb_err status, Scdb__Reply *body, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* fdpass.c: the fd socket beside the ipc one (schema/fd_pass.h).  Tickets
 * are added and removed from any thread; the socket's thread answers. */
/* bk_fd_init: the table (first thing at start); bk_fd_start: the socket
 * and its thread (once the ipc socket is bound); bk_fd_stop: both, last. */
void bk_fd_init(scdb_broker *b);
scdb_err bk_fd_start(scdb_broker *b, char *errbuf, size_t errlen);
void bk_fd_stop(scdb_broker *b);
/* Register fd (the table takes it over and closes it at removal) under a
 * fresh random ticket.  SCDB_ENOMEM, SCDB_ESYS (no randomness). */
scdb_err bk_fd_add(scdb_broker *b, int fd, uint8_t ticket[SCDB_FD_TICKET_BYTES]);
/* Register fd under a ticket the caller chose (the lookup index's). */
scdb_err bk_fd_add_as(scdb_broker *b, int fd, const uint8_t ticket[SCDB_FD_TICKET_BYTES]);
/* Forget a ticket and close its fd (no-op if unknown). */
void bk_fd_remove(scdb_broker *b, const uint8_t ticket[SCDB_FD_TICKET_BYTES]);
/* Apply socket_mode and socket_group to a socket file. */
scdb_err bk_socket_perms(const scdb_broker_config *c, const char *path, char *errbuf,
                         size_t errlen);

/* arena.c (main thread) */
scdb_err bk_arena_create(scdb_broker *b, bk_client *c, uint32_t capacity, bk_arena **out,
                         char *errbuf, size_t errlen);
/* A CUDA IPC KV arena: the header in shm (kind SCDB_ARENA_KIND_KV_CUDA),
 * the cache zeroed in device memory with its IPC handle.  SCDB_EUNSUPPORTED
 * (the broker is not on a CUDA device, or the client's decoder cannot write
 * device memory), SCDB_EDEVICE, and bk_arena_create's errors. */
scdb_err bk_cuda_arena_create(scdb_broker *b, bk_client *c, uint32_t capacity, bk_arena **out,
                              char *errbuf, size_t errlen);
/* A CUDA session's statistics (kind BK_ARENA_SESSION, no shm object): the
 * accumulators of this shape laid out and zeroed in device memory with
 * their IPC handle (dev, dev_bytes), and the eviction's scratch
 * (dev_scratch, counted in dev_bytes); *hdr_out gets the header as laid.  SCDB_EUNSUPPORTED (the broker is
 * not on a CUDA device), SCDB_EDEVICE, SCDB_ESHAPE, and the arena limits'
 * SCDB_EFULL / SCDB_ETOOBIG. */
scdb_err bk_cuda_stats_create(scdb_broker *b, bk_client *c, const scdb_evict_acc_shape *shape,
                              scdb_evict_acc *hdr_out, bk_arena **out, char *errbuf,
                              size_t errlen);
/* A producer-states arena: the header (kind SCDB_ARENA_KIND_STATES) then
 * room for f32 [cb->states_layers][capacity][cb->states_dim]. */
scdb_err bk_states_arena_create(scdb_broker *b, bk_client *c, uint32_t capacity,
                                bk_arena **out, char *errbuf, size_t errlen);
/* Fill n floats with NaN: a states arena's rows until the producer writes
 * them, and again once a put_states has consumed them. */
void bk_states_poison(float *x, size_t n);
/* A plain shared-memory object of `size` bytes (zeroed) in c's arena list,
 * for the live sessions' accumulators: no header, no cache. */
scdb_err bk_shm_create(scdb_broker *b, bk_client *c, size_t size, bk_arena_kind kind,
                       bk_arena **out, char *errbuf, size_t errlen);
bk_arena *bk_arena_find(bk_client *c, uint64_t id);
/* Forget its ticket and close the memfd (the client confirmed its mapping). */
void bk_arena_unlink(scdb_broker *b, bk_arena *a);
/* Remove from its owner's list and drop the owner's reference (its session,
 * if any, must be closed first: bk_client_free_arena). */
void bk_arena_remove(scdb_broker *b, bk_client *c, bk_arena *a);
void bk_arena_unref(scdb_broker *b, bk_arena *a);

/* sessions.c: live sessions (main thread, except bk_session_run_evict,
 * which a worker runs on a job holding references on both arenas). */
void bk_on_session_open(scdb_broker *b, bk_client *c, const Scdb__SessionOpen *so,
                        Scdb__Reply *r, Scdb__SessionOpenReply *sr, scdb_err *status,
                        char *msg, size_t msglen);
/* Check an eviction request and fill the job with what the worker needs
 * (references on both arenas, the kv arena marked busy).  On error msg
 * says why and the job is untouched. */
scdb_err bk_session_evict_prepare(scdb_broker *b, bk_client *c, const Scdb__SessionEvict *se,
                                  bk_job *j, char *msg, size_t msglen);
/* Close session `id`, or with id 0 the session on KV arena `arena`. */
scdb_err bk_session_close_id(scdb_broker *b, bk_client *c, uint64_t id, uint64_t arena,
                             char *msg, size_t msglen);
/* Close: release both arenas (the stats one leaves c's list), free. */
void bk_session_close(scdb_broker *b, bk_client *c, bk_session *s);
void bk_session_run_evict(scdb_broker *b, bk_job *j);
/* Main thread, when an evict job comes back: drop the job's reference on
 * the statistics and count the eviction in the session of client c (NULL:
 * the client is gone). */
void bk_session_evict_done(scdb_broker *b, bk_client *c, bk_job *j);

/* clients.c: client table, reclaim (main thread). */
bk_client *bk_client_find(scdb_broker *b, uint64_t token);
scdb_err bk_client_new(scdb_broker *b, bk_client **out);
/* A client's name for log lines: "NAME (pid N)", or "pid N" when that is
 * the name (libscdb's default). */
void bk_client_label(const char *name, uint32_t pid, char *out, size_t len);
void bk_client_drop(scdb_broker *b, bk_client *c, const char *why);
/* Reclaim clients silent for longer than the heartbeat timeout. */
void bk_clients_sweep(scdb_broker *b, double now);
void bk_clients_drop_all(scdb_broker *b);
/* Free one of c's arenas, closing its live session first. */
void bk_client_free_arena(scdb_broker *b, bk_client *c, bk_arena *a);

/* jobs.c */
bk_job *bk_job_new(int sock, zmq_msg_t *ident, uint64_t req_id, uint64_t t0_ns,
                   Scdb__Request *req, bk_op op);
void bk_job_free(bk_job *j);
/* A finished job back on the main thread: send its reply, release what it
 * holds, free it. */
void bk_job_done(scdb_broker *b, bk_job *j);
/* The writer and cfg.workers workers, placed as worker_cpus / worker_nice
 * say, BLAS single-threaded (jobs.c, THREADING MODEL).  SCDB_EINVAL (a bad
 * worker_cpus), SCDB_ESYS (a thread cannot start or be placed: errbuf
 * says why), SCDB_ENOMEM. */
scdb_err bk_threads_start(scdb_broker *b, char *errbuf, size_t errlen);
void bk_threads_stop(scdb_broker *b);

/* job_queue.c: the lanes (bk_queue above).  Init, then push from the main
 * thread, pop from the threads; stop wakes every thread: pop returns the
 * jobs left, then NULL. */
void bk_queue_init(bk_queue *q);
void bk_queue_destroy(bk_queue *q);
/* Queue j in its op's lane, behind its client's earlier jobs there (the
 * client: j->req's, or j->client for an eviction; 0 for internal jobs);
 * stamps t_queued_ns. */
void bk_queue_push(bk_queue *q, bk_job *j);
/* Next job (stamps t_start_ns), or NULL once stopped and empty. */
bk_job *bk_queue_pop(bk_queue *q);
/* The same from lane `lane` only (the eviction threads). */
bk_job *bk_queue_pop_lane(bk_queue *q, int lane);
void bk_queue_stop(bk_queue *q);
/* The lane of a job of kind op. */
int bk_job_lane(bk_op op);

/* handlers.c: one request (frames[0] = identity, frames[1] = request). */
void bk_handle(scdb_broker *b, int sock, zmq_msg_t *frames, int n_frames, int too_big,
               uint64_t total_bytes);

/* listen.c: check the endpoints of a config; bind the ipc endpoint (and the
 * tcp one with CURVE and, with curve_allow_file, the ZAP handler); answer
 * one ZAP request. */
scdb_err bk_check_endpoints(const scdb_broker_config *c, char *errbuf, size_t errlen);
scdb_err bk_listen(scdb_broker *b, char *errbuf, size_t errlen);
/* SCDB_EBUSY if a broker answers on the ipc endpoint already: checked
 * before anything (the data dir) is created. */
scdb_err bk_check_endpoint_free(const scdb_broker_config *c, char *errbuf, size_t errlen);
void bk_zap_answer(scdb_broker *b);

/* lookup_publish.c */
/* Create the index and fill it from the store (after the store opens,
 * before any thread starts).  A failure to create it only disables it;
 * SCDB_ESYS if its name cannot be recorded. */
scdb_err bk_lix_start(scdb_broker *b, char *errbuf, size_t errlen);
/* The store's on_visible callback (ctx = the broker). */
void bk_lix_on_visible(void *ctx, const scdb_key *k, int visible);
/* Refresh the index's liveness word if half its period has passed, hold
 * its liveness lock, unmap one retired elsewhere (main thread, every loop
 * turn: only this thread may hold the lock, lookup_index.h LIVENESS). */
void bk_lix_tick(scdb_broker *b, uint64_t now_ns);
/* The current index name for HelloReply ("" when none). */
void bk_lix_name(scdb_broker *b, char *buf, size_t len);
/* Retire the index (clean shutdown). */
void bk_lix_stop(scdb_broker *b);

/* metrics.c: counters (main thread) and the HTTP endpoint. */
/* Count a finished job in the histograms (get latency, decode, eviction). */
void bk_metrics_job_done(scdb_broker *b, const bk_job *j);
/* Start serving GET /metrics on cfg.metrics_listen (no-op when empty).
 * SCDB_EINVAL (bad address), SCDB_ESYS (bind), SCDB_ENOMEM. */
scdb_err bk_metrics_start(scdb_broker *b, char *errbuf, size_t errlen);
/* Main thread, every loop turn: publish a fresh snapshot if a scrape
 * waits for one (cheap when none does). */
void bk_metrics_poll(scdb_broker *b);
void bk_metrics_stop(scdb_broker *b);
/* A client's lookup counters (heartbeat, goodbye: cumulative per handle)
 * into the broker's totals. */
void bk_metrics_client_report(scdb_broker *b, bk_client *c, uint64_t index_lookups,
                              uint64_t index_fallbacks);

/* notify.c: sd_notify(3) when run by systemd (no-op otherwise). */
void bk_notify(const char *state);

/* reload.c: SIGHUP.  bk_reload_request starts loading the configuration
 * on a thread (or marks another round when one runs); bk_reload_poll, on
 * the main thread every loop turn, applies a finished load. */
void bk_reload_request(scdb_broker *b);
void bk_reload_poll(scdb_broker *b);
/* Wait for a reload in progress and discard it (shutdown). */
void bk_reload_stop(scdb_broker *b);
/* remote.c: the remote tier (REMOTE TIER in broker.h).  Without [remote]
 * b->remote is NULL and every call below does nothing (returns 0). */
/* Open it from the config (before the store); SCDB_OK without [remote].
 * Errors: scdb_remote_open's (SCDB_EINVAL, SCDB_EAUTH, ...), errbuf says. */
scdb_err bk_remote_start(scdb_broker *b, char *errbuf, size_t errlen);
void bk_remote_stop(scdb_broker *b);
/* The store's on_written hook (ctx = the broker): queue the block. */
void bk_remote_on_written(void *ctx, const scdb_block_info *info, const void *payload, int replaced);
/* Start (on 1) or stop (0) following the fleet's replace log: blocks other
 * brokers replaced are refreshed here by writer jobs.  After the threads
 * start; before they stop. */
void bk_remote_watch(scdb_broker *b, int on);
/* The writer's job for keys other brokers replaced or deleted: each block
 * held here gets the cluster's value (or, absent there, is dropped if a
 * leaf: a delete); keys
 * to try again (being read, the cluster failing) into again[*n_again]. */
void bk_remote_refresh(scdb_broker *b, const scdb_key *keys, size_t n, scdb_key *again,
                       size_t *n_again);
/* How many of keys[n_local..n) the cluster holds, as a leading run (one
 * EXISTS round per node); 0 when it is down. */
size_t bk_remote_probe(scdb_broker *b, const scdb_key *keys, size_t n_local, size_t n);
/* Fetch and verify the leading present blocks of keys[n_local..n) of
 * codebook cb (a worker or the writer): *out (malloc'd, free with
 * scdb_remote_blocks_free then free) gets them; returns their count (0:
 * *out NULL).  A slow or failing cluster only shortens the answer. */
size_t bk_remote_fetch(scdb_broker *b, const scdb_broker_codebook *cb, const scdb_key *keys,
                       size_t n_local, size_t n, scdb_remote_block **out);
/* Store fetched blocks of one chain locally (writer thread only): LMDB and
 * the hot tier, from_remote (not written back), under the namespace they
 * were verified in.  Returns how many are stored. */
size_t bk_remote_insert(scdb_broker *b, const scdb_remote_block *blocks, size_t n);
/* A put whose first block's parent is not stored locally (writer): fetch
 * keys[n_local..first) from the remote tier and keep them.  1 if they are
 * all stored now. */
int bk_remote_fill_parents(scdb_broker *b, const scdb_broker_codebook *cb, const scdb_key *keys,
                           size_t n_local, size_t first);
/* Queue a DEL of block key k (an explicit delete; announced on the
 * replace log, so other brokers drop their copies too). */
void bk_remote_del(scdb_broker *b, const scdb_key *k);
/* The remote_* fields of a StatsReply. */
void bk_remote_fill_stats(scdb_broker *b, Scdb__StatsReply *s);

/* decoder_raw.c: the raw kind's entry points (codec_kinds.c). */
scdb_err bk_raw_open_codebook(scdb_broker_codebook *cb, const char *file, scdb_dtype dtype,
                                char *errbuf, size_t errlen);
scdb_err bk_scd_open_codebook(scdb_broker_codebook *cb, const char *file, scdb_dtype dtype,
                                char *errbuf, size_t errlen);
scdb_err bk_scd_new_decoder(const scdb_broker_codebook *cb, const scdb_broker_model *consumer,
                              const char *file, scdb_decoder *out, char *errbuf, size_t errlen);
scdb_err bk_raw_new_decoder(const scdb_broker_codebook *cb, const scdb_broker_model *consumer,
                              const char *file, scdb_decoder *out, char *errbuf,
                              size_t errlen);

#endif /* SCDB_BROKER_INT_H */
