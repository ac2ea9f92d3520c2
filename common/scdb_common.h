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
/* path as committed text and logs should show it: relative to dir when it
 * lies inside it ("heldout/code.txt"), else as given (the user named it).
 * Inside is below dir by name, or the same file as dir/TAIL for a tail of
 * path (the build tree's share folder links to the source's data/
 * entries, so data/policies/x and build/share/scdb/policies/x are one
 * file).  Points into path; NULL for NULL.  scdb_data_relative: relative
 * to scdb_data_dir(), what every program and bench records. */
const char *scdb_path_relative(const char *path, const char *dir);
const char *scdb_data_relative(const char *path);

/* --------------------------------------------------------------- progress
 *
 * One progress report for a long loop (calibration's statistics windows, a
 * consumer's windows, a codebook's layers, an aligner's Adam steps), which
 * a terminal and a log can both read:
 *
 *   a terminal (isatty of the stream): one line redrawn in place with '\r'
 *     (at most every 0.1 s and at the last step, padded over a longer
 *     previous text), ended with '\n' by scdb_progress_end;
 *   anything else (a file, a pipe): whole lines, one when the work passes
 *     another tenth of its total (at most one a second) or when every_s
 *     (SCDB_PROGRESS_EVERY_S) seconds passed since the last line, and the
 *     last state at the end unless it was the last line out.  A report of
 *     T seconds prints at most 1 + min(10, T) + T / every_s lines; a short
 *     one, only its last state.
 *
 *     scdb_progress p;
 *     scdb_progress_begin(&p, verbose ? stderr : NULL, n);
 *     for (int i = 0; i < n; i++) {
 *         work(i);
 *         scdb_progress_step(&p, i + 1, "  statistics: %d windows", i + 1);
 *     }
 *     scdb_progress_end(&p);
 *
 * total <= 0: unknown (no tenths; time only).  The struct is the caller's,
 * nothing is allocated; a NULL stream makes every call do nothing (quiet).
 * A test may set tty, every_s and clock after begin.  The text is cut to
 * SCDB_PROGRESS_TEXT - 1 bytes and must not hold a newline.  One thread. */
#define SCDB_PROGRESS_EVERY_S 5.0
#define SCDB_PROGRESS_TEXT 256
typedef struct scdb_progress {
    FILE *f;                /* NULL: quiet */
    int tty;                /* redraw one line in place (isatty at begin) */
    long total;             /* steps in all; 0: unknown */
    double every_s;         /* a log's line at least this often */
    double (*clock)(void);  /* seconds; scdb_now */
    double t_last;          /* when the last line (or redraw) went out */
    long tenth;             /* tenths of total reported so far */
    int shown;              /* text is what went out last */
    size_t drawn;           /* terminal: length of the line on screen */
    char text[SCDB_PROGRESS_TEXT];
} scdb_progress;

void scdb_progress_begin(scdb_progress *p, FILE *f, long total);
/* done: steps done so far (of total); the text is printf's of fmt. */
void scdb_progress_step(scdb_progress *p, long done, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void scdb_progress_end(scdb_progress *p);

/* ---------------------------------------------------------- option values
 *
 * One range-checked parser for every number a program takes on its command
 * line (the scdb command, its benches): a value is a whole decimal number
 * (an integer: optional sign, digits; a real: what strtod reads, finite) and
 * nothing else, within [lo, hi].  Refused, with why naming the option
 * (opt, e.g. "--windows") and the value:
 *
 *     --windows '':      empty value (want an integer in [1, 1048576])
 *     --windows ' 8':    not an integer (want one in [1, 1048576])
 *     --windows '8x':    junk after the number ('x')
 *     --windows '1e99':  junk after the number ('e99')
 *     --seed '-1':       not an unsigned integer (want one in [0, ...])
 *     --windows '99999999999999999999': overflows (want [1, 1048576])
 *     --windows '0':     out of range (want [1, 1048576])
 *
 * SCDB_EINVAL (empty, not a number, junk after it; a NULL s or out),
 * SCDB_ERANGE (overflow, out of [lo, hi]).  *out is written only on
 * SCDB_OK. */
scdb_err scdb_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out,
                        char *why, size_t why_len);
scdb_err scdb_parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
                        char *why, size_t why_len);
scdb_err scdb_parse_f64(const char *opt, const char *s, double lo, double hi, double *out,
                        char *why, size_t why_len);
/* The same into narrower types (lo, hi within the type). */
scdb_err scdb_parse_int(const char *opt, const char *s, int lo, int hi, int *out, char *why,
                        size_t why_len);
scdb_err scdb_parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                        char *why, size_t why_len);
scdb_err scdb_parse_float(const char *opt, const char *s, float lo, float hi, float *out,
                          char *why, size_t why_len);

/* Comma lists (option values, policy metadata).  strtok_r folds empty
 * fields away (",a", "a,,b", "a,"), so a list with one would be taken for
 * a shorter one: both refuse it.
 *   scdb_list_has_empty_field  1 if s is "" or has an empty field
 *   scdb_split_list            the fields into out[] (each strdup'd, the
 *                              caller frees them): their count, 0 for "",
 *                              or -1 (nothing to free) for an empty
 *                              field, more than max fields, or no memory
 *   scdb_list_has              1 if name is one of list's fields (list may
 *                              be NULL: 0) */
int scdb_list_has_empty_field(const char *s);
int scdb_list_has(const char *list, const char *name);
int scdb_split_list(const char *s, char **out, int max);

/* --------------------------------------------------------- random numbers
 *
 * Small reproducible generators over a caller's state, for tests, benches
 * and port picks (never for anything secret): xorshift64 (Marsaglia's
 * 13, 7, 17; the state must not be 0) and splitmix64 (any state; also a
 * seed expander).  scdb_xorshift_f32 is uniform in [-1, 1), from the top
 * 53 bits of the next xorshift64 state. */
static inline uint64_t scdb_xorshift64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline float scdb_xorshift_f32(uint64_t *s)
{
    return (float)((scdb_xorshift64(s) >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static inline uint64_t scdb_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define SCDB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* SCDB_COMMON_H */
