/* libscdb.c — the handle: sockets, request/reply with timeouts and
 * re-registration, the heartbeat thread, the broker's lookup index, and the
 * block calls (put, lookup, delete, stats, ping).  Arenas and get live in
 * libscdb_arena.c. */
#include "libscdb_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define DEFAULT_TIMEOUT_MS 5000

scdb_err lib_fail(scdb *h, scdb_err e, const char *fmt, ...)
{
    if (h) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->err, sizeof h->err, fmt, ap);
        va_end(ap);
    }
    return e;
}

const char *scdb_last_error(const scdb *h) { return h ? h->err : "no handle"; }

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

static void *socket_new(scdb *h, int heartbeat)
{
    void *s = zmq_socket(h->zctx, ZMQ_DEALER);
    int zero = 0, ivl = 100, ivl_max = 1000, one = 1, hwm = 4;

    if (!s) return NULL;
    if (zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl) ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max) ||
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &h->timeout_ms, sizeof h->timeout_ms) ||
        (heartbeat && (zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one) ||
                       zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm))) ||
        set_curve(h, s) || zmq_connect(s, h->endpoint)) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* After a timeout: drop whatever is queued on the old socket. */
static void socket_reset(scdb *h)
{
    if (h->sock) zmq_close(h->sock);
    h->sock = socket_new(h, 0);
}

/* --------------------------------------------------------- request/reply */

static scdb_err call_once(scdb *h, Scdb__Request *req, const void *const *frames,
                          const size_t *lens, int n, Scdb__Reply **rep)
{
    uint8_t stackbuf[1024], *buf = stackbuf;
    size_t len;
    double deadline;
    scdb_err e = SCDB_OK;

    *rep = NULL;
    if (!h->sock) {
        h->sock = socket_new(h, 0);
        if (!h->sock) return lib_fail(h, SCDB_ESYS, "cannot connect %s: %s", h->endpoint,
                                      zmq_strerror(zmq_errno()));
    }
    req->version = SCDB_PROTO_VERSION;
    req->id = ++h->next_id;
    req->client = atomic_load(&h->token);
    len = scdb__request__get_packed_size(req);
    if (len > sizeof stackbuf && !(buf = malloc(len))) return lib_fail(h, SCDB_ENOMEM, "out of memory");
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
        /* a blocking receive bounded by the time left: one call per reply */
        zmq_setsockopt(h->sock, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, h->sock, 0) < 0) {
            int err = zmq_errno();
            zmq_msg_close(&m);
            if (err == EAGAIN || err == EINTR) continue;
            return lib_fail(h, SCDB_ESYS, "receive: %s", zmq_strerror(err));
        }
        r = scdb__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        while (zmq_msg_more(&m)) {          /* no reply carries frames yet */
            zmq_msg_close(&m);
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, h->sock, 0) < 0) break;
        }
        zmq_msg_close(&m);
        if (!r) return lib_fail(h, SCDB_EPROTO, "broker sent a reply that is not a scdb.Reply");
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
        return lib_fail(h, SCDB_ESYS, "send: %s", zmq_strerror(zmq_errno()));
timeout:
    socket_reset(h);
    return lib_fail(h, SCDB_ETIMEDOUT, "no reply from the broker at %s within %d ms",
                    h->endpoint, h->timeout_ms);
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
}

/* ---------------------------------------------------------- lookup index
 *
 * The broker names its shared-memory lookup index (schema/lookup_index.h)
 * in every HelloReply; we map it read-only after each hello (so a broker
 * restart, which makes a new one, re-maps it too) and answer scdb_lookup
 * from it: hash the prompt's blocks with our namespace, probe the keys.
 * Anything unusual — no index, refused at open, retired without a
 * successor, the writer too busy — sends the lookup down the request path,
 * which gives the same answer. */

#define LIX_FOLLOW_MAX 4

static void lix_drop(scdb *h, scdb_err why)
{
    scdb_lix_close(&h->lix);
    h->lix_err = why;
}

/* Map `name` (following retired objects to their successors). */
static void lix_map(scdb *h, const char *name)
{
    char cur[SCDB_LIX_NAME_MAX], next[SCDB_LIX_NAME_MAX];
    scdb_err e = SCDB_EUNSUPPORTED;

    scdb_lix_close(&h->lix);
    snprintf(cur, sizeof cur, "%s", name);
    for (int hop = 0; cur[0] && hop < LIX_FOLLOW_MAX; hop++) {
        scdb_lix *ix = NULL;
        e = scdb_lix_open(cur, h->info.broker_instance, h->info.block_tokens, &ix);
        if (e == SCDB_OK) {
            h->lix = ix;
            break;
        }
        next[0] = 0;
        if (e == SCDB_ECLOSED) scdb_lix_retired(ix, next);
        scdb_lix_close(&ix);
        if (e == SCDB_ENOTFOUND)        /* replaced meanwhile: a lookup reply names the new one */
            scdb_debug("libscdb: lookup index %s is gone", cur);
        else if (e != SCDB_ECLOSED)
            scdb_warn("libscdb: lookup index %s refused (%s): lookups go to the broker", cur,
                      scdb_strerror(e));
        snprintf(cur, sizeof cur, "%s", next);
    }
    h->lix_err = h->lix ? SCDB_OK : e;
}

/* After a hello: map the index it named, unless turned off. */
static void lix_attach(scdb *h, const Scdb__HelloReply *r)
{
    h->have_ns = r->ns.len == sizeof h->ns.b;
    if (h->have_ns) memcpy(h->ns.b, r->ns.data, sizeof h->ns.b);
    snprintf(h->lix_name, sizeof h->lix_name, "%s",
             r->lookup_index && strlen(r->lookup_index) < sizeof h->lix_name ? r->lookup_index
                                                                            : "");
    if (h->no_index || !h->have_ns || !h->lix_name[0] || !h->info.block_tokens) {
        lix_drop(h, SCDB_EUNSUPPORTED);
        return;
    }
    lix_map(h, h->lix_name);
}

static scdb_err check_tokens(scdb *h, const int32_t *t, size_t n)
{
    uint32_t any = 0;
    if (n > h->info.max_tokens)
        return lib_fail(h, SCDB_ETOOBIG, "%zu tokens exceed max_tokens %u", n, h->info.max_tokens);
    for (size_t i = 0; i < n; i++) any |= (uint32_t)t[i];
    if (!(any & 0x80000000u)) return SCDB_OK;
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0) return lib_fail(h, SCDB_EINVAL, "token %zu is negative (%d)", i, (int)t[i]);
    return SCDB_OK;
}

/* Answer a lookup from the index.  SCDB_OK with *out filled, an argument
 * error (as the broker would reply), or SCDB_EAGAIN-like SCDB_EBUSY: use
 * the request path. */
static scdb_err lix_lookup(scdb *h, const int32_t *tokens, size_t n_tokens,
                           scdb_lookup_result *out)
{
    enum { CHUNK = 64 };
    scdb_key keys[CHUNK], prev;
    uint32_t bt = h->info.block_tokens;
    size_t full, matched = 0, i = 0;
    int restarts = 0;
    scdb_err e = check_tokens(h, tokens, n_tokens);

    if (e) return e;
    full = n_tokens / bt;
    while (i < full) {
        size_t m = full - i < CHUNK ? full - i : CHUNK, k = 0;
        if (scdb_block_key_continue(i ? &prev : NULL, &h->ns, tokens + i * bt, m, bt, keys))
            return SCDB_EBUSY;              /* keys we cannot derive: ask the broker */
        e = scdb_lix_match(h->lix, keys, m, &k);
        if (e == SCDB_ECLOSED) {
            /* retired: a grown successor (same answers), or a stopped broker */
            char next[SCDB_LIX_NAME_MAX] = "";
            scdb_lix_retired(h->lix, next);
            if (next[0]) lix_map(h, next);
            else lix_drop(h, SCDB_ECLOSED);
            if (!h->lix || ++restarts > LIX_FOLLOW_MAX) return SCDB_EBUSY;
            i = 0;                          /* start over on the new table */
            matched = 0;
            continue;
        }
        if (e) return SCDB_EBUSY;
        matched += k;
        if (k < m) break;
        prev = keys[m - 1];
        i += m;
    }
    if (out) {
        out->n_full = (uint32_t)full;
        out->n_matched = (uint32_t)matched;
        out->matched_tokens = (uint32_t)(matched * bt);
    }
    h->err[0] = 0;
    return SCDB_OK;
}

static scdb_err hello(scdb *h)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__Hello hl = SCDB__HELLO__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e;

    hl.client_name = h->name;
    hl.pid = (uint32_t)getpid();
    hl.role = h->role == SCDB_PRODUCER ? SCDB__ROLE__PRODUCER : SCDB__ROLE__CONSUMER;
    hl.model = h->model;
    hl.codebook = h->codebook;
    req.body_case = SCDB__REQUEST__BODY_HELLO;
    req.hello = &hl;
    e = call_once(h, &req, NULL, NULL, 0, &rep);
    if (e == SCDB_OK && (rep->body_case != SCDB__REPLY__BODY_HELLO || !rep->hello->client))
        e = lib_fail(h, SCDB_EPROTO, "hello reply without a client token");
    if (e == SCDB_OK) {
        atomic_store(&h->token, rep->hello->client);
        info_from(&h->info, rep->hello);
        lix_attach(h, rep->hello);
        atomic_store(&h->hb_interval_ms, (int)(h->info.heartbeat_ms ? h->info.heartbeat_ms : 1000));
        h->gen++;
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err lib_request(scdb *h, Scdb__Request *req, const void *const *frames,
                     const size_t *lens, int n, Scdb__Reply **rep)
{
    scdb_err e = call_once(h, req, frames, lens, n, rep);

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
        return lib_fail(h, SCDB_ECLOSED, "the broker restarted: this arena is gone");
    default: break;
    }
    return call_once(h, req, frames, lens, n, rep);
}

/* ------------------------------------------------------------ heartbeat */

static void *hb_main(void *arg)
{
    scdb *h = arg;
    void *s = socket_new(h, 1);
    uint8_t buf[256];
    double next = 0;

    if (!s) return NULL;
    for (;;) {
        zmq_pollitem_t it[2] = {{.socket = s, .events = ZMQ_POLLIN},
                                {.fd = h->hb_pipe[0], .events = ZMQ_POLLIN}};
        double now = scdb_now();
        uint64_t token = atomic_load(&h->token);
        int rc;

        if (now >= next) {
            if (token) {
                Scdb__Request r = SCDB__REQUEST__INIT;
                Scdb__Heartbeat hb = SCDB__HEARTBEAT__INIT;
                r.version = SCDB_PROTO_VERSION;
                r.client = token;
                r.body_case = SCDB__REQUEST__BODY_HEARTBEAT;
                r.heartbeat = &hb;
                zmq_send(s, buf, scdb__request__pack(&r, buf), ZMQ_DONTWAIT);
            }
            next = now + atomic_load(&h->hb_interval_ms) / 1000.0;
        }
        rc = zmq_poll(it, 2, (long)((next - now) * 1000) + 1);
        if (rc < 0 && zmq_errno() != EINTR) break;
        if (rc > 0 && (it[1].revents & ZMQ_POLLIN)) break;
        if (rc > 0 && (it[0].revents & ZMQ_POLLIN))
            while (zmq_recv(s, buf, sizeof buf, ZMQ_DONTWAIT) >= 0) {}
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

static void hb_stop(scdb *h)
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

scdb_err scdb_connect(const scdb_opts *o, scdb **out)
{
    scdb_opts def = {0};
    scdb *h;
    scdb_err e;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!o) o = &def;
    h = calloc(1, sizeof *h);
    if (!h) return SCDB_ENOMEM;
    h->hb_pipe[0] = h->hb_pipe[1] = -1;
    h->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    h->no_heartbeat = o->no_heartbeat;
    {
        const char *env = getenv("SCDB_LOOKUP_INDEX");
        h->no_index = o->no_lookup_index || (env && !strcmp(env, "0"));
        h->lix_err = SCDB_EUNSUPPORTED;
    }
    if (o->endpoint)
        snprintf(h->endpoint, sizeof h->endpoint, "%s", o->endpoint);
    else
        scdb_default_endpoint(h->endpoint, sizeof h->endpoint);
    if (o->name)
        snprintf(h->name, sizeof h->name, "%s", o->name);
    else
        snprintf(h->name, sizeof h->name, "pid %d", (int)getpid());
    e = SCDB_EINVAL;
    if (!strncmp(h->endpoint, "tcp://", 6)) {
        if (z85_key(h->server_key, o->curve_server_key)) goto fail;
        if (o->curve_public_key || o->curve_secret_key) {
            if (z85_key(h->public_key, o->curve_public_key) ||
                z85_key(h->secret_key, o->curve_secret_key))
                goto fail;
        } else if (zmq_curve_keypair(h->public_key, h->secret_key)) {
            goto fail;
        }
        h->curve = 1;
    } else if (strncmp(h->endpoint, "ipc://", 6)) {
        goto fail;
    }
    h->zctx = zmq_ctx_new();
    if (!h->zctx) {
        e = SCDB_ESYS;
        goto fail;
    }
    zmq_ctx_set(h->zctx, ZMQ_BLOCKY, 0);     /* close never waits on linger */
    h->sock = socket_new(h, 0);
    if (!h->sock) {
        e = SCDB_ESYS;
        goto fail;
    }
    e = scdb_ping(h, NULL);
    if (e) goto fail;
    *out = h;
    return SCDB_OK;
fail:
    if (e == SCDB_EINVAL)
        scdb_warn("scdb_connect: bad endpoint '%s' or CURVE keys (tcp:// needs the server's "
                  "40-character Z85 public key)", h->endpoint);
    else
        scdb_debug("scdb_connect %s: %s", h->endpoint, h->err);
    scdb_close(&h);
    return e;
}

void scdb_close(scdb **hp)
{
    scdb *h;

    if (!hp || !*hp) return;
    h = *hp;
    hb_stop(h);
    /* CUDA IPC mappings go before the goodbye lets the broker free them */
    for (scdb_arena *a = h->arenas; a; a = a->next)
        if (a->dev) {
            lib_cuda_close(a->dev, a->cuda_device);
            a->dev = NULL;
        }
    if (h->registered && h->sock && atomic_load(&h->token)) {
        Scdb__Request req = SCDB__REQUEST__INIT;
        Scdb__Goodbye gb = SCDB__GOODBYE__INIT;
        Scdb__Reply *rep = NULL;
        int t = h->timeout_ms;
        h->timeout_ms = t < 1000 ? t : 1000;
        req.body_case = SCDB__REQUEST__BODY_GOODBYE;
        req.goodbye = &gb;
        call_once(h, &req, NULL, NULL, 0, &rep);
        if (rep) scdb__reply__free_unpacked(rep, NULL);
        h->timeout_ms = t;
    }
    h->registered = 0;       /* arenas: unmap only, the broker freed them */
    atomic_store(&h->token, 0);
    while (h->arenas) {
        scdb_arena *a = h->arenas;
        scdb_arena_free(&a);
    }
    scdb_lix_close(&h->lix);
    if (h->sock) zmq_close(h->sock);
    if (h->zctx) zmq_ctx_term(h->zctx);
    free(h);
    *hp = NULL;
}

/* ------------------------------------------------------------- requests */

scdb_err scdb_register(scdb *h, scdb_role role, const char *model, const char *codebook,
                       scdb_info *info)
{
    scdb_err e;

    if (!h || !model || (role != SCDB_PRODUCER && role != SCDB_CONSUMER))
        return lib_fail(h, SCDB_EINVAL, "register: role and model are required");
    if (strlen(model) >= sizeof h->model || (codebook && strlen(codebook) >= sizeof h->codebook))
        return lib_fail(h, SCDB_EINVAL, "register: name too long");
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
    e = lib_request(h, &req, NULL, NULL, 0, &rep);
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    if (!e && rtt_us) *rtt_us = (double)(scdb_now_ns() - t0) / 1e3;
    return e;
}

static scdb_err need_registered(scdb *h)
{
    if (!h) return SCDB_EINVAL;
    if (!h->registered) return lib_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    return SCDB_OK;
}

scdb_err scdb_put(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                  const void *payload, size_t payload_len, scdb_put_result *out)
{
    uint64_t bb;
    size_t n_blocks, per_req, done = 0;
    scdb_put_result res = {0};
    scdb_err e = need_registered(h);

    if (e) return e;
    if ((!tokens && n_tokens) || (!payload && payload_len))
        return lib_fail(h, SCDB_EINVAL, "put: NULL tokens or payload");
    bb = h->info.block_bytes;
    if (!bb || payload_len % bb)
        return lib_fail(h, SCDB_ESHAPE, "put: payload of %zu bytes is not whole blocks of %llu",
                        payload_len, (unsigned long long)bb);
    n_blocks = payload_len / bb;
    if (n_blocks > n_tokens / h->info.block_tokens ||
        first_block > n_tokens / h->info.block_tokens - n_blocks)
        return lib_fail(h, SCDB_ESHAPE, "put: %zu blocks from block %u, but %zu tokens hold %zu",
                        n_blocks, first_block, n_tokens, n_tokens / h->info.block_tokens);
    /* split into requests that fit max_request_bytes (tokens cost <= 5 B) */
    {
        uint64_t room = h->info.max_request_bytes;
        uint64_t fixed = 5ull * n_tokens + 256;
        per_req = room > fixed ? (size_t)((room - fixed) / bb) : 0;
        if (per_req == 0 && n_blocks)
            return lib_fail(h, SCDB_ETOOBIG, "put: one block of %llu bytes exceeds the "
                            "broker's max_request_bytes %llu", (unsigned long long)bb,
                            (unsigned long long)room);
    }
    do {
        size_t k = n_blocks - done < per_req ? n_blocks - done : per_req;
        uint32_t fb = first_block + (uint32_t)done;
        size_t nt = n_blocks ? (size_t)(fb + k) * h->info.block_tokens : n_tokens;
        const void **frames = NULL;
        size_t *lens = NULL;
        Scdb__Request req = SCDB__REQUEST__INIT;
        Scdb__PutRequest p = SCDB__PUT_REQUEST__INIT;
        Scdb__Reply *rep = NULL;

        if (k && (!(frames = malloc(k * sizeof *frames)) || !(lens = malloc(k * sizeof *lens)))) {
            free(frames);
            return lib_fail(h, SCDB_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < k; i++) {
            frames[i] = (const char *)payload + (done + i) * bb;
            lens[i] = bb;
        }
        p.tokens = (int32_t *)tokens;
        p.n_tokens = nt;
        p.first_block = fb;
        p.n_blocks = (uint32_t)k;
        req.body_case = SCDB__REQUEST__BODY_PUT;
        req.put = &p;
        e = lib_request(h, &req, (const void *const *)frames, lens, (int)k, &rep);
        free(frames);
        free(lens);
        if (rep && rep->body_case == SCDB__REPLY__BODY_PUT) {
            res.n_stored = rep->put->n_stored;
            res.n_new += rep->put->n_new;
        }
        if (rep) scdb__reply__free_unpacked(rep, NULL);
        done += k;
        if (e) break;
    } while (done < n_blocks);
    res.n_full = (uint32_t)(n_tokens / h->info.block_tokens);
    if (out) *out = res;
    return e;
}

scdb_err scdb_put_states(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t first_block,
                         scdb_arena *a, scdb_put_result *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__PutStatesRequest p = SCDB__PUT_STATES_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e = need_registered(h);

    if (e) return e;
    if ((!tokens && n_tokens) || !a || a->h != h) return lib_fail(h, SCDB_EINVAL, "put_states: NULL argument");
    if (!a->states_dim)
        return lib_fail(h, SCDB_EINVAL, "put_states: arena %llu is not a states arena",
                        (unsigned long long)a->id);
    if (a->gen != h->gen)
        return lib_fail(h, SCDB_ECLOSED, "arena %llu is from before a broker restart: free it "
                        "and create a new one", (unsigned long long)a->id);
    if (n_tokens > a->capacity)
        return lib_fail(h, SCDB_ERANGE, "put_states: %zu tokens, the arena holds %u", n_tokens,
                        a->capacity);
    p.tokens = (int32_t *)tokens;
    p.n_tokens = n_tokens;
    p.arena = a->id;
    p.first_block = first_block;
    req.body_case = SCDB__REQUEST__BODY_PUT_STATES;
    req.put_states = &p;
    e = lib_request(h, &req, NULL, NULL, 0, &rep);
    if (rep && rep->body_case == SCDB__REPLY__BODY_PUT && out) {
        out->n_full = rep->put->n_full;
        out->n_stored = rep->put->n_stored;
        out->n_new = rep->put->n_new;
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_lookup(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_lookup_result *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__LookupRequest l = SCDB__LOOKUP_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e = need_registered(h);

    if (e) return e;
    if (!tokens && n_tokens) return lib_fail(h, SCDB_EINVAL, "lookup: NULL tokens");
    if (h->lix) {
        e = lix_lookup(h, tokens, n_tokens, out);
        if (e != SCDB_EBUSY) {
            if (!e) h->n_index_lookups++;
            return e;
        }
        h->n_index_fallbacks++;
    }
    h->n_request_lookups++;
    l.tokens = (int32_t *)tokens;
    l.n_tokens = n_tokens;
    req.body_case = SCDB__REQUEST__BODY_LOOKUP;
    req.lookup = &l;
    e = lib_request(h, &req, NULL, NULL, 0, &rep);
    if (!e && rep->body_case != SCDB__REPLY__BODY_LOOKUP)
        e = lib_fail(h, SCDB_EPROTO, "lookup reply without a body");
    if (!e && out) {
        out->n_full = rep->lookup->n_full;
        out->n_matched = rep->lookup->n_matched;
        out->matched_tokens = rep->lookup->matched_tokens;
    }
    /* lost our index (replaced twice while we did not look): map the
     * current one, unless it is the one we tried last */
    if (!e && !h->lix && !h->no_index && h->have_ns && rep->lookup->lookup_index &&
        rep->lookup->lookup_index[0] && strlen(rep->lookup->lookup_index) < sizeof h->lix_name &&
        strcmp(rep->lookup->lookup_index, h->lix_name)) {
        snprintf(h->lix_name, sizeof h->lix_name, "%s", rep->lookup->lookup_index);
        lix_map(h, h->lix_name);
    }
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_delete(scdb *h, const int32_t *tokens, size_t n_tokens, uint32_t from_block,
                     uint32_t *n_deleted)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__DeleteRequest d = SCDB__DELETE_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    scdb_err e = need_registered(h);

    if (e) return e;
    if (!tokens && n_tokens) return lib_fail(h, SCDB_EINVAL, "delete: NULL tokens");
    d.tokens = (int32_t *)tokens;
    d.n_tokens = n_tokens;
    d.from_block = from_block;
    req.body_case = SCDB__REQUEST__BODY_DEL;
    req.del = &d;
    e = lib_request(h, &req, NULL, NULL, 0, &rep);
    if (n_deleted) *n_deleted = rep && rep->body_case == SCDB__REPLY__BODY_DEL ? rep->del->n_deleted : 0;
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}

scdb_err scdb_stats(scdb *h, scdb_stat *out)
{
    Scdb__Request req = SCDB__REQUEST__INIT;
    Scdb__StatsRequest sr = SCDB__STATS_REQUEST__INIT;
    Scdb__Reply *rep = NULL;
    const Scdb__StatsReply *s;
    scdb_err e;

    if (!h || !out) return SCDB_EINVAL;
    req.body_case = SCDB__REQUEST__BODY_STATS;
    req.stats = &sr;
    e = lib_request(h, &req, NULL, NULL, 0, &rep);
    if (!e && rep->body_case != SCDB__REPLY__BODY_STATS)
        e = lib_fail(h, SCDB_EPROTO, "stats reply without a body");
    if (e) goto out;
    s = rep->stats;
    memset(out, 0, sizeof *out);
#define C(f) out->f = s->f
    C(blocks); C(disk_bytes); C(disk_capacity_bytes); C(hot_blocks); C(hot_bytes);
    C(hot_capacity_bytes); C(pinned_blocks); C(lookups); C(lookup_hit_blocks);
    C(lookup_miss_blocks); C(gets); C(get_hot_hits); C(get_disk_hits); C(get_misses); C(puts);
    C(put_existing); C(evictions); C(checksum_failures); C(clients); C(arenas);
    C(arena_bytes); C(sessions); C(inflight); C(requests); C(errors); C(reclaimed_clients);
    C(reclaimed_arenas); C(reclaimed_sessions); C(broker_instance); C(uptime_s); C(workers); C(block_tokens);
#undef C
    for (size_t i = 0; i < s->n_ops && out->n_ops < SCDB_STAT_MAX_OPS; i++) {
        int k = out->n_ops++;
        snprintf(out->ops[k].op, sizeof out->ops[k].op, "%s", s->ops[i]->op);
        out->ops[k].count = s->ops[i]->count;
        out->ops[k].errors = s->ops[i]->errors;
        out->ops[k].total_ns = s->ops[i]->total_ns;
        out->ops[k].max_ns = s->ops[i]->max_ns;
    }
    out->index_lookups = h->n_index_lookups;
    out->request_lookups = h->n_request_lookups;
    out->index_fallbacks = h->n_index_fallbacks;
    out->index_error = h->lix_err;
out:
    if (rep) scdb__reply__free_unpacked(rep, NULL);
    return e;
}
