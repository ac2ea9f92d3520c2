/* lookup_publish.c — the broker's side of the shared-memory lookup index
 * (lookup_index.h): create and fill the index at start, hand it to clients
 * by ticket over the fd socket (fdpass.c), mirror the store's visibility
 * changes (on_visible, called under the store's lock from whichever thread
 * changed the store), grow it, refresh its liveness word and hold its
 * liveness lock (the event loop's thread: lookup_index.h, LIVENESS), retire
 * it at shutdown.  A killed broker leaves nothing to clean: its index is
 * an anonymous memfd, and the kernel marks its liveness lock's owner dead,
 * so clients stop trusting it at once (a hung one: its stale liveness
 * word).
 *
 * The loop's thread alone holds, releases and unmaps a held index: one
 * retired elsewhere (a grow on the writer) waits in lix_prev, marked
 * retired, until the loop's next tick; at most one index is held, so one
 * slot is enough. */
#include "broker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Hand ix out by its ticket (a dup of its fd goes into the fd table). */
static scdb_err publish(scdb_broker *b, const scdb_lix *ix)
{
    uint8_t t[SCDB_FD_TICKET_BYTES];
    int fd;
    scdb_err e;

    if (scdb_fd_ticket_parse(scdb_lix_name(ix), t)) return SCDB_EINVAL;
    if ((fd = fcntl(scdb_lix_fd(ix), F_DUPFD_CLOEXEC, 0)) < 0) return SCDB_ESYS;
    if ((e = bk_fd_add_as(b, fd, t))) close(fd);
    return e;
}

static void unpublish(scdb_broker *b, const scdb_lix *ix)
{
    uint8_t t[SCDB_FD_TICKET_BYTES];
    if (ix && !scdb_fd_ticket_parse(scdb_lix_name(ix), t)) bk_fd_remove(b, t);
}

/* Retire *ix (mu held, any thread): at once, unless the loop's thread
 * holds its liveness lock; then marked retired and left in lix_prev for
 * that thread's next tick. */
static void retire(scdb_broker *b, scdb_lix **ix, const char *next)
{
    if (scdb_lix_retire(ix, next) == SCDB_EBUSY) {
        if (b->lix_prev) {          /* never: only one index is ever held */
            scdb_error("lookup index: two held indexes to retire; one stays mapped");
            return;
        }
        b->lix_prev = *ix;
        *ix = NULL;
    }
}

/* Stop publishing (mu held): clients fall back to the request path. */
static void disable(scdb_broker *b, const char *why)
{
    scdb_warn("lookup index disabled (%s): clients look up through the broker", why);
    unpublish(b, b->lix);
    retire(b, &b->lix, NULL);
}

static void fill_one(void *ctx, const scdb_key *k)
{
    scdb_broker *b = ctx;
    if (b->lix) bk_lix_on_visible(ctx, k, 1);
}

scdb_err bk_lix_start(scdb_broker *b, char *errbuf, size_t errlen)
{
    scdb_store_stat st;
    uint64_t want;
    scdb_err e;

    pthread_mutex_init(&b->lix_mu, NULL);
    b->lix_mu_init = 1;
    if (!b->cfg.lookup_index) return SCDB_OK;
    scdb_store_stats(b->store, &st);
    want = b->cfg.lookup_index_entries ? b->cfg.lookup_index_entries : 16384;
    if (2 * st.blocks > want) want = 2 * st.blocks;
    e = scdb_lix_create(b->instance, b->block_tokens, want, &b->lix);
    if (e) {
        scdb_warn("cannot create the lookup index: %s; clients look up through the broker",
                  scdb_strerror(e));
        return SCDB_OK;
    }
    if ((e = publish(b, b->lix))) {
        scdb_warn("cannot hand out the lookup index: %s; clients look up through the broker",
                  scdb_strerror(e));
        scdb_lix_retire(&b->lix, NULL);
        return SCDB_OK;
    }
    /* under the store's lock: no change slips between the walk and the
     * callbacks that follow it */
    scdb_store_foreach_key(b->store, fill_one, b);
    pthread_mutex_lock(&b->lix_mu);
    if (b->lix)
        scdb_info("lookup index: %llu keys, %llu slots",
                  (unsigned long long)scdb_lix_count(b->lix),
                  (unsigned long long)scdb_lix_capacity(b->lix));
    pthread_mutex_unlock(&b->lix_mu);
    return SCDB_OK;
}

/* Replace the index by one twice its size (mu held).  The new one is
 * handed out before the old one names it as its successor. */
static scdb_err grow(scdb_broker *b)
{
    scdb_lix *nx = NULL;
    scdb_err e = scdb_lix_grow(b->lix, &nx);

    if (e) return e;
    if ((e = publish(b, nx))) {
        scdb_lix_retire(&nx, NULL);
        return e;
    }
    scdb_info("lookup index grows to %llu slots", (unsigned long long)scdb_lix_capacity(nx));
    unpublish(b, b->lix);
    retire(b, &b->lix, scdb_lix_name(nx));
    b->lix = nx;                /* held from the loop's next tick */
    return SCDB_OK;
}

void bk_lix_on_visible(void *ctx, const scdb_key *k, int visible)
{
    scdb_broker *b = ctx;
    scdb_err e;

    if (!b->lix_mu_init) return;          /* store open: the index comes later */
    pthread_mutex_lock(&b->lix_mu);
    if (!b->lix) goto out;
    if (!visible) {
        scdb_lix_remove(b->lix, k);
        goto out;
    }
    e = scdb_lix_insert(b->lix, k);
    if (e == SCDB_EFULL && !(e = grow(b))) e = scdb_lix_insert(b->lix, k);
    if (e) {
        char why[96];
        snprintf(why, sizeof why, "cannot add a key: %s", scdb_strerror(e));
        disable(b, why);
    }
out:
    pthread_mutex_unlock(&b->lix_mu);
}

void bk_lix_tick(scdb_broker *b, uint64_t now_ns)
{
    if (!b->lix_mu_init || now_ns - b->lix_tick_ns < SCDB_LIX_TICK_NS / 2) return;
    b->lix_tick_ns = now_ns;
    pthread_mutex_lock(&b->lix_mu);
    scdb_lix_retire(&b->lix_prev, NULL);    /* retired elsewhere, held here */
    if (b->lix && !scdb_lix_held(b->lix) && !b->lix_no_hold) {
        scdb_err e = scdb_lix_hold(b->lix);
        if (e) {
            b->lix_no_hold = 1;
            scdb_warn("lookup index: no liveness lock (%s): clients tell a dead broker by its "
                      "liveness word, within %.1f s", scdb_strerror(e), SCDB_LIX_STALE_NS / 1e9);
        }
    }
    scdb_lix_tick(b->lix);
    pthread_mutex_unlock(&b->lix_mu);
}

void bk_lix_name(scdb_broker *b, char *buf, size_t len)
{
    buf[0] = 0;
    if (!b->lix_mu_init) return;
    pthread_mutex_lock(&b->lix_mu);
    if (b->lix) snprintf(buf, len, "%s", scdb_lix_name(b->lix));
    pthread_mutex_unlock(&b->lix_mu);
}

void bk_lix_stop(scdb_broker *b)
{
    if (!b->lix_mu_init) return;
    pthread_mutex_lock(&b->lix_mu);
    if (b->lix) {
        unpublish(b, b->lix);
        retire(b, &b->lix, NULL);
    }
    /* the loop's thread ends the broker (serve.c): what it holds goes now;
     * an index held by a thread that is gone stays mapped (its memory) */
    if (b->lix_prev && scdb_lix_retire(&b->lix_prev, NULL) == SCDB_EBUSY)
        scdb_warn("lookup index: held by another thread at stop; left mapped");
    pthread_mutex_unlock(&b->lix_mu);
    pthread_mutex_destroy(&b->lix_mu);
    b->lix_mu_init = 0;
}
