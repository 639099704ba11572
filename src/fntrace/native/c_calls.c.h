/* fntrace._native, part c_calls.c.h (included by _native.c after dispatch.c.h; see
 * there).  Python twin: core/dispatch.py: on_call, on_c_return, on_c_raise,
 * _profile_c_call (--c-calls) */

/* -- C calls ------------------------------------------------------------------------ */

/* A C function is known by its PyMethodDef: one for a method whether it is reached
 * through its type's method descriptor (list.append, what CALL sees for `l.append(x)`)
 * or bound (`f = l.append; f(x)`, and what 3.11's c_call hands a profiler) — cProfile's
 * key too.  NULL: not a C function (a type, a slot wrapper, a Python function). */
static inline void *
c_key(PyObject *func)
{
    if (PyCFunction_Check(func))
        return (void *)((PyCFunctionObject *)func)->m_ml;
    if (Py_IS_TYPE(func, &PyMethodDescr_Type))
        return (void *)((PyMethodDescrObject *)func)->d_method;
    return NULL;
}

/* The record of the C function `func` (borrowed; the record table keeps it), made on
 * its first call by records.c_sym; NULL without an error when it has none. */
static PyObject *
c_rec(PyObject *func, void *key, int create)
{
    PyObject *rec = lookup_id(g_c_calls, key);
    if (rec != NULL || PyErr_Occurred() || !create)
        return rec;
    PyObject *r;
    CREDITED_CALL(r, PyObject_CallOneArg(g_c_sym, func));
    if (r == NULL)
        return NULL;
    if (r == Py_None) {
        Py_DECREF(r);
        return NULL;
    }
    PyObject *k = PyLong_FromVoidPtr(key);
    int rc = k ? PyDict_SetItem(g_c_calls, k, r) : -1;
    Py_XDECREF(k);
    Py_DECREF(r);
    return rc < 0 ? NULL : lookup_id(g_c_calls, key);
}

static inline int
c_calls_on(void)
{
    return SLOT(g_G, off_G_c_calls) == Py_True;
}

/* The fast lane's key of a C call: the caller's frame (its interpreter frame under
 * sys.monitoring, its frame object under setprofile), with the callable where a
 * Python call has its code object — the pair no Python call can have. */
static inline int
c_fkey(PyObject *func, PyFrameObject *frame, fkey *k)
{
    if (frame != NULL) {
        *k = fkey_of_frame((PyObject *)frame);
        k->code = func;
        return 1;
    }
    if (!fkey_of_current(func, k))
        return 0;
    if (k->ref != NULL)            /* (versions whose key is a frame object) */
        k->code = func;
    return 1;
}

/* A traced function (`caller`) calls the C function `func` (`frame`: the caller's
 * frame object under setprofile, NULL under sys.monitoring): its record's callback,
 * as site_entry calls a Python function's.  0, or -1: an error not contained. */
static int
c_call_entry(PyObject *caller, PyObject *func, PyFrameObject *frame)
{
    void *key = c_key(func);
    if (key == NULL)
        return 0;
    PyObject *rec = c_rec(func, key, 1);
    if (rec == NULL)
        return PyErr_Occurred() ? contain(g_c_sym) : 0;
    PyObject *fn = SLOT(rec, off_rec_func), *op = SLOT(rec, off_rec_ops);
    if (fn == NULL || fn == Py_None)
        return 0;
    if (g_fast_data != NULL && fn == g_fgraph_enter_fn) {
        fkey k;
        if (c_fkey(func, frame, &k)) {
            Py_INCREF(rec);
            int r = fg_fast_enter(rec, k);
            Py_DECREF(rec);
            if (r < 0)
                return contain(g_fgraph_enter_fn) < 0 ? -1 : 0;
            if (r)
                return 0;
        }
    }
    Py_INCREF(rec);
    Py_INCREF(fn);
    Py_XINCREF(op);
    int rc = 0;
    if (fn == g_function_trace_call && op != NULL) {
        if (!thread_ignored_by(SLOT(op, off_ops_private)) && function_trace(rec, caller, op) < 0)
            rc = contain(op);
    }
    else {
        /* no frame: the callable stands for one (the shadow stack's identity) */
        PyObject *fregs = new_regs((PyFrameObject *)func, rec, 0, NULL);
        if (fregs == NULL)
            rc = contain(op);
        else {
            PyObject *args[4] = {rec, caller, op ? op : Py_None, fregs};
            ENTER();
            PyObject *r;
            CREDITED_CALL(r, PyObject_Vectorcall(fn, args, 4, NULL));
            LEAVE();
            if (r == NULL)
                rc = contain(op);
            Py_XDECREF(r);
            Py_DECREF(fregs);
        }
    }
    Py_XDECREF(op);
    Py_DECREF(fn);
    Py_DECREF(rec);
    return rc;
}

/* The C call returned (unwind: raised): popped from the fast lane or the shadow stack. */
static int
c_call_return(PyObject *func, PyFrameObject *frame, int unwind)
{
    PyObject *h = SLOT(g_G, off_G_ret_handler);
    if (h == NULL || h == Py_None)
        return 0;
    void *key = c_key(func);
    if (key == NULL)
        return 0;
    PyObject *rec = c_rec(func, key, 0);
    if (rec == NULL) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return 0;
    }
    thread_rec *t = tl_rec;
    if (t != NULL && t->fs_n > 0) {
        fkey k;
        if (c_fkey(func, frame, &k)) {
            int r = fg_fast_return(k, NULL, unwind);
            if (r < 0)
                return contain(g_fgraph_return_fn) < 0 ? -1 : 0;
            if (r)
                return 0;
        }
    }
    Py_INCREF(rec);
    int rc = site_return(rec, (PyFrameObject *)func, NULL, unwind);
    Py_DECREF(rec);
    return rc;
}

/* sys.monitoring CALL in a patched site's code (dispatch.on_call). */
static PyObject *
on_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || !c_calls_on() || c_key(args[2]) == NULL)
        Py_RETURN_NONE;
    PyObject *caller = lookup_id(g_sites, args[0]);
    if (caller == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(caller);
    int rc = c_call_entry(caller, args[2], NULL);
    Py_DECREF(caller);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* sys.monitoring C_RETURN / C_RAISE (dispatch.on_c_return, on_c_raise). */
static PyObject *
on_c_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs >= 3 && c_call_return(args[2], NULL, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
on_c_raise(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs >= 3 && c_call_return(args[2], NULL, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* setprofile c_call / c_return / c_exception (dispatch._profile_c_call): `arg` is the
 * C function (a bound method for a method descriptor, as CPython hands profilers). */
static int
profile_c_event(PyFrameObject *frame, int what, PyObject *arg)
{
    if (arg == NULL || c_key(arg) == NULL)
        return 0;
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *caller = lookup_id(g_sites, code);
    Py_DECREF(code);
    if (caller == NULL) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return 0;
    }
    if (what == PyTrace_C_CALL) {
        Py_INCREF(caller);
        int rc = c_call_entry(caller, arg, frame);
        Py_DECREF(caller);
        return rc;
    }
    return c_call_return(arg, frame, what == PyTrace_C_EXCEPTION);
}
