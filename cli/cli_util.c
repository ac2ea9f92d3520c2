/* cli_util.c — what the client subcommands share: connecting with one
 * message and one exit-code mapping (scdb_cli.h). */
#include <stdio.h>

#include "scdb.h"
#include "scdb_cli.h"
#include "wire.h"

int scdb_cli_connect(const char *cmd, const scdb_opts *o, scdb **h)
{
    scdb_err e = scdb_connect(o, h);
    char ep[300];

    if (e == SCDB_OK) return -1;
    fprintf(stderr, "scdb %s: no broker answered at %s: %s (%s)\n", cmd,
            o && o->endpoint && *o->endpoint ? o->endpoint
                                             : scdb_default_endpoint(ep, sizeof ep),
            scdb_connect_error(), scdb_strerror(e));
    if (e == SCDB_ETIMEDOUT || e == SCDB_ENOTFOUND || e == SCDB_ECLOSED)
        return SCDB_CLI_UNREACHABLE;
    return e == SCDB_EINVAL ? SCDB_CLI_USAGE : SCDB_CLI_REFUSED;
}
