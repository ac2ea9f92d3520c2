/*
 * test_llama.c — libscdb-llama against the pinned llama.cpp (llama/,
 * scdb_llama.h): the state blob scdb writes is byte for byte llama.cpp's
 * own, a raw restore continues exactly as the sequence it was read from,
 * the RoPE permutation holds both ways (llama.cpp's K is the reference
 * model's, dimension for dimension), every context layout (F16 / F32 KV,
 * V transposed or not) passes the self-test, and bad blobs are refused
 * with a specific error.  The family's models come as GGUF files written
 * by `scdb export-gguf` into the build tree (tests/CMakeLists.txt).
 */
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "llama_int.h"
#include "broker_proc.h"
#include "gguf.h"
#include "gguf_ggml.h"
#include "model.h"

#ifndef SCDB_LLAMA_MODELS
#define SCDB_LLAMA_MODELS "."
#endif
#ifndef SCDB_TEST_GGUF_DIR
#define SCDB_TEST_GGUF_DIR "."
#endif

enum { P = 200, C = 16 };

static struct llama_model *lm;      /* base.gguf in llama.cpp */
static scdb_model *ref;             /* data/models/base in scdb's engine */
static int32_t tok[P + C];

static int setup(void **state)
{
    (void)state;
    char err[512];
    const char *path = SCDB_TEST_GGUF_DIR "/base.gguf";
    if (access(path, R_OK)) {
        print_message("skipped: no %s (scdb export-gguf writes it at build time)\n", path);
        return 0;
    }
    if (scdb_llama_init(err, sizeof err)) {
        print_message("llama.cpp: %s\n", err);
        return -1;
    }
    struct llama_model_params mp = llama_model_default_params();
    lm = llama_model_load_from_file(path, mp);
    if (!lm || scdb_model_load(SCDB_DATA_DIR "/models/base", &ref, err, sizeof err))
        return -1;
    char *text = NULL;
    size_t len = 0;
    if (scdb_read_file(SCDB_DATA_DIR "/heldout/english.txt", 1 << 24, &text, &len) || len < 9000)
        return -1;
    scdb_tokenize_bytes(text + 4096, P + C, tok);
    free(text);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    scdb_model_free(&ref);
    if (lm)
        llama_model_free(lm);
    return 0;
}

static struct llama_context *new_ctx(enum ggml_type kt, int flash)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = kt;
    cp.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(lm, cp);
    assert_non_null(ctx);
    return ctx;
}

#define NEED_MODEL()                                                                          \
    do {                                                                                      \
        if (!lm) skip();                                                                      \
    } while (0)

/* every layout: the self-test passes and reports what the context has */
static void probe_layouts(void **state)
{
    (void)state;
    NEED_MODEL();
    for (int kt = 0; kt < 2; kt++)
        for (int fa = 0; fa < 2; fa++) {
            struct llama_context *ctx = new_ctx(kt ? GGML_TYPE_F16 : GGML_TYPE_F32, fa);
            scdb_llama_layout L;
            char err[512] = "";
            scdb_err e = scdb_llama_probe(ctx, 0, &L, err, sizeof err);
            if (e) fail_msg("probe (type %d, flash %d): %s: %s", kt, fa, scdb_strerror(e), err);
            assert_int_equal(L.n_layer, 8);
            assert_int_equal(L.n_kv_heads, 2);
            assert_int_equal(L.head_dim, 32);
            assert_int_equal(L.n_stream, 1);
            assert_int_equal(L.k_type, kt);
            assert_int_equal(L.v_type, kt);
            assert_int_equal(L.v_trans, !fa);
            /* the probe left the sequence empty */
            assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 0), -1);
            /* and refuses a sequence that is not */
            assert_int_equal(scdb_llama_decode(ctx, 0, tok, 3, 0, 0), SCDB_OK);
            assert_int_equal(scdb_llama_probe(ctx, 0, &L, err, sizeof err), SCDB_EBUSY);
            llama_free(ctx);
        }
}

static uint8_t *own_blob(struct llama_context *ctx, size_t *len)
{
    size_t n = llama_state_seq_get_size(ctx, 0);
    uint8_t *b = malloc(n);
    assert_non_null(b);
    *len = llama_state_seq_get_data(ctx, b, n, 0);
    assert_int_equal(*len, n);
    return b;
}

/* read llama.cpp's blob into scdb's cache, write it again: the same bytes,
 * for every layout */
static void blob_byte_identical(void **state)
{
    (void)state;
    NEED_MODEL();
    for (int kt = 0; kt < 2; kt++)
        for (int fa = 0; fa < 2; fa++) {
            struct llama_context *ctx = new_ctx(kt ? GGML_TYPE_F16 : GGML_TYPE_F32, fa);
            scdb_llama_layout L;
            char err[512] = "";
            assert_int_equal(scdb_llama_probe(ctx, 0, &L, err, sizeof err), SCDB_OK);
            assert_int_equal(scdb_llama_decode(ctx, 0, tok, P, 0, 0), SCDB_OK);
            size_t len;
            uint8_t *b = own_blob(ctx, &len);
            scdb_kv_cache *c = NULL;
            assert_int_equal(scdb_kv_cache_new(8, 2, 32, P, &c), SCDB_OK);
            scdb_err e = scdb_llama_blob_read(&L, b, len, c, err, sizeof err);
            if (e) fail_msg("blob_read: %s", err);
            assert_int_equal(c->n, P);
            for (int i = 0; i < P; i++) assert_int_equal(c->pos[i], i);
            assert_int_equal(scdb_llama_blob_bytes(&L, P), len);
            uint8_t *w = malloc(len);
            size_t wl = 0;
            assert_int_equal(scdb_llama_blob_write(&L, 0, c, P, w, len, &wl), SCDB_OK);
            assert_int_equal(wl, len);
            assert_memory_equal(w, b, len);
            /* too small a buffer */
            assert_int_equal(scdb_llama_blob_write(&L, 0, c, P, w, len - 1, &wl), SCDB_ETOOBIG);
            free(w);
            free(b);
            scdb_kv_cache_free(&c);
            llama_free(ctx);
        }
}

/* a sequence read out and written back continues exactly as before */
static void raw_restore_exact(void **state)
{
    (void)state;
    NEED_MODEL();
    for (int fa = 0; fa < 2; fa++) {
        struct llama_context *ctx = new_ctx(GGML_TYPE_F16, fa);
        scdb_llama_layout L;
        char err[512] = "";
        const int V = 256;
        assert_int_equal(scdb_llama_probe(ctx, 0, &L, err, sizeof err), SCDB_OK);
        float *want = malloc((size_t)C * V * sizeof *want);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok, P, 0, 0), SCDB_OK);
        scdb_kv_cache *c = NULL;
        assert_int_equal(scdb_kv_cache_new(8, 2, 32, P, &c), SCDB_OK);
        assert_int_equal(scdb_llama_seq_read(ctx, &L, 0, c, err, sizeof err), SCDB_OK);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok + P, C, P, 1), SCDB_OK);
        for (int t = 0; t < C; t++) memcpy(want + (size_t)t * V, llama_get_logits_ith(ctx, t), V * sizeof(float));
        llama_memory_seq_rm(llama_get_memory(ctx), 0, -1, -1);
        assert_int_equal(scdb_llama_seq_write(ctx, &L, 0, c, P, err, sizeof err), SCDB_OK);
        assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 0), P - 1);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok + P, C, P, 1), SCDB_OK);
        for (int t = 0; t < C; t++)
            assert_memory_equal(llama_get_logits_ith(ctx, t), want + (size_t)t * V, V * sizeof(float));
        free(want);
        scdb_kv_cache_free(&c);
        llama_free(ctx);
    }
}

/* llama.cpp's K, read back through the permutation, is the reference
 * engine's K after RoPE, and its logits the reference's (F32 KV).  With
 * flash attention off both engines compute in f32 and agree to f32
 * rounding (about 2e-5 here), so the bound is tight: a wrong permutation
 * moves K by the size of K.  ggml's CPU flash attention rounds Q K^T and
 * the V sums through F16, which moves the deeper layers by about 1e-3 and
 * the logits by about 4e-3: the 1e-2 bound holds there. */
static void rope_matches_reference(void **state)
{
    (void)state;
    NEED_MODEL();
    const int V = 256;
    scdb_kv_cache *rc = NULL;
    assert_int_equal(scdb_model_cache_new(ref, P, &rc), SCDB_OK);
    float *lg = malloc((size_t)P * V * sizeof *lg);
    assert_int_equal(scdb_model_forward(ref, tok, NULL, P, rc, lg, NULL), SCDB_OK);
    for (int fa = 0; fa < 2; fa++) {
        struct llama_context *ctx = new_ctx(GGML_TYPE_F32, fa);
        scdb_llama_layout L;
        char err[512] = "";
        assert_int_equal(scdb_llama_probe(ctx, 0, &L, err, sizeof err), SCDB_OK);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok, P, 0, 1), SCDB_OK);
        scdb_kv_cache *c = NULL;
        assert_int_equal(scdb_kv_cache_new(8, 2, 32, P, &c), SCDB_OK);
        assert_int_equal(scdb_llama_seq_read(ctx, &L, 0, c, err, sizeof err), SCDB_OK);
        double dk0 = 0, dk = 0, dv = 0, dl = 0, scale = 0;
        for (int l = 0; l < 8; l++)
            for (int i = 0; i < P; i++)
                for (int d = 0; d < 64; d++) {
                    double e = fabs(scdb_kv_k(c, l, i)[d] - scdb_kv_k(rc, l, i)[d]);
                    dk = fmax(dk, e);
                    if (l == 0) dk0 = fmax(dk0, e);
                    dv = fmax(dv, fabs(scdb_kv_v(c, l, i)[d] - scdb_kv_v(rc, l, i)[d]));
                    scale = fmax(scale, fabs(scdb_kv_k(rc, l, i)[d]));
                }
        for (int t = 0; t < P; t++) {
            const float *g = llama_get_logits_ith(ctx, t);
            for (int v = 0; v < V; v++) dl = fmax(dl, fabs(g[v] - lg[(size_t)t * V + v]));
        }
        print_message("llama.cpp (flash attention %s) vs reference, %d tokens: max |dK| layer 0 "
                      "%.1e, all %.1e (|K| up to %.1f), |dV| %.1e, |dlogit| %.1e\n",
                      fa ? "on" : "off", P, dk0, dk, scale, dv, dl);
        /* layer 0 does not depend on attention: f32 rounding either way */
        assert_true(dk0 < 1e-5 * fmax(1.0, scale));
        if (!fa) {
            assert_true(dk < 1e-5 * fmax(1.0, scale));
            assert_true(dv < 1e-5);
            assert_true(dl < 1e-4);
        } else {
            assert_true(dl < 1e-2);
        }
        scdb_kv_cache_free(&c);
        llama_free(ctx);
    }
    free(lg);
    scdb_kv_cache_free(&rc);
}

/* bad blobs: truncated at every byte, wrong magic, fields that are not the
 * layout's; and the self-test's check of a foreign header */
static void blob_refusals(void **state)
{
    (void)state;
    NEED_MODEL();
    struct llama_context *ctx = new_ctx(GGML_TYPE_F16, 0);
    scdb_llama_layout L;
    char err[512] = "";
    assert_int_equal(scdb_llama_probe(ctx, 0, &L, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_llama_decode(ctx, 0, tok, 3, 0, 0), SCDB_OK);
    size_t len;
    uint8_t *b = own_blob(ctx, &len);
    scdb_kv_cache *c = NULL;
    assert_int_equal(scdb_kv_cache_new(8, 2, 32, 3, &c), SCDB_OK);
    for (size_t cut = 0; cut < len; cut++) {
        scdb_err e = scdb_llama_blob_read(&L, b, cut, c, err, sizeof err);
        assert_true(e == SCDB_ETRUNC || e == SCDB_EFORMAT);
    }
    assert_int_equal(scdb_llama_blob_read(&L, b, len, c, err, sizeof err), SCDB_OK);
    uint8_t *x = malloc(len + 1);
    memcpy(x, b, len);
    x[len] = 0;
    assert_int_equal(scdb_llama_blob_read(&L, x, len + 1, c, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "after the blob"));
    x[0] ^= 1;
    assert_int_equal(scdb_llama_blob_read(&L, x, len, c, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "magic"));
    int stream;
    scdb_llama_layout M = {.n_layer = 8, .n_kv_heads = 2, .head_dim = 32};
    assert_int_equal(ll_layout_from_blob(x, len, &M, &stream, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, SCDB_LLAMA_RELEASE));
    memcpy(x, b, len);
    /* the layout says F32 K, the blob has F16 */
    scdb_llama_layout W = L;
    W.k_type = 0;
    assert_int_equal(scdb_llama_blob_read(&W, b, len, c, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "K type"));
    W = L;
    W.v_trans = 0;
    assert_int_equal(scdb_llama_blob_read(&W, b, len, c, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "v_trans"));
    W = L;
    W.n_layer = 7;
    scdb_kv_cache *c7 = NULL;
    assert_int_equal(scdb_kv_cache_new(7, 2, 32, 3, &c7), SCDB_OK);
    assert_int_equal(scdb_llama_blob_read(&W, b, len, c7, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_llama_blob_read(&L, b, len, c7, err, sizeof err), SCDB_ESHAPE);
    /* the keep-sets-per-head gather (ll_blob_gather_heads) over the same
     * blob: whole, it gives back the input for the identity gather; every
     * truncation, bytes after the blob, a garbage magic, a wrong layout, a
     * source cell out of range and a short output buffer are refused */
    {
        int src[16 * 3], n_in = 0;
        int32_t pos[3] = {0, 1, 2}, in_pos[3];
        for (int k = 0; k < 16; k++)
            for (int i = 0; i < 3; i++) src[k * 3 + i] = i;
        uint8_t *out = malloc(len);
        size_t olen = 0;
        assert_int_equal(ll_blob_gather_heads(&L, b, len, 0, src, pos, 3, in_pos, 3, &n_in, out, len, &olen,
                                              err, sizeof err), SCDB_OK);
        assert_int_equal(n_in, 3);
        assert_memory_equal(in_pos, pos, sizeof pos);
        assert_int_equal(olen, len);
        assert_memory_equal(out, b, len);
        for (size_t cut = 0; cut < len; cut++) {
            scdb_err e = ll_blob_gather_heads(&L, b, cut, 0, src, pos, 3, NULL, 0, &n_in, out, len, &olen,
                                              err, sizeof err);
            assert_true(e == SCDB_ETRUNC || e == SCDB_EFORMAT);
        }
        memcpy(x, b, len);
        x[len] = 0;
        assert_int_equal(ll_blob_gather_heads(&L, x, len + 1, 0, src, pos, 3, NULL, 0, &n_in, out, len, &olen,
                                              err, sizeof err), SCDB_EFORMAT);
        assert_non_null(strstr(err, "after the blob"));
        x[0] ^= 1;
        assert_int_equal(ll_blob_gather_heads(&L, x, len, 0, src, pos, 3, NULL, 0, &n_in, out, len, &olen,
                                              err, sizeof err), SCDB_EFORMAT);
        x[0] ^= 1;
        W = L;
        W.v_trans = !L.v_trans;
        assert_int_equal(ll_blob_gather_heads(&W, b, len, 0, src, pos, 3, NULL, 0, &n_in, out, len, &olen,
                                              err, sizeof err), SCDB_EFORMAT);
        assert_non_null(strstr(err, "v_trans"));
        src[5] = 3;                                 /* set 1, slot 2: cell 3 of 3 */
        assert_int_equal(ll_blob_gather_heads(&L, b, len, 0, src, pos, 3, NULL, 0, &n_in, out, len, &olen,
                                              err, sizeof err), SCDB_EFORMAT);
        assert_non_null(strstr(err, "cell 3 of 3"));
        src[5] = 2;
        assert_int_equal(ll_blob_gather_heads(&L, b, len, 0, src, pos, 3, NULL, 0, &n_in, out, len - 1, &olen,
                                              err, sizeof err), SCDB_ETOOBIG);
        /* room for 2 positions, 3 cells */
        assert_int_equal(ll_blob_gather_heads(&L, b, len, 0, NULL, NULL, 0, in_pos, 2, &n_in, NULL, 0, NULL,
                                              err, sizeof err), SCDB_ETOOBIG);
        free(out);
        /* where each layer's rows lie (ll_blob_layer_rows, the in-place
         * evictor's check): the whole blob, inside it, the layers in order;
         * every truncation, a garbage magic, a wrong layout refused */
        const uint8_t *kr[8], *vr[8];
        int nc = 0;
        assert_int_equal(L.v_trans, 1);
        assert_int_equal(ll_blob_layer_rows(&L, b, len, kr, vr, &nc, err, sizeof err), SCDB_OK);
        assert_int_equal(nc, 3);
        for (int l = 0; l < 8; l++) {
            assert_true(kr[l] > (const uint8_t *)b && vr[l] < (const uint8_t *)b + len);
            if (l) assert_true(kr[l] > kr[l - 1] && vr[l] > vr[l - 1]);
        }
        assert_true(vr[0] > kr[7]);
        for (size_t cut = 0; cut < len; cut++) {
            scdb_err e = ll_blob_layer_rows(&L, b, cut, kr, vr, &nc, err, sizeof err);
            /* (only bytes after the last V element may go: the rows end there) */
            assert_true(e == SCDB_ETRUNC || e == SCDB_EFORMAT || cut >= (size_t)(vr[7] - (const uint8_t *)b));
        }
        x[0] ^= 1;
        assert_int_equal(ll_blob_layer_rows(&L, x, len, kr, vr, &nc, err, sizeof err), SCDB_EFORMAT);
        x[0] ^= 1;
        assert_int_equal(ll_blob_layer_rows(&W, b, len, kr, vr, &nc, err, sizeof err), SCDB_EFORMAT);
        assert_int_equal(ll_blob_layer_rows(&L, b, len, NULL, vr, &nc, err, sizeof err), SCDB_EINVAL);
        /* one stream per sequence: llama.cpp writes every stream's count,
         * the sequence's cells in its own stream, 0 for the others before
         * and after it; the gather reads the sequence in any of them */
        scdb_kv_cache *c3 = NULL;
        assert_int_equal(scdb_kv_cache_new(8, 2, 32, 3, &c3), SCDB_OK);
        assert_int_equal(scdb_llama_blob_read(&L, b, len, c3, err, sizeof err), SCDB_OK);
        scdb_llama_layout S = L;
        S.n_stream = 3;
        size_t slen = scdb_llama_blob_bytes(&S, 3), glen = 0;
        uint8_t *sb = malloc(slen), *so = malloc(slen);
        for (int q = 0; q < 3; q++) {
            size_t wl = 0;
            assert_int_equal(scdb_llama_blob_write(&S, q, c3, 3, sb, slen, &wl), SCDB_OK);
            assert_int_equal(wl, slen);
            assert_int_equal(ll_blob_gather_heads(&S, sb, slen, q, src, pos, 3, in_pos, 3, &n_in, so,
                                                  slen, &glen, err, sizeof err), SCDB_OK);
            assert_int_equal(n_in, 3);
            assert_int_equal(glen, slen);
            assert_memory_equal(so, sb, slen);
        }
        /* cells in a second stream as well */
        uint32_t three = 3;
        assert_int_equal(scdb_llama_blob_write(&S, 0, c3, 3, sb, slen, &glen), SCDB_OK);
        memcpy(sb + slen - 4, &three, 4);       /* stream 2's count, the blob's last word */
        assert_int_equal(ll_blob_gather_heads(&S, sb, slen, 0, src, pos, 3, NULL, 0, &n_in, so, slen,
                                              &glen, err, sizeof err), SCDB_EFORMAT);
        assert_non_null(strstr(err, "two streams"));
        free(sb);
        free(so);
        scdb_kv_cache_free(&c3);
    }
    /* a cell of two sequences; more cells than the cache holds */
    memcpy(x, b, len);
    uint32_t two = 2;
    memcpy(x + 20, &two, 4);
    assert_int_equal(scdb_llama_blob_read(&L, x, len, c, err, sizeof err), SCDB_EFORMAT);
    scdb_kv_cache *c2 = NULL;
    assert_int_equal(scdb_kv_cache_new(8, 2, 32, 2, &c2), SCDB_OK);
    assert_int_equal(scdb_llama_blob_read(&L, b, len, c2, err, sizeof err), SCDB_ETOOBIG);
    /* a quantized cache is refused by name */
    memcpy(x, b, len);
    M.n_layer = 8;
    int32_t q8 = 8;
    memcpy(x + 16 + 3 * 12 + 8, &q8, 4);
    assert_int_equal(ll_layout_from_blob(x, len, &M, &stream, err, sizeof err), SCDB_EUNSUPPORTED);
    assert_non_null(strstr(err, "F16"));
    /* a blob scdb writes is refused by llama.cpp when the context is too small */
    free(x);
    free(b);
    scdb_kv_cache_free(&c);
    scdb_kv_cache_free(&c2);
    scdb_kv_cache_free(&c7);
    llama_free(ctx);
}

/* ---- through a broker: llama.cpp producer, llama.cpp consumers ---- */

static bp_broker llama_broker;

static struct llama_context *ctx_for(struct llama_model *m, scdb_llama_producer *prod, int f16)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (prod) scdb_llama_producer_cparams(prod, &cp);
    struct llama_context *ctx = llama_init_from_model(m, cp);
    assert_non_null(ctx);
    return ctx;
}

static void logits_of(struct llama_context *ctx, int n, float *out)
{
    for (int t = 0; t < n; t++) memcpy(out + (size_t)t * 256, llama_get_logits_ith(ctx, t), 256 * sizeof(float));
}

/* A producer / consumer of the test's broker (llama_broker); the test
 * fails with the library's message if it cannot open. */
static scdb_llama_producer *producer_on(const char *name, const char *codebook, const char *model_path)
{
    char err[512] = "";
    scdb_llama_producer_params pp = scdb_llama_producer_default_params();
    pp.endpoint = llama_broker.endpoint;
    pp.producer = name;
    pp.codebook = codebook;
    pp.model_path = model_path;
    pp.timeout_ms = 20000;
    scdb_llama_producer *prod = NULL;
    scdb_err e = scdb_llama_producer_open(&pp, &prod, err, sizeof err);
    if (e) fail_msg("producer %s: %s: %s", name, scdb_strerror(e), err);
    return prod;
}

static scdb_llama_consumer *consumer_on(const char *name, const char *codebook, struct llama_model *m,
                                        const char *model_path)
{
    char err[512] = "";
    scdb_llama_consumer_params cp = scdb_llama_consumer_default_params();
    cp.endpoint = llama_broker.endpoint;
    cp.consumer = name;
    cp.codebook = codebook;
    cp.model = m;
    cp.model_path = model_path;
    cp.timeout_ms = 20000;
    scdb_llama_consumer *cons = NULL;
    scdb_err e = scdb_llama_consumer_open(&cp, &cons, err, sizeof err);
    if (e) fail_msg("consumer %s: %s: %s", name, scdb_strerror(e), err);
    return cons;
}

/* base in llama.cpp stores the prefix once (its H_in captured during
 * llama_decode, encoded by the broker); the specialist `code` in llama.cpp
 * restores it: the KV in its sequence is the broker's decode into the
 * reference engine's arena (to f32 rounding, F32 KV), and its continuation
 * the reference engine's over that KV.  Then the tail policy, raw storage of
 * llama.cpp's own prefill (a restore continues bit for bit as the prefill),
 * and a context of another model refused. */
static void fleet_through_broker(void **state)
{
    (void)state;
    NEED_MODEL();
    const char *code_path = SCDB_TEST_GGUF_DIR "/code.gguf";
    if (access(code_path, R_OK)) skip();
    char ini[2048], err[512] = "";
    snprintf(ini, sizeof ini,
             "block_tokens = 64\nno_sync = 1\nheartbeat_timeout_ms = 30000\n\n"
             "[model base]\nconfig = " SCDB_DATA_DIR "/models/base/config.json\n\n"
             "[model code]\nconfig = " SCDB_DATA_DIR "/models/code/config.json\n\n"
             "[codebook base-scd]\nkind = scd\nmodel = base\ncodes_dtype = int8\n"
             "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n\n"
             "[pair base-scd code]\ndecoder = scd\nfile = " SCDB_DATA_DIR "/pairs/base__code.safetensors\n"
             "fidelity = tail:16\n\n"
             "[pair raw/base code]\ndecoder = raw\nfidelity = initial:10%%\n");
    assert_int_equal(bp_start(&llama_broker, SCDB_BROKER_BIN, ini), 0);
    enum { N = 192, T = 16 };

    /* the producer */
    scdb_llama_producer *prod = producer_on("base", "base-scd", NULL);
    scdb_err e;
    struct llama_context *pctx = ctx_for(lm, prod, 1);
    scdb_llama_put_result pr;
    e = scdb_llama_producer_prefill(prod, pctx, 0, tok, N, &pr);
    if (e) fail_msg("prefill: %s: %s", scdb_strerror(e), scdb_llama_producer_error(prod));
    assert_int_equal(pr.put.n_stored, N / 64);
    assert_int_equal(pr.put.n_new, N / 64);
    /* capture does not change what llama.cpp computes, and asks nothing outside a prefill */
    assert_int_equal(scdb_llama_decode(pctx, 0, tok + N, 1, N, 0), SCDB_OK);

    /* the consumer, in llama.cpp */
    struct llama_model *code = llama_model_load_from_file(code_path, llama_model_default_params());
    assert_non_null(code);
    scdb_llama_consumer *cons = consumer_on("code", "base-scd", code, NULL);
    struct llama_context *cctx = ctx_for(code, NULL, 0);
    scdb_llama_restore_result rr;
    e = scdb_llama_restore(cons, cctx, tok, N + T, NULL, &rr);
    if (e) fail_msg("restore: %s: %s", scdb_strerror(e), scdb_llama_consumer_error(cons));
    assert_int_equal(rr.n_restored, N);
    assert_int_equal(rr.n_matched, N);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(cctx), 0), N - 1);

    /* the same get into the reference engine's arena */
    scdb_model *rcode = NULL;
    assert_int_equal(scdb_model_load(SCDB_DATA_DIR "/models/code", &rcode, err, sizeof err), SCDB_OK);
    scdb_opts o = {.endpoint = llama_broker.endpoint, .timeout_ms = 20000};
    scdb *h = NULL;
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    assert_int_equal(scdb_register(h, SCDB_CONSUMER, "code", "base-scd", NULL), SCDB_OK);
    scdb_arena *a = NULL;
    assert_int_equal(scdb_arena_new(h, N + T, &a), SCDB_OK);
    scdb_get_result gr;
    assert_int_equal(scdb_get(h, tok, N, a, 0, 0, &gr), SCDB_OK);
    scdb_kv_cache *kv = scdb_arena_cache(a), *back = NULL;
    assert_int_equal(scdb_kv_cache_new(8, 2, 32, N, &back), SCDB_OK);
    scdb_llama_layout L;
    struct llama_context *pc = ctx_for(code, NULL, 0);
    assert_int_equal(scdb_llama_probe(pc, 0, &L, err, sizeof err), SCDB_OK);
    llama_free(pc);
    assert_int_equal(scdb_llama_seq_read(cctx, &L, 0, back, err, sizeof err), SCDB_OK);
    assert_int_equal(back->n, N);
    double dk = 0, dv = 0, dl = 0;
    for (int l = 0; l < 8; l++)
        for (int i = 0; i < N; i++) {
            assert_int_equal(back->pos[i], kv->pos[i]);
            for (int d = 0; d < 64; d++) {
                dk = fmax(dk, fabs(scdb_kv_k(back, l, i)[d] - scdb_kv_k(kv, l, i)[d]));
                dv = fmax(dv, fabs(scdb_kv_v(back, l, i)[d] - scdb_kv_v(kv, l, i)[d]));
            }
        }
    /* F32 KV: the blob carries the arena's floats unchanged */
    assert_true(dk == 0 && dv == 0);
    float *want = malloc((size_t)T * 256 * sizeof *want), *got = malloc((size_t)T * 256 * sizeof *got);
    assert_int_equal(scdb_model_forward(rcode, tok + N, NULL, T, kv, want, NULL), SCDB_OK);
    assert_int_equal(scdb_llama_decode(cctx, 0, tok + N, T, N, 1), SCDB_OK);
    logits_of(cctx, T, got);
    for (size_t i = 0; i < (size_t)T * 256; i++) dl = fmax(dl, fabs(got[i] - want[i]));
    print_message("code: restored %d tokens (get %.1f ms, write %.1f ms); continuation vs the "
                  "reference engine over the same KV: max |dlogit| %.1e\n", rr.n_restored,
                  rr.get_ms, rr.write_ms, dl);
    assert_true(dl < 1e-4);

    /* the tail policy: all but the last 64 stored tokens */
    scdb_llama_restore_params rp = scdb_llama_restore_default_params();
    rp.recompute_tail = 64;
    assert_int_equal(scdb_llama_restore(cons, cctx, tok, N + T, &rp, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, N - 64);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(cctx), 0), N - 64 - 1);
    /* the pair's fidelity default (the broker config's tail:16) */
    rp.recompute_tail = 0;
    rp.pair_default = 1;
    assert_int_equal(scdb_llama_restore(cons, cctx, tok, N + T, &rp, &rr), SCDB_OK);
    assert_int_equal(rr.recompute_tail, 16);
    assert_int_equal(rr.n_restored, N - 16);
    rp.pair_default = 0;
    rp.recompute_tail = -1;
    assert_int_equal(scdb_llama_restore(cons, cctx, tok, N + T, &rp, &rr), SCDB_EINVAL);
    assert_non_null(strstr(scdb_llama_consumer_error(cons), "recompute_tail"));
    /* nothing stored for these tokens: the sequence is left alone */
    int32_t other[N];
    for (int i = 0; i < N; i++) other[i] = (tok[i] + 1) & 255;
    assert_int_equal(scdb_llama_restore(cons, cctx, other, N, NULL, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, 0);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(cctx), 0), N - 16 - 1);
    /* a context of another model */
    assert_int_equal(scdb_llama_restore(cons, pctx, tok, N, NULL, &rr), SCDB_EMISMATCH);
    /* a sequence the context does not have; a forgotten context is
     * probed again (its sequence must then be empty) */
    rp = scdb_llama_restore_default_params();
    rp.seq = 3;
    assert_int_equal(scdb_llama_restore(cons, cctx, tok, N, &rp, &rr), SCDB_EINVAL);
    assert_non_null(strstr(scdb_llama_consumer_error(cons), "sequences 0 to 0"));
    scdb_llama_consumer_forget(cons, cctx);
    assert_int_equal(scdb_llama_restore(cons, cctx, tok, N, NULL, &rr), SCDB_EBUSY);
    llama_memory_seq_rm(llama_get_memory(cctx), 0, -1, -1);
    assert_int_equal(scdb_llama_restore(cons, cctx, tok, N, NULL, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, N);
    scdb_llama_consumer_forget(cons, NULL);       /* not known: nothing */

    /* a default llama.cpp cannot do: initial tokens, refused by name */
    {
        scdb_llama_consumer *rb = consumer_on("code", "raw/base", code, NULL);
        scdb_llama_restore_params dp = scdb_llama_restore_default_params();
        dp.pair_default = 1;
        struct llama_context *fresh = ctx_for(code, NULL, 0);   /* the first restore probes */
        assert_int_equal(scdb_llama_restore(rb, fresh, tok, N, &dp, &rr), SCDB_EUNSUPPORTED);
        assert_non_null(strstr(scdb_llama_consumer_error(rb), "initial:10%"));
        llama_free(fresh);
        scdb_llama_consumer_close(&rb);
    }

    /* raw: code's own prefill in llama.cpp stored as is, restored bit for bit */
    scdb_llama_producer *rawp = producer_on("code", NULL, NULL);
    struct llama_context *own = ctx_for(code, rawp, 1);
    e = scdb_llama_producer_prefill(rawp, own, 0, tok, N, &pr);
    if (e) fail_msg("raw prefill: %s: %s", scdb_strerror(e), scdb_llama_producer_error(rawp));
    assert_int_equal(pr.put.n_stored, N / 64);
    assert_int_equal(scdb_llama_decode(own, 0, tok + N, T, N, 1), SCDB_OK);
    logits_of(own, T, want);
    scdb_llama_consumer *rawc = consumer_on("code", "raw/code", code, NULL);
    struct llama_context *rctx = ctx_for(code, NULL, 1);
    assert_int_equal(scdb_llama_restore(rawc, rctx, tok, N, NULL, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, N);
    assert_int_equal(scdb_llama_decode(rctx, 0, tok + N, T, N, 1), SCDB_OK);
    logits_of(rctx, T, got);
    assert_memory_equal(got, want, (size_t)T * 256 * sizeof *got);
    llama_free(rctx);
    llama_free(own);
    scdb_llama_consumer_close(&rawc);
    scdb_llama_producer_close(&rawp);
    free(want);
    free(got);
    scdb_kv_cache_free(&back);
    scdb_arena_free(&a);
    scdb_close(&h);
    scdb_model_free(&rcode);
    llama_free(cctx);
    llama_free(pctx);
    scdb_llama_consumer_close(&cons);
    scdb_llama_producer_close(&prod);
    llama_model_free(code);
    assert_int_equal(bp_stop(&llama_broker, SIGTERM), 0);
}

/* ---- a real BPE vocabulary ---- */

/* A llama-architecture GGUF of small random weights around the GPT-2 BPE
 * vocabulary of the bundle's vocab-only file (every tokenizer.* key copied
 * as read): no real weights can be had here, but the tokenizer, the
 * vocabulary's size and the path through scdb are real. */
static int write_bpe_model_as(const char *vocab, const char *out, const char *name, const char *arch,
                              uint64_t seed, int *n_vocab)
{
    char err[256];
    scdb_gguf_file *v = NULL;
    if (scdb_gguf_open(vocab, &v, err, sizeof err)) return -1;
    const scdb_gguf_kv *toks = scdb_gguf_find_kv(v, "tokenizer.ggml.tokens");
    if (!toks) { scdb_gguf_close(&v); return -1; }
    const int V = (int)toks->n, D = 64, L = 2, H = 4, KVH = 2, HD = 16, F = 128;
    *n_vocab = V;
    scdb_gguf_writer *w = NULL;
    assert_int_equal(scdb_gguf_writer_new(&w), SCDB_OK);
    scdb_gguf_set_str(w, "general.architecture", arch);
    scdb_gguf_set_str(w, "general.name", name);
    scdb_gguf_set_u32(w, "llama.context_length", 512);
    scdb_gguf_set_u32(w, "llama.embedding_length", D);
    scdb_gguf_set_u32(w, "llama.block_count", L);
    scdb_gguf_set_u32(w, "llama.feed_forward_length", F);
    scdb_gguf_set_u32(w, "llama.attention.head_count", H);
    scdb_gguf_set_u32(w, "llama.attention.head_count_kv", KVH);
    scdb_gguf_set_u32(w, "llama.rope.dimension_count", HD);
    scdb_gguf_set_f32(w, "llama.rope.freq_base", 10000.0f);
    scdb_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    scdb_gguf_set_u32(w, "llama.vocab_size", (uint32_t)V);
    for (int i = 0; i < scdb_gguf_kv_count(v); i++) {
        const scdb_gguf_kv *kv = scdb_gguf_kv_at(v, i);
        if (!strncmp(kv->key, "tokenizer.", 10)) assert_int_equal(scdb_gguf_set_kv(w, kv), SCDB_OK);
    }
    /* weights: one random buffer, every tensor a slice of it */
    size_t need = (size_t)2 * V * D + D + (size_t)L * (2 * D + (size_t)D * D * 2 + (size_t)2 * D * KVH * HD + (size_t)3 * D * F);
    float *buf = malloc(need * sizeof *buf);
    assert_non_null(buf);
    uint64_t rng = seed;
    for (size_t i = 0; i < need; i++) buf[i] = 0.08f * scdb_xorshift_f32(&rng);
    float *p = buf;
#define ADD(name, n0, n1)                                                                       \
    do {                                                                                        \
        int64_t ne[2] = {(n0), (n1)};                                                           \
        assert_int_equal(scdb_gguf_add_tensor(w, name, 0, (n1) > 1 ? 2 : 1, ne, p), SCDB_OK);   \
        p += (size_t)(n0) * (size_t)(n1);                                                       \
    } while (0)
    ADD("token_embd.weight", D, V);
    ADD("output.weight", D, V);
    for (int i = 0; i < D; i++) p[i] = 1.0f;
    ADD("output_norm.weight", D, 1);
    for (int l = 0; l < L; l++) {
        char n[64];
        for (int i = 0; i < D; i++) p[i] = 1.0f;
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l); ADD(n, D, 1);
        for (int i = 0; i < D; i++) p[i] = 1.0f;
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l); ADD(n, D, 1);
        snprintf(n, sizeof n, "blk.%d.attn_q.weight", l); ADD(n, D, H * HD);
        snprintf(n, sizeof n, "blk.%d.attn_k.weight", l); ADD(n, D, KVH * HD);
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", l); ADD(n, D, KVH * HD);
        snprintf(n, sizeof n, "blk.%d.attn_output.weight", l); ADD(n, H * HD, D);
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l); ADD(n, D, F);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l); ADD(n, D, F);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l); ADD(n, F, D);
    }
#undef ADD
    assert_true((size_t)(p - buf) <= need);
    scdb_err e = scdb_gguf_writer_write(w, out);
    scdb_gguf_writer_free(&w);
    free(buf);
    scdb_gguf_close(&v);
    return e ? -1 : 0;
}

static int write_bpe_model(const char *vocab, const char *out, int *n_vocab)
{
    return write_bpe_model_as(vocab, out, "bpe-random", "llama", 0x9e3779b97f4a7c15ull, n_vocab);
}

/* text -> the model's own token ids (llama_tokenize, no BOS) */
static int tokenize(const struct llama_model *m, const char *text, int32_t *out, int cap)
{
    return llama_tokenize(llama_model_get_vocab(m), text, (int32_t)strlen(text), out, cap, false,
                          false);
}

/* A fleet of GGUF files by glob: `[consumers fleet] dirs = GGUF/(star).gguf`
 * makes each file a model named after it (code.gguf -> code) with its pair
 * (base__{name}); llama.cpp's `code` registers against it by fingerprint
 * and restores what base stored. */
static void consumers_glob_gguf(void **state)
{
    (void)state;
    NEED_MODEL();
    const char *code_path = SCDB_TEST_GGUF_DIR "/code.gguf";
    if (access(code_path, R_OK)) skip();
    char ini[2048];
    snprintf(ini, sizeof ini,
             "block_tokens = 64\nno_sync = 1\nheartbeat_timeout_ms = 30000\n\n"
             "[model base]\nconfig = " SCDB_DATA_DIR "/models/base/config.json\n\n"
             "[codebook base-scd]\nkind = scd\nmodel = base\ncodes_dtype = int8\n"
             "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n\n"
             "[consumers fleet]\ndirs = " SCDB_TEST_GGUF_DIR "/*.gguf\ncodebook = base-scd\n"
             "decoder = scd\nfile = " SCDB_DATA_DIR "/pairs/base__{name}.safetensors\n");
    assert_int_equal(bp_start(&llama_broker, SCDB_BROKER_BIN, ini), 0);
    enum { N = 128 };
    scdb_llama_producer *prod = producer_on("base", "base-scd", NULL);
    scdb_err e;
    struct llama_context *pctx = ctx_for(lm, prod, 1);
    scdb_llama_put_result pr;
    e = scdb_llama_producer_prefill(prod, pctx, 0, tok, N, &pr);
    if (e) fail_msg("prefill: %s: %s", scdb_strerror(e), scdb_llama_producer_error(prod));
    struct llama_model *code = llama_model_load_from_file(code_path, llama_model_default_params());
    assert_non_null(code);
    /* "code": the glob's name for code.gguf */
    scdb_llama_consumer *cons = consumer_on("code", "base-scd", code, NULL);
    struct llama_context *cctx = ctx_for(code, NULL, 0);
    scdb_llama_restore_result rr;
    e = scdb_llama_restore(cons, cctx, tok, N, NULL, &rr);
    if (e) fail_msg("restore: %s: %s", scdb_strerror(e), scdb_llama_consumer_error(cons));
    assert_true(rr.n_restored > 0 && rr.n_restored <= N);
    print_message("code (from the glob's code.gguf) restored %d of %d tokens\n", rr.n_restored, N);
    llama_free(cctx);
    llama_free(pctx);
    scdb_llama_consumer_close(&cons);
    scdb_llama_producer_close(&prod);
    llama_model_free(code);
    assert_int_equal(bp_stop(&llama_broker, SIGTERM), 0);
}

static int run_scdb(const char *args, const char *log);

/* f16 bits to f32, for the hand dequantization below */
static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

/* A quantized model (llama.cpp's own llama_model_quantize of base.gguf to
 * Q8_0 and Q4_0): scdb reads it through ggml's dequantization (the
 * dequantized values of a Q8_0 tensor are d * q, block by block, checked by
 * hand), refuses by name without a dequantizer, fingerprints it (the
 * process's and the scdb program's digits agree), and the broker serves
 * it: llama.cpp running the Q8_0 model stores its prefill raw, restores it
 * and continues as its own prefill, bit for bit. */
static void quantized_gguf(void **state)
{
    (void)state;
    NEED_MODEL();
    char dir[] = "/tmp/scdb_test_quant_XXXXXX", q8[128], q4[128], err[512] = "", ini[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(q8, sizeof q8, "%s/base-q8_0.gguf", dir);
    snprintf(q4, sizeof q4, "%s/base-q4_0.gguf", dir);
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.nthread = 2;
    qp.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
    assert_int_equal(llama_model_quantize(SCDB_TEST_GGUF_DIR "/base.gguf", q8, &qp), 0);
    qp.ftype = LLAMA_FTYPE_MOSTLY_Q4_0;
    assert_int_equal(llama_model_quantize(SCDB_TEST_GGUF_DIR "/base.gguf", q4, &qp), 0);

    /* a Q8_0 tensor: blocks of an f16 scale and 32 int8, value d * q */
    scdb_gguf_file *f = NULL;
    assert_int_equal(scdb_gguf_open(q8, &f, err, sizeof err), SCDB_OK);
    const scdb_gguf_tensor *t = scdb_gguf_find_tensor(f, "blk.1.attn_v.weight");
    assert_non_null(t);
    assert_int_equal(t->type, 8);                                  /* Q8_0 */
    size_t n = (size_t)(t->ne[0] * t->ne[1]);
    float *got = malloc(n * sizeof *got);
    assert_int_equal(scdb_gguf_tensor_to_f32(t, 0, n, got), SCDB_OK);
    const uint8_t *b = t->data;
    for (size_t blk = 0; blk < n / 32; blk++, b += 34) {
        float d = half_to_float((uint16_t)(b[0] | b[1] << 8));
        for (int j = 0; j < 32; j++)
            if (got[blk * 32 + j] != d * (float)(int8_t)b[2 + j])
                fail_msg("Q8_0 value %zu: %g, by hand %g", blk * 32 + j, got[blk * 32 + j], d * (int8_t)b[2 + j]);
    }
    assert_int_equal(scdb_gguf_tensor_to_f32(t, 16, 32, got), SCDB_EINVAL);   /* not whole blocks */
    free(got);
    scdb_gguf_close(&f);

    /* both load; without a dequantizer, refused by name */
    scdb_model *mq = NULL;
    for (int i = 0; i < 2; i++) {
        if (scdb_model_load(i ? q4 : q8, &mq, err, sizeof err)) fail_msg("%s: %s", i ? q4 : q8, err);
        scdb_model_free(&mq);
    }
    char fp8[33], fp4[33], fpf[33];
    assert_int_equal(scdb_weights_fingerprint(q8, fp8, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_weights_fingerprint(q4, fp4, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_weights_fingerprint(SCDB_TEST_GGUF_DIR "/base.gguf", fpf, err, sizeof err), SCDB_OK);
    assert_string_not_equal(fp8, fpf);
    assert_string_not_equal(fp4, fp8);
    scdb_gguf_set_dequantizer(NULL);
    assert_int_equal(scdb_model_load(q8, &mq, err, sizeof err), SCDB_EDTYPE);
    print_message("without a dequantizer: %s\n", err);
    assert_non_null(strstr(err, "Q8_0"));
    assert_non_null(strstr(err, "llama.cpp's ggml"));
    scdb_gguf_ggml_install();
    /* the scdb program dequantizes the same way */
    char args[512], log[160], line[256] = "";
    snprintf(log, sizeof log, "%s/fp.log", dir);
    snprintf(args, sizeof args, "fingerprint %s", q8);
    assert_int_equal(run_scdb(args, log), 0);
    FILE *lf = fopen(log, "r");
    assert_non_null(lf);
    assert_non_null(fgets(line, sizeof line, lf));
    fclose(lf);
    assert_memory_equal(line, fp8, 32);

    /* the broker serves it: raw, llama.cpp's own continuation */
    snprintf(ini, sizeof ini, "block_tokens = 64\nno_sync = 1\nheartbeat_timeout_ms = 30000\n\n"
             "[model bq8]\nconfig = %s\n", q8);
    assert_int_equal(bp_start(&llama_broker, SCDB_BROKER_BIN, ini), 0);
    struct llama_model *m = llama_model_load_from_file(q8, llama_model_default_params());
    assert_non_null(m);
    enum { N = 128, T = 8, V = 256 };
    scdb_llama_producer *prod = producer_on("bq8", NULL, q8);
    scdb_err e;
    struct llama_context *own = ctx_for(m, prod, 1);
    scdb_llama_put_result pr;
    e = scdb_llama_producer_prefill(prod, own, 0, tok, N, &pr);
    if (e) fail_msg("put: %s: %s", scdb_strerror(e), scdb_llama_producer_error(prod));
    assert_int_equal(scdb_llama_decode(own, 0, tok + N, T, N, 1), SCDB_OK);
    float *want = malloc((size_t)T * V * sizeof *want), *out = malloc((size_t)T * V * sizeof *out);
    for (int i = 0; i < T; i++) memcpy(want + (size_t)i * V, llama_get_logits_ith(own, i), V * sizeof(float));
    scdb_llama_consumer *cons = consumer_on("bq8", NULL, m, q8);
    assert_string_equal(scdb_llama_consumer_fingerprint(cons), fp8);
    struct llama_context *ctx = ctx_for(m, NULL, 1);
    scdb_llama_restore_result rr;
    assert_int_equal(scdb_llama_restore(cons, ctx, tok, N + T, NULL, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, N);
    assert_int_equal(scdb_llama_decode(ctx, 0, tok + N, T, N, 1), SCDB_OK);
    for (int i = 0; i < T; i++) memcpy(out + (size_t)i * V, llama_get_logits_ith(ctx, i), V * sizeof(float));
    assert_memory_equal(out, want, (size_t)T * V * sizeof *out);
    print_message("Q8_0 and Q4_0 exports of base load through ggml's dequantization (Q8_0 fingerprint %s); "
                  "the Q8_0 model's prefill stored raw and restored continues bit for bit\n", fp8);
    free(want);
    free(out);
    llama_free(ctx);
    llama_free(own);
    scdb_llama_consumer_close(&cons);
    scdb_llama_producer_close(&prod);
    llama_model_free(m);
    assert_int_equal(bp_stop(&llama_broker, SIGTERM), 0);
    scdb_rm_tree(dir);
}

/* Every vocabulary-only GGUF llama.cpp ships (models/ggml-vocab-*.gguf,
 * written by gguf-py; one of them, aquila, version 2) read by scdb and
 * written again with every KV and tensor copied: the same bytes, but for
 * version 2's version field (the writer writes 3, the same layout); and the
 * version-2 file's copy tokenizes a text as the original does in
 * llama.cpp, vocab only. */
static void vocab_gguf_copies(void **state)
{
    (void)state;
    glob_t g;
    if (glob(SCDB_LLAMA_MODELS "/ggml-vocab-*.gguf", 0, NULL, &g)) {
        print_message("skipped: no %s/ggml-vocab-*.gguf\n", SCDB_LLAMA_MODELS);
        skip();
    }
    int v2 = 0;
    char v2path[1024] = "", dir[] = "/tmp/scdb_test_vocab_XXXXXX", copy[1100];
    assert_non_null(mkdtemp(dir));
    snprintf(copy, sizeof copy, "%s/v2copy.gguf", dir);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        char err[512] = "";
        scdb_gguf_file *f = NULL;
        if (scdb_gguf_open(path, &f, err, sizeof err))
            fail_msg("%s: %s", path, err);
        scdb_gguf_writer *w = NULL;
        assert_int_equal(scdb_gguf_writer_new(&w), SCDB_OK);
        for (int k = 0; k < scdb_gguf_kv_count(f); k++)
            assert_int_equal(scdb_gguf_set_kv(w, scdb_gguf_kv_at(f, k)), SCDB_OK);
        for (int t = 0; t < scdb_gguf_tensor_count(f); t++) {
            const scdb_gguf_tensor *x = scdb_gguf_tensor_at(f, t);
            assert_int_equal(scdb_gguf_add_tensor(w, x->name, x->type, x->n_dims, x->ne, x->data),
                             SCDB_OK);
        }
        uint8_t *img = NULL;
        size_t n = 0;
        assert_int_equal(scdb_gguf_writer_image(w, &img, &n), SCDB_OK);
        char *orig = NULL;
        size_t on = 0;
        assert_int_equal(scdb_read_file(path, 1u << 30, &orig, &on), SCDB_OK);
        uint32_t ver = scdb_gguf_version(f);
        assert_true(ver == 2 || ver == 3);
        if (ver == 2) {
            v2++;
            snprintf(v2path, sizeof v2path, "%s", path);
            assert_int_equal(scdb_gguf_writer_write(w, copy), SCDB_OK);
            assert_int_equal(img[4], 3);
            img[4] = 2;               /* the version field, little-endian */
        }
        if (on != n || memcmp(orig, img, n))
            fail_msg("%s (version %u): scdb's copy differs (%zu vs %zu bytes)", path, ver, n, on);
        free(orig);
        free(img);
        scdb_gguf_writer_free(&w);
        scdb_gguf_close(&f);
    }
    print_message("%zu vocabulary GGUFs copied byte for byte (%d of version 2)\n", g.gl_pathc, v2);
    globfree(&g);
    assert_true(v2 >= 1);
    /* llama.cpp reads the copy as it reads the version-2 original */
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *a = llama_model_load_from_file(v2path, mp),
                       *b = llama_model_load_from_file(copy, mp);
    assert_non_null(a);
    assert_non_null(b);
    const char *text = "The cache broker restores a stored prefix: 42 tokens, \xe4\xb8\xad\xe6\x96\x87 too.";
    int32_t ia[256], ib[256];
    int na = tokenize(a, text, ia, 256), nb = tokenize(b, text, ib, 256);
    assert_true(na > 4);
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, (size_t)na * sizeof *ia);
    llama_model_free(a);
    llama_model_free(b);
    unlink(copy);
    rmdir(dir);
}

/* A model with a real BPE vocabulary through scdb: the broker loads its
 * GGUF (config, vocabulary size, fingerprint), llama.cpp tokenizes English
 * with GPT-2's merges, prefills, stores the sequence raw; a lookup of the
 * same token ids finds it, a consumer restores it, and the continuation is
 * llama.cpp's own, bit for bit. */
static void bpe_vocab_through_broker(void **state)
{
    (void)state;
    NEED_MODEL();
    const char *vocab = SCDB_LLAMA_MODELS "/ggml-vocab-gpt-2.gguf";
    if (access(vocab, R_OK)) {
        print_message("skipped: no %s\n", vocab);
        skip();
    }
    char dir[] = "/tmp/scdb_test_bpe_XXXXXX", path[128], ini[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bpe.gguf", dir);
    int V = 0;
    assert_int_equal(write_bpe_model(vocab, path, &V), 0);
    assert_true(V > 50000);
    struct llama_model *m = llama_model_load_from_file(path, llama_model_default_params());
    assert_non_null(m);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(scdb_read_file(SCDB_DATA_DIR "/heldout/english.txt", 1 << 24, &text, &len), SCDB_OK);
    text[6000] = 0;
    int32_t ids[2048];
    int n = tokenize(m, text + 2000, ids, 2048);
    free(text);
    assert_true(n > 200 && n < 2048);
    int above = 0;
    for (int i = 0; i < n; i++) above += ids[i] >= 256;
    assert_true(above > n / 2);            /* merged tokens, not bytes */
    enum { N = 192, T = 8 };

    snprintf(ini, sizeof ini, "block_tokens = 64\nno_sync = 1\nheartbeat_timeout_ms = 30000\n\n"
             "[model bpe]\nconfig = %s\n", path);
    assert_int_equal(bp_start(&llama_broker, SCDB_BROKER_BIN, ini), 0);
    scdb_llama_producer *prod = producer_on("bpe", NULL, path);
    scdb_err e;
    struct llama_context *own = ctx_for(m, prod, 1);
    scdb_llama_put_result pr;
    e = scdb_llama_producer_prefill(prod, own, 0, ids, N, &pr);
    if (e) fail_msg("put: %s: %s", scdb_strerror(e), scdb_llama_producer_error(prod));
    assert_int_equal(pr.put.n_stored, N / 64);
    assert_int_equal(scdb_llama_decode(own, 0, ids + N, T, N, 1), SCDB_OK);
    float *want = malloc((size_t)T * V * sizeof *want), *got = malloc((size_t)T * V * sizeof *got);
    for (int t = 0; t < T; t++) memcpy(want + (size_t)t * V, llama_get_logits_ith(own, t), (size_t)V * sizeof(float));

    scdb_llama_consumer *cons = consumer_on("bpe", NULL, m, path);
    assert_string_not_equal(scdb_llama_consumer_fingerprint(cons), "");
    scdb_lookup_result lr;
    assert_int_equal(scdb_lookup(scdb_llama_consumer_handle(cons), ids, N + T, &lr), SCDB_OK);
    assert_int_equal(lr.matched_tokens, N);
    struct llama_context *ctx = ctx_for(m, NULL, 1);
    scdb_llama_restore_result rr;
    assert_int_equal(scdb_llama_restore(cons, ctx, ids, N + T, NULL, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, N);
    assert_int_equal(scdb_llama_decode(ctx, 0, ids + N, T, N, 1), SCDB_OK);
    for (int t = 0; t < T; t++) memcpy(got + (size_t)t * V, llama_get_logits_ith(ctx, t), (size_t)V * sizeof(float));
    assert_memory_equal(got, want, (size_t)T * V * sizeof *got);
    print_message("GPT-2 BPE vocabulary (%d tokens): %d English token ids stored raw by llama.cpp, "
                  "matched by a lookup, restored; the continuation is its own prefill's, bit for bit\n",
                  V, N);
    free(want);
    free(got);
    llama_free(ctx);
    llama_free(own);
    scdb_llama_consumer_close(&cons);
    scdb_llama_producer_close(&prod);
    llama_model_free(m);
    assert_int_equal(bp_stop(&llama_broker, SIGTERM), 0);
    scdb_rm_tree(dir);
}

/* ---- calibration through llama.cpp, a real BPE vocabulary ---- */

/* `scdb ARGS` with its output in LOG; the exit status (-1: not run). */
static int run_scdb(const char *args, const char *log)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", SCDB_BIN, args, log);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* 1 if file `log` holds `what` (printed when it does not) */
static int log_has(const char *log, const char *what)
{
    char *t = NULL;
    size_t n = 0;
    if (scdb_read_file(log, 1 << 24, &t, &n)) return 0;
    int has = strstr(t, what) != NULL;
    if (!has) print_message("'%s' not in:\n%s\n", what, n > 3000 ? t + n - 3000 : t);
    free(t);
    return has;
}

static int finite_all(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Two random models around GPT-2's BPE vocabulary (a producer and a
 * specialist of it) are calibrated by `scdb calibrate` through llama.cpp on
 * a small English text -- tokenized by llama.cpp, states from its graph --
 * then served: the producer in llama.cpp stores a prefix as SCD codes, the
 * specialist in llama.cpp restores it through its pair (the broker checks
 * the pair's fingerprints against the GGUF files) and decodes on; and the
 * specialist's own prefill stored raw restores bit for bit. */
static void bpe_vocab_calibrated(void **state)
{
    (void)state;
    NEED_MODEL();
    const char *vocab = SCDB_LLAMA_MODELS "/ggml-vocab-gpt-2.gguf";
    if (access(vocab, R_OK)) {
        print_message("skipped: no %s\n", vocab);
        skip();
    }
    char dir[] = "/tmp/scdb_test_bpecal_XXXXXX", pp_path[128], cp_path[128], log[128], args[2048], ini[2048];
    assert_non_null(mkdtemp(dir));
    snprintf(pp_path, sizeof pp_path, "%s/bpe-base.gguf", dir);
    snprintf(cp_path, sizeof cp_path, "%s/bpe-spec.gguf", dir);
    snprintf(log, sizeof log, "%s/calibrate.log", dir);
    int V = 0, V2 = 0;
    assert_int_equal(write_bpe_model_as(vocab, pp_path, "bpe-base", "llama", 0x9e3779b97f4a7c15ull, &V), 0);
    assert_int_equal(write_bpe_model_as(vocab, cp_path, "bpe-spec", "llama", 0x2545f4914f6cdd1dull, &V2), 0);
    assert_int_equal(V, V2);

    /* calibrate: 8 statistics windows of 128 tokens, 2 held-back windows
     * of 385 tokens; every option the default run would take from the
     * family's texts given */
    snprintf(args, sizeof args,
             "calibrate --engine llama.cpp --threads 1 --producer %s --consumer %s --ranks 8,8,16 --patch-layers 1 "
             "--window 128 --windows 8 --eval-windows 2 --steps 50 --hidden 32 --device cpu "
             "--texts " SCDB_DATA_DIR "/heldout/english.txt --heldback-text " SCDB_DATA_DIR "/heldout/prose.txt "
             "-o %s/out", pp_path, cp_path, dir);
    int rc = run_scdb(args, log);
    assert_true(log_has(log, "states in llama.cpp"));
    assert_true(log_has(log, "BPE, 50257 tokens"));
    assert_true(log_has(log, "8 statistics windows"));
    assert_true(log_has(log, "held-back KL reuse"));
    assert_int_equal(rc, 0);

    /* --fidelity on the BPE pair: windows tokenized by llama.cpp from
     * --texts (such a model has no training text of the family's) */
    char flog[128], fpair[256];
    snprintf(flog, sizeof flog, "%s/fidelity.log", dir);
    snprintf(args, sizeof args,
             "calibrate --fidelity --codebook %s/out/codebooks/bpe-base.safetensors --producer %s --consumer %s "
             "--pairs %s/out/pairs --texts " SCDB_DATA_DIR "/heldout/english.txt --fidelity-windows 2 "
             "--fidelity-prefix 96 --fidelity-fractions 0.25,1 -o %s/fid", dir, pp_path, cp_path, dir, dir);
    rc = run_scdb(args, flog);
    assert_true(log_has(flog, "windows tokenized by llama.cpp"));
    assert_int_equal(rc, 0);
    snprintf(fpair, sizeof fpair, "%s/fid/bpe-base__bpe-spec.safetensors", dir);
    assert_int_equal(access(fpair, R_OK), 0);
    /* without --texts it has nothing to choose on, and says so */
    snprintf(args, sizeof args,
             "calibrate --fidelity --codebook %s/out/codebooks/bpe-base.safetensors --producer %s --consumer %s "
             "--pairs %s/out/pairs -o %s/fid2", dir, pp_path, cp_path, dir, dir);
    rc = run_scdb(args, flog);
    assert_true(log_has(flog, "--texts FILE gives one"));
    assert_int_equal(rc, 1);

    snprintf(ini, sizeof ini,
             "block_tokens = 64\nno_sync = 1\nheartbeat_timeout_ms = 30000\n\n"
             "[model bpe-base]\nconfig = %s\n\n[model bpe-spec]\nconfig = %s\n\n"
             "[codebook bpe-scd]\nkind = scd\nmodel = bpe-base\ncodes_dtype = int8\n"
             "file = %s/out/codebooks/bpe-base.safetensors\n\n"
             "[pair bpe-scd bpe-spec]\ndecoder = scd\nfile = %s/out/pairs/bpe-base__bpe-spec.safetensors\n",
             pp_path, cp_path, dir, dir);
    assert_int_equal(bp_start(&llama_broker, SCDB_BROKER_BIN, ini), 0);
    struct llama_model *mp = llama_model_load_from_file(pp_path, llama_model_default_params());
    struct llama_model *mc = llama_model_load_from_file(cp_path, llama_model_default_params());
    assert_non_null(mp);
    assert_non_null(mc);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(scdb_read_file(SCDB_DATA_DIR "/heldout/code.txt", 1 << 24, &text, &len), SCDB_OK);
    assert_true(len > 4000);
    text[4000] = 0;
    int32_t ids[2048];
    int n = tokenize(mc, text, ids, 2048);
    free(text);
    enum { N = 192, T = 8 };
    assert_true(n >= N + T);

    /* the producer in llama.cpp stores the prefix as SCD codes */
    scdb_llama_producer *prod = producer_on("bpe-base", "bpe-scd", pp_path);
    scdb_err e;
    struct llama_context *pctx = ctx_for(mp, prod, 1);
    scdb_llama_put_result pr;
    e = scdb_llama_producer_prefill(prod, pctx, 0, ids, N, &pr);
    if (e) fail_msg("put: %s: %s", scdb_strerror(e), scdb_llama_producer_error(prod));
    assert_int_equal(pr.put.n_stored, N / 64);

    /* the specialist restores it through its pair and decodes on */
    scdb_llama_consumer *cons = consumer_on("bpe-spec", "bpe-scd", mc, cp_path);
    scdb_lookup_result lr;
    assert_int_equal(scdb_lookup(scdb_llama_consumer_handle(cons), ids, N + T, &lr), SCDB_OK);
    assert_int_equal(lr.matched_tokens, N);
    struct llama_context *cctx = ctx_for(mc, NULL, 0);
    scdb_llama_restore_result rr;
    e = scdb_llama_restore(cons, cctx, ids, N + T, NULL, &rr);
    if (e) fail_msg("restore: %s: %s", scdb_strerror(e), scdb_llama_consumer_error(cons));
    assert_int_equal(rr.n_restored, N);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(cctx), 0), N - 1);
    assert_int_equal(scdb_llama_decode(cctx, 0, ids + N, T, N, 1), SCDB_OK);
    float *scd = malloc((size_t)T * V * sizeof *scd), *want = malloc((size_t)T * V * sizeof *want);
    float *got = malloc((size_t)T * V * sizeof *got);
    assert_true(scd && want && got);
    for (int t = 0; t < T; t++) memcpy(scd + (size_t)t * V, llama_get_logits_ith(cctx, t), (size_t)V * sizeof(float));
    assert_true(finite_all(scd, (size_t)T * V));

    /* the specialist's own prefill, stored raw, restores bit for bit */
    scdb_llama_producer *rprod = producer_on("bpe-spec", NULL, cp_path);
    /* F16 KV as the raw store keeps it: the same bytes back */
    struct llama_context *own = ctx_for(mc, rprod, 1);
    e = scdb_llama_producer_prefill(rprod, own, 0, ids, N, &pr);
    if (e) fail_msg("raw put: %s: %s", scdb_strerror(e), scdb_llama_producer_error(rprod));
    assert_int_equal(scdb_llama_decode(own, 0, ids + N, T, N, 1), SCDB_OK);
    for (int t = 0; t < T; t++) memcpy(want + (size_t)t * V, llama_get_logits_ith(own, t), (size_t)V * sizeof(float));
    scdb_llama_consumer *rcons = consumer_on("bpe-spec", NULL, mc, cp_path);
    struct llama_context *rctx = ctx_for(mc, NULL, 1);
    assert_int_equal(scdb_llama_restore(rcons, rctx, ids, N + T, NULL, &rr), SCDB_OK);
    assert_int_equal(rr.n_restored, N);
    assert_int_equal(scdb_llama_decode(rctx, 0, ids + N, T, N, 1), SCDB_OK);
    for (int t = 0; t < T; t++) memcpy(got + (size_t)t * V, llama_get_logits_ith(rctx, t), (size_t)V * sizeof(float));
    assert_memory_equal(got, want, (size_t)T * V * sizeof *got);
    double dmax = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) dmax = fmax(dmax, fabs((double)scd[i] - want[i]));
    print_message("GPT-2 BPE vocabulary (%d tokens): calibrated through llama.cpp, %d token ids stored as "
                  "SCD codes by the producer and restored by the specialist (max |dlogit| vs its own "
                  "prefill %.3g over %d tokens), its own prefill raw restored bit for bit\n", V, N, dmax, T);
    free(scd);
    free(want);
    free(got);
    llama_free(rctx);
    llama_free(own);
    llama_free(cctx);
    llama_free(pctx);
    scdb_llama_consumer_close(&rcons);
    scdb_llama_consumer_close(&cons);
    scdb_llama_producer_close(&rprod);
    scdb_llama_producer_close(&prod);
    llama_model_free(mp);
    llama_model_free(mc);
    assert_int_equal(bp_stop(&llama_broker, SIGTERM), 0);
    scdb_rm_tree(dir);
}

/* What `scdb calibrate` refuses, each by name: a vocabulary of its own in
 * the reference engine (byte windows), a consumer whose vocabulary is not
 * the producer's, another architecture, llama.cpp asked for model
 * directories, text too short for one statistics window or for the
 * held-back windows, held-back windows counted in bytes of a --texts file. */
static void calibrate_refusals(void **state)
{
    (void)state;
    NEED_MODEL();
    const char *gpt2 = SCDB_LLAMA_MODELS "/ggml-vocab-gpt-2.gguf", *neox = SCDB_LLAMA_MODELS "/ggml-vocab-gpt-neox.gguf";
    if (access(gpt2, R_OK) || access(neox, R_OK)) {
        print_message("skipped: no %s or %s\n", gpt2, neox);
        skip();
    }
    char dir[] = "/tmp/scdb_test_calref_XXXXXX", a[128], b[128], c[128], x[128], tiny[128], log[128];
    char args[2048];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    snprintf(c, sizeof c, "%s/neox.gguf", dir);
    snprintf(x, sizeof x, "%s/gpt2arch.gguf", dir);
    snprintf(tiny, sizeof tiny, "%s/tiny.txt", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    int V;
    assert_int_equal(write_bpe_model_as(gpt2, a, "a", "llama", 1, &V), 0);
    assert_int_equal(write_bpe_model_as(gpt2, b, "b", "llama", 2, &V), 0);
    assert_int_equal(write_bpe_model_as(neox, c, "neox", "llama", 3, &V), 0);
    assert_int_equal(write_bpe_model_as(gpt2, x, "x", "gpt2", 4, &V), 0);
    FILE *f = fopen(tiny, "w");
    assert_non_null(f);
    fputs("Too short for one window of calibration text, in any vocabulary.\n", f);
    fclose(f);
    const char *opts = "--ranks 8,8,16 --patch-layers 1 --window 128 --windows 8 --eval-windows 2 --steps 20 "
                       "--device cpu";
    const char *eng = SCDB_DATA_DIR "/heldout/english.txt", *prose = SCDB_DATA_DIR "/heldout/prose.txt";

    /* the reference engine's byte windows are not a BPE model's tokens */
    snprintf(args, sizeof args, "calibrate --engine reference --producer %s --consumer %s %s --texts %s "
             "--heldback-text %s -o %s/o", a, b, opts, eng, prose, dir);
    assert_int_equal(run_scdb(args, log), 2);
    assert_true(log_has(log, "has a vocabulary of its own (tokenizer 'gpt2', 50257 tokens)"));
    /* token ids of two vocabularies would not line up */
    snprintf(args, sizeof args, "calibrate --producer %s --consumer %s %s --texts %s --heldback-text %s -o %s/o",
             a, c, opts, eng, prose, dir);
    assert_int_equal(run_scdb(args, log), 2);
    assert_true(log_has(log, "token ids would not line up"));
    assert_true(log_has(log, "'neox'"));
    /* another architecture */
    snprintf(args, sizeof args, "calibrate --engine llama.cpp --producer %s --consumer %s %s --texts %s "
             "--heldback-text %s -o %s/o", a, x, opts, eng, prose, dir);
    assert_int_not_equal(run_scdb(args, log), 0);
    assert_true(log_has(log, "gpt2"));
    assert_true(log_has(log, "architecture"));
    /* llama.cpp loads GGUF files only */
    snprintf(args, sizeof args, "calibrate --engine llama.cpp --producer " SCDB_DATA_DIR "/models/base "
             "--consumer " SCDB_DATA_DIR "/models/code %s --texts %s --heldback-text %s -o %s/o", opts, eng,
             prose, dir);
    assert_int_equal(run_scdb(args, log), 2);
    assert_true(log_has(log, "is not a GGUF file"));
    /* text too short for one statistics window of 128 tokens */
    snprintf(args, sizeof args, "calibrate --producer %s --consumer %s %s --texts %s --heldback-text %s -o %s/o",
             a, b, opts, tiny, prose, dir);
    assert_int_equal(run_scdb(args, log), 2);
    assert_true(log_has(log, "gives no window of 128 tokens"));
    /* held-back text long enough in bytes (2 x 385), not in tokens: its
     * first 1000 bytes */
    char hb[128];
    snprintf(hb, sizeof hb, "%s/hb.txt", dir);
    char *t = NULL;
    size_t len = 0;
    assert_int_equal(scdb_read_file(prose, 1 << 24, &t, &len), SCDB_OK);
    f = fopen(hb, "w");
    assert_non_null(f);
    fwrite(t, 1, len < 1000 ? len : 1000, f);
    fclose(f);
    free(t);
    snprintf(args, sizeof args, "calibrate --producer %s --consumer %s %s --texts %s --heldback-text %s -o %s/o",
             a, b, opts, eng, hb, dir);
    assert_int_equal(run_scdb(args, log), 1);
    assert_true(log_has(log, "is too short:"));
    assert_true(log_has(log, "2 held-back windows of 385 tokens need 770"));
    /* held-back windows after the statistics in one --texts file are
     * counted in bytes: refused for a vocabulary of its own */
    snprintf(args, sizeof args, "calibrate --producer %s --consumer %s %s --texts %s -o %s/o", a, b, opts, eng, dir);
    assert_int_equal(run_scdb(args, log), 2);
    assert_true(log_has(log, "--heldback-text FILE, a file that is not among --texts"));
    scdb_rm_tree(dir);
}

/* ---- live eviction in llama.cpp ---- */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* n_seq_max sequences, one stream each when over 1 (kv_unified off) */
static struct llama_context *evict_ctx_type(scdb_llama_evictor *ev, int n_seq, int n_ubatch,
                                            int threads, int flash, enum ggml_type kv)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512 * (uint32_t)n_seq;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_ubatch;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.kv_unified = false;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = kv;
    scdb_llama_evictor_cparams(ev, &cp);
    assert_int_equal(cp.flash_attn_type, LLAMA_FLASH_ATTN_TYPE_DISABLED);
    if (flash)
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    struct llama_context *ctx = llama_init_from_model(lm, cp);
    assert_non_null(ctx);
    return ctx;
}

static struct llama_context *evict_ctx_ex(scdb_llama_evictor *ev, int n_seq, int n_ubatch,
                                          int threads, int flash)
{
    return evict_ctx_type(ev, n_seq, n_ubatch, threads, flash, GGML_TYPE_F32);
}

static struct llama_context *evict_ctx(scdb_llama_evictor *ev)
{
    return evict_ctx_ex(ev, 1, 512, 2, 0);
}

/* Each policy evicts a llama.cpp sequence under its budget; the reference
 * engine, given the same kept set (its cache compacted to the positions
 * llama.cpp kept), computes the same logits step after step, and the
 * sequence llama.cpp holds is exactly the evictor's positions.  Each
 * policy twice: reading the attention at every step, and (capture_every
 * 3) at one step in three, the others' cells read off the mask. */
static void evictor_matches_reference(void **state)
{
    (void)state;
    NEED_MODEL();
    const char *policies[] = {"streaming", "h2o", "snapkv", "tova", "learned", "learned_sets",
                              "streaming", "h2o", "snapkv", "tova", "learned", "learned_sets"};
    enum { PRE = 96, STEPS = 40, BUDGET = 64, N_POL = 6 };
    /* every other policy on the caller's thread pool, the rest on the
     * evictor's own (the contexts run 2 threads) */
    assert_null(scdb_llama_threadpool_new(0));
    struct ggml_threadpool *tp = scdb_llama_threadpool_new(2);
    assert_non_null(tp);
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        char err[512] = "";
        scdb_llama_evict_params ep = scdb_llama_evict_default_params();
        ep.threadpool = k % 2 ? tp : NULL;
        ep.sets = !strcmp(policies[k], "learned_sets");
        ep.policy = ep.sets ? "learned" : policies[k];
        ep.policy_file = SCDB_DATA_DIR "/policies/distillcache_base.safetensors";
        ep.budget = BUDGET;
        ep.cadence = 8;
        ep.capture_every = k < N_POL ? 1 : 3;
        scdb_llama_evictor *ev = NULL;
        scdb_err e = scdb_llama_evictor_new(&ep, &ev, err, sizeof err);
        if (e) fail_msg("%s: %s", policies[k], err);
        struct llama_context *ctx = evict_ctx(ev);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok, PRE, 0, 0), SCDB_OK);
        e = scdb_llama_evictor_start(ev, ctx);
        if (e) fail_msg("start: %s", scdb_llama_evictor_error(ev));
        /* every other policy of the second pass as where the mask cannot
         * be read: the cells off layer 0's attention (a split) */
        const int no_mask = k >= N_POL && k % 2;
        if (no_mask)
            ll_evictor_no_mask(ev);
        /* and two as where the cache's V cannot be read: Vcur-N on the
         * steps between too, from the first */
        const int vcur = k >= N_POL && k % 4 == 2;
        if (vcur)
            ll_evictor_v_from_vcur(ev);
        /* keep sets per head through the state writer on the first pass,
         * written in place on the second */
        const int writer = k < N_POL;
        if (writer)
            ll_evictor_state_writer(ev);
        scdb_kv_cache *rc = NULL, *was = NULL;
        assert_int_equal(scdb_model_cache_new(ref, 512, &rc), SCDB_OK);
        assert_int_equal(scdb_model_cache_new(ref, 512, &was), SCDB_OK);
        assert_int_equal(scdb_model_forward(ref, tok, NULL, PRE, rc, NULL, NULL), SCDB_OK);
        /* the position each reference slot holds in set k (= layer * 2 +
         * KV group): the cache's own until sets differ */
        static int32_t spos[16][512];
        for (int k2 = 0; k2 < 16; k2++) memcpy(spos[k2], rc->pos, (size_t)rc->n * sizeof *rc->pos);
        float lg[256];
        double dl = 0;
        int evictions = 0, per_set = 0, mask_reads = 0, full_reads = 0, in_place = 0;
        long apart = 0;
        for (int s = 0; s < STEPS; s++) {
            scdb_llama_evict_result r;
            e = scdb_llama_evictor_decode(ev, ctx, tok + PRE + s, 1, 0, &r);
            if (e) fail_msg("%s step %d: %s", policies[k], s, scdb_llama_evictor_error(ev));
            evictions += r.evictions;
            in_place += r.sets_in_place;
            {
                /* the policy's positions and llama.cpp's cells' apart: a
                 * cell written in place keeps its own */
                int nn = 0;
                const int32_t *lp = scdb_llama_evictor_positions(ev, &nn);
                const scdb_kv_cache *sh = ll_evictor_shadow(ev);
                assert_int_equal(nn, sh->n);
                for (int i = 0; i < nn; i++) {
                    assert_true(sh->pos[i] <= lp[i]);
                    apart += sh->pos[i] != lp[i];
                }
            }
            mask_reads += r.mask_reads;
            full_reads += r.full_reads;
            assert_true(r.cells <= BUDGET + ep.cadence - 1);
            /* the reference: the same token over the cache before this step's
             * eviction, then the same kept set */
            assert_int_equal(scdb_model_forward(ref, tok + PRE + s, NULL, 1, rc, lg, NULL), SCDB_OK);
            for (int k2 = 0; k2 < 16; k2++) spos[k2][rc->n - 1] = rc->pos[rc->n - 1];
            const float *g = llama_get_logits_ith(ctx, -1);
            for (int v = 0; v < 256; v++) dl = fmax(dl, fabs(g[v] - lg[v]));
            int n;
            const int32_t *pos = scdb_llama_evictor_positions(ev, &n);
            int ns = 0;
            if (r.evictions && scdb_llama_evictor_set_positions(ev, 0, &ns)) {
                /* keep sets per (layer, KV group): the reference's cache
                 * gathered set by set, slot i of set k the K / V the set
                 * held for its position i, the slot's position the
                 * evictor's; llama.cpp must attend like it */
                per_set++;
                assert_int_equal(ns, n);
                const int old_n = rc->n;
                was->n = old_n;
                for (int l = 0; l < 8; l++) {
                    memcpy(scdb_kv_k(was, l, 0), scdb_kv_k(rc, l, 0), (size_t)old_n * 64 * sizeof(float));
                    memcpy(scdb_kv_v(was, l, 0), scdb_kv_v(rc, l, 0), (size_t)old_n * 64 * sizeof(float));
                }
                rc->n = n;
                memcpy(rc->pos, pos, (size_t)n * sizeof *pos);
                for (int l = 0; l < 8; l++)
                    for (int gq = 0; gq < 2; gq++) {
                        int k2 = l * 2 + gq;
                        const int32_t *sp = scdb_llama_evictor_set_positions(ev, k2, &ns);
                        assert_non_null(sp);
                        for (int i = 0, j = 0; i < n; i++) {
                            assert_true(sp[i] <= pos[i] && (i == 0 || sp[i] > sp[i - 1]));
                            while (j < old_n && spos[k2][j] != sp[i]) j++;
                            assert_true(j < old_n);
                            memcpy(scdb_kv_k(rc, l, i) + gq * 32, scdb_kv_k(was, l, j) + gq * 32,
                                   32 * sizeof(float));
                            memcpy(scdb_kv_v(rc, l, i) + gq * 32, scdb_kv_v(was, l, j) + gq * 32,
                                   32 * sizeof(float));
                        }
                        memcpy(spos[k2], sp, (size_t)n * sizeof *sp);
                    }
            } else if (r.evictions) {
                int keep[512], nk = 0;
                for (int i = 0, j = 0; i < rc->n && j < n; i++)
                    if (rc->pos[i] == pos[j]) { keep[nk++] = i; j++; }
                assert_int_equal(nk, n);
                assert_int_equal(scdb_kv_cache_compact(rc, keep, nk), SCDB_OK);
                for (int k2 = 0; k2 < 16; k2++) memcpy(spos[k2], rc->pos, (size_t)nk * sizeof *rc->pos);
            }
            /* llama.cpp holds exactly those positions */
            scdb_llama_layout L = {.n_layer = 8, .n_kv_heads = 2, .head_dim = 32, .n_stream = 1,
                                   .k_type = 0, .v_type = 0, .v_trans = 1};
            scdb_kv_cache *back = NULL;
            assert_int_equal(scdb_kv_cache_new(8, 2, 32, 512, &back), SCDB_OK);
            assert_int_equal(scdb_llama_seq_read(ctx, &L, 0, back, err, sizeof err), SCDB_OK);
            /* the blob lists cells in cell order: new tokens reuse freed cells */
            assert_int_equal(back->n, n);
            int32_t a1[512], a2[512];
            memcpy(a1, back->pos, (size_t)n * sizeof *a1);
            memcpy(a2, pos, (size_t)n * sizeof *a2);
            qsort(a1, (size_t)n, sizeof *a1, cmp_i32);
            qsort(a2, (size_t)n, sizeof *a2, cmp_i32);
            assert_memory_equal(a1, a2, (size_t)n * sizeof *a1);
            scdb_kv_cache_free(&back);
        }
        print_message("%s (%s thread pool, capture every %d%s): %d evictions over %d steps (%d "
                      "with a set per head, %d of them in place), budget %d; llama.cpp vs the "
                      "reference under the same kept sets: max |dlogit| %.1e\n", policies[k],
                      ep.threadpool ? "the caller's" : "its own", ep.capture_every,
                      no_mask ? ", cells off layer 0" : vcur ? ", V from Vcur" : "", evictions,
                      STEPS, per_set, in_place, BUDGET, dl);
        /* one step in three reads every layer: the first (V's check: it
         * reads Vcur), then every third; the rest read the mask alone
         * (with V from Vcur, no check: the third, then every third) */
        const int fulls = ep.capture_every == 1 ? STEPS : vcur ? STEPS / 3 : (STEPS + 2) / 3;
        assert_int_equal(full_reads, fulls);
        /* (a step off layer 0's attention is neither) */
        assert_int_equal(mask_reads, no_mask ? 0 : STEPS - fulls);
        assert_int_equal(ll_evictor_v_mode(ev), vcur ? -1 : 1);
        /* and only the full steps fold a query's attention (the start
         * folds none: the prefill was llama.cpp's own) */
        assert_int_equal(ll_evictor_queries(ev), fulls);
        assert_true(evictions >= 4);
        assert_true(dl < 1e-4);
        /* the shipped file's scorer takes this budget (below its split) */
        if (ep.sets) assert_true(per_set >= 4);
        else assert_int_equal(per_set, 0);
        /* every set per head written in place, the cache's tensors checked
         * against the blob at the first; or all through the state writer */
        assert_int_equal(in_place, writer ? 0 : per_set);
        /* (the two positions part only where sets were written in place) */
        if (per_set && !writer) assert_true(apart > 0);
        else assert_int_equal(apart, 0);
        scdb_kv_cache_free(&rc);
        scdb_kv_cache_free(&was);
        llama_free(ctx);
        scdb_llama_evictor_free(&ev);
    }
    scdb_llama_threadpool_free(tp);   /* after the contexts it ran */
}

/* refusals: a budget over the context or at the sinks, an unknown or
 * per-head policy, a sequence cleared under the evictor, flash attention on */
static void evictor_refusals(void **state)
{
    (void)state;
    NEED_MODEL();
    char err[512] = "";
    scdb_llama_evict_params ep = scdb_llama_evict_default_params();
    scdb_llama_evictor *ev = NULL;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_EINVAL); /* no budget */
    ep.budget = 32;
    ep.policy = "h2o_head";
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "h2o_head"));
    ep.policy = "nonesuch";
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_EINVAL);
    ep.policy = "learned";
    ep.policy_file = NULL;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_EINVAL);
    ep.policy = "h2o";
    ep.capture_every = 65;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "capture_every 65"));
    ep.capture_every = -1;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "capture_every -1"));
    ep.capture_every = 0;          /* the default */
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    scdb_llama_evictor_free(&ev);
    /* each evictor gets its own context: the context's cb_eval holds it */
    ep.policy = "streaming";
    ep.budget = 1000;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    struct llama_context *ctx = evict_ctx(ev);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_EINVAL);
    assert_non_null(strstr(scdb_llama_evictor_error(ev), "512"));
    llama_free(ctx);
    scdb_llama_evictor_free(&ev);
    ep.budget = 4;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    ctx = evict_ctx(ev);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_EINVAL);
    assert_non_null(strstr(scdb_llama_evictor_error(ev), "sink"));
    llama_free(ctx);
    scdb_llama_evictor_free(&ev);
    ep.budget = 16;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    ctx = evict_ctx(ev);
    scdb_llama_evict_result r;
    assert_int_equal(scdb_llama_evictor_decode(ev, ctx, tok, 1, 0, &r), SCDB_EINVAL); /* not started */
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
    scdb_err e = scdb_llama_evictor_decode(ev, ctx, tok, 40, 0, &r);
    if (e) fail_msg("%s", scdb_llama_evictor_error(ev));
    assert_true(r.cells < 16 + 1);
    /* cleared behind its back */
    llama_memory_seq_rm(llama_get_memory(ctx), 0, -1, -1);
    assert_int_equal(scdb_llama_evictor_decode(ev, ctx, tok, 1, 0, &r), SCDB_ECLOSED);
    assert_non_null(strstr(scdb_llama_evictor_error(ev), "cleared"));
    assert_int_equal(scdb_llama_evictor_evict(ev, ctx, &r), SCDB_ECLOSED);
    llama_free(ctx);
    /* flash attention on: no probabilities */
    ctx = new_ctx(GGML_TYPE_F16, 1);
    assert_int_equal(scdb_llama_decode(ctx, 0, tok, 8, 0, 0), SCDB_OK);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_EUNSUPPORTED);
    assert_non_null(strstr(scdb_llama_evictor_error(ev), "flash attention"));
    llama_free(ctx);
    scdb_llama_evictor_free(&ev);
}

/* V of the new tokens, read from llama.cpp's cache after the decode once a
 * chunk showed the cache holds exactly Vcur-N (rounded to its type): the
 * shadow's row of each new slot is llama.cpp's own V at that position (its
 * blob, read back), for F32 and F16 caches, and Vcur-N is no longer asked
 * for; where the cache's V is taken as unreadable, Vcur-N's rows, on the
 * steps that read only the mask too */
static void evictor_v_from_cache(void **state)
{
    (void)state;
    NEED_MODEL();
    /* (variant 2: an F32 cache whose V is taken as unreadable, so the new
     * rows are Vcur-N's, on the steps between captures too) */
    for (int variant = 0; variant < 3; variant++) {
        const int f16 = variant == 1, vcur = variant == 2;
        char err[512] = "";
        scdb_llama_evict_params ep = scdb_llama_evict_default_params();
        ep.policy = "h2o";
        ep.budget = 64;
        ep.cadence = 8;
        ep.capture_every = 2;
        scdb_llama_evictor *ev = NULL;
        assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
        struct llama_context *ctx =
            evict_ctx_type(ev, 1, 512, 2, 0, f16 ? GGML_TYPE_F16 : GGML_TYPE_F32);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok, 96, 0, 0), SCDB_OK);
        assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
        assert_int_equal(ll_evictor_v_mode(ev), 0);
        if (vcur)
            ll_evictor_v_from_vcur(ev);
        scdb_llama_layout L = {.n_layer = 8, .n_kv_heads = 2, .head_dim = 32, .n_stream = 1,
                               .k_type = f16, .v_type = f16, .v_trans = 1};
        scdb_kv_cache *back = NULL;
        assert_int_equal(scdb_kv_cache_new(8, 2, 32, 512, &back), SCDB_OK);
        int checked = 0, mask_reads = 0;
        for (int s = 0; s < 40; s++) {
            scdb_llama_evict_result r;
            scdb_err e = scdb_llama_evictor_decode(ev, ctx, tok + 96 + s, 1, 0, &r);
            if (e) fail_msg("step %d: %s", s, scdb_llama_evictor_error(ev));
            mask_reads += r.mask_reads;
            assert_int_equal(ll_evictor_v_mode(ev), vcur ? -1 : 1);
            if (r.evictions)
                continue;          /* (rows of older slots are stale after one) */
            const scdb_kv_cache *sh = ll_evictor_shadow(ev);
            assert_int_equal(scdb_llama_seq_read(ctx, &L, 0, back, err, sizeof err), SCDB_OK);
            int j = 0;
            while (j < back->n && back->pos[j] != sh->pos[sh->n - 1]) j++;
            assert_true(j < back->n);
            for (int l = 0; l < 8; l++)
                assert_memory_equal(scdb_kv_v(sh, l, sh->n - 1), scdb_kv_v(back, l, j),
                                    64 * sizeof(float));
            checked++;
        }
        print_message("V from %s: %d steps checked against llama.cpp's blob (%ld off the mask)\n",
                      vcur ? "Vcur-N, F32 cache" : f16 ? "llama.cpp's F16 cache" : "llama.cpp's F32 cache",
                      checked, (long)mask_reads);
        assert_int_equal(mask_reads, 20);
        assert_true(checked >= 20);
        scdb_kv_cache_free(&back);
        llama_free(ctx);
        scdb_llama_evictor_free(&ev);
    }
}

/* the edges a serving process reaches: keep sets per head on a context of
 * one stream per sequence (the sequence in the first stream and in the
 * last), sequences beyond the context's refused (llama.cpp asserts on
 * them), a context whose ubatch is smaller than the evictor's chunk, a
 * budget near the context's size, a chunk that fails after llama.cpp
 * decoded it (flash attention on, the sequence empty at start: no
 * probabilities) taken back out, a second start on a context with more
 * threads while the first context still runs on the evictor's first pool,
 * and an empty write clearing the sequence */
static void evictor_edges(void **state)
{
    (void)state;
    NEED_MODEL();
    char err[512] = "";
    scdb_llama_evict_params ep = scdb_llama_evict_default_params();
    ep.policy = "learned";
    ep.policy_file = SCDB_DATA_DIR "/policies/distillcache_base.safetensors";
    ep.sets = 1;
    ep.budget = 64;
    ep.cadence = 8;
    for (int seq = 0; seq < 2; seq++) {
        ep.seq = seq;
        scdb_llama_evictor *ev = NULL;
        assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
        /* (an F16 cache, llama.cpp's default: the sets written in place
         * copy its bytes) */
        struct llama_context *ctx = evict_ctx_type(ev, 2, 512, 2, 0, GGML_TYPE_F16);
        assert_int_equal(scdb_llama_decode(ctx, 1 - seq, tok, 40, 0, 0), SCDB_OK);
        assert_int_equal(scdb_llama_decode(ctx, seq, tok, 96, 0, 0), SCDB_OK);
        /* the other sequence's state, to be the same after */
        size_t on = llama_state_seq_get_size(ctx, 1 - seq);
        uint8_t *other = malloc(on), *other2 = malloc(on);
        assert_non_null(other);
        assert_non_null(other2);
        assert_int_equal(llama_state_seq_get_data(ctx, other, on, 1 - seq), on);
        assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
        /* every position's K and V as llama.cpp first wrote them (F16,
         * read back as F32: exact), to find them again in the cells each
         * set kept, row for row, after the sets were moved in place */
        static float rk[136][8][64], rv[136][8][64];
        scdb_llama_layout L2 = {.n_layer = 8, .n_kv_heads = 2, .head_dim = 32, .n_stream = 2,
                                .k_type = 1, .v_type = 1, .v_trans = 1};
        scdb_kv_cache *bk = NULL;
        assert_int_equal(scdb_kv_cache_new(8, 2, 32, 512, &bk), SCDB_OK);
        assert_int_equal(scdb_llama_seq_read(ctx, &L2, seq, bk, err, sizeof err), SCDB_OK);
        assert_int_equal(bk->n, 96);
        for (int i = 0; i < 96; i++)
            for (int l = 0; l < 8; l++) {
                memcpy(rk[bk->pos[i]][l], scdb_kv_k(bk, l, i), 64 * sizeof(float));
                memcpy(rv[bk->pos[i]][l], scdb_kv_v(bk, l, i), 64 * sizeof(float));
            }
        int per_set = 0, in_place = 0;
        for (int s = 0; s < 40; s++) {
            scdb_llama_evict_result r;
            scdb_err e = scdb_llama_evictor_decode(ev, ctx, tok + 96 + s, 1, 0, &r);
            if (e) fail_msg("sequence %d step %d: %s", seq, s, scdb_llama_evictor_error(ev));
            int ns = 0;
            per_set += r.evictions && scdb_llama_evictor_set_positions(ev, 0, &ns) != NULL;
            in_place += r.sets_in_place;
            /* the new token's cell holds its own rows (every set keeps
             * the newest token where it is) */
            assert_int_equal(scdb_llama_seq_read(ctx, &L2, seq, bk, err, sizeof err), SCDB_OK);
            int found = 0;
            for (int i = 0; i < bk->n; i++)
                if (bk->pos[i] == 96 + s) {
                    for (int l = 0; l < 8; l++) {
                        memcpy(rk[96 + s][l], scdb_kv_k(bk, l, i), 64 * sizeof(float));
                        memcpy(rv[96 + s][l], scdb_kv_v(bk, l, i), 64 * sizeof(float));
                    }
                    found++;
                }
            assert_int_equal(found, 1);
        }
        /* each set's slot i: the cell at the slot's llama.cpp position
         * holds, in the set's KV head, the rows of the token the set kept */
        assert_int_equal(scdb_llama_seq_read(ctx, &L2, seq, bk, err, sizeof err), SCDB_OK);
        int nsl = 0;
        const int32_t *lp = scdb_llama_evictor_positions(ev, &nsl);
        assert_int_equal(bk->n, nsl);
        for (int k = 0; k < 16; k++) {
            int ns = 0;
            const int32_t *sp = scdb_llama_evictor_set_positions(ev, k, &ns);
            assert_non_null(sp);
            assert_int_equal(ns, nsl);
            const int l = k / 2, g = k % 2;
            for (int i = 0; i < nsl; i++) {
                int c = 0;
                while (c < bk->n && bk->pos[c] != lp[i]) c++;
                assert_true(c < bk->n);
                assert_true(sp[i] >= 0 && sp[i] < 136);
                assert_memory_equal(scdb_kv_k(bk, l, c) + g * 32, rk[sp[i]][l] + g * 32,
                                    32 * sizeof(float));
                assert_memory_equal(scdb_kv_v(bk, l, c) + g * 32, rv[sp[i]][l] + g * 32,
                                    32 * sizeof(float));
            }
        }
        scdb_kv_cache_free(&bk);
        print_message("keep sets per head on sequence %d of 2 streams: %d evictions (%d in "
                      "place)\n", seq, per_set, in_place);
        assert_true(per_set >= 4);
        assert_int_equal(in_place, per_set);
        assert_int_equal(llama_state_seq_get_size(ctx, 1 - seq), on);
        assert_int_equal(llama_state_seq_get_data(ctx, other2, on, 1 - seq), on);
        assert_memory_equal(other, other2, on);
        free(other);
        free(other2);
        assert_int_equal(ll_evictor_v_mode(ev), 1);   /* V from the sequence's stream */
        int n = 0;
        const int32_t *pos = scdb_llama_evictor_positions(ev, &n);
        assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), seq), pos[n - 1]);
        assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 1 - seq), 39);
        /* a sequence beyond the context's two */
        scdb_llama_evictor *e2 = NULL;
        scdb_llama_evict_params p2 = ep;
        p2.seq = 2;
        assert_int_equal(scdb_llama_evictor_new(&p2, &e2, err, sizeof err), SCDB_OK);
        assert_int_equal(scdb_llama_evictor_start(e2, ctx), SCDB_EINVAL);
        assert_non_null(strstr(scdb_llama_evictor_error(e2), "sequences 0 to 1"));
        scdb_llama_evictor_free(&e2);
        scdb_llama_layout L;
        assert_int_equal(scdb_llama_probe(ctx, 5, &L, err, sizeof err), SCDB_EINVAL);
        assert_non_null(strstr(err, "sequences 0 to 1"));
        assert_int_equal(scdb_llama_decode(ctx, 7, tok, 1, 0, 0), SCDB_EINVAL);
        llama_free(ctx);
        scdb_llama_evictor_free(&ev);
    }
    /* an eviction of keep sets per head before any decode: the callback
     * has not seen llama.cpp's tensors yet, so it goes through the state
     * writer, and the next, after decodes, in place */
    {
        ep.seq = 0;
        scdb_llama_evictor *ev = NULL;
        assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
        struct llama_context *ctx = evict_ctx(ev);
        assert_int_equal(scdb_llama_decode(ctx, 0, tok, 96, 0, 0), SCDB_OK);
        assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
        scdb_llama_evict_result r;
        assert_int_equal(scdb_llama_evictor_evict(ev, ctx, &r), SCDB_OK);
        int ns = 0;
        assert_int_equal(r.evictions, 1);
        assert_non_null(scdb_llama_evictor_set_positions(ev, 0, &ns));
        assert_int_equal(r.sets_in_place, 0);
        int later = 0, in_place = 0;
        for (int s = 0; s < 16; s++) {
            scdb_err e = scdb_llama_evictor_decode(ev, ctx, tok + 96 + s, 1, 0, &r);
            if (e) fail_msg("after an early eviction, step %d: %s", s, scdb_llama_evictor_error(ev));
            later += r.evictions;
            in_place += r.sets_in_place;
        }
        assert_true(later >= 1);
        assert_int_equal(in_place, later);
        llama_free(ctx);
        scdb_llama_evictor_free(&ev);
    }
    /* ubatch 16 under the evictor's chunk of 64; then a budget of 500 of
     * 512 cells, decoded 450 tokens in one call */
    ep.seq = 0;
    ep.sets = 0;
    ep.policy = "streaming";
    ep.budget = 32;
    ep.cadence = 1;
    scdb_llama_evictor *ev = NULL;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    struct llama_context *ctx = evict_ctx_ex(ev, 1, 16, 2, 0);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
    scdb_llama_evict_result r;
    scdb_err e = scdb_llama_evictor_decode(ev, ctx, tok, 100, 0, &r);
    if (e) fail_msg("ubatch 16: %s", scdb_llama_evictor_error(ev));
    assert_true(r.cells <= 32 + 15 && r.evictions > 0);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 0), 99);
    llama_free(ctx);
    scdb_llama_evictor_free(&ev);
    ep.budget = 500;
    static int32_t many[600];        /* the text's tokens over and over */
    for (int i = 0; i < 600; i++) many[i] = tok[i % (P + C)];
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    ctx = evict_ctx(ev);
    assert_int_equal(scdb_llama_decode(ctx, 0, many, 100, 0, 0), SCDB_OK);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
    e = scdb_llama_evictor_decode(ev, ctx, many + 100, 450, 0, &r);
    if (e) fail_msg("budget 500 of 512: %s", scdb_llama_evictor_error(ev));
    assert_true(r.cells <= 500 && r.evictions > 0);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 0), 549);
    /* cadence 0: nothing evicts, the context fills, then EFULL */
    llama_free(ctx);
    scdb_llama_evictor_free(&ev);
    ep.cadence = 0;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    ctx = evict_ctx(ev);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
    assert_int_equal(scdb_llama_evictor_decode(ev, ctx, many, 600, 0, &r), SCDB_EFULL);
    assert_non_null(strstr(scdb_llama_evictor_error(ev), "all 512 cells"));
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 0), 511);
    assert_int_equal(scdb_llama_evictor_evict(ev, ctx, &r), SCDB_OK);
    assert_int_equal(r.cells, 500);
    llama_free(ctx);
    scdb_llama_evictor_free(&ev);
    /* flash attention on and the sequence empty at start: the first chunk
     * shows no probabilities, and is taken out of the sequence again */
    ep.cadence = 1;
    ep.budget = 32;
    assert_int_equal(scdb_llama_evictor_new(&ep, &ev, err, sizeof err), SCDB_OK);
    ctx = evict_ctx_ex(ev, 1, 512, 2, 1);
    assert_int_equal(scdb_llama_evictor_start(ev, ctx), SCDB_OK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(scdb_llama_evictor_decode(ev, ctx, tok, 10, 0, &r), SCDB_EUNSUPPORTED);
        assert_non_null(strstr(scdb_llama_evictor_error(ev), "flash attention"));
        assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(ctx), 0), -1);
    }
    llama_free(ctx);
    /* the evictor's own pools: a second start on a context of more threads
     * makes a new one; the first context still runs on the first */
    struct llama_context *a = evict_ctx_ex(ev, 1, 512, 2, 0);
    assert_int_equal(scdb_llama_evictor_start(ev, a), SCDB_OK);
    struct llama_context *b = evict_ctx_ex(ev, 1, 512, 3, 0);
    assert_int_equal(scdb_llama_evictor_start(ev, b), SCDB_OK);
    assert_int_equal(scdb_llama_decode(a, 0, tok, 20, 0, 0), SCDB_OK);
    assert_int_equal(scdb_llama_decode(b, 0, tok, 20, 0, 0), SCDB_OK);
    /* an empty write clears the sequence (llama.cpp alone would not) */
    scdb_llama_layout L = {.n_layer = 8, .n_kv_heads = 2, .head_dim = 32, .n_stream = 1,
                           .k_type = 0, .v_type = 0, .v_trans = 1};
    scdb_kv_cache *c = NULL;
    assert_int_equal(scdb_kv_cache_new(8, 2, 32, 4, &c), SCDB_OK);
    assert_int_equal(scdb_llama_seq_write(a, &L, 0, c, 0, err, sizeof err), SCDB_OK);
    assert_int_equal(llama_memory_seq_pos_max(llama_get_memory(a), 0), -1);
    scdb_kv_cache_free(&c);
    llama_free(a);
    llama_free(b);
    scdb_llama_evictor_free(&ev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(probe_layouts),
        cmocka_unit_test(blob_byte_identical),
        cmocka_unit_test(raw_restore_exact),
        cmocka_unit_test(rope_matches_reference),
        cmocka_unit_test(blob_refusals),
        cmocka_unit_test(fleet_through_broker),
        cmocka_unit_test(consumers_glob_gguf),
        cmocka_unit_test(quantized_gguf),
        cmocka_unit_test(vocab_gguf_copies),
        cmocka_unit_test(bpe_vocab_through_broker),
        cmocka_unit_test(bpe_vocab_calibrated),
        cmocka_unit_test(calibrate_refusals),
        cmocka_unit_test(evictor_matches_reference),
        cmocka_unit_test(evictor_refusals),
        cmocka_unit_test(evictor_edges),
        cmocka_unit_test(evictor_v_from_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
