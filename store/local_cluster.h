/*
 * local_cluster.h — a throwaway Redis Cluster on loopback, for the tests
 * and `scdb bench cluster` (its own library, scdb_local_cluster, not part of
 * libscdb): M masters + M*R replicas, each a redis-server child process with
 * persistence off, in its own directory under one mkdtemp root:
 *
 *     $TMPDIR/scdb-rc-XXXXXX/
 *         node0/  nodes.conf  pid  server.log      port p0, bus port b0
 *         node1/  ...
 *         create.log                               redis-cli --cluster create
 *
 * Ports are picked at random below the ephemeral range and checked free
 * (client and bus port apart, `cluster-port`); a node that still loses its
 * port to a race is started again on new ones, so parallel tests (ctest -j2)
 * and other users of the machine do not collide.  Readiness is polled, never
 * slept for: PING per node, then `lc_wait_ready` (cluster_state:ok on every
 * live node, all agree on one full slot map served by live masters, every
 * live replica's link up).
 *
 * Cleanup: lc_stop kills the nodes and removes the root.  Should the test
 * process die first (crash, ctest timeout, kill -9), a guardian process,
 * started at lc_start in its own session and holding a pipe from the test,
 * sees the pipe close, kills the redis-server pids recorded in node<i>/pid and
 * removes the root.  SCDB_TEST_KEEP_CLUSTER=1 keeps the root (logs,
 * nodes.conf) for a post-mortem; the nodes are killed all the same.
 *
 * Not thread-safe; fork()s, so start it before creating threads.
 */
#ifndef SCDB_LOCAL_CLUSTER_H
#define SCDB_LOCAL_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

enum { LC_OK = 0, LC_FAIL = -1, LC_SKIP = 77 };

typedef struct lc_cluster lc_cluster;

typedef struct lc_options {
    int masters;          /* 0: 3 */
    int replicas;         /* per master; -1: none; 0: 1 */
    int node_timeout_ms;  /* cluster-node-timeout; 0: 5000 */
} lc_options;

/* Find redis-server and redis-cli on PATH.  false (and why) if either is
 * missing: the caller skips (exit code 77). */
bool lc_available(char *why, size_t why_len);

/* Start, join and wait for a ready cluster.  LC_OK, LC_SKIP (no
 * redis-server / redis-cli: why says so), LC_FAIL (why says what). */
int lc_start(const lc_options *o, lc_cluster **out, char *why, size_t why_len);

/* Kill every node, remove the directory, free; NULLs *c, accepts NULL. */
void lc_stop(lc_cluster **c);

int lc_size(const lc_cluster *c);
int lc_port(const lc_cluster *c, int i);
bool lc_alive(const lc_cluster *c, int i);
const char *lc_dir(const lc_cluster *c);
/* "127.0.0.1:p0,127.0.0.1:p1,..." over every node. */
const char *lc_seeds(const lc_cluster *c);
/* Index of the node listening on port, -1 if none. */
int lc_index_of_port(const lc_cluster *c, int port);

/* Send a signal to node i.  SIGKILL also reaps it (it is then not alive);
 * SIGSTOP / SIGCONT leave it alive.  0 or -1. */
int lc_signal(lc_cluster *c, int i, int sig);
/* Start a dead node again on its port and directory (its nodes.conf brings
 * it back into the cluster); waits for PING.  LC_OK / LC_FAIL. */
int lc_restart(lc_cluster *c, int i, char *why, size_t why_len);
/* Poll until ready (see above) or timeout.  LC_OK / LC_FAIL. */
int lc_wait_ready(lc_cluster *c, int timeout_ms, char *why, size_t why_len);

/* Start redis-cli with argv (argv[0] "redis-cli") in the background, its
 * output to <root>/<log_name>; the caller waitpid()s.  -1 on failure. */
pid_t lc_spawn_cli(lc_cluster *c, char *const argv[], const char *log_name);

/* Poll until every live replica has processed what its master had written
 * when this was called (its ROLE offset); WAIT would only wait for the
 * writes of its own connection.  LC_OK / LC_FAIL. */
int lc_wait_replicated(lc_cluster *c, int timeout_ms, char *why, size_t why_len);

/* One command on node i over a fresh connection (2 s timeout); hiredis
 * format (%s, %b, %d).  NULL if the node cannot be reached.  freeReplyObject
 * the result. */
redisReply *lc_cmd(lc_cluster *c, int i, const char *fmt, ...);
/* The master serving a slot, as a node index (asked of a live node); -1. */
int lc_master_of_slot(lc_cluster *c, unsigned slot);
/* CLUSTER MYID of node i into id (41 bytes); 0 or -1. */
int lc_node_id(lc_cluster *c, int i, char id[41]);

#endif /* SCDB_LOCAL_CLUSTER_H */
