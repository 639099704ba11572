/* fntrace._native, part dispatch.c.h (included by _native.c after native.h; see there).
 * Python twin: core/dispatch.py: on_py_start*, on_py_resume/throw/return */

/* -- The entry path --------------------------------------------------------------- */

static PyObject *g_function_trace_call;   /* this module's function_trace_call */
static int function_trace(PyObject *ip, PyObject *parent_ip, PyObject *op);

/* Call func(rec, parent, op, fregs) for a patched site entered in `frame`. */
static int
site_entry(PyObject *rec, PyFrameObject *frame, PyObject *func, PyObject *op)
{
    /* the function tracer of an instance that ignores this thread (set_ftrace_pid,
     * ...): done before the caller's record is looked for */
    if (func == g_function_trace_call && op != NULL && thread_ignored_by(SLOT(op, off_ops_private)))
        return 0;
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
    PyObject *r;
    CREDITED_CALL(r, func ? PyObject_Vectorcall(func, args, 4, NULL) : NULL);
    LEAVE();
    Py_DECREF(parent);
    Py_DECREF(fregs);
    if (r == NULL)
        return func ? contain(op) : 0;
    Py_DECREF(r);
    return 0;
}

int fntrace_iframe_caller_code(void *iframe, PyObject **out);    /* _native_frame.c */

/* site_entry's direct function-tracer call, its parent found without a frame object
 * (see fntrace_iframe_caller_code): 0 done, -1 an error not contained, 1 not done
 * here -- the caller's code has no record yet (parent_of's slow path makes it from
 * the frame object) or the frame layout is not known -- so site_entry does it. */
static inline int
function_entry_frameless(PyObject *rec, PyObject *code, PyObject *op)
{
    if (thread_ignored_by(SLOT(op, off_ops_private)))
        return 0;
    fkey k;
    PyObject *bc;
    if (!fkey_of_current(code, &k) || k.ref != NULL
            || fntrace_iframe_caller_code(k.key, &bc) < 0)
        return 1;
    PyObject *parent = bc == NULL ? g_root : lookup_code(bc);
    if (parent == NULL)
        return PyErr_Occurred() ? contain(op) : 1;
    Py_INCREF(parent);
    int rc = function_trace(rec, parent, op);
    Py_DECREF(parent);
    return rc < 0 ? contain(op) : 0;
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
    PyObject *r;
    CREDITED_CALL(r, PyObject_Vectorcall(trap, args, 2, NULL));
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
static inline __attribute__((always_inline)) int
fast_entry(PyObject *rec, PyObject *code)
{
    fkey k;
    if (!fkey_of_current(code, &k))
        return 0;
    /* rec is borrowed: fg_fast_enter reads its ip before anything can run Python code */
    int r = fg_fast_enter(rec, k);
    if (r < 0)
        r = contain(g_fgraph_enter_fn) < 0 ? -1 : 1;
    return r;
}

/* A sys.monitoring return (PY_RETURN, PY_YIELD, PY_UNWIND) of `code`: popped from
 * fgraph's fast lane if it is there.  1 done, 0 not there, -1 error not contained. */
static inline int
fast_return(PyObject *code, PyObject *retval, int unwind)
{
    thread_rec *t = tl_rec;
    if (t == NULL)
        return 0;
    if (t->fs_n == 0)
        return fg_lane_ignored(t);    /* an ignored thread's return: nothing to pop */
    fkey k;
    int r = fkey_of_current(code, &k) ? fg_fast_return_in(t, k, retval, unwind) : 0;
    if (r < 0)
        return contain(g_fgraph_return_fn) < 0 ? -1 : 1;
    return r;
}

/* The entry preamble both PY_START callbacks share (dispatch._make_on_py_start makes
 * the Python pair from one body too): a patched site's record, fgraph's fast lane when
 * the callback to run is fgraph's, else the callback through site_entry.  `global`
 * picks where the callback comes from: the site's own slot (CALL_OPS) or the one global
 * target; it is a constant at each call, so each callback compiles to its own path. */
static inline __attribute__((always_inline)) PyObject *
py_start(PyObject *const *args, Py_ssize_t nargs, int global)
{
    if (nargs < 1)
        Py_RETURN_NONE;
    PyObject *rec = lookup_site(args[0]);
    MISS_OR_TRAP(rec, args[0])
    PyObject *target = global ? SLOT(g_G, off_G_trace_function) : SLOT(rec, off_rec_func);
    if (g_fast_data != NULL && target == g_fgraph_enter_fn) {
        int r = fast_entry(rec, args[0]);
        if (r < 0)
            return NULL;
        if (r)
            Py_RETURN_NONE;
    }
    PyObject *func = global ? SLOT(g_G, off_G_trace_function) : SLOT(rec, off_rec_func);
    PyObject *op = global ? SLOT(g_G, off_G_trace_op) : SLOT(rec, off_rec_ops);
    Py_INCREF(rec);
    Py_XINCREF(func);
    Py_XINCREF(op);
    int rc = 1;
    if (func == g_function_trace_call && op != NULL)
        rc = function_entry_frameless(rec, args[0], op);
    if (rc > 0) {
        PyFrameObject *frame = PyEval_GetFrame();
        rc = frame == NULL ? 0 : site_entry(rec, frame, func, op);
    }
    Py_XDECREF(func);
    Py_XDECREF(op);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* PY_START on a patched site, CALL_OPS dispatch (dispatch.on_py_start). */
static PyObject *
on_py_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return py_start(args, nargs, 0);
}

/* PY_START without CALL_OPS: the one global target (dispatch.on_py_start_global). */
static PyObject *
on_py_start_global(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return py_start(args, nargs, 1);
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
    PyObject *r;
    CREDITED_CALL(r, PyObject_Vectorcall(h, args, 4, NULL));
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
    PyObject *r;
    CREDITED_CALL(r, PyObject_Vectorcall(g_fgraph_enter_fn, args, 4, NULL));
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
    PyObject *r;
    CREDITED_CALL(r, (h == g_py_fgraph_resume && g_graph_ops != NULL && g_fgraph_enter_fn != NULL)
        ? fgraph_resume_c(rec, frame) : PyObject_Vectorcall(h, args, 3, NULL));
    LEAVE();
    int rc = 0;
    if (r == NULL)
        rc = contain(h);
    Py_XDECREF(r);
    Py_DECREF(h);
    return rc;
}

/* The events after a start, one body for the four (dispatch.on_py_return, on_py_unwind,
 * on_py_resume, on_py_throw): `ev` is a constant at each call, so each callback compiles
 * to its own path, as py_start's pair does. */
enum { EV_RETURN, EV_UNWIND, EV_RESUME, EV_THROW };

static inline __attribute__((always_inline)) PyObject *
py_event(PyObject *const *args, Py_ssize_t nargs, int ev)
{
    int ret = ev == EV_RETURN || ev == EV_UNWIND;
    if (nargs < (ret ? 3 : 1))
        Py_RETURN_NONE;
    if (ev == EV_RETURN) {
        /* a call on fgraph's fast lane: matched by frame, no record lookup */
        int fast = fast_return(args[0], args[2], 0);
        if (fast)
            return fast < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *rec = lookup_site(args[0]);
    if (rec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    /* PY_UNWIND and PY_THROW are set only globally, for every code: a site takes them
     * only when it reports returns */
    if ((ev == EV_UNWIND || ev == EV_THROW) && !(rec_flags(rec) & g_RET_EN))
        Py_RETURN_NONE;
    if (ev == EV_UNWIND) {
        int fast = fast_return(args[0], args[2], 1);
        if (fast)
            return fast < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (!ret && g_fast_data != NULL && SLOT(g_G, off_G_resume_handler) == g_py_fgraph_resume) {
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
    int rc = ret ? site_return(rec, frame, args[2], ev == EV_UNWIND) : site_resume(rec, frame);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* PY_RETURN / PY_YIELD */
static PyObject *
on_py_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return py_event(args, nargs, EV_RETURN);
}

/* PY_UNWIND, global only */
static PyObject *
on_py_unwind(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return py_event(args, nargs, EV_UNWIND);
}

/* PY_RESUME */
static PyObject *
on_py_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return py_event(args, nargs, EV_RESUME);
}

/* PY_THROW, global only */
static PyObject *
on_py_throw(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return py_event(args, nargs, EV_THROW);
}
