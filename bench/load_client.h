/*
 * load_client.h — the broker, the stored prompts and the client processes
 * of `scdb bench load` and `scdb bench chaos` (bench_load.c,
 * bench_chaos.c).
 *
 *   bench process                         broker (scdb serve, child)
 *   -------------                         --------------------------
 *   lw_setup: temp dir, config (the      base (producer), code (consumer),
 *     family as cmd_demo configures it),  codebook base-scd, pair
 *     start, populate: P prompts of 384   base-scd -> code, policy
 *     held-out bytes, each stored twice:  distillcache; raw/base too
 *     SCD codes (base prefills, the
 *     broker encodes: put_states) and
 *     raw KV (deterministic payload)
 *   lw_spawn: N client processes  ---->  one thread per operation, each
 *     (fork), released together           with its own handle(s):
 *     through a pipe, for S seconds        lookup_index    index probe (no request)
 *                                          lookup_request  the same as a request
 *                                          get             384 tokens into an arena
 *                                          put             2 new raw blocks
 *                                          put_states      2 new blocks, encoded by the broker
 *                                          session_evict   16 slots appended, evict to 192
 *     (after env.settle_s: every thread of every client started)
 *   lw_collect: each writes its counts and latencies (µs) to a file
 *
 * Rates.  Each thread runs its operation open-loop at a given rate
 * (exponential gaps from a seeded generator: Poisson arrivals), or
 * closed-loop (rate < 0: back to back; how capacity is measured).
 * Latency is the call's own duration.
 *
 * The temp dir (config, store, logs) is made in $TMPDIR, else /tmp: a
 * tmpfs or a disk under the store is the runner's choice.
 *
 * Verification (chaos, env.verify): gets read the raw/base copy and compare
 * every byte with the payload the prompt's tokens determine; each put the
 * broker acknowledged is appended to DIR/acked-<client>.log before the next
 * one (DIR/acked-states-<client>.log for put_states), so the bench can
 * check after a broker kill that every acknowledged block is still there
 * and verifies.  SIGUSR1 stops a client early (it still writes its
 * results).  With env.restarts, a call that fails
 * because the broker is down or restarted (SCDB_ETIMEDOUT, SCDB_ECLOSED,
 * connect errors) counts as "unavailable", not as an error; the thread
 * rebuilds its arena or session and goes on.
 */
#ifndef SCDB_BENCH_LOAD_CLIENT_H
#define SCDB_BENCH_LOAD_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "scdb.h"

typedef enum lw_op {
    LW_LOOKUP_INDEX, LW_LOOKUP_REQUEST, LW_GET, LW_PUT, LW_PUT_STATES, LW_SESSION_EVICT,
    LW_N_OPS
} lw_op;
extern const char *const lw_op_names[LW_N_OPS];

#define LW_PROMPT_TOKENS 384
#define LW_PUT_TOKENS 128         /* a put: 2 new blocks of 64 */
#define LW_MAX_PROMPTS 64

typedef struct lw_env {
    char dir[128];                /* temp dir: config, store, logs, results */
    char endpoint[192];
    char config[192];
    const char *data;             /* the family's data folder */
    pid_t broker;
    int n_prompts;
    int32_t prompts[LW_MAX_PROMPTS][LW_PROMPT_TOKENS];
    /* per run */
    double rate[LW_N_OPS];        /* per client: ops/s; 0 off; < 0 closed loop */
    double seconds;
    int verify;                   /* raw gets verified, acked puts logged */
    int restarts;                 /* the broker may die: unavailability tolerated */
    int timeout_ms;
    uint64_t seed;
    double settle_s;              /* released clients wait this long before
                                     they start (their threads settle) */
    /* the broker's config: extra [broker] lines (worker_cpus, ...), and
     * the loopback port of its /metrics (0: none) */
    char broker_conf[512];
    int metrics_port;
} lw_env;

/* One client's results (header of its result file, then the latencies). */
typedef struct lw_result {
    uint64_t count[LW_N_OPS];     /* calls that returned SCDB_OK */
    uint64_t errors[LW_N_OPS];    /* calls that failed otherwise, or wrong data */
    uint64_t unavailable[LW_N_OPS]; /* failed while the broker was down (restarts) */
    uint64_t wrong_bytes, verified_bytes, wrong_lookups;
    uint64_t acked_blocks;        /* blocks of the puts acknowledged */
    uint64_t index_fallbacks;     /* index lookups that went to the broker */
    uint32_t n_lat[LW_N_OPS];     /* latencies kept (us, float) per op */
    scdb_err first_error;         /* the first error, for the report */
    lw_op first_error_op;
    char first_error_msg[160];
} lw_result;

/* Temp dir, config, broker start, populate (P prompts).  heartbeat_ms:
 * the broker's timeout for silent clients.  0 or -1 (a message on stderr). */
int lw_setup(lw_env *env, const char *data, int n_prompts, int heartbeat_timeout_ms);
/* The prompts must stay stored: the bench's own puts can make a bounded
 * store evict them (leaf-first LRU: a prompt no client has read lately is
 * the oldest there is; a capacity measurement of closed-loop puts writes
 * capacity x seconds x 270 KB, more than a 2 GiB store on a fast machine).
 *
 * lw_prompts_keep: store again the prompts that are not whole in the copy
 * the clients read, then check them.  How many it stored again (0: all
 * were there), or -1 with why (the store cannot keep them: its capacity
 * and evictions) -- a run on such a store would only count misses. */
int lw_prompts_keep(const lw_env *env, char *why, size_t whylen);
/* A handle that reads as the clients do (code with base-scd; raw base
 * with env.verify): for lw_prompts_short.  Its index lookups do not make
 * blocks recently used.  0, or the error (the handle NULL). */
scdb_err lw_reader_open(const lw_env *env, scdb **out);
/* How many prompts h cannot match whole (missing[p] 1 for those, may be
 * NULL; *first and *blocks: the first of them and its matched blocks),
 * -1 on a lookup error. */
int lw_prompts_short(const lw_env *env, scdb *h, int *missing, int *first, uint32_t *blocks);
/* Why n_short prompts are short (the store's capacity and evictions, from
 * h's stats), for a FAILED line. */
void lw_prompts_why(const lw_env *env, scdb *h, int n_short, int prompt, uint32_t blocks,
                    char *why, size_t len);
/* (Re)start the broker on env's dir and wait until it answers: 0, -1. */
int lw_broker_start(lw_env *env);
/* Stop the broker (sig) and remove the temp dir (keep: leave it). */
void lw_teardown(lw_env *env, int keep);

/* Fork n clients (index base..base+n-1) that get ready, wait for lw_go,
 * run env's rates for env->seconds and exit.  pids[n] receive them.
 * Returns the fd of the "go" pipe (close it to release them), -1 on error;
 * *ready_fd gets the pipe each ready client writes one byte to. */
int lw_spawn(const lw_env *env, int base, int n, pid_t *pids, int *ready_fd);
/* Wait until n clients are ready (or one died: -1). */
int lw_wait_ready(int ready_fd, int n, double timeout_s);
/* Read the result of client i (after it exited) into r and, when lat is
 * non-NULL, append its latencies per op to lat[op] (grown; *n_lat counts).
 * 0, -1 (no result file: it died). */
int lw_collect(const lw_env *env, int i, lw_result *r, float **lat, size_t *n_lat,
               size_t *cap_lat);

/* The broker's resident memory (VmRSS, kB) and open descriptors;
 * lw_rss_parts also splits it into anonymous (heaps), file (LMDB's map)
 * and shared memory (arenas, the lookup index): parts[0..2], kB. */
long lw_rss_kb(pid_t pid);
long lw_rss_parts(pid_t pid, long parts[3]);
int lw_fds(pid_t pid);

/* The deterministic raw payload (F16 K then V, schema/wire.h) of block b
 * of a token sequence, as producers put it and verifiers expect it. */
void lw_raw_payload(const int32_t *tokens, int block, int n_layers, int kv_dim, int block_tokens,
                    uint16_t *out);

/* The tokens of put number seq of a client (puts and put_states): byte
 * tokens, valid for the bundled family's 256-token vocabulary, unique per
 * (seed, client, seq) within the first block, never a stored prompt's. */
void lw_put_tokens(uint64_t seed, int client, uint64_t seq, int32_t t[LW_PUT_TOKENS]);

/* The acknowledged puts (states: put_states) of clients 0..n_clients-1:
 * the tokens of each, from their logs.  Returns how many (at most max). */
int lw_read_acked(const lw_env *env, int n_clients, int states, int32_t (*tokens)[LW_PUT_TOKENS],
                  int max);

#endif
