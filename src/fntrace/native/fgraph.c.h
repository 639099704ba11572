/* fntrace._native, part fgraph.c.h (included by _native.c after native.h; see there).
 * Python twin: fgraph.py: function_graph_enter, fgraph_return */

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
                  off_tr_tracing_thresh, off_tr_graph_args, off_tr_graph_retval,
                  off_tr_sleep_time, off_tr_lane_plain;
static PyObject *g_graph_entry_py;      /* the Python twin, for the lazy start */
static PyObject *g_graph_return_py;     /* and for sleep-time 0 (both twins take it) */
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
        {
            PyObject *st;
            CREDITED_CALL(st, PyObject_CallNoArgs(g_shadow_stack));
            return st;
        }
    }
    PyObject *e1 = SLOT(st, off_st_epoch), *e2 = SLOT(g_S, off_S_epoch);
    if (e1 != e2 && (e1 == NULL || e2 == NULL || PyObject_RichCompareBool(e1, e2, Py_NE) == 1)) {
        Py_DECREF(st);
        if (!create)
            return NULL;
        {
            PyObject *st;
            CREDITED_CALL(st, PyObject_CallNoArgs(g_shadow_stack));
            return st;
        }
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
    if (fl && (fast_ll(fl) & 0x4) && !regs_saved)
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
    return contain_by(g_fg_contain, gops);
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
    PyObject *r;
    CREDITED_CALL(r, PyObject_Vectorcall(fn, args, 3, NULL));
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

