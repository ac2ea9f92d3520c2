/* scdb_common.c — error names, logging, clocks, whole-file reads. */
#include "scdb_common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
};

const char *scdb_strerror(scdb_err e)
{
    if ((int)e < 0 || e >= SCDB_ERR_COUNT || !err_names[e])
        return "SCDB_E?: unknown error code";
    return err_names[e];
}

static int log_level = -1;

static scdb_log_level level_from_env(void)
{
    const char *s = getenv("SCDB_LOG");
    if (!s) return SCDB_LOG_WARN;
    if (!strcmp(s, "debug")) return SCDB_LOG_DEBUG;
    if (!strcmp(s, "info")) return SCDB_LOG_INFO;
    if (!strcmp(s, "error")) return SCDB_LOG_ERROR;
    if (!strcmp(s, "off")) return SCDB_LOG_OFF;
    return SCDB_LOG_WARN;
}

void scdb_log_set_level(scdb_log_level lvl) { log_level = (int)lvl; }

scdb_log_level scdb_log_get_level(void)
{
    if (log_level < 0) log_level = (int)level_from_env();
    return (scdb_log_level)log_level;
}

void scdb_log_write(scdb_log_level lvl, const char *file, int line,
                    const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};
    struct timespec ts;
    struct tm tm;
    char stamp[32], msg[1024];
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one fprintf per line so concurrent writers do not interleave */
    fprintf(stderr, "%s.%03ldZ %-5s %s:%d %s\n", stamp, ts.tv_nsec / 1000000L,
            names[lvl], file, line, msg);
}

double scdb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t scdb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

scdb_err scdb_read_file(const char *path, size_t max_len, char **out, size_t *len)
{
    FILE *f = NULL;
    char *buf = NULL;
    struct stat st;
    scdb_err rc = SCDB_OK;

    *out = NULL;
    if (len) *len = 0;
    f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? SCDB_ENOTFOUND : SCDB_EIO;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) { rc = SCDB_EIO; goto fail; }
    if ((size_t)st.st_size > max_len) { rc = SCDB_ETOOBIG; goto fail; }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) { rc = SCDB_ENOMEM; goto fail; }
    if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) { rc = SCDB_EIO; goto fail; }
    buf[st.st_size] = '\0';
    *out = buf;
    if (len) *len = (size_t)st.st_size;
    buf = NULL;
fail:
    free(buf);
    fclose(f);
    return rc;
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
