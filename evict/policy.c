/* policy.c — the eviction policies behind one interface (score -> select ->
 * compact): full cache, StreamingLLM, H2O, SnapKV, TOVA and the learned MLP
 * (whose network and file live in mlp.c).  Rules in evict.h. */
#include "evict_internal.h"

#include <stdlib.h>
#include <string.h>

#define STREAMING_SINKS 4
#define SNAPKV_POOL SCDB_EVICT_SNAPKV_POOL

static const char *const KIND_NAMES[SCDB_EVICT_KIND_COUNT] = {
    "full", "streaming", "h2o", "snapkv", "tova", "learned"};

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

void scdb_evict_policy_free(scdb_evict_policy **pp)
{
    scdb_evict_policy *p;
    if (!pp || !*pp) return;
    p = *pp;
    scdb_evict_mlp_free(&p->mlp);
    for (int i = 0; i < p->n_meta; i++) { free(p->meta_keys[i]); free(p->meta_vals[i]); }
    free(p->meta_keys);
    free(p->meta_vals);
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
    for (int i = 0; i < p->n_meta; i++)
        if (!strcmp(p->meta_keys[i], key)) return p->meta_vals[i];
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

/* SnapKV: window attention summed per KV group over the ring, max-pooled
 * along the slots (kernel 7, same padding), then averaged over groups. */
static scdb_err score_snapkv(const scdb_evict_acc *a, float *scores)
{
    int n = a->n, G = a->n_kv_heads, half = SNAPKV_POOL / 2;
    float *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    const float *win = scdb_evict_acc_win(a);
    if (!s) return SCDB_ENOMEM;
    memset(scores, 0, (size_t)n * sizeof *scores);
    for (int g = 0; g < G; g++) {
        memset(s, 0, (size_t)n * sizeof *s);
        for (int r = 0; r < a->ring_fill; r++) {
            const float *row = win + ((size_t)r * G + g) * a->capacity;
            for (int j = 0; j < n; j++) s[j] += row[j];
        }
        for (int j = 0; j < n; j++) {
            float mx = s[j];
            for (int k = j - half; k <= j + half; k++)
                if (k >= 0 && k < n && s[k] > mx) mx = s[k];
            scores[j] += mx / (float)G;
        }
    }
    free(s);
    return SCDB_OK;
}

scdb_err scdb_evict_policy_score(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                 float *scores)
{
    return scdb_evict_policy_score_budget(p, a, a ? a->n : 1, scores);
}

scdb_err scdb_evict_policy_score_budget(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                        int budget, float *scores)
{
    float *f;
    if (!p || !a || (!scores && a->n > 0) || budget < 1) return SCDB_EINVAL;
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
    case SCDB_EVICT_SNAPKV:
        return score_snapkv(a, scores);
    case SCDB_EVICT_LEARNED: {
        scdb_err rc;
        if (p->mlp->pool <= 1) return scdb_evict_mlp_score_acc(p->mlp, a, budget, scores, NULL);
        if (!(f = malloc((size_t)(a->n > 0 ? a->n : 1) * sizeof *f))) return SCDB_ENOMEM;
        if (!(rc = scdb_evict_mlp_score_acc(p->mlp, a, budget, f, NULL)))
            scdb_evict_maxpool(f, a->n, p->mlp->pool, scores, NULL);
        free(f);
        return rc;
    }
    default:
        return SCDB_EINVAL;
    }
}

/* ------------------------------------------------------------ select */

/* Merge sort of indices by score, highest first (ties: the higher index
 * first): a stable total order, no global state, so select is thread-safe. */
static int before(const float *s, int i, int j)
{
    return s[i] > s[j] || (s[i] == s[j] && i > j);
}

static void msort(const float *s, int *v, int *tmp, int n)
{
    if (n < 2) return;
    int h = n / 2, i = 0, j = h, k = 0;
    msort(s, v, tmp, h);
    msort(s, v + h, tmp, n - h);
    while (i < h && j < n) tmp[k++] = before(s, v[j], v[i]) ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

scdb_err scdb_evict_rank(const float *scores, int *idx, int n)
{
    int *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return SCDB_ENOMEM;
    msort(scores, idx, tmp, n);
    free(tmp);
    return SCDB_OK;
}

scdb_err scdb_evict_select(const float *scores, int n, int budget, int sinks,
                           int recent, int *keep, int *n_keep)
{
    /* the kernels' twin: the same order as scdb_evict_rank (ties to the
     * higher slot), keep[] ascending */
    return scdb_k_select_topb_cpu(scores, n, budget, sinks, recent, keep, n_keep);
}

/* ------------------------------------------------------------ features */

scdb_err scdb_evict_features(const scdb_evict_acc *a, float *f)
{
    if (!a || (!f && a->n > 0)) return SCDB_EINVAL;
    scdb_k_acc_arrays arr = {scdb_evict_acc_pos(a), scdb_evict_acc_n_obs(a), scdb_evict_acc_rel(a),
                             scdb_evict_acc_var(a), scdb_evict_acc_ent_num(a),
                             scdb_evict_acc_ent_den(a), scdb_evict_acc_vnorm(a), a->last_pos,
                             scdb_evict_acc_mass(a)};
    return scdb_k_evict_features_cpu(&arr, a->n, f);
}

/* ------------------------------------------------------------ compact, run */

scdb_err scdb_evict_acc_compact(scdb_evict_acc *a, const int *keep, int n_keep)
{
    scdb_err rc;
    if (!a || n_keep < 0 || n_keep > a->n || (n_keep > 0 && !keep)) return SCDB_EINVAL;
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
    if (acc && acc->n != cache->n) return SCDB_EINVAL;
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
    scores = malloc((size_t)cache->n * sizeof *scores);
    keep = malloc((size_t)cache->n * sizeof *keep);
    if (!scores || !keep) goto done;
    if (scdb_evict_policy_needs_acc(p)) {
        if ((rc = scdb_evict_policy_score_budget(p, acc, budget, scores))) goto done;
    } else {
        memset(scores, 0, (size_t)cache->n * sizeof *scores);
    }
    scdb_evict_policy_protect(p, acc, cache->n, budget, &sinks, &recent);
    if ((rc = scdb_evict_select(scores, cache->n, budget, sinks, recent, keep, &nk))) goto done;
    if (acc && acc->n != cache->n) acc = NULL;
    rc = scdb_evict_compact(cache, acc, keep, nk, pos_map);
    if (!rc) *n_keep = nk;
done:
    free(scores);
    free(keep);
    return rc;
}
