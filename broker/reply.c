/* reply.c — what every path that answers a request shares: the op names,
 * packing a Reply, sending it on the router a request came in on, the
 * per-op counters, and finishing a job (a worker packs the reply; the main
 * thread sends it).  The bottom of the broker's files: it calls none of
 * them. */
#include "broker_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const bk_op_names[OP_COUNT] = {
    "invalid", "hello", "ping", "heartbeat", "put", "lookup", "get", "delete",
    "stats", "arena_create", "arena_mapped", "arena_free", "goodbye", "session_open",
    "session_evict", "session_close", "put_states",
};

scdb_err bk_pack_reply(uint64_t id, scdb_err status, const char *msg, Scdb__Reply *body_in,
                       uint8_t **out, size_t *len)
{
    Scdb__Reply r = SCDB__REPLY__INIT;
    size_t n;

    if (body_in) r = *body_in;
    r.version = SCDB_PROTO_VERSION;
    r.id = id;
    r.status = (int32_t)status;
    r.message = (char *)(msg ? msg : "");
    n = scdb__reply__get_packed_size(&r);
    *out = malloc(n ? n : 1);
    if (!*out) return SCDB_ENOMEM;
    *len = scdb__reply__pack(&r, *out);
    return SCDB_OK;
}

void bk_account(scdb_broker *b, bk_op op, scdb_err status, uint64_t t0)
{
    uint64_t dt = scdb_now_ns() - t0;
    bk_opstat *s = &b->ops[op];
    s->count++;
    s->total_ns += dt;
    if (dt > s->max_ns) s->max_ns = dt;
    if ((unsigned)status < SCDB_ERR_COUNT) b->status_count[op][status]++;
    if (status) {
        s->errors++;
        b->errors++;
    }
}

void bk_account_stale(scdb_broker *b, bk_op op)
{
    b->ops[op].errors--;
    b->errors--;
    b->stale_tokens++;
}

void bk_send_reply(scdb_broker *b, int sock, zmq_msg_t *ident, const void *buf,
                             size_t len)
{
    zmq_msg_t id;

    zmq_msg_init(&id);
    zmq_msg_copy(&id, ident);
    if (zmq_msg_send(&id, b->router[sock], ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&id);
        return;             /* peer gone: ROUTER drops it */
    }
    zmq_send(b->router[sock], buf, len, ZMQ_DONTWAIT);
}

void bk_send_status(scdb_broker *b, int sock, zmq_msg_t *ident, uint64_t id, scdb_err status,
                    const char *msg)
{
    Scdb__Reply r = SCDB__REPLY__INIT;
    uint8_t buf[320];
    size_t n;

    r.version = SCDB_PROTO_VERSION;
    r.id = id;
    r.status = (int32_t)status;
    r.message = (char *)(msg && strlen(msg) < 256 ? msg : "");
    n = scdb__reply__get_packed_size(&r);
    if (n > sizeof buf) return;     /* cannot happen: 256 message bytes + 4 fields */
    n = scdb__reply__pack(&r, buf);
    bk_send_reply(b, sock, ident, buf, n);
}

void bk_job_finish(bk_job *j, scdb_err status, Scdb__Reply *body, const char *fmt, ...)
{
    char msg[512] = "";

    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    j->status = status;
    if (bk_pack_reply(j->req_id, status, msg, body, &j->reply, &j->reply_len)) {
        j->reply = NULL;            /* bk_job_done answers SCDB_ENOMEM instead */
        j->status = SCDB_ENOMEM;
    }
}
