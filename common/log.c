/* log.c — timestamped, leveled log lines on stderr; monotonic clocks. */
#include "scdb_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

