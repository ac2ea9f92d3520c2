/*
 * weights_fp.h — the weights fingerprint of a model directory: what a pair
 * records as the consumer it was calibrated for (and a codebook as its
 * producer), and what a consumer sends when it registers, so that a pair is
 * never used to decode for other weights (schema/FORMATS.md, "Weights
 * fingerprint", is the definition any client in any language follows).
 *
 * It is a hash of the weights the model computes with, not of the files
 * that hold them:
 *
 *   model dir --config.json--> layout (scdb's own | Hugging Face), tied head?
 *        |
 *        +--> weight files (model.safetensors, or the index's shards)
 *        |       every tensor the model reads, under its Hugging Face name
 *        |       (own names mapped), other tensors ignored
 *        v
 *   sorted by name: name \0 | u64 ndim | u64 dims... | values as f32 LE
 *        (F16 / BF16 widened exactly: the loader's conversion)
 *        v
 *   XXH3-128, seed 0  ->  32 lowercase hex digits (canonical: high 64 bits
 *                         first, as xxhsum -H2 and XXH128_canonicalFromHash)
 *
 * so scdb's own layout, a one-file and a sharded Hugging Face export of the
 * same f32 weights have one fingerprint; a bf16 export (other values) has
 * another.  Reading is zero-copy (mmap): the cost is one pass over the
 * weights.  Compiled into libscdb (scdb_weights_fingerprint wraps it).
 */
#ifndef SCDB_WEIGHTS_FP_H
#define SCDB_WEIGHTS_FP_H

#include <stddef.h>

#include "scdb_err.h"

#define SCDB_WEIGHTS_FP_HEX 32   /* digits; a buffer holds one more (NUL) */

/* The fingerprint of the model in model_dir (a model directory, or a llama
 * GGUF file: the fingerprint of the same weights in a directory, its
 * attn_q / attn_k rows unpermuted, schema/gguf_llama.h) into hex[33].  Errors:
 * SCDB_ENOTFOUND (no directory, config.json, weight file or shard; a tensor
 * the index maps to a shard that lacks it; no tensor the model reads; a
 * tied checkpoint without its embedding), SCDB_EFORMAT (config.json or the
 * index is not the JSON object it must be; a tensor named twice), SCDB_ERANGE
 * (an index entry pointing outside the directory), SCDB_EDTYPE (a tensor the
 * model reads that is not F32/F16/BF16), the safetensors reader's errors for
 * a weight file (SCDB_ETRUNC, ...), SCDB_EIO, SCDB_ENOMEM.  errbuf (may be
 * NULL) names the file or tensor at fault. */
scdb_err scdb_weights_fp(const char *model_dir, char hex[SCDB_WEIGHTS_FP_HEX + 1], char *errbuf,
                         size_t errlen);

/* The same for a model or a PEFT LoRA adapter directory (peft_adapter.h):
 * an adapter's fingerprint is that of its effective weights, the base's
 * with every targeted projection replaced by W + s B A (in f32, by
 * peft_adapter.h's rule), so it equals the fingerprint of a model
 * directory holding those merged weights as F32.  models_dir (may be NULL)
 * is where the adapter's base is looked up by name.  Errors: the above, and
 * scdb_adapter_open's and scdb_adapter_check_base's. */
scdb_err scdb_weights_fp_ex(const char *model_dir, const char *models_dir,
                            char hex[SCDB_WEIGHTS_FP_HEX + 1], char *errbuf, size_t errlen);

/* The same for an adapter (a PEFT directory or a GGUF LoRA adapter file)
 * over the base model `base` (a directory or a GGUF file) given explicitly
 * instead of the adapter's own lookup: llama.cpp's way of naming the two.
 * Errors: those of scdb_weights_fp_ex; SCDB_EINVAL (NULL argument, or
 * `adapter` not an adapter). */
scdb_err scdb_weights_fp_adapter(const char *base, const char *adapter, char hex[SCDB_WEIGHTS_FP_HEX + 1],
                                 char *errbuf, size_t errlen);

/* 1 if s is a fingerprint as written: exactly 32 lowercase hex digits. */
int scdb_weights_fp_valid(const char *s);

#endif
