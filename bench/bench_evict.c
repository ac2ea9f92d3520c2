/* bench_evict.c — `scdb bench evict`: live-cache eviction quality and cost.
 *
 * For every model (by default each bundled model), every text, every policy
 * (full cache, StreamingLLM, H2O, SnapKV, TOVA and one or more learned
 * DistillCache MLPs) and every budget, run the protocol of evict.h on N
 * windows of the text and report KL to the full cache, top-1 agreement with
 * it, perplexity, and the policy's overhead per token next to the model's
 * own step time.
 *
 * Texts: by default the domain suite (evict.h, "Domain suite";
 * data/evict_suite): every domain's eval text, the seen domains (those the
 * learned policy trained on) and the unseen ones (never trained on) reported
 * apart; --heldout instead measures each model on the second half of its own
 * domain's held-out text (data/heldout, the bench before the suite); --text
 * adds any file or folder (a folder: its files, sorted, joined).  Rows carry
 * `domain` and `seen` (false for a domain the policy never trained on).
 * Budgets 50%, 25%, 12.5% and 6.25% by default; the shipped policy and the
 * one shipped before it (distillcache_base.refit) side by side.  A summary per
 * (learned policy, budget, seen / unseen): geometric mean of KL / the best
 * heuristic's KL, pairs where the policy's KL is lowest, overhead mean and
 * worst row.  Markdown tables on stdout, {"rows":[...],"summary":[...]}
 * JSON with --json, a PNG with --png (tools/plot_evict.py, matplotlib).  A
 * run that measures nothing exits 1. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "evict.h"
#include "evict_train.h"
#include "model.h"

int scdb_bench_evict(int argc, char **argv);
int scdb_bench_evict_llama(int argc, char **argv);   /* bench_evict_llama.c */

#define MAX_MODELS 8
#define MAX_BUDGETS 6
#define MAX_LEARNED 8
#define MAX_TEXTS 16
#define MAX_SOURCES 64
/* The heuristics measured: the full cache, the four the goals count (one
 * keep set, as the runtime shares it) and the originals' own granularity
 * (a keep set per (layer, KV group) for H2O and SnapKV, per layer for
 * TOVA: evict.h, "Keep sets per head"), reported beside them. */
static const scdb_evict_kind HEUR_KINDS[] = {
    SCDB_EVICT_FULL,     SCDB_EVICT_STREAMING,   SCDB_EVICT_H2O,       SCDB_EVICT_SNAPKV,
    SCDB_EVICT_TOVA,     SCDB_EVICT_H2O_HEAD,    SCDB_EVICT_SNAPKV_HEAD, SCDB_EVICT_TOVA_LAYER};
#define N_HEUR 8
#define N_SHARED_HEUR 5                      /* indices below: full and the four counted */
#define MAX_POL (N_HEUR + MAX_LEARNED)
#define MAX_TEXT_BYTES ((size_t)64 << 20)
#define CURRENT_POLICY "distillcache_base.safetensors"
#define PREVIOUS_POLICY "distillcache_base.refit.safetensors"   /* the file shipped before */

typedef struct opts {
    const char *data, *json, *png, *part, *suite;
    const char *policies[MAX_LEARNED];
    int n_policies;
    const char *texts[MAX_TEXTS];
    int n_texts;
    char *models[MAX_MODELS];
    int n_models;
    char *domains[MAX_SOURCES];
    int n_domains;
    int heldout, use_suite;
    int no_per_head;           /* --no-per-head: only the four heuristics the goals count */
    scdb_evict_part portion;   /* of suite domains: eval (default), val or train */
    double budgets[MAX_BUDGETS];
    int n_budgets;
    int windows, prefill, steps, every;
} opts;

/* One text measured: a suite domain's eval text, a model's held-out text
 * (for that model only) or a --text file / folder. */
typedef struct source {
    char domain[64], label[256], path[1200];
    const char *split;         /* "seen", "unseen" or "other" */
    const char *part;          /* the portion measured: eval, second, first, all */
    int suite_index;           /* domain index in the suite, -1 if not a suite text */
    int for_model;             /* --heldout: the model it belongs to; -1: every model */
} source;

typedef struct stat_sum {
    double kl, top1, nll, pol_s, model_s;
    long steps;
    int runs;
    double *kl_w;              /* [windows] */
} stat_sum;

static const char *data_dir(void) { return scdb_data_dir(); }

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb bench evict [options]\n\n"
            "KV-cache eviction: KL to the full cache, top-1 agreement, perplexity and\n"
            "policy overhead of every policy at every budget (see the protocol it prints).\n"
            "--engine llama.cpp runs the protocol with llama.cpp generating, each policy\n"
            "applied to llama.cpp's own cache (`scdb bench evict --engine llama.cpp --help`).\n\n"
            "  --models A,B,..   models under DATA/models (default: every model there)\n"
            "  --suite FILE      domain suite manifest (default DATA/evict_suite/manifest.json):\n"
            "                    every domain's eval text; seen and unseen domains apart\n"
            "  --domains A,B,..  only these suite domains\n"
            "  --portion P       eval | val | train: which suite text (default eval; val and\n"
            "                    train exist for seen domains only, the others are skipped)\n"
            "  --heldout         instead of the suite: each model on the second half of its\n"
            "                    own domain's DATA/heldout/<domain>.txt\n"
            "  --text PATH       also (or, without --suite, instead) a file or a folder (its\n"
            "                    files, recursively, sorted, joined); repeatable; reported as\n"
            "                    unseen domains named after the file or folder\n"
            "  --part P          second | first | all of each --text (default all)\n"
            "  --policy FILE     learned policy; repeatable: the first is `distillcache`, the\n"
            "                    others are named after their files and measured in the same\n"
            "                    run (default: DATA/policies/distillcache_base.safetensors as\n"
            "                    `distillcache` and, if present, the previous shipped file\n"
            "                    DATA/policies/distillcache_base.refit.safetensors as `previous`)\n"
            "  --budgets F,..    budget fractions of prefill + steps (default\n"
            "                    0.5,0.25,0.125,0.0625)\n"
            "  --windows N       windows per text, evenly spaced (default 8)\n"
            "  --no-per-head     leave out the per-head heuristics (h2o_head, snapkv_head,\n"
            "                    tova_layer: the originals' keep sets per head / layer); the\n"
            "                    goals count the four with one keep set either way\n"
            "  --prefill P       prefill tokens (default 256)\n"
            "  --steps T         teacher-forced continuation steps (default 256)\n"
            "  --every C         evict every C steps (default 8)\n"
            "  --json FILE       write {\"rows\":[{model,domain,seen,split,policy,label,budget,kl,\n"
            "                    top1,ppl,..}], \"summary\":[{label,budget,split,pairs,\n"
            "                    kl_ratio_geomean,kl_lowest,top1_at_least_best,overhead_mean,\n"
            "                    overhead_worst,..}]} (the summary: per learned policy, budget\n"
            "                    and seen / unseen / other texts; KL ratio = KL / the best\n"
            "                    heuristic's on the same (model, domain); overhead = policy\n"
            "                    time / model step time)\n"
            "  --png FILE        plot (tools/plot_evict.py, matplotlib)\n"
            "  --data DIR        asset directory (default %s)\n"
            "  -h, --help        this text\n",
            data_dir());
}

/* The most tokens --prefill, --steps and --every take: far above any
 * model's context, low enough that prefill + steps cannot overflow. */
#define MAX_OPT_TOKENS (1 << 24)

/* --budgets F,..: each fraction in (0, 1]; 0 or -1 after a message in why */
static int parse_budgets(const char *arg, opts *o, char *why, size_t why_len)
{
    char *b[MAX_BUDGETS + 1];
    int n = scdb_split_list(arg, b, MAX_BUDGETS), bad = 0;
    o->n_budgets = 0;
    if (n < 0) {
        scdb_errf(why, why_len, "--budgets '%s': 1 to %d fractions, comma-separated, no empty field",
                  arg, MAX_BUDGETS);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        double v = 0.0;
        if (!bad && scdb_parse_f64("--budgets", b[i], 0.0, 1.0, &v, why, why_len)) bad = 1;
        else if (!bad && !(v > 0.0)) {
            scdb_errf(why, why_len, "--budgets '%s': a budget must be above 0", b[i]);
            bad = 1;
        }
        if (!bad) o->budgets[o->n_budgets++] = v;
        free(b[i]);
    }
    if (!bad && o->n_budgets == 0) {
        scdb_errf(why, why_len, "--budgets '%s': no budget given", arg);
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* argv -> *o: 0 to run, 1 for --help, 2 for a bad command line (why says
 * which option and why) */
static int parse_opts(int argc, char **argv, opts *o, char *why, size_t why_len)
{
    enum { O_MODELS = 256, O_TEXT, O_PART, O_POLICY, O_BUDGETS, O_WINDOWS, O_PREFILL,
           O_STEPS, O_EVERY, O_JSON, O_PNG, O_DATA, O_SUITE, O_DOMAINS, O_HELDOUT, O_PORTION,
           O_NOPH };
    static const struct option lo[] = {
        {"models", 1, 0, O_MODELS}, {"text", 1, 0, O_TEXT}, {"part", 1, 0, O_PART},
        {"policy", 1, 0, O_POLICY}, {"budgets", 1, 0, O_BUDGETS}, {"windows", 1, 0, O_WINDOWS},
        {"prefill", 1, 0, O_PREFILL}, {"steps", 1, 0, O_STEPS}, {"every", 1, 0, O_EVERY},
        {"json", 1, 0, O_JSON}, {"png", 1, 0, O_PNG}, {"data", 1, 0, O_DATA},
        {"suite", 1, 0, O_SUITE}, {"domains", 1, 0, O_DOMAINS}, {"heldout", 0, 0, O_HELDOUT},
        {"portion", 1, 0, O_PORTION}, {"no-per-head", 0, 0, O_NOPH},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    memset(o, 0, sizeof *o);
    o->data = data_dir();
    o->budgets[0] = 0.5; o->budgets[1] = 0.25; o->budgets[2] = 0.125; o->budgets[3] = 0.0625;
    o->n_budgets = 4;
    o->windows = 8;
    o->prefill = 256;
    o->steps = 256;
    o->every = 8;
    o->portion = SCDB_EVICT_PART_EVAL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        scdb_err bad = SCDB_OK;
        switch (c) {
        case O_MODELS:   /* given again: the last list counts */
            for (int i = 0; i < o->n_models; i++) free(o->models[i]);
            if ((o->n_models = scdb_split_list(optarg, o->models, MAX_MODELS)) < 1) {
                o->n_models = 0;
                scdb_errf(why, why_len, "--models '%s': 1 to %d names, comma-separated, no empty "
                          "field", optarg, MAX_MODELS);
                return 2;
            }
            break;
        case O_TEXT:
            if (o->n_texts == MAX_TEXTS) {
                scdb_errf(why, why_len, "--text: at most %d texts", MAX_TEXTS);
                return 2;
            }
            o->texts[o->n_texts++] = optarg;
            break;
        case O_PART:
            o->part = optarg;
            if (strcmp(optarg, "first") && strcmp(optarg, "second") && strcmp(optarg, "all")) {
                scdb_errf(why, why_len, "--part wants first, second or all, not '%s'", optarg);
                return 2;
            }
            break;
        case O_POLICY:
            if (o->n_policies == MAX_LEARNED) {
                scdb_errf(why, why_len, "--policy: at most %d learned policies", MAX_LEARNED);
                return 2;
            }
            o->policies[o->n_policies++] = optarg;
            break;
        case O_BUDGETS:
            if (parse_budgets(optarg, o, why, why_len)) return 2;
            break;
        case O_WINDOWS:
            bad = scdb_parse_int("--windows", optarg, 1, INT_MAX, &o->windows, why, why_len);
            break;
        case O_NOPH: o->no_per_head = 1; break;
        case O_PREFILL:
            bad = scdb_parse_int("--prefill", optarg, 2, MAX_OPT_TOKENS, &o->prefill, why, why_len);
            break;
        case O_STEPS:
            bad = scdb_parse_int("--steps", optarg, 1, MAX_OPT_TOKENS, &o->steps, why, why_len);
            break;
        case O_EVERY:
            bad = scdb_parse_int("--every", optarg, 1, MAX_OPT_TOKENS, &o->every, why, why_len);
            break;
        case O_JSON: o->json = optarg; break;
        case O_PNG: o->png = optarg; break;
        case O_DATA: o->data = optarg; break;
        case O_SUITE: o->suite = optarg; o->use_suite = 1; break;
        case O_DOMAINS:
            for (int i = 0; i < o->n_domains; i++) free(o->domains[i]);
            if ((o->n_domains = scdb_split_list(optarg, o->domains, MAX_SOURCES)) < 1) {
                o->n_domains = 0;
                scdb_errf(why, why_len, "--domains '%s': 1 to %d names, comma-separated, no empty "
                          "field", optarg, MAX_SOURCES);
                return 2;
            }
            o->use_suite = 1;
            break;
        case O_HELDOUT: o->heldout = 1; break;
        case O_PORTION:
            if (!strcmp(optarg, "eval")) o->portion = SCDB_EVICT_PART_EVAL;
            else if (!strcmp(optarg, "val")) o->portion = SCDB_EVICT_PART_VAL;
            else if (!strcmp(optarg, "train")) o->portion = SCDB_EVICT_PART_TRAIN;
            else {
                scdb_errf(why, why_len, "--portion wants eval, val or train, not '%s'", optarg);
                return 2;
            }
            o->use_suite = 1;
            break;
        case 'h': return 1;
        default:   /* getopt_long has named the option */
            scdb_errf(why, why_len, "unknown or incomplete option");
            return 2;
        }
        if (bad) return 2;
    }
    if (o->heldout && o->use_suite) {
        scdb_errf(why, why_len, "--heldout measures instead of the suite: not with --suite, "
                                "--domains or --portion");
        return 2;
    }
    if (!o->heldout && !o->n_texts) o->use_suite = 1;
    if (optind < argc) {
        scdb_errf(why, why_len, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    return 0;
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

/* ------------------------------------------------------------ --text folders */

typedef struct buf { char *p; size_t n, cap; } buf;

static int buf_add(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 65536;
        while (b->n + n + 1 > nc) nc *= 2;
        char *g = realloc(b->p, nc);
        if (!g) return -1;
        b->p = g;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* The regular files under dir, recursively, sorted by path, appended to
 * names (malloc'd); text files only is decided when they are read. */
static int list_tree(const char *dir, char ***names, int *n, int *cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d))) {
        char p[4096];
        struct stat st;
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st)) continue;
        if (S_ISDIR(st.st_mode)) { list_tree(p, names, n, cap); continue; }
        if (!S_ISREG(st.st_mode)) continue;
        if (*n == *cap) {
            int nc = *cap ? 2 * *cap : 256;
            char **g = realloc(*names, (size_t)nc * sizeof *g);
            if (!g) break;
            *names = g;
            *cap = nc;
        }
        (*names)[(*n)++] = strdup(p);
    }
    closedir(d);
    return 0;
}

/* A --text file, or a folder's text files (no NUL byte) joined with '\n',
 * up to MAX_TEXT_BYTES. */
static scdb_err read_text_path(const char *path, char **out, size_t *len)
{
    struct stat st;
    if (stat(path, &st)) return SCDB_ENOTFOUND;
    if (!S_ISDIR(st.st_mode)) return scdb_read_file(path, MAX_TEXT_BYTES, out, len);
    char **names = NULL;
    int n = 0, cap = 0;
    buf b = {0};
    list_tree(path, &names, &n, &cap);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char *t = NULL;
        size_t l = 0;
        if (b.n < MAX_TEXT_BYTES && !scdb_read_file(names[i], MAX_TEXT_BYTES, &t, &l) && l > 0 &&
            !memchr(t, 0, l)) {
            if (b.n) buf_add(&b, "\n", 1);
            buf_add(&b, t, l < MAX_TEXT_BYTES - b.n ? l : MAX_TEXT_BYTES - b.n);
        }
        free(t);
        free(names[i]);
    }
    free(names);
    if (!b.p) return SCDB_ENOTFOUND;
    *out = b.p;
    *len = b.n;
    return SCDB_OK;
}

/* ------------------------------------------------------------ policies */

typedef struct learned {
    scdb_evict_policy *p;
    char label[96], path[1200];
    const char *shown;                   /* path as the output names it: relative to --data */
    const char *trained_on, *domains;    /* metadata: models, training domains */
    const char *heads_trained_on;        /* the per-head scorer's models (NULL: as trained_on) */
} learned;

/* "a,b,c" contains name */
static const char *heur_label(int k) { return scdb_evict_kind_name(HEUR_KINDS[k]); }
/* policy index k is a per-head heuristic this run leaves out (--no-per-head) */
static int skip_heur(const opts *o, int k) { return o->no_per_head && k >= N_SHARED_HEUR && k < N_HEUR; }

/* ------------------------------------------------------------ tables */

static cJSON *row_get(const cJSON *r, const char *k) { return cJSON_GetObjectItemCaseSensitive(r, k); }
static const char *row_str(const cJSON *r, const char *k)
{
    const cJSON *v = row_get(r, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}
static double row_num(const cJSON *r, const char *k)
{
    const cJSON *v = row_get(r, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void print_full_table(const cJSON *rows, const char *split, const char *title)
{
    const cJSON *r;
    int any = 0;
    cJSON_ArrayForEach(r, rows) any |= !strcmp(row_str(r, "split"), split);
    if (!any) return;
    printf("\n## %s\n\n| model | domain | text | policy | budget | KL | top-1 | ppl | overhead us/tok | step us/tok |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n", title);
    cJSON_ArrayForEach(r, rows) {
        if (strcmp(row_str(r, "split"), split)) continue;
        printf("| %s | %s | %s | %s | %.4f | %.5f | %.4f | %.3f | %.1f | %.0f |\n", row_str(r, "model"),
               row_str(r, "domain"), row_str(r, "text"), row_str(r, "label"), row_num(r, "budget"),
               row_num(r, "kl"), row_num(r, "top1"), row_num(r, "ppl"), row_num(r, "us_per_token"),
               row_num(r, "model_us_per_token"));
    }
}

/* One line per (model, domain) at one budget: KL of every policy, the
 * lowest in bold; the learned policy's top-1 against the best heuristic's. */
static void print_domain_table(const cJSON *rows, const char *split, const char *title,
                               double budget, const char *const *labels, int n_lab, int first_learned)
{
    const cJSON *r;
    int any = 0;
    cJSON_ArrayForEach(r, rows)
        any |= !strcmp(row_str(r, "split"), split) && fabs(row_num(r, "budget") - budget) < 1e-9;
    if (!any) return;
    printf("\n### %s, budget %.4f: KL (lowest in bold); top-1 of the learned policy vs the best "
           "heuristic's\n\n| model | domain |", title, budget);
    for (int k = 0; k < n_lab; k++) printf(" %s |", labels[k]);
    printf(" top-1 learned / best heuristic |\n|---|---|");
    for (int k = 0; k < n_lab; k++) printf("---|");
    printf("---|\n");
    char last_key[200] = "";
    cJSON_ArrayForEach(r, rows) {
        if (strcmp(row_str(r, "split"), split) || fabs(row_num(r, "budget") - budget) > 1e-9)
            continue;
        char key[200];
        snprintf(key, sizeof key, "%s/%s", row_str(r, "model"), row_str(r, "domain"));
        if (!strcmp(key, last_key)) continue;
        snprintf(last_key, sizeof last_key, "%s", key);
        double kl[MAX_POL], t1[MAX_POL], best = INFINITY, best_h_t1 = -1;
        for (int k = 0; k < n_lab; k++) {
            kl[k] = NAN;
            t1[k] = NAN;
            const cJSON *q;
            cJSON_ArrayForEach(q, rows)
                if (!strcmp(row_str(q, "model"), row_str(r, "model")) &&
                    !strcmp(row_str(q, "domain"), row_str(r, "domain")) &&
                    fabs(row_num(q, "budget") - budget) < 1e-9 &&
                    !strcmp(row_str(q, "label"), labels[k])) {
                    kl[k] = row_num(q, "kl");
                    t1[k] = row_num(q, "top1");
                }
            if (kl[k] < best) best = kl[k];
            if (k < N_SHARED_HEUR - 1 && t1[k] > best_h_t1) best_h_t1 = t1[k];
        }
        printf("| %s | %s |", row_str(r, "model"), row_str(r, "domain"));
        for (int k = 0; k < n_lab; k++)
            printf(kl[k] == best ? " **%.5f** |" : " %.5f |", kl[k]);
        if (n_lab > first_learned) printf(" %.4f / %.4f |\n", t1[first_learned], best_h_t1);
        else printf(" - |\n");
    }
}

/* ------------------------------------------------------------ the run */

static const char *const split_names[] = {"seen", "unseen", "other"};
static const char *const split_titles[] = {"Seen domains", "Unseen domains", "Other texts"};

/* Everything one run holds: its options, the policies, the texts, the
 * buffers of the evaluation and the rows it produces. */
typedef struct run {
    opts o;
    scdb_evict_policy *heur[N_HEUR];
    learned lp[MAX_LEARNED];
    int n_learned;
    source src[MAX_SOURCES];
    int n_src;
    char err[512], suite_path[1200];
    scdb_evict_suite *suite;
    cJSON *json, *rows;        /* rows: the "rows" array inside json */
    int32_t *tok;              /* [W + 1] */
    stat_sum *st;              /* [MAX_POL * MAX_BUDGETS] */
    int W, NP;                 /* window tokens (prefill + steps); policies measured */
    double t_start;
} run;

/* The heuristics, then the learned policies: the --policy files, or the
 * shipped one if present (without it: heuristics only).  0 or -1. */
static int load_policies(run *r)
{
    const opts *o = &r->o;
    for (int k = 0; k < N_HEUR; k++)
        if (scdb_evict_policy_new(HEUR_KINDS[k], &r->heur[k])) return -1;
    int n_pf = o->n_policies ? o->n_policies : 2;
    for (int i = 0; i < n_pf; i++) {
        learned *L = &r->lp[r->n_learned];
        scdb_err rc;
        if (o->n_policies) snprintf(L->path, sizeof L->path, "%s", o->policies[i]);
        else snprintf(L->path, sizeof L->path, "%s/policies/%s", o->data,
                      i == 0 ? CURRENT_POLICY : PREVIOUS_POLICY);
        /* the previous shipped file is optional */
        if (!o->n_policies && i == 1 && access(L->path, R_OK)) continue;
        rc = scdb_evict_policy_load(L->path, &L->p, r->err, sizeof r->err);
        if (rc) {
            fprintf(stderr, "scdb bench evict: no learned policy (%s: %s%s%s)%s\n", L->path,
                    scdb_strerror(rc), r->err[0] ? ": " : "", r->err,
                    o->n_policies ? "" : i ? "; without the previous one" : "; heuristics only");
            if (o->n_policies) return -1;
            continue;
        }
        L->shown = scdb_path_relative(L->path, o->data);
        L->trained_on = scdb_evict_policy_meta(L->p, "trained_on");
        L->heads_trained_on = scdb_evict_policy_meta(L->p, "heads_trained_on");
        L->domains = scdb_evict_policy_meta(L->p, "domains");
        if (r->n_learned == 0) {
            snprintf(L->label, sizeof L->label, "distillcache");
        } else if (!o->n_policies) {
            snprintf(L->label, sizeof L->label, "previous");
        } else {
            const char *b = strrchr(L->path, '/');
            b = b ? b + 1 : L->path;
            size_t bl = strlen(b);
            if (bl > 12 && !strcmp(b + bl - 12, ".safetensors")) bl -= 12;
            snprintf(L->label, sizeof L->label, "%.*s", (int)(bl < 90 ? bl : 90), b);
            for (int j = 0; j < r->n_learned; j++)
                if (!strcmp(r->lp[j].label, L->label) || !strcmp(L->label, "distillcache"))
                    snprintf(L->label, sizeof L->label, "learned%d", r->n_learned + 1);
        }
        r->n_learned++;
    }
    return 0;
}

/* The suite's domains (--domains of them), seen first, then unseen, each
 * in manifest order.  0, 1 (the suite did not load) or 2 (no such domain). */
static int add_suite_sources(run *r)
{
    const opts *o = &r->o;
    scdb_err rc;
    if (o->suite) snprintf(r->suite_path, sizeof r->suite_path, "%s", o->suite);
    else snprintf(r->suite_path, sizeof r->suite_path, "%s/evict_suite/manifest.json", o->data);
    if ((rc = scdb_evict_suite_load(r->suite_path, &r->suite, r->err, sizeof r->err))) {
        fprintf(stderr, "scdb bench evict: %s: %s\n", scdb_strerror(rc), r->err);
        return 1;
    }
    for (int i = 0; i < o->n_domains; i++)
        if (scdb_evict_suite_find(r->suite, o->domains[i]) < 0) {
            fprintf(stderr, "scdb bench evict: no domain '%s' in %s\n", o->domains[i], r->suite_path);
            return 2;
        }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < r->suite->n_domains && r->n_src < MAX_SOURCES; i++) {
            const scdb_evict_suite_domain *d = &r->suite->domains[i];
            int want = 1;
            if (o->n_domains) {
                want = 0;
                for (int j = 0; j < o->n_domains; j++) want |= !strcmp(o->domains[j], d->name);
            }
            if (!want || d->seen != (pass == 0) || !d->part[o->portion].present) continue;
            source *s = &r->src[r->n_src++];
            memset(s, 0, sizeof *s);
            snprintf(s->domain, sizeof s->domain, "%s", d->name);
            snprintf(s->path, sizeof s->path, "%s", d->part[o->portion].text_path);
            const char *b = strrchr(s->path, '/');
            scdb_str_cut(s->label, sizeof s->label, b ? b + 1 : s->path);
            s->split = d->seen ? "seen" : "unseen";
            s->part = scdb_evict_part_name(o->portion);
            s->suite_index = i;
            s->for_model = -1;
        }
    return 0;
}

/* --heldout: each model's own domain's held-out text.  0 or 1. */
static int add_heldout_sources(run *r)
{
    const opts *o = &r->o;
    for (int mi = 0; mi < o->n_models && r->n_src < MAX_SOURCES; mi++) {
        char cfgp[1200];
        scdb_model_config cfg;
        snprintf(cfgp, sizeof cfgp, "%s/models/%s/config.json", o->data, o->models[mi]);
        if (scdb_model_config_load(cfgp, &cfg, r->err, sizeof r->err)) {
            fprintf(stderr, "scdb bench evict: %s: %s\n", cfgp, r->err);
            return 1;
        }
        source *s = &r->src[r->n_src++];
        memset(s, 0, sizeof *s);
        const char *dom = cfg.domain[0] ? cfg.domain : "english";
        snprintf(s->domain, sizeof s->domain, "%s", dom);
        scdb_model_heldout_path(o->data, cfg.domain, s->path, sizeof s->path);
        snprintf(s->label, sizeof s->label, "%s.txt", dom);
        s->split = "other";
        s->part = "second";
        s->suite_index = -1;
        s->for_model = mi;
    }
    return 0;
}

static void add_text_sources(run *r)
{
    const opts *o = &r->o;
    for (int i = 0; i < o->n_texts && r->n_src < MAX_SOURCES; i++) {
        source *s = &r->src[r->n_src++];
        memset(s, 0, sizeof *s);
        snprintf(s->path, sizeof s->path, "%s", o->texts[i]);
        size_t l = strlen(s->path);
        while (l > 1 && s->path[l - 1] == '/') s->path[--l] = 0;
        const char *b = strrchr(s->path, '/');
        scdb_str_cut(s->label, sizeof s->label, b ? b + 1 : s->path);
        scdb_str_cut(s->domain, sizeof s->domain, s->label);
        s->split = "other";
        s->part = o->part ? o->part : "all";
        s->suite_index = -1;
        s->for_model = -1;
    }
}

/* Every text to measure, then which of them are seen.  0, 1 or 2 (the
 * exit code of a bad --domains). */
static int collect_sources(run *r)
{
    int ret;
    if (r->o.use_suite && (ret = add_suite_sources(r))) return ret;
    if (r->o.heldout && (ret = add_heldout_sources(r))) return ret;
    add_text_sources(r);
    /* a learned policy that names its training domains decides `seen`;
     * otherwise the suite's split does (--text and --heldout texts: other) */
    for (int i = 0; i < r->n_src; i++) {
        if (!r->n_learned || !r->lp[0].domains) continue;
        if (scdb_list_has(r->lp[0].domains, r->src[i].domain)) r->src[i].split = "seen";
        else if (r->src[i].suite_index >= 0) r->src[i].split = "unseen";
    }
    return 0;
}

static void print_protocol(const run *r)
{
    const opts *o = &r->o;
    printf("# scdb bench evict\n\n"
           "Protocol: each window is %d + %d + 1 tokens (bytes).  Prefill %d tokens into an\n"
           "empty cache (features accumulate over all %d queries); the full-cache teacher then\n"
           "decodes the next %d tokens teacher-forced.  Each student starts from the same\n"
           "prefilled cache; before continuation steps 0, %d, %d, ... it evicts down to the\n"
           "budget B = fraction x %d tokens (so between evictions it holds B .. B+%d slots),\n"
           "then decodes the same tokens.  Per step: KL(teacher || student) of the next-token\n"
           "distributions (nats), top-1 agreement, and the true next token's NLL (ppl =\n"
           "exp(mean NLL)).  Means over %d steps x %d windows, evenly spaced over each text.\n"
           "The shared heuristics keep one set for all layers and heads; the *_head ones and\n"
           "a learned policy at a budget its scorer covers keep one per (layer, KV group).\n"
           "Overhead: accumulator updates +\n"
           "score/select/compact per decoded token; step: the full-cache forward per token;\n"
           "both in CPU time of the bench's thread (other work on the machine inflates neither).\n",
           o->prefill, o->steps, o->prefill, o->prefill, o->steps, o->every, 2 * o->every, r->W,
           o->every - 1, o->steps, o->windows);
    if (r->suite)
        printf("Texts: the domain suite %s (%s texts); seen = the learned policy trained on\n"
               "the domain's train text, unseen = it never saw the domain.\n",
               scdb_path_relative(r->suite_path, o->data),
               scdb_evict_part_name(o->portion));
    for (int i = 0; i < r->n_learned; i++)
        printf("Learned policy `%s`: %s (trained on models %s%s%s; domains %s).\n", r->lp[i].label,
               r->lp[i].shown, r->lp[i].trained_on ? r->lp[i].trained_on : "?",
               r->lp[i].heads_trained_on ? ", its per-head scorer on " : "",
               r->lp[i].heads_trained_on ? r->lp[i].heads_trained_on : "",
               r->lp[i].domains ? r->lp[i].domains : "not recorded");
    fflush(stdout);
}

/* The JSON document without its rows, and the buffers of the evaluation.
 * 0 or -1. */
static int start_run(run *r)
{
    const opts *o = &r->o;
    r->json = cJSON_CreateObject();
    cJSON_AddStringToObject(r->json, "bench", "evict");
    cJSON *proto = cJSON_AddObjectToObject(r->json, "protocol");
    cJSON_AddNumberToObject(proto, "prefill", o->prefill);
    cJSON_AddNumberToObject(proto, "steps", o->steps);
    cJSON_AddNumberToObject(proto, "every", o->every);
    cJSON_AddNumberToObject(proto, "windows", o->windows);
    if (r->suite) cJSON_AddStringToObject(r->json, "suite", scdb_path_relative(r->suite_path, o->data));
    if (r->n_learned) cJSON_AddStringToObject(r->json, "policy_file", r->lp[0].shown);
    cJSON *lpj = cJSON_AddArrayToObject(r->json, "learned_policies");
    for (int i = 0; i < r->n_learned; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "label", r->lp[i].label);
        cJSON_AddStringToObject(e, "file", r->lp[i].shown);
        if (r->lp[i].domains) cJSON_AddStringToObject(e, "domains", r->lp[i].domains);
        if (r->lp[i].trained_on) cJSON_AddStringToObject(e, "trained_on", r->lp[i].trained_on);
        if (r->lp[i].heads_trained_on)
            cJSON_AddStringToObject(e, "heads_trained_on", r->lp[i].heads_trained_on);
        cJSON_AddItemToArray(lpj, e);
    }
    r->rows = cJSON_AddArrayToObject(r->json, "rows");

    if (!(r->tok = malloc((size_t)(r->W + 1) * sizeof *r->tok))) return -1;
    if (!(r->st = calloc((size_t)MAX_POL * MAX_BUDGETS, sizeof *r->st))) return -1;
    for (int i = 0; i < MAX_POL * MAX_BUDGETS; i++)
        if (!(r->st[i].kl_w = calloc((size_t)o->windows, sizeof *r->st[i].kl_w))) return -1;
    return 0;
}

/* Every window of one text [off0, off0 + span) through every policy at
 * every budget, summed into r->st; the full cache's step time and NLL
 * averaged over the windows.  0 or -1. */
static int eval_windows(run *r, scdb_model *m, const char *text, size_t off0, size_t span,
                        double *step_s, double *nll_full)
{
    const opts *o = &r->o;
    const int W = r->W;
    scdb_err rc;
    for (int i = 0; i < MAX_POL * MAX_BUDGETS; i++) {
        double *kw = r->st[i].kl_w;
        memset(&r->st[i], 0, sizeof r->st[i]);
        r->st[i].kl_w = kw;
    }
    *step_s = 0.0;
    *nll_full = 0.0;
    for (int wi = 0; wi < o->windows; wi++) {
        size_t off = off0 + (span - (size_t)W - 1) * (size_t)wi /
                                (size_t)(o->windows > 1 ? o->windows - 1 : 1);
        scdb_evict_window *w = NULL;
        scdb_tokenize_bytes(text + off, (size_t)W + 1, r->tok);
        if ((rc = scdb_evict_window_new(m, r->tok, o->prefill, o->steps, &w))) {
            fprintf(stderr, "scdb bench evict: window: %s\n", scdb_strerror(rc));
            return -1;
        }
        *step_s += scdb_evict_window_step_s(w) / o->windows;
        *nll_full += scdb_evict_window_nll_full(w) / o->windows;
        for (int k = SCDB_EVICT_STREAMING; k < r->NP; k++) {
            if (skip_heur(o, k)) continue;
            const scdb_evict_policy *p = k < N_HEUR ? r->heur[k] : r->lp[k - N_HEUR].p;
            for (int b = 0; b < o->n_budgets; b++) {
                scdb_evict_eval e;
                int B = (int)(o->budgets[b] * W + 0.5);
                if ((rc = scdb_evict_window_eval(w, p, B < 1 ? 1 : B, o->every, NULL, &e))) {
                    fprintf(stderr, "scdb bench evict: policy %d: %s\n", k, scdb_strerror(rc));
                    scdb_evict_window_free(&w);
                    return -1;
                }
                stat_sum *t = &r->st[k * MAX_BUDGETS + b];
                t->kl += e.kl; t->top1 += e.top1; t->nll += e.nll;
                t->pol_s += e.policy_s; t->model_s += e.model_s;
                t->steps += e.steps;
                t->kl_w[t->runs++] = e.kl;
            }
        }
        scdb_evict_window_free(&w);
    }
    return 0;
}

/* One row per (budget, policy) of one model on one text, from r->st. */
static void add_rows(run *r, const scdb_model_config *cfg, const source *s, double step_s,
                     double nll_full)
{
    const opts *o = &r->o;
    for (int b = 0; b < o->n_budgets; b++)
        for (int k = 0; k < r->NP; k++) {
            if (skip_heur(o, k)) continue;
            stat_sum *t = &r->st[k * MAX_BUDGETS + b];
            double kl = 0, top1 = 1, ppl = exp(nll_full), us = 0.0;
            if (k != SCDB_EVICT_FULL) {
                kl = t->kl / t->runs;
                top1 = t->top1 / t->runs;
                ppl = exp(t->nll / t->runs);
                us = t->pol_s / t->steps * 1e6;
            }
            const learned *L = k >= N_HEUR ? &r->lp[k - N_HEUR] : NULL;
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "model", cfg->name);
            cJSON_AddStringToObject(row, "domain", s->domain);
            cJSON_AddBoolToObject(row, "seen", !strcmp(s->split, "seen"));
            cJSON_AddStringToObject(row, "split", s->split);
            cJSON_AddStringToObject(row, "policy", L ? "distillcache" : heur_label(k));
            cJSON_AddStringToObject(row, "label", L ? L->label : heur_label(k));
            cJSON_AddNumberToObject(row, "budget", o->budgets[b]);
            cJSON_AddNumberToObject(row, "kl", kl);
            cJSON_AddNumberToObject(row, "top1", top1);
            cJSON_AddNumberToObject(row, "ppl", ppl);
            cJSON_AddNumberToObject(row, "us_per_token", us);
            cJSON_AddNumberToObject(row, "model_us_per_token", step_s * 1e6);
            cJSON_AddNumberToObject(row, "budget_tokens", (int)(o->budgets[b] * r->W + 0.5));
            cJSON_AddStringToObject(row, "text", s->label);
            cJSON_AddStringToObject(row, "part", s->part);
            if (L) {
                cJSON_AddStringToObject(row, "policy_file", L->shown);
                /* neither its network nor its per-head scorer trained on the model */
                cJSON_AddBoolToObject(row, "zero_shot",
                                      !scdb_list_has(L->trained_on, cfg->name) &&
                                          !scdb_list_has(L->heads_trained_on, cfg->name));
            }
            if (k != SCDB_EVICT_FULL)
                cJSON_AddItemToObject(row, "kl_windows", cJSON_CreateDoubleArray(t->kl_w, t->runs));
            cJSON_AddItemToArray(r->rows, row);
        }
}

/* One model on one text: read it, take its part, measure, add the rows.
 * 0 or -1. */
static int eval_source(run *r, scdb_model *m, const scdb_model_config *cfg, const source *s)
{
    char *text = NULL;
    size_t len = 0;
    double step_s, nll_full;
    scdb_err rc;
    if (s->suite_index >= 0)
        rc = scdb_evict_suite_read(r->suite, s->suite_index, r->o.portion, &text, &len, r->err,
                                   sizeof r->err);
    else if ((rc = read_text_path(s->path, &text, &len)))
        scdb_str_cut(r->err, sizeof r->err, s->path);
    if (rc) {
        fprintf(stderr, "scdb bench evict: %s: %s\n", scdb_strerror(rc), r->err);
        return -1;
    }
    size_t off0 = 0, span = len;
    if (!strcmp(s->part, "first")) span = len / 2;
    else if (!strcmp(s->part, "second")) { off0 = len / 2; span = len - len / 2; }
    if (span < (size_t)r->W + 1) {
        fprintf(stderr, "scdb bench evict: %s (%s) has %zu bytes, a window needs %d\n", s->path,
                s->part, span, r->W + 1);
        free(text);
        return -1;
    }
    int bad = eval_windows(r, m, text, off0, span, &step_s, &nll_full);
    free(text);
    if (bad) return -1;
    fprintf(stderr, "bench evict: %s on %s (%s): %d windows done, %.0f s\n", cfg->name, s->domain,
            s->split, r->o.windows, scdb_now() - r->t_start);
    add_rows(r, cfg, s, step_s, nll_full);
    return 0;
}

/* One model on every text meant for it.  0 or -1. */
static int eval_model(run *r, int mi)
{
    char dir[1200];
    scdb_model *m = NULL;
    scdb_err rc;
    int bad = 0;
    snprintf(dir, sizeof dir, "%s/models/%s", r->o.data, r->o.models[mi]);
    if ((rc = scdb_model_load(dir, &m, r->err, sizeof r->err))) {
        fprintf(stderr, "scdb bench evict: %s: %s: %s\n", dir, scdb_strerror(rc), r->err);
        return -1;
    }
    const scdb_model_config *cfg = scdb_model_cfg(m);
    if (r->W > cfg->max_seq_len) {
        fprintf(stderr, "scdb bench evict: prefill + steps = %d exceeds %s's context %d\n", r->W,
                cfg->name, cfg->max_seq_len);
        bad = 1;
    }
    for (int si = 0; si < r->n_src && !bad; si++) {
        const source *s = &r->src[si];
        if (s->for_model >= 0 && s->for_model != mi) continue;
        bad = eval_source(r, m, cfg, s) != 0;
    }
    scdb_model_free(&m);
    return bad ? -1 : 0;
}

/* The tables: every row, then KL by domain at each budget; seen and
 * unseen apart. */
static void print_tables(const run *r)
{
    const char *labels[MAX_POL];
    int n_lab = 0;
    for (int k = SCDB_EVICT_STREAMING; k < N_HEUR; k++)
        if (!skip_heur(&r->o, k)) labels[n_lab++] = heur_label(k);
    for (int i = 0; i < r->n_learned; i++) labels[n_lab++] = r->lp[i].label;
    print_full_table(r->rows, "seen", "Seen domains (the learned policy trained on their train texts; measured on their eval texts)");
    print_full_table(r->rows, "unseen", "Unseen domains (the learned policy never trained on them)");
    print_full_table(r->rows, "other", "Other texts");
    for (int b = 0; b < r->o.n_budgets; b++)
        for (int sp = 0; sp < 3; sp++)
            print_domain_table(r->rows, split_names[sp], split_titles[sp], r->o.budgets[b], labels,
                               n_lab, n_lab - r->n_learned);
}

/* One of the four heuristics the goals count (one keep set); all: or one
 * of the per-head ones. */
static int is_heur_of(const char *label, int all)
{
    for (int k = SCDB_EVICT_STREAMING; k < (all ? N_HEUR : N_SHARED_HEUR); k++)
        if (!strcmp(label, heur_label(k))) return 1;
    return 0;
}

/* Goals of one split (seen, unseen, other) for the first learned policy:
 * KL lowest of all, top-1 at least the best heuristic's, at every budget;
 * and against each other learned policy. */
static void print_split_goals(const run *r, int sp)
{
    const opts *o = &r->o;
    const learned *lp = r->lp;
    const cJSON *rows = r->rows;
    int pairs = 0, kl_ok = 0, t1_ok = 0, kl_ok_all = 0;
    int vs_n[MAX_LEARNED] = {0}, vs_ok[MAX_LEARNED] = {0};
    for (int b = 0; b < o->n_budgets; b++) {
        const cJSON *row;
        cJSON_ArrayForEach(row, rows) {
            if (strcmp(row_str(row, "split"), split_names[sp]) ||
                fabs(row_num(row, "budget") - o->budgets[b]) > 1e-9 ||
                strcmp(row_str(row, "label"), lp[0].label))
                continue;
            double kl = row_num(row, "kl"), t1 = row_num(row, "top1"), bh = INFINITY, bt = -1;
            double bha = INFINITY;
            const char *bname = "";
            const cJSON *q;
            cJSON_ArrayForEach(q, rows) {
                if (strcmp(row_str(q, "model"), row_str(row, "model")) ||
                    strcmp(row_str(q, "domain"), row_str(row, "domain")) ||
                    fabs(row_num(q, "budget") - o->budgets[b]) > 1e-9)
                    continue;
                const char *lab = row_str(q, "label");
                int is_h = 0;
                for (int k = SCDB_EVICT_STREAMING; k < N_SHARED_HEUR; k++) is_h |= !strcmp(lab, heur_label(k));
                if (is_heur_of(lab, 1) && row_num(q, "kl") < bha) bha = row_num(q, "kl");
                if (is_h) {
                    if (row_num(q, "kl") < bh) { bh = row_num(q, "kl"); bname = lab; }
                    if (row_num(q, "top1") > bt) bt = row_num(q, "top1");
                }
                for (int j = 1; j < r->n_learned; j++)
                    if (!strcmp(lab, lp[j].label)) {
                        vs_n[j]++;
                        vs_ok[j] += kl <= row_num(q, "kl");
                    }
            }
            pairs++;
            kl_ok += kl < bh;
            kl_ok_all += kl < bha;
            t1_ok += t1 >= bt;
            if (kl >= bh || t1 < bt)
                printf("  %-7s %-9s %-10s budget %.4f: KL %.5f vs %s %.5f%s, top-1 %.4f vs best heuristic %.4f%s\n",
                       split_names[sp], row_str(row, "model"), row_str(row, "domain"), o->budgets[b],
                       kl, bname, bh, kl < bh ? "" : " (NOT lowest)", t1, bt,
                       t1 >= bt ? "" : " (below)");
        }
    }
    if (pairs)
        printf("  %s: KL lowest of all policies on %d of %d (model, domain, budget) pairs, "
               "every budget; top-1 >= the best heuristic's on %d of %d; KL below the per-head "
               "heuristics' too on %d of %d\n",
               split_titles[sp], kl_ok, pairs, t1_ok, pairs, kl_ok_all, pairs);
    for (int j = 1; j < r->n_learned; j++)
        if (vs_n[j])
            printf("  %s: KL <= `%s`'s on %d of %d pairs\n", split_titles[sp], lp[j].label,
                   vs_ok[j], vs_n[j]);
}

/* One summary cell: a learned policy's rows of one split at one budget,
 * each against the heuristics (and the other learned policies) on the same
 * (model, domain). */
typedef struct cell {
    int pairs, kl_lowest, top1_ok, vs_n[MAX_LEARNED], vs_ok[MAX_LEARNED];
    int kl_lowest_all, top1_ok_all;     /* against the per-head heuristics too */
    double log_ratio, log_ratio_all, ov_sum, ov_worst;
    char worst_model[64], worst_domain[64];
} cell;

static void fill_cell(const run *r, int li, double budget, const char *split, cell *c)
{
    const cJSON *row, *q;
    memset(c, 0, sizeof *c);
    cJSON_ArrayForEach(row, r->rows) {
        if (strcmp(row_str(row, "split"), split) || fabs(row_num(row, "budget") - budget) > 1e-9 ||
            strcmp(row_str(row, "label"), r->lp[li].label))
            continue;
        double kl = row_num(row, "kl"), t1 = row_num(row, "top1"), bh = INFINITY, bt = -1;
        double bha = INFINITY, bta = -1;
        cJSON_ArrayForEach(q, r->rows) {
            if (strcmp(row_str(q, "model"), row_str(row, "model")) ||
                strcmp(row_str(q, "domain"), row_str(row, "domain")) ||
                fabs(row_num(q, "budget") - budget) > 1e-9)
                continue;
            const char *lab = row_str(q, "label");
            if (is_heur_of(lab, 0)) {
                if (row_num(q, "kl") < bh) bh = row_num(q, "kl");
                if (row_num(q, "top1") > bt) bt = row_num(q, "top1");
            }
            if (is_heur_of(lab, 1)) {
                if (row_num(q, "kl") < bha) bha = row_num(q, "kl");
                if (row_num(q, "top1") > bta) bta = row_num(q, "top1");
            }
            for (int j = 0; j < r->n_learned; j++)
                if (j != li && !strcmp(lab, r->lp[j].label)) {
                    c->vs_n[j]++;
                    c->vs_ok[j] += kl <= row_num(q, "kl");
                }
        }
        double ov = row_num(row, "us_per_token") / row_num(row, "model_us_per_token");
        c->pairs++;
        c->log_ratio += log(fmax(kl, 1e-12) / fmax(bh, 1e-12));
        c->kl_lowest += kl < bh;
        c->top1_ok += t1 >= bt;
        c->log_ratio_all += log(fmax(kl, 1e-12) / fmax(bha, 1e-12));
        c->kl_lowest_all += kl < bha;
        c->top1_ok_all += t1 >= bta;
        c->ov_sum += ov;
        if (ov > c->ov_worst || c->pairs == 1) {
            c->ov_worst = ov;
            scdb_str_cut(c->worst_model, sizeof c->worst_model, row_str(row, "model"));
            scdb_str_cut(c->worst_domain, sizeof c->worst_domain, row_str(row, "domain"));
        }
    }
}

/* The summary per learned policy, budget and split: the geometric mean of
 * KL / the best heuristic's KL over the (model, domain) pairs, on how many
 * pairs the policy's KL is the lowest (below every heuristic's) and its
 * top-1 at least the best heuristic's, how often its KL is at most each
 * other learned policy's, and its overhead (policy time / model step)
 * mean and worst row.  A table on stdout and "summary" in the JSON. */
static void summarise(run *r)
{
    cJSON *sum = cJSON_AddArrayToObject(r->json, "summary");
    printf("\n## Summary: learned policies against the best heuristic per (model, domain)\n\n"
           "The best heuristic: of streaming, h2o, snapkv and tova (one keep set, the goals'); "
           "\"with per-head\": of those and h2o_head, snapkv_head, tova_layer.\n\n"
           "| policy | texts | budget | pairs | geo-mean KL / best heuristic | KL lowest | "
           "top-1 >= best heuristic | with per-head: geo-mean / KL lowest / top-1 | KL <= other learned | overhead mean | overhead worst (row) |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int li = 0; li < r->n_learned; li++)
        for (int sp = 0; sp < 3; sp++)
            for (int b = 0; b < r->o.n_budgets; b++) {
                cell c;
                fill_cell(r, li, r->o.budgets[b], split_names[sp], &c);
                if (!c.pairs) continue;
                double gm = exp(c.log_ratio / c.pairs), om = c.ov_sum / c.pairs;
                char vs[256] = "";
                cJSON *e = cJSON_CreateObject(), *vj = cJSON_CreateObject();
                for (int j = 0; j < r->n_learned; j++) {
                    if (!c.vs_n[j]) continue;
                    size_t l = strlen(vs);
                    snprintf(vs + l, sizeof vs - l, "%s%s %d/%d", l ? ", " : "", r->lp[j].label,
                             c.vs_ok[j], c.vs_n[j]);
                    cJSON_AddNumberToObject(vj, r->lp[j].label, c.vs_ok[j]);
                }
                double gma = exp(c.log_ratio_all / c.pairs);
                printf("| %s | %s | %.4f | %d | %.3f | %d/%d | %d/%d | %.3f / %d / %d | %s | %.1f%% | %.1f%% (%s/%s) |\n",
                       r->lp[li].label, split_names[sp], r->o.budgets[b], c.pairs, gm, c.kl_lowest,
                       c.pairs, c.top1_ok, c.pairs, gma, c.kl_lowest_all, c.top1_ok_all,
                       vs[0] ? vs : "-", 100.0 * om, 100.0 * c.ov_worst, c.worst_model,
                       c.worst_domain);
                cJSON_AddStringToObject(e, "label", r->lp[li].label);
                cJSON_AddNumberToObject(e, "budget", r->o.budgets[b]);
                cJSON_AddStringToObject(e, "split", split_names[sp]);
                cJSON_AddBoolToObject(e, "seen", sp == 0);
                cJSON_AddNumberToObject(e, "pairs", c.pairs);
                cJSON_AddNumberToObject(e, "kl_ratio_geomean", gm);
                cJSON_AddNumberToObject(e, "kl_lowest", c.kl_lowest);
                cJSON_AddNumberToObject(e, "top1_at_least_best", c.top1_ok);
                cJSON_AddNumberToObject(e, "kl_ratio_geomean_with_per_head", gma);
                cJSON_AddNumberToObject(e, "kl_lowest_with_per_head", c.kl_lowest_all);
                cJSON_AddNumberToObject(e, "top1_at_least_best_with_per_head", c.top1_ok_all);
                cJSON_AddItemToObject(e, "kl_at_most", vj);
                cJSON_AddNumberToObject(e, "overhead_mean", om);
                cJSON_AddNumberToObject(e, "overhead_worst", c.ov_worst);
                cJSON_AddStringToObject(e, "overhead_worst_model", c.worst_model);
                cJSON_AddStringToObject(e, "overhead_worst_domain", c.worst_domain);
                cJSON_AddItemToArray(sum, e);
            }
}

/* The goals of the first learned policy, each split, then its overhead. */
static void print_goals(const run *r)
{
    const char *label = r->lp[0].label;
    const cJSON *row;
    double worst = 0.0;
    printf("\nGoals (`%s`):\n", label);
    for (int sp = 0; sp < 3; sp++) print_split_goals(r, sp);
    cJSON_ArrayForEach(row, r->rows)
        if (!strcmp(row_str(row, "label"), label)) {
            double q = row_num(row, "us_per_token") / row_num(row, "model_us_per_token");
            if (q > worst) worst = q;
        }
    printf("  overhead: at most %.1f%% of the model's step time (all budgets)\n", 100.0 * worst);
    for (int b = 0; b < r->o.n_budgets; b++) {
        double w = 0.0, sum = 0.0;
        int nr = 0;
        cJSON_ArrayForEach(row, r->rows)
            if (!strcmp(row_str(row, "label"), label) &&
                fabs(row_num(row, "budget") - r->o.budgets[b]) < 1e-9) {
                double q = row_num(row, "us_per_token") / row_num(row, "model_us_per_token");
                if (q > w) w = q;
                sum += q;
                nr++;
            }
        printf("    budget %.4f: mean %.1f%%, at most %.1f%% (%d rows)\n", r->o.budgets[b],
               nr ? 100.0 * sum / nr : 0.0, 100.0 * w, nr);
    }
}

/* --json, and --png from the JSON (a temporary file without --json).
 * 0 or -1 (the JSON could not be written). */
static int write_outputs(const run *r)
{
    const opts *o = &r->o;
    char tmpjson[256] = "";
    const char *jpath = o->json;
    if (!o->json && !o->png) return 0;
    if (!jpath) {
        snprintf(tmpjson, sizeof tmpjson, "/tmp/scdb_bench_evict_%d.json", (int)getpid());
        jpath = tmpjson;
    }
    if (scdb_bench_write_json(jpath, r->json, "scdb bench evict")) return -1;
    if (o->json) printf("\nwrote %s\n", o->json);
    if (o->png) {
        char script[1400], cmd[4096];
        snprintf(script, sizeof script, "%s/tools/plot_evict.py", scdb_share_dir());
        if (access(script, R_OK) || access("/usr/bin/python3", X_OK)) {
            printf("no PNG: %s or /usr/bin/python3 is missing\n", script);
        } else {
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, jpath, o->png);
            if (system(cmd) == 0) printf("wrote %s\n", o->png);
            else printf("no PNG: %s failed (is matplotlib installed?)\n", script);
        }
    }
    if (tmpjson[0]) unlink(tmpjson);
    return 0;
}

static void run_free(run *r)
{
    for (int k = 0; k < N_HEUR; k++) scdb_evict_policy_free(&r->heur[k]);
    for (int i = 0; i < MAX_LEARNED; i++) scdb_evict_policy_free(&r->lp[i].p);
    for (int i = 0; i < r->o.n_models; i++) free(r->o.models[i]);
    for (int i = 0; i < r->o.n_domains; i++) free(r->o.domains[i]);
    if (r->st)
        for (int i = 0; i < MAX_POL * MAX_BUDGETS; i++) free(r->st[i].kl_w);
    free(r->st);
    scdb_evict_suite_free(&r->suite);
    cJSON_Delete(r->json);
    free(r->tok);
}

int scdb_bench_evict(int argc, char **argv)
{
    run r;
    char why[256] = "";
    int prc, ret = 1;

    /* --engine llama.cpp: the same protocol with llama.cpp generating
     * (bench/bench_evict_llama.c); --engine reference is this engine */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--engine")) {
            if (!strcmp(argv[i + 1], "llama.cpp")) return scdb_bench_evict_llama(argc, argv);
            if (strcmp(argv[i + 1], "reference")) {
                fprintf(stderr, "bench evict: --engine wants llama.cpp or reference, not '%s'\n",
                        argv[i + 1]);
                return 2;
            }
            memmove(argv + i, argv + i + 2, (size_t)(argc - i - 2) * sizeof *argv);
            argc -= 2;
            break;
        }

    memset(&r, 0, sizeof r);
    prc = parse_opts(argc, argv, &r.o, why, sizeof why);
    if (prc == 1) {
        usage(stdout);
        ret = 0;
        goto done;
    }
    if (prc) {
        fprintf(stderr, "scdb bench evict: %s\n\n", why);
        usage(stderr);
        ret = 2;
        goto done;
    }
    /* one token per forward: BLAS threads only wait on each other (and,
     * beside other work, yield: their spinning was most of a step's CPU
     * time), so the step and the overhead are one thread's work */
    scdb_k_cpu_threads(1);
    if (r.o.n_models == 0) r.o.n_models = list_models(r.o.data, r.o.models, MAX_MODELS);
    if (r.o.n_models <= 0) {
        fprintf(stderr, "scdb bench evict: no models under %s/models\n", r.o.data);
        goto done;
    }
    if (load_policies(&r)) goto done;
    if ((ret = collect_sources(&r))) goto done;
    ret = 1;
    r.W = r.o.prefill + r.o.steps;
    r.NP = N_HEUR + r.n_learned;
    print_protocol(&r);
    if (start_run(&r)) goto done;
    r.t_start = scdb_now();
    for (int mi = 0; mi < r.o.n_models; mi++)
        if (eval_model(&r, mi)) goto done;
    if (cJSON_GetArraySize(r.rows) == 0) {
        /* nothing measured (e.g. --portion val of unseen domains only) */
        fprintf(stderr, "scdb bench evict: FAILED: no text was measured, no rows\n");
        goto done;
    }
    print_tables(&r);
    if (r.n_learned) summarise(&r);
    if (r.n_learned) print_goals(&r);
    printf("\n%.0f s\n", scdb_now() - r.t_start);
    if (write_outputs(&r)) goto done;
    ret = 0;
done:
    run_free(&r);
    return ret;
}
