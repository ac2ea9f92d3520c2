/*
 * remote_int.h — private declarations shared by the remote tier's files
 * (remote_tier.h is the API):
 *
 *   remote_tier.c   config, open/close, keys, verification, the reader
 *                   handle pool, probe and fetch, state and counters
 *   remote_write.c  the write queue and its writer thread
 *
 * remote_write.c calls remote_tier.c's helpers (state, counters), never
 * the reverse except through remote_write_start / remote_write_stop.
 */
#ifndef SCDB_REMOTE_INT_H
#define SCDB_REMOTE_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "redis_cluster.h"
#include "remote_tier.h"

/* A queued SET (value) or DEL (value NULL) of one Redis key. */
typedef struct rt_entry {
    struct rt_entry *next;
    char key[SCDB_REMOTE_KEY_MAX];
    size_t key_len;
    uint8_t *value;             /* the encoded block value; NULL: DEL       */
    size_t value_len;
    bool announce;              /* a replace or an explicit delete: a record
                                   goes on the replace log once the SET or
                                   DEL is acknowledged                       */
    scdb_key block;             /* its block key (the record's)             */
    uint64_t t_queued_ns;       /* retries stop RETRY_NS after this         */
} rt_entry;

struct scdb_remote {
    char prefix[SCDB_REMOTE_PREFIX_MAX + 1];
    size_t prefix_len;
    uint64_t ttl_ms;
    uint64_t queue_cap;

    /* readers: a pool of cluster handles, borrowed by probe and fetch */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    scdb_rc **pool;             /* idle handles (a stack)                   */
    int n_pool, n_readers;

    /* the write queue (remote_write.c); under q_mu */
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;
    rt_entry *head, *tail;
    uint64_t q_bytes, q_len, in_flight;
    bool stop, writer_started;
    pthread_t writer;
    scdb_rc *wrc;               /* the writer's own handle                  */

    /* the replace log (remote_write.c; writer thread only) */
    uint64_t instance;          /* random per open: this tier's records      */
    char log_key[SCDB_REMOTE_PREFIX_MAX + sizeof SCDB_REMOTE_LOG_NAME];
    size_t log_key_len;
    uint8_t *recs;              /* records waiting for their APPEND          */
    size_t n_recs, cap_recs;
    uint64_t recs_since_ns;     /* the oldest waiting record's time          */
    uint64_t log_off;           /* bytes of the log read                     */
    uint8_t log_last[SCDB_REMOTE_LOG_RECORD]; /* the last record read      */
    uint64_t poll_ns, next_poll_ns;
    pthread_mutex_t cb_mu;      /* on_replaced and its calls                */
    void (*on_replaced)(void *ctx, const scdb_key *keys, size_t n);
    void *on_replaced_ctx;
    bool watching;              /* on_replaced set (read under q_mu too)    */
    bool log_refused;           /* APPEND / GETRANGE refused: no log        */
    int no_getex;               /* GETEX refused: plain GETs (atomic)       */

    /* counters and state; under st_mu */
    pthread_mutex_t st_mu;
    scdb_remote_stat st;
    uint64_t last_error_ns;     /* state hysteresis                         */
    uint64_t down_since_ns, errors_while_down;
    bool locks_init;
};

#define RT_UP_AFTER_NS 1000000000ull     /* error-free time before "up"     */
#define RT_RETRY_NS 5000000000ull        /* how long a failed write retries */
#define RT_CLOSE_NS 1000000000ull        /* what close still sends          */

/* remote_tier.c */
/* Record the outcome of one cluster call: `errors` failed operations (0:
 * it worked), `why` names the first; logs state changes. */
void rt_record(scdb_remote *r, uint64_t errors, const char *why);
/* Add to a counter under st_mu. */
void rt_count(scdb_remote *r, uint64_t *field, uint64_t n);
/* A cluster error that says the command is not allowed or not known
 * (an ACL without it, an older Redis): not the cluster failing. */
bool rt_cmd_refused(const char *why, const char *cmd);

/* remote_write.c */
scdb_err rt_write_start(scdb_remote *r);
/* Stop the writer (sending what it can for RT_CLOSE_NS), free the queue. */
void rt_write_stop(scdb_remote *r);

#endif /* SCDB_REMOTE_INT_H */
