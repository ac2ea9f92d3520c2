/* hf_export.h — test helpers (cmocka): a tiny random model in scdb's own
 * layout (tiny_model.h), and an exporter of an own-layout model directory
 * into the Hugging Face Llama layout (one file or sharded, F32/F16/BF16,
 * tied, and the deliberately bad variants test_model_hf feeds the loader),
 * written with the safetensors writer.  Include after <cmocka.h>, in one
 * file of a test that links scdb_model (test_model_hf, test_weights_fp,
 * test_broker). */
#ifndef SCDB_TEST_HF_EXPORT_H
#define SCDB_TEST_HF_EXPORT_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"
#include "safetensors.h"
#include "tiny_model.h"

static inline void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(s, f);
    assert_int_equal(fclose(f), 0);
}

/* ------------------------------------------------------------ a tiny own-layout model */

typedef struct tiny_cfg { int vocab, d, layers, heads, kv, hd, ff; } tiny_cfg;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* A random model in scdb's own layout (tiny_model.h). */
static inline void write_tiny_own(const char *dir, const tiny_cfg *t)
{
    tiny_model m = {.name = "tiny", .domain = "test", .vocab = t->vocab, .d = t->d,
                    .layers = t->layers, .heads = t->heads, .kv = t->kv, .hd = t->hd,
                    .ff = t->ff, .rng = &rng};
    tiny_model_write(dir, &m);
}

/* ------------------------------------------------------------ exporter */

typedef struct exp_opts {
    int hf;                  /* 1: Hugging Face layout; 0: scdb's own (for dtype twins) */
    scdb_dtype dtype;        /* F32, F16 or BF16 */
    int shards;              /* HF: 0 = model.safetensors; N >= 1 = index + N shards */
    int tied;                /* HF: tie_word_embeddings true, no lm_head */
    int no_head_dim;         /* HF: leave head_dim out of config.json */
    const char *skip;        /* HF name left out of the files (the index still names it) */
    const char *unlisted;    /* HF name left out of the index (its shard still has it) */
    const char *bad_shape;   /* name written with one row too many */
    const char *as_i32;      /* name written as I32 */
    const char *drop_key;    /* config.json key left out */
    const char *extra;       /* JSON object whose members are added to config.json */
} exp_opts;

/* own name -> Hugging Face name */
static inline void hf_name(const char *own, char *out, size_t cap)
{
    static const char *const map[][2] = {
        {"attention_norm.weight", "input_layernorm.weight"},
        {"attention.wq.weight", "self_attn.q_proj.weight"},
        {"attention.wk.weight", "self_attn.k_proj.weight"},
        {"attention.wv.weight", "self_attn.v_proj.weight"},
        {"attention.wo.weight", "self_attn.o_proj.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
        {"feed_forward.w3.weight", "mlp.up_proj.weight"},
        {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    };
    int layer, n = 0;
    if (!strcmp(own, "tok_embeddings.weight")) { snprintf(out, cap, "model.embed_tokens.weight"); return; }
    if (!strcmp(own, "norm.weight")) { snprintf(out, cap, "model.norm.weight"); return; }
    if (!strcmp(own, "output.weight")) { snprintf(out, cap, "lm_head.weight"); return; }
    assert_int_equal(sscanf(own, "layers.%d.%n", &layer, &n), 1);
    for (size_t i = 0; i < SCDB_ARRAY_LEN(map); i++)
        if (!strcmp(own + n, map[i][0])) { snprintf(out, cap, "model.layers.%d.%s", layer, map[i][1]); return; }
    fail_msg("no Hugging Face name for %s", own);
}

static inline void write_hf_config(const char *dir, const scdb_model_config *c, const exp_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddNumberToObject(j, "hidden_size", c->d_model);
    cJSON_AddNumberToObject(j, "intermediate_size", c->d_ff);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_heads);
    if (!o->no_head_dim) cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_seq_len);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", o->tied);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON *s = cJSON_AddObjectToObject(j, "scdb");
    cJSON_AddStringToObject(s, "name", c->name);
    if (o->drop_key) cJSON_DeleteItemFromObjectCaseSensitive(j, o->drop_key);
    if (o->extra) {
        cJSON *x = cJSON_Parse(o->extra);
        assert_non_null(x);
        while (x->child) {
            cJSON *it = cJSON_DetachItemViaPointer(x, x->child);
            cJSON_DeleteItemFromObjectCaseSensitive(j, it->string);
            cJSON_AddItemToObject(j, it->string, it);
        }
        cJSON_Delete(x);
    }
    char *txt = cJSON_Print(j), path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, txt);
    free(txt);
    cJSON_Delete(j);
}

/* Write the model of own-layout directory `src` into `dst` as `o` says. */
static inline void export_model(const char *src, const char *dst, const exp_opts *o)
{
    char path[700], err[512], name[160];
    scdb_model_config c;
    scdb_st_file *st;

    snprintf(path, sizeof path, "%s/config.json", src);
    assert_int_equal(scdb_model_config_load(path, &c, err, sizeof err), SCDB_OK);
    assert_int_equal(c.layout, SCDB_LAYOUT_SCDB);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    assert_int_equal(scdb_st_open(path, &st, err, sizeof err), SCDB_OK);
    mkdir(dst, 0755);
    if (o->hf) {
        write_hf_config(dst, &c, o);
    } else {
        char cmd[1500];
        snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/config.json'", src, dst);
        assert_int_equal(system(cmd), 0);
    }

    int n = scdb_st_count(st), nw = o->hf && o->shards > 0 ? o->shards : 1;
    scdb_st_writer *w[16];
    void **bufs = calloc((size_t)n, sizeof *bufs);
    assert_non_null(bufs);
    assert_true(nw <= 16 && nw <= n);
    for (int k = 0; k < nw; k++) {
        assert_int_equal(scdb_st_writer_new(&w[k]), SCDB_OK);
        assert_int_equal(scdb_st_writer_meta(w[k], "format", "pt"), SCDB_OK);
    }
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < n; i++) {
        const scdb_st_tensor *t = scdb_st_at(st, i);
        assert_int_equal(t->dtype, SCDB_F32);
        if (o->hf) hf_name(t->name, name, sizeof name);
        else snprintf(name, sizeof name, "%s", t->name);
        if (o->hf && o->tied && !strcmp(name, "lm_head.weight")) continue;
        int k = (int)((int64_t)i * nw / n);
        char shard[64];
        snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors", k + 1, nw);
        if (!(o->unlisted && !strcmp(o->unlisted, name)))
            cJSON_AddStringToObject(map, name, shard);
        if (o->skip && !strcmp(o->skip, name)) continue;
        int64_t shape[SCDB_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        size_t numel = t->nbytes / 4, rowlen = t->ndim == 2 ? (size_t)t->shape[1] : 1;
        if (o->bad_shape && !strcmp(o->bad_shape, name)) shape[0] += 1;
        size_t out_numel = (size_t)shape[0] * rowlen;
        scdb_dtype dt = o->as_i32 && !strcmp(o->as_i32, name) ? SCDB_I32 : o->dtype;
        if (dt == SCDB_F32 || dt == SCDB_I32) {
            float *b = calloc(out_numel, sizeof *b);
            assert_non_null(b);
            memcpy(b, t->data, t->nbytes);
            bufs[i] = b;
        } else {
            uint16_t *b = calloc(out_numel, sizeof *b);
            assert_non_null(b);
            if (dt == SCDB_F16) scdb_f32_to_f16_n(t->data, b, numel);
            else scdb_f32_to_bf16_n(t->data, b, numel);
            bufs[i] = b;
        }
        assert_int_equal(scdb_st_writer_add(w[k], name, dt, t->ndim, shape, bufs[i]), SCDB_OK);
    }
    for (int k = 0; k < nw; k++) {
        if (o->hf && o->shards > 0)
            snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dst, k + 1, nw);
        else
            snprintf(path, sizeof path, "%s/model.safetensors", dst);
        assert_int_equal(scdb_st_writer_write(w[k], path), SCDB_OK);
        scdb_st_writer_free(&w[k]);
    }
    if (o->hf && o->shards > 0) {
        char *txt = cJSON_Print(index);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dst);
        write_text(path, txt);
        free(txt);
    }
    cJSON_Delete(index);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    scdb_st_close(&st);
}

#endif
