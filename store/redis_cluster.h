/*
 * redis_cluster.h — a small Redis Cluster client over hiredis: the transport
 * of the store's remote tier (docs/DESIGN.md "Remote tier", issue 12).
 * Debian has no hiredis-cluster, so this module does the cluster part
 * itself; hiredis only formats commands and parses replies (RESP2).
 *
 * Slots.  Redis Cluster cuts the key space into 16384 hash slots; every slot
 * has one master at a time:
 *
 *     slot(key) = CRC16-XMODEM(h) mod 16384     (poly 0x1021, init 0)
 *     h = the bytes between the first '{' and the first '}' after it when
 *         there is at least one byte between them (a "hash tag"), else the
 *         whole key
 *
 * scdb's block keys contain no braces, so they hash freely over all slots;
 * the tag rule is implemented because the spec's known answers need it.
 *
 * The handle keeps a table of nodes and a slot -> node map:
 *
 *     owner[slot]:  0 ......... 5460 | 5461 ....... 10922 | 10923 ...... 16383
 *                   node 0           | node 1             | node 2
 *     nodes[]:      0 127.0.0.1:7000  master  socket, reply parser, backoff
 *                   1 127.0.0.1:7001  master
 *                   2 127.0.0.1:7002  master
 *                   3 127.0.0.1:7003  replica (asked for the map, never routed to)
 *                   ...               seeds, and nodes named by redirections
 *
 * filled from CLUSTER SLOTS, asked of up to three known nodes at once (masters
 * of the current map first, then the seeds, then any other node), the first
 * valid answer winning.  A reply that is not a well-formed slot map (wrong
 * types, slots out of 0..16383, overlapping ranges, a port out of range, a
 * non-numeric address) is refused whole; the map in use stays.  Addresses
 * from the cluster must be numeric (no DNS lookup on the request path); only
 * seeds may be host names.
 *
 * A call (scdb_rc_exec and everything built on it) has one deadline,
 * now + timeout_ms, that covers connecting, AUTH, a map refresh and every
 * round below:
 *
 *     0. if the map is stale (a redirection or a node failure since the
 *        last refresh; at most one refresh per 100 ms), refresh it
 *     1. group the pending commands by node: an ASK target if the command
 *        was just ASK-redirected, else owner[slot(key)] (any live node for an
 *        unmapped slot: it answers MOVED)
 *     2. one pipeline per node, all nodes at once (non-blocking sockets, one
 *        poll loop): [AUTH on a new connection] cmd cmd [ASKING cmd] cmd ...
 *     3. per reply:  value/nil/integer/OK  -> done
 *                    MOVED slot host:port  -> the slot moved for good:
 *                                             owner[slot] = host:port, map
 *                                             stale, resend there
 *                    ASK slot host:port    -> this key is being migrated: resend
 *                                             "ASKING" + cmd there, map unchanged
 *                    TRYAGAIN              -> resend (multi-key ops only)
 *                    CLUSTERDOWN, LOADING  -> SCDB_EIO
 *                    NOAUTH/WRONGPASS/NOPERM -> SCDB_EAUTH; any other error
 *                                             or an unexpected type -> EPROTO
 *     4. repeat 1-3 for the resent commands, at most max_redirects per
 *        command, until the deadline; what is left then is SCDB_ETIMEDOUT.
 *
 * A caller is never blocked past its deadline: a slow or stopped node costs
 * that call its timeout (SCDB_ETIMEDOUT for that node's commands; the other
 * nodes' commands complete), and nothing more.
 *
 * Node failure and backoff.  A node whose connect fails, whose connection
 * drops, that times out or refuses AUTH is marked down: its socket is closed,
 * the map goes stale, and no connection is tried again before a backoff of
 * backoff_min_ms, doubling per consecutive failure up to backoff_max_ms.
 * Until then, its commands fail at once with SCDB_EIO (counted as
 * backoff_skips): a dead node is not retried on every call, and a whole
 * cluster down makes calls fail in microseconds.  A connection that was idle
 * and turns out dead (the node restarted) is retried once, on a fresh
 * connection, within the same call before the node is marked down.  After a
 * failover the refresh finds the promoted replica; calls then resume.  Down
 * and up transitions are logged once each (warn / info), never per call.
 *
 * AUTH (Redis ACLs).  With a password file, every new connection starts with
 * "AUTH user password" ("AUTH password" without a user: the default user).
 * scdb_rc_open checks it on every master it can reach: a refused password is
 * SCDB_EAUTH there, with a message naming the user and the node.  The ACL user
 * needs: +get +set +exists +del +asking +cluster|slots +ping, and for the
 * remote tier's TTL refresh and replace log +getex +append +getrange (and a
 * key pattern covering the key prefix).  ACLs are per node in Redis Cluster:
 * configure the user on every node (an ACL file).
 *
 * The cluster side: run it with cluster-require-full-coverage no, so that a
 * shard without a master (a failover under way) does not stop the others
 * (with yes, every node answers CLUSTERDOWN until it is over), and with
 * cluster-preferred-endpoint-type ip (the default).  Reads go to masters
 * only (no READONLY replica reads): during a failover the keys of that shard
 * fail fast until the replica is promoted.
 *
 * Counters (scdb_rc_stats_get): calls, ops, errors, timeouts, redirections,
 * pipelines (round trips), connects, reconnects, failures, backoff skips,
 * refreshes; monotonic over the handle's life.
 *
 * Threads: a handle is not thread-safe; use one handle per thread (each has
 * its own connections).  Do not use a handle across fork(); the child opens
 * its own.  No signal is raised: sends use MSG_NOSIGNAL (no SIGPIPE).
 * Caveat: resolving a seed host name (getaddrinfo) can block past the
 * deadline; give seeds as numeric addresses where that matters.
 */
#ifndef SCDB_REDIS_CLUSTER_H
#define SCDB_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_common.h"

#define SCDB_RC_SLOTS 16384
#define SCDB_RC_DEFAULT_TIMEOUT_MS 100
#define SCDB_RC_DEFAULT_BACKOFF_MIN_MS 100
#define SCDB_RC_DEFAULT_BACKOFF_MAX_MS 2000
#define SCDB_RC_DEFAULT_MAX_REDIRECTS 5
#define SCDB_RC_MAX_KEY (64u << 10)     /* longer keys: SCDB_ETOOBIG */
#define SCDB_RC_MAX_VALUE (512u << 20)  /* Redis's own bulk limit */
#define SCDB_RC_MAX_NODES 256           /* nodes one handle will track */

typedef struct scdb_rc scdb_rc;

typedef struct scdb_rc_config {
    const char *seeds;         /* "host:port[,host:port...]", required       */
    const char *user;          /* ACL user; NULL: "AUTH password" (default
                                  user); needs password_file                */
    const char *password_file; /* its first line is the password; NULL: no
                                  AUTH                                       */
    int timeout_ms;            /* deadline of one call; 0: default (100)     */
    int backoff_min_ms;        /* first backoff after a failure; 0: 100      */
    int backoff_max_ms;        /* backoff cap; 0: 2000                       */
    int max_redirects;         /* per command and call; 0: 5                 */
    int lazy;                  /* nonzero: open succeeds even when no seed
                                  answers (the map is fetched on first use); a
                                  refused AUTH still fails the open          */
} scdb_rc_config;

/* One keyed command of a batch.  Inputs first; scdb_rc_exec fills status
 * (and out/out_len for GET). */
typedef enum scdb_rc_cmd {
    SCDB_RC_GET = 1,  /* value -> out; SCDB_ENOTFOUND if absent            */
    SCDB_RC_SET,      /* val, with PX ttl_ms when ttl_ms > 0               */
    SCDB_RC_EXISTS,   /* SCDB_OK if present, SCDB_ENOTFOUND if not         */
    SCDB_RC_DEL,      /* SCDB_OK if deleted, SCDB_ENOTFOUND if absent      */
    SCDB_RC_GETEX,    /* GET that also sets the key's expiry to ttl_ms
                         (GETEX key PX ttl_ms; Redis >= 6.2); ttl_ms 0: a
                         plain GET                                          */
    SCDB_RC_APPEND,   /* append val; the new length -> integer             */
    SCDB_RC_GETRANGE  /* bytes start..end (inclusive; negative: from the
                         end) -> out; an absent key is "" (SCDB_OK, out_len
                         0)                                                 */
} scdb_rc_cmd;

typedef struct scdb_rc_op {
    scdb_rc_cmd cmd;
    const void *key;
    size_t key_len;
    const void *val;   /* SET */
    size_t val_len;
    uint64_t ttl_ms;   /* SET, GETEX: expiry in ms, 0 for none */
    int64_t start, end; /* GETRANGE */
    int64_t integer;   /* out, APPEND: the reply */
    scdb_err status;   /* out: SCDB_OK, SCDB_ENOTFOUND, or an error         */
    void *out;         /* out, GET, GETEX, GETRANGE: malloc'd copy of the
                          value (free()); NULL otherwise                     */
    size_t out_len;
} scdb_rc_op;

typedef struct scdb_rc_key {
    const void *p;
    size_t len;
} scdb_rc_key;

typedef struct scdb_rc_stats {
    uint64_t calls;            /* public calls that talk to the cluster      */
    uint64_t ops;              /* keyed commands callers asked for           */
    uint64_t errors;           /* commands that ended in an error (a miss,
                                  SCDB_ENOTFOUND, is an answer, not an error) */
    uint64_t timeouts;         /* ... of which SCDB_ETIMEDOUT                */
    uint64_t moved;            /* MOVED redirections followed                */
    uint64_t ask;              /* ASK redirections followed                  */
    uint64_t pipelines;        /* per-node pipelines sent (round trips)      */
    uint64_t connects;         /* connections established                    */
    uint64_t reconnects;       /* ... to a node connected to before          */
    uint64_t connect_failures; /* connects refused, unreachable, timed out   */
    uint64_t node_failures;    /* nodes marked down (any cause)              */
    uint64_t backoff_skips;    /* commands failed at once: node backing off  */
    uint64_t refreshes;        /* slot maps installed                        */
    uint64_t refresh_failures; /* refreshes that found no valid map          */
    uint64_t protocol_errors;  /* garbage replies, bad redirections or maps  */
    uint64_t auth_failures;    /* AUTH refused / NOAUTH / NOPERM             */
} scdb_rc_stats;

/* CRC16-XMODEM of buf (the Redis Cluster variant: "123456789" -> 0x31C3). */
uint16_t scdb_rc_crc16(const void *buf, size_t len);

/* The hash slot (0..16383) of a key, hash tags included.  key may be NULL
 * when len is 0. */
unsigned scdb_rc_slot(const void *key, size_t len);

/* Open a handle: read the password file, fetch the slot map from the seeds,
 * check AUTH on every reachable master.  On failure *out is NULL and msg (if
 * given) says why in words.
 *   SCDB_EINVAL    cfg/out NULL; seeds empty or malformed ("host:port",
 *                  port 1..65535); user without password_file; a negative
 *                  setting; backoff_min_ms > backoff_max_ms; an empty
 *                  password file
 *   SCDB_ENOTFOUND the password file does not exist
 *   SCDB_EIO       the password file cannot be read; no seed answered
 *                  (connection refused; not with lazy)
 *   SCDB_ETOOBIG   the password file is over 4 KiB
 *   SCDB_EAUTH     a node refused the credentials, or wants some and none
 *                  are configured
 *   SCDB_ETIMEDOUT no seed answered in time (not with lazy)
 *   SCDB_EPROTO    the seeds answered but not with a usable slot map (not a
 *                  cluster node, garbage, no slot assigned; not with lazy)
 *   SCDB_ENOMEM */
scdb_err scdb_rc_open(const scdb_rc_config *cfg, scdb_rc **out, char *msg,
                      size_t msg_len);

/* Close connections, free the handle, NULL *p.  Accepts NULL and &NULL. */
void scdb_rc_close(scdb_rc **p);

/* Run a batch: route every op by its key's slot, one pipeline per node, all
 * nodes in parallel, follow redirections per reply; within timeout_ms.
 * Every op's status is set: SCDB_OK, SCDB_ENOTFOUND, or its own error:
 *   SCDB_EINVAL    bad op (unknown cmd, NULL key/val with a length)
 *   SCDB_ETOOBIG   key over SCDB_RC_MAX_KEY or value over SCDB_RC_MAX_VALUE
 *   SCDB_ETIMEDOUT no answer before the deadline
 *   SCDB_EIO       node down or backing off, connection lost, CLUSTERDOWN
 *   SCDB_EAUTH     NOAUTH / WRONGPASS / NOPERM
 *   SCDB_EPROTO    garbage reply, an error reply (WRONGTYPE, ERR ...), a bad
 *                  or endless redirection
 *   SCDB_ENOMEM
 * Returns SCDB_OK when every op got an answer (OK or ENOTFOUND), else the
 * status of the first op that did not; SCDB_EINVAL if rc is NULL or ops is
 * NULL with n > 0 (then no op is touched).  Ops are independent: two ops on
 * one key in a batch may run in either order. */
scdb_err scdb_rc_exec(scdb_rc *rc, scdb_rc_op *ops, size_t n);

/* GET: *val is a malloc'd copy (free()), *len its length.  SCDB_ENOTFOUND if
 * absent (then *val NULL); errors as scdb_rc_exec. */
scdb_err scdb_rc_get(scdb_rc *rc, const void *key, size_t key_len, void **val,
                     size_t *len);

/* SET key val [PX ttl_ms] (ttl_ms 0: no expiry).  Errors as scdb_rc_exec. */
scdb_err scdb_rc_set(scdb_rc *rc, const void *key, size_t key_len,
                     const void *val, size_t val_len, uint64_t ttl_ms);

/* Longest present prefix: how many leading keys of keys[0..n) exist.  One
 * pipelined EXISTS round per node over all n keys (plus redirections); the
 * answer stops at the first miss.  SCDB_OK: *n_present is exact.  On an
 * error (as scdb_rc_exec: a node down or slow) *n_present is the count of
 * leading keys known to exist before the first key whose answer is unknown,
 * a safe lower bound.  SCDB_EINVAL: rc/n_present NULL, keys NULL with n > 0,
 * a NULL key with a length. */
scdb_err scdb_rc_probe(scdb_rc *rc, const scdb_rc_key *keys, size_t n,
                       size_t *n_present);

/* Refresh the slot map now (within timeout_ms).  SCDB_EIO, SCDB_ETIMEDOUT,
 * SCDB_EPROTO, SCDB_EAUTH as scdb_rc_open (the old map stays in use). */
scdb_err scdb_rc_refresh(scdb_rc *rc);

/* Who owns a slot in the current map: "host:port" into buf.
 * SCDB_ERANGE slot > 16383; SCDB_ENOTFOUND unmapped; SCDB_EINVAL NULL args or
 * buf too small. */
scdb_err scdb_rc_slot_node(const scdb_rc *rc, unsigned slot, char *buf,
                           size_t len);

/* Copy the counters.  Both non-NULL (else nothing happens). */
void scdb_rc_stats_get(const scdb_rc *rc, scdb_rc_stats *out);

/* The last failure on this handle in words ("" if none), e.g.
 * "127.0.0.1:7001: no reply within 100 ms".  Valid until the next call. */
const char *scdb_rc_last_error(const scdb_rc *rc);

#endif /* SCDB_REDIS_CLUSTER_H */
