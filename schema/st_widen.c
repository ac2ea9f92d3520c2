/* st_widen.c — a safetensors tensor's values as f32 (safetensors.h), the
 * one widening the weights fingerprint and the adapter merge share. */
#include "safetensors.h"

#include <string.h>

static uint32_t widen_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 31) return sign | 0x7f800000u | (mant << 13);
    if (exp) return sign | ((exp + 112u) << 23) | (mant << 13);
    if (!mant) return sign;
    uint32_t e = 113;                           /* normalise the subnormal: mant 2^-24 */
    while (!(mant & 0x400u)) { mant <<= 1; e--; }
    return sign | (e << 23) | ((mant & 0x3ffu) << 13);
}

scdb_err scdb_st_to_f32(const scdb_st_tensor *t, size_t first, size_t n, float *dst)
{
    if (!t || (!dst && n)) return SCDB_EINVAL;
    size_t es = scdb_dtype_size(t->dtype);
    if (t->dtype != SCDB_F32 && t->dtype != SCDB_F16 && t->dtype != SCDB_BF16) return SCDB_EDTYPE;
    if (first > t->nbytes / es || n > t->nbytes / es - first) return SCDB_EINVAL;
    const uint8_t *src = (const uint8_t *)t->data + first * es;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        if (t->dtype == SCDB_F32) {
            u = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 | (uint32_t)src[4 * i + 2] << 16 |
                (uint32_t)src[4 * i + 3] << 24;
        } else {
            uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            u = t->dtype == SCDB_BF16 ? (uint32_t)h << 16 : widen_f16(h);
        }
        memcpy(&dst[i], &u, sizeof u);
    }
    return SCDB_OK;
}
