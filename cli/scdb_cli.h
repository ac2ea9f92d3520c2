/*
 * scdb_cli.h — the `scdb` command's subcommands.  Each takes (argc, argv)
 * with argv[0] = the subcommand's name and returns a process exit code
 * (0 ok, 1 failure, 2 usage error).  Every subcommand answers --help.
 */
#ifndef SCDB_CLI_H
#define SCDB_CLI_H

int scdb_cmd_models(int argc, char **argv);   /* cmd_models.c */
int scdb_cmd_serve(int argc, char **argv);    /* cmd_broker.c */
int scdb_cmd_put(int argc, char **argv);
int scdb_cmd_lookup(int argc, char **argv);
int scdb_cmd_get(int argc, char **argv);
int scdb_cmd_stats(int argc, char **argv);
int scdb_cmd_calibrate(int argc, char **argv); /* cmd_calibrate.c */
int scdb_cmd_demo(int argc, char **argv);      /* cmd_demo.c */
int scdb_cmd_train_policy(int argc, char **argv); /* cmd_train_policy.c */

/* Default asset directory (the repository's data/, or $SCDB_DATA). */
const char *scdb_cli_data_dir(void);

#endif
