/* util.c — the bottom of libscdb: the handle's error message, the
 * application's interrupt check, fetching a shared object the broker
 * named, and argument checks every call shares. */
#include "libscdb_int.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

scdb_err cl_fail(scdb *h, scdb_err e, const char *fmt, ...)
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

/* ------------------------------------------------------------ interrupts */

static scdb_interrupt_fn intr_fn;
static void *intr_arg;

void scdb_set_interrupt(scdb_interrupt_fn fn, void *arg)
{
    __atomic_store_n(&intr_arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&intr_fn, fn, __ATOMIC_RELEASE);
}

int cl_interrupt_set(void) { return __atomic_load_n(&intr_fn, __ATOMIC_RELAXED) != NULL; }

int cl_interrupt_asked(void)
{
    scdb_interrupt_fn fn = __atomic_load_n(&intr_fn, __ATOMIC_ACQUIRE);
    return fn && fn(__atomic_load_n(&intr_arg, __ATOMIC_RELAXED));
}

static int fd_stop(void *arg)
{
    (void)arg;
    return cl_interrupt_asked();
}

void cl_fd_wait(const scdb *h, scdb_fd_wait *w)
{
    w->timeout_ms = h->timeout_ms;
    w->stop = cl_interrupt_set() ? fd_stop : NULL;   /* none: one piece */
    w->arg = NULL;
}

/* ----------------------------------------------------------- shared memory */

scdb_err cl_fetch_fd(scdb *h, const ProtobufCBinaryData *ticket, const char *what,
                          int *fd)
{
    char why[400] = "";
    scdb_fd_wait w;
    scdb_err e;

    *fd = -1;
    if (!h->fd_path[0])
        return cl_fail(h, SCDB_EUNSUPPORTED, "%s: shared memory needs an ipc:// endpoint "
                            "on the broker's host (this handle uses %s)", what, h->endpoint);
    if (!ticket || ticket->len != SCDB_FD_TICKET_BYTES)
        return cl_fail(h, SCDB_EPROTO, "%s: the broker's reply has no fd ticket", what);
    cl_fd_wait(h, &w);
    e = scdb_fd_fetch(h->fd_path, ticket->data, &w, fd, why, sizeof why);
    if (e) return cl_fail(h, e, "%s: %s", what, why);
    return SCDB_OK;
}

scdb_err cl_need_registered(scdb *h)
{
    if (!h) return SCDB_EINVAL;
    if (!h->registered) return cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    return SCDB_OK;
}

scdb_err cl_check_tokens(scdb *h, const int32_t *t, size_t n)
{
    uint32_t top = 0, vocab = h->info.vocab_size > 0 ? (uint32_t)h->info.vocab_size : 0x80000000u;
    if (n > h->info.max_tokens)
        return cl_fail(h, SCDB_ETOOBIG, "%zu tokens exceed max_tokens %u", n,
                            h->info.max_tokens);
    for (size_t i = 0; i < n; i++) top |= (uint32_t)t[i];
    if (top < vocab) return SCDB_OK;              /* every token <= their OR */
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0)
            return cl_fail(h, SCDB_EINVAL, "token %zu is negative (%d)", i, (int)t[i]);
        else if ((uint32_t)t[i] >= vocab)
            return cl_fail(h, SCDB_ERANGE, "token %zu is %d: model %s has a %u-token "
                                "vocabulary", i, (int)t[i], h->model, vocab);
    return SCDB_OK;
}

int cl_same_geometry(const scdb *h, const scdb_kv_cache *c)
{
    return c->n_layers == h->info.n_layers && c->n_kv_heads == h->info.n_kv_heads &&
           c->head_dim == h->info.head_dim;
}
