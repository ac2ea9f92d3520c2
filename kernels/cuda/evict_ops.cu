/* evict_ops.cu — the CUDA twins of kernels/cpu/evict_ops.c: eviction
 * features, deterministic top-B selection and order-preserving compaction.
 *
 * select_topb ranks without sorting: candidate i is kept iff fewer than m
 * candidates rank before it (higher score, or equal score and higher slot)
 * -- the same total order as the CPU's sort, so the same set.  One thread
 * per slot counts over the candidates in shared-memory tiles (O(n * nc)
 * comparisons: ~1e9 at 32k slots, about a millisecond on a current GPU);
 * then one block turns the keep flags into the ascending keep[] with a
 * running prefix sum.
 *
 * compact_rows gathers each matrix's kept rows into scratch and copies them
 * back: a parallel in-place gather would race (row keep[i] may be the
 * destination of another kept row).
 *
 * acc_update launches acc_kernels.cuh's kernels in acc_launch.c's sequence
 * through cudaLaunchKernel; snapkv_score is one thread per slot. */
#include "cuda_internal.h"

/* ---------------------------------------------------------------- features */

__global__ void features_kernel(scdb_k_acc_arrays a, int n, float *f)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float *r = f + (size_t)i * SCDB_K_EVICT_N_FEATURES;
    float no = a.n_obs[i], denom = (float)(a.last_pos + 1);
    r[0] = no > 0.0f ? a.rel[i] / no : 0.0f;
    r[1] = a.vnorm[i];
    r[2] = no > 0.0f ? a.var[i] / no : 0.0f;
    r[3] = a.ent_den[i] > 0.0f ? a.ent_num[i] / a.ent_den[i] : 0.0f;
    float p = denom > 0.0f ? (float)(a.pos[i] + 1) / denom : 1.0f;
    r[4] = p > 1.0f ? 1.0f : p;
    r[5] = a.mass[i];
}

extern "C" scdb_err scdb_k_evict_features_cuda(const scdb_k_acc_arrays *a, int n, float *f)
{
    if (!a || n < 0 || (n > 0 && (!f || !a->pos || !a->n_obs || !a->rel || !a->var ||
                                  !a->ent_num || !a->ent_den || !a->vnorm || !a->mass)))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    features_kernel<<<kn_cuda_blocks((size_t)n), 256>>>(*a, n, f);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- top-B */

#define RANK_TILE 256

__global__ void rank_flags_kernel(const float *s, int n, int sinks, int recent, int m,
                                  unsigned char *flag)
{
    __shared__ float ts[RANK_TILE];
    int i = blockIdx.x * RANK_TILE + threadIdx.x;
    int c0 = sinks, c1 = n - recent;            /* candidates [c0, c1) */
    int is_cand = i >= c0 && i < c1;
    float si = i < n ? s[i] : 0.0f;
    if (isnan(si)) si = -INFINITY;     /* kernels.h: NaN ranks as -inf */
    int before = 0;
    for (int t0 = c0; t0 < c1; t0 += RANK_TILE) {
        int j = t0 + threadIdx.x;
        float sj = j < c1 ? s[j] : 0.0f;
        ts[threadIdx.x] = isnan(sj) ? -INFINITY : sj;
        __syncthreads();
        if (is_cand && before < m) {
            int lim = c1 - t0 < RANK_TILE ? c1 - t0 : RANK_TILE;
            for (int k = 0; k < lim; k++) {
                float sj = ts[k];
                before += sj > si || (sj == si && t0 + k > i);
            }
        }
        __syncthreads();
    }
    if (i < n) flag[i] = i < c0 || i >= c1 || (is_cand && before < m);
}

/* One block of 1024 threads: keep[] = indices of the set flags, ascending. */
__global__ void flags_to_keep_kernel(const unsigned char *flag, int n, int *keep)
{
    __shared__ int warp_sum[32];
    __shared__ int base;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (threadIdx.x == 0) base = 0;
    __syncthreads();
    for (int c0 = 0; c0 < n; c0 += 1024) {
        int i = c0 + threadIdx.x;
        int f = i < n ? flag[i] : 0;
        /* inclusive scan within the warp, then across warp totals */
        int x = f;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        if (lane == 31) warp_sum[warp] = x;
        __syncthreads();
        if (warp == 0) {
            int w = warp_sum[lane];
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(0xffffffffu, w, o);
                if (lane >= o) w += y;
            }
            warp_sum[lane] = w;          /* inclusive prefix of warp totals */
        }
        __syncthreads();
        int prefix = base + x - f + (warp > 0 ? warp_sum[warp - 1] : 0);
        if (f) keep[prefix] = i;
        __syncthreads();
        if (threadIdx.x == 0) base += warp_sum[31];
        __syncthreads();
    }
}

__global__ void iota_kernel(int *keep, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) keep[i] = i;
}

extern "C" scdb_err scdb_k_select_topb_cuda(const float *scores, int n, int budget, int sinks,
                                            int recent, int *keep, int *n_keep)
{
    unsigned char *flag = NULL;
    int m;

    if (!keep || !n_keep || n < 0 || budget < 1 || sinks < 0 || recent < 0 ||
        (!scores && n > 0))
        return SCDB_EINVAL;
    if (n <= budget) {
        if (n > 0) {
            iota_kernel<<<kn_cuda_blocks((size_t)n), 256>>>(keep, n);
            CUDA_CHECK(cudaGetLastError());
        }
        *n_keep = n;
        return SCDB_OK;
    }
    if (sinks > budget) sinks = budget;
    if (recent > budget - sinks) recent = budget - sinks;
    m = budget - sinks - recent;
    CUDA_CHECK(cudaMallocAsync((void **)&flag, (size_t)n, 0));
    rank_flags_kernel<<<(unsigned)((n + RANK_TILE - 1) / RANK_TILE), RANK_TILE>>>(scores, n, sinks,
                                                                                 recent, m, flag);
    flags_to_keep_kernel<<<1, 1024>>>(flag, n, keep);
    cudaError_t e = cudaGetLastError();
    cudaFreeAsync(flag, 0);
    if (e != cudaSuccess) {
        scdb_error("select_topb: kernel launch failed: %s", cudaGetErrorString(e));
        return SCDB_EDEVICE;
    }
    *n_keep = budget;
    return SCDB_OK;
}

/* ---------------------------------------------------------------- compaction */

/* Gather the kept rows of a batch of matrices (blockIdx.y: the matrix
 * within the batch) into dst, batch-major: matrix b's rows at
 * dst + b * n_keep * row_words. */
template <typename W>
__global__ void gather_rows_kernel(const W *src, size_t stride_words, size_t row_words,
                                   const int *keep, int n_keep, W *dst)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t per = (size_t)n_keep * row_words;
    if (idx >= per) return;
    size_t i = idx / row_words, w = idx % row_words;
    dst[(size_t)blockIdx.y * per + idx] =
        src[(size_t)blockIdx.y * stride_words + (size_t)keep[i] * row_words + w];
}

/* scratch NULL: matrices are gathered in batches of up to this many bytes
 * (one stream-ordered allocation), so the n_mats matrices of a cache or of
 * the accumulators' ring cost two launches per batch, not per matrix */
#define COMPACT_BATCH_BYTES ((size_t)64 << 20)

extern "C" scdb_err scdb_k_compact_rows_cuda(void *x, int n_mats, size_t mat_stride,
                                             size_t row_bytes, int n, const int *keep,
                                             int n_keep, void *scratch)
{
    void *buf = scratch;
    size_t bytes = (size_t)n_keep * row_bytes;
    int batch = 1;
    scdb_err rc = SCDB_OK;

    if (!x || n_mats < 0 || n < 0 || n_keep < 0 || n_keep > n || (n_keep > 0 && !keep) ||
        (n_mats > 1 && mat_stride < (size_t)n * row_bytes))
        return SCDB_EINVAL;
    if (n_keep == 0 || n_mats == 0 || row_bytes == 0) return SCDB_OK;
    if (!buf) {
        batch = (int)(COMPACT_BATCH_BYTES / bytes);
        if (batch < 1) batch = 1;
        if (batch > n_mats) batch = n_mats;
        if (batch > 65535) batch = 65535;
        CUDA_CHECK(cudaMallocAsync(&buf, bytes * (size_t)batch, 0));
    }
    /* 4-byte words when every row starts 4-byte aligned (KV rows, pos) */
    int words4 = row_bytes % 4 == 0 && mat_stride % 4 == 0 && (uintptr_t)x % 4 == 0 &&
                 (uintptr_t)buf % 4 == 0;
    for (int m0 = 0; m0 < n_mats && !rc; m0 += batch) {
        int nb = n_mats - m0 < batch ? n_mats - m0 : batch;
        char *base = (char *)x + (size_t)m0 * mat_stride;
        size_t units = words4 ? bytes / 4 : bytes;
        dim3 grid(kn_cuda_blocks(units), (unsigned)nb);
        if (words4)
            gather_rows_kernel<uint32_t><<<grid, 256>>>((const uint32_t *)base, mat_stride / 4,
                                                        row_bytes / 4, keep, n_keep,
                                                        (uint32_t *)buf);
        else
            gather_rows_kernel<unsigned char><<<grid, 256>>>((const unsigned char *)base,
                                                             mat_stride, row_bytes, keep, n_keep,
                                                             (unsigned char *)buf);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cudaMemcpy2DAsync(base, nb > 1 ? mat_stride : bytes, buf, bytes, bytes,
                                  (size_t)nb, cudaMemcpyDeviceToDevice, 0);
        if (e != cudaSuccess) {
            scdb_error("compact_rows: matrices %d..%d: %s", m0, m0 + nb - 1, cudaGetErrorString(e));
            rc = SCDB_EDEVICE;
        }
    }
    if (buf != scratch) cudaFreeAsync(buf, 0);
    return rc;
}

/* ---------------------------------------------------------------- accumulators */

#include "acc_kernels.cuh"

static const void *const acc_kernels[SCDB_KACC_N_KERNELS] = {
    (const void *)scdb_kacc_new_slots, (const void *)scdb_kacc_query_ent,
    (const void *)scdb_kacc_query_slots, (const void *)scdb_kacc_query_hdr,
    (const void *)scdb_kacc_finish};

static scdb_err runtime_launch(void *ctx, int kernel, unsigned grid, unsigned block, void **args)
{
    cudaError_t e = cudaLaunchKernel(acc_kernels[kernel], dim3(grid), dim3(block), args, 0,
                                     (cudaStream_t)ctx);
    if (e != cudaSuccess) {
        scdb_error("acc_update: %s: %s", kn_acc_kernel_names[kernel], cudaGetErrorString(e));
        return SCDB_EDEVICE;
    }
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_acc_update_cuda(const scdb_k_acc_buf *a, int n_old,
                                           const scdb_kv_cache *c, const float *probs,
                                           int probs_slots, int n_new, void *scratch,
                                           void *stream)
{
    void *buf = scratch;
    scdb_err rc;

    if (!a || !c) return SCDB_EINVAL;
    if (!buf) CUDA_CHECK(cudaMallocAsync(&buf, scdb_k_acc_update_scratch_bytes(a),
                                         (cudaStream_t)stream));
    rc = kn_acc_update_launch(a, n_old, c, probs, probs_slots, n_new, buf, runtime_launch,
                                  stream);
    if (buf != scratch) cudaFreeAsync(buf, (cudaStream_t)stream);
    return rc;
}

/* ---------------------------------------------------------------- SnapKV */

__device__ float snapkv_sum(const float *win, int ring_fill, int G, int g, int cap, int k)
{
    float s = 0.0f;
    for (int r = 0; r < ring_fill; r++) s = __fadd_rn(s, win[((size_t)r * G + g) * cap + k]);
    return s;
}

__global__ void snapkv_kernel(const float *win, int ring_fill, int G, int cap, int n, int half,
                              float *scores)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float acc = 0.0f;
    for (int g = 0; g < G; g++) {
        float mx = snapkv_sum(win, ring_fill, G, g, cap, j);
        for (int k = j - half; k <= j + half; k++) {
            if (k < 0 || k >= n) continue;
            float s = snapkv_sum(win, ring_fill, G, g, cap, k);
            if (s > mx) mx = s;
        }
        acc = __fadd_rn(acc, __fdiv_rn(mx, (float)G));
    }
    scores[j] = acc;
}

extern "C" scdb_err scdb_k_snapkv_score_cuda(const float *win, int ring_fill, int n_kv_heads,
                                             int capacity, int n, int pool, float *scores)
{
    if (n < 0 || n_kv_heads <= 0 || ring_fill < 0 || capacity < n || pool < 1 || pool % 2 == 0 ||
        (n > 0 && (!scores || (ring_fill > 0 && !win))))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    snapkv_kernel<<<kn_cuda_blocks((size_t)n), 256>>>(win, ring_fill, n_kv_heads, capacity, n,
                                                        pool / 2, scores);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}
