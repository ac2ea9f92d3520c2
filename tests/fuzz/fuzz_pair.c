/* fuzz_pair.c — codec/pair.c: a (codebook, consumer) pair file, validated
 * against the small codebook it was fitted with (tests/fuzz/seeds/
 * codebook.safetensors, loaded once).  A pair it loads must decode a block
 * of codes into a cache of its consumer's geometry. */
#include "fuzz.h"

#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "kv_cache.h"

static scdb_codebook *cb;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[256];
    (void)argc;
    (void)argv;
    scdb_log_set_level(SCDB_LOG_OFF);
    if (scdb_codebook_load(SCDB_FUZZ_SEEDS "/codebook.safetensors", &cb, err, sizeof err)) {
        fprintf(stderr, "fuzz_pair: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scdb_pair *p = NULL;
    char path[64], err[256];
    scdb_err e;
    int fd;

    if (!cb) LLVMFuzzerInitialize(NULL, NULL);
    fd = fuzz_memfd(data, size, path, sizeof path);
    e = scdb_pair_load(path, cb, &p, err, sizeof err);
    close(fd);
    FUZZ_CHECK((e == SCDB_OK) == (p != NULL));
    if (!p) return 0;
    {
        const scdb_pair_info *pi = scdb_pair_get_info(p);
        const scdb_codebook_info *in = scdb_codebook_get_info(cb);
        enum { N = 4 };
        uint16_t codes[N * 512];
        int32_t pos[N] = {0, 1, 2, 3}, tok[N] = {1, 2, 3, 4};
        scdb_kv_cache *c = NULL;
        FUZZ_CHECK(pi->n_layers == in->n_layers);
        memset(codes, 0, sizeof codes);
        if (in->code_dim <= 512 &&
            scdb_kv_cache_new(pi->n_layers, pi->n_kv_heads, pi->head_dim, 8, &c) == SCDB_OK) {
            for (int np = -1; np <= pi->n_aligners; np++)
                scdb_pair_decode(p, cb, codes, N, pos, tok, np, c, 2);
            scdb_kv_cache_free(&c);
        }
    }
    scdb_pair_free(&p);
    return 0;
}
