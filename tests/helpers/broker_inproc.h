/*
 * broker_inproc.h — a broker inside the calling process, for tests and fuzz
 * targets that drive the request handlers directly (no event loop, no
 * client library).
 *
 *   caller                       this process
 *   ------                       ------------------------------------------
 *   bi_call(request bytes,  -->  frames [identity "bi", request, payload..]
 *           payload frames)      -> bk_handle (broker/handlers.c), the real
 *                                   dispatch; jobs it queues run on the
 *                                   broker's own worker and writer threads,
 *                                   their completions are taken from its
 *                                   "done" socket here (bk_job_done), as
 *                                   the event loop would
 *   reply  <------------------   the reply goes out on the broker's ROUTER
 *                                to a DEALER of ours (routing id "bi") over
 *                                the broker's ipc socket in a temp dir
 *
 * So every request goes through the same checks, jobs and reply path as in
 * the daemon; what is missing is only the loop around them (no heartbeat
 * sweep: clients live until dropped).  Main-thread rules hold: call these
 * from one thread.
 */
#ifndef SCDB_TEST_BROKER_INPROC_H
#define SCDB_TEST_BROKER_INPROC_H

#include <stddef.h>
#include <stdint.h>

#include "broker_int.h"

typedef struct bi_broker {
    scdb_broker *b;
    void *zctx, *dealer;
    char dir[64];
    uint64_t next_id;
} bi_broker;

/* Start a broker on a new temp dir: a [broker] section with its endpoint,
 * data_dir and log_level = error, then `ini` (more sections and keys).
 * SCDB_ESYS (temp dir, sockets), the config and broker errors (errbuf says
 * what). */
scdb_err bi_open(const char *ini, bi_broker **out, char *errbuf, size_t errlen);
/* Stop, free, remove the temp dir; NULLs *bi; accepts NULL. */
void bi_close(bi_broker **bi);

/* One request: `req` (len bytes, any bytes) and n_frames payload frames as
 * the broker's socket would deliver them, handled, its jobs run to
 * completion, and its reply received.  *reply (may be NULL) gets the
 * unpacked reply (free with scdb__reply__free_unpacked; NULL when the
 * reply does not parse).  0, or -1 when no reply came within timeout_ms or
 * a job did not finish (a broken invariant: every request gets one reply). */
int bi_call(bi_broker *bi, const void *req, size_t len, const void *const *frames,
            const size_t *frame_lens, int n_frames, int timeout_ms, Scdb__Reply **reply);

/* bi_call in its three steps, for tests that keep jobs in flight: hand
 * the request to bk_handle (0, -1 out of memory); finish every job in
 * flight (0, -1 after timeout_ms); receive the next reply (0, -1 none
 * within timeout_ms).  Replies of requests answered inline arrive at
 * once, those of jobs only after bi_drain. */
int bi_send(bi_broker *bi, const void *req, size_t len, const void *const *frames,
            const size_t *frame_lens, int n_frames);
int bi_drain(bi_broker *bi, int timeout_ms);
int bi_recv(bi_broker *bi, int timeout_ms, Scdb__Reply **reply);

/* Pack rq (version and a fresh id set here) and bi_call it.  Returns the
 * reply's status, or -1 (no reply, or SCDB_ENOMEM packing). */
int bi_request(bi_broker *bi, Scdb__Request *rq, const void *const *frames,
               const size_t *frame_lens, int n_frames, Scdb__Reply **reply);

/* Hello as role/model/codebook (NULL: raw/<model>); *token the client token.
 * Returns the reply's status or -1. */
int bi_hello(bi_broker *bi, int role, const char *model, const char *codebook, uint64_t *token);

#endif
