/* fd_pass.c — file descriptors over the broker's fd socket (fd_pass.h). */
#include "fd_pass.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "scdb_common.h"

void scdb_fd_socket_path(const char *ipc_path, char *buf, size_t len)
{
    snprintf(buf, len, "%s" SCDB_FD_SUFFIX, ipc_path);
}

void scdb_fd_ticket_hex(const uint8_t t[SCDB_FD_TICKET_BYTES], char *buf)
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < SCDB_FD_TICKET_BYTES; i++) {
        buf[2 * i] = hx[t[i] >> 4];
        buf[2 * i + 1] = hx[t[i] & 15];
    }
    buf[2 * SCDB_FD_TICKET_BYTES] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int scdb_fd_ticket_parse(const char *s, uint8_t t[SCDB_FD_TICKET_BYTES])
{
    if (!s || strlen(s) != 2 * SCDB_FD_TICKET_BYTES) return -1;
    for (int i = 0; i < SCDB_FD_TICKET_BYTES; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0) return -1;
        t[i] = (uint8_t)(a << 4 | b);
    }
    return 0;
}

int scdb_fd_reply(int conn, int status, int fd)
{
    unsigned char st = (unsigned char)status;
    struct iovec iov = {.iov_base = &st, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

    if (status == SCDB_FD_OK) {
        struct cmsghdr *c;
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof u.buf;
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    for (;;) {
        ssize_t n = sendmsg(conn, &mh, MSG_NOSIGNAL);
        if (n == 1) return 0;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}

enum { WAIT_ERROR = -1, WAIT_TIMEOUT = 0, WAIT_READY = 1, WAIT_STOPPED = 2 };

/* Wait until fd is ready for `events` or the deadline (seconds of
 * monotonic time) passes; with a stop check, in slices of
 * SCDB_FD_CHECK_MS, asking it after each slice and each signal. */
static int wait_fd(int fd, short events, double deadline, const scdb_fd_wait *w)
{
    for (;;) {
        int left = (int)((deadline - scdb_now()) * 1000) + 1, rc;
        struct pollfd p = {.fd = fd, .events = events};
        if (left <= 0) return WAIT_TIMEOUT;
        rc = poll(&p, 1, w->stop && left > SCDB_FD_CHECK_MS ? SCDB_FD_CHECK_MS : left);
        if (rc > 0) return WAIT_READY;
        if (rc < 0 && errno != EINTR) return WAIT_ERROR;
        if (w->stop && w->stop(w->arg)) return WAIT_STOPPED;
    }
}

scdb_err scdb_fd_fetch(const char *sock_path, const uint8_t ticket[SCDB_FD_TICKET_BYTES],
                       const scdb_fd_wait *w, int *fd_out, char *errbuf, size_t errlen)
{
    static const scdb_fd_wait plain = {5000, NULL, NULL};
    struct sockaddr_un sa;
    int timeout_ms = (w = w ? w : &plain)->timeout_ms > 0 ? w->timeout_ms : 5000;
    double deadline = scdb_now() + timeout_ms / 1000.0;
    unsigned char st = 0xff;
    struct iovec iov = {.iov_base = &st, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    struct cmsghdr *c;
    int s = -1, got = -1, rc;
    ssize_t n;
    scdb_err e;

    *fd_out = -1;
    if (strlen(sock_path) >= sizeof sa.sun_path) {
        scdb_errf(errbuf, errlen, "fd socket path %s is too long", sock_path);
        return SCDB_EINVAL;
    }
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        scdb_errf(errbuf, errlen, "socket: %s", strerror(errno));
        return SCDB_ESYS;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, sock_path, strlen(sock_path));
    rc = connect(s, (struct sockaddr *)&sa, sizeof sa);
    if (rc && errno == EINPROGRESS) {
        int wr = wait_fd(s, POLLOUT, deadline, w);
        if (wr == WAIT_STOPPED) goto stopped;
        rc = wr == WAIT_READY ? 0 : -1;
    }
    if (rc) {
        int err = errno;
        e = err == ENOENT || err == ECONNREFUSED ? SCDB_ENOTFOUND : SCDB_ESYS;
        scdb_errf(errbuf, errlen, "cannot connect to the broker's fd socket %s: %s", sock_path,
                  strerror(err));
        goto out;
    }
    if (send(s, ticket, SCDB_FD_TICKET_BYTES, MSG_NOSIGNAL) != SCDB_FD_TICKET_BYTES) {
        scdb_errf(errbuf, errlen, "fd socket %s: send: %s", sock_path, strerror(errno));
        e = SCDB_ESYS;
        goto out;
    }
    for (;;) {
        if ((rc = wait_fd(s, POLLIN, deadline, w)) == WAIT_STOPPED) goto stopped;
        if (rc != WAIT_READY) {
            scdb_errf(errbuf, errlen, "fd socket %s: no answer within %d ms", sock_path,
                      timeout_ms);
            e = rc == WAIT_TIMEOUT ? SCDB_ETIMEDOUT : SCDB_ESYS;
            goto out;
        }
        n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        break;
    }
    for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {     /* keep one, close any extra */
                int f;
                memcpy(&f, CMSG_DATA(c) + i * sizeof f, sizeof f);
                if (got < 0) got = f;
                else close(f);
            }
        }
    if (n != 1 || (mh.msg_flags & MSG_CTRUNC)) {
        scdb_errf(errbuf, errlen, "fd socket %s: a reply that is not one status byte", sock_path);
        e = SCDB_EPROTO;
    } else if (st == SCDB_FD_UNKNOWN) {
        scdb_errf(errbuf, errlen, "the broker knows no such object (freed, or from before "
                  "a restart)");
        e = SCDB_ENOTFOUND;
    } else if (st != SCDB_FD_OK || got < 0) {
        scdb_errf(errbuf, errlen, "fd socket %s: status %u%s", sock_path, st,
                  got < 0 ? " without a file descriptor" : "");
        e = SCDB_EPROTO;
    } else {
        *fd_out = got;
        got = -1;
        e = SCDB_OK;
    }
    goto out;
stopped:
    /* the caller's interrupt check: as after a timeout, the broker may
     * still answer this connection; nobody reads it */
    scdb_errf(errbuf, errlen, "interrupted while waiting for the broker's fd socket %s",
              sock_path);
    e = SCDB_EINTR;
out:
    if (got >= 0) close(got);
    if (s >= 0) close(s);
    return e;
}
