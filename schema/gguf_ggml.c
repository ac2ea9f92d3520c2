/* gguf_ggml.c — ggml's dequantization for scdb's GGUF reader (gguf_ggml.h). */
#include "gguf_ggml.h"

#include <ggml.h>

#include "gguf.h"

static int ggml_to_f32(int type, const void *src, float *dst, int64_t n)
{
    if (type < 0 || type >= GGML_TYPE_COUNT)
        return -1;
    const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)type);
    /* a quantized type of the same block geometry as scdb's table */
    if (!tr || !tr->is_quantized || !tr->to_float || tr->blck_size != scdb_ggml_type_block(type) ||
        tr->type_size != scdb_ggml_type_size(type))
        return -1;
    if (n == 0)
        return 0;
    if (!src || !dst || n % tr->blck_size)
        return -1;
    tr->to_float(src, dst, n);
    return 0;
}

void scdb_gguf_ggml_install(void) { scdb_gguf_set_dequantizer(ggml_to_f32); }
