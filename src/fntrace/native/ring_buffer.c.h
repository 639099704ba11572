/* fntrace._native, part ring_buffer.c.h (included by _native.c after native.h; see there).
 * Python twin: ring_buffer.py: RingBuffer.write, write_payload, handoff */

/* -- Ring buffer (ring_buffer.RingBuffer.write) ------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t cpu;
    Py_ssize_t nrec;
    long long seq;
    long long read;
    long long overrun;
    long long dropped;
    char overwrite;
    int clock;             /* trace_clock: FNT_CLOCK_* (trace.TRACE_CLOCKS order) */
    PyObject *data;        /* bytearray, nrec * FNT_RECORD_SIZE bytes */
    PyObject *sink;        /* None, or the ChunkQueue handoff() appends to */
    PyObject *payloads;    /* dict seq -> object */
} RingBufferObject;


/* ring_buffer.PAYLOAD_COST: what a payload counts in ChunkQueue.pending */
#define PAYLOAD_COST 128
static PyObject *str_items, *str_append, *str_notify_fd, *str_pending, *str_limit, *str_closed;

static long long
attr_ll(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return r;
}

/* Are all keys of `payloads` ints in start..end-1? */
static int
payloads_within(PyObject *payloads, long long start, long long end)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(payloads, &pos, &key, &value)) {
        if (!PyLong_CheckExact(key))
            return 0;
        int overflow;
        long long k = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow || k < start || k >= end)
            return 0;
    }
    return 1;
}

/* RingBuffer.handoff (ring_buffer._PyRingBufferBase.handoff): the records not handed
 * over yet, copied out as one chunk and appended to the sink's ChunkQueue, its reader
 * poked through notify_fd.  No Python frame runs here: a thread at its recursion limit
 * hands its chunk over like any other.  0, or -1 with an exception set. */
static int
rb_handoff(RingBufferObject *rb)
{
    PyObject *q = rb->sink;
    if (q == NULL || q == Py_None)
        return 0;
    long long start = rb->seq - rb->nrec > rb->read ? rb->seq - rb->nrec : rb->read;
    long long end = rb->seq;
    if (end <= start)
        return 0;
    if (rb->data == NULL || !PyByteArray_Check(rb->data)
            || PyByteArray_GET_SIZE(rb->data) < rb->nrec * FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer data is not set up");
        return -1;
    }
    Py_ssize_t n = (Py_ssize_t)(end - start), nrec = rb->nrec, s = (Py_ssize_t)(start % nrec);
    PyObject *chunk = PyBytes_FromStringAndSize(NULL, n * FNT_RECORD_SIZE);
    if (chunk == NULL)
        return -1;
    char *dst = PyBytes_AS_STRING(chunk), *src = PyByteArray_AS_STRING(rb->data);
    if (s + n <= nrec)
        memcpy(dst, src + s * FNT_RECORD_SIZE, (size_t)n * FNT_RECORD_SIZE);
    else {
        Py_ssize_t k = nrec - s;
        memcpy(dst, src + s * FNT_RECORD_SIZE, (size_t)k * FNT_RECORD_SIZE);
        memcpy(dst + k * FNT_RECORD_SIZE, src, (size_t)(n - k) * FNT_RECORD_SIZE);
    }
    PyObject *pay = PyDict_New();
    if (pay == NULL) {
        Py_DECREF(chunk);
        return -1;
    }
    /* nothing between the check and the swap can run code that writes a payload */
    int whole = rb->payloads != NULL && PyDict_CheckExact(rb->payloads)
        && PyDict_GET_SIZE(rb->payloads) && payloads_within(rb->payloads, start, end);
    if (whole) {
        /* every payload held is this chunk's (the rule while a sink is attached): the
         * dict itself goes, the buffer keeps the new one, no entry is moved */
        PyObject *held = rb->payloads;
        rb->payloads = pay;
        pay = held;
    }
    else if (rb->payloads != NULL && PyDict_GET_SIZE(rb->payloads)) {
        PyObject *keys = PyDict_Keys(rb->payloads);
        if (keys == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
            PyObject *key = PyList_GET_ITEM(keys, i);
            long long k = PyLong_AsLongLong(key);
            if (k == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                continue;
            }
            if (k < start || k >= end)
                continue;
            PyObject *v = PyDict_GetItemWithError(rb->payloads, key);
            if (v == NULL || PyDict_SetItem(pay, key, v) < 0 || PyDict_DelItem(rb->payloads, key) < 0) {
                Py_DECREF(keys);
                goto fail;
            }
        }
        Py_DECREF(keys);
    }
    PyObject *item = Py_BuildValue("(nOLO)", rb->cpu, chunk, start, pay);
    if (item == NULL)
        goto fail;
    PyObject *items = PyObject_GetAttr(q, str_items);
    PyObject *r = items ? PyObject_CallMethodOneArg(items, str_append, item) : NULL;
    Py_XDECREF(items);
    Py_DECREF(item);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    rb->read = end;
    long long npay = (long long)PyDict_GET_SIZE(pay);
    Py_DECREF(chunk);
    Py_DECREF(pay);
    long long pend = attr_ll(q, str_pending);
    if (pend == -1 && PyErr_Occurred())
        return -1;
    pend += (long long)n * FNT_RECORD_SIZE + PAYLOAD_COST * npay;
    PyObject *pv = PyLong_FromLongLong(pend);
    if (pv == NULL || PyObject_SetAttr(q, str_pending, pv) < 0) {
        Py_XDECREF(pv);
        return -1;
    }
    Py_DECREF(pv);
    long long fd = attr_ll(q, str_notify_fd);
    if (fd == -1 && PyErr_Occurred())
        return -1;
    if (fd >= 0) {
        ssize_t w = write((int)fd, "c", 1);     /* a full pipe: the reader is awake */
        (void)w;
    }
    long long limit = attr_ll(q, str_limit);
    if (limit == -1 && PyErr_Occurred())
        return -1;
    /* A slow disk slows the program rather than losing records: wait, without the
     * GIL, for the reader to take chunks off (unless it has gone). */
    while (limit > 0 && pend > limit) {
        PyObject *closed = PyObject_GetAttr(q, str_closed);
        if (closed == NULL)
            return -1;
        int c = PyObject_IsTrue(closed);
        Py_DECREF(closed);
        if (c)
            break;
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
        pend = attr_ll(q, str_pending);
        if (pend == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
fail:
    Py_DECREF(chunk);
    if (whole)
        Py_SETREF(rb->payloads, pay);   /* the buffer keeps them, as before the call */
    else
        Py_DECREF(pay);
    return -1;
}

static PyObject *
RingBuffer_handoff(RingBufferObject *self, PyObject *unused)
{
    if (rb_handoff(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* trace_clock (kernel/trace/trace_clock.c), in trace.TRACE_CLOCKS order.  Every writer
 * passes a CLOCK_MONOTONIC reading (now_ns): local, global, perf and mono are that
 * clock in one process, so the record keeps it; the others are read here, in the one
 * place every record passes (the Python twin: ring_buffer._PyRingBufferBase.write). */
#define FNT_CLOCK_LOCAL 0
#define FNT_CLOCK_GLOBAL 1
#define FNT_CLOCK_COUNTER 2
#define FNT_CLOCK_UPTIME 3
#define FNT_CLOCK_PERF 4
#define FNT_CLOCK_MONO 5
#define FNT_CLOCK_MONO_RAW 6
#define FNT_CLOCK_BOOT 7

/* trace_clock_counter(): one count for the process, as the kernel's is one for the
 * system (the GIL serialises the increments) */
static unsigned long long g_trace_counter;

static long long
clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long
rb_clock_now(int clock)
{
    switch (clock) {
    case FNT_CLOCK_COUNTER:
        return (long long)++g_trace_counter;
    case FNT_CLOCK_UPTIME:
        /* trace_clock_jiffies(): jiffies as clock_t, USER_HZ = 100 per second */
        return clock_ns(CLOCK_BOOTTIME) / 10000000LL;
    case FNT_CLOCK_MONO_RAW:
        return clock_ns(CLOCK_MONOTONIC_RAW);
    case FNT_CLOCK_BOOT:
        return clock_ns(CLOCK_BOOTTIME);
    default:
        return now_ns();
    }
}

static PyObject *
native_trace_clock_now(PyObject *mod, PyObject *arg)
{
    int clock = (int)PyLong_AsLong(arg);
    if (clock == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(rb_clock_now(clock));
}

/* Append one record; returns its sequence number, -1 if dropped, -2 on error. */
static long long
rb_write(RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
         unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    long long seq = rb->seq;
    if (seq - rb->read >= rb->nrec) {
        /* the slot still holds a record nobody has read */
        if (rb->sink != NULL && rb->sink != Py_None) {
            if (rb_handoff(rb) < 0) {
                /* out of memory, say: this record is lost, counted, never raised */
                PyErr_Clear();
                rb->dropped++;
                return -1;
            }
        }
        else if (rb->overwrite) {
            rb->overrun++;
            if (rb->payloads != NULL && PyDict_GET_SIZE(rb->payloads)) {
                PyObject *k = PyLong_FromLongLong(seq - rb->nrec);
                if (k == NULL)
                    return -2;
                if (PyDict_DelItem(rb->payloads, k) < 0)
                    PyErr_Clear();
                Py_DECREF(k);
            }
        }
        else {
            rb->dropped++;
            return -1;
        }
    }
    if (rb->data == NULL || !PyByteArray_Check(rb->data)
            || PyByteArray_GET_SIZE(rb->data) < rb->nrec * FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer data is not set up");
        return -2;
    }
    record_t *rec = (record_t *)(PyByteArray_AS_STRING(rb->data) + (seq % rb->nrec) * FNT_RECORD_SIZE);
    switch (rb->clock) {
    case FNT_CLOCK_LOCAL: case FNT_CLOCK_GLOBAL: case FNT_CLOCK_PERF: case FNT_CLOCK_MONO:
        break;
    default: {
        long long now = rb_clock_now(rb->clock);
        /* a return's calltime moves with its timestamp: the duration stays the one
         * measured (the kernel's graph times are trace_clock_local's too) */
        if (type == FNT_TRACE_GRAPH_RET)
            d = (unsigned long long)((long long)d + (now - ts));
        ts = now;
    }
    }
    rec->ts = (unsigned long long)ts;
    rec->type = (unsigned short)type;
    rec->flags = (unsigned short)flags;
    rec->a = (unsigned int)a;
    rec->b = (unsigned int)b;
    rec->c = (unsigned int)c;
    rec->d = d;
    rb->seq = seq + 1;
    return seq;
}

static PyObject *
RingBuffer_write(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "write(ts, type, flags, a, b, c, d)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    unsigned long type = PyLong_AsUnsignedLong(args[1]);
    unsigned long flags = PyLong_AsUnsignedLong(args[2]);
    unsigned long a = PyLong_AsUnsignedLong(args[3]);
    unsigned long b = PyLong_AsUnsignedLong(args[4]);
    unsigned long c = PyLong_AsUnsignedLong(args[5]);
    unsigned long long d = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    long long seq = rb_write(self, ts, type, flags, a, b, c, d);
    if (seq == -2)
        return NULL;
    return PyLong_FromLongLong(seq);
}

/* RingBuffer.write_payload: the record, then its payload keyed by sequence number. */
static long long
rb_write_payload(RingBufferObject *rb, long long ts, unsigned type, unsigned long a,
                 unsigned long b, unsigned long c, unsigned long long d, PyObject *payload)
{
    long long seq = rb_write(rb, ts, type, FNT_HAS_PAYLOAD, a, b, c, d);
    if (seq >= 0) {
        PyObject *k = PyLong_FromLongLong(seq);
        if (k == NULL || rb->payloads == NULL || PyDict_SetItem(rb->payloads, k, payload) < 0) {
            Py_XDECREF(k);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "ring buffer payloads are not set up");
            return -2;
        }
        Py_DECREF(k);
    }
    return seq;
}

static PyObject *
RingBuffer_write_payload(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "write_payload(ts, type, a, b, c, d, payload)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    unsigned long type = PyLong_AsUnsignedLong(args[1]);
    unsigned long a = PyLong_AsUnsignedLong(args[2]);
    unsigned long b = PyLong_AsUnsignedLong(args[3]);
    unsigned long c = PyLong_AsUnsignedLong(args[4]);
    unsigned long long d = PyLong_AsUnsignedLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    long long seq = rb_write_payload(self, ts, type, a, b, c, d, args[6]);
    if (seq == -2)
        return NULL;
    return PyLong_FromLongLong(seq);
}

static int
RingBuffer_traverse(RingBufferObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    Py_VISIT(self->sink);
    Py_VISIT(self->payloads);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
RingBuffer_clear(RingBufferObject *self)
{
    Py_CLEAR(self->data);
    Py_CLEAR(self->sink);
    Py_CLEAR(self->payloads);
    return 0;
}

static void
RingBuffer_dealloc(RingBufferObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    RingBuffer_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef RingBuffer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))RingBuffer_write, METH_FASTCALL,
     "write(ts, type, flags, a, b, c, d) -> seq (-1 if dropped)"},
    {"write_payload", (PyCFunction)(void (*)(void))RingBuffer_write_payload, METH_FASTCALL,
     "write_payload(ts, type, a, b, c, d, payload) -> seq"},
    {"handoff", (PyCFunction)RingBuffer_handoff, METH_NOARGS,
     "handoff(): the records not handed over yet, as one chunk, to the sink"},
    {NULL}
};

static PyMemberDef RingBuffer_members[] = {
    {"cpu", T_PYSSIZET, offsetof(RingBufferObject, cpu), 0, NULL},
    {"nrec", T_PYSSIZET, offsetof(RingBufferObject, nrec), 0, NULL},
    {"seq", T_LONGLONG, offsetof(RingBufferObject, seq), 0, NULL},
    {"read", T_LONGLONG, offsetof(RingBufferObject, read), 0, NULL},
    {"overrun", T_LONGLONG, offsetof(RingBufferObject, overrun), 0, NULL},
    {"dropped", T_LONGLONG, offsetof(RingBufferObject, dropped), 0, NULL},
    {"overwrite", T_BOOL, offsetof(RingBufferObject, overwrite), 0, NULL},
    {"clock", T_INT, offsetof(RingBufferObject, clock), 0, NULL},
    {"data", T_OBJECT, offsetof(RingBufferObject, data), 0, NULL},
    {"sink", T_OBJECT, offsetof(RingBufferObject, sink), 0, NULL},
    {"payloads", T_OBJECT, offsetof(RingBufferObject, payloads), 0, NULL},
    {NULL}
};

static PyType_Slot RingBuffer_slots[] = {
    {Py_tp_dealloc, RingBuffer_dealloc},
    {Py_tp_traverse, RingBuffer_traverse},
    {Py_tp_clear, RingBuffer_clear},
    {Py_tp_methods, RingBuffer_methods},
    {Py_tp_members, RingBuffer_members},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_doc, "The native part of ring_buffer.RingBuffer: its counters and write()."},
    {0, NULL}
};

static PyType_Spec RingBuffer_spec = {
    .name = "fntrace._native.RingBufferBase",
    .basicsize = sizeof(RingBufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = RingBuffer_slots,
};

static PyTypeObject *RingBuffer_Type;

