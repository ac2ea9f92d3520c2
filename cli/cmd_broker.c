/* cmd_broker.c — the broker subcommands of `scdb`: serve, put, lookup, get,
 * stats.  put/lookup/get/stats are thin libscdb clients; serve runs the
 * daemon in the foreground.  Exit codes: 0 ok, 1 the broker refused the
 * request or a file could not be used, 2 usage error, 3 no broker answered. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "safetensors.h"
#include "scdb.h"
#include "wire.h"

int scdb_cmd_serve(int argc, char **argv);
int scdb_cmd_put(int argc, char **argv);
int scdb_cmd_lookup(int argc, char **argv);
int scdb_cmd_get(int argc, char **argv);
int scdb_cmd_stats(int argc, char **argv);

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

int scdb_cmd_serve(int argc, char **argv)
{
    if (argc > 0) argv[0] = (char *)"scdb serve";    /* for its usage lines */
    return scdb_broker_main(argc, argv);
}

/* ------------------------------------------------------------ options */

typedef struct cli {
    const char *cmd;
    const char *endpoint, *model, *codebook, *text, *tokens, *payload, *out;
    int timeout_ms, first_block, pos0, json, copy, producer;
} cli;

static const char common_help[] =
"  --endpoint URL      broker endpoint (default $SCDB_ENDPOINT or %s)\n"
"  --timeout-ms N      per-request timeout (default 5000)\n";

static const char model_help[] =
"  --model NAME        the model to register as (required)\n"
"  --codebook ID       codebook / namespace (default raw/NAME: the model's raw KV)\n"
"  --text FILE         the prompt as bytes (byte tokens), or\n"
"  --tokens FILE       token ids, whitespace- or comma-separated integers\n";

static const char exit_help[] =
"\nexit codes: 0 ok, 1 the broker refused the request (message on stderr) or a\n"
"file could not be read or written, 2 usage error, 3 no broker answered.\n";

static void help(const char *cmd)
{
    char ep[300];
    scdb_default_endpoint(ep, sizeof ep);
    if (!strcmp(cmd, "put")) {
        printf("usage: scdb put --model NAME (--text FILE | --tokens FILE) --payload FILE\n"
               "                [--first-block N] [--codebook ID] [--endpoint URL]\n\n"
               "Store the full blocks of a prompt as a producer: FILE holds the blocks'\n"
               "payloads back to back (for raw/NAME: each block's K then V, F16 or F32 as\n"
               "the model's raw_dtype, see schema/wire.h), starting at block N (default 0;\n"
               "earlier blocks must be stored).  Prints how many leading blocks are stored.\n\n"
               "options:\n%s", model_help);
        printf("  --payload FILE      block payloads (required)\n"
               "  --first-block N     first block in FILE (default 0)\n"
               "  --json              print the result as JSON\n");
    } else if (!strcmp(cmd, "lookup")) {
        printf("usage: scdb lookup --model NAME (--text FILE | --tokens FILE) [--codebook ID]\n"
               "                   [--endpoint URL] [--json]\n\n"
               "Print the longest stored prefix of a prompt (in tokens and blocks) under the\n"
               "codebook, as the consumer NAME would see it.\n\n"
               "options:\n%s", model_help);
        printf("  --json              print the result as JSON\n");
    } else if (!strcmp(cmd, "get")) {
        printf("usage: scdb get --model NAME (--text FILE | --tokens FILE) [--out FILE]\n"
               "                [--pos0 P] [--copy] [--codebook ID] [--endpoint URL]\n\n"
               "Decode the longest stored prefix of a prompt into NAME's KV layout through a\n"
               "shared-memory arena and report it; with --out, write it as safetensors:\n"
               "pos I32 [n], k F32 [n_layers, n, kv_dim] (after RoPE), v F32 [same].\n\n"
               "options:\n%s", model_help);
        printf("  --out FILE          write the decoded KV (default: do not write)\n"
               "  --pos0 P            absolute position of the first token (default 0)\n"
               "  --copy              copy into a private cache (scdb_get_copy) instead of\n"
               "                      reading the arena in place\n"
               "  --json              print the result as JSON\n");
    } else {
        printf("usage: scdb stats [--endpoint URL] [--json]\n\n"
               "Print the broker's and the store's counters: clients, arenas, blocks, hot\n"
               "tier, hits and misses, and per-request counts and latencies; per tier (hot,\n"
               "disk, remote) hits, misses, bytes, errors and remote write-queue drops.\n\n"
               "options:\n"
               "  --json              print JSON instead of a table\n");
    }
    printf(common_help, ep);
    printf("  -h, --help          this text\n%s", exit_help);
}

static int usage_error(const cli *c, const char *fmt, const char *arg)
{
    fprintf(stderr, "scdb %s: ", c->cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try scdb %s --help)\n", c->cmd);
    return EXIT_USAGE;
}

/* Parse argv; returns -1 to go on, else an exit code. */
static int parse(cli *c, int argc, char **argv, int need_model)
{
    memset(c, 0, sizeof *c);
    c->cmd = argc > 0 ? argv[0] : "?";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **sval = NULL;
        int *ival = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(c->cmd);
            return 0;
        }
        if (!strcmp(a, "--json")) { c->json = 1; continue; }
        if (!strcmp(a, "--copy")) { c->copy = 1; continue; }
        if (!strcmp(a, "--endpoint")) sval = &c->endpoint;
        else if (!strcmp(a, "--model")) sval = &c->model;
        else if (!strcmp(a, "--codebook")) sval = &c->codebook;
        else if (!strcmp(a, "--text")) sval = &c->text;
        else if (!strcmp(a, "--tokens")) sval = &c->tokens;
        else if (!strcmp(a, "--payload") && !strcmp(c->cmd, "put")) sval = &c->payload;
        else if (!strcmp(a, "--out") && !strcmp(c->cmd, "get")) sval = &c->out;
        else if (!strcmp(a, "--timeout-ms")) ival = &c->timeout_ms;
        else if (!strcmp(a, "--first-block") && !strcmp(c->cmd, "put")) ival = &c->first_block;
        else if (!strcmp(a, "--pos0") && !strcmp(c->cmd, "get")) ival = &c->pos0;
        else return usage_error(c, "unknown option %s", a);
        if (i + 1 >= argc) return usage_error(c, "option %s needs a value", a);
        if (sval) {
            *sval = argv[++i];
        } else {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > 1 << 30) return usage_error(c, "bad number '%s'", argv[i]);
            *ival = (int)v;
        }
    }
    if (need_model) {
        if (!c->model) return usage_error(c, "%s", "--model NAME is required");
        if (!c->text == !c->tokens)
            return usage_error(c, "%s", "give exactly one of --text FILE and --tokens FILE");
    }
    return -1;
}

static int read_tokens(const cli *c, int32_t **out, size_t *n)
{
    const char *path = c->text ? c->text : c->tokens;
    char *buf = NULL;
    size_t len = 0, cap = 0, k = 0;
    int32_t *t = NULL;
    scdb_err e = scdb_read_file(path, 1u << 30, &buf, &len);

    if (e) {
        fprintf(stderr, "scdb %s: %s: %s\n", c->cmd, path, scdb_strerror(e));
        return EXIT_REFUSED;
    }
    if (c->text) {
        t = malloc((len ? len : 1) * sizeof *t);
        for (size_t i = 0; t && i < len; i++) t[i] = (unsigned char)buf[i];
        k = len;
    } else {
        char *p = buf, *end;
        for (;;) {
            long v;
            while (*p && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ','))
                p++;
            if (!*p) break;
            errno = 0;
            v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v > INT32_MAX) {
                fprintf(stderr, "scdb %s: %s: bad token near byte %zu\n", c->cmd, path,
                        (size_t)(p - buf));
                free(buf);
                free(t);
                return EXIT_REFUSED;
            }
            if (k == cap) {
                int32_t *g = realloc(t, (cap = cap ? 2 * cap : 1024) * sizeof *t);
                if (!g) break;
                t = g;
            }
            t[k++] = (int32_t)v;
            p = end;
        }
    }
    free(buf);
    if (!t && k) {
        fprintf(stderr, "scdb %s: out of memory\n", c->cmd);
        return EXIT_REFUSED;
    }
    *out = t;
    *n = k;
    return -1;
}

static int broker_error(const cli *c, const char *what, scdb_err e, scdb *h)
{
    fprintf(stderr, "scdb %s: %s: %s%s%s\n", c->cmd, what, scdb_strerror(e),
            h && *scdb_last_error(h) ? ": " : "", h ? scdb_last_error(h) : "");
    return e == SCDB_ETIMEDOUT ? EXIT_UNREACHABLE : EXIT_REFUSED;
}

/* Connect and (if model) register.  Returns -1 to go on, else an exit code. */
static int open_handle(const cli *c, scdb_role role, scdb **h, scdb_info *info)
{
    scdb_opts o = {.endpoint = c->endpoint, .timeout_ms = c->timeout_ms, .no_heartbeat = 1,
                   .name = c->cmd};
    scdb_err e = scdb_connect(&o, h);
    char ep[300];

    if (e) {
        fprintf(stderr, "scdb %s: no broker answered at %s: %s\n", c->cmd,
                c->endpoint ? c->endpoint : scdb_default_endpoint(ep, sizeof ep),
                scdb_strerror(e));
        return e == SCDB_ETIMEDOUT ? EXIT_UNREACHABLE : EXIT_REFUSED;
    }
    if (c->model) {
        e = scdb_register(*h, role, c->model, c->codebook, info);
        if (e) {
            int rc = broker_error(c, "register", e, *h);
            scdb_close(h);
            return rc;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------- put */

int scdb_cmd_put(int argc, char **argv)
{
    cli c;
    scdb *h = NULL;
    scdb_info info;
    scdb_put_result r;
    int32_t *tok = NULL;
    size_t n = 0, plen = 0;
    char *pl = NULL;
    int rc = parse(&c, argc, argv, 1);
    scdb_err e;

    if (rc >= 0) return rc;
    if (!c.payload) return usage_error(&c, "%s", "--payload FILE is required");
    if ((rc = read_tokens(&c, &tok, &n)) >= 0) return rc;
    e = scdb_read_file(c.payload, (size_t)1 << 40, &pl, &plen);
    if (e) {
        fprintf(stderr, "scdb put: %s: %s\n", c.payload, scdb_strerror(e));
        free(tok);
        return EXIT_REFUSED;
    }
    if ((rc = open_handle(&c, SCDB_PRODUCER, &h, &info)) < 0) {
        e = scdb_put(h, tok, n, (uint32_t)c.first_block, pl, plen, &r);
        if (e) {
            rc = broker_error(&c, "put", e, h);
        } else {
            if (c.json)
                printf("{\"n_full\": %u, \"n_stored\": %u, \"n_new\": %u, \"block_tokens\": %u}\n",
                       r.n_full, r.n_stored, r.n_new, info.block_tokens);
            else
                printf("stored %u of %u full blocks (%u new), %u tokens per block\n", r.n_stored,
                       r.n_full, r.n_new, info.block_tokens);
            rc = 0;
        }
        scdb_close(&h);
    }
    free(pl);
    free(tok);
    return rc;
}

/* ------------------------------------------------------------- lookup */

int scdb_cmd_lookup(int argc, char **argv)
{
    cli c;
    scdb *h = NULL;
    scdb_info info;
    scdb_lookup_result r;
    int32_t *tok = NULL;
    size_t n = 0;
    int rc = parse(&c, argc, argv, 1);
    scdb_err e;

    if (rc >= 0) return rc;
    if ((rc = read_tokens(&c, &tok, &n)) >= 0) return rc;
    if ((rc = open_handle(&c, SCDB_CONSUMER, &h, &info)) < 0) {
        e = scdb_lookup(h, tok, n, &r);
        if (e) {
            rc = broker_error(&c, "lookup", e, h);
        } else {
            if (c.json)
                printf("{\"tokens\": %zu, \"matched_tokens\": %u, \"n_matched\": %u, "
                       "\"n_full\": %u, \"block_tokens\": %u}\n",
                       n, r.matched_tokens, r.n_matched, r.n_full, info.block_tokens);
            else
                printf("matched %u of %zu tokens (%u of %u full blocks of %u)\n",
                       r.matched_tokens, n, r.n_matched, r.n_full, info.block_tokens);
            rc = 0;
        }
        scdb_close(&h);
    }
    free(tok);
    return rc;
}

/* ---------------------------------------------------------------- get */

static int write_kv(const cli *c, const scdb_kv_cache *kv, int n)
{
    scdb_st_writer *w = NULL;
    int64_t pshape[1] = {n};
    int64_t kshape[3] = {kv->n_layers, n, scdb_kv_dim(kv)};
    scdb_err e = scdb_st_writer_new(&w);

    /* the cache's capacity is n, so K and V are contiguous [L][n][D] */
    if (!e) e = scdb_st_writer_add(w, "pos", SCDB_I32, 1, pshape, kv->pos);
    if (!e) e = scdb_st_writer_add(w, "k", SCDB_F32, 3, kshape, kv->k);
    if (!e) e = scdb_st_writer_add(w, "v", SCDB_F32, 3, kshape, kv->v);
    if (!e) e = scdb_st_writer_meta(w, "model", c->model);
    if (!e) e = scdb_st_writer_write(w, c->out);
    scdb_st_writer_free(&w);
    if (e) {
        fprintf(stderr, "scdb get: %s: %s\n", c->out, scdb_strerror(e));
        return EXIT_REFUSED;
    }
    return 0;
}

int scdb_cmd_get(int argc, char **argv)
{
    cli c;
    scdb *h = NULL;
    scdb_info info;
    scdb_lookup_result lr;
    scdb_get_result r = {0};
    scdb_arena *a = NULL;
    scdb_kv_cache *own = NULL, *kv = NULL;
    int32_t *tok = NULL;
    size_t n = 0;
    double t0;
    int rc = parse(&c, argc, argv, 1);
    scdb_err e;

    if (rc >= 0) return rc;
    if ((rc = read_tokens(&c, &tok, &n)) >= 0) return rc;
    if ((rc = open_handle(&c, SCDB_CONSUMER, &h, &info)) >= 0) goto out;
    e = scdb_lookup(h, tok, n, &lr);
    if (e) {
        rc = broker_error(&c, "lookup", e, h);
        goto out;
    }
    t0 = scdb_now();
    if (lr.matched_tokens) {
        if (c.copy) {
            e = scdb_kv_cache_new(info.n_layers, info.n_kv_heads, info.head_dim,
                                  (int)lr.matched_tokens, &own);
            if (!e) e = scdb_get_copy(h, tok, n, own, 0, c.pos0, &r);
            kv = own;
        } else {
            e = scdb_arena_new(h, (int)lr.matched_tokens, &a);
            if (!e) e = scdb_get(h, tok, n, a, 0, c.pos0, &r);
            kv = a ? scdb_arena_cache(a) : NULL;
        }
        if (e) {
            rc = broker_error(&c, "get", e, h);
            goto out;
        }
    }
    if (c.json)
        printf("{\"tokens\": %zu, \"tokens_written\": %u, \"n_matched\": %u, \"n_full\": %u, "
               "\"decode_ms\": %.3f, \"total_ms\": %.3f}\n",
               n, r.tokens_written, r.n_matched, r.n_full, r.decode_ns / 1e6,
               (scdb_now() - t0) * 1e3);
    else
        printf("decoded %u of %zu tokens into %s's KV (%s): decode %.3f ms, round trip %.3f ms\n",
               r.tokens_written, n, c.model, c.copy ? "copied" : "in the arena",
               r.decode_ns / 1e6, (scdb_now() - t0) * 1e3);
    rc = 0;
    if (c.out) {
        if (r.tokens_written)
            rc = write_kv(&c, kv, (int)r.tokens_written);
        else
            fprintf(stderr, "scdb get: nothing stored for this prompt; %s not written\n", c.out);
    }
out:
    scdb_arena_free(&a);
    scdb_kv_cache_free(&own);
    scdb_close(&h);
    free(tok);
    return rc;
}

/* -------------------------------------------------------------- stats */

/* Per-tier hits, misses, bytes, errors and queue drops (hot, disk, remote)
 * as a markdown table or a JSON object ("tiers"). */
static void print_tiers(const scdb_stat *s, int json)
{
    unsigned long long hot_miss = s->gets - s->get_hot_hits;
    if (json) {
        printf("\"tiers\": {\"hot\": {\"hits\": %llu, \"misses\": %llu, \"bytes\": %llu}, "
               "\"disk\": {\"hits\": %llu, \"misses\": %llu, \"bytes\": %llu, "
               "\"errors\": %llu}", (unsigned long long)s->get_hot_hits, hot_miss,
               (unsigned long long)s->hot_bytes, (unsigned long long)s->get_disk_hits,
               (unsigned long long)s->get_misses, (unsigned long long)s->disk_bytes,
               (unsigned long long)s->checksum_failures);
        if (s->remote)
            printf(", \"remote\": {\"up\": %s, \"hits\": %llu, \"misses\": %llu, "
                   "\"bytes_read\": %llu, \"bytes_written\": %llu, \"writes\": %llu, "
                   "\"errors\": %llu, \"invalid\": %llu, \"write_errors\": %llu, "
                   "\"queue_drops\": %llu, \"pending\": %llu, \"probes\": %llu, "
                   "\"probe_hit_blocks\": %llu, \"kept_locally\": %llu}",
                   s->remote_up ? "true" : "false", (unsigned long long)s->remote_hits,
                   (unsigned long long)s->remote_misses, (unsigned long long)s->remote_bytes_read,
                   (unsigned long long)s->remote_bytes_written,
                   (unsigned long long)s->remote_writes, (unsigned long long)s->remote_errors,
                   (unsigned long long)s->remote_invalid,
                   (unsigned long long)s->remote_write_errors,
                   (unsigned long long)s->remote_queue_drops,
                   (unsigned long long)s->remote_pending, (unsigned long long)s->remote_probes,
                   (unsigned long long)s->remote_probe_hit_blocks,
                   (unsigned long long)s->remote_inserted);
        printf("}, ");
        return;
    }
    printf("\n| tier | hits | misses | bytes | errors | queue drops |\n"
           "|---|---|---|---|---|---|\n");
    printf("| hot | %llu | %llu | %llu held | | |\n", (unsigned long long)s->get_hot_hits,
           hot_miss, (unsigned long long)s->hot_bytes);
    printf("| disk | %llu | %llu | %llu held | %llu bad checksums | |\n",
           (unsigned long long)s->get_disk_hits, (unsigned long long)s->get_misses,
           (unsigned long long)s->disk_bytes, (unsigned long long)s->checksum_failures);
    if (s->remote)
        printf("| remote (%s) | %llu blocks | %llu blocks | %llu read, %llu written | %llu (%llu "
               "values refused, %llu writes given up) | %llu (%llu pending) |\n",
               s->remote_up ? "up" : "DOWN", (unsigned long long)s->remote_hits,
               (unsigned long long)s->remote_misses, (unsigned long long)s->remote_bytes_read,
               (unsigned long long)s->remote_bytes_written, (unsigned long long)s->remote_errors,
               (unsigned long long)s->remote_invalid, (unsigned long long)s->remote_write_errors,
               (unsigned long long)s->remote_queue_drops, (unsigned long long)s->remote_pending);
    else
        printf("| remote | (none: no [remote] section) | | | | |\n");
}

int scdb_cmd_stats(int argc, char **argv)
{
    cli c;
    scdb *h = NULL;
    scdb_stat s;
    int rc = parse(&c, argc, argv, 0);
    scdb_err e;

    if (rc >= 0) return rc;
    if ((rc = open_handle(&c, SCDB_CONSUMER, &h, NULL)) >= 0) return rc;
    e = scdb_stats(h, &s);
    if (e) {
        rc = broker_error(&c, "stats", e, h);
        scdb_close(&h);
        return rc;
    }
    scdb_close(&h);
    if (c.json) {
        printf("{\"blocks\": %llu, \"disk_bytes\": %llu, \"hot_blocks\": %llu, "
               "\"hot_bytes\": %llu, \"lookups\": %llu, \"lookup_hit_blocks\": %llu, "
               "\"gets\": %llu, \"get_hot_hits\": %llu, \"get_disk_hits\": %llu, "
               "\"puts\": %llu, \"evictions\": %llu, \"checksum_failures\": %llu, "
               "\"clients\": %llu, \"arenas\": %llu, \"arena_bytes\": %llu, "
               "\"requests\": %llu, \"errors\": %llu, \"reclaimed_clients\": %llu, "
               "\"sessions\": %llu, \"reclaimed_sessions\": %llu, \"uptime_s\": %.3f, \"workers\": %u, \"block_tokens\": %u, ",
               (unsigned long long)s.blocks, (unsigned long long)s.disk_bytes,
               (unsigned long long)s.hot_blocks, (unsigned long long)s.hot_bytes,
               (unsigned long long)s.lookups, (unsigned long long)s.lookup_hit_blocks,
               (unsigned long long)s.gets, (unsigned long long)s.get_hot_hits,
               (unsigned long long)s.get_disk_hits, (unsigned long long)s.puts,
               (unsigned long long)s.evictions, (unsigned long long)s.checksum_failures,
               (unsigned long long)s.clients, (unsigned long long)s.arenas,
               (unsigned long long)s.arena_bytes, (unsigned long long)s.requests,
               (unsigned long long)s.errors, (unsigned long long)s.reclaimed_clients,
               (unsigned long long)s.sessions, (unsigned long long)s.reclaimed_sessions,
               s.uptime_s, s.workers, s.block_tokens);
        print_tiers(&s, 1);
        printf("\"ops\": {");
        for (int i = 0; i < s.n_ops; i++)
            printf("%s\"%s\": {\"count\": %llu, \"errors\": %llu, \"mean_us\": %.1f, "
                   "\"max_us\": %.1f}", i ? ", " : "", s.ops[i].op,
                   (unsigned long long)s.ops[i].count, (unsigned long long)s.ops[i].errors,
                   s.ops[i].count ? s.ops[i].total_ns / 1e3 / (double)s.ops[i].count : 0.0,
                   s.ops[i].max_ns / 1e3);
        printf("}}\n");
        return 0;
    }
    printf("| store | |\n|---|---|\n");
    printf("| blocks | %llu (%llu bytes on disk, capacity %llu) |\n",
           (unsigned long long)s.blocks, (unsigned long long)s.disk_bytes,
           (unsigned long long)s.disk_capacity_bytes);
    printf("| hot tier | %llu blocks, %llu of %llu bytes |\n", (unsigned long long)s.hot_blocks,
           (unsigned long long)s.hot_bytes, (unsigned long long)s.hot_capacity_bytes);
    printf("| lookups | %llu (%llu blocks hit, %llu missed) |\n", (unsigned long long)s.lookups,
           (unsigned long long)s.lookup_hit_blocks, (unsigned long long)s.lookup_miss_blocks);
    printf("| block reads | %llu (%llu hot, %llu disk, %llu missing) |\n",
           (unsigned long long)s.gets, (unsigned long long)s.get_hot_hits,
           (unsigned long long)s.get_disk_hits, (unsigned long long)s.get_misses);
    printf("| blocks written | %llu (%llu already there), %llu evicted, %llu bad checksums |\n",
           (unsigned long long)s.puts, (unsigned long long)s.put_existing,
           (unsigned long long)s.evictions, (unsigned long long)s.checksum_failures);
    print_tiers(&s, 0);
    printf("\n| broker | |\n|---|---|\n");
    printf("| uptime | %.1f s, %u workers, %u-token blocks |\n", s.uptime_s, s.workers,
           s.block_tokens);
    printf("| clients | %llu (%llu reclaimed) |\n", (unsigned long long)s.clients,
           (unsigned long long)s.reclaimed_clients);
    printf("| arenas | %llu, %llu bytes (%llu reclaimed) |\n", (unsigned long long)s.arenas,
           (unsigned long long)s.arena_bytes, (unsigned long long)s.reclaimed_arenas);
    printf("| live sessions | %llu (%llu reclaimed) |\n", (unsigned long long)s.sessions,
           (unsigned long long)s.reclaimed_sessions);
    printf("| requests | %llu (%llu errors, %llu in flight) |\n",
           (unsigned long long)s.requests, (unsigned long long)s.errors,
           (unsigned long long)s.inflight);
    printf("\n| request | count | errors | mean µs | max µs |\n|---|---|---|---|---|\n");
    for (int i = 0; i < s.n_ops; i++)
        printf("| %s | %llu | %llu | %.1f | %.1f |\n", s.ops[i].op,
               (unsigned long long)s.ops[i].count, (unsigned long long)s.ops[i].errors,
               s.ops[i].count ? s.ops[i].total_ns / 1e3 / (double)s.ops[i].count : 0.0,
               s.ops[i].max_ns / 1e3);
    return 0;
}
