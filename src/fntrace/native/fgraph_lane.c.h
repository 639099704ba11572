/* fntrace._native, part fgraph_lane.c.h (included by _native.c after native.h; see there).
 * none: FNTRACE_PURE=1 takes fgraph.py's general path. */

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
    /* an option that is off: 0, False or None (unset); the common values first (a
     * traced call asks of about ten) */
    if (v == g_zero || v == Py_False)
        return 1;
    if (v == Py_True)
        return 0;
    if (v == NULL || v == Py_None)
        return 1;
    if (PyLong_CheckExact(v)) {
        long long x = fast_ll(v);
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
static inline __attribute__((always_inline)) long long
lane_write(thread_rec *t, PyObject *tr, long long ts, unsigned type, unsigned long a,
           unsigned long b, unsigned long c, unsigned long long d)
{
    PyObject *held;
    RingBufferObject *buf = buf_get_cb(t, tr, &held);
    long long w = buf == NULL ? -2 : BUF_IGNORED(buf) ? -1
                : rb_write_cb(t, buf, ts, type, 0, a, b, c, d);
    buf_put(buf, held);
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
    if (buf != NULL && BUF_IGNORED(buf)) {
        /* ignored (a thread filter changed since the lane's test): nothing written */
        *calltime = now_ns();
        t->busy--;
        Py_DECREF(buf);
        Py_DECREF(tr);
        return -1;
    }
    if (buf != NULL && k.code != NULL && !PyCode_Check(k.code))
        /* a C call (--c-calls): no arguments are handed to a profiler */
        payload = PyUnicode_FromStringAndSize(NULL, 0);
    else if (buf != NULL) {
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
    if (buf != NULL && BUF_IGNORED(buf)) {
        t->busy--;
        Py_DECREF(buf);
        Py_DECREF(tr);
        return -1;
    }
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
    unsigned long ip = ipo ? (unsigned long)fast_ll(ipo) : 0;
    long long calltime;
    int r = INDIRECT_CALL_1(g_lane.enter, graph_lane_enter, data, t, &k, ip, depth, &calltime);
    if (r <= 0)
        return r;
    if (r == 2)
        return 1;                  /* an ignored thread: done, nothing pushed */
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
    f->cpu0 = t->lane_cpu0;
    t->lane_cpu0 = 0;
    return 1;
}

/* The lane's user (the function_graph tracer) ignores the calling thread — the verdict
 * cpu_buffer() cached for its trace array (set_ftrace_pid, ...) — and nothing of the
 * thread is on either stack: a return of it has nothing to pop, and is done here
 * instead of looking for its frame on a Python stack the thread does not have. */
static inline int
fg_lane_ignored(thread_rec *t)
{
    PyObject *tr = g_fast_data;
    return tr != NULL && t->fs_n == 0 && t->npy == 0 && g_lane.enter == graph_lane_enter
        && thread_ignored_by(tr);
}

/* 1: the call was on the fast lane (popped, its return written); 0: not there; -1.
 * retval: the value returned (yielded, raised with unwind), NULL if unknown. */
static int
fg_fast_return(fkey k, PyObject *retval, int unwind)
{
    thread_rec *t = tl_rec;
    if (t == NULL)
        return 0;
    if (t->fs_n == 0)
        return fg_lane_ignored(t);
    return fg_fast_return_in(t, k, retval, unwind);
}

/* fg_fast_return past its thread's tests (t: the calling thread's, fs_n > 0), inlined
 * into the sys.monitoring return callback. */
static inline __attribute__((always_inline)) int
fg_fast_return_in(thread_rec *t, fkey k, PyObject *retval, int unwind)
{
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
    if (nd > 0) {
        for (int j = 0; j < nd; j++)
            Py_XDECREF(dropped[j]);
        PyMem_RawFree(dropped);
    }
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
        PyObject *r;
        CREDITED_CALL(r, PyObject_CallFunctionObjArgs(g_fg_missed, ip, fregs, NULL));
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

