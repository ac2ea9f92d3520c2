/* gguf_llama.c — llama-architecture GGUF models and LoRA adapters as scdb's
 * weights (gguf_llama.h; schema/FORMATS.md "GGUF: llama models and LoRA
 * adapters"). */
#include "gguf_llama.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "peft_adapter.h"
#include "scdb_common.h"

/* llama.cpp's projection names, in scdb_lora_module order, and the
 * Hugging Face module paths (peft_adapter.h's). */
static const char *const PROJ[SCDB_LORA_N_MODULES] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                       "ffn_gate", "ffn_up", "ffn_down"};

const char *scdb_gguf_llama_proj_name(int module)
{
    return module >= 0 && module < SCDB_LORA_N_MODULES ? PROJ[module] : NULL;
}

int scdb_gguf_is_adapter(const scdb_gguf_file *f)
{
    const char *t = NULL;
    return f && !scdb_gguf_get_str(f, "general.type", &t, NULL, 0) && !strcmp(t, "adapter");
}

int scdb_gguf_is_adapter_file(const char *path)
{
    char t[16];
    return scdb_gguf_is_file(path) && !scdb_gguf_peek_str(path, "general.type", t, sizeof t) &&
           !strcmp(t, "adapter");
}

/* ------------------------------------------------------------ hparams */

static const char *fname(const scdb_gguf_file *f)
{
    return scdb_gguf_path(f)[0] ? scdb_gguf_path(f) : "GGUF";
}

/* An integer key in [lo, hi]: required (dflt ignored) or optional. */
static scdb_err int_key(const scdb_gguf_file *f, const char *key, int required, int dflt, int lo, int hi, int *out,
                        char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv = scdb_gguf_find_kv(f, key);
    int64_t v;
    if (!kv && !required) {
        *out = dflt;
        return SCDB_OK;
    }
    if (kv && kv->type == SCDB_GGUF_ARRAY) {
        scdb_errf(errbuf, errlen, "%s: key '%s' is an array (per-layer values), which is not supported", fname(f), key);
        return SCDB_EUNSUPPORTED;
    }
    scdb_err e = scdb_gguf_get_int(f, key, &v, errbuf, errlen);
    if (e) return e;
    if (v < lo || v > hi) {
        scdb_errf(errbuf, errlen, "%s: key '%s' = %" PRId64 " is out of range [%d, %d]", fname(f), key, v, lo, hi);
        return SCDB_ERANGE;
    }
    *out = (int)v;
    return SCDB_OK;
}

static scdb_err float_key(const scdb_gguf_file *f, const char *key, int required, float dflt, double lo, double hi,
                          float *out, char *errbuf, size_t errlen)
{
    double v;
    if (!required && !scdb_gguf_find_kv(f, key)) {
        *out = dflt;
        return SCDB_OK;
    }
    scdb_err e = scdb_gguf_get_float(f, key, &v, errbuf, errlen);
    if (e) return e;
    if (!(v >= lo && v <= hi)) {
        scdb_errf(errbuf, errlen, "%s: key '%s' = %g is out of range [%g, %g]", fname(f), key, v, lo, hi);
        return SCDB_ERANGE;
    }
    *out = (float)v;
    return SCDB_OK;
}

/* An optional string key into dst (cut to fit). */
static scdb_err str_key(const scdb_gguf_file *f, const char *key, char *dst, size_t cap, char *errbuf,
                        size_t errlen)
{
    const char *s;
    dst[0] = '\0';
    if (!scdb_gguf_find_kv(f, key)) return SCDB_OK;
    scdb_err e = scdb_gguf_get_str(f, key, &s, errbuf, errlen);
    if (!e) scdb_str_cut(dst, cap, s);
    return e;
}

static scdb_err check_arch(const scdb_gguf_file *f, char *errbuf, size_t errlen)
{
    const char *arch;
    scdb_err e = scdb_gguf_get_str(f, "general.architecture", &arch, errbuf, errlen);
    if (e) return e;
    if (strcmp(arch, "llama")) {
        scdb_errf(errbuf, errlen, "%s: architecture \"%.100s\" is not supported (only \"llama\")", fname(f), arch);
        return SCDB_EUNSUPPORTED;
    }
    return SCDB_OK;
}

scdb_err scdb_gguf_llama_hparams_read(const scdb_gguf_file *f, scdb_gguf_llama_hparams *out, char *errbuf,
                                      size_t errlen)
{
    scdb_gguf_llama_hparams h;
    const char *type = NULL;
    int key_len, val_len, rot, experts;
    scdb_err e;

    if (!f || !out) return SCDB_EINVAL;
    memset(&h, 0, sizeof h);
    if ((e = check_arch(f, errbuf, errlen))) return e;
    if (scdb_gguf_find_kv(f, "general.type")) {
        if ((e = scdb_gguf_get_str(f, "general.type", &type, errbuf, errlen))) return e;
        if (strcmp(type, "model")) {
            scdb_errf(errbuf, errlen, "%s: general.type is \"%.60s\", not \"model\"", fname(f), type);
            return SCDB_EFORMAT;
        }
    }
    if ((e = str_key(f, "general.name", h.name, sizeof h.name, errbuf, errlen)) ||
        (e = str_key(f, "scdb.domain", h.domain, sizeof h.domain, errbuf, errlen)) ||
        (e = str_key(f, "scdb.parent", h.parent, sizeof h.parent, errbuf, errlen)) ||
        (e = str_key(f, "scdb.finetune", h.finetune, sizeof h.finetune, errbuf, errlen)) ||
        (e = int_key(f, "llama.block_count", 1, 0, 1, 1024, &h.n_layers, errbuf, errlen)) ||
        (e = int_key(f, "llama.embedding_length", 1, 0, 1, 1 << 16, &h.d_model, errbuf, errlen)) ||
        (e = int_key(f, "llama.feed_forward_length", 1, 0, 1, 1 << 18, &h.d_ff, errbuf, errlen)) ||
        (e = int_key(f, "llama.attention.head_count", 1, 0, 1, 1024, &h.n_heads, errbuf, errlen)) ||
        (e = int_key(f, "llama.attention.head_count_kv", 0, h.n_heads, 1, 1024, &h.n_kv_heads, errbuf, errlen)) ||
        (e = int_key(f, "llama.context_length", 1, 0, 1, 1 << 24, &h.ctx_len, errbuf, errlen)) ||
        (e = float_key(f, "llama.attention.layer_norm_rms_epsilon", 1, 0, 1e-12, 1.0, &h.norm_eps, errbuf, errlen)) ||
        (e = float_key(f, "llama.rope.freq_base", 0, 10000.0f, 1.0, 1e12, &h.rope_theta, errbuf, errlen)) ||
        (e = int_key(f, "llama.expert_count", 0, 0, 0, 1 << 20, &experts, errbuf, errlen)))
        return e;
    if (experts > 0) {
        scdb_errf(errbuf, errlen, "%s: llama.expert_count = %d: mixture-of-experts models are not supported", fname(f),
                  experts);
        return SCDB_EUNSUPPORTED;
    }
    if (h.n_heads % h.n_kv_heads) {
        scdb_errf(errbuf, errlen, "%s: llama.attention.head_count (%d) is not a multiple of head_count_kv (%d)",
                  fname(f), h.n_heads, h.n_kv_heads);
        return SCDB_ERANGE;
    }
    int dflt_hd = h.d_model % h.n_heads ? 0 : h.d_model / h.n_heads;
    if ((e = int_key(f, "llama.attention.key_length", !dflt_hd, dflt_hd, 2, 4096, &key_len, errbuf, errlen)) ||
        (e = int_key(f, "llama.attention.value_length", 0, key_len, 2, 4096, &val_len, errbuf, errlen)) ||
        (e = int_key(f, "llama.rope.dimension_count", 0, key_len, 0, 4096, &rot, errbuf, errlen)))
        return e;
    if (val_len != key_len) {
        scdb_errf(errbuf, errlen, "%s: key length %d != value length %d is not supported", fname(f), key_len, val_len);
        return SCDB_EUNSUPPORTED;
    }
    if (rot != key_len) {
        scdb_errf(errbuf, errlen, "%s: llama.rope.dimension_count = %d != head size %d: partial RoPE is not supported",
                  fname(f), rot, key_len);
        return SCDB_EUNSUPPORTED;
    }
    if (key_len % 2) {
        scdb_errf(errbuf, errlen, "%s: head size %d must be even for RoPE", fname(f), key_len);
        return SCDB_ERANGE;
    }
    h.head_dim = key_len;
    char scaling[32];
    float factor = 0.0f;
    if ((e = str_key(f, "llama.rope.scaling.type", scaling, sizeof scaling, errbuf, errlen)) ||
        (e = float_key(f, "llama.rope.scaling.factor", 0, 0.0f, -1e30, 1e30, &factor, errbuf, errlen)))
        return e;
    if ((scaling[0] && strcmp(scaling, "none") && strcmp(scaling, "linear")) || (factor != 0.0f && factor != 1.0f)) {
        scdb_errf(errbuf, errlen, "%s: RoPE scaling (type \"%s\", factor %g) is not supported (plain RoPE only)",
                  fname(f), scaling[0] ? scaling : "linear", factor);
        return SCDB_EUNSUPPORTED;
    }
    /* the vocabulary: llama.vocab_size, else the token list, else the embedding */
    const scdb_gguf_kv *tok = scdb_gguf_find_kv(f, "tokenizer.ggml.tokens");
    const scdb_gguf_tensor *emb = scdb_gguf_find_tensor(f, "token_embd.weight");
    int dflt_vocab = tok && tok->type == SCDB_GGUF_ARRAY && tok->n <= (1u << 24) ? (int)tok->n
                     : emb && emb->n_dims == 2 && emb->ne[1] <= (1 << 24) ? (int)emb->ne[1] : 0;
    if ((e = int_key(f, "llama.vocab_size", !dflt_vocab, dflt_vocab, 1, 1 << 24, &h.vocab_size, errbuf, errlen)))
        return e;
    h.tied = !scdb_gguf_find_tensor(f, "output.weight");
    *out = h;
    return SCDB_OK;
}

int scdb_gguf_llama_byte_vocab(const scdb_gguf_file *f, char *desc, size_t desclen)
{
    const scdb_gguf_kv *model = scdb_gguf_find_kv(f, "tokenizer.ggml.model");
    const scdb_gguf_kv *toks = scdb_gguf_find_kv(f, "tokenizer.ggml.tokens");
    const char *name = model && model->type == SCDB_GGUF_STRING && model->str ? model->str[0] : NULL;
    uint64_t n = toks && toks->type == SCDB_GGUF_ARRAY ? toks->n : 0;
    if (!model && !toks) {
        uint32_t v = 0;
        char e[8];
        int byte = scdb_gguf_get_u32(f, "llama.vocab_size", &v, e, sizeof e) == SCDB_OK && v == 256;
        if (!byte && desc && desclen) snprintf(desc, desclen, "no tokenizer, vocab_size %u", v);
        return byte;
    }
    int byte = name && !strcmp(name, "rwkv") && n == 256 && toks->elem == SCDB_GGUF_STRING && toks->str;
    for (int i = 0; byte && i < 256; i++) {
        char want[8];
        snprintf(want, sizeof want, "\\x%02x", i);
        byte = toks->str_len[i] == 4 && !strncmp(toks->str[i], want, 4);
    }
    if (!byte && desc && desclen)
        snprintf(desc, desclen, "tokenizer '%s', %" PRIu64 " tokens", name ? name : "?", n);
    return byte;
}

/* ------------------------------------------------------------ tensors */

static const struct {
    const char *gguf, *hf;
    int module, kind;          /* kind: 0 norm [d], 1 a projection */
} LAYER[] = {
    {"attn_norm", "input_layernorm", -1, 0},
    {"attn_q", "self_attn.q_proj", 0, 1},
    {"attn_k", "self_attn.k_proj", 1, 1},
    {"attn_v", "self_attn.v_proj", 2, 1},
    {"attn_output", "self_attn.o_proj", 3, 1},
    {"ffn_norm", "post_attention_layernorm", -1, 0},
    {"ffn_gate", "mlp.gate_proj", 4, 1},
    {"ffn_up", "mlp.up_proj", 5, 1},
    {"ffn_down", "mlp.down_proj", 6, 1},
};

/* A tensor a llama model may hold that changes what it computes. */
static int refused_tensor(const char *name)
{
    size_t n = strlen(name);
    return (n > 5 && !strcmp(name + n - 5, ".bias")) || strstr(name, "rope_freqs") || strstr(name, "_exps") ||
           strstr(name, "ffn_gate_inp") || strstr(name, "_shexp") || strstr(name, "rope_factors");
}

static scdb_err expect(const scdb_gguf_file *f, const char *name, int64_t rows, int64_t cols, scdb_gguf_llama_tensor *e,
                       char *errbuf, size_t errlen)
{
    const scdb_gguf_tensor *t = scdb_gguf_find_tensor(f, name);
    if (!t) {
        scdb_errf(errbuf, errlen, "%s: tensor '%s' is missing", fname(f), name);
        return SCDB_ENOTFOUND;
    }
    int nd = cols ? 2 : 1;
    if (t->n_dims != nd || t->ne[0] != (cols ? cols : rows) || (cols && t->ne[1] != rows)) {
        char want[64];
        if (cols) snprintf(want, sizeof want, "{%" PRId64 ", %" PRId64 "}", cols, rows);
        else snprintf(want, sizeof want, "{%" PRId64 "}", rows);
        scdb_errf(errbuf, errlen, "%s: tensor '%s' has ne {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "} "
                  "(%d dims), the hyperparameters imply ne %s", fname(f), name, t->ne[0], t->ne[1], t->ne[2],
                  t->ne[3], t->n_dims, want);
        return SCDB_ESHAPE;
    }
    if (!scdb_gguf_type_to_f32_ok(t->type)) {
        scdb_errf(errbuf, errlen, "%s: tensor '%s' is %s, which cannot be read here: %s", fname(f), name,
                  scdb_ggml_type_name(t->type), scdb_gguf_type_why_not(t->type));
        return SCDB_EDTYPE;
    }
    e->t = t;
    e->rows = rows;
    e->cols = cols;
    return SCDB_OK;
}

scdb_err scdb_gguf_llama_tensors(const scdb_gguf_file *f, const scdb_gguf_llama_hparams *hp,
                                 scdb_gguf_llama_tensor **out, int *n_out, char *errbuf, size_t errlen)
{
    if (!f || !hp || !out || !n_out) return SCDB_EINVAL;
    *out = NULL;
    *n_out = 0;
    for (int i = 0; i < scdb_gguf_tensor_count(f); i++) {
        const char *name = scdb_gguf_tensor_at(f, i)->name;
        if (refused_tensor(name)) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s' is not supported (no biases, RoPE frequency factors or "
                      "experts: the model would compute something else)", fname(f), name);
            return SCDB_EUNSUPPORTED;
        }
    }
    int n = 3 + 9 * hp->n_layers, k = 0;
    scdb_gguf_llama_tensor *v = calloc((size_t)n, sizeof *v);
    if (!v) return SCDB_ENOMEM;
    int64_t d = hp->d_model, qd = (int64_t)hp->n_heads * hp->head_dim, kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
    scdb_err e;
    char name[96];
#define TOP(gg, hfn, r, c)                                                          \
    do {                                                                            \
        if ((e = expect(f, gg, r, c, &v[k], errbuf, errlen))) goto fail;            \
        snprintf(v[k].hf_name, sizeof v[k].hf_name, "%s", hfn);                    \
        v[k].layer = v[k].module = -1;                                              \
        k++;                                                                        \
    } while (0)
    TOP("token_embd.weight", "model.embed_tokens.weight", hp->vocab_size, d);
    TOP("output_norm.weight", "model.norm.weight", d, 0);
    if (!hp->tied) TOP("output.weight", "lm_head.weight", hp->vocab_size, d);
#undef TOP
    for (int l = 0; l < hp->n_layers; l++)
        for (size_t i = 0; i < SCDB_ARRAY_LEN(LAYER); i++) {
            int64_t rows = d, cols = 0;
            switch (LAYER[i].module) {
            case 0: rows = qd; cols = d; break;
            case 1: case 2: rows = kvd; cols = d; break;
            case 3: rows = d; cols = qd; break;
            case 4: case 5: rows = hp->d_ff; cols = d; break;
            case 6: rows = d; cols = hp->d_ff; break;
            default: break;
            }
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, LAYER[i].gguf);
            if ((e = expect(f, name, rows, cols, &v[k], errbuf, errlen))) goto fail;
            snprintf(v[k].hf_name, sizeof v[k].hf_name, "model.layers.%d.%s.weight", l, LAYER[i].hf);
            v[k].layer = l;
            v[k].module = LAYER[i].module;
            v[k].perm_hd = LAYER[i].module == 0 || LAYER[i].module == 1 ? hp->head_dim : 0;
            k++;
        }
    *out = v;
    *n_out = k;
    return SCDB_OK;
fail:
    free(v);
    return e;
}

void scdb_gguf_llama_permute_rows(const void *src, void *dst, int64_t rows, size_t row_bytes, int hd, int to_gguf)
{
    const uint8_t *s = src;
    uint8_t *o = dst;
    for (int64_t h = 0; h + hd <= rows; h += hd)
        for (int j = 0; j < hd / 2; j++)
            for (int p = 0; p < 2; p++) {
                int64_t g = h + 2 * j + p, f = h + (int64_t)p * (hd / 2) + j;
                if (to_gguf) memcpy(o + (size_t)g * row_bytes, s + (size_t)f * row_bytes, row_bytes);
                else memcpy(o + (size_t)f * row_bytes, s + (size_t)g * row_bytes, row_bytes);
            }
}

scdb_err scdb_gguf_llama_read(const scdb_gguf_llama_tensor *e, float *dst)
{
    if (!e || !dst) return SCDB_EINVAL;
    size_t cols = e->cols ? (size_t)e->cols : 1;
    if (!e->perm_hd) return scdb_gguf_tensor_to_f32(e->t, 0, (size_t)e->rows * cols, dst);
    int hd = e->perm_hd;
    for (int64_t h = 0; h + hd <= e->rows; h += hd)     /* row by row: a dequantizer's whole blocks */
        for (int j = 0; j < hd / 2; j++)
            for (int p = 0; p < 2; p++) {
                size_t g = (size_t)(h + 2 * j + p), f = (size_t)(h + (int64_t)p * (hd / 2) + j);
                scdb_err rc = scdb_gguf_tensor_to_f32(e->t, g * cols, cols, dst + f * cols);
                if (rc) return rc;
            }
    return SCDB_OK;
}

/* ------------------------------------------------------------ adapters */

static int is_dir(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

/* The base: explicit, or general.base_model.0.name looked up.  Sets
 * a->base_dir and a->base_name. */
static scdb_err resolve_base(scdb_adapter *a, const char *models_dir, const char *base, char *errbuf, size_t errlen)
{
    char cand[4][1200], tried[2600] = "";
    int n = 0;
    if (base) {
        snprintf(cand[n++], sizeof cand[0], "%s", base);
        scdb_str_cut(a->base_name, sizeof a->base_name, base);
    } else {
        const char *name = NULL;
        if (!scdb_gguf_find_kv(a->gguf, "general.base_model.0.name")) {
            scdb_errf(errbuf, errlen, "%s: names no base model (no general.base_model.0.name): give the base "
                      "explicitly", a->dir);
            return SCDB_ENOTFOUND;
        }
        scdb_err e = scdb_gguf_get_str(a->gguf, "general.base_model.0.name", &name, errbuf, errlen);
        if (e) return e;
        if (!name[0] || strlen(name) >= 512 || strchr(name, '\n')) {
            scdb_errf(errbuf, errlen, "%s: general.base_model.0.name is empty or too long", a->dir);
            return SCDB_EFORMAT;
        }
        scdb_str_cut(a->base_name, sizeof a->base_name, name);
        char folder[1024];
        if (name[0] == '/') {
            snprintf(cand[n++], sizeof cand[0], "%s.gguf", name);
            snprintf(cand[n++], sizeof cand[0], "%s", name);
        } else {
            if (models_dir && models_dir[0]) {
                snprintf(folder, sizeof folder, "%s", models_dir);
            } else {
                const char *slash = strrchr(a->dir, '/');
                if (slash) snprintf(folder, sizeof folder, "%.*s", (int)(slash - a->dir), a->dir);
                else snprintf(folder, sizeof folder, ".");
            }
            snprintf(cand[n++], sizeof cand[0], "%s/%s.gguf", folder, name);
            snprintf(cand[n++], sizeof cand[0], "%s/%s", folder, name);
        }
    }
    for (int i = 0; i < n; i++) {
        if (is_dir(cand[i]) && !base) {
            scdb_errf(errbuf, errlen, "%s: base %s is a directory: the base of a GGUF adapter must be a GGUF model",
                      a->dir, cand[i]);
            return SCDB_EUNSUPPORTED;
        }
        if (!scdb_gguf_is_file(cand[i])) {
            if (tried[0]) scdb_str_cut(tried + strlen(tried), sizeof tried - strlen(tried), ", ");
            scdb_str_cut(tried + strlen(tried), sizeof tried - strlen(tried), cand[i]);
            continue;
        }
        if (strlen(cand[i]) >= sizeof a->base_dir) break;
        if (scdb_gguf_is_adapter_file(cand[i])) {
            scdb_errf(errbuf, errlen, "%s: base %s is itself an adapter: stacked adapters are not supported", a->dir,
                      cand[i]);
            return SCDB_EUNSUPPORTED;
        }
        memcpy(a->base_dir, cand[i], strlen(cand[i]) + 1);
        return SCDB_OK;
    }
    if (base && is_dir(base)) {
        scdb_errf(errbuf, errlen, "%s: base %s is a directory: the base of a GGUF adapter must be a GGUF model", a->dir,
                  base);
        return SCDB_EUNSUPPORTED;
    }
    scdb_errf(errbuf, errlen, "%s: base model '%s' not found (no GGUF model at %s)", a->dir, a->base_name, tried);
    return SCDB_ENOTFOUND;
}

/* "blk.N.PROJ.weight.lora_X": layer, module and which factor (0: a, 1: b);
 * -1 for any other name. */
static int parse_factor(const char *name, int *layer, int *module, int *is_b)
{
    size_t n = strlen(name);
    if (n < 7) return -1;
    if (!strcmp(name + n - 7, ".lora_a")) *is_b = 0;
    else if (!strcmp(name + n - 7, ".lora_b")) *is_b = 1;
    else return -1;
    if (strncmp(name, "blk.", 4) || name[4] < '0' || name[4] > '9') return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    if (*end != '.' || l > 1 << 20 || (end - (name + 4) > 1 && name[4] == '0')) return -1;
    const char *q = end + 1;
    for (int m = 0; m < SCDB_LORA_N_MODULES; m++) {
        size_t pl = strlen(PROJ[m]);
        if (!strncmp(q, PROJ[m], pl) && !strcmp(q + pl, *is_b ? ".weight.lora_b" : ".weight.lora_a")) {
            *layer = (int)l;
            *module = m;
            return 0;
        }
    }
    return -1;
}

static int cmp_target(const void *x, const void *y)
{
    const scdb_lora_target *a = x, *b = y;
    return a->layer != b->layer ? (a->layer > b->layer) - (a->layer < b->layer)
                                : (a->module > b->module) - (a->module < b->module);
}

static scdb_dtype st_dtype(int ggml) { return ggml == SCDB_GGML_F32 ? SCDB_F32 : ggml == SCDB_GGML_F16 ? SCDB_F16 : SCDB_BF16; }

scdb_err scdb_gguf_adapter_fill(scdb_adapter *a, const char *models_dir, const char *base, char *errbuf, size_t errlen)
{
    scdb_gguf_file *bf = NULL;
    scdb_gguf_llama_hparams hp;
    const char *s;
    char msg[512] = "";
    scdb_err e;

    if (!a) return SCDB_EINVAL;
    if ((e = scdb_gguf_open(a->dir, &a->gguf, errbuf, errlen))) return e;
    const scdb_gguf_file *f = a->gguf;
    if ((e = scdb_gguf_get_str(f, "general.type", &s, errbuf, errlen))) return e;
    if (strcmp(s, "adapter")) {
        scdb_errf(errbuf, errlen, "%s: general.type is \"%.60s\", not \"adapter\"", a->dir, s);
        return SCDB_EFORMAT;
    }
    if ((e = check_arch(f, errbuf, errlen)) || (e = scdb_gguf_get_str(f, "adapter.type", &s, errbuf, errlen)))
        return e;
    if (strcmp(s, "lora")) {
        scdb_errf(errbuf, errlen, "%s: adapter.type \"%.60s\" is not supported (only \"lora\")", a->dir, s);
        return SCDB_EUNSUPPORTED;
    }
    float alpha = 0.0f;
    if (scdb_gguf_find_kv(f, "adapter.lora.alpha") &&
        (e = scdb_gguf_get_f32(f, "adapter.lora.alpha", &alpha, errbuf, errlen)))
        return e;
    if (!(alpha >= 0.0f && alpha <= 1e6f)) {
        scdb_errf(errbuf, errlen, "%s: adapter.lora.alpha = %g is out of range [0, 1e6]", a->dir, alpha);
        return SCDB_ERANGE;
    }
    if ((e = resolve_base(a, models_dir, base, errbuf, errlen))) return e;
    if ((e = scdb_gguf_open(a->base_dir, &bf, msg, sizeof msg)) ||
        (e = scdb_gguf_llama_hparams_read(bf, &hp, msg, sizeof msg))) {
        scdb_errf(errbuf, errlen, "%s: base %s: %s", a->dir, a->base_dir, msg);
        goto done;
    }

    /* the factors */
    int nt = scdb_gguf_tensor_count(f);
    a->views = calloc((size_t)nt + 1, sizeof *a->views);
    a->t = calloc((size_t)nt + 1, sizeof *a->t);
    if (!a->views || !a->t) { e = SCDB_ENOMEM; goto done; }
    size_t owned = 0;
    a->r = 0;
    for (int i = 0; i < nt; i++) {
        const scdb_gguf_tensor *t = scdb_gguf_tensor_at(f, i);
        int layer, module, is_b;
        if (parse_factor(t->name, &layer, &module, &is_b)) {
            size_t n = strlen(t->name);
            if (strstr(t->name, "token_embd") || strstr(t->name, "output.weight") ||
                (n > 12 && strstr(t->name, "_norm.weight"))) {
                scdb_errf(errbuf, errlen, "%s: tensor '%s' adapts the embedding, the output or a norm, which is not "
                          "supported (only the attention and MLP projections)", a->dir, t->name);
                e = SCDB_EUNSUPPORTED;
            } else {
                scdb_errf(errbuf, errlen, "%s: tensor '%s' is not a LoRA factor of a llama projection (want "
                          "blk.N.attn_q.weight.lora_a and the like)", a->dir, t->name);
                e = SCDB_EFORMAT;
            }
            goto done;
        }
        if (t->type != SCDB_GGML_F32 && t->type != SCDB_GGML_F16 && t->type != SCDB_GGML_BF16) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s' is %s, want F32, F16 or BF16 (LoRA factors are not "
                      "dequantized)", a->dir, t->name, scdb_ggml_type_name(t->type));
            e = SCDB_EDTYPE;
            goto done;
        }
        int64_t r = is_b ? t->ne[0] : t->ne[1];
        if (t->n_dims != 2 || r < 1 || r > 4096 || t->ne[0] < 1 || t->ne[1] < 1) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s' must be 2-D, not empty, with a rank in [1, 4096] as ne[%d]",
                      a->dir, t->name, is_b ? 0 : 1);
            e = SCDB_ESHAPE;
            goto done;
        }
        if (!a->r) a->r = (int)r;
        if (r != a->r) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s' has rank %" PRId64 ", another factor rank %d: adapters with "
                      "several ranks are not supported", a->dir, t->name, r, a->r);
            e = SCDB_EUNSUPPORTED;
            goto done;
        }
        scdb_lora_target *x = NULL;
        for (int j = 0; j < a->n_t && !x; j++)
            if (a->t[j].layer == layer && a->t[j].module == module) x = &a->t[j];
        if (!x) {
            x = &a->t[a->n_t++];
            x->layer = layer;
            x->module = module;
        }
        scdb_st_tensor *view = &a->views[i];
        *view = (scdb_st_tensor){.name = t->name, .dtype = st_dtype(t->type), .ndim = 2,
                                 .shape = {t->ne[1], t->ne[0]}, .nbytes = t->nbytes, .data = t->data};
        if ((is_b ? x->b : x->a)) {
            scdb_errf(errbuf, errlen, "%s: tensor '%s' given twice", a->dir, t->name);
            e = SCDB_EFORMAT;
            goto done;
        }
        if (is_b) x->b = view;
        else x->a = view;
        if (is_b && module <= SCDB_LORA_K) owned += t->nbytes;
        a->modules |= 1u << module;
    }
    if (!a->n_t) {
        scdb_errf(errbuf, errlen, "%s: holds no LoRA factor", a->dir);
        e = SCDB_ENOTFOUND;
        goto done;
    }
    /* lora_b of attn_q / attn_k: rows back into scdb's order */
    a->owned = malloc(owned ? owned : 1);
    if (!a->owned) { e = SCDB_ENOMEM; goto done; }
    uint8_t *o = a->owned;
    for (int i = 0; i < a->n_t; i++) {
        scdb_lora_target *x = &a->t[i];
        if (!x->a || !x->b) {
            scdb_errf(errbuf, errlen, "%s: layer %d %s has lora_%s but no lora_%s", a->dir, x->layer, PROJ[x->module],
                      x->a ? "a" : "b", x->a ? "b" : "a");
            e = SCDB_EFORMAT;
            goto done;
        }
        if (x->module > SCDB_LORA_K) continue;
        scdb_st_tensor *b = (scdb_st_tensor *)x->b;
        if (b->shape[0] % hp.head_dim) {
            scdb_errf(errbuf, errlen, "%s: %s: %" PRId64 " rows are not whole heads of %d", a->dir, b->name,
                      b->shape[0], hp.head_dim);
            e = SCDB_ESHAPE;
            goto done;
        }
        scdb_gguf_llama_permute_rows(b->data, o, b->shape[0], b->nbytes / (size_t)b->shape[0], hp.head_dim, 0);
        b->data = o;
        o += b->nbytes;
    }
    qsort(a->t, (size_t)a->n_t, sizeof *a->t, cmp_target);
    a->alpha = alpha;
    a->rslora = 0;
    a->scale = alpha > 0.0f ? (float)((double)alpha / a->r) : 1.0f;
    a->partial = 1;
    e = SCDB_OK;
done:
    scdb_gguf_close(&bf);
    return e;
}
