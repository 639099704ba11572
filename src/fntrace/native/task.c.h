/* fntrace._native, part task.c.h (included by _native.c after native.h; see there).
 * Python twin: core/ops.py synchronize(): busy_threads, thread_count */

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
    long long cpu0;            /* sleep-time 0: the thread's CPU clock at entry (0: none) */
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
    long long lane_cpu0;       /* the CPU clock the lane's enter took for the frame it
                                * pushes next (0: none): its cpu0 */
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
     * for the lane (nothing done), 2 refused by the user (not pushed: an ignored
     * thread), -1 error.  `data` is borrowed: hold a reference
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
static inline int fg_lane_ignored(thread_rec *t);
static inline int thread_ignored_by(PyObject *tr);
static int fg_fast_return(fkey k, PyObject *retval, int unwind);
static inline __attribute__((always_inline)) int
fg_fast_return_in(thread_rec *t, fkey k, PyObject *retval, int unwind);
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

