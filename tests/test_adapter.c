/* test_adapter.c — PEFT LoRA adapters as consumers (schema/peft_adapter.c,
 * model/adapter.c, the adapter side of schema/weights_fp.c).  Claims:
 *
 *   - a loaded adapter computes with W + s B A on exactly its targeted
 *     projections (s = alpha / r, alpha / sqrt(r) with use_rslora), checked
 *     against a reference computed here; the rest is the base's;
 *   - merged and low-rank application give the same logits and K/V (f32
 *     rounding), and low-rank refuses what needs one matrix;
 *   - the fingerprint of an adapter is that of a model directory holding its
 *     merged weights as F32 (so stale-pair refusal keeps working), differs
 *     from the base's and changes with one factor value; F16 / BF16 factors
 *     too;
 *   - the base is found by absolute path, by a models directory, or beside
 *     the adapter (ADAPTER/.., ADAPTER/../../models); else a named error;
 *   - an adapter whose base is of another architecture than the producer's
 *     is refused as a consumer (SCDB_EMISMATCH), one over the producer's
 *     own base is taken;
 *   - every refused feature and bad input gets its own error and a message
 *     naming it, from the loader and from the fingerprint alike;
 *   - every allocation failure of a load returns an error and leaks nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc_fault.h"
#include "codec.h"
#include "model.h"
#include "peft_adapter.h"
#include "safetensors.h"
#include "tiny_model.h"
#include "tiny_adapter.h"
#include "weights_fp.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_adapter_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void sub(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* TMP/models/<name>: a tiny base */
static void write_base(const char *name, uint64_t seed, int layers)
{
    char dir[600];
    uint64_t rng = seed;
    sub(dir, sizeof dir, "models");
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/models/%s", tmpdir, name);
    tiny_model t = {.name = name, .rng = &rng, .layers = layers};
    tiny_model_write(dir, &t);
}

/* TMP/adapters/<name> over base "base" (found at ../../models/base) */
static void adapter_path(char *out, size_t cap, const char *name)
{
    char dir[600];
    sub(dir, sizeof dir, "adapters");
    mkdir(dir, 0755);
    snprintf(out, cap, "%s/adapters/%s", tmpdir, name);
}

static scdb_model *load(const char *dir, scdb_lora_apply mode)
{
    char err[512] = "";
    scdb_model *m = NULL;
    scdb_model_load_opts o = {.lora = mode};
    scdb_err rc = scdb_model_load_ex(dir, &o, &m, err, sizeof err);
    if (rc) fail_msg("%s: %s (%s)", dir, err, scdb_strerror(rc));
    return m;
}

static const float **slot(scdb_layer_weights *w, int m)
{
    const float **s[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w1, &w->w3, &w->w2};
    return s[m];
}

/* ------------------------------------------------------------ merged weights */

static void check_merged(int rslora, scdb_dtype dt, unsigned modules)
{
    char base[600], ad[600], err[512] = "", cfg[200];
    uint64_t rng = 11;
    write_base("base", 1, 0);
    sub(base, sizeof base, "models/base");
    adapter_path(ad, sizeof ad, "merged");
    unsigned targets = modules ? modules : (1u << SCDB_LORA_N_MODULES) - 1;
    char list[200] = "[";
    for (int m = 0; m < SCDB_LORA_N_MODULES; m++)
        if (targets & (1u << m))
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", list[1] ? "," : "",
                     scdb_lora_module_name(m));
    snprintf(cfg, sizeof cfg, "{\"use_rslora\":%s,\"target_modules\":%s]}", rslora ? "true" : "false", list);
    tiny_adapter a = {.base = "base", .r = 4, .alpha = 6, .rng = &rng, .dtype = dt, .modules = modules,
                      .config = cfg};
    tiny_adapter_write(ad, &a);

    scdb_model *bm = load(base, SCDB_LORA_MERGED), *am = load(ad, SCDB_LORA_MERGED);
    scdb_adapter *x = NULL;
    assert_int_equal(scdb_adapter_open(ad, NULL, &x, err, sizeof err), SCDB_OK);
    double s = rslora ? 6.0 / 2.0 : 6.0 / 4.0;
    assert_float_equal(x->scale, s, 1e-7);
    const scdb_model_config *c = scdb_model_cfg(am);
    assert_string_equal(c->parent, "base");
    assert_string_equal(c->finetune, "lora");
    assert_string_equal(c->name, "merged");
    assert_non_null(scdb_model_base_dir(am));
    assert_null(scdb_model_base_dir(bm));
    int changed = 0;
    for (int l = 0; l < c->n_layers; l++) {
        scdb_layer_weights bw = *scdb_model_layer(bm, l), aw = *scdb_model_layer(am, l);
        assert_memory_equal(bw.attn_norm, aw.attn_norm, (size_t)c->d_model * sizeof(float));
        for (int m = 0; m < SCDB_LORA_N_MODULES; m++) {
            const scdb_lora_target *t = scdb_adapter_find(x, l, m);
            const float *W = *slot(&bw, m), *Wm = *slot(&aw, m);
            int64_t out = t ? t->b->shape[0] : 0, in = t ? t->a->shape[1] : 0;
            assert_true(!t == !(targets & (1u << m)));
            if (!t) {
                static const size_t numel[SCDB_LORA_N_MODULES] = {256, 128, 128, 256, 384, 384, 384};
                assert_memory_equal(W, Wm, numel[m] * sizeof(float));   /* tiny_model's shapes */
                continue;
            }
            float *A = malloc((size_t)(4 * in) * sizeof *A), *B = malloc((size_t)(out * 4) * sizeof *B);
            assert_int_equal(scdb_st_to_f32(t->a, 0, (size_t)(4 * in), A), SCDB_OK);
            assert_int_equal(scdb_st_to_f32(t->b, 0, (size_t)(out * 4), B), SCDB_OK);
            for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < in; i++) {
                    double acc = 0;
                    for (int k = 0; k < 4; k++) acc += (double)B[o * 4 + k] * A[k * in + i];
                    float want = (float)((double)W[o * in + i] + (double)(float)s * acc);
                    assert_true(Wm[o * in + i] == want);     /* the rule, bit for bit */
                    changed += Wm[o * in + i] != W[o * in + i];
                }
            free(A);
            free(B);
        }
    }
    assert_true(changed > 100);
    scdb_adapter_close(&x);
    scdb_model_free(&am);
    scdb_model_free(&bm);
}

static void test_merged_weights(void **state)
{
    (void)state;
    check_merged(0, SCDB_F32, 0);
    check_merged(1, SCDB_F32, 0);
    check_merged(0, SCDB_BF16, 0);
    check_merged(0, SCDB_F16, (1u << SCDB_LORA_Q) | (1u << SCDB_LORA_V) | (1u << SCDB_LORA_DOWN));
}

/* ------------------------------------------------------------ merged vs low-rank */

static void forward(const scdb_model *m, const int32_t *tok, int n, float *logits)
{
    scdb_kv_cache *c = NULL;
    assert_int_equal(scdb_model_cache_new(m, 64, &c), SCDB_OK);
    assert_int_equal(scdb_model_forward(m, tok, NULL, n, c, logits, NULL), SCDB_OK);
    scdb_kv_cache_free(&c);
}

static void test_merged_vs_lowrank(void **state)
{
    (void)state;
    char base[600], ad[600];
    uint64_t rng = 5;
    write_base("base", 1, 0);
    sub(base, sizeof base, "models/base");
    adapter_path(ad, sizeof ad, "lr");
    tiny_adapter a = {.base = "base", .r = 3, .alpha = 12, .rng = &rng, .scale = 0.3f};
    tiny_adapter_write(ad, &a);
    scdb_model *bm = load(base, SCDB_LORA_MERGED), *mm = load(ad, SCDB_LORA_MERGED),
               *lm = load(ad, SCDB_LORA_LOWRANK);
    int n = 40, V = scdb_model_cfg(mm)->vocab_size;
    int32_t tok[40];
    for (int i = 0; i < n; i++) tok[i] = (i * 37 + 11) % V;
    float *lb = malloc((size_t)n * V * sizeof *lb), *l1 = malloc((size_t)n * V * sizeof *l1),
          *l2 = malloc((size_t)n * V * sizeof *l2);
    forward(bm, tok, n, lb);
    forward(mm, tok, n, l1);
    forward(lm, tok, n, l2);
    double maxd = 0, maxb = 0;
    for (int i = 0; i < n * V; i++) {
        maxd = fmax(maxd, fabs((double)l1[i] - l2[i]));
        maxb = fmax(maxb, fabs((double)l1[i] - lb[i]));
    }
    /* logits ~ 1-10: f32 rounding of two summation orders, vs a real change */
    assert_true(maxd < 1e-4);
    assert_true(maxb > 1e-2);
    print_message("merged vs low-rank: max |dlogit| %.3g (vs base %.3g)\n", maxd, maxb);

    /* K/V from h_in: the codec's path */
    const scdb_model_config *c = scdb_model_cfg(mm);
    int kvd = scdb_model_kv_dim(c);
    float h[4 * 16], k1[4 * 8], v1[4 * 8], k2[4 * 8], v2[4 * 8];
    int32_t pos[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4 * c->d_model; i++) h[i] = tiny_frand(&rng);
    scdb_model_kv_from_hin(mm, 1, h, pos, 4, k1, v1);
    scdb_model_kv_from_hin(lm, 1, h, pos, 4, k2, v2);
    for (int i = 0; i < 4 * kvd; i++) {
        assert_float_equal(k1[i], k2[i], 1e-5);
        assert_float_equal(v1[i], v2[i], 1e-5);
    }
    /* low-rank: no single matrix, no device copy */
    assert_null(scdb_model_layer(lm, 0));
    assert_non_null(scdb_model_layer(mm, 0));
    scdb_model_dev *d = NULL;
    assert_int_equal(scdb_model_dev_new(lm, SCDB_DEV_CPU, &d), SCDB_EUNSUPPORTED);
    assert_null(d);
    assert_int_equal(scdb_model_dev_new(mm, SCDB_DEV_CPU, &d), SCDB_OK);
    scdb_model_dev_free(&d);
    /* an unknown mode */
    scdb_model *x = NULL;
    scdb_model_load_opts bad = {.lora = (scdb_lora_apply)7};
    assert_int_equal(scdb_model_load_ex(ad, &bad, &x, NULL, 0), SCDB_EINVAL);
    free(lb); free(l1); free(l2);
    scdb_model_free(&bm);
    scdb_model_free(&mm);
    scdb_model_free(&lm);
}

/* ------------------------------------------------------------ fingerprint */

/* DIR: the loaded model's weights in scdb's own layout, F32 */
static void dump_own(const scdb_model *m, const char *dir)
{
    const scdb_model_config *c = scdb_model_cfg(m);
    char path[700];
    scdb_st_writer *w;
    int qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c), d = c->d_model;
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"name\":\"dump\",\"arch\":\"llama\",\"vocab_size\":%d,\"d_model\":%d,\"n_layers\":%d,"
               "\"n_heads\":%d,\"n_kv_heads\":%d,\"head_dim\":%d,\"d_ff\":%d,\"max_seq_len\":64,"
               "\"rope_theta\":10000.0,\"norm_eps\":1e-5}",
            c->vocab_size, d, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->d_ff);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    const float *emb, *norm, *out;
    scdb_model_globals(m, &emb, &norm, &out);
    int64_t se[2] = {c->vocab_size, d}, sn[1] = {d};
    assert_int_equal(scdb_st_writer_add(w, "tok_embeddings.weight", SCDB_F32, 2, se, emb), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "norm.weight", SCDB_F32, 1, sn, norm), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "output.weight", SCDB_F32, 2, se, out), SCDB_OK);
    for (int l = 0; l < c->n_layers; l++) {
        const scdb_layer_weights *lw = scdb_model_layer(m, l);
        struct { const char *n; int64_t d0, d1; const float *p; } t[] = {
            {"attention_norm.weight", d, 0, lw->attn_norm}, {"attention.wq.weight", qd, d, lw->wq},
            {"attention.wk.weight", kvd, d, lw->wk},        {"attention.wv.weight", kvd, d, lw->wv},
            {"attention.wo.weight", d, qd, lw->wo},         {"ffn_norm.weight", d, 0, lw->ffn_norm},
            {"feed_forward.w1.weight", c->d_ff, d, lw->w1}, {"feed_forward.w2.weight", d, c->d_ff, lw->w2},
            {"feed_forward.w3.weight", c->d_ff, d, lw->w3}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            char name[128];
            int64_t sh[2] = {t[i].d0, t[i].d1};
            snprintf(name, sizeof name, "layers.%d.%s", l, t[i].n);
            assert_int_equal(scdb_st_writer_add(w, name, SCDB_F32, t[i].d1 ? 2 : 1, sh, t[i].p), SCDB_OK);
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
}

static void fp_of(const char *dir, const char *models_dir, char fp[33])
{
    char err[512] = "";
    scdb_err rc = scdb_weights_fp_ex(dir, models_dir, fp, err, sizeof err);
    if (rc) fail_msg("%s: %s (%s)", dir, err, scdb_strerror(rc));
}

static void test_fingerprint(void **state)
{
    (void)state;
    char base[600], ad[600], dump[600], fa[33], fb[33], fd[33], f2[33];
    write_base("base", 1, 0);
    sub(base, sizeof base, "models/base");
    for (int dt = 0; dt < 3; dt++) {
        uint64_t rng = 21;
        adapter_path(ad, sizeof ad, "fp");
        tiny_adapter a = {.base = "base", .rng = &rng, .dtype = (scdb_dtype)dt,
                          .config = dt == 2 ? "{\"use_rslora\":true}" : NULL};
        tiny_adapter_write(ad, &a);
        scdb_model *m = load(ad, SCDB_LORA_MERGED);
        sub(dump, sizeof dump, "dump");
        dump_own(m, dump);
        fp_of(ad, NULL, fa);
        fp_of(dump, NULL, fd);
        fp_of(base, NULL, fb);
        assert_string_equal(fa, fd);          /* the merged weights' fingerprint */
        assert_string_not_equal(fa, fb);
        assert_int_equal(scdb_weights_fp(ad, f2, NULL, 0), SCDB_OK);
        assert_string_equal(fa, f2);
        scdb_model_free(&m);
    }
    /* one factor value changed: another fingerprint */
    uint64_t rng = 21;
    tiny_adapter a = {.base = "base", .rng = &rng};
    tiny_adapter_write(ad, &a);
    fp_of(ad, NULL, fa);
    rng = 21;
    a.scale = 0.2000001f;
    tiny_adapter_write(ad, &a);
    fp_of(ad, NULL, f2);
    assert_string_not_equal(fa, f2);
}

/* ------------------------------------------------------------ the base */

static void expect_load(const char *dir, const char *models_dir, scdb_err want, const char *needle)
{
    char err[512] = "", fp[33];
    scdb_model *m = NULL;
    scdb_model_load_opts o = {.models_dir = models_dir};
    scdb_err rc = scdb_model_load_ex(dir, &o, &m, err, sizeof err);
    if (rc != want || (needle && !strstr(err, needle)))
        fail_msg("%s: got %s '%s', want %s '%s'", dir, scdb_strerror(rc), err, scdb_strerror(want),
                 needle ? needle : "");
    if (rc == SCDB_OK) assert_non_null(m);
    else assert_null(m);
    scdb_model_free(&m);
    /* the fingerprint reads the same directory the same way */
    err[0] = '\0';
    rc = scdb_weights_fp_ex(dir, models_dir, fp, err, sizeof err);
    if (rc != want || (needle && !strstr(err, needle)))
        fail_msg("fingerprint %s: got %s '%s', want %s '%s'", dir, scdb_strerror(rc), err,
                 scdb_strerror(want), needle ? needle : "");
}

static void test_base_resolution(void **state)
{
    (void)state;
    char ad[600], cfg[700], models[500], other[600], sib[600];
    uint64_t rng = 3;
    write_base("base", 1, 0);
    sub(models, sizeof models, "models");
    /* ../../models/base from TMP/adapters/x */
    adapter_path(ad, sizeof ad, "x");
    tiny_adapter a = {.base = "base", .rng = &rng};
    tiny_adapter_write(ad, &a);
    expect_load(ad, NULL, SCDB_OK, NULL);
    expect_load(ad, models, SCDB_OK, NULL);
    /* a models directory without it: only that directory is looked in */
    sub(other, sizeof other, "elsewhere");
    mkdir(other, 0755);
    expect_load(ad, other, SCDB_ENOTFOUND, "base model 'base' not found");
    /* an absolute path */
    snprintf(cfg, sizeof cfg, "{\"base_model_name_or_path\":\"%s/base\"}", models);
    a.config = cfg;
    tiny_adapter_write(ad, &a);
    expect_load(ad, other, SCDB_OK, NULL);
    /* a sibling: TMP/models/y over "base" */
    snprintf(sib, sizeof sib, "%s/y", models);
    a.config = NULL;
    tiny_adapter_write(sib, &a);
    expect_load(sib, NULL, SCDB_OK, NULL);
    /* a hub id that is nowhere */
    a.config = "{\"base_model_name_or_path\":\"meta-llama/Llama-2-7b-hf\"}";
    tiny_adapter_write(ad, &a);
    expect_load(ad, NULL, SCDB_ENOTFOUND, "'meta-llama/Llama-2-7b-hf' not found");
    /* a base that is itself an adapter */
    a.config = "{\"base_model_name_or_path\":\"y\"}";
    tiny_adapter_write(ad, &a);
    expect_load(ad, models, SCDB_EUNSUPPORTED, "itself an adapter");
    /* a base of other dimensions: the factors do not fit */
    rng = 9;
    tiny_model t = {.name = "wide", .rng = &rng, .d = 24, .hd = 6};
    snprintf(other, sizeof other, "%s/wide", models);
    tiny_model_write(other, &t);
    a.config = "{\"base_model_name_or_path\":\"wide\"}";
    tiny_adapter_write(ad, &a);
    expect_load(ad, NULL, SCDB_ESHAPE, "do not fit the base");
    /* a base with fewer layers than the adapter */
    write_base("short", 4, 1);
    a.config = "{\"base_model_name_or_path\":\"short\"}";
    tiny_adapter_write(ad, &a);
    expect_load(ad, NULL, SCDB_ESHAPE, "the base has 1 layers");
    /* a base with more layers: factors missing for layer 2 */
    write_base("deep", 4, 3);
    a.config = "{\"base_model_name_or_path\":\"deep\"}";
    tiny_adapter_write(ad, &a);
    expect_load(ad, NULL, SCDB_ENOTFOUND, "no lora_A / lora_B for layer 2 q_proj");
}

/* An adapter as the consumer of a producer: the architecture check sees its
 * base's. */
static void test_consumer_arch(void **state)
{
    (void)state;
    char base[600], wide[600], ad[600], ad2[600];
    uint64_t rng = 13;
    write_base("base", 1, 0);
    sub(base, sizeof base, "models/base");
    sub(wide, sizeof wide, "models/wide");
    tiny_model t = {.name = "wide", .rng = &rng, .ff = 32};
    tiny_model_write(wide, &t);
    adapter_path(ad, sizeof ad, "same");
    adapter_path(ad2, sizeof ad2, "other");
    tiny_adapter a = {.base = "base", .rng = &rng};
    tiny_adapter_write(ad, &a);
    tiny_adapter b = {.base = "wide", .rng = &rng, .ff = 32};
    tiny_adapter_write(ad2, &b);
    scdb_model *p = load(base, SCDB_LORA_MERGED), *same = load(ad, SCDB_LORA_MERGED),
               *other = load(ad2, SCDB_LORA_MERGED);
    scdb_calib *c = NULL;
    const scdb_model *cons[2] = {same, other};
    scdb_calib_opts o = {.window = 32, .eval_prefix = 24, .eval_cont = 8};   /* tiny max_seq_len 64 */
    assert_int_equal(scdb_calib_new(p, cons, 1, &o, &c), SCDB_OK);
    scdb_calib_free(&c);
    assert_int_equal(scdb_calib_new(p, cons, 2, &o, &c), SCDB_EMISMATCH);
    assert_null(c);
    assert_int_equal(scdb_calib_new(p, cons + 1, 1, &o, &c), SCDB_EMISMATCH);
    scdb_model_free(&p);
    scdb_model_free(&same);
    scdb_model_free(&other);
}

/* ------------------------------------------------------------ refusals */

typedef struct bad_case {
    const char *config, *raw, *skip, *bad_shape, *as_i32, *extra;
    unsigned modules;
    int rank_plus, layers_extra;
    scdb_err want;
    const char *needle;
} bad_case;

#define L0 "base_model.model.model.layers.0."
#define L1 "base_model.model.model.layers.1."

static const bad_case BAD[] = {
    {.config = "{\"use_dora\":true}", .want = SCDB_EUNSUPPORTED, .needle = "DoRA"},
    {.config = "{\"bias\":\"all\"}", .want = SCDB_EUNSUPPORTED, .needle = "bias \"all\""},
    {.config = "{\"bias\":\"lora_only\"}", .want = SCDB_EUNSUPPORTED, .needle = "bias \"lora_only\""},
    {.config = "{\"bias\":7}", .want = SCDB_EFORMAT, .needle = "bias must be a string"},
    {.config = "{\"modules_to_save\":[\"lm_head\"]}", .want = SCDB_EUNSUPPORTED, .needle = "modules_to_save"},
    {.config = "{\"fan_in_fan_out\":true}", .want = SCDB_EUNSUPPORTED, .needle = "fan_in_fan_out"},
    {.config = "{\"layers_to_transform\":[0]}", .want = SCDB_EUNSUPPORTED, .needle = "layers_to_transform"},
    {.config = "{\"rank_pattern\":{\"q_proj\":2}}", .want = SCDB_EUNSUPPORTED, .needle = "rank_pattern"},
    {.config = "{\"alpha_pattern\":{\"q_proj\":2}}", .want = SCDB_EUNSUPPORTED, .needle = "alpha_pattern"},
    {.config = "{\"target_modules\":[\"q_proj\",\"embed_tokens\"]}", .want = SCDB_EUNSUPPORTED,
     .needle = "target module 'embed_tokens'"},
    {.config = "{\"target_modules\":[\"lm_head\"]}", .want = SCDB_EUNSUPPORTED, .needle = "target module 'lm_head'"},
    {.config = "{\"target_modules\":[\"q\"]}", .want = SCDB_EUNSUPPORTED, .needle = "target module 'q'"},
    {.config = "{\"target_modules\":\".*_proj\"}", .want = SCDB_EUNSUPPORTED, .needle = "as a pattern"},
    {.config = "{\"target_modules\":[]}", .want = SCDB_EFORMAT, .needle = "non-empty list"},
    {.config = "{\"target_modules\":[3]}", .want = SCDB_EFORMAT, .needle = "must be strings"},
    {.config = "{\"target_modules\":\"__drop__\"}", .want = SCDB_EFORMAT, .needle = "'target_modules' is missing"},
    {.config = "{\"peft_type\":\"PREFIX_TUNING\"}", .want = SCDB_EUNSUPPORTED, .needle = "peft_type \"PREFIX_TUNING\""},
    {.config = "{\"peft_type\":\"__drop__\"}", .want = SCDB_EFORMAT, .needle = "'peft_type' is missing"},
    {.config = "{\"r\":\"__drop__\"}", .want = SCDB_EFORMAT, .needle = "r must be an integer (it is missing)"},
    {.config = "{\"r\":2.5}", .want = SCDB_EFORMAT, .needle = "r must be an integer"},
    {.config = "{\"r\":\"4\"}", .want = SCDB_EFORMAT, .needle = "r must be an integer"},
    {.config = "{\"r\":0}", .want = SCDB_ERANGE, .needle = "r = 0 is out of range"},
    {.config = "{\"r\":5000}", .want = SCDB_ERANGE, .needle = "r = 5000 is out of range"},
    {.config = "{\"lora_alpha\":\"__drop__\"}", .want = SCDB_EFORMAT, .needle = "lora_alpha must be a number (it is missing)"},
    {.config = "{\"lora_alpha\":-1}", .want = SCDB_ERANGE, .needle = "lora_alpha = -1"},
    {.config = "{\"lora_alpha\":0}", .want = SCDB_ERANGE, .needle = "lora_alpha = 0"},
    {.config = "{\"use_rslora\":\"yes\"}", .want = SCDB_EFORMAT, .needle = "use_rslora must be true or false"},
    {.config = "{\"base_model_name_or_path\":\"__drop__\"}", .want = SCDB_EFORMAT, .needle = "base_model_name_or_path"},
    {.config = "{\"base_model_name_or_path\":\"\"}", .want = SCDB_EFORMAT, .needle = "base_model_name_or_path"},
    {.config = "{\"base_model_name_or_path\":\"nope\"}", .want = SCDB_ENOTFOUND, .needle = "base model 'nope' not found"},
    {.raw = "{\"peft_type\": \"LORA\",", .want = SCDB_EFORMAT, .needle = "not a JSON object"},
    {.raw = "[1, 2]", .want = SCDB_EFORMAT, .needle = "not a JSON object"},
    {.raw = "", .want = SCDB_EFORMAT, .needle = "not a JSON object"},
    /* the tensors */
    {.skip = L1 "self_attn.k_proj.lora_B.weight", .want = SCDB_EFORMAT, .needle = "layer 1 k_proj has lora_A but no lora_B"},
    {.skip = L0 "mlp.up_proj.lora_A.weight", .want = SCDB_EFORMAT, .needle = "layer 0 up_proj has lora_B but no lora_A"},
    {.modules = 0x7f & ~(1u << SCDB_LORA_O), .want = SCDB_ENOTFOUND, .needle = "no lora_A / lora_B for layer 0 o_proj"},
    {.config = "{\"target_modules\":[\"q_proj\",\"v_proj\"]}", .want = SCDB_EFORMAT,
     .needle = "is for k_proj, which target_modules does not name"},
    {.bad_shape = L1 "self_attn.o_proj.lora_A.weight", .want = SCDB_ESHAPE, .needle = "layer 1 o_proj: lora_A [4, 17]"},
    {.bad_shape = L0 "mlp.down_proj.lora_B.weight", .want = SCDB_ESHAPE, .needle = "do not fit the base's weight [16, 24]"},
    {.rank_plus = 1, .want = SCDB_ESHAPE, .needle = "shape[0] = r = 4"},
    {.layers_extra = 1, .want = SCDB_ESHAPE, .needle = "layer 2 q_proj: the base has 2 layers"},
    {.as_i32 = L0 "self_attn.q_proj.lora_A.weight", .want = SCDB_EDTYPE, .needle = "dtype I32"},
    {.extra = "base_model.model.lm_head.weight", .want = SCDB_EUNSUPPORTED, .needle = "lm_head"},
    {.extra = "base_model.model.model.embed_tokens.lora_A.weight", .want = SCDB_EUNSUPPORTED, .needle = "embed_tokens"},
    {.extra = L0 "self_attn.q_proj.lora_magnitude_vector", .want = SCDB_EUNSUPPORTED, .needle = "DoRA is not supported"},
    {.extra = L0 "self_attn.q_proj.bias", .want = SCDB_EUNSUPPORTED, .needle = "is a bias"},
    {.extra = L0 "self_attn.q_proj.lora_A.default.weight", .want = SCDB_EFORMAT, .needle = "not a LoRA factor"},
    {.extra = "base_model.model.model.layers.01.self_attn.q_proj.lora_A.weight", .want = SCDB_EFORMAT, .needle = "not a LoRA factor"},
    {.extra = "model.layers.0.self_attn.q_proj.lora_A.weight", .want = SCDB_EFORMAT, .needle = "not a LoRA factor"},
    {.extra = "base_model.model.model.layers.0.self_attn.rotary_emb.lora_A.weight", .want = SCDB_EFORMAT,
     .needle = "not a LoRA factor"},
};

static void test_refusals(void **state)
{
    (void)state;
    char ad[600];
    write_base("base", 1, 0);
    adapter_path(ad, sizeof ad, "bad");
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *b = &BAD[i];
        uint64_t rng = 99;
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", ad);
        assert_int_equal(system(cmd), 0);
        tiny_adapter a = {.base = "base", .rng = &rng, .config = b->config, .raw_config = b->raw,
                          .skip = b->skip, .bad_shape = b->bad_shape, .as_i32 = b->as_i32,
                          .extra = b->extra, .modules = b->modules, .rank_plus = b->rank_plus,
                          .layers_extra = b->layers_extra};
        tiny_adapter_write(ad, &a);
        expect_load(ad, NULL, b->want, b->needle);
    }
}

/* The weight file: missing, truncated, mislabelled. */
static void test_bad_files(void **state)
{
    (void)state;
    char ad[600], path[700], *buf = NULL;
    size_t len = 0;
    uint64_t rng = 1;
    write_base("base", 1, 0);
    adapter_path(ad, sizeof ad, "file");
    tiny_adapter a = {.base = "base", .rng = &rng};
    tiny_adapter_write(ad, &a);
    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_WEIGHTS, ad);
    assert_int_equal(scdb_read_file(path, 1 << 24, &buf, &len), SCDB_OK);
    /* truncated: the data section cut short */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len - 64, f), len - 64);
    fclose(f);
    expect_load(ad, NULL, SCDB_ERANGE, SCDB_ADAPTER_WEIGHTS);
    /* shorter than its header */
    f = fopen(path, "wb");
    fwrite(buf, 1, 12, f);
    fclose(f);
    expect_load(ad, NULL, SCDB_ETRUNC, SCDB_ADAPTER_WEIGHTS);
    /* mislabelled: F32 data called F16 (byte sizes no longer match) */
    for (size_t i = 8; i + 3 < len; i++)
        if (!memcmp(buf + i, "\"F32\"", 5)) { memcpy(buf + i, "\"F16\"", 5); break; }
    f = fopen(path, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    expect_load(ad, NULL, SCDB_ESHAPE, SCDB_ADAPTER_WEIGHTS);
    /* missing */
    unlink(path);
    expect_load(ad, NULL, SCDB_ENOTFOUND, "adapter_model.safetensors: no such file");
    /* an empty file of factors */
    scdb_st_writer *w;
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    expect_load(ad, NULL, SCDB_ENOTFOUND, "holds no LoRA factor");
    free(buf);
}

/* ------------------------------------------------------------ allocation failures */

static void test_alloc_failures(void **state)
{
    (void)state;
    char ad[600];
    uint64_t rng = 8;
    write_base("base", 1, 0);
    adapter_path(ad, sizeof ad, "oom");
    tiny_adapter a = {.base = "base", .rng = &rng, .dtype = SCDB_BF16};
    tiny_adapter_write(ad, &a);
    alloc_fault_cjson(1);
    for (int mode = 0; mode < 3; mode++) {
        int done = 0;
        for (long n = 0; !done && n < 100000; n++) {
            scdb_model *m = NULL;
            char fp[33];
            scdb_model_load_opts o = {.lora = mode == 1 ? SCDB_LORA_LOWRANK : SCDB_LORA_MERGED};
            alloc_fault_arm(n);
            scdb_err rc = mode < 2 ? scdb_model_load_ex(ad, &o, &m, NULL, 0)
                                   : scdb_weights_fp(ad, fp, NULL, 0);
            alloc_fault_disarm();
            if (!alloc_fault_hit()) {
                assert_int_equal(rc, SCDB_OK);
                done = 1;
            } else {
                assert_int_not_equal(rc, SCDB_OK);
                assert_null(m);
            }
            scdb_model_free(&m);
        }
        assert_true(done);
    }
    alloc_fault_cjson(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merged_weights),
        cmocka_unit_test(test_merged_vs_lowrank),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_base_resolution),
        cmocka_unit_test(test_consumer_arch),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
