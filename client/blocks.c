/* blocks.c — the block calls: put, put_states, lookup (index or request),
 * delete, stats. */
#include "libscdb_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static scdb_err put_blocks(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                           const void *payload, size_t payload_len, int replace,
                           scdb_put_result *out)
{
    uint64_t bb;
    size_t n_blocks, per_req, done = 0;
    scdb_put_result res = {0};
    scdb_err e = cl_need_registered(h);

    if (e) return e;
    if ((!tokens && n_tokens) || (!payload && payload_len))
        return cl_fail(h, SCDB_EINVAL, "put: NULL tokens or payload");
    bb = h->info.block_bytes;
    if (!bb || payload_len % bb)
        return cl_fail(h, SCDB_ESHAPE, "put: payload of %zu bytes is not whole blocks of %llu",
                        payload_len, (unsigned long long)bb);
    n_blocks = payload_len / bb;
    if (n_blocks > n_tokens / h->info.block_tokens ||
        first_block > n_tokens / h->info.block_tokens - n_blocks)
        return cl_fail(h, SCDB_ESHAPE, "put: %zu blocks from block %u, but %zu tokens hold %zu",
                        n_blocks, first_block, n_tokens, n_tokens / h->info.block_tokens);
    /* split into requests that fit max_request_bytes (tokens cost <= 5 B) */
    {
        uint64_t room = h->info.max_request_bytes;
        uint64_t fixed = 5ull * n_tokens + 256;
        per_req = room > fixed ? (size_t)((room - fixed) / bb) : 0;
        if (per_req == 0 && n_blocks)
            return cl_fail(h, SCDB_ETOOBIG, "put: one block of %llu bytes exceeds the "
                            "broker's max_request_bytes %llu", (unsigned long long)bb,
                            (unsigned long long)room);
    }
    do {
        size_t k = n_blocks - done < per_req ? n_blocks - done : per_req;
        uint32_t fb = first_block + (uint32_t)done;
        size_t nt = n_blocks ? (size_t)(fb + k) * h->info.block_tokens : n_tokens;
        const void **frames = NULL;
        size_t *lens = NULL;
        Scdb__Request req = SCDB__REQUEST__INIT;
        Scdb__PutRequest p = SCDB__PUT_REQUEST__INIT;
        Scdb__Reply *rep = NULL;

        if (k && (!(frames = malloc(k * sizeof *frames)) || !(lens = malloc(k * sizeof *lens)))) {
            free(frames);
            return cl_fail(h, SCDB_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < k; i++) {
            frames[i] = (const char *)payload + (done + i) * bb;
            lens[i] = bb;
        }
        p.tokens = (int32_t *)tokens;
        p.n_tokens = nt;
        p.first_block = fb;
        p.n_blocks = (uint32_t)k;
        p.replace = replace;
        req.body_case = SCDB__REQUEST__BODY_PUT;
        req.put = &p;
        e = cl_request(h, &req, (const void *const *)frames, lens, (int)k, &rep);
        free(frames);
        free(lens);
        if (rep && rep->body_case == SCDB__REPLY__BODY_PUT) {
            res.n_stored = rep->put->n_stored;
            res.n_new += rep->put->n_new;
            res.n_replaced += rep->put->n_replaced;
        }
        if (rep) scdb__reply__free_unpacked(rep, NULL);
        done += k;
        if (e) break;
    } while (done < n_blocks);
    res.n_full = (uint32_t)(n_tokens / h->info.block_tokens);
    if (out) *out = res;
    return e;
}

scdb_err scdb_put(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                  const void *payload, size_t payload_len, scdb_put_result *out)
{
    return put_blocks(h, tokens, n_tokens, first_block, payload, payload_len, 0, out);
}

scdb_err scdb_replace(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                      const void *payload, size_t payload_len, scdb_put_result *out)
{
    return put_blocks(h, tokens, n_tokens, first_block, payload, payload_len, 1, out);
}

static scdb_err put_states(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                           scdb_arena *a, int replace, scdb_put_result *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__PutStatesRequest p = SCDB__PUT_STATES_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e = cl_need_registered(h);

    if (e) return e;
    if ((!tokens && n_tokens) || !a || a->h != h) return cl_fail(h, SCDB_EINVAL, "put_states: NULL argument");
    if (!a->states_dim)
        return cl_fail(h, SCDB_EINVAL, "put_states: arena %llu is not a states arena",
                        (unsigned long long)a->id);
    if (a->gen != h->gen)
        return cl_fail(h, SCDB_ECLOSED, "arena %llu is from before a broker restart: free it "
                        "and create a new one", (unsigned long long)a->id);
    if (n_tokens > a->capacity)
        return cl_fail(h, SCDB_ERANGE, "put_states: %zu tokens, the arena holds %u", n_tokens,
                        a->capacity);
    p.tokens = (int32_t *)tokens;
    p.n_tokens = n_tokens;
    p.arena = a->id;
    p.first_block = first_block;
    p.replace = replace;
    req.body_case = SCDB__REQUEST__BODY_PUT_STATES;
    req.put_states = &p;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (rep && rep->body_case == SCDB__REPLY__BODY_PUT && out) {
        out->n_full = rep->put->n_full;
        out->n_stored = rep->put->n_stored;
        out->n_new = rep->put->n_new;
        out->n_replaced = rep->put->n_replaced;
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_put_states(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                         scdb_arena *a, scdb_put_result *out)
{
    return put_states(h, tokens, n_tokens, first_block, a, 0, out);
}

scdb_err scdb_replace_states(scdb *h, const int32_t *tokens, size_t n_tokens,
                             uint32_t first_block, scdb_arena *a, scdb_put_result *out)
{
    return put_states(h, tokens, n_tokens, first_block, a, 1, out);
}

scdb_err scdb_lookup(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_lookup_result *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__LookupRequest l = SCDB__LOOKUP_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e = cl_need_registered(h);

    if (e) return e;
    if (!tokens && n_tokens) return cl_fail(h, SCDB_EINVAL, "lookup: NULL tokens");
    if (h->lix) {
        scdb_lookup_result ir;
        e = cl_lix_lookup(h, tokens, n_tokens, &ir);
        if (e == SCDB_ECLOSED) {        /* its broker is gone: is another there? */
            h->broker_gone = 1;
            __atomic_add_fetch(&h->n_index_fallbacks, 1, __ATOMIC_RELAXED);
        } else if (e != SCDB_EBUSY) {
            if (e) return e;
            /* atomic: the heartbeat thread reports them */
            __atomic_add_fetch(&h->n_index_lookups, 1, __ATOMIC_RELAXED);
            ir.n_remote = 0;
            /* the index knows local blocks only: a prefix that stops short
             * may continue in the broker's remote tier (one request) */
            if (!h->info.remote_tier || ir.n_matched == ir.n_full) {
                if (out) *out = ir;
                return SCDB_OK;
            }
            h->n_remote_lookups++;
        } else {
            __atomic_add_fetch(&h->n_index_fallbacks, 1, __ATOMIC_RELAXED);
        }
    }
    /* the broker is gone (its index or heartbeat socket said so) and
     * nothing listens in its place: fail now, not after the timeout */
    if ((h->broker_gone || atomic_load(&h->peer_lost)) && (e = cl_broker_listens(h))) return e;
    h->n_request_lookups++;
    l.tokens = (int32_t *)tokens;
    l.n_tokens = n_tokens;
    l.remote = h->info.remote_tier;
    req.body_case = SCDB__REQUEST__BODY_LOOKUP;
    req.lookup = &l;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (!e && rep->body_case != SCDB__REPLY__BODY_LOOKUP)
        e = cl_fail(h, SCDB_EPROTO, "lookup reply without a body");
    if (!e && out) {
        out->n_full = rep->lookup->n_full;
        out->n_matched = rep->lookup->n_matched;
        out->matched_tokens = rep->lookup->matched_tokens;
        out->n_remote = rep->lookup->n_remote;
    }
    /* lost our index (replaced twice while we did not look): map the
     * current one, unless it is the one we tried last */
    if (!e && !h->lix && !h->no_index && h->have_ns && rep->lookup->lookup_index &&
        rep->lookup->lookup_index[0] && strlen(rep->lookup->lookup_index) < sizeof h->lix_name &&
        strcmp(rep->lookup->lookup_index, h->lix_name)) {
        snprintf(h->lix_name, sizeof h->lix_name, "%s", rep->lookup->lookup_index);
        /* SCDB_EINTR: the answer is not handed out; the next reply tries again */
        if ((e = cl_lix_map(h, h->lix_name))) h->lix_name[0] = 0;
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_delete(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t from_block,
                     uint32_t *n_deleted)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__DeleteRequest d = SCDB__DELETE_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e = cl_need_registered(h);

    if (e) return e;
    if (!tokens && n_tokens) return cl_fail(h, SCDB_EINVAL, "delete: NULL tokens");
    d.tokens = (int32_t *)tokens;
    d.n_tokens = n_tokens;
    d.from_block = from_block;
    req.body_case = SCDB__REQUEST__BODY_DEL;
    req.del = &d;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (n_deleted) *n_deleted = rep && rep->body_case == SCDB__REPLY__BODY_DEL ? rep->del->n_deleted : 0;
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_stats(scdb *h, scdb_stat *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__StatsRequest sr = SCDB__STATS_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    const Scdb__StatsReply *s;
    scdb_err e;

    if (!h || !out) return SCDB_EINVAL;
    req.body_case = SCDB__REQUEST__BODY_STATS;
    req.stats = &sr;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (!e && rep->body_case != SCDB__REPLY__BODY_STATS)
        e = cl_fail(h, SCDB_EPROTO, "stats reply without a body");
    if (e) goto out;
    s = rep->stats;
    memset(out, 0, sizeof *out);
#define C(f) out->f = s->f
    C(blocks); C(disk_bytes); C(disk_capacity_bytes); C(hot_blocks); C(hot_bytes);
    C(hot_capacity_bytes); C(pinned_blocks); C(lookups); C(lookup_hit_blocks);
    C(lookup_miss_blocks); C(gets); C(get_hot_hits); C(get_disk_hits); C(get_misses); C(puts);
    C(put_existing); C(evictions); C(checksum_failures); C(clients); C(arenas);
    C(arena_bytes); C(sessions); C(inflight); C(requests); C(errors); C(reclaimed_clients);
    C(reclaimed_arenas); C(reclaimed_sessions); C(broker_instance); C(uptime_s); C(workers); C(block_tokens);
    C(stale_tokens); C(reloads); C(reload_failures); C(registry_generation); C(hot_evictions);
    out->reported_index_lookups = s->index_lookups;
    C(remote); C(remote_up); C(remote_probes); C(remote_probe_hit_blocks); C(remote_fetches);
    C(remote_hits); C(remote_misses); C(remote_bytes_read); C(remote_invalid); C(remote_errors);
    C(remote_writes); C(remote_bytes_written); C(remote_write_errors); C(remote_queue_drops);
    C(remote_pending); C(remote_inserted); C(remote_state_changes); C(remote_replace_records);
    C(remote_refreshed); C(remote_replace_log_resets);
#undef C
    for (size_t i = 0; i < s->n_ops && out->n_ops < SCDB_STAT_MAX_OPS; i++) {
        int k = out->n_ops++;
        snprintf(out->ops[k].op, sizeof out->ops[k].op, "%s", s->ops[i]->op);
        out->ops[k].count = s->ops[i]->count;
        out->ops[k].errors = s->ops[i]->errors;
        out->ops[k].total_ns = s->ops[i]->total_ns;
        out->ops[k].max_ns = s->ops[i]->max_ns;
    }
    out->index_lookups = h->n_index_lookups;
    out->request_lookups = h->n_request_lookups;
    out->index_fallbacks = h->n_index_fallbacks;
    out->remote_lookups = h->n_remote_lookups;
    out->index_error = h->lix_err;
out:
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}
