/* bench_llama_1b.c — `scdb bench llama --shape 1b`: cost as models grow.
 *
 * The family is tiny (8 layers, d 128); a serving fleet's models are not.
 * No 1B-class weights can be had here, so this writes one at run time: a
 * llama-architecture GGUF of the given shape (default 22 layers, d 2048,
 * 32 heads, 4 KV heads, ffn 5632: TinyLlama-1.1B's) with seeded random F16
 * weights (scdb_model_write_random_gguf) around a real vocabulary (the
 * bundle's llama SPM, 32000 tokens), and a codebook and pair of the shapes
 * `scdb calibrate` writes for it with random contents
 * (scdb_codec_synthesize; the pair's token layer and Wk / Wv are the
 * model's own).  What it measures is cost only: the model computes nothing
 * meaningful, and no quality figure is taken (rows say "cost_only": true).
 *
 * Per token count N (seeded random token ids, a fresh sequence per N so
 * each put stores every block), one model as producer and consumer (the
 * identity pair, as base__base), the same llama.cpp threads:
 *
 *   own      llama.cpp's own prefill of N tokens, then the forward of the
 *            next token (llb_time_own, the family rows' code)
 *   capture  the producer's prefill with capture on (H_in of every layer
 *            through cb_eval into the broker's states arena); its ratio to
 *            own's prefill part is capture_overhead
 *   put      scdb_put_states: the broker encodes (int8 codes) and stores
 *            (the first repetition's: a repeat finds every block stored)
 *   ttft     restore (the broker's get into the arena + the blob written
 *            with set_data) + the forward of the next token
 *            (llb_time_restore, the family rows' code)
 *
 * The three run interleaved, --prefill-reps times (default 1: a prefill of
 * 8192 tokens takes minutes), each best of those: speedup compares own and
 * ttft over the same repetitions and statistic.  Fails (exit 1) if anything
 * it names does not happen: the model or the artifacts not written, a
 * decode, a put that stores fewer than N / 64 blocks, a restore short of N
 * tokens, non-finite logits after a restore. */
#define _GNU_SOURCE   /* dladdr */
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#ifdef SCDB_HAVE_LLAMA

#include "bench_llama.h"
#include "codec.h"
#include "gguf.h"
#include "gguf_llama.h"
#include "model.h"
#include "weights_fp.h"

#define NAME "random-1b"
#define CB1 "random-1b-scd"

/* the bundle's llama SPM vocabulary: models/ beside the folder libllama
 * was loaded from ($SCDB_LLAMA_LIBDIR/../models when that is set) */
static int default_vocab(char *out, size_t cap)
{
    char dir[4096] = "";
    const char *env = getenv("SCDB_LLAMA_LIBDIR");
    Dl_info info;
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else if (dladdr((void *)llama_backend_init, &info) && info.dli_fname) {
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
    }
    snprintf(out, cap, "%.4000s/../models/ggml-vocab-llama-spm.gguf", dir);
    return access(out, R_OK);
}

/* the consumer's own tensors the pair carries, read back from its GGUF in
 * scdb's row order: embedding, layer 0's attention norm, every Wk / Wv */
typedef struct own_w {
    float *emb, *norm0;
    float **wk, **wv;
    int L;
} own_w;

static void own_free(own_w *w)
{
    free(w->emb);
    free(w->norm0);
    for (int l = 0; l < w->L; l++) {
        if (w->wk) free(w->wk[l]);
        if (w->wv) free(w->wv[l]);
    }
    free(w->wk);
    free(w->wv);
}

static scdb_err own_read(const char *path, own_w *w, char *err, size_t errlen)
{
    scdb_gguf_file *f = NULL;
    scdb_gguf_llama_hparams hp;
    scdb_gguf_llama_tensor *t = NULL;
    int n = 0;
    scdb_err e;
    memset(w, 0, sizeof *w);
    if ((e = scdb_gguf_open(path, &f, err, errlen)) || (e = scdb_gguf_llama_hparams_read(f, &hp, err, errlen)) ||
        (e = scdb_gguf_llama_tensors(f, &hp, &t, &n, err, errlen)))
        goto done;
    w->L = hp.n_layers;
    w->wk = calloc((size_t)w->L, sizeof *w->wk);
    w->wv = calloc((size_t)w->L, sizeof *w->wv);
    e = SCDB_ENOMEM;
    if (!w->wk || !w->wv) goto done;
    for (int i = 0; i < n; i++) {
        const scdb_gguf_llama_tensor *x = &t[i];
        float **dst = NULL;
        if (!strcmp(x->t->name, "token_embd.weight")) dst = &w->emb;
        else if (x->layer == 0 && strstr(x->t->name, ".attn_norm.")) dst = &w->norm0;
        else if (x->layer >= 0 && strstr(x->t->name, ".attn_k.")) dst = &w->wk[x->layer];
        else if (x->layer >= 0 && strstr(x->t->name, ".attn_v.")) dst = &w->wv[x->layer];
        if (!dst) continue;
        size_t numel = (size_t)x->rows * (size_t)(x->cols ? x->cols : 1);
        if (!(*dst = malloc(numel * sizeof **dst))) goto done;
        if ((e = scdb_gguf_llama_read(x, *dst))) goto done;
    }
    e = SCDB_OK;
    for (int l = 0; l < w->L; l++)
        if (!w->wk[l] || !w->wv[l]) e = SCDB_ENOTFOUND;
    if (!w->emb || !w->norm0) e = SCDB_ENOTFOUND;
    if (e) snprintf(err, errlen, "%s: a tensor the pair carries is missing", path);
done:
    if (e == SCDB_ENOMEM) snprintf(err, errlen, "%s: out of memory", path);
    free(t);
    scdb_gguf_close(&f);
    return e;
}

static int finite_logits(struct llama_context *ctx, int V)
{
    const float *g = llama_get_logits_ith(ctx, -1);
    for (int v = 0; g && v < V; v++)
        if (!isfinite(g[v])) return 0;
    return g != NULL;
}

int llb_run_1b(const lopts *o, cJSON *root, cJSON *rows)
{
    char err[1024] = "", vocab[4200] = "", tmp[] = "/tmp/scdb-bench-llama-1b.XXXXXX";
    char gguf[200], cbp[200], pairp[200], cfg[200], sock[200], store[200], logp[200], fp[SCDB_WEIGHTS_FP_HEX + 1];
    int rc = 1, maxn = 0;
    pid_t broker = -1;
    struct llama_model *m = NULL;
    struct llama_context *pctx = NULL, *cctx = NULL;
    scdb_llama_producer *prod = NULL;
    scdb_llama_consumer *cons = NULL;
    scdb_codebook *cb = NULL;
    scdb_pair *pair = NULL;
    own_w ow = {0};
    int32_t *tok = NULL;
    cJSON *jrows[LLB_MAX_TOKEN_COUNTS] = {0};

    for (int i = 0; i < o->n_tokens; i++)
        if (o->tokens[i] > maxn) maxn = o->tokens[i];
    if (!o->vocab) {
        if (default_vocab(vocab, sizeof vocab)) {
            fprintf(stderr, "bench llama: --shape 1b: no vocabulary at %s (--vocab FILE, or --vocab bytes)\n",
                    vocab);
            return 1;
        }
    } else if (strcmp(o->vocab, "bytes")) {
        snprintf(vocab, sizeof vocab, "%s", o->vocab);
    }
    if (!mkdtemp(tmp)) {
        perror("bench llama: mkdtemp");
        return 1;
    }
    snprintf(gguf, sizeof gguf, "%s/" NAME ".gguf", tmp);
    snprintf(cbp, sizeof cbp, "%s/codebook.safetensors", tmp);
    snprintf(pairp, sizeof pairp, "%s/pair.safetensors", tmp);

    /* the model */
    scdb_model_config mc = {0};
    snprintf(mc.name, sizeof mc.name, NAME);
    mc.n_layers = o->dims[0];
    mc.d_model = o->dims[1];
    mc.n_heads = o->dims[2];
    mc.n_kv_heads = o->dims[3];
    mc.d_ff = o->dims[4];
    mc.head_dim = mc.d_model / mc.n_heads;
    mc.max_seq_len = maxn + 512;
    mc.rope_theta = 10000.0f;
    mc.norm_eps = 1e-5f;
    if (mc.d_model % mc.n_heads || mc.n_heads % mc.n_kv_heads || mc.head_dim % 2) {
        fprintf(stderr, "bench llama: --1b-dims: d %d, %d heads, %d KV heads: not a llama shape\n", mc.d_model,
                mc.n_heads, mc.n_kv_heads);
        goto out;
    }
    double t0 = scdb_now();
    fprintf(stderr, "bench llama: 1b: writing a random %d-layer model (d %d, %d heads, %d KV heads, ffn %d, "
            "F16, vocabulary %s) to %s ...\n", mc.n_layers, mc.d_model, mc.n_heads, mc.n_kv_heads, mc.d_ff,
            vocab[0] ? vocab : "bytes", gguf);
    if (scdb_model_write_random_gguf(&mc, vocab[0] ? vocab : NULL, 0x1b5eedull, 0.02f, SCDB_F16, gguf, err,
                                     sizeof err)) {
        fprintf(stderr, "bench llama: 1b: %s\n", err);
        goto out;
    }
    /* the architecture as the broker reads it, the fingerprint as the
     * consumer sends it */
    scdb_model_config arch;
    if (scdb_model_config_load_any(gguf, NULL, &arch, err, sizeof err) ||
        scdb_weights_fp(gguf, fp, err, sizeof err) || own_read(gguf, &ow, err, sizeof err)) {
        fprintf(stderr, "bench llama: 1b: %s\n", err);
        goto out;
    }
    const int V = arch.vocab_size;
    double t1 = scdb_now();
    scdb_codec_synth sy = {.arch = arch, .producer = NAME, .consumer = NAME, .producer_fp = fp,
                           .consumer_fp = fp, .r_k = o->ranks[0], .r_v = o->ranks[1], .r_h = o->ranks[2],
                           .n_candidates = o->candidates >= 0 ? o->candidates : arch.n_layers / 2,
                           .hidden = o->hidden, .all_layers = !o->own_layer, .token_input = !o->own_layer, .seed = 0x1b,
                           .emb = ow.emb, .norm0 = ow.norm0, .wk = (const float *const *)ow.wk,
                           .wv = (const float *const *)ow.wv};
    /* the family's shipped pairs patch 0-4 of 8 layers, 2 in the median:
     * a quarter of the layers, at most every candidate */
    sy.n_patch = o->patch >= 0 ? o->patch : (arch.n_layers + 2) / 4;
    if (o->patch < 0 && sy.n_patch > sy.n_candidates) sy.n_patch = sy.n_candidates;
    if (sy.n_candidates > arch.n_layers - 1 || sy.n_patch > sy.n_candidates) {
        fprintf(stderr, "bench llama: 1b: --candidates %d / --patch-layers %d: at most %d candidates, a budget "
                "of at most the candidates\n", sy.n_candidates, sy.n_patch, arch.n_layers - 1);
        goto out;
    }
    if (scdb_codec_synthesize(&sy, &cb, &pair, err, sizeof err)) {
        fprintf(stderr, "bench llama: 1b: %s\n", err);
        goto out;
    }
    own_free(&ow);
    memset(&ow, 0, sizeof ow);
    if (scdb_codebook_save(cb, cbp) || scdb_pair_save(pair, pairp)) {
        fprintf(stderr, "bench llama: 1b: cannot write the codebook or pair in %s\n", tmp);
        goto out;
    }
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    const int code_dim = ci->code_dim, n_scaled = ci->n_scaled;
    const int kvd = arch.n_kv_heads * arch.head_dim;
    scdb_codebook_free(&cb);
    scdb_pair_free(&pair);
    fprintf(stderr, "bench llama: 1b: model written in %.1f s; codebook and pair (random, cost only: ranks "
            "%d,%d,%d, %d candidates, patch budget %d, aligners hidden %d, decoders %s) in %.1f s\n", t1 - t0,
            sy.r_k, sy.r_v, sy.r_h, sy.n_candidates, sy.n_patch,
            sy.hidden, o->own_layer ? "layer-local" : "from every layer's code and the token", scdb_now() - t1);

    /* the broker: the random model as producer and consumer (the identity
     * pair); a prefill of minutes sends nothing, so no heartbeat reclaim */
    snprintf(cfg, sizeof cfg, "%s/broker.ini", tmp);
    snprintf(sock, sizeof sock, "ipc://%s/s", tmp);
    snprintf(store, sizeof store, "%s/store", tmp);
    snprintf(logp, sizeof logp, "%s/broker.log", tmp);
    FILE *f = fopen(cfg, "w");
    if (!f) {
        fprintf(stderr, "bench llama: 1b: cannot write %s\n", cfg);
        goto out;
    }
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s\nblock_tokens = 64\nlog_level = warn\n"
               "heartbeat_timeout_ms = 86400000\nno_sync = 1\n\n[model " NAME "]\nconfig = %s\n\n"
               "[codebook " CB1 "]\nkind = scd\nmodel = " NAME "\ncodes_dtype = int8\nfile = %s\n\n"
               "[pair " CB1 " " NAME "]\ndecoder = scd\nfile = %s\n", sock, store, gguf, cbp, pairp);
    if (fclose(f) || (broker = llb_broker(cfg, sock, logp)) < 0)
        goto out;

    m = llama_model_load_from_file(gguf, llama_model_default_params());
    if (!m) {
        fprintf(stderr, "bench llama: 1b: llama.cpp cannot load %s\n", gguf);
        goto out;
    }
    scdb_llama_producer_params pp = scdb_llama_producer_default_params();
    pp.endpoint = sock;
    pp.producer = NAME;
    pp.codebook = CB1;
    pp.model_path = gguf;
    pp.max_tokens = maxn;
    pp.timeout_ms = 600000;
    scdb_llama_consumer_params cp = scdb_llama_consumer_default_params();
    cp.endpoint = sock;
    cp.consumer = NAME;
    cp.codebook = CB1;
    cp.model = m;
    cp.model_path = gguf;
    cp.timeout_ms = 600000;
    if (scdb_llama_producer_open(&pp, &prod, err, sizeof err) ||
        scdb_llama_consumer_open(&cp, &cons, err, sizeof err)) {
        fprintf(stderr, "bench llama: 1b: %s (broker log: %s)\n", err, logp);
        goto out;
    }
    pctx = llb_ctx(m, maxn + 64, o, prod);
    cctx = llb_ctx(m, maxn + 64, o, NULL);
    tok = malloc((size_t)(maxn + 1) * sizeof *tok);
    if (!pctx || !cctx || !tok) {
        fprintf(stderr, "bench llama: 1b: no llama.cpp context of %d cells\n", maxn + 64);
        goto out;
    }

    /* warm-up: each context's first decodes reserve its graphs (a batch
     * and a single token), which no timed prefill should pay */
    for (int i = 0; i < 65; i++)
        tok[i] = 3 + i;
    {
        scdb_err e = scdb_llama_decode(cctx, 0, tok, 64, 0, 0);
        if (!e) e = scdb_llama_decode(cctx, 0, tok + 64, 1, 64, 0);
        if (!e) e = scdb_llama_decode(pctx, 0, tok, 64, 0, 0);
        if (!e) e = scdb_llama_decode(pctx, 0, tok + 64, 1, 64, 0);
        if (e) {
            fprintf(stderr, "bench llama: 1b: the warm-up decode failed (%s)\n", scdb_strerror(e));
            goto out;
        }
        /* and the first capture and restore (a consumer's first restore
         * into a context probes its layout and runs the self-test): with
         * --prefill-reps 1 no timed TTFT may pay it */
        scdb_llama_put_result wp;
        scdb_llama_restore_result wr = {0};
        llb_clear(pctx);
        llb_clear(cctx);
        if (scdb_llama_producer_prefill(prod, pctx, 0, tok, 64, &wp)) {
            fprintf(stderr, "bench llama: 1b: the warm-up put failed: %s\n", scdb_llama_producer_error(prod));
            goto out;
        }
        if ((e = scdb_llama_restore(cons, cctx, tok, 64, NULL, &wr)) || wr.n_restored != 64) {
            fprintf(stderr, "bench llama: 1b: the warm-up restore gave %d of 64 tokens: %s\n", wr.n_restored,
                    e ? scdb_llama_consumer_error(cons) : "short");
            goto out;
        }
    }
    llb_clear(cctx);
    llb_clear(pctx);
    printf("\n1B shape (cost only: random weights, random codebook and pair): %d layers, d %d, %d heads, "
           "%d KV heads, ffn %d, vocabulary %d; int8 codes %d bytes per token against %d of raw F16 KV\n\n",
           arch.n_layers, arch.d_model, arch.n_heads, arch.n_kv_heads, arch.d_ff, V, code_dim + 2 * n_scaled,
           arch.n_layers * 2 * kvd * 2);
    printf("| prefix | own prefill | TTFT via scdb | speed-up | restore (get + blob) | capture prefill | "
           "capture overhead | put |\n|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (int k = 0; k < o->n_tokens; k++) {
        const int N = o->tokens[k];
        uint64_t s = 0x70c0ull + (uint64_t)N;
        for (int i = 0; i <= N; i++)
            tok[i] = 3 + (int32_t)((scdb_xorshift64(&s) >> 11) % (uint64_t)(V > 3 ? V - 3 : 1));
        double ts = scdb_now(), own = INFINITY, own_pre = INFINITY, cap_ms = INFINITY, put_ms = 0;
        llb_restore_t tr = {INFINITY, INFINITY, INFINITY, INFINITY, 0};
        /* own prefill, the producer's and TTFT via scdb, interleaved, best
         * of --prefill-reps each (own and TTFT: the same repetitions and
         * statistic); the put of the first (a repeat finds every block
         * stored) */
        for (int r = 0; r < o->prefill_reps; r++) {
            double a, b;
            fprintf(stderr, "bench llama: 1b: %d tokens: llama.cpp's own prefill%s ...\n", N,
                    k > 0 || r > 0 ? "" : " (each of the two prefills takes about as long)");
            if (llb_time_own(cctx, tok, N, 1, NAME, &a, &b))
                goto out;
            own = fmin(own, a);
            own_pre = fmin(own_pre, b);
            fprintf(stderr, "bench llama: 1b: %d tokens: own prefill %.1f s; the producer's prefill with "
                    "capture ...\n", N, b);
            llb_clear(pctx);
            scdb_llama_put_result pr;
            if (scdb_llama_producer_prefill(prod, pctx, 0, tok, (size_t)N, &pr)) {
                fprintf(stderr, "bench llama: 1b: put of %d tokens: %s\n", N, scdb_llama_producer_error(prod));
                goto out;
            }
            llb_clear(pctx);
            if ((int)pr.put.n_stored != N / 64 || (r == 0 && (int)pr.put.n_new != N / 64)) {
                fprintf(stderr, "bench llama: 1b: the put of %d tokens stored %u of %d blocks (%u new)\n", N,
                        pr.put.n_stored, N / 64, pr.put.n_new);
                goto out;
            }
            cap_ms = fmin(cap_ms, pr.prefill_ms);
            if (r == 0)
                put_ms = pr.put_ms;
            fprintf(stderr, "bench llama: 1b: %d tokens: capture prefill %.1f s, put %.0f ms\n", N,
                    pr.prefill_ms / 1e3, pr.put_ms);
            llb_restore_t t1r;
            if (llb_time_restore(cons, cctx, tok, N, 1, NAME, &t1r))
                goto out;
            tr.ttft = fmin(tr.ttft, t1r.ttft);
            tr.restore = fmin(tr.restore, t1r.restore);
            tr.get_ms = fmin(tr.get_ms, t1r.get_ms);
            tr.blob_ms = fmin(tr.blob_ms, t1r.blob_ms);
            tr.n_restored = t1r.n_restored;
        }
        /* the last repetition's restore and first token */
        if (!finite_logits(cctx, V)) {
            fprintf(stderr, "bench llama: 1b: %d tokens: the logits after a restore are not finite\n", N);
            goto out;
        }
        llb_clear(cctx);
        double capo = cap_ms / (own_pre * 1e3) - 1;
        printf("| %d | %.0f ms | %.1f ms | %.1fx | %.1f ms (%.1f + %.1f) | %.0f ms | %+.1f%% | %.0f ms |\n", N,
               own * 1e3, tr.ttft * 1e3, own / tr.ttft, tr.restore * 1e3, tr.get_ms, tr.blob_ms, cap_ms,
               capo * 100, put_ms);
        fflush(stdout);
        fprintf(stderr, "bench llama: 1b: %d tokens done in %.0f s\n", N, scdb_now() - ts);
        cJSON *row = jrows[k] = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "shape", "1b");
        cJSON_AddStringToObject(row, "consumer", NAME);
        cJSON_AddStringToObject(row, "kind", "full");
        cJSON_AddStringToObject(row, "engine", "llama.cpp " SCDB_LLAMA_RELEASE);
        cJSON_AddBoolToObject(row, "cost_only", 1);
        cJSON_AddNumberToObject(row, "prefix_tokens", N);
        cJSON_AddNumberToObject(row, "restored_tokens", tr.n_restored);
        cJSON_AddNumberToObject(row, "restore_ms", tr.restore * 1e3);
        cJSON_AddNumberToObject(row, "get_ms", tr.get_ms);
        cJSON_AddNumberToObject(row, "blob_ms", tr.blob_ms);
        cJSON_AddNumberToObject(row, "own_prefill_ms", own * 1e3);
        cJSON_AddNumberToObject(row, "ttft_ms", tr.ttft * 1e3);
        cJSON_AddNumberToObject(row, "speedup", own / tr.ttft);
        cJSON_AddNumberToObject(row, "plain_prefill_ms", own_pre * 1e3);
        cJSON_AddNumberToObject(row, "capture_ms", cap_ms);
        cJSON_AddNumberToObject(row, "capture_overhead", capo);
        cJSON_AddNumberToObject(row, "put_ms", put_ms);
        cJSON_AddNumberToObject(row, "restore_reps", o->prefill_reps);
        cJSON_AddNumberToObject(row, "prefill_reps", o->prefill_reps);
        cJSON_AddNumberToObject(row, "n_layers", arch.n_layers);
        cJSON_AddNumberToObject(row, "d_model", arch.d_model);
        cJSON_AddNumberToObject(row, "n_heads", arch.n_heads);
        cJSON_AddNumberToObject(row, "n_kv_heads", arch.n_kv_heads);
        cJSON_AddNumberToObject(row, "d_ff", arch.d_ff);
        cJSON_AddNumberToObject(row, "vocab_size", V);
        cJSON_AddNumberToObject(row, "code_bytes_per_token", code_dim + 2 * n_scaled);
        cJSON_AddNumberToObject(row, "raw_kv_bytes_per_token", arch.n_layers * 2 * kvd * 2);
        cJSON_AddNumberToObject(row, "n_patch", sy.n_patch);
        char rk[48];
        snprintf(rk, sizeof rk, "%d,%d,%d", sy.r_k, sy.r_v, sy.r_h);
        cJSON_AddStringToObject(row, "ranks", rk);
        cJSON_AddStringToObject(row, "decoders", o->own_layer ? "own-layer" : "all-layers+token");
    }
    for (int k = 0; k < o->n_tokens; k++) {
        cJSON_AddItemToArray(rows, jrows[k]);
        jrows[k] = NULL;
    }
    cJSON *shape = cJSON_AddObjectToObject(root, "shape_1b");
    const char *vbase = strrchr(vocab, '/');
    cJSON_AddStringToObject(shape, "vocab", !vocab[0] ? "bytes" : vbase ? vbase + 1 : vocab);
    cJSON_AddStringToObject(shape, "weights", "random F16, uniform, std 0.02, norms 1 (cost only)");
    rc = 0;
out:
    for (int k = 0; k < o->n_tokens; k++) cJSON_Delete(jrows[k]);
    free(tok);
    if (pctx) llama_free(pctx);
    if (cctx) llama_free(cctx);
    scdb_llama_producer_close(&prod);
    scdb_llama_consumer_close(&cons);
    if (m) llama_model_free(m);
    scdb_codebook_free(&cb);
    scdb_pair_free(&pair);
    own_free(&ow);
    if (broker > 0 && scdb_bench_stop_broker(broker, SIGTERM)) {
        fprintf(stderr, "bench llama: 1b: the broker did not stop cleanly\n");
        rc = 1;
    }
    scdb_rm_tree(tmp);
    return rc;
}

#endif /* SCDB_HAVE_LLAMA */
