/* peft_adapter.c — reading and checking a PEFT LoRA adapter directory, and
 * the one merge rule W + s B A (peft_adapter.h). */
#include "peft_adapter.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "scdb_common.h"

#define MAX_CONFIG (1u << 20)
#define MAX_RANK 4096
#define NAME_PREFIX "base_model.model.model.layers."

static const char *const SHORT[SCDB_LORA_N_MODULES] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                        "gate_proj", "up_proj", "down_proj"};
static const char *const PATH[SCDB_LORA_N_MODULES] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

const char *scdb_lora_module_name(int module)
{
    return module >= 0 && module < SCDB_LORA_N_MODULES ? SHORT[module] : NULL;
}

const char *scdb_lora_module_path(int module)
{
    return module >= 0 && module < SCDB_LORA_N_MODULES ? PATH[module] : NULL;
}

static int has_file(const char *dir, const char *name)
{
    char path[1700];
    struct stat st;
    size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > sizeof path) return 0;
    memcpy(path, dir, a);
    path[a] = '/';
    memcpy(path + a + 1, name, b + 1);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int scdb_adapter_is_dir(const char *dir)
{
    return dir && has_file(dir, SCDB_ADAPTER_CONFIG);
}

int scdb_adapter_is(const char *path)
{
    return scdb_adapter_is_dir(path) || scdb_gguf_is_adapter_file(path);
}

/* ------------------------------------------------------------ config */

/* A key that must be absent, null, false or empty: a feature refused by
 * name.  `what` says what it is. */
static scdb_err refuse_set(const cJSON *root, const char *key, const char *what, char *errbuf,
                           size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return SCDB_OK;
    if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && cJSON_GetArraySize(v) == 0) return SCDB_OK;
    if (cJSON_IsString(v) && !v->valuestring[0]) return SCDB_OK;
    scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": %s is not supported (%s must be absent, null, false or empty)",
              what, key);
    return SCDB_EUNSUPPORTED;
}

/* A string key that may only hold `want` (absent is fine unless required). */
static scdb_err only_value(const cJSON *root, const char *key, const char *want, int required,
                           char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (!required) return SCDB_OK;
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": required key '%s' is missing", key);
        return SCDB_EFORMAT;
    }
    if (!cJSON_IsString(v)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": %s must be a string", key);
        return SCDB_EFORMAT;
    }
    if (strcmp(v->valuestring, want)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": %s \"%s\" is not supported (only \"%s\")", key,
                  v->valuestring, want);
        return SCDB_EUNSUPPORTED;
    }
    return SCDB_OK;
}

static int module_of(const char *s)
{
    for (int m = 0; m < SCDB_LORA_N_MODULES; m++)
        if (!strcmp(s, SHORT[m]) || !strcmp(s, PATH[m])) return m;
    return -1;
}

static scdb_err parse_targets(const cJSON *root, unsigned *mask, char *errbuf, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    *mask = 0;
    if (!v || cJSON_IsNull(v)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": required key 'target_modules' is missing");
        return SCDB_EFORMAT;
    }
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "all-linear")) {
            *mask = (1u << SCDB_LORA_N_MODULES) - 1;
            return SCDB_OK;
        }
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": target_modules as a pattern (\"%s\") is not supported: "
                  "list the module names", v->valuestring);
        return SCDB_EUNSUPPORTED;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": target_modules must be a non-empty list of module names");
        return SCDB_EFORMAT;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) {
            scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": target_modules entries must be strings");
            return SCDB_EFORMAT;
        }
        int m = module_of(e->valuestring);
        if (m < 0) {
            scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": target module '%s' is not supported (only q_proj, "
                      "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)", e->valuestring);
            return SCDB_EUNSUPPORTED;
        }
        *mask |= 1u << m;
    }
    return SCDB_OK;
}

static scdb_err parse_config(scdb_adapter *a, char *errbuf, size_t errlen)
{
    char path[1400], *buf = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    const cJSON *v;
    scdb_err rc;

    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_CONFIG, a->dir);
    if ((rc = scdb_read_file(path, MAX_CONFIG, &buf, &len))) {
        scdb_errf(errbuf, errlen, "%s: %s", path, rc == SCDB_ENOTFOUND ? "no such file" : scdb_strerror(rc));
        return rc;
    }
    root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!cJSON_IsObject(root)) {
        scdb_errf(errbuf, errlen, "%s: not a JSON object", path);
        rc = SCDB_EFORMAT;
        goto done;
    }
    if ((rc = only_value(root, "peft_type", "LORA", 1, errbuf, errlen)) ||
        (rc = only_value(root, "bias", "none", 0, errbuf, errlen)))
        goto done;
    if ((rc = refuse_set(root, "use_dora", "DoRA (use_dora)", errbuf, errlen)) ||
        (rc = refuse_set(root, "fan_in_fan_out", "fan_in_fan_out (Conv1D-style transposed weights)", errbuf, errlen)) ||
        (rc = refuse_set(root, "modules_to_save", "modules_to_save (fully trained extra modules)", errbuf, errlen)) ||
        (rc = refuse_set(root, "layers_to_transform", "layers_to_transform (a subset of layers)", errbuf, errlen)) ||
        (rc = refuse_set(root, "layers_pattern", "layers_pattern", errbuf, errlen)) ||
        (rc = refuse_set(root, "rank_pattern", "rank_pattern (per-module ranks)", errbuf, errlen)) ||
        (rc = refuse_set(root, "alpha_pattern", "alpha_pattern (per-module alphas)", errbuf, errlen)))
        goto done;
    v = cJSON_GetObjectItemCaseSensitive(root, "r");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": r must be an integer (it is %s)", v ? "not" : "missing");
        rc = SCDB_EFORMAT;
        goto done;
    }
    if (v->valuedouble < 1 || v->valuedouble > MAX_RANK) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": r = %g is out of range [1, %d]", v->valuedouble, MAX_RANK);
        rc = SCDB_ERANGE;
        goto done;
    }
    a->r = (int)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    if (!cJSON_IsNumber(v)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": lora_alpha must be a number (it is %s)", v ? "not" : "missing");
        rc = SCDB_EFORMAT;
        goto done;
    }
    if (!(v->valuedouble > 0 && v->valuedouble <= 1e6)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": lora_alpha = %g is out of range (0, 1e6]", v->valuedouble);
        rc = SCDB_ERANGE;
        goto done;
    }
    a->alpha = v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(root, "use_rslora");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": use_rslora must be true or false");
        rc = SCDB_EFORMAT;
        goto done;
    }
    a->rslora = cJSON_IsTrue(v);
    a->scale = (float)(a->rslora ? a->alpha / sqrt((double)a->r) : a->alpha / a->r);
    if ((rc = parse_targets(root, &a->modules, errbuf, errlen))) goto done;
    v = cJSON_GetObjectItemCaseSensitive(root, "base_model_name_or_path");
    if (!cJSON_IsString(v) || !v->valuestring[0]) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": required key 'base_model_name_or_path' is missing or "
                  "not a non-empty string");
        rc = SCDB_EFORMAT;
        goto done;
    }
    if (strlen(v->valuestring) >= sizeof a->base_name) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_CONFIG ": base_model_name_or_path is too long");
        rc = SCDB_ERANGE;
        goto done;
    }
    snprintf(a->base_name, sizeof a->base_name, "%s", v->valuestring);
    rc = SCDB_OK;
done:
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------ base */

/* A model at path: a directory with config.json, or a GGUF model file. */
static int is_model(const char *path)
{
    return has_file(path, "config.json") || (scdb_gguf_is_file(path) && !scdb_gguf_is_adapter_file(path));
}

static int is_adapter(const char *path)
{
    return has_file(path, SCDB_ADAPTER_CONFIG) || scdb_gguf_is_adapter_file(path);
}

static scdb_err resolve_base(scdb_adapter *a, const char *models_dir, const char *base, char *errbuf,
                             size_t errlen)
{
    char cand[6][1600], tried[8000] = "";
    int n = 0;
    const char *name = a->base_name;

    if (base) {
        snprintf(cand[n++], sizeof cand[0], "%s", base);
    } else if (name[0] == '/') {
        snprintf(cand[n++], sizeof cand[0], "%s", name);
        snprintf(cand[n++], sizeof cand[0], "%s.gguf", name);
    } else if (models_dir && models_dir[0]) {
        snprintf(cand[n++], sizeof cand[0], "%s/%s", models_dir, name);
        snprintf(cand[n++], sizeof cand[0], "%s/%s.gguf", models_dir, name);
    } else {
        snprintf(cand[n++], sizeof cand[0], "%s/%s", a->dir, name);
        snprintf(cand[n++], sizeof cand[0], "%s/../%s", a->dir, name);
        snprintf(cand[n++], sizeof cand[0], "%s/../../models/%s", a->dir, name);
        snprintf(cand[n++], sizeof cand[0], "%s/%s.gguf", a->dir, name);
        snprintf(cand[n++], sizeof cand[0], "%s/../%s.gguf", a->dir, name);
        snprintf(cand[n++], sizeof cand[0], "%s/../../models/%s.gguf", a->dir, name);
    }
    for (int i = 0; i < n; i++) {
        if (!is_model(cand[i]) && !is_adapter(cand[i])) {
            if (tried[0]) scdb_str_cut(tried + strlen(tried), sizeof tried - strlen(tried), ", ");
            scdb_str_cut(tried + strlen(tried), sizeof tried - strlen(tried), cand[i]);
            continue;
        }
        if (strlen(cand[i]) >= sizeof a->base_dir) break;
        if (is_adapter(cand[i])) {
            scdb_errf(errbuf, errlen, "%s: base %s is itself an adapter: stacked adapters are not supported",
                      a->dir, cand[i]);
            return SCDB_EUNSUPPORTED;
        }
        memcpy(a->base_dir, cand[i], strlen(cand[i]) + 1);
        return SCDB_OK;
    }
    scdb_errf(errbuf, errlen, "%s: base model '%s' not found (no config.json or GGUF model at %s)", a->dir,
              base ? base : name, tried);
    return SCDB_ENOTFOUND;
}

/* ------------------------------------------------------------ tensors */

static int cmp_target(const void *x, const void *y)
{
    const scdb_lora_target *a = x, *b = y;
    return a->layer != b->layer ? (a->layer > b->layer) - (a->layer < b->layer)
                                : (a->module > b->module) - (a->module < b->module);
}

static scdb_lora_target *target_at(scdb_adapter *a, int layer, int module)
{
    for (int i = 0; i < a->n_t; i++)
        if (a->t[i].layer == layer && a->t[i].module == module) return &a->t[i];
    scdb_lora_target *g = realloc(a->t, (size_t)(a->n_t + 1) * sizeof *g);
    if (!g) return NULL;
    a->t = g;
    memset(&a->t[a->n_t], 0, sizeof *a->t);
    a->t[a->n_t].layer = layer;
    a->t[a->n_t].module = module;
    return &a->t[a->n_t++];
}

/* One tensor of the file: a LoRA factor of a targeted projection. */
static scdb_err take_tensor(scdb_adapter *a, const scdb_st_tensor *t, char *errbuf, size_t errlen)
{
    const char *p = t->name + strlen(NAME_PREFIX), *q;
    char *end;
    if (strncmp(t->name, NAME_PREFIX, strlen(NAME_PREFIX)) || *p < '0' || *p > '9') goto unknown;
    long layer = strtol(p, &end, 10);
    if (*end != '.' || layer > 1 << 20 || (end - p > 1 && *p == '0')) goto unknown;
    q = end + 1;
    int module = -1;
    for (int m = 0; m < SCDB_LORA_N_MODULES && module < 0; m++) {
        size_t n = strlen(PATH[m]);
        if (!strncmp(q, PATH[m], n) && q[n] == '.') { module = m; q += n + 1; }
    }
    if (module < 0) goto unknown;
    int is_b;
    if (!strcmp(q, "lora_A.weight")) is_b = 0;
    else if (!strcmp(q, "lora_B.weight")) is_b = 1;
    else if (!strncmp(q, "lora_magnitude_vector", 21)) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' is a DoRA magnitude: DoRA is not supported",
                  t->name);
        return SCDB_EUNSUPPORTED;
    } else if (!strcmp(q, "bias") || !strcmp(q, "base_layer.bias") || !strcmp(q, "lora_B.bias")) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' is a bias: only bias \"none\" is supported",
                  t->name);
        return SCDB_EUNSUPPORTED;
    } else {
        goto unknown;
    }
    if (!(a->modules & (1u << module))) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' is for %s, which target_modules does "
                  "not name", t->name, SHORT[module]);
        return SCDB_EFORMAT;
    }
    if (t->dtype != SCDB_F32 && t->dtype != SCDB_F16 && t->dtype != SCDB_BF16) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' has dtype %s, want F32, F16 or BF16",
                  t->name, scdb_dtype_name(t->dtype));
        return SCDB_EDTYPE;
    }
    if (t->ndim != 2 || t->shape[is_b ? 1 : 0] != a->r) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' must be 2-D with %s = r = %d", t->name,
                  is_b ? "shape[1]" : "shape[0]", a->r);
        return SCDB_ESHAPE;
    }
    scdb_lora_target *x = target_at(a, (int)layer, module);
    if (!x) return SCDB_ENOMEM;
    if (is_b) x->b = t;
    else x->a = t;
    return SCDB_OK;
unknown:
    if (strstr(t->name, "embed_tokens") || strstr(t->name, "lm_head")) {
        scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' adapts or replaces %s, which is not "
                  "supported (only the attention and MLP projections)", t->name,
                  strstr(t->name, "lm_head") ? "lm_head" : "embed_tokens");
        return SCDB_EUNSUPPORTED;
    }
    scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": tensor '%s' is not a LoRA factor of a Llama projection "
              "(want " NAME_PREFIX "N.self_attn.q_proj.lora_A.weight and the like)", t->name);
    return SCDB_EFORMAT;
}

scdb_err scdb_adapter_open(const char *dir, const char *models_dir, scdb_adapter **out,
                           char *errbuf, size_t errlen)
{
    return scdb_adapter_open_ex(dir, models_dir, NULL, out, errbuf, errlen);
}

scdb_err scdb_adapter_open_ex(const char *dir, const char *models_dir, const char *base,
                              scdb_adapter **out, char *errbuf, size_t errlen)
{
    scdb_adapter *a = NULL;
    char path[1400], msg[512] = "";
    scdb_err rc;

    if (!dir || !out) return SCDB_EINVAL;
    *out = NULL;
    if (strlen(dir) >= sizeof a->dir || (base && strlen(base) >= sizeof a->base_dir)) return SCDB_EINVAL;
    a = calloc(1, sizeof *a);
    if (!a) return SCDB_ENOMEM;
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    if (scdb_gguf_is_file(dir)) {          /* a GGUF LoRA adapter (gguf_llama.h) */
        if ((rc = scdb_gguf_adapter_fill(a, models_dir, base, errbuf, errlen))) goto fail;
        *out = a;
        return SCDB_OK;
    }
    if ((rc = parse_config(a, errbuf, errlen)) || (rc = resolve_base(a, models_dir, base, errbuf, errlen)))
        goto fail;
    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_WEIGHTS, dir);
    rc = scdb_st_open(path, &a->file, msg, sizeof msg);
    if (rc) {
        if (rc == SCDB_ENOTFOUND) scdb_errf(errbuf, errlen, "%s: no such file", path);
        else scdb_errf(errbuf, errlen, "%s", msg);   /* the reader names the file */
        goto fail;
    }
    for (int i = 0; i < scdb_st_count(a->file); i++)
        if ((rc = take_tensor(a, scdb_st_at(a->file, i), errbuf, errlen))) goto fail;
    if (a->n_t == 0) {
        scdb_errf(errbuf, errlen, "%s: holds no LoRA factor", path);
        rc = SCDB_ENOTFOUND;
        goto fail;
    }
    for (int i = 0; i < a->n_t; i++) {
        const scdb_lora_target *t = &a->t[i];
        if (!t->a || !t->b) {
            scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": layer %d %s has lora_%s but no lora_%s", t->layer,
                      SHORT[t->module], t->a ? "A" : "B", t->a ? "B" : "A");
            rc = SCDB_EFORMAT;
            goto fail;
        }
    }
    qsort(a->t, (size_t)a->n_t, sizeof *a->t, cmp_target);
    *out = a;
    return SCDB_OK;
fail:
    scdb_adapter_close(&a);
    return rc;
}

void scdb_adapter_close(scdb_adapter **pa)
{
    if (!pa || !*pa) return;
    scdb_st_close(&(*pa)->file);
    scdb_gguf_close(&(*pa)->gguf);
    free((*pa)->views);
    free((*pa)->owned);
    free((*pa)->t);
    free(*pa);
    *pa = NULL;
}

const scdb_lora_target *scdb_adapter_find(const scdb_adapter *a, int layer, int module)
{
    int lo = 0, hi = a->n_t;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const scdb_lora_target *t = &a->t[mid];
        if (t->layer < layer || (t->layer == layer && t->module < module)) lo = mid + 1;
        else hi = mid;
    }
    return lo < a->n_t && a->t[lo].layer == layer && a->t[lo].module == module ? &a->t[lo] : NULL;
}

scdb_err scdb_adapter_check_base(const scdb_adapter *a, int n_layers,
                                 const int64_t shape[SCDB_LORA_N_MODULES][2], char *errbuf,
                                 size_t errlen)
{
    for (int i = 0; i < a->n_t; i++) {
        const scdb_lora_target *t = &a->t[i];
        int64_t out = shape[t->module][0], in = shape[t->module][1];
        if (t->layer >= n_layers) {
            scdb_errf(errbuf, errlen, "%s: layer %d %s: the base has %d layers",
                      a->gguf ? a->dir : SCDB_ADAPTER_WEIGHTS, t->layer, SHORT[t->module], n_layers);
            return SCDB_ESHAPE;
        }
        if (t->a->shape[1] != in || t->b->shape[0] != out) {
            scdb_errf(errbuf, errlen, "%s: layer %d %s: lora_A [%lld, %lld] and lora_B "
                      "[%lld, %lld] do not fit the base's weight [%lld, %lld] (want A [%d, %lld], B [%lld, %d])",
                      a->gguf ? a->dir : SCDB_ADAPTER_WEIGHTS, t->layer, SHORT[t->module], (long long)t->a->shape[0], (long long)t->a->shape[1],
                      (long long)t->b->shape[0], (long long)t->b->shape[1], (long long)out, (long long)in,
                      a->r, (long long)in, (long long)out, a->r);
            return SCDB_ESHAPE;
        }
    }
    for (int l = 0; l < n_layers && !a->partial; l++)
        for (int m = 0; m < SCDB_LORA_N_MODULES; m++)
            if ((a->modules & (1u << m)) && !scdb_adapter_find(a, l, m)) {
                scdb_errf(errbuf, errlen, SCDB_ADAPTER_WEIGHTS ": no lora_A / lora_B for layer %d %s, which "
                          "target_modules names", l, SHORT[m]);
                return SCDB_ENOTFOUND;
            }
    return SCDB_OK;
}

scdb_err scdb_adapter_merge(const scdb_adapter *a, const scdb_lora_target *t, const float *w,
                            int64_t out, int64_t in, float *dst)
{
    int r = a->r;
    float *fa = malloc((size_t)r * (size_t)in * sizeof *fa);
    float *fb = malloc((size_t)out * (size_t)r * sizeof *fb);
    double *acc = malloc((size_t)in * sizeof *acc);
    scdb_err rc = SCDB_ENOMEM;
    if (!fa || !fb || !acc) goto done;
    if ((rc = scdb_st_to_f32(t->a, 0, (size_t)r * (size_t)in, fa)) ||
        (rc = scdb_st_to_f32(t->b, 0, (size_t)out * (size_t)r, fb)))
        goto done;
    double s = (double)a->scale;
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) acc[i] = 0.0;
        for (int k = 0; k < r; k++) {        /* k ascending for every element */
            double bk = (double)fb[o * r + k];
            const float *ak = fa + (size_t)k * (size_t)in;
            for (int64_t i = 0; i < in; i++) acc[i] += bk * (double)ak[i];
        }
        for (int64_t i = 0; i < in; i++)
            dst[o * in + i] = (float)((double)w[o * in + i] + s * acc[i]);
    }
    rc = SCDB_OK;
done:
    free(fa);
    free(fb);
    free(acc);
    return rc;
}
