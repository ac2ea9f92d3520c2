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
 *      evenly: per op the calls that succeeded (ok) and failed (errors: a
 *      refused call, or a wrong answer), ops/s, p50/p99/p999 latency (µs,
 *      the call's duration), the broker's RSS (start, peak, end) and open
 *      descriptors (start, end; "start" before the clients connect, "end"
 *      after they leave); and, from the broker's /metrics before and after
 *      the run, its per-stage histograms (scdb_job_stage_seconds: dispatch,
 *      queue, service, handoff, total) for get, session_evict, put and
 *      put_states beside the client's latency
 *      Each run measures from SETTLE_S after the clients are released
 *      (every thread started), the broker's histograms too: neither
 *      includes the clients' setup (arenas, sessions, first gets, all at
 *      once) or their start.
 *   5. the goals of issues 15 and 24 checked and printed (not asserted);
 *      memory judged on the broker's anonymous and shared memory, not on
 *      the LMDB map's file pages (the store, which grows by design)
 *
 * The bench cannot pass by not testing: an op of the mix that never
 * succeeds, in the capacity measurement or in any run, is printed as
 * FAILED and the exit status is 1.  Puts use byte tokens (the family's
 * 256-token vocabulary), new blocks every run; put_states writes fresh
 * states before each call (a put_states consumes the rows it encodes).
 *
 * The prompts stay stored whatever the machine's speed (issue 42).  The
 * store is bounded (--disk-capacity, 2 GiB) and evicts least recently used
 * leaves, and the closed-loop puts of step 2 write capacity x seconds x
 * 270 KB (two raw blocks): over 2 GiB in 3 s on a machine that puts
 * 2,650 a second, and the prompts, the oldest blocks there, went first;
 * every read of every run then missed.  Each run therefore first stores
 * again any prompt that is not whole (lw_prompts_keep) and, while its
 * clients read, checks them by index lookups: a run whose reads would miss
 * stops at once with FAILED and why (the store's capacity and evictions),
 * exit status 1.  Within a run the clients' gets and request lookups keep
 * the prompts recent. */
#include <arpa/inet.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
#define SETTLE_S 1.0      /* released clients start measuring after this */
#define MAX_RUNS 16       /* 1, 8, then --repeat runs at --clients */

/* The broker's per-stage histograms (metrics.c, scdb_job_stage_seconds),
 * as scraped from its /metrics: cumulative bucket counts per stage and op. */
#define N_STAGES 5
#define MAX_LE 80
static const char *const stage_names[N_STAGES] = {"dispatch", "queue", "service", "handoff",
                                                  "total"};
/* the ops of the stage table: get and session_evict (workers), put and
 * put_states (the writer) */
#define N_STAGE_OPS 4
static const lw_op stage_op[N_STAGE_OPS] = {LW_GET, LW_SESSION_EVICT, LW_PUT, LW_PUT_STATES};
static const char *const stage_op_metric[N_STAGE_OPS] = {"get", "session_evict", "put",
                                                         "put_states"};

typedef struct stage_hist {
    int n_le;
    double le[MAX_LE];                         /* upper bounds, s (last: +Inf) */
    double cum[N_STAGES][N_STAGE_OPS][MAX_LE];
    int valid;                                 /* the broker exports them */
} stage_hist;

typedef struct run_stats {
    int clients;
    double seconds;
    uint64_t errors, unavailable, wrong;
    double ops_s[LW_N_OPS], p50[LW_N_OPS], p99[LW_N_OPS], p999[LW_N_OPS];
    uint64_t count[LW_N_OPS];   /* calls that succeeded ("ok") */
    uint64_t op_errors[LW_N_OPS]; /* calls that failed, or answered wrongly */
    int offered[LW_N_OPS];      /* the op was in this run's mix */
    /* broker stages (µs), from its histograms over the run: [stage][op] */
    int have_stages;
    double st_p50[N_STAGES][N_STAGE_OPS], st_p99[N_STAGES][N_STAGE_OPS];
    long rss_start, rss_peak, rss_end;
    long part_start[3], part_peak[3], part_end[3];   /* anon, file, shmem */
    int fds_start, fds_peak, fds_end;
    uint64_t fallbacks;
    char first_error[200];
    char lost[512];             /* the prompts are gone: why (the bench stops) */
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
            "  --capacity-from F  take the capacities from an earlier --json file instead of\n"
            "                     measuring them: the same offered load as that run\n"
            "  --worker-cpus L    run the broker with worker_cpus = L (e.g. 0,1: its\n"
            "                     workers pinned to those cores)\n"
            "  --worker-nice N    run the broker with worker_nice = N (the workers' and\n"
            "                     the writer's nice value, relative to the broker's)\n"
            "  --evict-nice N     run the broker with evict_nice = N (the eviction\n"
            "                     threads', likewise)\n"
            "  --broker-nice N    run the broker process at nice N, as systemd's Nice=\n"
            "                     would (below 0 needs root or CAP_SYS_NICE)\n"
            "  --workers N        run the broker with N workers (default 2)\n"
            "  --evict-threads N  run the broker with evict_threads = N (default 1; 0:\n"
            "                     evictions wait for the workers, as before)\n"
            "  --disk-capacity S  the broker's store (disk_capacity, default 2GiB); it must\n"
            "                     hold the 16 prompts (13.9 MiB with their raw copies)\n"
            "                     besides what the runs put\n"
            "  --repeat R         the run at N clients R times against the same broker\n"
            "                     (default 1): does its heap settle or grow run after run;\n"
            "                     a SIGHUP before and after them (a reload trims the\n"
            "                     heap): what is live\n"
            "  --json FILE        {\"runs\":[{clients, seconds, errors, ops[{op, ok, errors,\n"
            "                     ops_s, p50_us, ...; get, session_evict, put, put_states:\n"
            "                     queue_p99_us, service_p99_us}], rss_kb, anon_kb, file_kb,\n"
            "                     shmem_kb, fds}], anon_after_trim_kb {before, after}\n"
            "                     (--repeat)}\n"
            "SCDB_BENCH_BROKER=PATH runs PATH's `serve` as the broker (another build's scdb)\n"
            "instead of this scdb's.\n"
            "TMPDIR=DIR puts the broker's store and the bench's files there (default /tmp).\n"
            "Exit status 1 when an op of the mix never succeeded, or at once when the store\n"
            "no longer holds the prompts the clients read (it says why).\n");
}

/* Append "key = value" to the broker's config (value NULL: nothing). */
static void conf_add(lw_env *env, const char *key, const char *value)
{
    size_t n = strlen(env->broker_conf);
    if (value) snprintf(env->broker_conf + n, sizeof env->broker_conf - n, "%s = %s\n", key, value);
}

/* A free loopback TCP port (for the broker's /metrics), 0 if none. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    if (fd < 0) return 0;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* GET /metrics from 127.0.0.1:port and keep the stage histograms.
 * 0; -1 when it does not answer (h->valid 0 when it has no stages: a
 * broker from before them). */
static int scrape_stages(int port, stage_hist *h)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap), *line, *save = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ssize_t r;

    memset(h, 0, sizeof *h);
    if (!buf || fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) ||
        write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        if (fd >= 0) close(fd);
        free(buf);
        return -1;
    }
    while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)r;
        if (len + 1 == cap) {
            char *p = realloc(buf, cap * 2);
            if (!p) break;
            buf = p;
            cap *= 2;
        }
    }
    close(fd);
    buf[len] = 0;
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char op[32], stage[32], le[32];
        double v;
        int si = -1, oi = -1, k;
        if (strncmp(line, "scdb_job_stage_seconds_bucket{", 30)) continue;
        if (sscanf(line + 30, "op=\"%31[^\"]\",stage=\"%31[^\"]\",le=\"%31[^\"]\"} %lf", op,
                   stage, le, &v) != 4)
            continue;
        for (k = 0; k < N_STAGES; k++)
            if (!strcmp(stage, stage_names[k])) si = k;
        for (k = 0; k < N_STAGE_OPS; k++)
            if (!strcmp(op, stage_op_metric[k])) oi = k;
        if (si < 0 || oi < 0) continue;
        {
            double bound = strcmp(le, "+Inf") ? atof(le) : INFINITY;
            for (k = 0; k < h->n_le && h->le[k] != bound; k++) {}
            if (k == h->n_le) {
                if (h->n_le == MAX_LE) continue;
                h->le[h->n_le++] = bound;
            }
            h->cum[si][oi][k] = v;
            h->valid = 1;
        }
    }
    free(buf);
    return 0;
}

/* Quantile q (µs) of what the histograms counted between a and b (the
 * same broker), interpolated linearly inside its bucket; NAN if none. */
static double stage_pct(const stage_hist *a, const stage_hist *b, int si, int oi, double q)
{
    double total = b->cum[si][oi][b->n_le - 1] - (a->valid ? a->cum[si][oi][b->n_le - 1] : 0);
    double want = q * total, prev_c = 0, prev_le = 0;

    if (!b->valid || b->n_le < 2 || total <= 0) return NAN;
    for (int k = 0; k < b->n_le; k++) {
        double c = b->cum[si][oi][k] - (a->valid ? a->cum[si][oi][k] : 0);
        if (c >= want) {
            double hi = isinf(b->le[k]) ? prev_le : b->le[k];
            double f = c > prev_c ? (want - prev_c) / (c - prev_c) : 1;
            return 1e6 * (prev_le + f * (hi - prev_le));
        }
        prev_c = c;
        prev_le = b->le[k];
    }
    return 1e6 * prev_le;
}

/* One run of n clients with env's rates; stats into s.  0; -1 when a
 * client failed; RUN_LOST when the prompts the clients read are not (or no
 * longer) stored: s->lost says why, and the bench stops. */
#define RUN_LOST (-2)
static int run(lw_env *env, int n, run_stats *s)
{
    pid_t *pids;
    float *lat[LW_N_OPS] = {0};
    size_t n_lat[LW_N_OPS] = {0}, cap_lat[LW_N_OPS] = {0};
    int ready, go, rc = 0;
    double t_end;
    scdb *mon = NULL;
    stage_hist *h0, *h1;

    memset(s, 0, sizeof *s);
    s->clients = n;
    s->seconds = env->seconds;
    for (int op = 0; op < LW_N_OPS; op++) s->offered[op] = env->rate[op] != 0;
    env->seed++;                     /* this run's puts are new blocks */
    /* the prompts the clients read, all there: an earlier run's puts (the
     * capacity measurement's above all) may have had the store evict them */
    if (lw_prompts_keep(env, s->lost, sizeof s->lost) < 0) return RUN_LOST;
    pids = calloc((size_t)n, sizeof *pids);
    h0 = calloc(2, sizeof *h0);
    h1 = h0 ? h0 + 1 : NULL;
    if (!pids || !h0) {
        free(pids);
        free(h0);
        return -1;
    }
    s->rss_start = s->rss_peak = lw_rss_parts(env->broker, s->part_start);
    memcpy(s->part_peak, s->part_start, sizeof s->part_peak);
    s->fds_start = s->fds_peak = lw_fds(env->broker);
    go = lw_spawn(env, 0, n, pids, &ready);
    if (go < 0) return -1;
    /* after the fork (no handle crosses it): watches the prompts while
     * the clients read them, by index lookups, which leave the LRU order
     * alone (a run of puts alone may well have them evicted) */
    if ((env->rate[LW_LOOKUP_INDEX] || env->rate[LW_LOOKUP_REQUEST] || env->rate[LW_GET] ||
         env->rate[LW_SESSION_EVICT]) && lw_reader_open(env, &mon))
        mon = NULL;
    if (lw_wait_ready(ready, n, 120)) {
        fprintf(stderr, "bench load: not every client got ready\n");
        rc = -1;
    }
    close(go);                       /* go */
    /* the broker's histograms from here: not the clients' setup (their
     * arenas, sessions and first gets, all at once) nor their start */
    if (env->settle_s > 0) usleep((useconds_t)(env->settle_s * 1e6));
    if (env->metrics_port) scrape_stages(env->metrics_port, h0);
    t_end = scdb_now() + env->settle_s + env->seconds + 60;
    for (int left = n; left > 0 && scdb_now() < t_end;) {
        long parts[3], r = lw_rss_parts(env->broker, parts);
        int fd = lw_fds(env->broker);
        if (r > s->rss_peak) s->rss_peak = r;
        for (int k = 0; k < 3; k++)
            if (parts[k] > s->part_peak[k]) s->part_peak[k] = parts[k];
        if (fd > s->fds_peak) s->fds_peak = fd;
        if (mon && !s->lost[0]) {
            int first = 0;
            uint32_t blocks = 0;
            int gone = lw_prompts_short(env, mon, NULL, &first, &blocks);
            if (gone > 0) {
                /* every read from here on would miss: stop now, say why */
                lw_prompts_why(env, mon, gone, first, blocks, s->lost, sizeof s->lost);
                fprintf(stderr, "bench load: FAILED: %s; stopping the run\n", s->lost);
                for (int i = 0; i < n; i++)
                    if (pids[i] > 0) kill(pids[i], SIGUSR1);
            }
        }
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
    scdb_close(&mon);
    if (env->metrics_port && !scrape_stages(env->metrics_port, h1) && h1->valid) {
        s->have_stages = 1;
        for (int si = 0; si < N_STAGES; si++)
            for (int oi = 0; oi < N_STAGE_OPS; oi++) {
                s->st_p50[si][oi] = stage_pct(h0, h1, si, oi, 0.50);
                s->st_p99[si][oi] = stage_pct(h0, h1, si, oi, 0.99);
            }
    }
    free(h0);
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
            s->op_errors[op] += r.errors[op];
            s->errors += r.errors[op];
            s->unavailable += r.unavailable[op];
        }
        s->wrong += r.wrong_lookups + r.wrong_bytes;
        s->errors += r.wrong_bytes;   /* wrong answers are in their op's errors */
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
    return s->lost[0] ? RUN_LOST : rc;
}

/* The ops of the run's mix that never succeeded: printed, and counted. */
static int never_ok(const run_stats *s, const char *when)
{
    int bad = 0;
    for (int op = 0; op < LW_N_OPS; op++)
        if (s->offered[op] && s->count[op] == 0) {
            fprintf(stderr, "bench load: FAILED: %s: %s never succeeded (%llu errors%s%s)\n",
                    when, lw_op_names[op], (unsigned long long)s->op_errors[op],
                    s->first_error[0] ? "; first error of the run: " : "", s->first_error);
            bad++;
        }
    return bad;
}

/* Capacity of each operation alone: closed loop, a few processes.  The
 * ops that never succeeded; -1 when the prompts are gone (said on stderr).
 * The closed-loop puts write what the machine can (on a fast one more
 * than the store holds): the next run stores the prompts again. */
static int measure_capacity(lw_env *env, double secs, double cap[LW_N_OPS])
{
    int bad = 0;
    for (int op = 0; op < LW_N_OPS; op++) {
        run_stats s;
        int n = op == LW_LOOKUP_INDEX ? 1 : CALIB_CLIENTS;
        memset(env->rate, 0, sizeof env->rate);
        env->rate[op] = -1;
        env->seconds = secs;
        if (run(env, n, &s) == RUN_LOST) {
            fprintf(stderr, "bench load: FAILED: capacity of %s: %s\n", lw_op_names[op], s.lost);
            return -1;
        }
        cap[op] = s.ops_s[op];
        fprintf(stderr, "bench load: capacity of %-14s %9.1f ops/s (%d closed-loop client%s, "
                "p50 %.0f us, %llu errors)\n", lw_op_names[op], cap[op], n, n > 1 ? "s" : "",
                s.p50[op], (unsigned long long)s.op_errors[op]);
        bad += never_ok(&s, "capacity");
    }
    return bad;
}

/* The capacities a previous run measured (its JSON's capacity_ops_s). */
/* The 1-client run's p50 of each op in a --json file of bench load (0
 * where it has none): what a run at N clients alone (--only) is held to. */
static void read_one_client_p50(const char *path, double p50[LW_N_OPS])
{
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL, *r;

    memset(p50, 0, LW_N_OPS * sizeof *p50);
    if (scdb_read_file(path, 1 << 24, &text, &len) || !(root = cJSON_Parse(text))) goto out;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(root, "runs")) {
        cJSON *o, *n = cJSON_GetObjectItem(r, "clients");
        if (!cJSON_IsNumber(n) || n->valueint != 1) continue;
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(r, "ops")) {
            cJSON *name = cJSON_GetObjectItem(o, "op"), *v = cJSON_GetObjectItem(o, "p50_us");
            for (int op = 0; op < LW_N_OPS; op++)
                if (cJSON_IsString(name) && !strcmp(name->valuestring, lw_op_names[op]) &&
                    cJSON_IsNumber(v) && v->valuedouble > 0)
                    p50[op] = v->valuedouble;
        }
    }
out:
    cJSON_Delete(root);
    free(text);
}

static int read_capacity(const char *path, double cap[LW_N_OPS])
{
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL, *c;
    int rc = -1;

    if (scdb_read_file(path, 1 << 24, &text, &len) || !(root = cJSON_Parse(text)) ||
        !(c = cJSON_GetObjectItem(root, "capacity_ops_s"))) {
        fprintf(stderr, "bench load: %s: no capacity_ops_s (a --json file of bench load)\n", path);
        goto out;
    }
    for (int op = 0; op < LW_N_OPS; op++) {
        cJSON *v = cJSON_GetObjectItem(c, lw_op_names[op]);
        if (!cJSON_IsNumber(v) || v->valuedouble <= 0) {
            fprintf(stderr, "bench load: %s: no capacity for %s\n", path, lw_op_names[op]);
            goto out;
        }
        cap[op] = v->valuedouble;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    free(text);
    return rc;
}

static void print_run(const run_stats *s)
{
    printf("\n%d client%s, %.0f s: %llu errors%s%s\n\n", s->clients, s->clients > 1 ? "s" : "",
           s->seconds, (unsigned long long)s->errors, s->first_error[0] ? " (first: " : "",
           s->first_error[0] ? s->first_error : "");
    if (s->first_error[0]) printf(")\n\n");
    printf("| op | ok | errors | ops/s | p50 us | p99 us | p999 us |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int op = 0; op < LW_N_OPS; op++)
        printf("| %s | %llu | %llu | %.1f | %.1f | %.1f | %.1f |\n", lw_op_names[op],
               (unsigned long long)s->count[op], (unsigned long long)s->op_errors[op],
               s->ops_s[op], s->p50[op], s->p99[op], s->p999[op]);
    if (s->have_stages) {
        printf("\nper stage (us; broker: its histograms over the run, interpolated in their "
               "buckets; socket + wake-up: the client's p50 minus the broker's total p50)\n\n"
               "| op | dispatch p99 | queue p50 | queue p99 | service p50 | service p99 | "
               "hand-off p99 | broker total p50 | broker total p99 | client p50 | client p99 | "
               "socket + wake-up p50 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int oi = 0; oi < N_STAGE_OPS; oi++) {
            lw_op op = stage_op[oi];
            printf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | "
                   "%.0f |\n", lw_op_names[op], s->st_p99[0][oi], s->st_p50[1][oi],
                   s->st_p99[1][oi], s->st_p50[2][oi], s->st_p99[2][oi], s->st_p99[3][oi],
                   s->st_p50[4][oi], s->st_p99[4][oi], s->p50[op], s->p99[op],
                   s->p50[op] - s->st_p50[4][oi]);
        }
    }
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

/* The broker's anonymous RSS (kB) after a SIGHUP: the reload frees the
 * previous configuration and trims the heap (malloc_trim), so what is left
 * is live, not memory the allocator kept.  -1 when no reload came. */
static long anon_after_trim(const lw_env *env)
{
    scdb_opts o = {.endpoint = env->endpoint, .timeout_ms = env->timeout_ms, .name = "trim",
                   .no_heartbeat = 1};
    scdb *h = NULL;
    scdb_stat st;
    uint64_t done0;
    long parts[3] = {-1, -1, -1};
    int reloaded = 0;

    if (scdb_connect(&o, &h) || scdb_stats(h, &st)) {
        scdb_close(&h);
        return -1;
    }
    done0 = st.reloads + st.reload_failures;
    kill(env->broker, SIGHUP);
    for (double until = scdb_now() + 30; !reloaded && scdb_now() < until; usleep(50000))
        reloaded = !scdb_stats(h, &st) && st.reloads + st.reload_failures > done0;
    scdb_close(&h);
    if (!reloaded || st.reload_failures) return -1;
    usleep(1000000);            /* the trim runs after the swap, off the loop */
    lw_rss_parts(env->broker, parts);
    return parts[0];
}

static double pct_change(long from, long to)
{
    return from > 0 ? 100.0 * (double)(to - from) / (double)from : 0;
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
        cJSON_AddNumberToObject(e, "ok", (double)s->count[op]);
        cJSON_AddNumberToObject(e, "errors", (double)s->op_errors[op]);
        cJSON_AddNumberToObject(e, "ops_s", s->ops_s[op]);
        cJSON_AddNumberToObject(e, "p50_us", isnan(s->p50[op]) ? 0 : s->p50[op]);
        cJSON_AddNumberToObject(e, "p99_us", isnan(s->p99[op]) ? 0 : s->p99[op]);
        cJSON_AddNumberToObject(e, "p999_us", isnan(s->p999[op]) ? 0 : s->p999[op]);
        for (int oi = 0; s->have_stages && oi < N_STAGE_OPS; oi++) {
            if (stage_op[oi] != (lw_op)op) continue;
            cJSON_AddNumberToObject(e, "queue_p99_us", isnan(s->st_p99[1][oi]) ? 0 : s->st_p99[1][oi]);
            cJSON_AddNumberToObject(e, "service_p99_us",
                                    isnan(s->st_p99[2][oi]) ? 0 : s->st_p99[2][oi]);
        }
        cJSON_AddItemToArray(ops, e);
    }
    cJSON_AddItemToObject(o, "ops", ops);
    cJSON_AddNumberToObject(rss, "start", (double)s->rss_start);
    cJSON_AddNumberToObject(rss, "peak", (double)s->rss_peak);
    cJSON_AddNumberToObject(rss, "end", (double)s->rss_end);
    cJSON_AddItemToObject(o, "rss_kb", rss);
    {   /* RSS split: anonymous (heaps), file (LMDB's map), shared memory */
        static const char *const part[3] = {"anon_kb", "file_kb", "shmem_kb"};
        for (int k = 0; k < 3; k++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "start", (double)s->part_start[k]);
            cJSON_AddNumberToObject(e, "peak", (double)s->part_peak[k]);
            cJSON_AddNumberToObject(e, "end", (double)s->part_end[k]);
            cJSON_AddItemToObject(o, part[k], e);
        }
    }
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
        {"data", 1, 0, 'd'}, {"worker-cpus", 1, 0, 'P'}, {"worker-nice", 1, 0, 'N'},
        {"capacity-from", 1, 0, 'F'}, {"workers", 1, 0, 'W'}, {"evict-threads", 1, 0, 'E'},
        {"evict-nice", 1, 0, 'V'}, {"broker-nice", 1, 0, 'B'}, {"disk-capacity", 1, 0, 'D'},
        {"repeat", 1, 0, 'R'},
        {"json", 1, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    static lw_env env;
    int clients = 64, only = 0, c, rc = 1, counts[MAX_RUNS], n_runs = 0, failed = 0, repeat = 1;
    const char *worker_cpus = NULL, *worker_nice = NULL, *capacity_from = NULL, *workers = NULL;
    const char *evict_threads = NULL, *evict_nice = NULL, *disk_capacity = NULL;
    int broker_nice, st;
    long trimmed0_kb = -1, trimmed_kb = -1; /* --repeat: anonymous RSS after a
                                               trim, before and after the runs */
    char why[200];
    scdb_err pe = SCDB_OK;
    double seconds = 30, fraction = 0.5, calib = 3, warmup = 5, cap[LW_N_OPS], offered[LW_N_OPS];
    const char *json = NULL, *data = scdb_data_dir();
    static run_stats runs[MAX_RUNS];

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': pe = scdb_parse_int("--clients", optarg, 1, 4096, &clients, why, sizeof why); break;
        case 's': pe = scdb_parse_f64("--seconds", optarg, 1e-3, 86400, &seconds, why, sizeof why); break;
        case 'f': pe = scdb_parse_f64("--fraction", optarg, 1e-6, 100, &fraction, why, sizeof why); break;
        case 'C': pe = scdb_parse_f64("--calib-seconds", optarg, 1e-3, 3600, &calib, why, sizeof why); break;
        case 'w': pe = scdb_parse_f64("--warmup", optarg, 0, 3600, &warmup, why, sizeof why); break;
        case 'E': evict_threads = optarg; break;
        case 'o': only = 1; break;
        case 'd': data = optarg; break;
        case 'j': json = optarg; break;
        case 'P': worker_cpus = optarg; break;
        case 'N': worker_nice = optarg; break;
        case 'V': evict_nice = optarg; break;
        case 'B':
            if (!(pe = scdb_parse_int("--broker-nice", optarg, -20, 19, &broker_nice, why, sizeof why)))
                setenv("SCDB_BENCH_BROKER_NICE", optarg, 1);
            break;
        case 'F': capacity_from = optarg; break;
        case 'W': workers = optarg; break;
        case 'D': disk_capacity = optarg; break;
        case 'R':
            pe = scdb_parse_int("--repeat", optarg, 1, MAX_RUNS - 2, &repeat, why, sizeof why);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (pe) {
            fprintf(stderr, "bench load: %s\n", why);
            return 2;
        }
    }
    if (!only && clients > 1) counts[n_runs++] = 1;
    if (!only && clients > 8) counts[n_runs++] = 8;
    for (int k = 0; k < repeat; k++) counts[n_runs++] = clients;

    fprintf(stderr, "bench load: starting a broker and storing 16 prompts of %d tokens\n",
            LW_PROMPT_TOKENS);
    env.seed = 1;
    env.settle_s = SETTLE_S;
    env.metrics_port = free_port();
    /* after the config's own keys (workers = 2): the last one counts */
    conf_add(&env, "worker_cpus", worker_cpus);
    conf_add(&env, "worker_nice", worker_nice);
    conf_add(&env, "evict_nice", evict_nice);
    conf_add(&env, "workers", workers);
    conf_add(&env, "evict_threads", evict_threads);
    conf_add(&env, "disk_capacity", disk_capacity);
    if (lw_setup(&env, data, 16, 10000)) goto out;
    if (capacity_from) {
        if (read_capacity(capacity_from, cap)) goto out;
        fprintf(stderr, "bench load: capacities from %s (the same offered load as that run)\n",
                capacity_from);
    } else if ((st = measure_capacity(&env, calib, cap))) {
        if (st > 0)
            fprintf(stderr, "bench load: FAILED: an op of the mix cannot be measured (above)\n");
        goto out;
    }
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
        if (run(&env, clients, &w) == RUN_LOST) {
            fprintf(stderr, "bench load: FAILED: the warm-up: %s\n", w.lost);
            goto out;
        }
    }
    for (int r = 0; r < n_runs; r++) {
        if (repeat > 1 && r == n_runs - repeat) {
            /* what is live before the repeated runs: the same measure as after */
            trimmed0_kb = anon_after_trim(&env);
            fprintf(stderr, "bench load: before the %d runs at %d clients, after a SIGHUP: "
                    "anonymous %ld kB\n", repeat, clients, trimmed0_kb);
        }
        for (int op = 0; op < LW_N_OPS; op++) env.rate[op] = offered[op] / counts[r];
        env.seconds = seconds;
        fprintf(stderr, "bench load: %d client%s for %.0f s\n", counts[r], counts[r] > 1 ? "s" : "",
                seconds);
        st = run(&env, counts[r], &runs[r]);
        if (st == RUN_LOST) {
            /* its reads miss from here on: no figure of it means anything */
            fprintf(stderr, "bench load: FAILED: the %d-client run: %s\n", counts[r],
                    runs[r].lost);
            goto out;
        }
        if (st) fprintf(stderr, "bench load: the run had failures\n");
        print_run(&runs[r]);
        failed += never_ok(&runs[r], counts[r] > 1 ? "a run" : "the 1-client run");
    }

    if (repeat > 1) {   /* does the heap settle, or grow run after run? */
        printf("\nmemory of the %d runs at %d clients against one broker (kB; start: before the "
               "clients connect, end: after they left)\n\n| run | anonymous start | anonymous "
               "end | change | shared memory end | LMDB file pages end |\n"
               "|---|---|---|---|---|---|\n", repeat, clients);
        for (int r = n_runs - repeat; r < n_runs; r++)
            printf("| %d | %ld | %ld | %+.1f%% | %ld | %ld |\n", r - (n_runs - repeat) + 1,
                   runs[r].part_start[0], runs[r].part_end[0],
                   pct_change(runs[r].part_start[0], runs[r].part_end[0]), runs[r].part_end[2],
                   runs[r].part_end[1]);
        printf("\nanonymous from the first run's start to the last run's end: %+.1f%%\n",
               pct_change(runs[n_runs - repeat].part_start[0], runs[n_runs - 1].part_end[0]));
        trimmed_kb = anon_after_trim(&env);
        if (trimmed_kb > 0 && trimmed0_kb > 0)
            printf("live heap (anonymous right after a SIGHUP, whose reload trims the heap: "
                   "what the allocator kept is given back): %ld kB before the first run, %ld kB "
                   "after the last (%+.1f%%); the rest of a run's end is freed memory the "
                   "allocator kept\n", trimmed0_kb, trimmed_kb,
                   pct_change(trimmed0_kb, trimmed_kb));
        else
            printf("live heap: the broker did not reload on SIGHUP (no figure)\n");
    }
    {   /* goals (issues 15 and 24), at the largest run */
        const run_stats *big = &runs[n_runs - 1];
        double one_p50[LW_N_OPS] = {0};
        const char *one_from = "this invocation's 1-client run";
        /* the 1-client median: this invocation's 1-client run, else (--only)
         * the 1-client run of the --capacity-from file, else none */
        if (runs[0].clients == 1) {
            memcpy(one_p50, runs[0].p50, sizeof one_p50);
        } else if (capacity_from) {
            read_one_client_p50(capacity_from, one_p50);
            one_from = capacity_from;
        }
        /* memory is the broker's heaps and shared memory: the LMDB map's
         * file pages are the store's blocks, which grow by design as the
         * mix stores new ones (up to disk_capacity) */
        long mem_start = big->part_start[0] + big->part_start[2];
        long mem_end = big->part_end[0] + big->part_end[2];
        double mem_pct = mem_start > 0 ? 100.0 * (double)labs(mem_end - mem_start) / (double)mem_start
                                       : 100;
        printf("\ngoals (%d clients):\n", big->clients);
        printf("  errors: %llu (goal 0): %s\n", (unsigned long long)big->errors,
               big->errors == 0 ? "met" : "NOT met");
        printf("  p99 lookup_index: %.2f us (goal < 10 us): %s\n", big->p99[LW_LOOKUP_INDEX],
               big->p99[LW_LOOKUP_INDEX] < 10 ? "met" : "NOT met");
        for (int op = LW_GET; op <= LW_SESSION_EVICT; op += LW_SESSION_EVICT - LW_GET) {
            if (one_p50[op] <= 0) {
                printf("  p99 %s: %.0f us; no 1-client run to hold it to (run without --only, "
                       "or --capacity-from a file with one)\n", lw_op_names[op], big->p99[op]);
                continue;
            }
            printf("  p99 %s: %.0f us vs the 1-client median %.0f us (%s): %.2fx (goal <= 4x): "
                   "%s\n", lw_op_names[op], big->p99[op], one_p50[op], one_from,
                   big->p99[op] / one_p50[op], big->p99[op] <= 4 * one_p50[op] ? "met" : "NOT met");
        }
        printf("  every op of the mix succeeded in every run: %s\n", failed ? "NOT met" : "met");
        printf("  broker memory after the clients left (anonymous + shared memory): %ld kB at "
               "start, %ld kB at end: %.1f%% from its start (goal within 5%%): %s\n", mem_start,
               mem_end, mem_pct, mem_pct <= 5 ? "met" : "NOT met");
        printf("    anonymous (the broker's heaps) %ld -> %ld kB (%+.1f%%), shared memory (arenas, "
               "lookup index) %ld -> %ld kB; not held to the goal: the LMDB map's file pages "
               "%ld -> %ld kB (the store's blocks), total RSS %ld -> %ld kB (%+.1f%%)\n",
               big->part_start[0], big->part_end[0], pct_change(big->part_start[0], big->part_end[0]),
               big->part_start[2], big->part_end[2], big->part_start[1], big->part_end[1],
               big->rss_start, big->rss_end, pct_change(big->rss_start, big->rss_end));
        printf("  open fds: %d at start, %d at end: %s\n", big->fds_start, big->fds_end,
               big->fds_end <= big->fds_start ? "no growth" : "GREW");
    }
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
        for (int r = 0; r < n_runs; r++) cJSON_AddItemToArray(arr, run_json(&runs[r]));
        cJSON_AddItemToObject(root, "runs", arr);
        {
            cJSON *capo = cJSON_CreateObject();
            for (int op = 0; op < LW_N_OPS; op++) cJSON_AddNumberToObject(capo, lw_op_names[op], cap[op]);
            cJSON_AddItemToObject(root, "capacity_ops_s", capo);
        }
        if (trimmed_kb > 0) {   /* --repeat: the live heap before and after */
            cJSON *t = cJSON_CreateObject();
            cJSON_AddNumberToObject(t, "before", (double)trimmed0_kb);
            cJSON_AddNumberToObject(t, "after", (double)trimmed_kb);
            cJSON_AddItemToObject(root, "anon_after_trim_kb", t);
        }
        if (scdb_bench_write_json(json, root, "scdb bench load")) {
            cJSON_Delete(root);
            goto out;
        }
        cJSON_Delete(root);
    }
    if (failed) {
        fprintf(stderr, "bench load: FAILED: %d op(s) of the mix never succeeded in a run "
                "(above)\n", failed);
        goto out;
    }
    rc = 0;
out:
    lw_teardown(&env, 0);
    return rc;
}
