/*
 * test_redis_cluster.c — store/redis_cluster.h, the Redis Cluster client.
 *
 * Three groups, one CTest entry each (argv[1]; no argument runs all):
 *
 *   unit     no Redis needed: CRC16 / slot known answers, bad configs, bad
 *            ops, a dead seed (fail fast, backoff), and scripted fake nodes
 *            in a thread: garbage bytes, malformed slot maps, silence,
 *            MOVED to bad / unknown / dead addresses, redirection loops, ASK
 *            (ASKING before the retried command), wrong reply types, error
 *            replies, dropped connections, unsolicited bytes, big values;
 *            the Nth allocation failing, for every N
 *   routing  a real cluster (3 masters + 3 replicas): slots against
 *            CLUSTER KEYSLOT, the map against the cluster's, SET/GET over
 *            thousands of keys on all masters with PX TTLs, the prefix probe,
 *            ASK and MOVED in a hand-made migration (SETSLOT + MIGRATE),
 *            reads during `redis-cli --cluster reshard`, ACL users and
 *            password files (a wrong password is SCDB_EAUTH at open)
 *   faults   a real cluster with a short cluster-node-timeout: a stopped
 *            master costs its commands one timeout and then fails fast, a
 *            master killed with -9 fails over and reads resume with the
 *            right bytes and no call past its deadline, the whole cluster
 *            killed (fast, counted failures) and restarted (calls resume)
 *
 * The cluster groups exit 77 (skipped) when redis-server or redis-cli is
 * missing; scripts/install-deps.sh --test installs them.  Each group starts
 * its own cluster on free loopback ports in its own temp dir
 * (store/local_cluster.h), so ctest -j2 is safe.
 *
 * Timing bounds here are "does not hang" bounds (a deadline plus a generous
 * second for a loaded 2-core machine), not performance figures.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "helpers/alloc_fault.h"
#include "local_cluster.h"
#include "redis_cluster.h"

#define SLACK_MS 1000 /* what a loaded machine may add to a deadline */

/* ------------------------------------------------------------ helpers */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* A key shaped like scdb's: prefix + 32 hex digits (no braces). */
static size_t key_for(const char *tag, uint64_t i, char *buf, size_t len)
{
    uint64_t s = i * 0x2545F4914F6CDD1Dull + 7;
    for (const char *c = tag; *c; c++) s = s * 131 + (unsigned char)*c;
    uint64_t a = scdb_splitmix64(&s), b = scdb_splitmix64(&s);
    return (size_t)snprintf(buf, len, "scdb:%s:%016llx%016llx", tag, (unsigned long long)a,
                            (unsigned long long)b);
}

/* A value for key i: binary, 0..2 KiB, one in 97 over 64 KiB. */
static uint8_t *value_for(uint64_t i, size_t *len)
{
    size_t n = (size_t)((i * 7919) % 2048);
    if (i % 97 == 3) n = 65536 + (size_t)(i % 1000);
    uint8_t *v = malloc(n ? n : 1);
    uint64_t s = i ^ 0xABCDEF;
    for (size_t k = 0; k < n; k++) v[k] = (uint8_t)scdb_splitmix64(&s);
    *len = n;
    return v;
}

static scdb_rc_stats stats(const scdb_rc *rc)
{
    scdb_rc_stats s;
    memset(&s, 0, sizeof s);
    scdb_rc_stats_get(rc, &s);
    return s;
}

/* A loopback port nobody listens on (bound, then closed). */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A fresh directory under $TMPDIR (or /tmp). */
static void make_tmpdir(char *buf, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    assert_non_null(mkdtemp(buf));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ============================================================ unit */

static void test_crc16_and_slot_known_answers(void **state)
{
    (void)state;
    /* the Redis Cluster spec's check value */
    assert_int_equal(scdb_rc_crc16("123456789", 9), 0x31C3);
    assert_int_equal(scdb_rc_crc16("", 0), 0);
    assert_int_equal(scdb_rc_crc16("A", 1), 0x58E5);
    /* slots as Redis 7.0's CLUSTER KEYSLOT gives them */
    static const struct { const char *key; unsigned slot; } known[] = {
        {"foo", 12182}, {"bar", 5061}, {"hello", 866}, {"123456789", 12739},
        {"user1000", 3443}, {"{user1000}.following", 3443}, {"{user1000}.followers", 3443},
        {"foo{}{bar}", 8363},     /* empty first tag: the whole key is hashed */
        {"foo{{bar}}zap", 4015},  /* the tag is "{bar" */
        {"foo{bar}{zap}", 5061},  /* only the first tag counts: "bar" */
        {"", 0},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        assert_int_equal(scdb_rc_slot(known[i].key, strlen(known[i].key)), known[i].slot);
    assert_int_equal(scdb_rc_slot("foo{{bar}}zap", 13), scdb_rc_slot("{bar", 4));
    assert_int_equal(scdb_rc_slot("{", 1), scdb_rc_crc16("{", 1) & 16383);
    assert_int_equal(scdb_rc_slot("}{", 2), scdb_rc_crc16("}{", 2) & 16383);
    assert_int_equal(scdb_rc_slot("a}{b}", 5), scdb_rc_slot("b", 1));
    assert_int_equal(scdb_rc_slot(NULL, 0), 0);
    /* binary keys: NUL bytes are key bytes */
    assert_int_equal(scdb_rc_slot("a\0b", 3), scdb_rc_crc16("a\0b", 3) & 16383);
}

/* scdb's brace-free keys spread over the whole slot space. */
static void test_keys_spread_over_all_slots(void **state)
{
    (void)state;
    enum { N = 65536, BUCKETS = 16 };
    int count[BUCKETS] = {0};
    char k[80];
    for (uint64_t i = 0; i < N; i++) {
        size_t kl = key_for("spread", i, k, sizeof k);
        unsigned s = scdb_rc_slot(k, kl);
        assert_true(s < SCDB_RC_SLOTS);
        count[s / (SCDB_RC_SLOTS / BUCKETS)]++;
    }
    for (int b = 0; b < BUCKETS; b++) { /* 4096 expected; +-10% is > 6 sigma */
        assert_true(count[b] > N / BUCKETS * 9 / 10);
        assert_true(count[b] < N / BUCKETS * 11 / 10);
    }
}

static void expect_open(const scdb_rc_config *cfg, scdb_err want, const char *msg_has)
{
    scdb_rc *rc = (scdb_rc *)0x1;
    char msg[256];
    scdb_err e = scdb_rc_open(cfg, &rc, msg, sizeof msg);
    if (e != want) print_message("open: got %s (%s), want %s\n", scdb_strerror(e), msg, scdb_strerror(want));
    assert_int_equal(e, want);
    if (want != SCDB_OK) {
        assert_null(rc);
        assert_true(msg[0] != '\0');
        if (msg_has && !strstr(msg, msg_has)) print_message("message: %s\n", msg);
        if (msg_has) assert_non_null(strstr(msg, msg_has));
    }
    scdb_rc_close(&rc);
    assert_null(rc);
}

static void test_open_rejects_bad_config(void **state)
{
    (void)state;
    char msg[128];
    assert_int_equal(scdb_rc_open(NULL, NULL, msg, sizeof msg), SCDB_EINVAL);
    scdb_rc *rc = (scdb_rc *)0x1;
    assert_int_equal(scdb_rc_open(NULL, &rc, NULL, 0), SCDB_EINVAL);
    assert_null(rc);
    scdb_rc_close(NULL);
    scdb_rc_close(&rc);

    static const char *bad_seeds[] = {
        "", ",,,", "  ,  ", "host", "host:", ":7000", "host:0", "host:65536", "host:70000",
        "host:12x", "host:-1", "127.0.0.1:7000,oops", "ho st:7000", "host:7000:",
    };
    for (size_t i = 0; i < sizeof bad_seeds / sizeof bad_seeds[0]; i++) {
        scdb_rc_config cfg = {.seeds = bad_seeds[i], .lazy = 1};
        expect_open(&cfg, SCDB_EINVAL, NULL);
    }
    scdb_rc_config cfg = {.seeds = NULL};
    expect_open(&cfg, SCDB_EINVAL, "seed");
    cfg = (scdb_rc_config){.seeds = "127.0.0.1:1", .timeout_ms = -1};
    expect_open(&cfg, SCDB_EINVAL, "negative");
    cfg = (scdb_rc_config){.seeds = "127.0.0.1:1", .backoff_min_ms = 500, .backoff_max_ms = 100};
    expect_open(&cfg, SCDB_EINVAL, "backoff");
    cfg = (scdb_rc_config){.seeds = "127.0.0.1:1", .user = "scdb"};
    expect_open(&cfg, SCDB_EINVAL, "password_file");
    cfg = (scdb_rc_config){.seeds = "127.0.0.1:1", .user = "", .password_file = "/dev/null"};
    expect_open(&cfg, SCDB_EINVAL, "user");
    cfg = (scdb_rc_config){.seeds = "127.0.0.1:1", .user = "scdb",
                           .password_file = "/nonexistent/scdb-redis-password"};
    expect_open(&cfg, SCDB_ENOTFOUND, "/nonexistent/scdb-redis-password");

    char dir[256];
    make_tmpdir(dir, sizeof dir, "scdb-rc-unit");
    char empty[300], big[300];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    snprintf(big, sizeof big, "%s/big", dir);
    write_file(empty, "\n");
    FILE *f = fopen(big, "w");
    for (int i = 0; i < 5000; i++) fputc('x', f);
    fclose(f);
    cfg = (scdb_rc_config){.seeds = "127.0.0.1:1", .user = "scdb", .password_file = empty};
    expect_open(&cfg, SCDB_EINVAL, "empty");
    cfg.password_file = big;
    expect_open(&cfg, SCDB_ETOOBIG, NULL);
    cfg.password_file = dir; /* a directory */
    scdb_rc *r2 = NULL;
    assert_int_not_equal(scdb_rc_open(&cfg, &r2, msg, sizeof msg), SCDB_OK);
    assert_null(r2);
    unlink(empty);
    unlink(big);
    rmdir(dir);
}

/* A seed where nobody listens: the open fails at once (connection refused),
 * a lazy open succeeds, calls fail fast, and the node backs off. */
static void test_dead_seed_fails_fast_and_backs_off(void **state)
{
    (void)state;
    char seeds[64], msg[256];
    int port = dead_port();
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", port);
    scdb_rc_config cfg = {.seeds = seeds, .timeout_ms = 300, .backoff_min_ms = 200,
                          .backoff_max_ms = 400};
    scdb_rc *rc = NULL;
    double t0 = now_ms();
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_EIO);
    assert_true(now_ms() - t0 < 300 + SLACK_MS);
    assert_null(rc);
    assert_non_null(strstr(msg, "connect"));

    cfg.lazy = 1;
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_OK);
    scdb_rc_stats s0 = stats(rc);
    assert_true(s0.connect_failures >= 1);
    void *v = (void *)0x1;
    size_t vl = 7;
    /* the seed is backing off (the open's failure): refused without a try */
    assert_int_equal(scdb_rc_get(rc, "k", 1, &v, &vl), SCDB_EIO);
    assert_null(v);
    assert_int_equal(vl, 0);
    scdb_rc_stats s1 = stats(rc);
    assert_int_equal(s1.connect_failures, s0.connect_failures);
    assert_true(s1.backoff_skips >= 1);
    assert_int_equal(s1.errors, s0.errors + 1);
    assert_non_null(strstr(scdb_rc_last_error(rc), "down"));
    /* once the backoff is over, a call tries again (and fails again) */
    double t1 = now_ms();
    for (;;) {
        assert_int_equal(scdb_rc_get(rc, "k", 1, &v, &vl), SCDB_EIO);
        if (stats(rc).connect_failures > s1.connect_failures) break;
        assert_true(now_ms() - t1 < 200 + SLACK_MS);
        nap_ms(10);
    }
    assert_true(now_ms() - t1 >= 150); /* not retried on every call */
    scdb_rc_close(&rc);
}

static void test_bad_ops(void **state)
{
    (void)state;
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", dead_port());
    scdb_rc_config cfg = {.seeds = seeds, .timeout_ms = 100, .lazy = 1};
    scdb_rc *rc = NULL;
    assert_int_equal(scdb_rc_open(&cfg, &rc, NULL, 0), SCDB_OK);
    void *v;
    size_t vl, n;
    assert_int_equal(scdb_rc_get(NULL, "k", 1, &v, &vl), SCDB_EINVAL);
    assert_int_equal(scdb_rc_get(rc, "k", 1, NULL, &vl), SCDB_EINVAL);
    assert_int_equal(scdb_rc_get(rc, "k", 1, &v, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_rc_get(rc, NULL, 3, &v, &vl), SCDB_EINVAL);
    assert_int_equal(scdb_rc_set(NULL, "k", 1, "v", 1, 0), SCDB_EINVAL);
    assert_int_equal(scdb_rc_set(rc, "k", 1, NULL, 5, 0), SCDB_EINVAL);
    assert_int_equal(scdb_rc_set(rc, NULL, 1, "v", 1, 0), SCDB_EINVAL);
    assert_int_equal(scdb_rc_exec(NULL, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_rc_exec(rc, NULL, 3), SCDB_EINVAL);
    assert_int_equal(scdb_rc_exec(rc, NULL, 0), SCDB_OK);
    char *huge = calloc(1, SCDB_RC_MAX_KEY + 1);
    assert_int_equal(scdb_rc_get(rc, huge, SCDB_RC_MAX_KEY + 1, &v, &vl), SCDB_ETOOBIG);
    free(huge);

    scdb_rc_op ops[4] = {
        {.cmd = 0, .key = "a", .key_len = 1},
        {.cmd = 99, .key = "a", .key_len = 1},
        {.cmd = SCDB_RC_SET, .key = "a", .key_len = 1, .val = NULL, .val_len = 2},
        {.cmd = SCDB_RC_EXISTS, .key = NULL, .key_len = 1},
    };
    assert_int_equal(scdb_rc_exec(rc, ops, 4), SCDB_EINVAL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ops[i].status, SCDB_EINVAL);
        assert_null(ops[i].out);
    }
    /* probe */
    scdb_rc_key keys[2] = {{"a", 1}, {NULL, 4}};
    assert_int_equal(scdb_rc_probe(rc, NULL, 2, &n), SCDB_EINVAL);
    assert_int_equal(scdb_rc_probe(rc, keys, 2, NULL), SCDB_EINVAL);
    n = 9;
    assert_int_equal(scdb_rc_probe(rc, keys, 2, &n), SCDB_EINVAL);
    assert_int_equal(n, 0);
    n = 9;
    assert_int_equal(scdb_rc_probe(rc, keys, 0, &n), SCDB_OK);
    assert_int_equal(n, 0);
    /* slot_node */
    char buf[64];
    assert_int_equal(scdb_rc_slot_node(rc, 16384, buf, sizeof buf), SCDB_ERANGE);
    assert_int_equal(scdb_rc_slot_node(rc, 0, NULL, 10), SCDB_EINVAL);
    assert_int_equal(scdb_rc_slot_node(rc, 0, buf, sizeof buf), SCDB_ENOTFOUND);
    assert_int_equal(scdb_rc_refresh(NULL), SCDB_EINVAL);
    scdb_rc_stats st;
    scdb_rc_stats_get(NULL, &st);
    scdb_rc_stats_get(rc, NULL);
    assert_string_equal(scdb_rc_last_error(NULL), "");
    scdb_rc_close(&rc);
}

/* ----------------------------------------------------------- fake nodes
 * A scripted node in a thread: it parses each command with hiredis's reader
 * and answers with what the scenario's function returns. */

#define FAKE_CONNS 8
#define FAKE_SILENT ((const char *)1) /* never answer */
#define FAKE_CLOSE ((const char *)2)  /* close the connection */

typedef struct fake fake;
typedef const char *(*fake_fn)(fake *f, int conn, redisReply *cmd, size_t *len);

struct fake {
    int lfd, port, wake[2];
    pthread_t th;
    fake_fn fn;
    const char *slots_reply; /* NULL: every slot on this node */
    int fd[FAKE_CONNS];
    redisReader *rd[FAKE_CONNS];
    bool asking[FAKE_CONNS];
    atomic_int n_cmds, n_asking_then_get, n_accepts;
    char out[300000];
};

static bool is_cmd(const redisReply *c, const char *name)
{
    return c->elements > 0 && c->element[0]->type == REDIS_REPLY_STRING &&
           !strcasecmp(c->element[0]->str, name);
}

static bool arg_is(const redisReply *c, size_t i, const char *s)
{
    return c->elements > i && c->element[i]->type == REDIS_REPLY_STRING && !strcmp(c->element[i]->str, s);
}

static const char *fake_reply(fake *f, int conn, redisReply *c, size_t *len)
{
    if (is_cmd(c, "CLUSTER") && arg_is(c, 1, "SLOTS")) {
        if (f->slots_reply) return f->slots_reply;
        *len = (size_t)snprintf(f->out, sizeof f->out,
                                "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$3\r\nfak\r\n",
                                f->port);
        return f->out;
    }
    if (is_cmd(c, "PING")) return "+PONG\r\n";
    if (is_cmd(c, "AUTH")) return "+OK\r\n";
    if (is_cmd(c, "ASKING")) return "+OK\r\n";
    return f->fn ? f->fn(f, conn, c, len) : "-ERR unknown\r\n";
}

static void fake_close_conn(fake *f, int i)
{
    close(f->fd[i]);
    f->fd[i] = -1;
    redisReaderFree(f->rd[i]);
    f->rd[i] = NULL;
    f->asking[i] = false;
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    char buf[65536];
    for (;;) {
        struct pollfd p[FAKE_CONNS + 2];
        int map[FAKE_CONNS + 2], k = 0;
        p[k].fd = f->wake[0], p[k].events = POLLIN, map[k++] = -2;
        p[k].fd = f->lfd, p[k].events = POLLIN, map[k++] = -1;
        for (int i = 0; i < FAKE_CONNS; i++)
            if (f->fd[i] >= 0) p[k].fd = f->fd[i], p[k].events = POLLIN, map[k++] = i;
        if (poll(p, (nfds_t)k, -1) < 0) continue;
        if (p[0].revents) return NULL;
        if (p[1].revents) {
            int fd = accept(f->lfd, NULL, NULL);
            for (int i = 0; fd >= 0 && i < FAKE_CONNS; i++)
                if (f->fd[i] < 0) {
                    f->fd[i] = fd;
                    f->rd[i] = redisReaderCreate();
                    f->asking[i] = false;
                    fd = -1;
                    atomic_fetch_add(&f->n_accepts, 1);
                }
            if (fd >= 0) close(fd);
        }
        for (int j = 2; j < k; j++) {
            int i = map[j];
            if (!p[j].revents || f->fd[i] < 0) continue;
            ssize_t n = read(f->fd[i], buf, sizeof buf);
            if (n <= 0) {
                fake_close_conn(f, i);
                continue;
            }
            redisReaderFeed(f->rd[i], buf, (size_t)n);
            void *r;
            while (f->fd[i] >= 0 && redisReaderGetReply(f->rd[i], &r) == REDIS_OK && r) {
                redisReply *c = r;
                atomic_fetch_add(&f->n_cmds, 1);
                size_t len = 0;
                const char *out = fake_reply(f, i, c, &len);
                bool was_asking = f->asking[i];
                f->asking[i] = is_cmd(c, "ASKING");
                if (was_asking && is_cmd(c, "GET")) atomic_fetch_add(&f->n_asking_then_get, 1);
                freeReplyObject(c);
                if (out == FAKE_CLOSE) {
                    fake_close_conn(f, i);
                } else if (out != FAKE_SILENT) {
                    if (!len) len = strlen(out);
                    for (size_t off = 0; off < len;) {
                        ssize_t w = send(f->fd[i], out + off, len - off, MSG_NOSIGNAL);
                        if (w <= 0) break;
                        off += (size_t)w;
                    }
                }
            }
        }
    }
}

static fake *fake_start(fake_fn fn, const char *slots_reply)
{
    fake *f = calloc(1, sizeof *f);
    f->fn = fn;
    f->slots_reply = slots_reply;
    for (int i = 0; i < FAKE_CONNS; i++) f->fd[i] = -1;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    assert_int_equal(pipe(f->wake), 0);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
    return f;
}

static void fake_stop(fake *f)
{
    assert_int_equal(write(f->wake[1], "x", 1), 1);
    pthread_join(f->th, NULL);
    for (int i = 0; i < FAKE_CONNS; i++)
        if (f->fd[i] >= 0) fake_close_conn(f, i);
    close(f->lfd);
    close(f->wake[0]);
    close(f->wake[1]);
    free(f);
}

static scdb_err open_fake(const fake *f, int timeout_ms, int max_redirects, scdb_rc **rc, char *msg,
                          size_t msg_len)
{
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f->port);
    scdb_rc_config cfg = {.seeds = seeds, .timeout_ms = timeout_ms, .max_redirects = max_redirects,
                          .backoff_min_ms = 100, .backoff_max_ms = 200};
    return scdb_rc_open(&cfg, rc, msg, msg_len);
}

static const char *say_nothing(fake *f, int conn, redisReply *c, size_t *len)
{
    (void)f, (void)conn, (void)c, (void)len;
    return FAKE_SILENT;
}

static void test_garbage_and_silent_seeds(void **state)
{
    (void)state;
    char msg[256];
    scdb_rc *rc = NULL;

    /* not RESP at all, to CLUSTER SLOTS itself */
    fake *f = fake_start(NULL, "this is not RESP\r\n");
    assert_int_equal(open_fake(f, 500, 0, &rc, msg, sizeof msg), SCDB_EPROTO);
    assert_null(rc);
    assert_non_null(strstr(msg, "garbage"));
    fake_stop(f);

    /* accepts, never answers: ETIMEDOUT within the deadline */
    f = fake_start(say_nothing, FAKE_SILENT);
    double t0 = now_ms();
    assert_int_equal(open_fake(f, 200, 0, &rc, msg, sizeof msg), SCDB_ETIMEDOUT);
    assert_true(now_ms() - t0 < 200 + SLACK_MS);
    assert_non_null(strstr(msg, "no reply"));
    fake_stop(f);

    /* closes at once */
    f = fake_start(NULL, FAKE_CLOSE);
    assert_int_equal(open_fake(f, 500, 0, &rc, msg, sizeof msg), SCDB_EIO);
    fake_stop(f);

    /* not a cluster node / wants a password we do not have */
    f = fake_start(NULL, "-ERR This instance has cluster support disabled\r\n");
    assert_int_equal(open_fake(f, 500, 0, &rc, msg, sizeof msg), SCDB_EPROTO);
    assert_non_null(strstr(msg, "cluster support disabled"));
    fake_stop(f);
    f = fake_start(NULL, "-NOAUTH Authentication required.\r\n");
    assert_int_equal(open_fake(f, 500, 0, &rc, msg, sizeof msg), SCDB_EAUTH);
    assert_non_null(strstr(msg, "password_file"));
    fake_stop(f);
}

static void test_malformed_slot_maps_are_refused(void **state)
{
    (void)state;
#define NODE(ip, port) "*2\r\n" ip ":" #port "\r\n"
#define IP "$9\r\n127.0.0.1\r\n"
    static const struct { const char *reply, *why; } bad[] = {
        {"*0\r\n", "no slot"},
        {"+OK\r\n", "not an array"},
        {":12\r\n", "not an array"},
        {"*1\r\n*3\r\n:0\r\n:16384\r\n" NODE(IP, 7000), "outside"},
        {"*1\r\n*3\r\n:-1\r\n:100\r\n" NODE(IP, 7000), "outside"},
        {"*1\r\n*3\r\n:10\r\n:5\r\n" NODE(IP, 7000), "outside"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n" NODE(IP, 0), "port"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n" NODE(IP, 70000), "port"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n:1\r\n:7000\r\n", "node entry"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n*1\r\n" IP, "node entry"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n:5\r\n", "node entry"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n" NODE("$9\r\nlocalhost\r\n", 7000), "not numeric"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n" NODE("$7\r\n1.2.3.x\r\n", 7000), "not numeric"},
        {"*1\r\n*2\r\n:0\r\n:16383\r\n", "is not [start"},
        {"*1\r\n*3\r\n$1\r\n0\r\n:16383\r\n" NODE(IP, 7000), "is not [start"},
        {"*1\r\n:7\r\n", "is not [start"},
        {"*2\r\n*3\r\n:0\r\n:100\r\n" NODE(IP, 7000) "*3\r\n:50\r\n:16383\r\n" NODE(IP, 7001), "overlap"},
        {"*1\r\n*3\r\n:0\r\n:16383\r\n" NODE("$1\r\n?\r\n", 7000), "known address"},
        {"*1\r\n*4\r\n:0\r\n:16383\r\n" NODE(IP, 7000) NODE(IP, 0), "port"}, /* bad replica */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[256];
        scdb_rc *rc = NULL;
        fake *f = fake_start(NULL, bad[i].reply);
        scdb_err e = open_fake(f, 500, 0, &rc, msg, sizeof msg);
        if (e != SCDB_EPROTO || !strstr(msg, bad[i].why))
            print_message("map %zu: %s: %s\n", i, scdb_strerror(e), msg);
        assert_int_equal(e, SCDB_EPROTO);
        assert_null(rc);
        assert_non_null(strstr(msg, bad[i].why));
        fake_stop(f);
    }
    /* an empty address means "the node you asked", with the given port */
    fake *f = fake_start(NULL, NULL);
    char reply[128], msg[256], who[64], want[64];
    snprintf(reply, sizeof reply, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:%d\r\n", f->port);
    f->slots_reply = reply;
    scdb_rc *rc = NULL;
    assert_int_equal(open_fake(f, 500, 0, &rc, msg, sizeof msg), SCDB_OK);
    assert_int_equal(scdb_rc_slot_node(rc, 12345, who, sizeof who), SCDB_OK);
    snprintf(want, sizeof want, "127.0.0.1:%d", f->port);
    assert_string_equal(who, want);
    assert_int_equal(scdb_rc_slot_node(rc, 0, who, 4), SCDB_EINVAL); /* too small */
    scdb_rc_close(&rc);
    fake_stop(f);
#undef NODE
#undef IP
}

/* The scripted GET replies of the redirection tests, by key. */
static int g_dead_port;

static const char *scripted_get(fake *f, int conn, redisReply *c, size_t *len)
{
    if (!is_cmd(c, "GET") || c->elements != 2) return "-ERR unexpected command\r\n";
    const char *k = c->element[1]->str;
    unsigned slot = scdb_rc_slot(k, c->element[1]->len);
    if (!strcmp(k, "moved-garbage")) return "-MOVED xyz\r\n";
    if (!strcmp(k, "moved-noaddr")) {
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u\r\n", slot);
        return f->out;
    }
    if (!strcmp(k, "moved-badport")) {
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u 127.0.0.1:99999\r\n", slot);
        return f->out;
    }
    if (!strcmp(k, "moved-wrongslot")) {
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u 127.0.0.1:%d\r\n", (slot + 1) % 16384,
                                f->port);
        return f->out;
    }
    if (!strcmp(k, "moved-hostname")) { /* no DNS lookup on the request path */
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u redis.example.invalid:7000\r\n", slot);
        return f->out;
    }
    if (!strcmp(k, "moved-dead")) {
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u 127.0.0.1:%d\r\n", slot, g_dead_port);
        return f->out;
    }
    if (!strcmp(k, "moved-loop")) {
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u 127.0.0.1:%d\r\n", slot, f->port);
        return f->out;
    }
    if (!strcmp(k, "moved-emptyhost")) { /* ":port": same host; here the same node, once */
        static bool once;
        once = !once;
        if (!once) return "$4\r\nback\r\n";
        *len = (size_t)snprintf(f->out, sizeof f->out, "-MOVED %u :%d\r\n", slot, f->port);
        return f->out;
    }
    if (!strcmp(k, "ask-self")) {
        if (f->asking[conn]) return "$5\r\nasked\r\n";
        *len = (size_t)snprintf(f->out, sizeof f->out, "-ASK %u 127.0.0.1:%d\r\n", slot, f->port);
        return f->out;
    }
    if (!strcmp(k, "int-reply")) return ":5\r\n";
    if (!strcmp(k, "array-reply")) return "*1\r\n$1\r\na\r\n";
    if (!strcmp(k, "wrongtype")) return "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    if (!strcmp(k, "clusterdown")) return "-CLUSTERDOWN The cluster is down\r\n";
    if (!strcmp(k, "noauth")) return "-NOAUTH Authentication required.\r\n";
    if (!strcmp(k, "noperm")) return "-NOPERM this user has no permissions to run the 'get' command\r\n";
    if (!strcmp(k, "missing")) return "$-1\r\n";
    if (!strcmp(k, "silent")) return FAKE_SILENT;
    if (!strcmp(k, "close")) return FAKE_CLOSE;
    if (!strcmp(k, "garbage")) return "!!!!\r\n";
    if (!strcmp(k, "extra")) return "$1\r\na\r\n+OK\r\n"; /* one reply too many */
    if (!strcmp(k, "big")) {
        size_t n = 200000;
        int h = snprintf(f->out, sizeof f->out, "$%zu\r\n", n);
        for (size_t i = 0; i < n; i++) f->out[h + (int)i] = (char)('a' + i % 26);
        memcpy(f->out + h + n, "\r\n", 2);
        *len = (size_t)h + n + 2;
        return f->out;
    }
    *len = (size_t)snprintf(f->out, sizeof f->out, "$%zu\r\n%s\r\n", strlen(k), k);
    return f->out; /* the value of a plain key is its name */
}

static scdb_err get_str(scdb_rc *rc, const char *key, char *out, size_t out_len)
{
    void *v = NULL;
    size_t vl = 0;
    scdb_err e = scdb_rc_get(rc, key, strlen(key), &v, &vl);
    if (out_len) out[0] = '\0';
    if (v && out_len) snprintf(out, out_len, "%.*s", (int)vl, (const char *)v);
    free(v);
    return e;
}

static void test_redirections_and_replies_from_a_fake_node(void **state)
{
    (void)state;
    char msg[256], val[64];
    scdb_rc *rc = NULL;
    g_dead_port = dead_port();
    fake *f = fake_start(scripted_get, NULL);
    assert_int_equal(open_fake(f, 1000, 3, &rc, msg, sizeof msg), SCDB_OK);

    assert_int_equal(get_str(rc, "plain", val, sizeof val), SCDB_OK);
    assert_string_equal(val, "plain");
    assert_int_equal(get_str(rc, "missing", val, sizeof val), SCDB_ENOTFOUND);

    /* malformed redirections: EPROTO, counted, no DNS, no hang */
    static const char *bad[] = {"moved-garbage", "moved-noaddr", "moved-badport", "moved-wrongslot",
                                "moved-hostname"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        scdb_rc_stats s0 = stats(rc);
        double t0 = now_ms();
        assert_int_equal(get_str(rc, bad[i], val, sizeof val), SCDB_EPROTO);
        assert_true(now_ms() - t0 < 1000 + SLACK_MS);
        assert_int_equal(stats(rc).protocol_errors, s0.protocol_errors + 1);
        assert_int_equal(stats(rc).moved, s0.moved);
    }
    assert_non_null(strstr(scdb_rc_last_error(rc), "bad redirection"));

    /* endless MOVED to itself: gives up after max_redirects (3) */
    scdb_rc_stats s0 = stats(rc);
    assert_int_equal(get_str(rc, "moved-loop", val, sizeof val), SCDB_EPROTO);
    assert_int_equal(stats(rc).moved, s0.moved + 3);
    assert_non_null(strstr(scdb_rc_last_error(rc), "redirections"));

    /* ":port" is the node that answered */
    assert_int_equal(get_str(rc, "moved-emptyhost", val, sizeof val), SCDB_OK);
    assert_string_equal(val, "back");

    /* ASK: ASKING, then the command, on the named node; the map stays */
    s0 = stats(rc);
    int seen = atomic_load(&f->n_asking_then_get);
    assert_int_equal(get_str(rc, "ask-self", val, sizeof val), SCDB_OK);
    assert_string_equal(val, "asked");
    assert_int_equal(stats(rc).ask, s0.ask + 1);
    assert_int_equal(atomic_load(&f->n_asking_then_get), seen + 1);

    /* wrong reply types and error replies */
    assert_int_equal(get_str(rc, "int-reply", val, sizeof val), SCDB_EPROTO);
    assert_int_equal(get_str(rc, "array-reply", val, sizeof val), SCDB_EPROTO);
    assert_int_equal(get_str(rc, "wrongtype", val, sizeof val), SCDB_EPROTO);
    assert_non_null(strstr(scdb_rc_last_error(rc), "WRONGTYPE"));
    assert_int_equal(get_str(rc, "clusterdown", val, sizeof val), SCDB_EIO);
    assert_int_equal(get_str(rc, "noauth", val, sizeof val), SCDB_EAUTH);
    assert_int_equal(get_str(rc, "noperm", val, sizeof val), SCDB_EAUTH);
    assert_int_equal(scdb_rc_set(rc, "k", 1, "v", 1, 0), SCDB_EPROTO); /* "-ERR unexpected" */

    /* a big value arrives in many reads */
    void *v = NULL;
    size_t vl = 0;
    assert_int_equal(scdb_rc_get(rc, "big", 3, &v, &vl), SCDB_OK);
    assert_int_equal(vl, 200000);
    for (size_t i = 0; i < vl; i += 9973) assert_int_equal(((char *)v)[i], 'a' + (int)(i % 26));
    free(v);

    /* one reply too many: the answer is used, the connection dropped */
    s0 = stats(rc);
    assert_int_equal(get_str(rc, "extra", val, sizeof val), SCDB_OK);
    assert_string_equal(val, "a");
    assert_int_equal(stats(rc).protocol_errors, s0.protocol_errors + 1);
    assert_int_equal(get_str(rc, "plain", val, sizeof val), SCDB_OK); /* a new connection */
    assert_int_equal(stats(rc).connects, s0.connects + 1);

    /* a batch mixing all of it: each op gets its own answer */
    const char *keys[] = {"plain", "missing", "wrongtype", "ask-self", "moved-garbage", "other"};
    scdb_rc_op ops[6];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < 6; i++) {
        ops[i].cmd = SCDB_RC_GET;
        ops[i].key = keys[i];
        ops[i].key_len = strlen(keys[i]);
    }
    assert_int_equal(scdb_rc_exec(rc, ops, 6), SCDB_EPROTO);
    scdb_err want[6] = {SCDB_OK, SCDB_ENOTFOUND, SCDB_EPROTO, SCDB_OK, SCDB_EPROTO, SCDB_OK};
    for (int i = 0; i < 6; i++) assert_int_equal(ops[i].status, want[i]);
    assert_memory_equal(ops[3].out, "asked", 5);
    assert_memory_equal(ops[5].out, "other", 5);
    for (int i = 0; i < 6; i++) free(ops[i].out);

    /* garbage bytes: EPROTO, the connection is dropped, the next call reconnects */
    assert_int_equal(get_str(rc, "garbage", val, sizeof val), SCDB_EPROTO);
    assert_non_null(strstr(scdb_rc_last_error(rc), "garbage"));
    scdb_rc_close(&rc);

    /* MOVED to an address where nobody listens: EIO, and that node backs off */
    assert_int_equal(open_fake(f, 1000, 3, &rc, msg, sizeof msg), SCDB_OK);
    s0 = stats(rc);
    assert_int_equal(get_str(rc, "moved-dead", val, sizeof val), SCDB_EIO);
    assert_int_equal(stats(rc).moved, s0.moved + 1);
    assert_true(stats(rc).connect_failures > s0.connect_failures);
    scdb_rc_close(&rc);

    /* a dropped connection: EIO (after one fresh retry), no SIGPIPE */
    assert_int_equal(open_fake(f, 1000, 3, &rc, msg, sizeof msg), SCDB_OK);
    assert_int_equal(get_str(rc, "plain", val, sizeof val), SCDB_OK);
    assert_int_equal(get_str(rc, "close", val, sizeof val), SCDB_EIO);
    scdb_rc_close(&rc);

    /* silence: ETIMEDOUT at the deadline; then the node backs off and calls
     * fail at once; after the backoff a new connection is made */
    assert_int_equal(open_fake(f, 300, 3, &rc, msg, sizeof msg), SCDB_OK);
    double t0 = now_ms();
    assert_int_equal(get_str(rc, "silent", val, sizeof val), SCDB_ETIMEDOUT);
    double took = now_ms() - t0;
    assert_true(took >= 250 && took < 300 + SLACK_MS);
    s0 = stats(rc);
    assert_int_equal(s0.timeouts, 1);
    t0 = now_ms();
    assert_int_equal(get_str(rc, "plain", val, sizeof val), SCDB_EIO);
    assert_true(now_ms() - t0 < 100 + SLACK_MS);
    assert_int_equal(stats(rc).backoff_skips, s0.backoff_skips + 1);
    t0 = now_ms();
    while (get_str(rc, "plain", val, sizeof val) != SCDB_OK) {
        assert_true(now_ms() - t0 < 200 + SLACK_MS);
        nap_ms(10);
    }
    assert_string_equal(val, "plain");
    assert_true(stats(rc).reconnects >= s0.reconnects + 1);
    scdb_rc_close(&rc);
    fake_stop(f);
}

/* The fake for the allocation sweep: SET and EXISTS answer, GET as scripted. */
static const char *kv_fn(fake *f, int conn, redisReply *c, size_t *len)
{
    if (is_cmd(c, "SET")) return "+OK\r\n";
    if (is_cmd(c, "EXISTS")) return ":1\r\n";
    return scripted_get(f, conn, c, len);
}

static bool ok_or_nomem(scdb_err e) { return e == SCDB_OK || e == SCDB_ENOMEM; }

/* Fail the Nth allocation of open (with a password file) + a batch with an
 * ASK redirection + a probe + a GET + close, for every N until it runs
 * clean: every call returns its answer or SCDB_ENOMEM, nothing crashes,
 * and (ASan build) nothing leaks. */
static void test_allocation_failures(void **state)
{
    (void)state;
    char dir[256], pw[300], seeds[64];
    make_tmpdir(dir, sizeof dir, "scdb-rc-alloc");
    snprintf(pw, sizeof pw, "%s/pw", dir);
    write_file(pw, "secret\n");
    fake *f = fake_start(kv_fn, NULL);
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f->port);
    scdb_rc_config cfg = {.seeds = seeds, .user = "u", .password_file = pw, .timeout_ms = 2000};
    long n;
    for (n = 0; n < 100000; n++) {
        scdb_rc *rc = NULL;
        alloc_fault_arm(n);
        scdb_err e = scdb_rc_open(&cfg, &rc, NULL, 0);
        assert_true(ok_or_nomem(e));
        if (e == SCDB_OK) {
            scdb_rc_op ops[4] = {
                {.cmd = SCDB_RC_SET, .key = "k", .key_len = 1, .val = "v", .val_len = 1, .ttl_ms = 5},
                {.cmd = SCDB_RC_GET, .key = "ask-self", .key_len = 8},
                {.cmd = SCDB_RC_GET, .key = "missing", .key_len = 7},
                {.cmd = SCDB_RC_EXISTS, .key = "k", .key_len = 1},
            };
            scdb_err want[4] = {SCDB_OK, SCDB_OK, SCDB_ENOTFOUND, SCDB_OK};
            e = scdb_rc_exec(rc, ops, 4);
            assert_true(ok_or_nomem(e));
            for (int i = 0; i < 4; i++) {
                assert_true(ops[i].status == want[i] || ops[i].status == SCDB_ENOMEM);
                if (ops[i].status == SCDB_OK && i == 1) assert_memory_equal(ops[i].out, "asked", 5);
                free(ops[i].out);
            }
            scdb_rc_key keys[2] = {{"a", 1}, {"b", 1}};
            size_t np = 9;
            e = scdb_rc_probe(rc, keys, 2, &np);
            assert_true(ok_or_nomem(e));
            if (e == SCDB_OK) assert_int_equal(np, 2);
            char val[16];
            e = get_str(rc, "plain", val, sizeof val);
            assert_true(ok_or_nomem(e));
            if (e == SCDB_OK) assert_string_equal(val, "plain");
        }
        scdb_rc_close(&rc);
        bool clean = !alloc_fault_fired();
        alloc_fault_disarm();
        if (clean) break;
    }
    print_message("allocation failures: the sequence ran clean after %ld injected failures\n", n);
    assert_true(n > 10 && n < 100000);
    fake_stop(f);
    unlink(pw);
    rmdir(dir);
}

static const struct CMUnitTest unit_tests[] = {
    cmocka_unit_test(test_crc16_and_slot_known_answers),
    cmocka_unit_test(test_keys_spread_over_all_slots),
    cmocka_unit_test(test_open_rejects_bad_config),
    cmocka_unit_test(test_dead_seed_fails_fast_and_backs_off),
    cmocka_unit_test(test_bad_ops),
    cmocka_unit_test(test_garbage_and_silent_seeds),
    cmocka_unit_test(test_malformed_slot_maps_are_refused),
    cmocka_unit_test(test_redirections_and_replies_from_a_fake_node),
    cmocka_unit_test(test_allocation_failures),
};

/* ============================================================ clusters */

static lc_cluster *g_cluster;

static int cluster_setup(int node_timeout_ms)
{
    char why[512];
    lc_options o = {.masters = 3, .replicas = 1, .node_timeout_ms = node_timeout_ms};
    double t0 = now_ms();
    int r = lc_start(&o, &g_cluster, why, sizeof why);
    if (r != LC_OK) {
        print_message("cluster did not start: %s\n", why);
        return -1;
    }
    print_message("cluster of %d nodes ready in %.1f s under %s\n", lc_size(g_cluster),
                  (now_ms() - t0) / 1000, lc_dir(g_cluster));
    return 0;
}

static int routing_setup(void **state)
{
    (void)state;
    return cluster_setup(5000);
}

static int faults_setup(void **state)
{
    (void)state;
    return cluster_setup(2000);
}

static int cluster_teardown(void **state)
{
    (void)state;
    lc_stop(&g_cluster);
    return 0;
}

static scdb_rc *open_cluster(int timeout_ms, int backoff_min, int backoff_max)
{
    scdb_rc_config cfg = {.seeds = lc_seeds(g_cluster), .timeout_ms = timeout_ms,
                          .backoff_min_ms = backoff_min, .backoff_max_ms = backoff_max};
    scdb_rc *rc = NULL;
    char msg[256];
    scdb_err e = scdb_rc_open(&cfg, &rc, msg, sizeof msg);
    if (e) print_message("open: %s: %s\n", scdb_strerror(e), msg);
    assert_int_equal(e, SCDB_OK);
    return rc;
}

/* Keys [from, to) of a tag: SET (with a TTL) in batches, every op OK. */
static void put_keys(scdb_rc *rc, const char *tag, uint64_t from, uint64_t to, uint64_t ttl_ms)
{
    enum { BATCH = 500 };
    scdb_rc_op ops[BATCH];
    char keys[BATCH][80];
    for (uint64_t i = from; i < to;) {
        size_t n = 0;
        for (; n < BATCH && i < to; n++, i++) {
            memset(&ops[n], 0, sizeof ops[n]);
            ops[n].cmd = SCDB_RC_SET;
            ops[n].key = keys[n];
            ops[n].key_len = key_for(tag, i, keys[n], sizeof keys[n]);
            ops[n].val = value_for(i, &ops[n].val_len);
            ops[n].ttl_ms = ttl_ms;
        }
        scdb_err e = scdb_rc_exec(rc, ops, n);
        if (e) print_message("put: %s: %s\n", scdb_strerror(e), scdb_rc_last_error(rc));
        assert_int_equal(e, SCDB_OK);
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(ops[k].status, SCDB_OK);
            free((void *)ops[k].val);
        }
    }
}

typedef struct get_result {
    size_t ok, missing, errors, wrong;
    scdb_err first_error;
} get_result;

/* GET keys [from, to) in one batch; every value found must be the right one. */
static get_result get_keys(scdb_rc *rc, const char *tag, uint64_t from, uint64_t to)
{
    size_t n = (size_t)(to - from);
    scdb_rc_op *ops = calloc(n, sizeof *ops);
    char (*keys)[80] = calloc(n, sizeof *keys);
    get_result g = {0};
    for (size_t k = 0; k < n; k++) {
        ops[k].cmd = SCDB_RC_GET;
        ops[k].key = keys[k];
        ops[k].key_len = key_for(tag, from + k, keys[k], sizeof keys[k]);
    }
    (void)scdb_rc_exec(rc, ops, n);
    for (size_t k = 0; k < n; k++) {
        if (ops[k].status == SCDB_OK) {
            size_t vl;
            uint8_t *v = value_for(from + k, &vl);
            if (ops[k].out_len == vl && !memcmp(ops[k].out, v, vl))
                g.ok++;
            else
                g.wrong++;
            free(v);
        } else if (ops[k].status == SCDB_ENOTFOUND) {
            g.missing++;
        } else {
            if (!g.errors) g.first_error = ops[k].status;
            g.errors++;
        }
        free(ops[k].out);
    }
    free(ops);
    free(keys);
    return g;
}

static void test_slots_match_cluster_keyslot(void **state)
{
    (void)state;
    uint64_t s = 42;
    for (int i = 0; i < 400; i++) {
        char k[40];
        size_t n = 1 + scdb_splitmix64(&s) % 30;
        for (size_t j = 0; j < n; j++) {
            uint64_t r = scdb_splitmix64(&s) % 8;
            k[j] = r == 0 ? '{' : r == 1 ? '}' : (char)(scdb_splitmix64(&s) & 0xff);
        }
        redisReply *r = lc_cmd(g_cluster, 0, "CLUSTER KEYSLOT %b", k, n);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        assert_int_equal(scdb_rc_slot(k, n), (unsigned)r->integer);
        freeReplyObject(r);
    }
}

static void test_map_matches_cluster(void **state)
{
    (void)state;
    scdb_rc *rc = open_cluster(2000, 0, 0);
    for (unsigned slot = 0; slot < SCDB_RC_SLOTS; slot += 257) {
        char who[64], want[64];
        assert_int_equal(scdb_rc_slot_node(rc, slot, who, sizeof who), SCDB_OK);
        int m = lc_master_of_slot(g_cluster, slot);
        assert_true(m >= 0);
        snprintf(want, sizeof want, "127.0.0.1:%d", lc_port(g_cluster, m));
        assert_string_equal(who, want);
    }
    assert_int_equal(stats(rc).refreshes, 1);
    scdb_rc_close(&rc);
}

static void test_set_get_many_keys_on_all_masters(void **state)
{
    (void)state;
    enum { N = 3000 };
    scdb_rc *rc = open_cluster(2000, 0, 0);
    scdb_rc_stats s0 = stats(rc);
    put_keys(rc, "many", 0, N, 600000);
    scdb_rc_stats s1 = stats(rc);
    /* 6 batches of 500, one pipeline per master each, no redirection */
    assert_int_equal(s1.pipelines - s0.pipelines, 6 * 3);
    assert_int_equal(s1.moved, 0);
    assert_int_equal(s1.ask, 0);
    get_result g = get_keys(rc, "many", 0, N);
    assert_int_equal(g.ok, N);
    assert_int_equal(g.wrong + g.missing + g.errors, 0);
    assert_int_equal(stats(rc).pipelines - s1.pipelines, 3);

    /* every master holds its share, and the keys sit on their slot's master */
    int per_node[16] = {0};
    char k[80];
    for (uint64_t i = 0; i < N; i += 10) {
        size_t kl = key_for("many", i, k, sizeof k);
        int m = lc_master_of_slot(g_cluster, scdb_rc_slot(k, kl));
        assert_true(m >= 0);
        per_node[m]++;
        if (i % 100 == 0) {
            redisReply *r = lc_cmd(g_cluster, m, "EXISTS %b", k, kl); /* no redirection here */
            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_INTEGER);
            assert_int_equal(r->integer, 1);
            freeReplyObject(r);
            r = lc_cmd(g_cluster, m, "PTTL %b", k, kl);
            assert_true(r->integer > 0 && r->integer <= 600000);
            freeReplyObject(r);
        }
    }
    int masters = 0;
    for (int i = 0; i < 16; i++)
        if (per_node[i]) {
            masters++;
            assert_true(per_node[i] > N / 10 / 3 * 8 / 10);
        }
    assert_int_equal(masters, 3);

    /* single-key calls, EXISTS, DEL, a miss */
    size_t kl = key_for("single", 1, k, sizeof k);
    assert_int_equal(scdb_rc_set(rc, k, kl, "", 0, 0), SCDB_OK); /* empty value */
    void *v = NULL;
    size_t vl = 99;
    assert_int_equal(scdb_rc_get(rc, k, kl, &v, &vl), SCDB_OK);
    assert_int_equal(vl, 0);
    free(v);
    scdb_rc_op ops[3] = {
        {.cmd = SCDB_RC_EXISTS, .key = k, .key_len = kl},
        {.cmd = SCDB_RC_DEL, .key = k, .key_len = kl},
        {.cmd = SCDB_RC_DEL, .key = "scdb:never-set", .key_len = 14},
    };
    assert_int_equal(scdb_rc_exec(rc, ops, 3), SCDB_OK);
    assert_int_equal(ops[0].status, SCDB_OK);
    assert_int_equal(ops[1].status, SCDB_OK);
    assert_int_equal(ops[2].status, SCDB_ENOTFOUND);
    assert_int_equal(scdb_rc_get(rc, k, kl, &v, &vl), SCDB_ENOTFOUND);
    assert_null(v);

    /* a short TTL expires */
    kl = key_for("ttl", 1, k, sizeof k);
    assert_int_equal(scdb_rc_set(rc, k, kl, "x", 1, 50), SCDB_OK);
    double t0 = now_ms();
    while (scdb_rc_get(rc, k, kl, &v, &vl) == SCDB_OK) {
        free(v);
        assert_true(now_ms() - t0 < 5000);
        nap_ms(10);
    }
    assert_int_equal(stats(rc).errors, 0);
    scdb_rc_close(&rc);
}

static void test_prefix_probe(void **state)
{
    (void)state;
    enum { N = 100 };
    scdb_rc *rc = open_cluster(2000, 0, 0);
    char keys[N][80];
    scdb_rc_key list[N];
    for (int i = 0; i < N; i++) {
        list[i].p = keys[i];
        list[i].len = key_for("probe", (uint64_t)i, keys[i], sizeof keys[i]);
    }
    size_t n = 99;
    assert_int_equal(scdb_rc_probe(rc, list, N, &n), SCDB_OK);
    assert_int_equal(n, 0);
    put_keys(rc, "probe", 0, 37, 0);
    put_keys(rc, "probe", 38, 60, 0);
    scdb_rc_stats s0 = stats(rc);
    assert_int_equal(scdb_rc_probe(rc, list, N, &n), SCDB_OK);
    assert_int_equal(n, 37);
    assert_int_equal(stats(rc).pipelines - s0.pipelines, 3); /* one EXISTS round per master */
    put_keys(rc, "probe", 37, 38, 0);
    assert_int_equal(scdb_rc_probe(rc, list, N, &n), SCDB_OK);
    assert_int_equal(n, 60);
    assert_int_equal(scdb_rc_probe(rc, list, 60, &n), SCDB_OK);
    assert_int_equal(n, 60);
    assert_int_equal(scdb_rc_probe(rc, list + 60, 5, &n), SCDB_OK);
    assert_int_equal(n, 0);
    assert_int_equal(scdb_rc_probe(rc, list, 1, &n), SCDB_OK);
    assert_int_equal(n, 1);
    scdb_rc_close(&rc);
}

static int other_master(unsigned slot_a, int a)
{
    for (unsigned s = 0; s < SCDB_RC_SLOTS; s += 97) {
        int m = lc_master_of_slot(g_cluster, (slot_a + s) % SCDB_RC_SLOTS);
        if (m >= 0 && m != a) return m;
    }
    return -1;
}

static void cmd_ok(int node, redisReply *r, const char *what)
{
    (void)node;
    if (!r || r->type == REDIS_REPLY_ERROR) print_message("%s: %s\n", what, r ? r->str : "no reply");
    assert_non_null(r);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

/* A slot migrated by hand: ASK while it is half moved, MOVED after. */
static void test_ask_and_moved_during_a_migration(void **state)
{
    (void)state;
    /* keys of one slot: a hash tag puts them together (scdb's keys never
     * need one; the test does) */
    const char *k1 = "{mig}moved-early", *k2 = "{mig}moved-late", *k3 = "{mig}never", *k4 = "{mig}new";
    unsigned slot = scdb_rc_slot("mig", 3);
    int a = lc_master_of_slot(g_cluster, slot);
    assert_true(a >= 0);
    int b = other_master(slot, a);
    assert_true(b >= 0);
    char ida[41], idb[41];
    assert_int_equal(lc_node_id(g_cluster, a, ida), 0);
    assert_int_equal(lc_node_id(g_cluster, b, idb), 0);

    scdb_rc *rc = open_cluster(2000, 0, 0);
    assert_int_equal(scdb_rc_set(rc, k1, strlen(k1), "v1", 2, 0), SCDB_OK);
    assert_int_equal(scdb_rc_set(rc, k2, strlen(k2), "v2", 2, 0), SCDB_OK);

    cmd_ok(b, lc_cmd(g_cluster, b, "CLUSTER SETSLOT %u IMPORTING %s", slot, ida), "IMPORTING");
    cmd_ok(a, lc_cmd(g_cluster, a, "CLUSTER SETSLOT %u MIGRATING %s", slot, idb), "MIGRATING");
    cmd_ok(a, lc_cmd(g_cluster, a, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s", lc_port(g_cluster, b), "",
                     k1), "MIGRATE");

    char val[64];
    scdb_rc_stats s0 = stats(rc);
    assert_int_equal(get_str(rc, k1, val, sizeof val), SCDB_OK); /* A: ASK -> B */
    assert_string_equal(val, "v1");
    assert_int_equal(stats(rc).ask, s0.ask + 1);
    assert_int_equal(get_str(rc, k2, val, sizeof val), SCDB_OK); /* still on A */
    assert_string_equal(val, "v2");
    assert_int_equal(stats(rc).ask, s0.ask + 1);
    assert_int_equal(get_str(rc, k3, val, sizeof val), SCDB_ENOTFOUND); /* A: ASK, B: nil */
    assert_int_equal(stats(rc).ask, s0.ask + 2);
    assert_int_equal(scdb_rc_set(rc, k4, strlen(k4), "v4", 2, 0), SCDB_OK); /* new keys go to B */
    assert_int_equal(stats(rc).ask, s0.ask + 3);
    scdb_rc_key probe[3] = {{k1, strlen(k1)}, {k2, strlen(k2)}, {k4, strlen(k4)}};
    size_t n = 0;
    assert_int_equal(scdb_rc_probe(rc, probe, 3, &n), SCDB_OK);
    assert_int_equal(n, 3);
    assert_int_equal(stats(rc).moved, s0.moved); /* the map was never changed */

    /* finish: move the rest, hand the slot to B on every master */
    cmd_ok(a, lc_cmd(g_cluster, a, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s", lc_port(g_cluster, b), "",
                     k2), "MIGRATE");
    cmd_ok(b, lc_cmd(g_cluster, b, "CLUSTER SETSLOT %u NODE %s", slot, idb), "SETSLOT NODE");
    cmd_ok(a, lc_cmd(g_cluster, a, "CLUSTER SETSLOT %u NODE %s", slot, idb), "SETSLOT NODE");
    for (int i = 0; i < lc_size(g_cluster); i++)
        if (i != a && i != b) {
            redisReply *r = lc_cmd(g_cluster, i, "ROLE");
            bool master = r && r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[0]->str, "master");
            if (r) freeReplyObject(r);
            if (master) cmd_ok(i, lc_cmd(g_cluster, i, "CLUSTER SETSLOT %u NODE %s", slot, idb), "NODE");
        }
    s0 = stats(rc);
    assert_int_equal(get_str(rc, k2, val, sizeof val), SCDB_OK); /* A: MOVED -> B */
    assert_string_equal(val, "v2");
    assert_int_equal(stats(rc).moved, s0.moved + 1);
    assert_int_equal(get_str(rc, k1, val, sizeof val), SCDB_OK); /* straight to B now */
    assert_string_equal(val, "v1");
    assert_int_equal(stats(rc).moved, s0.moved + 1);
    char who[64], want[64];
    assert_int_equal(scdb_rc_slot_node(rc, slot, who, sizeof who), SCDB_OK);
    snprintf(want, sizeof want, "127.0.0.1:%d", lc_port(g_cluster, b));
    assert_string_equal(who, want);
    assert_int_equal(stats(rc).errors, 0);
    scdb_rc_close(&rc);
    char why[256];
    if (lc_wait_ready(g_cluster, 30000, why, sizeof why)) print_message("%s\n", why);
}

/* Reads stay right while redis-cli moves slots between masters. */
static void test_reads_during_redis_cli_reshard(void **state)
{
    (void)state;
    enum { N = 2000 };
    char why[256];
    assert_int_equal(lc_wait_ready(g_cluster, 30000, why, sizeof why), LC_OK);
    scdb_rc *rc = open_cluster(2000, 0, 0);
    put_keys(rc, "reshard", 0, N, 0);
    char k[80];
    size_t kl = key_for("reshard", 0, k, sizeof k);
    int from = lc_master_of_slot(g_cluster, scdb_rc_slot(k, kl));
    int to = other_master(scdb_rc_slot(k, kl), from);
    char idf[41], idt[41], addr[32];
    assert_int_equal(lc_node_id(g_cluster, from, idf), 0);
    assert_int_equal(lc_node_id(g_cluster, to, idt), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", lc_port(g_cluster, from));
    char *argv[] = {"redis-cli", "--cluster", "reshard", addr, "--cluster-from", idf,
                    "--cluster-to", idt, "--cluster-slots", "300", "--cluster-yes", NULL};
    scdb_rc_stats s0 = stats(rc);
    pid_t pid = lc_spawn_cli(g_cluster, argv, "reshard.log");
    assert_true(pid > 0);
    int status = -1, rounds = 0;
    double t0 = now_ms();
    for (;;) {
        get_result g = get_keys(rc, "reshard", 0, N);
        rounds++;
        if (g.ok != N) print_message("round %d: ok %zu missing %zu wrong %zu errors %zu (%s)\n", rounds,
                                     g.ok, g.missing, g.wrong, g.errors, scdb_rc_last_error(rc));
        assert_int_equal(g.ok, N);
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        assert_true(now_ms() - t0 < 60000);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    get_result g = get_keys(rc, "reshard", 0, N);
    assert_int_equal(g.ok, N);
    scdb_rc_stats s1 = stats(rc);
    print_message("reshard of 300 slots: %d read rounds of %d keys, %llu MOVED, %llu ASK\n", rounds, N,
                  (unsigned long long)(s1.moved - s0.moved), (unsigned long long)(s1.ask - s0.ask));
    assert_true(s1.moved > s0.moved);
    assert_int_equal(s1.errors, s0.errors);
    /* after a refresh the map is the cluster's, and reads need no redirection */
    assert_int_equal(lc_wait_ready(g_cluster, 30000, why, sizeof why), LC_OK);
    assert_int_equal(scdb_rc_refresh(rc), SCDB_OK);
    s1 = stats(rc);
    g = get_keys(rc, "reshard", 0, N);
    assert_int_equal(g.ok, N);
    assert_int_equal(stats(rc).moved, s1.moved);
    for (unsigned slot = 0; slot < SCDB_RC_SLOTS; slot += 61) {
        char who[64], want[64];
        assert_int_equal(scdb_rc_slot_node(rc, slot, who, sizeof who), SCDB_OK);
        snprintf(want, sizeof want, "127.0.0.1:%d", lc_port(g_cluster, lc_master_of_slot(g_cluster, slot)));
        assert_string_equal(who, want);
    }
    scdb_rc_close(&rc);
}

static void acl_on_all(const char *fmt, const char *user, const char *pass)
{
    for (int i = 0; i < lc_size(g_cluster); i++) {
        redisReply *r = pass ? lc_cmd(g_cluster, i, fmt, user, pass) : lc_cmd(g_cluster, i, fmt, user);
        cmd_ok(i, r, "ACL");
    }
}

static void test_acl_user_and_password_file(void **state)
{
    (void)state;
    char good[512], bad[512], msg[256], val[64];
    snprintf(good, sizeof good, "%s/good-password", lc_dir(g_cluster));
    snprintf(bad, sizeof bad, "%s/bad-password", lc_dir(g_cluster));
    write_file(good, "s3cret-Pa55\n");
    write_file(bad, "not-it\r\n");
    /* what the client needs, and nothing else */
    acl_on_all("ACL SETUSER %s reset on >%s ~scdb:* +get +set +exists +del +asking +cluster|slots +ping",
               "scdbuser", "s3cret-Pa55");
    acl_on_all("ACL SETUSER %s reset on >%s ~* +asking +cluster|slots +ping +set", "writeonly",
               "s3cret-Pa55");

    scdb_rc_config cfg = {.seeds = lc_seeds(g_cluster), .timeout_ms = 2000, .user = "scdbuser",
                          .password_file = good};
    scdb_rc *rc = NULL;
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_OK);
    assert_int_equal(scdb_rc_set(rc, "scdb:acl", 8, "ok", 2, 0), SCDB_OK);
    assert_int_equal(get_str(rc, "scdb:acl", val, sizeof val), SCDB_OK);
    assert_string_equal(val, "ok");
    assert_int_equal(get_str(rc, "other:acl", val, sizeof val), SCDB_EAUTH); /* key pattern */
    assert_non_null(strstr(scdb_rc_last_error(rc), "NOPERM"));
    scdb_rc_close(&rc);

    /* wrong password: a clear error at open */
    cfg.password_file = bad;
    double t0 = now_ms();
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_EAUTH);
    assert_true(now_ms() - t0 < 2000 + SLACK_MS);
    assert_null(rc);
    print_message("wrong password: %s\n", msg);
    assert_non_null(strstr(msg, "scdbuser"));
    assert_non_null(strstr(msg, "WRONGPASS"));
    /* unknown user, default user with a password it does not have */
    cfg.user = "nobody";
    cfg.password_file = good;
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_EAUTH);
    cfg.user = NULL;
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_EAUTH);
    assert_non_null(strstr(msg, "AUTH"));
    /* a password file that is not there */
    cfg.user = "scdbuser";
    cfg.password_file = "/nonexistent/redis-password";
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_ENOTFOUND);
    /* a user that may not GET: its ops say so (SCDB_EAUTH, NOPERM) */
    cfg.user = "writeonly";
    cfg.password_file = good;
    assert_int_equal(scdb_rc_open(&cfg, &rc, msg, sizeof msg), SCDB_OK);
    assert_int_equal(scdb_rc_set(rc, "scdb:acl2", 9, "w", 1, 0), SCDB_OK);
    assert_int_equal(get_str(rc, "scdb:acl2", val, sizeof val), SCDB_EAUTH);
    assert_true(stats(rc).auth_failures >= 1);
    scdb_rc_close(&rc);
    acl_on_all("ACL DELUSER %s", "scdbuser", NULL);
    acl_on_all("ACL DELUSER %s", "writeonly", NULL);
}

/* The remote tier's other commands (issue 25 item 2): GETEX refreshes a
 * key's TTL as it reads it (ttl 0: a plain GET, the TTL left alone);
 * APPEND answers the new length; GETRANGE reads a range, "" past the end
 * and for an absent key; each routed by its key like GET; a bad argument
 * is refused before any request. */
static void test_getex_append_getrange(void **state)
{
    (void)state;
    scdb_rc *rc = open_cluster(2000, 0, 0);
    const char *k = "cmds:log", *g = "cmds:ttl";
    int m = lc_master_of_slot(g_cluster, scdb_rc_slot(g, strlen(g)));
    assert_int_equal(scdb_rc_set(rc, g, strlen(g), "value", 5, 100000), SCDB_OK);
    scdb_rc_op op = {.cmd = SCDB_RC_GETEX, .key = g, .key_len = strlen(g), .ttl_ms = 3600000};
    assert_int_equal(scdb_rc_exec(rc, &op, 1), SCDB_OK);
    assert_int_equal(op.out_len, 5);
    assert_memory_equal(op.out, "value", 5);
    free(op.out);
    redisReply *r = lc_cmd(g_cluster, m, "PTTL %s", g);
    assert_true(r->integer > 3500000);
    freeReplyObject(r);
    memset(&op, 0, sizeof op);
    op.cmd = SCDB_RC_GETEX;             /* ttl 0: GET, the TTL as it was */
    op.key = g;
    op.key_len = strlen(g);
    r = lc_cmd(g_cluster, m, "PEXPIRE %s 50000", g);
    freeReplyObject(r);
    assert_int_equal(scdb_rc_exec(rc, &op, 1), SCDB_OK);
    free(op.out);
    r = lc_cmd(g_cluster, m, "PTTL %s", g);
    assert_true(r->integer <= 50000 && r->integer > 0);
    freeReplyObject(r);
    op.out = NULL;
    op.key = "cmds:absent";
    op.key_len = strlen(op.key);
    op.ttl_ms = 1000;
    assert_int_equal(scdb_rc_exec(rc, &op, 1), SCDB_OK);
    assert_int_equal(op.status, SCDB_ENOTFOUND);
    assert_null(op.out);

    scdb_rc_op ops[3];
    const char *parts[3] = {"abc", "", "defgh"};
    int64_t want[3] = {3, 3, 8};
    for (int i = 0; i < 3; i++) {      /* one at a time: APPENDs of a batch may run in any order */
        memset(&ops[i], 0, sizeof ops[i]);
        ops[i].cmd = SCDB_RC_APPEND;
        ops[i].key = k;
        ops[i].key_len = strlen(k);
        ops[i].val = parts[i];
        ops[i].val_len = strlen(parts[i]);
        assert_int_equal(scdb_rc_exec(rc, &ops[i], 1), SCDB_OK);
        assert_int_equal(ops[i].integer, want[i]);
        assert_null(ops[i].out);
    }
    struct { int64_t a, z; const char *want; } ranges[] = {
        {0, -1, "abcdefgh"}, {2, 4, "cde"}, {6, 100, "gh"}, {8, 20, ""}, {-3, -1, "fgh"},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        memset(&op, 0, sizeof op);
        op.cmd = SCDB_RC_GETRANGE;
        op.key = k;
        op.key_len = strlen(k);
        op.start = ranges[i].a;
        op.end = ranges[i].z;
        assert_int_equal(scdb_rc_exec(rc, &op, 1), SCDB_OK);
        assert_int_equal(op.out_len, strlen(ranges[i].want));
        if (op.out_len) assert_memory_equal(op.out, ranges[i].want, op.out_len);
        free(op.out);
    }
    memset(&op, 0, sizeof op);          /* an absent key: "" */
    op.cmd = SCDB_RC_GETRANGE;
    op.key = "cmds:nolog";
    op.key_len = strlen(op.key);
    op.end = 100;
    assert_int_equal(scdb_rc_exec(rc, &op, 1), SCDB_OK);
    assert_int_equal(op.status, SCDB_OK);
    assert_int_equal(op.out_len, 0);
    free(op.out);
    /* the wrong type: an error reply, SCDB_EPROTO, no crash */
    r = lc_cmd(g_cluster, lc_master_of_slot(g_cluster, scdb_rc_slot("cmds:list", 9)),
               "RPUSH cmds:list x");
    freeReplyObject(r);
    memset(&op, 0, sizeof op);
    op.cmd = SCDB_RC_APPEND;
    op.key = "cmds:list";
    op.key_len = 9;
    op.val = "x";
    op.val_len = 1;
    assert_int_equal(scdb_rc_exec(rc, &op, 1), SCDB_EPROTO);
    assert_non_null(strstr(scdb_rc_last_error(rc), "WRONGTYPE"));
    /* refused before any request */
    scdb_rc_op bad[2] = {
        {.cmd = SCDB_RC_APPEND, .key = k, .key_len = strlen(k), .val = NULL, .val_len = 3},
        {.cmd = SCDB_RC_GETRANGE + 1, .key = k, .key_len = strlen(k)},
    };
    assert_int_equal(scdb_rc_exec(rc, bad, 2), SCDB_EINVAL);
    assert_int_equal(bad[0].status, SCDB_EINVAL);
    assert_int_equal(bad[1].status, SCDB_EINVAL);
    scdb_rc_close(&rc);
}

static const struct CMUnitTest routing_tests[] = {
    cmocka_unit_test(test_getex_append_getrange),
    cmocka_unit_test(test_slots_match_cluster_keyslot),
    cmocka_unit_test(test_map_matches_cluster),
    cmocka_unit_test(test_set_get_many_keys_on_all_masters),
    cmocka_unit_test(test_prefix_probe),
    cmocka_unit_test(test_acl_user_and_password_file),
    cmocka_unit_test(test_ask_and_moved_during_a_migration),
    cmocka_unit_test(test_reads_during_redis_cli_reshard),
};

/* ------------------------------------------------------------- faults */

enum { FN = 600, FTIMEOUT = 300 };

/* Which of keys [0, FN) live on master m (by the cluster's own map). */
static size_t keys_on(int m, bool *mine)
{
    size_t c = 0;
    char k[80];
    for (uint64_t i = 0; i < FN; i++) {
        size_t kl = key_for("fault", i, k, sizeof k);
        mine[i] = lc_master_of_slot(g_cluster, scdb_rc_slot(k, kl)) == m;
        c += mine[i];
    }
    return c;
}

static void replicate_all(void)
{
    char why[256];
    int r = lc_wait_replicated(g_cluster, 20000, why, sizeof why);
    if (r != LC_OK) print_message("%s\n", why);
    assert_int_equal(r, LC_OK);
}

/* SIGSTOP a master: its commands cost one timeout, then fail at once while
 * it backs off; everyone else's are served; after SIGCONT all resume. */
static void test_stopped_master_costs_one_timeout(void **state)
{
    (void)state;
    scdb_rc *rc = open_cluster(FTIMEOUT, 200, 400);
    put_keys(rc, "fault", 0, FN, 0);
    replicate_all();
    char k[80];
    size_t kl = key_for("fault", 0, k, sizeof k);
    int m = lc_master_of_slot(g_cluster, scdb_rc_slot(k, kl));
    static bool mine[FN];
    size_t on_m = keys_on(m, mine);
    assert_true(on_m > 0 && on_m < FN);

    assert_int_equal(lc_signal(g_cluster, m, SIGSTOP), 0);
    scdb_rc_stats s0 = stats(rc);
    double t0 = now_ms();
    get_result g = get_keys(rc, "fault", 0, FN);
    double took = now_ms() - t0;
    print_message("stopped master: %zu ok, %zu timed out, in %.0f ms\n", g.ok, g.errors, took);
    assert_true(took < FTIMEOUT + SLACK_MS);
    assert_int_equal(g.wrong, 0);
    assert_int_equal(g.ok, FN - on_m);
    assert_int_equal(g.errors, on_m);
    assert_int_equal(g.first_error, SCDB_ETIMEDOUT);
    assert_int_equal(stats(rc).timeouts, s0.timeouts + on_m);
    /* backing off: the stopped node is not waited for again */
    t0 = now_ms();
    g = get_keys(rc, "fault", 0, FN);
    took = now_ms() - t0;
    assert_int_equal(g.ok, FN - on_m);
    if (g.first_error == SCDB_EIO) /* (unless the backoff already ran out) */
        assert_true(stats(rc).backoff_skips >= s0.backoff_skips + on_m);
    assert_int_equal(lc_signal(g_cluster, m, SIGCONT), 0);
    t0 = now_ms();
    for (;;) {
        g = get_keys(rc, "fault", 0, FN);
        assert_int_equal(g.wrong, 0);
        if (g.ok == FN) break;
        assert_true(now_ms() - t0 < 10000);
        nap_ms(20);
    }
    assert_true(stats(rc).reconnects > s0.reconnects);
    scdb_rc_close(&rc);
    char why[256];
    assert_int_equal(lc_wait_ready(g_cluster, 30000, why, sizeof why), LC_OK);
}

/* kill -9 a master: after its replica takes over, reads go on with the
 * right bytes; no call waits past its deadline on the way. */
static void test_killed_master_fails_over(void **state)
{
    (void)state;
    scdb_rc *rc = open_cluster(FTIMEOUT, 100, 400);
    put_keys(rc, "fault", 0, FN, 0);
    replicate_all();
    char k[80];
    size_t kl = key_for("fault", 0, k, sizeof k);
    unsigned slot = scdb_rc_slot(k, kl);
    int m = lc_master_of_slot(g_cluster, slot);
    scdb_rc_stats s0 = stats(rc);
    assert_int_equal(lc_signal(g_cluster, m, SIGKILL), 0);
    double t0 = now_ms(), worst = 0;
    int calls = 0, failing_calls = 0;
    for (;;) {
        double c0 = now_ms();
        get_result g = get_keys(rc, "fault", 0, FN);
        double took = now_ms() - c0;
        if (took > worst) worst = took;
        calls++;
        if (g.missing) { /* who said nil? */
            char who[64];
            scdb_rc_slot_node(rc, slot, who, sizeof who);
            int now_m = lc_master_of_slot(g_cluster, slot);
            redisReply *r = now_m >= 0 ? lc_cmd(g_cluster, now_m, "DBSIZE") : NULL;
            print_message("call %d after %.0f ms: %zu missing; client routes slot %u to %s, cluster to "
                          "port %d (DBSIZE %lld); killed port %d\n", calls, now_ms() - t0, g.missing,
                          slot, who, now_m >= 0 ? lc_port(g_cluster, now_m) : -1,
                          r ? r->integer : -1, lc_port(g_cluster, m));
            if (r) freeReplyObject(r);
        }
        assert_int_equal(g.wrong, 0);
        assert_int_equal(g.missing, 0);
        if (g.ok == FN) break;
        failing_calls++;
        assert_true(now_ms() - t0 < 30000);
        nap_ms(20);
    }
    scdb_rc_stats s1 = stats(rc);
    print_message("failover: reads whole again after %.1f s, %d calls (%d with errors), slowest "
                  "%.0f ms, %llu errors, %llu refreshes\n", (now_ms() - t0) / 1000, calls,
                  failing_calls, worst, (unsigned long long)(s1.errors - s0.errors),
                  (unsigned long long)(s1.refreshes - s0.refreshes));
    assert_true(worst < FTIMEOUT + SLACK_MS);
    assert_true(failing_calls > 0);
    assert_true(s1.errors > s0.errors);
    assert_true(s1.refreshes > s0.refreshes);
    char who[64], dead[64];
    assert_int_equal(scdb_rc_slot_node(rc, slot, who, sizeof who), SCDB_OK);
    snprintf(dead, sizeof dead, "127.0.0.1:%d", lc_port(g_cluster, m));
    assert_string_not_equal(who, dead);
    /* writes go on too */
    put_keys(rc, "fault-after", 0, 200, 0);
    get_result g = get_keys(rc, "fault-after", 0, 200);
    assert_int_equal(g.ok, 200);
    scdb_rc_close(&rc);
    char why[256];
    assert_int_equal(lc_wait_ready(g_cluster, 30000, why, sizeof why), LC_OK);
}

/* Every node killed: calls fail fast and are counted; restarted (the
 * nodes.conf files bring the cluster back): calls resume. */
static void test_whole_cluster_down_and_back(void **state)
{
    (void)state;
    scdb_rc *rc = open_cluster(FTIMEOUT, 100, 300);
    put_keys(rc, "down", 0, 100, 0);
    scdb_rc_stats s0 = stats(rc);
    for (int i = 0; i < lc_size(g_cluster); i++)
        if (lc_alive(g_cluster, i)) assert_int_equal(lc_signal(g_cluster, i, SIGKILL), 0);
    double t0 = now_ms();
    for (int c = 0; c < 50; c++) {
        double c0 = now_ms();
        get_result g = get_keys(rc, "down", 0, 100);
        assert_true(now_ms() - c0 < FTIMEOUT + SLACK_MS);
        assert_int_equal(g.ok + g.missing + g.wrong, 0);
        assert_int_equal(g.errors, 100);
        assert_int_equal(g.first_error, SCDB_EIO);
    }
    double took = now_ms() - t0;
    scdb_rc_stats s1 = stats(rc);
    print_message("cluster down: 50 calls of 100 GETs failed in %.0f ms; %llu backoff skips, %llu "
                  "connect failures\n", took, (unsigned long long)(s1.backoff_skips - s0.backoff_skips),
                  (unsigned long long)(s1.connect_failures - s0.connect_failures));
    assert_int_equal(s1.errors - s0.errors, 50 * 100);
    assert_true(s1.backoff_skips > s0.backoff_skips);
    assert_true(took < 2 * SLACK_MS);

    char why[256];
    for (int i = 0; i < lc_size(g_cluster); i++)
        assert_int_equal(lc_restart(g_cluster, i, why, sizeof why), LC_OK);
    assert_int_equal(lc_wait_ready(g_cluster, 60000, why, sizeof why), LC_OK);
    t0 = now_ms();
    char k[80];
    size_t kl = key_for("back", 0, k, sizeof k);
    while (scdb_rc_set(rc, k, kl, "b", 1, 0) != SCDB_OK) {
        assert_true(now_ms() - t0 < 10000);
        nap_ms(20);
    }
    print_message("cluster back: calls resume %.0f ms after it is ready\n", now_ms() - t0);
    put_keys(rc, "back", 0, 300, 0); /* persistence is off: old keys are gone, new ones work */
    get_result g = get_keys(rc, "back", 0, 300);
    assert_int_equal(g.ok, 300);
    assert_true(stats(rc).reconnects > s1.reconnects);
    scdb_rc_close(&rc);
}

static const struct CMUnitTest faults_tests[] = {
    cmocka_unit_test(test_stopped_master_costs_one_timeout),
    cmocka_unit_test(test_killed_master_fails_over),
    cmocka_unit_test(test_whole_cluster_down_and_back),
};

int main(int argc, char **argv)
{
    const char *group = argc > 1 ? argv[1] : "all";
    bool all = !strcmp(group, "all");
    int failed = 0;
    if (!all && strcmp(group, "unit") && strcmp(group, "routing") && strcmp(group, "faults")) {
        fprintf(stderr, "usage: %s [unit|routing|faults|all]\n", argv[0]);
        return 2;
    }
    if (all || !strcmp(group, "unit"))
        failed |= cmocka_run_group_tests_name("redis_cluster_unit", unit_tests, NULL, NULL);
    if (all || !strcmp(group, "routing") || !strcmp(group, "faults")) {
        char why[256];
        if (!lc_available(why, sizeof why)) {
            printf("skipped: %s\n", why);
            return all ? failed : 77;
        }
    }
    if (all || !strcmp(group, "routing"))
        failed |= cmocka_run_group_tests_name("redis_cluster_routing", routing_tests, routing_setup,
                                              cluster_teardown);
    if (all || !strcmp(group, "faults"))
        failed |= cmocka_run_group_tests_name("redis_cluster_faults", faults_tests, faults_setup,
                                              cluster_teardown);
    return failed ? 1 : 0;
}
