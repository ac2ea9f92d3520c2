/*
 * trace.h — prefix-caching request traces for the store and cluster benches.
 *
 * A trace is one JSON object per line, {"timestamp": ms, "input_length": n,
 * "output_length": m, "hash_ids": [...]}: the prompt as a sequence of
 * fixed-size blocks (512 tokens in Mooncake's traces); equal ids = equal
 * block content; a shared leading run of ids = a shared prefix.  In memory
 * every request's ids sit back to back:
 *
 *   ids:  [ r0: 3 4 9 | r1: 3 4 7 7 | r2: 1 | ... ]
 *   off:  0           3             7       8 ...    (off[n_req] = n_ids)
 *
 * Each id is mapped to a deterministic block of tokens (splitmix64 seeded
 * by the id and a seed), so a request's tokens are the concatenation of its
 * blocks and chained block keys reproduce the trace's prefix semantics.
 */
#ifndef SCDB_BENCH_TRACE_H
#define SCDB_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define SCDB_TRACE_NAME "mooncake_synthetic_trace.jsonl"
#define SCDB_TRACE_MAX_LINE (16u << 20)

typedef struct scdb_trace {
    int64_t *ids;        /* all requests' hash ids, back to back   */
    size_t *off;         /* request r: ids[off[r] .. off[r+1])      */
    size_t n_req, n_ids, cap_ids, cap_req;
    size_t max_blocks;   /* longest request                         */
    char source[512];    /* the file, relative to the data directory
                          * when inside it, or the synthetic trace's seed */
} scdb_trace;

/* Load a JSONL trace (at most max_req requests; 0: all).  The first bad line
 * is an error naming it, printed as "who: ..." on stderr.  0 or -1. */
int scdb_trace_load(const char *path, size_t max_req, const char *who, scdb_trace *t);
/* The seeded synthetic trace of n_req requests (shared system prompts,
 * sessions that grow turn by turn).  0 or -1 (out of memory). */
int scdb_trace_synthetic(size_t n_req, uint64_t seed, scdb_trace *t);
void scdb_trace_free(scdb_trace *t);
/* Hits of an unbounded single cache over the first n_req requests, from the
 * ids alone: a block reference hits iff its exact prefix chain occurred in
 * an earlier request; refs = block references, distinct = distinct chains.
 * 0 or -1 (out of memory). */
int scdb_trace_ideal_hits(const scdb_trace *t, size_t n_req, uint64_t *hits, uint64_t *refs,
                          uint64_t *distinct);
/* The chain id of every block reference of the first n_req requests:
 * out[i] for ids[i], i in [off[0], off[n_req]).  Equal chain ids = equal
 * prefixes up to and including that block; ids are 1, 2, ... in order of
 * first appearance, so a reference hits an unbounded single cache iff its
 * chain id appeared before it.  *distinct = the number of chains.  0 or -1
 * (out of memory). */
int scdb_trace_chain_ids(const scdb_trace *t, size_t n_req, uint64_t *out, uint64_t *distinct);
/* The n tokens of block id under seed. */
void scdb_trace_block_tokens(int64_t id, uint64_t seed, int32_t *t, uint32_t n);
uint64_t scdb_trace_splitmix(uint64_t *s);
/* The default trace: traces/SCDB_TRACE_NAME in the data directory
 * (scdb_data_dir(): data/traces/ of the checkout through build/share/scdb,
 * <prefix>/share/scdb after an install, or $SCDB_DATA; no path is compiled
 * in).  The path in buf either way; 0 when it is a file, -1 when not (the
 * caller says so and stops: no silent fallback to --synthetic). */
int scdb_trace_default_path(char *buf, size_t len);

#endif
