/* test_kernels.c — every CPU op against a plain-loop reference on random
 * inputs, including odd sizes; f16/bf16 conversion edge cases; the KV cache
 * layout and compaction; the codec and eviction ops; device selection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;   /* scdb_xorshift_f32 */
static float *rand_vec(size_t n)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = scdb_xorshift_f32(&rng);
    return p;
}
static void assert_close(const float *a, const float *b, size_t n, float tol)
{
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= tol + 1e-5f * fabsf(b[i]))) {
            fail_msg("element %zu: got %g want %g (|diff| %g > %g)", i, a[i], b[i], d, tol);
        }
    }
}

/* ------------------------------------------------------------ half */

static void test_f16_known(void **state)
{
    (void)state;
    assert_int_equal(scdb_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(scdb_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(scdb_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(scdb_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(scdb_f32_to_f16(65504.0f), 0x7bff);        /* max */
    assert_int_equal(scdb_f32_to_f16(65520.0f), 0x7c00);        /* rounds to inf */
    assert_int_equal(scdb_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(scdb_f32_to_f16(-INFINITY), 0xfc00);
    assert_true((scdb_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (scdb_f32_to_f16(NAN) & 0x3ff));
    assert_int_equal(scdb_f32_to_f16(5.9604645e-8f), 0x0001);   /* min subnormal */
    assert_int_equal(scdb_f32_to_f16(6.1035156e-5f), 0x0400);   /* min normal */
    assert_int_equal(scdb_f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00);  /* tie -> even */
    assert_int_equal(scdb_f32_to_f16(1.0f + 3.0f / 2048.0f), 0x3c02);  /* tie -> even */
    assert_true(scdb_f16_to_f32(0x0001) == 5.9604645e-8f);
    assert_true(scdb_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(isinf(scdb_f16_to_f32(0xfc00)) && scdb_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(scdb_f16_to_f32(0x7e00)));
    /* every finite f16 round-trips exactly */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        assert_int_equal(scdb_f32_to_f16(scdb_f16_to_f32((uint16_t)h)), h);
    }
}

static void test_bf16_known(void **state)
{
    (void)state;
    assert_int_equal(scdb_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(scdb_f32_to_bf16(-2.0f), 0xc000);
    assert_true(isnan(scdb_bf16_to_f32(scdb_f32_to_bf16(NAN))));
    assert_true(isinf(scdb_bf16_to_f32(scdb_f32_to_bf16(INFINITY))));
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1) */
    assert_int_equal(scdb_f32_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80);
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7f80) == 0x7f80) continue;
        assert_int_equal(scdb_f32_to_bf16(scdb_bf16_to_f32((uint16_t)h)), h);
    }
    /* random values: relative error within half an ulp */
    for (int i = 0; i < 10000; i++) {
        float x = scdb_xorshift_f32(&rng) * 1000.0f;
        assert_true(fabsf(scdb_bf16_to_f32(scdb_f32_to_bf16(x)) - x) <= fabsf(x) / 256.0f);
        assert_true(fabsf(scdb_f16_to_f32(scdb_f32_to_f16(x)) - x) <= fabsf(x) / 2048.0f);
    }
}

static void test_tensor_convert(void **state)
{
    (void)state;
    int64_t shape[2] = {3, 5}, bad[2] = {4, 5};
    scdb_tensor *a, *b, *c, *d;
    assert_int_equal(scdb_tensor_new(SCDB_F32, SCDB_DEV_CPU, 2, shape, &a), SCDB_OK);
    assert_int_equal(scdb_tensor_new(SCDB_F16, SCDB_DEV_CPU, 2, shape, &b), SCDB_OK);
    assert_int_equal(scdb_tensor_new(SCDB_BF16, SCDB_DEV_CPU, 2, shape, &c), SCDB_OK);
    assert_int_equal(scdb_tensor_new(SCDB_F32, SCDB_DEV_CPU, 2, bad, &d), SCDB_OK);
    for (int i = 0; i < 15; i++) ((float *)a->data)[i] = (float)i * 0.25f - 1.0f;
    assert_int_equal(scdb_tensor_convert(a, b), SCDB_OK);
    assert_int_equal(scdb_tensor_convert(b, c), SCDB_OK);
    assert_int_equal(scdb_tensor_convert(c, d), SCDB_ESHAPE);
    scdb_tensor_free(&d);
    assert_int_equal(scdb_tensor_new(SCDB_F32, SCDB_DEV_CPU, 2, shape, &d), SCDB_OK);
    assert_int_equal(scdb_tensor_convert(c, d), SCDB_OK);
    assert_close(d->data, a->data, 15, 0.0f);  /* quarter steps are exact */
    assert_int_equal(scdb_tensor_nbytes(b), 30);
    scdb_tensor *e = NULL;
    assert_int_equal(scdb_tensor_new((scdb_dtype)99, SCDB_DEV_CPU, 2, shape, &e), SCDB_EDTYPE);
    assert_null(e);
    assert_int_equal(scdb_tensor_new(SCDB_F32, SCDB_DEV_CPU, 5, shape, &e), SCDB_EINVAL);
    assert_int_equal(scdb_tensor_new(SCDB_F32, SCDB_DEV_CUDA, 2, shape, &e), SCDB_EUNSUPPORTED);
    scdb_tensor_free(&a); scdb_tensor_free(&b); scdb_tensor_free(&c); scdb_tensor_free(&d);
    assert_null(a);
    scdb_tensor_free(&a);  /* NULL is fine */
}

/* ------------------------------------------------------------ gemm */

static void ref_gemm(int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta,
                     float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[k * lda + i] : A[i * lda + k];
                float b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += (double)a * b;
            }
            C[i * ldc + j] = (float)(alpha * s + beta * C[i * ldc + j]);
        }
}

static void test_gemm(void **state)
{
    (void)state;
    int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {13, 17, 31}, {64, 33, 129}, {3, 257, 9}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                float *A = rand_vec((size_t)M * K), *B = rand_vec((size_t)K * N);
                float *C = rand_vec((size_t)M * N), *R = malloc((size_t)M * N * 4);
                memcpy(R, C, (size_t)M * N * 4);
                int lda = ta ? M : K, ldb = tb ? K : N;
                scdb_k_gemm_cpu(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C, N);
                ref_gemm(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, R, N);
                assert_close(C, R, (size_t)M * N, 1e-4f);
                free(A); free(B); free(C); free(R);
            }
}

static void test_linear(void **state)
{
    (void)state;
    int n = 11, in = 37, out = 19;
    float *x = rand_vec((size_t)n * in), *W = rand_vec((size_t)out * in);
    float *y = malloc((size_t)n * out * 4), *r = malloc((size_t)n * out * 4);
    scdb_k_linear_cpu(x, W, n, in, out, y);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int k = 0; k < in; k++) s += (double)x[i * in + k] * W[o * in + k];
            r[i * out + o] = (float)s;
        }
    assert_close(y, r, (size_t)n * out, 1e-4f);
    free(x); free(W); free(y); free(r);
}

/* ------------------------------------------------------------ norm, rope, softmax */

static void test_rmsnorm(void **state)
{
    (void)state;
    int rows = 5, dim = 131;
    float *x = rand_vec((size_t)rows * dim), *w = rand_vec(dim);
    float *o = malloc((size_t)rows * dim * 4), *r = malloc((size_t)rows * dim * 4);
    scdb_k_rmsnorm_cpu(x, w, rows, dim, 1e-5f, o);
    for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)x[i * dim + j] * x[i * dim + j];
        double inv = 1.0 / sqrt(ss / dim + 1e-5);
        for (int j = 0; j < dim; j++) r[i * dim + j] = (float)(x[i * dim + j] * inv * w[j]);
    }
    assert_close(o, r, (size_t)rows * dim, 1e-5f);
    scdb_k_rmsnorm_cpu(x, w, rows, dim, 1e-5f, x);   /* in place */
    assert_close(x, r, (size_t)rows * dim, 1e-5f);
    free(x); free(w); free(o); free(r);
}

static void test_rope(void **state)
{
    (void)state;
    int n = 9, heads = 3, hd = 14;
    int32_t pos[9] = {0, 1, 2, 5, 77, 300, 511, 1000, 4095};
    float *x = rand_vec((size_t)n * heads * hd), *orig = malloc((size_t)n * heads * hd * 4);
    float *r = malloc((size_t)n * heads * hd * 4);
    memcpy(orig, x, (size_t)n * heads * hd * 4);
    scdb_k_rope_cpu(x, n, heads, hd, pos, 10000.0f, 0);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                double f = pow(10000.0, -2.0 * i / hd), a = pos[t] * f;
                const float *o = orig + (t * heads + h) * hd;
                r[(t * heads + h) * hd + i] = (float)(o[i] * cos(a) - o[i + hd / 2] * sin(a));
                r[(t * heads + h) * hd + i + hd / 2] = (float)(o[i] * sin(a) + o[i + hd / 2] * cos(a));
            }
    assert_close(x, r, (size_t)n * heads * hd, 2e-3f);  /* f32 angles at pos 4095 */
    /* position 0 is the identity */
    assert_close(x, orig, (size_t)heads * hd, 0.0f);
    /* undo restores the input */
    scdb_k_rope_cpu(x, n, heads, hd, pos, 10000.0f, 1);
    assert_close(x, orig, (size_t)n * heads * hd, 1e-5f);
    /* in two steps (the angles once, then any number of tensors): the same
     * bits, both ways, and a head_dim past rope_cpu's stack table */
    for (int big = 0; big <= 1; big++) {
        int d = big ? 300 : hd, m = big ? 2 : n;
        size_t len = (size_t)m * heads * d;
        float *a = rand_vec(len), *b = malloc(len * 4), *cs = malloc((size_t)m * d * 4);
        memcpy(b, a, len * 4);
        scdb_k_rope_angles_cpu(pos, m, d, 10000.0f, cs);
        for (int inv = 0; inv <= 1; inv++) {
            scdb_k_rope_cpu(a, m, heads, d, pos, 10000.0f, inv);
            scdb_k_rope_apply_cpu(b, m, heads, d, cs, inv);
            assert_memory_equal(a, b, len * 4);
        }
        free(a); free(b); free(cs);
    }
    free(x); free(orig); free(r);
}

static void test_softmax(void **state)
{
    (void)state;
    int rows = 4, n = 23;
    float *x = rand_vec((size_t)rows * n), *r = malloc((size_t)rows * n * 4);
    for (int i = 0; i < rows * n; i++) x[i] *= 30.0f;   /* large logits */
    x[5] = -INFINITY;
    for (int i = 0; i < n; i++) x[3 * n + i] = -INFINITY;  /* fully masked row */
    for (int i = 0; i < rows; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < n; j++) if (x[i * n + j] > mx) mx = x[i * n + j];
        for (int j = 0; j < n; j++) s += mx == -INFINITY ? 0 : exp(x[i * n + j] - mx);
        for (int j = 0; j < n; j++)
            r[i * n + j] = mx == -INFINITY ? 0.0f : (float)(exp(x[i * n + j] - mx) / s);
    }
    scdb_k_softmax_cpu(x, rows, n);
    assert_close(x, r, (size_t)rows * n, 1e-6f);
    assert_true(x[5] == 0.0f);
    free(x); free(r);
    /* bit for bit the plain sequential form (max in one chain, expf of every
     * entry, one running sum), masked (causal) and unmasked rows of every
     * length around the 8-lane max, zero maxima of either sign */
    for (int len = 1; len <= 41; len++) {
        float *a = rand_vec((size_t)len), *b = malloc((size_t)len * 4);
        for (int i = 0; i < len; i++) {
            a[i] *= 20.0f;
            if (len > 3 && i > len / 2 && i % 3) a[i] = -INFINITY;
        }
        if (len == 7) { for (int i = 0; i < len; i++) a[i] = -1.0f; a[2] = 0.0f; a[5] = -0.0f; }
        if (len == 9) { for (int i = 0; i < len; i++) a[i] = -1.0f; a[1] = -0.0f; a[8] = 0.0f; }
        memcpy(b, a, (size_t)len * 4);
        float mx = -INFINITY, sum = 0.0f;
        for (int i = 0; i < len; i++) if (b[i] > mx) mx = b[i];
        for (int i = 0; i < len; i++) { b[i] = expf(b[i] - mx); sum += b[i]; }
        for (int i = 0; i < len; i++) b[i] *= 1.0f / sum;
        scdb_k_softmax_cpu(a, 1, len);
        assert_memory_equal(a, b, (size_t)len * 4);
        free(a); free(b);
    }
}

/* log-softmax: exp sums to 1, differences of logits kept, huge logits stable */
static void test_log_softmax(void **state)
{
    float x[5] = {1.0f, 2.0f, -3.0f, 0.5f, 2.0f}, y[5], big[3] = {1000.0f, 999.0f, -1000.0f};
    double s = 0;
    (void)state;
    scdb_k_log_softmax_cpu(x, 5, y);
    for (int i = 0; i < 5; i++) s += exp(y[i]);
    assert_true(fabs(s - 1.0) < 1e-6);
    assert_true(fabsf((y[1] - y[0]) - 1.0f) < 1e-6f);
    assert_true(y[1] == y[4]);
    scdb_k_log_softmax_cpu(big, 3, big);                  /* in place */
    assert_true(isfinite(big[0]) && big[0] <= 0.0f && big[0] > -1.0f);
    assert_true(fabsf((big[0] - big[1]) - 1.0f) < 1e-4f);
}

/* Adam: the first step moves every weight by lr against its gradient's
 * sign (bias correction), a zero gradient moves nothing; it minimises a
 * quadratic */
static void test_adam(void **state)
{
    float w[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.3f, -5.0f, 0.0f}, m[3] = {0}, v[3] = {0};
    (void)state;
    scdb_k_adam_step_cpu(w, g, m, v, 3, 0.1f, 1);
    assert_true(fabsf(w[0] - 0.9f) < 1e-5f);
    assert_true(fabsf(w[1] - -1.9f) < 1e-5f);
    assert_true(w[2] == 0.5f);
    float q = 3.0f, qm = 0, qv = 0;
    for (int t = 1; t <= 2000; t++) {
        float gq = 2.0f * (q - 1.25f);                    /* d/dq (q - 1.25)^2 */
        scdb_k_adam_step_cpu(&q, &gq, &qm, &qv, 1, 0.01f, t);
    }
    assert_true(fabsf(q - 1.25f) < 1e-2f);
}

static void test_nmse(void **state)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5}, z[4] = {0};
    (void)state;
    assert_true(scdb_k_nmse(a, a, 4) == 0.0);
    assert_true(fabs(scdb_k_nmse(a, b, 4) - 1.0 / 39.0) < 1e-12);
    assert_true(fabs(scdb_k_nmse(a, z, 4) - 30.0) < 1e-12);   /* no reference: absolute */
}

static void test_find_nonfinite(void **state)
{
    float f[5] = {0.0f, -1.5f, 3e38f, 1e-40f, 2.0f};
    uint16_t h[4] = {0x3c00, 0x7bff, 0xfbff, 0x0001};   /* 1, max, -max, subnormal */
    uint16_t b[3] = {0x3f80, 0x7f7f, 0x0001};
    int32_t i32[2] = {0x7fc00000, -1};
    size_t at = 99;
    (void)state;
    assert_int_equal(scdb_k_find_nonfinite(f, sizeof f, SCDB_F32, &at), 0);
    f[3] = NAN;
    assert_int_equal(scdb_k_find_nonfinite(f, sizeof f, SCDB_F32, &at), 1);
    assert_int_equal(at, 3);
    f[3] = 0.0f;
    f[4] = -INFINITY;
    assert_int_equal(scdb_k_find_nonfinite(f, sizeof f, SCDB_F32, &at), 1);
    assert_int_equal(at, 4);
    assert_int_equal(scdb_k_find_nonfinite(h, sizeof h, SCDB_F16, &at), 0);
    h[2] = 0xfc00;                                          /* -Inf */
    assert_int_equal(scdb_k_find_nonfinite(h, sizeof h, SCDB_F16, &at), 1);
    assert_int_equal(at, 2);
    h[2] = 0x7e01;                                          /* NaN */
    assert_int_equal(scdb_k_find_nonfinite(h, sizeof h, SCDB_F16, NULL), 1);
    assert_int_equal(scdb_k_find_nonfinite(b, sizeof b, SCDB_BF16, &at), 0);
    b[1] = 0x7f80;                                          /* +Inf */
    assert_int_equal(scdb_k_find_nonfinite(b, sizeof b, SCDB_BF16, &at), 1);
    assert_int_equal(at, 1);
    assert_int_equal(scdb_k_find_nonfinite(i32, sizeof i32, SCDB_I32, &at), 0);
    assert_int_equal(scdb_k_find_nonfinite(f, 0, SCDB_F32, &at), 0);
    {   /* at odd addresses (a message frame inside a receive buffer) */
        unsigned char raw[1 + sizeof f];
        memcpy(raw + 1, f, sizeof f);
        assert_int_equal(scdb_k_find_nonfinite(raw + 1, sizeof f, SCDB_F32, &at), 1);
        assert_int_equal(at, 4);
        memcpy(raw + 1, h, sizeof h);
        assert_int_equal(scdb_k_find_nonfinite(raw + 1, sizeof h, SCDB_F16, &at), 1);
        assert_int_equal(at, 2);
        h[2] = 0x3c00;
        memcpy(raw + 1, h, sizeof h);
        assert_int_equal(scdb_k_find_nonfinite(raw + 1, sizeof h, SCDB_F16, &at), 0);
    }
}

static void test_swiglu(void **state)
{
    (void)state;
    size_t n = 101;
    float *g = rand_vec(n), *u = rand_vec(n), *o = malloc(n * 4), *r = malloc(n * 4);
    for (size_t i = 0; i < n; i++) r[i] = (float)(g[i] / (1.0 + exp(-g[i])) * u[i]);
    scdb_k_swiglu_cpu(g, u, n, o);
    assert_close(o, r, n, 1e-6f);
    free(g); free(u); free(o); free(r);
}

/* ------------------------------------------------------------ attention */

static void ref_attention(const float *q, const int32_t *qp, int nq, int nh,
                          const float *k, const float *v, const int32_t *sp, int ns,
                          int nkv, int hd, float *out, float *probs)
{
    int group = nh / nkv;
    double *s = malloc((size_t)ns * sizeof *s);
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < nh; h++) {
            int g = h / group;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < ns; j++) {
                if (sp[j] > qp[i]) { s[j] = -INFINITY; continue; }
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)q[(i * nh + h) * hd + e] * k[(j * nkv + g) * hd + e];
                s[j] = d / sqrt((double)hd);
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < ns; j++) { s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - mx); sum += s[j]; }
            for (int e = 0; e < hd; e++) {
                double o = 0;
                for (int j = 0; j < ns; j++) o += s[j] / sum * v[(j * nkv + g) * hd + e];
                out[(i * nh + h) * hd + e] = (float)o;
            }
            for (int j = 0; j < ns; j++) probs[((size_t)h * nq + i) * ns + j] = (float)(s[j] / sum);
        }
    free(s);
}

static void check_attention(int nq, int nh, int nkv, int hd, int ns, int shuffle)
{
    float *q = rand_vec((size_t)nq * nh * hd), *k = rand_vec((size_t)ns * nkv * hd);
    float *v = rand_vec((size_t)ns * nkv * hd);
    float *out = malloc((size_t)nq * nh * hd * 4), *ref = malloc((size_t)nq * nh * hd * 4);
    float *pr = malloc((size_t)nh * nq * ns * 4), *rp = malloc((size_t)nh * nq * ns * 4);
    float *out2 = malloc((size_t)nq * nh * hd * 4);
    int32_t *qp = malloc((size_t)nq * 4), *sp = malloc((size_t)ns * 4);
    /* slots hold positions with gaps (as after eviction); queries follow */
    for (int j = 0; j < ns; j++) sp[j] = shuffle ? 3 * j + (j % 2) : j;
    for (int i = 0; i < nq; i++) qp[i] = shuffle ? 3 * (ns - nq) + 3 * i : ns - nq + i;
    ref_attention(q, qp, nq, nh, k, v, sp, ns, nkv, hd, ref, rp);
    assert_int_equal(scdb_k_attention_cpu(q, qp, nq, nh, k, v, sp, ns, nkv, hd, out, pr, NULL), SCDB_OK);
    assert_close(out, ref, (size_t)nq * nh * hd, 1e-4f);
    assert_close(pr, rp, (size_t)nh * nq * ns, 1e-5f);
    /* without probs, same output */
    assert_int_equal(scdb_k_attention_cpu(q, qp, nq, nh, k, v, sp, ns, nkv, hd, out2, NULL, NULL), SCDB_OK);
    assert_close(out2, out, (size_t)nq * nh * hd, 0.0f);
    free(q); free(k); free(v); free(out); free(ref); free(pr); free(rp); free(out2); free(qp); free(sp);
}

static void test_attention(void **state)
{
    (void)state;
    check_attention(1, 4, 2, 32, 1, 0);      /* single token decode at pos 0 */
    check_attention(7, 4, 2, 32, 7, 0);      /* prefill */
    check_attention(1, 4, 2, 32, 53, 0);     /* decode over a cache */
    check_attention(5, 6, 3, 10, 29, 1);     /* odd sizes, gapped positions */
    check_attention(9, 8, 1, 17, 40, 1);     /* multi-query */
    check_attention(3, 3, 3, 5, 11, 0);      /* plain MHA */
    /* bad head counts */
    float x[8] = {0};
    int32_t p[1] = {0};
    assert_int_equal(scdb_k_attention_cpu(x, p, 1, 3, x, x, p, 1, 2, 2, x, NULL, NULL), SCDB_EINVAL);
}

/* ------------------------------------------------------------ KV cache */

static void test_kv_cache(void **state)
{
    (void)state;
    scdb_kv_cache *c;
    int L = 3, H = 2, D = 4, cap = 10;
    assert_int_equal(scdb_kv_cache_new(L, H, D, cap, &c), SCDB_OK);
    c->n = 8;
    for (int s = 0; s < 8; s++) {
        c->pos[s] = 100 + s;
        for (int l = 0; l < L; l++)
            for (int e = 0; e < H * D; e++) {
                scdb_kv_k(c, l, s)[e] = (float)(l * 1000 + s * 10 + e);
                scdb_kv_v(c, l, s)[e] = -(float)(l * 1000 + s * 10 + e);
            }
    }
    int keep[] = {0, 1, 4, 7};
    assert_int_equal(scdb_kv_cache_compact(c, keep, 4), SCDB_OK);
    assert_int_equal(c->n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(c->pos[i], 100 + keep[i]);
        for (int l = 0; l < L; l++)
            for (int e = 0; e < H * D; e++) {
                assert_true(scdb_kv_k(c, l, i)[e] == (float)(l * 1000 + keep[i] * 10 + e));
                assert_true(scdb_kv_v(c, l, i)[e] == -(float)(l * 1000 + keep[i] * 10 + e));
            }
    }
    int unsorted[] = {1, 0}, range[] = {0, 9}, dup[] = {2, 2};
    assert_int_equal(scdb_kv_cache_compact(c, unsorted, 2), SCDB_EINVAL);
    assert_int_equal(scdb_kv_cache_compact(c, range, 2), SCDB_EINVAL);
    assert_int_equal(scdb_kv_cache_compact(c, dup, 2), SCDB_EINVAL);
    assert_int_equal(c->n, 4);   /* untouched by the refused calls */
    scdb_kv_cache_free(&c);
    assert_null(c);

    /* a view over caller memory */
    size_t bytes = scdb_kv_cache_bytes(L, H, D, cap);
    void *mem;
    assert_int_equal(posix_memalign(&mem, 64, bytes), 0);
    assert_int_equal(scdb_kv_cache_view(mem, bytes - 1, L, H, D, cap, &c), SCDB_EINVAL);
    assert_int_equal(scdb_kv_cache_view((char *)mem + 4, bytes, L, H, D, cap, &c), SCDB_EINVAL);
    assert_int_equal(scdb_kv_cache_view(mem, bytes, L, H, D, cap, &c), SCDB_OK);
    assert_ptr_equal(c->pos, mem);
    assert_true((char *)scdb_kv_v(c, L - 1, cap - 1) + H * D * 4 <= (char *)mem + bytes);
    scdb_kv_cache_free(&c);
    free(mem);
    assert_int_equal(scdb_kv_cache_new(0, H, D, cap, &c), SCDB_EINVAL);
    assert_null(c);
}

/* ------------------------------------------------------------ codec ops */

static uint16_t *f16_vec(size_t n, float scale)
{
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = scdb_f32_to_f16(scdb_xorshift_f32(&rng) * scale);
    return p;
}

/* reference RoPE of one row [heads][hd] at position p (double angles) */
static void ref_rope_row(float *x, int heads, int hd, int32_t p)
{
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < hd / 2; i++) {
            double f = pow(10000.0, -2.0 * i / hd), ang = p * f;
            float *o = x + h * hd;
            double a = o[i], b = o[i + hd / 2];
            o[i] = (float)(a * cos(ang) - b * sin(ang));
            o[i + hd / 2] = (float)(a * sin(ang) + b * cos(ang));
        }
}

static void test_gemm_ex(void **state)
{
    (void)state;
    int M = 13, N = 17, K = 33;
    scdb_dtype dts[2] = {SCDB_F16, SCDB_BF16};
    for (int d = 0; d < 2; d++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
                uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
                float *Af = malloc(na * 4), *Bf = malloc(nb * 4);
                for (size_t i = 0; i < na; i++) {
                    A[i] = dts[d] == SCDB_F16 ? scdb_f32_to_f16(scdb_xorshift_f32(&rng)) : scdb_f32_to_bf16(scdb_xorshift_f32(&rng));
                    Af[i] = dts[d] == SCDB_F16 ? scdb_f16_to_f32(A[i]) : scdb_bf16_to_f32(A[i]);
                }
                for (size_t i = 0; i < nb; i++) {
                    B[i] = dts[d] == SCDB_F16 ? scdb_f32_to_f16(scdb_xorshift_f32(&rng)) : scdb_f32_to_bf16(scdb_xorshift_f32(&rng));
                    Bf[i] = dts[d] == SCDB_F16 ? scdb_f16_to_f32(B[i]) : scdb_bf16_to_f32(B[i]);
                }
                float *C = rand_vec((size_t)M * ldc), *R = malloc((size_t)M * ldc * 4);
                memcpy(R, C, (size_t)M * ldc * 4);
                assert_int_equal(scdb_k_gemm_ex_cpu(ta, tb, M, N, K, 0.5f, dts[d], A, lda, B, ldb,
                                                    0.25f, C, ldc), SCDB_OK);
                ref_gemm(ta, tb, M, N, K, 0.5f, Af, lda, Bf, ldb, 0.25f, R, ldc);
                assert_close(C, R, (size_t)M * ldc, 1e-5f);
                free(A); free(B); free(Af); free(Bf); free(C); free(R);
            }
    float x[4] = {0};
    assert_int_equal(scdb_k_gemm_ex_cpu(0, 0, 1, 1, 1, 1, SCDB_I32, x, 1, x, 1, 0, x, 1), SCDB_EDTYPE);
    assert_int_equal(scdb_k_gemm_ex_cpu(0, 0, 2, 2, 3, 1, SCDB_F16, x, 2, x, 2, 0, x, 2), SCDB_EINVAL);
}

static void test_lowrank_decode(void **state)
{
    (void)state;
    /* tokens, rank, heads, head_dim, ldz pad, ldy pad, rope */
    int cases[][7] = {{5, 7, 2, 8, 0, 0, 1}, {9, 16, 3, 14, 5, 3, 1}, {4, 33, 2, 6, 1, 0, 0},
                      {3, 0, 1, 4, 0, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c][0], r = cases[c][1], out = cases[c][2] * cases[c][3], hd = cases[c][3];
        int ldz = r + cases[c][4], ldy = out + cases[c][5], rope = cases[c][6];
        uint16_t *z = f16_vec((size_t)n * ldz, 2.0f), *dec = f16_vec((size_t)out * r, 0.5f);
        float *mean = rand_vec(out), *y = malloc((size_t)n * ldy * 4), *ref = malloc((size_t)n * ldy * 4);
        int32_t pos[16];
        for (int i = 0; i < n; i++) pos[i] = 3 * i + 1;
        for (size_t i = 0; i < (size_t)n * ldy; i++) y[i] = ref[i] = 42.0f;   /* padding untouched */
        for (int t = 0; t < n; t++) {
            for (int o = 0; o < out; o++) {
                double s = mean[o];
                for (int k = 0; k < r; k++)
                    s += (double)scdb_f16_to_f32(z[(size_t)t * ldz + k]) * scdb_f16_to_f32(dec[(size_t)o * r + k]);
                ref[(size_t)t * ldy + o] = (float)s;
            }
            if (rope) ref_rope_row(ref + (size_t)t * ldy, out / hd, hd, pos[t]);
        }
        assert_int_equal(scdb_k_lowrank_decode_cpu(z, ldz, n, r, dec, mean, out, rope ? pos : NULL, hd,
                                                   10000.0f, y, ldy), SCDB_OK);
        assert_close(y, ref, (size_t)n * ldy, 1e-4f);
        /* no mean: zero bias */
        assert_int_equal(scdb_k_lowrank_decode_cpu(z, ldz, n, r, dec, NULL, out, NULL, hd, 10000.0f,
                                                   y, ldy), SCDB_OK);
        for (int o = 0; o < out && r == 0; o++) assert_true(y[o] == 0.0f);
        free(z); free(dec); free(mean); free(y); free(ref);
    }
    uint16_t z[8] = {0};
    float y[8];
    int32_t pos[1] = {0};
    assert_int_equal(scdb_k_lowrank_decode_cpu(z, 2, 1, 2, z, NULL, 6, pos, 3, 1e4f, y, 6), SCDB_EINVAL);
    assert_int_equal(scdb_k_lowrank_decode_cpu(z, 2, 1, 2, z, NULL, 6, pos, 4, 1e4f, y, 6), SCDB_EINVAL);
    assert_int_equal(scdb_k_lowrank_decode_cpu(z, 1, 1, 2, z, NULL, 4, NULL, 4, 1e4f, y, 4), SCDB_EINVAL);
    assert_int_equal(scdb_k_lowrank_decode_cpu(z, 2, 1, 2, z, NULL, 4, NULL, 4, 1e4f, y, 3), SCDB_EINVAL);
}

static void test_lowrank_encode(void **state)
{
    (void)state;
    int n = 7, in = 19, r = 5, ldx = in + 2, ldz = r + 3;
    float *x = rand_vec((size_t)n * ldx), *mean = rand_vec(in), *enc = rand_vec((size_t)r * in);
    uint16_t *z = malloc((size_t)n * ldz * 2);
    for (size_t i = 0; i < (size_t)n * ldz; i++) z[i] = 0xbeef;
    assert_int_equal(scdb_k_lowrank_encode_cpu(x, ldx, n, in, mean, enc, r, z, ldz, NULL), SCDB_OK);
    for (int t = 0; t < n; t++) {
        for (int k = 0; k < r; k++) {
            double s = 0;
            for (int j = 0; j < in; j++) s += ((double)x[t * ldx + j] - mean[j]) * enc[k * in + j];
            float got = scdb_f16_to_f32(z[t * ldz + k]);
            assert_true(fabs(got - s) <= 1e-4 + fabs(s) / 1024.0);   /* f16: 2^-11 relative */
        }
        for (int k = r; k < ldz; k++) assert_int_equal(z[t * ldz + k], 0xbeef);
    }
    /* caller scratch gives the same codes */
    uint16_t *z2 = malloc((size_t)n * ldz * 2);
    memcpy(z2, z, (size_t)n * ldz * 2);
    float *scratch = malloc((size_t)n * (in + r) * 4);
    assert_int_equal(scdb_k_lowrank_encode_cpu(x, ldx, n, in, mean, enc, r, z2, ldz, scratch), SCDB_OK);
    assert_memory_equal(z, z2, (size_t)n * ldz * 2);
    assert_int_equal(scdb_k_lowrank_encode_cpu(x, in - 1, n, in, mean, enc, r, z, ldz, NULL), SCDB_EINVAL);
    free(x); free(mean); free(enc); free(z); free(z2); free(scratch);
}

static void test_aligner_kv_regen(void **state)
{
    (void)state;
    int n = 6, r = 9, hidden = 11, d = 10, ldz = 12, kv = 8, hd = 4;
    float *z = rand_vec((size_t)n * ldz), *w1 = rand_vec((size_t)hidden * r), *b1 = rand_vec(hidden);
    float *w2 = rand_vec((size_t)d * hidden), *b2 = rand_vec(d), *skip = rand_vec((size_t)d * r);
    float *h = malloc((size_t)n * d * 4), *ref = malloc((size_t)n * d * 4);
    for (int t = 0; t < n; t++) {
        double s[16];
        for (int j = 0; j < hidden; j++) {
            double a = b1[j];
            for (int k = 0; k < r; k++) a += (double)w1[j * r + k] * z[t * ldz + k];
            s[j] = a / (1.0 + exp(-a));
        }
        for (int o = 0; o < d; o++) {
            double a = b2[o];
            for (int j = 0; j < hidden; j++) a += w2[o * hidden + j] * s[j];
            for (int k = 0; k < r; k++) a += (double)skip[o * r + k] * z[t * ldz + k];
            ref[t * d + o] = (float)a;
        }
    }
    assert_int_equal(scdb_k_aligner_cpu(z, ldz, n, r, hidden, d, w1, b1, w2, b2, skip, h, NULL), SCDB_OK);
    assert_close(h, ref, (size_t)n * d, 1e-4f);
    assert_int_equal(scdb_k_aligner_cpu(z, r - 1, n, r, hidden, d, w1, b1, w2, b2, skip, h, NULL),
                     SCDB_EINVAL);

    /* K = RoPE(h Wk^T), V = h Wv^T */
    float *wk = rand_vec((size_t)kv * d), *wv = rand_vec((size_t)kv * d);
    float *k = malloc((size_t)n * kv * 4), *v = malloc((size_t)n * kv * 4);
    float *rk = malloc((size_t)n * kv * 4), *rv = malloc((size_t)n * kv * 4);
    int32_t pos[6] = {0, 1, 5, 9, 100, 2000};
    for (int t = 0; t < n; t++) {
        for (int o = 0; o < kv; o++) {
            double a = 0, b = 0;
            for (int j = 0; j < d; j++) { a += (double)h[t * d + j] * wk[o * d + j]; b += (double)h[t * d + j] * wv[o * d + j]; }
            rk[t * kv + o] = (float)a;
            rv[t * kv + o] = (float)b;
        }
        ref_rope_row(rk + t * kv, kv / hd, hd, pos[t]);
    }
    assert_int_equal(scdb_k_kv_regen_cpu(h, n, d, wk, wv, kv, pos, hd, 10000.0f, k, v), SCDB_OK);
    assert_close(k, rk, (size_t)n * kv, 1e-4f);
    assert_close(v, rv, (size_t)n * kv, 1e-4f);
    assert_int_equal(scdb_k_kv_regen_cpu(h, n, d, wk, wv, kv, pos, 3, 10000.0f, k, v), SCDB_EINVAL);
    free(z); free(w1); free(b1); free(w2); free(b2); free(skip); free(h); free(ref);
    free(wk); free(wv); free(k); free(v); free(rk); free(rv);
}

static void test_q4(void **state)
{
    (void)state;
    int g = 8;
    size_t n = 64;
    float *x = rand_vec(n), *y = malloc(n * 4);
    x[8] = x[9] = x[10] = x[11] = x[12] = x[13] = x[14] = x[15] = 0.5f;   /* a constant group */
    uint8_t *q = malloc(n / 2);
    uint16_t *ms = malloc(n / g * 4);
    assert_int_equal(scdb_k_q4_encode_cpu(x, n, g, q, ms), SCDB_OK);
    assert_int_equal(scdb_k_q4_decode_cpu(q, ms, n, g, y), SCDB_OK);
    for (size_t s = 0; s < n / g; s++) {
        float lo = scdb_f16_to_f32(ms[2 * s]), sc = scdb_f16_to_f32(ms[2 * s + 1]);
        for (int i = 0; i < g; i++) {
            size_t idx = s * g + i;
            int k = idx % 2 ? q[idx / 2] >> 4 : q[idx / 2] & 15;
            assert_true(y[idx] == lo + sc * (float)k);          /* decode is min + scale * level */
            /* within half a step (plus the f16 rounding of min and scale) */
            assert_true(fabsf(y[idx] - x[idx]) <= 0.5f * sc + 1e-3f);
        }
    }
    assert_true(y[9] == 0.5f);                                  /* constant group: exact */
    assert_int_equal(scdb_k_q4_encode_cpu(x, n, 7, q, ms), SCDB_EINVAL);   /* odd group */
    assert_int_equal(scdb_k_q4_encode_cpu(x, 60, 8, q, ms), SCDB_EINVAL);  /* not whole groups */
    assert_int_equal(scdb_k_q4_decode_cpu(q, ms, n, 0, y), SCDB_EINVAL);
    free(x); free(y); free(q); free(ms);
}

/* ------------------------------------------------------------ eviction ops */

static void test_evict_ops(void **state)
{
    (void)state;
    /* features from accumulator arrays */
    int32_t pos[4] = {0, 3, 7, 9};
    float n_obs[4] = {2, 0, 4, 1}, rel[4] = {1, 5, 2, 3}, var[4] = {0.5f, 1, 2, 0};
    float en[4] = {1, 1, 3, 0}, ed[4] = {2, 0, 4, 0}, vn[4] = {1.5f, 2, 3, 4};
    float ms[4] = {0.25f, 0, 7, 1};
    scdb_k_acc_arrays a = {pos, n_obs, rel, var, en, ed, vn, 9, ms};
    float f[24];
    assert_int_equal(scdb_k_evict_features_cpu(&a, 4, f), SCDB_OK);
    float want[24] = {0.5f, 1.5f, 0.25f, 0.5f, 0.1f, 0.25f,   0, 2, 0, 0, 0.4f, 0,
                      0.5f, 3, 0.5f, 0.75f, 0.8f, 7,          3, 4, 0, 0, 1, 1};
    assert_close(f, want, 24, 1e-7f);
    assert_int_equal(scdb_k_evict_features_cpu(NULL, 4, f), SCDB_EINVAL);
    a.mass = NULL;
    assert_int_equal(scdb_k_evict_features_cpu(&a, 4, f), SCDB_EINVAL);

    /* top-B: ties go to the higher slot, protected slots always kept */
    float s[10] = {9, 1, 5, 5, 0, 7, 5, 2, 8, 3};
    int keep[10], nk;
    assert_int_equal(scdb_k_select_topb_cpu(s, 10, 6, 1, 2, keep, &nk), SCDB_OK);
    /* sinks {0}, recent {8, 9}, m = 3 among 1..7: 7 (slot 5), then 5s: slots 6, 3 */
    int want_keep[6] = {0, 3, 5, 6, 8, 9};
    assert_int_equal(nk, 6);
    assert_memory_equal(keep, want_keep, sizeof want_keep);
    assert_int_equal(scdb_k_select_topb_cpu(s, 10, 12, 1, 2, keep, &nk), SCDB_OK);
    assert_int_equal(nk, 10);
    for (int i = 0; i < 10; i++) assert_int_equal(keep[i], i);
    /* protection larger than the budget shrinks, sinks first */
    assert_int_equal(scdb_k_select_topb_cpu(s, 10, 3, 2, 5, keep, &nk), SCDB_OK);
    int want3[3] = {0, 1, 9};
    assert_int_equal(nk, 3);
    assert_memory_equal(keep, want3, sizeof want3);
    assert_int_equal(scdb_k_select_topb_cpu(s, 10, 0, 0, 0, keep, &nk), SCDB_EINVAL);

    /* compaction equals the KV cache's own */
    scdb_kv_cache *c1, *c2;
    int L = 2, H = 2, D = 3, cap = 12, n = 10;
    assert_int_equal(scdb_kv_cache_new(L, H, D, cap, &c1), SCDB_OK);
    assert_int_equal(scdb_kv_cache_new(L, H, D, cap, &c2), SCDB_OK);
    c1->n = c2->n = n;
    for (int i = 0; i < n; i++) c1->pos[i] = c2->pos[i] = 10 * i;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < n * H * D; i++)
            scdb_kv_k(c1, l, 0)[i] = scdb_kv_k(c2, l, 0)[i] = scdb_kv_v(c1, l, 0)[i] =
                scdb_kv_v(c2, l, 0)[i] = scdb_xorshift_f32(&rng);
    assert_int_equal(scdb_kv_cache_compact(c1, want_keep, 6), SCDB_OK);
    size_t row = (size_t)H * D * 4, stride = (size_t)cap * row;
    assert_int_equal(scdb_k_compact_rows_cpu(c2->k, L, stride, row, n, want_keep, 6, NULL), SCDB_OK);
    assert_int_equal(scdb_k_compact_rows_cpu(c2->v, L, stride, row, n, want_keep, 6, NULL), SCDB_OK);
    assert_int_equal(scdb_k_compact_rows_cpu(c2->pos, 1, 0, 4, n, want_keep, 6, NULL), SCDB_OK);
    assert_memory_equal(c1->pos, c2->pos, 6 * 4);
    assert_memory_equal(c1->k, c2->k, (size_t)L * stride);
    assert_memory_equal(c1->v, c2->v, (size_t)L * stride);
    int bad[2] = {3, 3}, far[1] = {10};
    assert_int_equal(scdb_k_compact_rows_cpu(c2->pos, 1, 0, 4, n, bad, 2, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_k_compact_rows_cpu(c2->pos, 1, 0, 4, n, far, 1, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_k_compact_rows_cpu(c2->k, 2, row, row, n, want_keep, 6, NULL), SCDB_EINVAL);
    scdb_kv_cache_free(&c1);
    scdb_kv_cache_free(&c2);
}

/* Several groups compacted with one keep list equal each compacted alone
 * (runs long and short, 4-byte and wider rows), and a bad list, a NULL
 * group or a group whose matrices overlap is refused before anything
 * moves.  SnapKV's ring sum, taken in registers a block of slots at a
 * time, equals the plain row-order sum and its max-pool, bit for bit. */
static void test_compact_groups_snapkv(void **state)
{
    (void)state;
    uint64_t seed = 7;
    enum { N = 53, CAP = 64, M = 3 };
    static float a[M * CAP], b[M * CAP], w1[CAP], w2[CAP];
    int keep[N], nk = 0;
    for (int i = 0; i < N; i++)
        if (i < 3 || (i > 5 && i < 30) || i % 7 == 0 || i > 47) keep[nk++] = i;
    for (int i = 0; i < M * CAP; i++) a[i] = b[i] = scdb_xorshift_f32(&seed);
    for (int i = 0; i < CAP; i++) w1[i] = w2[i] = scdb_xorshift_f32(&seed);
    scdb_k_compact_group g[2] = {{a, M, CAP * 4}, {w1, 1, 0}};
    assert_int_equal(scdb_k_compact_groups_cpu(g, 2, 4, N, keep, nk), SCDB_OK);
    assert_int_equal(scdb_k_compact_rows_cpu(b, M, CAP * 4, 4, N, keep, nk, NULL), SCDB_OK);
    assert_int_equal(scdb_k_compact_rows_cpu(w2, 1, 0, 4, N, keep, nk, NULL), SCDB_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(w1, w2, sizeof w1);
    /* rows of 12 bytes: 16 rows */
    assert_int_equal(scdb_k_compact_rows_cpu(b, 1, 0, 12, 16, keep, 10, NULL), SCDB_OK);
    g[0] = (scdb_k_compact_group){a, 1, 0};
    assert_int_equal(scdb_k_compact_groups_cpu(g, 1, 12, 16, keep, 10), SCDB_OK);
    assert_memory_equal(a, b, sizeof a);
    int dup[3] = {0, 4, 4}, high[2] = {0, N};
    g[1] = (scdb_k_compact_group){w1, 1, 0};
    assert_int_equal(scdb_k_compact_groups_cpu(g, 2, 4, N, dup, 3), SCDB_EINVAL);
    assert_int_equal(scdb_k_compact_groups_cpu(g, 2, 4, N, high, 2), SCDB_EINVAL);
    assert_int_equal(scdb_k_compact_groups_cpu(NULL, 1, 4, N, keep, nk), SCDB_EINVAL);
    g[1] = (scdb_k_compact_group){NULL, 1, 0};
    assert_int_equal(scdb_k_compact_groups_cpu(g, 2, 4, N, keep, nk), SCDB_EINVAL);
    g[1] = (scdb_k_compact_group){w1, 2, 8};   /* matrices 8 bytes apart overlap */
    assert_int_equal(scdb_k_compact_groups_cpu(g, 2, 4, N, keep, nk), SCDB_EINVAL);
    assert_memory_equal(a, b, sizeof a);   /* refused before anything moved */

    enum { W = 5, S = 3, SC = 40 };
    static float win[W * S * SC], sc[S * SC], sums[S * SC], mean[SC];
    for (int i = 0; i < W * S * SC; i++) win[i] = scdb_xorshift_f32(&seed) * 1e-2f;
    for (int n = 1; n <= SC; n += 13)
        for (int pool = 1; pool <= 7; pool += 6)
            for (int fill = 0; fill <= W; fill += W) {
                assert_int_equal(scdb_k_snapkv_score_sets_cpu(win, fill, S, SC, n, pool, sc, sums),
                                 SCDB_OK);
                assert_int_equal(scdb_k_snapkv_score_cpu(win, fill, S, SC, n, pool, mean), SCDB_OK);
                float ref_mean[SC] = {0};
                for (int k = 0; k < S; k++) {
                    float s[SC];
                    for (int j = 0; j < n; j++) {
                        s[j] = 0.0f;
                        for (int r = 0; r < fill; r++) s[j] += win[((size_t)r * S + k) * SC + j];
                    }
                    assert_memory_equal(sums + (size_t)k * n, s, (size_t)n * sizeof *s);
                    for (int j = 0; j < n; j++) {
                        float m = s[j];
                        for (int d = -(pool / 2); d <= pool / 2; d++)
                            if (j + d >= 0 && j + d < n && s[j + d] > m) m = s[j + d];
                        assert_true(sc[(size_t)k * n + j] == m);
                        ref_mean[j] += m / (float)S;
                    }
                }
                assert_memory_equal(mean, ref_mean, (size_t)n * sizeof *mean);
            }
}

/* ------------------------------------------------------------ devices */

static void test_device(void **state)
{
    (void)state;
    scdb_device_pref p;
    scdb_device d = (scdb_device)-1;
    char why[256];
    assert_int_equal(scdb_device_parse("auto", &p), SCDB_OK);
    assert_int_equal(p, SCDB_DEVPREF_AUTO);
    assert_int_equal(scdb_device_parse("cpu", &p), SCDB_OK);
    assert_int_equal(p, SCDB_DEVPREF_CPU);
    assert_int_equal(scdb_device_parse("cuda", &p), SCDB_OK);
    assert_int_equal(p, SCDB_DEVPREF_CUDA);
    assert_int_equal(scdb_device_parse("gpu", &p), SCDB_EINVAL);
    assert_int_equal(scdb_device_parse("CUDA", &p), SCDB_EINVAL);
    assert_int_equal(scdb_device_parse(NULL, &p), SCDB_EINVAL);
    assert_string_equal(scdb_device_pref_name(SCDB_DEVPREF_CUDA), "cuda");
    assert_string_equal(scdb_device_name(SCDB_DEV_CPU), "cpu");

    assert_int_equal(scdb_device_resolve(SCDB_DEVPREF_CPU, &d, why, sizeof why), SCDB_OK);
    assert_int_equal(d, SCDB_DEV_CPU);
    assert_non_null(strstr(why, "CPU"));
    int have = scdb_k_cuda_device_count() > 0;
    assert_int_equal(scdb_device_resolve(SCDB_DEVPREF_AUTO, &d, why, sizeof why), SCDB_OK);
    assert_int_equal(d, have ? SCDB_DEV_CUDA : SCDB_DEV_CPU);
    assert_non_null(strstr(why, have ? "CUDA" : "CPU"));
    d = SCDB_DEV_CPU;
    scdb_err rc = scdb_device_resolve(SCDB_DEVPREF_CUDA, &d, why, sizeof why);
    if (have) {
        assert_int_equal(rc, SCDB_OK);
        assert_int_equal(d, SCDB_DEV_CUDA);
    } else {
#ifdef SCDB_HAVE_CUDA
        assert_int_equal(rc, SCDB_EDEVICE);
        assert_non_null(strstr(why, "no CUDA device"));
#else
        assert_int_equal(rc, SCDB_EUNSUPPORTED);
        assert_non_null(strstr(why, "no CUDA backend"));
#endif
    }
    assert_int_equal(scdb_device_resolve((scdb_device_pref)7, &d, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_device_resolve(SCDB_DEVPREF_CPU, NULL, NULL, 0), SCDB_EINVAL);
    /* commands without a CUDA path: auto falls back and says why, cuda refuses */
    d = SCDB_DEV_CUDA;
    assert_int_equal(scdb_device_resolve_cpu_only(SCDB_DEVPREF_AUTO, "scdb x", &d, why, sizeof why),
                     SCDB_OK);
    assert_int_equal(d, SCDB_DEV_CPU);
    assert_non_null(strstr(why, "scdb x has no CUDA path"));
    d = SCDB_DEV_CUDA;
    assert_int_equal(scdb_device_resolve_cpu_only(SCDB_DEVPREF_CPU, "scdb x", &d, NULL, 0), SCDB_OK);
    assert_int_equal(d, SCDB_DEV_CPU);
    d = SCDB_DEV_CPU;
    assert_int_equal(scdb_device_resolve_cpu_only(SCDB_DEVPREF_CUDA, "scdb x", &d, why, sizeof why),
                     SCDB_EUNSUPPORTED);
    assert_non_null(strstr(why, "cuda requested but scdb x has no CUDA path"));
    assert_int_equal(scdb_device_resolve_cpu_only((scdb_device_pref)9, "x", &d, NULL, 0), SCDB_EINVAL);
    /* the info query agrees with the count */
    scdb_k_cuda_info info;
    rc = scdb_k_cuda_device_info(0, &info);
    if (have) {
        assert_int_equal(rc, SCDB_OK);
        assert_true(info.peak_bw_gbs > 0);
    } else {
        assert_true(rc == SCDB_EDEVICE || rc == SCDB_EUNSUPPORTED);
    }
}

/* Every entry of both ops tables is set (a device sequence calls them
 * without checking), and the CPU table's memory functions work. */
static void test_ops_tables(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        const scdb_k_ops *o = scdb_k_ops_get(d ? SCDB_DEV_CUDA : SCDB_DEV_CPU);
        assert_non_null(o);
        assert_int_equal(o->device, d ? SCDB_DEV_CUDA : SCDB_DEV_CPU);
        const void *fns[] = {
            (const void *)o->alloc, (const void *)o->release, (const void *)o->upload,
            (const void *)o->download, (const void *)o->dcopy, (const void *)o->zero,
            (const void *)o->sync, (const void *)o->f16_to_f32, (const void *)o->lowrank_decode,
            (const void *)o->aligner, (const void *)o->kv_regen, (const void *)o->dcopy2d,
            (const void *)o->gemm, (const void *)o->linear, (const void *)o->rmsnorm,
            (const void *)o->rope, (const void *)o->swiglu, (const void *)o->attention,
            (const void *)o->q4_decode, (const void *)o->adam_step, (const void *)o->gather_rows,
            (const void *)o->bias_rows, (const void *)o->silu, (const void *)o->silu_backward,
            (const void *)o->sub, (const void *)o->colsum, (const void *)o->evict_features,
            (const void *)o->select_topb, (const void *)o->compact_rows,
            (const void *)o->acc_update, (const void *)o->snapkv_score};
        for (size_t k = 0; k < sizeof fns / sizeof *fns; k++)
            if (!fns[k]) fail_msg("%s table: entry %zu is NULL", d ? "CUDA" : "CPU", k);
    }
    assert_null(scdb_k_ops_get((scdb_device)7));
    const scdb_k_ops *o = scdb_k_ops_get(SCDB_DEV_CPU);
    unsigned char src[40], dst[64];
    void *p = NULL;
    for (int i = 0; i < 40; i++) src[i] = (unsigned char)i;
    memset(dst, 0xee, sizeof dst);
    assert_int_equal(o->dcopy2d(dst, 16, src, 10, 6, 4), SCDB_OK);   /* 4 rows of 6 bytes */
    for (int r = 0; r < 4; r++) {
        assert_memory_equal(dst + 16 * r, src + 10 * r, 6);
        assert_int_equal(dst[16 * r + 6], 0xee);
    }
    assert_int_equal(o->alloc(100, &p), SCDB_OK);
    assert_true(((uintptr_t)p & 63) == 0);
    assert_int_equal(o->zero(p, 100), SCDB_OK);
    o->release(p);
    if (scdb_k_cuda_device_count() <= 0) {
        void *q = (void *)1;
        scdb_err e = scdb_k_ops_get(SCDB_DEV_CUDA)->alloc(64, &q);
        assert_true(e == SCDB_EUNSUPPORTED || e == SCDB_EDEVICE);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known),
        cmocka_unit_test(test_bf16_known),
        cmocka_unit_test(test_tensor_convert),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_nmse),
        cmocka_unit_test(test_find_nonfinite),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_kv_cache),
        cmocka_unit_test(test_gemm_ex),
        cmocka_unit_test(test_lowrank_decode),
        cmocka_unit_test(test_lowrank_encode),
        cmocka_unit_test(test_aligner_kv_regen),
        cmocka_unit_test(test_q4),
        cmocka_unit_test(test_evict_ops),
        cmocka_unit_test(test_compact_groups_snapkv),
        cmocka_unit_test(test_device),
        cmocka_unit_test(test_ops_tables),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
