/*
 * codec.h — Semantic Cache Distillation (SCD): producer codebooks, per-pair
 * decoders and patch aligners, encode/decode, and offline calibration.
 *
 * One stored prefix, many consumers
 * ---------------------------------
 *
 *   producer (base) prefill                       consumer c (fine-tune)
 *   H_in[l], (K_post[l]) per layer                 slot-indexed KV cache
 *          |                                               ^
 *          | encode: z = (x - mean) E      (codebook)      | decode (pair p->c)
 *          v                                               |
 *   codes f16, per-layer     ---- store (opaque) ----->  REUSE layer l:
 *   sections (depend on the producer                       K = RoPE(z_l Dk + mk)
 *   only: one copy serves every consumer)                  V = z_l Dv + mv
 *                                                          (z_l: layer l's code,
 *                                                           or the whole row z)
 *                                                        PATCH layer l:
 *                                                          h = MLP(z_l) (aligner)
 *                                                          K = RoPE(h Wk_c^T)
 *                                                          V = h Wv_c^T
 *                                                        TOKEN layer 0:
 *                                                          h = RMSNorm(E_c[tok])
 *                                                          K, V as for PATCH
 *
 * Codebook (producer only).  For every layer l it holds up to three linear
 * encoders, each with the mean of its input:
 *   K part  rank r_k[l]   input: producer H_in[l] (d_model), or producer
 *                         K after RoPE (kv_dim) in the post-RoPE ablation
 *   V part  rank r_v[l]   input: producer H_in[l]
 *   H part  rank r_h[l]   input: producer H_in[l]   (patch candidates only)
 * Since K_pre = H_in Wk^T and V = H_in Wv^T, an encoder reading H_in is a
 * strict generalisation of one reading the producer's own K/V (a PCA of the
 * producer's K is the encoder Wk^T U).  A layer may instead be a TOKEN layer
 * (layer 0 only, no code at all): its input H_in[0] = RMSNorm(emb[token]) is
 * a function of the token alone, so every consumer regenerates it exactly.
 * The codebook id is a 128-bit XXH3 hash of every tensor and metadata pair
 * (which include the producer's architecture and weights fingerprint); it is
 * the store's key namespace, so a refitted codebook never aliases old codes.
 *
 * Codes.  The codes of a block of n tokens are IEEE f16, one section per
 * layer (layer order), each section n rows of the layer's width w[l] =
 * r_k[l] + r_v[l] + r_h[l], a row being [z_k | z_v | z_h]:
 *
 *   | layer 0: n x w0 | layer 1: n x w1 | ... |      (TOKEN layers: w = 0)
 *   ^ 0               ^ n*off[1]          off[l] = w[0] + ... + w[l-1]
 *
 * so the store can keep a block as an opaque F16 payload whose per-layer
 * sections start at n * off[l] values (schema/FORMATS.md, "Codebook and
 * pair artifacts"); scdb_codec_slice() cuts a token range out of it.
 *
 * Code dtype (the rate knob).  A loaded codebook writes and reads its codes
 * as f16 (the default) or as int8 with one f16 scale per token per coded
 * layer (scdb_codebook_set_code_dtype):
 *
 *   | scales f16 [S][n] | layer 0: n x w0 int8 | layer 1: n x w1 int8 | ... |
 *   ^ 0                 ^ 2*S*n + n*off[0]     ^ 2*S*n + n*off[1]
 *
 * S = layers with a code (w[l] > 0), in layer order.  Encode: per token and
 * layer, scale = max|z| / 127 rounded up to an f16, q = round(z / scale) in
 * [-127, 127] (a zero row: scale 0).  Decode: z = f16(q * scale), then
 * exactly the f16 codes' decode -- so int8 codes are a quantisation of the
 * f16 codes, the same encoders and pairs serve both, and no refit is
 * needed.  The dtype is not in the codebook file (nor its id) but in the
 * store namespace (scdb_codebook_payload_dtype), so f16 and int8 blocks of
 * one prefix never mix.
 *
 * Pair (producer -> consumer).  For every coded layer, REUSE decoders map the
 * layer's code z_l (all its parts) -- or, in an "all" pair, the token's whole
 * code row z (every layer's code: drift in the consumer's layer l is often
 * better predicted with the producer's other layers) -- to the consumer's K
 * (pre-RoPE, or post-RoPE in the ablation) and V by least squares, plus
 * means; aligners read the same input.  On the
 * patch candidates it was calibrated for, an aligner MLP
 *     h = W2 silu(W1 z_l + b1) + b2 + S z_l        (hidden width in metadata)
 * maps the code to the consumer's own H_in[l], and the consumer's Wk, Wv are
 * stored so K/V are regenerated in the consumer's space with its RoPE.  The
 * pair records its aligners in greedy order (most useful first) and a default
 * patch budget; decode may use any budget from 0 (REUSE everywhere) to all.
 *
 * Calibration (calib_*.c, `scdb calibrate`) reads the family's training
 * files (TRAINING.json) when present, else the FIRST half of each domain's
 * held-out text; its held-back KL windows come from the end of that first
 * half; `scdb bench quality` evaluates on the SECOND half only.
 *
 * Thread safety: codebooks and pairs are immutable after load/creation (a
 * codebook's code dtype is chosen before it is shared) and may be shared by
 * any number of threads; encode/decode keep no state (and take no lock).
 * Loading and freeing pairs may run in any threads: the reference counts
 * of shared parts and their cache are under one mutex.  A
 * calibration session is single-threaded.
 */
#ifndef SCDB_CODEC_H
#define SCDB_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "model.h"
#include "recompute.h"
#include "scdb_common.h"

#define SCDB_CODEC_VERSION 1
#define SCDB_CODEC_MAX_LAYERS 256

/* ------------------------------------------------------------ ids */

typedef struct scdb_codec_id { uint8_t b[16]; } scdb_codec_id;

/* 32 lowercase hex digits + NUL into hex[33]. */
void scdb_codec_id_hex(const scdb_codec_id *id, char hex[33]);
/* Parse 32 hex digits.  SCDB_EFORMAT. */
scdb_err scdb_codec_id_parse(const char *hex, scdb_codec_id *out);

/* Architecture fingerprint of a config (the fields of
 * scdb_model_config_same_arch), as 16 hex digits + NUL.  Weights
 * fingerprints (of a model's tensors, either checkpoint layout) are
 * schema/weights_fp.h's: 32 hex digits; files written before that
 * definition record 16 (XXH3-64 of DIR/model.safetensors), checked as such
 * (schema/FORMATS.md, "Weights fingerprint").  A buffer for either:
 * SCDB_CODEC_FP_LEN bytes. */
#define SCDB_CODEC_FP_LEN 33
void scdb_codec_arch_fp(const scdb_model_config *c, char hex[17]);

/* ------------------------------------------------------------ codebooks */

typedef enum scdb_cb_layer_kind {
    SCDB_CB_CODED = 0,    /* K/V (and maybe H) codes */
    SCDB_CB_TOKENS = 1,   /* no code: consumers regenerate from tokens (layer 0) */
} scdb_cb_layer_kind;

typedef struct scdb_cb_layer {
    scdb_cb_layer_kind kind;
    int r_k, r_v, r_h;    /* widths of the code parts (0 = part absent) */
    int offset;           /* first column of this layer in a code row */
    int width;            /* r_k + r_v + r_h */
} scdb_cb_layer;

typedef struct scdb_codebook_info {
    scdb_codec_id id;
    char id_hex[33];
    char producer[SCDB_MODEL_NAME_MAX];
    char producer_fp[SCDB_CODEC_FP_LEN]; /* weights fingerprint */
    /* A re-stamped codebook (scdb_codebook_restamp): the 16-digit producer
     * fingerprint its id was computed over, which the id keeps hashing in
     * producer_fp's place (FORMATS.md, "Codebook"); "" otherwise. */
    char id_producer_fp[SCDB_CODEC_FP_LEN];
    char arch_fp[17];
    scdb_model_config arch;       /* producer config (name, dims, RoPE) */
    int n_layers, d_model, kv_dim;
    int code_dim;                 /* f16 values per token */
    int k_post_rope;              /* 1: K parts code post-RoPE K (ablation) */
    char method[16];              /* "rrr" or "pca" */
    int n_candidates;             /* layers with an H part */
    int candidates[SCDB_CODEC_MAX_LAYERS];
    scdb_cb_layer layers[SCDB_CODEC_MAX_LAYERS];
    int n_scaled;                 /* layers with a code (width > 0): the f16
                                     scales per token of int8 codes */
    int code_dtype;               /* scdb_code_dtype of encode / decode */
} scdb_codebook_info;

typedef struct scdb_codebook scdb_codebook;

/* Load and validate a codebook file.  Errors: those of scdb_st_open
 * (SCDB_ENOTFOUND, SCDB_ETRUNC, SCDB_EFORMAT, ...), SCDB_EFORMAT (not a
 * codebook, bad or missing metadata, unknown version), SCDB_ESHAPE /
 * SCDB_EDTYPE / SCDB_ENOTFOUND (a tensor of the wrong shape / dtype /
 * missing), SCDB_ECHECKSUM (contents do not hash to the stored id: corrupt
 * or edited), SCDB_ENOMEM.  errbuf (may be NULL) says what is wrong. */
scdb_err scdb_codebook_load(const char *path, scdb_codebook **out,
                            char *errbuf, size_t errlen);
/* Write atomically (safetensors writer).  SCDB_EINVAL, SCDB_EIO,
 * SCDB_ENOTFOUND (no such directory), SCDB_ENOMEM. */
scdb_err scdb_codebook_save(const scdb_codebook *cb, const char *path);
void scdb_codebook_free(scdb_codebook **cb);
const scdb_codebook_info *scdb_codebook_get_info(const scdb_codebook *cb);
/* Payload of one token's codes in bytes: 2 * code_dim (f16 codes) or
 * code_dim + 2 * n_scaled (int8 codes). */
size_t scdb_codebook_token_bytes(const scdb_codebook *cb);

/* Code dtypes: how codes are stored and sent (the codec.h design comment,
 * "Code dtype"). */
typedef enum scdb_code_dtype {
    SCDB_CODES_F16 = 0,           /* IEEE f16 codes (the default)            */
    SCDB_CODES_INT8 = 1,          /* int8 codes + an f16 scale per token and
                                     coded layer                            */
} scdb_code_dtype;
/* The store payload dtype (namespace and block values) of int8 codes:
 * codec-defined, above every scdb_dtype.  f16 codes are SCDB_F16. */
#define SCDB_PAYLOAD_CODES_INT8 0x100u
/* Largest int8 scale: 128 * scale stays within f16 (65504). */
#define SCDB_CODES_INT8_SCALE_MAX 511.75f
/* "f16" / "int8"; NULL for an unknown dtype. */
const char *scdb_code_dtype_name(scdb_code_dtype dt);
/* Parse "f16" or "int8".  SCDB_EINVAL. */
scdb_err scdb_code_dtype_parse(const char *s, scdb_code_dtype *out);
/* Choose the code dtype of a loaded codebook (default SCDB_CODES_F16): what
 * scdb_codec_encode writes and every decode reads.  Not saved in the file
 * and not part of the id.  Set it before the codebook is shared between
 * threads (or pairs decode with it).  SCDB_EINVAL (NULL, unknown dtype). */
scdb_err scdb_codebook_set_code_dtype(scdb_codebook *cb, scdb_code_dtype dt);
/* The store payload dtype of the codebook's blocks with its code dtype:
 * SCDB_F16 or SCDB_PAYLOAD_CODES_INT8; the broker's namespace is
 * scdb_ns_make(id, this, SCDB_CODEC_VERSION). */
uint32_t scdb_codebook_payload_dtype(const scdb_codebook *cb);
/* Check that a loaded producer model is the one the codebook was fitted
 * for.  SCDB_EMISMATCH (other architecture or other weights). */
/* Rewrite the codebook at path, whose producer_fp is a 16-digit file hash
 * (written before the tensor fingerprint), with the tensor fingerprint of
 * producer, to out, keeping its id (so its namespace and every stored block)
 * and its codes: the old value goes to id_producer_fp.  Only after checking
 * that producer's weights are those the 16 digits name.  Errors: those of
 * scdb_codebook_load and scdb_codebook_check_producer, SCDB_EINVAL (it
 * records a tensor fingerprint already), scdb_codebook_save's. */
scdb_err scdb_codebook_restamp(const char *path, const scdb_model *producer, const char *out,
                               char *errbuf, size_t errlen);
scdb_err scdb_codebook_check_producer(const scdb_codebook *cb, const scdb_model *producer,
                                      char *errbuf, size_t errlen);

/* Producer states of n tokens, as model.h's capture lays them out:
 *   h_in    [n_layers][n][d_model]   required
 *   k_post  [n_layers][n][kv_dim]    required only if k_post_rope */
typedef struct scdb_codec_states {
    const float *h_in;
    const float *k_post;
} scdb_codec_states;

/* Code values of n tokens (n * code_dim: the f16 codes' length in
 * uint16_t), and where layer l's section starts (n * offset[l] values). */
static inline size_t scdb_codec_codes_len(const scdb_codebook_info *in, int n)
{ return (size_t)n * (size_t)in->code_dim; }
static inline size_t scdb_codec_section(const scdb_codebook_info *in, int n, int layer)
{ return (size_t)n * (size_t)in->layers[layer].offset; }
/* Payload bytes of n tokens' codes in the codebook's code dtype
 * (n * scdb_codebook_token_bytes). */
size_t scdb_codec_payload_bytes(const scdb_codebook *cb, int n);
/* Copy tokens [t0, t1) of a block of n tokens' codes into out (the codes of
 * a block of t1 - t0 tokens, same dtype).  SCDB_EINVAL (range outside
 * [0, n]). */
scdb_err scdb_codec_slice(const scdb_codebook *cb, const void *codes, int n, int t0, int t1,
                          void *out);
/* The f16 codes that tokens [t0, t0 + n) of a block of block_n tokens'
 * codes decode as, into out (n * code_dim values, the f16 layout of a block
 * of n tokens): a copy for f16 codes, f16(q * scale) for int8 codes.
 * SCDB_EINVAL (NULL, range), SCDB_ERANGE (int8: a scale of the range is
 * NaN, infinite, negative or above SCDB_CODES_INT8_SCALE_MAX). */
scdb_err scdb_codec_dequantize(const scdb_codebook *cb, const void *codes, int block_n, int t0,
                               int n, uint16_t *out);
/* Check a payload of n tokens' codes as the store would keep it: its size
 * (SCDB_ESHAPE: not scdb_codec_payload_bytes(cb, n)), and its values
 * (SCDB_ERANGE: an f16 code NaN or infinite; an int8 scale as above).
 * errbuf (may be NULL) names the token and layer. */
scdb_err scdb_codec_check_payload(const scdb_codebook *cb, const void *codes, size_t bytes, int n,
                                  char *errbuf, size_t errlen);

/* Encode n tokens into codes (layout above, in the codebook's code dtype;
 * scdb_codec_payload_bytes(cb, n) bytes; f16 as bit patterns).
 * SCDB_EINVAL (NULL, n <= 0, missing k_post), SCDB_ERANGE (int8: a code
 * row not finite, or too large for a scale <= SCDB_CODES_INT8_SCALE_MAX,
 * i.e. max|z| above about 65000), SCDB_ENOMEM. */
scdb_err scdb_codec_encode(const scdb_codebook *cb, const scdb_codec_states *st, int n,
                           void *codes);
/* Convenience: run the producer over tokens (positions pos or 0..n-1 when
 * NULL, from an empty context) and encode.  SCDB_EMISMATCH (model is not
 * the codebook's producer architecture), model errors, SCDB_ENOMEM. */
scdb_err scdb_codec_encode_tokens(const scdb_codebook *cb, const scdb_model *producer,
                                  const int32_t *tokens, const int32_t *pos, int n,
                                  void *codes);

/* ------------------------------------------------------------ pairs */

typedef struct scdb_pair_info {
    scdb_codec_id codebook_id;
    char codebook_hex[33];
    char producer[SCDB_MODEL_NAME_MAX], consumer[SCDB_MODEL_NAME_MAX];
    char producer_fp[SCDB_CODEC_FP_LEN], consumer_fp[SCDB_CODEC_FP_LEN]; /* weights fingerprints */
    char arch_fp[17];
    int n_layers, d_model, kv_dim, n_kv_heads, head_dim, vocab_size;
    float rope_theta, norm_eps;
    int hidden;                              /* aligner hidden width */
    int n_aligners;                          /* patch-capable layers ... */
    int patch_order[SCDB_CODEC_MAX_LAYERS];  /* ... in greedy order */
    int n_patch;                             /* default budget (<= n_aligners) */
    int has_tokens;                          /* token layer data present */
    int all_input;                           /* decoders read every layer's code */
    int token_input;                         /* 1: REUSE decoders also read h0, the
                                                consumer's layer-0 H_in of the token
                                                (RMSNorm(E[tok]) * attn_norm, as the
                                                token layer computes it): needs
                                                has_tokens (schema/FORMATS.md, "Pair") */
    int token_corr;                          /* lora, token_input: 1 when the decoder
                                                corrections span h0 too */
    int late_added;                          /* 1: fitted against a frozen codebook
                                                (one loaded, not fitted with it:
                                                scdb calibrate --codebook) */
    /* Pair kinds (codec.h, "Adapter pairs"); a version-1 file is full. */
    int kind;                                /* scdb_pair_kind */
    char base[SCDB_MODEL_NAME_MAX];          /* lora: the adapter's base model */
    char base_fp[SCDB_CODEC_FP_LEN];         /* lora, shared: the base's weights */
    char shared[SCDB_MODEL_NAME_MAX + 16];   /* lora: the shared part's file stem
                                                (beside the pair) ... */
    char shared_id[33];                      /* ... and its checksum */
    char checksum[33];                       /* the file's (after load / save) */
    int dec_rank, align_rank, lora_rank;     /* lora: correction / delta ranks */
    char lora_targets[8];                    /* lora: "k,v", "k", "v" or "" */
    /* Fidelity on demand (issue 40): the recompute setting calibration
     * chose (never DEFAULT; NONE both when none was stored and when
     * calibration chose none) and the figures it measured on held-back
     * windows ("" none): metadata `recompute`, `recompute_figures`
     * (schema/FORMATS.md "Pair"; written when either is set). */
    scdb_recompute recompute;
    char recompute_figures[256];
} scdb_pair_info;

/* Adapter pairs.  A fleet of LoRA adapters of one base shares one SHARED
 * part (<producer>__fleet.safetensors): REUSE decoders and patch aligners
 * fitted once on the mean of the fleet's states, and the base's own
 * tensors a decode regenerates with (Wk/Wv of the patch candidates, the
 * token layer's embedding, norm, Wk, Wv).  An adapter's LORA pair holds only
 * what is its own and refers to the rest:
 *   the shared part, by file stem (beside the pair) and checksum;
 *   the base, by weights fingerprint (it must be the codebook's producer,
 *     the base registered with the broker);
 *   per coded layer its own means and rank-dec_rank corrections of the
 *     shared decoders: dec_k = dec_k(shared) + u v;
 *   per patch layer a rank-align_rank linear correction of the shared
 *     aligner (skip += u v, b2 += db2) and its Wk/Wv delta on top of the
 *     base's (the adapter's s B A for k_proj / v_proj, refactored as U U^T
 *     dW; none where it does not target them), the token layer's likewise.
 * In memory a lora pair stays low-rank: it holds its own parts (in f32)
 * and a counted reference to its shared part, which is loaded once per
 * process for every lora pair referencing it (a cache keyed by codebook id
 * and checksum; a file with other contents is another entry) and freed with
 * the last of them.  Decode (host and device) applies the corrections as
 * products with the shared tensors, K = RoPE(mean + z Dk^T + (z v^T) u^T)
 * and likewise for V, the aligner (its b2 + db2, then + (z v^T) u^T) and
 * Wk/Wv (h Wk^T + (h A^T) B^T), which equals the decode of the effective
 * pair (every correction added into the shared tensors, in f32) to f32
 * rounding.  A broker's RSS grows by the own parts per added adapter
 * (about 2x its file), not by a whole pair.  schema/FORMATS.md, "Pair". */
typedef enum scdb_pair_kind {
    SCDB_PAIR_FULL = 0,      /* everything its own (format version 1)   */
    SCDB_PAIR_SHARED = 1,    /* a fleet's shared part (version 2)       */
    SCDB_PAIR_LORA = 2,      /* an adapter's own parts + references (2) */
} scdb_pair_kind;
/* "full" / "shared" / "lora"; NULL for another value. */
const char *scdb_pair_kind_name(int kind);
/* File stem of a producer's shared fleet part: "<producer>__fleet". */
#define SCDB_PAIR_SHARED_STEM "fleet"

typedef struct scdb_pair scdb_pair;

/* Load a pair file and validate it against its codebook: the codebook id
 * must match (SCDB_EMISMATCH), every tensor's shape must follow from the
 * codebook and the recorded architecture (SCDB_ESHAPE, SCDB_EDTYPE,
 * SCDB_ENOTFOUND for a missing one), patch layers must be codebook
 * candidates (SCDB_EFORMAT), and the contents must match the stored checksum
 * (SCDB_ECHECKSUM).  Plus the errors of scdb_st_open (SCDB_ETRUNC,
 * SCDB_EFORMAT, ...).  The pair keeps no reference to cb. */
scdb_err scdb_pair_load(const char *path, const scdb_codebook *cb, scdb_pair **out,
                        char *errbuf, size_t errlen);
/* A version-2 pair's kind and references: a lora pair (kind "lora") is
 * refused with SCDB_EMISMATCH when the base it references (base_fp) is not
 * the codebook's producer -- the base registered with the broker -- or when
 * its shared part has another checksum or base than recorded, and with
 * SCDB_ENOTFOUND when the shared part is missing (each message names both
 * fingerprints / checksums, or the missing file); the shared part itself is
 * checked as any pair is.  A shared part (kind "shared") is refused
 * (SCDB_EFORMAT): it is loaded through its adapters' pairs, or with
 * scdb_pair_load_shared (which refuses every other kind). */
scdb_err scdb_pair_load_shared(const char *path, const scdb_codebook *cb, scdb_pair **out,
                               char *errbuf, size_t errlen);
scdb_err scdb_pair_save(const scdb_pair *p, const char *path);
/* Set the pair's stored recompute default and the figures that chose it
 * (figures may be NULL: ""), for scdb_pair_save; the checksum changes with
 * them.  none with no figures removes both keys.  SCDB_EINVAL: a setting scdb_recompute_check refuses, policy
 * DEFAULT, figures of 256 bytes or more or with a control character. */
scdb_err scdb_pair_set_recompute(scdb_pair *p, const scdb_recompute *r, const char *figures);
/* Drop the caller's pair (a shared part passed to scdb_calib_fit_lora_pair
 * lives on while a lora pair fitted with it does). */
void scdb_pair_free(scdb_pair **p);
const scdb_pair_info *scdb_pair_get_info(const scdb_pair *p);
/* Validate against loaded models (either may be NULL to skip): same
 * architecture as recorded and same weights fingerprint, else
 * SCDB_EMISMATCH (the message names both fingerprints); plus the errors of
 * fingerprinting a model's files (schema/weights_fp.h). */
scdb_err scdb_pair_check_models(const scdb_pair *p, const scdb_model *producer,
                                const scdb_model *consumer, char *errbuf, size_t errlen);
/* Rewrite the pair at path, whose consumer_fp is a 16-digit file hash
 * (written before the tensor fingerprint), with the tensor fingerprint of
 * consumer, to out: only after checking that consumer's weights are those
 * the 16 digits name; and a producer_fp that is cb's id_producer_fp (the
 * pair predates cb's re-stamp) with cb's producer_fp.  Decoders and
 * aligners are written back unchanged.  Errors: those of scdb_pair_load and
 * scdb_pair_check_models, SCDB_EINVAL (the pair records tensor
 * fingerprints already), SCDB_EMISMATCH (a pair for another consumer, or
 * other weights), scdb_pair_save's. */
scdb_err scdb_pair_restamp(const char *path, const scdb_codebook *cb, const scdb_model *consumer,
                           const char *out, char *errbuf, size_t errlen);

/* Decode the codes of a block of n tokens (layout above) into the consumer's cache at
 * slots [slot0, slot0 + n) with absolute positions pos[0..n): K after RoPE
 * and V for every layer, exactly where scdb_model_forward reads them; then
 * cache->n = max(cache->n, slot0 + n).
 *   n_patch   -1: the pair's default budget; 0: REUSE only; k: the first k
 *             aligners in greedy order (clamped to n_aligners)
 *   tokens    [n] token ids; required iff the codebook has a TOKEN layer
 * codes are in cb's code dtype (int8 codes decode as scdb_codec_dequantize's
 * f16 codes).
 * SCDB_EINVAL (NULL, n <= 0, slot range outside the cache, missing tokens,
 * token outside the vocabulary), SCDB_ESHAPE (cache geometry),
 * SCDB_EMISMATCH (codebook is not the pair's), SCDB_ERANGE (int8 codes: a
 * bad scale; nothing is written), SCDB_ENOMEM. */
scdb_err scdb_pair_decode(const scdb_pair *p, const scdb_codebook *cb, const void *codes,
                          int n, const int32_t *pos, const int32_t *tokens, int n_patch,
                          scdb_kv_cache *cache, int slot0);

/* The same for tokens [t0, t0 + n) of a block of block_n tokens' codes (as
 * the store keeps them), without slicing first; pos and tokens describe the
 * n decoded tokens.  SCDB_EINVAL also for a range outside [0, block_n). */
scdb_err scdb_pair_decode_range(const scdb_pair *p, const scdb_codebook *cb, const void *codes,
                                int block_n, int t0, int n, const int32_t *pos,
                                const int32_t *tokens, int n_patch, scdb_kv_cache *cache, int slot0);

/* ------------------------------------------------------------ synthetic artifacts
 * A codebook and a full pair of the shapes `scdb calibrate` writes, with
 * random contents: for measuring cost at model sizes no calibration can
 * reach here (`scdb bench llama --shape 1b`).  They load, encode and decode
 * like calibrated files (same writer, id, checksum) and mean nothing:
 * quality measured with them is meaningless, and their notes say so.
 *
 *   codebook  layer 0 a TOKEN layer; n_candidates layers carry an H part
 *             of width r_h only (spread evenly over 1..L-1, the last layer
 *             among them), every other layer K and V parts of r_k, r_v;
 *             encoders of standard deviation 1/sqrt(d) (codes of size
 *             about 1 from RMS-normalised inputs);
 *   pair      producer -> consumer, decoders of every coded layer (input:
 *             every layer's code when all_layers, else the layer's own),
 *             token-input decoders when token_input (needs all_layers),
 *             an aligner of width `hidden` on every candidate, patch
 *             budget n_patch; the token layer's embedding, layer-0 norm and
 *             the Wk / Wv of layer 0 and the candidates are the consumer's
 *             own when given (scdb's row order, f32), else random.
 *
 * Deterministic in seed.  Errors: SCDB_EINVAL (NULL, a fingerprint that is
 * not one, token input without all_layers), SCDB_ERANGE (a shape out of
 * range: ranks 1..d, candidates 0..L-1, budget 0..candidates), SCDB_ENOMEM;
 * errbuf says which. */
typedef struct scdb_codec_synth {
    scdb_model_config arch;          /* the producer's = the consumer's       */
    const char *producer, *consumer; /* names                                 */
    const char *producer_fp, *consumer_fp; /* weights fingerprints            */
    int r_k, r_v, r_h;               /* code widths                           */
    int n_candidates, n_patch, hidden;
    int all_layers, token_input;
    uint64_t seed;                   /* 0: a fixed default                    */
    const float *emb;                /* [vocab][d] or NULL                    */
    const float *norm0;              /* [d] or NULL (ones)                    */
    const float *const *wk, *const *wv; /* [n_layers] of [kv][d], or NULL    */
} scdb_codec_synth;
scdb_err scdb_codec_synthesize(const scdb_codec_synth *s, scdb_codebook **cb, scdb_pair **pair,
                               char *errbuf, size_t errlen);

/* ------------------------------------------------------------ device decode
 * A pair's decode weights resident in one device's memory (kernels.h's ops
 * tables), uploaded once, and a decode that writes a cache whose pos, K and
 * V live in that device's memory (a CUDA IPC arena) with no host copy of the
 * KV: the block's f16 codes (int8 codes dequantised to them on the host,
 * as the CPU decode does; and, for a TOKEN layer, RMSNorm(E[tok]) rows,
 * computed on the host as the CPU decode does) go up, the REUSE layers run
 * lowrank_decode, the PATCH layers aligner + kv_regen, all on the device.
 * Per device:
 *   REUSE   dk, dv as f16 [kv][in] (exact: pairs store them as f16), mk, mv;
 *           token_input: the h0 decoders gk, gv [kv][d] as f32 (f16 values),
 *           K = RoPE(z dk^T + mk + h0 gk^T) by lowrank_decode (no RoPE),
 *           gemm (beta 1) and rope, h0 the TOKEN layer's rows (a lora
 *           pair: its shared part's gk, gv and, with token_corr, its own
 *           (h0 v_tok^T) u^T after its z correction, as on the CPU)
 *   PATCH   the aligner (w1, b1, w2, b2, skip) and the consumer's Wk, Wv
 *   TOKEN   Wk, Wv of layer 0 (E and the norm weight stay on the host)
 * A lora pair uploads its shared part's tensors (each device copy is its
 * own: device memory is not shared between adapters) and its own parts,
 * and runs the host decode's low-rank products with the table's gemm and
 * rope after lowrank_decode (without RoPE), the aligner and linear.
 * With the CPU table this is the CPU decode, bit for bit (test_codec checks
 * it); with the CUDA table it is the CUDA twins' (their tolerance).
 *
 * scdb_pair_dev_new: p is borrowed and must outlive the result.
 * SCDB_EINVAL (NULL, unknown device), SCDB_ENOMEM, the table's errors
 * (SCDB_EDEVICE, SCDB_EUNSUPPORTED: no CUDA backend).
 * scdb_pair_dev_decode_range: as scdb_pair_decode_range (codes, pos and
 * tokens in host memory; cache->pos / k / v in the device's memory; cache->n
 * is updated on the host struct), plus the table's errors.  Synchronous: the
 * KV is in place when it returns.  Thread-safe (no state is written). */
typedef struct scdb_pair_dev scdb_pair_dev;
scdb_err scdb_pair_dev_new(const scdb_pair *p, scdb_device dev, scdb_pair_dev **out);
void scdb_pair_dev_free(scdb_pair_dev **d);
scdb_err scdb_pair_dev_decode_range(const scdb_pair_dev *d, const scdb_codebook *cb,
                                    const void *codes, int block_n, int t0, int n,
                                    const int32_t *pos, const int32_t *tokens, int n_patch,
                                    scdb_kv_cache *cache, int slot0);

/* ------------------------------------------------------------ calibration
 * Offline, once per codebook / pair (codec/calib.h).  A session holds the
 * producer, the consumers and second-moment statistics of their states on
 * calibration windows; codebooks and pairs are then fitted from the
 * statistics (ridge reduced-rank regression or PCA) and from samples
 * (aligners, Adam), and patch layers are chosen by measured next-token KL on
 * held-back calibration windows.  Progress goes to stderr when verbose. */

typedef struct scdb_calib scdb_calib;

typedef struct scdb_calib_opts {
    int window;          /* tokens per statistics window (default 384) */
    int eval_prefix;     /* held-back KL windows: prefix (default 320) ... */
    int eval_cont;       /* ... and continuation tokens (default 64) */
    int n_eval;          /* unused by the library: callers add held-back windows
                            with scdb_calib_add_eval (the CLI: 6 per consumer) */
    int sample_stride;   /* keep every k-th token for aligners (default 8) */
    int samples_only;    /* 1: the consumers' second moments are not kept, only
                            their samples: enough for pairs with all_layers
                            decoders against a frozen codebook (fitted on
                            samples), not for a codebook or --own-layer pairs */
    int verbose;
} scdb_calib_opts;

/* Start a session.  consumers[0..n_consumers) must share the producer's
 * architecture (SCDB_EMISMATCH).  Models are borrowed, not owned. */
scdb_err scdb_calib_new(const scdb_model *producer, const scdb_model *const *consumers,
                        int n_consumers, const scdb_calib_opts *opts, scdb_calib **out);
void scdb_calib_free(scdb_calib **c);
/* Add statistics windows cut from text (consecutive, non-overlapping;
 * at most max_windows, 0 = all).  Returns the number added in *added. */
scdb_err scdb_calib_add_text(scdb_calib *c, const unsigned char *text, size_t len,
                             int max_windows, int *added);
/* Add a held-back KL evaluation window (eval_prefix + eval_cont + 1 tokens)
 * for consumer ci (-1: for every consumer). */
scdb_err scdb_calib_add_eval(scdb_calib *c, int ci, const unsigned char *text, size_t len);
int scdb_calib_windows(const scdb_calib *c);
/* Held-back KL windows from a span of text: the text is tokenized once
 * (the session's engine, else bytes) and its LAST n_windows * (eval_prefix
 * + eval_cont + 1) tokens are cut into n_windows windows in order, for
 * consumer ci (-1: every consumer).  With the byte tokenizer this is
 * scdb_calib_add_eval over the last bytes of the text, window by window.
 * *n_tokens (may be NULL) gets the text's token count.  SCDB_ERANGE (fewer
 * tokens than the windows need), SCDB_EINVAL, the engine's and
 * scdb_calib_add_eval's errors. */
scdb_err scdb_calib_add_eval_text(scdb_calib *c, int ci, const unsigned char *text, size_t len,
                                  int n_windows, size_t *n_tokens);

/* Who computes the states (issue 39).  Without an engine the session runs
 * scdb's reference engine (scdb_model_forward with capture) and cuts text
 * into windows byte by byte.  An engine replaces both for everything added
 * after it is set: the text is tokenized once per call with the engine's
 * tokenizer (statistics windows of `window` tokens; held-back windows of
 * eval_prefix + eval_cont + 1 tokens), and every statistics window's
 * states (producer and consumers, scdb_calib_swap_consumer included) and
 * the producer's states of each held-back window come from it.  The
 * held-back windows' measuring forwards -- the consumer's own prefill (the
 * oracle) and its continuation over a decoded cache -- stay in the
 * reference engine on the same weights (llama.cpp and it agree to ~1e-4 in
 * logits on the family: test_llama), so a measured KL compares one
 * engine's arithmetic with itself.  Host sessions only. */
typedef struct scdb_calib_engine {
    const char *name;        /* for messages ("llama.cpp v0.4.0")          */
    void *ud;                /* handed back to both calls                   */
    /* text -> the models' token ids: *tok malloc'd (the session frees it),
     * *n of them */
    scdb_err (*tokenize)(void *ud, const unsigned char *text, size_t len, int32_t **tok,
                         size_t *n);
    /* model m's states over tok[0, n) at positions 0..n-1 (m is one of the
     * session's models): h_in [L][n][d], the normalised attention input of
     * each layer; k_post [L][n][kv], K after RoPE in scdb's convention */
    scdb_err (*states)(void *ud, const scdb_model *m, const int32_t *tok, int n, float *h_in,
                       float *k_post);
} scdb_calib_engine;
/* Set the engine (copied; e->ud must outlive the session) before any
 * window is added.  SCDB_EINVAL (windows already added, a NULL call),
 * SCDB_EUNSUPPORTED (scdb_calib_set_device was called). */
scdb_err scdb_calib_set_engine(scdb_calib *c, const scdb_calib_engine *e);
/* Replace consumer ci by model m, keeping the producer's side: m runs over
 * the statistics windows already added (their tokens are kept) and its
 * samples (and, unless samples_only, its moments -- which pair its states
 * with the producer's, so the producer's forward is rerun for them) replace
 * the old consumer's; the old consumer's held-back windows are dropped (add
 * m's with scdb_calib_add_eval).  A fleet is calibrated one consumer at a
 * time in one session this way, the producer's states computed once.
 * Host sessions only.  SCDB_EINVAL (NULL, ci out of range), SCDB_EMISMATCH
 * (another architecture), SCDB_EUNSUPPORTED (scdb_calib_set_device was
 * called), SCDB_ENOMEM, the forward's errors. */
scdb_err scdb_calib_swap_consumer(scdb_calib *c, int ci, const scdb_model *m);
/* How many producer forwards over statistics windows the session ran (one
 * per window unless a swap needed moments). */
int scdb_calib_producer_passes(const scdb_calib *c);
/* Run the session's heavy parts on device dev (kernels.h's ops tables):
 * every statistics window's forward passes (scdb_model_dev) and moment
 * products (one GEMM per moment; the f32 products come down and are summed
 * in double on the host as on the CPU), the measured-KL harness (the decode
 * with scdb_pair_dev, the continuation's forward) and aligner training's
 * Adam loop (scdb_aligner_train.ops).  Encoders, decoders, eigenproblems and
 * the held-back windows' own prefills stay on the host.  On the CPU table
 * every result is the host path's bit for bit (test_codec); on CUDA within
 * the twins' tolerance.  Call it right after scdb_calib_new.  SCDB_EINVAL
 * (windows already added, no such device), SCDB_ENOMEM, the table's
 * (SCDB_EUNSUPPORTED, SCDB_EDEVICE). */
scdb_err scdb_calib_set_device(scdb_calib *c, scdb_device dev);

typedef struct scdb_cb_fit {
    int r_k, r_v, r_h;       /* ranks */
    int n_candidates;        /* H-coded patch candidates (0 = REUSE only) */
    const int *candidates;   /* NULL: choose by measured KL; else the list */
    int candidate_kv;        /* 1: candidates keep K/V parts as well */
    int token_layer0;        /* 1: layer 0 is a TOKEN layer */
    int pca;                 /* 1: PCA of producer states (ablation) */
    int k_post_rope;         /* 1: code K after RoPE (ablation) */
    double ridge;            /* relative ridge (default 1e-3 when 0) */
    int budget;              /* > 0: code values per token; the K/V ranks of
                                non-candidate layers are then allocated by
                                measured KL (calib_codebook.c), r_k / r_v unused */
} scdb_cb_fit;

/* Fit a codebook on the session's statistics.  Per-layer figures (drift,
 * reconstruction error, measured KL criticality when choosing candidates)
 * go to stderr when verbose.  SCDB_EINVAL (ranks out of range, no windows, a
 * samples_only session with consumers). */
scdb_err scdb_calib_fit_codebook(scdb_calib *c, const scdb_cb_fit *f, scdb_codebook **out);

typedef struct scdb_pair_fit {
    int n_patch;             /* default patch budget */
    int hidden;              /* aligner hidden width (default 128) */
    int steps;               /* Adam steps per aligner (default 1500) */
    int batch;               /* default 256 */
    float lr;                /* default 2e-3 */
    int keep_order;          /* 1: keep candidate order (default: greedy by KL) */
    int no_train;            /* 1: no aligners at all (REUSE-only pair) */
    int all_layers;          /* 1: decoders and aligners of layer l read the
                                token's whole code row (every layer's code),
                                fitted on samples; 0: layer l's code only */
    int token_input;         /* 1: REUSE decoders read [z | h0] (h0: the
                                consumer's layer-0 H_in of the token), fitted
                                jointly by the same least squares; needs
                                all_layers and a TOKEN layer 0 (SCDB_EINVAL) */
} scdb_pair_fit;

/* Fit the pair for consumer ci (-1: the producer itself, the identity pair).
 * Per-aligner loss before/after training and the greedy KL figures go to
 * stderr when verbose. */
scdb_err scdb_calib_fit_pair(scdb_calib *c, const scdb_codebook *cb, int ci,
                             const scdb_pair_fit *f, scdb_pair **out);

/* Adapter fleets (codec.h, "Adapter pairs"), in a samples_only session with
 * one consumer slot that each adapter takes in turn
 * (scdb_calib_swap_consumer):
 *   scdb_calib_fleet_add    keeps slot 0's samples (the adapter now in it)
 *                           and adds its states to the fleet's mean;
 *   scdb_calib_fit_shared   fits the shared part on that mean (decoders by
 *                           least squares, aligners by Adam as
 *                           scdb_calib_fit_pair's), with the producer's
 *                           Wk/Wv and token layer: kind "shared", consumer
 *                           "fleet", base_fp the producer's, its checksum
 *                           in info.checksum;
 *   scdb_calib_fleet_use    puts adapter k back in slot 0 (its kept samples,
 *                           no forward; its held-back windows are dropped:
 *                           add them again with scdb_calib_add_eval);
 *   scdb_calib_fit_lora_pair  the lora pair of the adapter in slot 0 against
 *                           a shared part (fitted, or loaded with
 *                           scdb_pair_load_shared): its own parts by
 *                           reduced-rank regression of its states' residual,
 *                           its Wk/Wv deltas, patch order and budget by
 *                           measured KL as scdb_calib_fit_pair's; the result
 *                           is the effective pair (decodes as loaded).
 * Errors: SCDB_EINVAL (not such a session, k out of range, a consumer that
 * is not a LoRA adapter), SCDB_EMISMATCH (an adapter whose base is not the
 * codebook's producer, or which changes its embedding / layer 0 norm; a
 * shared part of another codebook), SCDB_ENOMEM, the fits' errors; why
 * (may be NULL) says which. */
typedef struct scdb_calib_fleet scdb_calib_fleet;
typedef struct scdb_lora_fit {
    int dec_rank;            /* decoder corrections' rank (0: 16; -1: none) */
    int align_rank;          /* aligner corrections' rank (0: 32; -1: none) */
    int n_patch;             /* default patch budget (as scdb_pair_fit's) */
    int keep_order;          /* 1: keep the shared part's order */
    int token_corr;          /* a token-input shared part: 1 (default, 0) the
                                decoder corrections span [z | h0] (one u, a
                                v of code_dim + d columns); -1 they read z
                                only (h0's decoders are the shared part's) */
} scdb_lora_fit;
scdb_err scdb_calib_fleet_new(const scdb_calib *c, scdb_calib_fleet **out);
void scdb_calib_fleet_free(scdb_calib_fleet **f);
int scdb_calib_fleet_size(const scdb_calib_fleet *f);
scdb_err scdb_calib_fleet_add(scdb_calib_fleet *f, const scdb_calib *c);
scdb_err scdb_calib_fleet_use(scdb_calib_fleet *f, scdb_calib *c, int k);
scdb_err scdb_calib_fit_shared(scdb_calib *c, const scdb_codebook *cb, const scdb_calib_fleet *f,
                               const scdb_pair_fit *pf, scdb_pair **out);
scdb_err scdb_calib_fit_lora_pair(scdb_calib *c, const scdb_codebook *cb, const scdb_pair *shared,
                                  const scdb_lora_fit *lf, scdb_pair **out, char *why, size_t whylen);

/* Measured quality of decode on the session's held-back windows of consumer
 * ci: mean KL(oracle || decoded) and top-1 agreement over continuations. */
scdb_err scdb_calib_eval(scdb_calib *c, const scdb_codebook *cb, const scdb_pair *p,
                         int ci, int n_patch, double *kl, double *top1);

/* Text of a model's domain (config "domain") for calibration or evaluation.
 * The model family's directory is the parent of the model's directory (it
 * holds TRAINING.json); held-out texts are in <family>/../heldout/<domain>.txt.
 *   SCDB_TEXT_TRAIN          the domain's training files listed in
 *                            TRAINING.json ("train_files"; .gz through
 *                            gzip -dc), sampled evenly across the list,
 *                            at most max(max_bytes / 24, 2 KiB) from each file
 *   SCDB_TEXT_HELDOUT_FIRST  first half of the held-out text
 *   SCDB_TEXT_HELDOUT_SECOND second half (what the quality bench evaluates on)
 *   SCDB_TEXT_AUTO           TRAIN when TRAINING.json lists readable files,
 *                            else HELDOUT_FIRST
 * At most max_bytes are returned (malloc'd).  desc (may be NULL) says what
 * was read.  SCDB_ENOTFOUND (no such text), SCDB_EIO, SCDB_ENOMEM. */
typedef enum scdb_text_source {
    SCDB_TEXT_AUTO = 0,
    SCDB_TEXT_TRAIN,
    SCDB_TEXT_HELDOUT_FIRST,
    SCDB_TEXT_HELDOUT_SECOND,
} scdb_text_source;

/* The text domain of m: its config's domain, except for a LoRA adapter
 * (finetune "lora"), whose domain is its own name: an adapter fleet's
 * TRAINING.json lists each adapter's files under its name, and its held-out
 * text is <data>/heldout/<name>.txt.  Never NULL for a model. */
const char *scdb_codec_text_domain(const scdb_model *m);

scdb_err scdb_codec_domain_text(const scdb_model *m, scdb_text_source src, size_t max_bytes,
                                unsigned char **text, size_t *len, char *desc, size_t desclen);
/* Training text of one domain of a TRAINING.json ("domains".<domain>.
 * "train_files"): at most per_file bytes of each readable file (0: max/24,
 * at least 2048), files visited in a fixed stride permutation, joined by
 * newlines, at most max_bytes in all.  Files the same TRAINING.json lists as
 * any domain's heldout_files, and the eviction suite's eval files
 * (<dir>/../evict_suite/manifest.json), are never read.  With the same
 * per_file a longer max_bytes returns a longer text with the same start.
 * SCDB_ENOTFOUND (no such domain, no readable file), SCDB_EFORMAT. */
scdb_err scdb_codec_training_text(const char *training_json, const char *domain, size_t max_bytes,
                                  size_t per_file, unsigned char **text, size_t *len, char *desc,
                                  size_t desclen);

/* Broad calibration text for a fleet: every training domain of m's family
 * (<family>/TRAINING.json) and of the family's adapters
 * (<family>/../adapters/TRAINING.json, when there is one), each with the
 * file that lists it.  SCDB_ERANGE past SCDB_TEXT_MAX_DOMAINS. */
#define SCDB_TEXT_MAX_DOMAINS 64
typedef struct scdb_text_domains {
    int n;
    char name[SCDB_TEXT_MAX_DOMAINS][64];
    char json[SCDB_TEXT_MAX_DOMAINS][1300];
} scdb_text_domains;
scdb_err scdb_codec_fleet_domains(const scdb_model *m, scdb_text_domains *out);

/* Read a text file (.gz through gzip -dc), at most max_bytes. */
scdb_err scdb_codec_read_text(const char *path, size_t max_bytes, unsigned char **text,
                              size_t *len);

/* ------------------------------------------------------------ aligner
 * Exposed for tests: train one aligner MLP on (z [n][r], target h [n][d])
 * samples with Adam on the MSE of the regenerated K and V (h Wk^T, h Wv^T,
 * each normalised by its variance; Wk/Wv NULL = MSE of h itself).
 * Every 10th sample is held out for validation (all samples when n < 20);
 * the parameters with the best validation loss (checked every 100 steps,
 * the linear start included) are kept.  loss_before / loss_after: validation
 * loss of the least-squares linear start and of the kept parameters. */
typedef struct scdb_aligner_train {
    int hidden, steps, batch;
    float lr;
    uint64_t seed;
    int verbose;
    const scdb_k_ops *ops;   /* where the Adam loop runs (kernels.h's ops
                                tables; NULL: the CPU table).  The set-up,
                                the validation and the result stay on the
                                host; the CPU table is the host loop bit for
                                bit, CUDA within its twins' tolerance */
} scdb_aligner_train;

typedef struct scdb_aligner {
    int r, hidden, d;
    float *w1, *b1, *w2, *b2, *skip;  /* [hidden][r] [hidden] [d][hidden] [d] [d][r] */
} scdb_aligner;

scdb_err scdb_aligner_fit(const float *z, const float *h, int n, int r, int d,
                          const float *wk, const float *wv, int kv_dim,
                          const scdb_aligner_train *t, scdb_aligner *out,
                          double *loss_before, double *loss_after);
/* h [n][d] = aligner(z [n][r]).  SCDB_ENOMEM. */
scdb_err scdb_aligner_apply(const scdb_aligner *a, const float *z, int ldz, int n, float *h);
void scdb_aligner_clear(scdb_aligner *a);

#endif /* SCDB_CODEC_H */
