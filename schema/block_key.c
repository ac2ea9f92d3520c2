/* block_key.c — chained 128-bit block keys and key namespaces (block_key.h;
 * store.h, "BLOCKS AND KEYS").  Everything hashed is serialised
 * little-endian first, so keys do not depend on the host's byte order or
 * struct layout.  Compiled into the store and into libscdb: xxHash is
 * inlined here (its canonical XXH3-128, whatever the SIMD path), so the
 * installed client library does not link libxxhash. */
#include "block_key.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define NS_TAG "scdb.ns1"
#define BLK_TAG "scdb.blk"
#define MAX_ID_LEN 4096u

static void put_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void key_from_hash(XXH128_hash_t h, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out, c.digest, 16);
}

static int host_is_le(void)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return 1;
#else
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
#endif
}

scdb_err scdb_ns_make(const void *id, size_t id_len, uint32_t payload_dtype,
                      uint32_t format_version, scdb_ns *out)
{
    uint8_t buf[8 + 4 + MAX_ID_LEN + 8];
    size_t n = 0;

    if (!out || (!id && id_len) || id_len > MAX_ID_LEN) return SCDB_EINVAL;
    memcpy(buf, NS_TAG, 8), n = 8;
    put_u32le(buf + n, (uint32_t)id_len), n += 4;
    if (id_len) memcpy(buf + n, id, id_len), n += id_len;
    put_u32le(buf + n, payload_dtype), n += 4;
    put_u32le(buf + n, format_version), n += 4;
    key_from_hash(XXH3_128bits(buf, n), out->b);
    return SCDB_OK;
}

/* Feed n tokens as little-endian int32 bytes. */
static void update_tokens(XXH3_state_t *st, const int32_t *t, size_t n)
{
    if (host_is_le()) {
        XXH3_128bits_update(st, t, n * sizeof *t);
        return;
    }
    uint8_t chunk[1024];
    while (n) {
        size_t m = n < sizeof chunk / 4 ? n : sizeof chunk / 4;
        for (size_t i = 0; i < m; i++) put_u32le(chunk + 4 * i, (uint32_t)t[i]);
        XXH3_128bits_update(st, chunk, m * 4);
        t += m, n -= m;
    }
}

/* One link of the chain with a caller-owned streaming state. */
static void key_step(XXH3_state_t *st, const uint8_t parent[16],
                      const scdb_ns *ns, const int32_t *tokens, size_t n,
                      scdb_key *out)
{
    uint8_t pre[8 + 16 + 16 + 4];

    memcpy(pre, BLK_TAG, 8);
    memcpy(pre + 8, parent, 16);
    memcpy(pre + 24, ns->b, 16);
    put_u32le(pre + 40, (uint32_t)n);
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, pre, sizeof pre);
    update_tokens(st, tokens, n);
    key_from_hash(XXH3_128bits_digest(st), out->b);
}

scdb_err scdb_block_key(const scdb_key *parent, const scdb_ns *ns,
                        const int32_t *tokens, size_t n_tokens, scdb_key *out)
{
    static const uint8_t zero[16];
    XXH3_state_t st;

    if (!ns || !out || (!tokens && n_tokens) || n_tokens > SCDB_BLOCK_TOKENS_MAX)
        return SCDB_EINVAL;
    XXH3_INITSTATE(&st);
    key_step(&st, parent ? parent->b : zero, ns, tokens, n_tokens, out);
    return SCDB_OK;
}

scdb_err scdb_block_key_chain(const scdb_ns *ns, const int32_t *tokens,
                              size_t n_tokens, uint32_t block_tokens,
                              scdb_key *keys_out, size_t max_keys,
                              size_t *n_keys)
{
    static const uint8_t zero[16];
    XXH3_state_t st;
    size_t n;

    if (!ns || !n_keys || (!tokens && n_tokens) || (!keys_out && max_keys) ||
        block_tokens == 0 || block_tokens > SCDB_BLOCK_TOKENS_MAX)
        return SCDB_EINVAL;
    n = n_tokens / block_tokens;
    if (n > max_keys) n = max_keys;
    *n_keys = 0;
    if (n == 0) return SCDB_OK;
    XXH3_INITSTATE(&st);
    for (size_t i = 0; i < n; i++)
        key_step(&st, i ? keys_out[i - 1].b : zero, ns,
                            tokens + i * block_tokens, block_tokens, &keys_out[i]);
    *n_keys = n;
    return SCDB_OK;
}

scdb_err scdb_block_key_continue(const scdb_key *parent, const scdb_ns *ns,
                                 const int32_t *tokens, size_t n_blocks,
                                 uint32_t block_tokens, scdb_key *keys_out)
{
    static const uint8_t zero[16];
    XXH3_state_t st;

    if (!ns || ((!tokens || !keys_out) && n_blocks) || block_tokens == 0 ||
        block_tokens > SCDB_BLOCK_TOKENS_MAX)
        return SCDB_EINVAL;
    if (n_blocks == 0) return SCDB_OK;
    XXH3_INITSTATE(&st);
    for (size_t i = 0; i < n_blocks; i++)
        key_step(&st, i ? keys_out[i - 1].b : parent ? parent->b : zero, ns,
                 tokens + i * block_tokens, block_tokens, &keys_out[i]);
    return SCDB_OK;
}

int scdb_key_is_zero(const scdb_key *k)
{
    uint8_t acc = 0;
    for (int i = 0; i < 16; i++) acc |= k->b[i];
    return acc == 0;
}

char *scdb_key_hex(const scdb_key *k, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        buf[2 * i] = hex[k->b[i] >> 4];
        buf[2 * i + 1] = hex[k->b[i] & 15];
    }
    buf[32] = '\0';
    return buf;
}
