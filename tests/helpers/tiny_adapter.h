/*
 * tiny_adapter.h — a small random PEFT LoRA adapter (adapter_config.json +
 * adapter_model.safetensors, schema/peft_adapter.h) over a tiny_model.h
 * base, for the tests that need one on disk (test_adapter, test_broker):
 *
 *   uint64_t rng = 7;
 *   tiny_adapter a = {.base = "base", .rng = &rng};  // r 4, alpha 8, all 7 projections
 *   tiny_adapter_write(dir, &a);
 *
 * The base's dimensions default to tiny_model's (d 16, 2 layers, 4:2 heads
 * of 4, d_ff 24).  Factors are scale x u (u uniform in [-1, 1), scale 0.2
 * unless given) from the caller's xorshift stream, A then B of each
 * (layer, module) in order, stored as dtype (F32 unless given).
 *
 * adapter_config.json is PEFT's keys with their defaults; `config` is a
 * JSON object whose members replace them (a member whose value is the
 * string "__drop__" removes the key), `raw_config` replaces the whole
 * text.  For the bad-input tests: `modules` (bits 1 << scdb_lora_module)
 * limits which modules get tensors (0: those of target_modules' default,
 * all seven), `skip` leaves out and `bad_shape` widens (one column of A,
 * one row of B) the factor with that full name, `rank_plus` adds rows to
 * every A, `as_i32` stores one as I32, `extra` adds F32 [r, d] zeros under
 * that name, and `layers_extra` writes factors for that many layers past
 * the base's.  Include after <cmocka.h> and tiny_model.h.
 */
#ifndef SCDB_TEST_TINY_ADAPTER_H
#define SCDB_TEST_TINY_ADAPTER_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "peft_adapter.h"
#include "safetensors.h"
#include "tiny_model.h"

typedef struct tiny_adapter {
    const char *base;            /* base_model_name_or_path (required)       */
    int r;                       /* 0: 4                                     */
    double alpha;                /* 0: 8                                     */
    int d, layers, heads, kv, hd, ff;   /* base dims, 0: tiny_model's        */
    scdb_dtype dtype;            /* factors' dtype (F32 = 0)                 */
    float scale;                 /* 0: 0.2                                   */
    uint64_t *rng;               /* required                                 */
    unsigned modules;            /* modules given tensors; 0: all seven      */
    const char *config;          /* JSON object overriding config keys       */
    const char *raw_config;      /* the whole config text                    */
    const char *skip, *bad_shape, *as_i32, *extra;   /* full tensor names    */
    int rank_plus, layers_extra;
} tiny_adapter;

static inline uint16_t tiny_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffffu;
    if (e <= 0) return (uint16_t)sign;                       /* tiny values: zero */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint32_t)e << 10 | mant >> 13);   /* truncated */
}

static inline void tiny_adapter_write(const char *dir, const tiny_adapter *t)
{
    int r = t->r ? t->r : 4, d = t->d ? t->d : 16, layers = t->layers ? t->layers : 2;
    int heads = t->heads ? t->heads : 4, kv = t->kv ? t->kv : 2, hd = t->hd ? t->hd : 4;
    int ff = t->ff ? t->ff : 24, qd = heads * hd, kvd = kv * hd;
    const int64_t shape[SCDB_LORA_N_MODULES][2] = {{qd, d}, {kvd, d}, {kvd, d}, {d, qd},
                                                   {ff, d}, {ff, d},  {d, ff}};
    unsigned modules = t->modules ? t->modules : (1u << SCDB_LORA_N_MODULES) - 1;
    float scale = t->scale > 0 ? t->scale : 0.2f;
    char path[1200], name[200];
    void **bufs = calloc((size_t)(layers + t->layers_extra) * 14 + 2, sizeof *bufs);
    int nb = 0;
    scdb_st_writer *w;
    FILE *f;

    assert_non_null(bufs);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_CONFIG, dir);
    f = fopen(path, "w");
    assert_non_null(f);
    if (t->raw_config) {
        fputs(t->raw_config, f);
    } else {
        cJSON *c = cJSON_CreateObject(), *tm = cJSON_CreateArray();
        cJSON_AddStringToObject(c, "peft_type", "LORA");
        cJSON_AddStringToObject(c, "base_model_name_or_path", t->base);
        cJSON_AddNumberToObject(c, "r", r);
        cJSON_AddNumberToObject(c, "lora_alpha", t->alpha > 0 ? t->alpha : 8.0);
        cJSON_AddBoolToObject(c, "use_rslora", 0);
        for (int m = 0; m < SCDB_LORA_N_MODULES; m++)
            cJSON_AddItemToArray(tm, cJSON_CreateString(scdb_lora_module_name(m)));
        cJSON_AddItemToObject(c, "target_modules", tm);
        cJSON_AddStringToObject(c, "bias", "none");
        cJSON_AddBoolToObject(c, "fan_in_fan_out", 0);
        cJSON_AddNullToObject(c, "modules_to_save");
        cJSON_AddBoolToObject(c, "use_dora", 0);
        cJSON_AddNumberToObject(c, "lora_dropout", 0.0);
        cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
        if (t->config) {
            cJSON *o = cJSON_Parse(t->config), *e;
            assert_true(cJSON_IsObject(o));
            cJSON_ArrayForEach(e, o) {
                cJSON_DeleteItemFromObjectCaseSensitive(c, e->string);
                if (!(cJSON_IsString(e) && !strcmp(e->valuestring, "__drop__")))
                    cJSON_AddItemToObject(c, e->string, cJSON_Duplicate(e, 1));
            }
            cJSON_Delete(o);
        }
        char *s = cJSON_Print(c);
        fputs(s, f);
        free(s);
        cJSON_Delete(c);
    }
    assert_int_equal(fclose(f), 0);

    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    scdb_dtype dt = t->dtype;
    for (int l = 0; l < layers + t->layers_extra; l++)
        for (int m = 0; m < SCDB_LORA_N_MODULES; m++) {
            if (!(modules & (1u << m))) continue;
            for (int is_b = 0; is_b < 2; is_b++) {
                int64_t sh[2] = {is_b ? shape[m][0] : r + t->rank_plus, is_b ? r : shape[m][1]};
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", l,
                         scdb_lora_module_path(m), is_b ? 'B' : 'A');
                if (t->skip && !strcmp(t->skip, name)) continue;
                if (t->bad_shape && !strcmp(t->bad_shape, name)) sh[is_b ? 0 : 1] += 1;
                size_t n = (size_t)(sh[0] * sh[1]);
                float *v = malloc(n * sizeof *v);
                assert_non_null(v);
                for (size_t k = 0; k < n; k++) v[k] = scale * tiny_frand(t->rng);
                scdb_dtype here = t->as_i32 && !strcmp(t->as_i32, name) ? SCDB_I32 : dt;
                if (here == SCDB_F16 || here == SCDB_BF16) {
                    uint16_t *h = malloc(n * sizeof *h);
                    assert_non_null(h);
                    for (size_t k = 0; k < n; k++) {
                        uint32_t u;
                        memcpy(&u, &v[k], sizeof u);
                        h[k] = here == SCDB_BF16 ? (uint16_t)(u >> 16) : tiny_f32_to_f16(v[k]);
                    }
                    free(v);
                    v = (float *)h;
                }
                bufs[nb++] = v;
                assert_int_equal(scdb_st_writer_add(w, name, here, 2, sh, v), SCDB_OK);
            }
        }
    if (t->extra) {
        int64_t sh[2] = {r, d};
        float *z = calloc((size_t)(r * d), sizeof *z);
        assert_non_null(z);
        bufs[nb++] = z;
        assert_int_equal(scdb_st_writer_add(w, t->extra, SCDB_F32, 2, sh, z), SCDB_OK);
    }
    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_WEIGHTS, dir);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
}

#endif /* SCDB_TEST_TINY_ADAPTER_H */
