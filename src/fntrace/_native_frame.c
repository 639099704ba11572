/*
 * A local variable of a running frame, read without the f_locals snapshot
 * (core/fetch.py frame_var; part of fntrace._native, kept apart because 3.11 needs
 * CPython's internal frame layout, which only Py_BUILD_CORE code may include).
 *
 * Reading frame.f_locals on 3.11 and 3.12 copies every local into a dict kept on the
 * frame until it returns: an object the function drops (del x) lives on, a weakref
 * callback fires late, contextlib's "no reference kept" guarantees break.  3.12 has
 * PyFrame_GetVar for this; 3.11 has nothing public, so the value is read from the
 * interpreter frame's localsplus array, by the name's index in co_localsplusnames.
 */
#if PY_VERSION_HEX < 0x030C0000
#define Py_BUILD_CORE 1
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#endif

/* A new reference to the value of `name` in `frame`; NULL with NameError if it is not
 * bound (or not a local), another exception on error. */
PyObject *
fntrace_frame_var(PyObject *frame, PyObject *name)
{
    if (!PyFrame_Check(frame) || !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "frame_var(frame, name)");
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030C0000
    return PyFrame_GetVar((PyFrameObject *)frame, name);
#elif PY_VERSION_HEX >= 0x030B0000
    _PyInterpreterFrame *f = ((PyFrameObject *)frame)->f_frame;
    PyCodeObject *co = f->f_code;
    PyObject *names = co->co_localsplusnames;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *n = PyTuple_GET_ITEM(names, i);
        if (n != name && PyUnicode_Compare(n, name) != 0)
            continue;
        PyObject *v = f->localsplus[i];
        _PyLocals_Kind kind = _PyLocals_GetKind(co->co_localspluskinds, i);
        if (v != NULL && (kind & (CO_FAST_CELL | CO_FAST_FREE)) && PyCell_Check(v)) {
            /* a cell made by MAKE_CELL (a local a closure uses), or a free variable */
            if (!(kind & CO_FAST_CELL) || f->prev_instr >= _PyCode_CODE(co))
                v = PyCell_GET(v);
        }
        if (v == NULL)
            break;
        return Py_NewRef(v);
    }
    PyErr_Format(PyExc_NameError, "%R is not bound", name);
    return NULL;
#else
    PyObject *locals = PyObject_GetAttrString(frame, "f_locals");
    if (locals == NULL)
        return NULL;
    PyObject *v = PyObject_GetItem(locals, name);
    Py_DECREF(locals);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_NameError, "%R is not bound", name);
    }
    return v;
#endif
}

#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#define HAVE_IFRAME_LOCAL 1
#endif

/* The i-th local (co_localsplusnames order) of the running interpreter frame `iframe`
 * of `code`: the key of fgraph's fast lane under sys.monitoring (3.12, 3.13), read
 * from its localsplus array, so that -A needs no frame object per call (PyEval_GetFrame
 * makes one, and it is freed at the return).  0 with *out a new reference, or NULL if
 * the local is not bound; -1 (no exception) where this cannot be read so: the caller
 * makes a frame object.  At PY_START the prologue has run: a parameter a closure
 * uses is in its cell. */
int
fntrace_iframe_local(void *iframe, PyObject *code, Py_ssize_t i, PyObject **out)
{
#ifdef HAVE_IFRAME_LOCAL
    _PyInterpreterFrame *f = (_PyInterpreterFrame *)iframe;
    PyCodeObject *co = (PyCodeObject *)code;
#if PY_VERSION_HEX >= 0x030D0000
    if (f == NULL || f->f_executable != code)
        return -1;
#else
    if (f == NULL || (PyObject *)f->f_code != code)
        return -1;
#endif
    if (i < 0 || i >= co->co_nlocalsplus) {
        *out = NULL;
        return 0;
    }
    PyObject *v = f->localsplus[i];
    _PyLocals_Kind kind = _PyLocals_GetKind(co->co_localspluskinds, i);
    if (v != NULL && (kind & CO_FAST_CELL) && PyCell_Check(v))
        v = PyCell_GET(v);
    *out = Py_XNewRef(v);
    return 0;
#else
    (void)iframe; (void)code; (void)i; (void)out;
    return -1;
#endif
}

/* The code object of the caller of the running interpreter frame `iframe` (a borrowed
 * reference in *out; NULL: it has no caller), found as PyEval_GetFrame() and
 * PyFrame_GetBack() would find it -- the first complete frame from `iframe`, then the
 * first complete one before that -- without making either frame object.  The function
 * tracer asks it on every traced call for its parent ip (dispatch.c.h): the two frame
 * objects, made and freed each call, cost about 550 instructions, more than the rest of
 * the call's record.  0 done; -1 (no exception) where the layout is not known here:
 * the caller makes the frame objects. */
int
fntrace_iframe_caller_code(void *iframe, PyObject **out)
{
#ifdef HAVE_IFRAME_LOCAL
    _PyInterpreterFrame *f = _PyFrame_GetFirstComplete((_PyInterpreterFrame *)iframe);
    if (f == NULL)
        return -1;
    _PyInterpreterFrame *prev = _PyFrame_GetFirstComplete(f->previous);
    if (prev == NULL) {
        *out = NULL;
        return 0;
    }
#if PY_VERSION_HEX >= 0x030D0000
    if (!PyCode_Check(prev->f_executable))
        return -1;
    *out = prev->f_executable;
#else
    *out = (PyObject *)prev->f_code;
#endif
    return 0;
#else
    (void)iframe; (void)out;
    return -1;
#endif
}

/* The stack tracer's measure (tracers/stack.py _walk, its Python twin): the bytes of
 * the data stack the frames from `frame` down take, co_framesize slots each, leaving
 * out the frames of fntrace's own modules (__name__ "fntrace" or "fntrace.*") and the
 * incomplete ones f_back skips.  -1 where the layout is not known (the twin is used). */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
static int
fntrace_own_globals(PyObject *globals, PyObject *key)
{
    static const char own[] = "fntrace";
    if (globals == NULL || !PyDict_Check(globals))
        return 0;
    PyObject *mod = PyDict_GetItemWithError(globals, key);     /* borrowed */
    if (mod == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (!PyUnicode_Check(mod))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(mod);
    if (n < 7)
        return 0;
    for (Py_ssize_t i = 0; i < 7; i++)
        if (PyUnicode_READ_CHAR(mod, i) != (Py_UCS4)own[i])
            return 0;
    return n == 7 || PyUnicode_READ_CHAR(mod, 7) == '.';
}
#endif

long long
fntrace_stack_bytes(PyObject *frame)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
    static PyObject *key = NULL;
    if (key == NULL && (key = PyUnicode_InternFromString("__name__")) == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (!PyFrame_Check(frame))
        return -1;
    long long total = 0;
    for (_PyInterpreterFrame *f = ((PyFrameObject *)frame)->f_frame; f != NULL; f = f->previous) {
        if (_PyFrame_IsIncomplete(f))
            continue;
#if PY_VERSION_HEX >= 0x030D0000
        if (!PyCode_Check(f->f_executable))
            continue;
        PyCodeObject *co = (PyCodeObject *)f->f_executable;
#else
        PyCodeObject *co = f->f_code;
#endif
        if (fntrace_own_globals(f->f_globals, key))
            continue;
        /* co_framesize (3.12+; 3.11 has no field for it) */
        total += (long long)(co->co_nlocalsplus + co->co_stacksize + FRAME_SPECIALS_SIZE)
                 * (long long)sizeof(PyObject *);
    }
    return total;
#else
    (void)frame;
    return -1;
#endif
}
