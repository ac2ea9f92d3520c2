/* cmd_broker.c — the broker subcommands of `scdb`: serve, put, lookup, get
 * (stats is cmd_stats.c).  put/lookup/get are thin libscdb clients; serve
 * runs the daemon in the foreground.  Exit codes: 0 ok, 1 the broker refused the
 * request or a file could not be used, 2 usage error, 3 no broker answered. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker.h"
#include "safetensors.h"
#include "scdb.h"
#include "scdb_cli.h"
#include "wire.h"

int cli_cmd_serve(int argc, char **argv);
int cli_cmd_put(int argc, char **argv);
int cli_cmd_lookup(int argc, char **argv);
int cli_cmd_get(int argc, char **argv);

enum { EXIT_REFUSED = SCDB_CLI_REFUSED, EXIT_USAGE = SCDB_CLI_USAGE, EXIT_UNREACHABLE = SCDB_CLI_UNREACHABLE };

int cli_cmd_serve(int argc, char **argv)
{
    if (argc > 0) argv[0] = (char *)"scdb serve";    /* for its usage lines */
    return scdb_broker_main(argc, argv);
}

/* ------------------------------------------------------------ options */

typedef struct cli {
    const char *cmd;
    const char *endpoint, *model, *codebook, *text, *tokens, *payload, *out;
    int timeout_ms, first_block, pos0, json, copy, producer, replace;
    int patch, has_patch;      /* get --patch-layers */
} cli;

static const char common_help[] =
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
    if (!strcmp(cmd, "put")) {
        printf("usage: scdb put --model NAME (--text FILE | --tokens FILE) --payload FILE\n"
               "                [--first-block N] [--replace] [--codebook ID] [--endpoint URL]\n\n"
               "Store the full blocks of a prompt as a producer: FILE holds the blocks'\n"
               "payloads back to back (for raw/NAME: each block's K then V, F16 or F32 as\n"
               "the model's raw_dtype, see schema/wire.h), starting at block N (default 0;\n"
               "earlier blocks must be stored).  Blocks stored already are kept as they are\n"
               "unless --replace.  Prints how many leading blocks are stored.\n\n"
               "options:\n%s", model_help);
        printf("  --payload FILE      block payloads (required)\n"
               "  --first-block N     first block in FILE (default 0)\n"
               "  --replace           overwrite blocks stored already with these payloads\n"
               "                      (scdb_replace: for a producer that knows what it\n"
               "                      stored is wrong); consumers' later gets decode the\n"
               "                      new values, and blocks stored after them stay valid\n"
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
               "                [--pos0 P] [--copy] [--patch-layers K] [--codebook ID]\n"
               "                [--endpoint URL]\n\n"
               "Decode the longest stored prefix of a prompt into NAME's KV layout through a\n"
               "shared-memory arena and report it; with --out, write it as safetensors:\n"
               "pos I32 [n], k F32 [n_layers, n, kv_dim] (after RoPE), v F32 [same].\n\n"
               "options:\n%s", model_help);
        printf("  --out FILE          write the decoded KV (default: do not write)\n"
               "  --pos0 P            absolute position of the first token (default 0)\n"
               "  --copy              copy into a private cache (scdb_get_copy) instead of\n"
               "                      reading the arena in place\n"
               "  --patch-layers K    SCD pairs: decode with K patch layers (default: the\n"
               "                      pair's; 0: REUSE everywhere, faster, lower quality)\n"
               "  --json              print the result as JSON\n");
    }
    cli_endpoint_help(stdout);
    printf("%s", common_help);
    printf("  -h, --help          this text\n%s", exit_help);
}

static int usage_error(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const cli *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "scdb %s: ", c->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
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
        if (!strcmp(a, "--replace") && !strcmp(c->cmd, "put")) { c->replace = 1; continue; }
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
        else if (!strcmp(a, "--patch-layers") && !strcmp(c->cmd, "get")) {
            ival = &c->patch;
            c->has_patch = 1;
        }
        else return usage_error(c, "unknown option %s", a);
        if (i + 1 >= argc) return usage_error(c, "option %s needs a value", a);
        if (sval) {
            *sval = argv[++i];
        } else {
            char *end;
            const char *arg = argv[++i];
            long v;
            errno = 0;
            v = strtol(arg, &end, 10);
            if (!*arg || *end || errno)
                return usage_error(c, "%s %s: not a whole number", a, arg);
            if (v < 0) return usage_error(c, "%s %s: must be 0 or more", a, arg);
            if (v > 1 << 30) return usage_error(c, "%s %s: at most %d", a, arg, 1 << 30);
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
    return cli_read_tokens(c->cmd, c->text ? c->text : c->tokens, c->text != NULL, out, n);
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
    scdb_err e;
    int rc = cli_connect(c->cmd, &o, h);

    if (rc >= 0) return rc;
    if (c->model) {
        e = scdb_register(*h, role, c->model, c->codebook, info);
        if (e) {
            rc = broker_error(c, "register", e, *h);
            scdb_close(h);
            return rc;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------- put */

int cli_cmd_put(int argc, char **argv)
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
    if ((rc = cli_read_input("put", "--payload", c.payload, &pl, &plen)) >= 0) {
        free(tok);
        return rc;
    }
    if (plen == 0) {
        free(tok);
        free(pl);
        return usage_error(&c, "--payload %s is empty: no block to put", c.payload);
    }
    if ((rc = open_handle(&c, SCDB_PRODUCER, &h, &info)) < 0) {
        if (!c.replace) {
            e = scdb_put(h, tok, n, (uint32_t)c.first_block, pl, plen, &r);
        } else {
            /* SCDB_EBUSY: a block was being read at that instant (the ones
             * before it are replaced); the call is safe to repeat */
            for (int tries = 0;; tries++) {
                e = scdb_replace(h, tok, n, (uint32_t)c.first_block, pl, plen, &r);
                if (e != SCDB_EBUSY || tries == 20) break;
                nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
            }
        }
        if (e) {
            rc = broker_error(&c, c.replace ? "replace" : "put", e, h);
        } else {
            if (c.json)
                printf("{\"n_full\": %u, \"n_stored\": %u, \"n_new\": %u, \"block_tokens\": %u, "
                       "\"replace\": %s}\n",
                       r.n_full, r.n_stored, r.n_new, info.block_tokens,
                       c.replace ? "true" : "false");
            else if (c.replace)
                printf("stored %u of %u full blocks (%u written, replacing any stored), %u "
                       "tokens per block\n", r.n_stored, r.n_full, r.n_new, info.block_tokens);
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

int cli_cmd_lookup(int argc, char **argv)
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

int cli_cmd_get(int argc, char **argv)
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
    if (c.copy && c.has_patch) return usage_error(&c, "--patch-layers decodes into the arena: not with --copy");
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
            scdb_get_opts go = {.patch_layers = c.has_patch ? c.patch : -1};
            if (!e) e = scdb_get_ex(h, tok, n, a, 0, c.pos0, &go, &r);
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
