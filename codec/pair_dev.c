/* pair_dev.c — a pair's decode on a device (codec.h, "device decode"): the
 * weights uploaded once through a kernels.h ops table, and a decode that
 * sequences the codec ops on that device straight into the consumer's cache.
 * It mirrors scdb_pair_decode_range (pair.c) step for step; test_codec runs
 * it on the CPU table and compares the two bit for bit. */
#include "codec_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct dev_layer {
    uint16_t *dk, *dv;            /* f16 [kv][in] */
    float *mk, *mv;               /* [kv] */
    float *w1, *b1, *w2, *b2, *skip, *wk, *wv;   /* aligner layers */
    /* a lora pair's own corrections and deltas (its shared part's tensors
     * above; b2 is its b2e) */
    float *cku, *ckv, *cvu, *cvv, *au, *av, *lka, *lkb, *lva, *lvb;
    /* token input: h0's decoders [kv][d] (f32; a lora pair's: its shared
     * part's) and a lora pair's own corrections of them [dec_rank][d] */
    float *gk, *gv, *ctk, *ctv;
} dev_layer;

struct scdb_pair_dev {
    const scdb_pair *p;
    const scdb_k_ops *ops;
    dev_layer L[SCDB_CODEC_MAX_LAYERS];
    float *wk0, *wv0;             /* token layer */
};

static scdb_err up_f32(const scdb_k_ops *ops, const float *src, size_t n, float **out)
{
    void *d = NULL;
    scdb_err rc;

    *out = NULL;
    if (!src || !n) return SCDB_OK;
    if ((rc = ops->alloc(n * sizeof(float), &d))) return rc;
    if ((rc = ops->upload(d, src, n * sizeof(float)))) {
        ops->release(d);
        return rc;
    }
    *out = d;
    return SCDB_OK;
}

/* f32 values that are f16 exactly (pairs store decoders as f16) -> f16 */
static scdb_err up_f16(const scdb_k_ops *ops, const float *src, size_t n, uint16_t **out)
{
    uint16_t *h;
    void *d = NULL;
    scdb_err rc;

    *out = NULL;
    if (!src || !n) return SCDB_OK;
    if (!(h = malloc(n * sizeof *h))) return SCDB_ENOMEM;
    scdb_f32_to_f16_n(src, h, n);
    rc = ops->alloc(n * sizeof *h, &d);
    if (!rc && (rc = ops->upload(d, h, n * sizeof *h))) {
        ops->release(d);
        d = NULL;
    }
    free(h);
    *out = d;
    return rc;
}

void scdb_pair_dev_free(scdb_pair_dev **dp)
{
    scdb_pair_dev *d;

    if (!dp || !*dp) return;
    d = *dp;
    for (int l = 0; l < SCDB_CODEC_MAX_LAYERS; l++) {
        dev_layer *x = &d->L[l];
        void *ptrs[] = {x->dk, x->dv, x->mk, x->mv, x->w1, x->b1, x->w2, x->b2, x->skip,
                        x->wk, x->wv, x->cku, x->ckv, x->cvu, x->cvv, x->au, x->av,
                        x->lka, x->lkb, x->lva, x->lvb, x->gk, x->gv, x->ctk, x->ctv};
        for (size_t i = 0; i < SCDB_ARRAY_LEN(ptrs); i++) d->ops->release(ptrs[i]);
    }
    d->ops->release(d->wk0);
    d->ops->release(d->wv0);
    free(d);
    *dp = NULL;
}

scdb_err scdb_pair_dev_new(const scdb_pair *p, scdb_device dev, scdb_pair_dev **out)
{
    const scdb_k_ops *ops = scdb_k_ops_get(dev);
    scdb_pair_dev *d;
    scdb_err rc = SCDB_OK;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!p || !ops) return SCDB_EINVAL;
    if (!(d = calloc(1, sizeof *d))) return SCDB_ENOMEM;
    d->p = p;
    d->ops = ops;
    const scdb_pair_info *in = &p->info;
    const scdb_pair *S = p->shared;      /* a lora pair: its shared part's tensors */
    size_t kv = (size_t)in->kv_dim, dm = (size_t)in->d_model;
    size_t rc_ = (size_t)in->dec_rank, ra = (size_t)in->align_rank, lr = (size_t)in->lora_rank;
    for (int l = 0; l < in->n_layers && !rc; l++) {
        const cx_player *L = &p->L[l], *W = S ? &S->L[l] : L;
        dev_layer *x = &d->L[l];
        size_t iw = (size_t)cx_in_width(p, l);
        if (S) {             /* its own parts (NULL where it has none) */
            if (!rc) rc = up_f32(ops, L->cku, kv * rc_, &x->cku);
            if (!rc) rc = up_f32(ops, L->ckv, rc_ * iw, &x->ckv);
            if (!rc) rc = up_f32(ops, L->cvu, kv * rc_, &x->cvu);
            if (!rc) rc = up_f32(ops, L->cvv, rc_ * iw, &x->cvv);
            if (!rc) rc = up_f32(ops, L->lka, lr * dm, &x->lka);
            if (!rc) rc = up_f32(ops, L->lkb, kv * lr, &x->lkb);
            if (!rc) rc = up_f32(ops, L->lva, lr * dm, &x->lva);
            if (!rc) rc = up_f32(ops, L->lvb, kv * lr, &x->lvb);
        }
        if (p->layers[l].kind == SCDB_CB_TOKENS) continue;
        if (!rc) rc = up_f16(ops, W->dk, kv * iw, &x->dk);
        if (!rc) rc = up_f16(ops, W->dv, kv * iw, &x->dv);
        if (!rc) rc = up_f32(ops, L->mk, kv, &x->mk);
        if (!rc) rc = up_f32(ops, L->mv, kv, &x->mv);
        if (!rc && in->token_input) rc = up_f32(ops, W->gk, kv * dm, &x->gk);
        if (!rc && in->token_input) rc = up_f32(ops, W->gv, kv * dm, &x->gv);
        if (!rc && S && in->token_corr) rc = up_f32(ops, L->ctk, rc_ * dm, &x->ctk);
        if (!rc && S && in->token_corr) rc = up_f32(ops, L->ctv, rc_ * dm, &x->ctv);
        if (!L->has_aligner) continue;
        const scdb_aligner *a = &W->al;
        size_t r = (size_t)a->r, hid = (size_t)a->hidden, ad = (size_t)a->d;
        if (!rc) rc = up_f32(ops, a->w1, hid * r, &x->w1);
        if (!rc) rc = up_f32(ops, a->b1, hid, &x->b1);
        if (!rc) rc = up_f32(ops, a->w2, ad * hid, &x->w2);
        if (!rc) rc = up_f32(ops, S ? L->b2e : a->b2, ad, &x->b2);
        if (!rc) rc = up_f32(ops, a->skip, ad * r, &x->skip);
        if (!rc) rc = up_f32(ops, W->wk, kv * dm, &x->wk);
        if (!rc) rc = up_f32(ops, W->wv, kv * dm, &x->wv);
        if (S && !rc) rc = up_f32(ops, L->au, ad * ra, &x->au);
        if (S && !rc) rc = up_f32(ops, L->av, ra * iw, &x->av);
    }
    if (!rc && in->has_tokens) {
        const scdb_pair *T0 = S ? S : p;
        rc = up_f32(ops, T0->wk0, kv * dm, &d->wk0);
        if (!rc) rc = up_f32(ops, T0->wv0, kv * dm, &d->wv0);
    }
    if (!rc) rc = ops->sync();
    if (rc) {
        scdb_pair_dev_free(&d);
        return rc;
    }
    *out = d;
    return SCDB_OK;
}

/* y [n][ldy] += (x V^T) U^T on the device: pair.c's lowrank_add, the same
 * two products (a lora pair's correction of a product with W) */
static scdb_err lowrank_add(const scdb_k_ops *ops, const float *x, int ldx, int n, const float *Vm,
                            const float *U, int r, int out, float *t, float *y, int ldy)
{
    scdb_err rc;
    if (r <= 0 || !Vm || !U) return SCDB_OK;
    if ((rc = ops->gemm(0, 1, n, r, ldx, 1.0f, x, ldx, Vm, ldx, 0.0f, t, r))) return rc;
    return ops->gemm(0, 1, n, out, r, 1.0f, t, r, U, r, 1.0f, y, ldy);
}

scdb_err scdb_pair_dev_decode_range(const scdb_pair_dev *d, const scdb_codebook *cb,
                                    const void *payload, int block_n, int t0, int n,
                                    const int32_t *pos, const int32_t *tokens, int n_patch,
                                    scdb_kv_cache *cache, int slot0)
{
    const scdb_pair *p;
    const scdb_pair_info *in;
    const scdb_k_ops *ops;
    unsigned char patch[SCDB_CODEC_MAX_LAYERS] = {0};
    const void *f16 = payload;
    const uint16_t *codes;
    uint16_t *deq = NULL;             /* host: int8 codes as f16, as the CPU decode */
    uint16_t *zh = NULL;              /* host: the range's codes, f16 */
    float *hh = NULL;                 /* host: token-layer rows */
    void *zd = NULL, *z32 = NULL, *hd = NULL;   /* device */
    float *td = NULL;                 /* device: a lora pair's x V^T rows */
    void *h0d = NULL;                 /* device: token input's h0 rows */
    int any_patch = 0, any_token = 0;
    scdb_err rc = SCDB_OK;

    if (!d || !cb) return SCDB_EINVAL;
    p = d->p;
    ops = d->ops;
    if ((!payload && p->code_dim > 0) || n <= 0 || !pos || !cache || slot0 < 0 || t0 < 0 ||
        block_n < n || t0 > block_n - n)
        return SCDB_EINVAL;
    in = &p->info;
    if ((rc = cx_pair_decode_check(p, cb, n, pos, tokens, n_patch, cache, slot0, patch)))
        return rc;
    if ((rc = cx_codes_as_f16(cb, &f16, &block_n, &t0, n, &deq))) return rc;
    codes = f16;
    for (int l = 0; l < in->n_layers; l++) {
        if (p->layers[l].kind == SCDB_CB_TOKENS) any_token = 1;
        else if (patch[l]) any_patch = 1;
    }

    const scdb_pair *S = p->shared, *T0 = S ? S : p;   /* a lora pair's shared part */
    int kv = in->kv_dim, dm = in->d_model, D = p->code_dim;
    int32_t *posd = cache->pos + slot0;   /* the positions' final place is their input */
    if ((rc = ops->upload(posd, pos, (size_t)n * sizeof *pos))) goto done;
    if (D > 0) {
        /* the range's codes as the device reads them: layer sections
         * [n][width] at n * off[l], or (all_input) token-major rows [n][D] */
        if (!(zh = malloc((size_t)n * D * sizeof *zh))) { rc = SCDB_ENOMEM; goto done; }
        for (int l = 0; l < in->n_layers; l++) {
            const scdb_cb_layer *CL = &p->layers[l];
            const uint16_t *src = codes + (size_t)block_n * CL->offset + (size_t)t0 * CL->width;
            if (!CL->width) continue;
            if (p->all_input)
                for (int i = 0; i < n; i++)
                    memcpy(zh + (size_t)i * D + CL->offset, src + (size_t)i * CL->width,
                           (size_t)CL->width * sizeof *zh);
            else
                memcpy(zh + (size_t)n * CL->offset, src, (size_t)n * CL->width * sizeof *zh);
        }
        if ((rc = ops->alloc((size_t)n * D * sizeof *zh, &zd))) goto done;
        if ((rc = ops->upload(zd, zh, (size_t)n * D * sizeof *zh))) goto done;
        if (any_patch || S) {
            if ((rc = ops->alloc((size_t)n * D * sizeof(float), &z32))) goto done;
            if ((rc = ops->f16_to_f32(zd, z32, (size_t)n * D))) goto done;
        }
    }
    if (any_patch || any_token)
        if ((rc = ops->alloc((size_t)n * dm * sizeof(float), &hd))) goto done;
    if (S) {
        int rmax = in->dec_rank > in->align_rank ? in->dec_rank : in->align_rank;
        if (in->lora_rank > rmax) rmax = in->lora_rank;
        void *tv = NULL;
        if (rmax > 0 && (rc = ops->alloc((size_t)n * rmax * sizeof(float), &tv))) goto done;
        td = tv;
    }
    if (in->token_input)   /* has_tokens: filled by the TOKEN layer 0, first */
        if ((rc = ops->alloc((size_t)n * dm * sizeof(float), &h0d))) goto done;

    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        const dev_layer *X = &d->L[l];
        float *K = scdb_kv_k(cache, l, slot0), *V = scdb_kv_v(cache, l, slot0);
        size_t zoff = p->all_input ? 0 : (size_t)n * CL->offset;
        int iw = cx_in_width(p, l);
        if (CL->kind == SCDB_CB_TOKENS || patch[l]) {
            const float *wk = X->wk, *wv = X->wv;
            if (CL->kind == SCDB_CB_TOKENS) {
                /* h = RMSNorm(E[tok]) on the host, as the CPU decode computes it */
                if (!hh && !(hh = malloc((size_t)n * dm * sizeof *hh))) { rc = SCDB_ENOMEM; goto done; }
                for (int i = 0; i < n; i++)
                    memcpy(hh + (size_t)i * dm, T0->emb + (size_t)tokens[i] * dm, (size_t)dm * sizeof *hh);
                scdb_k_rmsnorm_cpu(hh, T0->norm0, n, dm, in->norm_eps, hh);
                if ((rc = ops->upload(hd, hh, (size_t)n * dm * sizeof *hh))) goto done;
                if (h0d && (rc = ops->upload(h0d, hh, (size_t)n * dm * sizeof *hh))) goto done;
                wk = d->wk0;
                wv = d->wv0;
            } else {
                const scdb_aligner *a = S ? &S->L[l].al : &p->L[l].al;
                if ((rc = ops->aligner((const float *)z32 + zoff, iw, n, a->r, a->hidden, a->d, X->w1,
                                       X->b1, X->w2, X->b2, X->skip, hd, NULL)) ||
                    (S && (rc = lowrank_add(ops, (const float *)z32 + zoff, iw, n, X->av, X->au,
                                            in->align_rank, dm, td, hd, dm))))
                    goto done;
            }
            if (!S) {
                if ((rc = ops->kv_regen(hd, n, dm, wk, wv, kv, posd, in->head_dim, in->rope_theta, K, V)))
                    goto done;
                continue;
            }
            /* a lora pair: its Wk/Wv deltas, then RoPE, in the CPU decode's order */
            if ((rc = ops->linear(hd, wk, n, dm, kv, K)) ||
                (rc = lowrank_add(ops, hd, dm, n, X->lka, X->lkb, in->lora_rank, kv, td, K, kv)) ||
                (rc = ops->linear(hd, wv, n, dm, kv, V)) ||
                (rc = lowrank_add(ops, hd, dm, n, X->lva, X->lvb, in->lora_rank, kv, td, V, kv)) ||
                (rc = ops->rope(K, n, in->n_kv_heads, in->head_dim, posd, in->rope_theta, 0)))
                goto done;
            continue;
        }
        const uint16_t *zl = iw > 0 ? (const uint16_t *)zd + zoff : NULL;
        const float *zf = iw > 0 && z32 ? (const float *)z32 + zoff : NULL;
        if ((rc = ops->lowrank_decode(zl, iw, n, iw, X->dk, X->mk, kv,
                                      p->k_post_rope || S || h0d ? NULL : posd, in->head_dim,
                                      in->rope_theta, K, kv)))
            goto done;
        if (S && zf && (rc = lowrank_add(ops, zf, iw, n, X->ckv, X->cku, in->dec_rank, kv, td, K, kv)))
            goto done;
        if ((rc = ops->lowrank_decode(zl, iw, n, iw, X->dv, X->mv, kv, NULL, in->head_dim,
                                      in->rope_theta, V, kv)))
            goto done;
        if (S && zf && (rc = lowrank_add(ops, zf, iw, n, X->cvv, X->cvu, in->dec_rank, kv, td, V, kv)))
            goto done;
        /* token input: h0's decoders (and a lora pair's correction of
         * them), before RoPE, in the CPU decode's order */
        int tc = S && in->token_corr;
        if (h0d &&
            ((rc = ops->gemm(0, 1, n, kv, dm, 1.0f, h0d, dm, X->gk, dm, 1.0f, K, kv)) ||
             (tc && (rc = lowrank_add(ops, h0d, dm, n, X->ctk, X->cku, in->dec_rank, kv, td, K, kv))) ||
             (rc = ops->gemm(0, 1, n, kv, dm, 1.0f, h0d, dm, X->gv, dm, 1.0f, V, kv)) ||
             (tc && (rc = lowrank_add(ops, h0d, dm, n, X->ctv, X->cvu, in->dec_rank, kv, td, V, kv)))))
            goto done;
        if ((S || h0d) && !p->k_post_rope &&
            (rc = ops->rope(K, n, in->n_kv_heads, in->head_dim, posd, in->rope_theta, 0)))
            goto done;
    }
    rc = ops->sync();
    if (!rc && cache->n < slot0 + n) cache->n = slot0 + n;
done:
    if (rc) ops->sync();              /* nothing queued may outlive the buffers */
    ops->release(zd);
    ops->release(z32);
    ops->release(hd);
    ops->release(td);
    ops->release(h0d);
    free(deq);
    free(zh);
    free(hh);
    return rc;
}
