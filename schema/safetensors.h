/*
 * safetensors.h — read and write safetensors files (the tensor container of
 * the Hugging Face ecosystem), zero-copy on the read side.
 *
 * File layout (all integers little-endian):
 *
 *   +----------+---------------------------+--------------------------------+
 *   | u64  N   | N bytes of UTF-8 JSON     | data section                   |
 *   +----------+---------------------------+--------------------------------+
 *   0          8                           8+N                         EOF
 *
 *   {"__metadata__": {"k": "v", ...},                       (optional)
 *    "wte": {"dtype": "F32", "shape": [50257, 768],
 *            "data_offsets": [0, 154389504]}, ...}
 *
 * data_offsets are [begin, end) byte offsets relative to the start of the
 * data section (8+N), not to the start of the file.  schema/FORMATS.md
 * ("## safetensors") lists every rule the reader enforces and the error code
 * each violation returns.
 *
 * Reading.  scdb_st_open() mmaps the file read-only; scdb_st_open_buffer()
 * validates a caller's buffer in place.  The header is copied and parsed with
 * cJSON, every entry is checked (dtype, shape, offsets, size, overlaps,
 * duplicates), then the JSON tree is dropped: the handle keeps one array of
 * scdb_st_tensor sorted by data offset, a name index for binary search and
 * the metadata pairs sorted by key.  Tensor data is never copied:
 * scdb_st_tensor.data points into the mapping / caller's buffer, so it is
 * valid until scdb_st_close().  Validation is all-or-nothing: a handle is
 * returned only for a file that passed every check, and every tensor's
 * [data, data + nbytes) then lies inside the data section.
 *
 * Alignment.  data is aligned to its dtype only if the writer made it so.
 * Files written by scdb_st_writer_write() (and by the Python library) pad
 * the header to a multiple of 8 and store 4-byte dtypes before 2-byte ones,
 * so in an mmap'd file every tensor is aligned to its element size.  Other
 * files, and buffers at odd addresses, may yield unaligned pointers.
 *
 * Writing.  A writer collects (name, dtype, shape, data pointer) entries and
 * metadata, then writes path.tmp, fsyncs it, renames it over path and fsyncs
 * the directory, so readers see either the old file or the complete new one.
 * Tensor data is laid out contiguously (what the Python reader requires),
 * 4-byte dtypes first, each group in the order added.
 *
 * Caveats.
 *  - A handle is immutable after open: concurrent readers from any number of
 *    threads are fine; scdb_st_close() must not race with them.  A writer is
 *    not thread-safe.  Opening files from several threads at once is safe
 *    except that cJSON records its last parse error in a process global
 *    (cJSON_GetErrorPtr), which such opens write concurrently; scdb never
 *    reads it, but ThreadSanitizer will report it.
 *  - If another process truncates an mmap'd file while it is open, touching
 *    tensor data raises SIGBUS.  Files are replaced by rename, never
 *    rewritten in place, to avoid that (the writer does so).
 *  - JSON numbers are parsed by cJSON as doubles: integers above 2^53 cannot
 *    be represented exactly and are rejected (see FORMATS.md); integral
 *    values written with a fraction or exponent ("4.0", "4e0") are accepted.
 *  - Names and metadata are C strings: a JSON "\u0000" escape truncates them.
 *  - An allocation failure inside cJSON cannot be told apart from malformed
 *    JSON and is reported as SCDB_EFORMAT.
 */
#ifndef SCDB_SAFETENSORS_H
#define SCDB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_common.h"

#define SCDB_ST_MAX_DIMS 8
/* Largest header accepted or written (same limit as the Python library). */
#define SCDB_ST_MAX_HEADER 100000000u

typedef struct scdb_st_tensor {
    const char *name;          /* owned by the file handle */
    scdb_dtype dtype;
    int ndim;                  /* 0 for a scalar */
    int64_t shape[SCDB_ST_MAX_DIMS];   /* entries past ndim are 0 */
    size_t nbytes;             /* product(shape) * scdb_dtype_size(dtype) */
    const void *data;          /* points into the mmap / buffer (zero-copy) */
} scdb_st_tensor;

typedef struct scdb_st_file scdb_st_file;   /* opaque */

/* ------------------------------------------------------------------ reader */

/* Map `path` read-only and validate it.  errbuf (may be NULL) receives a
 * human-readable message naming the tensor / offset at fault.
 * Errors: SCDB_EINVAL (NULL path/out), SCDB_ENOTFOUND (no such file),
 * SCDB_EIO (not a regular file), SCDB_ESYS (open/fstat/mmap failed),
 * SCDB_ENOMEM, and every error of scdb_st_open_buffer(). */
scdb_err scdb_st_open(const char *path, scdb_st_file **out,
                      char *errbuf, size_t errlen);

/* Validate a file image held in a caller's buffer; no copy is made, so the
 * buffer must outlive the handle.
 * Errors: SCDB_EINVAL (NULL out, or NULL buf with len > 0),
 * SCDB_ETRUNC (shorter than 8 bytes, or than 8 + header length),
 * SCDB_ETOOBIG (header length > SCDB_ST_MAX_HEADER),
 * SCDB_EFORMAT (bad JSON, wrong types, negative / non-integer numbers, more
 *   than SCDB_ST_MAX_DIMS dims, duplicate names or fields, bad metadata),
 * SCDB_EDTYPE (unknown dtype string),
 * SCDB_ERANGE (begin > end, end past the data section, offset > 2^53),
 * SCDB_ESHAPE (end - begin != product(shape) * dtype size, product overflow,
 *   dimension > 2^53),
 * SCDB_EOVERLAP (two tensors' byte ranges overlap),
 * SCDB_ENOMEM. */
scdb_err scdb_st_open_buffer(const void *buf, size_t len, scdb_st_file **out,
                             char *errbuf, size_t errlen);

/* Unmap / release; sets *f to NULL.  Accepts NULL and *f == NULL. */
void scdb_st_close(scdb_st_file **f);

/* Number of tensors (0 for NULL). */
int scdb_st_count(const scdb_st_file *f);

/* i-th tensor in order of data offset (ties: end offset, then name);
 * NULL if i is out of range. */
const scdb_st_tensor *scdb_st_at(const scdb_st_file *f, int i);

/* Tensor by exact name; NULL if absent (or f/name NULL). */
const scdb_st_tensor *scdb_st_find(const scdb_st_file *f, const char *name);

/* Find `name` and check its dtype and exact shape (shape may be NULL when
 * ndim == 0).  *out (may be NULL) gets the tensor on success.
 * Errors: SCDB_EINVAL (NULL f/name, ndim outside 0..SCDB_ST_MAX_DIMS, NULL
 * shape with ndim > 0), SCDB_ENOTFOUND, SCDB_EDTYPE, SCDB_ESHAPE; errbuf
 * says what was expected and what the file has. */
scdb_err scdb_st_expect(const scdb_st_file *f, const char *name, scdb_dtype dt,
                        int ndim, const int64_t *shape,
                        const scdb_st_tensor **out, char *errbuf, size_t errlen);

/* Metadata value for `key`; NULL if absent. */
const char *scdb_st_meta(const scdb_st_file *f, const char *key);

/* Number of metadata pairs (0 for NULL). */
int scdb_st_meta_count(const scdb_st_file *f);

/* i-th metadata pair, in key order (strcmp).  Strings are owned by f.
 * Errors: SCDB_EINVAL (NULL argument), SCDB_ERANGE (i out of range). */
scdb_err scdb_st_meta_at(const scdb_st_file *f, int i,
                         const char **key, const char **val);

/* Elements [first, first + n) of an F32 / F16 / BF16 tensor as f32 into
 * dst, F16 and BF16 widened exactly (IEEE 754: every value, subnormals,
 * infinities and NaN payloads included, is an f32 value; the model loader's
 * kernels/cpu/half.c gives the same bits).  SCDB_EINVAL (NULL argument, a
 * range past the tensor), SCDB_EDTYPE (another dtype).  st_widen.c. */
scdb_err scdb_st_to_f32(const scdb_st_tensor *t, size_t first, size_t n, float *dst);

/* ------------------------------------------------------------------ writer */

typedef struct scdb_st_writer scdb_st_writer;

/* Errors: SCDB_EINVAL (NULL out), SCDB_ENOMEM. */
scdb_err scdb_st_writer_new(scdb_st_writer **out);

/* Add a tensor.  The name is copied; the data is NOT: the writer keeps the
 * pointer, and the caller must keep product(shape) * dtype-size bytes alive
 * and unchanged until scdb_st_writer_write() returns.  data may be NULL only
 * for a zero-size tensor; shape may be NULL only when ndim == 0.
 * Errors: SCDB_EINVAL (NULL w; name NULL, empty, "__metadata__", not valid
 * UTF-8 or already added; NULL shape/data where needed),
 * SCDB_EDTYPE (invalid dt), SCDB_ESHAPE (ndim outside 0..SCDB_ST_MAX_DIMS,
 * a negative dim or one > 2^53, byte size overflowing), SCDB_ENOMEM. */
scdb_err scdb_st_writer_add(scdb_st_writer *w, const char *name, scdb_dtype dt,
                            int ndim, const int64_t *shape, const void *data);

/* Set a metadata pair (both strings copied); setting a key again replaces
 * its value.  Errors: SCDB_EINVAL (NULL argument, or key/value not valid
 * UTF-8), SCDB_ENOMEM. */
scdb_err scdb_st_writer_meta(scdb_st_writer *w, const char *key,
                             const char *value);

/* Write the file: header padded with spaces to a multiple of 8 bytes, data
 * contiguous (4-byte dtypes first).  Writes path.tmp, fsyncs, renames over
 * path, fsyncs the directory; on failure path.tmp is removed and path is
 * untouched.  The writer stays usable (it can be written again).
 * Errors: SCDB_EINVAL (NULL argument), SCDB_ETOOBIG (header larger than
 * SCDB_ST_MAX_HEADER or total size overflowing), SCDB_ENOTFOUND (directory
 * of path does not exist), SCDB_EIO (open/write/fsync/rename failed; errno
 * is logged), SCDB_ENOMEM. */
scdb_err scdb_st_writer_write(scdb_st_writer *w, const char *path);

/* Free the writer (not the tensor data); sets *w to NULL, accepts NULL. */
void scdb_st_writer_free(scdb_st_writer **w);

#endif /* SCDB_SAFETENSORS_H */
