/* errors.c — error names, dtypes, and the one errf helper. */
#include "scdb_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const err_names[SCDB_ERR_COUNT] = {
    [SCDB_OK] = "SCDB_OK: success",
    [SCDB_EINVAL] = "SCDB_EINVAL: invalid argument",
    [SCDB_ENOMEM] = "SCDB_ENOMEM: out of memory",
    [SCDB_ENOTFOUND] = "SCDB_ENOTFOUND: not found",
    [SCDB_ESHAPE] = "SCDB_ESHAPE: shape mismatch",
    [SCDB_EDTYPE] = "SCDB_EDTYPE: unknown or unsupported dtype",
    [SCDB_EPROTO] = "SCDB_EPROTO: protocol error",
    [SCDB_EFORMAT] = "SCDB_EFORMAT: malformed file or header",
    [SCDB_ETRUNC] = "SCDB_ETRUNC: truncated input",
    [SCDB_ERANGE] = "SCDB_ERANGE: offset or index out of range",
    [SCDB_EOVERLAP] = "SCDB_EOVERLAP: overlapping tensors",
    [SCDB_ECHECKSUM] = "SCDB_ECHECKSUM: checksum mismatch",
    [SCDB_EMISMATCH] = "SCDB_EMISMATCH: artifact does not match",
    [SCDB_ETOOBIG] = "SCDB_ETOOBIG: too large",
    [SCDB_EFULL] = "SCDB_EFULL: capacity exhausted",
    [SCDB_EBUSY] = "SCDB_EBUSY: resource busy",
    [SCDB_ETIMEDOUT] = "SCDB_ETIMEDOUT: timed out",
    [SCDB_EIO] = "SCDB_EIO: I/O error",
    [SCDB_ESYS] = "SCDB_ESYS: system call failed",
    [SCDB_EDEVICE] = "SCDB_EDEVICE: device error",
    [SCDB_EUNSUPPORTED] = "SCDB_EUNSUPPORTED: not supported",
    [SCDB_ECLOSED] = "SCDB_ECLOSED: closed",
    [SCDB_EAUTH] = "SCDB_EAUTH: authentication refused",
    [SCDB_ENOSPC] = "SCDB_ENOSPC: disk full",
    [SCDB_EACCESS] = "SCDB_EACCESS: permission denied",
    [SCDB_EINTR] = "SCDB_EINTR: interrupted",
};

const char *scdb_strerror(scdb_err e)
{
    if ((int)e < 0 || e >= SCDB_ERR_COUNT || !err_names[e])
        return "SCDB_E?: unknown error code";
    return err_names[e];
}

void scdb_errf(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!errbuf || !errlen) return;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

static const char *const dtype_names[SCDB_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32"};
static const size_t dtype_sizes[SCDB_DTYPE_COUNT] = {4, 2, 2, 4};

size_t scdb_dtype_size(scdb_dtype t)
{
    return ((int)t >= 0 && t < SCDB_DTYPE_COUNT) ? dtype_sizes[t] : 0;
}

const char *scdb_dtype_name(scdb_dtype t)
{
    return ((int)t >= 0 && t < SCDB_DTYPE_COUNT) ? dtype_names[t] : NULL;
}

scdb_err scdb_dtype_parse(const char *s, scdb_dtype *out)
{
    for (int i = 0; i < SCDB_DTYPE_COUNT; i++)
        if (s && !strcmp(s, dtype_names[i])) { *out = (scdb_dtype)i; return SCDB_OK; }
    return SCDB_EDTYPE;
}
