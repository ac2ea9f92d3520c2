/* py_arena.c — scdb.Arena (a KV arena: pos, k, v as NumPy views of the
 * shared-memory cache) and scdb.StatesArena (H_in for put_states).  Both
 * keep their arrays on this module's own mapping of the pages (scdb._Memory),
 * so an array outlives Arena.close() and Client.close() safely (scdb_py.h). */
#include "scdb_py.h"

#include <string.h>

int py_arena_live(const py_arena *a)
{
    return a->a && a->client && a->client->h;
}

int py_arena_check(const py_arena *a)
{
    const char *what = a->is_states ? "StatesArena" : "Arena";
    if (!a->a) {
        py_err(SCDB_ECLOSED, "this scdb.%s is closed (arrays taken from it stay valid, detached)",
               what);
        return -1;
    }
    if (!a->client || !a->client->h) {
        py_err(SCDB_ECLOSED, "the scdb.Client of this %s is closed", what);
        return -1;
    }
    return 0;
}

static char *lowest(char *a, char *b) { return a < b ? a : b; }
static char *highest(char *a, char *b) { return a > b ? a : b; }

PyObject *py_arena_wrap(py_client *c, scdb_arena *a, int states)
{
    py_arena *o = NULL;
    char *lo, *hi;

    if (!states && !scdb_arena_cache(a)) {
        py_err(SCDB_EUNSUPPORTED, "a CUDA IPC arena has no host memory to view");
        goto fail;
    }
    o = PyObject_New(py_arena, states ? &py_states_arena_type : &py_arena_type);
    if (!o) goto fail;
    o->client = NULL;
    o->a = NULL;
    o->mem = NULL;
    o->pos_a = o->k_a = o->v_a = NULL;
    o->session = NULL;
    o->is_states = states;
    o->n_layers = o->n_kv_heads = o->head_dim = o->states_layers = o->states_dim = 0;
    o->pos = NULL;
    o->k = o->v = o->states = NULL;
    if (states) {
        int L, dim, cap;
        float *st = scdb_arena_states(a, &L, &dim, &cap);
        if (!st || L <= 0 || dim <= 0 || cap <= 0) {
            py_err(SCDB_EPROTO, "states arena without memory or shape");
            goto fail;
        }
        o->states = st;
        o->states_layers = L;
        o->states_dim = dim;
        o->capacity = cap;
        lo = (char *)st;
        hi = (char *)(st + (size_t)L * cap * dim);
    } else {
        const scdb_kv_cache *kv = scdb_arena_cache(a);
        size_t per = (size_t)kv->n_layers * kv->capacity * kv->n_kv_heads * kv->head_dim;
        o->capacity = kv->capacity;
        o->n_layers = kv->n_layers;
        o->n_kv_heads = kv->n_kv_heads;
        o->head_dim = kv->head_dim;
        o->pos = kv->pos;
        o->k = kv->k;
        o->v = kv->v;
        lo = lowest(lowest((char *)kv->pos, (char *)kv->k), (char *)kv->v);
        hi = highest(highest((char *)(kv->pos + kv->capacity), (char *)(kv->k + per)),
                     (char *)(kv->v + per));
    }
    o->mem = py_memory_dup(lo, hi, &o->mem_base);
    if (!o->mem) goto fail;
    Py_INCREF(c);
    o->client = c;
    o->a = a;
    return (PyObject *)o;
fail:
    Py_XDECREF(o);            /* o->a is NULL: dealloc frees nothing */
    Py_BEGIN_ALLOW_THREADS
    scdb_arena_free(&a);
    Py_END_ALLOW_THREADS
    return NULL;
}

static void arena_dealloc(py_arena *self)
{
    /* a session holds its arena, so none is open here */
    if (self->a && self->client) py_client_defer(self->client, 0, self->a);
    self->a = NULL;
    Py_CLEAR(self->pos_a);
    Py_CLEAR(self->k_a);
    Py_CLEAR(self->v_a);
    Py_CLEAR(self->mem);
    Py_CLEAR(self->client);
    PyObject_Free(self);
}

static PyObject *arena_close(py_arena *self, PyObject *unused)
{
    py_client *c = self->client;
    scdb_arena *a = self->a;

    if (!a) Py_RETURN_NONE;
    if (c && c->h) {
        if (py_client_enter(c)) return NULL;
        if (self->session) self->session->s = NULL;   /* freeing the arena ends it */
        self->session = NULL;
        self->a = NULL;
        Py_BEGIN_ALLOW_THREADS
        scdb_arena_free(&a);
        Py_END_ALLOW_THREADS
        py_client_leave(c);
    } else {
        self->a = NULL;       /* scdb_close freed it */
        if (self->session) self->session->s = NULL;
        self->session = NULL;
    }
    /* our references go; arrays a caller still holds keep the mapping */
    Py_CLEAR(self->pos_a);
    Py_CLEAR(self->k_a);
    Py_CLEAR(self->v_a);
    Py_CLEAR(self->mem);
    Py_RETURN_NONE;
}

static PyObject *arena_enter_ctx(py_arena *self, PyObject *unused)
{
    if (py_arena_check(self)) return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *arena_exit_ctx(py_arena *self, PyObject *args)
{
    PyObject *r = arena_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* ------------------------------------------------------------ KV arrays */

static PyObject *kv_array(py_arena *self, PyObject **slot, void *ptr, const char *dtype, int ndim)
{
    Py_ssize_t shape[3] = {self->n_layers, self->capacity,
                           (Py_ssize_t)self->n_kv_heads * self->head_dim};
    if (py_arena_check(self)) return NULL;
    if (!*slot) {
        if (ndim == 1) shape[0] = self->capacity;
        *slot = py_array_view(self->mem, dtype, (char *)ptr - self->mem_base, ndim, shape);
        if (!*slot) return NULL;
    }
    Py_INCREF(*slot);
    return *slot;
}

static PyObject *arena_get_pos(py_arena *self, void *c)
{
    return kv_array(self, &self->pos_a, self->pos, "int32", 1);
}

static PyObject *arena_get_k(py_arena *self, void *c)
{
    return kv_array(self, &self->k_a, self->k, "float32", 3);
}

static PyObject *arena_get_v(py_arena *self, void *c)
{
    return kv_array(self, &self->v_a, self->v, "float32", 3);
}

static PyObject *arena_get_n(py_arena *self, void *c)
{
    if (py_arena_check(self)) return NULL;
    return PyLong_FromLong(scdb_arena_cache(self->a)->n);
}

static int arena_set_n(py_arena *self, PyObject *v, void *c)
{
    long n;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete n");
        return -1;
    }
    n = PyLong_AsLong(v);
    if (n == -1 && PyErr_Occurred()) return -1;
    if (py_arena_check(self)) return -1;
    if (n < 0 || n > self->capacity) {
        py_err(SCDB_ERANGE, "n must be 0 .. capacity %d, got %ld", self->capacity, n);
        return -1;
    }
    if (py_client_enter(self->client)) return -1;    /* not during a get */
    scdb_arena_cache(self->a)->n = (int)n;
    py_client_leave(self->client);
    return 0;
}

static PyObject *arena_get_int(py_arena *self, void *which)
{
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromLong(self->capacity);
    case 1: return PyLong_FromLong(self->is_states ? self->states_layers : self->n_layers);
    case 2: return PyLong_FromLong(self->n_kv_heads);
    case 3: return PyLong_FromLong(self->head_dim);
    case 4: return PyLong_FromLong((long)self->n_kv_heads * self->head_dim);
    case 5: return PyLong_FromLong(self->states_dim);
    default: return PyBool_FromLong(!py_arena_live(self));
    }
}

static PyObject *arena_session(py_arena *self, PyObject *args, PyObject *kw)
{
    return py_session_open(self, args, kw);
}

static PyObject *arena_repr(py_arena *self)
{
    if (self->is_states)
        return PyUnicode_FromFormat("<scdb.StatesArena %d tokens x %d layers x %d%s>",
                                    self->capacity, self->states_layers, self->states_dim,
                                    py_arena_live(self) ? "" : ", closed");
    return PyUnicode_FromFormat("<scdb.Arena %d slots, %d layers x %d kv heads x %d%s>",
                                self->capacity, self->n_layers, self->n_kv_heads, self->head_dim,
                                py_arena_live(self) ? "" : ", closed");
}

/* ------------------------------------------------------------ states */

static PyObject *states_view(py_arena *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"n", NULL};
    PyObject *no = Py_None;
    Py_ssize_t n, shape[3];

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:states", kwlist, &no)) return NULL;
    if (py_arena_check(self)) return NULL;
    n = no == Py_None ? self->capacity : PyNumber_AsSsize_t(no, PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n <= 0 || n > self->capacity)
        return py_err(SCDB_ERANGE, "n must be 1 .. capacity %d, got %zd", self->capacity, n);
    shape[0] = self->states_layers;
    shape[1] = n;
    shape[2] = self->states_dim;
    return py_array_view(self->mem, "float32", (char *)self->states - self->mem_base, 3, shape);
}

#define FN(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef arena_methods[] = {
    {"close", FN(arena_close), METH_NOARGS,
     "close()\n\nFree the arena on the broker (ends its session).  Idempotent.  Arrays taken\n"
     "from it (pos, k, v, and torch tensors over them) stay valid memory: this module keeps\n"
     "its own mapping of the pages until the last of them is released; they are detached\n"
     "(the broker no longer writes into them).  BusyError while another thread is in a\n"
     "call on the Client."},
    {"__enter__", FN(arena_enter_ctx), METH_NOARGS, "Return self."},
    {"__exit__", FN(arena_exit_ctx), METH_VARARGS, "close()."},
    {"session", FN(arena_session), METH_VARARGS | METH_KEYWORDS,
     "session(budget, policy=None, cadence=0, n_heads=None, window=0) -> Session\n\n"
     "Open a live session on this arena: the broker keeps the cache within budget slots\n"
     "with the eviction policy (None: 'streaming'; 'full', 'h2o', 'snapkv', 'tova', or a\n"
     "learned policy the broker loaded, e.g. 'distillcache'), evicting in Session.step\n"
     "every cadence appended tokens (0: only Session.evict).  n_heads: the model's query\n"
     "heads (required: the broker checks it).  window: SnapKV's observation window\n"
     "(0: 32).  Raises NotFoundError (unknown policy), RangeError (budget),\n"
     "ShapeError (n_heads), BusyError (the arena has a session)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef arena_getset[] = {
    {"pos", (getter)arena_get_pos, NULL,
     "int32 array [capacity]: each slot's absolute position (a view of the arena, no copy).",
     NULL},
    {"k", (getter)arena_get_k, NULL,
     "float32 array [n_layers, capacity, kv_dim]: K after RoPE at pos[slot] (kernels.h's\n"
     "scdb_kv_cache layout; a writable view of the arena, no copy: torch.from_numpy(a.k)\n"
     "shares it; .reshape(n_layers, capacity, n_kv_heads, head_dim) is a view too).", NULL},
    {"v", (getter)arena_get_v, NULL, "float32 array [n_layers, capacity, kv_dim]: V (as k).", NULL},
    {"n", (getter)arena_get_n, (setter)arena_set_n,
     "Live slots [0, n).  A get sets it to max(n, slot0 + written); after appending slots\n"
     "yourself (prefilling the suffix in place) set it.", NULL},
    {"capacity", (getter)arena_get_int, NULL, "Slots.", (void *)0},
    {"n_layers", (getter)arena_get_int, NULL, "Layers.", (void *)1},
    {"n_kv_heads", (getter)arena_get_int, NULL, "KV heads.", (void *)2},
    {"head_dim", (getter)arena_get_int, NULL, "Head dimension.", (void *)3},
    {"kv_dim", (getter)arena_get_int, NULL, "n_kv_heads * head_dim.", (void *)4},
    {"closed", (getter)arena_get_int, NULL, "True once it (or its Client) is closed.", (void *)6},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject py_arena_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scdb.Arena",
    .tp_basicsize = sizeof(py_arena),
    .tp_dealloc = (destructor)arena_dealloc,
    .tp_repr = (reprfunc)arena_repr,
    .tp_methods = arena_methods,
    .tp_getset = arena_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "A shared-memory KV arena (made by Client.arena): one slot-indexed KV cache that\n"
        "the broker decodes into (Client.get) and the model attends over in place.\n"
        "pos, k, v are NumPy views of it (zero copy; torch.from_numpy gives tensors over\n"
        "the same memory).  A context manager; close() frees it on the broker.",
};

static PyMethodDef states_methods[] = {
    {"close", FN(arena_close), METH_NOARGS,
     "close()\n\nFree the states arena on the broker.  Idempotent; arrays taken from it stay\n"
     "valid memory, detached."},
    {"__enter__", FN(arena_enter_ctx), METH_NOARGS, "Return self."},
    {"__exit__", FN(arena_exit_ctx), METH_VARARGS, "close()."},
    {"states", FN(states_view), METH_VARARGS | METH_KEYWORDS,
     "states(n=None) -> numpy.ndarray\n\n"
     "The float32 array [n_layers, n, dim] that put_states(tokens) reads for len(tokens) ==\n"
     "n (None: capacity): H_in of token t at layer l is [l, t].  The layout depends on n —\n"
     "write the states of an n-token prompt into states(n).  A writable view of the\n"
     "arena (torch.from_numpy: no copy).  RangeError unless 1 <= n <= capacity."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef states_getset[] = {
    {"capacity", (getter)arena_get_int, NULL, "Tokens it holds.", (void *)0},
    {"n_layers", (getter)arena_get_int, NULL, "Layers of states (info['states_layers']).",
     (void *)1},
    {"dim", (getter)arena_get_int, NULL, "Width of one state (info['states_dim']).", (void *)5},
    {"closed", (getter)arena_get_int, NULL, "True once it (or its Client) is closed.", (void *)6},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject py_states_arena_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scdb.StatesArena",
    .tp_basicsize = sizeof(py_arena),
    .tp_dealloc = (destructor)arena_dealloc,
    .tp_repr = (reprfunc)arena_repr,
    .tp_methods = states_methods,
    .tp_getset = states_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "A shared-memory states arena (made by Client.states_arena) for broker-side encode:\n"
        "the producer's prefill writes H_in into states(n), then Client.put_states has the\n"
        "broker encode it with the codebook; no payload crosses the socket.",
};
