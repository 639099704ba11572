/* -- CallRows: the Parquet table's calls ----------------------------------------------
 *
 * The native twin of output/parquet.py's write_parquet for a trace of calls (the
 * blocks text_ok accepts): the records merged by time as GraphText merges them, each
 * slot's calls paired as CallBuilder pairs them (read_pair.c.h), losses included (what is open is closed
 * at the slot's last time, and a return after the gap starts no earlier than it), each
 * call a row of column buffers when it ends -- slot, ts, dur, self_dur, depth, path,
 * complete -- in batches of ``rows`` rows.  A call's names (function, parent, stack)
 * are its path's, which the caller turns into strings once per path.  With ``values``
 * (a trace recorded with -A/-R) each row also has its arguments' text and its return
 * value's, as the table prints them (function_args_text, str()), or null, as Arrow
 * string columns: validity bits, offsets, UTF-8 data.
 *
 * A function tracer hit (a trace of the default tracer) is a row when it is read: its
 * path is [HIT_PATH, caller (0: none), function] in the same trie, so that the caller
 * tells a hit's row (no duration, depth or stack; its caller's name as the parent) by
 * its path; its arguments' text as a call's.  Its depth, dur and self_dur are 0.
 *
 * With ``on_event`` (a trace with markers and events: an asyncio program's task
 * switches) each marker and event is a row when it is read, its path [EVENT_PATH or
 * MARKER_PATH, the name's id] and its text in the args column (made with ``values``
 * only).  ``on_event(marker, payload)`` -> (the name's id, the Task it switches to:
 * -1 when it is no task switch, 0 outside any Task, else the Task's id) is asked of
 * the caller, which keeps the names and says what a task switch is.  Each row's task
 * (int32, 0: none) is the one its slot's switches say was running at the row's time
 * (SwitchPoints.at).
 */
#define EVENT_PATH (UINT32_MAX - 1)
#define MARKER_PATH (UINT32_MAX - 2)

/* a slot's task switches: their times and tasks, in time order */
typedef struct {
    int64_t *ts;
    int32_t *task;
    Py_ssize_t n, cap;
} switches_t;

/* a string column being made: each row's start in ``t`` and whether it has one */
typedef struct {
    tbuf_t t;
    int64_t *start;
    uint8_t *valid;
} strcol_t;

typedef struct {
    MERGE_WALK_HEAD
    pair_t pr;
    PyObject *canon;
    trie_t tr;
    Py_ssize_t batch;       /* rows a batch */
    int32_t *c_slot, *c_depth, *c_path, *c_task;
    int64_t *c_ts, *c_dur, *c_self;
    uint8_t *c_complete;
    int values;
    strcol_t c_args, c_ret;
    Py_ssize_t nrows, caprows;
    int done, finished;
    int declined;           /* a record it does not take was read: it reads no more */
    uint64_t incomplete;
    PyObject *on_event;     /* NULL: the trace has no events */
    switches_t *sw;         /* per slot (with on_event) */
    Py_ssize_t nslots;
} CallRows;

/* SwitchPoints.at: the task of ``slot`` at ``ts`` (its last switch at or before ts) */
static inline int32_t
task_at(CallRows *c, Py_ssize_t slot, int64_t ts)
{
    if (c->sw == NULL)
        return 0;
    switches_t *w = &c->sw[slot];
    Py_ssize_t lo = 0, hi = w->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (w->ts[mid] <= ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? w->task[lo - 1] : 0;
}

static int
switch_add(CallRows *c, Py_ssize_t slot, int64_t ts, int32_t task)
{
    switches_t *w = &c->sw[slot];
    if (w->n == w->cap) {
        Py_ssize_t cap = w->cap ? 2 * w->cap : 16;
        if (ARRAY_RESIZE(w->ts, cap) < 0 || ARRAY_RESIZE(w->task, cap) < 0)
            return -1;
        w->cap = cap;
    }
    w->ts[w->n] = ts;
    w->task[w->n] = task;
    w->n++;
    return 0;
}

/* row i's text in a string column (NULL: a null) */
static int
strcol_put(strcol_t *sc, Py_ssize_t i, int args, const char *s, Py_ssize_t len,
           const pvalue_t *v)
{
    sc->start[i] = sc->t.blen;
    sc->valid[i] = args ? s != NULL : v->has;
    if (!sc->valid[i])
        return 0;
    if (tb_reserve(&sc->t, 2 * (args ? len : v->len) + 32) < 0)
        return -1;
    if (args)
        put_args_text(&sc->t, s, len);
    else if (v->kind == PAY_INT)
        sc->t.blen += PyOS_snprintf(sc->t.buf + sc->t.blen, 32, "%lld", (long long)v->iv);
    else
        tb_put(&sc->t, v->s, v->len);
    return 0;
}

static inline int
row_out(CallRows *c, Py_ssize_t slot, uint32_t path, int64_t depth, int64_t start,
        int64_t dur, int64_t self, int complete, const paired_t *p)
{
    Py_ssize_t i = c->nrows;
    if (c->values && (strcol_put(&c->c_args, i, 1, p->args, p->alen, NULL) < 0
                      || strcol_put(&c->c_ret, i, 0, NULL, 0, &p->ret) < 0))
        return -1;
    c->nrows++;
    c->c_slot[i] = (int32_t)slot;
    c->c_ts[i] = start;
    c->c_dur[i] = dur;
    c->c_self[i] = self;
    c->c_depth[i] = (int32_t)depth;
    c->c_path[i] = (int32_t)path;
    c->c_complete[i] = (uint8_t)complete;
    c->c_task[i] = task_at(c, slot, start);
    c->incomplete += !complete;
    return 0;
}

/* a marker or an event: a row when it is read, its text in the args column */
static int
cr_event(CallRows *c, Py_ssize_t slot, const record_t *r, const pvalue_t *v)
{
    const char *name, *text;
    Py_ssize_t nlen, tlen;
    int marker = r->type == FNT_TRACE_PRINT;
    PyObject *res = PyObject_CallFunction(c->on_event, "iy#", marker, v->s, v->len);
    if (res == NULL)
        return -1;
    long nid, task;
    int ok = PyArg_ParseTuple(res, "ll", &nid, &task);
    Py_DECREF(res);
    if (!ok)
        return -1;
    if (nid < 0 || nid > INT32_MAX || task > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "CallRows: on_event's ids are out of range");
        return -1;
    }
    if (task >= 0 && switch_add(c, slot, (int64_t)r->ts, (int32_t)task) < 0)
        return -1;
    uint32_t root = trie_path(&c->tr, 0, marker ? MARKER_PATH : EVENT_PATH);
    uint32_t path = root ? trie_path(&c->tr, root, (uint32_t)nid) : 0;
    if (path == 0)
        return -1;
    text_parts(v->s, v->len, &name, &nlen, &text, &tlen);
    pvalue_t t = {0};
    t.has = 1;
    t.kind = PAY_STR;
    t.s = text;
    t.len = tlen;
    pvalue_t none = {0};
    Py_ssize_t i = c->nrows;
    if (c->values && (strcol_put(&c->c_args, i, 0, NULL, 0, &t) < 0
                      || strcol_put(&c->c_ret, i, 0, NULL, 0, &none) < 0))
        return -1;
    c->nrows++;
    c->c_slot[i] = (int32_t)slot;
    c->c_ts[i] = (int64_t)r->ts;
    c->c_dur[i] = 0;
    c->c_self[i] = 0;
    c->c_depth[i] = 0;
    c->c_path[i] = (int32_t)path;
    c->c_complete[i] = 1;
    c->c_task[i] = task_at(c, slot, (int64_t)r->ts);
    return 0;
}

/* a call ended: its row (the caller made room for every open frame and one more); a
 * call made from its return gets its path here, under its caller's */
static int
cr_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    CallRows *c = (CallRows *)ctx;
    uint32_t path = p->path;
    if (!p->entry_seen) {
        call_frame_t *top = pair_top(&c->pr, slot);
        path = trie_path(&c->tr, top ? top->path : 0, p->cid);
        if (path == 0)
            return -1;
    }
    return row_out(c, slot, path, p->depth, p->start, p->end - p->start, p->self, p->complete,
                   p);
}

/* a function tracer hit of function ``cid`` called from ``caller`` (0: not known),
 * with its arguments' text (``v``) */
static int
cr_hit(CallRows *c, Py_ssize_t slot, uint32_t cid, uint32_t caller, int64_t ts,
       const pvalue_t *v)
{
    uint32_t root = trie_path(&c->tr, 0, HIT_PATH);
    uint32_t from = root ? trie_path(&c->tr, root, caller) : 0;
    uint32_t path = from ? trie_path(&c->tr, from, cid) : 0;
    if (path == 0)
        return -1;
    paired_t p = {0};
    if (v->has && v->kind == PAY_STR) {
        p.args = v->s;
        p.alen = v->len;
    }
    return row_out(c, slot, path, 0, ts, 0, 0, 1, &p);
}

/* room for ``more`` rows */
static int
cr_reserve(CallRows *c, Py_ssize_t more)
{
    if (c->nrows + more <= c->caprows)
        return 0;
    Py_ssize_t cap = cap_for(c->nrows + more, c->caprows, 1024);
    if (ARRAY_RESIZE(c->c_slot, cap) < 0 || ARRAY_RESIZE(c->c_depth, cap) < 0
            || ARRAY_RESIZE(c->c_path, cap) < 0 || ARRAY_RESIZE(c->c_task, cap) < 0
            || ARRAY_RESIZE(c->c_ts, cap) < 0 || ARRAY_RESIZE(c->c_dur, cap) < 0
            || ARRAY_RESIZE(c->c_self, cap) < 0 || ARRAY_RESIZE(c->c_complete, cap) < 0)
        return -1;
    if (c->values && (ARRAY_RESIZE(c->c_args.start, cap) < 0
                      || ARRAY_RESIZE(c->c_args.valid, cap) < 0
                      || ARRAY_RESIZE(c->c_ret.start, cap) < 0
                      || ARRAY_RESIZE(c->c_ret.valid, cap) < 0))
        return -1;
    c->caprows = cap;
    return 0;
}

/* a string column's first ``n`` rows as (validity bits, int32 offsets, data); the
 * rest move to the front */
static PyObject *
strcol_take(strcol_t *sc, Py_ssize_t n, Py_ssize_t nrows)
{
    int64_t end = n < nrows ? sc->start[n] : sc->t.blen;
    if (end > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "CallRows: a batch's text is over 2 GiB");
        return NULL;
    }
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    PyObject *offs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *data = PyBytes_FromStringAndSize(sc->t.buf, (Py_ssize_t)end);
    if (bits == NULL || offs == NULL || data == NULL) {
        Py_XDECREF(bits);
        Py_XDECREF(offs);
        Py_XDECREF(data);
        return NULL;
    }
    uint8_t *b = (uint8_t *)PyBytes_AS_STRING(bits);
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offs);
    memset(b, 0, (size_t)(n + 7) / 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        o[i] = (int32_t)sc->start[i];
        if (sc->valid[i])
            b[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    o[n] = (int32_t)end;
    Py_ssize_t rest = nrows - n;
    memmove(sc->t.buf, sc->t.buf + end, (size_t)(sc->t.blen - end));
    sc->t.blen -= (Py_ssize_t)end;
    for (Py_ssize_t i = 0; i < rest; i++) {
        sc->start[i] = sc->start[n + i] - end;
        sc->valid[i] = sc->valid[n + i];
    }
    return Py_BuildValue("(NNN)", bits, offs, data);
}

/* the first ``n`` rows as a batch; the rest move to the front */
static PyObject *
cr_batch(CallRows *c, Py_ssize_t n)
{
    PyObject *args = NULL, *ret = NULL;
    if (c->values) {
        args = strcol_take(&c->c_args, n, c->nrows);
        ret = args == NULL ? NULL : strcol_take(&c->c_ret, n, c->nrows);
        if (ret == NULL) {
            Py_XDECREF(args);
            return NULL;
        }
    }
    PyObject *out = Py_BuildValue(
        "(ny#y#y#y#y#y#y#NNy#)", n,
        (const char *)c->c_slot, n * 4, (const char *)c->c_ts, n * 8,
        (const char *)c->c_dur, n * 8, (const char *)c->c_self, n * 8,
        (const char *)c->c_depth, n * 4, (const char *)c->c_path, n * 4,
        (const char *)c->c_complete, n, args ? args : Py_NewRef(Py_None),
        ret ? ret : Py_NewRef(Py_None), (const char *)c->c_task, n * 4);
    if (out == NULL)
        return NULL;
    Py_ssize_t rest = c->nrows - n;
    if (rest) {
        memmove(c->c_slot, c->c_slot + n, (size_t)rest * 4);
        memmove(c->c_depth, c->c_depth + n, (size_t)rest * 4);
        memmove(c->c_path, c->c_path + n, (size_t)rest * 4);
        memmove(c->c_task, c->c_task + n, (size_t)rest * 4);
        memmove(c->c_ts, c->c_ts + n, (size_t)rest * 8);
        memmove(c->c_dur, c->c_dur + n, (size_t)rest * 8);
        memmove(c->c_self, c->c_self + n, (size_t)rest * 8);
        memmove(c->c_complete, c->c_complete + n, (size_t)rest);
    }
    c->nrows = rest;
    return out;
}

/* Whether the walk takes record ``r`` (calls_hits_ok's rules, looked at as it is
 * read: no pass over the trace first): a time below 2**62; graph entries and returns
 * at depths up to 65536, a return no earlier than its call; hits; markers and events
 * with their text.  A value (``v``, when the walk takes values; an event's always) is
 * UTF-8 text, or a return's int. */
static inline int
cr_takes(const record_t *r, const pvalue_t *v)
{
    if (r->ts >= ((uint64_t)1 << 62))
        return 0;
    switch (r->type) {
    case FNT_TRACE_GRAPH_RET:
        if (r->d > r->ts)
            return 0;
        /* fall through */
    case FNT_TRACE_GRAPH_ENT:
        if (r->b > (1u << 16))
            return 0;
        break;
    case FNT_TRACE_FN:
        break;
    case FNT_TRACE_EVENT:
    case FNT_TRACE_PRINT:
        if (!v->has || v->kind != PAY_STR)
            return 0;
        break;
    default:
        return 0;
    }
    if (!v->has)
        return 1;
    if (v->kind == PAY_STR)
        return utf8_ok((const unsigned char *)v->s, v->len);
    return v->kind == PAY_INT && r->type == FNT_TRACE_GRAPH_RET;
}

/* step() -> (batch or None, need): a batch of ``rows`` rows each time that many have
 * been made (the last one shorter), as (n, slot, ts, dur, self_dur, depth, path,
 * complete, args, retval, task) buffers -- write_parquet's row groups; need: the slot
 * to feed before more (-1: none); (None, -1): done; (None, -2): a record it does not
 * take (cr_takes) was read -- it reads no more, and the rows made since the last
 * batch are the caller's Python twin's to make again */
static PyObject *
cr_step(CallRows *c, PyObject *unused)
{
    Py_ssize_t need = -1;
    if (c->declined)
        return Py_BuildValue("(On)", Py_None, (Py_ssize_t)-2);
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
        if (cr_reserve(c, pair_open(&c->pr) + 1) < 0)
            return NULL;
        Py_ssize_t best = -1;
        record_t r;
        uint32_t id;
        int picked = merge_next(&c->m, &best, &need, &r, &id);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            return Py_BuildValue("(On)", Py_None, need);
        if (picked == 0) {
            if (pair_end(&c->pr, &c->m) < 0)
                return NULL;
            c->done = 1;
            continue;
        }
        if (pair_marks(&c->pr, &c->m, best) < 0)
            return NULL;
        uint32_t cid = id;
        if (canon_lookup(c->canon, &cid) < 0)
            return NULL;
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        int event = r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT;
        pvalue_t v = record_value(&c->m, best, &r, c->values || event);
        if (!cr_takes(&r, &v)) {
            c->declined = 1;
            return Py_BuildValue("(On)", Py_None, (Py_ssize_t)-2);
        }
        if (event) {
            if (c->on_event == NULL) {
                PyErr_SetString(PyExc_ValueError, "CallRows: an event, and no on_event");
                return NULL;
            }
            if (cr_event(c, best, &r, &v) < 0)
                return NULL;
            continue;
        }
        if (r.type == FNT_TRACE_FN) {
            /* (trace_set's ids: the process's base added to the caller too) */
            gslot_t *g = &c->m.slots[best];
            uint32_t caller = r.b ? r.b + g->q[g->head].ibase : 0;
            if (caller && canon_lookup(c->canon, &caller) < 0)
                return NULL;
            if (cr_hit(c, best, cid, caller, ts, &v) < 0)
                return NULL;
            continue;
        }
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (pair_enter_close(&c->pr, best, depth, ts) < 0)
                return NULL;
            call_frame_t *top = pair_top(&c->pr, best);
            uint32_t path = trie_path(&c->tr, top ? top->path : 0, cid);
            if (path == 0 || pair_push(&c->pr, best, id, cid, depth, ts, path) < 0
                    || pair_entry_value(&c->pr, best, &v) < 0)
                return NULL;
        } else if (pair_return_value(&c->pr, best, id, cid, depth, ts, (int64_t)r.d, &v) < 0) {
            return NULL;
        }
    }
}

static PyObject *
cr_feed(CallRows *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (c->declined) {
        PyErr_SetString(PyExc_ValueError, "CallRows: fed after it declined a record");
        return NULL;
    }
    /* payloads the walk cannot index (damage the checksum missed): declined, for the
     * Python twin to say what it makes of them */
    int bad = 0;
    PyObject *r = merge_feed_or_bad(&c->m, args, nargs, &c->lost_fed, &bad);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    if (bad) {
        c->declined = 1;
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
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
    return Py_BuildValue("(LK)", c->lost_fed, (unsigned long long)c->incomplete);
}

/* CallRows(slots, canon, rows, values=False, on_event=None) */
static int
cr_init(CallRows *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, batch;
    PyObject *canon, *on_event = Py_None;
    int values = 0;
    if (!PyArg_ParseTuple(args, "nOn|pO:CallRows", &nslots, &canon, &batch, &values,
                          &on_event))
        return -1;
    c->values = values;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || batch < 1) {
        PyErr_SetString(PyExc_ValueError, "CallRows: bad slots or rows (or made twice)");
        return -1;
    }
    if (callable_arg(on_event, &c->on_event, "CallRows", "on_event") < 0)
        return -1;
    if (c->on_event != NULL) {
        c->sw = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(switches_t));
        if (c->sw == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->nslots = nslots;
    }
    if (canon_arg(canon, &c->canon, "CallRows") < 0)
        return -1;
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->batch = batch;
    return pair_init(&c->pr, nslots, cr_emit, c);
}

static void
cr_dealloc(CallRows *c)
{
    merge_free(&c->m);
    pair_free(&c->pr);
    PyMem_Free(c->c_slot);
    PyMem_Free(c->c_depth);
    PyMem_Free(c->c_path);
    PyMem_Free(c->c_task);
    if (c->sw != NULL) {
        for (Py_ssize_t k = 0; k < c->nslots; k++) {
            PyMem_Free(c->sw[k].ts);
            PyMem_Free(c->sw[k].task);
        }
        PyMem_Free(c->sw);
    }
    Py_XDECREF(c->on_event);
    PyMem_Free(c->c_ts);
    PyMem_Free(c->c_dur);
    PyMem_Free(c->c_self);
    PyMem_Free(c->c_complete);
    for (strcol_t *sc = &c->c_args; sc <= &c->c_ret; sc++) {
        PyMem_Free(sc->t.buf);
        PyMem_Free(sc->start);
        PyMem_Free(sc->valid);
    }
    trie_free(&c->tr);
    Py_XDECREF(c->canon);
    read_free((PyObject *)c);
}

static PyMethodDef cr_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))cr_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase[, payloads]]) -> bool: a slot's next block, or that "
     "it has no more; False: payloads it cannot read (the walk stops)"},
    {"step", (PyCFunction)cr_step, METH_NOARGS,
     "step() -> (batch or None, need): a batch of rows, and the slot to feed (-1: none; "
     "-2: a record it does not take was read)"},
    {"paths", (PyCFunction)cr_paths, METH_O,
     "paths(first) -> [(parent, id)]: the call paths from path ``first`` on"},
    {"counts", (PyCFunction)cr_counts, METH_NOARGS,
     "counts() -> (lost events, incomplete calls)"},
    {NULL}
};

READ_TYPE(cr, CallRows,
          "CallRows(slots, canon, rows): the Parquet table's calls of a trace file, in "
          "column batches (output/parquet.py's twin)");
