/* broker_inproc.c — broker_inproc.h: a broker driven request by request. */
#include "broker_inproc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BI_ID "bi"

/* zmq_poll on one socket for up to timeout_ms, through signals (libFuzzer's
 * SIGALRM watchdog interrupts it): 1 ready, 0 not within the time. */
static int poll_in(void *sock, int timeout_ms)
{
    double until = scdb_now() + timeout_ms / 1000.0;
    for (;;) {
        zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
        int left = (int)((until - scdb_now()) * 1000.0), rc;
        if (left < 0) left = 0;
        rc = zmq_poll(&it, 1, left);
        if (rc > 0) return 1;
        if (rc == 0 || zmq_errno() != EINTR || left == 0) return 0;
    }
}

/* Finish every job the last request queued, as the event loop does. */
static int drain_jobs(bi_broker *bi, int timeout_ms)
{
    scdb_broker *b = bi->b;

    while (b->inflight > 0) {
        bk_job *j;
        if (!poll_in(b->done, timeout_ms)) return -1;
        while (zmq_recv(b->done, &j, sizeof j, ZMQ_DONTWAIT) == (int)sizeof j) bk_job_done(b, j);
    }
    return 0;
}

static int recv_reply(bi_broker *bi, int timeout_ms, Scdb__Reply **reply)
{
    zmq_msg_t m;
    int got = 0, more;

    if (reply) *reply = NULL;
    if (!poll_in(bi->dealer, timeout_ms)) return -1;
    do {
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, bi->dealer, 0) < 0) {
            if (zmq_errno() == EINTR) continue;
            zmq_msg_close(&m);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (!got++ && reply)
            *reply = scdb__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        zmq_msg_close(&m);
    } while (more);
    return 0;
}

int bi_send(bi_broker *bi, const void *req, size_t len, const void *const *frames,
            const size_t *frame_lens, int n_frames)
{
    scdb_broker *b = bi->b;
    zmq_msg_t stack[16], *f = stack;
    uint64_t total = len, max_frames;
    int n = 0, too_big = 0;

    /* what recv_one (broker.c) keeps of an oversized request: identity and
     * request frame, with too_big set */
    max_frames = 3 + b->cfg.max_tokens / (b->block_tokens ? b->block_tokens : 1);
    for (int i = 0; i < n_frames; i++) total += frame_lens[i];
    if (total > b->cfg.max_request_bytes || (uint64_t)n_frames + 2 > max_frames) too_big = 1;
    if (n_frames + 2 > (int)SCDB_ARRAY_LEN(stack) &&
        !(f = malloc((size_t)(n_frames + 2) * sizeof *f)))
        return -1;
    zmq_msg_init_size(&f[n], strlen(BI_ID));
    memcpy(zmq_msg_data(&f[n++]), BI_ID, strlen(BI_ID));
    zmq_msg_init_size(&f[n], len);
    if (len) memcpy(zmq_msg_data(&f[n]), req, len);
    n++;
    for (int i = 0; !too_big && i < n_frames; i++) {
        zmq_msg_init_size(&f[n], frame_lens[i]);
        if (frame_lens[i]) memcpy(zmq_msg_data(&f[n]), frames[i], frame_lens[i]);
        n++;
    }
    bk_handle(b, 0, f, n, too_big, total);
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    if (f != stack) free(f);
    return 0;
}

int bi_drain(bi_broker *bi, int timeout_ms) { return drain_jobs(bi, timeout_ms); }

int bi_recv(bi_broker *bi, int timeout_ms, Scdb__Reply **reply)
{
    return recv_reply(bi, timeout_ms, reply);
}

int bi_call(bi_broker *bi, const void *req, size_t len, const void *const *frames,
            const size_t *frame_lens, int n_frames, int timeout_ms, Scdb__Reply **reply)
{
    int rc;

    if (reply) *reply = NULL;
    rc = bi_send(bi, req, len, frames, frame_lens, n_frames);
    if (rc == 0) rc = drain_jobs(bi, timeout_ms);
    if (rc == 0) rc = recv_reply(bi, timeout_ms, reply);
    return rc;
}

int bi_request(bi_broker *bi, Scdb__Request *rq, const void *const *frames,
               const size_t *frame_lens, int n_frames, Scdb__Reply **reply)
{
    Scdb__Reply *r = NULL;
    uint8_t *buf;
    size_t len;
    int rc;

    if (reply) *reply = NULL;
    rq->version = SCDB_PROTO_VERSION;
    rq->id = ++bi->next_id;
    len = scdb__request__get_packed_size(rq);
    if (!(buf = malloc(len ? len : 1))) return -1;
    scdb__request__pack(rq, buf);
    rc = bi_call(bi, buf, len, frames, frame_lens, n_frames, 10000, &r);
    free(buf);
    if (rc) return -1;
    if (!r) return -1;
    rc = r->status;
    if (reply)
        *reply = r;
    else
        scdb__reply__free_unpacked(r, NULL);
    return rc;
}

int bi_hello(bi_broker *bi, int role, const char *model, const char *codebook, uint64_t *token)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__Hello h = SCDB__HELLO__INIT;
    Scdb__Reply *r = NULL;
    int rc;

    h.client_name = (char *)"bi";
    h.pid = (uint32_t)getpid();
    h.role = role;
    h.model = (char *)model;
    h.codebook = (char *)(codebook ? codebook : "");
    rq.body_case = SCDB__REQUEST__BODY_HELLO;
    rq.hello = &h;
    rc = bi_request(bi, &rq, NULL, NULL, 0, &r);
    if (rc == 0 && r->body_case == SCDB__REPLY__BODY_HELLO) *token = r->hello->client;
    if (r) scdb__reply__free_unpacked(r, NULL);
    return rc;
}

/* The DEALER's first message tells the ROUTER its routing id: take it off
 * the router and answer it, so replies to "bi" are routed from now on. */
static int handshake(bi_broker *bi)
{
    Scdb__Request rq = SCDB__REQUEST__INIT;
    Scdb__Ping p = SCDB__PING__INIT;
    zmq_msg_t f[2];
    uint8_t buf[64];
    size_t len;
    int n = 0, more = 1;

    rq.version = SCDB_PROTO_VERSION;
    rq.id = ++bi->next_id;
    rq.body_case = SCDB__REQUEST__BODY_PING;
    rq.ping = &p;
    len = scdb__request__pack(&rq, buf);
    if (zmq_send(bi->dealer, buf, len, 0) < 0) return -1;
    if (!poll_in(bi->b->router[0], 10000)) return -1;
    while (more && n < 2) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], bi->b->router[0], 0) < 0) return -1;
        more = zmq_msg_more(&f[n]);
        n++;
    }
    if (more || n != 2) return -1;
    bk_handle(bi->b, 0, f, 2, 0, zmq_msg_size(&f[1]));
    zmq_msg_close(&f[0]);
    zmq_msg_close(&f[1]);
    return recv_reply(bi, 10000, NULL);
}

scdb_err bi_open(const char *ini, bi_broker **out, char *errbuf, size_t errlen)
{
    bi_broker *bi = calloc(1, sizeof *bi);
    scdb_broker_config c;
    char path[128], ep[160];
    int linger = 0;
    FILE *f;
    scdb_err e;

    *out = NULL;
    scdb_broker_config_defaults(&c);
    if (!bi) return SCDB_ENOMEM;
    snprintf(bi->dir, sizeof bi->dir, "/tmp/scdb-bi-XXXXXX");
    if (!mkdtemp(bi->dir)) {
        free(bi);
        snprintf(errbuf, errlen, "mkdtemp failed");
        return SCDB_ESYS;
    }
    snprintf(path, sizeof path, "%s/broker.ini", bi->dir);
    snprintf(ep, sizeof ep, "ipc://%s/s", bi->dir);
    if (!(f = fopen(path, "w"))) {
        e = SCDB_ESYS;
        goto fail;
    }
    fprintf(f, "[broker]\nendpoint = %s\ndata_dir = %s/data\nlog_level = error\n%s\n", ep,
            bi->dir, ini ? ini : "");
    fclose(f);
    if ((e = scdb_broker_config_load(&c, path, errbuf, errlen))) goto fail;
    scdb_log_set_level(c.log_level);
    if ((e = scdb_broker_new(&c, &bi->b, errbuf, errlen))) goto fail;
    bi->zctx = zmq_ctx_new();
    bi->dealer = bi->zctx ? zmq_socket(bi->zctx, ZMQ_DEALER) : NULL;
    if (!bi->dealer || zmq_setsockopt(bi->dealer, ZMQ_ROUTING_ID, BI_ID, strlen(BI_ID)) ||
        zmq_setsockopt(bi->dealer, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_connect(bi->dealer, ep) || handshake(bi)) {
        snprintf(errbuf, errlen, "cannot reach the broker's socket %s", ep);
        e = SCDB_ESYS;
        goto fail;
    }
    scdb_broker_config_clear(&c);
    *out = bi;
    return SCDB_OK;
fail:
    scdb_broker_config_clear(&c);
    bi_close(&bi);
    return e;
}

void bi_close(bi_broker **pbi)
{
    bi_broker *bi;

    if (!pbi || !*pbi) return;
    bi = *pbi;
    if (bi->dealer) zmq_close(bi->dealer);
    if (bi->zctx) zmq_ctx_term(bi->zctx);
    scdb_broker_free(&bi->b);
    if (bi->dir[0]) scdb_rm_tree(bi->dir);
    free(bi);
    *pbi = NULL;
}
