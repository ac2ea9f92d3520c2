/* codebook.c — producer codebooks: file format (schema/FORMATS.md, "Codebook
 * and pair artifacts"), id, validation, and encode. */
#include "codec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *PART[3] = {"k", "v", "h"};

scdb_codebook *cx_codebook_alloc(void)
{
    scdb_codebook *cb = calloc(1, sizeof *cb);
    if (cb) snprintf(cb->info.method, sizeof cb->info.method, "rrr");
    return cb;
}

void scdb_codebook_free(scdb_codebook **pcb)
{
    if (!pcb || !*pcb) return;
    scdb_codebook *cb = *pcb;
    for (int l = 0; l < SCDB_CODEC_MAX_LAYERS; l++)
        for (int p = 0; p < 3; p++) {
            free(cb->part[l][p].mean);
            free(cb->part[l][p].enc);
        }
    free(cb);
    *pcb = NULL;
}

const scdb_codebook_info *scdb_codebook_get_info(const scdb_codebook *cb) { return &cb->info; }

size_t scdb_codebook_token_bytes(const scdb_codebook *cb) { return 2u * (size_t)cb->info.code_dim; }

/* Input width of part p of a layer. */
static int part_in_dim(const scdb_codebook_info *in, int p)
{
    return (p == CX_K && in->k_post_rope) ? in->kv_dim : in->d_model;
}

static int part_rank(const scdb_cb_layer *L, int p)
{
    return p == CX_K ? L->r_k : p == CX_V ? L->r_v : L->r_h;
}

static scdb_err build_bundle(const scdb_codebook *cb, cx_bundle *b)
{
    const scdb_codebook_info *in = &cb->info;
    char arch[512], list[4096];
    int v[SCDB_CODEC_MAX_LAYERS];
    scdb_err rc = SCDB_OK;

    memset(b, 0, sizeof *b);
    cx_arch_string(&in->arch, arch, sizeof arch);
#define M(k, ...) do { if ((rc = cx_bundle_meta(b, k, __VA_ARGS__))) goto fail; } while (0)
    M("format", "scdb-codebook");
    M("version", "%d", SCDB_CODEC_VERSION);
    M("producer", "%s", in->producer);
    M("producer_fp", "%s", in->producer_fp);
    M("arch", "%s", arch);
    M("arch_fp", "%s", in->arch_fp);
    M("method", "%s", in->method);
    M("k_space", "%s", in->k_post_rope ? "post_rope" : "pre_rope");
    for (int l = 0; l < in->n_layers; l++) v[l] = (int)in->layers[l].kind;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("layer_kind", "%s", list);
    for (int p = 0; p < 3; p++) {
        char key[8];
        for (int l = 0; l < in->n_layers; l++) v[l] = part_rank(&in->layers[l], p);
        cx_fmt_ints(list, sizeof list, v, in->n_layers);
        snprintf(key, sizeof key, "r_%s", PART[p]);
        M(key, "%s", list);
    }
    M("notes", "%s", cb->notes);
#undef M
    for (int l = 0; l < in->n_layers; l++)
        for (int p = 0; p < 3; p++) {
            const cx_enc *e = &cb->part[l][p];
            if (part_rank(&in->layers[l], p) == 0) continue;
            if ((rc = cx_bundle_add(b, SCDB_F32, e->mean, e->in_dim, 0, "layers.%d.%s.mean", l, PART[p])) ||
                (rc = cx_bundle_add(b, SCDB_F32, e->enc, e->r, e->in_dim, "layers.%d.%s.enc", l, PART[p])))
                goto fail;
        }
    return SCDB_OK;
fail:
    cx_bundle_free(b);
    return rc;
}

scdb_err cx_codebook_finish(scdb_codebook *cb)
{
    cx_bundle b;
    scdb_codebook_info *in = &cb->info;
    int n = 0;
    cx_layout(in->layers, in->n_layers, &in->code_dim);
    for (int l = 0; l < in->n_layers; l++)
        if (in->layers[l].r_h > 0) in->candidates[n++] = l;
    in->n_candidates = n;
    scdb_codec_arch_fp(&in->arch, in->arch_fp);
    scdb_err rc = build_bundle(cb, &b);
    if (rc) return rc;
    cx_bundle_hash(&b, "id", &in->id);
    scdb_codec_id_hex(&in->id, in->id_hex);
    cx_bundle_free(&b);
    return SCDB_OK;
}

scdb_err cx_codebook_set_producer(scdb_codebook *cb, const scdb_model *m)
{
    const scdb_model_config *c = scdb_model_cfg(m);
    scdb_codebook_info *in = &cb->info;
    in->arch = *c;
    snprintf(in->producer, sizeof in->producer, "%s", c->name);
    in->n_layers = c->n_layers;
    in->d_model = c->d_model;
    in->kv_dim = scdb_model_kv_dim(c);
    if (c->n_layers > SCDB_CODEC_MAX_LAYERS) return SCDB_ERANGE;
    return cx_model_fp(m, in->producer_fp, NULL, 0);
}

scdb_err scdb_codebook_save(const scdb_codebook *cb, const char *path)
{
    cx_bundle b;
    if (!cb || !path) return SCDB_EINVAL;
    scdb_err rc = build_bundle(cb, &b);
    if (rc) return rc;
    if (!(rc = cx_bundle_meta(&b, "id", "%s", cb->info.id_hex))) rc = cx_bundle_write(&b, path);
    cx_bundle_free(&b);
    return rc;
}

scdb_err scdb_codebook_load(const char *path, scdb_codebook **out, char *errbuf, size_t errlen)
{
    scdb_st_file *f = NULL;
    scdb_codebook *cb = NULL;
    cx_bundle b = {0};
    char s[512];
    int kinds[SCDB_CODEC_MAX_LAYERS], r[3][SCDB_CODEC_MAX_LAYERS], cnt;
    scdb_err rc;

    if (!path || !out) return SCDB_EINVAL;
    *out = NULL;
    if ((rc = cx_open(path, &f, errbuf, errlen))) return rc;
    cb = cx_codebook_alloc();
    if (!cb) { rc = SCDB_ENOMEM; goto fail; }
    scdb_codebook_info *in = &cb->info;

    const char *fmt = scdb_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "scdb-codebook")) {
        scdb_errf(errbuf, errlen, "%s: not an scdb codebook (metadata format = '%s')", path, fmt ? fmt : "(none)");
        rc = SCDB_EFORMAT;
        goto fail;
    }
    int ver;
    if ((rc = cx_meta_int(f, "version", 0, 1 << 30, &ver, errbuf, errlen))) goto fail;
    if (ver != SCDB_CODEC_VERSION) {
        scdb_errf(errbuf, errlen, "%s: codebook version %d, this build reads %d", path, ver, SCDB_CODEC_VERSION);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if ((rc = cx_meta_str(f, "producer", in->producer, sizeof in->producer, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "producer_fp", in->producer_fp, sizeof in->producer_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "arch", s, sizeof s, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "method", in->method, sizeof in->method, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "notes", cb->notes, sizeof cb->notes, errbuf, errlen)))
        goto fail;
    if (!cx_fp_valid(in->producer_fp)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'producer_fp' = '%.40s' is not a weights fingerprint", path,
                  in->producer_fp);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if (cx_arch_parse(s, &in->arch)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'arch' = '%.100s' is malformed", path, s);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    snprintf(in->arch.name, sizeof in->arch.name, "%s", in->producer);
    in->n_layers = in->arch.n_layers;
    in->d_model = in->arch.d_model;
    in->kv_dim = in->arch.n_kv_heads * in->arch.head_dim;
    const char *ks = scdb_st_meta(f, "k_space");
    if (!ks || (strcmp(ks, "pre_rope") && strcmp(ks, "post_rope"))) {
        scdb_errf(errbuf, errlen, "%s: metadata 'k_space' must be pre_rope or post_rope", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    in->k_post_rope = !strcmp(ks, "post_rope");
    if (strcmp(in->method, "rrr") && strcmp(in->method, "pca")) {
        scdb_errf(errbuf, errlen, "%s: unknown method '%s'", path, in->method);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if ((rc = cx_meta_ints(f, "layer_kind", SCDB_CODEC_MAX_LAYERS, 0, 1, kinds, &cnt, errbuf, errlen)))
        goto fail;
    if (cnt != in->n_layers) {
        scdb_errf(errbuf, errlen, "%s: layer_kind lists %d layers, arch has %d", path, cnt, in->n_layers);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    for (int p = 0; p < 3; p++) {
        char key[8];
        snprintf(key, sizeof key, "r_%s", PART[p]);
        if ((rc = cx_meta_ints(f, key, SCDB_CODEC_MAX_LAYERS, 0, 65536, r[p], &cnt, errbuf, errlen)))
            goto fail;
        if (cnt != in->n_layers) {
            scdb_errf(errbuf, errlen, "%s: %s lists %d layers, arch has %d", path, key, cnt, in->n_layers);
            rc = SCDB_EFORMAT;
            goto fail;
        }
    }
    int expected = 0;
    for (int l = 0; l < in->n_layers; l++) {
        scdb_cb_layer *L = &in->layers[l];
        L->kind = (scdb_cb_layer_kind)kinds[l];
        L->r_k = r[0][l];
        L->r_v = r[1][l];
        L->r_h = r[2][l];
        if (L->kind == SCDB_CB_TOKENS && (l != 0 || L->r_k || L->r_v || L->r_h)) {
            scdb_errf(errbuf, errlen, "%s: layer %d: only layer 0 may be a token layer, and it has no code", path, l);
            rc = SCDB_EFORMAT;
            goto fail;
        }
        for (int p = 0; p < 3; p++) {
            int rr = part_rank(L, p), id = part_in_dim(in, p);
            if (rr > id) {
                scdb_errf(errbuf, errlen, "%s: layer %d: rank %d of part %s exceeds its input width %d", path, l,
                        rr, PART[p], id);
                rc = SCDB_EFORMAT;
                goto fail;
            }
            if (!rr) continue;
            cx_enc *e = &cb->part[l][p];
            char nm[96];
            e->in_dim = id;
            e->r = rr;
            snprintf(nm, sizeof nm, "layers.%d.%s.mean", l, PART[p]);
            if ((rc = cx_read_f32(f, nm, id, 0, &e->mean, errbuf, errlen))) goto fail;
            snprintf(nm, sizeof nm, "layers.%d.%s.enc", l, PART[p]);
            if ((rc = cx_read_f32(f, nm, rr, id, &e->enc, errbuf, errlen))) goto fail;
            expected += 2;
        }
    }
    if (scdb_st_count(f) != expected) {
        scdb_errf(errbuf, errlen, "%s: %d tensors, the metadata implies %d", path, scdb_st_count(f), expected);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    /* id: recompute and compare */
    const char *idhex = scdb_st_meta(f, "id");
    scdb_codec_id stored;
    if (!idhex || scdb_codec_id_parse(idhex, &stored)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'id' missing or not 32 hex digits", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if ((rc = cx_bundle_from_file(f, &b))) goto fail;
    cx_bundle_hash(&b, "id", &in->id);
    if (memcmp(&stored, &in->id, sizeof stored)) {
        scdb_errf(errbuf, errlen, "%s: contents do not hash to the stored id %s (corrupt or edited)", path, idhex);
        rc = SCDB_ECHECKSUM;
        goto fail;
    }
    scdb_codec_id_hex(&in->id, in->id_hex);
    char afp[17], sfp[17];
    scdb_codec_arch_fp(&in->arch, afp);
    if ((rc = cx_meta_str(f, "arch_fp", sfp, sizeof sfp, errbuf, errlen))) goto fail;
    if (strcmp(afp, sfp)) {
        scdb_errf(errbuf, errlen, "%s: arch_fp %s does not match arch (%s)", path, sfp, afp);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    snprintf(in->arch_fp, sizeof in->arch_fp, "%s", afp);
    cx_layout(in->layers, in->n_layers, &in->code_dim);
    in->n_candidates = 0;
    for (int l = 0; l < in->n_layers; l++)
        if (in->layers[l].r_h > 0) in->candidates[in->n_candidates++] = l;
    cx_bundle_free(&b);
    scdb_st_close(&f);
    *out = cb;
    return SCDB_OK;
fail:
    cx_bundle_free(&b);
    scdb_codebook_free(&cb);
    scdb_st_close(&f);
    return rc;
}

scdb_err scdb_codebook_check_producer(const scdb_codebook *cb, const scdb_model *producer,
                                      char *errbuf, size_t errlen)
{
    char fp[SCDB_CODEC_FP_LEN];
    const scdb_model_config *c;
    if (!cb || !producer) return SCDB_EINVAL;
    c = scdb_model_cfg(producer);
    if (!scdb_model_config_same_arch(c, &cb->info.arch)) {
        scdb_errf(errbuf, errlen, "codebook %s was fitted for another architecture than model '%s'",
                cb->info.id_hex, c->name);
        return SCDB_EMISMATCH;
    }
    scdb_err rc = cx_model_fp_like(producer, cb->info.producer_fp, fp, errbuf, errlen);
    if (rc) return rc;
    if (strcmp(fp, cb->info.producer_fp)) {
        scdb_errf(errbuf, errlen, "codebook %s was fitted for producer weights %s ('%s'), model '%s' has %s",
                cb->info.id_hex, cb->info.producer_fp, cb->info.producer, c->name, fp);
        return SCDB_EMISMATCH;
    }
    return SCDB_OK;
}

scdb_err scdb_codec_encode(const scdb_codebook *cb, const scdb_codec_states *st, int n,
                           uint16_t *codes)
{
    const scdb_codebook_info *in;
    float *x = NULL, *z = NULL;
    int maxin, maxr = 1;
    scdb_err rc = SCDB_OK;

    if (!cb || !st || !st->h_in || n <= 0 || !codes) return SCDB_EINVAL;
    in = &cb->info;
    if (in->k_post_rope && !st->k_post) return SCDB_EINVAL;
    if (in->code_dim == 0) return SCDB_OK;
    maxin = in->d_model > in->kv_dim ? in->d_model : in->kv_dim;
    for (int l = 0; l < in->n_layers; l++)
        if (in->layers[l].width > maxr) maxr = in->layers[l].width;
    x = malloc((size_t)n * maxin * sizeof *x);
    z = malloc((size_t)n * in->code_dim * sizeof *z);
    if (!x || !z) { rc = SCDB_ENOMEM; goto done; }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *L = &in->layers[l];
        int col = 0;
        for (int p = 0; p < 3; p++) {
            const cx_enc *e = &cb->part[l][p];
            int rr = part_rank(L, p);
            if (!rr) continue;
            const float *src = (p == CX_K && in->k_post_rope)
                                   ? st->k_post + (size_t)l * n * in->kv_dim
                                   : st->h_in + (size_t)l * n * in->d_model;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < e->in_dim; j++)
                    x[(size_t)i * e->in_dim + j] = src[(size_t)i * e->in_dim + j] - e->mean[j];
            /* section l, columns [col, col + rr): x enc^T */
            scdb_k_gemm_cpu(0, 1, n, rr, e->in_dim, 1.0f, x, e->in_dim, e->enc, e->in_dim, 0.0f,
                            z + (size_t)n * L->offset + col, L->width);
            col += rr;
        }
    }
    scdb_f32_to_f16_n(z, codes, (size_t)n * in->code_dim);
done:
    free(x);
    free(z);
    return rc;
}

scdb_err scdb_codec_encode_tokens(const scdb_codebook *cb, const scdb_model *producer,
                                  const int32_t *tokens, const int32_t *pos, int n,
                                  uint16_t *codes)
{
    const scdb_model_config *c;
    scdb_kv_cache *cache = NULL;
    float *h = NULL, *kp = NULL;
    scdb_err rc;

    if (!cb || !producer || !tokens || n <= 0 || !codes) return SCDB_EINVAL;
    c = scdb_model_cfg(producer);
    if (!scdb_model_config_same_arch(c, &cb->info.arch)) return SCDB_EMISMATCH;
    if ((rc = scdb_model_cache_new(producer, n, &cache))) return rc;
    h = malloc((size_t)c->n_layers * n * c->d_model * sizeof *h);
    if (cb->info.k_post_rope) kp = malloc((size_t)c->n_layers * n * scdb_model_kv_dim(c) * sizeof *kp);
    if (!h || (cb->info.k_post_rope && !kp)) { rc = SCDB_ENOMEM; goto done; }
    scdb_capture cap_ = {.h_in = h, .k_post = kp};
    if ((rc = scdb_model_forward(producer, tokens, pos, n, cache, NULL, &cap_))) goto done;
    scdb_codec_states st = {.h_in = h, .k_post = kp};
    rc = scdb_codec_encode(cb, &st, n, codes);
done:
    free(h);
    free(kp);
    scdb_kv_cache_free(&cache);
    return rc;
}

scdb_err scdb_codec_slice(const scdb_codebook *cb, const uint16_t *codes, int n, int t0, int t1,
                          uint16_t *out)
{
    if (!cb || !codes || !out || t0 < 0 || t1 > n || t0 >= t1) return SCDB_EINVAL;
    const scdb_codebook_info *in = &cb->info;
    int m = t1 - t0;
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *L = &in->layers[l];
        if (!L->width) continue;
        memcpy(out + (size_t)m * L->offset,
               codes + (size_t)n * L->offset + (size_t)t0 * L->width,
               (size_t)m * L->width * sizeof *out);
    }
    return SCDB_OK;
}
