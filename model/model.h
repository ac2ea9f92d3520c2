/*
 * model.h — the reference Llama-style transformer scdb measures against.
 *
 * A model is a directory with config.json and model.safetensors (written by
 * tools/train_family.py; names and layout in schema/FORMATS.md), or a
 * Hugging Face Llama checkpoint (config.json with Hugging Face keys, one
 * model.safetensors or shards listed by model.safetensors.index.json,
 * transformers' tensor names; tools/export_hf.py writes one from a family
 * model), or a llama-architecture GGUF file (llama.cpp's; `scdb export-gguf`
 * writes one, scdb_model_export_gguf below).  The architecture: token embedding (a byte vocabulary for the
 * family, any size for Hugging Face checkpoints), n_layers blocks of
 *
 *   h_in = RMSNorm(x) * attention_norm             <- captured as H_in
 *   q = h_in Wq^T, k = h_in Wk^T (K pre-RoPE), v = h_in Wv^T
 *   q, k = RoPE(q, k) at each token's absolute position (K post-RoPE)
 *   x += Wo · attention(q, KV cache)               (causal GQA by position)
 *   x += W2 (silu(W1 RMSNorm(x)) * W3 RMSNorm(x))  (SwiGLU)
 *
 * then a final RMSNorm and the output projection to logits.  Weights are f32
 * in memory (F16/BF16 files are converted at load), mmap'd zero-copy when the
 * file is F32.
 *
 * Forward passes append to a slot-indexed KV cache (kernels.h): prefill is a
 * forward over n tokens, decode a forward over one.  The new tokens take
 * slots [cache->n, cache->n + n); their absolute positions are given, or
 * continue from the last live slot's position + 1.  A capture struct asks for
 * per-layer states of the new tokens: H_in, K before and after RoPE, V,
 * attention probabilities, and the residual stream entering each layer.
 *
 * Thread safety: a loaded model is read-only and may be shared by threads;
 * each forward needs its own cache.
 */
#ifndef SCDB_MODEL_H
#define SCDB_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "scdb_common.h"

#define SCDB_MODEL_NAME_MAX 64

/* Checkpoint layouts a model directory may hold (schema/FORMATS.md). */
typedef enum scdb_model_layout {
    SCDB_LAYOUT_SCDB = 0,   /* config.json with d_model, ...; model.safetensors */
    SCDB_LAYOUT_HF = 1,     /* Hugging Face Llama: config.json with hidden_size,
                             * ...; model.safetensors or index + shards */
    SCDB_LAYOUT_GGUF = 2,   /* one llama-architecture GGUF file (llama.cpp's;
                             * schema/gguf_llama.h) */
} scdb_model_layout;

typedef struct scdb_model_config {
    char name[SCDB_MODEL_NAME_MAX];
    char domain[SCDB_MODEL_NAME_MAX];
    char parent[SCDB_MODEL_NAME_MAX];    /* "" for a model trained from scratch */
    char finetune[SCDB_MODEL_NAME_MAX];  /* "pretrain", "full", "lora-merged" */
    int vocab_size, d_model, n_layers, n_heads, n_kv_heads, head_dim, d_ff;
    int max_seq_len;
    float rope_theta, norm_eps;
    scdb_model_layout layout;            /* which layout config.json was in */
    int tied_embeddings;                 /* HF tie_word_embeddings (GGUF: no
                                          * output.weight): logits use the
                                          * embedding matrix */
} scdb_model_config;

/* Parse config.json text, in either layout: a JSON object with
 * "hidden_size" is a Hugging Face Llama config (keys in schema/FORMATS.md,
 * "Hugging Face Llama checkpoints"), anything else scdb's own.
 * SCDB_EFORMAT (not JSON, not an object, a required field missing or of the
 * wrong type), SCDB_ERANGE (a value out of range or inconsistent: n_heads
 * not a multiple of n_kv_heads, odd head_dim, hidden_size not divisible by
 * the head count, ...), SCDB_EUNSUPPORTED (a Hugging Face feature this
 * model does not implement: another model_type or hidden_act, rope_scaling,
 * attention or MLP biases).  errbuf (may be NULL) names the field. */
scdb_err scdb_model_config_parse(const char *json, size_t len, scdb_model_config *out,
                                 char *errbuf, size_t errlen);
/* Load and parse a config.json file: the above plus SCDB_ENOTFOUND, SCDB_EIO,
 * SCDB_ETOOBIG (over 1 MiB).  A Hugging Face config without a name is named
 * after its directory. */
scdb_err scdb_model_config_load(const char *path, scdb_model_config *out,
                                char *errbuf, size_t errlen);
/* The config of whatever `path` names: a config.json file, a model
 * directory, a GGUF model file, or a LoRA adapter (a PEFT directory, its
 * adapter_config.json, or a GGUF adapter file):
 * for an adapter, its base's config (the base looked up as
 * scdb_model_load_ex does, models_dir may be NULL) named after the adapter
 * directory, parent the base's name, finetune "lora", after checking the
 * adapter's config and factor shapes against the base (the weights are not
 * merged).  Errors: scdb_model_config_load's, scdb_adapter_open's and
 * scdb_adapter_check_base's.  adapter.c. */
scdb_err scdb_model_config_load_any(const char *path, const char *models_dir,
                                    scdb_model_config *out, char *errbuf, size_t errlen);
/* 1 if two configs describe the same architecture (names may differ). */
int scdb_model_config_same_arch(const scdb_model_config *a, const scdb_model_config *b);

typedef struct scdb_layer_weights {
    const float *attn_norm;   /* [d_model] */
    const float *wq;          /* [n_heads*head_dim, d_model] */
    const float *wk;          /* [n_kv_heads*head_dim, d_model] */
    const float *wv;          /* [n_kv_heads*head_dim, d_model] */
    const float *wo;          /* [d_model, n_heads*head_dim] */
    const float *ffn_norm;    /* [d_model] */
    const float *w1, *w3;     /* [d_ff, d_model]  gate, up */
    const float *w2;          /* [d_model, d_ff]  down */
} scdb_layer_weights;

typedef struct scdb_model scdb_model;

/* Load a model directory in either layout (detected from config.json):
 * scdb's own (DIR/config.json + DIR/model.safetensors) or Hugging Face
 * (DIR/config.json + DIR/model.safetensors, or the shards that
 * DIR/model.safetensors.index.json lists); or a llama-architecture GGUF
 * file (llama.cpp's; schema/gguf_llama.h: its errors, SCDB_EDTYPE naming a
 * quantized tensor and its type).  Every tensor's dtype and shape
 * is checked against the config.  Errors of the config loader and the
 * safetensors reader (the message names the file), plus SCDB_ENOTFOUND
 * (missing tensor, weight file or shard), SCDB_ESHAPE (wrong shape),
 * SCDB_EDTYPE (not F32 / F16 / BF16), SCDB_EFORMAT (index not JSON, or
 * without a weight_map of strings), SCDB_ERANGE (an index entry naming a
 * file outside DIR). */
scdb_err scdb_model_load(const char *dir, scdb_model **out, char *errbuf, size_t errlen);

/* A PEFT LoRA adapter directory (adapter_config.json +
 * adapter_model.safetensors, schema/peft_adapter.h) loads as the model it
 * makes of its base: the base's config (name: the adapter directory's,
 * parent: the base's, finetune "lora"), every targeted projection W
 * replaced by W + s B A.  How the adapter is applied:
 *
 *   SCDB_LORA_MERGED   W + s B A computed once at load (peft_adapter.h's
 *                      rule, the weights the fingerprint hashes): a forward
 *                      costs what the base's does; the default.
 *   SCDB_LORA_LOWRANK  the base's W kept and y += s (x A^T) B^T added after
 *                      each targeted projection: the same logits to f32
 *                      rounding, r (in + out) more multiply-adds per token
 *                      and projection, no merged copies (the factors only).
 *                      Host forward only: scdb_model_layer returns NULL (no
 *                      single matrix holds the weights) and
 *                      scdb_model_dev_new refuses it (SCDB_EUNSUPPORTED).
 *
 * models_dir (NULL: none) is where the adapter's base is looked up by name
 * (peft_adapter.h).  A model directory ignores both options. */
typedef enum scdb_lora_apply { SCDB_LORA_MERGED = 0, SCDB_LORA_LOWRANK = 1 } scdb_lora_apply;
typedef struct scdb_model_load_opts {
    const char *models_dir;
    scdb_lora_apply lora;
    const char *base;       /* an adapter's base model (directory or GGUF
                             * file) instead of its own lookup; NULL: the
                             * lookup (schema/peft_adapter.h, gguf_llama.h).
                             * Refused (SCDB_EINVAL) for a plain model. */
} scdb_model_load_opts;

/* scdb_model_load with options (o may be NULL: the defaults).  Errors: those
 * of scdb_model_load (for the base), scdb_adapter_open's and
 * scdb_adapter_check_base's (peft_adapter.h: SCDB_EUNSUPPORTED for each
 * refused feature, SCDB_ESHAPE for factors that do not fit the base,
 * SCDB_ENOTFOUND for a missing factor or base, ...), SCDB_EINVAL (an
 * unknown lora mode). */
scdb_err scdb_model_load_ex(const char *dir, const scdb_model_load_opts *o, scdb_model **out,
                            char *errbuf, size_t errlen);
void scdb_model_free(scdb_model **m);

/* An adapter (a PEFT directory or a GGUF LoRA adapter file) merged over the
 * base model `base` (a directory or a GGUF file) given explicitly: what
 * scdb_model_load_ex does with opts.base = base.  The model is named after
 * the adapter.  Errors: scdb_model_load_ex's; SCDB_EINVAL (NULL base, or
 * `adapter` not an adapter). */
scdb_err scdb_model_load_adapter(const char *base, const char *adapter, scdb_model **out, char *errbuf,
                                 size_t errlen);

/* The weight shape [out, in] of each projection an adapter may target, in
 * scdb_lora_module order (schema/peft_adapter.h): q, k, v, o, gate, up,
 * down. */
void scdb_model_proj_shapes(const scdb_model_config *c, int64_t shape[7][2]);

/* For a model loaded from an adapter: its base's directory (else NULL),
 * and the models_dir it was loaded with (else NULL). */
const char *scdb_model_base_dir(const scdb_model *m);
const char *scdb_model_models_dir(const scdb_model *m);

const scdb_model_config *scdb_model_cfg(const scdb_model *m);
/* The layer's weights; NULL for a layer out of range, and for every layer
 * of an adapter loaded SCDB_LORA_LOWRANK. */
const scdb_layer_weights *scdb_model_layer(const scdb_model *m, int layer);
const char *scdb_model_dir(const scdb_model *m);

/* The family's data folder layout: DATA/models/<name>/ holds each model,
 * DATA/heldout/<domain>.txt each domain's held-out text (never trained on).
 * Writes DATA/heldout/<domain>.txt into buf; returns buf. */
const char *scdb_model_heldout_path(const char *data_dir, const char *domain, char *buf,
                                    size_t len);
static inline int scdb_model_kv_dim(const scdb_model_config *c) { return c->n_kv_heads * c->head_dim; }
static inline int scdb_model_q_dim(const scdb_model_config *c) { return c->n_heads * c->head_dim; }

/* A cache shaped for this model.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_model_cache_new(const scdb_model *m, int capacity, scdb_kv_cache **out);
/* SCDB_ESHAPE unless the cache's layers / heads / head_dim fit the model. */
scdb_err scdb_model_cache_check(const scdb_model *m, const scdb_kv_cache *c);

/* Per-layer states of the n new tokens.  Any pointer may be NULL.
 *   h_in   [n_layers][n][d_model]
 *   k_pre  [n_layers][n][kv_dim]      K before RoPE
 *   k_post [n_layers][n][kv_dim]      K after RoPE (what the cache holds)
 *   v      [n_layers][n][kv_dim]
 *   resid  [n_layers + 1][n][d_model] residual stream entering layer l
 *                                      (index n_layers: after the last)
 *   probs  [n_layers][n_heads][n][probs_slots]  attention weights over the
 *          slots [0, cache->n + n); probs_slots >= that count. */
typedef struct scdb_capture {
    float *h_in, *k_pre, *k_post, *v, *resid, *probs;
    int probs_slots;
} scdb_capture;

/* Forward n tokens, appending them to the cache.
 *   pos     NULL: continue from the last live slot's position + 1 (0 if
 *           empty); else [n] absolute positions.
 *   logits  NULL or [n][vocab_size].
 * SCDB_EINVAL (token outside the vocabulary, negative position, n <= 0),
 * SCDB_EFULL (cache capacity), SCDB_ESHAPE (cache shape), SCDB_ENOMEM.
 * On error the cache is unchanged (n is not advanced). */
scdb_err scdb_model_forward(const scdb_model *m, const int32_t *tokens,
                            const int32_t *pos, int n, scdb_kv_cache *cache,
                            float *logits, scdb_capture *cap);

/* The pieces of a forward pass, for callers that run part of the network
 * (the codec's patch layers, the DroidSpeak-style baseline):
 *   embed:  x[n][d_model] = embedding rows of tokens
 *   layer:  one block on the residual x (in place); writes this layer's K/V
 *           for the n tokens into slots [slot0, slot0 + n) and attends over
 *           slots [0, slot0 + n).  Does not change cache->n.
 *   head:   logits[n][vocab] from the residual x (x is not modified) */
scdb_err scdb_model_embed(const scdb_model *m, const int32_t *tokens, int n, float *x);
scdb_err scdb_model_layer_forward(const scdb_model *m, int layer, float *x,
                                  const int32_t *pos, int n, scdb_kv_cache *cache,
                                  int slot0, scdb_capture *cap, int cap_index);
scdb_err scdb_model_head(const scdb_model *m, const float *x, int n, float *logits);

/* K (post-RoPE) and V of layer `layer` from normalised pre-attention input
 * h_in [n][d_model] at positions pos: what the model itself would cache. */
void scdb_model_kv_from_hin(const scdb_model *m, int layer, const float *h_in,
                            const int32_t *pos, int n, float *k_out, float *v_out);

/* ------------------------------------------------------------ GGUF export
 * The model, or a LoRA adapter, as the GGUF file llama.cpp loads
 * (gguf_export.c; schema/gguf_llama.h the names and the RoPE row
 * permutation; schema/FORMATS.md "GGUF: llama models and LoRA adapters").
 * dt: SCDB_F32 (exact: loading the file back gives the model's weights bit
 * for bit, and so its logits and fingerprint), SCDB_F16 or SCDB_BF16 for the
 * matrices (norms stay F32).  Written atomically (path.tmp, rename).
 *
 * scdb_model_export_gguf: a loaded model (an adapter loaded merged exports
 * as a full model) with the byte vocabulary: tokenizer.ggml.model "rwkv",
 * token i = "\xNN" (i in lowercase hex), so llama_tokenize maps each byte
 * to its own id, no BOS / EOS added.  Errors: SCDB_EINVAL (NULL argument,
 * another dtype), SCDB_EUNSUPPORTED (vocab_size not 256: scdb has no other
 * tokenizer; a model loaded SCDB_LORA_LOWRANK), the writer's (SCDB_EIO,
 * SCDB_ENOTFOUND for a missing directory), SCDB_ENOMEM.
 *
 * scdb_adapter_export_gguf: the adapter at `adapter` (a PEFT directory, its
 * base looked up as scdb_adapter_open does with models_dir, or a GGUF
 * adapter) as a GGUF LoRA adapter: general.type "adapter", adapter.type
 * "lora", adapter.lora.alpha (for rsLoRA the alpha giving its scale),
 * general.base_model.0.name = the base's name (so that BASE.gguf beside it
 * is found), blk.N.PROJ.weight.lora_a ne {in, r} and .lora_b ne {r, out},
 * lora_b of attn_q / attn_k permuted like the base's rows.  Errors:
 * scdb_adapter_open's, scdb_adapter_check_base's, the above. */
scdb_err scdb_model_export_gguf(const scdb_model *m, const char *path, scdb_dtype dt, char *errbuf,
                                size_t errlen);
scdb_err scdb_adapter_export_gguf(const char *adapter, const char *models_dir, const char *path,
                                  scdb_dtype dt, char *errbuf, size_t errlen);

/* A llama model of architecture *c with random weights, as a GGUF file (for
 * measuring cost at sizes that cannot be trained here: `scdb bench llama
 * --shape 1b`).  Every matrix uniform with standard deviation sd, seeded per
 * tensor from seed; norms 1; output.weight untied; dt SCDB_F16 or
 * SCDB_BF16 for the matrices.  vocab: a GGUF whose tokenizer.* keys are
 * copied as read (llama.cpp's vocab-only files, models/ggml-vocab-*.gguf:
 * c->vocab_size becomes its token count), or NULL for the byte vocabulary
 * (as scdb_model_export_gguf writes it; c->vocab_size becomes 256).
 * c->name is general.name.  Written atomically; the whole file is held in
 * memory until then (2 bytes per weight).  Errors: SCDB_EINVAL (NULL, sd not
 * > 0, another dtype), SCDB_ERANGE (not a llama shape), SCDB_ENOTFOUND (a
 * vocabulary file without tokenizer.ggml.tokens), the GGUF reader's and
 * writer's, SCDB_ENOMEM. */
scdb_err scdb_model_write_random_gguf(scdb_model_config *c, const char *vocab, uint64_t seed, float sd,
                                      scdb_dtype dt, const char *path, char *errbuf, size_t errlen);

/* ------------------------------------------------------------ byte tokens */

/* tokens[i] = (unsigned char)text[i]; returns n. */
int scdb_tokenize_bytes(const void *text, size_t n, int32_t *tokens);

/* Bits per byte of text under the model: mean next-byte cross-entropy / ln 2,
 * over consecutive windows of `window` bytes (each window prefilled from an
 * empty cache; the first byte of each window is context only).  Texts longer
 * than max_bytes are cut.  SCDB_EINVAL (text shorter than 2 bytes). */
scdb_err scdb_model_bpb(const scdb_model *m, const unsigned char *text, size_t len,
                        int window, size_t max_bytes, double *bpb_out);

/* ------------------------------------------------------------ on a device
 * A model's weights resident in one device's memory (kernels.h's ops
 * tables), uploaded once, and its forward pass over a cache whose pos, K and
 * V live there (a CUDA IPC arena's cache, or scdb_model_dev_cache_new's):
 * the same ops in the same order as scdb_model_forward, so on the CPU table
 * it is the host forward bit for bit (test_model checks it) and on the CUDA
 * table the CUDA twins' (their tolerance).  Host memory: tokens, pos; the
 * device's memory: the cache's arrays, logits, every capture pointer, and x
 * of layer_forward / head.  The embedding rows are gathered on the host and
 * uploaded (n x d_model floats a forward); with pos NULL the last live
 * slot's position comes down (one int).  Everything else stays on the
 * device; results are complete when a call returns (it synchronises).
 *
 * A scdb_model_dev keeps its scratch: one forward at a time on each (the
 * host model stays shareable).  scdb_model_dev_new borrows m (it must
 * outlive the result).  Errors: those of scdb_model_forward, plus the
 * table's (SCDB_EDEVICE, SCDB_EUNSUPPORTED: no CUDA backend or device). */
typedef struct scdb_model_dev scdb_model_dev;
scdb_err scdb_model_dev_new(const scdb_model *m, scdb_device dev, scdb_model_dev **out);
void scdb_model_dev_free(scdb_model_dev **d);
const scdb_k_ops *scdb_model_dev_ops(const scdb_model_dev *d);
const scdb_model *scdb_model_dev_model(const scdb_model_dev *d);
/* A zeroed cache shaped for the model in the device's memory; free it with
 * scdb_model_dev_cache_free.  SCDB_EINVAL, SCDB_ENOMEM, the table's. */
scdb_err scdb_model_dev_cache_new(const scdb_model_dev *d, int capacity, scdb_kv_cache **out);
void scdb_model_dev_cache_free(const scdb_model_dev *d, scdb_kv_cache **c);
scdb_err scdb_model_dev_forward(scdb_model_dev *d, const int32_t *tokens, const int32_t *pos,
                                int n, scdb_kv_cache *cache, float *logits, scdb_capture *cap);
scdb_err scdb_model_dev_layer_forward(scdb_model_dev *d, int layer, float *x, const int32_t *pos,
                                      int n, scdb_kv_cache *cache, int slot0, scdb_capture *cap,
                                      int cap_index);
scdb_err scdb_model_dev_head(scdb_model_dev *d, const float *x, int n, float *logits);

/* The embedding, final norm and output projection (host, f32) of a loaded
 * model: what scdb_model_dev uploads beside the layers. */
void scdb_model_globals(const scdb_model *m, const float **tok_embeddings, const float **norm,
                        const float **output);

#endif /* SCDB_MODEL_H */
