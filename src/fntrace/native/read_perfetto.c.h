/* -- PerfettoCalls: the Perfetto trace's calls ----------------------------------------
 *
 * The native twin of output/perfetto.py's loop for a trace of calls (the blocks text_ok
 * accepts), after the Python side has written the sequence's first packets (the clock,
 * the process and thread tracks): the records merged by time as GraphText merges them,
 * each slot's calls paired as CallBuilder pairs them (read_pair.c.h), losses included
 * (what is open is closed at the slot's last time, a return after the gap starts no
 * earlier than it),
 * each call a TYPE_SLICE_BEGIN packet at its entry and a TYPE_SLICE_END at its end, a
 * loss a "lost events" instant at the slot's next record; names interned as the Python
 * writer interns them, timestamps as deltas on the sequence's incremental clock.
 *
 * The packets are written as the protobuf runtime serializes the same messages (fields
 * in field-number order), each as one ``packet`` field of a Trace message:
 *
 *     0a LEN TracePacket
 *        40 timestamp          (delta; absolute when earlier than the last packet)
 *        50 01                 trusted_packet_sequence_id = 1
 *        5a LEN TrackEvent
 *               22 LEN DebugAnnotation  (08 name_iid, then 10 bool | 20 int | 32 string)
 *               48 type                 (1 begin, 2 end, 3 instant)
 *               50 name_iid
 *               58 track_uuid
 *        62 LEN InternedData   (12 LEN EventName | 1a LEN DebugAnnotationName: 08 iid
 *                               12 LEN name), the names this packet uses first
 *        68 02                 sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE (interned
 *                              names used)
 *        d0 03 clock_id        timestamp_clock_id (an absolute timestamp)
 */

#define PF_BEGIN 1
#define PF_END 2
#define PF_INSTANT 3
/* the annotations a call or a loss may carry (their names: pf_ann_names) */
#define PF_ANN_ENTRY_LOST 0
#define PF_ANN_UNFINISHED 1
#define PF_ANN_LOST 2

typedef struct {
    int64_t last_any;       /* the exporter's last_ts[cpu] */
    int has_any;
    uint64_t uuid;          /* the thread's track */
} pslot_t;

/* cid -> iid (open addressing; 0: free) */
typedef struct {
    uint32_t *key, *val;
    Py_ssize_t cap, n;
} iidmap_t;

typedef struct {
    PyObject_HEAD
    merge_t m;
    pair_t pr;
    pslot_t *ps;
    names_t names;
    PyObject *canon;
    iidmap_t iids;
    uint32_t next_name_iid, next_ann_iid;
    uint32_t lost_iid;                  /* "lost events" */
    uint32_t ann_iid[3];                /* entry_lost, unfinished, lost */
    int64_t last;                       /* the last packet's time on the incremental clock */
    int incremental;                    /* 0: no clock: absolute timestamps, no clock id */
    uint32_t clock_id;
    int64_t first_ts;                   /* where a slot nothing was read from shows its loss */
    long long unknown_mark;
    tbuf_t t;
    int done;
    long long lost_total;               /* counted losses shown */
    int unknown_loss;
    long long lost_fed;
} PerfettoCalls;

static const char *const pf_ann_names[3] = {"entry_lost", "unfinished", "lost"};

static inline Py_ssize_t
pb_varint(uint8_t *p, uint64_t v)
{
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static int
iid_get(PerfettoCalls *c, uint32_t cid, uint32_t *iid)
{
    iidmap_t *m = &c->iids;
    if ((m->n + 1) * 2 > m->cap) {
        Py_ssize_t cap = m->cap ? m->cap * 2 : 256;
        uint32_t *k = PyMem_Calloc((size_t)cap, sizeof(uint32_t));
        uint32_t *v = PyMem_Calloc((size_t)cap, sizeof(uint32_t));
        if (k == NULL || v == NULL) {
            PyMem_Free(k);
            PyMem_Free(v);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < m->cap; i++)
            if (m->val[i]) {
                Py_ssize_t h = (Py_ssize_t)(mix(m->key[i]) & (uint64_t)(cap - 1));
                while (v[h])
                    h = (h + 1) & (cap - 1);
                k[h] = m->key[i];
                v[h] = m->val[i];
            }
        PyMem_Free(m->key);
        PyMem_Free(m->val);
        m->key = k;
        m->val = v;
        m->cap = cap;
    }
    Py_ssize_t h = (Py_ssize_t)(mix(cid) & (uint64_t)(m->cap - 1));
    while (m->val[h]) {
        if (m->key[h] == cid) {
            *iid = m->val[h];
            return 0;
        }
        h = (h + 1) & (m->cap - 1);
    }
    *iid = 0;       /* new: the caller defines it */
    m->key[h] = cid;
    m->val[h] = ++c->next_name_iid;
    m->n++;
    return 0;
}

/* One packet.  name: the event's name (its id, or the lost events name when lost_name),
 * none for an end; ann: one of PF_ANN_* or -1; aval/astr: its value (an int; a string
 * when astr) */
static int
pf_packet(PerfettoCalls *c, int type, int64_t ts, uint64_t uuid, int has_name, uint32_t id,
          uint32_t cid, int lost_name, int ann, long long aval, const char *astr)
{
    uint8_t te[128], da[64], in[64];
    Py_ssize_t nte = 0, nda = 0, nin = 0;
    const char *name = NULL;
    Py_ssize_t name_len = 0;
    char tmp[24];
    uint32_t name_iid = 0, new_name = 0;
    if (has_name) {
        if (lost_name) {
            if (!c->lost_iid) {
                c->lost_iid = ++c->next_name_iid;
                new_name = 1;
                name = "lost events";
                name_len = 11;
            }
            name_iid = c->lost_iid;
        } else {
            if (iid_get(c, cid, &name_iid) < 0)
                return -1;
            if (!name_iid) {
                new_name = 1;
                name_iid = c->next_name_iid;
                name = names_get(&c->names, id, &name_len, tmp, "0x%x");
            }
        }
    }
    uint32_t ann_iid = 0, new_ann = 0;
    if (ann >= 0) {
        if (!c->ann_iid[ann]) {
            c->ann_iid[ann] = ++c->next_ann_iid;
            new_ann = 1;
        }
        ann_iid = c->ann_iid[ann];
        da[nda++] = 0x08;
        nda += pb_varint(da + nda, ann_iid);
        if (astr != NULL) {
            Py_ssize_t sl = (Py_ssize_t)strlen(astr);
            da[nda++] = 0x32;
            nda += pb_varint(da + nda, (uint64_t)sl);
            memcpy(da + nda, astr, (size_t)sl);
            nda += sl;
        } else if (ann == PF_ANN_LOST) {
            da[nda++] = 0x20;
            nda += pb_varint(da + nda, (uint64_t)aval);
        } else {
            da[nda++] = 0x10;
            da[nda++] = 0x01;
        }
        te[nte++] = 0x22;
        nte += pb_varint(te + nte, (uint64_t)nda);
        memcpy(te + nte, da, (size_t)nda);
        nte += nda;
    }
    te[nte++] = 0x48;
    te[nte++] = (uint8_t)type;
    if (has_name) {
        te[nte++] = 0x50;
        nte += pb_varint(te + nte, name_iid);
    }
    te[nte++] = 0x58;
    nte += pb_varint(te + nte, uuid);
    /* interned data: the event name (field 2) before the annotation name (field 3);
     * a name's bytes go straight to the output, so only the heads are made here */
    uint8_t nhead[24];
    Py_ssize_t nnh = 0, ename_len = 0;
    if (new_name) {
        uint8_t body[16];
        Py_ssize_t nb = 0;
        body[nb++] = 0x08;
        nb += pb_varint(body + nb, name_iid);
        body[nb++] = 0x12;
        nb += pb_varint(body + nb, (uint64_t)name_len);
        ename_len = nb + name_len;
        nhead[nnh++] = 0x12;
        nnh += pb_varint(nhead + nnh, (uint64_t)ename_len);
        memcpy(nhead + nnh, body, (size_t)nb);
        nnh += nb;
    }
    if (new_ann) {
        const char *an = pf_ann_names[ann];
        Py_ssize_t al = (Py_ssize_t)strlen(an);
        uint8_t body[40];
        Py_ssize_t nb = 0;
        body[nb++] = 0x08;
        nb += pb_varint(body + nb, ann_iid);
        body[nb++] = 0x12;
        nb += pb_varint(body + nb, (uint64_t)al);
        memcpy(body + nb, an, (size_t)al);
        nb += al;
        in[nin++] = 0x1a;
        nin += pb_varint(in + nin, (uint64_t)nb);
        memcpy(in + nin, body, (size_t)nb);
        nin += nb;
    }
    Py_ssize_t interned = (new_name ? nnh + name_len : 0) + nin;
    /* the timestamp */
    uint64_t tsv;
    int absolute = 0;
    if (ts < 0)
        ts = 0;
    if (!c->incremental)
        tsv = (uint64_t)ts;
    else if (ts >= c->last) {
        tsv = (uint64_t)(ts - c->last);
        c->last = ts;
    } else {
        tsv = (uint64_t)ts;
        absolute = 1;
    }
    uint8_t head[64];
    Py_ssize_t nh = 0;
    head[nh++] = 0x40;
    nh += pb_varint(head + nh, tsv);
    head[nh++] = 0x50;
    head[nh++] = 0x01;
    head[nh++] = 0x5a;
    nh += pb_varint(head + nh, (uint64_t)nte);
    uint8_t tail[32];
    Py_ssize_t nt = 0;
    if (has_name || ann >= 0) {
        tail[nt++] = 0x68;
        tail[nt++] = 0x02;
    }
    if (absolute) {
        tail[nt++] = 0xd0;
        tail[nt++] = 0x03;
        nt += pb_varint(tail + nt, c->clock_id);
    }
    uint8_t ihead[12];
    Py_ssize_t nih = 0;
    if (interned) {
        ihead[nih++] = 0x62;
        nih += pb_varint(ihead + nih, (uint64_t)interned);
    }
    Py_ssize_t plen = nh + nte + nih + interned + nt;
    tbuf_t *t = &c->t;
    uint8_t ph[12];
    Py_ssize_t nph = 0;
    ph[nph++] = 0x0a;
    nph += pb_varint(ph + nph, (uint64_t)plen);
    if (tb_reserve(t, nph + plen) < 0)
        return -1;
    tb_put(t, (const char *)ph, nph);
    tb_put(t, (const char *)head, nh);
    tb_put(t, (const char *)te, nte);
    if (interned) {
        tb_put(t, (const char *)ihead, nih);
        if (new_name) {
            tb_put(t, (const char *)nhead, nnh);
            tb_put(t, name, name_len);
        }
        tb_put(t, (const char *)in, nin);
    }
    tb_put(t, (const char *)tail, nt);
    return 0;
}

/* _Writer.lost: the instant of a slot's losses, at ``ts`` */
static int
pf_lost(PerfettoCalls *c, Py_ssize_t slot, int64_t ts, long long lost)
{
    if (lost == c->unknown_mark) {
        c->unknown_loss = 1;
        return pf_packet(c, PF_INSTANT, ts, c->ps[slot].uuid, 1, 0, 0, 1, PF_ANN_LOST, 0,
                         "unknown");
    }
    c->lost_total += lost;
    return pf_packet(c, PF_INSTANT, ts, c->ps[slot].uuid, 1, 0, 0, 1, PF_ANN_LOST, lost, NULL);
}

/* _Writer.end: a call ended (its begin first when its entry was not in the trace) */
static int
pf_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    PerfettoCalls *c = (PerfettoCalls *)ctx;
    uint64_t uuid = c->ps[slot].uuid;
    if (!p->entry_seen && pf_packet(c, PF_BEGIN, p->start, uuid, 1, p->id, p->cid, 0,
                                    PF_ANN_ENTRY_LOST, 0, NULL) < 0)
        return -1;
    return pf_packet(c, PF_END, p->end, uuid, 0, 0, 0, 0,
                     p->complete ? -1 : PF_ANN_UNFINISHED, 0, NULL);
}

/* the loss notes a slot has: CallBuilder.feed(LostEvents) for each, and the count that
 * waits for the slot's next record (lost_pending) */
static int
pf_marks(PerfettoCalls *c, Py_ssize_t slot, long long *pending, int *has_pending)
{
    gslot_t *g = &c->m.slots[slot];
    for (Py_ssize_t i = 0; i < g->nmarks; i++) {
        if (pair_lost(&c->pr, slot) < 0)
            return -1;
        long long m = g->marks[i];
        if (!*has_pending)
            *pending = m;
        else if (*pending == c->unknown_mark || m == c->unknown_mark)
            *pending = c->unknown_mark;
        else
            *pending += m;
        *has_pending = 1;
    }
    g->nmarks = 0;
    return 0;
}

static PyObject *
pf_step(PerfettoCalls *c, PyObject *unused)
{
    c->t.blen = 0;
    Py_ssize_t need = -1;
    while (!c->done && c->t.blen < (1 << 16)) {
        Py_ssize_t best = -1;
        record_t r;
        uint32_t id;
        int picked = merge_next(&c->m, &best, &need, &r, &id);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            break;
        if (picked == 0) {
            /* the losses nothing was read after, slot by slot; builder.finish(); then
             * their instants, at each slot's last time */
            Py_ssize_t ns = c->m.nslots;
            long long *pend = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(long long));
            int *has = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(int));
            if (pend == NULL || has == NULL) {
                PyMem_Free(pend);
                PyMem_Free(has);
                return PyErr_NoMemory();
            }
            int err = 0;
            for (Py_ssize_t k = 0; k < ns && !err; k++)
                if (c->m.slots[k].nmarks)
                    err = pf_marks(c, k, &pend[k], &has[k]) < 0;
            if (!err)
                err = pair_finish(&c->pr) < 0;
            for (Py_ssize_t k = 0; k < ns && !err; k++)
                if (has[k])
                    err = pf_lost(c, k, c->ps[k].has_any ? c->ps[k].last_any : c->first_ts,
                                  pend[k]) < 0;
            PyMem_Free(pend);
            PyMem_Free(has);
            if (err)
                return NULL;
            c->done = 1;
            break;
        }
        gslot_t *g = &c->m.slots[best];
        pslot_t *s = &c->ps[best];
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        if (g->nmarks) {
            long long pending = 0;
            int has = 0;
            if (pf_marks(c, best, &pending, &has) < 0 || pf_lost(c, best, ts, pending) < 0)
                return NULL;
        }
        s->last_any = ts;
        s->has_any = 1;
        uint32_t cid = id;
        if (canon_lookup(c->canon, &cid) < 0)
            return NULL;
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (pair_enter_close(&c->pr, best, depth, ts) < 0
                    || pair_push(&c->pr, best, id, cid, depth, ts, 0) < 0
                    || pf_packet(c, PF_BEGIN, ts, s->uuid, 1, id, cid, 0, -1, 0, NULL) < 0)
                return NULL;
        } else if (pair_return(&c->pr, best, id, cid, depth, ts, (int64_t)r.d) < 0) {
            return NULL;
        }
    }
    PyObject *bytes = PyBytes_FromStringAndSize(c->t.buf, c->t.blen);
    if (bytes == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", bytes, need);
}

static PyObject *
pf_feed(PerfettoCalls *c, PyObject *const *args, Py_ssize_t nargs)
{
    return merge_feed(&c->m, args, nargs, &c->lost_fed);
}

static PyObject *
pf_counts(PerfettoCalls *c, PyObject *unused)
{
    return Py_BuildValue("(LO)", c->lost_total, c->unknown_loss ? Py_True : Py_False);
}

/* PerfettoCalls(slots, names, canon, uuids, clock, t0, first_ts, unknown):
 * names id -> its name (as the Python writer writes it), canon as StatWalk's, uuids
 * slot -> its thread's track uuid, clock the trace clock's id (None: no clock, absolute
 * timestamps), t0 the incremental clock's start, first_ts where a slot nothing was read
 * from shows its losses, unknown the loss count that means "unknown" */
static int
pf_init(PerfettoCalls *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots;
    PyObject *names, *canon, *uuids, *clock;
    long long t0, first_ts, unknown;
    if (!PyArg_ParseTuple(args, "nO!OO!OLLL:PerfettoCalls", &nslots, &PyDict_Type, &names,
                          &canon, &PyDict_Type, &uuids, &clock, &t0, &first_ts, &unknown))
        return -1;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "PerfettoCalls: bad slot count (or made twice)");
        return -1;
    }
    if (canon != Py_None) {
        if (!PyDict_Check(canon)) {
            PyErr_SetString(PyExc_TypeError, "PerfettoCalls: canon is a dict or None");
            return -1;
        }
        if (PyDict_GET_SIZE(canon))
            c->canon = Py_NewRef(canon);
    }
    if (clock == Py_None) {
        c->incremental = 0;
    } else {
        unsigned long id = PyLong_AsUnsignedLong(clock);
        if (id == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        c->incremental = 1;
        c->clock_id = (uint32_t)id;
    }
    c->last = t0 < 0 ? 0 : t0;
    c->first_ts = first_ts;
    c->unknown_mark = unknown;
    Py_ssize_t n1 = nslots ? nslots : 1;
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->ps = PyMem_Calloc((size_t)n1, sizeof(pslot_t));
    if (c->ps == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (pair_init(&c->pr, nslots, pf_emit, c) < 0)
        return -1;
    if (names_init(&c->names, names) < 0)
        return -1;
    Py_ssize_t pos = 0, seen = 0;
    PyObject *k, *v;
    while (PyDict_Next(uuids, &pos, &k, &v)) {
        Py_ssize_t slot = PyLong_AsSsize_t(k);
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (PyErr_Occurred())
            return -1;
        if (slot < 0 || slot >= nslots || u == 0)
            continue;
        if (!c->ps[slot].uuid)
            seen++;
        c->ps[slot].uuid = u;
    }
    if (seen != nslots) {
        PyErr_SetString(PyExc_ValueError, "PerfettoCalls: a slot without its track");
        return -1;
    }
    return 0;
}

static void
pf_dealloc(PerfettoCalls *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    merge_free(&c->m);
    pair_free(&c->pr);
    PyMem_Free(c->ps);
    names_free(&c->names);
    PyMem_Free(c->iids.key);
    PyMem_Free(c->iids.val);
    PyMem_Free(c->t.buf);
    Py_XDECREF(c->canon);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyMethodDef pf_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))pf_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase]): a slot's next block, or that it has no more"},
    {"step", (PyCFunction)pf_step, METH_NOARGS,
     "step() -> (packets, need): serialized packets, and the slot to feed before more "
     "(-1: none)"},
    {"counts", (PyCFunction)pf_counts, METH_NOARGS,
     "counts() -> (lost events shown, a loss of unknown size was shown)"},
    {NULL}
};

static PyType_Slot pf_slots[] = {
    {Py_tp_doc, "PerfettoCalls(slots, names, canon, uuids, clock, t0, first_ts, unknown): the "
                "Perfetto trace's call packets of a trace file (output/perfetto.py's twin)"},
    {Py_tp_init, pf_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, pf_dealloc},
    {Py_tp_methods, pf_methods},
    {0, NULL},
};

static PyType_Spec pf_spec = {
    "fntrace._native.PerfettoCalls", sizeof(PerfettoCalls), 0, Py_TPFLAGS_DEFAULT, pf_slots,
};
