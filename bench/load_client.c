/* load_client.c — load_client.h: the broker and prompts of the load and
 * chaos benches, and their client processes. */
#include "load_client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "kernels.h"
#include "model.h"

const char *const lw_op_names[LW_N_OPS] = {"lookup_index", "lookup_request", "get",
                                           "put", "put_states", "session_evict"};

#define BT 64
#define ARENA_SLOTS 512
#define SESSION_BUDGET 192
#define SESSION_APPEND 16

/* ------------------------------------------------------------ broker */

static int write_config(const lw_env *env, int hb_timeout_ms)
{
    FILE *f = fopen(env->config, "w");
    if (!f) return -1;
    fprintf(f,
            "[broker]\nendpoint = %s\ndata_dir = %s/store\nblock_tokens = %d\n"
            "log_level = warn\nno_sync = 1\nworkers = 2\nhot_capacity = 64MiB\n"
            "disk_capacity = 2GiB\nheartbeat_timeout_ms = %d\nmax_inflight = 1024\n",
            env->endpoint, env->dir, BT, hb_timeout_ms);
    if (env->metrics_port > 0) fprintf(f, "metrics_listen = 127.0.0.1:%d\n", env->metrics_port);
    if (env->broker_conf[0]) fprintf(f, "%s\n", env->broker_conf);
    fprintf(f, "\n[model base]\nconfig = %s/models/base/config.json\n\n", env->data);
    fprintf(f, "[model code]\nconfig = %s/models/code/config.json\n\n", env->data);
    fprintf(f, "[policy distillcache]\nfile = %s/policies/distillcache_base.safetensors\n\n",
            env->data);
    fprintf(f, "[codebook base-scd]\nkind = scd\nmodel = base\nfile = %s/codebooks/base.safetensors\n\n",
            env->data);
    fprintf(f, "[pair base-scd code]\ndecoder = scd\nfile = %s/pairs/base__code.safetensors\n",
            env->data);
    return fclose(f);
}

int lw_broker_start(lw_env *env)
{
    char log[256];
    const char *args[] = {"--config", env->config, NULL};
    scdb_opts o = {.endpoint = env->endpoint, .timeout_ms = 500, .no_heartbeat = 1};
    scdb *h = NULL;

    snprintf(log, sizeof log, "%s/broker.log", env->dir);
    env->broker = scdb_bench_start_broker(args, log);
    if (env->broker < 0) return -1;
    if (scdb_bench_connect(&o, 60, env->broker, &h)) {
        fprintf(stderr, "bench: the broker did not start (see %s)\n", log);
        return -1;
    }
    scdb_close(&h);
    return 0;
}

void lw_raw_payload(const int32_t *tokens, int block, int n_layers, int kv_dim, int block_tokens,
                    uint16_t *out)
{
    uint64_t x = 1469598103934665603ull;
    size_t n = 2 * (size_t)n_layers * (size_t)block_tokens * (size_t)kv_dim;

    for (int i = 0; i < (block + 1) * block_tokens; i++) x = (x ^ (uint32_t)tokens[i]) * 1099511628211ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* a normal f16 in +-[2^-5, 2^-1): exact in f32 */
        out[i] = (uint16_t)(((x >> 20) & 1) << 15 | (10 + (x >> 21) % 4) << 10 | (x >> 32 & 0x3ff));
    }
}

static int put_raw_prompt(scdb *h, const int32_t *t, int n)
{
    const scdb_info *in = scdb_get_info(h);
    int kv = in->n_kv_heads * in->head_dim, nb = n / BT;
    size_t per = 2 * (size_t)in->n_layers * BT * (size_t)kv;
    uint16_t *pay = malloc(per * sizeof *pay * (size_t)nb);
    scdb_err e;

    if (!pay) return -1;
    for (int b = 0; b < nb; b++) lw_raw_payload(t, b, in->n_layers, kv, BT, pay + (size_t)b * per);
    e = scdb_put(h, t, (size_t)n, 0, pay, per * sizeof *pay * (size_t)nb, NULL);
    free(pay);
    return e ? -1 : 0;
}

/* Store prompts p with want[p] set (all when want is NULL): their SCD
 * codes (scd) and raw KV (raw); the blocks the broker still has are
 * skipped.  0, or -1 (a message on stderr). */
static int store_prompts(const lw_env *env, const int *want, int scd, int raw)
{
    char path[1024], err[512];
    scdb_model *m = NULL;
    scdb_kv_cache *kv = NULL;
    scdb *sp = NULL, *rp = NULL;
    scdb_arena *states = NULL;
    scdb_opts o = {.endpoint = env->endpoint, .timeout_ms = 60000, .name = "populate"};
    int rc = -1;

    err[0] = 0;
    snprintf(path, sizeof path, "%s/models/base", env->data);
    if (scdb_model_load(path, &m, err, sizeof err) || scdb_connect(&o, &sp) ||
        scdb_register(sp, SCDB_PRODUCER, "base", "base-scd", NULL) ||
        scdb_states_arena_new(sp, LW_PROMPT_TOKENS, &states) || scdb_connect(&o, &rp) ||
        scdb_register(rp, SCDB_PRODUCER, "base", NULL, NULL) ||
        scdb_model_cache_new(m, LW_PROMPT_TOKENS, &kv)) {
        fprintf(stderr, "bench: populate: %s\n", sp ? scdb_last_error(sp) : err);
        goto out;
    }
    for (int p = 0; p < env->n_prompts; p++) {
        scdb_capture cap = {.h_in = scdb_arena_states(states, NULL, NULL, NULL)};
        if (want && !want[p]) continue;
        kv->n = 0;
        if ((scd && (scdb_model_forward(m, env->prompts[p], NULL, LW_PROMPT_TOKENS, kv, NULL,
                                        &cap) ||
                     scdb_put_states(sp, env->prompts[p], LW_PROMPT_TOKENS, 0, states, NULL))) ||
            (raw && put_raw_prompt(rp, env->prompts[p], LW_PROMPT_TOKENS))) {
            fprintf(stderr, "bench: populate prompt %d: %s / %s\n", p, scdb_last_error(sp),
                    scdb_last_error(rp));
            goto out;
        }
    }
    rc = 0;
out:
    scdb_arena_free(&states);
    scdb_close(&sp);
    scdb_close(&rp);
    scdb_kv_cache_free(&kv);
    scdb_model_free(&m);
    return rc;
}

scdb_err lw_reader_open(const lw_env *env, scdb **out)
{
    scdb_opts o = {.endpoint = env->endpoint, .timeout_ms = env->timeout_ms, .name = "prompts",
                   .no_heartbeat = 1};
    scdb_err e = scdb_connect(&o, out);

    if (!e)
        e = env->verify ? scdb_register(*out, SCDB_CONSUMER, "base", NULL, NULL)
                        : scdb_register(*out, SCDB_CONSUMER, "code", "base-scd", NULL);
    if (e) scdb_close(out);
    return e;
}

int lw_prompts_short(const lw_env *env, scdb *h, int *missing, int *first, uint32_t *blocks)
{
    int n = 0;

    for (int p = 0; p < env->n_prompts; p++) {
        scdb_lookup_result r;
        if (scdb_lookup(h, env->prompts[p], LW_PROMPT_TOKENS, &r)) return -1;
        if (missing) missing[p] = r.n_matched < r.n_full;
        if (r.n_matched < r.n_full && !n++) {
            if (first) *first = p;
            if (blocks) *blocks = r.n_matched;
        }
    }
    return n;
}

void lw_prompts_why(const lw_env *env, scdb *h, int n_short, int prompt, uint32_t blocks,
                    char *why, size_t len)
{
    scdb_stat st;

    if (scdb_stats(h, &st)) memset(&st, 0, sizeof st);
    snprintf(why, len,
             "%d of the %d stored prompts %s no longer whole (prompt %d: %u of its %d blocks): "
             "the broker's store evicted them (disk_capacity %.1f MiB, %.1f MiB in use, %llu "
             "evictions so far), so their lookups and gets miss; the store must hold the "
             "prompts besides what the run puts (--disk-capacity)",
             n_short, env->n_prompts, n_short > 1 ? "are" : "is", prompt, blocks,
             LW_PROMPT_TOKENS / BT, (double)st.disk_capacity_bytes / (1 << 20),
             (double)st.disk_bytes / (1 << 20), (unsigned long long)st.evictions);
}

/* Make the prompts that are still whole the most recently used blocks:
 * lookups through the broker touch what they match (the index's do not).
 * Else storing the missing ones evicts them, the store's oldest leaves
 * since the last reads, one for one, and as many come up short again. */
static void touch_whole(const lw_env *env, const int *missing)
{
    scdb_opts o = {.endpoint = env->endpoint, .timeout_ms = env->timeout_ms, .name = "prompts",
                   .no_heartbeat = 1, .no_lookup_index = 1};
    scdb *t = NULL;

    if (scdb_connect(&o, &t)) return;   /* best effort: the re-check says what is missing */
    if (!(env->verify ? scdb_register(t, SCDB_CONSUMER, "base", NULL, NULL)
                      : scdb_register(t, SCDB_CONSUMER, "code", "base-scd", NULL)))
        for (int p = 0; p < env->n_prompts; p++) {
            scdb_lookup_result r;
            if (!missing[p] && scdb_lookup(t, env->prompts[p], LW_PROMPT_TOKENS, &r)) break;
        }
    scdb_close(&t);
}

int lw_prompts_keep(const lw_env *env, char *why, size_t len)
{
    int missing[LW_MAX_PROMPTS], n, again = 0, first = 0;
    uint32_t blocks = 0;
    scdb *h = NULL;

    why[0] = 0;
    if (lw_reader_open(env, &h)) {
        snprintf(why, len, "cannot check the stored prompts: %s", scdb_connect_error());
        return -1;
    }
    /* only the copy the clients read: storing the other would only evict */
    n = lw_prompts_short(env, h, missing, NULL, NULL);
    /* always, not only before storing missing ones: the run about to start
     * puts new blocks, and in a full store each one evicts the oldest
     * leaf; the prompts must not be older than an earlier run's puts (the
     * capacity measurement's: on a slow machine they filled the store
     * without evicting a prompt, and the warm-up's puts then evicted the
     * prompt its few reads had not touched) */
    if (n >= 0)
        touch_whole(env, missing);
    if (n > 0) {
        if (store_prompts(env, missing, !env->verify, env->verify))
            snprintf(why, len, "cannot store the prompts again (above)");
        else if ((again = lw_prompts_short(env, h, NULL, &first, &blocks)) > 0)
            lw_prompts_why(env, h, again, first, blocks, why, len);
        else if (!again)
            fprintf(stderr, "bench: stored %d of the %d prompts again: the store had evicted "
                    "them\n", n, env->n_prompts);
    }
    if (n < 0 || again < 0)
        snprintf(why, len, "cannot check the stored prompts: %s", scdb_last_error(h));
    scdb_close(&h);
    return why[0] ? -1 : n;
}

int lw_setup(lw_env *env, const char *data, int n_prompts, int hb_timeout_ms)
{
    char path[1024], why[512], *text = NULL;
    size_t len = 0;
    int rc = -1;

    memset(env->rate, 0, sizeof env->rate);
    env->data = data;
    env->broker = -1;
    env->timeout_ms = 10000;
    if (n_prompts > LW_MAX_PROMPTS) n_prompts = LW_MAX_PROMPTS;
    env->n_prompts = n_prompts;
    {   /* $TMPDIR: where the store lives (tmpfs or disk) is the bench's choice */
        const char *tmp = getenv("TMPDIR");
        snprintf(env->dir, sizeof env->dir, "%s/scdb-load-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    }
    if (!mkdtemp(env->dir)) return -1;
    snprintf(env->endpoint, sizeof env->endpoint, "ipc://%s/broker.sock", env->dir);
    snprintf(env->config, sizeof env->config, "%s/broker.ini", env->dir);
    if (write_config(env, hb_timeout_ms) || lw_broker_start(env)) return -1;

    /* prompts: held-out English bytes */
    scdb_model_heldout_path(data, "english", path, sizeof path);
    if (scdb_read_file(path, 1 << 22, &text, &len) ||
        len < (size_t)n_prompts * LW_PROMPT_TOKENS + 1) {
        fprintf(stderr, "bench: cannot read %s\n", path);
        goto out;
    }
    for (int p = 0; p < n_prompts; p++)
        for (int i = 0; i < LW_PROMPT_TOKENS; i++)
            env->prompts[p][i] = (unsigned char)text[(size_t)p * LW_PROMPT_TOKENS + i];
    /* stored twice: SCD codes of base's real states, and raw KV; then
     * every one of them must be there (a store too small for them fails
     * here, not as wrong answers later) */
    if (store_prompts(env, NULL, 1, 1)) goto out;
    if (lw_prompts_keep(env, why, sizeof why) < 0) {
        fprintf(stderr, "bench: FAILED: %s\n", why);
        goto out;
    }
    rc = 0;
out:
    free(text);
    return rc;
}

void lw_teardown(lw_env *env, int keep)
{
    if (env->broker > 0) scdb_bench_stop_broker(env->broker, SIGTERM);
    env->broker = -1;
    if (!keep && env->dir[0]) scdb_rm_tree(env->dir);
}

long lw_rss_kb(pid_t pid)
{
    long parts[3];
    return lw_rss_parts(pid, parts);
}

long lw_rss_parts(pid_t pid, long parts[3])
{
    static const char *const key[3] = {"RssAnon:", "RssFile:", "RssShmem:"};
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    parts[0] = parts[1] = parts[2] = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r"))) return -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
        for (int i = 0; i < 3; i++)
            if (!strncmp(line, key[i], strlen(key[i])))
                parts[i] = strtol(line + strlen(key[i]), NULL, 10);
    }
    fclose(f);
    return kb;
}

int lw_fds(pid_t pid)
{
    char path[64];
    DIR *d;
    struct dirent *e;
    int n = 0;

    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    if (!(d = opendir(path))) return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------------------ client threads */

typedef struct worker {
    const lw_env *env;
    int client;
    lw_op op;
    pthread_t thr;
    uint64_t rng;
    /* results */
    uint64_t count, errors, unavailable, wrong_bytes, verified_bytes, wrong_lookups, acked,
        fallbacks;
    float *lat;
    size_t n_lat, cap_lat;
    scdb_err first_error;
    char first_msg[160];
    /* state */
    scdb *h;
    scdb_arena *arena;
    scdb_session *sess;
    float *probs;
    uint16_t *pay;                /* put: the payload of 2 blocks */
    uint64_t seq;
    int ack_fd;
} worker;

static atomic_int g_stop;

/* splitmix64's finaliser: a generator seed from (seed, client, op).  The
 * xorshift below, seeded with the raw sums, gave nearly the same first
 * numbers to every client (seeds a few bits apart), so all of them sent
 * their first get at the same instant: 64 gets queued at once, a 0.3 s
 * queue at 64 clients that was the bench's own doing. */
static uint64_t seed_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x ? x : 1;           /* xorshift's state is never 0 */
}

static double urand(worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return (double)(w->rng >> 11) * (1.0 / 9007199254740992.0);
}

/* Down or restarted broker: not the call's fault (with env->restarts). */
static int unavailable(scdb_err e)
{
    return e == SCDB_ETIMEDOUT || e == SCDB_ECLOSED || e == SCDB_ESYS || e == SCDB_EBUSY;
}

static void note_error(worker *w, scdb_err e, const char *what)
{
    if (w->env->restarts && unavailable(e)) {
        w->unavailable++;
        return;
    }
    if (!w->errors++ ) {
        w->first_error = e;
        snprintf(w->first_msg, sizeof w->first_msg, "%s: %s (%s)", what, scdb_strerror(e),
                 w->h ? scdb_last_error(w->h) : "");
    }
}

static void free_state(worker *w)
{
    scdb_session_close(&w->sess);
    scdb_arena_free(&w->arena);
}

/* The handle and what the op needs; 0, or the error. */
static scdb_err setup(worker *w)
{
    const lw_env *env = w->env;
    scdb_opts o = {.endpoint = env->endpoint, .timeout_ms = env->timeout_ms, .name = "load",
                   .no_lookup_index = w->op == LW_LOOKUP_REQUEST};
    scdb_err e = SCDB_OK;

    if (!w->h) {
        if ((e = scdb_connect(&o, &w->h))) return e;
        switch (w->op) {
        case LW_PUT: e = scdb_register(w->h, SCDB_PRODUCER, "base", NULL, NULL); break;
        case LW_PUT_STATES: e = scdb_register(w->h, SCDB_PRODUCER, "base", "base-scd", NULL); break;
        case LW_GET:
            e = env->verify ? scdb_register(w->h, SCDB_CONSUMER, "base", NULL, NULL)
                            : scdb_register(w->h, SCDB_CONSUMER, "code", "base-scd", NULL);
            break;
        default: e = scdb_register(w->h, SCDB_CONSUMER, "code", "base-scd", NULL); break;
        }
        if (e) {
            scdb_close(&w->h);
            return e;
        }
    }
    if (w->op == LW_GET && !w->arena) e = scdb_arena_new(w->h, ARENA_SLOTS, &w->arena);
    if (w->op == LW_PUT_STATES && !w->arena) e = scdb_states_arena_new(w->h, LW_PUT_TOKENS, &w->arena);
    if (w->op == LW_SESSION_EVICT && !w->sess) {
        scdb_session_opts so = {.budget = SESSION_BUDGET, .policy = "distillcache",
                                .n_heads = 4};
        scdb_session_evict_result r;
        const int32_t *t = env->prompts[w->client % env->n_prompts];
        scdb_arena_free(&w->arena);
        if ((e = scdb_arena_new(w->h, ARENA_SLOTS, &w->arena)) ||
            (e = scdb_get(w->h, t, LW_PROMPT_TOKENS, w->arena, 0, 0, NULL)) ||
            (e = scdb_session_open(w->arena, &so, &w->sess)) ||
            (e = scdb_session_add_stats(w->sess, NULL, 0, 0)) ||
            (e = scdb_session_evict(w->sess, 0, &r)))
            free_state(w);
        if (!e && !w->probs) {
            size_t n = 8 * 4 * SESSION_APPEND * (size_t)ARENA_SLOTS;
            if (!(w->probs = malloc(n * sizeof *w->probs))) e = SCDB_ENOMEM;
            for (size_t i = 0; !e && i < n; i++) w->probs[i] = 1.0f / 256.0f;
        }
    }
    return e;
}

/* Byte tokens (the bundled family's vocabulary is 256: every token of a
 * put must be below it, or the broker refuses it with SCDB_ERANGE), unique
 * per run, client and call: block 0 starts with a NUL (never in the
 * held-out English prompts), then the seed, the client and the call's
 * sequence number, one byte each, then seeded noise. */
void lw_put_tokens(uint64_t seed, int client, uint64_t seq, int32_t t[LW_PUT_TOKENS])
{
    uint64_t s = seed * 1000003u + (uint64_t)client * 7919u + seq;
    for (int i = 0; i < LW_PUT_TOKENS; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)(s >> 56);
    }
    t[0] = 0;
    t[1] = (int32_t)(seed & 0xff);
    t[2] = (int32_t)((unsigned)client >> 8 & 0xff);
    t[3] = (int32_t)((unsigned)client & 0xff);
    for (int i = 0; i < 5; i++) t[4 + i] = (int32_t)(seq >> (8 * (4 - i)) & 0xff);
}

static void fresh_put_tokens(worker *w, int32_t *t)
{
    lw_put_tokens(w->env->seed, w->client, w->seq++, t);
}

/* Compare a raw get of prompt p with the payload its tokens determine. */
static void verify_get(worker *w, const int32_t *t, uint32_t n_tok)
{
    scdb_kv_cache *c = scdb_arena_cache(w->arena);
    int kv = c->n_kv_heads * c->head_dim;
    size_t per = 2 * (size_t)c->n_layers * BT * (size_t)kv;
    uint16_t *pay = malloc(per * sizeof *pay);

    if (!pay) return;
    for (uint32_t b = 0; b < n_tok / BT; b++) {
        lw_raw_payload(t, (int)b, c->n_layers, kv, BT, pay);
        for (int l = 0; l < c->n_layers; l++)
            for (int part = 0; part < 2; part++) {
                const uint16_t *src = pay + ((size_t)(part * c->n_layers + l) * BT) * kv;
                for (int i = 0; i < BT; i++) {
                    const float *row = part ? scdb_kv_v(c, l, (int)b * BT + i)
                                            : scdb_kv_k(c, l, (int)b * BT + i);
                    for (int j = 0; j < kv; j++)
                        if (row[j] != scdb_f16_to_f32(src[(size_t)i * kv + j]))
                            w->wrong_bytes += sizeof(float);
                }
            }
        w->verified_bytes += 2 * (size_t)c->n_layers * BT * kv * sizeof(float);
    }
    free(pay);
}

/* One call of the op; returns its status (latency recorded by the caller). */
static scdb_err one(worker *w, double *us)
{
    const lw_env *env = w->env;
    const int32_t *t = env->prompts[(size_t)(urand(w) * env->n_prompts) % env->n_prompts];
    double t0;
    scdb_err e;

    switch (w->op) {
    case LW_LOOKUP_INDEX:
    case LW_LOOKUP_REQUEST: {
        scdb_lookup_result r;
        t0 = scdb_now();
        e = scdb_lookup(w->h, t, LW_PROMPT_TOKENS, &r);
        *us = (scdb_now() - t0) * 1e6;
        if (!e && r.n_matched != LW_PROMPT_TOKENS / BT) w->wrong_lookups++;
        return e;
    }
    case LW_GET: {
        scdb_get_result r;
        t0 = scdb_now();
        e = scdb_get(w->h, t, LW_PROMPT_TOKENS, w->arena, 0, 0, &r);
        *us = (scdb_now() - t0) * 1e6;
        if (!e && r.tokens_written != LW_PROMPT_TOKENS) w->wrong_lookups++;
        if (!e && env->verify) verify_get(w, t, r.tokens_written);
        if (e == SCDB_ECLOSED) scdb_arena_free(&w->arena);   /* a restart: a new one */
        return e;
    }
    case LW_PUT: {
        int32_t tok[LW_PUT_TOKENS];
        const scdb_info *in = scdb_get_info(w->h);
        int kv = in->n_kv_heads * in->head_dim;
        size_t per = 2 * (size_t)in->n_layers * BT * (size_t)kv;
        scdb_put_result r;
        if (!w->pay && !(w->pay = malloc(2 * per * sizeof *w->pay))) return SCDB_ENOMEM;
        fresh_put_tokens(w, tok);
        for (int b = 0; b < 2; b++) lw_raw_payload(tok, b, in->n_layers, kv, BT, w->pay + b * per);
        t0 = scdb_now();
        e = scdb_put(w->h, tok, LW_PUT_TOKENS, 0, w->pay, 2 * per * sizeof *w->pay, &r);
        *us = (scdb_now() - t0) * 1e6;
        if (!e && w->ack_fd >= 0) {
            /* acknowledged: on record before the next call */
            if (write(w->ack_fd, tok, sizeof tok) != (ssize_t)sizeof tok) w->errors++;
            w->acked += 2;
        }
        return e;
    }
    case LW_PUT_STATES: {
        int32_t tok[LW_PUT_TOKENS];
        int L, D, cap;
        float *st = scdb_arena_states(w->arena, &L, &D, &cap);
        /* the producer's prefill: fresh states every call (a put_states
         * consumes the rows it encodes: NaN until written again) */
        for (size_t i = 0; i < (size_t)L * LW_PUT_TOKENS * (size_t)D; i++)
            st[i] = (float)(urand(w) - 0.5);
        fresh_put_tokens(w, tok);
        t0 = scdb_now();
        e = scdb_put_states(w->h, tok, LW_PUT_TOKENS, 0, w->arena, NULL);
        *us = (scdb_now() - t0) * 1e6;
        if (e == SCDB_ECLOSED) scdb_arena_free(&w->arena);
        if (!e && w->ack_fd >= 0) {
            if (write(w->ack_fd, tok, sizeof tok) != (ssize_t)sizeof tok) w->errors++;
            w->acked += 2;
        }
        return e;
    }
    case LW_SESSION_EVICT: {
        scdb_kv_cache *c = scdb_arena_cache(w->arena);
        scdb_session_evict_result r;
        int n0 = c->n;
        /* the client's own decode steps: append slots (copies), fold them */
        for (int i = 0; i < SESSION_APPEND; i++) {
            for (int l = 0; l < c->n_layers; l++) {
                memcpy(scdb_kv_k(c, l, n0 + i), scdb_kv_k(c, l, i), sizeof(float) * scdb_kv_dim(c));
                memcpy(scdb_kv_v(c, l, n0 + i), scdb_kv_v(c, l, i), sizeof(float) * scdb_kv_dim(c));
            }
            c->pos[n0 + i] = c->pos[n0 - 1] + 1 + i;
        }
        c->n = n0 + SESSION_APPEND;
        e = scdb_session_add_stats(w->sess, w->probs, ARENA_SLOTS, SESSION_APPEND);
        if (e) return e;
        t0 = scdb_now();
        e = scdb_session_evict(w->sess, 0, &r);
        *us = (scdb_now() - t0) * 1e6;
        if (!e && (r.n_kept != SESSION_BUDGET || c->n != SESSION_BUDGET)) w->wrong_lookups++;
        if (e) free_state(w);       /* restart or damage: a new session */
        return e;
    }
    default: return SCDB_EINVAL;
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    const lw_env *env = w->env;
    double rate = env->rate[w->op], start, next, end;

    /* the settle time: every client's threads start and the first of
     * them reach the broker before anything is measured */
    if (env->settle_s > 0) usleep((useconds_t)(env->settle_s * 1e6));
    start = scdb_now();
    next = start;
    end = start + env->seconds;
    while (!atomic_load(&g_stop)) {
        double now = scdb_now(), us = 0;
        scdb_err e;
        if (now >= end) break;
        if (rate > 0) {
            next += -log(1.0 - urand(w)) / rate;     /* Poisson arrivals */
            if (next > now) usleep((useconds_t)((next - now) * 1e6));
            if (scdb_now() >= end) break;
        }
        if ((e = setup(w))) {
            note_error(w, e, "setup");
            usleep(50000);
            continue;
        }
        {
            uint64_t wrong0 = w->wrong_lookups;
            e = one(w, &us);
            if (e) {
                note_error(w, e, lw_op_names[w->op]);
                continue;
            }
            if (w->wrong_lookups != wrong0) {   /* answered, but wrongly: an error */
                if (!w->errors++) {
                    w->first_error = SCDB_EMISMATCH;
                    snprintf(w->first_msg, sizeof w->first_msg,
                             "%s: a wrong answer (a lookup or get short of the stored prompt, "
                             "or an eviction that kept another count)", lw_op_names[w->op]);
                }
                continue;
            }
        }
        w->count++;
        if (w->n_lat == w->cap_lat) {
            size_t cap = w->cap_lat ? 2 * w->cap_lat : 1024;
            float *p = realloc(w->lat, cap * sizeof *p);
            if (!p) continue;
            w->lat = p;
            w->cap_lat = cap;
        }
        w->lat[w->n_lat++] = (float)us;
    }
    if (w->h && w->op == LW_LOOKUP_INDEX) {
        scdb_stat st;
        if (scdb_stats(w->h, &st) == SCDB_OK) w->fallbacks = st.index_fallbacks + st.request_lookups;
    }
    free_state(w);
    scdb_close(&w->h);
    free(w->probs);
    free(w->pay);
    return NULL;
}

static void on_stop(int sig)
{
    (void)sig;
    atomic_store(&g_stop, 1);
}

static void client_main(const lw_env *env, int client, int ready_w, int go_r)
{
    worker w[LW_N_OPS];
    lw_result r;
    char path[256];
    FILE *f;
    int n = 0;

    memset(w, 0, sizeof w);
    memset(&r, 0, sizeof r);
    signal(SIGPIPE, SIG_IGN);
    {   /* SIGUSR1: stop now, write the results (runs of unbounded length) */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
    }
    for (int op = 0; op < LW_N_OPS; op++) {
        if (!env->rate[op]) continue;
        w[n].env = env;
        w[n].client = client;
        w[n].op = (lw_op)op;
        w[n].rng = seed_mix(env->seed * 2654435761u + (uint64_t)client * 40503u +
                            (uint64_t)op * 977u + 1);
        w[n].ack_fd = -1;
        if ((op == LW_PUT || op == LW_PUT_STATES) && env->verify) {
            snprintf(path, sizeof path, "%s/acked-%s%d.log", env->dir,
                     op == LW_PUT ? "" : "states-", client);
            w[n].ack_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        }
        /* set up before the start, so the run measures the steady state */
        {
            scdb_err e = setup(&w[n]);
            if (e) note_error(&w[n], e, "setup");
        }
        n++;
    }
    (void)!write(ready_w, "r", 1);
    {
        char ch;
        while (read(go_r, &ch, 1) < 0 && errno == EINTR) {}
    }
    for (int i = 0; i < n; i++) pthread_create(&w[i].thr, NULL, worker_main, &w[i]);
    for (int i = 0; i < n; i++) pthread_join(w[i].thr, NULL);

    for (int i = 0; i < n; i++) {
        lw_op op = w[i].op;
        r.count[op] = w[i].count;
        r.errors[op] = w[i].errors;
        r.unavailable[op] = w[i].unavailable;
        r.wrong_bytes += w[i].wrong_bytes;
        r.verified_bytes += w[i].verified_bytes;
        r.wrong_lookups += w[i].wrong_lookups;
        r.acked_blocks += w[i].acked;
        r.index_fallbacks += w[i].fallbacks;
        r.n_lat[op] = (uint32_t)w[i].n_lat;
        if (w[i].errors && !r.first_error) {
            r.first_error = w[i].first_error;
            r.first_error_op = op;
            snprintf(r.first_error_msg, sizeof r.first_error_msg, "%s", w[i].first_msg);
        }
        if (w[i].ack_fd >= 0) close(w[i].ack_fd);
    }
    snprintf(path, sizeof path, "%s/result-%d.tmp", env->dir, client);
    if ((f = fopen(path, "wb"))) {
        fwrite(&r, sizeof r, 1, f);
        for (int op = 0; op < LW_N_OPS; op++)
            for (int i = 0; i < n; i++)
                if (w[i].op == (lw_op)op && w[i].n_lat) fwrite(w[i].lat, sizeof(float), w[i].n_lat, f);
        if (fclose(f) == 0) {
            char fin[256];
            snprintf(fin, sizeof fin, "%s/result-%d.bin", env->dir, client);
            rename(path, fin);
        }
    }
}

int lw_spawn(const lw_env *env, int base, int n, pid_t *pids, int *ready_fd)
{
    int ready[2], go[2];

    if (pipe(ready) || pipe(go)) return -1;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/result-%d.bin", env->dir, base + i);
        unlink(path);
        pids[i] = fork();
        if (pids[i] == 0) {
            close(ready[0]);
            close(go[1]);
            client_main(env, base + i, ready[1], go[0]);
            _exit(0);
        }
    }
    close(ready[1]);
    close(go[0]);
    *ready_fd = ready[0];
    return go[1];
}

int lw_wait_ready(int ready_fd, int n, double timeout_s)
{
    double until = scdb_now() + timeout_s;
    int got = 0;

    while (got < n && scdb_now() < until) {
        char buf[64];
        ssize_t r = read(ready_fd, buf, sizeof buf < (size_t)(n - got) ? sizeof buf : (size_t)(n - got));
        if (r > 0) got += (int)r;
        else if (r == 0) break;               /* every client gone */
        else if (errno != EINTR) break;
    }
    return got == n ? 0 : -1;
}

int lw_collect(const lw_env *env, int i, lw_result *r, float **lat, size_t *n_lat,
               size_t *cap_lat)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof path, "%s/result-%d.bin", env->dir, i);
    if (!(f = fopen(path, "rb"))) return -1;
    if (fread(r, sizeof *r, 1, f) != 1) {
        fclose(f);
        return -1;
    }
    for (int op = 0; lat && op < LW_N_OPS; op++) {
        size_t need = n_lat[op] + r->n_lat[op];
        if (need > cap_lat[op]) {
            float *p = realloc(lat[op], need * sizeof *p);
            if (!p) break;
            lat[op] = p;
            cap_lat[op] = need;
        }
        if (fread(lat[op] + n_lat[op], sizeof(float), r->n_lat[op], f) != r->n_lat[op]) break;
        n_lat[op] += r->n_lat[op];
    }
    fclose(f);
    unlink(path);
    return 0;
}

int lw_read_acked(const lw_env *env, int n_clients, int states, int32_t (*tokens)[LW_PUT_TOKENS],
                  int max)
{
    int n = 0;
    for (int c = 0; c < n_clients; c++) {
        char path[256];
        FILE *f;
        snprintf(path, sizeof path, "%s/acked-%s%d.log", env->dir, states ? "states-" : "", c);
        if (!(f = fopen(path, "rb"))) continue;
        while (n < max && fread(tokens[n], sizeof tokens[n], 1, f) == 1) n++;
        fclose(f);
    }
    return n;
}
