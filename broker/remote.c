/* remote.c — the store's remote tier inside the broker (broker.h, REMOTE
 * TIER): opening it from [remote], the store's on_written hook that queues
 * every committed block for the cluster (a replaced one with a record on
 * the fleet's replace log), refreshing or dropping the blocks other
 * brokers replaced or deleted (remote_tier.h, "REPLACES AND DELETES"), the
 * remainder of a local prefix (probe for lookups, fetch for gets and for
 * puts whose parents are only remote), keeping fetched blocks locally,
 * deletes (announced to the fleet), counters.  Called by
 * jobs.c, handlers.c and broker.c; calls only the store and the tier. */
#include "broker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

scdb_err bk_remote_start(scdb_broker *b, char *errbuf, size_t errlen)
{
    const scdb_broker_config *c = &b->cfg;
    scdb_remote_config rc;
    char msg[512] = "";
    scdb_err e;

    if (!c->remote_cluster[0]) return SCDB_OK;
    memset(&rc, 0, sizeof rc);
    rc.cluster = c->remote_cluster;
    rc.user = c->remote_user;
    rc.password_file = c->remote_password_file;
    rc.key_prefix = c->remote_key_prefix;
    rc.ttl_ms = c->remote_ttl > UINT64_MAX / 1000 ? UINT64_MAX : c->remote_ttl * 1000;
    rc.queue_bytes = c->remote_write_queue;
    rc.timeout_ms = c->remote_timeout_ms;
    rc.readers = c->workers + 1;         /* every worker and the writer may fetch at once */
    e = scdb_remote_open(&rc, &b->remote, msg, sizeof msg);
    if (e) snprintf(errbuf, errlen, "%s", msg[0] ? msg : scdb_strerror(e));
    return e;
}

void bk_remote_stop(scdb_broker *b)
{
    scdb_remote_close(&b->remote);
}

void bk_remote_on_written(void *ctx, const scdb_block_info *info, const void *payload, int replaced)
{
    scdb_broker *b = ctx;
    /* a full queue drops the write (counted by the tier): the put stands */
    if (replaced) (void)scdb_remote_replace(b->remote, info, payload);
    else (void)scdb_remote_put(b->remote, info, payload);
}

/* The tier's writer thread: keys another broker replaced -> a writer job. */
static void on_replaced(void *ctx, const scdb_key *keys, size_t n)
{
    scdb_broker *b = ctx;
    bk_job *j = calloc(1, sizeof *j);
    if (!j || !(j->rkeys = malloc(n * sizeof *keys))) {
        free(j);
        scdb_warn("remote tier: out of memory: %zu block(s) replaced elsewhere are not refreshed", n);
        return;
    }
    memcpy(j->rkeys, keys, n * sizeof *keys);
    j->n_rkeys = n;
    j->op = BK_JOB_REMOTE_REFRESH;
    zmq_msg_init(&j->ident);
    bk_queue_push(&b->writes, j);
}

void bk_remote_watch(scdb_broker *b, int on)
{
    if (b->remote) scdb_remote_watch_replaces(b->remote, on ? on_replaced : NULL, b);
}

void bk_remote_refresh(scdb_broker *b, const scdb_key *keys, size_t n, scdb_key *again,
                       size_t *n_again)
{
    char hex[33];
    *n_again = 0;
    for (size_t i = 0; i < n; i++) {
        scdb_block *blk = NULL;
        scdb_remote_expect x;
        scdb_remote_block rb;
        size_t got = 0;
        scdb_err e;

        if (scdb_store_acquire(b->store, &keys[i], &blk)) continue;   /* not held here */
        memset(&x, 0, sizeof x);
        x.ns = blk->info.ns;
        x.parent = blk->info.parent;
        x.first_index = blk->info.block_index;
        x.token_count = blk->info.token_count;
        x.payload_len = blk->info.payload_len;
        x.payload_dtype = blk->info.payload_dtype;
        scdb_store_release(b->store, &blk);
        memset(&rb, 0, sizeof rb);
        e = scdb_remote_fetch(b->remote, &keys[i], 1, &x, &rb, &got);
        if (e) {                        /* the cluster failing: later */
            again[(*n_again)++] = keys[i];
            continue;
        }
        if (got) {                      /* the fleet's value replaces ours */
            scdb_block_put u;
            memset(&u, 0, sizeof u);
            u.key = rb.info.key;
            u.parent = rb.info.parent;
            u.block_index = rb.info.block_index;
            u.payload_dtype = rb.info.payload_dtype;
            u.n_sections = rb.info.n_sections;
            u.section_off = rb.info.section_off;
            u.payload = rb.payload;
            u.payload_len = rb.info.payload_len;
            u.replace = 1;
            u.from_remote = 1;          /* not written back, not logged again */
            e = scdb_store_put_batch(b->store, &rb.info.ns, &u, 1, NULL);
            scdb_remote_blocks_free(&rb, 1);
        } else {                        /* gone from the cluster (deleted): drop ours */
            e = scdb_store_delete(b->store, &keys[i]);
            if (e == SCDB_ENOTFOUND) e = SCDB_OK;
        }
        if (e == SCDB_EBUSY) {          /* being read (or, absent remotely, a parent) */
            again[(*n_again)++] = keys[i];
            continue;
        }
        if (e) {
            scdb_warn("remote tier: block %s was replaced or deleted by another broker; its local "
                      "copy could not be refreshed or dropped: %s", scdb_key_hex(&keys[i], hex),
                      scdb_strerror(e));
            continue;
        }
        __atomic_add_fetch(&b->remote_refreshed, 1, __ATOMIC_RELAXED);
    }
}

/* What the blocks after keys[n_local - 1] must be. */
static void expect_of(const scdb_broker *b, const scdb_broker_codebook *cb, const scdb_key *keys,
                      size_t n_local, scdb_remote_expect *x)
{
    memset(x, 0, sizeof *x);
    x->ns = cb->ns;
    if (n_local) x->parent = keys[n_local - 1];
    x->first_index = (uint32_t)n_local;
    x->token_count = b->block_tokens;
    x->payload_len = (uint64_t)b->block_tokens * cb->token_bytes;
    x->payload_dtype = cb->payload_dtype;
}

size_t bk_remote_probe(scdb_broker *b, const scdb_key *keys, size_t n_local, size_t n)
{
    size_t present = 0;
    if (!b->remote || n_local >= n) return 0;
    /* an error leaves the known-present lower bound: still a true answer */
    (void)scdb_remote_probe(b->remote, keys + n_local, n - n_local, &present);
    return present;
}

size_t bk_remote_fetch(scdb_broker *b, const scdb_broker_codebook *cb, const scdb_key *keys,
                       size_t n_local, size_t n, scdb_remote_block **out)
{
    scdb_remote_expect x;
    scdb_remote_block *blocks;
    size_t got = 0;

    *out = NULL;
    if (!b->remote || n_local >= n) return 0;
    if (!(blocks = calloc(n - n_local, sizeof *blocks))) return 0;
    expect_of(b, cb, keys, n_local, &x);
    /* an error (counted, logged by state) leaves the verified leading part */
    (void)scdb_remote_fetch(b->remote, keys + n_local, n - n_local, &x, blocks, &got);
    if (!got) {
        free(blocks);
        return 0;
    }
    *out = blocks;
    return got;
}

size_t bk_remote_insert(scdb_broker *b, const scdb_remote_block *blocks, size_t n)
{
    scdb_block_put *puts;
    size_t stored = 0;
    scdb_err e;

    if (!n || !(puts = calloc(n, sizeof *puts))) return 0;
    for (size_t i = 0; i < n; i++) {
        const scdb_block_info *in = &blocks[i].info;
        puts[i].key = in->key;
        puts[i].parent = in->parent;
        puts[i].block_index = in->block_index;
        puts[i].payload_dtype = in->payload_dtype;
        puts[i].n_sections = in->n_sections;
        puts[i].section_off = in->section_off;
        puts[i].payload = blocks[i].payload;
        puts[i].payload_len = in->payload_len;
        puts[i].from_remote = 1;
    }
    /* the namespace is the one they were verified against (no codebook
     * pointer: a reload may have freed it by the time the writer runs) */
    e = scdb_store_put_batch(b->store, &blocks[0].info.ns, puts, n, &stored);
    if (e)   /* the parent went meanwhile, no room: they stay remote only */
        scdb_debug("remote tier: kept %zu of %zu fetched blocks locally: %s", stored, n,
                   scdb_strerror(e));
    __atomic_add_fetch(&b->remote_inserted, stored, __ATOMIC_RELAXED);
    free(puts);
    return stored;
}

int bk_remote_fill_parents(scdb_broker *b, const scdb_broker_codebook *cb, const scdb_key *keys,
                           size_t n_local, size_t first)
{
    scdb_remote_block *blocks = NULL;
    size_t got, kept = 0;

    if (!b->remote || n_local >= first) return 0;
    got = bk_remote_fetch(b, cb, keys, n_local, first, &blocks);
    if (got == first - n_local) kept = bk_remote_insert(b, blocks, got);
    scdb_remote_blocks_free(blocks, got);
    free(blocks);
    return got == first - n_local && kept == got;
}

void bk_remote_del(scdb_broker *b, const scdb_key *k)
{
    if (b->remote) (void)scdb_remote_del(b->remote, k);
}

void bk_remote_fill_stats(scdb_broker *b, Scdb__StatsReply *s)
{
    scdb_remote_stat st;
    if (!b->remote) return;
    scdb_remote_stats(b->remote, &st);
    s->remote = 1;
    s->remote_up = st.up;
    s->remote_probes = st.probes;
    s->remote_probe_hit_blocks = st.probe_hit_blocks;
    s->remote_fetches = st.fetches;
    s->remote_hits = st.hits;
    s->remote_misses = st.misses;
    s->remote_bytes_read = st.bytes_read;
    s->remote_invalid = st.invalid;
    s->remote_errors = st.errors;
    s->remote_writes = st.writes;
    s->remote_bytes_written = st.bytes_written;
    s->remote_write_errors = st.write_errors;
    s->remote_queue_drops = st.queue_drops;
    s->remote_pending = st.pending;
    s->remote_inserted = __atomic_load_n(&b->remote_inserted, __ATOMIC_RELAXED);
    s->remote_state_changes = st.state_changes;
    s->remote_replace_records = st.replace_records;
    s->remote_refreshed = __atomic_load_n(&b->remote_refreshed, __ATOMIC_RELAXED);
    s->remote_replace_log_resets = st.replace_log_resets;
}
