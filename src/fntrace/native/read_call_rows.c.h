/* -- CallRows: the Parquet table's calls ----------------------------------------------
 *
 * The native twin of output/parquet.py's write_parquet for a trace of calls (the
 * blocks text_ok accepts): the records merged by time as GraphText merges them, each
 * slot's calls paired as CallBuilder pairs them, losses included (what is open is closed
 * at the slot's last time, and a return after the gap starts no earlier than it), each
 * call a row of column buffers when it ends -- slot, ts, dur, self_dur, depth, path,
 * complete -- in batches of ``rows`` rows.  A call's names (function, parent, stack)
 * are its path's, which the caller turns into strings once per path.
 */

typedef struct {
    uint32_t cid;
    uint32_t path;
    int64_t depth, start, children;
} rframe_t;

typedef struct {
    rframe_t *st;
    Py_ssize_t n, cap;
    int64_t last_ts;
    int seen;               /* a graph record was read (CallBuilder._stacks has the slot) */
    int64_t gap;
    int has_gap;
} rslot_t;

typedef struct {
    PyObject_HEAD
    merge_t m;
    rslot_t *rs;
    Py_ssize_t *order;
    Py_ssize_t norder;
    PyObject *canon;
    trie_t tr;
    Py_ssize_t batch;       /* rows a batch */
    int32_t *c_slot, *c_depth, *c_path;
    int64_t *c_ts, *c_dur, *c_self;
    uint8_t *c_complete;
    Py_ssize_t nrows, caprows;
    int done, finished;
    long long lost;
    uint64_t incomplete;
} CallRows;

static int
row_out(CallRows *c, Py_ssize_t slot, uint32_t path, int64_t depth, int64_t start,
        int64_t dur, int64_t self, int complete)
{
    Py_ssize_t i = c->nrows++;
    c->c_slot[i] = (int32_t)slot;
    c->c_ts[i] = start;
    c->c_dur[i] = dur;
    c->c_self[i] = self;
    c->c_depth[i] = (int32_t)depth;
    c->c_path[i] = (int32_t)path;
    c->c_complete[i] = (uint8_t)complete;
    c->incomplete += !complete;
    return 0;
}

/* closes as CallBuilder._close_deeper; the caller made room for every open frame */
static void
cr_close_deeper(CallRows *c, Py_ssize_t slot, int64_t depth, int64_t ts)
{
    rslot_t *s = &c->rs[slot];
    while (s->n && s->st[s->n - 1].depth >= depth) {
        rframe_t f = s->st[--s->n];
        int64_t dur = ts - f.start;
        if (dur < 0)
            dur = 0;
        int64_t self = dur - f.children;
        row_out(c, slot, f.path, f.depth, f.start, dur, self < 0 ? 0 : self, 0);
        if (s->n)
            s->st[s->n - 1].children += dur;
    }
}

/* a loss note of ``slot`` read: CallBuilder.feed(LostEvents) */
static void
cr_lost(CallRows *c, Py_ssize_t slot)
{
    rslot_t *s = &c->rs[slot];
    if (!s->seen)
        return;
    s->gap = s->last_ts;
    s->has_gap = 1;
    cr_close_deeper(c, slot, -1, s->last_ts);
}

/* room for ``more`` rows */
static int
cr_reserve(CallRows *c, Py_ssize_t more)
{
    if (c->nrows + more <= c->caprows)
        return 0;
    Py_ssize_t cap = c->caprows ? c->caprows : 1024;
    while (cap < c->nrows + more)
        cap *= 2;
#define GROW(f, size) do { void *p_ = PyMem_Realloc(c->f, (size_t)cap * (size)); \
        if (p_ == NULL) { PyErr_NoMemory(); return -1; } c->f = p_; } while (0)
    GROW(c_slot, 4);
    GROW(c_depth, 4);
    GROW(c_path, 4);
    GROW(c_ts, 8);
    GROW(c_dur, 8);
    GROW(c_self, 8);
    GROW(c_complete, 1);
#undef GROW
    c->caprows = cap;
    return 0;
}

/* the first ``n`` rows as a batch; the rest move to the front */
static PyObject *
cr_batch(CallRows *c, Py_ssize_t n)
{
    PyObject *out = Py_BuildValue(
        "(ny#y#y#y#y#y#y#)", n,
        (const char *)c->c_slot, n * 4, (const char *)c->c_ts, n * 8,
        (const char *)c->c_dur, n * 8, (const char *)c->c_self, n * 8,
        (const char *)c->c_depth, n * 4, (const char *)c->c_path, n * 4,
        (const char *)c->c_complete, n);
    if (out == NULL)
        return NULL;
    Py_ssize_t rest = c->nrows - n;
    if (rest) {
        memmove(c->c_slot, c->c_slot + n, (size_t)rest * 4);
        memmove(c->c_depth, c->c_depth + n, (size_t)rest * 4);
        memmove(c->c_path, c->c_path + n, (size_t)rest * 4);
        memmove(c->c_ts, c->c_ts + n, (size_t)rest * 8);
        memmove(c->c_dur, c->c_dur + n, (size_t)rest * 8);
        memmove(c->c_self, c->c_self + n, (size_t)rest * 8);
        memmove(c->c_complete, c->c_complete + n, (size_t)rest);
    }
    c->nrows = rest;
    return out;
}

/* step() -> (batch or None, need): a batch of ``rows`` rows each time that many have
 * been made (the last one shorter), as (n, slot, ts, dur, self_dur, depth, path,
 * complete) buffers -- write_parquet's row groups; need: the slot to feed before more
 * (-1: none); (None, -1): done */
static PyObject *
cr_step(CallRows *c, PyObject *unused)
{
    Py_ssize_t need = -1;
    for (;;) {
        if (c->nrows >= c->batch) {
            PyObject *batch = cr_batch(c, c->batch);
            return batch == NULL ? NULL : Py_BuildValue("(Nn)", batch, (Py_ssize_t)-1);
        }
        if (c->done) {
            if (c->nrows == 0)
                return Py_BuildValue("(On)", Py_None, (Py_ssize_t)-1);
            PyObject *batch = cr_batch(c, c->nrows);
            return batch == NULL ? NULL : Py_BuildValue("(Nn)", batch, (Py_ssize_t)-1);
        }
        /* room for a record's rows: every open frame of every slot, and one more */
        Py_ssize_t most = 1;
        for (Py_ssize_t k = 0; k < c->m.nslots; k++)
            most += c->rs[k].n;
        if (cr_reserve(c, most) < 0)
            return NULL;
        Py_ssize_t best = -1;
        int picked = merge_pick(&c->m, &best, &need);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            return Py_BuildValue("(On)", Py_None, need);
        if (picked == 0) {
            /* the losses nothing was read after, slot by slot; then builder.finish() */
            for (Py_ssize_t k = 0; k < c->m.nslots; k++) {
                gslot_t *g = &c->m.slots[k];
                for (Py_ssize_t i = 0; i < g->nmarks; i++)
                    cr_lost(c, k);
                g->nmarks = 0;
            }
            for (Py_ssize_t i = 0; i < c->norder; i++) {
                Py_ssize_t k = c->order[i];
                cr_close_deeper(c, k, -1, c->rs[k].last_ts);
            }
            c->done = 1;
            continue;
        }
        gslot_t *g = &c->m.slots[best];
        rslot_t *s = &c->rs[best];
        gblock_t *b = &g->q[g->head];
        record_t r;
        memcpy(&r, &b->rec[b->pos], sizeof(r));
        b->pos++;
        for (Py_ssize_t i = 0; i < g->nmarks; i++)
            cr_lost(c, best);
        g->nmarks = 0;
        uint32_t id = rec_id(b, &r), cid = id;
        if (canon_lookup(c->canon, &cid) < 0)
            return NULL;
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        if (!s->seen) {
            s->seen = 1;
            c->order[c->norder++] = best;
        }
        s->last_ts = ts;
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (s->n && s->st[s->n - 1].depth >= depth)
                cr_close_deeper(c, best, depth, ts);
            uint32_t path = trie_path(&c->tr, s->n ? s->st[s->n - 1].path : 0, cid);
            if (path == 0)
                return NULL;
            if (s->n == s->cap) {
                Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
                rframe_t *st = PyMem_Realloc(s->st, (size_t)cap * sizeof(rframe_t));
                if (st == NULL)
                    return PyErr_NoMemory();
                s->st = st;
                s->cap = cap;
            }
            rframe_t *f = &s->st[s->n++];
            f->cid = cid;
            f->path = path;
            f->depth = depth;
            f->start = ts;
            f->children = 0;
            continue;
        }
        if (s->n && s->st[s->n - 1].depth > depth)
            cr_close_deeper(c, best, depth + 1, ts);
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid != cid)
            cr_close_deeper(c, best, depth, ts);
        int64_t start = (int64_t)r.d, dur, self;
        uint32_t path;
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid == cid) {
            rframe_t f = s->st[--s->n];
            if (f.start <= ts)
                start = f.start;
            dur = ts - start;
            self = dur - f.children;
            if (self < 0)
                self = 0;
            path = f.path;
        } else {
            if (s->has_gap && start < s->gap)
                start = s->gap;
            dur = ts - start;
            self = dur;
            path = trie_path(&c->tr, s->n ? s->st[s->n - 1].path : 0, cid);
            if (path == 0)
                return NULL;
        }
        if (s->n)
            s->st[s->n - 1].children += dur;
        row_out(c, best, path, depth, start, dur, self, 1);
    }
}

static PyObject *
cr_feed(CallRows *c, PyObject *const *args, Py_ssize_t nargs)
{
    return merge_feed(&c->m, args, nargs, &c->lost);
}

/* paths(first) -> [(parent, id)] of paths first, first + 1, ... (path k: item k - first) */
static PyObject *
cr_paths(CallRows *c, PyObject *arg)
{
    Py_ssize_t first = PyLong_AsSsize_t(arg);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    if (first < 1)
        first = 1;
    Py_ssize_t n = c->tr.n - first + 1;
    PyObject *out = PyList_New(n > 0 ? n : 0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(kk)", (unsigned long)c->tr.parent[first + i],
                                    (unsigned long)c->tr.func[first + i]);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *
cr_counts(CallRows *c, PyObject *unused)
{
    return Py_BuildValue("(LK)", c->lost, (unsigned long long)c->incomplete);
}

/* CallRows(slots, canon, rows) */
static int
cr_init(CallRows *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, batch;
    PyObject *canon;
    if (!PyArg_ParseTuple(args, "nOn:CallRows", &nslots, &canon, &batch))
        return -1;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || batch < 1) {
        PyErr_SetString(PyExc_ValueError, "CallRows: bad slots or rows (or made twice)");
        return -1;
    }
    if (canon != Py_None) {
        if (!PyDict_Check(canon)) {
            PyErr_SetString(PyExc_TypeError, "CallRows: canon is a dict or None");
            return -1;
        }
        if (PyDict_GET_SIZE(canon))
            c->canon = Py_NewRef(canon);
    }
    Py_ssize_t n1 = nslots ? nslots : 1;
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->rs = PyMem_Calloc((size_t)n1, sizeof(rslot_t));
    c->order = PyMem_Calloc((size_t)n1, sizeof(Py_ssize_t));
    c->batch = batch;
    if (!c->rs || !c->order) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
cr_dealloc(CallRows *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    for (Py_ssize_t k = 0; k < c->m.nslots; k++)
        PyMem_Free(c->rs[k].st);
    merge_free(&c->m);
    PyMem_Free(c->rs);
    PyMem_Free(c->order);
    PyMem_Free(c->c_slot);
    PyMem_Free(c->c_depth);
    PyMem_Free(c->c_path);
    PyMem_Free(c->c_ts);
    PyMem_Free(c->c_dur);
    PyMem_Free(c->c_self);
    PyMem_Free(c->c_complete);
    trie_free(&c->tr);
    Py_XDECREF(c->canon);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyMethodDef cr_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))cr_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase]): a slot's next block, or that it has no more"},
    {"step", (PyCFunction)cr_step, METH_NOARGS,
     "step() -> (batch or None, need): a batch of rows, and the slot to feed (-1: none)"},
    {"paths", (PyCFunction)cr_paths, METH_O,
     "paths(first) -> [(parent, id)]: the call paths from path ``first`` on"},
    {"counts", (PyCFunction)cr_counts, METH_NOARGS,
     "counts() -> (lost events, incomplete calls)"},
    {NULL}
};

static PyType_Slot cr_slots[] = {
    {Py_tp_doc, "CallRows(slots, canon, rows): the Parquet table's calls of a trace file, "
                "in column batches (output/parquet.py's twin)"},
    {Py_tp_init, cr_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, cr_dealloc},
    {Py_tp_methods, cr_methods},
    {0, NULL},
};

static PyType_Spec cr_spec = {
    "fntrace._native.CallRows", sizeof(CallRows), 0, Py_TPFLAGS_DEFAULT, cr_slots,
};
