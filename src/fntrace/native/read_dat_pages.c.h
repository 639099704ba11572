/* -- DatPages: trace-cmd's ring-buffer pages -----------------------------------------
 *
 * The native twin of output/trace_dat.py's _CpuBuffer fed by the exporter's loop, for
 * the function tracer's and function_graph's records: each slot's events as the
 * kernel's writer packs them into 4 kB pages (rb_reserve_next_event: the time since
 * the previous event in 27 bits, a time extend when it does not fit, a new page when
 * the event does not), a page after a loss flagged RB_MISSED_EVENTS with the count
 * when there is room.  A slot's pages depend on its own records only, so slots are
 * walked one after another.  The page layout's numbers come from trace_dat.py.
 *
 * Markers, events and stack traces (an asyncio program's task switches): with
 * ``on_event`` and the blocks' payloads, each such record's payload is what
 * ``on_event(slot, type, text, pid)`` makes of its text (the exporter's own code, which
 * declines, with None, what depends on the order of the slots: see _native_pages).
 */

typedef struct {
    unsigned char *data;    /* the page being filled, PAGE_DATA bytes */
    Py_ssize_t len;
    uint64_t page_ts, last_ts;
    int has_lost;
    long long lost;
    long long pid;
} dslot_t;

typedef struct {
    PyObject_HEAD
    dslot_t *slots;
    Py_ssize_t nslots;
    PyObject *addrs;        /* id -> address */
    PyObject *used;         /* set of the ids written */
    Py_ssize_t page_size, page_header, page_data, max_small;
    int ts_shift;
    uint64_t ts_mask;
    uint32_t time_extend;
    uint64_t missed_events, missed_stored;
    tbuf_t out;             /* the pages this call completed */
    int unsure;
    PyObject *on_event;     /* NULL: markers and events are Python's to write */
} DatPages;

static int
dp_flush(DatPages *d, dslot_t *s)
{
    if (s->len == 0)
        return 0;
    if (tb_reserve(&d->out, d->page_size) < 0)
        return -1;
    unsigned char *p = (unsigned char *)d->out.buf + d->out.blen;
    uint64_t commit = (uint64_t)s->len;
    uint64_t flags = 0;
    int tail = 0;
    if (s->has_lost) {
        flags |= d->missed_events;
        if (s->lost > 0 && s->len + 8 <= d->page_data) {
            flags |= d->missed_stored;
            tail = 1;
        }
        s->has_lost = 0;
    }
    uint64_t v = commit | flags;
    memcpy(p, &s->page_ts, 8);
    memcpy(p + 8, &v, 8);
    memcpy(p + d->page_header, s->data, (size_t)s->len);
    Py_ssize_t used = d->page_header + s->len;
    if (tail) {
        uint64_t lost = (uint64_t)s->lost;
        memcpy(p + used, &lost, 8);
        used += 8;
    }
    memset(p + used, 0, (size_t)(d->page_size - used));
    d->out.blen += d->page_size;
    s->len = 0;
    return 0;
}

static inline void
dp_u32(dslot_t *s, uint32_t v)
{
    memcpy(s->data + s->len, &v, 4);
    s->len += 4;
}

/* what a function's and a graph record's payloads start with: the trace_entry (type
 * id, flags and preempt count 0, pid), then the function's address */
static inline void
dp_entry(unsigned char *pl, uint16_t id, int32_t pid, uint64_t ip)
{
    memcpy(pl, &id, 2);
    pl[2] = pl[3] = 0;
    memcpy(pl + 4, &pid, 4);
    memcpy(pl + 8, &ip, 8);
}

/* _CpuBuffer.add */
static int
dp_add(DatPages *d, dslot_t *s, uint64_t ts, const unsigned char *payload, Py_ssize_t n)
{
    if (s->len && n <= d->max_small) {
        int64_t delta = (int64_t)(ts - s->last_ts);
        if (ts >= s->last_ts && (uint64_t)delta <= d->ts_mask
                && s->len + n + 4 <= d->page_data) {
            dp_u32(s, (uint32_t)((uint64_t)(n >> 2) | (uint64_t)delta << 5));
            memcpy(s->data + s->len, payload, (size_t)n);
            s->len += n;
            s->last_ts = ts;
            return 0;
        }
    }
    /* _add: a payload above RB_MAX_SMALL_DATA has its length in array[0] (type_len 0) */
    int big = n > d->max_small;
    Py_ssize_t size = 4 + n + (big ? 4 : 0);
    if (size > d->page_data) {
        d->unsure = 1;              /* the Python writer refuses it */
        return 0;
    }
    if (s->len == 0)
        s->page_ts = s->last_ts = ts;
    uint64_t delta = ts >= s->last_ts ? ts - s->last_ts : 0;
    int extend = delta > d->ts_mask;
    if (s->len + size + (extend ? 8 : 0) > d->page_data) {
        if (dp_flush(d, s) < 0)
            return -1;
        s->page_ts = s->last_ts = ts;
        delta = 0;
        extend = 0;
    }
    if (extend) {
        if (delta >> d->ts_shift > 0xffffffffULL) {
            d->unsure = 1;          /* the Python writer cannot pack it either */
            return 0;
        }
        dp_u32(s, d->time_extend | (uint32_t)((delta & d->ts_mask) << 5));
        dp_u32(s, (uint32_t)(delta >> d->ts_shift));
        delta = 0;
    }
    dp_u32(s, (uint32_t)((uint64_t)(big ? 0 : n >> 2) | delta << 5));
    if (big)
        dp_u32(s, (uint32_t)(n + 4));
    memcpy(s->data + s->len, payload, (size_t)n);
    s->len += n;
    s->last_ts = ts;
    return 0;
}

/* a marker's, an event's or a stack trace's payload, made by on_event from record
 * ``i``'s text (b's payloads), added at its time */
static int
dp_event(DatPages *d, dslot_t *s, const gblock_t *b, Py_ssize_t i, const record_t *r)
{
    int kind;
    const char *text = NULL;
    Py_ssize_t len = 0;
    int64_t iv;
    if (d->on_event == NULL || b->pay == NULL || !pay_get(b, i, r, &kind, &text, &len, &iv)
            || kind != PAY_STR) {
        d->unsure = 1;
        return 0;
    }
    PyObject *res = PyObject_CallFunction(d->on_event, "niy#L", (Py_ssize_t)(s - d->slots),
                                          (int)r->type, text, len, (long long)s->pid);
    if (res == NULL)
        return -1;
    if (res == Py_None) {
        Py_DECREF(res);
        d->unsure = 1;
        return 0;
    }
    if (!PyBytes_Check(res) || PyBytes_GET_SIZE(res) % 4) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_TypeError, "DatPages: on_event makes bytes of whole words");
        return -1;
    }
    int err = dp_add(d, s, r->ts, (const unsigned char *)PyBytes_AS_STRING(res),
                     PyBytes_GET_SIZE(res));
    Py_DECREF(res);
    return err;
}

static int
dp_addr(DatPages *d, uint32_t id, uint64_t *addr)
{
    PyObject *k = PyLong_FromUnsignedLong(id);
    if (k == NULL)
        return -1;
    PyObject *v = PyDict_GetItemWithError(d->addrs, k);
    if (v == NULL) {
        Py_DECREF(k);
        if (PyErr_Occurred())
            return -1;
        d->unsure = 1;              /* a name with no symbol: a fresh address, Python's */
        return 0;
    }
    int r = PySet_Add(d->used, k);
    Py_DECREF(k);
    if (r < 0)
        return -1;
    *addr = PyLong_AsUnsignedLongLong(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int
dp_slot(DatPages *d, Py_ssize_t cpu, dslot_t **out)
{
    if (cpu < 0 || cpu >= d->nslots) {
        PyErr_SetString(PyExc_ValueError, "DatPages: not a slot of this trace");
        return -1;
    }
    dslot_t *s = &d->slots[cpu];
    if (s->data == NULL) {
        s->data = PyMem_Malloc((size_t)d->page_data + 16);
        if (s->data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    *out = s;
    return 0;
}

static PyObject *
dp_result(DatPages *d)
{
    if (d->unsure)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(d->out.buf, d->out.blen);
}

/* feed(cpu, lost, records, ibase[, payloads]) -> the pages completed (bytes), None:
 * the trace holds what the Python exporter writes (any other record, a name with no
 * symbol) */
static PyObject *
dp_feed(DatPages *d, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "feed(cpu, lost, records, ibase[, payloads])");
        return NULL;
    }
    Py_ssize_t cpu = PyLong_AsSsize_t(args[0]);
    long long lost = PyLong_AsLongLong(args[1]);
    unsigned long ibase = PyLong_AsUnsignedLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    dslot_t *s;
    if (dp_slot(d, cpu, &s) < 0)
        return NULL;
    d->out.blen = 0;
    if (d->unsure)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    gblock_t b = {0};       /* the block's records and payloads' index (see below) */
    if (lost) {
        /* mark_lost */
        if (dp_flush(d, s) < 0)
            goto error;
        if (lost > 0)
            s->lost = (s->has_lost ? s->lost : 0) + lost;
        else if (!s->has_lost)
            s->lost = -1;
        s->has_lost = 1;
    }
    const record_t *rec = view.buf;
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    /* the payloads' index, for the markers' and events' texts */
    b.rec = rec;
    b.n = n;
    if (nargs == 5 && PyBytes_Check(args[4]) && PyBytes_GET_SIZE(args[4])) {
        b.poff = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (b.poff == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        b.pay = args[4];
        if (pay_index((const unsigned char *)PyBytes_AS_STRING(args[4]),
                      PyBytes_GET_SIZE(args[4]), n, b.poff) < 0) {
            d->unsure = 1;
            b.pay = NULL;
        }
    }
    for (Py_ssize_t i = 0; i < n && !d->unsure; i++) {
        record_t r;
        memcpy(&r, &rec[i], sizeof(r));
        unsigned char pl[40];
        Py_ssize_t len;
        int32_t pid = (int32_t)s->pid;
        uint64_t ip = 0, parent = 0;
        if (r.type == FNT_TRACE_FN) {
            if (dp_addr(d, r.a + (uint32_t)ibase, &ip) < 0)
                goto error;
            if (r.b && dp_addr(d, r.b + (uint32_t)ibase, &parent) < 0)
                goto error;
            dp_entry(pl, 1, pid, ip);
            memcpy(pl + 16, &parent, 8);
            len = 24;
        } else if (r.type == FNT_TRACE_GRAPH_ENT || r.type == FNT_TRACE_GRAPH_RET) {
            if (r.b > INT32_MAX) {
                d->unsure = 1;
                break;
            }
            if (dp_addr(d, r.a ? r.a + (uint32_t)ibase : 0, &ip) < 0)
                goto error;
            int32_t depth = (int32_t)r.b;
            dp_entry(pl, r.type == FNT_TRACE_GRAPH_ENT ? 11 : 10, pid, ip);
            memcpy(pl + 16, &depth, 4);
            len = 20;
            if (r.type == FNT_TRACE_GRAPH_RET) {
                uint32_t overrun = r.c;
                uint64_t calltime = r.d, rettime = r.ts;
                memcpy(pl + 20, &overrun, 4);
                memcpy(pl + 24, &calltime, 8);
                memcpy(pl + 32, &rettime, 8);
                len = 40;
            }
        } else if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT
                   || r.type == FNT_TRACE_STACK) {
            if (dp_event(d, s, &b, i, &r) < 0)
                goto error;
            continue;
        } else {
            d->unsure = 1;
            break;
        }
        if (!d->unsure && dp_add(d, s, r.ts, pl, len) < 0)
            goto error;
    }
    PyMem_Free(b.poff);
    PyBuffer_Release(&view);
    return dp_result(d);
error:
    PyMem_Free(b.poff);
    PyBuffer_Release(&view);
    return NULL;
}

/* flush(cpu) -> the slot's last page (b"" when it has none) */
static PyObject *
dp_flush_slot(DatPages *d, PyObject *arg)
{
    Py_ssize_t cpu = PyLong_AsSsize_t(arg);
    if (cpu == -1 && PyErr_Occurred())
        return NULL;
    dslot_t *s;
    if (dp_slot(d, cpu, &s) < 0)
        return NULL;
    d->out.blen = 0;
    if (dp_flush(d, s) < 0)
        return NULL;
    return dp_result(d);
}

/* DatPages(slots, addrs, pids, layout, on_event=None): addrs id -> address, pids slot ->
 * common_pid, layout (PAGE_SIZE, PAGE_HEADER, TS_SHIFT, RINGBUF_TYPE_TIME_EXTEND,
 * RB_MAX_SMALL_DATA, RB_MISSED_EVENTS, RB_MISSED_STORED) */
static int
dp_init(DatPages *d, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, page_size, page_header, max_small;
    int ts_shift;
    unsigned int time_extend;
    unsigned long long missed_events, missed_stored;
    PyObject *addrs, *pids, *on_event = Py_None;
    if (!PyArg_ParseTuple(args, "nO!O!(nniInKK)|O:DatPages", &nslots, &PyDict_Type, &addrs,
                          &PyDict_Type, &pids, &page_size, &page_header, &ts_shift,
                          &time_extend, &max_small, &missed_events, &missed_stored,
                          &on_event))
        return -1;
    if (callable_arg(on_event, &d->on_event, "DatPages", "on_event") < 0)
        return -1;
    if (d->slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || page_size <= page_header + 64
            || ts_shift < 1 || ts_shift > 32) {
        PyErr_SetString(PyExc_ValueError, "DatPages: bad arguments (or made twice)");
        return -1;
    }
    d->slots = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(dslot_t));
    d->used = PySet_New(NULL);
    if (d->slots == NULL || d->used == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->nslots = nslots;
    d->addrs = Py_NewRef(addrs);
    d->page_size = page_size;
    d->page_header = page_header;
    d->page_data = page_size - page_header;
    d->max_small = max_small;
    d->ts_shift = ts_shift;
    d->ts_mask = ((uint64_t)1 << ts_shift) - 1;
    d->time_extend = time_extend;
    d->missed_events = missed_events;
    d->missed_stored = missed_stored;
    for (Py_ssize_t k = 0; k < nslots; k++) {
        PyObject *key = PyLong_FromSsize_t(k);
        if (key == NULL)
            return -1;
        PyObject *v = PyDict_GetItemWithError(pids, key);
        Py_DECREF(key);
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        long long pid = PyLong_AsLongLong(v);
        if (pid == -1 && PyErr_Occurred())
            return -1;
        if (pid < INT32_MIN || pid > INT32_MAX)
            d->unsure = 1;
        d->slots[k].pid = pid;
    }
    return 0;
}

static PyObject *
dp_used(DatPages *d, void *closure)
{
    return Py_NewRef(d->used);
}

static void
dp_dealloc(DatPages *d)
{
    for (Py_ssize_t k = 0; k < d->nslots; k++)
        PyMem_Free(d->slots[k].data);
    PyMem_Free(d->slots);
    PyMem_Free(d->out.buf);
    Py_XDECREF(d->addrs);
    Py_XDECREF(d->used);
    Py_XDECREF(d->on_event);
    read_free((PyObject *)d);
}

static PyMethodDef dp_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))dp_feed, METH_FASTCALL,
     "feed(cpu, lost, records, ibase[, payloads]) -> the pages completed, or None "
     "(Python's to write)"},
    {"flush", (PyCFunction)dp_flush_slot, METH_O,
     "flush(cpu) -> the slot's last page, b'' if none (None: Python's to write)"},
    {NULL}
};

static PyGetSetDef dp_getset[] = {
    {"used", (getter)dp_used, NULL, "the symbol ids written", NULL},
    {NULL}
};

READ_TYPE_GETSET(dp, DatPages,
                 "DatPages(slots, addrs, pids, layout): trace-cmd's ring-buffer pages of a "
                 "trace file's calls and hits (output/trace_dat.py's twin)");
