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
#include "broker_proc.h"
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
    pid_t pid;
    snprintf(cfg_path[bi], sizeof cfg_path[bi], "%s/broker%d.ini", dir, bi);
    snprintf(endpoint[bi], sizeof endpoint[bi], "ipc://%s/broker%d.sock", dir, bi);
    snprintf(log_path[bi], sizeof log_path[bi], "%s/log%d.txt", dir, bi);
    if (!(f = fopen(cfg_path[bi], "w"))) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/data%d\nno_sync = 1\ndevice = cuda\n"
               "log_level = info\n%s\n"
               "[model m16]\nn_layers = 4\nn_kv_heads = 2\nhead_dim = 16\nmax_seq_len = 1024\n"
               "raw_dtype = f16\n\n"
               "[model m32]\nn_layers = 2\nn_kv_heads = 2\nhead_dim = 8\nraw_dtype = f32\n\n"
               "[policy distillcache]\nfile = " SCDB_DATA_DIR
               "/policies/distillcache_base.safetensors\n\n",
            endpoint[bi], dir, bi, bi ? "gpu_hot_capacity = 256MiB\n" : "");
    if (have_family)
        fprintf(f, "[model base]\nconfig = " SCDB_DATA_DIR "/models/base/config.json\n"
                   "[model code]\nconfig = " SCDB_DATA_DIR "/models/code/config.json\n"
                   "[codebook base-scd]\nkind = scd\nmodel = base\n"
                   "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n"
                   "[pair base-scd code]\ndecoder = scd\n"
                   "file = " SCDB_DATA_DIR "/pairs/base__code.safetensors\n");
    fclose(f);
    if ((pid = bp_spawn(SCDB_BROKER_BIN, cfg_path[bi], log_path[bi])) < 0) return -1;
    broker_pid[bi] = pid;
    cur = bi;
    if (bp_wait_ready(pid, endpoint[bi], 60, NULL)) {
        fprintf(stderr, "test_cuda_ipc: broker %d did not start (log: %s)\n", bi, log_path[bi]);
        broker_pid[bi] = -1;
        return -1;
    }
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
    return scdb_rm_tree(dir) == 0 ? 0 : -1;
}

static void get_stats_of(scdb *h, scdb_stat *st)
{
    assert_int_equal(scdb_stats(h, st), SCDB_OK);
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

/* ------------------------------------------------------------ live sessions
 * The same session on a shared-memory arena and on a CUDA IPC arena of one
 * broker, fed the same slots and attention (on the device for the CUDA one:
 * libscdb folds with its CUDA kernels, the broker evicts on its GPU): the
 * heuristics must keep the same slots and leave the same cache, bit for bit,
 * and the accumulators must agree (bit for bit but for the V norms and the
 * entropy numerators, 1e-5 relative: the CUDA twin's tolerance).  The
 * learned policy reads the entropies, so its keep sets may differ on near
 * ties: at least 95% of the kept slots must be the same. */

static void varied_probs(const scdb_kv_cache *c, int LH, int step, float *probs, int slots)
{
    for (int lh = 0; lh < LH; lh++) {
        float *row = probs + (size_t)lh * slots;
        double z = 0.0;
        for (int j = 0; j < slots; j++) {
            row[j] = 0.0f;
            if (j >= c->n) continue;
            uint32_t x = bkv_hash((uint32_t)(c->pos[j] * 131 + lh * 7 + step * 977));
            row[j] = (float)(x % 1000) / 1000.0f + (c->pos[j] % 23 == lh % 5 ? 8.0f : 0.0f);
            z += row[j];
        }
        for (int j = 0; j < c->n; j++) row[j] = (float)(row[j] / z);
    }
}

/* the slot a decode step appends: bkv values of position pos, in the host
 * cache and (uploaded) in the device one */
static void append_both(uint32_t seed, scdb_kv_cache *hc, scdb_kv_cache *dc, int32_t pos)
{
    int d = scdb_kv_dim(hc), sl = hc->n;
    float *row = malloc((size_t)d * sizeof *row);
    for (int l = 0; l < hc->n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            for (int j = 0; j < d; j++) row[j] = bkv_value(seed, kv, l, pos, j);
            memcpy(kv ? scdb_kv_v(hc, l, sl) : scdb_kv_k(hc, l, sl), row, (size_t)d * 4);
            assert_int_equal(scdb_k_cuda_copy(kv ? scdb_kv_v(dc, l, sl) : scdb_kv_k(dc, l, sl), row,
                                              (size_t)d * 4, 1), SCDB_OK);
        }
    hc->pos[sl] = pos;
    assert_int_equal(scdb_k_cuda_copy(dc->pos + sl, &pos, sizeof pos, 1), SCDB_OK);
    hc->n++;
    dc->n++;
    free(row);
}

static void session_ipc_once(const char *policy, uint32_t seed)
{
    enum { CAP = 320, H = 4, STEPS = 40 };
    int32_t t[N];
    scdb_info info;
    scdb_kv_cache *own, *hc, *dc;
    scdb_arena *ha = NULL, *ca = NULL;
    scdb_session *hs = NULL, *ds = NULL;
    scdb_session_opts so = {.budget = 64, .policy = policy, .cadence = 8, .n_heads = H};
    scdb_session_evict_result he, de;
    scdb_get_result gr;
    scdb_stat st0, st1;
    int dev = -1, evictions = 0, learned = !strcmp(policy, "distillcache");
    scdb *p = connect_to(10000), *c = connect_to(10000);
    assert_non_null(p);
    assert_non_null(c);
    bkv_tokens(seed, t, N);
    assert_int_equal(scdb_register(p, SCDB_PRODUCER, "m16", NULL, &info), SCDB_OK);
    assert_int_equal(scdb_kv_cache_new(info.n_layers, info.n_kv_heads, info.head_dim, N, &own),
                     SCDB_OK);
    bkv_fill(seed, own, N);
    assert_int_equal(scdb_put_cache(p, t, N, own, NULL), SCDB_OK);
    assert_int_equal(scdb_register(c, SCDB_CONSUMER, "m16", NULL, NULL), SCDB_OK);
    assert_int_equal(scdb_arena_new(c, CAP, &ha), SCDB_OK);
    assert_int_equal(scdb_arena_new_cuda(c, CAP, &ca), SCDB_OK);
    hc = scdb_arena_cache(ha);
    dc = scdb_arena_cache_device(ca, &dev);
    assert_non_null(dc);
    assert_int_equal(scdb_get(c, t, N, ha, 0, 0, &gr), SCDB_OK);
    assert_int_equal(scdb_get(c, t, N, ca, 0, 0, &gr), SCDB_OK);
    /* the host session's refusals hold on a CUDA arena */
    so.budget = CAP + 1;
    assert_int_equal(scdb_session_open(ca, &so, &ds), SCDB_ERANGE);
    so.budget = 64;
    so.n_heads = 3;
    assert_int_equal(scdb_session_open(ca, &so, &ds), SCDB_ESHAPE);
    so.n_heads = H;
    assert_int_equal(scdb_session_open(ha, &so, &hs), SCDB_OK);
    {
        scdb_err e = scdb_session_open(ca, &so, &ds);
        if (e) print_message("session on a CUDA arena: %s\n", scdb_last_error(c));
        assert_int_equal(e, SCDB_OK);
    }
    assert_int_equal(scdb_session_get_info(ds)->cuda, 1);
    assert_int_equal(scdb_session_get_info(hs)->cuda, 0);
    {
        scdb_session *again = NULL;
        assert_int_equal(scdb_session_open(ca, &so, &again), SCDB_EBUSY);
    }
    size_t pb = (size_t)info.n_layers * H * CAP * 4;
    float *probs = malloc(pb), *dprobs = NULL;
    assert_int_equal(scdb_k_cuda_malloc(pb, (void **)&dprobs), SCDB_OK);
    for (int step = 0; step < STEPS; step++) {
        append_both(seed, hc, dc, N + step);
        varied_probs(hc, info.n_layers * H, step, probs, CAP);
        assert_int_equal(scdb_k_cuda_copy(dprobs, probs, pb, 1), SCDB_OK);
        assert_int_equal(scdb_session_step(hs, probs, CAP, 1, &he), SCDB_OK);
        scdb_err e = scdb_session_step(ds, dprobs, CAP, 1, &de);
        if (e) print_message("step on the CUDA session: %s\n", scdb_last_error(c));
        assert_int_equal(e, SCDB_OK);
        assert_int_equal(de.n_before, he.n_before);
        if (!he.n_before) continue;
        evictions++;
        assert_int_equal(de.n_kept, he.n_kept);
        assert_int_equal(dc->n, hc->n);
        if (learned) {
            int same = 0;
            for (uint32_t i = 0, j = 0; i < he.n_kept && j < de.n_kept;) {
                if (he.slot_pos[i] == de.slot_pos[j]) same++, i++, j++;
                else if (he.slot_pos[i] < de.slot_pos[j]) i++;
                else j++;
            }
            print_message("distillcache: %d of %u kept slots the same on the GPU\n", same,
                          he.n_kept);
            assert_true(same >= (int)(0.95 * he.n_kept));
            continue;
        }
        assert_memory_equal(de.slot_pos, he.slot_pos, he.n_kept * sizeof *he.slot_pos);
        void *dbuf = download(dc);
        assert_memory_equal(dbuf, hc->mem, scdb_kv_cache_bytes(hc->n_layers, hc->n_kv_heads,
                                                               hc->head_dim, CAP));
        free(dbuf);
        /* the accumulators: the device's against the shared memory's */
        size_t hb, db;
        const unsigned char *hacc = scdb_session_accumulators(hs, &hb);
        const void *dacc = scdb_session_accumulators(ds, &db);
        assert_int_equal(hb, db);
        unsigned char *dl = aligned_alloc(64, (db + 63) / 64 * 64);
        assert_int_equal(scdb_k_cuda_copy(dl, dacc, db, 0), SCDB_OK);
        uint32_t n_live;
        memcpy(&n_live, hacc + 28, sizeof n_live);          /* header n */
        size_t arr = ((size_t)CAP * 4 + 63) / 64 * 64;      /* slot array bytes */
        assert_memory_equal(dl, hacc, 64);                  /* header */
        for (int k = 0; k < 10; k++) {
            size_t off = 64 + (size_t)k * arr, len = k < 9 ? arr : db - off;
            if (k == 5 || k == 7)       /* ent_num, vnorm: the twin tolerance */
                close_to((const float *)(dl + off), (const float *)(hacc + off), n_live, 1e-7f,
                         1e-5f);
            else
                assert_memory_equal(dl + off, hacc + off, len);
        }
        free(dl);
    }
    print_message("session %s: %d evictions, GPU and host agree\n", policy, evictions);
    assert_true(evictions >= 4);
    if (!strcmp(policy, "h2o")) {
        /* the device header overwritten: refused, the broker keeps serving */
        size_t db;
        void *dacc = scdb_session_accumulators(ds, &db);
        uint32_t keep[16], bad;
        assert_int_equal(scdb_k_cuda_copy(keep, dacc, sizeof keep, 0), SCDB_OK);
        bad = keep[0] ^ 0xffffffffu;                                 /* magic */
        assert_int_equal(scdb_k_cuda_copy(dacc, &bad, sizeof bad, 1), SCDB_OK);
        assert_int_equal(scdb_session_evict(ds, 8, &de), SCDB_EFORMAT);
        bad = 1u << 30;                                              /* capacity */
        assert_int_equal(scdb_k_cuda_copy(dacc, keep, sizeof keep, 1), SCDB_OK);
        assert_int_equal(scdb_k_cuda_copy((uint32_t *)dacc + 5, &bad, sizeof bad, 1), SCDB_OK);
        assert_int_equal(scdb_session_evict(ds, 8, &de), SCDB_EFORMAT);
        assert_int_equal(scdb_k_cuda_copy(dacc, keep, sizeof keep, 1), SCDB_OK);
        assert_int_equal(scdb_session_evict(ds, 8, &de), SCDB_OK);     /* restored */
        assert_int_equal(de.n_kept, 8);
        assert_int_equal(dc->n, 8);
        assert_int_equal(scdb_ping(c, NULL), SCDB_OK);
    }
    /* freeing the CUDA arena ends its session and frees its device memory */
    get_stats_of(c, &st0);
    scdb_arena_free(&ca);
    get_stats_of(c, &st1);
    assert_int_equal(st1.sessions, st0.sessions - 1);
    assert_true(st1.arena_bytes < st0.arena_bytes);
    scdb_session_close(&hs);
    scdb_k_cuda_free(dprobs);
    free(probs);
    scdb_arena_free(&ha);
    scdb_kv_cache_free(&own);
    scdb_close(&c);
    scdb_close(&p);
}

static void test_session_ipc(void **state)
{
    const char *policies[] = {"h2o", "snapkv", "tova", "streaming", "distillcache"};
    (void)state;
    cur = 0;
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
        session_ipc_once(policies[i], 900 + (uint32_t)i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_ipc),
        cmocka_unit_test(test_scd_ipc),
        cmocka_unit_test(test_session_ipc),
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
