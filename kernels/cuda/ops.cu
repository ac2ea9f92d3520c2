/* ops.cu — the CUDA backend: the same ops as cpu/, on device pointers.
 *
 * GEMM goes through cuBLAS (row-major expressed as the transposed
 * column-major product); the rest are plain one-thread-per-element or
 * one-block-per-row kernels, written to be obviously equal to their CPU twins
 * (tests/test_kernels_cuda.c compares them op by op).  All pointers passed to
 * *_cuda functions are device pointers.  Errors come back as scdb_err; the
 * checked-call macros log the failing call with file and line. */
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <pthread.h>

#include "cuda_internal.h"

static cublasHandle_t g_blas;
static cublasStatus_t g_blas_status = CUBLAS_STATUS_NOT_INITIALIZED;
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;
static void blas_init(void) { g_blas_status = cublasCreate(&g_blas); }

scdb_err kn_cuda_blas(cublasHandle_t *h)
{
    pthread_once(&g_blas_once, blas_init);
    if (g_blas_status != CUBLAS_STATUS_SUCCESS) {
        scdb_error("cublasCreate failed: status %d", (int)g_blas_status);
        return SCDB_EDEVICE;
    }
    *h = g_blas;
    return SCDB_OK;
}

extern "C" int scdb_k_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

extern "C" scdb_err scdb_k_cuda_malloc(size_t bytes, void **out)
{
    *out = NULL;
    CUDA_CHECK(cudaMalloc(out, bytes ? bytes : 1));
    return SCDB_OK;
}

extern "C" void scdb_k_cuda_free(void *p) { if (p) cudaFree(p); }

extern "C" scdb_err scdb_k_cuda_copy(void *dst, const void *src, size_t bytes, int to_device)
{
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_cuda_copy_d2d(void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                                       size_t width, size_t rows)
{
    if (!width || !rows) return SCDB_OK;
    CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice));
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_gemm_cuda(int trans_a, int trans_b, int M, int N, int K, float alpha,
                                     const float *A, int lda, const float *B, int ldb,
                                     float beta, float *C, int ldc)
{
    cublasHandle_t h;
    scdb_err rc = kn_cuda_blas(&h);
    if (rc) return rc;
    if (M <= 0 || N <= 0) return SCDB_OK;
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
    CUBLAS_CHECK(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                             trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                             B, ldb, A, lda, &beta, C, ldc));
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_linear_cuda(const float *x, const float *W, int n, int in, int out, float *y)
{
    return scdb_k_gemm_cuda(0, 1, n, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
}

/* ---------------------------------------------------------------- RMSNorm */

__global__ void rmsnorm_kernel(const float *x, const float *w, int dim, float eps, float *out)
{
    extern __shared__ float red[];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    red[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = rsqrtf(red[0] / dim + eps);
    __syncthreads();
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * inv * w[i];
}

extern "C" scdb_err scdb_k_rmsnorm_cuda(const float *x, const float *w, int n_rows, int dim,
                                        float eps, float *out)
{
    if (n_rows <= 0) return SCDB_OK;
    rmsnorm_kernel<<<n_rows, 128, 128 * sizeof(float)>>>(x, w, dim, eps, out);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- RoPE */

__global__ void rope_kernel(float *x, int n_tok, int n_heads, int head_dim,
                            const int32_t *pos, float theta, int inverse)
{
    int half = head_dim / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)n_tok * n_heads * half;
    if (idx >= total) return;
    int i = (int)(idx % half);
    size_t th = idx / half;             /* token * n_heads + head */
    int t = (int)(th / n_heads);
    float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
    float ang = (float)pos[t] * inv_freq;
    float c = cosf(ang), s = sinf(ang);
    if (inverse) s = -s;
    float *xh = x + th * head_dim;
    float a = xh[i], b = xh[i + half];
    xh[i] = a * c - b * s;
    xh[i + half] = a * s + b * c;
}

extern "C" scdb_err scdb_k_rope_cuda(float *x, int n_tok, int n_heads, int head_dim,
                                     const int32_t *pos, float theta, int inverse)
{
    size_t total = (size_t)n_tok * n_heads * (head_dim / 2);
    if (total == 0) return SCDB_OK;
    rope_kernel<<<(unsigned)((total + 255) / 256), 256>>>(x, n_tok, n_heads, head_dim, pos, theta, inverse);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- softmax */

__device__ float block_reduce(float v, float *red, int is_max)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] = is_max ? fmaxf(red[threadIdx.x], red[threadIdx.x + s])
                                      : red[threadIdx.x] + red[threadIdx.x + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__global__ void softmax_kernel(float *x, int n)
{
    extern __shared__ float red[];
    float *row = x + (size_t)blockIdx.x * n;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_reduce(mx, red, 1);
    if (mx == -INFINITY) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { row[i] = expf(row[i] - mx); sum += row[i]; }
    sum = block_reduce(sum, red, 0);
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] /= sum;
}

extern "C" scdb_err scdb_k_softmax_cuda(float *x, int n_rows, int n)
{
    if (n_rows <= 0 || n <= 0) return SCDB_OK;
    softmax_kernel<<<n_rows, 128, 128 * sizeof(float)>>>(x, n);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- SwiGLU */

__global__ void swiglu_kernel(const float *g, const float *u, size_t n, float *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

extern "C" scdb_err scdb_k_swiglu_cuda(const float *gate, const float *up, size_t n, float *out)
{
    if (n == 0) return SCDB_OK;
    swiglu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(gate, up, n, out);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- f16 */

__global__ void f32_to_f16_kernel(const float *s, __half *d, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __float2half_rn(s[i]);
}

__global__ void f16_to_f32_kernel(const __half *s, float *d, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __half2float(s[i]);
}

extern "C" scdb_err scdb_k_f32_to_f16_cuda(const float *src, uint16_t *dst, size_t n)
{
    if (n == 0) return SCDB_OK;
    f32_to_f16_kernel<<<(unsigned)((n + 255) / 256), 256>>>(src, (__half *)dst, n);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_f16_to_f32_cuda(const uint16_t *src, float *dst, size_t n)
{
    if (n == 0) return SCDB_OK;
    f16_to_f32_kernel<<<(unsigned)((n + 255) / 256), 256>>>((const __half *)src, dst, n);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- attention
 * One block per (query, head); scores for all slots in shared memory. */

__global__ void attention_kernel(const float *q, const int32_t *q_pos, int n_q, int n_heads,
                                 const float *k, const float *v, const int32_t *slot_pos,
                                 int n_slots, int n_kv_heads, int head_dim, float *out,
                                 float *probs)
{
    extern __shared__ float sh[];
    float *s = sh;                  /* [n_slots] */
    float *red = sh + n_slots;      /* [blockDim.x] */
    int i = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
    int g = h / (n_heads / n_kv_heads);
    const float *qh = q + ((size_t)i * n_heads + h) * head_dim;
    float scale = rsqrtf((float)head_dim);
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n_slots; j += blockDim.x) {
        float d = -INFINITY;
        if (slot_pos[j] <= q_pos[i]) {
            const float *kj = k + ((size_t)j * n_kv_heads + g) * head_dim;
            d = 0.0f;
            for (int e = 0; e < head_dim; e++) d += qh[e] * kj[e];
            d *= scale;
        }
        s[j] = d;
        mx = fmaxf(mx, d);
    }
    mx = block_reduce(mx, red, 1);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n_slots; j += blockDim.x) {
        float p = mx == -INFINITY || s[j] == -INFINITY ? 0.0f : expf(s[j] - mx);
        s[j] = p;
        sum += p;
    }
    sum = block_reduce(sum, red, 0);
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int j = threadIdx.x; j < n_slots; j += blockDim.x) {
        s[j] *= inv;
        if (probs) probs[((size_t)h * n_q + i) * n_slots + j] = s[j];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < n_slots; j++) o += s[j] * v[((size_t)j * n_kv_heads + g) * head_dim + e];
        out[((size_t)i * n_heads + h) * head_dim + e] = o;
    }
}

extern "C" scdb_err scdb_k_attention_cuda(const float *q, const int32_t *q_pos, int n_q,
                                          int n_heads, const float *k, const float *v,
                                          const int32_t *slot_pos, int n_slots,
                                          int n_kv_heads, int head_dim, float *out,
                                          float *probs, float *scratch)
{
    (void)scratch;
    if (n_q <= 0) return SCDB_OK;
    if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || n_slots < 0 ||
        n_heads % n_kv_heads != 0)
        return SCDB_EINVAL;
    if (n_slots == 0) {
        CUDA_CHECK(cudaMemset(out, 0, (size_t)n_q * n_heads * head_dim * sizeof(float)));
        return SCDB_OK;
    }
    size_t shmem = ((size_t)n_slots + 128) * sizeof(float);
    if (shmem > 48 * 1024) return SCDB_EUNSUPPORTED;   /* > ~12k slots: not in this kernel */
    attention_kernel<<<n_q * n_heads, 128, shmem>>>(q, q_pos, n_q, n_heads, k, v, slot_pos,
                                                    n_slots, n_kv_heads, head_dim, out, probs);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- Adam
 * scdb_k_adam_step_cpu's arithmetic (bias-corrected, beta1 0.9, beta2
 * 0.999, eps 1e-8); the bias corrections are computed once on the host. */

__global__ void adam_kernel(float *w, const float *g, float *m, float *v, size_t n, float lr,
                            float c1, float c2)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
}

extern "C" scdb_err scdb_k_adam_step_cuda(float *w, const float *g, float *m, float *v, size_t n,
                                          float lr, int t)
{
    if (n == 0) return SCDB_OK;
    if (!w || !g || !m || !v || t < 1) return SCDB_EINVAL;
    float c1 = 1.0f - powf(0.9f, (float)t), c2 = 1.0f - powf(0.999f, (float)t);
    adam_kernel<<<kn_cuda_blocks(n), 256>>>(w, g, m, v, n, lr, c1, c2);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_cuda_memset(void *p, int value, size_t bytes)
{
    CUDA_CHECK(cudaMemsetAsync(p, value, bytes, 0));
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_cuda_ipc_handle(void *dev_ptr, uint8_t out[SCDB_CUDA_IPC_HANDLE_BYTES])
{
    cudaIpcMemHandle_t h;
    static_assert(sizeof h == SCDB_CUDA_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t is 64 bytes");
    if (!dev_ptr || !out) return SCDB_EINVAL;
    CUDA_CHECK(cudaIpcGetMemHandle(&h, dev_ptr));
    memcpy(out, &h, sizeof h);
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_cuda_pci_bus_id(int dev, char *buf, size_t len)
{
    if (!buf || len < 2) return SCDB_EINVAL;
    CUDA_CHECK(cudaDeviceGetPCIBusId(buf, (int)(len > 256 ? 256 : len), dev));
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_cuda_sync(void)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    return SCDB_OK;
}
