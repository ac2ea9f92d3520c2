/*
 * scdb_common.h — the one error enum, logging and small helpers shared by
 * every scdb module.
 *
 * Every public scdb function returns an scdb_err: SCDB_OK (0) on success, a
 * specific negative-free code otherwise; scdb_strerror() names it.  Out
 * parameters come last.  Bad input, I/O errors and allocation failures are
 * returned, never aborted on; assert() is reserved for programmer bugs.
 *
 * Modules that need more detail than the code (which tensor, which offset)
 * log it at SCDB_LOG_DEBUG/ERROR and/or write it to a caller-provided
 * message buffer; the code itself is what callers branch on.
 *
 * This folder sits below every layer of DESIGN.md's table: it has no
 * dependencies beyond libc.
 */
#ifndef SCDB_COMMON_H
#define SCDB_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef enum scdb_err {
    SCDB_OK = 0,
    SCDB_EINVAL,     /* invalid argument (programmer-facing, e.g. NULL)      */
    SCDB_ENOMEM,     /* allocation failed                                     */
    SCDB_ENOTFOUND,  /* key, file, model or tensor not found                  */
    SCDB_ESHAPE,     /* tensor shape or size does not match what is expected  */
    SCDB_EDTYPE,     /* unknown or unsupported dtype                          */
    SCDB_EPROTO,     /* malformed message / protocol version mismatch         */
    SCDB_EFORMAT,    /* malformed file: bad header, bad JSON, bad magic       */
    SCDB_ETRUNC,     /* file or message shorter than it claims                */
    SCDB_ERANGE,     /* offset or index past the end / out of range           */
    SCDB_EOVERLAP,   /* overlapping tensors in a file                         */
    SCDB_ECHECKSUM,  /* stored data failed its checksum                       */
    SCDB_EMISMATCH,  /* artifact does not belong here (ids, configs differ)   */
    SCDB_ETOOBIG,    /* request or value larger than allowed                  */
    SCDB_EFULL,      /* capacity reached and nothing evictable                */
    SCDB_EBUSY,      /* resource pinned / in use                              */
    SCDB_ETIMEDOUT,  /* call did not complete in time                         */
    SCDB_EIO,        /* read/write failed                                     */
    SCDB_ESYS,       /* a system call failed (errno logged)                   */
    SCDB_EDEVICE,    /* no such device / device error (CUDA)                  */
    SCDB_EUNSUPPORTED, /* operation not supported on this backend/build       */
    SCDB_ECLOSED,    /* peer or handle closed                                 */
    SCDB_EAUTH,      /* credentials refused or missing (e.g. a Redis ACL)     */
    SCDB_ERR_COUNT
} scdb_err;

/* Element types shared by kernels, safetensors files and the wire. */
typedef enum scdb_dtype {
    SCDB_F32 = 0,
    SCDB_F16,
    SCDB_BF16,
    SCDB_I32,
    SCDB_DTYPE_COUNT
} scdb_dtype;

/* Bytes per element (0 for an invalid dtype). */
size_t scdb_dtype_size(scdb_dtype t);
/* safetensors spelling: "F32", "F16", "BF16", "I32"; NULL if invalid. */
const char *scdb_dtype_name(scdb_dtype t);
/* Parse the safetensors spelling; SCDB_EDTYPE if unknown. */
scdb_err scdb_dtype_parse(const char *s, scdb_dtype *out);

/* Static string naming an error code ("SCDB_ESHAPE: shape mismatch"). */
const char *scdb_strerror(scdb_err e);

/* ---------------------------------------------------------------- logging
 * Timestamped, leveled lines on stderr:
 *   2026-11-30T05:12:13.123Z ERROR store/lmdb_store.c:88 checksum mismatch ...
 * The level threshold comes from scdb_log_set_level() or the SCDB_LOG
 * environment variable (debug|info|warn|error|off); default warn, so
 * libraries stay quiet unless something is wrong. */
typedef enum { SCDB_LOG_DEBUG, SCDB_LOG_INFO, SCDB_LOG_WARN, SCDB_LOG_ERROR,
               SCDB_LOG_OFF } scdb_log_level;

void scdb_log_set_level(scdb_log_level lvl);
scdb_log_level scdb_log_get_level(void);
void scdb_log_write(scdb_log_level lvl, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define scdb_log(lvl, ...) \
    do { if ((lvl) >= scdb_log_get_level()) \
        scdb_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__); } while (0)
#define scdb_debug(...) scdb_log(SCDB_LOG_DEBUG, __VA_ARGS__)
#define scdb_info(...)  scdb_log(SCDB_LOG_INFO, __VA_ARGS__)
#define scdb_warn(...)  scdb_log(SCDB_LOG_WARN, __VA_ARGS__)
#define scdb_error(...) scdb_log(SCDB_LOG_ERROR, __VA_ARGS__)

/* Monotonic clock in seconds / nanoseconds. */
double scdb_now(void);
uint64_t scdb_now_ns(void);

/* Read a whole file into a malloc'd buffer (NUL-terminated for convenience;
 * *len excludes the NUL).  SCDB_ENOTFOUND, SCDB_EIO, SCDB_ENOMEM,
 * SCDB_ETOOBIG (larger than max_len). */
scdb_err scdb_read_file(const char *path, size_t max_len, char **out, size_t *len);

#define SCDB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* SCDB_COMMON_H */
