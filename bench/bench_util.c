/* bench_util.c — what several benchmarks (and the demo) share: JSON files,
 * percentiles, and a broker in a child process with a client that waits
 * for it to answer. */
#include "bench.h"

#include <errno.h>
#include <sys/resource.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int scdb_bench_write_json(const char *path, const cJSON *root, const char *who)
{
    char *txt = cJSON_Print(root);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int bad = !f || fputs(txt, f) < 0 || fputc('\n', f) < 0;

    if (f && fclose(f) != 0) bad = 1;
    free(txt);
    if (bad) fprintf(stderr, "%s: cannot write %s: %s\n", who, path, strerror(errno));
    return bad ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double scdb_bench_pct(double *v, size_t n, double q)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return v[(size_t)((double)(n - 1) * q + 0.5)];
}

double scdb_bench_median(double *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

pid_t scdb_bench_start_broker(const char *const *args, const char *log_path)
{
    const char *argv[64];
    int n = 0;
    pid_t pid;

    argv[n++] = "scdb";
    argv[n++] = "serve";
    while (args && *args && n < 63) argv[n++] = *args++;
    argv[n] = NULL;
    pid = fork();
    if (pid == 0) {
        if (log_path) {
            FILE *f = freopen(log_path, "a", stderr);
            (void)f;
        }
        /* the scdb command itself: benches and the demo run inside it
         * (SCDB_BENCH_BROKER: another build's scdb, to compare brokers
         * under the same bench); SCDB_BENCH_BROKER_NICE: the broker's
         * nice value, as systemd's Nice= would set it */
        const char *exe = getenv("SCDB_BENCH_BROKER"), *nice = getenv("SCDB_BENCH_BROKER_NICE");
        if (nice && *nice) {
            char why[160];
            int v;
            /* a broker that did not get the nice asked for must not be
             * measured as if it had: no broker at all */
            if (scdb_parse_int("SCDB_BENCH_BROKER_NICE", nice, -20, 19, &v, why, sizeof why)) {
                fprintf(stderr, "%s\n", why);
                _exit(126);
            }
            if (setpriority(PRIO_PROCESS, 0, v)) {
                fprintf(stderr, "SCDB_BENCH_BROKER_NICE=%d: %s%s\n", v, strerror(errno),
                        errno == EACCES || errno == EPERM ? " (below the current nice needs root or "
                                                            "CAP_SYS_NICE)" : "");
                _exit(126);
            }
        }
        execv(exe && *exe ? exe : "/proc/self/exe", (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int scdb_bench_stop_broker(pid_t pid, int sig)
{
    int st;

    if (pid <= 0) return -1;
    kill(pid, sig);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

scdb_err scdb_bench_connect(const scdb_opts *o, double seconds, pid_t broker, scdb **out)
{
    double until = scdb_now() + seconds;
    scdb_err e;

    for (;;) {
        int st;
        e = scdb_connect(o, out);
        if (e == SCDB_OK) return e;
        if (broker > 0 && waitpid(broker, &st, WNOHANG) == broker) return SCDB_ECLOSED;
        if (scdb_now() > until) return e;
        usleep(20000);
    }
}

/* argv[0] with its stdout on our stderr: what a child prints is progress,
 * not the bench's table */
int scdb_bench_spawn_quiet(char *const argv[])
{
    extern char **environ;
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc)
        return -1;
    int st;
    if (waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void scdb_bench_log_softmax(const float *in, int V, double *out)
{
    double mx = in[0], sum = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, in[v]);
    for (int v = 0; v < V; v++) sum += exp(in[v] - mx);
    double lz = mx + log(sum);
    for (int v = 0; v < V; v++) out[v] = in[v] - lz;
}
