/* cmd_demo.c — `scdb demo`: the fan-out demo, one stored prefix served to
 * the whole fleet of the bundled model family.
 *
 *   1. the fleet: the specialists (DATA/models/<name>, base's full
 *      fine-tunes) and the LoRA adapters (DATA/adapters/<name>) that have a
 *      pair DATA/pairs/base__<name>.safetensors; the others are named as
 *      skipped;
 *   2. a broker process (this binary's `serve`) on a private temp dir: ipc
 *      socket and LMDB store there, its config as the packaged one (the
 *      specialists' [model] and [pair] sections, models_dir and a
 *      [consumers fleet] glob over the directories of DATA/adapters for the adapters, each
 *      with its SCD pair, a second group with raw-reuse pairs for the
 *      comparison), base's codebook with int8 codes (or --codes f16);
 *   3. a producer process: `base` prefills ONE shared prefix, capturing its
 *      states into a shared-memory arena, and has the broker encode them
 *      with the codebook and store the codes once (scdb_put_states); it also
 *      puts its own raw KV under raw/base, what a cache that ignores the
 *      adapter would serve (the comparison);
 *   4. one consumer process per fleet member, one after the other (so their
 *      timings do not share the two cores): its own prefill of the prefix
 *      (the reference, and the first token's time), then lookup + get of
 *      the prefix into a broker-made arena (shared memory; with --device
 *      cuda a CUDA IPC arena the broker decodes into on its GPU) and the
 *      last prefix token re-run for the first logits; the text's next --gen
 *      tokens teacher-forced over a copy of the decoded prefix (top-1
 *      agreement and ppl against its own prefill's) and over base's raw KV
 *      (the same, for raw reuse); and a greedy continuation in the arena
 *      through a live session the broker keeps within a slot budget with
 *      the learned eviction policy, compared with its own-prefill one;
 *   5. the fleet totals: bytes stored once vs one raw KV copy per consumer
 *      (what a cache keyed by adapter stores), first-token time summed;
 *   6. SIGTERM to the broker, cleanup, exit 0 (1 if any step failed). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec.h"
#include "kernels.h"
#include "model.h"
#include "scdb.h"
#include "bench.h"
#include "scdb_cli.h"

#define MAX_CONSUMERS 64
#define NAME_MAX_LEN 128

/* what a consumer process found, in memory shared with the parent */
typedef struct dres {
    int ok, lora;
    double ttft_own, ttft_scdb, decode_ms;
    double top1, ppl_ratio, kl, raw_top1, raw_ppl_ratio, raw_kl;
    int same_full, same_live, evictions, max_n;
} dres;

/* what the producer stored, the same way */
typedef struct dstore {
    int ok;
    unsigned blocks, block_tokens;
    unsigned long long block_bytes;
} dstore;

typedef struct demo {
    const char *data;
    char tmp[256], sock[320], cfg[320];
    char names[MAX_CONSUMERS][NAME_MAX_LEN];
    char dirs[MAX_CONSUMERS][1100];
    long long pair_bytes[MAX_CONSUMERS];
    int is_adapter[MAX_CONSUMERS];
    int n_consumers;
    char skipped[MAX_CONSUMERS][NAME_MAX_LEN];
    int n_skipped;
    int prefix, gen;
    int budget, cadence;  /* live session */
    const char *policy;
    int int8;             /* the codebook's codes: int8 (default) or f16 */
    scdb_device_pref device;  /* what the broker gets (the resolved device) */
    scdb_device dev;          /* where the consumers run: CPU or CUDA */
    /* the shared prefix and the gen tokens after it: where they come from */
    int32_t *tokens;
    char source[300];
    dres *res;            /* MAP_SHARED: one per consumer */
    dstore *store;
} demo;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb demo [--data DIR] [--prefix N] [--gen N] [--text FILE] [--codes C]\n"
            "                 [--budget N] [--policy NAME] [--cadence N] [--device D]\n"
            "                 [--engine llama.cpp|reference]\n\n"
            "The fan-out demo: starts a broker on a private temp dir whose config serves\n"
            "the whole fleet (the specialists and every LoRA adapter of DIR/adapters that\n"
            "has a pair), a producer process (base) that prefills ONE shared prefix and\n"
            "puts it as SCD codes, stored once, and one consumer process per fleet member\n"
            "that gets the prefix decoded into its own KV space.  Per consumer: kind\n"
            "(lora or full), pair bytes, time to first token via scdb vs its own prefill,\n"
            "top-1 agreement and ppl over the text's next tokens against its own prefill\n"
            "(SCD, and raw reuse of base's KV), and a live session's continuation; then\n"
            "the fleet totals (bytes stored once vs one raw KV copy per consumer) and\n"
            "the adapters skipped for want of a pair; then shuts down.\n\n"
            "  --data DIR     assets (default %s): models/, adapters/,\n"
            "                 codebooks/base.safetensors, pairs/base__<consumer>.safetensors\n"
            "  --prefix N     prefix tokens, a multiple of 64 (default 384)\n"
            "  --gen N        tokens each consumer is scored on and generates (default 64)\n"
            "  --text FILE    the shared prefix's text (default DIR/heldout/english.txt,\n"
            "                 from 48 KiB on, the first line start whose continuation\n"
            "                 is mostly not blank)\n"
            "  --codes C      int8 | f16: the stored codes (default int8)\n"
            "  --budget N     live session: slots kept (default prefix / 2)\n"
            "  --policy NAME  live session: distillcache (DIR/policies/distillcache_base),\n"
            "                 full, streaming, h2o, snapkv or tova (default distillcache)\n"
            "  --cadence N    live session: evict every N generated tokens (default 8)\n"
            "  --device D     auto | cpu | cuda (default auto: CUDA when a device answers).\n"
            "                 On cuda the broker decodes into CUDA IPC arenas and the\n"
            "                 consumers run their model and live session on the GPU (the\n"
            "                 producer stays on the CPU: it captures into shared memory)\n"
            "  --engine E     llama.cpp (what scripts/main.sh runs; builds with llama.cpp): the fleet\n"
            "                 runs in llama.cpp (GGUF exports of the family, adapters\n"
            "                 loaded once beside base); base captures and stores the\n"
            "                 prefix once, each consumer restores it into its own\n"
            "                 llama.cpp sequence (`scdb bench llama` on this prefix).\n"
            "                 reference (the default): scdb's own engine, with the live\n"
            "                 sessions\n"
            "exit status: 0 all steps ran, 1 a step failed, 2 usage error.\n",
            cli_data_dir());
}

/* ------------------------------------------------------------ helpers */

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[b]) b = i;
    return b;
}

static scdb_err connect_retry(const char *endpoint, scdb **h)
{
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 2000};
    return scdb_bench_connect(&o, 60, -1, h);
}

/* Greedy continuation of gen tokens from a cache that already holds the
 * prefix, starting from logits of the last prefix token.  With a live
 * session, each step's attention goes into its statistics and the broker
 * evicts on the session's cadence; *evictions counts them, *max_n the
 * largest cache seen, *evict_ns the broker's policy time. */
static scdb_err generate(scdb_model_dev *md, scdb_kv_cache *c, float *logits, int gen,
                         int32_t *out, scdb_session *s, int *evictions, int *max_n,
                         uint64_t *evict_ns)
{
    const scdb_model_config *cf = scdb_model_cfg(scdb_model_dev_model(md));
    const scdb_k_ops *ops = scdb_model_dev_ops(md);
    int V = cf->vocab_size;
    scdb_capture cap = {0};
    void *dlg = NULL, *dp = NULL;
    scdb_err rc;

    /* logits and attention where the model runs (the device's memory) */
    if ((rc = ops->alloc((size_t)V * sizeof(float), &dlg))) return rc;
    if (s) {
        cap.probs_slots = c->capacity;
        if ((rc = ops->alloc((size_t)cf->n_layers * cf->n_heads * c->capacity * sizeof(float),
                             &dp))) {
            ops->release(dlg);
            return rc;
        }
        cap.probs = dp;
    }
    for (int i = 0; i < gen; i++) {
        out[i] = argmax(logits, V);
        rc = scdb_model_dev_forward(md, &out[i], NULL, 1, c, dlg, s ? &cap : NULL);
        if (!rc) rc = ops->download(logits, dlg, (size_t)V * sizeof(float));
        if (rc) break;
        if (s) {
            scdb_session_evict_result ev;
            if (c->n > *max_n) *max_n = c->n;
            if ((rc = scdb_session_step(s, cap.probs, cap.probs_slots, 1, &ev))) break;
            *evictions += ev.evicted;
            *evict_ns += ev.evict_ns;
        }
    }
    ops->release(dp);
    ops->release(dlg);
    return rc;
}

/* Is this continuation worth comparing?  At least three quarters printable
 * non-blank bytes and no run of three blanks: text, not indentation. */
static int inked(const int32_t *t, int n)
{
    int ink = 0, run = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        int blank = t[i] == ' ' || t[i] == '\t';
        ink += t[i] > ' ' && t[i] < 127;
        run = blank ? run + 1 : 0;
        if (run > longest) longest = run;
    }
    return 4 * ink >= 3 * n && longest < 3;
}

/* Where consumer `name`'s prefix starts in its text: from 48 KiB on (the
 * held-out text's second half, which calibration never reads) or 0 for a
 * short text, the first line start whose next `gen` bytes of text AND the
 * consumer's own greedy continuation are inked(): agreement over a run of
 * spaces says nothing.  At most 16 candidates are tried (each a prefill);
 * then the first line start whose text is inked. */
static size_t prefix_offset(const demo *d, const char *name, const unsigned char *t, size_t len)
{
    size_t need = (size_t)d->prefix + (size_t)d->gen;
    size_t start = len >= (48u << 10) + need ? 48u << 10 : 0, first = SIZE_MAX;
    char dir[1024], err[256];
    scdb_model *m = NULL;
    scdb_model_dev *md = NULL;
    scdb_kv_cache *c = NULL;
    float *lg = NULL;
    int32_t *tok = NULL, *out = NULL;
    int tried = 0;

    snprintf(dir, sizeof dir, "%s/models/%s", d->data, name);
    if (scdb_model_load(dir, &m, err, sizeof err) ||
        scdb_model_dev_new(m, SCDB_DEV_CPU, &md) ||
        scdb_model_cache_new(m, (int)need, &c)) goto done;
    lg = malloc((size_t)d->prefix * scdb_model_cfg(m)->vocab_size * sizeof *lg);
    tok = malloc(need * sizeof *tok);
    out = malloc((size_t)d->gen * sizeof *out);
    if (!lg || !tok || !out) goto done;
    for (size_t p = start; p + need <= len && tried < 16; p++) {
        if (p > start && t[p - 1] != '\n') continue;
        scdb_tokenize_bytes(t + p, need, tok);
        if (!inked(tok + d->prefix, d->gen)) continue;
        if (first == SIZE_MAX) first = p;
        tried++;
        c->n = 0;
        int V = scdb_model_cfg(m)->vocab_size;
        if (scdb_model_forward(m, tok, NULL, d->prefix, c, lg, NULL)) break;
        memmove(lg, lg + (size_t)(d->prefix - 1) * V, (size_t)V * sizeof *lg);
        if (generate(md, c, lg, d->gen, out, NULL, NULL, NULL, NULL)) break;
        if (inked(out, d->gen)) {
            first = p;
            break;
        }
    }
done:
    free(lg);
    free(tok);
    free(out);
    scdb_kv_cache_free(&c);
    scdb_model_dev_free(&md);
    scdb_model_free(&m);
    return first == SIZE_MAX ? start : first;
}

/* prefix_offset in a child process: the parent forks the broker and the
 * consumers, so it runs no model (and starts no BLAS threads) itself. */
static size_t pick_offset(const demo *d, const char *name, const unsigned char *t, size_t len)
{
    int fd[2];
    size_t off = 0;
    pid_t p;

    if (pipe(fd)) return 0;
    fflush(stdout);
    p = fork();
    if (p == 0) {
        size_t o = prefix_offset(d, name, t, len);
        close(fd[0]);
        _exit(write(fd[1], &o, sizeof o) == (ssize_t)sizeof o ? 0 : 1);
    }
    close(fd[1]);
    if (p > 0 && read(fd[0], &off, sizeof off) != (ssize_t)sizeof off) off = 0;
    close(fd[0]);
    if (p > 0)
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {}
    return off;
}

/* ------------------------------------------------------------ producer */

static int producer(const demo *d)
{
    char dir[1024], err[512];
    scdb_model *m = NULL;
    scdb_kv_cache *kv = NULL;
    scdb_arena *states = NULL;
    scdb *h = NULL, *hr = NULL;
    scdb_capture cap = {0};
    int rc = 1;
    scdb_err e;

    snprintf(dir, sizeof dir, "%s/models/base", d->data);
    if ((e = scdb_model_load(dir, &m, err, sizeof err))) {
        fprintf(stderr, "producer: %s (%s)\n", err, scdb_strerror(e));
        goto done;
    }
    if ((e = connect_retry(d->sock, &h)) ||
        (e = scdb_register(h, SCDB_PRODUCER, "base", "base-scd", NULL)) ||
        (e = scdb_states_arena_new(h, d->prefix, &states)) ||
        (e = connect_retry(d->sock, &hr)) ||
        (e = scdb_register(hr, SCDB_PRODUCER, "base", "raw/base", NULL))) {
        scdb *bad = hr ? hr : h;
        fprintf(stderr, "producer: broker: %s (%s)\n", bad ? scdb_last_error(bad) : "",
                scdb_strerror(e));
        goto done;
    }
    const scdb_info *info = scdb_get_info(h);
    /* the producer's prefill writes its states (H_in of every layer) straight
     * into the shared-memory arena; the broker encodes them with the
     * codebook: the prefix is stored once, for every consumer */
    cap.h_in = scdb_arena_states(states, NULL, NULL, NULL);
    if ((e = scdb_model_cache_new(m, d->prefix, &kv))) goto done;
    double t0 = scdb_now();
    if ((e = scdb_model_forward(m, d->tokens, NULL, d->prefix, kv, NULL, &cap))) {
        fprintf(stderr, "producer: prefill: %s\n", scdb_strerror(e));
        goto done;
    }
    double t_prefill = scdb_now() - t0;
    scdb_put_result pr, rr;
    t0 = scdb_now();
    e = scdb_put_states(h, d->tokens, (size_t)d->prefix, 0, states, &pr);
    double t_put = scdb_now() - t0;
    if (e) {
        fprintf(stderr, "producer: put_states: %s (%s)\n", scdb_last_error(h), scdb_strerror(e));
        goto done;
    }
    if (pr.n_stored * info->block_tokens != (unsigned)d->prefix) {
        fprintf(stderr, "producer: the broker stored %u blocks of %u tokens, not the %d-token "
                "prefix\n", pr.n_stored, info->block_tokens, d->prefix);
        goto done;
    }
    /* base's raw KV: what a cache keyed without the adapter serves */
    if ((e = scdb_put_cache(hr, d->tokens, (size_t)d->prefix, kv, &rr))) {
        fprintf(stderr, "producer: put raw KV: %s (%s)\n", scdb_last_error(hr), scdb_strerror(e));
        goto done;
    }
    printf("producer base: prefilled %d tokens in %.1f ms (states captured into shared memory); "
           "broker encoded and stored %u blocks of %u tokens (%llu B/token of %s codes) in %.1f ms, "
           "once for the whole fleet\n",
           d->prefix, t_prefill * 1e3, pr.n_new, info->block_tokens,
           (unsigned long long)(info->block_bytes / info->block_tokens), d->int8 ? "int8" : "f16",
           t_put * 1e3);
    d->store->blocks = pr.n_stored;
    d->store->block_tokens = info->block_tokens;
    d->store->block_bytes = info->block_bytes;
    d->store->ok = 1;
    fflush(stdout);
    rc = 0;
done:
    scdb_arena_free(&states);
    scdb_close(&h);
    scdb_close(&hr);
    scdb_kv_cache_free(&kv);
    scdb_model_free(&m);
    return rc;
}

/* ------------------------------------------------------------ consumer */

/* Teacher-forced scoring: n rows of logits lg (host) against the reference
 * log-probabilities ref: top-1 agreement, the text's nll (next[i] the token
 * after row i) and KL(ref || lg), summed into *agree, *nll, *kl. */
static void score(const float *lg, const float *ref, const int32_t *next, int n, int V, float *lp,
                  double *agree, double *nll, double *kl)
{
    for (int t = 0; t < n; t++) {
        const float *o = ref + (size_t)t * V;
        scdb_k_log_softmax_cpu(lg + (size_t)t * V, V, lp);
        int ao = 0, am = 0;
        double k = 0.0;
        for (int v = 0; v < V; v++) {
            k += exp((double)o[v]) * ((double)o[v] - lp[v]);
            if (o[v] > o[ao]) ao = v;
            if (lp[v] > lp[am]) am = v;
        }
        *agree += ao == am;
        *nll -= lp[next[t]];
        *kl += k;
    }
}

/* The text's gen tokens after the prefix, teacher-forced over cache c
 * (which holds the prefix, n == prefix): logits into host rows out. */
static scdb_err continue_text(const demo *d, scdb_model_dev *md, scdb_kv_cache *c, void *dlg,
                              float *out)
{
    const scdb_k_ops *ops = scdb_model_dev_ops(md);
    int V = scdb_model_cfg(scdb_model_dev_model(md))->vocab_size;
    scdb_err e = scdb_model_dev_forward(md, d->tokens + d->prefix, NULL, d->gen, c, dlg, NULL);
    if (!e) e = ops->download(out, dlg, (size_t)d->gen * V * sizeof(float));
    return e;
}

/* A handle registered as consumer `name` of codebook cb, and an arena. */
static scdb_err consumer_handle(const demo *d, const char *name, const char *cb, int slots,
                                scdb **h, scdb_arena **a)
{
    scdb_err e;
    if ((e = connect_retry(d->sock, h)) || (e = scdb_register(*h, SCDB_CONSUMER, name, cb, NULL)) ||
        (e = d->dev == SCDB_DEV_CUDA ? scdb_arena_new_cuda(*h, slots, a) : scdb_arena_new(*h, slots, a)))
        fprintf(stderr, "consumer %s: broker (%s): %s (%s)\n", name, cb, *h ? scdb_last_error(*h) : "",
                scdb_strerror(e));
    return e;
}

static int consumer(const demo *d, const char *name)
{
    int me = 0;
    while (me < d->n_consumers - 1 && strcmp(d->names[me], name)) me++;
    const int32_t *tokens = d->tokens;
    dres *out = &d->res[me];
    char err[512];
    scdb_model *m = NULL;
    scdb_model_dev *md = NULL;
    const scdb_k_ops *ops = NULL;
    scdb_kv_cache *own = NULL, *full = NULL;
    scdb *h = NULL, *hr = NULL;
    scdb_arena *arena = NULL, *raw_arena = NULL;
    scdb_session *sess = NULL;
    scdb_capture cap = {0};
    float *lg = NULL, *lg0 = NULL, *ref = NULL, *rows = NULL, *lp = NULL;
    void *dlg = NULL, *dprobs = NULL;     /* the device's: logits, attention */
    int32_t *gen_own = NULL, *gen_full = NULL, *gen_live = NULL;
    int rc = 1, evictions = 0, max_n = 0;
    uint64_t evict_ns = 0;
    scdb_err e;

    if ((e = scdb_model_load(d->dirs[me], &m, err, sizeof err))) {
        fprintf(stderr, "consumer %s: %s (%s)\n", name, err, scdb_strerror(e));
        goto done;
    }
    out->lora = !strcmp(scdb_model_cfg(m)->finetune, "lora");
    /* the model where the arena lives: the CPU table is the host forward */
    if ((e = scdb_model_dev_new(m, d->dev, &md))) {
        fprintf(stderr, "consumer %s: cannot put the model on the %s: %s\n", name,
                scdb_device_name(d->dev), scdb_strerror(e));
        goto done;
    }
    ops = scdb_model_dev_ops(md);
    const scdb_model_config *c = scdb_model_cfg(m);
    int V = c->vocab_size, cap_slots = d->prefix + d->gen;
    size_t rows_n = (size_t)d->gen * V;
    lg = malloc((size_t)V * sizeof *lg);
    lg0 = malloc((size_t)V * sizeof *lg0);
    lp = malloc((size_t)V * sizeof *lp);
    ref = malloc(rows_n * sizeof *ref);
    rows = malloc(rows_n * sizeof *rows);
    gen_own = malloc((size_t)d->gen * sizeof *gen_own);
    gen_full = malloc((size_t)d->gen * sizeof *gen_full);
    gen_live = malloc((size_t)d->gen * sizeof *gen_live);
    if (!lg || !lg0 || !lp || !ref || !rows || !gen_own || !gen_full || !gen_live) goto done;
    if ((e = ops->alloc((size_t)d->prefix * V * sizeof(float), &dlg))) goto done;

    /* reference: the consumer prefills the prefix itself (the first
     * token's logits are the last prefix token's), then the text's next
     * tokens over its own cache, then its greedy continuation */
    if ((e = scdb_model_dev_cache_new(md, cap_slots, &own))) goto done;
    double t0 = scdb_now();
    if ((e = scdb_model_dev_forward(md, tokens, NULL, d->prefix, own, dlg, NULL)) ||
        (e = ops->download(lg, (float *)dlg + (size_t)(d->prefix - 1) * V, (size_t)V * 4)))
        goto done;
    double ttft_own = scdb_now() - t0;
    if ((e = continue_text(d, md, own, dlg, rows))) goto done;
    for (int i = 0; i < d->gen; i++)
        scdb_k_log_softmax_cpu(rows + (size_t)i * V, V, ref + (size_t)i * V);
    double own_nll = 0, own_agree = 0, own_kl = 0;
    score(rows, ref, tokens + d->prefix + 1, d->gen, V, lp, &own_agree, &own_nll, &own_kl);
    own->n = d->prefix;
    if ((e = generate(md, own, lg, d->gen, gen_own, NULL, NULL, NULL, NULL))) goto done;

    /* via scdb: lookup + get into the broker-made arena, then the first
     * token's logits by re-running the last prefix token over the decoded
     * cache (its attention kept for the live session's statistics) */
    if ((e = consumer_handle(d, name, "base-scd", cap_slots, &h, &arena))) goto done;
    scdb_kv_cache *kv = d->dev == SCDB_DEV_CUDA ? scdb_arena_cache_device(arena, NULL)
                                                : scdb_arena_cache(arena);
    cap.probs_slots = cap_slots;
    if ((e = ops->alloc((size_t)c->n_layers * c->n_heads * d->prefix * cap_slots * sizeof(float),
                        &dprobs)))
        goto done;
    cap.probs = dprobs;
    scdb_lookup_result lr;
    scdb_get_result gr;
    t0 = scdb_now();
    if ((e = scdb_lookup(h, tokens, (size_t)d->prefix, &lr)) ||
        (e = scdb_get(h, tokens, (size_t)d->prefix, arena, 0, 0, &gr))) {
        fprintf(stderr, "consumer %s: get: %s (%s)\n", name, scdb_last_error(h), scdb_strerror(e));
        goto done;
    }
    int have = (int)gr.tokens_written;
    if (have == 0) { fprintf(stderr, "consumer %s: nothing stored for the prefix\n", name); goto done; }
    /* keep have-1 slots, re-run token have-1 (and prefill any uncached suffix) */
    kv->n = have - 1;
    int rest = d->prefix - (have - 1);
    e = scdb_model_dev_forward(md, tokens + have - 1, NULL, rest, kv, dlg, &cap);
    if (!e) e = ops->download(lg0, (float *)dlg + (size_t)(rest - 1) * V, (size_t)V * 4);
    double ttft_scdb = scdb_now() - t0;
    if (e) goto done;

    /* SCD: the text's next tokens over a private copy of the decoded prefix */
    double agree = 0, nll = 0, kl = 0;
    if ((e = scdb_model_dev_cache_new(md, cap_slots, &full)) ||
        (e = ops->dcopy(full->mem, kv->mem, scdb_kv_cache_bytes(kv->n_layers, kv->n_kv_heads,
                                                                kv->head_dim, kv->capacity))))
        goto done;
    full->n = kv->n;
    if ((e = continue_text(d, md, full, dlg, rows))) goto done;
    score(rows, ref, tokens + d->prefix + 1, d->gen, V, lp, &agree, &nll, &kl);
    full->n = d->prefix;
    memcpy(lg, lg0, (size_t)V * sizeof *lg);
    if ((e = generate(md, full, lg, d->gen, gen_full, NULL, NULL, NULL, NULL))) goto done;

    /* raw reuse: base's KV as is, from the broker (raw/base) */
    double r_agree = 0, r_nll = 0, r_kl = 0;
    scdb_get_result rg;
    if ((e = consumer_handle(d, name, "raw/base", cap_slots, &hr, &raw_arena))) goto done;
    if ((e = scdb_get(hr, tokens, (size_t)d->prefix, raw_arena, 0, 0, &rg)) ||
        rg.tokens_written != (uint64_t)d->prefix) {
        fprintf(stderr, "consumer %s: raw get: %s (%s), %llu tokens\n", name, scdb_last_error(hr),
                scdb_strerror(e), (unsigned long long)rg.tokens_written);
        if (!e) e = SCDB_ENOTFOUND;
        goto done;
    }
    scdb_kv_cache *rkv = d->dev == SCDB_DEV_CUDA ? scdb_arena_cache_device(raw_arena, NULL)
                                                 : scdb_arena_cache(raw_arena);
    rkv->n = d->prefix;
    if ((e = continue_text(d, md, rkv, dlg, rows))) goto done;
    score(rows, ref, tokens + d->prefix + 1, d->gen, V, lp, &r_agree, &r_nll, &r_kl);
    scdb_arena_free(&raw_arena);
    scdb_close(&hr);

    /* a greedy continuation in the arena, through a live session at the
     * budget (on a CUDA arena the statistics fold on the GPU: probs stay
     * there) */
    scdb_session_opts so = {.budget = (uint32_t)d->budget, .policy = d->policy,
                            .cadence = (uint32_t)d->cadence, .n_heads = c->n_heads};
    if ((e = scdb_session_open(arena, &so, &sess)) ||
        (e = scdb_session_add_stats(sess, cap.probs, cap.probs_slots, rest))) {
        fprintf(stderr, "consumer %s: live session: %s (%s)\n", name, scdb_last_error(h),
                scdb_strerror(e));
        goto done;
    }
    max_n = kv->n;
    memcpy(lg, lg0, (size_t)V * sizeof *lg);
    if ((e = generate(md, kv, lg, d->gen, gen_live, sess, &evictions, &max_n, &evict_ns))) {
        fprintf(stderr, "consumer %s: live session: %s (%s)\n", name, scdb_last_error(h),
                scdb_strerror(e));
        goto done;
    }
    int same_full = 0, same_live = 0;
    for (int i = 0; i < d->gen; i++) {
        same_full += gen_own[i] == gen_full[i];
        same_live += gen_own[i] == gen_live[i];
    }

    out->ttft_own = ttft_own * 1e3;
    out->ttft_scdb = ttft_scdb * 1e3;
    out->decode_ms = (double)gr.decode_ns * 1e-6;
    out->top1 = agree / d->gen;
    out->ppl_ratio = exp((nll - own_nll) / d->gen);
    out->kl = kl / d->gen;
    out->raw_top1 = r_agree / d->gen;
    out->raw_ppl_ratio = exp((r_nll - own_nll) / d->gen);
    out->raw_kl = r_kl / d->gen;
    out->same_full = same_full;
    out->same_live = same_live;
    out->evictions = evictions;
    out->max_n = max_n;
    printf("| %s | %s | %.0f | %.1f ms | %.1f ms (decode %.1f ms) | %.1fx | %.3f, %+.1f%% | "
           "%.3f, %+.1f%% | %.1fx | %d/%d | %d/%d (%d evictions, <= %d slots, %.0f us each) |\n",
           name, out->lora ? "lora" : "full", (double)d->pair_bytes[me] / 1024, out->ttft_own,
           out->ttft_scdb, out->decode_ms, out->ttft_own / out->ttft_scdb, out->top1,
           (out->ppl_ratio - 1) * 100, out->raw_top1, (out->raw_ppl_ratio - 1) * 100,
           out->kl > 0 ? out->raw_kl / out->kl : INFINITY, same_full, d->gen, same_live, d->gen,
           evictions, max_n, evictions ? (double)evict_ns / 1e3 / evictions : 0.0);
    fflush(stdout);
    out->ok = 1;
    rc = 0;
done:
    scdb_session_close(&sess);
    scdb_arena_free(&raw_arena);
    scdb_arena_free(&arena);
    scdb_close(&hr);
    scdb_close(&h);
    scdb_model_dev_cache_free(md, &own);
    scdb_model_dev_cache_free(md, &full);
    if (ops) {
        ops->release(dprobs);
        ops->release(dlg);
    }
    scdb_model_dev_free(&md);
    scdb_model_free(&m);
    free(lg); free(lg0); free(lp); free(ref); free(rows);
    free(gen_own); free(gen_full); free(gen_live);
    return rc;
}

/* ------------------------------------------------------------ main */

static int run_child(int (*fn)(const demo *, const char *), const demo *d, const char *arg)
{
    fflush(stdout);
    pid_t p = fork();
    if (p < 0) return 1;
    if (p == 0) _exit(fn(d, arg));
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int producer_fn(const demo *d, const char *unused) { (void)unused; return producer(d); }

static int cmp_name(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* The sorted names of the directories under root holding file `marker`. */
static int list_models(const char *root, const char *marker, char (*out)[NAME_MAX_LEN], int max)
{
    DIR *dh = opendir(root);
    struct dirent *de;
    int n = 0;
    if (!dh) return 0;
    while ((de = readdir(dh)) && n < max) {
        char p[1400];
        if (de->d_name[0] == '.' || strlen(de->d_name) >= NAME_MAX_LEN) continue;
        snprintf(p, sizeof p, "%s/%s/%s", root, de->d_name, marker);
        if (access(p, R_OK)) continue;
        snprintf(out[n++], NAME_MAX_LEN, "%.127s", de->d_name);
    }
    closedir(dh);
    qsort(out, (size_t)n, sizeof *out, cmp_name);
    return n;
}

/* The fleet: DATA/models/<x> (but the producer) and DATA/adapters/<x> with
 * a pair base__<x>; the rest into skipped. */
static int find_fleet(demo *d)
{
    static char found[MAX_CONSUMERS][NAME_MAX_LEN];
    const char *sub[2] = {"models", "adapters"}, *marker[2] = {"config.json", "adapter_config.json"};
    for (int s = 0; s < 2; s++) {
        char root[1100];
        snprintf(root, sizeof root, "%.900s/%s", d->data, sub[s]);
        int n = list_models(root, marker[s], found, MAX_CONSUMERS);
        for (int i = 0; i < n; i++) {
            char pair[1400];
            struct stat st;
            if (s == 0 && !strcmp(found[i], "base")) continue;
            snprintf(pair, sizeof pair, "%.900s/pairs/base__%.127s.safetensors", d->data, found[i]);
            if (stat(pair, &st)) {
                if (d->n_skipped < MAX_CONSUMERS) memcpy(d->skipped[d->n_skipped++], found[i], NAME_MAX_LEN);
                continue;
            }
            if (d->n_consumers == MAX_CONSUMERS) return -1;
            int k = d->n_consumers++;
            memcpy(d->names[k], found[i], NAME_MAX_LEN);
            snprintf(d->dirs[k], sizeof d->dirs[k], "%.950s/%.127s", root, found[i]);
            d->is_adapter[k] = s == 1;
            d->pair_bytes[k] = (long long)st.st_size;
        }
    }
    return 0;
}

/* The broker's config, as the packaged one: the specialists named, the
 * adapters by a [consumers] glob (their base found in models_dir), each
 * with its SCD pair; raw-reuse pairs for the comparison. */
static int write_config(demo *d)
{
    FILE *f = fopen(d->cfg, "w");
    if (!f) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/store\nblock_tokens = 64\n"
               "log_level = warn\nheartbeat_timeout_ms = 5000\ndevice = %s\nmodels_dir = %s/models\n\n",
            d->sock, d->tmp, scdb_device_pref_name(d->device), d->data);
    fprintf(f, "[model base]\nconfig = %s/models/base/config.json\n\n", d->data);
    for (int i = 0; i < d->n_consumers; i++)
        if (!d->is_adapter[i])
            fprintf(f, "[model %s]\nconfig = %s/config.json\n\n", d->names[i], d->dirs[i]);
    fprintf(f, "[policy distillcache]\nfile = %s/policies/distillcache_base.safetensors\n\n",
            d->data);
    fprintf(f, "[codebook base-scd]\nkind = scd\nmodel = base\ncodes_dtype = %s\n"
               "file = %s/codebooks/base.safetensors\n\n", d->int8 ? "int8" : "f16", d->data);
    for (int i = 0; i < d->n_consumers; i++)
        if (!d->is_adapter[i])
            fprintf(f, "[pair base-scd %s]\ndecoder = scd\nfile = %s/pairs/base__%s.safetensors\n\n"
                       "[pair raw/base %s]\ndecoder = raw\n\n",
                    d->names[i], d->data, d->names[i], d->names[i]);
    fprintf(f, "[consumers fleet]\ndirs = %s/adapters/*\ncodebook = base-scd\ndecoder = scd\n"
               "file = %s/pairs/base__{name}.safetensors\n\n", d->data, d->data);
    fprintf(f, "[consumers fleet-raw]\ndirs = %s/adapters/*\ncodebook = raw/base\ndecoder = raw\n",
            d->data);
    return fclose(f);
}

int cli_cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'}, {"prefix", required_argument, 0, 'p'},
        {"gen", required_argument, 0, 'g'}, {"text", required_argument, 0, 't'},
        {"budget", required_argument, 0, 'b'}, {"policy", required_argument, 0, 'P'},
        {"cadence", required_argument, 0, 'c'}, {"device", required_argument, 0, 'D'},
        {"codes", required_argument, 0, 'C'}, {"engine", required_argument, 0, 'E'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    static demo d;
    const char *text_path = NULL;
    char path[1100], *text = NULL;
    size_t len = 0;
    pid_t broker = -1;
    int c, rc = 1;

    memset(&d, 0, sizeof d);
    d.data = cli_data_dir();
    d.prefix = 384;
    d.gen = 64;
    d.budget = -1;
    d.cadence = 8;
    d.int8 = 1;
    d.policy = "distillcache";
    int engine_llama = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char why[160];
        scdb_err bad = SCDB_OK;
        switch (c) {
        case 'd': d.data = optarg; break;
        case 'p': bad = scdb_parse_int("--prefix", optarg, 64, 448, &d.prefix, why, sizeof why); break;
        case 'g': bad = scdb_parse_int("--gen", optarg, 1, 384, &d.gen, why, sizeof why); break;
        case 't': text_path = optarg; break;
        case 'b': bad = scdb_parse_int("--budget", optarg, 1, 1024, &d.budget, why, sizeof why); break;
        case 'P': d.policy = optarg; break;
        case 'c': bad = scdb_parse_int("--cadence", optarg, 0, INT_MAX, &d.cadence, why, sizeof why); break;
        case 'C':
            if (strcmp(optarg, "int8") && strcmp(optarg, "f16")) {
                fprintf(stderr, "scdb demo: --codes wants int8 or f16, not '%s'\n", optarg);
                usage(stderr);
                return 2;
            }
            d.int8 = !strcmp(optarg, "int8");
            break;
        case 'D':
            if (scdb_device_parse(optarg, &d.device)) {
                fprintf(stderr, "scdb demo: --device wants auto, cpu or cuda, not '%s'\n", optarg);
                usage(stderr);
                return 2;
            }
            break;
        case 'E':
            if (!strcmp(optarg, "llama.cpp")) {
                engine_llama = 1;
            } else if (!strcmp(optarg, "reference")) {
                engine_llama = 0;
            } else {
                fprintf(stderr, "scdb demo: --engine wants llama.cpp or reference, not '%s'\n", optarg);
                usage(stderr);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "scdb demo: %s\n", why);
            return 2;
        }
    }
    if (optind < argc || d.prefix % 64 || d.prefix + d.gen + 1 > 512 || d.gen > d.prefix) {
        fprintf(stderr, "scdb demo: --prefix must be a multiple of 64, --gen at most --prefix, "
                        "and prefix + gen + 1 <= 512 (the models' positions)\n");
        usage(stderr);
        return 2;
    }
    if (d.budget < 0) d.budget = d.prefix / 2;
    if (d.budget < 1 || d.budget > d.prefix + d.gen || d.cadence < 0) {
        fprintf(stderr, "scdb demo: --budget must be 1 .. prefix + gen, --cadence >= 0\n");
        usage(stderr);
        return 2;
    }
    {
        char why[384];
        if (scdb_device_resolve(d.device, &d.dev, why, sizeof why)) {
            fprintf(stderr, "scdb demo: %s\n", why);
            return 1;
        }
        fprintf(stderr, "scdb demo: device %s (%s)\n", scdb_device_name(d.dev), why);
        /* the broker on the same device: CUDA IPC arenas need it there */
        d.device = d.dev == SCDB_DEV_CUDA ? SCDB_DEVPREF_CUDA : SCDB_DEVPREF_CPU;
    }
    if (find_fleet(&d)) {
        fprintf(stderr, "scdb demo: more than %d consumers under %s\n", MAX_CONSUMERS, d.data);
        return 1;
    }
    if (d.n_consumers == 0) { fprintf(stderr, "scdb demo: no pairs under %s/pairs\n", d.data); return 1; }
    d.res = mmap(NULL, sizeof(dres) * MAX_CONSUMERS + sizeof(dstore), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (d.res == MAP_FAILED) { d.res = NULL; perror("scdb demo: mmap"); return 1; }
    memset(d.res, 0, sizeof(dres) * MAX_CONSUMERS + sizeof(dstore));
    d.store = (dstore *)(d.res + MAX_CONSUMERS);

    {
        scdb_err e;
        const char *tp = text_path;
        size_t off, need = (size_t)d.prefix + (size_t)d.gen + 1;
        if (!tp) tp = scdb_model_heldout_path(d.data, "english", path, sizeof path);
        if ((e = scdb_read_file(tp, 64u << 20, &text, &len))) {
            fprintf(stderr, "scdb demo: %s: %s\n", tp, scdb_strerror(e));
            goto done;
        }
        if (len < need) {
            fprintf(stderr, "scdb demo: %s is too short (%zu bytes, the prefix and the scored "
                    "tokens take %zu)\n", tp, len, need);
            goto done;
        }
        off = pick_offset(&d, "base", (const unsigned char *)text, len - 1);
#ifndef SCDB_HAVE_LLAMA
        if (engine_llama) {
            fprintf(stderr, "scdb demo: this build has no llama.cpp (scripts/install-llama.sh, "
                            "then rebuild); --engine reference runs scdb's own engine\n");
            goto done;
        }
#else
        if (engine_llama) {
            /* the fan-out in llama.cpp: base in llama.cpp prefills and stores
             * the prefix once, every consumer restores it into its own
             * llama.cpp sequence (bench/bench_llama.c on this one prefix) */
            char at[32], pre[16], gen[16];
            snprintf(at, sizeof at, "%zu", off);
            snprintf(pre, sizeof pre, "%d", d.prefix);
            snprintf(gen, sizeof gen, "%d", d.gen < 64 ? d.gen : 64);
            char *bargv[] = {"llama", "--data", (char *)d.data, "--text", (char *)tp, "--at", at,
                             "--prefix", pre, "--cont", gen, "--windows", "1", "--reps", "3", NULL};
            printf("scdb demo (llama.cpp %s): one shared prefix, %d bytes of %s from byte %zu, "
                   "prefilled once by base in llama.cpp, restored by every consumer into its own "
                   "llama.cpp sequence; scored on the next %s tokens against its own prefill\n\n",
                   "v0.4.0", d.prefix, scdb_data_relative(tp), off, gen);
            fflush(stdout);
            rc = scdb_bench_llama((int)(sizeof bargv / sizeof bargv[0]) - 1, bargv);
            goto done;
        }
#endif
        d.tokens = malloc(need * sizeof *d.tokens);
        if (!d.tokens) goto done;
        scdb_tokenize_bytes(text + off, need, d.tokens);
        /* a data file is named relative to the data directory (the output
         * reads the same on every machine); --text as given */
        snprintf(d.source, sizeof d.source, "%s from byte %zu", scdb_data_relative(tp), off);
        free(text);
        text = NULL;
    }

    {
        const char *td = getenv("TMPDIR");
        snprintf(d.tmp, sizeof d.tmp, "%s/scdb-demo-XXXXXX", td && *td ? td : "/tmp");
    }
    if (!mkdtemp(d.tmp)) { perror("scdb demo: mkdtemp"); goto done; }
    snprintf(d.sock, sizeof d.sock, "ipc://%s/broker.sock", d.tmp);
    snprintf(d.cfg, sizeof d.cfg, "%s/broker.ini", d.tmp);
    if (write_config(&d) != 0) { perror("scdb demo: config"); goto done; }

    printf("scdb demo: data %s, broker on %s (store %s/store), producer base; the fleet, %d "
           "consumers:", d.data, d.sock, d.tmp, d.n_consumers);
    for (int i = 0; i < d.n_consumers; i++) printf(" %s", d.names[i]);
    printf("\n");
    if (d.n_skipped) {
        printf("skipped, no pair pairs/base__NAME.safetensors in the data directory:");
        for (int i = 0; i < d.n_skipped; i++) printf(" %s", d.skipped[i]);
        printf("\n");
    }
    printf("shared prefix: %d bytes of %s; each consumer is scored on the next %d and "
           "generates %d tokens greedily\n\n", d.prefix, d.source, d.gen, d.gen);
    fflush(stdout);
    {
        const char *args[] = {"--config", d.cfg, NULL};
        broker = scdb_bench_start_broker(args, NULL);
    }
    if (broker < 0) goto done;
    if (run_child(producer_fn, &d, NULL) != 0 || !d.store->ok) {
        fprintf(stderr, "scdb demo: producer failed\n");
        goto done;
    }
    printf("\n| consumer | kind | pair KB | TTFT own prefill | TTFT via scdb | speed-up | SCD top-1, ppl "
           "| raw reuse top-1, ppl | KL raw/SCD | same tokens, whole prefix | same tokens, live session (%s, "
           "budget %d, every %d) |\n|---|---|---|---|---|---|---|---|---|---|---|\n", d.policy, d.budget, d.cadence);
    rc = 0;
    for (int i = 0; i < d.n_consumers; i++)
        if (run_child(consumer, &d, d.names[i]) != 0 || !d.res[i].ok) {
            printf("| %s | FAILED (see above) |\n", d.names[i]);
            rc = 1;
        }
    {
        int n_ok = 0, n_lora = 0;
        double own = 0, via = 0;
        for (int i = 0; i < d.n_consumers; i++) {
            if (!d.res[i].ok) continue;
            n_ok++;
            n_lora += d.res[i].lora;
            own += d.res[i].ttft_own;
            via += d.res[i].ttft_scdb;
        }
        const dstore *s = d.store;
        double stored = (double)s->blocks * (double)s->block_bytes;
        /* base's f16 KV of the prefix: layers x K and V x kv dim x 2 bytes */
        scdb_model_config bc;
        snprintf(path, sizeof path, "%s/models/base/config.json", d.data);
        double raw_tok = 0;
        if (!scdb_model_config_load(path, &bc, NULL, 0))
            raw_tok = (double)bc.n_layers * 2 * scdb_model_kv_dim(&bc) * 2;
        double keyed = raw_tok * d.prefix * n_ok;
        printf("\nfleet: %d consumers served (%d LoRA adapters, %d full fine-tunes) from one stored "
               "prefix: %.0f bytes stored once (%s codes, %.0f B/token) vs %.0f bytes for one raw f16 KV "
               "copy per consumer (per-adapter keying, %.0f B/token each): 1/%.1f; first token %.0f ms "
               "summed via scdb vs %.0f ms own prefills (%d prefills of %d tokens not run)\n",
               n_ok, n_lora, n_ok - n_lora, stored, d.int8 ? "int8" : "f16", stored / d.prefix, keyed,
               raw_tok, stored > 0 ? keyed / stored : 0.0, via, own, n_ok, d.prefix);
    }
    printf("consumers on the %s%s.\n", scdb_device_name(d.dev),
           d.dev == SCDB_DEV_CUDA ? " (CUDA IPC arenas; the broker decodes and evicts on the GPU)"
                                  : " (shared-memory arenas)");
    printf("TTFT via scdb = lookup + get (broker decodes the stored codes into this consumer's\n"
           "arena) + re-running the last prefix token; own = prefill of the prefix.  top-1 = the\n"
           "consumer's next-token argmax agreeing with its own prefill's over the text's next\n"
           "tokens (teacher-forced); ppl relative to its own prefill's; raw reuse = base's KV as\n"
           "is (what a cache keyed without the adapter serves).  same tokens = greedy tokens\n"
           "equal to the own-prefill continuation's, position by position (one early divergence\n"
           "shifts everything after it): from a copy of the whole decoded prefix, and in the\n"
           "arena through a live session the broker keeps within the budget (us = broker time\n"
           "per eviction).\n");
done:
    free(text);
    if (broker > 0 && scdb_bench_stop_broker(broker, SIGTERM) != 0) {
        fprintf(stderr, "scdb demo: broker exited abnormally\n");
        rc = 1;
    }
    if (d.tmp[0] && strstr(d.tmp, "/scdb-demo-") && scdb_rm_tree(d.tmp))
        fprintf(stderr, "scdb demo: could not remove %s\n", d.tmp);
    free(d.tokens);
    if (d.res) munmap(d.res, sizeof(dres) * MAX_CONSUMERS + sizeof(dstore));
    printf("%s\n", rc == 0 ? "demo: ok" : "demo: FAILED");
    return rc;
}
