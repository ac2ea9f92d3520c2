/* scdbmodule.c — the scdb module: its docstring, the exception classes (one
 * per scdb_err family), token and buffer conversion, the NumPy helpers and
 * scdb._Memory (the mapping arena arrays are views of).  The objects live in
 * py_client.c, py_arena.c and py_session.c; scdb_py.h has the design. */
#include "scdb_py.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------- errors */

typedef struct err_family {
    const char *name;              /* scdb.<name>                           */
    PyObject **builtin;            /* also a subclass of this (may be NULL) */
    scdb_err code;                 /* its class attribute `code`            */
    const char *doc;
} err_family;

static PyObject *err_base;
static PyObject *err_class[SCDB_ERR_COUNT];   /* by scdb_err */

/* The families; err_of() maps every scdb_err onto one of them. */
static err_family families[] = {
    {"InvalidError", &PyExc_ValueError, SCDB_EINVAL, "SCDB_EINVAL: an invalid argument or call "
     "(not registered, wrong role, a negative token, ...).  Also a ValueError."},
    {"NoMemoryError", &PyExc_MemoryError, SCDB_ENOMEM, "SCDB_ENOMEM: an allocation failed.  "
     "Also a MemoryError."},
    {"NotFoundError", &PyExc_LookupError, SCDB_ENOTFOUND, "SCDB_ENOTFOUND: unknown model, "
     "codebook, pair or policy, or an earlier block is not stored.  Also a LookupError."},
    {"ShapeError", &PyExc_ValueError, SCDB_ESHAPE, "SCDB_ESHAPE: a shape or size that does not "
     "match (payload not whole blocks, an array of the wrong shape or not C-contiguous).  "
     "Also a ValueError."},
    {"DtypeError", &PyExc_TypeError, SCDB_EDTYPE, "SCDB_EDTYPE: an array of the wrong element "
     "type (tokens that are not integers, probs that are not float32, ...).  Also a "
     "TypeError."},
    {"ProtocolError", NULL, SCDB_EPROTO, "SCDB_EPROTO: a malformed message or a protocol "
     "version mismatch between this module and the broker."},
    {"DataError", NULL, SCDB_EFORMAT, "Damaged data: SCDB_EFORMAT, SCDB_ETRUNC, SCDB_EOVERLAP or "
     "SCDB_ECHECKSUM (a stored block failed its checksum, ...); `code` says which."},
    {"RangeError", &PyExc_ValueError, SCDB_ERANGE, "SCDB_ERANGE: a value out of range (a token "
     "outside 0 .. 2**31-1, slot0 past the arena, more tokens than the states arena holds, "
     "non-finite states, ...).  Also a ValueError."},
    {"MismatchError", NULL, SCDB_EMISMATCH, "SCDB_EMISMATCH: an artifact that does not belong "
     "here (a producer whose model is not the codebook's, statistics out of step, ...)."},
    {"TooBigError", &PyExc_ValueError, SCDB_ETOOBIG, "SCDB_ETOOBIG: a request over the broker's "
     "limits (max_tokens, max_request_bytes, max_arena_bytes).  Also a ValueError."},
    {"FullError", NULL, SCDB_EFULL, "SCDB_EFULL: a capacity is reached (store full of pinned "
     "blocks, arena limits, memory)."},
    {"BusyError", NULL, SCDB_EBUSY, "SCDB_EBUSY: in use: the Client is in a call on another "
     "thread, an arena already has a session or a get in progress, a block is pinned."},
    {"TimeoutError", &PyExc_TimeoutError, SCDB_ETIMEDOUT, "SCDB_ETIMEDOUT: no reply from the "
     "broker within the Client's timeout_ms (or no broker at the endpoint).  Also the "
     "built-in TimeoutError."},
    {"IOFailedError", &PyExc_OSError, SCDB_EIO, "SCDB_EIO: a read or write failed (the broker's "
     "store).  Also an OSError."},
    {"SysCallError", &PyExc_OSError, SCDB_ESYS, "SCDB_ESYS: a system call failed (ZeroMQ, "
     "shared memory: is the broker another user?).  Also an OSError."},
    {"DeviceError", NULL, SCDB_EDEVICE, "SCDB_EDEVICE: a CUDA device error."},
    {"UnsupportedError", NULL, SCDB_EUNSUPPORTED, "SCDB_EUNSUPPORTED: not supported here (a "
     "states arena for a codebook the broker does not encode, ...)."},
    {"ClosedError", NULL, SCDB_ECLOSED, "SCDB_ECLOSED: closed: this Client, Arena or Session "
     "was closed, its arena is from before a broker restart, or the broker is shutting down."},
    {"AuthError", &PyExc_PermissionError, SCDB_EAUTH, "SCDB_EAUTH: credentials refused or "
     "missing.  Also a PermissionError."},
};

static const err_family *err_of(scdb_err e)
{
    switch (e) {
    case SCDB_ETRUNC: case SCDB_EOVERLAP: case SCDB_ECHECKSUM: e = SCDB_EFORMAT; break;
    default: break;
    }
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i].code == e) return &families[i];
    return NULL;
}

/* "SCDB_ESHAPE" out of scdb_strerror's "SCDB_ESHAPE: shape mismatch". */
static PyObject *err_name(scdb_err e)
{
    const char *s = scdb_strerror(e), *colon = strchr(s, ':');
    return colon ? PyUnicode_FromStringAndSize(s, colon - s) : PyUnicode_FromString(s);
}

static PyObject *raise_msg(scdb_err e, PyObject *msg)
{
    PyObject *cls = (e > SCDB_OK && e < SCDB_ERR_COUNT && err_class[e]) ? err_class[e] : err_base;
    PyObject *name = err_name(e), *text = NULL, *exc = NULL, *code = NULL;

    if (!msg || !name) goto done;
    text = PyUnicode_FromFormat("%U [%U]", msg, name);
    if (!text) goto done;
    exc = PyObject_CallOneArg(cls, text);
    code = PyLong_FromLong((long)e);
    if (!exc || !code || PyObject_SetAttrString(exc, "code", code) ||
        PyObject_SetAttrString(exc, "name", name) || PyObject_SetAttrString(exc, "message", msg))
        goto done;
    PyErr_SetObject(cls, exc);
done:
    Py_XDECREF(msg);
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_XDECREF(exc);
    Py_XDECREF(code);
    return NULL;
}

PyObject *py_err(scdb_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    return raise_msg(e, msg);
}

PyObject *py_err_handle(scdb *h, scdb_err e)
{
    const char *m = h ? scdb_last_error(h) : "";
    return raise_msg(e, PyUnicode_DecodeUTF8(m && *m ? m : scdb_strerror(e),
                                             (Py_ssize_t)strlen(m && *m ? m : scdb_strerror(e)),
                                             "replace"));
}

int py_errors_init(PyObject *m)
{
    PyObject *none = PyUnicode_FromString(""), *zero = PyLong_FromLong(0);

    err_base = PyErr_NewExceptionWithDoc(
        "scdb.Error",
        "Base class of every error the scdb module raises.\n\n"
        "Attributes: code (the scdb_err number), name (\"SCDB_ETIMEDOUT\", ...), message\n"
        "(the broker's message, or a local explanation).  Each scdb_err family has a\n"
        "subclass (TimeoutError, NotFoundError, ShapeError, ClosedError, ...); those for\n"
        "bad arguments are also ValueError / TypeError, so `except ValueError` works.",
        PyExc_Exception, NULL);
    if (!err_base || !none || !zero) goto fail;
    if (PyObject_SetAttrString(err_base, "code", zero) ||
        PyObject_SetAttrString(err_base, "message", none) ||
        PyObject_SetAttrString(err_base, "name", none))
        goto fail;
    Py_INCREF(err_base);
    if (PyModule_AddObject(m, "Error", err_base)) goto fail;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const err_family *f = &families[i];
        char full[64];
        PyObject *bases = f->builtin ? PyTuple_Pack(2, err_base, *f->builtin)
                                     : PyTuple_Pack(1, err_base);
        PyObject *cls, *code;
        if (!bases) goto fail;
        snprintf(full, sizeof full, "scdb.%s", f->name);
        cls = PyErr_NewExceptionWithDoc(full, f->doc, bases, NULL);
        Py_DECREF(bases);
        if (!cls) goto fail;
        code = PyLong_FromLong((long)f->code);
        if (!code || PyObject_SetAttrString(cls, "code", code)) {
            Py_XDECREF(code);
            Py_DECREF(cls);
            goto fail;
        }
        Py_DECREF(code);
        for (int e = 1; e < SCDB_ERR_COUNT; e++)
            if (err_of((scdb_err)e) == f) err_class[e] = cls;
        if (PyModule_AddObject(m, f->name, cls)) {   /* steals; err_class borrows */
            Py_DECREF(cls);
            goto fail;
        }
    }
    Py_DECREF(none);
    Py_DECREF(zero);
    return 0;
fail:
    Py_XDECREF(none);
    Py_XDECREF(zero);
    return -1;
}

/* ---------------------------------------------------------------- tokens */

/* The struct-module code of a native-order buffer format ("i", "=i", "<i"
 * on little-endian...), or 0 when the byte order is not native. */
static char native_code(const char *fmt)
{
    if (!fmt) return 'B';
    if (fmt[0] == '@' || fmt[0] == '=') fmt++;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    else if (fmt[0] == '<') fmt++;
#else
    else if (fmt[0] == '>' || fmt[0] == '!') fmt++;
#endif
    if (!fmt[0] || fmt[1]) return 0;
    return fmt[0];
}

static int is_int_code(char c)
{
    return c && strchr("bBhHiIlLqQnN", c) != NULL;
}

/* Element of a native-order integer buffer: itemsize bytes, signed for the
 * lower-case codes ('=l' is 4 bytes, '@l' 8: the size is the buffer's).
 * -1 for an unsigned value past LLONG_MAX (out of range either way). */
static long long read_int(const char *p, char c, Py_ssize_t itemsize)
{
    int is_signed = c >= 'a' && c <= 'z';
    switch (itemsize) {
    case 1: return is_signed ? (long long)*(const int8_t *)p : (long long)*(const uint8_t *)p;
    case 2: {
        uint16_t u;
        memcpy(&u, p, 2);
        return is_signed ? (long long)(int16_t)u : (long long)u;
    }
    case 4: {
        uint32_t u;
        memcpy(&u, p, 4);
        return is_signed ? (long long)(int32_t)u : (long long)u;
    }
    case 8: {
        uint64_t u;
        memcpy(&u, p, 8);
        if (is_signed) return (long long)(int64_t)u;
        return u > (uint64_t)LLONG_MAX ? -1 : (long long)u;
    }
    default: return -1;
    }
}

static int token_range(size_t i, long long v)
{
    if (v >= 0 && v <= INT32_MAX) return 0;
    py_err(SCDB_ERANGE, "token %zd is %lld: tokens are 0 .. 2**31-1", (Py_ssize_t)i, v);
    return -1;
}

void py_tokens_release(py_tokens *t)
{
    if (t->have_view) PyBuffer_Release(&t->view);
    t->have_view = 0;
    PyMem_Free(t->owned);
    t->owned = NULL;
    t->data = NULL;
    t->n = 0;
}

int py_tokens_get(PyObject *o, py_tokens *t)
{
    memset(t, 0, sizeof *t);
    if (PyObject_CheckBuffer(o)) {
        Py_buffer *v = &t->view;
        char c;
        if (PyObject_GetBuffer(o, v, PyBUF_RECORDS_RO) < 0) return -1;
        t->have_view = 1;
        c = native_code(v->format);
        if (v->ndim != 1) {
            py_err(SCDB_ESHAPE, "tokens must be 1-D, got %d dimensions", v->ndim);
            return -1;
        }
        if (!is_int_code(c)) {
            py_err(SCDB_EDTYPE, "tokens must be integers (int32 is passed without a copy), got "
                   "buffer format '%s'", v->format ? v->format : "B");
            return -1;
        }
        t->n = (size_t)v->shape[0];
        if (c == 'i' && v->itemsize == 4 && (v->strides[0] == 4 || t->n <= 1)) {
            const int32_t *d = v->buf;
            uint32_t any = 0;
            for (size_t i = 0; i < t->n; i++) any |= (uint32_t)d[i];
            if (any & 0x80000000u)
                for (size_t i = 0; i < t->n; i++)
                    if (token_range(i, d[i])) return -1;
            t->data = d;                      /* zero copy */
            return 0;
        }
        t->owned = PyMem_Malloc((t->n ? t->n : 1) * sizeof *t->owned);
        if (!t->owned) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < t->n; i++) {
            long long x = read_int((const char *)v->buf + (Py_ssize_t)i * v->strides[0], c,
                                   v->itemsize);
            if (x < 0 && c >= 'A' && c <= 'Z') x = (long long)INT32_MAX + 1;   /* huge unsigned */
            if (token_range(i, x)) return -1;
            t->owned[i] = (int32_t)x;
        }
        PyBuffer_Release(v);
        t->have_view = 0;
        t->data = t->owned;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        py_err(SCDB_EDTYPE, "tokens must be integers, not str (encode text to bytes first: "
               "the family's vocabulary is bytes)");
        return -1;
    }
    PyObject *seq = PySequence_Fast(o, "tokens must be a 1-D integer array or a sequence of ints");
    if (!seq) {
        PyErr_Clear();
        py_err(SCDB_EDTYPE, "tokens must be a 1-D integer array or a sequence of ints, not %s",
               Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    t->n = (size_t)n;
    t->owned = PyMem_Malloc((n ? (size_t)n : 1) * sizeof *t->owned);
    if (!t->owned) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        long long x;
        int over = 0;
        if (PyFloat_Check(it) || PyBool_Check(it) || !PyIndex_Check(it)) {
            py_err(SCDB_EDTYPE, "token %zd is a %s, not an int", i, Py_TYPE(it)->tp_name);
            Py_DECREF(seq);
            return -1;
        }
        PyObject *ix = PyNumber_Index(it);
        if (!ix) {
            Py_DECREF(seq);
            return -1;
        }
        x = PyLong_AsLongLongAndOverflow(ix, &over);
        Py_DECREF(ix);
        if (over) x = over > 0 ? (long long)INT32_MAX + 1 : -1;
        if (token_range((size_t)i, x)) {
            Py_DECREF(seq);
            return -1;
        }
        t->owned[i] = (int32_t)x;
    }
    Py_DECREF(seq);
    t->data = t->owned;
    return 0;
}

int py_f32_buffer(PyObject *o, int ndim, const char *what, Py_buffer *v)
{
    char c;
    if (!PyObject_CheckBuffer(o)) {
        py_err(SCDB_EDTYPE, "%s must be a float32 NumPy array (or another buffer), not %s",
               what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(o, v, PyBUF_RECORDS_RO) < 0) return -1;
    c = native_code(v->format);
    if (c != 'f' || v->itemsize != 4) {
        py_err(SCDB_EDTYPE, "%s must be float32, got buffer format '%s'", what,
               v->format ? v->format : "B");
        goto fail;
    }
    if (v->ndim != ndim) {
        py_err(SCDB_ESHAPE, "%s must have %d dimensions, got %d", what, ndim, v->ndim);
        goto fail;
    }
    if (!PyBuffer_IsContiguous(v, 'C')) {
        py_err(SCDB_ESHAPE, "%s must be C-contiguous (numpy.ascontiguousarray)", what);
        goto fail;
    }
    return 0;
fail:
    PyBuffer_Release(v);
    return -1;
}

/* ---------------------------------------------------------------- NumPy */

static PyObject *np_frombuffer, *np_empty;

static int numpy_load(void)
{
    PyObject *np;
    if (np_frombuffer) return 0;
    np = PyImport_ImportModule("numpy");
    if (!np) return -1;
    np_frombuffer = PyObject_GetAttrString(np, "frombuffer");
    np_empty = PyObject_GetAttrString(np, "empty");
    Py_DECREF(np);
    if (!np_frombuffer || !np_empty) {
        Py_CLEAR(np_frombuffer);
        Py_CLEAR(np_empty);
        return -1;
    }
    return 0;
}

PyObject *py_array_view(PyObject *mem, const char *dtype, Py_ssize_t offset, int ndim,
                        const Py_ssize_t *shape)
{
    PyObject *flat = NULL, *shp = NULL, *out = NULL;
    Py_ssize_t count = 1;

    if (numpy_load()) return NULL;
    for (int i = 0; i < ndim; i++) count *= shape[i];
    flat = PyObject_CallFunction(np_frombuffer, "Osnn", mem, dtype, count, offset);
    if (!flat) goto done;
    if (ndim == 1) return flat;
    shp = PyTuple_New(ndim);
    if (!shp) goto done;
    for (int i = 0; i < ndim; i++) PyTuple_SET_ITEM(shp, i, PyLong_FromSsize_t(shape[i]));
    out = PyObject_CallMethod(flat, "reshape", "O", shp);
done:
    Py_XDECREF(flat);
    Py_XDECREF(shp);
    return out;
}

PyObject *py_array_i32(const int32_t *src, size_t n)
{
    PyObject *a;
    Py_buffer v;

    if (numpy_load()) return NULL;
    a = PyObject_CallFunction(np_empty, "ns", (Py_ssize_t)n, "int32");
    if (!a) return NULL;
    if (PyObject_GetBuffer(a, &v, PyBUF_CONTIG) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    if (n) memcpy(v.buf, src, n * sizeof *src);
    PyBuffer_Release(&v);
    return a;
}

/* ---------------------------------------------------------------- _Memory */

typedef struct py_memory {
    PyObject_HEAD
    void *map;
    size_t len;
} py_memory;

static void memory_dealloc(PyObject *self)
{
    py_memory *m = (py_memory *)self;
    if (m->map) munmap(m->map, m->len);
    Py_TYPE(self)->tp_free(self);
}

static int memory_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    py_memory *m = (py_memory *)self;
    return PyBuffer_FillInfo(view, self, m->map, (Py_ssize_t)m->len, 0, flags);
}

static PyBufferProcs memory_as_buffer = {memory_getbuffer, NULL};

PyTypeObject py_memory_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scdb._Memory",
    .tp_basicsize = sizeof(py_memory),
    .tp_dealloc = memory_dealloc,
    .tp_as_buffer = &memory_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "This module's own mapping of an arena's shared memory (internal).  Arena arrays\n"
              "are views of it; it is unmapped when the last of them is released.",
};

PyObject *py_memory_dup(const void *lo, const void *hi, char **base)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = (uintptr_t)lo & ~(uintptr_t)(page - 1);
    size_t len = ((uintptr_t)hi - b + page - 1) / page * page;
    py_memory *m;
    void *p;

    /* old_size 0: a new mapping of the same shared pages (mremap(2)) */
    p = mremap((void *)b, 0, len, MREMAP_MAYMOVE);
    if (p == MAP_FAILED)
        return py_err(SCDB_ESYS, "cannot map the arena a second time: %s", strerror(errno));
    m = PyObject_New(py_memory, &py_memory_type);
    if (!m) {
        munmap(p, len);
        return NULL;
    }
    m->map = p;
    m->len = len;
    *base = (char *)b;
    return (PyObject *)m;
}

/* ---------------------------------------------------------------- module */

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    long e = PyLong_AsLong(arg);
    if (e == -1 && PyErr_Occurred()) return NULL;
    if (e < 0 || e >= SCDB_ERR_COUNT) return PyUnicode_FromFormat("unknown scdb_err %ld", e);
    return PyUnicode_FromString(scdb_strerror((scdb_err)e));
}

static PyObject *mod_weights_fingerprint(PyObject *self, PyObject *arg)
{
    const char *dir = PyUnicode_AsUTF8(arg);
    char fp[33], msg[512] = "";
    scdb_err e;
    (void)self;
    if (!dir) return NULL;
    Py_BEGIN_ALLOW_THREADS
    e = scdb_weights_fingerprint(dir, fp, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (e) return py_err(e, "%s", msg[0] ? msg : dir);
    return PyUnicode_FromString(fp);
}

static PyMethodDef mod_methods[] = {
    {"strerror", mod_strerror, METH_O,
     "strerror(code) -> str\n\nName an scdb_err code: \"SCDB_ESHAPE: shape mismatch\"."},
    {"weights_fingerprint", mod_weights_fingerprint, METH_O,
     "weights_fingerprint(model_dir) -> str\n\nThe weights fingerprint of a model directory (scdb's own\n"
     "layout or a Hugging Face checkpoint, one file or sharded) or of a PEFT\n"
     "LoRA adapter directory (its merged weights over its base): 32 hex digits\n"
     "over the tensors (schema/FORMATS.md, \"Weights fingerprint\"), what a pair\n"
     "records as the consumer it was calibrated for.  Client.register(...,\n"
     "weights_fp=...) sends it.  Reads every weight once."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(mod_doc,
"The client of the scdb sidecar cache broker (a CPython extension over libscdb).\n"
"\n"
"A serving process connects to the broker, registers as the producer or a\n"
"consumer of one model under one codebook, and then:\n"
"\n"
"    producer                                consumer\n"
"    prefill the prompt                      c.lookup(tokens) -> matched tokens\n"
"    c.put(tokens, payloads)   (raw KV)      a = c.arena(capacity)\n"
"    or write H_in into c.states_arena()     c.get(tokens, a) -> tokens written\n"
"       and c.put_states(tokens, sa)         a.pos, a.k, a.v: the decoded KV,\n"
"                                            NumPy views of shared memory\n"
"                                            (torch.from_numpy: no copy)\n"
"\n"
"    with scdb.Client(endpoint) as c:\n"
"        c.register(\"code\", \"consumer\", \"base-scd\")\n"
"        toks = numpy.frombuffer(prompt, dtype=numpy.uint8).astype(numpy.int32)\n"
"        with c.arena(512) as a:\n"
"            n = c.get(toks, a)          # a.k[:, :n] is the prefix's K\n"
"\n"
"Live sessions (a.session(budget, policy, cadence, n_heads)) keep an arena\n"
"within a slot budget with the broker's eviction policy while the process\n"
"decodes into it.  Errors are scdb.Error subclasses, one per scdb_err family\n"
"(scdb.TimeoutError, scdb.NotFoundError, scdb.ShapeError, scdb.ClosedError,\n"
"...), carrying the broker's message.\n"
"\n"
"Threads: blocking calls release the GIL; a Client (and its arenas and\n"
"sessions) serves one call at a time: a second thread's call raises\n"
"scdb.BusyError.  Use one Client per thread.  Fork: a child process must\n"
"not use a Client it inherited (multiprocessing's 'fork'): connect anew.\n"
"\n"
"Arrays outlive their arena: after Arena.close() or Client.close() an array\n"
"taken from a.k stays valid memory (this module keeps its own mapping of\n"
"the pages until the last array is released), only detached from the\n"
"broker.  Tokens: a 1-D NumPy int32 array is used in place; any other\n"
"integer array, bytes or sequence of ints is converted.");

static struct PyModuleDef scdb_module = {
    PyModuleDef_HEAD_INIT, "scdb", mod_doc, -1, mod_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_scdb(void)
{
    PyObject *m;
    PyTypeObject *types[] = {&py_client_type, &py_arena_type, &py_states_arena_type,
                             &py_session_type, &py_memory_type};
    const char *names[] = {"Client", "Arena", "StatesArena", "Session", "_Memory"};

    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    m = PyModule_Create(&scdb_module);
    if (!m) return NULL;
    if (py_errors_init(m)) goto fail;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i])) {
            Py_DECREF(types[i]);
            goto fail;
        }
    }
    if (PyModule_AddStringConstant(m, "PRODUCER", "producer") ||
        PyModule_AddStringConstant(m, "CONSUMER", "consumer") ||
        PyModule_AddStringConstant(m, "__version__", SCDB_PY_VERSION))
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
