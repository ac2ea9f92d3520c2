/* cmd_train_policy_rl.c — `scdb train-policy`: train the
 * DistillCache eviction MLP with REINFORCE over the domain suite's training
 * domains and several models (evict/train_rl.c), write it as a policy file,
 * print the validation curve against the best heuristic and plot it
 * (tools/plot_train_policy.py).  The one trainer (the earlier single-model,
 * single-text one and its --legacy mode are retired; git keeps them). */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "evict_train.h"
#include "model.h"
#include "scdb_cli.h"


#define MAX_MODELS 8
#define MAX_DOMAINS 32
#define MAX_PROFILE 4

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb train-policy [options] -o FILE\n\n"
            "Train the DistillCache eviction policy with REINFORCE (evict/train_rl.c):\n"
            "teacher = the full cache; at eviction points of the deterministic policy, K\n"
            "Plackett-Luce (Gumbel top-B) draws of the evicted set, each scored by\n"
            "-KL(teacher || student) over the next steps; leave-one-out baseline over the\n"
            "K draws; entropy bonus; Adam.  Episodes draw a model, a training domain of\n"
            "the suite (its train text) and a budget; validation windows come from the\n"
            "domains' val texts; unseen domains are never read.  The network with the\n"
            "best validation score (geometric mean of KL / the best heuristic's KL over\n"
            "(model, domain, budget)) is written.  Starts from seeded random weights.\n\n"
            "  --suite FILE       suite manifest (default DATA/evict_suite/manifest.json)\n"
            "  --domains A,B,..   training domains (default: the suite's seen domains;\n"
            "                     unseen ones are refused)\n"
            "  --models A,B,..    models under DATA/models (default: every one there)\n"
            "  --inputs A,B,..    the inputs the network reads (default: all 18; names as\n"
            "                     in evict.h: alpha vnorm sigma ent pos mass budget age\n"
            "                     rank_mass rank_alpha rank_window rank_snapkv rank_last\n"
            "                     vnorm_z life rank_life ctx_ent ctx_n)\n"
            "  --updates N        Adam steps (default 800)\n"
            "  --batch N          episodes per step (default 2)\n"
            "  --states N         branch points per episode: the first eviction and N-1\n"
            "                     random later ones (default 3)\n"
            "  --samples K        draws per state, 2..64 (default 8)\n"
            "  --horizon H        steps of KL after a later branch (default 48; 0: to the\n"
            "                     end of the window)\n"
            "  --horizon-first H  the same after the first eviction (default 0: to the end)\n"
            "  --budget-range L,H episode budgets, fractions of prefill + steps,\n"
            "                     log-uniform (default 0.09,0.55)\n"
            "  --val-budgets F,.. validation budgets (default 0.25,0.125)\n"
            "  --val-windows N    validation windows per (model, domain) (default 4)\n"
            "  --val-every N      steps between validations (default 50)\n"
            "  --lr X             Adam step, cosine-decayed to 10%% (default 2e-3)\n"
            "  --entropy X        entropy bonus (default 0.01)\n"
            "  --tau X            Plackett-Luce temperature, in units of the candidates'\n"
            "                     score spread (default 0.5)\n"
            "  --tau-end X        anneal the temperature geometrically from --tau to X\n"
            "                     over the run (default: no annealing)\n"
            "  --abs-tau          --tau in units of the raw scores instead\n"
            "  --hidden N         MLP width (default 32)\n"
            "  --sinks N          first slots always kept (default 4)\n"
            "  --recent N         last slots always kept (default 8)\n"
            "  --recent-frac F    keep at least F x budget last slots too (default 0.5)\n"
            "  --pool K           max-pool the scores over K slots (odd; default 5; 1: none)\n"
            "  --windows F,..     learn the recent window: a head choosing among these\n"
            "                     fractions of the budget (ascending, in [0, 1)) as a\n"
            "                     function of the budget (a version-4 file); it starts at\n"
            "                     the choice nearest --recent-frac (default: no head)\n"
            "  --window-lr X      the head's Adam step (default 0.05)\n"
            "  --last FILE        also write the last network (-o gets the best on validation)\n"
            "  --imitate R        warm start by imitation first: R rounds of collecting\n"
            "                     branch states (every candidate policy evicts there and\n"
            "                     runs the horizon: the heuristics, --expert files and\n"
            "                     their window variants, heuristic signals under other\n"
            "                     protections, the learner from round 2) and fitting the\n"
            "                     KL-weighted likelihood of their kept sets (default 0: none;\n"
            "                     the --imit-* options and --expert need it)\n"
            "  --imit-episodes N  episodes collected per round (default 60)\n"
            "  --imit-epochs N    passes over the states per round (default 20)\n"
            "  --imit-batch N     states per Adam step (default 8)\n"
            "  --imit-temp X      candidate weights softmax(-log(KL / best KL) / X) (default\n"
            "                     0.05)\n"
            "  --imit-state-weight L  those log ratios: L x the state's own + (1 - L) x their\n"
            "                     mean over the states of its budget band (default 0)\n"
            "  --imit-band-windows N  the band means from full runs of every candidate on N\n"
            "                     train windows at each band's budget instead (default 0)\n"
            "  --imit-lr X        the imitation's Adam step (default 3e-3)\n"
            "  --imit-val-every N epochs between validations (default 5)\n"
            "  --expert FILE      a policy file offered as a candidate (up to 4)\n"
            "  --imit-train W,..  what imitation trains: net, skip, head (default all)\n"
            "  --head-runs        after imitation, fit the --windows head to the window the\n"
            "                     network does best under per budget band, in full runs on\n"
            "                     the --imit-band-windows train windows\n"
            "  --skip             give the network a budget-modulated linear skip over its\n"
            "                     inputs (a version-5 file; starts at 0)\n"
            "  --heads G          then fit the per-head scorer (a version-6 file: keep sets per\n"
            "                     (layer, KV group) at small budgets, evict.h) for G generations\n"
            "                     of evolution strategies on full runs (evict/train_heads.c);\n"
            "                     the network stays as trained (or as --init gave it); the\n"
            "                     scorer decides up to the largest validation budget where it\n"
            "                     beats the network (default 0: no scorer; the --heads-*\n"
            "                     options need it)\n"
            "  --heads-pairs P    antithetic pairs per generation (default 8)\n"
            "  --heads-episodes E episodes per generation, drawn from the pool (default 12)\n"
            "  --heads-pool N     training episodes made up front (default 96)\n"
            "  --heads-sigma X    noise scale (default 0.3)\n"
            "  --heads-lr X       Adam step (default 0.05)\n"
            "  --heads-range L,H  episode budgets, log-uniform (default 0.04,0.3)\n"
            "  --heads-val-every N  generations between validations (default 5)\n"
            "  --heads-sinks N    first slots every set protects (default 0)\n"
            "  --heads-windows F,..  each set's window choices (default 0,0.125,0.25,0.5,0.75;\n"
            "                     with an --init scorer, a superset of its choices: each new\n"
            "                     one starts one --heads-sigma below its nearest, unchosen)\n"
            "  --heads-zero       start from zeros (ties keep the newest) instead of SnapKV's\n"
            "                     per-set ranking with a quarter of the budget protected (an\n"
            "                     --init file with a scorer: from its scorer, choices and sinks)\n"
            "  --heads-threads N  workers (default 2)\n"
            "  --heads-flip       ascend the objective (a control for the trainer's test)\n"
            "  --heads-no-gate    no gate: the scorer takes every session below the split\n"
            "                     (default: a gate fitted on the pool chooses, at a session's\n"
            "                     first eviction, the scorer's sets or the network's one set)\n"
            "  --heads-top1 W     the objective adds W x log(1 - top-1) over the best\n"
            "                     heuristic's (the highest top-1 of the four) per episode, and\n"
            "                     validation keeps the best scorer by the same sum (default 0:\n"
            "                     the KL alone)\n"
            "  --heads-short F    a share F of the training episodes on half-length windows\n"
            "                     (prefill / 2 and steps / 2: a shorter prompt, budgets the\n"
            "                     same fractions of it), and validation on as many half-length\n"
            "                     windows per group as full ones, each its own group (default\n"
            "                     0: the protocol's windows only)\n"
            "  --heads-split-max F  the split is at most F of the capacity (default 1: as\n"
            "                     validation says): a cost bound, for budgets where keep\n"
            "                     sets per head would cost more per token than the network\n"
            "  --flip-gradient    ascend the loss instead (a control: a trainer that learns\n"
            "                     must then not improve the validation score)\n"
            "  --age-profile OUT  instead of training, write to OUT (JSON) the kept set's\n"
            "                     age profile of each --profile policy on the val texts at\n"
            "                     --val-budgets (default here 0.5,0.25,0.125,0.0625) over\n"
            "                     --val-windows windows (tools/plot_age_profile.py plots it)\n"
            "  --profile FILE     a policy file for --age-profile (up to 4)\n"
            "  --prefill P, --steps T, --every C   the protocol (default 256, 256, 8)\n"
            "  --init FILE        start from this policy file instead of random weights\n"
            "  --minutes M        stop after M minutes\n"
            "  --seed N           random seed (default 1)\n"
            "  --log FILE         JSONL log (default: FILE with .jsonl for .safetensors)\n"
            "  --png FILE         training curve (default: FILE with .train.png)\n"
            "  -o, --out FILE     policy file to write (required)\n"
            "  -q, --quiet        no progress on stderr\n"
            "  -h, --help         this text\n\n"
            "DATA is %s (environment SCDB_DATA).\n",
            cli_data_dir());
}

static int parse_fracs(const char *s, double *out, int max)
{
    char *v[8];
    int n = scdb_split_list(s, v, max < 8 ? max : 8), bad = n < 1;
    for (int i = 0; i < n; i++) {
        char *end;
        out[i] = strtod(v[i], &end);
        bad |= *end || !(out[i] > 0.0 && out[i] < 1.0);
        free(v[i]);
    }
    return bad ? -1 : n;
}

/* --windows: 1..max fractions in [0, 1), strictly ascending; -1 if not */
static int parse_windows(const char *s, double *out, int max)
{
    char *v[SCDB_EVICT_MAX_WIN + 1];
    int n = scdb_split_list(s, v, SCDB_EVICT_MAX_WIN + 1), bad = n < 1 || n > max;
    for (int i = 0; i < n; i++) {
        char *end;
        double x = strtod(v[i], &end);
        bad |= *end || !(x >= 0.0 && x < 1.0) || (i > 0 && i <= max && !(x > out[i - 1]));
        if (i < max) out[i] = x;
        free(v[i]);
    }
    return bad ? -1 : n;
}

/* --age-profile: the policies' kept sets by age on the val texts; exit code */
static int age_profile(scdb_evict_rl_opts *o, char **dirs, int n_models, const scdb_evict_corpus *corp,
                       int n_domains, const char *const *paths, int n, const char *out)
{
    scdb_evict_policy *pols[MAX_PROFILE] = {0};
    const char *labels[MAX_PROFILE];
    char err[512] = "";
    int ret = 1;
    FILE *f = NULL;
    scdb_err rc = SCDB_OK;
    for (int i = 0; i < n; i++) {
        const char *b = strrchr(paths[i], '/');
        labels[i] = b ? b + 1 : paths[i];
        if ((rc = scdb_evict_policy_load(paths[i], &pols[i], err, sizeof err))) {
            fprintf(stderr, "train-policy: --profile %s: %s: %s\n", paths[i], scdb_strerror(rc), err);
            goto done;
        }
    }
    if (!(f = fopen(out, "w"))) {
        fprintf(stderr, "train-policy: cannot write %s\n", out);
        goto done;
    }
    o->model_dirs = (const char *const *)dirs;
    o->n_models = n_models;
    o->corpora = corp;
    o->n_corpora = n_domains;
    if ((rc = scdb_evict_age_profile(o, (const scdb_evict_policy *const *)pols, labels, n, f, err,
                                     sizeof err))) {
        fprintf(stderr, "train-policy: age profile: %s%s%s\n", scdb_strerror(rc), err[0] ? ": " : "",
                err);
        goto done;
    }
    ret = 0;
    fprintf(stderr, "train-policy: wrote %s\n", out);
done:
    if (f && fclose(f) && !ret) {
        fprintf(stderr, "train-policy: cannot write %s\n", out);
        ret = 1;
    }
    if (f && ret) unlink(out);           /* no half-written or empty profile left behind */
    for (int i = 0; i < n; i++) scdb_evict_policy_free(&pols[i]);
    return ret;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* every model directory under DATA/models, base first */
static int list_models(const char *data, char **out, int max)
{
    char dir[1024], path[2048], *names[64];
    int n = 0, cnt = 0;
    DIR *d;
    struct dirent *e;
    snprintf(dir, sizeof dir, "%s/models", data);
    if (!(d = opendir(dir))) return 0;
    while ((e = readdir(d)) && cnt < 64) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s/config.json", dir, e->d_name);
        if (!access(path, R_OK)) names[cnt++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)cnt, sizeof *names, cmp_str);
    for (int i = 0; i < cnt; i++)
        if (!strcmp(names[i], "base") && n < max) out[n++] = strdup(names[i]);
    for (int i = 0; i < cnt; i++) {
        if (strcmp(names[i], "base") && n < max) out[n++] = strdup(names[i]);
        free(names[i]);
    }
    return n;
}

/* path with .safetensors replaced by ext (or ext appended) */
int cli_cmd_train_policy(int argc, char **argv)
{
    enum { O_SUITE = 256, O_DOMAINS, O_MODELS, O_INPUTS, O_UPDATES, O_BATCH, O_STATES, O_SAMPLES,
           O_HORIZON, O_BRANGE, O_VBUDGETS, O_VALW, O_VALE, O_LR, O_ENTROPY, O_TAU, O_HIDDEN,
           O_SINKS, O_RECENT, O_RFRAC, O_POOL, O_PREFILL, O_STEPS, O_EVERY, O_INIT, O_MINUTES,
           O_SEED, O_LOG, O_PNG, O_HFIRST, O_ABSTAU, O_TAUEND, O_WINDOWS, O_WINLR,
           O_AGEPROF, O_PROFILE, O_FLIP, O_LAST, O_IMIT, O_IEPIS, O_IEPOCHS, O_IBATCH, O_ITEMP,
           O_ILR, O_IVAL, O_EXPERT, O_ISTATEW, O_IBANDW, O_ITRAIN, O_SKIP, O_HEADRUNS,
           O_HEADS, O_HPAIRS, O_HEPIS, O_HPOOL, O_HSIGMA, O_HLR, O_HRANGE, O_HVAL, O_HSINKS,
           O_HWIN, O_HZERO, O_HTHREADS, O_HFLIP, O_HSPLITMAX, O_HTOP1, O_HNOGATE, O_HSHORT };
    static const struct option opts[] = {
        {"suite", 1, 0, O_SUITE}, {"domains", 1, 0, O_DOMAINS}, {"models", 1, 0, O_MODELS},
        {"inputs", 1, 0, O_INPUTS}, {"updates", 1, 0, O_UPDATES}, {"batch", 1, 0, O_BATCH},
        {"states", 1, 0, O_STATES}, {"samples", 1, 0, O_SAMPLES}, {"horizon", 1, 0, O_HORIZON},
        {"budget-range", 1, 0, O_BRANGE}, {"val-budgets", 1, 0, O_VBUDGETS},
        {"val-windows", 1, 0, O_VALW}, {"val-every", 1, 0, O_VALE}, {"lr", 1, 0, O_LR},
        {"entropy", 1, 0, O_ENTROPY}, {"tau", 1, 0, O_TAU}, {"hidden", 1, 0, O_HIDDEN},
        {"sinks", 1, 0, O_SINKS}, {"recent", 1, 0, O_RECENT}, {"recent-frac", 1, 0, O_RFRAC},
        {"pool", 1, 0, O_POOL}, {"prefill", 1, 0, O_PREFILL}, {"steps", 1, 0, O_STEPS},
        {"every", 1, 0, O_EVERY}, {"init", 1, 0, O_INIT}, {"minutes", 1, 0, O_MINUTES},
        {"seed", 1, 0, O_SEED}, {"log", 1, 0, O_LOG}, {"png", 1, 0, O_PNG},
        {"horizon-first", 1, 0, O_HFIRST}, {"abs-tau", 0, 0, O_ABSTAU},
        {"tau-end", 1, 0, O_TAUEND}, {"windows", 1, 0, O_WINDOWS}, {"window-lr", 1, 0, O_WINLR},
        {"age-profile", 1, 0, O_AGEPROF}, {"profile", 1, 0, O_PROFILE},
        {"flip-gradient", 0, 0, O_FLIP}, {"last", 1, 0, O_LAST}, {"imitate", 1, 0, O_IMIT},
        {"imit-episodes", 1, 0, O_IEPIS}, {"imit-epochs", 1, 0, O_IEPOCHS},
        {"imit-batch", 1, 0, O_IBATCH}, {"imit-temp", 1, 0, O_ITEMP}, {"imit-lr", 1, 0, O_ILR},
        {"imit-val-every", 1, 0, O_IVAL}, {"expert", 1, 0, O_EXPERT},
        {"imit-state-weight", 1, 0, O_ISTATEW}, {"imit-band-windows", 1, 0, O_IBANDW},
        {"imit-train", 1, 0, O_ITRAIN}, {"skip", 0, 0, O_SKIP}, {"head-runs", 0, 0, O_HEADRUNS},
        {"heads", 1, 0, O_HEADS}, {"heads-pairs", 1, 0, O_HPAIRS},
        {"heads-episodes", 1, 0, O_HEPIS}, {"heads-pool", 1, 0, O_HPOOL},
        {"heads-sigma", 1, 0, O_HSIGMA}, {"heads-lr", 1, 0, O_HLR}, {"heads-range", 1, 0, O_HRANGE},
        {"heads-val-every", 1, 0, O_HVAL}, {"heads-sinks", 1, 0, O_HSINKS},
        {"heads-windows", 1, 0, O_HWIN}, {"heads-zero", 0, 0, O_HZERO},
        {"heads-threads", 1, 0, O_HTHREADS}, {"heads-flip", 0, 0, O_HFLIP},
        {"heads-no-gate", 0, 0, O_HNOGATE}, {"heads-split-max", 1, 0, O_HSPLITMAX},
        {"heads-top1", 1, 0, O_HTOP1}, {"heads-short", 1, 0, O_HSHORT},
        {"out", 1, 0, 'o'}, {"quiet", 0, 0, 'q'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    scdb_evict_rl_opts o;
    scdb_evict_rl_result res;
    scdb_evict_mlp *mlp = NULL;
    scdb_evict_policy *init = NULL;
    scdb_evict_suite *suite = NULL;
    char suite_path[1200] = "", log_path[1200] = "", png_path[1200] = "", err[512] = "";
    char *models[MAX_MODELS], *domains[MAX_DOMAINS], *inputs[SCDB_EVICT_MAX_INPUTS];
    char *dirs[MAX_MODELS] = {0}, *texts[MAX_DOMAINS][2];
    scdb_evict_corpus corp[MAX_DOMAINS];
    int n_models = 0, n_domains = 0, n_inputs = -1, c, ret = 1, quiet = 0;
    const char *out_path = NULL, *init_path = NULL, *age_path = NULL, *prof[MAX_PROFILE];
    int n_prof = 0, vb_given = 0, n_expert = 0;
    const char *expert_path[MAX_PROFILE];
    scdb_evict_policy *experts[MAX_PROFILE] = {0};
    FILE *logf = NULL;
    scdb_err rc;

    memset(texts, 0, sizeof texts);
    memset(corp, 0, sizeof corp);
    scdb_evict_rl_defaults(&o);
    optind = 1;
    char imit_only[40] = "";                /* the last --imit-* option given */
    char heads_only[40] = "";               /* the last --heads-* option given */
    int heads_win_given = 0;
    scdb_evict_heads init_heads;           /* --init's scorer with --heads-windows' choices */
    while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        int bad = 0;
        double fr[4];
        char oname[40], why[160] = "";
        /* the option's own name, looked up by its value (not by its place:
         * the table's order need not follow the enum's) */
        const char *on = "?";
        for (const struct option *op = opts; op->name; op++)
            if (op->val == c) { on = op->name; break; }
        snprintf(oname, sizeof oname, "--%s", on);
        switch (c) {
        case O_SUITE: snprintf(suite_path, sizeof suite_path, "%s", optarg); break;
        case O_DOMAINS:   /* given again: the last list counts */
            for (int i = 0; i < n_domains; i++) free(domains[i]);
            bad = (n_domains = scdb_split_list(optarg, domains, MAX_DOMAINS)) < 1;
            break;
        case O_MODELS:
            for (int i = 0; i < n_models; i++) free(models[i]);
            bad = (n_models = scdb_split_list(optarg, models, MAX_MODELS)) < 1;
            break;
        case O_INPUTS:
            n_inputs = scdb_split_list(optarg, inputs, SCDB_EVICT_MAX_INPUTS);
            bad = n_inputs < 1;
            for (int i = 0; i < n_inputs && !bad; i++) {
                o.inputs[i] = scdb_evict_input_parse(inputs[i]);
                bad = o.inputs[i] < 0;
                for (int j = 0; j < i && !bad; j++) bad = o.inputs[j] == o.inputs[i];
            }
            for (int i = 0; i < n_inputs; i++) free(inputs[i]);
            if (!bad) o.n_inputs = n_inputs;
            break;
        case O_UPDATES: bad = scdb_parse_int(oname, optarg, 0, 10000000, &o.updates, why, sizeof why); break;
        case O_BATCH: bad = scdb_parse_int(oname, optarg, 1, 1024, &o.batch, why, sizeof why); break;
        case O_STATES: bad = scdb_parse_int(oname, optarg, 1, 32, &o.states, why, sizeof why); break;
        case O_SAMPLES: bad = scdb_parse_int(oname, optarg, 2, 64, &o.samples, why, sizeof why); break;
        case O_HORIZON: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.horizon, why, sizeof why); break;
        case O_HFIRST: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.horizon_first, why, sizeof why); break;
        case O_ABSTAU: o.rel_tau = 0; break;
        case O_TAUEND: bad = scdb_parse_float(oname, optarg, 1e-3f, 100.0f, &o.tau_end, why, sizeof why); break;
        case O_BRANGE:
            bad = parse_fracs(optarg, fr, 2) != 2 || fr[1] < fr[0];
            if (!bad) { o.budget_lo = fr[0]; o.budget_hi = fr[1]; }
            break;
        case O_VBUDGETS:
            vb_given = 1;
            o.n_val_budgets = parse_fracs(optarg, o.val_budgets, 4);
            bad = o.n_val_budgets < 1;
            break;
        case O_WINDOWS: {
            double wf[SCDB_EVICT_MAX_WIN];
            o.n_win = parse_windows(optarg, wf, SCDB_EVICT_MAX_WIN);
            bad = o.n_win < 1;
            for (int wi = 0; wi < o.n_win; wi++) o.win_frac[wi] = (float)wf[wi];
            break;
        }
        case O_AGEPROF: age_path = optarg; break;
        case O_FLIP: o.lr_sign = -1.0f; break;
        case O_LAST: o.last = optarg; break;
        case O_IMIT: bad = scdb_parse_int(oname, optarg, 0, 100, &o.imit_rounds, why, sizeof why); break;
        case O_IEPIS: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.imit_episodes, why, sizeof why); break;
        case O_IEPOCHS: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.imit_epochs, why, sizeof why); break;
        case O_IBATCH: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.imit_batch, why, sizeof why); break;
        case O_ITEMP: bad = scdb_parse_float(oname, optarg, 1e-4f, 100.0f, &o.imit_temp, why, sizeof why); break;
        case O_SKIP: o.skip = 1; break;
        case O_HEADRUNS: o.head_runs = 1; break;
        case O_ITRAIN: {
            char *w[3];
            int nw = scdb_split_list(optarg, w, 3);
            bad = nw < 1;
            o.imit_train = 0;
            for (int i = 0; i < nw; i++) {
                if (!strcmp(w[i], "net")) o.imit_train |= 1;
                else if (!strcmp(w[i], "skip")) o.imit_train |= 2;
                else if (!strcmp(w[i], "head")) o.imit_train |= 4;
                else bad = 1;
                free(w[i]);
            }
            break;
        }
        case O_IBANDW: bad = scdb_parse_int(oname, optarg, 0, 4096, &o.imit_band_windows, why, sizeof why); break;
        case O_ISTATEW: bad = scdb_parse_float(oname, optarg, 0.0f, 1.0f, &o.imit_state_weight, why, sizeof why); break;
        case O_ILR: bad = scdb_parse_float(oname, optarg, 1e-9f, 10.0f, &o.imit_lr, why, sizeof why); break;
        case O_IVAL: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.imit_val_every, why, sizeof why); break;
        case O_EXPERT:
            bad = n_expert == MAX_PROFILE;
            if (!bad) expert_path[n_expert++] = optarg;
            break;
        case O_PROFILE:
            bad = n_prof == MAX_PROFILE;
            if (!bad) prof[n_prof++] = optarg;
            break;
        case O_HEADS: bad = scdb_parse_int(oname, optarg, 0, 100000, &o.heads_gens, why, sizeof why); break;
        case O_HPAIRS: bad = scdb_parse_int(oname, optarg, 1, 64, &o.heads_pairs, why, sizeof why); break;
        case O_HEPIS: bad = scdb_parse_int(oname, optarg, 1, 4096, &o.heads_episodes, why, sizeof why); break;
        case O_HPOOL: bad = scdb_parse_int(oname, optarg, 1, 100000, &o.heads_pool, why, sizeof why); break;
        case O_HSIGMA: bad = scdb_parse_float(oname, optarg, 1e-4f, 100.0f, &o.heads_sigma, why, sizeof why); break;
        case O_HLR: bad = scdb_parse_float(oname, optarg, 1e-6f, 10.0f, &o.heads_lr, why, sizeof why); break;
        case O_HRANGE:
            bad = parse_fracs(optarg, fr, 2) != 2 || fr[1] < fr[0];
            if (!bad) { o.heads_lo = fr[0]; o.heads_hi = fr[1]; }
            break;
        case O_HVAL: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.heads_val_every, why, sizeof why); break;
        case O_HSINKS: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.heads_sinks, why, sizeof why); break;
        case O_HWIN: {
            double wf[SCDB_EVICT_MAX_WIN];
            heads_win_given = 1;
            o.heads_n_win = parse_windows(optarg, wf, SCDB_EVICT_HEAD_MAX_WIN);
            bad = o.heads_n_win < 1;
            for (int wi = 0; wi < o.heads_n_win; wi++) o.heads_win_frac[wi] = (float)wf[wi];
            break;
        }
        case O_HZERO: o.heads_init_zero = 1; break;
        case O_HTHREADS: bad = scdb_parse_int(oname, optarg, 1, 16, &o.heads_threads, why, sizeof why); break;
        case O_HFLIP: o.heads_sign = -1.0f; break;
        case O_HNOGATE: o.heads_gate = 0; break;
        case O_HTOP1: bad = scdb_parse_f64(oname, optarg, 0.0, 100.0, &o.heads_top1, why, sizeof why); break;
        case O_HSHORT: bad = scdb_parse_f64(oname, optarg, 0.0, 1.0, &o.heads_short, why, sizeof why); break;
        case O_HSPLITMAX:
            bad = scdb_parse_f64(oname, optarg, 1e-6, 1.0, &o.heads_split_max, why, sizeof why);
            break;
        case O_WINLR: bad = scdb_parse_float(oname, optarg, 0.0f, 10.0f, &o.win_lr, why, sizeof why); break;
        case O_VALW: bad = scdb_parse_int(oname, optarg, 1, 1024, &o.val_windows, why, sizeof why); break;
        case O_VALE: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.val_every, why, sizeof why); break;
        case O_LR: bad = scdb_parse_float(oname, optarg, 1e-9f, 10.0f, &o.lr, why, sizeof why); break;
        case O_ENTROPY: bad = scdb_parse_float(oname, optarg, 0.0f, 100.0f, &o.entropy, why, sizeof why); break;
        case O_TAU: bad = scdb_parse_float(oname, optarg, 1e-3f, 100.0f, &o.tau, why, sizeof why); break;
        case O_HIDDEN: bad = scdb_parse_int(oname, optarg, 1, 1024, &o.hidden, why, sizeof why); break;
        case O_SINKS: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.sinks, why, sizeof why); break;
        case O_RECENT: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.recent, why, sizeof why); break;
        case O_RFRAC: bad = scdb_parse_float(oname, optarg, 0.0f, 0.999f, &o.recent_frac, why, sizeof why); break;
        case O_POOL: bad = scdb_parse_int(oname, optarg, 1, 63, &o.pool, why, sizeof why) || o.pool % 2 == 0; break;
        case O_PREFILL: bad = scdb_parse_int(oname, optarg, 2, 1 << 20, &o.prefill, why, sizeof why); break;
        case O_STEPS: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.steps, why, sizeof why); break;
        case O_EVERY: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.every, why, sizeof why); break;
        case O_INIT: init_path = optarg; break;
        case O_MINUTES: {
            float m = 0.0f;
            bad = scdb_parse_float(oname, optarg, 1e-3f, 1e7f, &m, why, sizeof why);
            o.max_seconds = 60.0 * m;
            break;
        }
        case O_SEED: bad = scdb_parse_u64(oname, optarg, 0, UINT64_MAX, &o.seed, why, sizeof why); break;
        case O_LOG: snprintf(log_path, sizeof log_path, "%s", optarg); break;
        case O_PNG: snprintf(png_path, sizeof png_path, "%s", optarg); break;
        case 'o': out_path = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) {
            if (why[0]) fprintf(stderr, "train-policy: %s\n", why);
            else fprintf(stderr, "train-policy: bad value for %s: '%s'\n", oname, optarg);
            return 2;
        }
        if ((c >= O_IEPIS && c <= O_IVAL) || c == O_ISTATEW || c == O_IBANDW || c == O_ITRAIN)
            snprintf(imit_only, sizeof imit_only, "%s", oname);
        if (c > O_HEADS && c <= O_HSHORT) snprintf(heads_only, sizeof heads_only, "%s", oname);
    }
    if (heads_only[0] && o.heads_gens == 0) {
        fprintf(stderr, "train-policy: %s is for --heads G (G > 0)\n", heads_only);
        return 2;
    }
    if (o.heads_gens > 0 && o.heads_episodes > o.heads_pool) {
        fprintf(stderr, "train-policy: --heads-episodes %d exceeds --heads-pool %d\n",
                o.heads_episodes, o.heads_pool);
        return 2;
    }
    if (imit_only[0] && o.imit_rounds == 0) {
        /* the imitation's options do nothing without its rounds */
        fprintf(stderr, "train-policy: %s is for --imitate R (R > 0)\n", imit_only);
        return 2;
    }
    if (n_prof && !age_path) {
        fprintf(stderr, "train-policy: --profile is for --age-profile OUT\n");
        return 2;
    }
    if (age_path && (!n_prof || optind < argc)) {
        fprintf(stderr, "train-policy: --age-profile needs --profile FILE (1 to %d)\n", MAX_PROFILE);
        return 2;
    }
    if (age_path && !vb_given) {
        static const double fr[] = {0.5, 0.25, 0.125, 0.0625};
        memcpy(o.val_budgets, fr, sizeof fr);
        o.n_val_budgets = 4;
    }
    if (optind < argc || (!out_path && !age_path)) {
        fprintf(stderr, "train-policy: %s\n\n", out_path ? "unexpected argument" : "-o FILE is required");
        usage(stderr);
        return 2;
    }
    if (o.horizon > o.steps || o.horizon_first > o.steps) {
        fprintf(stderr, "train-policy: --horizon and --horizon-first must not exceed --steps\n");
        return 2;
    }
    if (!log_path[0] && out_path) cli_sibling_path(out_path, ".jsonl", log_path, sizeof log_path);
    if (!png_path[0] && out_path) cli_sibling_path(out_path, ".train.png", png_path, sizeof png_path);
    if (!suite_path[0])
        snprintf(suite_path, sizeof suite_path, "%s/evict_suite/manifest.json", cli_data_dir());
    if (!n_models) n_models = list_models(cli_data_dir(), models, MAX_MODELS);
    if (n_models < 1) {
        fprintf(stderr, "train-policy: no models under %s/models\n", cli_data_dir());
        return 1;
    }

    if ((rc = scdb_evict_suite_load(suite_path, &suite, err, sizeof err))) {
        fprintf(stderr, "train-policy: %s: %s\n", scdb_strerror(rc), err);
        goto done;
    }
    if (!n_domains)
        for (int i = 0; i < suite->n_domains && n_domains < MAX_DOMAINS; i++)
            if (suite->domains[i].seen) domains[n_domains++] = strdup(suite->domains[i].name);
    for (int i = 0; i < n_domains; i++) {
        int d = scdb_evict_suite_find(suite, domains[i]);
        size_t l;
        if (d < 0 || !suite->domains[d].seen) {
            fprintf(stderr, "train-policy: '%s' is %s of %s: training reads seen domains only\n",
                    domains[i], d < 0 ? "not a domain" : "an unseen domain", suite_path);
            ret = 2;
            goto done;
        }
        if ((rc = scdb_evict_suite_read(suite, d, SCDB_EVICT_PART_TRAIN, &texts[i][0], &l, err,
                                        sizeof err))) {
            fprintf(stderr, "train-policy: %s: %s\n", scdb_strerror(rc), err);
            goto done;
        }
        corp[i].train_len = l;
        if ((rc = scdb_evict_suite_read(suite, d, SCDB_EVICT_PART_VAL, &texts[i][1], &l, err,
                                        sizeof err))) {
            fprintf(stderr, "train-policy: %s: %s\n", scdb_strerror(rc), err);
            goto done;
        }
        corp[i].val_len = l;
        corp[i].name = domains[i];
        corp[i].train = (const unsigned char *)texts[i][0];
        corp[i].val = (const unsigned char *)texts[i][1];
    }
    for (int i = 0; i < n_models; i++) {
        size_t l = strlen(cli_data_dir()) + strlen(models[i]) + 16;
        if (!(dirs[i] = malloc(l))) goto done;
        snprintf(dirs[i], l, "%s/models/%s", cli_data_dir(), models[i]);
    }
    if (age_path) {
        ret = age_profile(&o, dirs, n_models, corp, n_domains, prof, n_prof, age_path);
        goto done;
    }
    if (init_path) {
        if ((rc = scdb_evict_policy_load(init_path, &init, err, sizeof err))) {
            fprintf(stderr, "train-policy: --init %s: %s: %s\n", init_path, scdb_strerror(rc), err);
            goto done;
        }
        o.init = scdb_evict_policy_mlp(init);
        if (o.heads_gens > 0 && o.init->heads.on) {
            /* a version-6 start: the fit goes on from its scorer, whose
             * sinks it keeps, and its window choices (or --heads-windows'
             * superset of them) */
            o.heads_sinks = o.init->heads.sinks;
            o.heads_init = &o.init->heads;
            if (heads_win_given) {
                /* more choices than the start's: the new ones start one
                 * noise scale below their nearest, so generation 0 decides
                 * as the start does */
                if ((rc = scdb_evict_heads_extend(&o.init->heads, o.heads_n_win, o.heads_win_frac,
                                                  o.heads_sigma, &init_heads, err, sizeof err))) {
                    fprintf(stderr, "train-policy: --heads-windows with --init %s: %s\n", init_path, err);
                    ret = 2;
                    goto done;
                }
                o.heads_init = &init_heads;
            } else {
                o.heads_n_win = o.init->heads.n_win;
                memcpy(o.heads_win_frac, o.init->heads.win_frac, sizeof o.heads_win_frac);
            }
        }
    }
    for (int i = 0; i < n_expert; i++) {
        if ((rc = scdb_evict_policy_load(expert_path[i], &experts[i], err, sizeof err))) {
            fprintf(stderr, "train-policy: --expert %s: %s: %s\n", expert_path[i], scdb_strerror(rc), err);
            goto done;
        }
        o.experts[i] = scdb_evict_policy_mlp(experts[i]);
    }
    o.n_experts = n_expert;
    o.checkpoint = out_path;   /* every new best, then the final file with all metadata */
    o.model_dirs = (const char *const *)dirs;
    o.n_models = n_models;
    o.corpora = corp;
    o.n_corpora = n_domains;
    o.verbose = !quiet;
    if (!(logf = fopen(log_path, "w"))) {
        fprintf(stderr, "train-policy: cannot write log %s\n", log_path);
        goto done;
    }
    o.log = logf;
    if (!quiet) {
        fprintf(stderr, "train-policy: models");
        for (int i = 0; i < n_models; i++) fprintf(stderr, " %s", models[i]);
        fprintf(stderr, "; domains");
        for (int i = 0; i < n_domains; i++) fprintf(stderr, " %s", domains[i]);
        fprintf(stderr, "; %d steps x %d episodes x %d states x %d draws, horizon %d (first %d; "
                        "0: to the end); log %s\n",
                o.updates, o.batch, o.states, o.samples, o.horizon, o.horizon_first, log_path);
    }
    if ((rc = scdb_evict_train_rl(&o, &mlp, &res, err, sizeof err))) {
        fprintf(stderr, "train-policy: %s%s%s\n", scdb_strerror(rc), err[0] ? ": " : "", err);
        goto done;
    }

    {
        char mlist[256] = "", dlist[512] = "", num[16][48], date[32], imit[2048] = "none"; /* 4 experts x NAME_MAX fit */
        char heads[1536] = "none";
        time_t now = time(NULL);
        struct tm tmv;
        for (int i = 0; i < n_models; i++) {
            size_t l = strlen(mlist);
            snprintf(mlist + l, sizeof mlist - l, "%s%s", i ? "," : "", models[i]);
        }
        for (int i = 0; i < n_domains; i++) {
            size_t l = strlen(dlist);
            snprintf(dlist + l, sizeof dlist - l, "%s%s", i ? "," : "", domains[i]);
        }
        gmtime_r(&now, &tmv);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
        snprintf(num[0], sizeof num[0], "%d", res.updates);
        snprintf(num[1], sizeof num[1], "%d", res.episodes);
        snprintf(num[2], sizeof num[2], "%d x %d draws, horizon %d (first %d)", o.states, o.samples,
                 o.horizon, o.horizon_first);
        snprintf(num[3], sizeof num[3], "%g", o.lr);
        snprintf(num[4], sizeof num[4], "%g", o.entropy);
        snprintf(num[5], sizeof num[5], "%d/%d/%d", o.prefill, o.steps, o.every);
        snprintf(num[6], sizeof num[6], "%.6f", res.val_kl_init);
        snprintf(num[7], sizeof num[7], "%.6f", res.val_kl_best);
        snprintf(num[8], sizeof num[8], "%.4f", res.val_ratio_init);
        snprintf(num[9], sizeof num[9], "%.4f", res.val_ratio_best);
        snprintf(num[10], sizeof num[10], "%.6f", res.val_kl_best_heuristic);
        snprintf(num[11], sizeof num[11], "%.0f", res.seconds);
        snprintf(num[12], sizeof num[12], "%d", res.best_update);
        snprintf(num[13], sizeof num[13], "%g,%g", o.budget_lo, o.budget_hi);
        snprintf(num[14], sizeof num[14], "%llu", (unsigned long long)o.seed);
        if (o.tau_end > 0.0f)
            snprintf(num[15], sizeof num[15], "%g -> %g%s", o.tau, o.tau_end, o.rel_tau ? " (relative)" : "");
        else
            snprintf(num[15], sizeof num[15], "%g%s", o.tau, o.rel_tau ? " (relative)" : "");
        if (o.imit_rounds > 0) {
            size_t l;
            snprintf(imit, sizeof imit, "%d rounds x %d episodes, %d epochs each, batch %d, lr %g, "
                     "temp %g, state weight %g, band windows %d, trains%s%s%s, experts",
                     o.imit_rounds, o.imit_episodes, o.imit_epochs, o.imit_batch, o.imit_lr,
                     o.imit_temp, o.imit_state_weight, o.imit_band_windows,
                     (o.imit_train & 1) ? " net" : "", (o.imit_train & 2) ? " skip" : "",
                     (o.imit_train & 4) ? " head" : "");
            for (int i = 0; i < n_expert; i++) {
                const char *b = strrchr(expert_path[i], '/');
                l = strlen(imit);
                snprintf(imit + l, sizeof imit - l, " %s", b ? b + 1 : expert_path[i]);
            }
            if (!n_expert) {
                l = strlen(imit);
                snprintf(imit + l, sizeof imit - l, " none");
            }
        }
        if (o.heads_gens > 0)
            snprintf(heads, sizeof heads, "evolution strategies (evict/train_heads.c): %d of %d "
                     "generations (best %d) on models %s, %d pairs x %d episodes of a pool of %d, "
                     "budgets %g-%g, half-length share %g, sigma %g, lr %g, start %s, top-1 weight %g; validation %.4f -> "
                     "%.4f; gate %s (weighted accuracy %.3f on the pool, validation %.4f); split %g "
                     "(at most %g)",
                     res.heads_gens_run, o.heads_gens, res.heads_best_gen, mlist, o.heads_pairs,
                     o.heads_episodes, o.heads_pool, o.heads_lo, o.heads_hi, o.heads_short, o.heads_sigma,
                     o.heads_lr, o.heads_init ? "the --init file's scorer" : o.heads_init_zero ? "zeros" : "snapkv per set",
                     o.heads_top1,
                     res.heads_ratio_init, res.heads_ratio_best, o.heads_gate ? "fitted" : "none",
                     res.heads_gate_acc, res.heads_ratio_gated, (double)res.heads_split,
                     o.heads_split_max);
        /* the models the scorer was fitted on: this run's, and those of the
         * runs before it (an --init with a scorer: its heads_trained_on, or
         * the trained_on of a file whose scorer and network share them) */
        char hlist[512] = "";
        if (o.heads_gens > 0) {
            const char *prev = o.heads_init
                                   ? (scdb_evict_policy_meta(init, "heads_trained_on")
                                          ? scdb_evict_policy_meta(init, "heads_trained_on")
                                          : scdb_evict_policy_meta(init, "trained_on"))
                                   : NULL;
            snprintf(hlist, sizeof hlist, "%s", prev ? prev : "");
            for (int i = 0; i < n_models; i++) {
                size_t l = strlen(hlist);
                if (!scdb_list_has(hlist, models[i]))
                    snprintf(hlist + l, sizeof hlist - l, "%s%s", l ? "," : "", models[i]);
            }
        }
        const char *keys[] = {"heads_trainer", "trained_on", "domains", "trainer", "imitation", "updates", "episodes", "states",
                              "lr", "entropy_bonus", "prefill/steps/every", "val_kl_init",
                              "val_kl_best", "val_ratio_init", "val_ratio_best",
                              "val_kl_best_heuristic", "train_seconds", "best_update",
                              "budget_range", "seed", "tau", "init", "created",
                              "heads_trained_on"};   /* last: left out without a scorer */
        const char *vals[SCDB_ARRAY_LEN(keys)] = {heads, mlist, dlist,
                              o.imit_rounds > 0 ? "imitation, then reinforce per state (evict/train_rl.c)"
                                                : "reinforce per state (evict/train_rl.c)",
                              imit, num[0], num[1],
                              num[2], num[3], num[4], num[5], num[6], num[7], num[8], num[9],
                              num[10], num[11], num[12], num[13], num[14], num[15],
                              init_path ? init_path : "random", date, hlist};
        /* the network as --init gave it (no update, no imitation: only the
         * per-head scorer was fitted): its own provenance stays, and the
         * scorer's record grows by this run */
        char *chain = NULL;
        if (init && o.updates == 0 && o.imit_rounds == 0) {
            for (size_t i = 0; i < SCDB_ARRAY_LEN(keys); i++) {
                if (!strcmp(keys[i], "heads_trainer") || !strcmp(keys[i], "heads_trained_on") ||
                    !strcmp(keys[i], "created"))
                    continue;
                const char *iv = scdb_evict_policy_meta(init, keys[i]);
                if (iv) vals[i] = iv;
            }
            const char *prev = scdb_evict_policy_meta(init, "heads_trainer");
            if (prev && o.heads_gens > 0) {
                size_t cl = strlen(prev) + strlen(heads) + 8;   /* the whole chain, however long */
                if (!(chain = malloc(cl))) {
                    fprintf(stderr, "train-policy: out of memory\n");
                    rc = SCDB_ENOMEM;
                    goto done;
                }
                snprintf(chain, cl, "%s; then %s", prev, heads);
                vals[0] = chain;
            }
        }
        rc = scdb_evict_mlp_save(mlp, out_path, keys, vals,
                                 (int)SCDB_ARRAY_LEN(keys) - (hlist[0] ? 0 : 1));
        free(chain);
        if (rc) {
            fprintf(stderr, "train-policy: cannot write %s: %s\n", out_path, scdb_strerror(rc));
            goto done;
        }
    }
    fclose(logf);
    logf = NULL;
    if (o.heads_gens > 0) {
        printf("# per-head scorer\n\n%d generations, best at %d: validation score %.3f (start %.3f)\n"
               "by validation budget (the scorer / the network):", res.heads_gens_run,
               res.heads_best_gen, res.heads_ratio_best, res.heads_ratio_init);
        for (int b = 0; b < o.n_val_budgets; b++)
            printf(" %g: %.3f / %.3f", o.val_budgets[b], res.heads_by_budget[b], res.net_by_budget[b]);
        if (o.heads_gate)
            printf("\ngate: the better of scorer and network on %.1f%% of the pool (weighted); "
                   "validation with the gate %.3f", 100.0 * res.heads_gate_acc, res.heads_ratio_gated);
        printf("\nsplit %g (%s)\n\n", (double)res.heads_split,
               res.heads_split > 0.0f ? "keep sets per head at budgets up to split x capacity"
                                      : "no scorer: the network is better at every validation budget");
    }
    printf("# train-policy summary\n\n"
           "%d Adam steps, %d episodes in %.0f s\n"
           "validation KL (mean over (model, domain, budget)): initial %.5f, best %.5f "
           "(after %d steps); the best heuristic per group %.5f\n"
           "validation score (geometric mean of KL / the best heuristic's): initial %.3f, best %.3f\n"
           "heuristics on the same windows: streaming %.5f, h2o %.5f, snapkv %.5f, tova %.5f\n"
           "wrote %s (log %s)\n",
           res.updates, res.episodes, res.seconds, res.val_kl_init, res.val_kl_best,
           res.best_update, res.val_kl_best_heuristic, res.val_ratio_init, res.val_ratio_best,
           res.val_kl_heuristic[SCDB_EVICT_STREAMING], res.val_kl_heuristic[SCDB_EVICT_H2O],
           res.val_kl_heuristic[SCDB_EVICT_SNAPKV], res.val_kl_heuristic[SCDB_EVICT_TOVA],
           out_path, log_path);
    {
        /* the validation curve: a table from the log, and its plot */
        char script[1400], cmd[4096];
        snprintf(script, sizeof script, "%s/tools/plot_train_policy.py", scdb_share_dir());
        if (access(script, R_OK) || access("/usr/bin/python3", X_OK)) {
            printf("no curve: %s or /usr/bin/python3 is missing\n", script);
        } else {
            fflush(stdout);
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, log_path, png_path);
            if (system(cmd) != 0) printf("no PNG: %s failed (is matplotlib installed?)\n", script);
        }
    }
    ret = 0;
done:
    if (logf) fclose(logf);
    scdb_evict_mlp_free(&mlp);
    scdb_evict_policy_free(&init);
    for (int i = 0; i < n_expert; i++) scdb_evict_policy_free(&experts[i]);
    scdb_evict_suite_free(&suite);
    for (int i = 0; i < n_models; i++) { free(models[i]); free(dirs[i]); }
    for (int i = 0; i < n_domains; i++) { free(domains[i]); free(texts[i][0]); free(texts[i][1]); }
    return ret;
}
