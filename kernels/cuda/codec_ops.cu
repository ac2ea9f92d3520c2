/* codec_ops.cu — the CUDA twins of kernels/cpu/codec_ops.c: GEMM with f16 /
 * bf16 inputs (cublasGemmEx, f32 accumulate), the fused low-rank decode,
 * encode, the aligner MLP, K/V regeneration, 4-bit quantisation, bf16
 * conversion, and the device's name and peak memory bandwidth.
 *
 * The low-rank decode is the broker's hot path (every REUSE layer of every
 * get), and it writes far more than it reads: per token and layer, r f16
 * code values in, kv_dim f32 K or V values out.  So it is one kernel that
 * writes each output exactly once:
 *
 *   block tile: 64 tokens x 128 output columns (whole heads when head_dim
 *   divides 128), 8 warps, each a 32 x 32 sub-tile of 2 x 2 WMMA
 *   16x16x16 fragments (f16 in, f32 accumulate)
 *
 *     k loop over r in steps of 32:
 *       z   [64][32]  f16  -> shared (zero-padded past n and r)
 *       dec [128][32] f16  -> shared (rows = output columns: the B operand
 *                                     in column-major form, no transpose)
 *       mma
 *       (the next k-tile is loaded into registers during the mma)
 *     epilogue: accumulators -> shared f32 [64][128] (aliasing the input
 *     tiles), + mean, RoPE on the pairs (i, i + head_dim/2) of each head
 *     with inv_freq from a per-block table and a range-reduced hardware
 *     sin/cos (~4e-7 absolute), coalesced float4 stores where aligned.
 *
 * Other shapes (head_dim > 128 or not dividing 128 with RoPE) take a plain
 * one-thread-per-output-pair kernel.  Scratch buffers the caller does not
 * pass come from the stream-ordered allocator (cudaMallocAsync), so no call
 * here synchronises the device. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"

using namespace nvcuda;

/* ---------------------------------------------------------------- helpers */

__global__ void fill_rows_kernel(float *dst, int n, int w, int ld, const float *src)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * w) return;
    size_t i = idx / w, j = idx % w;
    dst[i * ld + j] = src ? src[j] : 0.0f;
}

static scdb_err scratch_get(float *given, size_t floats, float **out, int *owned)
{
    *owned = 0;
    *out = given;
    if (given) return SCDB_OK;
    CUDA_CHECK(cudaMallocAsync((void **)out, floats ? floats * sizeof(float) : 4, 0));
    *owned = 1;
    return SCDB_OK;
}

/* ---------------------------------------------------------------- gemm_ex */

extern "C" scdb_err scdb_k_gemm_ex_cuda(int trans_a, int trans_b, int M, int N, int K, float alpha,
                                        scdb_dtype in_dt, const void *A, int lda, const void *B,
                                        int ldb, float beta, float *C, int ldc)
{
    int ac = trans_a ? M : K, bc = trans_b ? K : N;
    cudaDataType_t t;
    cublasHandle_t h;
    scdb_err rc;

    if (M < 0 || N < 0 || K < 0 || lda < (ac > 1 ? ac : 1) || ldb < (bc > 1 ? bc : 1) ||
        ldc < (N > 1 ? N : 1))
        return SCDB_EINVAL;
    if (in_dt == SCDB_F32)
        return scdb_k_gemm_cuda(trans_a, trans_b, M, N, K, alpha, (const float *)A, lda,
                                (const float *)B, ldb, beta, C, ldc);
    if (in_dt == SCDB_F16) t = CUDA_R_16F;
    else if (in_dt == SCDB_BF16) t = CUDA_R_16BF;
    else return SCDB_EDTYPE;
    if (M == 0 || N == 0) return SCDB_OK;
    if ((rc = kn_cuda_blas(&h))) return rc;
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
    CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                              trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                              B, t, ldb, A, t, lda, &beta, C, CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return SCDB_OK;
}

/* ---------------------------------------------------------------- decode */

#define DEC_BM 64
#define DEC_BN 128
#define DEC_BK 32
#define DEC_LDS (DEC_BK + 8)        /* halves per shared row: 80 bytes, keeps
                                       fragment rows 32-byte aligned */
#define DEC_LDC (DEC_BN + 4)        /* floats per shared output row */
#define DEC_THREADS 256

struct dec_in_tiles {
    __half a[DEC_BM][DEC_LDS];      /* codes: tokens x k */
    __half b[DEC_BN][DEC_LDS];      /* decoder rows: output columns x k */
};
union dec_smem {
    dec_in_tiles in;
    float c[DEC_BM][DEC_LDC];
};

/* sin and cos of x: x reduced to [-pi, pi] (x - k 2pi, 2pi split into a
 * float and its error), then the hardware approximations, which are
 * accurate to 2^-21.4 absolute there -- a tenth of the cost of sincosf. */
__device__ __forceinline__ void fast_sincos(float x, float *s, float *c)
{
    float k = rintf(x * 0.159154943f);
    float r = fmaf(-k, 6.28318548f, x);       /* 2pi rounded up to a float ... */
    r = fmaf(k, 1.7484556e-7f, r);            /* ... and what it rounded away */
    __sincosf(r, s, c);
}

__device__ __forceinline__ void rope_pair(float *a, float *b, float ang)
{
    float s, c;
    fast_sincos(ang, &s, &c);
    float x = *a, y = *b;
    *a = x * c - y * s;
    *b = x * s + y * c;
}

/* One thread's share of a k-tile, in registers: 8 code values (token tid/4,
 * from k (tid%4)*8) and 16 decoder values (column tid/2, from k (tid%2)*16),
 * zero past n, out and r.  The next tile is loaded while the current one is
 * multiplied. */
struct dec_regs { uint4 a, b0, b1; };

template <bool VEC>
__device__ __forceinline__ void dec_load(dec_regs *t, const __half *z, int ldz, int n, int r,
                                         const __half *dec, int out, int gr, int gc, int k0)
{
    const int tid = threadIdx.x, ka = k0 + (tid % 4) * 8, kb = k0 + (tid % 2) * 16;
    const __half hz = __float2half(0.0f);
    if (VEC && gr < n && ka + 8 <= r) {
        t->a = *(const uint4 *)(z + (size_t)gr * ldz + ka);
    } else {
        union { uint4 v; __half h[8]; } u;
        for (int e = 0; e < 8; e++) u.h[e] = gr < n && ka + e < r ? z[(size_t)gr * ldz + ka + e] : hz;
        t->a = u.v;
    }
    if (VEC && gc < out && kb + 16 <= r) {
        const uint4 *src = (const uint4 *)(dec + (size_t)gc * r + kb);
        t->b0 = src[0];
        t->b1 = src[1];
    } else {
        union { uint4 v[2]; __half h[16]; } u;
        for (int e = 0; e < 16; e++) u.h[e] = gc < out && kb + e < r ? dec[(size_t)gc * r + kb + e] : hz;
        t->b0 = u.v[0];
        t->b1 = u.v[1];
    }
}

/* vec_out: y rows, mean and the column groups allow float4 stores (see the
 * launch); otherwise one float at a time. */
template <bool VEC>
__global__ void __launch_bounds__(DEC_THREADS)
decode_wmma_kernel(const __half *z, int ldz, int n, int r, const __half *dec, const float *mean,
                   int out, const int32_t *pos, int head_dim, float theta, float *y, int ldy,
                   int vec_out)
{
    __shared__ __align__(128) dec_smem sm;
    __shared__ float inv_freq[DEC_BN / 2];
    const int tid = threadIdx.x, warp = tid / 32;
    const int row0 = blockIdx.y * DEC_BM, col0 = blockIdx.x * DEC_BN;
    const int wm = warp / 4, wn = warp % 4;     /* warp sub-tile: rows wm*32, cols wn*32 */
    const int ar = tid / 4, ak = (tid % 4) * 8, br = tid / 2, bk = (tid % 2) * 16;

    if (pos && tid < head_dim / 2)
        inv_freq[tid] = 1.0f / powf(theta, (float)(2 * tid) / (float)head_dim);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    dec_regs t;
    dec_load<VEC>(&t, z, ldz, n, r, dec, out, row0 + ar, col0 + br, 0);
    for (int k0 = 0; k0 < r; k0 += DEC_BK) {
        *(uint4 *)&sm.in.a[ar][ak] = t.a;
        *(uint4 *)&sm.in.b[br][bk] = t.b0;
        *(uint4 *)&sm.in.b[br][bk + 8] = t.b1;
        __syncthreads();
        if (k0 + DEC_BK < r)
            dec_load<VEC>(&t, z, ldz, n, r, dec, out, row0 + ar, col0 + br, k0 + DEC_BK);
        for (int kk = 0; kk < DEC_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(fa[i], &sm.in.a[wm * 32 + i * 16][kk], DEC_LDS);
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], &sm.in.b[wn * 32 + j * 16][kk], DEC_LDS);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();      /* the tiles are refilled, or reused as sm.c below */
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], DEC_LDC,
                                    wmma::mem_row_major);
    __syncthreads();

    if (pos) {
        /* pairs (c, c + half) of each whole head in the tile */
        const int half = head_dim / 2;
        if (vec_out) {        /* 4 consecutive pairs of one head per step */
            for (int p = tid; p < DEC_BM * (DEC_BN / 8); p += DEC_THREADS) {
                int tt = p / (DEC_BN / 8), q = (p % (DEC_BN / 8)) * 4;
                int i = q % half, c = (q / half) * head_dim + i, gr = row0 + tt, gc = col0 + c;
                if (gr >= n || gc >= out) continue;
                float4 a = *(const float4 *)&sm.c[tt][c], b = *(const float4 *)&sm.c[tt][c + half];
                if (mean) {
                    float4 ma = *(const float4 *)(mean + gc), mb = *(const float4 *)(mean + gc + half);
                    a.x += ma.x; a.y += ma.y; a.z += ma.z; a.w += ma.w;
                    b.x += mb.x; b.y += mb.y; b.z += mb.z; b.w += mb.w;
                }
                float pf = (float)pos[gr];
                rope_pair(&a.x, &b.x, pf * inv_freq[i]);
                rope_pair(&a.y, &b.y, pf * inv_freq[i + 1]);
                rope_pair(&a.z, &b.z, pf * inv_freq[i + 2]);
                rope_pair(&a.w, &b.w, pf * inv_freq[i + 3]);
                float *yr = y + (size_t)gr * ldy;
                *(float4 *)(yr + gc) = a;
                *(float4 *)(yr + gc + half) = b;
            }
        } else {
            for (int p = tid; p < DEC_BM * (DEC_BN / 2); p += DEC_THREADS) {
                int tt = p / (DEC_BN / 2), q = p % (DEC_BN / 2);
                int i = q % half, c = (q / half) * head_dim + i, gr = row0 + tt, gc = col0 + c;
                if (gr >= n || gc >= out) continue;
                float a = sm.c[tt][c], b = sm.c[tt][c + half];
                if (mean) { a += mean[gc]; b += mean[gc + half]; }
                rope_pair(&a, &b, (float)pos[gr] * inv_freq[i]);
                float *yr = y + (size_t)gr * ldy;
                yr[gc] = a;
                yr[gc + half] = b;
            }
        }
    } else if (vec_out) {
        for (int p = tid; p < DEC_BM * (DEC_BN / 4); p += DEC_THREADS) {
            int tt = p / (DEC_BN / 4), c = (p % (DEC_BN / 4)) * 4, gr = row0 + tt, gc = col0 + c;
            if (gr >= n || gc >= out) continue;
            float4 v = *(const float4 *)&sm.c[tt][c];
            if (mean) {
                float4 m = *(const float4 *)(mean + gc);
                v.x += m.x; v.y += m.y; v.z += m.z; v.w += m.w;
            }
            *(float4 *)(y + (size_t)gr * ldy + gc) = v;
        }
    } else {
        for (int p = tid; p < DEC_BM * DEC_BN; p += DEC_THREADS) {
            int tt = p / DEC_BN, c = p % DEC_BN, gr = row0 + tt, gc = col0 + c;
            if (gr >= n || gc >= out) continue;
            y[(size_t)gr * ldy + gc] = sm.c[tt][c] + (mean ? mean[gc] : 0.0f);
        }
    }
}

/* Any shape: one thread per output (no RoPE) or per RoPE pair. */
__global__ void decode_plain_kernel(const __half *z, int ldz, int n, int r, const __half *dec,
                                    const float *mean, int out, const int32_t *pos, int head_dim,
                                    float theta, float *y, int ldy)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int per_row = pos ? out / 2 : out;
    if (idx >= (size_t)n * per_row) return;
    int t = (int)(idx / per_row), q = (int)(idx % per_row);
    const __half *zt = z + (size_t)t * ldz;
    float *yr = y + (size_t)t * ldy;
    if (!pos) {
        const __half *d = dec + (size_t)q * r;
        float s = 0.0f;
        for (int k = 0; k < r; k++) s += __half2float(zt[k]) * __half2float(d[k]);
        yr[q] = s + (mean ? mean[q] : 0.0f);
        return;
    }
    int half = head_dim / 2, i = q % half, c = (q / half) * head_dim + i;
    const __half *d0 = dec + (size_t)c * r, *d1 = dec + (size_t)(c + half) * r;
    float a = 0.0f, b = 0.0f;
    for (int k = 0; k < r; k++) {
        float zk = __half2float(zt[k]);
        a += zk * __half2float(d0[k]);
        b += zk * __half2float(d1[k]);
    }
    if (mean) { a += mean[c]; b += mean[c + half]; }
    float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
    float s, co;
    sincosf((float)pos[t] * inv_freq, &s, &co);
    yr[c] = a * co - b * s;
    yr[c + half] = a * s + b * co;
}

extern "C" scdb_err scdb_k_lowrank_decode_cuda(const uint16_t *z, int ldz, int n, int r,
                                               const uint16_t *dec, const float *mean, int out,
                                               const int32_t *pos, int head_dim, float theta,
                                               float *y, int ldy)
{
    if (n < 0 || r < 0 || out <= 0 || ldz < r || ldy < out || (n > 0 && !y) ||
        (r > 0 && n > 0 && (!z || !dec)))
        return SCDB_EINVAL;
    if (pos && (head_dim <= 0 || head_dim % 2 || out % head_dim)) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    const __half *hz = (const __half *)z, *hd = (const __half *)dec;
    if (!pos || (head_dim <= DEC_BN && DEC_BN % head_dim == 0)) {
        dim3 grid((unsigned)((out + DEC_BN - 1) / DEC_BN), (unsigned)((n + DEC_BM - 1) / DEC_BM));
        if (grid.y > 65535) return SCDB_EINVAL;     /* > 4M tokens in one call */
        bool vec = r > 0 && ldz % 8 == 0 && r % 8 == 0 && (uintptr_t)z % 16 == 0 &&
                   (uintptr_t)dec % 16 == 0;
        /* float4 stores: rows and mean 16-byte aligned, and column groups of
         * 4 that stay inside one half-head (RoPE) or inside out */
        int vec_out = ldy % 4 == 0 && (uintptr_t)y % 16 == 0 && (uintptr_t)mean % 16 == 0 &&
                      (pos ? (head_dim / 2) % 4 == 0 : out % 4 == 0);
        if (vec)
            decode_wmma_kernel<true><<<grid, DEC_THREADS>>>(hz, ldz, n, r, hd, mean, out, pos,
                                                            head_dim, theta, y, ldy, vec_out);
        else
            decode_wmma_kernel<false><<<grid, DEC_THREADS>>>(hz, ldz, n, r, hd, mean, out, pos,
                                                             head_dim, theta, y, ldy, vec_out);
    } else {
        size_t total = (size_t)n * (out / 2);
        decode_plain_kernel<<<kn_cuda_blocks(total), 256>>>(hz, ldz, n, r, hd, mean, out, pos,
                                                              head_dim, theta, y, ldy);
    }
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- encode */

__global__ void centre_kernel(const float *x, int ldx, int n, int in, const float *mean, float *xc)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * in) return;
    size_t i = idx / in, j = idx % in;
    xc[idx] = x[i * ldx + j] - (mean ? mean[j] : 0.0f);
}

__global__ void to_f16_rows_kernel(const float *src, int n, int w, __half *dst, int ld)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * w) return;
    size_t i = idx / w, j = idx % w;
    dst[i * ld + j] = __float2half_rn(src[idx]);
}

extern "C" scdb_err scdb_k_lowrank_encode_cuda(const float *x, int ldx, int n, int in,
                                               const float *mean, const float *enc, int r,
                                               uint16_t *z, int ldz, float *scratch)
{
    float *s;
    int owned;
    scdb_err rc;

    if (n < 0 || in <= 0 || r < 0 || ldx < in || ldz < r || (n > 0 && (!x || !z)) ||
        (r > 0 && !enc))
        return SCDB_EINVAL;
    if (n == 0 || r == 0) return SCDB_OK;
    if ((rc = scratch_get(scratch, (size_t)n * (in + r), &s, &owned))) return rc;
    float *xc = s, *zc = s + (size_t)n * in;
    centre_kernel<<<kn_cuda_blocks((size_t)n * in), 256>>>(x, ldx, n, in, mean, xc);
    rc = cudaGetLastError() == cudaSuccess ? SCDB_OK : SCDB_EDEVICE;
    if (!rc) rc = scdb_k_gemm_cuda(0, 1, n, r, in, 1.0f, xc, in, enc, in, 0.0f, zc, r);
    if (!rc) {
        to_f16_rows_kernel<<<kn_cuda_blocks((size_t)n * r), 256>>>(zc, n, r, (__half *)z, ldz);
        if (cudaGetLastError() != cudaSuccess) rc = SCDB_EDEVICE;
    }
    if (rc == SCDB_EDEVICE) scdb_error("lowrank_encode: a kernel launch failed");
    if (owned) cudaFreeAsync(s, 0);
    return rc;
}

/* ---------------------------------------------------------------- aligner */

__global__ void silu_kernel(float *s, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) s[i] = s[i] * (1.0f / (1.0f + expf(-s[i])));
}

static scdb_err aligner_steps(const float *z, int ldz, int n, int r, int hidden, int d,
                              const float *w1, const float *b1, const float *w2, const float *b2,
                              const float *skip, float *h, float *s)
{
    scdb_err rc;
    /* scdb_aligner_apply's steps: s = b1 + z W1^T; silu; h = b2 + s W2^T + z S^T */
    fill_rows_kernel<<<kn_cuda_blocks((size_t)n * hidden), 256>>>(s, n, hidden, hidden, b1);
    CUDA_CHECK(cudaGetLastError());
    if ((rc = scdb_k_gemm_cuda(0, 1, n, hidden, r, 1.0f, z, ldz, w1, r, 1.0f, s, hidden))) return rc;
    silu_kernel<<<kn_cuda_blocks((size_t)n * hidden), 256>>>(s, (size_t)n * hidden);
    CUDA_CHECK(cudaGetLastError());
    fill_rows_kernel<<<kn_cuda_blocks((size_t)n * d), 256>>>(h, n, d, d, b2);
    CUDA_CHECK(cudaGetLastError());
    if ((rc = scdb_k_gemm_cuda(0, 1, n, d, hidden, 1.0f, s, hidden, w2, hidden, 1.0f, h, d))) return rc;
    return scdb_k_gemm_cuda(0, 1, n, d, r, 1.0f, z, ldz, skip, r, 1.0f, h, d);
}

extern "C" scdb_err scdb_k_aligner_cuda(const float *z, int ldz, int n, int r, int hidden, int d,
                                        const float *w1, const float *b1, const float *w2,
                                        const float *b2, const float *skip, float *h,
                                        float *scratch)
{
    float *s;
    int owned;
    scdb_err rc;

    if (n < 0 || r <= 0 || hidden <= 0 || d <= 0 || ldz < r ||
        (n > 0 && (!z || !h || !w1 || !b1 || !w2 || !b2 || !skip)))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if ((rc = scratch_get(scratch, (size_t)n * hidden, &s, &owned))) return rc;
    rc = aligner_steps(z, ldz, n, r, hidden, d, w1, b1, w2, b2, skip, h, s);
    if (owned) cudaFreeAsync(s, 0);
    return rc;
}

/* ---------------------------------------------------------------- K/V regeneration */

extern "C" scdb_err scdb_k_kv_regen_cuda(const float *h, int n, int d, const float *wk,
                                         const float *wv, int kv, const int32_t *pos,
                                         int head_dim, float theta, float *k, float *v)
{
    scdb_err rc;
    if (n < 0 || d <= 0 || kv <= 0 || head_dim <= 0 || head_dim % 2 || kv % head_dim ||
        (n > 0 && (!h || !wk || !wv || !pos || !k || !v)))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if ((rc = scdb_k_linear_cuda(h, wk, n, d, kv, k)) || (rc = scdb_k_linear_cuda(h, wv, n, d, kv, v)))
        return rc;
    return scdb_k_rope_cuda(k, n, kv / head_dim, head_dim, pos, theta, 0);
}

/* ---------------------------------------------------------------- 4-bit
 * Bit-exact with the CPU: explicit round-to-nearest operations (no FMA
 * contraction), f16 rounding of min and scale as the CPU does. */

__device__ int q4_level(float v, float flo, float fsc)
{
    int k = fsc > 0.0f ? __float2int_rn(__fdiv_rn(__fsub_rn(v, flo), fsc)) : 0;
    return k < 0 ? 0 : (k > 15 ? 15 : k);
}

__global__ void q4_encode_kernel(const float *x, size_t groups, int g, uint8_t *q, uint16_t *ms)
{
    size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= groups) return;
    const float *v = x + s * g;
    float lo = v[0], hi = v[0];
    for (int i = 1; i < g; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
    __half hlo = __float2half_rn(lo);
    float flo = __half2float(hlo);
    __half hsc = __float2half_rn(__fdiv_rn(__fsub_rn(hi, flo), 15.0f));
    float fsc = __half2float(hsc);
    ms[2 * s] = __half_as_ushort(hlo);
    ms[2 * s + 1] = __half_as_ushort(hsc);
    for (int i = 0; i < g; i += 2)
        q[(s * g + i) / 2] = (uint8_t)(q4_level(v[i], flo, fsc) | (q4_level(v[i + 1], flo, fsc) << 4));
}

__global__ void q4_decode_kernel(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t s = idx / g;
    float lo = __half2float(__ushort_as_half(ms[2 * s]));
    float sc = __half2float(__ushort_as_half(ms[2 * s + 1]));
    int k = idx % 2 == 0 ? q[idx / 2] & 15 : q[idx / 2] >> 4;
    x[idx] = __fadd_rn(lo, __fmul_rn(sc, (float)k));
}

extern "C" scdb_err scdb_k_q4_encode_cuda(const float *x, size_t n, int g, uint8_t *q, uint16_t *ms)
{
    if (g <= 0 || g % 2 || n % (size_t)g || (n > 0 && (!x || !q || !ms))) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    size_t groups = n / (size_t)g;
    q4_encode_kernel<<<kn_cuda_blocks(groups), 256>>>(x, groups, g, q, ms);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_q4_decode_cuda(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x)
{
    if (g <= 0 || g % 2 || n % (size_t)g || (n > 0 && (!x || !q || !ms))) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    q4_decode_kernel<<<kn_cuda_blocks(n), 256>>>(q, ms, n, g, x);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- bf16
 * The CPU's bit operations (round to nearest even, NaN kept quiet with its
 * payload's top bits), so the results are bit-identical. */

__global__ void f32_to_bf16_kernel(const float *s, uint16_t *d, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t x = __float_as_uint(s[i]);
    if ((x & 0x7fffffffu) > 0x7f800000u) { d[i] = (uint16_t)((x >> 16) | 0x40u); return; }
    x += 0x7fffu + ((x >> 16) & 1u);
    d[i] = (uint16_t)(x >> 16);
}

__global__ void bf16_to_f32_kernel(const uint16_t *s, float *d, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __uint_as_float((uint32_t)s[i] << 16);
}

extern "C" scdb_err scdb_k_f32_to_bf16_cuda(const float *src, uint16_t *dst, size_t n)
{
    if (n == 0) return SCDB_OK;
    f32_to_bf16_kernel<<<kn_cuda_blocks(n), 256>>>(src, dst, n);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

extern "C" scdb_err scdb_k_bf16_to_f32_cuda(const uint16_t *src, float *dst, size_t n)
{
    if (n == 0) return SCDB_OK;
    bf16_to_f32_kernel<<<kn_cuda_blocks(n), 256>>>(src, dst, n);
    CUDA_CHECK(cudaGetLastError());
    return SCDB_OK;
}

/* ---------------------------------------------------------------- device info */

extern "C" scdb_err scdb_k_cuda_device_info(int dev, scdb_k_cuda_info *out)
{
    cudaDeviceProp p;
    int clk = 0, bus = 0;
    if (!out) return SCDB_EINVAL;
    memset(out, 0, sizeof *out);
    if (dev < 0 || dev >= scdb_k_cuda_device_count()) return SCDB_EDEVICE;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    /* cudaDeviceProp::memoryClockRate is gone in CUDA 13: the attributes
     * are the supported way to read the memory clock (kHz) and bus width */
    CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev));
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->total_mem = p.totalGlobalMem;
    out->mem_clock_khz = clk;
    out->bus_width_bits = bus;
    out->peak_bw_gbs = 2.0 * clk * 1e3 * (bus / 8.0) / 1e9;
    return SCDB_OK;
}
