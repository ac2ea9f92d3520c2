/* adapter.c — a PEFT LoRA adapter applied to its loaded base
 * (schema/peft_adapter.h is the format and the merge rule; model.h,
 * scdb_model_load_ex, the two apply modes).  model.c opens the adapter and
 * loads the base, then calls here; the forward calls md_lora_add after
 * each projection, which does nothing unless the model is low-rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "kernels.h"
#include "model_internal.h"
#include "peft_adapter.h"

/* The base's weight slot of a projection. */
static const float **slot(scdb_layer_weights *w, int module)
{
    switch (module) {
    case SCDB_LORA_Q: return &w->wq;
    case SCDB_LORA_K: return &w->wk;
    case SCDB_LORA_V: return &w->wv;
    case SCDB_LORA_O: return &w->wo;
    case SCDB_LORA_GATE: return &w->w1;
    case SCDB_LORA_UP: return &w->w3;
    default: return &w->w2;
    }
}

void scdb_model_proj_shapes(const scdb_model_config *c, int64_t shape[SCDB_LORA_N_MODULES][2])
{
    int64_t d = c->d_model, qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c), ff = c->d_ff;
    const int64_t s[SCDB_LORA_N_MODULES][2] = {{qd, d}, {kvd, d}, {kvd, d}, {d, qd},
                                               {ff, d}, {ff, d},  {d, ff}};
    memcpy(shape, s, sizeof s);
}

scdb_err md_adapter_apply(scdb_model *m, const scdb_adapter *a, scdb_lora_apply mode,
                          char *errbuf, size_t errlen)
{
    int64_t shape[SCDB_LORA_N_MODULES][2];
    scdb_err rc;

    scdb_model_proj_shapes(&m->cfg, shape);
    if ((rc = scdb_adapter_check_base(a, m->cfg.n_layers, (const int64_t(*)[2])shape, errbuf, errlen)))
        return rc;
    if (mode == SCDB_LORA_LOWRANK) {
        m->lowrank = calloc((size_t)m->cfg.n_layers * SCDB_LORA_N_MODULES, sizeof *m->lowrank);
        if (!m->lowrank) return SCDB_ENOMEM;
    }
    for (int i = 0; i < a->n_t; i++) {
        const scdb_lora_target *t = &a->t[i];
        int64_t out = shape[t->module][0], in = shape[t->module][1];
        const float **w = slot(&m->layers[t->layer], t->module);
        if (mode == SCDB_LORA_MERGED) {
            float *dst = md_model_owned(m, (size_t)(out * in));
            if (!dst) return SCDB_ENOMEM;
            if ((rc = scdb_adapter_merge(a, t, *w, out, in, dst))) return rc;
            *w = dst;
            continue;
        }
        float *fa = md_model_owned(m, (size_t)(a->r * in)), *fb = fa ? md_model_owned(m, (size_t)(out * a->r)) : NULL;
        if (!fb) return SCDB_ENOMEM;
        if ((rc = scdb_st_to_f32(t->a, 0, (size_t)(a->r * in), fa)) ||
            (rc = scdb_st_to_f32(t->b, 0, (size_t)(out * a->r), fb)))
            return rc;
        m->lowrank[t->layer * SCDB_LORA_N_MODULES + t->module] = (md_lora_lowrank){fa, fb};
    }
    m->lora = mode;
    m->lora_r = a->r;
    m->lora_scale = a->scale;
    return SCDB_OK;
}

void md_lora_add(const scdb_model *m, int layer, int module, const float *x, int n, int in,
                 int out, float *y)
{
    if (!m->lowrank) return;
    const md_lora_lowrank *f = &m->lowrank[layer * SCDB_LORA_N_MODULES + module];
    if (!f->a) return;
    float t[4096];                     /* rows of x A^T, a chunk at a time (r <= 4096) */
    int r = m->lora_r, rows = 4096 / r;
    for (int i = 0; i < n; i += rows) {
        int k = n - i < rows ? n - i : rows;
        scdb_k_linear_cpu(x + (size_t)i * in, f->a, k, in, r, t);            /* t = x A^T */
        scdb_k_gemm_cpu(0, 1, k, out, r, m->lora_scale, t, r, f->b, r, 1.0f, y + (size_t)i * out,
                        out);                                                  /* y += s t B^T */
    }
}

void md_adapter_rename(scdb_model_config *c, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    if (n - b > 5 && !strncmp(dir + n - 5, ".gguf", 5)) n -= 5;    /* a GGUF adapter file */
    snprintf(c->parent, sizeof c->parent, "%s", c->name);
    snprintf(c->name, sizeof c->name, "%.*s", (int)(n - b), dir + b);
    snprintf(c->finetune, sizeof c->finetune, "lora");
}

scdb_err scdb_model_config_load_any(const char *path, const char *models_dir,
                                    scdb_model_config *out, char *errbuf, size_t errlen)
{
    char dir[1024], cfg[1100];
    struct stat st;
    scdb_adapter *a = NULL;
    size_t n;
    scdb_err rc;

    if (!path || !out) return SCDB_EINVAL;
    n = strlen(path);
    if (n >= sizeof dir) return SCDB_EINVAL;
    memcpy(dir, path, n + 1);
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode) && scdb_adapter_is(path)) {
        /* a GGUF adapter file: it is the adapter (dir = path) */
    } else if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {      /* a file: its directory */
        const char *base = strrchr(path, '/');
        if (strcmp(base ? base + 1 : path, SCDB_ADAPTER_CONFIG)) return scdb_model_config_load(path, out, errbuf, errlen);
        if (base) dir[base - path] = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    if (!scdb_adapter_is(dir)) {
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        return scdb_model_config_load(cfg, out, errbuf, errlen);
    }
    if ((rc = scdb_adapter_open(dir, models_dir, &a, errbuf, errlen))) return rc;
    if (scdb_gguf_is_file(a->base_dir)) snprintf(cfg, sizeof cfg, "%s", a->base_dir);
    else snprintf(cfg, sizeof cfg, "%s/config.json", a->base_dir);
    if ((rc = scdb_model_config_load(cfg, out, errbuf, errlen))) goto done;
    int64_t shape[SCDB_LORA_N_MODULES][2];
    scdb_model_proj_shapes(out, shape);
    if ((rc = scdb_adapter_check_base(a, out->n_layers, (const int64_t(*)[2])shape, errbuf, errlen)))
        goto done;
    md_adapter_rename(out, dir);
done:
    scdb_adapter_close(&a);
    return rc;
}
