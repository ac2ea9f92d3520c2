/* lookup_publish.c — the broker's side of the shared-memory lookup index
 * (lookup_index.h): retire what a killed predecessor left, create and fill
 * the index at start, mirror the store's visibility changes (on_visible,
 * called under the store's lock from whichever thread changed the store),
 * grow it, retire it at shutdown.
 *
 * data_dir/lookup-index.names lists every index object this data dir's
 * broker may have left linked (one name per line; written with rename, so
 * always whole).  A grow lists both names before it retires the old one. */
#include "broker_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAMES_FILE "lookup-index.names"

static void names_path(const scdb_broker *b, char *buf, size_t len)
{
    snprintf(buf, len, "%s/" NAMES_FILE, b->cfg.data_dir);
}

/* Replace the names file with names[0..n) (n 0: remove it). */
static int names_write(const scdb_broker *b, const char *const *names, int n)
{
    char path[600], tmp[620];
    FILE *f;
    int bad;

    names_path(b, path, sizeof path);
    if (n == 0) return unlink(path) && errno != ENOENT ? -1 : 0;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w"))) return -1;
    for (int i = 0; i < n; i++) fprintf(f, "%s\n", names[i]);
    bad = fflush(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Stop publishing (mu held): clients fall back to the request path. */
static void disable(scdb_broker *b, const char *why)
{
    scdb_warn("lookup index disabled (%s): clients look up through the broker", why);
    scdb_lix_retire(&b->lix, NULL);
    names_write(b, NULL, 0);
}

scdb_err bk_lix_cleanup_stale(scdb_broker *b)
{
    char path[600], line[256];
    FILE *f;

    names_path(b, path, sizeof path);
    if (!(f = fopen(path, "r"))) return SCDB_OK;
    while (fgets(line, sizeof line, f)) {
        scdb_err e;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        e = scdb_lix_retire_name(line);
        if (e)
            scdb_warn("lookup index %s left by the previous broker: %s (left alone)", line,
                      scdb_strerror(e));
        else
            scdb_info("retired lookup index %s left by the previous broker", line);
    }
    fclose(f);
    names_write(b, NULL, 0);
    return SCDB_OK;
}

static void fill_one(void *ctx, const scdb_key *k)
{
    scdb_broker *b = ctx;
    if (b->lix) bk_lix_on_visible(ctx, k, 1);
}

scdb_err bk_lix_start(scdb_broker *b, char *errbuf, size_t errlen)
{
    scdb_store_stat st;
    const char *name;
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
    name = scdb_lix_name(b->lix);
    if (names_write(b, &name, 1)) {
        snprintf(errbuf, errlen, "cannot write %s/" NAMES_FILE ": %s", b->cfg.data_dir,
                 strerror(errno));
        scdb_lix_retire(&b->lix, NULL);
        return SCDB_ESYS;
    }
    /* under the store's lock: no change slips between the walk and the
     * callbacks that follow it */
    scdb_store_foreach_key(b->store, fill_one, b);
    pthread_mutex_lock(&b->lix_mu);
    if (b->lix)
        scdb_info("lookup index %s: %llu keys, %llu slots", scdb_lix_name(b->lix),
                  (unsigned long long)scdb_lix_count(b->lix),
                  (unsigned long long)scdb_lix_capacity(b->lix));
    pthread_mutex_unlock(&b->lix_mu);
    return SCDB_OK;
}

/* Replace the index by one twice its size (mu held). */
static scdb_err grow(scdb_broker *b)
{
    scdb_lix *nx = NULL;
    const char *names[2];
    scdb_err e = scdb_lix_grow(b->lix, &nx);

    if (e) return e;
    names[0] = scdb_lix_name(b->lix);
    names[1] = scdb_lix_name(nx);
    if (names_write(b, names, 2)) {
        scdb_lix_retire(&nx, NULL);
        return SCDB_ESYS;
    }
    scdb_info("lookup index grows to %llu slots: %s", (unsigned long long)scdb_lix_capacity(nx),
              names[1]);
    scdb_lix_retire(&b->lix, names[1]);
    b->lix = nx;
    names[0] = scdb_lix_name(nx);
    names_write(b, names, 1);
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
    if (!b->lix || now_ns - b->lix_tick_ns < SCDB_LIX_TICK_NS / 2) return;
    b->lix_tick_ns = now_ns;
    pthread_mutex_lock(&b->lix_mu);
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
        scdb_lix_retire(&b->lix, NULL);
        names_write(b, NULL, 0);
    }
    pthread_mutex_unlock(&b->lix_mu);
    pthread_mutex_destroy(&b->lix_mu);
    b->lix_mu_init = 0;
}
