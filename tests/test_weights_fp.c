/* test_weights_fp.c — the weights fingerprint of a model directory
 * (schema/weights_fp.c; schema/FORMATS.md, "Weights fingerprint").  Claims:
 *
 *   - a known answer: the stream of a one-tensor model, hashed here with
 *     XXH3-128, is what scdb_weights_fp reports, and the digits FORMATS.md
 *     prints;
 *   - one fingerprint for one set of weights, whatever the layout: scdb's
 *     own, a Hugging Face file, 1..4 shards, tensors the model does not
 *     read added, a tied checkpoint and its untied twin (lm_head ignored);
 *     F16 and BF16 values widen exactly as the model loader widens them
 *     (all 65536 bit patterns of each);
 *   - a different fingerprint for different weights: one bit of one value,
 *     a reshaped tensor, a bf16 export of f32 weights, a missing tensor;
 *   - tools/weights_fp.py, written from FORMATS.md alone in Python, agrees
 *     (when /usr/bin/python3 has numpy and libxxhash is there);
 *   - bad input: each case its own error and a message naming the file,
 *     entry or tensor; every allocation failure returns an error, no leak. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc_fault.h"
#include "hf_export.h"
#include "kernels.h"
#include "model.h"
#include "weights_fp.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* FORMATS.md's known answer (norm.weight = F32 [1.0, -2.0]) */
#define KNOWN_FP "0eaf058e9eacdd10c98ab834045a08c1"

static char tmpdir[256];
static const tiny_cfg TINY = {300, 16, 2, 4, 2, 4, 24};

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_weights_fp_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return scdb_rm_tree(tmpdir) == 0 ? 0 : -1;
}

static void fp_of(const char *dir, char fp[33])
{
    char err[512] = "";
    scdb_err rc = scdb_weights_fp(dir, fp, err, sizeof err);
    if (rc) fail_msg("%s: %s (%s)", dir, err, scdb_strerror(rc));
    assert_true(scdb_weights_fp_valid(fp));
}

static void sub(char *out, size_t cap, const char *name)
{
    snprintf(out, (size_t)cap, "%s/%s", tmpdir, name);
}

/* A directory with an own-layout config.json (that of TINY) and one
 * safetensors file of `n` tensors. */
typedef struct tens { const char *name; scdb_dtype dt; int ndim; int64_t shape[2]; const void *data; } tens;

static void write_dir(const char *dir, const char *config, const char *file, const tens *t, int n)
{
    char path[700];
    scdb_st_writer *w;
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, config ? config
                            : "{\"name\":\"t\",\"vocab_size\":256,\"d_model\":2,\"n_layers\":1,"
                              "\"n_heads\":1,\"n_kv_heads\":1,\"head_dim\":2,\"d_ff\":2,"
                              "\"max_seq_len\":8,\"rope_theta\":10000.0,\"norm_eps\":1e-5}");
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(scdb_st_writer_add(w, t[i].name, t[i].dt, t[i].ndim, t[i].shape, t[i].data), SCDB_OK);
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "model.safetensors");
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
}

/* ------------------------------------------------------------ tests */

static void write_index(const char *dir, const char *json)
{
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, json);
}


static void test_known_answer(void **state)
{
    (void)state;
    char dir[300], fp[33], want[33];
    float v[2] = {1.0f, -2.0f};
    tens t = {"norm.weight", SCDB_F32, 1, {2, 0}, v};
    sub(dir, sizeof dir, "known");
    write_dir(dir, NULL, NULL, &t, 1);
    fp_of(dir, fp);
    /* the stream of FORMATS.md, byte by byte */
    static const uint8_t stream[] = {
        's', 'c', 'd', 'b', '-', 'w', 'e', 'i', 'g', 'h', 't', 's', '-', '1', 0,
        'm', 'o', 'd', 'e', 'l', '.', 'n', 'o', 'r', 'm', '.', 'w', 'e', 'i', 'g', 'h', 't', 0,
        1, 0, 0, 0, 0, 0, 0, 0,
        2, 0, 0, 0, 0, 0, 0, 0,
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
    XXH128_hash_t h = XXH3_128bits(stream, sizeof stream);
    snprintf(want, sizeof want, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
    print_message("known answer: %s\n", fp);
    assert_string_equal(fp, want);
    assert_string_equal(fp, KNOWN_FP);
}

/* The same f32 weights in every layout, and f16 / bf16 twins. */
static void test_layouts_agree(void **state)
{
    (void)state;
    char own[300], dir[300], ref[33], fp[33], fp2[33];
    sub(own, sizeof own, "own");
    write_tiny_own(own, &TINY);
    fp_of(own, ref);
    for (int shards = 0; shards <= 4; shards++) {
        exp_opts o = {.hf = 1, .dtype = SCDB_F32, .shards = shards};
        snprintf(dir, sizeof dir, "%s/hf%d", tmpdir, shards);
        export_model(own, dir, &o);
        fp_of(dir, fp);
        assert_string_equal(fp, ref);
    }
    /* both present: model.safetensors wins, as in the loader (the index,
     * naming a shard that does not exist, is not read) */
    snprintf(dir, sizeof dir, "%s/hf0", tmpdir);
    write_index(dir, "{\"weight_map\": {\"model.norm.weight\": \"absent.safetensors\"}}");
    fp_of(dir, fp);
    assert_string_equal(fp, ref);
    /* tensors the model does not read are not weights */
    {
        exp_opts o = {.hf = 1, .dtype = SCDB_F32, .extra = NULL};
        float inv[2] = {1, 2};
        char path[700];
        snprintf(dir, sizeof dir, "%s/hf_extra", tmpdir);
        export_model(own, dir, &o);
        /* rewrite with an extra buffer and a layer number with a leading zero */
        scdb_st_file *st;
        scdb_st_writer *w;
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        assert_int_equal(scdb_st_open(path, &st, NULL, 0), SCDB_OK);
        assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
        for (int i = 0; i < scdb_st_count(st); i++) {
            const scdb_st_tensor *t = scdb_st_at(st, i);
            assert_int_equal(scdb_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data), SCDB_OK);
        }
        int64_t s2[1] = {2};
        assert_int_equal(scdb_st_writer_add(w, "model.rotary_emb.inv_freq", SCDB_F32, 1, s2, inv), SCDB_OK);
        assert_int_equal(scdb_st_writer_add(w, "model.layers.01.input_layernorm.weight", SCDB_F32, 1, s2, inv),
                         SCDB_OK);
        snprintf(path, sizeof path, "%s/model2.safetensors", dir);
        assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
        scdb_st_writer_free(&w);
        scdb_st_close(&st);
        char cmd[1600];
        snprintf(cmd, sizeof cmd, "mv '%s/model2.safetensors' '%s/model.safetensors'", dir, dir);
        assert_int_equal(system(cmd), 0);
        fp_of(dir, fp);
        assert_string_equal(fp, ref);
    }
    /* f16 and bf16: own layout and sharded HF of the same values agree */
    scdb_dtype dts[2] = {SCDB_F16, SCDB_BF16};
    for (int d = 0; d < 2; d++) {
        exp_opts ot = {.hf = 0, .dtype = dts[d]}, oh = {.hf = 1, .dtype = dts[d], .shards = 3};
        snprintf(dir, sizeof dir, "%s/own_%s", tmpdir, scdb_dtype_name(dts[d]));
        export_model(own, dir, &ot);
        fp_of(dir, fp);
        snprintf(dir, sizeof dir, "%s/hf_%s", tmpdir, scdb_dtype_name(dts[d]));
        export_model(own, dir, &oh);
        fp_of(dir, fp2);
        assert_string_equal(fp, fp2);
        assert_string_not_equal(fp, ref);     /* rounded: other weights */
    }
}

/* A tied checkpoint is its untied twin with lm_head = the embedding; a
 * lm_head tensor in a tied checkpoint is not read, so not counted. */
static void test_tied(void **state)
{
    (void)state;
    char own[300], twin[300], dir[300], path[700], fp[33], fp2[33];
    sub(own, sizeof own, "tied_own");
    write_tiny_own(own, &TINY);
    sub(dir, sizeof dir, "tied_hf");
    exp_opts o = {.hf = 1, .dtype = SCDB_F32, .tied = 1};
    export_model(own, dir, &o);
    sub(twin, sizeof twin, "tied_twin");
    mkdir(twin, 0755);
    scdb_st_file *st;
    scdb_st_writer *w;
    snprintf(path, sizeof path, "%s/model.safetensors", own);
    assert_int_equal(scdb_st_open(path, &st, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    const scdb_st_tensor *emb = scdb_st_find(st, "tok_embeddings.weight");
    for (int i = 0; i < scdb_st_count(st); i++) {
        const scdb_st_tensor *t = scdb_st_at(st, i);
        const void *data = strcmp(t->name, "output.weight") ? t->data : emb->data;
        assert_int_equal(scdb_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, data), SCDB_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", twin);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/'", own, twin);
    assert_int_equal(system(cmd), 0);
    fp_of(dir, fp);
    fp_of(twin, fp2);
    assert_string_equal(fp, fp2);
    /* the untied original differs (its head is not the embedding) */
    fp_of(own, fp2);
    assert_string_not_equal(fp, fp2);
    /* the same checkpoint with the original lm_head left in the file */
    {
        char d2[300];
        exp_opts u = {.hf = 1, .dtype = SCDB_F32, .tied = 0};
        sub(d2, sizeof d2, "tied_hf_with_head");
        export_model(own, d2, &u);
        snprintf(path, sizeof path, "%s/config.json", d2);
        char *txt;
        size_t len;
        assert_int_equal(scdb_read_file(path, 1 << 20, &txt, &len), SCDB_OK);
        char *at = strstr(txt, "\"tie_word_embeddings\":\tfalse");
        assert_non_null(at);
        memcpy(at, "\"tie_word_embeddings\":\ttrue ", 28);
        write_text(path, txt);
        free(txt);
        fp_of(d2, fp2);
        assert_string_equal(fp, fp2);
    }
    scdb_st_close(&st);
}

/* F16 / BF16 widen exactly as the loader's conversion (kernels' half.c):
 * every bit pattern, stored half and stored as the f32 it widens to. */
static void test_widening(void **state)
{
    (void)state;
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h);
    float *f = malloc(N * sizeof *f), *g = malloc(N * sizeof *g);
    char a[300], b[300], c[300], fa[33], fb[33], fc[33];
    assert_non_null(h);
    assert_non_null(f);
    assert_non_null(g);
    for (int i = 0; i < N; i++) {
        h[i] = (uint16_t)i;
        f[i] = scdb_f16_to_f32(h[i]);
        g[i] = scdb_bf16_to_f32(h[i]);
    }
    tens th = {"norm.weight", SCDB_F16, 1, {N, 0}, h}, tf = {"norm.weight", SCDB_F32, 1, {N, 0}, f};
    tens tb = {"norm.weight", SCDB_BF16, 1, {N, 0}, h}, tg = {"norm.weight", SCDB_F32, 1, {N, 0}, g};
    sub(a, sizeof a, "w_f16");
    sub(b, sizeof b, "w_f16_as_f32");
    write_dir(a, NULL, NULL, &th, 1);
    write_dir(b, NULL, NULL, &tf, 1);
    fp_of(a, fa);
    fp_of(b, fb);
    assert_string_equal(fa, fb);
    sub(a, sizeof a, "w_bf16");
    sub(c, sizeof c, "w_bf16_as_f32");
    write_dir(a, NULL, NULL, &tb, 1);
    write_dir(c, NULL, NULL, &tg, 1);
    fp_of(a, fa);
    fp_of(c, fc);
    assert_string_equal(fa, fc);
    assert_string_not_equal(fb, fc);
    free(h);
    free(f);
    free(g);
}

/* Other weights, other fingerprint. */
static void test_changed_weights(void **state)
{
    (void)state;
    float v[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 2, 3, 4, 5, 6};
    uint32_t bits;
    memcpy(&bits, &w[4], 4);
    bits ^= 1;                               /* one bit of one value */
    memcpy(&w[4], &bits, 4);
    tens base[2] = {{"norm.weight", SCDB_F32, 1, {2, 0}, v},
                    {"layers.0.attention.wk.weight", SCDB_F32, 2, {2, 2}, v + 2}};
    tens bit[2] = {{"norm.weight", SCDB_F32, 1, {2, 0}, w},
                   {"layers.0.attention.wk.weight", SCDB_F32, 2, {2, 2}, w + 2}};
    tens shaped[2] = {{"norm.weight", SCDB_F32, 1, {2, 0}, v},
                      {"layers.0.attention.wk.weight", SCDB_F32, 2, {1, 4}, v + 2}};
    tens renamed[2] = {{"norm.weight", SCDB_F32, 1, {2, 0}, v},
                       {"layers.0.attention.wv.weight", SCDB_F32, 2, {2, 2}, v + 2}};
    tens fewer[1] = {{"norm.weight", SCDB_F32, 1, {2, 0}, v}};
    const tens *sets[5] = {base, bit, shaped, renamed, fewer};
    int counts[5] = {2, 2, 2, 2, 1};
    char fps[5][33], dir[300];
    for (int i = 0; i < 5; i++) {
        snprintf(dir, sizeof dir, "%s/changed%d", tmpdir, i);
        write_dir(dir, NULL, NULL, sets[i], counts[i]);
        fp_of(dir, fps[i]);
        for (int k = 0; k < i; k++) assert_string_not_equal(fps[i], fps[k]);
    }
}

/* tools/weights_fp.py's line for path ("FP  PATH") */
static void python_fp(const char *path, char *line, size_t cap)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/../tools/weights_fp.py' '%s'", SCDB_DATA_DIR, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(line, (int)cap, p));
    assert_int_equal(pclose(p), 0);
}

/* tools/weights_fp.py (FORMATS.md in Python) gives the same digits. */
static void test_python_reference(void **state)
{
    (void)state;
    char dir[300], fp[33], line[256];
    if (system("/usr/bin/python3 -c 'import numpy, ctypes.util, ctypes; "
               "ctypes.CDLL(ctypes.util.find_library(\"xxhash\") or \"libxxhash.so.0\")' 2>/dev/null")) {
        print_message("skipped: /usr/bin/python3 with numpy and libxxhash not available\n");
        skip();
    }
    const char *dirs[] = {"own", "hf3", "hf_extra", "own_F16", "hf_BF16", "tied_hf", "w_f16", "w_bf16",
                          "known"};
    int checked = 0;
    for (size_t i = 0; i < SCDB_ARRAY_LEN(dirs); i++) {
        snprintf(dir, sizeof dir, "%s/%s", tmpdir, dirs[i]);
        if (access(dir, F_OK)) continue;         /* made by an earlier test */
        fp_of(dir, fp);
        python_fp(dir, line, sizeof line);
        print_message("  %-10s C %s  Python %.32s\n", dirs[i], fp, line);
        assert_memory_equal(line, fp, 32);
        checked++;
    }
    assert_true(checked >= 5);
    /* GGUF model files: the family's base exported as F32 (the directory's
     * fingerprint), F16 and BF16 (rounded: other values, other digits) */
    scdb_model *m = NULL;
    char err[512] = "", dfp[33];
    if (access(SCDB_DATA_DIR "/models/base/model.safetensors", R_OK)) return;
    if (scdb_model_load(SCDB_DATA_DIR "/models/base", &m, err, sizeof err)) fail_msg("base: %s", err);
    fp_of(SCDB_DATA_DIR "/models/base", dfp);
    const scdb_dtype dts[] = {SCDB_F32, SCDB_F16, SCDB_BF16};
    const char *dtn[] = {"f32", "f16", "bf16"};
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/base_%s.gguf", tmpdir, dtn[i]);
        if (scdb_model_export_gguf(m, dir, dts[i], err, sizeof err)) fail_msg("%s: %s", dir, err);
        fp_of(dir, fp);
        python_fp(dir, line, sizeof line);
        print_message("  base.gguf %-4s C %s  Python %.32s\n", dtn[i], fp, line);
        assert_memory_equal(line, fp, 32);
        if (i == 0) assert_string_equal(fp, dfp);
        else assert_string_not_equal(fp, dfp);
        unlink(dir);
    }
    scdb_model_free(&m);
}

/* The bundled family: each model and its sharded f32 export agree. */
static void test_family(void **state)
{
    (void)state;
    char dir[300], fp[33], fp2[33];
    if (access(SCDB_DATA_DIR "/models/code/model.safetensors", R_OK)) skip();
    fp_of(SCDB_DATA_DIR "/models/code", fp);
    exp_opts o = {.hf = 1, .dtype = SCDB_F32, .shards = 3};
    sub(dir, sizeof dir, "code_hf");
    export_model(SCDB_DATA_DIR "/models/code", dir, &o);
    fp_of(dir, fp2);
    assert_string_equal(fp, fp2);
    fp_of(SCDB_DATA_DIR "/models/base", fp2);
    assert_string_not_equal(fp, fp2);
    assert_int_equal(scdb_rm_tree(dir), 0);
}

/* ------------------------------------------------------------ bad input */

static void expect_fp(const char *dir, scdb_err want, const char *needle)
{
    char err[1024] = "", fp[33] = "x";
    scdb_err rc = scdb_weights_fp(dir, fp, err, sizeof err);
    print_message("  %-22s -> %s: %s\n", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, scdb_strerror(rc), err);
    assert_int_equal(rc, want);
    assert_string_equal(fp, "");
    assert_true(err[0] != '\0');
    if (needle && !strstr(err, needle)) fail_msg("message '%s' does not mention '%s'", err, needle);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    char own[300], dir[300], path[700], cmd[2400];
    float v[4] = {1, 2, 3, 4};
    int32_t iv[4] = {1, 2, 3, 4};
    sub(own, sizeof own, "bad_src");
    write_tiny_own(own, &TINY);
    exp_opts sh = {.hf = 1, .dtype = SCDB_F32, .shards = 2};
#define HF(label) do { sub(dir, sizeof dir, label); export_model(own, dir, &sh); } while (0)

    char fp[33];
    assert_int_equal(scdb_weights_fp(NULL, fp, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_weights_fp(own, NULL, NULL, 0), SCDB_EINVAL);
    sub(dir, sizeof dir, "no_such_dir");
    expect_fp(dir, SCDB_ENOTFOUND, "config.json");
    /* config.json: missing, garbage, not an object */
    sub(dir, sizeof dir, "no_config");
    mkdir(dir, 0755);
    expect_fp(dir, SCDB_ENOTFOUND, "config.json");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"hidden_size\": 16, ");
    expect_fp(dir, SCDB_EFORMAT, "config.json");
    write_text(path, "[1, 2]");
    expect_fp(dir, SCDB_EFORMAT, "config.json");
    /* own layout without its file; Hugging Face with neither file nor index */
    write_text(path, "{\"name\": \"x\"}");
    expect_fp(dir, SCDB_ENOTFOUND, "model.safetensors");
    write_text(path, "{\"hidden_size\": 16}");
    expect_fp(dir, SCDB_ENOTFOUND, "neither");
    /* the index: garbage, no weight_map, an entry not a string, escaping */
    HF("bad_index");
    write_index(dir, "{\"weight_map\": ");
    expect_fp(dir, SCDB_EFORMAT, "index");
    write_index(dir, "{\"metadata\": {}}");
    expect_fp(dir, SCDB_EFORMAT, "weight_map");
    write_index(dir, "{\"weight_map\": {\"model.norm.weight\": 3}}");
    expect_fp(dir, SCDB_EFORMAT, "model.norm.weight");
    write_index(dir, "{\"weight_map\": {\"model.norm.weight\": \"../bad_src/model.safetensors\"}}");
    expect_fp(dir, SCDB_ERANGE, "outside");
    write_index(dir, "{\"weight_map\": {\"model.norm.weight\": \".hidden\"}}");
    expect_fp(dir, SCDB_ERANGE, ".hidden");
    /* a missing shard; a tensor the index maps to a shard without it */
    HF("missing_shard");
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    expect_fp(dir, SCDB_ENOTFOUND, "model-00002-of-00002.safetensors");
    HF("wrong_shard");
    write_index(dir, "{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
                     " \"model.layers.1.mlp.up_proj.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_fp(dir, SCDB_ENOTFOUND, "model.layers.1.mlp.up_proj.weight");
    /* a tensor named twice (JSON keys repeated) */
    HF("twice");
    write_index(dir, "{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
                     " \"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_fp(dir, SCDB_EFORMAT, "twice");
    /* shards: truncated (header, data), garbage */
    HF("trunc");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    assert_int_equal(truncate(path, 5), 0);
    expect_fp(dir, SCDB_ETRUNC, "model-00001-of-00002.safetensors");
    HF("trunc_data");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 3), 0);
    expect_fp(dir, SCDB_ERANGE, "model-00001-of-00002.safetensors");
    HF("garbage");
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    {
        FILE *g = fopen(path, "wb");
        uint64_t hl = 40;
        fwrite(&hl, 8, 1, g);
        fputs("{\"this is\": not json at all ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", g);
        fclose(g);
    }
    expect_fp(dir, SCDB_EFORMAT, "model-00002-of-00002.safetensors");
    /* an I32 weight; a file with nothing the model reads; tied without embedding */
    tens ti[2] = {{"norm.weight", SCDB_F32, 1, {4, 0}, v}, {"layers.0.ffn_norm.weight", SCDB_I32, 1, {4, 0}, iv}};
    sub(dir, sizeof dir, "i32");
    write_dir(dir, NULL, NULL, ti, 2);
    expect_fp(dir, SCDB_EDTYPE, "layers.0.ffn_norm.weight");
    tens tn[1] = {{"something.else", SCDB_F32, 1, {4, 0}, v}};
    sub(dir, sizeof dir, "nothing");
    write_dir(dir, NULL, NULL, tn, 1);
    expect_fp(dir, SCDB_ENOTFOUND, "no tensor");
    tens tt[1] = {{"model.norm.weight", SCDB_F32, 1, {4, 0}, v}};
    sub(dir, sizeof dir, "tied_no_embedding");
    write_dir(dir, "{\"hidden_size\": 4, \"tie_word_embeddings\": true}", NULL, tt, 1);
    expect_fp(dir, SCDB_ENOTFOUND, "model.embed_tokens.weight");
    /* an own-layout file is read with own names only */
    sub(dir, sizeof dir, "own_with_hf_names");
    write_dir(dir, NULL, NULL, tt, 1);
    expect_fp(dir, SCDB_ENOTFOUND, "no tensor");
    {
        const char *gone[] = {"bad_*", "trunc*", "garbage", "twice", "wrong_shard", "missing_shard"};
        for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
            glob_t g;
            snprintf(cmd, sizeof cmd, "%s/%s", tmpdir, gone[i]);
            if (glob(cmd, 0, NULL, &g) == 0)
                for (size_t k = 0; k < g.gl_pathc; k++) assert_int_equal(scdb_rm_tree(g.gl_pathv[k]), 0);
            globfree(&g);
        }
    }
#undef HF

    /* the written form */
    assert_true(scdb_weights_fp_valid("0123456789abcdef0123456789abcdef"));
    assert_false(scdb_weights_fp_valid("0123456789ABCDEF0123456789abcdef"));
    assert_false(scdb_weights_fp_valid("0123456789abcdef"));
    assert_false(scdb_weights_fp_valid("0123456789abcdef0123456789abcdef0"));
    assert_false(scdb_weights_fp_valid("0123456789abcdef0123456789abcdeg"));
    assert_false(scdb_weights_fp_valid(""));
    assert_false(scdb_weights_fp_valid(NULL));
}

/* Every allocation of a fingerprint (own layout, HF shards in bf16) may
 * fail: an error comes back (cJSON's failures read as SCDB_EFORMAT), never
 * a crash or a leak (the ASan build checks leaks). */
static void test_alloc_failures(void **state)
{
    (void)state;
    char own[300], dir[300];
    sub(own, sizeof own, "oom_own");
    write_tiny_own(own, &TINY);
    exp_opts o = {.hf = 1, .dtype = SCDB_BF16, .shards = 3};
    sub(dir, sizeof dir, "oom_hf");
    export_model(own, dir, &o);
    const char *dirs[2] = {own, dir};
    alloc_fault_cjson(1);
    for (int d = 0; d < 2; d++) {
        long n, injected = 0;
        char fp[33], ok[33];
        for (n = 0; n < 100000; n++) {
            alloc_fault_arm(n);
            scdb_err rc = scdb_weights_fp(dirs[d], fp, NULL, 0);
            alloc_fault_disarm();
            if (!alloc_fault_hit()) {
                assert_int_equal(rc, SCDB_OK);
                break;
            }
            injected++;
            if (rc != SCDB_ENOMEM && rc != SCDB_EFORMAT)
                fail_msg("%s: allocation %ld failed: got %s", dirs[d], n, scdb_strerror(rc));
        }
        fp_of(dirs[d], ok);
        assert_string_equal(fp, ok);
        print_message("%s: %ld allocation points covered\n", strrchr(dirs[d], '/') + 1, injected);
        assert_true(injected >= 3);
    }
    alloc_fault_cjson(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answer),
        cmocka_unit_test(test_layouts_agree),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_widening),
        cmocka_unit_test(test_changed_weights),
        cmocka_unit_test(test_python_reference),
        cmocka_unit_test(test_family),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests_name("weights_fp", tests, setup, teardown);
}
