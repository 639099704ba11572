/* fntrace._native, part profile.c.h (included by _native.c after native.h; see there).
 * Python twin: arch/profile.py: the setprofile hook (3.11) */

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
    /* The whole of fntrace's handling is credited here, not only its calls into
     * Python (CREDITED_CALL): with those alone, a function first seen two frames
     * below the limit still lost every call on 3.11 (tests/test_robustness.py). */
    PyThreadState *credit = cb_credit_take();
    int rc = c_profile_fntrace(obj, frame, what, arg);
    cb_credit_give_back(credit);
    /* (the program's own profile function runs on the program's stack as it is) */
    if (rc == 0 && g_chain != NULL && PyDict_GET_SIZE(g_chain))
        rc = chain_call(frame, what, arg);
    return rc;
}

static int
c_profile_fntrace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    if (what != PyTrace_CALL && what != PyTrace_RETURN) {
        if ((what == PyTrace_C_CALL || what == PyTrace_C_RETURN || what == PyTrace_C_EXCEPTION)
                && c_calls_on())
            return profile_c_event(frame, what, arg);
        return 0;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *rec = lookup_site(code);
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
        long gen_start = gs ? (long)fast_ll(gs) : -1;
        if (gen_start >= 0 && PyFrame_GetLasti(frame) != gen_start) {
            /* a generator resuming, not a call: only a graph user sees it */
#if PY_VERSION_HEX >= 0x030C0000
            /* 3.12+ report an exception leaving the frame as a return of None (not
             * NULL): the Python twin tells them apart, and needs to see resumes */
            PyObject *r;
            CREDITED_CALL(r, PyObject_CallFunctionObjArgs(g_profile_resume, rec, frame, NULL));
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
                PyObject *r;
                CREDITED_CALL(r, PyObject_CallFunctionObjArgs(g_profile_return, rec, frame,
                                                           Py_None, NULL));
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

#if PY_VERSION_HEX >= 0x030D0000
/* 3.13 keeps it in the internal headers; libpython still exports it. */
PyAPI_FUNC(int) _PyEval_SetProfile(PyThreadState *tstate, Py_tracefunc func, PyObject *arg);
#endif

/* install_all and uninstall_all, one walk over the interpreter's threads: the hook on
 * (install) or off each thread the walk is for, but those whose id is in `ids` (None:
 * none).  How many threads it changed. */
static PyObject *
hook_all(PyObject *self, PyObject *ids, int install)
{
    long n = 0;
    PyThreadState *me = PyThreadState_Get();
    PyThreadState *t = PyInterpreterState_ThreadHead(me->interp);
    for (; t != NULL; t = PyThreadState_Next(t)) {
        if (install ? (t == me || t->c_profilefunc != NULL)
                    : (t->c_profilefunc != c_profile || t->c_profileobj != self))
            continue;
        if (ids != Py_None) {
            PyObject *id = PyLong_FromUnsignedLong(install ? t->native_thread_id : t->thread_id);
            if (id == NULL)
                return NULL;
            int in = PySequence_Contains(ids, id);
            Py_DECREF(id);
            if (in < 0)
                return NULL;
            if (in)
                continue;
        }
        if (_PyEval_SetProfile(t, install ? c_profile : NULL, install ? self : NULL) < 0)
            return NULL;
        n++;
    }
    return PyLong_FromLong(n);
}

/* Every other thread of the interpreter, as 3.12's PyEval_SetProfileAllThreads (which
 * 3.11 lacks): a tracer switched on from a control thread (tracefs/server.py) must
 * reach the threads already running.  A thread that has a profile function of its own,
 * or whose native id is in ``skip`` (fntrace's own threads), is left alone.  Returns
 * how many threads got the hook.  (On 3.12+ the setprofile back end is a choice,
 * FNTRACE_BACKEND=profile.) */
static PyObject *
ProfileHook_install_all(PyObject *self, PyObject *skip)
{
    return hook_all(self, skip, 1);
}

/* The hook off every thread that holds it (the back end stops: a detached program
 * keeps no profile function of fntrace's on any thread), but those whose thread ident
 * is in ``keep`` (the hook chains a profile function of the program's there). */
static PyObject *
ProfileHook_uninstall_all(PyObject *self, PyObject *keep)
{
    return hook_all(self, keep, 0);
}

static PyMethodDef ProfileHook_methods[] = {
    {"install", ProfileHook_install, METH_NOARGS, "install as this thread's profile function"},
    {"install_all", ProfileHook_install_all, METH_O,
     "install on every other thread without a profile function (skip: native ids)"},
    {"uninstall_all", ProfileHook_uninstall_all, METH_O,
     "remove from every thread that holds it (keep: thread idents left alone)"},
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

