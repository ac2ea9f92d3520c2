/* broker_proc.c — broker_proc.h. */
#include "broker_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scdb.h"
#include "scdb_common.h"

pid_t bp_spawn(const char *bin, const char *config, const char *log)
{
    pid_t pid = fork();

    if (pid == 0) {
        int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0600) : -1;
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, bin, "--config", config, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int bp_wait_ready(pid_t pid, const char *endpoint, double timeout_s, int *exit_status)
{
    double until = scdb_now() + timeout_s;
    scdb_opts o = {.endpoint = endpoint, .timeout_ms = 200, .no_heartbeat = 1};

    if (exit_status) *exit_status = -1;
    while (scdb_now() < until) {
        scdb *h = NULL;
        int st;
        if (scdb_connect(&o, &h) == SCDB_OK) {
            scdb_close(&h);
            return 0;
        }
        if (waitpid(pid, &st, WNOHANG) == pid) {
            if (exit_status) *exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return -1;
        }
        usleep(20000);
    }
    return -1;
}

static int launch(bp_broker *bp, const char *bin)
{
    int st;

    if ((bp->pid = bp_spawn(bin, bp->config, bp->log)) < 0) return -1;
    if (bp_wait_ready(bp->pid, bp->endpoint, 30, &st) == 0) return 0;
    if (st >= 0) bp->pid = -1;       /* it stopped (and was reaped) */
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
    if (bp->pid > 0) {
        int st = bp_stop(bp, SIGTERM);
        if (st != 0) {      /* it died under the test, or stopped badly: say how */
            char line[512];
            FILE *f = fopen(bp->log, "r");
            fprintf(stderr, "broker_proc: the broker's exit status was %d; its log:\n", st);
            while (f && fgets(line, sizeof line, f)) fprintf(stderr, "  %s", line);
            if (f) fclose(f);
        }
    }
    if (bp->dir[0]) scdb_rm_tree(bp->dir);
    bp->dir[0] = 0;
}
