/* acc_dev.c — accumulators in a device's memory (evict.h, "on a device"):
 * the addresses of a buffer's arrays and header fields, and the client's
 * per-step fold through an ops table.  Compiled into libscdb with acc.c
 * (libscdb passes its own table, whose acc_update launches the CUDA kernels
 * through the driver API); the broker's half is evict_dev.c. */
#include "evict.h"

#include <stddef.h>

void scdb_evict_acc_buf(const scdb_evict_acc *h, void *base, scdb_k_acc_buf *o)
{
    char *b = base;
    o->n_layers = h->n_layers;
    o->n_heads = h->n_heads;
    o->n_kv_heads = h->n_kv_heads;
    o->capacity = h->capacity;
    o->window = h->window;
    o->decay = h->decay;
    o->pos = (int32_t *)(b + scdb_evict_acc_offset(h, 0));
    o->n_obs = (float *)(b + scdb_evict_acc_offset(h, 1));
    o->mass = (float *)(b + scdb_evict_acc_offset(h, 2));
    o->rel = (float *)(b + scdb_evict_acc_offset(h, 3));
    o->var = (float *)(b + scdb_evict_acc_offset(h, 4));
    o->ent_num = (float *)(b + scdb_evict_acc_offset(h, 5));
    o->ent_den = (float *)(b + scdb_evict_acc_offset(h, 6));
    o->vnorm = (float *)(b + scdb_evict_acc_offset(h, 7));
    o->last = (float *)(b + scdb_evict_acc_offset(h, 8));
    o->win = (float *)(b + scdb_evict_acc_offset(h, 9));
    o->n = (int32_t *)(b + offsetof(scdb_evict_acc, n));
    o->ring_next = (int32_t *)(b + offsetof(scdb_evict_acc, ring_next));
    o->ring_fill = (int32_t *)(b + offsetof(scdb_evict_acc, ring_fill));
    o->last_pos = (int32_t *)(b + offsetof(scdb_evict_acc, last_pos));
    o->n_queries = (uint64_t *)(b + offsetof(scdb_evict_acc, n_queries));
}

scdb_err scdb_evict_dev_fold(const scdb_k_ops *ops, const scdb_k_acc_buf *buf, int *acc_n,
                             const scdb_kv_cache *c, const float *probs, int probs_slots,
                             int n_new, void *scratch, void *stream)
{
    int missing;
    scdb_err e;

    if (!ops || !buf || !acc_n || !c) return SCDB_EINVAL;
    missing = c->n - *acc_n;
    if (n_new < 0 || (probs && n_new == 0) || (probs && probs_slots < c->n) || missing < n_new)
        return SCDB_EINVAL;
    /* slots appended without statistics (a get) come first, unseen */
    if (missing > n_new) {
        scdb_kv_cache view = *c;
        view.n = c->n - n_new;
        if ((e = ops->acc_update(buf, *acc_n, &view, NULL, 0, missing - n_new, scratch, stream)))
            return e;
        *acc_n = view.n;
    }
    if (n_new > 0) {
        if ((e = ops->acc_update(buf, *acc_n, c, probs, probs_slots, n_new, scratch, stream)))
            return e;
        *acc_n = c->n;
    }
    return SCDB_OK;
}
