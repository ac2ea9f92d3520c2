/*
 * tiny_model.h — a small random Llama-style model in scdb's own layout
 * (config.json + model.safetensors) for the tests that need one on disk:
 * test_model (load errors, forward consistency), test_model_hf (the
 * Hugging Face exporter's source), test_codec (producer / consumer pairs),
 * test_evict (policy training).
 *
 *   uint64_t rng = 42;
 *   tiny_model t = {.name = "tiny", .rng = &rng};   // 256/16/2 layers/4:2 heads
 *   tiny_model_write(dir, &t);
 *
 * Weights come from an xorshift stream the caller owns (*rng, advanced by
 * the write, so successive models differ), in file order: the three
 * top-level tensors, then each layer's nine.  Norm weights are
 * 1 + 0.1 u, the others scale x u, u uniform in [-1, 1).  With perturb > 0
 * each weight also gets perturb x (its scale, 0.1 for norms) x u' from a
 * second stream (*noise): a "fine-tuned" relative of the model the same
 * rng seed gives.  skip / bad_shape / as_i32 name a tensor to leave out,
 * write one row too long, or store as I32 (load-error tests).  Include in
 * one file of a test that links scdb_schema and cmocka.
 */
#ifndef SCDB_TEST_TINY_MODEL_H
#define SCDB_TEST_TINY_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

/* Scales in tensor order: tok_embeddings, norm, output, attention_norm, wq,
 * wk, wv, wo, ffn_norm, w1, w2, w3 (norms: 0, meaning 1 + 0.1 u). */
#define TINY_N_SCALES 12
static const float TINY_SCALES[TINY_N_SCALES] = {1.0f, 0, 0.3f, 0, 0.4f, 0.4f, 0.4f, 0.3f,
                                                 0,    0.3f, 0.3f, 0.3f};

typedef struct tiny_model {
    const char *name;            /* config "name" (required)                  */
    const char *domain;          /* config "domain"; NULL: left out           */
    int vocab, d, layers, heads, kv, hd, ff;  /* 0: 256, 16, 2, 4, 2, 4, 24   */
    const float *scales;         /* TINY_N_SCALES; NULL: TINY_SCALES          */
    uint64_t *rng;               /* the weights' stream (required)            */
    float perturb;               /* > 0: add noise from *noise                */
    uint64_t *noise;
    const char *skip, *bad_shape, *as_i32;    /* full tensor names, or NULL   */
} tiny_model;

static inline float tiny_frand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static inline void tiny_model_write(const char *dir, const tiny_model *t)
{
    int vocab = t->vocab ? t->vocab : 256, d = t->d ? t->d : 16;
    int layers = t->layers ? t->layers : 2, heads = t->heads ? t->heads : 4;
    int kv = t->kv ? t->kv : 2, hd = t->hd ? t->hd : 4, ff = t->ff ? t->ff : 24;
    int qd = heads * hd, kvd = kv * hd, nb = 0;
    const float *sc = t->scales ? t->scales : TINY_SCALES;
    const struct { const char *n; int64_t d0, d1; } top[] = {
        {"tok_embeddings.weight", vocab, d}, {"norm.weight", d, 0}, {"output.weight", vocab, d}};
    const struct { const char *n; int64_t d0, d1; } lay[] = {
        {"attention_norm.weight", d, 0},   {"attention.wq.weight", qd, d},
        {"attention.wk.weight", kvd, d},   {"attention.wv.weight", kvd, d},
        {"attention.wo.weight", d, qd},    {"ffn_norm.weight", d, 0},
        {"feed_forward.w1.weight", ff, d}, {"feed_forward.w2.weight", d, ff},
        {"feed_forward.w3.weight", ff, d}};
    float **bufs = calloc((size_t)(3 + 9 * layers), sizeof *bufs);
    char path[1200], name[128];
    scdb_st_writer *w;
    FILE *f;

    assert_non_null(bufs);
    assert_true(strlen(dir) < 1024);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"name\":\"%s\",", t->name);
    if (t->domain) fprintf(f, "\"domain\":\"%s\",", t->domain);
    fprintf(f, "\"parent\":null,\"arch\":\"llama\",\"vocab_size\":%d,\"d_model\":%d,"
               "\"n_layers\":%d,\"n_heads\":%d,\"n_kv_heads\":%d,\"head_dim\":%d,\"d_ff\":%d,"
               "\"max_seq_len\":64,\"rope_theta\":10000.0,\"norm_eps\":1e-5}",
            vocab, d, layers, heads, kv, hd, ff);
    assert_int_equal(fclose(f), 0);

    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    for (int l = -1; l < layers; l++) {
        for (int i = 0; i < (l < 0 ? 3 : 9); i++) {
            int64_t shape[2] = {l < 0 ? top[i].d0 : lay[i].d0, l < 0 ? top[i].d1 : lay[i].d1};
            float scale = sc[l < 0 ? i : 3 + i];
            int ndim = shape[1] > 0 ? 2 : 1;
            size_t numel = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
            float *b;
            if (l < 0) snprintf(name, sizeof name, "%s", top[i].n);
            else snprintf(name, sizeof name, "layers.%d.%s", l, lay[i].n);
            if (t->skip && !strcmp(t->skip, name)) continue;
            /* room for the extra row of a bad_shape tensor (left zero) */
            b = bufs[nb++] = calloc(numel + (size_t)(ndim == 2 ? shape[1] : 1), sizeof *b);
            assert_non_null(b);
            for (size_t k = 0; k < numel; k++) {
                b[k] = scale == 0.0f ? 1.0f + 0.1f * tiny_frand(t->rng) : scale * tiny_frand(t->rng);
                if (t->perturb > 0)
                    b[k] += t->perturb * (scale == 0.0f ? 0.1f : scale) * tiny_frand(t->noise);
            }
            if (t->bad_shape && !strcmp(t->bad_shape, name)) shape[0] += 1;
            assert_int_equal(scdb_st_writer_add(w, name,
                                                t->as_i32 && !strcmp(t->as_i32, name) ? SCDB_I32
                                                                                      : SCDB_F32,
                                                ndim, shape, b),
                             SCDB_OK);
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
}

#endif /* SCDB_TEST_TINY_MODEL_H */
