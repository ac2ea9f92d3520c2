/* cmd_stats.c — `scdb stats`: the broker's and the store's counters as a
 * table (default), as JSON (--json), once or every N seconds (--watch N).
 *
 * Both forms come from one table of fields (FIELDS below): each row names
 * its scdb_stat member once, with its JSON key, its label and how the table
 * shows it, so the two cannot drift apart.  Exit codes: 0 ok, 1 the broker
 * refused, 2 usage error, 3 no broker answered. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scdb.h"
#include "scdb_cli.h"
#include "wire.h"

enum { EXIT_REFUSED = SCDB_CLI_REFUSED, EXIT_USAGE = SCDB_CLI_USAGE, EXIT_UNREACHABLE = SCDB_CLI_UNREACHABLE };

/* How the table shows a value (JSON always gives the plain number). */
typedef enum {
    F_COUNT,        /* an integer                                          */
    F_BYTES,        /* bytes, with a KiB/MiB/GiB reading                   */
    F_CAPACITY,     /* bytes; 0 = unbounded                                */
    F_HOT_CAPACITY, /* bytes; 0 = no hot tier                              */
    F_SECONDS,      /* a double                                            */
    F_U32,          /* a uint32_t member                                   */
    F_HEX,          /* an id                                               */
} field_fmt;

typedef struct field {
    const char *section;   /* "store" or "broker"                          */
    const char *key;       /* JSON key                                     */
    const char *label;     /* table label                                  */
    size_t off;            /* in scdb_stat                                 */
    field_fmt f;
} field;

#define S(m) offsetof(scdb_stat, m)
static const field FIELDS[] = {
    {"store", "blocks", "blocks stored", S(blocks), F_COUNT},
    {"store", "disk_bytes", "disk bytes", S(disk_bytes), F_BYTES},
    {"store", "disk_capacity_bytes", "disk capacity", S(disk_capacity_bytes), F_CAPACITY},
    {"store", "hot_blocks", "hot tier blocks", S(hot_blocks), F_COUNT},
    {"store", "hot_bytes", "hot tier bytes", S(hot_bytes), F_BYTES},
    {"store", "hot_capacity_bytes", "hot tier capacity", S(hot_capacity_bytes), F_HOT_CAPACITY},
    {"store", "pinned_blocks", "pinned blocks", S(pinned_blocks), F_COUNT},
    {"store", "lookups", "lookups (broker-side)", S(lookups), F_COUNT},
    {"store", "lookup_hit_blocks", "lookup blocks hit", S(lookup_hit_blocks), F_COUNT},
    {"store", "lookup_miss_blocks", "lookup blocks missed", S(lookup_miss_blocks), F_COUNT},
    {"store", "gets", "block reads", S(gets), F_COUNT},
    {"store", "get_hot_hits", "block reads from the hot tier", S(get_hot_hits), F_COUNT},
    {"store", "get_disk_hits", "block reads from disk", S(get_disk_hits), F_COUNT},
    {"store", "get_misses", "block reads missing", S(get_misses), F_COUNT},
    {"store", "puts", "blocks written", S(puts), F_COUNT},
    {"store", "put_existing", "blocks already there", S(put_existing), F_COUNT},
    {"store", "evictions", "disk evictions", S(evictions), F_COUNT},
    {"store", "hot_evictions", "hot tier evictions", S(hot_evictions), F_COUNT},
    {"store", "checksum_failures", "bad checksums", S(checksum_failures), F_COUNT},
    {"broker", "broker_instance", "broker instance", S(broker_instance), F_HEX},
    {"broker", "uptime_s", "uptime (s)", S(uptime_s), F_SECONDS},
    {"broker", "workers", "workers", S(workers), F_U32},
    {"broker", "block_tokens", "tokens per block", S(block_tokens), F_U32},
    {"broker", "clients", "clients", S(clients), F_COUNT},
    {"broker", "reclaimed_clients", "clients reclaimed", S(reclaimed_clients), F_COUNT},
    {"broker", "arenas", "arenas", S(arenas), F_COUNT},
    {"broker", "arena_bytes", "arena bytes", S(arena_bytes), F_BYTES},
    {"broker", "reclaimed_arenas", "arenas reclaimed", S(reclaimed_arenas), F_COUNT},
    {"broker", "sessions", "live sessions", S(sessions), F_COUNT},
    {"broker", "reclaimed_sessions", "sessions reclaimed", S(reclaimed_sessions), F_COUNT},
    {"broker", "requests", "requests", S(requests), F_COUNT},
    {"broker", "errors", "errors", S(errors), F_COUNT},
    {"broker", "stale_tokens", "stale tokens (after a restart; not errors)", S(stale_tokens),
     F_COUNT},
    {"broker", "inflight", "in flight", S(inflight), F_COUNT},
    {"broker", "client_index_lookups", "lookups answered by clients' index",
     S(reported_index_lookups), F_COUNT},
    {"broker", "reloads", "reloads applied", S(reloads), F_COUNT},
    {"broker", "reload_failures", "reloads refused", S(reload_failures), F_COUNT},
    {"broker", "registry_generation", "configuration generation", S(registry_generation),
     F_COUNT},
    /* the remote tier (all 0 without a [remote] section) */
    {"remote tier", "remote", "remote tier configured (1: [remote])", S(remote), F_U32},
    {"remote tier", "remote_up", "cluster answering (1: up)", S(remote_up), F_U32},
    {"remote tier", "remote_hits", "blocks read from the cluster (hits)", S(remote_hits),
     F_COUNT},
    {"remote tier", "remote_misses", "blocks asked for and not there (misses)",
     S(remote_misses), F_COUNT},
    {"remote tier", "remote_bytes_read", "bytes read", S(remote_bytes_read), F_BYTES},
    {"remote tier", "remote_writes", "blocks written", S(remote_writes), F_COUNT},
    {"remote tier", "remote_bytes_written", "bytes written", S(remote_bytes_written), F_BYTES},
    {"remote tier", "remote_errors", "errors (failed operations + refused values)",
     S(remote_errors), F_COUNT},
    {"remote tier", "remote_invalid", "values refused (checksum, namespace, chain)",
     S(remote_invalid), F_COUNT},
    {"remote tier", "remote_write_errors", "writes given up", S(remote_write_errors), F_COUNT},
    {"remote tier", "remote_queue_drops", "writes dropped (queue full)", S(remote_queue_drops),
     F_COUNT},
    {"remote tier", "remote_pending", "writes waiting", S(remote_pending), F_COUNT},
    {"remote tier", "remote_probes", "lookup remainders asked", S(remote_probes), F_COUNT},
    {"remote tier", "remote_probe_hit_blocks", "lookup remainder blocks found",
     S(remote_probe_hit_blocks), F_COUNT},
    {"remote tier", "remote_fetches", "get remainders asked", S(remote_fetches), F_COUNT},
    {"remote tier", "remote_inserted", "fetched blocks kept locally", S(remote_inserted),
     F_COUNT},
    {"remote tier", "remote_state_changes", "up/down changes", S(remote_state_changes),
     F_COUNT},
    {"remote tier", "remote_replace_records", "replaces announced on the replace log",
     S(remote_replace_records), F_COUNT},
    {"remote tier", "remote_refreshed", "local copies refreshed after another broker's replace",
     S(remote_refreshed), F_COUNT},
    {"remote tier", "remote_replace_log_resets", "replace log found rewritten (read from 0)",
     S(remote_replace_log_resets), F_COUNT},
};
#undef S

static uint64_t u64_at(const scdb_stat *s, const field *f)
{
    const char *p = (const char *)s + f->off;
    uint64_t v;
    uint32_t w;
    if (f->f == F_U32) {
        memcpy(&w, p, sizeof w);
        return w;
    }
    memcpy(&v, p, sizeof v);
    return v;
}

static double dbl_at(const scdb_stat *s, const field *f)
{
    double v;
    memcpy(&v, (const char *)s + f->off, sizeof v);
    return v;
}

static void print_json(const scdb_stat *s)
{
    printf("{");
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const field *f = &FIELDS[i];
        printf("%s\"%s\": ", i ? ", " : "", f->key);
        if (f->f == F_SECONDS)
            printf("%.3f", dbl_at(s, f));
        else if (f->f == F_HEX)
            printf("\"%016llx\"", (unsigned long long)u64_at(s, f));
        else
            printf("%llu", (unsigned long long)u64_at(s, f));
    }
    printf(", \"ops\": {");
    for (int i = 0; i < s->n_ops; i++)
        printf("%s\"%s\": {\"count\": %llu, \"errors\": %llu, \"mean_us\": %.1f, "
               "\"max_us\": %.1f}", i ? ", " : "", s->ops[i].op,
               (unsigned long long)s->ops[i].count, (unsigned long long)s->ops[i].errors,
               s->ops[i].count ? s->ops[i].total_ns / 1e3 / (double)s->ops[i].count : 0.0,
               s->ops[i].max_ns / 1e3);
    printf("}}\n");
}

static void bytes_text(uint64_t v, char *out, size_t len)
{
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int u = -1;
    while (x >= 1024 && u < 3) {
        x /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, len, "%llu", (unsigned long long)v);
    else
        snprintf(out, len, "%llu (%.1f %s)", (unsigned long long)v, x, units[u]);
}

static void print_table(const scdb_stat *s)
{
    const char *section = NULL;

    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const field *f = &FIELDS[i];
        char v[96];
        uint64_t u = f->f == F_SECONDS ? 0 : u64_at(s, f);
        if (!section || strcmp(section, f->section)) {
            printf("%s| %s | |\n|---|---|\n", section ? "\n" : "", f->section);
            section = f->section;
        }
        switch (f->f) {
        case F_BYTES: bytes_text(u, v, sizeof v); break;
        case F_CAPACITY:
            if (u) bytes_text(u, v, sizeof v);
            else snprintf(v, sizeof v, "unbounded");
            break;
        case F_HOT_CAPACITY:
            if (u) bytes_text(u, v, sizeof v);
            else snprintf(v, sizeof v, "none (no hot tier)");
            break;
        case F_SECONDS: snprintf(v, sizeof v, "%.1f", dbl_at(s, f)); break;
        case F_HEX: snprintf(v, sizeof v, "%016llx", (unsigned long long)u); break;
        default: snprintf(v, sizeof v, "%llu", (unsigned long long)u); break;
        }
        printf("| %s | %s |\n", f->label, v);
    }
    printf("\n| request | count | errors | mean µs | max µs |\n|---|---|---|---|---|\n");
    for (int i = 0; i < s->n_ops; i++)
        printf("| %s | %llu | %llu | %.1f | %.1f |\n", s->ops[i].op,
               (unsigned long long)s->ops[i].count, (unsigned long long)s->ops[i].errors,
               s->ops[i].count ? s->ops[i].total_ns / 1e3 / (double)s->ops[i].count : 0.0,
               s->ops[i].max_ns / 1e3);
}

static void help(void)
{
    printf("usage: scdb stats [--json] [--watch SECONDS [--count N]] [--endpoint URL]\n"
           "                  [--timeout-ms N]\n\n"
           "Print the broker's and the store's counters: blocks and tiers with their\n"
           "capacities (0 = unbounded), block reads by tier, the remote tier (hits,\n"
           "misses, bytes, errors, write-queue drops), clients, arenas, live\n"
           "sessions, requests, errors (requests that only carried a token from before a\n"
           "broker restart are counted apart, as stale tokens), reloads, and\n"
           "per-request counts and latencies.  The table and the JSON hold the same\n"
           "fields.\n\n"
           "options:\n"
           "  --json              one JSON object (per refresh, one per line)\n"
           "  --watch SECONDS     refresh every SECONDS (a TTY is cleared each time)\n"
           "  --count N           with --watch: stop after N refreshes (default: never)\n");
    cli_endpoint_help(stdout);
    printf("  --timeout-ms N      per-request timeout (default 5000)\n"
           "  -h, --help          this text\n\n"
           "exit codes: 0 ok, 1 the broker refused the request, 2 usage error, 3 no\n"
           "broker answered (with --watch: at the last refresh).\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "scdb stats: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try scdb stats --help)\n");
    return EXIT_USAGE;
}

int cli_cmd_stats(int argc, char **argv)
{
    const char *endpoint = NULL;
    int json = 0, timeout_ms = 0, rc = 0;
    long count = 0;
    double watch = 0;
    scdb *h = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help();
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--endpoint") && strcmp(a, "--watch") && strcmp(a, "--count") &&
            strcmp(a, "--timeout-ms"))
            return usage_error("unknown option %s", a);
        if (i + 1 >= argc) return usage_error("option %s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--endpoint")) {
            endpoint = v;
        } else if (!strcmp(a, "--watch")) {
            watch = strtod(v, &end);
            if (end == v || *end || !(watch > 0) || watch > 86400)
                return usage_error("--watch takes seconds > 0, not '%s'", v);
        } else {
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 1 || n > 1 << 30)
                return usage_error("bad number '%s'", v);
            if (!strcmp(a, "--count")) count = n;
            else timeout_ms = (int)n;
        }
    }
    if (count && !watch) return usage_error("%s", "--count goes with --watch");

    scdb_opts o = {.endpoint = endpoint, .timeout_ms = timeout_ms, .no_heartbeat = 1,
                   .name = "stats"};
    scdb_err e;
    if ((rc = cli_connect("stats", &o, &h)) >= 0) return rc;
    for (long n = 0;; n++) {
        scdb_stat s;
        if (watch && n) {
            struct timespec ts = {(time_t)watch, (long)((watch - floor(watch)) * 1e9)};
            nanosleep(&ts, NULL);
        }
        e = scdb_stats(h, &s);
        if (e) {
            fprintf(stderr, "scdb stats: %s%s%s\n", scdb_strerror(e),
                    *scdb_last_error(h) ? ": " : "", scdb_last_error(h));
            rc = e == SCDB_ETIMEDOUT ? EXIT_UNREACHABLE : EXIT_REFUSED;
            if (!watch) break;
        } else {
            rc = 0;
            if (watch && !json && isatty(1)) printf("\033[H\033[2J");
            if (json) {
                print_json(&s);
            } else {
                if (watch) printf("scdb stats, every %g s\n\n", watch);
                print_table(&s);
            }
            fflush(stdout);
        }
        if (!watch || (count && n + 1 >= count)) break;
    }
    scdb_close(&h);
    return rc;
}
