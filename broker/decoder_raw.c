/* decoder_raw.c — the built-in "raw" codebook kind: the payload of a block
 * IS its K/V in the consumer's own layout (schema/wire.h), F16 or F32. */
#include "broker_int.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

typedef struct raw_dec {
    int n_layers, n_kv_heads, head_dim;
    scdb_dtype dtype;
    size_t elem;
} raw_dec;

static void copy_rows(const raw_dec *r, const char *src, float *dst, size_t n)
{
    if (r->dtype == SCDB_F32)
        memcpy(dst, src, n * sizeof(float));
    else
        scdb_f16_to_f32_n((const uint16_t *)(const void *)src, dst, n);
}

static scdb_err raw_decode(void *ctx, const scdb_decode_block *blk, scdb_kv_cache *c,
                           int slot0, int32_t p0, int n)
{
    const raw_dec *r = ctx;
    size_t d, T, per_layer;
    const char *base;

    if (!blk || !c || n <= 0 || n > blk->n_tokens || slot0 < 0 || slot0 > c->capacity - n)
        return SCDB_EINVAL;
    if (c->n_layers != r->n_layers || c->n_kv_heads != r->n_kv_heads ||
        c->head_dim != r->head_dim)
        return SCDB_ESHAPE;
    d = (size_t)r->n_kv_heads * r->head_dim;
    T = (size_t)blk->n_tokens;
    per_layer = T * d * r->elem;
    if (blk->payload_len != 2 * (uint64_t)r->n_layers * per_layer) return SCDB_ESHAPE;
    base = blk->payload;
    for (int l = 0; l < r->n_layers; l++) {
        copy_rows(r, base + (size_t)l * per_layer, scdb_kv_k(c, l, slot0), (size_t)n * d);
        copy_rows(r, base + ((size_t)r->n_layers + l) * per_layer, scdb_kv_v(c, l, slot0),
                  (size_t)n * d);
    }
    for (int i = 0; i < n; i++) c->pos[slot0 + i] = p0 + i;
    if (c->n < slot0 + n) c->n = slot0 + n;
    return SCDB_OK;
}

/* Into device memory: the block's payload goes up once (F32 rows straight
 * into the cache, F16 into a staging buffer converted on the device), the
 * positions go up into pos[]. */
static scdb_err raw_decode_dev(void *ctx, const scdb_k_ops *ops, const scdb_decode_block *blk,
                               scdb_kv_cache *c, int slot0, int32_t p0, int n)
{
    const raw_dec *r = ctx;
    size_t d, T, per_layer;
    int32_t pos_small[256], *pos = pos_small;
    void *stage = NULL;
    scdb_err e = SCDB_OK;

    if (!ops || !blk || !c || n <= 0 || n > blk->n_tokens || slot0 < 0 ||
        slot0 > c->capacity - n)
        return SCDB_EINVAL;
    if (c->n_layers != r->n_layers || c->n_kv_heads != r->n_kv_heads ||
        c->head_dim != r->head_dim)
        return SCDB_ESHAPE;
    d = (size_t)r->n_kv_heads * r->head_dim;
    T = (size_t)blk->n_tokens;
    per_layer = T * d * r->elem;
    if (blk->payload_len != 2 * (uint64_t)r->n_layers * per_layer) return SCDB_ESHAPE;
    if (n > (int)SCDB_ARRAY_LEN(pos_small) && !(pos = malloc((size_t)n * sizeof *pos)))
        return SCDB_ENOMEM;
    for (int i = 0; i < n; i++) pos[i] = p0 + i;
    /* F16 goes up whole into a staging buffer and is converted there; a
     * payload already on the device (GPU hot tier) is read in place */
    const char *src = blk->payload;
    if (r->dtype == SCDB_F16 && !blk->payload_on_device) {
        e = ops->alloc((size_t)blk->payload_len, &stage);
        if (!e) e = ops->upload(stage, blk->payload, (size_t)blk->payload_len);
        src = stage;
    }
    for (int l = 0; l < r->n_layers && !e; l++)
        for (int kv = 0; kv < 2 && !e; kv++) {
            size_t off = ((size_t)kv * r->n_layers + l) * per_layer;
            float *dst = kv ? scdb_kv_v(c, l, slot0) : scdb_kv_k(c, l, slot0);
            if (r->dtype == SCDB_F16)
                e = ops->f16_to_f32((const uint16_t *)(const void *)(src + off), dst, (size_t)n * d);
            else if (blk->payload_on_device)
                e = ops->dcopy(dst, src + off, (size_t)n * d * sizeof(float));
            else
                e = ops->upload(dst, src + off, (size_t)n * d * sizeof(float));
        }
    if (!e) e = ops->upload(c->pos + slot0, pos, (size_t)n * sizeof *pos);
    {
        scdb_err s = ops->sync();     /* also before the staging buffer goes */
        if (!e) e = s;
    }
    ops->release(stage);
    if (pos != pos_small) free(pos);
    if (!e && c->n < slot0 + n) c->n = slot0 + n;
    return e;
}

static void raw_destroy(void *ctx) { free(ctx); }

scdb_err scdb_decoder_raw_new(const scdb_broker_model *m, scdb_dtype dtype, scdb_decoder *out)
{
    raw_dec *r;

    if (dtype != SCDB_F16 && dtype != SCDB_F32) return SCDB_EDTYPE;
    r = calloc(1, sizeof *r);
    if (!r) return SCDB_ENOMEM;
    r->n_layers = m->n_layers;
    r->n_kv_heads = m->n_kv_heads;
    r->head_dim = m->head_dim;
    r->dtype = dtype;
    r->elem = scdb_dtype_size(dtype);
    out->name = "raw";
    out->decode = raw_decode;
    out->decode_dev = raw_decode_dev;
    out->destroy = raw_destroy;
    out->ctx = r;
    return SCDB_OK;
}

/* ------------------------------------------------------ the kind itself */


/* Namespace id "raw/<producer>": raw KV of one model, one dtype. */
scdb_err bk_raw_open_codebook(scdb_broker_codebook *cb, const char *file, scdb_dtype dtype,
                                char *errbuf, size_t errlen)
{
    const scdb_broker_model *m = cb->producer;
    char id[SCDB_BROKER_NAME_MAX + 8];

    if (file && *file) {
        if (errbuf) snprintf(errbuf, errlen, "codebook %s: kind raw takes no file", cb->name);
        return SCDB_EINVAL;
    }
    if (cb->codes_dtype[0]) {
        if (errbuf)
            snprintf(errbuf, errlen, "codebook %s: codes_dtype is for scd codebooks (raw: dtype)",
                     cb->name);
        return SCDB_EINVAL;
    }
    if (dtype != SCDB_F16 && dtype != SCDB_F32) {
        if (errbuf) snprintf(errbuf, errlen, "codebook %s: raw dtype must be f16 or f32", cb->name);
        return SCDB_EDTYPE;
    }
    snprintf(id, sizeof id, "raw/%s", m->name);
    cb->payload_dtype = (uint32_t)dtype;
    cb->token_bytes = scdb_raw_token_bytes(m->n_layers, m->n_kv_heads, m->head_dim,
                                           scdb_dtype_size(dtype));
    return scdb_ns_make(id, strlen(id), cb->payload_dtype, SCDB_RAW_FORMAT_VERSION, &cb->ns);
}

/* Raw KV decodes into any consumer of the producer's exact KV geometry (the
 * "raw reuse" baseline when the consumer is another fine-tune). */
scdb_err bk_raw_new_decoder(const scdb_broker_codebook *cb, const scdb_broker_model *consumer,
                              const char *file, scdb_decoder *out, char *errbuf, size_t errlen)
{
    const scdb_broker_model *p = cb->producer;

    if (file && *file) {
        if (errbuf) snprintf(errbuf, errlen, "pair %s -> %s: raw decoder takes no file",
                             cb->name, consumer->name);
        return SCDB_EINVAL;
    }
    if (p->n_layers != consumer->n_layers || p->n_kv_heads != consumer->n_kv_heads ||
        p->head_dim != consumer->head_dim) {
        if (errbuf)
            snprintf(errbuf, errlen,
                     "pair %s -> %s: raw KV needs the same KV geometry (%d/%d/%d vs %d/%d/%d)",
                     cb->name, consumer->name, p->n_layers, p->n_kv_heads, p->head_dim,
                     consumer->n_layers, consumer->n_kv_heads, consumer->head_dim);
        return SCDB_ESHAPE;
    }
    return scdb_decoder_raw_new(consumer, (scdb_dtype)cb->payload_dtype, out);
}
