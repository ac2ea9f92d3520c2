/* train_heads.c — fitting the per-head scorer (evict_train.h, "the
 * per-head scorer"; FORMATS.md, policy file version 6): evolution
 * strategies on full runs of the measurement protocol, the last stage of
 * `scdb train-policy` (scdb_evict_train_rl calls it with the network it
 * trained or was given).
 *
 * Why not the network's gradients: the scorer's decisions are K top-B sets
 * and a discrete window per set; what they are worth shows only in the KL
 * of the steps that follow, a long way from any one decision.  Its
 * parameters are few (A and D: 25 + 5 per window choice), so the objective
 * itself is optimised instead, with no surrogate:
 *
 *   J(theta) = mean over episodes e of log(KL_e(theta) / KL_e(best heuristic))
 *              + w log(D_e(theta) / D_e(best top-1))
 *
 * KL_e the mean KL of a full run (prefill, the first eviction, every later
 * one, 256 steps) at the episode's budget, the best heuristic the lowest of
 * StreamingLLM, H2O, SnapKV and TOVA on that episode (made once, with the
 * pool); D_e = 1 - top-1 agreement of the run (at least one step in the
 * run), the reference the highest top-1 of the four: with w = heads_top1 >
 * 0 the fit also answers for the top-1 goal, not only for the KL (w = 0:
 * the KL alone).  Validation keeps the scorer whose file scores best on
 * the same objective (the split itself is by KL).  Each generation draws `heads_episodes` episodes from the pool and
 * `heads_pairs` noise vectors eps_i ~ N(0, I), evaluates theta +- sigma
 * eps_i (common episodes, antithetic pairs: the difference of a pair is
 * what its direction is worth on the same runs) and theta, replaces each
 * J by its centred rank among the 2P (so one bad window cannot dominate a
 * step), and takes an Adam step along
 *
 *   g = (1 / (2 P sigma)) sum_i (u(theta + sigma eps_i) - u(theta - sigma eps_i)) eps_i
 *
 * downhill.  Validation every heads_val_every generations on the network's
 * validation groups (every (model, training domain)'s val windows) at
 * every validation budget with the scorer deciding; the best scorer is
 * kept.  Then the split: the network's own validation at the same budgets
 * decides where the scorer is used (evict_train.h).  Runs are evaluated by
 * heads_threads workers, one window each at a time (a window's buffers are
 * its own; the model and the policies are read-only). */
#include "evict_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define MAX_VB 4
#define MAX_TASK_B 4

/* One window and the budgets it is run at. */
typedef struct task {
    scdb_evict_window *w;
    int steps;            /* the window's decoded steps (the top-1 term's floor) */
    int nb;
    int budget[MAX_TASK_B];
} task;

/* A parallel evaluation: every policy on every task at each of its
 * budgets; kl[(c * n_tasks + t) * MAX_TASK_B + b], t1 (NULL: not kept) the
 * same runs' top-1 agreement. */
typedef struct evaluation {
    const scdb_evict_policy *const *pols;
    int n_pols;
    const task *tasks;
    int n_tasks;
    int every;
    double *kl, *t1;
    atomic_int next;
    atomic_int err;
} evaluation;

static void *eval_worker(void *arg)
{
    evaluation *ev = arg;
    for (;;) {
        int t = atomic_fetch_add(&ev->next, 1);
        if (t >= ev->n_tasks || atomic_load(&ev->err)) break;
        const task *tk = &ev->tasks[t];
        for (int c = 0; c < ev->n_pols; c++)
            for (int b = 0; b < tk->nb; b++) {
                scdb_evict_eval e;
                scdb_err rc = scdb_evict_window_eval(tk->w, ev->pols[c], tk->budget[b], ev->every,
                                                     NULL, &e);
                if (rc) {
                    int z = 0;
                    atomic_compare_exchange_strong(&ev->err, &z, (int)rc);
                    return NULL;
                }
                ev->kl[((size_t)c * ev->n_tasks + t) * MAX_TASK_B + b] = e.kl;
                if (ev->t1) ev->t1[((size_t)c * ev->n_tasks + t) * MAX_TASK_B + b] = e.top1;
            }
    }
    return NULL;
}

static scdb_err evaluate(const scdb_evict_policy *const *pols, int n_pols, const task *tasks,
                         int n_tasks, int every, int threads, double *kl, double *t1)
{
    evaluation ev = {pols, n_pols, tasks, n_tasks, every, kl, t1, 0, 0};
    pthread_t th[16];
    int nt = threads < 1 ? 1 : threads > 16 ? 16 : threads, started = 0;
    for (int i = 1; i < nt; i++)
        if (!pthread_create(&th[started], NULL, eval_worker, &ev)) started++;
    eval_worker(&ev);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    return (scdb_err)atomic_load(&ev.err);
}

static double gauss(uint64_t *s)
{
    double u = scdb_evict_urand(s), v = scdb_evict_urand(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* theta <-> the scorer's A and D */
static void to_heads(const float *th, const scdb_evict_heads *shape, scdb_evict_heads *h)
{
    *h = *shape;
    memcpy(h->a, th, sizeof h->a);
    memcpy(h->d, th + SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX,
           (size_t)shape->n_win * SCDB_EVICT_HEAD_CTX * sizeof *h->d);
}

/* A policy: the network with this scorer deciding at every budget. */
static scdb_err heads_policy(const scdb_evict_mlp *net, const scdb_evict_heads *h,
                             scdb_evict_policy **out)
{
    scdb_evict_mlp *m = NULL;
    scdb_err rc;
    if ((rc = scdb_evict_mlp_new_inputs(net->hidden, net->in_id, net->n_in, 1, &m)) ||
        (rc = scdb_evict_mlp_copy(m, net)))
        goto done;
    m->heads = *h;
    m->heads.on = 1;
    m->heads.split = 1.0f;
    if (!m->heads.has_gate) m->heads.force = 2;   /* the scorer at every first eviction */
    rc = scdb_evict_policy_from_mlp(m, out);
done:
    scdb_evict_mlp_free(&m);
    return rc;
}

typedef struct vset {
    task *tasks;          /* one per validation window, at every validation budget */
    int n_tasks;
    int *group;           /* [n_tasks]: its (model, corpus, window length) group */
    int n_groups;
    double *best_h;       /* [group][MAX_VB] */
    double *best_t1;      /* [group][MAX_VB]: the heuristics' highest top-1 */
    int nb;
} vset;

/* log of the disagreement rate (1 - top-1) over a reference's: the top-1
 * term of the objective, floored at one step in `steps` each. */
static double dis_log(double t1, double ref_t1, int steps)
{
    const double lo = 1.0 / (steps > 0 ? steps : 1);
    return log(fmax(1.0 - t1, lo) / fmax(1.0 - ref_t1, lo));
}

/* Validation of policy c (kl, t1 from evaluate()): the geometric mean over
 * (group, budget) of the group's mean KL / its best heuristic's, returned,
 * and by_budget[b] the same per budget; obj[b] (may be NULL) per budget the
 * objective with the top-1 term, exp(mean over groups of log KL ratio + w
 * log disagreement ratio); t1_ok[b] (may be NULL) the groups whose mean
 * top-1 is at least the best heuristic's. */
static double vscore(const vset *v, const double *kl, const double *t1, int c, double w,
                     double *by_budget, double *obj, int *t1_ok)
{
    double *gk = calloc((size_t)v->n_groups * MAX_VB, sizeof *gk);
    double *gt = calloc((size_t)v->n_groups * MAX_VB, sizeof *gt);
    int *gn = calloc((size_t)v->n_groups, sizeof *gn), *gs = calloc((size_t)v->n_groups, sizeof *gs);
    double lr = 0.0, lb[MAX_VB] = {0}, lo[MAX_VB] = {0};
    if (!gk || !gt || !gn || !gs) {
        free(gk);
        free(gt);
        free(gn);
        free(gs);
        return NAN;
    }
    for (int t = 0; t < v->n_tasks; t++) {
        gn[v->group[t]]++;
        gs[v->group[t]] = v->tasks[t].steps;   /* one window length per group */
        for (int b = 0; b < v->nb; b++) {
            gk[v->group[t] * MAX_VB + b] += kl[((size_t)c * v->n_tasks + t) * MAX_TASK_B + b];
            gt[v->group[t] * MAX_VB + b] += t1[((size_t)c * v->n_tasks + t) * MAX_TASK_B + b];
        }
    }
    for (int b = 0; t1_ok && b < v->nb; b++) t1_ok[b] = 0;
    for (int g = 0; g < v->n_groups; g++)
        for (int b = 0; b < v->nb; b++) {
            double r = log(fmax(gk[g * MAX_VB + b] / gn[g], 1e-9) / fmax(v->best_h[g * MAX_VB + b], 1e-9));
            double mt = gt[g * MAX_VB + b] / gn[g];
            lr += r;
            lb[b] += r;
            lo[b] += r + w * dis_log(mt, v->best_t1[g * MAX_VB + b], gs[g]);
            if (t1_ok) t1_ok[b] += mt >= v->best_t1[g * MAX_VB + b];
        }
    for (int b = 0; by_budget && b < v->nb; b++) by_budget[b] = exp(lb[b] / v->n_groups);
    for (int b = 0; obj && b < v->nb; b++) obj[b] = exp(lo[b] / v->n_groups);
    free(gk);
    free(gt);
    free(gn);
    free(gs);
    return exp(lr / (v->n_groups * v->nb));
}

/* frac of a window's length (its prefill + steps: the cache it fills) */
static int budget_of(double frac, int len)
{
    int b = (int)(frac * len + 0.5);
    return b < 1 ? 1 : b;
}

/* The four heuristics the goals count, for the references. */
static scdb_err make_heuristics(scdb_evict_policy **h)
{
    static const scdb_evict_kind k[4] = {SCDB_EVICT_STREAMING, SCDB_EVICT_H2O, SCDB_EVICT_SNAPKV,
                                         SCDB_EVICT_TOVA};
    for (int i = 0; i < 4; i++) {
        scdb_err rc = scdb_evict_policy_new(k[i], &h[i]);
        if (rc) return rc;
    }
    return SCDB_OK;
}

/* (evict_internal.h; the cap is heads_split_max, a cost bound) */
float scdb_evict_heads_split(const double *fr, int nb, const double *by_budget, const double *net,
                             double cap, double *combined)
{
    int idx[MAX_VB];
    float split = 0.0f;
    for (int b = 0; b < nb; b++) idx[b] = b;
    for (int i = 0; i < nb; i++)
        for (int j = i + 1; j < nb; j++)
            if (fr[idx[j]] < fr[idx[i]]) { int x = idx[i]; idx[i] = idx[j]; idx[j] = x; }
    for (int i = 0; i < nb; i++) {
        int b = idx[i];
        if (!(by_budget[b] < net[b])) break;
        /* half-way to the next validation budget; at the largest, that
         * budget itself: nothing above it was measured */
        double next = i + 1 < nb ? fr[idx[i + 1]] : fr[b];
        split = (float)sqrt(fr[b] * next);
    }
    if (split > cap) split = (float)cap;
    if (combined) {
        double l = 0.0;
        for (int b = 0; b < nb; b++)
            l += log(fmax(fr[b] <= split ? by_budget[b] : net[b], 1e-9));
        *combined = exp(l / nb);
    }
    return split;
}

/* Weighted logistic regression by Newton's method: minimise
 * sum_e |y_e| log(1 + exp(-s_e w . x_e)) + lambda |w|^2, s_e = sign(y_e);
 * *acc = the weighted share of episodes whose sign it gets right. */
static scdb_err fit_gate(const double *x, const double *y, int n, float *wout, double *acc)
{
    enum { D = SCDB_EVICT_GATE_N };
    double w[D] = {0}, wsum = 0.0;
    for (int e = 0; e < n; e++) wsum += fabs(y[e]);
    if (!(wsum > 0.0)) {
        for (int q = 0; q < D; q++) wout[q] = 0.0f;
        wout[D - 1] = 1.0f;   /* nothing at stake: the scorer */
        *acc = 1.0;
        return SCDB_OK;
    }
    const double lambda = 1e-3 * wsum;
    for (int it = 0; it < 50; it++) {
        double g[D] = {0}, H[D][D] = {{0}};
        for (int e = 0; e < n; e++) {
            const double *xe = x + (size_t)e * D, t = y[e] > 0.0 ? 1.0 : 0.0, we = fabs(y[e]);
            double z = 0.0;
            for (int q = 0; q < D; q++) z += w[q] * xe[q];
            double p = 1.0 / (1.0 + exp(-z));
            for (int q = 0; q < D; q++) {
                g[q] += we * (p - t) * xe[q];
                for (int r = 0; r < D; r++) H[q][r] += we * p * (1.0 - p) * xe[q] * xe[r];
            }
        }
        for (int q = 0; q < D; q++) {
            g[q] += 2.0 * lambda * w[q];
            H[q][q] += 2.0 * lambda;
        }
        /* solve H d = g (Gaussian elimination, partial pivoting) */
        double A[D][D + 1];
        for (int q = 0; q < D; q++) {
            for (int r = 0; r < D; r++) A[q][r] = H[q][r];
            A[q][D] = g[q];
        }
        for (int c = 0; c < D; c++) {
            int pv = c;
            for (int r = c + 1; r < D; r++)
                if (fabs(A[r][c]) > fabs(A[pv][c])) pv = r;
            for (int k = 0; k <= D; k++) { double t = A[c][k]; A[c][k] = A[pv][k]; A[pv][k] = t; }
            if (fabs(A[c][c]) < 1e-300) return SCDB_ERANGE;
            for (int r = c + 1; r < D; r++) {
                double f = A[r][c] / A[c][c];
                for (int k = c; k <= D; k++) A[r][k] -= f * A[c][k];
            }
        }
        double d[D], step = 0.0;
        for (int c = D - 1; c >= 0; c--) {
            double v = A[c][D];
            for (int k = c + 1; k < D; k++) v -= A[c][k] * d[k];
            d[c] = v / A[c][c];
        }
        for (int q = 0; q < D; q++) {
            w[q] -= d[q];
            step += fabs(d[q]);
        }
        if (step < 1e-9) break;
    }
    double right = 0.0;
    for (int e = 0; e < n; e++) {
        double z = 0.0;
        for (int q = 0; q < D; q++) z += w[q] * x[(size_t)e * D + q];
        if ((z > 0.0) == (y[e] > 0.0)) right += fabs(y[e]);
    }
    *acc = right / wsum;
    for (int q = 0; q < D; q++) {
        if (!isfinite(w[q])) return SCDB_ERANGE;
        wout[q] = (float)w[q];
    }
    return SCDB_OK;
}

/* (evict_train.h) */
scdb_err scdb_evict_heads_extend(const scdb_evict_heads *src, int n, const float *fracs,
                                 float margin, scdb_evict_heads *dst, char *errbuf,
                                 size_t errlen)
{
    if (!src || !dst || !fracs || !src->on || src->n_win < 1 || n < 1 ||
        n > SCDB_EVICT_HEAD_MAX_WIN || !(margin > 0.0f) || !isfinite(margin)) {
        scdb_errf(errbuf, errlen, "invalid arguments to extend the scorer's window choices");
        return SCDB_EINVAL;
    }
    for (int c = 0; c < n; c++)
        if (!(fracs[c] >= 0.0f && fracs[c] < 1.0f)) {
            scdb_errf(errbuf, errlen, "window choice %g is not a fraction in [0, 1)", (double)fracs[c]);
            return SCDB_EINVAL;
        }
    for (int s = 0; s < src->n_win; s++) {
        int found = 0;
        for (int c = 0; c < n && !found; c++) found = fabsf(fracs[c] - src->win_frac[s]) < 1e-6f;
        if (!found) {
            scdb_errf(errbuf, errlen, "the scorer's window choice %g is not among the new ones",
                      (double)src->win_frac[s]);
            return SCDB_EINVAL;
        }
    }
    scdb_evict_heads h = *src;
    h.n_win = n;
    memset(h.d, 0, sizeof h.d);
    memset(h.win_frac, 0, sizeof h.win_frac);
    for (int c = 0; c < n; c++) {
        int near = 0;
        for (int s = 1; s < src->n_win; s++)
            if (fabsf(src->win_frac[s] - fracs[c]) < fabsf(src->win_frac[near] - fracs[c])) near = s;
        /* a choice the start has keeps its exact fraction (the match allows 1e-6) */
        const int same = fabsf(src->win_frac[near] - fracs[c]) < 1e-6f;
        h.win_frac[c] = same ? src->win_frac[near] : fracs[c];
        memcpy(h.d + (size_t)c * SCDB_EVICT_HEAD_CTX, src->d + (size_t)near * SCDB_EVICT_HEAD_CTX,
               SCDB_EVICT_HEAD_CTX * sizeof *h.d);
        if (!same) h.d[(size_t)c * SCDB_EVICT_HEAD_CTX + SCDB_EVICT_HEAD_CTX - 1] -= margin;
    }
    *dst = h;
    return SCDB_OK;
}

/* (evict_internal.h) */
scdb_err scdb_evict_heads_opts_check(const scdb_evict_rl_opts *o, char *errbuf, size_t errlen)
{
    if (o->heads_pairs < 1 || o->heads_pairs > 64 || o->heads_episodes < 1 ||
        o->heads_pool < o->heads_episodes || !(o->heads_sigma > 0.0f) ||
        !(o->heads_lr > 0.0f) || !(o->heads_lo > 0.0) || !(o->heads_hi >= o->heads_lo) ||
        !(o->heads_hi < 1.0) || o->heads_val_every < 1 || o->heads_sinks < 0 ||
        o->heads_n_win < 1 || o->heads_n_win > SCDB_EVICT_HEAD_MAX_WIN || o->heads_threads < 1 ||
        !(o->heads_sign == 1.0f || o->heads_sign == -1.0f) ||
        !(o->heads_split_max > 0.0 && o->heads_split_max <= 1.0) ||
        !(o->heads_top1 >= 0.0 && o->heads_top1 <= 100.0) ||
        !(o->heads_short >= 0.0 && o->heads_short <= 1.0) ||
        (o->heads_short > 0.0 && (o->prefill < 4 || o->steps < 2)) ||
        (o->heads_init && o->heads_init->n_win != o->heads_n_win)) {
        scdb_errf(errbuf, errlen, "invalid per-head scorer options");
        return SCDB_EINVAL;
    }
    for (int c = 0; c < o->heads_n_win; c++)
        if (!(o->heads_win_frac[c] >= 0.0f && o->heads_win_frac[c] < 1.0f)) {
            scdb_errf(errbuf, errlen, "per-head window choice %g is not a fraction in [0, 1)",
                      (double)o->heads_win_frac[c]);
            return SCDB_EINVAL;
        }
    return SCDB_OK;
}

scdb_err scdb_evict_train_heads(const scdb_evict_rl_opts *o, scdb_model *const *models,
                                const int32_t *const *tok, const int32_t *const *vtok,
                                scdb_evict_mlp *net, scdb_evict_rl_result *res, char *errbuf,
                                size_t errlen)
{
    const int span = o->prefill + o->steps + 1;
    const int D = SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX + o->heads_n_win * SCDB_EVICT_HEAD_CTX;
    const int P = o->heads_pairs, NC = 2 * P + 1, E = o->heads_episodes;
    const double t0 = scdb_now();
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    scdb_evict_policy *heur[4] = {0}, **pols = NULL, *netpol = NULL;
    task *pool = NULL, *batch = NULL;
    double *pool_ref = NULL, *pool_t1 = NULL, *kl = NULL, *kt1 = NULL, *vkl = NULL, *vt1 = NULL;
    double *fit = NULL, net_obj[MAX_VB] = {0};
    const double w1 = o->heads_top1;
    float *th = NULL, *best = NULL, *eps = NULL, *gr = NULL, *am = NULL, *av = NULL;
    int *order = NULL, *pool_model = NULL, *pool_corpus = NULL;
    vset v = {0};
    scdb_evict_heads shape = {0}, hh;
    scdb_err rc = SCDB_EINVAL;

    if ((rc = scdb_evict_heads_opts_check(o, errbuf, errlen))) return rc;
    shape.on = 1;
    shape.split = 1.0f;
    shape.sinks = o->heads_sinks;
    shape.n_win = o->heads_n_win;
    memcpy(shape.win_frac, o->heads_win_frac, sizeof shape.win_frac);

    rc = SCDB_ENOMEM;
    pool = calloc((size_t)o->heads_pool, sizeof *pool);
    pool_ref = calloc((size_t)o->heads_pool, sizeof *pool_ref);
    pool_t1 = calloc((size_t)o->heads_pool, sizeof *pool_t1);
    batch = calloc((size_t)E, sizeof *batch);
    order = malloc((size_t)o->heads_pool * sizeof *order);
    pool_model = calloc((size_t)o->heads_pool, sizeof *pool_model);
    pool_corpus = calloc((size_t)o->heads_pool, sizeof *pool_corpus);
    pols = calloc((size_t)NC, sizeof *pols);
    kl = malloc((size_t)(NC > 4 ? NC : 4) * o->heads_pool * MAX_TASK_B * sizeof *kl);
    kt1 = malloc((size_t)(NC > 4 ? NC : 4) * o->heads_pool * MAX_TASK_B * sizeof *kt1);
    fit = malloc((size_t)NC * sizeof *fit);
    th = calloc((size_t)D, sizeof *th);
    best = calloc((size_t)D, sizeof *best);
    eps = malloc((size_t)P * D * sizeof *eps);
    gr = malloc((size_t)D * sizeof *gr);
    am = calloc((size_t)D, sizeof *am);
    av = calloc((size_t)D, sizeof *av);
    if (!pool || !pool_ref || !pool_t1 || !batch || !order || !pool_model || !pool_corpus || !pols ||
        !kl || !kt1 || !fit || !th || !best || !eps ||
        !gr || !am || !av)
        goto done;
    if ((rc = make_heuristics(heur))) goto done;
    scdb_k_cpu_threads(1);   /* the workers are the parallelism */

    /* the pool: model round robin, a random domain and window, a
     * log-uniform budget; its reference is the best heuristic there */
    for (int i = 0; i < o->heads_pool; i++) {
        int mi = i % o->n_models, c = (int)(scdb_evict_urand(&rng) * o->n_corpora);
        if (c >= o->n_corpora) c = o->n_corpora - 1;
        size_t room = o->corpora[c].train_len - (size_t)span;
        size_t off = (size_t)(scdb_evict_urand(&rng) * (double)(room + 1));
        if (off > room) off = room;
        double fr = exp(log(o->heads_lo) + scdb_evict_urand(&rng) * (log(o->heads_hi) - log(o->heads_lo)));
        /* a half-length window (--heads-short), from the same offset */
        const int half = o->heads_short > 0.0 && scdb_evict_urand(&rng) < o->heads_short;
        const int wp = half ? o->prefill / 2 : o->prefill, ws = half ? o->steps / 2 : o->steps;
        if ((rc = scdb_evict_window_new(models[mi], tok[c] + off, wp, ws, &pool[i].w)))
            goto done;
        pool[i].steps = ws;
        pool[i].nb = 1;
        pool[i].budget[0] = budget_of(fr, wp + ws);
        pool_model[i] = mi;
        pool_corpus[i] = c;
    }
    if ((rc = evaluate((const scdb_evict_policy *const *)heur, 4, pool, o->heads_pool, o->every,
                       o->heads_threads, kl, kt1)))
        goto done;
    for (int i = 0; i < o->heads_pool; i++) {
        pool_ref[i] = INFINITY;
        pool_t1[i] = 0.0;
        for (int k = 0; k < 4; k++) {
            pool_ref[i] = fmin(pool_ref[i], kl[((size_t)k * o->heads_pool + i) * MAX_TASK_B]);
            pool_t1[i] = fmax(pool_t1[i], kt1[((size_t)k * o->heads_pool + i) * MAX_TASK_B]);
        }
    }
    if (o->verbose)
        fprintf(stderr, "train-policy: per-head scorer: %d training episodes (budgets %.3g-%.3g) "
                        "and their heuristics, %.0f s\n", o->heads_pool, o->heads_lo, o->heads_hi,
                scdb_now() - t0);

    /* validation: val_windows of every (model, corpus) at every validation budget */
    rc = SCDB_ENOMEM;
    v.nb = o->n_val_budgets;
    /* with --heads-short, each (model, corpus) twice: full-length windows
     * and half-length ones, two groups (each protocol weighs the same) */
    const int n_proto = o->heads_short > 0.0 ? 2 : 1;
    v.n_groups = o->n_models * o->n_corpora * n_proto;
    v.n_tasks = v.n_groups * o->val_windows;
    v.tasks = calloc((size_t)v.n_tasks, sizeof *v.tasks);
    v.group = calloc((size_t)v.n_tasks, sizeof *v.group);
    v.best_h = calloc((size_t)v.n_groups * MAX_VB, sizeof *v.best_h);
    v.best_t1 = calloc((size_t)v.n_groups * MAX_VB, sizeof *v.best_t1);
    vkl = malloc((size_t)(NC > 5 ? NC : 5) * v.n_tasks * MAX_TASK_B * sizeof *vkl);
    vt1 = malloc((size_t)(NC > 5 ? NC : 5) * v.n_tasks * MAX_TASK_B * sizeof *vt1);
    if (!v.tasks || !v.group || !v.best_h || !v.best_t1 || !vkl || !vt1) goto done;
    for (int mi = 0, t = 0; mi < o->n_models; mi++)
        for (int c = 0; c < o->n_corpora; c++)
            for (int pr = 0; pr < n_proto; pr++) {
                size_t room = o->corpora[c].val_len - (size_t)span;
                const int wp = pr ? o->prefill / 2 : o->prefill, ws = pr ? o->steps / 2 : o->steps;
                for (int i = 0; i < o->val_windows; i++, t++) {
                    /* the network's validation windows (train_rl.c); a
                     * half-length one starts where the full one does */
                    size_t off = room * (size_t)(2 * i + 1) / (size_t)(2 * o->val_windows);
                    if ((rc = scdb_evict_window_new(models[mi], vtok[c] + off, wp, ws,
                                                    &v.tasks[t].w)))
                        goto done;
                    v.tasks[t].steps = ws;
                    v.tasks[t].nb = v.nb;
                    for (int b = 0; b < v.nb; b++)
                        v.tasks[t].budget[b] = budget_of(o->val_budgets[b], wp + ws);
                    v.group[t] = (mi * o->n_corpora + c) * n_proto + pr;
                }
            }
    {
        /* the network alone (a start that has a scorer: without it), what
         * the split weighs the scorer against */
        scdb_evict_heads keep = net->heads;
        net->heads.on = 0;
        rc = scdb_evict_policy_from_mlp(net, &netpol);
        net->heads = keep;
        if (rc) goto done;
    }
    {
        /* the heuristics (references) and the network itself */
        const scdb_evict_policy *vp[5] = {heur[0], heur[1], heur[2], heur[3], netpol};
        if ((rc = evaluate(vp, 5, v.tasks, v.n_tasks, o->every, o->heads_threads, vkl, vt1))) goto done;
        for (int g = 0; g < v.n_groups; g++)
            for (int b = 0; b < v.nb; b++) {
                double bh = INFINITY, bt = 0.0;
                for (int k = 0; k < 4; k++) {
                    double s = 0.0, st = 0.0;
                    int n = 0;
                    for (int t = 0; t < v.n_tasks; t++)
                        if (v.group[t] == g) {
                            s += vkl[((size_t)k * v.n_tasks + t) * MAX_TASK_B + b];
                            st += vt1[((size_t)k * v.n_tasks + t) * MAX_TASK_B + b];
                            n++;
                        }
                    bh = fmin(bh, s / n);
                    bt = fmax(bt, st / n);
                }
                v.best_h[g * MAX_VB + b] = bh;
                v.best_t1[g * MAX_VB + b] = bt;
            }
        vscore(&v, vkl, vt1, 4, w1, res->net_by_budget, net_obj, NULL);
    }

    /* the start */
    if (o->heads_init) {
        memcpy(th, o->heads_init->a, sizeof o->heads_init->a);
        memcpy(th + SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX, o->heads_init->d,
               (size_t)o->heads_n_win * SCDB_EVICT_HEAD_CTX * sizeof *th);
    } else if (!o->heads_init_zero) {
        th[0 * SCDB_EVICT_HEAD_CTX + SCDB_EVICT_HEAD_CTX - 1] = 1.0f;   /* snap: SnapKV per set */
        int q = 0;   /* the choice nearest a quarter of the budget */
        for (int c = 1; c < o->heads_n_win; c++)
            if (fabsf(o->heads_win_frac[c] - 0.25f) < fabsf(o->heads_win_frac[q] - 0.25f)) q = c;
        th[SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX + q * SCDB_EVICT_HEAD_CTX +
           SCDB_EVICT_HEAD_CTX - 1] = 1.0f;
    }
    memcpy(best, th, (size_t)D * sizeof *th);

    double best_score = INFINITY;
    int best_gen = 0, gen;
    for (gen = 0; gen <= o->heads_gens; gen++) {
        /* validate theta every heads_val_every generations (and at 0 and the end) */
        if (gen % o->heads_val_every == 0 || gen == o->heads_gens) {
            double bb[MAX_VB];
            to_heads(th, &shape, &hh);
            if ((rc = heads_policy(net, &hh, &pols[0]))) goto done;
            rc = evaluate((const scdb_evict_policy *const *)pols, 1, v.tasks, v.n_tasks, o->every,
                          o->heads_threads, vkl, vt1);
            scdb_evict_policy_free(&pols[0]);
            if (rc) goto done;
            double ob[MAX_VB], comb;
            int t1ok[MAX_VB];
            double sc = vscore(&v, vkl, vt1, 0, w1, bb, ob, t1ok);
            float sp = scdb_evict_heads_split(o->val_budgets, v.nb, bb, res->net_by_budget,
                                              o->heads_split_max, &comb);
            if (w1 != 0.0) {
                /* with the top-1 term: the same file (the split by KL),
                 * scored by the objective */
                double l = 0.0;
                for (int b = 0; b < v.nb; b++)
                    l += log(fmax(o->val_budgets[b] <= sp ? ob[b] : net_obj[b], 1e-9));
                comb = exp(l / v.nb);
            }
            if (gen == 0) res->heads_ratio_init = sc;
            /* kept: the scorer whose file would score best (the scorer up
             * to its split, the network above), not the scorer best at
             * budgets the network then takes */
            int improved = comb < best_score;
            if (improved) {
                best_score = comb;
                best_gen = gen;
                res->heads_ratio_scorer = sc;
                memcpy(best, th, (size_t)D * sizeof *th);
                memcpy(res->heads_by_budget, bb, sizeof bb);
            }
            if (o->log) {
                fprintf(o->log, "{\"heads_validation\":%d,\"score\":%.6f,\"with_network\":%.6f,\"by_budget\":[",
                        gen, sc, comb);
                for (int b = 0; b < v.nb; b++) fprintf(o->log, "%s%.6f", b ? "," : "", bb[b]);
                fprintf(o->log, "],\"network_by_budget\":[");
                for (int b = 0; b < v.nb; b++)
                    fprintf(o->log, "%s%.6f", b ? "," : "", res->net_by_budget[b]);
                /* groups whose top-1 is at least the best heuristic's, of n */
                fprintf(o->log, "],\"top1_ok\":[");
                for (int b = 0; b < v.nb; b++) fprintf(o->log, "%s%d", b ? "," : "", t1ok[b]);
                fprintf(o->log, "],\"groups\":%d,\"best\":%s,\"seconds\":%.1f}\n", v.n_groups,
                        improved ? "true" : "false", scdb_now() - t0);
                fflush(o->log);
            }
            if (o->verbose) {
                fprintf(stderr, "train-policy: per-head scorer, generation %d/%d: validation %.4f, "
                                "%.4f with the network above its split (by budget", gen,
                        o->heads_gens, sc, comb);
                for (int b = 0; b < v.nb; b++)
                    fprintf(stderr, " %.3g: %.3f vs the network's %.3f, top-1 >= the best "
                                    "heuristic's on %d/%d", o->val_budgets[b], bb[b],
                            res->net_by_budget[b], t1ok[b], v.n_groups);
                fprintf(stderr, ")%s, %.0f s\n", improved ? " best" : "", scdb_now() - t0);
            }
        }
        if (gen == o->heads_gens) break;

        /* a generation: E episodes, P antithetic pairs and theta */
        for (int i = 0; i < o->heads_pool; i++) order[i] = i;
        for (int i = 0; i < E; i++) {
            int j = i + (int)(scdb_evict_urand(&rng) * (o->heads_pool - i));
            if (j >= o->heads_pool) j = o->heads_pool - 1;
            int x = order[i]; order[i] = order[j]; order[j] = x;
            batch[i] = pool[order[i]];
        }
        for (int i = 0; i < P * D; i++) eps[i] = (float)gauss(&rng);
        for (int c = 0; c < NC; c++) {
            float *tc = gr;   /* scratch for the candidate's theta */
            for (int k = 0; k < D; k++) {
                float e = c < 2 * P ? eps[(size_t)(c / 2) * D + k] : 0.0f;
                tc[k] = th[k] + (c % 2 ? -1.0f : 1.0f) * o->heads_sigma * e;
            }
            to_heads(tc, &shape, &hh);
            if ((rc = heads_policy(net, &hh, &pols[c]))) goto done;
        }
        rc = evaluate((const scdb_evict_policy *const *)pols, NC, batch, E, o->every,
                      o->heads_threads, kl, kt1);
        for (int c = 0; c < NC; c++) scdb_evict_policy_free(&pols[c]);
        if (rc) goto done;
        for (int c = 0; c < NC; c++) {
            double s = 0.0;
            for (int e = 0; e < E; e++) {
                s += log(fmax(kl[((size_t)c * E + e) * MAX_TASK_B], 1e-9) /
                         fmax(pool_ref[order[e]], 1e-9));
                if (w1 != 0.0)
                    s += w1 * dis_log(kt1[((size_t)c * E + e) * MAX_TASK_B], pool_t1[order[e]],
                                      pool[order[e]].steps);
            }
            fit[c] = o->heads_sign * s / E;
        }
        /* centred ranks of the 2P (lower J: lower rank) */
        double u[128];
        for (int c = 0; c < 2 * P; c++) {
            int rk = 0;
            for (int q = 0; q < 2 * P; q++) rk += fit[q] < fit[c] || (fit[q] == fit[c] && q < c);
            u[c] = (double)rk / (2 * P - 1) - 0.5;
        }
        for (int k = 0; k < D; k++) {
            double g = 0.0;
            for (int i = 0; i < P; i++) g += (u[2 * i] - u[2 * i + 1]) * eps[(size_t)i * D + k];
            gr[k] = (float)(g / (2.0 * P * o->heads_sigma));
        }
        /* Adam downhill */
        const float b1 = 0.9f, b2 = 0.999f;
        const float c1 = 1.0f - powf(b1, (float)(gen + 1)), c2 = 1.0f - powf(b2, (float)(gen + 1));
        for (int k = 0; k < D; k++) {
            am[k] = b1 * am[k] + (1.0f - b1) * gr[k];
            av[k] = b2 * av[k] + (1.0f - b2) * gr[k] * gr[k];
            th[k] -= o->heads_lr * (am[k] / c1) / (sqrtf(av[k] / c2) + 1e-8f);
        }
        if (o->log) {
            fprintf(o->log, "{\"heads_generation\":%d,\"theta_fitness\":%.6f,\"best_pair\":%.6f,"
                            "\"seconds\":%.1f}\n",
                    gen + 1, o->heads_sign * fit[NC - 1], fit[0] < fit[1] ? fit[0] : fit[1],
                    scdb_now() - t0);
            fflush(o->log);
        }
        if (o->verbose)
            fprintf(stderr, "train-policy: per-head scorer, generation %d/%d: theta %.4f x the best "
                            "heuristic on %d episodes, %.0f s\n",
                    gen + 1, o->heads_gens, exp(o->heads_sign * fit[NC - 1]), E, scdb_now() - t0);
    }
    res->heads_gens_run = gen;
    res->heads_best_gen = best_gen;
    res->heads_ratio_best = best_score;

    /* the gate: on every pool episode, the scorer's sets and the network's
     * one set; a logistic regression of which is better on what the gate
     * reads at the first eviction, each episode weighted by how much it
     * matters (|log of the KL ratio|) */
    to_heads(best, &shape, &hh);
    if (o->heads_gate) {
        const scdb_evict_policy *gp[2];
        scdb_evict_policy *hp = NULL;
        double *gx = calloc((size_t)o->heads_pool * SCDB_EVICT_GATE_N, sizeof *gx);
        double *gy = calloc((size_t)o->heads_pool, sizeof *gy);
        rc = !gx || !gy ? SCDB_ENOMEM : heads_policy(net, &hh, &hp);
        if (!rc) {
            gp[0] = hp;
            gp[1] = netpol;
            rc = evaluate(gp, 2, pool, o->heads_pool, o->every, o->heads_threads, kl, kt1);
        }
        for (int i = 0; !rc && i < o->heads_pool; i++) {
            float g[SCDB_EVICT_GATE_N];
            if ((rc = scdb_evict_heads_gate_input(scdb_evict_window_acc_heads(pool[i].w),
                                                  pool[i].budget[0], g)))
                break;
            for (int q = 0; q < SCDB_EVICT_GATE_N; q++) gx[i * SCDB_EVICT_GATE_N + q] = g[q];
            double kh = kl[((size_t)0 * o->heads_pool + i) * MAX_TASK_B];
            double kn = kl[((size_t)1 * o->heads_pool + i) * MAX_TASK_B];
            gy[i] = log(fmax(kn, 1e-9) / fmax(kh, 1e-9));   /* > 0: the sets are better */
        }
        double acc = 0.0;
        if (!rc) rc = fit_gate(gx, gy, o->heads_pool, hh.gate, &acc);
        if (!rc) {
            hh.has_gate = 1;
            res->heads_gate_acc = acc;
            if (o->verbose)
                fprintf(stderr, "train-policy: per-head scorer: the gate chooses the better of the "
                                "two on %.1f%% of the training episodes (weighted by what is at "
                                "stake), %.0f s\n", 100.0 * acc, scdb_now() - t0);
            if (o->log) {
                fprintf(o->log, "{\"heads_gate\":[");
                for (int q = 0; q < SCDB_EVICT_GATE_N; q++)
                    fprintf(o->log, "%s%.6f", q ? "," : "", hh.gate[q]);
                fprintf(o->log, "],\"weighted_accuracy\":%.4f,\"episodes\":[", acc);
                for (int i = 0; i < o->heads_pool; i++) {
                    /* log(KL network / KL scorer), the budget, model and
                     * domain indices, what the gate read */
                    fprintf(o->log, "%s{\"y\":%.5f,\"budget\":%d,\"model\":%d,\"domain\":%d,\"g\":[",
                            i ? "," : "", gy[i], pool[i].budget[0], pool_model[i], pool_corpus[i]);
                    for (int q = 0; q < SCDB_EVICT_GATE_N; q++)
                        fprintf(o->log, "%s%.4f", q ? "," : "", gx[i * SCDB_EVICT_GATE_N + q]);
                    fprintf(o->log, "]}");
                }
                fprintf(o->log, "]}\n");
            }
            /* the gated policy on the validation windows: what the split weighs */
            double bb[MAX_VB];
            if ((rc = heads_policy(net, &hh, &pols[0])) ||
                (rc = evaluate((const scdb_evict_policy *const *)pols, 1, v.tasks, v.n_tasks,
                               o->every, o->heads_threads, vkl, vt1)))
                ;
            else {
                res->heads_ratio_gated = vscore(&v, vkl, vt1, 0, w1, bb, NULL, NULL);
                memcpy(res->heads_by_budget, bb, sizeof bb);
                if (o->verbose) {
                    fprintf(stderr, "train-policy: per-head scorer with its gate: validation %.4f (by "
                                    "budget", res->heads_ratio_gated);
                    for (int b = 0; b < v.nb; b++)
                        fprintf(stderr, " %.3g: %.3f vs the network's %.3f", o->val_budgets[b], bb[b],
                                res->net_by_budget[b]);
                    fprintf(stderr, ")\n");
                }
            }
            scdb_evict_policy_free(&pols[0]);
        }
        scdb_evict_policy_free(&hp);
        free(gx);
        free(gy);
        if (rc) goto done;
    }

    /* the split: the largest validation budget up to which (every smaller
     * validation budget included) the scorer beats the network */
    {
        float split = scdb_evict_heads_split(o->val_budgets, v.nb, res->heads_by_budget,
                                             res->net_by_budget, o->heads_split_max, NULL);
        net->heads = hh;
        net->heads.force = 0;
        net->heads.on = split > 0.0f;
        net->heads.split = split;
        res->heads_split = split;
        if (o->verbose)
            fprintf(stderr, "train-policy: per-head scorer: best at generation %d (validation %.4f, "
                            "start %.4f); %s\n", best_gen, best_score, res->heads_ratio_init,
                    split > 0.0f ? "it decides at budgets up to the split" :
                                   "the network is better at every validation budget: no scorer");
        if (o->log) {
            fprintf(o->log, "{\"heads_split\":%.6f,\"best_generation\":%d,\"theta\":[", split, best_gen);
            for (int k = 0; k < D; k++) fprintf(o->log, "%s%.6f", k ? "," : "", best[k]);
            fprintf(o->log, "]}\n");
        }
    }
    rc = SCDB_OK;
done:
    for (int i = 0; pool && i < o->heads_pool; i++) scdb_evict_window_free(&pool[i].w);
    for (int t = 0; v.tasks && t < v.n_tasks; t++) scdb_evict_window_free(&v.tasks[t].w);
    for (int k = 0; k < 4; k++) scdb_evict_policy_free(&heur[k]);
    for (int c = 0; pols && c < NC; c++) scdb_evict_policy_free(&pols[c]);
    scdb_evict_policy_free(&netpol);
    free(pool);
    free(pool_ref);
    free(pool_t1);
    free(kt1);
    free(vt1);
    free(v.best_t1);
    free(batch);
    free(order);
    free(pool_model);
    free(pool_corpus);
    free(pols);
    free(kl);
    free(vkl);
    free(fit);
    free(th);
    free(best);
    free(eps);
    free(gr);
    free(am);
    free(av);
    free(v.tasks);
    free(v.group);
    free(v.best_h);
    return rc;
}
