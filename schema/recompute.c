/* recompute.c — the recompute setting's text form, checks and token choice
 * (recompute.h). */
#include "recompute.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scdb_common.h"

static const char *const names[SCDB_RECOMPUTE_POLICY_COUNT] = {"none", "tail", "initial",
                                                               "selective", "default"};

const char *scdb_recompute_policy_name(scdb_recompute_policy p)
{
    return (unsigned)p < SCDB_RECOMPUTE_POLICY_COUNT ? names[p] : NULL;
}

scdb_err scdb_recompute_parse(const char *text, scdb_recompute *out, char *errbuf, size_t errlen)
{
    char word[32];
    const char *colon, *arg;
    size_t wl;
    scdb_recompute r = {SCDB_RECOMPUTE_NONE, 0, 0.0f};
    int p = -1;

    if (!text || !out) return SCDB_EINVAL;
    colon = strchr(text, ':');
    wl = colon ? (size_t)(colon - text) : strlen(text);
    if (wl == 0 || wl >= sizeof word) goto unknown;
    memcpy(word, text, wl);
    word[wl] = 0;
    if (!colon && isdigit((unsigned char)word[0])) {   /* a bare count: tail */
        p = SCDB_RECOMPUTE_TAIL;
        arg = text;
    } else {
        arg = colon ? colon + 1 : NULL;
        if (!strcmp(word, "fast")) word[0] = 0, p = SCDB_RECOMPUTE_NONE;
        else if (!strcmp(word, "exact")) {
            if (arg) goto noarg;
            *out = (scdb_recompute){SCDB_RECOMPUTE_TAIL, 0, 1.0f};
            return SCDB_OK;
        } else if (!strcmp(word, "pair") || !strcmp(word, "exact-top1")) p = SCDB_RECOMPUTE_DEFAULT;
        else
            for (int i = 0; i < SCDB_RECOMPUTE_POLICY_COUNT; i++)
                if (!strcmp(word, names[i])) p = i;
        if (p < 0) goto unknown;
    }
    r.policy = (scdb_recompute_policy)p;
    if (p == SCDB_RECOMPUTE_NONE || p == SCDB_RECOMPUTE_DEFAULT) {
        if (arg) goto noarg;
        *out = r;
        return SCDB_OK;
    }
    if (!arg || !*arg) {
        scdb_errf(errbuf, errlen, "recompute '%.40s': %s needs a count or a percentage (%s:32, %s:15%%)",
                  text, names[p], names[p], names[p]);
        return SCDB_EINVAL;
    }
    {
        char *end;
        size_t n = strlen(arg);
        errno = 0;
        if (arg[n - 1] == '%') {
            /* digits with one '.' at most, as a count is digits only:
             * strtod alone would take a sign, an exponent, hex, inf and
             * nan, and an exponent reaches fractions no float holds */
            size_t digits = 0, dots = 0, other = 0;
            for (size_t i = 0; i + 1 < n; i++) {
                if (isdigit((unsigned char)arg[i])) digits++;
                else if (arg[i] == '.') dots++;
                else other++;
            }
            double pct = digits && dots <= 1 && !other ? strtod(arg, &end) : -1.0;
            if (!(pct > 0.0 && pct <= 100.0)) {
                scdb_errf(errbuf, errlen, "recompute '%.40s': the percentage must be a decimal "
                          "number in (0, 100]", text);
                return SCDB_EINVAL;
            }
            r.fraction = (float)(pct / 100.0);
            /* below 1e-6 (0.0001%) a fraction is one token of any prefix
             * a broker serves, and its text (no exponent) would outgrow
             * the buffers settings are written into */
            if (r.fraction < SCDB_RECOMPUTE_MIN_FRACTION) {
                scdb_errf(errbuf, errlen, "recompute '%.40s': the percentage is too small (under "
                          "0.0001%%; a count of tokens says 1)", text);
                return SCDB_EINVAL;
            }
        } else {
            long v = strtol(arg, &end, 10);
            if (*end || errno || !isdigit((unsigned char)*arg) || v > INT32_MAX) {
                scdb_errf(errbuf, errlen, "recompute '%.40s': the count must be a whole number >= 0",
                          text);
                return SCDB_EINVAL;
            }
            r.tokens = (int)v;
        }
    }
    *out = r;
    return SCDB_OK;
noarg:
    scdb_errf(errbuf, errlen, "recompute '%.40s': %s takes no count", text, word[0] ? word : "fast");
    return SCDB_EINVAL;
unknown:
    scdb_errf(errbuf, errlen, "recompute '%.40s': unknown policy (none, tail:N, initial:N, "
              "selective:N, default; N a count or a percentage; fast, exact)", text);
    return SCDB_EINVAL;
}

/* pct (> 0) with prec significant digits as %g writes it, but never with
 * an exponent: the parser takes digits and one '.' only (a fraction of
 * 1e-30 is a valid setting, "1e-28%" is not a valid text) */
static void pct_text(double pct, int prec, char *buf, size_t len)
{
    int dec = prec - 1 - (int)floor(log10(pct));
    size_t l = (size_t)snprintf(buf, len, "%.*f", dec > 0 ? dec : 0, pct);
    if (l >= len || !strchr(buf, '.')) return;
    while (l > 0 && buf[l - 1] == '0') buf[--l] = 0;
    if (l > 0 && buf[l - 1] == '.') buf[--l] = 0;
}

int scdb_recompute_format(const scdb_recompute *r, char *buf, size_t len)
{
    const char *n = r ? scdb_recompute_policy_name(r->policy) : NULL;
    if (!n) return snprintf(buf, len, "?");
    if (r->policy == SCDB_RECOMPUTE_NONE || r->policy == SCDB_RECOMPUTE_DEFAULT)
        return snprintf(buf, len, "%s", n);
    if (r->fraction > 0.0f) {
        /* the fewest significant digits (6 to 9: 9 always do for a float)
         * whose text parses back to this very fraction */
        char t[80];
        double pct = (double)r->fraction * 100.0;
        for (int prec = 6; prec <= 9; prec++) {
            pct_text(pct, prec, t, sizeof t);
            if ((float)(strtod(t, NULL) / 100.0) == r->fraction) break;
        }
        return snprintf(buf, len, "%s:%s%%", n, t);
    }
    return snprintf(buf, len, "%s:%d", n, r->tokens);
}

scdb_err scdb_recompute_check(const scdb_recompute *r, int prefix_tokens, char *errbuf,
                              size_t errlen)
{
    if (!r) return SCDB_EINVAL;
    if ((unsigned)r->policy >= SCDB_RECOMPUTE_POLICY_COUNT) {
        scdb_errf(errbuf, errlen, "recompute.policy %d: unknown (none, tail, initial, selective, "
                  "default)", (int)r->policy);
        return SCDB_EINVAL;
    }
    if (r->tokens < 0) {
        scdb_errf(errbuf, errlen, "recompute.tokens %d: negative", r->tokens);
        return SCDB_EINVAL;
    }
    if (!(r->fraction == 0.0f ||
          (r->fraction >= SCDB_RECOMPUTE_MIN_FRACTION && r->fraction <= 1.0f))) {
        scdb_errf(errbuf, errlen, "recompute.fraction %g: not 0 or in [1e-6, 1]",
                  (double)r->fraction);
        return SCDB_EINVAL;
    }
    if (r->fraction > 0.0f && r->tokens) {
        scdb_errf(errbuf, errlen, "recompute: tokens %d and fraction %g both set (one of them)",
                  r->tokens, (double)r->fraction);
        return SCDB_EINVAL;
    }
    if ((r->policy == SCDB_RECOMPUTE_NONE || r->policy == SCDB_RECOMPUTE_DEFAULT) &&
        (r->tokens || r->fraction > 0.0f)) {
        scdb_errf(errbuf, errlen, "recompute: policy %s takes no count", names[r->policy]);
        return SCDB_EINVAL;
    }
    if (prefix_tokens >= 0 && r->tokens > prefix_tokens) {
        scdb_errf(errbuf, errlen, "recompute.tokens %d is beyond the prefix's %d tokens", r->tokens,
                  prefix_tokens);
        return SCDB_ERANGE;
    }
    return SCDB_OK;
}

int scdb_recompute_count(const scdb_recompute *r, int P)
{
    long n;
    if (!r || P <= 0 || r->policy == SCDB_RECOMPUTE_NONE || r->policy == SCDB_RECOMPUTE_DEFAULT ||
        (unsigned)r->policy >= SCDB_RECOMPUTE_POLICY_COUNT)
        return 0;
    if (r->fraction > 0.0f) {
        /* The float a text like "10%" becomes is not its decimal (0.1f is
         * 0.100000001490116), so ceil(fraction x P) is one too many where
         * the decimal's product is whole (tail:10% of 320: 33, not 32).
         * Snapped to the nearest 1e-7 (a move under one float step above
         * 0.5; the exact decimal for a percentage of up to 5 decimals),
         * the fraction is k / 1e7 and the ceiling is exact in integers
         * (k P < 1e7 x INT_MAX fits int64). */
        if (r->fraction >= 1.0f) {
            n = P;
        } else {
            int64_t k = (int64_t)llround((double)r->fraction * 1e7);
            n = (long)((k * P + 9999999) / 10000000);
            if (n < 1) n = 1;          /* at least one, however small */
        }
    } else {
        n = r->tokens < 0 ? 0 : r->tokens;
    }
    return n > P ? P : (int)n;
}

typedef struct ranked { float s; int i; } ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    float sx = isnan(x->s) ? -INFINITY : x->s, sy = isnan(y->s) ? -INFINITY : y->s;
    if (sx != sy) return sx > sy ? -1 : 1;
    return x->i > y->i ? -1 : x->i < y->i;       /* ties: the later token first */
}

static int by_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

scdb_err scdb_recompute_select(const scdb_recompute *r, int P, const float *scores, int *idx,
                               int *n_out)
{
    int n;
    if (!r || !n_out || P < 0 || (P && !idx)) return SCDB_EINVAL;
    *n_out = 0;
    if (scdb_recompute_check(r, -1, NULL, 0) || r->policy == SCDB_RECOMPUTE_DEFAULT)
        return SCDB_EINVAL;
    n = scdb_recompute_count(r, P);
    if (r->policy == SCDB_RECOMPUTE_SELECTIVE && n > 0 && !scores) return SCDB_EINVAL;
    switch (r->policy) {
    case SCDB_RECOMPUTE_TAIL:
        for (int i = 0; i < n; i++) idx[i] = P - n + i;
        break;
    case SCDB_RECOMPUTE_INITIAL:
        for (int i = 0; i < n; i++) idx[i] = i;
        break;
    case SCDB_RECOMPUTE_SELECTIVE: {
        ranked *rk;
        if (!n) break;
        if (!(rk = malloc((size_t)P * sizeof *rk))) return SCDB_ENOMEM;
        for (int i = 0; i < P; i++) rk[i] = (ranked){scores[i], i};
        qsort(rk, (size_t)P, sizeof *rk, by_score);
        for (int i = 0; i < n; i++) idx[i] = rk[i].i;
        free(rk);
        qsort(idx, (size_t)n, sizeof *idx, by_int);
        break;
    }
    default:
        n = 0;
        break;
    }
    *n_out = n;
    return SCDB_OK;
}
