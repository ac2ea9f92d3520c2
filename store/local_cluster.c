/* local_cluster.c — see local_cluster.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "local_cluster.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scdb_common.h"

#define LC_MAX_NODES 32
#define LC_PORT_LO 20000 /* below Linux's ephemeral range (32768-60999) */
#define LC_PORT_HI 32000
#define LC_SLOTS 16384

typedef struct lc_node {
    int port, bus_port;
    pid_t pid; /* 0: not running */
    char dir[512];
} lc_node;

struct lc_cluster {
    char root[400];
    char server[512], cli[512];
    int n, masters, replicas, node_timeout_ms;
    lc_node nodes[LC_MAX_NODES];
    int guard_fd;
    pid_t guard_pid;
    char seeds[LC_MAX_NODES * 24];
};

static void why_set(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (!why || !len) return;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

static bool find_exe(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        if (n > 0 && n + strlen(name) + 2 <= len) {
            snprintf(out, len, "%.*s/%s", (int)n, path, name);
            if (access(out, X_OK) == 0) return true;
        }
        path += n;
        if (*path == ':') path++;
    }
    return false;
}

bool lc_available(char *why, size_t why_len)
{
    char a[512], b[512];
    if (find_exe("redis-server", a, sizeof a) && find_exe("redis-cli", b, sizeof b)) return true;
    why_set(why, why_len, "redis-server or redis-cli not found on PATH (Debian: redis-server, "
            "redis-tools; scripts/install-deps.sh --test installs them)");
    return false;
}

/* ---------------------------------------------------------------- cleanup */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Is pid a redis-server (not a recycled pid of something else)? */
static bool is_redis(pid_t pid)
{
    char p[64], buf[64] = {0};
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n > 0 && strstr(buf, "redis-server") != NULL;
}

/* The guardian: wait for the test's pipe to close, then kill the pids the
 * nodes' pid files name and remove the root. */
static void guardian(int rfd, const char *root)
{
    char b;
    for (;;) { /* nothing is ever written: this returns at EOF */
        ssize_t r = read(rfd, &b, 1);
        if (r == 0 || (r < 0 && errno != EINTR)) break;
    }
    DIR *d = opendir(root);
    if (!d) _exit(0);
    struct dirent *e;
    pid_t pids[LC_MAX_NODES];
    int np = 0;
    while ((e = readdir(d)) && np < LC_MAX_NODES) {
        if (strncmp(e->d_name, "node", 4)) continue;
        char pf[1024];
        snprintf(pf, sizeof pf, "%s/%s/pid", root, e->d_name);
        FILE *f = fopen(pf, "r");
        int pid = 0;
        if (f) {
            if (fscanf(f, "%d", &pid) != 1) pid = 0;
            fclose(f);
        }
        if (pid > 0 && is_redis(pid)) {
            kill(pid, SIGKILL);
            pids[np++] = pid;
        }
    }
    closedir(d);
    for (int i = 0; i < np; i++) /* let them go before removing their files */
        for (int t = 0; t < 200 && is_redis(pids[i]); t++) nap_ms(10);
    const char *keep = getenv("SCDB_TEST_KEEP_CLUSTER");
    if (!keep || strcmp(keep, "1")) rm_rf(root);
    _exit(0);
}

static int start_guardian(lc_cluster *c)
{
    int p[2];
    if (pipe(p) < 0) return -1;
    fcntl(p[0], F_SETFD, FD_CLOEXEC);
    fcntl(p[1], F_SETFD, FD_CLOEXEC);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        setsid(); /* survives a kill of the test's process group */
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 1);
            dup2(dn, 2);
        }
        for (int fd = 3; fd < 1024; fd++)
            if (fd != p[0]) close(fd);
        guardian(p[0], c->root);
    }
    close(p[0]);
    c->guard_fd = p[1];
    c->guard_pid = pid;
    return 0;
}

/* ---------------------------------------------------------------- nodes */

static uint64_t rng_state;

static uint64_t rng(void)
{
    if (!rng_state) rng_state = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(now_s() * 1e9);
    return scdb_splitmix64(&rng_state);
}

static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static bool port_taken_here(const lc_cluster *c, int port, int except)
{
    for (int i = 0; i < c->n; i++)
        if (i != except && (c->nodes[i].port == port || c->nodes[i].bus_port == port)) return true;
    return false;
}

static int pick_port(const lc_cluster *c, int except)
{
    for (int t = 0; t < 1000; t++) {
        int p = LC_PORT_LO + (int)(rng() % (LC_PORT_HI - LC_PORT_LO));
        if (!port_taken_here(c, p, except) && port_free(p)) return p;
    }
    return -1;
}

static pid_t spawn(const char *exe, char *const argv[], const char *cwd, const char *log)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (cwd && chdir(cwd) < 0) _exit(126);
    int dn = open("/dev/null", O_RDONLY);
    int lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (dn >= 0) dup2(dn, 0);
    if (lf >= 0) {
        dup2(lf, 1);
        dup2(lf, 2);
    }
    for (int fd = 3; fd < 1024; fd++) close(fd); /* the guardian's pipe above all */
    execv(exe, argv);
    _exit(127);
}

static bool answers_ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = false;
    if (ctx && !ctx->err) {
        redisSetTimeout(ctx, tv);
        redisReply *r = redisCommand(ctx, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
        if (r) freeReplyObject(r);
    }
    if (ctx) redisFree(ctx);
    return ok;
}

static bool log_says(const lc_node *nd, const char *what)
{
    char p[600];
    snprintf(p, sizeof p, "%s/server.log", nd->dir);
    FILE *f = fopen(p, "r");
    if (!f) return false;
    char line[1024];
    bool hit = false;
    while (!hit && fgets(line, sizeof line, f)) hit = strstr(line, what) != NULL;
    fclose(f);
    return hit;
}

/* Start node i on its ports and wait for PING.  1: the port was lost to a
 * race (pick new ones and retry); 0 ok; -1 failed. */
static int start_node(lc_cluster *c, int i, char *why, size_t why_len)
{
    lc_node *nd = &c->nodes[i];
    char port[16], bus[16], nto[16], log[600], pidf[600];
    snprintf(port, sizeof port, "%d", nd->port);
    snprintf(bus, sizeof bus, "%d", nd->bus_port);
    snprintf(nto, sizeof nto, "%d", c->node_timeout_ms);
    snprintf(log, sizeof log, "%s/server.log", nd->dir);
    char *argv[] = {"redis-server",
                    "--port", port, "--bind", "127.0.0.1",
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-port", bus, "--cluster-node-timeout", nto,
                    "--cluster-require-full-coverage", "no",
                    "--cluster-replica-validity-factor", "0",
                    "--cluster-allow-replica-migration", "no",
                    "--save", "", "--appendonly", "no",
                    "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                    "--dir", nd->dir, "--daemonize", "no", "--logfile", "",
                    NULL};
    pid_t pid = spawn(c->server, argv, nd->dir, log);
    if (pid < 0) {
        why_set(why, why_len, "fork: %s", strerror(errno));
        return -1;
    }
    nd->pid = pid;
    snprintf(pidf, sizeof pidf, "%s/pid", nd->dir);
    FILE *f = fopen(pidf, "w");
    if (f) {
        fprintf(f, "%d\n", (int)pid);
        fclose(f);
    }
    double deadline = now_s() + 20;
    while (now_s() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            nd->pid = 0;
            if (log_says(nd, "Address already in use")) return 1;
            why_set(why, why_len, "redis-server on port %d exited (status %d); see %s", nd->port,
                    WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), log);
            return -1;
        }
        if (answers_ping(nd->port)) return 0;
        nap_ms(10);
    }
    why_set(why, why_len, "redis-server on port %d did not answer PING in 20 s", nd->port);
    return -1;
}

pid_t lc_spawn_cli(lc_cluster *c, char *const argv[], const char *log_name)
{
    char log[600];
    snprintf(log, sizeof log, "%s/%s", c->root, log_name);
    return spawn(c->cli, argv, c->root, log);
}

/* Run redis-cli with argv; wait up to timeout_s; its exit status or -1. */
static int run_cli(lc_cluster *c, char *const argv[], const char *log, double timeout_s)
{
    pid_t pid = spawn(c->cli, argv, c->root, log);
    if (pid < 0) return -1;
    double deadline = now_s() + timeout_s;
    int st;
    while (now_s() < deadline) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        nap_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

int lc_start(const lc_options *o, lc_cluster **out, char *why, size_t why_len)
{
    lc_options d = {0};
    if (!o) o = &d;
    *out = NULL;
    if (!lc_available(why, why_len)) return LC_SKIP;
    lc_cluster *c = calloc(1, sizeof *c);
    if (!c) return LC_FAIL;
    c->guard_fd = -1;
    c->masters = o->masters > 0 ? o->masters : 3;
    c->replicas = o->replicas < 0 ? 0 : o->replicas > 0 ? o->replicas : 1;
    c->node_timeout_ms = o->node_timeout_ms > 0 ? o->node_timeout_ms : 5000;
    c->n = c->masters * (1 + c->replicas);
    if (c->n > LC_MAX_NODES || c->masters < 3) {
        why_set(why, why_len, "%d nodes: the helper supports 3+ masters, %d nodes at most", c->n,
                LC_MAX_NODES);
        free(c);
        return LC_FAIL;
    }
    find_exe("redis-server", c->server, sizeof c->server);
    find_exe("redis-cli", c->cli, sizeof c->cli);
    const char *tmp = getenv("TMPDIR");
    snprintf(c->root, sizeof c->root, "%s/scdb-rc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(c->root)) {
        why_set(why, why_len, "mkdtemp %s: %s", c->root, strerror(errno));
        free(c);
        return LC_FAIL;
    }
    if (start_guardian(c) < 0) {
        why_set(why, why_len, "cannot start the cleanup guardian: %s", strerror(errno));
        rm_rf(c->root);
        free(c);
        return LC_FAIL;
    }
    size_t off = 0;
    for (int i = 0; i < c->n; i++) {
        lc_node *nd = &c->nodes[i];
        char dir[sizeof nd->dir]; /* (not straight into nd->dir: same object as c->root) */
        snprintf(dir, sizeof dir, "%s/node%d", c->root, i);
        memcpy(nd->dir, dir, sizeof dir);
        if (mkdir(nd->dir, 0755) < 0) {
            why_set(why, why_len, "mkdir %s: %s", nd->dir, strerror(errno));
            goto fail;
        }
        int r = 1;
        for (int attempt = 0; attempt < 8 && r == 1; attempt++) {
            nd->port = pick_port(c, i);
            nd->bus_port = -1;
            nd->bus_port = pick_port(c, i);
            if (nd->port < 0 || nd->bus_port < 0) {
                why_set(why, why_len, "no free loopback port found");
                goto fail;
            }
            r = start_node(c, i, why, why_len);
        }
        if (r != 0) {
            if (r == 1) why_set(why, why_len, "ports kept being taken by others");
            goto fail;
        }
        char one[32];
        int w = snprintf(one, sizeof one, "%s127.0.0.1:%d", i ? "," : "", nd->port);
        memcpy(c->seeds + off, one, (size_t)w + 1);
        off += (size_t)w;
    }
    /* redis-cli --cluster create 127.0.0.1:p0 ... --cluster-replicas R --cluster-yes */
    char *argv[LC_MAX_NODES + 8];
    char addrs[LC_MAX_NODES][24], reps[8], log[512];
    int a = 0;
    argv[a++] = "redis-cli";
    argv[a++] = "--cluster";
    argv[a++] = "create";
    for (int i = 0; i < c->n; i++) {
        snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%d", c->nodes[i].port);
        argv[a++] = addrs[i];
    }
    snprintf(reps, sizeof reps, "%d", c->replicas);
    argv[a++] = "--cluster-replicas";
    argv[a++] = reps;
    argv[a++] = "--cluster-yes";
    argv[a] = NULL;
    snprintf(log, sizeof log, "%s/create.log", c->root);
    int st = run_cli(c, argv, log, 60);
    if (st != 0) {
        why_set(why, why_len, "redis-cli --cluster create failed (status %d); see %s", st, log);
        goto fail;
    }
    if (lc_wait_ready(c, 60000, why, why_len) != LC_OK) goto fail;
    *out = c;
    return LC_OK;
fail:
    lc_stop(&c);
    return LC_FAIL;
}

void lc_stop(lc_cluster **pc)
{
    if (!pc || !*pc) return;
    lc_cluster *c = *pc;
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].pid > 0) {
            kill(c->nodes[i].pid, SIGKILL);
            waitpid(c->nodes[i].pid, NULL, 0);
            c->nodes[i].pid = 0;
        }
    const char *keep = getenv("SCDB_TEST_KEEP_CLUSTER");
    if (keep && !strcmp(keep, "1"))
        fprintf(stderr, "local_cluster: kept %s (SCDB_TEST_KEEP_CLUSTER=1)\n", c->root);
    else
        rm_rf(c->root);
    if (c->guard_fd >= 0) close(c->guard_fd); /* the guardian finds nothing left */
    if (c->guard_pid > 0) waitpid(c->guard_pid, NULL, 0);
    free(c);
    *pc = NULL;
}

int lc_size(const lc_cluster *c) { return c->n; }
int lc_port(const lc_cluster *c, int i) { return c->nodes[i].port; }
bool lc_alive(const lc_cluster *c, int i) { return c->nodes[i].pid > 0; }
const char *lc_dir(const lc_cluster *c) { return c->root; }
const char *lc_seeds(const lc_cluster *c) { return c->seeds; }

int lc_index_of_port(const lc_cluster *c, int port)
{
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].port == port) return i;
    return -1;
}

int lc_signal(lc_cluster *c, int i, int sig)
{
    lc_node *nd = &c->nodes[i];
    if (nd->pid <= 0) return -1;
    if (kill(nd->pid, sig) < 0) return -1;
    if (sig == SIGKILL) {
        waitpid(nd->pid, NULL, 0);
        nd->pid = 0;
    }
    return 0;
}

int lc_restart(lc_cluster *c, int i, char *why, size_t why_len)
{
    if (c->nodes[i].pid > 0) return LC_OK;
    int r = start_node(c, i, why, why_len);
    if (r == 1) why_set(why, why_len, "port %d was taken while node %d was down", c->nodes[i].port, i);
    return r == 0 ? LC_OK : LC_FAIL;
}

redisReply *lc_cmd(lc_cluster *c, int i, const char *fmt, ...)
{
    if (c->nodes[i].pid <= 0) return NULL;
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", c->nodes[i].port, tv);
    if (!ctx || ctx->err) {
        if (ctx) redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

/* Slot -> master port from node i's CLUSTER SLOTS; false if unreachable. */
static bool slot_owners(lc_cluster *c, int i, int *owner)
{
    redisReply *r = lc_cmd(c, i, "CLUSTER SLOTS");
    if (!r) return false;
    bool ok = r->type == REDIS_REPLY_ARRAY;
    for (int s = 0; s < LC_SLOTS; s++) owner[s] = -1;
    for (size_t k = 0; ok && k < r->elements; k++) {
        redisReply *g = r->element[k];
        if (g->type != REDIS_REPLY_ARRAY || g->elements < 3 || g->element[2]->type != REDIS_REPLY_ARRAY ||
            g->element[2]->elements < 2) {
            ok = false;
            break;
        }
        long long s0 = g->element[0]->integer, s1 = g->element[1]->integer;
        for (long long s = s0; s <= s1 && s < LC_SLOTS; s++)
            owner[s] = (int)g->element[2]->element[1]->integer;
    }
    freeReplyObject(r);
    return ok;
}

int lc_wait_ready(lc_cluster *c, int timeout_ms, char *why, size_t why_len)
{
    static int ref[LC_SLOTS], own[LC_SLOTS];
    double deadline = now_s() + timeout_ms / 1000.0;
    char last[256] = "";
    for (;;) {
        bool ok = true, have_ref = false;
        for (int i = 0; i < c->n && ok; i++) {
            if (c->nodes[i].pid <= 0) continue;
            redisReply *r = lc_cmd(c, i, "CLUSTER INFO");
            ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
            if (r) freeReplyObject(r);
            if (!ok) {
                snprintf(last, sizeof last, "node %d (port %d): cluster_state not ok", i, c->nodes[i].port);
                break;
            }
            if (!slot_owners(c, i, have_ref ? own : ref)) {
                ok = false;
                snprintf(last, sizeof last, "node %d: no CLUSTER SLOTS", i);
                break;
            }
            int *m = have_ref ? own : ref;
            for (int s = 0; s < LC_SLOTS && ok; s++) {
                int idx = lc_index_of_port(c, m[s]);
                if (m[s] < 0 || idx < 0 || c->nodes[idx].pid <= 0) {
                    ok = false;
                    snprintf(last, sizeof last, "node %d: slot %d served by %d (not a live node)", i, s, m[s]);
                } else if (have_ref && m[s] != ref[s]) {
                    ok = false;
                    snprintf(last, sizeof last, "nodes disagree about slot %d", s);
                }
            }
            have_ref = true;
            if (!ok) break;
            r = lc_cmd(c, i, "ROLE");
            if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 4 &&
                r->element[0]->type == REDIS_REPLY_STRING && !strcmp(r->element[0]->str, "slave")) {
                ok = r->element[3]->type == REDIS_REPLY_STRING && !strcmp(r->element[3]->str, "connected");
                if (!ok) snprintf(last, sizeof last, "replica %d: link to its master not up", i);
            } else if (!r || r->type != REDIS_REPLY_ARRAY) {
                ok = false;
                snprintf(last, sizeof last, "node %d: no ROLE", i);
            }
            if (r) freeReplyObject(r);
        }
        if (ok) return LC_OK;
        if (now_s() > deadline) {
            why_set(why, why_len, "cluster not ready after %d ms: %s", timeout_ms, last);
            return LC_FAIL;
        }
        nap_ms(20);
    }
}

/* ROLE of node i: is it a master (its offset), or a replica (its master's
 * port and its own processed offset)? */
static bool role_of(lc_cluster *c, int i, bool *master, long long *offset, int *master_port)
{
    redisReply *r = lc_cmd(c, i, "ROLE");
    bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
              r->element[0]->type == REDIS_REPLY_STRING;
    if (ok && !strcmp(r->element[0]->str, "master")) {
        *master = true;
        *offset = r->element[1]->integer;
    } else if (ok && !strcmp(r->element[0]->str, "slave") && r->elements >= 5) {
        *master = false;
        *master_port = (int)r->element[2]->integer;
        *offset = r->element[4]->integer;
    } else {
        ok = false;
    }
    if (r) freeReplyObject(r);
    return ok;
}

int lc_wait_replicated(lc_cluster *c, int timeout_ms, char *why, size_t why_len)
{
    long long target[LC_MAX_NODES];
    double deadline = now_s() + timeout_ms / 1000.0;
    for (int i = 0; i < c->n; i++) {
        bool master = false;
        int mp;
        target[i] = -1;
        if (c->nodes[i].pid > 0 && !role_of(c, i, &master, &target[i], &mp)) target[i] = -1;
        if (!master) target[i] = -1;
    }
    for (;;) {
        bool ok = true;
        char last[160] = "";
        for (int i = 0; i < c->n && ok; i++) {
            bool master = true;
            long long off = 0;
            int mp = -1;
            if (c->nodes[i].pid <= 0) continue;
            if (!role_of(c, i, &master, &off, &mp)) {
                ok = false;
                snprintf(last, sizeof last, "node %d: no ROLE", i);
            } else if (!master) {
                int m = lc_index_of_port(c, mp);
                if (m >= 0 && target[m] >= 0 && off < target[m]) {
                    ok = false;
                    snprintf(last, sizeof last, "replica %d at offset %lld of %lld", i, off, target[m]);
                }
            }
        }
        if (ok) return LC_OK;
        if (now_s() > deadline) {
            why_set(why, why_len, "not replicated after %d ms: %s", timeout_ms, last);
            return LC_FAIL;
        }
        nap_ms(10);
    }
}

int lc_master_of_slot(lc_cluster *c, unsigned slot)
{
    static int owner[LC_SLOTS];
    if (slot >= LC_SLOTS) return -1;
    for (int i = 0; i < c->n; i++) {
        if (c->nodes[i].pid <= 0) continue;
        if (slot_owners(c, i, owner)) return lc_index_of_port(c, owner[slot]);
    }
    return -1;
}

int lc_node_id(lc_cluster *c, int i, char id[41])
{
    redisReply *r = lc_cmd(c, i, "CLUSTER MYID");
    int rc = -1;
    if (r && r->type == REDIS_REPLY_STRING && r->len == 40) {
        memcpy(id, r->str, 40);
        id[40] = '\0';
        rc = 0;
    }
    if (r) freeReplyObject(r);
    return rc;
}
