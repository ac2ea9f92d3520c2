/* store_crash_payload.h — what tests/helpers/store_crash_writer.c writes, so that
 * test_store.c can check every acknowledged block knowing only its key. */
#ifndef STORE_CRASH_PAYLOAD_H
#define STORE_CRASH_PAYLOAD_H

#include <stdint.h>
#include <string.h>

#include "scdb_common.h"
#include "store.h"

#define CRASH_BLOCK_TOKENS 16
#define CRASH_NS_ID "crash-test-codebook"

static inline uint64_t crash_key_seed(const scdb_key *k)
{
    uint64_t v;
    memcpy(&v, k->b, 8);
    return v;
}

/* 4..300 KiB, from the key. */
static inline uint64_t crash_payload_len(const scdb_key *k)
{
    uint64_t s = crash_key_seed(k);
    return 4096 + scdb_splitmix64(&s) % (296u * 1024);
}

static inline void crash_payload_fill(const scdb_key *k, uint8_t *p, uint64_t len)
{
    uint64_t s = crash_key_seed(k) ^ 0x5555;
    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t r = scdb_splitmix64(&s);
        memcpy(p + i, &r, len - i < 8 ? (size_t)(len - i) : 8);
    }
}

#endif
