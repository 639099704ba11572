/* fntrace._native, part function_graph.c.h (included by _native.c after native.h; see there).
 * Python twin: tracers/function_graph.py: graph_entry/return, lane pair */

/* -- function_graph tracer (tracers/function_graph.graph_entry / graph_return) ------- */

#define TRACE_GRAPH_FL 1
#define TRACE_GRAPH_NOTRACE 2
#define DEPTH_SHIFT 2
#define DEPTH_MASK ((1LL << 20) - 1)

/* Its pair for fgraph's fast lane (graph_lane): the user's data is the trace array.  A
 * call qualifies while nothing per call needs Python: no set_graph_function/notrace,
 * max depth or threshold.  sleep-time 0 (tracers/function_graph.py): the enter leaves
 * the thread's CPU clock in t->lane_cpu0, which the lane keeps in the frame it pushes
 * (its cpu0), and the return's calltime is its rettime less the CPU time since.
 * -A/-R stay on the lane: their text rides beside the records
 * (lane_write_args, lane_write_retval: out of line, so plain function_graph's path is
 * as short as without them). */
LANE_INLINE int
graph_lane_enter(PyObject *tr, thread_rec *t, const fkey *k, unsigned long ip, int depth,
                 long long *calltime)
{
    /* The thread's buffer first (its first call makes it): the thread filters
     * (set_ftrace_pid, ...) are its verdict, and an ignored thread's call is not pushed
     * (2: done).  The same buffer takes the entry record: one look-up a call. */
    PyObject *held;
    RingBufferObject *buf = buf_get_cb(t, tr, &held);
    if (buf == NULL) {
        buf_put(buf, held);
        return -1;
    }
    /* TraceArray.lane_plain: max_graph_depth, tracing_thresh, funcgraph-args and
     * -retval off and sleep-time on, said in one slot the array keeps up to date (its
     * __setattr__): the common case tests one pointer instead of five options */
    int plain = SLOT(tr, off_tr_lane_plain) == Py_True;
    int r = 1;
    if (BUF_IGNORED(buf))
        r = 2;
    else if (!plain && (!ll_zero(SLOT(tr, off_tr_max_graph_depth))
                        || !ll_zero(SLOT(tr, off_tr_tracing_thresh))))
        r = 0;
    else {
        PyObject *gf = SLOT(tr, off_tr_graph_fops), *gn = SLOT(tr, off_tr_graph_notrace_fops);
        if (gf == NULL || !hash_empty(SLOT(gf, off_ops_filter_hash))
                || !ll_zero(SLOT(gf, off_ops_filter_cached))
                || gn == NULL || !hash_empty(SLOT(gn, off_ops_filter_hash)))
            r = 0;
    }
    if (r != 1) {
        buf_put(buf, held);
        return r;
    }
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on != Py_True && on != NULL && on != Py_False)
        buf_hold(tr, buf, &held);            /* its truth may run Python code */
    if (on == Py_True || (on != NULL && on != Py_False && PyObject_IsTrue(on) == 1)) {
        long long w;
        if (__builtin_expect(!plain && !ll_zero(SLOT(tr, off_tr_graph_args)), 0)) {
            buf_hold(tr, buf, &held);        /* the arguments' text may */
            w = lane_write_args(t, tr, *k, ip, (unsigned long)depth, calltime);
        }
        else {
            /* one clock reading for the entry record and the call's start */
            *calltime = now_ns();
            w = rb_write_cb(t, buf, *calltime, FNT_TRACE_GRAPH_ENT, 0, ip, (unsigned long)depth,
                            0, 0);
        }
        if (w == -2)
            r = -1;
    }
    else
        *calltime = now_ns();
    if (__builtin_expect(!plain && ll_zero(SLOT(tr, off_tr_sleep_time)), 0))
        t->lane_cpu0 = thread_cpu_ns();
    buf_put(buf, held);
    return r;
}

LANE_INLINE int
graph_lane_return(PyObject *tr, thread_rec *t, const fg_frame *f, PyObject *retval, int unwind)
{
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on == Py_True || (on != NULL && on != Py_False && PyObject_IsTrue(on) == 1)) {
        long long rettime = now_ns();
        long long calltime = f->calltime;
        if (__builtin_expect(f->cpu0 != 0, 0)) {
            /* sleep-time 0: the return less the CPU time of the call (never before
             * its entry), as graph_return's twin */
            long long ran = thread_cpu_ns() - f->cpu0;
            long long c = rettime - (ran < 0 ? 0 : ran);
            if (c > calltime)
                calltime = c;
        }
        /* (lane_plain: no threshold, no funcgraph-retval: see the entry) */
        int plain = SLOT(tr, off_tr_lane_plain) == Py_True;
        long long thresh = plain ? 0 : slot_ll(tr, off_tr_tracing_thresh);
        if (!thresh || rettime - f->calltime >= thresh) {
            /* funcgraph-retval: graph_return's payload */
            long long w = __builtin_expect(!plain && !ll_zero(SLOT(tr, off_tr_graph_retval)), 0)
                ? lane_write_retval(t, tr, rettime, f->ip, f->depth, (unsigned long)t->overrun,
                                    (unsigned long long)calltime, retval, unwind)
                : lane_write(t, tr, rettime, FNT_TRACE_GRAPH_RET, f->ip, f->depth,
                             (unsigned long)t->overrun, (unsigned long long)calltime);
            if (w == -2)
                return -1;
        }
    }
    return 0;
}

static const fg_lane_ops graph_lane = {graph_lane_enter, graph_lane_return};


