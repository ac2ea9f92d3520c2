/*
 * gguf.h — read and write GGUF files (version 3, little-endian), the model
 * container of llama.cpp and ggml, zero-copy on the read side.
 *
 * File layout (every integer little-endian; schema/FORMATS.md, "GGUF", has
 * the rules the reader enforces and the error each violation returns):
 *
 *   +-------+-----+-----------+-------+---------------+----------------+-----+-------------+
 *   | GGUF  | u32 | i64       | i64   | n_kv x KV     | n_tensors x    | pad | data        |
 *   | magic | ver | n_tensors | n_kv  |               | tensor info    |     | section     |
 *   +-------+-----+-----------+-------+---------------+----------------+-----+-------------+
 *   0       4     8           16      24                                     ^ aligned
 *
 *   string  = u64 length, then that many bytes (no NUL)
 *   KV      = string key, i32 value type, value
 *   value   = u8 i8 u16 i16 u32 i32 f32 bool(1 byte) string u64 i64 f64,
 *             or array: i32 element type, u64 count, count values
 *             (arrays of arrays are not written by ggml and are refused)
 *   tensor info = string name, u32 n_dims (<= 4), i64 ne[n_dims]
 *             (ne[0] is the innermost, contiguous dimension: a PyTorch
 *             [out, in] weight is ne = {in, out}), i32 ggml type, u64 offset
 *             (relative to the data section, a multiple of the alignment)
 *
 * The alignment is the u32 value of "general.alignment" when present (a
 * power of two), else 32.  The data section starts at the end of the tensor
 * infos rounded up to the alignment (when there is at least one tensor).
 * A tensor's bytes: ne[0] / block_size blocks of type_size bytes per row,
 * rows contiguous (scdb_ggml_type_block / _size give both for every type
 * ggml defines, quantized ones included, so a quantized file is read and
 * checked; turning its values into floats is another matter, see
 * scdb_gguf_tensor_to_f32).
 *
 * Read from llama.cpp release v0.4.0 (node-llama-cpp 3.21.1):
 * ggml/include/gguf.h, ggml/src/gguf.cpp and gguf-py.  Where this reader is
 * stricter than ggml's it says so in FORMATS.md (version 2 is refused; a
 * key or tensor name holding a NUL byte is refused) and where it is looser
 * (gaps between tensors are allowed, overlaps are not).
 *
 * Reading.  scdb_gguf_open() mmaps the file read-only;
 * scdb_gguf_open_buffer() validates a caller's buffer in place.  Keys,
 * string values and tensor names are copied into one arena of C strings;
 * numeric values and tensor data are not copied (`raw` and `data` point into
 * the mapping, aligned only as the file made them).  Validation is
 * all-or-nothing: a handle is returned only for a file that passed every
 * check, and every tensor's [data, data + nbytes) lies inside the file.
 *
 * Writing.  A writer collects KV pairs (copied) and tensors (name copied,
 * data NOT copied: it must stay alive until the write), then writes
 * path.tmp, fsyncs it, renames it over path and fsyncs the directory, as
 * the safetensors writer does.  Tensors are laid out in the order added,
 * each at an offset that is a multiple of the alignment and padded with
 * zero bytes to the next one, exactly as ggml's gguf_write_to_file lays
 * them out (llama.cpp's reader requires that contiguity).
 *
 * Caveats: a handle is immutable after open and may be read by any number
 * of threads; a writer is not thread-safe.  A file truncated by another
 * process while mapped raises SIGBUS when its data is touched (files are
 * replaced by rename, never rewritten in place).
 */
#ifndef SCDB_GGUF_H
#define SCDB_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_err.h"

#define SCDB_GGUF_VERSION 3                   /* what the writer writes */
#define SCDB_GGUF_MIN_VERSION 2               /* read: 2 and 3 (the same layout, 64-bit counts) */
#define SCDB_GGUF_DEFAULT_ALIGNMENT 32
#define SCDB_GGUF_MAX_DIMS 4
#define SCDB_GGUF_MAX_NAME 64                 /* a tensor name is < 64 bytes (GGML_MAX_NAME) */
#define SCDB_GGUF_MAX_STRING (1ull << 30)     /* bytes in one string (ggml's limit) */
#define SCDB_GGUF_MAX_ARRAY (1ull << 30)      /* elements in one array (ggml's limit) */

/* KV value types, as stored (i32). */
typedef enum scdb_gguf_type {
    SCDB_GGUF_U8 = 0, SCDB_GGUF_I8 = 1, SCDB_GGUF_U16 = 2, SCDB_GGUF_I16 = 3,
    SCDB_GGUF_U32 = 4, SCDB_GGUF_I32 = 5, SCDB_GGUF_F32 = 6, SCDB_GGUF_BOOL = 7,
    SCDB_GGUF_STRING = 8, SCDB_GGUF_ARRAY = 9, SCDB_GGUF_U64 = 10, SCDB_GGUF_I64 = 11,
    SCDB_GGUF_F64 = 12,
    SCDB_GGUF_TYPE_COUNT
} scdb_gguf_type;

/* ggml's name of a value type ("u32", "str", "arr"); NULL if invalid. */
const char *scdb_gguf_type_name(int type);

/* ggml tensor types (enum ggml_type of the pinned release; 4, 5, 31-33 and
 * 36-38 were removed from ggml and are unknown here). */
enum {
    SCDB_GGML_F32 = 0, SCDB_GGML_F16 = 1, SCDB_GGML_Q4_0 = 2, SCDB_GGML_Q4_1 = 3,
    SCDB_GGML_Q5_0 = 6, SCDB_GGML_Q5_1 = 7, SCDB_GGML_Q8_0 = 8, SCDB_GGML_Q8_1 = 9,
    SCDB_GGML_Q2_K = 10, SCDB_GGML_Q3_K = 11, SCDB_GGML_Q4_K = 12, SCDB_GGML_Q5_K = 13,
    SCDB_GGML_Q6_K = 14, SCDB_GGML_Q8_K = 15, SCDB_GGML_I8 = 24, SCDB_GGML_I16 = 25,
    SCDB_GGML_I32 = 26, SCDB_GGML_I64 = 27, SCDB_GGML_F64 = 28, SCDB_GGML_BF16 = 30,
    SCDB_GGML_TYPE_COUNT = 43
};

/* ggml's name of a tensor type ("F32", "Q4_K", "BF16"); NULL if unknown. */
const char *scdb_ggml_type_name(int type);
/* Elements per block and bytes per block of a tensor type; 0 if unknown. */
int scdb_ggml_type_block(int type);
size_t scdb_ggml_type_size(int type);

/* One key-value pair, as read.  Numeric values (a scalar, or an array's
 * elements) are `n` little-endian values of `elem` at `raw`, inside the
 * file (possibly unaligned: use the typed getters or memcpy).  Strings
 * (a STRING scalar, n == 1, or an array of strings) are copied: str[i] is
 * NUL-terminated, str_len[i] its length in the file (a string may hold NUL
 * bytes, so str_len can exceed strlen). */
typedef struct scdb_gguf_kv {
    const char *key;
    scdb_gguf_type type;       /* SCDB_GGUF_ARRAY for an array */
    scdb_gguf_type elem;       /* an array's element type; == type for a scalar */
    uint64_t n;                /* an array's element count; 1 for a scalar */
    const void *raw;           /* numeric values; NULL for strings */
    const char *const *str;    /* strings; NULL for numeric values */
    const uint64_t *str_len;
} scdb_gguf_kv;

typedef struct scdb_gguf_tensor {
    const char *name;          /* owned by the file handle */
    int type;                  /* ggml type */
    int n_dims;                /* 0..4 as written */
    int64_t ne[SCDB_GGUF_MAX_DIMS];   /* ggml order (ne[0] innermost); 1 past n_dims */
    uint64_t offset;           /* from the data section's start */
    size_t nbytes;
    const void *data;          /* inside the mapping / buffer (zero-copy) */
} scdb_gguf_tensor;

typedef struct scdb_gguf_file scdb_gguf_file;   /* opaque */

/* ------------------------------------------------------------------ reader */

/* 1 if path is a regular file whose first four bytes are "GGUF" (what
 * every loader uses to tell a GGUF file from a model directory). */
int scdb_gguf_is_file(const char *path);

/* Map `path` read-only and validate it.  errbuf (may be NULL) receives a
 * message naming the file and the key, tensor or offset at fault.
 * Errors: SCDB_EINVAL (NULL path/out), SCDB_ENOTFOUND (no such file),
 * SCDB_EIO (not a regular file), SCDB_ESYS (open/fstat/mmap failed),
 * SCDB_ENOMEM, and every error of scdb_gguf_open_buffer(). */
scdb_err scdb_gguf_open(const char *path, scdb_gguf_file **out, char *errbuf, size_t errlen);

/* Validate a file image held in a caller's buffer; no copy of the data is
 * made, so the buffer must outlive the handle.
 * Errors (FORMATS.md "GGUF" lists each rule):
 *   SCDB_EINVAL       NULL out, or NULL buf with len > 0
 *   SCDB_EFORMAT      wrong magic; a negative count; an empty key, a key or
 *                     tensor name holding a NUL byte; a key or tensor named
 *                     twice; a value type that is not a GGUF type, an array
 *                     of arrays; general.alignment not a u32; more than 4
 *                     dimensions or a negative one; a tensor name of 64
 *                     bytes or more; a tensor offset that is not a multiple
 *                     of the alignment
 *   SCDB_EUNSUPPORTED a version other than 3 (1 and 2 included), a
 *                     big-endian file
 *   SCDB_ETRUNC       the file ends inside the header, a KV, a tensor info
 *                     or before the data section; a string or array longer
 *                     than the rest of the file, a count of KVs or tensors
 *                     that cannot fit in it
 *   SCDB_ETOOBIG      a string over 1 GiB or an array over 2^30 elements
 *   SCDB_ERANGE       general.alignment not a power of two; a tensor whose
 *                     bytes run past the end of the file
 *   SCDB_EDTYPE       a ggml type this release does not define
 *   SCDB_ESHAPE       ne[0] not a multiple of the type's block size, an
 *                     element count or byte size overflowing 64 bits
 *   SCDB_EOVERLAP     two non-empty tensors whose bytes overlap
 *   SCDB_ENOMEM */
scdb_err scdb_gguf_open_buffer(const void *buf, size_t len, scdb_gguf_file **out, char *errbuf,
                               size_t errlen);

/* Unmap / release; sets *f to NULL.  Accepts NULL and *f == NULL. */
void scdb_gguf_close(scdb_gguf_file **f);

/* The string KV `key` of the file at path, cut to cap - 1 bytes, without
 * opening the file whole (the KVs are walked in the mapping; nothing is
 * allocated): what a loader asks first (general.type: a model or an
 * adapter?).  SCDB_ENOTFOUND (no such key, no such file), SCDB_EFORMAT (not
 * a GGUF v2 or v3 file whose KVs can be read, or the key is not a string),
 * SCDB_EINVAL, SCDB_ESYS. */
scdb_err scdb_gguf_peek_str(const char *path, const char *key, char *out, size_t cap);

uint32_t scdb_gguf_version(const scdb_gguf_file *f);
size_t scdb_gguf_alignment(const scdb_gguf_file *f);
/* File offset of the data section. */
size_t scdb_gguf_data_offset(const scdb_gguf_file *f);
/* The file name given to scdb_gguf_open ("" for a buffer). */
const char *scdb_gguf_path(const scdb_gguf_file *f);

/* KV pairs in file order; NULL for i out of range. */
int scdb_gguf_kv_count(const scdb_gguf_file *f);
const scdb_gguf_kv *scdb_gguf_kv_at(const scdb_gguf_file *f, int i);
/* By exact key; NULL if absent. */
const scdb_gguf_kv *scdb_gguf_find_kv(const scdb_gguf_file *f, const char *key);

/* Typed getters.  Each fails with SCDB_ENOTFOUND when the key is absent and
 * SCDB_EFORMAT when its value has another type (errbuf names the key, the
 * type it has and the type wanted); *out is written only on SCDB_OK.
 * get_int accepts any integer type (u8 .. i64; SCDB_ERANGE for a u64 above
 * INT64_MAX), get_float f32 or f64; the others exactly their type.
 * get_str gives the NUL-terminated copy.  get_arr checks that the key holds
 * an array of `elem` (SCDB_GGUF_TYPE_COUNT: any element type). */
scdb_err scdb_gguf_get_u32(const scdb_gguf_file *f, const char *key, uint32_t *out, char *errbuf,
                           size_t errlen);
scdb_err scdb_gguf_get_i32(const scdb_gguf_file *f, const char *key, int32_t *out, char *errbuf,
                           size_t errlen);
scdb_err scdb_gguf_get_u64(const scdb_gguf_file *f, const char *key, uint64_t *out, char *errbuf,
                           size_t errlen);
scdb_err scdb_gguf_get_f32(const scdb_gguf_file *f, const char *key, float *out, char *errbuf,
                           size_t errlen);
scdb_err scdb_gguf_get_bool(const scdb_gguf_file *f, const char *key, int *out, char *errbuf,
                            size_t errlen);
scdb_err scdb_gguf_get_str(const scdb_gguf_file *f, const char *key, const char **out,
                           char *errbuf, size_t errlen);
scdb_err scdb_gguf_get_int(const scdb_gguf_file *f, const char *key, int64_t *out, char *errbuf,
                           size_t errlen);
scdb_err scdb_gguf_get_float(const scdb_gguf_file *f, const char *key, double *out, char *errbuf,
                             size_t errlen);
scdb_err scdb_gguf_get_arr(const scdb_gguf_file *f, const char *key, scdb_gguf_type elem,
                           const scdb_gguf_kv **out, char *errbuf, size_t errlen);

/* Element i of a numeric KV (scalar: i == 0) as int64 / double.
 * SCDB_EINVAL (i out of range, a string), SCDB_EFORMAT (a float asked as an
 * integer), SCDB_ERANGE (a u64 above INT64_MAX). */
scdb_err scdb_gguf_kv_int(const scdb_gguf_kv *kv, uint64_t i, int64_t *out);
scdb_err scdb_gguf_kv_float(const scdb_gguf_kv *kv, uint64_t i, double *out);

/* Tensors in file order; NULL for i out of range. */
int scdb_gguf_tensor_count(const scdb_gguf_file *f);
const scdb_gguf_tensor *scdb_gguf_tensor_at(const scdb_gguf_file *f, int i);
/* By exact name; NULL if absent. */
const scdb_gguf_tensor *scdb_gguf_find_tensor(const scdb_gguf_file *f, const char *name);

/* A dequantizer of quantized ggml types (Q8_0, Q4_K, ...): to_f32(type,
 * src, dst, n) writes the n values (whole blocks) of src, a tensor's bytes
 * of ggml type `type`, as f32 into dst and returns 0, or returns -1 for a
 * type it does not convert; asked first with src = dst = NULL, n = 0.
 * scdb has none of its own: with llama.cpp, ggml's (the reference
 * dequantization in libggml-base, the same on every machine) is installed
 * by scdb_gguf_ggml_install (schema/gguf_ggml.h: the scdb and scdb-broker
 * programs at start, libscdb-llama's scdb_llama_init).  NULL removes it.
 * Set before the threads that read GGUF files start; the pointer is
 * atomic. */
typedef int (*scdb_gguf_dequant_fn)(int type, const void *src, float *dst, int64_t n);
void scdb_gguf_set_dequantizer(scdb_gguf_dequant_fn fn);
/* 1 if a dequantizer is installed. */
int scdb_gguf_have_dequantizer(void);

/* 1 if scdb_gguf_tensor_to_f32 converts this ggml type: F32, F16, BF16,
 * and the quantized types the installed dequantizer takes. */
int scdb_gguf_type_to_f32_ok(int type);
/* Why it does not (for a message), "" if it does: "no dequantizer in this
 * process (scdb without llama.cpp)" or "ggml cannot dequantize it". */
const char *scdb_gguf_type_why_not(int type);

/* Elements [first, first + n) of a tensor (flat, ggml order: ne[0] fastest)
 * as f32 into dst.  F32 as stored; F16 and BF16 widened exactly (the
 * safetensors reader's widening, scdb_st_to_f32, bit for bit).
 *
 * Quantized types through the installed dequantizer (above), whole
 * blocks: `first` and `n` multiples of the type's block size.  Every
 * loader (model/, the weights fingerprint) turns GGUF tensors into floats
 * here and asks scdb_gguf_type_to_f32_ok first, so a quantized model loads
 * (its weights the dequantized values) wherever a dequantizer is installed
 * and is refused by name elsewhere.
 *
 * SCDB_EINVAL (NULL argument, a range past the tensor or not whole
 * blocks), SCDB_EDTYPE (a type it does not convert), SCDB_EIO (the
 * dequantizer failed). */
scdb_err scdb_gguf_tensor_to_f32(const scdb_gguf_tensor *t, size_t first, size_t n, float *dst);

/* ------------------------------------------------------------------ writer */

typedef struct scdb_gguf_writer scdb_gguf_writer;

/* Errors: SCDB_EINVAL (NULL out), SCDB_ENOMEM. */
scdb_err scdb_gguf_writer_new(scdb_gguf_writer **out);
/* Frees the writer (not the tensor data); sets *w to NULL, accepts NULL. */
void scdb_gguf_writer_free(scdb_gguf_writer **w);

/* Set a KV pair (key and value copied).  Setting a key again replaces its
 * value in place (its position is kept).  "general.alignment" must be a
 * u32 power of two: it sets the file's alignment.
 * Errors: SCDB_EINVAL (NULL w or key, an empty key, general.alignment of
 * another type or not a power of two), SCDB_ENOMEM. */
scdb_err scdb_gguf_set_u32(scdb_gguf_writer *w, const char *key, uint32_t v);
scdb_err scdb_gguf_set_i32(scdb_gguf_writer *w, const char *key, int32_t v);
scdb_err scdb_gguf_set_u64(scdb_gguf_writer *w, const char *key, uint64_t v);
scdb_err scdb_gguf_set_f32(scdb_gguf_writer *w, const char *key, float v);
scdb_err scdb_gguf_set_f64(scdb_gguf_writer *w, const char *key, double v);
scdb_err scdb_gguf_set_bool(scdb_gguf_writer *w, const char *key, int v);
scdb_err scdb_gguf_set_str(scdb_gguf_writer *w, const char *key, const char *v);
/* An array of n numeric values of type elem (host order = little-endian).
 * SCDB_EINVAL also for elem STRING / ARRAY / unknown, or NULL data with
 * n > 0. */
scdb_err scdb_gguf_set_arr(scdb_gguf_writer *w, const char *key, scdb_gguf_type elem,
                           const void *data, size_t n);
/* An array of n C strings. */
scdb_err scdb_gguf_set_arr_str(scdb_gguf_writer *w, const char *key, const char *const *v,
                               size_t n);
/* A copy of a KV as read (any type, strings with their lengths, so NUL
 * bytes survive): how a file's metadata is carried into a new one (ggml's
 * gguf_set_kv), e.g. a vocabulary-only GGUF's tokenizer around new weights.
 * SCDB_EINVAL also for a KV that is not one the reader returns. */
scdb_err scdb_gguf_set_kv(scdb_gguf_writer *w, const scdb_gguf_kv *kv);

/* Add a tensor: ggml type `type`, n_dims (0..4) extents ne in ggml order
 * (ne[0] innermost), data of scdb_ggml_type_size(type) * product(ne) /
 * block bytes, NOT copied (kept alive and unchanged until the write).
 * Errors: SCDB_EINVAL (NULL w, an empty name, one of 64 bytes or more, a
 * name added before, NULL data for a non-empty tensor), SCDB_EDTYPE (an
 * unknown type), SCDB_ESHAPE (n_dims out of 0..4, a negative extent,
 * ne[0] not a multiple of the block size, a size overflowing), SCDB_ENOMEM. */
scdb_err scdb_gguf_add_tensor(scdb_gguf_writer *w, const char *name, int type, int n_dims,
                              const int64_t *ne, const void *data);

/* Write the file (version 3) atomically: path.tmp, fsync, rename, fsync of
 * the directory; on failure path.tmp is removed and path is untouched.  The
 * writer stays usable.  Errors: SCDB_EINVAL (NULL argument), SCDB_ENOTFOUND
 * (the directory of path does not exist), SCDB_EIO (open, write, fsync or
 * rename failed; logged with errno), SCDB_ENOMEM. */
scdb_err scdb_gguf_writer_write(scdb_gguf_writer *w, const char *path);

/* The same file image in memory (malloc'd into *out, *len bytes; the caller
 * frees it): for tests and fuzz seeds.  SCDB_EINVAL, SCDB_ENOMEM. */
scdb_err scdb_gguf_writer_image(scdb_gguf_writer *w, uint8_t **out, size_t *len);

#endif /* SCDB_GGUF_H */
