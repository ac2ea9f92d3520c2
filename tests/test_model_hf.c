/* test_model_hf.c — Hugging Face Llama checkpoints (model/hf_checkpoint.c).
 *
 * The test writes the Hugging Face layout itself, from models in scdb's own
 * layout, with the safetensors writer: a tiny random model (and its bad
 * variants) and every bundled family model.  Claims:
 *
 *   - f32, one file or sharded: logits bit-identical to the own layout;
 *   - f16 / bf16: bit-identical to the own layout stored in the same dtype
 *     (the conversion at load is the same), and within a stated tolerance
 *     of the f32 model;
 *   - tools/export_hf.py (when python3 is on PATH) writes checkpoints that
 *     give the same logits as this file's exporter;
 *   - bad input: each case gets its own scdb_err and a message naming the
 *     file, key or tensor at fault;
 *   - running out of memory at any allocation of a load (own layout, one
 *     HF file, HF shards in bf16) returns an error and leaks nothing (the
 *     ASan build checks the leaks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc_fault.h"
#include "hf_export.h"
#include "model.h"
#include "safetensors.h"

/* f16 / bf16 weights vs f32: max |logit difference| over the inputs (logits
 * of magnitude ~10; f16 keeps 11 significant bits, bf16 8).  Measured on
 * the family: f16 <= 8.6e-3, bf16 <= 7.5e-2; the limits leave 3x. */
#define TOL_F16 0.03
#define TOL_BF16 0.25

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_model_hf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    return scdb_rm_tree(tmpdir) == 0 ? 0 : -1;
}

static void rmrf(const char *dir) { assert_int_equal(scdb_rm_tree(dir), 0); }

/* ------------------------------------------------------------ logits */

/* Logits of the first n tokens of a fixed byte pattern (or `text`). */
static float *logits_of(const char *dir, const unsigned char *text, int n)
{
    char err[512];
    scdb_model *m;
    scdb_kv_cache *cache;
    scdb_err rc = scdb_model_load(dir, &m, err, sizeof err);
    if (rc) fail_msg("%s: %s (%s)", dir, err, scdb_strerror(rc));
    const scdb_model_config *c = scdb_model_cfg(m);
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    float *lg = malloc((size_t)n * c->vocab_size * sizeof *lg);
    assert_non_null(tok);
    assert_non_null(lg);
    for (int i = 0; i < n; i++) tok[i] = text ? text[i] : (i * 37 + 11) % 256;
    assert_int_equal(scdb_model_cache_new(m, n, &cache), SCDB_OK);
    assert_int_equal(scdb_model_forward(m, tok, NULL, n, cache, lg, NULL), SCDB_OK);
    scdb_kv_cache_free(&cache);
    scdb_model_free(&m);
    free(tok);
    return lg;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) if (fabs((double)a[i] - b[i]) > mx) mx = fabs((double)a[i] - b[i]);
    return mx;
}

static const tiny_cfg TINY = {300, 16, 2, 4, 2, 4, 24};   /* vocab 300: not bytes only */
enum { NTOK = 24 };

static void test_tiny_layouts(void **state)
{
    (void)state;
    char own[512], dir[512], twin[512];
    size_t nl = (size_t)NTOK * TINY.vocab;
    snprintf(own, sizeof own, "%s/tiny_own", tmpdir);
    write_tiny_own(own, &TINY);
    float *ref = logits_of(own, NULL, NTOK);

    /* f32: one file, 1..5 shards, without head_dim: bit-identical */
    for (int shards = 0; shards <= 5; shards++) {
        exp_opts o = {.hf = 1, .dtype = SCDB_F32, .shards = shards, .no_head_dim = shards == 2};
        snprintf(dir, sizeof dir, "%s/tiny_hf_f32_%d", tmpdir, shards);
        export_model(own, dir, &o);
        float *got = logits_of(dir, NULL, NTOK);
        assert_memory_equal(got, ref, nl * sizeof(float));
        free(got);
        rmrf(dir);
    }
    /* f16 / bf16: the same bits as the own layout in that dtype, close to f32 */
    scdb_dtype dts[2] = {SCDB_F16, SCDB_BF16};
    double tol[2] = {TOL_F16, TOL_BF16};
    for (int d = 0; d < 2; d++) {
        exp_opts o = {.hf = 1, .dtype = dts[d], .shards = d * 3};
        exp_opts ot = {.hf = 0, .dtype = dts[d]};
        snprintf(dir, sizeof dir, "%s/tiny_hf_%s", tmpdir, scdb_dtype_name(dts[d]));
        snprintf(twin, sizeof twin, "%s/tiny_own_%s", tmpdir, scdb_dtype_name(dts[d]));
        export_model(own, dir, &o);
        export_model(own, twin, &ot);
        float *got = logits_of(dir, NULL, NTOK), *want = logits_of(twin, NULL, NTOK);
        assert_memory_equal(got, want, nl * sizeof(float));
        double mx = max_abs_diff(got, ref, nl);
        print_message("tiny %s: max |logit - f32| = %.2e (tolerance %g)\n",
                      scdb_dtype_name(dts[d]), mx, tol[d]);
        assert_true(mx <= tol[d]);
        free(got);
        free(want);
        rmrf(dir);
        rmrf(twin);
    }
    free(ref);
}

/* tie_word_embeddings: no lm_head, logits from the embedding matrix; the own
 * layout with output.weight = tok_embeddings gives the same bits */
static void test_tied_and_config(void **state)
{
    (void)state;
    char own[512], dir[512], err[512], path[700];
    snprintf(own, sizeof own, "%s/tied_own", tmpdir);
    write_tiny_own(own, &TINY);
    snprintf(dir, sizeof dir, "%s/tied_hf", tmpdir);
    exp_opts o = {.hf = 1, .dtype = SCDB_F32, .tied = 1};
    export_model(own, dir, &o);

    /* rewrite the own model with output = embeddings */
    scdb_st_file *st;
    snprintf(path, sizeof path, "%s/model.safetensors", own);
    assert_int_equal(scdb_st_open(path, &st, err, sizeof err), SCDB_OK);
    scdb_st_writer *w;
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    const scdb_st_tensor *emb = scdb_st_find(st, "tok_embeddings.weight");
    for (int i = 0; i < scdb_st_count(st); i++) {
        const scdb_st_tensor *t = scdb_st_at(st, i);
        const void *data = strcmp(t->name, "output.weight") ? t->data : emb->data;
        assert_int_equal(scdb_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, data), SCDB_OK);
    }
    char own2[512];
    snprintf(own2, sizeof own2, "%s/tied_own2", tmpdir);
    mkdir(own2, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", own2);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    scdb_st_close(&st);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/'", own, own2);
    assert_int_equal(system(cmd), 0);
    float *a = logits_of(dir, NULL, NTOK), *b = logits_of(own2, NULL, NTOK);
    assert_memory_equal(a, b, (size_t)NTOK * TINY.vocab * sizeof(float));
    free(a);
    free(b);

    /* what the config says comes through: layout, name, tie, defaults */
    scdb_model_config c;
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(scdb_model_config_load(path, &c, err, sizeof err), SCDB_OK);
    assert_int_equal(c.layout, SCDB_LAYOUT_HF);
    assert_int_equal(c.tied_embeddings, 1);
    assert_string_equal(c.name, "tiny");
    assert_int_equal(c.d_model, 16);
    assert_int_equal(c.head_dim, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.vocab_size, 300);
    const char *minimal =
        "{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
        "\"intermediate_size\":100,\"vocab_size\":32000,\"max_position_embeddings\":4096,"
        "\"rms_norm_eps\":1e-6,\"_name_or_path\":\"org/Some-Llama-7b\"}";
    assert_int_equal(scdb_model_config_parse(minimal, strlen(minimal), &c, err, sizeof err), SCDB_OK);
    assert_int_equal(c.n_kv_heads, 8);           /* LlamaConfig's defaults */
    assert_int_equal(c.head_dim, 8);
    assert_true(c.rope_theta == 10000.0f);
    assert_int_equal(c.tied_embeddings, 0);
    assert_string_equal(c.name, "Some-Llama-7b");
    /* no name anywhere: the directory's */
    char nd[512];
    snprintf(nd, sizeof nd, "%s/my-llama", tmpdir);
    mkdir(nd, 0755);
    snprintf(path, sizeof path, "%s/config.json", nd);
    write_text(path, "{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
                     "\"intermediate_size\":100,\"vocab_size\":100,\"max_position_embeddings\":64,"
                     "\"rms_norm_eps\":1e-6}");
    assert_int_equal(scdb_model_config_load(path, &c, err, sizeof err), SCDB_OK);
    assert_string_equal(c.name, "my-llama");
    assert_int_equal(c.vocab_size, 100);          /* any vocabulary size */
    rmrf(dir);
    rmrf(own2);
}

/* ------------------------------------------------------------ bad input */

static void expect_load(const char *dir, scdb_err want, const char *needle)
{
    char err[1024] = "";
    scdb_model *m = (scdb_model *)1;
    scdb_err rc = scdb_model_load(dir, &m, err, sizeof err);
    print_message("  %-28s -> %s: %s\n", strrchr(dir, '/') + 1, scdb_strerror(rc), err);
    assert_int_equal(rc, want);
    assert_null(m);
    assert_true(err[0] != '\0');
    if (needle && !strstr(err, needle)) fail_msg("message '%s' does not mention '%s'", err, needle);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    char own[512], dir[512], path[800];
    snprintf(own, sizeof own, "%s/bad_own", tmpdir);
    write_tiny_own(own, &TINY);
#define CASE(label, ...) do { exp_opts o_ = {.hf = 1, .dtype = SCDB_F32, __VA_ARGS__};      \
        snprintf(dir, sizeof dir, "%s/%s", tmpdir, label); export_model(own, dir, &o_); } while (0)

    /* a missing shard */
    CASE("missing_shard", .shards = 3);
    snprintf(path, sizeof path, "%s/model-00002-of-00003.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    expect_load(dir, SCDB_ENOTFOUND, "model-00002-of-00003.safetensors");

    /* the index names a tensor its shard lacks */
    CASE("index_names_missing", .shards = 2, .skip = "model.layers.1.mlp.up_proj.weight");
    expect_load(dir, SCDB_ENOTFOUND, "model.layers.1.mlp.up_proj.weight");
    /* a needed tensor the index does not name */
    CASE("index_lacks_tensor", .shards = 2, .unlisted = "model.norm.weight");
    expect_load(dir, SCDB_ENOTFOUND, "weight_map does not name it");
    /* one file without a tensor; no lm_head while untied */
    CASE("single_missing", .skip = "model.layers.0.self_attn.v_proj.weight");
    expect_load(dir, SCDB_ENOTFOUND, "model.layers.0.self_attn.v_proj.weight");
    CASE("no_lm_head", .skip = "lm_head.weight");
    expect_load(dir, SCDB_ENOTFOUND, "tie_word_embeddings");

    /* a tensor of a wrong shape, in a shard and in one file */
    CASE("wrong_shape", .shards = 2, .bad_shape = "model.layers.1.self_attn.k_proj.weight");
    expect_load(dir, SCDB_ESHAPE, "model.layers.1.self_attn.k_proj.weight");
    CASE("wrong_shape_embed", .bad_shape = "model.embed_tokens.weight");
    expect_load(dir, SCDB_ESHAPE, "[301, 16]");

    /* a wrong dtype: I32 in the file, and a dtype the reader does not know */
    CASE("wrong_dtype", .shards = 2, .as_i32 = "model.layers.0.input_layernorm.weight");
    expect_load(dir, SCDB_EDTYPE, "model.layers.0.input_layernorm.weight");
    CASE("f64_dtype");
    {
        /* patch the first "F32" of the header into "F64" (same length) */
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        char hdr[4096];
        size_t got = fread(hdr, 1, sizeof hdr, f);
        assert_true(got > 16);
        char *p = NULL;
        for (size_t i = 8; i + 5 <= got && !p; i++)
            if (!memcmp(hdr + i, "\"F32\"", 5)) p = hdr + i;
        assert_non_null(p);
        assert_int_equal(fseek(f, (long)(p - hdr) + 2, SEEK_SET), 0);
        assert_int_equal(fwrite("64", 1, 2, f), 2);
        assert_int_equal(fclose(f), 0);
        expect_load(dir, SCDB_EDTYPE, "model.safetensors");
    }

    /* truncated shards: data cut short, header cut short */
    CASE("truncated_data", .shards = 2);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 100), 0);
    expect_load(dir, SCDB_ERANGE, "model-00002-of-00002.safetensors");
    CASE("truncated_header", .shards = 2);
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    assert_int_equal(truncate(path, 40), 0);
    expect_load(dir, SCDB_ETRUNC, "model-00001-of-00002.safetensors");

    /* garbage config.json, a missing key, wrong types */
    CASE("garbage_config");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "\x01\x02{\"hidden_size\": 16,,,\xff");
    expect_load(dir, SCDB_EFORMAT, "not valid JSON");
    CASE("missing_layers", .drop_key = "num_hidden_layers");
    expect_load(dir, SCDB_EFORMAT, "num_hidden_layers");
    CASE("missing_vocab", .drop_key = "vocab_size");
    expect_load(dir, SCDB_EFORMAT, "vocab_size");
    CASE("missing_eps", .drop_key = "rms_norm_eps");
    expect_load(dir, SCDB_EFORMAT, "rms_norm_eps");
    CASE("string_heads", .extra = "{\"num_attention_heads\":\"4\"}");
    expect_load(dir, SCDB_EFORMAT, "num_attention_heads");
    CASE("bool_tie", .extra = "{\"tie_word_embeddings\":1}");
    expect_load(dir, SCDB_EFORMAT, "tie_word_embeddings");

    /* inconsistent head counts */
    CASE("kv_not_divisor", .extra = "{\"num_key_value_heads\":3}");
    expect_load(dir, SCDB_ERANGE, "num_key_value_heads");
    CASE("kv_above_heads", .extra = "{\"num_key_value_heads\":8}");
    expect_load(dir, SCDB_ERANGE, "num_key_value_heads");
    CASE("hidden_not_multiple", .no_head_dim = 1, .extra = "{\"num_attention_heads\":3,\"num_key_value_heads\":1}");
    expect_load(dir, SCDB_ERANGE, "hidden_size");
    CASE("odd_head_dim", .extra = "{\"head_dim\":5}");
    expect_load(dir, SCDB_ERANGE, "head_dim");
    /* head_dim that disagrees with the tensors: caught by the shapes */
    CASE("head_dim_vs_tensors", .extra = "{\"head_dim\":8}");
    expect_load(dir, SCDB_ESHAPE, "q_proj");

    /* what this model does not compute is refused, not approximated */
    CASE("rope_scaling", .extra = "{\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}");
    expect_load(dir, SCDB_EUNSUPPORTED, "rope_scaling");
    CASE("model_type", .extra = "{\"model_type\":\"qwen2\"}");
    expect_load(dir, SCDB_EUNSUPPORTED, "qwen2");
    CASE("attention_bias", .extra = "{\"attention_bias\":true}");
    expect_load(dir, SCDB_EUNSUPPORTED, "attention_bias");
    CASE("hidden_act", .extra = "{\"hidden_act\":\"gelu\"}");
    expect_load(dir, SCDB_EUNSUPPORTED, "gelu");

    /* index problems: outside the directory, not JSON, no weight_map, no weights */
    const char *escapes[] = {"../bad_own/model.safetensors", "/etc/passwd", "sub/model.safetensors", ".."};
    for (size_t i = 0; i < SCDB_ARRAY_LEN(escapes); i++) {
        char label[64];
        snprintf(label, sizeof label, "index_escape_%zu", i);
        CASE(label, .shards = 2);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        char txt[512];
        snprintf(txt, sizeof txt, "{\"metadata\":{},\"weight_map\":{"
                 "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
                 "\"model.norm.weight\":\"%s\"}}", escapes[i]);
        write_text(path, txt);
        expect_load(dir, SCDB_ERANGE, "outside the model directory");
    }
    CASE("index_garbage", .shards = 2);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"weight_map\": [1, 2");
    expect_load(dir, SCDB_EFORMAT, "model.safetensors.index.json");
    CASE("index_no_map", .shards = 2);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"metadata\": {}}");
    expect_load(dir, SCDB_EFORMAT, "weight_map");
    CASE("index_number", .shards = 2);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"weight_map\": {\"model.norm.weight\": 3}}");
    expect_load(dir, SCDB_EFORMAT, "model.norm.weight");
    CASE("no_weights");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    expect_load(dir, SCDB_ENOTFOUND, "model.safetensors.index.json");
#undef CASE
}

/* ------------------------------------------------------------ the family */

static void test_family(void **state)
{
    (void)state;
    char models[1024], own[1300], dir[1400], path[1500];
    snprintf(models, sizeof models, "%s/models", SCDB_DATA_DIR);
    DIR *d = opendir(models);
    if (!d) { print_message("skipped: no family under %s\n", models); skip(); }
    unsigned char *text = NULL;
    size_t tlen = 0;
    scdb_model_heldout_path(SCDB_DATA_DIR, "english", path, sizeof path);
    assert_int_equal(scdb_read_file(path, 1 << 20, (char **)&text, &tlen), SCDB_OK);
    enum { N = 96 };
    assert_true(tlen > 2000 + N);
    struct dirent *e;
    int checked = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(own, sizeof own, "%s/%s", models, e->d_name);
        snprintf(path, sizeof path, "%s/config.json", own);
        if (access(path, R_OK)) continue;
        float *ref = logits_of(own, text + 2000, N);
        size_t nl = (size_t)N * 256;
        struct { scdb_dtype dt; int shards; double tol; } v[] = {
            {SCDB_F32, 0, 0}, {SCDB_F32, 3, 0}, {SCDB_F16, 2, TOL_F16}, {SCDB_BF16, 0, TOL_BF16}};
        for (size_t i = 0; i < SCDB_ARRAY_LEN(v); i++) {
            exp_opts o = {.hf = 1, .dtype = v[i].dt, .shards = v[i].shards};
            snprintf(dir, sizeof dir, "%s/family_%s", tmpdir, e->d_name);
            export_model(own, dir, &o);
            float *got = logits_of(dir, text + 2000, N);
            double mx = max_abs_diff(got, ref, nl);
            print_message("%-9s HF %-4s %d shard(s): max |logit - own f32| = %.2e\n", e->d_name,
                          scdb_dtype_name(v[i].dt), v[i].shards, mx);
            if (v[i].dt == SCDB_F32) assert_memory_equal(got, ref, nl * sizeof(float));
            else assert_true(mx <= v[i].tol);
            free(got);
            rmrf(dir);
        }
        free(ref);
        checked++;
    }
    closedir(d);
    free(text);
    assert_true(checked >= 3);
}

/* tools/export_hf.py writes what this file's exporter writes (same logits,
 * bit for bit, in every dtype); skipped without python3 */
static void test_export_tool(void **state)
{
    (void)state;
    if (system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0) {
        print_message("skipped: no python3\n");
        skip();
    }
    char own[512], dir[512], mine[512], cmd[2048];
    snprintf(own, sizeof own, "%s/tool_own", tmpdir);
    write_tiny_own(own, &TINY);
    const char *dts[] = {"f32", "f16", "bf16"};
    scdb_dtype sdt[] = {SCDB_F32, SCDB_F16, SCDB_BF16};
    for (int i = 0; i < 3; i++) {
        int shards = i == 1 ? 3 : 1;
        snprintf(dir, sizeof dir, "%s/tool_%s", tmpdir, dts[i]);
        snprintf(cmd, sizeof cmd, "python3 '%s/../tools/export_hf.py' '%s' '%s' --dtype %s --shards %d",
                 SCDB_DATA_DIR, own, dir, dts[i], shards);
        assert_int_equal(system(cmd), 0);
        char idx[600];
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        assert_int_equal(access(idx, R_OK) == 0, shards > 1);
        exp_opts o = {.hf = 1, .dtype = sdt[i]};
        snprintf(mine, sizeof mine, "%s/mine_%s", tmpdir, dts[i]);
        export_model(own, mine, &o);
        float *a = logits_of(dir, NULL, NTOK), *b = logits_of(mine, NULL, NTOK);
        assert_memory_equal(a, b, (size_t)NTOK * TINY.vocab * sizeof(float));
        free(a);
        free(b);
        rmrf(dir);
        rmrf(mine);
    }
}

static void test_alloc_failures(void **state)
{
    (void)state;
    char own[512], dirs[3][512], err[512];
    snprintf(own, sizeof own, "%s/oom_own", tmpdir);
    write_tiny_own(own, &TINY);
    exp_opts single = {.hf = 1, .dtype = SCDB_F32};
    exp_opts shards = {.hf = 1, .dtype = SCDB_BF16, .shards = 3};
    snprintf(dirs[0], sizeof dirs[0], "%s", own);
    snprintf(dirs[1], sizeof dirs[1], "%s/oom_hf", tmpdir);
    snprintf(dirs[2], sizeof dirs[2], "%s/oom_hf_shards", tmpdir);
    export_model(own, dirs[1], &single);
    export_model(own, dirs[2], &shards);
    alloc_fault_cjson(1);
    for (int d = 0; d < 3; d++) {
        long n, injected = 0;
        for (n = 0; n < 100000; n++) {
            scdb_model *m = (scdb_model *)1;
            alloc_fault_arm(n);
            scdb_err rc = scdb_model_load(dirs[d], &m, err, sizeof err);
            alloc_fault_disarm();
            if (!alloc_fault_hit()) {
                assert_int_equal(rc, SCDB_OK);
                scdb_model_free(&m);
                break;
            }
            injected++;
            /* cJSON reports its own allocation failures as parse errors */
            if (rc != SCDB_ENOMEM && rc != SCDB_EFORMAT)
                fail_msg("%s: allocation %ld failed: got %s (%s)", dirs[d], n, scdb_strerror(rc), err);
            assert_null(m);
        }
        print_message("%s: %ld allocation points covered\n", strrchr(dirs[d], '/') + 1, injected);
        assert_true(injected > 5);
    }
    alloc_fault_cjson(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_layouts),
        cmocka_unit_test(test_tied_and_config),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_family),
        cmocka_unit_test(test_export_tool),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests_name("model_hf", tests, setup_tmp, teardown_tmp);
}
