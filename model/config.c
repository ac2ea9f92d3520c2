/* config.c — parsing and validating a model's config.json (cJSON), in
 * either layout: scdb's own keys (d_model, n_layers, ...) or a Hugging Face
 * Llama config (hidden_size, num_hidden_layers, ...; schema/FORMATS.md). */
#include "model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_internal.h"

static scdb_err get_int(const cJSON *o, const char *key, int lo, int hi, int *out,
                        char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) { scdb_errf(errbuf, errlen, "config: required field '%s' is missing", key); return SCDB_EFORMAT; }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
        scdb_errf(errbuf, errlen, "config: field '%s' must be an integer", key);
        return SCDB_EFORMAT;
    }
    if (v->valuedouble < lo || v->valuedouble > hi) {
        scdb_errf(errbuf, errlen, "config: field '%s' = %g is out of range [%d, %d]", key, v->valuedouble, lo, hi);
        return SCDB_ERANGE;
    }
    *out = (int)v->valuedouble;
    return SCDB_OK;
}

static scdb_err get_float(const cJSON *o, const char *key, double lo, double hi,
                          float *out, char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) { scdb_errf(errbuf, errlen, "config: required field '%s' is missing", key); return SCDB_EFORMAT; }
    if (!cJSON_IsNumber(v)) { scdb_errf(errbuf, errlen, "config: field '%s' must be a number", key); return SCDB_EFORMAT; }
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        scdb_errf(errbuf, errlen, "config: field '%s' = %g is out of range [%g, %g]", key, v->valuedouble, lo, hi);
        return SCDB_ERANGE;
    }
    *out = (float)v->valuedouble;
    return SCDB_OK;
}

/* Optional string (null allowed -> ""). */
static scdb_err get_str(const cJSON *o, const char *key, int required, char *dst,
                        size_t cap, char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    dst[0] = '\0';
    if (!v || cJSON_IsNull(v)) {
        if (required) { scdb_errf(errbuf, errlen, "config: required field '%s' is missing", key); return SCDB_EFORMAT; }
        return SCDB_OK;
    }
    if (!cJSON_IsString(v)) { scdb_errf(errbuf, errlen, "config: field '%s' must be a string", key); return SCDB_EFORMAT; }
    if (strlen(v->valuestring) >= cap) {
        scdb_errf(errbuf, errlen, "config: field '%s' is longer than %zu bytes", key, cap - 1);
        return SCDB_ERANGE;
    }
    memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
    return SCDB_OK;
}

static scdb_err parse_hf(const cJSON *root, const char *name_hint, scdb_model_config *out,
                         char *errbuf, size_t errlen);

static scdb_err parse_any(const char *json, size_t len, const char *name_hint,
                          scdb_model_config *out, char *errbuf, size_t errlen)
{
    cJSON *root;
    scdb_model_config c;
    scdb_err rc;

    memset(&c, 0, sizeof c);
    if (!json) return SCDB_EINVAL;
    root = cJSON_ParseWithLength(json, len);
    if (!root) { scdb_errf(errbuf, errlen, "config: not valid JSON"); return SCDB_EFORMAT; }
    if (!cJSON_IsObject(root)) { scdb_errf(errbuf, errlen, "config: top level is not a JSON object"); rc = SCDB_EFORMAT; goto done; }
    if (cJSON_GetObjectItemCaseSensitive(root, "hidden_size")) {
        rc = parse_hf(root, name_hint, out, errbuf, errlen);
        goto done;
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "arch");
    if (arch && !(cJSON_IsString(arch) && !strcmp(arch->valuestring, "llama"))) {
        scdb_errf(errbuf, errlen, "config: arch must be \"llama\"");
        rc = SCDB_ERANGE;
        goto done;
    }
    if ((rc = get_str(root, "name", 1, c.name, sizeof c.name, errbuf, errlen)) ||
        (rc = get_str(root, "domain", 0, c.domain, sizeof c.domain, errbuf, errlen)) ||
        (rc = get_str(root, "parent", 0, c.parent, sizeof c.parent, errbuf, errlen)) ||
        (rc = get_str(root, "finetune", 0, c.finetune, sizeof c.finetune, errbuf, errlen)) ||
        (rc = get_int(root, "vocab_size", 256, 1 << 20, &c.vocab_size, errbuf, errlen)) ||
        (rc = get_int(root, "d_model", 1, 1 << 16, &c.d_model, errbuf, errlen)) ||
        (rc = get_int(root, "n_layers", 1, 1024, &c.n_layers, errbuf, errlen)) ||
        (rc = get_int(root, "n_heads", 1, 1024, &c.n_heads, errbuf, errlen)) ||
        (rc = get_int(root, "n_kv_heads", 1, 1024, &c.n_kv_heads, errbuf, errlen)) ||
        (rc = get_int(root, "head_dim", 2, 4096, &c.head_dim, errbuf, errlen)) ||
        (rc = get_int(root, "d_ff", 1, 1 << 18, &c.d_ff, errbuf, errlen)) ||
        (rc = get_int(root, "max_seq_len", 1, 1 << 24, &c.max_seq_len, errbuf, errlen)) ||
        (rc = get_float(root, "rope_theta", 1.0, 1e12, &c.rope_theta, errbuf, errlen)) ||
        (rc = get_float(root, "norm_eps", 1e-12, 1.0, &c.norm_eps, errbuf, errlen)))
        goto done;
    if (c.n_heads % c.n_kv_heads != 0) {
        scdb_errf(errbuf, errlen, "config: n_heads (%d) is not a multiple of n_kv_heads (%d)", c.n_heads, c.n_kv_heads);
        rc = SCDB_ERANGE;
        goto done;
    }
    if (c.head_dim % 2 != 0) {
        scdb_errf(errbuf, errlen, "config: head_dim (%d) must be even for RoPE", c.head_dim);
        rc = SCDB_ERANGE;
        goto done;
    }
    *out = c;
    rc = SCDB_OK;
done:
    cJSON_Delete(root);
    return rc;
}

scdb_err scdb_model_config_load(const char *path, scdb_model_config *out,
                                char *errbuf, size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    if (scdb_gguf_is_file(path)) return md_gguf_config_load(path, out, errbuf, errlen);
    scdb_err rc = scdb_read_file(path, 1 << 20, &buf, &len);
    if (rc) {
        scdb_errf(errbuf, errlen, "%s: %s", path, scdb_strerror(rc));
        return rc;
    }
    /* a Hugging Face config without a name is named after its directory */
    char hint[SCDB_MODEL_NAME_MAX] = "";
    const char *end = strrchr(path, '/'), *start = end;
    while (start && start > path && start[-1] != '/') start--;
    if (end && end > start && (size_t)(end - start) < sizeof hint)
        memcpy(hint, start, (size_t)(end - start));
    rc = parse_any(buf, len, hint, out, errbuf, errlen);
    if (rc && errbuf && errlen) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s: %s", path, errbuf);
        snprintf(errbuf, errlen, "%s", tmp);
    }
    free(buf);
    return rc;
}

scdb_err scdb_model_config_parse(const char *json, size_t len, scdb_model_config *out,
                                 char *errbuf, size_t errlen)
{
    return parse_any(json, len, NULL, out, errbuf, errlen);
}

int scdb_model_config_same_arch(const scdb_model_config *a, const scdb_model_config *b)
{
    return a->vocab_size == b->vocab_size && a->d_model == b->d_model &&
           a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim &&
           a->d_ff == b->d_ff && a->rope_theta == b->rope_theta &&
           a->norm_eps == b->norm_eps;
}

const char *scdb_model_heldout_path(const char *data_dir, const char *domain, char *buf,
                                    size_t len)
{
    snprintf(buf, len, "%s/heldout/%s.txt", data_dir, domain && *domain ? domain : "english");
    return buf;
}

/* ------------------------------------------------------------ Hugging Face */

/* An optional integer: absent or null -> dflt. */
static scdb_err get_int_or(const cJSON *o, const char *key, int lo, int hi, int dflt,
                           int *out, char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) { *out = dflt; return SCDB_OK; }
    return get_int(o, key, lo, hi, out, errbuf, errlen);
}

static scdb_err get_float_or(const cJSON *o, const char *key, double lo, double hi,
                             float dflt, float *out, char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) { *out = dflt; return SCDB_OK; }
    return get_float(o, key, lo, hi, out, errbuf, errlen);
}

/* A key that, when present with another value than `want`, asks for
 * something this model does not compute. */
static scdb_err want_str(const cJSON *o, const char *key, const char *want,
                         char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return SCDB_OK;
    if (!cJSON_IsString(v)) { scdb_errf(errbuf, errlen, "config: field '%s' must be a string", key); return SCDB_EFORMAT; }
    if (strcmp(v->valuestring, want)) {
        scdb_errf(errbuf, errlen, "config: %s \"%s\" is not supported (only \"%s\")", key, v->valuestring, want);
        return SCDB_EUNSUPPORTED;
    }
    return SCDB_OK;
}

static scdb_err get_bool_or(const cJSON *o, const char *key, int dflt, int *out,
                            char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) { *out = dflt; return SCDB_OK; }
    if (!cJSON_IsBool(v)) { scdb_errf(errbuf, errlen, "config: field '%s' must be true or false", key); return SCDB_EFORMAT; }
    *out = cJSON_IsTrue(v);
    return SCDB_OK;
}

/* Last path component of s into dst (cut to fit). */
static void basename_into(const char *s, char *dst, size_t cap)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && s[b - 1] != '/') b--;
    if (n - b >= cap) n = b + cap - 1;
    memcpy(dst, s + b, n - b);
    dst[n - b] = '\0';
}

/* transformers' LlamaConfig, as config.json spells it.  Required: the
 * dimensions, max_position_embeddings and rms_norm_eps; num_key_value_heads,
 * rope_theta, head_dim and tie_word_embeddings take LlamaConfig's defaults
 * when absent.  The family's provenance, where tools/export_hf.py wrote it,
 * is in an "scdb" object. */
static scdb_err parse_hf(const cJSON *root, const char *name_hint, scdb_model_config *out,
                         char *errbuf, size_t errlen)
{
    scdb_model_config c;
    scdb_err rc;
    int head_dim = 0;

    memset(&c, 0, sizeof c);
    c.layout = SCDB_LAYOUT_HF;
    if ((rc = want_str(root, "model_type", "llama", errbuf, errlen)) ||
        (rc = want_str(root, "hidden_act", "silu", errbuf, errlen)))
        return rc;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        scdb_errf(errbuf, errlen, "config: rope_scaling is not supported (plain RoPE only)");
        return SCDB_EUNSUPPORTED;
    }
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < SCDB_ARRAY_LEN(biases); i++) {
        int on;
        if ((rc = get_bool_or(root, biases[i], 0, &on, errbuf, errlen))) return rc;
        if (on) { scdb_errf(errbuf, errlen, "config: %s = true is not supported (no biases)", biases[i]); return SCDB_EUNSUPPORTED; }
    }
    if ((rc = get_int(root, "hidden_size", 1, 1 << 16, &c.d_model, errbuf, errlen)) ||
        (rc = get_int(root, "num_hidden_layers", 1, 1024, &c.n_layers, errbuf, errlen)) ||
        (rc = get_int(root, "num_attention_heads", 1, 1024, &c.n_heads, errbuf, errlen)) ||
        (rc = get_int_or(root, "num_key_value_heads", 1, 1024, c.n_heads, &c.n_kv_heads, errbuf, errlen)) ||
        (rc = get_int(root, "intermediate_size", 1, 1 << 18, &c.d_ff, errbuf, errlen)) ||
        (rc = get_int(root, "vocab_size", 1, 1 << 24, &c.vocab_size, errbuf, errlen)) ||
        (rc = get_int(root, "max_position_embeddings", 1, 1 << 24, &c.max_seq_len, errbuf, errlen)) ||
        (rc = get_float(root, "rms_norm_eps", 1e-12, 1.0, &c.norm_eps, errbuf, errlen)) ||
        (rc = get_float_or(root, "rope_theta", 1.0, 1e12, 10000.0f, &c.rope_theta, errbuf, errlen)) ||
        (rc = get_int_or(root, "head_dim", 2, 4096, 0, &head_dim, errbuf, errlen)) ||
        (rc = get_bool_or(root, "tie_word_embeddings", 0, &c.tied_embeddings, errbuf, errlen)))
        return rc;
    if (c.n_heads % c.n_kv_heads != 0) {
        scdb_errf(errbuf, errlen, "config: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
             c.n_heads, c.n_kv_heads);
        return SCDB_ERANGE;
    }
    if (!head_dim) {
        if (c.d_model % c.n_heads != 0) {
            scdb_errf(errbuf, errlen, "config: hidden_size (%d) is not a multiple of num_attention_heads (%d) "
                 "and there is no head_dim", c.d_model, c.n_heads);
            return SCDB_ERANGE;
        }
        head_dim = c.d_model / c.n_heads;
    }
    if (head_dim % 2 != 0) {
        scdb_errf(errbuf, errlen, "config: head_dim (%d) must be even for RoPE", head_dim);
        return SCDB_ERANGE;
    }
    c.head_dim = head_dim;

    /* name: the family's own, else the checkpoint's, else the directory's */
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "scdb");
    if (sc && !cJSON_IsNull(sc)) {
        if (!cJSON_IsObject(sc)) { scdb_errf(errbuf, errlen, "config: field 'scdb' must be an object"); return SCDB_EFORMAT; }
        if ((rc = get_str(sc, "name", 0, c.name, sizeof c.name, errbuf, errlen)) ||
            (rc = get_str(sc, "domain", 0, c.domain, sizeof c.domain, errbuf, errlen)) ||
            (rc = get_str(sc, "parent", 0, c.parent, sizeof c.parent, errbuf, errlen)) ||
            (rc = get_str(sc, "finetune", 0, c.finetune, sizeof c.finetune, errbuf, errlen)))
            return rc;
    }
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
    if (!c.name[0] && cJSON_IsString(np)) basename_into(np->valuestring, c.name, sizeof c.name);
    if (!c.name[0] && name_hint) basename_into(name_hint, c.name, sizeof c.name);
    if (!c.name[0]) snprintf(c.name, sizeof c.name, "hf-llama");
    *out = c;
    return SCDB_OK;
}
