/* ops_table.c -- the per-device tables of kernels.h's scdb_k_ops: host
 * memory and the CPU twins, or device memory and the CUDA twins (stubs that
 * return SCDB_EUNSUPPORTED in a build without the CUDA backend). */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

static scdb_err cpu_alloc(size_t bytes, void **out)
{
    /* 64-byte aligned, as device allocations (256) and cache views need */
    size_t n = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, n ? n : 64);
    return *out ? SCDB_OK : SCDB_ENOMEM;
}
static void cpu_release(void *p) { free(p); }
static scdb_err cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes) memmove(dst, src, bytes);
    return SCDB_OK;
}
static scdb_err cpu_zero(void *p, size_t bytes)
{
    if (bytes) memset(p, 0, bytes);
    return SCDB_OK;
}
static scdb_err cpu_sync(void) { return SCDB_OK; }
static scdb_err cpu_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    scdb_f16_to_f32_n(src, dst, n);
    return SCDB_OK;
}

static scdb_err cpu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t rows)
{
    for (size_t r = 0; r < rows && width; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return SCDB_OK;
}
/* the void CPU twins, as table entries */
static scdb_err cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C, int ldc)
{
    scdb_k_gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return SCDB_OK;
}
static scdb_err cpu_linear(const float *x, const float *W, int n, int in, int out, float *y)
{
    scdb_k_linear_cpu(x, W, n, in, out, y);
    return SCDB_OK;
}
static scdb_err cpu_rmsnorm(const float *x, const float *w, int r, int d, float eps, float *o)
{
    scdb_k_rmsnorm_cpu(x, w, r, d, eps, o);
    return SCDB_OK;
}
static scdb_err cpu_rope(float *x, int n, int h, int hd, const int32_t *pos, float th, int inv)
{
    scdb_k_rope_cpu(x, n, h, hd, pos, th, inv);
    return SCDB_OK;
}
static scdb_err cpu_swiglu(const float *g, const float *u, size_t n, float *o)
{
    scdb_k_swiglu_cpu(g, u, n, o);
    return SCDB_OK;
}
static scdb_err cpu_adam(float *w, const float *g, float *m, float *v, size_t n, float lr, int t)
{
    scdb_k_adam_step_cpu(w, g, m, v, n, lr, t);
    return SCDB_OK;
}

static const scdb_k_ops cpu_ops = {
    .device = SCDB_DEV_CPU,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .dcopy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .f16_to_f32 = cpu_f16_to_f32,
    .lowrank_decode = scdb_k_lowrank_decode_cpu,
    .aligner = scdb_k_aligner_cpu,
    .kv_regen = scdb_k_kv_regen_cpu,
    .dcopy2d = cpu_copy2d,
    .gemm = cpu_gemm,
    .linear = cpu_linear,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .attention = scdb_k_attention_cpu,
    .q4_decode = scdb_k_q4_decode_cpu,
    .adam_step = cpu_adam,
    .gather_rows = scdb_k_gather_rows_cpu,
    .bias_rows = scdb_k_bias_rows_cpu,
    .silu = scdb_k_silu_cpu,
    .silu_backward = scdb_k_silu_backward_cpu,
    .sub = scdb_k_sub_cpu,
    .colsum = scdb_k_colsum_cpu,
    .evict_features = scdb_k_evict_features_cpu,
    .select_topb = scdb_k_select_topb_cpu,
    .compact_rows = scdb_k_compact_rows_cpu,
    .acc_update = scdb_k_acc_update_cpu,
    .snapkv_score = scdb_k_snapkv_score_cpu,
};

static scdb_err cuda_upload(void *dst, const void *src, size_t bytes)
{
    return bytes ? scdb_k_cuda_copy(dst, src, bytes, 1) : SCDB_OK;
}
static scdb_err cuda_download(void *dst, const void *src, size_t bytes)
{
    return bytes ? scdb_k_cuda_copy(dst, src, bytes, 0) : SCDB_OK;
}
static scdb_err cuda_dcopy(void *dst, const void *src, size_t bytes)
{
    return bytes ? scdb_k_cuda_copy_d2d(dst, src, bytes) : SCDB_OK;
}
static scdb_err cuda_zero(void *p, size_t bytes)
{
    return bytes ? scdb_k_cuda_memset(p, 0, bytes) : SCDB_OK;
}

static const scdb_k_ops cuda_ops = {
    .device = SCDB_DEV_CUDA,
    .alloc = scdb_k_cuda_malloc,
    .release = scdb_k_cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .dcopy = cuda_dcopy,
    .zero = cuda_zero,
    .sync = scdb_k_cuda_sync,
    .f16_to_f32 = scdb_k_f16_to_f32_cuda,
    .lowrank_decode = scdb_k_lowrank_decode_cuda,
    .aligner = scdb_k_aligner_cuda,
    .kv_regen = scdb_k_kv_regen_cuda,
    .dcopy2d = scdb_k_cuda_copy2d,
    .gemm = scdb_k_gemm_cuda,
    .linear = scdb_k_linear_cuda,
    .rmsnorm = scdb_k_rmsnorm_cuda,
    .rope = scdb_k_rope_cuda,
    .swiglu = scdb_k_swiglu_cuda,
    .attention = scdb_k_attention_cuda,
    .q4_decode = scdb_k_q4_decode_cuda,
    .adam_step = scdb_k_adam_step_cuda,
    .gather_rows = scdb_k_gather_rows_cuda,
    .bias_rows = scdb_k_bias_rows_cuda,
    .silu = scdb_k_silu_cuda,
    .silu_backward = scdb_k_silu_backward_cuda,
    .sub = scdb_k_sub_cuda,
    .colsum = scdb_k_colsum_cuda,
    .evict_features = scdb_k_evict_features_cuda,
    .select_topb = scdb_k_select_topb_cuda,
    .compact_rows = scdb_k_compact_rows_cuda,
    .acc_update = scdb_k_acc_update_cuda,
    .snapkv_score = scdb_k_snapkv_score_cuda,
};

const scdb_k_ops *scdb_k_ops_get(scdb_device d)
{
    switch (d) {
    case SCDB_DEV_CPU: return &cpu_ops;
    case SCDB_DEV_CUDA: return &cuda_ops;
    default: return NULL;
    }
}
