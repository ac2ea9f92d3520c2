/*
 * redis_cluster_int.h — what the files of the Redis Cluster client share.
 *
 *   redis_cluster.c      handle, config, AUTH, map refresh, the call loop
 *                        (routing, redirections), stats         -> calls both:
 *   redis_cluster_io.c   node sockets, backoff, pipelined rounds (poll loop)
 *   redis_cluster_map.c  CRC16 / slots, CLUSTER SLOTS and MOVED/ASK parsing,
 *                        addresses (pure: no I/O)
 */
#ifndef SCDB_REDIS_CLUSTER_INT_H
#define SCDB_REDIS_CLUSTER_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hiredis/hiredis.h>

#include "redis_cluster.h"

#define RC_HOST_MAX 256
#define RC_WHY_MAX 256
#define RC_REFRESH_MIN_NS (100ull * 1000 * 1000)
#define RC_REFRESH_FANOUT 3

typedef struct rc_node {
    char host[RC_HOST_MAX];
    int port;
    bool seed;            /* from the configuration                       */
    bool master;          /* owns slots in the current map                */
    int fd;               /* -1: not connected                            */
    bool connecting;      /* non-blocking connect() not yet completed     */
    bool authed;          /* AUTH accepted on this connection             */
    bool ever_connected;
    bool down;            /* logged as down (log once per change)         */
    unsigned discard;     /* replies still owed to a round that gave up   */
    redisReader *reader;
    int fails;            /* consecutive failures (backoff exponent)      */
    uint64_t retry_at_ns; /* no new connection before this (backoff)      */
} rc_node;

struct scdb_rc {
    int timeout_ms, backoff_min_ms, backoff_max_ms, max_redirects;
    char *user, *password;          /* password NULL: no AUTH           */
    rc_node *nodes;
    size_t n_nodes, cap_nodes;
    int16_t owner[SCDB_RC_SLOTS];   /* node index, -1 unmapped          */
    bool map_stale, map_ok;
    uint64_t last_refresh_ns;       /* last attempt                     */
    scdb_rc_stats st;
    struct rc_pipe *pool;           /* SCDB_RC_MAX_NODES pipes, reused by
                                       every round (one round at a time) */
    int pipe_of[SCDB_RC_MAX_NODES]; /* node -> pipe of the current round  */
    char last_error[RC_WHY_MAX];
    char rbuf[64 << 10];            /* socket read buffer               */
};

/* Format a message into buf (truncating quietly: messages name hosts of
 * any length). */
static inline void rc_why(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void rc_why(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (!buf || !len) return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------- map (pure) */

/* A parsed "host:port" (numeric host when `numeric_only`). */
scdb_err rc_parse_addr(const char *s, size_t len, bool numeric_only,
                       char host[RC_HOST_MAX], int *port);

/* A parsed CLUSTER SLOTS reply: ranges of slots and their master. */
typedef struct rc_range {
    int start, end;
    char host[RC_HOST_MAX];
    int port;
} rc_range;

typedef struct rc_slotmap {
    rc_range *ranges;   /* masters */
    size_t n_ranges;
    rc_range *others;   /* replicas (start/end unused): refresh candidates */
    size_t n_others;
} rc_slotmap;

/* Validate and parse a CLUSTER SLOTS reply; `asked_host` stands in for an
 * empty address (the spec: same host, given port).  SCDB_EPROTO (why says
 * what), SCDB_ENOMEM. */
scdb_err rc_parse_slots(const redisReply *r, const char *asked_host,
                        rc_slotmap *out, char *why, size_t why_len);
void rc_slotmap_free(rc_slotmap *m);

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": is_ask, slot, host, port.  An
 * empty host means `from_host`.  SCDB_EPROTO if malformed. */
scdb_err rc_parse_redirect(const char *s, size_t len, const char *from_host,
                           bool *is_ask, int *slot, char host[RC_HOST_MAX],
                           int *port);

/* ------------------------------------------------------- io */

/* Reply tags: an op index >= 0, or one of these. */
enum { RC_TAG_AUTH = -1, RC_TAG_ASKING = -2, RC_TAG_INTERNAL = -3 };

/* One node's share of a round: the formatted commands, what each reply is
 * for, the replies received, and the transport failure if any. */
typedef struct rc_pipe {
    int node;
    char *out;
    size_t out_len, out_cap, out_off;
    int32_t *tags;
    size_t n_want, cap_want;
    redisReply **got;
    size_t n_got;
    scdb_err err;          /* SCDB_OK, EIO, ETIMEDOUT, EPROTO, ENOMEM */
    bool connect_failed;   /* err came from connect()                 */
    bool reused;           /* the connection existed before the round */
    bool has_secret;       /* out holds an AUTH password (zeroed)     */
    bool active;
    char why[RC_WHY_MAX];
} rc_pipe;

/* Find a node by address, adding it if new (SCDB_EFULL past
 * SCDB_RC_MAX_NODES, SCDB_ENOMEM). */
scdb_err rc_node_get(scdb_rc *rc, const char *host, int port, int *idx);

/* Does the node refuse new connections for now (down, backing off)? */
bool rc_node_backing_off(const scdb_rc *rc, const rc_node *n, uint64_t now);

/* Mark a node down: close its socket, back off, map stale, log once. */
void rc_node_failed(scdb_rc *rc, int idx, const char *why);
/* A reply arrived: reset the backoff, log once if it was down. */
void rc_node_ok(scdb_rc *rc, int idx);
/* Close a node's socket (no health change). */
void rc_node_close(rc_node *n);

/* Start a pipe on a node: connect if needed (non-blocking) and queue AUTH on
 * a new connection.  A failed connect() leaves the pipe failed (err set),
 * not an error of this call; SCDB_ENOMEM is. */
scdb_err rc_pipe_begin(scdb_rc *rc, rc_pipe *p, int node);
/* Queue one command for the reply tag.  SCDB_ENOMEM. */
scdb_err rc_pipe_add(rc_pipe *p, int32_t tag, int argc, const char **argv,
                     const size_t *argvlen);
/* Free the replies, keep the buffers: the pipe can be begun again. */
void rc_pipe_reset(rc_pipe *p);
/* Free everything (zeroing a buffer that held a password). */
void rc_pipe_free(rc_pipe *p);

/* Send and receive on all active pipes until each has every reply, fails
 * (its node's socket is then closed), or the deadline passes (ETIMEDOUT).
 * stop_at_first: return as soon as one pipe finishes; the others stay
 * active and a later call continues them, or rc_pipe_abandon drops them. */
void rc_io_round(scdb_rc *rc, rc_pipe *pipes, size_t n, uint64_t deadline_ns,
                 bool stop_at_first);
/* Give up on an active pipe's replies still to come: its node discards
 * them when they arrive. */
void rc_pipe_abandon(scdb_rc *rc, rc_pipe *p);

#endif /* SCDB_REDIS_CLUSTER_INT_H */
