/* util.c — the bottom of libscdb: the handle's error message, opening a
 * shared object the broker named, and argument checks every call shares. */
#include "libscdb_int.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

scdb_err scdb_cl_fail(scdb *h, scdb_err e, const char *fmt, ...)
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

int scdb_cl_shm_open(const char *name)
{
    if (!strncmp(name, "/proc/", 6)) return open(name, O_RDWR | O_CLOEXEC);
    return shm_open(name, O_RDWR | O_CLOEXEC, 0);
}

scdb_err scdb_cl_need_registered(scdb *h)
{
    if (!h) return SCDB_EINVAL;
    if (!h->registered) return scdb_cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    return SCDB_OK;
}

scdb_err scdb_cl_check_tokens(scdb *h, const int32_t *t, size_t n)
{
    uint32_t any = 0;
    if (n > h->info.max_tokens)
        return scdb_cl_fail(h, SCDB_ETOOBIG, "%zu tokens exceed max_tokens %u", n, h->info.max_tokens);
    for (size_t i = 0; i < n; i++) any |= (uint32_t)t[i];
    if (!(any & 0x80000000u)) return SCDB_OK;
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0) return scdb_cl_fail(h, SCDB_EINVAL, "token %zu is negative (%d)", i, (int)t[i]);
    return SCDB_OK;
}

int scdb_cl_same_geometry(const scdb *h, const scdb_kv_cache *c)
{
    return c->n_layers == h->info.n_layers && c->n_kv_heads == h->info.n_kv_heads &&
           c->head_dim == h->info.head_dim;
}
