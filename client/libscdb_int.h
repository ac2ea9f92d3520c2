/* libscdb_int.h — libscdb's internal structures (client/scdb.h is the API). */
#ifndef SCDB_LIBSCDB_INT_H
#define SCDB_LIBSCDB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "block_key.h"
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
    char endpoint[512];
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
    scdb_info info;

    int no_heartbeat;
    int hb_running;
    pthread_t hb;
    int hb_pipe[2];
    _Atomic int hb_interval_ms;

    scdb_arena *arenas;
    scdb_arena *scratch;         /* scdb_get_copy's own arena               */

    /* the broker's lookup index (libscdb.c, "lookup index") */
    int no_index;                /* opts.no_lookup_index / $SCDB_LOOKUP_INDEX=0 */
    scdb_lix *lix;               /* mapped, or NULL: the request path       */
    char lix_name[SCDB_LIX_NAME_MAX]; /* what the last hello named          */
    scdb_ns ns;                  /* our codebook's namespace (hello)        */
    int have_ns;
    scdb_err lix_err;            /* why lix is NULL (SCDB_OK when mapped)   */
    uint64_t n_index_lookups, n_request_lookups, n_index_fallbacks;
};

/* Set h->err (printf) and return e. */
scdb_err lib_fail(scdb *h, scdb_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Send req (version, id, client filled in) with n payload frames and wait
 * for its reply; re-registers and retries once when the broker no longer
 * knows us.  On return *rep (may be NULL when the call failed before a
 * reply) must be freed with scdb__reply__free_unpacked.  Returns the
 * reply's status (its message in h->err) or a local error. */
scdb_err lib_request(scdb *h, Scdb__Request *req, const void *const *frames,
                     const size_t *lens, int n, Scdb__Reply **rep);

/* Open a shared object the broker named: "/proc/<pid>/fd/<n>" (its memfd,
 * sealed against shrinking) or a POSIX shm name.  -1 with errno. */
int lib_shm_open(const char *name);

/* Unmap and free a session locally (no message). */
void lib_session_drop(scdb_session *s);

/* libscdb_cuda.c: open a CUDA IPC handle on the broker's GPU (found by PCI
 * bus id, else ordinal) / close it.  SCDB_EUNSUPPORTED (no CUDA runtime
 * here), SCDB_EDEVICE, SCDB_EPROTO (handle size). */
scdb_err lib_cuda_open(scdb *h, const uint8_t *handle, size_t len, int ordinal, const char *pci,
                       void **dev_ptr, int *device);
void lib_cuda_close(void *dev_ptr, int device);

/* Map an arena the broker created and confirm it. */
scdb_err lib_arena_map(scdb *h, const Scdb__ArenaCreateReply *ar, scdb_arena **out);

#endif /* SCDB_LIBSCDB_INT_H */
