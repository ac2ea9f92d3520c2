/* broker_proc.c — broker_proc.h. */
#include "broker_proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scdb.h"
#include "scdb_common.h"

static int launch(bp_broker *bp, const char *bin)
{
    double until = scdb_now() + 30;
    scdb_opts o = {.endpoint = bp->endpoint, .timeout_ms = 200, .no_heartbeat = 1};

    bp->pid = fork();
    if (bp->pid < 0) return -1;
    if (bp->pid == 0) {
        if (!freopen(bp->log, "a", stderr)) _exit(127);
        execl(bin, "scdb-broker", "--config", bp->config, (char *)NULL);
        _exit(127);
    }
    while (scdb_now() < until) {
        scdb *h = NULL;
        int st;
        if (scdb_connect(&o, &h) == SCDB_OK) {
            scdb_close(&h);
            return 0;
        }
        if (waitpid(bp->pid, &st, WNOHANG) == bp->pid) {
            bp->pid = -1;
            return -1;
        }
        usleep(20000);
    }
    return -1;
}

int bp_start(bp_broker *bp, const char *bin, const char *ini)
{
    FILE *f;

    bp->pid = -1;
    snprintf(bp->dir, sizeof bp->dir, "/tmp/scdb-bp-XXXXXX");
    if (!mkdtemp(bp->dir)) return -1;
    snprintf(bp->endpoint, sizeof bp->endpoint, "ipc://%s/s", bp->dir);
    snprintf(bp->config, sizeof bp->config, "%s/broker.ini", bp->dir);
    snprintf(bp->log, sizeof bp->log, "%s/broker.log", bp->dir);
    if (!(f = fopen(bp->config, "w"))) return -1;
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/data\nlog_level = warn\n%s\n",
            bp->endpoint, bp->dir, ini ? ini : "");
    fclose(f);
    return launch(bp, bin);
}

int bp_restart(bp_broker *bp, const char *bin) { return launch(bp, bin); }

int bp_stop(bp_broker *bp, int sig)
{
    int st;

    if (bp->pid <= 0) return -1;
    kill(bp->pid, sig);
    while (waitpid(bp->pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    bp->pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void bp_cleanup(bp_broker *bp)
{
    if (bp->pid > 0) bp_stop(bp, SIGTERM);
    if (bp->dir[0]) scdb_rm_tree(bp->dir);
    bp->dir[0] = 0;
}
