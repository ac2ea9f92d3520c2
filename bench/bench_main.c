/* bench_main.c — `scdb bench <name>` dispatch. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} benches[] = {
    {"store", scdb_bench_store,
     "trace replay against the store vs bare LMDB: hit rate, ops/s, latency"},
    {"broker", scdb_bench_broker,
     "lookup round trips vs Redis GET; get into shared memory vs memcpy"},
    {"quality", scdb_bench_quality,
     "SCD vs oracle, raw, 4-bit, DroidSpeak-style: ppl, KL, top-1, payload, TTFT"},
    {"evict", scdb_bench_evict,
     "eviction policies vs full cache at 25% / 12.5% budgets: KL, top-1, ppl, overhead"},
    {"kernels", scdb_bench_kernels,
     "low-rank decode at 7B shapes: GB/s of KV written, fraction of memory bandwidth"},
    {"python", scdb_bench_python,
     "the Python module vs libscdb (lookup, get); PyTorch TTFT via scdb vs own prefill"},
    {"load", scdb_bench_load,
     "N client processes, mixed workload at a fraction of capacity: ops/s, p99, RSS, fds"},
    {"chaos", scdb_bench_chaos,
     "kill -9 the broker (and clients) under load: acknowledged puts kept, no wrong bytes"},
    {"session", scdb_bench_session,
     "a live session's fold and eviction per token on a device vs a model step there"},
    {"cluster", scdb_bench_cluster,
     "a fleet of brokers sharing prefixes through Redis Cluster: hit rate, latency, a master kill"},
    {"adapter", scdb_bench_adapter,
     "a LoRA adapter merged at load vs applied low-rank: load, bytes, prefill, decode, logits"},
    {"fleet", scdb_bench_fleet,
     "one producer's stored prefixes served to every model and adapter: quality, TTFT, bytes"},
    {"llama", scdb_bench_llama,
     "the fleet in llama.cpp: capture, restore into its sequences, TTFT and quality vs its prefill"},
    {"fidelity", scdb_bench_fidelity,
     "recompute on a restored prefix (tail, initial, selective, DroidSpeak): TTFT vs top-1 / KL / ppl"},
};

const char *scdb_bench_name(int i)
{
    return i >= 0 && (size_t)i < sizeof benches / sizeof benches[0] ? benches[i].name : NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: scdb bench <name> [options]   (scdb bench <name> --help)\n\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(f, "  %-10s %s\n", benches[i].name, benches[i].what);
}

int scdb_bench_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (!strcmp(argv[1], benches[i].name))
            return benches[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "scdb bench: unknown benchmark '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
