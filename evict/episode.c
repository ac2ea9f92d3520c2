/* episode.c — the teacher / student measurement protocol (evict.h,
 * "protocol") that both `scdb bench evict` and policy training run: one
 * prefilled window, its full-cache teacher distributions, and student runs
 * under a policy (deterministic) or a sampler (training). */
#include "evict_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

struct scdb_evict_window {
    const scdb_model *m;
    int P, T, cap, V, L, H;
    int32_t *tok;                   /* [P + T + 1] */
    scdb_kv_cache *cache0, *cache;  /* after prefill; the student's working copy */
    scdb_evict_acc *acc0, *acc;
    scdb_evict_acc *acc0h, *acch;   /* the same in the per-head layout (evict.h) */
    scdb_kv_cache *cache_b;         /* a branch of the student (training; lazily made) */
    scdb_evict_acc *acc_b;
    int t_student;                  /* next step the student decodes (scdb_evict_window_steps) */
    float *teacher_lp;              /* [T][V] log-probabilities */
    int *teacher_top;               /* [T] argmax */
    double step_s, nll_full;
    float *probs;                   /* [L][H][1][cap] */
    float *logits, *lp;             /* [V] */
    float *scores, *feats, *pert;   /* [cap], [cap][N_FEATURES], [cap] */
    int *keep, *cand;               /* [cap] */
    double *age_hist;               /* NULL, or [age_bins]: kept slots by age after evictions */
    int age_bins;
};

/* CPU seconds of the calling thread: the step and overhead times count
 * this thread's work only, so other work on the machine does not inflate
 * one side of their ratio more than the other. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double scdb_evict_urand(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

scdb_err scdb_evict_cache_copy(scdb_kv_cache *dst, const scdb_kv_cache *src)
{
    if (!dst || !src) return SCDB_EINVAL;
    if (dst->n_layers != src->n_layers || dst->n_kv_heads != src->n_kv_heads ||
        dst->head_dim != src->head_dim || dst->capacity < src->n)
        return SCDB_ESHAPE;
    size_t row = (size_t)scdb_kv_dim(src) * sizeof(float) * (size_t)src->n;
    memcpy(dst->pos, src->pos, (size_t)src->n * sizeof *src->pos);
    for (int l = 0; l < src->n_layers; l++) {
        memcpy(scdb_kv_k(dst, l, 0), scdb_kv_k(src, l, 0), row);
        memcpy(scdb_kv_v(dst, l, 0), scdb_kv_v(src, l, 0), row);
    }
    dst->n = src->n;
    return SCDB_OK;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

void scdb_evict_window_free(scdb_evict_window **pw)
{
    scdb_evict_window *w;
    if (!pw || !*pw) return;
    w = *pw;
    free(w->tok);
    scdb_kv_cache_free(&w->cache0);
    scdb_kv_cache_free(&w->cache);
    scdb_evict_acc_free(&w->acc0);
    scdb_evict_acc_free(&w->acc);
    scdb_evict_acc_free(&w->acc0h);
    scdb_evict_acc_free(&w->acch);
    scdb_kv_cache_free(&w->cache_b);
    scdb_evict_acc_free(&w->acc_b);
    free(w->teacher_lp);
    free(w->teacher_top);
    free(w->probs);
    free(w->logits);
    free(w->lp);
    free(w->scores);
    free(w->feats);
    free(w->pert);
    free(w->keep);
    free(w->cand);
    free(w);
    *pw = NULL;
}

scdb_err scdb_evict_window_new(const scdb_model *m, const int32_t *tokens, int prefill,
                               int steps, scdb_evict_window **out)
{
    scdb_evict_window *w = NULL;
    float *pprobs = NULL;
    scdb_err rc = SCDB_ENOMEM;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!m || !tokens || prefill < 1 || steps < 1) return SCDB_EINVAL;
    const scdb_model_config *c = scdb_model_cfg(m);
    if (prefill + steps > c->max_seq_len) return SCDB_ERANGE;
    if (!(w = calloc(1, sizeof *w))) return SCDB_ENOMEM;
    w->m = m;
    w->P = prefill;
    w->T = steps;
    w->cap = prefill + steps;
    w->V = c->vocab_size;
    w->L = c->n_layers;
    w->H = c->n_heads;
    scdb_evict_acc_shape shape = {c->n_layers, c->n_heads, c->n_kv_heads, w->cap, 0, 0};
    scdb_evict_acc_shape hshape = {c->n_layers, c->n_heads, c->n_kv_heads, w->cap, 0, 1};
    w->tok = malloc((size_t)(w->cap + 1) * sizeof *w->tok);
    w->teacher_lp = malloc((size_t)steps * w->V * sizeof *w->teacher_lp);
    w->teacher_top = malloc((size_t)steps * sizeof *w->teacher_top);
    w->probs = malloc((size_t)w->L * w->H * w->cap * sizeof *w->probs);
    w->logits = malloc((size_t)w->V * sizeof *w->logits);
    w->lp = malloc((size_t)w->V * sizeof *w->lp);
    w->scores = malloc((size_t)w->cap * sizeof *w->scores);
    w->feats = malloc((size_t)w->cap * SCDB_EVICT_N_FEATURES * sizeof *w->feats);
    w->pert = malloc((size_t)w->cap * sizeof *w->pert);
    w->keep = malloc((size_t)w->cap * sizeof *w->keep);
    w->cand = malloc((size_t)w->cap * sizeof *w->cand);
    pprobs = malloc((size_t)w->L * w->H * prefill * prefill * sizeof *pprobs);
    if (!w->tok || !w->teacher_lp || !w->teacher_top || !w->probs || !w->logits || !w->lp ||
        !w->scores || !w->feats || !w->pert || !w->keep || !w->cand || !pprobs)
        goto fail;
    memcpy(w->tok, tokens, (size_t)(w->cap + 1) * sizeof *w->tok);
    if ((rc = scdb_model_cache_new(m, w->cap, &w->cache0)) ||
        (rc = scdb_model_cache_new(m, w->cap, &w->cache)) ||
        (rc = scdb_evict_acc_new(&shape, &w->acc0)) || (rc = scdb_evict_acc_new(&shape, &w->acc)) ||
        (rc = scdb_evict_acc_new(&hshape, &w->acc0h)) || (rc = scdb_evict_acc_new(&hshape, &w->acch)))
        goto fail;

    scdb_capture cap = {0};
    cap.probs = pprobs;
    cap.probs_slots = prefill;
    if ((rc = scdb_model_forward(m, w->tok, NULL, prefill, w->cache0, NULL, &cap)) ||
        (rc = scdb_evict_acc_update(w->acc0, w->cache0, pprobs, prefill, prefill)) ||
        (rc = scdb_evict_acc_update(w->acc0h, w->cache0, pprobs, prefill, prefill)))
        goto fail;

    /* teacher: the full cache, no capture */
    if ((rc = scdb_evict_cache_copy(w->cache, w->cache0))) goto fail;
    double t0 = cpu_s(), nll = 0.0;
    for (int t = 0; t < steps; t++) {
        float *lp = w->teacher_lp + (size_t)t * w->V;
        if ((rc = scdb_model_forward(m, w->tok + prefill + t, NULL, 1, w->cache, w->logits, NULL)))
            goto fail;
        scdb_k_log_softmax_cpu(w->logits, w->V, lp);
        w->teacher_top[t] = argmax(lp, w->V);
        nll -= lp[w->tok[prefill + t + 1]];
    }
    w->step_s = (cpu_s() - t0) / steps;
    w->nll_full = nll / steps;
    free(pprobs);
    *out = w;
    return SCDB_OK;
fail:
    free(pprobs);
    scdb_evict_window_free(&w);
    return rc;
}

double scdb_evict_window_step_s(const scdb_evict_window *w) { return w->step_s; }

void scdb_evict_window_age_hist(scdb_evict_window *w, double *hist, int bins)
{
    if (!w) return;
    w->age_hist = bins > 0 ? hist : NULL;
    w->age_bins = bins > 0 ? bins : 0;
}
double scdb_evict_window_nll_full(const scdb_evict_window *w) { return w->nll_full; }
const scdb_evict_acc *scdb_evict_window_acc(const scdb_evict_window *w) { return w->acc0; }
const scdb_evict_acc *scdb_evict_window_student_acc(const scdb_evict_window *w) { return w->acc; }
const scdb_evict_acc *scdb_evict_window_acc_heads(const scdb_evict_window *w) { return w->acc0h; }

/* ------------------------------------------------------------ sampling */

void scdb_evict_sampler_clear(scdb_evict_sampler *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_dec; i++) {
        free(s->dec[i].x);
        free(s->dec[i].s);
        free(s->dec[i].arg);
        free(s->dec[i].order);
    }
    free(s->dec);
    s->dec = NULL;
    s->n_dec = s->cap_dec = 0;
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* Gumbel top-m over the candidates of (kv, acc), recorded; fills w->keep. */
static scdb_err sample_evict(scdb_evict_window *w, scdb_kv_cache *kv, scdb_evict_acc *acc,
                             scdb_evict_sampler *smp, int budget, int step, int *n_keep)
{
    const scdb_evict_mlp *mlp = smp->mlp;
    int n = kv->n, cap = n < budget ? n : budget, sinks, recent;
    int nc = 0, m, nk = 0;
    scdb_evict_decision *d;
    scdb_err rc;

    scdb_evict_mlp_protect_choice(mlp, budget, smp->win_pick - 1, &sinks, &recent);

    if (sinks > cap) sinks = cap;
    if (recent > cap - sinks) recent = cap - sinks;
    m = cap - sinks - recent;
    int nd = m;          /* slots the draw records: kept (m) or evicted */
    if (smp->draw_evicted) nd = (n - recent - sinks) - m;
    if (nd < 0) nd = 0;
    if (smp->n_dec == smp->cap_dec) {
        int nc2 = smp->cap_dec ? 2 * smp->cap_dec : 16;
        scdb_evict_decision *g = realloc(smp->dec, (size_t)nc2 * sizeof *g);
        if (!g) return SCDB_ENOMEM;
        smp->dec = g;
        smp->cap_dec = nc2;
    }
    d = &smp->dec[smp->n_dec];
    memset(d, 0, sizeof *d);
    d->x = malloc((size_t)n * mlp->n_in * sizeof *d->x);
    d->s = malloc((size_t)n * sizeof *d->s);
    d->order = malloc((size_t)(nd > 0 ? nd : 1) * sizeof *d->order);
    if (mlp->pool > 1) d->arg = malloc((size_t)n * sizeof *d->arg);
    if (!d->x || !d->s || !d->order || (mlp->pool > 1 && !d->arg)) {
        free(d->x); free(d->s); free(d->order); free(d->arg);
        return SCDB_ENOMEM;
    }
    smp->n_dec++;
    d->step = step;
    d->n = n;
    d->sinks = sinks;
    d->recent = recent;
    d->m = nd;
    d->evicted = smp->draw_evicted != 0;
    if ((rc = scdb_evict_mlp_score_acc(mlp, acc, budget, d->arg ? w->scores : d->s, d->x)))
        return rc;
    if (d->arg) scdb_evict_maxpool(w->scores, n, mlp->pool, d->s, d->arg);
    d->scale = smp->tau > 0.0f ? 1.0f / smp->tau : 1.0f;
    if (smp->rel_tau && n - recent > sinks + 1) {
        double mu = 0.0, var = 0.0;
        int nc0 = n - recent - sinks;
        for (int j = sinks; j < n - recent; j++) mu += d->s[j] / nc0;
        for (int j = sinks; j < n - recent; j++) var += (d->s[j] - mu) * (d->s[j] - mu) / nc0;
        if (var > 1e-20) d->scale /= (float)sqrt(var);
    }
    if (d->scale != 1.0f)
        for (int j = 0; j < n; j++) d->s[j] *= d->scale;
    if (d->evicted)
        for (int j = 0; j < n; j++) d->s[j] = -d->s[j];
    for (int j = sinks; j < n - recent; j++) {
        double u = smp->no_noise ? 0.5 : scdb_evict_urand(&smp->rng);
        w->pert[j] = smp->no_noise ? d->s[j] : d->s[j] - (float)log(-log(u));
        w->cand[nc++] = j;
    }
    if ((rc = scdb_evict_rank(w->pert, w->cand, nc))) return rc;
    /* kept draw: the first m of the perturbed order are kept; evicted draw
     * (d->s negated): the first nc - m are evicted, the rest kept */
    memcpy(d->order, w->cand, (size_t)nd * sizeof *d->order);
    for (int j = 0; j < sinks; j++) w->keep[nk++] = j;
    for (int j = 0; j < m; j++) w->keep[nk++] = w->cand[d->evicted ? nc - m + j : j];
    for (int j = n - recent; j < n; j++) w->keep[nk++] = j;
    qsort(w->keep, (size_t)nk, sizeof *w->keep, cmp_int);
    *n_keep = nk;
    return scdb_evict_compact(kv, acc, w->keep, nk, NULL);
}

/* ------------------------------------------------------------ student */

/* Running sums of one student run. */
typedef struct step_sums {
    double kl, nll, policy_s, model_s;
    int agree, evictions;
} step_sums;

/* Continuation step t of a student holding (kv, acc): evict first if t is
 * an eviction step and the cache is over budget (policy p, or the sampler),
 * then decode t[P + t] and score it against the teacher. */
static scdb_err student_step(scdb_evict_window *w, scdb_kv_cache *kv, scdb_evict_acc *acc,
                             const scdb_evict_policy *p, scdb_evict_sampler *smp, int need_acc,
                             int budget, int every, int t, float *kl_step, step_sums *r)
{
    scdb_err rc;
    scdb_capture cap = {0};
    cap.probs = w->probs;
    cap.probs_slots = w->cap;
    if (t % every == 0 && kv->n > budget) {
        double t0 = cpu_s();
        int nk, before = kv->n;
        if (smp) rc = sample_evict(w, kv, acc, smp, budget, t, &nk);
        else rc = scdb_evict_run(p, kv, need_acc ? acc : NULL, budget, NULL, &nk);
        if (rc) return rc;
        if (w->age_hist && !smp && nk < before) {
            /* per-head sets: every set's kept slots, each set weighing 1 / K */
            const int K = need_acc ? scdb_evict_acc_n_sets(acc) : 1;
            const int32_t *hp = K > 1 ? scdb_evict_acc_head_pos(acc) : NULL;
            for (int k = 0; k < K; k++) {
                const int32_t *pk = hp ? hp + (size_t)k * acc->capacity : kv->pos;
                for (int i = 0; i < kv->n; i++) {
                    int age = pk[kv->n - 1] - pk[i], bin = 0;
                    while (age > 0 && bin < w->age_bins - 1) { age >>= 1; bin++; }
                    w->age_hist[bin] += 1.0 / K;
                }
            }
        }
        r->evictions += nk < before;
        r->policy_s += cpu_s() - t0;
    }
    double t1 = cpu_s();
    if ((rc = scdb_model_forward(w->m, w->tok + w->P + t, NULL, 1, kv, w->logits,
                                 need_acc ? &cap : NULL)))
        return rc;
    double t2 = cpu_s();
    r->model_s += t2 - t1;
    if (need_acc) {
        if ((rc = scdb_evict_acc_update(acc, kv, w->probs, w->cap, 1))) return rc;
        r->policy_s += cpu_s() - t2;
    }
    scdb_k_log_softmax_cpu(w->logits, w->V, w->lp);
    const float *tp = w->teacher_lp + (size_t)t * w->V;
    double k = 0.0;
    for (int v = 0; v < w->V; v++) k += exp((double)tp[v]) * ((double)tp[v] - w->lp[v]);
    if (k < 0.0) k = 0.0;
    if (kl_step) *kl_step = (float)k;
    r->kl += k;
    r->agree += argmax(w->lp, w->V) == w->teacher_top[t];
    r->nll -= w->lp[w->tok[w->P + t + 1]];
    return SCDB_OK;
}

scdb_err scdb_evict_window_run(scdb_evict_window *w, const scdb_evict_policy *p,
                               scdb_evict_sampler *smp, int budget, int every,
                               float *kl_steps, scdb_evict_eval *out)
{
    scdb_err rc;
    scdb_evict_eval r = {0};
    step_sums sum = {0};
    int need_acc;

    if (!w || !out || (!p == !smp) || budget < 1 || every < 1) return SCDB_EINVAL;
    need_acc = smp || scdb_evict_policy_needs_acc(p);
    /* the accumulators' layout the policy asks for at this budget (a
     * sampler draws one keep set) */
    const int heads = p && scdb_evict_policy_per_head(p, budget, w->cap);
    scdb_evict_acc *acc = heads ? w->acch : w->acc;
    if ((rc = scdb_evict_cache_copy(w->cache, w->cache0))) return rc;
    if (need_acc && (rc = scdb_evict_acc_copy(acc, heads ? w->acc0h : w->acc0))) return rc;
    w->t_student = 0;
    for (int t = 0; t < w->T; t++)
        if ((rc = student_step(w, w->cache, acc, p, smp, need_acc, budget, every, t,
                               kl_steps ? kl_steps + t : NULL, &sum)))
            return rc;
    r.steps = w->T;
    r.kl = sum.kl / w->T;
    r.top1 = (double)sum.agree / w->T;
    r.nll = sum.nll / w->T;
    r.nll_full = w->nll_full;
    r.policy_s = sum.policy_s;
    r.model_s = sum.model_s;
    r.evictions = sum.evictions;
    *out = r;
    return SCDB_OK;
}

scdb_err scdb_evict_window_reset(scdb_evict_window *w)
{
    scdb_err rc;
    if (!w) return SCDB_EINVAL;
    if ((rc = scdb_evict_cache_copy(w->cache, w->cache0)) || (rc = scdb_evict_acc_copy(w->acc, w->acc0)))
        return rc;
    w->t_student = 0;
    return SCDB_OK;
}

scdb_err scdb_evict_window_steps(scdb_evict_window *w, const scdb_evict_policy *p, int budget,
                                 int every, int t_end, double *kl_sum)
{
    step_sums sum = {0};
    scdb_err rc;
    if (!w || !p || budget < 1 || every < 1 || t_end < w->t_student || t_end > w->T)
        return SCDB_EINVAL;
    if (scdb_evict_policy_per_head(p, budget, w->cap)) return SCDB_EMISMATCH;   /* one keep set */
    for (; w->t_student < t_end; w->t_student++)
        if ((rc = student_step(w, w->cache, w->acc, p, NULL, 1, budget, every, w->t_student, NULL,
                               &sum)))
            return rc;
    if (kl_sum) *kl_sum = sum.kl;
    return SCDB_OK;
}

scdb_err scdb_evict_window_branch(scdb_evict_window *w, scdb_evict_sampler *smp,
                                  const scdb_evict_policy *p, int budget, int every, int horizon,
                                  double *kl_mean)
{
    step_sums sum = {0};
    scdb_err rc;
    int t0 = w ? w->t_student : 0;
    if (!w || !p || !kl_mean || budget < 1 || every < 1 || horizon < 1 ||
        t0 + horizon > w->T)
        return SCDB_EINVAL;
    if (scdb_evict_policy_per_head(p, budget, w->cap)) return SCDB_EMISMATCH;   /* one keep set */
    if (!w->cache_b) {
        scdb_evict_acc_shape shape = {w->acc->n_layers, w->acc->n_heads, w->acc->n_kv_heads,
                                      w->cap, w->acc->window, 0};
        if ((rc = scdb_model_cache_new(w->m, w->cap, &w->cache_b)) ||
            (rc = scdb_evict_acc_new(&shape, &w->acc_b)))
            return rc;
    }
    if ((rc = scdb_evict_cache_copy(w->cache_b, w->cache)) ||
        (rc = scdb_evict_acc_copy(w->acc_b, w->acc)))
        return rc;
    /* the sampled eviction (if t0 is an eviction step and the cache is over
     * budget; smp NULL: p's own), then the deterministic policy for the
     * rest of the horizon */
    for (int t = t0; t < t0 + horizon; t++)
        if ((rc = student_step(w, w->cache_b, w->acc_b, t == t0 && smp ? NULL : p,
                               t == t0 ? smp : NULL, 1, budget, every, t, NULL, &sum)))
            return rc;
    *kl_mean = sum.kl / horizon;
    return SCDB_OK;
}

scdb_err scdb_evict_window_eval(scdb_evict_window *w, const scdb_evict_policy *p,
                                int budget, int every, float *kl_steps, scdb_evict_eval *out)
{
    if (!p) return SCDB_EINVAL;
    return scdb_evict_window_run(w, p, NULL, budget, every, kl_steps, out);
}
