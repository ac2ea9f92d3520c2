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
};

const scdb_k_ops *scdb_k_ops_get(scdb_device d)
{
    switch (d) {
    case SCDB_DEV_CPU: return &cpu_ops;
    case SCDB_DEV_CUDA: return &cuda_ops;
    default: return NULL;
    }
}
