/*
 * bench.h — scdb's benchmark programs, run as `scdb bench <name> [options]`.
 *
 * Each benchmark prints a markdown table on stdout, writes JSON with --json
 * FILE (and a PNG where a picture helps, via tools/plot_*.py when python3
 * with matplotlib is present), shows progress on stderr, and compares both
 * sides in the same run so that the ratios it reports survive a noisy
 * machine.
 * Speed and quality goals are checked here, never by timed assertions in
 * tests.
 */
#ifndef SCDB_BENCH_H
#define SCDB_BENCH_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "scdb.h"
#include "scdb_common.h"

/* `scdb bench ...`: dispatches to the entries below.  Returns an exit code. */
int scdb_bench_main(int argc, char **argv);
/* The name of benchmark i (0, 1, ...) of the dispatch table, NULL past the
 * last: `scdb --help` lists them from here. */
const char *scdb_bench_name(int i);

/* One entry per benchmark; argv[0] is the benchmark's name. */
int scdb_bench_store(int argc, char **argv);    /* bench/bench_store.c   */
int scdb_bench_broker(int argc, char **argv);   /* bench/bench_broker.c  */
int scdb_bench_quality(int argc, char **argv);  /* bench/bench_quality.c */
int scdb_bench_evict(int argc, char **argv);    /* bench/bench_evict.c   */
int scdb_bench_kernels(int argc, char **argv);  /* bench/bench_kernels.c */
int scdb_bench_python(int argc, char **argv);   /* bench/bench_python.c  */
int scdb_bench_load(int argc, char **argv);     /* bench/bench_load.c    */
int scdb_bench_chaos(int argc, char **argv);    /* bench/bench_chaos.c   */
int scdb_bench_session(int argc, char **argv);  /* bench/bench_session.c */
int scdb_bench_cluster(int argc, char **argv);  /* bench/bench_cluster.c */
int scdb_bench_adapter(int argc, char **argv);  /* bench/bench_adapter.c */
int scdb_bench_fleet(int argc, char **argv);    /* bench/bench_fleet.c   */
int scdb_bench_llama(int argc, char **argv);    /* bench/bench_llama.c   */
int scdb_bench_fidelity(int argc, char **argv); /* bench/bench_fidelity.c */

/* ------------------------------------------------- bench_util.c: helpers */

/* Write root as JSON to path (a newline at the end); on failure print
 * "who: cannot write path: why" and return -1. */
int scdb_bench_write_json(const char *path, const cJSON *root, const char *who);
/* Percentile q (0..1, nearest rank) / median of v[0..n) (sorts v in place);
 * NAN when n is 0. */
double scdb_bench_pct(double *v, size_t n, double q);
double scdb_bench_median(double *v, size_t n);

/* Start `scdb serve ARGS...` (NULL-terminated) in a child process, its
 * stderr appended to log_path (NULL: inherited); returns its pid (-1 on
 * fork failure).  Benches and the demo run inside the scdb command, so the
 * child execs /proc/self/exe (or $SCDB_BENCH_BROKER when set: another
 * build's scdb, to measure two brokers under one bench).  Stop it with scdb_bench_stop_broker (a
 * signal, then its exit status: 0 clean, 128 + signal if killed by it). */
pid_t scdb_bench_start_broker(const char *const *args, const char *log_path);
int scdb_bench_stop_broker(pid_t pid, int sig);
/* Connect with o, retrying until a broker answers or `seconds` pass
 * (readiness, never a fixed sleep); SCDB_ECLOSED at once if the broker
 * process `broker` (> 0) has exited. */
scdb_err scdb_bench_connect(const scdb_opts *o, double seconds, pid_t broker, scdb **out);

/* ------------------------------------------ payload_shape.c: payload shape
 *
 * The blocks `scdb bench store` and `scdb bench cluster` replay a trace
 * with stand for a 7B-class model's.  Per token, SCD codes are layers x
 * (rank_k + rank_v) x elem_bytes (32 x 256 x 2 = 16 KiB) and raw KV is
 * layers x 2 x kv_dim x elem_bytes (512 KiB); both are scaled down (a
 * 512-token block of codes is 8 MiB, and the trace has 43,924 distinct
 * blocks).  One struct, its defaults, its getopt_long entries and one
 * parser, so the two benches take the same options with the same checks. */
typedef struct scdb_bench_shape {
    uint32_t block_tokens;            /* --block-tokens (512, the Mooncake trace's) */
    uint32_t layers, rank_k, rank_v;  /* --layers, --rank-k, --rank-v (32, 128, 128) */
    uint32_t kv_dim;                  /* --kv-dim (4096; raw KV) */
    uint32_t elem_bytes;              /* --elem-bytes (2: f16) */
    double codes_scale, raw_scale;    /* --codes-scale, --raw-scale (1/512 each) */
} scdb_bench_shape;

/* getopt_long values of the shape options, above any bench's own. */
enum {
    SCDB_BENCH_SHAPE_OPT = 0x1000,
    SCDB_BENCH_SHAPE_BLOCK_TOKENS = SCDB_BENCH_SHAPE_OPT,
    SCDB_BENCH_SHAPE_LAYERS, SCDB_BENCH_SHAPE_RANK_K, SCDB_BENCH_SHAPE_RANK_V,
    SCDB_BENCH_SHAPE_ELEM_BYTES, SCDB_BENCH_SHAPE_CODES_SCALE,
    SCDB_BENCH_SHAPE_KV_DIM, SCDB_BENCH_SHAPE_RAW_SCALE
};
/* struct option entries: the codes' shape, and raw KV's (bench store alone
 * replays raw KV). */
#define SCDB_BENCH_SHAPE_CODES_OPTIONS                                                       \
    {"block-tokens", 1, 0, SCDB_BENCH_SHAPE_BLOCK_TOKENS}, {"layers", 1, 0, SCDB_BENCH_SHAPE_LAYERS}, \
    {"rank-k", 1, 0, SCDB_BENCH_SHAPE_RANK_K}, {"rank-v", 1, 0, SCDB_BENCH_SHAPE_RANK_V},          \
    {"elem-bytes", 1, 0, SCDB_BENCH_SHAPE_ELEM_BYTES},                                           \
    {"codes-scale", 1, 0, SCDB_BENCH_SHAPE_CODES_SCALE}
#define SCDB_BENCH_SHAPE_RAW_OPTIONS \
    {"kv-dim", 1, 0, SCDB_BENCH_SHAPE_KV_DIM}, {"raw-scale", 1, 0, SCDB_BENCH_SHAPE_RAW_SCALE}

/* The defaults above. */
void scdb_bench_shape_defaults(scdb_bench_shape *s);
/* Set the field of shape option c (getopt_long's value, >=
 * SCDB_BENCH_SHAPE_OPT) from arg: a whole number in range (--block-tokens
 * 1..SCDB_BLOCK_TOKENS_MAX, --layers and --elem-bytes >= 1), a positive
 * scale.  SCDB_OK; else the scdb_parse_* error with why naming the option,
 * or SCDB_EINVAL for a c that is no shape option. */
scdb_err scdb_bench_shape_parse(scdb_bench_shape *s, int c, const char *arg, char *why, size_t why_len);
/* Unscaled payload bytes per token: SCD codes; raw KV. */
uint64_t scdb_bench_shape_codes_per_token(const scdb_bench_shape *s);
uint64_t scdb_bench_shape_raw_per_token(const scdb_bench_shape *s);

/* Run argv (argv[0] a path) with its stdout sent to our stderr; its exit
 * status (128 + signal if killed), -1 if it could not start. */
int scdb_bench_spawn_quiet(char *const argv[]);
/* out[v] = log softmax(in)[v] over V logits, in double. */
void scdb_bench_log_softmax(const float *in, int V, double *out);

#endif
