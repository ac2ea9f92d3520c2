/*
 * kernels.h — scdb's compute interface: tensors, dtype conversion, and the
 * handful of ops a Llama-style transformer and the SCD codec need.
 *
 * This is the only header that knows about devices.  Every op has a CPU twin
 * (`scdb_k_<op>_cpu`, plain loops or OpenBLAS) that is the reference; a CUDA
 * twin with the same signature (`scdb_k_<op>_cuda`, kernels/cuda/) is built
 * when nvcc exists and is tested against the CPU twin on a GPU machine.
 * Activations are f32 and row-major: a matrix [rows, cols] has element
 * (r, c) at r*cols + c.  Weights follow PyTorch's nn.Linear: W is
 * [out_features, in_features] and y = x W^T.
 *
 * The slot-indexed KV cache
 * -------------------------
 * One layout is used everywhere (the reference model, broker arenas, decoded
 * prefixes), so decoded KV lands where attention reads it, with no copy:
 *
 *   pos  int32 [capacity]                  absolute position of each slot
 *   K    f32   [n_layers][capacity][kv_dim] after RoPE at pos[slot]
 *   V    f32   [n_layers][capacity][kv_dim]
 *                                    kv_dim = n_kv_heads * head_dim
 *
 *   slot:   0    1    2    3   ...  n-1 | n ... capacity-1
 *   pos:    0    1    2    7   ...  511 | (free)
 *
 * Slots [0, n) are live.  A query at absolute position p attends to every
 * live slot whose pos <= p (causal by position, not by slot), so a cache that
 * was compacted by eviction — slots gathered in order, original positions
 * kept — is attended exactly like the full one minus the evicted tokens.
 * The buffer can be caller-provided memory (shared memory arenas): see
 * scdb_kv_cache_bytes() and scdb_kv_cache_view().
 *
 * Attention probabilities, when requested, are laid out
 *   probs f32 [n_heads][n_q][n_slots]    (0 where a slot is masked)
 */
#ifndef SCDB_KERNELS_H
#define SCDB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_common.h"

/* ---------------------------------------------------------------- tensors */

typedef enum scdb_device { SCDB_DEV_CPU = 0, SCDB_DEV_CUDA } scdb_device;

#define SCDB_MAX_DIMS 4

typedef struct scdb_tensor {
    scdb_dtype dtype;
    scdb_device device;
    int ndim;
    int64_t shape[SCDB_MAX_DIMS];
    void *data;
    int owns_data;       /* data freed by scdb_tensor_free */
} scdb_tensor;

/* New zero-filled tensor.  SCDB_EINVAL (ndim, shape), SCDB_EDTYPE,
 * SCDB_ENOMEM, SCDB_EUNSUPPORTED (device not built / not present). */
scdb_err scdb_tensor_new(scdb_dtype dt, scdb_device dev, int ndim,
                         const int64_t *shape, scdb_tensor **out);
/* Wrap caller memory (not freed by scdb_tensor_free). */
scdb_err scdb_tensor_wrap(scdb_dtype dt, scdb_device dev, int ndim,
                          const int64_t *shape, void *data, scdb_tensor **out);
void scdb_tensor_free(scdb_tensor **t);
int64_t scdb_tensor_numel(const scdb_tensor *t);
size_t scdb_tensor_nbytes(const scdb_tensor *t);
/* Convert src into dst (same numel, any dtypes among F32/F16/BF16; CPU).
 * SCDB_ESHAPE, SCDB_EDTYPE, SCDB_EUNSUPPORTED. */
scdb_err scdb_tensor_convert(const scdb_tensor *src, scdb_tensor *dst);

/* ------------------------------------------------------ f16 / bf16 scalars
 * IEEE 754 binary16 with round-to-nearest-even, subnormals, inf and NaN;
 * bfloat16 with round-to-nearest-even (NaN stays NaN). */
uint16_t scdb_f32_to_f16(float f);
float scdb_f16_to_f32(uint16_t h);
uint16_t scdb_f32_to_bf16(float f);
float scdb_bf16_to_f32(uint16_t h);
void scdb_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void scdb_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void scdb_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void scdb_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* ---------------------------------------------------------------- ops (CPU)
 * Shapes are given in elements; pointers must not alias unless stated. */

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, through cblas_sgemm.
 * op(X) = X or X^T per trans_a / trans_b; lda/ldb/ldc are row strides. */
void scdb_k_gemm_cpu(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc);

/* y[n, out] = x[n, in] W^T  (W [out, in], nn.Linear without bias). */
void scdb_k_linear_cpu(const float *x, const float *W, int n, int in, int out,
                       float *y);

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of length dim.
 * out may equal x. */
void scdb_k_rmsnorm_cpu(const float *x, const float *w, int n_rows, int dim,
                        float eps, float *out);

/* Rotary embedding in place on x [n_tok, n_heads, head_dim] ("rotate half"
 * convention: pairs (i, i + head_dim/2), angle pos * theta^(-2i/head_dim)).
 * inverse != 0 undoes it (rotation by -angle).  head_dim must be even. */
void scdb_k_rope_cpu(float *x, int n_tok, int n_heads, int head_dim,
                     const int32_t *pos, float theta, int inverse);

/* Numerically stable softmax of each row of x [n_rows, n], in place.
 * -INFINITY entries get probability 0; an all -INFINITY row becomes 0s. */
void scdb_k_softmax_cpu(float *x, int n_rows, int n);

/* out = silu(gate) * up, elementwise (SwiGLU); out may equal gate. */
void scdb_k_swiglu_cpu(const float *gate, const float *up, size_t n, float *out);

/* Causal grouped-query attention of n_q queries over n_slots cached slots.
 *   q        [n_q, n_heads, head_dim], after RoPE at q_pos
 *   k, v     [n_slots, n_kv_heads, head_dim] (one layer of a KV cache)
 *   q_pos    [n_q] absolute positions; slot_pos [n_slots]
 *   out      [n_q, n_heads, head_dim]
 *   probs    NULL, or [n_heads][n_q][n_slots] receives the softmax weights
 *   scratch  NULL (allocated internally) or n_q * n_slots floats
 * Query head h reads KV head h / (n_heads / n_kv_heads).  Slot j is visible
 * to query i iff slot_pos[j] <= q_pos[i].  Scale 1/sqrt(head_dim).
 * SCDB_EINVAL (n_heads not a multiple of n_kv_heads), SCDB_ENOMEM. */
scdb_err scdb_k_attention_cpu(const float *q, const int32_t *q_pos, int n_q,
                              int n_heads, const float *k, const float *v,
                              const int32_t *slot_pos, int n_slots,
                              int n_kv_heads, int head_dim, float *out,
                              float *probs, float *scratch);

/* ---------------------------------------------------------------- ops (CUDA)
 * Twins of the CPU ops on device pointers, built when nvcc exists
 * (kernels/cuda/).  In a build without CUDA they exist and return
 * SCDB_EUNSUPPORTED, and scdb_k_cuda_device_count() is 0.  Asynchronous on
 * the default stream; scdb_k_cuda_sync() waits and reports kernel errors. */
int scdb_k_cuda_device_count(void);
scdb_err scdb_k_cuda_malloc(size_t bytes, void **out);
void scdb_k_cuda_free(void *p);
scdb_err scdb_k_cuda_copy(void *dst, const void *src, size_t bytes, int to_device);
scdb_err scdb_k_cuda_sync(void);
scdb_err scdb_k_gemm_cuda(int trans_a, int trans_b, int M, int N, int K, float alpha,
                          const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc);
scdb_err scdb_k_linear_cuda(const float *x, const float *W, int n, int in, int out,
                            float *y);
scdb_err scdb_k_rmsnorm_cuda(const float *x, const float *w, int n_rows, int dim,
                             float eps, float *out);
scdb_err scdb_k_rope_cuda(float *x, int n_tok, int n_heads, int head_dim,
                          const int32_t *pos, float theta, int inverse);
scdb_err scdb_k_softmax_cuda(float *x, int n_rows, int n);
scdb_err scdb_k_swiglu_cuda(const float *gate, const float *up, size_t n, float *out);
scdb_err scdb_k_f32_to_f16_cuda(const float *src, uint16_t *dst, size_t n);
scdb_err scdb_k_f16_to_f32_cuda(const uint16_t *src, float *dst, size_t n);
scdb_err scdb_k_attention_cuda(const float *q, const int32_t *q_pos, int n_q,
                               int n_heads, const float *k, const float *v,
                               const int32_t *slot_pos, int n_slots,
                               int n_kv_heads, int head_dim, float *out,
                               float *probs, float *scratch);

/* ------------------------------------------------------- slot-indexed KV */

typedef struct scdb_kv_cache {
    int n_layers, n_kv_heads, head_dim, capacity;
    int n;              /* live slots [0, n) */
    int32_t *pos;       /* [capacity] */
    float *k;           /* [n_layers][capacity][kv_dim] */
    float *v;           /* [n_layers][capacity][kv_dim] */
    void *mem;          /* the one buffer holding pos, k, v */
    int owns_mem;
} scdb_kv_cache;

/* Bytes of one cache buffer (pos, then K, then V; 64-byte aligned parts). */
size_t scdb_kv_cache_bytes(int n_layers, int n_kv_heads, int head_dim, int capacity);
/* Allocate a zeroed cache.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_kv_cache_new(int n_layers, int n_kv_heads, int head_dim,
                           int capacity, scdb_kv_cache **out);
/* Lay a cache over caller memory of at least scdb_kv_cache_bytes() bytes
 * (64-byte aligned); n starts at 0.  SCDB_EINVAL. */
scdb_err scdb_kv_cache_view(void *mem, size_t len, int n_layers, int n_kv_heads,
                            int head_dim, int capacity, scdb_kv_cache **out);
void scdb_kv_cache_free(scdb_kv_cache **c);
static inline int scdb_kv_dim(const scdb_kv_cache *c) { return c->n_kv_heads * c->head_dim; }
static inline float *scdb_kv_k(const scdb_kv_cache *c, int layer, int slot)
{
    return c->k + ((size_t)layer * c->capacity + slot) * (size_t)scdb_kv_dim(c);
}
static inline float *scdb_kv_v(const scdb_kv_cache *c, int layer, int slot)
{
    return c->v + ((size_t)layer * c->capacity + slot) * (size_t)scdb_kv_dim(c);
}
/* Keep only slots keep[0..n_keep) (strictly increasing), gathered in order
 * into [0, n_keep) of every layer; positions travel with their slots.
 * SCDB_EINVAL (not increasing / out of range). */
scdb_err scdb_kv_cache_compact(scdb_kv_cache *c, const int *keep, int n_keep);

#endif /* SCDB_KERNELS_H */
