/* cmd_demo.c — `scdb demo`: the fan-out demo, end to end on the bundled
 * model family.
 *
 *   1. a broker process (this binary's `serve`) on a private temp dir: ipc
 *      socket and LMDB store there, the base codebook and one pair per
 *      specialist loaded from the config the demo writes;
 *   2. a producer process: `base` prefills a shared prefix, capturing its
 *      states into a shared-memory arena, and has the broker encode them
 *      with the codebook and store the codes (scdb_put_states);
 *   3. one consumer process per specialist, one after the other (so their
 *      timings do not share the two cores): its own prefill of the prefix as
 *      the reference, then lookup + get of the prefix into a broker-owned
 *      arena (shared memory; with --device cuda a CUDA IPC arena the broker
 *      decodes into on its GPU, the consumer's model running there through
 *      scdb_model_dev and its live session folding on the device) (decoded
 *      into its own KV space), the last prefix
 *      token re-run for the first logits, and two greedy continuations: one
 *      from the whole decoded prefix, one in the arena through a live
 *      session that keeps it within a slot budget with the learned eviction
 *      policy (the broker evicts every few tokens); it prints time to first
 *      token both ways, payload vs raw KV, and each continuation's agreement
 *      with its own-prefill one;
 *   4. SIGTERM to the broker, cleanup, exit 0 (1 if any step failed). */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec.h"
#include "model.h"
#include "scdb.h"
#include "bench.h"
#include "scdb_cli.h"

#define MAX_CONSUMERS 8

typedef struct demo {
    const char *data;
    char tmp[256], sock[320], cfg[320];
    const char *consumers[MAX_CONSUMERS];
    int n_consumers;
    int prefix, gen;
    int budget, cadence;  /* live session */
    const char *policy;
    scdb_device_pref device;  /* what the broker gets (the resolved device) */
    scdb_device dev;          /* where the consumers run: CPU or CUDA */
    /* consumer i continues a prefix of its own domain's held-out text (or of
     * --text): its tokens, where they come from */
    int32_t *tokens[MAX_CONSUMERS];
    char source[MAX_CONSUMERS][300];
} demo;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb demo [--data DIR] [--prefix N] [--gen N] [--text FILE]\n"
            "                 [--budget N] [--policy NAME] [--cadence N] [--device D]\n\n"
            "The fan-out demo: starts a broker on a private temp dir, a producer\n"
            "process (base) that prefills a shared prefix and puts it as SCD codes,\n"
            "and one consumer process per specialist that gets the prefix decoded\n"
            "into its own KV space and continues it; prints per consumer the time\n"
            "to first token via scdb vs its own prefill, payload vs raw f16 KV,\n"
            "and agreement with its own-prefill continuation; then shuts down.\n\n"
            "  --data DIR     assets (default %s): models/, codebooks/base.safetensors,\n"
            "                 pairs/base__<consumer>.safetensors\n"
            "  --prefix N     prefix tokens, a multiple of 64 (default 384)\n"
            "  --gen N        tokens each consumer generates (default 32)\n"
            "  --text FILE    prefix text for every consumer (default: each consumer's\n"
            "                 own domain, DIR/heldout/<domain>.txt, from 48 KiB on, the\n"
            "                 first line start whose continuation is mostly not blank)\n"
            "  --budget N     live session: slots kept (default prefix / 2)\n"
            "  --policy NAME  live session: distillcache (DIR/policies/distillcache_base),\n"
            "                 full, streaming, h2o, snapkv or tova (default distillcache)\n"
            "  --cadence N    live session: evict every N generated tokens (default 8)\n"
            "  --device D     auto | cpu | cuda (default auto: CUDA when a device answers).\n"
            "                 On cuda the broker decodes into CUDA IPC arenas and the\n"
            "                 consumers run their model and live session on the GPU (the\n"
            "                 producer stays on the CPU: it captures into shared memory)\n"
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

static void show(const int32_t *t, int n, char *buf)
{
    int j = 0;
    for (int i = 0; i < n; i++) {
        int ch = t[i];
        buf[j++] = (ch >= 32 && ch < 127) ? (char)ch : (ch == '\n' ? '|' : '.');
    }
    buf[j] = '\0';
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
    scdb *h = NULL;
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
        (e = scdb_states_arena_new(h, d->prefix, &states))) {
        fprintf(stderr, "producer: broker: %s (%s)\n", h ? scdb_last_error(h) : "", scdb_strerror(e));
        goto done;
    }
    const scdb_info *info = scdb_get_info(h);
    /* the producer's prefill writes its states (H_in of every layer) straight
     * into the shared-memory arena; the broker encodes them with the codebook.
     * One prefix per consumer domain (the same prefix once) */
    cap.h_in = scdb_arena_states(states, NULL, NULL, NULL);
    if ((e = scdb_model_cache_new(m, d->prefix, &kv))) goto done;
    for (int i = 0; i < d->n_consumers; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= !strcmp(d->source[i], d->source[j]);
        if (dup) continue;
        kv->n = 0;
        double t0 = scdb_now();
        if ((e = scdb_model_forward(m, d->tokens[i], NULL, d->prefix, kv, NULL, &cap))) {
            fprintf(stderr, "producer: prefill: %s\n", scdb_strerror(e));
            goto done;
        }
        double t_prefill = scdb_now() - t0;
        scdb_put_result pr;
        t0 = scdb_now();
        e = scdb_put_states(h, d->tokens[i], (size_t)d->prefix, 0, states, &pr);
        double t_put = scdb_now() - t0;
        if (e) {
            fprintf(stderr, "producer: put_states: %s (%s)\n", scdb_last_error(h),
                    scdb_strerror(e));
            goto done;
        }
        printf("producer base: prefilled %d tokens of %s in %.1f ms (states captured into "
               "shared memory); broker encoded and stored %u blocks of %u tokens (%llu B/token "
               "of codes) in %.1f ms\n",
               d->prefix, d->source[i], t_prefill * 1e3, pr.n_new, info->block_tokens,
               (unsigned long long)(info->block_bytes / info->block_tokens), t_put * 1e3);
    }
    fflush(stdout);
    rc = 0;
done:
    scdb_arena_free(&states);
    scdb_close(&h);
    scdb_kv_cache_free(&kv);
    scdb_model_free(&m);
    return rc;
}

/* ------------------------------------------------------------ consumer */

static int consumer(const demo *d, const char *name)
{
    int me = 0;
    while (me < d->n_consumers - 1 && strcmp(d->consumers[me], name)) me++;
    const int32_t *tokens = d->tokens[me];
    char dir[1024], err[512], a[128], b[128], l[128];
    scdb_model *m = NULL;
    scdb_model_dev *md = NULL;
    const scdb_k_ops *ops = NULL;
    scdb_kv_cache *own = NULL, *full = NULL;
    scdb *h = NULL;
    scdb_arena *arena = NULL;
    scdb_session *sess = NULL;
    scdb_capture cap = {0};
    float *lg = NULL, *lg0 = NULL;
    void *dlg = NULL, *dprobs = NULL;     /* the device's: logits, attention */
    int32_t *gen_own = NULL, *gen_scdb = NULL, *gen_live = NULL;
    int rc = 1, evictions = 0, max_n = 0;
    uint64_t evict_ns = 0;
    scdb_err e;

    snprintf(dir, sizeof dir, "%s/models/%s", d->data, name);
    if ((e = scdb_model_load(dir, &m, err, sizeof err))) {
        fprintf(stderr, "consumer %s: %s (%s)\n", name, err, scdb_strerror(e));
        goto done;
    }
    /* the model where the arena lives: the CPU table is the host forward */
    if ((e = scdb_model_dev_new(m, d->dev, &md))) {
        fprintf(stderr, "consumer %s: cannot put the model on the %s: %s\n", name,
                scdb_device_name(d->dev), scdb_strerror(e));
        goto done;
    }
    ops = scdb_model_dev_ops(md);
    const scdb_model_config *c = scdb_model_cfg(m);
    int V = c->vocab_size, cap_slots = d->prefix + d->gen;
    lg = malloc((size_t)V * sizeof *lg);
    lg0 = malloc((size_t)V * sizeof *lg0);
    gen_own = malloc((size_t)d->gen * sizeof *gen_own);
    gen_scdb = malloc((size_t)d->gen * sizeof *gen_scdb);
    gen_live = malloc((size_t)d->gen * sizeof *gen_live);
    if (!lg || !lg0 || !gen_own || !gen_scdb || !gen_live) goto done;
    if ((e = ops->alloc((size_t)d->prefix * V * sizeof(float), &dlg))) goto done;

    /* reference: the consumer prefills the prefix itself */
    if ((e = scdb_model_dev_cache_new(md, cap_slots, &own))) goto done;
    double t0 = scdb_now();
    if ((e = scdb_model_dev_forward(md, tokens, NULL, d->prefix, own, dlg, NULL)) ||
        (e = ops->download(lg, (float *)dlg + (size_t)(d->prefix - 1) * V, (size_t)V * 4)))
        goto done;
    double ttft_own = scdb_now() - t0;
    if ((e = generate(md, own, lg, d->gen, gen_own, NULL, NULL, NULL, NULL))) goto done;

    /* via scdb: lookup + get into the broker-made arena, then the first
     * token's logits by re-running the last prefix token over the decoded
     * cache (its attention kept for the live session's statistics) */
    if ((e = connect_retry(d->sock, &h)) ||
        (e = scdb_register(h, SCDB_CONSUMER, name, "base-scd", NULL)) ||
        (e = d->dev == SCDB_DEV_CUDA ? scdb_arena_new_cuda(h, cap_slots, &arena)
                                     : scdb_arena_new(h, cap_slots, &arena))) {
        fprintf(stderr, "consumer %s: broker: %s (%s)\n", name, h ? scdb_last_error(h) : "",
                scdb_strerror(e));
        goto done;
    }
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

    /* continuation 1: the whole decoded prefix (a private copy) */
    if ((e = scdb_model_dev_cache_new(md, cap_slots, &full)) ||
        (e = ops->dcopy(full->mem, kv->mem, scdb_kv_cache_bytes(kv->n_layers, kv->n_kv_heads,
                                                                kv->head_dim, kv->capacity))))
        goto done;
    full->n = kv->n;
    memcpy(lg, lg0, (size_t)V * sizeof *lg);
    if ((e = generate(md, full, lg, d->gen, gen_scdb, NULL, NULL, NULL, NULL))) goto done;

    /* continuation 2: in the arena, through a live session at the budget
     * (on a CUDA arena the statistics fold on the GPU: probs stay there) */
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

    int same = 0, same_live = 0;
    for (int i = 0; i < d->gen; i++) {
        same += gen_own[i] == gen_scdb[i];
        same_live += gen_own[i] == gen_live[i];
    }
    double raw_bytes = (double)c->n_layers * 2 * scdb_model_kv_dim(c) * 2;
    double code_bytes = (double)scdb_get_info(h)->block_bytes / scdb_get_info(h)->block_tokens;
    show(gen_own, d->gen, a);
    show(gen_scdb, d->gen, b);
    show(gen_live, d->gen, l);
    printf("| %s | %.1f ms | %.1f ms (decode %.1f ms) | %.1fx | %.0f B vs %.0f B (1/%.1f) | "
           "%d/%d | %d/%d (%d evictions, <= %d slots, %.0f us each) |\n",
           name, ttft_own * 1e3, ttft_scdb * 1e3, (double)gr.decode_ns * 1e-6,
           ttft_own / ttft_scdb, code_bytes, raw_bytes, raw_bytes / code_bytes, same, d->gen,
           same_live, d->gen, evictions, max_n,
           evictions ? (double)evict_ns / 1e3 / evictions : 0.0);
    printf("|   own prefill:  `%s` |\n|   via scdb:     `%s` |\n|   live session: `%s` |\n",
           a, b, l);
    fflush(stdout);
    rc = 0;
done:
    scdb_session_close(&sess);
    scdb_arena_free(&arena);
    scdb_close(&h);
    scdb_model_dev_cache_free(md, &own);
    scdb_model_dev_cache_free(md, &full);
    if (ops) {
        ops->release(dprobs);
        ops->release(dlg);
    }
    scdb_model_dev_free(&md);
    scdb_model_free(&m);
    free(lg); free(lg0);
    free(gen_own); free(gen_scdb); free(gen_live);
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

static int write_config(demo *d)
{
    FILE *f = fopen(d->cfg, "w");
    if (!f) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/store\nblock_tokens = 64\n"
               "log_level = warn\nheartbeat_timeout_ms = 5000\ndevice = %s\n\n", d->sock, d->tmp,
            scdb_device_pref_name(d->device));
    fprintf(f, "[model base]\nconfig = %s/models/base/config.json\n\n", d->data);
    for (int i = 0; i < d->n_consumers; i++)
        fprintf(f, "[model %s]\nconfig = %s/models/%s/config.json\n\n", d->consumers[i], d->data,
                d->consumers[i]);
    fprintf(f, "[policy distillcache]\nfile = %s/policies/distillcache_base.safetensors\n\n",
            d->data);
    fprintf(f, "[codebook base-scd]\nkind = scd\nmodel = base\nfile = %s/codebooks/base.safetensors\n\n",
            d->data);
    for (int i = 0; i < d->n_consumers; i++)
        fprintf(f, "[pair base-scd %s]\ndecoder = scd\nfile = %s/pairs/base__%s.safetensors\n\n",
                d->consumers[i], d->data, d->consumers[i]);
    return fclose(f);
}

int cli_cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'}, {"prefix", required_argument, 0, 'p'},
        {"gen", required_argument, 0, 'g'}, {"text", required_argument, 0, 't'},
        {"budget", required_argument, 0, 'b'}, {"policy", required_argument, 0, 'P'},
        {"cadence", required_argument, 0, 'c'}, {"device", required_argument, 0, 'D'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    demo d;
    const char *text_path = NULL;
    char path[1024], *text = NULL;
    size_t len = 0;
    pid_t broker = -1;
    int c, rc = 1;

    memset(&d, 0, sizeof d);
    d.data = cli_data_dir();
    d.prefix = 384;
    d.gen = 32;
    d.budget = -1;
    d.cadence = 8;
    d.policy = "distillcache";
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char why[160];
        scdb_err bad = SCDB_OK;
        switch (c) {
        case 'd': d.data = optarg; break;
        case 'p': bad = scdb_parse_int("--prefix", optarg, 64, 512, &d.prefix, why, sizeof why); break;
        case 'g': bad = scdb_parse_int("--gen", optarg, 1, 512, &d.gen, why, sizeof why); break;
        case 't': text_path = optarg; break;
        case 'b': bad = scdb_parse_int("--budget", optarg, 1, 1024, &d.budget, why, sizeof why); break;
        case 'P': d.policy = optarg; break;
        case 'c': bad = scdb_parse_int("--cadence", optarg, 0, INT_MAX, &d.cadence, why, sizeof why); break;
        case 'D':
            if (scdb_device_parse(optarg, &d.device)) {
                fprintf(stderr, "scdb demo: --device wants auto, cpu or cuda, not '%s'\n", optarg);
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
    if (optind < argc || d.prefix < 64 || d.prefix % 64 || d.gen < 1 || d.prefix + d.gen > 512) {
        fprintf(stderr, "scdb demo: --prefix must be a positive multiple of 64 and prefix + gen <= 512\n");
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
    static const char *specialists[] = {"code", "manpages", "python"};
    for (size_t i = 0; i < SCDB_ARRAY_LEN(specialists); i++) {
        snprintf(path, sizeof path, "%s/pairs/base__%s.safetensors", d.data, specialists[i]);
        if (access(path, R_OK) == 0) d.consumers[d.n_consumers++] = specialists[i];
    }
    if (d.n_consumers == 0) { fprintf(stderr, "scdb demo: no pairs under %s/pairs\n", d.data); return 1; }

    scdb_err e;
    for (int i = 0; i < d.n_consumers; i++) {
        char own_path[1100], cfgp[1100];
        const char *tp = text_path;
        size_t off;
        if (!tp) {   /* the consumer's own domain */
            scdb_model_config mc;
            snprintf(cfgp, sizeof cfgp, "%s/models/%s/config.json", d.data, d.consumers[i]);
            if ((e = scdb_model_config_load(cfgp, &mc, NULL, 0))) {
                fprintf(stderr, "scdb demo: %s: %s\n", cfgp, scdb_strerror(e));
                goto done;
            }
            tp = scdb_model_heldout_path(d.data, mc.domain, own_path, sizeof own_path);
        }
        if ((e = scdb_read_file(tp, 64u << 20, &text, &len))) {
            fprintf(stderr, "scdb demo: %s: %s\n", tp, scdb_strerror(e));
            goto done;
        }
        if (len < (size_t)(d.prefix + d.gen)) {
            fprintf(stderr, "scdb demo: %s is too short\n", tp);
            free(text);
            goto done;
        }
        off = pick_offset(&d, d.consumers[i], (const unsigned char *)text, len);
        d.tokens[i] = malloc((size_t)d.prefix * sizeof *d.tokens[i]);
        if (!d.tokens[i]) { free(text); goto done; }
        scdb_tokenize_bytes(text + off, (size_t)d.prefix, d.tokens[i]);
        /* a data file is named relative to the data directory (the output
         * reads the same on every machine); --text as given */
        snprintf(d.source[i], sizeof d.source[i], "%s from byte %zu",
                 scdb_data_relative(tp), off);
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

    printf("scdb demo: data %s, broker on %s (store %s/store), producer base, consumers:",
           d.data, d.sock, d.tmp);
    for (int i = 0; i < d.n_consumers; i++) printf(" %s", d.consumers[i]);
    printf("\n");
    for (int i = 0; i < d.n_consumers; i++)
        printf("prefix for %s: %d bytes of %s\n", d.consumers[i], d.prefix, d.source[i]);
    printf("each consumer generates %d tokens greedily\n\n", d.gen);
    fflush(stdout);
    {
        const char *args[] = {"--config", d.cfg, NULL};
        broker = scdb_bench_start_broker(args, NULL);
    }
    if (broker < 0) goto done;
    if (run_child(producer_fn, &d, NULL) != 0) { fprintf(stderr, "scdb demo: producer failed\n"); goto done; }
    printf("\n| consumer | TTFT own prefill | TTFT via scdb | speed-up | payload/token vs raw f16 KV "
           "| same tokens, whole prefix | same tokens, live session (%s, budget %d, every %d) |\n"
           "|---|---|---|---|---|---|---|\n", d.policy, d.budget, d.cadence);
    rc = 0;
    for (int i = 0; i < d.n_consumers; i++)
        if (run_child(consumer, &d, d.consumers[i]) != 0) rc = 1;
    printf("\nconsumers on the %s%s.\n", scdb_device_name(d.dev),
           d.dev == SCDB_DEV_CUDA ? " (CUDA IPC arenas; the broker decodes and evicts on the GPU)"
                                  : " (shared-memory arenas)");
    printf("TTFT via scdb = lookup + get (broker decodes the stored codes into this consumer's\n"
           "arena) + re-running the last prefix token; own = prefill of the prefix.\n"
           "same tokens = greedy tokens equal to the own-prefill continuation's, position by\n"
           "position; the live session generates in the arena while the broker keeps it within\n"
           "the budget (evicting every --cadence tokens; us = broker time per eviction).\n");
done:
    if (broker > 0 && scdb_bench_stop_broker(broker, SIGTERM) != 0) {
        fprintf(stderr, "scdb demo: broker exited abnormally\n");
        rc = 1;
    }
    if (d.tmp[0] && strstr(d.tmp, "/scdb-demo-") && scdb_rm_tree(d.tmp))
        fprintf(stderr, "scdb demo: could not remove %s\n", d.tmp);
    for (int i = 0; i < d.n_consumers; i++) free(d.tokens[i]);
    printf("%s\n", rc == 0 ? "demo: ok" : "demo: FAILED");
    return rc;
}
