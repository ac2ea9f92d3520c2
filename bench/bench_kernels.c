/* bench_kernels.c — `scdb bench kernels`: throughput of the SCD low-rank
 * decode (the broker's hot path on a get) at the shapes of a 7B-class model,
 * on the CPU or a CUDA device.
 *
 * Work per repetition: every layer's K (with RoPE) and V decoded from f16
 * codes for `tokens` tokens,
 *
 *   for l in layers:  K_l = RoPE(z_l Dk_l^T + mk_l)    z_l  [tokens][rank] f16
 *                     V_l = z_l Dv_l^T + mv_l          D*_l [kv][rank]     f16
 *                                                      K, V [tokens][kv]   f32
 *
 * into one arena laid out like the slot-indexed cache (kernels.h), and the
 * figure is GB/s of KV written (2 * layers * tokens * kv * 4 bytes / s).  Two
 * references run in the same process on the same arena: memset of the arena
 * (the write-bandwidth ceiling actually reachable), and the decoder GEMMs
 * alone (gemm_ex, no bias or RoPE).  On CUDA the decode is also reported as
 * a fraction of the card's peak memory bandwidth (memory clock x bus width,
 * scdb_k_cuda_device_info) against the goal of >= 60%, and layer 0's first
 * rows are checked against the CPU twin (normalised error).  Best of --reps
 * after one warm-up repetition.  Markdown on stdout, JSON with --json. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "kernels.h"


#define GOAL_FRACTION 0.60

typedef struct opts {
    const char *json;
    scdb_device_pref pref;
    int layers, kv_heads, head_dim, rank, tokens, reps;
    float theta;
} opts;

/* Where buffers live and how ops run: host memory and the CPU twins, or
 * device memory and the CUDA twins. */
typedef struct backend {
    scdb_device dev;
    scdb_err (*decode)(const uint16_t *, int, int, int, const uint16_t *, const float *, int,
                       const int32_t *, int, float, float *, int);
    scdb_err (*gemm_ex)(int, int, int, int, int, float, scdb_dtype, const void *, int,
                        const void *, int, float, float *, int);
} backend;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *b_alloc(const backend *b, size_t bytes)
{
    void *p = NULL;
    if (b->dev == SCDB_DEV_CUDA) return scdb_k_cuda_malloc(bytes, &p) ? NULL : p;
    return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
}

static void b_free(const backend *b, void *p)
{
    if (!p) return;
    if (b->dev == SCDB_DEV_CUDA) scdb_k_cuda_free(p);
    else free(p);
}

static scdb_err b_put(const backend *b, void *dst, const void *src, size_t bytes)
{
    if (b->dev == SCDB_DEV_CUDA) return scdb_k_cuda_copy(dst, src, bytes, 1);
    memcpy(dst, src, bytes);
    return SCDB_OK;
}

static scdb_err b_get(const backend *b, void *dst, const void *src, size_t bytes)
{
    if (b->dev == SCDB_DEV_CUDA) return scdb_k_cuda_copy(dst, src, bytes, 0);
    memcpy(dst, src, bytes);
    return SCDB_OK;
}

static scdb_err b_sync(const backend *b) { return b->dev == SCDB_DEV_CUDA ? scdb_k_cuda_sync() : SCDB_OK; }

static scdb_err b_memset(const backend *b, void *p, size_t bytes)
{
    if (b->dev == SCDB_DEV_CUDA) return scdb_k_cuda_memset(p, 0, bytes);
    memset(p, 0, bytes);
    return SCDB_OK;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb bench kernels [options]\n\n"
            "SCD low-rank decode throughput (K with RoPE, V; f16 codes and decoders, f32 KV)\n"
            "in GB/s of KV written, next to memset and GEMM-only references.\n\n"
            "  --device D      auto | cpu | cuda (default auto: CUDA when a device answers)\n"
            "  --layers N      layers (default 32)\n"
            "  --kv-heads N    KV heads (default 8)\n"
            "  --head-dim N    head dimension (default 128)\n"
            "  --rank R        decoder input width per layer (default 256)\n"
            "  --tokens T      tokens decoded per layer (default 16384 on CUDA, 256 on the CPU)\n"
            "  --reps N        timed repetitions after a warm-up, best reported (default 5)\n"
            "  --json FILE     write {\"device\",\"config\",\"rows\":[...],\"goal\":{...}}\n"
            "  -h, --help      this text\n");
}

static int parse_opts(int argc, char **argv, opts *o)
{
    enum { O_DEVICE = 256, O_LAYERS, O_KVH, O_HD, O_RANK, O_TOKENS, O_REPS, O_JSON };
    static const struct option lo[] = {
        {"device", 1, 0, O_DEVICE}, {"layers", 1, 0, O_LAYERS}, {"kv-heads", 1, 0, O_KVH},
        {"head-dim", 1, 0, O_HD},   {"rank", 1, 0, O_RANK},     {"tokens", 1, 0, O_TOKENS},
        {"reps", 1, 0, O_REPS},     {"json", 1, 0, O_JSON},     {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    memset(o, 0, sizeof *o);
    o->pref = SCDB_DEVPREF_AUTO;
    o->layers = 32;
    o->kv_heads = 8;
    o->head_dim = 128;
    o->rank = 256;
    o->reps = 5;
    o->theta = 10000.0f;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char why[160];
        scdb_err bad = SCDB_OK;
        switch (c) {
        case O_DEVICE: if (scdb_device_parse(optarg, &o->pref)) return 2; break;
        case O_LAYERS:
            bad = scdb_parse_int("--layers", optarg, 1, 1024, &o->layers, why, sizeof why);
            break;
        case O_KVH:
            bad = scdb_parse_int("--kv-heads", optarg, 1, 65536, &o->kv_heads, why, sizeof why);
            break;
        case O_HD:   /* even: checked below */
            bad = scdb_parse_int("--head-dim", optarg, 2, 65536, &o->head_dim, why, sizeof why);
            break;
        case O_RANK:
            bad = scdb_parse_int("--rank", optarg, 1, 65536, &o->rank, why, sizeof why);
            break;
        case O_TOKENS:
            bad = scdb_parse_int("--tokens", optarg, 0, 1 << 22, &o->tokens, why, sizeof why);
            break;
        case O_REPS:
            bad = scdb_parse_int("--reps", optarg, 1, 1000, &o->reps, why, sizeof why);
            break;
        case O_JSON: o->json = optarg; break;
        case 'h': return 1;
        default: return 2;
        }
        if (bad) {
            fprintf(stderr, "bench kernels: %s\n", why);
            return 2;
        }
    }
    if (optind < argc || o->layers < 1 || o->layers > 1024 || o->kv_heads < 1 || o->head_dim < 2 ||
        o->head_dim % 2 || o->kv_heads * o->head_dim > 65536 || o->rank < 1 || o->rank > 65536 ||
        o->tokens < 0 || o->tokens > (1 << 22) || o->reps < 1 || o->reps > 1000)
        return 2;
    return 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef struct row {
    const char *op, *what;
    double best_s, mean_s, gbs, tflops;
} row;

int scdb_bench_kernels(int argc, char **argv)
{
    opts o;
    backend b = {0};
    int prc = parse_opts(argc, argv, &o), ret = 1;
    uint16_t *z = NULL, *dk = NULL, *dv = NULL, *hbuf = NULL;
    float *mk = NULL, *mv = NULL, *K = NULL, *V = NULL, *hf = NULL;
    int32_t *pos = NULL, *hpos = NULL;
    cJSON *json = NULL;
    char why[384];
    scdb_k_cuda_info info = {0};
    double check_err = -1.0;
    row rows[3];
    scdb_err rc;

    if (prc == 1) { usage(stdout); return 0; }
    if (prc) { usage(stderr); return 2; }
    if ((rc = scdb_device_resolve(o.pref, &b.dev, why, sizeof why))) {
        fprintf(stderr, "scdb bench kernels: %s\n", why);
        return 1;
    }
    fprintf(stderr, "bench kernels: device %s (%s)\n", scdb_device_name(b.dev), why);
    if (b.dev == SCDB_DEV_CUDA) {
        b.decode = scdb_k_lowrank_decode_cuda;
        b.gemm_ex = scdb_k_gemm_ex_cuda;
        if (scdb_k_cuda_device_info(0, &info)) {
            fprintf(stderr, "scdb bench kernels: cannot read the CUDA device's properties\n");
            return 1;
        }
    } else {
        b.decode = scdb_k_lowrank_decode_cpu;
        b.gemm_ex = scdb_k_gemm_ex_cpu;
    }
    if (o.tokens == 0) o.tokens = b.dev == SCDB_DEV_CUDA ? 16384 : 256;

    const int L = o.layers, T = o.tokens, R = o.rank, kv = o.kv_heads * o.head_dim;
    const size_t zl = (size_t)T * R, dl = (size_t)kv * R, kvl = (size_t)T * kv;
    const size_t kv_bytes = 2 * (size_t)L * kvl * sizeof(float);
    const double flops = 2.0 * 2.0 * L * (double)T * R * kv;   /* K and V GEMMs */

    z = b_alloc(&b, (size_t)L * zl * 2);
    dk = b_alloc(&b, (size_t)L * dl * 2);
    dv = b_alloc(&b, (size_t)L * dl * 2);
    mk = b_alloc(&b, (size_t)L * kv * 4);
    mv = b_alloc(&b, (size_t)L * kv * 4);
    K = b_alloc(&b, (size_t)L * kvl * 4);
    V = b_alloc(&b, (size_t)L * kvl * 4);
    pos = b_alloc(&b, (size_t)T * 4);
    size_t hn = zl > dl ? zl : dl;
    hbuf = malloc(hn * 2);
    hf = malloc((hn > kvl ? hn : kvl) * 4);
    hpos = malloc((size_t)T * 4);
    if (!z || !dk || !dv || !mk || !mv || !K || !V || !pos || !hbuf || !hf || !hpos) {
        fprintf(stderr, "scdb bench kernels: out of %s memory for %d layers x %d tokens "
                        "(%.2f GB of KV)\n", scdb_device_name(b.dev), L, T, kv_bytes / 1e9);
        goto done;
    }
    /* inputs: codes ~ U(-2, 2), decoders ~ U(-1, 1) / sqrt(rank), means small */
    for (int t = 0; t < T; t++) hpos[t] = t;
    if (b_put(&b, pos, hpos, (size_t)T * 4)) goto fail_dev;
    float ds = 1.0f / sqrtf((float)R);
    for (int l = 0; l < L; l++) {
        for (size_t i = 0; i < zl; i++) hbuf[i] = scdb_f32_to_f16(2.0f * frand());
        if (b_put(&b, z + (size_t)l * zl, hbuf, zl * 2)) goto fail_dev;
        for (int m = 0; m < 2; m++) {
            for (size_t i = 0; i < dl; i++) hbuf[i] = scdb_f32_to_f16(ds * frand());
            if (b_put(&b, (m ? dv : dk) + (size_t)l * dl, hbuf, dl * 2)) goto fail_dev;
            for (int i = 0; i < kv; i++) hf[i] = 0.1f * frand();
            if (b_put(&b, (m ? mv : mk) + (size_t)l * kv, hf, (size_t)kv * 4)) goto fail_dev;
        }
    }

    fprintf(stderr, "bench kernels: %d layers x %d tokens, kv %d (%d x %d), rank %d: "
                    "%.3f GB of KV per repetition\n", L, T, kv, o.kv_heads, o.head_dim, R, kv_bytes / 1e9);
    for (int op = 0; op < 3; op++) {
        double best = 1e30, sum = 0.0;
        for (int rep = -1; rep < o.reps; rep++) {        /* rep -1: warm-up */
            double t0 = now_s();
            if (op == 0) {
                if (b_memset(&b, K, (size_t)L * kvl * 4) || b_memset(&b, V, (size_t)L * kvl * 4))
                    goto fail_dev;
            } else {
                for (int l = 0; l < L; l++) {
                    const uint16_t *zl_ = z + (size_t)l * zl;
                    float *Kl = K + (size_t)l * kvl, *Vl = V + (size_t)l * kvl;
                    if (op == 1) {
                        if (b.decode(zl_, R, T, R, dk + (size_t)l * dl, mk + (size_t)l * kv, kv, pos,
                                     o.head_dim, o.theta, Kl, kv) ||
                            b.decode(zl_, R, T, R, dv + (size_t)l * dl, mv + (size_t)l * kv, kv, NULL,
                                     o.head_dim, o.theta, Vl, kv))
                            goto fail_dev;
                    } else if (b.gemm_ex(0, 1, T, kv, R, 1.0f, SCDB_F16, zl_, R, dk + (size_t)l * dl, R,
                                         0.0f, Kl, kv) ||
                               b.gemm_ex(0, 1, T, kv, R, 1.0f, SCDB_F16, zl_, R, dv + (size_t)l * dl, R,
                                         0.0f, Vl, kv)) {
                        goto fail_dev;
                    }
                }
            }
            if (b_sync(&b)) goto fail_dev;
            double dt = now_s() - t0;
            if (rep < 0) continue;
            sum += dt;
            if (dt < best) best = dt;
        }
        static const char *names[3] = {"memset", "decode", "gemm_only"};
        static const char *whats[3] = {"write ceiling: memset of the K and V arena",
                                       "K = RoPE(z Dk^T + mk), V = z Dv^T + mv, every layer",
                                       "the decoder GEMMs alone (gemm_ex f16 -> f32)"};
        rows[op] = (row){names[op], whats[op], best, sum / o.reps, kv_bytes / best / 1e9,
                         op ? flops / best / 1e12 : 0.0};
        fprintf(stderr, "bench kernels: %-9s %.3f ms, %.1f GB/s\n", names[op], best * 1e3, rows[op].gbs);
    }

    /* layer 0 again, then its first rows against the CPU twin */
    if (b.dev == SCDB_DEV_CUDA) {
        int tc = T < 128 ? T : 128;
        float *ref = malloc((size_t)tc * kv * 4), *mean = malloc((size_t)kv * 4);
        uint16_t *dh = malloc(dl * 2);
        if (!ref || !mean || !dh) { free(ref); free(mean); free(dh); goto done; }
        if (b.decode(z, R, T, R, dk, mk, kv, pos, o.head_dim, o.theta, K, kv) || b_sync(&b) ||
            b_get(&b, hbuf, z, (size_t)tc * R * 2) || b_get(&b, dh, dk, dl * 2) ||
            b_get(&b, mean, mk, (size_t)kv * 4) || b_get(&b, hf, K, (size_t)tc * kv * 4) ||
            scdb_k_lowrank_decode_cpu(hbuf, R, tc, R, dh, mean, kv, hpos, o.head_dim, o.theta, ref, kv)) {
            free(ref); free(mean); free(dh);
            goto fail_dev;
        }
        check_err = scdb_k_nmse(hf, ref, (size_t)tc * kv);
        free(ref); free(mean); free(dh);
    }

    printf("## scdb bench kernels: SCD low-rank decode, %s\n\n", scdb_device_name(b.dev));
    if (b.dev == SCDB_DEV_CUDA)
        printf("device: %s (sm_%d%d, %d SMs, %.0f GiB), peak memory bandwidth %.0f GB/s "
               "(memory clock %.0f MHz x %d-bit bus x 2)\n",
               info.name, info.cc_major, info.cc_minor, info.sm_count,
               info.total_mem / (1024.0 * 1024.0 * 1024.0), info.peak_bw_gbs,
               info.mem_clock_khz / 1e3, (int)info.bus_width_bits);
    else
        printf("device: CPU (OpenBLAS); no datasheet bandwidth: fractions are of the measured "
               "memset ceiling\n");
    printf("shape: %d layers, %d KV heads x %d, rank %d, %d tokens: %.3f GB of f32 KV per repetition; "
           "best of %d after a warm-up\n\n", L, o.kv_heads, o.head_dim, R, T, kv_bytes / 1e9, o.reps);
    printf("| op | best ms | mean ms | GB/s of KV | %% of %s | TFLOP/s | what |\n",
           b.dev == SCDB_DEV_CUDA ? "peak" : "memset");
    printf("|---|---:|---:|---:|---:|---:|---|\n");
    double ref_bw = b.dev == SCDB_DEV_CUDA ? info.peak_bw_gbs : rows[0].gbs;
    for (int i = 0; i < 3; i++)
        printf("| %s | %.3f | %.3f | %.3g | %.3g | %.3g | %s |\n", rows[i].op, rows[i].best_s * 1e3,
               rows[i].mean_s * 1e3, rows[i].gbs, 100.0 * rows[i].gbs / ref_bw, rows[i].tflops,
               rows[i].what);
    double frac = rows[1].gbs / ref_bw;
    if (b.dev == SCDB_DEV_CUDA) {
        printf("\ndecode vs CPU twin (layer 0, %d tokens): normalised error %.2e (%s)\n",
               T < 128 ? T : 128, check_err, check_err <= 1e-9 ? "ok" : "TOO HIGH");
        printf("goal: decode >= %.0f%% of peak memory bandwidth: %.1f%% -- %s\n", 100 * GOAL_FRACTION,
               100 * frac, frac >= GOAL_FRACTION ? "met" : "NOT met");
    } else {
        printf("\ndecode at %.1f%% of the measured memset ceiling (the %.0f%%-of-peak goal is for "
               "CUDA devices)\n", 100 * frac, 100 * GOAL_FRACTION);
    }

    json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "device", scdb_device_name(b.dev));
    cJSON_AddStringToObject(json, "device_choice", why);
    if (b.dev == SCDB_DEV_CUDA) {
        cJSON_AddStringToObject(json, "device_name", info.name);
        cJSON_AddNumberToObject(json, "peak_bw_gbs", info.peak_bw_gbs);
    }
    cJSON *cfg = cJSON_AddObjectToObject(json, "config");
    cJSON_AddNumberToObject(cfg, "layers", L);
    cJSON_AddNumberToObject(cfg, "kv_heads", o.kv_heads);
    cJSON_AddNumberToObject(cfg, "head_dim", o.head_dim);
    cJSON_AddNumberToObject(cfg, "rank", R);
    cJSON_AddNumberToObject(cfg, "tokens", T);
    cJSON_AddNumberToObject(cfg, "reps", o.reps);
    cJSON_AddNumberToObject(cfg, "kv_bytes", (double)kv_bytes);
    cJSON *jr = cJSON_AddArrayToObject(json, "rows");
    for (int i = 0; i < 3; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", rows[i].op);
        cJSON_AddNumberToObject(r, "best_s", rows[i].best_s);
        cJSON_AddNumberToObject(r, "mean_s", rows[i].mean_s);
        cJSON_AddNumberToObject(r, "gbs", rows[i].gbs);
        cJSON_AddNumberToObject(r, "fraction_of_reference", rows[i].gbs / ref_bw);
        cJSON_AddNumberToObject(r, "tflops", rows[i].tflops);
        cJSON_AddItemToArray(jr, r);
    }
    cJSON *g = cJSON_AddObjectToObject(json, "goal");
    cJSON_AddStringToObject(g, "reference", b.dev == SCDB_DEV_CUDA ? "peak" : "memset");
    cJSON_AddNumberToObject(g, "fraction", frac);
    cJSON_AddNumberToObject(g, "target", GOAL_FRACTION);
    if (b.dev == SCDB_DEV_CUDA) {
        cJSON_AddBoolToObject(g, "met", frac >= GOAL_FRACTION);
        cJSON_AddNumberToObject(json, "check_nmse", check_err);
    }
    if (o.json) {
        if (scdb_bench_write_json(o.json, json, "scdb bench kernels")) goto done;
        printf("\nwrote %s\n", o.json);
    }
    ret = 0;
    goto done;
fail_dev:
    fprintf(stderr, "scdb bench kernels: a %s call failed (see the log line above)\n",
            scdb_device_name(b.dev));
done:
    b_free(&b, z); b_free(&b, dk); b_free(&b, dv); b_free(&b, mk); b_free(&b, mv);
    b_free(&b, K); b_free(&b, V); b_free(&b, pos);
    free(hbuf); free(hf); free(hpos);
    cJSON_Delete(json);
    return ret;
}
