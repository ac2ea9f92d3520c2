/*
 * engine.h — the reference engine's use of libscdb: a prefix restored from
 * the broker with its recompute done (issue 40, "fidelity on demand"), in
 * one call, by scdb's reference model (model.h).  libscdb chooses the
 * tokens and takes them out of the arena (scdb_get_recompute, scdb.h); the
 * engine computes:
 *
 *   scdb_engine_restore(h, model, tokens, n, arena, &o, &r)
 *     1. scdb_get_recompute: the stored prefix decoded into the arena, the
 *        setting's tokens taken out (selective: scored by the engine's own
 *        first layer, below)
 *     2. one forward over those tokens at their own positions and over the
 *        prompt's tokens after the restored prefix (a shorter hit, or a
 *        trailing partial block), at theirs; attention is causal by
 *        position, so each attends as at its place
 *     3. the cache's slots put back in position order (a selective or
 *        initial recompute appended tokens from the middle): the cache is
 *        then the prefix's, slot i at position pos0 + i, and the caller
 *        continues with model.h's forward as after its own prefill
 *
 * The selective scorer is CacheBlend's: the consumer's own layer 0 over
 * every restored token (in a scratch copy of layer 0: the restored cache is
 * not changed) gives layer 1's input, and a token's score is how far the
 * consumer's own layer-1 K and V of it are from the restored ones
 * (||dK||^2 / mean ||K||^2 + ||dV||^2 / mean ||V||^2); a score that is not
 * finite (a NaN or inf in the restored KV) is +inf, recomputed first.  It
 * costs about one layer of a prefill of the prefix: on the 8-layer family
 * an eighth of the prefill, on a 32-layer model a 32nd (two layers for a
 * LoRA adapter loaded SCDB_LORA_LOWRANK, whose layer-1 K and V come from a
 * forward of layer 1: model.h gives no single matrix of its weights).
 *
 * DroidSpeak's layer recompute (the consumer's own first `layers` layers
 * over every restored token, the rest restored) is scdb_engine_recompute_
 * layers, a baseline for `scdb bench fidelity`.
 */
#ifndef SCDB_ENGINE_H
#define SCDB_ENGINE_H

#include <stdint.h>

#include "model.h"
#include "scdb.h"

typedef struct scdb_engine_restore_opts {
    scdb_recompute recompute;      /* DEFAULT: the registration's default  */
    int patch_layers;              /* as scdb_get_opts (-1: the pair's)     */
} scdb_engine_restore_opts;

typedef struct scdb_engine_restore_result {
    scdb_get_recompute_result rc;  /* the get and the tokens taken out      */
    int restored;                  /* prefix tokens restored from codes and
                                      kept (tokens_written - n_recompute)   */
    int recomputed;                /* of them: forwarded by the engine      */
    int prefilled;                 /* tokens after the restored prefix that
                                      the engine prefilled                  */
    uint64_t get_ns, score_ns, forward_ns; /* wall time of each step        */
} scdb_engine_restore_result;

/* The defaults: recompute DEFAULT, patch_layers -1. */
void scdb_engine_restore_init(scdb_engine_restore_opts *o);

/* Restore tokens [0, n) into the arena from slot a's cache n on, at
 * positions pos0 .. pos0 + n - 1 (above), recomputing what o says (NULL:
 * the defaults).  On success the arena's cache holds n more slots, in
 * position order.  Refused before anything is fetched: SCDB_EINVAL (NULL
 * arguments, n <= 0, pos0 < 0, positions past INT32_MAX, a token outside
 * the model's vocabulary), SCDB_ESHAPE (the model's geometry is not the
 * arena's), SCDB_EFULL (fewer than n free slots after the cache's n), and
 * scdb_get_recompute's refusals of a bad setting (scdb_last_error names
 * those; it does not describe the ones before).  After the get only
 * scdb_get_recompute's later errors (the get's own; SCDB_EINVAL: the
 * scorer failed) and SCDB_ENOMEM remain; on any failure the arena's cache
 * is as before the call: its n back at slot a's, what was restored past it
 * dropped (never a prefix with the chosen tokens' slots missing). */
scdb_err scdb_engine_restore(scdb *h, const scdb_model *m, const int32_t *tokens, int n,
                             scdb_arena *a, int32_t pos0, const scdb_engine_restore_opts *o,
                             scdb_engine_restore_result *out);

/* The same on a cache restored some other way (a raw-reuse baseline, a
 * pair decoded in this process: `scdb bench fidelity`, `scdb calibrate`):
 * the n slots [slot0, slot0 + n) of cache, tokens their ids, hold a
 * restored prefix; the setting's tokens (never DEFAULT) are taken out and
 * forwarded at their positions, and the slots put back in position order.
 * *n_recomputed (may be NULL) gets their count, *score_ns (may be NULL) the
 * scorer's time.  Errors: SCDB_EINVAL (a setting recompute.h refuses,
 * DEFAULT, slots outside the cache, a token outside the vocabulary, the
 * scorer failed), scdb_model_forward's, SCDB_ENOMEM. */
scdb_err scdb_engine_recompute_cache(const scdb_model *m, scdb_kv_cache *cache, int slot0, int n,
                                     const int32_t *tokens, const scdb_recompute *rc,
                                     int *n_recomputed, uint64_t *score_ns);

/* The selective scorer above, as scdb_get_recompute_opts.score wants it
 * (arg: the const scdb_model *). */
int scdb_engine_score_cacheblend(void *arg, const scdb_kv_cache *cache, int slot0, int n,
                                 const int32_t *tokens, float *scores);

/* DroidSpeak-style layer recompute: the model's own layers [0, layers) over
 * the n slots [slot0, slot0 + n) of cache (token ids tokens, positions the
 * cache's), their K and V written over the restored ones; the layers above
 * keep theirs.  Errors: scdb_model_layer_forward's, SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_engine_recompute_layers(const scdb_model *m, scdb_kv_cache *cache, int slot0, int n,
                                      const int32_t *tokens, int layers);

/* Put slots [0, n) in increasing position order (stable).  SCDB_ENOMEM. */
scdb_err scdb_engine_sort_by_pos(scdb_kv_cache *c);

#endif /* SCDB_ENGINE_H */
