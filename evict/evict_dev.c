/* evict_dev.c — an eviction on a device (evict.h, "on a device"): the
 * sequence of scdb_evict_run (policy.c) with every per-slot step on the
 * device's ops table, so a session whose cache and accumulators are device
 * memory never brings them to the host: only the learned policy's features
 * come down (the MLP runs on the host: [n][6] floats, where the
 * accumulators are ~40 floats a slot and the cache thousands; a network
 * reading the version-3 inputs takes the accumulators), its scores go up, and the slot -> position map comes down at the end.  On the CPU
 * table this is scdb_evict_run, bit for bit. */
#include "evict_internal.h"

#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* scratch: scores f32 [cap] | keep i32 [cap] | features f32 [cap][6] */
size_t scdb_evict_dev_scratch_bytes(int capacity)
{
    size_t c = capacity > 0 ? (size_t)capacity : 1;
    return 2 * align64(c * 4) + align64(c * SCDB_K_EVICT_N_FEATURES * 4);
}

/* the learned policy: features on the device, the MLP on the host */
static scdb_err score_learned(const scdb_k_ops *ops, const scdb_evict_mlp *m,
                              const scdb_k_acc_buf *b, const scdb_evict_acc *hdr, int n,
                              int budget, float *feats_dev, float *scores_dev)
{
    scdb_k_acc_arrays arr = {b->pos, b->n_obs, b->rel, b->var, b->ent_num, b->ent_den, b->vnorm,
                             hdr->last_pos, b->mass};
    size_t nf = (size_t)n * SCDB_K_EVICT_N_FEATURES;
    float *f = malloc((nf + 2 * (size_t)n) * sizeof *f);
    scdb_err e;

    if (!f) return SCDB_ENOMEM;
    float *raw = f + nf, *pooled = raw + n;
    if (!(e = ops->evict_features(&arr, n, feats_dev)) &&
        !(e = ops->download(f, feats_dev, nf * sizeof *f))) {
        /* policy.c's LEARNED score, on the downloaded features */
        scdb_evict_mlp_score_budget(m, f, n, budget, raw, NULL);
        if (m->pool > 1) scdb_evict_maxpool(raw, n, m->pool, pooled, NULL);
        else memcpy(pooled, raw, (size_t)n * sizeof *pooled);
        e = ops->upload(scores_dev, pooled, (size_t)n * sizeof *pooled);
    }
    free(f);
    return e;
}

/* Does the network read only the inputs the features carry (alpha ..
 * budget, as version 1-2 files do)? */
static int features_suffice(const scdb_evict_mlp *m)
{
    for (int i = 0; i < m->n_in; i++)
        if (m->in_id[i] > SCDB_EI_BUDGET) return 0;
    return 1;
}

/* A network reading other inputs (ranks, ages, context: version 3) needs
 * the accumulators themselves: the whole buffer comes down (~40 floats a
 * slot, still far less than the cache) and the candidates [lo, hi) are
 * scored as scdb_evict_run scores a host session's (the rest 0: select
 * keeps them whatever they score), so the CPU table stays bit for bit
 * scdb_evict_run. */
static scdb_err score_learned_acc(const scdb_k_ops *ops, const scdb_evict_mlp *m,
                                  const scdb_evict_acc *hdr, const void *acc, int n, int budget,
                                  int lo, int hi, float *scores_dev)
{
    size_t bytes = (size_t)hdr->bytes, cap = (bytes + 63) & ~(size_t)63;
    void *host = aligned_alloc(64, cap);
    float *f = calloc((size_t)(n > 0 ? n : 1), sizeof *f);
    scdb_evict_acc *a = NULL;
    scdb_err e;

    if (!host || !f) {
        free(host);
        free(f);
        return SCDB_ENOMEM;
    }
    if (!(e = ops->download(host, acc, bytes))) {
        memcpy(host, hdr, sizeof *hdr);   /* the header as the host knows it */
        if (!(e = scdb_evict_acc_attach(host, bytes, &a)) &&
            !(e = scdb_evict_learned_score(m, a, budget, lo, hi, f)))
            e = ops->upload(scores_dev, f, (size_t)n * sizeof *f);
    }
    free(host);
    free(f);
    return e;
}

static scdb_err score(const scdb_k_ops *ops, const scdb_evict_policy *p, const scdb_k_acc_buf *b,
                      const scdb_evict_acc *hdr, const void *acc, int n, int budget, int sinks,
                      int recent, float *feats_dev, float *scores_dev)
{
    switch (scdb_evict_policy_kind(p)) {
    case SCDB_EVICT_FULL:
    case SCDB_EVICT_STREAMING:
        return ops->zero(scores_dev, (size_t)n * sizeof(float));
    case SCDB_EVICT_H2O:
        return ops->dcopy(scores_dev, b->mass, (size_t)n * sizeof(float));
    case SCDB_EVICT_TOVA:
        return ops->dcopy(scores_dev, b->last, (size_t)n * sizeof(float));
    case SCDB_EVICT_SNAPKV:
        return ops->snapkv_score(b->win, hdr->ring_fill, b->n_kv_heads, b->capacity, n,
                                 SCDB_EVICT_SNAPKV_POOL, scores_dev);
    case SCDB_EVICT_LEARNED:
        if (!features_suffice(scdb_evict_policy_mlp(p)))
            return score_learned_acc(ops, scdb_evict_policy_mlp(p), hdr, acc, n, budget, sinks,
                                     n - recent, scores_dev);
        return score_learned(ops, scdb_evict_policy_mlp(p), b, hdr, n, budget, feats_dev,
                             scores_dev);
    default:
        return SCDB_EINVAL;
    }
}

scdb_err scdb_evict_dev_run(const scdb_k_ops *ops, const scdb_evict_policy *p,
                            scdb_kv_cache *cache, const scdb_evict_acc *hdr, void *acc,
                            int budget, void *scratch, int32_t *pos_map, int *n_keep)
{
    scdb_k_acc_buf b;
    int n, sinks, recent, nk = 0;
    int32_t nk32;
    scdb_err e;

    if (!ops || !p || !cache || !n_keep || budget < 1 || !scratch) return SCDB_EINVAL;
    /* one keep set on a device (evict.h, "Keep sets per head"): the
     * per-head layout and kinds are host memory's */
    if (scdb_evict_acc_per_head(hdr) || !scdb_evict_policy_runs_on(p, 0)) return SCDB_EUNSUPPORTED;
    n = cache->n;
    if (scdb_evict_policy_kind(p) == SCDB_EVICT_FULL || n <= budget) {
        if (pos_map && (e = ops->download(pos_map, cache->pos, (size_t)n * sizeof *pos_map)))
            return e;
        *n_keep = n;
        return SCDB_OK;
    }
    if (!hdr || !acc || hdr->n != n || hdr->capacity < cache->capacity) return SCDB_EINVAL;
    scdb_evict_acc_buf(hdr, acc, &b);
    size_t cap = (size_t)(hdr->capacity > 0 ? hdr->capacity : 1);
    float *scores = scratch;
    int *keep = (int *)((char *)scratch + align64(cap * 4));
    float *feats = (float *)((char *)scratch + 2 * align64(cap * 4));

    scdb_evict_policy_protect(p, hdr, n, budget, &sinks, &recent);
    if ((e = score(ops, p, &b, hdr, acc, n, budget, sinks, recent, feats, scores))) return e;
    if ((e = ops->select_topb(scores, n, budget, sinks, recent, keep, &nk))) return e;

    /* the cache: pos, then K and V as n_layers matrices of kv rows each */
    size_t kvb = (size_t)scdb_kv_dim(cache) * sizeof(float);
    size_t lstride = (size_t)cache->capacity * kvb;
    if ((e = ops->compact_rows(cache->pos, 1, 0, sizeof(int32_t), n, keep, nk, NULL)) ||
        (e = ops->compact_rows(cache->k, cache->n_layers, lstride, kvb, n, keep, nk, NULL)) ||
        (e = ops->compact_rows(cache->v, cache->n_layers, lstride, kvb, n, keep, nk, NULL)))
        return e;
    /* the accumulators (scdb_evict_acc_compact): the nine slot arrays a
     * fixed stride apart, the ring's window x kv-head rows */
    size_t stride = scdb_evict_acc_offset(hdr, 1) - scdb_evict_acc_offset(hdr, 0);
    if ((e = ops->compact_rows(b.pos, SCDB_EVICT_ACC_SLOT_ARRAYS, stride, 4, n, keep, nk, NULL)) ||
        (e = ops->compact_rows(b.win, hdr->window * hdr->n_kv_heads,
                               (size_t)hdr->capacity * 4, 4, n, keep, nk, NULL)))
        return e;
    nk32 = nk;
    if ((e = ops->upload(b.n, &nk32, sizeof nk32))) return e;
    if (pos_map && (e = ops->download(pos_map, cache->pos, (size_t)nk * sizeof *pos_map)))
        return e;
    if ((e = ops->sync())) return e;
    cache->n = nk;
    *n_keep = nk;
    return SCDB_OK;
}
