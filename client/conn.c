/* conn.c — the handle's connection: sockets, request/reply with timeouts
 * and re-registration, the heartbeat thread, connect, register, ping. */
#include "libscdb_int.h"
#include "weights_fp.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#define DEFAULT_TIMEOUT_MS 5000
#define WAIT_SLICE_MS 50        /* the longest sleep between interrupt checks */

void scdb_set_timeout(scdb *h, int timeout_ms)
{
    if (h && timeout_ms > 0) {
        h->timeout_ms = timeout_ms;
        if (h->sock) zmq_setsockopt(h->sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    }
}

const scdb_info *scdb_get_info(const scdb *h) { return h ? &h->info : NULL; }

/* ------------------------------------------------------------- sockets */

static int set_curve(scdb *h, void *s)
{
    if (!h->curve) return 0;
    return zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, h->server_key, 41) ||
           zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, h->public_key, 41) ||
           zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, h->secret_key, 41);
}

/* A DEALER to the broker.  mon_ep: attach a monitor that publishes
 * handshake events there before connecting (none missed); NULL: none. */
static void *socket_new(scdb *h, int heartbeat, const char *mon_ep)
{
    void *s = zmq_socket(h->zctx, ZMQ_DEALER);
    int zero = 0, ivl = 100, ivl_max = 1000, one = 1, hwm = 4;
    const int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

    if (!s) return NULL;
    if (zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl) ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max) ||
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &h->timeout_ms, sizeof h->timeout_ms) ||
        (heartbeat && (zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one) ||
                       zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm))) ||
        set_curve(h, s) || (mon_ep && zmq_socket_monitor(s, mon_ep, events)) ||
        zmq_connect(s, h->endpoint)) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* The request socket, and over tcp:// (CURVE) its handshake monitor: a
 * refused key or a wrong server key is then an error at once, not a wait
 * for the timeout (libzmq retries the connection forever).  0, or -1 with
 * zmq_errno set. */
static int req_socket_open(scdb *h)
{
    char ep[96];

    h->hs_failed = 0;
    if (!h->curve) return (h->sock = socket_new(h, 0, NULL)) ? 0 : -1;
    snprintf(ep, sizeof ep, "inproc://scdb-req-monitor-%p-%u", (void *)h, ++h->mon_seq);
    /* the monitor's PAIR connects first (inproc allows connect before bind),
     * so the events of the very first handshake reach it */
    if (!(h->mon = zmq_socket(h->zctx, ZMQ_PAIR))) return -1;
    if (zmq_connect(h->mon, ep) || !(h->sock = socket_new(h, 0, ep))) {
        zmq_close(h->mon);
        h->mon = NULL;
        return -1;
    }
    return 0;
}

static void req_socket_close(scdb *h)
{
    if (h->mon) {
        zmq_socket_monitor(h->sock, NULL, 0);
        zmq_close(h->mon);
        h->mon = NULL;
    }
    if (h->sock) zmq_close(h->sock);
    h->sock = NULL;
}

/* After a timeout: drop whatever is queued on the old socket. */
static void socket_reset(scdb *h)
{
    req_socket_close(h);
    req_socket_open(h);
}

/* Read the monitor's pending events: SCDB_EAUTH (message set) when the
 * broker refused the CURVE handshake, else SCDB_OK.  Events are two frames:
 * [u16 event, u32 value] and the endpoint. */
static scdb_err handshake_events(scdb *h)
{
    uint8_t ev[6], buf[256];
    scdb_err e = SCDB_OK;
    int more;
    size_t ml = sizeof more;

    while (!e && zmq_recv(h->mon, ev, sizeof ev, ZMQ_DONTWAIT) >= 2) {
        uint16_t event;
        uint32_t value = 0;
        memcpy(&event, ev, sizeof event);
        memcpy(&value, ev + 2, sizeof value);
        while (!zmq_getsockopt(h->mon, ZMQ_RCVMORE, &more, &ml) && more &&
               zmq_recv(h->mon, buf, sizeof buf, ZMQ_DONTWAIT) >= 0) {}
        switch (event) {
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
            h->hs_failed = 0;
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:       /* the broker's ZAP said no */
            e = cl_fail(h, SCDB_EAUTH, "the broker at %s refused this client's CURVE key "
                             "%s (ZAP status %u): it is not in the broker's curve_allow_file",
                             h->endpoint, h->public_key, (unsigned)value);
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
            e = cl_fail(h, SCDB_EAUTH, "CURVE handshake with the broker at %s failed "
                             "(ZMTP protocol error 0x%x%s)", h->endpoint, (unsigned)value,
                             value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
                                 ? ": is curve_server_key the broker's public key?" : "");
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            /* the broker dropped the connection mid-handshake: what it does
             * with a HELLO it cannot open (a wrong server key); twice in a
             * row, so that one broker restart is not taken for it */
            if (++h->hs_failed >= 2)
                e = cl_fail(h, SCDB_EAUTH, "the broker at %s closes the CURVE handshake "
                                 "(%s): is curve_server_key the broker's public key?",
                                 h->endpoint, value ? strerror((int)value) : "no detail");
            break;
        default: break;
        }
    }
    return e;
}

/* ------------------------------------------------------------ interrupts */

/* Whether the application's interrupt check (util.c) asks a call with
 * request req to stop.  Requests of the void cleanup calls (scdb_close,
 * scdb_arena_free, scdb_session_close) are never stopped: they cannot say
 * SCDB_EINTR, and finish within the timeout. */
static int interrupted(const Scdb__Request *req)
{
    switch (req->body_case) {
    case SCDB__REQUEST__BODY_GOODBYE:
    case SCDB__REQUEST__BODY_ARENA_FREE:
    case SCDB__REQUEST__BODY_SESSION_CLOSE: return 0;
    default: return cl_interrupt_asked();
    }
}

/* --------------------------------------------------------- request/reply */

scdb_err cl_call_once(scdb *h, Scdb__Request *req, const void *const *frames,
                          const size_t *lens, int n, Scdb__Reply **rep)
{
    uint8_t stackbuf[1024], *buf = stackbuf;
    size_t len;
    double deadline;
    scdb_err e = SCDB_OK;

    *rep = NULL;
    if (!h->sock && req_socket_open(h))
        return cl_fail(h, SCDB_ESYS, "cannot connect %s: %s", h->endpoint,
                            zmq_strerror(zmq_errno()));
    req->version = SCDB_PROTO_VERSION;
    req->id = ++h->next_id;
    req->client = atomic_load(&h->token);
    len = scdb__request__get_packed_size(req);
    if (len > sizeof stackbuf && !(buf = malloc(len))) return cl_fail(h, SCDB_ENOMEM, "out of memory");
    scdb__request__pack(req, buf);
    deadline = scdb_now() + h->timeout_ms / 1000.0;

    if (zmq_send(h->sock, buf, len, n ? ZMQ_SNDMORE : 0) < 0) goto send_fail;
    for (int i = 0; i < n; i++)
        if (zmq_send(h->sock, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
            goto send_fail;
    if (buf != stackbuf) free(buf);
    buf = NULL;

    for (;;) {
        double left = deadline - scdb_now();
        int wait_ms = (int)(left * 1000) + 1;
        zmq_msg_t m;
        Scdb__Reply *r;

        if (left <= 0) goto timeout;
        /* an interrupt check or a handshake monitor: wake up to ask them */
        if ((h->mon || cl_interrupt_set()) && wait_ms > WAIT_SLICE_MS)
            wait_ms = WAIT_SLICE_MS;
        if (h->mon) {
            zmq_pollitem_t it[2] = {{.socket = h->sock, .events = ZMQ_POLLIN},
                                    {.socket = h->mon, .events = ZMQ_POLLIN}};
            int rc = zmq_poll(it, 2, wait_ms);
            if (rc < 0 && zmq_errno() != EINTR)
                return cl_fail(h, SCDB_ESYS, "poll: %s", zmq_strerror(zmq_errno()));
            if (rc > 0 && (it[1].revents & ZMQ_POLLIN) && (e = handshake_events(h))) {
                socket_reset(h);
                return e;
            }
            if (rc <= 0 || !(it[0].revents & ZMQ_POLLIN)) {
                if (interrupted(req)) goto interrupt;
                continue;
            }
            wait_ms = 0;                     /* a reply is there */
        }
        /* a blocking receive bounded by the time left: one call per reply */
        zmq_setsockopt(h->sock, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, h->sock, 0) < 0) {
            int err = zmq_errno();
            zmq_msg_close(&m);
            if (err != EAGAIN && err != EINTR)
                return cl_fail(h, SCDB_ESYS, "receive: %s", zmq_strerror(err));
            if (interrupted(req)) goto interrupt;
            continue;
        }
        r = scdb__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        while (zmq_msg_more(&m)) {          /* no reply carries frames yet */
            zmq_msg_close(&m);
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, h->sock, 0) < 0) break;
        }
        zmq_msg_close(&m);
        if (!r) return cl_fail(h, SCDB_EPROTO, "broker sent a reply that is not a scdb.Reply");
        if (r->id != req->id) {             /* a late reply to a timed-out call */
            scdb__reply__free_unpacked(r, NULL);
            continue;
        }
        *rep = r;
        e = (r->status >= 0 && r->status < SCDB_ERR_COUNT) ? (scdb_err)r->status : SCDB_EPROTO;
        if (e)
            snprintf(h->err, sizeof h->err, "%s", r->message && *r->message ? r->message
                                                                         : scdb_strerror(e));
        else
            h->err[0] = 0;
        return e;
    }
send_fail:
    if (buf != stackbuf) free(buf);
    if (zmq_errno() != EAGAIN)
        return cl_fail(h, SCDB_ESYS, "send: %s", zmq_strerror(zmq_errno()));
timeout:
    socket_reset(h);
    return cl_fail(h, SCDB_ETIMEDOUT, "no reply from the broker at %s within %d ms",
                    h->endpoint, h->timeout_ms);
interrupt:
    /* as after a timeout: the request may still be served; its late reply
     * is dropped with the socket */
    socket_reset(h);
    return cl_fail(h, SCDB_EINTR, "interrupted while waiting for the broker at %s",
                        h->endpoint);
}

static void info_from(scdb_info *i, const Scdb__HelloReply *r)
{
    memset(i, 0, sizeof *i);
    i->block_tokens = r->block_tokens;
    i->block_bytes = r->block_bytes;
    i->payload_dtype = r->payload_dtype;
    if (r->shape) {
        i->n_layers = (int)r->shape->n_layers;
        i->n_kv_heads = (int)r->shape->n_kv_heads;
        i->head_dim = (int)r->shape->head_dim;
        i->max_seq_len = (int)r->shape->max_seq_len;
        i->n_heads = (int)r->shape->n_heads;
        i->vocab_size = (int)r->shape->vocab_size;
    }
    snprintf(i->decoder, sizeof i->decoder, "%s", r->decoder ? r->decoder : "");
    snprintf(i->codebook_kind, sizeof i->codebook_kind, "%s",
             r->codebook_kind ? r->codebook_kind : "");
    i->states_layers = (int)r->states_layers;
    i->states_dim = (int)r->states_dim;
    i->max_tokens = r->max_tokens;
    i->max_request_bytes = r->max_request_bytes;
    i->heartbeat_ms = r->heartbeat_ms;
    i->heartbeat_timeout_ms = r->heartbeat_timeout_ms;
    i->broker_instance = r->broker_instance;
    i->remote_tier = r->remote_tier;
}

scdb_err cl_recompute_from_wire(const Scdb__Recompute *w, scdb_recompute *out, char *why,
                                size_t whylen)
{
    scdb_recompute d = {SCDB_RECOMPUTE_NONE, 0, 0.0f};
    *out = d;
    if (!w) return SCDB_OK;
    d.policy = (scdb_recompute_policy)w->policy;
    d.tokens = w->tokens > INT32_MAX ? -1 : (int)w->tokens;
    d.fraction = w->fraction;
    if (d.policy == SCDB_RECOMPUTE_DEFAULT) {
        snprintf(why, whylen, "policy 'default' is not a setting");
        return SCDB_EINVAL;
    }
    scdb_err e = scdb_recompute_check(&d, -1, why, whylen);
    if (!e) *out = d;
    return e;
}

/* The hello's fidelity default (scdb.proto HelloReply.recompute): what
 * cl_recompute_from_wire refuses is logged and taken as none. */
static void recompute_from(scdb *h, const Scdb__HelloReply *r)
{
    scdb_recompute d;
    char why[160] = "";
    h->recompute_source[0] = 0;
    if (cl_recompute_from_wire(r->recompute, &d, why, sizeof why))
        scdb_warn("broker's fidelity default ignored (none used): %s", why);
    h->recompute_default = d;
    if (!r->recompute) return;             /* a calibrated none has its source */
    snprintf(h->recompute_source, sizeof h->recompute_source, "%s",
             r->recompute->source ? r->recompute->source : "");
}

static scdb_err hello(scdb *h)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__Hello hl = SCDB__HELLO__INIT;
    Scdb__LookupCounts lc;
    Scdb__Reply *rep = NULL;
    scdb_err e;

    hl.client_name = h->name;
    hl.pid = (uint32_t)getpid();
    hl.role = h->role == SCDB_PRODUCER ? SCDB__ROLE__PRODUCER : SCDB__ROLE__CONSUMER;
    hl.model = h->model;
    hl.codebook = h->codebook;
    hl.weights_fp = h->weights_fp;     /* producers and consumers alike */
    cl_lookup_counts(h, &lc);
    hl.lookups = &lc;
    req.body_case = SCDB__REQUEST__BODY_HELLO;
    req.hello = &hl;
    e = cl_call_once(h, &req, NULL, NULL, 0, &rep);
    if (e == SCDB_OK && (rep->body_case != SCDB__REPLY__BODY_HELLO || !rep->hello->client))
        e = cl_fail(h, SCDB_EPROTO, "hello reply without a client token");
    if (e == SCDB_OK) {
        atomic_store(&h->token, rep->hello->client);
        info_from(&h->info, rep->hello);
        recompute_from(h, rep->hello);
        atomic_store(&h->hb_interval_ms, (int)(h->info.heartbeat_ms ? h->info.heartbeat_ms : 1000));
        h->gen++;
        h->broker_gone = 0;
        /* interrupted (SCDB_EINTR): as after a timeout, the broker has
         * registered us; the next hello maps the index */
        e = cl_lix_attach(h, rep->hello);
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err cl_request(scdb *h, Scdb__Request *req, const void *const *frames,
                     const size_t *lens, int n, Scdb__Reply **rep)
{
    scdb_err e = cl_call_once(h, req, frames, lens, n, rep);

    if (e != SCDB_ECLOSED || !h->registered || req->body_case == SCDB__REQUEST__BODY_GOODBYE)
        return e;
    /* the broker forgot us (restart or reclaim): register again, retry once */
    if (*rep) scdb__reply__free_unpacked(*rep, NULL);
    *rep = NULL;
    e = hello(h);
    if (e) return e;
    /* requests naming an arena or a session of the old registration */
    switch (req->body_case) {
    case SCDB__REQUEST__BODY_GET:
    case SCDB__REQUEST__BODY_ARENA_MAPPED:
    case SCDB__REQUEST__BODY_ARENA_FREE:
    case SCDB__REQUEST__BODY_PUT_STATES:
    case SCDB__REQUEST__BODY_SESSION_OPEN:
    case SCDB__REQUEST__BODY_SESSION_EVICT:
    case SCDB__REQUEST__BODY_SESSION_CLOSE:
        return cl_fail(h, SCDB_ECLOSED, "the broker restarted: this arena is gone");
    default: break;
    }
    return cl_call_once(h, req, frames, lens, n, rep);
}

/* ------------------------------------------------------------ heartbeat */

void cl_lookup_counts(scdb *h, Scdb__LookupCounts *lc)
{
    scdb__lookup_counts__init(lc);
    lc->index_lookups = __atomic_load_n(&h->n_index_lookups, __ATOMIC_RELAXED);
    lc->index_fallbacks = __atomic_load_n(&h->n_index_fallbacks, __ATOMIC_RELAXED);
}

/* The heartbeat thread: a heartbeat every hb_interval_ms on its own
 * socket, and a ZeroMQ monitor on that socket that tells, within
 * milliseconds, when the broker's connection drops (peer_lost: lookups stop
 * trusting its index) and when a broker answers again. */
static void *hb_main(void *arg)
{
    scdb *h = arg;
    void *s = socket_new(h, 1, NULL), *mon = NULL;
    uint8_t buf[256];
    char mon_ep[64];
    double next = 0;

    if (!s) return NULL;
    snprintf(mon_ep, sizeof mon_ep, "inproc://scdb-hb-monitor-%p", (void *)h);
    if (zmq_socket_monitor(s, mon_ep, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) == 0 &&
        (mon = zmq_socket(h->zctx, ZMQ_PAIR)) && zmq_connect(mon, mon_ep)) {
        zmq_close(mon);
        mon = NULL;
    }
    for (;;) {
        zmq_pollitem_t it[3] = {{.socket = s, .events = ZMQ_POLLIN},
                                {.fd = h->hb_pipe[0], .events = ZMQ_POLLIN},
                                {.socket = mon, .events = ZMQ_POLLIN}};
        double now = scdb_now();
        uint64_t token = atomic_load(&h->token);
        int rc;

        if (now >= next) {
            if (token) {
                Scdb__Request r = SCDB__REQUEST__INIT;
                Scdb__Heartbeat hb = SCDB__HEARTBEAT__INIT;
                Scdb__LookupCounts lc;
                cl_lookup_counts(h, &lc);
                hb.lookups = &lc;
                r.version = SCDB_PROTO_VERSION;
                r.client = token;
                r.body_case = SCDB__REQUEST__BODY_HEARTBEAT;
                r.heartbeat = &hb;
                zmq_send(s, buf, scdb__request__pack(&r, buf), ZMQ_DONTWAIT);
            }
            next = now + atomic_load(&h->hb_interval_ms) / 1000.0;
        }
        rc = zmq_poll(it, mon ? 3 : 2, (long)((next - now) * 1000) + 1);
        if (rc < 0 && zmq_errno() != EINTR) break;
        if (rc > 0 && (it[1].revents & ZMQ_POLLIN)) break;
        if (rc > 0 && (it[0].revents & ZMQ_POLLIN))
            while (zmq_recv(s, buf, sizeof buf, ZMQ_DONTWAIT) >= 0) {}
        if (rc > 0 && mon && (it[2].revents & ZMQ_POLLIN)) {
            /* an event: [u16 event, u32 value] then the endpoint */
            uint8_t ev[6];
            int more;
            size_t ml = sizeof more;
            int got = zmq_recv(mon, ev, sizeof ev, ZMQ_DONTWAIT);
            if (got >= 2) {
                uint16_t event;
                memcpy(&event, ev, sizeof event);
                if (event == ZMQ_EVENT_DISCONNECTED) atomic_store(&h->peer_lost, 1);
                if (event == ZMQ_EVENT_CONNECTED) atomic_store(&h->peer_lost, 0);
            }
            while (!zmq_getsockopt(mon, ZMQ_RCVMORE, &more, &ml) && more &&
                   zmq_recv(mon, buf, sizeof buf, ZMQ_DONTWAIT) >= 0) {}
        }
    }
    if (mon) {
        zmq_socket_monitor(s, NULL, 0);
        zmq_close(mon);
    }
    zmq_close(s);
    return NULL;
}

static void hb_start(scdb *h)
{
    sigset_t all, old;

    if (h->hb_running || h->no_heartbeat) return;
    if (pipe(h->hb_pipe)) return;
    fcntl(h->hb_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(h->hb_pipe[1], F_SETFD, FD_CLOEXEC);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);   /* signals stay with the app */
    h->hb_running = pthread_create(&h->hb, NULL, hb_main, h) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!h->hb_running) {
        close(h->hb_pipe[0]);
        close(h->hb_pipe[1]);
    }
}

void cl_hb_stop(scdb *h)
{
    if (!h->hb_running) return;
    (void)!write(h->hb_pipe[1], "x", 1);
    pthread_join(h->hb, NULL);
    close(h->hb_pipe[0]);
    close(h->hb_pipe[1]);
    h->hb_running = 0;
}

/* ----------------------------------------------------------- lifecycle */

static int z85_key(char dst[41], const char *src)
{
    uint8_t bin[32];
    if (!src || strlen(src) != 40 || !zmq_z85_decode(bin, src)) return -1;
    memcpy(dst, src, 41);
    return 0;
}

/* The calling thread's last scdb_connect failure (scdb_connect_error). */
static _Thread_local char connect_err[512];

const char *scdb_connect_error(void) { return connect_err; }

static scdb_err connect_fail(scdb_err e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static scdb_err connect_fail(scdb_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(connect_err, sizeof connect_err, fmt, ap);
    va_end(ap);
    return e;
}

/* SCDB_EACCESS for an ipc:// path this user may not use, naming what is
 * closed to it -- the first directory on the way without search
 * permission, else the socket -- with its group and mode. */
static scdb_err access_fail(const char *path)
{
    char closed[520], gbuf[1024], gname[64];
    struct group gr, *g = NULL;
    struct stat st;
    int is_dir = 0;

    snprintf(closed, sizeof closed, "%s", path);
    for (char *p = closed + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        if (access(closed, X_OK)) {
            is_dir = 1;
            break;
        }
        *p = '/';
    }
    if (!is_dir) snprintf(closed, sizeof closed, "%s", path);
    if (stat(closed, &st)) memset(&st, 0, sizeof st);
    if (getgrgid_r(st.st_gid, &gr, gbuf, sizeof gbuf, &g) || !g)
        snprintf(gname, sizeof gname, "%u", (unsigned)st.st_gid);
    else
        snprintf(gname, sizeof gname, "%s", g->gr_name);
    return connect_fail(SCDB_EACCESS, "no permission to connect to the broker socket %s: %s%s "
                        "belongs to group '%s' (mode %04o) and this user (uid %u) is not in it: "
                        "ask to be added to group '%s' (the broker's socket_group)", path,
                        is_dir ? "the directory " : "it", is_dir ? closed : "", gname,
                        (unsigned)(st.st_mode & 07777), (unsigned)geteuid(), gname);
}

/* connect(2) to the unix socket at path and close: 0 (something listens)
 * or the errno (ECONNREFUSED: nothing does; ENOENT: no file). */
static int ipc_probe(const char *path)
{
    struct sockaddr_un sa;
    int fd, rc, err;

    if (strlen(path) >= sizeof sa.sun_path) return ENAMETOOLONG;
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) return 0;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    err = errno;
    close(fd);
    return rc ? err : 0;
}

scdb_err cl_broker_listens(scdb *h)
{
    const char *path = h->endpoint + 6;
    int err;

    if (strncmp(h->endpoint, "ipc://", 6)) return SCDB_OK;
    err = ipc_probe(path);
    if (err == ENOENT || err == ENOTDIR)
        return cl_fail(h, SCDB_ECLOSED, "the broker is gone: no socket at %s", path);
    if (err == ECONNREFUSED)
        return cl_fail(h, SCDB_ECLOSED, "the broker is gone: nothing listens on %s (killed, "
                       "or stopped without cleaning up)", path);
    return SCDB_OK;                     /* it listens, or no telling: ask it */
}

/* An ipc:// endpoint fails fast when nothing can answer: no socket file, not
 * a socket, or nothing listening on it (a broker that stopped uncleanly);
 * and when this user may not connect (SCDB_EACCESS). */
static scdb_err ipc_reachable(const char *path)
{
    struct stat st;
    int err;

    if (stat(path, &st)) {
        if (errno == ENOENT || errno == ENOTDIR)
            return connect_fail(SCDB_ENOTFOUND, "no broker socket at %s (is a broker running? "
                                "scdb serve --endpoint ipc://%s)", path, path);
        if (errno == EACCES) return access_fail(path);
        return connect_fail(SCDB_ESYS, "cannot reach %s: %s", path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        return connect_fail(SCDB_EINVAL, "%s is not a unix socket", path);
    if ((err = ipc_probe(path)) == ENAMETOOLONG)
        return connect_fail(SCDB_EINVAL, "socket path %s is too long", path);
    if (err == 0) return SCDB_OK;
    if (err == ECONNREFUSED)
        return connect_fail(SCDB_ECLOSED, "nothing listens on %s (a broker that stopped "
                            "without cleaning up left it)", path);
    if (err == EACCES) return access_fail(path);
    return SCDB_OK;          /* anything else: let ZeroMQ try */
}

scdb_err scdb_connect(const scdb_opts *o, scdb **out)
{
    scdb_opts def = {0};
    scdb *h;
    scdb_err e;

    connect_err[0] = 0;
    if (!out) return connect_fail(SCDB_EINVAL, "scdb_connect: out is NULL");
    *out = NULL;
    if (!o) o = &def;
    h = calloc(1, sizeof *h);
    if (!h) return connect_fail(SCDB_ENOMEM, "out of memory");
    h->hb_pipe[0] = h->hb_pipe[1] = -1;
    h->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    h->no_heartbeat = o->no_heartbeat;
    {
        const char *env = getenv("SCDB_LOOKUP_INDEX");
        h->no_index = o->no_lookup_index || (env && !strcmp(env, "0"));
        h->lix_err = SCDB_EUNSUPPORTED;
    }
    if (o->endpoint && *o->endpoint)             /* "" is the default too */
        snprintf(h->endpoint, sizeof h->endpoint, "%s", o->endpoint);
    else
        scdb_default_endpoint(h->endpoint, sizeof h->endpoint);
    if (o->name && *o->name)
        snprintf(h->name, sizeof h->name, "%s", o->name);
    else
        snprintf(h->name, sizeof h->name, "pid %d", (int)getpid());
    if (!strncmp(h->endpoint, "tcp://", 6)) {
        e = SCDB_EINVAL;
        if (z85_key(h->server_key, o->curve_server_key)) {
            connect_fail(e, "%s: tcp:// needs the broker's CURVE public key "
                         "(scdb_opts.curve_server_key, 40 Z85 characters)", h->endpoint);
            goto fail;
        }
        if (o->curve_public_key || o->curve_secret_key) {
            if (z85_key(h->public_key, o->curve_public_key) ||
                z85_key(h->secret_key, o->curve_secret_key)) {
                connect_fail(e, "%s: curve_public_key and curve_secret_key must both be 40 Z85 "
                             "characters", h->endpoint);
                goto fail;
            }
        } else if (zmq_curve_keypair(h->public_key, h->secret_key)) {
            connect_fail(e = SCDB_EUNSUPPORTED, "this libzmq has no CURVE support");
            goto fail;
        }
        h->curve = 1;
    } else if (!strncmp(h->endpoint, "ipc://", 6)) {
        if (!h->endpoint[6]) {
            connect_fail(e = SCDB_EINVAL, "endpoint ipc:// names no path");
            goto fail;
        }
        if ((e = ipc_reachable(h->endpoint + 6))) goto fail;
        scdb_fd_socket_path(h->endpoint + 6, h->fd_path, sizeof h->fd_path);
    } else {
        connect_fail(e = SCDB_EINVAL, "endpoint '%s' has no known scheme: use ipc://PATH or "
                     "tcp://HOST:PORT", h->endpoint);
        goto fail;
    }
    h->zctx = zmq_ctx_new();
    if (!h->zctx) {
        connect_fail(e = SCDB_ESYS, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    zmq_ctx_set(h->zctx, ZMQ_BLOCKY, 0);     /* close never waits on linger */
    if (req_socket_open(h)) {
        connect_fail(e = SCDB_ESYS, "cannot connect %s: %s", h->endpoint,
                     zmq_strerror(zmq_errno()));
        goto fail;
    }
    e = scdb_ping(h, NULL);
    if (e) {
        connect_fail(e, "%s", h->err[0] ? h->err : scdb_strerror(e));
        goto fail;
    }
    *out = h;
    return SCDB_OK;
fail:
    scdb_debug("scdb_connect %s: %s", h->endpoint, connect_err);
    cl_conn_free(h);
    return e;
}

scdb_err scdb_register(scdb *h, scdb_role role, const char *model, const char *codebook,
                       scdb_info *info)
{
    scdb_err e;

    if (!h || !model || (role != SCDB_PRODUCER && role != SCDB_CONSUMER))
        return cl_fail(h, SCDB_EINVAL, "register: role and model are required");
    if (strlen(model) >= sizeof h->model || (codebook && strlen(codebook) >= sizeof h->codebook))
        return cl_fail(h, SCDB_EINVAL, "register: name too long");
    h->role = role;
    snprintf(h->model, sizeof h->model, "%s", model);
    snprintf(h->codebook, sizeof h->codebook, "%s", codebook ? codebook : "");
    e = hello(h);
    if (e) return e;
    h->registered = 1;
    hb_start(h);
    if (info) *info = h->info;
    return SCDB_OK;
}

scdb_err scdb_weights_fingerprint(const char *model_dir, char fp[33], char *errbuf, size_t errlen)
{
    if (!model_dir || !fp) return SCDB_EINVAL;
    return scdb_weights_fp(model_dir, fp, errbuf, errlen);
}

scdb_err scdb_weights_fingerprint_adapter(const char *base, const char *adapter, char fp[33], char *errbuf,
                                          size_t errlen)
{
    if (!base || !adapter || !fp) return SCDB_EINVAL;
    return scdb_weights_fp_adapter(base, adapter, fp, errbuf, errlen);
}

scdb_err scdb_set_weights_fp(scdb *h, const char *fp)
{
    if (!h) return SCDB_EINVAL;
    if (fp && *fp && !scdb_weights_fp_valid(fp))
        return cl_fail(h, SCDB_EINVAL, "weights fingerprint '%.64s' is not 32 lowercase hex digits", fp);
    snprintf(h->weights_fp, sizeof h->weights_fp, "%s", fp ? fp : "");
    h->err[0] = 0;
    return SCDB_OK;
}

scdb_err scdb_set_weights_dir(scdb *h, const char *model_dir)
{
    char fp[33], msg[512] = "";
    scdb_err e;
    if (!h || !model_dir) return cl_fail(h, SCDB_EINVAL, "set_weights_dir: no directory");
    if ((e = scdb_weights_fp(model_dir, fp, msg, sizeof msg)))
        return cl_fail(h, e, "weights fingerprint of %s: %s", model_dir, msg);
    return scdb_set_weights_fp(h, fp);
}

scdb_err scdb_ping(scdb *h, double *rtt_us)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__Ping p = SCDB__PING__INIT;
    Scdb__Reply *rep = NULL;
    uint64_t t0 = scdb_now_ns();
    scdb_err e;

    if (!h) return SCDB_EINVAL;
    p.t_ns = t0;
    req.body_case = SCDB__REQUEST__BODY_PING;
    req.ping = &p;
    e = cl_request(h, &req, NULL, NULL, 0, &rep);
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    if (!e && rtt_us) *rtt_us = (double)(scdb_now_ns() - t0) / 1e3;
    return e;
}

void cl_conn_free(scdb *h)
{
    scdb_lix_close(&h->lix);
    req_socket_close(h);
    if (h->zctx) zmq_ctx_term(h->zctx);
    free(h);
}
