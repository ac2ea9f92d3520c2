/* store.c — the block store's state and lifecycle: node and LRU helpers,
 * hot-tier attachment, open (index rebuild from LMDB), close, stats.
 * Writes are in store_write.c, reads in store_read.c (store.h).
 *
 * Locks.  `write_mu` admits one writer (put_batch, delete).  `mu` guards all
 * in-memory state (nodes, index, LRU heaps, counters, hot slots) and is held
 * only for short non-blocking sections: never across LMDB I/O, a payload
 * copy or a commit.  LMDB transactions hold the env's map lock shared
 * (lmdb_env.c).  Order: map lock, then mu; a thread holding mu never waits
 * for the map lock.
 *
 * Node states.  A block written in the open write txn is PENDING and a block
 * deleted in it is EVICTING; readers treat both as absent, which matches
 * what LMDB shows them until the commit.  The writer logs every change it
 * makes to the index during a txn, applies the log on commit and undoes it
 * in reverse on abort (e.g. MDB_MAP_FULL: undo, grow the map, retry). */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ small helpers */

scdb_err store_grow_array(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 16;
    void *q;
    if (need <= *cap) return SCDB_OK;
    while (c < need) c *= 2;
    if (!(q = realloc(*p, c * elem))) return SCDB_ENOMEM;
    *p = q;
    *cap = c;
    return SCDB_OK;
}

void store_lock(scdb_store *s) { pthread_mutex_lock(&s->mu); }
void store_unlock(scdb_store *s) { pthread_mutex_unlock(&s->mu); }

static bool store_disk_evictable(const st_node *n)
{
    return (n->state == NODE_STORED || n->state == NODE_BAD) &&
           n->children == 0 && n->pins == 0 && n->wpins == 0;
}

static bool store_hot_evictable(const st_node *n)
{
    return n->hot_slot && n->pins == 0 && n->state != NODE_EVICTING;
}

void store_visible(scdb_store *s, uint32_t id, int visible)
{
    if (s->on_visible) s->on_visible(s->on_visible_ctx, &s->nodes[id].key, visible);
}

/* Put node id into exactly the heaps it belongs to now. */
void store_refresh(scdb_store *s, uint32_t id)
{
    st_node *n = &s->nodes[id];
    bool want[2] = {store_disk_evictable(n), store_hot_evictable(n)};
    for (int w = 0; w < 2; w++) {
        bool in = n->heap_pos[w] >= 0;
        if (want[w] && !in) st_lru_push(&s->lru[w], s->nodes, id);
        else if (!want[w] && in) st_lru_remove(&s->lru[w], s->nodes, id);
    }
}

void store_touch(scdb_store *s, uint32_t id)
{
    st_node *n = &s->nodes[id];
    n->tick = ++s->clock;
    for (int w = 0; w < 2; w++)
        if (n->heap_pos[w] >= 0) st_lru_update(&s->lru[w], s->nodes, id);
}

void store_pin_node(scdb_store *s, uint32_t id)
{
    if (s->nodes[id].pins++ == 0) {
        s->n_pinned++;
        store_refresh(s, id);
    }
}

void store_unpin_node(scdb_store *s, uint32_t id)
{
    if (--s->nodes[id].pins == 0) {
        s->n_pinned--;
        store_refresh(s, id);
    }
}

scdb_err store_node_alloc(scdb_store *s, uint32_t *out)
{
    uint32_t id;
    if (s->n_free) {
        id = s->free_ids[--s->n_free];
    } else {
        if (s->n_nodes == s->cap_nodes) {
            size_t c = s->cap_nodes ? 2 * s->cap_nodes : 1024;
            void *p;
            if (c > SCDB_NONE - 1) return SCDB_ENOMEM;
            if (!(p = realloc(s->nodes, c * sizeof *s->nodes))) return SCDB_ENOMEM;
            s->nodes = p;
            for (int w = 0; w < 2; w++) {
                if (!(p = realloc(s->lru[w].heap, c * sizeof(uint32_t)))) return SCDB_ENOMEM;
                s->lru[w].heap = p;
            }
            if (!(p = realloc(s->free_ids, c * sizeof(uint32_t)))) return SCDB_ENOMEM;
            s->free_ids = p;
            s->cap_nodes = c;
        }
        id = (uint32_t)s->n_nodes++;
    }
    memset(&s->nodes[id], 0, sizeof s->nodes[id]);
    s->nodes[id].parent = SCDB_NONE;
    s->nodes[id].heap_pos[0] = s->nodes[id].heap_pos[1] = -1;
    *out = id;
    return SCDB_OK;
}

void store_node_release(scdb_store *s, uint32_t id)
{
    s->nodes[id].state = NODE_FREE;
    s->free_ids[s->n_free++] = id;
}

/* Find a node in one of `states` (bit mask of 1 << NODE_x). */
uint32_t store_find(const scdb_store *s, const scdb_key *k, unsigned states)
{
    uint32_t id = st_index_find(&s->index, s->nodes, k);
    if (id == SCDB_NONE || !(states & (1u << s->nodes[id].state))) return SCDB_NONE;
    return id;
}

/* ---------------------------------------------------------------- hot tier */

void store_hot_drop(scdb_store *s, uint32_t id)
{
    st_node *n = &s->nodes[id];
    if (!n->hot_slot) return;
    s->hot->ops->free(s->hot, n->hot_slot);
    free(n->hot_hdr);
    s->hot_used -= n->hot_payload + n->hot_hdr_len;
    s->n_hot--;
    n->hot_slot = NULL;
    n->hot_hdr = NULL;
    n->hot_payload = 0;
    n->hot_hdr_len = 0;
    store_refresh(s, id);
}

/* A filled slot for node id (under mu).  Evicts least recently used hot
 * blocks to make room.  On error the caller still owns slot and hdr:
 * SCDB_ETOOBIG (larger than the tier), SCDB_EFULL (the rest is pinned),
 * SCDB_EBUSY (already hot or no longer stored: nothing to do). */
scdb_err store_hot_attach(scdb_store *s, uint32_t id, void *slot, uint8_t *hdr,
                           uint32_t hdr_len, uint64_t plen)
{
    st_node *n = &s->nodes[id];
    uint64_t charge = plen + hdr_len, cap = s->hot->capacity_bytes;

    if (n->hot_slot || n->state != NODE_STORED || n->replacing) return SCDB_EBUSY;
    if (charge > cap) return SCDB_ETOOBIG;
    while (s->hot_used + charge > cap) {
        uint32_t v = st_lru_peek(&s->lru[LRU_HOT]);
        if (v == SCDB_NONE) return SCDB_EFULL;
        store_hot_drop(s, v);
        s->ctr.hot_evictions++;
    }
    n = &s->nodes[id];
    n->hot_slot = slot;
    n->hot_hdr = hdr;
    n->hot_hdr_len = hdr_len;
    n->hot_payload = plen;
    s->hot_used += charge;
    s->n_hot++;
    store_refresh(s, id);
    return SCDB_OK;
}

/* Copy a payload into a fresh tier slot with its header (outside mu). */
scdb_err store_hot_fill(scdb_store *s, const uint8_t *hdr, size_t hdr_len,
                         const void *payload, uint64_t plen, void **slot,
                         uint8_t **hdr_copy)
{
    scdb_err e;
    *slot = NULL;
    if (!(*hdr_copy = malloc(hdr_len))) return SCDB_ENOMEM;
    memcpy(*hdr_copy, hdr, hdr_len);
    if ((e = s->hot->ops->alloc(s->hot, (size_t)plen, slot))) goto fail;
    if ((e = s->hot->ops->write(s->hot, *slot, 0, payload, (size_t)plen))) goto fail;
    return SCDB_OK;
fail:
    if (*slot) s->hot->ops->free(s->hot, *slot);
    free(*hdr_copy);
    *slot = NULL;
    *hdr_copy = NULL;
    return e;
}

/* ------------------------------------------------------------------- open */

static scdb_err check_meta(scdb_store *s)
{
    static const char *names[2] = {"format", "block_tokens"};
    uint32_t want[2] = {STORE_FORMAT, s->block_tokens};
    MDB_txn *txn;
    scdb_err e;
    int rc = 0;

    if ((e = st_lmdb_write_begin(&s->db, &txn))) return e;
    for (int i = 0; i < 2; i++) {
        MDB_val k = {strlen(names[i]), (void *)names[i]}, v;
        uint8_t le[4] = {(uint8_t)want[i], (uint8_t)(want[i] >> 8),
                         (uint8_t)(want[i] >> 16), (uint8_t)(want[i] >> 24)};
        rc = mdb_get(txn, s->db.meta, &k, &v);
        if (rc == MDB_NOTFOUND) {
            MDB_val nv = {4, le};
            if ((rc = mdb_put(txn, s->db.meta, &k, &nv, 0))) break;
        } else if (rc) {
            break;
        } else if (v.mv_size != 4 || memcmp(v.mv_data, le, 4)) {
            scdb_error("store: %s: env has a different %s than asked for",
                       s->db.dir, names[i]);
            st_lmdb_write_abort(&s->db, txn);
            return SCDB_EMISMATCH;
        }
    }
    if (rc) {
        st_lmdb_write_abort(&s->db, txn);
        return SCDB_LMDB_FAIL(rc, "meta");
    }
    if ((rc = st_lmdb_write_commit(&s->db, txn))) return SCDB_LMDB_FAIL(rc, "meta commit");
    return SCDB_OK;
}

/* Rebuild the index from LMDB: every value's header (and checksum with
 * verify), then parent links.  Broken values are deleted. */
static scdb_err load_index(scdb_store *s, bool verify)
{
    scdb_block_info *info = s->winfo;
    scdb_key *parents = NULL;
    size_t cap_parents = 0;
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    scdb_err e;
    int rc;

    if ((e = st_lmdb_read_begin(&s->db, &txn))) return e;
    if ((rc = mdb_cursor_open(txn, s->db.blocks, &cur))) {
        e = SCDB_LMDB_FAIL(rc, "cursor_open");
        goto out;
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        const void *payload;
        scdb_err de = SCDB_EMISMATCH;
        uint32_t id;
        if (k.mv_size == 16) {
            de = verify ? scdb_block_value_decode(v.mv_data, v.mv_size, k.mv_data,
                                                  info, &payload)
                        : st_block_value_parse(v.mv_data, v.mv_size, info, NULL);
            if (!de && memcmp(info->key.b, k.mv_data, 16)) de = SCDB_EMISMATCH;
        }
        if (de) {
            char hex[33] = "?";
            if (k.mv_size == 16) scdb_key_hex(k.mv_data, hex);
            scdb_error("store: block %s: %s; deleting it", hex, scdb_strerror(de));
            s->ctr.checksum_failures++;
            if ((e = store_grow_array((void **)&s->dels, &s->cap_dels, s->n_dels + 1, sizeof *s->dels)))
                goto out;
            memset(&s->dels[s->n_dels], 0, 16);
            memcpy(s->dels[s->n_dels++].b, k.mv_data, k.mv_size < 16 ? k.mv_size : 16);
            continue;
        }
        if ((e = store_node_alloc(s, &id))) goto out;
        if ((e = store_grow_array((void **)&parents, &cap_parents, id + 1, sizeof *parents))) goto out;
        s->nodes[id].key = info->key;
        s->nodes[id].block_index = info->block_index;
        s->nodes[id].disk_bytes = st_lmdb_footprint(&s->db, v.mv_size);
        s->nodes[id].state = NODE_STORED;
        parents[id] = info->parent;
        if ((e = st_index_insert(&s->index, s->nodes, id))) goto out;
        s->disk_used += s->nodes[id].disk_bytes;
        s->n_disk++;
    }
    if (rc != MDB_NOTFOUND) {
        e = SCDB_LMDB_FAIL(rc, "cursor_get");
        goto out;
    }
    {
        size_t orphans = 0;
        for (uint32_t id = 0; id < s->n_nodes; id++) {
            uint32_t p = SCDB_NONE;
            if (!scdb_key_is_zero(&parents[id])) {
                p = st_index_find(&s->index, s->nodes, &parents[id]);
                if (p == SCDB_NONE) orphans++;
            }
            s->nodes[id].parent = p;
            if (p != SCDB_NONE) s->nodes[p].children++;
        }
        if (orphans)
            scdb_warn("store: %zu block(s) whose parent is missing (unreachable; "
                      "they age out)", orphans);
        for (uint32_t id = 0; id < s->n_nodes; id++) store_refresh(s, id);
    }
out:
    if (cur) mdb_cursor_close(cur);
    st_lmdb_read_end(&s->db, txn);
    free(parents);
    if (e) s->n_dels = 0;
    return e;
}

/* Delete what load_index queued and evict down to the capacity (one txn). */
static scdb_err tidy_after_load(scdb_store *s)
{
    MDB_txn *txn;
    scdb_err e;
    int rc = 0;

    for (;;) {
        if (!s->n_dels && (!s->disk_cap || s->disk_used <= s->disk_cap)) return SCDB_OK;
        if ((e = st_lmdb_write_begin(&s->db, &txn))) return e;
        e = store_make_room(s, 0);
        if (e == SCDB_EFULL) e = SCDB_OK; /* over capacity but all pinned: impossible at open */
        if (!e) e = store_flush_dels(s, txn, &rc);
        if (e) {
            st_lmdb_write_abort(&s->db, txn);
            store_undo_ops(s, 0);
            if (rc == MDB_MAP_FULL && !(e = st_lmdb_grow(&s->db))) {
                s->ctr.map_growths++;
                continue;
            }
            return e;
        }
        if ((rc = st_lmdb_write_commit(&s->db, txn))) {
            store_undo_ops(s, 0);
            if (rc == MDB_MAP_FULL && !(e = st_lmdb_grow(&s->db))) {
                s->ctr.map_growths++;
                continue;
            }
            return SCDB_LMDB_FAIL(rc, "commit");
        }
        store_commit_ops(s);
        s->n_ops = 0;
        return SCDB_OK;
    }
}

scdb_err scdb_store_open(const scdb_store_opts *o, scdb_store **out)
{
    scdb_store *s = NULL;
    scdb_tier *given = o ? o->hot_tier : NULL;
    uint64_t map, max_map;
    scdb_err e;

    if (!o || !out || !o->path || o->block_tokens > SCDB_BLOCK_TOKENS_MAX) {
        e = SCDB_EINVAL;
        goto fail;
    }
    *out = NULL;
    if (!(s = calloc(1, sizeof *s))) {
        e = SCDB_ENOMEM;
        goto fail;
    }
    s->block_tokens = o->block_tokens ? o->block_tokens : SCDB_BLOCK_TOKENS_DEFAULT;
    s->disk_cap = o->disk_capacity_bytes;
    s->hot_on_put = !o->no_hot_on_put;
    s->on_evict = o->on_evict;
    s->on_evict_ctx = o->on_evict_ctx;
    s->on_visible = o->on_visible;
    s->on_visible_ctx = o->on_visible_ctx;
    s->on_written = o->on_written;
    s->on_written_ctx = o->on_written_ctx;
    s->lru[LRU_DISK].which = LRU_DISK;
    s->lru[LRU_HOT].which = LRU_HOT;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->write_mu, NULL);
    s->locks_init = true;
    if (given) {
        s->hot = given;
        given = NULL;
    } else if (o->hot_capacity_bytes) {
        if ((e = scdb_tier_host_new(o->hot_capacity_bytes, &s->hot))) goto fail;
    }
    if ((e = st_index_init(&s->index, 1024))) goto fail;
    if (!(s->winfo = malloc(sizeof *s->winfo))) {
        e = SCDB_ENOMEM;
        goto fail;
    }

    map = o->map_size ? o->map_size : DEFAULT_MAP;
    if (!o->map_size && s->disk_cap && 2 * s->disk_cap > map) map = 2 * s->disk_cap;
    map = (map + (64u << 10) - 1) & ~(uint64_t)((64u << 10) - 1); /* whole pages */
    max_map = o->max_map_size ? o->max_map_size : DEFAULT_MAX_MAP;
    if (max_map < map) max_map = map;
    if ((e = st_lmdb_open(&s->db, o->path, map, max_map, o->max_readers,
                            o->no_sync != 0)))
        goto fail;
    if ((e = check_meta(s))) goto fail;
    if ((e = load_index(s, o->verify_on_open != 0))) goto fail;
    if ((e = tidy_after_load(s))) goto fail;
    s->ctr.map_bytes = s->db.map_size;
    scdb_info("store: opened %s: %llu blocks, %llu bytes", o->path,
              (unsigned long long)s->n_disk, (unsigned long long)s->disk_used);
    *out = s;
    return SCDB_OK;
fail:
    if (given) given->ops->destroy(given);
    scdb_store_close(&s);
    return e;
}

void scdb_store_close(scdb_store **sp)
{
    scdb_store *s;
    if (!sp || !(s = *sp)) return;
    if (s->hot) {
        for (size_t i = 0; i < s->n_nodes; i++)
            if (s->nodes[i].state != NODE_FREE && s->nodes[i].hot_slot) {
                s->hot->ops->free(s->hot, s->nodes[i].hot_slot);
                free(s->nodes[i].hot_hdr);
            }
        s->hot->ops->destroy(s->hot);
    }
    if (s->db.env) st_lmdb_close(&s->db);
    st_index_free(&s->index);
    free(s->nodes);
    free(s->free_ids);
    free(s->lru[0].heap);
    free(s->lru[1].heap);
    free(s->ops);
    free(s->tpins);
    free(s->dels);
    free(s->winfo);
    if (s->locks_init) {
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->write_mu);
    }
    free(s);
    *sp = NULL;
}

const char *scdb_store_path(const scdb_store *s) { return s ? s->db.dir : NULL; }

uint32_t scdb_store_block_tokens(const scdb_store *s)
{
    return s ? s->block_tokens : 0;
}

scdb_err scdb_store_foreach_key(scdb_store *s, void (*fn)(void *ctx, const scdb_key *key),
                                void *ctx)
{
    if (!s || !fn) return SCDB_EINVAL;
    store_lock(s);
    for (size_t i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].state == NODE_STORED) fn(ctx, &s->nodes[i].key);
    store_unlock(s);
    return SCDB_OK;
}

/* ------------------------------------------------------------------ stats */

scdb_err scdb_store_stats(scdb_store *s, scdb_store_stat *out)
{
    if (!s || !out) return SCDB_EINVAL;
    store_lock(s);
    *out = s->ctr;
    out->blocks = s->n_disk;
    out->disk_bytes = s->disk_used;
    out->disk_capacity_bytes = s->disk_cap;
    out->hot_blocks = s->n_hot;
    out->hot_bytes = s->hot_used;
    out->hot_capacity_bytes = s->hot ? s->hot->capacity_bytes : 0;
    out->pinned_blocks = s->n_pinned;
    store_unlock(s);
    out->file_bytes = st_lmdb_file_bytes(&s->db);
    return SCDB_OK;
}
