/* libscdb_int.h — libscdb's internal structures (client/scdb.h is the API). */
#ifndef SCDB_LIBSCDB_INT_H
#define SCDB_LIBSCDB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "block_key.h"
#include "fd_pass.h"
#include "kernels.h"      /* the cache layout and f16 conversions only */
#include "lookup_index.h"
#include "scdb.h"
#include "scdb.pb-c.h"
#include "wire.h"

struct scdb_arena {
    scdb *h;
    uint64_t id;
    uint32_t gen;                /* handle registration generation          */
    void *map;
    size_t size;
    scdb_arena_header *hdr;
    scdb_kv_cache *cache;        /* KV arenas (CUDA: a view over dev)        */
    void *dev;                   /* CUDA IPC arena: the opened device memory */
    int cuda_device;             /* ... and its device (our numbering)      */
    float *states;               /* states arenas: [layers][n][dim]         */
    uint32_t capacity;
    int states_layers, states_dim;
    scdb_session *session;       /* its live session, if any                */
    struct scdb_arena *next;
};

struct scdb {
    void *zctx;
    void *sock;
    void *mon;                   /* tcp: a monitor on sock (failed CURVE
                                    handshakes), NULL otherwise            */
    unsigned mon_seq;            /* names each monitor's inproc endpoint    */
    int hs_failed;               /* handshakes that failed without detail
                                    since the last one that succeeded      */
    char endpoint[512];
    char fd_path[520];           /* ipc://: the broker's fd socket, else ""   */
    int curve;                   /* tcp: CURVE keys below are set           */
    char server_key[41], public_key[41], secret_key[41];
    int timeout_ms;
    uint64_t next_id;
    _Atomic uint64_t token;      /* read by the heartbeat thread            */
    uint32_t gen;                /* bumped at every successful hello        */
    char name[64];
    char err[512];

    int registered;
    scdb_role role;
    char model[128], codebook[128];
    char weights_fp[33];         /* sent with consumer hellos ("" none)     */
    scdb_info info;
    scdb_recompute recompute_default; /* the hello's (issue 40); none if absent */
    char recompute_source[16];        /* "config", "pair" or ""              */
    int32_t *rc_pos, *rc_tok;         /* scdb_get_recompute's positions and
                                         tokens (valid until the next one)  */
    int *rc_idx, *rc_keep;
    float *rc_scores;
    size_t rc_cap, rc_keep_cap;

    int no_heartbeat;
    int hb_running;
    pthread_t hb;
    int hb_pipe[2];
    _Atomic int hb_interval_ms;
    _Atomic int peer_lost;       /* the heartbeat socket saw the broker's
                                    connection drop (and none since): do
                                    not answer from its lookup index       */
    int broker_gone;             /* the index said its broker is gone (and
                                    no hello since): a lookup asks first
                                    whether anything listens (conn.c)      */

    scdb_arena *arenas;
    scdb_arena *scratch;         /* scdb_get_copy's own arena               */

    /* the broker's lookup index (libscdb.c, "lookup index") */
    int no_index;                /* opts.no_lookup_index / $SCDB_LOOKUP_INDEX=0 */
    scdb_lix *lix;               /* mapped, or NULL: the request path       */
    char lix_name[SCDB_LIX_NAME_MAX]; /* what the last hello named          */
    scdb_ns ns;                  /* our codebook's namespace (hello)        */
    int have_ns;
    scdb_err lix_err;            /* why lix is NULL (SCDB_OK when mapped)   */
    /* updated atomically (the heartbeat thread reports the index ones:
     * cl_lookup_counts) */
    uint64_t n_index_lookups, n_request_lookups, n_index_fallbacks;
    uint64_t n_remote_lookups;   /* requests for a remote remainder         */
};

/* The library's files, bottom to top: each calls only files listed before
 * it.  Internal functions are scdb_cl_* and not exported from libscdb.so
 * (libscdb.map lists what is).
 *
 *   util.c     the handle's error message, the interrupt check, fetching
 *              shared objects, shared argument checks
 *   index.c    the broker's lookup index
 *   conn.c     sockets, requests, hello and re-registration, heartbeats,
 *              connect, register, ping
 *   cuda.c     CUDA IPC handles (libcudart through dlopen)
 *   session.c  live sessions
 *   blocks.c   put, put_states, lookup, delete, stats
 *   raw.c      raw-KV payloads, put of a cache
 *   arena.c    arenas, get, get_copy
 *   recompute.c  scdb_get_recompute (a get, then the tokens to recompute
 *              taken out of the arena)
 *   libscdb.c  scdb_close */

/* conn.c: a HelloReply's fidelity default (NULL: none) into out; what
 * scdb_recompute_check refuses, or policy DEFAULT, is SCDB_EINVAL with why
 * set and out none. */
scdb_err cl_recompute_from_wire(const Scdb__Recompute *w, scdb_recompute *out, char *why,
                                size_t whylen);

/* util.c */
/* Set h->err (printf) and return e. */
scdb_err cl_fail(scdb *h, scdb_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The application's interrupt check (scdb_set_interrupt): whether one is
 * set; whether it asks the calling thread's call to stop now. */
int cl_interrupt_set(void);
int cl_interrupt_asked(void);
/* How a fetch over the fd socket waits: the handle's timeout, stopped by
 * the interrupt check like a request's wait (Caveats, "Signals"). */
void cl_fd_wait(const scdb *h, scdb_fd_wait *w);
/* The memfd of a shared object the broker created (an arena, a session's
 * statistics), fetched by its ticket over the fd socket (schema/fd_pass.h);
 * `what` names it in errors.  SCDB_EUNSUPPORTED (not an ipc:// handle),
 * SCDB_EPROTO (no ticket), scdb_fd_fetch's errors (SCDB_EINTR: the
 * interrupt check stopped the wait). */
scdb_err cl_fetch_fd(scdb *h, const ProtobufCBinaryData *ticket, const char *what,
                          int *fd);
/* SCDB_EINVAL (with a message) unless h is registered. */
scdb_err cl_need_registered(scdb *h);
/* Tokens of a request: within max_tokens, non-negative. */
scdb_err cl_check_tokens(scdb *h, const int32_t *t, size_t n);
/* c has our model's geometry. */
int cl_same_geometry(const scdb *h, const scdb_kv_cache *c);

/* index.c */
/* Map the index `name` (following retired objects to their successors).
 * SCDB_OK whether or not one is mapped now (h->lix_err says why not);
 * SCDB_EINTR (message set) when the interrupt check stopped the fetch. */
scdb_err cl_lix_map(scdb *h, const char *name);
/* After a hello: map the index it named, unless turned off.  As
 * cl_lix_map. */
scdb_err cl_lix_attach(scdb *h, const Scdb__HelloReply *r);
/* Answer a lookup from the index: SCDB_OK with *out filled, an argument
 * error (as the broker would reply), SCDB_EINTR (following a resized index
 * was interrupted), SCDB_ECLOSED (the broker that published it is gone:
 * the connection dropped, the kernel marked its liveness lock's owner
 * dead, or it retired the index with no successor; a request may find a
 * new broker) or SCDB_EBUSY: use the request path. */
scdb_err cl_lix_lookup(scdb *h, const int32_t *tokens, size_t n_tokens,
                            scdb_lookup_result *out);

/* conn.c */
/* One request and its reply, no retry (see cl_request). */
scdb_err cl_call_once(scdb *h, Scdb__Request *req, const void *const *frames,
                           const size_t *lens, int n, Scdb__Reply **rep);
/* Send req (version, id, client filled in) with n payload frames and wait
 * for its reply; re-registers and retries once when the broker no longer
 * knows us.  On return *rep (may be NULL when the call failed before a
 * reply) must be freed with scdb__reply__free_unpacked.  Returns the
 * reply's status (its message in h->err) or a local error. */
scdb_err cl_request(scdb *h, Scdb__Request *req, const void *const *frames,
                         const size_t *lens, int n, Scdb__Reply **rep);
void cl_hb_stop(scdb *h);
/* Whether a broker may answer at h's ipc:// path now: SCDB_OK (something
 * listens, or not an ipc:// endpoint: no telling), SCDB_ECLOSED with a
 * message (no socket file, or nothing listens on it: the broker is gone).
 * One connect(2), no request. */
scdb_err cl_broker_listens(scdb *h);
/* The handle's lookup counters for a Hello, Heartbeat or Goodbye. */
void cl_lookup_counts(scdb *h, Scdb__LookupCounts *lc);
/* Close the sockets and free the handle (arenas already gone). */
void cl_conn_free(scdb *h);

/* cuda.c: open a CUDA IPC handle on the broker's GPU (found by PCI bus id,
 * else ordinal) / close it.  SCDB_EUNSUPPORTED (no CUDA runtime here),
 * SCDB_EDEVICE, SCDB_EPROTO (handle size). */
scdb_err cl_cuda_open(scdb *h, const uint8_t *handle, size_t len, int ordinal,
                           const char *pci, void **dev_ptr, int *device);
void cl_cuda_close(void *dev_ptr, int device);

/* cuda.c, live sessions on CUDA arenas: the CUDA driver (libcuda.so.1,
 * dlopen'd) and libscdb's accumulator kernels loaded into device `device`'s
 * primary context.  Errors: SCDB_EUNSUPPORTED (no driver, or a libscdb built
 * without nvcc), SCDB_EDEVICE; cl_cuda_error() says why (this
 * thread's last failure).  The ops table's acc_update takes a
 * cl_cuda_launch as its `stream`. */
typedef struct cl_cuda_launch {
    int device;                  /* our numbering */
    void *stream;                /* CUstream / cudaStream_t; NULL: default */
} cl_cuda_launch;
const scdb_k_ops *cl_cuda_session_ops(void);
const char *cl_cuda_error(void);
scdb_err cl_cuda_prepare(int device);
scdb_err cl_cuda_alloc(int device, size_t bytes, void **out);
void cl_cuda_free(int device, void *p);
scdb_err cl_cuda_download(int device, void *dst, const void *src, size_t bytes);
scdb_err cl_cuda_sync(int device, void *stream);

/* session.c: unmap and free a session locally (no message). */
void cl_session_drop(scdb_session *s);

#endif /* SCDB_LIBSCDB_INT_H */
