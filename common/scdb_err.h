/*
 * scdb_err.h — the one error enum and the element types of scdb (installed
 * with scdb.h: all a client needs of common/).
 *
 * Every public scdb function returns an scdb_err: SCDB_OK (0) on success, a
 * specific code otherwise; scdb_strerror() names it.  Out parameters come
 * last.  Bad input, I/O errors and allocation failures are returned, never
 * aborted on.  The values are part of the wire protocol (Reply.status):
 * new codes are appended, never inserted.
 */
#ifndef SCDB_ERR_H
#define SCDB_ERR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
    SCDB_EAUTH,      /* credentials refused or missing (e.g. a Redis ACL, a
                        CURVE key the broker does not let in)                 */
    SCDB_ENOSPC,     /* the store's filesystem is full (or over its quota)   */
    SCDB_EACCESS,    /* no permission to reach the broker (socket's group)   */
    SCDB_EINTR,      /* interrupted: the interrupt check (scdb_set_interrupt)
                        asked a blocking call to stop                         */
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

#ifdef __cplusplus
}
#endif

#endif /* SCDB_ERR_H */
