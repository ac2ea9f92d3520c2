/*
 * model_internal.h — what the files of model/ share and nobody else sees.
 *
 * A loaded model is a config plus f32 weight pointers.  The pointers point
 * into one or more mmap'd safetensors files or a mmap'd GGUF file
 * (zero-copy for F32 tensors) or into f32 copies made at load (F16 / BF16
 * tensors, GGUF attn_q / attn_k rows unpermuted).  Three checkpoint
 * layouts fill the same struct:
 *
 *   scdb's own      config.json (d_model, n_layers, ...) + model.safetensors
 *                   with llama.c-style names            (model.c)
 *   Hugging Face    config.json (hidden_size, ...) + model.safetensors, or
 *                   model-0000N-of-0000M.safetensors shards listed by
 *                   model.safetensors.index.json, with transformers' Llama
 *                   names                               (hf_checkpoint.c)
 *   GGUF            one llama.cpp file: llama.* keys and blk.N.* tensors
 *                   (schema/gguf_llama.h)              (gguf_checkpoint.c)
 *
 * config.c parses config.json in both JSON layouts (and hands a GGUF path
 * to gguf_checkpoint.c).  Calls run one way: model.c calls
 * hf_checkpoint.c and gguf_checkpoint.c; they call weights.c, which binds
 * one checked tensor to a weight pointer or owns a converted copy.
 * gguf_export.c writes a loaded model (or an adapter) back as GGUF.
 * schema/FORMATS.md ("Model directory", "Hugging Face Llama checkpoints",
 * "GGUF: llama models and LoRA adapters") is the contract.
 */
#ifndef SCDB_MODEL_INTERNAL_H
#define SCDB_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "safetensors.h"

/* One projection's LoRA factors, f32 (both NULL: not targeted). */
typedef struct md_lora_lowrank {
    const float *a;                /* [r, in]  */
    const float *b;                /* [out, r] */
} md_lora_lowrank;

struct scdb_adapter;
struct scdb_gguf_file;

struct scdb_model {
    scdb_model_config cfg;
    char dir[1024];
    scdb_st_file **files;          /* the open weight files (1 unless sharded) */
    int n_files;
    struct scdb_gguf_file *gguf;   /* or the open GGUF file (gguf_checkpoint.c) */
    const float *tok_embeddings;   /* [vocab, d] */
    const float *norm;             /* [d] */
    const float *output;           /* [vocab, d]; == tok_embeddings when tied */
    scdb_layer_weights *layers;    /* [n_layers] */
    float **converted;             /* f32 copies of non-F32 tensors, and an
                                    * adapter's merged weights or factors */
    int n_converted;
    /* loaded from a LoRA adapter directory (dir): */
    char base_dir[1024];           /* "" for a plain model */
    char models_dir[1024];         /* the base was looked up here ("": none) */
    scdb_lora_apply lora;
    md_lora_lowrank *lowrank;      /* SCDB_LORA_LOWRANK: [n_layers * 7] */
    int lora_r;
    float lora_scale;
};

/* Bind tensor t (may be NULL: missing) to *out as f32 of shape [d0] (d1 == 0)
 * or [d0, d1].  `name` is the tensor's name in the file, `where` the file
 * named in messages.  F32 data is used in place; F16 / BF16 is converted
 * into a copy the model owns.
 * SCDB_ENOTFOUND (t NULL), SCDB_ESHAPE, SCDB_EDTYPE (not F32/F16/BF16),
 * SCDB_ENOMEM. */
scdb_err md_model_bind(scdb_model *m, const scdb_st_tensor *t, const char *name,
                         const char *where, int64_t d0, int64_t d1,
                         const float **out, char *errbuf, size_t errlen);

/* An f32 buffer of n floats the model owns (freed with it); NULL when out
 * of memory. */
float *md_model_owned(scdb_model *m, size_t n);

/* Add an open file to m->files (the model closes it).  On SCDB_ENOMEM the
 * file is closed. */
scdb_err md_model_add_file(scdb_model *m, scdb_st_file **f);

/* Open the Hugging Face weight files of m->dir (m->cfg already parsed) and
 * bind every tensor.  Errors: see scdb_model_load in model.h. */
scdb_err md_hf_load_weights(scdb_model *m, char *errbuf, size_t errlen);

/* A llama GGUF model file (m->dir): open it into m->gguf, fill m->cfg,
 * allocate m->layers and bind every tensor (F32 tensors in place unless
 * attn_q / attn_k, whose rows are unpermuted into a copy; F16 / BF16
 * converted).  Errors: scdb_gguf_open's, scdb_gguf_llama_hparams_read's
 * and scdb_gguf_llama_tensors' (schema/gguf_llama.h), SCDB_ENOMEM.
 * gguf_checkpoint.c. */
scdb_err md_gguf_load(scdb_model *m, char *errbuf, size_t errlen);

/* The config of a GGUF model file (scdb_model_config_load's GGUF case):
 * named by general.name, else after the file (without .gguf). */
scdb_err md_gguf_config_load(const char *path, scdb_model_config *out, char *errbuf, size_t errlen);

/* Apply an open adapter to m (its base, loaded): check it against m->cfg,
 * then merge every target into a copy (SCDB_LORA_MERGED) or keep f32
 * factors in m->lowrank (SCDB_LORA_LOWRANK).  Errors: see
 * scdb_model_load_ex.  adapter.c. */
scdb_err md_adapter_apply(scdb_model *m, const struct scdb_adapter *a, scdb_lora_apply mode,
                          char *errbuf, size_t errlen);

/* The config of a model made from an adapter in dir: named after dir,
 * parent the base's name (c->name before), finetune "lora". */
void md_adapter_rename(scdb_model_config *c, const char *dir);

/* y[n][out] += s (x[n][in] A^T) B^T for projection `module` of `layer` when
 * m is a low-rank adapter that targets it; nothing otherwise. */
void md_lora_add(const scdb_model *m, int layer, int module, const float *x, int n, int in,
                 int out, float *y);

#endif /* SCDB_MODEL_INTERNAL_H */
