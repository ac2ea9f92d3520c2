/* test_kernels_cuda.c — every CUDA op against its CPU twin on random inputs
 * (odd sizes included).  Exits 77 (CTest: skipped) with a message when the
 * build has no CUDA backend or no device answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *rnd(size_t n) { float *p = malloc(n * 4); for (size_t i = 0; i < n; i++) p[i] = frand(); return p; }

static void *dev(const void *host, size_t bytes)
{
    void *d;
    assert_int_equal(scdb_k_cuda_malloc(bytes, &d), SCDB_OK);
    if (host) assert_int_equal(scdb_k_cuda_copy(d, host, bytes, 1), SCDB_OK);
    return d;
}
static void back(void *host, const void *d, size_t bytes)
{
    assert_int_equal(scdb_k_cuda_sync(), SCDB_OK);
    assert_int_equal(scdb_k_cuda_copy(host, d, bytes, 0), SCDB_OK);
}
/* llm.c-style tolerance: |a - b| <= tol + |b| * eps */
static void close_to(const float *a, const float *b, size_t n, float tol, float eps)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol + fabsf(b[i]) * eps))
            fail_msg("element %zu: cuda %g cpu %g", i, a[i], b[i]);
}

static void test_gemm(void **s)
{
    (void)s;
    int M = 37, N = 29, K = 61;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = rnd((size_t)M * K), *B = rnd((size_t)K * N), *C = rnd((size_t)M * N);
            float *R = malloc((size_t)M * N * 4), *G = malloc((size_t)M * N * 4);
            memcpy(R, C, (size_t)M * N * 4);
            int lda = ta ? M : K, ldb = tb ? K : N;
            float *dA = dev(A, (size_t)M * K * 4), *dB = dev(B, (size_t)K * N * 4), *dC = dev(C, (size_t)M * N * 4);
            scdb_k_gemm_cpu(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, R, N);
            assert_int_equal(scdb_k_gemm_cuda(ta, tb, M, N, K, 0.5f, dA, lda, dB, ldb, 0.25f, dC, N), SCDB_OK);
            back(G, dC, (size_t)M * N * 4);
            close_to(G, R, (size_t)M * N, 1e-4f, 1e-4f);
            scdb_k_cuda_free(dA); scdb_k_cuda_free(dB); scdb_k_cuda_free(dC);
            free(A); free(B); free(C); free(R); free(G);
        }
}

static void test_rows(void **s)
{
    (void)s;
    int rows = 7, dim = 131;
    size_t n = (size_t)rows * dim;
    float *x = rnd(n), *w = rnd(dim), *r = malloc(n * 4), *g = malloc(n * 4);
    float *dx = dev(x, n * 4), *dw = dev(w, dim * 4), *dout = dev(NULL, n * 4);
    scdb_k_rmsnorm_cpu(x, w, rows, dim, 1e-5f, r);
    assert_int_equal(scdb_k_rmsnorm_cuda(dx, dw, rows, dim, 1e-5f, dout), SCDB_OK);
    back(g, dout, n * 4);
    close_to(g, r, n, 1e-5f, 1e-5f);
    /* softmax, with a masked entry and a fully masked row */
    for (size_t i = 0; i < n; i++) x[i] *= 20.0f;
    x[3] = -INFINITY;
    for (int i = 0; i < dim; i++) x[2 * dim + i] = -INFINITY;
    memcpy(r, x, n * 4);
    scdb_k_softmax_cpu(r, rows, dim);
    assert_int_equal(scdb_k_cuda_copy(dx, x, n * 4, 1), SCDB_OK);
    assert_int_equal(scdb_k_softmax_cuda(dx, rows, dim), SCDB_OK);
    back(g, dx, n * 4);
    close_to(g, r, n, 1e-6f, 1e-5f);
    /* swiglu */
    float *u = rnd(n), *du = dev(u, n * 4);
    for (size_t i = 0; i < n; i++) x[i] = frand() * 4.0f;
    assert_int_equal(scdb_k_cuda_copy(dx, x, n * 4, 1), SCDB_OK);
    scdb_k_swiglu_cpu(x, u, n, r);
    assert_int_equal(scdb_k_swiglu_cuda(dx, du, n, dout), SCDB_OK);
    back(g, dout, n * 4);
    close_to(g, r, n, 1e-6f, 1e-5f);
    scdb_k_cuda_free(dx); scdb_k_cuda_free(dw); scdb_k_cuda_free(dout); scdb_k_cuda_free(du);
    free(x); free(w); free(r); free(g); free(u);
}

static void test_rope_half(void **s)
{
    (void)s;
    int n = 9, heads = 3, hd = 14;
    size_t m = (size_t)n * heads * hd;
    int32_t pos[9] = {0, 1, 2, 5, 77, 300, 511, 1000, 4095};
    float *x = rnd(m), *r = malloc(m * 4), *g = malloc(m * 4);
    memcpy(r, x, m * 4);
    float *dx = dev(x, m * 4);
    int32_t *dp = dev(pos, sizeof pos);
    for (int inv = 0; inv < 2; inv++) {
        scdb_k_rope_cpu(r, n, heads, hd, pos, 10000.0f, inv);
        assert_int_equal(scdb_k_rope_cuda(dx, n, heads, hd, dp, 10000.0f, inv), SCDB_OK);
        back(g, dx, m * 4);
        close_to(g, r, m, 1e-4f, 1e-4f);
    }
    /* f16 conversion: bit-exact with the CPU (both round to nearest even) */
    uint16_t *hc = malloc(m * 2), *hg = malloc(m * 2);
    uint16_t *dh = dev(NULL, m * 2);
    scdb_f32_to_f16_n(x, hc, m);
    assert_int_equal(scdb_k_f32_to_f16_cuda(dx, dh, m), SCDB_OK);
    back(hg, dh, m * 2);
    assert_memory_equal(hg, hc, m * 2);
    scdb_f16_to_f32_n(hc, r, m);
    assert_int_equal(scdb_k_f16_to_f32_cuda(dh, dx, m), SCDB_OK);
    back(g, dx, m * 4);
    close_to(g, r, m, 0.0f, 0.0f);
    scdb_k_cuda_free(dx); scdb_k_cuda_free(dp); scdb_k_cuda_free(dh);
    free(x); free(r); free(g); free(hc); free(hg);
}

static void test_attention(void **s)
{
    (void)s;
    int cases[][5] = {{1, 4, 2, 32, 1}, {7, 4, 2, 32, 7}, {1, 4, 2, 32, 513}, {5, 6, 3, 10, 29}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nq = cases[c][0], nh = cases[c][1], nkv = cases[c][2], hd = cases[c][3], ns = cases[c][4];
        size_t qn = (size_t)nq * nh * hd, kn = (size_t)ns * nkv * hd, pn = (size_t)nh * nq * ns;
        float *q = rnd(qn), *k = rnd(kn), *v = rnd(kn);
        float *o = malloc(qn * 4), *og = malloc(qn * 4), *p = malloc(pn * 4), *pg = malloc(pn * 4);
        int32_t *qp = malloc((size_t)nq * 4), *sp = malloc((size_t)ns * 4);
        for (int j = 0; j < ns; j++) sp[j] = 2 * j;
        for (int i = 0; i < nq; i++) qp[i] = 2 * (ns - nq + i);
        assert_int_equal(scdb_k_attention_cpu(q, qp, nq, nh, k, v, sp, ns, nkv, hd, o, p, NULL), SCDB_OK);
        float *dq = dev(q, qn * 4), *dk = dev(k, kn * 4), *dv = dev(v, kn * 4);
        float *dout = dev(NULL, qn * 4), *dpr = dev(NULL, pn * 4);
        int32_t *dqp = dev(qp, (size_t)nq * 4), *dsp = dev(sp, (size_t)ns * 4);
        assert_int_equal(scdb_k_attention_cuda(dq, dqp, nq, nh, dk, dv, dsp, ns, nkv, hd, dout, dpr, NULL), SCDB_OK);
        back(og, dout, qn * 4);
        back(pg, dpr, pn * 4);
        close_to(og, o, qn, 1e-5f, 1e-4f);
        close_to(pg, p, pn, 1e-6f, 1e-4f);
        scdb_k_cuda_free(dq); scdb_k_cuda_free(dk); scdb_k_cuda_free(dv); scdb_k_cuda_free(dout);
        scdb_k_cuda_free(dpr); scdb_k_cuda_free(dqp); scdb_k_cuda_free(dsp);
        free(q); free(k); free(v); free(o); free(og); free(p); free(pg); free(qp); free(sp);
    }
}

int main(void)
{
    int n = scdb_k_cuda_device_count();
    if (n <= 0) {
#ifdef SCDB_HAVE_CUDA
        printf("SKIP test_kernels_cuda: the CUDA backend is built but no CUDA device answers "
               "(cudaGetDeviceCount found none); run it on a GPU machine\n");
#else
        printf("SKIP test_kernels_cuda: this build has no CUDA backend (nvcc not found or "
               "-DSCDB_CUDA=OFF)\n");
#endif
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_rope_half),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests_name("kernels_cuda", tests, NULL, NULL);
}
