/* train_ops.c — the CPU twins of the training ops (kernels.h): the
 * elementwise steps of codec/aligner.c's Adam loop, written as that loop
 * wrote them (the same expressions, the same order), so the aligner trains
 * the same on the CPU table as it always did. */
#include "kernels.h"

#include <math.h>
#include <string.h>

static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

scdb_err scdb_k_gather_rows_cpu(const float *src, int cols, const int32_t *idx, int n, float *dst)
{
    if (n < 0 || cols < 0 || (n > 0 && cols > 0 && (!src || !idx || !dst))) return SCDB_EINVAL;
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)i * cols, src + (size_t)idx[i] * cols, (size_t)cols * sizeof *dst);
    return SCDB_OK;
}

scdb_err scdb_k_bias_rows_cpu(float *dst, const float *b, int rows, int cols)
{
    if (rows < 0 || cols < 0 || (rows > 0 && cols > 0 && (!dst || !b))) return SCDB_EINVAL;
    for (int i = 0; i < rows; i++) memcpy(dst + (size_t)i * cols, b, (size_t)cols * sizeof *dst);
    return SCDB_OK;
}

scdb_err scdb_k_silu_cpu(const float *x, size_t n, float *y)
{
    if (n && (!x || !y)) return SCDB_EINVAL;
    for (size_t i = 0; i < n; i++) y[i] = x[i] * sigm(x[i]);
    return SCDB_OK;
}

scdb_err scdb_k_silu_backward_cpu(float *g, const float *x, size_t n)
{
    if (n && (!g || !x)) return SCDB_EINVAL;
    for (size_t i = 0; i < n; i++) {
        float sg = sigm(x[i]);
        g[i] *= sg * (1.0f + x[i] * (1.0f - sg));
    }
    return SCDB_OK;
}

scdb_err scdb_k_sub_cpu(float *x, const float *y, size_t n)
{
    if (n && (!x || !y)) return SCDB_EINVAL;
    for (size_t i = 0; i < n; i++) x[i] -= y[i];
    return SCDB_OK;
}

scdb_err scdb_k_colsum_cpu(const float *x, int rows, int cols, float *out)
{
    if (rows < 0 || cols < 0 || (cols > 0 && (!out || (rows > 0 && !x)))) return SCDB_EINVAL;
    memset(out, 0, (size_t)cols * sizeof *out);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) out[j] += x[(size_t)i * cols + j];
    return SCDB_OK;
}
