/* heads.c — keep sets per (layer, KV group) (evict.h, "Keep sets per
 * head"): every set's scores and protected window, the per-set selection
 * and the per-set compaction of the cache and the per-head accumulators.
 * scdb_evict_run calls scdb_evict_run_heads when the accumulators have the
 * per-head layout.  Calls the kernels (SnapKV's sets, select_topb) and
 * mlp.c (the learned policy's per-head scorer); nothing here calls back. */
#include "evict_internal.h"

#include <stdlib.h>
#include <string.h>

int scdb_evict_kind_per_head(scdb_evict_kind k)
{
    return k == SCDB_EVICT_H2O_HEAD || k == SCDB_EVICT_SNAPKV_HEAD || k == SCDB_EVICT_TOVA_LAYER;
}

int scdb_evict_policy_per_head(const scdb_evict_policy *p, int budget, int capacity)
{
    if (!p) return 0;
    if (scdb_evict_kind_per_head(p->kind)) return 1;
    if (p->kind == SCDB_EVICT_LEARNED) return scdb_evict_mlp_heads_at(p->mlp, budget, capacity);
    return 0;
}

int scdb_evict_policy_wants_sets(const scdb_evict_policy *p, const scdb_evict_acc *a, int budget)
{
    if (!p || !scdb_evict_acc_per_head(a)) return 0;
    int mode = scdb_evict_acc_mode(a);
    if (mode == SCDB_EVICT_MODE_SPLIT || scdb_evict_kind_per_head(p->kind)) return 1;
    if (p->kind == SCDB_EVICT_LEARNED && mode == SCDB_EVICT_MODE_NONE)
        return scdb_evict_mlp_heads_choose(p->mlp, a, budget);
    return 0;
}

int scdb_evict_policy_runs_on(const scdb_evict_policy *p, int per_head)
{
    if (!p) return 0;
    switch (p->kind) {
    case SCDB_EVICT_FULL:
    case SCDB_EVICT_STREAMING: return 1;       /* no scores: the same window everywhere */
    case SCDB_EVICT_LEARNED: return per_head ? p->mlp->heads.on : 1;
    default: return per_head == scdb_evict_kind_per_head(p->kind);
    }
}

static int imin(int a, int b) { return a < b ? a : b; }

/* The heuristics' scores of every set (scores [K][n]) and windows. */
static scdb_err heur_scores(const scdb_evict_policy *p, const scdb_evict_acc *a, int budget,
                            float *scores, int *recent)
{
    const int K = scdb_evict_acc_n_sets(a), G = a->n_kv_heads, n = a->n, cap = a->capacity;
    int r = 0;
    switch (p->kind) {
    case SCDB_EVICT_STREAMING:
        memset(scores, 0, (size_t)K * n * sizeof *scores);
        r = budget - 4;
        break;
    case SCDB_EVICT_H2O_HEAD: {
        const float *mass = scdb_evict_acc_head_mass(a);
        for (int k = 0; k < K; k++)
            memcpy(scores + (size_t)k * n, mass + (size_t)k * cap, (size_t)n * sizeof *scores);
        r = budget / 2;
        break;
    }
    case SCDB_EVICT_SNAPKV_HEAD: {
        scdb_err rc = scdb_k_snapkv_score_sets_cpu(scdb_evict_acc_head_win(a), a->ring_fill, K,
                                                   cap, n, SCDB_EVICT_SNAPKV_POOL, scores, NULL);
        if (rc) return rc;
        r = imin(a->window, budget / 2);
        break;
    }
    case SCDB_EVICT_TOVA_LAYER: {
        /* TOVA's score per layer: the last query's attention averaged over
         * the layer's heads; every KV group of a layer keeps the same set
         * (the policy's sets of one layer never differ, so slot j is the
         * same token in each) */
        const float *last = scdb_evict_acc_head_last(a);
        for (int l = 0; l < a->n_layers; l++) {
            float *s0 = scores + (size_t)l * G * n;
            for (int j = 0; j < n; j++) {
                float v = 0.0f;
                for (int g = 0; g < G; g++) v += last[((size_t)l * G + g) * cap + j];
                s0[j] = v / (float)G;
            }
            for (int g = 1; g < G; g++) memcpy(s0 + (size_t)g * n, s0, (size_t)n * sizeof *s0);
        }
        r = 1;
        break;
    }
    default: return SCDB_EINVAL;
    }
    for (int k = 0; k < K; k++) recent[k] = r;
    return SCDB_OK;
}

scdb_err scdb_evict_heads_scores(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                 int budget, float *scores, int *sinks, int *recent)
{
    if (!p || !a || !scdb_evict_acc_per_head(a) || budget < 1 || !sinks || !recent ||
        (a->n > 0 && !scores))
        return SCDB_EINVAL;
    if (!scdb_evict_policy_runs_on(p, 1) || p->kind == SCDB_EVICT_FULL) return SCDB_EMISMATCH;
    *sinks = p->kind == SCDB_EVICT_STREAMING ? 4 : 0;
    if (p->kind == SCDB_EVICT_LEARNED)
        return scdb_evict_mlp_heads_score(p->mlp, a, budget, scores, sinks, recent);
    return heur_scores(p, a, budget, scores, recent);
}

/* ------------------------------------------------------------ compact */

scdb_err scdb_evict_acc_compact_heads(scdb_evict_acc *a, const int *keep, int n_keep)
{
    if (!a || !scdb_evict_acc_per_head(a) || n_keep < 0 || n_keep > a->n || (n_keep > 0 && !keep))
        return SCDB_EINVAL;
    const int K = scdb_evict_acc_n_sets(a), cap = a->capacity;
    for (int k = 0; k < K; k++) {
        const int *kk = keep + (size_t)k * n_keep;
        for (int i = 0; i < n_keep; i++)
            if (kk[i] < 0 || kk[i] >= a->n || (i > 0 && kk[i] <= kk[i - 1])) return SCDB_EINVAL;
    }
    int32_t *pos = scdb_evict_acc_head_pos(a);
    float *mass = scdb_evict_acc_head_mass(a), *last = scdb_evict_acc_head_last(a);
    float *win = scdb_evict_acc_head_win(a);
    /* each set's three slot arrays and its ring rows with its own list
     * (the kernels' run-by-run gather: the ring is most of the work) */
    for (int k = 0; k < K; k++) {
        const int *kk = keep + (size_t)k * n_keep;
        const scdb_k_compact_group g[] = {{pos + (size_t)k * cap, 1, 0},
                                          {mass + (size_t)k * cap, 1, 0},
                                          {last + (size_t)k * cap, 1, 0},
                                          {win + (size_t)k * cap, a->window, (size_t)K * cap * 4}};
        scdb_err rc = scdb_k_compact_groups_cpu(g, 4, 4, a->n, kk, n_keep);
        if (rc) return rc;
    }
    a->n = n_keep;
    scdb_evict_acc_set_mode(a, SCDB_EVICT_MODE_SPLIT);   /* version 1's arrays are stale now */
    return SCDB_OK;
}

scdb_err scdb_evict_acc_compact_shared(scdb_evict_acc *a, const int *keep, int n_keep)
{
    if (!a || !scdb_evict_acc_per_head(a) || scdb_evict_acc_mode(a) == SCDB_EVICT_MODE_SPLIT ||
        n_keep < 0 || n_keep > a->n || (n_keep > 0 && !keep))
        return SCDB_EINVAL;
    for (int i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= a->n || (i > 0 && keep[i] <= keep[i - 1])) return SCDB_EINVAL;
    const int K = scdb_evict_acc_n_sets(a), cap = a->capacity;
    /* version 1's nine slot arrays and ring, as scdb_evict_acc_compact,
     * then every set's arrays with the same list (rows of capacity floats) */
    const size_t stride = (size_t)((char *)scdb_evict_acc_n_obs(a) - (char *)scdb_evict_acc_pos(a));
    const size_t row = (size_t)cap * 4;
    const scdb_k_compact_group g[] = {
        {scdb_evict_acc_pos(a), SCDB_EVICT_ACC_SLOT_ARRAYS, stride},
        {scdb_evict_acc_win(a), a->window * a->n_kv_heads, row},
        {scdb_evict_acc_head_pos(a), K, row},
        {scdb_evict_acc_head_mass(a), K, row},
        {scdb_evict_acc_head_last(a), K, row},
        {scdb_evict_acc_head_win(a), a->window * K, row}};
    scdb_err rc = scdb_k_compact_groups_cpu(g, (int)(sizeof g / sizeof *g), 4, a->n, keep, n_keep);
    if (rc) return rc;
    a->n = n_keep;
    scdb_evict_acc_set_mode(a, SCDB_EVICT_MODE_SHARED);
    return SCDB_OK;
}

scdb_err scdb_evict_compact_heads(scdb_kv_cache *c, scdb_evict_acc *a, const int *keep,
                                  int n_keep, int32_t *pos_map)
{
    scdb_err rc;
    if (!c || !a || !scdb_evict_acc_per_head(a) || a->n != c->n || c->n_layers != a->n_layers ||
        c->n_kv_heads != a->n_kv_heads)
        return SCDB_EINVAL;
    if ((rc = scdb_evict_acc_compact_heads(a, keep, n_keep))) return rc;   /* checks keep */
    const int G = c->n_kv_heads, hd = c->head_dim, K = scdb_evict_acc_n_sets(a);
    const size_t d = (size_t)scdb_kv_dim(c);
    for (int l = 0; l < c->n_layers; l++)
        for (int g = 0; g < G; g++) {
            const int *kk = keep + ((size_t)l * G + g) * n_keep;
            float *k0 = scdb_kv_k(c, l, 0) + (size_t)g * hd, *v0 = scdb_kv_v(c, l, 0) + (size_t)g * hd;
            for (int i = 0; i < n_keep; i++) {
                if (kk[i] == i) continue;
                /* one head's row: a short copy, inline (a memcpy call per
                 * 128 bytes cost more than the bytes) */
                float *kd = k0 + (size_t)i * d, *vd = v0 + (size_t)i * d;
                const float *ks = k0 + (size_t)kk[i] * d, *vs = v0 + (size_t)kk[i] * d;
                for (int e = 0; e < hd; e++) kd[e] = ks[e];
                for (int e = 0; e < hd; e++) vd[e] = vs[e];
            }
        }
    /* the cache's one position per slot: the newest of the sets' positions
     * there (increasing in the slot, and older than any token still to
     * come, so attention's causal mask is unchanged) */
    const int32_t *pos = scdb_evict_acc_head_pos(a);
    for (int i = 0; i < n_keep; i++) {
        int32_t m = pos[i];
        for (int k = 1; k < K; k++)
            if (pos[(size_t)k * a->capacity + i] > m) m = pos[(size_t)k * a->capacity + i];
        c->pos[i] = m;
    }
    c->n = n_keep;
    if (pos_map) memcpy(pos_map, c->pos, (size_t)n_keep * sizeof *pos_map);
    return SCDB_OK;
}

/* ------------------------------------------------------------ run */

scdb_err scdb_evict_run_heads(const scdb_evict_policy *p, scdb_kv_cache *cache,
                              scdb_evict_acc *acc, int budget, int32_t *pos_map, int *n_keep)
{
    const int n = cache->n, K = scdb_evict_acc_n_sets(acc);
    const int nk_all = n < budget ? n : budget;
    float *scores = malloc((size_t)K * n * sizeof *scores);
    int *keep = malloc((size_t)K * (nk_all > 0 ? nk_all : 1) * sizeof *keep);
    int *recent = malloc((size_t)K * sizeof *recent);
    int sinks = 0, nk = 0;
    scdb_err rc = SCDB_ENOMEM;

    if (!scores || !keep || !recent) goto done;
    if ((rc = scdb_evict_heads_scores(p, acc, budget, scores, &sinks, recent))) goto done;
    for (int k = 0; k < K; k++) {
        /* the newest slot is every set's (its position is the cache's next
         * one less one: model.c continues from it) */
        int r = recent[k] < 1 ? 1 : recent[k], got = 0;
        if ((rc = scdb_k_select_topb_cpu(scores + (size_t)k * n, n, budget, sinks, r,
                                         keep + (size_t)k * nk_all, &got)))
            goto done;
        if (got != nk_all) { rc = SCDB_EINVAL; goto done; }
    }
    nk = nk_all;
    if ((rc = scdb_evict_compact_heads(cache, acc, keep, nk, pos_map))) goto done;
    *n_keep = nk;
done:
    free(scores);
    free(keep);
    free(recent);
    return rc;
}

/* ------------------------------------------------------------ the learned scorer */

int scdb_evict_mlp_heads_at(const scdb_evict_mlp *m, int budget, int capacity)
{
    return m && m->heads.on && capacity > 0 && budget >= 1 &&
           (double)budget <= (double)m->heads.split * (double)capacity;
}

scdb_err scdb_evict_mlp_heads_score(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                    float *scores, int *sinks, int *recent)
{
    if (!m) return SCDB_EINVAL;
    return scdb_evict_heads_score_ctx(&m->heads, a, budget, scores, sinks, recent, NULL);
}

static inline float flog(float x) { return logf(x); }

/* Set k's context c[SCDB_EVICT_HEAD_CTX] at budget B (evict_train.h) from
 * raw[a->n], the sum of its ring rows (SnapKV's window attention before
 * pooling). */
static void set_context(const scdb_evict_acc *a, int k, int budget, const float *raw, float *c)
{
    const int n = a->n, cap = a->capacity;
    const int32_t *pk = scdb_evict_acc_head_pos(a) + (size_t)k * cap;
    float tot = 0.0f, loc = 0.0f, snk = 0.0f, ent = 0.0f;
    for (int j = 0; j < n; j++) tot += raw[j];
    if (tot > 0.0f) {
        const float inv = 1.0f / tot;
        for (int j = 0; j < n; j++) {
            float q = raw[j] * inv;
            loc += a->last_pos - pk[j] < 32 ? q : 0.0f;
            ent -= q * scdb_k_logf_fast(q);   /* finite at 0: adds 0 */
        }
        for (int j = 0; j < n && j < 4; j++) snk += raw[j] * inv;
        ent = n > 1 ? ent / logf((float)n) : 0.0f;
    }
    c[0] = loc;
    c[1] = snk;
    c[2] = ent;
    c[3] = log2f((float)budget / 64.0f);
    /* the set's depth in the network: 0 first layer .. 1 last */
    c[4] = a->n_layers > 1 ? (float)(k / a->n_kv_heads) / (float)(a->n_layers - 1) : 0.0f;
    c[5] = 1.0f;
}

/* Every set's ring sums (raw [K][n]); SnapKV's pooled scores too if snap. */
static scdb_err ring_sums(const scdb_evict_acc *a, float *raw, float *snap)
{
    const int K = scdb_evict_acc_n_sets(a), n = a->n;
    float *tmp = snap ? NULL : malloc((size_t)K * n * sizeof *tmp);
    if (!snap && !tmp) return SCDB_ENOMEM;
    scdb_err rc = scdb_k_snapkv_score_sets_cpu(scdb_evict_acc_head_win(a), a->ring_fill, K,
                                               a->capacity, n, SCDB_EVICT_SNAPKV_POOL,
                                               snap ? snap : tmp, raw);
    free(tmp);
    return rc;
}

scdb_err scdb_evict_heads_gate_input(const scdb_evict_acc *a, int budget, float *g)
{
    enum { C = SCDB_EVICT_HEAD_CTX };
    if (!a || !scdb_evict_acc_per_head(a) || budget < 1 || !g) return SCDB_EINVAL;
    const int K = scdb_evict_acc_n_sets(a), L = a->n_layers, G = a->n_kv_heads, n = a->n;
    float *raw = malloc((size_t)K * (n > 0 ? n : 1) * sizeof *raw), c[C];
    if (!raw) return SCDB_ENOMEM;
    scdb_err rc = n > 0 ? ring_sums(a, raw, NULL) : SCDB_OK;
    if (rc) {
        free(raw);
        return rc;
    }
    double sl = 0, sq = 0, ss = 0, se = 0, sqe = 0, early = 0, late = 0;
    int ne = 0, nl = 0;
    for (int k = 0; k < K; k++) {
        set_context(a, k, budget, raw + (size_t)k * n, c);
        sl += c[0];
        sq += (double)c[0] * c[0];
        ss += c[1];
        se += c[2];
        sqe += (double)c[2] * c[2];
        if (k / G < (L + 1) / 2) { early += c[0]; ne++; } else { late += c[0]; nl++; }
    }
    free(raw);
    double ml = sl / K, me = se / K;
    g[0] = (float)ml;
    g[1] = (float)(ss / K);
    g[2] = (float)me;
    g[3] = (float)sqrt(fmax(sq / K - ml * ml, 0.0));
    g[4] = (float)sqrt(fmax(sqe / K - me * me, 0.0));
    g[5] = (float)((nl ? late / nl : 0.0) - (ne ? early / ne : 0.0));
    g[6] = log2f((float)budget / 64.0f);
    g[7] = 1.0f;
    return SCDB_OK;
}

int scdb_evict_mlp_heads_choose(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget)
{
    if (!m || !m->heads.on) return 0;
    if (m->heads.force) return m->heads.force == 2;
    if (!m->heads.has_gate) return 1;
    float g[SCDB_EVICT_GATE_N];
    if (scdb_evict_heads_gate_input(a, budget, g)) return 0;   /* (out of memory: one set) */
    float v = 0.0f;
    for (int i = 0; i < SCDB_EVICT_GATE_N; i++) v += m->heads.gate[i] * g[i];
    return v > 0.0f;
}

/* One set's scores: w . x_j over its five per-slot inputs.  A loop of
 * maps (an integer clamp, the kernels' branch-free log), so it vectorises;
 * a float compare there stays a branch at -O2. */
SCDB_EVICT_CLONES
static void score_set(float *restrict sc, const float *restrict sp, const int32_t *restrict pk,
                      const float *restrict mk, const float *restrict lk, int n, int32_t newest,
                      float snap_scale, float fn, float lb, const float *restrict wf)
{
    const float w0 = wf[0], w1 = wf[1], w2 = wf[2], w3 = wf[3], w4 = wf[4];
    for (int j = 0; j < n; j++) {
        int ai = newest - pk[j] + 1;
        ai = ai > 1 ? ai : 1;
        float age = (float)ai;
        /* (the shares are >= 0: the fast log is within an ulp of logf) */
        float x0 = scdb_k_logf_fast(1e-3f + sp[j] * snap_scale);
        float x1 = scdb_k_logf_fast(1e-3f + lk[j] * fn);
        float x2 = scdb_k_logf_fast(1e-3f + mk[j] * fn / age);
        float x3 = scdb_k_logf_fast(age) - lb;
        sc[j] = w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3;
    }
    /* the fifth input, "one of the first four slots", last in the sum as
     * in the loop it would be (elsewhere it adds w4 * 0: nothing); in the
     * loop it kept GCC from vectorising it */
    for (int j = 0; j < n && j < 4; j++) sc[j] += w4;
}

scdb_err scdb_evict_heads_score_ctx(const scdb_evict_heads *h, const scdb_evict_acc *a,
                                    int budget, float *scores, int *sinks, int *recent,
                                    float *ctx_out)
{
    enum { F = SCDB_EVICT_HEAD_FEATS, C = SCDB_EVICT_HEAD_CTX };
    if (!h || !h->on || !a || !scdb_evict_acc_per_head(a) || budget < 1 || !sinks || !recent ||
        h->n_win < 1 || h->n_win > SCDB_EVICT_HEAD_MAX_WIN)
        return SCDB_EINVAL;
    const int K = scdb_evict_acc_n_sets(a), n = a->n, cap = a->capacity;
    *sinks = h->sinks;
    if (n == 0) {
        for (int k = 0; k < K; k++) recent[k] = 1;
        return SCDB_OK;
    }
    if (!scores) return SCDB_EINVAL;
    float *snap = malloc((size_t)K * n * sizeof *snap), *raw = malloc((size_t)K * n * sizeof *raw);
    if (!snap || !raw) {
        free(snap);
        free(raw);
        return SCDB_ENOMEM;
    }
    scdb_err rc = ring_sums(a, raw, snap);
    if (rc) goto done;
    const int32_t *pos = scdb_evict_acc_head_pos(a);
    const float *mass = scdb_evict_acc_head_mass(a), *last = scdb_evict_acc_head_last(a);
    const float fn = (float)n, lb = flog((float)budget);
    const float snap_scale = fn / (float)(a->ring_fill > 0 ? a->ring_fill : 1);
    const int32_t newest = a->last_pos;
    for (int k = 0; k < K; k++) {
        const int32_t *pk = pos + (size_t)k * cap;
        const float *mk = mass + (size_t)k * cap, *lk = last + (size_t)k * cap;
        float c[C];
        set_context(a, k, budget, raw + (size_t)k * n, c);
        if (ctx_out) memcpy(ctx_out + (size_t)k * C, c, sizeof c);
        float wf[F];
        for (int f = 0; f < F; f++) {
            float v = 0.0f;
            for (int i = 0; i < C; i++) v += h->a[f * C + i] * c[i];
            wf[f] = v;
        }
        int best = 0;
        float bl = 0.0f;
        for (int ch = 0; ch < h->n_win; ch++) {
            float v = 0.0f;
            for (int i = 0; i < C; i++) v += h->d[ch * C + i] * c[i];
            if (ch == 0 || v > bl) { bl = v; best = ch; }
        }
        int rw = (int)floorf(h->win_frac[best] * (float)budget);
        recent[k] = rw < 1 ? 1 : rw;
        float *sc = scores + (size_t)k * n;
        const float *sp = snap + (size_t)k * n;
        score_set(sc, sp, pk, mk, lk, n, newest, snap_scale, fn, lb, wf);
    }
    rc = SCDB_OK;
done:
    free(snap);
    free(raw);
    return rc;
}
