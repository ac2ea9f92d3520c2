/*
 * bench.h — scdb's benchmark programs, run as `scdb bench <name> [options]`.
 *
 * Each benchmark prints a markdown table on stdout, writes JSON with --json
 * FILE (and a PNG where a picture helps, via tools/plot.py when python3 with
 * matplotlib is present), shows progress on stderr, and compares both sides
 * in the same run so that the ratios it reports survive a noisy machine.
 * Speed and quality goals are checked here, never by timed assertions in
 * tests.
 */
#ifndef SCDB_BENCH_H
#define SCDB_BENCH_H

/* `scdb bench ...`: dispatches to the entries below.  Returns an exit code. */
int scdb_bench_main(int argc, char **argv);

/* One entry per benchmark; argv[0] is the benchmark's name. */
int scdb_bench_store(int argc, char **argv);    /* bench/bench_store.c   */
int scdb_bench_broker(int argc, char **argv);   /* bench/bench_broker.c  */
int scdb_bench_quality(int argc, char **argv);  /* bench/bench_quality.c */
int scdb_bench_evict(int argc, char **argv);    /* bench/bench_evict.c   */
int scdb_bench_kernels(int argc, char **argv);  /* bench/bench_kernels.c */

#endif
