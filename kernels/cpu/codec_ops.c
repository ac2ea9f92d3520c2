/* codec_ops.c — the SCD codec's compute on the CPU: GEMM with f16 / bf16
 * inputs, low-rank decode (REUSE) and encode, the aligner MLP, K/V
 * regeneration, and the 4-bit baseline's quantiser (contracts in kernels.h).
 *
 * These are the references the CUDA twins are tested against, and they do
 * what codec/ does step for step: convert the f16 inputs to f32, fill the
 * output with the bias, accumulate one sgemm into it, then RoPE. */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* f32 copy of a strided matrix of `rows` rows of `cols` used columns
 * (row stride ld) in dtype dt; the copy keeps the stride ld.  NULL on
 * allocation failure. */
static float *to_f32(scdb_dtype dt, const void *src, int rows, int cols, int ld)
{
    size_t len = rows > 0 ? (size_t)(rows - 1) * ld + cols : 0;
    float *dst = malloc((len ? len : 1) * sizeof *dst);
    if (!dst) return NULL;
    for (int i = 0; i < rows; i++) {
        const uint16_t *s = (const uint16_t *)src + (size_t)i * ld;
        float *d = dst + (size_t)i * ld;
        if (dt == SCDB_F16) scdb_f16_to_f32_n(s, d, (size_t)cols);
        else scdb_bf16_to_f32_n(s, d, (size_t)cols);
    }
    return dst;
}

scdb_err scdb_k_gemm_ex_cpu(int trans_a, int trans_b, int M, int N, int K, float alpha,
                            scdb_dtype in_dt, const void *A, int lda, const void *B, int ldb,
                            float beta, float *C, int ldc)
{
    float *a32, *b32;
    /* stored shapes: A is [M][K] (or [K][M] transposed), B [K][N] (or [N][K]) */
    int ar = trans_a ? K : M, ac = trans_a ? M : K;
    int br = trans_b ? N : K, bc = trans_b ? K : N;

    if (M < 0 || N < 0 || K < 0 || lda < (ac > 1 ? ac : 1) || ldb < (bc > 1 ? bc : 1) ||
        ldc < (N > 1 ? N : 1))
        return SCDB_EINVAL;
    if (in_dt == SCDB_F32) {
        scdb_k_gemm_cpu(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return SCDB_OK;
    }
    if (in_dt != SCDB_F16 && in_dt != SCDB_BF16) return SCDB_EDTYPE;
    if (M == 0 || N == 0) return SCDB_OK;
    a32 = to_f32(in_dt, A, ar, ac, lda);
    b32 = to_f32(in_dt, B, br, bc, ldb);
    if (!a32 || !b32) { free(a32); free(b32); return SCDB_ENOMEM; }
    scdb_k_gemm_cpu(trans_a, trans_b, M, N, K, alpha, a32, lda, b32, ldb, beta, C, ldc);
    free(a32);
    free(b32);
    return SCDB_OK;
}

scdb_err scdb_k_lowrank_decode_cpu(const uint16_t *z, int ldz, int n, int r,
                                   const uint16_t *dec, const float *mean, int out,
                                   const int32_t *pos, int head_dim, float theta,
                                   float *y, int ldy)
{
    float *z32 = NULL, *d32 = NULL;

    if (n < 0 || r < 0 || out <= 0 || ldz < r || ldy < out || (n > 0 && !y) ||
        (r > 0 && n > 0 && (!z || !dec)))
        return SCDB_EINVAL;
    if (pos && (head_dim <= 0 || head_dim % 2 || out % head_dim)) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * ldy;
        if (mean) memcpy(yi, mean, (size_t)out * sizeof *yi);
        else memset(yi, 0, (size_t)out * sizeof *yi);
    }
    if (r > 0) {
        z32 = to_f32(SCDB_F16, z, n, r, ldz);
        d32 = to_f32(SCDB_F16, dec, out, r, r);
        if (!z32 || !d32) { free(z32); free(d32); return SCDB_ENOMEM; }
        scdb_k_gemm_cpu(0, 1, n, out, r, 1.0f, z32, ldz, d32, r, 1.0f, y, ldy);
    }
    if (pos) {
        if (ldy == out) {
            scdb_k_rope_cpu(y, n, out / head_dim, head_dim, pos, theta, 0);
        } else {
            for (int i = 0; i < n; i++)
                scdb_k_rope_cpu(y + (size_t)i * ldy, 1, out / head_dim, head_dim, pos + i, theta, 0);
        }
    }
    free(z32);
    free(d32);
    return SCDB_OK;
}

scdb_err scdb_k_lowrank_encode_cpu(const float *x, int ldx, int n, int in, const float *mean,
                                   const float *enc, int r, uint16_t *z, int ldz,
                                   float *scratch)
{
    float *own = NULL, *xc, *zc;

    if (n < 0 || in <= 0 || r < 0 || ldx < in || ldz < r || (n > 0 && (!x || !z)) ||
        (r > 0 && !enc))
        return SCDB_EINVAL;
    if (n == 0 || r == 0) return SCDB_OK;
    if (!scratch) {
        own = malloc((size_t)n * (in + r) * sizeof *own);
        if (!own) return SCDB_ENOMEM;
        scratch = own;
    }
    xc = scratch;
    zc = scratch + (size_t)n * in;
    /* centred rows, then z = xc enc^T, then f16: codebook.c's order */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < in; j++)
            xc[(size_t)i * in + j] = x[(size_t)i * ldx + j] - (mean ? mean[j] : 0.0f);
    scdb_k_gemm_cpu(0, 1, n, r, in, 1.0f, xc, in, enc, in, 0.0f, zc, r);
    for (int i = 0; i < n; i++)
        scdb_f32_to_f16_n(zc + (size_t)i * r, z + (size_t)i * ldz, (size_t)r);
    free(own);
    return SCDB_OK;
}

scdb_err scdb_k_aligner_cpu(const float *z, int ldz, int n, int r, int hidden, int d,
                            const float *w1, const float *b1, const float *w2,
                            const float *b2, const float *skip, float *h, float *scratch)
{
    float *own = NULL, *s;

    if (n < 0 || r <= 0 || hidden <= 0 || d <= 0 || ldz < r ||
        (n > 0 && (!z || !h || !w1 || !b1 || !w2 || !b2 || !skip)))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if (!scratch) {
        own = malloc((size_t)n * hidden * sizeof *own);
        if (!own) return SCDB_ENOMEM;
        scratch = own;
    }
    s = scratch;
    /* the steps and roundings of scdb_aligner_apply (codec/aligner.c) */
    for (int i = 0; i < n; i++) memcpy(s + (size_t)i * hidden, b1, (size_t)hidden * sizeof *s);
    scdb_k_gemm_cpu(0, 1, n, hidden, r, 1.0f, z, ldz, w1, r, 1.0f, s, hidden);
    for (size_t i = 0; i < (size_t)n * hidden; i++) s[i] = s[i] * (1.0f / (1.0f + expf(-s[i])));
    for (int i = 0; i < n; i++) memcpy(h + (size_t)i * d, b2, (size_t)d * sizeof *h);
    scdb_k_gemm_cpu(0, 1, n, d, hidden, 1.0f, s, hidden, w2, hidden, 1.0f, h, d);
    scdb_k_gemm_cpu(0, 1, n, d, r, 1.0f, z, ldz, skip, r, 1.0f, h, d);
    free(own);
    return SCDB_OK;
}

scdb_err scdb_k_kv_regen_cpu(const float *h, int n, int d, const float *wk, const float *wv,
                             int kv, const int32_t *pos, int head_dim, float theta,
                             float *k, float *v)
{
    if (n < 0 || d <= 0 || kv <= 0 || head_dim <= 0 || head_dim % 2 || kv % head_dim ||
        (n > 0 && (!h || !wk || !wv || !pos || !k || !v)))
        return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    scdb_k_linear_cpu(h, wk, n, d, kv, k);
    scdb_k_linear_cpu(h, wv, n, d, kv, v);
    scdb_k_rope_cpu(k, n, kv / head_dim, head_dim, pos, theta, 0);
    return SCDB_OK;
}

/* ------------------------------------------------------------ 4-bit */

scdb_err scdb_k_q4_encode_cpu(const float *x, size_t n, int g, uint8_t *q, uint16_t *ms)
{
    if (g <= 0 || g % 2 || n % (size_t)g || (n > 0 && (!x || !q || !ms))) return SCDB_EINVAL;
    for (size_t s = 0; s < n / (size_t)g; s++) {
        const float *v = x + s * g;
        float lo = v[0], hi = v[0];
        for (int i = 1; i < g; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
        /* min and scale are stored as f16: quantise against the stored values */
        uint16_t hlo = scdb_f32_to_f16(lo);
        float flo = scdb_f16_to_f32(hlo);
        float sc = (hi - flo) / 15.0f;
        uint16_t hsc = scdb_f32_to_f16(sc);
        float fsc = scdb_f16_to_f32(hsc);
        ms[2 * s] = hlo;
        ms[2 * s + 1] = hsc;
        for (int i = 0; i < g; i += 2) {
            int k[2];
            for (int j = 0; j < 2; j++) {
                k[j] = fsc > 0 ? (int)lrintf((v[i + j] - flo) / fsc) : 0;
                if (k[j] < 0) k[j] = 0;
                if (k[j] > 15) k[j] = 15;
            }
            q[(s * g + i) / 2] = (uint8_t)(k[0] | (k[1] << 4));
        }
    }
    return SCDB_OK;
}

scdb_err scdb_k_q4_decode_cpu(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x)
{
    if (g <= 0 || g % 2 || n % (size_t)g || (n > 0 && (!x || !q || !ms))) return SCDB_EINVAL;
    for (size_t s = 0; s < n / (size_t)g; s++) {
        float lo = scdb_f16_to_f32(ms[2 * s]), sc = scdb_f16_to_f32(ms[2 * s + 1]);
        for (int i = 0; i < g; i++) {
            size_t idx = s * g + i;
            int k = idx % 2 == 0 ? q[idx / 2] & 15 : q[idx / 2] >> 4;
            x[idx] = lo + sc * (float)k;
        }
    }
    return SCDB_OK;
}
