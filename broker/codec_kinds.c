/* codec_kinds.c — the codebook kinds the broker can serve: one row each.
 *
 * The SCD codec (codec/codec.h) plugs in as one more row: open_codebook
 * loads the codebook file (namespace = scdb_ns_make(codebook id, F16,
 * SCDB_CODEC_VERSION), token_bytes = scdb_codebook_token_bytes), and
 * new_decoder loads the pair file against it and returns a decoder whose
 * decode() calls scdb_pair_decode at positions p0 .. p0 + n - 1. */
#include "broker_int.h"

#include <string.h>


static const scdb_codec_kind kinds[] = {
    {"raw", bk_raw_open_codebook, bk_raw_new_decoder},
    {"scd", bk_scd_open_codebook, bk_scd_new_decoder},
};

const scdb_codec_kind *scdb_codec_kind_find(const char *name)
{
    for (size_t i = 0; i < SCDB_ARRAY_LEN(kinds); i++)
        if (!strcmp(kinds[i].name, name)) return &kinds[i];
    return NULL;
}
