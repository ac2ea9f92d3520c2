/* cmd_train_policy.c — `scdb train-policy`: train the DistillCache eviction
 * MLP with REINFORCE against the full-cache teacher (evict/train.c) and
 * write it as a policy file (schema/FORMATS.md). */
#include <float.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "evict.h"
#include "model.h"
#include "scdb_cli.h"

int cli_cmd_train_policy(int argc, char **argv);
int cli_cmd_train_policy_rl(int argc, char **argv);   /* cmd_train_policy_rl.c: the default */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb train-policy --legacy [options] -o FILE\n\n"
            "The single-model, single-text trainer (`scdb train-policy --help` is the\n"
            "default one, over the domain suite and every model).\n"
            "Train the DistillCache eviction policy (7 inputs -> MLP -> score) with\n"
            "REINFORCE: teacher = full cache, student = evicted cache, reward per step\n"
            "-KL(teacher || student) over a teacher-forced continuation, Gumbel /\n"
            "Plackett-Luce top-B sampling, leave-one-out baseline over K samples,\n"
            "entropy bonus, Adam.  The network that does best on fixed validation\n"
            "windows (deterministic top-B) is written.\n\n"
            "  --model DIR       model to train against (default: DATA/models/base)\n"
            "  --text FILE       training text (default: DATA/heldout/english.txt)\n"
            "  --part P          first | second | all: which half of the text to use\n"
            "                    (default first; `scdb bench evict` evaluates on the second)\n"
            "  --budget F[,F..]  budget fractions of prefill+steps, one drawn per episode\n"
            "                    (default 0.25,0.125)\n"
            "  --episodes N      policy updates (default 120)\n"
            "  --samples K       rollouts per episode, >= 2 (default 4)\n"
            "  --lr X            Adam step size, decayed along a cosine to 10%% (default 5e-4)\n"
            "  --entropy X       entropy bonus weight (default 0.01)\n"
            "  --tau X           Gumbel noise scale: samples from Plackett-Luce(score / X)\n"
            "                    (default 0.3)\n"
            "  --prefill P       prefill tokens per window (default 256)\n"
            "  --prefill-min P   draw each window's prefill from [P, --prefill] (default 0:\n"
            "                    fixed); budgets stay fractions of prefill + steps\n"
            "  --steps T         teacher-forced continuation steps (default 256)\n"
            "  --every C         evict every C steps (default 8)\n"
            "  --hidden H        MLP width (default 32)\n"
            "  --sinks N         always-kept first slots (default 4)\n"
            "  --recent N        always-kept last slots (default 32)\n"
            "  --recent-frac F   ... or more: at least F x the budget, F in [0, 1) (default 0.5)\n"
            "  --pool K          max-pool the scores over K neighbouring slots, odd\n"
            "                    (default 5; 1: plain per-token DistillCache)\n"
            "  --init I          mixed | ungated | attention | recency | random: start from\n"
            "                    a prior.  ungated: mixed's wiring with the gate unit's\n"
            "                    budget weight and bias at 0 (budget-blind blend of alpha\n"
            "                    and mass; the gate is left to the gradient; --gate unused).\n"
            "                    mixed (default): unit 0 reads alpha, unit 1 the cumulative\n"
            "                    mass, gated by the budget (SnapKV-like below --gate slots,\n"
            "                    H2O-like above); attention / recency: unit 0 reads alpha /\n"
            "                    the log-age alone; the rest random; or all random\n"
            "  --gate S          budget in slots where the mixed prior switches from\n"
            "                    alpha to mass (default 112)\n"
            "  --draw D          kept | evicted: sample the kept slots from PL(score / tau)\n"
            "                    or the evicted ones from PL(-score / tau) (default evicted)\n"
            "  --adv-norm A      running | episode: scale advantages by a running RMS over\n"
            "                    episodes or by this episode's RMS (default episode)\n"
            "  --train W         all | gate: which weights the gradient updates; gate: only\n"
            "                    the gate unit's (hidden unit 2, first layer; --init mixed\n"
            "                    or ungated) (default all)\n"
            "  --val-windows N   validation windows (default 32)\n"
            "  --val-every N     episodes between validations (default 20)\n"
            "  --minutes M       stop after M minutes (default: no limit)\n"
            "  --seed N          random seed (default 1)\n"
            "  --log FILE        JSONL log (default: FILE with .jsonl instead of .safetensors)\n"
            "  -o, --out FILE    policy file to write (required)\n"
            "  -q, --quiet       no progress on stderr\n"
            "  -h, --help        this text\n\n"
            "DATA is %s (environment SCDB_DATA).\n",
            cli_data_dir());
}

static int parse_budgets(const char *s, scdb_evict_train_opts *o)
{
    char buf[256], *save = NULL, *tok;
    snprintf(buf, sizeof buf, "%s", s);
    o->n_budgets = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(tok, &end);
        if (*end || !(v > 0.0 && v < 1.0) || o->n_budgets == 4) return -1;
        o->budgets[o->n_budgets++] = v;
    }
    return o->n_budgets > 0 ? 0 : -1;
}

int cli_cmd_train_policy(int argc, char **argv)
{
    enum { O_MODEL = 256, O_TEXT, O_PART, O_BUDGET, O_EPISODES, O_SAMPLES, O_LR, O_ENTROPY,
           O_PREFILL, O_STEPS, O_EVERY, O_HIDDEN, O_SINKS, O_RECENT, O_VALW, O_VALE,
           O_MINUTES, O_SEED, O_LOG, O_PREFILL_MIN, O_POOL, O_INIT, O_TAU, O_RECENT_FRAC, O_GATE, O_DRAW, O_ADV_NORM, O_TRAIN, O_LEGACY };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL}, {"text", required_argument, 0, O_TEXT},
        {"part", required_argument, 0, O_PART}, {"budget", required_argument, 0, O_BUDGET},
        {"episodes", required_argument, 0, O_EPISODES}, {"samples", required_argument, 0, O_SAMPLES},
        {"lr", required_argument, 0, O_LR}, {"entropy", required_argument, 0, O_ENTROPY},
        {"prefill", required_argument, 0, O_PREFILL}, {"steps", required_argument, 0, O_STEPS},
        {"every", required_argument, 0, O_EVERY}, {"hidden", required_argument, 0, O_HIDDEN},
        {"sinks", required_argument, 0, O_SINKS}, {"recent", required_argument, 0, O_RECENT},
        {"val-windows", required_argument, 0, O_VALW}, {"val-every", required_argument, 0, O_VALE},
        {"minutes", required_argument, 0, O_MINUTES}, {"seed", required_argument, 0, O_SEED},
        {"log", required_argument, 0, O_LOG}, {"prefill-min", required_argument, 0, O_PREFILL_MIN},
        {"pool", required_argument, 0, O_POOL}, {"init", required_argument, 0, O_INIT},
        {"tau", required_argument, 0, O_TAU},
        {"recent-frac", required_argument, 0, O_RECENT_FRAC},
        {"gate", required_argument, 0, O_GATE},
        {"draw", required_argument, 0, O_DRAW},
        {"adv-norm", required_argument, 0, O_ADV_NORM},
        {"train", required_argument, 0, O_TRAIN},
        {"legacy", no_argument, 0, O_LEGACY},
        {"out", required_argument, 0, 'o'},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    scdb_evict_train_opts o;
    scdb_evict_train_result res;
    scdb_evict_mlp *mlp = NULL;
    char model_dir[1024], text_path[1024], log_path[1200] = "", err[512] = "";
    const char *out_path = NULL, *part = "first";
    char *text = NULL;
    size_t len = 0;
    FILE *logf = NULL;
    int c, ret = 1, quiet = 0;
    scdb_err rc;

    int legacy = 0;
    for (int i = 1; i < argc; i++) legacy |= !strcmp(argv[i], "--legacy");
    if (!legacy) return cli_cmd_train_policy_rl(argc, argv);
    scdb_evict_train_defaults(&o);
    snprintf(model_dir, sizeof model_dir, "%s/models/base", cli_data_dir());
    scdb_model_heldout_path(cli_data_dir(), "english", text_path, sizeof text_path);
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        int bad = 0;
        char oname[40], why[160] = "";
        snprintf(oname, sizeof oname, "--%s", c >= O_MODEL ? opts[c - O_MODEL].name : "?");
        switch (c) {
        case O_MODEL: snprintf(model_dir, sizeof model_dir, "%s", optarg); break;
        case O_TEXT: snprintf(text_path, sizeof text_path, "%s", optarg); break;
        case O_PART:
            part = optarg;
            bad = strcmp(part, "first") && strcmp(part, "second") && strcmp(part, "all");
            break;
        case O_BUDGET: bad = parse_budgets(optarg, &o); break;
        case O_EPISODES: bad = scdb_parse_int(oname, optarg, 0, 10000000, &o.episodes, why, sizeof why); break;
        case O_SAMPLES: bad = scdb_parse_int(oname, optarg, 2, 1024, &o.samples, why, sizeof why); break;
        case O_LR: bad = scdb_parse_float(oname, optarg, FLT_MIN, FLT_MAX, &o.lr, why, sizeof why); break;
        case O_ENTROPY: bad = scdb_parse_float(oname, optarg, 0.0f, FLT_MAX, &o.entropy, why, sizeof why); break;
        case O_PREFILL: bad = scdb_parse_int(oname, optarg, 2, 1 << 20, &o.prefill, why, sizeof why); break;
        case O_STEPS: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.steps, why, sizeof why); break;
        case O_EVERY: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.every, why, sizeof why); break;
        case O_HIDDEN: bad = scdb_parse_int(oname, optarg, 1, 1024, &o.hidden, why, sizeof why); break;
        case O_SINKS: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.sinks, why, sizeof why); break;
        case O_RECENT: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.recent, why, sizeof why); break;
        case O_VALW: bad = scdb_parse_int(oname, optarg, 1, 1024, &o.val_windows, why, sizeof why); break;
        case O_VALE: bad = scdb_parse_int(oname, optarg, 1, 1 << 20, &o.val_every, why, sizeof why); break;
        case O_MINUTES: {
            double m = 0;
            bad = scdb_parse_f64(oname, optarg, 1e-9, 1e9, &m, why, sizeof why);
            o.max_seconds = 60.0 * m;
            break;
        }
        case O_SEED: bad = scdb_parse_u64(oname, optarg, 0, UINT64_MAX, &o.seed, why, sizeof why); break;
        case O_LOG: snprintf(log_path, sizeof log_path, "%s", optarg); break;
        case O_PREFILL_MIN: bad = scdb_parse_int(oname, optarg, 0, 1 << 20, &o.prefill_min, why, sizeof why); break;
        case O_POOL: bad = scdb_parse_int(oname, optarg, 1, 63, &o.pool, why, sizeof why) || o.pool % 2 == 0; break;
        case O_RECENT_FRAC:   /* [0, 1) */
            bad = scdb_parse_float(oname, optarg, 0.0f, 1.0f, &o.recent_frac, why, sizeof why) ||
                  o.recent_frac >= 1.0f;
            break;
        case O_GATE: bad = scdb_parse_float(oname, optarg, 1.0f, 1e9f, &o.gate, why, sizeof why); break;
        case O_TAU: bad = scdb_parse_float(oname, optarg, FLT_MIN, 100.0f, &o.tau, why, sizeof why); break;
        case O_INIT:
            if (!strcmp(optarg, "attention")) o.init = SCDB_EVICT_INIT_ATTENTION;
            else if (!strcmp(optarg, "recency")) o.init = SCDB_EVICT_INIT_RECENCY;
            else if (!strcmp(optarg, "random")) o.init = SCDB_EVICT_INIT_RANDOM;
            else if (!strcmp(optarg, "mixed")) o.init = SCDB_EVICT_INIT_MIXED;
            else if (!strcmp(optarg, "ungated")) o.init = SCDB_EVICT_INIT_UNGATED;
            else bad = 1;
            break;
        case O_DRAW:
            if (!strcmp(optarg, "kept")) o.draw_evicted = 0;
            else if (!strcmp(optarg, "evicted")) o.draw_evicted = 1;
            else bad = 1;
            break;
        case O_ADV_NORM:
            if (!strcmp(optarg, "running")) o.adv_norm = 0;
            else if (!strcmp(optarg, "episode")) o.adv_norm = 1;
            else bad = 1;
            break;
        case O_TRAIN:
            if (!strcmp(optarg, "all")) o.train_gate_only = 0;
            else if (!strcmp(optarg, "gate")) o.train_gate_only = 1;
            else bad = 1;
            break;
        case O_LEGACY: break;
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
    }
    if (optind < argc || !out_path) {
        fprintf(stderr, "train-policy: %s\n\n", out_path ? "unexpected argument" : "-o FILE is required");
        usage(stderr);
        return 2;
    }
    if (!log_path[0]) cli_sibling_path(out_path, ".jsonl", log_path, sizeof log_path);

    if ((rc = scdb_read_file(text_path, (size_t)1 << 30, &text, &len))) {
        fprintf(stderr, "train-policy: cannot read %s: %s\n", text_path, scdb_strerror(rc));
        return 1;
    }
    if (!strcmp(part, "first")) { o.text = (unsigned char *)text; o.text_len = len / 2; }
    else if (!strcmp(part, "second")) { o.text = (unsigned char *)text + len / 2; o.text_len = len - len / 2; }
    else { o.text = (unsigned char *)text; o.text_len = len; }
    o.model_dir = model_dir;
    o.verbose = !quiet;
    if (!(logf = fopen(log_path, "w"))) {
        fprintf(stderr, "train-policy: cannot write log %s\n", log_path);
        goto done;
    }
    o.log = logf;
    if (!quiet)
        fprintf(stderr,
                "train-policy: model %s, text %s (%s half, %zu bytes), budgets", model_dir,
                text_path, part, o.text_len);
    if (!quiet) {
        for (int b = 0; b < o.n_budgets; b++) fprintf(stderr, " %g", o.budgets[b]);
        fprintf(stderr, ", %d episodes x %d samples, prefill %d, steps %d, every %d, log %s\n",
                o.episodes, o.samples, o.prefill, o.steps, o.every, log_path);
    }
    if ((rc = scdb_evict_train(&o, &mlp, &res, err, sizeof err))) {
        fprintf(stderr, "train-policy: %s%s%s\n", scdb_strerror(rc), err[0] ? ": " : "", err);
        goto done;
    }

    {
        scdb_model_config cfg;
        char budgets[64] = "", num[12][48], date[32];
        const char *model_name = model_dir;
        time_t now = time(NULL);
        struct tm tmv;
        if (!scdb_model_config_load_any(model_dir, NULL, &cfg, NULL, 0)) model_name = cfg.name;   /* or an adapter's */
        for (int b = 0; b < o.n_budgets; b++) {
            size_t l = strlen(budgets);
            snprintf(budgets + l, sizeof budgets - l, "%s%g", b ? "," : "", o.budgets[b]);
        }
        gmtime_r(&now, &tmv);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
        snprintf(num[0], sizeof num[0], "%d", res.episodes);
        snprintf(num[1], sizeof num[1], "%d", o.samples);
        snprintf(num[2], sizeof num[2], "%g", o.lr);
        snprintf(num[3], sizeof num[3], "%g", o.entropy);
        if (o.prefill_min > 0 && o.prefill_min < o.prefill)
            snprintf(num[4], sizeof num[4], "%d-%d/%d/%d", o.prefill_min, o.prefill, o.steps, o.every);
        else
            snprintf(num[4], sizeof num[4], "%d/%d/%d", o.prefill, o.steps, o.every);
        snprintf(num[5], sizeof num[5], "%.6f", res.val_kl_init);
        snprintf(num[6], sizeof num[6], "%.6f", res.val_kl_best);
        snprintf(num[7], sizeof num[7], "%.6f", res.val_kl_heuristic[SCDB_EVICT_STREAMING]);
        snprintf(num[8], sizeof num[8], "%.6f", res.val_kl_heuristic[SCDB_EVICT_H2O]);
        snprintf(num[9], sizeof num[9], "%.6f", res.val_kl_heuristic[SCDB_EVICT_SNAPKV]);
        snprintf(num[10], sizeof num[10], "%.6f", res.val_kl_heuristic[SCDB_EVICT_TOVA]);
        snprintf(num[11], sizeof num[11], "%.0f", res.seconds);
        char gate[32];
        if (o.init == SCDB_EVICT_INIT_MIXED) snprintf(gate, sizeof gate, "%g", o.gate);
        else snprintf(gate, sizeof gate, "-");
        char text_desc[1200];
        const char *base = strrchr(text_path, '/');
        snprintf(text_desc, sizeof text_desc, "%s (%s half)", base ? base + 1 : text_path, part);
        const char *keys[] = {"trained_on", "text", "budgets", "episodes", "samples", "lr",
                              "entropy_bonus", "prefill/steps/every", "val_kl_init", "val_kl_best",
                              "val_kl_streaming", "val_kl_h2o", "val_kl_snapkv", "val_kl_tova",
                              "train_seconds", "created", "init", "gate", "draw", "adv_norm", "trained_weights"};
        const char *vals[] = {model_name, text_desc, budgets, num[0], num[1], num[2], num[3],
                              num[4], num[5], num[6], num[7], num[8], num[9], num[10], num[11],
                              date, o.init == SCDB_EVICT_INIT_ATTENTION ? "attention"
                                    : o.init == SCDB_EVICT_INIT_RECENCY ? "recency"
                                    : o.init == SCDB_EVICT_INIT_MIXED ? "mixed"
                                    : o.init == SCDB_EVICT_INIT_UNGATED ? "ungated" : "random",
                              gate, o.draw_evicted ? "evicted" : "kept",
                              o.adv_norm ? "episode" : "running",
                              o.train_gate_only ? "gate" : "all"};
        if ((rc = scdb_evict_mlp_save(mlp, out_path, keys, vals, (int)SCDB_ARRAY_LEN(keys)))) {
            fprintf(stderr, "train-policy: cannot write %s: %s\n", out_path, scdb_strerror(rc));
            goto done;
        }
    }
    printf("# train-policy summary\n\n"
           "model %s, text %s (%s half), %d episodes x %d samples in %.0f s\n"
           "mean sampled KL: first 10%% of episodes %.5f, last 10%% %.5f\n"
           "validation KL (deterministic top-B, mean over budgets): initial %.5f, best %.5f "
           "(after %d episodes)\n"
           "heuristics on the same windows: streaming %.5f, h2o %.5f, snapkv %.5f, tova %.5f\n"
           "wrote %s (log %s)\n",
           model_dir, text_path, part, res.episodes, o.samples, res.seconds, -res.first_reward,
           -res.last_reward, res.val_kl_init, res.val_kl_best, res.best_episode,
           res.val_kl_heuristic[SCDB_EVICT_STREAMING], res.val_kl_heuristic[SCDB_EVICT_H2O],
           res.val_kl_heuristic[SCDB_EVICT_SNAPKV], res.val_kl_heuristic[SCDB_EVICT_TOVA],
           out_path, log_path);
    ret = 0;
done:
    if (logf) fclose(logf);
    scdb_evict_mlp_free(&mlp);
    free(text);
    return ret;
}
