/* decoder_scd.c — the "scd" codebook kind: payloads are the producer
 * codebook's codes (codec/codec.h), f16 or -- codes_dtype = int8 -- int8
 * with a scale per token and layer, each dtype its own namespace of the
 * same codebook file; each (codebook, consumer) pair file
 * decodes them into the consumer's own K/V (REUSE layers) or regenerates K/V
 * through the pair's aligners and the consumer's W_k, W_v and RoPE (PATCH
 * layers), straight into the consumer's cache or arena. */
#include "broker_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

typedef struct scd_dec {
    const scdb_codebook *cb;   /* owned by the broker codebook entry */
    scdb_pair *pair;
    /* the pair's weights on each device, uploaded at the first decode into
     * that device's memory (dev_mu guards the pointers and dev_err) */
    pthread_mutex_t dev_mu;
    scdb_pair_dev *dev[2];     /* [scdb_device] */
    scdb_err dev_err[2];       /* a failed upload is not retried */
} scd_dec;

static void scd_codebook_destroy(void *ctx)
{
    scdb_codebook *cb = ctx;
    scdb_codebook_free(&cb);
}

/* Broker-side encode: copy the block's rows out of the producer's states
 * (checking they are finite: a producer's garbage would otherwise be
 * stored as NaN codes every consumer decodes) and encode them. */
static scdb_err scd_encode(void *ctx, const float *h_in, int rows, int t0, int n, void *payload)
{
    const scdb_codebook *book = ctx;
    const scdb_codebook_info *in = scdb_codebook_get_info(book);
    size_t per = (size_t)n * (size_t)in->d_model;
    scdb_codec_states st = {0};
    float *tmp;
    scdb_err rc;

    if (t0 < 0 || n <= 0 || t0 + n > rows) return SCDB_EINVAL;
    tmp = malloc(sizeof *tmp * per * (size_t)in->n_layers);
    if (!tmp) return SCDB_ENOMEM;
    for (int l = 0; l < in->n_layers; l++) {
        const float *src = h_in + ((size_t)l * (size_t)rows + (size_t)t0) * (size_t)in->d_model;
        float *dst = tmp + (size_t)l * per;
        int bad = 0;
        memcpy(dst, src, per * sizeof *dst);
        for (size_t i = 0; i < per; i++) bad |= !isfinite(dst[i]);
        if (bad) {
            free(tmp);
            return SCDB_ERANGE;
        }
    }
    st.h_in = tmp;
    rc = scdb_codec_encode(book, &st, n, payload);   /* int8: refuses overflow itself */
    free(tmp);
    if (rc) return rc;
    if (in->code_dtype == SCDB_CODES_F16) {   /* finite but huge states overflow f16: no Inf codes either */
        const uint16_t *c = payload;
        size_t len = scdb_codec_codes_len(in, n);
        for (size_t i = 0; i < len; i++)
            if ((c[i] & 0x7c00u) == 0x7c00u) return SCDB_ERANGE;
    }
    return SCDB_OK;
}

/* A producer's own codes (put): the size, and values no decoder may see
 * (NaN / Inf f16 codes; NaN, Inf, negative or oversized int8 scales). */
static scdb_err scd_check(void *ctx, const void *payload, size_t bytes, int n, char *msg,
                          size_t msglen)
{
    return scdb_codec_check_payload(ctx, payload, bytes, n, msg, msglen);
}

scdb_err bk_scd_open_codebook(scdb_broker_codebook *cb, const char *file, scdb_dtype dtype,
                                char *errbuf, size_t errlen)
{
    scdb_codebook *book = NULL;
    const scdb_codebook_info *in;
    const scdb_broker_model *m = cb->producer;
    scdb_err rc;

    scdb_code_dtype cdt = SCDB_CODES_F16;
    (void)dtype;
    if (!file || !*file) {
        if (errbuf) snprintf(errbuf, errlen, "codebook %s: kind scd needs file = CODEBOOK.safetensors", cb->name);
        return SCDB_EINVAL;
    }
    if (cb->codes_dtype[0] && scdb_code_dtype_parse(cb->codes_dtype, &cdt)) {
        if (errbuf)
            snprintf(errbuf, errlen, "codebook %s: codes_dtype must be f16 or int8, not '%s'",
                     cb->name, cb->codes_dtype);
        return SCDB_EINVAL;
    }
    if ((rc = scdb_codebook_load(file, &book, errbuf, errlen))) return rc;
    scdb_codebook_set_code_dtype(book, cdt);
    in = scdb_codebook_get_info(book);
    if (in->n_layers != m->n_layers || in->kv_dim != m->n_kv_heads * m->head_dim) {
        if (errbuf)
            snprintf(errbuf, errlen, "codebook %s: fitted for %d layers x %d KV channels, "
                     "producer %s has %d x %d", cb->name, in->n_layers, in->kv_dim, m->name,
                     m->n_layers, m->n_kv_heads * m->head_dim);
        scdb_codebook_free(&book);
        return SCDB_EMISMATCH;
    }
    cb->payload_dtype = scdb_codebook_payload_dtype(book);
    cb->token_bytes = scdb_codebook_token_bytes(book);
    snprintf(cb->producer_fp, sizeof cb->producer_fp, "%s", in->producer_fp);
    cb->check = scd_check;
    rc = scdb_ns_make(in->id.b, sizeof in->id.b, cb->payload_dtype, SCDB_CODEC_VERSION, &cb->ns);
    if (rc) { scdb_codebook_free(&book); return rc; }
    cb->ctx = book;
    cb->destroy = scd_codebook_destroy;
    if (!in->k_post_rope) {       /* post-RoPE ablation codebooks need K too */
        cb->states_layers = in->n_layers;
        cb->states_dim = in->d_model;
        cb->encode = scd_encode;
    }
    return SCDB_OK;
}

static scdb_err scd_decode(void *ctx, const scdb_decode_block *blk, scdb_kv_cache *c,
                           int slot0, int32_t p0, int n)
{
    const scd_dec *d = ctx;
    int32_t pos_small[256] = {0}, *pos = pos_small;   /* = {0}: gcc -O3 cannot see the fill */
    scdb_err rc;

    if (!blk || !c || n <= 0 || n > blk->n_tokens || slot0 < 0 || slot0 > c->capacity - n)
        return SCDB_EINVAL;
    if (blk->payload_len != (uint64_t)blk->n_tokens * scdb_codebook_token_bytes(d->cb))
        return SCDB_ESHAPE;
    if (n > (int)SCDB_ARRAY_LEN(pos_small) && !(pos = malloc((size_t)n * sizeof *pos)))
        return SCDB_ENOMEM;
    for (int i = 0; i < n; i++) pos[i] = p0 + i;
    rc = scdb_pair_decode_range(d->pair, d->cb, blk->payload, blk->n_tokens, 0, n, pos,
                                blk->tokens, blk->has_patch ? blk->n_patch : -1, c, slot0);
    if (pos != pos_small) free(pos);
    return rc;
}

static scdb_err scd_decode_dev(void *ctx, const scdb_k_ops *ops, const scdb_decode_block *blk,
                               scdb_kv_cache *c, int slot0, int32_t p0, int n)
{
    scd_dec *d = ctx;
    const scdb_pair_dev *pd;
    int32_t pos_small[256] = {0}, *pos = pos_small;   /* = {0}: gcc -O3 cannot see the fill */
    unsigned dv;
    scdb_err rc;

    if (!ops || !blk || !c || n <= 0 || n > blk->n_tokens || slot0 < 0 || slot0 > c->capacity - n)
        return SCDB_EINVAL;
    if (blk->payload_len != (uint64_t)blk->n_tokens * scdb_codebook_token_bytes(d->cb))
        return SCDB_ESHAPE;
    dv = (unsigned)ops->device;
    if (dv >= SCDB_ARRAY_LEN(d->dev)) return SCDB_EINVAL;
    pthread_mutex_lock(&d->dev_mu);
    if (!d->dev[dv] && !d->dev_err[dv]) {
        d->dev_err[dv] = scdb_pair_dev_new(d->pair, ops->device, &d->dev[dv]);
        if (d->dev_err[dv])
            scdb_error("scd decoder: cannot load the pair's weights on %s: %s",
                       scdb_device_name(ops->device), scdb_strerror(d->dev_err[dv]));
        else
            scdb_info("scd decoder: pair weights loaded on %s", scdb_device_name(ops->device));
    }
    pd = d->dev[dv];
    rc = d->dev_err[dv];
    pthread_mutex_unlock(&d->dev_mu);
    if (rc) return rc;
    /* the device decode gathers the codes on the host: a block in the GPU
     * hot tier comes down first (codes are small) */
    void *codes = (void *)blk->payload;
    if (blk->payload_on_device) {
        if (!(codes = malloc((size_t)blk->payload_len))) return SCDB_ENOMEM;
        if ((rc = ops->download(codes, blk->payload, (size_t)blk->payload_len))) {
            free(codes);
            return rc;
        }
    }
    if (n > (int)SCDB_ARRAY_LEN(pos_small) && !(pos = malloc((size_t)n * sizeof *pos))) {
        if (codes != blk->payload) free(codes);
        return SCDB_ENOMEM;
    }
    for (int i = 0; i < n; i++) pos[i] = p0 + i;
    rc = scdb_pair_dev_decode_range(pd, d->cb, codes, blk->n_tokens, 0, n, pos, blk->tokens,
                                    blk->has_patch ? blk->n_patch : -1, c, slot0);
    if (pos != pos_small) free(pos);
    if (codes != blk->payload) free(codes);
    return rc;
}

static void scd_destroy(void *ctx)
{
    scd_dec *d = ctx;
    if (!d) return;
    for (size_t i = 0; i < SCDB_ARRAY_LEN(d->dev); i++) scdb_pair_dev_free(&d->dev[i]);
    pthread_mutex_destroy(&d->dev_mu);
    scdb_pair_free(&d->pair);
    free(d);
}

scdb_err bk_scd_new_decoder(const scdb_broker_codebook *cb, const scdb_broker_model *consumer,
                              const char *file, scdb_decoder *out, char *errbuf, size_t errlen)
{
    const scdb_pair_info *pi;
    scd_dec *d;
    scdb_err rc;

    if (!file || !*file) {
        if (errbuf) snprintf(errbuf, errlen, "pair %s -> %s: decoder scd needs file = PAIR.safetensors",
                             cb->name, consumer->name);
        return SCDB_EINVAL;
    }
    if (!cb->ctx || strcmp(cb->kind, "scd") != 0) {
        if (errbuf) snprintf(errbuf, errlen, "pair %s -> %s: codebook is not of kind scd",
                             cb->name, consumer->name);
        return SCDB_EMISMATCH;
    }
    d = calloc(1, sizeof *d);
    if (!d) return SCDB_ENOMEM;
    pthread_mutex_init(&d->dev_mu, NULL);
    d->cb = cb->ctx;
    if ((rc = scdb_pair_load(file, d->cb, &d->pair, errbuf, errlen))) {
        pthread_mutex_destroy(&d->dev_mu);
        free(d);
        return rc;
    }
    pi = scdb_pair_get_info(d->pair);
    if (pi->n_layers != consumer->n_layers || pi->n_kv_heads != consumer->n_kv_heads ||
        pi->head_dim != consumer->head_dim) {
        if (errbuf)
            snprintf(errbuf, errlen, "pair %s -> %s: pair decodes into %d/%d/%d KV, consumer has %d/%d/%d",
                     cb->name, consumer->name, pi->n_layers, pi->n_kv_heads, pi->head_dim,
                     consumer->n_layers, consumer->n_kv_heads, consumer->head_dim);
        scd_destroy(d);
        return SCDB_EMISMATCH;
    }
    snprintf(out->consumer_fp, sizeof out->consumer_fp, "%s", pi->consumer_fp);
    out->recompute = pi->recompute;
    out->recompute_set = pi->recompute.policy != SCDB_RECOMPUTE_NONE || pi->recompute_figures[0];
    out->name = "scd";
    out->decode = scd_decode;
    out->decode_dev = scd_decode_dev;
    out->destroy = scd_destroy;
    out->ctx = d;
    return SCDB_OK;
}
