/* clients.c — registered clients: the token table, dropping a client with
 * its sessions and arenas, and the reclaim of clients that stopped sending
 * (main thread only). */
#include "broker_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static size_t bucket(uint64_t token) { return (size_t)(token ^ (token >> 29)) % BK_BUCKETS; }

static int random_bytes(void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom((char *)buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

bk_client *bk_client_find(scdb_broker *b, uint64_t token)
{
    for (bk_client *c = b->buckets[bucket(token)]; c; c = c->next)
        if (c->token == token) return c;
    return NULL;
}

scdb_err bk_client_new(scdb_broker *b, bk_client **out)
{
    bk_client *c = calloc(1, sizeof *c);
    uint64_t t;

    if (!c) return SCDB_ENOMEM;
    do {
        if (random_bytes(&t, sizeof t)) {
            free(c);
            return SCDB_ESYS;
        }
    } while (t == 0 || bk_client_find(b, t));
    c->token = t;
    c->next = b->buckets[bucket(t)];
    b->buckets[bucket(t)] = c;
    b->n_clients++;
    *out = c;
    return SCDB_OK;
}

void bk_client_drop(scdb_broker *b, bk_client *c, const char *why)
{
    bk_client **pp = &b->buckets[bucket(c->token)];
    uint32_t n_arenas = c->n_arenas;
    uint64_t bytes = c->arena_bytes;

    uint32_t n_sessions = c->n_sessions;

    while (*pp && *pp != c) pp = &(*pp)->next;
    if (*pp) *pp = c->next;
    while (c->sessions) bk_session_close(b, c, c->sessions);
    while (c->arenas) bk_client_free_arena(b, c, c->arenas);
    if (why)
        scdb_info("client %s %s: released %u arena(s), %llu bytes, %u session(s)",
                  c->label, why, (unsigned)n_arenas,
                  (unsigned long long)bytes, (unsigned)n_sessions);
    b->n_clients--;
    bk_registry_unref(c->reg);
    free(c);
}

void bk_clients_sweep(scdb_broker *b, double now)
{
    double limit = b->cfg.heartbeat_timeout_ms / 1000.0;

    for (size_t i = 0; i < BK_BUCKETS; i++) {
        bk_client *c = b->buckets[i];
        while (c) {
            bk_client *next = c->next;
            if (now - c->last_seen > limit) {
                char why[96];
                snprintf(why, sizeof why, "reclaimed after %.1f s without a heartbeat",
                         now - c->last_seen);
                b->reclaimed_clients++;
                b->reclaimed_arenas += c->n_arenas;
                b->reclaimed_sessions += c->n_sessions;
                bk_client_drop(b, c, why);
            }
            c = next;
        }
    }
}

void bk_clients_drop_all(scdb_broker *b)
{
    for (size_t i = 0; i < BK_BUCKETS; i++)
        while (b->buckets[i]) bk_client_drop(b, b->buckets[i], NULL);
}

void bk_client_free_arena(scdb_broker *b, bk_client *c, bk_arena *a)
{
    if (a->session) bk_session_close(b, c, a->session);
    bk_arena_remove(b, c, a);
}

void bk_client_label(const char *name, uint32_t pid, char *out, size_t len)
{
    char pidname[24];
    snprintf(pidname, sizeof pidname, "pid %u", (unsigned)pid);
    if (!name || !name[0] || !strcmp(name, pidname))
        snprintf(out, len, "%s", pidname);
    else
        snprintf(out, len, "%s (pid %u)", name, (unsigned)pid);
}
