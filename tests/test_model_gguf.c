/* test_model_gguf.c — llama GGUF models and LoRA adapters as scdb models
 * (model/gguf_checkpoint.c, model/gguf_export.c, schema/gguf_llama.c, the
 * GGUF paths of schema/weights_fp.c and peft_adapter.c).  Claims:
 *
 *   - an F32 export of a family model loads back to the same model: logits
 *     bit-identical to the directory's, the same fingerprint and config;
 *     the file holds the byte vocabulary llama.cpp's rwkv tokenizer reads;
 *   - attn_q / attn_k rows are in llama.cpp's order in the file (row
 *     2j+p of head h is scdb's row p*hd/2+j) and the permutation inverts;
 *   - an F16 export stays within the f16 tolerance of the f32 model;
 *   - a GGUF adapter exported from a PEFT adapter: the same fingerprint
 *     (found beside its base, in models_dir, or given the base explicitly),
 *     bit-identical merged logits, low-rank within f32 rounding, the
 *     adapter's name; a PEFT adapter over a GGUF base fingerprints alike;
 *   - every refusal: architecture, missing / ill-typed keys, missing or
 *     misshapen tensors, quantized tensors (named with their type),
 *     tensors that change the computation, and the adapter's (type, twin,
 *     rank, embedding factors, base missing / unnamed / an adapter);
 *   - running out of memory at any allocation of a load, a fingerprint or
 *     an export of a GGUF model or adapter returns SCDB_ENOMEM and leaks
 *     nothing (the ASan build checks the leaks). */
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
#include "gguf.h"
#include "gguf_llama.h"
#include "model.h"
#include "peft_adapter.h"
#include "weights_fp.h"
#include "tiny_model.h"
#include "tiny_adapter.h"

#define TOL_F16 0.03   /* test_model_hf's: f16 weights vs f32, measured 8.6e-3 */
#define N_TOK 64

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_model_gguf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    return scdb_rm_tree(tmpdir) == 0 ? 0 : -1;
}

static const char *data_path(const char *rel, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", SCDB_DATA_DIR, rel);
    return buf;
}

static const char *tmp_path(const char *rel, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", tmpdir, rel);
    return buf;
}

/* Logits of N_TOK tokens of held-out English under a loaded model. */
static float *logits_of_model(scdb_model *m)
{
    static unsigned char text[N_TOK];
    char path[512];
    FILE *f = fopen(data_path("heldout/english.txt", path, sizeof path), "rb");
    assert_non_null(f);
    assert_int_equal(fread(text, 1, N_TOK, f), N_TOK);
    fclose(f);
    int32_t tok[N_TOK];
    scdb_tokenize_bytes(text, N_TOK, tok);
    int V = scdb_model_cfg(m)->vocab_size;
    float *lg = malloc((size_t)N_TOK * V * sizeof *lg);
    scdb_kv_cache *c = NULL;
    assert_non_null(lg);
    assert_int_equal(scdb_model_cache_new(m, N_TOK, &c), SCDB_OK);
    assert_int_equal(scdb_model_forward(m, tok, NULL, N_TOK, c, lg, NULL), SCDB_OK);
    scdb_kv_cache_free(&c);
    return lg;
}

static float *logits_of(const char *path, const scdb_model_load_opts *o, scdb_model_config *cfg)
{
    scdb_model *m = NULL;
    char err[512] = "";
    scdb_err rc = scdb_model_load_ex(path, o, &m, err, sizeof err);
    if (rc) fail_msg("%s: %s (%s)", path, err, scdb_strerror(rc));
    if (cfg) *cfg = *scdb_model_cfg(m);
    float *lg = logits_of_model(m);
    scdb_model_free(&m);
    return lg;
}

static void fp_of(const char *path, const char *models_dir, char hex[SCDB_WEIGHTS_FP_HEX + 1])
{
    char err[512] = "";
    scdb_err rc = scdb_weights_fp_ex(path, models_dir, hex, err, sizeof err);
    if (rc) fail_msg("fingerprint %s: %s (%s)", path, err, scdb_strerror(rc));
}

static void export_model(const char *src, const char *out, scdb_dtype dt)
{
    scdb_model *m = NULL;
    char err[512] = "";
    scdb_err rc = scdb_model_load(src, &m, err, sizeof err);
    if (!rc) rc = scdb_model_export_gguf(m, out, dt, err, sizeof err);
    if (rc) fail_msg("export %s: %s (%s)", src, err, scdb_strerror(rc));
    scdb_model_free(&m);
}

/* ------------------------------------------------------------ models */

static void test_family_exact(void **state)
{
    (void)state;
    const char *names[] = {"base", "code"};
    for (size_t i = 0; i < 2; i++) {
        char dir[512], out[512], rel[64], a[40], b[40], err[256];
        snprintf(rel, sizeof rel, "models/%s", names[i]);
        snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, names[i]);
        data_path(rel, dir, sizeof dir);
        export_model(dir, out, SCDB_F32);
        assert_true(scdb_gguf_is_file(out));
        scdb_model_config cd, cg;
        float *ld = logits_of(dir, NULL, &cd), *lgg = logits_of(out, NULL, &cg);
        assert_memory_equal(ld, lgg, (size_t)N_TOK * cd.vocab_size * sizeof *ld);   /* bit for bit */
        free(ld);
        free(lgg);
        assert_true(scdb_model_config_same_arch(&cd, &cg));
        assert_int_equal(cg.layout, SCDB_LAYOUT_GGUF);
        assert_string_equal(cg.name, cd.name);
        assert_string_equal(cg.domain, cd.domain);
        assert_string_equal(cg.parent, cd.parent);
        assert_string_equal(cg.finetune, cd.finetune);
        assert_int_equal(cg.max_seq_len, cd.max_seq_len);
        assert_false(cg.tied_embeddings);
        fp_of(dir, NULL, a);
        fp_of(out, NULL, b);
        assert_string_equal(a, b);
        /* config of the file, as the broker reads it */
        scdb_model_config c2;
        assert_int_equal(scdb_model_config_load_any(out, NULL, &c2, err, sizeof err), SCDB_OK);
        assert_string_equal(c2.name, cd.name);
    }
    /* the byte vocabulary, as llama.cpp's rwkv tokenizer reads it */
    char out[512], err[256];
    scdb_gguf_file *f = NULL;
    const scdb_gguf_kv *kv;
    const char *s;
    assert_int_equal(scdb_gguf_open(tmp_path("base.gguf", out, sizeof out), &f, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_get_str(f, "tokenizer.ggml.model", &s, err, sizeof err), SCDB_OK);
    assert_string_equal(s, "rwkv");
    assert_int_equal(scdb_gguf_get_arr(f, "tokenizer.ggml.tokens", SCDB_GGUF_STRING, &kv, err, sizeof err), SCDB_OK);
    assert_int_equal(kv->n, 256);
    for (int i = 0; i < 256; i++) {
        char want[8];
        snprintf(want, sizeof want, "\\x%02x", i);
        assert_string_equal(kv->str[i], want);
    }
    int add_bos = 1;
    assert_int_equal(scdb_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, err, sizeof err), SCDB_OK);
    assert_false(add_bos);
    assert_int_equal(scdb_gguf_get_str(f, "general.architecture", &s, err, sizeof err), SCDB_OK);
    assert_string_equal(s, "llama");
    scdb_gguf_close(&f);
}

static void test_permutation(void **state)
{
    (void)state;
    char dir[512], out[512], err[256];
    scdb_model *m = NULL;
    scdb_gguf_file *f = NULL;
    export_model(data_path("models/base", dir, sizeof dir), tmp_path("perm.gguf", out, sizeof out), SCDB_F32);
    assert_int_equal(scdb_model_load(dir, &m, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_open(out, &f, err, sizeof err), SCDB_OK);
    const scdb_model_config *c = scdb_model_cfg(m);
    int hd = c->head_dim, d = c->d_model;
    for (int which = 0; which < 3; which++) {
        const char *tn = which == 0 ? "blk.3.attn_q.weight" : which == 1 ? "blk.3.attn_k.weight" : "blk.3.attn_v.weight";
        const float *w = which == 0 ? scdb_model_layer(m, 3)->wq : which == 1 ? scdb_model_layer(m, 3)->wk
                                                                               : scdb_model_layer(m, 3)->wv;
        int heads = which == 0 ? c->n_heads : c->n_kv_heads;
        const scdb_gguf_tensor *t = scdb_gguf_find_tensor(f, tn);
        assert_non_null(t);
        const float *g = t->data;
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < hd / 2; j++)
                for (int p = 0; p < 2; p++) {
                    int grow = h * hd + 2 * j + p, srow = which == 2 ? grow : h * hd + p * hd / 2 + j;
                    assert_memory_equal(g + (size_t)grow * d, w + (size_t)srow * d, (size_t)d * sizeof *g);
                }
    }
    scdb_gguf_close(&f);
    scdb_model_free(&m);
    /* the two directions invert each other, on any row size */
    uint8_t src[8 * 3], mid[8 * 3], back[8 * 3];
    for (int i = 0; i < 24; i++) src[i] = (uint8_t)i;
    scdb_gguf_llama_permute_rows(src, mid, 8, 3, 4, 1);
    scdb_gguf_llama_permute_rows(mid, back, 8, 3, 4, 0);
    assert_memory_equal(src, back, sizeof src);
    assert_memory_equal(mid + 3, src + 2 * 3, 3);   /* GGUF row 1 (j 0, p 1) = row hd/2 = 2 */
    assert_memory_equal(mid + 2 * 3, src + 1 * 3, 3); /* GGUF row 2 (j 1, p 0) = row 1 */
}

static void test_f16(void **state)
{
    (void)state;
    char dir[512], out[512], a[40], b[40];
    data_path("models/base", dir, sizeof dir);
    export_model(dir, tmp_path("base16.gguf", out, sizeof out), SCDB_F16);
    scdb_model_config c;
    float *l32 = logits_of(dir, NULL, &c), *l16 = logits_of(out, NULL, NULL);
    double mx = 0;
    for (size_t i = 0; i < (size_t)N_TOK * c.vocab_size; i++) mx = fmax(mx, fabs((double)l32[i] - l16[i]));
    assert_true(mx > 0 && mx < TOL_F16);
    free(l32);
    free(l16);
    fp_of(dir, NULL, a);
    fp_of(out, NULL, b);
    assert_string_not_equal(a, b);                  /* other values, another fingerprint */
    /* a GGUF re-exported in f32 keeps the f16 values exactly */
    char out2[512];
    export_model(out, tmp_path("base16to32.gguf", out2, sizeof out2), SCDB_F32);
    fp_of(out2, NULL, a);
    assert_string_equal(a, b);
}

/* ------------------------------------------------------------ adapters */

static void test_adapter(void **state)
{
    (void)state;
    char base[512], ad[512], gb[512], ga[512], err[512], fa[40], fb[40], fc[40];
    data_path("models/base", base, sizeof base);
    data_path("adapters/c-header", ad, sizeof ad);
    tmp_path("base.gguf", gb, sizeof gb);
    tmp_path("c-header.gguf", ga, sizeof ga);
    export_model(base, gb, SCDB_F32);
    assert_int_equal(scdb_adapter_export_gguf(ad, NULL, ga, SCDB_F32, err, sizeof err), SCDB_OK);
    assert_true(scdb_adapter_is(ga));
    assert_false(scdb_adapter_is(gb));
    assert_true(scdb_adapter_is(ad));

    /* the fingerprint of the merged weights, every way the base is named */
    fp_of(ad, NULL, fa);
    fp_of(ga, NULL, fb);                               /* base.gguf beside it */
    assert_string_equal(fa, fb);
    assert_int_equal(scdb_weights_fp_adapter(gb, ga, fc, err, sizeof err), SCDB_OK);
    assert_string_equal(fa, fc);
    assert_int_equal(scdb_weights_fp_adapter(gb, ad, fc, err, sizeof err), SCDB_OK);   /* PEFT over GGUF */
    assert_string_equal(fa, fc);
    assert_int_equal(scdb_weights_fp_adapter(base, ad, fc, err, sizeof err), SCDB_OK);
    assert_string_equal(fa, fc);
    assert_int_equal(scdb_weights_fp_adapter(gb, gb, fc, err, sizeof err), SCDB_EINVAL);

    /* merged logits bit for bit; low-rank within f32 rounding */
    scdb_model_config cp, cg;
    float *lp = logits_of(ad, NULL, &cp), *lg = logits_of(ga, NULL, &cg);
    size_t n = (size_t)N_TOK * cp.vocab_size;
    assert_memory_equal(lp, lg, n * sizeof *lp);
    assert_string_equal(cg.name, "c-header");
    assert_string_equal(cg.parent, "base");
    assert_string_equal(cg.finetune, "lora");
    free(lg);
    scdb_model *m = NULL;
    assert_int_equal(scdb_model_load_adapter(gb, ga, &m, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_model_base_dir(m), gb);
    lg = logits_of_model(m);
    scdb_model_free(&m);
    assert_memory_equal(lp, lg, n * sizeof *lp);
    free(lg);
    scdb_model_load_opts lo = {.lora = SCDB_LORA_LOWRANK};
    lg = logits_of(ga, &lo, NULL);
    for (size_t i = 0; i < n; i++) assert_true(fabs((double)lp[i] - lg[i]) < 1e-3);
    free(lg);
    free(lp);
    assert_int_equal(scdb_model_load_adapter(gb, gb, &m, err, sizeof err), SCDB_EINVAL);
    scdb_model_load_opts wrong = {.base = gb};
    assert_int_equal(scdb_model_load_ex(gb, &wrong, &m, err, sizeof err), SCDB_EINVAL);

    /* the config, as the broker reads it */
    scdb_model_config c;
    assert_int_equal(scdb_model_config_load_any(ga, NULL, &c, err, sizeof err), SCDB_OK);
    assert_string_equal(c.name, "c-header");
    assert_string_equal(c.parent, "base");

    /* moved away from its base: not found, naming where it looked; found
     * through models_dir */
    char sub[512], moved[600];
    tmp_path("elsewhere", sub, sizeof sub);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(moved, sizeof moved, "%s/c-header.gguf", sub);
    assert_int_equal(link(ga, moved), 0);
    assert_int_equal(scdb_weights_fp_ex(moved, NULL, fc, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "base"));
    assert_non_null(strstr(err, "elsewhere"));
    assert_int_equal(scdb_model_load(moved, &m, err, sizeof err), SCDB_ENOTFOUND);
    fp_of(moved, tmpdir, fc);
    assert_string_equal(fa, fc);

    /* re-exported from the GGUF: the same tensors, byte for byte */
    char again[512];
    tmp_path("again.gguf", again, sizeof again);
    assert_int_equal(scdb_adapter_export_gguf(ga, NULL, again, SCDB_F32, err, sizeof err), SCDB_OK);
    scdb_gguf_file *f1 = NULL, *f2 = NULL;
    assert_int_equal(scdb_gguf_open(ga, &f1, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_open(again, &f2, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_tensor_count(f1), scdb_gguf_tensor_count(f2));
    for (int i = 0; i < scdb_gguf_tensor_count(f1); i++) {
        const scdb_gguf_tensor *t1 = scdb_gguf_tensor_at(f1, i), *t2 = scdb_gguf_find_tensor(f2, t1->name);
        assert_non_null(t2);
        assert_int_equal(t1->nbytes, t2->nbytes);
        assert_memory_equal(t1->data, t2->data, t1->nbytes);
    }
    scdb_gguf_close(&f1);
    scdb_gguf_close(&f2);
}

/* ------------------------------------------------------------ refusals */

/* A copy of src with edits: KVs dropped or replaced, tensors dropped,
 * reshaped (ne[0] and ne[1] swapped), turned into Q8_0 (zero bytes), or
 * added (F32 zeros). */
typedef struct edit {
    const char *drop_kv, *str_key, *str_val, *u32_key;
    uint32_t u32_val;
    const char *drop_t, *swap_t, *q8_t, *add_t;
    int64_t add_ne[2];
} edit;

static void edit_copy(const char *src, const char *dst, const edit *e)
{
    scdb_gguf_file *f = NULL;
    scdb_gguf_writer *w = NULL;
    char err[256];
    void *bufs[8];
    int nb = 0;
    assert_int_equal(scdb_gguf_open(src, &f, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_writer_new(&w), SCDB_OK);
    for (int i = 0; i < scdb_gguf_kv_count(f); i++) {
        const scdb_gguf_kv *kv = scdb_gguf_kv_at(f, i);
        if (e->drop_kv && !strcmp(kv->key, e->drop_kv)) continue;
        if ((e->str_key && !strcmp(kv->key, e->str_key)) || (e->u32_key && !strcmp(kv->key, e->u32_key))) continue;
        if (kv->type == SCDB_GGUF_STRING) assert_int_equal(scdb_gguf_set_str(w, kv->key, kv->str[0]), SCDB_OK);
        else if (kv->type == SCDB_GGUF_ARRAY && kv->elem == SCDB_GGUF_STRING)
            assert_int_equal(scdb_gguf_set_arr_str(w, kv->key, kv->str, kv->n), SCDB_OK);
        else if (kv->type == SCDB_GGUF_ARRAY)
            assert_int_equal(scdb_gguf_set_arr(w, kv->key, kv->elem, kv->raw, kv->n), SCDB_OK);
        /* numeric values sit unaligned inside the file: the KV as read */
        else assert_int_equal(scdb_gguf_set_kv(w, kv), SCDB_OK);
    }
    if (e->str_key) assert_int_equal(scdb_gguf_set_str(w, e->str_key, e->str_val), SCDB_OK);
    if (e->u32_key) assert_int_equal(scdb_gguf_set_u32(w, e->u32_key, e->u32_val), SCDB_OK);
    for (int i = 0; i < scdb_gguf_tensor_count(f); i++) {
        const scdb_gguf_tensor *t = scdb_gguf_tensor_at(f, i);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        int type = t->type;
        const void *data = t->data;
        if (e->drop_t && !strcmp(t->name, e->drop_t)) continue;
        if (e->swap_t && !strcmp(t->name, e->swap_t)) { ne[0] = t->ne[1]; ne[1] = t->ne[0]; }
        if (e->q8_t && !strcmp(t->name, e->q8_t)) {
            type = SCDB_GGML_Q8_0;
            data = bufs[nb++] = calloc(t->nbytes, 1);   /* Q8_0 is smaller than F32 */
        }
        assert_int_equal(scdb_gguf_add_tensor(w, t->name, type, t->n_dims, ne, data), SCDB_OK);
    }
    if (e->add_t) {
        size_t n = (size_t)e->add_ne[0] * (size_t)(e->add_ne[1] ? e->add_ne[1] : 1);
        bufs[nb] = calloc(n, sizeof(float));
        assert_int_equal(scdb_gguf_add_tensor(w, e->add_t, SCDB_GGML_F32, e->add_ne[1] ? 2 : 1, e->add_ne, bufs[nb]),
                         SCDB_OK);
        nb++;
    }
    assert_int_equal(scdb_gguf_writer_write(w, dst), SCDB_OK);
    scdb_gguf_writer_free(&w);
    scdb_gguf_close(&f);
    for (int i = 0; i < nb; i++) free(bufs[i]);
}

/* path must be refused with `want` by the loader, the config reader and
 * the fingerprint, each message naming `needle`. */
static void refused(const char *path, scdb_err want, const char *needle)
{
    scdb_model *m = NULL;
    scdb_model_config c;
    char err[512] = "", hex[40];
    scdb_err rc = scdb_model_load(path, &m, err, sizeof err);
    if (rc != want) fail_msg("load %s: want %s, got %s (%s)", path, scdb_strerror(want), scdb_strerror(rc), err);
    assert_null(m);
    if (needle && !strstr(err, needle)) fail_msg("load message '%s' does not name '%s'", err, needle);
    err[0] = '\0';
    rc = scdb_weights_fp_ex(path, NULL, hex, err, sizeof err);
    if (rc != want) fail_msg("fingerprint %s: want %s, got %s (%s)", path, scdb_strerror(want), scdb_strerror(rc), err);
    if (needle && !strstr(err, needle)) fail_msg("fingerprint message '%s' does not name '%s'", err, needle);
    rc = scdb_model_config_load_any(path, NULL, &c, err, sizeof err);
    /* the config reader does not read tensors: only key errors reach it */
    if (rc != SCDB_OK && rc != want) fail_msg("config %s: %s (%s)", path, scdb_strerror(rc), err);
}

static void test_refusals(void **state)
{
    (void)state;
    char dir[512], tiny[512], p[512], err[512];
    uint64_t rng = 42;
    tiny_model t = {.name = "tiny", .rng = &rng, .ff = 32};
    tiny_model_write(tmp_path("tiny", dir, sizeof dir), &t);
    export_model(dir, tmp_path("tiny.gguf", tiny, sizeof tiny), SCDB_F32);
    struct { edit e; scdb_err want; const char *needle; } cases[] = {
        {{.str_key = "general.architecture", .str_val = "gpt2"}, SCDB_EUNSUPPORTED, "gpt2"},
        {{.drop_kv = "general.architecture"}, SCDB_ENOTFOUND, "general.architecture"},
        {{.drop_kv = "llama.block_count"}, SCDB_ENOTFOUND, "llama.block_count"},
        {{.drop_kv = "llama.attention.layer_norm_rms_epsilon"}, SCDB_ENOTFOUND, "layer_norm_rms_epsilon"},
        {{.str_key = "llama.block_count", .str_val = "2"}, SCDB_EFORMAT, "llama.block_count"},
        {{.u32_key = "llama.attention.head_count_kv", .u32_val = 3}, SCDB_ERANGE, "head_count_kv"},
        {{.u32_key = "llama.expert_count", .u32_val = 4}, SCDB_EUNSUPPORTED, "expert"},
        {{.u32_key = "llama.rope.dimension_count", .u32_val = 2}, SCDB_EUNSUPPORTED, "partial RoPE"},
        {{.str_key = "llama.rope.scaling.type", .str_val = "yarn"}, SCDB_EUNSUPPORTED, "yarn"},
        {{.drop_t = "blk.1.ffn_up.weight"}, SCDB_ENOTFOUND, "blk.1.ffn_up.weight"},
        {{.drop_t = "output_norm.weight"}, SCDB_ENOTFOUND, "output_norm.weight"},
        {{.swap_t = "blk.0.attn_k.weight"}, SCDB_ESHAPE, "blk.0.attn_k.weight"},
        {{.q8_t = "blk.0.ffn_down.weight"}, SCDB_EDTYPE, "Q8_0"},
        {{.add_t = "blk.0.attn_q.bias", .add_ne = {16, 0}}, SCDB_EUNSUPPORTED, "blk.0.attn_q.bias"},
        {{.add_t = "rope_freqs.weight", .add_ne = {2, 0}}, SCDB_EUNSUPPORTED, "rope_freqs"},
    };
    for (size_t i = 0; i < SCDB_ARRAY_LEN(cases); i++) {
        snprintf(p, sizeof p, "%s/bad%zu.gguf", tmpdir, i);
        edit_copy(tiny, p, &cases[i].e);
        refused(p, cases[i].want, cases[i].needle);
    }
    /* the quantized refusal names the tensor too */
    snprintf(p, sizeof p, "%s/bad12.gguf", tmpdir);
    scdb_model *m = NULL;
    assert_int_equal(scdb_model_load(p, &m, err, sizeof err), SCDB_EDTYPE);
    assert_non_null(strstr(err, "blk.0.ffn_down.weight"));
    /* no output.weight: tied, the logits use the embedding */
    edit tied = {.drop_t = "output.weight"};
    snprintf(p, sizeof p, "%s/tied.gguf", tmpdir);
    edit_copy(tiny, p, &tied);
    assert_int_equal(scdb_model_load(p, &m, err, sizeof err), SCDB_OK);
    assert_true(scdb_model_cfg(m)->tied_embeddings);
    const float *emb, *nrm, *out;
    scdb_model_globals(m, &emb, &nrm, &out);
    assert_ptr_equal(emb, out);
    scdb_model_free(&m);
    char h[40];
    assert_int_equal(scdb_weights_fp_ex(p, NULL, h, err, sizeof err), SCDB_OK);
    /* unnamed: named after the file */
    edit unnamed = {.drop_kv = "general.name"};
    snprintf(p, sizeof p, "%s/anon.gguf", tmpdir);
    edit_copy(tiny, p, &unnamed);
    scdb_model_config c;
    assert_int_equal(scdb_model_config_load_any(p, NULL, &c, err, sizeof err), SCDB_OK);
    assert_string_equal(c.name, "anon");
}

static void test_adapter_refusals(void **state)
{
    (void)state;
    char dir[512], adir[512], base[512], ad[512], p[512], err[512], hex[40];
    uint64_t rng = 7, arng = 9;
    tiny_model t = {.name = "tbase", .rng = &rng};
    tiny_model_write(tmp_path("tbase", dir, sizeof dir), &t);
    export_model(dir, tmp_path("tbase.gguf", base, sizeof base), SCDB_F32);
    tiny_adapter ta = {.base = "tbase", .rng = &arng};
    tiny_adapter_write(tmp_path("tad", adir, sizeof adir), &ta);
    assert_int_equal(scdb_adapter_export_gguf(adir, NULL, tmp_path("tad.gguf", ad, sizeof ad), SCDB_F32, err,
                                              sizeof err), SCDB_OK);
    char f1[40], f2[40];
    fp_of(adir, NULL, f1);
    fp_of(ad, NULL, f2);
    assert_string_equal(f1, f2);
    struct { edit e; scdb_err want; const char *needle; } cases[] = {
        {{.str_key = "adapter.type", .str_val = "control_vector"}, SCDB_EUNSUPPORTED, "control_vector"},
        {{.str_key = "general.architecture", .str_val = "qwen2"}, SCDB_EUNSUPPORTED, "qwen2"},
        {{.drop_t = "blk.1.ffn_up.weight.lora_b"}, SCDB_EFORMAT, "lora_a but no lora_b"},
        {{.add_t = "token_embd.weight.lora_a", .add_ne = {16, 4}}, SCDB_EUNSUPPORTED, "token_embd"},
        {{.add_t = "blk.0.attn_norm.weight", .add_ne = {16, 0}}, SCDB_EUNSUPPORTED, "norm"},
        {{.add_t = "blk.0.foo.weight.lora_a", .add_ne = {16, 4}}, SCDB_EFORMAT, "blk.0.foo"},
        {{.swap_t = "blk.0.attn_v.weight.lora_a"}, SCDB_EUNSUPPORTED, "rank"},
        {{.str_key = "general.base_model.0.name", .str_val = "nope"}, SCDB_ENOTFOUND, "nope"},
        {{.drop_kv = "general.base_model.0.name"}, SCDB_ENOTFOUND, "general.base_model.0.name"},
        {{.str_key = "general.base_model.0.name", .str_val = "tad"}, SCDB_EUNSUPPORTED, "itself an adapter"},
        {{.str_key = "general.base_model.0.name", .str_val = "tbase/"}, SCDB_EUNSUPPORTED, "directory"},
    };
    for (size_t i = 0; i < SCDB_ARRAY_LEN(cases); i++) {
        snprintf(p, sizeof p, "%s/badad%zu.gguf", tmpdir, i);
        edit_copy(ad, p, &cases[i].e);
        refused(p, cases[i].want, cases[i].needle);
    }
    /* a base of other shapes (code's d 128 vs the tiny's 16) */
    char fam[512];
    export_model(data_path("models/code", fam, sizeof fam), tmp_path("code.gguf", p, sizeof p), SCDB_F32);
    assert_int_equal(scdb_weights_fp_adapter(p, ad, hex, err, sizeof err), SCDB_ESHAPE);
    scdb_model *m = NULL;
    assert_int_equal(scdb_model_load_adapter(p, ad, &m, err, sizeof err), SCDB_ESHAPE);
    /* a missing explicit base */
    assert_int_equal(scdb_model_load_adapter(tmp_path("none.gguf", p, sizeof p), ad, &m, err, sizeof err),
                     SCDB_ENOTFOUND);
    /* alpha: absent means a scale of 1 (llama.cpp's rule), negative is refused */
    edit noalpha = {.drop_kv = "adapter.lora.alpha"};
    snprintf(p, sizeof p, "%s/noalpha.gguf", tmpdir);
    edit_copy(ad, p, &noalpha);
    scdb_adapter *a = NULL;
    assert_int_equal(scdb_adapter_open(p, NULL, &a, err, sizeof err), SCDB_OK);
    assert_true(a->scale == 1.0f);
    assert_int_equal(a->r, 4);
    scdb_adapter_close(&a);
}

/* Fail each allocation of call(ctx) in turn until it runs without a
 * failure: every failure must be SCDB_ENOMEM (with what the call leaves
 * freed by undo). */
static void each_alloc(const char *what, scdb_err (*call)(void *), void *ctx)
{
    int done = 0;
    for (long n = 0; !done && n < 20000; n++) {
        alloc_fault_arm(n);
        scdb_err rc = call(ctx);
        int hit = alloc_fault_fired();
        alloc_fault_disarm();
        if (!hit) {
            if (rc) fail_msg("%s: %s without a failed allocation", what, scdb_strerror(rc));
            done = 1;
        } else if (rc != SCDB_ENOMEM) {
            fail_msg("%s: allocation %ld failed, the call returned %s", what, n, scdb_strerror(rc));
        }
    }
    assert_true(done);
}

typedef struct af_ctx {
    char model[512], adapter[512], peft[512], out[512];
} af_ctx;

static scdb_err af_load(void *p)
{
    af_ctx *c = p;
    scdb_model *m = NULL;
    scdb_err rc = scdb_model_load(c->model, &m, NULL, 0);
    scdb_model_free(&m);
    return rc;
}

static scdb_err af_load_adapter(void *p)
{
    af_ctx *c = p;
    scdb_model *m = NULL;
    scdb_err rc = scdb_model_load(c->adapter, &m, NULL, 0);
    scdb_model_free(&m);
    return rc;
}

static scdb_err af_fp(void *p)
{
    af_ctx *c = p;
    char hex[40];
    scdb_err rc = scdb_weights_fp_ex(c->adapter, NULL, hex, NULL, 0);
    return rc ? rc : scdb_weights_fp_ex(c->model, NULL, hex, NULL, 0);
}

static scdb_err af_export(void *p)
{
    af_ctx *c = p;
    scdb_model *m = NULL;
    scdb_err rc = scdb_model_load(c->model, &m, NULL, 0);
    if (!rc) rc = scdb_model_export_gguf(m, c->out, SCDB_F16, NULL, 0);
    scdb_model_free(&m);
    return rc ? rc : scdb_adapter_export_gguf(c->peft, NULL, c->out, SCDB_F32, NULL, 0);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    af_ctx c;
    char dir[512], err[512];
    uint64_t rng = 5, arng = 6;
    tiny_model t = {.name = "abase", .rng = &rng, .layers = 1};
    tiny_model_write(tmp_path("abase", dir, sizeof dir), &t);
    tmp_path("abase.gguf", c.model, sizeof c.model);
    export_model(dir, c.model, SCDB_F32);
    tiny_adapter ta = {.base = "abase", .rng = &arng, .layers = 1};
    tiny_adapter_write(tmp_path("aad", c.peft, sizeof c.peft), &ta);
    tmp_path("aad.gguf", c.adapter, sizeof c.adapter);
    assert_int_equal(scdb_adapter_export_gguf(c.peft, NULL, c.adapter, SCDB_F32, err, sizeof err), SCDB_OK);
    tmp_path("aout.gguf", c.out, sizeof c.out);
    each_alloc("load", af_load, &c);
    each_alloc("load adapter", af_load_adapter, &c);
    each_alloc("fingerprint", af_fp, &c);
    each_alloc("export", af_export, &c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_exact),
        cmocka_unit_test(test_permutation),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_adapter),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_adapter_refusals),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
