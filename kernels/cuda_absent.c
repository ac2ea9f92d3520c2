/* cuda_absent.c — the CUDA entry points in a build without nvcc: no device,
 * every op SCDB_EUNSUPPORTED, so callers link and fall back to the CPU. */
#include "kernels.h"

#include <string.h>

int scdb_k_cuda_device_count(void) { return 0; }
scdb_err scdb_k_cuda_malloc(size_t bytes, void **out) { (void)bytes; *out = NULL; return SCDB_EUNSUPPORTED; }
void scdb_k_cuda_free(void *p) { (void)p; }
scdb_err scdb_k_cuda_copy(void *d, const void *s, size_t b, int t) { (void)d; (void)s; (void)b; (void)t; return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_cuda_sync(void) { return SCDB_EUNSUPPORTED; }
scdb_err scdb_k_cuda_memset(void *p, int v, size_t b) { (void)p; (void)v; (void)b; return SCDB_EUNSUPPORTED; }
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

/* the codec and eviction ops (kernels.h) */
#define ABSENT return SCDB_EUNSUPPORTED
scdb_err scdb_k_gemm_ex_cuda(int ta, int tb, int M, int N, int K, float al, scdb_dtype dt,
                             const void *A, int lda, const void *B, int ldb, float be, float *C,
                             int ldc)
{
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)al; (void)dt; (void)A; (void)lda;
    (void)B; (void)ldb; (void)be; (void)C; (void)ldc;
    ABSENT;
}
scdb_err scdb_k_lowrank_decode_cuda(const uint16_t *z, int ldz, int n, int r, const uint16_t *dec,
                                    const float *mean, int out, const int32_t *pos, int hd,
                                    float theta, float *y, int ldy)
{
    (void)z; (void)ldz; (void)n; (void)r; (void)dec; (void)mean; (void)out; (void)pos; (void)hd;
    (void)theta; (void)y; (void)ldy;
    ABSENT;
}
scdb_err scdb_k_lowrank_encode_cuda(const float *x, int ldx, int n, int in, const float *mean,
                                    const float *enc, int r, uint16_t *z, int ldz, float *scratch)
{
    (void)x; (void)ldx; (void)n; (void)in; (void)mean; (void)enc; (void)r; (void)z; (void)ldz;
    (void)scratch;
    ABSENT;
}
scdb_err scdb_k_aligner_cuda(const float *z, int ldz, int n, int r, int hidden, int d,
                             const float *w1, const float *b1, const float *w2, const float *b2,
                             const float *skip, float *h, float *scratch)
{
    (void)z; (void)ldz; (void)n; (void)r; (void)hidden; (void)d; (void)w1; (void)b1; (void)w2;
    (void)b2; (void)skip; (void)h; (void)scratch;
    ABSENT;
}
scdb_err scdb_k_kv_regen_cuda(const float *h, int n, int d, const float *wk, const float *wv,
                              int kv, const int32_t *pos, int hd, float theta, float *k, float *v)
{
    (void)h; (void)n; (void)d; (void)wk; (void)wv; (void)kv; (void)pos; (void)hd; (void)theta;
    (void)k; (void)v;
    ABSENT;
}
scdb_err scdb_k_q4_encode_cuda(const float *x, size_t n, int g, uint8_t *q, uint16_t *ms)
{
    (void)x; (void)n; (void)g; (void)q; (void)ms;
    ABSENT;
}
scdb_err scdb_k_q4_decode_cuda(const uint8_t *q, const uint16_t *ms, size_t n, int g, float *x)
{
    (void)q; (void)ms; (void)n; (void)g; (void)x;
    ABSENT;
}
scdb_err scdb_k_f32_to_bf16_cuda(const float *s, uint16_t *d, size_t n) { (void)s; (void)d; (void)n; ABSENT; }
scdb_err scdb_k_bf16_to_f32_cuda(const uint16_t *s, float *d, size_t n) { (void)s; (void)d; (void)n; ABSENT; }
scdb_err scdb_k_evict_features_cuda(const scdb_k_acc_arrays *a, int n, float *f)
{
    (void)a; (void)n; (void)f;
    ABSENT;
}
scdb_err scdb_k_select_topb_cuda(const float *s, int n, int b, int sinks, int recent, int *keep,
                                 int *n_keep)
{
    (void)s; (void)n; (void)b; (void)sinks; (void)recent; (void)keep; (void)n_keep;
    ABSENT;
}
scdb_err scdb_k_compact_rows_cuda(void *x, int n_mats, size_t stride, size_t row_bytes, int n,
                                  const int *keep, int n_keep, void *scratch)
{
    (void)x; (void)n_mats; (void)stride; (void)row_bytes; (void)n; (void)keep; (void)n_keep;
    (void)scratch;
    ABSENT;
}
scdb_err scdb_k_cuda_device_info(int dev, scdb_k_cuda_info *out)
{
    (void)dev;
    if (out) memset(out, 0, sizeof *out);
    ABSENT;
}

scdb_err scdb_k_cuda_ipc_handle(void *dev_ptr, uint8_t out[SCDB_CUDA_IPC_HANDLE_BYTES])
{
    (void)dev_ptr; (void)out;
    ABSENT;
}
scdb_err scdb_k_cuda_pci_bus_id(int dev, char *buf, size_t len)
{
    (void)dev; (void)buf; (void)len;
    ABSENT;
}
scdb_err scdb_k_cuda_copy_d2d(void *dst, const void *src, size_t bytes)
{
    (void)dst; (void)src; (void)bytes;
    ABSENT;
}
scdb_err scdb_k_acc_update_cuda(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                                const float *probs, int probs_slots, int n_new, void *scratch,
                                void *stream)
{
    (void)a; (void)n_old; (void)c; (void)probs; (void)probs_slots; (void)n_new; (void)scratch;
    (void)stream;
    ABSENT;
}
scdb_err scdb_k_snapkv_score_cuda(const float *win, int ring_fill, int n_kv_heads, int capacity,
                                  int n, int pool, float *scores)
{
    (void)win; (void)ring_fill; (void)n_kv_heads; (void)capacity; (void)n; (void)pool; (void)scores;
    ABSENT;
}
scdb_err scdb_k_adam_step_cuda(float *w, const float *g, float *m, float *v, size_t n, float lr,
                               int t)
{
    (void)w; (void)g; (void)m; (void)v; (void)n; (void)lr; (void)t;
    ABSENT;
}
scdb_err scdb_k_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                            size_t width, size_t rows)
{
    (void)dst; (void)dpitch; (void)src; (void)spitch; (void)width; (void)rows;
    ABSENT;
}
scdb_err scdb_k_gather_rows_cuda(const float *src, int cols, const int32_t *idx, int n, float *dst)
{
    (void)src; (void)cols; (void)idx; (void)n; (void)dst;
    ABSENT;
}
scdb_err scdb_k_bias_rows_cuda(float *dst, const float *b, int rows, int cols)
{
    (void)dst; (void)b; (void)rows; (void)cols;
    ABSENT;
}
scdb_err scdb_k_silu_cuda(const float *x, size_t n, float *y) { (void)x; (void)n; (void)y; ABSENT; }
scdb_err scdb_k_silu_backward_cuda(float *g, const float *x, size_t n) { (void)g; (void)x; (void)n; ABSENT; }
scdb_err scdb_k_sub_cuda(float *x, const float *y, size_t n) { (void)x; (void)y; (void)n; ABSENT; }
scdb_err scdb_k_colsum_cuda(const float *x, int rows, int cols, float *out)
{
    (void)x; (void)rows; (void)cols; (void)out;
    ABSENT;
}
