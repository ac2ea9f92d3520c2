/*
 * gguf_llama.h — a llama-architecture GGUF file (llama.cpp's model and LoRA
 * adapter files) as scdb's weights: the contract the model loader
 * (model/gguf_checkpoint.c), the exporter (model/gguf_export.c), the
 * weights fingerprint (weights_fp.c) and adapters (peft_adapter.h) share,
 * so that a GGUF model computes with exactly the weights its fingerprint
 * hashes.  schema/FORMATS.md, "GGUF: llama models and LoRA adapters", is
 * the definition.
 *
 * Names.  llama.cpp's tensors map one to one onto the Hugging Face names
 * the fingerprint hashes (and so onto scdb's own):
 *
 *   token_embd.weight          ne {d, vocab}   model.embed_tokens.weight
 *   output_norm.weight         ne {d}          model.norm.weight
 *   output.weight              ne {d, vocab}   lm_head.weight (absent: tied,
 *                                              the logits use token_embd)
 *   blk.N.attn_norm.weight     ne {d}          model.layers.N.input_layernorm.weight
 *   blk.N.attn_q.weight        ne {d, H*hd}    ...self_attn.q_proj.weight  (rows permuted)
 *   blk.N.attn_k.weight        ne {d, Hkv*hd}  ...self_attn.k_proj.weight  (rows permuted)
 *   blk.N.attn_v.weight        ne {d, Hkv*hd}  ...self_attn.v_proj.weight
 *   blk.N.attn_output.weight   ne {H*hd, d}    ...self_attn.o_proj.weight
 *   blk.N.ffn_norm.weight      ne {d}          ...post_attention_layernorm.weight
 *   blk.N.ffn_gate.weight      ne {d, ff}      ...mlp.gate_proj.weight
 *   blk.N.ffn_up.weight        ne {d, ff}      ...mlp.up_proj.weight
 *   blk.N.ffn_down.weight      ne {ff, d}      ...mlp.down_proj.weight
 *
 * (ggml's ne {in, out} is PyTorch's [out, in]: the bytes are the same.)
 *
 * RoPE permutation.  llama.cpp rotates adjacent pairs (2j, 2j+1) of each
 * head; scdb and Hugging Face rotate (j, j + hd/2).  llama.cpp's converter
 * therefore permutes the rows of attn_q and attn_k inside every head of hd
 * rows:
 *
 *   GGUF row h*hd + 2j + p  =  Hugging Face row h*hd + p*hd/2 + j,
 *                              j in [0, hd/2), p in {0, 1}
 *
 * Loading undoes it (the in-memory model is scdb's), exporting applies it;
 * a LoRA adapter's lora_b of attn_q / attn_k is permuted the same way (its
 * rows are the weight's rows).  Values are untouched: a permutation moves
 * rows, so the fingerprint of an F32 GGUF export equals its source's.
 */
#ifndef SCDB_GGUF_LLAMA_H
#define SCDB_GGUF_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "scdb_err.h"

#define SCDB_GGUF_LLAMA_NAME_MAX 64

/* A llama GGUF model's hyperparameters (the llama.* keys). */
typedef struct scdb_gguf_llama_hparams {
    char name[SCDB_GGUF_LLAMA_NAME_MAX];      /* general.name ("" if absent) */
    char domain[SCDB_GGUF_LLAMA_NAME_MAX];    /* scdb.domain, scdb.parent, */
    char parent[SCDB_GGUF_LLAMA_NAME_MAX];    /* scdb.finetune: the family's */
    char finetune[SCDB_GGUF_LLAMA_NAME_MAX];  /* provenance ("" if absent) */
    int n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size, ctx_len;
    float rope_theta, norm_eps;
    int tied;                                 /* no output.weight */
} scdb_gguf_llama_hparams;

/* 1 if the file's general.type is "adapter". */
int scdb_gguf_is_adapter(const scdb_gguf_file *f);
/* 1 if path is a GGUF file whose general.type is "adapter" (opens it). */
int scdb_gguf_is_adapter_file(const char *path);

/* The hyperparameters of a llama GGUF model.  Required keys:
 * general.architecture ("llama"), llama.block_count,
 * llama.embedding_length, llama.feed_forward_length,
 * llama.attention.head_count, llama.context_length,
 * llama.attention.layer_norm_rms_epsilon; optional, with llama.cpp's
 * defaults: llama.attention.head_count_kv (head_count),
 * llama.rope.freq_base (10000), llama.attention.key_length /
 * value_length (embedding_length / head_count), llama.rope.dimension_count
 * (the key length), llama.vocab_size (the token list's length, else
 * token_embd's).  Errors: SCDB_ENOTFOUND (a required key missing),
 * SCDB_EFORMAT (a key of the wrong type; general.type not "model" or
 * absent), SCDB_EUNSUPPORTED (another architecture, named; what the model
 * would compute otherwise: experts, per-layer head or FFN sizes, key length
 * != value length, partial RoPE, RoPE scaling), SCDB_ERANGE (a value out of
 * range or inconsistent, as for config.json).  errbuf names the file and
 * key. */
scdb_err scdb_gguf_llama_hparams_read(const scdb_gguf_file *f, scdb_gguf_llama_hparams *out, char *errbuf,
                                      size_t errlen);

/* 1 if the model file's vocabulary is the byte vocabulary scdb's reference
 * engine tokenizes with: tokenizer.ggml.model "rwkv" with the 256 tokens
 * "\x00" .. "\xff" in order (what scdb export-gguf writes; llama.cpp maps
 * each byte to its id), or no tokenizer at all and llama.vocab_size 256.
 * 0 otherwise, desc (may be NULL) saying what it is ("tokenizer 'gpt2',
 * 50257 tokens"). */
int scdb_gguf_llama_byte_vocab(const scdb_gguf_file *f, char *desc, size_t desclen);

/* One tensor the model reads. */
typedef struct scdb_gguf_llama_tensor {
    const scdb_gguf_tensor *t;
    char hf_name[96];          /* its Hugging Face name (weights_fp.h) */
    int layer;                 /* -1 for the embedding, final norm, output */
    int module;                /* scdb_lora_module of a projection, else -1 */
    int64_t rows, cols;        /* Hugging Face shape [rows, cols]; cols 0: 1-D */
    int perm_hd;               /* attn_q / attn_k: the head size its rows are
                                * permuted in; 0 otherwise */
} scdb_gguf_llama_tensor;

/* The llama.cpp name of projection `module` ("attn_q", ... "ffn_down"). */
const char *scdb_gguf_llama_proj_name(int module);

/* Every tensor the model reads, checked: present, ne matching hp, a type
 * scdb_gguf_tensor_to_f32 converts.  *out (malloc'd, the caller frees it)
 * holds token_embd, output_norm, output unless hp->tied, then each layer's
 * nine, in that order.  Errors: SCDB_ENOTFOUND (a tensor missing),
 * SCDB_ESHAPE (wrong extents), SCDB_EDTYPE (a quantized or other type,
 * tensor and type named), SCDB_EUNSUPPORTED (a tensor that changes what the
 * model computes: a bias, rope_freqs, experts), SCDB_ENOMEM. */
scdb_err scdb_gguf_llama_tensors(const scdb_gguf_file *f, const scdb_gguf_llama_hparams *hp,
                                 scdb_gguf_llama_tensor **out, int *n, char *errbuf, size_t errlen);

/* The tensor's values as f32 in scdb's (Hugging Face's) order: rows x cols
 * (or rows) floats into dst, attn_q / attn_k rows unpermuted.  Errors: those
 * of scdb_gguf_tensor_to_f32. */
scdb_err scdb_gguf_llama_read(const scdb_gguf_llama_tensor *e, float *dst);

/* Move rows of row_bytes bytes between the two orders, head by head of hd
 * rows (rows a multiple of hd, hd even): to_gguf 1 applies llama.cpp's
 * permutation (dst in GGUF order), 0 undoes it.  src and dst must not
 * overlap. */
void scdb_gguf_llama_permute_rows(const void *src, void *dst, int64_t rows, size_t row_bytes, int hd,
                                  int to_gguf);

struct scdb_adapter;

/* Fill *a (zeroed by the caller, a->dir set to the file) from a GGUF LoRA
 * adapter: general.type "adapter", general.architecture "llama",
 * adapter.type "lora", adapter.lora.alpha (f32; absent or 0 means a scale
 * of 1, llama.cpp's rule; else s = alpha / r), tensors
 * "<base weight>.lora_a" ne {in, r} and ".lora_b" ne {r, out} for the
 * seven projections, one rank r.  The base: `base` when not NULL (a GGUF
 * model file), else general.base_model.0.name, NAME, looked up as
 * MODELS_DIR/NAME.gguf then MODELS_DIR/NAME when models_dir is given, else
 * as DIR/NAME.gguf then DIR/NAME with DIR the adapter's folder (an absolute
 * NAME is taken as it is, with or without .gguf).  The base's head size
 * unpermutes lora_b of attn_q / attn_k into a copy the adapter owns.  On
 * error the caller closes *a (scdb_adapter_close).  Errors: SCDB_ENOTFOUND
 * (no base named or found; no factor), SCDB_EFORMAT (not an adapter; a key
 * of the wrong type; a tensor that is not a LoRA factor of a projection; a
 * factor without its twin), SCDB_EUNSUPPORTED (another architecture or
 * adapter type; factors of token_embd, output or a norm; ranks that
 * differ; a base that is a directory or itself an adapter), SCDB_ESHAPE (a
 * factor not 2-D or not of rank r), SCDB_EDTYPE (a factor not F32 / F16 /
 * BF16), SCDB_ERANGE (a negative alpha), the reader's errors, SCDB_ENOMEM. */
scdb_err scdb_gguf_adapter_fill(struct scdb_adapter *a, const char *models_dir, const char *base, char *errbuf,
                                size_t errlen);

#endif /* SCDB_GGUF_LLAMA_H */
