/*
 * recompute.h — fidelity on demand (issue 40): which tokens of a restored
 * prefix the consumer recomputes itself, as one setting that a request, a
 * pair file (schema/FORMATS.md "Pair", key `recompute`), a broker config
 * (`fidelity =`) and the wire (scdb.proto, Recompute) all carry.  Installed
 * with scdb.h (libscdb exports these functions).
 *
 * A restored prefix is the decoded KV of tokens [0, P) at slots slot0 ..
 * slot0+P-1.  A setting chooses n of those tokens; their slots are removed
 * from the cache (order kept, every other slot keeps its position: kv_cache.h
 * is causal by position, not by slot) and the consumer forwards those tokens
 * at their own absolute positions over what is left, then its suffix.  Each
 * recomputed token attends to the restored KV of the tokens before it and
 * to the recomputed ones (CacheBlend's repair); with every token recomputed
 * the result is the consumer's own prefill.
 *
 *   policy      chooses                        engines that can do it
 *   none        nothing                        any
 *   tail        the last n tokens              any, llama.cpp included: it
 *                                              appends at pos_max + 1 only,
 *                                              and the tail is exactly that
 *   initial     the first n tokens (EPIC)      engines that forward at
 *   selective   the n the caller's scorer      explicit positions over a
 *               ranks highest (CacheBlend)     cache causal by position
 *                                              (scdb's reference model);
 *                                              not llama.cpp
 *   default     the registration's default: the broker config's `fidelity`
 *               for the pair, else the pair's calibrated `recompute`, else
 *               none (a request setting only)
 *
 * n is `tokens`, or, when `fraction` > 0, ceil(fraction x P) (at least 1;
 * the fraction taken to 7 decimals, so that the float of "10%" recomputes
 * 32 of 320, not 33): a fraction scales with the prefix, a count does not.
 * Text form (pair metadata, config, `scdb` options): "none" | "default" |
 * POLICY ":" N | POLICY ":" PCT "%" (N digits; PCT digits with one '.' at
 * most, in (0, 100]); "fast" = none, "exact" =
 * tail:100%, "pair" and "exact-top1" = default (the setting calibration
 * chose to reach the top-1 target), a bare count "N" = tail:N.
 */
#ifndef SCDB_RECOMPUTE_H
#define SCDB_RECOMPUTE_H

#include <stddef.h>

#include "scdb_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum scdb_recompute_policy {
    SCDB_RECOMPUTE_NONE = 0,
    SCDB_RECOMPUTE_TAIL = 1,
    SCDB_RECOMPUTE_INITIAL = 2,
    SCDB_RECOMPUTE_SELECTIVE = 3,
    SCDB_RECOMPUTE_DEFAULT = 4,
    SCDB_RECOMPUTE_POLICY_COUNT     /* append new policies before this */
} scdb_recompute_policy;

typedef struct scdb_recompute {
    scdb_recompute_policy policy;
    int tokens;                     /* n, when fraction is 0 (>= 0)         */
    float fraction;                 /* (0, 1]: n = ceil(fraction x P); 0:
                                       tokens                               */
} scdb_recompute;

/* "none", "tail", "initial", "selective", "default"; NULL for an unknown
 * value. */
const char *scdb_recompute_policy_name(scdb_recompute_policy p);

/* The smallest fraction a setting takes (0.0001%): one token of any prefix
 * a broker serves; below it a percentage's exponent-free text would not
 * fit the 48-byte buffers settings are formatted into. */
#define SCDB_RECOMPUTE_MIN_FRACTION 1e-6f

/* Parse the text form (above).  SCDB_EINVAL with errbuf naming what is
 * wrong: an unknown policy, a count that is negative or not a number, a
 * percentage that is not plain decimal (no sign, exponent, hex, inf or
 * nan), outside (0, 100], or under 0.0001% (SCDB_RECOMPUTE_MIN_FRACTION:
 * its text stays short),
 * "none:N" / "default:N". */
scdb_err scdb_recompute_parse(const char *text, scdb_recompute *out, char *errbuf, size_t errlen);

/* Write the canonical text form ("tail:32", "selective:15%"); a
 * percentage with the fewest significant digits (6 to 9) that parse back
 * to the same float, and no exponent, so parsing the text gives r back.
 * Returns what snprintf returns. */
int scdb_recompute_format(const scdb_recompute *r, char *buf, size_t len);

/* Check a setting against a prefix of prefix_tokens tokens (< 0: against
 * no prefix, the setting alone).  SCDB_EINVAL: an unknown policy, a negative
 * count, a fraction outside [0, 1] or NaN, both a count and a fraction;
 * SCDB_ERANGE: a count beyond the prefix.  errbuf names the field
 * ("recompute.tokens 500 is beyond the prefix's 448 tokens"). */
scdb_err scdb_recompute_check(const scdb_recompute *r, int prefix_tokens, char *errbuf,
                              size_t errlen);

/* How many of P restored tokens the setting recomputes (clamped to P; 0
 * for none and default). */
int scdb_recompute_count(const scdb_recompute *r, int P);

/* The tokens to recompute, as indices into the prefix [0, P), ascending,
 * into idx (room for P); *n_out their count.  scores [P] (higher first;
 * ties: the later token) is required for selective and ignored otherwise.
 * SCDB_EINVAL: a setting scdb_recompute_check refuses, policy default
 * (resolve it first), selective without scores. */
scdb_err scdb_recompute_select(const scdb_recompute *r, int P, const float *scores, int *idx,
                               int *n_out);

#ifdef __cplusplus
}
#endif

#endif /* SCDB_RECOMPUTE_H */
