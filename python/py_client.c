/* py_client.c — scdb.Client: the connection (scdb *), one call at a time
 * (the busy flag), registration, lookup, put, put_states, get, delete,
 * stats; and the deferred frees of arenas and sessions collected while
 * another thread was in a call (scdb_py.h). */
#include "scdb_py.h"

#include <string.h>

/* ------------------------------------------------------------ call guard */

/* Free one deferred handle; c is busy (ours) meanwhile.  The GIL is let go
 * (the free is a round trip) except while the interpreter shuts down. */
static void free_now(int is_session, void *ptr)
{
    PyThreadState *ts = py_finalizing() ? NULL : PyEval_SaveThread();
    if (is_session) {
        scdb_session *s = ptr;
        scdb_session_close(&s);
    } else {
        scdb_arena *a = ptr;
        scdb_arena_free(&a);
    }
    if (ts) PyEval_RestoreThread(ts);
}

static void run_pending(py_client *c)
{
    while (c->n_pending && c->h) {
        py_pending p = c->pending[0];
        memmove(c->pending, c->pending + 1, --c->n_pending * sizeof *c->pending);
        free_now(p.is_session, p.ptr);
    }
}

int py_client_enter(py_client *c)
{
    if (!c->h) {
        py_err(SCDB_ECLOSED, "this scdb.Client is closed");
        return -1;
    }
    if (c->busy) {
        py_err(SCDB_EBUSY, "this scdb.Client is in a call on another thread: a Client (with "
               "its arenas and sessions) serves one call at a time; use one per thread or "
               "a lock");
        return -1;
    }
    c->busy = 1;
    if (c->n_pending) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        run_pending(c);
        PyErr_Restore(t, v, tb);
    }
    return 0;
}

void py_client_leave(py_client *c)
{
    if (c->n_pending) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        run_pending(c);
        PyErr_Restore(t, v, tb);
    }
    c->busy = 0;
}

void py_client_defer(py_client *c, int is_session, void *ptr)
{
    if (!c->h || !ptr) return;                /* scdb_close freed it already */
    if (!c->busy) {
        c->busy = 1;                  /* no other thread's call meanwhile */
        free_now(is_session, ptr);
        c->busy = 0;
        return;
    }
    if (c->n_pending == c->cap_pending) {
        size_t cap = c->cap_pending ? 2 * c->cap_pending : 8;
        py_pending *p = PyMem_Realloc(c->pending, cap * sizeof *p);
        if (!p) return;     /* out of memory: leaked until scdb_close frees it */
        c->pending = p;
        c->cap_pending = cap;
    }
    c->pending[c->n_pending].is_session = is_session;
    c->pending[c->n_pending].ptr = ptr;
    c->n_pending++;
}

/* ------------------------------------------------------------ lifecycle */

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    py_client *c = (py_client *)type->tp_alloc(type, 0);
    return (PyObject *)c;
}

static int client_init(py_client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"endpoint", "timeout_ms", "name", "heartbeat", "lookup_index",
                             "curve_server_key", "curve_public_key", "curve_secret_key", NULL};
    const char *endpoint = NULL, *name = NULL, *sk = NULL, *pk = NULL, *sec = NULL;
    int timeout_ms = 5000, heartbeat = 1, lookup_index = 1;
    PyObject *to = NULL;
    long long ms = 5000;
    scdb_opts o = {0};
    scdb_err e;
    scdb *h = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zO$zppzzz:Client", kwlist, &endpoint,
                                     &to, &name, &heartbeat, &lookup_index, &sk, &pk,
                                     &sec))
        return -1;
    if (self->h || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "scdb.Client.__init__ called twice");
        return -1;
    }
    if (to && py_int_arg(to, "timeout_ms", 1, INT32_MAX, SCDB_EINVAL, &ms)) return -1;
    timeout_ms = (int)ms;
    if (endpoint && !*endpoint) endpoint = NULL;      /* "" is the default too */
    o.endpoint = endpoint;
    o.timeout_ms = timeout_ms;
    o.name = name;
    o.no_heartbeat = !heartbeat;
    o.no_lookup_index = !lookup_index;
    o.curve_server_key = sk;
    o.curve_public_key = pk;
    o.curve_secret_key = sec;
    snprintf(self->endpoint, sizeof self->endpoint, "%s",
             endpoint ? endpoint : (getenv("SCDB_ENDPOINT") ? getenv("SCDB_ENDPOINT")
                                                             : "(the default endpoint)"));
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    e = scdb_connect(&o, &h);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (e) {   /* libscdb's connect-time message (this thread's) */
        py_err(e, "cannot connect to %s: %s", self->endpoint, scdb_connect_error());
        return -1;
    }
    self->h = h;
    self->timeout_ms = timeout_ms;
    return 0;
}

static void client_close_handle(py_client *c)
{
    scdb *h = c->h;
    c->h = NULL;                   /* arenas and sessions see it closed now */
    c->registered = 0;
    c->n_pending = 0;              /* scdb_close frees every arena          */
    Py_BEGIN_ALLOW_THREADS
    scdb_close(&h);
    Py_END_ALLOW_THREADS
}

static void client_dealloc(py_client *self)
{
    if (self->h) {
        scdb *h = self->h;
        self->h = NULL;
        scdb_close(&h);
    }
    PyMem_Free(self->pending);
    Py_CLEAR(self->last_recompute);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(py_client *self, PyObject *unused)
{
    if (!self->h) Py_RETURN_NONE;
    if (self->busy)
        return py_err(SCDB_EBUSY, "cannot close this scdb.Client: a call is in progress on "
                      "another thread");
    self->busy = 1;
    client_close_handle(self);
    self->busy = 0;
    Py_RETURN_NONE;
}

static PyObject *client_enter_ctx(py_client *self, PyObject *unused)
{
    if (!self->h) return py_err(SCDB_ECLOSED, "this scdb.Client is closed");
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *client_exit_ctx(py_client *self, PyObject *args)
{
    PyObject *r = client_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* ------------------------------------------------------------ helpers */

static const char *dtype_name(uint32_t d)
{
    static const char *n[] = {"F32", "F16", "BF16", "I32"};
    return d < 4 ? n[d] : "?";
}

static PyObject *info_dict(py_client *c)
{
    const scdb_info *i = scdb_get_info(c->h);
    return Py_BuildValue(
        "{s:s,s:s,s:s,s:I,s:K,s:s,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:i,s:i,s:I,s:K,s:I,s:I,s:K}",
        "role", c->role, "model", c->model, "codebook", c->codebook,
        "block_tokens", i->block_tokens, "block_bytes", (unsigned long long)i->block_bytes,
        "payload_dtype", dtype_name(i->payload_dtype), "n_layers", i->n_layers,
        "n_kv_heads", i->n_kv_heads, "head_dim", i->head_dim,
        "kv_dim", i->n_kv_heads * i->head_dim, "max_seq_len", i->max_seq_len,
        "decoder", i->decoder, "codebook_kind", i->codebook_kind,
        "states_layers", i->states_layers, "states_dim", i->states_dim,
        "max_tokens", i->max_tokens, "max_request_bytes", (unsigned long long)i->max_request_bytes,
        "heartbeat_ms", i->heartbeat_ms, "heartbeat_timeout_ms", i->heartbeat_timeout_ms,
        "broker_instance", (unsigned long long)i->broker_instance);
}

static PyObject *put_dict(const scdb_put_result *r)
{
    return Py_BuildValue("{s:I,s:I,s:I,s:I}", "n_full", r->n_full, "n_stored", r->n_stored,
                         "n_new", r->n_new, "n_replaced", r->n_replaced);
}

/* ------------------------------------------------------------ methods */

static PyObject *client_register(py_client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"model", "role", "codebook", "weights_fp", "model_dir", NULL};
    const char *model, *role = "consumer", *codebook = NULL, *fp = NULL, *dir = NULL;
    scdb_role r;
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|sz$zz:register", kwlist, &model, &role, &codebook,
                                     &fp, &dir))
        return NULL;
    if (!strcmp(role, "producer")) r = SCDB_PRODUCER;
    else if (!strcmp(role, "consumer")) r = SCDB_CONSUMER;
    else return py_err(SCDB_EINVAL, "role must be 'producer' or 'consumer', not '%s'", role);
    if (fp && dir) return py_err(SCDB_EINVAL, "give weights_fp or model_dir, not both");
    if (py_client_enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    /* the weights this consumer runs (none given: none checked) */
    e = dir ? scdb_set_weights_dir(self->h, dir) : scdb_set_weights_fp(self->h, fp);
    if (!e) e = scdb_register(self->h, r, model, codebook, NULL);
    Py_END_ALLOW_THREADS
    if (e) {
        py_err_handle(self->h, e);
        self->registered = 0;
        py_client_leave(self);
        return NULL;
    }
    self->registered = 1;
    snprintf(self->role, sizeof self->role, "%s", role);
    snprintf(self->model, sizeof self->model, "%s", model);
    snprintf(self->codebook, sizeof self->codebook, "%s",
             codebook && *codebook ? codebook : "");
    if (!self->codebook[0]) snprintf(self->codebook, sizeof self->codebook, "raw/%.100s", model);
    PyObject *d = info_dict(self);
    py_client_leave(self);
    return d;
}

static PyObject *client_ping(py_client *self, PyObject *unused)
{
    double us = 0;
    scdb_err e;
    if (py_client_enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    e = scdb_ping(self->h, &us);
    Py_END_ALLOW_THREADS
    if (e) py_err_handle(self->h, e);
    py_client_leave(self);
    return e ? NULL : PyFloat_FromDouble(us);
}

static PyObject *client_lookup(py_client *self, PyObject *tokens)
{
    py_tokens t;
    scdb_lookup_result r;
    scdb_err e;

    if (py_client_enter(self)) return NULL;
    if (py_tokens_get(tokens, &t)) {
        py_tokens_release(&t);
        py_client_leave(self);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    e = scdb_lookup(self->h, t.data, t.n, &r);
    Py_END_ALLOW_THREADS
    py_tokens_release(&t);
    if (e) py_err_handle(self->h, e);
    py_client_leave(self);
    return e ? NULL : PyLong_FromUnsignedLong(r.matched_tokens);
}

/* payloads: one C-contiguous buffer of whole blocks back to back (bytes,
 * uint8, or float16/float32 matching the codebook's payload dtype), or a
 * list/tuple of such buffers (joined: one copy). */
static int payload_get(py_client *c, PyObject *o, Py_buffer *v, PyObject **joined)
{
    const scdb_info *i = scdb_get_info(c->h);
    char code;

    *joined = NULL;
    if ((PyList_Check(o) || PyTuple_Check(o))) {
        PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
        if (!empty) return -1;
        *joined = PyObject_CallMethod(empty, "join", "O", o);
        Py_DECREF(empty);
        if (!*joined) {
            PyErr_Clear();
            py_err(SCDB_EDTYPE, "payloads: a list must hold bytes-like blocks");
            return -1;
        }
        o = *joined;
    }
    if (!PyObject_CheckBuffer(o)) {
        py_err(SCDB_EDTYPE, "payloads must be bytes-like (bytes, a NumPy array), not %s",
               Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(o, v, PyBUF_RECORDS_RO) < 0) return -1;
    if (!PyBuffer_IsContiguous(v, 'C')) {
        PyBuffer_Release(v);
        py_err(SCDB_ESHAPE, "payloads must be C-contiguous");
        return -1;
    }
    code = v->format ? v->format[strlen(v->format) - 1] : 'B';
    if (!(code == 'B' || code == 'b' || code == 'c') &&
        !(code == 'e' && i->payload_dtype == 1) && !(code == 'f' && i->payload_dtype == 0)) {
        py_err(SCDB_EDTYPE, "payloads of codebook %s are %s blocks; got buffer format '%s' "
               "(pass bytes, uint8, or %s)", c->codebook, dtype_name(i->payload_dtype),
               v->format, i->payload_dtype == 1 ? "float16" : "float32");
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static PyObject *client_put(py_client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tokens", "payloads", "first_block", "replace", NULL};
    PyObject *tok, *pay, *joined = NULL, *out = NULL;
    PyObject *fb = NULL;
    unsigned int first_block = 0;
    int replace = 0;
    py_tokens t = {0};
    Py_buffer v;
    int have_v = 0;
    scdb_put_result r = {0};
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Op:put", kwlist, &tok, &pay, &fb, &replace))
        return NULL;
    if (fb && py_u32_arg(fb, "first_block", &first_block)) return NULL;
    if (py_client_enter(self)) return NULL;
    if (!self->registered) {
        py_err(SCDB_EINVAL, "not registered (Client.register first)");
        goto done;
    }
    if (py_tokens_get(tok, &t) || payload_get(self, pay, &v, &joined)) goto done;
    have_v = 1;
    Py_BEGIN_ALLOW_THREADS
    e = replace ? scdb_replace(self->h, t.data, t.n, first_block, v.buf, (size_t)v.len, &r)
                : scdb_put(self->h, t.data, t.n, first_block, v.buf, (size_t)v.len, &r);
    Py_END_ALLOW_THREADS
    if (e) py_err_handle(self->h, e);
    else out = put_dict(&r);
done:
    if (have_v) PyBuffer_Release(&v);
    Py_XDECREF(joined);
    py_tokens_release(&t);
    py_client_leave(self);
    return out;
}

static PyObject *client_put_states(py_client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tokens", "states", "first_block", "replace", NULL};
    PyObject *tok, *out = NULL;
    py_arena *sa;
    PyObject *fb = NULL;
    unsigned int first_block = 0;
    int replace = 0;
    py_tokens t = {0};
    scdb_put_result r = {0};
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!|Op:put_states", kwlist, &tok,
                                     &py_states_arena_type, &sa, &fb, &replace))
        return NULL;
    if (fb && py_u32_arg(fb, "first_block", &first_block)) return NULL;
    if (sa->client != self) return py_err(SCDB_EINVAL, "that StatesArena belongs to another Client");
    if (py_arena_check(sa)) return NULL;
    if (py_client_enter(self)) return NULL;
    if (py_tokens_get(tok, &t)) goto done;
    Py_BEGIN_ALLOW_THREADS
    e = replace ? scdb_replace_states(self->h, t.data, t.n, first_block, sa->a, &r)
                : scdb_put_states(self->h, t.data, t.n, first_block, sa->a, &r);
    Py_END_ALLOW_THREADS
    if (e) py_err_handle(self->h, e);
    else out = put_dict(&r);
done:
    py_tokens_release(&t);
    py_client_leave(self);
    return out;
}

static PyObject *new_arena(py_client *self, PyObject *args, PyObject *kw, int states)
{
    static char *kwlist[] = {"capacity", NULL};
    int capacity = 0;
    scdb_arena *a = NULL;
    scdb_err e;
    PyObject *o;

    if (!PyArg_ParseTupleAndKeywords(args, kw, states ? "|i:states_arena" : "|i:arena", kwlist,
                                     &capacity))
        return NULL;
    if (capacity < 0) return py_err(SCDB_EINVAL, "capacity must be >= 0, got %d", capacity);
    if (py_client_enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    e = states ? scdb_states_arena_new(self->h, capacity, &a)
               : scdb_arena_new(self->h, capacity, &a);
    Py_END_ALLOW_THREADS
    if (e) {
        py_err_handle(self->h, e);
        py_client_leave(self);
        return NULL;
    }
    o = py_arena_wrap(self, a, states);       /* frees a on failure */
    py_client_leave(self);
    return o;
}

static PyObject *client_arena(py_client *self, PyObject *args, PyObject *kw)
{
    return new_arena(self, args, kw, 0);
}

static PyObject *client_states_arena(py_client *self, PyObject *args, PyObject *kw)
{
    return new_arena(self, args, kw, 1);
}

/* recompute= of get: the recompute.h text form ("tail:32", "default",
 * ...): scdb_get_recompute, its positions and tokens in last_recompute.
 * selective needs a scorer over the restored KV, which a Python engine
 * runs itself: refused here (get without recompute, score, then forward). */
static PyObject *get_recompute(py_client *self, const py_tokens *t, py_arena *a, int slot0, int pos0,
                               const char *setting)
{
    scdb_get_recompute_opts o;
    scdb_get_recompute_result r = {.size = sizeof r};
    char why[200] = "", name[48];
    PyObject *out = NULL, *pos = NULL, *tok = NULL;
    scdb_err e;

    scdb_get_recompute_init(&o);
    if (scdb_recompute_parse(setting, &o.recompute, why, sizeof why))
        return py_err(SCDB_EINVAL, "%s", why);
    if (o.recompute.policy == SCDB_RECOMPUTE_SELECTIVE)
        return py_err(SCDB_EINVAL, "recompute '%s': selective needs a scorer over the restored KV; "
                      "get without recompute, score the arena, then forward the tokens you choose",
                      setting);
    Py_BEGIN_ALLOW_THREADS
    e = scdb_get_recompute(self->h, t->data, t->n, a->a, slot0, pos0, &o, &r);
    Py_END_ALLOW_THREADS
    self->last_get = r.get;
    self->have_last_get = 1;
    if (e) return py_err_handle(self->h, e);
    if (!(pos = PyList_New(r.n_recompute)) || !(tok = PyList_New(r.n_recompute))) goto done;
    for (uint32_t i = 0; i < r.n_recompute; i++) {
        PyList_SET_ITEM(pos, i, PyLong_FromLong(r.pos[i]));
        PyList_SET_ITEM(tok, i, PyLong_FromLong(r.tokens[i]));
    }
    scdb_recompute_format(&r.applied, name, sizeof name);
    Py_CLEAR(self->last_recompute);
    self->last_recompute = Py_BuildValue("{s:s,s:O,s:O,s:O,s:i}", "setting", name, "from_default",
                                         r.from_default ? Py_True : Py_False, "positions", pos,
                                         "tokens", tok, "next_pos", (int)r.next_pos);
    if (self->last_recompute) out = PyLong_FromUnsignedLong(r.get.tokens_written);
done:
    Py_XDECREF(pos);
    Py_XDECREF(tok);
    return out;
}

static PyObject *client_get(py_client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tokens", "arena", "slot0", "pos0", "recompute", NULL};
    PyObject *tok, *out = NULL;
    py_arena *a;
    int slot0 = 0, pos0 = 0;
    const char *recompute = NULL;
    py_tokens t = {0};
    scdb_get_result r = {0};
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!|iiz:get", kwlist, &tok, &py_arena_type, &a,
                                     &slot0, &pos0, &recompute))
        return NULL;
    if (a->client != self) return py_err(SCDB_EINVAL, "that Arena belongs to another Client");
    if (py_arena_check(a)) return NULL;
    if (slot0 < 0 || pos0 < 0)
        return py_err(SCDB_ERANGE, "slot0 and pos0 must be >= 0 (got %d, %d)", slot0, pos0);
    if (py_client_enter(self)) return NULL;
    if (py_tokens_get(tok, &t)) goto done;
    if (recompute) {
        out = get_recompute(self, &t, a, slot0, pos0, recompute);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    e = scdb_get(self->h, t.data, t.n, a->a, slot0, pos0, &r);
    Py_END_ALLOW_THREADS
    self->last_get = r;
    self->have_last_get = 1;
    if (e) py_err_handle(self->h, e);
    else out = PyLong_FromUnsignedLong(r.tokens_written);
done:
    py_tokens_release(&t);
    py_client_leave(self);
    return out;
}

static PyObject *client_delete(py_client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tokens", "from_block", NULL};
    PyObject *tok, *out = NULL;
    PyObject *fb = NULL;
    unsigned int from_block = 0;
    uint32_t n = 0;
    py_tokens t = {0};
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:delete", kwlist, &tok, &fb)) return NULL;
    if (fb && py_u32_arg(fb, "from_block", &from_block)) return NULL;
    if (py_client_enter(self)) return NULL;
    if (py_tokens_get(tok, &t)) goto done;
    Py_BEGIN_ALLOW_THREADS
    e = scdb_delete(self->h, t.data, t.n, from_block, &n);
    Py_END_ALLOW_THREADS
    if (e) py_err_handle(self->h, e);
    else out = PyLong_FromUnsignedLong(n);
done:
    py_tokens_release(&t);
    py_client_leave(self);
    return out;
}

static int set_u64(PyObject *d, const char *k, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *client_stats(py_client *self, PyObject *unused)
{
    scdb_stat s;
    scdb_err e;
    PyObject *d = NULL, *ops = NULL, *o;

    if (py_client_enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    e = scdb_stats(self->h, &s);
    Py_END_ALLOW_THREADS
    if (e) {
        py_err_handle(self->h, e);
        goto done;
    }
    if (!(d = PyDict_New()) || !(ops = PyDict_New())) goto fail;
#define U(f) if (set_u64(d, #f, s.f)) goto fail
    U(blocks); U(disk_bytes); U(disk_capacity_bytes); U(hot_blocks); U(hot_bytes);
    U(hot_capacity_bytes); U(pinned_blocks); U(lookups); U(lookup_hit_blocks);
    U(lookup_miss_blocks); U(gets); U(get_hot_hits); U(get_disk_hits); U(get_misses); U(puts);
    U(put_existing); U(evictions); U(checksum_failures); U(clients); U(arenas); U(arena_bytes);
    U(sessions); U(inflight); U(requests); U(errors); U(reclaimed_clients); U(reclaimed_arenas);
    U(reclaimed_sessions); U(broker_instance); U(workers); U(block_tokens);
    U(index_lookups); U(request_lookups); U(index_fallbacks);
    U(stale_tokens); U(reloads); U(reload_failures); U(registry_generation);
    U(reported_index_lookups); U(hot_evictions);
#undef U
    o = PyFloat_FromDouble(s.uptime_s);
    if (!o || PyDict_SetItemString(d, "uptime_s", o)) { Py_XDECREF(o); goto fail; }
    Py_DECREF(o);
    if (s.index_error == SCDB_OK) {
        o = Py_None;
        Py_INCREF(o);
    } else {
        const char *m = scdb_strerror(s.index_error), *colon = strchr(m, ':');
        o = PyUnicode_FromStringAndSize(m, colon ? colon - m : (Py_ssize_t)strlen(m));
    }
    if (!o || PyDict_SetItemString(d, "index_error", o)) { Py_XDECREF(o); goto fail; }
    Py_DECREF(o);
    for (int i = 0; i < s.n_ops; i++) {
        o = Py_BuildValue("{s:K,s:K,s:K,s:K}", "count", (unsigned long long)s.ops[i].count,
                          "errors", (unsigned long long)s.ops[i].errors,
                          "total_ns", (unsigned long long)s.ops[i].total_ns,
                          "max_ns", (unsigned long long)s.ops[i].max_ns);
        if (!o || PyDict_SetItemString(ops, s.ops[i].op, o)) { Py_XDECREF(o); goto fail; }
        Py_DECREF(o);
    }
    if (PyDict_SetItemString(d, "ops", ops)) goto fail;
    Py_DECREF(ops);
    goto done;
fail:
    Py_XDECREF(ops);
    Py_CLEAR(d);
done:
    py_client_leave(self);
    return d;
}

/* ------------------------------------------------------------ properties */

static PyObject *client_get_closed(py_client *self, void *c) { return PyBool_FromLong(!self->h); }

static PyObject *client_get_info(py_client *self, void *c)
{
    if (!self->h) return py_err(SCDB_ECLOSED, "this scdb.Client is closed");
    if (!self->registered) Py_RETURN_NONE;
    return info_dict(self);
}

static PyObject *client_get_endpoint(py_client *self, void *c)
{
    return PyUnicode_FromString(self->endpoint);
}

static PyObject *client_get_last_error(py_client *self, void *c)
{
    if (!self->h) return PyUnicode_FromString("");
    return PyUnicode_DecodeUTF8(scdb_last_error(self->h), (Py_ssize_t)strlen(scdb_last_error(self->h)),
                                "replace");
}

static PyObject *client_get_last_get(py_client *self, void *c)
{
    const scdb_get_result *r = &self->last_get;
    if (!self->have_last_get) Py_RETURN_NONE;
    return Py_BuildValue("{s:I,s:I,s:I,s:I,s:K}", "n_full", r->n_full, "n_matched", r->n_matched,
                         "tokens_written", r->tokens_written, "cache_n", r->cache_n,
                         "decode_ns", (unsigned long long)r->decode_ns);
}

static PyObject *client_get_last_recompute(py_client *self, void *c)
{
    (void)c;
    if (!self->last_recompute) Py_RETURN_NONE;
    Py_INCREF(self->last_recompute);
    return self->last_recompute;
}

static int client_set_timeout(py_client *self, PyObject *v, void *c)
{
    long long ms;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete timeout_ms");
        return -1;
    }
    if (py_int_arg(v, "timeout_ms", 1, INT32_MAX, SCDB_EINVAL, &ms)) return -1;
    if (py_client_enter(self)) return -1;
    scdb_set_timeout(self->h, (int)ms);
    self->timeout_ms = (int)ms;
    py_client_leave(self);
    return 0;
}

static PyObject *client_repr(py_client *self)
{
    if (!self->h) return PyUnicode_FromFormat("<scdb.Client %s, closed>", self->endpoint);
    if (!self->registered) return PyUnicode_FromFormat("<scdb.Client %s>", self->endpoint);
    return PyUnicode_FromFormat("<scdb.Client %s, %s of %s under %s>", self->endpoint,
                                self->role, self->model, self->codebook);
}

static PyObject *client_get_timeout(py_client *self, void *c)
{
    return PyLong_FromLong(self->timeout_ms);
}

#define FN(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef client_methods[] = {
    {"close", FN(client_close), METH_NOARGS,
     "close()\n\nSay goodbye to the broker (it frees this client's arenas and sessions) and\n"
     "close the connection.  Idempotent.  Arrays taken from its arenas stay valid memory\n"
     "(detached).  BusyError while another thread is in a call."},
    {"__enter__", FN(client_enter_ctx), METH_NOARGS, "Return self."},
    {"__exit__", FN(client_exit_ctx), METH_VARARGS, "close()."},
    {"register", FN(client_register), METH_VARARGS | METH_KEYWORDS,
     "register(model, role='consumer', codebook=None, *, weights_fp=None, model_dir=None) -> dict\n\n"
     "Register as 'producer' or 'consumer' of model under codebook (None: \"raw/<model>\",\n"
     "the model's raw KV).  A client may say which weights it runs: weights_fp (32 hex\n"
     "digits, scdb.weights_fingerprint) or model_dir (computed from it); the broker then\n"
     "refuses a consumer's pair calibrated for other weights, or a producer's codebook\n"
     "fitted for other weights (MismatchError naming both fingerprints), and so does\n"
     "every re-registration of this Client; neither: not checked.  Registering again replaces the registration; arenas from\n"
     "before it then raise ClosedError.  Returns the registration's info (also\n"
     "Client.info): block_tokens, block_bytes, payload_dtype, n_layers, n_kv_heads,\n"
     "head_dim, kv_dim, max_seq_len, decoder, codebook_kind, states_layers, states_dim,\n"
     "max_tokens, max_request_bytes, heartbeat_ms, heartbeat_timeout_ms,\n"
     "broker_instance.\n\nRaises NotFoundError (unknown model or codebook, no pair for this\n"
     "consumer), MismatchError (a producer that is not the codebook's model or runs other\n"
     "weights; a stale pair), InvalidError (role, a malformed weights_fp), the fingerprint's errors for\n"
     "model_dir (NotFoundError, DataError, ...)."},
    {"ping", FN(client_ping), METH_NOARGS, "ping() -> float\n\nRound trip to the broker, in microseconds."},
    {"lookup", FN(client_lookup), METH_O,
     "lookup(tokens) -> int\n\nTokens of the longest stored prefix of tokens under this\n"
     "registration's codebook (whole blocks).  Answered from the broker's shared-memory\n"
     "index when one is mapped (no request), else by a request.  tokens: a 1-D int32\n"
     "array is used in place; any integer array, bytes or sequence is converted.\n"
     "Raises RangeError (a token outside 0 .. 2**31-1), TooBigError, InvalidError (not\n"
     "registered)."},
    {"put", FN(client_put), METH_VARARGS | METH_KEYWORDS,
     "put(tokens, payloads, first_block=0, replace=False) -> dict\n\n"
     "Store full blocks first_block.. of tokens (producers); replace=True overwrites blocks\n"
     "stored already (a producer that knows they are wrong).  payloads: the blocks'\n"
     "payloads back to back in the codebook's encoding — for raw/<model> each block's K\n"
     "[n_layers][block_tokens][kv_dim] then V, in info['payload_dtype'] — as bytes, a\n"
     "C-contiguous uint8/float16/float32 array, or a list of per-block buffers.  Returns\n"
     "{'n_full', 'n_stored', 'n_new', 'n_replaced'}.  Raises ShapeError (not whole blocks, more blocks\n"
     "than the tokens hold), DtypeError, NotFoundError (an earlier block is not stored),\n"
     "TooBigError, FullError, RangeError (more tokens than max_seq_len, a token outside the\n"
     "vocabulary, a NaN or Inf in the payload)."},
    {"put_states", FN(client_put_states), METH_VARARGS | METH_KEYWORDS,
     "put_states(tokens, states, first_block=0, replace=False) -> dict\n\n"
     "Broker-side encode (producers of an 'scd' codebook): states is a StatesArena whose\n"
     "states(len(tokens)) array holds H_in of tokens [0, n) — the normalised input of every\n"
     "layer's attention — from one forward of them.  The broker encodes every full block\n"
     "from first_block and stores the codes.  Raises RangeError (more tokens than the arena\n"
     "holds, non-finite states or rows not written since the last put_states: every row\n"
     "starts as NaN and goes back to NaN once encoded), ClosedError, and put's errors."},
    {"arena", FN(client_arena), METH_VARARGS | METH_KEYWORDS,
     "arena(capacity=0) -> Arena\n\nA shared-memory KV arena of capacity slots (0: the model's\n"
     "max_seq_len) shaped for the registered model.  Raises TooBigError, FullError,\n"
     "SysCallError (mapping: the broker runs as another user?)."},
    {"states_arena", FN(client_states_arena), METH_VARARGS | METH_KEYWORDS,
     "states_arena(capacity=0) -> StatesArena\n\nA shared-memory states arena for put_states\n"
     "(capacity tokens; 0: max_seq_len).  Raises UnsupportedError when the broker does not\n"
     "encode this codebook (not a producer of an 'scd' codebook)."},
    {"get", FN(client_get), METH_VARARGS | METH_KEYWORDS,
     "get(tokens, arena, slot0=0, pos0=0, recompute=None) -> int\n\n"
     "Decode the longest stored prefix of tokens into arena (whole blocks, as many as fit):\n"
     "block i goes to slots slot0 + i*block_tokens.. with positions pos0 + i*block_tokens..\n"
     "Returns the tokens written; arena.n becomes max(n, slot0 + written).  Client.last_get\n"
     "has the details (decode_ns, ...).  The GIL is released while the broker decodes.\n"
     "Raises ClosedError (arena closed, or from before a broker restart), BusyError,\n"
     "RangeError, DataError (a damaged block), TimeoutError.\n\n"
     "recompute='tail:32' | 'initial:16' | 'tail:10%' | 'default' | ... (scdb.h, 'fidelity on\n"
     "demand'): the chosen prefix tokens are then taken out of the arena (positions kept) and\n"
     "Client.last_recompute gives their 'positions' and 'tokens': forward them at those\n"
     "positions over the arena, then the suffix from 'next_pos'.  'default' is the pair's\n"
     "calibrated setting (or the broker config's).  'selective' is refused here: it needs a\n"
     "scorer over the restored KV, which your engine runs (CacheBlend: its own first layer).\n"
     "Raises InvalidError (a bad setting, named), RangeError (a count beyond the tokens)."},
    {"delete", FN(client_delete), METH_VARARGS | METH_KEYWORDS,
     "delete(tokens, from_block=0) -> int\n\nDelete stored blocks from_block.. of tokens, last\n"
     "first (producers).  Returns how many were deleted.  Raises BusyError (a block is\n"
     "pinned or has other stored children)."},
    {"stats", FN(client_stats), METH_NOARGS,
     "stats() -> dict\n\nThe broker's and the store's counters (blocks, hits, gets, puts,\n"
     "clients, arenas, ...), 'ops': {op: {count, errors, total_ns, max_ns}}, and this\n"
     "client's own lookup counters (index_lookups, request_lookups, index_fallbacks,\n"
     "index_error).  Works before register()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"closed", (getter)client_get_closed, NULL, "True once close() ran.", NULL},
    {"info", (getter)client_get_info, NULL, "The registration's info (a dict), or None.", NULL},
    {"endpoint", (getter)client_get_endpoint, NULL, "The endpoint asked for.", NULL},
    {"last_error", (getter)client_get_last_error, NULL,
     "The broker's message for the last failed call ('' after a success).", NULL},
    {"last_get", (getter)client_get_last_get, NULL,
     "The last get's result: {'n_full', 'n_matched', 'tokens_written', 'cache_n',\n"
     "'decode_ns'}, or None.", NULL},
    {"last_recompute", (getter)client_get_last_recompute, NULL,
     "The last get(recompute=...)'s {'setting', 'from_default', 'positions', 'tokens',\n"
     "'next_pos'}, or None.", NULL},
    {"timeout_ms", (getter)client_get_timeout, (setter)client_set_timeout,
     "Per-call timeout in milliseconds (settable).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject py_client_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scdb.Client",
    .tp_basicsize = sizeof(py_client),
    .tp_new = client_new,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_repr = (reprfunc)client_repr,
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Client(endpoint=None, timeout_ms=5000, *, name=None, heartbeat=True,\n"
        "       lookup_index=True, curve_server_key=None, curve_public_key=None,\n"
        "       curve_secret_key=None)\n\n"
        "A connection to the scdb broker (libscdb's scdb_connect): connects and checks that\n"
        "a broker answers.  endpoint None or '': $SCDB_ENDPOINT, else the broker's default\n"
        "ipc path; tcp:// needs curve_server_key.  timeout_ms bounds every call.  A context\n"
        "manager: `with scdb.Client(ep) as c:` closes it at the end.\n\n"
        "One call at a time: a call from a second thread while one is in progress raises\n"
        "BusyError (blocking calls release the GIL).  Raises TimeoutError (no broker\n"
        "answered), InvalidError (bad endpoint or keys), SysCallError.",
};
