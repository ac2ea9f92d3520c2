/*
 * scdb_common.h — the one error enum, logging and small helpers shared by
 * every scdb module.
 *
 * Every public scdb function returns an scdb_err (scdb_err.h): SCDB_OK (0)
 * on success, a specific code otherwise; scdb_strerror() names it.  Out
 * parameters come last.  Bad input, I/O errors and allocation failures are
 * returned, never aborted on; assert() is reserved for programmer bugs.
 *
 * Modules that need more detail than the code (which tensor, which offset)
 * log it at SCDB_LOG_DEBUG/ERROR and/or write it to a caller-provided
 * message buffer; the code itself is what callers branch on.
 *
 * This folder sits below every layer of docs/DESIGN.md "Layout": it has no
 * dependencies beyond libc.
 */
#ifndef SCDB_COMMON_H
#define SCDB_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "scdb_err.h"

/* ---------------------------------------------------------------- logging
 * Timestamped, leveled lines on stderr:
 *   2026-11-30T05:12:13.123Z ERROR store/store_read.c:88 checksum mismatch ...
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

/* printf into a caller's message buffer (errbuf NULL or errlen 0: nothing):
 * the one helper behind every "char *errbuf, size_t errlen" argument. */
void scdb_errf(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------ files */

/* Read a whole regular file into a malloc'd buffer (NUL-terminated for
 * convenience; *len excludes the NUL).  SCDB_ENOTFOUND, SCDB_EIO (not a
 * regular file, read error), SCDB_ENOMEM, SCDB_ETOOBIG (larger than
 * max_len). */
scdb_err scdb_read_file(const char *path, size_t max_len, char **out, size_t *len);
/* Read a stream (a pipe, say) to its end or to max_len bytes, whichever
 * comes first, into a malloc'd NUL-terminated buffer.  SCDB_EIO, SCDB_ENOMEM. */
scdb_err scdb_read_stream(FILE *f, size_t max_len, char **out, size_t *len);
/* mkdir -p: every missing directory of path, new ones with mode.  0, or -1
 * with errno. */
int scdb_mkdir_p(const char *path, unsigned mode);
/* Copy the string src into dst[n] (n >= 1), cut to n - 1 bytes where it
 * is longer: for labels and messages where a cut is what is wanted.  1 when
 * it was cut, else 0.  (snprintf "%s" does the same, but GCC cannot tell an
 * intended cut from a bug and warns, -Wformat-truncation.) */
int scdb_str_cut(char *dst, size_t n, const char *src);

/* rm -r: path and everything below it, not following links; a missing path
 * is not an error.  0, or -1 with errno. */
int scdb_rm_tree(const char *path);

/* The running program's share folder, <dir of its executable>/../share/scdb
 * (/proc/self/exe; the build tree has build/share/scdb), and the asset
 * folder: $SCDB_DATA, else the share folder.  No path is compiled in.
 * Static strings, computed on first use (call once before threads). */
const char *scdb_share_dir(void);
const char *scdb_data_dir(void);
/* path as committed text and logs should show it: relative to the asset
 * folder when it lies inside it ("heldout/code.txt"), else as given (the
 * user named it).  Points into path; NULL for NULL. */
const char *scdb_data_relative(const char *path);

#define SCDB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* SCDB_COMMON_H */
