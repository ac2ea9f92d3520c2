/* test_fleet.c — a 3-adapter fleet end to end through a real broker (issue
 * 23): a scdb-broker process whose config names the LoRA adapters of
 * data/adapters by a [consumers fleet] glob (their base found in
 * models_dir), each with its SCD pair, as the packaged config does; this
 * process is the producer and the consumers, each on its own handle.
 *
 *   three_adapters_one_put  base prefills a prefix once and the broker
 *       encodes and stores its states (one put); three adapters that have a
 *       pair get it (three gets) into their own shared-memory arenas; each
 *       one's logits over the text's next tokens from the decoded prefix
 *       are close to its own prefill's (behavioural tolerance: top-1
 *       agreement at least 0.75 and KL at most half that of reusing base's
 *       raw KV as is), and the three decoded caches differ (each adapter
 *       got its own KV space, not base's nor another's).
 *
 *   sighup_adds_an_adapter  the config names two of the adapters; one of
 *       them gets the stored prefix into its arena; the third, not yet
 *       configured, is refused; the file then names all three and a SIGHUP
 *       reloads it: the connected adapter's client is not dropped (no
 *       client reclaimed, its handle and arena work on and decode the same
 *       bytes again), and the third registers and gets the prefix.
 *
 * Skipped (77) without the model family or fewer than three adapters with
 * a pair in data/. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "broker_proc.h"
#include "kernels.h"
#include "model.h"
#include "scdb.h"
#include "scdb_common.h"

#define P 128          /* prefix: two blocks of 64 */
#define C 32           /* continuation scored */
#define N_ADAPTERS 3

static char adapters[N_ADAPTERS][128];
static bp_broker fleet_broker;    /* the test's broker: teardown stops it if a check failed */

static int cmp_name(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* the first N_ADAPTERS adapters (sorted) with a pair base__NAME */
static int find_adapters(void)
{
    char names[64][128];
    int n = 0, k = 0;
    DIR *d = opendir(SCDB_DATA_DIR "/adapters");
    struct dirent *e;
    if (!d) return 0;
    while ((e = readdir(d)) && n < 64) {
        char p[512];
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof names[0]) continue;
        snprintf(p, sizeof p, SCDB_DATA_DIR "/pairs/base__%s.safetensors", e->d_name);
        if (access(p, R_OK)) continue;
        snprintf(p, sizeof p, SCDB_DATA_DIR "/adapters/%s/adapter_config.json", e->d_name);
        if (access(p, R_OK)) continue;
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    for (; k < N_ADAPTERS && k < n; k++) memcpy(adapters[k], names[k], sizeof adapters[k]);
    return k;
}

/* The [broker] keys after bp_start's, and the fleet: the adapter
 * directories `dirs` (space-separated globs or paths), each with its pair. */
static void fleet_ini(char *buf, size_t len, const char *dirs)
{
    snprintf(buf, len,
             "block_tokens = 64\nno_sync = 1\nheartbeat_timeout_ms = 30000\nmodels_dir = "
             SCDB_DATA_DIR "/models\n\n"
             "[model base]\nconfig = " SCDB_DATA_DIR "/models/base/config.json\n\n"
             "[codebook base-scd]\nkind = scd\nmodel = base\ncodes_dtype = int8\n"
             "file = " SCDB_DATA_DIR "/codebooks/base.safetensors\n\n"
             "[consumers fleet]\ndirs = %s\ncodebook = base-scd\n"
             "decoder = scd\nfile = " SCDB_DATA_DIR "/pairs/base__{name}.safetensors\n", dirs);
}

static int have_fleet(void)
{
    if (access(SCDB_DATA_DIR "/models/base/model.safetensors", R_OK) ||
        access(SCDB_DATA_DIR "/codebooks/base.safetensors", R_OK) || find_adapters() < N_ADAPTERS) {
        print_message("skipped: no model family, codebook or %d adapters with a pair under "
                      SCDB_DATA_DIR "\n", N_ADAPTERS);
        return 0;
    }
    return 1;
}

/* the shared prefix: English prose, past the half calibration reads */
static void prefix_tokens(int32_t *tok)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(scdb_read_file(SCDB_DATA_DIR "/heldout/english.txt", 1 << 24, &text, &len), SCDB_OK);
    assert_true(len >= (48u << 10) + P + C + 1);
    scdb_tokenize_bytes(text + (48u << 10), P + C + 1, tok);
    free(text);
}

static scdb *connect_as(const bp_broker *b, scdb_role role, const char *model)
{
    scdb_opts o = {.endpoint = b->endpoint, .timeout_ms = 20000, .name = "test_fleet"};
    scdb *h = NULL;
    assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
    scdb_err e = scdb_register(h, role, model, "base-scd", NULL);
    if (e) fail_msg("register %s: %s (%s)", model, scdb_strerror(e), scdb_last_error(h));
    return h;
}

/* log-probabilities of the C rows of logits */
static void log_probs(const float *lg, int V, float *out)
{
    for (int t = 0; t < C; t++) scdb_k_log_softmax_cpu(lg + (size_t)t * V, V, out + (size_t)t * V);
}

/* top-1 agreement and mean KL(ref || got) over the C rows */
static void compare(const float *ref, const float *got, int V, double *top1, double *kl)
{
    double a = 0, k = 0;
    for (int t = 0; t < C; t++) {
        const float *r = ref + (size_t)t * V, *g = got + (size_t)t * V;
        int ar = 0, ag = 0;
        for (int v = 0; v < V; v++) {
            k += exp((double)r[v]) * ((double)r[v] - g[v]);
            if (r[v] > r[ar]) ar = v;
            if (g[v] > g[ag]) ag = v;
        }
        a += ar == ag;
    }
    *top1 = a / C;
    *kl = k / C;
}

static void three_adapters_one_put(void **state)
{
    char err[512], ini[2048];
    scdb_model *base = NULL;
    scdb_kv_cache *pkv = NULL;
    scdb *prod;
    scdb_arena *states = NULL;
    int32_t tok[P + C + 1];
    float *dec_k[N_ADAPTERS] = {0};
    (void)state;

    if (!have_fleet()) skip();
    fleet_ini(ini, sizeof ini, SCDB_DATA_DIR "/adapters/*");
    assert_int_equal(bp_start(&fleet_broker, SCDB_BROKER_BIN, ini), 0);
    prefix_tokens(tok);

    /* one put: base's states, encoded and stored by the broker */
    assert_int_equal(scdb_model_load(SCDB_DATA_DIR "/models/base", &base, err, sizeof err), SCDB_OK);
    const int V = scdb_model_cfg(base)->vocab_size;
    prod = connect_as(&fleet_broker, SCDB_PRODUCER, "base");
    assert_int_equal(scdb_states_arena_new(prod, P, &states), SCDB_OK);
    scdb_capture cap = {.h_in = scdb_arena_states(states, NULL, NULL, NULL)};
    assert_int_equal(scdb_model_cache_new(base, P, &pkv), SCDB_OK);
    assert_int_equal(scdb_model_forward(base, tok, NULL, P, pkv, NULL, &cap), SCDB_OK);
    scdb_put_result pr;
    assert_int_equal(scdb_put_states(prod, tok, P, 0, states, &pr), SCDB_OK);
    assert_int_equal(pr.n_stored, P / 64);
    assert_int_equal(pr.n_new, P / 64);

    float *lg = malloc((size_t)C * V * sizeof *lg), *ref = malloc((size_t)C * V * sizeof *ref);
    float *got = malloc((size_t)C * V * sizeof *got);
    assert_non_null(lg);
    assert_non_null(ref);
    assert_non_null(got);
    for (int i = 0; i < N_ADAPTERS; i++) {
        char dir[512];
        scdb_model *m = NULL;
        scdb_kv_cache *own = NULL, *raw = NULL;
        scdb_arena *a = NULL;
        scdb_get_result gr;
        double top1, kl, raw_top1, raw_kl;
        snprintf(dir, sizeof dir, SCDB_DATA_DIR "/adapters/%s", adapters[i]);
        assert_int_equal(scdb_model_load(dir, &m, err, sizeof err), SCDB_OK);
        assert_string_equal(scdb_model_cfg(m)->finetune, "lora");
        /* its own prefill: the reference */
        assert_int_equal(scdb_model_cache_new(m, P + C, &own), SCDB_OK);
        assert_int_equal(scdb_model_forward(m, tok, NULL, P, own, NULL, NULL), SCDB_OK);
        assert_int_equal(scdb_model_forward(m, tok + P, NULL, C, own, lg, NULL), SCDB_OK);
        log_probs(lg, V, ref);
        /* one get from the broker into its arena */
        scdb *h = connect_as(&fleet_broker, SCDB_CONSUMER, adapters[i]);
        assert_int_equal(scdb_arena_new(h, P + C, &a), SCDB_OK);
        scdb_err e = scdb_get(h, tok, P, a, 0, 0, &gr);
        if (e) fail_msg("%s: get: %s (%s)", adapters[i], scdb_strerror(e), scdb_last_error(h));
        assert_int_equal(gr.tokens_written, P);
        scdb_kv_cache *kv = scdb_arena_cache(a);
        kv->n = P;
        dec_k[i] = malloc((size_t)P * scdb_model_kv_dim(scdb_model_cfg(m)) * sizeof(float));
        assert_non_null(dec_k[i]);
        memcpy(dec_k[i], scdb_kv_k(kv, 1, 0), (size_t)P * scdb_model_kv_dim(scdb_model_cfg(m)) * sizeof(float));
        assert_int_equal(scdb_model_forward(m, tok + P, NULL, C, kv, lg, NULL), SCDB_OK);
        log_probs(lg, V, got);
        compare(ref, got, V, &top1, &kl);
        /* base's raw KV as is: what SCD must beat */
        assert_int_equal(scdb_model_cache_new(m, P + C, &raw), SCDB_OK);
        for (int l = 0; l < raw->n_layers; l++) {
            size_t bytes = (size_t)P * scdb_model_kv_dim(scdb_model_cfg(m)) * sizeof(float);
            memcpy(scdb_kv_k(raw, l, 0), scdb_kv_k(pkv, l, 0), bytes);
            memcpy(scdb_kv_v(raw, l, 0), scdb_kv_v(pkv, l, 0), bytes);
        }
        memcpy(raw->pos, pkv->pos, (size_t)P * sizeof(int32_t));
        raw->n = P;
        assert_int_equal(scdb_model_forward(m, tok + P, NULL, C, raw, lg, NULL), SCDB_OK);
        log_probs(lg, V, got);
        compare(ref, got, V, &raw_top1, &raw_kl);
        print_message("%s: via the broker top-1 %.3f KL %.4f; raw reuse top-1 %.3f KL %.4f\n", adapters[i],
                      top1, kl, raw_top1, raw_kl);
        assert_true(top1 >= 0.75);
        assert_true(kl <= 0.5 * raw_kl);
        scdb_arena_free(&a);
        scdb_close(&h);
        scdb_kv_cache_free(&own);
        scdb_kv_cache_free(&raw);
        scdb_model_free(&m);
    }
    /* one put served three gets, each into its own KV space */
    {
        scdb_stat s;
        assert_int_equal(scdb_stats(prod, &s), SCDB_OK);
        print_message("broker: %llu blocks stored, %llu put, %llu got\n", (unsigned long long)s.blocks,
                      (unsigned long long)s.puts, (unsigned long long)s.gets);
        assert_int_equal(s.blocks, P / 64);          /* stored once */
        assert_int_equal(s.puts, P / 64);            /* (counted in blocks) */
        assert_int_equal(s.gets, N_ADAPTERS * (P / 64));
        const size_t n = (size_t)P * scdb_model_kv_dim(scdb_model_cfg(base));
        for (int i = 0; i < N_ADAPTERS; i++)
            for (int j = i + 1; j < N_ADAPTERS; j++)
                assert_memory_not_equal(dec_k[i], dec_k[j], n * sizeof(float));
    }
    for (int i = 0; i < N_ADAPTERS; i++) free(dec_k[i]);
    free(lg);
    free(ref);
    free(got);
    scdb_arena_free(&states);
    scdb_close(&prod);
    scdb_kv_cache_free(&pkv);
    scdb_model_free(&base);
    assert_int_equal(bp_stop(&fleet_broker, SIGTERM), 0);
}

/* SCD-decode the stored prefix into a's first P slots; K of layer 1 into k */
static void get_into(scdb *h, scdb_arena *a, const int32_t *tok, float *k, size_t n)
{
    scdb_get_result gr;
    scdb_err e = scdb_get(h, tok, P, a, 0, 0, &gr);
    if (e) fail_msg("get: %s (%s)", scdb_strerror(e), scdb_last_error(h));
    assert_int_equal(gr.tokens_written, P);
    memcpy(k, scdb_kv_k(scdb_arena_cache(a), 1, 0), n * sizeof *k);
}

static void sighup_adds_an_adapter(void **state)
{
    char err[512], ini[2048], dirs[1024];
    scdb_model *base = NULL;
    scdb_kv_cache *pkv = NULL;
    scdb_arena *states = NULL, *a0 = NULL, *a2 = NULL;
    scdb *prod, *h0, *h2;
    scdb_put_result pr;
    scdb_stat s;
    int32_t tok[P + C + 1];
    (void)state;

    if (!have_fleet()) skip();
    snprintf(dirs, sizeof dirs, SCDB_DATA_DIR "/adapters/%s " SCDB_DATA_DIR "/adapters/%s", adapters[0],
             adapters[1]);
    fleet_ini(ini, sizeof ini, dirs);
    assert_int_equal(bp_start(&fleet_broker, SCDB_BROKER_BIN, ini), 0);
    prefix_tokens(tok);
    assert_int_equal(scdb_model_load(SCDB_DATA_DIR "/models/base", &base, err, sizeof err), SCDB_OK);
    const size_t n = (size_t)P * scdb_model_kv_dim(scdb_model_cfg(base));
    float *k0 = malloc(n * sizeof *k0), *k1 = malloc(n * sizeof *k1);
    assert_non_null(k0);
    assert_non_null(k1);
    prod = connect_as(&fleet_broker, SCDB_PRODUCER, "base");
    assert_int_equal(scdb_states_arena_new(prod, P, &states), SCDB_OK);
    scdb_capture cap = {.h_in = scdb_arena_states(states, NULL, NULL, NULL)};
    assert_int_equal(scdb_model_cache_new(base, P, &pkv), SCDB_OK);
    assert_int_equal(scdb_model_forward(base, tok, NULL, P, pkv, NULL, &cap), SCDB_OK);
    assert_int_equal(scdb_put_states(prod, tok, P, 0, states, &pr), SCDB_OK);

    h0 = connect_as(&fleet_broker, SCDB_CONSUMER, adapters[0]);
    assert_int_equal(scdb_arena_new(h0, P + C, &a0), SCDB_OK);
    get_into(h0, a0, tok, k0, n);
    {   /* the third is not configured yet */
        scdb_opts o = {.endpoint = fleet_broker.endpoint, .timeout_ms = 20000};
        scdb *h = NULL;
        assert_int_equal(scdb_connect(&o, &h), SCDB_OK);
        assert_int_equal(scdb_register(h, SCDB_CONSUMER, adapters[2], "base-scd", NULL), SCDB_ENOTFOUND);
        scdb_close(&h);
    }

    /* the file names all three; SIGHUP */
    snprintf(dirs, sizeof dirs, SCDB_DATA_DIR "/adapters/%s " SCDB_DATA_DIR "/adapters/%s " SCDB_DATA_DIR
             "/adapters/%s", adapters[0], adapters[1], adapters[2]);
    fleet_ini(ini, sizeof ini, dirs);
    {
        FILE *f = fopen(fleet_broker.config, "w");
        assert_non_null(f);
        fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/data\nlog_level = warn\n%s\n", fleet_broker.endpoint, fleet_broker.dir,
                ini);
        assert_int_equal(fclose(f), 0);
    }
    assert_int_equal(kill(fleet_broker.pid, SIGHUP), 0);
    for (double until = scdb_now() + 60;; usleep(10000)) {
        assert_int_equal(scdb_stats(prod, &s), SCDB_OK);
        if (s.reloads >= 1 || s.reload_failures) break;
        if (scdb_now() > until) fail_msg("the reload never came");
    }
    assert_int_equal(s.reload_failures, 0);
    assert_int_equal(s.reclaimed_clients, 0);
    assert_true(s.clients >= 2);                 /* the producer and the first adapter */

    /* the connected adapter works on: same handle, same arena, same bytes */
    memset(scdb_kv_k(scdb_arena_cache(a0), 1, 0), 0, n * sizeof *k1);
    get_into(h0, a0, tok, k1, n);
    assert_memory_equal(k0, k1, n * sizeof *k0);
    assert_int_equal(scdb_stats(prod, &s), SCDB_OK);
    assert_int_equal(s.stale_tokens, 0);         /* it never had to register again */
    /* the added one registers and gets the prefix in its own KV space */
    h2 = connect_as(&fleet_broker, SCDB_CONSUMER, adapters[2]);
    assert_int_equal(scdb_arena_new(h2, P + C, &a2), SCDB_OK);
    get_into(h2, a2, tok, k1, n);
    assert_memory_not_equal(k0, k1, n * sizeof *k0);

    scdb_arena_free(&a2);
    scdb_close(&h2);
    scdb_arena_free(&a0);
    scdb_close(&h0);
    scdb_arena_free(&states);
    scdb_close(&prod);
    free(k0);
    free(k1);
    scdb_kv_cache_free(&pkv);
    scdb_model_free(&base);
    assert_int_equal(bp_stop(&fleet_broker, SIGTERM), 0);
}

static int setup(void **state)
{
    (void)state;
    memset(&fleet_broker, 0, sizeof fleet_broker);
    fleet_broker.pid = -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bp_cleanup(&fleet_broker);          /* stops a broker a failed check left running */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(three_adapters_one_put, setup, teardown),
        cmocka_unit_test_setup_teardown(sighup_adds_an_adapter, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
