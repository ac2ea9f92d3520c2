/* config.c — parsing and validating a model's config.json (cJSON). */
#include "model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

scdb_err scdb_model_config_parse(const char *json, size_t len, scdb_model_config *out,
                                 char *errbuf, size_t errlen)
{
    cJSON *root;
    scdb_model_config c;
    scdb_err rc;

    memset(&c, 0, sizeof c);
    if (!json) return SCDB_EINVAL;
    root = cJSON_ParseWithLength(json, len);
    if (!root) { scdb_errf(errbuf, errlen, "config: not valid JSON"); return SCDB_EFORMAT; }
    if (!cJSON_IsObject(root)) { scdb_errf(errbuf, errlen, "config: top level is not a JSON object"); rc = SCDB_EFORMAT; goto done; }
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
    scdb_err rc = scdb_read_file(path, 1 << 20, &buf, &len);
    if (rc) {
        scdb_errf(errbuf, errlen, "%s: %s", path, scdb_strerror(rc));
        return rc;
    }
    rc = scdb_model_config_parse(buf, len, out, errbuf, errlen);
    if (rc && errbuf && errlen) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s: %s", path, errbuf);
        snprintf(errbuf, errlen, "%s", tmp);
    }
    free(buf);
    return rc;
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
