/* ops.c — GEMM (OpenBLAS), RMSNorm, RoPE, softmax and log-softmax, SwiGLU, Adam, the
 * normalised error, on the CPU. */
#include "kernels.h"

#include <cblas.h>
#include <math.h>

void scdb_k_cpu_threads(int n)
{
    openblas_set_num_threads(n > 0 ? n : 1);
}

void scdb_k_gemm_cpu(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (M == 1 && K > 0) {
        /* one row (a decode step): a matrix-vector product.  sgemm packs
         * all of B for every call, which for one row costs several times
         * the product itself (OpenBLAS's Zen kernels: most of a decode
         * step went to sgemm_incopy).  C = alpha op(B)^T a + beta C, a the
         * row of A (strided by lda when A is transposed) */
        cblas_sgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, trans_b ? N : K,
                    trans_b ? K : N, alpha, B, ldb, A, trans_a ? lda : 1, beta, C, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

void scdb_k_linear_cpu(const float *x, const float *W, int n, int in, int out,
                       float *y)
{
    scdb_k_gemm_cpu(0, 1, n, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
}

void scdb_k_rmsnorm_cpu(const float *x, const float *w, int n_rows, int dim,
                        float eps, float *out)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int i = 0; i < dim; i++) o[i] = xr[i] * inv * w[i];
    }
}

/* RoPE's inverse frequency of pair i: the PyTorch reference's
 * theta^(2i/d) in f32 */
static float rope_inv_freq(int i, int head_dim, float theta)
{
    return 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
}

/* rotate pair (i, i + half) of each head of one token by (c, s) */
static void rope_rotate(float *xt, int n_heads, int head_dim, int i, float c, float s)
{
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *xh = xt + (size_t)h * head_dim;
        float a = xh[i], b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = a * s + b * c;
    }
}

void scdb_k_rope_cpu(float *x, int n_tok, int n_heads, int head_dim,
                     const int32_t *pos, float theta, int inverse)
{
    int half = head_dim / 2;
    float inv_small[128];
    for (int i = 0; i < half && i < 128; i++) inv_small[i] = rope_inv_freq(i, head_dim, theta);
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < half; i++) {
            float inv_freq = i < 128 ? inv_small[i] : rope_inv_freq(i, head_dim, theta);
            float ang = (float)pos[t] * inv_freq;
            float c = cosf(ang), s = sinf(ang);
            if (inverse) s = -s;
            rope_rotate(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, i, c, s);
        }
    }
}

void scdb_k_rope_angles_cpu(const int32_t *pos, int n_tok, int head_dim, float theta, float *cs)
{
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        float inv_freq = rope_inv_freq(i, head_dim, theta);
        for (int t = 0; t < n_tok; t++) {
            float ang = (float)pos[t] * inv_freq;
            float c = cosf(ang), s = sinf(ang);
            cs[((size_t)t * half + i) * 2] = c;
            cs[((size_t)t * half + i) * 2 + 1] = s;
        }
    }
}

void scdb_k_rope_apply_cpu(float *x, int n_tok, int n_heads, int head_dim, const float *cs,
                           int inverse)
{
    int half = head_dim / 2;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < half; i++) {
            float c = cs[((size_t)t * half + i) * 2], s = cs[((size_t)t * half + i) * 2 + 1];
            if (inverse) s = -s;
            rope_rotate(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, i, c, s);
        }
}

/* max of x[0..n) as `if (x[i] > mx) mx = x[i]` from -INFINITY finds it (NaN
 * entries never win), in 8 independent lanes: the same value (a max rounds
 * nothing; at most the sign of a zero maximum may differ, which x - mx and
 * the -INFINITY test below do not see), without a compare chain as long as
 * the row. */
static float row_max(const float *x, int n)
{
    float m[8], mx = -INFINITY;
    int i = 0;
    for (int k = 0; k < 8; k++) m[k] = -INFINITY;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (int k = 0; k < 8; k++) if (m[k] > mx) mx = m[k];
    for (; i < n; i++) if (x[i] > mx) mx = x[i];
    return mx;
}

void scdb_k_softmax_cpu(float *x, int n_rows, int n)
{
    for (int r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * n;
        float mx = row_max(xr, n);
        if (mx == -INFINITY) {
            for (int i = 0; i < n; i++) xr[i] = 0.0f;
            continue;
        }
        float sum = 0.0f;
        /* masked entries (-INFINITY: half of a causal prefill's scores) are
         * exactly 0: no expf, and adding 0 to the (non-negative) sum leaves
         * it as it is, so skipping them changes no bit */
        for (int i = 0; i < n; i++) {
            if (xr[i] == -INFINITY) { xr[i] = 0.0f; continue; }
            xr[i] = expf(xr[i] - mx);
            sum += xr[i];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < n; i++) xr[i] *= inv;
    }
}

void scdb_k_swiglu_cpu(const float *gate, const float *up, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void scdb_k_log_softmax_cpu(const float *x, int n, float *out)
{
    float mx = x[0];
    double s = 0.0;
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    float lz = (float)(log(s) + mx);
    for (int i = 0; i < n; i++) out[i] = x[i] - lz;
}

void scdb_k_adam_step_cpu(float *w, const float *g, float *m, float *v, size_t n, float lr,
                          int t)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

double scdb_k_nmse(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0.0 ? num / den : num;
}
