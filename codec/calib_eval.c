/* calib_eval.c — the measured-KL harness: next-token KL and top-1 of a decoded cache against the consumer's own prefill on the held-back windows (calib.h; the method is described there). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ measured KL */

scdb_err cx_cal_build_decode(const scdb_calib *c, const ewin *w, void *vctx, scdb_kv_cache *cache)
{
    cx_cal_dec_ctx *x = vctx;
    int P = c->o.eval_prefix;
    size_t D = (size_t)x->cb->info.code_dim;
    uint16_t *codes = malloc(((size_t)P * D + 1) * sizeof *codes);
    int32_t *pos = malloc((size_t)P * sizeof *pos);
    scdb_err rc = SCDB_ENOMEM;
    if (!codes || !pos) goto done;
    for (int i = 0; i < P; i++) pos[i] = i;
    scdb_codec_states st = {.h_in = w->ph, .k_post = w->pk};
    if ((rc = scdb_codec_encode(x->cb, &st, P, codes))) goto done;
    if (c->ops) {
        /* the session's device: the pair's weights up, the decode there,
         * the oracle's other layers up from the host */
        scdb_pair_dev *pd = NULL;
        if ((rc = scdb_pair_dev_new(x->p, c->ops->device, &pd))) goto done;
        rc = scdb_pair_dev_decode_range(pd, x->cb, codes, P, 0, P, pos, w->tok, x->n_patch, cache, 0);
        scdb_pair_dev_free(&pd);
        if (rc) goto done;
        size_t kv = (size_t)c->kv;
        for (int l = 0; l < c->L && x->only_layer >= 0 && !rc; l++) {
            if (l == x->only_layer) continue;
            if (!(rc = c->ops->upload(scdb_kv_k(cache, l, 0), scdb_kv_k(w->oracle, l, 0),
                                      (size_t)P * kv * sizeof(float))))
                rc = c->ops->upload(scdb_kv_v(cache, l, 0), scdb_kv_v(w->oracle, l, 0),
                                    (size_t)P * kv * sizeof(float));
        }
        goto done;
    }
    if ((rc = scdb_pair_decode(x->p, x->cb, codes, P, pos, w->tok, x->n_patch, cache, 0))) goto done;
    if (x->only_layer >= 0) {
        size_t kv = (size_t)c->kv;
        for (int l = 0; l < c->L; l++) {
            if (l == x->only_layer) continue;
            memcpy(scdb_kv_k(cache, l, 0), scdb_kv_k(w->oracle, l, 0), (size_t)P * kv * sizeof(float));
            memcpy(scdb_kv_v(cache, l, 0), scdb_kv_v(w->oracle, l, 0), (size_t)P * kv * sizeof(float));
        }
    }
done:
    free(codes);
    free(pos);
    return rc;
}

/* mean KL(oracle || built) and top-1 agreement over model j's eval windows */
scdb_err cx_cal_eval_kl(const scdb_calib *c, int j, cx_cal_build_fn fn, void *ctx, double *kl, double *top1)
{
    int P = c->o.eval_prefix, C = c->o.eval_cont, V = c->V, count = 0;
    scdb_kv_cache *cache = NULL;
    float *logits = malloc((size_t)C * V * sizeof *logits), *lp = malloc((size_t)V * sizeof *lp);
    void *dlogits = NULL;     /* on the session's device */
    double skl = 0.0, agree = 0.0;
    scdb_err rc = SCDB_ENOMEM;
    if (!logits || !lp) goto done;
    if (c->ops) {
        if ((rc = scdb_model_dev_cache_new(c->mdev[j], P + C, &cache)) ||
            (rc = c->ops->alloc((size_t)C * V * sizeof(float), &dlogits)))
            goto done;
    } else if ((rc = scdb_model_cache_new(c->mod[j], P + C, &cache))) {
        goto done;
    }
    for (int i = 0; i < c->nev; i++) {
        const ewin *w = &c->ev[i];
        if (w->j != j) continue;
        cache->n = 0;
        if ((rc = fn(c, w, ctx, cache))) goto done;
        cache->n = P;
        if (c->ops) {
            if ((rc = scdb_model_dev_forward(c->mdev[j], w->tok + P, NULL, C, cache, dlogits, NULL)) ||
                (rc = c->ops->download(logits, dlogits, (size_t)C * V * sizeof(float))))
                goto done;
        } else if ((rc = scdb_model_forward(c->mod[j], w->tok + P, NULL, C, cache, logits, NULL))) {
            goto done;
        }
        for (int t = 0; t < C; t++) {
            const float *o = w->ologp + (size_t)t * V;
            scdb_k_log_softmax_cpu(logits + (size_t)t * V, V, lp);
            double k = 0.0;
            int ao = 0, am = 0;
            for (int v = 0; v < V; v++) {
                k += exp((double)o[v]) * ((double)o[v] - lp[v]);
                if (o[v] > o[ao]) ao = v;
                if (lp[v] > lp[am]) am = v;
            }
            skl += k;
            agree += ao == am;
            count++;
        }
    }
    *kl = count ? skl / count : NAN;
    *top1 = count ? agree / count : NAN;
    rc = count ? SCDB_OK : SCDB_ENOTFOUND;
done:
    free(logits);
    free(lp);
    if (c->ops) {
        c->ops->release(dlogits);
        scdb_model_dev_cache_free(c->mdev[j], &cache);
    }
    scdb_kv_cache_free(&cache);
    return rc;
}

scdb_err scdb_calib_eval(scdb_calib *c, const scdb_codebook *cb, const scdb_pair *p, int ci,
                         int n_patch, double *kl, double *top1)
{
    if (!c || !cb || !p || ci < -1 || ci >= c->nm - 1 || !kl || !top1) return SCDB_EINVAL;
    cx_cal_dec_ctx x = {.cb = cb, .p = p, .n_patch = n_patch, .only_layer = -1};
    return cx_cal_eval_kl(c, ci + 1, cx_cal_build_decode, &x, kl, top1);
}
