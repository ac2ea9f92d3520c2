/* remote_tier.c — the remote tier's configuration and lifecycle, its keys,
 * value verification, the pool of reader handles, probe and fetch, and the
 * up/down state (remote_tier.h explains the design). */
#include "remote_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ------------------------------------------------------------- config */

scdb_err scdb_remote_config_check(const scdb_remote_config *c, char *msg, size_t msg_len)
{
    const char *p;

    if (!c) {
        scdb_errf(msg, msg_len, "no remote tier configuration");
        return SCDB_EINVAL;
    }
    if (!c->cluster || !c->cluster[0]) {
        scdb_errf(msg, msg_len, "remote tier: no cluster given (cluster = host:port,...)");
        return SCDB_EINVAL;
    }
    p = c->key_prefix && c->key_prefix[0] ? c->key_prefix : SCDB_REMOTE_DEFAULT_PREFIX;
    if (strlen(p) > SCDB_REMOTE_PREFIX_MAX) {
        scdb_errf(msg, msg_len, "remote tier: key_prefix is longer than %d bytes",
                  SCDB_REMOTE_PREFIX_MAX);
        return SCDB_EINVAL;
    }
    for (const char *q = p; *q; q++)
        if (*q == '{' || *q == '}' || isspace((unsigned char)*q) || iscntrl((unsigned char)*q)) {
            scdb_errf(msg, msg_len,
                      "remote tier: key_prefix '%s' holds '%c': no braces (a hash tag would "
                      "put every block on one slot), spaces or control characters",
                      p, isprint((unsigned char)*q) ? *q : '?');
            return SCDB_EINVAL;
        }
    if (c->timeout_ms < 0 || c->readers < 0 || c->backoff_min_ms < 0 || c->backoff_max_ms < 0 ||
        c->replace_poll_ms < 0) {
        scdb_errf(msg, msg_len, "remote tier: a negative setting");
        return SCDB_EINVAL;
    }
    if (c->user && c->user[0] && !(c->password_file && c->password_file[0])) {
        scdb_errf(msg, msg_len, "remote tier: user '%s' needs a password_file", c->user);
        return SCDB_EINVAL;
    }
    return SCDB_OK;
}

/* ------------------------------------------------------------ counters */

bool rt_cmd_refused(const char *why, const char *cmd)
{
    /* "NOPERM ... run the 'getex' command", "ERR unknown command 'GETEX'" */
    char lower[512];
    size_t i;
    if (!why) return false;
    for (i = 0; why[i] && i + 1 < sizeof lower; i++) lower[i] = (char)tolower((unsigned char)why[i]);
    lower[i] = 0;
    return strstr(lower, cmd) && (strstr(lower, "noperm") || strstr(lower, "unknown command"));
}

void rt_count(scdb_remote *r, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&r->st_mu);
    *field += n;
    pthread_mutex_unlock(&r->st_mu);
}

void rt_record(scdb_remote *r, uint64_t errors, const char *why)
{
    uint64_t now = scdb_now_ns();
    pthread_mutex_lock(&r->st_mu);
    if (errors) {
        r->st.errors += errors;
        r->last_error_ns = now;
        if (r->st.up) {
            r->st.up = 0;
            r->st.state_changes++;
            r->down_since_ns = now;
            r->errors_while_down = 0;
            scdb_warn("remote tier: cluster failing (%s): reads and writes fall back to the "
                      "local tiers until it answers again", why && why[0] ? why : "error");
        }
        r->errors_while_down += errors;
    } else if (!r->st.up && now - r->last_error_ns >= RT_UP_AFTER_NS) {
        r->st.up = 1;
        r->st.state_changes++;
        scdb_info("remote tier: cluster answering again after %.1f s (%llu failed operations "
                  "meanwhile)", (double)(now - r->down_since_ns) / 1e9,
                  (unsigned long long)r->errors_while_down);
    }
    pthread_mutex_unlock(&r->st_mu);
}

void scdb_remote_stats(scdb_remote *r, scdb_remote_stat *out)
{
    if (!r || !out) return;
    pthread_mutex_lock(&r->st_mu);
    *out = r->st;
    pthread_mutex_unlock(&r->st_mu);
    pthread_mutex_lock(&r->q_mu);
    out->queued = r->q_len;
    out->queued_bytes = r->q_bytes;
    out->pending = r->q_len + r->in_flight;
    pthread_mutex_unlock(&r->q_mu);
}

/* ---------------------------------------------------------------- keys */

size_t scdb_remote_key(const scdb_remote *r, const scdb_key *k, char *buf)
{
    char hex[33];
    memcpy(buf, r->prefix, r->prefix_len);
    memcpy(buf + r->prefix_len, scdb_key_hex(k, hex), 33);
    return r->prefix_len + 32;
}

/* -------------------------------------------------------- verification */

scdb_err scdb_remote_verify(const void *value, size_t len, const scdb_key *key,
                            const scdb_key *prev_key, uint32_t i, const scdb_remote_expect *x,
                            scdb_block_info *info, const void **payload)
{
    const scdb_key *parent;
    scdb_err e;

    if (!value || !key || !x || !info || !payload || (i && !prev_key)) return SCDB_EINVAL;
    if ((e = scdb_block_value_decode(value, len, key, info, payload))) return e;
    parent = i ? prev_key : &x->parent;
    if (memcmp(info->ns.b, x->ns.b, sizeof x->ns.b) || info->block_index != x->first_index + i ||
        memcmp(info->parent.b, parent->b, sizeof parent->b) ||
        info->token_count != x->token_count || info->payload_len != x->payload_len ||
        info->payload_dtype != x->payload_dtype)
        return SCDB_EMISMATCH;
    return SCDB_OK;
}

/* What was wrong with a value whose header parsed, for the log line. */
static const char *what_mismatch(const scdb_block_info *info, const scdb_key *key,
                                 const scdb_remote_expect *x, uint32_t i)
{
    if (memcmp(info->key.b, key->b, sizeof key->b)) return "it names another block key";
    if (memcmp(info->ns.b, x->ns.b, sizeof x->ns.b)) return "another namespace";
    if (info->block_index != x->first_index + i) return "another block index";
    if (info->token_count != x->token_count) return "another token count";
    if (info->payload_len != x->payload_len || info->payload_dtype != x->payload_dtype)
        return "another payload size or dtype";
    return "another parent";
}

/* ---------------------------------------------------------------- pool */

static scdb_rc *borrow(scdb_remote *r)
{
    scdb_rc *rc;
    pthread_mutex_lock(&r->pool_mu);
    while (r->n_pool == 0) pthread_cond_wait(&r->pool_cv, &r->pool_mu);
    rc = r->pool[--r->n_pool];
    pthread_mutex_unlock(&r->pool_mu);
    return rc;
}

static void give_back(scdb_remote *r, scdb_rc *rc)
{
    pthread_mutex_lock(&r->pool_mu);
    r->pool[r->n_pool++] = rc;
    pthread_cond_signal(&r->pool_cv);
    pthread_mutex_unlock(&r->pool_mu);
}

/* ------------------------------------------------------------ lifecycle */

scdb_err scdb_remote_open(const scdb_remote_config *c, scdb_remote **out, char *msg,
                          size_t msg_len)
{
    scdb_remote *r = NULL;
    scdb_rc_config rcc;
    const char *prefix;
    scdb_err e;
    char why[512] = "";

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if ((e = scdb_remote_config_check(c, msg, msg_len))) return e;
    if (!(r = calloc(1, sizeof *r))) return SCDB_ENOMEM;
    prefix = c->key_prefix && c->key_prefix[0] ? c->key_prefix : SCDB_REMOTE_DEFAULT_PREFIX;
    r->prefix_len = strlen(prefix);
    memcpy(r->prefix, prefix, r->prefix_len + 1);
    r->ttl_ms = c->ttl_ms;
    r->queue_cap = c->queue_bytes ? c->queue_bytes : SCDB_REMOTE_DEFAULT_QUEUE_BYTES;
    r->n_readers = c->readers > 0 ? c->readers : 1;
    r->log_key_len = (size_t)snprintf(r->log_key, sizeof r->log_key, "%s%s", r->prefix,
                                      SCDB_REMOTE_LOG_NAME);
    r->poll_ns = (uint64_t)(c->replace_poll_ms > 0 ? c->replace_poll_ms : SCDB_REMOTE_REPLACE_POLL_MS) *
                 1000000ull;
    if (getrandom(&r->instance, sizeof r->instance, 0) != (ssize_t)sizeof r->instance)
        r->instance = scdb_now_ns() ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&r->pool_mu, NULL);
    pthread_cond_init(&r->pool_cv, NULL);
    pthread_mutex_init(&r->q_mu, NULL);
    pthread_cond_init(&r->q_cv, NULL);
    pthread_mutex_init(&r->st_mu, NULL);
    pthread_mutex_init(&r->cb_mu, NULL);
    r->locks_init = true;
    r->st.up = 1;
    if (!(r->pool = calloc((size_t)r->n_readers, sizeof *r->pool))) {
        e = SCDB_ENOMEM;
        goto fail;
    }
    memset(&rcc, 0, sizeof rcc);
    rcc.seeds = c->cluster;
    rcc.user = c->user && c->user[0] ? c->user : NULL;
    rcc.password_file = c->password_file && c->password_file[0] ? c->password_file : NULL;
    rcc.timeout_ms = c->timeout_ms ? c->timeout_ms : SCDB_REMOTE_DEFAULT_TIMEOUT_MS;
    rcc.backoff_min_ms = c->backoff_min_ms;
    rcc.backoff_max_ms = c->backoff_max_ms;
    rcc.lazy = 1;
    /* the first handle says whether the cluster answers at all */
    if ((e = scdb_rc_open(&rcc, &r->wrc, why, sizeof why))) goto rc_fail;
    {
        scdb_rc_stats rs;
        scdb_rc_stats_get(r->wrc, &rs);
        if (!rs.refreshes) {
            r->st.up = 0;
            r->last_error_ns = r->down_since_ns = scdb_now_ns();
            scdb_warn("remote tier: cluster %s does not answer yet (%s): serving from the "
                      "local tiers until it does", c->cluster,
                      scdb_rc_last_error(r->wrc)[0] ? scdb_rc_last_error(r->wrc) : "no reply");
        }
    }
    for (int i = 0; i < r->n_readers; i++) {
        if ((e = scdb_rc_open(&rcc, &r->pool[i], why, sizeof why))) goto rc_fail;
        r->n_pool++;
    }
    if ((e = rt_write_start(r))) {
        scdb_errf(msg, msg_len, "remote tier: cannot start its writer thread");
        goto fail;
    }
    scdb_info("remote tier: cluster %s, keys %s<32 hex digits>, ttl %llu s, write queue %llu "
              "bytes, timeout %d ms, %d reader handle(s)", c->cluster, r->prefix,
              (unsigned long long)(r->ttl_ms / 1000), (unsigned long long)r->queue_cap,
              rcc.timeout_ms, r->n_readers);
    *out = r;
    return SCDB_OK;
rc_fail:
    scdb_errf(msg, msg_len, "remote tier: %s", why[0] ? why : scdb_strerror(e));
fail:
    scdb_remote_close(&r);
    return e;
}

void scdb_remote_close(scdb_remote **rp)
{
    scdb_remote *r;

    if (!rp || !(r = *rp)) return;
    if (r->writer_started) rt_write_stop(r);
    scdb_rc_close(&r->wrc);
    for (int i = 0; i < r->n_pool; i++) scdb_rc_close(&r->pool[i]);
    free(r->pool);
    free(r->recs);
    if (r->locks_init) {
        pthread_mutex_destroy(&r->pool_mu);
        pthread_cond_destroy(&r->pool_cv);
        pthread_mutex_destroy(&r->q_mu);
        pthread_cond_destroy(&r->q_cv);
        pthread_mutex_destroy(&r->st_mu);
        pthread_mutex_destroy(&r->cb_mu);
    }
    free(r);
    *rp = NULL;
}

/* ------------------------------------------------------------- probe */

/* Redis keys of keys[0..n) into one buffer; rk[i] point into it. */
static scdb_err make_keys(const scdb_remote *r, const scdb_key *keys, size_t n, char **buf,
                          scdb_rc_key **rk)
{
    *buf = malloc(n ? n * SCDB_REMOTE_KEY_MAX : 1);
    *rk = malloc(n ? n * sizeof **rk : 1);
    if (!*buf || !*rk) {
        free(*buf);
        free(*rk);
        *buf = NULL;
        *rk = NULL;
        return SCDB_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        char *k = *buf + i * SCDB_REMOTE_KEY_MAX;
        (*rk)[i].p = k;
        (*rk)[i].len = scdb_remote_key(r, &keys[i], k);
    }
    return SCDB_OK;
}

scdb_err scdb_remote_probe(scdb_remote *r, const scdb_key *keys, size_t n, size_t *n_present)
{
    char *buf;
    scdb_rc_key *rk;
    scdb_rc *rc;
    scdb_err e;

    if (n_present) *n_present = 0;
    if (!r || !n_present || (!keys && n)) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    if ((e = make_keys(r, keys, n, &buf, &rk))) return e;
    rc = borrow(r);
    e = scdb_rc_probe(rc, rk, n, n_present);
    rt_record(r, e ? 1 : 0, e ? scdb_rc_last_error(rc) : NULL);
    give_back(r, rc);
    pthread_mutex_lock(&r->st_mu);
    r->st.probes++;
    r->st.probe_hit_blocks += *n_present;
    if (!e) r->st.probe_miss_blocks += n - *n_present;
    pthread_mutex_unlock(&r->st_mu);
    free(buf);
    free(rk);
    return e;
}

/* -------------------------------------------------------------- fetch */

void scdb_remote_blocks_free(scdb_remote_block *blocks, size_t n)
{
    for (size_t i = 0; blocks && i < n; i++) {
        free(blocks[i].value);
        blocks[i].value = NULL;
        blocks[i].payload = NULL;
    }
}

/* One round: GET keys[from..to), verify in order into out; *stop when the
 * run ended (miss, refused value, error). */
static scdb_err fetch_round(scdb_remote *r, scdb_rc *rc, const scdb_key *keys, size_t from,
                            size_t to, const scdb_remote_expect *x, scdb_remote_block *out,
                            size_t *n_got, bool *stop)
{
    size_t n = to - from, i;
    scdb_rc_op *ops = calloc(n, sizeof *ops);
    char *buf = NULL;
    scdb_rc_key *rk = NULL;
    scdb_err e = SCDB_OK;
    uint64_t errors = 0, hits = 0, bytes = 0;
    char why[256] = "";

    if (!ops || make_keys(r, keys + from, n, &buf, &rk)) {
        free(ops);
        return SCDB_ENOMEM;
    }
    bool getex = !__atomic_load_n(&r->no_getex, __ATOMIC_RELAXED);
    for (i = 0; i < n; i++) {
        ops[i].cmd = getex ? SCDB_RC_GETEX : SCDB_RC_GET;   /* a block read gets its TTL again */
        ops[i].key = rk[i].p;
        ops[i].key_len = rk[i].len;
        ops[i].ttl_ms = r->ttl_ms;
    }
    (void)scdb_rc_exec(rc, ops, n);
    if (getex && rt_cmd_refused(scdb_rc_last_error(rc), "getex") &&
        (ops[0].status == SCDB_EAUTH || ops[0].status == SCDB_EPROTO)) {
        /* an ACL without +getex, or Redis before 6.2: plain GETs from now on */
        if (!__atomic_exchange_n(&r->no_getex, 1, __ATOMIC_RELAXED))
            scdb_warn("remote tier: the cluster refuses GETEX (%s): reads no longer refresh a "
                      "block's TTL (give the ACL user +getex; Redis >= 6.2)", scdb_rc_last_error(rc));
        for (i = 0; i < n; i++) {
            free(ops[i].out);
            ops[i].out = NULL;
            ops[i].cmd = SCDB_RC_GET;
        }
        (void)scdb_rc_exec(rc, ops, n);
    }
    *stop = false;
    for (i = 0; i < n && !*stop; i++) {
        size_t k = from + i;
        scdb_remote_block *b = &out[k];
        scdb_err ve;
        if (ops[i].status == SCDB_ENOTFOUND) {
            *stop = true;
            break;
        }
        if (ops[i].status) {
            e = ops[i].status;
            errors++;
            snprintf(why, sizeof why, "%s", scdb_rc_last_error(rc));
            *stop = true;
            break;
        }
        ve = scdb_remote_verify(ops[i].out, ops[i].out_len, &keys[k], k ? &keys[k - 1] : NULL,
                                (uint32_t)k, x, &b->info, &b->payload);
        if (ve) {
            char hex[33];
            /* EMISMATCH: the header parsed (info is filled); say what differs */
            scdb_error("remote tier: value of %s%s (%zu bytes) refused: %s%s%s; treated as a "
                       "miss", r->prefix, scdb_key_hex(&keys[k], hex), ops[i].out_len,
                       scdb_strerror(ve), ve == SCDB_EMISMATCH ? ": " : "",
                       ve == SCDB_EMISMATCH ? what_mismatch(&b->info, &keys[k], x, (uint32_t)k)
                                            : "");
            memset(b, 0, sizeof *b);
            rt_count(r, &r->st.invalid, 1);
            rt_count(r, &r->st.errors, 1);
            *stop = true;
            break;
        }
        b->value = ops[i].out;
        b->value_len = ops[i].out_len;
        ops[i].out = NULL;
        hits++;
        bytes += b->value_len;
        (*n_got)++;
    }
    for (i = 0; i < n; i++) free(ops[i].out);
    rt_record(r, errors, why);
    pthread_mutex_lock(&r->st_mu);
    r->st.hits += hits;
    r->st.bytes_read += bytes;
    pthread_mutex_unlock(&r->st_mu);
    free(ops);
    free(buf);
    free(rk);
    return e;
}

scdb_err scdb_remote_fetch(scdb_remote *r, const scdb_key *keys, size_t n,
                           const scdb_remote_expect *x, scdb_remote_block *out, size_t *n_got)
{
    size_t per_round, done = 0;
    uint64_t value_len;
    bool stop = false;
    scdb_rc *rc;
    scdb_err e = SCDB_OK;

    if (n_got) *n_got = 0;
    if (!r || !x || !n_got || (n && (!keys || !out))) return SCDB_EINVAL;
    if (n == 0) return SCDB_OK;
    memset(out, 0, n * sizeof *out);
    value_len = scdb_block_header_len(0) + x->payload_len;
    per_round = value_len >= SCDB_REMOTE_FETCH_BYTES ? 1 : (size_t)(SCDB_REMOTE_FETCH_BYTES / value_len);
    rc = borrow(r);
    while (done < n && !stop && !e) {
        size_t to = n - done < per_round ? n : done + per_round;
        e = fetch_round(r, rc, keys, done, to, x, out, n_got, &stop);
        done = to;
    }
    give_back(r, rc);
    pthread_mutex_lock(&r->st_mu);
    r->st.fetches++;
    r->st.misses += n - *n_got;
    pthread_mutex_unlock(&r->st_mu);
    return e;
}
