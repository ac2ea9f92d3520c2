/* tensor.c — tensor allocation and dtype conversion (CPU). */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

static scdb_err check_shape(scdb_dtype dt, scdb_device dev, int ndim,
                            const int64_t *shape)
{
    if (ndim < 0 || ndim > SCDB_MAX_DIMS || (ndim > 0 && !shape)) return SCDB_EINVAL;
    if (scdb_dtype_size(dt) == 0) return SCDB_EDTYPE;
    if (dev != SCDB_DEV_CPU) return SCDB_EUNSUPPORTED;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || shape[i] > ((int64_t)1 << 40)) return SCDB_EINVAL;
    return SCDB_OK;
}

int64_t scdb_tensor_numel(const scdb_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t scdb_tensor_nbytes(const scdb_tensor *t)
{
    return (size_t)scdb_tensor_numel(t) * scdb_dtype_size(t->dtype);
}

static scdb_err tensor_make(scdb_dtype dt, scdb_device dev, int ndim,
                            const int64_t *shape, void *data, scdb_tensor **out)
{
    scdb_err rc = check_shape(dt, dev, ndim, shape);
    scdb_tensor *t;

    *out = NULL;
    if (rc) return rc;
    t = calloc(1, sizeof *t);
    if (!t) return SCDB_ENOMEM;
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (data) {
        t->data = data;
    } else {
        size_t nb = scdb_tensor_nbytes(t);
        t->data = calloc(nb ? nb : 1, 1);
        if (!t->data) { free(t); return SCDB_ENOMEM; }
        t->owns_data = 1;
    }
    *out = t;
    return SCDB_OK;
}

scdb_err scdb_tensor_new(scdb_dtype dt, scdb_device dev, int ndim,
                         const int64_t *shape, scdb_tensor **out)
{
    return tensor_make(dt, dev, ndim, shape, NULL, out);
}

scdb_err scdb_tensor_wrap(scdb_dtype dt, scdb_device dev, int ndim,
                          const int64_t *shape, void *data, scdb_tensor **out)
{
    if (!data) { *out = NULL; return SCDB_EINVAL; }
    return tensor_make(dt, dev, ndim, shape, data, out);
}

void scdb_tensor_free(scdb_tensor **t)
{
    if (!t || !*t) return;
    if ((*t)->owns_data) free((*t)->data);
    free(*t);
    *t = NULL;
}

static float load(scdb_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case SCDB_F32: return ((const float *)p)[i];
    case SCDB_F16: return scdb_f16_to_f32(((const uint16_t *)p)[i]);
    case SCDB_BF16: return scdb_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0f;
    }
}

static void store(scdb_dtype dt, void *p, size_t i, float v)
{
    switch (dt) {
    case SCDB_F32: ((float *)p)[i] = v; break;
    case SCDB_F16: ((uint16_t *)p)[i] = scdb_f32_to_f16(v); break;
    case SCDB_BF16: ((uint16_t *)p)[i] = scdb_f32_to_bf16(v); break;
    default: break;
    }
}

scdb_err scdb_tensor_convert(const scdb_tensor *src, scdb_tensor *dst)
{
    size_t n;

    if (!src || !dst) return SCDB_EINVAL;
    if (src->device != SCDB_DEV_CPU || dst->device != SCDB_DEV_CPU)
        return SCDB_EUNSUPPORTED;
    if (src->dtype == SCDB_I32 || dst->dtype == SCDB_I32) {
        if (src->dtype != dst->dtype) return SCDB_EDTYPE;
    }
    if (scdb_dtype_size(src->dtype) == 0 || scdb_dtype_size(dst->dtype) == 0)
        return SCDB_EDTYPE;
    if (scdb_tensor_numel(src) != scdb_tensor_numel(dst)) return SCDB_ESHAPE;
    n = (size_t)scdb_tensor_numel(src);
    if (src->dtype == dst->dtype) {
        memmove(dst->data, src->data, n * scdb_dtype_size(src->dtype));
        return SCDB_OK;
    }
    for (size_t i = 0; i < n; i++) store(dst->dtype, dst->data, i, load(src->dtype, src->data, i));
    return SCDB_OK;
}
