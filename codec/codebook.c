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

size_t scdb_codebook_token_bytes(const scdb_codebook *cb)
{
    const scdb_codebook_info *in = &cb->info;
    if (in->code_dtype == SCDB_CODES_INT8) return (size_t)in->code_dim + 2u * (size_t)in->n_scaled;
    return 2u * (size_t)in->code_dim;
}

size_t scdb_codec_payload_bytes(const scdb_codebook *cb, int n)
{
    return n > 0 ? (size_t)n * scdb_codebook_token_bytes(cb) : 0;
}

const char *scdb_code_dtype_name(scdb_code_dtype dt)
{
    return dt == SCDB_CODES_F16 ? "f16" : dt == SCDB_CODES_INT8 ? "int8" : NULL;
}

scdb_err scdb_code_dtype_parse(const char *s, scdb_code_dtype *out)
{
    if (!s || !out) return SCDB_EINVAL;
    if (!strcmp(s, "f16")) *out = SCDB_CODES_F16;
    else if (!strcmp(s, "int8")) *out = SCDB_CODES_INT8;
    else return SCDB_EINVAL;
    return SCDB_OK;
}

scdb_err scdb_codebook_set_code_dtype(scdb_codebook *cb, scdb_code_dtype dt)
{
    if (!cb || !scdb_code_dtype_name(dt)) return SCDB_EINVAL;
    cb->info.code_dtype = (int)dt;
    return SCDB_OK;
}

uint32_t scdb_codebook_payload_dtype(const scdb_codebook *cb)
{
    return cb->info.code_dtype == SCDB_CODES_INT8 ? SCDB_PAYLOAD_CODES_INT8 : (uint32_t)SCDB_F16;
}

/* Layers with a code: int8 codes carry one scale per token for each. */
static void count_scaled(scdb_codebook_info *in)
{
    in->n_scaled = 0;
    for (int l = 0; l < in->n_layers; l++)
        if (in->layers[l].width > 0) in->n_scaled++;
}

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
    if (in->id_producer_fp[0]) M("id_producer_fp", "%s", in->id_producer_fp);
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

/* The id of a codebook's bundle (FORMATS.md, "Codebook"): the hash of
 * everything but 'id', except that a re-stamped file is hashed as it was
 * when the id was made: producer_fp with id_producer_fp's value, and no
 * id_producer_fp.  So re-stamping keeps the id and the namespace. */
static void codebook_id(const cx_bundle *b, scdb_codec_id *out)
{
    const char *idfp = NULL;
    for (int i = 0; i < b->nm; i++)
        if (!strcmp(b->m[i].key, "id_producer_fp")) idfp = b->m[i].val;
    if (!idfp) {
        cx_bundle_hash(b, "id", out);
        return;
    }
    cx_bundle view = *b;                /* the same tensors, other metadata */
    view.m = malloc((size_t)b->nm * sizeof *view.m);
    view.nm = 0;
    if (!view.m) {
        memset(out, 0, sizeof *out);    /* all-zero id: never matches */
        return;
    }
    for (int i = 0; i < b->nm; i++) {
        if (!strcmp(b->m[i].key, "id_producer_fp")) continue;
        view.m[view.nm] = b->m[i];
        if (!strcmp(b->m[i].key, "producer_fp")) view.m[view.nm].val = (char *)idfp;
        view.nm++;
    }
    cx_bundle_hash(&view, "id", out);
    free(view.m);
}

scdb_err cx_codebook_finish(scdb_codebook *cb)
{
    cx_bundle b;
    scdb_codebook_info *in = &cb->info;
    int n = 0;
    cx_layout(in->layers, in->n_layers, &in->code_dim);
    count_scaled(in);
    for (int l = 0; l < in->n_layers; l++)
        if (in->layers[l].r_h > 0) in->candidates[n++] = l;
    in->n_candidates = n;
    scdb_codec_arch_fp(&in->arch, in->arch_fp);
    scdb_err rc = build_bundle(cb, &b);
    if (rc) return rc;
    codebook_id(&b, &in->id);
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
    if (scdb_st_meta(f, "id_producer_fp")) {    /* re-stamped: 16 digits kept for the id */
        if ((rc = cx_meta_str(f, "id_producer_fp", in->id_producer_fp, sizeof in->id_producer_fp, errbuf,
                              errlen)))
            goto fail;
        if (!cx_fp_valid(in->id_producer_fp) || strlen(in->id_producer_fp) != 16 ||
            strlen(in->producer_fp) == 16) {
            scdb_errf(errbuf, errlen, "%s: metadata 'id_producer_fp' = '%.40s' with producer_fp '%.40s': a "
                      "re-stamped codebook records a 16-digit id_producer_fp and a 32-digit producer_fp",
                      path, in->id_producer_fp, in->producer_fp);
            rc = SCDB_EFORMAT;
            goto fail;
        }
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
    codebook_id(&b, &in->id);
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
    count_scaled(in);
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

scdb_err scdb_codebook_restamp(const char *path, const scdb_model *producer, const char *out,
                               char *errbuf, size_t errlen)
{
    scdb_codebook *cb = NULL;
    char fp[SCDB_CODEC_FP_LEN];
    scdb_codec_id id;
    scdb_err rc;
    if (!path || !producer || !out) return SCDB_EINVAL;
    if ((rc = scdb_codebook_load(path, &cb, errbuf, errlen))) return rc;
    scdb_codebook_info *in = &cb->info;
    if (strlen(in->producer_fp) != 16) {
        scdb_errf(errbuf, errlen, "%s: producer_fp %s is a tensor fingerprint already", path, in->producer_fp);
        rc = SCDB_EINVAL;
        goto done;
    }
    /* the weights must be those the codebook was fitted on */
    if ((rc = scdb_codebook_check_producer(cb, producer, errbuf, errlen))) goto done;
    if ((rc = cx_model_fp(producer, fp, errbuf, errlen))) goto done;
    memcpy(in->id_producer_fp, in->producer_fp, sizeof in->producer_fp);
    memcpy(in->producer_fp, fp, sizeof fp);
    id = in->id;
    if ((rc = cx_codebook_finish(cb))) goto done;
    if (memcmp(&id, &in->id, sizeof id)) {     /* a bug, never a file's fault */
        scdb_errf(errbuf, errlen, "%s: re-stamping changed the id", path);
        rc = SCDB_EFORMAT;
        goto done;
    }
    if ((rc = scdb_codebook_save(cb, out))) scdb_errf(errbuf, errlen, "%s: %s", out, scdb_strerror(rc));
done:
    scdb_codebook_free(&cb);
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

/* ------------------------------------------------------------ int8 codes
 * (codec.h, "Code dtype"; schema/FORMATS.md, "Codes"): scales f16 [S][n]
 * at byte 0, then the int8 sections, layer l's at byte 2*S*n + n*off[l]. */

static int8_t *int8_codes(const scdb_codebook_info *in, void *payload, int n)
{
    return (int8_t *)((unsigned char *)payload + 2u * (size_t)in->n_scaled * (size_t)n);
}

/* A scale as stored: finite, not negative, at most the f16-safe maximum. */
static int scale_ok(uint16_t h)
{
    return !(h & 0x8000u) && (h & 0x7c00u) != 0x7c00u &&
           scdb_f16_to_f32(h) <= SCDB_CODES_INT8_SCALE_MAX;
}

/* z: f32 codes of n tokens in the f16 layout (sections) -> int8 payload */
static scdb_err quantize_int8(const scdb_codebook_info *in, const float *z, int n, void *payload)
{
    uint16_t *scales = payload;
    int8_t *q = int8_codes(in, payload, n);
    int s = 0;

    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *L = &in->layers[l];
        int w = L->width;
        if (!w) continue;
        for (int i = 0; i < n; i++) {
            const float *row = z + (size_t)n * L->offset + (size_t)i * w;
            int8_t *qr = q + (size_t)n * L->offset + (size_t)i * w;
            float m = 0.0f, sv;
            uint16_t h = 0;
            for (int j = 0; j < w; j++) {
                float a = fabsf(row[j]);
                if (!isfinite(a)) return SCDB_ERANGE;
                if (a > m) m = a;
            }
            if (m > 0.0f) {
                float want = m / 127.0f;
                h = scdb_f32_to_f16(want);
                if (scdb_f16_to_f32(h) < want) h++;   /* round up: |z| / scale <= 127 */
                if (!scale_ok(h)) return SCDB_ERANGE;
            }
            sv = scdb_f16_to_f32(h);
            for (int j = 0; j < w; j++) {
                long v = sv > 0.0f ? lrintf(row[j] / sv) : 0;
                qr[j] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
            scales[(size_t)s * n + i] = h;
        }
        s++;
    }
    return SCDB_OK;
}

scdb_err scdb_codec_dequantize(const scdb_codebook *cb, const void *codes, int block_n, int t0,
                               int n, uint16_t *out)
{
    const scdb_codebook_info *in;
    if (!cb || !codes || !out || n <= 0 || t0 < 0 || block_n < n || t0 > block_n - n)
        return SCDB_EINVAL;
    in = &cb->info;
    if (in->code_dtype != SCDB_CODES_INT8)
        return scdb_codec_slice(cb, codes, block_n, t0, t0 + n, out);
    const uint16_t *scales = codes;
    const int8_t *q = int8_codes(in, (void *)codes, block_n);
    int s = 0;
    /* every scale first: a bad one leaves out untouched */
    for (int k = 0; k < in->n_scaled; k++)
        for (int i = 0; i < n; i++)
            if (!scale_ok(scales[(size_t)k * block_n + t0 + i])) return SCDB_ERANGE;
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *L = &in->layers[l];
        int w = L->width;
        if (!w) continue;
        for (int i = 0; i < n; i++) {
            float sv = scdb_f16_to_f32(scales[(size_t)s * block_n + t0 + i]);
            const int8_t *qr = q + (size_t)block_n * L->offset + (size_t)(t0 + i) * w;
            uint16_t *o = out + (size_t)n * L->offset + (size_t)i * w;
            for (int j = 0; j < w; j++) o[j] = scdb_f32_to_f16((float)qr[j] * sv);
        }
        s++;
    }
    return SCDB_OK;
}

/* The i-th uint16 at p, whatever p's alignment. */
static inline uint16_t load_u16(const unsigned char *p, size_t i)
{
    uint16_t v;
    memcpy(&v, p + 2 * i, sizeof v);
    return v;
}

scdb_err scdb_codec_check_payload(const scdb_codebook *cb, const void *codes, size_t bytes, int n,
                                  char *errbuf, size_t errlen)
{
    const scdb_codebook_info *in;
    if (!cb || (!codes && bytes) || n <= 0) return SCDB_EINVAL;
    in = &cb->info;
    if (bytes != scdb_codec_payload_bytes(cb, n)) {
        scdb_errf(errbuf, errlen, "%zu bytes of %s codes, %d tokens of codebook %s take %zu", bytes,
                  scdb_code_dtype_name((scdb_code_dtype)in->code_dtype), n, in->id_hex,
                  scdb_codec_payload_bytes(cb, n));
        return SCDB_ESHAPE;
    }
    /* codes may sit at any address (a put's message frame): loads go
     * through memcpy (load_u16), never a typed pointer */
    const unsigned char *h = codes;
    if (in->code_dtype != SCDB_CODES_INT8) {
        for (int l = 0; l < in->n_layers; l++) {
            const scdb_cb_layer *L = &in->layers[l];
            for (size_t i = 0; i < (size_t)n * L->width; i++)
                if ((load_u16(h, (size_t)n * L->offset + i) & 0x7c00u) == 0x7c00u) {
                    scdb_errf(errbuf, errlen, "f16 code of token %zu, layer %d is NaN or infinite",
                              i / (size_t)L->width, l);
                    return SCDB_ERANGE;
                }
        }
        return SCDB_OK;
    }
    int s = 0;
    for (int l = 0; l < in->n_layers; l++) {
        if (!in->layers[l].width) continue;
        for (int i = 0; i < n; i++) {
            uint16_t v = load_u16(h, (size_t)s * n + i);
            if (!scale_ok(v)) {
                scdb_errf(errbuf, errlen, "int8 scale of token %d, layer %d is %g (must be finite, "
                          ">= 0 and <= %g)", i, l, (double)scdb_f16_to_f32(v),
                          (double)SCDB_CODES_INT8_SCALE_MAX);
                return SCDB_ERANGE;
            }
        }
        s++;
    }
    return SCDB_OK;
}

scdb_err scdb_codec_encode(const scdb_codebook *cb, const scdb_codec_states *st, int n,
                           void *codes)
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
    if (in->code_dtype == SCDB_CODES_INT8) rc = quantize_int8(in, z, n, codes);
    else scdb_f32_to_f16_n(z, codes, (size_t)n * in->code_dim);
done:
    free(x);
    free(z);
    return rc;
}

scdb_err scdb_codec_encode_tokens(const scdb_codebook *cb, const scdb_model *producer,
                                  const int32_t *tokens, const int32_t *pos, int n,
                                  void *codes)
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

scdb_err scdb_codec_slice(const scdb_codebook *cb, const void *codes, int n, int t0, int t1,
                          void *out)
{
    if (!cb || !codes || !out || t0 < 0 || t1 > n || t0 >= t1) return SCDB_EINVAL;
    const scdb_codebook_info *in = &cb->info;
    int m = t1 - t0;
    if (in->code_dtype == SCDB_CODES_INT8) {
        const uint16_t *hs = codes;
        uint16_t *ho = out;
        const int8_t *q = int8_codes(in, (void *)codes, n);
        int8_t *qo = int8_codes(in, out, m);
        for (int s = 0; s < in->n_scaled; s++)
            memcpy(ho + (size_t)s * m, hs + (size_t)s * n + t0, (size_t)m * sizeof *ho);
        for (int l = 0; l < in->n_layers; l++) {
            const scdb_cb_layer *L = &in->layers[l];
            if (!L->width) continue;
            memcpy(qo + (size_t)m * L->offset, q + (size_t)n * L->offset + (size_t)t0 * L->width,
                   (size_t)m * L->width);
        }
        return SCDB_OK;
    }
    const uint16_t *c = codes;
    uint16_t *o = out;
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *L = &in->layers[l];
        if (!L->width) continue;
        memcpy(o + (size_t)m * L->offset,
               c + (size_t)n * L->offset + (size_t)t0 * L->width,
               (size_t)m * L->width * sizeof *o);
    }
    return SCDB_OK;
}

scdb_err cx_codes_as_f16(const scdb_codebook *cb, const void **codes, int *block_n, int *t0, int n,
                         uint16_t **owned)
{
    *owned = NULL;
    if (cb->info.code_dtype != SCDB_CODES_INT8 || cb->info.code_dim == 0) return SCDB_OK;
    uint16_t *f = malloc((size_t)n * cb->info.code_dim * sizeof *f);
    if (!f) return SCDB_ENOMEM;
    scdb_err rc = scdb_codec_dequantize(cb, *codes, *block_n, *t0, n, f);
    if (rc) {
        free(f);
        return rc;
    }
    *owned = f;
    *codes = f;
    *block_n = n;
    *t0 = 0;
    return SCDB_OK;
}
