/* test_kernels_cuda.c — every CUDA op against its CPU twin on random inputs
 * (odd sizes included): by ggml-style normalised error where the summation
 * order differs, bit for bit where it does not (conversions, 4-bit,
 * selection, compaction).  Exits 77 (CTest: skipped) with a message when
 * the build has no CUDA backend or no device answers. */
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

static uint64_t rng = 0x2545f4914f6cdd1dull;   /* scdb_xorshift_f32 */
static float *rnd(size_t n) { float *p = malloc(n * 4); for (size_t i = 0; i < n; i++) p[i] = scdb_xorshift_f32(&rng); return p; }

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
    for (size_t i = 0; i < n; i++) x[i] = scdb_xorshift_f32(&rng) * 4.0f;
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

static void nmse_below(const char *what, const float *a, const float *b, size_t n, double max)
{
    double e = scdb_k_nmse(a, b, n);
    for (size_t i = 0; i < n; i++)
        if (isnan(a[i]) != isnan(b[i])) fail_msg("%s: element %zu: cuda %g cpu %g", what, i, a[i], b[i]);
    if (!(e <= max)) fail_msg("%s: normalised error %.3g > %.3g", what, e, max);
}
static uint16_t *h16(size_t n, float scale, int bf)
{
    uint16_t *p = malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) p[i] = bf ? scdb_f32_to_bf16(scdb_xorshift_f32(&rng) * scale) : scdb_f32_to_f16(scdb_xorshift_f32(&rng) * scale);
    return p;
}

/* Tolerances (normalised error): f32 accumulation on both sides of f16 /
 * bf16 / f32 inputs differs only in summation order: 1e-10 is ~1000x above
 * what that gives, and ~1e4x below one wrong element in a hundred. */
#define NMSE_F32 1e-10

static void test_gemm_ex(void **s)
{
    (void)s;
    int M = 45, N = 31, K = 67;
    for (int bf = 0; bf < 2; bf++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int lda = ta ? M : K, ldb = tb ? K : N;
                size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
                uint16_t *A = h16(na, 1.0f, bf), *B = h16(nb, 1.0f, bf);
                float *C = rnd(nc), *R = malloc(nc * 4), *G = malloc(nc * 4);
                memcpy(R, C, nc * 4);
                void *dA = dev(A, na * 2), *dB = dev(B, nb * 2);
                float *dC = dev(C, nc * 4);
                scdb_dtype dt = bf ? SCDB_BF16 : SCDB_F16;
                assert_int_equal(scdb_k_gemm_ex_cpu(ta, tb, M, N, K, 0.5f, dt, A, lda, B, ldb, 0.25f, R, N), SCDB_OK);
                assert_int_equal(scdb_k_gemm_ex_cuda(ta, tb, M, N, K, 0.5f, dt, dA, lda, dB, ldb, 0.25f, dC, N), SCDB_OK);
                back(G, dC, nc * 4);
                nmse_below(bf ? "gemm_ex bf16" : "gemm_ex f16", G, R, nc, NMSE_F32);
                scdb_k_cuda_free(dA); scdb_k_cuda_free(dB); scdb_k_cuda_free(dC);
                free(A); free(B); free(C); free(R); free(G);
            }
    assert_int_equal(scdb_k_gemm_ex_cuda(0, 0, 1, 1, 1, 1.0f, SCDB_I32, NULL, 1, NULL, 1, 0.0f, NULL, 1),
                     SCDB_EDTYPE);
}

static void test_lowrank_decode(void **s)
{
    (void)s;
    /* n, r, heads, head_dim, ldz pad, ldy pad, rope, mean: covers the fused
     * tensor-core kernel with vector loads (r, ldz multiples of 8), without
     * (odd r), partial tiles in both directions, no RoPE, and the plain
     * kernel (head_dim 14 does not divide 128) */
    int cases[][8] = {{67, 96, 2, 128, 0, 0, 1, 1}, {130, 256, 8, 128, 0, 0, 1, 1},
                      {33, 37, 4, 32, 3, 5, 1, 1},  {70, 64, 3, 64, 0, 0, 0, 1},
                      {19, 40, 5, 40, 8, 0, 0, 0},  {11, 24, 3, 14, 2, 1, 1, 1},
                      {5, 0, 2, 16, 0, 0, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c][0], r = cases[c][1], hd = cases[c][3], out = cases[c][2] * hd;
        int ldz = r + cases[c][4], ldy = out + cases[c][5], rope = cases[c][6], has_mean = cases[c][7];
        size_t nz = (size_t)n * ldz, nd = (size_t)out * r, ny = (size_t)n * ldy;
        uint16_t *z = h16(nz, 2.0f, 0), *dec = h16(nd, 0.25f, 0);
        float *mean = rnd(out), *R = malloc(ny * 4), *G = malloc(ny * 4);
        int32_t *pos = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) pos[i] = 7 * i + (i % 3);
        for (size_t i = 0; i < ny; i++) R[i] = 42.0f;       /* padding stays 42 */
        void *dz = dev(z, nz * 2), *dd = dev(dec, nd * 2);
        float *dm = dev(mean, (size_t)out * 4), *dy = dev(R, ny * 4);
        int32_t *dp = dev(pos, (size_t)n * 4);
        assert_int_equal(scdb_k_lowrank_decode_cpu(z, ldz, n, r, dec, has_mean ? mean : NULL, out,
                                                   rope ? pos : NULL, hd, 10000.0f, R, ldy), SCDB_OK);
        assert_int_equal(scdb_k_lowrank_decode_cuda(dz, ldz, n, r, dd, has_mean ? dm : NULL, out,
                                                    rope ? dp : NULL, hd, 10000.0f, dy, ldy), SCDB_OK);
        back(G, dy, ny * 4);
        char what[64];
        snprintf(what, sizeof what, "lowrank_decode case %zu", c);
        nmse_below(what, G, R, ny, r ? 1e-9 : NMSE_F32);   /* RoPE angles: sincosf vs libm */
        for (int t = 0; t < n; t++)
            for (int j = out; j < ldy; j++) assert_true(G[(size_t)t * ldy + j] == 42.0f);
        scdb_k_cuda_free(dz); scdb_k_cuda_free(dd); scdb_k_cuda_free(dm); scdb_k_cuda_free(dy);
        scdb_k_cuda_free(dp);
        free(z); free(dec); free(mean); free(R); free(G); free(pos);
    }
}

static void test_lowrank_encode(void **s)
{
    (void)s;
    int n = 53, in = 77, r = 19, ldx = in + 3, ldz = r + 5;
    size_t nx = (size_t)n * ldx, nz = (size_t)n * ldz;
    float *x = rnd(nx), *mean = rnd(in), *enc = rnd((size_t)r * in);
    uint16_t *zc = malloc(nz * 2), *zg = malloc(nz * 2);
    for (size_t i = 0; i < nz; i++) zc[i] = 0x1234;
    float *dx = dev(x, nx * 4), *dm = dev(mean, (size_t)in * 4), *de = dev(enc, (size_t)r * in * 4);
    uint16_t *dz = dev(zc, nz * 2);
    assert_int_equal(scdb_k_lowrank_encode_cpu(x, ldx, n, in, mean, enc, r, zc, ldz, NULL), SCDB_OK);
    assert_int_equal(scdb_k_lowrank_encode_cuda(dx, ldx, n, in, dm, de, r, dz, ldz, NULL), SCDB_OK);
    back(zg, dz, nz * 2);
    /* f16 codes: equal, or one f16 step apart where the f32 sums straddle
     * a rounding boundary; the padding untouched */
    float *fc = malloc(nz * 4), *fg = malloc(nz * 4);
    scdb_f16_to_f32_n(zc, fc, nz);
    scdb_f16_to_f32_n(zg, fg, nz);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < ldz; j++) {
            size_t i = (size_t)t * ldz + j;
            if (j >= r) { assert_int_equal(zg[i], 0x1234); continue; }
            if (!(fabsf(fg[i] - fc[i]) <= fabsf(fc[i]) / 1024.0f + 1e-7f))
                fail_msg("lowrank_encode (%d, %d): cuda %g cpu %g", t, j, fg[i], fc[i]);
        }
    nmse_below("lowrank_encode", fg, fc, nz, 1e-7);
    scdb_k_cuda_free(dx); scdb_k_cuda_free(dm); scdb_k_cuda_free(de); scdb_k_cuda_free(dz);
    free(x); free(mean); free(enc); free(zc); free(zg); free(fc); free(fg);
}

static void test_aligner_kv_regen(void **s)
{
    (void)s;
    int n = 41, r = 24, hidden = 37, d = 64, ldz = 30, kv = 32, hd = 16;
    float *z = rnd((size_t)n * ldz), *w1 = rnd((size_t)hidden * r), *b1 = rnd(hidden);
    float *w2 = rnd((size_t)d * hidden), *b2 = rnd(d), *sk = rnd((size_t)d * r);
    float *R = malloc((size_t)n * d * 4), *G = malloc((size_t)n * d * 4);
    float *dz = dev(z, (size_t)n * ldz * 4), *dw1 = dev(w1, (size_t)hidden * r * 4), *db1 = dev(b1, (size_t)hidden * 4);
    float *dw2 = dev(w2, (size_t)d * hidden * 4), *db2 = dev(b2, (size_t)d * 4), *dsk = dev(sk, (size_t)d * r * 4);
    float *dh = dev(NULL, (size_t)n * d * 4);
    assert_int_equal(scdb_k_aligner_cpu(z, ldz, n, r, hidden, d, w1, b1, w2, b2, sk, R, NULL), SCDB_OK);
    assert_int_equal(scdb_k_aligner_cuda(dz, ldz, n, r, hidden, d, dw1, db1, dw2, db2, dsk, dh, NULL), SCDB_OK);
    back(G, dh, (size_t)n * d * 4);
    nmse_below("aligner", G, R, (size_t)n * d, NMSE_F32);

    float *wk = rnd((size_t)kv * d), *wv = rnd((size_t)kv * d);
    float *K = malloc((size_t)n * kv * 4), *V = malloc((size_t)n * kv * 4);
    float *KG = malloc((size_t)n * kv * 4), *VG = malloc((size_t)n * kv * 4);
    int32_t *pos = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) pos[i] = 13 * i;
    float *dwk = dev(wk, (size_t)kv * d * 4), *dwv = dev(wv, (size_t)kv * d * 4);
    float *dk = dev(NULL, (size_t)n * kv * 4), *dv = dev(NULL, (size_t)n * kv * 4);
    int32_t *dp = dev(pos, (size_t)n * 4);
    assert_int_equal(scdb_k_kv_regen_cpu(R, n, d, wk, wv, kv, pos, hd, 10000.0f, K, V), SCDB_OK);
    assert_int_equal(scdb_k_kv_regen_cuda(dh, n, d, dwk, dwv, kv, dp, hd, 10000.0f, dk, dv), SCDB_OK);
    back(KG, dk, (size_t)n * kv * 4);
    back(VG, dv, (size_t)n * kv * 4);
    nmse_below("kv_regen K", KG, K, (size_t)n * kv, 1e-9);
    nmse_below("kv_regen V", VG, V, (size_t)n * kv, NMSE_F32);
    scdb_k_cuda_free(dz); scdb_k_cuda_free(dw1); scdb_k_cuda_free(db1); scdb_k_cuda_free(dw2);
    scdb_k_cuda_free(db2); scdb_k_cuda_free(dsk); scdb_k_cuda_free(dh); scdb_k_cuda_free(dwk);
    scdb_k_cuda_free(dwv); scdb_k_cuda_free(dk); scdb_k_cuda_free(dv); scdb_k_cuda_free(dp);
    free(z); free(w1); free(b1); free(w2); free(b2); free(sk); free(R); free(G);
    free(wk); free(wv); free(K); free(V); free(KG); free(VG); free(pos);
}

static void test_q4_bf16(void **s)
{
    (void)s;
    int g = 128;
    size_t n = (size_t)g * 37;
    float *x = rnd(n);
    for (size_t i = 0; i < n; i++) x[i] *= 3.0f;
    for (int i = 0; i < g; i++) x[5 * g + i] = -1.25f;      /* a constant group */
    uint8_t *qc = malloc(n / 2), *qg = malloc(n / 2);
    uint16_t *mc = malloc(n / g * 4), *mg = malloc(n / g * 4);
    float *yc = malloc(n * 4), *yg = malloc(n * 4);
    float *dx = dev(x, n * 4), *dy = dev(NULL, n * 4);
    uint8_t *dq = dev(NULL, n / 2);
    uint16_t *dms = dev(NULL, n / g * 4);
    assert_int_equal(scdb_k_q4_encode_cpu(x, n, g, qc, mc), SCDB_OK);
    assert_int_equal(scdb_k_q4_encode_cuda(dx, n, g, dq, dms), SCDB_OK);
    back(qg, dq, n / 2);
    back(mg, dms, n / g * 4);
    assert_memory_equal(qg, qc, n / 2);            /* bit-exact: same roundings */
    assert_memory_equal(mg, mc, n / g * 4);
    assert_int_equal(scdb_k_q4_decode_cpu(qc, mc, n, g, yc), SCDB_OK);
    assert_int_equal(scdb_k_q4_decode_cuda(dq, dms, n, g, dy), SCDB_OK);
    back(yg, dy, n * 4);
    assert_memory_equal(yg, yc, n * 4);
    assert_int_equal(scdb_k_q4_encode_cuda(dx, n, 7, dq, dms), SCDB_EINVAL);

    /* bf16: bit-exact with the CPU, specials included */
    x[0] = NAN; x[1] = INFINITY; x[2] = -INFINITY; x[3] = -0.0f; x[4] = 1.0f + 1.0f / 256.0f;
    x[6] = 3.4e38f; x[7] = 1e-40f;
    uint16_t *bc = malloc(n * 2), *bg = malloc(n * 2), *db = dev(NULL, n * 2);
    assert_int_equal(scdb_k_cuda_copy(dx, x, n * 4, 1), SCDB_OK);
    scdb_f32_to_bf16_n(x, bc, n);
    assert_int_equal(scdb_k_f32_to_bf16_cuda(dx, db, n), SCDB_OK);
    back(bg, db, n * 2);
    assert_memory_equal(bg, bc, n * 2);
    scdb_bf16_to_f32_n(bc, yc, n);
    assert_int_equal(scdb_k_bf16_to_f32_cuda(db, dy, n), SCDB_OK);
    back(yg, dy, n * 4);
    assert_memory_equal(yg, yc, n * 4);
    scdb_k_cuda_free(dx); scdb_k_cuda_free(dy); scdb_k_cuda_free(dq); scdb_k_cuda_free(dms);
    scdb_k_cuda_free(db);
    free(x); free(qc); free(qg); free(mc); free(mg); free(yc); free(yg); free(bc); free(bg);
}

static void test_evict_ops(void **s)
{
    (void)s;
    /* features */
    int n = 1000;
    int32_t *pos = malloc((size_t)n * 4);
    float *arr[7];
    for (int i = 0; i < n; i++) pos[i] = 2 * i;
    for (int k = 0; k < 7; k++) {
        arr[k] = rnd((size_t)n);
        for (int i = 0; i < n; i++) arr[k][i] = fabsf(arr[k][i]) * (i % 17 == 0 ? 0.0f : 1.0f);
    }
    scdb_k_acc_arrays ha = {pos, arr[0], arr[1], arr[2], arr[3], arr[4], arr[5], 2 * n - 1,
                            arr[6]};
    void *darr[7];
    for (int k = 0; k < 7; k++) darr[k] = dev(arr[k], (size_t)n * 4);
    int32_t *dpos = dev(pos, (size_t)n * 4);
    scdb_k_acc_arrays da = {dpos, darr[0], darr[1], darr[2], darr[3], darr[4], darr[5], 2 * n - 1,
                            darr[6]};
    size_t fb = (size_t)n * SCDB_K_EVICT_N_FEATURES * 4;
    float *fc = malloc(fb), *fg = malloc(fb), *dfe = dev(NULL, fb);
    assert_int_equal(scdb_k_evict_features_cpu(&ha, n, fc), SCDB_OK);
    assert_int_equal(scdb_k_evict_features_cuda(&da, n, dfe), SCDB_OK);
    back(fg, dfe, fb);
    close_to(fg, fc, (size_t)n * SCDB_K_EVICT_N_FEATURES, 0.0f, 1e-6f);

    /* top-B: identical keep lists, ties included (scores on a coarse grid) */
    int sizes[][4] = {{5000, 1250, 4, 32}, {777, 100, 0, 0}, {300, 299, 10, 10},
                      {64, 100, 4, 4}, {2000, 20, 16, 16}};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int m = sizes[c][0], budget = sizes[c][1], sinks = sizes[c][2], recent = sizes[c][3];
        float *sc = rnd((size_t)m);
        for (int i = 0; i < m; i++) sc[i] = floorf(sc[i] * 20.0f);
        int *kc = malloc((size_t)m * 4), *kg = malloc((size_t)m * 4), nkc, nkg;
        float *dsc = dev(sc, (size_t)m * 4);
        int *dk = dev(NULL, (size_t)m * 4);
        assert_int_equal(scdb_k_select_topb_cpu(sc, m, budget, sinks, recent, kc, &nkc), SCDB_OK);
        assert_int_equal(scdb_k_select_topb_cuda(dsc, m, budget, sinks, recent, dk, &nkg), SCDB_OK);
        assert_int_equal(nkg, nkc);
        back(kg, dk, (size_t)nkc * 4);
        assert_memory_equal(kg, kc, (size_t)nkc * 4);

        /* compaction with that keep list: 3 matrices of 40-byte rows (4-byte
         * words) and of 6-byte rows (bytes) */
        size_t rbs[2] = {40, 6};
        for (int b = 0; b < 2; b++) {
            size_t rb = rbs[b], stride = (size_t)(m + 3) * rb, tot = 3 * stride;
            unsigned char *xc = malloc(tot), *xg = malloc(tot);
            for (size_t i = 0; i < tot; i++) xc[i] = (unsigned char)(rng >> (i % 56)), rng += i;
            void *dx = dev(xc, tot);
            assert_int_equal(scdb_k_compact_rows_cpu(xc, 3, stride, rb, m, kc, nkc, NULL), SCDB_OK);
            assert_int_equal(scdb_k_compact_rows_cuda(dx, 3, stride, rb, m, dk, nkc, NULL), SCDB_OK);
            back(xg, dx, tot);
            assert_memory_equal(xg, xc, tot);
            scdb_k_cuda_free(dx);
            free(xc); free(xg);
        }
        scdb_k_cuda_free(dsc); scdb_k_cuda_free(dk);
        free(sc); free(kc); free(kg);
    }
    for (int k = 0; k < 6; k++) { scdb_k_cuda_free(darr[k]); free(arr[k]); }
    scdb_k_cuda_free(dpos); scdb_k_cuda_free(dfe);
    free(pos); free(fc); free(fg);
}

/* The accumulator update (a live session's step on a CUDA arena) against
 * the CPU twin over a get, a prefill chunk whose later slots are invisible
 * to its earlier queries, and decode steps: every array and header field
 * bit for bit, but the V norms and entropy numerators (1e-5 relative: the
 * order of their double reductions, and logf).  Then SnapKV's score (bit for
 * bit), Adam (1e-6) and the pitched copy (bit for bit). */
enum { AL = 3, AH = 4, AG = 2, AHD = 16, ACAP = 300, AWIN = 7 };
typedef struct acc_side {
    scdb_k_acc_buf b;
    void *mem[16];
    int nmem;
} acc_side;

static void *acc_arr(acc_side *a, int on_dev, size_t bytes)
{
    void *p;
    if (on_dev) p = dev(NULL, bytes), assert_int_equal(scdb_k_cuda_memset(p, 0, bytes), SCDB_OK);
    else p = calloc(1, bytes);
    a->mem[a->nmem++] = p;
    return p;
}

static void acc_side_new(acc_side *a, int on_dev)
{
    memset(a, 0, sizeof *a);
    a->b.n_layers = AL;
    a->b.n_heads = AH;
    a->b.n_kv_heads = AG;
    a->b.capacity = ACAP;
    a->b.window = AWIN;
    a->b.decay = 1.0f - 1.0f / 32.0f;
    size_t sb = ACAP * 4;
    a->b.pos = acc_arr(a, on_dev, sb);
    float **f[8] = {&a->b.n_obs, &a->b.mass, &a->b.rel, &a->b.var, &a->b.ent_num, &a->b.ent_den,
                    &a->b.vnorm, &a->b.last};
    for (int k = 0; k < 8; k++) *f[k] = acc_arr(a, on_dev, sb);
    a->b.win = acc_arr(a, on_dev, (size_t)AWIN * AG * sb);
    int32_t *hdr = acc_arr(a, on_dev, 64);
    a->b.n = hdr;
    a->b.ring_next = hdr + 1;
    a->b.ring_fill = hdr + 2;
    a->b.last_pos = hdr + 3;
    a->b.n_queries = (uint64_t *)(hdr + 4);
}

static void acc_side_free(acc_side *a, int on_dev)
{
    for (int i = 0; i < a->nmem; i++) on_dev ? scdb_k_cuda_free(a->mem[i]) : free(a->mem[i]);
}

static void acc_compare(acc_side *c, acc_side *g)
{
    size_t sb = ACAP * 4;
    void *h = malloc((size_t)AWIN * AG * sb);
    for (int k = 0; k < c->nmem; k++) {
        size_t bytes = k < 9 ? sb : k == 9 ? (size_t)AWIN * AG * sb : 64;
        back(h, g->mem[k], bytes);
        if (k == 5 || k == 7)     /* ent_num, vnorm */
            close_to(h, c->mem[k], ACAP, 1e-7f, 1e-5f);
        else if (memcmp(h, c->mem[k], bytes))
            fail_msg("accumulator array %d differs between CUDA and CPU", k);
    }
    free(h);
}

static void acc_probs(const scdb_kv_cache *c, int n_new, int slots, float *p)
{
    for (int lh = 0; lh < AL * AH; lh++)
        for (int q = 0; q < n_new; q++) {
            float *row = p + ((size_t)lh * n_new + q) * slots;
            int32_t qp = c->pos[c->n - n_new + q];
            double z = 0;
            for (int j = 0; j < slots; j++) {
                row[j] = j < c->n && c->pos[j] <= qp ? expf(2.0f * scdb_xorshift_f32(&rng)) : 0.0f;
                z += row[j];
            }
            for (int j = 0; j < slots; j++) row[j] = (float)(row[j] / z);
        }
}

static void test_acc_ops(void **s)
{
    (void)s;
    acc_side hc, gc;
    scdb_kv_cache *c, dcache;
    size_t cb = scdb_kv_cache_bytes(AL, AG, AHD, ACAP);
    assert_int_equal(scdb_kv_cache_new(AL, AG, AHD, ACAP, &c), SCDB_OK);
    void *dmem = dev(NULL, cb);
    float *probs = malloc((size_t)AL * AH * 4 * ACAP * 4), *dprobs = dev(NULL, (size_t)AL * AH * 4 * ACAP * 4);
    void *scratch = NULL;
    acc_side_new(&hc, 0);
    acc_side_new(&gc, 1);
    assert_int_equal(scdb_k_cuda_malloc(scdb_k_acc_update_scratch_bytes(&gc.b), &scratch), SCDB_OK);
    int n_old = 0;
    /* appends: 150 slots (a get), a 4-token chunk, then 20 decode steps */
    int plan[][2] = {{150, 0}, {4, 1}};
    for (int stage = 0; stage < 2 + 20; stage++) {
        int add = stage < 2 ? plan[stage][0] : 1, with_probs = stage < 2 ? plan[stage][1] : 1;
        for (int i = 0; i < add; i++) {
            int sl = c->n + i;
            c->pos[sl] = sl ? c->pos[sl - 1] + 1 + (sl % 5 == 0) : 0;
            for (int l = 0; l < AL; l++)
                for (int d = 0; d < AG * AHD; d++) {
                    scdb_kv_k(c, l, sl)[d] = scdb_xorshift_f32(&rng);
                    scdb_kv_v(c, l, sl)[d] = scdb_xorshift_f32(&rng);
                }
        }
        c->n += add;
        int slots = c->n + 5;
        if (with_probs) acc_probs(c, add, slots, probs);
        assert_int_equal(scdb_k_cuda_copy(dmem, c->mem, cb, 1), SCDB_OK);
        dcache = *c;
        dcache.mem = dmem;
        dcache.pos = (int32_t *)((char *)dmem + ((char *)c->pos - (char *)c->mem));
        dcache.k = (float *)((char *)dmem + ((char *)c->k - (char *)c->mem));
        dcache.v = (float *)((char *)dmem + ((char *)c->v - (char *)c->mem));
        size_t pb = (size_t)AL * AH * add * slots * 4;
        if (with_probs) assert_int_equal(scdb_k_cuda_copy(dprobs, probs, pb, 1), SCDB_OK);
        assert_int_equal(scdb_k_acc_update_cpu(&hc.b, n_old, c, with_probs ? probs : NULL, slots,
                                               add, NULL, NULL), SCDB_OK);
        assert_int_equal(scdb_k_acc_update_cuda(&gc.b, n_old, &dcache, with_probs ? dprobs : NULL,
                                                slots, add, stage % 2 ? scratch : NULL, NULL),
                         SCDB_OK);
        n_old = c->n;
        acc_compare(&hc, &gc);
    }
    /* refusals, before any launch */
    assert_int_equal(scdb_k_acc_update_cuda(&gc.b, n_old + 1, &dcache, dprobs, ACAP, 1, scratch, NULL),
                     SCDB_EINVAL);
    assert_int_equal(scdb_k_acc_update_cuda(&gc.b, n_old - 1, &dcache, dprobs, 4, 1, scratch, NULL),
                     SCDB_EINVAL);

    /* SnapKV's score on that ring, every pool size the policies use */
    int n = c->n;
    float *sc = malloc((size_t)n * 4), *sg = malloc((size_t)n * 4), *dsg = dev(NULL, (size_t)n * 4);
    for (int pool = 1; pool <= 7; pool += 2) {
        int fill = pool == 1 ? 3 : AWIN;
        assert_int_equal(scdb_k_snapkv_score_cpu(hc.b.win, fill, AG, ACAP, n, pool, sc), SCDB_OK);
        assert_int_equal(scdb_k_snapkv_score_cuda(gc.b.win, fill, AG, ACAP, n, pool, dsg), SCDB_OK);
        back(sg, dsg, (size_t)n * 4);
        assert_memory_equal(sg, sc, (size_t)n * 4);
    }
    /* Adam: three steps */
    size_t m = 1001;
    float *w = rnd(m), *g = rnd(m), *mm = calloc(m, 4), *vv = calloc(m, 4), *wg = malloc(m * 4);
    float *dw = dev(w, m * 4), *dg = dev(g, m * 4), *dm = dev(mm, m * 4), *dv = dev(vv, m * 4);
    for (int t = 1; t <= 3; t++) {
        scdb_k_adam_step_cpu(w, g, mm, vv, m, 1e-2f, t);
        assert_int_equal(scdb_k_adam_step_cuda(dw, dg, dm, dv, m, 1e-2f, t), SCDB_OK);
    }
    back(wg, dw, m * 4);
    close_to(wg, w, m, 1e-6f, 1e-5f);
    /* pitched copy: 5 rows of 12 bytes from a 20-byte into a 16-byte pitch */
    unsigned char src[100], out[80], ref[80];
    for (int i = 0; i < 100; i++) src[i] = (unsigned char)(i * 7);
    memset(ref, 0, sizeof ref);
    for (int r = 0; r < 5; r++) memcpy(ref + r * 16, src + r * 20, 12);
    void *ds = dev(src, 100), *dd = dev(ref, 80);
    assert_int_equal(scdb_k_cuda_memset(dd, 0, 80), SCDB_OK);
    assert_int_equal(scdb_k_cuda_copy2d(dd, 16, ds, 20, 12, 5), SCDB_OK);
    back(out, dd, 80);
    assert_memory_equal(out, ref, 80);

    scdb_k_cuda_free(ds); scdb_k_cuda_free(dd);
    scdb_k_cuda_free(dw); scdb_k_cuda_free(dg); scdb_k_cuda_free(dm); scdb_k_cuda_free(dv);
    free(w); free(g); free(mm); free(vv); free(wg);
    scdb_k_cuda_free(dsg); free(sc); free(sg);
    scdb_k_cuda_free(scratch);
    scdb_k_cuda_free(dprobs); free(probs);
    scdb_k_cuda_free(dmem);
    scdb_kv_cache_free(&c);
    acc_side_free(&hc, 0);
    acc_side_free(&gc, 1);
}

/* The aligner's training ops: gather and bias rows, the column sums and
 * the subtraction bit for bit, SiLU and its derivative within expf's
 * ulps. */
static void test_train_ops(void **s)
{
    (void)s;
    int rows = 257, cols = 37, n = 100;
    size_t m = (size_t)rows * cols;
    float *x = rnd(m), *y = rnd(m), *b = rnd((size_t)cols);
    int32_t idx[100];
    for (int i = 0; i < n; i++) idx[i] = (i * 37 + 5) % rows;
    float *rc_ = malloc(m * 4), *rg = malloc(m * 4);
    float *dx = dev(x, m * 4), *dy = dev(y, m * 4), *db = dev(b, (size_t)cols * 4),
          *dout = dev(NULL, m * 4);
    int32_t *didx = dev(idx, sizeof idx);
    /* gather */
    assert_int_equal(scdb_k_gather_rows_cpu(x, cols, idx, n, rc_), SCDB_OK);
    assert_int_equal(scdb_k_gather_rows_cuda(dx, cols, didx, n, dout), SCDB_OK);
    back(rg, dout, (size_t)n * cols * 4);
    assert_memory_equal(rg, rc_, (size_t)n * cols * 4);
    /* bias rows */
    assert_int_equal(scdb_k_bias_rows_cpu(rc_, b, rows, cols), SCDB_OK);
    assert_int_equal(scdb_k_bias_rows_cuda(dout, db, rows, cols), SCDB_OK);
    back(rg, dout, m * 4);
    assert_memory_equal(rg, rc_, m * 4);
    /* colsum */
    assert_int_equal(scdb_k_colsum_cpu(x, rows, cols, rc_), SCDB_OK);
    assert_int_equal(scdb_k_colsum_cuda(dx, rows, cols, dout), SCDB_OK);
    back(rg, dout, (size_t)cols * 4);
    assert_memory_equal(rg, rc_, (size_t)cols * 4);
    /* silu, silu_backward, sub */
    for (size_t i = 0; i < m; i++) x[i] *= 6.0f;
    assert_int_equal(scdb_k_cuda_copy(dx, x, m * 4, 1), SCDB_OK);
    assert_int_equal(scdb_k_silu_cpu(x, m, rc_), SCDB_OK);
    assert_int_equal(scdb_k_silu_cuda(dx, m, dout), SCDB_OK);
    back(rg, dout, m * 4);
    close_to(rg, rc_, m, 1e-6f, 1e-5f);
    memcpy(rc_, y, m * 4);
    assert_int_equal(scdb_k_cuda_copy(dout, y, m * 4, 1), SCDB_OK);
    assert_int_equal(scdb_k_silu_backward_cpu(rc_, x, m), SCDB_OK);
    assert_int_equal(scdb_k_silu_backward_cuda(dout, dx, m), SCDB_OK);
    back(rg, dout, m * 4);
    close_to(rg, rc_, m, 1e-6f, 1e-5f);
    assert_int_equal(scdb_k_sub_cpu(rc_, y, m), SCDB_OK);
    assert_int_equal(scdb_k_sub_cuda(dout, dy, m), SCDB_OK);
    back(rg, dout, m * 4);
    close_to(rg, rc_, m, 1e-6f, 1e-5f);
    assert_int_equal(scdb_k_colsum_cuda(NULL, rows, cols, dout), SCDB_EINVAL);
    scdb_k_cuda_free(dx); scdb_k_cuda_free(dy); scdb_k_cuda_free(db); scdb_k_cuda_free(dout);
    scdb_k_cuda_free(didx);
    free(x); free(y); free(b); free(rc_); free(rg);
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
        cmocka_unit_test(test_gemm_ex),
        cmocka_unit_test(test_lowrank_decode),
        cmocka_unit_test(test_lowrank_encode),
        cmocka_unit_test(test_aligner_kv_regen),
        cmocka_unit_test(test_q4_bf16),
        cmocka_unit_test(test_evict_ops),
        cmocka_unit_test(test_acc_ops),
        cmocka_unit_test(test_train_ops),
    };
    return cmocka_run_group_tests_name("kernels_cuda", tests, NULL, NULL);
}
