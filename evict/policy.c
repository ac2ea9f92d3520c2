/* policy.c — the eviction policies behind one interface (score -> select ->
 * compact): full cache, StreamingLLM, H2O, SnapKV, TOVA and the learned MLP
 * (whose network and file live in mlp.c; its inputs in inputs.c).  Rules in
 * evict.h.  Calls mlp.c and the kernels; nothing in the module calls back. */
#include "evict_internal.h"

#include <stdlib.h>
#include <string.h>

#define STREAMING_SINKS 4

static const char *const KIND_NAMES[SCDB_EVICT_KIND_COUNT] = {
    "full", "streaming", "h2o", "snapkv", "tova", "learned", "h2o_head", "snapkv_head",
    "tova_layer"};

const char *scdb_evict_kind_name(scdb_evict_kind k)
{
    return (unsigned)k < SCDB_EVICT_KIND_COUNT ? KIND_NAMES[k] : NULL;
}

scdb_err scdb_evict_kind_parse(const char *name, scdb_evict_kind *out)
{
    if (!name || !out) return SCDB_EINVAL;
    for (int k = 0; k < SCDB_EVICT_KIND_COUNT; k++)
        if (!strcmp(name, KIND_NAMES[k])) { *out = (scdb_evict_kind)k; return SCDB_OK; }
    return SCDB_ENOTFOUND;
}

scdb_err scdb_evict_policy_new(scdb_evict_kind kind, scdb_evict_policy **out)
{
    scdb_evict_policy *p;
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if ((unsigned)kind >= SCDB_EVICT_KIND_COUNT || kind == SCDB_EVICT_LEARNED) return SCDB_EINVAL;
    if (!(p = calloc(1, sizeof *p))) return SCDB_ENOMEM;
    p->kind = kind;
    *out = p;
    return SCDB_OK;
}

/* A learned policy: the network and its file's metadata (the one loader,
 * mlp.c's). */
scdb_err scdb_evict_policy_load(const char *path, scdb_evict_policy **out, char *errbuf,
                                size_t errlen)
{
    scdb_evict_policy *p;
    scdb_err rc;
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!path) return SCDB_EINVAL;
    if (!(p = calloc(1, sizeof *p))) return SCDB_ENOMEM;
    p->kind = SCDB_EVICT_LEARNED;
    if ((rc = scdb_evict_mlp_load(path, &p->mlp, &p->meta, errbuf, errlen))) {
        free(p);
        return rc;
    }
    *out = p;
    return SCDB_OK;
}

scdb_err scdb_evict_policy_from_mlp(const scdb_evict_mlp *m, scdb_evict_policy **out)
{
    scdb_evict_policy *p;
    scdb_err rc;
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!m) return SCDB_EINVAL;
    if (!(p = calloc(1, sizeof *p))) return SCDB_ENOMEM;
    p->kind = SCDB_EVICT_LEARNED;
    if ((rc = scdb_evict_mlp_clone(m, &p->mlp))) {
        free(p);
        return rc;
    }
    *out = p;
    return SCDB_OK;
}

void scdb_evict_policy_free(scdb_evict_policy **pp)
{
    scdb_evict_policy *p;
    if (!pp || !*pp) return;
    p = *pp;
    scdb_evict_mlp_free(&p->mlp);
    scdb_evict_meta_free(&p->meta);
    free(p);
    *pp = NULL;
}

scdb_evict_kind scdb_evict_policy_kind(const scdb_evict_policy *p) { return p->kind; }
const char *scdb_evict_policy_name(const scdb_evict_policy *p) { return scdb_evict_kind_name(p->kind); }
const scdb_evict_mlp *scdb_evict_policy_mlp(const scdb_evict_policy *p)
{
    return p && p->kind == SCDB_EVICT_LEARNED ? p->mlp : NULL;
}

int scdb_evict_policy_needs_acc(const scdb_evict_policy *p)
{
    return p->kind != SCDB_EVICT_FULL && p->kind != SCDB_EVICT_STREAMING;
}

const char *scdb_evict_policy_meta(const scdb_evict_policy *p, const char *key)
{
    if (!p || !key) return NULL;
    for (int i = 0; i < p->meta.n; i++)
        if (!strcmp(p->meta.keys[i], key)) return p->meta.vals[i];
    return NULL;
}

static int imin(int a, int b) { return a < b ? a : b; }

void scdb_evict_policy_protect(const scdb_evict_policy *p, const scdb_evict_acc *a, int n,
                               int budget, int *sinks, int *recent)
{
    int s = 0, r = 0, cap = imin(n, budget < 0 ? 0 : budget);
    switch (p->kind) {
    case SCDB_EVICT_FULL: s = 0; r = n; cap = n; break;
    case SCDB_EVICT_STREAMING: s = STREAMING_SINKS; r = budget - STREAMING_SINKS; break;
    case SCDB_EVICT_H2O: s = 0; r = budget / 2; break;
    case SCDB_EVICT_SNAPKV: s = 0; r = imin(a ? a->window : SCDB_EVICT_DEFAULT_WINDOW, budget / 2); break;
    case SCDB_EVICT_TOVA: s = 0; r = 1; break;
    case SCDB_EVICT_H2O_HEAD: s = 0; r = budget / 2; break;
    case SCDB_EVICT_SNAPKV_HEAD: s = 0; r = imin(a ? a->window : SCDB_EVICT_DEFAULT_WINDOW, budget / 2); break;
    case SCDB_EVICT_TOVA_LAYER: s = 0; r = 1; break;
    case SCDB_EVICT_LEARNED: scdb_evict_mlp_protect(p->mlp, budget, &s, &r); break;
    default: break;
    }
    if (s < 0) s = 0;
    if (r < 0) r = 0;
    if (s > cap) s = cap;
    if (r > cap - s) r = cap - s;
    *sinks = s;
    *recent = r;
}

/* The learned policy's (pooled) scores of slots [lo, hi): the network on
 * those rows and the pool's reach beyond them (what the rows' pooled
 * maxima read), clipped to [0, n) as the full pool is, so each slot of
 * [lo, hi) gets the score the whole cache's pass gives it. */
scdb_err scdb_evict_learned_score(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                  int lo, int hi, float *scores)
{
    if (!m || !a || lo < 0 || hi > a->n || lo > hi || (hi > lo && !scores)) return SCDB_EINVAL;
    const int half = m->pool > 1 ? m->pool / 2 : 0;
    const int rlo = lo - half > 0 ? lo - half : 0, rhi = hi + half < a->n ? hi + half : a->n;
    float *f;
    scdb_err rc;
    if (m->pool <= 1) return scdb_evict_mlp_score_rows(m, a, budget, lo, hi, scores, NULL);
    if (!(f = malloc((size_t)(a->n > 0 ? a->n : 1) * sizeof *f))) return SCDB_ENOMEM;
    if (!(rc = scdb_evict_mlp_score_rows(m, a, budget, rlo, rhi, f, NULL))) {
        /* pooled over [rlo, rhi): for j in [lo, hi) the window j +- half
         * lies inside it or is clipped at 0 / n as the full pool clips it */
        float *pooled = malloc((size_t)(rhi - rlo > 0 ? rhi - rlo : 1) * sizeof *pooled);
        if (!pooled) rc = SCDB_ENOMEM;
        else {
            scdb_evict_maxpool(f + rlo, rhi - rlo, m->pool, pooled, NULL);
            memcpy(scores + lo, pooled + (lo - rlo), (size_t)(hi - lo) * sizeof *scores);
            free(pooled);
        }
    }
    free(f);
    return rc;
}

scdb_err scdb_evict_policy_score(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                 float *scores)
{
    return scdb_evict_policy_score_budget(p, a, a ? a->n : 1, scores);
}

scdb_err scdb_evict_policy_score_budget(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                        int budget, float *scores)
{
    if (!p || !a || (!scores && a->n > 0) || budget < 1) return SCDB_EINVAL;
    /* one score per slot is one keep set's (the per-head layout's sets:
     * scdb_evict_heads_scores) */
    if (scdb_evict_acc_mode(a) == SCDB_EVICT_MODE_SPLIT || scdb_evict_kind_per_head(p->kind))
        return SCDB_EMISMATCH;
    switch (p->kind) {
    case SCDB_EVICT_FULL:
    case SCDB_EVICT_STREAMING:
        memset(scores, 0, (size_t)a->n * sizeof *scores);
        return SCDB_OK;
    case SCDB_EVICT_H2O:
        memcpy(scores, scdb_evict_acc_mass(a), (size_t)a->n * sizeof *scores);
        return SCDB_OK;
    case SCDB_EVICT_TOVA:
        memcpy(scores, scdb_evict_acc_last(a), (size_t)a->n * sizeof *scores);
        return SCDB_OK;
    case SCDB_EVICT_SNAPKV:   /* the kernels' twin (kernels.h, snapkv_score) */
        return scdb_k_snapkv_score_cpu(scdb_evict_acc_win(a), a->ring_fill, a->n_kv_heads,
                                       a->capacity, a->n, SCDB_EVICT_SNAPKV_POOL, scores);
    case SCDB_EVICT_LEARNED:
        return scdb_evict_learned_score(p->mlp, a, budget, 0, a->n, scores);
    default:
        return SCDB_EINVAL;
    }
}

/* ------------------------------------------------------------ compact, run */

scdb_err scdb_evict_acc_compact(scdb_evict_acc *a, const int *keep, int n_keep)
{
    scdb_err rc;
    if (!a || n_keep < 0 || n_keep > a->n || (n_keep > 0 && !keep)) return SCDB_EINVAL;
    if (scdb_evict_acc_per_head(a)) {
        /* one keep list for every set: version 1's arrays and the sets' */
        if (scdb_evict_acc_mode(a) == SCDB_EVICT_MODE_SPLIT) return SCDB_EINVAL;
        return scdb_evict_acc_compact_shared(a, keep, n_keep);
    }
    /* the nine slot arrays (pos .. last) are one matrix each, a fixed
     * stride apart; the query window has window x kv-head rows of capacity */
    size_t stride = (size_t)((char *)scdb_evict_acc_n_obs(a) - (char *)scdb_evict_acc_pos(a));
    rc = scdb_k_compact_rows_cpu(scdb_evict_acc_pos(a), SCDB_EVICT_ACC_SLOT_ARRAYS, stride, 4,
                                 a->n, keep, n_keep, NULL);
    if (!rc)
        rc = scdb_k_compact_rows_cpu(scdb_evict_acc_win(a), a->window * a->n_kv_heads,
                                     (size_t)a->capacity * 4, 4, a->n, keep, n_keep, NULL);
    if (!rc) a->n = n_keep;
    return rc;
}

scdb_err scdb_evict_compact(scdb_kv_cache *cache, scdb_evict_acc *acc,
                            const int *keep, int n_keep, int32_t *pos_map)
{
    scdb_err rc;
    if (!cache) return SCDB_EINVAL;
    if (acc && (acc->n != cache->n || scdb_evict_acc_mode(acc) == SCDB_EVICT_MODE_SPLIT))
        return SCDB_EINVAL;
    if ((rc = scdb_kv_cache_compact(cache, keep, n_keep))) return rc;
    if (acc && (rc = scdb_evict_acc_compact(acc, keep, n_keep))) return rc;
    if (pos_map) memcpy(pos_map, cache->pos, (size_t)n_keep * sizeof *pos_map);
    return SCDB_OK;
}

scdb_err scdb_evict_run(const scdb_evict_policy *p, scdb_kv_cache *cache,
                        scdb_evict_acc *acc, int budget, int32_t *pos_map, int *n_keep)
{
    float *scores = NULL;
    int *keep = NULL, sinks, recent, nk = 0;
    scdb_err rc = SCDB_ENOMEM;

    if (!p || !cache || !n_keep || budget < 1) return SCDB_EINVAL;
    if (p->kind == SCDB_EVICT_FULL || cache->n <= budget) {
        if (pos_map) memcpy(pos_map, cache->pos, (size_t)cache->n * sizeof *pos_map);
        *n_keep = cache->n;
        return SCDB_OK;
    }
    if (scdb_evict_policy_needs_acc(p) && (!acc || acc->n != cache->n)) return SCDB_EINVAL;
    if (acc && acc->n == cache->n && scdb_evict_acc_per_head(acc)) {
        /* the per-head layout: a keep set per (layer, KV group) (heads.c)
         * once the sets differ, for the per-head kinds, or where a learned
         * policy's gate chooses them at the first eviction; one set for
         * all otherwise (version 1's arrays are still every set's) */
        int mode = scdb_evict_acc_mode(acc);
        if (mode < 0) return SCDB_ERANGE;
        if (scdb_evict_policy_wants_sets(p, acc, budget)) {
            if (!scdb_evict_policy_runs_on(p, 1)) return SCDB_EMISMATCH;
            return scdb_evict_run_heads(p, cache, acc, budget, pos_map, n_keep);
        }
    }
    if (!scdb_evict_policy_runs_on(p, 0)) return SCDB_EMISMATCH;
    scores = malloc((size_t)cache->n * sizeof *scores);
    keep = malloc((size_t)cache->n * sizeof *keep);
    if (!scores || !keep) goto done;
    scdb_evict_policy_protect(p, acc, cache->n, budget, &sinks, &recent);
    if (p->kind == SCDB_EVICT_LEARNED) {
        /* only the candidates between the protected slots are ranked: the
         * network scores them (and what their pool reads), not the rest */
        memset(scores, 0, (size_t)cache->n * sizeof *scores);
        if ((rc = scdb_evict_learned_score(p->mlp, acc, budget, sinks, cache->n - recent, scores)))
            goto done;
    } else if (scdb_evict_policy_needs_acc(p)) {
        if ((rc = scdb_evict_policy_score_budget(p, acc, budget, scores))) goto done;
    } else {
        memset(scores, 0, (size_t)cache->n * sizeof *scores);
    }
    if ((rc = scdb_evict_select(scores, cache->n, budget, sinks, recent, keep, &nk))) goto done;
    if (acc && acc->n != cache->n) acc = NULL;
    rc = scdb_evict_compact(cache, acc, keep, nk, pos_map);
    if (!rc) *n_keep = nk;
done:
    free(scores);
    free(keep);
    return rc;
}
