/* test_cuda_ipc.c — CUDA IPC arenas end to end (issue 7): a real
 * scdb-broker process with device = cuda and this process as its client.
 * A get into a CUDA IPC arena (device memory the broker exported; the
 * decoders' device path writes it) must equal the same get into a
 * shared-memory arena: bit for bit for raw KV (F16 and F32 payloads), within
 * the CUDA codec twins' tolerance for the SCD codec (the reference family,
 * when present).  Two brokers: one with the hot tier in RAM, one with the
 * GPU hot tier (gpu_hot_capacity), so both the upload path and the
 * device-resident-payload paths (in place into a CUDA arena, copied down
 * for a host arena) run.  Exits 77 (skipped) when no CUDA device answers:
 * CI has no GPU, and this is the only test that runs the IPC path itself. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "signal_pid.h"

#include "broker_kv.h"
#include "codec.h"
#include "kernels.h"
#include "model.h"
#include "scdb.h"

#define N 256

#define NB 2                     /* brokers: RAM hot tier, GPU hot tier */
static char dir[128], cfg_path[NB][256], endpoint[NB][300], log_path[NB][256];
static pid_t broker_pid[NB] = {-1, -1};
static int have_family, cur;

static scdb *connect_to(int timeout_ms)
{
    scdb_opts o = {.endpoint = endpoint[cur], .timeout_ms = timeout_ms, .name = "test_cuda_ipc"};
    scdb *h = NULL;
    scdb_connect(&o, &h);
    return h;
}

static int start_broker(int bi)
{
    FILE *f;
    double until;
    scdb *h;
    pid_t pid;
    snprintf(cfg_path[bi], sizeof cfg_path[bi], "%s/broker%d.ini", dir, bi);
    snprintf(endpoint[bi], sizeof endpoint[bi], "ipc://%s/broker%d.sock", dir, bi);
    snprintf(log_path[bi], sizeof log_path[bi], "%s/log%d.txt", dir, bi);
    if (!(f = fopen(cfg_path[bi], "w"))) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/data%d\nno_sync = 1\ndevice = cuda\n"
               "log_level = info\n%s\n"
               "[model m16]\nn_layers = 4\nn_kv_heads = 2\nhead_dim = 16\nmax_seq_len = 1024\n"
               "raw_dtype = f16\n\n"
               "[model m32]\nn_layers = 2\nn_kv_heads = 2\nhead_dim = 8\nraw_dtype = f32\n\n",
            endpoint[bi], dir, bi, bi ? "gpu_hot_capacity = 256MiB\n" : "");
    if (have_family)
        fprintf(f, "[model base]\nconfig = " SCDB_DATA_DIR "/models/base/config.json\n"
                   "[model code]\nconfig = " SCDB_DATA_DIR "/models/code/config.json\n"
                   "[codebook base-scd]\nkind = scd\nmodel = base\n"
                   "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n"
                   "[pair base-scd code]\ndecoder = scd\n"
                   "file = " SCDB_DATA_DIR "/pairs/base__code.safetensors\n");
    fclose(f);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log_path[bi], O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        execl(SCDB_BROKER_BIN, SCDB_BROKER_BIN, "--config", cfg_path[bi], (char *)NULL);
        _exit(127);
    }
    broker_pid[bi] = pid;
    cur = bi;
    until = scdb_now() + 60;
    while (!(h = connect_to(200))) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid || scdb_now() > until) {
            fprintf(stderr, "test_cuda_ipc: broker %d did not start (log: %s)\n", bi,
                    log_path[bi]);
            broker_pid[bi] = -1;
            return -1;
        }
        usleep(20000);
    }
    scdb_close(&h);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    have_family = access(SCDB_DATA_DIR "/models/base/model.safetensors", R_OK) == 0 &&
                  access(SCDB_DATA_DIR "/pairs/base__code.safetensors", R_OK) == 0;
    snprintf(dir, sizeof dir, "/tmp/test_cuda_ipc.XXXXXX");
    if (!mkdtemp(dir)) return -1;
    for (int bi = 0; bi < NB; bi++)
        if (start_broker(bi)) return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    int st;
    (void)state;
    for (int bi = 0; bi < NB; bi++)
        if (broker_pid[bi] > 0) {
            signal_pid(broker_pid[bi], SIGTERM);
            waitpid(broker_pid[bi], &st, 0);
        }
    if (getenv("SCDB_TEST_KEEP")) {
        fprintf(stderr, "test_cuda_ipc: kept %s\n", dir);
        return 0;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The device cache's whole buffer (pos, K, V), downloaded. */
static void *download(const scdb_kv_cache *dc)
{
    size_t bytes = scdb_kv_cache_bytes(dc->n_layers, dc->n_kv_heads, dc->head_dim, dc->capacity);
    void *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);   /* views need 64-byte alignment */
    assert_non_null(buf);
    assert_int_equal(scdb_k_cuda_copy(buf, dc->mem, bytes, 0), SCDB_OK);
    return buf;
}

/* The same get into a shared-memory arena and a CUDA IPC arena, at slot0 /
 * pos0; returns the downloaded device buffer, *host the host cache. */
static void *get_both(scdb *h, const int32_t *t, int n, int cap, int slot0, int32_t pos0,
                      scdb_arena **ha, scdb_arena **ca, const scdb_kv_cache **host)
{
    scdb_get_result r1, r2;
    const scdb_kv_cache *dc;
    int dev = -1;
    if (!*ha) assert_int_equal(scdb_arena_new(h, cap, ha), SCDB_OK);
    if (!*ca) {
        scdb_err e = scdb_arena_new_cuda(h, cap, ca);
        if (e) print_message("scdb_arena_new_cuda: %s\n", scdb_last_error(h));
        assert_int_equal(e, SCDB_OK);
    }
    assert_null(scdb_arena_cache(*ca));          /* host code gets no device pointers */
    assert_null(scdb_arena_cache_device(*ha, NULL));
    dc = scdb_arena_cache_device(*ca, &dev);
    assert_non_null(dc);
    assert_true(dev >= 0);
    assert_int_equal(scdb_get(h, t, (size_t)n, *ha, slot0, pos0, &r1), SCDB_OK);
    assert_int_equal(scdb_get(h, t, (size_t)n, *ca, slot0, pos0, &r2), SCDB_OK);
    assert_true(r1.tokens_written > 0);
    assert_int_equal(r2.tokens_written, r1.tokens_written);
    assert_int_equal(r2.cache_n, r1.cache_n);
    assert_int_equal(dc->n, (int)r1.cache_n);
    *host = scdb_arena_cache(*ha);
    return download(dc);
}

static void test_raw_ipc(void **state)
{
    const char *models[2] = {"m16", "m32"};
    (void)state;
    for (int run = 0; run < 2 * NB; run++) {
        int mi = run % 2;
        cur = run / 2;
        print_message("raw %s, broker %d (%s hot tier)\n", models[mi], cur, cur ? "GPU" : "RAM");
        uint32_t seed = 700 + (uint32_t)mi;
        int32_t t[N];
        scdb_info info;
        scdb_kv_cache *own;
        scdb_arena *ha = NULL, *ca = NULL;
        const scdb_kv_cache *host;
        scdb *p = connect_to(10000), *c = connect_to(10000);
        assert_non_null(p);
        assert_non_null(c);
        bkv_tokens(seed, t, N);
        assert_int_equal(scdb_register(p, SCDB_PRODUCER, models[mi], NULL, &info), SCDB_OK);
        assert_int_equal(scdb_kv_cache_new(info.n_layers, info.n_kv_heads, info.head_dim, N, &own),
                         SCDB_OK);
        bkv_fill(seed, own, N);
        assert_int_equal(scdb_put_cache(p, t, N, own, NULL), SCDB_OK);
        assert_int_equal(scdb_register(c, SCDB_CONSUMER, models[mi], NULL, NULL), SCDB_OK);

        /* whole prefix at slot 0, then again at slot 64 / position 100 */
        for (int k = 0; k < 2; k++) {
            int slot0 = k ? 64 : 0;
            int32_t pos0 = k ? 100 : 0;
            void *dbuf = get_both(c, t, k ? 128 : N, N + 64, slot0, pos0, &ha, &ca, &host);
            size_t bytes = scdb_kv_cache_bytes(host->n_layers, host->n_kv_heads, host->head_dim,
                                               host->capacity);
            assert_memory_equal(dbuf, host->mem, bytes);     /* bit for bit, pos included */
            assert_int_equal(bkv_check(seed, host, slot0, 0, k ? 128 : N, pos0, mi == 0), 0);
            free(dbuf);
        }
        /* live sessions stay on host arenas for now: a clear refusal */
        {
            scdb_session_opts so = {.budget = 64, .n_heads = 2, .policy = "h2o"};
            scdb_session *s = NULL;
            assert_int_equal(scdb_session_open(ca, &so, &s), SCDB_EUNSUPPORTED);
            assert_non_null(strstr(scdb_last_error(c), "CUDA"));
        }
        scdb_arena_free(&ca);
        scdb_arena_free(&ha);
        scdb_kv_cache_free(&own);
        scdb_close(&c);
        scdb_close(&p);
    }
}

/* |a - b| <= tol + |b| eps, the kernels' twin tolerance; returns the worst
 * |a - b|. */
static double close_to(const float *a, const float *b, size_t n, float tol, float eps)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= tol + fabsf(b[i]) * eps)) {
            print_message("element %zu: %g vs %g\n", i, a[i], b[i]);
            fail();
        }
        if (d > worst) worst = d;
    }
    return worst;
}

static void scd_ipc_once(void)
{
    enum { NS = 192 };
    int32_t t[NS];
    scdb_model *m = NULL;
    char err[256];
    scdb_arena *sa = NULL, *ha = NULL, *ca = NULL;
    scdb_put_result pr;
    scdb_capture capt = {0};
    scdb_kv_cache *own = NULL;
    const scdb_kv_cache *host;
    int L, D, cap;
    for (int i = 0; i < NS; i++) t[i] = "a prefix decoded on the GPU through CUDA IPC. "[i % 46];
    assert_int_equal(scdb_model_load(SCDB_DATA_DIR "/models/base", &m, err, sizeof err), SCDB_OK);
    scdb *p = connect_to(20000), *c = connect_to(20000);
    assert_int_equal(scdb_register(p, SCDB_PRODUCER, "base", "base-scd", NULL), SCDB_OK);
    assert_int_equal(scdb_states_arena_new(p, NS, &sa), SCDB_OK);
    capt.h_in = scdb_arena_states(sa, &L, &D, &cap);
    assert_int_equal(scdb_model_cache_new(m, NS, &own), SCDB_OK);
    assert_int_equal(scdb_model_forward(m, t, NULL, NS, own, NULL, &capt), SCDB_OK);
    assert_int_equal(scdb_put_states(p, t, NS, 0, sa, &pr), SCDB_OK);
    assert_int_equal(pr.n_stored, NS / 64);

    assert_int_equal(scdb_register(c, SCDB_CONSUMER, "code", "base-scd", NULL), SCDB_OK);
    void *dbuf = get_both(c, t, NS, NS, 0, 0, &ha, &ca, &host);
    {
        /* view the downloaded buffer as a cache to compare part by part */
        scdb_kv_cache *dv;
        size_t bytes = scdb_kv_cache_bytes(host->n_layers, host->n_kv_heads, host->head_dim,
                                           host->capacity);
        assert_int_equal(scdb_kv_cache_view(dbuf, bytes, host->n_layers, host->n_kv_heads,
                                            host->head_dim, host->capacity, &dv), SCDB_OK);
        assert_memory_equal(dv->pos, host->pos, (size_t)NS * sizeof *dv->pos);
        double worst = 0.0, w;
        size_t per = (size_t)NS * (size_t)scdb_kv_dim(host);
        for (int l = 0; l < host->n_layers; l++) {
            w = close_to(scdb_kv_k(dv, l, 0), scdb_kv_k(host, l, 0), per, 1e-3f, 1e-3f);
            if (w > worst) worst = w;
            w = close_to(scdb_kv_v(dv, l, 0), scdb_kv_v(host, l, 0), per, 1e-3f, 1e-3f);
            if (w > worst) worst = w;
        }
        print_message("scd: CUDA IPC get vs shared-memory get: max |K/V diff| %.3g\n", worst);
        scdb_kv_cache_free(&dv);
    }
    free(dbuf);
    scdb_arena_free(&ca);
    scdb_arena_free(&ha);
    scdb_arena_free(&sa);
    scdb_kv_cache_free(&own);
    scdb_model_free(&m);
    scdb_close(&c);
    scdb_close(&p);
}

static void test_scd_ipc(void **state)
{
    (void)state;
    if (!have_family) {
        print_message("skipped: no model family under " SCDB_DATA_DIR "\n");
        skip();
    }
    for (cur = 0; cur < NB; cur++) {
        print_message("scd, broker %d (%s hot tier)\n", cur, cur ? "GPU" : "RAM");
        scd_ipc_once();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_ipc),
        cmocka_unit_test(test_scd_ipc),
    };
    int n = scdb_k_cuda_device_count();
    if (n <= 0) {
        printf("test_cuda_ipc: no CUDA device answers (%s): skipped\n",
#ifdef SCDB_HAVE_CUDA
               "this build has the CUDA backend"
#else
               "this build has no CUDA backend"
#endif
        );
        return 77;
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}
