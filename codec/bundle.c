/* bundle.c — the tensors + metadata of a codebook or pair file: built in
 * memory for writing and hashing, or viewed from an open file for checking
 * its id / checksum.  Also the metadata parsing helpers and fingerprints. */
#include "codec_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

scdb_err cx_open(const char *path, scdb_st_file **f, char *errbuf, size_t errlen)
{
    scdb_err rc = scdb_st_open(path, f, errbuf, errlen);
    /* Our writer lays tensors out contiguously up to the end of the file, so
     * a tensor range past the data section means the file was cut short. */
    if (rc == SCDB_ERANGE) {
        scdb_errf(errbuf, errlen, "%s: truncated (a tensor's byte range runs past the end of the file)", path);
        rc = SCDB_ETRUNC;
    }
    return rc;
}

void cx_bundle_free(cx_bundle *b)
{
    if (!b) return;
    for (int i = 0; i < b->nm; i++) free(b->m[i].val);
    for (int i = 0; i < b->nowned; i++) free(b->owned[i]);
    free(b->t);
    free(b->m);
    free(b->owned);
    memset(b, 0, sizeof *b);
}

static scdb_err grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return SCDB_OK;
    int nc = *cap ? *cap * 2 : 32;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return SCDB_ENOMEM;
    *p = q;
    *cap = nc;
    return SCDB_OK;
}

scdb_err cx_bundle_add(cx_bundle *b, scdb_dtype dt, const float *data, int64_t d0,
                       int64_t d1, const char *fmt, ...)
{
    va_list ap;
    cx_btensor *t;
    size_t n = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);

    if (grow((void **)&b->t, &b->capt, b->nt + 1, sizeof *b->t)) return SCDB_ENOMEM;
    t = &b->t[b->nt];
    memset(t, 0, sizeof *t);
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->dt = dt;
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    if (dt == SCDB_F32) {
        t->data = data;
    } else if (dt == SCDB_F16) {
        uint16_t *h;
        if (grow((void **)&b->owned, &b->capowned, b->nowned + 1, sizeof *b->owned)) return SCDB_ENOMEM;
        h = malloc((n ? n : 1) * sizeof *h);
        if (!h) return SCDB_ENOMEM;
        scdb_f32_to_f16_n(data, h, n);
        b->owned[b->nowned++] = h;
        t->data = h;
    } else {
        return SCDB_EDTYPE;
    }
    b->nt++;
    return SCDB_OK;
}

scdb_err cx_bundle_meta(cx_bundle *b, const char *key, const char *fmt, ...)
{
    va_list ap;
    char buf[8192];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < b->nm; i++)
        if (!strcmp(b->m[i].key, key)) {
            char *v = strdup(buf);
            if (!v) return SCDB_ENOMEM;
            free(b->m[i].val);
            b->m[i].val = v;
            return SCDB_OK;
        }
    if (grow((void **)&b->m, &b->capm, b->nm + 1, sizeof *b->m)) return SCDB_ENOMEM;
    snprintf(b->m[b->nm].key, sizeof b->m[b->nm].key, "%s", key);
    b->m[b->nm].val = strdup(buf);
    if (!b->m[b->nm].val) return SCDB_ENOMEM;
    b->nm++;
    return SCDB_OK;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp((*(const cx_btensor *const *)a)->name, (*(const cx_btensor *const *)b)->name);
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp((*(const cx_bmeta *const *)a)->key, (*(const cx_bmeta *const *)b)->key);
}

void cx_bundle_hash(const cx_bundle *b, const char *skip, scdb_codec_id *out)
{
    XXH3_state_t *s = XXH3_createState();
    const cx_btensor **ts = malloc((size_t)(b->nt + 1) * sizeof *ts);
    const cx_bmeta **ms = malloc((size_t)(b->nm + 1) * sizeof *ms);
    memset(out, 0, sizeof *out);
    if (!s || !ts || !ms) goto done;   /* all-zero id: never matches */
    for (int i = 0; i < b->nt; i++) ts[i] = &b->t[i];
    for (int i = 0; i < b->nm; i++) ms[i] = &b->m[i];
    qsort(ts, (size_t)b->nt, sizeof *ts, cmp_tensor);
    qsort(ms, (size_t)b->nm, sizeof *ms, cmp_meta);
    XXH3_128bits_reset(s);
    XXH3_128bits_update(s, "scdb-codec-v1", 13);
    for (int i = 0; i < b->nm; i++) {
        if (skip && !strcmp(ms[i]->key, skip)) continue;
        XXH3_128bits_update(s, ms[i]->key, strlen(ms[i]->key) + 1);
        XXH3_128bits_update(s, ms[i]->val, strlen(ms[i]->val) + 1);
    }
    for (int i = 0; i < b->nt; i++) {
        const cx_btensor *t = ts[i];
        int64_t hdr[4] = {(int64_t)t->dt, t->ndim, t->shape[0], t->shape[1]};
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim > 1 ? t->shape[1] : 1);
        XXH3_128bits_update(s, t->name, strlen(t->name) + 1);
        XXH3_128bits_update(s, hdr, sizeof hdr);
        if (n) XXH3_128bits_update(s, t->data, n * scdb_dtype_size(t->dt));
    }
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out->b, c.digest, 16);
done:
    XXH3_freeState(s);
    free(ts);
    free(ms);
}

scdb_err cx_bundle_from_file(const scdb_st_file *f, cx_bundle *b)
{
    memset(b, 0, sizeof *b);
    int nt = scdb_st_count(f), nm = scdb_st_meta_count(f);
    for (int i = 0; i < nt; i++) {
        const scdb_st_tensor *t = scdb_st_at(f, i);
        if (grow((void **)&b->t, &b->capt, b->nt + 1, sizeof *b->t)) goto nomem;
        cx_btensor *bt = &b->t[b->nt++];
        memset(bt, 0, sizeof *bt);
        snprintf(bt->name, sizeof bt->name, "%s", t->name);
        bt->dt = t->dtype;
        /* tensors of other ranks never pass validation; hash them as flat */
        bt->ndim = t->ndim == 2 ? 2 : 1;
        bt->shape[0] = t->ndim == 2 ? t->shape[0] : (int64_t)(t->nbytes / (scdb_dtype_size(t->dtype) ? scdb_dtype_size(t->dtype) : 1));
        bt->shape[1] = t->ndim == 2 ? t->shape[1] : 0;
        bt->data = t->data;
    }
    for (int i = 0; i < nm; i++) {
        const char *k, *v;
        if (scdb_st_meta_at(f, i, &k, &v)) continue;
        if (cx_bundle_meta(b, k, "%s", v)) goto nomem;
    }
    return SCDB_OK;
nomem:
    cx_bundle_free(b);
    return SCDB_ENOMEM;
}

scdb_err cx_bundle_write(const cx_bundle *b, const char *path)
{
    scdb_st_writer *w = NULL;
    scdb_err rc = scdb_st_writer_new(&w);
    if (rc) return rc;
    for (int i = 0; i < b->nm && !rc; i++) rc = scdb_st_writer_meta(w, b->m[i].key, b->m[i].val);
    for (int i = 0; i < b->nt && !rc; i++)
        rc = scdb_st_writer_add(w, b->t[i].name, b->t[i].dt, b->t[i].ndim, b->t[i].shape,
                                b->t[i].data);
    if (!rc) rc = scdb_st_writer_write(w, path);
    scdb_st_writer_free(&w);
    return rc;
}

scdb_err cx_read_f32(const scdb_st_file *f, const char *name, int64_t d0, int64_t d1,
                     float **out, char *errbuf, size_t errlen)
{
    const scdb_st_tensor *t = scdb_st_find(f, name);
    int ndim = d1 > 0 ? 2 : 1;
    size_t n = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    *out = NULL;
    if (!t) { scdb_errf(errbuf, errlen, "tensor '%s' is missing", name); return SCDB_ENOTFOUND; }
    if (t->dtype != SCDB_F32 && t->dtype != SCDB_F16) {
        scdb_errf(errbuf, errlen, "tensor '%s' has dtype %s, want F32 or F16", name, scdb_dtype_name(t->dtype));
        return SCDB_EDTYPE;
    }
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        scdb_errf(errbuf, errlen, "tensor '%s' has shape [%lld%s%lld], want [%lld%s%lld]", name,
                (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)d0,
                ndim > 1 ? ", " : "", ndim > 1 ? (long long)d1 : 0LL);
        return SCDB_ESHAPE;
    }
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) return SCDB_ENOMEM;
    if (t->dtype == SCDB_F32) memcpy(p, t->data, n * sizeof *p);
    else scdb_f16_to_f32_n(t->data, p, n);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i])) {
            free(p);
            scdb_errf(errbuf, errlen, "tensor '%s' holds a non-finite value at %zu", name, i);
            return SCDB_EFORMAT;
        }
    *out = p;
    return SCDB_OK;
}

scdb_err cx_meta_str(const scdb_st_file *f, const char *key, char *dst, size_t cap,
                     char *errbuf, size_t errlen)
{
    const char *v = scdb_st_meta(f, key);
    if (!v) { scdb_errf(errbuf, errlen, "metadata '%s' is missing", key); return SCDB_EFORMAT; }
    if (strlen(v) >= cap) { scdb_errf(errbuf, errlen, "metadata '%s' is too long", key); return SCDB_EFORMAT; }
    memcpy(dst, v, strlen(v) + 1);
    return SCDB_OK;
}

static int parse_int(const char *s, char **end, long *out)
{
    errno = 0;
    while (*s == ' ') s++;
    if (!(isdigit((unsigned char)*s) || *s == '-')) return -1;
    *out = strtol(s, end, 10);
    return errno ? -1 : 0;
}

scdb_err cx_meta_int(const scdb_st_file *f, const char *key, int lo, int hi, int *out,
                     char *errbuf, size_t errlen)
{
    const char *v = scdb_st_meta(f, key);
    char *end;
    long x;
    if (!v) { scdb_errf(errbuf, errlen, "metadata '%s' is missing", key); return SCDB_EFORMAT; }
    if (parse_int(v, &end, &x) || *end || x < lo || x > hi) {
        scdb_errf(errbuf, errlen, "metadata '%s' = '%s' is not an integer in [%d, %d]", key, v, lo, hi);
        return SCDB_EFORMAT;
    }
    *out = (int)x;
    return SCDB_OK;
}

scdb_err cx_meta_ints(const scdb_st_file *f, const char *key, int max, int lo, int hi,
                      int *out, int *count, char *errbuf, size_t errlen)
{
    const char *v = scdb_st_meta(f, key);
    int n = 0;
    if (!v) { scdb_errf(errbuf, errlen, "metadata '%s' is missing", key); return SCDB_EFORMAT; }
    const char *p = v;
    while (*p) {
        char *end;
        long x;
        if (n >= max || parse_int(p, &end, &x) || x < lo || x > hi ||
            (*end && *end != ',')) {
            scdb_errf(errbuf, errlen, "metadata '%s' = '%.64s' is not a list of at most %d integers in [%d, %d]",
                    key, v, max, lo, hi);
            return SCDB_EFORMAT;
        }
        out[n++] = (int)x;
        p = *end ? end + 1 : end;
        if (*end && !*p) { scdb_errf(errbuf, errlen, "metadata '%s' ends with a comma", key); return SCDB_EFORMAT; }
    }
    *count = n;
    return SCDB_OK;
}

scdb_err cx_meta_float(const scdb_st_file *f, const char *key, float *out,
                       char *errbuf, size_t errlen)
{
    const char *v = scdb_st_meta(f, key);
    char *end;
    if (!v) { scdb_errf(errbuf, errlen, "metadata '%s' is missing", key); return SCDB_EFORMAT; }
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        scdb_errf(errbuf, errlen, "metadata '%s' = '%s' is not a number", key, v);
        return SCDB_EFORMAT;
    }
    *out = (float)x;
    return SCDB_OK;
}

void cx_fmt_ints(char *dst, size_t cap, const int *v, int n)
{
    size_t o = 0;
    dst[0] = '\0';
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(dst + o, cap - o, "%s%d", i ? "," : "", v[i]);
}

void cx_arch_string(const scdb_model_config *c, char *dst, size_t cap)
{
    snprintf(dst, cap,
             "vocab_size=%d,d_model=%d,n_layers=%d,n_heads=%d,n_kv_heads=%d,head_dim=%d,"
             "d_ff=%d,rope_theta=%.9g,norm_eps=%.9g",
             c->vocab_size, c->d_model, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
             c->d_ff, (double)c->rope_theta, (double)c->norm_eps);
}

scdb_err cx_arch_parse(const char *s, scdb_model_config *c)
{
    double th, eps;
    memset(c, 0, sizeof *c);
    if (sscanf(s,
               "vocab_size=%d,d_model=%d,n_layers=%d,n_heads=%d,n_kv_heads=%d,head_dim=%d,"
               "d_ff=%d,rope_theta=%lg,norm_eps=%lg",
               &c->vocab_size, &c->d_model, &c->n_layers, &c->n_heads, &c->n_kv_heads,
               &c->head_dim, &c->d_ff, &th, &eps) != 9)
        return SCDB_EFORMAT;
    c->rope_theta = (float)th;
    c->norm_eps = (float)eps;
    if (c->vocab_size < 1 || c->d_model < 1 || c->n_layers < 1 ||
        c->n_layers > SCDB_CODEC_MAX_LAYERS || c->n_heads < 1 || c->n_kv_heads < 1 ||
        c->head_dim < 2 || c->head_dim % 2 || c->d_ff < 1 || c->n_heads % c->n_kv_heads ||
        c->d_model > 65536 || c->head_dim * c->n_kv_heads > 65536 || c->vocab_size > (1 << 20) ||
        !(th > 0) || !(eps > 0))
        return SCDB_EFORMAT;
    return SCDB_OK;
}

void scdb_codec_arch_fp(const scdb_model_config *c, char hex[17])
{
    char s[512];
    cx_arch_string(c, s, sizeof s);
    snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits(s, strlen(s)));
}

void scdb_codec_id_hex(const scdb_codec_id *id, char hex[33])
{
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", id->b[i]);
}

scdb_err scdb_codec_id_parse(const char *hex, scdb_codec_id *out)
{
    if (!hex || strlen(hex) != 32) return SCDB_EFORMAT;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (!isxdigit((unsigned char)hex[2 * i]) || !isxdigit((unsigned char)hex[2 * i + 1]) ||
            sscanf(hex + 2 * i, "%2x", &v) != 1)
            return SCDB_EFORMAT;
        out->b[i] = (uint8_t)v;
    }
    return SCDB_OK;
}

void cx_layout(scdb_cb_layer *layers, int n_layers, int *code_dim)
{
    int off = 0;
    for (int l = 0; l < n_layers; l++) {
        scdb_cb_layer *L = &layers[l];
        if (L->kind == SCDB_CB_TOKENS) L->r_k = L->r_v = L->r_h = 0;
        L->width = L->r_k + L->r_v + L->r_h;
        L->offset = off;
        off += L->width;
    }
    *code_dim = off;
}
