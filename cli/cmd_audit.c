/* cmd_audit.c — checking a pair against the weights a consumer runs:
 *   scdb fingerprint DIR...   the weights fingerprint of model directories
 *                             (schema/FORMATS.md, "Weights fingerprint")
 *   scdb audit                measured quality of what a running broker
 *                             decodes for a consumer (below)
 * Exit codes: 0 ok, 1 refused / nothing measured / a file could not be
 * used, 2 usage error, 3 no broker answered. */
#include <stdio.h>
#include <string.h>

#include "scdb_cli.h"
#include "weights_fp.h"

int scdb_cmd_fingerprint(int argc, char **argv)
{
    int ret = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: scdb fingerprint DIR [DIR...]\n\n"
                   "Print the weights fingerprint of each model directory (scdb's own layout or a\n"
                   "Hugging Face checkpoint, one file or sharded): 32 hex digits over the tensors\n"
                   "the model computes with (schema/FORMATS.md, \"Weights fingerprint\"), the value\n"
                   "a pair records as consumer_fp and a consumer sends when it registers.  One\n"
                   "line per directory: FINGERPRINT  DIR.  Exit 1 if a directory could not be\n"
                   "fingerprinted (the reason on stderr).\n");
            return 0;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "scdb fingerprint: unknown option '%s' (try scdb fingerprint --help)\n", argv[i]);
            return SCDB_CLI_USAGE;
        }
    }
    for (int i = 1; i < argc; i++) {
        char fp[SCDB_WEIGHTS_FP_HEX + 1], err[512] = "";
        scdb_err e = scdb_weights_fp(argv[i], fp, err, sizeof err);
        n++;
        if (e) {
            fprintf(stderr, "scdb fingerprint: %s (%s)\n", err[0] ? err : argv[i], scdb_strerror(e));
            ret = SCDB_CLI_REFUSED;
            continue;
        }
        printf("%s  %s\n", fp, argv[i]);
    }
    if (!n) {
        fprintf(stderr, "scdb fingerprint: give one or more model directories (try scdb fingerprint --help)\n");
        return SCDB_CLI_USAGE;
    }
    return ret;
}
