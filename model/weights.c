/* weights.c — binding one checked safetensors tensor to a model's f32
 * weight pointer, for both checkpoint layouts (model_internal.h). */
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

static void shape_str(const int64_t *shape, int ndim, char *dst, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(dst + o, cap - o, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(dst + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(dst + o, cap - o, "]");
}

scdb_err md_model_bind(scdb_model *m, const scdb_st_tensor *t, const char *name,
                         const char *where, int64_t d0, int64_t d1,
                         const float **out, char *errbuf, size_t errlen)
{
    int64_t want[2] = {d0, d1};
    int ndim = d1 > 0 ? 2 : 1;

    if (!t) { scdb_errf(errbuf, errlen, "tensor '%s' missing from %s", name, where); return SCDB_ENOTFOUND; }
    if (t->ndim != ndim || t->shape[0] != want[0] || (ndim == 2 && t->shape[1] != want[1])) {
        char has[128], exp[64];
        shape_str(t->shape, t->ndim, has, sizeof has);
        shape_str(want, ndim, exp, sizeof exp);
        scdb_errf(errbuf, errlen, "tensor '%s' in %s has shape %s, config implies %s", name, where, has, exp);
        return SCDB_ESHAPE;
    }
    if (t->dtype == SCDB_F32) {
        *out = t->data;
        return SCDB_OK;
    }
    if (t->dtype != SCDB_F16 && t->dtype != SCDB_BF16) {
        scdb_errf(errbuf, errlen, "tensor '%s' in %s has dtype %s, want F32, F16 or BF16", name, where,
                        scdb_dtype_name(t->dtype));
        return SCDB_EDTYPE;
    }
    size_t n = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    float *f = malloc(n * sizeof *f);
    float **grown = realloc(m->converted, (size_t)(m->n_converted + 1) * sizeof *grown);
    if (!f || !grown) { free(f); if (grown) m->converted = grown; return SCDB_ENOMEM; }
    m->converted = grown;
    m->converted[m->n_converted++] = f;
    if (t->dtype == SCDB_F16) scdb_f16_to_f32_n(t->data, f, n);
    else scdb_bf16_to_f32_n(t->data, f, n);
    *out = f;
    return SCDB_OK;
}

float *md_model_owned(scdb_model *m, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    float **g = realloc(m->converted, (size_t)(m->n_converted + 1) * sizeof *g);
    if (g) m->converted = g;
    if (!f || !g) { free(f); return NULL; }
    m->converted[m->n_converted++] = f;
    return f;
}

scdb_err md_model_add_file(scdb_model *m, scdb_st_file **f)
{
    scdb_st_file **grown = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *grown);
    if (!grown) { scdb_st_close(f); return SCDB_ENOMEM; }
    m->files = grown;
    m->files[m->n_files++] = *f;
    *f = NULL;
    return SCDB_OK;
}
