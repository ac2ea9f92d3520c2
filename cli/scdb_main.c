/* scdb_main.c — the `scdb` command: the front door that dispatches to every
 * module's subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "scdb_cli.h"

#include "scdb_common.h"
#ifdef SCDB_HAVE_LLAMA
#include "gguf_ggml.h"
#endif

const char *cli_data_dir(void) { return scdb_data_dir(); }

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} cmds[] = {
    {"demo", cli_cmd_demo, "the fan-out demo: one stored prefix served to the whole fleet"},
    {"models", cli_cmd_models, "held-out bits-per-byte of every bundled model on every domain"},
    {"calibrate", cli_cmd_calibrate, "fit a producer codebook and per-consumer pairs (SCD)"},
    {"train-policy", cli_cmd_train_policy, "train the DistillCache eviction policy (REINFORCE)"},
    {"serve", cli_cmd_serve, "run the broker daemon (foreground; SIGTERM drains)"},
    {"put", cli_cmd_put, "store a prompt's blocks as a producer"},
    {"lookup", cli_cmd_lookup, "longest stored prefix of a prompt"},
    {"get", cli_cmd_get, "decode a stored prefix into a model's KV"},
    {"stats", cli_cmd_stats, "broker and store counters"},
    {"fingerprint", cli_cmd_fingerprint, "weights fingerprint of models and adapters (any layout, GGUF)"},
    {"export-gguf", cli_cmd_export_gguf, "write a model or LoRA adapter as a GGUF file for llama.cpp"},
    {"audit", cli_cmd_audit, "measure a consumer's decoded prefixes against its own prefill"},
    {"bench", scdb_bench_main, NULL},    /* the benchmarks, listed from bench_main.c's table */
};

static void usage(FILE *f)
{
    fprintf(f,
            "scdb — sidecar cache broker for LLM serving\n\n"
            "usage: scdb <command> [options]     (scdb <command> --help)\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const char *b;
        int col;
        if (cmds[i].what) {
            fprintf(f, "  %-13s %s\n", cmds[i].name, cmds[i].what);
            continue;
        }
        col = fprintf(f, "  %-13s benchmarks (`scdb bench NAME --help`):", cmds[i].name);
        for (int j = 0; (b = scdb_bench_name(j)); j++) {
            if (col + 1 + (int)strlen(b) + 1 > 79) col = fprintf(f, "\n%15s", "") - 1;
            col += fprintf(f, " %s%s", b, scdb_bench_name(j + 1) ? "," : "");
        }
        fputc('\n', f);
    }
    fprintf(f,
            "\nenvironment:\n"
            "  SCDB_DATA   asset directory (models, codebooks, pairs, policies, held-out\n"
            "              texts); default %s (../share/scdb beside this program)\n"
            "  SCDB_LOG    log level: debug, info, warn (default), error, off\n"
            "  SCDB_ENDPOINT  the broker put, lookup, get, stats and audit talk to; without\n"
            "              it, a broker of yours on the per-user socket, else the installed\n"
            "              service's endpoint (scdb stats --help says which, here)\n",
            scdb_share_dir());
}

int main(int argc, char **argv)
{
#ifdef SCDB_HAVE_LLAMA
    scdb_gguf_ggml_install();     /* quantized GGUF models through ggml */
#endif
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("scdb %s\n", SCDB_VERSION); return 0; }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "scdb: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
