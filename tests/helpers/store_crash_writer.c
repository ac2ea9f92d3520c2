/*
 * store_crash_writer — helper for test_store's kill -9 durability test.
 *
 *   store_crash_writer DIR SEED BATCHES
 *
 * Opens the store at DIR (the env is opened here, in the process that uses
 * it, never inherited across fork), then writes BATCHES batches.  Each batch
 * extends a chain or starts a new one with 1..6 blocks of 16 tokens; block
 * payloads are 4..300 KiB of bytes derived from the block key alone (see
 * store_crash_payload below, shared with the test through #include), so the
 * parent can check every byte knowing only the key.  After each put_batch
 * returns SCDB_OK, one line per block goes to stdout and is flushed:
 *
 *   ACK <32 hex digits of the key>
 *
 * The parent kill -9s this process at random points.  The map starts at
 * 1 MiB so that map growth happens under crashes too.
 */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_crash_payload.h"

int main(int argc, char **argv)
{
    scdb_store_opts o = {0};
    scdb_store *s = NULL;
    scdb_ns ns;
    scdb_key chain[64];
    size_t depth = 0;
    uint64_t rng;
    long batches;
    scdb_err e;

    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR SEED BATCHES\n", argv[0]);
        return 2;
    }
    rng = strtoull(argv[2], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
    batches = strtol(argv[3], NULL, 10);
    o.path = argv[1];
    o.block_tokens = CRASH_BLOCK_TOKENS;
    o.map_size = 1u << 20;
    if ((e = scdb_store_open(&o, &s))) {
        fprintf(stderr, "store_crash_writer: open: %s\n", scdb_strerror(e));
        return 1;
    }
    scdb_ns_make(CRASH_NS_ID, strlen(CRASH_NS_ID), SCDB_F16, 1, &ns);
    for (long b = 0; b < batches; b++) {
        scdb_block_put puts[6];
        uint8_t *payloads[6];
        size_t n = 1 + scdb_splitmix64(&rng) % 6, stored = 0;
        if (depth + n > 64 || scdb_splitmix64(&rng) % 4 == 0) depth = 0;
        for (size_t i = 0; i < n; i++) {
            int32_t tokens[CRASH_BLOCK_TOKENS];
            scdb_key parent = depth ? chain[depth - 1] : (scdb_key){{0}};
            for (size_t t = 0; t < CRASH_BLOCK_TOKENS; t++)
                tokens[t] = (int32_t)(scdb_splitmix64(&rng) % 32000);
            scdb_block_key(depth ? &parent : NULL, &ns, tokens, CRASH_BLOCK_TOKENS,
                           &chain[depth]);
            memset(&puts[i], 0, sizeof puts[i]);
            puts[i].key = chain[depth];
            puts[i].parent = parent;
            puts[i].block_index = (uint32_t)depth;
            puts[i].payload_dtype = SCDB_F16;
            puts[i].payload_len = crash_payload_len(&chain[depth]);
            payloads[i] = malloc(puts[i].payload_len);
            if (!payloads[i]) return 1;
            crash_payload_fill(&chain[depth], payloads[i], puts[i].payload_len);
            puts[i].payload = payloads[i];
            depth++;
        }
        e = scdb_store_put_batch(s, &ns, puts, n, &stored);
        if (e) {
            fprintf(stderr, "store_crash_writer: put: %s\n", scdb_strerror(e));
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            char hex[33];
            printf("ACK %s\n", scdb_key_hex(&puts[i].key, hex));
            free(payloads[i]);
        }
        fflush(stdout);
    }
    scdb_store_close(&s);
    return 0;
}
