/* test_ops.c — operating the broker (issue 14 item 3, issue 20 item 8): a
 * real scdb-broker process, this process its libscdb clients.
 *
 *   reload_with_live_clients  SIGHUP with a consumer holding an arena and a
 *       live session, a producer, and a consumer of a model whose geometry
 *       the new file changes: the arena and session keep working, the new
 *       pair becomes usable, a fixed setting is reported and kept, a
 *       run-time one applied, the changed model's client keeps the old set
 *       (its decoder stays alive until it leaves); then a bad file (a pair
 *       naming a missing file) keeps everything as it was.
 *   notify_protocol  started with $NOTIFY_SOCKET (as systemd's Type=notify
 *       does), the broker sends READY=1 once it serves, RELOADING=1 then
 *       READY=1 around a SIGHUP reload, STOPPING=1 when SIGTERM drains.
 *   reload_stale_pair  a reload that brings a pair calibrated for other
 *       weights: the client that registered with its weights fingerprint
 *       keeps the pair it was checked against, a new one is refused.
 *   reload_adds_adapters  [consumers GROUP] names LoRA adapters by glob, each
 *       a model with a raw-reuse pair: one at start, 16 more dropped in
 *       the directory and a SIGHUP: the running consumer keeps its arena,
 *       every new adapter registers and reads the stored prefix; prints the
 *       reload's time and the broker's RSS per added consumer (measured,
 *       not asserted).
 *   restart_not_errors  a client that survives a broker restart: its first
 *       calls carry the old token and are answered SCDB_ECLOSED (libscdb
 *       registers again and retries); the broker counts them as stale
 *       tokens, not errors.
 *
 * Waits poll the broker's own counters (reloads, reload_failures,
 * stale_tokens) up to a generous bound: no timing is asserted. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "broker_kv.h"
#include "signal_pid.h"
#include "scdb.h"
#include "scdb_common.h"
#include "tiny_adapter.h"

#define NTOK 128
#define WAIT_S 60

static char dir[128], cfg_path[256], endpoint[300], log_path[256];
static pid_t broker_pid = -1;

static void write_config(const char *extra)
{
    FILE *f = fopen(cfg_path, "w");
    assert_non_null(f);
    fprintf(f,
            "[broker]\nendpoint = %s\ndata_dir = %s/store\nworkers = 2\nheartbeat_ms = 200\n"
            "heartbeat_timeout_ms = 5000\nno_sync = 1\nlog_level = info\n%s\n"
            "[model m]\nn_layers = 2\nn_kv_heads = 1\nhead_dim = 8\nmax_seq_len = 512\n"
            "n_heads = 2\nraw_dtype = f32\n\n"
            "[model other]\nn_layers = 2\nn_kv_heads = 1\nhead_dim = 8\nmax_seq_len = 512\n"
            "n_heads = 2\n\n",
            endpoint, dir, extra ? extra : "");
    fclose(f);
}

static void append_config(const char *text)
{
    FILE *f = fopen(cfg_path, "a");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void start_broker(void)
{
    double until = scdb_now() + WAIT_S;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(SCDB_BROKER_BIN, SCDB_BROKER_BIN, "--config", cfg_path, (char *)NULL);
        _exit(127);
    }
    broker_pid = pid;
    for (;;) {
        scdb_opts o = {.endpoint = endpoint, .timeout_ms = 200, .no_heartbeat = 1};
        scdb *h = NULL;
        int st;
        if (scdb_connect(&o, &h) == SCDB_OK && scdb_ping(h, NULL) == SCDB_OK) {
            scdb_close(&h);
            return;
        }
        scdb_close(&h);
        assert_int_equal(waitpid(broker_pid, &st, WNOHANG), 0);
        assert_true(scdb_now() < until);
        usleep(20000);
    }
}

static int stop_broker(void)
{
    int st = 0;
    if (broker_pid < 0) return -1;
    kill(broker_pid, SIGTERM);
    waitpid(broker_pid, &st, 0);
    broker_pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static scdb *client(scdb_role role, const char *model, const char *codebook, scdb_err want)
{
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 10000, .name = "test_ops"};
    scdb *h = NULL;
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    scdb_err e = scdb_register(h, role, model, codebook, NULL);
    if (e != want) fail_msg("register %s: %s (%s)", model, scdb_strerror(e), scdb_last_error(h));
    if (e) scdb_close(&h);
    return h;
}

static void stats(scdb_stat *s)
{
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 10000, .no_heartbeat = 1};
    scdb *h = NULL;
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    assert_int_equal(scdb_stats(h, s), SCDB_OK);
    scdb_close(&h);
}

/* Wait until the broker's counter at offset off reaches want. */
static void wait_counter(size_t off, uint64_t want, const char *what)
{
    double until = scdb_now() + WAIT_S;
    for (;;) {
        scdb_stat s;
        uint64_t v;
        stats(&s);
        memcpy(&v, (char *)&s + off, sizeof v);
        if (v >= want) return;
        if (scdb_now() > until) fail_msg("%s never reached %llu", what, (unsigned long long)want);
        usleep(20000);
    }
}

static int log_has(const char *needle)
{
    char *buf = NULL;
    size_t len = 0;
    int found;
    if (scdb_read_file(log_path, 1 << 26, &buf, &len)) return 0;
    found = strstr(buf, needle) != NULL;
    free(buf);
    return found;
}

/* put prefix seed (NTOK tokens) as the producer of model */
static void put_prefix(scdb *p, const char *model, int n_layers, uint32_t seed)
{
    int32_t tok[NTOK];
    scdb_kv_cache *c = NULL;
    scdb_put_result r;
    (void)model;
    bkv_tokens(seed, tok, NTOK);
    assert_int_equal(scdb_kv_cache_new(n_layers, 1, 8, NTOK, &c), SCDB_OK);
    bkv_fill(seed, c, NTOK);
    assert_int_equal(scdb_put_cache(p, tok, NTOK, c, &r), SCDB_OK);
    assert_int_equal(r.n_stored, NTOK / 64);
    scdb_kv_cache_free(&c);
}

/* get prefix seed into arena a at slot0 and check it bit for bit */
static void get_check(scdb *h, scdb_arena *a, int slot0, uint32_t seed, int f16)
{
    int32_t tok[NTOK];
    scdb_get_result r;
    bkv_tokens(seed, tok, NTOK);
    scdb_err e = scdb_get(h, tok, NTOK, a, slot0, 0, &r);
    if (e) fail_msg("get: %s (%s)", scdb_strerror(e), scdb_last_error(h));
    assert_int_equal(r.tokens_written, NTOK);
    assert_int_equal(bkv_check(seed, scdb_arena_cache(a), slot0, 0, NTOK, 0, f16), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_ops.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(cfg_path, sizeof cfg_path, "%s/broker.ini", dir);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/b.sock", dir);
    snprintf(log_path, sizeof log_path, "%s/broker.log", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (broker_pid > 0) stop_broker();
    if (getenv("TEST_OPS_KEEP")) fprintf(stderr, "kept %s\n", dir);
    else scdb_rm_tree(dir);
    return 0;
}

/* ------------------------------------------------------------------ tests */

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

/* DIR/fleet/<name>: a LoRA adapter over "mbase" (DIR/models/mbase, m's geometry) */
static void drop_adapter(const char *name, uint64_t seed)
{
    char ad[300];
    uint64_t rng = seed;
    snprintf(ad, sizeof ad, "%s/fleet/%s", dir, name);
    tiny_adapter a = {.base = "mbase", .d = 16, .layers = 2, .heads = 2, .kv = 1, .hd = 8, .ff = 24,
                      .rng = &rng};
    tiny_adapter_write(ad, &a);
}

static void reload_adds_adapters(void **state)
{
    char path[300], extra[600], name[32];
    scdb_stat s;
    scdb *prod, *c0, *h;
    scdb_arena *a0, *a;
    (void)state;
    snprintf(path, sizeof path, "%s/models", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/models/mbase", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/models/mbase/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"name\": \"mbase\", \"vocab_size\": 256, \"d_model\": 16, \"n_layers\": 2, \"n_heads\": 2, "
          "\"n_kv_heads\": 1, \"head_dim\": 8, \"d_ff\": 24, \"max_seq_len\": 512, "
          "\"rope_theta\": 10000.0, \"norm_eps\": 1e-5}\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/fleet", dir);
    mkdir(path, 0755);
    drop_adapter("lora00", 1);
    snprintf(path, sizeof path, "%s/fleet/not-a-model", dir);   /* skipped */
    mkdir(path, 0755);
    snprintf(extra, sizeof extra, "models_dir = %s/models\n\n[consumers fleet]\ndirs = %s/fleet/*\n"
             "codebook = raw/m\ndecoder = raw\n", dir, dir);
    write_config(extra);
    start_broker();

    prod = client(SCDB_PRODUCER, "m", NULL, SCDB_OK);
    put_prefix(prod, "m", 2, 3);
    c0 = client(SCDB_CONSUMER, "lora00", "raw/m", SCDB_OK);
    assert_int_equal(scdb_arena_new(c0, 256, &a0), SCDB_OK);
    get_check(c0, a0, 0, 3, 0);
    assert_null(client(SCDB_CONSUMER, "lora01", "raw/m", SCDB_ENOTFOUND));
    assert_null(client(SCDB_CONSUMER, "not-a-model", "raw/m", SCDB_ENOTFOUND));

    /* 16 more adapters and a SIGHUP */
    for (int i = 1; i <= 16; i++) {
        snprintf(name, sizeof name, "lora%02d", i);
        drop_adapter(name, 100 + (uint64_t)i);
    }
    long rss0 = rss_kib(broker_pid);
    double t0 = scdb_now();
    kill(broker_pid, SIGHUP);
    wait_counter(offsetof(scdb_stat, reloads), 1, "reloads");
    double reload_s = scdb_now() - t0;
    long rss1 = rss_kib(broker_pid);
    stats(&s);
    assert_int_equal(s.reload_failures, 0);
    assert_true(s.clients >= 2);                  /* the producer and lora00 stayed */
    get_check(c0, a0, 0, 3, 0);                   /* lora00's arena works across it */
    double reg_s = 0;
    for (int i = 1; i <= 16; i++) {
        snprintf(name, sizeof name, "lora%02d", i);
        double r0 = scdb_now();
        h = client(SCDB_CONSUMER, name, "raw/m", SCDB_OK);
        reg_s += scdb_now() - r0;
        assert_int_equal(scdb_arena_new(h, 256, &a), SCDB_OK);
        get_check(h, a, 0, 3, 0);
        scdb_arena_free(&a);
        scdb_close(&h);
    }
    long rss2 = rss_kib(broker_pid);
    print_message("16 adapters added by SIGHUP: reload %.1f ms (poll-bounded), registration %.2f ms each; "
                  "broker RSS %ld -> %ld KiB after the reload (%+.1f KiB per added consumer), %ld KiB "
                  "after 16 registrations and reads\n", reload_s * 1e3, reg_s / 16 * 1e3, rss0, rss1,
                  (double)(rss1 - rss0) / 16, rss2);
    scdb_arena_free(&a0);
    scdb_close(&c0);
    scdb_close(&prod);
    assert_int_equal(stop_broker(), 0);
}

static void reload_with_live_clients(void **state)
{
    scdb *prod, *cons, *g_prod, *g_cons, *h;
    scdb_arena *a, *a2, *ga;
    scdb_session *sess;
    scdb_session_opts so = {.budget = 64, .policy = "h2o", .cadence = 0, .n_heads = 2};
    scdb_session_evict_result er;
    scdb_stat s;

    (void)state;
    /* model g: its geometry changes in the next file */
    write_config("max_inflight = 1024");
    append_config("[model g]\nn_layers = 2\nn_kv_heads = 1\nhead_dim = 8\nraw_dtype = f32\n\n");
    start_broker();

    prod = client(SCDB_PRODUCER, "m", NULL, SCDB_OK);
    put_prefix(prod, "m", 2, 1);
    cons = client(SCDB_CONSUMER, "m", NULL, SCDB_OK);
    assert_int_equal(scdb_arena_new(cons, 256, &a), SCDB_OK);
    get_check(cons, a, 0, 1, 0);
    assert_int_equal(scdb_session_open(a, &so, &sess), SCDB_OK);
    g_prod = client(SCDB_PRODUCER, "g", NULL, SCDB_OK);
    put_prefix(g_prod, "g", 2, 7);
    g_cons = client(SCDB_CONSUMER, "g", NULL, SCDB_OK);
    assert_int_equal(scdb_arena_new(g_cons, 256, &ga), SCDB_OK);
    /* no pair decodes m's raw KV into other yet */
    assert_null(client(SCDB_CONSUMER, "other", "raw/m", SCDB_ENOTFOUND));

    /* the new file: a pair, a run-time limit, a fixed setting, g changed */
    write_config("max_inflight = 77\nworkers = 3");
    append_config("[model g]\nn_layers = 3\nn_kv_heads = 1\nhead_dim = 8\nraw_dtype = f32\n\n"
                  "[pair raw/m other]\ndecoder = raw\n\n");
    kill(broker_pid, SIGHUP);
    wait_counter(offsetof(scdb_stat, reloads), 1, "reloads");
    stats(&s);
    assert_int_equal(s.reload_failures, 0);
    assert_int_equal(s.registry_generation, 2);
    assert_int_equal(s.workers, 2);                       /* fixed: kept */
    assert_true(log_has("reload: workers cannot change while the broker runs: keeping 2"));
    assert_true(log_has("reload: max_inflight = 77 (was 1024)"));
    assert_true(log_has("keeps the previous g raw/g"));
    assert_int_equal(s.clients, 4);                        /* all still there */

    /* the consumer's arena and session work across the reload */
    assert_int_equal(scdb_session_add_stats(sess, NULL, 0, 0), SCDB_OK);
    assert_int_equal(scdb_session_evict(sess, 64, &er), SCDB_OK);
    assert_int_equal(er.n_before, NTOK);
    assert_int_equal(er.n_kept, 64);
    assert_int_equal(scdb_arena_new(cons, 256, &a2), SCDB_OK);
    get_check(cons, a2, 0, 1, 0);
    /* the new pair is usable: m's raw KV decoded into other (f16 payloads
     * of m are f32 here: the pair is raw, bit for bit) */
    h = client(SCDB_CONSUMER, "other", "raw/m", SCDB_OK);
    {
        scdb_arena *oa;
        assert_int_equal(scdb_arena_new(h, 256, &oa), SCDB_OK);
        get_check(h, oa, 0, 1, 0);
        scdb_arena_free(&oa);
    }
    scdb_close(&h);
    /* g's client stayed on the previous set: its decoder is alive */
    get_check(g_cons, ga, 0, 7, 0);
    /* a new g client gets the new geometry (3 layers): the old blocks are
     * g's namespace with a 2-layer payload, so it sees a shape error */
    h = client(SCDB_CONSUMER, "g", NULL, SCDB_OK);
    assert_int_equal(scdb_get_info(h)->n_layers, 3);
    scdb_close(&h);

    /* a bad file: a pair whose file is missing keeps the running set */
    write_config("max_inflight = 5");
    append_config("[codebook broken]\nkind = scd\nmodel = m\nfile = /nonexistent/cb.safetensors\n");
    kill(broker_pid, SIGHUP);
    wait_counter(offsetof(scdb_stat, reload_failures), 1, "reload_failures");
    stats(&s);
    assert_int_equal(s.reloads, 1);
    assert_int_equal(s.registry_generation, 2);
    assert_true(log_has("reload failed, the running configuration stays"));
    assert_true(log_has("/nonexistent/cb.safetensors"));
    assert_false(log_has("max_inflight = 5 (was"));      /* nothing applied */
    h = client(SCDB_CONSUMER, "other", "raw/m", SCDB_OK); /* the pair is still there */
    scdb_close(&h);
    get_check(cons, a2, 0, 1, 0);                          /* and the clients work */

    /* the old set goes with its last client (ASan sees any later use) */
    scdb_arena_free(&ga);
    scdb_close(&g_cons);
    scdb_close(&g_prod);
    scdb_session_close(&sess);
    scdb_arena_free(&a);
    scdb_arena_free(&a2);
    scdb_close(&cons);
    scdb_close(&prod);
    stats(&s);
    assert_int_equal(s.clients, 0);
    assert_int_equal(s.errors, 1);         /* the hello refused before the pair */
    assert_int_equal(stop_broker(), 0);
}

/* The family's codebook and a pair for consumer `code` read from
 * data/pairs/base__<pair>.safetensors. */
static void append_family(const char *pair)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "[model base]\nconfig = %s/models/base/config.json\n\n"
             "[model code]\nconfig = %s/models/code/config.json\n\n"
             "[codebook base-scd]\nkind = scd\nmodel = base\nfile = %s/codebooks/base.safetensors\n\n"
             "[pair base-scd code]\ndecoder = scd\nfile = %s/pairs/base__%s.safetensors\n\n",
             SCDB_DATA_DIR, SCDB_DATA_DIR, SCDB_DATA_DIR, SCDB_DATA_DIR, pair);
    append_config(buf);
}

/* A reload that brings a pair calibrated for other weights (here the
 * manpages pair configured for code): a client that registered with code's
 * fingerprint keeps the pair it was checked against, a new one is refused;
 * one that told no fingerprint moves. */
static void reload_stale_pair(void **state)
{
    char code_fp[33];
    scdb *checked, *unchecked, *h;
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 10000, .name = "test_ops"};
    (void)state;
    if (access(SCDB_DATA_DIR "/pairs/base__manpages.safetensors", R_OK) ||
        access(SCDB_DATA_DIR "/models/code/model.safetensors", R_OK)) {
        print_message("skipped: no model family under " SCDB_DATA_DIR "\n");
        skip();
    }
    assert_int_equal(scdb_weights_fingerprint(SCDB_DATA_DIR "/models/code", code_fp, NULL, 0), SCDB_OK);
    write_config(NULL);
    append_family("code");
    start_broker();
    assert_int_equal(scdb_connect(&o, &checked), SCDB_OK);
    assert_int_equal(scdb_set_weights_fp(checked, code_fp), SCDB_OK);
    assert_int_equal(scdb_register(checked, SCDB_CONSUMER, "code", "base-scd", NULL), SCDB_OK);
    unchecked = client(SCDB_CONSUMER, "code", "base-scd", SCDB_OK);

    write_config(NULL);
    append_family("manpages");
    signal_pid(broker_pid, SIGHUP);
    wait_counter(offsetof(scdb_stat, reloads), 1, "reloads");
    assert_true(log_has("1 client(s) moved to it, 1 kept the previous set"));
    assert_int_equal(scdb_ping(checked, NULL), SCDB_OK);
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    assert_int_equal(scdb_set_weights_fp(h, code_fp), SCDB_OK);
    assert_int_equal(scdb_register(h, SCDB_CONSUMER, "code", "base-scd", NULL), SCDB_EMISMATCH);
    assert_non_null(strstr(scdb_last_error(h), code_fp));
    scdb_close(&h);
    scdb_close(&unchecked);
    scdb_close(&checked);
    assert_int_equal(stop_broker(), 0);
}

static void restart_not_errors(void **state)
{
    scdb *c;
    int32_t tok[NTOK];
    scdb_lookup_result lr;
    scdb_stat s;

    (void)state;
    write_config(NULL);
    start_broker();
    c = client(SCDB_CONSUMER, "m", NULL, SCDB_OK);
    bkv_tokens(3, tok, NTOK);
    assert_int_equal(scdb_lookup(c, tok, NTOK, &lr), SCDB_OK);
    assert_int_equal(stop_broker(), 0);
    start_broker();
    /* the client's first call carries its old token: answered ECLOSED,
     * libscdb says hello again and retries */
    assert_int_equal(scdb_lookup(c, tok, NTOK, &lr), SCDB_OK);
    wait_counter(offsetof(scdb_stat, stale_tokens), 1, "stale_tokens");
    stats(&s);
    assert_int_equal(s.errors, 0);
    for (int i = 0; i < s.n_ops; i++)
        if (s.ops[i].errors) fail_msg("op %s: %llu errors", s.ops[i].op,
                                      (unsigned long long)s.ops[i].errors);
    scdb_close(&c);
    assert_int_equal(stop_broker(), 0);
}

/* Datagrams on the notify socket until one contains want (bounded);
 * everything received is appended to got. */
static int notify_wait(int fd, const char *want, char *got, size_t len)
{
    double until = scdb_now() + WAIT_S;
    while (scdb_now() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char buf[512];
        ssize_t n;
        if (poll(&p, 1, 100) <= 0) continue;
        n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0) continue;
        buf[n] = 0;
        strncat(got, buf, len - strlen(got) - 2);
        strcat(got, "|");
        if (strstr(buf, want)) return 1;
    }
    return 0;
}

static void notify_protocol(void **state)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char got[4096] = "";
    int fd;

    (void)state;
    snprintf(a.sun_path, sizeof a.sun_path, "%.80s/notify.sock", dir);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    setenv("NOTIFY_SOCKET", a.sun_path, 1);
    write_config(NULL);
    start_broker();
    unsetenv("NOTIFY_SOCKET");
    if (!notify_wait(fd, "READY=1", got, sizeof got)) fail_msg("no READY=1: %s", got);
    assert_non_null(strstr(got, "STATUS=serving ipc://"));
    got[0] = 0;
    kill(broker_pid, SIGHUP);
    if (!notify_wait(fd, "READY=1", got, sizeof got)) fail_msg("no READY=1 after reload: %s", got);
    assert_non_null(strstr(got, "RELOADING=1"));
    assert_true(strstr(got, "RELOADING=1") < strstr(got, "READY=1"));
    got[0] = 0;
    kill(broker_pid, SIGTERM);
    if (!notify_wait(fd, "STOPPING=1", got, sizeof got)) fail_msg("no STOPPING=1: %s", got);
    assert_int_equal(stop_broker(), 0);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(reload_with_live_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(notify_protocol, setup, teardown),
        cmocka_unit_test_setup_teardown(reload_stale_pair, setup, teardown),
        cmocka_unit_test_setup_teardown(restart_not_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(reload_adds_adapters, setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
