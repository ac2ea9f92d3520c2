/* payload_shape.c — the payload a trace replay stores per block, as a
 * 7B-class model's (bench.h, "payload shape"): one struct, its defaults
 * and the one parser of the options that set it, shared by `scdb bench
 * store` and `scdb bench cluster`. */
#include "bench.h"

#include <float.h>
#include <stdint.h>
#include <stdio.h>

#include "block_key.h"

void scdb_bench_shape_defaults(scdb_bench_shape *s)
{
    s->block_tokens = 512;
    s->layers = 32, s->rank_k = 128, s->rank_v = 128, s->kv_dim = 4096, s->elem_bytes = 2;
    s->codes_scale = 1.0 / 512, s->raw_scale = 1.0 / 512;
}

scdb_err scdb_bench_shape_parse(scdb_bench_shape *s, int c, const char *arg, char *why, size_t why_len)
{
    switch (c) {
    case SCDB_BENCH_SHAPE_BLOCK_TOKENS:
        return scdb_parse_u32("--block-tokens", arg, 1, SCDB_BLOCK_TOKENS_MAX, &s->block_tokens, why,
                              why_len);
    case SCDB_BENCH_SHAPE_LAYERS:
        return scdb_parse_u32("--layers", arg, 1, UINT32_MAX, &s->layers, why, why_len);
    case SCDB_BENCH_SHAPE_RANK_K:
        return scdb_parse_u32("--rank-k", arg, 0, UINT32_MAX, &s->rank_k, why, why_len);
    case SCDB_BENCH_SHAPE_RANK_V:
        return scdb_parse_u32("--rank-v", arg, 0, UINT32_MAX, &s->rank_v, why, why_len);
    case SCDB_BENCH_SHAPE_ELEM_BYTES:
        return scdb_parse_u32("--elem-bytes", arg, 1, UINT32_MAX, &s->elem_bytes, why, why_len);
    case SCDB_BENCH_SHAPE_CODES_SCALE:
        return scdb_parse_f64("--codes-scale", arg, DBL_MIN, DBL_MAX, &s->codes_scale, why, why_len);
    case SCDB_BENCH_SHAPE_KV_DIM:
        return scdb_parse_u32("--kv-dim", arg, 0, UINT32_MAX, &s->kv_dim, why, why_len);
    case SCDB_BENCH_SHAPE_RAW_SCALE:
        return scdb_parse_f64("--raw-scale", arg, DBL_MIN, DBL_MAX, &s->raw_scale, why, why_len);
    default:
        snprintf(why, why_len, "option %d is not a payload-shape option", c);
        return SCDB_EINVAL;
    }
}

uint64_t scdb_bench_shape_codes_per_token(const scdb_bench_shape *s)
{
    return (uint64_t)s->layers * ((uint64_t)s->rank_k + s->rank_v) * s->elem_bytes;
}

uint64_t scdb_bench_shape_raw_per_token(const scdb_bench_shape *s)
{
    return (uint64_t)s->layers * 2 * s->kv_dim * s->elem_bytes;
}
