/* bench_load.c — `scdb bench load`: many client processes on one broker
 * for a bounded time, at a set fraction of its measured capacity, with
 * the mixed workload of load_client.h (index and request lookups, 384-token
 * gets into arenas, puts, put_states, live sessions with evictions).
 *
 *   1. the broker (the bundled family as `scdb demo` configures it) and 16
 *      stored 384-token prompts (SCD codes and raw KV)
 *   2. capacity: each operation alone, closed loop, 4 client processes
 *      for --calib-seconds: ops/s (lookup_index: one process, client side)
 *   3. offered load: operation i at fraction x weight_i x capacity_i, the
 *      weights summing to 1 (get 0.4, session_evict 0.2, put 0.15,
 *      put_states 0.15, lookup_request 0.1), so the offered work is
 *      `fraction` of what the broker can do; lookup_index (no broker work)
 *      at 10 per get
 *   4. a warm-up at that load (not reported), then runs at 1, 8 and
 *      --clients processes with that same total load split
 *      evenly: per op ops/s, p50/p99/p999 latency (µs, the call's duration),
 *      errors, the broker's RSS (start, peak, end) and open descriptors
 *      (start, end; "start" before the clients connect, "end" after they
 *      leave)
 *   5. the goals of issue 15 checked and printed (not asserted) */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "load_client.h"

static const double weight[LW_N_OPS] = {0, 0.10, 0.40, 0.15, 0.15, 0.20};
#define INDEX_PER_GET 10.0
#define CALIB_CLIENTS 4

typedef struct run_stats {
    int clients;
    double seconds;
    uint64_t errors, unavailable, wrong;
    double ops_s[LW_N_OPS], p50[LW_N_OPS], p99[LW_N_OPS], p999[LW_N_OPS];
    uint64_t count[LW_N_OPS];
    long rss_start, rss_peak, rss_end;
    long part_start[3], part_peak[3], part_end[3];   /* anon, file, shmem */
    int fds_start, fds_peak, fds_end;
    uint64_t fallbacks;
    char first_error[200];
} run_stats;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb bench load [--clients N] [--seconds S] [--fraction F] [--json FILE]\n"
            "  --clients N        client processes of the largest run (default 64); runs at\n"
            "                     1, 8 and N\n"
            "  --seconds S        each run (default 30; the issue's goal: 300)\n"
            "  --fraction F       offered share of the measured capacity (default 0.5)\n"
            "  --calib-seconds S  capacity measurement per operation (default 3)\n"
            "  --warmup S         an unreported run at the offered load first (default 5)\n"
            "  --only             just the run at N clients\n"
            "  --data DIR         the family's data folder (default $SCDB_DATA, else\n"
            "                     ../share/scdb beside scdb)\n"
            "  --json FILE        {\"runs\":[{clients, seconds, errors, ops[], rss_kb, fds}]}\n");
}

/* One run of n clients with env's rates; stats into s. */
static int run(lw_env *env, int n, run_stats *s)
{
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    float *lat[LW_N_OPS] = {0};
    size_t n_lat[LW_N_OPS] = {0}, cap_lat[LW_N_OPS] = {0};
    int ready, go, rc = 0;
    double t_end;

    memset(s, 0, sizeof *s);
    s->clients = n;
    s->seconds = env->seconds;
    if (!pids) return -1;
    s->rss_start = s->rss_peak = lw_rss_parts(env->broker, s->part_start);
    memcpy(s->part_peak, s->part_start, sizeof s->part_peak);
    s->fds_start = s->fds_peak = lw_fds(env->broker);
    go = lw_spawn(env, 0, n, pids, &ready);
    if (go < 0) return -1;
    if (lw_wait_ready(ready, n, 120)) {
        fprintf(stderr, "bench load: not every client got ready\n");
        rc = -1;
    }
    close(go);                       /* go */
    t_end = scdb_now() + env->seconds + 60;
    for (int left = n; left > 0 && scdb_now() < t_end;) {
        long parts[3], r = lw_rss_parts(env->broker, parts);
        int fd = lw_fds(env->broker);
        if (r > s->rss_peak) s->rss_peak = r;
        for (int k = 0; k < 3; k++)
            if (parts[k] > s->part_peak[k]) s->part_peak[k] = parts[k];
        if (fd > s->fds_peak) s->fds_peak = fd;
        for (int i = 0; i < n; i++) {
            int st;
            if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                pids[i] = -1;
                left--;
            }
        }
        usleep(200000);
    }
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            rc = -1;
        }
    close(ready);
    /* the clients said goodbye: give the broker a moment to let go */
    for (int k = 0; k < 10; k++) {
        usleep(100000);
        s->rss_end = lw_rss_parts(env->broker, s->part_end);
        s->fds_end = lw_fds(env->broker);
        if (s->fds_end <= s->fds_start) break;
    }
    for (int i = 0; i < n; i++) {
        lw_result r;
        if (lw_collect(env, i, &r, lat, n_lat, cap_lat)) {
            s->errors++;
            continue;
        }
        for (int op = 0; op < LW_N_OPS; op++) {
            s->count[op] += r.count[op];
            s->errors += r.errors[op];
            s->unavailable += r.unavailable[op];
        }
        s->wrong += r.wrong_lookups + r.wrong_bytes;
        s->errors += r.wrong_lookups + r.wrong_bytes;
        s->fallbacks += r.index_fallbacks;
        if (r.first_error && !s->first_error[0])
            snprintf(s->first_error, sizeof s->first_error, "%s", r.first_error_msg);
    }
    for (int op = 0; op < LW_N_OPS; op++) {
        double *v = malloc((n_lat[op] + 1) * sizeof *v);
        s->ops_s[op] = (double)s->count[op] / env->seconds;
        if (v) {
            for (size_t i = 0; i < n_lat[op]; i++) v[i] = lat[op][i];
            s->p50[op] = scdb_bench_pct(v, n_lat[op], 0.50);
            s->p99[op] = scdb_bench_pct(v, n_lat[op], 0.99);
            s->p999[op] = scdb_bench_pct(v, n_lat[op], 0.999);
            free(v);
        }
        free(lat[op]);
    }
    free(pids);
    return rc;
}

/* Capacity of each operation alone: closed loop, a few processes. */
static void measure_capacity(lw_env *env, double secs, double cap[LW_N_OPS])
{
    for (int op = 0; op < LW_N_OPS; op++) {
        run_stats s;
        int n = op == LW_LOOKUP_INDEX ? 1 : CALIB_CLIENTS;
        memset(env->rate, 0, sizeof env->rate);
        env->rate[op] = -1;
        env->seconds = secs;
        run(env, n, &s);
        cap[op] = s.ops_s[op];
        fprintf(stderr, "bench load: capacity of %-14s %9.1f ops/s (%d closed-loop client%s, "
                "p50 %.0f us)\n", lw_op_names[op], cap[op], n, n > 1 ? "s" : "", s.p50[op]);
    }
}

static void print_run(const run_stats *s)
{
    printf("\n%d client%s, %.0f s: %llu errors%s%s\n\n", s->clients, s->clients > 1 ? "s" : "",
           s->seconds, (unsigned long long)s->errors, s->first_error[0] ? " (first: " : "",
           s->first_error[0] ? s->first_error : "");
    if (s->first_error[0]) printf(")\n\n");
    printf("| op | ops/s | p50 us | p99 us | p999 us |\n|---|---|---|---|---|\n");
    for (int op = 0; op < LW_N_OPS; op++)
        printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", lw_op_names[op], s->ops_s[op], s->p50[op],
               s->p99[op], s->p999[op]);
    printf("\nbroker RSS %ld kB at start, %ld peak, %ld at end (%+.1f%%); open fds %d at start, "
           "%d peak, %d at end; index lookups that went to the broker: %llu\n",
           s->rss_start, s->rss_peak, s->rss_end,
           s->rss_start > 0 ? 100.0 * (double)(s->rss_end - s->rss_start) / (double)s->rss_start : 0,
           s->fds_start, s->fds_peak, s->fds_end, (unsigned long long)s->fallbacks);
    printf("of which anonymous (heaps) %ld / %ld / %ld kB, file (LMDB's map) %ld / %ld / %ld kB, "
           "shared memory (arenas, lookup index) %ld / %ld / %ld kB (start / peak / end)\n",
           s->part_start[0], s->part_peak[0], s->part_end[0], s->part_start[1], s->part_peak[1],
           s->part_end[1], s->part_start[2], s->part_peak[2], s->part_end[2]);
}

static cJSON *run_json(const run_stats *s)
{
    cJSON *o = cJSON_CreateObject(), *ops = cJSON_CreateArray(), *rss = cJSON_CreateObject(),
          *fds = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "clients", s->clients);
    cJSON_AddNumberToObject(o, "seconds", s->seconds);
    cJSON_AddNumberToObject(o, "errors", (double)s->errors);
    for (int op = 0; op < LW_N_OPS; op++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", lw_op_names[op]);
        cJSON_AddNumberToObject(e, "ops_s", s->ops_s[op]);
        cJSON_AddNumberToObject(e, "p50_us", isnan(s->p50[op]) ? 0 : s->p50[op]);
        cJSON_AddNumberToObject(e, "p99_us", isnan(s->p99[op]) ? 0 : s->p99[op]);
        cJSON_AddNumberToObject(e, "p999_us", isnan(s->p999[op]) ? 0 : s->p999[op]);
        cJSON_AddItemToArray(ops, e);
    }
    cJSON_AddItemToObject(o, "ops", ops);
    cJSON_AddNumberToObject(rss, "start", (double)s->rss_start);
    cJSON_AddNumberToObject(rss, "peak", (double)s->rss_peak);
    cJSON_AddNumberToObject(rss, "end", (double)s->rss_end);
    cJSON_AddItemToObject(o, "rss_kb", rss);
    cJSON_AddNumberToObject(fds, "start", s->fds_start);
    cJSON_AddNumberToObject(fds, "end", s->fds_end);
    cJSON_AddItemToObject(o, "fds", fds);
    return o;
}

int scdb_bench_load(int argc, char **argv)
{
    static const struct option lo[] = {
        {"clients", 1, 0, 'c'}, {"seconds", 1, 0, 's'}, {"fraction", 1, 0, 'f'},
        {"calib-seconds", 1, 0, 'C'}, {"warmup", 1, 0, 'w'}, {"only", 0, 0, 'o'},
        {"data", 1, 0, 'd'},
        {"json", 1, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    static lw_env env;
    int clients = 64, only = 0, c, rc = 1, counts[3], n_runs = 0;
    double seconds = 30, fraction = 0.5, calib = 3, warmup = 5, cap[LW_N_OPS], offered[LW_N_OPS];
    const char *json = NULL, *data = scdb_data_dir();
    run_stats runs[3];

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': clients = atoi(optarg); break;
        case 's': seconds = atof(optarg); break;
        case 'f': fraction = atof(optarg); break;
        case 'C': calib = atof(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'o': only = 1; break;
        case 'd': data = optarg; break;
        case 'j': json = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (clients < 1 || seconds <= 0 || fraction <= 0 || calib <= 0) {
        usage(stderr);
        return 2;
    }
    if (!only && clients > 1) counts[n_runs++] = 1;
    if (!only && clients > 8) counts[n_runs++] = 8;
    counts[n_runs++] = clients;

    fprintf(stderr, "bench load: starting a broker and storing 16 prompts of %d tokens\n",
            LW_PROMPT_TOKENS);
    env.seed = 1;
    if (lw_setup(&env, data, 16, 10000)) goto out;
    measure_capacity(&env, calib, cap);
    memset(env.rate, 0, sizeof env.rate);
    for (int op = 0; op < LW_N_OPS; op++) offered[op] = fraction * weight[op] * cap[op];
    offered[LW_LOOKUP_INDEX] = INDEX_PER_GET * offered[LW_GET];
    printf("scdb bench load: broker capacity (each op alone, closed loop) and the offered load "
           "(%.0f%% of it: weights get %.2f, session_evict %.2f, put %.2f, put_states %.2f, "
           "lookup_request %.2f; lookup_index %.0f per get)\n\n", 100 * fraction, weight[LW_GET],
           weight[LW_SESSION_EVICT], weight[LW_PUT], weight[LW_PUT_STATES],
           weight[LW_LOOKUP_REQUEST], INDEX_PER_GET);
    printf("| op | capacity ops/s | offered ops/s |\n|---|---|---|\n");
    for (int op = 0; op < LW_N_OPS; op++)
        printf("| %s | %.1f | %.1f |\n", lw_op_names[op], cap[op], offered[op]);

    {   /* warm-up (not reported): the broker's pools, hot tier and per-thread
         * heaps reach their working size, so RSS "start" is a steady state */
        run_stats w;
        for (int op = 0; op < LW_N_OPS; op++) env.rate[op] = offered[op] / clients;
        env.seconds = warmup;
        fprintf(stderr, "bench load: warm-up, %d clients for %.0f s\n", clients, warmup);
        run(&env, clients, &w);
    }
    for (int r = 0; r < n_runs; r++) {
        for (int op = 0; op < LW_N_OPS; op++) env.rate[op] = offered[op] / counts[r];
        env.seconds = seconds;
        fprintf(stderr, "bench load: %d client%s for %.0f s\n", counts[r], counts[r] > 1 ? "s" : "",
                seconds);
        if (run(&env, counts[r], &runs[r])) fprintf(stderr, "bench load: the run had failures\n");
        print_run(&runs[r]);
    }

    {   /* goals (issue 15), at the largest run */
        const run_stats *big = &runs[n_runs - 1], *one = &runs[0];
        double rss_pct = big->rss_start > 0
                             ? 100.0 * (double)labs(big->rss_end - big->rss_start) / (double)big->rss_start
                             : 100;
        printf("\ngoals (%d clients):\n", big->clients);
        printf("  errors: %llu (goal 0): %s\n", (unsigned long long)big->errors,
               big->errors == 0 ? "met" : "NOT met");
        printf("  p99 lookup_index: %.2f us (goal < 10 us): %s\n", big->p99[LW_LOOKUP_INDEX],
               big->p99[LW_LOOKUP_INDEX] < 10 ? "met" : "NOT met");
        printf("  p99 get: %.0f us vs the 1-client median %.0f us: %.2fx (goal <= 4x): %s\n",
               big->p99[LW_GET], one->p50[LW_GET], big->p99[LW_GET] / one->p50[LW_GET],
               big->p99[LW_GET] <= 4 * one->p50[LW_GET] ? "met" : "NOT met");
        printf("  broker RSS after the clients left: %.1f%% from its start (goal within 5%%): %s\n",
               rss_pct, rss_pct <= 5 ? "met" : "NOT met");
        printf("  anonymous RSS (the broker's own heaps): %ld kB at start, %ld kB at end "
               "(%+.1f%%)\n", big->part_start[0], big->part_end[0],
               big->part_start[0] > 0
                   ? 100.0 * (double)(big->part_end[0] - big->part_start[0]) / (double)big->part_start[0]
                   : 0);
        printf("  open fds: %d at start, %d at end: %s\n", big->fds_start, big->fds_end,
               big->fds_end <= big->fds_start ? "no growth" : "GREW");
    }
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
        for (int r = 0; r < n_runs; r++) cJSON_AddItemToArray(arr, run_json(&runs[r]));
        cJSON_AddItemToObject(root, "runs", arr);
        if (scdb_bench_write_json(json, root, "scdb bench load")) {
            cJSON_Delete(root);
            goto out;
        }
        cJSON_Delete(root);
    }
    rc = 0;
out:
    lw_teardown(&env, 0);
    return rc;
}
