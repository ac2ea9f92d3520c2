/* evict_internal.h — what the evict module's files share and nobody else
 * needs: the policy struct, the loader, ranking, cache copies, the MLP's
 * backward pass, the policy-gradient pieces.  The files call each other in
 * one direction: policy.c -> mlp.c -> inputs.c -> rank.c / the kernels;
 * episode.c and train_rl.c (offline) on top. */
#ifndef SCDB_EVICT_INTERNAL_H
#define SCDB_EVICT_INTERNAL_H

#include <math.h>
#include <string.h>

#include "evict.h"
#include "evict_train.h"

/* The per-slot loops of an eviction (the network's activations, the
 * per-head scorer's logs) are maps over contiguous arrays; on x86-64 Linux
 * with GCC their functions are also built for AVX2, picked at load time
 * where the CPU has it, as the kernels' fold is (kernels/cpu/acc_ops.c):
 * twice the lanes, the same bits (maps only, and ISO C contracts no
 * multiply-add). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__has_attribute)
#if __has_attribute(target_clones)
#define SCDB_EVICT_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef SCDB_EVICT_CLONES
#define SCDB_EVICT_CLONES
#endif

/* A policy file's metadata pairs (mlp.c reads them, policy.c answers
 * scdb_evict_policy_meta). */
typedef struct scdb_evict_meta {
    char **keys, **vals;
    int n;
} scdb_evict_meta;
void scdb_evict_meta_free(scdb_evict_meta *md);

struct scdb_evict_policy {
    scdb_evict_kind kind;
    scdb_evict_mlp *mlp;         /* LEARNED only */
    scdb_evict_meta meta;        /* LEARNED from a file only */
};

/* The one loader of the policy file (mlp.c; errors as scdb_evict_policy_load):
 * the network and (meta may be NULL) its metadata. */
scdb_err scdb_evict_mlp_load(const char *path, scdb_evict_mlp **out, scdb_evict_meta *meta,
                             char *errbuf, size_t errlen);
/* scdb_evict_mlp_score_acc for the rows [lo, hi) only (scores[lo..hi),
 * x_out rows lo..hi); the inputs are still every slot's (ranks and per-cache
 * values are over all live slots), so each row scores what the full call
 * gives it.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_score_rows(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                   int lo, int hi, float *scores, float *x_out);
/* A learned policy's scores (max-pooled if its file says so) of the slots
 * [lo, hi) of a, into scores[lo..hi): the network on those rows and the
 * neighbours their pool reads (policy.c; what an eviction asks for the
 * candidates between the protected slots).  Errors of
 * scdb_evict_mlp_score_rows. */
scdb_err scdb_evict_learned_score(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                  int lo, int hi, float *scores);
/* A new network equal to m.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_clone(const scdb_evict_mlp *m, scdb_evict_mlp **out);

/* tanh(x) as a rational function (Eigen's fast tanh: odd degree-13 over
 * even degree-6 polynomial, inputs clamped to +-7.9053; within a few float
 * ulps of tanhf).  Branch-free, so loops over it vectorise; the network
 * calls it, not libm (tanhf was 65% of a learned policy's scoring).  The
 * accumulators' log is kernels/cpu/acc_ops.c's. */
static inline float scdb_evict_tanh(float x)
{
    const float c = 7.90531110763549805f;
    /* the clamp on the bits: |x| as an unsigned integer orders as the float
     * does, and an integer min is one instruction, where fminf / fmaxf are
     * libm calls and float compares stay branches at -O2: either stops the
     * loops vectorising.  The same value as fminf(fmaxf(x, -c), c) for every
     * number; NaN clamps to +-c */
    uint32_t ix, cb;
    float v;
    memcpy(&ix, &x, sizeof ix);
    memcpy(&cb, &c, sizeof cb);
    uint32_t ax = ix & 0x7fffffffu;
    ax = ax < cb ? ax : cb;
    ix = (ix & 0x80000000u) | ax;
    memcpy(&v, &ix, sizeof v);
    float v2 = v * v;
    float p = -2.76076847742355e-16f;
    p = p * v2 + 2.00018790482477e-13f;
    p = p * v2 + -8.60467152213735e-11f;
    p = p * v2 + 5.12229709037114e-08f;
    p = p * v2 + 1.48572235717979e-05f;
    p = p * v2 + 6.37261928875436e-04f;
    p = p * v2 + 4.89352455891786e-03f;
    p = p * v;
    float q = 1.19825839466702e-06f;
    q = q * v2 + 1.18534705686654e-04f;
    q = q * v2 + 2.26843463243900e-03f;
    q = q * v2 + 4.89352518554385e-03f;
    return p / q;
}

/* A learned policy's protected counts at this budget before clamping:
 * *sinks = m->sinks, *recent = max(m->recent, floor(m->recent_frac * budget)). */
void scdb_evict_mlp_protect(const scdb_evict_mlp *m, int budget, int *sinks, int *recent);
/* The same with the window head's choice `choice` (version 4; out of range:
 * the head's argmax at this budget). */
void scdb_evict_mlp_protect_choice(const scdb_evict_mlp *m, int budget, int choice, int *sinks,
                                   int *recent);

/* Sort idx[0..n) by scores[idx], highest first, ties: higher index first.
 * SCDB_ENOMEM.  (rank.c: a radix sort where idx is monotone and no score
 * is NaN; otherwise, and as scdb_evict_rank_ref, a merge sort.) */
scdb_err scdb_evict_rank(const float *scores, int *idx, int n);
scdb_err scdb_evict_rank_ref(const float *scores, int *idx, int n);

/* Accumulate into grad (n_params floats) d(sum_i dscore[i] * score_i)/dparams
 * for n rows of standardised inputs x[n][m->n_in]. */
void scdb_evict_mlp_backward(const scdb_evict_mlp *m, const float *x, int n,
                             const float *dscore, float *grad);

/* dst := src, slots [0, src->n) of every layer (same shape, dst capacity
 * large enough).  SCDB_EINVAL, SCDB_ESHAPE. */
scdb_err scdb_evict_cache_copy(scdb_kv_cache *dst, const scdb_kv_cache *src);

/* One sampled eviction, recorded for the policy gradient. */
typedef struct scdb_evict_decision {
    int step;            /* continuation step it preceded */
    int n;               /* live slots before eviction */
    int sinks, recent;   /* protected: [0, sinks) and [n - recent, n) */
    int m;               /* slots drawn from the candidates [sinks, n - recent) */
    float *x;            /* [n][mlp->n_in] standardised MLP inputs */
    float *s;            /* [n] scores / tau the draw used (pooled if the MLP pools) */
    int *arg;            /* [n] slot each pooled score came from; NULL: no pooling */
    int *order;          /* [m] drawn slots, in draw order */
    int evicted;         /* 1: s holds -score / tau and order the m slots drawn
                          * for eviction (the kept ones are the rest) */
    float scale;         /* s = (evicted ? -1 : 1) * scale * score: 1 / tau, or
                          * 1 / (tau * spread) with a relative temperature */
} scdb_evict_decision;

/* Training hook for scdb_evict_window_run: Gumbel-perturbed top-B from the
 * MLP instead of a policy's deterministic top-B, with every decision kept. */
typedef struct scdb_evict_sampler {
    const scdb_evict_mlp *mlp;
    float tau;           /* Gumbel noise scale: draws from PL(scores / tau); 0 = 1 */
    uint64_t rng;
    int draw_evicted;    /* 1: draw the evicted slots from PL(-scores / tau)
                          * instead of the kept ones from PL(scores / tau) */
    int rel_tau;         /* 1: tau is in units of the candidates' score spread
                          * (standard deviation), so the draws stay as close to
                          * the deterministic top-B whatever the network's scale */
    int win_pick;        /* 0: the window head's own choice (or recent_frac);
                          * c + 1: its choice c (the trainer's enumeration) */
    int no_noise;        /* 1: no Gumbel noise: the deterministic top-B under
                          * the window win_pick sets (still recorded) */
    int n_dec, cap_dec;
    scdb_evict_decision *dec;
} scdb_evict_sampler;

void scdb_evict_sampler_clear(scdb_evict_sampler *s);   /* frees the decisions */

/* scdb_evict_window_eval with either a policy or a sampler (exactly one). */
scdb_err scdb_evict_window_run(scdb_evict_window *w, const scdb_evict_policy *p,
                               scdb_evict_sampler *smp, int budget, int every,
                               float *kl_steps, scdb_evict_eval *out);

/* Plackett-Luce log-probability of decision d's drawn ordered set and its
 * gradient: ds[j] += wlp * d log p / d s_j + went * d H / d s_j, where H is
 * the entropy of the first stage (softmax over the candidates); *ent = H.
 * scratch_inv: room for d->m doubles; drawn: room for d->n bytes.  Returns
 * log p.  (pg.c) */
double scdb_evict_pl_grad(const scdb_evict_decision *d, float wlp, float went, float *ds,
                          double *ent, double *scratch_inv, char *drawn);

/* The student as a resumable run (training, evict/train_rl.c).
 * scdb_evict_window_reset: the student back to the prefilled state, at step 0.
 * scdb_evict_window_steps: decode the student deterministically under p
 * (learned or any policy reading the accumulators) up to step t_end
 * (exclusive); *kl_sum (may be NULL) gets the KL summed over those steps.
 * scdb_evict_window_branch: from the student's current step t, on a copy
 * (the student is unchanged): evict with the sampler at t (if t is an
 * eviction step and the cache is over budget; the draw is recorded in smp;
 * smp NULL: p's own deterministic eviction, the imitation's branches),
 * then decode `horizon` steps under p; *kl_mean = the mean KL of those
 * steps.  SCDB_EINVAL (arguments, t_end behind the student or past T,
 * t + horizon past T), SCDB_ENOMEM, model errors. */
scdb_err scdb_evict_window_reset(scdb_evict_window *w);
scdb_err scdb_evict_window_steps(scdb_evict_window *w, const scdb_evict_policy *p, int budget,
                                 int every, int t_end, double *kl_sum);
scdb_err scdb_evict_window_branch(scdb_evict_window *w, scdb_evict_sampler *smp,
                                  const scdb_evict_policy *p, int budget, int every, int horizon,
                                  double *kl_mean);

/* The trainer's per-state advantages (train_rl.c): A[k] = (R[k] - mean of
 * the other K - 1 rewards) / sd(R), 0 where sd(R) <= 1e-9; returns sd(R)
 * (population), *mean_out (may be NULL) = mean(R).  K >= 2. */
double scdb_evict_loo_advantages(const double *R, int K, double *A, double *mean_out);

/* Adam (pg.c): one step of size lr on p from gradient g; m, v: n zeros
 * at the start, t: 0. */
typedef struct scdb_evict_adam {
    float *m, *v;
    size_t n;
    int t;
} scdb_evict_adam;
void scdb_evict_adam_step(scdb_evict_adam *a, float *p, const float *g, float lr);

/* The prefilled state, for feature statistics; the student's current
 * state (scdb_evict_window_steps), for the imitation's states. */
const scdb_evict_acc *scdb_evict_window_acc(const scdb_evict_window *w);
const scdb_evict_acc *scdb_evict_window_student_acc(const scdb_evict_window *w);
/* The prefilled state's per-head accumulators (the gate's input). */
const scdb_evict_acc *scdb_evict_window_acc_heads(const scdb_evict_window *w);

/* The network on rows of standardised inputs x[n][m->n_in] at budget B
 * (what scdb_evict_mlp_score_rows runs after gathering; the skip
 * included): scores[n], before any pooling.  SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_forward_x(const scdb_evict_mlp *m, const float *x, int n, int budget,
                                  float *scores);
/* One row of every input (scdb_evict_inputs' [SCDB_EVICT_N_ALL_INPUTS])
 * gathered into the network's standardised x[m->n_in]. */
void scdb_evict_mlp_gather(const scdb_evict_mlp *m, const float *all, float *x);

/* The per-head scorer's fit (train_heads.c): evolution strategies on full
 * runs; net->heads gets the best scorer and its split (evict_train.h),
 * res its figures.  models [o->n_models], tok / vtok the corpora's train /
 * val tokens.  SCDB_EINVAL (options), SCDB_ENOMEM, model errors. */
struct scdb_model;
scdb_err scdb_evict_train_heads(const scdb_evict_rl_opts *o, struct scdb_model *const *models,
                                const int32_t *const *tok, const int32_t *const *vtok,
                                scdb_evict_mlp *net, scdb_evict_rl_result *res, char *errbuf,
                                size_t errlen);

/* The per-head scorer's options (heads_*, and prefill / steps for
 * half-length windows) in range: SCDB_OK, or SCDB_EINVAL with errbuf
 * saying so.  scdb_evict_train_rl checks them before it trains anything, so
 * a bad one costs no network training first. */
scdb_err scdb_evict_heads_opts_check(const scdb_evict_rl_opts *o, char *errbuf, size_t errlen);

/* The split for a scorer scoring by_budget[b] (x the best heuristic) at
 * validation budget fr[b] (nb <= 4, fractions of the capacity) against the
 * network's net[b]: the largest validation budget up to which (every
 * smaller one included) the scorer is better, moved half-way (in log) to
 * the next (at the largest, that budget: nothing above it was measured);
 * 0 if the scorer is worse at the smallest; at most cap.  *combined (may
 * be NULL): the geometric mean over the budgets of what the file would
 * score (the scorer up to the split, the network above). */
float scdb_evict_heads_split(const double *fr, int nb, const double *by_budget, const double *net,
                             double cap, double *combined);

/* Uniform double in [0, 1) from a xorshift state. */
double scdb_evict_urand(uint64_t *s);

#endif
