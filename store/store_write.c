/* store_write.c — the writer: batched two-phase puts with leaf-first LRU
 * eviction inside the same LMDB write transaction, the undo/commit log,
 * explicit deletes (store.h; locking rules in store.c). */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- the write log */

static scdb_err store_log_op(scdb_store *s, uint8_t kind, uint32_t id, uint8_t old_state,
                       uint64_t old_bytes, size_t blk)
{
    scdb_err e = store_grow_array((void **)&s->ops, &s->cap_ops, s->n_ops + 1, sizeof *s->ops);
    if (e) return e;
    s->ops[s->n_ops++] = (op_rec){id, kind, old_state, old_bytes, blk};
    return SCDB_OK;
}

/* Mark node v (disk-evictable) as deleted in the open txn (under mu). */
scdb_err store_evict_one(scdb_store *s, uint32_t v)
{
    st_node *n = &s->nodes[v];
    scdb_err e;
    if ((e = store_log_op(s, OP_EVICT, v, n->state, n->disk_bytes, 0))) return e;
    if ((e = store_grow_array((void **)&s->dels, &s->cap_dels, s->n_dels + 1, sizeof *s->dels)))
        return e;
    s->dels[s->n_dels++] = n->key;
    if (n->state == NODE_STORED) store_visible(s, v, 0);
    n->state = NODE_EVICTING;
    store_refresh(s, v);
    s->disk_used -= n->disk_bytes;
    s->n_disk--;
    if (n->parent != SCDB_NONE) {
        s->nodes[n->parent].children--;
        store_refresh(s, n->parent);
    }
    return SCDB_OK;
}

/* Evict LRU leaves until `need` more bytes fit (under mu).  SCDB_EFULL. */
scdb_err store_make_room(scdb_store *s, uint64_t need)
{
    scdb_err e;
    if (!s->disk_cap) return SCDB_OK;
    while (s->disk_used + need > s->disk_cap) {
        uint32_t v = st_lru_peek(&s->lru[LRU_DISK]);
        if (v == SCDB_NONE) return SCDB_EFULL;
        if ((e = store_evict_one(s, v))) return e;
    }
    return SCDB_OK;
}

/* Delete the keys queued by evict_one in txn (outside mu). */
scdb_err store_flush_dels(scdb_store *s, MDB_txn *txn, int *rc_out)
{
    for (size_t i = 0; i < s->n_dels; i++) {
        MDB_val k = {16, s->dels[i].b};
        int rc = mdb_del(txn, s->db.blocks, &k, NULL);
        if (rc && rc != MDB_NOTFOUND) {
            *rc_out = rc;
            s->n_dels = 0;
            return SCDB_LMDB_FAIL(rc, "del");
        }
    }
    s->n_dels = 0;
    return SCDB_OK;
}

/* Undo the log in reverse down to `keep` entries (under mu): after an
 * aborted txn (keep 0), or for the block that failed to stage. */
void store_undo_ops(scdb_store *s, size_t keep)
{
    while (s->n_ops > keep) {
        op_rec *o = &s->ops[--s->n_ops];
        st_node *n = &s->nodes[o->id];
        switch (o->kind) {
        case OP_NEW:
            if (n->parent != SCDB_NONE) {
                s->nodes[n->parent].children--;
                store_refresh(s, n->parent);
            }
            st_index_remove(&s->index, s->nodes, o->id);
            s->disk_used -= n->disk_bytes;
            s->n_disk--;
            n->state = NODE_FREE;
            store_refresh(s, o->id);
            store_node_release(s, o->id);
            break;
        case OP_REWRITE:
            s->disk_used = s->disk_used - n->disk_bytes + o->old_bytes;
            n->disk_bytes = o->old_bytes;
            n->state = NODE_BAD;
            store_refresh(s, o->id);
            break;
        case OP_REPLACE:              /* the old value stays in LMDB */
            s->disk_used = s->disk_used - n->disk_bytes + o->old_bytes;
            n->disk_bytes = o->old_bytes;
            n->replacing = 0;
            store_refresh(s, o->id);
            break;
        case OP_EVICT:
            n->state = o->old_state;
            if (n->state == NODE_STORED) store_visible(s, o->id, 1);
            s->disk_used += n->disk_bytes;
            s->n_disk++;
            if (n->parent != SCDB_NONE) {
                s->nodes[n->parent].children++;
                store_refresh(s, n->parent);
            }
            store_refresh(s, o->id);
            break;
        }
    }
    s->n_dels = 0;
}

/* Apply the log after a commit (under mu). */
void store_commit_ops(scdb_store *s)
{
    for (size_t i = 0; i < s->n_ops; i++) {
        op_rec *o = &s->ops[i];
        st_node *n = &s->nodes[o->id];
        if (o->kind == OP_EVICT) {
            store_hot_drop(s, o->id);
            if (s->on_evict) s->on_evict(s->on_evict_ctx, &n->key);
            st_index_remove(&s->index, s->nodes, o->id);
            store_node_release(s, o->id);
            s->ctr.evictions++;
        } else if (o->kind == OP_REPLACE) {
            n->replacing = 0;             /* visible all along */
            store_refresh(s, o->id);
            s->ctr.puts++;
            s->ctr.put_replaced++;
        } else {
            n->state = NODE_STORED;
            store_visible(s, o->id, 1);
            store_refresh(s, o->id);
            s->ctr.puts++;
        }
    }
}

static void store_release_tpins(scdb_store *s)
{
    for (size_t i = 0; i < s->n_tpins; i++)
        if (--s->nodes[s->tpins[i]].wpins == 0) store_refresh(s, s->tpins[i]);
    s->n_tpins = 0;
}

static scdb_err store_tpin(scdb_store *s, const scdb_key *k)
{
    uint32_t id = store_find(s, k, ST(NODE_STORED) | ST(NODE_BAD));
    scdb_err e;
    if (id == SCDB_NONE) return SCDB_OK;
    if ((e = store_grow_array((void **)&s->tpins, &s->cap_tpins, s->n_tpins + 1, sizeof *s->tpins)))
        return e;
    s->tpins[s->n_tpins++] = id;
    if (s->nodes[id].wpins++ == 0) store_refresh(s, id);
    return SCDB_OK;
}

/* ------------------------------------------------------------------- puts */

static scdb_err check_put(const scdb_block_put *b)
{
    if ((!b->payload && b->payload_len) || (!b->section_off && b->n_sections))
        return SCDB_EINVAL;
    if (b->payload_len > SCDB_BLOCK_MAX_PAYLOAD) return SCDB_ETOOBIG;
    if (b->n_sections > SCDB_BLOCK_MAX_SECTIONS) return SCDB_ERANGE;
    if ((b->block_index == 0) != (scdb_key_is_zero(&b->parent) != 0)) return SCDB_EINVAL;
    if (scdb_key_is_zero(&b->key)) return SCDB_EINVAL;
    for (uint32_t i = 0; i < b->n_sections; i++) {
        uint64_t off = b->section_off[i];
        if (off > b->payload_len || (off == b->payload_len && b->payload_len) ||
            (i && off < b->section_off[i - 1]))
            return SCDB_ERANGE;
    }
    return SCDB_OK;
}

/* Register block b in the index as PENDING (under mu), evicting as needed.
 * *skip = true when it is already stored.  *id_io: in, the node of the
 * previous block of the batch (SCDB_NONE if none), which saves a lookup
 * when it is b's parent; out, b's node. */
static scdb_err stage_block(scdb_store *s, const scdb_block_put *b, const scdb_key *prev,
                            size_t blk, uint64_t fp, bool *skip, uint32_t *id_io)
{
    uint32_t id = st_index_find(&s->index, s->nodes, &b->key), pid = SCDB_NONE;
    scdb_err e;

    *skip = false;
    if (id != SCDB_NONE && b->replace && s->nodes[id].state == NODE_STORED) {
        /* replace: overwrite the value in place; it stays visible (lookups
         * match it throughout).  A reader holding it now (pins) may read
         * its hot copy: refused, try again. */
        st_node *n = &s->nodes[id];
        uint64_t old = n->disk_bytes;
        if (n->pins) return SCDB_EBUSY;
        if (s->disk_cap && fp > s->disk_cap) return SCDB_ETOOBIG;
        if ((e = store_make_room(s, fp > old ? fp - old : 0))) return e;
        if ((e = store_log_op(s, OP_REPLACE, id, NODE_STORED, old, blk))) return e;
        n = &s->nodes[id];
        store_hot_drop(s, id);
        n->replacing = 1;
        n->disk_bytes = fp;
        s->disk_used = s->disk_used - old + fp;
        store_touch(s, id);
        store_refresh(s, id);
        *id_io = id;
        return SCDB_OK;
    }
    if (id != SCDB_NONE && (s->nodes[id].state == NODE_STORED ||
                            s->nodes[id].state == NODE_PENDING)) {
        if (s->nodes[id].state == NODE_STORED) {
            store_touch(s, id);
            s->ctr.put_existing++;
        }
        *skip = true;
        *id_io = id;
        return SCDB_OK;
    }
    if (!scdb_key_is_zero(&b->parent)) {
        if (*id_io != SCDB_NONE && prev && !memcmp(prev->b, b->parent.b, 16))
            pid = *id_io;
        else
            pid = store_find(s, &b->parent, ST(NODE_STORED) | ST(NODE_PENDING) | ST(NODE_BAD));
        if (pid == SCDB_NONE) return SCDB_ENOTFOUND;
        if (s->nodes[pid].block_index + 1 != b->block_index) return SCDB_EINVAL;
    }
    if (s->disk_cap && fp > s->disk_cap) return SCDB_ETOOBIG;
    if (id != SCDB_NONE) {                       /* NODE_BAD: rewrite in place */
        st_node *n = &s->nodes[id];
        uint64_t old = n->disk_bytes;
        if ((e = store_make_room(s, fp > old ? fp - old : 0))) return e;
        if ((e = store_log_op(s, OP_REWRITE, id, NODE_BAD, old, blk))) return e;
        n = &s->nodes[id];
        n->state = NODE_PENDING;
        n->disk_bytes = fp;
        s->disk_used = s->disk_used - old + fp;
        store_touch(s, id);
        store_refresh(s, id);
        *id_io = id;
        return SCDB_OK;
    }
    if ((e = store_make_room(s, fp))) return e;
    if ((e = store_node_alloc(s, &id))) return e;
    s->nodes[id].key = b->key;
    s->nodes[id].block_index = b->block_index;
    s->nodes[id].disk_bytes = fp;
    s->nodes[id].state = NODE_PENDING;
    s->nodes[id].parent = pid;
    s->nodes[id].tick = ++s->clock;
    if ((e = st_index_insert(&s->index, s->nodes, id))) {
        store_node_release(s, id);
        return e;
    }
    if ((e = store_log_op(s, OP_NEW, id, NODE_FREE, 0, blk))) {
        st_index_remove(&s->index, s->nodes, id);
        store_node_release(s, id);
        return e;
    }
    if (pid != SCDB_NONE) {
        s->nodes[pid].children++;
        store_refresh(s, pid);
    }
    s->disk_used += fp;
    s->n_disk++;
    *id_io = id;
    return SCDB_OK;
}

/* Write block b's value into the txn (outside mu). */
/* The header fields of block b (only those the header uses: no 2 KiB memset
 * of the section table per block). */
static void fill_info(const scdb_store *s, const scdb_ns *ns, const scdb_block_put *b,
                      scdb_block_info *info)
{
    info->key = b->key;
    info->parent = b->parent;
    info->ns = *ns;
    info->block_index = b->block_index;
    info->token_count = s->block_tokens;
    info->payload_dtype = b->payload_dtype;
    info->n_sections = b->n_sections;
    info->payload_len = b->payload_len;
    if (b->n_sections)
        memcpy(info->section_off, b->section_off, sizeof(uint64_t) * b->n_sections);
}

static int write_value(scdb_store *s, MDB_txn *txn, const scdb_ns *ns,
                       const scdb_block_put *b, size_t hl)
{
    scdb_block_info *info = s->winfo;
    MDB_val k = {16, (void *)b->key.b}, v = {hl + (size_t)b->payload_len, NULL};
    int rc = mdb_put(txn, s->db.blocks, &k, &v, MDB_RESERVE);
    if (rc) return rc;
    fill_info(s, ns, b, info);
    st_block_value_header(info, v.mv_data);
    if (b->payload_len) memcpy((uint8_t *)v.mv_data + hl, b->payload, (size_t)b->payload_len);
    st_block_value_seal(v.mv_data, v.mv_size);
    return 0;
}

/* Copy the blocks just committed into the hot tier (writer, after commit).
 * Newest first, and only as many as the tier holds: older ones would be
 * evicted by the newer ones at once (LRU order comes from the ticks set at
 * staging, not from the order of attachment). */
static void hot_after_put(scdb_store *s, const scdb_ns *ns, const scdb_block_put *blocks,
                          const op_rec *ops, size_t n_ops)
{
    scdb_block_info *info = s->winfo;
    uint8_t hdr[SCDB_BLOCK_FIXED_HEADER + 8 * SCDB_BLOCK_MAX_SECTIONS + 16];
    uint64_t budget = s->hot->capacity_bytes;
    for (size_t i = n_ops; i-- > 0;) {
        const scdb_block_put *b;
        uint8_t *hcopy;
        void *slot;
        size_t hl;
        if (ops[i].kind == OP_EVICT) continue;
        b = &blocks[ops[i].blk];
        hl = scdb_block_header_len(b->n_sections);
        if (b->payload_len + hl > budget) break;
        budget -= b->payload_len + hl;
        fill_info(s, ns, b, info);
        st_block_value_header(info, hdr);
        if (store_hot_fill(s, hdr, hl, b->payload, b->payload_len, &slot, &hcopy)) continue;
        store_lock(s);
        {
            uint32_t id = store_find(s, &b->key, ST(NODE_STORED));
            scdb_err e = id == SCDB_NONE ? SCDB_EBUSY
                         : store_hot_attach(s, id, slot, hcopy, (uint32_t)hl, b->payload_len);
            store_unlock(s);
            if (e) {
                s->hot->ops->free(s->hot, slot);
                free(hcopy);
            }
        }
    }
}

/* Report the blocks just committed to opts.on_written (writer, after the
 * commit, outside mu), in batch order: new, rewritten and replaced blocks,
 * not those that came from the remote tier. */
static void written_after_put(scdb_store *s, const scdb_ns *ns, const scdb_block_put *blocks,
                              const op_rec *ops, size_t n_ops)
{
    for (size_t i = 0; i < n_ops; i++) {
        const scdb_block_put *b;
        if (ops[i].kind == OP_EVICT) continue;
        b = &blocks[ops[i].blk];
        if (b->from_remote) continue;
        fill_info(s, ns, b, s->winfo);
        s->on_written(s->on_written_ctx, s->winfo, b->payload, ops[i].kind == OP_REPLACE);
    }
}

/* ------------------------------------------------------------ disk full */

/* A write that failed with LMDB code rc (writer, store lock not held):
 * SCDB_ENOSPC when the filesystem is full -- logged once, when the store
 * goes from writing to full, not per put -- else rc logged and mapped as
 * any LMDB failure.  need: the bytes the transaction wrote. */
static scdb_err write_failed(scdb_store *s, int rc, const char *what, uint64_t need,
                             const char *file, int line)
{
    uint64_t avail;
    bool was_full;

    if (!scdb_lmdb_disk_full(&s->db, rc, need, &avail)) return st_lmdb_fail(rc, what, file, line);
    store_lock(s);
    was_full = s->ctr.disk_full != 0;
    s->ctr.disk_full = 1;
    s->ctr.disk_free_bytes = avail == UINT64_MAX ? 0 : avail;
    store_unlock(s);
    if (!was_full)
        scdb_error("store: disk full: the filesystem of %s has %llu bytes free (%s); puts are "
                   "refused (SCDB_ENOSPC) until space is freed", s->db.dir,
                   (unsigned long long)s->ctr.disk_free_bytes, mdb_strerror(rc));
    return SCDB_ENOSPC;
}
#define WRITE_FAILED(s, rc, what, need) write_failed((s), (rc), (what), (need), __FILE__, __LINE__)

/* A commit went through: a full disk is not full any more (logged once). */
static void write_succeeded(scdb_store *s)
{
    if (!s->ctr.disk_full) return;     /* only the writer sets it */
    store_lock(s);
    s->ctr.disk_full = 0;
    store_unlock(s);
    scdb_info("store: disk space again on %s (%llu bytes free): puts are stored again",
              s->db.dir, (unsigned long long)scdb_lmdb_free_bytes(&s->db));
}

/* One write txn over blocks[0..n): *done = blocks stored (committed or
 * already there).  On a block-level error the blocks before it are
 * committed. */
static scdb_err put_chunk(scdb_store *s, const scdb_ns *ns,
                          const scdb_block_put *blocks, size_t n, size_t *done)
{
    MDB_txn *txn = NULL;
    scdb_err e, block_err;
    uint32_t prev_id;
    uint64_t need;
    size_t i;
    int rc;

    *done = 0;
retry:
    block_err = SCDB_OK;
    rc = 0;
    need = 0;
    store_lock(s);
    e = SCDB_OK;
    /* Guard what the batch relies on against its own evictions: blocks it
     * will skip and parents outside it (a chained block's parent is the
     * block before it, which is pending or guarded already). */
    for (i = 0; i < n && !e; i++) {
        e = store_tpin(s, &blocks[i].key);
        if (!e && !scdb_key_is_zero(&blocks[i].parent) &&
            (i == 0 || memcmp(blocks[i].parent.b, blocks[i - 1].key.b, 16)))
            e = store_tpin(s, &blocks[i].parent);
    }
    store_unlock(s);
    if (e || (e = st_lmdb_write_begin(&s->db, &txn))) {
        store_lock(s);
        store_release_tpins(s);
        store_unlock(s);
        return e;
    }
    for (i = 0, prev_id = SCDB_NONE; i < n; i++) {
        const scdb_block_put *b = &blocks[i];
        size_t hl = scdb_block_header_len(b->n_sections);
        uint64_t fp = st_lmdb_footprint(&s->db, hl + (size_t)b->payload_len);
        size_t ops_before;
        bool skip;

        store_lock(s);
        ops_before = s->n_ops;
        e = stage_block(s, b, i ? &blocks[i - 1].key : NULL, i, fp, &skip, &prev_id);
        /* A failing block may have staged evictions for itself: undo them
         * so that only the blocks before it commit. */
        if (e) store_undo_ops(s, ops_before);
        store_unlock(s);
        if (e) {
            block_err = e;
            break;
        }
        if (skip) continue;
        if ((e = store_flush_dels(s, txn, &rc))) goto abort;
        need += fp;
        if ((rc = write_value(s, txn, ns, b, hl))) {
            e = WRITE_FAILED(s, rc, "put", need);
            goto abort;
        }
    }
    if (s->n_ops == 0) {               /* nothing to write: skip the fsync */
        st_lmdb_write_abort(&s->db, txn);
        store_lock(s);
        store_release_tpins(s);
        store_unlock(s);
        *done = i;
        return block_err;
    }
    if ((rc = st_lmdb_write_commit(&s->db, txn))) {
        txn = NULL;
        e = WRITE_FAILED(s, rc, "commit", need);
        goto undo;
    }
    write_succeeded(s);
    store_lock(s);
    store_commit_ops(s);
    store_release_tpins(s);
    store_unlock(s);
    if (s->hot && s->hot_on_put) hot_after_put(s, ns, blocks, s->ops, s->n_ops);
    if (s->on_written) written_after_put(s, ns, blocks, s->ops, s->n_ops);
    s->n_ops = 0;
    *done = i;
    return block_err;
abort:
    st_lmdb_write_abort(&s->db, txn);
undo:
    store_lock(s);
    store_undo_ops(s, 0);
    store_release_tpins(s);
    store_unlock(s);
    if (rc == MDB_MAP_FULL) {
        if ((e = st_lmdb_grow(&s->db))) return e;
        store_lock(s);
        s->ctr.map_growths++;
        s->ctr.map_bytes = s->db.map_size;
        store_unlock(s);
        goto retry;
    }
    return e;
}

scdb_err scdb_store_put_batch(scdb_store *s, const scdb_ns *ns,
                              const scdb_block_put *blocks, size_t n,
                              size_t *n_stored)
{
    size_t done = 0;
    scdb_err e = SCDB_OK;

    if (n_stored) *n_stored = 0;
    if (!s || !ns || (!blocks && n)) return SCDB_EINVAL;
    for (size_t i = 0; i < n; i++)
        if ((e = check_put(&blocks[i]))) return e;
    pthread_mutex_lock(&s->write_mu);
    while (done < n && !e) {
        size_t end = done, k = 0;
        uint64_t bytes = 0;
        /* chunk: at least one block, up to TXN_BYTES of payload */
        do {
            bytes += blocks[end].payload_len;
            end++;
        } while (end < n && bytes + blocks[end].payload_len <= TXN_BYTES);
        e = put_chunk(s, ns, blocks + done, end - done, &k);
        done += k;
    }
    if (e == SCDB_ENOSPC) {
        store_lock(s);
        s->ctr.disk_full_refusals += n - done;
        store_unlock(s);
    }
    pthread_mutex_unlock(&s->write_mu);
    if (n_stored) *n_stored = done;
    return e;
}

/* ----------------------------------------------------------------- delete */

scdb_err scdb_store_delete(scdb_store *s, const scdb_key *key)
{
    MDB_txn *txn;
    MDB_val k;
    uint32_t id;
    scdb_err e;
    int rc;

    if (!s || !key) return SCDB_EINVAL;
    pthread_mutex_lock(&s->write_mu);
    store_lock(s);
    id = store_find(s, key, ST(NODE_STORED) | ST(NODE_BAD));
    if (id == SCDB_NONE) e = SCDB_ENOTFOUND;
    else if (s->nodes[id].pins || s->nodes[id].children) e = SCDB_EBUSY;
    else e = store_evict_one(s, id);
    s->n_dels = 0;
    store_unlock(s);
    if (e) goto out;
    if ((e = st_lmdb_write_begin(&s->db, &txn))) goto undo;
    k = (MDB_val){16, (void *)key->b};
    rc = mdb_del(txn, s->db.blocks, &k, NULL);
    if (rc && rc != MDB_NOTFOUND) {
        st_lmdb_write_abort(&s->db, txn);
        e = WRITE_FAILED(s, rc, "del", 0);
        goto undo;
    }
    if ((rc = st_lmdb_write_commit(&s->db, txn))) {
        e = WRITE_FAILED(s, rc, "commit", 0);
        goto undo;
    }
    write_succeeded(s);
    store_lock(s);
    /* an explicit delete is not an eviction: apply the log by hand */
    store_hot_drop(s, id);
    st_index_remove(&s->index, s->nodes, id);
    store_node_release(s, id);
    s->n_ops = 0;
    store_unlock(s);
    goto out;
undo:
    store_lock(s);
    store_undo_ops(s, 0);
    store_unlock(s);
out:
    pthread_mutex_unlock(&s->write_mu);
    return e;
}
