/*
 * broker_proc.h — a real scdb-broker process for tests that talk to it
 * through libscdb or raw sockets: a temp dir, a config file (a [broker]
 * section with the endpoint, data_dir and log file, then the caller's
 * ini), fork + exec, and readiness by a client that connects (never a
 * fixed sleep).  Tests that write their own config use the two steps
 * underneath: bp_spawn, then bp_wait_ready.
 */
#ifndef SCDB_TEST_BROKER_PROC_H
#define SCDB_TEST_BROKER_PROC_H

#include <sys/types.h>

typedef struct bp_broker {
    pid_t pid;
    char dir[64];
    char endpoint[128];     /* ipc://DIR/s */
    char config[128];
    char log[128];          /* the broker's stderr */
} bp_broker;

/* Fork + exec `bin --config config`, its stdout and stderr appended to log
 * (NULL: the test's own).  The pid, or -1. */
pid_t bp_spawn(const char *bin, const char *config, const char *log);
/* Wait until a broker answers at endpoint (scdb_connect, which pings; tries
 * of 200 ms) while pid runs, up to timeout_s.  0 when it answers; else -1,
 * and *exit_status (if not NULL) gets pid's exit status (128 + signal) when
 * it stopped (it is reaped then), -1 when the time ran out. */
int bp_wait_ready(pid_t pid, const char *endpoint, double timeout_s, int *exit_status);

/* Start `bin` --config on a new temp dir; wait until it answers (up to 30
 * s).  0, or -1 (it did not start: its log says why). */
int bp_start(bp_broker *bp, const char *bin, const char *ini);
/* Start it again on the same dir and config (after a kill). */
int bp_restart(bp_broker *bp, const char *bin);
/* Send sig and wait; returns the exit status (128 + signal if killed). */
int bp_stop(bp_broker *bp, int sig);
/* bp_stop(SIGTERM) if running, remove the dir. */
void bp_cleanup(bp_broker *bp);

#endif
