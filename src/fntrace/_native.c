/*
 * fntrace._native: the native twin of the hot path.
 *
 * Each function here mirrors one Python function, branch by branch, and is swapped in
 * for it when the extension is importable (unless FNTRACE_PURE=1):
 *
 *   core/dispatch.py   on_py_start, on_py_start_global, on_py_return, on_py_resume,
 *                      on_py_throw, on_py_unwind, and the setprofile hook (3.11)
 *   ring_buffer.py     RingBuffer.write / write_payload (the RingBufferBase type)
 *   tracers/function.py  function_trace_call
 *   fgraph.py          function_graph_enter, fgraph_return, and its fast lane
 *   tracers/function_graph.py  graph_entry, graph_return, and its fast-lane pair
 *                      (graph_lane)
 *   record_codec.py    encode / decode (in _native_encode.c: the trace file's records)
 *
 * The objects stay Python objects (records, ops, shadow-stack frames ...): this file
 * reads and writes their __slots__ at the offsets their member descriptors give, so the
 * control path in Python and the hot path here share one state.  User callbacks are
 * called as Python callables; only the machinery is native.
 *
 * A callback that raises Exception or SystemExit is handed to the Python _contain()
 * (counted, reported once); anything else (KeyboardInterrupt) propagates, as in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

/* record_t, the record types (FNT_TRACE_*) and flag bits (FNT_HAS_PAYLOAD): generated
 * by setup.py from record_format.py, their one definition */
#include "fntrace_record_format.h"

/* -- Version/platform shims ------------------------------------------------------ */

#if PY_VERSION_HEX >= 0x030C0000   /* Python 3.12.0 */
#define FETCH_EXC() PyErr_GetRaisedException()
#else
static PyObject *
FETCH_EXC(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v != NULL && tb != NULL)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
}
#endif

static inline long long
now_ns(void)
{
    /* time.monotonic_ns() reads CLOCK_MONOTONIC too: both paths share one clock. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static inline long long
slot_ll(PyObject *obj, Py_ssize_t off)
{
    PyObject *v = SLOT(obj, off);
    if (v == NULL || v == Py_None)
        return 0;
    if (v == Py_True)
        return 1;
    if (v == Py_False)
        return 0;
    return PyLong_AsLongLong(v);
}

/* -- State shared with the Python side (set once by init()) ----------------------- */

static PyObject *g_sites;          /* dispatch.sites: id(code) -> record */
static PyObject *g_no_site;        /* dispatch.no_site: id(code) -> code the trap turned away */
static PyObject *g_by_code;        /* record_table.by_code */
static PyObject *g_root;           /* records.ROOT */
static PyObject *g_G;              /* dispatch.G */
static PyTypeObject *g_regs_type;  /* core.regs.FtraceRegs */
static PyObject *g_contain;        /* dispatch._contain(op, exc) */
static PyObject *g_parent_slow;    /* dispatch._parent_slow(frame) */
static PyObject *g_return_offsets; /* dispatch._return_offsets(code) */
static PyObject *g_profile_resume; /* dispatch._profile_resume(rec, frame) */
static PyObject *g_profile_return; /* dispatch._profile_return(rec, frame, arg) */
static PyObject *g_no_retval;      /* core.regs._NO_RETVAL */
static PyObject *g_args_sep;       /* "\0": between the names and values of args_payload */
static long long g_REGS_EN, g_RET_EN;

/* slot offsets */
static Py_ssize_t off_rec_func, off_rec_ops, off_rec_flags, off_rec_ip, off_rec_gen_start;
static Py_ssize_t off_G_trace_function, off_G_trace_op, off_G_ret_handler, off_G_resume_handler,
                  off_G_trap;
static PyObject *g_disable;         /* sys.monitoring.DISABLE */
static Py_ssize_t off_regs_frame, off_regs_rec, off_regs_regs, off_regs_retval;
static Py_ssize_t off_ops_private;
static Py_ssize_t off_tr_tracing_on, off_tr_local, off_tr_serial;

static PyObject *str_buf, *str_cpu_buffer;

static Py_ssize_t
slot_offset(PyObject *type, const char *name)
{
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL)
        return -1;
    if (!PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s is not a __slots__ member", name);
        Py_DECREF(d);
        return -1;
    }
    Py_ssize_t off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return off;
}

/* -- Small helpers ----------------------------------------------------------------- */

/* A pointer-keyed cache in front of the id()-keyed dicts (sites, by_code): found
 * entries only, so an insertion on the Python side needs no notice; a removal must
 * clear it (cache_clear(), called by the Python side), as a freed object's address
 * may come back for another. */
#define PCACHE_SIZE 4096            /* power of two */
typedef struct { void *key; PyObject *value; } pcache_entry;
typedef struct { pcache_entry e[PCACHE_SIZE]; } pcache;
static pcache cache_sites, cache_by_code, cache_no_site;
static PyObject *g_sites_dict_for_cache, *g_by_code_dict_for_cache, *g_no_site_dict_for_cache;

static inline size_t
phash(void *p)
{
    uintptr_t x = (uintptr_t)p >> 4;
    x ^= x >> 17;
    return (size_t)(x * 0x9E3779B97F4A7C15ULL) & (PCACHE_SIZE - 1);
}

static inline PyObject *
lookup_id_slow(PyObject *dict, void *ptr)
{
    PyObject *key = PyLong_FromVoidPtr(ptr);
    if (key == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(dict, key);
    Py_DECREF(key);
    return v;
}

static inline PyObject *
lookup_id(PyObject *dict, void *ptr)
{
    /* dict keyed by id(obj): borrowed result, NULL if absent (no error set). */
    pcache *c = dict == g_sites_dict_for_cache ? &cache_sites
              : dict == g_by_code_dict_for_cache ? &cache_by_code
              : dict == g_no_site_dict_for_cache ? &cache_no_site : NULL;
    if (c == NULL)
        return lookup_id_slow(dict, ptr);
    size_t h = phash(ptr);
    for (int probe = 0; probe < 4; probe++) {
        pcache_entry *e = &c->e[(h + probe) & (PCACHE_SIZE - 1)];
        if (e->key == ptr)
            return e->value;
        if (e->key == NULL) {
            PyObject *v = lookup_id_slow(dict, ptr);
            if (v != NULL) {
                e->key = ptr;
                e->value = v;       /* borrowed: the dict keeps it while the entry lives */
            }
            return v;
        }
    }
    return lookup_id_slow(dict, ptr);   /* a crowded neighbourhood: no caching */
}

static PyObject *
cache_forget(PyObject *self, PyObject *arg)
{
    /* Drop one address from every cache (every probe slot holding it). */
    void *ptr = PyLong_AsVoidPtr(arg);
    if (ptr == NULL && PyErr_Occurred())
        return NULL;
    pcache *caches[3] = {&cache_sites, &cache_by_code, &cache_no_site};
    for (int c = 0; c < 3; c++) {
        size_t h = phash(ptr);
        for (int probe = 0; probe < 4; probe++) {
            pcache_entry *e = &caches[c]->e[(h + probe) & (PCACHE_SIZE - 1)];
            if (e->key == ptr) {
                e->key = NULL;
                e->value = NULL;
            }
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
cache_clear(PyObject *self, PyObject *unused)
{
    memset(&cache_sites, 0, sizeof(cache_sites));
    memset(&cache_by_code, 0, sizeof(cache_by_code));
    memset(&cache_no_site, 0, sizeof(cache_no_site));
    Py_RETURN_NONE;
}

static inline long long
rec_flags(PyObject *rec)
{
    PyObject *f = SLOT(rec, off_rec_flags);
    return f ? PyLong_AsLongLong(f) : 0;
}

/* What dispatch.contain answered (r, a new reference or NULL) about exc (stolen): 0
 * contained; -1 with exc raised again when a signal handler of the program raised it.
 * contain() failing itself (at the recursion limit, say) counts as contained. */
static int
contained(PyObject *r, PyObject *exc)
{
    if (r == NULL) {
        PyErr_Clear();
        Py_XDECREF(exc);
        return 0;
    }
    int back = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (back > 0 && exc != NULL) {
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
        return -1;
    }
    if (back < 0)
        PyErr_Clear();
    Py_XDECREF(exc);
    return 0;
}

/* An ops callback raised: contain it like dispatch._contain, or let it through. */
static int
contain(PyObject *who)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_SystemExit))
        return -1;
    PyObject *exc = FETCH_EXC();
    PyObject *r = PyObject_CallFunctionObjArgs(g_contain, who ? who : Py_None,
                                               exc ? exc : Py_None, NULL);
    return contained(r, exc);
}

/* The caller's record (a new reference): ROOT without a caller. */
static PyObject *
parent_of(PyFrameObject *frame)
{
    PyFrameObject *back = PyFrame_GetBack(frame);
    if (back == NULL)
        return Py_NewRef(g_root);
    PyCodeObject *bc = PyFrame_GetCode(back);
    PyObject *p = lookup_id(g_by_code, bc);
    Py_DECREF(bc);
    if (p != NULL) {
        Py_DECREF(back);
        return Py_NewRef(p);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(back);
        return NULL;
    }
    p = PyObject_CallOneArg(g_parent_slow, (PyObject *)back);
    Py_DECREF(back);
    return p;
}

/* FtraceRegs(frame, rec, regs, retval) without running its __init__. */
static PyObject *
new_regs(PyFrameObject *frame, PyObject *rec, int regs, PyObject *retval)
{
    PyObject *r = g_regs_type->tp_alloc(g_regs_type, 0);
    if (r == NULL)
        return NULL;
    SLOT(r, off_regs_frame) = Py_NewRef((PyObject *)frame);
    SLOT(r, off_regs_rec) = Py_NewRef(rec);
    SLOT(r, off_regs_regs) = Py_NewRef(regs ? Py_True : Py_False);
    if (retval != NULL)
        SLOT(r, off_regs_retval) = Py_NewRef(retval);
    else
        SLOT(r, off_regs_retval) = Py_NewRef(g_no_retval);   /* "no return value" */
    return r;
}

/* -- Quiescent states (ops.synchronize) ----------------------------------------------
 *
 * The Python dispatcher is seen on a thread's stack by sys._current_frames(); this one
 * has no frame, so each thread keeps a record instead:
 *     busy   callbacks of this thread running now (nesting depth)
 *     count  callbacks it ever entered
 * A thread is past a grace period when it is not busy or its count moved on. */
/* One call on the native shadow stack (the fast lane of fgraph, below). */
typedef struct {
    void *key;                 /* which frame: see fkey below */
    PyObject *code;            /* with an interpreter-frame key: the code, compared too */
    PyObject *ref;             /* with a frame-object key: a strong reference to it */
    unsigned int ip;
    unsigned int depth;
    long long calltime;
} fg_frame;

typedef struct thread_rec {
    long busy;
    unsigned long count;
    unsigned long ident;
    struct thread_rec *next;
    /* fgraph's fast lane: this thread's native shadow stack */
    fg_frame *fs;
    int fs_n, fs_cap;
    int npy;                   /* frames on the thread's Python ShadowStack */
    long fs_epoch;
    long long overrun;         /* the ShadowStack's overrun, mirrored */
} thread_rec;

static thread_rec *g_threads;          /* every thread that ever ran a callback */
/* initial-exec: a plain %fs-relative load, not a __tls_get_addr call per access (the
 * default model for a dlopen()ed module); glibc keeps static TLS room for this. */
#define TLS_FAST __attribute__((tls_model("initial-exec")))
static _Thread_local thread_rec *tl_rec TLS_FAST;

static inline thread_rec *
my_rec(void)
{
    thread_rec *t = tl_rec;
    if (t == NULL) {
        /* Freed when the thread ends (thread_exit). */
        t = (thread_rec *)PyMem_RawCalloc(1, sizeof(thread_rec));
        if (t == NULL)
            return NULL;
        t->ident = PyThread_get_thread_ident();
        t->next = g_threads;       /* the GIL is held: no other writer */
        g_threads = t;
        tl_rec = t;
    }
    return t;
}

/* Which call (see "How the fast lane tells frames apart" below). */
typedef struct {
    void *key;
    PyObject *code;
    PyObject *ref;
} fkey;

/* fgraph's fast lane (see there).  Its user hands in a native entry/return pair, in a
 * capsule the module exports (graph_lane for the function_graph tracer): the lane calls
 * the pair and knows nothing else of its user, as the kernel's fgraph calls whatever
 * gops->entryfunc is. */
typedef struct {
    /* A call of `ip` at `depth` enters: 1 taken (its entry written, *calltime set), 0 not
     * for the lane (nothing done), -1 error.  `data` is borrowed: hold a reference
     * across anything that may run Python code. */
    int (*enter)(PyObject *data, thread_rec *t, const fkey *k, unsigned long ip, int depth,
                 long long *calltime);
    /* A call `enter` took returned (f: its frame, already off the stack) with `retval`
     * (NULL: none), `unwind` set when an exception left it: 0, -1 error. */
    int (*ret)(PyObject *data, thread_rec *t, const fg_frame *f, PyObject *retval,
               int unwind);
} fg_lane_ops;
#define LANE_CAPSULE "fntrace._native.fgraph_lane"
/* The pair this module exports: the lane calls it directly when it is the one in use,
 * inlined (the kernel's INDIRECT_CALL_1), so the lane costs what it did when it knew
 * only function_graph; any other pair goes through the pointer. */
#define LANE_INLINE static inline __attribute__((always_inline))
LANE_INLINE int graph_lane_enter(PyObject *tr, thread_rec *t, const fkey *k, unsigned long ip,
                                 int depth, long long *calltime);
LANE_INLINE int graph_lane_return(PyObject *tr, thread_rec *t, const fg_frame *f,
                                  PyObject *retval, int unwind);
#define INDIRECT_CALL_1(f, f1, ...) \
    (__builtin_expect((f) == (f1), 1) ? (f1)(__VA_ARGS__) : (f)(__VA_ARGS__))
static fg_lane_ops g_lane;           /* the pair of the lane's user (a copy: one load a call) */
static PyObject *g_fast_data;        /* the lane is open: its user's data */
static PyObject *g_lane_data;        /* still gets the returns of calls pushed here */
static long g_fg_epoch;
static PyObject *g_fgraph_enter_fn, *g_fgraph_return_fn, *g_py_fgraph_resume;
/* How the fast lane tells frames apart.  A frame object exists only once something asks
 * for it (PyEval_GetFrame makes one, ~300 instructions, and it is freed at return):
 * the sys.monitoring callbacks, which are given no frame, key a call by the address of
 * its interpreter frame instead, with the code object beside it.  That address is the
 * same from PY_START to PY_RETURN (and, for a generator, from each PY_RESUME to its
 * PY_YIELD: the frame lives in the generator) and is reused only after the call ended.
 * CPython quirk: it is reachable only through PyThreadState's public-but-unstable
 * fields — cframe->current_frame on 3.12, current_frame on 3.13 and 3.14; other
 * versions fall back to frame objects.  The setprofile back end is handed a frame
 * object anyway: it keys by that, keeping it alive while the call is on the stack. */

static inline int
fkey_of_current(PyObject *code, fkey *k)
{
#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030F0000
    k->key = (void *)PyThreadState_Get()->current_frame;
    k->code = code;
    k->ref = NULL;
    return k->key != NULL;
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
    PyThreadState *ts = PyThreadState_Get();
    k->key = ts->cframe ? (void *)ts->cframe->current_frame : NULL;
    k->code = code;
    k->ref = NULL;
    return k->key != NULL;
#else
    PyFrameObject *f = PyEval_GetFrame();
    k->key = (void *)f;
    k->code = NULL;
    k->ref = (PyObject *)f;
    return f != NULL;
#endif
}

static inline fkey
fkey_of_frame(PyObject *frame)
{
    fkey k = {(void *)frame, NULL, frame};
    return k;
}

static int fg_fast_enter(PyObject *rec, fkey k);
static int fg_fast_return(fkey k, PyObject *retval, int unwind);
static int fgraph_return_c(PyObject *rec, PyObject *frame, PyObject *retval, PyObject *unwind);

#define ENTER() thread_rec *_tr = my_rec(); if (_tr) { _tr->busy++; _tr->count++; }
#define LEAVE() if (_tr) _tr->busy--

static PyObject *
busy_threads(PyObject *self, PyObject *unused)
{
    /* [(ident, count)] of the threads inside a callback now, this thread excluded. */
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    unsigned long me = PyThread_get_thread_ident();
    for (thread_rec *t = g_threads; t != NULL; t = t->next) {
        if (t->busy > 0 && t->ident != me) {
            PyObject *item = Py_BuildValue("(kk)", t->ident, t->count);
            if (item == NULL || PyList_Append(out, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(item);
        }
    }
    return out;
}

static PyObject *
thread_count(PyObject *self, PyObject *arg)
{
    /* (busy, count) of the thread with this ident, or None. */
    unsigned long ident = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred())
        return NULL;
    for (thread_rec *t = g_threads; t != NULL; t = t->next)
        if (t->ident == ident && (t->busy > 0 || t->count))
            return Py_BuildValue("(lk)", t->busy, t->count);
    Py_RETURN_NONE;
}

/* -- The entry path --------------------------------------------------------------- */

static PyObject *g_function_trace_call;   /* this module's function_trace_call */
static int function_trace(PyObject *ip, PyObject *parent_ip, PyObject *op);

/* Call func(rec, parent, op, fregs) for a patched site entered in `frame`. */
static int
site_entry(PyObject *rec, PyFrameObject *frame, PyObject *func, PyObject *op)
{
    PyObject *parent = parent_of(frame);
    if (parent == NULL)
        return contain(op);
    if (func == g_function_trace_call && op != NULL) {
        /* The site's only ops is the function tracer: call it directly, as a site with
         * the ops' own trampoline would — no ftrace_regs, no Python-level call. */
        int rc = function_trace(rec, parent, op);
        Py_DECREF(parent);
        return rc < 0 ? contain(op) : 0;
    }
    PyObject *fregs = new_regs(frame, rec, (rec_flags(rec) & g_REGS_EN) != 0, NULL);
    if (fregs == NULL) {
        Py_DECREF(parent);
        return contain(op);
    }
    PyObject *args[4] = {rec, parent, op ? op : Py_None, fregs};
    ENTER();
    PyObject *r = func ? PyObject_Vectorcall(func, args, 4, NULL) : NULL;
    LEAVE();
    Py_DECREF(parent);
    Py_DECREF(fregs);
    if (r == NULL)
        return func ? contain(op) : 0;
    Py_DECREF(r);
    return 0;
}

/* A start that found no site (dispatch._miss): G.trap(code, globals), the back end's
 * discovery trap, may make one.  1: look again; 0: return None; 2: return DISABLE;
 * -1: an error not contained. */
static int
site_trap(PyObject *code)
{
    PyObject *trap = SLOT(g_G, off_G_trap);
    if (trap == NULL || trap == Py_None)
        return 0;
    PyObject *glb = PyEval_GetGlobals();         /* borrowed; no frame object made */
    Py_INCREF(trap);
    PyObject *args[2] = {code, glb ? glb : Py_None};
    PyObject *r = PyObject_Vectorcall(trap, args, 2, NULL);
    int t;
    if (r == NULL)
        t = contain(trap) < 0 ? -1 : 0;
    else {
        int b = PyObject_IsTrue(r);
        Py_DECREF(r);
        t = b < 0 ? (contain(trap) < 0 ? -1 : 0) : (b ? 1 : 2);
    }
    Py_DECREF(trap);
    return t;
}

#define MISS_OR_TRAP(rec, code) \
    if (rec == NULL) { \
        if (PyErr_Occurred()) \
            return NULL; \
        int t_ = site_trap(code); \
        if (t_ != 1) \
            return t_ < 0 ? NULL : Py_NewRef(t_ == 2 && g_disable ? g_disable : Py_None); \
        rec = lookup_id(g_sites, code); \
        if (rec == NULL) { \
            if (PyErr_Occurred()) \
                return NULL; \
            Py_RETURN_NONE; \
        } \
    }

/* A sys.monitoring entry (PY_START, PY_RESUME, PY_THROW) of `code` on fgraph's fast
 * lane: 1 done, 0 not for the lane, -1 error not contained. */
static int
fast_entry(PyObject *rec, PyObject *code)
{
    fkey k;
    if (!fkey_of_current(code, &k))
        return 0;
    Py_INCREF(rec);
    int r = fg_fast_enter(rec, k);
    if (r < 0)
        r = contain(g_fgraph_enter_fn) < 0 ? -1 : 1;
    Py_DECREF(rec);
    return r;
}

/* A sys.monitoring return (PY_RETURN, PY_YIELD, PY_UNWIND) of `code`: popped from
 * fgraph's fast lane if it is there.  1 done, 0 not there, -1 error not contained. */
static inline int
fast_return(PyObject *code, PyObject *retval, int unwind)
{
    thread_rec *t = tl_rec;
    if (t == NULL || t->fs_n == 0)
        return 0;
    fkey k;
    int r = fkey_of_current(code, &k) ? fg_fast_return(k, retval, unwind) : 0;
    if (r < 0)
        return contain(g_fgraph_return_fn) < 0 ? -1 : 1;
    return r;
}

static PyObject *
on_py_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* PY_START on a patched site, CALL_OPS dispatch (dispatch.on_py_start). */
    if (nargs < 1)
        Py_RETURN_NONE;
    PyObject *rec = lookup_id(g_sites, args[0]);
    MISS_OR_TRAP(rec, args[0])
    if (g_fast_data != NULL && SLOT(rec, off_rec_func) == g_fgraph_enter_fn) {
        int r = fast_entry(rec, args[0]);
        if (r < 0)
            return NULL;
        if (r)
            Py_RETURN_NONE;
    }
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        Py_RETURN_NONE;
    Py_INCREF(rec);
    PyObject *func = SLOT(rec, off_rec_func), *op = SLOT(rec, off_rec_ops);
    Py_XINCREF(func);
    Py_XINCREF(op);
    int rc = site_entry(rec, frame, func, op);
    Py_XDECREF(func);
    Py_XDECREF(op);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
on_py_start_global(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* PY_START without CALL_OPS: the one global target (dispatch.on_py_start_global). */
    if (nargs < 1)
        Py_RETURN_NONE;
    PyObject *rec = lookup_id(g_sites, args[0]);
    MISS_OR_TRAP(rec, args[0])
    if (g_fast_data != NULL && SLOT(g_G, off_G_trace_function) == g_fgraph_enter_fn) {
        int r = fast_entry(rec, args[0]);
        if (r < 0)
            return NULL;
        if (r)
            Py_RETURN_NONE;
    }
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        Py_RETURN_NONE;
    Py_INCREF(rec);
    PyObject *func = SLOT(g_G, off_G_trace_function), *op = SLOT(g_G, off_G_trace_op);
    Py_XINCREF(func);
    Py_XINCREF(op);
    int rc = site_entry(rec, frame, func, op);
    Py_XDECREF(func);
    Py_XDECREF(op);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* -- The return path (fgraph) ------------------------------------------------------ */

static int
site_return(PyObject *rec, PyFrameObject *frame, PyObject *retval, int unwind)
{
    PyObject *h = SLOT(g_G, off_G_ret_handler);
    if (h == NULL || h == Py_None)
        return 0;
    Py_INCREF(h);
    int rc = 0;
    if (h == g_fgraph_return_fn) {
        /* fgraph's own return path: no Python-level call */
        ENTER();
        rc = fgraph_return_c(rec, (PyObject *)frame, retval ? retval : Py_None,
                             unwind ? Py_True : Py_False);
        LEAVE();
        if (rc < 0)
            rc = contain(h);
        Py_DECREF(h);
        return rc;
    }
    PyObject *args[4] = {rec, (PyObject *)frame, retval ? retval : Py_None,
                         unwind ? Py_True : Py_False};
    ENTER();
    PyObject *r = PyObject_Vectorcall(h, args, 4, NULL);
    LEAVE();
    if (r == NULL)
        rc = contain(h);
    Py_XDECREF(r);
    Py_DECREF(h);
    return rc;
}

static PyObject *g_graph_ops;        /* fgraph.graph_ops */

/* fgraph.fgraph_resume in C: function_graph_enter(rec, parent, graph_ops, fregs), the
 * parent being the caller's record or None.  No bytecode runs, so no signal handler of
 * the program's runs here: a KeyboardInterrupt pending at a resume is raised in the
 * generator, where the program expects it (test_generators SignalAndYieldFromTest). */
static PyObject *
fgraph_resume_c(PyObject *rec, PyFrameObject *frame)
{
    PyObject *parent = NULL;
    PyFrameObject *back = PyFrame_GetBack(frame);
    if (back != NULL) {
        PyCodeObject *bc = PyFrame_GetCode(back);
        parent = lookup_id(g_by_code, bc);
        Py_DECREF(bc);
        Py_DECREF(back);
        if (parent == NULL && PyErr_Occurred())
            return NULL;
    }
    parent = Py_NewRef(parent != NULL ? parent : Py_None);
    PyObject *fregs = new_regs(frame, rec, (rec_flags(rec) & g_REGS_EN) != 0, NULL);
    if (fregs == NULL) {
        Py_DECREF(parent);
        return NULL;
    }
    PyObject *args[4] = {rec, parent, g_graph_ops, fregs};
    PyObject *r = PyObject_Vectorcall(g_fgraph_enter_fn, args, 4, NULL);
    Py_DECREF(parent);
    Py_DECREF(fregs);
    return r;
}

static int
site_resume(PyObject *rec, PyFrameObject *frame)
{
    PyObject *h = SLOT(g_G, off_G_resume_handler);
    if (h == NULL || h == Py_None)
        return 0;
    Py_INCREF(h);
    PyObject *args[3] = {rec, (PyObject *)frame,
                         (rec_flags(rec) & g_REGS_EN) ? Py_True : Py_False};
    ENTER();
    PyObject *r = (h == g_py_fgraph_resume && g_graph_ops != NULL && g_fgraph_enter_fn != NULL)
        ? fgraph_resume_c(rec, frame) : PyObject_Vectorcall(h, args, 3, NULL);
    LEAVE();
    int rc = 0;
    if (r == NULL)
        rc = contain(h);
    Py_XDECREF(r);
    Py_DECREF(h);
    return rc;
}

static PyObject *
on_py_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* PY_RETURN / PY_YIELD (dispatch.on_py_return). */
    if (nargs < 3)
        Py_RETURN_NONE;
    /* a call on fgraph's fast lane: matched by frame, no record lookup */
    int fast = fast_return(args[0], args[2], 0);
    if (fast)
        return fast < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *rec = lookup_id(g_sites, args[0]);
    if (rec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        Py_RETURN_NONE;
    Py_INCREF(rec);
    int rc = site_return(rec, frame, args[2], 0);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
on_py_unwind(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* PY_UNWIND, global only (dispatch.on_py_unwind). */
    if (nargs < 3)
        Py_RETURN_NONE;
    PyObject *rec = lookup_id(g_sites, args[0]);
    if (rec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (!(rec_flags(rec) & g_RET_EN))
        Py_RETURN_NONE;
    int fast = fast_return(args[0], args[2], 1);
    if (fast)
        return fast < 0 ? NULL : Py_NewRef(Py_None);
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        Py_RETURN_NONE;
    Py_INCREF(rec);
    int rc = site_return(rec, frame, args[2], 1);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
on_py_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* PY_RESUME (dispatch.on_py_resume). */
    if (nargs < 1)
        Py_RETURN_NONE;
    PyObject *rec = lookup_id(g_sites, args[0]);
    if (rec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (g_fast_data != NULL && SLOT(g_G, off_G_resume_handler) == g_py_fgraph_resume) {
        int r = fast_entry(rec, args[0]);
        if (r < 0)
            return NULL;
        if (r)
            Py_RETURN_NONE;
    }
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        Py_RETURN_NONE;
    Py_INCREF(rec);
    int rc = site_resume(rec, frame);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
on_py_throw(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* PY_THROW, global only (dispatch.on_py_throw). */
    if (nargs < 1)
        Py_RETURN_NONE;
    PyObject *rec = lookup_id(g_sites, args[0]);
    if (rec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (!(rec_flags(rec) & g_RET_EN))
        Py_RETURN_NONE;
    if (g_fast_data != NULL && SLOT(g_G, off_G_resume_handler) == g_py_fgraph_resume) {
        int r = fast_entry(rec, args[0]);
        if (r < 0)
            return NULL;
        if (r)
            Py_RETURN_NONE;
    }
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        Py_RETURN_NONE;
    Py_INCREF(rec);
    int rc = site_resume(rec, frame);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* -- The setprofile back end (3.11, or FNTRACE_BACKEND=profile) --------------------- */

/* A C-level profile function: no Python frame and, unlike a Python setprofile hook,
 * no copying of fast locals to f_locals and back around every call (3.11's
 * call_trampoline does that for Python hooks). */
typedef struct {
    PyObject_HEAD
    int call_ops;
} ProfileHookObject;

/* The program's own profile functions (arch/profile.py): thread ident -> callable,
 * called after fntrace's handling of each event, as CPython would call them. */
static PyObject *g_chain;
static PyObject *g_chain_skip;     /* dispatch.profile_chain_skip: set of idents */
static const char *const what_names[] = {"call", "exception", "line", "return", "c_call",
                                         "c_exception", "c_return", "opcode"};

static int
chain_call(PyFrameObject *frame, int what, PyObject *arg)
{
    if (what < 0 || what > 7)
        return 0;
    PyObject *key = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (key == NULL)
        return -1;
    PyObject *f = PyDict_GetItemWithError(g_chain, key);
    if (f == NULL) {
        Py_DECREF(key);
        return PyErr_Occurred() ? -1 : 0;
    }
    if ((what == PyTrace_C_RETURN || what == PyTrace_C_EXCEPTION)
            && g_chain_skip != NULL && PySet_GET_SIZE(g_chain_skip)) {
        /* the end of the sys.setprofile call that installed it: CPython would not
         * tell a profile function installed during a C call about that call's end */
        int had = PySet_Discard(g_chain_skip, key);
        if (had != 0) {
            Py_DECREF(key);
            return had < 0 ? -1 : 0;
        }
    }
    Py_INCREF(f);
    PyObject *ev = PyUnicode_InternFromString(what_names[what]);
    int rc = 0;
    /* What CPython's profile_trampoline does around a Python profile function: the
     * frame's locals synced to f_locals and back. */
    if (ev == NULL || PyFrame_FastToLocalsWithError(frame) < 0)
        rc = -1;
    else {
        PyObject *r = PyObject_CallFunctionObjArgs(f, (PyObject *)frame, ev,
                                                   arg ? arg : Py_None, NULL);
        PyFrame_LocalsToFast(frame, 1);
        if (r == NULL) {
            /* as CPython does: a profile function that raises is removed, and the
             * exception goes on */
            PyObject *exc = FETCH_EXC();
            if (PyDict_DelItem(g_chain, key) < 0)
                PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
            PyErr_SetRaisedException(exc);
#else
            PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
            rc = -1;
        }
        Py_XDECREF(r);
    }
    Py_XDECREF(ev);
    Py_DECREF(f);
    Py_DECREF(key);
    return rc;
}

static int c_profile_fntrace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

static int
c_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    int rc = c_profile_fntrace(obj, frame, what, arg);
    if (rc == 0 && g_chain != NULL && PyDict_GET_SIZE(g_chain))
        rc = chain_call(frame, what, arg);
    return rc;
}

static int
c_profile_fntrace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    if (what != PyTrace_CALL && what != PyTrace_RETURN)
        return 0;
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *rec = lookup_id(g_sites, code);
    if (rec == NULL && !PyErr_Occurred() && what == PyTrace_CALL
            && lookup_id(g_no_site, code) == NULL && !PyErr_Occurred()
            && site_trap((PyObject *)code) == 1)
        /* the discovery trap listed its module (see arch/profile.py) */
        rec = lookup_id(g_sites, code);
    Py_DECREF(code);
    if (rec == NULL) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return 0;
    }
    Py_INCREF(rec);
    int rc = 0;
    if (what == PyTrace_CALL) {
        PyObject *gs = SLOT(rec, off_rec_gen_start);
        long gen_start = gs ? PyLong_AsLong(gs) : -1;
        if (gen_start >= 0 && PyFrame_GetLasti(frame) != gen_start) {
            /* a generator resuming, not a call: only a graph user sees it */
#if PY_VERSION_HEX >= 0x030C0000
            /* 3.12+ report an exception leaving the frame as a return of None (not
             * NULL): the Python twin tells them apart, and needs to see resumes */
            PyObject *r = PyObject_CallFunctionObjArgs(g_profile_resume, rec, frame, NULL);
            rc = r ? 0 : -1;
            Py_XDECREF(r);
#else
            if (rec_flags(rec) & g_RET_EN) {
                int r = 0;
                if (g_fast_data != NULL && SLOT(g_G, off_G_resume_handler) == g_py_fgraph_resume)
                    r = fg_fast_enter(rec, fkey_of_frame((PyObject *)frame));
                if (r < 0)
                    rc = contain(g_fgraph_enter_fn);
                else if (r == 0)
                    rc = site_resume(rec, frame);
            }
#endif
        }
        else if (g_fast_data != NULL && (((ProfileHookObject *)obj)->call_ops
                                       ? SLOT(rec, off_rec_func)
                                       : SLOT(g_G, off_G_trace_function)) == g_fgraph_enter_fn
                 && (rc = fg_fast_enter(rec, fkey_of_frame((PyObject *)frame))) != 0) {
            /* on fgraph's fast lane */
            rc = rc < 0 ? contain(g_fgraph_enter_fn) : 0;
        }
        else if (((ProfileHookObject *)obj)->call_ops) {
            PyObject *func = SLOT(rec, off_rec_func), *op = SLOT(rec, off_rec_ops);
            Py_XINCREF(func);
            Py_XINCREF(op);
            rc = site_entry(rec, frame, func, op);
            Py_XDECREF(func);
            Py_XDECREF(op);
        }
        else {
            PyObject *func = SLOT(g_G, off_G_trace_function), *op = SLOT(g_G, off_G_trace_op);
            Py_XINCREF(func);
            Py_XINCREF(op);
            rc = site_entry(rec, frame, func, op);
            Py_XDECREF(func);
            Py_XDECREF(op);
        }
    }
    else if (rec_flags(rec) & g_RET_EN) {
        PyObject *h = SLOT(g_G, off_G_ret_handler);
        if (h != NULL && h != Py_None) {
#if PY_VERSION_HEX >= 0x030C0000
            if (arg == NULL || arg == Py_None) {
                PyObject *r = PyObject_CallFunctionObjArgs(g_profile_return, rec, frame,
                                                           Py_None, NULL);
                rc = r ? 0 : -1;
                Py_XDECREF(r);
            }
            else
                rc = site_return(rec, frame, arg, 0);
#else
            /* 3.11 tells a C profile function about an exception leaving the frame by
             * a NULL arg: no need to look at the last instruction as the Python hook does. */
            rc = site_return(rec, frame, arg, arg == NULL);
#endif
        }
    }
    Py_DECREF(rec);
    return rc;
}

static PyObject *
ProfileHook_call(PyObject *self, PyObject *args, PyObject *kw)
{
    /* Called as a Python profile function (threading.setprofile in a new thread): put
     * the C profile function in its place for this thread, then handle the event. */
    PyObject *frame, *event, *arg;
    if (!PyArg_ParseTuple(args, "OOO", &frame, &event, &arg))
        return NULL;
    PyEval_SetProfile(c_profile, self);
    if (PyFrame_Check(frame) && PyUnicode_Check(event)) {
        int what = -1;
        if (PyUnicode_CompareWithASCIIString(event, "call") == 0)
            what = PyTrace_CALL;
        else if (PyUnicode_CompareWithASCIIString(event, "return") == 0)
            what = PyTrace_RETURN;
        else if (PyUnicode_CompareWithASCIIString(event, "c_call") == 0)
            what = PyTrace_C_CALL;
        else if (PyUnicode_CompareWithASCIIString(event, "c_return") == 0)
            what = PyTrace_C_RETURN;
        else if (PyUnicode_CompareWithASCIIString(event, "c_exception") == 0)
            what = PyTrace_C_EXCEPTION;
        if (what >= 0 && c_profile(self, (PyFrameObject *)frame, what, arg) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
ProfileHook_install(PyObject *self, PyObject *unused)
{
    PyEval_SetProfile(c_profile, self);
    Py_RETURN_NONE;
}

static PyMethodDef ProfileHook_methods[] = {
    {"install", ProfileHook_install, METH_NOARGS, "install as this thread's profile function"},
    {NULL}
};

static PyMemberDef ProfileHook_members[] = {
    {"call_ops", T_INT, offsetof(ProfileHookObject, call_ops), 0, NULL},
    {NULL}
};

static PyTypeObject ProfileHook_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fntrace._native.ProfileHook",
    .tp_basicsize = sizeof(ProfileHookObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_call = ProfileHook_call,
    .tp_methods = ProfileHook_methods,
    .tp_members = ProfileHook_members,
    .tp_doc = "The setprofile back end's hook (C profile function).",
};

/* -- Ring buffer (ring_buffer.RingBuffer.write) ------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t cpu;
    Py_ssize_t nrec;
    long long seq;
    long long read;
    long long overrun;
    long long dropped;
    char overwrite;
    PyObject *data;        /* bytearray, nrec * FNT_RECORD_SIZE bytes */
    PyObject *sink;        /* None, or the ChunkQueue handoff() appends to */
    PyObject *payloads;    /* dict seq -> object */
} RingBufferObject;


/* ring_buffer.PAYLOAD_COST: what a payload counts in ChunkQueue.pending */
#define PAYLOAD_COST 128
static PyObject *str_items, *str_append, *str_notify_fd, *str_pending, *str_limit, *str_closed;

static long long
attr_ll(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return r;
}

/* Are all keys of `payloads` ints in start..end-1? */
static int
payloads_within(PyObject *payloads, long long start, long long end)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(payloads, &pos, &key, &value)) {
        if (!PyLong_CheckExact(key))
            return 0;
        int overflow;
        long long k = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow || k < start || k >= end)
            return 0;
    }
    return 1;
}

/* RingBuffer.handoff (ring_buffer._PyRingBufferBase.handoff): the records not handed
 * over yet, copied out as one chunk and appended to the sink's ChunkQueue, its reader
 * poked through notify_fd.  No Python frame runs here: a thread at its recursion limit
 * hands its chunk over like any other.  0, or -1 with an exception set. */
static int
rb_handoff(RingBufferObject *rb)
{
    PyObject *q = rb->sink;
    if (q == NULL || q == Py_None)
        return 0;
    long long start = rb->seq - rb->nrec > rb->read ? rb->seq - rb->nrec : rb->read;
    long long end = rb->seq;
    if (end <= start)
        return 0;
    if (rb->data == NULL || !PyByteArray_Check(rb->data)
            || PyByteArray_GET_SIZE(rb->data) < rb->nrec * FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer data is not set up");
        return -1;
    }
    Py_ssize_t n = (Py_ssize_t)(end - start), nrec = rb->nrec, s = (Py_ssize_t)(start % nrec);
    PyObject *chunk = PyBytes_FromStringAndSize(NULL, n * FNT_RECORD_SIZE);
    if (chunk == NULL)
        return -1;
    char *dst = PyBytes_AS_STRING(chunk), *src = PyByteArray_AS_STRING(rb->data);
    if (s + n <= nrec)
        memcpy(dst, src + s * FNT_RECORD_SIZE, (size_t)n * FNT_RECORD_SIZE);
    else {
        Py_ssize_t k = nrec - s;
        memcpy(dst, src + s * FNT_RECORD_SIZE, (size_t)k * FNT_RECORD_SIZE);
        memcpy(dst + k * FNT_RECORD_SIZE, src, (size_t)(n - k) * FNT_RECORD_SIZE);
    }
    PyObject *pay = PyDict_New();
    if (pay == NULL) {
        Py_DECREF(chunk);
        return -1;
    }
    /* nothing between the check and the swap can run code that writes a payload */
    int whole = rb->payloads != NULL && PyDict_CheckExact(rb->payloads)
        && PyDict_GET_SIZE(rb->payloads) && payloads_within(rb->payloads, start, end);
    if (whole) {
        /* every payload held is this chunk's (the rule while a sink is attached): the
         * dict itself goes, the buffer keeps the new one, no entry is moved */
        PyObject *held = rb->payloads;
        rb->payloads = pay;
        pay = held;
    }
    else if (rb->payloads != NULL && PyDict_GET_SIZE(rb->payloads)) {
        PyObject *keys = PyDict_Keys(rb->payloads);
        if (keys == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
            PyObject *key = PyList_GET_ITEM(keys, i);
            long long k = PyLong_AsLongLong(key);
            if (k == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                continue;
            }
            if (k < start || k >= end)
                continue;
            PyObject *v = PyDict_GetItemWithError(rb->payloads, key);
            if (v == NULL || PyDict_SetItem(pay, key, v) < 0 || PyDict_DelItem(rb->payloads, key) < 0) {
                Py_DECREF(keys);
                goto fail;
            }
        }
        Py_DECREF(keys);
    }
    PyObject *item = Py_BuildValue("(nOLO)", rb->cpu, chunk, start, pay);
    if (item == NULL)
        goto fail;
    PyObject *items = PyObject_GetAttr(q, str_items);
    PyObject *r = items ? PyObject_CallMethodOneArg(items, str_append, item) : NULL;
    Py_XDECREF(items);
    Py_DECREF(item);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    rb->read = end;
    long long npay = (long long)PyDict_GET_SIZE(pay);
    Py_DECREF(chunk);
    Py_DECREF(pay);
    long long pend = attr_ll(q, str_pending);
    if (pend == -1 && PyErr_Occurred())
        return -1;
    pend += (long long)n * FNT_RECORD_SIZE + PAYLOAD_COST * npay;
    PyObject *pv = PyLong_FromLongLong(pend);
    if (pv == NULL || PyObject_SetAttr(q, str_pending, pv) < 0) {
        Py_XDECREF(pv);
        return -1;
    }
    Py_DECREF(pv);
    long long fd = attr_ll(q, str_notify_fd);
    if (fd == -1 && PyErr_Occurred())
        return -1;
    if (fd >= 0) {
        ssize_t w = write((int)fd, "c", 1);     /* a full pipe: the reader is awake */
        (void)w;
    }
    long long limit = attr_ll(q, str_limit);
    if (limit == -1 && PyErr_Occurred())
        return -1;
    /* A slow disk slows the program rather than losing records: wait, without the
     * GIL, for the reader to take chunks off (unless it has gone). */
    while (limit > 0 && pend > limit) {
        PyObject *closed = PyObject_GetAttr(q, str_closed);
        if (closed == NULL)
            return -1;
        int c = PyObject_IsTrue(closed);
        Py_DECREF(closed);
        if (c)
            break;
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
        pend = attr_ll(q, str_pending);
        if (pend == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
fail:
    Py_DECREF(chunk);
    if (whole)
        Py_SETREF(rb->payloads, pay);   /* the buffer keeps them, as before the call */
    else
        Py_DECREF(pay);
    return -1;
}

static PyObject *
RingBuffer_handoff(RingBufferObject *self, PyObject *unused)
{
    if (rb_handoff(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Append one record; returns its sequence number, -1 if dropped, -2 on error. */
static long long
rb_write(RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
         unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    long long seq = rb->seq;
    if (seq - rb->read >= rb->nrec) {
        /* the slot still holds a record nobody has read */
        if (rb->sink != NULL && rb->sink != Py_None) {
            if (rb_handoff(rb) < 0) {
                /* out of memory, say: this record is lost, counted, never raised */
                PyErr_Clear();
                rb->dropped++;
                return -1;
            }
        }
        else if (rb->overwrite) {
            rb->overrun++;
            if (rb->payloads != NULL && PyDict_GET_SIZE(rb->payloads)) {
                PyObject *k = PyLong_FromLongLong(seq - rb->nrec);
                if (k == NULL)
                    return -2;
                if (PyDict_DelItem(rb->payloads, k) < 0)
                    PyErr_Clear();
                Py_DECREF(k);
            }
        }
        else {
            rb->dropped++;
            return -1;
        }
    }
    if (rb->data == NULL || !PyByteArray_Check(rb->data)
            || PyByteArray_GET_SIZE(rb->data) < rb->nrec * FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer data is not set up");
        return -2;
    }
    record_t *rec = (record_t *)(PyByteArray_AS_STRING(rb->data) + (seq % rb->nrec) * FNT_RECORD_SIZE);
    rec->ts = (unsigned long long)ts;
    rec->type = (unsigned short)type;
    rec->flags = (unsigned short)flags;
    rec->a = (unsigned int)a;
    rec->b = (unsigned int)b;
    rec->c = (unsigned int)c;
    rec->d = d;
    rb->seq = seq + 1;
    return seq;
}

static PyObject *
RingBuffer_write(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "write(ts, type, flags, a, b, c, d)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    unsigned long type = PyLong_AsUnsignedLong(args[1]);
    unsigned long flags = PyLong_AsUnsignedLong(args[2]);
    unsigned long a = PyLong_AsUnsignedLong(args[3]);
    unsigned long b = PyLong_AsUnsignedLong(args[4]);
    unsigned long c = PyLong_AsUnsignedLong(args[5]);
    unsigned long long d = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    long long seq = rb_write(self, ts, type, flags, a, b, c, d);
    if (seq == -2)
        return NULL;
    return PyLong_FromLongLong(seq);
}

/* RingBuffer.write_payload: the record, then its payload keyed by sequence number. */
static long long
rb_write_payload(RingBufferObject *rb, long long ts, unsigned type, unsigned long a,
                 unsigned long b, unsigned long c, unsigned long long d, PyObject *payload)
{
    long long seq = rb_write(rb, ts, type, FNT_HAS_PAYLOAD, a, b, c, d);
    if (seq >= 0) {
        PyObject *k = PyLong_FromLongLong(seq);
        if (k == NULL || rb->payloads == NULL || PyDict_SetItem(rb->payloads, k, payload) < 0) {
            Py_XDECREF(k);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "ring buffer payloads are not set up");
            return -2;
        }
        Py_DECREF(k);
    }
    return seq;
}

static PyObject *
RingBuffer_write_payload(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "write_payload(ts, type, a, b, c, d, payload)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    unsigned long type = PyLong_AsUnsignedLong(args[1]);
    unsigned long a = PyLong_AsUnsignedLong(args[2]);
    unsigned long b = PyLong_AsUnsignedLong(args[3]);
    unsigned long c = PyLong_AsUnsignedLong(args[4]);
    unsigned long long d = PyLong_AsUnsignedLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    long long seq = rb_write_payload(self, ts, type, a, b, c, d, args[6]);
    if (seq == -2)
        return NULL;
    return PyLong_FromLongLong(seq);
}

static int
RingBuffer_traverse(RingBufferObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    Py_VISIT(self->sink);
    Py_VISIT(self->payloads);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
RingBuffer_clear(RingBufferObject *self)
{
    Py_CLEAR(self->data);
    Py_CLEAR(self->sink);
    Py_CLEAR(self->payloads);
    return 0;
}

static void
RingBuffer_dealloc(RingBufferObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    RingBuffer_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef RingBuffer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))RingBuffer_write, METH_FASTCALL,
     "write(ts, type, flags, a, b, c, d) -> seq (-1 if dropped)"},
    {"write_payload", (PyCFunction)(void (*)(void))RingBuffer_write_payload, METH_FASTCALL,
     "write_payload(ts, type, a, b, c, d, payload) -> seq"},
    {"handoff", (PyCFunction)RingBuffer_handoff, METH_NOARGS,
     "handoff(): the records not handed over yet, as one chunk, to the sink"},
    {NULL}
};

static PyMemberDef RingBuffer_members[] = {
    {"cpu", T_PYSSIZET, offsetof(RingBufferObject, cpu), 0, NULL},
    {"nrec", T_PYSSIZET, offsetof(RingBufferObject, nrec), 0, NULL},
    {"seq", T_LONGLONG, offsetof(RingBufferObject, seq), 0, NULL},
    {"read", T_LONGLONG, offsetof(RingBufferObject, read), 0, NULL},
    {"overrun", T_LONGLONG, offsetof(RingBufferObject, overrun), 0, NULL},
    {"dropped", T_LONGLONG, offsetof(RingBufferObject, dropped), 0, NULL},
    {"overwrite", T_BOOL, offsetof(RingBufferObject, overwrite), 0, NULL},
    {"data", T_OBJECT, offsetof(RingBufferObject, data), 0, NULL},
    {"sink", T_OBJECT, offsetof(RingBufferObject, sink), 0, NULL},
    {"payloads", T_OBJECT, offsetof(RingBufferObject, payloads), 0, NULL},
    {NULL}
};

static PyType_Slot RingBuffer_slots[] = {
    {Py_tp_dealloc, RingBuffer_dealloc},
    {Py_tp_traverse, RingBuffer_traverse},
    {Py_tp_clear, RingBuffer_clear},
    {Py_tp_methods, RingBuffer_methods},
    {Py_tp_members, RingBuffer_members},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_doc, "The native part of ring_buffer.RingBuffer: its counters and write()."},
    {0, NULL}
};

static PyType_Spec RingBuffer_spec = {
    .name = "fntrace._native.RingBufferBase",
    .basicsize = sizeof(RingBufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = RingBuffer_slots,
};

static PyTypeObject *RingBuffer_Type;

/* -- The function tracer (tracers/function.function_trace_call) -------------------- */

/* Each thread remembers the last trace array it wrote to and that array's buffer for
 * this thread (what tr.local.buf would give), saving the threading.local lookup. */
static _Thread_local PyObject *tl_tr TLS_FAST;
static _Thread_local PyObject *tl_buf TLS_FAST;
static _Thread_local PyObject *tl_local TLS_FAST;
static _Thread_local long long tl_serial TLS_FAST;

static RingBufferObject *
cpu_buffer(PyObject *tr)
{
    /* tr.local.buf, or tr.cpu_buffer() on a thread's first event (new reference). */
    PyObject *local = SLOT(tr, off_tr_local);
    /* Borrowed pointers: a thread's storage has no destructor, so a strong reference
     * here would keep a finished thread's buffer alive for ever.  The trace array's
     * serial number tells a new array at a freed one's address apart; an array frees
     * a thread's buffer only once that thread has ended (trace.py). */
    long long serial = slot_ll(tr, off_tr_serial);
    if (tr == tl_tr && local == tl_local && serial == tl_serial && tl_buf != NULL)
        return (RingBufferObject *)Py_NewRef(tl_buf);
    PyObject *buf = NULL;
    if (local != NULL) {
        buf = PyObject_GetAttr(local, str_buf);
        if (buf == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear();
        }
    }
    if (buf == NULL)
        buf = PyObject_CallMethodNoArgs(tr, str_cpu_buffer);
    if (buf != NULL && !PyObject_TypeCheck(buf, RingBuffer_Type)) {
        Py_DECREF(buf);
        PyErr_SetString(PyExc_TypeError, "cpu buffer is not a native ring buffer");
        return NULL;
    }
    if (buf != NULL) {
        /* borrowed, as said above: the serial tells a new array at a freed one's
         * address apart, and a new serial after a thread's buffer is freed
         * (trace.py thread_ended) sends every thread back to tr.local */
        tl_tr = tr;
        tl_local = local;
        tl_buf = buf;
        tl_serial = serial;
    }
    return (RingBufferObject *)buf;
}

static int
function_trace(PyObject *ip, PyObject *parent_ip, PyObject *op)
{
    PyObject *tr = SLOT(op, off_ops_private);
    if (tr == NULL)
        return 0;
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on != Py_True && (on == NULL || !PyObject_IsTrue(on)))
        return 0;
    RingBufferObject *buf = cpu_buffer(tr);
    if (buf == NULL)
        return -1;
    PyObject *ipo = SLOT(ip, off_rec_ip), *pipo = SLOT(parent_ip, off_rec_ip);
    unsigned long a = ipo ? PyLong_AsUnsignedLong(ipo) : 0;
    unsigned long b = pipo ? PyLong_AsUnsignedLong(pipo) : 0;
    long long rc = rb_write(buf, now_ns(), FNT_TRACE_FN, 0, a, b, 0, 0);
    Py_DECREF(buf);
    return rc == -2 ? -1 : 0;
}

static PyObject *
function_trace_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "function_trace_call(ip, parent_ip, op, fregs)");
        return NULL;
    }
    if (function_trace(args[0], args[1], args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

#define GET(name, var) do { var = PyDict_GetItemString(ns, name); \
    if (var == NULL) { PyErr_Format(PyExc_KeyError, "init: %s missing", name); return NULL; } \
    Py_INCREF(var); } while (0)
#define OFF(type, name, var) do { var = slot_offset(type, name); if (var < 0) return NULL; } while (0)


/* -- fgraph (fgraph.function_graph_enter, fgraph_return) ----------------------------- */

static PyObject *g_S;                /* fgraph._S */
static PyObject *g_tls;              /* fgraph._tls */
static PyObject *g_shadow_stack;     /* fgraph.shadow_stack() */
static PyObject *g_fgraph_array;     /* fgraph.fgraph_array */
static PyObject *g_fg_contain;       /* fgraph._contain(gops, exc) */
static PyObject *g_fg_missed;        /* fgraph._missed(ip, fregs): overrun bookkeeping */
static PyTypeObject *g_frame_type, *g_ent_type, *g_ret_type;
static Py_ssize_t off_S_users, off_S_epoch;
static Py_ssize_t off_st_frames, off_st_task_vars, off_st_overrun, off_st_epoch, off_st_cur, off_st_ret;
static Py_ssize_t off_fr_frame, off_fr_rec, off_fr_depth, off_fr_bitmap, off_fr_data, off_fr_calltime;
static Py_ssize_t off_ent_func, off_ent_depth;
static Py_ssize_t off_ret_func, off_ret_depth, off_ret_retval, off_ret_calltime, off_ret_rettime,
                  off_ret_overrun, off_ret_unwind;
static Py_ssize_t off_ops_flags, off_ops_filter_hash, off_ops_notrace_hash, off_ops_filter_cached;
static Py_ssize_t off_hash_entries, off_tv_value;
static long g_max_depth;
static PyObject *str_st, *str_entryfunc, *str_retfunc, *str_ops, *str_idx, *str_private;
static Py_ssize_t off_tr_graph_fops, off_tr_graph_notrace_fops, off_tr_max_graph_depth,
                  off_tr_tracing_thresh, off_tr_graph_args, off_tr_graph_retval;
static PyObject *g_graph_entry_py;      /* the Python twin, for the lazy start */
static PyObject *g_safe_repr, *g_retval_payload;         /* tracers/function_graph.py */

static inline void
set_slot(PyObject *obj, Py_ssize_t off, PyObject *v)   /* steals v */
{
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = v;
    Py_XDECREF(old);
}

/* The calling thread's ShadowStack (new reference), current epoch. */
static PyObject *
get_stack(int create)
{
    PyObject *st = PyObject_GetAttr(g_tls, str_st);
    if (st == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        if (!create)
            return NULL;
        return PyObject_CallNoArgs(g_shadow_stack);
    }
    PyObject *e1 = SLOT(st, off_st_epoch), *e2 = SLOT(g_S, off_S_epoch);
    if (e1 != e2 && (e1 == NULL || e2 == NULL || PyObject_RichCompareBool(e1, e2, Py_NE) == 1)) {
        Py_DECREF(st);
        if (!create)
            return NULL;
        return PyObject_CallNoArgs(g_shadow_stack);
    }
    return st;
}

/* FtraceHash membership: rec in hash.entries (a set or frozenset). */
static inline int
hash_has(PyObject *h, PyObject *rec)
{
    PyObject *e = h ? SLOT(h, off_hash_entries) : NULL;
    if (e == NULL)
        return 0;
    return PySet_Contains(e, rec) == 1;
}

static inline int
hash_empty(PyObject *h)
{
    PyObject *e = h ? SLOT(h, off_hash_entries) : NULL;
    return e == NULL || PySet_GET_SIZE(e) == 0;
}

/* Ops.traces / Ops.test (core/ops.py) */
static int
ops_test(PyObject *op, PyObject *rec, int regs_saved)
{
    PyObject *fl = SLOT(op, off_ops_flags);
    if (fl && (PyLong_AsLongLong(fl) & 0x4) && !regs_saved)
        return 0;
    PyObject *f = SLOT(op, off_ops_filter_hash);
    PyObject *cached = SLOT(op, off_ops_filter_cached);
    if ((!hash_empty(f) || (cached && PyObject_IsTrue(cached))) && !hash_has(f, rec))
        return 0;
    return !hash_has(SLOT(op, off_ops_notrace_hash), rec);
}

static int
fg_contain(PyObject *gops)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_SystemExit))
        return -1;
    PyObject *exc = FETCH_EXC();
    PyObject *r = PyObject_CallFunctionObjArgs(g_fg_contain, gops, exc ? exc : Py_None, NULL);
    return contained(r, exc);
}

/* Call gops.<name>(trace, gops, fregs); *result gets its truth (entry) if asked. */
static int
call_user(PyObject *gops, PyObject *name, PyObject *trace, PyObject *fregs, int *result)
{
    PyObject *fn = PyObject_GetAttr(gops, name);
    if (fn == NULL)
        return fg_contain(gops);
    PyObject *args[3] = {trace, gops, fregs};
    ENTER();
    PyObject *r = PyObject_Vectorcall(fn, args, 3, NULL);
    LEAVE();
    Py_DECREF(fn);
    if (r == NULL) {
        if (result)
            *result = 0;
        return fg_contain(gops);
    }
    if (result) {
        int t = PyObject_IsTrue(r);
        if (t < 0) {
            Py_DECREF(r);
            *result = 0;
            return fg_contain(gops);
        }
        *result = t;
    }
    Py_DECREF(r);
    return 0;
}

/* -- fgraph's fast lane --------------------------------------------------------------
 *
 * When the only graph user carries a native entry/return pair (FgraphOps.lane; the
 * function_graph tracer's is graph_lane, taken while nothing per call needs Python), a
 * call is pushed on a native shadow stack instead of the ShadowStack's list of
 * FgraphFrame objects, and the pair is called from here: no Python object is made per
 * call but the -A/-R payloads (their text, one str each, made in C for the common
 * values: _native_value.c).
 *
 *     thread_rec.fs (grows up)                 fg_frame
 *     +---------------------------+           +----------------------------------+
 *     | fs[fs_n - 1]  (top)       | --------> | frame     the frame object (ref) |
 *     +---------------------------+           | ip        the function's ip      |
 *     | ...                       |           | depth     fs_n + npy at entry    |
 *     +---------------------------+           | calltime  ns, also the ENT's ts  |
 *     | fs[0]                     |           +----------------------------------+
 *     +---------------------------+
 *
 * Both stacks are one stack for depth: a call pushed on either gets depth = fs_n + npy,
 * so a configuration change while calls are running (a second user, an option) keeps
 * the indentation right.  A return is looked for on this stack first by frame identity
 * (frames above it never saw their return and are dropped), then on the Python one.
 * fg_sync() (from fgraph._sync_native) says whose pair owns the lane and the epoch; a
 * new epoch empties every thread's stack, like ShadowStack's.
 */

static void
fs_reset(thread_rec *t)
{
    /* Only pointers are touched before the decrefs: a frame's finalizer may run code. */
    fg_frame *fs = t->fs;
    int n = t->fs_n;
    t->fs = NULL;
    t->fs_n = t->fs_cap = 0;
    t->npy = 0;
    t->fs_epoch = g_fg_epoch;
    for (int i = 0; i < n; i++)
        Py_XDECREF(fs[i].ref);
    PyMem_RawFree(fs);
}

/* thread_exit(): the calling thread is ending (trace.py _ThreadEnd): its record and
 * native shadow stack are freed, so memory does not grow with the threads that lived. */
static PyObject *
thread_exit(PyObject *self, PyObject *unused)
{
    thread_rec *t = tl_rec;
    if (t == NULL || t->busy)
        Py_RETURN_NONE;
    fs_reset(t);
    for (thread_rec **p = &g_threads; *p != NULL; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;          /* the GIL is held: no other writer */
            break;
        }
    }
    tl_rec = NULL;
    PyMem_RawFree(t);
    Py_RETURN_NONE;
}

static PyObject *g_zero;

static inline int
ll_zero(PyObject *v)
{
    /* an option that is off: 0, False or None (unset) */
    if (v == NULL || v == Py_None || v == Py_False || v == g_zero)
        return 1;
    if (v == Py_True)
        return 0;
    if (PyLong_CheckExact(v)) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred())
            PyErr_Clear();
        return x == 0;
    }
    int t = PyObject_IsTrue(v);
    if (t < 0)
        PyErr_Clear();
    return t == 0;
}

/* One record of the lane into the thread's buffer of `tr`, as a callback (busy for
 * synchronize()); the sequence number, -1 if dropped, -2 on error. */
static inline long long
lane_write(thread_rec *t, PyObject *tr, long long ts, unsigned type, unsigned long a,
           unsigned long b, unsigned long c, unsigned long long d)
{
    Py_INCREF(tr);
    t->busy++;
    t->count++;
    RingBufferObject *buf = cpu_buffer(tr);
    long long w = buf ? rb_write(buf, ts, type, 0, a, b, c, d) : -2;
    t->busy--;
    Py_XDECREF(buf);
    Py_DECREF(tr);
    return w;
}

static PyObject *args_payload(PyObject *frame);
static PyObject *args_payload_iframe(void *iframe, PyObject *code);
static PyObject *retval_payload(PyObject *v, PyObject *unwind);

/* -A/-R on the lane, kept out of its common path (not inlined): the entry record with
 * the arguments' text (graph_entry's payload) or the return record with the return
 * value (graph_return's), written as lane_write does; -2 on error. */
static __attribute__((noinline)) long long
lane_write_args(thread_rec *t, PyObject *tr, fkey k, unsigned long ip,
                unsigned long depth, long long *calltime)
{
    Py_INCREF(tr);
    t->busy++;
    t->count++;
    RingBufferObject *buf = cpu_buffer(tr);
    PyObject *payload = NULL;
    if (buf != NULL) {
        /* the interpreter frame under sys.monitoring, else a frame object */
        if (k.ref == NULL && k.code != NULL)
            payload = args_payload_iframe(k.key, k.code);
        if (payload == NULL && !PyErr_Occurred())
            payload = args_payload(k.ref ? k.ref : (PyObject *)PyEval_GetFrame());
    }
    /* one clock reading after the set-up (the buffer, the arguments), as graph_entry */
    *calltime = now_ns();
    long long w = payload ? rb_write_payload(buf, *calltime, FNT_TRACE_GRAPH_ENT, ip, depth, 0, 0, payload) : -2;
    t->busy--;
    Py_XDECREF(payload);
    Py_XDECREF(buf);
    Py_DECREF(tr);
    return w;
}

static __attribute__((noinline)) long long
lane_write_retval(thread_rec *t, PyObject *tr, long long ts, unsigned long ip,
                  unsigned long depth, unsigned long overrun, unsigned long long calltime,
                  PyObject *retval, int unwind)
{
    Py_INCREF(tr);
    t->busy++;
    t->count++;
    RingBufferObject *buf = cpu_buffer(tr);
    PyObject *payload = buf ? retval_payload(retval ? retval : Py_None,
                                             unwind ? Py_True : Py_False) : NULL;
    long long w = payload ? rb_write_payload(buf, ts, FNT_TRACE_GRAPH_RET, ip, depth, overrun, calltime, payload)
                          : -2;
    t->busy--;
    Py_XDECREF(payload);
    Py_XDECREF(buf);
    Py_DECREF(tr);
    return w;
}

/* 1: pushed on the fast lane (and its entry written); 0: not for the lane; -1: error */
static int
fg_fast_enter(PyObject *rec, fkey k)
{
    PyObject *data = g_fast_data;
    if (data == NULL || k.key == NULL)
        return 0;
    thread_rec *t = my_rec();
    if (t == NULL)
        return 0;
    if (t->fs_epoch != g_fg_epoch)
        fs_reset(t);
    int depth = t->fs_n + t->npy;
    if (depth >= g_max_depth)
        return 0;                  /* the slow path counts the overrun */
    PyObject *ipo = SLOT(rec, off_rec_ip);
    unsigned long ip = ipo ? PyLong_AsUnsignedLong(ipo) : 0;
    long long calltime;
    int r = INDIRECT_CALL_1(g_lane.enter, graph_lane_enter, data, t, &k, ip, depth, &calltime);
    if (r <= 0)
        return r;
    /* the user may have run Python code (a thread's first buffer): another thread may
     * have reset this stack */
    if (t->fs_epoch != g_fg_epoch)
        fs_reset(t);
    if (t->fs_n == t->fs_cap) {
        int cap = t->fs_cap ? t->fs_cap * 2 : 64;
        fg_frame *fs = (fg_frame *)PyMem_RawRealloc(t->fs, cap * sizeof(fg_frame));
        if (fs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->fs = fs;
        t->fs_cap = cap;
    }
    fg_frame *f = &t->fs[t->fs_n++];
    f->key = k.key;
    f->code = k.code;
    f->ref = Py_XNewRef(k.ref);
    f->ip = (unsigned int)ip;
    f->depth = (unsigned int)depth;
    f->calltime = calltime;
    return 1;
}

/* 1: the call was on the fast lane (popped, its return written); 0: not there; -1.
 * retval: the value returned (yielded, raised with unwind), NULL if unknown. */
static int
fg_fast_return(fkey k, PyObject *retval, int unwind)
{
    thread_rec *t = tl_rec;
    if (t == NULL || t->fs_n == 0)
        return 0;
    if (t->fs_epoch != g_fg_epoch) {
        fs_reset(t);
        return 0;
    }
    int i = t->fs_n - 1;
    while (i >= 0 && (t->fs[i].key != k.key || t->fs[i].code != k.code))
        i--;
    if (i < 0)
        return 0;                  /* pushed on the Python stack, or never */
    fg_frame f = t->fs[i];
    int n = t->fs_n;
    t->fs_n = i;
    /* frames above it never saw their return: taken off now, released at the end */
    int nd = n - i - 1;
    PyObject **dropped = NULL;
    if (nd > 0) {
        dropped = (PyObject **)PyMem_RawMalloc(nd * sizeof(PyObject *));
        if (dropped == NULL) {
            PyErr_NoMemory();
            return -1;       /* leaks nd references; only out of memory */
        }
        for (int j = 0; j < nd; j++)
            dropped[j] = t->fs[i + 1 + j].ref;
    }
    int rc = 1;
    if (g_lane_data != NULL
            && INDIRECT_CALL_1(g_lane.ret, graph_lane_return, g_lane_data, t, &f, retval, unwind) < 0)
        rc = -1;
    for (int j = 0; j < nd; j++)
        Py_XDECREF(dropped[j]);
    PyMem_RawFree(dropped);
    Py_XDECREF(f.ref);
    return rc;
}

static PyObject *
fg_sync(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* fg_sync(lane capsule | None, data | None, fast: bool, epoch) */
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fg_sync(lane, data, fast, epoch)");
        return NULL;
    }
    long epoch = PyLong_AsLong(args[3]);
    if (epoch == -1 && PyErr_Occurred())
        return NULL;
    const fg_lane_ops *lane = NULL;
    if (args[0] != Py_None) {
        lane = (const fg_lane_ops *)PyCapsule_GetPointer(args[0], LANE_CAPSULE);
        if (lane == NULL)
            return NULL;
    }
    PyObject *data = (lane == NULL || args[1] == Py_None) ? NULL : args[1];
    int fast = data != NULL && PyObject_IsTrue(args[2]) == 1;
    Py_XSETREF(g_lane_data, Py_XNewRef(data));
    Py_XSETREF(g_fast_data, fast ? Py_NewRef(data) : NULL);
    if (lane != NULL)
        g_lane = *lane;
    if (epoch != g_fg_epoch) {
        g_fg_epoch = epoch;
        for (thread_rec *t = g_threads; t != NULL; t = t->next)
            if (t->fs_n || t->fs)
                fs_reset(t);
    }
    Py_RETURN_NONE;
}

static PyObject *
function_graph_enter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* graph_ops.func: push a frame, run each matching user's entryfunc. */
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "function_graph_enter(ip, parent_ip, op, fregs)");
        return NULL;
    }
    /* (calls that come this way, from Python, go on the Python stack) */
    PyObject *ip = args[0], *fregs = args[3];
    PyObject *st = get_stack(1);
    if (st == NULL)
        return NULL;
    thread_rec *t = my_rec();
    if (t != NULL && t->fs_epoch != g_fg_epoch)
        fs_reset(t);
    PyObject *frames = SLOT(st, off_st_frames);
    /* the fast lane's calls are below these: one depth for both stacks */
    Py_ssize_t depth = PyList_GET_SIZE(frames) + (t ? t->fs_n : 0);
    if (depth >= g_max_depth) {
        PyObject *ov = SLOT(st, off_st_overrun);
        long long nov = (ov ? PyLong_AsLongLong(ov) : 0) + 1;
        set_slot(st, off_st_overrun, PyLong_FromLongLong(nov));
        if (t != NULL)
            t->overrun = nov;
        Py_DECREF(st);
        PyObject *r = PyObject_CallFunctionObjArgs(g_fg_missed, ip, fregs, NULL);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    PyObject *fr = g_frame_type->tp_alloc(g_frame_type, 0);
    if (fr == NULL) {
        Py_DECREF(st);
        return NULL;
    }
    PyObject *pyframe = SLOT(fregs, off_regs_frame);
    SLOT(fr, off_fr_frame) = Py_NewRef(pyframe ? pyframe : Py_None);
    SLOT(fr, off_fr_rec) = Py_NewRef(ip);
    SLOT(fr, off_fr_depth) = PyLong_FromSsize_t(depth);
    SLOT(fr, off_fr_bitmap) = PyLong_FromLong(0);
    SLOT(fr, off_fr_data) = Py_NewRef(Py_None);
    SLOT(fr, off_fr_calltime) = PyLong_FromLongLong(now_ns());
    if (PyList_Append(frames, fr) < 0) {
        Py_DECREF(fr);
        Py_DECREF(st);
        return NULL;
    }
    if (t != NULL)
        t->npy = (int)PyList_GET_SIZE(frames);
    set_slot(st, off_st_cur, Py_NewRef(fr));
    PyObject *trace = g_ent_type->tp_alloc(g_ent_type, 0);
    if (trace == NULL) {
        Py_DECREF(fr);
        Py_DECREF(st);
        return NULL;
    }
    SLOT(trace, off_ent_func) = Py_NewRef(ip);
    SLOT(trace, off_ent_depth) = PyLong_FromSsize_t(depth);
    unsigned long bitmap = 0;
    PyObject *users = SLOT(g_S, off_S_users);
    Py_XINCREF(users);
    Py_ssize_t n = users ? PyTuple_GET_SIZE(users) : 0;
    PyObject *regs = SLOT(fregs, off_regs_regs);
    int regs_saved = regs && PyObject_IsTrue(regs);
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        PyObject *u = PyTuple_GET_ITEM(users, i);
        long idx = PyLong_AsLong(PyTuple_GET_ITEM(u, 0));
        PyObject *gops = PyTuple_GET_ITEM(u, 1);
        if (n > 1) {
            /* several users: each is tested against its own filter */
            PyObject *uops = PyObject_GetAttr(gops, str_ops);
            if (uops == NULL) {
                rc = -1;
                break;
            }
            int ok = ops_test(uops, ip, regs_saved);
            Py_DECREF(uops);
            if (!ok)
                continue;
        }
        int res = 0;
        rc = call_user(gops, str_entryfunc, trace, fregs, &res);
        if (res)
            bitmap |= 1UL << idx;
        else if (n > 1) {
            /* anything it reserved goes with the refused entry */
            PyObject *data = SLOT(fr, off_fr_data);
            if (data && PyDict_Check(data)) {
                PyObject *k = PyLong_FromLong(idx);
                if (k && PyDict_DelItem(data, k) < 0)
                    PyErr_Clear();
                Py_XDECREF(k);
            }
        }
    }
    Py_XDECREF(users);
    Py_DECREF(trace);
    set_slot(st, off_st_cur, Py_NewRef(Py_None));
    if (rc == 0) {
        if (bitmap)
            set_slot(fr, off_fr_bitmap, PyLong_FromUnsignedLong(bitmap));
        else {
            Py_ssize_t len = PyList_GET_SIZE(frames);
            if (len > 0 && PyList_GET_ITEM(frames, len - 1) == fr)
                PyList_SetSlice(frames, len - 1, len, NULL);
        }
    }
    if (t != NULL)
        t->npy = (int)PyList_GET_SIZE(frames);
    Py_DECREF(fr);
    Py_DECREF(st);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
fgraph_return_c(PyObject *rec, PyObject *frame, PyObject *retval, PyObject *unwind)
{
    /* G.ret_handler: pop the call's frame, run the retfuncs that asked. */
    int fast = fg_fast_return(fkey_of_frame(frame), retval, unwind == Py_True);
    if (fast)
        return fast < 0 ? -1 : 0;
    PyObject *st = get_stack(0);
    if (st == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *frames = SLOT(st, off_st_frames);
    Py_ssize_t len = PyList_GET_SIZE(frames);
    if (len == 0) {
        Py_DECREF(st);
        return 0;
    }
    Py_ssize_t i = len - 1;
    while (i >= 0 && SLOT(PyList_GET_ITEM(frames, i), off_fr_frame) != frame)
        i--;
    if (i < 0) {                   /* its entry was never pushed */
        Py_DECREF(st);
        return 0;
    }
    PyObject *fr = Py_NewRef(PyList_GET_ITEM(frames, i));
    /* frames above it never saw their return; then pop it */
    if (PyList_SetSlice(frames, i, len, NULL) < 0) {
        Py_DECREF(fr);
        Py_DECREF(st);
        return -1;
    }
    thread_rec *t = tl_rec;
    if (t != NULL)
        t->npy = (int)i;
    long long rettime = now_ns();
    PyObject *trace = g_ret_type->tp_alloc(g_ret_type, 0);
    PyObject *fregs = trace ? new_regs((PyFrameObject *)frame, rec,
                                       (rec_flags(rec) & g_REGS_EN) != 0, retval) : NULL;
    if (fregs == NULL) {
        Py_XDECREF(trace);
        Py_DECREF(fr);
        Py_DECREF(st);
        return -1;
    }
    SLOT(trace, off_ret_func) = Py_NewRef(rec);
    SLOT(trace, off_ret_depth) = Py_NewRef(SLOT(fr, off_fr_depth));
    SLOT(trace, off_ret_retval) = Py_NewRef(retval);
    SLOT(trace, off_ret_calltime) = Py_NewRef(SLOT(fr, off_fr_calltime));
    SLOT(trace, off_ret_rettime) = PyLong_FromLongLong(rettime);
    PyObject *ov = SLOT(st, off_st_overrun);
    SLOT(trace, off_ret_overrun) = Py_NewRef(ov ? ov : Py_None);
    SLOT(trace, off_ret_unwind) = Py_NewRef(unwind);
    unsigned long bitmap = PyLong_AsUnsignedLong(SLOT(fr, off_fr_bitmap));
    PyObject *prev = SLOT(st, off_st_ret);
    Py_XINCREF(prev);
    set_slot(st, off_st_ret, Py_NewRef(fr));
    int rc = 0;
    while (bitmap && rc == 0) {
        unsigned long low = bitmap & (~bitmap + 1);
        bitmap ^= low;
        int idx = __builtin_ctzl(low);
        PyObject *gops = PyList_GetItem(g_fgraph_array, idx);
        if (gops == NULL) {
            PyErr_Clear();
            continue;
        }
        Py_INCREF(gops);
        rc = call_user(gops, str_retfunc, trace, fregs, NULL);
        Py_DECREF(gops);
    }
    set_slot(st, off_st_ret, prev ? prev : Py_NewRef(Py_None));
    Py_DECREF(trace);
    Py_DECREF(fregs);
    Py_DECREF(fr);
    Py_DECREF(st);
    return rc < 0 ? -1 : 0;
}

static PyObject *
fgraph_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fgraph_return(rec, frame, retval, unwind)");
        return NULL;
    }
    if (fgraph_return_c(args[0], args[1], args[2], args[3]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* -- function_graph tracer (tracers/function_graph.graph_entry / graph_return) ------- */

#define TRACE_GRAPH_FL 1
#define TRACE_GRAPH_NOTRACE 2
#define DEPTH_SHIFT 2
#define DEPTH_MASK ((1LL << 20) - 1)

/* Its pair for fgraph's fast lane (graph_lane): the user's data is the trace array.  A
 * call qualifies while nothing per call needs Python: no set_graph_function/notrace,
 * max depth or threshold.  -A/-R stay on the lane: their text rides beside the records
 * (lane_write_args, lane_write_retval: out of line, so plain function_graph's path is
 * as short as without them). */
LANE_INLINE int
graph_lane_enter(PyObject *tr, thread_rec *t, const fkey *k, unsigned long ip, int depth,
                 long long *calltime)
{
    if (!ll_zero(SLOT(tr, off_tr_max_graph_depth)) || !ll_zero(SLOT(tr, off_tr_tracing_thresh)))
        return 0;
    PyObject *gf = SLOT(tr, off_tr_graph_fops), *gn = SLOT(tr, off_tr_graph_notrace_fops);
    if (gf == NULL || !hash_empty(SLOT(gf, off_ops_filter_hash))
            || !ll_zero(SLOT(gf, off_ops_filter_cached))
            || gn == NULL || !hash_empty(SLOT(gn, off_ops_filter_hash)))
        return 0;
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on == Py_True || (on != NULL && on != Py_False && PyObject_IsTrue(on) == 1)) {
        long long w;
        if (__builtin_expect(!ll_zero(SLOT(tr, off_tr_graph_args)), 0))
            w = lane_write_args(t, tr, *k, ip, (unsigned long)depth, calltime);
        else {
            /* The thread's buffer first (its first call makes it), then one clock
             * reading for the entry record and the call's start. */
            Py_INCREF(tr);
            t->busy++;
            t->count++;
            RingBufferObject *buf = cpu_buffer(tr);
            *calltime = now_ns();
            w = buf ? rb_write(buf, *calltime, FNT_TRACE_GRAPH_ENT, 0, ip, (unsigned long)depth, 0, 0) : -2;
            t->busy--;
            Py_XDECREF(buf);
            Py_DECREF(tr);
        }
        if (w == -2)
            return -1;
    }
    else
        *calltime = now_ns();
    return 1;
}

LANE_INLINE int
graph_lane_return(PyObject *tr, thread_rec *t, const fg_frame *f, PyObject *retval, int unwind)
{
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on == Py_True || (on != NULL && on != Py_False && PyObject_IsTrue(on) == 1)) {
        long long rettime = now_ns();
        long long thresh = slot_ll(tr, off_tr_tracing_thresh);
        if (!thresh || rettime - f->calltime >= thresh) {
            /* funcgraph-retval: graph_return's payload */
            long long w = __builtin_expect(!ll_zero(SLOT(tr, off_tr_graph_retval)), 0)
                ? lane_write_retval(t, tr, rettime, f->ip, f->depth, (unsigned long)t->overrun,
                                    (unsigned long long)f->calltime, retval, unwind)
                : lane_write(t, tr, rettime, FNT_TRACE_GRAPH_RET, f->ip, f->depth,
                             (unsigned long)t->overrun, (unsigned long long)f->calltime);
            if (w == -2)
                return -1;
        }
    }
    return 0;
}

static const fg_lane_ops graph_lane = {graph_lane_enter, graph_lane_return};


/* -- funcgraph-args / funcgraph-retval payloads (tracers/function_graph.py) ----------- */

/* safe_repr(v) for the common exact types whose reprlib form is plain repr() (ints
 * and floats of at most 40 characters, short str, None/True/False); anything else goes
 * to the Python safe_repr.  New reference. */
/* core/fetch.py _repr's last line, "<module.Qualname object at 0x...>", for an object of
 * none of the types it shows otherwise; NULL without an exception for those (the
 * Python path then).  No Python code runs: a callback that ran bytecode could run a
 * signal handler of the program's there, and the KeyboardInterrupt would be raised at
 * the wrong place (test_generators SignalAndYieldFromTest). */
static PyObject *
plain_object_repr(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    if (PyType_FastSubclass(t, Py_TPFLAGS_LONG_SUBCLASS | Py_TPFLAGS_LIST_SUBCLASS
                            | Py_TPFLAGS_TUPLE_SUBCLASS | Py_TPFLAGS_BYTES_SUBCLASS
                            | Py_TPFLAGS_UNICODE_SUBCLASS | Py_TPFLAGS_DICT_SUBCLASS
                            | Py_TPFLAGS_BASE_EXC_SUBCLASS | Py_TPFLAGS_TYPE_SUBCLASS)
            || PyFloat_Check(v) || PyAnySet_Check(v) || PyComplex_Check(v)
            || PyByteArray_Check(v) || PyRange_Check(v) || PyFunction_Check(v)
            || PyCFunction_Check(v) || PyMethod_Check(v) || PyModule_Check(v)
            || PyCode_Check(v) || v == Py_Ellipsis || v == Py_NotImplemented
            || v == Py_None)
        return NULL;
#if PY_VERSION_HEX < 0x030B0000
    return NULL;
#else
    /* type.__module__ and type.__qualname__ as their getters give them */
    PyObject *mod = NULL;
    if (t->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        PyObject *d = t->tp_dict;
        PyObject *m = d != NULL ? PyDict_GetItemString(d, "__module__") : NULL;
        if (m != NULL && PyUnicode_CheckExact(m))
            mod = Py_NewRef(m);
    }
    else {
        const char *dot = strrchr(t->tp_name, '.');
        if (dot != NULL)
            mod = PyUnicode_FromStringAndSize(t->tp_name, dot - t->tp_name);
        else
            mod = PyUnicode_FromString("builtins");
        if (mod == NULL)
            return NULL;
    }
    if (mod == NULL)
        return NULL;                    /* odd __module__: the Python path decides */
    PyObject *qn = PyType_GetQualName(t);
    if (qn == NULL) {
        Py_DECREF(mod);
        return NULL;
    }
    PyObject *out;
    if (!PyUnicode_CheckExact(qn))
        out = NULL;
    else if (PyUnicode_CompareWithASCIIString(mod, "builtins") == 0)
        out = PyUnicode_FromFormat("<%U object at %p>", qn, v);
    else
        out = PyUnicode_FromFormat("<%U.%U object at %p>", mod, qn, v);
    Py_DECREF(mod);
    Py_DECREF(qn);
    if (out != NULL && PyUnicode_GET_LENGTH(out) > 64) {
        /* value_repr: s[:MAX_REPR - 3] + "..." */
        PyObject *head = PyUnicode_Substring(out, 0, 61);
        Py_DECREF(out);
        if (head == NULL)
            return NULL;
        out = PyUnicode_FromFormat("%U...", head);
        Py_DECREF(head);
    }
    return out;
#endif
}

/* core/fetch.settings.allow_program_code (--repr): then value_repr calls the program's
 * __repr__, and the Python path decides.  Read from sys.modules and the slot: no
 * bytecode runs. */
static PyObject *g_fetch_settings;   /* core.fetch.settings, found on first use */

static int
program_code_allowed(void)
{
    if (g_fetch_settings == NULL) {
        PyObject *name = PyUnicode_FromString("fntrace.core.fetch");
        if (name == NULL)
            return -1;
        PyObject *mod = PyImport_GetModule(name);
        Py_DECREF(name);
        if (mod == NULL)
            return PyErr_Occurred() ? -1 : 1;   /* not imported: the Python path */
        g_fetch_settings = PyObject_GetAttrString(mod, "settings");
        Py_DECREF(mod);
        if (g_fetch_settings == NULL)
            return -1;
    }
    static PyObject *name;
    if (name == NULL && (name = PyUnicode_InternFromString("allow_program_code")) == NULL)
        return -1;
    PyObject *on = PyObject_GetAttr(g_fetch_settings, name);
    if (on == NULL)
        return -1;
    int r = PyObject_IsTrue(on);
    Py_DECREF(on);
    return r;
}

/* _native_value.c */
PyObject *fntrace_value_text(PyObject *v);

static PyObject *
fast_safe_repr(PyObject *v)
{
    /* core/fetch.py value_repr: natively for the built-in scalars and the exact
     * containers of them (_native_value.c); the rest there */
    PyObject *s = fntrace_value_text(v);
    if (s != NULL) {
        /* With --repr value_repr calls repr(): the same text for a scalar whose text
         * was not cut (at most MAX_STRING characters), anything else goes there. */
        if (PyUnicode_GET_LENGTH(s) <= 40 && (v == Py_None || v == Py_True || v == Py_False
                || PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_CheckExact(v)))
            return s;
    }
    else if (PyErr_Occurred())
        return NULL;
    int allowed = program_code_allowed();
    if (allowed < 0) {
        Py_XDECREF(s);
        return NULL;
    }
    if (!allowed) {
        if (s != NULL)
            return s;
        s = plain_object_repr(v);
        if (s != NULL || PyErr_Occurred())
            return s;
    }
    Py_XDECREF(s);
    return PyObject_CallOneArg(g_safe_repr, v);
}

/* value_text(v): fntrace_value_text from Python, None where the Python twin decides
 * (tests compare the two) */
static PyObject *
value_text(PyObject *self, PyObject *v)
{
    PyObject *s = fntrace_value_text(v);
    if (s == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return s;
}

/* _native_frame.c */
PyObject *fntrace_frame_var(PyObject *frame, PyObject *name);
/* _native_encode.c: the trace file's compact record encoding (record_codec.py) */
PyObject *fntrace_encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fntrace_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fntrace_pack_payloads(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

static PyObject *
frame_var(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "frame_var(frame, name)");
        return NULL;
    }
    return fntrace_frame_var(args[0], args[1]);
}

/* The payload's characters: a stack buffer, moved to the heap when it fills. */
typedef struct {
    Py_UCS4 *c;
    Py_ssize_t n, cap;
    Py_UCS4 stack[512];
} ubuf;

static int
ubuf_room(ubuf *b, Py_ssize_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    Py_ssize_t cap = (b->n + more) * 2;
    Py_UCS4 *c = b->c == b->stack ? PyMem_Malloc(cap * sizeof(Py_UCS4))
                                  : PyMem_Realloc(b->c, cap * sizeof(Py_UCS4));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->c == b->stack)
        memcpy(c, b->stack, b->n * sizeof(Py_UCS4));
    b->c = c;
    b->cap = cap;
    return 0;
}

static int
ubuf_put_str(ubuf *b, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (ubuf_room(b, n) < 0)
        return -1;
    if (PyUnicode_AsUCS4(s, b->c + b->n, n, 0) == NULL)
        return -1;
    b->n += n;
    return 0;
}

/* _native_value.c */
int fntrace_value_text_buf(PyObject *v, Py_UCS4 *out);

/* fast_safe_repr(val)'s text appended; *allowed: program_code_allowed(), read once
 * when needed (-2 before) */
static int
ubuf_put_value(ubuf *b, PyObject *val, int *allowed)
{
    if (ubuf_room(b, 64) < 0)
        return -1;
    int n = fntrace_value_text_buf(val, b->c + b->n);
    if (n >= 0) {
        /* as fast_safe_repr: a scalar's uncut text is repr()'s too, the rest is used
         * only when --repr is off */
        int scalar = n <= 40 && (val == Py_None || val == Py_True || val == Py_False
                                 || PyLong_CheckExact(val) || PyFloat_CheckExact(val)
                                 || PyUnicode_CheckExact(val));
        if (!scalar && *allowed == -2 && (*allowed = program_code_allowed()) < 0)
            return -1;
        if (scalar || !*allowed) {
            b->n += n;
            return 0;
        }
    }
    PyObject *r = fast_safe_repr(val);
    if (r == NULL)
        return -1;
    int rc = PyUnicode_Check(r) ? ubuf_put_str(b, r) : 0;
    Py_DECREF(r);
    return rc;
}

/* "name\0repr\0name\0repr..." over the parameters (regs._param_names order), a
 * value unbound yet being None as with f_locals.get().  One str, as the Python twin
 * (tracers/function_graph.py) makes: it is not a container the cyclic GC tracks, so
 * what waits in the buffer does not show in the program's gc.get_objects() (test_descr
 * counts them).  The names come from co_localsplusnames, where the parameters come
 * first: co_varnames would build (and cache) a tuple on the code object.  The text is
 * made in one character buffer, no str per value. */
/* _native_frame.c */
int fntrace_iframe_local(void *iframe, PyObject *code, Py_ssize_t i, PyObject **out);

static PyObject *args_text(PyCodeObject *code, PyObject *frame, void *iframe);

static PyObject *
args_payload(PyObject *frame)
{
    if (frame == NULL || !PyFrame_Check(frame))
        return PyUnicode_FromStringAndSize(NULL, 0);
    PyCodeObject *code = PyFrame_GetCode((PyFrameObject *)frame);
    PyObject *out = args_text(code, frame, NULL);
    Py_DECREF(code);
    return out;
}

/* args_payload of the running interpreter frame `iframe` of `code` (the fast lane's
 * key under sys.monitoring): no frame object made; NULL without an exception where
 * that cannot be read (the caller makes the frame object). */
static PyObject *
args_payload_iframe(void *iframe, PyObject *code)
{
    PyObject *probe;
    if (fntrace_iframe_local(iframe, code, -1, &probe) < 0)
        return NULL;
    return args_text((PyCodeObject *)code, NULL, iframe);
}

/* the payload's text: the values read from `frame`, or from `iframe` when frame is
 * NULL */
static PyObject *
args_text(PyCodeObject *code, PyObject *frame, void *iframe)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *names = Py_NewRef(code->co_localsplusnames);
#else
    PyObject *names = PyCode_GetVarnames(code);
#endif
    PyObject *out = NULL;
    ubuf b;
    b.c = b.stack;
    b.n = 0;
    b.cap = (Py_ssize_t)(sizeof(b.stack) / sizeof(b.stack[0]));
    int allowed = -2;
    if (names == NULL)
        goto done;
    int npos = code->co_argcount, nkw = code->co_kwonlyargcount, flags = code->co_flags;
    Py_ssize_t order[260];
    int n = 0, i = npos + nkw;
    for (int k = 0; k < npos && n < 256; k++)
        order[n++] = k;
    if (flags & CO_VARARGS)
        order[n++] = i++;
    for (int k = npos; k < npos + nkw && n < 258; k++)
        order[n++] = k;
    if (flags & CO_VARKEYWORDS)
        order[n++] = i;

    for (int k = 0; k < n; k++) {
        if (order[k] >= PyTuple_GET_SIZE(names))
            break;
        PyObject *name = PyTuple_GET_ITEM(names, order[k]);
        PyObject *val = NULL;
        if (frame == NULL) {
            if (fntrace_iframe_local(iframe, (PyObject *)code, order[k], &val) < 0)
                val = NULL;
        }
        else {
            /* no f_locals snapshot: it would keep every local alive (_native_frame.c) */
            val = fntrace_frame_var(frame, name);
            if (val == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_NameError))
                    goto done;
                PyErr_Clear();
            }
        }
        if (val == NULL)
            val = Py_NewRef(Py_None);
        int rc = 0;
        if (k > 0) {
            rc = ubuf_room(&b, 1);
            if (rc == 0)
                b.c[b.n++] = 0;
        }
        if (rc == 0)
            rc = ubuf_put_str(&b, name);
        if (rc == 0)
            rc = ubuf_room(&b, 1);
        if (rc == 0) {
            b.c[b.n++] = 0;
            rc = ubuf_put_value(&b, val, &allowed);
        }
        Py_DECREF(val);
        if (rc < 0)
            goto done;
    }
    out = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, b.c, b.n);
done:
    if (b.c != b.stack)
        PyMem_Free(b.c);
    Py_XDECREF(names);
    return out;
}

/* retval_payload(v, unwind): ints as ints, else a short safe repr ("raised ..." on
 * unwind, in Python). */
static PyObject *
retval_payload(PyObject *v, PyObject *unwind)
{
    if (unwind == Py_True || v == NULL)
        return PyObject_CallFunctionObjArgs(g_retval_payload, v ? v : Py_None,
                                            unwind ? unwind : Py_False, NULL);
    if (PyLong_CheckExact(v)) {
        /* core/fetch.py int_payload: kept as an int while it fits 64 bits */
        int overflow = 0;
        PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow || (overflow > 0 && _PyLong_NumBits(v) <= 64))
            return Py_NewRef(v);
    }
    return fast_safe_repr(v);
}

/* st.task_vars[gops.idx] (new reference) */
static PyObject *
graph_var(PyObject *gops)
{
    PyObject *st = get_stack(1);
    if (st == NULL)
        return NULL;
    PyObject *idx = PyObject_GetAttr(gops, str_idx);
    if (idx == NULL) {
        Py_DECREF(st);
        return NULL;
    }
    PyObject *tv = PyList_GetItem(SLOT(st, off_st_task_vars), PyLong_AsSsize_t(idx));
    Py_XINCREF(tv);
    Py_DECREF(idx);
    Py_DECREF(st);
    return tv;
}

/* The shadow-stack frame being entered gets `ts` as its calltime (graph_entry). */
static int
set_calltime(long long ts)
{
    PyObject *st = get_stack(0);
    if (st == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *cur = SLOT(st, off_st_cur);
    if (cur != NULL && cur != Py_None) {
        PyObject *v = PyLong_FromLongLong(ts);
        if (v == NULL) {
            Py_DECREF(st);
            return -1;
        }
        set_slot(cur, off_fr_calltime, v);
    }
    Py_DECREF(st);
    return 0;
}

static PyObject *
graph_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "graph_entry(trace, gops, fregs)");
        return NULL;
    }
    PyObject *trace = args[0], *gops = args[1];
    PyObject *tr = PyObject_GetAttr(gops, str_private);
    if (tr == NULL)
        return NULL;
    PyObject *gf = SLOT(tr, off_tr_graph_fops);
    PyObject *cached = gf ? SLOT(gf, off_ops_filter_cached) : NULL;
    PyObject *func = SLOT(trace, off_ent_func);
    PyObject *tv = graph_var(gops);
    if (tv == NULL) {
        Py_DECREF(tr);
        return NULL;
    }
    long long v = slot_ll(tv, off_tv_value);
    PyObject *result = Py_False;
    long long depth = slot_ll(trace, off_ent_depth);
    if (v & TRACE_GRAPH_NOTRACE)
        goto out;
    PyObject *gn = SLOT(tr, off_tr_graph_notrace_fops);
    if (gn && hash_has(SLOT(gn, off_ops_filter_hash), func)) {
        /* skip this function and what it calls; its return clears the bit */
        set_slot(tv, off_tv_value, PyLong_FromLongLong(
            v | TRACE_GRAPH_NOTRACE | ((depth & DEPTH_MASK) << (DEPTH_SHIFT + 20))));
        result = Py_True;
        goto out;
    }
    if (gf && (!hash_empty(SLOT(gf, off_ops_filter_hash)) || (cached && PyObject_IsTrue(cached)))
            && !(v & TRACE_GRAPH_FL)) {
        if (!hash_has(SLOT(gf, off_ops_filter_hash), func))
            goto out;
        PyObject *uops = PyObject_GetAttr(gops, str_ops);
        int lazy = uops == gf;
        Py_XDECREF(uops);
        if (lazy) {
            /* the lazy start: rare, done by the Python twin */
            Py_DECREF(tv);
            Py_DECREF(tr);
            return PyObject_Vectorcall(g_graph_entry_py, args, nargs, NULL);
        }
        v = v | TRACE_GRAPH_FL | ((depth & DEPTH_MASK) << DEPTH_SHIFT);
        set_slot(tv, off_tv_value, PyLong_FromLongLong(v));
    }
    long long maxd = slot_ll(tr, off_tr_max_graph_depth);
    if (maxd && depth >= maxd)
        goto out;
    result = Py_True;
    if (slot_ll(tr, off_tr_tracing_thresh))
        goto out;
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on == NULL || !PyObject_IsTrue(on))
        goto out;
    PyObject *payload = NULL;
    if (slot_ll(tr, off_tr_graph_args)) {
        /* the arguments ride beside the record */
        payload = args_payload(SLOT(args[2], off_regs_frame));
        if (payload == NULL) {
            Py_DECREF(tv);
            Py_DECREF(tr);
            return NULL;
        }
    }
    RingBufferObject *buf = cpu_buffer(tr);
    if (buf == NULL) {
        Py_XDECREF(payload);
        Py_DECREF(tv);
        Py_DECREF(tr);
        return NULL;
    }
    PyObject *ipo = SLOT(func, off_rec_ip);
    unsigned long ip = ipo ? PyLong_AsUnsignedLong(ipo) : 0;
    /* One reading, after the set-up above (a thread's first buffer, the arguments):
     * the entry's timestamp and the call's start, so neither counts in its duration. */
    long long ts = now_ns();
    if (set_calltime(ts) < 0) {
        Py_XDECREF(payload);
        Py_DECREF(buf);
        Py_DECREF(tv);
        Py_DECREF(tr);
        return NULL;
    }
    long long w = payload
        ? rb_write_payload(buf, ts, FNT_TRACE_GRAPH_ENT, ip, (unsigned long)depth, 0, 0, payload)
        : rb_write(buf, ts, FNT_TRACE_GRAPH_ENT, 0, ip, (unsigned long)depth, 0, 0);
    Py_XDECREF(payload);
    Py_DECREF(buf);
    if (w == -2) {
        Py_DECREF(tv);
        Py_DECREF(tr);
        return NULL;
    }
out:
    Py_DECREF(tv);
    Py_DECREF(tr);
    return Py_NewRef(result);
}

static PyObject *
graph_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "graph_return(trace, gops, fregs)");
        return NULL;
    }
    PyObject *trace = args[0], *gops = args[1];
    PyObject *tr = PyObject_GetAttr(gops, str_private);
    if (tr == NULL)
        return NULL;
    PyObject *tv = graph_var(gops);
    if (tv == NULL) {
        Py_DECREF(tr);
        return NULL;
    }
    long long v = slot_ll(tv, off_tv_value);
    long long depth = slot_ll(trace, off_ret_depth);
    if (v & TRACE_GRAPH_NOTRACE) {
        if (((v >> (DEPTH_SHIFT + 20)) & DEPTH_MASK) == depth)
            set_slot(tv, off_tv_value, PyLong_FromLongLong(
                v & ~TRACE_GRAPH_NOTRACE & ~(DEPTH_MASK << (DEPTH_SHIFT + 20))));
        goto out;
    }
    if ((v & TRACE_GRAPH_FL) && ((v >> DEPTH_SHIFT) & DEPTH_MASK) == depth)
        set_slot(tv, off_tv_value, PyLong_FromLongLong(
            v & ~TRACE_GRAPH_FL & ~(DEPTH_MASK << DEPTH_SHIFT)));
    long long calltime = slot_ll(trace, off_ret_calltime);
    long long rettime = slot_ll(trace, off_ret_rettime);
    long long thresh = slot_ll(tr, off_tr_tracing_thresh);
    if (thresh && rettime - calltime < thresh)
        goto out;
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on == NULL || !PyObject_IsTrue(on))
        goto out;
    PyObject *payload = NULL;
    if (slot_ll(tr, off_tr_graph_retval)) {
        /* the return value rides beside the record */
        payload = retval_payload(SLOT(trace, off_ret_retval), SLOT(trace, off_ret_unwind));
        if (payload == NULL) {
            Py_DECREF(tv);
            Py_DECREF(tr);
            return NULL;
        }
    }
    RingBufferObject *buf = cpu_buffer(tr);
    if (buf == NULL) {
        Py_XDECREF(payload);
        Py_DECREF(tv);
        Py_DECREF(tr);
        return NULL;
    }
    PyObject *ipo = SLOT(SLOT(trace, off_ret_func), off_rec_ip);
    unsigned long ip = ipo ? PyLong_AsUnsignedLong(ipo) : 0;
    unsigned long ov = (unsigned long)slot_ll(trace, off_ret_overrun);
    long long w = payload
        ? rb_write_payload(buf, rettime, FNT_TRACE_GRAPH_RET, ip, (unsigned long)depth, ov,
                           (unsigned long long)calltime, payload)
        : rb_write(buf, rettime, FNT_TRACE_GRAPH_RET, 0, ip, (unsigned long)depth, ov,
                   (unsigned long long)calltime);
    Py_XDECREF(payload);
    Py_DECREF(buf);
    if (w == -2) {
        Py_DECREF(tv);
        Py_DECREF(tr);
        return NULL;
    }
out:
    Py_DECREF(tv);
    Py_DECREF(tr);
    Py_RETURN_NONE;
}

static PyObject *
set_graph_twins(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "set_graph_twins(graph_entry, safe_repr, retval_payload)");
        return NULL;
    }
    Py_XSETREF(g_graph_entry_py, Py_NewRef(args[0]));
    Py_XSETREF(g_safe_repr, Py_NewRef(args[1]));
    Py_XSETREF(g_retval_payload, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

static PyObject *
native_init_fgraph(PyObject *self, PyObject *ns)
{
    PyObject *S_type, *st_type, *fr_type, *ent_type, *ret_type, *ops_type, *hash_type, *tv_type,
             *v;
    GET("S", g_S);
    GET("tls", g_tls);
    GET("shadow_stack", g_shadow_stack);
    GET("fgraph_array", g_fgraph_array);
    GET("contain", g_fg_contain);
    GET("missed", g_fg_missed);
    GET("resume", g_py_fgraph_resume);
    GET("graph_ops", g_graph_ops);
    GET("State", S_type);
    GET("ShadowStack", st_type);
    GET("FgraphFrame", fr_type);
    g_frame_type = (PyTypeObject *)fr_type;
    GET("FtraceGraphEnt", ent_type);
    g_ent_type = (PyTypeObject *)ent_type;
    GET("FtraceGraphRet", ret_type);
    g_ret_type = (PyTypeObject *)ret_type;
    GET("Ops", ops_type);
    GET("FtraceHash", hash_type);
    GET("TaskVar", tv_type);
    GET("MAX_DEPTH", v);
    g_max_depth = PyLong_AsLong(v);
    OFF(S_type, "users", off_S_users);
    OFF(S_type, "epoch", off_S_epoch);
    OFF(st_type, "frames", off_st_frames);
    OFF(st_type, "task_vars", off_st_task_vars);
    OFF(st_type, "overrun", off_st_overrun);
    OFF(st_type, "epoch", off_st_epoch);
    OFF(st_type, "cur", off_st_cur);
    OFF(st_type, "ret", off_st_ret);
    OFF(fr_type, "frame", off_fr_frame);
    OFF(fr_type, "rec", off_fr_rec);
    OFF(fr_type, "depth", off_fr_depth);
    OFF(fr_type, "bitmap", off_fr_bitmap);
    OFF(fr_type, "data", off_fr_data);
    OFF(fr_type, "calltime", off_fr_calltime);
    OFF(ent_type, "func", off_ent_func);
    OFF(ent_type, "depth", off_ent_depth);
    OFF(ret_type, "func", off_ret_func);
    OFF(ret_type, "depth", off_ret_depth);
    OFF(ret_type, "retval", off_ret_retval);
    OFF(ret_type, "calltime", off_ret_calltime);
    OFF(ret_type, "rettime", off_ret_rettime);
    OFF(ret_type, "overrun", off_ret_overrun);
    OFF(ret_type, "unwind", off_ret_unwind);
    OFF(ops_type, "flags", off_ops_flags);
    OFF(ops_type, "filter_hash", off_ops_filter_hash);
    OFF(ops_type, "notrace_hash", off_ops_notrace_hash);
    OFF(ops_type, "filter_cached", off_ops_filter_cached);
    OFF(hash_type, "entries", off_hash_entries);
    OFF(tv_type, "value", off_tv_value);
    Py_RETURN_NONE;
}

/* -- CRC-32 of trace-file blocks (tracefile.py) ---------------------------------------
 *
 * The same CRC as zlib.crc32 (the reflected 0xEDB88320 polynomial), which a trace file
 * of function_graph events spends a fair share of the recording in (zlib's byte-wise
 * code runs at about 3.8 instructions a byte).  Where the CPU has carry-less multiply,
 * 64-byte blocks are folded with PCLMULQDQ (Gopal et al., "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ Instruction", Intel 2009; the constants are the
 * paper's for this polynomial, as zlib's and Chromium's SIMD paths use them); the rest
 * goes through a table.  tests/test_tracefile.py checks it against zlib.crc32. */
static uint32_t crc_table[256];

static void
crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t
crc32_bytes(uint32_t crc, const unsigned char *p, size_t n)
{
    /* crc is the running register (not inverted) */
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1

/* len >= 64 and a multiple of 16; crc is the running register */
__attribute__((target("pclmul,sse4.1")))
static uint32_t
crc32_clmul(const unsigned char *buf, size_t len, uint32_t crc)
{
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {            /* four folds in parallel */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);      /* fold the four into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);       /* 128 -> 64 bits */
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);    /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int g_have_clmul;

static PyObject *
native_crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* crc32(data, value=0): zlib.crc32's result */
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, value=0)");
        return NULL;
    }
    unsigned long v = 0;
    if (nargs == 2) {
        v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    size_t n = (size_t)view.len;
    uint32_t crc = ~(uint32_t)v;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_CLMUL_PATH
    if (g_have_clmul && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        crc = crc32_clmul(p, chunk, crc);
        p += chunk;
        n -= chunk;
    }
#endif
    crc = crc32_bytes(crc, p, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(~crc & 0xffffffffu);
}

/* -- the program's own sys.setprofile beside fntrace's hook (arch/profile.py) --------
 *
 * ProfileShim(real_setprofile, real_getprofile, hook, chained, chain, skip, pure):
 * .setprofile and .getprofile replace sys.setprofile / sys.getprofile while the
 * setprofile back end is on.  They are C functions, as the real ones are, so a
 * program's profiler sees the same events for them (a c_call, a c_return), and no
 * frame of fntrace's.  Python fallback: arch/profile.py.  Not the hot path: used whether or not
 * FNTRACE_PURE is set. */
typedef struct {
    PyObject_HEAD
    PyObject *real_set, *real_get;   /* the builtins */
    PyObject *hook;                  /* fntrace's profile function */
    PyObject *chained;               /* the same, calling the program's after it (pure) */
    PyObject *chain;                 /* dispatch.profile_chain: ident -> program's */
    PyObject *threads;               /* the program's threading.setprofile, or None */
    PyObject *skip;                  /* dispatch.profile_chain_skip */
    int pure;
    int active;
    unsigned long installing;        /* the thread dropping its old function, or 0 */
} ShimObject;

static int
shim_own(ShimObject *sh, PyObject *f)
{
    return f == sh->hook || f == sh->chained;
}

static PyObject *
shim_setprofile(ShimObject *sh, PyObject *function)
{
    PyObject *key = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (key == NULL)
        return NULL;
    PyObject *r = NULL;
    if (shim_own(sh, function)) {
        /* a new thread's bootstrap installing fntrace's hook (threading) */
        r = PyObject_CallOneArg(sh->real_set, function);
        if (r != NULL && sh->threads != Py_None) {
            Py_DECREF(r);
            r = NULL;
            if (PyDict_SetItem(sh->chain, key, sh->threads) == 0)
                r = PyObject_CallOneArg(sh->real_set, sh->pure ? sh->chained : sh->hook);
        }
        Py_DECREF(key);
        return r;
    }
    unsigned long ident = PyThread_get_thread_ident();
    if (sh->installing == ident) {
        /* as 3.11's sys.setprofile: called from the old function's __del__ while it
         * is being replaced (test_sys_setprofile test_reentrancy) */
        PyErr_SetString(PyExc_RuntimeError, "Cannot install a profile function while "
                        "another profile function is being installed");
        goto out;
    }
    /* the old function is dropped below, with installing set: its __del__ may run */
    PyObject *old = PyDict_GetItemWithError(sh->chain, key);
    if (old == NULL && PyErr_Occurred())
        goto out;
    Py_XINCREF(old);
    int err = 0;
    if (function == Py_None) {
        if (old != NULL)
            err = PyDict_DelItem(sh->chain, key);
    }
    else {
        err = PyDict_SetItem(sh->chain, key, function);
        /* installed during this call: its own c_return is not the new function's */
        if (!err && old == NULL && sh->skip != NULL)
            err = PySet_Add(sh->skip, key);
    }
    if (old != NULL) {
        unsigned long outer = sh->installing;
        sh->installing = ident;
        Py_DECREF(old);
        sh->installing = outer;
    }
    if (err < 0)
        goto out;
    if (!sh->active) {
        r = PyObject_CallOneArg(sh->real_set, function);
        goto out;
    }
    PyObject *cur = PyObject_CallNoArgs(sh->real_get);
    if (cur == NULL)
        goto out;
    int taken = cur != Py_None && !shim_own(sh, cur);
    Py_DECREF(cur);
    if (taken) {
        /* a profiler installed through the C API has the thread: leave it */
        r = Py_NewRef(Py_None);
        goto out;
    }
    r = PyObject_CallOneArg(sh->real_set,
                            sh->pure && function != Py_None ? sh->chained : sh->hook);
out:
    Py_DECREF(key);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *
shim_getprofile(ShimObject *sh, PyObject *unused)
{
    PyObject *cur = PyObject_CallNoArgs(sh->real_get);
    if (cur == NULL)
        return NULL;
    if (cur != Py_None && !shim_own(sh, cur))
        return cur;                 /* installed through the C API (cProfile) */
    Py_DECREF(cur);
    PyObject *key = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (key == NULL)
        return NULL;
    PyObject *f = PyDict_GetItemWithError(sh->chain, key);
    Py_DECREF(key);
    if (f == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    return Py_NewRef(f);
}

static int
shim_traverse(ShimObject *sh, visitproc visit, void *arg)
{
    Py_VISIT(sh->real_set);
    Py_VISIT(sh->real_get);
    Py_VISIT(sh->hook);
    Py_VISIT(sh->chained);
    Py_VISIT(sh->chain);
    Py_VISIT(sh->threads);
    Py_VISIT(sh->skip);
    return 0;
}

static int
shim_clear(ShimObject *sh)
{
    Py_CLEAR(sh->real_set);
    Py_CLEAR(sh->real_get);
    Py_CLEAR(sh->hook);
    Py_CLEAR(sh->chained);
    Py_CLEAR(sh->chain);
    Py_CLEAR(sh->threads);
    Py_CLEAR(sh->skip);
    return 0;
}

static void
shim_dealloc(ShimObject *sh)
{
    PyObject_GC_UnTrack(sh);
    shim_clear(sh);
    Py_TYPE(sh)->tp_free((PyObject *)sh);
}

static int
shim_init(ShimObject *sh, PyObject *args, PyObject *kw)
{
    PyObject *rs, *rg, *hook, *chained, *chain, *skip;
    int pure;
    if (!PyArg_ParseTuple(args, "OOOOO!O!p", &rs, &rg, &hook, &chained, &PyDict_Type, &chain,
                          &PySet_Type, &skip, &pure))
        return -1;
    Py_XSETREF(sh->skip, Py_NewRef(skip));
    Py_XSETREF(sh->real_set, Py_NewRef(rs));
    Py_XSETREF(sh->real_get, Py_NewRef(rg));
    Py_XSETREF(sh->hook, Py_NewRef(hook));
    Py_XSETREF(sh->chained, Py_NewRef(chained));
    Py_XSETREF(sh->chain, Py_NewRef(chain));
    Py_XSETREF(sh->threads, Py_NewRef(Py_None));
    sh->pure = pure;
    sh->active = 1;
    return 0;
}

static PyMethodDef shim_methods[] = {
    {"setprofile", (PyCFunction)shim_setprofile, METH_O,
     "setprofile(function)\n--\n\nSet the profiling function.  It will be called on each "
     "function call and return.  See the profiler chapter in the library manual."},
    {"getprofile", (PyCFunction)shim_getprofile, METH_NOARGS,
     "getprofile()\n--\n\nReturn the profiling function set with sys.setprofile.\n\n"
     "See the profiler chapter in the library manual."},
    {NULL}
};

static PyMemberDef shim_members[] = {
    {"threads", T_OBJECT, offsetof(ShimObject, threads), 0,
     "the program's threading.setprofile function, or None"},
    {"active", T_INT, offsetof(ShimObject, active), 0, NULL},
    {NULL}
};

static PyTypeObject Shim_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fntrace._native.ProfileShim",
    .tp_basicsize = sizeof(ShimObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)shim_init,
    .tp_dealloc = (destructor)shim_dealloc,
    .tp_traverse = (traverseproc)shim_traverse,
    .tp_clear = (inquiry)shim_clear,
    .tp_methods = shim_methods,
    .tp_members = shim_members,
    .tp_doc = "The program's sys.setprofile/getprofile beside fntrace's hook.",
};

/* -- init ---------------------------------------------------------------------------- */

static PyObject *
native_init(PyObject *self, PyObject *ns)
{
    if (!PyDict_Check(ns)) {
        PyErr_SetString(PyExc_TypeError, "init(namespace dict)");
        return NULL;
    }
    PyObject *rec_type, *G_type, *ops_type, *regs_type, *v;
    GET("sites", g_sites);
    GET("by_code", g_by_code);
    GET("no_site", g_no_site);
    g_sites_dict_for_cache = g_sites;
    g_by_code_dict_for_cache = g_by_code;
    g_no_site_dict_for_cache = g_no_site;
    GET("ROOT", g_root);
    GET("G", g_G);
    GET("contain", g_contain);
    GET("parent_slow", g_parent_slow);
    GET("return_offsets", g_return_offsets);
    GET("NO_RETVAL", g_no_retval);
    GET("DISABLE", g_disable);
    GET("profile_resume", g_profile_resume);
    GET("profile_return", g_profile_return);
    GET("profile_chain", g_chain);
    GET("profile_chain_skip", g_chain_skip);
    GET("FtraceRegs", regs_type);
    g_regs_type = (PyTypeObject *)regs_type;
    GET("DynFtrace", rec_type);
    GET("Global", G_type);
    GET("Ops", ops_type);
    GET("REGS_EN", v);
    g_REGS_EN = PyLong_AsLongLong(v);
    GET("RET_EN", v);
    g_RET_EN = PyLong_AsLongLong(v);
    OFF(rec_type, "func", off_rec_func);
    OFF(rec_type, "ops", off_rec_ops);
    OFF(rec_type, "flags", off_rec_flags);
    OFF(rec_type, "ip", off_rec_ip);
    OFF(rec_type, "gen_start", off_rec_gen_start);
    OFF(G_type, "trace_function", off_G_trace_function);
    OFF(G_type, "trace_op", off_G_trace_op);
    OFF(G_type, "ret_handler", off_G_ret_handler);
    OFF(G_type, "resume_handler", off_G_resume_handler);
    OFF(G_type, "trap", off_G_trap);
    OFF(regs_type, "frame", off_regs_frame);
    OFF(regs_type, "rec", off_regs_rec);
    OFF(regs_type, "regs", off_regs_regs);
    OFF(regs_type, "retval", off_regs_retval);
    OFF(ops_type, "private", off_ops_private);
    Py_RETURN_NONE;
}

/* bind_trace_array(TraceArray): the slots of the trace array that the tracers' native
 * callbacks read.  Called by trace.py, which defines the type: the hot path below it
 * learns the layout from it instead of importing it. */
static PyObject *
bind_trace_array(PyObject *self, PyObject *tr_type)
{
    if (!PyType_Check(tr_type)) {
        PyErr_SetString(PyExc_TypeError, "bind_trace_array(type)");
        return NULL;
    }
    OFF(tr_type, "tracing_on", off_tr_tracing_on);
    OFF(tr_type, "local", off_tr_local);
    OFF(tr_type, "serial", off_tr_serial);
    OFF(tr_type, "graph_fops", off_tr_graph_fops);
    OFF(tr_type, "graph_notrace_fops", off_tr_graph_notrace_fops);
    OFF(tr_type, "max_graph_depth", off_tr_max_graph_depth);
    OFF(tr_type, "tracing_thresh", off_tr_tracing_thresh);
    OFF(tr_type, "graph_args", off_tr_graph_args);
    OFF(tr_type, "graph_retval", off_tr_graph_retval);
    Py_RETURN_NONE;
}

static PyMethodDef native_methods[] = {
    {"init", native_init, METH_O, "init(namespace): share the Python side's state"},
    {"bind_trace_array", bind_trace_array, METH_O,
     "bind_trace_array(type): the trace array's slots the tracers' callbacks read"},
    {"on_py_start", (PyCFunction)(void (*)(void))on_py_start, METH_FASTCALL, NULL},
    {"on_py_start_global", (PyCFunction)(void (*)(void))on_py_start_global, METH_FASTCALL, NULL},
    {"on_py_return", (PyCFunction)(void (*)(void))on_py_return, METH_FASTCALL, NULL},
    {"on_py_unwind", (PyCFunction)(void (*)(void))on_py_unwind, METH_FASTCALL, NULL},
    {"on_py_resume", (PyCFunction)(void (*)(void))on_py_resume, METH_FASTCALL, NULL},
    {"on_py_throw", (PyCFunction)(void (*)(void))on_py_throw, METH_FASTCALL, NULL},
    {"function_trace_call", (PyCFunction)(void (*)(void))function_trace_call, METH_FASTCALL, NULL},
    {"busy_threads", busy_threads, METH_NOARGS, NULL},
    {"thread_exit", thread_exit, METH_NOARGS,
     "thread_exit(): the calling thread ends; its native state is freed"},
    {"cache_clear", cache_clear, METH_NOARGS, "forget the pointer caches (an entry was removed)"},
    {"cache_forget", cache_forget, METH_O, "forget one address (id) in the pointer caches"},
    {"init_fgraph", native_init_fgraph, METH_O, NULL},
    {"set_graph_twins", (PyCFunction)(void (*)(void))set_graph_twins, METH_FASTCALL, NULL},
    {"function_graph_enter", (PyCFunction)(void (*)(void))function_graph_enter, METH_FASTCALL, NULL},
    {"fgraph_return", (PyCFunction)(void (*)(void))fgraph_return, METH_FASTCALL, NULL},
    {"graph_entry", (PyCFunction)(void (*)(void))graph_entry, METH_FASTCALL, NULL},
    {"graph_return", (PyCFunction)(void (*)(void))graph_return, METH_FASTCALL, NULL},
    {"thread_count", thread_count, METH_O, NULL},
    {"value_text", value_text, METH_O,
     "value_text(v): core.fetch.value_repr's text made natively, None if not handled"},
    {"frame_var", (PyCFunction)(void (*)(void))frame_var, METH_FASTCALL,
     "frame_var(frame, name): a local's value without the f_locals snapshot"},
    {"crc32", (PyCFunction)(void (*)(void))native_crc32, METH_FASTCALL,
     "crc32(data, value=0): the same value as zlib.crc32, faster"},
    {"fg_sync", (PyCFunction)(void (*)(void))fg_sync, METH_FASTCALL,
     "fg_sync(lane_tr, fast, epoch): who owns fgraph's fast lane"},
    {"encode_records", (PyCFunction)(void (*)(void))fntrace_encode_records, METH_FASTCALL,
     "encode_records(records): record_codec.py_encode's bytes, faster"},
    {"decode_records", (PyCFunction)(void (*)(void))fntrace_decode_records, METH_FASTCALL,
     "decode_records(data, n): record_codec.py_decode's records, faster"},
    {"pack_payloads", (PyCFunction)(void (*)(void))fntrace_pack_payloads, METH_FASTCALL,
     "pack_payloads(records, first_seq, payloads, step, dumps): write_chunk's payload bytes"},
    {NULL}
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "fntrace._native",
    "The native twin of fntrace's hot path (see the Python modules it mirrors).",
    -1, native_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_table_init();
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    g_have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    if (PyType_Ready(&ProfileHook_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL)
        return NULL;
    RingBuffer_Type = (PyTypeObject *)PyType_FromSpec(&RingBuffer_spec);
    if (RingBuffer_Type == NULL)
        return NULL;
    Py_INCREF(RingBuffer_Type);
    if (PyModule_AddObject(m, "RingBufferBase", (PyObject *)RingBuffer_Type) < 0)
        return NULL;
    Py_INCREF(&ProfileHook_Type);
    if (PyModule_AddObject(m, "ProfileHook", (PyObject *)&ProfileHook_Type) < 0)
        return NULL;
    if (PyType_Ready(&Shim_Type) < 0)
        return NULL;
    Py_INCREF(&Shim_Type);
    if (PyModule_AddObject(m, "ProfileShim", (PyObject *)&Shim_Type) < 0)
        return NULL;
    /* the function_graph tracer's fast-lane pair, handed to fgraph through FgraphOps */
    PyObject *lane = PyCapsule_New((void *)&graph_lane, LANE_CAPSULE, NULL);
    if (lane == NULL || PyModule_AddObject(m, "graph_lane", lane) < 0)
        return NULL;
    if (PyModule_AddStringConstant(m, "RECORD_FORMAT_ID", FNT_FORMAT_ID) < 0)
        return NULL;
    str_buf = PyUnicode_InternFromString("buf");
    str_cpu_buffer = PyUnicode_InternFromString("cpu_buffer");
    str_items = PyUnicode_InternFromString("items");
    str_append = PyUnicode_InternFromString("append");
    str_notify_fd = PyUnicode_InternFromString("notify_fd");
    str_pending = PyUnicode_InternFromString("pending");
    str_limit = PyUnicode_InternFromString("limit");
    str_closed = PyUnicode_InternFromString("closed");
    str_st = PyUnicode_InternFromString("st");
    str_entryfunc = PyUnicode_InternFromString("entryfunc");
    str_retfunc = PyUnicode_InternFromString("retfunc");
    str_ops = PyUnicode_InternFromString("ops");
    str_idx = PyUnicode_InternFromString("idx");
    str_private = PyUnicode_InternFromString("private");
    g_args_sep = PyUnicode_FromStringAndSize("\0", 1);
    if (g_args_sep == NULL)
        return NULL;
    if (str_buf == NULL || str_cpu_buffer == NULL || str_items == NULL || str_append == NULL
            || str_notify_fd == NULL || str_pending == NULL || str_limit == NULL
            || str_closed == NULL)
        return NULL;
    g_function_trace_call = PyObject_GetAttrString(m, "function_trace_call");
    if (g_function_trace_call == NULL)
        return NULL;
    g_fgraph_enter_fn = PyObject_GetAttrString(m, "function_graph_enter");
    g_fgraph_return_fn = PyObject_GetAttrString(m, "fgraph_return");
    g_zero = PyLong_FromLong(0);
    if (g_fgraph_enter_fn == NULL || g_fgraph_return_fn == NULL || g_zero == NULL)
        return NULL;
    return m;
}
