/* broker_cli.c — the broker subcommands of client/cmd_broker.c behind a
 * main(), for test_broker (the `scdb` command dispatches the same
 * functions), and `bench` = `scdb bench broker`:
 *   broker_cli serve|put|lookup|get|stats|bench [options]. */
#include <stdio.h>
#include <string.h>

int scdb_cmd_serve(int argc, char **argv);
int scdb_cmd_put(int argc, char **argv);
int scdb_cmd_lookup(int argc, char **argv);
int scdb_cmd_get(int argc, char **argv);
int scdb_cmd_stats(int argc, char **argv);
int scdb_bench_broker(int argc, char **argv);

int main(int argc, char **argv)
{
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        {"serve", scdb_cmd_serve}, {"put", scdb_cmd_put},     {"lookup", scdb_cmd_lookup},
        {"get", scdb_cmd_get},     {"stats", scdb_cmd_stats}, {"bench", scdb_bench_broker},
    };
    for (size_t i = 0; argc > 1 && i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "usage: broker_cli serve|put|lookup|get|stats|bench [options]\n");
    return 2;
}
