/* synth.c — a codebook and a pair of given shapes with random contents
 * (codec.h, scdb_codec_synthesize): what `scdb bench llama --shape 1b`
 * times at a model size no calibration can reach here.  The files are
 * ordinary codebook and pair files (the same writer, id and checksum); only
 * their encoders, decoders and aligners are random, so decode costs what a
 * calibrated pair of these shapes costs and computes nothing meaningful. */
#include "codec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* n values, uniform with standard deviation sd (seeded) */
static float *rnd(size_t n, float sd, uint64_t *s)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    const float a = sd * 1.7320508f;   /* uniform [-a, a): sd = a / sqrt(3) */
    for (size_t i = 0; x && i < n; i++) x[i] = a * scdb_xorshift_f32(s);
    return x;
}

static float *copy_or_rnd(const float *src, size_t n, float sd, uint64_t *s)
{
    if (!src) return rnd(n, sd, s);
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (x) memcpy(x, src, n * sizeof *x);
    return x;
}

scdb_err scdb_codec_synthesize(const scdb_codec_synth *o, scdb_codebook **cbo, scdb_pair **po,
                               char *errbuf, size_t errlen)
{
    if (!o || !cbo || !po || !o->producer || !o->consumer || !o->producer_fp || !o->consumer_fp)
        return SCDB_EINVAL;
    *cbo = NULL;
    *po = NULL;
    const scdb_model_config *a = &o->arch;
    const int L = a->n_layers, d = a->d_model, kv = a->n_kv_heads * a->head_dim;
    if (L < 2 || L > SCDB_CODEC_MAX_LAYERS || d < 1 || kv < 1 || a->vocab_size < 1) {
        scdb_errf(errbuf, errlen, "synthesize: architecture of %d layers, d %d, kv %d, vocabulary %d",
                  L, d, kv, a->vocab_size);
        return SCDB_ERANGE;
    }
    if (o->r_k < 1 || o->r_v < 1 || o->r_h < 1 || o->r_k > d || o->r_v > d || o->r_h > d ||
        o->n_candidates < 0 || o->n_candidates > L - 1 || o->n_patch < 0 ||
        o->n_patch > o->n_candidates || o->hidden < 1) {
        scdb_errf(errbuf, errlen, "synthesize: ranks %d,%d,%d (1..%d), %d candidates (0..%d), patch "
                  "budget %d (0..candidates), hidden %d", o->r_k, o->r_v, o->r_h, d,
                  o->n_candidates, L - 1, o->n_patch, o->hidden);
        return SCDB_ERANGE;
    }
    if (o->token_input && !o->all_layers) {
        scdb_errf(errbuf, errlen, "synthesize: token input needs all-layers decoders");
        return SCDB_EINVAL;
    }
    if (!cx_fp_valid(o->producer_fp) || !cx_fp_valid(o->consumer_fp)) {
        scdb_errf(errbuf, errlen, "synthesize: a fingerprint is not 32 (or 16) hex digits");
        return SCDB_EINVAL;
    }
    uint64_t s = o->seed ? o->seed : 0x5cdb5e7dull;
    scdb_codebook *cb = cx_codebook_alloc();
    scdb_pair *p = cx_pair_alloc();
    scdb_err rc = SCDB_ENOMEM;
    if (!cb || !p) goto fail;

    /* the codebook: layer 0 a token layer; candidates (an H part only, as
     * `scdb calibrate` writes them) spread evenly over layers 1..L-1, the
     * last layer among them; every other layer K and V parts */
    scdb_codebook_info *ci = &cb->info;
    ci->arch = *a;
    snprintf(ci->arch.name, sizeof ci->arch.name, "%s", o->producer);
    snprintf(ci->producer, sizeof ci->producer, "%s", o->producer);
    snprintf(ci->producer_fp, sizeof ci->producer_fp, "%s", o->producer_fp);
    ci->n_layers = L;
    ci->d_model = d;
    ci->kv_dim = kv;
    int cand[SCDB_CODEC_MAX_LAYERS] = {0};
    for (int k = 0; k < o->n_candidates; k++)
        cand[L - 1 - (int)((long)k * (L - 1) / o->n_candidates)] = 1;
    for (int l = 0; l < L; l++) {
        scdb_cb_layer *cl = &ci->layers[l];
        if (l == 0) {
            cl->kind = SCDB_CB_TOKENS;
            continue;
        }
        cl->kind = SCDB_CB_CODED;
        cl->r_h = cand[l] ? o->r_h : 0;
        cl->r_k = cand[l] ? 0 : o->r_k;
        cl->r_v = cand[l] ? 0 : o->r_v;
        for (int part = 0; part < 3; part++) {
            int r = part == CX_K ? cl->r_k : part == CX_V ? cl->r_v : cl->r_h;
            if (!r) continue;
            cx_enc *e = &cb->part[l][part];
            e->in_dim = d;
            e->r = r;
            /* H_in is RMS-normalised (values about 1): codes of size about 1 */
            if (!(e->mean = rnd((size_t)d, 0.1f, &s)) || !(e->enc = rnd((size_t)r * d, 1.0f / sqrtf((float)d), &s)))
                goto fail;
        }
    }
    snprintf(cb->notes, sizeof cb->notes, "synthetic: random encoders of the shapes below (cost "
             "only, no calibration; codec.h, scdb_codec_synthesize), seed %llu",
             (unsigned long long)s);
    if ((rc = cx_codebook_finish(cb))) goto fail;

    /* the pair */
    scdb_pair_info *in = &p->info;
    in->kind = SCDB_PAIR_FULL;
    in->codebook_id = ci->id;
    memcpy(in->codebook_hex, ci->id_hex, sizeof in->codebook_hex);
    snprintf(in->producer, sizeof in->producer, "%s", o->producer);
    snprintf(in->consumer, sizeof in->consumer, "%s", o->consumer);
    memcpy(in->producer_fp, ci->producer_fp, sizeof in->producer_fp);
    snprintf(in->consumer_fp, sizeof in->consumer_fp, "%s", o->consumer_fp);
    memcpy(in->arch_fp, ci->arch_fp, sizeof in->arch_fp);
    in->n_layers = L;
    if ((rc = cx_pair_alloc_layers(p, L))) goto fail;
    rc = SCDB_ENOMEM;
    in->d_model = d;
    in->n_kv_heads = a->n_kv_heads;
    in->head_dim = a->head_dim;
    in->kv_dim = kv;
    in->vocab_size = a->vocab_size;
    in->rope_theta = a->rope_theta;
    in->norm_eps = a->norm_eps;
    in->hidden = o->hidden;
    in->has_tokens = 1;
    in->token_input = o->token_input ? 1 : 0;
    p->all_input = in->all_input = o->all_layers ? 1 : 0;
    for (int l = 0; l < L; l++) p->layers[l] = ci->layers[l];
    p->code_dim = ci->code_dim;
    for (int l = 0; l < L; l++) {
        cx_player *P = &p->L[l];
        if (p->layers[l].kind != SCDB_CB_CODED) continue;
        int iw = cx_in_width(p, l);
        float sd = 1.0f / sqrtf((float)iw);
        if (!(P->dk = rnd((size_t)kv * iw, sd, &s)) || !(P->dv = rnd((size_t)kv * iw, sd, &s)) ||
            !(P->mk = rnd((size_t)kv, 0.1f, &s)) || !(P->mv = rnd((size_t)kv, 0.1f, &s)))
            goto fail;
        if (in->token_input &&
            (!(P->gk = rnd((size_t)kv * d, 0.1f / sqrtf((float)d), &s)) ||
             !(P->gv = rnd((size_t)kv * d, 0.1f / sqrtf((float)d), &s))))
            goto fail;
    }
    for (int l = 1; l < L; l++) {
        if (p->layers[l].r_h == 0) continue;
        cx_player *P = &p->L[l];
        scdb_aligner *al = &P->al;
        int r = cx_in_width(p, l), h = o->hidden;
        al->r = r;
        al->hidden = h;
        al->d = d;
        if (!(al->w1 = rnd((size_t)h * r, 1.0f / sqrtf((float)r), &s)) || !(al->b1 = rnd((size_t)h, 0.1f, &s)) ||
            !(al->w2 = rnd((size_t)d * h, 0.1f / sqrtf((float)h), &s)) || !(al->b2 = rnd((size_t)d, 0.1f, &s)) ||
            !(al->skip = rnd((size_t)d * r, 1.0f / sqrtf((float)r), &s)))
            goto fail;
        P->has_aligner = 1;
        float sd = 0.02f;
        if (!(P->wk = copy_or_rnd(o->wk ? o->wk[l] : NULL, (size_t)kv * d, sd, &s)) ||
            !(P->wv = copy_or_rnd(o->wv ? o->wv[l] : NULL, (size_t)kv * d, sd, &s)))
            goto fail;
    }
    /* patch order: candidates from the last layer down (any order costs the
     * same); the default budget o->n_patch */
    for (int l = L - 1; l >= 1; l--)
        if (p->layers[l].r_h > 0) in->patch_order[in->n_aligners++] = l;
    in->n_patch = o->n_patch;
    if (!(p->emb = copy_or_rnd(o->emb, (size_t)a->vocab_size * d, 0.02f, &s)) ||
        !(p->norm0 = copy_or_rnd(o->norm0, (size_t)d, 0.0f, &s)) ||
        !(p->wk0 = copy_or_rnd(o->wk ? o->wk[0] : NULL, (size_t)kv * d, 0.02f, &s)) ||
        !(p->wv0 = copy_or_rnd(o->wv ? o->wv[0] : NULL, (size_t)kv * d, 0.02f, &s)))
        goto fail;
    if (!o->norm0)
        for (int i = 0; i < d; i++) p->norm0[i] = 1.0f;
    snprintf(p->notes, sizeof p->notes, "synthetic: random decoders and aligners (cost only, no "
             "calibration; codec.h, scdb_codec_synthesize)%s",
             o->emb ? "; token layer and patch layers' Wk / Wv: the consumer's own" : "");
    if ((rc = cx_pair_finish(p))) goto fail;
    *cbo = cb;
    *po = p;
    return SCDB_OK;
fail:
    if (rc == SCDB_ENOMEM) scdb_errf(errbuf, errlen, "synthesize: out of memory");
    scdb_codebook_free(&cb);
    scdb_pair_free(&p);
    return rc;
}
