/*
 * fntrace._native: the native twin of the hot path -- the shared header.
 *
 * Each function of the parts below mirrors one Python function, branch by branch, and is
 * swapped in for it when the extension is importable (unless FNTRACE_PURE=1).  The
 * parts, in the order _native.c includes them, and the Python each one twins:
 *
 *   native/task.c.h           core/ops.py synchronize(): busy_threads, thread_count
 *   native/dispatch.c.h       core/dispatch.py: on_py_start*, on_py_resume/throw/return
 *   native/profile.c.h        arch/profile.py: the setprofile hook (3.11)
 *   native/ring_buffer.c.h    ring_buffer.py: RingBuffer.write, write_payload, handoff
 *   native/function.c.h       tracers/function.py: function_trace_call
 *   native/fgraph.c.h         fgraph.py: function_graph_enter, fgraph_return
 *   native/fgraph_lane.c.h    none: FNTRACE_PURE=1 takes fgraph.py's general path
 *   native/function_graph.c.h tracers/function_graph.py: graph_entry/return, lane pair
 *   native/function_profile.c.h tracers/function_profile.py: ProfileStat, profile_graph_*
 *   native/payloads.c.h       core/fetch.py, tracers/function_graph.py: args/retval payloads
 *   native/crc32.c.h          zlib.crc32 (tracefile/blocks.py)
 *   native/profile_shim.c.h   arch/profile.py: ProfileShim (the program's own hook)
 *   native/stack.c.h          tracers/stack.py: _walk (the stack tracer's measure)
 *
 * Separate translation units, each with its own Python twin:
 *   _native_frame.c           core/fetch.py: a frame's locals and arguments without f_locals
 *   _native_value.c           core/fetch.py: value_repr's text of the built-in values
 *   _native_encode.c          tracefile/codec.py: encode / decode of the trace file's records
 *
 * Parts with no Python twin: fgraph_lane.c.h (the fast lane) and, in this header, the
 * pointer cache in front of the id()-keyed dicts; both are shortcuts the pure path
 * does not need.
 *
 * The hot path runs through several parts in one call (dispatch.c.h -> fgraph.c.h ->
 * fgraph_lane.c.h -> function_graph.c.h -> ring_buffer.c.h), so they are compiled as ONE
 * translation unit: _native.c includes this header and then each part, and the compiler
 * inlines across them exactly as when they were one file.  A part is not compiled on its
 * own; it may use everything declared above it in that order.
 *
 * The objects stay Python objects (records, ops, shadow-stack frames ...): the parts
 * read and write their __slots__ at the offsets their member descriptors give, so the
 * control path in Python and the hot path here share one state.  User callbacks are
 * called as Python callables; only the machinery is native.
 *
 * A callback that raises Exception or SystemExit is handed to the Python contain()
 * (counted, reported once); anything else (KeyboardInterrupt) propagates, as in Python.
 */
#ifndef FNTRACE_NATIVE_H
#define FNTRACE_NATIVE_H
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

/* Stack credit for the callbacks.  A callback runs on the program's stack, and where it
 * calls into Python (a code object seen for the first time, a thread's first buffer,
 * contain() and its notice) it needs frames the program may not have left: at the
 * recursion limit that call would fail and the event be lost — even its counting and
 * its notice.  So each such call (CREDITED_CALL; the fast paths call nothing and pay
 * nothing) that finds fewer than CB_CREDIT frames left is granted that many more for
 * its own duration, taken back on the way out (the program's frames are all below it:
 * it sees its own limit).  Python 3.12+ counts
 * Python frames and C calls apart; 3.14 measures the C stack instead of counting. */
#define CB_CREDIT 100
#if PY_VERSION_HEX >= 0x030E0000
#define CB_LOW(ts) ((ts)->py_recursion_remaining < CB_CREDIT)
#define CB_ADD(ts, n) ((ts)->py_recursion_remaining += (n))
#elif PY_VERSION_HEX >= 0x030C0000
#define CB_LOW(ts) ((ts)->py_recursion_remaining < CB_CREDIT \
                    || (ts)->c_recursion_remaining < CB_CREDIT)
#define CB_ADD(ts, n) ((ts)->py_recursion_remaining += (n), (ts)->c_recursion_remaining += (n))
#else
#define CB_LOW(ts) ((ts)->recursion_remaining < CB_CREDIT)
#define CB_ADD(ts, n) ((ts)->recursion_remaining += (n))
#endif

static inline PyThreadState *
cb_credit_take(void)
{
    PyThreadState *ts = PyThreadState_GET();
    if (__builtin_expect(CB_LOW(ts), 0)) {
        CB_ADD(ts, CB_CREDIT);
        return ts;
    }
    return NULL;
}

static inline void
cb_credit_give_back(PyThreadState *ts)
{
    if (__builtin_expect(ts != NULL, 0))
        CB_ADD(ts, -CB_CREDIT);
}

/* result = expr, a call into Python from a callback, with the credit around it. */
#define CREDITED_CALL(result, expr) do { \
        PyThreadState *credit_ = cb_credit_take(); \
        result = (expr); \
        cb_credit_give_back(credit_); \
    } while (0)

static inline long long
now_ns(void)
{
    /* time.monotonic_ns() reads CLOCK_MONOTONIC too: both paths share one clock. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline long long
thread_cpu_ns(void)
{
    /* time.thread_time_ns() reads the same clock: both twins agree */
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* An int's value, without PyLong_AsLongLong's call for the small ones (one digit: a
 * serial, a depth, an option's 0 or 1), read on every traced call. */
static inline long long
fast_ll(PyObject *v)
{
    if (PyLong_CheckExact(v)) {
#if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)v))
            return (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
#if PY_VERSION_HEX < 0x030E0000
        /* two digits, positive: a record's flags word (its high bits), read on every
         * return (PyLong_AsLongLong goes through _PyLong_AsByteArray for it: ~190
         * instructions) */
        const PyLongObject *lv = (const PyLongObject *)v;
        if (lv->long_value.lv_tag == ((uintptr_t)2 << _PyLong_NON_SIZE_BITS))
            return (long long)lv->long_value.ob_digit[0]
                 | ((long long)lv->long_value.ob_digit[1] << PyLong_SHIFT);
#endif
#else
        Py_ssize_t size = Py_SIZE(v);
        if (size == 0)
            return 0;
        if (size == 1)
            return (long long)((PyLongObject *)v)->ob_digit[0];
        if (size == -1)
            return -(long long)((PyLongObject *)v)->ob_digit[0];
        if (size == 2)      /* (a record's flags word: see above) */
            return (long long)((PyLongObject *)v)->ob_digit[0]
                 | ((long long)((PyLongObject *)v)->ob_digit[1] << PyLong_SHIFT);
#endif
    }
    return PyLong_AsLongLong(v);
}

static inline long long
slot_ll(PyObject *obj, Py_ssize_t off)
{
    PyObject *v = SLOT(obj, off);
#if PY_VERSION_HEX >= 0x030C0000
    /* an int first: a serial, a threshold (read on every traced call) */
    if (v != NULL && PyLong_CheckExact(v) && PyUnstable_Long_IsCompact((PyLongObject *)v))
        return (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
#endif
    if (v == NULL || v == Py_None)
        return 0;
    if (v == Py_True)
        return 1;
    if (v == Py_False)
        return 0;
    return fast_ll(v);
}

/* -- State shared with the Python side (set once by init()) ----------------------- */

static PyObject *g_sites;          /* dispatch.sites: id(code) -> record */
static PyObject *g_no_site;        /* dispatch.no_site: id(code) -> code the trap turned away */
static PyObject *g_by_code;        /* record_table.by_code */
static PyObject *g_c_calls;        /* dispatch.c_calls: address of a PyMethodDef -> record */
static PyObject *g_c_sym;          /* record_table.c_sym(callable): a C function's record */
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
                  off_G_trap, off_G_c_calls;
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
static pcache cache_sites, cache_by_code, cache_no_site, cache_c_calls;
static PyObject *g_sites_dict_for_cache, *g_by_code_dict_for_cache, *g_no_site_dict_for_cache,
                *g_c_calls_dict_for_cache;

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

/* lookup_id past its first probe: the neighbourhood, or the dict itself. */
static __attribute__((noinline)) PyObject *
lookup_id_probe(pcache *c, PyObject *dict, void *ptr, size_t h)
{
    if (c == NULL)
        return lookup_id_slow(dict, ptr);
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

/* dict keyed by id(obj): borrowed result, NULL if absent (no error set).  A hit on the
 * first probe is inlined at the call (every traced call looks up its site, the function
 * tracer its caller's record too): no call, no walk of the four dicts' names. */
static inline __attribute__((always_inline)) PyObject *
lookup_in(pcache *c, PyObject *dict, void *ptr)
{
    size_t h = phash(ptr);
    pcache_entry *e = &c->e[h];
    if (__builtin_expect(e->key == ptr, 1))
        return e->value;
    return lookup_id_probe(c, dict, ptr, h);
}

static PyObject *
lookup_id(PyObject *dict, void *ptr)
{
    pcache *c = dict == g_sites_dict_for_cache ? &cache_sites
              : dict == g_by_code_dict_for_cache ? &cache_by_code
              : dict == g_no_site_dict_for_cache ? &cache_no_site
              : dict == g_c_calls_dict_for_cache ? &cache_c_calls : NULL;
    return lookup_id_probe(c, dict, ptr, phash(ptr));
}

/* The site of a code object (sites), the record of a caller's code (by_code). */
#define lookup_site(ptr) lookup_in(&cache_sites, g_sites, (ptr))
#define lookup_code(ptr) lookup_in(&cache_by_code, g_by_code, (ptr))

static PyObject *
cache_forget(PyObject *self, PyObject *arg)
{
    /* Drop one address from every cache (every probe slot holding it). */
    void *ptr = PyLong_AsVoidPtr(arg);
    if (ptr == NULL && PyErr_Occurred())
        return NULL;
    pcache *caches[4] = {&cache_sites, &cache_by_code, &cache_no_site, &cache_c_calls};
    for (int c = 0; c < 4; c++) {
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
    memset(&cache_c_calls, 0, sizeof(cache_c_calls));
    Py_RETURN_NONE;
}

static inline long long
rec_flags(PyObject *rec)
{
    PyObject *f = SLOT(rec, off_rec_flags);
    return f ? fast_ll(f) : 0;
}

/* What dispatch.contain answered (r, a new reference or NULL) about exc (stolen): 0
 * contained; -1 with exc raised again when a signal handler of the program raised it.
 * contain() failing itself (at the recursion limit, say) counts as contained. */
static PyObject *g_callback_errors; /* dispatch.callback_errors: [count] */

/* contain() could not run (no stack left even with the credit, memory): the error is
 * counted where contain() would have, with no Python frame. */
static void
count_uncontained(void)
{
    if (g_callback_errors == NULL || !PyList_Check(g_callback_errors)
            || PyList_GET_SIZE(g_callback_errors) < 1)
        return;
    long long n = PyLong_AsLongLong(PyList_GET_ITEM(g_callback_errors, 0));
    PyObject *v = n < 0 ? NULL : PyLong_FromLongLong(n + 1);
    if (v == NULL) {
        PyErr_Clear();
        return;
    }
    PyList_SetItem(g_callback_errors, 0, v);     /* steals v */
}

static int
contained(PyObject *r, PyObject *exc)
{
    if (r == NULL) {
        PyErr_Clear();
        Py_XDECREF(exc);
        count_uncontained();
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

/* A callback raised: contain it by handing it to `by`(who, exc), or let it through. */
static int
contain_by(PyObject *by, PyObject *who)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_SystemExit))
        return -1;
    PyObject *exc = FETCH_EXC();
    PyObject *r;
    CREDITED_CALL(r, PyObject_CallFunctionObjArgs(by, who, exc ? exc : Py_None, NULL));
    return contained(r, exc);
}

/* An ops callback raised: contain it like dispatch._contain, or let it through. */
static int
contain(PyObject *who)
{
    return contain_by(g_contain, who ? who : Py_None);
}

/* The caller's record (a new reference): ROOT without a caller. */
static PyObject *
parent_of(PyFrameObject *frame)
{
    PyFrameObject *back = PyFrame_GetBack(frame);
    if (back == NULL)
        return Py_NewRef(g_root);
    PyCodeObject *bc = PyFrame_GetCode(back);
    PyObject *p = lookup_code(bc);
    Py_DECREF(bc);
    if (p != NULL) {
        Py_DECREF(back);
        return Py_NewRef(p);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(back);
        return NULL;
    }
    CREDITED_CALL(p, PyObject_CallOneArg(g_parent_slow, (PyObject *)back));
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


#endif /* FNTRACE_NATIVE_H */
