/* test_kernels.c — every CPU op against a plain-loop reference on random
 * inputs, including odd sizes; f16/bf16 conversion edge cases; the KV cache
 * layout and compaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *rand_vec(size_t n)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = frand();
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
        float x = frand() * 1000.0f;
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
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_kv_cache),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
