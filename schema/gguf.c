/* gguf.c — the GGUF reader and writer (gguf.h; schema/FORMATS.md "GGUF").
 *
 * The reader walks the file once, checking every length against what is
 * left before it reads (overflow-safe: a length is compared with the bytes
 * remaining, never added to a position first), recording offsets; then it
 * copies keys, strings and names into one arena and builds sorted indexes
 * for the lookups.  The writer serialises the metadata into memory and
 * streams the tensor data after it. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "scdb_common.h"

#define KEY_ALIGNMENT "general.alignment"

/* ------------------------------------------------------------ types */

static const char *const TYPE_NAME[SCDB_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
static const size_t TYPE_SIZE[SCDB_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *scdb_gguf_type_name(int type)
{
    return type >= 0 && type < SCDB_GGUF_TYPE_COUNT ? TYPE_NAME[type] : NULL;
}

/* ggml's type traits of the pinned release (gguf-py GGML_QUANT_SIZES):
 * name, elements per block, bytes per block.  A NULL name: not a type. */
static const struct { const char *name; int block; size_t size; } GGML[SCDB_GGML_TYPE_COUNT] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},       [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},     [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},  [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},    [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},          [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},         [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},        [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},    [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},     [41] = {"Q1_0", 128, 18},
    [42] = {"Q2_0", 64, 18},
};

const char *scdb_ggml_type_name(int type)
{
    return type >= 0 && type < SCDB_GGML_TYPE_COUNT ? GGML[type].name : NULL;
}

int scdb_ggml_type_block(int type)
{
    return scdb_ggml_type_name(type) ? GGML[type].block : 0;
}

size_t scdb_ggml_type_size(int type)
{
    return scdb_ggml_type_name(type) ? GGML[type].size : 0;
}

/* Bytes of a tensor of `type` and extents ne[4] (each >= 0, ne[0] a
 * multiple of the block): 0 with *ok = 0 on overflow.  A zero extent
 * anywhere makes it empty. */
static uint64_t tensor_bytes(int type, const int64_t ne[4], int *ok)
{
    *ok = 1;
    for (int i = 0; i < 4; i++)
        if (ne[i] == 0) return 0;
    uint64_t n = (uint64_t)ne[0] / (uint64_t)GGML[type].block;
    if (n > UINT64_MAX / GGML[type].size) goto over;
    n *= GGML[type].size;
    uint64_t elems = (uint64_t)ne[0];
    for (int i = 1; i < 4; i++) {
        if ((uint64_t)ne[i] > (uint64_t)INT64_MAX / elems) goto over;   /* ggml: < INT64_MAX elements */
        elems *= (uint64_t)ne[i];
        if ((uint64_t)ne[i] > SIZE_MAX / n) goto over;
        n *= (uint64_t)ne[i];
    }
    if (elems >= (uint64_t)INT64_MAX) goto over;
    return n;
over:
    *ok = 0;
    return 0;
}

/* ------------------------------------------------------------ reader */

typedef struct rkv {
    scdb_gguf_kv kv;
    size_t key_off, key_len;       /* in the file */
    size_t val_off;                /* first value (after type, elem, count) */
} rkv;

typedef struct rten {
    scdb_gguf_tensor t;
    size_t name_off, name_len;
} rten;

struct scdb_gguf_file {
    void *map;                     /* our mmap, or NULL for a caller's buffer */
    size_t map_len;
    const uint8_t *base;
    size_t len;
    char *path;
    uint32_t version;
    size_t alignment, data_off;
    int n_kv, n_t;
    rkv *kv;                       /* file order */
    rten *t;                       /* file order */
    rkv **kv_by_key;               /* sorted by key */
    rten **t_by_name;              /* sorted by name */
    char *arena;                   /* keys, strings, names */
    const char **strs;             /* every string value, in KV order */
    uint64_t *str_lens;
};

typedef struct rd {
    const uint8_t *p;
    size_t len, pos;
    char *errbuf;
    size_t errlen;
} rd;

static scdb_err fail(rd *r, scdb_err e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static scdb_err fail(rd *r, scdb_err e, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    scdb_debug("gguf: %s", msg);
    if (r->errbuf && r->errlen) snprintf(r->errbuf, r->errlen, "%s", msg);
    return e;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static size_t left(const rd *r) { return r->len - r->pos; }

/* n bytes at the cursor, or SCDB_ETRUNC naming `what`. */
static scdb_err take(rd *r, size_t n, const char *what, uint64_t *v)
{
    if (n > left(r))
        return fail(r, SCDB_ETRUNC, "file ends at byte %zu inside %s (%zu more bytes needed at offset %zu)",
                    r->len, what, n, r->pos);
    if (v) *v = le(r->p + r->pos, (int)n);
    r->pos += n;
    return SCDB_OK;
}

/* A string: u64 length and its bytes; *off / *n where they are. */
static scdb_err take_str(rd *r, const char *what, size_t *off, size_t *n)
{
    uint64_t len = 0;
    scdb_err e = take(r, 8, what, &len);
    if (e) return e;
    if (len > SCDB_GGUF_MAX_STRING)
        return fail(r, SCDB_ETOOBIG, "%s: string length %" PRIu64 " exceeds the limit of %llu bytes", what, len,
                    SCDB_GGUF_MAX_STRING);
    if (len > left(r))
        return fail(r, SCDB_ETRUNC, "%s: string length %" PRIu64 " at offset %zu runs past the end of the "
                    "file (%zu bytes left)", what, len, r->pos - 8, left(r));
    *off = r->pos;
    *n = (size_t)len;
    r->pos += (size_t)len;
    return SCDB_OK;
}

static int has_nul(const uint8_t *p, size_t n) { return memchr(p, 0, n) != NULL; }

/* The value of one KV after its type: a scalar or an array. */
static scdb_err take_value(rd *r, rkv *k, const char *key, size_t *n_strings, size_t *str_bytes)
{
    uint64_t v = 0;
    char what[120];
    scdb_err e;
    snprintf(what, sizeof what, "the value of key '%.80s'", key);
    if ((e = take(r, 4, what, &v))) return e;
    int32_t type = (int32_t)(uint32_t)v;
    if (type < 0 || type >= SCDB_GGUF_TYPE_COUNT)
        return fail(r, SCDB_EFORMAT, "key '%.80s' has value type %d, not a GGUF type (0..12)", key, type);
    k->kv.type = k->kv.elem = (scdb_gguf_type)type;
    k->kv.n = 1;
    if (type == SCDB_GGUF_ARRAY) {
        if ((e = take(r, 4, what, &v))) return e;
        int32_t et = (int32_t)(uint32_t)v;
        if (et == SCDB_GGUF_ARRAY)
            return fail(r, SCDB_EFORMAT, "key '%.80s' is an array of arrays, which GGUF readers do not take", key);
        if (et < 0 || et >= SCDB_GGUF_TYPE_COUNT)
            return fail(r, SCDB_EFORMAT, "key '%.80s' is an array of type %d, not a GGUF type (0..12)", key, et);
        k->kv.elem = (scdb_gguf_type)et;
        if ((e = take(r, 8, what, &k->kv.n))) return e;
        if (k->kv.n > SCDB_GGUF_MAX_ARRAY)
            return fail(r, SCDB_ETOOBIG, "key '%.80s': array of %" PRIu64 " elements exceeds the limit of %llu", key,
                        k->kv.n, SCDB_GGUF_MAX_ARRAY);
    }
    k->val_off = r->pos;
    if (k->kv.elem == SCDB_GGUF_STRING) {
        if (k->kv.n > left(r) / 8)
            return fail(r, SCDB_ETRUNC, "key '%.80s': %" PRIu64 " strings cannot fit in the %zu bytes left", key,
                        k->kv.n, left(r));
        for (uint64_t i = 0; i < k->kv.n; i++) {
            size_t off, n;
            if ((e = take_str(r, what, &off, &n))) return e;
            *str_bytes += n + 1;
        }
        *n_strings += k->kv.n;
        return SCDB_OK;
    }
    size_t es = TYPE_SIZE[k->kv.elem];
    if (k->kv.n > left(r) / es)
        return fail(r, SCDB_ETRUNC, "key '%.80s': %" PRIu64 " values of %zu bytes run past the end of the file "
                    "(%zu bytes left at offset %zu)", key, k->kv.n, es, left(r), r->pos);
    k->kv.raw = r->p + r->pos;
    r->pos += (size_t)k->kv.n * es;
    return SCDB_OK;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(rkv *const *)a)->kv.key, (*(rkv *const *)b)->kv.key);
}

static int cmp_t(const void *a, const void *b)
{
    return strcmp((*(rten *const *)a)->t.name, (*(rten *const *)b)->t.name);
}

static int cmp_off(const void *a, const void *b)
{
    const scdb_gguf_tensor *x = &(*(rten *const *)a)->t, *y = &(*(rten *const *)b)->t;
    return x->offset != y->offset ? (x->offset > y->offset) - (x->offset < y->offset)
                                  : (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* Copy keys, strings and names into the arena and index them. */
static scdb_err build(scdb_gguf_file *f, size_t n_strings, size_t str_bytes, rd *r)
{
    size_t bytes = str_bytes;
    for (int i = 0; i < f->n_kv; i++) bytes += f->kv[i].key_len + 1;
    for (int i = 0; i < f->n_t; i++) bytes += f->t[i].name_len + 1;
    f->arena = malloc(bytes ? bytes : 1);
    f->strs = malloc((n_strings ? n_strings : 1) * sizeof *f->strs);
    f->str_lens = malloc((n_strings ? n_strings : 1) * sizeof *f->str_lens);
    f->kv_by_key = malloc((size_t)(f->n_kv ? f->n_kv : 1) * sizeof *f->kv_by_key);
    f->t_by_name = malloc((size_t)(f->n_t ? f->n_t : 1) * sizeof *f->t_by_name);
    if (!f->arena || !f->strs || !f->str_lens || !f->kv_by_key || !f->t_by_name)
        return fail(r, SCDB_ENOMEM, "out of memory");
    char *a = f->arena;
    size_t si = 0;
    for (int i = 0; i < f->n_kv; i++) {
        rkv *k = &f->kv[i];
        memcpy(a, f->base + k->key_off, k->key_len);
        a[k->key_len] = '\0';
        k->kv.key = a;
        a += k->key_len + 1;
        if (k->kv.elem != SCDB_GGUF_STRING) continue;
        k->kv.str = &f->strs[si];
        k->kv.str_len = &f->str_lens[si];
        size_t pos = k->val_off;
        for (uint64_t j = 0; j < k->kv.n; j++) {
            size_t n = (size_t)le(f->base + pos, 8);
            memcpy(a, f->base + pos + 8, n);
            a[n] = '\0';
            f->strs[si] = a;
            f->str_lens[si++] = n;
            a += n + 1;
            pos += 8 + n;
        }
    }
    for (int i = 0; i < f->n_t; i++) {
        rten *t = &f->t[i];
        memcpy(a, f->base + t->name_off, t->name_len);
        a[t->name_len] = '\0';
        t->t.name = a;
        a += t->name_len + 1;
    }
    for (int i = 0; i < f->n_kv; i++) f->kv_by_key[i] = &f->kv[i];
    qsort(f->kv_by_key, (size_t)f->n_kv, sizeof *f->kv_by_key, cmp_kv);
    for (int i = 1; i < f->n_kv; i++)
        if (!strcmp(f->kv_by_key[i]->kv.key, f->kv_by_key[i - 1]->kv.key))
            return fail(r, SCDB_EFORMAT, "key '%.80s' appears twice", f->kv_by_key[i]->kv.key);
    for (int i = 0; i < f->n_t; i++) f->t_by_name[i] = &f->t[i];
    qsort(f->t_by_name, (size_t)f->n_t, sizeof *f->t_by_name, cmp_t);
    for (int i = 1; i < f->n_t; i++)
        if (!strcmp(f->t_by_name[i]->t.name, f->t_by_name[i - 1]->t.name))
            return fail(r, SCDB_EFORMAT, "tensor '%s' appears twice", f->t_by_name[i]->t.name);
    return SCDB_OK;
}

/* Minimal bytes of one KV (key length, a 1-byte key, type, a 1-byte value)
 * and of one tensor info (name length, a 1-byte name, n_dims, type,
 * offset): a count that cannot fit is refused before anything is
 * allocated for it. */
#define MIN_KV 14
#define MIN_INFO 25

static scdb_err parse(scdb_gguf_file *f, rd *r)
{
    uint64_t v = 0, n_t = 0, n_kv = 0;
    scdb_err e;
    size_t n_strings = 0, str_bytes = 0;

    if (r->len < 4) {
        if (memcmp(r->p, "GGUF", r->len))
            return fail(r, SCDB_EFORMAT, "bad magic: not a GGUF file");
        return fail(r, SCDB_ETRUNC, "file of %zu bytes is shorter than the 4-byte magic", r->len);
    }
    if (memcmp(r->p, "GGUF", 4)) {
        char m[5];
        for (int i = 0; i < 4; i++) m[i] = r->p[i] >= 0x20 && r->p[i] < 0x7f ? (char)r->p[i] : '?';
        m[4] = '\0';
        return fail(r, SCDB_EFORMAT, "bad magic '%s': not a GGUF file (want 'GGUF')", m);
    }
    r->pos = 4;
    if ((e = take(r, 4, "the version", &v))) return e;
    f->version = (uint32_t)v;
    /* versions 2 and 3 share one layout (3 only marked big-endian files
     * possible); version 1 had 32-bit counts and lengths */
    if (f->version < SCDB_GGUF_MIN_VERSION || f->version > SCDB_GGUF_VERSION) {
        if (f->version && !(f->version & 0xffffu))
            return fail(r, SCDB_EUNSUPPORTED, "version field 0x%08" PRIx32 ": a big-endian GGUF file, which is not "
                        "supported", f->version);
        if (f->version == 1)
            return fail(r, SCDB_EUNSUPPORTED, "GGUF version 1 (32-bit counts, before August 2023) is not supported "
                        "(versions 2 and 3 are): convert the model again with a current llama.cpp");
        return fail(r, SCDB_EUNSUPPORTED, "GGUF version %" PRIu32 " is not supported (versions 2 and 3 are)",
                    f->version);
    }
    if ((e = take(r, 8, "the tensor count", &n_t)) || (e = take(r, 8, "the KV count", &n_kv))) return e;
    if ((int64_t)n_t < 0 || (int64_t)n_kv < 0)
        return fail(r, SCDB_EFORMAT, "negative count: %" PRId64 " tensors, %" PRId64 " KV pairs", (int64_t)n_t,
                    (int64_t)n_kv);
    if (n_kv > left(r) / MIN_KV)
        return fail(r, SCDB_ETRUNC, "%" PRIu64 " KV pairs cannot fit in the %zu bytes after the header", n_kv, left(r));
    if (n_t > left(r) / MIN_INFO)
        return fail(r, SCDB_ETRUNC, "%" PRIu64 " tensor infos cannot fit in the %zu bytes after the header", n_t,
                    left(r));
    f->kv = calloc((size_t)n_kv + 1, sizeof *f->kv);
    f->t = calloc((size_t)n_t + 1, sizeof *f->t);
    if (!f->kv || !f->t) return fail(r, SCDB_ENOMEM, "out of memory");

    for (uint64_t i = 0; i < n_kv; i++) {
        rkv *k = &f->kv[i];
        char what[64], key[96];
        snprintf(what, sizeof what, "the key of KV %" PRIu64, i);
        if ((e = take_str(r, what, &k->key_off, &k->key_len))) return e;
        if (!k->key_len) return fail(r, SCDB_EFORMAT, "KV %" PRIu64 " has an empty key", i);
        if (has_nul(r->p + k->key_off, k->key_len))
            return fail(r, SCDB_EFORMAT, "the key of KV %" PRIu64 " holds a NUL byte", i);
        snprintf(key, sizeof key, "%.*s", (int)(k->key_len < 90 ? k->key_len : 90), (const char *)r->p + k->key_off);
        if ((e = take_value(r, k, key, &n_strings, &str_bytes))) return e;
        f->n_kv++;
        if (k->key_len == strlen(KEY_ALIGNMENT) && !memcmp(r->p + k->key_off, KEY_ALIGNMENT, k->key_len)) {
            if (k->kv.type != SCDB_GGUF_U32)
                return fail(r, SCDB_EFORMAT, "key '" KEY_ALIGNMENT "' is %s, must be u32",
                            scdb_gguf_type_name(k->kv.type));
            uint32_t al = (uint32_t)le(k->kv.raw, 4);
            if (!al || (al & (al - 1)))
                return fail(r, SCDB_ERANGE, KEY_ALIGNMENT " = %" PRIu32 " is not a power of two", al);
        }
    }
    f->alignment = SCDB_GGUF_DEFAULT_ALIGNMENT;
    for (int i = 0; i < f->n_kv; i++)
        if (f->kv[i].key_len == strlen(KEY_ALIGNMENT) && !memcmp(r->p + f->kv[i].key_off, KEY_ALIGNMENT, f->kv[i].key_len))
            f->alignment = (size_t)le(f->kv[i].kv.raw, 4);

    for (uint64_t i = 0; i < n_t; i++) {
        rten *t = &f->t[i];
        char what[96], name[SCDB_GGUF_MAX_NAME + 1];
        snprintf(what, sizeof what, "the name of tensor %" PRIu64, i);
        if ((e = take_str(r, what, &t->name_off, &t->name_len))) return e;
        if (!t->name_len) return fail(r, SCDB_EFORMAT, "tensor %" PRIu64 " has an empty name", i);
        if (t->name_len >= SCDB_GGUF_MAX_NAME)
            return fail(r, SCDB_EFORMAT, "tensor %" PRIu64 ": name of %zu bytes, ggml allows at most %d", i,
                        t->name_len, SCDB_GGUF_MAX_NAME - 1);
        if (has_nul(r->p + t->name_off, t->name_len))
            return fail(r, SCDB_EFORMAT, "the name of tensor %" PRIu64 " holds a NUL byte", i);
        memcpy(name, r->p + t->name_off, t->name_len);
        name[t->name_len] = '\0';
        snprintf(what, sizeof what, "the info of tensor '%s'", name);
        if ((e = take(r, 4, what, &v))) return e;
        if (v > SCDB_GGUF_MAX_DIMS)
            return fail(r, SCDB_EFORMAT, "tensor '%s' has %" PRIu64 " dimensions, at most %d", name, v,
                        SCDB_GGUF_MAX_DIMS);
        t->t.n_dims = (int)v;
        for (int d = 0; d < SCDB_GGUF_MAX_DIMS; d++) {
            t->t.ne[d] = 1;
            if (d < t->t.n_dims) {
                if ((e = take(r, 8, what, &v))) return e;
                t->t.ne[d] = (int64_t)v;
                if (t->t.ne[d] < 0)
                    return fail(r, SCDB_EFORMAT, "tensor '%s': dimension %d is negative (%" PRId64 ")", name, d,
                                t->t.ne[d]);
            }
        }
        if ((e = take(r, 4, what, &v))) return e;
        t->t.type = (int32_t)(uint32_t)v;
        if ((e = take(r, 8, what, &t->t.offset))) return e;
        if (!scdb_ggml_type_name(t->t.type))
            return fail(r, SCDB_EDTYPE, "tensor '%s' has ggml type %d, which this release of ggml does not define",
                        name, t->t.type);
        if (t->t.ne[0] % GGML[t->t.type].block)
            return fail(r, SCDB_ESHAPE, "tensor '%s': %" PRId64 " elements per row is not a multiple of %s's block "
                        "of %d", name, t->t.ne[0], GGML[t->t.type].name, GGML[t->t.type].block);
        int ok;
        uint64_t nb = tensor_bytes(t->t.type, t->t.ne, &ok);
        if (!ok)
            return fail(r, SCDB_ESHAPE, "tensor '%s' of shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] "
                        "has an element count or byte size that overflows", name, t->t.ne[0], t->t.ne[1],
                        t->t.ne[2], t->t.ne[3]);
        t->t.nbytes = (size_t)nb;
        f->n_t++;
    }

    f->data_off = r->pos;
    if (f->n_t > 0) {
        size_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
        if (pad > left(r))
            return fail(r, SCDB_ETRUNC, "file ends at byte %zu, before its data section (offset %zu rounded up to "
                        "the alignment of %zu)", r->len, r->pos, f->alignment);
        f->data_off = r->pos + pad;
    }
    size_t data_len = r->len - f->data_off;
    for (int i = 0; i < f->n_t; i++) {
        scdb_gguf_tensor *t = &f->t[i].t;
        char name[SCDB_GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)f->t[i].name_len, (const char *)r->p + f->t[i].name_off);
        if (t->offset % f->alignment)
            return fail(r, SCDB_EFORMAT, "tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment "
                        "(%zu)", name, t->offset, f->alignment);
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            return fail(r, SCDB_ERANGE, "tensor '%s': %zu bytes at data offset %" PRIu64 " lie outside the file "
                        "(data section of %zu bytes at file offset %zu)", name, t->nbytes, t->offset, data_len,
                        f->data_off);
        t->data = r->p + f->data_off + t->offset;
    }
    if ((e = build(f, n_strings, str_bytes, r))) return e;
    if (f->n_t > 1) {
        rten **ord = malloc((size_t)f->n_t * sizeof *ord);
        if (!ord) return fail(r, SCDB_ENOMEM, "out of memory");
        for (int i = 0; i < f->n_t; i++) ord[i] = &f->t[i];
        qsort(ord, (size_t)f->n_t, sizeof *ord, cmp_off);
        const scdb_gguf_tensor *prev = NULL;
        for (int i = 0; i < f->n_t; i++) {
            const scdb_gguf_tensor *t = &ord[i]->t;
            if (!t->nbytes) continue;
            if (prev && t->offset < prev->offset + prev->nbytes) {
                e = fail(r, SCDB_EOVERLAP, "tensors '%s' and '%s' overlap (data offsets %" PRIu64 " and %" PRIu64 ")",
                         prev->name, t->name, prev->offset, t->offset);
                free(ord);
                return e;
            }
            prev = t;
        }
        free(ord);
    }
    return SCDB_OK;
}

scdb_err scdb_gguf_open_buffer(const void *buf, size_t len, scdb_gguf_file **out, char *errbuf,
                               size_t errlen)
{
    rd r = {.p = buf ? buf : (const void *)"", .len = len, .errbuf = errbuf, .errlen = errlen};
    if (errbuf && errlen) errbuf[0] = '\0';
    if (!out || (!buf && len)) return fail(&r, SCDB_EINVAL, "NULL argument");
    *out = NULL;
    scdb_gguf_file *f = calloc(1, sizeof *f);
    if (!f) return fail(&r, SCDB_ENOMEM, "out of memory");
    f->base = r.p;
    f->len = len;
    scdb_err e = parse(f, &r);
    if (e) {
        scdb_gguf_close(&f);
        return e;
    }
    *out = f;
    return SCDB_OK;
}

int scdb_gguf_is_file(const char *path)
{
    struct stat st;
    char m[4];
    if (!path || stat(path, &st) || !S_ISREG(st.st_mode)) return 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    size_t n = fread(m, 1, 4, fp);
    fclose(fp);
    return n == 4 && !memcmp(m, "GGUF", 4);
}

scdb_err scdb_gguf_open(const char *path, scdb_gguf_file **out, char *errbuf, size_t errlen)
{
    rd r = {.errbuf = errbuf, .errlen = errlen};
    scdb_gguf_file *f = NULL;
    scdb_err e;
    int fd;
    struct stat st;

    if (errbuf && errlen) errbuf[0] = '\0';
    if (!path || !out) return fail(&r, SCDB_EINVAL, "NULL argument");
    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return fail(&r, err == ENOENT || err == ENOTDIR ? SCDB_ENOTFOUND : SCDB_ESYS, "%.300s: %s", path,
                    err == ENOENT || err == ENOTDIR ? "no such file" : strerror(err));
    }
    if (fstat(fd, &st)) {
        e = fail(&r, SCDB_ESYS, "%.300s: fstat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        e = fail(&r, SCDB_EIO, "%.300s: not a regular file", path);
        goto fail;
    }
    f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        e = fail(&r, SCDB_ENOMEM, "out of memory");
        goto fail;
    }
    if (st.st_size > 0) {
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int err = errno;
            e = fail(&r, err == ENOMEM ? SCDB_ENOMEM : SCDB_ESYS, "%.300s: mmap: %s", path, strerror(err));
            goto fail;
        }
        f->map = map;
        f->map_len = (size_t)st.st_size;
    }
    close(fd);
    fd = -1;
    f->base = f->map ? f->map : (const void *)"";
    f->len = f->map_len;
    char msg[400] = "";
    r = (rd){.p = f->base, .len = f->len, .errbuf = msg, .errlen = sizeof msg};
    if ((e = parse(f, &r))) {
        r.errbuf = errbuf;
        r.errlen = errlen;
        fail(&r, e, "%.300s: %s", path, msg);
        goto fail;
    }
    *out = f;
    return SCDB_OK;
fail:
    if (fd >= 0) close(fd);
    scdb_gguf_close(&f);
    return e;
}

scdb_err scdb_gguf_peek_str(const char *path, const char *key, char *out, size_t cap)
{
    struct stat st;
    uint64_t v = 0, n_t = 0, n_kv = 0;
    scdb_err e = SCDB_ENOTFOUND;
    if (!path || !key || !out || !cap) return SCDB_EINVAL;
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ENOTDIR ? SCDB_ENOTFOUND : SCDB_ESYS;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < 24) {
        close(fd);
        return SCDB_EFORMAT;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return SCDB_ESYS;
    rd r = {.p = map, .len = (size_t)st.st_size, .pos = 4};
    if (memcmp(r.p, "GGUF", 4) || take(&r, 4, "", &v) || v < SCDB_GGUF_MIN_VERSION || v > SCDB_GGUF_VERSION || take(&r, 8, "", &n_t) ||
        take(&r, 8, "", &n_kv) || n_kv > left(&r) / MIN_KV) {
        e = SCDB_EFORMAT;
        goto done;
    }
    for (uint64_t i = 0; i < n_kv; i++) {     /* the reader's walk, nothing kept */
        rkv k;
        size_t n_strings = 0, str_bytes = 0;
        memset(&k, 0, sizeof k);
        if (take_str(&r, "", &k.key_off, &k.key_len) || take_value(&r, &k, "", &n_strings, &str_bytes)) {
            e = SCDB_EFORMAT;
            goto done;
        }
        if (k.key_len != strlen(key) || memcmp(r.p + k.key_off, key, k.key_len)) continue;
        if (k.kv.type != SCDB_GGUF_STRING) {
            e = SCDB_EFORMAT;
            goto done;
        }
        size_t n = (size_t)le(r.p + k.val_off, 8);
        if (n >= cap) n = cap - 1;
        memcpy(out, r.p + k.val_off + 8, n);
        out[n] = '\0';
        e = SCDB_OK;
        goto done;
    }
done:
    munmap(map, (size_t)st.st_size);
    return e;
}

void scdb_gguf_close(scdb_gguf_file **pf)
{
    if (!pf || !*pf) return;
    scdb_gguf_file *f = *pf;
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f->kv);
    free(f->t);
    free(f->kv_by_key);
    free(f->t_by_name);
    free(f->arena);
    free(f->strs);
    free(f->str_lens);
    free(f);
    *pf = NULL;
}

uint32_t scdb_gguf_version(const scdb_gguf_file *f) { return f ? f->version : 0; }
size_t scdb_gguf_alignment(const scdb_gguf_file *f) { return f ? f->alignment : 0; }
size_t scdb_gguf_data_offset(const scdb_gguf_file *f) { return f ? f->data_off : 0; }
const char *scdb_gguf_path(const scdb_gguf_file *f) { return f && f->path ? f->path : ""; }
int scdb_gguf_kv_count(const scdb_gguf_file *f) { return f ? f->n_kv : 0; }
int scdb_gguf_tensor_count(const scdb_gguf_file *f) { return f ? f->n_t : 0; }

const scdb_gguf_kv *scdb_gguf_kv_at(const scdb_gguf_file *f, int i)
{
    return f && i >= 0 && i < f->n_kv ? &f->kv[i].kv : NULL;
}

const scdb_gguf_tensor *scdb_gguf_tensor_at(const scdb_gguf_file *f, int i)
{
    return f && i >= 0 && i < f->n_t ? &f->t[i].t : NULL;
}

const scdb_gguf_kv *scdb_gguf_find_kv(const scdb_gguf_file *f, const char *key)
{
    if (!f || !key) return NULL;
    int lo = 0, hi = f->n_kv;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->kv_by_key[mid]->kv.key, key);
        if (!c) return &f->kv_by_key[mid]->kv;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const scdb_gguf_tensor *scdb_gguf_find_tensor(const scdb_gguf_file *f, const char *name)
{
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n_t;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->t_by_name[mid]->t.name, name);
        if (!c) return &f->t_by_name[mid]->t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ------------------------------------------------------------ values */

scdb_err scdb_gguf_kv_int(const scdb_gguf_kv *kv, uint64_t i, int64_t *out)
{
    if (!kv || !out || !kv->raw || i >= kv->n) return SCDB_EINVAL;
    const uint8_t *p = (const uint8_t *)kv->raw + i * TYPE_SIZE[kv->elem];
    switch (kv->elem) {
    case SCDB_GGUF_U8: case SCDB_GGUF_BOOL: *out = p[0]; return SCDB_OK;
    case SCDB_GGUF_I8: *out = (int8_t)p[0]; return SCDB_OK;
    case SCDB_GGUF_U16: *out = (int64_t)le(p, 2); return SCDB_OK;
    case SCDB_GGUF_I16: *out = (int16_t)le(p, 2); return SCDB_OK;
    case SCDB_GGUF_U32: *out = (int64_t)le(p, 4); return SCDB_OK;
    case SCDB_GGUF_I32: *out = (int32_t)(uint32_t)le(p, 4); return SCDB_OK;
    case SCDB_GGUF_I64: *out = (int64_t)le(p, 8); return SCDB_OK;
    case SCDB_GGUF_U64: {
        uint64_t v = le(p, 8);
        if (v > (uint64_t)INT64_MAX) return SCDB_ERANGE;
        *out = (int64_t)v;
        return SCDB_OK;
    }
    default: return SCDB_EFORMAT;
    }
}

scdb_err scdb_gguf_kv_float(const scdb_gguf_kv *kv, uint64_t i, double *out)
{
    if (!kv || !out || !kv->raw || i >= kv->n) return SCDB_EINVAL;
    const uint8_t *p = (const uint8_t *)kv->raw + i * TYPE_SIZE[kv->elem];
    if (kv->elem == SCDB_GGUF_F32) {
        uint32_t u = (uint32_t)le(p, 4);
        float x;
        memcpy(&x, &u, 4);
        *out = x;
        return SCDB_OK;
    }
    if (kv->elem == SCDB_GGUF_F64) {
        uint64_t u = le(p, 8);
        memcpy(out, &u, 8);
        return SCDB_OK;
    }
    int64_t v;
    scdb_err e = scdb_gguf_kv_int(kv, i, &v);
    if (!e) *out = (double)v;
    return e;
}

/* The scalar KV `key` of type `want` (SCDB_GGUF_TYPE_COUNT: any integer,
 * SCDB_GGUF_TYPE_COUNT + 1: any float). */
#define ANY_INT SCDB_GGUF_TYPE_COUNT
#define ANY_FLOAT (SCDB_GGUF_TYPE_COUNT + 1)
static scdb_err scalar(const scdb_gguf_file *f, const char *key, int want, const scdb_gguf_kv **out,
                       char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv = scdb_gguf_find_kv(f, key);
    if (!f || !key) return SCDB_EINVAL;
    if (!kv) {
        scdb_errf(errbuf, errlen, "%s%skey '%s' is missing", scdb_gguf_path(f), f->path ? ": " : "", key);
        return SCDB_ENOTFOUND;
    }
    int t = kv->type, ok;
    if (want == ANY_INT) ok = t <= SCDB_GGUF_I32 || t == SCDB_GGUF_BOOL || t == SCDB_GGUF_U64 || t == SCDB_GGUF_I64;
    else if (want == ANY_FLOAT) ok = t == SCDB_GGUF_F32 || t == SCDB_GGUF_F64;
    else ok = t == want;
    if (ok && t == SCDB_GGUF_F32 && want == ANY_INT) ok = 0;
    if (!ok) {
        const char *w = want == ANY_INT ? "an integer" : want == ANY_FLOAT ? "f32 or f64" : scdb_gguf_type_name(want);
        if (t == SCDB_GGUF_ARRAY)
            scdb_errf(errbuf, errlen, "%s%skey '%s' is an array of %s, want %s", scdb_gguf_path(f), f->path ? ": " : "",
                      key, scdb_gguf_type_name(kv->elem), w);
        else
            scdb_errf(errbuf, errlen, "%s%skey '%s' is %s, want %s", scdb_gguf_path(f), f->path ? ": " : "", key,
                      scdb_gguf_type_name(t), w);
        return SCDB_EFORMAT;
    }
    *out = kv;
    return SCDB_OK;
}

scdb_err scdb_gguf_get_u32(const scdb_gguf_file *f, const char *key, uint32_t *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_U32, &kv, errbuf, errlen);
    if (!e) *out = (uint32_t)le(kv->raw, 4);
    return e;
}

scdb_err scdb_gguf_get_i32(const scdb_gguf_file *f, const char *key, int32_t *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_I32, &kv, errbuf, errlen);
    if (!e) *out = (int32_t)(uint32_t)le(kv->raw, 4);
    return e;
}

scdb_err scdb_gguf_get_u64(const scdb_gguf_file *f, const char *key, uint64_t *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_U64, &kv, errbuf, errlen);
    if (!e) *out = le(kv->raw, 8);
    return e;
}

scdb_err scdb_gguf_get_f32(const scdb_gguf_file *f, const char *key, float *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_F32, &kv, errbuf, errlen);
    if (!e) {
        uint32_t u = (uint32_t)le(kv->raw, 4);
        memcpy(out, &u, 4);
    }
    return e;
}

scdb_err scdb_gguf_get_bool(const scdb_gguf_file *f, const char *key, int *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_BOOL, &kv, errbuf, errlen);
    if (!e) *out = ((const uint8_t *)kv->raw)[0] != 0;
    return e;
}

scdb_err scdb_gguf_get_str(const scdb_gguf_file *f, const char *key, const char **out, char *errbuf,
                           size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_STRING, &kv, errbuf, errlen);
    if (!e) *out = kv->str[0];
    return e;
}

scdb_err scdb_gguf_get_int(const scdb_gguf_file *f, const char *key, int64_t *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, ANY_INT, &kv, errbuf, errlen);
    if (!e && (e = scdb_gguf_kv_int(kv, 0, out)) == SCDB_ERANGE)
        scdb_errf(errbuf, errlen, "%s%skey '%s' = %" PRIu64 " is out of range", scdb_gguf_path(f),
                  f->path ? ": " : "", key, le(kv->raw, 8));
    return e;
}

scdb_err scdb_gguf_get_float(const scdb_gguf_file *f, const char *key, double *out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, ANY_FLOAT, &kv, errbuf, errlen);
    if (!e) e = scdb_gguf_kv_float(kv, 0, out);
    return e;
}

scdb_err scdb_gguf_get_arr(const scdb_gguf_file *f, const char *key, scdb_gguf_type elem,
                           const scdb_gguf_kv **out, char *errbuf, size_t errlen)
{
    const scdb_gguf_kv *kv;
    scdb_err e = scalar(f, key, SCDB_GGUF_ARRAY, &kv, errbuf, errlen);
    if (e) return e;
    if (elem != SCDB_GGUF_TYPE_COUNT && kv->elem != elem) {
        scdb_errf(errbuf, errlen, "%s%skey '%s' is an array of %s, want an array of %s", scdb_gguf_path(f),
                  f->path ? ": " : "", key, scdb_gguf_type_name(kv->elem), scdb_gguf_type_name(elem));
        return SCDB_EFORMAT;
    }
    *out = kv;
    return SCDB_OK;
}

static _Atomic(scdb_gguf_dequant_fn) g_dequant;

void scdb_gguf_set_dequantizer(scdb_gguf_dequant_fn fn) { atomic_store(&g_dequant, fn); }
int scdb_gguf_have_dequantizer(void) { return atomic_load(&g_dequant) != NULL; }

static int widened(int type) { return type == SCDB_GGML_F32 || type == SCDB_GGML_F16 || type == SCDB_GGML_BF16; }

/* a quantized type of the table (blocks) the installed dequantizer takes */
static int dequantizable(int type)
{
    scdb_gguf_dequant_fn fn = atomic_load(&g_dequant);
    return fn && scdb_ggml_type_block(type) > 1 && scdb_ggml_type_size(type) > 0 && fn(type, NULL, NULL, 0) == 0;
}

int scdb_gguf_type_to_f32_ok(int type) { return widened(type) || dequantizable(type); }

const char *scdb_gguf_type_why_not(int type)
{
    if (scdb_gguf_type_to_f32_ok(type)) return "";
    if (!atomic_load(&g_dequant))
        return "quantized types are read through llama.cpp's ggml, which this program does not have (scdb "
               "built without llama.cpp, or a library user that did not call scdb_gguf_ggml_install)";
    return "ggml has no dequantization for it";
}

scdb_err scdb_gguf_tensor_to_f32(const scdb_gguf_tensor *t, size_t first, size_t n, float *dst)
{
    if (!t || (!dst && n)) return SCDB_EINVAL;
    if (!widened(t->type)) {
        if (!dequantizable(t->type)) return SCDB_EDTYPE;
        size_t blk = (size_t)scdb_ggml_type_block(t->type), bs = scdb_ggml_type_size(t->type);
        if (first % blk || n % blk || first + n < first || (first + n) / blk > t->nbytes / bs) return SCDB_EINVAL;
        if (!n) return SCDB_OK;
        scdb_gguf_dequant_fn fn = atomic_load(&g_dequant);
        return fn(t->type, (const uint8_t *)t->data + first / blk * bs, dst, (int64_t)n) ? SCDB_EIO : SCDB_OK;
    }
    /* F32 / F16 / BF16: the one widening scdb has (st_widen.c) */
    scdb_st_tensor st = {.name = t->name,
                         .dtype = t->type == SCDB_GGML_F32 ? SCDB_F32 : t->type == SCDB_GGML_F16 ? SCDB_F16 : SCDB_BF16,
                         .ndim = 1,
                         .nbytes = t->nbytes,
                         .data = t->data};
    return scdb_st_to_f32(&st, first, n, dst);
}

/* ------------------------------------------------------------ writer */

typedef struct wkv {
    char *key;
    scdb_gguf_type type, elem;
    uint64_t n;
    uint8_t *raw;                  /* numeric values, little-endian */
    char **str;                    /* strings (may hold NUL bytes: str_len) */
    uint64_t *str_len;
} wkv;

typedef struct wten {
    char *name;
    int type, n_dims;
    int64_t ne[SCDB_GGUF_MAX_DIMS];
    size_t nbytes;
    const void *data;
} wten;

struct scdb_gguf_writer {
    wkv *kv;
    int n_kv, cap_kv;
    wten *t;
    int n_t, cap_t;
    size_t alignment;
};

scdb_err scdb_gguf_writer_new(scdb_gguf_writer **out)
{
    if (!out) return SCDB_EINVAL;
    *out = calloc(1, sizeof **out);
    if (!*out) return SCDB_ENOMEM;
    (*out)->alignment = SCDB_GGUF_DEFAULT_ALIGNMENT;
    return SCDB_OK;
}

static void wkv_clear(wkv *k)
{
    free(k->raw);
    if (k->str)
        for (uint64_t i = 0; i < k->n; i++) free(k->str[i]);
    free(k->str);
    free(k->str_len);
    k->raw = NULL;
    k->str = NULL;
    k->str_len = NULL;
}

void scdb_gguf_writer_free(scdb_gguf_writer **pw)
{
    if (!pw || !*pw) return;
    scdb_gguf_writer *w = *pw;
    for (int i = 0; i < w->n_kv; i++) {
        wkv_clear(&w->kv[i]);
        free(w->kv[i].key);
    }
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
    *pw = NULL;
}

/* The slot of key (existing or new); its old value is cleared. */
static scdb_err kv_slot(scdb_gguf_writer *w, const char *key, wkv **out)
{
    if (!w || !key || !*key) return SCDB_EINVAL;
    for (int i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            wkv_clear(&w->kv[i]);
            *out = &w->kv[i];
            return SCDB_OK;
        }
    if (w->n_kv == w->cap_kv) {
        int nc = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *g = realloc(w->kv, (size_t)nc * sizeof *g);
        if (!g) return SCDB_ENOMEM;
        w->kv = g;
        w->cap_kv = nc;
    }
    wkv *k = &w->kv[w->n_kv];
    memset(k, 0, sizeof *k);
    if (!(k->key = strdup(key))) return SCDB_ENOMEM;
    w->n_kv++;
    *out = k;
    return SCDB_OK;
}

/* A numeric scalar or array; general.alignment checked and taken. */
static scdb_err set_num(scdb_gguf_writer *w, const char *key, scdb_gguf_type type, scdb_gguf_type elem,
                        const void *data, size_t n)
{
    if (!w || !key || elem < 0 || elem >= SCDB_GGUF_TYPE_COUNT || !TYPE_SIZE[elem] || (!data && n))
        return SCDB_EINVAL;
    if (!strcmp(key, KEY_ALIGNMENT)) {
        uint32_t al;
        if (type != SCDB_GGUF_U32) return SCDB_EINVAL;
        memcpy(&al, data, 4);
        if (!al || (al & (al - 1))) return SCDB_EINVAL;
    }
    size_t bytes = n * TYPE_SIZE[elem];
    uint8_t *raw = malloc(bytes ? bytes : 1);
    if (!raw) return SCDB_ENOMEM;
    const uint8_t *src = data;
    size_t es = TYPE_SIZE[elem];
    for (size_t i = 0; i < n; i++) {      /* host values -> little-endian */
        uint64_t v = 0;
        if (es == 1) v = src[i];
        else if (es == 2) { uint16_t x; memcpy(&x, src + 2 * i, 2); v = x; }
        else if (es == 4) { uint32_t x; memcpy(&x, src + 4 * i, 4); v = x; }
        else memcpy(&v, src + 8 * i, 8);
        for (size_t b = 0; b < es; b++) raw[i * es + b] = (uint8_t)(v >> (8 * b));
    }
    wkv *k;
    scdb_err e = kv_slot(w, key, &k);
    if (e) { free(raw); return e; }
    k->type = type;
    k->elem = elem;
    k->n = n;
    k->raw = raw;
    if (!strcmp(key, KEY_ALIGNMENT)) w->alignment = (size_t)le(raw, 4);
    return SCDB_OK;
}

scdb_err scdb_gguf_set_u32(scdb_gguf_writer *w, const char *key, uint32_t v) { return set_num(w, key, SCDB_GGUF_U32, SCDB_GGUF_U32, &v, 1); }
scdb_err scdb_gguf_set_i32(scdb_gguf_writer *w, const char *key, int32_t v) { return set_num(w, key, SCDB_GGUF_I32, SCDB_GGUF_I32, &v, 1); }
scdb_err scdb_gguf_set_u64(scdb_gguf_writer *w, const char *key, uint64_t v) { return set_num(w, key, SCDB_GGUF_U64, SCDB_GGUF_U64, &v, 1); }
scdb_err scdb_gguf_set_f32(scdb_gguf_writer *w, const char *key, float v) { return set_num(w, key, SCDB_GGUF_F32, SCDB_GGUF_F32, &v, 1); }
scdb_err scdb_gguf_set_f64(scdb_gguf_writer *w, const char *key, double v) { return set_num(w, key, SCDB_GGUF_F64, SCDB_GGUF_F64, &v, 1); }

scdb_err scdb_gguf_set_bool(scdb_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return set_num(w, key, SCDB_GGUF_BOOL, SCDB_GGUF_BOOL, &b, 1);
}

scdb_err scdb_gguf_set_arr(scdb_gguf_writer *w, const char *key, scdb_gguf_type elem, const void *data, size_t n)
{
    if (key && !strcmp(key, KEY_ALIGNMENT)) return SCDB_EINVAL;
    return set_num(w, key, SCDB_GGUF_ARRAY, elem, data, n);
}

/* n strings (lens NULL: C strings), copied. */
static scdb_err set_strs(scdb_gguf_writer *w, const char *key, scdb_gguf_type type, const char *const *v,
                         const uint64_t *lens, size_t n)
{
    if (!w || !key || (!v && n) || !strcmp(key, KEY_ALIGNMENT)) return SCDB_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!v[i] || (lens && lens[i] > SCDB_GGUF_MAX_STRING)) return SCDB_EINVAL;
    char **s = calloc(n ? n : 1, sizeof *s);
    uint64_t *l = malloc((n ? n : 1) * sizeof *l);
    scdb_err e = s && l ? SCDB_OK : SCDB_ENOMEM;
    for (size_t i = 0; !e && i < n; i++) {
        l[i] = lens ? lens[i] : strlen(v[i]);
        if (!(s[i] = malloc((size_t)l[i] + 1))) e = SCDB_ENOMEM;
        else {
            memcpy(s[i], v[i], (size_t)l[i]);
            s[i][l[i]] = '\0';
        }
    }
    wkv *k = NULL;
    if (!e) e = kv_slot(w, key, &k);
    if (e) {
        for (size_t j = 0; s && j < n; j++) free(s[j]);
        free(s);
        free(l);
        return e;
    }
    k->type = type;
    k->elem = SCDB_GGUF_STRING;
    k->n = n;
    k->str = s;
    k->str_len = l;
    return SCDB_OK;
}

scdb_err scdb_gguf_set_str(scdb_gguf_writer *w, const char *key, const char *v)
{
    if (!v) return SCDB_EINVAL;
    return set_strs(w, key, SCDB_GGUF_STRING, &v, NULL, 1);
}

scdb_err scdb_gguf_set_arr_str(scdb_gguf_writer *w, const char *key, const char *const *v, size_t n)
{
    return set_strs(w, key, SCDB_GGUF_ARRAY, v, NULL, n);
}

scdb_err scdb_gguf_set_kv(scdb_gguf_writer *w, const scdb_gguf_kv *kv)
{
    if (!w || !kv || !kv->key || kv->elem < 0 || kv->elem >= SCDB_GGUF_TYPE_COUNT || kv->elem == SCDB_GGUF_ARRAY)
        return SCDB_EINVAL;
    if (kv->elem == SCDB_GGUF_STRING) {
        if (kv->type != SCDB_GGUF_ARRAY && kv->n != 1) return SCDB_EINVAL;
        return set_strs(w, kv->key, kv->type, kv->str, kv->str_len, (size_t)kv->n);
    }
    if (kv->type != SCDB_GGUF_ARRAY && (kv->type != kv->elem || kv->n != 1)) return SCDB_EINVAL;
    return set_num(w, kv->key, kv->type, kv->elem, kv->raw, (size_t)kv->n);
}

scdb_err scdb_gguf_add_tensor(scdb_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                              const void *data)
{
    if (!w || !name || !*name || strlen(name) >= SCDB_GGUF_MAX_NAME) return SCDB_EINVAL;
    for (int i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return SCDB_EINVAL;
    if (!scdb_ggml_type_name(type)) return SCDB_EDTYPE;
    if (n_dims < 0 || n_dims > SCDB_GGUF_MAX_DIMS || (n_dims && !ne)) return SCDB_ESHAPE;
    wten t = {.type = type, .n_dims = n_dims, .data = data};
    for (int d = 0; d < SCDB_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0) return SCDB_ESHAPE;
    }
    if (t.ne[0] % GGML[type].block) return SCDB_ESHAPE;
    int ok;
    t.nbytes = (size_t)tensor_bytes(type, t.ne, &ok);
    if (!ok) return SCDB_ESHAPE;
    if (t.nbytes && !data) return SCDB_EINVAL;
    if (w->n_t == w->cap_t) {
        int nc = w->cap_t ? 2 * w->cap_t : 64;
        wten *g = realloc(w->t, (size_t)nc * sizeof *g);
        if (!g) return SCDB_ENOMEM;
        w->t = g;
        w->cap_t = nc;
    }
    if (!(t.name = strdup(name))) return SCDB_ENOMEM;
    w->t[w->n_t++] = t;
    return SCDB_OK;
}

/* A growable byte buffer for the metadata. */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *g = realloc(b->p, nc);
        if (!g) { b->oom = 1; return; }
        b->p = g;
        b->cap = nc;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(buf *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)n);
}

static void put_str(buf *b, const char *s, size_t n)
{
    put_le(b, n, 8);
    put(b, s, n);
}

static size_t pad_to(size_t x, size_t a) { return (a - x % a) % a; }

/* Header, KVs, tensor infos and the padding before the data section. */
static scdb_err meta(const scdb_gguf_writer *w, buf *b, size_t *data_bytes)
{
    static const uint8_t zero[64] = {0};
    put(b, "GGUF", 4);
    put_le(b, SCDB_GGUF_VERSION, 4);
    put_le(b, (uint64_t)w->n_t, 8);
    put_le(b, (uint64_t)w->n_kv, 8);
    for (int i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kv[i];
        put_str(b, k->key, strlen(k->key));
        put_le(b, (uint64_t)k->type, 4);
        if (k->type == SCDB_GGUF_ARRAY) {
            put_le(b, (uint64_t)k->elem, 4);
            put_le(b, k->n, 8);
        }
        if (k->elem == SCDB_GGUF_STRING)
            for (uint64_t j = 0; j < k->n; j++) put_str(b, k->str[j], (size_t)k->str_len[j]);
        else
            put(b, k->raw, (size_t)k->n * TYPE_SIZE[k->elem]);
    }
    size_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        const wten *t = &w->t[i];
        put_str(b, t->name, strlen(t->name));
        put_le(b, (uint64_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) put_le(b, (uint64_t)t->ne[d], 8);
        put_le(b, (uint64_t)t->type, 4);
        put_le(b, off, 8);
        off += t->nbytes + pad_to(t->nbytes, w->alignment);
    }
    if (w->n_t)
        for (size_t p = pad_to(b->n, w->alignment); p > 0;) {
            size_t k = p < sizeof zero ? p : sizeof zero;
            put(b, zero, k);
            p -= k;
        }
    *data_bytes = off;
    return b->oom ? SCDB_ENOMEM : SCDB_OK;
}

scdb_err scdb_gguf_writer_image(scdb_gguf_writer *w, uint8_t **out, size_t *len)
{
    static const uint8_t zero[64] = {0};
    if (!w || !out || !len) return SCDB_EINVAL;
    buf b = {0};
    size_t data;
    scdb_err e = meta(w, &b, &data);
    for (int i = 0; !e && i < w->n_t; i++) {
        put(&b, w->t[i].data, w->t[i].nbytes);
        for (size_t p = pad_to(w->t[i].nbytes, w->alignment); p > 0;) {
            size_t k = p < sizeof zero ? p : sizeof zero;
            put(&b, zero, k);
            p -= k;
        }
        if (b.oom) e = SCDB_ENOMEM;
    }
    if (e) {
        free(b.p);
        return e;
    }
    *out = b.p;
    *len = b.n;
    return SCDB_OK;
}

static scdb_err write_all(int fd, const void *p, size_t n)
{
    const uint8_t *c = p;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t k = write(fd, c, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return SCDB_EIO;
        c += k;
        n -= (size_t)k;
    }
    return SCDB_OK;
}

scdb_err scdb_gguf_writer_write(scdb_gguf_writer *w, const char *path)
{
    static const uint8_t zero[4096] = {0};
    buf b = {0};
    char *tmp = NULL, *dir = NULL;
    int fd = -1, tmp_made = 0;
    size_t data;
    scdb_err e;

    if (!w || !path || !*path) return SCDB_EINVAL;
    if ((e = meta(w, &b, &data))) goto out;
    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    dir = malloc(plen + 2);
    if (!tmp || !dir) { e = SCDB_ENOMEM; goto out; }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, plen + 2, ".");
    else if (slash == path) snprintf(dir, plen + 2, "/");
    else { memcpy(dir, path, (size_t)(slash - path)); dir[slash - path] = '\0'; }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int err = errno;
        scdb_error("gguf: open %s: %s", tmp, strerror(err));
        e = err == ENOENT || err == ENOTDIR ? SCDB_ENOTFOUND : SCDB_EIO;
        goto out;
    }
    tmp_made = 1;
    e = write_all(fd, b.p, b.n);
    for (int i = 0; !e && i < w->n_t; i++) {
        if (w->t[i].nbytes) e = write_all(fd, w->t[i].data, w->t[i].nbytes);
        size_t p = pad_to(w->t[i].nbytes, w->alignment);
        while (!e && p > 0) {
            size_t k = p < sizeof zero ? p : sizeof zero;
            e = write_all(fd, zero, k);
            p -= k;
        }
    }
    if (e) {
        scdb_error("gguf: write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (fsync(fd)) {
        scdb_error("gguf: fsync %s: %s", tmp, strerror(errno));
        e = SCDB_EIO;
        goto out;
    }
    int c = close(fd);
    fd = -1;
    if (c) {
        scdb_error("gguf: close %s: %s", tmp, strerror(errno));
        e = SCDB_EIO;
        goto out;
    }
    if (rename(tmp, path)) {
        scdb_error("gguf: rename %s -> %s: %s", tmp, path, strerror(errno));
        e = SCDB_EIO;
        goto out;
    }
    tmp_made = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd)) scdb_warn("gguf: cannot fsync directory %s: %s", dir, strerror(errno));
    if (dfd >= 0) close(dfd);
out:
    if (fd >= 0) close(fd);
    if (tmp_made) unlink(tmp);
    free(tmp);
    free(dir);
    free(b.p);
    return e;
}
