/* parse_num.c — the range-checked option value parser (scdb_common.h
 * "option values"): strtoll / strtoull / strtod with every way a value can
 * be wrong told apart. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scdb_common.h"

/* What strto* would skip or accept that a whole number must not start
 * with: blanks (strto* skip them), and for an unsigned value a minus sign
 * (strtoull negates it: "-1" would read as UINT64_MAX). */
static int bad_start(const char *s, int is_unsigned)
{
    return isspace((unsigned char)*s) || (is_unsigned && *s == '-');
}

/* A number was read up to end: SCDB_OK when nothing follows it. */
static scdb_err tail(const char *opt, const char *s, const char *end, char *why, size_t why_len)
{
    if (*end) {
        scdb_errf(why, why_len, "%s '%s': junk after the number ('%s')", opt, s, end);
        return SCDB_EINVAL;
    }
    return SCDB_OK;
}

static scdb_err empty(const char *opt, const char *s, const char *range, char *why, size_t why_len)
{
    if (s && *s) return SCDB_OK;
    scdb_errf(why, why_len, "%s: empty value (want %s)", opt ? opt : "value", range);
    return SCDB_EINVAL;
}

scdb_err scdb_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out,
                        char *why, size_t why_len)
{
    char range[96], *end = NULL;
    long long v;
    scdb_err e;

    snprintf(range, sizeof range, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    if (!out) return SCDB_EINVAL;
    if ((e = empty(opt, s, range, why, why_len))) return e;
    if (!opt) opt = "value";
    errno = 0;
    v = bad_start(s, 0) ? 0 : strtoll(s, &end, 10);
    if (bad_start(s, 0) || end == s) {
        scdb_errf(why, why_len, "%s '%s': not an integer (want one in [%lld, %lld])", opt, s,
                  (long long)lo, (long long)hi);
        return SCDB_EINVAL;
    }
    if ((e = tail(opt, s, end, why, why_len))) return e;
    if (errno == ERANGE) {
        scdb_errf(why, why_len, "%s '%s': overflows (want [%lld, %lld])", opt, s, (long long)lo,
                  (long long)hi);
        return SCDB_ERANGE;
    }
    if (v < lo || v > hi) {
        scdb_errf(why, why_len, "%s '%s': out of range (want [%lld, %lld])", opt, s, (long long)lo,
                  (long long)hi);
        return SCDB_ERANGE;
    }
    *out = v;
    return SCDB_OK;
}

scdb_err scdb_parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
                        char *why, size_t why_len)
{
    char range[96], *end = NULL;
    unsigned long long v;
    scdb_err e;

    snprintf(range, sizeof range, "an unsigned integer in [%llu, %llu]", (unsigned long long)lo,
             (unsigned long long)hi);
    if (!out) return SCDB_EINVAL;
    if ((e = empty(opt, s, range, why, why_len))) return e;
    if (!opt) opt = "value";
    errno = 0;
    v = bad_start(s, 1) ? 0 : strtoull(s, &end, 10);
    if (bad_start(s, 1) || end == s) {
        scdb_errf(why, why_len, "%s '%s': not an unsigned integer (want one in [%llu, %llu])", opt,
                  s, (unsigned long long)lo, (unsigned long long)hi);
        return SCDB_EINVAL;
    }
    if ((e = tail(opt, s, end, why, why_len))) return e;
    if (errno == ERANGE) {
        scdb_errf(why, why_len, "%s '%s': overflows (want [%llu, %llu])", opt, s,
                  (unsigned long long)lo, (unsigned long long)hi);
        return SCDB_ERANGE;
    }
    if (v < lo || v > hi) {
        scdb_errf(why, why_len, "%s '%s': out of range (want [%llu, %llu])", opt, s,
                  (unsigned long long)lo, (unsigned long long)hi);
        return SCDB_ERANGE;
    }
    *out = v;
    return SCDB_OK;
}

scdb_err scdb_parse_f64(const char *opt, const char *s, double lo, double hi, double *out,
                        char *why, size_t why_len)
{
    char range[96], *end = NULL;
    double v;
    scdb_err e;

    snprintf(range, sizeof range, "a number in [%g, %g]", lo, hi);
    if (!out) return SCDB_EINVAL;
    if ((e = empty(opt, s, range, why, why_len))) return e;
    if (!opt) opt = "value";
    errno = 0;
    v = bad_start(s, 0) ? 0 : strtod(s, &end);
    if (bad_start(s, 0) || end == s || isnan(v) || (isinf(v) && errno != ERANGE)) {
        scdb_errf(why, why_len, "%s '%s': not a number (want one in [%g, %g])", opt, s, lo, hi);
        return SCDB_EINVAL;
    }
    if ((e = tail(opt, s, end, why, why_len))) return e;
    if (errno == ERANGE && (isinf(v) || fabs(v) >= 1.0)) {
        scdb_errf(why, why_len, "%s '%s': overflows (want [%g, %g])", opt, s, lo, hi);
        return SCDB_ERANGE;
    }
    if (!(v >= lo && v <= hi)) {
        scdb_errf(why, why_len, "%s '%s': out of range (want [%g, %g])", opt, s, lo, hi);
        return SCDB_ERANGE;
    }
    *out = v;
    return SCDB_OK;
}

scdb_err scdb_parse_int(const char *opt, const char *s, int lo, int hi, int *out, char *why,
                        size_t why_len)
{
    int64_t v;
    scdb_err e = out ? scdb_parse_i64(opt, s, lo, hi, &v, why, why_len) : SCDB_EINVAL;
    if (e == SCDB_OK) *out = (int)v;
    return e;
}

scdb_err scdb_parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                        char *why, size_t why_len)
{
    uint64_t v;
    scdb_err e = out ? scdb_parse_u64(opt, s, lo, hi, &v, why, why_len) : SCDB_EINVAL;
    if (e == SCDB_OK) *out = (uint32_t)v;
    return e;
}

scdb_err scdb_parse_float(const char *opt, const char *s, float lo, float hi, float *out,
                          char *why, size_t why_len)
{
    double v;
    scdb_err e = out ? scdb_parse_f64(opt, s, lo, hi, &v, why, why_len) : SCDB_EINVAL;
    if (e == SCDB_OK) *out = (float)v;
    return e;
}

int scdb_list_has_empty_field(const char *s)
{
    size_t len = strlen(s);
    return len == 0 || s[0] == ',' || s[len - 1] == ',' || strstr(s, ",,") != NULL;
}

int scdb_list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == n && !strncmp(s, name, n)) return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

int scdb_split_list(const char *s, char **out, int max)
{
    char *buf, *save = NULL, *tok;
    int n = 0;
    if (!*s) return 0;
    if (scdb_list_has_empty_field(s) || !(buf = strdup(s))) return -1;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || !(out[n] = strdup(tok))) {   /* too many, or no memory */
            while (n > 0) free(out[--n]);
            n = -1;
            break;
        }
        n++;
    }
    free(buf);
    return n;
}
