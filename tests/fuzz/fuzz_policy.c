/* fuzz_policy.c — evict/mlp.c: the learned eviction policy file (a
 * safetensors file with metadata, FORMATS.md "Eviction policy file").  A
 * policy it loads must score a small accumulator without reading past its
 * weights and select a keep set of the right size. */
#include "fuzz.h"

#include <string.h>
#include <unistd.h>

#include "evict.h"

static scdb_evict_acc *acc;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    scdb_evict_acc_shape sh = {.n_layers = 2, .n_heads = 2, .n_kv_heads = 1, .capacity = 48,
                               .window = 4};
    (void)argc;
    (void)argv;
    scdb_log_set_level(SCDB_LOG_OFF);
    if (scdb_evict_acc_new(&sh, &acc)) abort();
    /* 40 live slots with features that vary by slot */
    acc->n = 40;
    for (int i = 0; i < 40; i++) {
        scdb_evict_acc_pos(acc)[i] = i;
        scdb_evict_acc_mass(acc)[i] = 0.01f * (float)((i * 7) % 13);
        scdb_evict_acc_n_obs(acc)[i] = 1.0f + (float)(i % 5);
        scdb_evict_acc_vnorm(acc)[i] = 1.0f + 0.1f * (float)(i % 3);
        scdb_evict_acc_ent_den(acc)[i] = 1.0f;
    }
    acc->last_pos = 39;
    acc->n_queries = 8;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scdb_evict_policy *p = NULL;
    char path[64], err[256];
    float scores[48];
    int keep[48], n_keep = 0, sinks = 0, recent = 0;
    scdb_err e;
    int fd;

    if (!acc) LLVMFuzzerInitialize(NULL, NULL);
    fd = fuzz_memfd(data, size, path, sizeof path);
    e = scdb_evict_policy_load(path, &p, err, sizeof err);
    close(fd);
    FUZZ_CHECK((e == SCDB_OK) == (p != NULL));
    if (!p) return 0;
    FUZZ_CHECK(scdb_evict_policy_kind(p) == SCDB_EVICT_LEARNED);
    for (int budget = 8; budget <= 32; budget *= 2) {
        if (scdb_evict_policy_score_budget(p, acc, budget, scores)) continue;
        scdb_evict_policy_protect(p, acc, acc->n, budget, &sinks, &recent);
        FUZZ_CHECK(sinks >= 0 && recent >= 0 && sinks + recent <= budget);
        if (scdb_evict_select(scores, acc->n, budget, sinks, recent, keep, &n_keep) == SCDB_OK) {
            FUZZ_CHECK(n_keep == budget);
            for (int i = 1; i < n_keep; i++) FUZZ_CHECK(keep[i] > keep[i - 1]);
        }
    }
    scdb_evict_policy_free(&p);
    return 0;
}
