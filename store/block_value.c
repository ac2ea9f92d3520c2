/* block_value.c — encode, decode and verify a stored block value: header,
 * section table, checksum (store.h "VALUES"; schema/FORMATS.md "Store block
 * format").  All integers little-endian; the checksum is XXH3-128 (seed 0,
 * canonical bytes) over value[0..8) | value[24..len). */
#include "store_int.h"

#include <string.h>

enum {
    OFF_MAGIC = 0, OFF_VERSION = 4, OFF_HDRLEN = 6, OFF_CHECKSUM = 8,
    OFF_KEY = 24, OFF_PARENT = 40, OFF_NS = 56, OFF_INDEX = 72,
    OFF_TOKENS = 76, OFF_DTYPE = 80, OFF_NSECT = 84, OFF_PLEN = 88,
    OFF_FLAGS = 96, OFF_TABLE = 104
};

/* Little-endian field access.  On little-endian hosts these are single
 * (unaligned) loads and stores; elsewhere byte by byte. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static void w16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void w32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void w64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t r16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t r32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t r64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
#else
static void w16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void w32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void w64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t r16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t r32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t r64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
#endif

size_t scdb_block_header_len(uint32_t n_sections)
{
    return ((size_t)SCDB_BLOCK_FIXED_HEADER + 8u * n_sections + 15u) & ~(size_t)15u;
}

static scdb_err check_sections(uint32_t n, const uint64_t *off, uint64_t plen)
{
    if (n > SCDB_BLOCK_MAX_SECTIONS) return SCDB_ERANGE;
    for (uint32_t i = 0; i < n; i++) {
        if (off[i] > plen || (off[i] == plen && plen != 0)) return SCDB_ERANGE;
        if (i && off[i] < off[i - 1]) return SCDB_ERANGE;
    }
    return SCDB_OK;
}

/* Checksum of a complete value in place (skips the checksum field). */
static void value_checksum(const uint8_t *v, size_t len, uint8_t out[16])
{
    XXH3_state_t st;
    XXH128_canonical_t c;

    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, v, OFF_CHECKSUM);
    XXH3_128bits_update(&st, v + OFF_KEY, len - OFF_KEY);
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(out, c.digest, 16);
}

scdb_err st_block_value_header(const scdb_block_info *info, uint8_t *dst)
{
    size_t hl = scdb_block_header_len(info->n_sections);
    memcpy(dst + OFF_MAGIC, SCDB_BLOCK_MAGIC, 4);
    w16(dst + OFF_VERSION, SCDB_BLOCK_FORMAT_VERSION);
    w16(dst + OFF_HDRLEN, (uint16_t)hl);
    memset(dst + OFF_CHECKSUM, 0, 16);
    memcpy(dst + OFF_KEY, info->key.b, 16);
    memcpy(dst + OFF_PARENT, info->parent.b, 16);
    memcpy(dst + OFF_NS, info->ns.b, 16);
    w32(dst + OFF_INDEX, info->block_index);
    w32(dst + OFF_TOKENS, info->token_count);
    w32(dst + OFF_DTYPE, info->payload_dtype);
    w32(dst + OFF_NSECT, info->n_sections);
    w64(dst + OFF_PLEN, info->payload_len);
    w64(dst + OFF_FLAGS, 0);
    for (uint32_t i = 0; i < info->n_sections; i++)
        w64(dst + OFF_TABLE + 8 * i, info->section_off[i]);
    memset(dst + OFF_TABLE + 8 * info->n_sections, 0,
           hl - OFF_TABLE - 8 * info->n_sections);
    return SCDB_OK;
}

void st_block_value_seal(uint8_t *value, size_t len)
{
    uint8_t sum[16];
    value_checksum(value, len, sum);
    memcpy(value + OFF_CHECKSUM, sum, 16);
}

scdb_err st_block_info_check(const scdb_block_info *info)
{
    if (info->payload_len > SCDB_BLOCK_MAX_PAYLOAD) return SCDB_ETOOBIG;
    if ((info->block_index == 0) != (scdb_key_is_zero(&info->parent) != 0))
        return SCDB_EINVAL;
    return check_sections(info->n_sections, info->section_off, info->payload_len);
}

scdb_err scdb_block_value_encode(const scdb_block_info *info,
                                 const void *payload, void *dst,
                                 size_t dst_cap, size_t *out_len)
{
    scdb_err e;
    size_t hl, len;

    if (!info || !out_len || (!payload && info->payload_len) || (!dst && dst_cap))
        return SCDB_EINVAL;
    if ((e = st_block_info_check(info))) return e;
    hl = scdb_block_header_len(info->n_sections);
    len = hl + (size_t)info->payload_len;
    *out_len = len;
    if (dst_cap < len) return SCDB_ETOOBIG;
    st_block_value_header(info, dst);
    if (info->payload_len) memcpy((uint8_t *)dst + hl, payload, info->payload_len);
    st_block_value_seal(dst, len);
    return SCDB_OK;
}

scdb_err st_block_value_parse(const void *value, size_t len,
                                scdb_block_info *info, size_t *hdr_len)
{
    const uint8_t *v = value;
    uint32_t nsect;
    uint64_t plen;
    size_t hl;

    if (len < 4) return SCDB_ETRUNC;
    if (memcmp(v + OFF_MAGIC, SCDB_BLOCK_MAGIC, 4)) return SCDB_EFORMAT;
    if (len < OFF_TABLE) return SCDB_ETRUNC;
    if (r16(v + OFF_VERSION) != SCDB_BLOCK_FORMAT_VERSION) return SCDB_EUNSUPPORTED;
    nsect = r32(v + OFF_NSECT);
    if (nsect > SCDB_BLOCK_MAX_SECTIONS) return SCDB_ERANGE;
    hl = scdb_block_header_len(nsect);
    if (r16(v + OFF_HDRLEN) != hl || r64(v + OFF_FLAGS) != 0) return SCDB_EFORMAT;
    plen = r64(v + OFF_PLEN);
    if (plen > SCDB_BLOCK_MAX_PAYLOAD) return SCDB_ETOOBIG;
    if (len < hl + plen) return SCDB_ETRUNC;
    if (len > hl + plen) return SCDB_ETOOBIG;
    memcpy(info->key.b, v + OFF_KEY, 16);
    memcpy(info->parent.b, v + OFF_PARENT, 16);
    memcpy(info->ns.b, v + OFF_NS, 16);
    info->block_index = r32(v + OFF_INDEX);
    info->token_count = r32(v + OFF_TOKENS);
    info->payload_dtype = r32(v + OFF_DTYPE);
    info->n_sections = nsect;
    info->payload_len = plen;
    for (uint32_t i = 0; i < nsect; i++)
        info->section_off[i] = r64(v + OFF_TABLE + 8 * i);
    if (check_sections(nsect, info->section_off, plen)) return SCDB_ERANGE;
    /* what encode refuses to write is no value: the chain's shape (a parent
     * on every block but the first) is what eviction and the lookup
     * index's rebuild at open rely on */
    if ((info->block_index == 0) != (scdb_key_is_zero(&info->parent) != 0)) return SCDB_EFORMAT;
    if (hdr_len) *hdr_len = hl;
    return SCDB_OK;
}

scdb_err scdb_block_value_decode(const void *value, size_t len,
                                 const scdb_key *expect_key,
                                 scdb_block_info *info, const void **payload)
{
    uint8_t sum[16];
    size_t hl;
    scdb_err e;

    if (!value || !info || !payload) return SCDB_EINVAL;
    if ((e = st_block_value_parse(value, len, info, &hl))) return e;
    value_checksum(value, len, sum);
    if (memcmp(sum, (const uint8_t *)value + OFF_CHECKSUM, 16)) return SCDB_ECHECKSUM;
    if (expect_key && memcmp(expect_key->b, info->key.b, 16)) return SCDB_EMISMATCH;
    *payload = (const uint8_t *)value + hl;
    return SCDB_OK;
}
