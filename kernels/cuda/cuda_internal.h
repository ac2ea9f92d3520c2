/* cuda_internal.h — shared by the kernels/cuda/ files only: the checked-call
 * macros (log the failing call with file and line, return SCDB_EDEVICE) and
 * the process-wide cuBLAS handle. */
#ifndef SCDB_CUDA_INTERNAL_H
#define SCDB_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "kernels.h"
}

#define CUDA_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    scdb_error("%s failed: %s", #call, cudaGetErrorString(e_)); return SCDB_EDEVICE; } } while (0)
#define CUBLAS_CHECK(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    scdb_error("%s failed: cuBLAS status %d", #call, (int)s_); return SCDB_EDEVICE; } } while (0)

/* The cuBLAS handle, created once (thread-safe).  SCDB_EDEVICE. */
scdb_err kn_cuda_blas(cublasHandle_t *h);

/* Blocks of 256 threads covering n elements. */
static inline unsigned kn_cuda_blocks(size_t n) { return (unsigned)((n + 255) / 256); }

#endif
