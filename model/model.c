/* model.c — loading the reference transformer (scdb's own layout here, the
 * Hugging Face layout in hf_checkpoint.c) and running it over the
 * slot-indexed KV cache.  Layout and semantics in model.h. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_internal.h"
#include "peft_adapter.h"

/* ------------------------------------------------------------ weights */

/* scdb's own layout: DIR/model.safetensors with llama.c-style names */
static scdb_err load_own_weights(scdb_model *m, char *errbuf, size_t errlen)
{
    const scdb_model_config *c = &m->cfg;
    char path[1200], name[128];
    scdb_st_file *st = NULL;
    scdb_err rc;

    snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
    if ((rc = scdb_st_open(path, &st, errbuf, errlen)) || (rc = md_model_add_file(m, &st)))
        return rc;
    st = m->files[0];
    int qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c);
    const char *where = "model.safetensors";
#define BIND(n, d0, d1, p) md_model_bind(m, scdb_st_find(st, n), n, where, d0, d1, p, errbuf, errlen)
    if ((rc = BIND("tok_embeddings.weight", c->vocab_size, c->d_model, &m->tok_embeddings)) ||
        (rc = BIND("norm.weight", c->d_model, 0, &m->norm)) ||
        (rc = BIND("output.weight", c->vocab_size, c->d_model, &m->output)))
        return rc;
    for (int l = 0; l < c->n_layers; l++) {
        scdb_layer_weights *w = &m->layers[l];
        struct { const char *n; int64_t d0, d1; const float **p; } spec[] = {
            {"attention_norm.weight", c->d_model, 0, &w->attn_norm},
            {"attention.wq.weight", qd, c->d_model, &w->wq},
            {"attention.wk.weight", kvd, c->d_model, &w->wk},
            {"attention.wv.weight", kvd, c->d_model, &w->wv},
            {"attention.wo.weight", c->d_model, qd, &w->wo},
            {"ffn_norm.weight", c->d_model, 0, &w->ffn_norm},
            {"feed_forward.w1.weight", c->d_ff, c->d_model, &w->w1},
            {"feed_forward.w2.weight", c->d_model, c->d_ff, &w->w2},
            {"feed_forward.w3.weight", c->d_ff, c->d_model, &w->w3},
        };
        for (size_t i = 0; i < SCDB_ARRAY_LEN(spec); i++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, spec[i].n);
            if ((rc = BIND(name, spec[i].d0, spec[i].d1, spec[i].p))) return rc;
        }
    }
#undef BIND
    return SCDB_OK;
}

static scdb_err load_dir(const char *dir, scdb_model **out, char *errbuf, size_t errlen)
{
    scdb_model *m = NULL;
    char path[1200];
    scdb_err rc;

    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m) return SCDB_ENOMEM;
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    if (scdb_gguf_is_file(dir)) {              /* llama.cpp's GGUF (gguf_checkpoint.c) */
        if ((rc = md_gguf_load(m, errbuf, errlen))) goto fail;
        *out = m;
        return SCDB_OK;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = scdb_model_config_load(path, &m->cfg, errbuf, errlen);
    if (rc) goto fail;
    m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
    if (!m->layers) { rc = SCDB_ENOMEM; goto fail; }
    rc = m->cfg.layout == SCDB_LAYOUT_HF ? md_hf_load_weights(m, errbuf, errlen)
                                         : load_own_weights(m, errbuf, errlen);
    if (rc) goto fail;
    *out = m;
    return SCDB_OK;
fail:
    scdb_model_free(&m);
    return rc;
}

/* An adapter: its base loaded, then the adapter applied (adapter.c). */
static scdb_err load_adapter(const char *dir, const scdb_model_load_opts *o, scdb_model **out,
                             char *errbuf, size_t errlen)
{
    scdb_adapter *a = NULL;
    scdb_model *m = NULL;
    char msg[512] = "";
    scdb_err rc;

    if ((rc = scdb_adapter_open_ex(dir, o->models_dir, o->base, &a, errbuf, errlen))) return rc;
    if ((rc = load_dir(a->base_dir, &m, msg, sizeof msg))) {
        scdb_errf(errbuf, errlen, "%s: base %s: %s", dir, a->base_dir, msg);
        goto done;
    }
    if ((rc = md_adapter_apply(m, a, o->lora, errbuf, errlen))) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", errbuf ? errbuf : "");
        scdb_errf(errbuf, errlen, "%s: %s", dir, tmp);
        goto done;
    }
    snprintf(m->base_dir, sizeof m->base_dir, "%s", a->base_dir);
    snprintf(m->models_dir, sizeof m->models_dir, "%s", o->models_dir ? o->models_dir : "");
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    md_adapter_rename(&m->cfg, dir);
    *out = m;
    m = NULL;
done:
    scdb_model_free(&m);
    scdb_adapter_close(&a);
    return rc;
}

scdb_err scdb_model_load_ex(const char *dir, const scdb_model_load_opts *o, scdb_model **out,
                            char *errbuf, size_t errlen)
{
    static const scdb_model_load_opts dflt = {NULL, SCDB_LORA_MERGED, NULL};
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!dir) return SCDB_EINVAL;
    if (!o) o = &dflt;
    if (o->lora != SCDB_LORA_MERGED && o->lora != SCDB_LORA_LOWRANK) return SCDB_EINVAL;
    if (strlen(dir) >= sizeof ((scdb_model *)0)->dir) {
        scdb_errf(errbuf, errlen, "%s: path too long", dir);
        return SCDB_EINVAL;
    }
    if (scdb_adapter_is(dir)) return load_adapter(dir, o, out, errbuf, errlen);
    if (o->base) {
        scdb_errf(errbuf, errlen, "%s: not an adapter, but a base was given (%s)", dir, o->base);
        return SCDB_EINVAL;
    }
    return load_dir(dir, out, errbuf, errlen);
}

scdb_err scdb_model_load(const char *dir, scdb_model **out, char *errbuf, size_t errlen)
{
    return scdb_model_load_ex(dir, NULL, out, errbuf, errlen);
}

scdb_err scdb_model_load_adapter(const char *base, const char *adapter, scdb_model **out, char *errbuf,
                                 size_t errlen)
{
    scdb_model_load_opts o = {.lora = SCDB_LORA_MERGED, .base = base};
    if (!base) {
        if (out) *out = NULL;
        return SCDB_EINVAL;
    }
    return scdb_model_load_ex(adapter, &o, out, errbuf, errlen);
}

const char *scdb_model_base_dir(const scdb_model *m) { return m->base_dir[0] ? m->base_dir : NULL; }
const char *scdb_model_models_dir(const scdb_model *m) { return m->models_dir[0] ? m->models_dir : NULL; }

void scdb_model_free(scdb_model **pm)
{
    scdb_model *m;
    if (!pm || !*pm) return;
    m = *pm;
    for (int i = 0; i < m->n_converted; i++) free(m->converted[i]);
    free(m->converted);
    free(m->lowrank);
    free(m->layers);
    for (int i = 0; i < m->n_files; i++) scdb_st_close(&m->files[i]);
    free(m->files);
    scdb_gguf_close(&m->gguf);
    free(m);
    *pm = NULL;
}

const scdb_model_config *scdb_model_cfg(const scdb_model *m) { return &m->cfg; }
const char *scdb_model_dir(const scdb_model *m) { return m->dir; }

const scdb_layer_weights *scdb_model_layer(const scdb_model *m, int layer)
{
    if (layer < 0 || layer >= m->cfg.n_layers || m->lowrank) return NULL;
    return &m->layers[layer];
}

scdb_err scdb_model_cache_new(const scdb_model *m, int capacity, scdb_kv_cache **out)
{
    return scdb_kv_cache_new(m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim,
                             capacity, out);
}

scdb_err scdb_model_cache_check(const scdb_model *m, const scdb_kv_cache *c)
{
    if (!c || c->n_layers != m->cfg.n_layers || c->n_kv_heads != m->cfg.n_kv_heads ||
        c->head_dim != m->cfg.head_dim)
        return SCDB_ESHAPE;
    return SCDB_OK;
}

/* ------------------------------------------------------------ forward */

scdb_err scdb_model_embed(const scdb_model *m, const int32_t *tokens, int n, float *x)
{
    int d = m->cfg.d_model;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size) return SCDB_EINVAL;
        memcpy(x + (size_t)i * d, m->tok_embeddings + (size_t)tokens[i] * d,
               (size_t)d * sizeof(float));
    }
    return SCDB_OK;
}

void scdb_model_kv_from_hin(const scdb_model *m, int layer, const float *h_in,
                            const int32_t *pos, int n, float *k_out, float *v_out)
{
    const scdb_model_config *c = &m->cfg;
    const scdb_layer_weights *w = &m->layers[layer];
    int kvd = scdb_model_kv_dim(c);
    scdb_k_linear_cpu(h_in, w->wk, n, c->d_model, kvd, k_out);
    md_lora_add(m, layer, SCDB_LORA_K, h_in, n, c->d_model, kvd, k_out);
    scdb_k_rope_cpu(k_out, n, c->n_kv_heads, c->head_dim, pos, c->rope_theta, 0);
    scdb_k_linear_cpu(h_in, w->wv, n, c->d_model, kvd, v_out);
    md_lora_add(m, layer, SCDB_LORA_V, h_in, n, c->d_model, kvd, v_out);
}

scdb_err scdb_model_layer_forward(const scdb_model *m, int layer, float *x,
                                  const int32_t *pos, int n, scdb_kv_cache *cache,
                                  int slot0, scdb_capture *cap, int cap_index)
{
    const scdb_model_config *c = &m->cfg;
    const scdb_layer_weights *w;
    int d = c->d_model, qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c);
    int n_slots = slot0 + n;
    float *h = NULL, *q = NULL, *kk = NULL, *vv = NULL, *att = NULL, *g = NULL,
          *u = NULL, *probs = NULL;
    scdb_err rc = SCDB_ENOMEM;

    if (layer < 0 || layer >= c->n_layers || n <= 0 || slot0 < 0) return SCDB_EINVAL;
    if (scdb_model_cache_check(m, cache)) return SCDB_ESHAPE;
    if (n_slots > cache->capacity) return SCDB_EFULL;
    w = &m->layers[layer];
    int want_probs = cap && cap->probs;
    if (want_probs && cap->probs_slots < n_slots) return SCDB_EINVAL;

    h = malloc((size_t)n * d * sizeof(float));
    q = malloc((size_t)n * qd * sizeof(float));
    kk = malloc((size_t)n * kvd * sizeof(float));
    vv = malloc((size_t)n * kvd * sizeof(float));
    att = malloc((size_t)n * qd * sizeof(float));
    g = malloc((size_t)n * c->d_ff * sizeof(float));
    u = malloc((size_t)n * c->d_ff * sizeof(float));
    probs = malloc((size_t)c->n_heads * n * n_slots * sizeof(float));
    if (!h || !q || !kk || !vv || !att || !g || !u || !probs) goto done;

    size_t li = (size_t)cap_index;
    if (cap && cap->resid) memcpy(cap->resid + li * n * d, x, (size_t)n * d * sizeof(float));

    /* attention */
    scdb_k_rmsnorm_cpu(x, w->attn_norm, n, d, c->norm_eps, h);
    if (cap && cap->h_in) memcpy(cap->h_in + li * n * d, h, (size_t)n * d * sizeof(float));
    scdb_k_linear_cpu(h, w->wq, n, d, qd, q);
    scdb_k_linear_cpu(h, w->wk, n, d, kvd, kk);
    scdb_k_linear_cpu(h, w->wv, n, d, kvd, vv);
    md_lora_add(m, layer, SCDB_LORA_Q, h, n, d, qd, q);
    md_lora_add(m, layer, SCDB_LORA_K, h, n, d, kvd, kk);
    md_lora_add(m, layer, SCDB_LORA_V, h, n, d, kvd, vv);
    if (cap && cap->k_pre) memcpy(cap->k_pre + li * n * kvd, kk, (size_t)n * kvd * sizeof(float));
    scdb_k_rope_cpu(q, n, c->n_heads, c->head_dim, pos, c->rope_theta, 0);
    scdb_k_rope_cpu(kk, n, c->n_kv_heads, c->head_dim, pos, c->rope_theta, 0);
    if (cap && cap->k_post) memcpy(cap->k_post + li * n * kvd, kk, (size_t)n * kvd * sizeof(float));
    if (cap && cap->v) memcpy(cap->v + li * n * kvd, vv, (size_t)n * kvd * sizeof(float));
    for (int i = 0; i < n; i++) {
        memcpy(scdb_kv_k(cache, layer, slot0 + i), kk + (size_t)i * kvd, (size_t)kvd * sizeof(float));
        memcpy(scdb_kv_v(cache, layer, slot0 + i), vv + (size_t)i * kvd, (size_t)kvd * sizeof(float));
        cache->pos[slot0 + i] = pos[i];
    }
    rc = scdb_k_attention_cpu(q, pos, n, c->n_heads, scdb_kv_k(cache, layer, 0),
                              scdb_kv_v(cache, layer, 0), cache->pos, n_slots,
                              c->n_kv_heads, c->head_dim, att, probs, NULL);
    if (rc) goto done;
    if (want_probs) {
        for (int hh = 0; hh < c->n_heads; hh++)
            for (int i = 0; i < n; i++) {
                float *dst = cap->probs + (((li * c->n_heads + hh) * n + i) * (size_t)cap->probs_slots);
                memcpy(dst, probs + ((size_t)hh * n + i) * n_slots, (size_t)n_slots * sizeof(float));
                memset(dst + n_slots, 0, (size_t)(cap->probs_slots - n_slots) * sizeof(float));
            }
    }
    /* x += att Wo^T */
    scdb_k_gemm_cpu(0, 1, n, d, qd, 1.0f, att, qd, w->wo, qd, 1.0f, x, d);
    md_lora_add(m, layer, SCDB_LORA_O, att, n, qd, d, x);

    /* SwiGLU feed-forward */
    scdb_k_rmsnorm_cpu(x, w->ffn_norm, n, d, c->norm_eps, h);
    scdb_k_linear_cpu(h, w->w1, n, d, c->d_ff, g);
    scdb_k_linear_cpu(h, w->w3, n, d, c->d_ff, u);
    md_lora_add(m, layer, SCDB_LORA_GATE, h, n, d, c->d_ff, g);
    md_lora_add(m, layer, SCDB_LORA_UP, h, n, d, c->d_ff, u);
    scdb_k_swiglu_cpu(g, u, (size_t)n * c->d_ff, g);
    scdb_k_gemm_cpu(0, 1, n, d, c->d_ff, 1.0f, g, c->d_ff, w->w2, c->d_ff, 1.0f, x, d);
    md_lora_add(m, layer, SCDB_LORA_DOWN, g, n, c->d_ff, d, x);
    rc = SCDB_OK;
done:
    free(h); free(q); free(kk); free(vv); free(att); free(g); free(u); free(probs);
    return rc;
}

scdb_err scdb_model_head(const scdb_model *m, const float *x, int n, float *logits)
{
    int d = m->cfg.d_model;
    float *h = malloc((size_t)n * d * sizeof(float));
    if (!h) return SCDB_ENOMEM;
    scdb_k_rmsnorm_cpu(x, m->norm, n, d, m->cfg.norm_eps, h);
    scdb_k_linear_cpu(h, m->output, n, d, m->cfg.vocab_size, logits);
    free(h);
    return SCDB_OK;
}

scdb_err scdb_model_forward(const scdb_model *m, const int32_t *tokens,
                            const int32_t *pos, int n, scdb_kv_cache *cache,
                            float *logits, scdb_capture *cap)
{
    const scdb_model_config *c = &m->cfg;
    int32_t *own_pos = NULL;
    float *x = NULL;
    scdb_err rc;

    if (!tokens || n <= 0 || !cache) return SCDB_EINVAL;
    if ((rc = scdb_model_cache_check(m, cache))) return rc;
    if (cache->n + n > cache->capacity) return SCDB_EFULL;
    if (!pos) {
        own_pos = malloc((size_t)n * sizeof *own_pos);
        if (!own_pos) return SCDB_ENOMEM;
        int32_t p0 = cache->n > 0 ? cache->pos[cache->n - 1] + 1 : 0;
        for (int i = 0; i < n; i++) own_pos[i] = p0 + i;
        pos = own_pos;
    }
    for (int i = 0; i < n; i++)
        if (pos[i] < 0) { rc = SCDB_EINVAL; goto done; }
    x = malloc((size_t)n * c->d_model * sizeof(float));
    if (!x) { rc = SCDB_ENOMEM; goto done; }
    if ((rc = scdb_model_embed(m, tokens, n, x))) goto done;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = scdb_model_layer_forward(m, l, x, pos, n, cache, cache->n, cap, l)))
            goto done;
    if (cap && cap->resid)
        memcpy(cap->resid + (size_t)c->n_layers * n * c->d_model, x,
               (size_t)n * c->d_model * sizeof(float));
    if (logits && (rc = scdb_model_head(m, x, n, logits))) goto done;
    cache->n += n;
done:
    free(x);
    free(own_pos);
    return rc;
}

/* ------------------------------------------------------------ tokens, bpb */

int scdb_tokenize_bytes(const void *text, size_t n, int32_t *tokens)
{
    const unsigned char *s = text;
    for (size_t i = 0; i < n; i++) tokens[i] = s[i];
    return (int)n;
}

/* -log p(target) from one row of logits */
static double nll(const float *row, int vocab, int target)
{
    float mx = row[0];
    double s = 0.0;
    for (int i = 1; i < vocab; i++) if (row[i] > mx) mx = row[i];
    for (int i = 0; i < vocab; i++) s += exp((double)row[i] - mx);
    return log(s) + mx - row[target];
}

scdb_err scdb_model_bpb(const scdb_model *m, const unsigned char *text, size_t len,
                        int window, size_t max_bytes, double *bpb_out)
{
    const scdb_model_config *c = &m->cfg;
    scdb_kv_cache *cache = NULL;
    int32_t *tok = NULL;
    float *logits = NULL;
    double total = 0.0;
    size_t count = 0;
    scdb_err rc;

    if (len > max_bytes) len = max_bytes;
    if (len < 2 || window < 2) return SCDB_EINVAL;
    if (window > c->max_seq_len) window = c->max_seq_len;
    if ((rc = scdb_model_cache_new(m, window, &cache))) return rc;
    tok = malloc((size_t)window * sizeof *tok);
    logits = malloc((size_t)window * c->vocab_size * sizeof *logits);
    if (!tok || !logits) { rc = SCDB_ENOMEM; goto done; }
    for (size_t off = 0; off + 1 < len; off += (size_t)window - 1) {
        int n = (int)((len - off) < (size_t)window ? (len - off) : (size_t)window);
        if (n < 2) break;
        scdb_tokenize_bytes(text + off, (size_t)n, tok);
        cache->n = 0;
        if ((rc = scdb_model_forward(m, tok, NULL, n, cache, logits, NULL))) goto done;
        for (int i = 0; i + 1 < n; i++) {
            total += nll(logits + (size_t)i * c->vocab_size, c->vocab_size, tok[i + 1]);
            count++;
        }
    }
    *bpb_out = total / (double)count / log(2.0);
done:
    free(tok);
    free(logits);
    scdb_kv_cache_free(&cache);
    return rc;
}

void scdb_model_globals(const scdb_model *m, const float **tok_embeddings, const float **norm,
                        const float **output)
{
    if (tok_embeddings) *tok_embeddings = m->tok_embeddings;
    if (norm) *norm = m->norm;
    if (output) *output = m->output;
}
