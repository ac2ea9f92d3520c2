/* remote_write.c — the remote tier's write path: a queue bounded in bytes,
 * filled by scdb_remote_put / scdb_remote_del (the store's writer, after
 * its commits) and drained by one writer thread in pipelined batches
 * (remote_tier.h, "WRITE PATH").
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

scdb_err scdb_remote_put(scdb_remote *r, const scdb_block_info *info, const void *payload)
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
    if ((rc = enqueue(r, e))) drop(r, e);
    return rc;
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
    if ((rc = enqueue(r, e))) drop(r, e);
    return rc;
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
        while (!r->head && !r->stop) pthread_cond_wait(&r->q_cv, &r->q_mu);
        if (r->stop && !close_by) close_by = scdb_now_ns() + RT_CLOSE_NS;
        closing = r->stop;
        if (!r->head || (closing && scdb_now_ns() > close_by)) {
            pthread_mutex_unlock(&r->q_mu);
            break;
        }
        n = take_batch(r, batch);
        pthread_mutex_unlock(&r->q_mu);

        ok = send_batch(r, batch, n, retry, &n_retry, closing);

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
