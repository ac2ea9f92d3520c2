/* bench_session.c — `scdb bench session`: what a live session costs per
 * token on a device, next to a model step there (issue 19's goal: eviction
 * overhead per token under 5% of a model step on the device).
 *
 * In one process, on the chosen device's ops table (the sequences a CUDA
 * arena's session runs, evict.h "on a device"): a family model
 * (scdb_model_dev) prefills PREFIX tokens of held-out text into a device
 * cache, then decodes STEPS tokens teacher-forced, capturing each step's
 * attention on the device.  Each step, the session's fold
 * (scdb_evict_dev_fold: the accumulator update) runs on that attention;
 * every CADENCE steps, over budget, the eviction (scdb_evict_dev_run:
 * score, select, compact cache and accumulators).  Every phase is timed
 * with the device synchronised.  Per policy:
 *
 *   model step   mean seconds of one decode forward (with the capture)
 *   fold         mean seconds of one step's accumulator update
 *   evict        mean seconds of one eviction
 *   overhead     fold + evict / CADENCE per token, and its ratio to the step
 *
 * Not included: the broker's request round trip (a message on the
 * eviction's cadence; `scdb demo` reports the broker's eviction time end to
 * end).  --shape 7b adds the fold and eviction alone at 7B shapes (32
 * layers, 32 query / 8 KV heads x 128, 4096 live slots, random cache and
 * attention; no model step: the family has no 7B model). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "codec.h"
#include "evict.h"
#include "model.h"

typedef struct sopts {
    const char *data, *json, *model;
    int prefix, steps, cadence, budget, reps;
    int big;                       /* --shape 7b */
} sopts;

typedef struct timing {
    double step_s, fold_s, evict_s;
    int steps, evictions;
} timing;

static double now_sync(const scdb_k_ops *ops)
{
    ops->sync();
    return scdb_now();
}

/* One session over the window: timings into *t. */
static scdb_err run_policy(const sopts *o, scdb_model_dev *md, const scdb_evict_policy *pol,
                           const int32_t *tok, timing *t)
{
    const scdb_k_ops *ops = scdb_model_dev_ops(md);
    const scdb_model_config *c = scdb_model_cfg(scdb_model_dev_model(md));
    int cap = o->prefix + o->steps, L = c->n_layers, H = c->n_heads;
    scdb_evict_acc_shape sh = {L, H, c->n_kv_heads, cap, 0, 0};
    size_t bytes = scdb_evict_acc_bytes(&sh), pb = (size_t)L * H * o->prefix * cap * 4;
    scdb_evict_acc *hdr = NULL;
    scdb_kv_cache *cache = NULL;
    scdb_k_acc_buf buf;
    void *acc = NULL, *scr = NULL, *ascr = NULL, *probs = NULL;
    int32_t *map = malloc((size_t)cap * sizeof *map);
    int acc_n = 0, nk;
    scdb_err e;

    memset(t, 0, sizeof *t);
    if (!map) return SCDB_ENOMEM;
    if ((e = scdb_evict_acc_new(&sh, &hdr)) || (e = ops->alloc(bytes, &acc)) ||
        (e = ops->zero(acc, bytes)) || (e = ops->upload(acc, hdr, sizeof *hdr)) ||
        (e = ops->alloc(scdb_evict_dev_scratch_bytes(cap), &scr)) ||
        (e = ops->alloc(pb, &probs)) || (e = scdb_model_dev_cache_new(md, cap, &cache)))
        goto done;
    scdb_evict_acc_buf(hdr, acc, &buf);
    if ((e = ops->alloc(scdb_k_acc_update_scratch_bytes(&buf), &ascr))) goto done;
    /* prefill with its attention, folded as one chunk */
    scdb_capture capt = {.probs = probs, .probs_slots = cap};
    if ((e = scdb_model_dev_forward(md, tok, NULL, o->prefix, cache, NULL, &capt)) ||
        (e = scdb_evict_dev_fold(ops, &buf, &acc_n, cache, probs, cap, o->prefix, ascr, NULL)))
        goto done;
    for (int s = 0; s < o->steps; s++) {
        double t0 = now_sync(ops);
        if ((e = scdb_model_dev_forward(md, tok + o->prefix + s, NULL, 1, cache, NULL, &capt)))
            goto done;
        double t1 = now_sync(ops);
        if ((e = scdb_evict_dev_fold(ops, &buf, &acc_n, cache, probs, cap, 1, ascr, NULL))) goto done;
        double t2 = now_sync(ops);
        t->step_s += t1 - t0;
        t->fold_s += t2 - t1;
        t->steps++;
        if ((s + 1) % o->cadence || cache->n <= o->budget) continue;
        /* the broker's checked copy of the header: 64 bytes down */
        double t3 = now_sync(ops);
        if ((e = ops->download(hdr, acc, sizeof *hdr)) ||
            (e = scdb_evict_dev_run(ops, pol, cache, hdr, acc, o->budget, scr, map, &nk)))
            goto done;
        t->evict_s += now_sync(ops) - t3;
        t->evictions++;
        acc_n = cache->n;
    }
done:
    scdb_model_dev_cache_free(md, &cache);
    ops->release(probs);
    ops->release(ascr);
    ops->release(scr);
    ops->release(acc);
    scdb_evict_acc_free(&hdr);
    free(map);
    return e;
}

/* fold and eviction alone at 7B shapes, random cache and attention */
static scdb_err run_big(const sopts *o, const scdb_k_ops *ops, const scdb_evict_policy *pol,
                        timing *t)
{
    const int L = 32, H = 32, G = 8, HD = 128, N = 4096, CAP = N + 64, B = 1024;
    scdb_evict_acc_shape sh = {L, H, G, CAP, 0, 0};
    size_t bytes = scdb_evict_acc_bytes(&sh), cb = scdb_kv_cache_bytes(L, G, HD, CAP);
    size_t pb = (size_t)L * H * CAP * 4;
    scdb_evict_acc *hdr = NULL;
    scdb_kv_cache *cache = NULL;
    scdb_k_acc_buf buf;
    void *acc = NULL, *scr = NULL, *ascr = NULL, *probs = NULL, *cmem = NULL;
    float *hp = malloc(pb);
    int32_t *pos = malloc((size_t)CAP * sizeof *pos), *map = malloc((size_t)CAP * sizeof *map);
    int acc_n = 0, nk;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    scdb_err e = SCDB_ENOMEM;

    memset(t, 0, sizeof *t);
    if (!hp || !pos || !map) goto done;
    for (int i = 0; i < CAP; i++) pos[i] = i;
    for (size_t i = 0; i < pb / 4; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        hp[i] = (float)(r >> 40) / (float)(1 << 24) / (float)N;
    }
    if ((e = scdb_evict_acc_new(&sh, &hdr)) || (e = ops->alloc(bytes, &acc)) ||
        (e = ops->zero(acc, bytes)) || (e = ops->upload(acc, hdr, sizeof *hdr)) ||
        (e = ops->alloc(scdb_evict_dev_scratch_bytes(CAP), &scr)) || (e = ops->alloc(pb, &probs)) ||
        (e = ops->upload(probs, hp, pb)) || (e = ops->alloc(cb, &cmem)) ||
        (e = ops->zero(cmem, cb)) || (e = scdb_kv_cache_view(cmem, cb, L, G, HD, CAP, &cache)) ||
        (e = ops->upload(cache->pos, pos, (size_t)CAP * sizeof *pos)))
        goto done;
    scdb_evict_acc_buf(hdr, acc, &buf);
    if ((e = ops->alloc(scdb_k_acc_update_scratch_bytes(&buf), &ascr))) goto done;
    cache->n = N;
    if ((e = scdb_evict_dev_fold(ops, &buf, &acc_n, cache, NULL, 0, 0, ascr, NULL))) goto done;
    for (int rep = 0; rep < o->reps; rep++) {
        /* grow to N + cadence one fold at a time, then evict back to B */
        while (cache->n < N + o->cadence) {
            cache->n++;
            double t0 = now_sync(ops);
            if ((e = scdb_evict_dev_fold(ops, &buf, &acc_n, cache, probs, CAP, 1, ascr, NULL)))
                goto done;
            t->fold_s += now_sync(ops) - t0;
            t->steps++;
        }
        double t0 = now_sync(ops);
        if ((e = ops->download(hdr, acc, sizeof *hdr)) ||
            (e = scdb_evict_dev_run(ops, pol, cache, hdr, acc, B, scr, map, &nk)))
            goto done;
        t->evict_s += now_sync(ops) - t0;
        t->evictions++;
        /* back to N live slots (positions as they were: the cost is the same) */
        cache->n = N;
        acc_n = N;
        int32_t n32 = N;
        if ((e = ops->upload(buf.n, &n32, sizeof n32))) goto done;
    }
done:
    ops->release(cmem);
    scdb_kv_cache_free(&cache);
    ops->release(probs);
    ops->release(ascr);
    ops->release(scr);
    ops->release(acc);
    scdb_evict_acc_free(&hdr);
    free(hp);
    free(pos);
    free(map);
    return e;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench session [--device D] [--model NAME] [--prefix N] [--steps N]\n"
"                          [--cadence N] [--budget N] [--shape 7b] [--reps N]\n"
"                          [--data DIR] [--json FILE]\n\n"
"A live session's cost per token on a device next to a model step there: the\n"
"fold of each step's attention into the accumulators and the eviction every\n"
"--cadence tokens, for every policy, in one process on the device's ops table\n"
"(the sequences of a CUDA arena's session; the broker's round trip excluded).\n"
"  --device D    auto | cpu | cuda (default auto)\n"
"  --model NAME  family model (default code); --prefix N (384) --steps N (64)\n"
"  --cadence N   evict every N tokens (8); --budget N slots (prefix / 2)\n"
"  --shape 7b    also the fold and eviction alone at 7B shapes (32 layers,\n"
"                32 / 8 heads x 128, 4096 slots; --reps evictions, default 4)\n"
"Goal (issue 19, on a GPU): overhead per token < 5%% of a model step.\n");
}

int scdb_bench_session(int argc, char **argv)
{
    sopts o = {.model = "code", .prefix = 384, .steps = 64, .cadence = 8, .budget = -1, .reps = 4};
    scdb_device_pref pref = SCDB_DEVPREF_AUTO;
    scdb_device dev;
    char why[384], path[1200], err[512];
    o.data = scdb_data_dir();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        scdb_err bad = SCDB_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--device") && more) {
            if (scdb_device_parse(argv[++i], &pref)) { usage(stderr); return 2; }
        }
        else if (!strcmp(a, "--model") && more) o.model = argv[++i];
        else if (!strcmp(a, "--prefix") && more)
            bad = scdb_parse_int(a, argv[++i], 2, INT_MAX, &o.prefix, why, sizeof why);
        else if (!strcmp(a, "--steps") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o.steps, why, sizeof why);
        else if (!strcmp(a, "--cadence") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o.cadence, why, sizeof why);
        /* -1: half the prefix */
        else if (!strcmp(a, "--budget") && more)
            bad = scdb_parse_int(a, argv[++i], -1, INT_MAX, &o.budget, why, sizeof why);
        else if (!strcmp(a, "--reps") && more)
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &o.reps, why, sizeof why);
        else if (!strcmp(a, "--shape") && more && !strcmp(argv[i + 1], "7b")) { o.big = 1; i++; }
        else if (!strcmp(a, "--data") && more) o.data = argv[++i];
        else if (!strcmp(a, "--json") && more) o.json = argv[++i];
        else { fprintf(stderr, "bench session: unknown or incomplete option '%s'\n\n", a); usage(stderr); return 2; }
        if (bad) {
            fprintf(stderr, "bench session: %s\n", why);
            return 2;
        }
    }
    if (o.budget < 0) o.budget = o.prefix / 2;
    if (o.prefix < 2 || o.steps < 1 || o.cadence < 1 || o.budget < 1 || o.reps < 1) {
        usage(stderr);
        return 2;
    }
    if (scdb_device_resolve(pref, &dev, why, sizeof why)) {
        fprintf(stderr, "bench session: %s\n", why);
        return 1;
    }
    fprintf(stderr, "bench session: device %s (%s)\n", scdb_device_name(dev), why);

    static const char *names[] = {"streaming", "h2o", "snapkv", "tova", "distillcache"};
    enum { NP = 5 };
    scdb_evict_policy *pol[NP] = {0};
    scdb_model *m = NULL;
    scdb_model_dev *md = NULL;
    unsigned char *text = NULL;
    size_t tl = 0;
    int32_t *tok = NULL;
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "policies");
    int ret = 1;
    scdb_err e;

    for (int k = 0; k < NP; k++) {
        if (k == NP - 1) {
            snprintf(path, sizeof path, "%s/policies/distillcache_base.safetensors", o.data);
            e = scdb_evict_policy_load(path, &pol[k], err, sizeof err);
        } else {
            scdb_evict_kind kind;
            e = scdb_evict_kind_parse(names[k], &kind);
            if (!e) e = scdb_evict_policy_new(kind, &pol[k]);
        }
        if (e) { fprintf(stderr, "bench session: policy %s: %s\n", names[k], scdb_strerror(e)); goto done; }
    }
    snprintf(path, sizeof path, "%s/models/%s", o.data, o.model);
    if ((e = scdb_model_load(path, &m, err, sizeof err))) {
        fprintf(stderr, "bench session: %s: %s\n", path, err);
        goto done;
    }
    if (o.prefix + o.steps > scdb_model_cfg(m)->max_seq_len) {
        fprintf(stderr, "bench session: prefix + steps exceeds the model's context\n");
        goto done;
    }
    if ((e = scdb_model_dev_new(m, dev, &md))) {
        fprintf(stderr, "bench session: the model on the %s: %s\n", scdb_device_name(dev), scdb_strerror(e));
        goto done;
    }
    if ((e = scdb_codec_domain_text(m, SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 20, &text, &tl, NULL, 0)) ||
        tl < (size_t)(o.prefix + o.steps)) {
        fprintf(stderr, "bench session: no held-out text for %s\n", o.model);
        goto done;
    }
    tok = malloc((size_t)(o.prefix + o.steps) * sizeof *tok);
    if (!tok) goto done;
    scdb_tokenize_bytes(text, (size_t)(o.prefix + o.steps), tok);

    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "device", scdb_device_name(dev));
    cJSON_AddStringToObject(cfg, "device_choice", why);
    cJSON_AddStringToObject(cfg, "model", o.model);
    cJSON_AddNumberToObject(cfg, "prefix", o.prefix);
    cJSON_AddNumberToObject(cfg, "steps", o.steps);
    cJSON_AddNumberToObject(cfg, "cadence", o.cadence);
    cJSON_AddNumberToObject(cfg, "budget", o.budget);
    printf("# Live session cost per token on the %s: model %s, prefix %d, %d decode steps, "
           "budget %d, evict every %d\n\n", scdb_device_name(dev), o.model, o.prefix, o.steps,
           o.budget, o.cadence);
    printf("| policy | model step us | fold us/token | evictions | evict us each | overhead us/token | vs model step |\n"
           "|---|---|---|---|---|---|---|\n");
    double worst = 0.0;
    for (int k = 0; k < NP; k++) {
        timing t;
        if ((e = run_policy(&o, md, pol[k], tok, &t))) {
            fprintf(stderr, "bench session: %s: %s\n", names[k], scdb_strerror(e));
            goto done;
        }
        double step = t.step_s / t.steps, fold = t.fold_s / t.steps,
               ev = t.evictions ? t.evict_s / t.evictions : 0.0;
        double over = fold + ev / o.cadence, ratio = over / step;
        if (ratio > worst) worst = ratio;
        printf("| %s | %.1f | %.1f | %d | %.1f | %.1f | %.1f%% |\n", names[k], step * 1e6, fold * 1e6,
               t.evictions, ev * 1e6, over * 1e6, 100.0 * ratio);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "policy", names[k]);
        cJSON_AddNumberToObject(r, "model_step_s", step);
        cJSON_AddNumberToObject(r, "fold_s", fold);
        cJSON_AddNumberToObject(r, "evictions", t.evictions);
        cJSON_AddNumberToObject(r, "evict_s", ev);
        cJSON_AddNumberToObject(r, "overhead_per_token_s", over);
        cJSON_AddNumberToObject(r, "overhead_vs_step", ratio);
        cJSON_AddItemToArray(rows, r);
    }
    printf("\ngoal: eviction overhead per token < 5%% of a model step on the device: worst policy "
           "%.1f%% -- %s%s\n", 100.0 * worst, worst < 0.05 ? "met" : "NOT met",
           dev == SCDB_DEV_CUDA ? "" : " (measured on the CPU: the goal is for a GPU)");
    cJSON_AddNumberToObject(root, "worst_overhead_vs_step", worst);
    cJSON_AddBoolToObject(root, "goal_met", worst < 0.05);
    if (o.big) {
        cJSON *big = cJSON_AddArrayToObject(root, "shape_7b");
        printf("\n## Fold and eviction alone at 7B shapes (32 layers, 32/8 heads x 128, 4096 slots -> "
               "budget 1024, %d evictions)\n\n| policy | fold us/token | evict us each | overhead us/token |\n"
               "|---|---|---|---|\n", o.reps);
        for (int k = 0; k < NP; k++) {
            timing t;
            if ((e = run_big(&o, scdb_k_ops_get(dev), pol[k], &t))) {
                fprintf(stderr, "bench session: 7b, %s: %s\n", names[k], scdb_strerror(e));
                goto done;
            }
            double fold = t.fold_s / t.steps, ev = t.evict_s / t.evictions;
            printf("| %s | %.1f | %.1f | %.1f |\n", names[k], fold * 1e6, ev * 1e6,
                   (fold + ev / o.cadence) * 1e6);
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "policy", names[k]);
            cJSON_AddNumberToObject(r, "fold_s", fold);
            cJSON_AddNumberToObject(r, "evict_s", ev);
            cJSON_AddItemToArray(big, r);
        }
    }
    printf("\nIn one process on the %s's ops table (the fold is what libscdb runs after each step "
           "on a CUDA arena, the eviction what the broker runs); the broker's round trip is not "
           "included.\n", scdb_device_name(dev));
    if (o.json && scdb_bench_write_json(o.json, root, "bench session")) goto done;
    ret = 0;
done:
    for (int k = 0; k < NP; k++) scdb_evict_policy_free(&pol[k]);
    free(tok);
    free(text);
    scdb_model_dev_free(&md);
    scdb_model_free(&m);
    cJSON_Delete(root);
    return ret;
}
