/* engine.c — a restored prefix with its recompute done by the reference
 * model (engine.h). */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scdb_common.h"

void scdb_engine_restore_init(scdb_engine_restore_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->recompute.policy = SCDB_RECOMPUTE_DEFAULT;
    o->patch_layers = -1;
}

int scdb_engine_score_cacheblend(void *arg, const scdb_kv_cache *cache, int slot0, int n,
                                 const int32_t *tokens, float *scores)
{
    const scdb_model *m = arg;
    const scdb_model_config *c = m ? scdb_model_cfg(m) : NULL;
    /* layer 1's attn_norm, for its input; NULL for an adapter loaded
     * SCDB_LORA_LOWRANK (model.h: no single matrix holds its weights),
     * whose layer 1 K and V come from layer 1's own forward instead (the
     * LoRA factors applied as in any forward of it; one layer more) */
    const scdb_layer_weights *w1 = c && c->n_layers > 1 ? scdb_model_layer(m, 1) : NULL;
    int d, kv, layers;
    float *x = NULL, *k = NULL, *v = NULL;
    int32_t *pos = NULL;
    scdb_kv_cache l0;
    int rc = -1;

    if (!c || !cache || !tokens || !scores || c->n_layers < 2 || n <= 0 || slot0 < 0 ||
        slot0 + n > cache->n)
        return -1;
    d = c->d_model;
    kv = scdb_model_kv_dim(c);
    /* the scratch: the cache's shape (scdb_model_layer_forward checks it),
     * but memory for only the layers forwarded here, 0 (and 1 without w1):
     * a layer's forward touches that layer's K and V only (model.h), and
     * every layer's (32 on a 7B model) would be allocated for nothing */
    layers = w1 ? 1 : 2;
    l0 = (scdb_kv_cache){.n_layers = cache->n_layers, .n_kv_heads = cache->n_kv_heads,
                         .head_dim = cache->head_dim, .capacity = slot0 + n, .n = slot0 + n};
    l0.pos = malloc((size_t)(slot0 + n) * sizeof *l0.pos);
    l0.k = calloc((size_t)layers * (slot0 + n) * kv, sizeof *l0.k);
    l0.v = calloc((size_t)layers * (slot0 + n) * kv, sizeof *l0.v);
    x = malloc((size_t)n * d * sizeof *x);
    k = malloc((size_t)n * kv * sizeof *k);
    v = malloc((size_t)n * kv * sizeof *v);
    pos = malloc((size_t)n * sizeof *pos);
    if (!l0.pos || !l0.k || !l0.v || !x || !k || !v || !pos) goto done;
    memcpy(pos, cache->pos + slot0, (size_t)n * sizeof *pos);
    /* the consumer's own layer 0 over these tokens, in a scratch copy of
     * layer 0 (the slots before them as restored): the restored cache is
     * not touched, whatever its layer 0 holds (the pair's token layer: the
     * consumer's own; raw reuse: the producer's) */
    memcpy(l0.pos, cache->pos, (size_t)(slot0 + n) * sizeof *l0.pos);
    memcpy(scdb_kv_k(&l0, 0, 0), scdb_kv_k(cache, 0, 0), (size_t)(slot0 + n) * kv * sizeof(float));
    memcpy(scdb_kv_v(&l0, 0, 0), scdb_kv_v(cache, 0, 0), (size_t)(slot0 + n) * kv * sizeof(float));
    if (scdb_model_embed(m, tokens, n, x) ||
        scdb_model_layer_forward(m, 0, x, pos, n, &l0, slot0, NULL, 0))
        goto done;
    if (w1) {
        for (int i = 0; i < n; i++) {      /* layer 1's input: RMSNorm * attn_norm */
            float *r = x + (size_t)i * d;
            double ss = 0;
            for (int j = 0; j < d; j++) ss += (double)r[j] * r[j];
            float s = (float)(1.0 / sqrt(ss / d + (double)c->norm_eps));
            for (int j = 0; j < d; j++) r[j] = r[j] * s * w1->attn_norm[j];
        }
        scdb_model_kv_from_hin(m, 1, x, pos, n, k, v);
    } else {
        /* K and V are computed before attention: the scratch's layer 1
         * (zeros) changes only the layer's output, which is not used */
        scdb_capture cap = {.k_post = k, .v = v};
        if (scdb_model_layer_forward(m, 1, x, pos, n, &l0, slot0, &cap, 0)) goto done;
    }
    {
        double mk = 0, mv = 0;
        for (int i = 0; i < n; i++) {
            const float *ok = k + (size_t)i * kv, *ov = v + (size_t)i * kv;
            for (int j = 0; j < kv; j++) mk += (double)ok[j] * ok[j], mv += (double)ov[j] * ov[j];
        }
        mk = mk / n + 1e-12;
        mv = mv / n + 1e-12;
        for (int i = 0; i < n; i++) {
            const float *ok = k + (size_t)i * kv, *ov = v + (size_t)i * kv;
            const float *rk = scdb_kv_k(cache, 1, slot0 + i), *rv = scdb_kv_v(cache, 1, slot0 + i);
            double dk = 0, dv = 0;
            for (int j = 0; j < kv; j++) {
                dk += (double)(ok[j] - rk[j]) * (ok[j] - rk[j]);
                dv += (double)(ov[j] - rv[j]) * (ov[j] - rv[j]);
            }
            scores[i] = (float)(dk / mk + dv / mv);
            /* a NaN or infinite restored K / V is the most broken token
             * there is: first to recompute (a NaN would rank lowest) */
            if (!isfinite(scores[i])) scores[i] = INFINITY;
        }
    }
    rc = 0;
done:
    free(l0.pos);
    free(l0.k);
    free(l0.v);
    free(x);
    free(k);
    free(v);
    free(pos);
    return rc;
}

scdb_err scdb_engine_recompute_layers(const scdb_model *m, scdb_kv_cache *cache, int slot0, int n,
                                      const int32_t *tokens, int layers)
{
    const scdb_model_config *c = scdb_model_cfg(m);
    float *x;
    int32_t *pos;
    scdb_err e = SCDB_OK;

    if (!m || !cache || !tokens || n <= 0 || slot0 < 0 || slot0 + n > cache->n || layers < 0 ||
        layers > c->n_layers)
        return SCDB_EINVAL;
    if (!layers) return SCDB_OK;
    x = malloc((size_t)n * c->d_model * sizeof *x);
    pos = malloc((size_t)n * sizeof *pos);
    if (!x || !pos) {
        e = SCDB_ENOMEM;
        goto done;
    }
    memcpy(pos, cache->pos + slot0, (size_t)n * sizeof *pos);
    if ((e = scdb_model_embed(m, tokens, n, x))) goto done;
    for (int l = 0; l < layers && !e; l++)
        e = scdb_model_layer_forward(m, l, x, pos, n, cache, slot0, NULL, 0);
done:
    free(x);
    free(pos);
    return e;
}

typedef struct slot_pos { int32_t pos; int slot; } slot_pos;

static int by_pos(const void *a, const void *b)
{
    const slot_pos *x = a, *y = b;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

scdb_err scdb_engine_sort_by_pos(scdb_kv_cache *c)
{
    int n = c->n, sorted = 1, kv = scdb_kv_dim(c);
    slot_pos *sp;
    float *tmp;

    for (int i = 1; i < n && sorted; i++) sorted = c->pos[i - 1] <= c->pos[i];
    if (sorted) return SCDB_OK;
    sp = malloc((size_t)n * sizeof *sp);
    tmp = malloc((size_t)n * kv * sizeof *tmp);
    if (!sp || !tmp) {
        free(sp);
        free(tmp);
        return SCDB_ENOMEM;
    }
    for (int i = 0; i < n; i++) sp[i] = (slot_pos){c->pos[i], i};
    qsort(sp, (size_t)n, sizeof *sp, by_pos);
    for (int l = 0; l < c->n_layers; l++) {
        for (int t = 0; t < 2; t++) {
            float *base = t ? scdb_kv_v(c, l, 0) : scdb_kv_k(c, l, 0);
            for (int i = 0; i < n; i++)
                memcpy(tmp + (size_t)i * kv, base + (size_t)sp[i].slot * kv, (size_t)kv * sizeof *tmp);
            memcpy(base, tmp, (size_t)n * kv * sizeof *tmp);
        }
    }
    for (int i = 0; i < n; i++) c->pos[i] = sp[i].pos;
    free(sp);
    free(tmp);
    return SCDB_OK;
}

scdb_err scdb_engine_recompute_cache(const scdb_model *m, scdb_kv_cache *cache, int slot0, int n,
                                     const int32_t *tokens, const scdb_recompute *rc,
                                     int *n_recomputed, uint64_t *score_ns)
{
    int *idx = NULL, *keep = NULL, nsel = 0, nk = 0;
    float *sc = NULL;
    int32_t *ft = NULL, *fp = NULL;
    scdb_err e = SCDB_EINVAL;

    if (n_recomputed) *n_recomputed = 0;
    if (score_ns) *score_ns = 0;
    if (!m || !cache || !tokens || !rc || n <= 0 || slot0 < 0 || slot0 + n > cache->n ||
        rc->policy == SCDB_RECOMPUTE_DEFAULT || scdb_recompute_check(rc, n, NULL, 0))
        return SCDB_EINVAL;
    if (scdb_recompute_count(rc, n) == 0) return SCDB_OK;
    for (int i = 0; i < n; i++)     /* the forward's refusal, before the slots go */
        if (tokens[i] < 0 || tokens[i] >= scdb_model_cfg(m)->vocab_size) return SCDB_EINVAL;
    idx = malloc((size_t)n * sizeof *idx);
    keep = malloc((size_t)cache->n * sizeof *keep);
    sc = malloc((size_t)n * sizeof *sc);
    if (!idx || !keep || !sc) {
        e = SCDB_ENOMEM;
        goto done;
    }
    if (rc->policy == SCDB_RECOMPUTE_SELECTIVE) {
        uint64_t t0 = scdb_now_ns();
        int bad = scdb_engine_score_cacheblend((void *)m, cache, slot0, n, tokens, sc);
        if (score_ns) *score_ns = scdb_now_ns() - t0;
        if (bad) goto done;
    }
    if ((e = scdb_recompute_select(rc, n, sc, idx, &nsel))) goto done;
    ft = malloc((size_t)(nsel ? nsel : 1) * sizeof *ft);
    fp = malloc((size_t)(nsel ? nsel : 1) * sizeof *fp);
    if (!ft || !fp) {
        e = SCDB_ENOMEM;
        goto done;
    }
    for (int i = 0; i < nsel; i++) ft[i] = tokens[idx[i]], fp[i] = cache->pos[slot0 + idx[i]];
    for (int s = 0, j = 0; s < cache->n; s++) {
        if (j < nsel && s == slot0 + idx[j]) {
            j++;
            continue;
        }
        keep[nk++] = s;
    }
    if ((e = scdb_kv_cache_compact(cache, keep, nk)) ||
        (e = scdb_model_forward(m, ft, fp, nsel, cache, NULL, NULL)) ||
        (e = scdb_engine_sort_by_pos(cache)))
        goto done;
    if (n_recomputed) *n_recomputed = nsel;
done:
    free(idx);
    free(keep);
    free(sc);
    free(ft);
    free(fp);
    return e;
}

typedef struct timed_score { const scdb_model *m; uint64_t ns; } timed_score;

static int score_timed(void *arg, const scdb_kv_cache *cache, int slot0, int n,
                       const int32_t *tokens, float *scores)
{
    timed_score *t = arg;
    uint64_t t0 = scdb_now_ns();
    int rc = scdb_engine_score_cacheblend((void *)t->m, cache, slot0, n, tokens, scores);
    t->ns += scdb_now_ns() - t0;
    return rc;
}

scdb_err scdb_engine_restore(scdb *h, const scdb_model *m, const int32_t *tokens, int n,
                             scdb_arena *a, int32_t pos0, const scdb_engine_restore_opts *o,
                             scdb_engine_restore_result *out)
{
    scdb_engine_restore_opts d;
    scdb_get_recompute_opts go;
    scdb_engine_restore_result r;
    scdb_kv_cache *c = a ? scdb_arena_cache(a) : NULL;
    int32_t *ft = NULL, *fp = NULL;
    int slot0, nf = 0, written;
    uint64_t t0;
    scdb_err e;

    memset(&r, 0, sizeof r);
    if (out) memset(out, 0, sizeof *out);
    if (!h || !m || !c || !tokens || n <= 0 || pos0 < 0) return SCDB_EINVAL;
    if ((e = scdb_model_cache_check(m, c))) return e;
    scdb_engine_restore_init(&d);
    if (o) d = *o;
    slot0 = c->n;
    /* What the forward would refuse is refused here, before the get: by
     * then the chosen tokens are out of the arena, and a refused forward
     * would leave their slots missing (rolled back below, but the fetch
     * and the decode spent for nothing).  The cache ends with n more
     * slots, whatever is restored and whatever recomputed. */
    if (n > c->capacity - slot0) return SCDB_EFULL;
    if (pos0 > INT32_MAX - (n - 1)) return SCDB_EINVAL;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= scdb_model_cfg(m)->vocab_size) return SCDB_EINVAL;
    scdb_get_recompute_init(&go);
    go.patch_layers = d.patch_layers;
    go.recompute = d.recompute;
    timed_score ts = {m, 0};
    go.score = score_timed;
    go.score_arg = &ts;
    r.rc.size = sizeof r.rc;
    t0 = scdb_now_ns();
    e = scdb_get_recompute(h, tokens, (size_t)n, a, slot0, pos0, &go, &r.rc);
    r.score_ns = ts.ns;
    r.get_ns = scdb_now_ns() - t0 - ts.ns;
    if (e) goto done;
    written = (int)r.rc.get.tokens_written;
    r.recomputed = (int)r.rc.n_recompute;
    r.restored = written - r.recomputed;
    r.prefilled = n - written;
    nf = r.recomputed + r.prefilled;
    if (nf) {
        if (!(ft = malloc((size_t)nf * sizeof *ft)) || !(fp = malloc((size_t)nf * sizeof *fp))) {
            e = SCDB_ENOMEM;
            goto done;
        }
        for (int i = 0; i < r.recomputed; i++) ft[i] = r.rc.tokens[i], fp[i] = r.rc.pos[i];
        for (int i = 0; i < r.prefilled; i++)
            ft[r.recomputed + i] = tokens[written + i], fp[r.recomputed + i] = pos0 + written + i;
        t0 = scdb_now_ns();
        e = scdb_model_forward(m, ft, fp, nf, c, NULL, NULL);
        if (!e) e = scdb_engine_sort_by_pos(c);
        r.forward_ns = scdb_now_ns() - t0;
    }
done:
    /* all or nothing: what a failure after the get leaves (the prefix
     * restored with nothing taken out when the scorer failed; the chosen
     * tokens missing when out of memory after it) is dropped, the slots
     * past slot0 free again as before the call */
    if (e) c->n = slot0;
    free(ft);
    free(fp);
    if (out) *out = r;
    return e;
}
