/*
 * RecordFilter is the native twin of output/filters.py's filter_entries on the records
 * of a trace file: -F/-N by function, the --from/--to window, -D and --thresh, applied
 * to each block of a thread slot before a walk is fed it, so that report and stat with
 * those filters stay on the native reading path.
 *
 *     a slot's block  --filter(slot, records, base)-->  the records that pass, a -F
 *                         per-slot [match depth,        match's callees moved up to
 *                                   hidden depth]       depth 0 as _graph_select does
 *
 * The filter keeps per slot what filter_entries keeps per slot; what it keeps across
 * slots -- the trace's first time, which relative bounds count from -- the caller
 * works out first and gives as the window's bounds in ns.  A function's -F/-N answer
 * is read from ``flags`` (1: -F matches it, 2: -N does), indexed by symbol id plus the
 * block's id base (a trace of several processes); an id past its end makes ``filter``
 * return that id, before anything is changed, for the caller to grow the table.
 * Loss markers are not records: where they go with some records left out is the
 * Python filter's (the caller leaves traces with losses to it).
 */

typedef struct {
    PyObject_HEAD
    uint8_t *flags;
    Py_ssize_t nflags;
    int functions, notrace, graph;
    int has_lo, has_hi, none;   /* none: the window ends before anything */
    uint64_t lo, hi;
    uint32_t max_depth;
    uint64_t thresh;
    int32_t *st;                /* per slot: match depth, hidden depth (-1: none) */
    Py_ssize_t nslots;
} RecordFilter;

#define RF_MATCH 1
#define RF_NOTRACE 2

static int
rf_set_flags(RecordFilter *f, PyObject *flags)
{
    Py_buffer view;
    if (PyObject_GetBuffer(flags, &view, PyBUF_SIMPLE) < 0)
        return -1;
    uint8_t *copy = PyMem_Malloc(view.len ? view.len : 1);
    if (copy == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(copy, view.buf, view.len);
    PyMem_Free(f->flags);
    f->flags = copy;
    f->nflags = view.len;
    PyBuffer_Release(&view);
    return 0;
}

/* RecordFilter(nslots, flags, functions, notrace, graph, lo, hi, none, max_depth,
 * thresh): the window [lo, hi] in ns (hi None: open), none: it holds no time (the
 * caller clamps the bounds to 64 bits) */
static int
rf_init(RecordFilter *f, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots;
    PyObject *flags, *hi;
    int functions, notrace, graph, none;
    unsigned int max_depth;
    unsigned long long lo, thresh;
    if (!PyArg_ParseTuple(args, "nOpppKOpIK", &nslots, &flags, &functions, &notrace, &graph,
                          &lo, &hi, &none, &max_depth, &thresh))
        return -1;
    if (nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "RecordFilter: bad number of slots");
        return -1;
    }
    if (hi != Py_None) {
        f->hi = PyLong_AsUnsignedLongLong(hi);
        if (f->hi == (uint64_t)-1 && PyErr_Occurred())
            return -1;
    }
    if (rf_set_flags(f, flags) < 0)
        return -1;
    f->functions = functions;
    f->notrace = notrace;
    f->graph = graph;
    f->max_depth = max_depth;
    f->thresh = thresh;
    f->lo = lo;
    f->has_lo = lo > 0;
    f->has_hi = hi != Py_None;
    f->none = none;
    PyMem_Free(f->st);
    f->st = PyMem_Malloc(sizeof(int32_t) * 2 * (nslots ? nslots : 1));
    if (f->st == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < 2 * nslots; i++)
        f->st[i] = -1;
    f->nslots = nslots;
    return 0;
}

static void
rf_dealloc(RecordFilter *f)
{
    PyMem_Free(f->flags);
    PyMem_Free(f->st);
    read_free((PyObject *)f);
}

/* _graph_select on one record: 0 to leave it out, else 1 with *depth the depth to
 * show it at */
static int
rf_graph_select(RecordFilter *f, int32_t *st, const record_t *r, uint8_t fl, int64_t *depth)
{
    int32_t match_d = st[0], hide_d = st[1];
    int64_t d = r->b;
    if (r->type == FNT_TRACE_GRAPH_ENT) {
        /* an entry at or above an open call's depth: that call's return was lost */
        if (hide_d >= 0 && d <= hide_d)
            hide_d = st[1] = -1;
        if (match_d >= 0 && d <= match_d)
            match_d = st[0] = -1;
        if (hide_d >= 0)
            return 0;
        if (f->notrace && fl & RF_NOTRACE) {
            st[1] = (int32_t)d;
            return 0;
        }
        if (!f->functions) {
            *depth = d;
            return 1;
        }
        if (match_d < 0) {
            if (!(fl & RF_MATCH))
                return 0;
            match_d = st[0] = (int32_t)d;
        }
        *depth = d - match_d;
        return 1;
    }
    if (r->type == FNT_TRACE_GRAPH_RET) {
        if (hide_d >= 0) {
            if (d >= hide_d) {
                if (d == hide_d)
                    st[1] = -1;
                return 0;
            }
            hide_d = st[1] = -1;        /* the hidden call's return was lost */
        }
        if (f->notrace && fl & RF_NOTRACE)
            return 0;                   /* a hidden call whose entry was not read */
        if (!f->functions) {
            *depth = d;
            return 1;
        }
        if (match_d >= 0 && d < match_d)
            match_d = st[0] = -1;       /* the matched call's return was lost */
        if (match_d < 0) {
            if (!(fl & RF_MATCH))
                return 0;
            *depth = 0;                 /* a matching call whose entry was not read */
            return 1;
        }
        if (d == match_d)
            st[0] = -1;
        *depth = d - match_d;
        return 1;
    }
    /* events, markers, stacks: shown when the call they happen in is */
    if (hide_d >= 0)
        return 0;
    if (f->functions && match_d < 0)
        return 0;
    *depth = d;
    return 1;
}

static void
put_uvarint(unsigned char **o, uint64_t v)
{
    while (v >= 0x80) {
        *(*o)++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *(*o)++ = (unsigned char)v;
}

/* filter(slot, records, base[, payloads]) -> bytes: the records of that slot's block
 * that pass (with ``payloads``, the block's in the file's encoding: a pair, the
 * records and their payloads numbered anew); or an int, a symbol id (base added) past
 * the flags table: nothing was changed */
static PyObject *
rf_filter(RecordFilter *f, PyObject *args)
{
    Py_ssize_t slot;
    Py_buffer view;
    unsigned long long base;
    PyObject *pay = NULL;
    if (!PyArg_ParseTuple(args, "ny*K|S", &slot, &view, &base, &pay))
        return NULL;
    if (slot < 0 || slot >= f->nslots || view.len % FNT_RECORD_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "RecordFilter.filter: bad slot or block");
        return NULL;
    }
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    const unsigned char *in = view.buf;
    int by_function = f->functions || f->notrace;
    if (by_function) {
        for (Py_ssize_t i = 0; i < n; i++) {
            record_t r;
            memcpy(&r, in + i * FNT_RECORD_SIZE, sizeof(r));
            uint64_t id = (uint64_t)r.a + base;
            if ((r.type == FNT_TRACE_FN || r.type == FNT_TRACE_GRAPH_ENT
                 || r.type == FNT_TRACE_GRAPH_RET) && id >= (uint64_t)f->nflags) {
                PyBuffer_Release(&view);
                return PyLong_FromUnsignedLongLong(id);
            }
        }
    }
    int32_t *poff = NULL;
    PyObject *pout = NULL;
    unsigned char *po = NULL;
    const unsigned char *pin = NULL;
    Py_ssize_t psize = 0;
    int64_t last_kept = -1;
    if (pay != NULL && PyBytes_GET_SIZE(pay)) {
        pin = (const unsigned char *)PyBytes_AS_STRING(pay);
        psize = PyBytes_GET_SIZE(pay);
        poff = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (poff == NULL) {
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        if (pay_index(pin, psize, n, poff) < 0) {
            PyMem_Free(poff);
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "RecordFilter.filter: bad payloads");
            return NULL;
        }
        /* the kept entries, kind and value as they were, each after a new gap: the
         * gaps' varints may be longer than the old ones (those counted from an entry
         * left out), by 10 bytes at most each */
        Py_ssize_t entries = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            entries += poff[i] >= 0;
        pout = PyBytes_FromStringAndSize(NULL, psize + 10 * entries);
        if (pout == NULL) {
            PyMem_Free(poff);
            PyBuffer_Release(&view);
            return NULL;
        }
        po = (unsigned char *)PyBytes_AS_STRING(pout);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, view.len);
    if (out == NULL) {
        PyMem_Free(poff);
        Py_XDECREF(pout);
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t kept = 0;
    int32_t *st = f->st + 2 * slot;
    for (Py_ssize_t i = 0; i < n && !f->none; i++) {
        record_t r;
        memcpy(&r, in + i * FNT_RECORD_SIZE, sizeof(r));
        if (f->has_hi && r.ts > f->hi)
            break;                      /* a slot's records are in time order */
        int64_t depth = r.b;
        int graph_rec = r.type == FNT_TRACE_GRAPH_ENT || r.type == FNT_TRACE_GRAPH_RET;
        if (by_function) {
            uint8_t fl = 0;
            if (r.type == FNT_TRACE_FN || graph_rec)
                fl = f->flags[(uint64_t)r.a + base];
            if (r.type == FNT_TRACE_FN) {
                if (f->notrace && fl & RF_NOTRACE)
                    continue;
                if (f->functions && !(fl & RF_MATCH))
                    continue;
            }
            else if (f->graph && !rf_graph_select(f, st, &r, fl, &depth))
                continue;
        }
        if (f->has_lo && r.ts < f->lo)
            continue;
        if (f->graph && graph_rec) {
            if (f->max_depth && depth >= (int64_t)f->max_depth)
                continue;
            if (f->thresh && (r.type == FNT_TRACE_GRAPH_ENT
                              || (uint64_t)(r.ts - r.d) < f->thresh))
                continue;
        }
        r.b = (unsigned int)depth;
        memcpy(o + kept * FNT_RECORD_SIZE, &r, sizeof(r));
        if (poff != NULL && poff[i] >= 0) {
            /* its payload entry: the new gap, then kind and value as they were */
            Py_ssize_t at = poff[i], end = at + 1;
            uint64_t v;
            get_uvarint(pin, psize, &end, &v);
            if (pin[at] != PAY_INT)
                end += (Py_ssize_t)v;
            put_uvarint(&po, (uint64_t)(kept - last_kept - 1));
            memcpy(po, pin + at, (size_t)(end - at));
            po += end - at;
            last_kept = kept;
        }
        kept++;
    }
    PyBuffer_Release(&view);
    PyMem_Free(poff);
    if (kept < n && _PyBytes_Resize(&out, kept * FNT_RECORD_SIZE) < 0) {
        Py_XDECREF(pout);
        return NULL;
    }
    if (pay == NULL)
        return out;
    if (pout == NULL)
        return Py_BuildValue("(NO)", out, pay);         /* an empty one */
    if (_PyBytes_Resize(&pout, po - (unsigned char *)PyBytes_AS_STRING(pout)) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return Py_BuildValue("(NN)", out, pout);
}

/* grow(flags): a longer flags table (ids the last one did not reach) */
static PyObject *
rf_grow(RecordFilter *f, PyObject *flags)
{
    if (rf_set_flags(f, flags) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef rf_methods[] = {
    {"filter", (PyCFunction)rf_filter, METH_VARARGS,
     "filter(slot, records, base[, payloads]) -> bytes | (bytes, bytes) | int: the "
     "records that pass (and their payloads), or an id past the flags table"},
    {"grow", (PyCFunction)rf_grow, METH_O, "grow(flags): a longer flags table"},
    {NULL}
};

READ_TYPE(rf, RecordFilter,
          "RecordFilter(nslots, flags, functions, notrace, graph, lo, hi, none, max_depth, "
          "thresh): filter_entries on a trace file's record blocks");
