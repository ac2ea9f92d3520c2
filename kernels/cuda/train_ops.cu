/* train_ops.cu — the CUDA twins of the training ops (kernels.h): one thread
 * per element (per column for colsum, which adds its rows in order, as the
 * CPU twin does). */
#include "cuda_internal.h"

__device__ static float dsigm(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void gather_rows_f_kernel(const float *src, int cols, const int32_t *idx, int n,
                                     float *dst)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)n * cols) return;
    size_t i = k / cols, j = k % cols;
    dst[k] = src[(size_t)idx[i] * cols + j];
}

__global__ void bias_rows_kernel(float *dst, const float *b, int rows, int cols)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < (size_t)rows * cols) dst[k] = b[k % cols];
}

__global__ void silu_kernel(const float *x, size_t n, float *y)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fmul_rn(x[i], dsigm(x[i]));
}

__global__ void silu_backward_kernel(float *g, const float *x, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sg = dsigm(x[i]);
    g[i] = __fmul_rn(g[i], __fmul_rn(sg, __fadd_rn(1.0f, __fmul_rn(x[i], __fsub_rn(1.0f, sg)))));
}

__global__ void sub_kernel(float *x, const float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] -= y[i];
}

__global__ void colsum_kernel(const float *x, int rows, int cols, float *out)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.0f;
    for (int i = 0; i < rows; i++) s = __fadd_rn(s, x[(size_t)i * cols + j]);
    out[j] = s;
}

#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

extern "C" scdb_err scdb_k_gather_rows_cuda(const float *src, int cols, const int32_t *idx, int n,
                                            float *dst)
{
    if (n < 0 || cols < 0 || (n > 0 && cols > 0 && (!src || !idx || !dst))) return SCDB_EINVAL;
    size_t total = (size_t)n * cols;
    if (!total) return SCDB_OK;
    gather_rows_f_kernel<<<kn_cuda_blocks(total), 256>>>(src, cols, idx, n, dst);
    LAUNCH_CHECK();
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_bias_rows_cuda(float *dst, const float *b, int rows, int cols)
{
    if (rows < 0 || cols < 0 || (rows > 0 && cols > 0 && (!dst || !b))) return SCDB_EINVAL;
    size_t total = (size_t)rows * cols;
    if (!total) return SCDB_OK;
    bias_rows_kernel<<<kn_cuda_blocks(total), 256>>>(dst, b, rows, cols);
    LAUNCH_CHECK();
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_silu_cuda(const float *x, size_t n, float *y)
{
    if (n && (!x || !y)) return SCDB_EINVAL;
    if (!n) return SCDB_OK;
    silu_kernel<<<kn_cuda_blocks(n), 256>>>(x, n, y);
    LAUNCH_CHECK();
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_silu_backward_cuda(float *g, const float *x, size_t n)
{
    if (n && (!g || !x)) return SCDB_EINVAL;
    if (!n) return SCDB_OK;
    silu_backward_kernel<<<kn_cuda_blocks(n), 256>>>(g, x, n);
    LAUNCH_CHECK();
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_sub_cuda(float *x, const float *y, size_t n)
{
    if (n && (!x || !y)) return SCDB_EINVAL;
    if (!n) return SCDB_OK;
    sub_kernel<<<kn_cuda_blocks(n), 256>>>(x, y, n);
    LAUNCH_CHECK();
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_colsum_cuda(const float *x, int rows, int cols, float *out)
{
    if (rows < 0 || cols < 0 || (cols > 0 && (!out || (rows > 0 && !x)))) return SCDB_EINVAL;
    if (!cols) return SCDB_OK;
    colsum_kernel<<<kn_cuda_blocks((size_t)cols), 256>>>(x, rows, cols, out);
    LAUNCH_CHECK();
    return SCDB_OK;
}
