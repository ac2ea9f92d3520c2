/* weights_fp.c — the weights fingerprint of a model directory
 * (weights_fp.h; schema/FORMATS.md, "Weights fingerprint").  Layout and
 * tensor names follow the two checkpoint layouts the model loader reads
 * (model/model.c, model/hf_checkpoint.c), restated here because schema/ sits
 * below model/ (and libscdb, which computes fingerprints, links no model). */
#include "weights_fp.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "peft_adapter.h"
#include "safetensors.h"
#include "scdb_common.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define FP_TAG "scdb-weights-1"        /* hashed with its NUL */
#define INDEX_NAME "model.safetensors.index.json"
#define MAX_JSON (64u << 20)
#define MAX_FILES 4096

/* scdb's own names -> Hugging Face names (FORMATS.md's table). */
static const char *const TOP[][2] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
static const char *const LAYER[][2] = {
    {"attention_norm.weight", "input_layernorm.weight"},
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
};

#define EMBED "model.embed_tokens.weight"
#define HEAD "lm_head.weight"

/* The Hugging Face name of a tensor the model reads (0), or -1 for one it
 * does not.  `hf`: the name is in that layout's naming.  Layer numbers are
 * plain decimals ("layers.01." is not a layer name). */
static int canonical(const char *name, int hf, char *out, size_t cap)
{
    const char *prefix = hf ? "model.layers." : "layers.";
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < SCDB_ARRAY_LEN(TOP); i++)
        if (!strcmp(name, TOP[i][hf])) {
            snprintf(out, cap, "%s", TOP[i][1]);
            return 0;
        }
    if (strncmp(name, prefix, pl)) return -1;
    const char *p = name + pl, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q == p || *q != '.' || (q - p > 1 && *p == '0') || q - p > 9) return -1;
    for (size_t i = 0; i < SCDB_ARRAY_LEN(LAYER); i++)
        if (!strcmp(q + 1, LAYER[i][hf])) {
            snprintf(out, cap, "model.layers.%.*s.%s", (int)(q - p), p, LAYER[i][1]);
            return 0;
        }
    return -1;
}

typedef struct fp_entry {
    char name[160];                /* canonical (Hugging Face) name */
    const scdb_st_tensor *t;
    const char *file;              /* for messages */
} fp_entry;

typedef struct fp_src {
    const char *dir;
    int hf, tied;
    scdb_st_file *files[MAX_FILES];
    const char *file_names[MAX_FILES];
    int n_files;
    fp_entry *e;
    int n, cap;
} fp_src;

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const fp_entry *)a)->name, ((const fp_entry *)b)->name);
}

static scdb_err add_entry(fp_src *s, const char *canon, const scdb_st_tensor *t, const char *file)
{
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 64;
        fp_entry *g = realloc(s->e, (size_t)nc * sizeof *g);
        if (!g) return SCDB_ENOMEM;
        s->e = g;
        s->cap = nc;
    }
    fp_entry *e = &s->e[s->n++];
    snprintf(e->name, sizeof e->name, "%s", canon);
    e->t = t;
    e->file = file;
    return SCDB_OK;
}

static scdb_err open_weights(fp_src *s, const char *name, scdb_st_file **out, char *errbuf,
                             size_t errlen)
{
    char path[1400], msg[512] = "";
    for (int k = 0; k < s->n_files; k++)
        if (!strcmp(s->file_names[k], name)) {
            *out = s->files[k];
            return SCDB_OK;
        }
    if (s->n_files == MAX_FILES) {
        scdb_errf(errbuf, errlen, "%s: more than %d weight files", s->dir, MAX_FILES);
        return SCDB_ERANGE;
    }
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    scdb_err rc = scdb_st_open(path, out, msg, sizeof msg);
    if (rc == SCDB_ENOTFOUND) scdb_errf(errbuf, errlen, "%s: no such file", path);
    else if (rc) scdb_errf(errbuf, errlen, "%s", msg);   /* the reader names the file */
    if (rc) return rc;
    s->files[s->n_files] = *out;
    s->file_names[s->n_files++] = name;
    return SCDB_OK;
}

/* config.json: the layout (an object with "hidden_size" is a Hugging Face
 * config, as the model loader decides) and, for that layout, whether the
 * output head is tied to the embedding. */
static scdb_err read_config(fp_src *s, char *errbuf, size_t errlen)
{
    char path[1400], *buf = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", s->dir);
    scdb_err rc = scdb_read_file(path, MAX_JSON, &buf, &len);
    if (rc) {
        scdb_errf(errbuf, errlen, "%s: %s", path, rc == SCDB_ENOTFOUND ? "no such file" : "cannot be read");
        return rc;
    }
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!cJSON_IsObject(j)) {
        scdb_errf(errbuf, errlen, "%s: not a JSON object", path);
        cJSON_Delete(j);
        return SCDB_EFORMAT;
    }
    s->hf = cJSON_HasObjectItem(j, "hidden_size");
    s->tied = s->hf && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings"));
    cJSON_Delete(j);
    return SCDB_OK;
}

/* The tensors of one file: every one the model reads. */
static scdb_err scan_file(fp_src *s, scdb_st_file *f, const char *fname)
{
    char canon[160];
    for (int i = 0; i < scdb_st_count(f); i++) {
        const scdb_st_tensor *t = scdb_st_at(f, i);
        if (canonical(t->name, s->hf, canon, sizeof canon)) continue;
        scdb_err rc = add_entry(s, canon, t, fname);
        if (rc) return rc;
    }
    return SCDB_OK;
}

/* Sharded Hugging Face checkpoint: the index's weight_map names each
 * tensor's shard, as the loader reads it. */
static scdb_err scan_index(fp_src *s, cJSON **index, char *errbuf, size_t errlen)
{
    char path[1400], *buf = NULL, canon[160];
    size_t len;
    snprintf(path, sizeof path, "%s/" INDEX_NAME, s->dir);
    scdb_err rc = scdb_read_file(path, MAX_JSON, &buf, &len);
    if (rc == SCDB_ENOTFOUND) {
        scdb_errf(errbuf, errlen, "%s: neither model.safetensors nor " INDEX_NAME, s->dir);
        return rc;
    }
    if (rc) {
        scdb_errf(errbuf, errlen, "%s: cannot be read", path);
        return rc;
    }
    *index = cJSON_ParseWithLength(buf, len);
    free(buf);
    const cJSON *map = cJSON_IsObject(*index) ? cJSON_GetObjectItemCaseSensitive(*index, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        scdb_errf(errbuf, errlen, "%s: not a JSON object with a \"weight_map\" object", path);
        return SCDB_EFORMAT;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        const char *shard = cJSON_IsString(e) ? e->valuestring : NULL;
        scdb_st_file *f;
        if (!shard) {
            scdb_errf(errbuf, errlen, "%s: weight_map entry '%s' is not a file name string", path, e->string);
            return SCDB_EFORMAT;
        }
        if (!shard[0] || shard[0] == '.' || strchr(shard, '/') || strchr(shard, '\\')) {
            scdb_errf(errbuf, errlen, "%s: weight_map entry '%s' -> '%s' points outside %s", path, e->string,
                      shard, s->dir);
            return SCDB_ERANGE;
        }
        if (canonical(e->string, 1, canon, sizeof canon)) continue;
        if ((rc = open_weights(s, shard, &f, errbuf, errlen))) return rc;
        const scdb_st_tensor *t = scdb_st_find(f, e->string);
        if (!t) {
            scdb_errf(errbuf, errlen, "tensor '%s': " INDEX_NAME " maps it to %s, which does not contain it",
                      e->string, shard);
            return SCDB_ENOTFOUND;
        }
        if ((rc = add_entry(s, canon, t, shard))) return rc;
    }
    return SCDB_OK;
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A record's head: the name with its NUL, ndim and the dims as u64 LE. */
static void hash_head(XXH3_state_t *st, const char *name, int ndim, const int64_t *shape)
{
    uint8_t hdr[8 * (1 + SCDB_ST_MAX_DIMS)];
    XXH3_128bits_update(st, name, strlen(name) + 1);
    put_u64le(hdr, (uint64_t)ndim);
    for (int i = 0; i < ndim; i++) put_u64le(hdr + 8 * (1 + i), (uint64_t)shape[i]);
    XXH3_128bits_update(st, hdr, 8 * (1 + (size_t)ndim));
}

/* n f32 values as little-endian bytes. */
static void hash_f32(XXH3_state_t *st, const float *v, size_t numel)
{
    uint8_t out[4096 * 4];
    for (size_t i = 0; i < numel;) {
        size_t n = numel - i < 4096 ? numel - i : 4096;
        for (size_t k = 0; k < n; k++) {
            uint32_t u;
            memcpy(&u, &v[i + k], sizeof u);
            for (int b = 0; b < 4; b++) out[4 * k + (size_t)b] = (uint8_t)(u >> (8 * b));
        }
        XXH3_128bits_update(st, out, 4 * n);
        i += n;
    }
}

/* One tensor's record: name, dims, then its values as f32 little-endian:
 * `merged` (numel floats: an adapter's effective weight) when not NULL,
 * else the tensor's own, F16 / BF16 widened exactly (scdb_st_to_f32: the
 * model loader's conversion; test_weights_fp checks the two agree on all
 * 65536 patterns). */
static scdb_err hash_tensor(XXH3_state_t *st, const fp_entry *e, const float *merged, char *errbuf,
                            size_t errlen)
{
    const scdb_st_tensor *t = e->t;
    size_t numel = 1;
    if (t->dtype != SCDB_F32 && t->dtype != SCDB_F16 && t->dtype != SCDB_BF16) {
        scdb_errf(errbuf, errlen, "tensor '%s' in %s is %s: the model reads only F32, F16 or BF16", t->name,
                  e->file, scdb_dtype_name(t->dtype));
        return SCDB_EDTYPE;
    }
    hash_head(st, e->name, t->ndim, t->shape);
    for (int i = 0; i < t->ndim; i++) numel *= (size_t)t->shape[i];
    if (t->dtype == SCDB_F32 && !merged) {      /* already f32 little-endian */
        XXH3_128bits_update(st, t->data, numel * 4);
        return SCDB_OK;
    }
    if (merged) {
        hash_f32(st, merged, numel);
        return SCDB_OK;
    }
    float f[4096];
    for (size_t i = 0; i < numel;) {
        size_t n = numel - i < 4096 ? numel - i : 4096;
        scdb_st_to_f32(t, i, n, f);
        hash_f32(st, f, n);
        i += n;
    }
    return SCDB_OK;
}

/* The layer and projection a canonical name is the weight of (0), or -1. */
static int layer_module(const char *name, int *layer, int *module)
{
    const char *p = name + strlen("model.layers.");
    if (strncmp(name, "model.layers.", strlen("model.layers."))) return -1;
    char *q;
    long l = strtol(p, &q, 10);
    if (q == p || *q != '.') return -1;
    for (int m = 0; m < SCDB_LORA_N_MODULES; m++) {
        const char *mp = scdb_lora_module_path(m);
        size_t n = strlen(mp);
        if (!strncmp(q + 1, mp, n) && !strcmp(q + 1 + n, ".weight")) {
            *layer = (int)l;
            *module = m;
            return 0;
        }
    }
    return -1;
}

/* The adapter against the base's tensors: its layer count and each
 * projection's shape (layer 0's). */
static scdb_err check_adapter(const fp_src *s, const scdb_adapter *ad, char *errbuf, size_t errlen)
{
    int64_t shape[SCDB_LORA_N_MODULES][2] = {{0}};
    int n_layers = 0;
    for (int i = 0; i < s->n; i++) {
        int l, m;
        if (layer_module(s->e[i].name, &l, &m)) continue;
        if (l + 1 > n_layers) n_layers = l + 1;
        if (l == 0 && s->e[i].t->ndim == 2) {
            shape[m][0] = s->e[i].t->shape[0];
            shape[m][1] = s->e[i].t->shape[1];
        }
    }
    return scdb_adapter_check_base(ad, n_layers, (const int64_t(*)[2])shape, errbuf, errlen);
}

static int cmp_gguf(const void *a, const void *b)
{
    return strcmp(((const scdb_gguf_llama_tensor *)a)->hf_name, ((const scdb_gguf_llama_tensor *)b)->hf_name);
}

/* A llama GGUF model (gguf_llama.h): the tensors the model reads under
 * their Hugging Face names, attn_q / attn_k rows unpermuted, F16 / BF16
 * widened (scdb_gguf_tensor_to_f32, the same widening), a missing
 * output.weight counted as lm_head.weight with token_embd's values; ad
 * (may be NULL) merged over it. */
static scdb_err fp_gguf(const char *path, const scdb_adapter *ad, XXH3_state_t *st, char *errbuf, size_t errlen)
{
    scdb_gguf_file *f = NULL;
    scdb_gguf_llama_hparams hp;
    scdb_gguf_llama_tensor *v = NULL;
    float *vals = NULL;
    int n = 0;
    scdb_err rc;

    if ((rc = scdb_gguf_open(path, &f, errbuf, errlen)) || (rc = scdb_gguf_llama_hparams_read(f, &hp, errbuf, errlen)) ||
        (rc = scdb_gguf_llama_tensors(f, &hp, &v, &n, errbuf, errlen)))
        goto done;
    if (hp.tied) {                        /* room for lm_head: the embedding again (entry 0) */
        scdb_gguf_llama_tensor *g = realloc(v, (size_t)(n + 1) * sizeof *g);
        if (!g) { rc = SCDB_ENOMEM; goto done; }
        v = g;
        v[n] = v[0];
        snprintf(v[n].hf_name, sizeof v[n].hf_name, "%s", HEAD);
        n++;
    }
    if (ad) {
        int64_t d = hp.d_model, qd = (int64_t)hp.n_heads * hp.head_dim, kvd = (int64_t)hp.n_kv_heads * hp.head_dim;
        const int64_t shape[SCDB_LORA_N_MODULES][2] = {{qd, d}, {kvd, d}, {kvd, d}, {d, qd},
                                                      {hp.d_ff, d}, {hp.d_ff, d}, {d, hp.d_ff}};
        if ((rc = scdb_adapter_check_base(ad, hp.n_layers, shape, errbuf, errlen))) goto done;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_gguf);
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)v[i].rows * (size_t)(v[i].cols ? v[i].cols : 1);
        int64_t shape[2] = {v[i].rows, v[i].cols};
        float *g = realloc(vals, numel * sizeof *g);
        if (!g) { rc = SCDB_ENOMEM; goto done; }
        vals = g;
        if ((rc = scdb_gguf_llama_read(&v[i], vals))) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s': %s", path, v[i].t->name, scdb_strerror(rc));
            goto done;
        }
        const scdb_lora_target *t = ad && v[i].module >= 0 ? scdb_adapter_find(ad, v[i].layer, v[i].module) : NULL;
        if (t && (rc = scdb_adapter_merge(ad, t, vals, v[i].rows, v[i].cols, vals))) {
            scdb_errf(errbuf, errlen, "tensor '%s' in %s: %s", v[i].hf_name, path, scdb_strerror(rc));
            goto done;
        }
        hash_head(st, v[i].hf_name, v[i].cols ? 2 : 1, shape);
        hash_f32(st, vals, numel);
    }
    rc = SCDB_OK;
done:
    free(vals);
    free(v);
    scdb_gguf_close(&f);
    return rc;
}

static scdb_err fp_impl(const char *model_dir, const char *models_dir, const char *base,
                        char hex[SCDB_WEIGHTS_FP_HEX + 1], char *errbuf, size_t errlen);

scdb_err scdb_weights_fp_ex(const char *model_dir, const char *models_dir,
                            char hex[SCDB_WEIGHTS_FP_HEX + 1], char *errbuf, size_t errlen)
{
    return fp_impl(model_dir, models_dir, NULL, hex, errbuf, errlen);
}

scdb_err scdb_weights_fp_adapter(const char *base, const char *adapter, char hex[SCDB_WEIGHTS_FP_HEX + 1],
                                 char *errbuf, size_t errlen)
{
    if (!base || !adapter || !hex) return SCDB_EINVAL;
    hex[0] = '\0';
    if (!scdb_adapter_is(adapter)) {
        scdb_errf(errbuf, errlen, "%s: not an adapter (a PEFT directory or a GGUF LoRA adapter)", adapter);
        return SCDB_EINVAL;
    }
    return fp_impl(adapter, NULL, base, hex, errbuf, errlen);
}

static scdb_err fp_impl(const char *model_dir, const char *models_dir, const char *base,
                        char hex[SCDB_WEIGHTS_FP_HEX + 1], char *errbuf, size_t errlen)
{
    scdb_adapter *ad = NULL;
    float *merged = NULL;
    fp_src *s = NULL;
    cJSON *index = NULL;
    XXH3_state_t *st = NULL;
    scdb_st_file *one = NULL;   /* owned by s->files */
    struct stat sb;
    char path[1400];
    scdb_err rc;

    if (!model_dir || !hex) return SCDB_EINVAL;
    hex[0] = '\0';
    s = calloc(1, sizeof *s);
    st = XXH3_createState();
    if (!s || !st) { rc = SCDB_ENOMEM; goto done; }
    if (scdb_adapter_is(model_dir)) {         /* hash the effective weights over its base */
        if ((rc = scdb_adapter_open_ex(model_dir, models_dir, base, &ad, errbuf, errlen))) goto done;
        model_dir = ad->base_dir;
    }
    if (scdb_gguf_is_file(model_dir)) {       /* llama.cpp's GGUF */
        XXH3_128bits_reset(st);
        XXH3_128bits_update(st, FP_TAG, sizeof FP_TAG);
        if ((rc = fp_gguf(model_dir, ad, st, errbuf, errlen))) goto done;
        goto digest;
    }
    s->dir = model_dir;
    if ((rc = read_config(s, errbuf, errlen))) goto done;
    snprintf(path, sizeof path, "%s/model.safetensors", model_dir);
    if (stat(path, &sb) == 0) {            /* one file (wins over an index, as in the loader) */
        if (!(rc = open_weights(s, "model.safetensors", &one, errbuf, errlen)))
            rc = scan_file(s, one, "model.safetensors");
    } else if (s->hf) {
        rc = scan_index(s, &index, errbuf, errlen);
    } else {
        scdb_errf(errbuf, errlen, "%s: no such file", path);
        rc = SCDB_ENOTFOUND;
    }
    if (rc) goto done;
    if (s->tied) {   /* the head is the embedding, whatever the files hold under its name */
        const fp_entry *emb = NULL;
        for (int i = 0; i < s->n; i++)
            if (!strcmp(s->e[i].name, HEAD)) s->e[i--] = s->e[--s->n];
        for (int i = 0; i < s->n && !emb; i++)
            if (!strcmp(s->e[i].name, EMBED)) emb = &s->e[i];
        if (!emb) {
            scdb_errf(errbuf, errlen, "%s: tie_word_embeddings is true but there is no %s", model_dir, EMBED);
            rc = SCDB_ENOTFOUND;
            goto done;
        }
        fp_entry head = *emb;
        snprintf(head.name, sizeof head.name, "%s", HEAD);
        if ((rc = add_entry(s, head.name, head.t, head.file))) goto done;
    }
    if (s->n == 0) {
        scdb_errf(errbuf, errlen, "%s: no tensor the model reads", model_dir);
        rc = SCDB_ENOTFOUND;
        goto done;
    }
    qsort(s->e, (size_t)s->n, sizeof *s->e, cmp_entry);
    for (int i = 1; i < s->n; i++)
        if (!strcmp(s->e[i].name, s->e[i - 1].name)) {
            scdb_errf(errbuf, errlen, "%s: tensor %s appears twice", model_dir, s->e[i].name);
            rc = SCDB_EFORMAT;
            goto done;
        }
    if (ad && (rc = check_adapter(s, ad, errbuf, errlen))) goto done;
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, FP_TAG, sizeof FP_TAG);
    for (int i = 0; i < s->n; i++) {
        int layer, module;
        const scdb_lora_target *t = NULL;
        if (ad && layer_module(s->e[i].name, &layer, &module) == 0)
            t = scdb_adapter_find(ad, layer, module);
        if (t) {
            int64_t out = s->e[i].t->shape[0], in = s->e[i].t->shape[1];
            float *g = realloc(merged, (size_t)(out * in) * sizeof *g);
            if (!g) { rc = SCDB_ENOMEM; goto done; }
            merged = g;
            if ((rc = scdb_st_to_f32(s->e[i].t, 0, (size_t)(out * in), merged)) ||
                (rc = scdb_adapter_merge(ad, t, merged, out, in, merged))) {
                scdb_errf(errbuf, errlen, "tensor '%s' in %s: %s", s->e[i].name, s->e[i].file,
                          scdb_strerror(rc));
                goto done;
            }
        }
        if ((rc = hash_tensor(st, &s->e[i], t ? merged : NULL, errbuf, errlen))) goto done;
    }
digest:;
    XXH128_hash_t h = XXH3_128bits_digest(st);
    snprintf(hex, SCDB_WEIGHTS_FP_HEX + 1, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    rc = SCDB_OK;
done:
    if (s) {
        for (int k = 0; k < s->n_files; k++) scdb_st_close(&s->files[k]);
        free(s->e);
    }
    free(s);
    free(merged);
    scdb_adapter_close(&ad);
    cJSON_Delete(index);
    if (st) XXH3_freeState(st);
    return rc;
}

scdb_err scdb_weights_fp(const char *model_dir, char hex[SCDB_WEIGHTS_FP_HEX + 1], char *errbuf,
                         size_t errlen)
{
    return scdb_weights_fp_ex(model_dir, NULL, hex, errbuf, errlen);
}

int scdb_weights_fp_valid(const char *s)
{
    if (!s || strlen(s) != SCDB_WEIGHTS_FP_HEX) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return 1;
}
