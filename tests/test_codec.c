/* test_codec.c — SCD codec: ids, encode/decode shapes and round trips, the
 * identity pair (full rank reconstructs near exactly, lower ranks within a
 * rank-limited error), aligner training, save/load, refusal of mismatched
 * and corrupt artifacts with specific errors, and (when present) the shipped
 * codebooks and pairs under data/ against data/models.
 * A consumer added later (late_added): fitted against a frozen codebook
 * file, which stays byte for byte, with the same id; pairs recording the
 * 16-digit file fingerprint of before (checked as such, re-stamped).
 *
 * Fast: tiny random models (2 layers, d_model 16) written to a temp dir,
 * as tests/test_model.c does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec.h"
#include "codec_internal.h"
#include "model.h"
#include "safetensors.h"
#include "weights_fp.h"
#include "helpers/assert_close.h"
#include "helpers/tiny_model.h"
#include "helpers/tiny_adapter.h"

#include <xxhash.h>

static char tmpdir[256];
static scdb_model *prod, *cons, *other, *late;
static unsigned char *text;
static size_t text_len;

static uint64_t rng_state;   /* scdb_xorshift_f32 */

/* A random model: weights from `seed`, plus `perturb` x noise from seed 77
 * (tiny_model.h). */
static void write_model(const char *dir, const char *name, int n_layers, int d_ff, uint64_t seed,
                        float perturb)
{
    uint64_t noise = 77;
    tiny_model t = {.name = name, .domain = "english", .layers = n_layers, .ff = d_ff,
                    .rng = &rng_state, .perturb = perturb, .noise = &noise};
    rng_state = seed;
    tiny_model_write(dir, &t);
}

static int setup(void **state)
{
    (void)state;
    char d[512];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_codec_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(d, sizeof d, "%s/models", tmpdir);
    mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/models/prod", tmpdir);
    write_model(d, "prod", 2, 24, 88172645463325252ull, 0.0f);
    if (scdb_model_load(d, &prod, NULL, 0)) return -1;
    snprintf(d, sizeof d, "%s/models/cons", tmpdir);
    write_model(d, "cons", 2, 24, 88172645463325252ull, 0.25f);
    if (scdb_model_load(d, &cons, NULL, 0)) return -1;
    snprintf(d, sizeof d, "%s/models/other", tmpdir);
    write_model(d, "other", 2, 32, 12345ull, 0.0f);
    if (scdb_model_load(d, &other, NULL, 0)) return -1;
    /* a consumer that arrives after the codebook was fitted */
    snprintf(d, sizeof d, "%s/models/late", tmpdir);
    write_model(d, "late", 2, 24, 88172645463325252ull, 0.4f);
    if (scdb_model_load(d, &late, NULL, 0)) return -1;
    /* calibration text: the repository's held-out English if present */
    if (scdb_read_file(SCDB_DATA_DIR "/heldout/english.txt", 1 << 24, (char **)&text, &text_len)) {
        text_len = 20000;
        text = malloc(text_len);
        rng_state = 5;
        for (size_t i = 0; i < text_len; i++) text[i] = (unsigned char)(97 + (int)(13 * (scdb_xorshift_f32(&rng_state) + 1)));
    }
    if (text_len > 40000) text_len = 40000;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    scdb_model_free(&prod);
    scdb_model_free(&cons);
    scdb_model_free(&other);
    scdb_model_free(&late);
    free(text);
    return scdb_rm_tree(tmpdir) == 0 ? 0 : -1;
}

static scdb_calib_opts small_opts(void)
{
    scdb_calib_opts o = {.window = 48, .eval_prefix = 40, .eval_cont = 12, .sample_stride = 2};
    return o;
}

/* A session over producer + consumer with statistics and 2 eval windows. */
static scdb_calib *session(int with_consumer)
{
    scdb_calib *c = NULL;
    scdb_calib_opts o = small_opts();
    const scdb_model *cs[1] = {cons};
    assert_int_equal(scdb_calib_new(prod, cs, with_consumer ? 1 : 0, &o, &c), SCDB_OK);
    int added = 0;
    assert_int_equal(scdb_calib_add_text(c, text, text_len / 2, 200, &added), SCDB_OK);
    assert_true(added >= 100);
    for (int i = 0; i < 2; i++)
        assert_int_equal(scdb_calib_add_eval(c, -1, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
    return c;
}

/* The same session with its heavy parts on a device's ops table. */
static scdb_calib *session_on(scdb_device dev)
{
    scdb_calib *c = NULL;
    scdb_calib_opts o = small_opts();
    const scdb_model *cs[1] = {cons};
    assert_int_equal(scdb_calib_new(prod, cs, 1, &o, &c), SCDB_OK);
    assert_int_equal(scdb_calib_set_device(c, dev), SCDB_OK);
    int added = 0;
    assert_int_equal(scdb_calib_add_text(c, text, text_len / 2, 200, &added), SCDB_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(scdb_calib_add_eval(c, -1, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
    return c;
}

/* ------------------------------------------------------------ tests */

static void test_ids(void **state)
{
    (void)state;
    scdb_codec_id a, b;
    char hex[33];
    for (int i = 0; i < 16; i++) a.b[i] = (uint8_t)(i * 17 + 3);
    scdb_codec_id_hex(&a, hex);
    assert_int_equal(strlen(hex), 32);
    assert_int_equal(scdb_codec_id_parse(hex, &b), SCDB_OK);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(scdb_codec_id_parse("xyz", &b), SCDB_EFORMAT);
    assert_int_equal(scdb_codec_id_parse("0123456789abcdef0123456789abcdeg", &b), SCDB_EFORMAT);
}

/* producer's own cache for tokens */
static scdb_kv_cache *prefill(const scdb_model *m, const int32_t *tok, int n)
{
    scdb_kv_cache *c;
    assert_int_equal(scdb_model_cache_new(m, n, &c), SCDB_OK);
    assert_int_equal(scdb_model_forward(m, tok, NULL, n, c, NULL, NULL), SCDB_OK);
    return c;
}

/* relative squared error of K and V over all layers */
static void kv_rel_err(const scdb_kv_cache *a, const scdb_kv_cache *ref, int n, double *ek, double *ev)
{
    double nk = 0, dk = 0, nv = 0, dv = 0;
    int kv = scdb_kv_dim(ref);
    for (int l = 0; l < ref->n_layers; l++)
        for (int i = 0; i < n * kv; i++) {
            double x = scdb_kv_k(a, l, 0)[i], y = scdb_kv_k(ref, l, 0)[i];
            dk += (x - y) * (x - y); nk += y * y;
            x = scdb_kv_v(a, l, 0)[i]; y = scdb_kv_v(ref, l, 0)[i];
            dv += (x - y) * (x - y); nv += y * y;
        }
    *ek = dk / nk;
    *ev = dv / nv;
}

/* max over layers of max |a - ref| / max |ref|, K and V, over n slots */
static double kv_max_rel(const scdb_kv_cache *a, const scdb_kv_cache *ref, int n)
{
    double worst = 0;
    int kv = scdb_kv_dim(ref);
    for (int l = 0; l < ref->n_layers; l++)
        for (int w = 0; w < 2; w++) {
            const float *x = w ? scdb_kv_v(a, l, 0) : scdb_kv_k(a, l, 0);
            const float *y = w ? scdb_kv_v(ref, l, 0) : scdb_kv_k(ref, l, 0);
            double dm = 0, ym = 0;
            for (int i = 0; i < n * kv; i++) {
                double dd = fabs((double)x[i] - y[i]);
                if (dd > dm) dm = dd;
                if (fabs(y[i]) > ym) ym = fabs(y[i]);
            }
            if (ym > 0 && dm / ym > worst) worst = dm / ym;
        }
    return worst;
}

static void test_encode_decode_shapes(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL;
    int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 2, .r_v = 3, .r_h = 5, .n_candidates = 1, .candidates = cand};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    /* layer 0: K+V codes; layer 1: candidate, H code only */
    assert_int_equal(ci->code_dim, 2 + 3 + 5);
    assert_int_equal(ci->layers[1].r_h, 5);
    assert_int_equal(ci->layers[1].r_k, 0);
    assert_int_equal(ci->n_candidates, 1);
    assert_int_equal(ci->candidates[0], 1);
    assert_int_equal(scdb_codebook_token_bytes(cb), 20);
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 16, .steps = 100, .batch = 64, .keep_order = 1};
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
    const scdb_pair_info *pi = scdb_pair_get_info(p);
    assert_int_equal(pi->n_aligners, 1);
    assert_int_equal(pi->patch_order[0], 1);
    assert_int_equal(pi->n_patch, 1);

    int n = 30;
    int32_t tok[30], pos[30];
    uint16_t codes[30 * 10];
    for (int i = 0; i < n; i++) { tok[i] = text[i]; pos[i] = 5 + i; }
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, n, codes), SCDB_OK);
    scdb_kv_cache *cache;
    assert_int_equal(scdb_model_cache_new(cons, 40, &cache), SCDB_OK);
    /* bad arguments */
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, cache, 11), SCDB_EINVAL);
    assert_int_equal(scdb_pair_decode(p, cb, codes, 0, pos, tok, -1, cache, 0), SCDB_EINVAL);
    scdb_kv_cache *wrong;
    assert_int_equal(scdb_kv_cache_new(3, 2, 4, 40, &wrong), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, wrong, 0), SCDB_ESHAPE);
    scdb_kv_cache_free(&wrong);
    /* into slots [3, 33) */
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, cache, 3), SCDB_OK);
    assert_int_equal(cache->n, 33);
    for (int i = 0; i < n; i++) assert_int_equal(cache->pos[3 + i], 5 + i);
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < n * 8; i++) {
            assert_true(isfinite(scdb_kv_k(cache, l, 3)[i]));
            assert_true(isfinite(scdb_kv_v(cache, l, 3)[i]));
        }
    /* the consumer continues from the decoded cache */
    float logits[256];
    int32_t next = 'a';
    cache->n = 33;
    assert_int_equal(scdb_model_forward(cons, &next, NULL, 1, cache, logits, NULL), SCDB_OK);
    assert_int_equal(cache->pos[33], 35);
    for (int v = 0; v < 256; v++) assert_true(isfinite(logits[v]));
    /* decoding a token range equals the same range of a longer decode */
    scdb_kv_cache *c2;
    assert_int_equal(scdb_model_cache_new(cons, 40, &c2), SCDB_OK);
    uint16_t sub[20 * 10];
    assert_int_equal(scdb_codec_slice(cb, codes, n, 10, 30, sub), SCDB_OK);
    assert_int_equal(scdb_codec_slice(cb, codes, n, 10, 31, sub), SCDB_EINVAL);
    assert_int_equal(scdb_pair_decode(p, cb, sub, 20, pos + 10, tok + 10, -1, c2, 0), SCDB_OK);
    /* and the range decode reads the same rows straight from the block */
    scdb_kv_cache *c3;
    assert_int_equal(scdb_model_cache_new(cons, 40, &c3), SCDB_OK);
    assert_int_equal(scdb_pair_decode_range(p, cb, codes, n, 10, 20, pos + 10, tok + 10, -1, c3, 0), SCDB_OK);
    assert_memory_equal(c3->k, c2->k, sizeof(float) * 2 * 40 * 8);
    assert_memory_equal(c3->v, c2->v, sizeof(float) * 2 * 40 * 8);
    assert_int_equal(scdb_pair_decode_range(p, cb, codes, n, 11, 20, pos, tok, -1, c3, 0), SCDB_EINVAL);
    scdb_kv_cache_free(&c3);
    /* ... but not the same bits as rows 10..30 of the 30-row decode: GEMMs
     * of 20 and 30 rows may run different BLAS micro-kernels */
    for (int l = 0; l < 2; l++) {
        assert_f32_close(scdb_kv_k(c2, l, 0), scdb_kv_k(cache, l, 13), 20 * 8, SCDB_TEST_F32_REL);
        assert_f32_close(scdb_kv_v(c2, l, 0), scdb_kv_v(cache, l, 13), 20 * 8, SCDB_TEST_F32_REL);
    }
    scdb_kv_cache_free(&c2);
    scdb_kv_cache_free(&cache);
    /* patch budget 0 differs from 1 only on the patch layer */
    scdb_kv_cache *a, *b;
    assert_int_equal(scdb_model_cache_new(cons, 40, &a), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, 40, &b), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, 0, a, 0), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, 1, b, 0), SCDB_OK);
    assert_memory_equal(scdb_kv_k(a, 0, 0), scdb_kv_k(b, 0, 0), (size_t)n * 8 * sizeof(float));
    assert_memory_not_equal(scdb_kv_k(a, 1, 0), scdb_kv_k(b, 1, 0), (size_t)n * 8 * sizeof(float));
    scdb_kv_cache_free(&a);
    scdb_kv_cache_free(&b);
    /* encode errors */
    scdb_codec_states st = {0};
    assert_int_equal(scdb_codec_encode(cb, &st, n, codes), SCDB_EINVAL);
    assert_int_equal(scdb_codec_encode_tokens(cb, other, tok, NULL, n, codes), SCDB_EMISMATCH);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_calib_free(&c);
}

static void test_identity_pair(void **state)
{
    (void)state;
    scdb_calib *c = session(0);
    int n = 40;
    int32_t tok[40], pos[40];
    for (int i = 0; i < n; i++) { tok[i] = text[1000 + i]; pos[i] = i; }
    scdb_kv_cache *ref = prefill(prod, tok, n);
    double prev_k = 1e9, prev_v = 1e9;
    int ranks[3] = {2, 4, 8};
    for (int t = 0; t < 3; t++) {
        for (int pca = 0; pca < 2; pca++) {
            scdb_codebook *cb = NULL;
            scdb_pair *p = NULL;
            scdb_cb_fit f = {.r_k = ranks[t], .r_v = ranks[t], .pca = pca};
            assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
            scdb_pair_fit pf = {.no_train = 1};
            assert_int_equal(scdb_calib_fit_pair(c, cb, -1, &pf, &p), SCDB_OK);
            uint16_t *codes = malloc((size_t)n * scdb_codebook_get_info(cb)->code_dim * 2);
            assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, n, codes), SCDB_OK);
            scdb_kv_cache *dec;
            assert_int_equal(scdb_model_cache_new(prod, n, &dec), SCDB_OK);
            assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, dec, 0), SCDB_OK);
            double ek, ev;
            kv_rel_err(dec, ref, n, &ek, &ev);
            if (ranks[t] == 8) {
                /* full rank (kv_dim = 8): exact up to f16 codes */
                assert_true(ek < 1e-5);
                assert_true(ev < 1e-5);
            } else {
                assert_true(ek < 1.0 && ev < 1.0);   /* better than the mean alone */
                assert_true(ek > 1e-5);              /* and truly rank-limited */
            }
            if (!pca) {
                assert_true(ek <= prev_k * 1.05 + 1e-9);
                assert_true(ev <= prev_v * 1.05 + 1e-9);
                prev_k = ek;
                prev_v = ev;
            }
            free(codes);
            scdb_kv_cache_free(&dec);
            scdb_pair_free(&p);
            scdb_codebook_free(&cb);
        }
    }
    /* token layer 0: regenerated exactly from the tokens */
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL;
    scdb_cb_fit f = {.r_k = 8, .r_v = 8, .token_layer0 = 1};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    assert_int_equal(scdb_codebook_get_info(cb)->layers[0].kind, SCDB_CB_TOKENS);
    assert_int_equal(scdb_codebook_get_info(cb)->code_dim, 16);
    assert_int_equal(scdb_calib_fit_pair(c, cb, -1, NULL, &p), SCDB_OK);
    uint16_t codes[40 * 16];
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, n, codes), SCDB_OK);
    scdb_kv_cache *dec;
    assert_int_equal(scdb_model_cache_new(prod, n, &dec), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, NULL, -1, dec, 0), SCDB_EINVAL);
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, dec, 0), SCDB_OK);
    for (int i = 0; i < n * 8; i++) {
        assert_float_equal(scdb_kv_k(dec, 0, 0)[i], scdb_kv_k(ref, 0, 0)[i], 1e-5);
        assert_float_equal(scdb_kv_v(dec, 0, 0)[i], scdb_kv_v(ref, 0, 0)[i], 1e-5);
    }
    scdb_kv_cache_free(&dec);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_kv_cache_free(&ref);
    scdb_calib_free(&c);
}

/* An "all" pair: every layer's decoders read the whole code row. */
static void test_all_layers_pair(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL, *lp = NULL;
    int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 2, .r_v = 3, .r_h = 4, .n_candidates = 1, .candidates = cand};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 50, .all_layers = 1};
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(p)->all_input, 1);
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/all.safetensors", tmpdir);
    assert_int_equal(scdb_pair_save(p, path), SCDB_OK);
    assert_int_equal(scdb_pair_load(path, cb, &lp, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(lp)->all_input, 1);
    scdb_st_file *sf;
    assert_int_equal(scdb_st_open(path, &sf, NULL, 0), SCDB_OK);
    const scdb_st_tensor *t = scdb_st_find(sf, "layers.0.dec_k");
    assert_non_null(t);
    assert_int_equal(t->shape[1], 9);   /* code_dim, not layer 0's width 5 */
    scdb_st_close(&sf);
    int n = 20;
    int32_t tok[20], pos[20];
    uint16_t codes[20 * 9];
    for (int i = 0; i < n; i++) { tok[i] = text[300 + i]; pos[i] = i; }
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, n, codes), SCDB_OK);
    scdb_kv_cache *a, *b;
    assert_int_equal(scdb_model_cache_new(cons, n, &a), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, n, &b), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, a, 0), SCDB_OK);
    assert_int_equal(scdb_pair_decode(lp, cb, codes, n, pos, tok, -1, b, 0), SCDB_OK);
    assert_memory_equal(a->k, b->k, (size_t)2 * n * 8 * sizeof(float));
    assert_memory_equal(a->v, b->v, (size_t)2 * n * 8 * sizeof(float));
    for (int i = 0; i < 2 * n * 8; i++) assert_true(isfinite(a->k[i]) && isfinite(a->v[i]));
    scdb_kv_cache_free(&a);
    scdb_kv_cache_free(&b);
    scdb_pair_free(&lp);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_calib_free(&c);
}

static void test_rank_allocation(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    scdb_codebook *cb = NULL;
    scdb_cb_fit f = {.r_k = 2, .r_v = 2, .budget = 14};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    assert_true(ci->code_dim >= 8 && ci->code_dim <= 14);
    for (int l = 0; l < 2; l++) {
        assert_true(ci->layers[l].r_k >= 2 && ci->layers[l].r_k <= 8);
        assert_true(ci->layers[l].r_v >= 2 && ci->layers[l].r_v <= 8);
    }
    scdb_codebook_free(&cb);
    f.budget = 7;   /* below the minimum of 2 + 2 per layer */
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_EINVAL);
    scdb_calib_free(&c);
}

static void test_aligner_training(void **state)
{
    (void)state;
    int n = 2000, r = 4, d = 6;
    float *z = malloc((size_t)n * r * sizeof *z), *h = malloc((size_t)n * d * sizeof *h);
    rng_state = 99;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < r; k++) z[i * r + k] = 2.0f * scdb_xorshift_f32(&rng_state);
        for (int o = 0; o < d; o++) {
            float a = z[i * r + o % r], b = z[i * r + (o + 1) % r];
            h[i * d + o] = tanhf(a * b) + 0.5f * a + 0.05f * scdb_xorshift_f32(&rng_state);   /* non-linear */
        }
    }
    scdb_aligner al;
    double before = 0, after = 0;
    scdb_aligner_train t = {.hidden = 32, .steps = 800, .batch = 128, .lr = 3e-3f};
    assert_int_equal(scdb_aligner_fit(z, h, n, r, d, NULL, NULL, 0, &t, &al, &before, &after), SCDB_OK);
    assert_true(after < 0.6 * before);
    /* apply reproduces the validation loss (every 10th sample) */
    float *o = malloc((size_t)n * d * sizeof *o);
    assert_int_equal(scdb_aligner_apply(&al, z, r, n, o), SCDB_OK);
    double se = 0, var = 0, mu[6] = {0};
    for (int i = 0; i < n; i++) for (int k = 0; k < d; k++) mu[k] += h[i * d + k] / n;
    for (int i = 9; i < n; i += 10)
        for (int k = 0; k < d; k++) {
            double e = o[i * d + k] - h[i * d + k];
            se += e * e;
        }
    for (int i = 0; i < n * d; i++) var += (h[i] - mu[i % d]) * (h[i] - mu[i % d]);
    /* var over all samples, se over the tenth that validates */
    assert_float_equal(se / (var / 10.0), after, 0.05 * after + 1e-3);
    assert_int_equal(scdb_aligner_fit(z, h, 1, r, d, NULL, NULL, 0, &t, &al, NULL, NULL), SCDB_EINVAL);
    scdb_aligner_clear(&al);
    free(o);
    free(z);
    free(h);
}

/* ------------------------------------------------------------ files */

static char cb_path[600], pair_path[600], cb2_path[600];

static void write_artifacts(scdb_calib *c)
{
    scdb_codebook *cb = NULL, *cb2 = NULL;
    scdb_pair *p = NULL;
    int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 2, .r_v = 3, .r_h = 4, .n_candidates = 1, .candidates = cand,
                     .token_layer0 = 0};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 50, .batch = 32};
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
    snprintf(cb_path, sizeof cb_path, "%s/cb.safetensors", tmpdir);
    snprintf(pair_path, sizeof pair_path, "%s/pair.safetensors", tmpdir);
    snprintf(cb2_path, sizeof cb2_path, "%s/cb2.safetensors", tmpdir);
    assert_int_equal(scdb_codebook_save(cb, cb_path), SCDB_OK);
    assert_int_equal(scdb_pair_save(p, pair_path), SCDB_OK);
    f.r_k = 3;
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb2), SCDB_OK);
    assert_memory_not_equal(&scdb_codebook_get_info(cb)->id, &scdb_codebook_get_info(cb2)->id, 16);
    assert_int_equal(scdb_codebook_save(cb2, cb2_path), SCDB_OK);

    /* round trip: loaded artifacts encode / decode exactly like in memory */
    scdb_codebook *lcb = NULL;
    scdb_pair *lp = NULL;
    char err[256];
    assert_int_equal(scdb_codebook_load(cb_path, &lcb, err, sizeof err), SCDB_OK);
    assert_memory_equal(&scdb_codebook_get_info(lcb)->id, &scdb_codebook_get_info(cb)->id, 16);
    assert_int_equal(scdb_pair_load(pair_path, lcb, &lp, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_codebook_check_producer(lcb, prod, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_check_models(lp, prod, cons, err, sizeof err), SCDB_OK);
    int n = 24;
    int32_t tok[24], pos[24];
    for (int i = 0; i < n; i++) { tok[i] = text[500 + i]; pos[i] = i; }
    uint16_t c1[24 * 9], c2[24 * 9];
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, n, c1), SCDB_OK);
    assert_int_equal(scdb_codec_encode_tokens(lcb, prod, tok, pos, n, c2), SCDB_OK);
    assert_memory_equal(c1, c2, sizeof c1);
    scdb_kv_cache *a, *b;
    assert_int_equal(scdb_model_cache_new(cons, n, &a), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, n, &b), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, c1, n, pos, tok, -1, a, 0), SCDB_OK);
    assert_int_equal(scdb_pair_decode(lp, lcb, c1, n, pos, tok, -1, b, 0), SCDB_OK);
    assert_memory_equal(a->k, b->k, (size_t)2 * n * 8 * sizeof(float));
    assert_memory_equal(a->v, b->v, (size_t)2 * n * 8 * sizeof(float));
    /* decode refuses another codebook */
    assert_int_equal(scdb_pair_decode(lp, cb2, c1, n, pos, tok, -1, b, 0), SCDB_EMISMATCH);
    scdb_kv_cache_free(&a);
    scdb_kv_cache_free(&b);
    scdb_pair_free(&lp);
    scdb_codebook_free(&lcb);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_codebook_free(&cb2);
}

static void copy_prefix(const char *src, const char *dst, long keep)
{
    char *buf;
    size_t len;
    assert_int_equal(scdb_read_file(src, 1 << 26, &buf, &len), SCDB_OK);
    if (keep < 0) keep = (long)len + keep;
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    fwrite(buf, 1, (size_t)keep, f);
    fclose(f);
    free(buf);
}

static void flip_byte(const char *src, const char *dst, long off_from_end)
{
    char *buf;
    size_t len;
    assert_int_equal(scdb_read_file(src, 1 << 26, &buf, &len), SCDB_OK);
    buf[len - (size_t)off_from_end] ^= 0x40;
    FILE *f = fopen(dst, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
}

/* Rewrite a file with one tensor reshaped (same bytes), re-signing its
 * id/checksum so that the shape check itself is what fails. */
static void reshape_tensor(const char *src, const char *dst, const char *name, const char *sign_key)
{
    scdb_st_file *f;
    cx_bundle b;
    assert_int_equal(scdb_st_open(src, &f, NULL, 0), SCDB_OK);
    assert_int_equal(cx_bundle_from_file(f, &b), SCDB_OK);
    int found = 0;
    for (int i = 0; i < b.nt; i++)
        if (!strcmp(b.t[i].name, name)) {
            int64_t n = b.t[i].shape[0] * (b.t[i].ndim > 1 ? b.t[i].shape[1] : 1);
            b.t[i].ndim = 2;
            b.t[i].shape[0] = 1;
            b.t[i].shape[1] = n;
            found = 1;
        }
    assert_true(found);
    scdb_codec_id id;
    char hex[33];
    cx_bundle_hash(&b, sign_key, &id);
    scdb_codec_id_hex(&id, hex);
    assert_int_equal(cx_bundle_meta(&b, sign_key, "%s", hex), SCDB_OK);
    assert_int_equal(cx_bundle_write(&b, dst), SCDB_OK);
    cx_bundle_free(&b);
    scdb_st_close(&f);
}

static void test_files_and_refusals(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    write_artifacts(c);
    scdb_calib_free(&c);

    scdb_codebook *cb = NULL, *cb2 = NULL, *bad = NULL;
    scdb_pair *p = NULL;
    char err[256], path[700];
    assert_int_equal(scdb_codebook_load(cb_path, &cb, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_codebook_load(cb2_path, &cb2, err, sizeof err), SCDB_OK);

    /* a pair for another codebook */
    err[0] = 0;
    assert_int_equal(scdb_pair_load(pair_path, cb2, &p, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, "codebook"));
    assert_null(p);
    /* other architecture / other weights */
    assert_int_equal(scdb_pair_load(pair_path, cb, &p, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_check_models(p, prod, other, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(scdb_pair_check_models(p, other, NULL, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(scdb_pair_check_models(p, cons, cons, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(scdb_pair_check_models(p, prod, prod, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(scdb_codebook_check_producer(cb, other, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(scdb_codebook_check_producer(cb, cons, err, sizeof err), SCDB_EMISMATCH);
    scdb_pair_free(&p);

    /* missing, truncated, garbage, corrupt */
    assert_int_equal(scdb_codebook_load("/nonexistent/cb.safetensors", &bad, NULL, 0), SCDB_ENOTFOUND);
    snprintf(path, sizeof path, "%s/trunc_hdr", tmpdir);
    copy_prefix(cb_path, path, 50);
    assert_int_equal(scdb_codebook_load(path, &bad, NULL, 0), SCDB_ETRUNC);
    copy_prefix(pair_path, path, 5);
    assert_int_equal(scdb_pair_load(path, cb, &p, NULL, 0), SCDB_ETRUNC);
    snprintf(path, sizeof path, "%s/trunc_data", tmpdir);
    copy_prefix(cb_path, path, -7);
    assert_int_equal(scdb_codebook_load(path, &bad, err, sizeof err), SCDB_ETRUNC);
    copy_prefix(pair_path, path, -7);
    assert_int_equal(scdb_pair_load(path, cb, &p, err, sizeof err), SCDB_ETRUNC);
    snprintf(path, sizeof path, "%s/garbage", tmpdir);
    FILE *g = fopen(path, "wb");
    uint64_t hl = 40;
    fwrite(&hl, 8, 1, g);
    fputs("{\"this is\": not json at all ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", g);
    fclose(g);
    assert_int_equal(scdb_codebook_load(path, &bad, NULL, 0), SCDB_EFORMAT);
    assert_int_equal(scdb_pair_load(path, cb, &p, NULL, 0), SCDB_EFORMAT);
    snprintf(path, sizeof path, "%s/flipped", tmpdir);
    flip_byte(cb_path, path, 3);
    assert_int_equal(scdb_codebook_load(path, &bad, err, sizeof err), SCDB_ECHECKSUM);
    flip_byte(pair_path, path, 3);
    assert_int_equal(scdb_pair_load(path, cb, &p, err, sizeof err), SCDB_ECHECKSUM);
    /* the wrong kind of file */
    assert_int_equal(scdb_pair_load(cb_path, cb, &p, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_codebook_load(pair_path, &bad, err, sizeof err), SCDB_EFORMAT);
    /* wrong shapes (correctly signed) */
    snprintf(path, sizeof path, "%s/reshaped", tmpdir);
    reshape_tensor(cb_path, path, "layers.1.h.enc", "id");
    err[0] = 0;
    assert_int_equal(scdb_codebook_load(path, &bad, err, sizeof err), SCDB_ESHAPE);
    assert_non_null(strstr(err, "layers.1.h.enc"));
    reshape_tensor(pair_path, path, "layers.0.dec_k", "checksum");
    assert_int_equal(scdb_pair_load(path, cb, &p, err, sizeof err), SCDB_ESHAPE);
    assert_non_null(strstr(err, "layers.0.dec_k"));
    reshape_tensor(pair_path, path, "layers.1.align.w2", "checksum");
    assert_int_equal(scdb_pair_load(path, cb, &p, err, sizeof err), SCDB_ESHAPE);
    assert_null(bad);
    assert_null(p);
    scdb_codebook_free(&cb);
    scdb_codebook_free(&cb2);
}

/* The shipped artifacts: every data/pairs/<p>__<c>.safetensors loads with
 * its codebook data/codebooks/<p>.safetensors and validates against
 * data/models/<p> and data/models/<c> (or data/adapters/<c>); a short
 * prefix decodes.  <p>__fleet, an adapter fleet's shared part, loads as
 * one, for the codebook's producer. */
static void test_shipped_pairs(void **state)
{
    (void)state;
    DIR *dir = opendir(SCDB_DATA_DIR "/pairs");
    int checked = 0;
    if (!dir) { skip(); return; }
    struct dirent *e;
    while ((e = readdir(dir))) {
        char prodn[128], consn[128], path[1024];
        const char *sep = strstr(e->d_name, "__");
        const char *ext = strstr(e->d_name, ".safetensors");
        if (!sep || !ext || sep > ext) continue;
        snprintf(prodn, sizeof prodn, "%.*s", (int)(sep - e->d_name), e->d_name);
        snprintf(consn, sizeof consn, "%.*s", (int)(ext - sep - 2), sep + 2);
        scdb_codebook *cb = NULL;
        scdb_pair *p = NULL;
        scdb_model *pm = NULL, *cm = NULL;
        char err[512] = "";
        snprintf(path, sizeof path, SCDB_DATA_DIR "/codebooks/%s.safetensors", prodn);
        scdb_err rc = scdb_codebook_load(path, &cb, err, sizeof err);
        if (rc) fprintf(stderr, "%s: %s\n", path, err);
        assert_int_equal(rc, SCDB_OK);
        snprintf(path, sizeof path, SCDB_DATA_DIR "/pairs/%s", e->d_name);
        if (!strcmp(consn, SCDB_PAIR_SHARED_STEM)) {
            /* a fleet's shared part: of the codebook's producer, loaded as such */
            rc = scdb_pair_load_shared(path, cb, &p, err, sizeof err);
            if (rc) fprintf(stderr, "%s: %s\n", path, err);
            assert_int_equal(rc, SCDB_OK);
            assert_string_equal(scdb_pair_get_info(p)->base_fp, scdb_codebook_get_info(cb)->producer_fp);
            scdb_pair_free(&p);
            scdb_codebook_free(&cb);
            continue;
        }
        rc = scdb_pair_load(path, cb, &p, err, sizeof err);
        if (rc) fprintf(stderr, "%s: %s\n", path, err);
        assert_int_equal(rc, SCDB_OK);
        snprintf(path, sizeof path, SCDB_DATA_DIR "/models/%s", prodn);
        assert_int_equal(scdb_model_load(path, &pm, err, sizeof err), SCDB_OK);
        snprintf(path, sizeof path, SCDB_DATA_DIR "/models/%s/config.json", consn);
        {   /* a consumer is a model of the family or an adapter of the fleet */
            struct stat st;
            int model = stat(path, &st) == 0;
            snprintf(path, sizeof path, SCDB_DATA_DIR "/%s/%s", model ? "models" : "adapters", consn);
        }
        rc = scdb_model_load(path, &cm, err, sizeof err);
        if (rc) fprintf(stderr, "%s: %s\n", path, err);
        assert_int_equal(rc, SCDB_OK);
        rc = scdb_codebook_check_producer(cb, pm, err, sizeof err);
        if (rc) fprintf(stderr, "%s\n", err);
        assert_int_equal(rc, SCDB_OK);
        rc = scdb_pair_check_models(p, pm, cm, err, sizeof err);
        if (rc) fprintf(stderr, "%s\n", err);
        assert_int_equal(rc, SCDB_OK);
        int n = 64;
        int32_t tok[64], pos[64];
        for (int i = 0; i < n; i++) { tok[i] = "The quick brown fox jumps over the lazy dog. "[i % 45]; pos[i] = i; }
        uint16_t *codes = malloc((size_t)n * scdb_codebook_token_bytes(cb));
        assert_int_equal(scdb_codec_encode_tokens(cb, pm, tok, pos, n, codes), SCDB_OK);
        scdb_kv_cache *cache;
        assert_int_equal(scdb_model_cache_new(cm, n + 1, &cache), SCDB_OK);
        assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, -1, cache, 0), SCDB_OK);
        float logits[256];
        int32_t next = 'x';
        assert_int_equal(scdb_model_forward(cm, &next, NULL, 1, cache, logits, NULL), SCDB_OK);
        for (int v = 0; v < 256; v++) assert_true(isfinite(logits[v]));
        free(codes);
        scdb_kv_cache_free(&cache);
        scdb_model_free(&pm);
        scdb_model_free(&cm);
        scdb_pair_free(&p);
        scdb_codebook_free(&cb);
        checked++;
    }
    closedir(dir);
    if (!checked) skip();
}

/* ------------------------------------------------------------ late-added pairs */

static void read_all(const char *path, char **buf, size_t *len)
{
    assert_int_equal(scdb_read_file(path, 1 << 26, buf, len), SCDB_OK);
}

/* Rewrite a safetensors file with metadata key `key` set to `val` (NULL:
 * removed), re-signed under `sig` ("id" for a codebook, plain hash; NULL:
 * not re-signed). */
static void edit_meta_sig(const char *src, const char *dst, const char *key, const char *val,
                          const char *sig)
{
    scdb_st_file *f;
    cx_bundle b;
    assert_int_equal(scdb_st_open(src, &f, NULL, 0), SCDB_OK);
    assert_int_equal(cx_bundle_from_file(f, &b), SCDB_OK);
    if (val) {
        assert_int_equal(cx_bundle_meta(&b, key, "%s", val), SCDB_OK);
    } else {
        for (int i = 0; i < b.nm; i++)
            if (!strcmp(b.m[i].key, key)) {
                free(b.m[i].val);
                b.m[i] = b.m[--b.nm];
                break;
            }
    }
    if (sig) {
        scdb_codec_id id;
        char hex[33];
        cx_bundle_hash(&b, sig, &id);
        scdb_codec_id_hex(&id, hex);
        assert_int_equal(cx_bundle_meta(&b, sig, "%s", hex), SCDB_OK);
    }
    assert_int_equal(cx_bundle_write(&b, dst), SCDB_OK);
    cx_bundle_free(&b);
    scdb_st_close(&f);
}

/* Rewrite a pair file with metadata key `key` set to `val` (NULL: removed),
 * re-signed so that the metadata itself is what the loader judges. */
static void edit_meta(const char *src, const char *dst, const char *key, const char *val)
{
    edit_meta_sig(src, dst, key, val, "checksum");
}

/* A consumer added later: a pair fitted in a new session against the
 * codebook file, which keeps its bytes and id; the pair records late_added,
 * chooses its patch layers among the codebook's candidates, and decodes
 * closer to the consumer's own KV than raw reuse of the producer's, and
 * (K and V together) than the pair fitted with the codebook for another
 * consumer. */
static void test_late_added(void **state)
{
    (void)state;
    char path[700], lpath[700], err[512] = "";
    char *before, *after;
    size_t blen, alen;
    scdb_codebook *cb = NULL, *frozen = NULL;
    scdb_pair *joint = NULL, *lp = NULL, *back = NULL;
    scdb_calib *c = session(1), *c2 = NULL;
    int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 8, .r_v = 8, .r_h = 8, .n_candidates = 1, .candidates = cand};
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 60, .batch = 32};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &joint), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(joint)->late_added, 0);      /* fitted with its codebook */
    snprintf(path, sizeof path, "%s/frozen.safetensors", tmpdir);
    assert_int_equal(scdb_codebook_save(cb, path), SCDB_OK);
    read_all(path, &before, &blen);
    scdb_calib_free(&c);

    /* later, another process: the codebook file, a session without it */
    assert_int_equal(scdb_codebook_load(path, &frozen, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_codebook_check_producer(frozen, prod, err, sizeof err), SCDB_OK);
    scdb_calib_opts o = small_opts();
    const scdb_model *cs[1] = {late};
    int added = 0;
    assert_int_equal(scdb_calib_new(prod, cs, 1, &o, &c2), SCDB_OK);
    assert_int_equal(scdb_calib_add_text(c2, text, text_len / 2, 200, &added), SCDB_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(scdb_calib_add_eval(c2, 0, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
    assert_int_equal(scdb_calib_fit_pair(c2, frozen, 0, &pf, &lp), SCDB_OK);
    const scdb_pair_info *li = scdb_pair_get_info(lp);
    assert_int_equal(li->late_added, 1);
    assert_string_equal(li->consumer, "late");
    assert_memory_equal(&li->codebook_id, &scdb_codebook_get_info(cb)->id, 16);
    assert_int_equal(li->n_aligners, 1);
    assert_int_equal(li->patch_order[0], 1);                         /* the codebook's candidate */
    {   /* its consumer fingerprint is the tensor one */
        char fp[33];
        snprintf(lpath, sizeof lpath, "%s/models/late", tmpdir);
        assert_int_equal(scdb_weights_fp(lpath, fp, NULL, 0), SCDB_OK);
        assert_string_equal(li->consumer_fp, fp);
    }
    assert_int_equal(scdb_pair_check_models(lp, prod, late, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_check_models(lp, prod, cons, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, li->consumer_fp));                   /* both named */

    /* the codebook: same bytes, same id */
    read_all(path, &after, &alen);
    assert_int_equal(alen, blen);
    assert_memory_equal(before, after, blen);
    free(after);

    /* saved and loaded: still late-added, decodes as in memory */
    snprintf(lpath, sizeof lpath, "%s/late_pair.safetensors", tmpdir);
    assert_int_equal(scdb_pair_save(lp, lpath), SCDB_OK);
    assert_int_equal(scdb_pair_load(lpath, frozen, &back, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(back)->late_added, 1);
    enum { N = 40 };
    int32_t tok[N], pos[N];
    uint16_t codes[N * 24];
    for (int i = 0; i < N; i++) { tok[i] = text[text_len / 2 + 300 + (size_t)i]; pos[i] = i; }
    assert_int_equal(scdb_codec_encode_tokens(frozen, prod, tok, pos, N, codes), SCDB_OK);
    scdb_kv_cache *a, *b, *own = prefill(late, tok, N), *raw = prefill(prod, tok, N), *other_pair;
    assert_int_equal(scdb_model_cache_new(late, N, &a), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(late, N, &b), SCDB_OK);
    assert_int_equal(scdb_pair_decode(lp, frozen, codes, N, pos, tok, -1, a, 0), SCDB_OK);
    assert_int_equal(scdb_pair_decode(back, frozen, codes, N, pos, tok, -1, b, 0), SCDB_OK);
    assert_memory_equal(a->k, b->k, sizeof(float) * 2 * N * 8);
    assert_memory_equal(a->v, b->v, sizeof(float) * 2 * N * 8);
    /* the pair the codebook was fitted with, for another consumer */
    assert_int_equal(scdb_model_cache_new(late, N, &other_pair), SCDB_OK);
    assert_int_equal(scdb_pair_decode(joint, cb, codes, N, pos, tok, -1, other_pair, 0), SCDB_OK);
    double ek, ev, rk, rv, ok, ov;
    kv_rel_err(a, own, N, &ek, &ev);
    kv_rel_err(raw, own, N, &rk, &rv);
    kv_rel_err(other_pair, own, N, &ok, &ov);
    print_message("late-added pair: K/V error vs own prefill %.4f / %.4f; raw reuse %.4f / %.4f; "
                  "the other consumer's pair %.4f / %.4f\n", ek, ev, rk, rv, ok, ov);
    assert_true(ek < rk);
    assert_true(ev < rv);
    assert_true(ek + ev < ok + ov);
    scdb_kv_cache_free(&other_pair);
    scdb_kv_cache_free(&a);
    scdb_kv_cache_free(&b);
    scdb_kv_cache_free(&own);
    scdb_kv_cache_free(&raw);

    /* late_added in files: absent reads as 0 (pairs written before it);
     * anything but 0/1 is refused; a fingerprint that is not one too */
    char ed[700];
    scdb_pair *q = NULL;
    snprintf(ed, sizeof ed, "%s/edited.safetensors", tmpdir);
    edit_meta(lpath, ed, "late_added", NULL);
    assert_int_equal(scdb_pair_load(ed, frozen, &q, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(q)->late_added, 0);
    scdb_pair_free(&q);
    edit_meta(lpath, ed, "late_added", "yes");
    assert_int_equal(scdb_pair_load(ed, frozen, &q, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "late_added"));
    edit_meta(lpath, ed, "late_added", "2");
    assert_int_equal(scdb_pair_load(ed, frozen, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(lpath, ed, "consumer_fp", "not-a-fingerprint");
    assert_int_equal(scdb_pair_load(ed, frozen, &q, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "consumer_fp"));
    edit_meta(lpath, ed, "consumer_fp", "0123456789ABCDEF0123456789abcdef");
    assert_int_equal(scdb_pair_load(ed, frozen, &q, err, sizeof err), SCDB_EFORMAT);
    assert_null(q);

    free(before);
    scdb_pair_free(&back);
    scdb_pair_free(&lp);
    scdb_pair_free(&joint);
    scdb_calib_free(&c2);
    scdb_codebook_free(&frozen);
    scdb_codebook_free(&cb);
}

/* A fleet against a frozen codebook in one session: the consumers take the
 * session's slot in turn (scdb_calib_swap_consumer), the producer's states
 * computed once (its passes = the windows, not windows x consumers), and
 * each pair decodes as the pair of a session with that consumer alone. */
static void test_fleet_swap(void **state)
{
    (void)state;
    scdb_codebook *cb = NULL;
    scdb_calib *c = session(1), *f = NULL, *one = NULL;
    int cand[1] = {1}, added = 0;
    scdb_cb_fit cf = {.r_k = 8, .r_v = 8, .r_h = 8, .n_candidates = 1, .candidates = cand};
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 40, .batch = 32, .all_layers = 1};
    assert_int_equal(scdb_calib_fit_codebook(c, &cf, &cb), SCDB_OK);
    scdb_calib_free(&c);

    scdb_calib_opts o = small_opts();
    o.samples_only = 1;
    const scdb_model *fleet[2] = {late, cons};
    assert_int_equal(scdb_calib_new(prod, fleet, 1, &o, &f), SCDB_OK);
    assert_int_equal(scdb_calib_add_text(f, text, text_len / 2, 200, &added), SCDB_OK);
    int wins = scdb_calib_windows(f);
    assert_int_equal(scdb_calib_producer_passes(f), wins);
    /* bad swaps, each refused without touching the session */
    assert_int_equal(scdb_calib_swap_consumer(NULL, 0, cons), SCDB_EINVAL);
    assert_int_equal(scdb_calib_swap_consumer(f, 1, cons), SCDB_EINVAL);
    assert_int_equal(scdb_calib_swap_consumer(f, -1, cons), SCDB_EINVAL);
    assert_int_equal(scdb_calib_swap_consumer(f, 0, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_calib_swap_consumer(f, 0, other), SCDB_EMISMATCH);
    /* samples only: no codebook, no --own-layer pair */
    scdb_codebook *no = NULL;
    scdb_pair *np = NULL;
    scdb_pair_fit own = pf;
    own.all_layers = 0;
    assert_int_equal(scdb_calib_fit_codebook(f, &cf, &no), SCDB_EINVAL);
    assert_null(no);
    assert_int_equal(scdb_calib_fit_pair(f, cb, 0, &own, &np), SCDB_EINVAL);
    assert_null(np);

    enum { N = 40 };
    int32_t tok[N], pos[N];
    uint16_t codes[N * 24];
    for (int i = 0; i < N; i++) { tok[i] = text[text_len / 2 + 300 + (size_t)i]; pos[i] = i; }
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, N, codes), SCDB_OK);
    for (int k = 0; k < 2; k++) {
        scdb_pair *pf_fleet = NULL, *pf_one = NULL;
        if (k > 0) assert_int_equal(scdb_calib_swap_consumer(f, 0, fleet[k]), SCDB_OK);
        assert_int_equal(scdb_calib_producer_passes(f), wins);          /* not recomputed */
        for (int i = 0; i < 2; i++)
            assert_int_equal(scdb_calib_add_eval(f, 0, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
        assert_int_equal(scdb_calib_fit_pair(f, cb, 0, &pf, &pf_fleet), SCDB_OK);
        assert_string_equal(scdb_pair_get_info(pf_fleet)->consumer, scdb_model_cfg(fleet[k])->name);
        /* the same consumer alone, an ordinary session (moments kept) */
        scdb_calib_opts o1 = small_opts();
        assert_int_equal(scdb_calib_new(prod, &fleet[k], 1, &o1, &one), SCDB_OK);
        assert_int_equal(scdb_calib_add_text(one, text, text_len / 2, 200, &added), SCDB_OK);
        for (int i = 0; i < 2; i++)
            assert_int_equal(scdb_calib_add_eval(one, 0, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
        assert_int_equal(scdb_calib_fit_pair(one, cb, 0, &pf, &pf_one), SCDB_OK);
        const scdb_pair_info *a = scdb_pair_get_info(pf_fleet), *b = scdb_pair_get_info(pf_one);
        assert_int_equal(a->n_patch, b->n_patch);
        assert_int_equal(a->n_aligners, b->n_aligners);
        assert_memory_equal(a->patch_order, b->patch_order, sizeof(int) * (size_t)a->n_aligners);
        scdb_kv_cache *x, *y;
        assert_int_equal(scdb_model_cache_new(fleet[k], N, &x), SCDB_OK);
        assert_int_equal(scdb_model_cache_new(fleet[k], N, &y), SCDB_OK);
        assert_int_equal(scdb_pair_decode(pf_fleet, cb, codes, N, pos, tok, -1, x, 0), SCDB_OK);
        assert_int_equal(scdb_pair_decode(pf_one, cb, codes, N, pos, tok, -1, y, 0), SCDB_OK);
        double ek, ev;
        kv_rel_err(x, y, N, &ek, &ev);
        print_message("fleet pair '%s' vs alone: K/V relative difference %.2g / %.2g\n",
                      scdb_model_cfg(fleet[k])->name, ek, ev);
        assert_true(ek < 1e-5);
        assert_true(ev < 1e-5);
        scdb_kv_cache_free(&x);
        scdb_kv_cache_free(&y);
        scdb_pair_free(&pf_fleet);
        scdb_pair_free(&pf_one);
        scdb_calib_free(&one);
    }
    scdb_calib_free(&f);
    scdb_codebook_free(&cb);
}

/* Rewrite a file with one tensor renamed (to_name) or relabelled as dtype
 * (to_name NULL), re-signed under "checksum". */
static void relabel_tensor(const char *src, const char *dst, const char *name, const char *to_name,
                           scdb_dtype dt)
{
    scdb_st_file *f;
    cx_bundle b;
    assert_int_equal(scdb_st_open(src, &f, NULL, 0), SCDB_OK);
    assert_int_equal(cx_bundle_from_file(f, &b), SCDB_OK);
    int found = 0;
    for (int i = 0; i < b.nt; i++)
        if (!strcmp(b.t[i].name, name)) {
            if (to_name) snprintf(b.t[i].name, sizeof b.t[i].name, "%s", to_name);
            else b.t[i].dt = dt;
            found = 1;
        }
    assert_true(found);
    scdb_codec_id id;
    char hex[33];
    cx_bundle_hash(&b, "checksum", &id);
    scdb_codec_id_hex(&id, hex);
    assert_int_equal(cx_bundle_meta(&b, "checksum", "%s", hex), SCDB_OK);
    assert_int_equal(cx_bundle_write(&b, dst), SCDB_OK);
    cx_bundle_free(&b);
    scdb_st_close(&f);
}

static void check_pair_dev(const scdb_pair *p, const scdb_codebook *cb, int n_patch);

static long fsize(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

/* Adapter pairs (codec.h, "Adapter pairs"): a shared part fitted on two
 * adapters' mean states, then each adapter's lora pair.  A lora pair
 * round-trips through its file exactly, is smaller than the adapter's full
 * pair and decodes about as close to the adapter's own KV as the full pair
 * does; loading is refused when the base it references is not the
 * codebook's producer, when its shared part is missing, refitted or of
 * another base, and for truncated, mislabelled or wrong-shaped own tensors. */
static void test_lora_pairs(void **state)
{
    (void)state;
    char d[700], pdir[700], sp[800], lp[800], fp_path[800], ed[800], ed2[800], err[768] = "";
    scdb_model *ad[2] = {0};
    scdb_codebook *cb = NULL;
    scdb_calib *c = session(1), *f = NULL;
    int cand[1] = {1}, added = 0;
    scdb_cb_fit cf = {.r_k = 8, .r_v = 8, .r_h = 8, .n_candidates = 1, .candidates = cand, .token_layer0 = 1};
    assert_int_equal(scdb_calib_fit_codebook(c, &cf, &cb), SCDB_OK);
    scdb_calib_free(&c);
    /* two adapters of prod on k/v (and q/o for the second), found at ../../models/prod */
    snprintf(d, sizeof d, "%s/adapters", tmpdir);
    mkdir(d, 0755);
    for (int k = 0; k < 2; k++) {
        uint64_t rng = 900 + (uint64_t)k;
        tiny_adapter ta = {.base = "prod", .rng = &rng, .ff = 24, .scale = 0.3f,
                           .modules = k ? 0xfu : 0x6u,
                           .config = k ? "{\"target_modules\": [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]}"
                                       : "{\"target_modules\": [\"k_proj\", \"v_proj\"]}"};
        snprintf(d, sizeof d, "%s/adapters/ad%d", tmpdir, k);
        tiny_adapter_write(d, &ta);
        assert_int_equal(scdb_model_load(d, &ad[k], err, sizeof err), SCDB_OK);
    }
    scdb_calib_opts o = small_opts();
    o.samples_only = 1;
    assert_int_equal(scdb_calib_new(prod, (const scdb_model *const *)ad, 1, &o, &f), SCDB_OK);
    assert_int_equal(scdb_calib_add_text(f, text, text_len / 2, 200, &added), SCDB_OK);
    scdb_calib_fleet *fl = NULL;
    assert_int_equal(scdb_calib_fleet_new(f, &fl), SCDB_OK);
    assert_int_equal(scdb_calib_fleet_add(fl, f), SCDB_OK);
    assert_int_equal(scdb_calib_swap_consumer(f, 0, ad[1]), SCDB_OK);
    assert_int_equal(scdb_calib_fleet_add(fl, f), SCDB_OK);
    assert_int_equal(scdb_calib_fleet_size(fl), 2);
    assert_int_equal(scdb_calib_fleet_use(fl, f, 2), SCDB_EINVAL);
    scdb_pair *shared = NULL, *small = NULL, *full = NULL, *back = NULL, *q = NULL;
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 60, .batch = 32, .all_layers = 1};
    assert_int_equal(scdb_calib_fit_shared(f, cb, fl, &pf, &shared), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(shared)->kind, SCDB_PAIR_SHARED);
    snprintf(pdir, sizeof pdir, "%s/lora", tmpdir);
    mkdir(pdir, 0755);
    snprintf(sp, sizeof sp, "%s/prod__fleet.safetensors", pdir);
    assert_int_equal(scdb_pair_save(shared, sp), SCDB_OK);
    /* adapter 0 back in the slot: its lora pair and its full pair */
    assert_int_equal(scdb_calib_fleet_use(fl, f, 0), SCDB_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(scdb_calib_add_eval(f, 0, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
    scdb_lora_fit lf = {.dec_rank = 2, .align_rank = 2, .n_patch = 1};
    assert_int_equal(scdb_calib_fit_lora_pair(f, cb, shared, &lf, &small, err, sizeof err), SCDB_OK);
    const scdb_pair_info *si = scdb_pair_get_info(small);
    assert_int_equal(si->kind, SCDB_PAIR_LORA);
    assert_string_equal(si->consumer, "ad0");
    assert_string_equal(si->lora_targets, "k,v");
    assert_int_equal(si->lora_rank, 4);
    assert_string_equal(si->shared_id, scdb_pair_get_info(shared)->checksum);
    assert_int_equal(scdb_calib_fit_pair(f, cb, 0, &pf, &full), SCDB_OK);
    snprintf(lp, sizeof lp, "%s/prod__ad0.safetensors", pdir);
    snprintf(fp_path, sizeof fp_path, "%s/full__ad0.safetensors", pdir);
    assert_int_equal(scdb_pair_save(small, lp), SCDB_OK);
    assert_int_equal(scdb_pair_save(full, fp_path), SCDB_OK);
    print_message("lora pair %ld bytes, full pair %ld bytes (shared part %ld)\n", fsize(lp), fsize(fp_path),
                  fsize(sp));
    assert_true(fsize(lp) < fsize(fp_path));
    assert_int_equal(scdb_pair_load(lp, cb, &back, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_check_models(back, prod, ad[0], err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_check_models(back, prod, ad[1], err, sizeof err), SCDB_EMISMATCH);

    /* decode: file == memory exactly; lora about as close as full to the adapter's own KV */
    enum { N = 40 };
    int32_t tok[N], pos[N];
    uint16_t codes[N * 32];
    assert_true(scdb_codebook_get_info(cb)->code_dim <= 32);
    for (int i = 0; i < N; i++) { tok[i] = text[text_len / 2 + 400 + (size_t)i]; pos[i] = i; }
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, N, codes), SCDB_OK);
    scdb_kv_cache *own = prefill(ad[0], tok, N), *x, *y, *z;
    assert_int_equal(scdb_model_cache_new(ad[0], N, &x), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(ad[0], N, &y), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(ad[0], N, &z), SCDB_OK);
    for (int np = 0; np <= 1; np++) {
        assert_int_equal(scdb_pair_decode(small, cb, codes, N, pos, tok, np, x, 0), SCDB_OK);
        assert_int_equal(scdb_pair_decode(back, cb, codes, N, pos, tok, np, y, 0), SCDB_OK);
        assert_memory_equal(x->k, y->k, (size_t)2 * N * 8 * sizeof(float));
        assert_memory_equal(x->v, y->v, (size_t)2 * N * 8 * sizeof(float));
        assert_int_equal(scdb_pair_decode(full, cb, codes, N, pos, tok, np, z, 0), SCDB_OK);
        double sk, sv, fk, fv, rk, rv;
        kv_rel_err(x, own, N, &sk, &sv);
        kv_rel_err(z, own, N, &fk, &fv);
        /* the shared part alone (no corrections, the base's Wk/Wv) is further */
        scdb_pair *sh = NULL;
        assert_int_equal(cx_pair_clone(shared, &sh), SCDB_OK);
        assert_int_equal(scdb_pair_decode(sh, cb, codes, N, pos, tok, np, y, 0), SCDB_OK);
        kv_rel_err(y, own, N, &rk, &rv);
        scdb_pair_free(&sh);
        print_message("patch %d: K/V relative error vs own prefill: lora %.3g / %.3g, full %.3g / %.3g, "
                      "shared alone %.3g / %.3g\n", np, sk, sv, fk, fv, rk, rv);
        assert_true(sk + sv < 2.0 * (fk + fv) + 0.02);
        assert_true(sk + sv < rk + rv);
    }
    scdb_kv_cache_free(&own);
    scdb_kv_cache_free(&x);
    scdb_kv_cache_free(&y);
    scdb_kv_cache_free(&z);
    /* the device decode (CPU table) of the loaded lora pair: the CPU decode bit for bit */
    check_pair_dev(back, cb, -1);
    check_pair_dev(back, cb, 0);
    check_pair_dev(back, cb, 1);

    /* a lora pair decodes low-rank (its shared part's tensors + its own
     * corrections as products): equal, to f32 rounding, to the decode of its
     * materialised pair (every correction added into a copy of the shared
     * tensors in f32).  Per layer, max |low-rank - materialised| over K
     * (after RoPE) and V <= 1e-5 of max |materialised|; the shared part
     * alone is far outside that (the comparison sees the corrections). */
    {
        scdb_pair *m = NULL, *sh = NULL;
        assert_int_equal(cx_pair_materialise(back, &m), SCDB_OK);
        assert_null(m->shared);
        assert_non_null(back->shared);
        assert_null(back->L[1].dk);          /* no copy of the shared decoders */
        assert_int_equal(cx_pair_materialise(shared, &sh), SCDB_EINVAL);   /* not a lora pair */
        assert_int_equal(cx_pair_clone(shared, &sh), SCDB_OK);
        assert_int_equal(scdb_model_cache_new(ad[0], N, &x), SCDB_OK);
        assert_int_equal(scdb_model_cache_new(ad[0], N, &y), SCDB_OK);
        for (int np = -1; np <= 1; np++) {
            assert_int_equal(scdb_pair_decode(back, cb, codes, N, pos, tok, np, x, 0), SCDB_OK);
            assert_int_equal(scdb_pair_decode(m, cb, codes, N, pos, tok, np, y, 0), SCDB_OK);
            double e = kv_max_rel(x, y, N);
            assert_int_equal(scdb_pair_decode(sh, cb, codes, N, pos, tok, np, x, 0), SCDB_OK);
            double es = kv_max_rel(x, y, N);
            print_message("patch %d: low-rank vs materialised decode: max rel. difference %.2g (shared alone %.2g)\n",
                          np, e, es);
            assert_true(e <= 1e-5);
            assert_true(es > 1e-3);
        }
        scdb_kv_cache_free(&x);
        scdb_kv_cache_free(&y);
        scdb_pair_free(&m);
        scdb_pair_free(&sh);
    }

    /* the shared part is loaded once for every lora pair referencing it
     * (the process's cache) and freed with the last of them */
    {
        char lp1[800];
        scdb_pair *p1 = NULL, *a = NULL, *b = NULL;
        assert_int_equal(scdb_calib_fleet_use(fl, f, 1), SCDB_OK);
        for (int i = 0; i < 2; i++)
            assert_int_equal(scdb_calib_add_eval(f, 0, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
        assert_int_equal(scdb_calib_fit_lora_pair(f, cb, shared, &lf, &p1, err, sizeof err), SCDB_OK);
        assert_ptr_equal(p1->shared, shared);   /* fitted: a reference to the caller's */
        snprintf(lp1, sizeof lp1, "%s/prod__ad1.safetensors", pdir);
        assert_int_equal(scdb_pair_save(p1, lp1), SCDB_OK);
        scdb_pair_free(&p1);
        int n0 = cx_shared_cache_count();      /* back's shared part is one */
        assert_true(n0 >= 1);
        assert_int_equal(scdb_pair_load(lp1, cb, &a, err, sizeof err), SCDB_OK);
        assert_int_equal(scdb_pair_load(lp, cb, &b, err, sizeof err), SCDB_OK);
        assert_ptr_equal(a->shared, back->shared);
        assert_ptr_equal(b->shared, back->shared);
        assert_int_equal(cx_shared_cache_count(), n0);
        assert_int_equal(back->shared->refs, 3);
        assert_string_equal(scdb_pair_get_info(a)->consumer, "ad1");
        /* the last pair alone keeps it, and still decodes as the others did */
        assert_int_equal(scdb_model_cache_new(ad[0], N, &x), SCDB_OK);
        assert_int_equal(scdb_model_cache_new(ad[0], N, &y), SCDB_OK);
        assert_int_equal(scdb_pair_decode(b, cb, codes, N, pos, tok, -1, x, 0), SCDB_OK);
        scdb_pair_free(&a);
        scdb_pair_free(&back);
        assert_int_equal(b->shared->refs, 1);
        assert_int_equal(cx_shared_cache_count(), n0);
        assert_int_equal(scdb_pair_decode(b, cb, codes, N, pos, tok, -1, y, 0), SCDB_OK);
        assert_memory_equal(x->k, y->k, (size_t)2 * N * 8 * sizeof(float));
        assert_memory_equal(x->v, y->v, (size_t)2 * N * 8 * sizeof(float));
        scdb_pair_free(&b);
        assert_int_equal(cx_shared_cache_count(), n0 - 1);
        /* loaded again: a fresh copy in the cache */
        assert_int_equal(scdb_pair_load(lp, cb, &back, err, sizeof err), SCDB_OK);
        assert_int_equal(cx_shared_cache_count(), n0);
        assert_int_equal(back->shared->refs, 1);
        scdb_kv_cache_free(&x);
        scdb_kv_cache_free(&y);
        assert_int_equal(scdb_calib_fleet_use(fl, f, 0), SCDB_OK);
    }

    /* the reference refusal: a base that is not the codebook's producer */
    char ofp[SCDB_CODEC_FP_LEN];
    assert_int_equal(cx_model_fp(other, ofp, NULL, 0), SCDB_OK);
    snprintf(ed, sizeof ed, "%s/prod__ed.safetensors", pdir);
    edit_meta(lp, ed, "base_fp", ofp);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EMISMATCH);
    print_message("%s\n", err);
    assert_non_null(strstr(err, ofp));
    assert_non_null(strstr(err, scdb_codebook_get_info(cb)->producer_fp));
    /* the shared part: loaded only through its adapters / as a shared part */
    assert_int_equal(scdb_pair_load(sp, cb, &q, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_pair_load_shared(lp, cb, &q, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_pair_load_shared(sp, cb, &q, err, sizeof err), SCDB_OK);
    scdb_pair_free(&q);
    /* ... refitted (another checksum), of another base, missing */
    char sp_keep[820];
    snprintf(sp_keep, sizeof sp_keep, "%s.keep", sp);
    assert_int_equal(rename(sp, sp_keep), 0);
    edit_meta(sp_keep, sp, "notes", "refitted");
    assert_int_equal(scdb_pair_load(lp, cb, &q, err, sizeof err), SCDB_EMISMATCH);
    print_message("%s\n", err);
    assert_non_null(strstr(err, si->shared_id));
    edit_meta(sp_keep, sp, "base_fp", ofp);
    edit_meta(lp, ed, "shared_id", scdb_pair_get_info(shared)->checksum);   /* re-signed: same refs */
    {
        scdb_pair *sx = NULL;
        assert_int_equal(scdb_pair_load_shared(sp, cb, &sx, err, sizeof err), SCDB_OK);
        edit_meta(lp, ed, "shared_id", scdb_pair_get_info(sx)->checksum);
        scdb_pair_free(&sx);
    }
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EMISMATCH);
    print_message("%s\n", err);
    assert_non_null(strstr(err, ofp));
    assert_int_equal(unlink(sp), 0);
    assert_int_equal(scdb_pair_load(lp, cb, &q, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, sp));
    assert_int_equal(rename(sp_keep, sp), 0);
    assert_int_equal(scdb_pair_load(lp, cb, &q, err, sizeof err), SCDB_OK);
    scdb_pair_free(&q);
    edit_meta(lp, ed, "shared", "../prod__fleet");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(lp, ed, "lora_targets", "q");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);

    /* its own tensors: truncated, wrong-shaped, mislabelled, missing, extra */
    snprintf(ed2, sizeof ed2, "%s/prod__ed2.safetensors", pdir);
    copy_prefix(lp, ed2, -100);
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ETRUNC);
    reshape_tensor(lp, ed2, "layers.1.dec_k.u", "checksum");
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ESHAPE);
    reshape_tensor(lp, ed2, "layers.1.align.v", "checksum");
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ESHAPE);
    reshape_tensor(lp, ed2, "layers.0.lora_k.b", "checksum");
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ESHAPE);
    relabel_tensor(lp, ed2, "layers.1.lora_v.a", NULL, SCDB_BF16);
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_EDTYPE);
    relabel_tensor(lp, ed2, "layers.1.dec_v.v", "layers.1.dec_v.w", SCDB_F16);
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ENOTFOUND);
    edit_meta(lp, ed2, "dec_rank", "3");     /* the metadata says rank 3, the tensors hold 2 */
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ESHAPE);
    edit_meta(lp, ed2, "align_rank", "0");   /* no aligner corrections: two tensors too many */
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_EFORMAT);
    flip_byte(lp, ed2, 10);
    assert_int_equal(scdb_pair_load(ed2, cb, &q, err, sizeof err), SCDB_ECHECKSUM);
    assert_null(q);

    /* not an adapter: refused by name */
    assert_int_equal(scdb_calib_swap_consumer(f, 0, cons), SCDB_OK);
    assert_int_equal(scdb_calib_fit_lora_pair(f, cb, shared, &lf, &q, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "not a LoRA adapter"));
    assert_null(q);

    scdb_pair_free(&back);
    scdb_pair_free(&small);
    scdb_pair_free(&full);
    scdb_pair_free(&shared);
    scdb_calib_fleet_free(&fl);
    scdb_calib_free(&f);
    for (int k = 0; k < 2; k++) scdb_model_free(&ad[k]);
    scdb_codebook_free(&cb);
}

/* Pairs written before the tensor fingerprint record the 16-digit hash of
 * model.safetensors: checked as such, and re-stamped (after that check)
 * with the tensor fingerprint, decoders untouched. */
static void test_legacy_fingerprint(void **state)
{
    (void)state;
    char dir[600], legacy[700], out[700], err[512] = "", hex16[17], fp[33];
    char *buf;
    size_t len;
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL, *r = NULL;
    if (!pair_path[0]) skip();                 /* test_files_and_refusals wrote it */
    assert_int_equal(scdb_codebook_load(cb_path, &cb, err, sizeof err), SCDB_OK);
    snprintf(dir, sizeof dir, "%s/models/cons/model.safetensors", tmpdir);
    read_all(dir, &buf, &len);
    snprintf(hex16, sizeof hex16, "%016llx", (unsigned long long)XXH3_64bits(buf, len));
    free(buf);
    snprintf(legacy, sizeof legacy, "%s/legacy.safetensors", tmpdir);
    edit_meta(pair_path, legacy, "consumer_fp", hex16);
    edit_meta(legacy, legacy, "late_added", NULL);
    assert_int_equal(scdb_pair_load(legacy, cb, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_pair_get_info(p)->consumer_fp, hex16);
    assert_int_equal(scdb_pair_check_models(p, prod, cons, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_check_models(p, prod, late, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, hex16));
    scdb_pair_free(&p);

    /* re-stamp: refused for other weights or another consumer */
    snprintf(out, sizeof out, "%s/restamped.safetensors", tmpdir);
    assert_int_equal(scdb_pair_restamp(legacy, cb, late, out, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(scdb_pair_restamp(legacy, cb, cons, out, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_load(out, cb, &r, err, sizeof err), SCDB_OK);
    snprintf(dir, sizeof dir, "%s/models/cons", tmpdir);
    assert_int_equal(scdb_weights_fp(dir, fp, NULL, 0), SCDB_OK);
    assert_string_equal(scdb_pair_get_info(r)->consumer_fp, fp);
    assert_int_equal(scdb_pair_check_models(r, prod, cons, err, sizeof err), SCDB_OK);
    /* tensors byte for byte */
    scdb_st_file *fa, *fb;
    assert_int_equal(scdb_st_open(legacy, &fa, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_open(out, &fb, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(fa), scdb_st_count(fb));
    for (int i = 0; i < scdb_st_count(fa); i++) {
        const scdb_st_tensor *ta = scdb_st_at(fa, i), *tb = scdb_st_find(fb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->dtype, tb->dtype);
        assert_int_equal(ta->nbytes, tb->nbytes);
        assert_memory_equal(ta->data, tb->data, ta->nbytes);
    }
    scdb_st_close(&fa);
    scdb_st_close(&fb);
    /* a tensor fingerprint already: nothing to re-stamp */
    assert_int_equal(scdb_pair_restamp(out, cb, cons, out, err, sizeof err), SCDB_EINVAL);
    assert_int_equal(scdb_pair_restamp("/nonexistent.safetensors", cb, cons, out, err, sizeof err),
                     SCDB_ENOTFOUND);
    scdb_pair_free(&r);
    scdb_codebook_free(&cb);
}

/* A codebook written before the tensor fingerprint (16-digit producer_fp)
 * is re-stamped with its producer's tensor fingerprint keeping its id, so
 * its namespace and stored blocks (issue 25 item 1): only for the weights
 * the 16 digits name; pairs written against it still load, and re-stamp to
 * the new producer_fp; the id still guards the file. */
static void test_codebook_restamp(void **state)
{
    (void)state;
    char dir[600], lcb[700], lpair[700], out[700], opair[700], bad[700], err[512] = "", hex16[17];
    char fp[33], legacy_id[33];
    char *buf;
    size_t len;
    scdb_codebook *cb = NULL, *r = NULL, *x = NULL;
    scdb_pair *p = NULL;
    if (!pair_path[0]) skip();                 /* test_files_and_refusals wrote it */
    snprintf(dir, sizeof dir, "%s/models/prod/model.safetensors", tmpdir);
    read_all(dir, &buf, &len);
    snprintf(hex16, sizeof hex16, "%016llx", (unsigned long long)XXH3_64bits(buf, len));
    free(buf);
    snprintf(dir, sizeof dir, "%s/models/prod", tmpdir);
    assert_int_equal(scdb_weights_fp(dir, fp, NULL, 0), SCDB_OK);

    /* the legacy codebook and a pair written against it */
    snprintf(lcb, sizeof lcb, "%s/legacy_cb.safetensors", tmpdir);
    edit_meta_sig(cb_path, lcb, "producer_fp", hex16, "id");
    assert_int_equal(scdb_codebook_load(lcb, &cb, err, sizeof err), SCDB_OK);
    snprintf(legacy_id, sizeof legacy_id, "%s", scdb_codebook_get_info(cb)->id_hex);
    assert_int_equal(scdb_codebook_check_producer(cb, prod, err, sizeof err), SCDB_OK);
    snprintf(lpair, sizeof lpair, "%s/legacy_cb_pair.safetensors", tmpdir);
    edit_meta_sig(pair_path, lpair, "producer_fp", hex16, NULL);
    edit_meta_sig(lpair, lpair, "codebook_id", legacy_id, "checksum");
    assert_int_equal(scdb_pair_load(lpair, cb, &p, err, sizeof err), SCDB_OK);
    scdb_pair_free(&p);

    /* refused for other weights (same architecture) and another architecture */
    snprintf(out, sizeof out, "%s/restamped_cb.safetensors", tmpdir);
    assert_int_equal(scdb_codebook_restamp(lcb, cons, out, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, hex16));
    assert_int_equal(scdb_codebook_restamp(lcb, other, out, err, sizeof err), SCDB_EMISMATCH);
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(scdb_codebook_restamp(lcb, prod, out, err, sizeof err), SCDB_OK);

    /* same id, the tensor fingerprint, the old one kept for the id */
    assert_int_equal(scdb_codebook_load(out, &r, err, sizeof err), SCDB_OK);
    const scdb_codebook_info *ri = scdb_codebook_get_info(r);
    assert_string_equal(ri->id_hex, legacy_id);
    assert_string_equal(ri->producer_fp, fp);
    assert_string_equal(ri->id_producer_fp, hex16);
    assert_int_equal(scdb_codebook_check_producer(r, prod, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_codebook_check_producer(r, cons, err, sizeof err), SCDB_EMISMATCH);
    assert_non_null(strstr(err, fp));
    /* tensors byte for byte */
    scdb_st_file *fa, *fb;
    assert_int_equal(scdb_st_open(lcb, &fa, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_open(out, &fb, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(fa), scdb_st_count(fb));
    for (int i = 0; i < scdb_st_count(fa); i++) {
        const scdb_st_tensor *ta = scdb_st_at(fa, i), *tb = scdb_st_find(fb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        assert_memory_equal(ta->data, tb->data, ta->nbytes);
    }
    scdb_st_close(&fa);
    scdb_st_close(&fb);

    /* the old pair loads against it and re-stamps to its producer_fp */
    assert_int_equal(scdb_pair_load(lpair, r, &p, err, sizeof err), SCDB_OK);
    scdb_pair_free(&p);
    snprintf(opair, sizeof opair, "%s/restamped_cb_pair.safetensors", tmpdir);
    assert_int_equal(scdb_pair_restamp(lpair, r, cons, opair, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_load(opair, r, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_pair_get_info(p)->producer_fp, fp);
    assert_int_equal(scdb_pair_check_models(p, prod, cons, err, sizeof err), SCDB_OK);
    scdb_pair_free(&p);
    assert_int_equal(scdb_pair_restamp(opair, r, cons, opair, err, sizeof err), SCDB_EINVAL);

    /* nothing more to re-stamp; the id still guards the metadata */
    assert_int_equal(scdb_codebook_restamp(out, prod, out, err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "tensor fingerprint already"));
    snprintf(bad, sizeof bad, "%s/bad_cb.safetensors", tmpdir);
    edit_meta_sig(out, bad, "id_producer_fp", "0123456789abcdef", NULL);
    assert_int_equal(scdb_codebook_load(bad, &x, err, sizeof err), SCDB_ECHECKSUM);
    edit_meta_sig(out, bad, "producer_fp", "0123456789abcdef", NULL);
    assert_int_equal(scdb_codebook_load(bad, &x, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "id_producer_fp"));
    edit_meta_sig(out, bad, "id_producer_fp", fp, NULL);
    assert_int_equal(scdb_codebook_load(bad, &x, err, sizeof err), SCDB_EFORMAT);
    edit_meta_sig(out, bad, "id_producer_fp", NULL, NULL);
    assert_int_equal(scdb_codebook_load(bad, &x, err, sizeof err), SCDB_ECHECKSUM);
    assert_null(x);
    scdb_codebook_free(&r);
    scdb_codebook_free(&cb);
}

static int contains(const unsigned char *t, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(t + i, s, n)) return 1;
    return 0;
}

/* Where calibration text comes from: TRAINING.json's train_files (plain and
 * .gz), else the held-out halves. */
static void test_domain_text(void **state)
{
    (void)state;
    char path[700], cmd[1600];
    unsigned char *t = NULL;
    size_t len = 0;
    char desc[512];
    /* held-out: <family>/../heldout/<domain>.txt */
    snprintf(path, sizeof path, "%s/heldout", tmpdir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/heldout/english.txt", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("0123456789abcdefghij", f);   /* 20 bytes */
    fclose(f);
    assert_int_equal(scdb_codec_domain_text(prod, SCDB_TEXT_TRAIN, 1000, &t, &len, NULL, 0), SCDB_ENOTFOUND);
    assert_int_equal(scdb_codec_domain_text(prod, SCDB_TEXT_AUTO, 1000, &t, &len, desc, sizeof desc), SCDB_OK);
    assert_int_equal(len, 10);
    assert_memory_equal(t, "0123456789", 10);
    assert_non_null(strstr(desc, "first half"));
    free(t);
    assert_int_equal(scdb_codec_domain_text(prod, SCDB_TEXT_HELDOUT_SECOND, 1000, &t, &len, NULL, 0), SCDB_OK);
    assert_int_equal(len, 10);
    assert_memory_equal(t, "abcdefghij", 10);
    free(t);
    /* training files, one of them gzipped */
    snprintf(path, sizeof path, "%s/train1.txt", tmpdir);
    f = fopen(path, "w");
    fputs("first training file", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "printf 'second, gzipped' | gzip -c > '%s/train2.txt.gz'", tmpdir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/models/TRAINING.json", tmpdir);
    f = fopen(path, "w");
    fprintf(f, "{\"domains\": {\"english\": {\"train_files\": [\"%s/train1.txt\", \"%s/train2.txt.gz\", "
               "\"/nonexistent/file\"]}}}", tmpdir, tmpdir);
    fclose(f);
    assert_int_equal(scdb_codec_domain_text(prod, SCDB_TEXT_AUTO, 1000, &t, &len, desc, sizeof desc), SCDB_OK);
    assert_non_null(strstr(desc, "2 of the 3 training files"));
    assert_true(contains(t, len, "first training file"));
    assert_true(contains(t, len, "second, gzipped"));
    free(t);
    assert_int_equal(scdb_codec_domain_text(prod, SCDB_TEXT_TRAIN, 8, &t, &len, NULL, 0), SCDB_OK);
    assert_true(len <= 8);
    free(t);
    unlink(path);
}

/* Broad calibration text (scdb calibrate --domains): a TRAINING.json's
 * domain, files listed as held-out or as eviction-suite eval never read, the
 * same start for a longer read; the fleet's domains from the family's and the
 * adapters' TRAINING.json; garbage, truncated and wrong-shaped files refused. */
static void put_file(const char *path, const char *body)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(body, f);
    fclose(f);
}

static void test_training_text(void **state)
{
    (void)state;
    char root[600], path[800], body[4096], desc[512];
    unsigned char *t = NULL, *t2 = NULL;
    size_t len = 0, len2 = 0;
    scdb_text_domains td;
    snprintf(root, sizeof root, "%s/tt", tmpdir);
    mkdir(root, 0755);
    snprintf(path, sizeof path, "%s/fam", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/adapters", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/evict_suite", root);
    mkdir(path, 0755);
    const char *names[4] = {"a", "b", "held", "evalf"};
    for (int i = 0; i < 4; i++) {
        char content[200];
        snprintf(path, sizeof path, "%s/%s.txt", root, names[i]);
        snprintf(content, sizeof content, "<%s:%.*s>", names[i], 40,
                 "0123456789012345678901234567890123456789");
        put_file(path, content);
    }
    /* domain x lists a, held (another domain's held-out file), evalf (eval in
     * the suite) and b */
    snprintf(body, sizeof body,
             "{\"domains\": {\"x\": {\"train_files\": [\"%s/a.txt\", {\"path\": \"%s/held.txt\"}, "
             "\"%s/evalf.txt\", \"%s/b.txt\"]}, \"y\": {\"train_files\": [\"%s/b.txt\"], "
             "\"heldout_files\": [\"%s/held.txt\"]}}}", root, root, root, root, root, root);
    snprintf(path, sizeof path, "%s/fam/TRAINING.json", root);
    put_file(path, body);
    char suite[1024];
    snprintf(suite, sizeof suite, "{\"domains\": {\"x\": {\"eval\": {\"files\": [{\"path\": \"%s/evalf.txt\"}]}}}}",
             root);
    snprintf(path, sizeof path, "%s/evict_suite/manifest.json", root);
    put_file(path, suite);
    char tj[800];
    snprintf(tj, sizeof tj, "%s/fam/TRAINING.json", root);
    assert_int_equal(scdb_codec_training_text(tj, "x", 4096, 1024, &t, &len, desc, sizeof desc), SCDB_OK);
    assert_true(contains(t, len, "<a:"));
    assert_true(contains(t, len, "<b:"));
    assert_false(contains(t, len, "<held:"));
    assert_false(contains(t, len, "<evalf:"));
    assert_non_null(strstr(desc, "2 of the 4 training files"));
    assert_non_null(strstr(desc, "held-out or eval files skipped"));
    /* a shorter read is a prefix of the longer one (same per-file cap) */
    assert_int_equal(scdb_codec_training_text(tj, "x", 20, 1024, &t2, &len2, NULL, 0), SCDB_OK);
    assert_int_equal(len2, 20);
    assert_memory_equal(t, t2, 20);
    free(t2);
    /* the per-file cap */
    assert_int_equal(scdb_codec_training_text(tj, "x", 4096, 5, &t2, &len2, NULL, 0), SCDB_OK);
    assert_int_equal(len2, 12);   /* "<a:01" "\n" "<b:01" "\n" */
    free(t2);
    free(t);
    /* refusals: bad arguments, no such domain, no such file, wrong shape,
     * garbage, truncated */
    assert_int_equal(scdb_codec_training_text(tj, "x", 0, 0, &t, &len, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_codec_training_text(NULL, "x", 10, 0, &t, &len, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_codec_training_text(tj, "nosuch", 10, 0, &t, &len, NULL, 0), SCDB_ENOTFOUND);
    snprintf(path, sizeof path, "%s/none.json", root);
    assert_int_not_equal(scdb_codec_training_text(path, "x", 10, 0, &t, &len, NULL, 0), SCDB_OK);
    snprintf(path, sizeof path, "%s/shape.json", root);
    put_file(path, "{\"domains\": {\"x\": {\"train_files\": {\"a\": 1}}}}");
    assert_int_equal(scdb_codec_training_text(path, "x", 10, 0, &t, &len, NULL, 0), SCDB_ENOTFOUND);
    put_file(path, "{\"domains\": {\"x\": {\"train_files\": [\"/nonexistent/1\", 7]}}}");
    assert_int_equal(scdb_codec_training_text(path, "x", 10, 0, &t, &len, NULL, 0), SCDB_ENOTFOUND);
    put_file(path, "\x01garbage\xff");
    assert_int_equal(scdb_codec_training_text(path, "x", 10, 0, &t, &len, NULL, 0), SCDB_EFORMAT);
    body[40] = '\0';   /* truncated */
    put_file(path, body);
    assert_int_equal(scdb_codec_training_text(path, "x", 10, 0, &t, &len, NULL, 0), SCDB_EFORMAT);
    assert_null(t);

    /* the fleet's domains: the family's, then the adapters' not seen yet */
    snprintf(body, sizeof body, "{\"domains\": {\"y\": {\"train_files\": []}, \"z\": {\"train_files\": []}}}");
    snprintf(path, sizeof path, "%s/adapters/TRAINING.json", root);
    put_file(path, body);
    snprintf(path, sizeof path, "%s/fam/m", root);
    write_model(path, "m", 2, 24, 5ull, 0.0f);
    scdb_model *m = NULL;
    assert_int_equal(scdb_model_load(path, &m, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_codec_fleet_domains(m, &td), SCDB_OK);
    assert_int_equal(td.n, 3);
    assert_string_equal(td.name[0], "x");
    assert_string_equal(td.name[1], "y");
    assert_string_equal(td.name[2], "z");
    assert_non_null(strstr(td.json[1], "/fam/TRAINING.json"));
    assert_non_null(strstr(td.json[2], "/adapters/TRAINING.json"));
    /* no adapters: the family's alone; a garbage adapters file: refused */
    snprintf(path, sizeof path, "%s/adapters/TRAINING.json", root);
    put_file(path, "[1, 2");
    assert_int_equal(scdb_codec_fleet_domains(m, &td), SCDB_EFORMAT);
    unlink(path);
    assert_int_equal(scdb_codec_fleet_domains(m, &td), SCDB_OK);
    assert_int_equal(td.n, 2);
    /* more domains than the list holds */
    char *big = malloc(80 * 40 + 64);
    assert_non_null(big);
    size_t o = (size_t)sprintf(big, "{\"domains\": {");
    for (int i = 0; i < SCDB_TEXT_MAX_DOMAINS + 5; i++)
        o += (size_t)sprintf(big + o, "%s\"d%d\": {}", i ? ", " : "", i);
    sprintf(big + o, "}}");
    put_file(tj, big);
    free(big);
    assert_int_equal(scdb_codec_fleet_domains(m, &td), SCDB_ERANGE);
    assert_int_equal(scdb_codec_fleet_domains(NULL, &td), SCDB_EINVAL);
    scdb_model_free(&m);
}

/* ------------------------------------------------------------ kernel twins
 * kernels.h's codec ops (what the CUDA backend is tested against) compute
 * exactly what the codec does: encode, REUSE decode, TOKEN and PATCH
 * regeneration, the aligner. */

static void test_kernel_twins(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    const int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 3, .r_v = 3, .r_h = 4, .n_candidates = 1, .candidates = cand,
                     .candidate_kv = 1, .token_layer0 = 1};
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL;
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 30, .batch = 32, .keep_order = 1};
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    const scdb_pair_info *pi = scdb_pair_get_info(p);
    assert_int_equal(pi->n_aligners, 1);
    const scdb_model_config *mc = scdb_model_cfg(prod);
    int n = 24, d = mc->d_model, kv = scdb_model_kv_dim(mc), L = mc->n_layers, hd = mc->head_dim;
    int32_t tok[24], pos[24];
    for (int i = 0; i < n; i++) { tok[i] = text[500 + i]; pos[i] = 3 + i; }

    /* encode: per coded layer and part, one lowrank_encode into its columns */
    scdb_kv_cache *pc;
    float *h_in = malloc((size_t)L * n * d * sizeof *h_in);
    assert_int_equal(scdb_model_cache_new(prod, n, &pc), SCDB_OK);
    scdb_capture cap = {.h_in = h_in};
    assert_int_equal(scdb_model_forward(prod, tok, pos, n, pc, NULL, &cap), SCDB_OK);
    size_t ncodes = scdb_codec_codes_len(ci, n);
    uint16_t *codes = malloc(ncodes * 2), *codes2 = malloc(ncodes * 2);
    scdb_codec_states st = {.h_in = h_in};
    assert_int_equal(scdb_codec_encode(cb, &st, n, codes), SCDB_OK);
    for (int l = 0; l < L; l++) {
        const scdb_cb_layer *cl = &ci->layers[l];
        int col = 0, rr[3] = {cl->r_k, cl->r_v, cl->r_h};
        for (int q = 0; q < 3; q++) {
            const cx_enc *e = &cb->part[l][q];
            if (!rr[q]) continue;
            assert_int_equal(scdb_k_lowrank_encode_cpu(h_in + (size_t)l * n * d, d, n, d, e->mean, e->enc,
                                                       rr[q], codes2 + scdb_codec_section(ci, n, l) + col,
                                                       cl->width, NULL), SCDB_OK);
            col += rr[q];
        }
    }
    assert_memory_equal(codes, codes2, ncodes * 2);

    /* decode, REUSE (n_patch 0) and PATCH (n_patch 1) on layer 1, TOKEN on layer 0 */
    const scdb_cb_layer *l1 = &ci->layers[1];
    int w = l1->width;
    const uint16_t *z1 = codes + scdb_codec_section(ci, n, 1);
    float *K = malloc((size_t)n * kv * sizeof *K), *V = malloc((size_t)n * kv * sizeof *V);
    float *h = malloc((size_t)n * d * sizeof *h), *h2 = malloc((size_t)n * d * sizeof *h2);
    float *z1f = malloc((size_t)n * w * sizeof *z1f);
    uint16_t *dk = malloc((size_t)kv * w * 2), *dv = malloc((size_t)kv * w * 2);
    scdb_f32_to_f16_n(p->L[1].dk, dk, (size_t)kv * w);     /* stored as f16: exact */
    scdb_f32_to_f16_n(p->L[1].dv, dv, (size_t)kv * w);
    scdb_f16_to_f32_n(z1, z1f, (size_t)n * w);
    for (int np = 0; np < 2; np++) {
        scdb_kv_cache *dc;
        assert_int_equal(scdb_model_cache_new(cons, n, &dc), SCDB_OK);
        assert_int_equal(scdb_pair_decode(p, cb, codes, n, pos, tok, np, dc, 0), SCDB_OK);
        /* layer 0: h = RMSNorm(E[tok]), regenerated */
        for (int i = 0; i < n; i++) memcpy(h + (size_t)i * d, p->emb + (size_t)tok[i] * d, (size_t)d * sizeof *h);
        scdb_k_rmsnorm_cpu(h, p->norm0, n, d, pi->norm_eps, h);
        assert_int_equal(scdb_k_kv_regen_cpu(h, n, d, p->wk0, p->wv0, kv, pos, hd, pi->rope_theta, K, V), SCDB_OK);
        assert_memory_equal(K, scdb_kv_k(dc, 0, 0), (size_t)n * kv * sizeof *K);
        assert_memory_equal(V, scdb_kv_v(dc, 0, 0), (size_t)n * kv * sizeof *V);
        if (np == 0) {
            assert_int_equal(scdb_k_lowrank_decode_cpu(z1, w, n, w, dk, p->L[1].mk, kv, pos, hd,
                                                       pi->rope_theta, K, kv), SCDB_OK);
            assert_int_equal(scdb_k_lowrank_decode_cpu(z1, w, n, w, dv, p->L[1].mv, kv, NULL, hd,
                                                       pi->rope_theta, V, kv), SCDB_OK);
        } else {
            const scdb_aligner *al = &p->L[1].al;
            assert_int_equal(scdb_aligner_apply(al, z1f, w, n, h), SCDB_OK);
            assert_int_equal(scdb_k_aligner_cpu(z1f, w, n, al->r, al->hidden, al->d, al->w1, al->b1,
                                                al->w2, al->b2, al->skip, h2, NULL), SCDB_OK);
            assert_memory_equal(h, h2, (size_t)n * d * sizeof *h);
            assert_int_equal(scdb_k_kv_regen_cpu(h2, n, d, p->L[1].wk, p->L[1].wv, kv, pos, hd,
                                                 pi->rope_theta, K, V), SCDB_OK);
        }
        assert_memory_equal(K, scdb_kv_k(dc, 1, 0), (size_t)n * kv * sizeof *K);
        assert_memory_equal(V, scdb_kv_v(dc, 1, 0), (size_t)n * kv * sizeof *V);
        scdb_kv_cache_free(&dc);
    }
    free(h_in); free(codes); free(codes2); free(K); free(V); free(h); free(h2); free(z1f);
    free(dk); free(dv);
    scdb_kv_cache_free(&pc);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_calib_free(&c);
}

/* ------------------------------------------------------------ device decode
 * scdb_pair_dev on the CPU ops table (host memory, CPU twins) is the CPU
 * decode bit for bit: the same sequence the CUDA table runs on a GPU, with
 * every offset, stride and layer kind checked here.  Own-layer and
 * all-layers pairs, TOKEN layer 0, REUSE and PATCH, a range inside a block,
 * a nonzero slot0. */
static void check_pair_dev(const scdb_pair *p, const scdb_codebook *cb, int n_patch)
{
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    int block_n = 32, t0 = 5, n = 20, slot0 = 7;
    int32_t tok[32], pos[20];
    for (int i = 0; i < block_n; i++) tok[i] = text[900 + i];
    for (int i = 0; i < n; i++) pos[i] = 11 + 2 * i;
    /* codes of the block from the producer's states */
    float *h_in = malloc((size_t)ci->n_layers * block_n * ci->d_model * sizeof *h_in);
    scdb_kv_cache *pc, *a, *b;
    scdb_capture cap = {.h_in = h_in};
    int32_t ppos[32];
    for (int i = 0; i < block_n; i++) ppos[i] = i;
    assert_int_equal(scdb_model_cache_new(prod, block_n, &pc), SCDB_OK);
    assert_int_equal(scdb_model_forward(prod, tok, ppos, block_n, pc, NULL, &cap), SCDB_OK);
    void *codes = malloc(scdb_codec_payload_bytes(cb, block_n));
    scdb_codec_states st = {.h_in = h_in};
    assert_int_equal(scdb_codec_encode(cb, &st, block_n, codes), SCDB_OK);

    scdb_pair_dev *d = NULL;
    assert_int_equal(scdb_pair_dev_new(p, SCDB_DEV_CPU, &d), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, 48, &a), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, 48, &b), SCDB_OK);
    assert_int_equal(scdb_pair_decode_range(p, cb, codes, block_n, t0, n, pos, tok + t0, n_patch,
                                            a, slot0), SCDB_OK);
    assert_int_equal(scdb_pair_dev_decode_range(d, cb, codes, block_n, t0, n, pos, tok + t0,
                                                n_patch, b, slot0), SCDB_OK);
    assert_int_equal(a->n, slot0 + n);
    assert_int_equal(b->n, a->n);
    assert_memory_equal(a->mem, b->mem,
                        scdb_kv_cache_bytes(a->n_layers, a->n_kv_heads, a->head_dim, a->capacity));
    /* the CPU decode's argument checks */
    assert_int_equal(scdb_pair_dev_decode_range(d, cb, codes, block_n, t0, n, pos, tok + t0,
                                                n_patch, b, 48 - n + 1), SCDB_EINVAL);
    assert_int_equal(scdb_pair_dev_decode_range(d, cb, codes, block_n, block_n - n + 1, n, pos,
                                                tok, n_patch, b, 0), SCDB_EINVAL);
    scdb_pair_dev_free(&d);
    assert_null(d);
    scdb_pair_dev_free(&d);
    scdb_kv_cache_free(&a);
    scdb_kv_cache_free(&b);
    scdb_kv_cache_free(&pc);
    free(codes);
    free(h_in);
}

static void test_pair_dev_cpu(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    const int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 3, .r_v = 3, .r_h = 4, .n_candidates = 1, .candidates = cand,
                     .token_layer0 = 1};
    scdb_codebook *cb = NULL;
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    for (int all = 0; all < 2; all++) {
        scdb_pair *p = NULL;
        scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 20, .batch = 32,
                            .keep_order = 1, .all_layers = all};
        assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
        assert_int_equal(scdb_pair_get_info(p)->all_input, all);
        assert_true(scdb_pair_get_info(p)->has_tokens);
        for (int np = 0; np < 2; np++) check_pair_dev(p, cb, np);
        /* int8 codes: dequantised on the host, the same f16 codes go up */
        assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8), SCDB_OK);
        for (int np = 0; np < 2; np++) check_pair_dev(p, cb, np);
        assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16), SCDB_OK);
        scdb_pair_free(&p);
    }
    /* the CUDA table: a decode needs a device; without one the upload fails
     * cleanly (no backend: SCDB_EUNSUPPORTED; backend, no device: SCDB_EDEVICE) */
    if (scdb_k_cuda_device_count() == 0) {
        scdb_pair *p = NULL;
        scdb_pair_dev *d = NULL;
        scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 5, .batch = 32, .keep_order = 1};
        assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
        scdb_err rc = scdb_pair_dev_new(p, SCDB_DEV_CUDA, &d);
        assert_true(rc == SCDB_EUNSUPPORTED || rc == SCDB_EDEVICE);
        assert_null(d);
        scdb_pair_free(&p);
    }
    assert_int_equal(scdb_pair_dev_new(NULL, SCDB_DEV_CPU, &(scdb_pair_dev *){NULL}), SCDB_EINVAL);
    scdb_codebook_free(&cb);
    scdb_calib_free(&c);
}

/* ------------------------------------------------------------ int8 codes */

/* |a - b| for f16 bit patterns */
static double f16_diff(uint16_t a, uint16_t b)
{
    return fabs((double)scdb_f16_to_f32(a) - (double)scdb_f16_to_f32(b));
}

/* The rate knob: int8 codes with a scale per token and coded layer.
 * Round trip against the f16 codes (error bounded by half a scale step),
 * the scale of each (token, layer) row fitted to that row, zero rows,
 * extreme values, slicing, decode = f16 decode of the dequantised codes,
 * and bad payloads refused with specific errors. */
static void test_int8_codes(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL;
    int cand[1] = {1};
    scdb_cb_fit f = {.r_k = 2, .r_v = 3, .r_h = 5, .n_candidates = 1, .candidates = cand};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 16, .steps = 100, .batch = 64, .keep_order = 1};
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p), SCDB_OK);
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    enum { N = 30, D = 10 };
    assert_int_equal(ci->code_dim, D);
    assert_int_equal(ci->n_scaled, 2);                 /* layer 0 K+V, layer 1 H */

    /* dtype option: names, sizes, payload dtype (the namespace's) */
    scdb_code_dtype dt;
    assert_int_equal(scdb_code_dtype_parse("int8", &dt), SCDB_OK);
    assert_int_equal(dt, SCDB_CODES_INT8);
    assert_int_equal(scdb_code_dtype_parse("i8", &dt), SCDB_EINVAL);
    assert_string_equal(scdb_code_dtype_name(SCDB_CODES_F16), "f16");
    assert_null(scdb_code_dtype_name((scdb_code_dtype)7));
    assert_int_equal(scdb_codebook_set_code_dtype(cb, (scdb_code_dtype)7), SCDB_EINVAL);
    assert_int_equal(scdb_codebook_token_bytes(cb), 2 * D);
    assert_int_equal(scdb_codebook_payload_dtype(cb), SCDB_F16);

    /* states: token 3 sits at the encoders' means (a zero row on every
     * layer), token 4 is tiny around them, token 5 large (codes ~ 1e4) */
    float *h = malloc((size_t)2 * N * 16 * sizeof *h);
    int32_t tok[N], pos[N];
    for (int i = 0; i < N; i++) { tok[i] = text[200 + i]; pos[i] = i; }
    {
        scdb_kv_cache *pc;
        scdb_capture cap = {.h_in = h};
        assert_int_equal(scdb_model_cache_new(prod, N, &pc), SCDB_OK);
        assert_int_equal(scdb_model_forward(prod, tok, pos, N, pc, NULL, &cap), SCDB_OK);
        scdb_kv_cache_free(&pc);
    }
    for (int l = 0; l < 2; l++) {
        const float *mean = cb->part[l][l == 0 ? CX_K : CX_H].mean;
        for (int j = 0; j < 16; j++) {
            float *row = h + ((size_t)l * N) * 16;
            row[3 * 16 + j] = mean[j];
            row[4 * 16 + j] = mean[j] + 1e-6f * (row[4 * 16 + j] - mean[j]);
            row[5 * 16 + j] = mean[j] + 3e3f * (row[5 * 16 + j] - mean[j]);
        }
    }
    scdb_codec_states st = {.h_in = h};
    uint16_t f16[N * D], deq[N * D], deq2[N * D];
    assert_int_equal(scdb_codec_encode(cb, &st, N, f16), SCDB_OK);
    for (int j = 0; j < 5; j++) {                      /* token 3: zero codes, both layers */
        assert_int_equal(f16[3 * 5 + j] & 0x7fff, 0);
        assert_int_equal(f16[N * 5 + 3 * 5 + j] & 0x7fff, 0);
    }
    assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8), SCDB_OK);
    assert_int_equal(scdb_codebook_token_bytes(cb), D + 2 * 2);
    assert_int_equal(scdb_codec_payload_bytes(cb, N), N * (D + 4));
    assert_int_equal(scdb_codebook_payload_dtype(cb), SCDB_PAYLOAD_CODES_INT8);
    size_t bytes = scdb_codec_payload_bytes(cb, N);
    unsigned char *q8 = malloc(bytes + 1);
    assert_int_equal(scdb_codec_encode(cb, &st, N, q8), SCDB_OK);
    assert_int_equal(scdb_codec_check_payload(cb, q8, bytes, N, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_codec_dequantize(cb, q8, N, 0, N, deq), SCDB_OK);
    const uint16_t *scale = (const uint16_t *)q8;      /* [2][N] */
    const int8_t *q = (const int8_t *)(q8 + 4 * N);
    double worst = 0;
    for (int l = 0; l < 2; l++) {
        const scdb_cb_layer *L = &ci->layers[l];
        for (int i = 0; i < N; i++) {
            double sv = scdb_f16_to_f32(scale[l * N + i]);
            int qmax = 0;
            for (int j = 0; j < L->width; j++) {
                size_t at = (size_t)N * L->offset + (size_t)i * L->width + j;
                int v = q[at];
                if (abs(v) > qmax) qmax = abs(v);
                assert_true(v >= -127 && v <= 127);
                /* within half a step of the f16 codes (plus both f16 roundings) */
                double d = f16_diff(deq[at], f16[at]);
                double bound = 0.5 * sv + 1.0 / 1024 * 128 * sv + 6e-8;
                if (!(d <= bound))
                    print_error("token %d layer %d value %d: |%g - %g| > %g\n", i, l, j,
                                (double)scdb_f16_to_f32(deq[at]), (double)scdb_f16_to_f32(f16[at]), bound);
                assert_true(d <= bound);
                if (sv > 0 && d / sv > worst) worst = d / sv;
            }
            if (i == 3) {                              /* the zero row */
                assert_int_equal(scale[l * N + i], 0);
                assert_int_equal(qmax, 0);
            } else {                                   /* the scale fits this row ... */
                assert_true(sv > 0);
                if (sv >= 6.103515625e-05) assert_int_equal(qmax, 127);   /* ... to a normal f16 */
            }
        }
    }
    print_message("int8 round trip: worst error %.3f of a scale step\n", worst);
    /* the large token's scale is large, the tiny one's tiny: per token */
    assert_true(scdb_f16_to_f32(scale[5]) > 1000 * scdb_f16_to_f32(scale[6]));
    assert_true(scdb_f16_to_f32(scale[4]) < 1e-3f * scdb_f16_to_f32(scale[6]));

    /* slice: the same codes, scales and all, as the range */
    unsigned char *sub = malloc(bytes);
    assert_int_equal(scdb_codec_slice(cb, q8, N, 10, 30, sub), SCDB_OK);
    assert_int_equal(scdb_codec_dequantize(cb, sub, 20, 0, 20, deq2), SCDB_OK);
    {
        uint16_t want[20 * D];
        assert_int_equal(scdb_codec_dequantize(cb, q8, N, 10, 20, want), SCDB_OK);
        assert_memory_equal(deq2, want, sizeof want);
    }
    assert_int_equal(scdb_codec_dequantize(cb, q8, N, 11, 20, deq2), SCDB_EINVAL);

    /* decode: exactly the f16 decode of the dequantised codes */
    scdb_kv_cache *a, *b;
    assert_int_equal(scdb_model_cache_new(cons, 40, &a), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, 40, &b), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, q8, N, pos, tok, -1, a, 0), SCDB_OK);
    assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p, cb, deq, N, pos, tok, -1, b, 0), SCDB_OK);
    assert_memory_equal(a->mem, b->mem, scdb_kv_cache_bytes(2, 2, 4, 40));
    /* ... and close to the f16 codes' decode (int8 steps are small) */
    assert_int_equal(scdb_pair_decode(p, cb, f16, N, pos, tok, -1, b, 0), SCDB_OK);
    {
        double ek, ev;
        kv_rel_err(a, b, N, &ek, &ev);
        print_message("int8 vs f16 codes: relative KV error K %.2e V %.2e\n", ek, ev);
        assert_true(ek < 1e-3 && ev < 1e-3);
    }
    assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8), SCDB_OK);

    /* extreme values: the largest scale decodes finite, one above it or a
     * NaN, infinite or negative scale is SCDB_ERANGE (nothing written) */
    {
        unsigned char x[2 * (D + 4)];
        uint16_t *xs = (uint16_t *)x, out[2 * D];
        int8_t *xq = (int8_t *)(x + 8);
        memset(x, 0, sizeof x);
        for (int j = 0; j < 2 * D; j++) xq[j] = (int8_t)(j % 2 ? -128 : 127);
        for (int k = 0; k < 4; k++) xs[k] = scdb_f32_to_f16(SCDB_CODES_INT8_SCALE_MAX);
        assert_int_equal(scdb_codec_dequantize(cb, x, 2, 0, 2, out), SCDB_OK);
        for (int j = 0; j < 2 * D; j++) assert_true(isfinite(scdb_f16_to_f32(out[j])));
        assert_int_equal(scdb_codec_check_payload(cb, x, sizeof x, 2, NULL, 0), SCDB_OK);
        uint16_t bad[4] = {(uint16_t)(scdb_f32_to_f16(SCDB_CODES_INT8_SCALE_MAX) + 1), 0x7e00, 0x7c00,
                           scdb_f32_to_f16(-1.0f)};
        for (int k = 0; k < 4; k++) {
            char msg[200] = "";
            xs[1] = bad[k];
            assert_int_equal(scdb_codec_dequantize(cb, x, 2, 0, 2, out), SCDB_ERANGE);
            assert_int_equal(scdb_codec_check_payload(cb, x, sizeof x, 2, msg, sizeof msg), SCDB_ERANGE);
            assert_non_null(strstr(msg, "scale of token 1"));
            a->n = 0;
            assert_int_equal(scdb_pair_decode(p, cb, x, 2, pos, tok, -1, a, 0), SCDB_ERANGE);
            assert_int_equal(a->n, 0);
        }
        /* a NaN scale outside the decoded range does not matter to it */
        assert_int_equal(scdb_codec_dequantize(cb, x, 2, 0, 1, out), SCDB_OK);
        /* truncated and oversized payloads */
        char msg[200] = "";
        assert_int_equal(scdb_codec_check_payload(cb, q8, bytes - 1, N, msg, sizeof msg), SCDB_ESHAPE);
        assert_non_null(strstr(msg, "int8"));
        assert_int_equal(scdb_codec_check_payload(cb, q8, bytes + 1, N, NULL, 0), SCDB_ESHAPE);
        assert_int_equal(scdb_codec_check_payload(cb, q8, 2 * N * D, N, NULL, 0), SCDB_ESHAPE);  /* f16-sized */
    }
    /* states too large for any int8 scale: refused, not stored as Inf */
    for (int j = 0; j < 16; j++) h[7 * 16 + j] = 1e7f * (float)(j + 1);
    assert_int_equal(scdb_codec_encode(cb, &st, N, q8), SCDB_ERANGE);
    /* f16 codes: NaN / Inf refused by the payload check */
    assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16), SCDB_OK);
    uint16_t was = f16[17];
    f16[17] = 0x7c00;
    assert_int_equal(scdb_codec_check_payload(cb, f16, sizeof f16, N, NULL, 0), SCDB_ERANGE);
    {   /* at an odd address, as a put's frame may sit in the receive buffer */
        unsigned char *odd = malloc(sizeof f16 + 1);
        assert_non_null(odd);
        memcpy(odd + 1, f16, sizeof f16);
        assert_int_equal(scdb_codec_check_payload(cb, odd + 1, sizeof f16, N, NULL, 0), SCDB_ERANGE);
        memcpy(odd + 1 + 17 * 2, &was, 2);
        assert_int_equal(scdb_codec_check_payload(cb, odd + 1, sizeof f16, N, NULL, 0), SCDB_OK);
        free(odd);
    }
    assert_int_equal(scdb_codec_check_payload(cb, f16, sizeof f16 - 2, N, NULL, 0), SCDB_ESHAPE);

    scdb_kv_cache_free(&a);
    scdb_kv_cache_free(&b);
    free(sub);
    free(q8);
    free(h);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_calib_free(&c);
}

/* Calibration with its statistics, measured KL and aligner training on the
 * CPU ops table (scdb_calib_set_device) writes the same codebook and pair,
 * byte for byte, as the host path: candidates chosen by measured KL, two
 * aligners trained, the patch order chosen greedily by measured KL. */

static void test_calib_device(void **state)
{
    (void)state;
    scdb_calib *c[2] = {session(1), session_on(SCDB_DEV_CPU)};
    char paths[2][2][600];
    double kl[2], t1[2];
    for (int k = 0; k < 2; k++) {
        scdb_codebook *cb = NULL;
        scdb_pair *p = NULL;
        scdb_cb_fit f = {.r_k = 2, .r_v = 3, .r_h = 4, .n_candidates = 2, .token_layer0 = 0};
        scdb_pair_fit pf = {.n_patch = 2, .hidden = 8, .steps = 120, .batch = 32};
        assert_int_equal(scdb_calib_windows(c[k]), scdb_calib_windows(c[0]));
        assert_int_equal(scdb_calib_fit_codebook(c[k], &f, &cb), SCDB_OK);
        assert_int_equal(scdb_calib_fit_pair(c[k], cb, 0, &pf, &p), SCDB_OK);
        assert_int_equal(scdb_calib_eval(c[k], cb, p, 0, -1, &kl[k], &t1[k]), SCDB_OK);
        snprintf(paths[k][0], sizeof paths[k][0], "%s/dev%d_cb.safetensors", tmpdir, k);
        snprintf(paths[k][1], sizeof paths[k][1], "%s/dev%d_pair.safetensors", tmpdir, k);
        assert_int_equal(scdb_codebook_save(cb, paths[k][0]), SCDB_OK);
        assert_int_equal(scdb_pair_save(p, paths[k][1]), SCDB_OK);
        scdb_pair_free(&p);
        scdb_codebook_free(&cb);
    }
    assert_true(kl[1] == kl[0]);
    assert_true(t1[1] == t1[0]);
    for (int f = 0; f < 2; f++) {
        char *a, *b;
        size_t la, lb;
        read_all(paths[0][f], &a, &la);
        read_all(paths[1][f], &b, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
        free(a);
        free(b);
    }
    /* refusals: a device after windows were added, a CUDA device that is not there */
    assert_int_equal(scdb_calib_set_device(c[0], SCDB_DEV_CPU), SCDB_EINVAL);
    scdb_calib_free(&c[0]);
    scdb_calib_free(&c[1]);
    if (scdb_k_cuda_device_count() <= 0) {
        scdb_calib *x = NULL;
        scdb_calib_opts o = small_opts();
        assert_int_equal(scdb_calib_new(prod, NULL, 0, &o, &x), SCDB_OK);
        assert_int_equal(scdb_calib_set_device(x, SCDB_DEV_CUDA), SCDB_EUNSUPPORTED);
        scdb_calib_free(&x);
    }
}

/* ------------------------------------------------------------ token input */

/* The reference decode of a token-input REUSE layer l, computed apart from
 * pair.c: tensors read from the pair's file, h0 from the consumer's own
 * embedding and layer-0 norm (double), K = RoPE(z dec_k^T + mean_k + h0
 * dec_k_tok^T), V likewise; into rk / rv [n][kv]. */
static void tok_reference(const char *path, const scdb_codebook *cb, const scdb_model *m, const uint16_t *codes,
                          int block_n, int t0, int n, const int32_t *tok, const int32_t *pos, int l, float *rk,
                          float *rv)
{
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    const scdb_model_config *mc = scdb_model_cfg(m);
    int d = mc->d_model, kv = scdb_model_kv_dim(mc), D = ci->code_dim;
    scdb_st_file *f;
    char nm[96];
    float *dk, *dv, *gk, *gv, *mk, *mv;
    assert_int_equal(scdb_st_open(path, &f, NULL, 0), SCDB_OK);
    assert_string_equal(scdb_st_meta(f, "token_input"), "1");
    assert_string_equal(scdb_st_meta(f, "decoder_input"), "all");
    float **dst[6] = {&dk, &dv, &gk, &gv, &mk, &mv};
    const char *nms[6] = {"dec_k", "dec_v", "dec_k_tok", "dec_v_tok", "mean_k", "mean_v"};
    int cols[6] = {D, D, d, d, 0, 0};
    for (int k = 0; k < 6; k++) {
        snprintf(nm, sizeof nm, "layers.%d.%s", l, nms[k]);
        const scdb_st_tensor *t = scdb_st_find(f, nm);
        assert_non_null(t);
        assert_int_equal(t->dtype, k < 4 ? SCDB_F16 : SCDB_F32);
        assert_int_equal(cx_read_f32(f, nm, kv, cols[k], dst[k], NULL, 0), SCDB_OK);
    }
    scdb_st_close(&f);
    const scdb_layer_weights *w0 = scdb_model_layer(m, 0);
    float *e = malloc((size_t)d * sizeof *e);
    for (int i = 0; i < n; i++) {
        double h0[64], z[64], ss = 0;
        assert_true(d <= 64 && D <= 64);
        assert_int_equal(scdb_model_embed(m, &tok[i], 1, e), SCDB_OK);
        for (int a = 0; a < d; a++) ss += (double)e[a] * e[a];
        double r = 1.0 / sqrt(ss / d + mc->norm_eps);
        for (int a = 0; a < d; a++) h0[a] = e[a] * r * w0->attn_norm[a];
        /* the token's whole code row: every layer's section */
        for (int q = 0; q < ci->n_layers; q++) {
            const scdb_cb_layer *L = &ci->layers[q];
            for (int k = 0; k < L->width; k++)
                z[L->offset + k] = scdb_f16_to_f32(codes[(size_t)block_n * L->offset + (size_t)(t0 + i) * L->width + k]);
        }
        for (int o = 0; o < kv; o++) {
            double sk = mk[o], sv = mv[o];
            for (int a = 0; a < D; a++) { sk += z[a] * dk[(size_t)o * D + a]; sv += z[a] * dv[(size_t)o * D + a]; }
            for (int a = 0; a < d; a++) { sk += h0[a] * gk[(size_t)o * d + a]; sv += h0[a] * gv[(size_t)o * d + a]; }
            rk[(size_t)i * kv + o] = (float)sk;
            rv[(size_t)i * kv + o] = (float)sv;
        }
    }
    scdb_k_rope_cpu(rk, n, mc->n_kv_heads, mc->head_dim, pos, mc->rope_theta, 0);
    free(e);
    free(dk); free(dv); free(gk); free(gv); free(mk); free(mv);
}

/* Token-input decoders (codec.h, scdb_pair_info.token_input): fitted with
 * the codes' decoders, they lower the held-back KL and the K/V error of
 * REUSE against the consumer's own prefill; the file round-trips exactly,
 * decode equals a reference computed apart, the device decode (CPU table)
 * equals the CPU decode bit for bit; a pair without token input is written
 * as before (no key, no tensor); the loader refuses a token-input pair with
 * a missing, truncated, wrong-shaped or mislabelled token tensor, and the
 * flag without a token layer or with a bad value; calibration refuses token
 * input where it has no meaning. */
static void test_token_input(void **state)
{
    (void)state;
    scdb_calib *c = session(1);
    scdb_codebook *cb = NULL, *cbn = NULL;
    scdb_pair *p0 = NULL, *p1 = NULL, *lp = NULL, *q = NULL;
    int cand[1] = {1};
    char path0[700], path1[700], ed[700], err[512] = "";
    scdb_cb_fit f = {.r_k = 2, .r_v = 2, .r_h = 3, .n_candidates = 1, .candidates = cand, .token_layer0 = 1};
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cb), SCDB_OK);
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 40, .batch = 32, .keep_order = 1, .all_layers = 1};
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p0), SCDB_OK);
    pf.token_input = 1;
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &p1), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(p0)->token_input, 0);
    assert_int_equal(scdb_pair_get_info(p1)->token_input, 1);

    /* the fit: lower held-back KL (REUSE only, and with the patch) than without */
    for (int np = 0; np <= 1; np++) {
        double kl0, kl1, t0_, t1_;
        assert_int_equal(scdb_calib_eval(c, cb, p0, 0, np, &kl0, &t0_), SCDB_OK);
        assert_int_equal(scdb_calib_eval(c, cb, p1, 0, np, &kl1, &t1_), SCDB_OK);
        print_message("patch %d: held-back KL codes %.5f (top-1 %.3f) -> codes + h0 %.5f (top-1 %.3f)\n", np, kl0,
                      t0_, kl1, t1_);
        if (np == 0) assert_true(kl1 < 0.95 * kl0);
    }
    /* ... and a lower K/V error of REUSE against the consumer's own prefill on held-back text */
    enum { N = 40 };
    int32_t tok[N], pos[N];
    uint16_t codes[N * 16];
    assert_true(scdb_codebook_get_info(cb)->code_dim <= 16);
    for (int i = 0; i < N; i++) { tok[i] = text[text_len / 2 + 700 + (size_t)i]; pos[i] = i; }
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, N, codes), SCDB_OK);
    scdb_kv_cache *own = prefill(cons, tok, N), *x, *y;
    assert_int_equal(scdb_model_cache_new(cons, N, &x), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(cons, N, &y), SCDB_OK);
    double ek0, ev0, ek1, ev1;
    assert_int_equal(scdb_pair_decode(p0, cb, codes, N, pos, tok, 0, x, 0), SCDB_OK);
    assert_int_equal(scdb_pair_decode(p1, cb, codes, N, pos, tok, 0, y, 0), SCDB_OK);
    kv_rel_err(x, own, N, &ek0, &ev0);
    kv_rel_err(y, own, N, &ek1, &ev1);
    print_message("REUSE K/V relative error vs own prefill: codes %.4g / %.4g, codes + h0 %.4g / %.4g\n", ek0, ev0,
                  ek1, ev1);
    assert_true(ek1 + ev1 < ek0 + ev0);

    /* files: without token input exactly as before; with it, the flag and tensors */
    snprintf(path0, sizeof path0, "%s/tok0.safetensors", tmpdir);
    snprintf(path1, sizeof path1, "%s/tok1.safetensors", tmpdir);
    assert_int_equal(scdb_pair_save(p0, path0), SCDB_OK);
    assert_int_equal(scdb_pair_save(p1, path1), SCDB_OK);
    scdb_st_file *sf;
    assert_int_equal(scdb_st_open(path0, &sf, NULL, 0), SCDB_OK);
    assert_null(scdb_st_meta(sf, "token_input"));
    assert_null(scdb_st_find(sf, "layers.1.dec_k_tok"));
    int n0 = scdb_st_count(sf);
    scdb_st_close(&sf);
    assert_int_equal(scdb_st_open(path1, &sf, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(sf), n0 + 2);
    const scdb_st_tensor *t = scdb_st_find(sf, "layers.1.dec_v_tok");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 8);
    assert_int_equal(t->shape[1], 16);
    scdb_st_close(&sf);
    assert_int_equal(scdb_pair_load(path1, cb, &lp, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(lp)->token_input, 1);
    for (int np = 0; np <= 1; np++) {
        assert_int_equal(scdb_pair_decode(p1, cb, codes, N, pos, tok, np, x, 0), SCDB_OK);
        assert_int_equal(scdb_pair_decode(lp, cb, codes, N, pos, tok, np, y, 0), SCDB_OK);
        assert_memory_equal(x->k, y->k, (size_t)2 * N * 8 * sizeof(float));
        assert_memory_equal(x->v, y->v, (size_t)2 * N * 8 * sizeof(float));
    }
    /* decode == the reference (a range of a block, positions not 0..n) */
    {
        int block_n = N, t0 = 6, n = 25, slot0 = 3;
        int32_t rpos[25];
        float rk[25 * 8], rv[25 * 8];
        for (int i = 0; i < n; i++) rpos[i] = 5 + 3 * i;
        assert_int_equal(scdb_pair_decode_range(lp, cb, codes, block_n, t0, n, rpos, tok + t0, 0, y, slot0), SCDB_OK);
        tok_reference(path1, cb, cons, codes, block_n, t0, n, tok + t0, rpos, 1, rk, rv);
        assert_f32_close(scdb_kv_k(y, 1, slot0), rk, (size_t)n * 8, 1e-4);
        assert_f32_close(scdb_kv_v(y, 1, slot0), rv, (size_t)n * 8, 1e-4);
    }
    /* the device decode on the CPU table: the CPU decode bit for bit (REUSE, PATCH, int8) */
    check_pair_dev(lp, cb, 0);
    check_pair_dev(lp, cb, 1);
    assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8), SCDB_OK);
    check_pair_dev(lp, cb, 0);
    assert_int_equal(scdb_codebook_set_code_dtype(cb, SCDB_CODES_F16), SCDB_OK);
    scdb_pair_free(&lp);

    /* refusals: the token tensors truncated, wrong-shaped, mislabelled, missing */
    snprintf(ed, sizeof ed, "%s/tok_ed.safetensors", tmpdir);
    copy_prefix(path1, ed, -9);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ETRUNC);
    reshape_tensor(path1, ed, "layers.1.dec_k_tok", "checksum");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ESHAPE);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "layers.1.dec_k_tok"));
    assert_non_null(strstr(err, "token_input"));
    relabel_tensor(path1, ed, "layers.1.dec_v_tok", NULL, SCDB_BF16);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EDTYPE);
    relabel_tensor(path1, ed, "layers.1.dec_v_tok", "layers.1.dec_v_tik", SCDB_F16);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "layers.1.dec_v_tok"));
    /* the flag on a pair without the tensors; the tensors without the flag */
    edit_meta(path0, ed, "token_input", "1");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "layers.1.dec_k_tok"));
    edit_meta(path1, ed, "token_input", NULL);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(path1, ed, "token_input", "0");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    /* bad values: not 0/1; token_corr on a full pair */
    edit_meta(path1, ed, "token_input", "2");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(path1, ed, "token_input", "yes");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(path1, ed, "token_corr", "1");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "token_corr"));
    /* a corrupt token tensor: the checksum */
    flip_byte(path1, ed, 3);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ECHECKSUM);
    assert_null(q);

    /* no token layer: the flag is refused, and calibration refuses token input */
    f.token_layer0 = 0;
    assert_int_equal(scdb_calib_fit_codebook(c, &f, &cbn), SCDB_OK);
    pf.token_input = 1;
    assert_int_equal(scdb_calib_fit_pair(c, cbn, 0, &pf, &q), SCDB_EINVAL);
    pf.token_input = 0;
    assert_int_equal(scdb_calib_fit_pair(c, cbn, 0, &pf, &q), SCDB_OK);
    assert_int_equal(scdb_pair_save(q, path0), SCDB_OK);
    scdb_pair_free(&q);
    edit_meta(path0, ed, "token_input", "1");
    assert_int_equal(scdb_pair_load(ed, cbn, &q, err, sizeof err), SCDB_EFORMAT);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "has_tokens"));
    /* ... and without all-layers decoders (moments, not samples) */
    pf.token_input = 1;
    pf.all_layers = 0;
    assert_int_equal(scdb_calib_fit_pair(c, cb, 0, &pf, &q), SCDB_EINVAL);
    assert_null(q);

    scdb_kv_cache_free(&own);
    scdb_kv_cache_free(&x);
    scdb_kv_cache_free(&y);
    scdb_pair_free(&p0);
    scdb_pair_free(&p1);
    scdb_codebook_free(&cb);
    scdb_codebook_free(&cbn);
    scdb_calib_free(&c);
}

/* Token input in an adapter fleet: the shared part's decoders read [z | h0]
 * (h0 the base's, every adapter's: an adapter pair's embedding and layer-0
 * norm are its base's); an adapter's decoder corrections read [z | h0]
 * (token_corr, default: one u, v's h0 columns as dec_k.v_tok) or z only
 * (its h0 decoders are the shared part's).  Both round-trip, decode on the
 * device (CPU table) bit for bit, and decode REUSE closer to the adapter's
 * own KV than the fleet fitted without token input; the loader refuses a
 * token_input differing from the shared part's and bad own token tensors. */
static void test_token_lora(void **state)
{
    (void)state;
    char d[700], pdir[700], sp[800], spn[800], lpath[2][800], ed[800], err[768] = "";
    scdb_model *ad[2] = {0};
    scdb_codebook *cb = NULL;
    scdb_calib *c = session(1), *f = NULL;
    int cand[1] = {1}, added = 0;
    scdb_cb_fit cf = {.r_k = 3, .r_v = 3, .r_h = 4, .n_candidates = 1, .candidates = cand, .token_layer0 = 1};
    assert_int_equal(scdb_calib_fit_codebook(c, &cf, &cb), SCDB_OK);
    scdb_calib_free(&c);
    snprintf(d, sizeof d, "%s/tadapters", tmpdir);
    mkdir(d, 0755);
    for (int k = 0; k < 2; k++) {
        uint64_t rng = 950 + (uint64_t)k;
        tiny_adapter ta = {.base = "prod", .rng = &rng, .ff = 24, .scale = 0.3f, .modules = 0x6u,
                           .config = "{\"target_modules\": [\"k_proj\", \"v_proj\"]}"};
        snprintf(d, sizeof d, "%s/tadapters/ta%d", tmpdir, k);
        tiny_adapter_write(d, &ta);
        assert_int_equal(scdb_model_load(d, &ad[k], err, sizeof err), SCDB_OK);
    }
    /* adapters found at ../../models/prod */
    scdb_calib_opts o = small_opts();
    o.samples_only = 1;
    assert_int_equal(scdb_calib_new(prod, (const scdb_model *const *)ad, 1, &o, &f), SCDB_OK);
    assert_int_equal(scdb_calib_add_text(f, text, text_len / 2, 200, &added), SCDB_OK);
    scdb_calib_fleet *fl = NULL;
    assert_int_equal(scdb_calib_fleet_new(f, &fl), SCDB_OK);
    assert_int_equal(scdb_calib_fleet_add(fl, f), SCDB_OK);
    assert_int_equal(scdb_calib_swap_consumer(f, 0, ad[1]), SCDB_OK);
    assert_int_equal(scdb_calib_fleet_add(fl, f), SCDB_OK);
    scdb_pair *sh1 = NULL, *sh0 = NULL, *lo[3] = {0}, *back = NULL, *q = NULL;
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 40, .batch = 32, .all_layers = 1};
    assert_int_equal(scdb_calib_fit_shared(f, cb, fl, &pf, &sh0), SCDB_OK);
    pf.token_input = 1;
    assert_int_equal(scdb_calib_fit_shared(f, cb, fl, &pf, &sh1), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(sh1)->token_input, 1);
    assert_int_equal(scdb_pair_get_info(sh0)->token_input, 0);
    snprintf(pdir, sizeof pdir, "%s/tlora", tmpdir);
    mkdir(pdir, 0755);
    snprintf(sp, sizeof sp, "%s/prod__fleet.safetensors", pdir);
    snprintf(spn, sizeof spn, "%s/notok.safetensors", pdir);
    assert_int_equal(scdb_pair_save(sh1, sp), SCDB_OK);
    assert_int_equal(scdb_pair_save(sh0, spn), SCDB_OK);
    assert_int_equal(scdb_calib_fleet_use(fl, f, 0), SCDB_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(scdb_calib_add_eval(f, 0, text + text_len / 2 + (size_t)i * 100, 60), SCDB_OK);
    /* lo[0]: corrections of [z | h0]; lo[1]: of z; lo[2]: no token input at all */
    scdb_lora_fit lf = {.dec_rank = 2, .align_rank = 2, .n_patch = 1, .keep_order = 1};
    assert_int_equal(scdb_calib_fit_lora_pair(f, cb, sh1, &lf, &lo[0], err, sizeof err), SCDB_OK);
    lf.token_corr = -1;
    assert_int_equal(scdb_calib_fit_lora_pair(f, cb, sh1, &lf, &lo[1], err, sizeof err), SCDB_OK);
    lf.token_corr = 0;
    assert_int_equal(scdb_calib_fit_lora_pair(f, cb, sh0, &lf, &lo[2], err, sizeof err), SCDB_OK);
    int want_corr[3] = {1, 0, 0}, want_in[3] = {1, 1, 0};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(scdb_pair_get_info(lo[k])->token_input, want_in[k]);
        assert_int_equal(scdb_pair_get_info(lo[k])->token_corr, want_corr[k]);
    }
    for (int k = 0; k < 2; k++) {
        snprintf(lpath[k], sizeof lpath[k], "%s/prod__ta0_%d.safetensors", pdir, k);
        assert_int_equal(scdb_pair_save(lo[k], lpath[k]), SCDB_OK);
        scdb_st_file *sf;
        assert_int_equal(scdb_st_open(lpath[k], &sf, NULL, 0), SCDB_OK);
        assert_string_equal(scdb_st_meta(sf, "token_input"), "1");
        assert_string_equal(scdb_st_meta(sf, "token_corr"), k ? "0" : "1");
        assert_null(scdb_st_find(sf, "layers.1.dec_k_tok"));   /* the shared part's */
        const scdb_st_tensor *t = scdb_st_find(sf, "layers.1.dec_k.v_tok");
        if (k) assert_null(t);
        else {
            assert_non_null(t);
            assert_int_equal(t->shape[0], 2);
            assert_int_equal(t->shape[1], 16);
        }
        scdb_st_close(&sf);
        print_message("lora pair (token_corr %d): %ld bytes; shared part %ld bytes (without token input %ld)\n",
                      1 - k, fsize(lpath[k]), fsize(sp), fsize(spn));
    }

    enum { N = 40 };
    int32_t tok[N], pos[N];
    uint16_t codes[N * 16];
    assert_true(scdb_codebook_get_info(cb)->code_dim <= 16);
    for (int i = 0; i < N; i++) { tok[i] = text[text_len / 2 + 900 + (size_t)i]; pos[i] = i; }
    assert_int_equal(scdb_codec_encode_tokens(cb, prod, tok, pos, N, codes), SCDB_OK);
    scdb_kv_cache *own = prefill(ad[0], tok, N), *x, *y;
    assert_int_equal(scdb_model_cache_new(ad[0], N, &x), SCDB_OK);
    assert_int_equal(scdb_model_cache_new(ad[0], N, &y), SCDB_OK);
    double e[3][2];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(scdb_pair_decode(lo[k], cb, codes, N, pos, tok, 0, x, 0), SCDB_OK);
        kv_rel_err(x, own, N, &e[k][0], &e[k][1]);
        double kl, t1;
        assert_int_equal(scdb_calib_eval(f, cb, lo[k], 0, 0, &kl, &t1), SCDB_OK);
        print_message("lora %s: REUSE K/V relative error vs own prefill %.4g / %.4g, held-back KL %.5f\n",
                      k == 0 ? "token input, corrections of [z | h0]" : k == 1 ? "token input, corrections of z"
                                                                      : "without token input",
                      e[k][0], e[k][1], kl);
        if (k < 2) {
            /* low-rank (as loaded) == the materialised reference, g += u v_tok
             * applied, to f32 rounding; without it (the shared g alone) it is not */
            scdb_pair *m = NULL;
            assert_int_equal(cx_pair_materialise(lo[k], &m), SCDB_OK);
            for (int np = 0; np <= 1; np++) {
                assert_int_equal(scdb_pair_decode(lo[k], cb, codes, N, pos, tok, np, x, 0), SCDB_OK);
                assert_int_equal(scdb_pair_decode(m, cb, codes, N, pos, tok, np, y, 0), SCDB_OK);
                double dmax = kv_max_rel(x, y, N);
                print_message("  patch %d: low-rank vs materialised decode: max rel. difference %.2g\n", np, dmax);
                assert_true(dmax <= 1e-5);
            }
            if (k == 0) {
                /* drop the token correction from the reference: it must then differ */
                for (int l = 0; l < m->info.n_layers; l++)
                    if (m->L[l].gk) memcpy(m->L[l].gk, sh1->L[l].gk, (size_t)8 * 16 * sizeof(float));
                assert_int_equal(scdb_pair_decode(lo[k], cb, codes, N, pos, tok, 0, x, 0), SCDB_OK);
                assert_int_equal(scdb_pair_decode(m, cb, codes, N, pos, tok, 0, y, 0), SCDB_OK);
                assert_true(kv_max_rel(x, y, N) > 1e-4);
            }
            scdb_pair_free(&m);
            /* file == memory; the device decode == the CPU decode */
            assert_int_equal(scdb_pair_load(lpath[k], cb, &back, err, sizeof err), SCDB_OK);
            for (int np = 0; np <= 1; np++) {
                assert_int_equal(scdb_pair_decode(lo[k], cb, codes, N, pos, tok, np, x, 0), SCDB_OK);
                assert_int_equal(scdb_pair_decode(back, cb, codes, N, pos, tok, np, y, 0), SCDB_OK);
                assert_memory_equal(x->k, y->k, (size_t)2 * N * 8 * sizeof(float));
                assert_memory_equal(x->v, y->v, (size_t)2 * N * 8 * sizeof(float));
            }
            check_pair_dev(back, cb, 0);
            check_pair_dev(back, cb, 1);
            scdb_pair_free(&back);
        }
    }
    assert_true(e[0][0] + e[0][1] < e[2][0] + e[2][1]);
    assert_true(e[1][0] + e[1][1] < e[2][0] + e[2][1]);

    /* refusals */
    snprintf(ed, sizeof ed, "%s/prod__ed.safetensors", pdir);
    edit_meta(lpath[1], ed, "token_input", "0");      /* the shared part has it */
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "shared part"));
    edit_meta(lpath[0], ed, "token_input", NULL);     /* token_corr without token_input */
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(lpath[0], ed, "token_corr", "0");       /* two tensors too many */
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    edit_meta(lpath[1], ed, "token_corr", "1");       /* its tensors missing */
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "dec_k.v_tok"));
    edit_meta(lpath[0], ed, "token_corr", "3");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    reshape_tensor(lpath[0], ed, "layers.1.dec_v.v_tok", "checksum");
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ESHAPE);
    relabel_tensor(lpath[0], ed, "layers.1.dec_k.v_tok", NULL, SCDB_BF16);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EDTYPE);
    relabel_tensor(lpath[0], ed, "layers.1.dec_k.v_tok", "layers.1.dec_k.w_tok", SCDB_F16);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ENOTFOUND);
    edit_meta(lpath[0], ed, "dec_rank", "3");         /* u and v_tok of rank 2 */
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ESHAPE);
    copy_prefix(lpath[0], ed, -60);
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_ETRUNC);
    /* the shared part's own token tensors, as a full pair's */
    char sp_keep[820];
    snprintf(sp_keep, sizeof sp_keep, "%s.keep", sp);
    assert_int_equal(rename(sp, sp_keep), 0);
    reshape_tensor(sp_keep, sp, "layers.1.dec_k_tok", "checksum");
    assert_int_equal(scdb_pair_load_shared(sp, cb, &q, err, sizeof err), SCDB_ESHAPE);
    assert_int_equal(scdb_pair_load(lpath[0], cb, &q, err, sizeof err), SCDB_ESHAPE);
    assert_non_null(strstr(err, "shared part"));
    assert_int_equal(rename(sp_keep, sp), 0);
    assert_null(q);

    scdb_kv_cache_free(&own);
    scdb_kv_cache_free(&x);
    scdb_kv_cache_free(&y);
    for (int k = 0; k < 3; k++) scdb_pair_free(&lo[k]);
    scdb_pair_free(&sh0);
    scdb_pair_free(&sh1);
    scdb_calib_fleet_free(&fl);
    scdb_calib_free(&f);
    for (int k = 0; k < 2; k++) scdb_model_free(&ad[k]);
    scdb_codebook_free(&cb);
}

/* The fidelity default a pair stores (issue 40; schema/FORMATS.md "Pair",
 * `recompute`, `recompute_figures`): it survives a save and a load, a pair
 * without one is written without the keys (as before them), the setter
 * refuses bad settings, and the loader bad values by name. */
/* scdb_codec_synthesize (bench llama --shape 1b): a codebook and pair of
 * the asked shapes that survive the ordinary save and load (ids, checksums,
 * shapes), and every refusal of a shape that cannot be. */
static void test_synthesize(void **state)
{
    (void)state;
    const scdb_model_config *mc = scdb_model_cfg(prod);
    const char *fp = "0123456789abcdef0123456789abcdef";
    scdb_codec_synth o = {.arch = *mc, .producer = "prod", .consumer = "prod", .producer_fp = fp,
                          .consumer_fp = fp, .r_k = 4, .r_v = 4, .r_h = 6, .n_candidates = 1,
                          .n_patch = 1, .hidden = 8, .all_layers = 1, .token_input = 1, .seed = 7};
    scdb_codebook *cb = NULL, *lcb = NULL;
    scdb_pair *p = NULL, *lp = NULL;
    char err[512] = "", cbp[600], pp[600];
    assert_int_equal(scdb_codec_synthesize(&o, &cb, &p, err, sizeof err), SCDB_OK);
    snprintf(cbp, sizeof cbp, "%s/synth_cb.safetensors", tmpdir);
    snprintf(pp, sizeof pp, "%s/synth_pair.safetensors", tmpdir);
    assert_int_equal(scdb_codebook_save(cb, cbp), SCDB_OK);
    assert_int_equal(scdb_pair_save(p, pp), SCDB_OK);
    assert_int_equal(scdb_codebook_load(cbp, &lcb, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_load(pp, lcb, &lp, err, sizeof err), SCDB_OK);
    const scdb_pair_info *in = scdb_pair_get_info(lp);
    assert_int_equal(in->n_layers, mc->n_layers);
    assert_int_equal(in->d_model, mc->d_model);
    assert_int_equal(in->n_patch, 1);
    assert_int_equal(in->all_input, 1);
    assert_int_equal(in->token_input, 1);
    assert_string_equal(in->consumer_fp, fp);
    assert_int_equal(scdb_codebook_get_info(lcb)->n_candidates, 1);
    scdb_pair_free(&lp);
    scdb_codebook_free(&lcb);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);

    /* layer-local decoders without the token input load too */
    o.all_layers = o.token_input = 0;
    o.n_patch = 0;
    assert_int_equal(scdb_codec_synthesize(&o, &cb, &p, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(p)->all_input, 0);
    assert_int_equal(scdb_pair_get_info(p)->n_patch, 0);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);

    /* refusals: each leaves both outputs NULL and says what is wrong */
    scdb_codec_synth b;
#define REFUSE(EDIT, RC, SAYS) do { \
        b = o; b.all_layers = b.token_input = 1; b.n_patch = 1; EDIT; \
        cb = (scdb_codebook *)1; p = (scdb_pair *)1; err[0] = 0; \
        assert_int_equal(scdb_codec_synthesize(&b, &cb, &p, err, sizeof err), RC); \
        assert_null(cb); assert_null(p); \
        assert_non_null(strstr(err, SAYS)); \
    } while (0)
    REFUSE(b.arch.n_layers = 1, SCDB_ERANGE, "architecture of 1 layers");
    REFUSE(b.r_k = mc->d_model + 1, SCDB_ERANGE, "ranks");
    REFUSE(b.r_v = 0, SCDB_ERANGE, "ranks");
    REFUSE(b.n_candidates = mc->n_layers, SCDB_ERANGE, "candidates");
    REFUSE(b.n_patch = 2, SCDB_ERANGE, "patch budget 2");
    REFUSE(b.hidden = 0, SCDB_ERANGE, "hidden 0");
    REFUSE(b.all_layers = 0, SCDB_EINVAL, "token input needs all-layers");
    REFUSE(b.consumer_fp = "xyz", SCDB_EINVAL, "fingerprint");
#undef REFUSE
    assert_int_equal(scdb_codec_synthesize(NULL, &cb, &p, err, sizeof err), SCDB_EINVAL);
}

static void test_pair_recompute(void **state)
{
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL, *q = NULL;
    scdb_st_file *f = NULL;
    char err[256] = "", path[600], ed[600];
    (void)state;
    if (access(SCDB_DATA_DIR "/pairs/base__code.safetensors", R_OK)) skip();
    assert_int_equal(scdb_codebook_load(SCDB_DATA_DIR "/codebooks/base.safetensors", &cb, err,
                                        sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_load(SCDB_DATA_DIR "/pairs/base__code.safetensors", cb, &p, err,
                                    sizeof err), SCDB_OK);
    snprintf(path, sizeof path, "%s/recompute.safetensors", tmpdir);
    snprintf(ed, sizeof ed, "%s/recompute_edited.safetensors", tmpdir);
    static const scdb_recompute rt[] = {{SCDB_RECOMPUTE_TAIL, 24, 0},
                                        {SCDB_RECOMPUTE_SELECTIVE, 0, 0.15f},
                                        {SCDB_RECOMPUTE_INITIAL, 0, 1.0f}};
    for (int i = 0; i < 3; i++) {
        const char *fig = "top1 0.962 ppl +0.4% kl 0.011 on 8 held-back windows";
        assert_int_equal(scdb_pair_set_recompute(p, &rt[i], fig), SCDB_OK);
        assert_int_equal(scdb_pair_save(p, path), SCDB_OK);
        assert_int_equal(scdb_pair_load(path, cb, &q, err, sizeof err), SCDB_OK);
        const scdb_pair_info *qi = scdb_pair_get_info(q);
        assert_int_equal(qi->recompute.policy, rt[i].policy);
        assert_int_equal(qi->recompute.tokens, rt[i].tokens);
        assert_true(fabsf(qi->recompute.fraction - rt[i].fraction) < 1e-6f);
        assert_string_equal(qi->recompute_figures, fig);
        scdb_pair_free(&q);
    }
    /* none chosen by calibration keeps its figures */
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_NONE, 0, 0}, "x"),
                     SCDB_OK);
    assert_int_equal(scdb_pair_save(p, path), SCDB_OK);
    assert_int_equal(scdb_pair_load(path, cb, &q, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(q)->recompute.policy, SCDB_RECOMPUTE_NONE);
    assert_string_equal(scdb_pair_get_info(q)->recompute_figures, "x");
    scdb_pair_free(&q);
    /* none without figures: the keys are not written */
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_NONE, 0, 0}, NULL),
                     SCDB_OK);
    assert_int_equal(scdb_pair_save(p, path), SCDB_OK);
    assert_int_equal(scdb_st_open(path, &f, NULL, 0), SCDB_OK);
    assert_null(scdb_st_meta(f, "recompute"));
    assert_null(scdb_st_meta(f, "recompute_figures"));
    scdb_st_close(&f);
    /* the setter */
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_DEFAULT, 0, 0}, NULL),
                     SCDB_EINVAL);
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_TAIL, -1, 0}, NULL),
                     SCDB_EINVAL);
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 2.0f}, NULL),
                     SCDB_EINVAL);
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){(scdb_recompute_policy)9, 1, 0},
                                             NULL), SCDB_EINVAL);
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_TAIL, 4, 0},
                                             "two\nlines"), SCDB_EINVAL);
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_TAIL, 4, 0}, "a\tb"),
                     SCDB_EINVAL);
    assert_int_equal(scdb_pair_set_recompute(p, &(scdb_recompute){SCDB_RECOMPUTE_TAIL, 4, 0}, "ok"),
                     SCDB_OK);
    assert_int_equal(scdb_pair_save(p, path), SCDB_OK);
    /* the loader: bad values refused by name */
    static const char *badv[] = {"bogus", "tail:-1", "default", "tail:0%", "selective"};
    for (int i = 0; i < 5; i++) {
        edit_meta(path, ed, "recompute", badv[i]);
        err[0] = 0;
        assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
        assert_null(q);
        assert_non_null(strstr(err, "recompute"));
    }
    edit_meta(path, ed, "recompute", NULL);            /* figures without a setting */
    assert_int_equal(scdb_pair_load(ed, cb, &q, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "recompute_figures"));
    edit_meta(path, ed, "recompute_figures", NULL);    /* neither: as before the keys */
    edit_meta(ed, path, "recompute", NULL);
    assert_int_equal(scdb_pair_load(path, cb, &q, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_pair_get_info(q)->recompute.policy, SCDB_RECOMPUTE_NONE);
    scdb_pair_free(&q);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_encode_decode_shapes),
        cmocka_unit_test(test_int8_codes),
        cmocka_unit_test(test_identity_pair),
        cmocka_unit_test(test_all_layers_pair),
        cmocka_unit_test(test_rank_allocation),
        cmocka_unit_test(test_aligner_training),
        cmocka_unit_test(test_kernel_twins),
        cmocka_unit_test(test_pair_dev_cpu),
        cmocka_unit_test(test_calib_device),
        cmocka_unit_test(test_files_and_refusals),
        cmocka_unit_test(test_legacy_fingerprint),
        cmocka_unit_test(test_codebook_restamp),
        cmocka_unit_test(test_late_added),
        cmocka_unit_test(test_fleet_swap),
        cmocka_unit_test(test_lora_pairs),
        cmocka_unit_test(test_domain_text),
        cmocka_unit_test(test_training_text),
        cmocka_unit_test(test_shipped_pairs),
        cmocka_unit_test(test_token_input),
        cmocka_unit_test(test_token_lora),
        cmocka_unit_test(test_pair_recompute),
        cmocka_unit_test(test_synthesize),
    };
    if (getenv("SCDB_TEST_FILTER")) cmocka_set_test_filter(getenv("SCDB_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
