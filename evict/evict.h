/*
 * evict.h — keeping a live KV cache within budget: per-token feature
 * accumulators, eviction policies (heuristic baselines and the learned
 * DistillCache MLP), order-preserving compaction, and policy training.
 *
 * The loop a decoder runs (one call each, per step or per eviction):
 *
 *   forward one token (model.h) --probs [L][H][1][slots]--> acc_update
 *        ^                                                     |
 *        |         cache->n > budget?  score -> select -> compact (cache + acc)
 *        +-------------------------------------------------------+
 *
 * Feature accumulators
 * --------------------
 * One flat buffer per live cache, struct-of-arrays, no pointers inside, so a
 * broker can place it in shared memory and any process can map it anywhere
 * (schema/FORMATS.md, "Eviction policy file and feature accumulators", has
 * the byte layout).  Its size is known up front: scdb_evict_acc_bytes().
 *
 *   +------------- 64-byte header (scdb_evict_acc) -------------+
 *   | magic version L H G capacity window n ring_next ring_fill |
 *   | last_pos n_queries decay bytes                            |
 *   +-----------------------------------------------------------+
 *   | pos      i32 [capacity]     original position of the slot |  each array
 *   | n_obs    f32 [capacity]     EMA_t 1 (weight of the queries|  starts on a
 *   |                             that have seen the slot)      |  64-byte
 *   | mass     f32 [capacity]     sum_t mean_(l,h) a            |  boundary
 *   | rel      f32 [capacity]     EMA_t mean_(l,h) a * nvis_t   |
 *   | var      f32 [capacity]     EMA_t var_(l,h) (a * nvis_t)  |
 *   | ent_num  f32 [capacity]     EMA_t sum_(l,h) a * Hn(l,h,t) |
 *   | ent_den  f32 [capacity]     EMA_t sum_(l,h) a             |
 *   | vnorm    f32 [capacity]     mean_(l,g) ||V[l][slot][g]||  |
 *   | last     f32 [capacity]     mean_(l,h) a of the last query|
 *   | win      f32 [window][G][capacity]  ring of the last      |
 *   |              `window` queries' attention, mean over       |
 *   |              layers and the query heads of KV group g     |
 *   +-----------------------------------------------------------+
 *
 * a = a(l,h,t,i) is the softmax weight query t puts on slot i in layer l,
 * head h; nvis_t the number of slots query t can see (so a * nvis_t is 1 for
 * uniform attention, which makes the features independent of the cache
 * size); Hn(l,h,t) the entropy of that attention row divided by
 * log(nvis_t).  EMA_t x_t means: before each query every EMA array is
 * multiplied by `decay` (1 - 1/32), then the query's x_t is added, so
 * "recent" is an exponential window of about 32 queries.  mass (H2O's score)
 * is a plain running sum.  Slot arrays are indexed like the KV cache and
 * compacted with the same keep list, so slot i of the accumulators is always
 * slot i of the cache.
 *
 * The six policy features of slot i (scdb_evict_features): DistillCache's
 * five plus the long-term attention mass:
 *   alpha  rel / n_obs        mean attention mass received, over heads,
 *                             layers and the recent queries that saw the
 *                             token, in units of the uniform share 1/nvis
 *   vnorm  ||v_i||_2          mean over layers and KV heads
 *   sigma  var / n_obs        variance across the L*H attention heads of the
 *                             (relative) mass received, mean over the
 *                             recent queries
 *   ent    ent_num / ent_den  attention-weighted mean normalised entropy of
 *                             the recent queries that attend to the token
 *   pos    (pos_i + 1) / (last_pos + 1)   normalised position, in (0, 1]
 *   mass   mass               cumulative attention (H2O's score): the EMA
 *                             features forget after ~32 queries, this one
 *                             remembers every query since the token arrived
 *
 * Policies
 * --------
 * Every policy is score -> select -> compact.  score fills one float per
 * live slot (higher = keep); select keeps the protected slots (the first
 * `sinks` slots and the last `recent` slots) and the top-scoring others up to
 * the budget (ties: the newer slot wins), returning keep[] ascending;
 * compact gathers cache and accumulators in place, in order, positions kept.
 *
 *   policy     score                                   protected
 *   full       -                                       everything (no eviction)
 *   streaming  -                                       4 sinks + budget-4 recent
 *   h2o        mass (cumulative attention)             budget/2 recent
 *   snapkv     window attention summed per KV group,   min(window, budget/2)
 *              max-pooled (kernel 7), groups averaged  recent (observation window)
 *   tova       last query's attention, heads/layers    the newest token
 *              averaged
 *   learned    MLP(inputs, below), max-pooled if       sinks + max(recent,
 *              file says so                            recent_frac * budget)
 *                                                      from the file (shipped:
 *                                                      see data/policies/README.md)
 *
 * One keep set is shared by all layers and heads (as DistillCache's features,
 * aggregated over heads and layers, suggest; PAPERS.md): compaction is then a
 * single order-preserving gather per layer and the cache keeps one length.
 * The per-head (H2O, SnapKV) and per-layer (TOVA) variants of the originals
 * are reduced to one score by averaging over the heads and layers.
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
 * it can scale with the budget as H2O's and StreamingLLM's do.  Optionally
 * (the file's `pool`, odd, 1 = off) the scores are then max-pooled along
 * the slots as SnapKV pools its attention, so that the neighbours of an
 * important token are kept with it.  Weights, the standardisation, the
 * inputs, the pool kernel and the protected counts live in a safetensors
 * file (FORMATS.md).  Training: scdb_evict_train_rl (train_rl.c; what
 * `scdb train-policy` runs) is REINFORCE over several models and training
 * domains with K Plackett-Luce draws of the evicted set per state, reward
 * -KL(full || evicted) per teacher-forced step, a leave-one-out baseline
 * over the K draws and an entropy bonus, from random weights;
 * scdb_evict_train (train.c, `--legacy`) the earlier single-model,
 * single-text trainer with hand-structured starting points.

 * Thread safety: a policy is read-only after load and may be shared; an
 * accumulator buffer belongs to one cache and is not locked.
 */
#ifndef SCDB_EVICT_H
#define SCDB_EVICT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels.h"
#include "scdb_common.h"

#define SCDB_EVICT_N_FEATURES 6
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
#define SCDB_EVICT_ACC_MAGIC 0x41454353u     /* "SCEA" little-endian */
#define SCDB_EVICT_ACC_VERSION 1u
#define SCDB_EVICT_DEFAULT_WINDOW 32         /* SnapKV observation window */
#define SCDB_EVICT_ACC_SLOT_ARRAYS 9         /* pos n_obs mass rel var ent_num ent_den vnorm last */
#define SCDB_EVICT_DECAY (1.0f - 1.0f / 32.0f)

enum { SCDB_EF_ALPHA = 0, SCDB_EF_VNORM, SCDB_EF_SIGMA, SCDB_EF_ENT, SCDB_EF_POS, SCDB_EF_MASS };

/* ------------------------------------------------------------ accumulators */

/* The header at offset 0 of an accumulator buffer (64 bytes).  Read-only
 * for callers; the arrays follow, reached through the accessors below. */
typedef struct scdb_evict_acc {
    uint32_t magic, version;
    int32_t n_layers, n_heads, n_kv_heads, capacity, window;
    int32_t n;                 /* live slots, == the cache's n after update */
    int32_t ring_next;         /* next row of win to write */
    int32_t ring_fill;         /* rows of win holding a query (<= window) */
    int32_t last_pos;          /* position of the latest query, -1: none */
    float decay;               /* EMA decay per query (n_obs rel var ent_num ent_den) */
    uint64_t n_queries;        /* queries folded in since init */
    uint64_t bytes;            /* size of the whole buffer */
} scdb_evict_acc;

typedef struct scdb_evict_acc_shape {
    int n_layers, n_heads, n_kv_heads, capacity;
    int window;                /* SnapKV ring rows; 0: SCDB_EVICT_DEFAULT_WINDOW */
} scdb_evict_acc_shape;

/* Bytes of an accumulator buffer of this shape (0 if the shape is invalid). */
size_t scdb_evict_acc_bytes(const scdb_evict_acc_shape *shape);

/* Lay an empty accumulator over caller memory (64-byte aligned, at least
 * scdb_evict_acc_bytes() long, e.g. shared memory); *out points into mem.
 * SCDB_EINVAL (NULL, misaligned, too short, bad shape). */
scdb_err scdb_evict_acc_init(void *mem, size_t len, const scdb_evict_acc_shape *shape,
                             scdb_evict_acc **out);
/* Validate an accumulator another process initialised in mem.
 * SCDB_EINVAL (NULL / misaligned), SCDB_EFORMAT (bad magic), SCDB_EUNSUPPORTED
 * (version), SCDB_ETRUNC (len shorter than the header says), SCDB_ERANGE
 * (header fields inconsistent). */
scdb_err scdb_evict_acc_attach(void *mem, size_t len, scdb_evict_acc **out);
/* malloc'd accumulator; free with scdb_evict_acc_free.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_acc_new(const scdb_evict_acc_shape *shape, scdb_evict_acc **out);
void scdb_evict_acc_free(scdb_evict_acc **a);
/* Forget every slot (n = 0), keep the shape. */
void scdb_evict_acc_reset(scdb_evict_acc *a);
/* dst := src (same shape).  SCDB_EINVAL, SCDB_ESHAPE. */
scdb_err scdb_evict_acc_copy(scdb_evict_acc *dst, const scdb_evict_acc *src);

/* Array accessors (offsets are computed from the header). */
int32_t *scdb_evict_acc_pos(const scdb_evict_acc *a);
float *scdb_evict_acc_n_obs(const scdb_evict_acc *a);
float *scdb_evict_acc_mass(const scdb_evict_acc *a);
float *scdb_evict_acc_rel(const scdb_evict_acc *a);
float *scdb_evict_acc_var(const scdb_evict_acc *a);
float *scdb_evict_acc_ent_num(const scdb_evict_acc *a);
float *scdb_evict_acc_ent_den(const scdb_evict_acc *a);
float *scdb_evict_acc_vnorm(const scdb_evict_acc *a);
float *scdb_evict_acc_last(const scdb_evict_acc *a);
float *scdb_evict_acc_win(const scdb_evict_acc *a);   /* [window][G][capacity] */

/* Fold in the n_new tokens just appended to the cache (slots
 * [a->n, a->n + n_new) == [cache->n - n_new, cache->n)): record their
 * positions and V norms, then, query by query in slot order, their attention
 * over the slots they can see.  probs is [n_layers][n_heads][n_new][probs_slots]
 * (scdb_capture.probs of that forward), probs_slots >= cache->n.
 * One call per step (or per prefill chunk).  probs NULL records the new
 * slots (positions, V norms) with no queries: slots whose KV came from
 * elsewhere (a decoded prefix) before any query has attended to them.
 * SCDB_EINVAL (NULL, n_new <= 0, probs_slots too small, a->n + n_new !=
 * cache->n), SCDB_ESHAPE (cache / accumulator / model dims differ). */
scdb_err scdb_evict_acc_update(scdb_evict_acc *a, const scdb_kv_cache *cache,
                               const float *probs, int probs_slots, int n_new);

/* Gather slots keep[0..n_keep) (strictly increasing, < a->n) to the front,
 * in order.  SCDB_EINVAL. */
scdb_err scdb_evict_acc_compact(scdb_evict_acc *a, const int *keep, int n_keep);

/* The raw features of every live slot: feats[a->n][SCDB_EVICT_N_FEATURES]
 * in the order alpha, vnorm, sigma, ent, pos, mass.  SCDB_EINVAL. */
scdb_err scdb_evict_features(const scdb_evict_acc *a, float *feats);

/* ------------------------------------------------------------ on a device
 * A live session whose cache is device memory (a CUDA IPC arena) keeps its
 * accumulators in the same device's memory, in the layout above (one
 * buffer, the 64-byte header first: the broker allocates and exports it like
 * the arena, and checks the header at every eviction), and runs the loop
 * above there, through a kernels.h ops table:
 *
 *   client, per step   scdb_evict_dev_fold: ops->acc_update (the twin of
 *                      scdb_evict_acc_update) on the device's probs
 *   broker, eviction   scdb_evict_dev_run: score on the device (h2o and
 *                      tova copy an array, snapkv ops->snapkv_score; the
 *                      learned policy: ops->evict_features, the features
 *                      [n][6] down, the MLP on the host, the scores up),
 *                      ops->select_topb, ops->compact_rows of the cache
 *                      (pos, K, V) and of every accumulator array, the
 *                      header's n, and the slot -> position map down
 *
 * On the CPU table (host memory, the CPU twins) both compute exactly what
 * scdb_evict_acc_update and scdb_evict_run compute (tests/test_evict.c,
 * tests/test_broker.c). */

#define SCDB_EVICT_SNAPKV_POOL 7             /* SnapKV's max-pool kernel */

struct scdb_evict_policy;                    /* below: policies */

/* The arrays and header fields of an accumulator buffer at base (any
 * memory: only addresses are computed) whose header is hdr (a host copy,
 * e.g. the one the buffer was made from). */
void scdb_evict_acc_buf(const scdb_evict_acc *hdr, void *base, scdb_k_acc_buf *out);
/* Byte offset of array k (0 pos, 1 n_obs, ... 8 last, in the order of the
 * accessors above; 9 win) in a buffer whose header is hdr. */
size_t scdb_evict_acc_offset(const scdb_evict_acc *hdr, int k);

/* scdb_session_add_stats's fold on ops' memory: the cache grew to
 * cache->n, the accumulators hold *acc_n slots (the caller's count: it
 * cannot read device memory), the newest n_new came with probs
 * [n_layers][n_heads][n_new][probs_slots]; slots appended before them
 * without statistics are recorded first with none.  *acc_n becomes
 * cache->n.  scratch, stream: ops->acc_update's.  SCDB_EINVAL (n_new < 0,
 * probs with n_new 0, more new slots than the cache grew by, probs_slots
 * too small), ops' errors. */
scdb_err scdb_evict_dev_fold(const scdb_k_ops *ops, const scdb_k_acc_buf *buf, int *acc_n,
                             const scdb_kv_cache *cache, const float *probs, int probs_slots,
                             int n_new, void *scratch, void *stream);

/* Device scratch an eviction over a cache of this capacity needs. */
size_t scdb_evict_dev_scratch_bytes(int capacity);

/* scdb_evict_run on ops' memory: cache's pos / K / V and the accumulator
 * buffer acc are device memory, hdr a checked host copy of acc's header
 * (hdr->n == cache->n), scratch scdb_evict_dev_scratch_bytes(capacity)
 * bytes of device memory, pos_map (host, room for min(cache->n, budget)) the
 * slot -> position map after compaction.  Updates cache->n (host) and the
 * header's n (device).  Synchronous.  Errors of scdb_evict_run and ops'. */
scdb_err scdb_evict_dev_run(const scdb_k_ops *ops, const struct scdb_evict_policy *p,
                            scdb_kv_cache *cache, const scdb_evict_acc *hdr, void *acc,
                            int budget, void *scratch, int32_t *pos_map, int *n_keep);

/* ------------------------------------------------------------ policies */

typedef enum scdb_evict_kind {
    SCDB_EVICT_FULL = 0,
    SCDB_EVICT_STREAMING,
    SCDB_EVICT_H2O,
    SCDB_EVICT_SNAPKV,
    SCDB_EVICT_TOVA,
    SCDB_EVICT_LEARNED,
    SCDB_EVICT_KIND_COUNT
} scdb_evict_kind;

/* "full", "streaming", "h2o", "snapkv", "tova", "learned"; NULL if invalid. */
const char *scdb_evict_kind_name(scdb_evict_kind k);
/* SCDB_ENOTFOUND for an unknown name. */
scdb_err scdb_evict_kind_parse(const char *name, scdb_evict_kind *out);

typedef struct scdb_evict_policy scdb_evict_policy;

/* A heuristic policy (any kind but LEARNED).  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_policy_new(scdb_evict_kind kind, scdb_evict_policy **out);
/* Load a learned policy file (FORMATS.md).  errbuf names what is wrong.
 * Errors of scdb_st_open (SCDB_ENOTFOUND no file, SCDB_ETRUNC truncated,
 * SCDB_EFORMAT garbage, ...), plus: SCDB_EMISMATCH (metadata missing or
 * naming another format, version or feature set), SCDB_ERANGE (a metadata
 * number out of range or non-finite weights / std <= 0),
 * SCDB_ENOTFOUND (a tensor missing), SCDB_ESHAPE (a tensor of the wrong
 * shape or inconsistent widths), SCDB_EDTYPE (not F32), SCDB_ENOMEM. */
scdb_err scdb_evict_policy_load(const char *path, scdb_evict_policy **out,
                                char *errbuf, size_t errlen);
void scdb_evict_policy_free(scdb_evict_policy **p);
scdb_evict_kind scdb_evict_policy_kind(const scdb_evict_policy *p);
/* Name for tables: the kind's name. */
const char *scdb_evict_policy_name(const scdb_evict_policy *p);
/* 1 if the policy reads the accumulators (callers may skip updates if 0). */
int scdb_evict_policy_needs_acc(const scdb_evict_policy *p);
/* Metadata value of a learned policy's file ("trained_on", ...); NULL if
 * absent or not learned. */
const char *scdb_evict_policy_meta(const scdb_evict_policy *p, const char *key);

/* Protected counts for n live slots and a budget: *sinks first slots and
 * *recent last slots are always kept (sinks + recent <= min(n, budget)).
 * a (may be NULL) gives SnapKV its observation window (a->window; default
 * SCDB_EVICT_DEFAULT_WINDOW). */
void scdb_evict_policy_protect(const scdb_evict_policy *p, const scdb_evict_acc *a, int n,
                               int budget, int *sinks, int *recent);

/* scores[a->n] (higher = keep).  The full and streaming policies score 0.
 * The learned policy's scores depend on the budget (one of its inputs):
 * scdb_evict_policy_score scores as if the budget were a->n (what
 * scdb_evict_run passes is the real budget).  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_evict_policy_score(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                 float *scores);
scdb_err scdb_evict_policy_score_budget(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                        int budget, float *scores);

/* Deterministic top-B with protection: keep[] (ascending) gets
 * min(n, budget) slots: [0, sinks), [n - recent, n) and the highest-scoring
 * others (ties: the higher slot).  keep needs room for min(n, budget).
 * SCDB_EINVAL (NULL, budget < 1, sinks/recent negative), SCDB_ENOMEM. */
scdb_err scdb_evict_select(const float *scores, int n, int budget, int sinks,
                           int recent, int *keep, int *n_keep);

/* Compact cache and accumulators (acc may be NULL) with the same keep list;
 * pos_map (may be NULL, room for n_keep) receives the slot -> original
 * position map after compaction.  SCDB_EINVAL (keep not increasing / out of
 * range, acc->n != cache->n). */
scdb_err scdb_evict_compact(scdb_kv_cache *cache, scdb_evict_acc *acc,
                            const int *keep, int n_keep, int32_t *pos_map);

/* score -> select -> compact in one call when cache->n > budget (otherwise
 * nothing changes and *n_keep = cache->n).  acc may be NULL for policies
 * that do not need it.  pos_map: NULL or room for min(cache->n, budget).
 * Errors of the three steps. */
scdb_err scdb_evict_run(const scdb_evict_policy *p, scdb_kv_cache *cache,
                        scdb_evict_acc *acc, int budget, int32_t *pos_map,
                        int *n_keep);

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
} scdb_evict_mlp;

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

/* Run the student protocol with policy p at budget B, evicting every
 * `every` steps.  kl_steps (NULL or [steps]) gets the per-step KL.
 * SCDB_EINVAL (budget < 1, every < 1), SCDB_ENOMEM, model errors. */
scdb_err scdb_evict_window_eval(scdb_evict_window *w, const scdb_evict_policy *p,
                                int budget, int every, float *kl_steps,
                                scdb_evict_eval *out);

/* ------------------------------------------------------------ training */

/* Starting weights: hidden unit 0 reads alpha (attention prior) or the
 * log-age (recency prior) and drives the output; or all random; or
 * (MIXED) a SnapKV / H2O prior gated by the budget: unit 0 reads alpha,
 * unit 1 the cumulative mass and unit 2 log(budget); the second layer lets
 * mass rank where the budget is above `gate` slots and alpha below (see
 * train.c). */
typedef enum scdb_evict_init {
    SCDB_EVICT_INIT_ATTENTION = 0,
    SCDB_EVICT_INIT_RECENCY,
    SCDB_EVICT_INIT_RANDOM,
    SCDB_EVICT_INIT_MIXED,
    SCDB_EVICT_INIT_UNGATED       /* MIXED's wiring with the gate unit's budget
                                   * weight and bias at 0: starts budget-blind
                                   * and gradient training learns the gate */
} scdb_evict_init;

typedef struct scdb_evict_train_opts {
    const char *model_dir;
    const unsigned char *text;    /* training text (bytes) */
    size_t text_len;
    double budgets[4];            /* fractions of prefill + steps, one drawn per episode */
    int n_budgets;
    int episodes;                 /* policy updates */
    int samples;                  /* K rollouts per episode (>= 2) */
    int prefill, steps, every;    /* the protocol above */
    int prefill_min;              /* > 0: each window's prefill drawn from
                                   * [prefill_min, prefill]; the budget stays
                                   * a fraction of prefill + steps */
    float lr, entropy;            /* Adam step size (cosine-decayed to 10%), entropy bonus weight */
    int hidden;                   /* MLP width */
    int sinks, recent;            /* protected counts stored in the policy */
    float recent_frac;            /* protected recent >= this fraction of the budget */
    float gate;                   /* --init mixed: the budget (slots) where mass
                                   * takes over from alpha (default 112) */
    int pool;                     /* max-pool kernel of the scores (odd, 1: none) */
    scdb_evict_init init;         /* starting weights */
    float tau;                    /* Gumbel noise scale (PL temperature), default 1 */
    int draw_evicted;             /* 1 (default): sample the evicted slots,
                                   * PL(-score / tau), so the log-probability
                                   * has as many stages as slots evicted
                                   * (~every) instead of one per kept slot;
                                   * 0: the kept ones */
    int train_gate_only;          /* 1: update only the gate unit (hidden unit 2's
                                   * first-layer weights and bias; --init mixed or
                                   * ungated), the rest stays at its init */
    int adv_norm;                 /* advantage scale: 0 a running RMS over
                                   * episodes, 1 (default) this episode's RMS */
    int val_windows;              /* validation windows (deterministic top-B) */
    int val_every;                /* episodes between validations */
    double max_seconds;           /* stop after this long (0: no limit) */
    uint64_t seed;
    FILE *log;                    /* JSONL log, one line per episode / validation; may be NULL */
    int verbose;                  /* progress lines on stderr */
} scdb_evict_train_opts;

/* Defaults (what data/policies/distillcache_base was trained with):
 * budgets {0.25, 0.125}, episodes 120, samples 4, prefill 256 (fixed),
 * steps 256, every 8 (the benchmark's protocol), lr 5e-4, entropy 0.01,
 * hidden 32, sinks 4, recent 32, recent_frac 0.5, pool 5, init mixed, gate
 * 112, tau 0.3, draw_evicted 1, adv_norm 1 (per episode), train_gate_only
 * 0, val_windows 32, val_every 20, seed 1. */
void scdb_evict_train_defaults(scdb_evict_train_opts *o);

typedef struct scdb_evict_train_result {
    int episodes;                  /* run */
    double first_reward, last_reward;   /* mean sampled reward, first / last 10% of episodes */
    double val_kl_init, val_kl_best;    /* validation KL (deterministic) */
    int best_episode;
    double val_kl_heuristic[SCDB_EVICT_KIND_COUNT];  /* same windows; -1 where not run */
    double seconds;
} scdb_evict_train_result;

/* Train a learned policy; *out gets the best network on validation.
 * SCDB_EINVAL (options), SCDB_ERANGE (text too short for one window),
 * model load errors, SCDB_ENOMEM. */
scdb_err scdb_evict_train(const scdb_evict_train_opts *o, scdb_evict_mlp **out,
                          scdb_evict_train_result *res, char *errbuf, size_t errlen);

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
    int val_windows;                   /* per (model, domain) */
    int val_every;                     /* Adam steps between validations */
    double max_seconds;                /* stop after this long (0: no limit) */
    uint64_t seed;
    const scdb_evict_mlp *init;        /* start from this network (NULL: random) */
    const char *checkpoint;            /* NULL, or a policy file rewritten with every new
                                        * best network (a stopped run keeps its best) */
    FILE *log;                         /* JSONL: references, one line per step and per validation */
    int verbose;
} scdb_evict_rl_opts;

/* Defaults (what data/policies/distillcache_base was trained with):
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
} scdb_evict_rl_result;

/* Train; *out gets the network with the best validation score.
 * SCDB_EINVAL (options), SCDB_ERANGE (a text shorter than one window, or
 * prefill + steps beyond a model's context), model load errors,
 * SCDB_ENOMEM. */
scdb_err scdb_evict_train_rl(const scdb_evict_rl_opts *o, scdb_evict_mlp **out,
                             scdb_evict_rl_result *res, char *errbuf, size_t errlen);

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

#endif /* SCDB_EVICT_H */
