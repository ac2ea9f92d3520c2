/* handlers.c — one request at a time on the main thread: parse and check
 * the frames, answer the cheap requests inline, hand get / put / delete to
 * the worker pool or the writer.  Every path ends in exactly one reply. */
#include "broker_int.h"
#include "weights_fp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the reply to the request being handled needs. */
typedef struct rq {
    int sock;
    zmq_msg_t *ident;
    uint64_t id;
    bk_op op;
    uint64_t t0;
    int stale;                  /* an unknown token: not an error (stats)  */
} rq;

/* Reply with a status, a printf message and an optional body.  Returns
 * SCDB_ENOMEM when the reply could not be packed (the client got a bare
 * SCDB_ENOMEM instead: what the request made must then be undone), else
 * SCDB_OK. */
static scdb_err reply(scdb_broker *b, const rq *q, scdb_err status, Scdb__Reply *body,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static scdb_err reply(scdb_broker *b, const rq *q, scdb_err status, Scdb__Reply *body,
                      const char *fmt, ...)
{
    char msg[512] = "";
    uint8_t *buf;
    size_t len;
    scdb_err sent = SCDB_OK;

    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    if (status)
        scdb_debug("%s request %llu: %s: %s", bk_op_names[q->op], (unsigned long long)q->id,
                   scdb_strerror(status), msg);
    if (bk_pack_reply(q->id, status, msg, body, &buf, &len) == SCDB_OK) {
        bk_send_reply(b, q->sock, q->ident, buf, len);
        free(buf);
    } else {
        status = sent = SCDB_ENOMEM;
        bk_send_status(b, q->sock, q->ident, q->id, status, "out of memory (reply)");
    }
    bk_account(b, q->op, status, q->t0);
    if (q->stale) bk_account_stale(b, q->op);
    return sent;
}

static bk_op op_of(Scdb__Request__BodyCase c)
{
    switch (c) {
    case SCDB__REQUEST__BODY_HELLO: return OP_HELLO;
    case SCDB__REQUEST__BODY_PING: return OP_PING;
    case SCDB__REQUEST__BODY_HEARTBEAT: return OP_HEARTBEAT;
    case SCDB__REQUEST__BODY_PUT: return OP_PUT;
    case SCDB__REQUEST__BODY_LOOKUP: return OP_LOOKUP;
    case SCDB__REQUEST__BODY_GET: return OP_GET;
    case SCDB__REQUEST__BODY_DEL: return OP_DELETE;
    case SCDB__REQUEST__BODY_STATS: return OP_STATS;
    case SCDB__REQUEST__BODY_ARENA_CREATE: return OP_ARENA_CREATE;
    case SCDB__REQUEST__BODY_ARENA_MAPPED: return OP_ARENA_MAPPED;
    case SCDB__REQUEST__BODY_ARENA_FREE: return OP_ARENA_FREE;
    case SCDB__REQUEST__BODY_GOODBYE: return OP_GOODBYE;
    case SCDB__REQUEST__BODY_SESSION_OPEN: return OP_SESSION_OPEN;
    case SCDB__REQUEST__BODY_SESSION_EVICT: return OP_SESSION_EVICT;
    case SCDB__REQUEST__BODY_SESSION_CLOSE: return OP_SESSION_CLOSE;
    case SCDB__REQUEST__BODY_PUT_STATES: return OP_PUT_STATES;
    default: return OP_INVALID;
    }
}

static const char *role_name(int role)
{
    return role == SCDB__ROLE__PRODUCER ? "producer" : role == SCDB__ROLE__CONSUMER ? "consumer"
                                                                                     : "none";
}

/* Tokens of a request: count within max_tokens, ids within model m's
 * vocabulary (when the broker knows it; non-negative always). */
static int bad_tokens(scdb_broker *b, const rq *q, const scdb_broker_model *m, const int32_t *t,
                      size_t n)
{
    uint32_t vocab = m && m->vocab_size > 0 ? (uint32_t)m->vocab_size : 0x80000000u;
    if (n > b->cfg.max_tokens) {
        reply(b, q, SCDB_ETOOBIG, NULL, "%zu tokens exceed max_tokens %u", n, b->cfg.max_tokens);
        return 1;
    }
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) top |= (uint32_t)t[i];     /* vectorises */
    if (top < vocab) return 0;          /* every token <= their OR: all fine */
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0) {
            reply(b, q, SCDB_EINVAL, NULL, "token %zu is negative (%d)", i, (int)t[i]);
            return 1;
        } else if ((uint32_t)t[i] >= vocab) {
            reply(b, q, SCDB_ERANGE, NULL, "token %zu is %d: model %s has a %u-token vocabulary",
                  i, (int)t[i], m->name, vocab);
            return 1;
        }
    return 0;
}

/* A producer's tokens are positions 0 .. n-1 of its model: more than its
 * context (max_seq_len) cannot be what it prefilled. */
static int beyond_context(scdb_broker *b, const rq *q, const scdb_broker_model *m, size_t n)
{
    if (!m->max_seq_len || n <= (size_t)m->max_seq_len) return 0;
    reply(b, q, SCDB_ERANGE, NULL,
          "%zu tokens exceed model %s's context of %d positions (max_seq_len): nothing stored",
          n, m->name, m->max_seq_len);
    return 1;
}

/* Blocks [first, first + n_blocks) within the full blocks of n_tokens. */
static int bad_block_range(scdb_broker *b, const rq *q, size_t n_tokens, uint32_t first,
                           uint32_t n_blocks)
{
    size_t n_full = n_tokens / b->block_tokens;
    if (first <= n_full && n_blocks <= n_full - first) return 0;
    reply(b, q, SCDB_ESHAPE, NULL,
          "blocks [%u, %u) requested but the %zu tokens hold %zu full blocks of %u", first,
          first + n_blocks, n_tokens, n_full, b->block_tokens);
    return 1;
}

static void fill_shape(Scdb__ModelShape *s, const scdb_broker_model *m)
{
    s->n_layers = (uint32_t)m->n_layers;
    s->n_kv_heads = (uint32_t)m->n_kv_heads;
    s->head_dim = (uint32_t)m->head_dim;
    s->max_seq_len = (uint32_t)m->max_seq_len;
    s->n_heads = (uint32_t)(m->n_heads > 0 ? m->n_heads : 0);
    s->vocab_size = (uint32_t)(m->vocab_size > 0 ? m->vocab_size : 0);
}

/* Hand a request working on arena a to a queue: the job takes a reference
 * and marks it busy.  Returns 1 (the job owns req) or 0 after an error reply. */
static int queue_arena_job(scdb_broker *b, const rq *q, Scdb__Request *req, bk_op op,
                           bk_client *c, bk_arena *a, bk_queue *queue)
{
    bk_job *j = bk_job_new(q->sock, q->ident, q->id, q->t0, req, op);
    if (!j) {
        reply(b, q, SCDB_ENOMEM, NULL, "out of memory");
        return 0;
    }
    j->cb = c->cb;
    j->pair = c->pair;
    j->reg = bk_registry_ref(c->reg);
    j->arena = a;
    a->refs++;
    a->busy = 1;
    b->inflight++;
    bk_queue_push(queue, j);
    return 1;
}

/* ---------------------------------------------------------------- hello */

static void on_hello(scdb_broker *b, const rq *q, const Scdb__Request *req)
{
    const Scdb__Hello *h = req->hello;
    const scdb_broker_model *m;
    const scdb_broker_codebook *cb;
    const bk_pair *pair;
    char cbname[SCDB_BROKER_NAME_MAX + 8], lix_name[SCDB_LIX_NAME_MAX];
    bk_client *c, *old;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__HelloReply hr = SCDB__HELLO_REPLY__INIT;
    Scdb__ModelShape shape = SCDB__MODEL_SHAPE__INIT;
    Scdb__Recompute rc = SCDB__RECOMPUTE__INIT;
    scdb_err e;

    if (h->role != SCDB__ROLE__PRODUCER && h->role != SCDB__ROLE__CONSUMER) {
        reply(b, q, SCDB_EINVAL, NULL, "role must be producer or consumer");
        return;
    }
    m = bk_model_find(b, h->model);
    if (!m) {
        reply(b, q, SCDB_ENOTFOUND, NULL, "unknown model '%.128s'", h->model);
        return;
    }
    if (h->codebook[0])
        snprintf(cbname, sizeof cbname, "%s", h->codebook);
    else
        snprintf(cbname, sizeof cbname, "raw/%s", m->name);
    cb = bk_codebook_find(b, cbname);
    if (!cb) {
        reply(b, q, SCDB_ENOTFOUND, NULL, "unknown codebook '%.128s'", cbname);
        return;
    }
    pair = bk_pair_find(b, cb, m);
    if (h->role == SCDB__ROLE__PRODUCER && cb->producer != m) {
        reply(b, q, SCDB_EMISMATCH, NULL, "codebook %s belongs to producer %s, not %s", cb->name,
              cb->producer->name, m->name);
        return;
    }
    if (h->role == SCDB__ROLE__CONSUMER && !pair) {
        reply(b, q, SCDB_ENOTFOUND, NULL, "no pair decodes codebook %s into model %s", cb->name,
              m->name);
        return;
    }
    if (h->weights_fp[0] && !scdb_weights_fp_valid(h->weights_fp)) {
        reply(b, q, SCDB_EINVAL, NULL, "weights_fp '%.64s' is not a weights fingerprint (32 lowercase "
              "hex digits, FORMATS.md \"Weights fingerprint\")", h->weights_fp);
        return;
    }
    if (h->role == SCDB__ROLE__PRODUCER && h->weights_fp[0] && cb->producer_fp[0] &&
        strcmp(cb->producer_fp, h->weights_fp)) {
        /* codes of other weights stored under this namespace would decode
         * as the codebook's producer's for every consumer: refused */
        scdb_warn("client %s (pid %u) refused: codebook %s was fitted for producer weights %s, the "
                  "client runs %s", h->client_name, (unsigned)h->pid, cb->name, cb->producer_fp,
                  h->weights_fp);
        reply(b, q, SCDB_EMISMATCH, NULL,
              "stale producer: codebook %s was fitted for producer weights %s, this client's weights are "
              "%s; fit a codebook for them (scdb calibrate)%s", cb->name, cb->producer_fp, h->weights_fp,
              strlen(cb->producer_fp) == 16 ? ", or scdb calibrate --restamp-codebook if the codebook "
                                              "predates tensor fingerprints and the weights did not change"
                                            : "");
        return;
    }
    if (h->role == SCDB__ROLE__CONSUMER && h->weights_fp[0]) {
        /* a stale pair (calibrated for other weights) is refused, never used */
        if (pair->dec.consumer_fp[0] && strcmp(pair->dec.consumer_fp, h->weights_fp)) {
            char label[96];
            bk_client_label(h->client_name, h->pid, label, sizeof label);
            scdb_warn("client %s refused: pair %s -> %s was calibrated for consumer weights %s, "
                      "the client runs %s", label, cb->name, m->name,
                      pair->dec.consumer_fp, h->weights_fp);
            reply(b, q, SCDB_EMISMATCH, NULL,
                  "stale pair: %s -> %s was calibrated for consumer weights %s, this client's weights are "
                  "%s; calibrate a pair for them (scdb calibrate --codebook%s)", cb->name, m->name,
                  pair->dec.consumer_fp, h->weights_fp,
                  strlen(pair->dec.consumer_fp) == 16 ? ", or scdb calibrate --restamp if the pair predates "
                                                        "tensor fingerprints and the weights did not change"
                                                      : "");
            return;
        }
    }
    /* a hello carrying a live token re-registers: the old state goes */
    if (req->client && (old = bk_client_find(b, req->client)))
        bk_client_drop(b, old, "registered again");
    e = bk_client_new(b, &c);
    if (e) {
        reply(b, q, e, NULL, "cannot register client");
        return;
    }
    snprintf(c->name, sizeof c->name, "%s", h->client_name[0] ? h->client_name : "?");
    c->pid = h->pid;
    bk_client_label(c->name, c->pid, c->label, sizeof c->label);
    c->role = h->role;
    c->model = m;
    c->cb = cb;
    c->pair = pair;
    snprintf(c->weights_fp, sizeof c->weights_fp, "%s", h->weights_fp);
    c->reg = bk_registry_ref(b->reg);
    if (h->lookups) {           /* the baseline later reports count from */
        c->rep_index_lookups = h->lookups->index_lookups;
        c->rep_index_fallbacks = h->lookups->index_fallbacks;
    }
    c->last_seen = scdb_now();
    scdb_info("client %s registered: %s of model %s, codebook %s%s%s", c->label,
              role_name(c->role), m->name, cb->name,
              pair ? ", decoder " : "", pair ? pair->dec.name : "");

    fill_shape(&shape, m);
    hr.client = c->token;
    hr.broker_version = (char *)"scdb-broker " SCDB_BROKER_VERSION;
    hr.broker_instance = b->instance;
    hr.heartbeat_ms = (uint32_t)b->cfg.heartbeat_ms;
    hr.heartbeat_timeout_ms = (uint32_t)b->cfg.heartbeat_timeout_ms;
    hr.block_tokens = b->block_tokens;
    hr.block_bytes = (uint64_t)b->block_tokens * cb->token_bytes;
    hr.max_request_bytes = b->cfg.max_request_bytes;
    hr.max_tokens = b->cfg.max_tokens;
    hr.shape = &shape;
    hr.decoder = (char *)(pair ? pair->dec.name : "");
    hr.payload_dtype = cb->payload_dtype;
    hr.codebook_kind = (char *)cb->kind;
    if (c->role == SCDB__ROLE__PRODUCER && cb->encode) {
        hr.states_layers = (uint32_t)cb->states_layers;
        hr.states_dim = (uint32_t)cb->states_dim;
    }
    bk_lix_name(b, lix_name, sizeof lix_name);
    hr.lookup_index = lix_name;
    hr.ns.data = (uint8_t *)cb->ns.b;
    hr.ns.len = sizeof cb->ns.b;
    hr.remote_tier = b->remote != NULL;
    if (c->role == SCDB__ROLE__CONSUMER && pair && pair->fidelity_source[0]) {
        rc.policy = (Scdb__RecomputePolicy)pair->fidelity.policy;
        rc.tokens = (uint32_t)pair->fidelity.tokens;
        rc.fraction = pair->fidelity.fraction;
        rc.source = (char *)pair->fidelity_source;
        hr.recompute = &rc;
    }
    r.body_case = SCDB__REPLY__BODY_HELLO;
    r.hello = &hr;
    if (reply(b, q, SCDB_OK, &r, NULL)) bk_client_drop(b, c, "not told its token (no memory)");
}

/* ---------------------------------------------------------------- blocks */

/* Returns 1 if the request was taken over by a job (a remote remainder). */
static int on_lookup(scdb_broker *b, const rq *q, bk_client *c, Scdb__Request *req)
{
    const Scdb__LookupRequest *l = req->lookup;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__LookupReply lr = SCDB__LOOKUP_REPLY__INIT;
    size_t n_full = 0, n_matched = 0;
    char lix_name[SCDB_LIX_NAME_MAX];
    scdb_err e;

    if (bad_tokens(b, q, c->model, l->tokens, l->n_tokens)) return 0;
    e = scdb_store_lookup(b->store, &c->cb->ns, l->tokens, l->n_tokens, NULL, 0, &n_full,
                          &n_matched);
    if (e) {
        reply(b, q, e, NULL, "lookup failed");
        return 0;
    }
    /* the rest is asked of the remote tier by a worker (never here: no
     * Redis I/O on the event loop); too busy: the local answer */
    if (l->remote && b->remote && n_matched < n_full && b->inflight < b->cfg.max_inflight) {
        bk_job *j = bk_job_new(q->sock, q->ident, q->id, q->t0, req, OP_LOOKUP);
        if (j) {
            j->cb = c->cb;
            j->reg = bk_registry_ref(c->reg);   /* where cb lives */
            b->inflight++;
            bk_queue_push(&b->jobs, j);
            return 1;
        }
    }
    lr.n_full = (uint32_t)n_full;
    lr.n_matched = (uint32_t)n_matched;
    lr.matched_tokens = (uint32_t)(n_matched * b->block_tokens);
    lr.block_tokens = b->block_tokens;
    bk_lix_name(b, lix_name, sizeof lix_name);
    lr.lookup_index = lix_name;
    r.body_case = SCDB__REPLY__BODY_LOOKUP;
    r.lookup = &lr;
    reply(b, q, SCDB_OK, &r, NULL);
    return 0;
}

/* Returns 1 if the request was taken over by a job (req now owned by it). */
static int on_put(scdb_broker *b, const rq *q, bk_client *c, Scdb__Request *req,
                  zmq_msg_t *payload, int n_payload)
{
    const Scdb__PutRequest *p = req->put;
    uint64_t block_bytes = (uint64_t)b->block_tokens * c->cb->token_bytes;
    bk_job *j;

    if (c->role != SCDB__ROLE__PRODUCER) {
        reply(b, q, SCDB_EINVAL, NULL, "only producers put (this client is a %s)",
              role_name(c->role));
        return 0;
    }
    if (bad_tokens(b, q, c->model, p->tokens, p->n_tokens)) return 0;
    if (beyond_context(b, q, c->model, p->n_tokens)) return 0;
    if (bad_block_range(b, q, p->n_tokens, p->first_block, p->n_blocks)) return 0;
    for (int i = 0; i < n_payload; i++)
        if (zmq_msg_size(&payload[i]) != block_bytes) {
            reply(b, q, SCDB_ESHAPE, NULL,
                  "payload frame %d is %zu bytes; a block of codebook %s is %llu bytes", i,
                  zmq_msg_size(&payload[i]), c->cb->name, (unsigned long long)block_bytes);
            return 0;
        }
    j = bk_job_new(q->sock, q->ident, q->id, q->t0, req, OP_PUT);
    if (!j || (n_payload && !(j->frames = calloc((size_t)n_payload, sizeof *j->frames)))) {
        if (j) j->req = NULL;
        bk_job_free(j);
        reply(b, q, SCDB_ENOMEM, NULL, "out of memory");
        return 0;
    }
    for (int i = 0; i < n_payload; i++) {
        zmq_msg_init(&j->frames[i]);
        zmq_msg_move(&j->frames[i], &payload[i]);
    }
    j->n_frames = n_payload;
    j->cb = c->cb;
    j->reg = bk_registry_ref(c->reg);
    b->inflight++;
    bk_queue_push(&b->writes, j);
    return 1;
}

static int on_put_states(scdb_broker *b, const rq *q, bk_client *c, Scdb__Request *req)
{
    const Scdb__PutStatesRequest *p = req->put_states;
    bk_arena *a;

    if (c->role != SCDB__ROLE__PRODUCER) {
        reply(b, q, SCDB_EINVAL, NULL, "only producers put (this client is a %s)",
              role_name(c->role));
        return 0;
    }
    if (!c->cb->encode) {
        reply(b, q, SCDB_EUNSUPPORTED, NULL,
              "codebook %s (kind %s) is not encoded by the broker: put payloads", c->cb->name,
              c->cb->kind);
        return 0;
    }
    if (bad_tokens(b, q, c->model, p->tokens, p->n_tokens)) return 0;
    if (beyond_context(b, q, c->model, p->n_tokens)) return 0;
    a = bk_arena_find(c, p->arena);
    if (!a || a->kind != BK_ARENA_STATES) {
        reply(b, q, SCDB_ENOTFOUND, NULL, "no states arena %llu for this client",
              (unsigned long long)p->arena);
        return 0;
    }
    if (p->n_tokens > a->capacity) {
        reply(b, q, SCDB_ERANGE, NULL, "%zu tokens but states arena %llu holds %u", p->n_tokens,
              (unsigned long long)a->id, a->capacity);
        return 0;
    }
    if (a->busy) {
        reply(b, q, SCDB_EBUSY, NULL, "states arena %llu is being encoded",
              (unsigned long long)a->id);
        return 0;
    }
    if (bad_block_range(b, q, p->n_tokens, p->first_block, p->n_blocks)) return 0;
    return queue_arena_job(b, q, req, OP_PUT_STATES, c, a, &b->writes);
}

static int on_delete(scdb_broker *b, const rq *q, bk_client *c, Scdb__Request *req)
{
    bk_job *j;

    if (c->role != SCDB__ROLE__PRODUCER) {
        reply(b, q, SCDB_EINVAL, NULL, "only producers delete (this client is a %s)",
              role_name(c->role));
        return 0;
    }
    if (bad_tokens(b, q, c->model, req->del->tokens, req->del->n_tokens)) return 0;
    j = bk_job_new(q->sock, q->ident, q->id, q->t0, req, OP_DELETE);
    if (!j) {
        reply(b, q, SCDB_ENOMEM, NULL, "out of memory");
        return 0;
    }
    j->cb = c->cb;
    j->reg = bk_registry_ref(c->reg);
    b->inflight++;
    bk_queue_push(&b->writes, j);
    return 1;
}

static int on_get(scdb_broker *b, const rq *q, bk_client *c, Scdb__Request *req)
{
    const Scdb__GetRequest *g = req->get;
    bk_arena *a;

    if (!c->pair) {
        reply(b, q, SCDB_EINVAL, NULL, "no decoder for codebook %s into model %s", c->cb->name,
              c->model->name);
        return 0;
    }
    a = bk_arena_find(c, g->arena);
    if (!a || a->kind != BK_ARENA_KV) {
        reply(b, q, SCDB_ENOTFOUND, NULL, "no arena %llu for this client",
              (unsigned long long)g->arena);
        return 0;
    }
    if (a->busy) {
        reply(b, q, SCDB_EBUSY, NULL, "arena %llu has a get in progress",
              (unsigned long long)a->id);
        return 0;
    }
    if (bad_tokens(b, q, c->model, g->tokens, g->n_tokens)) return 0;
    /* geometry from the broker's private view: the client can write the
     * header in shared memory */
    if (g->slot0 > (uint32_t)a->cache->capacity) {
        reply(b, q, SCDB_ERANGE, NULL, "slot0 %u is past the arena's %d slots", g->slot0,
              a->cache->capacity);
        return 0;
    }
    if (a->session) {
        uint32_t n = __atomic_load_n(&a->hdr->n, __ATOMIC_ACQUIRE);
        if (g->slot0 != n) {
            reply(b, q, SCDB_EINVAL, NULL,
                  "arena %llu has a live session: a get may only append at slot %u (slot0 %u "
                  "would %s)", (unsigned long long)a->id, n, g->slot0,
                  g->slot0 < n ? "overwrite slots whose statistics it holds"
                               : "leave a gap of stale slots");
            return 0;
        }
    }
    if (g->pos0 < 0 || (int64_t)g->pos0 + (int64_t)g->n_tokens > INT32_MAX) {
        reply(b, q, SCDB_ERANGE, NULL, "positions from pos0 %d out of range", (int)g->pos0);
        return 0;
    }
    return queue_arena_job(b, q, req, OP_GET, c, a, &b->jobs);
}

/* ---------------------------------------------------------------- arenas */

static void on_arena_create(scdb_broker *b, const rq *q, bk_client *c,
                            const Scdb__ArenaCreate *ac)
{
    const scdb_broker_model *m = c->model;
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__ArenaCreateReply ar = SCDB__ARENA_CREATE_REPLY__INIT;
    Scdb__ModelShape shape = SCDB__MODEL_SHAPE__INIT;
    char err[256] = "";
    bk_arena *a;
    scdb_err e;

    if (ac->shape && (ac->shape->n_layers != (uint32_t)m->n_layers ||
                      ac->shape->n_kv_heads != (uint32_t)m->n_kv_heads ||
                      ac->shape->head_dim != (uint32_t)m->head_dim)) {
        reply(b, q, SCDB_ESHAPE, NULL,
              "arena shape %u layers x %u kv heads x %u does not match model %s "
              "(%d x %d x %d)",
              ac->shape->n_layers, ac->shape->n_kv_heads, ac->shape->head_dim, m->name,
              m->n_layers, m->n_kv_heads, m->head_dim);
        return;
    }
    if (ac->cuda && ac->kind != SCDB__ARENA_KIND__ARENA_KV) {
        reply(b, q, SCDB_EINVAL, NULL, "only KV arenas can live in CUDA device memory");
        return;
    }
    if (ac->cuda) {
        e = bk_cuda_arena_create(b, c, ac->capacity, &a, err, sizeof err);
    } else if (ac->kind == SCDB__ARENA_KIND__ARENA_STATES) {
        if (c->role != SCDB__ROLE__PRODUCER || !c->cb->encode) {
            reply(b, q, SCDB_EUNSUPPORTED, NULL,
                  "states arenas are for producers of a codebook the broker encodes "
                  "(codebook %s, kind %s, this client a %s): put payloads instead",
                  c->cb->name, c->cb->kind, role_name(c->role));
            return;
        }
        e = bk_states_arena_create(b, c, ac->capacity, &a, err, sizeof err);
    } else if (ac->kind == SCDB__ARENA_KIND__ARENA_KV) {
        e = bk_arena_create(b, c, ac->capacity, &a, err, sizeof err);
    } else {
        reply(b, q, SCDB_EINVAL, NULL, "unknown arena kind %d", (int)ac->kind);
        return;
    }
    if (e) {
        reply(b, q, e, NULL, "%s", err);
        return;
    }
    fill_shape(&shape, m);
    ar.arena = a->id;
    ar.shm_name = (char *)"";
    ar.fd_ticket.data = a->ticket;
    ar.fd_ticket.len = sizeof a->ticket;
    ar.size = a->size;
    ar.cache_offset = SCDB_ARENA_HEADER_BYTES;
    ar.cache_bytes = a->size - SCDB_ARENA_HEADER_BYTES;
    ar.shape = &shape;
    ar.capacity = a->capacity;
    ar.kind = a->kind == BK_ARENA_STATES ? SCDB__ARENA_KIND__ARENA_STATES
                                         : SCDB__ARENA_KIND__ARENA_KV;
    if (a->kind == BK_ARENA_STATES) {
        ar.states_layers = (uint32_t)c->cb->states_layers;
        ar.states_dim = (uint32_t)c->cb->states_dim;
    }
    if (a->dev) {
        /* the handle opens the arena's device memory: it goes in this reply
         * only, to the client that owns the arena, and in no other message */
        ar.cuda = 1;
        ar.cache_offset = 0;
        ar.cache_bytes = a->dev_bytes;
        ar.cuda_ipc_handle.data = a->ipc_handle;
        ar.cuda_ipc_handle.len = sizeof a->ipc_handle;
        ar.cuda_device = b->cuda_ordinal;
        ar.cuda_pci_bus_id = a->pci_bus_id;
    }
    r.body_case = SCDB__REPLY__BODY_ARENA;
    r.arena = &ar;
    if (reply(b, q, SCDB_OK, &r, NULL)) bk_client_free_arena(b, c, a);   /* never named */
}

static void on_arena_mapped(scdb_broker *b, const rq *q, bk_client *c, uint64_t id, int free_it)
{
    bk_arena *a = bk_arena_find(c, id);

    if (!a) {
        reply(b, q, SCDB_ENOTFOUND, NULL, "no arena %llu for this client",
              (unsigned long long)id);
        return;
    }
    if (free_it && a->kind == BK_ARENA_SESSION) {
        reply(b, q, SCDB_EBUSY, NULL,
              "arena %llu holds a live session's statistics: close the session instead",
              (unsigned long long)id);
        return;
    }
    if (free_it)
        bk_client_free_arena(b, c, a);   /* a job using it keeps its own reference */
    else
        bk_arena_unlink(b, a);
    reply(b, q, SCDB_OK, NULL, NULL);
}

/* ---------------------------------------------------------------- sessions */

static void on_session_open(scdb_broker *b, const rq *q, bk_client *c,
                            const Scdb__SessionOpen *so)
{
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__SessionOpenReply sr = SCDB__SESSION_OPEN_REPLY__INIT;
    char msg[512] = "";
    scdb_err e = SCDB_OK;

    bk_on_session_open(b, c, so, &r, &sr, &e, msg, sizeof msg);
    if (e)
        reply(b, q, e, NULL, "%s", msg);
    else if (reply(b, q, SCDB_OK, &r, NULL))
        bk_session_close_id(b, c, sr.session, 0, msg, sizeof msg);   /* never named */
}

static int on_session_evict(scdb_broker *b, const rq *q, bk_client *c, Scdb__Request *req)
{
    char msg[512] = "";
    bk_job *j = bk_job_new(q->sock, q->ident, q->id, q->t0, req, OP_SESSION_EVICT);
    scdb_err e;

    if (!j) {
        reply(b, q, SCDB_ENOMEM, NULL, "out of memory");
        return 0;
    }
    e = bk_session_evict_prepare(b, c, req->session_evict, j, msg, sizeof msg);
    if (e) {
        j->req = NULL;
        bk_job_free(j);
        reply(b, q, e, NULL, "%s", msg);
        return 0;
    }
    b->inflight++;
    bk_queue_push(&b->jobs, j);
    return 1;
}

/* ---------------------------------------------------------------- stats */

static void on_stats(scdb_broker *b, const rq *q)
{
    Scdb__Reply r = SCDB__REPLY__INIT;
    Scdb__StatsReply s = SCDB__STATS_REPLY__INIT;
    Scdb__OpStats ops[OP_COUNT], *opp[OP_COUNT];
    scdb_store_stat st = {0};
    size_t n_ops = 0;

    if (scdb_store_stats(b->store, &st) == SCDB_OK) {
        s.blocks = st.blocks;
        s.disk_bytes = st.disk_bytes;
        s.disk_capacity_bytes = st.disk_capacity_bytes;
        s.hot_blocks = st.hot_blocks;
        s.hot_bytes = st.hot_bytes;
        s.hot_capacity_bytes = st.hot_capacity_bytes;
        s.pinned_blocks = st.pinned_blocks;
        s.lookups = st.lookups;
        s.lookup_hit_blocks = st.lookup_hit_blocks;
        s.lookup_miss_blocks = st.lookup_miss_blocks;
        s.gets = st.gets;
        s.get_hot_hits = st.get_hot_hits;
        s.get_disk_hits = st.get_disk_hits;
        s.get_misses = st.get_misses;
        s.puts = st.puts;
        s.put_existing = st.put_existing;
        s.evictions = st.evictions;
        s.checksum_failures = st.checksum_failures;
    }
    bk_remote_fill_stats(b, &s);
    s.clients = b->n_clients;
    s.arenas = b->n_arenas;
    s.arena_bytes = b->arena_bytes;
    s.sessions = b->n_sessions;
    s.inflight = (uint64_t)b->inflight;
    s.requests = b->requests;
    s.errors = b->errors;
    s.reclaimed_clients = b->reclaimed_clients;
    s.reclaimed_arenas = b->reclaimed_arenas;
    s.reclaimed_sessions = b->reclaimed_sessions;
    s.uptime_s = scdb_now() - b->t_start;
    s.workers = (uint32_t)b->n_workers;
    s.block_tokens = b->block_tokens;
    s.broker_instance = b->instance;
    s.stale_tokens = b->stale_tokens;
    s.reloads = b->reloads;
    s.reload_failures = b->reload_failures;
    s.registry_generation = b->reg->generation;
    s.index_lookups = b->index_lookups;
    s.hot_evictions = st.hot_evictions;
    for (int i = 1; i < OP_COUNT; i++) {
        if (!b->ops[i].count) continue;
        scdb__op_stats__init(&ops[n_ops]);
        ops[n_ops].op = (char *)bk_op_names[i];
        ops[n_ops].count = b->ops[i].count;
        ops[n_ops].errors = b->ops[i].errors;
        ops[n_ops].total_ns = b->ops[i].total_ns;
        ops[n_ops].max_ns = b->ops[i].max_ns;
        opp[n_ops] = &ops[n_ops];
        n_ops++;
    }
    s.n_ops = n_ops;
    s.ops = opp;
    r.body_case = SCDB__REPLY__BODY_STATS;
    r.stats = &s;
    reply(b, q, SCDB_OK, &r, NULL);
}

/* ---------------------------------------------------------------- entry */

void bk_handle(scdb_broker *b, int sock, zmq_msg_t *frames, int n_frames, int too_big,
               uint64_t total_bytes)
{
    rq q = {.sock = sock, .ident = &frames[0], .id = 0, .op = OP_INVALID,
            .t0 = scdb_now_ns()};
    Scdb__Request *req = NULL;
    bk_client *c = NULL;
    int n_payload = n_frames - 2, owned = 0;
    uint32_t expect;

    b->requests++;
    if (n_frames < 2 || zmq_msg_size(&frames[1]) == 0) {
        reply(b, &q, SCDB_EPROTO, NULL, "empty request frame (expected a scdb.Request)");
        return;
    }
    req = scdb__request__unpack(NULL, zmq_msg_size(&frames[1]), zmq_msg_data(&frames[1]));
    if (!req) {
        reply(b, &q, SCDB_EPROTO, NULL,
              "malformed request: %zu bytes are not a scdb.Request protobuf",
              zmq_msg_size(&frames[1]));
        return;
    }
    q.id = req->id;
    q.op = op_of(req->body_case);
    if (req->version != SCDB_PROTO_VERSION) {
        reply(b, &q, SCDB_EPROTO, NULL,
              "protocol version %u is not supported: this broker speaks version %u",
              req->version, SCDB_PROTO_VERSION);
        goto done;
    }
    if (too_big) {
        reply(b, &q, SCDB_ETOOBIG, NULL,
              "request of %llu bytes in %d+ frames exceeds max_request_bytes %llu",
              (unsigned long long)total_bytes, n_frames, (unsigned long long)b->cfg.max_request_bytes);
        goto done;
    }
    if (q.op == OP_INVALID) {
        reply(b, &q, SCDB_EPROTO, NULL, "request has no (known) body");
        goto done;
    }
    expect = q.op == OP_PUT ? req->put->n_blocks : 0;
    if ((uint32_t)n_payload != expect) {
        reply(b, &q, SCDB_EPROTO, NULL, "a %s request takes %u payload frame(s), got %d",
              bk_op_names[q.op], expect, n_payload);
        goto done;
    }
    if (b->draining) {
        reply(b, &q, SCDB_ECLOSED, NULL, "broker is shutting down");
        goto done;
    }
    if (q.op == OP_HELLO) {
        on_hello(b, &q, req);
        goto done;
    }
    c = bk_client_find(b, req->client);
    if (!c && req->client == 0 && q.op != OP_PING && q.op != OP_STATS) {
        reply(b, &q, SCDB_EPROTO, NULL, "no client token: send hello first");
        goto done;
    }
    if (!c && req->client != 0) {
        q.stale = 1;
        reply(b, &q, SCDB_ECLOSED, NULL,
              "unknown client token (broker restarted or client reclaimed): say hello again");
        goto done;
    }
    if (c) c->last_seen = scdb_now();   /* ping and stats may come anonymously */
    if ((q.op == OP_PUT || q.op == OP_GET || q.op == OP_DELETE || q.op == OP_SESSION_EVICT ||
         q.op == OP_PUT_STATES) &&
        b->inflight >= b->cfg.max_inflight) {
        reply(b, &q, SCDB_EBUSY, NULL, "broker busy: %d requests in flight (max_inflight)",
              b->inflight);
        goto done;
    }
    if ((q.op == OP_PUT || q.op == OP_GET || q.op == OP_DELETE || q.op == OP_SESSION_EVICT ||
         q.op == OP_PUT_STATES) &&
        c && c->inflight >= b->cfg.max_inflight_per_client) {
        reply(b, &q, SCDB_EBUSY, NULL,
              "this client has %d requests in flight (max_inflight_per_client): read the "
              "replies first", c->inflight);
        goto done;
    }
    switch (q.op) {
    case OP_PING: {
        Scdb__Reply r = SCDB__REPLY__INIT;
        Scdb__PingReply pr = SCDB__PING_REPLY__INIT;
        pr.t_ns = req->ping->t_ns;
        pr.broker_instance = b->instance;
        r.body_case = SCDB__REPLY__BODY_PING;
        r.ping = &pr;
        reply(b, &q, SCDB_OK, &r, NULL);
        break;
    }
    case OP_HEARTBEAT:
        if (req->heartbeat->lookups)
            bk_metrics_client_report(b, c, req->heartbeat->lookups->index_lookups,
                                     req->heartbeat->lookups->index_fallbacks);
        reply(b, &q, SCDB_OK, NULL, NULL);
        break;
    case OP_LOOKUP: owned = on_lookup(b, &q, c, req); break;
    case OP_PUT: owned = on_put(b, &q, c, req, frames + 2, n_payload); break;
    case OP_DELETE: owned = on_delete(b, &q, c, req); break;
    case OP_PUT_STATES: owned = on_put_states(b, &q, c, req); break;
    case OP_GET: owned = on_get(b, &q, c, req); break;
    case OP_STATS: on_stats(b, &q); break;
    case OP_ARENA_CREATE: on_arena_create(b, &q, c, req->arena_create); break;
    case OP_ARENA_MAPPED: on_arena_mapped(b, &q, c, req->arena_mapped->arena, 0); break;
    case OP_ARENA_FREE: on_arena_mapped(b, &q, c, req->arena_free->arena, 1); break;
    case OP_GOODBYE:
        if (req->goodbye->lookups)
            bk_metrics_client_report(b, c, req->goodbye->lookups->index_lookups,
                                     req->goodbye->lookups->index_fallbacks);
        bk_client_drop(b, c, "said goodbye");
        reply(b, &q, SCDB_OK, NULL, NULL);
        break;
    case OP_SESSION_OPEN: on_session_open(b, &q, c, req->session_open); break;
    case OP_SESSION_EVICT: owned = on_session_evict(b, &q, c, req); break;
    case OP_SESSION_CLOSE: {
        char msg[256] = "";
        scdb_err e = bk_session_close_id(b, c, req->session_close->session,
                                         req->session_close->arena, msg, sizeof msg);
        reply(b, &q, e, NULL, "%s", msg);
        break;
    }
    default: reply(b, &q, SCDB_EPROTO, NULL, "unexpected request"); break;
    }
done:
    if (owned && c) c->inflight++;     /* its job's; bk_job_done gives it back */
    if (!owned) scdb__request__free_unpacked(req, NULL);
}
