/* pair.c — per (producer, consumer) pair artifacts: file format, validation
 * against the codebook and the models, and decode into a consumer's
 * slot-indexed KV cache. */
#include "codec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

scdb_pair *cx_pair_alloc(void) { return calloc(1, sizeof(scdb_pair)); }

void scdb_pair_free(scdb_pair **pp)
{
    if (!pp || !*pp) return;
    scdb_pair *p = *pp;
    for (int l = 0; l < SCDB_CODEC_MAX_LAYERS; l++) {
        cx_player *L = &p->L[l];
        free(L->dk); free(L->mk); free(L->dv); free(L->mv); free(L->wk); free(L->wv);
        scdb_aligner_clear(&L->al);
    }
    free(p->emb); free(p->norm0); free(p->wk0); free(p->wv0);
    free(p);
    *pp = NULL;
}

const scdb_pair_info *scdb_pair_get_info(const scdb_pair *p) { return &p->info; }

static scdb_err build_bundle(const scdb_pair *p, cx_bundle *b)
{
    const scdb_pair_info *in = &p->info;
    char list[4096];
    int v[SCDB_CODEC_MAX_LAYERS];
    scdb_err rc;
    int kv = in->kv_dim, d = in->d_model;

    memset(b, 0, sizeof *b);
#define M(k, ...) do { if ((rc = cx_bundle_meta(b, k, __VA_ARGS__))) goto fail; } while (0)
    M("format", "scdb-pair");
    M("version", "%d", SCDB_CODEC_VERSION);
    M("codebook_id", "%s", in->codebook_hex);
    M("producer", "%s", in->producer);
    M("consumer", "%s", in->consumer);
    M("producer_fp", "%s", in->producer_fp);
    M("consumer_fp", "%s", in->consumer_fp);
    M("arch_fp", "%s", in->arch_fp);
    M("n_layers", "%d", in->n_layers);
    M("d_model", "%d", in->d_model);
    M("n_kv_heads", "%d", in->n_kv_heads);
    M("head_dim", "%d", in->head_dim);
    M("vocab_size", "%d", in->vocab_size);
    M("rope_theta", "%.9g", (double)in->rope_theta);
    M("norm_eps", "%.9g", (double)in->norm_eps);
    M("k_space", "%s", p->k_post_rope ? "post_rope" : "pre_rope");
    for (int l = 0; l < in->n_layers; l++) v[l] = (int)p->layers[l].kind;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("layer_kind", "%s", list);
    for (int l = 0; l < in->n_layers; l++) v[l] = p->layers[l].r_k;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("r_k", "%s", list);
    for (int l = 0; l < in->n_layers; l++) v[l] = p->layers[l].r_v;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("r_v", "%s", list);
    for (int l = 0; l < in->n_layers; l++) v[l] = p->layers[l].r_h;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("r_h", "%s", list);
    M("hidden", "%d", in->hidden);
    cx_fmt_ints(list, sizeof list, in->patch_order, in->n_aligners);
    M("patch_order", "%s", list);
    M("n_patch", "%d", in->n_patch);
    M("has_tokens", "%d", in->has_tokens);
    M("decoder_input", "%s", p->all_input ? "all" : "layer");
    M("late_added", "%d", in->late_added);
    M("notes", "%s", p->notes);
#undef M
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        const cx_player *L = &p->L[l];
        if (CL->kind != SCDB_CB_CODED) continue;
        int iw = cx_in_width(p, l);
        if (iw > 0 &&
            ((rc = cx_bundle_add(b, SCDB_F16, L->dk, kv, iw, "layers.%d.dec_k", l)) ||
             (rc = cx_bundle_add(b, SCDB_F16, L->dv, kv, iw, "layers.%d.dec_v", l))))
            goto fail;
        if ((rc = cx_bundle_add(b, SCDB_F32, L->mk, kv, 0, "layers.%d.mean_k", l)) ||
            (rc = cx_bundle_add(b, SCDB_F32, L->mv, kv, 0, "layers.%d.mean_v", l)))
            goto fail;
    }
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i];
        const cx_player *L = &p->L[l];
        const scdb_aligner *a = &L->al;
        if ((rc = cx_bundle_add(b, SCDB_F16, a->w1, a->hidden, a->r, "layers.%d.align.w1", l)) ||
            (rc = cx_bundle_add(b, SCDB_F32, a->b1, a->hidden, 0, "layers.%d.align.b1", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, a->w2, d, a->hidden, "layers.%d.align.w2", l)) ||
            (rc = cx_bundle_add(b, SCDB_F32, a->b2, d, 0, "layers.%d.align.b2", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, a->skip, d, a->r, "layers.%d.align.skip", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, L->wk, kv, d, "layers.%d.wk", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, L->wv, kv, d, "layers.%d.wv", l)))
            goto fail;
    }
    if (in->has_tokens &&
        ((rc = cx_bundle_add(b, SCDB_F32, p->emb, in->vocab_size, d, "tok_embeddings")) ||
         (rc = cx_bundle_add(b, SCDB_F32, p->norm0, d, 0, "layers.0.attn_norm")) ||
         (rc = cx_bundle_add(b, SCDB_F32, p->wk0, kv, d, "layers.0.wk")) ||
         (rc = cx_bundle_add(b, SCDB_F32, p->wv0, kv, d, "layers.0.wv"))))
        goto fail;
    return SCDB_OK;
fail:
    cx_bundle_free(b);
    return rc;
}

/* Round the stored-as-f16 tensors in memory too, so that a pair fitted in
 * this process decodes exactly like the same pair loaded from its file. */
static void round_f16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = scdb_f16_to_f32(scdb_f32_to_f16(x[i]));
}

scdb_err cx_pair_finish(scdb_pair *p)
{
    cx_layout(p->layers, p->info.n_layers, &p->code_dim);
    for (int l = 0; l < p->info.n_layers; l++)
        if (p->layers[l].kind == SCDB_CB_CODED && p->L[l].dk) {
            round_f16(p->L[l].dk, (size_t)p->info.kv_dim * cx_in_width(p, l));
            round_f16(p->L[l].dv, (size_t)p->info.kv_dim * cx_in_width(p, l));
        }
    for (int i = 0; i < p->info.n_aligners; i++) {
        scdb_aligner *a = &p->L[p->info.patch_order[i]].al;
        round_f16(a->w1, (size_t)a->hidden * a->r);
        round_f16(a->w2, (size_t)a->d * a->hidden);
        round_f16(a->skip, (size_t)a->d * a->r);
        round_f16(p->L[p->info.patch_order[i]].wk, (size_t)p->info.kv_dim * a->d);
        round_f16(p->L[p->info.patch_order[i]].wv, (size_t)p->info.kv_dim * a->d);
    }
    cx_layout(p->layers, p->info.n_layers, &p->code_dim);
    return SCDB_OK;
}

scdb_err scdb_pair_save(const scdb_pair *p, const char *path)
{
    cx_bundle b;
    scdb_codec_id sum;
    char hex[33];
    if (!p || !path) return SCDB_EINVAL;
    scdb_err rc = build_bundle(p, &b);
    if (rc) return rc;
    cx_bundle_hash(&b, "checksum", &sum);
    scdb_codec_id_hex(&sum, hex);
    if (!(rc = cx_bundle_meta(&b, "checksum", "%s", hex))) rc = cx_bundle_write(&b, path);
    cx_bundle_free(&b);
    return rc;
}

scdb_err scdb_pair_load(const char *path, const scdb_codebook *cb, scdb_pair **out,
                        char *errbuf, size_t errlen)
{
    scdb_st_file *f = NULL;
    scdb_pair *p = NULL;
    cx_bundle b = {0};
    char s[64], nm[96];
    int kinds[SCDB_CODEC_MAX_LAYERS], r[3][SCDB_CODEC_MAX_LAYERS], cnt;
    scdb_err rc;

    if (!path || !cb || !out) return SCDB_EINVAL;
    *out = NULL;
    const scdb_codebook_info *ci = &cb->info;
    if ((rc = cx_open(path, &f, errbuf, errlen))) return rc;
    p = cx_pair_alloc();
    if (!p) { rc = SCDB_ENOMEM; goto fail; }
    scdb_pair_info *in = &p->info;

    const char *fmt = scdb_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "scdb-pair")) {
        scdb_errf(errbuf, errlen, "%s: not an scdb pair (metadata format = '%s')", path, fmt ? fmt : "(none)");
        rc = SCDB_EFORMAT;
        goto fail;
    }
    int ver;
    if ((rc = cx_meta_int(f, "version", 0, 1 << 30, &ver, errbuf, errlen))) goto fail;
    if (ver != SCDB_CODEC_VERSION) {
        scdb_errf(errbuf, errlen, "%s: pair version %d, this build reads %d", path, ver, SCDB_CODEC_VERSION);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    /* the codebook first: a pair for another codebook is refused as such */
    if ((rc = cx_meta_str(f, "codebook_id", in->codebook_hex, sizeof in->codebook_hex, errbuf, errlen)))
        goto fail;
    if (scdb_codec_id_parse(in->codebook_hex, &in->codebook_id)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'codebook_id' is not 32 hex digits", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if (memcmp(&in->codebook_id, &ci->id, sizeof ci->id)) {
        scdb_errf(errbuf, errlen, "%s: pair belongs to codebook %s, not %s", path, in->codebook_hex, ci->id_hex);
        rc = SCDB_EMISMATCH;
        goto fail;
    }
    /* checksum over everything else */
    const char *sumhex = scdb_st_meta(f, "checksum");
    scdb_codec_id stored, sum;
    if (!sumhex || scdb_codec_id_parse(sumhex, &stored)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'checksum' missing or not 32 hex digits", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if ((rc = cx_bundle_from_file(f, &b))) goto fail;
    cx_bundle_hash(&b, "checksum", &sum);
    cx_bundle_free(&b);
    if (memcmp(&stored, &sum, sizeof sum)) {
        scdb_errf(errbuf, errlen, "%s: contents do not match the stored checksum (corrupt or edited)", path);
        rc = SCDB_ECHECKSUM;
        goto fail;
    }
    if ((rc = cx_meta_str(f, "producer", in->producer, sizeof in->producer, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "consumer", in->consumer, sizeof in->consumer, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "producer_fp", in->producer_fp, sizeof in->producer_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "consumer_fp", in->consumer_fp, sizeof in->consumer_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "arch_fp", in->arch_fp, sizeof in->arch_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "notes", p->notes, sizeof p->notes, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "n_layers", 1, SCDB_CODEC_MAX_LAYERS, &in->n_layers, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "d_model", 1, 65536, &in->d_model, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "n_kv_heads", 1, 4096, &in->n_kv_heads, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "head_dim", 2, 65536, &in->head_dim, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "vocab_size", 1, 1 << 20, &in->vocab_size, errbuf, errlen)) ||
        (rc = cx_meta_float(f, "rope_theta", &in->rope_theta, errbuf, errlen)) ||
        (rc = cx_meta_float(f, "norm_eps", &in->norm_eps, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "hidden", 0, 1 << 16, &in->hidden, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "has_tokens", 0, 1, &in->has_tokens, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "k_space", s, sizeof s, errbuf, errlen)))
        goto fail;
    in->kv_dim = in->n_kv_heads * in->head_dim;
    p->k_post_rope = !strcmp(s, "post_rope");
    if ((rc = cx_meta_str(f, "decoder_input", s, sizeof s, errbuf, errlen))) goto fail;
    if (strcmp(s, "all") && strcmp(s, "layer")) {
        scdb_errf(errbuf, errlen, "%s: metadata 'decoder_input' must be 'layer' or 'all'", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    p->all_input = in->all_input = !strcmp(s, "all");
    /* optional (pairs written before it are joint fits) */
    if (scdb_st_meta(f, "late_added") &&
        (rc = cx_meta_int(f, "late_added", 0, 1, &in->late_added, errbuf, errlen)))
        goto fail;
    if (!cx_fp_valid(in->producer_fp) || !cx_fp_valid(in->consumer_fp)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'producer_fp' / 'consumer_fp' (%.40s, %.40s) are not weights "
                  "fingerprints", path, in->producer_fp, in->consumer_fp);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    /* shapes must agree with the codebook's producer architecture; the
     * producer is the codebook's (a pair written before the codebook was
     * re-stamped records its old 16 digits, id_producer_fp) */
    int same_producer = !strcmp(in->producer_fp, ci->producer_fp) ||
                        (ci->id_producer_fp[0] && !strcmp(in->producer_fp, ci->id_producer_fp));
    if (strcmp(in->arch_fp, ci->arch_fp) || !same_producer ||
        in->n_layers != ci->n_layers || in->d_model != ci->d_model || in->kv_dim != ci->kv_dim ||
        in->head_dim != ci->arch.head_dim || in->vocab_size != ci->arch.vocab_size ||
        p->k_post_rope != ci->k_post_rope) {
        scdb_errf(errbuf, errlen, "%s: architecture / producer recorded in the pair (%s, %s) differ from codebook %s's",
                path, in->arch_fp, in->producer_fp, ci->id_hex);
        rc = SCDB_EMISMATCH;
        goto fail;
    }
    if ((rc = cx_meta_ints(f, "layer_kind", SCDB_CODEC_MAX_LAYERS, 0, 1, kinds, &cnt, errbuf, errlen)))
        goto fail;
    if (cnt != in->n_layers) { scdb_errf(errbuf, errlen, "%s: layer_kind has %d entries", path, cnt); rc = SCDB_EFORMAT; goto fail; }
    static const char *rk[3] = {"r_k", "r_v", "r_h"};
    for (int q = 0; q < 3; q++) {
        if ((rc = cx_meta_ints(f, rk[q], SCDB_CODEC_MAX_LAYERS, 0, 65536, r[q], &cnt, errbuf, errlen)))
            goto fail;
        if (cnt != in->n_layers) { scdb_errf(errbuf, errlen, "%s: %s has %d entries", path, rk[q], cnt); rc = SCDB_EFORMAT; goto fail; }
    }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *C = &ci->layers[l];
        if ((int)C->kind != kinds[l] || C->r_k != r[0][l] || C->r_v != r[1][l] || C->r_h != r[2][l]) {
            scdb_errf(errbuf, errlen, "%s: layer %d code layout differs from codebook %s's", path, l, ci->id_hex);
            rc = SCDB_EMISMATCH;
            goto fail;
        }
        p->layers[l] = *C;
    }
    p->code_dim = ci->code_dim;
    if ((rc = cx_meta_ints(f, "patch_order", SCDB_CODEC_MAX_LAYERS, 0, in->n_layers - 1,
                           in->patch_order, &in->n_aligners, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "n_patch", 0, in->n_aligners, &in->n_patch, errbuf, errlen)))
        goto fail;
    if (in->has_tokens != (ci->layers[0].kind == SCDB_CB_TOKENS)) {
        scdb_errf(errbuf, errlen, "%s: has_tokens = %d but the codebook's layer 0 is %s", path, in->has_tokens,
                ci->layers[0].kind == SCDB_CB_TOKENS ? "a token layer" : "coded");
        rc = SCDB_EFORMAT;
        goto fail;
    }
    int kv = in->kv_dim, d = in->d_model, expected = 0;
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i];
        for (int j = 0; j < i; j++)
            if (in->patch_order[j] == l) {
                scdb_errf(errbuf, errlen, "%s: layer %d appears twice in patch_order", path, l);
                rc = SCDB_EFORMAT;
                goto fail;
            }
        if (ci->layers[l].r_h == 0) {
            scdb_errf(errbuf, errlen, "%s: patch layer %d is not a candidate of codebook %s", path, l, ci->id_hex);
            rc = SCDB_EFORMAT;
            goto fail;
        }
        if (in->hidden < 1) { scdb_errf(errbuf, errlen, "%s: aligners with hidden = 0", path); rc = SCDB_EFORMAT; goto fail; }
    }
    for (int l = 0; l < in->n_layers; l++) {
        cx_player *L = &p->L[l];
        int w = cx_in_width(p, l);
        if (p->layers[l].kind != SCDB_CB_CODED) continue;
        if (w > 0) {
            snprintf(nm, sizeof nm, "layers.%d.dec_k", l);
            if ((rc = cx_read_f32(f, nm, kv, w, &L->dk, errbuf, errlen))) goto fail;
            snprintf(nm, sizeof nm, "layers.%d.dec_v", l);
            if ((rc = cx_read_f32(f, nm, kv, w, &L->dv, errbuf, errlen))) goto fail;
            expected += 2;
        }
        snprintf(nm, sizeof nm, "layers.%d.mean_k", l);
        if ((rc = cx_read_f32(f, nm, kv, 0, &L->mk, errbuf, errlen))) goto fail;
        snprintf(nm, sizeof nm, "layers.%d.mean_v", l);
        if ((rc = cx_read_f32(f, nm, kv, 0, &L->mv, errbuf, errlen))) goto fail;
        expected += 2;
    }
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i], w = cx_in_width(p, l), H = in->hidden;
        cx_player *L = &p->L[l];
        scdb_aligner *a = &L->al;
        a->r = w; a->hidden = H; a->d = d;
        struct { const char *n; int64_t d0, d1; float **dst; } spec[] = {
            {"align.w1", H, w, &a->w1}, {"align.b1", H, 0, &a->b1}, {"align.w2", d, H, &a->w2},
            {"align.b2", d, 0, &a->b2}, {"align.skip", d, w, &a->skip}, {"wk", kv, d, &L->wk},
            {"wv", kv, d, &L->wv}};
        for (size_t k = 0; k < SCDB_ARRAY_LEN(spec); k++) {
            snprintf(nm, sizeof nm, "layers.%d.%s", l, spec[k].n);
            if ((rc = cx_read_f32(f, nm, spec[k].d0, spec[k].d1, spec[k].dst, errbuf, errlen))) goto fail;
            expected++;
        }
        L->has_aligner = 1;
    }
    if (in->has_tokens) {
        if ((rc = cx_read_f32(f, "tok_embeddings", in->vocab_size, d, &p->emb, errbuf, errlen)) ||
            (rc = cx_read_f32(f, "layers.0.attn_norm", d, 0, &p->norm0, errbuf, errlen)) ||
            (rc = cx_read_f32(f, "layers.0.wk", kv, d, &p->wk0, errbuf, errlen)) ||
            (rc = cx_read_f32(f, "layers.0.wv", kv, d, &p->wv0, errbuf, errlen)))
            goto fail;
        expected += 4;
    }
    if (scdb_st_count(f) != expected) {
        scdb_errf(errbuf, errlen, "%s: %d tensors, the metadata implies %d", path, scdb_st_count(f), expected);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    scdb_st_close(&f);
    *out = p;
    return SCDB_OK;
fail:
    cx_bundle_free(&b);
    scdb_pair_free(&p);
    scdb_st_close(&f);
    return rc;
}

scdb_err scdb_pair_check_models(const scdb_pair *p, const scdb_model *producer,
                                const scdb_model *consumer, char *errbuf, size_t errlen)
{
    const scdb_pair_info *in;
    char fp[SCDB_CODEC_FP_LEN];
    scdb_err rc;
    if (!p) return SCDB_EINVAL;
    in = &p->info;
    const scdb_model *ms[2] = {producer, consumer};
    const char *want[2] = {in->producer_fp, in->consumer_fp};
    const char *role[2] = {"producer", "consumer"};
    for (int i = 0; i < 2; i++) {
        if (!ms[i]) continue;
        const scdb_model_config *c = scdb_model_cfg(ms[i]);
        scdb_codec_arch_fp(c, fp);
        if (strcmp(fp, in->arch_fp)) {
            scdb_errf(errbuf, errlen, "pair %s -> %s: %s model '%s' has another architecture (%s, pair has %s)",
                    in->producer, in->consumer, role[i], c->name, fp, in->arch_fp);
            return SCDB_EMISMATCH;
        }
        if ((rc = cx_model_fp_like(ms[i], want[i], fp, errbuf, errlen))) return rc;
        if (strcmp(fp, want[i])) {
            scdb_errf(errbuf, errlen, "pair %s -> %s: %s model '%s' has weights %s, the pair was fitted on %s",
                    in->producer, in->consumer, role[i], c->name, fp, want[i]);
            return SCDB_EMISMATCH;
        }
    }
    return SCDB_OK;
}

scdb_err scdb_pair_decode(const scdb_pair *p, const scdb_codebook *cb, const void *codes,
                          int n, const int32_t *pos, const int32_t *tokens, int n_patch,
                          scdb_kv_cache *cache, int slot0)
{
    return scdb_pair_decode_range(p, cb, codes, n, 0, n, pos, tokens, n_patch, cache, slot0);
}

scdb_err cx_pair_decode_check(const scdb_pair *p, const scdb_codebook *cb, int n,
                                const int32_t *pos, const int32_t *tokens, int n_patch,
                                const scdb_kv_cache *cache, int slot0, unsigned char *patch)
{
    const scdb_pair_info *in = &p->info;

    if (memcmp(&in->codebook_id, &cb->info.id, sizeof in->codebook_id)) return SCDB_EMISMATCH;
    if (cache->n_layers != in->n_layers || cache->n_kv_heads != in->n_kv_heads ||
        cache->head_dim != in->head_dim)
        return SCDB_ESHAPE;
    if (slot0 > cache->capacity - n) return SCDB_EINVAL;
    if (in->has_tokens) {
        if (!tokens) return SCDB_EINVAL;
        for (int i = 0; i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= in->vocab_size) return SCDB_EINVAL;
    }
    for (int i = 0; i < n; i++) if (pos[i] < 0) return SCDB_EINVAL;
    if (n_patch < 0 || n_patch > in->n_aligners) n_patch = n_patch < 0 ? in->n_patch : in->n_aligners;
    for (int i = 0; i < n_patch; i++) patch[in->patch_order[i]] = 1;
    return SCDB_OK;
}

scdb_err scdb_pair_decode_range(const scdb_pair *p, const scdb_codebook *cb, const void *payload,
                                int block_n, int t0, int n, const int32_t *pos,
                                const int32_t *tokens, int n_patch, scdb_kv_cache *cache, int slot0)
{
    const scdb_pair_info *in;
    const void *src = payload;
    const uint16_t *codes;
    uint16_t *deq = NULL;             /* int8 codes: the range as f16 codes */
    float *z = NULL, *h = NULL;
    unsigned char patch[SCDB_CODEC_MAX_LAYERS] = {0};
    scdb_err rc = SCDB_OK;

    if (!p || !cb || (!payload && p->code_dim > 0) || n <= 0 || !pos || !cache || slot0 < 0 ||
        t0 < 0 || block_n < n || t0 > block_n - n)
        return SCDB_EINVAL;
    in = &p->info;
    if ((rc = cx_pair_decode_check(p, cb, n, pos, tokens, n_patch, cache, slot0, patch)))
        return rc;
    if ((rc = cx_codes_as_f16(cb, &src, &block_n, &t0, n, &deq))) return rc;
    codes = src;

    int kv = in->kv_dim, d = in->d_model, D = p->code_dim;
    z = malloc(((size_t)n * D + 1) * sizeof *z);
    h = malloc((size_t)n * d * sizeof *h);
    if (!z || !h) { rc = SCDB_ENOMEM; goto done; }
    /* layer sections of the range: section l of the block starts at
     * block_n * off[l]; the range's rows follow from row t0 */
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        if (CL->width)
            scdb_f16_to_f32_n(codes + (size_t)block_n * CL->offset + (size_t)t0 * CL->width,
                              z + (size_t)n * CL->offset, (size_t)n * CL->width);
    }
    if (p->all_input && D) {
        /* token-major rows [n][D] gathered from the layer sections */
        float *zt = malloc((size_t)n * D * sizeof *zt);
        if (!zt) { rc = SCDB_ENOMEM; goto done; }
        for (int l = 0; l < in->n_layers; l++) {
            const scdb_cb_layer *CL = &p->layers[l];
            for (int i = 0; i < n; i++)
                memcpy(zt + (size_t)i * D + CL->offset, z + (size_t)n * CL->offset + (size_t)i * CL->width,
                       (size_t)CL->width * sizeof *zt);
        }
        free(z);
        z = zt;
    }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        const cx_player *L = &p->L[l];
        float *K = scdb_kv_k(cache, l, slot0), *V = scdb_kv_v(cache, l, slot0);
        /* input rows: section l [n][width], or the whole rows [n][D] */
        const float *zl = p->all_input ? z : z + (size_t)n * CL->offset;
        int iw = cx_in_width(p, l);
        if (CL->kind == SCDB_CB_TOKENS || patch[l]) {
            const float *wk = L->wk, *wv = L->wv;
            if (CL->kind == SCDB_CB_TOKENS) {
                for (int i = 0; i < n; i++)
                    memcpy(h + (size_t)i * d, p->emb + (size_t)tokens[i] * d, (size_t)d * sizeof *h);
                scdb_k_rmsnorm_cpu(h, p->norm0, n, d, in->norm_eps, h);
                wk = p->wk0;
                wv = p->wv0;
            } else if ((rc = scdb_aligner_apply(&L->al, zl, iw, n, h))) {
                goto done;
            }
            scdb_k_linear_cpu(h, wk, n, d, kv, K);
            scdb_k_linear_cpu(h, wv, n, d, kv, V);
            scdb_k_rope_cpu(K, n, in->n_kv_heads, in->head_dim, pos, in->rope_theta, 0);
            continue;
        }
        for (int i = 0; i < n; i++) {
            memcpy(K + (size_t)i * kv, L->mk, (size_t)kv * sizeof *K);
            memcpy(V + (size_t)i * kv, L->mv, (size_t)kv * sizeof *V);
        }
        if (iw > 0) {
            scdb_k_gemm_cpu(0, 1, n, kv, iw, 1.0f, zl, iw, L->dk, iw, 1.0f, K, kv);
            scdb_k_gemm_cpu(0, 1, n, kv, iw, 1.0f, zl, iw, L->dv, iw, 1.0f, V, kv);
        }
        if (!p->k_post_rope)
            scdb_k_rope_cpu(K, n, in->n_kv_heads, in->head_dim, pos, in->rope_theta, 0);
    }
    memcpy(cache->pos + slot0, pos, (size_t)n * sizeof *pos);
    if (cache->n < slot0 + n) cache->n = slot0 + n;
done:
    free(deq);
    free(z);
    free(h);
    return rc;
}
