/* reload.c — SIGHUP: load the configuration again and swap it in without
 * dropping a client (broker.h, "RELOAD").
 *
 *   main thread                     reload thread
 *   -----------                     -------------
 *   SIGHUP -> bk_reload_request ->  load(ctx): defaults, file, flags
 *   (the loop goes on serving)      bk_registry_new: every model config,
 *                                   codebook, pair and policy file
 *   bk_reload_poll: done? <- pipe - done = 1
 *   join; settings; swap registry;
 *   move clients and sessions
 *
 * Nothing the thread does touches the broker: it only reads the loader and
 * fills its own bk_reload. */
#include "broker_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct bk_reload {
    pthread_t t;
    bk_reload_fn fn;
    void *ctx;
    int wake_fd;
    scdb_broker_config cfg;     /* what the loader read                    */
    bk_registry *reg;           /* what it loads                           */
    scdb_err e;
    char err[768];
    int done;                   /* atomic: the thread has finished          */
};

/* Settings applied at run time; every other [broker] key (including any
 * added later) is fixed once the broker runs: a change is reported and left
 * for a restart. */
static const char *const runtime_keys[] = {
    "log_level", "heartbeat_ms", "heartbeat_timeout_ms", "max_request_bytes", "max_tokens",
    "max_arenas_per_client", "max_arena_bytes", "arena_total_bytes", "drain_timeout_ms",
    "max_inflight",
};

int scdb_broker_config_reloadable(const char *key)
{
    for (size_t i = 0; i < SCDB_ARRAY_LEN(runtime_keys); i++)
        if (!strcmp(runtime_keys[i], key)) return 1;
    return 0;
}

static void *reload_main(void *arg)
{
    struct bk_reload *r = arg;

    scdb_broker_config_defaults(&r->cfg);
    r->e = r->fn(r->ctx, &r->cfg, r->err, sizeof r->err);
    if (!r->e) r->e = bk_registry_new(&r->cfg, &r->reg, r->err, sizeof r->err);
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    (void)!write(r->wake_fd, "R", 1);
    return NULL;
}

void bk_reload_request(scdb_broker *b)
{
    struct bk_reload *r;
    sigset_t all, old;

    if (!b->reload_fn) {
        scdb_warn("SIGHUP: this broker was started without a configuration to read again: "
                  "nothing reloaded");
        return;
    }
    if (b->reload) {
        b->reload_again = 1;
        scdb_info("SIGHUP: a reload is in progress; another follows it");
        return;
    }
    r = calloc(1, sizeof *r);
    if (!r) {
        scdb_error("SIGHUP: out of memory: nothing reloaded");
        b->reload_failures++;
        return;
    }
    r->fn = b->reload_fn;
    r->ctx = b->reload_ctx;
    r->wake_fd = b->sigpipe[1];
    bk_notify("RELOADING=1\nSTATUS=reloading the configuration");
    scdb_info("SIGHUP: reloading the configuration (models, codebooks, pairs, policies)");
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&r->t, NULL, reload_main, r)) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        scdb_error("SIGHUP: cannot start the reload thread: nothing reloaded");
        b->reload_failures++;
        free(r);
        bk_notify("READY=1\nSTATUS=serving (reload failed)");
        return;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    b->reload = r;
}

/* ------------------------------------------------------------ apply */

static int same_model(const scdb_broker_model *a, const scdb_broker_model *b)
{
    return a->n_layers == b->n_layers && a->n_kv_heads == b->n_kv_heads &&
           a->head_dim == b->head_dim && a->n_heads == b->n_heads &&
           a->raw_dtype == b->raw_dtype;
}

static int same_codebook(const scdb_broker_codebook *a, const scdb_broker_codebook *b)
{
    return !memcmp(a->ns.b, b->ns.b, sizeof a->ns.b) && a->token_bytes == b->token_bytes &&
           a->payload_dtype == b->payload_dtype && !strcmp(a->kind, b->kind) &&
           a->states_layers == b->states_layers && a->states_dim == b->states_dim &&
           !strcmp(a->producer->name, b->producer->name);
}

/* Move client c onto registry n when everything it uses is there and
 * compatible (its arenas have its model's geometry, its keys its codebook's
 * namespace).  1: moved. */
static int move_client(bk_client *c, bk_registry *n)
{
    const scdb_broker_model *m = bk_reg_model(n, c->model->name);
    const scdb_broker_codebook *cb = bk_reg_codebook(n, c->cb->name);
    const bk_pair *p;

    if (!m || !cb || !same_model(m, c->model) || !same_codebook(cb, c->cb)) return 0;
    p = bk_reg_pair(n, cb, m);
    if (c->pair && !p) return 0;
    /* a pair recalibrated for other weights than the client said it runs */
    if (c->role == SCDB__ROLE__CONSUMER && p && c->weights_fp[0] && p->dec.consumer_fp[0] &&
        strcmp(p->dec.consumer_fp, c->weights_fp))
        return 0;
    /* a codebook refitted for other weights than the producer runs */
    if (c->role == SCDB__ROLE__PRODUCER && c->weights_fp[0] && cb->producer_fp[0] &&
        strcmp(cb->producer_fp, c->weights_fp))
        return 0;
    c->model = m;
    c->cb = cb;
    c->pair = p;
    bk_registry_unref(c->reg);
    c->reg = bk_registry_ref(n);
    return 1;
}

/* A session takes the policy of its name in n, if there is one. */
static int move_session(bk_session *s, bk_registry *n)
{
    const bk_policy *p = bk_reg_policy(n, s->policy->name);
    if (!p) return 0;
    s->policy = p;
    bk_registry_unref(s->reg);
    s->reg = bk_registry_ref(n);
    return 1;
}

/* The new settings: run-time ones into nc, fixed ones reported.  0, or -1
 * with why (the reload is refused). */
static int settings(const scdb_broker *b, const scdb_broker_config *in,
                    scdb_broker_config *nc, char *why, size_t whylen)
{
    const char *key;

    *nc = b->cfg;
    for (int i = 0; (key = scdb_broker_config_key(i)); i++) {
        char was[600], now[600];
        if (scdb_broker_config_get(&b->cfg, key, was, sizeof was) ||
            scdb_broker_config_get(in, key, now, sizeof now) || !strcmp(was, now))
            continue;
        if (scdb_broker_config_reloadable(key)) {
            if (scdb_broker_config_set(nc, key, now, why, whylen)) return -1;
            scdb_info("reload: %s = %s (was %s)", key, now, was);
        } else {
            scdb_warn("reload: %s cannot change while the broker runs: keeping %s (the file "
                      "says %s; restart to apply)", key, was[0] ? was : "\"\"", now);
        }
    }
    if (nc->heartbeat_timeout_ms <= nc->heartbeat_ms) {
        snprintf(why, whylen, "heartbeat_timeout_ms (%d) must exceed heartbeat_ms (%d)",
                 nc->heartbeat_timeout_ms, nc->heartbeat_ms);
        return -1;
    }
    if (nc->max_request_bytes < 1024) {
        snprintf(why, whylen, "max_request_bytes must be at least 1024");
        return -1;
    }
    return 0;
}

static void apply(scdb_broker *b, struct bk_reload *r)
{
    scdb_broker_config nc;
    bk_registry *old = b->reg;
    int moved = 0, kept = 0, s_moved = 0, s_kept = 0;
    char why[512];

    if (r->e) {
        b->reload_failures++;
        scdb_error("reload failed, the running configuration stays: %s: %s",
                   scdb_strerror(r->e), r->err[0] ? r->err : "(no detail)");
        bk_notify("READY=1\nSTATUS=serving (the last reload failed: see the log)");
        return;
    }
    if (settings(b, &r->cfg, &nc, why, sizeof why)) {
        b->reload_failures++;
        scdb_error("reload failed, the running configuration stays: %s", why);
        bk_notify("READY=1\nSTATUS=serving (the last reload failed: see the log)");
        return;
    }
    b->cfg = nc;
    scdb_log_set_level(b->cfg.log_level);
    r->reg->generation = old->generation + 1;
    b->reg = r->reg;             /* the broker's reference moves with it */
    r->reg = NULL;
    for (size_t i = 0; i < BK_BUCKETS; i++)
        for (bk_client *c = b->buckets[i]; c; c = c->next) {
            if (c->reg != b->reg) {
                if (move_client(c, b->reg)) moved++;
                else {
                    kept++;
                    scdb_warn("reload: client %s keeps the previous %s %s until it "
                              "registers again (changed or gone in the new configuration)",
                              c->label, c->model->name, c->cb->name);
                }
            }
            for (bk_session *s = c->sessions; s; s = s->next) {
                if (s->reg == b->reg) continue;
                if (move_session(s, b->reg)) s_moved++;
                else s_kept++;
            }
        }
    bk_registry_unref(old);      /* freed once nothing uses it */
    b->reloads++;
    scdb_info("reload: configuration %llu: %d models, %d codebooks, %d pairs, %d policies; "
              "%d client(s) moved to it, %d kept the previous set; %d session(s) moved, %d "
              "kept their policy", (unsigned long long)b->reg->generation, b->reg->n_models,
              b->reg->n_codebooks, b->reg->n_pairs, b->reg->n_policies, moved, kept, s_moved,
              s_kept);
    {
        char st[128];
        snprintf(st, sizeof st, "READY=1\nSTATUS=serving (configuration %llu)",
                 (unsigned long long)b->reg->generation);
        bk_notify(st);
    }
}

static void reload_free(struct bk_reload *r)
{
    pthread_join(r->t, NULL);
    bk_registry_unref(r->reg);
    scdb_broker_config_clear(&r->cfg);
    free(r);
}

void bk_reload_poll(scdb_broker *b)
{
    struct bk_reload *r = b->reload;

    if (!r || !__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) return;
    b->reload = NULL;
    pthread_join(r->t, NULL);
    if (r->reg) r->reg->trim = b->trim;   /* freed (now or later) as the first */
    apply(b, r);
    bk_registry_unref(r->reg);
    scdb_broker_config_clear(&r->cfg);
    free(r);
    if (b->reload_again && !b->stopping) {
        b->reload_again = 0;
        bk_reload_request(b);
    }
}

void bk_reload_stop(scdb_broker *b)
{
    if (!b->reload) return;
    reload_free(b->reload);
    b->reload = NULL;
}
