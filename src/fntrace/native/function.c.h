/* fntrace._native, part function.c.h (included by _native.c after native.h; see there).
 * Python twin: tracers/function.py: function_trace_call */

/* -- The function tracer (tracers/function.function_trace_call) -------------------- */

/* Each thread remembers the last trace array it wrote to and that array's buffer for
 * this thread (what tr.local.buf would give), saving the threading.local lookup. */
static _Thread_local PyObject *tl_tr TLS_FAST;
static _Thread_local PyObject *tl_buf TLS_FAST;
static _Thread_local PyObject *tl_local TLS_FAST;
static _Thread_local long long tl_serial TLS_FAST;

/* cpu_buffer()'s answer for a thread the instance ignores (set_ftrace_pid,
 * set_ftrace_notrace_pid, tracing_cpumask, fntrace's own threads): tr.local.buf is
 * None, cached like a buffer (the kernel's per-CPU ftrace_ignore_pid).  Every caller
 * tests it before writing. */
#define BUF_IGNORED(b) ((PyObject *)(b) == Py_None)

/* cpu_buffer() past the thread's cached answer: tr.local.buf, or tr.cpu_buffer() */
static __attribute__((noinline)) RingBufferObject *
cpu_buffer_slow(PyObject *tr, PyObject *local, long long serial)
{
    PyObject *buf = NULL;
    /* A thread that never cached a buffer (its first event) has no tr.local.buf to
     * find: the failed look-up would make and drop an AttributeError.  (Asking
     * tr.cpu_buffer() where one is set is only slower: it gives the same buffer.) */
    if (local != NULL && tl_tr != NULL) {
        CREDITED_CALL(buf, PyObject_GetAttr(local, str_buf));
        if (buf == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear();
        }
    }
    if (buf == NULL)
        CREDITED_CALL(buf, PyObject_CallMethodNoArgs(tr, str_cpu_buffer));
    if (buf != NULL && buf != Py_None && !PyObject_TypeCheck(buf, RingBuffer_Type)) {
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

/* The thread's cached answer for `tr` (borrowed), or NULL: then *local and *serial are
 * what cpu_buffer_slow() asks with.  Borrowed pointers: a thread's storage has no
 * destructor, so a strong reference here would keep a finished thread's buffer alive
 * for ever.  The trace array's serial number tells a new array at a freed one's address
 * apart; an array frees a thread's buffer only once that thread has ended (trace.py). */
static inline __attribute__((always_inline)) PyObject *
buf_cached(PyObject *tr, PyObject **local, long long *serial)
{
    *local = SLOT(tr, off_tr_local);
    *serial = slot_ll(tr, off_tr_serial);
    if (__builtin_expect(tr == tl_tr && *local == tl_local && *serial == tl_serial
                         && tl_buf != NULL, 1))
        return tl_buf;
    return NULL;
}

/* tr.local.buf, or tr.cpu_buffer() on a thread's first event (new reference); Py_None
 * (BUF_IGNORED) for an ignored thread.  The cached answer is inlined into the caller,
 * without a call's prologue. */
static inline __attribute__((always_inline)) RingBufferObject *
cpu_buffer(PyObject *tr)
{
    PyObject *local;
    long long serial;
    PyObject *buf = buf_cached(tr, &local, &serial);
    if (__builtin_expect(buf != NULL, 1))
        return (RingBufferObject *)Py_NewRef(buf);
    return cpu_buffer_slow(tr, local, serial);
}

/* cpu_buffer() without references on the common path: the thread's cached buffer is
 * borrowed (tr.local holds it, and nothing runs Python code before the record is in:
 * rb_write_slow holds it across a hand-over).  A miss (the thread's first event, a new
 * array) calls into Python, so `tr` and the new reference are held until buf_put(),
 * and a callback's thread `t` (buf_get_cb; NULL: none) is marked busy for
 * synchronize() meanwhile; the cached answer runs no code and is not. */
static inline __attribute__((always_inline)) RingBufferObject *
buf_get_in(thread_rec *t, PyObject *tr, PyObject **held)
{
    PyObject *local;
    long long serial;
    PyObject *buf = buf_cached(tr, &local, &serial);
    *held = NULL;
    if (__builtin_expect(buf != NULL, 1))
        return (RingBufferObject *)buf;
    *held = Py_NewRef(tr);
    if (t != NULL)
        t->busy++;
    RingBufferObject *b = cpu_buffer_slow(tr, local, serial);
    if (t != NULL)
        t->busy--;
    return b;
}

#define buf_get(tr, held) buf_get_in(NULL, (tr), (held))
#define buf_get_cb(t, tr, held) buf_get_in((t), (tr), (held))

/* Before anything that may run Python code while a buf_get() buffer is in hand. */
static inline void
buf_hold(PyObject *tr, RingBufferObject *buf, PyObject **held)
{
    if (*held == NULL) {
        *held = Py_NewRef(tr);
        Py_INCREF(buf);
    }
}

static inline __attribute__((always_inline)) void
buf_put(RingBufferObject *buf, PyObject *held)
{
    if (__builtin_expect(held != NULL, 0)) {
        Py_XDECREF(buf);
        Py_DECREF(held);
    }
}

/* The verdict cpu_buffer() cached says `tr` ignores the calling thread (no call into
 * Python, nothing computed: the dispatch asks before it finds the caller's record). */
static inline int
thread_ignored_by(PyObject *tr)
{
    return tl_buf == Py_None && tr == tl_tr && tr != NULL && SLOT(tr, off_tr_local) == tl_local
        && slot_ll(tr, off_tr_serial) == tl_serial;
}

/* forget_cpu_buffer(): the calling thread's cached buffer (or verdict) is dropped, so
 * its next event asks tr.local again (trace.py: a thread that became fntrace's own). */
static PyObject *
forget_cpu_buffer(PyObject *self, PyObject *unused)
{
    tl_tr = NULL;
    tl_buf = NULL;
    tl_local = NULL;
    Py_RETURN_NONE;
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
    PyObject *held;
    RingBufferObject *buf = buf_get(tr, &held);
    if (buf == NULL || BUF_IGNORED(buf)) {
        buf_put(buf, held);
        return buf == NULL ? -1 : 0;
    }
    PyObject *ipo = SLOT(ip, off_rec_ip), *pipo = SLOT(parent_ip, off_rec_ip);
    unsigned long a = ipo ? (unsigned long)fast_ll(ipo) : 0;
    unsigned long b = pipo ? (unsigned long)fast_ll(pipo) : 0;
    long long rc = rb_write(buf, now_ns(), FNT_TRACE_FN, 0, a, b, 0, 0);
    buf_put(buf, held);
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


