/* fuzz_codebook.c — codec/codebook.c: the producer codebook file (a
 * safetensors file whose metadata describe the layers; FORMATS.md
 * "Codebook and pair artifacts").  A codebook it loads must be internally
 * consistent (code_dim from the layer table, ranks within their input
 * widths) and encode states of its own shape. */
#include "fuzz.h"

#include <string.h>
#include <unistd.h>

#include "codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scdb_codebook *cb = NULL;
    char path[64], err[256];
    scdb_err e;
    int fd;

    scdb_log_set_level(SCDB_LOG_OFF);
    fd = fuzz_memfd(data, size, path, sizeof path);
    e = scdb_codebook_load(path, &cb, err, sizeof err);
    close(fd);
    FUZZ_CHECK((e == SCDB_OK) == (cb != NULL));
    if (!cb) return 0;
    {
        const scdb_codebook_info *in = scdb_codebook_get_info(cb);
        int n = 3, dm = in->d_model, kv = in->kv_dim, L = in->n_layers;
        FUZZ_CHECK(L >= 1 && L <= SCDB_CODEC_MAX_LAYERS);
        FUZZ_CHECK(scdb_codebook_token_bytes(cb) == 2u * (size_t)in->code_dim);
        /* encode 3 tokens of constant states when the shapes are small */
        if ((size_t)L * (size_t)(dm + kv) * (size_t)n < (1u << 20)) {
            float *h = calloc((size_t)L * n * dm + 1, sizeof *h);
            float *k = calloc((size_t)L * n * kv + 1, sizeof *k);
            uint16_t *codes = calloc(scdb_codec_codes_len(in, n) + 1, sizeof *codes);
            scdb_codec_states st = {.h_in = h, .k_post = k};
            FUZZ_CHECK(h && k && codes);
            for (size_t i = 0; i < (size_t)L * n * dm; i++) h[i] = 0.25f;
            scdb_codec_encode(cb, &st, n, codes);
            free(h);
            free(k);
            free(codes);
        }
    }
    scdb_codebook_free(&cb);
    return 0;
}
