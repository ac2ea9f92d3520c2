/* store_read.c — readers: longest-prefix lookup, verified gets (copy out
 * or pinned handle, with promotion to the hot tier), pins (store.h;
 * locking rules in store.c). */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- lookup */

scdb_err scdb_store_lookup(scdb_store *s, const scdb_ns *ns,
                           const int32_t *tokens, size_t n_tokens,
                           scdb_key *keys_out, size_t max_keys,
                           size_t *n_full, size_t *n_matched)
{
    scdb_key chunk[LOOKUP_CHUNK], prev = {{0}};
    size_t full, matched = 0, i = 0;
    bool missed = false;

    if (!s || !ns || !n_full || !n_matched || (!tokens && n_tokens) ||
        (!keys_out && max_keys))
        return SCDB_EINVAL;
    full = n_tokens / s->block_tokens;
    while (i < full && (!missed || i < max_keys)) {
        size_t m = full - i < LOOKUP_CHUNK ? full - i : LOOKUP_CHUNK;
        /* hash straight into keys_out while it has room */
        scdb_key *dst = i + m <= max_keys ? keys_out + i : chunk;
        scdb_block_key_continue(i ? &prev : NULL, ns, tokens + i * s->block_tokens, m,
                                s->block_tokens, dst);
        prev = dst[m - 1];
        if (dst == chunk && i < max_keys)
            memcpy(keys_out + i, chunk, (max_keys - i) * sizeof *chunk);
        if (!missed) {
            store_lock(s);
            for (size_t j = 0; j < m; j++) {
                uint32_t id = store_find(s, &dst[j], ST(NODE_STORED));
                if (id == SCDB_NONE) {
                    missed = true;
                    break;
                }
                store_touch(s, id);
                matched++;
            }
            store_unlock(s);
        }
        i += m;
    }
    store_lock(s);
    s->ctr.lookups++;
    s->ctr.lookup_hit_blocks += matched;
    s->ctr.lookup_miss_blocks += full - matched;
    store_unlock(s);
    *n_full = full;
    *n_matched = matched;
    return SCDB_OK;
}

/* ------------------------------------------------------------------- gets */

/* Read and verify a value from LMDB (outside mu).  Copies the payload to
 * dst (if given and big enough) and/or into a new hot slot or private copy
 * (if want_slot / want_copy).  Corruption -> SCDB_ECHECKSUM (logged). */
typedef struct disk_read {
    void *dst;
    size_t dst_cap;
    bool want_slot, want_copy;
    scdb_block_info *info;
    void *slot;                 /* out */
    uint8_t *hdr;               /* out, with slot */
    uint32_t hdr_len;
    void *copy;                 /* out */
} disk_read;

static scdb_err read_disk(scdb_store *s, const scdb_key *key, disk_read *r)
{
    MDB_txn *txn;
    MDB_val k = {16, (void *)key->b}, v;
    const void *payload;
    scdb_err e;
    int rc;

    if ((e = st_lmdb_read_begin(&s->db, &txn))) return e;
    rc = mdb_get(txn, s->db.blocks, &k, &v);
    if (rc) {
        e = rc == MDB_NOTFOUND ? SCDB_ENOTFOUND : SCDB_LMDB_FAIL(rc, "get");
        goto out;
    }
    if ((e = scdb_block_value_decode(v.mv_data, v.mv_size, key, r->info, &payload))) {
        char hex[33];
        scdb_error("store: block %s failed verification (%s): treated as a miss",
                   scdb_key_hex(key, hex), scdb_strerror(e));
        e = SCDB_ECHECKSUM;
        goto out;
    }
    if (r->dst) {
        if (r->dst_cap < r->info->payload_len) {
            e = SCDB_ETOOBIG;
            goto out;
        }
        memcpy(r->dst, payload, (size_t)r->info->payload_len);
    }
    if (r->want_slot) {
        size_t hl = (const uint8_t *)payload - (const uint8_t *)v.mv_data;
        if (store_hot_fill(s, v.mv_data, hl, payload, r->info->payload_len, &r->slot, &r->hdr))
            r->slot = NULL;             /* no room in RAM: just not cached */
        else
            r->hdr_len = (uint32_t)hl;
    }
    if (r->want_copy) {
        if (!(r->copy = malloc(r->info->payload_len ? (size_t)r->info->payload_len : 1))) {
            e = SCDB_ENOMEM;
            goto out;
        }
        memcpy(r->copy, payload, (size_t)r->info->payload_len);
    }
out:
    st_lmdb_read_end(&s->db, txn);
    if (e && r->slot) {
        s->hot->ops->free(s->hot, r->slot);
        free(r->hdr);
        r->slot = NULL;
        r->hdr = NULL;
    }
    return e;
}

/* Header of a hot copy into info (under mu). */
static void hot_info(const st_node *n, scdb_block_info *info)
{
    st_block_value_parse(n->hot_hdr, n->hot_hdr_len + n->hot_payload, info, NULL);
}

/* After read_disk for a pinned node (under mu): account the outcome, attach
 * the slot.  Returns the attach result for acquire (0 if not wanted). */
static scdb_err after_disk(scdb_store *s, uint32_t id, scdb_err e, disk_read *r,
                           bool need_attach)
{
    scdb_err ae = SCDB_OK;
    if (e == SCDB_ECHECKSUM) {
        s->ctr.checksum_failures++;
        if (s->nodes[id].state == NODE_STORED) {
            s->nodes[id].state = NODE_BAD;
            store_visible(s, id, 0);
            s->nodes[id].tick = 0;        /* first in line for eviction */
            if (s->nodes[id].heap_pos[LRU_DISK] >= 0)
                st_lru_update(&s->lru[LRU_DISK], s->nodes, id);
        }
    }
    if (e) {
        s->ctr.get_misses++;
        return SCDB_OK;
    }
    s->ctr.get_disk_hits++;
    if (r->slot) {
        ae = store_hot_attach(s, id, r->slot, r->hdr, r->hdr_len, r->info->payload_len);
        if (ae == SCDB_OK) {
            r->slot = NULL;
            r->hdr = NULL;
        } else if (ae == SCDB_EBUSY && s->nodes[id].hot_slot) {
            ae = SCDB_OK;                 /* another reader cached it first */
        }
    } else if (need_attach) {
        ae = SCDB_ENOMEM;
    }
    return need_attach ? ae : SCDB_OK;
}

static void drop_unattached(scdb_store *s, disk_read *r)
{
    if (r->slot) {
        s->hot->ops->free(s->hot, r->slot);
        free(r->hdr);
        r->slot = NULL;
        r->hdr = NULL;
    }
}

scdb_err scdb_store_get(scdb_store *s, const scdb_key *key, void *dst,
                        size_t dst_cap, scdb_block_info *info)
{
    static _Thread_local scdb_block_info tls_info;
    disk_read r = {0};
    uint32_t id;
    scdb_err e;

    if (!s || !key || (!dst && dst_cap)) return SCDB_EINVAL;
    if (!info) info = &tls_info;
    store_lock(s);
    s->ctr.gets++;
    id = store_find(s, key, ST(NODE_STORED) | ST(NODE_BAD));
    if (id == SCDB_NONE || s->nodes[id].state == NODE_BAD) {
        s->ctr.get_misses++;
        e = id == SCDB_NONE ? SCDB_ENOTFOUND : SCDB_ECHECKSUM;
        store_unlock(s);
        return e;
    }
    store_pin_node(s, id);
    store_touch(s, id);
    if (s->nodes[id].hot_slot) {
        void *slot = s->nodes[id].hot_slot;
        hot_info(&s->nodes[id], info);
        s->ctr.get_hot_hits++;
        store_unlock(s);
        if (dst_cap < info->payload_len) e = SCDB_ETOOBIG;
        else e = s->hot->ops->read(s->hot, slot, 0, dst, (size_t)info->payload_len);
        store_lock(s);
        store_unpin_node(s, id);
        store_unlock(s);
        return e;
    }
    store_unlock(s);
    r.dst = dst;
    r.dst_cap = dst_cap;
    r.info = info;
    /* Without a destination this is a size query: verify, cache nothing. */
    r.want_slot = s->hot != NULL && dst != NULL;
    e = read_disk(s, key, &r);
    if (!dst && !e) e = info->payload_len ? SCDB_ETOOBIG : SCDB_OK;
    store_lock(s);
    after_disk(s, id, e == SCDB_ETOOBIG ? SCDB_OK : e, &r, false);
    store_unpin_node(s, id);
    store_unlock(s);
    drop_unattached(s, &r);
    return e;
}

scdb_err scdb_store_acquire(scdb_store *s, const scdb_key *key, scdb_block **out)
{
    disk_read r = {0};
    scdb_block *b;
    uint32_t id;
    scdb_err e, ae;

    if (!s || !key || !out) return SCDB_EINVAL;
    *out = NULL;
    if (!(b = calloc(1, sizeof *b))) return SCDB_ENOMEM;
    store_lock(s);
    s->ctr.gets++;
    id = store_find(s, key, ST(NODE_STORED) | ST(NODE_BAD));
    if (id == SCDB_NONE || s->nodes[id].state == NODE_BAD) {
        s->ctr.get_misses++;
        e = id == SCDB_NONE ? SCDB_ENOTFOUND : SCDB_ECHECKSUM;
        store_unlock(s);
        free(b);
        return e;
    }
    store_pin_node(s, id);
    store_touch(s, id);
    b->node_ = id;
    if (s->nodes[id].hot_slot) {
        hot_info(&s->nodes[id], &b->info);
        b->payload = s->hot->ops->addr(s->hot, s->nodes[id].hot_slot);
        b->tier = s->hot->ops->name;
        s->ctr.get_hot_hits++;
        store_unlock(s);
        *out = b;
        return SCDB_OK;
    }
    /* a staged replace (the writer's commit under way): LMDB is read, the
     * old value until the commit and the new after, and the hot tier takes
     * no copy; so a private copy (the pin keeps a replace from starting
     * once it is held) */
    bool cache = s->hot != NULL && !s->nodes[id].replacing;
    store_unlock(s);
    r.info = &b->info;
    r.want_slot = cache;
    r.want_copy = !cache;
    e = read_disk(s, key, &r);
    store_lock(s);
    ae = after_disk(s, id, e, &r, cache);
    if (!e && ae) e = ae;
    if (!e && cache) {
        b->payload = s->hot->ops->addr(s->hot, s->nodes[id].hot_slot);
        b->tier = s->hot->ops->name;
    } else if (!e) {
        b->payload = b->copy_ = r.copy;
        b->tier = "copy";
    }
    if (e) store_unpin_node(s, id);
    store_unlock(s);
    drop_unattached(s, &r);
    if (e) {
        free(r.copy);
        free(b);
        return e;
    }
    *out = b;
    return SCDB_OK;
}

void scdb_store_release(scdb_store *s, scdb_block **bp)
{
    scdb_block *b;
    if (!bp || !(b = *bp)) return;
    if (s) {
        store_lock(s);
        store_unpin_node(s, b->node_);
        store_unlock(s);
    }
    free(b->copy_);
    free(b);
    *bp = NULL;
}

/* ------------------------------------------------------------------- pins */

scdb_err scdb_store_pin(scdb_store *s, const scdb_key *key)
{
    uint32_t id;
    if (!s || !key) return SCDB_EINVAL;
    store_lock(s);
    id = store_find(s, key, ST(NODE_STORED));
    if (id != SCDB_NONE) store_pin_node(s, id);
    store_unlock(s);
    return id == SCDB_NONE ? SCDB_ENOTFOUND : SCDB_OK;
}

scdb_err scdb_store_unpin(scdb_store *s, const scdb_key *key)
{
    scdb_err e = SCDB_OK;
    uint32_t id;
    if (!s || !key) return SCDB_EINVAL;
    store_lock(s);
    id = store_find(s, key, ST(NODE_STORED) | ST(NODE_BAD) | ST(NODE_PENDING));
    if (id == SCDB_NONE) e = SCDB_ENOTFOUND;
    else if (s->nodes[id].pins == 0) e = SCDB_EINVAL;
    else store_unpin_node(s, id);
    store_unlock(s);
    return e;
}
