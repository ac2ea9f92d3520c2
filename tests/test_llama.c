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
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "llama_int.h"
#include "model.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(probe_layouts),
        cmocka_unit_test(blob_byte_identical),
        cmocka_unit_test(raw_restore_exact),
        cmocka_unit_test(rope_matches_reference),
        cmocka_unit_test(blob_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
