/* gguf_export.c — a loaded model, or a LoRA adapter, written as the GGUF
 * file llama.cpp loads (model.h, "GGUF export"; schema/FORMATS.md "GGUF:
 * llama models and LoRA adapters").  The inverse of gguf_checkpoint.c: the
 * same names (schema/gguf_llama.h), attn_q / attn_k rows (and an adapter's
 * lora_b of them) permuted into llama.cpp's RoPE order, the byte
 * vocabulary as llama.cpp's "rwkv" tokenizer reads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "kernels.h"
#include "model_internal.h"
#include "peft_adapter.h"

/* llama.cpp's general.file_type (enum llama_ftype) */
#define FTYPE_ALL_F32 0
#define FTYPE_MOSTLY_F16 1
#define FTYPE_MOSTLY_BF16 32

typedef struct exporter {
    scdb_gguf_writer *w;
    scdb_dtype dt;
    void **bufs;                   /* data the writer points at, freed after the write */
    int n, cap;
} exporter;

/* Hand p to the exporter (freed after the write); on SCDB_ENOMEM p is
 * freed. */
static scdb_err own(exporter *x, void *p)
{
    if (x->n == x->cap) {
        int nc = x->cap ? 2 * x->cap : 64;
        void **g = realloc(x->bufs, (size_t)nc * sizeof *g);
        if (!g) { free(p); return SCDB_ENOMEM; }
        x->bufs = g;
        x->cap = nc;
    }
    x->bufs[x->n++] = p;
    return SCDB_OK;
}

static void *keep(exporter *x, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    return p && !own(x, p) ? p : NULL;
}

static int ggml_of(scdb_dtype dt) { return dt == SCDB_F16 ? SCDB_GGML_F16 : dt == SCDB_BF16 ? SCDB_GGML_BF16 : SCDB_GGML_F32; }

/* One f32 tensor of Hugging Face shape [rows, cols] (cols 0: 1-D): rows
 * permuted in heads of perm_hd (0: not), converted to x->dt unless
 * keep_f32 (norms stay F32, as llama.cpp's converter keeps 1-D tensors). */
static scdb_err add(exporter *x, const char *name, const float *data, int64_t rows, int64_t cols, int perm_hd,
                    int keep_f32)
{
    size_t numel = (size_t)rows * (size_t)(cols ? cols : 1);
    scdb_dtype dt = keep_f32 ? SCDB_F32 : x->dt;
    const void *src = data;
    if (perm_hd) {
        float *p = keep(x, numel * sizeof *p);
        if (!p) return SCDB_ENOMEM;
        scdb_gguf_llama_permute_rows(data, p, rows, (size_t)(cols ? cols : 1) * sizeof *p, perm_hd, 1);
        src = p;
    }
    if (dt != SCDB_F32) {
        uint16_t *h = keep(x, numel * sizeof *h);
        if (!h) return SCDB_ENOMEM;
        if (dt == SCDB_F16) scdb_f32_to_f16_n(src, h, numel);
        else scdb_f32_to_bf16_n(src, h, numel);
        src = h;
    }
    int64_t ne[2] = {cols ? cols : rows, rows};
    return scdb_gguf_add_tensor(x->w, name, ggml_of(dt), cols ? 2 : 1, ne, src);
}

static void exporter_free(exporter *x)
{
    for (int i = 0; i < x->n; i++) free(x->bufs[i]);
    free(x->bufs);
    scdb_gguf_writer_free(&x->w);
}

static scdb_err check_dtype(scdb_dtype dt, char *errbuf, size_t errlen)
{
    if (dt == SCDB_F32 || dt == SCDB_F16 || dt == SCDB_BF16) return SCDB_OK;
    scdb_errf(errbuf, errlen, "export: dtype %s is not one of F32, F16, BF16", scdb_dtype_name(dt) ? scdb_dtype_name(dt) : "?");
    return SCDB_EINVAL;
}

static scdb_err write_out(exporter *x, const char *path, char *errbuf, size_t errlen)
{
    scdb_err rc = scdb_gguf_writer_write(x->w, path);
    if (rc) scdb_errf(errbuf, errlen, "%s: cannot write (%s)", path, scdb_strerror(rc));
    return rc;
}

/* The llama architecture's keys of a model of config c (general.* and
 * llama.*: the hyperparameters llama.cpp reads). */
static scdb_err set_llama_keys(scdb_gguf_writer *w, const scdb_model_config *c, uint32_t ftype)
{
    scdb_err rc;
    if ((rc = scdb_gguf_set_str(w, "general.architecture", "llama")) ||
        (rc = scdb_gguf_set_str(w, "general.type", "model")) ||
        (rc = scdb_gguf_set_str(w, "general.name", c->name)) ||
        (rc = scdb_gguf_set_u32(w, "general.file_type", ftype)) ||
        (rc = scdb_gguf_set_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size)) ||
        (rc = scdb_gguf_set_u32(w, "llama.context_length", (uint32_t)c->max_seq_len)) ||
        (rc = scdb_gguf_set_u32(w, "llama.embedding_length", (uint32_t)c->d_model)) ||
        (rc = scdb_gguf_set_u32(w, "llama.block_count", (uint32_t)c->n_layers)) ||
        (rc = scdb_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)c->d_ff)) ||
        (rc = scdb_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads)) ||
        (rc = scdb_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads)) ||
        (rc = scdb_gguf_set_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim)) ||
        (rc = scdb_gguf_set_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim)) ||
        (rc = scdb_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim)) ||
        (rc = scdb_gguf_set_f32(w, "llama.rope.freq_base", c->rope_theta)) ||
        (rc = scdb_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps)))
        return rc;
    return SCDB_OK;
}

scdb_err scdb_model_export_gguf(const scdb_model *m, const char *path, scdb_dtype dt, char *errbuf, size_t errlen)
{
    exporter x = {.dt = dt};
    const scdb_model_config *c;
    char name[96];
    scdb_err rc;

    if (!m || !path) return SCDB_EINVAL;
    if ((rc = check_dtype(dt, errbuf, errlen))) return rc;
    c = &m->cfg;
    if (m->lowrank) {
        scdb_errf(errbuf, errlen, "%s: a model loaded SCDB_LORA_LOWRANK has no merged weights to export", m->dir);
        return SCDB_EUNSUPPORTED;
    }
    if (c->vocab_size != 256) {
        scdb_errf(errbuf, errlen, "%s: vocab_size %d: the export writes the 256-token byte vocabulary, and scdb has "
                  "no tokenizer for another", m->dir, c->vocab_size);
        return SCDB_EUNSUPPORTED;
    }
    if ((rc = scdb_gguf_writer_new(&x.w))) return rc;
    scdb_gguf_writer *w = x.w;
    uint32_t ftype = dt == SCDB_F16 ? FTYPE_MOSTLY_F16 : dt == SCDB_BF16 ? FTYPE_MOSTLY_BF16 : FTYPE_ALL_F32;
    char tok[256][8];
    const char *toks[256];
    int32_t types[256];
    for (int i = 0; i < 256; i++) {     /* "\xNN", lowercase: llama.cpp's rwkv unescaping reads a-f only */
        snprintf(tok[i], sizeof tok[i], "\\x%02x", i);
        toks[i] = tok[i];
        types[i] = 1;                   /* LLAMA_TOKEN_TYPE_NORMAL */
    }
    if ((rc = set_llama_keys(w, c, ftype)) ||
        (rc = scdb_gguf_set_str(w, "tokenizer.ggml.model", "rwkv")) ||
        (rc = scdb_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 256)) ||
        (rc = scdb_gguf_set_arr(w, "tokenizer.ggml.token_type", SCDB_GGUF_I32, types, 256)) ||
        (rc = scdb_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 0)) ||
        (rc = scdb_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0)))
        goto done;
    const char *prov[3][2] = {{"scdb.domain", c->domain}, {"scdb.parent", c->parent}, {"scdb.finetune", c->finetune}};
    for (int i = 0; i < 3; i++)
        if (prov[i][1][0] && (rc = scdb_gguf_set_str(w, prov[i][0], prov[i][1]))) goto done;

    int64_t d = c->d_model, qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c), ff = c->d_ff;
    if ((rc = add(&x, "token_embd.weight", m->tok_embeddings, c->vocab_size, d, 0, 0)) ||
        (rc = add(&x, "output_norm.weight", m->norm, d, 0, 0, 1)))
        goto done;
    if (!c->tied_embeddings && (rc = add(&x, "output.weight", m->output, c->vocab_size, d, 0, 0))) goto done;
    for (int l = 0; l < c->n_layers; l++) {
        const scdb_layer_weights *lw = &m->layers[l];
        struct { const char *n; const float *p; int64_t r, k; int perm, f32; } t[] = {
            {"attn_norm", lw->attn_norm, d, 0, 0, 1},
            {"attn_q", lw->wq, qd, d, c->head_dim, 0},
            {"attn_k", lw->wk, kvd, d, c->head_dim, 0},
            {"attn_v", lw->wv, kvd, d, 0, 0},
            {"attn_output", lw->wo, d, qd, 0, 0},
            {"ffn_norm", lw->ffn_norm, d, 0, 0, 1},
            {"ffn_gate", lw->w1, ff, d, 0, 0},
            {"ffn_up", lw->w3, ff, d, 0, 0},
            {"ffn_down", lw->w2, d, ff, 0, 0},
        };
        for (size_t i = 0; i < SCDB_ARRAY_LEN(t); i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].n);
            if ((rc = add(&x, name, t[i].p, t[i].r, t[i].k, t[i].perm, t[i].f32))) goto done;
        }
    }
    rc = write_out(&x, path, errbuf, errlen);
done:
    if (rc == SCDB_ENOMEM) scdb_errf(errbuf, errlen, "%s: out of memory", path);
    exporter_free(&x);
    return rc;
}

scdb_err scdb_adapter_export_gguf(const char *adapter, const char *models_dir, const char *path, scdb_dtype dt,
                                  char *errbuf, size_t errlen)
{
    exporter x = {.dt = dt};
    scdb_adapter *a = NULL;
    scdb_model_config c;
    float *fa = NULL, *fb = NULL;
    char cfg[1100], name[96], base[SCDB_MODEL_NAME_MAX];
    scdb_err rc;

    if (!adapter || !path) return SCDB_EINVAL;
    if ((rc = check_dtype(dt, errbuf, errlen))) return rc;
    if ((rc = scdb_adapter_open(adapter, models_dir, &a, errbuf, errlen))) return rc;
    if (scdb_gguf_is_file(a->base_dir)) snprintf(cfg, sizeof cfg, "%s", a->base_dir);
    else snprintf(cfg, sizeof cfg, "%s/config.json", a->base_dir);
    int64_t shape[SCDB_LORA_N_MODULES][2];
    if ((rc = scdb_model_config_load(cfg, &c, errbuf, errlen))) goto done;
    scdb_model_proj_shapes(&c, shape);
    if ((rc = scdb_adapter_check_base(a, c.n_layers, (const int64_t(*)[2])shape, errbuf, errlen)) ||
        (rc = scdb_gguf_writer_new(&x.w)))
        goto done;
    /* llama.cpp scales by alpha / r: an rsLoRA adapter's s = alpha / sqrt(r)
     * is written as the alpha giving that s */
    float alpha = a->rslora ? a->scale * (float)a->r : (float)a->alpha;
    md_adapter_rename(&c, adapter);             /* c.name: the adapter's */
    const char *bn = strrchr(a->base_name, '/');
    bn = bn ? bn + 1 : a->base_name;
    scdb_str_cut(base, sizeof base, bn);
    size_t bl = strlen(base);
    if (bl > 5 && !strcmp(base + bl - 5, ".gguf")) base[bl - 5] = '\0';
    if ((rc = scdb_gguf_set_str(x.w, "general.architecture", "llama")) ||
        (rc = scdb_gguf_set_str(x.w, "general.type", "adapter")) ||
        (rc = scdb_gguf_set_str(x.w, "general.name", c.name)) ||
        (rc = scdb_gguf_set_u32(x.w, "general.base_model.count", 1)) ||
        (rc = scdb_gguf_set_str(x.w, "general.base_model.0.name", base)) ||
        (rc = scdb_gguf_set_str(x.w, "adapter.type", "lora")) ||
        (rc = scdb_gguf_set_f32(x.w, "adapter.lora.alpha", alpha)))
        goto done;
    for (int i = 0; i < a->n_t; i++) {
        const scdb_lora_target *t = &a->t[i];
        int64_t out = shape[t->module][0], in = shape[t->module][1];
        fa = malloc((size_t)(a->r * in) * sizeof *fa);
        fb = malloc((size_t)(out * a->r) * sizeof *fb);
        if (!fa || !fb) { rc = SCDB_ENOMEM; goto done; }
        if ((rc = scdb_st_to_f32(t->a, 0, (size_t)(a->r * in), fa)) ||
            (rc = scdb_st_to_f32(t->b, 0, (size_t)(out * a->r), fb)))
            goto done;
        int perm = t->module == SCDB_LORA_Q || t->module == SCDB_LORA_K ? c.head_dim : 0;
        snprintf(name, sizeof name, "blk.%d.%s.weight.lora_a", t->layer, scdb_gguf_llama_proj_name(t->module));
        if ((rc = add(&x, name, fa, a->r, in, 0, 0))) goto done;
        snprintf(name, sizeof name, "blk.%d.%s.weight.lora_b", t->layer, scdb_gguf_llama_proj_name(t->module));
        if ((rc = add(&x, name, fb, out, a->r, perm, 0))) goto done;
        /* the writer keeps pointers: the exporter owns the f32 buffers now
         * (own frees what it cannot take) */
        rc = own(&x, fa);
        fa = NULL;
        if (rc) goto done;
        rc = own(&x, fb);
        fb = NULL;
        if (rc) goto done;
    }
    rc = write_out(&x, path, errbuf, errlen);
done:
    if (rc == SCDB_ENOMEM) scdb_errf(errbuf, errlen, "%s: out of memory", path);
    free(fa);
    free(fb);
    exporter_free(&x);
    scdb_adapter_close(&a);
    return rc;
}

/* ------------------------------------------------------------ random weights */

/* n values uniform with standard deviation sd, seeded by (seed, tensor) so
 * that a tensor's values do not depend on the order tensors are made in */
static void fill_random(float *x, size_t n, float sd, uint64_t seed, uint64_t tensor)
{
    uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * (tensor + 1));
    if (!s) s = 1;
    const float a = sd * 1.7320508f;   /* uniform [-a, a): sd = a / sqrt(3) */
    for (size_t i = 0; i < n; i++) x[i] = a * scdb_xorshift_f32(&s);
}

scdb_err scdb_model_write_random_gguf(scdb_model_config *c, const char *vocab, uint64_t seed, float sd,
                                      scdb_dtype dt, const char *path, char *errbuf, size_t errlen)
{
    exporter x = {.dt = dt};
    scdb_gguf_file *v = NULL;
    float *scratch = NULL;
    char name[96];
    scdb_err rc;

    if (!c || !path || !(sd > 0)) return SCDB_EINVAL;
    /* add() copies a matrix only when it converts or permutes it: F32
     * matrices would all point at the one scratch buffer */
    if (dt != SCDB_F16 && dt != SCDB_BF16) {
        scdb_errf(errbuf, errlen, "random model: dtype %s (F16 or BF16)", scdb_dtype_name(dt) ? scdb_dtype_name(dt) : "?");
        return SCDB_EINVAL;
    }
    if (vocab) {
        if ((rc = scdb_gguf_open(vocab, &v, errbuf, errlen))) return rc;
        const scdb_gguf_kv *toks = scdb_gguf_find_kv(v, "tokenizer.ggml.tokens");
        if (!toks || !toks->str || toks->n < 1 || toks->n > (1u << 24)) {
            scdb_errf(errbuf, errlen, "%s: no tokenizer.ggml.tokens (a vocabulary GGUF has them)", vocab);
            scdb_gguf_close(&v);
            return SCDB_ENOTFOUND;
        }
        c->vocab_size = (int)toks->n;
    } else {
        c->vocab_size = 256;
    }
    c->tied_embeddings = 0;
    if (c->n_layers < 1 || c->d_model < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 2 ||
        c->head_dim % 2 || c->n_heads % c->n_kv_heads || c->d_ff < 1 || c->max_seq_len < 1) {
        scdb_errf(errbuf, errlen, "random model: %d layers, d %d, %d heads of %d, %d KV heads, ffn %d, "
                  "context %d: not a llama architecture", c->n_layers, c->d_model, c->n_heads, c->head_dim,
                  c->n_kv_heads, c->d_ff, c->max_seq_len);
        scdb_gguf_close(&v);
        return SCDB_ERANGE;
    }
    if ((rc = scdb_gguf_writer_new(&x.w))) goto done;
    scdb_gguf_writer *w = x.w;
    uint32_t ftype = dt == SCDB_F16 ? FTYPE_MOSTLY_F16 : dt == SCDB_BF16 ? FTYPE_MOSTLY_BF16 : FTYPE_ALL_F32;
    if ((rc = set_llama_keys(w, c, ftype)))
        goto done;
    if (v) {
        for (int i = 0; i < scdb_gguf_kv_count(v) && !rc; i++) {
            const scdb_gguf_kv *kv = scdb_gguf_kv_at(v, i);
            if (!strncmp(kv->key, "tokenizer.", 10)) rc = scdb_gguf_set_kv(w, kv);
        }
    } else {
        char tok[256][8];
        const char *toks[256];
        int32_t types[256];
        for (int i = 0; i < 256; i++) {
            snprintf(tok[i], sizeof tok[i], "\\x%02x", i);
            toks[i] = tok[i];
            types[i] = 1;
        }
        if (!(rc = scdb_gguf_set_str(w, "tokenizer.ggml.model", "rwkv")) &&
            !(rc = scdb_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 256)) &&
            !(rc = scdb_gguf_set_arr(w, "tokenizer.ggml.token_type", SCDB_GGUF_I32, types, 256)) &&
            !(rc = scdb_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 0)))
            rc = scdb_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    }
    if (rc) goto done;

    int64_t d = c->d_model, qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c), ff = c->d_ff;
    size_t big = (size_t)c->vocab_size * (size_t)d;
    if ((size_t)ff * d > big) big = (size_t)ff * d;
    if ((size_t)qd * d > big) big = (size_t)qd * d;
    if (!(scratch = malloc(big * sizeof *scratch))) { rc = SCDB_ENOMEM; goto done; }
    uint64_t tid = 0;
    /* matrices: sd; norms: ones (so activations stay of size about 1) */
    fill_random(scratch, (size_t)c->vocab_size * d, sd, seed, tid++);
    if ((rc = add(&x, "token_embd.weight", scratch, c->vocab_size, d, 0, 0))) goto done;
    fill_random(scratch, (size_t)c->vocab_size * d, sd, seed, tid++);
    if ((rc = add(&x, "output.weight", scratch, c->vocab_size, d, 0, 0))) goto done;
    float *ones = keep(&x, (size_t)d * sizeof *ones);
    if (!ones) { rc = SCDB_ENOMEM; goto done; }
    for (int64_t i = 0; i < d; i++) ones[i] = 1.0f;
    if ((rc = scdb_gguf_add_tensor(w, "output_norm.weight", SCDB_GGML_F32, 1, &d, ones))) goto done;
    for (int l = 0; l < c->n_layers; l++) {
        struct { const char *n; int64_t r, k; int perm; } t[] = {
            {"attn_norm", d, 0, 0},      {"attn_q", qd, d, c->head_dim}, {"attn_k", kvd, d, c->head_dim},
            {"attn_v", kvd, d, 0},       {"attn_output", d, qd, 0},      {"ffn_norm", d, 0, 0},
            {"ffn_gate", ff, d, 0},      {"ffn_up", ff, d, 0},           {"ffn_down", d, ff, 0},
        };
        for (size_t i = 0; i < SCDB_ARRAY_LEN(t); i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].n);
            if (!t[i].k) {
                rc = scdb_gguf_add_tensor(w, name, SCDB_GGML_F32, 1, &d, ones);
            } else {
                fill_random(scratch, (size_t)t[i].r * (size_t)t[i].k, sd, seed, tid++);
                rc = add(&x, name, scratch, t[i].r, t[i].k, t[i].perm, 0);
            }
            if (rc) goto done;
        }
    }
    rc = write_out(&x, path, errbuf, errlen);
done:
    if (rc == SCDB_ENOMEM) scdb_errf(errbuf, errlen, "%s: out of memory", path);
    free(scratch);
    exporter_free(&x);
    scdb_gguf_close(&v);
    return rc;
}
