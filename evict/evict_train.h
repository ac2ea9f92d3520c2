/*
 * evict_train.h — the offline half of evict/ (evict.h is the runtime half):
 * the learned policy's network and its inputs, the teacher / student
 * measurement protocol `scdb bench evict` and training share, the trainer
 * (`scdb train-policy`) and the domain suite.  Tools, benches and tests
 * include it; the broker and libscdb need only evict.h.
 *
 * Learned policy (DistillCache)
 * -----------------------------
 * score = MLP(x), x = the standardised inputs the network reads, two tanh
 * hidden layers, linear output.  Version 1-2 networks read
 * [log(alpha+1e-3), log(vnorm+1e-6), log(sigma+1e-6), ent, log(1-pos+1e-3),
 * log(mass+1e-6), log(budget)]; version 3 networks any subset of 18 inputs
 * (SCDB_EI_*, evict/inputs.c) that adds scale-free ones: the slot's age
 * and its rank by each heuristic's signal, both relative to the budget
 * (log((rank + 1) / B) < 0: that heuristic would keep the slot), the V norm
 * standardised within the cache, the mean attention over the slot's life,
 * and two per-cache values.  They mean the same at every budget, cache
 * length, model and text, which is what a policy must generalise over.
 * The budget (in slots, the same for every slot of one eviction) lets one
 * network rank differently under a loose and a tight budget.  The protected
 * recent window is max(recent, floor(recent_frac * budget)) slots, so that
 * it can scale with the budget as H2O's and StreamingLLM's do; in a version-4
 * file a small head learned with the network picks that fraction per budget
 * (scdb_evict_mlp_window).  Optionally
 * (the file's `pool`, odd, 1 = off) the scores are then max-pooled along
 * the slots as SnapKV pools its attention, so that the neighbours of an
 * important token are kept with it.  Weights, the standardisation, the
 * inputs, the pool kernel and the protected counts live in a safetensors
 * file (FORMATS.md).  Training: scdb_evict_train_rl (train_rl.c; what
 * `scdb train-policy` runs) is an optional imitation warm start (the
 * network fitted to the kept sets of the candidate policies that do best
 * per budget band: the shipped file) followed by REINFORCE over several
 * models and training domains with K Plackett-Luce draws of the evicted
 * set per state, reward -KL(full || evicted) per teacher-forced step, a
 * leave-one-out baseline over the K draws and an entropy bonus, from
 * random weights (the Plackett-Luce gradient and Adam: pg.c).
 *
 * Who calls whom (no cycle): policy.c (policies, evict.h) -> mlp.c (the
 * network and the one loader of its file) -> inputs.c (features, inputs) ->
 * rank.c and the kernels; episode.c (protocol) and train_rl.c (trainer)
 * call those.
 */
#ifndef SCDB_EVICT_TRAIN_H
#define SCDB_EVICT_TRAIN_H

#include "evict.h"

#define SCDB_EVICT_N_INPUTS 7                /* a version 1-2 MLP's: the features + log budget */
#define SCDB_EVICT_IN_BUDGET 6               /* index of log budget among the inputs */

/* Every input a learned policy can read (evict/inputs.c computes them from
 * the accumulators at an eviction; a version 3 policy file names the ones
 * its network reads, in order; versions 1-2 read the first seven).  "rank"
 * inputs are log((r + 1) / B), r = the slot's rank (0 = highest) among the
 * live slots by that signal and B the budget, so they mean the same at
 * every budget and cache length: below 0, the slot is within the top B by
 * that signal (the heuristic using it would keep it). */
enum {
    SCDB_EI_ALPHA = 0,   /* log(alpha + 1e-3)                                       */
    SCDB_EI_VNORM,       /* log(vnorm + 1e-6)                                        */
    SCDB_EI_SIGMA,       /* log(sigma + 1e-6)                                        */
    SCDB_EI_ENT,         /* ent                                                      */
    SCDB_EI_POS,         /* log(1 - pos + 1e-3)                                      */
    SCDB_EI_MASS,        /* log(mass + 1e-6)                                         */
    SCDB_EI_BUDGET,      /* log(B)                                                   */
    SCDB_EI_AGE,         /* log((n - i) / B): slots from the newest, per budget slot */
    SCDB_EI_R_MASS,      /* rank by cumulative mass (H2O's ranking)                  */
    SCDB_EI_R_ALPHA,     /* rank by alpha (EMA attention share)                      */
    SCDB_EI_R_WIN,       /* rank by the window's attention (SnapKV's, unpooled)      */
    SCDB_EI_R_SNAPKV,    /* rank by SnapKV's score (window attention, max-pooled)    */
    SCDB_EI_R_LAST,      /* rank by the last query's attention (TOVA's ranking)      */
    SCDB_EI_VNORM_Z,     /* log vnorm standardised over the live slots               */
    SCDB_EI_LIFE,        /* log(mass * n / queries seen + 1e-3): mean share over life */
    SCDB_EI_R_LIFE,      /* rank by life                                             */
    SCDB_EI_CTX_ENT,     /* mean ent over the live slots (same for every slot)        */
    SCDB_EI_CTX_N,       /* log(n / B) (same for every slot)                          */
    SCDB_EVICT_N_ALL_INPUTS
};
#define SCDB_EVICT_MAX_INPUTS SCDB_EVICT_N_ALL_INPUTS
#define SCDB_EVICT_MAX_WIN 16                /* choices of a version-4 window head */

/* ------------------------------------------------------------ the per-head scorer
 * A version-6 policy file adds, beside the network (which decides in
 * sessions with one keep set), a scorer for keep sets per (layer, KV
 * group) (evict.h, "Keep sets per head"), used where the budget is at most
 * `split` of the cache's capacity.  For set k and its live slot j it reads
 * five per-slot values, each scale-free (shares in units of the uniform
 * 1/n, the age in budget slots):
 *
 *   snap  log(1e-3 + S_k[j] * n / ring_fill)   S = the set's SnapKV score
 *                                              (ring sum, max-pooled)
 *   last  log(1e-3 + last_k[j] * n)             TOVA's signal, the set's own
 *   life  log(1e-3 + mass_k[j] * n / age_j)     mean share over the slot's life
 *   age   log(age_j / B)                         age_j = newest position - pos + 1
 *   sink  1 for the set's first 4 slots, else 0
 *
 * and six values of the set itself: from its ring (the last window's
 * queries) the share of their attention on the newest 32 positions
 * (local), on the first 4 slots (sinks) and its normalised entropy; z =
 * log2(B / 64); its layer's depth (0 first .. 1 last); and 1.  The slot's score is sum_f (A[f] . ctx) x_f: the
 * weights of the five signals are linear in the set's context, so a local
 * head can rank by age, a retrieval head by its window attention, at a
 * small budget otherwise than at a larger one.  Its recent window is
 * floor(win_frac[c*] * B) slots (at least the newest), c* = argmax_c
 * D[c] . ctx (ties: the lower c); `sinks` first slots are protected in every
 * set.  Everything but the forms above and the choices offered is learned
 * (`scdb train-policy --heads`, train_heads.c). */
#define SCDB_EVICT_HEAD_FEATS 5
#define SCDB_EVICT_HEAD_CTX 6
#define SCDB_EVICT_HEAD_MAX_WIN 8
#define SCDB_EVICT_GATE_N 8

typedef struct scdb_evict_heads {
    int on;                                    /* 1: the file has one (version 6) */
    float split;                               /* per-head sets at budget <= split * capacity */
    int sinks;                                 /* protected first slots of every set */
    float a[SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX];      /* A [feat][ctx] */
    int n_win;                                 /* window choices (>= 1) */
    float win_frac[SCDB_EVICT_HEAD_MAX_WIN];   /* each a fraction of B in [0, 1) */
    float d[SCDB_EVICT_HEAD_MAX_WIN * SCDB_EVICT_HEAD_CTX];    /* D [choice][ctx] */
    /* The gate (optional): at a session's first eviction, per-head sets if
     * gate . g > 0 (g: scdb_evict_heads_gate_input), else one set for the
     * whole session, the network's; without a gate, per-head sets. */
    int has_gate;
    float gate[SCDB_EVICT_GATE_N];
    int force;                                 /* training: 1 one set, 2 per-head sets; 0: the gate */
} scdb_evict_heads;

/* Parameters the trainer searches: A then D (n_win rows); 30 + 6 per choice. */
static inline int scdb_evict_heads_n_params(const scdb_evict_heads *h)
{
    return SCDB_EVICT_HEAD_FEATS * SCDB_EVICT_HEAD_CTX + h->n_win * SCDB_EVICT_HEAD_CTX;
}

/* dst = src's scorer offering the window choices fracs[n] instead (every
 * one of src's among them, each a fraction in [0, 1), n <= MAX_WIN): A
 * and the rows of the choices src has are copied; a new choice's row is
 * that of src's nearest choice with its constant lowered by margin > 0, so
 * dst decides exactly as src until a fit raises it.  SCDB_EINVAL, with
 * errbuf saying which choice is missing or out of range. */
scdb_err scdb_evict_heads_extend(const scdb_evict_heads *src, int n, const float *fracs,
                                 float margin, scdb_evict_heads *dst, char *errbuf,
                                 size_t errlen);

/* ------------------------------------------------------------ the MLP */

/* A learned policy's network, for training and tools.  Weights are
 * row-major [out][in] like nn.Linear. */
typedef struct scdb_evict_mlp {
    int hidden;                                /* width of both hidden layers */
    int n_in;                                  /* inputs read (7 for version 1-2 files) */
    int in_id[SCDB_EVICT_MAX_INPUTS];          /* which SCDB_EI_* input each one is */
    float *params;                             /* w1 b1 w2 b2 w3 b3, contiguous */
    size_t n_params;
    float in_mean[SCDB_EVICT_MAX_INPUTS], in_std[SCDB_EVICT_MAX_INPUTS];
    float *w1, *b1;                            /* [hidden][n_in], [hidden] */
    float *w2, *b2;                            /* [hidden][hidden], [hidden] */
    float *w3, *b3;                            /* [1][hidden], [1] */
    int sinks, recent;                         /* protected counts */
    float recent_frac;                         /* recent >= recent_frac * budget, in [0, 1) */
    int pool;                                  /* max-pool kernel over slots (odd; 1: none) */
    /* The learned recent window (version 4; n_win 0: recent_frac decides, as
     * in versions 1-3).  A small head over n_win choices of the window:
     * logit_c(B) = win_w[2c] + win_w[2c + 1] * z, z = log2(B / 64); the
     * policy protects recent = max(recent, floor(win_frac[c*] * B)) slots,
     * c* = argmax_c logit_c(B) (ties: the lower c), so how much of the budget
     * goes to recency is a function of the budget the trainer learns. */
    int n_win;
    float win_frac[SCDB_EVICT_MAX_WIN];        /* each choice's window, a fraction of B in [0, 1) */
    float win_w[2 * SCDB_EVICT_MAX_WIN];
    /* The budget-modulated skip (version 5; skip 0: none): the score gains
     * sum_k (skip_w[2k] + skip_w[2k + 1] z) x_k, x the standardised inputs,
     * z = log2(B / 64): a linear ranking by the inputs whose weights are a
     * function of the budget, next to the network, so one file can rank by
     * (say) SnapKV's signal at small budgets and as the network does at
     * large ones without the network itself having to switch. */
    int skip;
    float skip_w[2 * SCDB_EVICT_MAX_INPUTS];
    scdb_evict_heads heads;                    /* version 6: the per-head scorer */
} scdb_evict_mlp;

/* 1 if m decides with keep sets per head at this budget in a cache of this
 * capacity (it has a per-head scorer and budget <= split * capacity). */
int scdb_evict_mlp_heads_at(const scdb_evict_mlp *m, int budget, int capacity);
/* The per-head scorer of m on per-head accumulators a: scores [K][a->n],
 * *sinks, recent [K] (as scdb_evict_heads_scores).  ctx (NULL or
 * [K][SCDB_EVICT_HEAD_CTX]) gets each set's context.  SCDB_EINVAL (m has
 * none, a not per-head), SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_heads_score(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                    float *scores, int *sinks, int *recent);
/* What the gate reads, from per-head accumulators at budget B: over the
 * sets' contexts, the mean share of the window's attention on the newest
 * 32 positions, the mean share on the first 4 slots, the mean normalised
 * entropy, the spread (standard deviation) of the first and of the
 * entropy, the later half of the layers' mean local share minus the
 * earlier half's, z = log2(B / 64), 1.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_heads_gate_input(const scdb_evict_acc *a, int budget, float *g);
/* 1 if m's scorer takes a session's first eviction on a (its gate, or
 * force; no gate: always). */
int scdb_evict_mlp_heads_choose(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget);
scdb_err scdb_evict_heads_score_ctx(const scdb_evict_heads *h, const scdb_evict_acc *a,
                                    int budget, float *scores, int *sinks, int *recent,
                                    float *ctx);

/* The skip's term for n rows of standardised inputs x[n][m->n_in] at
 * budget B, added to scores[n] (nothing if m has no skip). */
void scdb_evict_mlp_add_skip(const scdb_evict_mlp *m, const float *x, int n, int budget,
                             float *scores);

/* The window head at budget B: returns c* (-1 if the network has no head);
 * probs (NULL or [n_win]) gets softmax_c logit_c(B); *z_out (may be NULL)
 * gets z = log2(B / 64). */
int scdb_evict_mlp_window(const scdb_evict_mlp *m, int budget, float *probs, float *z_out);

/* The fixed input transform of raw features (before standardisation):
 * x[0..SCDB_EVICT_N_FEATURES) from one row of scdb_evict_features. */
void scdb_evict_mlp_transform(const float *raw, float *x);


/* Allocate and initialise with a seed (small uniform weights, identity
 * standardisation), reading the seven version-2 inputs.
 * SCDB_EINVAL (hidden outside 1..1024), SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_new(int hidden, uint64_t seed, scdb_evict_mlp **out);
/* The same reading inputs ids[0..n_in) (SCDB_EI_*, distinct).  SCDB_EINVAL
 * (hidden, n_in outside 1..SCDB_EVICT_MAX_INPUTS, an id out of range or
 * repeated), SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_new_inputs(int hidden, const int *ids, int n_in, uint64_t seed,
                                   scdb_evict_mlp **out);
/* "alpha", ..., "ctx_n" (the policy file's names); NULL if out of range. */
const char *scdb_evict_input_name(int id);
/* The id of an input name, -1 if unknown. */
int scdb_evict_input_parse(const char *name);
/* Every input of every live slot: x[a->n][SCDB_EVICT_N_ALL_INPUTS] (before
 * standardisation), from the accumulators, their raw features feats
 * (scdb_evict_features) and the budget.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_inputs(const scdb_evict_acc *a, const float *feats, int budget, float *x);
void scdb_evict_mlp_free(scdb_evict_mlp **m);
scdb_err scdb_evict_mlp_copy(scdb_evict_mlp *dst, const scdb_evict_mlp *src);

/* scores[i] = MLP(standardise([transform(feats[i]), log(max(budget, 1))]))
 * for n rows of raw features; x_out (NULL or [n][m->n_in]) receives the
 * standardised inputs.  Inputs beyond the first seven need the
 * accumulators (scdb_evict_mlp_score_acc); here they sit at their mean. */
void scdb_evict_mlp_score_budget(const scdb_evict_mlp *m, const float *feats, int n,
                                 int budget, float *scores, float *x_out);
/* The scores of every live slot of a at this budget, from all the inputs
 * the network reads (before any pooling); x_out as above.  SCDB_EINVAL,
 * SCDB_ENOMEM. */
scdb_err scdb_evict_mlp_score_acc(const scdb_evict_mlp *m, const scdb_evict_acc *a, int budget,
                                  float *scores, float *x_out);
/* The same with budget = n (a budget that holds every row). */
void scdb_evict_mlp_score(const scdb_evict_mlp *m, const float *feats, int n,
                          float *scores, float *x_out);

/* pooled[j] = max of s over slots [j - k/2, j + k/2] within [0, n); arg[j]
 * (may be NULL) = the slot the maximum came from (ties: the lower slot).
 * k odd >= 1; pooled must not alias s. */
void scdb_evict_maxpool(const float *s, int n, int k, float *pooled, int *arg);

/* Write a policy file (version 2 if the network reads the seven version-2
 * inputs in order, else version 3, whose `features` names its inputs): the
 * weights plus metadata (format,
 * version, features, activation, sinks, recent, recent_frac, pool) and the
 * caller's extra pairs (keys[i] -> vals[i],
 * n_extra of them).  Errors of the safetensors writer. */
scdb_err scdb_evict_mlp_save(const scdb_evict_mlp *m, const char *path,
                             const char *const *keys, const char *const *vals,
                             int n_extra);

/* A learned policy wrapping a copy of m.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_policy_from_mlp(const scdb_evict_mlp *m, scdb_evict_policy **out);
/* The network of a learned policy (NULL otherwise). */
const scdb_evict_mlp *scdb_evict_policy_mlp(const scdb_evict_policy *p);

/* ------------------------------------------------------------ protocol
 * The measurement protocol shared by training and `scdb bench evict`:
 *
 *   tokens t[0 .. P+T]          (P + T + 1 tokens, positions 0 .. P+T-1)
 *   prefill t[0..P) into an empty cache (the features see all P queries);
 *   teacher: the full cache decodes t[P], t[P+1], ... t[P+T-1] teacher-forced
 *            and gives P_t, the next-token distribution after t[P+t];
 *   student: a copy of the prefilled cache; before step t (t = 0, C, 2C, ...)
 *            if it holds more than B slots the policy evicts down to B; then
 *            it decodes t[P+t] the same way and gives Q_t.
 *   per step: KL(P_t || Q_t) (nats), top-1 agreement argmax P_t == argmax Q_t,
 *            and -log Q_t(t[P+t+1]) (perplexity = exp of its mean).
 *
 * So right after each eviction the cache holds B slots, and it grows by at
 * most C - 1 before the next one (the query of a step attends over at most
 * B + C slots, itself included). */

typedef struct scdb_evict_window scdb_evict_window;
struct scdb_model;   /* model.h */

typedef struct scdb_evict_eval {
    int steps;           /* T */
    double kl;           /* mean KL(full || evicted), nats */
    double top1;         /* fraction of steps whose argmax agrees */
    double nll;          /* mean -log Q_t(next token) */
    double nll_full;     /* the same under the full cache */
    double policy_s;     /* CPU seconds in accumulator updates + score/select/compact */
    double model_s;      /* CPU seconds in the student's forward passes */
    int evictions;       /* eviction calls that removed slots */
} scdb_evict_eval;

/* Prefill tokens[0..prefill) (features accumulated), run the full-cache
 * teacher over the `steps` continuation tokens and keep its distributions.
 * tokens has prefill + steps + 1 entries; prefill + steps <= max_seq_len.
 * SCDB_EINVAL, SCDB_ERANGE (too long for the model), SCDB_ENOMEM, model
 * errors. */
scdb_err scdb_evict_window_new(const struct scdb_model *m, const int32_t *tokens,
                               int prefill, int steps, scdb_evict_window **out);
void scdb_evict_window_free(scdb_evict_window **w);
/* Teacher statistics: mean CPU seconds per decode step (full cache, no
 * capture; the calling thread's CPU time) and mean NLL of the continuation. */
double scdb_evict_window_step_s(const scdb_evict_window *w);
double scdb_evict_window_nll_full(const scdb_evict_window *w);
/* After each eviction of a deterministic run (scdb_evict_window_eval and
 * the student's steps), add every kept slot to hist[bin] by its age a (the
 * newest slot's position minus its own): bin 0 for a = 0, bin k for
 * 2^(k-1) <= a < 2^k, the last bin for everything older.  hist NULL or
 * bins < 1: stop recording. */
void scdb_evict_window_age_hist(scdb_evict_window *w, double *hist, int bins);

/* Run the student protocol with policy p at budget B, evicting every
 * `every` steps.  kl_steps (NULL or [steps]) gets the per-step KL.
 * SCDB_EINVAL (budget < 1, every < 1), SCDB_ENOMEM, model errors. */
scdb_err scdb_evict_window_eval(scdb_evict_window *w, const scdb_evict_policy *p,
                                int budget, int every, float *kl_steps,
                                scdb_evict_eval *out);

/* ------------------------------------------------------------ training over domains
 * scdb_evict_train_rl (train_rl.c has the derivation): REINFORCE over
 * several models and training domains, with K Plackett-Luce draws of the
 * evicted set per state (the student's cache at an eviction point, reached
 * by the deterministic policy), reward -KL to the full-cache teacher over
 * the next `horizon` steps, a leave-one-out baseline over the K draws and an
 * entropy bonus; starts from seeded random weights; validates on the
 * domains' val texts against the best heuristic per (model, domain,
 * budget). */

typedef struct scdb_evict_corpus {
    const char *name;                  /* the domain (logs, metadata) */
    const unsigned char *train;        /* episodes' windows come from here */
    size_t train_len;
    const unsigned char *val;          /* validation windows come from here */
    size_t val_len;
} scdb_evict_corpus;

typedef struct scdb_evict_rl_opts {
    const char *const *model_dirs;     /* models to train against (every episode draws one) */
    int n_models;
    const scdb_evict_corpus *corpora;  /* training domains (every episode draws one) */
    int n_corpora;
    double budget_lo, budget_hi;       /* episode budget: fraction of prefill + steps,
                                        * log-uniform in [lo, hi] */
    double val_budgets[4];             /* validation budgets (fractions) */
    int n_val_budgets;
    int updates;                       /* Adam steps */
    int batch;                         /* episodes per step */
    int states;                        /* branch points per episode: the first eviction
                                        * and states - 1 random later ones */
    int samples;                       /* K draws per state (2..64) */
    int horizon;                       /* steps of KL after a later branch (0: to the
                                        * end of the window) */
    int horizon_first;                 /* the same after the first eviction (0: to the
                                        * end: the prefill -> B eviction's effect
                                        * lasts the whole window) */
    int prefill, steps, every;         /* the protocol (evict.h) */
    float lr, entropy, tau;            /* Adam step (cosine-decayed to 10%), entropy
                                        * bonus, Plackett-Luce temperature */
    float tau_end;                     /* tau at the last step, annealed geometrically
                                        * from tau (0: tau throughout) */
    int rel_tau;                       /* 1: tau in units of the candidates' score
                                        * spread, so the draws perturb the
                                        * deterministic top-B by the same amount
                                        * whatever the network's scale */
    int hidden;                        /* MLP width */
    int inputs[SCDB_EVICT_MAX_INPUTS]; /* SCDB_EI_* the network reads */
    int n_inputs;
    int sinks, recent;                 /* protected counts (hand-set structure) */
    float recent_frac;
    int pool;                          /* max-pool of the scores (odd; 1: none) */
    int n_win;                         /* > 0: learn the recent window (a version-4 head
                                        * over these choices; recent_frac is then only
                                        * where the head starts: its choice nearest
                                        * recent_frac has logit 1, the others 0) */
    float win_frac[SCDB_EVICT_MAX_WIN];
    float win_lr;                      /* the head's Adam step (cosine-decayed like lr) */
    float lr_sign;                     /* 1; -1 ascends the loss (the trainer test's
                                        * broken-gradient control) */
    int val_windows;                   /* per (model, domain) */
    int val_every;                     /* Adam steps between validations */
    double max_seconds;                /* stop after this long (0: no limit) */
    uint64_t seed;
    const scdb_evict_mlp *init;        /* start from this network (NULL: random) */
    const char *checkpoint;            /* NULL, or a policy file rewritten with every new
                                        * best network (a stopped run keeps its best) */
    const char *last;                  /* NULL, or a policy file the last network is written to
                                        * at the end (what training reached, best or not) */
    /* Imitation (a warm start before the REINFORCE updates; imit_rounds 0:
     * none).  Each round collects imit_episodes episodes: at their branch
     * states every candidate policy (the heuristics, the experts and their
     * window variants, heuristic signals under other protections, and from
     * round 2 the learner) evicts and runs the next `horizon` steps
     * (horizon_first after the first eviction); the learner then fits, for
     * imit_epochs passes over every state collected so far, the
     * KL-weighted top-m Plackett-Luce likelihood of the candidates' kept
     * sets (evict/train_rl.c, "imitation").  Round 1's episodes run a
     * random candidate, later rounds the learner (DAgger). */
    int imit_rounds;
    int imit_episodes;
    int imit_epochs;
    int imit_batch;                    /* states per Adam step */
    float imit_temp;                   /* candidate weights softmax(-log(KL / best KL) / temp) */
    float imit_state_weight;           /* 1: each state's own KLs; 0: their mean over the
                                        * states of its budget band; between: a mix */
    int imit_train;                    /* what imitation trains: 1 the network, 2 the skip,
                                        * 4 the window head (a sum; default 7; SCDB_EINVAL
                                        * if none of those the network has) */
    int head_runs;                     /* 1: after imitation, fit the window head to the
                                        * window the network does best under, per budget
                                        * band, in full runs on the imit_band_windows train
                                        * windows (SCDB_EINVAL without imitation rounds, band
                                        * windows or a head) */
    int skip;                          /* 1: give the network a budget-modulated skip
                                        * (version 5), starting at 0 */
    int imit_band_windows;             /* > 0: the band means from full runs (the
                                        * validation's protocol) of every candidate on this
                                        * many train windows at each band's budget instead */
    float imit_lr;
    int imit_val_every;                /* epochs between validations */
    const scdb_evict_mlp *experts[4];  /* networks offered as candidates (SCDB_EINVAL
                                        * without imitation rounds) */
    int n_experts;
    /* The per-head scorer (version 6; heads_gens 0: none), fitted after the
     * network (train_heads.c): evolution strategies on full runs of the
     * protocol.  A pool of heads_pool training episodes (a model, a
     * domain's train window, a budget log-uniform in [heads_lo, heads_hi])
     * is made up front with each episode's best heuristic KL; every
     * generation draws heads_episodes of them, evaluates heads_pairs
     * antithetic pairs theta +- sigma eps (and theta) on all of them, and
     * takes an Adam step along the rank-weighted noise towards lower mean
     * log(KL / best heuristic's KL).  Validation (the network's val
     * windows at every validation budget, the scorer deciding) every
     * heads_val_every generations; the best scorer is kept, and `split`
     * is set to the largest validation budget up to which the scorer
     * beats the network at every validation budget (none: no scorer). */
    int heads_gens;
    int heads_pairs;
    int heads_episodes;
    int heads_pool;
    float heads_sigma, heads_lr;
    double heads_lo, heads_hi;
    int heads_val_every;
    int heads_sinks;                   /* protected first slots of every set */
    int heads_n_win;                   /* window choices */
    float heads_win_frac[SCDB_EVICT_HEAD_MAX_WIN];
    int heads_init_zero;               /* 1: start from zeros (ties keep the newest); 0:
                                        * from SnapKV's per-set ranking with a quarter of
                                        * the budget protected */
    const scdb_evict_heads *heads_init; /* start from this scorer's A and D (its n_win must be
                                        * heads_n_win; NULL: heads_init_zero decides) */
    int heads_threads;                 /* workers evaluating a generation (>= 1) */
    int heads_gate;                    /* 1: after the search, fit the gate (the scorer or
                                        * the network at a session's first eviction) on the
                                        * pool; 0: no gate (the scorer below the split) */
    float heads_sign;                  /* 1; -1 ascends (the trainer test's control) */
    double heads_top1;                 /* w >= 0: the objective adds w log(disagreement /
                                        * the best heuristic's), 1 - top-1 each (0: KL only) */
    double heads_split_max;            /* the split is at most this, in (0, 1] (1: no
                                        * bound): where the scorer's per-set eviction
                                        * would cost more than the goal allows, the
                                        * network decides even if the scorer wins */
    double heads_short;                /* in [0, 1]: the share of training episodes on
                                        * half-length windows (prefill / 2, steps / 2),
                                        * budgets the same fractions of their length; > 0
                                        * also validates on val_windows half-length windows
                                        * per group beside the full ones (0: full only) */
    FILE *log;                         /* JSONL: references, one line per step and per validation */
    int verbose;
} scdb_evict_rl_opts;

/* Defaults (what the version-3 policy, in git history, was trained with; the
 * shipped file's command, an imitation run, is in data/policies/README.md):
 * budgets log-uniform in [0.09, 0.55], validation at 0.25 and 0.125, 800
 * steps of 2 episodes, 3 states x 8 draws, horizon 48 (the first
 * eviction's: the whole window), the bench's protocol (256 / 256 / 8), lr
 * 2e-3, entropy 0.01, tau 0.5 relative to the score spread (no annealing),
 * hidden 32, all 18 inputs, and the hand-set structure: sinks 4, recent
 * max(8, budget / 2), scores max-pooled over 5 slots; 4 validation windows
 * per (model, domain), validation every 50 steps, seed 1. */
void scdb_evict_rl_defaults(scdb_evict_rl_opts *o);

typedef struct scdb_evict_rl_result {
    int updates, episodes;             /* run */
    double val_kl_init, val_kl_best;   /* mean validation KL over (model, domain, budget) */
    double val_ratio_init, val_ratio_best;   /* geometric mean of KL / the best heuristic's */
    int best_update;                   /* 0: the initial network */
    double val_kl_heuristic[SCDB_EVICT_KIND_COUNT];   /* -1 where not run */
    double val_kl_best_heuristic;      /* mean over groups of the best heuristic's KL */
    double seconds;
    /* the per-head scorer (heads_gens > 0) */
    int heads_gens_run, heads_best_gen;
    double heads_ratio_init;                           /* the start's validation score, the scorer
                                                        * deciding at every validation budget */
    double heads_ratio_best;                           /* the kept scorer's, with the network above
                                                        * its split (what the file scores) */
    double heads_ratio_scorer;                         /* the kept scorer's, deciding everywhere */
    double heads_by_budget[4], net_by_budget[4];       /* per validation budget: score of the
                                                        * scorer and of the network */
    float heads_split;                                 /* what the file got (0: no scorer) */
    double heads_gate_acc;                             /* the gate's weighted accuracy on the pool */
    double heads_ratio_gated;                          /* validation with the gate (0: none) */
} scdb_evict_rl_result;

/* Train; *out gets the network with the best validation score.
 * SCDB_EINVAL (options), SCDB_ERANGE (a text shorter than one window, or
 * prefill + steps beyond a model's context), model load errors,
 * SCDB_ENOMEM. */
scdb_err scdb_evict_train_rl(const scdb_evict_rl_opts *o, scdb_evict_mlp **out,
                             scdb_evict_rl_result *res, char *errbuf, size_t errlen);

/* The kept set's age profile (what each policy keeps, by age, per budget):
 * val_windows windows of every (model, corpus)'s val text (o's models,
 * corpora, protocol and val_budgets), each policy run deterministically at
 * each budget, every eviction's kept slots counted by age
 * (scdb_evict_window_age_hist's bins); JSON on `json`: the bins, budgets,
 * and per policy its protected (sinks, recent) per budget, mean KL and the
 * profile (fractions per bin).  SCDB_EINVAL, SCDB_ERANGE (a val text
 * shorter than a window), SCDB_ENOMEM, SCDB_EIO, model errors. */
scdb_err scdb_evict_age_profile(const scdb_evict_rl_opts *o, const scdb_evict_policy *const *pols,
                                const char *const *labels, int n_pol, FILE *json, char *errbuf,
                                size_t errlen);

/* ------------------------------------------------------------ domain suite
 * The texts the eviction bench measures on and policy training trains on:
 * data/evict_suite/ (tools/evict_suite.py writes it; manifest.json records
 * the rule and every file).  Domains are split by name into seen ones
 * (train, val and eval texts; training uses train and validates on val) and
 * unseen ones (an eval text only; never trained on).  A file's portion is
 * fixed by its path: b = crc32(path) % 8, b < 2 eval, b == 2 val, else
 * train; within a portion files are in ascending crc32("order:" + path)
 * order, one chunk each, joined with '\n'. */

typedef enum scdb_evict_part {
    SCDB_EVICT_PART_TRAIN = 0,
    SCDB_EVICT_PART_VAL,
    SCDB_EVICT_PART_EVAL,
    SCDB_EVICT_N_PARTS
} scdb_evict_part;

typedef struct scdb_evict_suite_file {
    char *path, *package, *version;    /* source file and its Debian package */
    size_t offset, bytes;              /* the chunk taken from the (decompressed) file */
    size_t at;                         /* where the chunk starts in the text */
    uint32_t crc32;                    /* of the chunk */
} scdb_evict_suite_file;

typedef struct scdb_evict_suite_portion {
    int present;
    char *text_path;                   /* DIR/<domain>.<part>.txt */
    size_t bytes;
    uint32_t crc32;
    int candidates;                    /* files the rule put in this portion */
    int n_files;
    scdb_evict_suite_file *files;      /* in text order */
} scdb_evict_suite_portion;

typedef struct scdb_evict_suite_domain {
    char *name, *what;
    int seen;                          /* 1: a training domain */
    scdb_evict_suite_portion part[SCDB_EVICT_N_PARTS];
} scdb_evict_suite_domain;

typedef struct scdb_evict_suite {
    char *dir;                         /* the manifest's folder */
    int n_domains;
    scdb_evict_suite_domain *domains;  /* in manifest order */
} scdb_evict_suite;

/* "train", "val", "eval"; NULL if invalid. */
const char *scdb_evict_part_name(scdb_evict_part p);
/* crc32 (IEEE 802.3, zlib's) of n bytes. */
uint32_t scdb_evict_crc32(const void *data, size_t n);
/* The portion the rule puts a file in, from its path. */
scdb_evict_part scdb_evict_suite_part_of(const char *path);
/* The rule's order key within a portion: crc32("order:" + path). */
uint32_t scdb_evict_suite_order_key(const char *path);

/* Load a manifest (its texts are read on demand, next to it).
 * SCDB_EINVAL, errors of scdb_read_file, SCDB_EFORMAT (not a suite manifest
 * or a field missing / of the wrong type), SCDB_ENOMEM. */
scdb_err scdb_evict_suite_load(const char *manifest, scdb_evict_suite **out, char *errbuf,
                               size_t errlen);
void scdb_evict_suite_free(scdb_evict_suite **s);
/* Index of the domain called name, -1 if none. */
int scdb_evict_suite_find(const scdb_evict_suite *s, const char *name);
/* Read one portion's text (malloc'd) and check its size and crc32 against
 * the manifest.  SCDB_EINVAL, SCDB_ENOTFOUND (the domain has no such
 * portion), errors of scdb_read_file, SCDB_EMISMATCH (size or crc32
 * differ), SCDB_ENOMEM. */
scdb_err scdb_evict_suite_read(const scdb_evict_suite *s, int domain, scdb_evict_part part,
                               char **text, size_t *len, char *errbuf, size_t errlen);
/* Check the whole suite against its rule: seen domains have all three
 * portions and unseen ones only eval; every recorded file is in the
 * portion its path gives and in the rule's order; every chunk's crc32
 * matches the shipped text at its place and the chunks tile the text; no
 * file is used twice (across portions or domains); each text's size and
 * crc32 match.  errbuf says what is wrong.  SCDB_EMISMATCH, errors of
 * scdb_evict_suite_read, SCDB_ENOMEM. */
scdb_err scdb_evict_suite_verify(const scdb_evict_suite *s, char *errbuf, size_t errlen);

#endif /* SCDB_EVICT_TRAIN_H */
