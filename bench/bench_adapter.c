/* bench_adapter.c — `scdb bench adapter`: a PEFT LoRA adapter applied
 * merged (W + s B A computed at load) versus low-rank (y += s (x A^T) B^T
 * after each targeted projection), on one model in one run: load time,
 * the memory each mode adds over the base, prefill and decode time, and
 * the largest logit difference between the two (model.h,
 * scdb_model_load_ex).  Without --adapter it writes a random adapter
 * (rank --rank, all seven projections) over DATA/models/base into a
 * temporary directory.  Which mode is cheaper decides the loader's
 * default. */
#include "bench.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "peft_adapter.h"
#include "safetensors.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float frand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* A random rank-r adapter over every projection of base (config cfg). */
static int write_adapter(const char *dir, const char *base_dir, const scdb_model_config *c, int r)
{
    char path[1400], name[200];
    int64_t shape[SCDB_LORA_N_MODULES][2];
    scdb_model_proj_shapes(c, shape);
    float **bufs = calloc((size_t)c->n_layers * 14, sizeof *bufs);
    int nb = 0, rc = -1;
    uint64_t rng = 0x5eed;
    scdb_st_writer *w = NULL;
    FILE *f;

    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_CONFIG, dir);
    if (!bufs || !(f = fopen(path, "w"))) goto done;
    fprintf(f, "{\"peft_type\":\"LORA\",\"base_model_name_or_path\":\"%s\",\"r\":%d,\"lora_alpha\":%d,"
               "\"use_rslora\":false,\"target_modules\":[\"q_proj\",\"k_proj\",\"v_proj\",\"o_proj\","
               "\"gate_proj\",\"up_proj\",\"down_proj\"],\"bias\":\"none\",\"fan_in_fan_out\":false,"
               "\"modules_to_save\":null,\"use_dora\":false,\"lora_dropout\":0.0,\"task_type\":\"CAUSAL_LM\"}\n",
            base_dir, r, 2 * r);
    if (fclose(f) || scdb_st_writer_new(&w)) goto done;
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < SCDB_LORA_N_MODULES; m++)
            for (int is_b = 0; is_b < 2; is_b++) {
                int64_t sh[2] = {is_b ? shape[m][0] : r, is_b ? r : shape[m][1]};
                size_t n = (size_t)(sh[0] * sh[1]);
                float *v = bufs[nb++] = malloc(n * sizeof *v);
                if (!v) goto done;
                for (size_t k = 0; k < n; k++) v[k] = 0.05f * frand(&rng);
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", l,
                         scdb_lora_module_path(m), is_b ? 'B' : 'A');
                if (scdb_st_writer_add(w, name, SCDB_F32, 2, sh, v)) goto done;
            }
    snprintf(path, sizeof path, "%s/" SCDB_ADAPTER_WEIGHTS, dir);
    rc = scdb_st_writer_write(w, path) ? -1 : 0;
done:
    scdb_st_writer_free(&w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    return rc;
}

typedef struct mode_res {
    double load_s[64], prefill_s[64], decode_s[64];   /* per rep */
    size_t added_bytes;
} mode_res;

/* The three phases, separate functions so that callgrind can count each
 * (--toggle-collect=adapter_load and so on). */
__attribute__((noinline)) static scdb_err adapter_load(const char *dir, scdb_lora_apply mode,
                                                        scdb_model **m, char *err, size_t errlen)
{
    scdb_model_load_opts o = {.lora = mode};
    return scdb_model_load_ex(dir, &o, m, err, errlen);
}

__attribute__((noinline)) static scdb_err adapter_prefill(const scdb_model *m, const int32_t *tok, int n,
                                                           scdb_kv_cache *c, float *logits)
{
    c->n = 0;
    return scdb_model_forward(m, tok, NULL, n, c, logits, NULL);
}

__attribute__((noinline)) static scdb_err adapter_decode(const scdb_model *m, const int32_t *tok, int n,
                                                          scdb_kv_cache *c, float *one)
{
    scdb_err rc = SCDB_OK;
    c->n = 0;
    for (int i = 0; i < n && !rc; i++) rc = scdb_model_forward(m, tok + i, NULL, 1, c, one, NULL);
    return rc;
}

/* One rep of one mode. */
static scdb_err run_mode(const char *dir, scdb_lora_apply mode, int rep, const int32_t *tok, int n,
                         mode_res *res, float *logits, char *err, size_t errlen)
{
    scdb_model *m = NULL;
    scdb_kv_cache *c = NULL;
    scdb_adapter *a = NULL;
    float *one = NULL;
    scdb_err rc;
    double t0 = now_s();
    if ((rc = adapter_load(dir, mode, &m, err, errlen))) return rc;
    res->load_s[rep] = now_s() - t0;
    const scdb_model_config *cf = scdb_model_cfg(m);
    if ((rc = scdb_model_cache_new(m, n + 1, &c))) goto done;
    if (!(one = malloc((size_t)cf->vocab_size * sizeof *one))) { rc = SCDB_ENOMEM; goto done; }
    t0 = now_s();
    if ((rc = adapter_prefill(m, tok, n, c, logits))) goto done;
    res->prefill_s[rep] = now_s() - t0;
    t0 = now_s();
    if ((rc = adapter_decode(m, tok, n, c, one))) goto done;
    res->decode_s[rep] = (now_s() - t0) / n;
    /* bytes the mode adds over the base: merged copies, or f32 factors */
    int64_t sh[SCDB_LORA_N_MODULES][2];
    scdb_model_proj_shapes(cf, sh);
    if ((rc = scdb_adapter_open(dir, NULL, &a, err, errlen))) goto done;
    res->added_bytes = 0;
    for (int i = 0; i < a->n_t; i++) {
        int64_t out = sh[a->t[i].module][0], in = sh[a->t[i].module][1];
        res->added_bytes += (size_t)(mode == SCDB_LORA_MERGED ? out * in : a->r * (out + in)) * sizeof(float);
    }
done:
    free(one);
    scdb_adapter_close(&a);
    scdb_kv_cache_free(&c);
    scdb_model_free(&m);
    return rc;
}

int scdb_bench_adapter(int argc, char **argv)
{
    const char *adapter = NULL, *json = NULL;
    int rank = 8, tokens = 256, reps = 5, ret = 1, only = -1;
    char tmp[256] = "", base[1200], err[512] = "", shown[64];
    for (int i = 1; i < argc; i += 2) {   /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: scdb bench adapter [--adapter DIR] [--rank R] [--tokens N] [--reps K]\n"
                   "                          [--mode merged|lowrank] [--json FILE]\n\n"
                   "A LoRA adapter applied merged (W + s B A at load) vs low-rank (y += s (x A^T) B^T),\n"
                   "the two modes alternating rep by rep: load, bytes added over the base, prefill of\n"
                   "N tokens, decode per token (medians of K), max |logit difference|.  --mode runs one\n"
                   "(for callgrind: --toggle-collect=adapter_load / adapter_prefill / adapter_decode).\n"
                   "Without --adapter: a random rank-R adapter on all seven projections of\n"
                   "DATA/models/base (default R 8, N 256, K 5).\n");
            return 0;
        }
        if (!v) { fprintf(stderr, "scdb bench adapter: %s needs a value\n", a); return 2; }
        scdb_err pe = SCDB_OK;
        if (!strcmp(a, "--adapter")) adapter = v;
        else if (!strcmp(a, "--rank")) pe = scdb_parse_int(a, v, 1, 4096, &rank, err, sizeof err);
        else if (!strcmp(a, "--tokens")) pe = scdb_parse_int(a, v, 1, 4096, &tokens, err, sizeof err);
        else if (!strcmp(a, "--reps")) pe = scdb_parse_int(a, v, 1, 64, &reps, err, sizeof err);
        else if (!strcmp(a, "--json")) json = v;
        else if (!strcmp(a, "--mode")) only = !strcmp(v, "merged") ? 0 : !strcmp(v, "lowrank") ? 1 : 2;
        else { fprintf(stderr, "scdb bench adapter: unknown option '%s'\n", a); return 2; }
        if (pe) { fprintf(stderr, "scdb bench adapter: %s\n", err); return 2; }
    }
    if (rank < 1 || rank > 4096 || tokens < 1 || tokens > 4096 || reps < 1 || reps > 64 || only > 1) {
        fprintf(stderr, "scdb bench adapter: --rank 1..4096, --tokens 1..4096, --reps 1..64, "
                        "--mode merged|lowrank\n");
        return 2;
    }
    scdb_model *bm = NULL;
    snprintf(base, sizeof base, "%s/models/base", scdb_data_dir());
    if (!adapter) {
        snprintf(tmp, sizeof tmp, "/tmp/scdb_bench_adapter_XXXXXX");
        if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
        if (scdb_model_load(base, &bm, err, sizeof err)) {
            fprintf(stderr, "scdb bench adapter: %s\n", err);
            goto done;
        }
        if (write_adapter(tmp, base, scdb_model_cfg(bm), rank)) {
            fprintf(stderr, "scdb bench adapter: cannot write an adapter in %s\n", tmp);
            goto done;
        }
        scdb_model_free(&bm);
        adapter = tmp;
    }
    if (scdb_model_load(adapter, &bm, err, sizeof err)) {
        fprintf(stderr, "scdb bench adapter: %s\n", err);
        goto done;
    }
    const scdb_model_config *c = scdb_model_cfg(bm);
    if (tokens > c->max_seq_len - 1) tokens = c->max_seq_len - 1;
    int V = c->vocab_size;
    int32_t *tok = malloc((size_t)tokens * sizeof *tok);
    float *l0 = malloc((size_t)tokens * V * sizeof *l0), *l1 = malloc((size_t)tokens * V * sizeof *l1);
    if (!tok || !l0 || !l1) goto free_bufs;
    for (int i = 0; i < tokens; i++) tok[i] = (int32_t)((i * 131 + 7) % V);
    static mode_res r[2];
    static const char *const names[2] = {"merged", "lowrank"};
    for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < 2; k++) {
            int kk = rep % 2 ? 1 - k : k;      /* alternate which goes first */
            if (only >= 0 && kk != only) continue;
            scdb_err e = run_mode(adapter, kk ? SCDB_LORA_LOWRANK : SCDB_LORA_MERGED, rep, tok, tokens, &r[kk],
                                  kk ? l1 : l0, err, sizeof err);
            if (e) {
                fprintf(stderr, "scdb bench adapter: %s: %s (%s)\n", names[kk], err, scdb_strerror(e));
                goto free_bufs;
            }
        }
    if (only >= 0) {
        printf("# scdb bench adapter: %s only, %d reps\n", names[only], reps);
        ret = 0;
        goto free_bufs;
    }
    double med[2][3];
    for (int k = 0; k < 2; k++) {
        med[k][0] = scdb_bench_median(r[k].load_s, (size_t)reps);
        med[k][1] = scdb_bench_median(r[k].prefill_s, (size_t)reps);
        med[k][2] = scdb_bench_median(r[k].decode_s, (size_t)reps);
    }
    double maxd = 0;
    for (size_t i = 0; i < (size_t)tokens * V; i++) maxd = fmax(maxd, fabs((double)l0[i] - l1[i]));
    /* the output names no scratch folder and no path of this machine */
    if (tmp[0]) snprintf(shown, sizeof shown, "a random rank-%d adapter over models/base", rank);
    printf("# scdb bench adapter: %s (d_model %d, %d layers, d_ff %d), %d tokens, median of %d\n",
           tmp[0] ? shown : scdb_data_relative(adapter),
           c->d_model, c->n_layers, c->d_ff, tokens, reps);
    printf("%-8s %10s %12s %12s %14s\n", "mode", "load_ms", "added_KiB", "prefill_ms", "decode_us/tok");
    for (int k = 0; k < 2; k++)
        printf("%-8s %10.2f %12.1f %12.2f %14.1f\n", names[k], med[k][0] * 1e3, r[k].added_bytes / 1024.0,
               med[k][1] * 1e3, med[k][2] * 1e6);
    printf("lowrank / merged: load %.2fx, bytes %.3fx, prefill %.2fx, decode %.2fx; max |dlogit| %.3g\n",
           med[1][0] / med[0][0], (double)r[1].added_bytes / (double)r[0].added_bytes, med[1][1] / med[0][1],
           med[1][2] / med[0][2], maxd);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "rows");
        cJSON_AddStringToObject(root, "adapter", tmp[0] ? shown : scdb_data_relative(adapter));
        cJSON_AddNumberToObject(root, "tokens", tokens);
        cJSON_AddNumberToObject(root, "reps", reps);
        cJSON_AddNumberToObject(root, "max_abs_dlogit", maxd);
        for (int k = 0; k < 2; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "mode", names[k]);
            cJSON_AddNumberToObject(o, "load_ms", med[k][0] * 1e3);
            cJSON_AddNumberToObject(o, "added_bytes", (double)r[k].added_bytes);
            cJSON_AddNumberToObject(o, "prefill_ms", med[k][1] * 1e3);
            cJSON_AddNumberToObject(o, "decode_us_per_token", med[k][2] * 1e6);
            cJSON_AddItemToArray(rows, o);
        }
        int w = scdb_bench_write_json(json, root, "scdb bench adapter");
        cJSON_Delete(root);
        if (w) goto free_bufs;
    }
    ret = 0;
free_bufs:
    free(tok);
    free(l0);
    free(l1);
done:
    scdb_model_free(&bm);
    if (tmp[0]) {
        char p[400];
        snprintf(p, sizeof p, "%s/" SCDB_ADAPTER_CONFIG, tmp);
        unlink(p);
        snprintf(p, sizeof p, "%s/" SCDB_ADAPTER_WEIGHTS, tmp);
        unlink(p);
        rmdir(tmp);
    }
    return ret;
}
