/*
 * evict.h — keeping a live KV cache within budget: per-token feature
 * accumulators, eviction policies (heuristic baselines and the learned
 * DistillCache MLP) and order-preserving compaction.  The runtime half of
 * evict/; the offline half (network, protocol, trainer, suite) is
 * evict_train.h.
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
 *   h2o_head   mass per (layer, KV group)              budget/2 recent, per set
 *   snapkv_head  window attention per (layer, KV       min(window, budget/2)
 *              group), max-pooled (kernel 7)           recent, per set
 *   tova_layer last query's attention per layer        the newest token
 *
 * The first five keep one set of slots for all layers and heads (as
 * DistillCache's features, aggregated over heads and layers, suggest;
 * PAPERS.md): compaction is a single order-preserving gather per layer, and
 * the per-head (H2O, SnapKV) and per-layer (TOVA) choices of the originals
 * are reduced to one score by averaging.  The last three are the originals'
 * granularity, and a learned policy with a per-head scorer (policy file
 * version 6) keeps a set per (layer, KV group) below its split budget:
 * "Keep sets per head", below.
 *
 * Learned policy (DistillCache)
 * -----------------------------
 * score = MLP(inputs), read from a policy file (FORMATS.md, "Eviction
 * policy file"; scdb_evict_policy_load); the network, its inputs, the
 * measurement protocol and the trainer are the offline half, evict_train.h.
 * The protected recent window is max(recent, floor(recent_frac * budget))
 * slots; optionally (the file's `pool`) the scores are max-pooled along the
 * slots as SnapKV pools its attention.  At an eviction (scdb_evict_run) the
 * network scores only the candidates between the protected slots and the
 * neighbours their pool reads; select is a partial selection (rank.c), so
 * an eviction's cost follows the candidates, not a sort of the cache.
 *
 * This header is the runtime half: what a broker and libscdb need to keep
 * a live cache within budget (accumulators, policies, select, compact, the
 * device sequence).
 *
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
#define SCDB_EVICT_ACC_MAGIC 0x41454353u     /* "SCEA" little-endian */
#define SCDB_EVICT_ACC_VERSION 1u             /* one keep set: the slot arrays below */
#define SCDB_EVICT_ACC_VERSION_HEADS 2u       /* a keep set per (layer, KV group) */
#define SCDB_EVICT_ACC_HEAD_ARRAYS 3          /* version 2: pos mass last, then the ring */
#define SCDB_EVICT_MAX_SETS 65536             /* version 2: n_layers * n_kv_heads at most */
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
    int per_head;              /* 1: the per-head layout (version 2, "Keep sets per
                                * head" below); 0: one keep set (version 1) */
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

/* The per-head layout (version 2).  1 if a holds it. */
int scdb_evict_acc_per_head(const scdb_evict_acc *a);
/* Its mode (version 1: always SHARED): NONE before the first eviction,
 * SHARED once an eviction kept one set for all (version 1's arrays stay
 * valid, both are folded), SPLIT once the sets differ (only the per-set
 * arrays are folded and valid).  -1: a damaged mode word. */
enum { SCDB_EVICT_MODE_NONE = 0, SCDB_EVICT_MODE_SHARED = 1, SCDB_EVICT_MODE_SPLIT = 2 };
int scdb_evict_acc_mode(const scdb_evict_acc *a);
void scdb_evict_acc_set_mode(scdb_evict_acc *a, int mode);
/* Keep sets a's cache has: n_layers * n_kv_heads in the per-head layout, else 1. */
int scdb_evict_acc_n_sets(const scdb_evict_acc *a);
/* Its arrays, set k = layer * n_kv_heads + group: */
int32_t *scdb_evict_acc_head_pos(const scdb_evict_acc *a);   /* [K][capacity] */
float *scdb_evict_acc_head_mass(const scdb_evict_acc *a);    /* [K][capacity] */
float *scdb_evict_acc_head_last(const scdb_evict_acc *a);    /* [K][capacity] */
float *scdb_evict_acc_head_win(const scdb_evict_acc *a);     /* [window][K][capacity] */

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
    SCDB_EVICT_H2O_HEAD,         /* the originals' granularity (per-head layout only): */
    SCDB_EVICT_SNAPKV_HEAD,      /* H2O and SnapKV per (layer, KV group), TOVA per */
    SCDB_EVICT_TOVA_LAYER,       /* layer ("Keep sets per head") */
    SCDB_EVICT_KIND_COUNT
} scdb_evict_kind;

/* "full", "streaming", "h2o", "snapkv", "tova", "learned", "h2o_head",
 * "snapkv_head", "tova_layer"; NULL if invalid. */
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
 * others (ties: the higher slot; NaN ranks as -inf): the set the kernels'
 * select_topb gives, found by partial selection (expected O(n), rank.c)
 * instead of a sort.  keep needs room for min(n, budget).
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
 * With per-head accumulators every keep set is selected and compacted
 * apart (scdb_evict_run_heads).  Errors of the three steps, and
 * SCDB_EMISMATCH: the policy cannot run on accumulators of this layout
 * (scdb_evict_policy_runs_on). */
scdb_err scdb_evict_run(const scdb_evict_policy *p, scdb_kv_cache *cache,
                        scdb_evict_acc *acc, int budget, int32_t *pos_map,
                        int *n_keep);

/* ------------------------------------------------------------ keep sets per head
 * A policy may keep a set of slots per (layer, KV group) instead of one
 * set for the whole cache: H2O and SnapKV choose per head in their papers,
 * TOVA per layer, and at a tight budget the heads want different tokens
 * (some read only the last few, some the sinks, some a token far back).
 * Every set keeps the same number of slots, so the cache keeps one length
 * and attention reads it as before: slot i of layer l, KV group g is the
 * i-th token that set kept, its K and V in their usual place.  The cache's
 * pos[i] becomes the newest of the sets' positions at slot i (increasing
 * in i and older than every token still to come, so the causal mask of any
 * later forward is unchanged); each set's own positions are in the
 * accumulators.  The newest slot is in every set.
 *
 * The statistics must then be per set too: the accumulators' per-head
 * layout (version 2, scdb_evict_acc_shape.per_head) holds, for each of the
 * K = n_layers * n_kv_heads sets, its positions, H2O's mass, TOVA's last
 * query and SnapKV's ring, each the mean over the set's query heads
 * (FORMATS.md).  It is chosen when the accumulators are made, from the
 * policy and the budget (scdb_evict_policy_per_head), and lives in host
 * memory only: a device session keeps one set (scdb_evict_dev_run refuses
 * the layout). */

/* 1 if the kind keeps per-head sets (h2o_head, snapkv_head, tova_layer). */
int scdb_evict_kind_per_head(scdb_evict_kind k);
/* 1 if p wants per-head accumulators for a session of this budget in a
 * cache of this capacity: the per-head kinds always, a learned policy whose
 * file has a per-head scorer at budget <= its split * capacity. */
int scdb_evict_policy_per_head(const scdb_evict_policy *p, int budget, int capacity);
/* 1 if p can evict with accumulators of this layout (per_head 1: version
 * 2): full and streaming either, the shared kinds version 1, the per-head
 * kinds version 2, a learned policy version 1 and, with a per-head scorer,
 * version 2. */
int scdb_evict_policy_runs_on(const scdb_evict_policy *p, int per_head);
/* 1 if p evicts with a keep set per head on accumulators a at this
 * budget: a has the per-head layout and its sets already differ, p is a
 * per-head kind, or p is a learned policy whose scorer takes the first
 * eviction (its gate, evict_train.h).  0: one set for all (a's version 1
 * arrays are every set's; compaction keeps the sets the same). */
int scdb_evict_policy_wants_sets(const scdb_evict_policy *p, const scdb_evict_acc *a, int budget);
/* One keep list for every set of per-head accumulators whose sets are
 * still the same (not SPLIT): version 1's arrays and the sets'; the mode
 * becomes SHARED.  SCDB_EINVAL. */
scdb_err scdb_evict_acc_compact_shared(scdb_evict_acc *a, const int *keep, int n_keep);
/* Every set's scores (scores [K][a->n], higher = keep), the sinks (the same
 * for every set) and each set's protected recent window (recent [K]).
 * SCDB_EINVAL (NULL, budget < 1, a not per-head), SCDB_EMISMATCH (p cannot
 * run on it), SCDB_ENOMEM. */
scdb_err scdb_evict_heads_scores(const scdb_evict_policy *p, const scdb_evict_acc *a,
                                 int budget, float *scores, int *sinks, int *recent);
/* Gather, per set k, slots keep[k * n_keep + i] (strictly increasing in i,
 * < a->n) to the front of the set's arrays.  SCDB_EINVAL. */
scdb_err scdb_evict_acc_compact_heads(scdb_evict_acc *a, const int *keep, int n_keep);
/* The cache's K and V per set with the same keep lists, the accumulators,
 * and the cache's positions (above); pos_map as scdb_evict_compact's.
 * SCDB_EINVAL (keep, shapes, acc->n != cache->n). */
scdb_err scdb_evict_compact_heads(scdb_kv_cache *cache, scdb_evict_acc *acc, const int *keep,
                                  int n_keep, int32_t *pos_map);
/* scdb_evict_run's per-head path: every set's top-B under its protection
 * (scdb_evict_heads_scores, the kernels' select_topb per set), then
 * scdb_evict_compact_heads.  acc->n == cache->n, cache->n > budget. */
scdb_err scdb_evict_run_heads(const scdb_evict_policy *p, scdb_kv_cache *cache,
                              scdb_evict_acc *acc, int budget, int32_t *pos_map, int *n_keep);

#endif /* SCDB_EVICT_H */
