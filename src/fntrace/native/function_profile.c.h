/* fntrace._native, part function_profile.c.h (included by _native.c after native.h; see there).
 * Python twin: tracers/function_profile.py: ProfileStat, profile_graph_entry/return; the
 * lane pair (profile_lane) has none: FNTRACE_PURE=1 takes fgraph.py's general path. */

/* -- The function profiler (ftrace.c ftrace_profile_*, profile_graph_entry/return) ----
 *
 * One ProfileStat per thread (the kernel's per-CPU ftrace_profile_stat): a record per
 * function hit, in the order they were first hit (the kernel's profile pages), found by
 * ip through an open-addressing index; and one slot per shadow-stack depth for the call
 * running there:
 *
 *     recs[n]   ip, counter (hits), time (ns), time_squared (ns^2)
 *     slots[d]  sub   children's time, subtracted at return when graph-time is 0
 *               cpu0  the thread's CPU clock at entry, when sleep-time is 0 (else -1)
 *               live  the profiler entered the call at depth d and it has not returned
 *
 * The kernel keeps sub and the sleep time in data reserved on the shadow stack
 * (fgraph_reserve_data); the Python twin does too.  fgraph's fast lane reserves none, so
 * here they are kept by depth: the call at depth d is the one the shadow stack holds
 * there, and its parent the one at d - 1, which is what fgraph_retrieve_parent_data(idx,
 * 1) finds.  A slot left live by a call whose return was never seen (tracing began
 * mid-call) is overwritten by the next entry at its depth before anything reads it.
 *
 * time_squared is 128 bits: the kernel's 64-bit sum wraps for calls over ~4.3 s, which
 * a Python program's main() easily is; the s^2 shown is the kernel's formula on the
 * exact sums (tracers/function_profile.py).
 *
 * With options/profile-dist a record also keeps its calls' times as a distribution
 * (log_hist.h's histogram, and the shortest and longest: ``timed`` calls of them).
 *
 * The profiler object (gops.private, the lane's data) is read through its slots:
 * graph_time, sleep_time, dist (bools) and serial (unique for each profiler: the
 * per-thread cache below is valid while it matches). */

#include "log_hist.h"

typedef struct {
    unsigned long ip;
    unsigned long counter;
    unsigned long long time;
    unsigned __int128 time_squared;
    /* options/profile-dist */
    unsigned long long timed, min, max;
    log_hist hist;
    unsigned long long self_time;   /* the calls' time less their callees' (with dist) */
} prof_rec;

typedef struct {
    long long sub;
    long long cpu0;
    int live;
} prof_slot;

typedef struct {
    PyObject_HEAD
    long cpu;
    prof_rec *recs;
    Py_ssize_t n, cap;
    Py_ssize_t *index;          /* recs index + 1 per bucket; 0: empty */
    size_t mask;                /* buckets - 1; the index is kept at most half full */
    prof_slot *slots;
    long nslots;
} ProfileStatObject;

static PyTypeObject *ProfileStat_Type;
static PyTypeObject *g_prof_type;       /* FunctionProfiler: its slots are read below */
static Py_ssize_t off_prof_graph_time = -1, off_prof_sleep_time = -1, off_prof_serial = -1,
    off_prof_dist = -1;
static PyObject *str_thread_stat;

/* The calling thread's table, cached: borrowed (the profiler keeps every thread's table
 * for as long as it lives, and a new profiler has a new serial). */
static _Thread_local ProfileStatObject *tl_prof_stat TLS_FAST;
static _Thread_local long long tl_prof_serial TLS_FAST;

static inline size_t
prof_bucket(unsigned long ip, size_t mask)
{
    return (size_t)(((unsigned long long)ip * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

static inline prof_rec *
prof_find(ProfileStatObject *st, unsigned long ip)
{
    if (st->index == NULL)
        return NULL;
    for (size_t b = prof_bucket(ip, st->mask);; b = (b + 1) & st->mask) {
        Py_ssize_t i = st->index[b];
        if (i == 0)
            return NULL;
        if (st->recs[i - 1].ip == ip)
            return &st->recs[i - 1];
    }
}

static int
prof_rehash(ProfileStatObject *st, size_t buckets)
{
    Py_ssize_t *index = (Py_ssize_t *)PyMem_RawCalloc(buckets, sizeof(Py_ssize_t));
    if (index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t mask = buckets - 1;
    for (Py_ssize_t i = 0; i < st->n; i++) {
        size_t b = prof_bucket(st->recs[i].ip, mask);
        while (index[b])
            b = (b + 1) & mask;
        index[b] = i + 1;
    }
    PyMem_RawFree(st->index);
    st->index = index;
    st->mask = mask;
    return 0;
}

/* ftrace_profile_alloc(): the function's record, made on its first hit. */
static prof_rec *
prof_alloc(ProfileStatObject *st, unsigned long ip)
{
    if (st->n == st->cap) {
        Py_ssize_t cap = st->cap ? st->cap * 2 : 64;
        prof_rec *recs = (prof_rec *)PyMem_RawRealloc(st->recs, cap * sizeof(prof_rec));
        if (recs == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        st->recs = recs;
        st->cap = cap;
    }
    if (st->index == NULL || (size_t)(st->n + 1) * 2 > st->mask + 1) {
        if (prof_rehash(st, st->index ? (st->mask + 1) * 2 : 128) < 0)
            return NULL;
    }
    prof_rec *r = &st->recs[st->n];
    memset(r, 0, sizeof(*r));
    r->ip = ip;
    size_t b = prof_bucket(ip, st->mask);
    while (st->index[b])
        b = (b + 1) & st->mask;
    st->index[b] = ++st->n;
    return r;
}

/* function_profile_call(): one more hit. */
static inline int
prof_hit(ProfileStatObject *st, unsigned long ip)
{
    prof_rec *r = prof_find(st, ip);
    if (r == NULL && (r = prof_alloc(st, ip)) == NULL)
        return -1;
    r->counter++;
    return 0;
}

static inline void
prof_add_time(ProfileStatObject *st, unsigned long ip, unsigned long long t, int dist,
              unsigned long long self_t)
{
    prof_rec *r = prof_find(st, ip);
    if (r != NULL) {           /* none: reset while the call ran (the kernel's "if (rec)") */
        r->time += t;
        r->time_squared += (unsigned __int128)t * t;
        if (__builtin_expect(dist, 0)) {
            r->self_time += self_t;
            if (r->timed == 0 || t < r->min)
                r->min = t;
            if (r->timed == 0 || t > r->max)
                r->max = t;
            r->timed++;
            /* no memory for a bucket: the call is in the sums, not the histogram */
            if (hist_add(&r->hist, t > (unsigned long long)INT64_MAX ? INT64_MAX
                                                                     : (long long)t) < 0)
                PyErr_Clear();
        }
    }
}

static inline prof_slot *
prof_slot_at(ProfileStatObject *st, long depth)
{
    if (depth < 0)
        return NULL;
    if (depth >= st->nslots) {
        long n = st->nslots ? st->nslots : 64;
        while (n <= depth)
            n *= 2;
        prof_slot *s = (prof_slot *)PyMem_RawRealloc(st->slots, n * sizeof(prof_slot));
        if (s == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        memset(s + st->nslots, 0, (n - st->nslots) * sizeof(prof_slot));
        st->slots = s;
        st->nslots = n;
    }
    return &st->slots[depth];
}

/* The calling thread's table for profiler `prof` (borrowed), NULL on error. */
static inline ProfileStatObject *
prof_stat_of(PyObject *prof, thread_rec *t)
{
    long long serial = slot_ll(prof, off_prof_serial);
    if (__builtin_expect(tl_prof_serial == serial && tl_prof_stat != NULL, 1))
        return tl_prof_stat;
    /* the thread's first call: the Python side makes its table (and its index) */
    Py_INCREF(prof);
    if (t != NULL) {
        t->busy++;
        t->count++;
    }
    PyObject *st = PyObject_CallMethodNoArgs(prof, str_thread_stat);
    if (t != NULL)
        t->busy--;
    Py_DECREF(prof);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(st, ProfileStat_Type)) {
        PyErr_SetString(PyExc_TypeError, "thread_stat() did not give a ProfileStat");
        Py_DECREF(st);
        return NULL;
    }
    tl_prof_stat = (ProfileStatObject *)st;
    tl_prof_serial = serial;
    Py_DECREF(st);
    return tl_prof_stat;
}

/* profile_graph_entry(): the hit, and the call's slot. */
static inline int
prof_enter(PyObject *prof, ProfileStatObject *st, unsigned long ip, long depth)
{
    if (prof_hit(st, ip) < 0)
        return -1;
    prof_slot *s = prof_slot_at(st, depth);
    if (s == NULL)
        return -1;
    s->sub = 0;
    s->cpu0 = ll_zero(SLOT(prof, off_prof_sleep_time)) ? thread_cpu_ns() : -1;
    s->live = 1;
    return 0;
}

/* profile_graph_return(): `calltime` is the call's duration (rettime - calltime). */
static inline void
prof_return(PyObject *prof, ProfileStatObject *st, unsigned long ip, long depth,
            long long calltime)
{
    prof_slot *s = depth >= 0 && depth < st->nslots && st->slots[depth].live
        ? &st->slots[depth] : NULL;
    /* sleep-time 0: the time the thread ran (the kernel subtracts the time it was
     * scheduled out) */
    if (s != NULL && s->cpu0 >= 0 && ll_zero(SLOT(prof, off_prof_sleep_time)))
        calltime = thread_cpu_ns() - s->cpu0;
    if (calltime < 0)
        calltime = 0;
    int graph_time = !ll_zero(SLOT(prof, off_prof_graph_time));
    int dist = !ll_zero(SLOT(prof, off_prof_dist));
    long long self_t = calltime;
    if (!graph_time || dist) {
        /* the whole call counts in its parent's children; its own, less its children
         * (graph-time 0: the call's time; profile-dist: its Self column) */
        if (depth > 0 && depth - 1 < st->nslots && st->slots[depth - 1].live)
            st->slots[depth - 1].sub += calltime;
        long long sub = s != NULL ? s->sub : 0;
        self_t = sub < calltime ? calltime - sub : 0;
        if (!graph_time)
            calltime = self_t;
    }
    if (s != NULL)
        s->live = 0;
    prof_add_time(st, ip, (unsigned long long)calltime, dist, (unsigned long long)self_t);
}

/* The lane pair (fg_lane_ops): the profiler is fgraph's only user. */
static int
profile_lane_enter(PyObject *prof, thread_rec *t, const fkey *k, unsigned long ip, int depth,
                   long long *calltime)
{
    ProfileStatObject *st = prof_stat_of(prof, t);
    if (st == NULL || prof_enter(prof, st, ip, depth) < 0)
        return -1;
    *calltime = now_ns();
    return 1;
}

static int
profile_lane_return(PyObject *prof, thread_rec *t, const fg_frame *f, PyObject *retval,
                    int unwind)
{
    long long rettime = now_ns();
    ProfileStatObject *st = prof_stat_of(prof, t);
    if (st == NULL)
        return -1;
    prof_return(prof, st, f->ip, (long)f->depth, rettime - f->calltime);
    return 0;
}

static const fg_lane_ops profile_lane = {profile_lane_enter, profile_lane_return};

/* gops.private, a FunctionProfiler (new reference), or NULL with TypeError: its slots
 * are read by offset. */
static PyObject *
profiler_of(PyObject *gops)
{
    PyObject *prof = PyObject_GetAttr(gops, str_private);
    if (prof != NULL && (g_prof_type == NULL || !PyObject_TypeCheck(prof, g_prof_type))) {
        PyErr_SetString(PyExc_TypeError, "the profiler's callbacks need a FunctionProfiler "
                        "as gops.private");
        Py_CLEAR(prof);
    }
    return prof;
}

/* profile_graph_entry and profile_graph_return, one body: `ret` is a constant at each
 * call, so each compiles to its own path. */
static inline __attribute__((always_inline)) PyObject *
profile_graph(PyObject *const *args, Py_ssize_t nargs, int ret)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, ret ? "profile_graph_return(trace, gops, fregs)"
                                             : "profile_graph_entry(trace, gops, fregs)");
        return NULL;
    }
    PyObject *trace = args[0];
    PyObject *prof = profiler_of(args[1]);
    if (prof == NULL)
        return NULL;
    PyObject *rec = SLOT(trace, ret ? off_ret_func : off_ent_func);
    PyObject *ipo = rec ? SLOT(rec, off_rec_ip) : NULL;
    unsigned long ip = ipo ? PyLong_AsUnsignedLong(ipo) : 0;
    long depth = (long)slot_ll(trace, ret ? off_ret_depth : off_ent_depth);
    long long calltime = ret ? slot_ll(trace, off_ret_rettime) - slot_ll(trace, off_ret_calltime)
                             : 0;
    ProfileStatObject *st = PyErr_Occurred() ? NULL : prof_stat_of(prof, my_rec());
    int rc = st == NULL ? -1 : 0;
    if (st != NULL && ret)
        prof_return(prof, st, ip, depth, calltime);
    else if (st != NULL)
        rc = prof_enter(prof, st, ip, depth);
    Py_DECREF(prof);
    if (rc < 0)
        return NULL;
    return Py_NewRef(ret ? Py_None : Py_True);
}

/* profile_graph_entry(trace, gops, fregs) -> True: fgraph's general path. */
static PyObject *
profile_graph_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return profile_graph(args, nargs, 0);
}

/* profile_graph_return(trace, gops, fregs) */
static PyObject *
profile_graph_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return profile_graph(args, nargs, 1);
}

/* bind_function_profiler(type): the profiler's slots read per call. */
static PyObject *
bind_function_profiler(PyObject *self, PyObject *type)
{
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "bind_function_profiler(type)");
        return NULL;
    }
    OFF(type, "graph_time", off_prof_graph_time);
    OFF(type, "sleep_time", off_prof_sleep_time);
    OFF(type, "serial", off_prof_serial);
    OFF(type, "dist", off_prof_dist);
    Py_XSETREF(g_prof_type, (PyTypeObject *)Py_NewRef(type));
    Py_RETURN_NONE;
}

/* -- ProfileStat, the type ------------------------------------------------------------ */

static PyObject *
ProfileStat_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    long cpu = 0;
    static char *kwlist[] = {"cpu", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|l:ProfileStat", kwlist, &cpu))
        return NULL;
    ProfileStatObject *st = (ProfileStatObject *)type->tp_alloc(type, 0);
    if (st != NULL)
        st->cpu = cpu;
    return (PyObject *)st;
}

static void
ProfileStat_dealloc(ProfileStatObject *st)
{
    for (Py_ssize_t i = 0; i < st->n; i++)
        hist_free(&st->recs[i].hist);
    PyMem_RawFree(st->recs);
    PyMem_RawFree(st->index);
    PyMem_RawFree(st->slots);
    PyTypeObject *tp = Py_TYPE(st);
    tp->tp_free((PyObject *)st);
    Py_DECREF(tp);
}

static PyObject *
ProfileStat_hit(ProfileStatObject *st, PyObject *ip)
{
    unsigned long v = PyLong_AsUnsignedLong(ip);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (prof_hit(st, v) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
ProfileStat_add_time(ProfileStatObject *st, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "add_time(ip, ns, dist=False, self_ns=0)");
        return NULL;
    }
    unsigned long ip = PyLong_AsUnsignedLong(args[0]);
    unsigned long long t = PyLong_AsUnsignedLongLong(args[1]);
    unsigned long long self_t = nargs == 4 ? PyLong_AsUnsignedLongLong(args[3]) : 0;
    if (PyErr_Occurred())
        return NULL;
    int dist = nargs >= 3 ? PyObject_IsTrue(args[2]) : 0;
    if (dist < 0)
        return NULL;
    prof_add_time(st, ip, t, dist, self_t);
    Py_RETURN_NONE;
}

static PyObject *
u128_to_py(unsigned __int128 v)
{
    unsigned long long hi = (unsigned long long)(v >> 64), lo = (unsigned long long)v;
    if (hi == 0)
        return PyLong_FromUnsignedLongLong(lo);
    PyObject *h = PyLong_FromUnsignedLongLong(hi), *l = PyLong_FromUnsignedLongLong(lo);
    PyObject *s = PyLong_FromLong(64);
    PyObject *hs = (h && s) ? PyNumber_Lshift(h, s) : NULL;
    PyObject *r = (hs && l) ? PyNumber_Or(hs, l) : NULL;
    Py_XDECREF(h);
    Py_XDECREF(l);
    Py_XDECREF(s);
    Py_XDECREF(hs);
    return r;
}

static PyObject *
ProfileStat_items(ProfileStatObject *st, PyObject *const *args, Py_ssize_t nargs)
{
    /* [(ip, counter, time, time_squared)] in the order the functions were first hit;
     * with dist, each ends in (min, max, {bucket: calls}, self time) */
    int dist = nargs >= 1 ? PyObject_IsTrue(args[0]) : 0;
    if (dist < 0)
        return NULL;
    PyObject *out = PyList_New(st->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < st->n; i++) {
        prof_rec *r = &st->recs[i];
        PyObject *sq = u128_to_py(r->time_squared);
        PyObject *item = NULL;
        if (sq != NULL && dist) {
            PyObject *h = hist_dict(&r->hist);
            item = h ? Py_BuildValue("(kkKNKKNK)", r->ip, r->counter, r->time, sq,
                                     r->timed ? r->min : 0ULL, r->timed ? r->max : 0ULL, h,
                                     r->self_time)
                     : (Py_DECREF(sq), NULL);
        }
        else if (sq != NULL)
            item = Py_BuildValue("(kkKN)", r->ip, r->counter, r->time, sq);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyObject *
ProfileStat_reset(ProfileStatObject *st, PyObject *unused)
{
    /* ftrace_profile_reset(): no records; no call is running for the profiler */
    for (Py_ssize_t i = 0; i < st->n; i++)
        hist_free(&st->recs[i].hist);
    st->n = 0;
    if (st->index != NULL)
        memset(st->index, 0, (st->mask + 1) * sizeof(Py_ssize_t));
    if (st->slots != NULL)
        memset(st->slots, 0, st->nslots * sizeof(prof_slot));
    Py_RETURN_NONE;
}

static Py_ssize_t
ProfileStat_len(ProfileStatObject *st)
{
    return st->n;
}

static PyMethodDef ProfileStat_methods[] = {
    {"hit", (PyCFunction)ProfileStat_hit, METH_O, "hit(ip): one more hit of the function"},
    {"add_time", (PyCFunction)(void (*)(void))ProfileStat_add_time, METH_FASTCALL,
     "add_time(ip, ns, dist=False, self_ns=0): one call's time, if the function has a "
     "record (dist: into its distribution too, and self_ns into its self time)"},
    {"items", (PyCFunction)(void (*)(void))ProfileStat_items, METH_FASTCALL,
     "items(dist=False) -> [(ip, hits, time, time_squared)], in the order first hit; "
     "with dist each ends in (min, max, {bucket: calls}, self time)"},
    {"reset", (PyCFunction)ProfileStat_reset, METH_NOARGS, "reset(): forget every record"},
    {NULL}
};

static PyMemberDef ProfileStat_members[] = {
    {"cpu", T_LONG, offsetof(ProfileStatObject, cpu), READONLY, "the thread's index"},
    {NULL}
};

static PyType_Slot ProfileStat_slots[] = {
    {Py_tp_new, ProfileStat_new},
    {Py_tp_dealloc, ProfileStat_dealloc},
    {Py_tp_methods, ProfileStat_methods},
    {Py_tp_members, ProfileStat_members},
    {Py_sq_length, ProfileStat_len},
    {Py_tp_doc, "One thread's function profile (the kernel's per-CPU ftrace_profile_stat)."},
    {0, NULL}
};

static PyType_Spec ProfileStat_spec = {
    "fntrace._native.ProfileStat", sizeof(ProfileStatObject), 0,
    Py_TPFLAGS_DEFAULT, ProfileStat_slots,
};
