/* gguf_checkpoint.c — the weights of a llama-architecture GGUF file
 * (llama.cpp's model format), the third checkpoint layout beside scdb's own
 * (model.c) and Hugging Face's (hf_checkpoint.c).  schema/gguf_llama.h is
 * the contract: which llama.* keys make the config, which tensor is which
 * weight, and the RoPE row permutation of attn_q / attn_k that llama.cpp's
 * converter applies and loading undoes, so that the model in memory is
 * scdb's, computes what the directory it was exported from computes, and has
 * its fingerprint.  Tensors are F32 (used in place unless permuted), F16 or
 * BF16 (converted); quantized types are refused by name until
 * scdb_gguf_tensor_to_f32 learns them (schema/gguf.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "model_internal.h"

/* The config of an open llama GGUF model. */
static scdb_err config_of(const scdb_gguf_file *f, const char *path, scdb_model_config *out, char *errbuf,
                          size_t errlen)
{
    scdb_gguf_llama_hparams hp;
    scdb_err rc = scdb_gguf_llama_hparams_read(f, &hp, errbuf, errlen);
    if (rc) return rc;
    scdb_model_config c;
    memset(&c, 0, sizeof c);
    c.layout = SCDB_LAYOUT_GGUF;
    snprintf(c.name, sizeof c.name, "%s", hp.name);
    snprintf(c.domain, sizeof c.domain, "%s", hp.domain);
    snprintf(c.parent, sizeof c.parent, "%s", hp.parent);
    snprintf(c.finetune, sizeof c.finetune, "%s", hp.finetune);
    if (!c.name[0]) {                  /* after the file: "dir/base.gguf" -> "base" */
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
        if (n >= sizeof c.name) n = sizeof c.name - 1;
        memcpy(c.name, b, n);
        c.name[n] = '\0';
    }
    c.vocab_size = hp.vocab_size;
    c.d_model = hp.d_model;
    c.n_layers = hp.n_layers;
    c.n_heads = hp.n_heads;
    c.n_kv_heads = hp.n_kv_heads;
    c.head_dim = hp.head_dim;
    c.d_ff = hp.d_ff;
    c.max_seq_len = hp.ctx_len;
    c.rope_theta = hp.rope_theta;
    c.norm_eps = hp.norm_eps;
    c.tied_embeddings = hp.tied;
    *out = c;
    return SCDB_OK;
}

scdb_err md_gguf_config_load(const char *path, scdb_model_config *out, char *errbuf, size_t errlen)
{
    scdb_gguf_file *f = NULL;
    scdb_err rc = scdb_gguf_open(path, &f, errbuf, errlen);
    if (!rc) rc = config_of(f, path, out, errbuf, errlen);
    scdb_gguf_close(&f);
    return rc;
}

/* One tensor into its weight pointer. */
static scdb_err bind(scdb_model *m, const scdb_gguf_llama_tensor *e, const float **out)
{
    size_t n = (size_t)e->rows * (size_t)(e->cols ? e->cols : 1);
    if (e->t->type == SCDB_GGML_F32 && !e->perm_hd && (uintptr_t)e->t->data % sizeof(float) == 0) {
        *out = e->t->data;             /* little-endian f32 in the mapping, as the safetensors path uses it */
        return SCDB_OK;
    }
    float *f = md_model_owned(m, n);
    if (!f) return SCDB_ENOMEM;
    *out = f;
    return scdb_gguf_llama_read(e, f);
}

scdb_err md_gguf_load(scdb_model *m, char *errbuf, size_t errlen)
{
    scdb_gguf_llama_tensor *v = NULL;
    scdb_gguf_llama_hparams hp;
    int n = 0;
    scdb_err rc;

    if ((rc = scdb_gguf_open(m->dir, &m->gguf, errbuf, errlen)) ||
        (rc = config_of(m->gguf, m->dir, &m->cfg, errbuf, errlen)) ||
        (rc = scdb_gguf_llama_hparams_read(m->gguf, &hp, errbuf, errlen)) ||
        (rc = scdb_gguf_llama_tensors(m->gguf, &hp, &v, &n, errbuf, errlen)))
        goto done;
    m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
    if (!m->layers) { rc = SCDB_ENOMEM; goto done; }
    for (int i = 0; i < n; i++) {
        const scdb_gguf_llama_tensor *e = &v[i];
        const float **slot;
        if (e->layer < 0) {
            slot = !strcmp(e->hf_name, "model.embed_tokens.weight") ? &m->tok_embeddings
                   : !strcmp(e->hf_name, "model.norm.weight")       ? &m->norm
                                                                    : &m->output;
        } else {
            scdb_layer_weights *w = &m->layers[e->layer];
            const float **by_module[7] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w1, &w->w3, &w->w2};
            slot = e->module >= 0 ? by_module[e->module]
                   : strstr(e->hf_name, "input_layernorm") ? &w->attn_norm : &w->ffn_norm;
        }
        if ((rc = bind(m, e, slot))) {
            if (rc != SCDB_ENOMEM)
                scdb_errf(errbuf, errlen, "%s: tensor '%s': %s", m->dir, e->t->name, scdb_strerror(rc));
            goto done;
        }
    }
    if (hp.tied) m->output = m->tok_embeddings;
    rc = SCDB_OK;
done:
    free(v);
    return rc;
}
