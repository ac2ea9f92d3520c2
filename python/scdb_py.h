/*
 * scdb_py.h — the `scdb` Python module (a CPython extension over libscdb,
 * client/scdb.h): the objects' layouts and the helpers its files share.
 *
 *   Python object          owns                          C handle (libscdb)
 *   -------------          ----                          ------------------
 *   scdb.Client  --------> the connection                scdb *
 *     ^  ^                   busy flag: one call at a time
 *     |  |                   deferred frees (see below)
 *     |  scdb.Arena -----> a KV arena                    scdb_arena *
 *     |    |  \               pos, k, v: NumPy arrays over
 *     |    |   `---------> scdb._Memory: this module's own mapping of the
 *     |    |               arena's cache (mremap of libscdb's mapping), the
 *     |    |               base of every array it hands out
 *     |    scdb.Session -> a live session on the arena   scdb_session *
 *     scdb.StatesArena --> a states arena (put_states)   scdb_arena *
 *
 * Arrows are strong references, so a Client outlives its arenas and an
 * arena its session.  libscdb frees an arena's handle in scdb_arena_free and
 * every arena's in scdb_close, so a C pointer held here is valid only while
 * every object above it is open: py_arena_live() / py_session_live() check
 * the chain before each use and never touch a pointer past it.
 *
 * Arrays outlive the arena.  A NumPy array (or torch tensor) taken from
 * Arena.k holds a buffer export of the arena's _Memory, which is a second
 * mapping of the same shared pages (mremap with old_size 0), unmapped only
 * when the last export goes.  So Arena.close() and Client.close() never
 * leave an array pointing at unmapped memory: the array stays readable and
 * writable, merely detached (the broker no longer writes into it).
 *
 * Threads.  libscdb handles are not thread-safe.  Every call that touches a
 * handle runs between py_client_enter() and py_client_leave(), which set and
 * clear the Client's busy flag under the GIL; a second thread that comes in
 * while the flag is set gets scdb.BusyError instead of racing.  Blocking
 * calls release the GIL in between.  An Arena or Session collected while
 * another thread is inside a call cannot free its C handle then: it is
 * queued on the Client and freed by the next enter or leave.
 */
#ifndef SCDB_PY_H
#define SCDB_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "scdb.h"

#if PY_VERSION_HEX >= 0x030D0000
#define py_finalizing() Py_IsFinalizing()
#else
#define py_finalizing() _Py_IsFinalizing()
#endif

/* ------------------------------------------------------------- objects */

typedef struct py_pending {
    int is_session;                /* 1: scdb_session_close, 0: arena free */
    void *ptr;
} py_pending;

typedef struct py_client {
    PyObject_HEAD
    scdb *h;                       /* NULL once closed                      */
    int busy;                      /* a call is in progress (GIL released)  */
    int registered;
    int timeout_ms;
    char role[16], model[128], codebook[128];
    char endpoint[512];
    scdb_get_result last_get;
    int have_last_get;
    PyObject *last_recompute;      /* dict of the last get with recompute=,
                                      or NULL                               */
    py_pending *pending;           /* frees deferred while busy             */
    size_t n_pending, cap_pending;
} py_client;

struct py_session;

typedef struct py_arena {
    PyObject_HEAD
    py_client *client;             /* strong                                */
    scdb_arena *a;                 /* NULL once closed                      */
    int is_states;
    int capacity;
    int n_layers, n_kv_heads, head_dim;  /* KV arena                        */
    int states_layers, states_dim;       /* states arena                    */
    PyObject *mem;                 /* scdb._Memory over the cache / states  */
    char *mem_base;                /* the address libscdb's mapping had     */
    int32_t *pos;                  /* libscdb's pointers (for offsets)      */
    float *k, *v, *states;
    PyObject *pos_a, *k_a, *v_a;   /* arrays, made at first use             */
    struct py_session *session;    /* borrowed: its open session, if any    */
} py_arena;

typedef struct py_session {
    PyObject_HEAD
    py_arena *arena;               /* strong                                */
    scdb_session *s;               /* NULL once closed                      */
    int n_heads;
    scdb_session_evict_result last;
    int have_last;
} py_session;

extern PyTypeObject py_client_type, py_arena_type, py_states_arena_type, py_session_type,
    py_memory_type;

/* ------------------------------------------------------------- errors */

/* Raise the scdb.Error subclass for e with a message (printf-like, as
 * PyUnicode_FromFormat).  Always returns NULL. */
PyObject *py_err(scdb_err e, const char *fmt, ...);
/* Raise for e with the handle's scdb_last_error() (or scdb_strerror). */
PyObject *py_err_handle(scdb *h, scdb_err e);
/* Create the exception classes in module m.  -1 on failure. */
int py_errors_init(PyObject *m);

/* An integer argument `name` (an int or anything with __index__; a float
 * is a TypeError) into *out when lo <= o <= hi.  Else -1 with an exception
 * whose message states the argument, its value and the range: OverflowError
 * when e is SCDB_OK (the value does not fit the C parameter), else the scdb
 * error e.  For every integer argument, so that none wraps modulo 2**32. */
int py_int_arg(PyObject *o, const char *name, long long lo, long long hi, scdb_err e,
               long long *out);
/* py_int_arg over 0 .. 2**32-1 (a block index, a budget), OverflowError. */
int py_u32_arg(PyObject *o, const char *name, unsigned int *out);

/* ------------------------------------------------------------- calls */

/* Start a call on c's handle: ClosedError if closed, BusyError if another
 * thread is in a call; runs deferred frees.  0 or -1 (exception set). */
int py_client_enter(py_client *c);
/* End it: deferred frees, clear the busy flag.  Keeps a pending exception. */
void py_client_leave(py_client *c);
/* Free an arena / close a session now if c is idle, else queue it. */
void py_client_defer(py_client *c, int is_session, void *ptr);

/* Is the arena / session (and everything it hangs on) still open? */
int py_arena_live(const py_arena *a);
int py_session_live(const py_session *s);
/* ClosedError naming what is closed, when it is not live; 0 when live. */
int py_arena_check(const py_arena *a);

/* Build an Arena (states 0) or StatesArena over a new libscdb arena.
 * Steals nothing; on failure frees the arena and returns NULL. */
PyObject *py_arena_wrap(py_client *c, scdb_arena *a, int states);
/* Open a live session on arena a (Arena.session). */
PyObject *py_session_open(py_arena *a, PyObject *args, PyObject *kw);

/* ------------------------------------------------------------- tokens */

typedef struct py_tokens {
    const int32_t *data;
    size_t n;
    Py_buffer view;                /* held on the zero-copy path            */
    int have_view;
    int32_t *owned;                /* converted copy                        */
} py_tokens;

/* Tokens from a 1-D buffer (C-contiguous int32: no copy) or any sequence
 * of integers (converted).  DtypeError, ShapeError, RangeError (outside
 * 0 .. 2^31-1).  0 or -1; release with py_tokens_release either way. */
int py_tokens_get(PyObject *o, py_tokens *t);
void py_tokens_release(py_tokens *t);

/* A C-contiguous buffer of float32 with ndim dimensions (what: its name in
 * messages).  DtypeError, ShapeError.  0 (view held) or -1. */
int py_f32_buffer(PyObject *o, int ndim, const char *what, Py_buffer *view);

/* ------------------------------------------------------------- NumPy */

/* An array of count items of dtype ("int32", "float32") at byte offset of
 * mem's buffer, reshaped to shape[ndim] (no copy: its base holds mem). */
PyObject *py_array_view(PyObject *mem, const char *dtype, Py_ssize_t offset, int ndim,
                        const Py_ssize_t *shape);
/* A new int32 array holding a copy of src[n]. */
PyObject *py_array_i32(const int32_t *src, size_t n);
/* scdb._Memory: a second mapping of the shared pages under [lo, hi);
 * *base gets the page-aligned address the offsets count from. */
PyObject *py_memory_dup(const void *lo, const void *hi, char **base);

#endif /* SCDB_PY_H */
