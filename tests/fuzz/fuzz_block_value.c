/* fuzz_block_value.c — store/block_value.c: decode a stored block value as
 * it comes (the checksum turns almost every mutation away), then the same
 * bytes sealed with a correct checksum, so the structural checks behind it
 * see fuzzed headers too.  A value it accepts must hold its payload inside
 * the value and re-encode to a value that decodes to the same fields. */
#include "fuzz.h"

#include <string.h>

#include "store_int.h"

static int same_info(const scdb_block_info *a, const scdb_block_info *b)
{
    if (memcmp(&a->key, &b->key, sizeof a->key) || memcmp(&a->parent, &b->parent, sizeof a->parent) ||
        memcmp(&a->ns, &b->ns, sizeof a->ns) || a->block_index != b->block_index ||
        a->token_count != b->token_count || a->payload_dtype != b->payload_dtype ||
        a->n_sections != b->n_sections || a->payload_len != b->payload_len)
        return 0;
    for (uint32_t i = 0; i < a->n_sections && i < SCDB_BLOCK_MAX_SECTIONS; i++)
        if (a->section_off[i] != b->section_off[i]) return 0;
    return 1;
}

static void check_accepted(const uint8_t *v, size_t len, const scdb_block_info *info,
                           const void *payload)
{
    static uint8_t again[1 << 20];
    scdb_block_info info2;
    const void *p2;
    size_t out_len = 0;
    const uint8_t *p = payload;

    FUZZ_CHECK(info->payload_len <= len);
    FUZZ_CHECK(p >= v && p + info->payload_len <= v + len);
    FUZZ_CHECK(info->n_sections <= SCDB_BLOCK_MAX_SECTIONS);
    if (len > sizeof again) return;
    FUZZ_CHECK(scdb_block_value_encode(info, payload, again, sizeof again, &out_len) == SCDB_OK);
    FUZZ_CHECK(out_len == len);
    FUZZ_CHECK(scdb_block_value_decode(again, out_len, &info->key, &info2, &p2) == SCDB_OK);
    FUZZ_CHECK(same_info(&info2, info));
    FUZZ_CHECK(!memcmp(p2, payload, info->payload_len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static scdb_block_info info;
    const void *payload = NULL;
    scdb_key k;
    uint8_t *copy;
    size_t hl;
    scdb_err e;

    memset(&k, 0, sizeof k);
    if (size >= 40) memcpy(k.b, data + 24, sizeof k.b);
    e = scdb_block_value_decode(data, size, size >= 40 ? &k : NULL, &info, &payload);
    if (e == SCDB_OK) check_accepted(data, size, &info, payload);

    /* sealed: past the checksum */
    copy = malloc(size ? size : 1);
    FUZZ_CHECK(copy);
    memcpy(copy, data, size);
    if (size >= SCDB_BLOCK_FIXED_HEADER) st_block_value_seal(copy, size);
    e = scdb_block_value_decode(copy, size, NULL, &info, &payload);
    if (e == SCDB_OK) {
        check_accepted(copy, size, &info, payload);
        FUZZ_CHECK(st_block_value_parse(copy, size, &info, &hl) == SCDB_OK);
        FUZZ_CHECK(hl == scdb_block_header_len(info.n_sections) && hl <= size);
    }
    free(copy);
    return 0;
}
