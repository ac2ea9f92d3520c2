/* py_session.c — scdb.Session: a live session on an Arena (libscdb's
 * scdb_session): attention statistics folded into shared memory (add_stats,
 * step: no message) and evictions (step on the cadence, evict), which
 * compact the arena in place and return the slot -> position map. */
#include "scdb_py.h"

#include <string.h>

int py_session_live(const py_session *s)
{
    return s->s && s->arena && py_arena_live(s->arena);
}

static int session_check(const py_session *s)
{
    if (!s->s) {
        py_err(SCDB_ECLOSED, "this scdb.Session is closed (or its Arena was)");
        return -1;
    }
    return py_arena_check(s->arena);
}

PyObject *py_session_open(py_arena *a, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"budget", "policy", "cadence", "n_heads", "window", NULL};
    unsigned int budget, cadence = 0;
    const char *policy = NULL;
    PyObject *bo, *co = NULL, *nh = Py_None;
    int window = 0;
    long n_heads;
    scdb_session_opts o = {0};
    scdb_session *s = NULL;
    py_session *out;
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zOOi:session", kwlist, &bo, &policy,
                                     &co, &nh, &window))
        return NULL;
    if (py_u32_arg(bo, "budget", &budget) || (co && py_u32_arg(co, "cadence", &cadence)))
        return NULL;
    if (nh == Py_None)
        return py_err(SCDB_EINVAL, "session: n_heads (the model's query heads) is required");
    n_heads = PyLong_AsLong(nh);
    if (n_heads == -1 && PyErr_Occurred()) return NULL;
    if (n_heads <= 0 || n_heads > 1 << 16 || window < 0)
        return py_err(SCDB_EINVAL, "session: n_heads must be > 0 and window >= 0");
    if (py_arena_check(a)) return NULL;
    if (a->session) return py_err(SCDB_EBUSY, "this Arena already has a live session");
    o.budget = budget;
    o.policy = policy;
    o.cadence = cadence;
    o.n_heads = (int)n_heads;
    o.window = window;
    if (py_client_enter(a->client)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    e = scdb_session_open(a->a, &o, &s);
    Py_END_ALLOW_THREADS
    if (e) {
        py_err_handle(a->client->h, e);
        py_client_leave(a->client);
        return NULL;
    }
    out = PyObject_New(py_session, &py_session_type);
    if (!out) {
        Py_BEGIN_ALLOW_THREADS
        scdb_session_close(&s);
        Py_END_ALLOW_THREADS
        py_client_leave(a->client);
        return NULL;
    }
    Py_INCREF(a);
    out->arena = a;
    out->s = s;
    out->n_heads = (int)n_heads;
    out->have_last = 0;
    memset(&out->last, 0, sizeof out->last);
    a->session = out;
    py_client_leave(a->client);
    return (PyObject *)out;
}

static void session_dealloc(py_session *self)
{
    if (self->s && py_arena_live(self->arena)) py_client_defer(self->arena->client, 1, self->s);
    self->s = NULL;
    if (self->arena && self->arena->session == self) self->arena->session = NULL;
    Py_CLEAR(self->arena);
    PyObject_Free(self);
}

static PyObject *session_close(py_session *self, PyObject *unused)
{
    scdb_session *s = self->s;
    if (!s) Py_RETURN_NONE;
    if (py_arena_live(self->arena)) {
        py_client *c = self->arena->client;
        if (py_client_enter(c)) return NULL;
        self->s = NULL;
        Py_BEGIN_ALLOW_THREADS
        scdb_session_close(&s);
        Py_END_ALLOW_THREADS
        py_client_leave(c);
    }
    self->s = NULL;
    if (self->arena->session == self) self->arena->session = NULL;
    Py_RETURN_NONE;
}

static PyObject *session_enter_ctx(py_session *self, PyObject *unused)
{
    if (session_check(self)) return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *session_exit_ctx(py_session *self, PyObject *args)
{
    PyObject *r = session_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* probs (None or float32 [n_layers][n_heads][n_new][probs_slots]) and
 * n_new (None: probs.shape[2], or 0 without probs). */
static int parse_stats(py_session *self, PyObject *probs, PyObject *nn, Py_buffer *v,
                       int *have, int *n_new, int *slots)
{
    long n = -1;
    *have = 0;
    *slots = 0;
    if (nn != Py_None) {
        n = PyLong_AsLong(nn);
        if (n == -1 && PyErr_Occurred()) return -1;
        if (n < 0 || n > INT32_MAX) {
            py_err(SCDB_EINVAL, "n_new must be >= 0, got %ld", n);
            return -1;
        }
    }
    if (probs == Py_None) {
        if (n > 0) {
            py_err(SCDB_EINVAL, "n_new %ld without probs: pass the forward's attention", n);
            return -1;
        }
        *n_new = 0;
        return 0;
    }
    if (py_f32_buffer(probs, 4, "probs", v)) return -1;
    *have = 1;
    if (v->shape[0] != self->arena->n_layers || v->shape[1] != self->n_heads ||
        (n >= 0 && v->shape[2] != n) || v->shape[2] <= 0 || v->shape[3] > INT32_MAX) {
        py_err(SCDB_ESHAPE, "probs must be [n_layers %d][n_heads %d][n_new][probs_slots], got "
               "[%zd][%zd][%zd][%zd]%s", self->arena->n_layers, self->n_heads, v->shape[0],
               v->shape[1], v->shape[2], v->shape[3], n >= 0 ? " (n_new given)" : "");
        PyBuffer_Release(v);
        *have = 0;
        return -1;
    }
    *n_new = (int)v->shape[2];
    *slots = (int)v->shape[3];
    return 0;
}

static PyObject *evict_result(py_session *self, const scdb_session_evict_result *r)
{
    self->last = *r;
    self->last.slot_pos = NULL;
    self->have_last = 1;
    return py_array_i32(r->slot_pos, r->n_kept);
}

static PyObject *stats_call(py_session *self, PyObject *args, PyObject *kw, int step)
{
    static char *kwlist[] = {"probs", "n_new", NULL};
    PyObject *probs = Py_None, *nn = Py_None, *out = NULL;
    Py_buffer v;
    int have = 0, n_new = 0, slots = 0;
    scdb_session_evict_result r;
    py_client *c;
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, step ? "|OO:step" : "|OO:add_stats", kwlist,
                                     &probs, &nn))
        return NULL;
    if (session_check(self)) return NULL;
    if (parse_stats(self, probs, nn, &v, &have, &n_new, &slots)) return NULL;
    c = self->arena->client;
    if (py_client_enter(c)) goto done;
    memset(&r, 0, sizeof r);
    Py_BEGIN_ALLOW_THREADS
    e = step ? scdb_session_step(self->s, have ? v.buf : NULL, slots, n_new, &r)
             : scdb_session_add_stats(self->s, have ? v.buf : NULL, slots, n_new);
    Py_END_ALLOW_THREADS
    if (e) py_err_handle(c->h, e);
    else if (step && r.n_before) out = evict_result(self, &r);
    else {
        out = Py_None;
        Py_INCREF(out);
    }
    py_client_leave(c);
done:
    if (have) PyBuffer_Release(&v);
    return out;
}

static PyObject *session_add_stats(py_session *self, PyObject *args, PyObject *kw)
{
    return stats_call(self, args, kw, 0);
}

static PyObject *session_step(py_session *self, PyObject *args, PyObject *kw)
{
    return stats_call(self, args, kw, 1);
}

static PyObject *session_evict(py_session *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"budget", NULL};
    unsigned int budget = 0;
    PyObject *bo = NULL;
    scdb_session_evict_result r;
    PyObject *out = NULL;
    py_client *c;
    scdb_err e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:evict", kwlist, &bo)) return NULL;
    if (bo && py_u32_arg(bo, "budget", &budget)) return NULL;
    if (session_check(self)) return NULL;
    c = self->arena->client;
    if (py_client_enter(c)) return NULL;
    memset(&r, 0, sizeof r);
    Py_BEGIN_ALLOW_THREADS
    e = scdb_session_evict(self->s, budget, &r);
    Py_END_ALLOW_THREADS
    if (e) py_err_handle(c->h, e);
    else out = evict_result(self, &r);
    py_client_leave(c);
    return out;
}

static PyObject *session_get_info(py_session *self, void *unused)
{
    const scdb_session_info *i;
    if (session_check(self)) return NULL;
    i = scdb_session_get_info(self->s);
    return Py_BuildValue("{s:K,s:I,s:I,s:I,s:I,s:K,s:i}", "id", (unsigned long long)i->id,
                         "budget", i->budget, "cadence", i->cadence, "sinks", i->sinks,
                         "recent", i->recent, "stats_bytes", (unsigned long long)i->stats_bytes,
                         "n_heads", self->n_heads);
}

static PyObject *session_get_last(py_session *self, void *unused)
{
    if (!self->have_last) Py_RETURN_NONE;
    return Py_BuildValue("{s:O,s:I,s:I,s:K}", "evicted", self->last.evicted ? Py_True : Py_False,
                         "n_before", self->last.n_before, "n_kept", self->last.n_kept,
                         "evict_ns", (unsigned long long)self->last.evict_ns);
}

static PyObject *session_get_closed(py_session *self, void *unused)
{
    return PyBool_FromLong(!py_session_live(self));
}

static PyObject *session_get_arena(py_session *self, void *unused)
{
    Py_INCREF(self->arena);
    return (PyObject *)self->arena;
}

static PyObject *session_repr(py_session *self)
{
    return PyUnicode_FromFormat("<scdb.Session on %R%s>", (PyObject *)self->arena,
                                py_session_live(self) ? "" : ", closed");
}

#define FN(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef session_methods[] = {
    {"add_stats", FN(session_add_stats), METH_VARARGS | METH_KEYWORDS,
     "add_stats(probs=None, n_new=None)\n\n"
     "Fold the attention statistics of the n_new newest arena slots (just appended by a\n"
     "forward, arena.n already moved) into the session's shared accumulators; no message.\n"
     "probs: float32 C-contiguous [n_layers][n_heads][n_new][probs_slots], that forward's\n"
     "attention over slots [0, arena.n) (probs_slots >= arena.n; zeros past it).  n_new\n"
     "defaults to probs.shape[2].  Slots appended without statistics (a get) are recorded\n"
     "first with none; add_stats() records only those.  Raises DtypeError, ShapeError,\n"
     "InvalidError (more new slots than the arena grew by), ClosedError."},
    {"step", FN(session_step), METH_VARARGS | METH_KEYWORDS,
     "step(probs=None, n_new=None) -> numpy.ndarray | None\n\n"
     "add_stats, then, once cadence tokens were appended since the last eviction and the\n"
     "arena holds more than the budget, evict().  Returns the eviction's slot -> original\n"
     "position map (int32 [n_kept]) when one ran, else None."},
    {"evict", FN(session_evict), METH_VARARGS | METH_KEYWORDS,
     "evict(budget=0) -> numpy.ndarray\n\n"
     "Evict down to budget slots (0: the session's) now: the broker scores the tokens with\n"
     "the policy and compacts the arena in place (order kept, each slot keeps its original\n"
     "position in arena.pos); arena.n becomes the kept count.  Returns the slot ->\n"
     "original position map, int32 [n_kept] (a copy).  Session.last_eviction has the\n"
     "counts and the broker's time.  Raises MismatchError (statistics out of step),\n"
     "BusyError, RangeError, ClosedError."},
    {"close", FN(session_close), METH_NOARGS, "close()\n\nEnd the session (the arena stays).  Idempotent."},
    {"__enter__", FN(session_enter_ctx), METH_NOARGS, "Return self."},
    {"__exit__", FN(session_exit_ctx), METH_VARARGS, "close()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef session_getset[] = {
    {"info", (getter)session_get_info, NULL,
     "{'id', 'budget', 'cadence', 'sinks', 'recent', 'stats_bytes', 'n_heads'}.", NULL},
    {"last_eviction", (getter)session_get_last, NULL,
     "The last eviction: {'evicted', 'n_before', 'n_kept', 'evict_ns'}, or None.", NULL},
    {"closed", (getter)session_get_closed, NULL, "True once it, its Arena or Client is closed.",
     NULL},
    {"arena", (getter)session_get_arena, NULL, "The Arena it runs on.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject py_session_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scdb.Session",
    .tp_basicsize = sizeof(py_session),
    .tp_dealloc = (destructor)session_dealloc,
    .tp_repr = (reprfunc)session_repr,
    .tp_methods = session_methods,
    .tp_getset = session_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "A live session (made by Arena.session): the broker keeps the arena within a slot\n"
        "budget with an eviction policy while this process decodes into it.  Per generated\n"
        "token: forward into the arena (slot n, then arena.n += 1), then\n"
        "session.step(probs) with that forward's attention.  Compaction keeps order and\n"
        "each slot's original position (arena.pos), so attention stays causal by position.\n"
        "A context manager; closing the Arena ends it.",
};
