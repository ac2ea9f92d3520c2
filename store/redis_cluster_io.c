/* redis_cluster_io.c — node sockets and pipelined rounds.
 *
 * Every node has at most one non-blocking TCP socket and a hiredis reply
 * parser (redisReader).  A round sends each pipe's formatted commands to its
 * node and reads replies, all nodes at once in one poll() loop, until every
 * pipe has all its replies, fails, or the deadline passes.  hiredis is used
 * for formatting and parsing only: sockets, timeouts and signals stay here
 * (send(MSG_NOSIGNAL): a closed peer never raises SIGPIPE in the caller). */
#include "redis_cluster_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- nodes */

scdb_err rc_node_get(scdb_rc *rc, const char *host, int port, int *idx)
{
    for (size_t i = 0; i < rc->n_nodes; i++)
        if (rc->nodes[i].port == port && !strcmp(rc->nodes[i].host, host)) {
            *idx = (int)i;
            return SCDB_OK;
        }
    if (rc->n_nodes >= SCDB_RC_MAX_NODES) return SCDB_EFULL;
    if (rc->n_nodes == rc->cap_nodes) {
        size_t cap = rc->cap_nodes ? rc->cap_nodes * 2 : 8;
        rc_node *nn = realloc(rc->nodes, cap * sizeof *nn);
        if (!nn) return SCDB_ENOMEM;
        rc->nodes = nn;
        rc->cap_nodes = cap;
    }
    rc_node *n = &rc->nodes[rc->n_nodes];
    memset(n, 0, sizeof *n);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    n->fd = -1;
    *idx = (int)rc->n_nodes++;
    return SCDB_OK;
}

bool rc_node_backing_off(const scdb_rc *rc, const rc_node *n, uint64_t now)
{
    (void)rc;
    return n->fd < 0 && n->retry_at_ns > now;
}

void rc_node_close(rc_node *n)
{
    if (n->fd >= 0) close(n->fd);
    n->fd = -1;
    n->connecting = false;
    n->authed = false;
    n->discard = 0;
    if (n->reader) redisReaderFree(n->reader);
    n->reader = NULL;
}

void rc_node_failed(scdb_rc *rc, int idx, const char *why)
{
    rc_node *n = &rc->nodes[idx];
    rc_node_close(n);
    if (n->fails < 30) n->fails++;
    long long ms = (long long)rc->backoff_min_ms << (n->fails - 1 < 20 ? n->fails - 1 : 20);
    if (ms > rc->backoff_max_ms) ms = rc->backoff_max_ms;
    n->retry_at_ns = scdb_now_ns() + (uint64_t)ms * 1000000ull;
    rc->map_stale = true;
    rc->st.node_failures++;
    if (!n->down) {
        char self[RC_HOST_MAX + 16];
        int sl = snprintf(self, sizeof self, "%s:%d: ", n->host, n->port);
        if (sl > 0 && !strncmp(why, self, (size_t)sl)) why += sl; /* said once is enough */
        scdb_warn("redis node %s:%d down: %s (no new connection for %lld ms; backoff up to %d ms)",
                  n->host, n->port, why, ms, rc->backoff_max_ms);
        n->down = true;
    }
}

void rc_node_ok(scdb_rc *rc, int idx)
{
    rc_node *n = &rc->nodes[idx];
    n->fails = 0;
    n->retry_at_ns = 0;
    if (n->down) {
        scdb_info("redis node %s:%d up", n->host, n->port);
        n->down = false;
    }
}

/* Start a non-blocking connect.  SCDB_EIO with why on an immediate failure. */
static scdb_err node_connect(scdb_rc *rc, rc_node *n, char *why, size_t why_len)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    int rv, err = 0;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
    snprintf(port, sizeof port, "%d", n->port);
    rv = getaddrinfo(n->host, port, &hints, &res);
    if (rv == EAI_NONAME && n->seed) { /* a seed may be a host name */
        hints.ai_flags = AI_NUMERICSERV;
        rv = getaddrinfo(n->host, port, &hints, &res);
    }
    if (rv != 0) {
        rc_why(why, why_len, "%s:%d: cannot resolve: %s", n->host, n->port, gai_strerror(rv));
        return SCDB_EIO;
    }
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
            n->reader = redisReaderCreate();
            if (!n->reader) {
                close(fd);
                freeaddrinfo(res);
                rc_why(why, why_len, "out of memory");
                return SCDB_ENOMEM;
            }
            n->fd = fd;
            n->connecting = true; /* confirmed by the first POLLOUT */
            freeaddrinfo(res);
            return SCDB_OK;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    rc_why(why, why_len, "%s:%d: connect: %s", n->host, n->port, strerror(err));
    rc->st.connect_failures++;
    return SCDB_EIO;
}

/* ---------------------------------------------------------------- pipes */

static void pipe_fail(scdb_rc *rc, rc_pipe *p, scdb_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pipe_fail(scdb_rc *rc, rc_pipe *p, scdb_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    p->err = e;
    p->active = false;
    rc_node_close(&rc->nodes[p->node]);
}

static scdb_err pipe_reserve(rc_pipe *p, size_t more)
{
    if (p->n_want + more > p->cap_want) {
        size_t cap = p->cap_want ? p->cap_want * 2 : 16;
        while (cap < p->n_want + more) cap *= 2;
        int32_t *t = realloc(p->tags, cap * sizeof *t);
        if (!t) return SCDB_ENOMEM;
        p->tags = t;
        redisReply **g = realloc(p->got, cap * sizeof *g);
        if (!g) return SCDB_ENOMEM;
        p->got = g;
        p->cap_want = cap;
    }
    return SCDB_OK;
}

scdb_err rc_pipe_add(rc_pipe *p, int32_t tag, int argc, const char **argv, const size_t *argvlen)
{
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0 || !cmd) return SCDB_ENOMEM;
    scdb_err e = pipe_reserve(p, 1);
    if (e) goto out;
    if (p->out_len + (size_t)len > p->out_cap) {
        size_t cap = p->out_cap ? p->out_cap * 2 : 4096;
        while (cap < p->out_len + (size_t)len) cap *= 2;
        char *o = realloc(p->out, cap);
        if (!o) {
            e = SCDB_ENOMEM;
            goto out;
        }
        p->out = o;
        p->out_cap = cap;
    }
    memcpy(p->out + p->out_len, cmd, (size_t)len);
    p->out_len += (size_t)len;
    p->tags[p->n_want++] = tag;
    if (tag == RC_TAG_AUTH) p->has_secret = true;
out:
    if (tag == RC_TAG_AUTH) memset(cmd, 0, (size_t)(len > 0 ? len : 0));
    free(cmd);
    return e;
}

void rc_pipe_reset(rc_pipe *p)
{
    for (size_t i = 0; i < p->n_got; i++)
        if (p->got[i]) freeReplyObject(p->got[i]);
    if (p->has_secret && p->out) memset(p->out, 0, p->out_len);
    p->n_got = p->n_want = 0;
    p->out_len = p->out_off = 0;
    p->has_secret = false;
    p->active = false;
    p->err = SCDB_OK;
    p->why[0] = '\0';
}

void rc_pipe_free(rc_pipe *p)
{
    rc_pipe_reset(p);
    free(p->out);
    free(p->tags);
    free(p->got);
    memset(p, 0, sizeof *p);
}

scdb_err rc_pipe_begin(scdb_rc *rc, rc_pipe *p, int node)
{
    rc_node *n = &rc->nodes[node];
    rc_pipe_reset(p);
    p->node = node;
    p->active = true;
    p->connect_failed = false;
    p->reused = n->fd >= 0;
    if (n->fd < 0) {
        scdb_err e = node_connect(rc, n, p->why, sizeof p->why);
        if (e == SCDB_ENOMEM) return e;
        if (e) {
            p->err = e;
            p->active = false;
            p->connect_failed = true;
            return SCDB_OK;
        }
    }
    if (rc->password && !n->authed) {
        const char *argv[3] = {"AUTH", rc->user, rc->password};
        size_t lens[3] = {4, rc->user ? strlen(rc->user) : 0, strlen(rc->password)};
        if (rc->user) return rc_pipe_add(p, RC_TAG_AUTH, 3, argv, lens);
        argv[1] = rc->password;
        lens[1] = lens[2];
        return rc_pipe_add(p, RC_TAG_AUTH, 2, argv, lens);
    }
    return SCDB_OK;
}

void rc_pipe_abandon(scdb_rc *rc, rc_pipe *p)
{
    if (!p->active) return;
    rc_node *n = &rc->nodes[p->node];
    if (n->connecting || p->out_off < p->out_len)
        rc_node_close(n); /* a half-sent command: the stream is lost */
    else
        n->discard += (unsigned)(p->n_want - p->n_got);
    p->active = false;
    p->err = SCDB_ECLOSED;
    rc_why(p->why, sizeof p->why, "abandoned");
}

/* ---------------------------------------------------------------- rounds */

/* The socket is writable (or failed): finish a connect, send what we can. */
static void on_writable(scdb_rc *rc, rc_pipe *p)
{
    rc_node *n = &rc->nodes[p->node];
    if (n->connecting) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) soerr = errno;
        if (soerr) {
            rc->st.connect_failures++;
            p->connect_failed = true;
            pipe_fail(rc, p, SCDB_EIO, "%s:%d: connect: %s", n->host, n->port, strerror(soerr));
            return;
        }
        n->connecting = false;
        rc->st.connects++;
        if (n->ever_connected) rc->st.reconnects++;
        n->ever_connected = true;
    }
    while (p->out_off < p->out_len) {
        ssize_t s = send(n->fd, p->out + p->out_off, p->out_len - p->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (s < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            pipe_fail(rc, p, SCDB_EIO, "%s:%d: send: %s", n->host, n->port, strerror(errno));
            return;
        }
        p->out_off += (size_t)s;
    }
}

/* Parse what the reader holds into the pipe (after owed replies). */
static void take_replies(scdb_rc *rc, rc_pipe *p)
{
    rc_node *n = &rc->nodes[p->node];
    while (p->n_got < p->n_want) {
        void *r = NULL;
        if (redisReaderGetReply(n->reader, &r) != REDIS_OK) {
            rc->st.protocol_errors++;
            pipe_fail(rc, p, SCDB_EPROTO, "%s:%d: garbage reply: %.100s", n->host, n->port,
                      n->reader->errstr);
            return;
        }
        if (!r) return;
        if (n->discard) {
            n->discard--;
            freeReplyObject(r);
            continue;
        }
        p->got[p->n_got++] = r;
    }
    p->active = false;
    if (n->reader->pos < n->reader->len) {
        /* bytes nobody asked for: the stream cannot be trusted any more */
        rc->st.protocol_errors++;
        scdb_warn("redis node %s:%d sent unsolicited data; reconnecting", n->host, n->port);
        rc_node_close(n);
    }
}

static void on_readable(scdb_rc *rc, rc_pipe *p)
{
    rc_node *n = &rc->nodes[p->node];
    for (;;) {
        ssize_t r = recv(n->fd, rc->rbuf, sizeof rc->rbuf, MSG_DONTWAIT);
        if (r > 0) {
            if (redisReaderFeed(n->reader, rc->rbuf, (size_t)r) != REDIS_OK) {
                pipe_fail(rc, p, SCDB_ENOMEM, "%s:%d: out of memory", n->host, n->port);
                return;
            }
            take_replies(rc, p);
            if (!p->active) return;
            continue;
        }
        if (r == 0) {
            pipe_fail(rc, p, SCDB_EIO, "%s:%d: connection closed by the node", n->host, n->port);
            return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        pipe_fail(rc, p, SCDB_EIO, "%s:%d: recv: %s", n->host, n->port, strerror(errno));
        return;
    }
}

void rc_io_round(scdb_rc *rc, rc_pipe *pipes, size_t n, uint64_t deadline_ns, bool stop_at_first)
{
    struct pollfd pfd[SCDB_RC_MAX_NODES];
    size_t idx[SCDB_RC_MAX_NODES];

    for (size_t i = 0; i < n; i++)
        if (pipes[i].active && pipes[i].n_want == 0) pipes[i].active = false;

    for (;;) {
        size_t k = 0;
        for (size_t i = 0; i < n && k < SCDB_RC_MAX_NODES; i++) {
            rc_pipe *p = &pipes[i];
            if (!p->active) continue;
            rc_node *nd = &rc->nodes[p->node];
            if (nd->fd < 0) { /* closed under us: never poll a -1 until the deadline */
                pipe_fail(rc, p, SCDB_EIO, "%s:%d: not connected", nd->host, nd->port);
                continue;
            }
            pfd[k].fd = nd->fd;
            pfd[k].events = POLLIN;
            if (nd->connecting || p->out_off < p->out_len) pfd[k].events |= POLLOUT;
            pfd[k].revents = 0;
            idx[k++] = i;
        }
        if (k == 0) return;
        uint64_t now = scdb_now_ns();
        if (now >= deadline_ns) {
            for (size_t j = 0; j < k; j++) {
                rc_pipe *p = &pipes[idx[j]];
                rc_node *nd = &rc->nodes[p->node];
                pipe_fail(rc, p, SCDB_ETIMEDOUT, "%s:%d: no reply within %d ms%s", nd->host,
                          nd->port, rc->timeout_ms, nd->connecting ? " (connecting)" : "");
            }
            return;
        }
        uint64_t left = (deadline_ns - now + 999999) / 1000000;
        int ms = left > INT_MAX ? INT_MAX : (int)left;
        int r = poll(pfd, (nfds_t)k, ms);
        if (r < 0) {
            if (errno == EINTR) continue;
            for (size_t j = 0; j < k; j++)
                pipe_fail(rc, &pipes[idx[j]], SCDB_EIO, "poll: %s", strerror(errno));
            return;
        }
        bool finished = false;
        for (size_t j = 0; j < k; j++) {
            if (!pfd[j].revents) continue;
            rc_pipe *p = &pipes[idx[j]];
            if (pfd[j].revents & (POLLOUT | POLLERR | POLLHUP)) {
                if (rc->nodes[p->node].connecting || p->out_off < p->out_len) on_writable(rc, p);
            }
            if (p->active && (pfd[j].revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL)))
                on_readable(rc, p);
            if (!p->active) finished = true;
        }
        if (finished && stop_at_first) return;
    }
}
