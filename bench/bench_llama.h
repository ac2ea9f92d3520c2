/* bench_llama.h — private to `scdb bench llama` (bench_llama.c: options,
 * the family rows; bench_llama_1b.c: the 1B-shape cost rows): its options
 * and the pieces both row kinds time the same way, so that a 1B row's TTFT
 * and own prefill are the family's, measured by the same code. */
#ifndef SCDB_BENCH_LLAMA_H
#define SCDB_BENCH_LLAMA_H

#ifdef SCDB_HAVE_LLAMA

#include <cjson/cJSON.h>
#include <sys/types.h>

#include "scdb_llama.h"

#define LLB_MAX_TOKEN_COUNTS 8
#define LLB_MAX_TOKENS_1B 16384   /* --tokens: the longest prefix of the 1b rows */

typedef struct lopts {
    const char *data, *gguf, *json, *png, *only, *text;
    int prefix, cont, windows, reps, threads;
    long at;                        /* --text: first window's byte (-1: half) */
    int family, big;                /* --shape: which rows run */
    /* the 1b rows */
    int tokens[LLB_MAX_TOKEN_COUNTS], n_tokens;
    const char *vocab;              /* a vocab-only GGUF, "bytes", NULL: the bundle's SPM */
    int dims[5];                    /* layers, d, heads, KV heads, ffn */
    int ranks[3], candidates, patch, hidden;
    int own_layer;                  /* --own-layer: layer-local decoders, no token input */
    int prefill_reps;               /* the 1b rows: own prefill, capture
                                       prefill and TTFT via scdb, interleaved,
                                       each best of this many */
} lopts;

/* A llama.cpp context of n_ctx cells (batch = ubatch = min(n_ctx, 512)),
 * one sequence, o->threads; capturing for `capture` when given. */
struct llama_context *llb_ctx(struct llama_model *m, int n_ctx, const lopts *o,
                              scdb_llama_producer *capture);
void llb_clear(struct llama_context *ctx);

/* Start `scdb serve --config cfg` (log to logp) and wait until it answers
 * at sock; -1 (and a message) if it does not. */
pid_t llb_broker(const char *cfg, const char *sock, const char *logp);

/* llama.cpp's own prefill of tok[0, P) and the forward of tok[P] (the
 * first token after the prefix), best of reps, in seconds: *total the two,
 * *prefill the first alone (may be NULL).  Fails (-1, a message naming
 * `who`) when a decode fails: a failed prefill is not a fast one. */
int llb_time_own(struct llama_context *ctx, const int32_t *tok, int P, int reps, const char *who,
                 double *total, double *prefill);

/* TTFT via scdb: scdb_llama_restore of tok[0, P) (the broker's get into
 * the arena, then the blob written into the sequence: R = P / 64 * 64
 * tokens), the consumer's own prefill of the P - R tokens after the last
 * stored block (tok[R, P) at positions R..; none when P is whole blocks),
 * then the forward of tok[P] at position P; best of reps, each part's best
 * apart (seconds for ttft and restore, ms for get and blob, as
 * libscdb-llama reports them).  Fails (-1, a message naming `who`) when a
 * restore errs or restores other than the R stored tokens, or a decode
 * fails. */
typedef struct llb_restore_t {
    double ttft, restore, get_ms, blob_ms;
    int n_restored;
} llb_restore_t;
int llb_time_restore(scdb_llama_consumer *c, struct llama_context *ctx, const int32_t *tok, int P,
                     int reps, const char *who, llb_restore_t *out);

/* The 1B-shape rows (bench_llama_1b.c), appended to rows; 0, or 1 when
 * anything the rows name did not happen. */
int llb_run_1b(const lopts *o, cJSON *root, cJSON *rows);

#endif /* SCDB_HAVE_LLAMA */
#endif /* SCDB_BENCH_LLAMA_H */
