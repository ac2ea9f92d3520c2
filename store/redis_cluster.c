/* redis_cluster.c — the Redis Cluster client handle: configuration, AUTH,
 * slot map refresh, and the call loop that routes commands by slot and
 * follows MOVED/ASK (redis_cluster.h explains the protocol).  Sockets and
 * rounds are in redis_cluster_io.c, parsing in redis_cluster_map.c. */
#include "redis_cluster_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASSWORD_FILE_MAX 4096

static bool starts(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && !memcmp(s, prefix, n);
}

static bool is_auth_error(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (starts(r->str, r->len, "NOAUTH") || starts(r->str, r->len, "WRONGPASS") ||
            starts(r->str, r->len, "NOPERM"));
}

/* -------------------------------------------------------------- config */

static scdb_err parse_seeds(scdb_rc *rc, const char *seeds, char *why, size_t why_len)
{
    size_t count = 0;
    const char *p = seeds;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        if (b > a) {
            char host[RC_HOST_MAX];
            int port, idx;
            if (rc_parse_addr(a, (size_t)(b - a), false, host, &port) != SCDB_OK || !host[0]) {
                rc_why(why, why_len, "seed '%.*s' is not host:port (port 1-65535)",
                        (int)((b - a) > 80 ? 80 : (b - a)), a);
                return SCDB_EINVAL;
            }
            scdb_err e = rc_node_get(rc, host, port, &idx);
            if (e == SCDB_EFULL) {
                rc_why(why, why_len, "more than %d seeds", SCDB_RC_MAX_NODES);
                return SCDB_EINVAL;
            }
            if (e) return e;
            rc->nodes[idx].seed = true;
            count++;
        }
        p = *end ? end + 1 : end;
    }
    if (!count) {
        rc_why(why, why_len, "no seed given (seeds = host:port,...)");
        return SCDB_EINVAL;
    }
    return SCDB_OK;
}

static scdb_err read_password(scdb_rc *rc, const char *path, char *why, size_t why_len)
{
    char *buf = NULL;
    size_t len = 0;
    scdb_err e = scdb_read_file(path, PASSWORD_FILE_MAX, &buf, &len);
    if (e == SCDB_ENOTFOUND) {
        rc_why(why, why_len, "password file %s does not exist", path);
        return e;
    }
    if (e == SCDB_ETOOBIG) {
        rc_why(why, why_len, "password file %s is over %d bytes", path, PASSWORD_FILE_MAX);
        return e;
    }
    if (e) {
        rc_why(why, why_len, "cannot read password file %s", path);
        return e == SCDB_ENOMEM ? e : SCDB_EIO;
    }
    size_t n = strcspn(buf, "\r\n");
    if (n == 0 || memchr(buf, '\0', n)) {
        rc_why(why, why_len, "password file %s: first line is empty or binary", path);
        e = SCDB_EINVAL;
        goto out;
    }
    rc->password = malloc(n + 1);
    if (!rc->password) {
        e = SCDB_ENOMEM;
        goto out;
    }
    memcpy(rc->password, buf, n);
    rc->password[n] = '\0';
out:
    memset(buf, 0, len);
    free(buf);
    return e;
}

/* ------------------------------------------------------------- the map */

static scdb_err install_map(scdb_rc *rc, const rc_slotmap *m, char *why, size_t why_len)
{
    int16_t *owner = malloc(sizeof rc->owner);
    if (!owner) return SCDB_ENOMEM;
    for (int s = 0; s < SCDB_RC_SLOTS; s++) owner[s] = -1;
    for (size_t i = 0; i < m->n_ranges; i++) {
        int idx;
        scdb_err e = rc_node_get(rc, m->ranges[i].host, m->ranges[i].port, &idx);
        if (e) {
            free(owner);
            rc_why(why, why_len, "CLUSTER SLOTS names more than %d nodes", SCDB_RC_MAX_NODES);
            return e == SCDB_EFULL ? SCDB_EPROTO : e;
        }
        for (int s = m->ranges[i].start; s <= m->ranges[i].end; s++) owner[s] = (int16_t)idx;
    }
    for (size_t i = 0; i < m->n_others; i++) { /* replicas: candidates for later refreshes */
        int idx;
        (void)rc_node_get(rc, m->others[i].host, m->others[i].port, &idx);
    }
    memcpy(rc->owner, owner, sizeof rc->owner);
    free(owner);
    for (size_t i = 0; i < rc->n_nodes; i++) rc->nodes[i].master = false;
    for (int s = 0; s < SCDB_RC_SLOTS; s++)
        if (rc->owner[s] >= 0) rc->nodes[rc->owner[s]].master = true;
    /* a map that still routes to a node known down (a failover under way)
     * stays stale: refreshed again at the refresh rate, not the backoff's */
    rc->map_stale = false;
    for (size_t i = 0; i < rc->n_nodes; i++)
        if (rc->nodes[i].master && rc->nodes[i].down) rc->map_stale = true;
    rc->st.refreshes++;
    if (!rc->map_ok) scdb_info("redis cluster: slot map from %zu ranges", m->n_ranges);
    rc->map_ok = true;
    return SCDB_OK;
}

/* Refresh candidates in order: masters of the map, seeds, every other node;
 * nodes backing off are skipped. */
static size_t refresh_candidates(const scdb_rc *rc, int *out, uint64_t now)
{
    size_t k = 0;
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < rc->n_nodes; i++) {
            const rc_node *n = &rc->nodes[i];
            bool in = pass == 0 ? n->master : pass == 1 ? (!n->master && n->seed)
                                                         : (!n->master && !n->seed);
            if (in && !rc_node_backing_off(rc, n, now)) out[k++] = (int)i;
        }
    return k;
}

static void auth_refused_why(const scdb_rc *rc, const rc_node *nd, const redisReply *r, char *why,
                             size_t len)
{
    if (rc->user)
        rc_why(why, len, "AUTH as user '%s' refused by %s:%d: %.200s", rc->user, nd->host,
                nd->port, r->str);
    else
        rc_why(why, len, "AUTH refused by %s:%d: %.200s", nd->host, nd->port, r->str);
}

/* One CLUSTER SLOTS pipe came back: install its map if it is valid.
 * Returns SCDB_OK (installed), SCDB_EAUTH, SCDB_EPROTO, the pipe's transport
 * error, or SCDB_ENOMEM; `last` says why. */
static scdb_err take_slots(scdb_rc *rc, rc_pipe *p, char *last, size_t last_len)
{
    rc_node *nd = &rc->nodes[p->node];
    for (size_t j = 0; j < p->n_got; j++) {
        redisReply *r = p->got[j];
        if (p->tags[j] == RC_TAG_AUTH) {
            if (r->type != REDIS_REPLY_ERROR) {
                nd->authed = true;
                continue;
            }
            rc->st.auth_failures++;
            auth_refused_why(rc, nd, r, last, last_len);
            return SCDB_EAUTH;
        }
        if (is_auth_error(r)) {
            rc->st.auth_failures++;
            rc_why(last, last_len, "%s:%d wants credentials: %.120s (set user and password_file)",
                    nd->host, nd->port, r->str);
            return SCDB_EAUTH;
        }
        rc_slotmap m;
        char pw[RC_WHY_MAX];
        scdb_err e = rc_parse_slots(r, nd->host, &m, pw, sizeof pw);
        if (!e) {
            e = install_map(rc, &m, pw, sizeof pw);
            rc_slotmap_free(&m);
        }
        if (e == SCDB_EPROTO) {
            rc->st.protocol_errors++;
            rc_why(last, last_len, "%s:%d: %s", nd->host, nd->port, pw);
        }
        return e;
    }
    rc_why(last, last_len, "%s", p->why[0] ? p->why : "no reply");
    return p->err ? p->err : SCDB_EIO;
}

/* Ask up to RC_REFRESH_FANOUT candidates at once for CLUSTER SLOTS; start
 * the next candidate whenever one fails; the first valid map wins. */
static scdb_err refresh(scdb_rc *rc, uint64_t deadline, char *why, size_t why_len)
{
    int cand[SCDB_RC_MAX_NODES + 1];
    bool retried[SCDB_RC_MAX_NODES] = {false};
    rc_pipe *pipes = rc->pool;
    size_t n_cand, started = 0, in_flight = 0;
    scdb_err best = SCDB_EIO, e = SCDB_OK;
    bool installed = false;
    char last[RC_WHY_MAX] = "every known node is down (backing off)";
    static const char *argv[2] = {"CLUSTER", "SLOTS"};
    static const size_t lens[2] = {7, 5};

    rc->last_refresh_ns = scdb_now_ns();
    n_cand = refresh_candidates(rc, cand, rc->last_refresh_ns);
    while (!installed) {
        while (started < n_cand && in_flight < RC_REFRESH_FANOUT && started < SCDB_RC_MAX_NODES &&
               scdb_now_ns() < deadline) {
            rc_pipe *p = &pipes[started++];
            e = rc_pipe_begin(rc, p, cand[started - 1]);
            if (!e) e = rc_pipe_add(p, RC_TAG_INTERNAL, 2, argv, lens);
            if (e) goto out;
            rc->st.pipelines++;
            in_flight++;
        }
        if (!in_flight) break;
        rc_io_round(rc, pipes, started, deadline, true);
        for (size_t i = 0; i < started && !installed; i++) {
            rc_pipe *p = &pipes[i];
            if (p->active || p->node < 0) continue; /* in flight, or taken already */
            int node = p->node;
            in_flight--;
            scdb_err te = take_slots(rc, p, last, sizeof last);
            bool stale = te == SCDB_EIO && p->reused && p->n_got == 0;
            rc_pipe_reset(p);
            p->node = -1;
            if (te == SCDB_ENOMEM) {
                e = te;
                goto out;
            }
            if (te == SCDB_OK) {
                rc_node_ok(rc, node);
                installed = true;
            } else if (te == SCDB_EAUTH) {
                best = SCDB_EAUTH; /* the same credentials elsewhere: no point */
                rc_node_failed(rc, node, last);
                n_cand = started;
            } else if (te == SCDB_EPROTO) {
                if (best != SCDB_EAUTH) best = SCDB_EPROTO;
                rc_node_ok(rc, node); /* it answered; its map is the problem */
            } else if (stale && !retried[node] && n_cand <= SCDB_RC_MAX_NODES) {
                retried[node] = true; /* an idle socket found dead: once more, fresh */
                cand[n_cand++] = node;
            } else {
                if (best == SCDB_EIO && te == SCDB_ETIMEDOUT) best = SCDB_ETIMEDOUT;
                rc_node_failed(rc, node, last);
            }
        }
    }
out:
    for (size_t i = 0; i < started; i++) {
        rc_pipe_abandon(rc, &pipes[i]);
        rc_pipe_reset(&pipes[i]);
    }
    if (e) return e;
    if (installed) return SCDB_OK;
    rc->st.refresh_failures++;
    if (rc->map_ok) {
        scdb_warn("redis cluster: slot map refresh failed: %s", last);
        rc->map_ok = false;
    }
    rc_why(why, why_len, "%s", last);
    return best;
}

/* --------------------------------------------------------------- calls */

typedef struct op_state {
    unsigned slot;
    int node;          /* ASK target when asking */
    int redirects;
    bool pending, asking, retried_fresh;
} op_state;

static void finish(scdb_rc *rc, scdb_rc_op *op, op_state *st, scdb_err status, const char *why,
                   bool *first_error)
{
    st->pending = false;
    op->status = status;
    if (status != SCDB_OK && status != SCDB_ENOTFOUND && why && !*first_error) {
        rc_why(rc->last_error, sizeof rc->last_error, "%s", why);
        *first_error = true;
    }
}

/* A node for a slot the map does not know (it answers MOVED): a connected
 * one, else one free to connect, else one backing off (the caller then
 * reports it down). */
static int any_node(const scdb_rc *rc, uint64_t now)
{
    int free_to_try = -1, backing_off = -1;
    for (size_t i = 0; i < rc->n_nodes; i++) {
        const rc_node *n = &rc->nodes[i];
        if (!(n->master || n->seed)) continue;
        if (n->fd >= 0) return (int)i;
        if (!rc_node_backing_off(rc, n, now)) {
            if (free_to_try < 0) free_to_try = (int)i;
        } else if (backing_off < 0) {
            backing_off = (int)i;
        }
    }
    return free_to_try >= 0 ? free_to_try : backing_off;
}

/* By scdb_rc_cmd. */
static const char *const rc_cmd_names[] = {"?", "GET", "SET", "EXISTS", "DEL", "GETEX", "APPEND",
                                           "GETRANGE"};

static scdb_err queue_op(rc_pipe *p, const scdb_rc_op *op, int32_t tag)
{
    const char *argv[5];
    size_t lens[5];
    int argc = 2;
    char n1[24], n2[24];
    argv[0] = rc_cmd_names[op->cmd];
    argv[1] = op->key ? op->key : "";
    lens[1] = op->key_len;
    if (op->cmd == SCDB_RC_GETEX && !op->ttl_ms) argv[0] = "GET";   /* nothing to set */
    lens[0] = strlen(argv[0]);
    switch (op->cmd) {
    case SCDB_RC_SET:
    case SCDB_RC_APPEND:
        argv[argc] = op->val ? op->val : "";
        lens[argc++] = op->val_len;
        break;
    case SCDB_RC_GETRANGE:
        lens[argc] = (size_t)snprintf(n1, sizeof n1, "%lld", (long long)op->start);
        argv[argc++] = n1;
        lens[argc] = (size_t)snprintf(n2, sizeof n2, "%lld", (long long)op->end);
        argv[argc++] = n2;
        break;
    default:
        break;
    }
    if ((op->cmd == SCDB_RC_SET || op->cmd == SCDB_RC_GETEX) && op->ttl_ms) {
        argv[argc] = "PX";
        lens[argc++] = 2;
        lens[argc] = (size_t)snprintf(n1, sizeof n1, "%llu", (unsigned long long)op->ttl_ms);
        argv[argc++] = n1;
    }
    return rc_pipe_add(p, tag, argc, argv, lens);
}

/* One reply to an op: done, or redirected (still pending). */
static void take_reply(scdb_rc *rc, scdb_rc_op *op, op_state *st, const redisReply *r,
                       int node, bool *first_error)
{
    const rc_node *nd = &rc->nodes[node];
    char why[RC_WHY_MAX];

    if (r->type == REDIS_REPLY_ERROR) {
        if (starts(r->str, r->len, "MOVED ") || starts(r->str, r->len, "ASK ")) {
            bool ask;
            int slot, port, idx;
            char host[RC_HOST_MAX];
            if (rc_parse_redirect(r->str, r->len, nd->host, &ask, &slot, host, &port) != SCDB_OK) {
                rc->st.protocol_errors++;
                rc_why(why, sizeof why, "%s:%d: bad redirection '%.80s'", nd->host, nd->port, r->str);
                finish(rc, op, st, SCDB_EPROTO, why, first_error);
                return;
            }
            if ((unsigned)slot != st->slot) {
                rc->st.protocol_errors++;
                rc_why(why, sizeof why, "%s:%d: redirection for slot %d, the key is in slot %u",
                         nd->host, nd->port, slot, st->slot);
                finish(rc, op, st, SCDB_EPROTO, why, first_error);
                return;
            }
            if (++st->redirects > rc->max_redirects) {
                rc->st.protocol_errors++;
                rc_why(why, sizeof why, "more than %d redirections (last: %.80s from %s:%d)",
                         rc->max_redirects, r->str, nd->host, nd->port);
                finish(rc, op, st, SCDB_EPROTO, why, first_error);
                return;
            }
            scdb_err e = rc_node_get(rc, host, port, &idx);
            if (e) {
                rc->st.protocol_errors++;
                rc_why(why, sizeof why, "%s:%d: redirection to %s:%d: %s", nd->host, nd->port,
                         host, port, e == SCDB_EFULL ? "too many nodes" : "out of memory");
                finish(rc, op, st, e == SCDB_EFULL ? SCDB_EPROTO : e, why, first_error);
                return;
            }
            if (ask) {
                rc->st.ask++;
                st->asking = true;
                st->node = idx;
            } else {
                rc->st.moved++;
                rc->owner[slot] = (int16_t)idx;
                rc->nodes[idx].master = true;
                rc->map_stale = true;
            }
            return; /* pending: next round */
        }
        if (starts(r->str, r->len, "TRYAGAIN")) {
            if (++st->redirects <= rc->max_redirects) return;
        }
        rc_why(why, sizeof why, "%s:%d: %.160s", nd->host, nd->port, r->str);
        if (is_auth_error(r)) {
            rc->st.auth_failures++;
            finish(rc, op, st, SCDB_EAUTH, why, first_error);
        } else if (starts(r->str, r->len, "CLUSTERDOWN") || starts(r->str, r->len, "LOADING") ||
                   starts(r->str, r->len, "MASTERDOWN") || starts(r->str, r->len, "TRYAGAIN")) {
            rc->map_stale = true;
            finish(rc, op, st, SCDB_EIO, why, first_error);
        } else {
            finish(rc, op, st, SCDB_EPROTO, why, first_error);
        }
        return;
    }
    bool ok = false;
    switch (op->cmd) {
    case SCDB_RC_GET:
    case SCDB_RC_GETEX:
    case SCDB_RC_GETRANGE:
        if (r->type == REDIS_REPLY_NIL && op->cmd != SCDB_RC_GETRANGE) {
            finish(rc, op, st, SCDB_ENOTFOUND, NULL, first_error);
            return;
        }
        if (r->type == REDIS_REPLY_STRING) {
            op->out = malloc(r->len ? r->len : 1);
            if (!op->out) {
                finish(rc, op, st, SCDB_ENOMEM, "out of memory", first_error);
                return;
            }
            memcpy(op->out, r->str, r->len);
            op->out_len = r->len;
            ok = true;
        }
        break;
    case SCDB_RC_SET:
        ok = r->type == REDIS_REPLY_STATUS && r->len == 2 && !memcmp(r->str, "OK", 2);
        break;
    case SCDB_RC_EXISTS:
    case SCDB_RC_DEL:
        if (r->type == REDIS_REPLY_INTEGER) {
            finish(rc, op, st, r->integer > 0 ? SCDB_OK : SCDB_ENOTFOUND, NULL, first_error);
            return;
        }
        break;
    case SCDB_RC_APPEND:
        if (r->type == REDIS_REPLY_INTEGER) {
            op->integer = r->integer;
            ok = true;
        }
        break;
    }
    if (ok) {
        finish(rc, op, st, SCDB_OK, NULL, first_error);
        return;
    }
    rc->st.protocol_errors++;
    rc_why(why, sizeof why, "%s:%d: unexpected reply (type %d) to %s", nd->host, nd->port, r->type,
             rc_cmd_names[op->cmd]);
    finish(rc, op, st, SCDB_EPROTO, why, first_error);
}

static scdb_err check_op(const scdb_rc_op *op)
{
    if (op->cmd < SCDB_RC_GET || op->cmd > SCDB_RC_GETRANGE) return SCDB_EINVAL;
    if (!op->key && op->key_len) return SCDB_EINVAL;
    if (op->key_len > SCDB_RC_MAX_KEY) return SCDB_ETOOBIG;
    if (op->cmd == SCDB_RC_SET || op->cmd == SCDB_RC_APPEND) {
        if (!op->val && op->val_len) return SCDB_EINVAL;
        if (op->val_len > SCDB_RC_MAX_VALUE) return SCDB_ETOOBIG;
    }
    return SCDB_OK;
}

/* The call loop of redis_cluster.h, steps 0-4. */
static scdb_err run_ops(scdb_rc *rc, scdb_rc_op *ops, size_t n)
{
    uint64_t deadline = scdb_now_ns() + (uint64_t)rc->timeout_ms * 1000000ull;
    op_state *st = calloc(n ? n : 1, sizeof *st);
    rc_pipe *pipes = rc->pool;
    int *pipe_of = rc->pipe_of;
    size_t n_pending = 0, k = 0;
    bool first_error = false;
    scdb_err e = SCDB_OK;

    rc->last_error[0] = '\0';
    if (!st) {
        for (size_t i = 0; i < n; i++) ops[i].status = SCDB_ENOMEM;
        return SCDB_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ops[i].out = NULL;
        ops[i].out_len = 0;
        ops[i].status = check_op(&ops[i]);
        if (ops[i].status) {
            if (!first_error) {
                rc_why(rc->last_error, sizeof rc->last_error, "op %zu: %s", i,
                         scdb_strerror(ops[i].status));
                first_error = true;
            }
            continue;
        }
        st[i].slot = scdb_rc_slot(ops[i].key, ops[i].key_len);
        st[i].pending = true;
        n_pending++;
    }
    if (n_pending && rc->map_stale && scdb_now_ns() - rc->last_refresh_ns >= RC_REFRESH_MIN_NS) {
        char why[RC_WHY_MAX];
        e = refresh(rc, deadline, why, sizeof why);
        if (e == SCDB_ENOMEM) goto out;
        e = SCDB_OK; /* the ops will find out */
    }
    for (int round = 0; n_pending && round <= rc->max_redirects + 1; round++) {
        uint64_t now = scdb_now_ns();
        if (now >= deadline) break;
        for (size_t i = 0; i < SCDB_RC_MAX_NODES; i++) pipe_of[i] = -1;
        k = 0;
        for (size_t i = 0; i < n; i++) {
            if (!st[i].pending) continue;
            int node = st[i].asking ? st[i].node : rc->owner[st[i].slot];
            char why[RC_WHY_MAX];
            if (node < 0) node = any_node(rc, now);
            if (node < 0) {
                rc_why(why, sizeof why, "no live node known for slot %u", st[i].slot);
                finish(rc, &ops[i], &st[i], SCDB_EIO, why, &first_error);
                n_pending--;
                continue;
            }
            rc_node *nd = &rc->nodes[node];
            if (rc_node_backing_off(rc, nd, now)) {
                rc->st.backoff_skips++;
                rc_why(why, sizeof why, "%s:%d is down (next try in %llu ms)", nd->host, nd->port,
                         (unsigned long long)((nd->retry_at_ns - now) / 1000000));
                finish(rc, &ops[i], &st[i], SCDB_EIO, why, &first_error);
                n_pending--;
                continue;
            }
            int pi = pipe_of[node];
            if (pi < 0) {
                pi = (int)k++;
                pipe_of[node] = pi;
                e = rc_pipe_begin(rc, &pipes[pi], node);
                if (e) goto out;
                rc->st.pipelines++;
            }
            if (st[i].asking) {
                static const char *a[1] = {"ASKING"};
                static const size_t al[1] = {6};
                e = rc_pipe_add(&pipes[pi], RC_TAG_ASKING, 1, a, al);
                if (e) goto out;
                st[i].asking = false;
            }
            e = queue_op(&pipes[pi], &ops[i], (int32_t)i);
            if (e) goto out;
        }
        rc_io_round(rc, pipes, k, deadline, false);
        for (size_t pi = 0; pi < k; pi++) {
            rc_pipe *p = &pipes[pi];
            rc_node *nd = &rc->nodes[p->node];
            bool auth_bad = false;
            char auth_why[RC_WHY_MAX] = "";
            bool stale = p->err == SCDB_EIO && p->reused && p->n_got == 0;
            for (size_t j = 0; j < p->n_want; j++) {
                int32_t tag = p->tags[j];
                if (j < p->n_got) {
                    redisReply *r = p->got[j];
                    if (tag == RC_TAG_AUTH) {
                        if (r->type == REDIS_REPLY_ERROR) {
                            auth_bad = true;
                            rc->st.auth_failures++;
                            auth_refused_why(rc, nd, r, auth_why, sizeof auth_why);
                        } else {
                            nd->authed = true;
                        }
                        continue;
                    }
                    if (tag < 0) continue; /* ASKING: the command's own reply tells */
                    if (auth_bad) {
                        finish(rc, &ops[tag], &st[tag], SCDB_EAUTH, auth_why, &first_error);
                    } else {
                        take_reply(rc, &ops[tag], &st[tag], r, p->node, &first_error);
                    }
                } else if (tag >= 0) {
                    if (stale && !st[tag].retried_fresh) {
                        st[tag].retried_fresh = true; /* idle socket was dead: once more */
                        continue;
                    }
                    finish(rc, &ops[tag], &st[tag], p->err ? p->err : SCDB_EIO,
                           p->why[0] ? p->why : "no reply", &first_error);
                }
                if (tag >= 0 && !st[tag].pending) n_pending--;
            }
            if (auth_bad)
                rc_node_failed(rc, p->node, auth_why);
            else if (p->err && !stale)
                rc_node_failed(rc, p->node, p->why);
            else if (!p->err)
                rc_node_ok(rc, p->node);
            rc_pipe_reset(p);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!st[i].pending) continue;
        bool late = scdb_now_ns() >= deadline;
        char why[RC_WHY_MAX];
        rc_why(why, sizeof why, late ? "no answer within %d ms" : "gave up after %d rounds",
                 late ? rc->timeout_ms : rc->max_redirects + 2);
        finish(rc, &ops[i], &st[i], late ? SCDB_ETIMEDOUT : SCDB_EPROTO, why, &first_error);
    }
out:
    if (e) /* ENOMEM midway: every op not answered yet fails with it */
        for (size_t i = 0; i < n; i++)
            if (st[i].pending) finish(rc, &ops[i], &st[i], e, "out of memory", &first_error);
    for (size_t i = 0; i < k; i++) {
        rc_pipe_abandon(rc, &pipes[i]);
        rc_pipe_reset(&pipes[i]);
    }
    free(st);
    scdb_err first = SCDB_OK;
    for (size_t i = 0; i < n; i++) {
        scdb_err s = ops[i].status;
        if (s == SCDB_OK || s == SCDB_ENOTFOUND) continue;
        rc->st.errors++;
        if (s == SCDB_ETIMEDOUT) rc->st.timeouts++;
        if (!first) first = s;
    }
    return first;
}

/* ------------------------------------------------------------- public */

scdb_err scdb_rc_exec(scdb_rc *rc, scdb_rc_op *ops, size_t n)
{
    if (!rc || (!ops && n)) return SCDB_EINVAL;
    rc->st.calls++;
    rc->st.ops += n;
    return run_ops(rc, ops, n);
}

scdb_err scdb_rc_get(scdb_rc *rc, const void *key, size_t key_len, void **val, size_t *len)
{
    if (!rc || !val || !len) return SCDB_EINVAL;
    *val = NULL;
    *len = 0;
    scdb_rc_op op = {.cmd = SCDB_RC_GET, .key = key, .key_len = key_len};
    scdb_err e = scdb_rc_exec(rc, &op, 1);
    if (e == SCDB_OK) e = op.status; /* ENOTFOUND */
    *val = op.out;
    *len = op.out_len;
    return e;
}

scdb_err scdb_rc_set(scdb_rc *rc, const void *key, size_t key_len, const void *val, size_t val_len,
                     uint64_t ttl_ms)
{
    if (!rc) return SCDB_EINVAL;
    scdb_rc_op op = {.cmd = SCDB_RC_SET, .key = key, .key_len = key_len, .val = val,
                     .val_len = val_len, .ttl_ms = ttl_ms};
    return scdb_rc_exec(rc, &op, 1);
}

scdb_err scdb_rc_probe(scdb_rc *rc, const scdb_rc_key *keys, size_t n, size_t *n_present)
{
    if (n_present) *n_present = 0;
    if (!rc || !n_present || (!keys && n)) return SCDB_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!keys[i].p && keys[i].len) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    scdb_rc_op *ops = calloc(n, sizeof *ops);
    if (!ops) return SCDB_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ops[i].cmd = SCDB_RC_EXISTS;
        ops[i].key = keys[i].p;
        ops[i].key_len = keys[i].len;
    }
    (void)scdb_rc_exec(rc, ops, n);
    scdb_err e = SCDB_OK;
    size_t i = 0;
    while (i < n && ops[i].status == SCDB_OK) i++;
    if (i < n && ops[i].status != SCDB_ENOTFOUND) e = ops[i].status;
    *n_present = i;
    free(ops);
    return e;
}

scdb_err scdb_rc_refresh(scdb_rc *rc)
{
    if (!rc) return SCDB_EINVAL;
    rc->st.calls++;
    rc->last_error[0] = '\0';
    uint64_t deadline = scdb_now_ns() + (uint64_t)rc->timeout_ms * 1000000ull;
    return refresh(rc, deadline, rc->last_error, sizeof rc->last_error);
}

scdb_err scdb_rc_slot_node(const scdb_rc *rc, unsigned slot, char *buf, size_t len)
{
    if (!rc || !buf || !len) return SCDB_EINVAL;
    if (slot >= SCDB_RC_SLOTS) return SCDB_ERANGE;
    int idx = rc->owner[slot];
    if (idx < 0) return SCDB_ENOTFOUND;
    const rc_node *n = &rc->nodes[idx];
    int w = strchr(n->host, ':') ? snprintf(buf, len, "[%s]:%d", n->host, n->port)
                                 : snprintf(buf, len, "%s:%d", n->host, n->port);
    return w < 0 || (size_t)w >= len ? SCDB_EINVAL : SCDB_OK;
}

void scdb_rc_stats_get(const scdb_rc *rc, scdb_rc_stats *out)
{
    if (rc && out) *out = rc->st;
}

const char *scdb_rc_last_error(const scdb_rc *rc)
{
    return rc ? rc->last_error : "";
}

/* PING every master of the map (AUTH first on new connections): a refused
 * password is fatal at open, an unreachable master is not (it may be
 * failing over). */
static scdb_err check_masters(scdb_rc *rc, char *why, size_t why_len)
{
    rc_pipe *pipes = rc->pool;
    size_t k = 0;
    scdb_err e = SCDB_OK;
    uint64_t deadline = scdb_now_ns() + (uint64_t)rc->timeout_ms * 1000000ull;
    static const char *argv[1] = {"PING"};
    static const size_t lens[1] = {4};

    for (size_t i = 0; i < rc->n_nodes; i++) {
        if (!rc->nodes[i].master || rc_node_backing_off(rc, &rc->nodes[i], scdb_now_ns())) continue;
        e = rc_pipe_begin(rc, &pipes[k++], (int)i);
        if (!e) e = rc_pipe_add(&pipes[k - 1], RC_TAG_INTERNAL, 1, argv, lens);
        if (e) goto out;
        rc->st.pipelines++;
    }
    rc_io_round(rc, pipes, k, deadline, false);
    for (size_t i = 0; i < k && !e; i++) {
        rc_pipe *p = &pipes[i];
        rc_node *nd = &rc->nodes[p->node];
        for (size_t j = 0; j < p->n_got && !e; j++) {
            redisReply *r = p->got[j];
            if (p->tags[j] == RC_TAG_AUTH && r->type == REDIS_REPLY_ERROR) {
                auth_refused_why(rc, nd, r, why, why_len);
                e = SCDB_EAUTH;
            } else if (p->tags[j] == RC_TAG_AUTH) {
                nd->authed = true;
            } else if (is_auth_error(r)) {
                rc_why(why, why_len, "%s:%d wants credentials: %.120s (set user and "
                        "password_file)", nd->host, nd->port, r->str);
                e = SCDB_EAUTH;
            }
        }
        if (e) {
            rc->st.auth_failures++;
            rc_node_failed(rc, p->node, why);
        } else if (p->err) {
            rc_node_failed(rc, p->node, p->why);
        } else {
            rc_node_ok(rc, p->node);
        }
    }
out:
    for (size_t i = 0; i < k; i++) {
        rc_pipe_abandon(rc, &pipes[i]);
        rc_pipe_reset(&pipes[i]);
    }
    return e;
}

scdb_err scdb_rc_open(const scdb_rc_config *cfg, scdb_rc **out, char *msg, size_t msg_len)
{
    scdb_rc *rc = NULL;
    scdb_err e = SCDB_OK;
    char why[RC_WHY_MAX] = "";

    if (msg && msg_len) msg[0] = '\0';
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!cfg) {
        rc_why(msg, msg_len, "no configuration");
        return SCDB_EINVAL;
    }
    if (cfg->timeout_ms < 0 || cfg->backoff_min_ms < 0 || cfg->backoff_max_ms < 0 ||
        cfg->max_redirects < 0) {
        rc_why(msg, msg_len, "timeout_ms, backoff_min_ms, backoff_max_ms and max_redirects "
                "must not be negative");
        return SCDB_EINVAL;
    }
    if (!cfg->seeds) {
        rc_why(msg, msg_len, "no seed given (seeds = host:port,...)");
        return SCDB_EINVAL;
    }
    if (cfg->user && (!cfg->user[0] || !cfg->password_file)) {
        if (cfg->user[0])
            rc_why(msg, msg_len, "user '%.64s' given without password_file", cfg->user);
        else
            rc_why(msg, msg_len, "user is empty");
        return SCDB_EINVAL;
    }
    rc = calloc(1, sizeof *rc);
    if (!rc) return SCDB_ENOMEM;
    rc->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : SCDB_RC_DEFAULT_TIMEOUT_MS;
    rc->backoff_min_ms = cfg->backoff_min_ms ? cfg->backoff_min_ms : SCDB_RC_DEFAULT_BACKOFF_MIN_MS;
    rc->backoff_max_ms = cfg->backoff_max_ms ? cfg->backoff_max_ms : SCDB_RC_DEFAULT_BACKOFF_MAX_MS;
    rc->max_redirects = cfg->max_redirects ? cfg->max_redirects : SCDB_RC_DEFAULT_MAX_REDIRECTS;
    if (rc->backoff_min_ms > rc->backoff_max_ms) {
        rc_why(why, sizeof why, "backoff_min_ms %d > backoff_max_ms %d", rc->backoff_min_ms,
                rc->backoff_max_ms);
        e = SCDB_EINVAL;
        goto fail;
    }
    rc->pool = calloc(SCDB_RC_MAX_NODES, sizeof *rc->pool);
    if (!rc->pool) {
        e = SCDB_ENOMEM;
        goto fail;
    }
    for (int s = 0; s < SCDB_RC_SLOTS; s++) rc->owner[s] = -1;
    rc->map_stale = true;
    e = parse_seeds(rc, cfg->seeds, why, sizeof why);
    if (e) goto fail;
    if (cfg->user) {
        rc->user = strdup(cfg->user);
        if (!rc->user) {
            e = SCDB_ENOMEM;
            goto fail;
        }
    }
    if (cfg->password_file) {
        e = read_password(rc, cfg->password_file, why, sizeof why);
        if (e) goto fail;
    }
    rc->st.calls++;
    e = refresh(rc, scdb_now_ns() + (uint64_t)rc->timeout_ms * 1000000ull, why, sizeof why);
    if (e == SCDB_OK) {
        e = check_masters(rc, why, sizeof why);
    } else if (cfg->lazy && e != SCDB_EAUTH && e != SCDB_ENOMEM) {
        scdb_warn("redis cluster: no usable answer from the seeds yet (%s); will retry", why);
        e = SCDB_OK;
    }
    if (e) goto fail;
    *out = rc;
    return SCDB_OK;
fail:
    if (!why[0]) rc_why(why, sizeof why, "%s", scdb_strerror(e));
    rc_why(msg, msg_len, "%s", why);
    scdb_rc_close(&rc);
    return e;
}

void scdb_rc_close(scdb_rc **p)
{
    if (!p || !*p) return;
    scdb_rc *rc = *p;
    for (size_t i = 0; i < rc->n_nodes; i++) rc_node_close(&rc->nodes[i]);
    if (rc->pool)
        for (size_t i = 0; i < SCDB_RC_MAX_NODES; i++) rc_pipe_free(&rc->pool[i]);
    free(rc->pool);
    free(rc->nodes);
    free(rc->user);
    if (rc->password) {
        memset(rc->password, 0, strlen(rc->password));
        free(rc->password);
    }
    free(rc);
    *p = NULL;
}
