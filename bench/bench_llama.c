/* bench_llama.c — `scdb bench llama`: the fleet served from one stored
 * prefix with llama.cpp on both sides (libscdb-llama, llama/scdb_llama.h).
 *
 * The family is exported to GGUF at the start (`scdb export-gguf`, F32:
 * base, the full fine-tunes and the LoRA adapters, each adapter a GGUF LoRA
 * loaded once beside the one base model), unless --gguf DIR names a folder
 * that holds them.  A broker (`scdb serve`) runs the codebook, every
 * consumer's SCD pair, raw reuse of base's KV ([pair raw/base NAME]) and
 * each consumer's own raw codebook.  Per consumer and window (a prefix of
 * --prefix tokens and the --cont tokens after it, from the second half of
 * the consumer's own held-out text), all in one process and on the same
 * llama.cpp threads:
 *
 *   oracle  llama.cpp's own prefill of the prefix in the consumer's
 *           context (its adapter set), then the continuation
 *   scd     base in llama.cpp prefills the prefix with capture on (H_in of
 *           every layer, read by cb_eval), the broker encodes and stores it;
 *           the consumer restores it (scdb_llama_restore: broker decode into
 *           its KV space, written as its sequence's state blob)
 *   raw     base's KV as is, restored the same way (the cross-adapter bug)
 *   exact   the consumer's own prefill stored raw and restored (the layout
 *           check: must be the oracle itself)
 *
 * Quality over the continuation against the oracle: ppl ratio, KL(oracle ||
 * method), top-1 agreement.  TTFT: restore + the consumer's own prefill of
 * the P mod 64 prefix tokens after the stored blocks + the forward of the
 * first continuation token vs own prefill + that forward (best of --reps,
 * median over windows).  capture_overhead: base's prefill with capture over
 * the same prefill without (best of --reps each, interleaved, over every
 * consumer's windows: the run's final value in every row).  The reference
 * engine (model.h) runs the oracle too: ref_max_dlogit is the largest
 * |logit difference| between the two engines' own prefills.  Fails (exit
 * 1) if anything the bench names does not happen: an export, a decode, a
 * put, a restore short of the stored tokens, a non-finite logit, a
 * consumer with no evaluated token. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "codec.h"
#include "model.h"

#ifndef SCDB_HAVE_LLAMA
int scdb_bench_llama(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench llama: this build has no llama.cpp (scripts/install-llama.sh, then "
                    "rebuild; CMake option SCDB_LLAMA)\n");
    return 2;
}
#else

#include "bench_llama.h"
#include "scdb_llama.h"

#define MAX_CONS 32
#define CB "base-scd"

typedef struct lcons {
    char name[64], kind[8], src[1024], gguf[1100], text[1100];
    struct llama_model *m;          /* full: its own; lora: the base */
    struct llama_adapter_lora *ad;
    scdb_model *ref;                /* the reference engine's */
} lcons;

typedef struct acc { double nll, kl, top1; long n; } acc;

/* "a,b,c": between 1 and max values (exactly `exact` when > 0), each in
 * [lo, hi] and, for --tokens, a multiple of 64 (whole blocks).  0, or 1
 * with why set. */
static int int_list(const char *opt, const char *v, int lo, int hi, int max, int exact, int *out, int *n,
                    char *why, size_t wlen)
{
    char buf[256], *save = NULL;
    int k = 0;
    snprintf(buf, sizeof buf, "%s", v);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (k == max) {
            snprintf(why, wlen, "%s '%s': more than %d values", opt, v, max);
            return 1;
        }
        if (scdb_parse_int(opt, t, lo, hi, &out[k], why, wlen) != SCDB_OK)
            return 1;
        if (!strcmp(opt, "--tokens") && out[k] % 64) {
            snprintf(why, wlen, "%s '%s': %d is not whole blocks of 64 tokens", opt, v, out[k]);
            return 1;
        }
        k++;
    }
    if (k == 0 || (exact && k != exact)) {
        snprintf(why, wlen, "%s '%s': want %s%d comma-separated values", opt, v, exact ? "" : "1 to ",
                 exact ? exact : max);
        return 1;
    }
    *n = k;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench llama [--shape family|1b|all] [--data DIR] [--gguf DIR]\n"
"                        [--consumers a,b,...] [--prefix P] [--cont C] [--windows N]\n"
"                        [--reps R] [--threads T] [--text FILE [--at BYTE]]\n"
"                        [--tokens N,N,...] [--prefill-reps R] [--vocab FILE|bytes]\n"
"                        [--ranks rK,rV,rH] [--candidates N] [--patch-layers K]\n"
"                        [--own-layer]\n"
"                        [--json FILE] [--png FILE]\n\n"
"The fleet served from one stored prefix with llama.cpp on both sides: base\n"
"in llama.cpp prefills the prefix (its H_in captured during llama_decode), the\n"
"broker encodes and stores it once, and each consumer (full fine-tunes, and\n"
"LoRA adapters loaded once beside one base model) restores it into its own\n"
"llama.cpp sequence.  Per consumer: TTFT via scdb (restore of the prefix's\n"
"whole blocks of 64 tokens + the consumer's own prefill of the P mod 64 tokens\n"
"after them + the first token) vs llama.cpp's own prefill (+ the first token),\n"
"and quality over the continuation against that prefill for SCD, raw reuse of\n"
"base's KV and the consumer's own KV stored raw (exact: the layout check);\n"
"capture overhead; the two engines' logits.  About 2 minutes on 2 cores.\n"
"Exit 1 when any step fails: an export, a decode, a put, a restore short of\n"
"the stored blocks, a non-finite logit (llama.cpp's or the reference\n"
"engine's); nothing is written then.\n\n"
"--shape 1b: cost as models grow.  The same path at a 1B-class shape (22\n"
"layers, d 2048, 32 heads, 4 KV heads, ffn 5632: TinyLlama-1.1B's), COST ONLY:\n"
"a llama GGUF of random F16 weights (2.2 GB, written to a temp folder) around\n"
"the bundle's llama SPM vocabulary (32000 tokens), and a codebook and pair of\n"
"the shapes `scdb calibrate` writes with random contents (no calibration: the\n"
"model means nothing and no quality is measured).  Per --tokens count: own\n"
"prefill + first token, the producer's prefill with capture and its put, and\n"
"TTFT via scdb (restore: the broker's get into the arena + the blob written;\n"
"then the first token) as the family rows time them.  The own prefill and\n"
"TTFT via scdb are both best of --prefill-reps (interleaved with the capture\n"
"prefill in each repetition), so speedup compares like with like.  RUN TIME on\n"
"2 cores: each prefill runs twice (own, and with capture) per --prefill-reps;\n"
"a 1B prefill of 512 tokens takes about 5 s, 2048 about 25 s, 8192 about 2.5\n"
"min, so the default 512,2048,8192 at the default --prefill-reps 1 takes about\n"
"8 minutes, most of it at 8192 (progress on stderr), plus half a minute\n"
"writing the model; each further --prefill-reps adds about 8 minutes (2: 16,\n"
"3: 24); --tokens 512,2048 about 2 minutes per repetition.  The model file\n"
"takes 2.2 GB of the temp folder.\n\n"
"  --shape S        family (default: the family rows), 1b (the 1b rows), all\n"
"  --data DIR       data directory (default: scdb's)\n"
"  --gguf DIR       GGUF files NAME.gguf already exported (default: export the\n"
"                   family with `scdb export-gguf` into a temp folder)\n"
"  --consumers LIST only these consumers (default: every model and adapter\n"
"                   with a pair DATA/pairs/base__NAME.safetensors)\n"
"  --prefix P       prefix tokens (default 448; the family's context is 512)\n"
"  --cont C         continuation tokens scored (default 32)\n"
"  --windows N      windows per consumer (default 2)\n"
"  --reps R         family rows: timing repetitions, best taken, of the own\n"
"                   prefill, TTFT via scdb and the capture (default 3); the\n"
"                   1b rows use --prefill-reps for all of theirs\n"
"  --threads T      llama.cpp threads (default 2)\n"
"  --text FILE      every consumer on FILE (one stored prefix per window for\n"
"                   the whole fleet: the fan-out), windows from byte --at\n"
"                   (default: the second half of FILE)\n"
"  --tokens LIST    1b: prefix lengths, whole blocks of 64, at most 16384\n"
"                   (default 512,2048,8192)\n"
"  --prefill-reps R 1b: the own prefill, the capture prefill and TTFT via\n"
"                   scdb (restore + first token), interleaved, each best of R\n"
"                   (default 1: a prefill of 8192 tokens takes minutes; each\n"
"                   repetition costs about 8 minutes at the default --tokens)\n"
"  --vocab FILE     1b: a vocab-only GGUF whose tokenizer the model takes\n"
"                   (default: models/ggml-vocab-llama-spm.gguf of the pinned\n"
"                   llama.cpp); `bytes`: the 256-token byte vocabulary\n"
"  --ranks rK,rV,rH 1b: code widths of K, V and H_in (default 32,48,48: the\n"
"                   family's 8,12,12 per 64 of KV width, at a KV width of 256)\n"
"  --candidates N   1b: patch candidates (default: half the layers, as the\n"
"                   family's 4 of 8)\n"
"  --patch-layers K 1b: the pair's patch budget (default: a quarter of the\n"
"                   layers, 6 of 22: the family's shipped pairs patch 2 of 8\n"
"                   in the median, calibrate's budget choosing by KL)\n"
"  --own-layer      1b: a pair of layer-local decoders without the token input\n"
"                   (calibrate's --own-layer; default: decoders read every\n"
"                   layer's code and the token, calibrate's default), the\n"
"                   cheaper decode\n"
"  --json FILE      rows {shape (family or 1b), consumer, kind, engine,\n"
"                   prefix_tokens, restored_tokens, restore_ms, get_ms,\n"
"                   blob_ms, own_prefill_ms, ttft_ms, speedup,\n"
"                   capture_overhead (family: the whole run's, base's\n"
"                   prefill with capture over without, each best over every\n"
"                   consumer's windows and --reps: the same in every family\n"
"                   row; 1b: that token count's); family:\n"
"                   prefilled_after_restore (P mod 64, in ttft_ms), ppl_ratio,\n"
"                   kl, top1, raw_ppl_ratio, raw_kl, raw_top1, exact_kl,\n"
"                   exact_top1, ref_max_dlogit (flash attention off, F32 KV),\n"
"                   ref_max_dlogit_default_ctx (llama.cpp's defaults); 1b:\n"
"                   cost_only (true), capture_ms, plain_prefill_ms, put_ms,\n"
"                   prefill_reps and restore_reps (both --prefill-reps), the\n"
"                   shape and code bytes per token}\n"
"  --png FILE       the family: speed-up and KL per consumer (tools/plot_llama.py)\n");
}


/* the consumers: every model but base and every adapter with a pair */
static int find_consumers(const lopts *o, lcons *c)
{
    int n = 0;
    const char *kinds[2] = {"models", "adapters"};
    for (int k = 0; k < 2; k++) {
        char dir[960];
        snprintf(dir, sizeof dir, "%.900s/%s", o->data, kinds[k]);
        DIR *d = opendir(dir);
        if (!d)
            continue;
        struct dirent *e;
        char names[64][64];
        int m = 0;
        while ((e = readdir(d)) && m < 64) {
            if (e->d_name[0] == '.' || strlen(e->d_name) >= 64 || !strcmp(e->d_name, "base"))
                continue;
            char pair[1200];
            snprintf(pair, sizeof pair, "%s/pairs/base__%s.safetensors", o->data, e->d_name);
            if (access(pair, R_OK))
                continue;
            if (o->only && !scdb_list_has(o->only, e->d_name))
                continue;
            snprintf(names[m++], 64, "%s", e->d_name);
        }
        closedir(d);
        qsort(names, (size_t)m, sizeof names[0], (int (*)(const void *, const void *))strcmp);
        for (int i = 0; i < m && n < MAX_CONS; i++, n++) {
            lcons *x = &c[n];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "%.63s", names[i]);
            snprintf(x->kind, sizeof x->kind, "%s", k ? "lora" : "full");
            snprintf(x->src, sizeof x->src, "%.900s/%.63s", dir, names[i]);
        }
    }
    return n;
}

static int export_gguf(const char *self, const char *src, const char *out)
{
    char *argv[] = {(char *)self, "export-gguf", (char *)src, "-o", (char *)out, NULL};
    int rc = scdb_bench_spawn_quiet(argv);
    if (rc)
        fprintf(stderr, "bench llama: scdb export-gguf %s failed (status %d)\n", src, rc);
    return rc;
}

static int write_config(const char *path, const char *sock, const char *store, const lopts *o,
                        const lcons *c, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s\nblock_tokens = 64\nlog_level = warn\n"
               "heartbeat_timeout_ms = 60000\nno_sync = 1\nmodels_dir = %s/models\n\n",
            sock, store, o->data);
    fprintf(f, "[model base]\nconfig = %s/models/base/config.json\n\n", o->data);
    fprintf(f, "[codebook " CB "]\nkind = scd\nmodel = base\ncodes_dtype = int8\n"
               "file = %s/codebooks/base.safetensors\n\n", o->data);
    for (int i = 0; i < n; i++)
        fprintf(f, "[model %s]\nconfig = %s\n\n[pair " CB " %s]\ndecoder = scd\n"
                   "file = %s/pairs/base__%s.safetensors\n\n[pair raw/base %s]\ndecoder = raw\n\n",
                c[i].name, c[i].src, c[i].name, o->data, c[i].name, c[i].name);
    return fclose(f);
}

struct llama_context *llb_ctx(struct llama_model *m, int n_ctx, const lopts *o,
                              scdb_llama_producer *capture)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_ctx < 512 ? n_ctx : 512);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    if (capture)
        scdb_llama_producer_cparams(capture, &cp);
    return llama_init_from_model(m, cp);
}

void llb_clear(struct llama_context *ctx) { llama_memory_clear(llama_get_memory(ctx), true); }

pid_t llb_broker(const char *cfg, const char *sock, const char *logp)
{
    const char *args[] = {"--config", cfg, NULL};
    pid_t broker = scdb_bench_start_broker(args, logp);
    scdb_opts so = {.endpoint = sock, .timeout_ms = 30000};
    scdb *h = NULL;
    if (broker < 0 || scdb_bench_connect(&so, 120, broker, &h)) {
        fprintf(stderr, "bench llama: the broker did not start (its log: %s)\n", logp);
        if (broker > 0)
            scdb_bench_stop_broker(broker, SIGKILL);
        return -1;
    }
    scdb_close(&h);
    return broker;
}

int llb_time_own(struct llama_context *ctx, const int32_t *tok, int P, int reps, const char *who,
                 double *total, double *prefill)
{
    double best = INFINITY, best_pre = INFINITY;
    for (int r = 0; r < reps; r++) {
        llb_clear(ctx);
        double t0 = scdb_now();
        scdb_err e = scdb_llama_decode(ctx, 0, tok, (size_t)P, 0, 0);
        double t1 = scdb_now();
        if (!e)
            e = scdb_llama_decode(ctx, 0, tok + P, 1, P, 0);
        if (e) {
            fprintf(stderr, "bench llama: %s: own prefill of %d tokens: llama_decode failed (%s)\n", who,
                    P, scdb_strerror(e));
            return -1;
        }
        best = fmin(best, scdb_now() - t0);
        best_pre = fmin(best_pre, t1 - t0);
    }
    *total = best;
    if (prefill)
        *prefill = best_pre;
    return 0;
}

int llb_time_restore(scdb_llama_consumer *c, struct llama_context *ctx, const int32_t *tok, int P,
                     int reps, const char *who, llb_restore_t *out)
{
    llb_restore_t b = {INFINITY, INFINITY, INFINITY, INFINITY, 0};
    const int R = P / 64 * 64;
    for (int r = 0; r < reps; r++) {
        scdb_llama_restore_result rr = {0};
        llb_clear(ctx);
        double t0 = scdb_now();
        scdb_err e = scdb_llama_restore(c, ctx, tok, (size_t)P, NULL, &rr);
        double t1 = scdb_now();
        if (e || rr.n_restored != R) {
            fprintf(stderr, "bench llama: %s: restore gave %d of %d tokens: %s\n", who,
                    rr.n_restored, R, e ? scdb_llama_consumer_error(c) : "short");
            return -1;
        }
        /* what a consumer pays after the stored blocks: its own prefill of
         * the prefix's last P - R tokens, then the first token */
        if (P > R)
            e = scdb_llama_decode(ctx, 0, tok + R, (size_t)(P - R), R, 0);
        if (!e)
            e = scdb_llama_decode(ctx, 0, tok + P, 1, P, 0);
        if (e) {
            fprintf(stderr, "bench llama: %s: llama_decode after a restore of %d tokens failed (%s)\n",
                    who, R, scdb_strerror(e));
            return -1;
        }
        b.ttft = fmin(b.ttft, scdb_now() - t0);
        b.restore = fmin(b.restore, t1 - t0);
        b.get_ms = fmin(b.get_ms, rr.get_ms);
        b.blob_ms = fmin(b.blob_ms, rr.write_ms);
        b.n_restored = rr.n_restored;
    }
    *out = b;
    return 0;
}

/* a context with flash attention off: ggml's CPU flash attention rounds
 * through F16 (about 4e-3 in logits), so the two engines are compared
 * where both compute in f32 */
static struct llama_context *f32_ctx(struct llama_model *m, const lopts *o)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    return llama_init_from_model(m, cp);
}


/* log-softmax of n rows of V logits */

/* score rows got against ref over C continuation tokens (targets tok[1..]) */
static void score(const float *ref, const float *got, int C, int V, const int32_t *next, acc *a,
                  acc *oracle)
{
    double *lr = malloc((size_t)V * sizeof *lr), *lg = malloc((size_t)V * sizeof *lg);
    for (int t = 0; t < C; t++) {
        scdb_bench_log_softmax(ref + (size_t)t * V, V, lr);
        scdb_bench_log_softmax(got + (size_t)t * V, V, lg);
        int ar = 0, ag = 0;
        double kl = 0;
        for (int v = 0; v < V; v++) {
            kl += exp(lr[v]) * (lr[v] - lg[v]);
            if (lr[v] > lr[ar]) ar = v;
            if (lg[v] > lg[ag]) ag = v;
        }
        a->kl += kl;
        a->top1 += ar == ag;
        a->nll -= lg[next[t]];
        a->n++;
        if (oracle) {
            oracle->nll -= lr[next[t]];
            oracle->n++;
        }
    }
    free(lr);
    free(lg);
}

/* the C rows of logits of the last decode into out; -1 (a message naming
 * who and what) when llama.cpp has none or one is not finite */
static int rows_logits(struct llama_context *ctx, int C, int V, float *out, const char *who,
                       const char *what)
{
    for (int t = 0; t < C; t++) {
        const float *g = llama_get_logits_ith(ctx, t);
        if (!g) {
            fprintf(stderr, "bench llama: %s: %s: no logits for continuation token %d\n", who, what, t);
            return -1;
        }
        for (int v = 0; v < V; v++)
            if (!isfinite(g[v])) {
                fprintf(stderr, "bench llama: %s: %s: logit %d of continuation token %d is not finite "
                        "(%g)\n", who, what, v, t, g[v]);
                return -1;
            }
        memcpy(out + (size_t)t * V, g, (size_t)V * sizeof(float));
    }
    return 0;
}

/* decode tok[a, b) at positions a.. (logits for every token when all); -1
 * and a message naming who and what when llama.cpp fails */
static int dec(struct llama_context *ctx, const int32_t *tok, int a, int b, int all, const char *who,
               const char *what)
{
    if (b <= a)
        return 0;
    scdb_err e = scdb_llama_decode(ctx, 0, tok + a, (size_t)(b - a), a, all);
    if (e)
        fprintf(stderr, "bench llama: %s: %s: llama_decode of tokens [%d, %d) failed (%s)\n", who, what, a,
                b, scdb_strerror(e));
    return e ? -1 : 0;
}

/* Restore P tokens through consumer rc (R of them stored), make the
 * context then_use's when given (raw reuse restores base's KV into the
 * consumer's context), prefill the rest of the prefix and decode the C
 * continuation tokens, their logits into got.  0, or -1 having said what
 * failed ("raw", "exact"). */
static int restore_rows(struct llama_context *cctx, scdb_llama_consumer *rc,
                        scdb_llama_consumer *then_use, const int32_t *tok, int P, int R, int C, int V,
                        float *got, const char *who, const char *what)
{
    scdb_llama_restore_result rr = {0};
    char step[64];
    llb_clear(cctx);
    if (scdb_llama_restore(rc, cctx, tok, (size_t)P, NULL, &rr) || rr.n_restored != R) {
        fprintf(stderr, "bench llama: %s: %s restore: %s\n", who, what, scdb_llama_consumer_error(rc));
        return -1;
    }
    scdb_err e;
    if (then_use && (e = scdb_llama_consumer_use(then_use, cctx))) {
        fprintf(stderr, "bench llama: %s: cannot make the context its own: %s\n", who,
                scdb_strerror(e));
        return -1;
    }
    snprintf(step, sizeof step, "%s: the prefix after the stored blocks", what);
    if (dec(cctx, tok, R, P, 0, who, step))
        return -1;
    snprintf(step, sizeof step, "%s: continuation", what);
    if (dec(cctx, tok, P, P + C, 1, who, step))
        return -1;
    return rows_logits(cctx, C, V, got, who, what);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_family(const lopts *op, cJSON *root, cJSON *rows);

int scdb_bench_llama(int argc, char **argv)
{
    lopts o = {.prefix = 448, .cont = 32, .windows = 2, .reps = 3, .threads = 2, .at = -1,
               .family = 1, .tokens = {512, 2048, 8192}, .n_tokens = 3,
               .dims = {22, 2048, 32, 4, 5632}, .ranks = {32, 48, 48}, .candidates = -1,
               .patch = -1, .hidden = 128, .prefill_reps = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--own-layer")) {
            o.own_layer = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench llama: %s: unknown option or no value\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        char why[256] = "";
        if (!strcmp(a, "--data")) o.data = v;
        else if (!strcmp(a, "--gguf")) o.gguf = v;
        else if (!strcmp(a, "--json")) o.json = v;
        else if (!strcmp(a, "--png")) o.png = v;
        else if (!strcmp(a, "--consumers")) o.only = v;
        else if (!strcmp(a, "--text")) o.text = v;
        else if (!strcmp(a, "--vocab")) o.vocab = v;
        else if (!strcmp(a, "--shape")) {
            bad = strcmp(v, "family") && strcmp(v, "1b") && strcmp(v, "all");
            if (bad)
                snprintf(why, sizeof why, "--shape '%s': want family, 1b or all", v);
            o.family = strcmp(v, "1b") != 0;
            o.big = strcmp(v, "family") != 0;
        }
        else if (!strcmp(a, "--tokens"))
            bad = int_list(a, v, 64, LLB_MAX_TOKENS_1B, LLB_MAX_TOKEN_COUNTS, 0, o.tokens, &o.n_tokens, why,
                           sizeof why);
        else if (!strcmp(a, "--ranks")) {
            int n = 0;
            bad = int_list(a, v, 1, 4096, 3, 3, o.ranks, &n, why, sizeof why);
        }
        else if (!strcmp(a, "--1b-dims")) {     /* tests: a small model through the same path */
            int n = 0;
            bad = int_list(a, v, 1, 65536, 5, 5, o.dims, &n, why, sizeof why);
        }
        else if (!strcmp(a, "--prefill-reps")) bad = scdb_parse_int(a, v, 1, 100, &o.prefill_reps, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--candidates")) bad = scdb_parse_int(a, v, 0, 255, &o.candidates, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--patch-layers")) bad = scdb_parse_int(a, v, 0, 255, &o.patch, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--at")) {
            int64_t at = 0;
            bad = scdb_parse_i64(a, v, 0, INT64_MAX / 2, &at, why, sizeof why) != SCDB_OK;
            o.at = (long)at;
        }
        else if (!strcmp(a, "--prefix")) bad = scdb_parse_int(a, v, 64, 480, &o.prefix, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--cont")) bad = scdb_parse_int(a, v, 1, 64, &o.cont, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--windows")) bad = scdb_parse_int(a, v, 1, 64, &o.windows, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--reps")) bad = scdb_parse_int(a, v, 1, 100, &o.reps, why, sizeof why) != SCDB_OK;
        else if (!strcmp(a, "--threads")) bad = scdb_parse_int(a, v, 1, 256, &o.threads, why, sizeof why) != SCDB_OK;
        else {
            fprintf(stderr, "bench llama: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "bench llama: %s\n", why);
            return 2;
        }
    }
    if (o.prefix + o.cont > 512) {
        fprintf(stderr, "bench llama: --prefix + --cont is %d, over the family's context of 512\n",
                o.prefix + o.cont);
        return 2;
    }
    if (!o.data)
        o.data = scdb_data_dir();
    char err[1024] = "";
    if (scdb_llama_init(err, sizeof err)) {
        fprintf(stderr, "bench llama: %s\n", err);
        return 1;
    }
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "rows");
    cJSON_AddStringToObject(root, "bench", "llama");
    cJSON_AddNumberToObject(root, "threads", o.threads);
    int failed = 0;
    if (o.family)
        failed = run_family(&o, root, rows);
    if (!failed && o.big)
        failed = llb_run_1b(&o, root, rows);
    if (!failed && o.json && scdb_bench_write_json(o.json, root, "bench llama"))
        failed = 1;
    if (!failed && o.png && o.json && o.family) {
        char plot[4200];
        snprintf(plot, sizeof plot, "%s/tools/plot_llama.py", scdb_share_dir());
        char *pargv[] = {"/usr/bin/python3", plot, (char *)o.json, (char *)o.png, NULL};
        if (access(plot, R_OK) || scdb_bench_spawn_quiet(pargv))
            fprintf(stderr, "bench llama: no PNG (python3 with matplotlib, %s)\n", plot);
    }
    cJSON_Delete(root);
    return failed;
}

/* the family rows: every consumer of the family against base, in llama.cpp */
static int run_family(const lopts *op, cJSON *root, cJSON *rows)
{
    lopts o = *op;
    char err[1024] = "";
    static lcons cons[MAX_CONS];
    int nc = find_consumers(&o, cons);
    if (nc == 0) {
        fprintf(stderr, "bench llama: no consumer with a pair under %s (--consumers %s)\n", o.data,
                o.only ? o.only : "all");
        return 1;
    }
    char tmp[] = "/tmp/scdb-bench-llama.XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("bench llama: mkdtemp");
        return 1;
    }
    int rc = 1;
    pid_t broker = -1;
    struct llama_model *lbase = NULL;
    const char *gdir = o.gguf ? o.gguf : tmp;
    char self[4096], base_gguf[1200];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sl > 0 ? sl : 0] = 0;
    snprintf(base_gguf, sizeof base_gguf, "%s/base.gguf", gdir);
    {
        char src[1100];
        snprintf(src, sizeof src, "%s/models/base", o.data);
        if (!o.gguf && export_gguf(self, src, base_gguf))
            goto out;
    }
    for (int i = 0; i < nc; i++) {
        snprintf(cons[i].gguf, sizeof cons[i].gguf, "%s/%s.gguf", gdir, cons[i].name);
        if (!o.gguf && export_gguf(self, cons[i].src, cons[i].gguf))
            goto out;
        const char *dom = cons[i].name;
        scdb_model_config mc;
        if (!strcmp(cons[i].kind, "full") &&
            !scdb_model_config_load_any(cons[i].src, NULL, &mc, err, sizeof err) && mc.domain[0])
            dom = mc.domain;
        if (o.text)
            snprintf(cons[i].text, sizeof cons[i].text, "%s", o.text);
        else
            scdb_model_heldout_path(o.data, dom, cons[i].text, sizeof cons[i].text);
    }
    fprintf(stderr, "bench llama: %d consumers, GGUF files in %s\n", nc, gdir);

    /* llama.cpp: base once, full models each, adapters over base */
    lbase = llama_model_load_from_file(base_gguf, llama_model_default_params());
    if (!lbase) {
        fprintf(stderr, "bench llama: llama.cpp cannot load %s\n", base_gguf);
        goto out;
    }
    for (int i = 0; i < nc; i++) {
        lcons *c = &cons[i];
        if (!strcmp(c->kind, "full")) {
            c->m = llama_model_load_from_file(c->gguf, llama_model_default_params());
        } else {
            c->m = lbase;
            c->ad = llama_adapter_lora_init(lbase, c->gguf);
        }
        if (!c->m || (!strcmp(c->kind, "lora") && !c->ad)) {
            fprintf(stderr, "bench llama: llama.cpp cannot load %s\n", c->gguf);
            goto out;
        }
        if (scdb_model_load_ex(c->src, &(scdb_model_load_opts){.models_dir = NULL}, &c->ref, err,
                               sizeof err)) {
            fprintf(stderr, "bench llama: %s: %s\n", c->src, err);
            goto out;
        }
    }

    /* the broker */
    char cfg[300], sock[300], store[300], logp[300];
    snprintf(cfg, sizeof cfg, "%s/broker.ini", tmp);
    snprintf(sock, sizeof sock, "ipc://%s/s", tmp);
    snprintf(store, sizeof store, "%s/store", tmp);
    snprintf(logp, sizeof logp, "%s/broker.log", tmp);
    if (write_config(cfg, sock, store, &o, cons, nc)) {
        fprintf(stderr, "bench llama: cannot write %s\n", cfg);
        goto out;
    }
    if ((broker = llb_broker(cfg, sock, logp)) < 0)
        goto out;
    scdb_llama_producer_params pp = scdb_llama_producer_default_params();
    pp.endpoint = sock;
    pp.producer = "base";
    pp.codebook = CB;
    pp.timeout_ms = 60000;
    scdb_llama_producer *prod = NULL;
    if (scdb_llama_producer_open(&pp, &prod, err, sizeof err)) {
        fprintf(stderr, "bench llama: producer: %s\n", err);
        goto out;
    }
    /* base's KV as is, for raw reuse: a second producer of raw/base */
    scdb_llama_producer_params rpp = pp;
    rpp.codebook = NULL;
    scdb_llama_producer *rawprod = NULL;
    if (scdb_llama_producer_open(&rpp, &rawprod, err, sizeof err)) {
        fprintf(stderr, "bench llama: raw producer: %s\n", err);
        scdb_llama_producer_close(&prod);
        goto out;
    }
    struct llama_context *pctx = llb_ctx(lbase, 512, &o, prod);
    const int P = o.prefix, C = o.cont, V = 256;
    float *ref = malloc((size_t)C * V * sizeof *ref), *got = malloc((size_t)C * V * sizeof *got);
    float *rlg = malloc((size_t)(P + C) * V * sizeof *rlg);
    int32_t *tok = malloc((size_t)(P + C + 1) * sizeof *tok);
    double cap_plain = INFINITY, cap_with = INFINITY, worst_dl = 0;
    cJSON *frows[MAX_CONS] = {0};   /* this run's rows: capture_overhead set after the loop */
    int nfr = 0;
    int failed = 0;
    if (!pctx || !ref || !got || !rlg || !tok) {
        fprintf(stderr, "bench llama: %s\n", pctx ? "out of memory" : "no llama.cpp context for base");
        failed = 1;
    }
    printf("| consumer | kind | prefix | own prefill | TTFT via scdb | speed-up | SCD top-1, ppl, KL "
           "| raw top-1, ppl, KL | exact top-1, KL | engines max dlogit |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nc && !failed; i++) {
        lcons *c = &cons[i];
        char *text = NULL;
        size_t len = 0;
        size_t from = 0, upto = 0;
        if (!scdb_read_file(c->text, 1 << 26, &text, &len)) {
            from = o.at >= 0 ? (size_t)o.at : len / 2;
            upto = from < len ? len - from : 0;
        }
        if (!text || upto < (size_t)(P + C + 1)) {
            fprintf(stderr, "bench llama: %s: cannot read enough of %s\n", c->name, c->text);
            failed = 1;
            free(text);
            break;
        }
        scdb_llama_consumer *sc = NULL, *rawc = NULL, *xc = NULL;
        scdb_llama_producer *xp = NULL;
        scdb_llama_consumer_params cp = scdb_llama_consumer_default_params();
        cp.endpoint = sock;
        cp.consumer = c->name;
        cp.model = c->m;
        cp.adapter = c->ad;
        /* the broker checks the pair against these files' weights */
        cp.model_path = c->ad ? base_gguf : c->gguf;
        cp.adapter_path = c->ad ? c->gguf : NULL;
        cp.timeout_ms = 60000;
        cp.codebook = CB;
        scdb_err e = scdb_llama_consumer_open(&cp, &sc, err, sizeof err);
        cp.codebook = "raw/base";
        if (!e) e = scdb_llama_consumer_open(&cp, &rawc, err, sizeof err);
        cp.codebook = NULL;   /* raw/<consumer>: its own KV */
        if (!e) e = scdb_llama_consumer_open(&cp, &xc, err, sizeof err);
        scdb_llama_producer_params xpp = pp;
        xpp.producer = c->name;
        xpp.codebook = NULL;
        if (!e) e = scdb_llama_producer_open(&xpp, &xp, err, sizeof err);
        struct llama_context *cctx = llb_ctx(c->m, 512, &o, xp);
        if (e || !cctx) {
            fprintf(stderr, "bench llama: %s: %s\n", c->name, e ? err : "no context");
            failed = 1;
        }
        acc as = {0}, ar = {0}, ax = {0}, ao = {0};
        double own_t[64], ttft_t[64], rest_t[64], get_t[64], blob_t[64], dl = 0, dl_fa = 0;
        int nw = 0;
        for (int w = 0; w < o.windows && !failed; w++) {
            size_t span = upto - (size_t)(P + C + 1);
            size_t at = from + (o.windows > 1 ? span * (size_t)w / (size_t)(o.windows - 1) : 0);
            scdb_tokenize_bytes(text + at, (size_t)(P + C + 1), tok);
            /* base stores the prefix (capture timed against a plain prefill) */
            for (int r = 0; r < o.reps; r++) {
                llb_clear(pctx);
                double t0 = scdb_now();
                if (dec(pctx, tok, 0, P, 0, "base", "plain prefill")) {
                    failed = 1;
                    break;
                }
                cap_plain = fmin(cap_plain, scdb_now() - t0);
                llb_clear(pctx);
                scdb_llama_put_result pr;
                if ((e = scdb_llama_producer_prefill(prod, pctx, 0, tok, (size_t)P, &pr))) {
                    fprintf(stderr, "bench llama: put: %s\n", scdb_llama_producer_error(prod));
                    failed = 1;
                    break;
                }
                cap_with = fmin(cap_with, pr.prefill_ms / 1e3);
            }
            llb_clear(pctx);
            scdb_llama_put_result rpr;
            if (!failed && scdb_llama_producer_prefill(rawprod, pctx, 0, tok, (size_t)P, &rpr)) {
                fprintf(stderr, "bench llama: raw put: %s\n", scdb_llama_producer_error(rawprod));
                failed = 1;
            }
            if (failed) break;
            /* oracle: the consumer's own prefill, timed to the first token */
            if ((e = scdb_llama_consumer_use(sc, cctx))) {
                fprintf(stderr, "bench llama: %s: cannot make the context its own: %s\n", c->name,
                        scdb_strerror(e));
                failed = 1;
                break;
            }
            double best_own;
            if (llb_time_own(cctx, tok, P, o.reps, c->name, &best_own, NULL)) {
                failed = 1;
                break;
            }
            llb_clear(cctx);
            if (dec(cctx, tok, 0, P, 0, c->name, "oracle prefill") ||
                dec(cctx, tok, P, P + C, 1, c->name, "oracle continuation") ||
                rows_logits(cctx, C, V, ref, c->name, "oracle")) {
                failed = 1;
                break;
            }
            /* the reference engine's own prefill of the same tokens, against
             * llama.cpp's in f32 (flash attention off) and as configured;
             * any failure or non-finite logit fails the bench (it must not
             * read as the engines agreeing) */
            {
                scdb_kv_cache *kv = NULL;
                struct llama_context *fc = NULL;
                const char *what = "the reference engine's cache";
                scdb_err re = scdb_model_cache_new(c->ref, P + C, &kv);
                if (!re) {
                    what = "the reference engine's forward";
                    re = scdb_model_forward(c->ref, tok, NULL, P + C, kv, rlg, NULL);
                }
                if (!re) {
                    what = "the f32 llama.cpp context";
                    re = (fc = f32_ctx(c->m, &o)) ? SCDB_OK : SCDB_ENOMEM;
                }
                if (!re) {
                    what = "making the f32 context the consumer's";
                    re = scdb_llama_consumer_use(sc, fc);
                }
                if (re) {
                    fprintf(stderr, "bench llama: %s: %s failed (%s)\n", c->name, what, scdb_strerror(re));
                    failed = 1;
                }
                if (!failed && dec(fc, tok, 0, P + C, 1, c->name, "f32 prefill"))
                    failed = 1;
                for (int t = 0; t < P + C && !failed; t++) {
                    const float *g = llama_get_logits_ith(fc, t);
                    if (!g) {
                        fprintf(stderr, "bench llama: %s: f32 context: no logits for token %d\n", c->name, t);
                        failed = 1;
                        break;
                    }
                    for (int v = 0; v < V; v++) {
                        double r = rlg[(size_t)t * V + v];
                        if (!isfinite(g[v]) || !isfinite(r)) {
                            fprintf(stderr, "bench llama: %s: token %d logit %d not finite (llama.cpp f32 %g, "
                                    "reference engine %g)\n", c->name, t, v, g[v], r);
                            failed = 1;
                            break;
                        }
                        dl = fmax(dl, fabs(g[v] - r));
                    }
                }
                if (fc) {
                    scdb_llama_consumer_forget(sc, fc);
                    llama_free(fc);
                }
                for (int t = 0; t < C && !failed; t++)   /* ref: finite (rows_logits) */
                    for (int v = 0; v < V; v++)
                        dl_fa = fmax(dl_fa, fabs(ref[(size_t)t * V + v] - rlg[(size_t)(P + t) * V + v]));
                scdb_kv_cache_free(&kv);
                if (failed)
                    break;
            }
            /* scd */
            scdb_llama_restore_result rr = {0};
            llb_restore_t tr;
            if (llb_time_restore(sc, cctx, tok, P, o.reps, c->name, &tr)) {
                failed = 1;
                break;
            }
            double best_ttft = tr.ttft, best_rest = tr.restore, best_get = tr.get_ms, best_blob = tr.blob_ms;
            int R = tr.n_restored;
            /* the tokens between the stored blocks and the prefix's end are
             * the consumer's own, then the continuation */
            llb_clear(cctx);
            if ((e = scdb_llama_restore(sc, cctx, tok, (size_t)P, NULL, &rr)) || rr.n_restored != R) {
                fprintf(stderr, "bench llama: %s: scd restore gave %d of %d tokens: %s\n", c->name,
                        rr.n_restored, R, e ? scdb_llama_consumer_error(sc) : "short");
                failed = 1;
                break;
            }
            if (dec(cctx, tok, R, P, 0, c->name, "scd: the prefix after the stored blocks") ||
                dec(cctx, tok, P, P + C, 1, c->name, "scd: continuation") ||
                rows_logits(cctx, C, V, got, c->name, "scd")) {
                failed = 1;
                break;
            }
            score(ref, got, C, V, tok + P + 1, &as, &ao);
            /* raw reuse of base's KV */
            if (restore_rows(cctx, rawc, sc, tok, P, R, C, V, got, c->name, "raw")) {
                failed = 1;
                break;
            }
            score(ref, got, C, V, tok + P + 1, &ar, NULL);
            /* exact: its own prefill stored raw, restored */
            llb_clear(cctx);
            scdb_llama_put_result xr;
            if (scdb_llama_producer_prefill(xp, cctx, 0, tok, (size_t)P, &xr)) {
                fprintf(stderr, "bench llama: %s: raw put: %s\n", c->name,
                        scdb_llama_producer_error(xp));
                failed = 1;
                break;
            }
            if (restore_rows(cctx, xc, NULL, tok, P, R, C, V, got, c->name, "exact")) {
                failed = 1;
                break;
            }
            score(ref, got, C, V, tok + P + 1, &ax, NULL);
            get_t[nw] = best_get;
            blob_t[nw] = best_blob;
            own_t[nw] = best_own * 1e3;
            ttft_t[nw] = best_ttft * 1e3;
            rest_t[nw] = best_rest * 1e3;
            nw++;
        }
        free(text);
        if (!failed && as.n == 0) {
            fprintf(stderr, "bench llama: %s: no evaluated token\n", c->name);
            failed = 1;
        }
        if (!failed) {
            qsort(own_t, (size_t)nw, sizeof(double), cmp_d);
            qsort(ttft_t, (size_t)nw, sizeof(double), cmp_d);
            qsort(rest_t, (size_t)nw, sizeof(double), cmp_d);
            qsort(get_t, (size_t)nw, sizeof(double), cmp_d);
            qsort(blob_t, (size_t)nw, sizeof(double), cmp_d);
            double own = own_t[nw / 2], ttft = ttft_t[nw / 2], rest = rest_t[nw / 2];
            double on = ao.nll / ao.n;
            double ppl = exp(as.nll / as.n - on), rppl = exp(ar.nll / ar.n - on);
            worst_dl = fmax(worst_dl, dl);
            printf("| %s | %s | %d | %.1f ms | %.1f ms | %.1fx | %.3f, %+.1f%%, %.4f | %.3f, %+.1f%%, "
                   "%.4f | %.3f, %.1e | %.1e |\n", c->name, c->kind, P, own, ttft, own / ttft,
                   as.top1 / as.n, (ppl - 1) * 100, as.kl / as.n, ar.top1 / ar.n, (rppl - 1) * 100,
                   ar.kl / ar.n, ax.top1 / ax.n, ax.kl / ax.n, dl);
            fflush(stdout);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "shape", "family");
            cJSON_AddStringToObject(row, "consumer", c->name);
            cJSON_AddStringToObject(row, "kind", c->kind);
            cJSON_AddStringToObject(row, "engine", "llama.cpp " SCDB_LLAMA_RELEASE);
            cJSON_AddNumberToObject(row, "prefix_tokens", P);
            cJSON_AddNumberToObject(row, "restored_tokens", P / 64 * 64);
            cJSON_AddNumberToObject(row, "prefilled_after_restore", P % 64);   /* in ttft_ms */
            cJSON_AddNumberToObject(row, "restore_ms", rest);
            cJSON_AddNumberToObject(row, "get_ms", get_t[nw / 2]);       /* lookup + broker decode */
            cJSON_AddNumberToObject(row, "blob_ms", blob_t[nw / 2]);     /* permute, convert, set_data */
            cJSON_AddNumberToObject(row, "own_prefill_ms", own);
            cJSON_AddNumberToObject(row, "ttft_ms", ttft);
            cJSON_AddNumberToObject(row, "speedup", own / ttft);
            cJSON_AddNumberToObject(row, "ppl_ratio", ppl);
            cJSON_AddNumberToObject(row, "kl", as.kl / as.n);
            cJSON_AddNumberToObject(row, "top1", as.top1 / as.n);
            cJSON_AddNumberToObject(row, "raw_ppl_ratio", rppl);
            cJSON_AddNumberToObject(row, "raw_kl", ar.kl / ar.n);
            cJSON_AddNumberToObject(row, "raw_top1", ar.top1 / ar.n);
            cJSON_AddNumberToObject(row, "exact_kl", ax.kl / ax.n);
            cJSON_AddNumberToObject(row, "exact_top1", ax.top1 / ax.n);
            /* capture_overhead: written after the loop, the whole run's */
            cJSON_AddNumberToObject(row, "ref_max_dlogit", dl);
            cJSON_AddNumberToObject(row, "ref_max_dlogit_default_ctx", dl_fa);
            cJSON_AddNumberToObject(row, "windows", nw);
            cJSON_AddNumberToObject(row, "tokens_scored", (double)as.n);
            cJSON_AddItemToArray(rows, row);
            frows[nfr++] = row;
        }
        if (cctx)
            llama_free(cctx);
        scdb_llama_consumer_close(&sc);
        scdb_llama_consumer_close(&rawc);
        scdb_llama_consumer_close(&xc);
        scdb_llama_producer_close(&xp);
    }
    /* many adapters, one process: one context switched between two
     * adapters per step (llama.cpp applies adapters per context) against
     * the same decode steps without a switch */
    double sw_ms = NAN, plain_ms = NAN;
    {
        int a0 = -1, a1 = -1;
        for (int i = 0; i < nc; i++)
            if (cons[i].ad) {
                if (a0 < 0) a0 = i;
                else if (a1 < 0) a1 = i;
            }
        if (!failed && a1 >= 0) {
            struct llama_context *sc = llb_ctx(lbase, 512, &o, NULL);
            struct llama_adapter_lora *ads[2] = {cons[a0].ad, cons[a1].ad};
            float one = 1.0f;
            double best_sw = INFINITY, best_pl = INFINITY;
            if (!sc) {
                fprintf(stderr, "bench llama: adapter switch: no llama.cpp context\n");
                failed = 1;
            }
            for (int r = 0; r < 5 && !failed; r++) {
                for (int mode = 0; mode < 2 && !failed; mode++) {
                    llb_clear(sc);
                    if (llama_set_adapters_lora(sc, &ads[0], 1, &one) ||
                        dec(sc, tok, 0, 64, 0, cons[a0].name, "adapter switch: prefill")) {
                        fprintf(stderr, "bench llama: adapter switch: %s failed\n", cons[a0].name);
                        failed = 1;
                        break;
                    }
                    double t0 = scdb_now();
                    for (int k = 0; k < 16 && !failed; k++) {
                        if (mode && llama_set_adapters_lora(sc, &ads[(k + 1) & 1], 1, &one)) {
                            fprintf(stderr, "bench llama: adapter switch: llama_set_adapters_lora failed\n");
                            failed = 1;
                        }
                        if (!failed && dec(sc, tok, 64 + k, 65 + k, 0, "adapter switch", "decode step"))
                            failed = 1;
                    }
                    double dt = (scdb_now() - t0) * 1e3 / 16;
                    if (mode) best_sw = fmin(best_sw, dt);
                    else best_pl = fmin(best_pl, dt);
                }
            }
            if (sc)
                llama_free(sc);
            sw_ms = best_sw;
            plain_ms = best_pl;
            if (!failed) printf("\nadapters on one context: a decode step %.3f ms with an adapter switch before "
                   "it (%s <-> %s), %.3f ms without (+%.3f ms per switch: a scheduler re-reserve); "
                   "the alternative, a context per adapter, costs its KV cache (%.1f MiB at %d "
                   "cells) and a graph reserve at creation\n", best_sw, cons[a0].name,
                   cons[a1].name, best_pl, best_sw - best_pl,
                   2.0 * 8 * 512 * 64 * 2 / 1048576.0, 512);
        }
    }
    /* the capture overhead is a best over every consumer's windows: the
     * final one, not the running one, in every row */
    for (int k = 0; k < nfr; k++)
        cJSON_AddNumberToObject(frows[k], "capture_overhead", cap_with / cap_plain - 1);
    printf("\ncapture overhead: base's prefill of %d tokens %.2f ms with capture, %.2f ms without "
           "(best of %d x %d windows x %d consumers): %+.1f%%; engines' logits within %.1e\n", P,
           cap_with * 1e3, cap_plain * 1e3, o.reps, o.windows, nc,
           (cap_with / cap_plain - 1) * 100, worst_dl);
    cJSON_AddNumberToObject(root, "capture_overhead", cap_with / cap_plain - 1);
    cJSON_AddNumberToObject(root, "ref_max_dlogit", worst_dl);
    if (!isnan(sw_ms)) {
        cJSON_AddNumberToObject(root, "adapter_switch_step_ms", sw_ms);
        cJSON_AddNumberToObject(root, "plain_step_ms", plain_ms);
    }
    free(ref);
    free(got);
    free(rlg);
    free(tok);
    if (pctx)
        llama_free(pctx);
    scdb_llama_producer_close(&prod);
    scdb_llama_producer_close(&rawprod);
    rc = failed;
out:
    if (broker > 0 && scdb_bench_stop_broker(broker, SIGTERM)) {
        fprintf(stderr, "bench llama: the broker did not stop cleanly\n");
        rc = 1;
    }
    for (int i = 0; i < nc; i++) {
        scdb_model_free(&cons[i].ref);
        if (cons[i].m && cons[i].m != lbase)
            llama_model_free(cons[i].m);
    }
    if (lbase)   /* after the consumers: their adapters go with it */
        llama_model_free(lbase);
    scdb_rm_tree(tmp);
    return rc;
}
#endif
