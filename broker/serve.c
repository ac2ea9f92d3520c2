/* serve.c — scdb_broker_main(): `scdb serve` and the scdb-broker executable.
 * Defaults, then the --config file, then command-line flags in order. */
#include "broker.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What --help says about each key of the parser's table (config.c); the
 * usage prints the table's keys in its order, so a key added there and not
 * here still shows up (with a pointer to the manual). */
static const struct key_help {
    const char *key, *arg, *text;
} key_help[] = {
    {"endpoint", "ipc://PATH", "listening socket (default: see the end of this text)"},
    {"tcp_endpoint", "tcp://H:P", "also listen on TCP; needs --curve-secret-file"},
    {"curve_secret_file", "FILE", "the server's CURVE secret key (Z85, 40 chars)"},
    {"curve_allow_file", "FILE", "client public keys (Z85, one per line, # comments)\n"
                                 "let in on tcp; unset: any CURVE client that knows\n"
                                 "the server's public key"},
    {"data_dir", "DIR", "LMDB store directory (default ./scdb-data)"},
    {"block_tokens", "N", "tokens per block (default 64; fixed per store)"},
    {"map_size", "SIZE", "initial LMDB map (default 256MiB or 2x disk capacity)"},
    {"max_map_size", "SIZE", "LMDB map growth limit (default 1TiB)"},
    {"disk_capacity", "SIZE", "store bytes on disk, LRU leaves evicted (default 0:\n"
                              "unbounded)"},
    {"hot_capacity", "SIZE", "RAM tier bytes (default 256MiB)"},
    {"gpu_hot_capacity", "SIZE", "hot tier in CUDA device memory instead of RAM, of\n"
                                 "this many bytes (default 0: none; ignored with a\n"
                                 "warning when the broker runs on the CPU)"},
    {"no_sync", "BOOL", "skip fsync on commit (default 0)"},
    {"lookup_index", "BOOL", "publish the shared-memory lookup index (default 1)"},
    {"lookup_index_entries", "N", "keys to size the index for at start (default\n"
                                  "16384 or twice the stored blocks; it doubles as needed)"},
    {"workers", "N", "decode/read threads (default 2); one writer thread"},
    {"evict_threads", "N", "threads that run session evictions only, so that\n"
                           "one never waits for a decode (default 1; 0: the\n"
                           "workers alone)"},
    {"worker_nice", "N", "the workers' and the writer's nice value relative to\n"
                         "the broker's own, -20 .. 19 (default 0; below 0\n"
                         "needs CAP_SYS_NICE)"},
    {"evict_nice", "N", "the eviction threads', likewise (default 0); below\n"
                        "worker_nice an eviction cuts in on a decode"},
    {"heartbeat_ms", "N", "client heartbeat interval (default 1000)"},
    {"heartbeat_timeout_ms", "N", "reclaim a silent client's arenas after this\n"
                                  "(default 10000)"},
    {"max_request_bytes", "SIZE", "all frames of one request (default 64MiB)"},
    {"max_tokens", "N", "tokens in one request (default 1048576)"},
    {"max_arenas_per_client", "N", "arenas one client holds at once (default 64)"},
    {"max_arena_bytes", "SIZE", "one arena (default 4GiB)"},
    {"max_client_arena_bytes", "SIZE", "all arenas of one client together (default 0:\n"
                                       "unbounded)"},
    {"max_sessions_per_client", "N", "live sessions one client holds at once (default\n"
                                     "32; 0: unbounded)"},
    {"max_inflight_per_client", "N", "one client's get/put/delete requests queued at\n"
                                     "once before it is answered SCDB_EBUSY (default 64)"},
    {"arena_total_bytes", "SIZE", "all arenas (default 0: unbounded)"},
    {"drain_timeout_ms", "N", "shutdown drain limit (default 30000)"},
    {"max_inflight", "N", "queued get/put/delete requests before replying\n"
                          "SCDB_EBUSY (default 1024)"},
    {"socket_mode", "MODE", "socket files' mode (the ipc socket and the fd\n"
                            "socket beside it), 0660 or stricter (default 0660)"},
    {"socket_group", "GROUP", "socket files' group, a name or a number (default:\n"
                              "the broker's); any user in it may connect"},
    {"log_level", "LEVEL", "debug, info, warn, error, off (default info, or\n"
                           "$SCDB_LOG)"},
    {"device", "D", "auto | cpu | cuda (default auto: CUDA when a device\n"
                    "answers; the choice is logged).  On CUDA, clients\n"
                    "may ask for CUDA IPC arenas (device memory, decoded\n"
                    "by the CUDA kernels); cuda fails to start when no\n"
                    "device answers (exit 1) or the build has no CUDA\n"
                    "backend (exit 2)"},
    {"metrics_listen", "ADDR", "serve GET /metrics (Prometheus text format) over\n"
                               "HTTP on HOST:PORT, [IPV6]:PORT or PORT (=\n"
                               "127.0.0.1:PORT); port 0 picks a free one (logged).\n"
                               "Default: off"},
    {"remote_cluster", "H:P,...", "seed nodes (default none: no remote tier)"},
    {"remote_user", "NAME", "ACL user (default: the default user)"},
    {"remote_password_file", "F", "its password on the first line (default: no AUTH);\n"
                                  "refused credentials stop the start (exit 2)"},
    {"remote_key_prefix", "P", "Redis key = P + the block key in hex (default\n"
                               "scdb:); no braces (no hash tags)"},
    {"remote_ttl", "SECONDS", "expiry of every value written (default 86400;\n"
                              "0: none).  Run the cluster with maxmemory and\n"
                              "maxmemory-policy allkeys-lru (docs/OPERATING.md)"},
    {"remote_write_queue", "SIZE", "writes waiting for the cluster; a put that finds\n"
                                   "it full drops its remote write, counted (64MiB)"},
    {"remote_timeout_ms", "N", "deadline of one cluster call (default 100)"},
};

#define HELP_COL 29      /* where a flag's text starts */

/* One flag: "  --KEY ARG", then the text from column HELP_COL (a new line
 * when the flag is longer), continuation lines indented the same. */
static void print_flag(FILE *f, const char *key, const char *arg, const char *text)
{
    char flag[96];
    int n = snprintf(flag, sizeof flag, "  --%s %s", key, arg);
    for (char *q = flag + 4; *q && *q != ' '; q++)
        if (*q == '_') *q = '-';
    fputs(flag, f);
    if (n >= HELP_COL - 1) fprintf(f, "\n%*s", HELP_COL, "");
    else fprintf(f, "%*s", HELP_COL - n, "");
    for (const char *t = text; *t; t++) {
        fputc(*t, f);
        if (*t == '\n') fprintf(f, "%*s", HELP_COL, "");
    }
    fputc('\n', f);
}

/* Every key of the table whose name does (remote) or does not start with
 * "remote_". */
static void print_keys(FILE *f, int remote)
{
    const char *key;
    for (int i = 0; (key = scdb_broker_config_key(i)); i++) {
        const struct key_help *h = NULL;
        if ((strncmp(key, "remote_", 7) == 0) != remote) continue;
        for (size_t j = 0; j < SCDB_ARRAY_LEN(key_help); j++)
            if (!strcmp(key_help[j].key, key)) h = &key_help[j];
        if (h) print_flag(f, key, h->arg, h->text);
        else print_flag(f, key, "VALUE", "see scdb-broker.ini(5)");
    }
}

static void usage(FILE *f, const char *prog)
{
    char ep[300];
    const char *key;
    int col = 2;

    fprintf(f,
"usage: %s [--config FILE] [--model SPEC]... [--KEY VALUE]...\n"
"\n"
"Run the scdb broker in the foreground: keep prefixes (as codes) in an LMDB\n"
"store with a hot tier in RAM, and serve libscdb clients over ZeroMQ: put,\n"
"lookup, get (decoded straight into the client's shared-memory KV arena),\n"
"delete, stats, broker-side encode of a producer's states (put_states), and\n"
"live sessions that keep a consumer's arena within a slot budget with an\n"
"eviction policy.  Logs go to stderr.  SIGTERM or SIGINT drains requests in\n"
"flight and exits; SIGHUP reloads the configuration (models, codebooks, pairs,\n"
"policies and the run-time keys listed at the end) without dropping clients.\n"
"Started by systemd (Type=notify) it reports readiness, reloads and shutdown.\n"
"\n"
"options (every [broker] key of the config file is also a flag, '-' or '_';\n"
"[remote] keys are flags --remote-KEY):\n"
"  --config FILE              ini file: [broker] keys as below, [model NAME]\n"
"                             (config = DIR/config.json, a model or adapter\n"
"                             directory or a GGUF model or adapter file, or\n"
"                             n_layers, n_kv_heads, head_dim, max_seq_len;\n"
"                             raw_dtype = f16|f32),\n"
"                             [codebook NAME] (kind = raw | scd: raw KV of\n"
"                             `model`, or an SCD codebook `file` fitted on it;\n"
"                             dtype = f16|f32 for raw; codes_dtype = f16|int8\n"
"                             for scd), [pair CODEBOOK CONSUMER]\n"
"                             (decoder = raw | scd, default the codebook's kind:\n"
"                             raw reuses the producer's KV as it is, scd decodes\n"
"                             codes with the pair `file`) and\n"
"                             [policy NAME] (file = a learned eviction policy\n"
"                             for live sessions; full, streaming, h2o, snapkv\n"
"                             and tova are built in)\n"
"  --model SPEC               add a model: NAME=DIR (reads DIR/config.json),\n"
"                             NAME=FILE.gguf (a GGUF model or adapter) or\n"
"                             NAME:LAYERS:KV_HEADS:HEAD_DIM[:MAX_SEQ[:f16|f32]];\n"
"                             each model gets the codebook raw/NAME (raw KV)\n",
            prog);
    print_keys(f, 0);
    fprintf(f,
"\n"
"remote tier ([remote] section of the config file; each key NAME is also the\n"
"flag --remote-NAME): blocks shared by a fleet of brokers through a Redis\n"
"Cluster.  Every committed block is also written there, asynchronously; a\n"
"lookup or get whose local prefix stops short continues there, and what it\n"
"finds is verified (checksum, namespace, chain) and kept locally.  A slow or\n"
"unreachable cluster never fails a request: the local tiers answer.\n");
    print_keys(f, 1);
    fprintf(f,
"\n"
"  -h, --help                 this text\n"
"SIZE takes K, M, G, T (or KiB, MiB, ...) suffixes.\n"
"The endpoint's default: $SCDB_ENDPOINT, else ipc://$XDG_RUNTIME_DIR/scdb/broker.sock,\n"
"else ipc:///tmp/scdb-UID/broker.sock; here %s.\n"
"A reload (SIGHUP) applies these keys; every other key takes a restart:\n",
            scdb_default_endpoint(ep, sizeof ep));
    for (int i = 0; (key = scdb_broker_config_key(i)); i++) {
        int w = (int)strlen(key) + 2;
        if (!scdb_broker_config_reloadable(key)) continue;
        if (col + w > 78) {
            fputc('\n', f);
            col = 2;
        }
        fprintf(f, "%s%s", col == 2 ? "  " : " ", key);
        col += w;
    }
    fprintf(f,
"\n"
"exit status: 0 clean shutdown; 1 runtime failure (data dir or endpoint in\n"
"use, bind, store I/O, drain timeout); 2 usage or configuration error (a bad\n"
"setting, a plaintext tcp endpoint, or a model/codebook/pair/policy file it\n"
"names that is missing or invalid).\n");
}

/* The whole configuration from argv into cfg (defaults filled): the config
 * file first, whatever its place among the flags, then the flags in order.
 * At start and again at every SIGHUP (reload).  SCDB_OK, or the error with
 * err saying why. */
typedef struct args {
    int argc;
    char **argv;
} args;

static scdb_err load_args(void *ctx, scdb_broker_config *cfg, char *err, size_t errlen)
{
    const args *a0 = ctx;
    int argc = a0->argc;
    char **argv = a0->argv;
    scdb_err e;

    scdb_broker_config_clear(cfg);
    scdb_broker_config_defaults(cfg);
    if (getenv("SCDB_LOG")) cfg->log_level = scdb_log_get_level();
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) goto missing;
            v = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            v = argv[i] + 9;
        }
        if (v && (e = scdb_broker_config_load(cfg, v, err, errlen))) return e;
    }
    for (int i = 1; i < argc; i++) {
        char key[64];
        const char *a = argv[i], *v, *eq;

        if (strncmp(a, "--", 2)) {
            snprintf(err, errlen, "unexpected argument '%s'", a);
            return SCDB_EINVAL;
        }
        a += 2;
        eq = strchr(a, '=');
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a);
            if (i + 1 >= argc) goto missing;
            v = argv[++i];
        }
        if (!strcmp(key, "config")) continue;
        if (!strcmp(key, "model"))
            e = scdb_broker_config_add_model(cfg, v, err, errlen);
        else
            e = scdb_broker_config_set(cfg, key, v, err, errlen);
        if (e) return e;
    }
    return SCDB_OK;
missing:
    snprintf(err, errlen, "option %s needs a value", argv[argc - 1]);
    return SCDB_EINVAL;
}

int scdb_broker_main(int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : "scdb-broker";
    args a = {argc, argv};
    scdb_broker_config cfg;
    scdb_broker *b = NULL;
    char err[512] = "";
    scdb_err e;
    int rc = 2;

    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout, prog);
            return 0;
        }
    scdb_broker_config_defaults(&cfg);
    if (load_args(&a, &cfg, err, sizeof err)) goto bad;
    scdb_log_set_level(cfg.log_level);
    if (cfg.n_models == 0)
        scdb_warn("no models configured (--model or [model NAME]): every hello will fail");

    /* a SIGTERM or SIGINT during start-up is kept for the event loop, which
     * then drains and exits 0, instead of killing a half-started broker */
    scdb_broker_catch_signals();
    e = scdb_broker_new(&cfg, &b, err, sizeof err);
    if (e) {
        /* one line: a log line when logging is on, else plain stderr */
        if (scdb_log_get_level() <= SCDB_LOG_ERROR)
            scdb_error("%s: cannot start: %s", prog, err);
        else
            fprintf(stderr, "%s: cannot start: %s\n", prog, err);
        /* a bad setting, or a model/codebook/pair/policy file it names that
         * is missing or invalid: a configuration error; the rest (data dir
         * or endpoint taken, bind, store I/O) a runtime failure */
        rc = e == SCDB_EINVAL || e == SCDB_EUNSUPPORTED || e == SCDB_ENOTFOUND ||
                     e == SCDB_EFORMAT || e == SCDB_ETRUNC || e == SCDB_ESHAPE ||
                     e == SCDB_EDTYPE || e == SCDB_EMISMATCH || e == SCDB_ECHECKSUM ||
                     e == SCDB_ERANGE || e == SCDB_ETOOBIG || e == SCDB_EAUTH
                 ? 2
                 : 1;
        goto out;
    }
    scdb_broker_set_reload(b, load_args, &a);
    e = scdb_broker_run(b);
    scdb_broker_free(&b);
    rc = e == SCDB_OK ? 0 : 1;
    if (rc == 0) scdb_info("clean exit");
    goto out;

bad:
    fprintf(stderr, "%s: %s\n(try %s --help)\n", prog, err, prog);
    rc = 2;
out:
    scdb_broker_config_clear(&cfg);
    return rc;
}
