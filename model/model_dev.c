/* model_dev.c — the reference transformer on a device (model.h, "on a
 * device"): the weights uploaded once through a kernels.h ops table, and a
 * forward pass that sequences the table's ops exactly as model.c's
 * scdb_model_forward sequences the CPU twins (the same calls, operands and
 * order), over a cache in that device's memory.  On the CPU table it is the
 * host forward bit for bit (test_model). */
#include "model.h"

#include <stdlib.h>
#include <string.h>

typedef struct dev_layer {
    float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3;
} dev_layer;

struct scdb_model_dev {
    const scdb_model *m;
    const scdb_k_ops *ops;
    dev_layer *L;
    float *norm, *output;
    void *scr;                  /* scratch, grown on demand */
    size_t scr_bytes;
    float *x_host;              /* embedding rows before upload */
    size_t x_host_n;
};

static scdb_err up(const scdb_k_ops *ops, const float *src, size_t n, float **out)
{
    void *d = NULL;
    scdb_err rc;

    *out = NULL;
    if ((rc = ops->alloc(n * sizeof(float), &d))) return rc;
    if ((rc = ops->upload(d, src, n * sizeof(float)))) {
        ops->release(d);
        return rc;
    }
    *out = d;
    return SCDB_OK;
}

void scdb_model_dev_free(scdb_model_dev **dp)
{
    scdb_model_dev *d;

    if (!dp || !*dp) return;
    d = *dp;
    if (d->L)
        for (int l = 0; l < scdb_model_cfg(d->m)->n_layers; l++) {
            dev_layer *x = &d->L[l];
            float *p[] = {x->attn_norm, x->wq, x->wk, x->wv, x->wo, x->ffn_norm, x->w1, x->w2, x->w3};
            for (size_t i = 0; i < SCDB_ARRAY_LEN(p); i++) d->ops->release(p[i]);
        }
    free(d->L);
    d->ops->release(d->norm);
    d->ops->release(d->output);
    d->ops->release(d->scr);
    free(d->x_host);
    free(d);
    *dp = NULL;
}

scdb_err scdb_model_dev_new(const scdb_model *m, scdb_device dev, scdb_model_dev **out)
{
    const scdb_k_ops *ops = scdb_k_ops_get(dev);
    scdb_model_dev *d;
    const float *emb, *norm, *output;
    scdb_err rc = SCDB_OK;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!m || !ops) return SCDB_EINVAL;
    if (dev == SCDB_DEV_CUDA && scdb_k_cuda_device_count() <= 0) return SCDB_EUNSUPPORTED;
    if (!scdb_model_layer(m, 0)) return SCDB_EUNSUPPORTED;   /* a low-rank adapter (model.h) */
    const scdb_model_config *c = scdb_model_cfg(m);
    size_t dm = (size_t)c->d_model, qd = (size_t)scdb_model_q_dim(c),
           kvd = (size_t)scdb_model_kv_dim(c), ff = (size_t)c->d_ff;
    if (!(d = calloc(1, sizeof *d))) return SCDB_ENOMEM;
    d->m = m;
    d->ops = ops;
    if (!(d->L = calloc((size_t)c->n_layers, sizeof *d->L))) {
        free(d);
        return SCDB_ENOMEM;
    }
    for (int l = 0; l < c->n_layers && !rc; l++) {
        const scdb_layer_weights *w = scdb_model_layer(m, l);
        dev_layer *x = &d->L[l];
        struct { const float *src; size_t n; float **dst; } t[] = {
            {w->attn_norm, dm, &x->attn_norm}, {w->wq, qd * dm, &x->wq}, {w->wk, kvd * dm, &x->wk},
            {w->wv, kvd * dm, &x->wv}, {w->wo, dm * qd, &x->wo}, {w->ffn_norm, dm, &x->ffn_norm},
            {w->w1, ff * dm, &x->w1}, {w->w2, dm * ff, &x->w2}, {w->w3, ff * dm, &x->w3}};
        for (size_t i = 0; i < SCDB_ARRAY_LEN(t) && !rc; i++) rc = up(ops, t[i].src, t[i].n, t[i].dst);
    }
    scdb_model_globals(m, &emb, &norm, &output);
    if (!rc) rc = up(ops, norm, dm, &d->norm);
    if (!rc) rc = up(ops, output, (size_t)c->vocab_size * dm, &d->output);
    if (!rc) rc = ops->sync();
    if (rc) {
        scdb_model_dev_free(&d);
        return rc;
    }
    *out = d;
    return SCDB_OK;
}

const scdb_k_ops *scdb_model_dev_ops(const scdb_model_dev *d) { return d ? d->ops : NULL; }
const scdb_model *scdb_model_dev_model(const scdb_model_dev *d) { return d ? d->m : NULL; }

scdb_err scdb_model_dev_cache_new(const scdb_model_dev *d, int capacity, scdb_kv_cache **out)
{
    const scdb_model_config *c;
    void *mem = NULL;
    size_t bytes;
    scdb_err rc;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!d || capacity <= 0) return SCDB_EINVAL;
    c = scdb_model_cfg(d->m);
    bytes = scdb_kv_cache_bytes(c->n_layers, c->n_kv_heads, c->head_dim, capacity);
    if ((rc = d->ops->alloc(bytes, &mem))) return rc;
    if ((rc = d->ops->zero(mem, bytes)) ||
        (rc = scdb_kv_cache_view(mem, bytes, c->n_layers, c->n_kv_heads, c->head_dim, capacity,
                                 out))) {
        d->ops->release(mem);
        return rc;
    }
    return SCDB_OK;
}

void scdb_model_dev_cache_free(const scdb_model_dev *d, scdb_kv_cache **c)
{
    if (!c || !*c) return;
    if (d) d->ops->release((*c)->mem);
    scdb_kv_cache_free(c);       /* a view: frees the struct only */
}

/* Scratch of at least `bytes` (contents undefined). */
static scdb_err scratch(scdb_model_dev *d, size_t bytes, void **out)
{
    if (bytes > d->scr_bytes) {
        void *p = NULL;
        scdb_err rc = d->ops->alloc(bytes, &p);
        if (rc) return rc;
        d->ops->release(d->scr);
        d->scr = p;
        d->scr_bytes = bytes;
    }
    *out = d->scr;
    return SCDB_OK;
}

static size_t a64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The layer on the device: model.c's scdb_model_layer_forward with every
 * buffer in the device's memory (pos_dev too).  The scratch past `used`
 * bytes holds this layer's temporaries. */
static scdb_err layer(scdb_model_dev *d, int layer_i, float *x, const int32_t *pos_dev, int n,
                      scdb_kv_cache *cache, int slot0, scdb_capture *cap, int cap_index,
                      char *base)
{
    const scdb_k_ops *o = d->ops;
    const scdb_model_config *c = scdb_model_cfg(d->m);
    const dev_layer *w = &d->L[layer_i];
    int dm = c->d_model, qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c), ff = c->d_ff;
    int n_slots = slot0 + n;
    size_t N = (size_t)n, off = 0;
    float *h = (float *)(base + off);  off += a64(N * dm * 4);
    float *q = (float *)(base + off);  off += a64(N * qd * 4);
    float *kk = (float *)(base + off); off += a64(N * kvd * 4);
    float *vv = (float *)(base + off); off += a64(N * kvd * 4);
    float *att = (float *)(base + off); off += a64(N * qd * 4);
    float *g = (float *)(base + off);  off += a64(N * ff * 4);
    float *u = (float *)(base + off);  off += a64(N * ff * 4);
    float *probs = (float *)(base + off);
    size_t li = (size_t)cap_index;
    int direct = cap && cap->probs && cap->probs_slots == n_slots;
    scdb_err rc;

    if (cap && cap->resid && (rc = o->dcopy(cap->resid + li * N * dm, x, N * dm * 4))) return rc;
    if ((rc = o->rmsnorm(x, w->attn_norm, n, dm, c->norm_eps, h))) return rc;
    if (cap && cap->h_in && (rc = o->dcopy(cap->h_in + li * N * dm, h, N * dm * 4))) return rc;
    if ((rc = o->linear(h, w->wq, n, dm, qd, q)) || (rc = o->linear(h, w->wk, n, dm, kvd, kk)) ||
        (rc = o->linear(h, w->wv, n, dm, kvd, vv)))
        return rc;
    if (cap && cap->k_pre && (rc = o->dcopy(cap->k_pre + li * N * kvd, kk, N * kvd * 4))) return rc;
    if ((rc = o->rope(q, n, c->n_heads, c->head_dim, pos_dev, c->rope_theta, 0)) ||
        (rc = o->rope(kk, n, c->n_kv_heads, c->head_dim, pos_dev, c->rope_theta, 0)))
        return rc;
    if (cap && cap->k_post && (rc = o->dcopy(cap->k_post + li * N * kvd, kk, N * kvd * 4))) return rc;
    if (cap && cap->v && (rc = o->dcopy(cap->v + li * N * kvd, vv, N * kvd * 4))) return rc;
    /* the new rows are contiguous in the cache's layer: one copy each */
    if ((rc = o->dcopy(scdb_kv_k(cache, layer_i, slot0), kk, N * kvd * 4)) ||
        (rc = o->dcopy(scdb_kv_v(cache, layer_i, slot0), vv, N * kvd * 4)) ||
        (rc = o->dcopy(cache->pos + slot0, pos_dev, N * 4)))
        return rc;
    float *pr = direct ? cap->probs + li * c->n_heads * N * n_slots : probs;
    if ((rc = o->attention(q, pos_dev, n, c->n_heads, scdb_kv_k(cache, layer_i, 0),
                           scdb_kv_v(cache, layer_i, 0), cache->pos, n_slots, c->n_kv_heads,
                           c->head_dim, att, pr, NULL)))
        return rc;
    if (cap && cap->probs && !direct) {
        /* [heads][n] rows of n_slots into rows of probs_slots, zero beyond */
        float *dst = cap->probs + li * c->n_heads * N * (size_t)cap->probs_slots;
        size_t rows = (size_t)c->n_heads * N;
        if ((rc = o->zero(dst, rows * cap->probs_slots * 4)) ||
            (rc = o->dcopy2d(dst, (size_t)cap->probs_slots * 4, probs, (size_t)n_slots * 4,
                             (size_t)n_slots * 4, rows)))
            return rc;
    }
    /* x += att Wo^T; SwiGLU feed-forward */
    if ((rc = o->gemm(0, 1, n, dm, qd, 1.0f, att, qd, w->wo, qd, 1.0f, x, dm)) ||
        (rc = o->rmsnorm(x, w->ffn_norm, n, dm, c->norm_eps, h)) ||
        (rc = o->linear(h, w->w1, n, dm, ff, g)) || (rc = o->linear(h, w->w3, n, dm, ff, u)) ||
        (rc = o->swiglu(g, u, N * ff, g)) ||
        (rc = o->gemm(0, 1, n, dm, ff, 1.0f, g, ff, w->w2, ff, 1.0f, x, dm)))
        return rc;
    return SCDB_OK;
}

static size_t layer_scratch(const scdb_model_config *c, int n, int n_slots)
{
    size_t N = (size_t)n;
    return a64(N * c->d_model * 4) + 2 * a64(N * scdb_model_q_dim(c) * 4) +
           2 * a64(N * scdb_model_kv_dim(c) * 4) + 2 * a64(N * c->d_ff * 4) +
           a64((size_t)c->n_heads * N * n_slots * 4);
}

static scdb_err check_layer_args(const scdb_model_dev *d, int layer_i, int n, int slot0,
                                 const scdb_kv_cache *cache, const scdb_capture *cap)
{
    const scdb_model_config *c = scdb_model_cfg(d->m);
    if (layer_i < 0 || layer_i >= c->n_layers || n <= 0 || slot0 < 0) return SCDB_EINVAL;
    if (scdb_model_cache_check(d->m, cache)) return SCDB_ESHAPE;
    if (slot0 + n > cache->capacity) return SCDB_EFULL;
    if (cap && cap->probs && cap->probs_slots < slot0 + n) return SCDB_EINVAL;
    return SCDB_OK;
}

scdb_err scdb_model_dev_layer_forward(scdb_model_dev *d, int layer_i, float *x, const int32_t *pos,
                                      int n, scdb_kv_cache *cache, int slot0, scdb_capture *cap,
                                      int cap_index)
{
    void *s;
    scdb_err rc;

    if (!d || !x || !pos) return SCDB_EINVAL;
    if ((rc = check_layer_args(d, layer_i, n, slot0, cache, cap))) return rc;
    size_t pb = a64((size_t)n * 4);
    if ((rc = scratch(d, pb + layer_scratch(scdb_model_cfg(d->m), n, slot0 + n), &s))) return rc;
    if ((rc = d->ops->upload(s, pos, (size_t)n * 4))) return rc;
    if ((rc = layer(d, layer_i, x, s, n, cache, slot0, cap, cap_index, (char *)s + pb))) return rc;
    return d->ops->sync();
}

scdb_err scdb_model_dev_head(scdb_model_dev *d, const float *x, int n, float *logits)
{
    const scdb_model_config *c;
    void *h;
    scdb_err rc;

    if (!d || !x || !logits || n <= 0) return SCDB_EINVAL;
    c = scdb_model_cfg(d->m);
    if ((rc = scratch(d, (size_t)n * c->d_model * 4, &h))) return rc;
    if ((rc = d->ops->rmsnorm(x, d->norm, n, c->d_model, c->norm_eps, h)) ||
        (rc = d->ops->linear(h, d->output, n, c->d_model, c->vocab_size, logits)))
        return rc;
    return d->ops->sync();
}

scdb_err scdb_model_dev_forward(scdb_model_dev *d, const int32_t *tokens, const int32_t *pos,
                                int n, scdb_kv_cache *cache, float *logits, scdb_capture *cap)
{
    const scdb_model_config *c;
    int32_t *own_pos = NULL;
    void *s;
    scdb_err rc;

    if (!d || !tokens || n <= 0 || !cache) return SCDB_EINVAL;
    c = scdb_model_cfg(d->m);
    if ((rc = scdb_model_cache_check(d->m, cache))) return rc;
    if (cache->n + n > cache->capacity) return SCDB_EFULL;
    if (cap && cap->probs && cap->probs_slots < cache->n + n) return SCDB_EINVAL;
    if (!pos) {
        int32_t p0 = 0;
        if (!(own_pos = malloc((size_t)n * sizeof *own_pos))) return SCDB_ENOMEM;
        if (cache->n > 0 &&
            (rc = d->ops->download(&p0, cache->pos + cache->n - 1, sizeof p0))) goto done;
        if (cache->n > 0) p0++;
        for (int i = 0; i < n; i++) own_pos[i] = p0 + i;
        pos = own_pos;
    }
    for (int i = 0; i < n; i++)
        if (pos[i] < 0) { rc = SCDB_EINVAL; goto done; }
    size_t N = (size_t)n, dm = (size_t)c->d_model;
    if (N * dm > d->x_host_n) {
        float *g = realloc(d->x_host, N * dm * sizeof *g);
        if (!g) { rc = SCDB_ENOMEM; goto done; }
        d->x_host = g;
        d->x_host_n = N * dm;
    }
    if ((rc = scdb_model_embed(d->m, tokens, n, d->x_host))) goto done;
    size_t xb = a64(N * dm * 4), pb = a64(N * 4);
    size_t hb = a64(N * dm * 4);      /* the head's normalised rows */
    size_t lb = layer_scratch(c, n, cache->n + n);
    if ((rc = scratch(d, xb + pb + (lb > hb ? lb : hb), &s))) goto done;
    float *x = s;
    int32_t *pos_dev = (int32_t *)((char *)s + xb);
    char *tmp = (char *)s + xb + pb;
    if ((rc = d->ops->upload(x, d->x_host, N * dm * 4)) ||
        (rc = d->ops->upload(pos_dev, pos, N * 4)))
        goto done;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = layer(d, l, x, pos_dev, n, cache, cache->n, cap, l, tmp))) goto done;
    if (cap && cap->resid &&
        (rc = d->ops->dcopy(cap->resid + (size_t)c->n_layers * N * dm, x, N * dm * 4)))
        goto done;
    if (logits && ((rc = d->ops->rmsnorm(x, d->norm, n, c->d_model, c->norm_eps, (float *)tmp)) ||
                   (rc = d->ops->linear((float *)tmp, d->output, n, c->d_model, c->vocab_size,
                                        logits))))
        goto done;
    if ((rc = d->ops->sync())) goto done;
    cache->n += n;
done:
    free(own_pos);
    return rc;
}
