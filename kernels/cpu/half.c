/* half.c — f16 and bf16 <-> f32 conversion (round to nearest even), and the
 * finiteness scan of f32/f16/bf16 buffers. */
#include "kernels.h"

#include <math.h>
#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t scdb_f32_to_f16(float f)
{
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;

    if (absx >= 0x7f800000u)                      /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u)                      /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {                     /* below 2^-14: subnormal */
        if (absx < 0x33000000u)                   /* below 2^-25: zero */
            return (uint16_t)sign;
        uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(absx >> 23);      /* 14..24 */
        uint32_t v = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (v & 1u))) v++;
        return (uint16_t)(sign | v);
    }
    uint32_t v = ((absx >> 13) - (112u << 10));   /* rebias 127 -> 15 */
    uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) v++;
    return (uint16_t)(sign | v);
}

float scdb_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0) {
        if (mant == 0) return u2f(sign);
        /* subnormal: mant * 2^-24 */
        float f = (float)mant * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (mant << 13));
    return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t scdb_f32_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep it quiet NaN */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float scdb_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

void scdb_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = scdb_f32_to_f16(src[i]);
}

void scdb_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = scdb_f16_to_f32(src[i]);
}

void scdb_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = scdb_f32_to_bf16(src[i]);
}

void scdb_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = scdb_bf16_to_f32(src[i]);
}

int scdb_k_find_nonfinite(const void *x, size_t bytes, scdb_dtype dt, size_t *first)
{
    /* x may sit at any address (a message frame inside a receive buffer):
     * every load goes through memcpy, which compiles to a plain unaligned
     * load; a typed pointer would let the compiler assume alignment */
    const unsigned char *p = x;
    size_t n;
    if (dt == SCDB_F32) {
        n = bytes / sizeof(float);
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, p + i * sizeof f, sizeof f);
            if (!isfinite(f)) {
                if (first) *first = i;
                return 1;
            }
        }
        return 0;
    }
    if (dt == SCDB_F16 || dt == SCDB_BF16) {
        uint16_t exp = dt == SCDB_F16 ? 0x7c00 : 0x7f80;   /* all-ones exponent */
        n = bytes / sizeof(uint16_t);
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + i * sizeof h, sizeof h);
            if ((h & exp) == exp) {
                if (first) *first = i;
                return 1;
            }
        }
    }
    return 0;
}
