/* train_rl.c — DistillCache training over several models and text domains:
 * REINFORCE with per-state Plackett-Luce sampling, the full-cache teacher's
 * KL as the reward, a leave-one-out baseline and an entropy bonus.
 *
 * An episode is one window of one training domain's train text under one
 * model, at one budget B (a fraction of prefill + steps, drawn log-uniform
 * from [budget_lo, budget_hi] so the network sees every budget, not two).
 * The window is prefilled, the full cache decodes the continuation
 * teacher-forced and gives P_t (episode.c).  The student then runs the
 * current policy deterministically (what is deployed) and, at `states`
 * eviction points (always the first, the largest: prefill -> B; the others
 * drawn at random), branches:
 *
 *   state s (the student's cache and accumulators just before eviction)
 *     |-- sample k = 1..K: draw the evicted set from Plackett-Luce(-score),
 *     |   decode h steps under the deterministic policy,
 *     |   R_k = -(1/h) sum_{t=s}^{s+h-1} KL(P_t || Q_t^k)
 *     |   (h: the rest of the window for the first eviction, whose effect
 *     |   lasts that long: a token needed 200 steps later is gone for good;
 *     |   `horizon` steps for the later, smaller evictions)
 *     +-- advantage A_k = (R_k - mean_{j != k} R_j) / sd(R)
 *
 * The K draws see the same state, teacher and continuation, so the
 * leave-one-out baseline removes everything but the effect of the drawn
 * set; dividing by the state's spread of rewards weighs states at every
 * budget, model and text alike (KL differs by 10x between them).  The loss
 *
 *   L = -(1/K) sum_k A_k log p(draw_k)  -  beta H(first stage)
 *
 * (log p and its gradient: scdb_evict_pl_grad, evicted draws; H the
 * entropy of the first Plackett-Luce stage) is summed over the states of
 * `batch` episodes, backpropagated by hand through the MLP (mlp.c) and
 * applied with Adam (step size decayed along a cosine to 10%).
 *
 * Nothing in the start encodes an answer: the network starts from seeded
 * random weights; its input standardisation (mean and spread of each input
 * on the validation windows' prefilled caches, at the validation budgets)
 * is the only thing set from data before training.
 *
 * Validation: every val_every updates, the deterministic policy on fixed
 * windows of every (model, training domain)'s val text at each validation
 * budget (the bench's protocol).  Per group g (model, domain, budget) the
 * mean KL k_g; the score is the geometric mean over groups of k_g / h_g,
 * h_g the best heuristic's KL on the same windows (below 1: better than the
 * best heuristic on average, every group weighted alike).  The network with
 * the lowest score is returned. */
#include "evict_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define MAX_MODELS 8
#define MAX_CORPORA 32
#define MAX_STATES 32
#define MAX_VB 4

void scdb_evict_rl_defaults(scdb_evict_rl_opts *o)
{
    static const int ids[] = {SCDB_EI_ALPHA, SCDB_EI_VNORM, SCDB_EI_SIGMA, SCDB_EI_ENT,
                              SCDB_EI_POS, SCDB_EI_MASS, SCDB_EI_BUDGET, SCDB_EI_AGE,
                              SCDB_EI_R_MASS, SCDB_EI_R_ALPHA, SCDB_EI_R_WIN, SCDB_EI_R_SNAPKV,
                              SCDB_EI_R_LAST, SCDB_EI_VNORM_Z, SCDB_EI_LIFE, SCDB_EI_R_LIFE,
                              SCDB_EI_CTX_ENT, SCDB_EI_CTX_N};
    memset(o, 0, sizeof *o);
    o->budget_lo = 0.09;
    o->budget_hi = 0.55;
    o->val_budgets[0] = 0.25;
    o->val_budgets[1] = 0.125;
    o->n_val_budgets = 2;
    o->updates = 800;
    o->batch = 2;
    o->states = 3;
    o->samples = 8;
    o->horizon = 48;
    o->prefill = 256;
    o->steps = 256;
    o->every = 8;
    o->lr = 2e-3f;
    o->entropy = 0.01f;
    o->tau = 0.5f;
    o->rel_tau = 1;
    o->hidden = 32;
    memcpy(o->inputs, ids, sizeof ids);
    o->n_inputs = (int)(sizeof ids / sizeof ids[0]);
    o->sinks = 4;
    o->recent = 8;
    o->recent_frac = 0.5f;
    o->pool = 5;
    o->n_win = 0;
    o->win_lr = 0.05f;
    o->lr_sign = 1.0f;
    o->imit_rounds = 0;
    o->imit_episodes = 60;
    o->imit_epochs = 20;
    o->imit_batch = 8;
    o->imit_temp = 0.05f;
    o->imit_state_weight = 0.0f;
    o->imit_band_windows = 0;
    o->imit_train = 7;
    o->head_runs = 0;
    o->skip = 0;
    o->imit_lr = 3e-3f;
    o->imit_val_every = 5;
    o->val_windows = 4;
    o->val_every = 50;
    o->seed = 1;
    o->heads_gens = 0;
    o->heads_pairs = 8;
    o->heads_episodes = 12;
    o->heads_pool = 96;
    o->heads_sigma = 0.3f;
    o->heads_lr = 0.05f;
    o->heads_lo = 0.04;
    o->heads_hi = 0.3;
    o->heads_val_every = 5;
    o->heads_sinks = 0;
    o->heads_n_win = 5;
    {
        static const float wf[] = {0.0f, 0.125f, 0.25f, 0.5f, 0.75f};
        memcpy(o->heads_win_frac, wf, sizeof wf);
    }
    o->heads_init_zero = 0;
    o->heads_threads = 2;
    o->heads_gate = 1;
    o->heads_sign = 1.0f;
    o->heads_split_max = 1.0;
    o->heads_top1 = 0.0;
    o->heads_short = 0.0;
}

double scdb_evict_loo_advantages(const double *R, int K, double *A, double *mean_out)
{
    double mean = 0.0, sd = 0.0;
    for (int k = 0; k < K; k++) mean += R[k] / K;
    for (int k = 0; k < K; k++) sd += (R[k] - mean) * (R[k] - mean) / K;
    sd = sqrt(sd);
    /* leave-one-out: R_k - mean of the others = K/(K-1) (R_k - mean) */
    for (int k = 0; k < K; k++) A[k] = sd > 1e-9 ? (R[k] - mean) * K / (K - 1) / sd : 0.0;
    if (mean_out) *mean_out = mean;
    return sd;
}

/* One validation group: windows of one (model, corpus); per budget. */
typedef struct vgroup {
    int model, corpus;
    int n_win;
    scdb_evict_window **win;
    double best_h[MAX_VB];               /* the best heuristic's mean KL */
    double heur[SCDB_EVICT_KIND_COUNT][MAX_VB];
} vgroup;

/* s as a JSON string, quotes included: model and policy names come from
 * paths the user gives, which may hold quotes, backslashes or controls */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* The protocol's window (prefill + steps) fits the model's context:
 * SCDB_OK, or SCDB_ERANGE with a message naming both */
static scdb_err check_window(const scdb_evict_rl_opts *o, const scdb_model *m, const char *dir,
                             char *errbuf, size_t errlen)
{
    const int ctx = scdb_model_cfg(m)->max_seq_len;
    if (o->prefill + o->steps <= ctx) return SCDB_OK;
    scdb_errf(errbuf, errlen, "prefill %d + steps %d exceed %s's context of %d tokens", o->prefill,
              o->steps, dir, ctx);
    return SCDB_ERANGE;
}

static int budget_slots(double frac, const scdb_evict_rl_opts *o)
{
    int b = (int)(frac * (o->prefill + o->steps) + 0.5);
    return b < 1 ? 1 : b;
}

/* mean KL of policy p on group g at validation budget b */
static scdb_err group_kl(vgroup *g, const scdb_evict_policy *p, const scdb_evict_rl_opts *o,
                         int b, double *out)
{
    double s = 0.0;
    for (int i = 0; i < g->n_win; i++) {
        scdb_evict_eval e;
        scdb_err rc = scdb_evict_window_eval(g->win[i], p, budget_slots(o->val_budgets[b], o),
                                             o->every, NULL, &e);
        if (rc) return rc;
        s += e.kl;
    }
    *out = s / g->n_win;
    return SCDB_OK;
}

/* validation of network m: mean KL over groups, per budget, and the score */
static scdb_err validate(vgroup *gs, int ng, const scdb_evict_mlp *m, const scdb_evict_rl_opts *o,
                         double *kl_mean, double *by_budget, double *ratio, double *group_kl_out)
{
    scdb_evict_policy *p = NULL;
    scdb_err rc = scdb_evict_policy_from_mlp(m, &p);
    double tot = 0.0, lr = 0.0;
    if (rc) return rc;
    for (int b = 0; b < o->n_val_budgets; b++) by_budget[b] = 0.0;
    for (int gi = 0; gi < ng && !rc; gi++)
        for (int b = 0; b < o->n_val_budgets && !rc; b++) {
            double k;
            if ((rc = group_kl(&gs[gi], p, o, b, &k))) break;
            if (group_kl_out) group_kl_out[gi * o->n_val_budgets + b] = k;
            tot += k;
            by_budget[b] += k / ng;
            lr += log(fmax(k, 1e-9) / fmax(gs[gi].best_h[b], 1e-9));
        }
    scdb_evict_policy_free(&p);
    if (rc) return rc;
    *kl_mean = tot / (ng * o->n_val_budgets);
    *ratio = exp(lr / (ng * o->n_val_budgets));
    return SCDB_OK;
}

/* Input standardisation from the validation windows' prefilled caches at
 * each validation budget. */
static scdb_err standardise(vgroup *gs, int ng, const scdb_evict_rl_opts *o, scdb_evict_mlp *m)
{
    const int NA = SCDB_EVICT_N_ALL_INPUTS, cap = o->prefill + o->steps;
    double sum[SCDB_EVICT_N_ALL_INPUTS] = {0}, sq[SCDB_EVICT_N_ALL_INPUTS] = {0};
    long cnt = 0;
    float *f = malloc((size_t)cap * SCDB_EVICT_N_FEATURES * sizeof *f);
    float *x = malloc((size_t)cap * NA * sizeof *x);
    scdb_err rc = SCDB_ENOMEM;
    if (!f || !x) goto done;
    for (int gi = 0; gi < ng; gi++)
        for (int i = 0; i < gs[gi].n_win; i++) {
            const scdb_evict_acc *a = scdb_evict_window_acc(gs[gi].win[i]);
            if ((rc = scdb_evict_features(a, f))) goto done;
            for (int b = 0; b < o->n_val_budgets; b++) {
                if ((rc = scdb_evict_inputs(a, f, budget_slots(o->val_budgets[b], o), x))) goto done;
                for (int j = 0; j < a->n; j++)
                    for (int k = 0; k < NA; k++) {
                        double v = x[(size_t)j * NA + k];
                        sum[k] += v;
                        sq[k] += v * v;
                    }
                cnt += a->n;
            }
        }
    for (int k = 0; k < m->n_in; k++) {
        int id = m->in_id[k];
        double mu = sum[id] / cnt, var = sq[id] / cnt - mu * mu;
        m->in_mean[k] = (float)mu;
        /* inputs constant at the validation budgets (log budget spread is
         * between budgets only): at least half a unit of log */
        m->in_std[k] = (float)(var > 0.25 ? sqrt(var) : 0.5);
    }
    rc = SCDB_OK;
done:
    free(f);
    free(x);
    return rc;
}

static void log_validation(FILE *log, int upd, int episodes, double secs, double kl,
                           const double *bb, double ratio, int best, const scdb_evict_rl_opts *o,
                           const vgroup *gs, int ng, const double *gk,
                           const scdb_evict_corpus *corpora, const char *const *model_names,
                           const scdb_evict_mlp *m)
{
    if (!log) return;
    fprintf(log, "{\"validation\":%d,\"episodes\":%d,\"seconds\":%.1f,\"val_kl\":%.6f,\"ratio\":%.5f,"
                 "\"by_budget\":[", upd, episodes, secs, kl, ratio);
    for (int b = 0; b < o->n_val_budgets; b++) fprintf(log, "%s%.6f", b ? "," : "", bb[b]);
    fprintf(log, "],\"window\":[");
    for (int b = 0; b < o->n_val_budgets; b++) {
        int sk, rc_;
        scdb_evict_mlp_protect(m, budget_slots(o->val_budgets[b], o), &sk, &rc_);
        fprintf(log, "%s%d", b ? "," : "", rc_);
    }
    fprintf(log, "],\"best\":%s,\"groups\":[", best ? "true" : "false");
    for (int gi = 0; gi < ng; gi++)
        for (int b = 0; b < o->n_val_budgets; b++) {
            fprintf(log, "%s{\"model\":", gi || b ? "," : "");
            json_str(log, model_names[gs[gi].model]);
            fprintf(log, ",\"domain\":");
            json_str(log, corpora[gs[gi].corpus].name);
            fprintf(log, ",\"budget\":%g,\"kl\":%.6f,\"best_heuristic\":%.6f}", o->val_budgets[b],
                    gk[gi * o->n_val_budgets + b], gs[gi].best_h[b]);
        }
    fprintf(log, "]}\n");
    fflush(log);
}

/* The window head's gradient at the student's current state (budget B):
 * every choice c is tried once, the network's deterministic top-B under
 * that window followed by the policy for `hz` steps, R_c = -mean KL.  With
 * A_c = (R_c - mean R) / sd(R) and p = softmax of the head's logits at B,
 * the expected advantage E_p[A] has d/d logit_c = p_c (A_c - E_p[A]):
 * the exact policy gradient of the head at this state (no sampling noise
 * beyond the state's), accumulated into gwin as the loss's (descent)
 * gradient, logit_c = w[2c] + w[2c + 1] z. */
static scdb_err window_grad(scdb_evict_window *win, scdb_evict_sampler *ws, const scdb_evict_mlp *mlp,
                            const scdb_evict_policy *pol, int B, int every, int hz, float *gwin,
                            int *n_wstates)
{
    double R[SCDB_EVICT_MAX_WIN], mean = 0.0, sd = 0.0, ea = 0.0;
    float p[SCDB_EVICT_MAX_WIN], z;
    int C = mlp->n_win, last_r = -1;
    scdb_evict_mlp_window(mlp, B, p, &z);
    for (int c = 0; c < C; c++) {
        int sk, rc_, same;
        double klm;
        scdb_err rc;
        scdb_evict_mlp_protect_choice(mlp, B, c, &sk, &rc_);
        same = c > 0 && rc_ == last_r;       /* the same window as the last choice (min recent) */
        last_r = rc_;
        if (same) { R[c] = R[c - 1]; continue; }
        scdb_evict_sampler_clear(ws);
        ws->mlp = mlp;
        ws->tau = 1.0f;
        ws->draw_evicted = 1;
        ws->rel_tau = 0;
        ws->no_noise = 1;
        ws->win_pick = c + 1;
        if ((rc = scdb_evict_window_branch(win, ws, pol, B, every, hz, &klm))) return rc;
        R[c] = -klm;
    }
    scdb_evict_sampler_clear(ws);
    for (int c = 0; c < C; c++) mean += R[c] / C;
    for (int c = 0; c < C; c++) sd += (R[c] - mean) * (R[c] - mean) / C;
    sd = sqrt(sd);
    if (!(sd > 1e-9)) return SCDB_OK;
    for (int c = 0; c < C; c++) ea += p[c] * (R[c] - mean) / sd;
    for (int c = 0; c < C; c++) {
        float g = -p[c] * (float)((R[c] - mean) / sd - ea);
        gwin[2 * c] += g;
        gwin[2 * c + 1] += g * z;
    }
    (*n_wstates)++;
    return SCDB_OK;
}

/* ------------------------------------------------------------ imitation
 *
 * What the heuristics know at a small budget, taught directly.  At a
 * branch state (budget B, the student's cache) every candidate policy j
 * evicts to B and runs the next h steps itself: KL_j.  The candidates are
 * the four heuristics as they are, the expert networks (the shipped file)
 * with their own protection and with a quarter and three quarters of the
 * budget protected, the heuristics' signals (SnapKV's pooled window
 * attention, H2O's mass, TOVA's last query, ranked) under 4 sinks and
 * other recent windows, and from round 2 the learner itself.  Each
 * candidate's kept set is the top B of a priority over the slots
 * (protected slots first, then its score; ties: the newer slot), stored as
 * the slots' order.  The learner (its own protection p at B: sinks and
 * the recent window) is fitted to
 *
 *   L = - sum_states sum_j w_j log PL(kept_j | scores),
 *   w_j = softmax_j(-(KL_j / min_k KL_k - 1) / temp),
 *
 * log PL(kept_j) the Plackett-Luce log-likelihood of the first m entries
 * of candidate j's order among the learner's unprotected slots (m = B
 * minus the protected ones): a top-m ListMLE, the likelihood of choosing
 * that kept set, in that order, by drawing from the learner's scores
 * (pg.c's gradient with wlp = -w_j).  So the learner ranks like the
 * candidate that did best from that state, by a margin the temperature
 * sets, and can combine them: which one wins depends on the state, and
 * the state is what the network reads.  Cheap next to REINFORCE: one set
 * of branches per state, reused for every epoch. */

typedef struct imit_state {
    int n, B;
    float *x;          /* [n][NA] every input, before standardisation */
    int nc;
    int *order;        /* [nc][n] slots by the candidate's priority, highest first */
    int *recent;       /* [nc] the candidate's protected recent slots at B */
    double *kl;        /* [nc] */
    int band;          /* budget band (imit_bands) */
    const double *band_lr;   /* [nc] the band's mean log KL ratios; NULL: none */
    float lam;         /* weight of the state's own KL against the band's */
} imit_state;

#define MAX_CAND 24
#define IMIT_BANDS 8

typedef struct imit_set {
    imit_state *st;
    int n, cap;
    /* full runs on train windows (imit_full_runs): KL [windows][band][cand],
     * < 0 where not run */
    double *full_kl;
    int full_windows;
} imit_set;

static void imit_set_free(imit_set *d)
{
    for (int i = 0; i < d->n; i++) {
        free(d->st[i].x);
        free(d->st[i].order);
        free(d->st[i].recent);
        free(d->st[i].kl);
    }
    free(d->st);
    free(d->full_kl);
    memset(d, 0, sizeof *d);
}

typedef struct imit_cands {
    scdb_evict_policy *pol[MAX_CAND];
    char name[MAX_CAND][40];
    int n;
    int learner;       /* index of the learner's slot, -1: none yet */
} imit_cands;

static void imit_cands_free(imit_cands *c)
{
    for (int i = 0; i < c->n; i++) scdb_evict_policy_free(&c->pol[i]);
    c->n = 0;
}

/* a policy ranking by one input (lower = keep for ranks and ages, sign -1),
 * protecting `sinks` and floor(frac * B) recent slots: a 1-1-1 network
 * tanh(tanh(0.05 sign x)), monotone in x, so its top-B is the signal's */
static scdb_err signal_policy(int id, float sign, int sinks, float frac, scdb_evict_policy **out)
{
    scdb_evict_mlp *m = NULL;
    scdb_err rc = scdb_evict_mlp_new_inputs(1, &id, 1, 1, &m);
    if (rc) return rc;
    m->w1[0] = 0.05f * sign;
    m->b1[0] = 0.0f;
    m->w2[0] = 1.0f;
    m->b2[0] = 0.0f;
    m->w3[0] = 1.0f;
    m->b3[0] = 0.0f;
    m->sinks = sinks;
    m->recent = 1;
    m->recent_frac = frac;
    m->pool = 1;
    rc = scdb_evict_policy_from_mlp(m, out);
    scdb_evict_mlp_free(&m);
    return rc;
}

static scdb_err imit_add(imit_cands *c, scdb_evict_policy *p, const char *name)
{
    if (!p) return SCDB_ENOMEM;
    if (c->n == MAX_CAND) {
        scdb_evict_policy_free(&p);
        return SCDB_EINVAL;
    }
    c->pol[c->n] = p;
    snprintf(c->name[c->n], sizeof c->name[c->n], "%s", name);
    c->n++;
    return SCDB_OK;
}

static scdb_err imit_candidates(const scdb_evict_rl_opts *o, imit_cands *c)
{
    static const struct { int id; float frac; const char *name; } sig[] = {
        {SCDB_EI_R_SNAPKV, 0.25f, "snapkv-signal/s4/0.25"},
        {SCDB_EI_R_SNAPKV, 0.5f, "snapkv-signal/s4/0.5"},
        {SCDB_EI_R_SNAPKV, 0.75f, "snapkv-signal/s4/0.75"},
        {SCDB_EI_R_MASS, 0.25f, "h2o-signal/s4/0.25"},
        {SCDB_EI_R_MASS, 0.75f, "h2o-signal/s4/0.75"},
        {SCDB_EI_R_LAST, 0.5f, "tova-signal/s4/0.5"}};
    scdb_err rc;
    memset(c, 0, sizeof *c);
    c->learner = -1;
    for (int k = SCDB_EVICT_STREAMING; k < SCDB_EVICT_LEARNED; k++) {
        scdb_evict_policy *p = NULL;
        if ((rc = scdb_evict_policy_new((scdb_evict_kind)k, &p)) ||
            (rc = imit_add(c, p, scdb_evict_kind_name((scdb_evict_kind)k))))
            return rc;
    }
    for (int e = 0; e < o->n_experts; e++) {
        static const float fr[] = {-1.0f, 0.25f, 0.75f};
        for (int v = 0; v < 3; v++) {
            scdb_evict_mlp *m = NULL;
            scdb_evict_policy *p = NULL;
            char nm[40];
            if ((rc = scdb_evict_mlp_clone(o->experts[e], &m))) return rc;
            if (fr[v] >= 0.0f) {
                m->n_win = 0;
                m->recent_frac = fr[v];
            }
            rc = scdb_evict_policy_from_mlp(m, &p);
            scdb_evict_mlp_free(&m);
            if (rc) return rc;
            if (fr[v] >= 0.0f) snprintf(nm, sizeof nm, "expert%d/%g", e + 1, (double)fr[v]);
            else snprintf(nm, sizeof nm, "expert%d", e + 1);
            if ((rc = imit_add(c, p, nm))) return rc;
        }
    }
    for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++) {
        scdb_evict_policy *p = NULL;
        if ((rc = signal_policy(sig[i].id, -1.0f, 4, sig[i].frac, &p)) ||
            (rc = imit_add(c, p, sig[i].name)))
            return rc;
    }
    return SCDB_OK;
}

/* order[n]: the slots by p's priority at budget B, highest first (the
 * protected ones, then by score; ties: the newer slot), so p's kept set is
 * its first min(n, B) entries */
static scdb_err priority_order(const scdb_evict_policy *p, const scdb_evict_acc *a, int B,
                               float *score, int *order, int *recent_out)
{
    int n = a->n, sinks, recent;
    scdb_err rc;
    scdb_evict_policy_protect(p, a, n, B, &sinks, &recent);
    *recent_out = recent;
    if ((rc = scdb_evict_policy_score_budget(p, a, B, score))) return rc;
    for (int i = 0; i < n; i++) {
        if (i < sinks || i >= n - recent) score[i] = INFINITY;
        else if (isnan(score[i])) score[i] = -INFINITY;
        order[i] = i;
    }
    return scdb_evict_rank(score, order, n);
}

/* Collect one round: o->imit_episodes episodes, each at its branch states
 * (as the REINFORCE episodes choose them), every candidate's order and KL. */
static scdb_err imit_collect(const scdb_evict_rl_opts *o, scdb_model *const *models,
                             const char *const *model_names, int32_t *const *tok,
                             const imit_cands *c, const scdb_evict_policy *behaviour,
                             uint64_t *rng, imit_set *d)
{
    const int span = o->prefill + o->steps + 1, cap = o->prefill + o->steps;
    const int NA = SCDB_EVICT_N_ALL_INPUTS;
    scdb_evict_window *win = NULL;
    float *f = malloc((size_t)cap * SCDB_EVICT_N_FEATURES * sizeof *f);
    float *score = malloc((size_t)cap * sizeof *score);
    scdb_err rc = SCDB_ENOMEM;
    if (!f || !score) goto done;
    for (int e = 0; e < o->imit_episodes; e++) {
        int mi = (int)(scdb_evict_urand(rng) * o->n_models) % o->n_models;
        int ci = (int)(scdb_evict_urand(rng) * o->n_corpora) % o->n_corpora;
        size_t room = o->corpora[ci].train_len - (size_t)span;
        size_t off = (size_t)(scdb_evict_urand(rng) * (double)(room + 1));
        if (off > room) off = room;
        double lf = log(o->budget_lo) + scdb_evict_urand(rng) * (log(o->budget_hi) - log(o->budget_lo));
        int B = budget_slots(exp(lf), o);
        const scdb_evict_policy *beh = behaviour;
        int bi = (int)(scdb_evict_urand(rng) * c->n) % c->n;
        if (!beh) beh = c->pol[bi];
        if ((rc = scdb_evict_window_new(models[mi], tok[ci] + off, o->prefill, o->steps, &win)))
            goto done;
        const int h_later = o->horizon ? o->horizon : 1;
        int pts[MAX_STATES], np = 0, n_ev = (o->steps - h_later) / o->every + 1;
        pts[np++] = 0;
        for (int tries = 0; np < o->states && np < n_ev && tries < 100; tries++) {
            int t = o->every * (1 + (int)(scdb_evict_urand(rng) * (n_ev - 1)));
            int dup = t > o->steps - h_later;
            for (int i = 0; i < np; i++) dup |= pts[i] == t;
            if (!dup) pts[np++] = t;
        }
        for (int i = 1; i < np; i++)
            for (int j = i; j > 0 && pts[j] < pts[j - 1]; j--) {
                int tmp = pts[j]; pts[j] = pts[j - 1]; pts[j - 1] = tmp;
            }
        if ((rc = scdb_evict_window_reset(win))) goto done;
        for (int s = 0; s < np; s++) {
            if ((rc = scdb_evict_window_steps(win, beh, B, o->every, pts[s], NULL))) goto done;
            const scdb_evict_acc *a = scdb_evict_window_student_acc(win);
            int n = a->n;
            if (n <= B) continue;
            int hz = s == 0 ? o->horizon_first : o->horizon;
            if (hz == 0 || pts[s] + hz > o->steps) hz = o->steps - pts[s];
            if (d->n == d->cap) {
                int nc2 = d->cap ? 2 * d->cap : 64;
                imit_state *g = realloc(d->st, (size_t)nc2 * sizeof *g);
                rc = SCDB_ENOMEM;
                if (!g) goto done;
                d->st = g;
                d->cap = nc2;
            }
            imit_state *st = &d->st[d->n];
            memset(st, 0, sizeof *st);
            st->n = n;
            st->B = B;
            st->nc = c->n;
            st->x = malloc((size_t)n * NA * sizeof *st->x);
            st->order = malloc((size_t)c->n * n * sizeof *st->order);
            st->kl = malloc((size_t)c->n * sizeof *st->kl);
            st->recent = malloc((size_t)c->n * sizeof *st->recent);
            rc = SCDB_ENOMEM;
            if (!st->x || !st->order || !st->kl || !st->recent) {
                free(st->x); free(st->order); free(st->kl); free(st->recent);
                goto done;
            }
            d->n++;
            if ((rc = scdb_evict_features(a, f)) || (rc = scdb_evict_inputs(a, f, B, st->x))) goto done;
            for (int j = 0; j < c->n; j++) {
                if ((rc = priority_order(c->pol[j], a, B, score, st->order + (size_t)j * n,
                                         &st->recent[j])))
                    goto done;
                if ((rc = scdb_evict_window_branch(win, NULL, c->pol[j], B, o->every, hz, &st->kl[j])))
                    goto done;
            }
            if (o->log) {
                fprintf(o->log, "{\"imitation_state\":%d,\"model\":", d->n - 1);
                json_str(o->log, model_names[mi]);
                fprintf(o->log, ",\"domain\":");
                json_str(o->log, o->corpora[ci].name);
                fprintf(o->log, ",\"budget\":%d,\"n\":%d,\"step\":%d,\"horizon\":%d,\"kl\":[", B, n,
                        pts[s], hz);
                for (int j = 0; j < c->n; j++) fprintf(o->log, "%s%.6g", j ? "," : "", st->kl[j]);
                fprintf(o->log, "]}\n");
            }
        }
        scdb_evict_window_free(&win);
        if (o->verbose && (e + 1) % 10 == 0)
            fprintf(stderr, "train-policy: imitation: %d/%d episodes, %d states\n", e + 1,
                    o->imit_episodes, d->n);
    }
    rc = SCDB_OK;
done:
    scdb_evict_window_free(&win);
    free(f);
    free(score);
    return rc;
}

/* The candidates' weights at a state: softmax_j of -(lam * r_j + (1 - lam)
 * * rb_j) / temp, r_j = log(KL_j / min_k KL_k) at this state and rb_j its
 * mean over the states of the same budget band (st->band_lr; NULL: lam
 * 1).  lam 1 follows each state's winner, which the next tokens decide as
 * much as the state; lam 0 the candidate that does best from states like
 * it on average, a target the network can learn. */
static void imit_weights(const imit_state *st, int nc, float temp, double *w)
{
    double mn = INFINITY, sum = 0.0, best = INFINITY;
    const double lam = st->band_lr ? st->lam : 1.0;
    for (int j = 0; j < nc; j++) if (st->kl[j] < mn) mn = st->kl[j];
    mn = fmax(mn, 1e-9);
    for (int j = 0; j < nc; j++) {
        double r = log(fmax(st->kl[j], 1e-9) / mn);
        w[j] = lam * r + (st->band_lr ? (1.0 - lam) * st->band_lr[j] : 0.0);
        if (w[j] < best) best = w[j];
    }
    for (int j = 0; j < nc; j++) sum += (w[j] = exp(-(w[j] - best) / temp));
    for (int j = 0; j < nc; j++) w[j] /= sum;
}

/* The budget (slots) at the middle of band b. */
static int band_budget(const scdb_evict_rl_opts *o, int b)
{
    double lo = log(o->budget_lo), hi = log(o->budget_hi);
    return budget_slots(exp(lo + (b + 0.5) * (hi - lo) / IMIT_BANDS), o);
}

/* Full runs (the validation's protocol, on the train texts) of candidates
 * [j0, j1) at every band's middle budget, on o->imit_band_windows windows
 * drawn from a fixed seed (the same windows for every call, so later calls
 * add the learner to the same table). */
static scdb_err imit_full_runs(const scdb_evict_rl_opts *o, scdb_model *const *models,
                               int32_t *const *tok, const imit_cands *c, int j0, int j1,
                               imit_set *d)
{
    const int W = o->imit_band_windows, span = o->prefill + o->steps + 1;
    uint64_t rng = o->seed * 0x2545F4914F6CDD1Dull + 99;
    scdb_evict_window *win = NULL;
    scdb_err rc = SCDB_OK;
    if (W < 1) return SCDB_OK;
    if (!d->full_kl) {
        if (!(d->full_kl = malloc((size_t)W * IMIT_BANDS * MAX_CAND * sizeof *d->full_kl)))
            return SCDB_ENOMEM;
        for (size_t i = 0; i < (size_t)W * IMIT_BANDS * MAX_CAND; i++) d->full_kl[i] = -1.0;
        d->full_windows = W;
    }
    for (int wi = 0; wi < W && !rc; wi++) {
        int mi = (int)(scdb_evict_urand(&rng) * o->n_models) % o->n_models;
        int ci = (int)(scdb_evict_urand(&rng) * o->n_corpora) % o->n_corpora;
        size_t room = o->corpora[ci].train_len - (size_t)span;
        size_t off = (size_t)(scdb_evict_urand(&rng) * (double)(room + 1));
        if (off > room) off = room;
        if ((rc = scdb_evict_window_new(models[mi], tok[ci] + off, o->prefill, o->steps, &win))) break;
        for (int b = 0; b < IMIT_BANDS && !rc; b++)
            for (int j = j0; j < j1 && !rc; j++) {
                scdb_evict_eval e;
                if (!(rc = scdb_evict_window_eval(win, c->pol[j], band_budget(o, b), o->every, NULL, &e)))
                    d->full_kl[((size_t)wi * IMIT_BANDS + b) * MAX_CAND + j] = e.kl;
            }
        scdb_evict_window_free(&win);
    }
    return rc;
}

/* Each state's band (log budget, IMIT_BANDS bins over [budget_lo,
 * budget_hi]) and, per band, every candidate's mean log(KL / the best KL):
 * over the full runs where the candidate has them (imit_full_runs: what
 * the validation measures), else over the band's branch states that ran
 * it; points the states at them. */
static void imit_bands(const scdb_evict_rl_opts *o, imit_set *d, double *band_lr, float lam)
{
    double cnt[IMIT_BANDS][MAX_CAND] = {{0}}, fl[IMIT_BANDS][MAX_CAND] = {{0}};
    int fc[IMIT_BANDS][MAX_CAND] = {{0}};
    const double lo = log(o->budget_lo * (o->prefill + o->steps)),
                 hi = log(o->budget_hi * (o->prefill + o->steps));
    memset(band_lr, 0, sizeof(double) * IMIT_BANDS * MAX_CAND);
    for (int wi = 0; d->full_kl && wi < d->full_windows; wi++)
        for (int b = 0; b < IMIT_BANDS; b++) {
            const double *k = d->full_kl + ((size_t)wi * IMIT_BANDS + b) * MAX_CAND;
            double mn = INFINITY;
            for (int j = 0; j < MAX_CAND; j++) if (k[j] >= 0.0 && k[j] < mn) mn = k[j];
            mn = fmax(mn, 1e-9);
            for (int j = 0; j < MAX_CAND; j++)
                if (k[j] >= 0.0) {
                    fl[b][j] += log(fmax(k[j], 1e-9) / mn);
                    fc[b][j]++;
                }
        }
    for (int i = 0; i < d->n; i++) {
        imit_state *st = &d->st[i];
        double mn = INFINITY;
        int b = hi > lo ? (int)((log((double)st->B) - lo) / (hi - lo) * IMIT_BANDS) : 0;
        b = b < 0 ? 0 : b >= IMIT_BANDS ? IMIT_BANDS - 1 : b;
        st->band = b;
        for (int j = 0; j < st->nc; j++) if (st->kl[j] < mn) mn = st->kl[j];
        mn = fmax(mn, 1e-9);
        for (int j = 0; j < st->nc; j++) {
            band_lr[b * MAX_CAND + j] += log(fmax(st->kl[j], 1e-9) / mn);
            cnt[b][j] += 1.0;
        }
    }
    for (int b = 0; b < IMIT_BANDS; b++)
        for (int j = 0; j < MAX_CAND; j++) {
            if (cnt[b][j] > 0) band_lr[b * MAX_CAND + j] /= cnt[b][j];
            if (fc[b][j] > 0) band_lr[b * MAX_CAND + j] = fl[b][j] / fc[b][j];
        }
    for (int i = 0; i < d->n; i++) {
        d->st[i].band_lr = band_lr + d->st[i].band * MAX_CAND;
        d->st[i].lam = lam;
    }
}

/* One state's loss (*loss_out) and its gradient (accumulated into grad,
 * scaled by 1 / batch).  Scratch: xs [n][n_in], s, pooled, ds, dsr [n],
 * arg, kept [n], inv [n] doubles, drawn [n].  The network's forward pass
 * can fail (out of memory): its error is returned, not folded into the
 * loss. */
static scdb_err imit_state_grad(const scdb_evict_mlp *m, const imit_state *st, float temp,
                                float scale, float *grad, float *gwin, float *gskip, float *xs,
                                float *s, float *pooled, int *arg, float *ds, float *dsr,
                                int *kept, double *inv, char *drawn, double *loss_out)
{
    const int n = st->n, NA = SCDB_EVICT_N_ALL_INPUTS;
    double w[MAX_CAND], loss = 0.0;
    scdb_err rc;
    *loss_out = 0.0;
    int sinks, recent, cap = n < st->B ? n : st->B;
    if (m->n_win > 0 && gwin) {
        /* the window head: cross-entropy to the candidates' windows, each
         * candidate's weight on the head's choice nearest its own */
        float p[SCDB_EVICT_MAX_WIN], z;
        double q[SCDB_EVICT_MAX_WIN] = {0};
        imit_weights(st, st->nc, temp, w);
        scdb_evict_mlp_window(m, st->B, p, &z);
        for (int j = 0; j < st->nc; j++) {
            int bc = 0, bd = 1 << 30;
            for (int c = 0; c < m->n_win; c++) {
                int sk, rr, dd;
                scdb_evict_mlp_protect_choice(m, st->B, c, &sk, &rr);
                dd = abs(rr - st->recent[j]);
                if (dd < bd) { bd = dd; bc = c; }
            }
            q[bc] += w[j];
        }
        for (int c = 0; c < m->n_win; c++) {
            float g = scale * (p[c] - (float)q[c]);
            gwin[2 * c] += g;
            gwin[2 * c + 1] += g * z;
        }
    }
    for (int i = 0; i < n; i++) scdb_evict_mlp_gather(m, st->x + (size_t)i * NA, xs + (size_t)i * m->n_in);
    if ((rc = scdb_evict_mlp_forward_x(m, xs, n, st->B, s))) return rc;
    if (m->pool > 1) scdb_evict_maxpool(s, n, m->pool, pooled, arg);
    else memcpy(pooled, s, (size_t)n * sizeof *s);
    scdb_evict_mlp_protect(m, st->B, &sinks, &recent);
    if (sinks > cap) sinks = cap;
    if (recent > cap - sinks) recent = cap - sinks;
    int mk = cap - sinks - recent;
    if (mk <= 0 || n - recent - sinks <= mk) return SCDB_OK;
    imit_weights(st, st->nc, temp, w);
    memset(ds, 0, (size_t)n * sizeof *ds);
    for (int j = 0; j < st->nc; j++) {
        if (w[j] < 1e-3) continue;
        const int *ord = st->order + (size_t)j * n;
        int k = 0;
        for (int i = 0; i < n && k < mk; i++)
            if (ord[i] >= sinks && ord[i] < n - recent) kept[k++] = ord[i];
        scdb_evict_decision dd;
        memset(&dd, 0, sizeof dd);
        dd.n = n;
        dd.sinks = sinks;
        dd.recent = recent;
        dd.m = k;
        dd.s = pooled;
        dd.order = kept;
        dd.scale = 1.0f;
        double h;
        loss -= w[j] * scdb_evict_pl_grad(&dd, (float)(-w[j]), 0.0f, ds, &h, inv, drawn) / k;
    }
    memset(dsr, 0, (size_t)n * sizeof *dsr);
    for (int i = 0; i < n; i++) dsr[m->pool > 1 ? arg[i] : i] += scale * ds[i] / mk;
    if (grad) scdb_evict_mlp_backward(m, xs, n, dsr, grad);
    if (m->skip && gskip) {
        float z = log2f((float)st->B / 64.0f);
        for (int i = 0; i < n; i++) {
            if (dsr[i] == 0.0f) continue;
            const float *xi = xs + (size_t)i * m->n_in;
            for (int k = 0; k < m->n_in; k++) {
                gskip[2 * k] += dsr[i] * xi[k];
                gskip[2 * k + 1] += dsr[i] * xi[k] * z;
            }
        }
    }
    *loss_out = loss;
    return SCDB_OK;
}

/* Fit the learner to the collected states for `epochs` passes; returns the
 * last epoch's mean loss in *loss_out. */
static scdb_err imit_fit(const scdb_evict_rl_opts *o, scdb_evict_mlp *m, imit_set *d,
                         scdb_evict_adam *ad, scdb_evict_adam *wad, scdb_evict_adam *sad,
                         int epoch0, int epochs, uint64_t *rng, double *loss_out,
                         int (*after_epoch)(void *, int), void *ctx)
{
    const int cap = o->prefill + o->steps;
    float gwin[2 * SCDB_EVICT_MAX_WIN], gskip[2 * SCDB_EVICT_MAX_INPUTS];
    double band_lr[IMIT_BANDS * MAX_CAND];
    imit_bands(o, d, band_lr, o->imit_state_weight);
    if (o->log) {
        fprintf(o->log, "{\"imitation_bands\":[");
        for (int b = 0; b < IMIT_BANDS; b++) {
            fprintf(o->log, "%s[", b ? "," : "");
            for (int j = 0; j < MAX_CAND; j++) fprintf(o->log, "%s%.4f", j ? "," : "", band_lr[b * MAX_CAND + j]);
            fprintf(o->log, "]");
        }
        fprintf(o->log, "]}\n");
    }
    float *grad = malloc(m->n_params * sizeof *grad);
    float *xs = malloc((size_t)cap * m->n_in * sizeof *xs);
    float *s = malloc((size_t)cap * 4 * sizeof *s);
    int *arg = malloc((size_t)cap * 2 * sizeof *arg);
    double *inv = malloc((size_t)cap * sizeof *inv);
    char *drawn = malloc((size_t)cap);
    int *perm = malloc((size_t)(d->n > 0 ? d->n : 1) * sizeof *perm);
    scdb_err rc = SCDB_ENOMEM;
    if (!grad || !xs || !s || !arg || !inv || !drawn || !perm) goto done;
    for (int ep = 0; ep < epochs; ep++) {
        double loss = 0.0;
        for (int i = 0; i < d->n; i++) perm[i] = i;
        for (int i = d->n - 1; i > 0; i--) {
            int j = (int)(scdb_evict_urand(rng) * (i + 1)) % (i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        double prog = o->imit_epochs * o->imit_rounds > 1
                          ? (double)(epoch0 + ep) / (o->imit_epochs * o->imit_rounds - 1) : 1.0;
        float lr = o->imit_lr * (float)(0.1 + 0.45 * (1.0 + cos(3.14159265358979 * fmin(prog, 1.0))));
        for (int b0 = 0; b0 < d->n; b0 += o->imit_batch) {
            int nb = d->n - b0 < o->imit_batch ? d->n - b0 : o->imit_batch;
            memset(grad, 0, m->n_params * sizeof *grad);
            memset(gwin, 0, sizeof gwin);
            memset(gskip, 0, sizeof gskip);
            for (int k = 0; k < nb; k++) {
                double l;
                if ((rc = imit_state_grad(m, &d->st[perm[b0 + k]], o->imit_temp, o->lr_sign / nb,
                                          (o->imit_train & 1) ? grad : NULL,
                                          (o->imit_train & 4) ? gwin : NULL,
                                          (o->imit_train & 2) ? gskip : NULL, xs, s, s + cap, arg,
                                          s + 2 * cap, s + 3 * cap, arg + cap, inv, drawn, &l)))
                    goto done;
                if (isfinite(l)) loss += l;
            }
            if (o->imit_train & 1) scdb_evict_adam_step(ad, m->params, grad, lr);
            if (m->skip && (o->imit_train & 2)) scdb_evict_adam_step(sad, m->skip_w, gskip, lr);
            if (m->n_win > 0 && o->win_lr > 0.0f && (o->imit_train & 4)) {
                scdb_evict_adam_step(wad, m->win_w, gwin, o->win_lr * lr / o->imit_lr);
                memset(gwin, 0, sizeof gwin);
            }
        }
        *loss_out = d->n ? loss / d->n : 0.0;
        if (o->log)
            fprintf(o->log, "{\"imitation_epoch\":%d,\"states\":%d,\"loss\":%.6f,\"lr\":%.3g}\n",
                    epoch0 + ep + 1, d->n, *loss_out, lr);
        if (after_epoch && (rc = (scdb_err)after_epoch(ctx, epoch0 + ep + 1))) goto done;
    }
    rc = SCDB_OK;
done:
    free(grad);
    free(xs);
    free(s);
    free(arg);
    free(inv);
    free(drawn);
    free(perm);
    return rc;
}

/* The window head from full runs: the network under each of its window
 * choices on the imitation's train windows at every band's budget; per band
 * the choice with the lowest mean log(KL / the band's best); the head's
 * logits a_c + b_c z (z = log2(B / 64)) fitted by cross-entropy to those
 * choices, so the head picks, per budget, the window this network does best
 * under in the validation's protocol, measured on train texts.  *agree gets
 * the bands whose choice the fitted head's argmax reproduces. */
static scdb_err head_from_full_runs(const scdb_evict_rl_opts *o, scdb_model *const *models,
                                    int32_t *const *tok, scdb_evict_mlp *m, int *agree)
{
    imit_cands ic;
    imit_set fs = {0};
    double band_lr[IMIT_BANDS * MAX_CAND];
    int target[IMIT_BANDS];
    float z[IMIT_BANDS], mw[2 * SCDB_EVICT_MAX_WIN] = {0}, vw[2 * SCDB_EVICT_MAX_WIN] = {0};
    scdb_err rc = SCDB_OK;
    memset(&ic, 0, sizeof ic);
    ic.learner = -1;
    for (int c = 0; c < m->n_win && !rc; c++) {
        scdb_evict_mlp *v = NULL;
        scdb_evict_policy *p = NULL;
        char nm[40];
        if ((rc = scdb_evict_mlp_clone(m, &v))) break;
        v->n_win = 0;
        v->recent_frac = m->win_frac[c];
        rc = scdb_evict_policy_from_mlp(v, &p);
        scdb_evict_mlp_free(&v);
        snprintf(nm, sizeof nm, "window %g", (double)m->win_frac[c]);
        if (!rc) rc = imit_add(&ic, p, nm);
    }
    if (!rc) rc = imit_full_runs(o, models, tok, &ic, 0, ic.n, &fs);
    if (!rc) {
        imit_bands(o, &fs, band_lr, 0.0f);
        for (int b = 0; b < IMIT_BANDS; b++) {
            int bc = 0;
            for (int c = 1; c < m->n_win; c++)
                if (band_lr[b * MAX_CAND + c] < band_lr[b * MAX_CAND + bc]) bc = c;
            target[b] = bc;
            z[b] = log2f((float)band_budget(o, b) / 64.0f);
        }
        scdb_evict_adam ad = {mw, vw, (size_t)2 * m->n_win, 0};
        memset(m->win_w, 0, sizeof m->win_w);
        for (int it = 0; it < 2000; it++) {
            float g[2 * SCDB_EVICT_MAX_WIN] = {0}, pr[SCDB_EVICT_MAX_WIN];
            for (int b = 0; b < IMIT_BANDS; b++) {
                scdb_evict_mlp_window(m, band_budget(o, b), pr, NULL);
                for (int c = 0; c < m->n_win; c++) {
                    float d = (pr[c] - (c == target[b] ? 1.0f : 0.0f)) / IMIT_BANDS;
                    g[2 * c] += d;
                    g[2 * c + 1] += d * z[b];
                }
            }
            scdb_evict_adam_step(&ad, m->win_w, g, 0.05f);
        }
        *agree = 0;
        for (int b = 0; b < IMIT_BANDS; b++)
            *agree += scdb_evict_mlp_window(m, band_budget(o, b), NULL, NULL) == target[b];
        if (o->log) {
            fprintf(o->log, "{\"head_from_full_runs\":[");
            for (int b = 0; b < IMIT_BANDS; b++) {
                fprintf(o->log, "%s{\"budget\":%d,\"choice\":%g,\"head\":%g,\"log_ratio\":[", b ? "," : "",
                        band_budget(o, b), (double)m->win_frac[target[b]],
                        (double)m->win_frac[scdb_evict_mlp_window(m, band_budget(o, b), NULL, NULL)]);
                for (int c = 0; c < m->n_win; c++)
                    fprintf(o->log, "%s%.4f", c ? "," : "", band_lr[b * MAX_CAND + c]);
                fprintf(o->log, "]}");
            }
            fprintf(o->log, "]}\n");
        }
    }
    imit_cands_free(&ic);
    imit_set_free(&fs);
    return rc;
}

/* Validation of the learner, the best network kept (and checkpointed). */
typedef struct val_ctx {
    const scdb_evict_rl_opts *o;
    vgroup *gs;
    int ng;
    double *gk;
    const char *const *model_names;
    scdb_evict_mlp *mlp, *best;
    scdb_evict_rl_result *r;
    double t_start;
    int episodes;
    int tag;             /* added to the logged step: imitation epochs come before the updates */
} val_ctx;

static scdb_err check_best(val_ctx *v, int step, const char *what)
{
    const scdb_evict_rl_opts *o = v->o;
    double kl, bb[MAX_VB], ratio;
    scdb_err rc;
    if ((rc = validate(v->gs, v->ng, v->mlp, o, &kl, bb, &ratio, v->gk))) return rc;
    int is_best = ratio < v->r->val_ratio_best;
    if (is_best) {
        v->r->val_ratio_best = ratio;
        v->r->val_kl_best = kl;
        v->r->best_update = v->tag + step;
        scdb_evict_mlp_copy(v->best, v->mlp);
        if (o->checkpoint) {
            char num[2][32];
            snprintf(num[0], sizeof num[0], "%s %d", what, step);
            snprintf(num[1], sizeof num[1], "%.4f", ratio);
            const char *keys[] = {"checkpoint", "val_ratio"}, *vals[] = {num[0], num[1]};
            scdb_err crc = scdb_evict_mlp_save(v->best, o->checkpoint, keys, vals, 2);
            if (crc && o->verbose)
                fprintf(stderr, "train-policy: cannot write checkpoint %s: %s\n", o->checkpoint,
                        scdb_strerror(crc));
        }
    }
    log_validation(o->log, v->tag + step, v->episodes, scdb_now() - v->t_start, kl, bb, ratio,
                   is_best, o, v->gs, v->ng, v->gk, o->corpora, v->model_names, v->mlp);
    if (o->verbose) {
        fprintf(stderr, "train-policy: validation after %d %s: KL %.5f, %.3f x the best heuristic (",
                step, what, kl, ratio);
        for (int b = 0; b < o->n_val_budgets; b++)
            fprintf(stderr, "%s%g: %.5f", b ? ", " : "", o->val_budgets[b], bb[b]);
        fprintf(stderr, ")%s\n", is_best ? " (best)" : "");
    }
    return SCDB_OK;
}

static int imit_after_epoch(void *ctx, int epoch)
{
    val_ctx *v = ctx;
    if (epoch % v->o->imit_val_every) return 0;
    return (int)check_best(v, epoch, "imitation epochs");
}

scdb_err scdb_evict_train_rl(const scdb_evict_rl_opts *o, scdb_evict_mlp **out,
                             scdb_evict_rl_result *res, char *errbuf, size_t errlen)
{
    scdb_model *models[MAX_MODELS] = {0};
    const char *model_names[MAX_MODELS] = {0};
    int32_t *tok[MAX_CORPORA] = {0}, *vtok[MAX_CORPORA] = {0};
    vgroup *gs = NULL;
    int ng = 0;
    scdb_evict_mlp *mlp = NULL, *best = NULL;
    scdb_evict_policy *pol = NULL;
    scdb_evict_window *win = NULL;
    scdb_evict_sampler *smp = NULL;
    scdb_evict_adam ad = {0}, wad = {0};
    scdb_evict_sampler wsmp = {0};
    float gwin[2 * SCDB_EVICT_MAX_WIN];
    float *grad = NULL, *ds = NULL, *dsr = NULL;
    double *inv = NULL, *gk = NULL;
    char *drawn = NULL;
    scdb_evict_rl_result r;
    scdb_err rc = SCDB_EINVAL;
    const double t_start = scdb_now();
    const int K = o ? o->samples : 0, span = o ? o->prefill + o->steps + 1 : 0;

    if (!out || !o) return SCDB_EINVAL;
    *out = NULL;
    memset(&r, 0, sizeof r);
    for (int k = 0; k < SCDB_EVICT_KIND_COUNT; k++) r.val_kl_heuristic[k] = -1.0;
    if (!o->model_dirs || o->n_models < 1 || o->n_models > MAX_MODELS || !o->corpora ||
        o->n_corpora < 1 || o->n_corpora > MAX_CORPORA || !(o->budget_lo > 0.0) ||
        !(o->budget_hi >= o->budget_lo) || !(o->budget_hi < 1.0) || o->n_val_budgets < 1 ||
        o->n_val_budgets > MAX_VB || o->updates < 0 || o->batch < 1 || o->states < 1 ||
        o->states > MAX_STATES || K < 2 || K > 64 || o->prefill < 2 || o->steps < 1 ||
        o->every < 1 || o->horizon < 0 || o->horizon > o->steps || o->horizon_first < 0 ||
        o->horizon_first > o->steps || !(o->lr > 0.0f) || !(o->entropy >= 0.0f) ||
        !(o->tau > 0.0f) || !(o->tau_end >= 0.0f) || o->hidden < 1 || o->hidden > 1024 || o->n_inputs < 1 ||
        o->n_inputs > SCDB_EVICT_MAX_INPUTS || o->sinks < 0 || o->recent < 0 ||
        !(o->recent_frac >= 0.0f && o->recent_frac < 1.0f) || o->pool < 1 || o->pool % 2 == 0 ||
        o->pool > 63 || o->val_windows < 1 || o->val_every < 1 || o->n_win < 0 ||
        o->n_win > SCDB_EVICT_MAX_WIN || !(o->win_lr >= 0.0f) || !(o->lr_sign == 1.0f || o->lr_sign == -1.0f) ||
        o->imit_rounds < 0 || (o->imit_rounds > 0 && (o->imit_episodes < 1 || o->imit_epochs < 1 ||
                                                      o->imit_batch < 1 || !(o->imit_temp > 0.0f) ||
                                                      o->imit_band_windows < 0 || o->imit_train < 1 || o->imit_train > 7 ||
                                                      !(o->imit_state_weight >= 0.0f &&
                                                        o->imit_state_weight <= 1.0f) ||
                                                      !(o->imit_lr > 0.0f) || o->imit_val_every < 1)) ||
        o->n_experts < 0 || o->n_experts > 4 || (o->n_experts > 0 && (!o->experts[0] ||
        (o->n_experts > 1 && !o->experts[1]) || (o->n_experts > 2 && !o->experts[2]) ||
        (o->n_experts > 3 && !o->experts[3])))) {
        scdb_errf(errbuf, errlen, "invalid training options");
        return SCDB_EINVAL;
    }
    if (o->heads_gens < 0) {
        scdb_errf(errbuf, errlen, "invalid training options: heads_gens %d", o->heads_gens);
        return SCDB_EINVAL;
    }
    if (o->heads_gens > 0 && (rc = scdb_evict_heads_opts_check(o, errbuf, errlen))) return rc;
    if (o->imit_rounds > 0) {
        /* what imitation trains must be there: a skip from o->skip or the
         * start, a head from n_win or the start (and a step for it) */
        const int has_skip = o->skip || (o->init && o->init->skip);
        const int has_head = (o->n_win > 0 || (o->init && o->init->n_win > 0)) && o->win_lr > 0.0f;
        if (!(o->imit_train & 1) && !((o->imit_train & 2) && has_skip) &&
            !((o->imit_train & 4) && has_head)) {
            scdb_errf(errbuf, errlen, "imitation would train nothing: the network has no %s",
                      (o->imit_train & 2) ? "skip" : "window head");
            return SCDB_EINVAL;
        }
    }
    if (o->n_experts > 0 && o->imit_rounds < 1) {
        scdb_errf(errbuf, errlen, "experts are imitation candidates: they need imitation rounds");
        return SCDB_EINVAL;
    }
    if (o->head_runs && (o->imit_rounds < 1 || o->imit_band_windows < 1 ||
                         (o->n_win < 1 && !(o->init && o->init->n_win > 0)))) {
        scdb_errf(errbuf, errlen, "the head fit from full runs needs imitation rounds, band "
                                  "windows and a window head");
        return SCDB_EINVAL;
    }
    for (int c = 0; c < o->n_win; c++)
        if (!(o->win_frac[c] >= 0.0f && o->win_frac[c] < 1.0f)) {
            scdb_errf(errbuf, errlen, "window choice %g is not a fraction in [0, 1)", (double)o->win_frac[c]);
            return SCDB_EINVAL;
        }
    for (int b = 0; b < o->n_val_budgets; b++)
        if (!(o->val_budgets[b] > 0.0 && o->val_budgets[b] < 1.0)) {
            scdb_errf(errbuf, errlen, "validation budget %g is not a fraction in (0, 1)", o->val_budgets[b]);
            return SCDB_EINVAL;
        }
    for (int c = 0; c < o->n_corpora; c++)
        if (!o->corpora[c].train || o->corpora[c].train_len < (size_t)span ||
            !o->corpora[c].val || o->corpora[c].val_len < (size_t)span) {
            scdb_errf(errbuf, errlen, "domain %s: train and val texts need at least %d bytes each",
                 o->corpora[c].name ? o->corpora[c].name : "?", span);
            return SCDB_ERANGE;
        }
    scdb_k_cpu_threads(1);   /* one token per forward: BLAS threads would only wait */
    for (int i = 0; i < o->n_models; i++) {
        if ((rc = scdb_model_load(o->model_dirs[i], &models[i], errbuf, errlen))) goto done;
        model_names[i] = scdb_model_cfg(models[i])->name;
        if ((rc = check_window(o, models[i], o->model_dirs[i], errbuf, errlen))) goto done;
    }
    rc = SCDB_ENOMEM;
    for (int c = 0; c < o->n_corpora; c++) {
        if (!(tok[c] = malloc(o->corpora[c].train_len * sizeof *tok[c])) ||
            !(vtok[c] = malloc(o->corpora[c].val_len * sizeof *vtok[c])))
            goto done;
        scdb_tokenize_bytes(o->corpora[c].train, o->corpora[c].train_len, tok[c]);
        scdb_tokenize_bytes(o->corpora[c].val, o->corpora[c].val_len, vtok[c]);
    }

    /* validation windows: val_windows evenly spaced over each val text,
     * for every model */
    if (!(gs = calloc((size_t)o->n_models * o->n_corpora, sizeof *gs))) goto done;
    for (int mi = 0; mi < o->n_models; mi++)
        for (int c = 0; c < o->n_corpora; c++) {
            vgroup *g = &gs[ng++];
            g->model = mi;
            g->corpus = c;
            if (!(g->win = calloc((size_t)o->val_windows, sizeof *g->win))) goto done;
            size_t room = o->corpora[c].val_len - (size_t)span;
            for (int i = 0; i < o->val_windows; i++) {
                size_t off = room * (size_t)(2 * i + 1) / (size_t)(2 * o->val_windows);
                if ((rc = scdb_evict_window_new(models[mi], vtok[c] + off, o->prefill, o->steps,
                                                &g->win[g->n_win])))
                    goto done;
                g->n_win++;
            }
        }
    if (!(gk = calloc((size_t)ng * o->n_val_budgets, sizeof *gk))) { rc = SCDB_ENOMEM; goto done; }

    /* the heuristics on the same windows */
    for (int gi = 0; gi < ng; gi++)
        for (int b = 0; b < o->n_val_budgets; b++) gs[gi].best_h[b] = INFINITY;
    for (int k = SCDB_EVICT_STREAMING; k < SCDB_EVICT_LEARNED; k++) {
        scdb_evict_policy *h = NULL;
        double tot = 0.0, bb[MAX_VB] = {0};
        if ((rc = scdb_evict_policy_new((scdb_evict_kind)k, &h))) goto done;
        for (int gi = 0; gi < ng && !rc; gi++)
            for (int b = 0; b < o->n_val_budgets && !rc; b++) {
                double kl;
                if ((rc = group_kl(&gs[gi], h, o, b, &kl))) break;
                gs[gi].heur[k][b] = kl;
                if (kl < gs[gi].best_h[b]) gs[gi].best_h[b] = kl;
                tot += kl;
                bb[b] += kl / ng;
            }
        scdb_evict_policy_free(&h);
        if (rc) goto done;
        r.val_kl_heuristic[k] = tot / (ng * o->n_val_budgets);
        if (o->log) {
            fprintf(o->log, "{\"reference\":\"%s\",\"val_kl\":%.6f,\"by_budget\":[",
                    scdb_evict_kind_name((scdb_evict_kind)k), r.val_kl_heuristic[k]);
            for (int b = 0; b < o->n_val_budgets; b++) fprintf(o->log, "%s%.6f", b ? "," : "", bb[b]);
            fprintf(o->log, "]}\n");
        }
        if (o->verbose)
            fprintf(stderr, "train-policy: validation KL of %-9s %.5f\n",
                    scdb_evict_kind_name((scdb_evict_kind)k), r.val_kl_heuristic[k]);
    }
    {
        double tot = 0.0, bb[MAX_VB] = {0};
        for (int gi = 0; gi < ng; gi++)
            for (int b = 0; b < o->n_val_budgets; b++) {
                tot += gs[gi].best_h[b];
                bb[b] += gs[gi].best_h[b] / ng;
            }
        r.val_kl_best_heuristic = tot / (ng * o->n_val_budgets);
        if (o->log) {
            fprintf(o->log, "{\"reference\":\"best heuristic per group\",\"val_kl\":%.6f,\"by_budget\":[",
                    r.val_kl_best_heuristic);
            for (int b = 0; b < o->n_val_budgets; b++) fprintf(o->log, "%s%.6f", b ? "," : "", bb[b]);
            fprintf(o->log, "]}\n");
        }
        if (o->verbose)
            fprintf(stderr, "train-policy: validation KL of the best heuristic per (model, domain, "
                            "budget) %.5f\n", r.val_kl_best_heuristic);
    }

    /* the start: seeded random weights (or the caller's), standardised inputs */
    rc = SCDB_ENOMEM;
    if (o->init) {
        if ((rc = scdb_evict_mlp_new_inputs(o->init->hidden, o->init->in_id, o->init->n_in, o->seed,
                                            &mlp)) ||
            (rc = scdb_evict_mlp_copy(mlp, o->init)))
            goto done;
    } else {
        if ((rc = scdb_evict_mlp_new_inputs(o->hidden, o->inputs, o->n_inputs, o->seed, &mlp)))
            goto done;
        if ((rc = standardise(gs, ng, o, mlp))) goto done;
        mlp->sinks = o->sinks;
        mlp->recent = o->recent;
        mlp->recent_frac = o->recent_frac;
        mlp->pool = o->pool;
    }
    if (o->skip && !mlp->skip) {
        /* the skip starts at 0: the start scores as before */
        mlp->skip = 1;
        memset(mlp->skip_w, 0, sizeof mlp->skip_w);
    }
    if (o->n_win > 0 && mlp->n_win == 0) {
        /* the head starts at its choice nearest recent_frac (logit 1) */
        int near = 0;
        mlp->n_win = o->n_win;
        memcpy(mlp->win_frac, o->win_frac, sizeof mlp->win_frac);
        memset(mlp->win_w, 0, sizeof mlp->win_w);
        for (int c = 1; c < o->n_win; c++)
            if (fabsf(o->win_frac[c] - o->recent_frac) < fabsf(o->win_frac[near] - o->recent_frac))
                near = c;
        mlp->win_w[2 * near] = 1.0f;
        if (o->init) mlp->recent = o->recent;
    }
    if ((rc = scdb_evict_mlp_new_inputs(mlp->hidden, mlp->in_id, mlp->n_in, o->seed, &best)) ||
        (rc = scdb_evict_mlp_copy(best, mlp)))
        goto done;
    {
        double kl, bb[MAX_VB], ratio;
        if ((rc = validate(gs, ng, mlp, o, &kl, bb, &ratio, gk))) goto done;
        r.val_kl_init = r.val_kl_best = kl;
        r.val_ratio_init = r.val_ratio_best = ratio;
        log_validation(o->log, 0, 0, scdb_now() - t_start, kl, bb, ratio, 1, o, gs, ng, gk,
                       o->corpora, model_names, mlp);
        if (o->verbose)
            fprintf(stderr, "train-policy: validation of the initial network: KL %.5f, %.3f x the "
                            "best heuristic\n", kl, ratio);
    }

    const int capn = o->prefill + o->steps;
    rc = SCDB_ENOMEM;
    ad.n = mlp->n_params;
    ad.m = calloc(ad.n, sizeof *ad.m);
    ad.v = calloc(ad.n, sizeof *ad.v);
    grad = malloc(mlp->n_params * sizeof *grad);
    ds = malloc((size_t)capn * sizeof *ds);
    dsr = malloc((size_t)capn * sizeof *dsr);
    inv = malloc((size_t)capn * sizeof *inv);
    drawn = malloc((size_t)capn);
    smp = calloc((size_t)K, sizeof *smp);
    wad.n = (size_t)2 * mlp->n_win;
    wad.m = calloc(wad.n + 1, sizeof *wad.m);
    wad.v = calloc(wad.n + 1, sizeof *wad.v);
    if (!ad.m || !ad.v || !grad || !ds || !dsr || !inv || !drawn || !smp || !wad.m || !wad.v) goto done;

    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 777;
    int episodes = 0, upd;
    val_ctx vc = {o, gs, ng, gk, model_names, mlp, best, &r, t_start, 0, 0};
    if (o->imit_rounds > 0) {
        /* the warm start: rounds of collect + fit, validated every
         * imit_val_every epochs; the REINFORCE updates go on from the best */
        imit_cands ic;
        imit_set is = {0};
        scdb_evict_adam sad = {0};
        float sm[2 * SCDB_EVICT_MAX_INPUTS] = {0}, sv[2 * SCDB_EVICT_MAX_INPUTS] = {0};
        sad.m = sm;
        sad.v = sv;
        sad.n = (size_t)2 * mlp->n_in;
        memset(&ic, 0, sizeof ic);
        scdb_evict_adam iad = {0};
        scdb_evict_policy *lp = NULL;
        double loss = 0.0;
        iad.n = mlp->n_params;
        iad.m = calloc(iad.n, sizeof *iad.m);
        iad.v = calloc(iad.n, sizeof *iad.v);
        rc = iad.m && iad.v ? imit_candidates(o, &ic) : SCDB_ENOMEM;
        if (!rc && o->verbose) {
            fprintf(stderr, "train-policy: imitation candidates:");
            for (int j = 0; j < ic.n; j++) fprintf(stderr, " %s", ic.name[j]);
            fprintf(stderr, " (+ the learner from round 2)\n");
        }
        if (!rc && o->log) {
            fprintf(o->log, "{\"imitation_candidates\":[");
            for (int j = 0; j < ic.n; j++) {
                if (j) fputc(',', o->log);
                json_str(o->log, ic.name[j]);
            }
            fprintf(o->log, ",\"learner\"]}\n");
        }
        for (int round = 0; round < o->imit_rounds && !rc; round++) {
            if (round > 0) {
                /* the learner as it is now: the behaviour, and a candidate */
                if ((rc = scdb_evict_policy_from_mlp(mlp, &lp))) break;
                if (ic.learner < 0) {
                    if ((rc = imit_add(&ic, lp, "learner"))) { lp = NULL; break; }
                    ic.learner = ic.n - 1;
                } else {
                    scdb_evict_policy_free(&ic.pol[ic.learner]);
                    ic.pol[ic.learner] = lp;
                }
                lp = NULL;
            }
            double t0 = scdb_now();
            if (round == 0) rc = imit_full_runs(o, models, tok, &ic, 0, ic.n, &is);
            else rc = imit_full_runs(o, models, tok, &ic, ic.learner, ic.learner + 1, &is);
            if (rc) break;
            if (o->verbose && o->imit_band_windows > 0)
                fprintf(stderr, "train-policy: imitation round %d: full runs (%.0f s)\n", round + 1,
                        scdb_now() - t0);
            if ((rc = imit_collect(o, models, model_names, tok, &ic,
                                   round > 0 ? ic.pol[ic.learner] : NULL, &rng, &is)))
                break;
            episodes += o->imit_episodes;
            vc.episodes = episodes;
            if (o->verbose)
                fprintf(stderr, "train-policy: imitation round %d: %d states (%.0f s)\n", round + 1,
                        is.n, scdb_now() - t0);
            rc = imit_fit(o, mlp, &is, &iad, &wad, &sad, round * o->imit_epochs, o->imit_epochs,
                          &rng, &loss, imit_after_epoch, &vc);
            if (o->verbose)
                fprintf(stderr, "train-policy: imitation round %d: loss %.4f (%.0f s)\n", round + 1,
                        loss, scdb_now() - t0);
        }
        imit_cands_free(&ic);
        imit_set_free(&is);
        free(iad.m);
        free(iad.v);
        if (rc) goto done;
        scdb_evict_mlp_copy(mlp, best);
        vc.tag = o->imit_rounds * o->imit_epochs;
        if (o->head_runs && mlp->n_win > 0 && o->imit_band_windows > 0) {
            int agree = 0;
            double t0 = scdb_now();
            if ((rc = head_from_full_runs(o, models, tok, mlp, &agree))) goto done;
            if (o->verbose)
                fprintf(stderr, "train-policy: the window head from full runs: its argmax is the best "
                                "window in %d of %d bands (%.0f s)\n", agree, IMIT_BANDS, scdb_now() - t0);
            if ((rc = check_best(&vc, 1, "head fits"))) goto done;
            vc.tag++;
            scdb_evict_mlp_copy(mlp, best);
        }
    }
    for (upd = 0; upd < o->updates; upd++) {
        if (o->max_seconds > 0 && scdb_now() - t_start > o->max_seconds) break;
        double t_up = scdb_now(), reward = 0.0, ent_sum = 0.0, spread = 0.0;
        int n_states = 0;
        memset(grad, 0, mlp->n_params * sizeof *grad);
        memset(gwin, 0, sizeof gwin);
        int n_wstates = 0;
        if ((rc = scdb_evict_policy_from_mlp(mlp, &pol))) goto done;
        /* the draws' temperature: tau, annealed geometrically to tau_end, so
         * the draws explore widely at first and perturb the deterministic
         * top-B less and less as it improves */
        double prog_t = o->updates > 1 ? (double)upd / (o->updates - 1) : 1.0;
        float tau_now = o->tau_end > 0.0f
                            ? (float)(o->tau * pow((double)o->tau_end / o->tau, prog_t))
                            : o->tau;
        for (int e = 0; e < o->batch; e++) {
            int mi = (int)(scdb_evict_urand(&rng) * o->n_models) % o->n_models;
            int c = (int)(scdb_evict_urand(&rng) * o->n_corpora) % o->n_corpora;
            size_t room = o->corpora[c].train_len - (size_t)span;
            size_t off = (size_t)(scdb_evict_urand(&rng) * (double)(room + 1));
            if (off > room) off = room;
            double lf = log(o->budget_lo) + scdb_evict_urand(&rng) * (log(o->budget_hi) - log(o->budget_lo));
            int B = budget_slots(exp(lf), o);
            if ((rc = scdb_evict_window_new(models[mi], tok[c] + off, o->prefill, o->steps, &win)))
                goto done;
            episodes++;
            /* branch points: the first eviction step and states - 1 other
             * eviction steps, distinct, ascending, with a full horizon */
            const int h_later = o->horizon ? o->horizon : 1;
            int pts[MAX_STATES], np = 0, n_ev = (o->steps - h_later) / o->every + 1;
            pts[np++] = 0;
            for (int tries = 0; np < o->states && np < n_ev && tries < 100; tries++) {
                int t = o->every * (1 + (int)(scdb_evict_urand(&rng) * (n_ev - 1)));
                int dup = t > o->steps - h_later;
                for (int i = 0; i < np; i++) dup |= pts[i] == t;
                if (!dup) pts[np++] = t;
            }
            for (int i = 1; i < np; i++)
                for (int j = i; j > 0 && pts[j] < pts[j - 1]; j--) {
                    int tmp = pts[j]; pts[j] = pts[j - 1]; pts[j - 1] = tmp;
                }
            if ((rc = scdb_evict_window_reset(win))) goto done;
            for (int s = 0; s < np; s++) {
                double R[64], mean = 0.0, sd = 0.0;
                if ((rc = scdb_evict_window_steps(win, pol, B, o->every, pts[s], NULL))) goto done;
                int hz = s == 0 ? o->horizon_first : o->horizon;
                if (hz == 0 || pts[s] + hz > o->steps) hz = o->steps - pts[s];
                for (int k = 0; k < K; k++) {
                    double klm;
                    scdb_evict_sampler_clear(&smp[k]);
                    smp[k].mlp = mlp;
                    smp[k].tau = tau_now;
                    smp[k].draw_evicted = 1;
                    smp[k].rel_tau = o->rel_tau;
                    smp[k].rng = rng ^ (0xA24BAED4963EE407ull * (uint64_t)(k + 1));
                    scdb_evict_urand(&rng);
                    if ((rc = scdb_evict_window_branch(win, &smp[k], pol, B, o->every, hz, &klm)))
                        goto done;
                    R[k < 64 ? k : 63] = -klm;
                }
                int kk = K < 64 ? K : 64;
                double A_all[64];
                if (mlp->n_win > 0 && (rc = window_grad(win, &wsmp, mlp, pol, B, o->every, hz, gwin,
                                                        &n_wstates)))
                    goto done;
                sd = scdb_evict_loo_advantages(R, kk, A_all, &mean);
                reward += mean;
                spread += sd;
                n_states++;
                if (smp[0].n_dec == 0 || !(sd > 1e-9)) continue;   /* nothing drawn, or no signal */
                for (int k = 0; k < kk; k++) {
                    const scdb_evict_decision *d = &smp[k].dec[0];
                    double A = A_all[k], h;
                    memset(ds, 0, (size_t)d->n * sizeof *ds);
                    scdb_evict_pl_grad(d, (float)(-A / kk), (float)(-o->entropy / kk), ds, &h, inv,
                                       drawn);
                    ent_sum += h / kk;
                    /* the draw saw -scale * score: d/d(score) = -scale d/d(s)
                     * (a relative temperature's spread counts as a constant);
                     * through the max-pool to the slot each maximum came from */
                    float itau = -d->scale;
                    memset(dsr, 0, (size_t)d->n * sizeof *dsr);
                    for (int j = 0; j < d->n; j++) dsr[d->arg ? d->arg[j] : j] += itau * ds[j];
                    scdb_evict_mlp_backward(mlp, d->x, d->n, dsr, grad);
                }
            }
            scdb_evict_window_free(&win);
        }
        scdb_evict_policy_free(&pol);
        for (int k = 0; k < K; k++) scdb_evict_sampler_clear(&smp[k]);
        if (n_states > 0)
            for (size_t i = 0; i < mlp->n_params; i++) grad[i] *= o->lr_sign / (float)n_states;
        double prog = o->updates > 1 ? (double)upd / (o->updates - 1) : 1.0;
        float decay = (float)(0.1 + 0.45 * (1.0 + cos(3.14159265358979 * prog)));
        float lr = o->lr * decay;
        scdb_evict_adam_step(&ad, mlp->params, grad, lr);
        if (n_wstates > 0 && o->win_lr > 0.0f) {
            for (size_t i = 0; i < wad.n; i++) gwin[i] *= o->lr_sign / (float)n_wstates;
            scdb_evict_adam_step(&wad, mlp->win_w, gwin, o->win_lr * decay);
        }
        if (o->log)
            fprintf(o->log, "{\"update\":%d,\"episodes\":%d,\"reward\":%.6f,\"reward_sd\":%.6f,"
                            "\"entropy\":%.4f,\"states\":%d,\"lr\":%.3g,\"tau\":%.4g,"
                            "\"seconds\":%.3f}\n",
                    upd + 1, episodes, n_states ? reward / n_states : 0.0,
                    n_states ? spread / n_states : 0.0, n_states ? ent_sum / n_states : 0.0,
                    n_states, lr, tau_now, scdb_now() - t_up);
        if (o->verbose && (upd + 1) % 10 == 0)
            fprintf(stderr, "train-policy: update %d/%d (%d episodes), sampled KL %.5f, %.0f s\n",
                    upd + 1, o->updates, episodes, n_states ? -reward / n_states : 0.0,
                    scdb_now() - t_start);
        if ((upd + 1) % o->val_every == 0 || upd + 1 == o->updates) {
            vc.episodes = episodes;
            if ((rc = check_best(&vc, upd + 1, "updates"))) goto done;
        }
    }
    if (o->last) {
        scdb_err lrc = scdb_evict_mlp_save(mlp, o->last, NULL, NULL, 0);
        if (lrc && o->verbose)
            fprintf(stderr, "train-policy: cannot write %s: %s\n", o->last, scdb_strerror(lrc));
    }
    r.updates = upd;
    r.episodes = episodes;
    /* last, the per-head scorer beside the best network (train_heads.c) */
    if (o->heads_gens > 0 &&
        (rc = scdb_evict_train_heads(o, models, (const int32_t *const *)tok,
                                     (const int32_t *const *)vtok, best, &r, errbuf, errlen)))
        goto done;
    r.seconds = scdb_now() - t_start;
    *out = best;
    best = NULL;
    if (res) *res = r;
    rc = SCDB_OK;
done:
    if (smp)
        for (int k = 0; k < K; k++) scdb_evict_sampler_clear(&smp[k]);
    free(smp);
    scdb_evict_window_free(&win);
    scdb_evict_policy_free(&pol);
    for (int gi = 0; gi < ng; gi++) {
        for (int i = 0; i < gs[gi].n_win; i++) scdb_evict_window_free(&gs[gi].win[i]);
        free(gs[gi].win);
    }
    free(gs);
    free(gk);
    scdb_evict_mlp_free(&mlp);
    scdb_evict_mlp_free(&best);
    free(ad.m);
    free(ad.v);
    free(wad.m);
    free(wad.v);
    scdb_evict_sampler_clear(&wsmp);
    free(grad);
    free(ds);
    free(dsr);
    free(inv);
    free(drawn);
    for (int c = 0; c < MAX_CORPORA; c++) { free(tok[c]); free(vtok[c]); }
    for (int i = 0; i < MAX_MODELS; i++) scdb_model_free(&models[i]);
    return rc;
}

/* ------------------------------------------------------------ age profile */

#define AGE_BINS 10   /* ages 0, 1, 2-3, ..., 128-255, 256 and older */

scdb_err scdb_evict_age_profile(const scdb_evict_rl_opts *o, const scdb_evict_policy *const *pols,
                                const char *const *labels, int n_pol, FILE *json, char *errbuf,
                                size_t errlen)
{
    scdb_model *model = NULL;
    int32_t *vt = NULL;
    scdb_evict_window *w = NULL;
    double *hist = NULL, *kl = NULL;
    const int span = o ? o->prefill + o->steps + 1 : 0;
    scdb_err rc = SCDB_EINVAL;

    if (!o || !pols || !labels || n_pol < 1 || !json || o->n_models < 1 || o->n_corpora < 1 ||
        o->n_val_budgets < 1 || o->n_val_budgets > MAX_VB || o->val_windows < 1 || o->every < 1)
        return SCDB_EINVAL;
    const int nb = o->n_val_budgets;
    if (!(hist = calloc((size_t)n_pol * nb * AGE_BINS, sizeof *hist)) ||
        !(kl = calloc((size_t)n_pol * nb, sizeof *kl))) {
        rc = SCDB_ENOMEM;
        goto done;
    }
    int n_win = 0;
    for (int mi = 0; mi < o->n_models; mi++) {
        if ((rc = scdb_model_load(o->model_dirs[mi], &model, errbuf, errlen))) goto done;
        if ((rc = check_window(o, model, o->model_dirs[mi], errbuf, errlen))) goto done;
        for (int c = 0; c < o->n_corpora; c++) {
            const scdb_evict_corpus *cp = &o->corpora[c];
            if (cp->val_len < (size_t)span) {
                scdb_errf(errbuf, errlen, "domain %s: the val text needs at least %d bytes",
                          cp->name ? cp->name : "?", span);
                rc = SCDB_ERANGE;
                goto done;
            }
            free(vt);
            if (!(vt = malloc(cp->val_len * sizeof *vt))) { rc = SCDB_ENOMEM; goto done; }
            scdb_tokenize_bytes(cp->val, cp->val_len, vt);
            size_t room = cp->val_len - (size_t)span;
            for (int i = 0; i < o->val_windows; i++) {
                size_t off = room * (size_t)(2 * i + 1) / (size_t)(2 * o->val_windows);
                if ((rc = scdb_evict_window_new(model, vt + off, o->prefill, o->steps, &w))) goto done;
                n_win++;
                for (int pi = 0; pi < n_pol; pi++)
                    for (int b = 0; b < nb; b++) {
                        scdb_evict_eval e;
                        scdb_evict_window_age_hist(w, hist + ((size_t)pi * nb + b) * AGE_BINS, AGE_BINS);
                        if ((rc = scdb_evict_window_eval(w, pols[pi], budget_slots(o->val_budgets[b], o),
                                                         o->every, NULL, &e)))
                            goto done;
                        kl[pi * nb + b] += e.kl;
                    }
                scdb_evict_window_free(&w);
            }
        }
        scdb_model_free(&model);
    }
    fprintf(json, "{\"what\":\"kept slots by age after each eviction, fraction per age bin\","
                  "\"prefill\":%d,\"steps\":%d,\"every\":%d,\"windows\":%d,"
                  "\"bins\":[",
            o->prefill, o->steps, o->every, n_win);
    for (int k = 0; k < AGE_BINS; k++)
        fprintf(json, "%s[%d,%d]", k ? "," : "", k ? 1 << (k - 1) : 0,
                k == AGE_BINS - 1 ? -1 : k ? (1 << k) - 1 : 0);
    fprintf(json, "],\"budgets\":[");
    for (int b = 0; b < nb; b++) fprintf(json, "%s%g", b ? "," : "", o->val_budgets[b]);
    fprintf(json, "],\"policies\":[");
    for (int pi = 0; pi < n_pol; pi++) {
        fprintf(json, "%s{\"label\":", pi ? "," : "");
        json_str(json, labels[pi]);
        fprintf(json, ",\"window\":[");
        for (int b = 0; b < nb; b++) {
            int sk, r;
            scdb_evict_policy_protect(pols[pi], NULL, o->prefill + o->steps,
                                      budget_slots(o->val_budgets[b], o), &sk, &r);
            fprintf(json, "%s[%d,%d]", b ? "," : "", sk, r);
        }
        fprintf(json, "],\"kl\":[");
        for (int b = 0; b < nb; b++) fprintf(json, "%s%.6f", b ? "," : "", kl[pi * nb + b] / n_win);
        fprintf(json, "],\"profile\":[");
        for (int b = 0; b < nb; b++) {
            const double *h = hist + ((size_t)pi * nb + b) * AGE_BINS;
            double tot = 0.0;
            for (int k = 0; k < AGE_BINS; k++) tot += h[k];
            fprintf(json, "%s[", b ? "," : "");
            for (int k = 0; k < AGE_BINS; k++) fprintf(json, "%s%.5f", k ? "," : "", tot > 0 ? h[k] / tot : 0.0);
            fprintf(json, "]");
        }
        fprintf(json, "]}");
    }
    fprintf(json, "]}\n");
    rc = ferror(json) ? SCDB_EIO : SCDB_OK;
done:
    scdb_evict_window_free(&w);
    scdb_model_free(&model);
    free(vt);
    free(hist);
    free(kl);
    return rc;
}
