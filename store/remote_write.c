/* remote_write.c — the remote tier's write path: a queue bounded in bytes,
 * filled by scdb_remote_put / scdb_remote_replace / scdb_remote_del (the
 * store's writer, after its commits) and drained by one writer thread in
 * pipelined batches (remote_tier.h, "WRITE PATH"); and the replace log
 * ("REPLACES AND DELETES"), which the same thread appends to (after the
 * SETs and DELs it covers) and reads every poll interval.
 *
 *   put/del -> [ e1 e2 e3 ... ] -> writer: batch of up to BATCH entries and
 *               q_bytes <= cap      BATCH_BYTES, no key twice; one
 *                                   scdb_rc_exec; failed entries go back to
 *                                   the head in order (until RT_RETRY_NS
 *                                   old), a batch that made no progress
 *                                   backs off */
#include "remote_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 64
#define BATCH_BYTES (16ull << 20)
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000

/* ---------------------------------------------------------------- queue */

/* Append e (under nothing: takes q_mu).  SCDB_EFULL when it does not fit. */
static scdb_err enqueue(scdb_remote *r, rt_entry *e)
{
    scdb_err rc = SCDB_OK;
    pthread_mutex_lock(&r->q_mu);
    if (r->stop || r->q_bytes + e->value_len > r->queue_cap) {
        rc = SCDB_EFULL;
    } else {
        e->next = NULL;
        if (r->tail) r->tail->next = e;
        else r->head = e;
        r->tail = e;
        r->q_bytes += e->value_len;
        r->q_len++;
        pthread_cond_signal(&r->q_cv);
    }
    pthread_mutex_unlock(&r->q_mu);
    return rc;
}

static void entry_free(rt_entry *e)
{
    if (!e) return;
    free(e->value);
    free(e);
}

static void drop(scdb_remote *r, rt_entry *e)
{
    rt_count(r, &r->st.queue_drops, 1);
    entry_free(e);
}

static scdb_err put_value(scdb_remote *r, const scdb_block_info *info, const void *payload,
                          bool announce)
{
    rt_entry *e;
    size_t len;
    scdb_err rc;

    if (!r || !info || (!payload && info->payload_len)) return SCDB_EINVAL;
    len = scdb_block_header_len(info->n_sections) + (size_t)info->payload_len;
    if (info->n_sections > SCDB_BLOCK_MAX_SECTIONS) return SCDB_ERANGE;
    if (len > r->queue_cap || len > SCDB_RC_MAX_VALUE) {
        rt_count(r, &r->st.queue_drops, 1);
        return SCDB_ETOOBIG;
    }
    if (!(e = calloc(1, sizeof *e)) || !(e->value = malloc(len))) {
        free(e);
        rt_count(r, &r->st.queue_drops, 1);
        return SCDB_ENOMEM;
    }
    if ((rc = scdb_block_value_encode(info, payload, e->value, len, &e->value_len))) {
        entry_free(e);
        return rc;
    }
    e->key_len = scdb_remote_key(r, &info->key, e->key);
    e->t_queued_ns = scdb_now_ns();
    e->announce = announce;
    e->block = info->key;
    if ((rc = enqueue(r, e))) drop(r, e);
    return rc;
}

scdb_err scdb_remote_put(scdb_remote *r, const scdb_block_info *info, const void *payload)
{
    return put_value(r, info, payload, false);
}

scdb_err scdb_remote_replace(scdb_remote *r, const scdb_block_info *info, const void *payload)
{
    return put_value(r, info, payload, true);
}

scdb_err scdb_remote_del(scdb_remote *r, const scdb_key *k)
{
    rt_entry *e;
    scdb_err rc;

    if (!r || !k) return SCDB_EINVAL;
    if (!(e = calloc(1, sizeof *e))) {
        rt_count(r, &r->st.queue_drops, 1);
        return SCDB_ENOMEM;
    }
    e->key_len = scdb_remote_key(r, k, e->key);
    e->t_queued_ns = scdb_now_ns();
    e->announce = true;         /* the fleet's copies go too (REPLACES AND DELETES) */
    e->block = *k;
    if ((rc = enqueue(r, e))) drop(r, e);
    return rc;
}

/* ---------------------------------------------------------- replace log */

static bool transient(scdb_err e);

/* The cluster refuses the log's commands (an ACL without +append
 * +getrange): the log is off for this tier, said once, not an error of
 * the cluster's.  True when that is the case. */
static bool log_refused(scdb_remote *r, const char *cmd)
{
    if (!rt_cmd_refused(scdb_rc_last_error(r->wrc), cmd)) return false;
    if (!r->log_refused)
        scdb_warn("remote tier: the cluster refuses %s on the replace log %s (%s): replaces and deletes "
                  "are no longer announced to or seen from other brokers (give the ACL user +append "
                  "+getrange)", cmd, r->log_key, scdb_rc_last_error(r->wrc));
    r->log_refused = true;
    return true;
}

/* A record for block k (writer thread): appended after this batch. */
static void record_replace(scdb_remote *r, const scdb_key *k)
{
    uint8_t *p;
    if (r->n_recs == r->cap_recs) {
        size_t cap = r->cap_recs ? r->cap_recs * 2 : 64;
        uint8_t *q = realloc(r->recs, cap * SCDB_REMOTE_LOG_RECORD);
        if (!q) {   /* the SET stands; this broker's peers miss the record */
            rt_count(r, &r->st.write_errors, 1);
            return;
        }
        r->recs = q;
        r->cap_recs = cap;
    }
    if (!r->n_recs) r->recs_since_ns = scdb_now_ns();
    p = r->recs + r->n_recs++ * SCDB_REMOTE_LOG_RECORD;
    memcpy(p, k->b, 16);
    for (int i = 0; i < 8; i++) p[16 + i] = (uint8_t)(r->instance >> (8 * i));
}

/* APPEND the waiting records in one command (atomic: never interleaved
 * with another broker's).  A failure keeps them for the next round until
 * RT_RETRY_NS, then they are given up (write_errors). */
static void append_records(scdb_remote *r, bool closing)
{
    scdb_rc_op op;
    if (!r->n_recs) return;
    memset(&op, 0, sizeof op);
    op.cmd = SCDB_RC_APPEND;
    op.key = r->log_key;
    op.key_len = r->log_key_len;
    op.val = r->recs;
    op.val_len = r->n_recs * SCDB_REMOTE_LOG_RECORD;
    (void)scdb_rc_exec(r->wrc, &op, 1);
    if (op.status && log_refused(r, "append")) {
        r->n_recs = 0;
        return;
    }
    rt_record(r, op.status ? 1 : 0, op.status ? scdb_rc_last_error(r->wrc) : NULL);
    if (op.status == SCDB_OK) {
        rt_count(r, &r->st.replace_records, r->n_recs);
    } else if (closing || !transient(op.status) || scdb_now_ns() - r->recs_since_ns >= RT_RETRY_NS) {
        rt_count(r, &r->st.write_errors, r->n_recs);
        scdb_warn("remote tier: %zu replace-log record(s) given up (%s): other brokers keep their "
                  "copies of those blocks", r->n_recs, scdb_rc_last_error(r->wrc));
    } else {
        return;                         /* kept: the next round tries again */
    }
    r->n_recs = 0;
}

static uint64_t rec_instance(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[16 + i] << (8 * i);
    return v;
}

/* Read the log from where this tier stopped (GETRANGE, re-reading the last
 * record seen) and hand other instances' keys to on_replaced.  Returns
 * true when there may be more to read at once. */
static bool poll_log(scdb_remote *r)
{
    enum { MAX_READ = SCDB_REMOTE_REPLACED_MAX * SCDB_REMOTE_LOG_RECORD };
    const size_t R = SCDB_REMOTE_LOG_RECORD;
    scdb_key keys[SCDB_REMOTE_REPLACED_MAX];
    scdb_rc_op op;
    size_t skip = r->log_off ? R : 0, n_keys = 0, n_rec;
    const uint8_t *p;

    memset(&op, 0, sizeof op);
    op.cmd = SCDB_RC_GETRANGE;
    op.key = r->log_key;
    op.key_len = r->log_key_len;
    op.start = (int64_t)(r->log_off - skip);
    op.end = op.start + (int64_t)(skip + MAX_READ) - 1;
    (void)scdb_rc_exec(r->wrc, &op, 1);
    if (op.status && log_refused(r, "getrange")) return false;
    rt_record(r, op.status ? 1 : 0, op.status ? scdb_rc_last_error(r->wrc) : NULL);
    if (op.status) return false;        /* counted; the next interval again */
    p = op.out;
    if (skip && (op.out_len < R || memcmp(p, r->log_last, R))) {
        /* not the log this tier was reading: deleted (or evicted) and
         * written anew; every record in it now is read from 0 */
        rt_count(r, &r->st.replace_log_resets, 1);
        scdb_warn("remote tier: the replace log %s was rewritten (deleted or evicted): reading it "
                  "again from the start; replaces recorded in the old one and not read yet are "
                  "missed", r->log_key);
        r->log_off = 0;
        free(op.out);
        return true;
    }
    n_rec = (op.out_len - skip) / R;
    for (size_t i = 0; i < n_rec; i++) {
        const uint8_t *rec = p + skip + i * R;
        if (rec_instance(rec) == r->instance) continue;     /* our own replace */
        memcpy(keys[n_keys++].b, rec, 16);
    }
    if (n_rec) {
        memcpy(r->log_last, p + skip + (n_rec - 1) * R, R);
        r->log_off += n_rec * R;
    }
    free(op.out);
    if (n_keys) {
        rt_count(r, &r->st.replace_seen, n_keys);
        pthread_mutex_lock(&r->cb_mu);
        if (r->on_replaced) r->on_replaced(r->on_replaced_ctx, keys, n_keys);
        pthread_mutex_unlock(&r->cb_mu);
    }
    return n_rec == SCDB_REMOTE_REPLACED_MAX;
}

void scdb_remote_watch_replaces(scdb_remote *r, void (*fn)(void *ctx, const scdb_key *keys, size_t n),
                                void *ctx)
{
    if (!r) return;
    pthread_mutex_lock(&r->cb_mu);
    r->on_replaced = fn;
    r->on_replaced_ctx = ctx;
    pthread_mutex_unlock(&r->cb_mu);
    pthread_mutex_lock(&r->q_mu);
    r->watching = fn != NULL;
    r->next_poll_ns = 0;                /* read it now */
    pthread_cond_signal(&r->q_cv);
    pthread_mutex_unlock(&r->q_mu);
}

/* The log's work between batches: append what the last batch replaced,
 * read it when the interval is up (or more is waiting). */
static void log_work(scdb_remote *r, bool closing)
{
    bool due;
    uint64_t now;
    if (r->log_refused) {
        r->n_recs = 0;
        return;
    }
    append_records(r, closing);
    if (closing) return;
    now = scdb_now_ns();
    pthread_mutex_lock(&r->q_mu);
    due = r->watching && now >= r->next_poll_ns;
    if (due) r->next_poll_ns = now + r->poll_ns;
    pthread_mutex_unlock(&r->q_mu);
    if (due && poll_log(r)) {           /* more waiting: read on at once */
        pthread_mutex_lock(&r->q_mu);
        r->next_poll_ns = 0;
        pthread_mutex_unlock(&r->q_mu);
    }
}

/* --------------------------------------------------------------- writer */

/* Take a batch off the head (under q_mu): at most BATCH entries and
 * BATCH_BYTES (at least one entry), stopping before a key already in it. */
static size_t take_batch(scdb_remote *r, rt_entry **batch)
{
    size_t n = 0;
    uint64_t bytes = 0;
    while (r->head && n < BATCH) {
        rt_entry *e = r->head;
        bool dup = false;
        if (n && bytes + e->value_len > BATCH_BYTES) break;
        for (size_t i = 0; i < n && !dup; i++)
            dup = batch[i]->key_len == e->key_len && !memcmp(batch[i]->key, e->key, e->key_len);
        if (dup) break;
        r->head = e->next;
        if (!r->head) r->tail = NULL;
        r->q_bytes -= e->value_len;
        r->q_len--;
        bytes += e->value_len;
        batch[n++] = e;
    }
    r->in_flight = n;
    return n;
}

/* Put the failed entries back at the head, in their order (under q_mu). */
static void requeue(scdb_remote *r, rt_entry **failed, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        rt_entry *e = failed[i];
        e->next = r->head;
        r->head = e;
        if (!r->tail) r->tail = e;
        r->q_bytes += e->value_len;
        r->q_len++;
    }
}

static bool transient(scdb_err e)
{
    return e == SCDB_EIO || e == SCDB_ETIMEDOUT || e == SCDB_ENOMEM;
}

/* Send one batch; failed entries that may still retry go to *retry.
 * Returns how many entries completed (acknowledged or given up). */
static size_t send_batch(scdb_remote *r, rt_entry **batch, size_t n, rt_entry **retry,
                         size_t *n_retry, bool closing)
{
    scdb_rc_op ops[BATCH];
    uint64_t now, writes = 0, bytes = 0, dels = 0, failed = 0, given_up = 0;
    size_t done = 0;
    char why[256] = "";

    memset(ops, 0, n * sizeof *ops);
    for (size_t i = 0; i < n; i++) {
        ops[i].cmd = batch[i]->value ? SCDB_RC_SET : SCDB_RC_DEL;
        ops[i].key = batch[i]->key;
        ops[i].key_len = batch[i]->key_len;
        ops[i].val = batch[i]->value;
        ops[i].val_len = batch[i]->value_len;
        ops[i].ttl_ms = r->ttl_ms;
    }
    (void)scdb_rc_exec(r->wrc, ops, n);
    now = scdb_now_ns();
    *n_retry = 0;
    for (size_t i = 0; i < n; i++) {
        rt_entry *e = batch[i];
        scdb_err st = ops[i].status;
        if (st == SCDB_OK || (st == SCDB_ENOTFOUND && !e->value)) {
            if (e->value) writes++, bytes += e->value_len;
            else dels++;
            /* a replace whose SET, or a delete whose DEL, the cluster
             * acknowledged (a DEL of a key it no longer had too: other
             * brokers may still hold their copies) */
            if (e->announce) record_replace(r, &e->block);
            entry_free(e);
            done++;
            continue;
        }
        failed++;
        if (!why[0]) snprintf(why, sizeof why, "%s", scdb_rc_last_error(r->wrc));
        if (!closing && transient(st) && now - e->t_queued_ns < RT_RETRY_NS) {
            retry[(*n_retry)++] = e;
            continue;
        }
        given_up++;
        entry_free(e);
        done++;
    }
    rt_record(r, failed, why);
    pthread_mutex_lock(&r->st_mu);
    r->st.writes += writes;
    r->st.bytes_written += bytes;
    r->st.deletes += dels;
    r->st.write_errors += given_up;
    pthread_mutex_unlock(&r->st_mu);
    return done - given_up;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

static void *writer_main(void *arg)
{
    scdb_remote *r = arg;
    rt_entry *batch[BATCH], *retry[BATCH];
    int backoff = 0;
    uint64_t close_by = 0;

    for (;;) {
        size_t n, n_retry = 0, ok;
        bool closing;
        pthread_mutex_lock(&r->q_mu);
        /* wake for writes, and for the replace log: records waiting for
         * their APPEND, or the next read of it */
        while (!r->head && !r->stop) {
            uint64_t now = scdb_now_ns(), until = UINT64_MAX;
            if (r->n_recs) until = now + BACKOFF_MIN_MS * 1000000ull;
            if (r->watching && !r->log_refused && r->next_poll_ns < until) until = r->next_poll_ns;
            if (until == UINT64_MAX) {
                pthread_cond_wait(&r->q_cv, &r->q_mu);
                continue;
            }
            if (until <= now) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (until - now);
            ts.tv_sec = (time_t)(at / 1000000000ull);
            ts.tv_nsec = (long)(at % 1000000000ull);
            if (pthread_cond_timedwait(&r->q_cv, &r->q_mu, &ts) == ETIMEDOUT) break;
        }
        if (r->stop && !close_by) close_by = scdb_now_ns() + RT_CLOSE_NS;
        closing = r->stop;
        if (!r->head && !closing) {     /* the log's turn */
            pthread_mutex_unlock(&r->q_mu);
            log_work(r, false);
            continue;
        }
        if (!r->head || (closing && scdb_now_ns() > close_by)) {
            pthread_mutex_unlock(&r->q_mu);
            log_work(r, true);          /* what was replaced still goes on the log */
            break;
        }
        n = take_batch(r, batch);
        pthread_mutex_unlock(&r->q_mu);

        ok = send_batch(r, batch, n, retry, &n_retry, closing);
        log_work(r, closing);

        pthread_mutex_lock(&r->q_mu);
        requeue(r, retry, n_retry);
        r->in_flight = 0;
        pthread_mutex_unlock(&r->q_mu);
        if (n_retry && !ok) {
            /* nothing went through: the cluster (or that shard) is down */
            backoff = backoff ? backoff * 2 : BACKOFF_MIN_MS;
            if (backoff > BACKOFF_MAX_MS) backoff = BACKOFF_MAX_MS;
            nap_ms(backoff);
        } else if (ok) {
            backoff = 0;
        }
    }
    return NULL;
}

scdb_err rt_write_start(scdb_remote *r)
{
    if (pthread_create(&r->writer, NULL, writer_main, r)) return SCDB_ESYS;
    r->writer_started = true;
    return SCDB_OK;
}

void rt_write_stop(scdb_remote *r)
{
    uint64_t left = 0;

    pthread_mutex_lock(&r->q_mu);
    r->stop = true;
    pthread_cond_broadcast(&r->q_cv);
    pthread_mutex_unlock(&r->q_mu);
    pthread_join(r->writer, NULL);
    r->writer_started = false;
    while (r->head) {
        rt_entry *e = r->head;
        r->head = e->next;
        entry_free(e);
        left++;
    }
    r->tail = NULL;
    r->q_len = r->q_bytes = 0;
    if (left) {
        rt_count(r, &r->st.queue_drops, left);
        scdb_warn("remote tier: %llu queued write(s) dropped at close (the cluster did not take "
                  "them in time)", (unsigned long long)left);
    }
}
