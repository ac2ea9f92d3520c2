/* bench_broker.c — `scdb bench broker`: the broker's request path against
 * Redis, and its get path against memcpy, in the same run.
 *
 *   lookup   N client processes (1, then --clients) call scdb_lookup on a
 *            --tokens prompt for --seconds each: ops/s, p50/p99 per call,
 *            twice: through the broker's shared-memory lookup index (the
 *            default path: no round trip) and forced through the request
 *            path (scdb_opts.no_lookup_index: a round trip per lookup); each
 *            client checks, from its handle's counters, that every lookup
 *            took the path being measured.  Against redis-benchmark -t get
 *            with the same connection counts on a redis-server the bench
 *            starts on a temp unix socket.
 *   get      one consumer gets the whole prompt of a big model (raw F32 KV,
 *            --get-mb per get) into its shared-memory arena, over and over:
 *            GB/s of KV landed, against memcpy of the same bytes.
 *
 * The broker runs in a child process (scdb_broker_main) on a temp dir. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "broker.h"
#include "scdb.h"

typedef struct opts {
    const char *json;
    int clients, tokens, get_mb;
    double seconds;
    int request_path;        /* this run: force the request path */
} opts;

typedef struct lat_result {
    double ops_s, p50_us, p99_us, mean_us;
    double server_cpu_s;     /* server CPU seconds used during the run */
    long ops;
    int ok;
} lat_result;

static char dir[128], endpoint[256];

/* CPU seconds (user + system, all threads) a process has used so far: a
 * measure of server work that a busy machine does not distort. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r"))) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    p = strrchr(buf, ')');                 /* fields after the command name */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void prompt(int32_t *t, int n, int seed)
{
    uint32_t x = 2463534242u + (uint32_t)seed;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        t[i] = (int32_t)(x & 0xff);
    }
}

static pid_t start_broker(const opts *o)
{
    char data[200], model[128], big[128];

    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(model, sizeof model, "small:8:2:32:%d:f16", o->tokens);
    /* the get model: 16 layers x 8 KV heads x 128 = 128 KiB of F32 KV per
     * token, scaled so one get moves --get-mb */
    snprintf(big, sizeof big, "big:16:8:128:%d:f32", o->tokens);
    const char *args[] = {"--endpoint", endpoint, "--data-dir", data,
                          "--model", model, "--model", big, "--workers", "2",
                          "--no-sync", "1", "--log-level", "warn", "--hot-capacity", "4GiB",
                          "--max-request-bytes", "1GiB", "--map-size", "4GiB",
                          "--heartbeat-timeout-ms", "30000", NULL};
    return scdb_bench_start_broker(args, NULL);
}

static scdb *connect_retry(double seconds, int request_path)
{
    scdb_opts so = {.endpoint = endpoint, .timeout_ms = 200, .name = "bench",
                    .no_lookup_index = request_path};
    scdb *h = NULL;
    if (scdb_bench_connect(&so, seconds, -1, &h)) return NULL;
    scdb_set_timeout(h, 60000);
    return h;
}

/* Store the lookup prompt (small model) and the get prompt (big model). */
static int populate(const opts *o, int big_tokens)
{
    scdb *h = connect_retry(30, 1);
    int32_t *t = malloc(sizeof *t * (size_t)(o->tokens > big_tokens ? o->tokens : big_tokens));
    scdb_info info;
    scdb_kv_cache *c = NULL;
    int rc = -1;

    if (!h || !t) goto out;
    prompt(t, o->tokens, 1);
    if (scdb_register(h, SCDB_PRODUCER, "small", NULL, &info)) goto out;
    if (scdb_kv_cache_new(info.n_layers, info.n_kv_heads, info.head_dim, o->tokens, &c)) goto out;
    c->n = o->tokens;
    for (int i = 0; i < c->n; i++) c->pos[i] = i;
    if (scdb_put_cache(h, t, (size_t)o->tokens, c, NULL)) goto out;
    scdb_kv_cache_free(&c);

    prompt(t, big_tokens, 2);
    if (scdb_register(h, SCDB_PRODUCER, "big", NULL, &info)) goto out;
    if (scdb_kv_cache_new(info.n_layers, info.n_kv_heads, info.head_dim, big_tokens, &c)) goto out;
    c->n = big_tokens;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < big_tokens; i++)
            for (int j = 0; j < scdb_kv_dim(c); j++) {
                scdb_kv_k(c, l, i)[j] = (float)(l + i + j) * 0.001f;
                scdb_kv_v(c, l, i)[j] = (float)(l - i + j) * 0.002f;
            }
    for (int i = 0; i < c->n; i++) c->pos[i] = i;
    if (scdb_put_cache(h, t, (size_t)big_tokens, c, NULL)) goto out;
    rc = 0;
out:
    if (rc && h) fprintf(stderr, "bench broker: populate: %s\n", scdb_last_error(h));
    scdb_kv_cache_free(&c);
    scdb_close(&h);
    free(t);
    return rc;
}

/* One client process: wait for "go" (EOF on go_fd), look up for `seconds`,
 * write latencies (float µs) to path.  Exit 0 on success. */
static int lookup_client(const opts *o, int go_fd, const char *path)
{
    scdb *h = connect_retry(10, o->request_path);
    int32_t *t = malloc(sizeof *t * (size_t)o->tokens);
    scdb_stat st;
    size_t cap = 1 << 20, n = 0;
    float *lat = malloc(cap * sizeof *lat);
    char ch;
    double until;
    FILE *f;

    if (!h || !t || !lat || scdb_register(h, SCDB_CONSUMER, "small", NULL, NULL)) return 1;
    prompt(t, o->tokens, 1);
    while (read(go_fd, &ch, 1) > 0) {}
    until = scdb_now() + o->seconds;
    while (scdb_now() < until) {
        scdb_lookup_result r;
        uint64_t t0 = scdb_now_ns();
        if (scdb_lookup(h, t, (size_t)o->tokens, &r) || r.matched_tokens == 0) return 1;
        if (n == cap) {
            float *g = realloc(lat, (cap *= 2) * sizeof *lat);
            if (!g) return 1;
            lat = g;
        }
        lat[n++] = (float)((scdb_now_ns() - t0) / 1e3);
    }
    /* every lookup took the path this run measures */
    if (scdb_stats(h, &st) ||
        (o->request_path ? st.index_lookups != 0 || st.request_lookups != n
                         : st.request_lookups != 0 || st.index_lookups != n)) {
        fprintf(stderr, "bench broker: lookups took the wrong path (%llu index, %llu request, "
                "index: %s)\n", (unsigned long long)st.index_lookups,
                (unsigned long long)st.request_lookups, scdb_strerror(st.index_error));
        return 1;
    }
    scdb_close(&h);
    f = fopen(path, "wb");
    if (!f || fwrite(lat, sizeof *lat, n, f) != n) return 1;
    fclose(f);
    return 0;
}

static lat_result run_lookups(const opts *o, int clients, pid_t broker)
{
    double cpu0 = cpu_seconds(broker);
    lat_result res = {0};
    int go[2];
    pid_t *pids = calloc((size_t)clients, sizeof *pids);
    float *all = NULL;
    size_t n_all = 0;
    double t0, wall;
    int ok = 1;

    if (!pids || pipe(go)) return res;
    for (int i = 0; i < clients; i++) {
        char path[200];
        snprintf(path, sizeof path, "%s/lat.%d", dir, i);
        pids[i] = fork();
        if (pids[i] == 0) {
            close(go[1]);
            _exit(lookup_client(o, go[0], path));
        }
    }
    close(go[0]);
    usleep(300000);                       /* let them connect and register */
    t0 = scdb_now();
    close(go[1]);
    for (int i = 0; i < clients; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) ok = 0;
    }
    wall = scdb_now() - t0;
    res.server_cpu_s = cpu_seconds(broker) - cpu0;
    for (int i = 0; ok && i < clients; i++) {
        char path[200];
        struct stat sst;
        FILE *f;
        snprintf(path, sizeof path, "%s/lat.%d", dir, i);
        if (stat(path, &sst) || !(f = fopen(path, "rb"))) {
            ok = 0;
            break;
        }
        size_t k = (size_t)sst.st_size / sizeof(float);
        float *g = realloc(all, (n_all + k + 1) * sizeof *all);
        if (!g || fread(g + n_all, sizeof *g, k, f) != k) ok = 0;
        if (g) all = g;
        n_all += k;
        fclose(f);
        unlink(path);
    }
    if (ok && n_all) {
        double sum = 0;
        qsort(all, n_all, sizeof *all, cmp_float);
        for (size_t i = 0; i < n_all; i++) sum += all[i];
        res.ops = (long)n_all;
        /* every client ran `seconds` after the same start */
        res.ops_s = (double)n_all / (wall > o->seconds ? o->seconds : wall);
        res.p50_us = all[n_all / 2];
        res.p99_us = all[(size_t)((double)n_all * 0.99)];
        res.mean_us = sum / (double)n_all;
        res.ok = 1;
    }
    free(all);
    free(pids);
    return res;
}

/* ------------------------------------------------------------- redis */

static int find_exe(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char buf[4096];
    if (!path) path = "/usr/bin:/bin";
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return 1;
    }
    return 0;
}

/* redis-benchmark -t get over the unix socket; CSV: "GET","rps",avg,min,p50,p95,p99,max */
static lat_result redis_get(const char *bench_exe, const char *sock, int clients, double seconds,
                            pid_t server)
{
    lat_result r = {0};
    double cpu0 = cpu_seconds(server);
    char cmd[1024], line[512];
    long n = (long)(40000 * seconds * (clients > 1 ? 2 : 1));
    FILE *p;

    snprintf(cmd, sizeof cmd, "'%s' -s '%s' -t get -n %ld -c %d --csv 2>/dev/null", bench_exe,
             sock, n, clients);
    p = popen(cmd, "r");
    if (!p) return r;
    while (fgets(line, sizeof line, p)) {
        double v[7] = {0};
        if (strncmp(line, "\"GET\"", 5)) continue;
        if (sscanf(line, "\"GET\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) >= 1) {
            r.ops_s = v[0];
            r.mean_us = v[1] * 1e3;
            r.p50_us = v[3] * 1e3;
            r.p99_us = v[5] * 1e3;
            r.ops = n;
            r.ok = 1;
        }
    }
    pclose(p);
    r.server_cpu_s = cpu_seconds(server) - cpu0;
    return r;
}

static int run_redis(const opts *o, lat_result *one, lat_result *many, char *why, size_t wlen)
{
    char server[512], bench[512], sock[200], sockopt[220];
    pid_t pid;
    double until;

    if (!find_exe("redis-server", server, sizeof server) ||
        !find_exe("redis-benchmark", bench, sizeof bench)) {
        snprintf(why, wlen, "redis-server or redis-benchmark not found (Debian: redis-server, "
                 "redis-tools): Redis column skipped");
        return -1;
    }
    snprintf(sock, sizeof sock, "%s/redis.sock", dir);
    snprintf(sockopt, sizeof sockopt, "%s", sock);
    pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(server, "redis-server", "--port", "0", "--unixsocket", sockopt, "--unixsocketperm",
              "700", "--save", "", "--appendonly", "no", "--dir", dir, (char *)NULL);
        _exit(127);
    }
    until = scdb_now() + 10;
    while (access(sock, F_OK)) {
        int st;
        if (scdb_now() > until || waitpid(pid, &st, WNOHANG) == pid) {
            snprintf(why, wlen, "redis-server did not start: Redis column skipped");
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        usleep(20000);
    }
    usleep(100000);
    *one = redis_get(bench, sock, 1, o->seconds, pid);
    *many = redis_get(bench, sock, o->clients, o->seconds, pid);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    if (!one->ok || !many->ok) {
        snprintf(why, wlen, "could not parse redis-benchmark's output: Redis column skipped");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- get */

static int run_get(const opts *o, int big_tokens, double *get_gbps, double *memcpy_gbps,
                   double *decode_gbps, size_t *bytes_out)
{
    scdb *h = connect_retry(10, 1);
    scdb_arena *a = NULL;
    int32_t *t = malloc(sizeof *t * (size_t)big_tokens);
    scdb_get_result r;
    size_t bytes;
    double t0, el = 0, dec = 0, mem = 0;
    long n = 0;
    char *src = NULL, *dst = NULL;
    int rc = -1;

    if (!h || !t || scdb_register(h, SCDB_CONSUMER, "big", NULL, NULL)) goto out;
    prompt(t, big_tokens, 2);
    if (scdb_arena_new(h, big_tokens, &a)) goto out;
    /* warm-up: the first get faults the arena's pages into the broker */
    if (scdb_get(h, t, (size_t)big_tokens, a, 0, 0, &r) || (int)r.tokens_written != big_tokens)
        goto out;
    bytes = (size_t)big_tokens * 2 * 16 * 8 * 128 * sizeof(float);
    src = malloc(bytes);
    dst = malloc(bytes);
    if (!src || !dst) goto out;
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    /* alternate one get and one memcpy of the same bytes, so that both see
     * the same machine (a shared, busy one included) */
    t0 = scdb_now();
    do {
        double a0 = scdb_now(), a1;
        scdb_arena_cache(a)->n = 0;
        if (scdb_get(h, t, (size_t)big_tokens, a, 0, 0, &r)) goto out;
        a1 = scdb_now();
        el += a1 - a0;
        dec += r.decode_ns / 1e9;
        src[(size_t)n % bytes] = (char)n;
        memcpy(dst, src, bytes);
        mem += scdb_now() - a1;
        n++;
    } while (scdb_now() - t0 < 2 * o->seconds || n < 3);
    *get_gbps = (double)bytes * (double)n / el / 1e9;
    *decode_gbps = (double)bytes * (double)n / dec / 1e9;
    *memcpy_gbps = (double)bytes * (double)n / mem / 1e9;
    *bytes_out = bytes;
    if (dst[0] == 42) fprintf(stderr, " ");      /* keep the copies */
    rc = 0;
out:
    if (rc && h) fprintf(stderr, "bench broker: get: %s\n", scdb_last_error(h));
    free(src);
    free(dst);
    scdb_arena_free(&a);
    scdb_close(&h);
    free(t);
    return rc;
}

/* ------------------------------------------------------------- main */

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench broker [--json FILE] [--clients N] [--seconds S] [--tokens T]\n"
"                         [--get-mb M]\n\n"
"Starts a broker on a temp dir and measures, in the same run:\n"
"  lookups from 1 and N client processes (ops/s, p50/p99 µs) on a T-token\n"
"  prompt, answered from the broker's shared-memory lookup index and, again,\n"
"  forced through requests (round trips), against redis-benchmark -t get on a\n"
"  redis-server it starts\n"
"  on a temp unix socket (skipped, with a note, if Redis is not installed);\n"
"  get throughput: raw F32 KV of a 16-layer, 8x128 KV-head model decoded into\n"
"  a shared-memory arena, M MiB per get, against memcpy of the same bytes.\n\n"
"options:\n"
"  --json FILE    also write the results as JSON\n"
"  --clients N    client processes for the concurrent run (default 8)\n"
"  --seconds S    per measurement (default 3)\n"
"  --tokens T     lookup prompt length (default 512)\n"
"  --get-mb M     KV bytes per get, in MiB (default 64)\n"
"Goals: N-client lookup ops/s >= Redis GET, p99 < 1 ms, get >= 50%% of memcpy.\n"
"exit codes: 0 measured, 1 a phase failed, 2 usage error.\n");
}

int scdb_bench_broker(int argc, char **argv)
{
    opts o = {.json = NULL, .clients = 8, .tokens = 512, .get_mb = 64, .seconds = 3};
    lat_result l1 = {0}, ln = {0}, q1 = {0}, qn = {0}, r1 = {0}, rn = {0};
    double get_gbps = 0, memcpy_gbps = 0, decode_gbps = 0;
    size_t get_bytes = 0;
    char why[256] = "";
    int have_redis, big_tokens, rc = 0, st;
    pid_t broker;

    for (int i = 1; i < argc; i += 2) {   /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        scdb_err e = SCDB_OK;
        if (!v) goto bad;
        if (!strcmp(a, "--json")) o.json = v;
        else if (!strcmp(a, "--clients")) e = scdb_parse_int(a, v, 1, 256, &o.clients, why, sizeof why);
        else if (!strcmp(a, "--seconds")) e = scdb_parse_f64(a, v, DBL_MIN, 1e9, &o.seconds, why, sizeof why);
        else if (!strcmp(a, "--tokens")) e = scdb_parse_int(a, v, 64, 65536, &o.tokens, why, sizeof why);
        else if (!strcmp(a, "--get-mb")) e = scdb_parse_int(a, v, 1, 4096, &o.get_mb, why, sizeof why);
        else goto bad;
        if (e) {
            fprintf(stderr, "bench broker: %s\n", why);
            return 2;
        }
    }
    if (o.clients < 1 || o.clients > 256 || o.seconds <= 0 || o.tokens < 64 ||
        o.tokens > 65536 || o.get_mb < 1 || o.get_mb > 4096)
        goto bad;
    /* 128 KiB of F32 KV per token; whole 64-token blocks */
    big_tokens = (int)((size_t)o.get_mb * 8 / 64 * 64);
    if (big_tokens < 64) big_tokens = 64;

    snprintf(dir, sizeof dir, "/tmp/bench_broker.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("bench broker: mkdtemp");
        return 1;
    }
    snprintf(endpoint, sizeof endpoint, "ipc://%s/broker.sock", dir);
    fprintf(stderr, "bench broker: broker in %s\n", dir);
    broker = start_broker(&o);
    if (broker < 0 || populate(&o, big_tokens)) {
        rc = 1;
        goto stop;
    }
    fprintf(stderr, "bench broker: lookups through the index, 1 client ...\n");
    l1 = run_lookups(&o, 1, broker);
    fprintf(stderr, "bench broker: lookups through the index, %d clients ...\n", o.clients);
    ln = run_lookups(&o, o.clients, broker);
    o.request_path = 1;
    fprintf(stderr, "bench broker: lookups through requests, 1 client ...\n");
    q1 = run_lookups(&o, 1, broker);
    fprintf(stderr, "bench broker: lookups through requests, %d clients ...\n", o.clients);
    qn = run_lookups(&o, o.clients, broker);
    o.request_path = 0;
    fprintf(stderr, "bench broker: redis ...\n");
    have_redis = run_redis(&o, &r1, &rn, why, sizeof why) == 0;
    if (!have_redis) fprintf(stderr, "bench broker: %s\n", why);
    fprintf(stderr, "bench broker: get into shared memory vs memcpy ...\n");
    if (run_get(&o, big_tokens, &get_gbps, &memcpy_gbps, &decode_gbps, &get_bytes)) rc = 1;
    if (!l1.ok || !ln.ok || !q1.ok || !qn.ok) rc = 1;

    printf("\n## scdb bench broker (%d-token lookups, %.1f s per measurement)\n\n", o.tokens,
           o.seconds);
    printf("scdb index = scdb_lookup answered from the broker's shared-memory lookup index "
           "(the default);\nscdb request = forced through a request to the broker "
           "(no_lookup_index).\n\n");
    printf("| measure | scdb index | scdb request | Redis GET | index / Redis | "
           "request / Redis |\n|---|---|---|---|---|---|\n");
#define ROW(name, a, q, b, fmt)                                                               \
    do {                                                                                      \
        if (have_redis)                                                                       \
            printf("| %s | " fmt " | " fmt " | " fmt " | %.2f | %.2f |\n", name, a, q, b,       \
                   b > 0 ? a / b : 0.0, b > 0 ? q / b : 0.0);                                  \
        else                                                                                  \
            printf("| %s | " fmt " | " fmt " | (skipped) | | |\n", name, a, q);                 \
    } while (0)
    {
        char nops[64], np50[64], np99[64];
        snprintf(nops, sizeof nops, "ops/s, %d clients", o.clients);
        snprintf(np50, sizeof np50, "p50 µs, %d clients", o.clients);
        snprintf(np99, sizeof np99, "p99 µs, %d clients", o.clients);
        ROW("ops/s, 1 client", l1.ops_s, q1.ops_s, r1.ops_s, "%.0f");
        ROW("p50 µs, 1 client", l1.p50_us, q1.p50_us, r1.p50_us, "%.1f");
        ROW("p99 µs, 1 client", l1.p99_us, q1.p99_us, r1.p99_us, "%.1f");
        ROW(nops, ln.ops_s, qn.ops_s, rn.ops_s, "%.0f");
        ROW(np50, ln.p50_us, qn.p50_us, rn.p50_us, "%.1f");
        ROW(np99, ln.p99_us, qn.p99_us, rn.p99_us, "%.1f");
    }
#undef ROW
    /* the index path costs the server (almost) nothing: CPU seconds, and
     * lookups per server CPU-second where the server does the work */
    printf("| server CPU s, N clients | %.2f | %.2f | %.2f | | |\n", ln.server_cpu_s,
           qn.server_cpu_s, have_redis ? rn.server_cpu_s : 0.0);
    printf("| ops per server CPU-second, N clients | - | %.0f | %.0f | | %.2f |\n",
           qn.server_cpu_s > 0 ? (double)qn.ops / qn.server_cpu_s : 0.0,
           rn.server_cpu_s > 0 ? (double)rn.ops / rn.server_cpu_s : 0.0,
           rn.server_cpu_s > 0 && qn.server_cpu_s > 0
               ? ((double)qn.ops / qn.server_cpu_s) / ((double)rn.ops / rn.server_cpu_s)
               : 0.0);
    printf("\n| get (raw F32 KV into the arena) | GB/s |\n|---|---|\n");
    printf("| scdb get, %.0f MiB per call, round trip | %.2f |\n", get_bytes / 1048576.0, get_gbps);
    printf("| scdb get, broker decode time only | %.2f |\n", decode_gbps);
    printf("| memcpy of the same bytes | %.2f |\n", memcpy_gbps);
    printf("| get / memcpy | %.2f |\n", memcpy_gbps > 0 ? get_gbps / memcpy_gbps : 0);
    printf("\ngoals (default path, the index): %d-client lookup ops/s >= Redis GET: %s; "
           "p99 < 1 ms: %s (%.0f µs); get >= 50%% of memcpy: %s (%.0f%%)\n",
           o.clients, have_redis ? (ln.ops_s >= rn.ops_s ? "met" : "NOT met") : "n/a",
           ln.p99_us < 1000 ? "met" : "NOT met", ln.p99_us,
           memcpy_gbps > 0 && get_gbps >= 0.5 * memcpy_gbps ? "met" : "NOT met",
           memcpy_gbps > 0 ? 100 * get_gbps / memcpy_gbps : 0);
    if (!have_redis) printf("note: %s\n", why);

    if (o.json) {
        FILE *f = fopen(o.json, "w");
        if (!f) {
            perror(o.json);
            rc = 1;
        } else {
            fprintf(f,
                    "{\"bench\": \"broker\", \"clients\": %d, \"seconds\": %.2f, \"tokens\": %d,\n"
                    " \"lookup_ops_s\": %.1f, \"lookup_p50_us\": %.2f, \"lookup_p99_us\": %.2f,\n"
                    " \"lookup_ops_s_1\": %.1f, \"lookup_p50_us_1\": %.2f, \"lookup_p99_us_1\": %.2f,\n",
                    o.clients, o.seconds, o.tokens, ln.ops_s, ln.p50_us, ln.p99_us, l1.ops_s,
                    l1.p50_us, l1.p99_us);
            fprintf(f,
                    " \"lookup_path\": \"index\",\n"
                    " \"request_lookup_ops_s\": %.1f, \"request_lookup_p50_us\": %.2f,"
                    " \"request_lookup_p99_us\": %.2f,\n"
                    " \"request_lookup_ops_s_1\": %.1f, \"request_lookup_p50_us_1\": %.2f,"
                    " \"request_lookup_p99_us_1\": %.2f,\n",
                    qn.ops_s, qn.p50_us, qn.p99_us, q1.ops_s, q1.p50_us, q1.p99_us);
            fprintf(f, " \"lookup_server_cpu_s\": %.3f, \"request_lookup_ops_per_server_cpu_s\": %.1f,\n",
                    ln.server_cpu_s, qn.server_cpu_s > 0 ? (double)qn.ops / qn.server_cpu_s : 0.0);
            if (have_redis)
                fprintf(f,
                        " \"redis_get_ops_s\": %.1f, \"redis_p50_us\": %.2f, \"redis_p99_us\": %.2f,\n"
                        " \"redis_get_ops_s_1\": %.1f, \"redis_ops_per_server_cpu_s\": %.1f,\n",
                        rn.ops_s, rn.p50_us, rn.p99_us, r1.ops_s,
                        rn.server_cpu_s > 0 ? (double)rn.ops / rn.server_cpu_s : 0.0);
            else
                fprintf(f, " \"redis_get_ops_s\": null, \"redis_note\": \"%s\",\n", why);
            fprintf(f,
                    " \"get_gbps\": %.3f, \"get_decode_gbps\": %.3f, \"memcpy_gbps\": %.3f,\n"
                    " \"get_bytes\": %zu}\n",
                    get_gbps, decode_gbps, memcpy_gbps, get_bytes);
            fclose(f);
        }
    }
stop:
    if (broker > 0 && (st = scdb_bench_stop_broker(broker, SIGTERM)) != 0) {
        fprintf(stderr, "bench broker: broker exited badly (%d)\n", st);
        rc = 1;
    }
    if (scdb_rm_tree(dir)) fprintf(stderr, "bench broker: could not remove %s\n", dir);
    return rc;
bad:
    usage(stderr);
    return 2;
}
