/* bench_python.c — `scdb bench python`: what the Python module costs over
 * libscdb, and PyTorch's time to first token through scdb against its own
 * prefill, on one broker and one prompt in the same run.
 *
 *   1. start a broker (a child `scdb serve`) on a temp dir with the family's
 *      models, the base SCD codebook "base-scd" and its pairs;
 *   2. run the Python side (share/scdb/python/bench_python.py, Debian's
 *      /usr/bin/python3 with numpy and torch): it stores the prompt as the
 *      demo does (producer base, PyTorch prefill with H_in captured into a
 *      states arena, put_states), then times, as consumer `code`,
 *      Client.lookup and Client.get into an Arena, the PyTorch consumer's
 *      own prefill, and lookup + get + the last token's forward (TTFT via
 *      scdb); it saves the prompt's tokens;
 *   3. time the same lookup and get from C (scdb_lookup, scdb_get into an
 *      arena of the prompt's size), same broker, same tokens.
 *
 * JSON: c_lookup_us, py_lookup_us, c_get_ms, py_get_ms, torch_prefill_ms,
 * torch_ttft_scdb_ms (medians), with the ratios and the run's settings. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "scdb.h"

typedef struct opts {
    const char *json, *python, *text;
    int prefix, iters, get_iters;
    int keep;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench python [--json FILE] [--prefix N] [--iters N] [--get-iters N]\n"
"                         [--text FILE] [--python PATH] [--keep]\n"
"\n"
"The scdb Python module against libscdb, and PyTorch's time to first token\n"
"through scdb against its own prefill: one broker, one prompt, one run.\n"
"The Python side stores the prompt (producer base, PyTorch prefill, states\n"
"captured into shared memory, broker-side SCD encode) and times, as consumer\n"
"code: Client.lookup, Client.get into an Arena, the PyTorch model's own\n"
"prefill of the prompt, and lookup + get + the last prompt token's forward.\n"
"The C side then times scdb_lookup and scdb_get on the same broker and tokens.\n"
"\n"
"  --json FILE      write the figures (c_lookup_us, py_lookup_us, c_get_ms,\n"
"                   py_get_ms, torch_prefill_ms, torch_ttft_scdb_ms, ...)\n"
"  --prefix N       prompt tokens, whole 64-token blocks (default 384)\n"
"  --iters N        lookups timed on each side (default 20000)\n"
"  --get-iters N    gets timed on each side (default 30)\n"
"  --text FILE      prompt text (default: the held-out manpages text, from 48 KiB)\n"
"  --python PATH    the interpreter with numpy and torch (default /usr/bin/python3)\n"
"  --keep           keep the temp dir (broker log, config) and print its path\n"
"\n"
"Needs the scdb module (built with python3-dev) and python3-torch\n"
"(scripts/install-deps.sh --test installs both).  Medians; the machine's\n"
"noise shows in the spread between runs, the ratios are what carry over.\n"
"exit codes: 0 measured, 1 a step failed (its message says which), 2 usage.\n");
}

/* a positive integer option (at most 10^9) into *out; -1 after a message */
static int positive(const char *what, const char *s, int *out)
{
    char why[160];
    if (scdb_parse_int(what, s, 1, 1000000000, out, why, sizeof why) == SCDB_OK) return 0;
    fprintf(stderr, "scdb bench python: %s\n", why);
    return -1;
}

static int write_config(const char *path, const char *endpoint, const char *dir)
{
    static const char *const consumers[] = {"code", "manpages"};
    const char *data = scdb_data_dir();
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/store\nblock_tokens = 64\n"
               "log_level = warn\nheartbeat_timeout_ms = 5000\ndevice = cpu\nno_sync = 1\n\n",
            endpoint, dir);
    fprintf(f, "[model base]\nconfig = %s/models/base/config.json\n\n", data);
    for (size_t i = 0; i < sizeof consumers / sizeof *consumers; i++)
        fprintf(f, "[model %s]\nconfig = %s/models/%s/config.json\n\n", consumers[i], data,
                consumers[i]);
    fprintf(f, "[codebook base-scd]\nkind = scd\nmodel = base\n"
               "file = %s/codebooks/base.safetensors\n\n", data);
    for (size_t i = 0; i < sizeof consumers / sizeof *consumers; i++)
        fprintf(f, "[pair base-scd %s]\ndecoder = scd\nfile = %s/pairs/base__%s.safetensors\n\n",
                consumers[i], data, consumers[i]);
    return fclose(f);
}

/* Run the Python side; its exit status (127: not started). */
static int run_python(const opts *o, const char *script, const char *endpoint,
                      const char *json, const char *tokens)
{
    char prefix[16], iters[16], gets[16], pypath[PATH_MAX + 64];
    const char *argv[20];
    int n = 0, st;
    pid_t pid;

    snprintf(prefix, sizeof prefix, "%d", o->prefix);
    snprintf(iters, sizeof iters, "%d", o->iters);
    snprintf(gets, sizeof gets, "%d", o->get_iters);
    argv[n++] = o->python;
    argv[n++] = script;
    argv[n++] = "--endpoint";
    argv[n++] = endpoint;
    argv[n++] = "--prefix";
    argv[n++] = prefix;
    argv[n++] = "--iters";
    argv[n++] = iters;
    argv[n++] = "--get-iters";
    argv[n++] = gets;
    argv[n++] = "--json";
    argv[n++] = json;
    argv[n++] = "--save-tokens";
    argv[n++] = tokens;
    if (o->text) {
        argv[n++] = "--text";
        argv[n++] = o->text;
    }
    argv[n] = NULL;
    /* the build tree's module (build/python, beside build/share) comes
     * first; an installed one is on the interpreter's own path */
    snprintf(pypath, sizeof pypath, "%s/../../python", scdb_share_dir());
    pid = fork();
    if (pid < 0) return 127;
    if (pid == 0) {
        const char *old = getenv("PYTHONPATH");
        char joined[2 * PATH_MAX + 80];
        if (old && *old) {
            snprintf(joined, sizeof joined, "%s:%s", pypath, old);
            setenv("PYTHONPATH", joined, 1);
        } else {
            setenv("PYTHONPATH", pypath, 1);
        }
        setenv("SCDB_SOURCE_DIR", scdb_share_dir(), 1);     /* tools/train_family.py */
        setenv("SCDB_DATA", scdb_data_dir(), 1);
        dup2(2, 1);                          /* its table is progress here */
        execv(o->python, (char *const *)argv);
        fprintf(stderr, "scdb bench python: cannot run %s: %s\n", o->python, strerror(errno));
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Median per-call µs of scdb_lookup, timed in batches of 10. */
static int c_lookup(scdb *h, const int32_t *t, int n, int iters, double *us)
{
    int batches = iters / 10 > 0 ? iters / 10 : 1;
    double *v = malloc(sizeof *v * (size_t)batches);
    scdb_lookup_result lr;
    if (!v) return -1;
    for (int i = 0; i < 1000; i++)
        if (scdb_lookup(h, t, (size_t)n, &lr)) {
            free(v);
            return -1;
        }
    for (int b = 0; b < batches; b++) {
        double t0 = scdb_now();
        for (int i = 0; i < 10; i++) scdb_lookup(h, t, (size_t)n, &lr);
        v[b] = (scdb_now() - t0) / 10 * 1e6;
    }
    *us = scdb_bench_median(v, (size_t)batches);
    free(v);
    return lr.matched_tokens == (uint32_t)n ? 0 : -1;
}

static int c_get(scdb *h, const int32_t *t, int n, int iters, double *ms, double *decode_ms)
{
    scdb_arena *a = NULL;
    double *v = malloc(sizeof *v * (size_t)iters), *d = malloc(sizeof *d * (size_t)iters);
    scdb_get_result gr;
    int rc = -1;
    if (!v || !d || scdb_arena_new(h, n, &a)) goto done;
    for (int i = 0; i < iters + 3; i++) {
        double t0;
        scdb_arena_cache(a)->n = 0;
        t0 = scdb_now();
        if (scdb_get(h, t, (size_t)n, a, 0, 0, &gr) || gr.tokens_written != (uint32_t)n) goto done;
        if (i >= 3) {
            v[i - 3] = (scdb_now() - t0) * 1e3;
            d[i - 3] = (double)gr.decode_ns / 1e6;
        }
    }
    *ms = scdb_bench_median(v, (size_t)iters);
    *decode_ms = scdb_bench_median(d, (size_t)iters);
    rc = 0;
done:
    scdb_arena_free(&a);
    free(v);
    free(d);
    return rc;
}

static int32_t *read_tokens(const char *path, int *n)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    int32_t *t;
    if (!f) return NULL;
    if (fstat(fileno(f), &st) || st.st_size <= 0 || st.st_size % 4) {
        fclose(f);
        return NULL;
    }
    t = malloc((size_t)st.st_size);
    if (t && fread(t, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(t);
        t = NULL;
    }
    fclose(f);
    *n = (int)(st.st_size / 4);
    return t;
}

int scdb_bench_python(int argc, char **argv)
{
    static const struct option lo[] = {
        {"json", required_argument, 0, 'j'},   {"prefix", required_argument, 0, 'p'},
        {"iters", required_argument, 0, 'i'},  {"get-iters", required_argument, 0, 'g'},
        {"text", required_argument, 0, 't'},   {"python", required_argument, 0, 'y'},
        {"keep", no_argument, 0, 'k'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    opts o = {.python = "/usr/bin/python3", .prefix = 384, .iters = 20000, .get_iters = 30};
    char dir[] = "/tmp/scdb-bench-py-XXXXXX", cfg[64], ep[96], pyjson[64], tokpath[64],
         logp[64], script[PATH_MAX + 64];
    const char *args[4];
    cJSON *py = NULL, *root = NULL;
    int32_t *tok = NULL;
    int c, rc = 1, n = 0;
    pid_t broker = -1;
    scdb *h = NULL;
    double c_lookup_us = 0, c_get_ms = 0, c_decode_ms = 0;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'j': o.json = optarg; break;
        case 'p': if (positive("--prefix", optarg, &o.prefix)) return 2; break;
        case 'i': if (positive("--iters", optarg, &o.iters)) return 2; break;
        case 'g': if (positive("--get-iters", optarg, &o.get_iters)) return 2; break;
        case 't': o.text = optarg; break;
        case 'y': o.python = optarg; break;
        case 'k': o.keep = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "scdb bench python: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (o.prefix % 64) {
        fprintf(stderr, "scdb bench python: --prefix must be whole 64-token blocks, not %d\n",
                o.prefix);
        return 2;
    }
    if (access(o.python, X_OK)) {
        fprintf(stderr, "scdb bench python: no interpreter at %s (--python PATH; "
                        "scripts/install-deps.sh --test installs python3-torch)\n", o.python);
        return 1;
    }
    snprintf(script, sizeof script, "%s/python/bench_python.py", scdb_share_dir());
    if (access(script, R_OK)) {
        fprintf(stderr, "scdb bench python: no %s (a build tree or an install has it)\n",
                script);
        return 1;
    }
    if (!mkdtemp(dir)) {
        fprintf(stderr, "scdb bench python: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    snprintf(cfg, sizeof cfg, "%s/broker.ini", dir);
    snprintf(ep, sizeof ep, "ipc://%s/broker.sock", dir);
    snprintf(pyjson, sizeof pyjson, "%s/python.json", dir);
    snprintf(tokpath, sizeof tokpath, "%s/tokens.i32", dir);
    snprintf(logp, sizeof logp, "%s/broker.log", dir);
    if (write_config(cfg, ep, dir)) {
        fprintf(stderr, "scdb bench python: cannot write %s: %s\n", cfg, strerror(errno));
        goto done;
    }
    args[0] = "--config";
    args[1] = cfg;
    args[2] = NULL;
    fprintf(stderr, "scdb bench python: starting a broker (%s)\n", ep);
    if ((broker = scdb_bench_start_broker(args, logp)) < 0) {
        fprintf(stderr, "scdb bench python: cannot start a broker\n");
        goto done;
    }
    {
        scdb_opts co = {.endpoint = ep, .timeout_ms = 5000, .name = "bench-python"};
        scdb_err e = scdb_bench_connect(&co, 60, broker, &h);
        if (e) {
            fprintf(stderr, "scdb bench python: the broker did not answer: %s (log %s)\n",
                    scdb_strerror(e), logp);
            o.keep = 1;
            goto done;
        }
    }
    fprintf(stderr, "scdb bench python: the Python side (%s %s)\n", o.python, script);
    if ((c = run_python(&o, script, ep, pyjson, tokpath)) != 0) {
        fprintf(stderr, "scdb bench python: the Python side failed (exit %d)\n", c);
        goto done;
    }
    if (!(tok = read_tokens(tokpath, &n)) || n != o.prefix) {
        fprintf(stderr, "scdb bench python: %s: not the %d tokens the Python side used\n",
                tokpath, o.prefix);
        goto done;
    }
    {
        scdb_err e = scdb_register(h, SCDB_CONSUMER, "code", "base-scd", NULL);
        if (e) {
            fprintf(stderr, "scdb bench python: register code: %s: %s\n", scdb_strerror(e),
                    scdb_last_error(h));
            goto done;
        }
    }
    fprintf(stderr, "scdb bench python: the C side (%d lookups, %d gets)\n", o.iters,
            o.get_iters);
    if (c_lookup(h, tok, n, o.iters, &c_lookup_us)) {
        fprintf(stderr, "scdb bench python: C lookups failed: %s\n", scdb_last_error(h));
        goto done;
    }
    if (c_get(h, tok, n, o.get_iters, &c_get_ms, &c_decode_ms)) {
        fprintf(stderr, "scdb bench python: C gets failed: %s\n", scdb_last_error(h));
        goto done;
    }
    {
        FILE *f = fopen(pyjson, "r");
        char *buf = NULL;
        size_t len = 0;
        if (f) {
            scdb_read_stream(f, 1 << 20, &buf, &len);
            fclose(f);
        }
        py = buf ? cJSON_Parse(buf) : NULL;
        free(buf);
        if (!py) {
            fprintf(stderr, "scdb bench python: cannot read %s\n", pyjson);
            goto done;
        }
    }
    {
        double pl = cJSON_GetNumberValue(cJSON_GetObjectItem(py, "py_lookup_us"));
        double pg = cJSON_GetNumberValue(cJSON_GetObjectItem(py, "py_get_ms"));
        double tp = cJSON_GetNumberValue(cJSON_GetObjectItem(py, "torch_prefill_ms"));
        double tt = cJSON_GetNumberValue(cJSON_GetObjectItem(py, "torch_ttft_scdb_ms"));
        double pd = cJSON_GetNumberValue(cJSON_GetObjectItem(py, "py_get_decode_ms"));
        const cJSON *idx = cJSON_GetObjectItem(py, "lookup_index");
        scdb_stat st;
        int c_index = scdb_stats(h, &st) == SCDB_OK && st.index_error == SCDB_OK &&
                      st.request_lookups == 0;

        printf("## Python module vs libscdb, %d-token prompt (consumer code, codebook base-scd)\n\n",
               n);
        printf("| call | C (libscdb) | Python (scdb module) | Python / C |\n");
        printf("|---|---|---|---|\n");
        printf("| lookup (shared-memory index: C %s, Python %s) | %.2f us | %.2f us | %.2fx |\n",
               c_index ? "yes" : "no", cJSON_IsTrue(idx) ? "yes" : "no", c_lookup_us, pl,
               pl / c_lookup_us);
        printf("| get into an arena | %.2f ms | %.2f ms | %.2fx |\n", c_get_ms, pg, pg / c_get_ms);
        printf("| of which the broker's decode | %.2f ms | %.2f ms | |\n", c_decode_ms, pd);
        printf("| get minus decode (the client's share) | %.3f ms | %.3f ms | %.2fx |\n\n",
               c_get_ms - c_decode_ms, pg - pd, (pg - pd) / (c_get_ms - c_decode_ms));
        printf("(The two sides run one after the other on a shared machine: the broker's\n"
               "decode time moves with the load; the client's share is what the binding adds.)\n\n");
        printf("| PyTorch consumer | ms |\n|---|---|\n");
        printf("| own prefill of the prompt | %.2f |\n", tp);
        printf("| TTFT via scdb (lookup + get + last token's forward) | %.2f |\n", tt);
        printf("| speed-up | %.1fx |\n", tp / tt);

        root = cJSON_Duplicate(py, 1);
        cJSON_AddNumberToObject(root, "c_lookup_us", c_lookup_us);
        cJSON_AddNumberToObject(root, "c_get_ms", c_get_ms);
        cJSON_AddNumberToObject(root, "c_get_decode_ms", c_decode_ms);
        cJSON_AddBoolToObject(root, "c_lookup_index", c_index);
        cJSON_AddNumberToObject(root, "py_over_c_lookup", pl / c_lookup_us);
        cJSON_AddNumberToObject(root, "py_over_c_get", pg / c_get_ms);
        cJSON_AddNumberToObject(root, "c_get_client_ms", c_get_ms - c_decode_ms);
        cJSON_AddNumberToObject(root, "py_get_client_ms", pg - pd);
        cJSON_AddNumberToObject(root, "ttft_speedup", tp / tt);
        cJSON_AddNumberToObject(root, "c_lookup_iters", o.iters);
        cJSON_AddNumberToObject(root, "c_get_iters", o.get_iters);
    }
    if (o.json && scdb_bench_write_json(o.json, root, "scdb bench python")) goto done;
    rc = 0;
done:
    scdb_close(&h);
    if (broker > 0) {
        int st = scdb_bench_stop_broker(broker, SIGTERM);
        if (st != 0) fprintf(stderr, "scdb bench python: the broker exited %d (log %s)\n", st, logp);
    }
    cJSON_Delete(py);
    cJSON_Delete(root);
    free(tok);
    if (o.keep || rc) fprintf(stderr, "scdb bench python: kept %s\n", dir);
    else scdb_rm_tree(dir);
    return rc;
}
