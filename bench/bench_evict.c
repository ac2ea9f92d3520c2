/* bench_evict.c — `scdb bench evict`: live-cache eviction quality and cost.
 *
 * For every model (by default each bundled model on the second half of its
 * own domain's held-out text; the first half is what `scdb train-policy`
 * trains on), every policy (full cache, StreamingLLM, H2O, SnapKV, TOVA and
 * the learned DistillCache MLP) and every budget, run the protocol of
 * evict.h on N windows of the text and report KL to the full cache, top-1
 * agreement with it, perplexity, and the policy's overhead per token next
 * to the model's own step time.  The learned policy is marked zero-shot on
 * every model other than the one it was trained on.  Markdown table on
 * stdout, {"rows":[...]} JSON with --json, a quality-vs-budget PNG with
 * --png (tools/plot_evict.py, matplotlib). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "evict.h"
#include "model.h"

int scdb_bench_evict(int argc, char **argv);

#define MAX_MODELS 8
#define MAX_BUDGETS 6
#define N_POL SCDB_EVICT_KIND_COUNT

typedef struct opts {
    const char *data, *text, *json, *png, *policy, *part;
    char *models[MAX_MODELS];
    int n_models;
    double budgets[MAX_BUDGETS];
    int n_budgets;
    int windows, prefill, steps, every;
} opts;

typedef struct stat_sum {
    double kl, top1, nll, pol_s, model_s;
    long steps;
    int runs;
} stat_sum;

static const char *data_dir(void) { return scdb_data_dir(); }

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb bench evict [options]\n\n"
            "KV-cache eviction: KL to the full cache, top-1 agreement, perplexity and\n"
            "policy overhead of every policy at every budget (see the protocol it prints).\n\n"
            "  --models A,B,..   models under DATA/models (default: every model there)\n"
            "  --text FILE       evaluate every model on FILE (default: each model on\n"
            "                    DATA/heldout/<its domain>.txt)\n"
            "  --part P          second | first | all of each text (default: second for the\n"
            "                    bundled held-out texts, all for --text)\n"
            "  --policy FILE     learned policy (default DATA/policies/distillcache_base.safetensors)\n"
            "  --budgets F,..    budget fractions of prefill + steps (default 0.5,0.25,0.125)\n"
            "  --windows N       windows per text (default 8)\n"
            "  --prefill P       prefill tokens (default 256)\n"
            "  --steps T         teacher-forced continuation steps (default 256)\n"
            "  --every C         evict every C steps (default 8)\n"
            "  --json FILE       write {\"rows\":[{model,policy,budget,kl,top1,ppl,us_per_token,..}]}\n"
            "  --png FILE        plot quality vs budget (tools/plot_evict.py, matplotlib)\n"
            "  --data DIR        asset directory (default %s)\n"
            "  -h, --help        this text\n",
            data_dir());
}

static int split_list(const char *s, char **out, int max)
{
    char *buf = strdup(s), *save = NULL, *tok;
    int n = 0;
    if (!buf) return -1;
    for (tok = strtok_r(buf, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save))
        out[n++] = strdup(tok);
    free(buf);
    return n;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    enum { O_MODELS = 256, O_TEXT, O_PART, O_POLICY, O_BUDGETS, O_WINDOWS, O_PREFILL,
           O_STEPS, O_EVERY, O_JSON, O_PNG, O_DATA };
    static const struct option lo[] = {
        {"models", 1, 0, O_MODELS}, {"text", 1, 0, O_TEXT}, {"part", 1, 0, O_PART},
        {"policy", 1, 0, O_POLICY}, {"budgets", 1, 0, O_BUDGETS}, {"windows", 1, 0, O_WINDOWS},
        {"prefill", 1, 0, O_PREFILL}, {"steps", 1, 0, O_STEPS}, {"every", 1, 0, O_EVERY},
        {"json", 1, 0, O_JSON}, {"png", 1, 0, O_PNG}, {"data", 1, 0, O_DATA},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    memset(o, 0, sizeof *o);
    o->data = data_dir();
    o->budgets[0] = 0.5; o->budgets[1] = 0.25; o->budgets[2] = 0.125;
    o->n_budgets = 3;
    o->windows = 8;
    o->prefill = 256;
    o->steps = 256;
    o->every = 8;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *b[MAX_BUDGETS + 1];
        int n;
        switch (c) {
        case O_MODELS: o->n_models = split_list(optarg, o->models, MAX_MODELS); break;
        case O_TEXT: o->text = optarg; break;
        case O_PART:
            o->part = optarg;
            if (strcmp(optarg, "first") && strcmp(optarg, "second") && strcmp(optarg, "all")) return 2;
            break;
        case O_POLICY: o->policy = optarg; break;
        case O_BUDGETS:
            n = split_list(optarg, b, MAX_BUDGETS);
            o->n_budgets = 0;
            for (int i = 0; i < n; i++) {
                double v = atof(b[i]);
                free(b[i]);
                if (!(v > 0.0 && v <= 1.0)) return 2;
                o->budgets[o->n_budgets++] = v;
            }
            if (o->n_budgets == 0) return 2;
            break;
        case O_WINDOWS: o->windows = atoi(optarg); if (o->windows < 1) return 2; break;
        case O_PREFILL: o->prefill = atoi(optarg); if (o->prefill < 2) return 2; break;
        case O_STEPS: o->steps = atoi(optarg); if (o->steps < 1) return 2; break;
        case O_EVERY: o->every = atoi(optarg); if (o->every < 1) return 2; break;
        case O_JSON: o->json = optarg; break;
        case O_PNG: o->png = optarg; break;
        case O_DATA: o->data = optarg; break;
        case 'h': return 1;
        default: return 2;
        }
    }
    return optind < argc ? 2 : 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* every directory under DATA/models with a config.json, base first */
static int list_models(const char *data, char **out, int max)
{
    char dir[1024], path[2048];
    int n = 0;
    snprintf(dir, sizeof dir, "%s/models", data);
    char **names = NULL;
    int cnt = 0;
    {
        DIR *d = opendir(dir);
        struct dirent *e;
        if (!d) return 0;
        while ((e = readdir(d)) && cnt < 64) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s/config.json", dir, e->d_name);
            if (access(path, R_OK)) continue;
            char **g = realloc(names, (size_t)(cnt + 1) * sizeof *g);
            if (!g) break;
            names = g;
            names[cnt++] = strdup(e->d_name);
        }
        closedir(d);
    }
    qsort(names, (size_t)cnt, sizeof *names, cmp_str);
    for (int i = 0; i < cnt; i++)
        if (!strcmp(names[i], "base") && n < max) out[n++] = strdup(names[i]);
    for (int i = 0; i < cnt; i++) {
        if (strcmp(names[i], "base") && n < max) out[n++] = strdup(names[i]);
        free(names[i]);
    }
    free(names);
    return n;
}

static const char *pol_label(int k)
{
    return k == SCDB_EVICT_LEARNED ? "distillcache" : scdb_evict_kind_name((scdb_evict_kind)k);
}

int scdb_bench_evict(int argc, char **argv)
{
    opts o;
    int prc = parse_opts(argc, argv, &o), ret = 1;
    scdb_evict_policy *pols[N_POL] = {0};
    char policy_path[1200], err[512];
    const char *trained_on = NULL;
    cJSON *json = NULL, *rows = NULL;
    int32_t *tok = NULL;

    if (prc == 1) { usage(stdout); return 0; }
    if (prc) {
        fprintf(stderr, "scdb bench evict: bad option or value\n\n");
        usage(stderr);
        return 2;
    }
    if (o.n_models == 0) o.n_models = list_models(o.data, o.models, MAX_MODELS);
    if (o.n_models <= 0) {
        fprintf(stderr, "scdb bench evict: no models under %s/models\n", o.data);
        return 1;
    }
    for (int k = 0; k < SCDB_EVICT_LEARNED; k++)
        if (scdb_evict_policy_new((scdb_evict_kind)k, &pols[k])) goto done;
    snprintf(policy_path, sizeof policy_path, "%s", o.policy ? o.policy : "");
    if (!o.policy)
        snprintf(policy_path, sizeof policy_path, "%s/policies/distillcache_base.safetensors", o.data);
    scdb_err rc = scdb_evict_policy_load(policy_path, &pols[SCDB_EVICT_LEARNED], err, sizeof err);
    if (rc) {
        fprintf(stderr, "scdb bench evict: no learned policy (%s: %s%s%s); heuristics only\n",
                policy_path, scdb_strerror(rc), err[0] ? ": " : "", err);
        if (o.policy) goto done;
    } else {
        trained_on = scdb_evict_policy_meta(pols[SCDB_EVICT_LEARNED], "trained_on");
    }

    const int W = o.prefill + o.steps;
    printf("# scdb bench evict\n\n"
           "Protocol: each window is %d + %d + 1 tokens (bytes).  Prefill %d tokens into an\n"
           "empty cache (features accumulate over all %d queries); the full-cache teacher then\n"
           "decodes the next %d tokens teacher-forced.  Each student starts from the same\n"
           "prefilled cache; before continuation steps 0, %d, %d, ... it evicts down to the\n"
           "budget B = fraction x %d tokens (so between evictions it holds B .. B+%d slots),\n"
           "then decodes the same tokens.  Per step: KL(teacher || student) of the next-token\n"
           "distributions (nats), top-1 agreement, and the true next token's NLL (ppl =\n"
           "exp(mean NLL)).  Means over %d steps x %d windows, evenly spaced over the text.\n"
           "One keep set for all layers and heads.  Overhead: accumulator updates +\n"
           "score/select/compact per decoded token; step: the full-cache forward per token.\n",
           o.prefill, o.steps, o.prefill, o.prefill, o.steps, o.every, 2 * o.every, W,
           o.every - 1, o.steps, o.windows);
    if (pols[SCDB_EVICT_LEARNED])
        printf("Learned policy: %s (trained on %s; zero-shot elsewhere).\n", policy_path,
               trained_on ? trained_on : "?");
    printf("\n| model | text | policy | budget | KL | top-1 | ppl | overhead us/tok | step us/tok |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);

    json = cJSON_CreateObject();
    cJSON_AddStringToObject(json, "bench", "evict");
    cJSON *proto = cJSON_AddObjectToObject(json, "protocol");
    cJSON_AddNumberToObject(proto, "prefill", o.prefill);
    cJSON_AddNumberToObject(proto, "steps", o.steps);
    cJSON_AddNumberToObject(proto, "every", o.every);
    cJSON_AddNumberToObject(proto, "windows", o.windows);
    if (pols[SCDB_EVICT_LEARNED]) cJSON_AddStringToObject(json, "policy_file", policy_path);
    rows = cJSON_AddArrayToObject(json, "rows");
    cJSON *goals = cJSON_AddArrayToObject(json, "goals");

    double worst_ratio = 0.0;
    for (int mi = 0; mi < o.n_models; mi++) {
        char dir[1200], tpath[1200];
        scdb_model *m = NULL;
        char *text = NULL;
        size_t len = 0;
        stat_sum st[N_POL][MAX_BUDGETS];
        double step_s = 0.0, nll_full = 0.0;
        memset(st, 0, sizeof st);

        snprintf(dir, sizeof dir, "%s/models/%s", o.data, o.models[mi]);
        if ((rc = scdb_model_load(dir, &m, err, sizeof err))) {
            fprintf(stderr, "scdb bench evict: %s: %s: %s\n", dir, scdb_strerror(rc), err);
            goto done;
        }
        const scdb_model_config *cfg = scdb_model_cfg(m);
        const char *part = o.part ? o.part : (o.text ? "all" : "second");
        if (o.text) snprintf(tpath, sizeof tpath, "%s", o.text);
        else scdb_model_heldout_path(o.data, cfg->domain, tpath, sizeof tpath);
        if (W > cfg->max_seq_len) {
            fprintf(stderr, "scdb bench evict: prefill + steps = %d exceeds %s's context %d\n",
                    W, cfg->name, cfg->max_seq_len);
            scdb_model_free(&m);
            goto done;
        }
        if ((rc = scdb_read_file(tpath, (size_t)1 << 30, &text, &len))) {
            fprintf(stderr, "scdb bench evict: %s: %s\n", tpath, scdb_strerror(rc));
            scdb_model_free(&m);
            goto done;
        }
        size_t off0 = 0, span = len;
        if (!strcmp(part, "first")) span = len / 2;
        else if (!strcmp(part, "second")) { off0 = len / 2; span = len - len / 2; }
        if (span < (size_t)W + 1) {
            fprintf(stderr, "scdb bench evict: %s (%s) has %zu bytes, a window needs %d\n",
                    tpath, part, span, W + 1);
            free(text);
            scdb_model_free(&m);
            goto done;
        }
        free(tok);
        tok = malloc((size_t)(W + 1) * sizeof *tok);
        if (!tok) { free(text); scdb_model_free(&m); goto done; }
        const char *tbase = strrchr(tpath, '/');
        tbase = tbase ? tbase + 1 : tpath;

        for (int wi = 0; wi < o.windows; wi++) {
            size_t off = off0 + (span - (size_t)W - 1) * (size_t)wi / (size_t)(o.windows > 1 ? o.windows - 1 : 1);
            scdb_evict_window *w = NULL;
            scdb_tokenize_bytes(text + off, (size_t)W + 1, tok);
            if ((rc = scdb_evict_window_new(m, tok, o.prefill, o.steps, &w))) {
                fprintf(stderr, "scdb bench evict: window: %s\n", scdb_strerror(rc));
                free(text);
                scdb_model_free(&m);
                goto done;
            }
            step_s += scdb_evict_window_step_s(w) / o.windows;
            nll_full += scdb_evict_window_nll_full(w) / o.windows;
            for (int k = SCDB_EVICT_STREAMING; k < N_POL; k++) {
                if (!pols[k]) continue;
                for (int b = 0; b < o.n_budgets; b++) {
                    scdb_evict_eval e;
                    int B = (int)(o.budgets[b] * W + 0.5);
                    if ((rc = scdb_evict_window_eval(w, pols[k], B < 1 ? 1 : B, o.every, NULL, &e))) {
                        fprintf(stderr, "scdb bench evict: %s: %s\n", pol_label(k), scdb_strerror(rc));
                        scdb_evict_window_free(&w);
                        free(text);
                        scdb_model_free(&m);
                        goto done;
                    }
                    stat_sum *s = &st[k][b];
                    s->kl += e.kl; s->top1 += e.top1; s->nll += e.nll;
                    s->pol_s += e.policy_s; s->model_s += e.model_s;
                    s->steps += e.steps; s->runs++;
                }
            }
            scdb_evict_window_free(&w);
            fprintf(stderr, "bench evict: %s window %d/%d done\n", cfg->name, wi + 1, o.windows);
        }
        free(text);

        int zero_shot = trained_on && strcmp(trained_on, cfg->name) != 0;
        for (int b = 0; b < o.n_budgets; b++) {
            double best_h = INFINITY;
            for (int k = 0; k < N_POL; k++) {
                if (!pols[k]) continue;
                double kl = 0, top1 = 1, ppl = exp(nll_full), us = 0.0;
                if (k != SCDB_EVICT_FULL) {
                    stat_sum *s = &st[k][b];
                    kl = s->kl / s->runs;
                    top1 = s->top1 / s->runs;
                    ppl = exp(s->nll / s->runs);
                    us = s->pol_s / s->steps * 1e6;
                    if (k != SCDB_EVICT_LEARNED && kl < best_h) best_h = kl;
                }
                char label[64];
                snprintf(label, sizeof label, "%s%s", pol_label(k),
                         k == SCDB_EVICT_LEARNED && zero_shot ? " (zero-shot)" : "");
                printf("| %s | %s | %s | %.3f | %.5f | %.4f | %.3f | %.1f | %.0f |\n", cfg->name,
                       tbase, label, o.budgets[b], kl, top1, ppl, us, step_s * 1e6);
                cJSON *r = cJSON_CreateObject();
                cJSON_AddStringToObject(r, "model", cfg->name);
                cJSON_AddStringToObject(r, "policy", pol_label(k));
                cJSON_AddNumberToObject(r, "budget", o.budgets[b]);
                cJSON_AddNumberToObject(r, "kl", kl);
                cJSON_AddNumberToObject(r, "top1", top1);
                cJSON_AddNumberToObject(r, "ppl", ppl);
                cJSON_AddNumberToObject(r, "us_per_token", us);
                cJSON_AddNumberToObject(r, "model_us_per_token", step_s * 1e6);
                cJSON_AddNumberToObject(r, "budget_tokens", (int)(o.budgets[b] * W + 0.5));
                cJSON_AddStringToObject(r, "text", tbase);
                cJSON_AddStringToObject(r, "part", part);
                if (k == SCDB_EVICT_LEARNED) cJSON_AddBoolToObject(r, "zero_shot", zero_shot);
                cJSON_AddItemToArray(rows, r);
                if (k == SCDB_EVICT_LEARNED && us / (step_s * 1e6) > worst_ratio)
                    worst_ratio = us / (step_s * 1e6);
            }
            if (pols[SCDB_EVICT_LEARNED]) {
                stat_sum *s = &st[SCDB_EVICT_LEARNED][b];
                double kl = s->kl / s->runs, top1 = s->top1 / s->runs;
                cJSON *g = cJSON_CreateObject();
                cJSON_AddStringToObject(g, "model", cfg->name);
                cJSON_AddNumberToObject(g, "budget", o.budgets[b]);
                cJSON_AddNumberToObject(g, "learned_kl", kl);
                cJSON_AddNumberToObject(g, "best_heuristic_kl", best_h);
                cJSON_AddBoolToObject(g, "beats_every_heuristic", kl < best_h);
                cJSON_AddNumberToObject(g, "top1_vs_full", top1);
                cJSON_AddBoolToObject(g, "zero_shot", zero_shot);
                cJSON_AddItemToArray(goals, g);
            }
        }
        fflush(stdout);
        scdb_model_free(&m);
    }

    /* goals */
    if (pols[SCDB_EVICT_LEARNED]) {
        printf("\nGoals (learned policy):\n");
        cJSON *g;
        cJSON_ArrayForEach(g, goals) {
            double bud = cJSON_GetObjectItem(g, "budget")->valuedouble;
            const char *mn = cJSON_GetObjectItem(g, "model")->valuestring;
            int zs = cJSON_IsTrue(cJSON_GetObjectItem(g, "zero_shot"));
            double kl = cJSON_GetObjectItem(g, "learned_kl")->valuedouble;
            double bh = cJSON_GetObjectItem(g, "best_heuristic_kl")->valuedouble;
            double t1 = cJSON_GetObjectItem(g, "top1_vs_full")->valuedouble;
            printf("  %-10s budget %.3f%s: KL %.5f vs best heuristic %.5f -> %s",
                   mn, bud, zs ? " (zero-shot)" : "", kl, bh,
                   kl < bh ? "better" : (kl <= bh * 1.0000001 ? "equal" : "WORSE"));
            if (fabs(bud - 0.25) < 1e-9)
                printf("; top-1 agreement %.1f%% of full cache (goal >= 94%%) -> %s",
                       100.0 * t1, t1 >= 0.94 ? "met" : "NOT met");
            printf("\n");
        }
        printf("  overhead: at most %.1f%% of the model's step time\n", 100.0 * worst_ratio);
    }

    if (o.json || o.png) {
        char tmpjson[256] = "";
        const char *jpath = o.json;
        if (!jpath) {
            snprintf(tmpjson, sizeof tmpjson, "/tmp/scdb_bench_evict_%d.json", (int)getpid());
            jpath = tmpjson;
        }
        if (scdb_bench_write_json(jpath, json, "scdb bench evict")) goto done;
        if (o.json) printf("\nwrote %s\n", o.json);
        if (o.png) {
            char script[1400], cmd[4096];
            snprintf(script, sizeof script, "%s/tools/plot_evict.py", scdb_share_dir());
            if (access(script, R_OK) || access("/usr/bin/python3", X_OK)) {
                printf("no PNG: %s or /usr/bin/python3 is missing\n", script);
            } else {
                snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, jpath, o.png);
                if (system(cmd) == 0) printf("wrote %s\n", o.png);
                else printf("no PNG: %s failed (is matplotlib installed?)\n", script);
            }
        }
        if (tmpjson[0]) unlink(tmpjson);
    }
    ret = 0;
done:
    for (int k = 0; k < N_POL; k++) scdb_evict_policy_free(&pols[k]);
    for (int i = 0; i < o.n_models; i++) free(o.models[i]);
    cJSON_Delete(json);
    free(tok);
    return ret;
}
