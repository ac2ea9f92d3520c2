/* fdpass.c — the broker's fd socket (schema/fd_pass.h): a table of
 * tickets -> file descriptors (arenas until their owner confirms them, the
 * lookup index while it is current) and one thread that serves every
 * connection at once: it polls the listening socket and up to
 * FD_CONNS_MAX open connections, each non-blocking with its own deadline
 * (FD_CONN_DEADLINE_MS from its accept), reads a connection's ticket as its
 * bytes arrive and answers with the fd as soon as all 16 are in.  A client
 * that connects and says nothing is answered "malformed" at its deadline
 * and delays no one: the others are served in between.  The socket sits
 * beside the ipc:// one with the same mode and group: whoever may be a
 * client may connect, and only a ticket's holder gets its object.  The
 * thread never blocks the event loop; the table's mutex is held for a
 * lookup and a dup only. */
/* accept4 */
#define _GNU_SOURCE
#include "broker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct bk_fdent {
    uint8_t t[SCDB_FD_TICKET_BYTES];
    int fd;
} bk_fdent;

scdb_err bk_socket_perms(const scdb_broker_config *c, const char *path, char *errbuf,
                         size_t errlen)
{
    if (c->socket_group[0]) {
        struct group *g = getgrnam(c->socket_group);
        char *end;
        long gid = strtol(c->socket_group, &end, 10);
        if (g) gid = (long)g->gr_gid;
        else if (*end || gid < 0) {
            snprintf(errbuf, errlen, "socket_group '%s': no such group", c->socket_group);
            return SCDB_EINVAL;
        }
        if (chown(path, (uid_t)-1, (gid_t)gid)) {
            snprintf(errbuf, errlen, "chown %s to group %s: %s", path, c->socket_group,
                     strerror(errno));
            return SCDB_ESYS;
        }
    }
    if (chmod(path, c->socket_mode)) {
        snprintf(errbuf, errlen, "chmod %s: %s", path, strerror(errno));
        return SCDB_ESYS;
    }
    return SCDB_OK;
}

static int find(const scdb_broker *b, const uint8_t t[SCDB_FD_TICKET_BYTES])
{
    for (int i = 0; i < b->n_fds; i++)
        if (!memcmp(b->fds[i].t, t, SCDB_FD_TICKET_BYTES)) return i;
    return -1;
}

scdb_err bk_fd_add_as(scdb_broker *b, int fd, const uint8_t t[SCDB_FD_TICKET_BYTES])
{
    scdb_err e = SCDB_OK;

    pthread_mutex_lock(&b->fd_mu);
    if (b->n_fds == b->cap_fds) {
        int cap = b->cap_fds ? 2 * b->cap_fds : 64;
        bk_fdent *g = realloc(b->fds, (size_t)cap * sizeof *g);
        if (!g) e = SCDB_ENOMEM;
        else {
            b->fds = g;
            b->cap_fds = cap;
        }
    }
    if (!e) {
        memcpy(b->fds[b->n_fds].t, t, SCDB_FD_TICKET_BYTES);
        b->fds[b->n_fds++].fd = fd;
    }
    pthread_mutex_unlock(&b->fd_mu);
    return e;
}

scdb_err bk_fd_add(scdb_broker *b, int fd, uint8_t t[SCDB_FD_TICKET_BYTES])
{
    if (getrandom(t, SCDB_FD_TICKET_BYTES, 0) != SCDB_FD_TICKET_BYTES) return SCDB_ESYS;
    return bk_fd_add_as(b, fd, t);
}

void bk_fd_remove(scdb_broker *b, const uint8_t t[SCDB_FD_TICKET_BYTES])
{
    int i, fd = -1;

    if (!b->fd_mu_init) return;
    pthread_mutex_lock(&b->fd_mu);
    if ((i = find(b, t)) >= 0) {
        fd = b->fds[i].fd;
        b->fds[i] = b->fds[--b->n_fds];
    }
    pthread_mutex_unlock(&b->fd_mu);
    if (fd >= 0) close(fd);
}

/* Connections the thread serves at once; more wait in the listen backlog
 * (128) until one finishes.  Each gets FD_CONN_DEADLINE_MS from its accept
 * to send its ticket. */
#define FD_CONNS_MAX 256
#define FD_CONN_DEADLINE_MS 1000

typedef struct fd_conn {
    int fd;
    size_t got;                          /* ticket bytes read so far */
    uint8_t t[SCDB_FD_TICKET_BYTES];
    double deadline;                     /* scdb_now() seconds */
} fd_conn;

/* A whole ticket in: answer with its fd, or "unknown". */
static void answer(scdb_broker *b, int conn, const uint8_t t[SCDB_FD_TICKET_BYTES])
{
    int fd = -1, i;

    pthread_mutex_lock(&b->fd_mu);
    if ((i = find(b, t)) >= 0) fd = fcntl(b->fds[i].fd, F_DUPFD_CLOEXEC, 0);
    pthread_mutex_unlock(&b->fd_mu);
    if (fd < 0) {
        scdb_fd_reply(conn, SCDB_FD_UNKNOWN, -1);
        return;
    }
    if (scdb_fd_reply(conn, SCDB_FD_OK, fd))
        scdb_debug("fd socket: the client left before its fd was sent: %s", strerror(errno));
    close(fd);
}

/* Read what connection c has sent.  1: it is finished (answered, or gone)
 * and closed; 0: its ticket is still incomplete. */
static int conn_read(scdb_broker *b, fd_conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->t + c->got, sizeof c->t - c->got, 0);
        if (n > 0) {
            c->got += (size_t)n;
            if (c->got < sizeof c->t) continue;
            answer(b, c->fd, c->t);      /* anything after the ticket is ignored */
            break;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n == 0) scdb_fd_reply(c->fd, SCDB_FD_MALFORMED, -1);   /* closed before 16 bytes */
        break;                                                      /* or an error: gone */
    }
    close(c->fd);
    return 1;
}

static void *fd_main(void *arg)
{
    scdb_broker *b = arg;
    fd_conn conns[FD_CONNS_MAX];
    struct pollfd p[FD_CONNS_MAX + 2];
    int n = 0;

    for (;;) {
        double now = scdb_now(), first = 0;
        int timeout = -1, rc;

        p[0] = (struct pollfd){.fd = b->fd_wake[0], .events = POLLIN};
        p[1] = (struct pollfd){.fd = n < FD_CONNS_MAX ? b->fd_listen : -1, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            p[2 + i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
            if (i == 0 || conns[i].deadline < first) first = conns[i].deadline;
        }
        if (n) timeout = first <= now ? 0 : (int)((first - now) * 1000) + 1;
        rc = poll(p, (nfds_t)(2 + n), timeout);
        if (rc < 0) {
            if (errno == EINTR) continue;
            scdb_error("fd socket: poll: %s", strerror(errno));
            break;
        }
        if (p[0].revents) break;
        /* the connections polled (accepts below append after them) */
        now = scdb_now();
        for (int i = 0, polled = n; i < polled; i++) {
            int done;
            if (p[2 + i].revents) done = conn_read(b, &conns[i]);
            else if (conns[i].deadline <= now) {           /* silent past its deadline */
                scdb_fd_reply(conns[i].fd, SCDB_FD_MALFORMED, -1);
                close(conns[i].fd);
                done = 1;
            } else
                done = 0;
            if (done) conns[i].fd = -1;
        }
        {   /* compact, keeping the order (deadlines stay ascending) */
            int k = 0;
            for (int i = 0; i < n; i++)
                if (conns[i].fd >= 0) conns[k++] = conns[i];
            n = k;
        }
        if (p[1].fd >= 0 && (p[1].revents & POLLIN)) {
            while (n < FD_CONNS_MAX) {
                int conn = accept4(b->fd_listen, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (conn < 0) {
                    /* EAGAIN: no more waiting; out of descriptors (EMFILE,
                     * ENFILE, ENOMEM): a pause, not a spin on a listening
                     * socket that stays readable */
                    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                        errno != ECONNABORTED)
                        poll(NULL, 0, 10);
                    break;
                }
                conns[n] = (fd_conn){.fd = conn, .got = 0,
                                     .deadline = now + FD_CONN_DEADLINE_MS / 1000.0};
                if (!conn_read(b, &conns[n])) n++;  /* the ticket may be there already */
            }
        }
    }
    for (int i = 0; i < n; i++) close(conns[i].fd);
    return NULL;
}

void bk_fd_init(scdb_broker *b)
{
    b->fd_listen = -1;
    b->fd_wake[0] = b->fd_wake[1] = -1;
    pthread_mutex_init(&b->fd_mu, NULL);
    b->fd_mu_init = 1;
}

scdb_err bk_fd_start(scdb_broker *b, char *errbuf, size_t errlen)
{
    struct sockaddr_un sa;
    sigset_t all, old;
    scdb_err e;
    mode_t um;
    int rc;

    scdb_fd_socket_path(b->ipc_path, b->fd_path, sizeof b->fd_path);
    if (strlen(b->fd_path) >= sizeof sa.sun_path) {
        snprintf(errbuf, errlen, "fd socket path %s is too long", b->fd_path);
        return SCDB_EINVAL;
    }
    /* the ipc endpoint is ours (bound, no other broker answers): a file
     * here is a dead broker's */
    unlink(b->fd_path);
    b->fd_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (b->fd_listen < 0) goto sys;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, b->fd_path, strlen(b->fd_path));
    um = umask(0177);                 /* born 0600, then exactly socket_mode */
    rc = bind(b->fd_listen, (struct sockaddr *)&sa, sizeof sa);
    umask(um);
    if (rc || listen(b->fd_listen, 128)) goto sys;
    if ((e = bk_socket_perms(&b->cfg, b->fd_path, errbuf, errlen))) return e;
    if (pipe(b->fd_wake)) goto sys;
    fcntl(b->fd_wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(b->fd_wake[1], F_SETFD, FD_CLOEXEC);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);       /* signals stay with the main thread */
    rc = pthread_create(&b->fd_thread, NULL, fd_main, b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        snprintf(errbuf, errlen, "cannot start the fd socket's thread");
        return SCDB_ESYS;
    }
    b->fd_started = 1;
    return SCDB_OK;
sys:
    snprintf(errbuf, errlen, "fd socket %s: %s", b->fd_path, strerror(errno));
    return SCDB_ESYS;
}

void bk_fd_stop(scdb_broker *b)
{
    if (b->fd_started) {
        (void)!write(b->fd_wake[1], "x", 1);
        pthread_join(b->fd_thread, NULL);
        b->fd_started = 0;
    }
    if (b->fd_wake[0] >= 0) close(b->fd_wake[0]);
    if (b->fd_wake[1] >= 0) close(b->fd_wake[1]);
    b->fd_wake[0] = b->fd_wake[1] = -1;
    if (b->fd_listen >= 0) {
        close(b->fd_listen);
        b->fd_listen = -1;
        unlink(b->fd_path);
    }
    if (b->fd_mu_init) {
        for (int i = 0; i < b->n_fds; i++) close(b->fds[i].fd);
        free(b->fds);
        b->fds = NULL;
        b->n_fds = b->cap_fds = 0;
        pthread_mutex_destroy(&b->fd_mu);
        b->fd_mu_init = 0;
    }
}
