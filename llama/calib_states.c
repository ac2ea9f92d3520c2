/* calib_states.c — a calibration session's states and tokens from llama.cpp
 * (scdb_llama_calib.h: the design): models loaded from their GGUF files,
 * one context each, attn_norm-N captured through cb_eval, K read back
 * through the sequence's state blob. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_int.h"
#include "scdb_llama_calib.h"

#define LS_MAXM 96

typedef struct ls_base {           /* a GGUF model file loaded once */
    char *path;
    struct llama_model *lm;
} ls_base;

typedef struct ls_model {          /* one model of the session */
    const scdb_model *m;
    int base;                      /* index into s->bases */
    struct llama_adapter_lora *ad; /* NULL: the base model itself */
    struct llama_context *ctx;
    scdb_llama_layout L;
} ls_model;

struct scdb_llama_states {
    int n_ctx, n_threads;
    ls_base bases[LS_MAXM];
    int nb;
    ls_model mods[LS_MAXM];
    int nm;
    int byte_vocab;
    char vocab_desc[96];
    /* capture, valid during one states() call */
    int capturing, n_layer, d;
    size_t n;
    float *h;
    size_t filled[SCDB_CODEC_MAX_LAYERS];
    int bad;
    scdb_kv_cache *kc;             /* K read back, grown as needed */
    char err[LL_ERR_MAX];
};

static const char *vocab_type_name(enum llama_vocab_type t)
{
    switch (t) {
    case LLAMA_VOCAB_TYPE_SPM: return "SentencePiece (SPM)";
    case LLAMA_VOCAB_TYPE_BPE: return "BPE";
    case LLAMA_VOCAB_TYPE_WPM: return "WordPiece";
    case LLAMA_VOCAB_TYPE_UGM: return "Unigram";
    case LLAMA_VOCAB_TYPE_RWKV: return "RWKV (greedy)";
    case LLAMA_VOCAB_TYPE_PLAMO2: return "PLaMo-2";
    default: return "none";
    }
}

static bool calib_cb(struct ggml_tensor *t, bool ask, void *ud)
{
    scdb_llama_states *s = ud;
    int l = s->capturing ? ll_layer_of(t->name, "attn_norm") : -1;
    if (l < 0 || l >= s->n_layer)
        return ask ? false : true;
    if (ask)
        return true;
    if (ll_take_rows(t, s->h + (size_t)l * s->n * (size_t)s->d, s->d, s->n, &s->filled[l]))
        s->bad = 1;
    return true;
}

scdb_err scdb_llama_states_new(int n_ctx, int n_threads, scdb_llama_states **out, char *errbuf,
                               size_t errlen)
{
    if (!out || n_ctx < 1 || n_threads < 0)
        return SCDB_EINVAL;
    *out = NULL;
    scdb_err err = scdb_llama_init(errbuf, errlen);
    if (err)
        return err;
    scdb_llama_states *s = calloc(1, sizeof *s);
    if (!s)
        return SCDB_ENOMEM;
    s->n_ctx = n_ctx;
    s->n_threads = n_threads ? n_threads : 2;
    *out = s;
    return SCDB_OK;
}

void scdb_llama_states_free(scdb_llama_states **ps)
{
    if (!ps || !*ps)
        return;
    scdb_llama_states *s = *ps;
    for (int i = 0; i < s->nm; i++) {
        if (s->mods[i].ctx)
            llama_free(s->mods[i].ctx);
        if (s->mods[i].ad)
            llama_adapter_lora_free(s->mods[i].ad);
    }
    for (int i = 0; i < s->nb; i++) {
        llama_model_free(s->bases[i].lm);
        free(s->bases[i].path);
    }
    scdb_kv_cache_free(&s->kc);
    free(s);
    *ps = NULL;
}

const char *scdb_llama_states_error(const scdb_llama_states *s) { return s ? s->err : ""; }
int scdb_llama_states_byte_vocab(const scdb_llama_states *s) { return s && s->byte_vocab; }
const char *scdb_llama_states_vocab_desc(const scdb_llama_states *s) { return s ? s->vocab_desc : ""; }

/* 1 if every byte tokenizes alone to its own id */
static int bytes_are_tokens(const struct llama_vocab *v)
{
    if (llama_vocab_n_tokens(v) != 256)
        return 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        llama_token t[4];
        if (llama_tokenize(v, &c, 1, t, 4, false, false) != 1 || t[0] != b)
            return 0;
    }
    return 1;
}

/* the model at path, loaded once: its index, or minus the error (said
 * why): SCDB_ERANGE, SCDB_EUNSUPPORTED (not loadable, not llama),
 * SCDB_ENOMEM */
static int base_of(scdb_llama_states *s, const char *path, char *errbuf, size_t errlen)
{
    for (int i = 0; i < s->nb; i++)
        if (!strcmp(s->bases[i].path, path))
            return i;
    if (s->nb == LS_MAXM) {
        ll_msg(errbuf, errlen, "more than %d models", LS_MAXM);
        return -(int)SCDB_ERANGE;
    }
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *lm = llama_model_load_from_file(path, mp);
    if (!lm) {
        ll_msg(errbuf, errlen, "%s: llama.cpp %s cannot load it as a model", path, SCDB_LLAMA_RELEASE);
        return -(int)SCDB_EUNSUPPORTED;
    }
    char arch[64] = "";
    llama_model_meta_val_str(lm, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "llama")) {
        ll_msg(errbuf, errlen, "%s: architecture '%s': calibration reads the llama architecture's "
               "graph (attn_norm-N) only", path, arch);
        llama_model_free(lm);
        return -(int)SCDB_EUNSUPPORTED;
    }
    s->bases[s->nb].path = strdup(path);
    if (!s->bases[s->nb].path) {
        llama_model_free(lm);
        ll_msg(errbuf, errlen, "out of memory");
        return -(int)SCDB_ENOMEM;
    }
    s->bases[s->nb].lm = lm;
    return s->nb++;
}

/* SCDB_OK if vocabulary v is the producer's (w), else why */
static scdb_err same_vocab(const struct llama_vocab *w, const struct llama_vocab *v, const char *what,
                           const char *desc, char *errbuf, size_t errlen)
{
    int nw = llama_vocab_n_tokens(w), nv = llama_vocab_n_tokens(v);
    if (llama_vocab_type(w) != llama_vocab_type(v) || nw != nv) {
        ll_msg(errbuf, errlen, "%s has a %s vocabulary of %d tokens, the producer's is %s: token ids "
               "would not line up", what, vocab_type_name(llama_vocab_type(v)), nv, desc);
        return SCDB_EMISMATCH;
    }
    for (int t = 0; t < nw; t++) {
        const char *a = llama_vocab_get_text(w, t), *b = llama_vocab_get_text(v, t);
        if (strcmp(a ? a : "", b ? b : "")) {
            ll_msg(errbuf, errlen, "%s's vocabulary differs from the producer's at token %d ('%.24s', "
                   "the producer's '%.24s'): token ids would not line up", what, t, b ? b : "",
                   a ? a : "");
            return SCDB_EMISMATCH;
        }
    }
    return SCDB_OK;
}

scdb_err scdb_llama_states_add(scdb_llama_states *s, const scdb_model *m, const char *model_path,
                               const char *adapter_path, char *errbuf, size_t errlen)
{
    if (!s || !m || !model_path)
        return SCDB_EINVAL;
    if (s->nm == LS_MAXM) {
        ll_msg(errbuf, errlen, "more than %d models", LS_MAXM);
        return SCDB_ERANGE;
    }
    const scdb_model_config *mc = scdb_model_cfg(m);
    char what[600];
    snprintf(what, sizeof what, "'%s' (%s)", mc->name, adapter_path ? adapter_path : model_path);
    int b = base_of(s, model_path, errbuf, errlen);
    if (b < 0)
        return (scdb_err)-b;
    ls_model x = {.m = m, .base = b};
    struct llama_model *lm = s->bases[b].lm;
    const struct llama_vocab *v = llama_model_get_vocab(lm);
    scdb_err err;
    if (s->nm == 0) {
        s->byte_vocab = bytes_are_tokens(v);
        snprintf(s->vocab_desc, sizeof s->vocab_desc, "%s, %d tokens%s",
                 vocab_type_name(llama_vocab_type(v)), llama_vocab_n_tokens(v),
                 s->byte_vocab ? ": one per byte" : "");
    } else if ((err = same_vocab(llama_model_get_vocab(s->bases[s->mods[0].base].lm), v, what,
                                 s->vocab_desc, errbuf, errlen))) {
        return err;
    }
    int n_head = llama_model_n_head(lm), n_embd = llama_model_n_embd(lm);
    if (llama_model_n_layer(lm) != mc->n_layers || n_embd != mc->d_model || n_head != mc->n_heads ||
        llama_model_n_head_kv(lm) != mc->n_kv_heads || llama_model_n_embd(lm) / n_head != mc->head_dim ||
        mc->n_layers > SCDB_CODEC_MAX_LAYERS) {
        ll_msg(errbuf, errlen, "%s: llama.cpp reads %d layers, width %d, %d/%d heads; scdb's engine "
               "%d, %d, %d/%d", what, llama_model_n_layer(lm), n_embd, n_head,
               llama_model_n_head_kv(lm), mc->n_layers, mc->d_model, mc->n_heads, mc->n_kv_heads);
        return SCDB_EMISMATCH;
    }
    if (adapter_path && !(x.ad = llama_adapter_lora_init(lm, adapter_path))) {
        ll_msg(errbuf, errlen, "%s: llama.cpp %s cannot load it as a LoRA adapter of %s", adapter_path,
               SCDB_LLAMA_RELEASE, model_path);
        return SCDB_EUNSUPPORTED;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)s->n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = s->n_threads;
    cp.type_k = cp.type_v = GGML_TYPE_F32;         /* K read back exactly */
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.cb_eval = calib_cb;
    cp.cb_eval_user_data = s;
    x.ctx = llama_init_from_model(lm, cp);
    if (!x.ctx) {
        ll_msg(errbuf, errlen, "%s: llama.cpp could not make a context of %d cells", what, s->n_ctx);
        err = SCDB_ENOMEM;
        goto fail;
    }
    if (x.ad) {
        float scale = 1.0f;
        if (llama_set_adapters_lora(x.ctx, &x.ad, 1, &scale) != 0) {
            ll_msg(errbuf, errlen, "%s: llama_set_adapters_lora failed", what);
            err = SCDB_EIO;
            goto fail;
        }
    }
    char m2[LL_ERR_MAX];
    if ((err = scdb_llama_probe(x.ctx, 0, &x.L, m2, sizeof m2))) {
        ll_msg(errbuf, errlen, "%s: %s", what, m2);
        goto fail;
    }
    s->mods[s->nm++] = x;
    return SCDB_OK;
fail:
    if (x.ctx)
        llama_free(x.ctx);
    if (x.ad)
        llama_adapter_lora_free(x.ad);
    return err;
}

static scdb_err tokenize_cb(void *ud, const unsigned char *text, size_t len, int32_t **tok,
                            size_t *n)
{
    scdb_llama_states *s = ud;
    *tok = NULL;
    *n = 0;
    if (s->nm == 0) {
        snprintf(s->err, sizeof s->err, "no model added: no vocabulary to tokenize with");
        return SCDB_EINVAL;
    }
    if (len > (size_t)INT32_MAX / 2) {
        snprintf(s->err, sizeof s->err, "%zu bytes of text: llama_tokenize takes at most %d", len,
                 INT32_MAX / 2);
        return SCDB_ETOOBIG;
    }
    const struct llama_vocab *v = llama_model_get_vocab(s->bases[s->mods[0].base].lm);
    /* a token covers at least a byte (no specials are added; a prefix
     * space may be): len + 8 slots, else as many as llama_tokenize asks */
    size_t cap = len + 8;
    llama_token *t = NULL;
    int32_t got = 0;
    for (int tries = 0; tries < 2; tries++) {
        llama_token *g = realloc(t, cap * sizeof *t);
        if (!g) {
            free(t);
            return SCDB_ENOMEM;
        }
        t = g;
        got = len ? llama_tokenize(v, (const char *)text, (int32_t)len, t, (int32_t)cap, false, false) : 0;
        if (got >= 0)
            break;
        cap = (size_t)-(int64_t)got;
    }
    if (got < 0) {
        free(t);
        snprintf(s->err, sizeof s->err, "llama_tokenize failed on %zu bytes of text", len);
        return SCDB_EIO;
    }
    *tok = t;
    *n = (size_t)got;
    return SCDB_OK;
}

static scdb_err states_cb(void *ud, const scdb_model *m, const int32_t *tok, int n, float *h_in,
                          float *k_post)
{
    scdb_llama_states *s = ud;
    ls_model *x = NULL;
    for (int i = 0; i < s->nm && !x; i++)
        if (s->mods[i].m == m)
            x = &s->mods[i];
    if (!x) {
        snprintf(s->err, sizeof s->err, "model '%s' was not added to the llama.cpp state source",
                 scdb_model_cfg(m)->name);
        return SCDB_ENOTFOUND;
    }
    if (n < 1 || n > s->n_ctx) {
        snprintf(s->err, sizeof s->err, "a window of %d tokens, the contexts hold %d", n, s->n_ctx);
        return SCDB_ETOOBIG;
    }
    const scdb_llama_layout *L = &x->L;
    size_t kv = (size_t)L->n_kv_heads * (size_t)L->head_dim;
    scdb_err err;
    if (!s->kc || s->kc->capacity < n || s->kc->n_layers != L->n_layer ||
        s->kc->n_kv_heads != L->n_kv_heads || s->kc->head_dim != L->head_dim) {
        scdb_kv_cache_free(&s->kc);
        if ((err = scdb_kv_cache_new(L->n_layer, L->n_kv_heads, L->head_dim, s->n_ctx, &s->kc)))
            return err;
    }
    llama_memory_t mem = llama_get_memory(x->ctx);
    llama_memory_clear(mem, true);
    s->n_layer = L->n_layer;
    s->d = scdb_model_cfg(m)->d_model;
    s->n = (size_t)n;
    s->h = h_in;
    s->bad = 0;
    memset(s->filled, 0, sizeof s->filled);
    s->capturing = 1;
    err = scdb_llama_decode(x->ctx, 0, tok, (size_t)n, 0, 0);
    s->capturing = 0;
    if (err) {
        snprintf(s->err, sizeof s->err, "llama_decode of %d tokens failed ('%s')", n,
                 scdb_model_cfg(m)->name);
        goto done;
    }
    for (int l = 0; l < L->n_layer; l++)
        if (s->filled[l] != (size_t)n || s->bad) {
            snprintf(s->err, sizeof s->err, "llama.cpp's graph gave %zu of %d rows of attn_norm-%d%s", s->filled[l],
                     n, l, s->bad ? " (a tensor of another shape)" : "");
            err = SCDB_EINVAL;
            goto done;
        }
    s->kc->n = 0;
    if ((err = scdb_llama_seq_read(x->ctx, L, 0, s->kc, s->err, sizeof s->err)))
        goto done;
    if (s->kc->n != n) {
        snprintf(s->err, sizeof s->err, "the sequence holds %d cells after a window of %d", s->kc->n, n);
        err = SCDB_EIO;
        goto done;
    }
    /* scdb_llama_seq_read puts cell i in slot i: cells are in position
     * order in an emptied context */
    for (int i = 0; i < n; i++)
        if (s->kc->pos[i] != i) {
            snprintf(s->err, sizeof s->err, "cell %d holds position %d", i, s->kc->pos[i]);
            err = SCDB_EIO;
            goto done;
        }
    for (int l = 0; l < L->n_layer; l++)
        memcpy(k_post + (size_t)l * (size_t)n * kv, scdb_kv_k(s->kc, l, 0), (size_t)n * kv * sizeof(float));
done:
    llama_memory_clear(mem, true);
    return err;
}

void scdb_llama_states_engine(scdb_llama_states *s, scdb_calib_engine *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    out->name = "llama.cpp " SCDB_LLAMA_RELEASE;
    out->ud = s;
    out->tokenize = tokenize_cb;
    out->states = states_cb;
}
