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
 * The slot-indexed KV cache (pos, K, V of every layer in one buffer) is
 * declared in kv_cache.h, which clients get with scdb.h.
 *
 * Attention probabilities, when requested, are laid out
 *   probs f32 [n_heads][n_q][n_slots]    (0 where a slot is masked)
 */
#ifndef SCDB_KERNELS_H
#define SCDB_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kv_cache.h"
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

/* 1 if the `bytes` of x hold a NaN or an infinity when read as dtype dt
 * (F32, F16, BF16; integer dtypes never do), its element index in *first;
 * else 0.  What the broker checks payloads and states with. */
int scdb_k_find_nonfinite(const void *x, size_t bytes, scdb_dtype dt, size_t *first);

/* ---------------------------------------------------------------- ops (CPU)
 * Shapes are given in elements; pointers must not alias unless stated. */

/* How many threads the CPU ops' BLAS may use per call (OpenBLAS, process
 * wide).  A program that calls the ops from several threads of its own
 * (the broker's workers) sets 1: each caller is then one core's work. */
void scdb_k_cpu_threads(int n);

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
/* The same in two steps, for many tensors at the same positions (a pair's
 * decode ropes every layer's K): the cos / sin of each (token, pair) into
 * cs [n_tok][head_dim/2][2], then the rotation with them -- bit for bit
 * scdb_k_rope_cpu's result. */
void scdb_k_rope_angles_cpu(const int32_t *pos, int n_tok, int head_dim, float theta, float *cs);
void scdb_k_rope_apply_cpu(float *x, int n_tok, int n_heads, int head_dim, const float *cs,
                           int inverse);

/* Numerically stable softmax of each row of x [n_rows, n], in place.
 * -INFINITY entries get probability 0; an all -INFINITY row becomes 0s. */
void scdb_k_softmax_cpu(float *x, int n_rows, int n);

/* out[i] = x[i] - log(sum_j exp(x[j])) for one row of n logits (max
 * subtracted first, the sum in double); out may equal x.  The one copy the
 * codec's calibration, the eviction episodes and the quality bench use. */
void scdb_k_log_softmax_cpu(const float *x, int n, float *out);

/* One Adam step (beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected) on n
 * parameters w with gradient g; m and v are the moment estimates (zeroed
 * before step 1), t is the 1-based step number. */
void scdb_k_adam_step_cpu(float *w, const float *g, float *m, float *v, size_t n, float lr,
                          int t);

/* ggml-style normalised error sum (a - b)^2 / sum b^2 (sum (a - b)^2 when b
 * is all zeros): how twins and benches compare f32 results. */
double scdb_k_nmse(const float *a, const float *b, size_t n);

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
/* Device to device (cudaMemcpyDeviceToDevice, synchronous w.r.t. the host). */
scdb_err scdb_k_cuda_copy_d2d(void *dst, const void *src, size_t bytes);
/* rows of width bytes between pitched device layouts (cudaMemcpy2D). */
scdb_err scdb_k_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                            size_t width, size_t rows);
scdb_err scdb_k_cuda_sync(void);
/* cudaMemset on device memory (benches: the write-bandwidth ceiling). */
scdb_err scdb_k_cuda_memset(void *p, int value, size_t bytes);
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

/* ------------------------------------------------------------ codec ops
 * The compute of the SCD codec (codec/) and the 4-bit baseline, as kernels
 * with a CPU twin and a CUDA twin each.  The CPU twins do exactly what
 * codec/ does (same operations in the same order: tests/test_codec.c checks
 * it); the CUDA twins take device pointers.  f16 / bf16 values are carried
 * as their uint16_t bit patterns.
 *
 *   gemm_ex          C = alpha op(A) op(B) + beta C with A, B in F16 or BF16
 *                    (both the same), f32 accumulate and output (cuBLAS:
 *                    cublasGemmEx, CUBLAS_COMPUTE_32F).  F32 falls back to
 *                    the sgemm path.
 *   lowrank_decode   y[n][out] = RoPE?(z dec^T + mean): a REUSE layer's K
 *                    (pos != NULL) or V (pos == NULL) from its f16 codes
 *                    z [n][ldz] (r used columns) and an f16 decoder
 *                    dec [out][r] (pairs store decoders as f16, so this is
 *                    exact); mean [out] may be NULL; RoPE as scdb_k_rope_cpu
 *                    over out / head_dim heads.  The CUDA twin is one fused
 *                    tensor-core kernel (f16 in, f32 accumulate; bias and
 *                    RoPE in the epilogue) when head_dim divides 128, so the
 *                    KV is written exactly once.
 *   lowrank_encode   z[n][ldz] = f16((x - mean) enc^T), x [n][ldx] (in used
 *                    columns), enc [r][in]: one codebook part.
 *   aligner          h[n][d] = W2 silu(W1 z + b1) + b2 + S z (codec.h's
 *                    aligner MLP; w1 [hidden][r], w2 [d][hidden],
 *                    skip [d][r]).
 *   kv_regen         K = RoPE(h Wk^T), V = h Wv^T for n rows of h [n][d]:
 *                    PATCH and TOKEN layers; K, V are [n][kv].
 *   q4_encode/decode 4-bit asymmetric uniform quantisation in groups of g
 *                    values (g even, n a multiple of g): per group f16
 *                    (min, scale = (max - min) / 15) in ms[2 s], ms[2 s + 1],
 *                    codes round((x - min) / scale) clamped to 0..15, two per
 *                    byte, low nibble first -- the bench's quant4 baseline.
 *
 * scratch arguments: NULL (allocated and freed inside) or the number of
 * floats given; pass one to avoid an allocation per call.
 * Errors: SCDB_EINVAL (sizes, strides, head_dim not even or not dividing
 * out, g odd), SCDB_EDTYPE (gemm_ex input dtype), SCDB_ENOMEM; the CUDA
 * twins SCDB_EDEVICE (a CUDA or cuBLAS call failed; logged with file and
 * line) and SCDB_EUNSUPPORTED (no CUDA backend in this build). */
scdb_err scdb_k_gemm_ex_cpu(int trans_a, int trans_b, int M, int N, int K, float alpha,
                            scdb_dtype in_dt, const void *A, int lda, const void *B, int ldb,
                            float beta, float *C, int ldc);
scdb_err scdb_k_lowrank_decode_cpu(const uint16_t *z, int ldz, int n, int r,
                                   const uint16_t *dec, const float *mean, int out,
                                   const int32_t *pos, int head_dim, float theta,
                                   float *y, int ldy);
/* scratch: n * (in + r) floats */
scdb_err scdb_k_lowrank_encode_cpu(const float *x, int ldx, int n, int in, const float *mean,
                                   const float *enc, int r, uint16_t *z, int ldz,
                                   float *scratch);
/* scratch: n * hidden floats */
scdb_err scdb_k_aligner_cpu(const float *z, int ldz, int n, int r, int hidden, int d,
                            const float *w1, const float *b1, const float *w2,
                            const float *b2, const float *skip, float *h, float *scratch);
scdb_err scdb_k_kv_regen_cpu(const float *h, int n, int d, const float *wk, const float *wv,
                             int kv, const int32_t *pos, int head_dim, float theta,
                             float *k, float *v);
scdb_err scdb_k_q4_encode_cpu(const float *x, size_t n, int g, uint8_t *q, uint16_t *ms);
scdb_err scdb_k_q4_decode_cpu(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x);

scdb_err scdb_k_gemm_ex_cuda(int trans_a, int trans_b, int M, int N, int K, float alpha,
                             scdb_dtype in_dt, const void *A, int lda, const void *B, int ldb,
                             float beta, float *C, int ldc);
scdb_err scdb_k_lowrank_decode_cuda(const uint16_t *z, int ldz, int n, int r,
                                    const uint16_t *dec, const float *mean, int out,
                                    const int32_t *pos, int head_dim, float theta,
                                    float *y, int ldy);
scdb_err scdb_k_lowrank_encode_cuda(const float *x, int ldx, int n, int in, const float *mean,
                                    const float *enc, int r, uint16_t *z, int ldz,
                                    float *scratch);
scdb_err scdb_k_aligner_cuda(const float *z, int ldz, int n, int r, int hidden, int d,
                             const float *w1, const float *b1, const float *w2,
                             const float *b2, const float *skip, float *h, float *scratch);
scdb_err scdb_k_kv_regen_cuda(const float *h, int n, int d, const float *wk, const float *wv,
                              int kv, const int32_t *pos, int head_dim, float theta,
                              float *k, float *v);
scdb_err scdb_k_q4_encode_cuda(const float *x, size_t n, int g, uint8_t *q, uint16_t *ms);
scdb_err scdb_k_q4_decode_cuda(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x);
scdb_err scdb_k_f32_to_bf16_cuda(const float *src, uint16_t *dst, size_t n);
scdb_err scdb_k_bf16_to_f32_cuda(const uint16_t *src, float *dst, size_t n);

/* ------------------------------------------------------------ eviction ops
 * The per-slot compute of evict/ (score -> select -> compact) as kernels.
 *
 *   evict_features   the six policy features of slots [0, n) from the
 *                    accumulator arrays (evict.h: alpha = rel / n_obs,
 *                    vnorm, sigma = var / n_obs, ent = ent_num / ent_den,
 *                    pos = (pos + 1) / (last_pos + 1) capped at 1), into
 *                    feats [n][6] (alpha vnorm sigma ent pos mass); what
 *                    scdb_evict_features computes.
 *   select_topb      scdb_evict_select's deterministic top-B: keep the first
 *                    `sinks` and last `recent` slots and the highest-scoring
 *                    others (ties: the higher slot) up to the budget; keep[]
 *                    ascending, *n_keep = min(n, budget).  n_keep is a host
 *                    int for both twins (it follows from n and budget);
 *                    scores and keep are device memory for the CUDA twin.
 *                    A NaN score ranks as -inf (below every number, ties
 *                    to the higher slot): whatever the scores hold (they
 *                    come from memory a client can write), keep[] is
 *                    min(n, budget) valid, increasing slots.
 *   compact_rows     order-preserving in-place gather of rows keep[0..n_keep)
 *                    (strictly increasing, < n) to rows [0, n_keep) in each
 *                    of n_mats matrices of rows of row_bytes bytes, matrix m
 *                    starting at x + m * mat_stride bytes: the KV cache
 *                    (n_mats = n_layers per K and V, row = kv_dim floats),
 *                    its pos array and the accumulator slot arrays.  The CPU
 *                    twin moves rows forward (keep[i] >= i); the CUDA twin
 *                    gathers each matrix into scratch (NULL or n_keep *
 *                    row_bytes bytes) and copies it back, and does not
 *                    check keep[] (device memory): pass what select_topb
 *                    produced. */
typedef struct scdb_k_acc_arrays {
    const int32_t *pos;
    const float *n_obs, *rel, *var, *ent_num, *ent_den, *vnorm;
    int32_t last_pos;
    const float *mass;           /* cumulative attention (the sixth feature) */
} scdb_k_acc_arrays;

#define SCDB_K_EVICT_N_FEATURES 6

scdb_err scdb_k_evict_features_cpu(const scdb_k_acc_arrays *a, int n, float *feats);
scdb_err scdb_k_select_topb_cpu(const float *scores, int n, int budget, int sinks,
                                int recent, int *keep, int *n_keep);
scdb_err scdb_k_compact_rows_cpu(void *x, int n_mats, size_t mat_stride, size_t row_bytes,
                                 int n, const int *keep, int n_keep, void *scratch);
/* compact_rows with one keep list over several groups of matrices (host
 * memory only; the per-head accumulators' arrays of one keep set): keep[]
 * checked and its runs found once.  SCDB_EINVAL as compact_rows. */
typedef struct scdb_k_compact_group {
    void *x;
    int n_mats;
    size_t mat_stride;
} scdb_k_compact_group;
scdb_err scdb_k_compact_groups_cpu(const scdb_k_compact_group *g, int n_groups, size_t row_bytes,
                                   int n, const int *keep, int n_keep);
scdb_err scdb_k_evict_features_cuda(const scdb_k_acc_arrays *a, int n, float *feats);
scdb_err scdb_k_select_topb_cuda(const float *scores, int n, int budget, int sinks,
                                 int recent, int *keep, int *n_keep);
scdb_err scdb_k_compact_rows_cuda(void *x, int n_mats, size_t mat_stride, size_t row_bytes,
                                  int n, const int *keep, int n_keep, void *scratch);

/* ------------------------------------------------------------ accumulator ops
 * The rest of a live session's per-slot compute, so that a session whose
 * cache is device memory never brings its statistics to the host: folding
 * one forward's attention into evict.h's feature accumulators (the step the
 * client runs after every token), and SnapKV's score (an eviction).  They
 * work on raw arrays; evict/ owns the buffer layout and lays a
 * scdb_k_acc_buf over a buffer (evict/acc_dev.c: scdb_evict_acc_buf).
 *
 *   acc_update     scdb_evict_acc_update for an accumulator holding n_old
 *                  slots and a cache now holding c->n = n_old + n_new: the
 *                  new slots' positions and mean V norms, then query by
 *                  query (probs [n_layers][n_heads][n_new][probs_slots],
 *                  probs_slots >= c->n) the EMA decay, the attention sums,
 *                  the ring row and the header (ring_next, ring_fill,
 *                  last_pos, n_queries, n).  probs NULL records the new slots
 *                  only.  Every array, the header fields a->n .. n_queries,
 *                  cache->pos / v and probs are in the device's memory; the
 *                  shape, n_old and c->n are host values (the CUDA twin
 *                  cannot read a->n back: the caller keeps the count).
 *                  The same operations in the same order as acc.c (the CPU
 *                  twin is exactly scdb_evict_acc_update; the CUDA twin
 *                  differs only in the entropies: logf and the reduction
 *                  order, tests/test_kernels_cuda.c's tolerance).
 *                  scratch: NULL (allocated inside) or
 *                  scdb_k_acc_update_scratch_bytes() bytes of device memory;
 *                  stream: the cudaStream_t to run on (NULL: the default
 *                  stream; the CPU twin ignores both).  The only op a client
 *                  process runs (libscdb launches the same kernels through
 *                  the driver API: client/cuda.c), hence the stream.
 *                  The CUDA twin reads ring_next from the header in device
 *                  memory and clamps it into [0, window): a damaged header
 *                  cannot make it write outside the buffer.
 *   snapkv_score   scores[j] = mean over KV groups g of max over
 *                  |k - j| <= pool / 2 (within [0, n)) of
 *                  sum_{r < ring_fill} win[r][g][k]: evict.h's SnapKV
 *                  score, the same sums in the same order (bit for bit on
 *                  both twins).  pool odd >= 1.
 * Errors: SCDB_EINVAL (NULL, sizes, n_old + n_new != c->n, probs_slots
 * < c->n), SCDB_ESHAPE (cache and accumulator shapes differ), SCDB_ENOMEM;
 * the CUDA twins SCDB_EDEVICE, SCDB_EUNSUPPORTED. */
/* log(x) for x >= FLT_MIN (musl's logf, within ~1 ulp; finite at 0 and for
 * subnormals, so x log x needs no test); branch-free, so loops over it
 * vectorise (logf was most of an accumulator update, and of the per-head
 * scorer's pass).  x must not be negative, NaN or infinite. */
static inline float scdb_k_logf_fast(float x)
{
    /* musl's logf: x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), by integer
     * arithmetic on the bits (no select, so loops vectorise) */
    uint32_t ix;
    memcpy(&ix, &x, sizeof ix);
    ix += 0x3f800000u - 0x3f3504f3u;
    float k = (float)((int)(ix >> 23) - 0x7f);
    ix = (ix & 0x007fffffu) + 0x3f3504f3u;
    float m;
    memcpy(&m, &ix, sizeof m);
    float f = m - 1.0f, s = f / (2.0f + f), z = s * s, w = z * z;
    float t1 = w * (0.40000972152f + w * 0.24279078841f);
    float t2 = z * (0.66666662693f + w * 0.28498786688f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + t1 + t2) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

typedef struct scdb_k_acc_buf {
    int n_layers, n_heads, n_kv_heads, capacity, window;
    float decay;
    int32_t *pos;
    float *n_obs, *mass, *rel, *var, *ent_num, *ent_den, *vnorm, *last;
    float *win;                                /* [window][n_kv_heads][capacity] */
    int32_t *n, *ring_next, *ring_fill, *last_pos;   /* header fields ... */
    uint64_t *n_queries;                       /* ... in the same memory */
} scdb_k_acc_buf;

size_t scdb_k_acc_update_scratch_bytes(const scdb_k_acc_buf *a);
scdb_err scdb_k_acc_update_cpu(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                               const float *probs, int probs_slots, int n_new, void *scratch,
                               void *stream);
scdb_err scdb_k_acc_update_cuda(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                                const float *probs, int probs_slots, int n_new, void *scratch,
                                void *stream);
scdb_err scdb_k_snapkv_score_cpu(const float *win, int ring_fill, int n_kv_heads, int capacity,
                                 int n, int pool, float *scores);
scdb_err scdb_k_snapkv_score_cuda(const float *win, int ring_fill, int n_kv_heads, int capacity,
                                  int n, int pool, float *scores);
/* SnapKV's score of each of n_sets keep sets apart (evict.h, "Keep sets per
 * head"): win [window][n_sets][capacity], scores [n_sets][n]; set k's row
 * is snapkv_score's per-group max-pooled sum, not averaged (host only).
 * sums (NULL or [n_sets][n]) gets the sums before pooling. */
scdb_err scdb_k_snapkv_score_sets_cpu(const float *win, int ring_fill, int n_sets, int capacity,
                                      int n, int pool, float *scores, float *sums);
/* One Adam step on device memory (scdb_k_adam_step_cpu's arithmetic). */
scdb_err scdb_k_adam_step_cuda(float *w, const float *g, float *m, float *v, size_t n, float lr,
                               int t);

/* ------------------------------------------------------------ training ops
 * The elementwise steps of the codec's aligner training (codec/aligner.c:
 * a SiLU MLP trained by Adam), so that its loop runs through an ops table
 * on any device.  The CPU twins are aligner.c's loops as they were, in the
 * same order; the CUDA twins differ only where expf does (silu,
 * silu_backward; colsum adds in the same order, bit for bit).
 *
 *   gather_rows    dst[i][:] = src[idx[i]][:] for i < n, rows of `cols`
 *                  floats (idx device memory for the CUDA twin; the indices
 *                  are the caller's, not checked)
 *   bias_rows      dst[i][:] = b for i < rows
 *   silu           y = x sigm(x), sigm(x) = 1 / (1 + exp(-x)); y may be x
 *   silu_backward  g *= s (1 + x (1 - s)), s = sigm(x): d silu / dx
 *   sub            x -= y
 *   colsum         out[j] = sum over rows i (ascending) of x[i][j]
 * Errors: SCDB_EINVAL (NULL with a non-zero size); the CUDA twins
 * SCDB_EDEVICE, SCDB_EUNSUPPORTED. */
scdb_err scdb_k_gather_rows_cpu(const float *src, int cols, const int32_t *idx, int n, float *dst);
scdb_err scdb_k_bias_rows_cpu(float *dst, const float *b, int rows, int cols);
scdb_err scdb_k_silu_cpu(const float *x, size_t n, float *y);
scdb_err scdb_k_silu_backward_cpu(float *g, const float *x, size_t n);
scdb_err scdb_k_sub_cpu(float *x, const float *y, size_t n);
scdb_err scdb_k_colsum_cpu(const float *x, int rows, int cols, float *out);
scdb_err scdb_k_gather_rows_cuda(const float *src, int cols, const int32_t *idx, int n, float *dst);
scdb_err scdb_k_bias_rows_cuda(float *dst, const float *b, int rows, int cols);
scdb_err scdb_k_silu_cuda(const float *x, size_t n, float *y);
scdb_err scdb_k_silu_backward_cuda(float *g, const float *x, size_t n);
scdb_err scdb_k_sub_cuda(float *x, const float *y, size_t n);
scdb_err scdb_k_colsum_cuda(const float *x, int rows, int cols, float *out);

/* ------------------------------------------------------------ devices
 * Choosing where compute runs (`--device auto|cpu|cuda` of the broker,
 * calibration, benches and demo):
 *
 *   scdb_device_parse("auto" | "cpu" | "cuda")       -> a preference
 *   scdb_device_resolve(pref) -> the device, logging one line that says
 *       which device was chosen and why ("auto: CUDA device 0 (NVIDIA
 *       H200, 139 GiB) answers" / "auto: no CUDA device answers: CPU").
 *   auto  CUDA when this build has the backend and a device answers, else CPU
 *   cpu   always the CPU
 *   cuda  CUDA, or SCDB_EDEVICE (no device answers) / SCDB_EUNSUPPORTED
 *         (this build has no CUDA backend) -- never a silent fallback. */
typedef enum scdb_device_pref {
    SCDB_DEVPREF_AUTO = 0,
    SCDB_DEVPREF_CPU,
    SCDB_DEVPREF_CUDA
} scdb_device_pref;

/* SCDB_EINVAL for anything but "auto", "cpu", "cuda" (NULL included). */
scdb_err scdb_device_parse(const char *s, scdb_device_pref *out);
/* "auto", "cpu", "cuda" */
const char *scdb_device_pref_name(scdb_device_pref p);
/* "cpu", "cuda" */
const char *scdb_device_name(scdb_device d);
/* Resolve a preference; the reason (also logged at info level, prefixed
 * "device: ") goes to why[whylen] when why is not NULL.  SCDB_EINVAL (bad
 * preference), SCDB_EDEVICE, SCDB_EUNSUPPORTED (see above). */
scdb_err scdb_device_resolve(scdb_device_pref pref, scdb_device *out, char *why, size_t whylen);
/* The same for a command (`what`, e.g. "scdb calibrate") that has no CUDA
 * path yet (none since issue 19: serve, calibrate, the benches and the demo
 * all have one; kept for a command that comes without): cpu -> CPU; auto -> CPU, logging why ("auto: scdb calibrate has
 * no CUDA path yet: CPU"); cuda -> SCDB_EUNSUPPORTED, logged as an error
 * ("cuda requested but scdb calibrate has no CUDA path yet: use --device cpu
 * or auto") -- a clear refusal, never a silent fallback.  SCDB_EINVAL (bad
 * preference or out). */
scdb_err scdb_device_resolve_cpu_only(scdb_device_pref pref, const char *what, scdb_device *out,
                                      char *why, size_t whylen);

/* A CUDA device's name and peak memory bandwidth (from the memory clock and
 * bus width attributes: 2 * clock * width / 8, double data rate), for
 * benches that report a fraction of it.  SCDB_EDEVICE (no such device),
 * SCDB_EUNSUPPORTED (no CUDA backend). */
typedef struct scdb_k_cuda_info {
    char name[256];
    int cc_major, cc_minor, sm_count;
    size_t total_mem;
    double mem_clock_khz, bus_width_bits;
    double peak_bw_gbs;        /* GB/s, 1e9 bytes */
} scdb_k_cuda_info;
scdb_err scdb_k_cuda_device_info(int dev, scdb_k_cuda_info *out);

/* ------------------------------------------------------------ ops tables
 * One device's memory functions and the ops a device decoder drives, behind
 * one table, so the code that sequences them (the broker's decoders writing
 * into CUDA IPC arenas, codec.h's scdb_pair_dev) is the same on every device
 * and is tested on the CPU table -- plain host memory and the CPU twins --
 * where no GPU is.  Pointers marked "device" are device memory for the CUDA
 * table and host memory for the CPU one.
 *
 *   alloc / release   device memory (uninitialised) / free it (NULL: no-op)
 *   upload            host -> device; download: device -> host; dcopy:
 *                     device -> device
 *   zero              memset 0 (asynchronous on CUDA)
 *   sync              wait for everything queued; reports kernel errors
 *   dcopy2d           rows of width bytes, device -> device, between
 *                     pitched layouts (capture's padded probability rows)
 *   the ops           the twins of kernels.h (device pointers throughout:
 *                     pos of lowrank_decode / kv_regen / rope / attention
 *                     too); the model's forward (model.h, scdb_model_dev),
 *                     the eviction sequence (evict/evict_dev.c) and the
 *                     calibration statistics (codec/calib_*.c) use them
 *
 * scdb_k_ops_get(SCDB_DEV_CUDA) exists in every build; in one without the
 * CUDA backend its entries return SCDB_EUNSUPPORTED. */
typedef struct scdb_k_ops {
    scdb_device device;
    scdb_err (*alloc)(size_t bytes, void **out);
    void (*release)(void *p);
    scdb_err (*upload)(void *dst, const void *src, size_t bytes);
    scdb_err (*download)(void *dst, const void *src, size_t bytes);
    scdb_err (*dcopy)(void *dst, const void *src, size_t bytes);
    scdb_err (*zero)(void *p, size_t bytes);
    scdb_err (*sync)(void);
    scdb_err (*f16_to_f32)(const uint16_t *src, float *dst, size_t n);
    scdb_err (*lowrank_decode)(const uint16_t *z, int ldz, int n, int r, const uint16_t *dec,
                               const float *mean, int out, const int32_t *pos, int head_dim,
                               float theta, float *y, int ldy);
    scdb_err (*aligner)(const float *z, int ldz, int n, int r, int hidden, int d,
                        const float *w1, const float *b1, const float *w2, const float *b2,
                        const float *skip, float *h, float *scratch);
    scdb_err (*kv_regen)(const float *h, int n, int d, const float *wk, const float *wv, int kv,
                         const int32_t *pos, int head_dim, float theta, float *k, float *v);
    scdb_err (*dcopy2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t rows);
    /* the transformer */
    scdb_err (*gemm)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);
    scdb_err (*linear)(const float *x, const float *W, int n, int in, int out, float *y);
    scdb_err (*rmsnorm)(const float *x, const float *w, int n_rows, int dim, float eps, float *out);
    scdb_err (*rope)(float *x, int n_tok, int n_heads, int head_dim, const int32_t *pos,
                     float theta, int inverse);
    scdb_err (*swiglu)(const float *gate, const float *up, size_t n, float *out);
    scdb_err (*attention)(const float *q, const int32_t *q_pos, int n_q, int n_heads,
                          const float *k, const float *v, const int32_t *slot_pos, int n_slots,
                          int n_kv_heads, int head_dim, float *out, float *probs, float *scratch);
    scdb_err (*q4_decode)(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x);
    scdb_err (*adam_step)(float *w, const float *g, float *m, float *v, size_t n, float lr, int t);
    /* aligner training */
    scdb_err (*gather_rows)(const float *src, int cols, const int32_t *idx, int n, float *dst);
    scdb_err (*bias_rows)(float *dst, const float *b, int rows, int cols);
    scdb_err (*silu)(const float *x, size_t n, float *y);
    scdb_err (*silu_backward)(float *g, const float *x, size_t n);
    scdb_err (*sub)(float *x, const float *y, size_t n);
    scdb_err (*colsum)(const float *x, int rows, int cols, float *out);
    /* live sessions */
    scdb_err (*evict_features)(const scdb_k_acc_arrays *a, int n, float *feats);
    scdb_err (*select_topb)(const float *scores, int n, int budget, int sinks, int recent,
                            int *keep, int *n_keep);
    scdb_err (*compact_rows)(void *x, int n_mats, size_t mat_stride, size_t row_bytes, int n,
                             const int *keep, int n_keep, void *scratch);
    scdb_err (*acc_update)(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                           const float *probs, int probs_slots, int n_new, void *scratch,
                           void *stream);
    scdb_err (*snapkv_score)(const float *win, int ring_fill, int n_kv_heads, int capacity, int n,
                             int pool, float *scores);
} scdb_k_ops;

/* The table of a device (never NULL for SCDB_DEV_CPU / SCDB_DEV_CUDA; NULL
 * for anything else). */
const scdb_k_ops *scdb_k_ops_get(scdb_device d);

/* CUDA IPC: the 64 bytes of the cudaIpcMemHandle_t of an allocation made by
 * scdb_k_cuda_malloc (dev_ptr: its base), which another process on the same
 * host opens with cudaIpcOpenMemHandle.  SCDB_EDEVICE (the call failed,
 * logged), SCDB_EUNSUPPORTED (no CUDA backend in this build). */
#define SCDB_CUDA_IPC_HANDLE_BYTES 64
scdb_err scdb_k_cuda_ipc_handle(void *dev_ptr, uint8_t out[SCDB_CUDA_IPC_HANDLE_BYTES]);
/* The PCI bus id of CUDA device dev ("0000:3b:00.0") into buf: how another
 * process finds the same GPU whatever its CUDA_VISIBLE_DEVICES.  Errors as
 * scdb_k_cuda_ipc_handle. */
scdb_err scdb_k_cuda_pci_bus_id(int dev, char *buf, size_t len);

#endif /* SCDB_KERNELS_H */
