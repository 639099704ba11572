/* -- IndexRows: the browser's index of calls -------------------------------------------
 *
 * The native twin of tui/index.py's TraceIndex._step for a trace of calls (the blocks
 * text_ok accepts): the records merged by time as GraphText merges them, each slot's
 * calls paired as CallBuilder pairs them (read_pair.c.h; across losses, which the
 * index shows as events and pairs on), and every call a row of its slot in the order
 * its entry was read -- the function_graph text's order, a call's descendants in the
 * rows right after it:
 *
 *     entry    a row, open (end -1, flags ENTRY_SEEN|OPEN), its frame carrying the
 *              row's number; the rows it ends are closed first
 *     return   its frame's row closed (end, self, subend: the slot's rows so far,
 *              flags), or a row of its own after its children's (no entry read)
 *
 * A batch is what ``batch`` records made: each slot's new rows as column buffers,
 * the rows of earlier batches closed meanwhile as updates, each (slot, function) whose
 * hits, time or self time changed with its totals so far, and the losses read (as the
 * index's "[LOST n EVENTS]" events, at the time the Python index gives them).
 * Functions are the index's name ids: ``fids[id]`` (a record id's name's), or what
 * ``resolve(id)`` says for an id beyond it.  With ``intern`` (a -A/-R trace, the blocks
 * fed with their payloads) a row's arguments (function_args_text) and return value
 * (str) are the index's text ids, asked of ``intern(text)`` at the moments the Python
 * index asks text_id: an entry's arguments when its row is made (after the calls the
 * entry ends), a return value when its call is closed.
 */

#define IR_ENTRY_SEEN 2
#define IR_COMPLETE 1
#define IR_OPEN 8
#define IR_HAS_RETVAL 4

typedef struct {
    int32_t *func, *depth, *parent, *subend, *args, *ret, *caller;
    int64_t *start, *end, *self;
    uint8_t *flags;
    Py_ssize_t n, cap;      /* rows of this batch */
    int callers;            /* a row of this batch has a caller (a function hit's) */
    Py_ssize_t total;       /* rows of the slot so far (TraceIndex's t.n) */
    int64_t last_start;     /* t.start[t.n - 1] */
    int64_t last_ev;        /* t.ev_ts[t.nev - 1] */
    int has_ev;
} irslot_t;

typedef struct {
    uint64_t key;           /* (slot << 32 | fid) + 1; 0: empty */
    int64_t hit, total, self;
    int dirty;
    int timed;              /* a call was closed (not only hits): total and self count */
} irstat_t;

typedef struct {
    MERGE_WALK_HEAD
    pair_t pr;
    int32_t *fids;
    Py_ssize_t nfids;
    PyObject *resolve;
    PyObject *intern;       /* text -> its id (None: no values) */
    tbuf_t t;               /* an argument text being made */
    irslot_t *s;
    irstat_t *st;
    Py_ssize_t stcap, stn;
    uint64_t *dirty;        /* keys of the stats changed in this batch */
    Py_ssize_t ndirty, capdirty;
    PyObject *updates;      /* [(slot, row, end, self, subend, flags)] */
    PyObject *losses;       /* [(slot, ts, lost)], and markers' and events' (slot, ts, text) */
    Py_ssize_t batch, nrec;
    int64_t first_ts;
    int has_first, done;
} IndexRows;

/* fn(arg): ``arg`` a new reference given up (or NULL with an exception) */
static PyObject *
call_taking(PyObject *fn, PyObject *arg)
{
    if (arg == NULL)
        return NULL;
    PyObject *r = PyObject_CallOneArg(fn, arg);
    Py_DECREF(arg);
    return r;
}

/* fn(arg) -> an int (the index's id of a name or a text), arg as call_taking's */
static int
ir_ask(PyObject *fn, PyObject *arg, int32_t *out)
{
    PyObject *r = call_taking(fn, arg);
    if (r == NULL)
        return -1;
    long v = PyLong_AsLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int
ir_fid(IndexRows *c, uint32_t id, int32_t *out)
{
    if ((Py_ssize_t)id < c->nfids && c->fids[id] >= 0) {
        *out = c->fids[id];
        return 0;
    }
    int32_t v;
    if (ir_ask(c->resolve, PyLong_FromUnsignedLong(id), &v) < 0)
        return -1;
    if ((Py_ssize_t)id >= c->nfids) {
        Py_ssize_t n = c->nfids ? c->nfids : 64;
        while (n <= (Py_ssize_t)id)
            n *= 2;
        if (ARRAY_RESIZE(c->fids, n) < 0)
            return -1;
        for (Py_ssize_t i = c->nfids; i < n; i++)
            c->fids[i] = -1;
        c->nfids = n;
    }
    c->fids[id] = (int32_t)v;
    *out = (int32_t)v;
    return 0;
}

/* the index's id of a text (UTF-8, checked by graph_text_ok) */
static int
ir_text(IndexRows *c, const char *s, Py_ssize_t len, int32_t *out)
{
    return ir_ask(c->intern, PyUnicode_DecodeUTF8(s, len, "strict"), out);
}

/* text_id(function_args_text(args_pairs(text))) of an entry's or a hit's arguments, -1
 * without them */
static int
ir_args(IndexRows *c, const pvalue_t *v, int32_t *out)
{
    *out = -1;
    if (!v->has || v->kind != PAY_STR)
        return 0;
    c->t.blen = 0;
    if (tb_reserve(&c->t, 2 * v->len + 4) < 0)
        return -1;
    put_args_text(&c->t, v->s, v->len);
    return ir_text(c, c->t.buf, c->t.blen, out);
}

/* text_id(str(retval)), -1 without one */
static int
ir_ret(IndexRows *c, const pvalue_t *v, int32_t *out)
{
    *out = -1;
    if (!v->has)
        return 0;
    if (v->kind == PAY_INT) {
        char num[32];
        int n = PyOS_snprintf(num, sizeof(num), "%lld", (long long)v->iv);
        return ir_text(c, num, n, out);
    }
    return ir_text(c, v->s, v->len, out);
}

static int
ir_stat(IndexRows *c, Py_ssize_t slot, int32_t fid, int64_t dur, int64_t self, int timed)
{
    if ((c->stn + 1) * 2 > c->stcap) {
        Py_ssize_t cap = c->stcap ? c->stcap * 2 : 1024;
        irstat_t *t = PyMem_Calloc((size_t)cap, sizeof(irstat_t));
        if (t == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < c->stcap; i++) {
            if (!c->st[i].key)
                continue;
            Py_ssize_t h = (Py_ssize_t)(mix(c->st[i].key) & (uint64_t)(cap - 1));
            while (t[h].key)
                h = (h + 1) & (cap - 1);
            t[h] = c->st[i];
        }
        PyMem_Free(c->st);
        c->st = t;
        c->stcap = cap;
    }
    uint64_t key = (((uint64_t)slot << 32) | (uint32_t)fid) + 1;
    Py_ssize_t h = (Py_ssize_t)(mix(key) & (uint64_t)(c->stcap - 1));
    while (c->st[h].key && c->st[h].key != key)
        h = (h + 1) & (c->stcap - 1);
    irstat_t *e = &c->st[h];
    if (!e->key) {
        e->key = key;
        c->stn++;
    }
    e->hit++;
    e->total += dur;
    e->self += self;
    e->timed |= timed;
    if (!e->dirty) {
        if (ARRAY_ROOM(c->dirty, c->ndirty, c->capdirty, 256) < 0)
            return -1;
        e->dirty = 1;
        c->dirty[c->ndirty++] = key;
    }
    return 0;
}

/* a new row of the slot, open or whole; its number */
static Py_ssize_t
ir_row(IndexRows *c, Py_ssize_t slot, int32_t fid, int64_t depth, int64_t start, int64_t end,
       int64_t self, int32_t parent, int32_t subend, uint8_t flags, int32_t args, int32_t ret,
       int32_t caller)
{
    irslot_t *s = &c->s[slot];
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 256;
        if (ARRAY_RESIZE(s->func, cap) < 0 || ARRAY_RESIZE(s->depth, cap) < 0
                || ARRAY_RESIZE(s->parent, cap) < 0 || ARRAY_RESIZE(s->subend, cap) < 0
                || ARRAY_RESIZE(s->args, cap) < 0 || ARRAY_RESIZE(s->ret, cap) < 0
                || ARRAY_RESIZE(s->caller, cap) < 0 || ARRAY_RESIZE(s->start, cap) < 0
                || ARRAY_RESIZE(s->end, cap) < 0 || ARRAY_RESIZE(s->self, cap) < 0
                || ARRAY_RESIZE(s->flags, cap) < 0)
            return -1;
        s->cap = cap;
    }
    Py_ssize_t i = s->n++;
    s->func[i] = fid;
    s->depth[i] = (int32_t)depth;
    s->start[i] = start;
    s->end[i] = end;
    s->self[i] = self;
    s->parent[i] = parent;
    s->subend[i] = subend;
    s->flags[i] = flags;
    s->args[i] = args;
    s->ret[i] = ret;
    s->caller[i] = caller;
    s->callers |= caller >= 0;
    s->last_start = start;
    return s->total++;
}

/* TraceIndex._close */
static int
ir_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    IndexRows *c = (IndexRows *)ctx;
    irslot_t *s = &c->s[slot];
    int32_t fid;
    if (ir_fid(c, p->id, &fid) < 0)
        return -1;
    int64_t dur = p->end - p->start;
    uint8_t flags = (p->complete ? IR_COMPLETE : 0) | (p->ret.has ? IR_HAS_RETVAL : 0);
    int32_t ret;
    if (ir_ret(c, &p->ret, &ret) < 0)
        return -1;
    if (p->entry_seen) {
        Py_ssize_t r = (Py_ssize_t)p->path;
        Py_ssize_t base = s->total - s->n;
        flags |= IR_ENTRY_SEEN;
        if (r >= base) {
            Py_ssize_t i = r - base;
            s->end[i] = p->end;
            s->self[i] = p->self;
            s->subend[i] = (int32_t)s->total;
            s->flags[i] = flags;
            s->ret[i] = ret;
        } else {
            PyObject *u = Py_BuildValue("(nnLLnbi)", slot, r, (long long)p->end,
                                        (long long)p->self, s->total, (char)flags, (int)ret);
            if (u == NULL || PyList_Append(c->updates, u) < 0) {
                Py_XDECREF(u);
                return -1;
            }
            Py_DECREF(u);
        }
    } else {
        call_frame_t *top = pair_top(&c->pr, slot);
        Py_ssize_t r = s->total;
        if (ir_row(c, slot, fid, p->depth, p->start, p->end, p->self,
                   top ? (int32_t)top->path : -1, (int32_t)(r + 1), flags, -1, ret, -1) < 0)
            return -1;
    }
    return ir_stat(c, slot, fid, dur, p->self, 1);
}

static int
ir_losses(IndexRows *c, Py_ssize_t k)
{
    gslot_t *g = &c->m.slots[k];
    irslot_t *s = &c->s[k];
    for (Py_ssize_t i = 0; i < g->nmarks; i++) {
        int64_t ts = s->has_ev ? s->last_ev : (s->total ? s->last_start : 0);
        PyObject *u = Py_BuildValue("(nLL)", k, (long long)ts, g->marks[i]);
        if (u == NULL || PyList_Append(c->losses, u) < 0) {
            Py_XDECREF(u);
            return -1;
        }
        Py_DECREF(u);
        s->last_ev = ts;
        s->has_ev = 1;
        c->nrec++;
    }
    g->nmarks = 0;
    return 0;
}

/* a marker or an event: the thread's event text (TraceIndex's Python loop makes it of
 * text_parts(payload): "name: text", a marker with no name "tracing_mark_write: text"),
 * in the batch's list of losses and events, as (slot, ts, text) */
static int
ir_event(IndexRows *c, Py_ssize_t k, const record_t *r, const pvalue_t *v)
{
    irslot_t *s = &c->s[k];
    const char *name, *text;
    Py_ssize_t nlen, tlen;
    text_parts(v->has ? v->s : NULL, v->has ? v->len : 0, &name, &nlen, &text, &tlen);
    if (nlen == 0 && r->type == FNT_TRACE_PRINT) {
        name = "tracing_mark_write";
        nlen = 18;
    }
    c->t.blen = 0;
    if (tb_reserve(&c->t, nlen + tlen + 2) < 0)
        return -1;
    tb_put(&c->t, name, nlen);
    TB_LIT(&c->t, ": ");
    tb_put(&c->t, text, tlen);
    PyObject *u = Py_BuildValue("(nLs#)", k, (long long)r->ts, c->t.buf, c->t.blen);
    if (u == NULL || PyList_Append(c->losses, u) < 0) {
        Py_XDECREF(u);
        return -1;
    }
    Py_DECREF(u);
    s->last_ev = (int64_t)r->ts;
    s->has_ev = 1;
    return 0;
}

static PyObject *
ir_batch(IndexRows *c)
{
    PyObject *rows = PyList_New(0), *stats = PyList_New(0), *out = NULL;
    if (rows == NULL || stats == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < c->m.nslots; k++) {
        irslot_t *s = &c->s[k];
        if (!s->n)
            continue;
        Py_ssize_t n = s->n;
        /* the callers: None when no row of the batch has one (all -1) */
        PyObject *callers = s->callers
            ? PyBytes_FromStringAndSize((const char *)s->caller, n * 4) : Py_NewRef(Py_None);
        PyObject *t = callers == NULL ? NULL : Py_BuildValue(
            "(nny#y#y#y#y#y#y#y#y#y#N)", k, n,
            (const char *)s->func, n * 4, (const char *)s->depth, n * 4,
            (const char *)s->start, n * 8, (const char *)s->end, n * 8,
            (const char *)s->self, n * 8, (const char *)s->parent, n * 4,
            (const char *)s->subend, n * 4, (const char *)s->flags, n,
            (const char *)s->args, n * 4, (const char *)s->ret, n * 4, callers);
        s->callers = 0;
        if (t == NULL || PyList_Append(rows, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
        s->n = 0;
    }
    for (Py_ssize_t i = 0; i < c->ndirty; i++) {
        uint64_t key = c->dirty[i];
        Py_ssize_t h = (Py_ssize_t)(mix(key) & (uint64_t)(c->stcap - 1));
        while (c->st[h].key != key)
            h = (h + 1) & (c->stcap - 1);
        irstat_t *e = &c->st[h];
        e->dirty = 0;
        PyObject *t = Py_BuildValue("(nlLLLi)", (Py_ssize_t)((key - 1) >> 32),
                                    (long)(int32_t)(uint32_t)(key - 1), (long long)e->hit,
                                    (long long)e->total, (long long)e->self, e->timed);
        if (t == NULL || PyList_Append(stats, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    c->ndirty = 0;
    PyObject *first = c->has_first ? PyLong_FromLongLong(c->first_ts) : Py_NewRef(Py_None);
    if (first == NULL)
        goto done;
    out = Py_BuildValue("(nNOOOO)", c->nrec, first, rows, c->updates, stats, c->losses);
    if (out == NULL)
        goto done;
    c->nrec = 0;
    Py_SETREF(c->updates, PyList_New(0));
    Py_SETREF(c->losses, PyList_New(0));
    if (c->updates == NULL || c->losses == NULL)
        Py_CLEAR(out);
done:
    Py_XDECREF(rows);
    Py_XDECREF(stats);
    return out;
}

/* step() -> (batch or None, need): a batch each ``records`` records read (the last
 * when the trace ends), as (records, first_ts, [(slot, n, func, depth, start, end,
 * self, parent, subend, flags, args, ret)], [(slot, row, end, self, subend, flags,
 * ret)], [(slot, fid, hits, total, self)], [(slot, ts, lost)]); need: the slot to feed
 * before more (-1: none); (None, -1): done */
static PyObject *
ir_step(IndexRows *c, PyObject *unused)
{
    Py_ssize_t need = -1;
    for (;;) {
        if (c->nrec >= c->batch) {
            PyObject *b = ir_batch(c);
            return b == NULL ? NULL : Py_BuildValue("(Nn)", b, (Py_ssize_t)-1);
        }
        if (c->done == 1) {
            c->done = 2;
            PyObject *b = ir_batch(c);
            return b == NULL ? NULL : Py_BuildValue("(Nn)", b, (Py_ssize_t)-1);
        }
        if (c->done)
            return Py_BuildValue("(On)", Py_None, (Py_ssize_t)-1);
        Py_ssize_t best = -1;
        record_t r;
        uint32_t id;
        int picked = merge_next(&c->m, &best, &need, &r, &id);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            return Py_BuildValue("(On)", Py_None, need);
        if (picked == 0) {
            for (Py_ssize_t k = 0; k < c->m.nslots; k++)
                if (ir_losses(c, k) < 0)
                    return NULL;
            if (pair_finish(&c->pr) < 0)
                return NULL;
            c->done = 1;
            continue;
        }
        if (ir_losses(c, best) < 0)
            return NULL;
        c->nrec++;
        if (!c->has_first) {
            c->has_first = 1;
            c->first_ts = (int64_t)r.ts;
        }
        if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT) {
            /* (the blocks' check let them in only with their text) */
            pvalue_t ev = record_value(&c->m, best, &r, 1);
            if (ir_event(c, best, &r, &ev) < 0)
                return NULL;
            continue;
        }
        uint32_t cid;
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        int32_t fid;
        if (ir_fid(c, id, &fid) < 0)
            return NULL;
        pvalue_t v = record_value(&c->m, best, &r, c->intern != NULL);
        int32_t args = -1;
        if (r.type == FNT_TRACE_FN) {
            /* a function tracer hit: a row of its own, closed (no duration), its
             * caller's name, counted as a hit (TraceIndex's Python loop) */
            gslot_t *g = &c->m.slots[best];
            uint32_t ibase = g->q[g->head].ibase;
            int32_t caller = -1;
            if (ir_args(c, &v, &args) < 0)
                return NULL;
            if (r.b && ir_fid(c, r.b + ibase, &caller) < 0)
                return NULL;
            Py_ssize_t row = c->s[best].total;
            if (ir_row(c, best, fid, 0, ts, ts, 0, -1, (int32_t)(row + 1), IR_ENTRY_SEEN, args,
                       -1, caller) < 0
                    || ir_stat(c, best, fid, 0, 0, 0) < 0)
                return NULL;
            continue;
        }
        /* what pairs: the name (fid), as the Python index pairs by name */
        cid = (uint32_t)fid;
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (pair_enter_close(&c->pr, best, depth, ts) < 0 || ir_args(c, &v, &args) < 0)
                return NULL;
            call_frame_t *top = pair_top(&c->pr, best);
            Py_ssize_t row = ir_row(c, best, fid, depth, ts, -1, 0, top ? (int32_t)top->path : -1,
                                    -1, IR_ENTRY_SEEN | IR_OPEN, args, -1, -1);
            if (row < 0 || pair_push(&c->pr, best, id, cid, depth, ts, (uint32_t)row) < 0)
                return NULL;
        } else if (pair_return_value(&c->pr, best, id, cid, depth, ts, (int64_t)r.d, &v) < 0) {
            return NULL;
        }
    }
}

/* IndexRows(slots, fids, resolve, records, intern=None): fids, an array('i') of id ->
 * name id (-1: ask resolve(id)); intern: text -> text id, for a trace with values */
static int
ir_init(IndexRows *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, batch;
    PyObject *fids, *resolve, *intern = Py_None;
    if (!PyArg_ParseTuple(args, "nOOn|O:IndexRows", &nslots, &fids, &resolve, &batch, &intern))
        return -1;
    if (callable_arg(intern, &c->intern, "IndexRows", "intern") < 0)
        return -1;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || batch < 1) {
        PyErr_SetString(PyExc_ValueError, "IndexRows: bad slots or records (or made twice)");
        return -1;
    }
    if (!PyCallable_Check(resolve)) {
        PyErr_SetString(PyExc_TypeError, "IndexRows: resolve is callable");
        return -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(fids, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view.itemsize != 4 || view.format == NULL || strcmp(view.format, "i") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "IndexRows: fids is an array('i')");
        return -1;
    }
    c->nfids = view.len / 4;
    c->fids = PyMem_Malloc((size_t)(c->nfids ? c->nfids : 1) * sizeof(int32_t));
    if (c->fids == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(c->fids, view.buf, (size_t)c->nfids * 4);
    PyBuffer_Release(&view);
    c->resolve = Py_NewRef(resolve);
    c->s = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(irslot_t));
    c->updates = PyList_New(0);
    c->losses = PyList_New(0);
    if (c->s == NULL || c->updates == NULL || c->losses == NULL) {
        if (c->s == NULL)
            PyErr_NoMemory();
        return -1;
    }
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->batch = batch;
    return pair_init(&c->pr, nslots, ir_emit, c);
}

static void
ir_dealloc(IndexRows *c)
{
    if (c->s != NULL)
        for (Py_ssize_t k = 0; k < c->m.nslots; k++) {
            irslot_t *s = &c->s[k];
            PyMem_Free(s->func);
            PyMem_Free(s->depth);
            PyMem_Free(s->parent);
            PyMem_Free(s->subend);
            PyMem_Free(s->args);
            PyMem_Free(s->ret);
            PyMem_Free(s->caller);
            PyMem_Free(s->start);
            PyMem_Free(s->end);
            PyMem_Free(s->self);
            PyMem_Free(s->flags);
        }
    merge_free(&c->m);
    pair_free(&c->pr);
    PyMem_Free(c->s);
    PyMem_Free(c->st);
    PyMem_Free(c->dirty);
    PyMem_Free(c->fids);
    Py_XDECREF(c->resolve);
    Py_XDECREF(c->intern);
    PyMem_Free(c->t.buf);
    Py_XDECREF(c->updates);
    Py_XDECREF(c->losses);
    read_free((PyObject *)c);
}

static PyMethodDef ir_methods[] = {
    MERGE_FEED_METHOD,
    {"step", (PyCFunction)ir_step, METH_NOARGS,
     "step() -> (batch or None, need): a batch of rows, and the slot to feed (-1: none)"},
    {NULL}
};

READ_TYPE(ir, IndexRows,
          "IndexRows(slots, fids, resolve, records, intern=None): the browser's index of a "
          "trace of calls, in batches (tui/index.py's twin)");

/* -- index_visible: which of the index's new rows the browser shows ------------------
 *
 * index_visible(parents, depths, r0, fold_depth, chain, shows_children)
 *     -> (rows, chain)
 * tui/graph.py's index_visible, its pure twin, says what it does: rows r0, r0 + 1, ...
 * (their parents and depths, int32) in preorder, a row shown when its parent's children
 * show; ``chain`` is the open calls above them, (row, children show) int32 pairs;
 * ``shows_children(p)`` answers for a parent not on it (from an earlier piece). */
static int
iv_ask(PyObject *fn, int32_t p)
{
    PyObject *res = call_taking(fn, PyLong_FromLong(p));
    if (res == NULL)
        return -1;
    int ok = PyObject_IsTrue(res);
    Py_DECREF(res);
    return ok;
}

static PyObject *
index_visible(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs_check(nargs, 6, "index_visible() takes 6 arguments") < 0)
        return NULL;
    long long r0 = PyLong_AsLongLong(args[2]);
    long long fold = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *fn = args[5];
    Py_buffer pb, db, cb;
    if (buffer_of(args[0], &pb, 4, "index_visible") < 0)
        return NULL;
    if (buffer_of(args[1], &db, 4, "index_visible") < 0) {
        PyBuffer_Release(&pb);
        return NULL;
    }
    if (buffer_of(args[4], &cb, 8, "index_visible") < 0) {
        PyBuffer_Release(&pb);
        PyBuffer_Release(&db);
        return NULL;
    }
    PyObject *out = NULL, *res = NULL;
    int32_t *ch = NULL;
    Py_ssize_t n = pb.len / 4, top = cb.len / 8;
    if (db.len / 4 != n) {
        PyErr_SetString(PyExc_ValueError, "index_visible: parents and depths differ in "
                        "length");
        goto done;
    }
    /* the chain grows by one row a row at most */
    ch = PyMem_Malloc((size_t)(top + n + 2) * 8);
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (ch == NULL || out == NULL) {
        if (ch == NULL)
            PyErr_NoMemory();
        goto done;
    }
    memcpy(ch, cb.buf, (size_t)top * 8);
    const int32_t *ps = pb.buf, *ds = db.buf;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(out);
    Py_ssize_t k = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int32_t p = ps[j];
        int32_t r = (int32_t)(r0 + j);
        int shown;
        if (p < 0) {
            shown = 1;
            top = 0;
        } else {
            while (top && ch[2 * (top - 1)] != p)
                top--;
            if (top) {
                shown = ch[2 * top - 1];
            } else {
                /* a parent from before: asked once, then the chain's first link */
                shown = iv_ask(fn, p);
                if (shown < 0)
                    goto done;
                ch[0] = p;
                ch[1] = shown;
                top = 1;
            }
        }
        if (shown)
            o[k++] = r;
        ch[2 * top] = r;
        ch[2 * top + 1] = shown && ds[j] < fold;
        top++;
    }
    if (_PyBytes_Resize(&out, k * 4) < 0)
        goto done;
    PyObject *back = PyBytes_FromStringAndSize((const char *)ch, top * 8);
    if (back != NULL)
        res = PyTuple_Pack(2, out, back);
    Py_XDECREF(back);
done:
    PyMem_Free(ch);
    Py_XDECREF(out);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&cb);
    return res;
}
