/* index.c — the broker's shared-memory lookup index on the client side.
 *
 * The broker names its index (schema/lookup_index.h) in every HelloReply;
 * we map it read-only after each hello (so a broker restart, which makes a
 * new one, re-maps it too) and answer scdb_lookup from it: hash the
 * prompt's blocks with our namespace, probe the keys.  Anything unusual --
 * no index, refused at open, retired without a successor, the writer too
 * busy -- sends the lookup down the request path, which gives the same
 * answer. */
#include "libscdb_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LIX_FOLLOW_MAX 4

static void lix_drop(scdb *h, scdb_err why)
{
    scdb_lix_close(&h->lix);
    h->lix_err = why;
}

/* Fetch the index with ticket `hex` from the fd socket and map it
 * read-only. */
static scdb_err open_ticket(scdb *h, const char *hex, scdb_lix **ix)
{
    uint8_t t[SCDB_FD_TICKET_BYTES];
    char why[400] = "";
    scdb_fd_wait w;
    int fd;
    scdb_err e;

    *ix = NULL;
    if (!h->fd_path[0]) return SCDB_EUNSUPPORTED;      /* tcp://: no shared memory */
    if (scdb_fd_ticket_parse(hex, t)) return SCDB_EPROTO;
    cl_fd_wait(h, &w);
    e = scdb_fd_fetch(h->fd_path, t, &w, &fd, why, sizeof why);
    if (e) {
        scdb_debug("libscdb: lookup index: %s", why);
        return e;
    }
    e = scdb_lix_open_fd(fd, h->info.broker_instance, h->info.block_tokens, ix);
    close(fd);
    return e;
}

/* Map the index with ticket `name` (following retired objects to their
 * successors). */
scdb_err cl_lix_map(scdb *h, const char *name)
{
    char cur[SCDB_LIX_NAME_MAX], next[SCDB_LIX_NAME_MAX];
    scdb_err e = SCDB_EUNSUPPORTED;

    scdb_lix_close(&h->lix);
    if (!h->fd_path[0]) {
        /* tcp://: no shared memory, by design, not a refusal: say so once */
        static atomic_flag said = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&said))
            scdb_info("libscdb: %s is not a local broker: no lookup index, every lookup is a "
                      "request", h->endpoint);
        h->lix_err = SCDB_EUNSUPPORTED;
        return SCDB_OK;
    }
    snprintf(cur, sizeof cur, "%s", name);
    for (int hop = 0; cur[0] && hop < LIX_FOLLOW_MAX; hop++) {
        scdb_lix *ix = NULL;
        e = open_ticket(h, cur, &ix);
        if (e == SCDB_OK) {
            h->lix = ix;
            break;
        }
        if (e == SCDB_EINTR) {          /* the application's interrupt check */
            h->lix_err = e;
            return cl_fail(h, e, "interrupted while fetching the broker's lookup index");
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
    return SCDB_OK;
}

/* After a hello: map the index it named, unless turned off. */
scdb_err cl_lix_attach(scdb *h, const Scdb__HelloReply *r)
{
    h->have_ns = r->ns.len == sizeof h->ns.b;
    if (h->have_ns) memcpy(h->ns.b, r->ns.data, sizeof h->ns.b);
    snprintf(h->lix_name, sizeof h->lix_name, "%s",
             r->lookup_index && strlen(r->lookup_index) < sizeof h->lix_name ? r->lookup_index
                                                                            : "");
    if (h->no_index || !h->have_ns || !h->lix_name[0] || !h->info.block_tokens) {
        lix_drop(h, SCDB_EUNSUPPORTED);
        return SCDB_OK;
    }
    return cl_lix_map(h, h->lix_name);
}

/* Answer a lookup from the index.  SCDB_OK with *out filled, an argument
 * error (as the broker would reply), SCDB_EINTR, SCDB_ECLOSED (the broker
 * that published it is gone) or SCDB_EBUSY: use the request path. */
scdb_err cl_lix_lookup(scdb *h, const int32_t *tokens, size_t n_tokens,
                           scdb_lookup_result *out)
{
    enum { CHUNK = 64 };
    scdb_key keys[CHUNK], prev;
    uint32_t bt = h->info.block_tokens;
    size_t full, matched = 0, i = 0;
    int restarts = 0;
    scdb_err e = cl_check_tokens(h, tokens, n_tokens);

    if (e) return e;
    /* the broker's connection dropped (a kill, a crash, a stop): its table
     * may be a dead broker's; the index's own liveness lock and word catch
     * what the socket cannot yet, or cannot at all (no heartbeat thread,
     * a hung broker) */
    if (atomic_load(&h->peer_lost)) return SCDB_ECLOSED;
    full = n_tokens / bt;
    while (i < full) {
        size_t m = full - i < CHUNK ? full - i : CHUNK, k = 0;
        if (scdb_block_key_continue(i ? &prev : NULL, &h->ns, tokens + i * bt, m, bt, keys))
            return SCDB_EBUSY;              /* keys we cannot derive: ask the broker */
        e = scdb_lix_match(h->lix, keys, m, &k);
        if (e == SCDB_ECLOSED) {
            /* its broker died (kept: every lookup sees it, until a hello
             * maps the next broker's); retired: a grown successor (same
             * answers), or a stopped broker */
            char next[SCDB_LIX_NAME_MAX] = "";
            if (!scdb_lix_retired(h->lix, next)) return SCDB_ECLOSED;
            if (!next[0]) {
                lix_drop(h, SCDB_ECLOSED);
                return SCDB_ECLOSED;
            }
            if ((e = cl_lix_map(h, next))) return e;                /* interrupted */
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

