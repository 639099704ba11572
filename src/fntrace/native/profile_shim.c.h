/* fntrace._native, part profile_shim.c.h (included by _native.c after native.h; see there).
 * Python twin: arch/profile.py: ProfileShim (the program's own hook) */

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

