/*
 * scdb_cli.h — the `scdb` command's subcommands.  Each takes (argc, argv)
 * with argv[0] = the subcommand's name and returns a process exit code
 * (0 ok, 1 failure, 2 usage error).  Every subcommand answers --help.
 */
#ifndef SCDB_CLI_H
#define SCDB_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

int cli_cmd_models(int argc, char **argv);   /* cmd_models.c */
int cli_cmd_serve(int argc, char **argv);    /* cmd_broker.c */
int cli_cmd_put(int argc, char **argv);
int cli_cmd_lookup(int argc, char **argv);
int cli_cmd_get(int argc, char **argv);
int cli_cmd_stats(int argc, char **argv);
int cli_cmd_calibrate(int argc, char **argv); /* cmd_calibrate.c */
int cli_cmd_demo(int argc, char **argv);      /* cmd_demo.c */
int cli_cmd_train_policy(int argc, char **argv); /* cmd_train_policy_rl.c */
int cli_cmd_audit(int argc, char **argv);     /* cmd_audit.c */
int cli_cmd_fingerprint(int argc, char **argv);
int cli_cmd_export_gguf(int argc, char **argv); /* cmd_export_gguf.c */

/* The asset directory: $SCDB_DATA, else ../share/scdb beside the program
 * (scdb_data_dir). */
const char *cli_data_dir(void);

/* The endpoint a client subcommand uses without --endpoint (cli_endpoint.c:
 * $SCDB_ENDPOINT, a broker of the user's own on the per-user socket, the
 * installed service's configured endpoint, else the per-user socket) into
 * buf; where it came from, a phrase for messages, into from.  Returns buf. */
const char *cli_endpoint(char *buf, size_t len, char *from, size_t fromlen);
/* The installed configuration beside this program:
 * <prefix>/etc/scdb/scdb-broker.ini, or /etc/scdb/scdb-broker.ini for the
 * prefix /usr.  cli_endpoint.c */
void cli_installed_config(char *buf, size_t len);
/* The --endpoint lines of a client subcommand's --help: the order above,
 * and what it resolves to here and now.  cli_endpoint.c */
void cli_endpoint_help(FILE *f);

/* Exit codes of the client subcommands (put, lookup, get, stats). */
enum { SCDB_CLI_REFUSED = 1, SCDB_CLI_USAGE = 2, SCDB_CLI_UNREACHABLE = 3 };

struct scdb_opts;
struct scdb;
/* scdb_connect for subcommand `cmd` (o->endpoint NULL or "":
 * cli_endpoint's): -1 with *h connected, else the exit
 * code after one line on stderr saying why (libscdb's connect-time message):
 * 3 when no broker answers (no socket, nothing listening, no reply), 2 for
 * a bad endpoint, 1 otherwise.  cli_util.c */
int cli_connect(const char *cmd, const struct scdb_opts *o, struct scdb **h);

/* A whole input file (option opt, for messages): a regular file, or anything
 * that reads to its end (a pipe, /dev/stdin).  -1 when read, else exit code
 * 1 after a line on stderr.  cli_util.c */
int cli_read_input(const char *cmd, const char *opt, const char *path, char **out, size_t *len);
/* A prompt from a file: its bytes as byte tokens (is_text), or token ids
 * (whitespace- or comma-separated integers), malloc'd into *out.  A regular
 * file or anything that reads to its end (a pipe).  -1 when read, else the
 * exit code after one line on stderr (1: missing, unreadable, a bad token,
 * out of memory).  cli_util.c */
int cli_read_tokens(const char *cmd, const char *path, int is_text, int32_t **out, size_t *n);

/* Option values: scdb_parse_int and its kin (scdb_common.h), one parser
 * for the command and the benches. */

/* path with a trailing ".safetensors" replaced by ext (appended when there
 * is none): a policy's log and plot beside it.  cli_util.c */
void cli_sibling_path(const char *path, const char *ext, char *out, size_t len);

/* A pair's fidelity default, chosen on held-back windows of the consumer's
 * training text (issue 40; fidelity.c).  fractions: the recompute budgets
 * tried for tail, initial and selective. */
struct scdb_codebook;
struct scdb_model;
struct scdb_pair;
struct scdb_recompute;
typedef struct cli_fidelity_opts {
    double target_top1, target_ppl;     /* 0.95, 1.01 */
    int windows, prefix, cont;          /* 8, 448, 64 */
    double fractions[16];
    int n_fractions;
    double max_cost;                    /* target not met: the most faithful
                                           setting costing at most this share
                                           of the prefix (0.15)              */
    int verbose;
    /* --texts with --fidelity: windows from the end of these files, joined
     * (each consumer's own training text otherwise) */
    const char *const *texts;
    int n_texts;
    /* the models' tokenizer (llama.cpp's, codec.h's scdb_calib_engine)
     * when their vocabulary is not bytes; NULL: the byte tokenizer */
    const struct scdb_calib_engine *eng;
} cli_fidelity_opts;
/* 0 with *out and figures (a line for the pair's recompute_figures), 2 when
 * the consumer has no readable training text (nothing chosen), or 1 (a
 * message said why). */
int cli_fidelity_pick(const struct scdb_codebook *cb, const struct scdb_model *prod,
                      const struct scdb_model *cons, const struct scdb_pair *pair,
                      const cli_fidelity_opts *o, struct scdb_recompute *out, char *figures,
                      size_t figlen);

#endif
