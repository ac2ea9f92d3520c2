/* cli_util.c — what the client subcommands share: connecting with one
 * message and one exit-code mapping, reading a prompt (scdb_cli.h). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scdb.h"
#include "scdb_cli.h"
#include "scdb_common.h"

int cli_connect(const char *cmd, const scdb_opts *o, scdb **h)
{
    scdb_opts oo = *o;
    char ep[512], from[PATH_MAX + 128];
    scdb_err e;

    if (!oo.endpoint || !*oo.endpoint)
        oo.endpoint = cli_endpoint(ep, sizeof ep, from, sizeof from);
    else
        snprintf(from, sizeof from, "--endpoint");
    e = scdb_connect(&oo, h);
    if (e == SCDB_OK) return -1;
    fprintf(stderr, "scdb %s: %s %s (%s): %s (%s)\n", cmd,
            e == SCDB_EACCESS || e == SCDB_EAUTH ? "no access to the broker at"
                                                 : "no broker answered at",
            oo.endpoint, from,
            scdb_connect_error(), scdb_strerror(e));
    if (e == SCDB_ETIMEDOUT || e == SCDB_ENOTFOUND || e == SCDB_ECLOSED)
        return SCDB_CLI_UNREACHABLE;
    return e == SCDB_EINVAL ? SCDB_CLI_USAGE : SCDB_CLI_REFUSED;
}

/* A whole input file: a regular file, or anything else that reads to its
 * end (a pipe, /dev/stdin).  -1 when read, else an exit code with a message
 * that says what went wrong. */
int cli_read_input(const char *cmd, const char *opt, const char *path, char **out, size_t *len)
{
    scdb_err e = scdb_read_file(path, (size_t)1 << 40, out, len);
    FILE *f;

    if (e == SCDB_OK) return -1;
    if (e == SCDB_EIO && (f = fopen(path, "rb"))) {   /* not a regular file */
        e = scdb_read_stream(f, (size_t)1 << 40, out, len);
        fclose(f);
        if (e == SCDB_OK) return -1;
    }
    if (e == SCDB_ENOTFOUND)
        fprintf(stderr, "scdb %s: %s %s: no such file\n", cmd, opt, path);
    else if (e == SCDB_ETOOBIG)
        fprintf(stderr, "scdb %s: %s %s: larger than 1 TiB\n", cmd, opt, path);
    else
        fprintf(stderr, "scdb %s: %s %s: cannot read it: %s (%s)\n", cmd, opt, path,
                errno ? strerror(errno) : "read error", scdb_strerror(e));
    return SCDB_CLI_REFUSED;
}

int cli_read_tokens(const char *cmd, const char *path, int is_text, int32_t **out, size_t *n)
{
    char *buf = NULL;
    size_t len = 0, cap = 0, k = 0;
    int32_t *t = NULL;
    int rc = cli_read_input(cmd, is_text ? "--text" : "--tokens", path, &buf, &len);

    if (rc >= 0) return rc;
    if (is_text) {
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
                fprintf(stderr, "scdb %s: %s: bad token near byte %zu\n", cmd, path,
                        (size_t)(p - buf));
                free(buf);
                free(t);
                return SCDB_CLI_REFUSED;
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
        fprintf(stderr, "scdb %s: out of memory\n", cmd);
        return SCDB_CLI_REFUSED;
    }
    *out = t;
    *n = k;
    return -1;
}

void cli_sibling_path(const char *path, const char *ext, char *out, size_t len)
{
    size_t l = strlen(path), el = strlen(".safetensors");
    if (l > el && !strcmp(path + l - el, ".safetensors"))
        snprintf(out, len, "%.*s%s", (int)(l - el), path, ext);
    else
        snprintf(out, len, "%s%s", path, ext);
}
