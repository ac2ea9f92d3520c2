/*
 * fd_pass.h — how a client gets the broker's shared-memory objects (arenas,
 * session statistics, the lookup index): file descriptors over a Unix
 * socket beside the broker's ipc:// socket, with SCM_RIGHTS.
 *
 *   broker                                      client
 *   ------                                      ------
 *   ArenaCreateReply { fd_ticket: 16 random B }  ----> (the reply)
 *   fd socket "<ipc path>.fd" (same mode and
 *   group as the ipc socket)        <---- connect, send the 16-byte ticket
 *   1 status byte (+ SCM_RIGHTS fd) ---->       recvmsg: the memfd
 *   close                                       mmap it
 *
 * Status: 0 = the fd follows (exactly one, in the same message);
 * 1 = no such ticket (never issued, or its object is gone);
 * 2 = malformed request.  A ticket is a capability: only the client the
 * broker gave it to knows it (arenas), or every registered client (the
 * lookup index, read-only anyway).  The sockets' owner, group and mode
 * decide who may connect at all; the fd is the broker's object itself, so
 * neither the broker's user nor its PID namespace needs to match the
 * client's (a broker in a sidecar container serves clients that share only
 * the socket directory).  Layout: schema/FORMATS.md, "Handing over shared
 * memory".
 */
#ifndef SCDB_FD_PASS_H
#define SCDB_FD_PASS_H

#include <stddef.h>
#include <stdint.h>

#include "scdb_err.h"

#define SCDB_FD_SUFFIX ".fd"
#define SCDB_FD_TICKET_BYTES 16
enum { SCDB_FD_OK = 0, SCDB_FD_UNKNOWN = 1, SCDB_FD_MALFORMED = 2 };

/* The fd socket's path for an ipc:// socket path (buf >= len + 4). */
void scdb_fd_socket_path(const char *ipc_path, char *buf, size_t len);

/* How long a fetch may wait, and what may end the wait sooner: a client's
 * interrupt check (client/scdb.h, Caveats, "Signals"), asked every
 * SCDB_FD_CHECK_MS and after each signal that interrupts the wait. */
typedef struct scdb_fd_wait {
    int timeout_ms;             /* the whole fetch; <= 0: 5000               */
    int (*stop)(void *arg);     /* nonzero: stop now; NULL: wait in one piece */
    void *arg;
} scdb_fd_wait;
#define SCDB_FD_CHECK_MS 50

/* Client: connect to sock_path, present the ticket, receive the fd (close
 * it when done), all within w->timeout_ms (w NULL: 5000 ms, no check).
 * Errors: SCDB_ENOTFOUND (no fd socket, or the broker knows no such
 * ticket), SCDB_ETIMEDOUT, SCDB_EINTR (w->stop said stop; no fd),
 * SCDB_EPROTO (a reply that is not status + one fd), SCDB_ESYS (connect,
 * permission); errbuf says which. */
scdb_err scdb_fd_fetch(const char *sock_path, const uint8_t ticket[SCDB_FD_TICKET_BYTES],
                       const scdb_fd_wait *w, int *fd_out, char *errbuf, size_t errlen);

/* Broker: answer one connection: status, and fd when status is SCDB_FD_OK.
 * 0 or -1 (errno). */
int scdb_fd_reply(int conn, int status, int fd);

/* 32 lower-case hex digits of a ticket into buf (>= 33 bytes) / back;
 * scdb_fd_ticket_parse returns 0, or -1 when s is not 32 hex digits. */
void scdb_fd_ticket_hex(const uint8_t ticket[SCDB_FD_TICKET_BYTES], char *buf);
int scdb_fd_ticket_parse(const char *s, uint8_t ticket[SCDB_FD_TICKET_BYTES]);

#endif
