/*
 * peft_adapter.h — a PEFT LoRA adapter directory as a consumer's weights:
 * the contract the model loader (model/adapter.c) and the weights
 * fingerprint (weights_fp.c) share, so that a loaded adapter computes with
 * exactly the weights its fingerprint hashes.
 *
 * An adapter directory is what Hugging Face PEFT's save_pretrained() writes
 * for a Llama model:
 *
 *   adapter_config.json         {"peft_type": "LORA",
 *                                "base_model_name_or_path": "base",
 *                                "r": 8, "lora_alpha": 16, "use_rslora": false,
 *                                "target_modules": ["q_proj", "v_proj", ...],
 *                                "bias": "none", "fan_in_fan_out": false,
 *                                "modules_to_save": null, "use_dora": false,
 *                                "lora_dropout": 0.0, "task_type": "CAUSAL_LM"}
 *   adapter_model.safetensors   for every layer i of the base and every
 *                               targeted module M:
 *     base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_A.weight [r, in]
 *     base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_B.weight [out, r]
 *     base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_{A,B}.weight
 *                               F32, F16 or BF16
 *
 * The effective weight of a targeted projection W [out, in] is
 *
 *   W' = W + s * B A,   s = lora_alpha / r  (lora_alpha / sqrt(r) with use_rslora)
 *
 * computed, so that any implementation gets the same f32 bits, as
 *
 *   W'[o][i] = (float)((double)W[o][i] + (double)s * sum_k (double)B[o][k] * (double)A[k][i])
 *
 * with W, A, B widened exactly to f32 first and k summed in ascending order
 * in double (each product is exact in double).  The base is named by
 * base_model_name_or_path: an absolute path, or a name resolved against a
 * models directory the caller gives (the broker's), else tried as
 * ADAPTER/NAME, ADAPTER/../NAME and ADAPTER/../../models/NAME (a data folder
 * holding adapters/ beside models/), then each of those as NAME.gguf; the
 * first directory with a config.json, or GGUF model, wins.  A base given
 * explicitly (scdb_adapter_open_ex) replaces the lookup.
 *
 * A GGUF LoRA adapter file (llama.cpp's; gguf_llama.h) opens into the same
 * struct: its factors are views of the GGUF's tensors in PEFT's shapes
 * (lora_b of q / k unpermuted), its scale llama.cpp's alpha / r, so the
 * merge rule, the loader and the fingerprint are the ones above.
 *
 * Everything else PEFT can write is refused by name (SCDB_EUNSUPPORTED):
 * another peft_type, use_dora, bias other than "none", fan_in_fan_out,
 * modules_to_save, layers_to_transform / layers_pattern, rank_pattern /
 * alpha_pattern, target_modules as a regex string or naming a module other
 * than the seven projections (embed_tokens, lm_head, ...), and a base that
 * is itself an adapter.
 */
#ifndef SCDB_PEFT_ADAPTER_H
#define SCDB_PEFT_ADAPTER_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include "scdb_err.h"

#define SCDB_ADAPTER_CONFIG "adapter_config.json"
#define SCDB_ADAPTER_WEIGHTS "adapter_model.safetensors"

/* The projections an adapter may target, in layer order. */
typedef enum scdb_lora_module {
    SCDB_LORA_Q = 0, SCDB_LORA_K, SCDB_LORA_V, SCDB_LORA_O,
    SCDB_LORA_GATE, SCDB_LORA_UP, SCDB_LORA_DOWN,
    SCDB_LORA_N_MODULES
} scdb_lora_module;

/* PEFT's short name ("q_proj") and the module path inside a Llama layer
 * ("self_attn.q_proj", the Hugging Face weight name without ".weight"). */
const char *scdb_lora_module_name(int module);
const char *scdb_lora_module_path(int module);

/* One targeted projection of one layer: its two factors in the file. */
typedef struct scdb_lora_target {
    int layer, module;
    const scdb_st_tensor *a;   /* [r, in]  */
    const scdb_st_tensor *b;   /* [out, r] */
} scdb_lora_target;

struct scdb_gguf_file;

typedef struct scdb_adapter {
    char dir[1024];            /* the adapter directory (or GGUF file) */
    char base_dir[1024];       /* the resolved base model directory (or GGUF file) */
    char base_name[512];       /* base_model_name_or_path as written */
    int r;
    double alpha;
    int rslora;
    float scale;               /* s, as f32 */
    unsigned modules;          /* bit (1 << module) per targeted module */
    scdb_st_file *file;
    scdb_lora_target *t;       /* sorted by (layer, module) */
    int n_t;
    /* a GGUF adapter (gguf_llama.h): file is NULL, the factors are views of
     * the GGUF's tensors (lora_b of q / k unpermuted into `owned`), and
     * layers it has no factors for are left alone (partial: it names no
     * target_modules to complete) */
    int partial;
    struct scdb_gguf_file *gguf;
    scdb_st_tensor *views;
    void *owned;
} scdb_adapter;

/* 1 if dir holds an adapter_config.json. */
int scdb_adapter_is_dir(const char *dir);
/* 1 if path is an adapter: a PEFT directory or a GGUF LoRA adapter file
 * (gguf_llama.h). */
int scdb_adapter_is(const char *path);

/* Parse and check DIR/adapter_config.json, resolve the base (models_dir may
 * be NULL) and open DIR/adapter_model.safetensors, checking every tensor's
 * name against target_modules and every factor's rank and dtype.  Shapes
 * against the base are checked by scdb_adapter_check_base.  Errors:
 * SCDB_EINVAL (NULL argument), SCDB_ENOTFOUND (no config, no weight file,
 * a base found nowhere), SCDB_EFORMAT (config not a JSON object; a required
 * key missing or of the wrong type; a tensor name that is not a LoRA factor
 * of a Llama projection; a factor of a module target_modules does not
 * name; A without B or B without A), SCDB_ERANGE (r or lora_alpha out of
 * range), SCDB_EUNSUPPORTED (the features listed above), SCDB_ESHAPE (a
 * factor not 2-D or of another rank than r), SCDB_EDTYPE (not F32 / F16 /
 * BF16), the safetensors reader's errors (SCDB_ETRUNC, ...), SCDB_EIO,
 * SCDB_ENOMEM.  errbuf names the file, key or tensor. */
scdb_err scdb_adapter_open(const char *dir, const char *models_dir, scdb_adapter **out,
                           char *errbuf, size_t errlen);
/* scdb_adapter_open for a PEFT directory or a GGUF LoRA adapter file
 * (scdb_gguf_adapter_fill's rules and errors), with `base` (may be NULL)
 * naming the base model directory or GGUF file instead of the adapter's own
 * lookup.  A base that is itself an adapter is refused (SCDB_EUNSUPPORTED),
 * a base path holding no model SCDB_ENOTFOUND. */
scdb_err scdb_adapter_open_ex(const char *path, const char *models_dir, const char *base,
                              scdb_adapter **out, char *errbuf, size_t errlen);
void scdb_adapter_close(scdb_adapter **a);

/* Check the adapter against its base: n_layers layers, and module m's
 * weight of shape [shape[m][0] (out), shape[m][1] (in)].  Every factor's
 * layer must exist, A must be [r, in] and B [out, r], and every layer must
 * have both factors of every targeted module.  SCDB_ESHAPE (a shape, a
 * layer past the base's), SCDB_ENOTFOUND (a factor missing). */
scdb_err scdb_adapter_check_base(const scdb_adapter *a, int n_layers,
                                 const int64_t shape[SCDB_LORA_N_MODULES][2], char *errbuf,
                                 size_t errlen);

/* The target of (layer, module), or NULL when the adapter leaves it alone. */
const scdb_lora_target *scdb_adapter_find(const scdb_adapter *a, int layer, int module);

/* dst[out][in] = the effective weight of target t over the base weight
 * w[out][in] (f32), by the rule above; dst may be w.  A and B are widened
 * on the way.  SCDB_ENOMEM, SCDB_EDTYPE. */
scdb_err scdb_adapter_merge(const scdb_adapter *a, const scdb_lora_target *t, const float *w,
                            int64_t out, int64_t in, float *dst);

#endif /* SCDB_PEFT_ADAPTER_H */
