/* cuda_absent.c — the CUDA entry points in a build without nvcc: no device,
 * every op SCDB_EUNSUPPORTED, so callers link and fall back to the CPU. */
#include "kernels.h"

int scdb_k_cuda_device_count(void) { return 0; }
scdb_err scdb_k_cuda_malloc(size_t bytes, void **out) { (void)bytes; *out = NULL; return SCDB_EUNSUPPORTED; }
void scdb_k_cuda_free(void *p) { (void)p; }
scdb_err scdb_k_cuda_copy(void *d, const void *s, size_t b, int t) { (void)d; (void)s; (void)b; (void)t; return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_cuda_sync(void) { return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_gemm_cuda(int ta, int tb, int M, int N, int K, float al, const float *A, int lda,
                          const float *B, int ldb, float be, float *C, int ldc)
{
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)al; (void)A; (void)lda;
    (void)B; (void)ldb; (void)be; (void)C; (void)ldc;
    return SCDB_EUNSUPPORTED;
}
scdb_err scdb_k_linear_cuda(const float *x, const float *W, int n, int in, int out, float *y)
{
    (void)x; (void)W; (void)n; (void)in; (void)out; (void)y;
    return SCDB_EUNSUPPORTED;
}
scdb_err scdb_k_rmsnorm_cuda(const float *x, const float *w, int r, int d, float e, float *o)
{
    (void)x; (void)w; (void)r; (void)d; (void)e; (void)o;
    return SCDB_EUNSUPPORTED;
}
scdb_err scdb_k_rope_cuda(float *x, int n, int h, int d, const int32_t *p, float t, int i)
{
    (void)x; (void)n; (void)h; (void)d; (void)p; (void)t; (void)i;
    return SCDB_EUNSUPPORTED;
}
scdb_err scdb_k_softmax_cuda(float *x, int r, int n) { (void)x; (void)r; (void)n; return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_swiglu_cuda(const float *g, const float *u, size_t n, float *o)
{
    (void)g; (void)u; (void)n; (void)o;
    return SCDB_EUNSUPPORTED;
}
scdb_err scdb_k_f32_to_f16_cuda(const float *s, uint16_t *d, size_t n) { (void)s; (void)d; (void)n; return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_f16_to_f32_cuda(const uint16_t *s, float *d, size_t n) { (void)s; (void)d; (void)n; return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_attention_cuda(const float *q, const int32_t *qp, int nq, int nh, const float *k,
                               const float *v, const int32_t *sp, int ns, int nkv, int hd,
                               float *out, float *probs, float *scratch)
{
    (void)q; (void)qp; (void)nq; (void)nh; (void)k; (void)v; (void)sp; (void)ns; (void)nkv;
    (void)hd; (void)out; (void)probs; (void)scratch;
    return SCDB_EUNSUPPORTED;
}
