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
    long long read_events; /* records consumed by trace_pipe (per_thread stats) */
    char overwrite;
    int clock;             /* trace_clock: FNT_CLOCK_* (trace.TRACE_CLOCKS order) */
    PyObject *data;        /* bytearray, nrec * FNT_RECORD_SIZE bytes */
    PyObject *sink;        /* None, or the ChunkQueue handoff() appends to */
    PyObject *payloads;    /* dict seq -> object */
    /* A buffer that hands its records to a sink keeps its payloads in a list instead,
     * in record order: the payloads of the records flagged FNT_HAS_PAYLOAD from
     * `list_from` on, one each (no int key made, no dict grown, per payload).  A full
     * hand-over gives the list away whole; anything that asks for `payloads` first
     * settles it into the dict (rb_settle), which is what the Python twin keeps. */
    PyObject *paylist;     /* list, or NULL */
    long long list_from;
    char list_off;         /* a payload-flagged record came from Python's write() */
} RingBufferObject;


/* ring_buffer.PAYLOAD_COST: what a payload counts in ChunkQueue.pending */
#define PAYLOAD_COST 128
static PyObject *str_items, *str_append, *str_notify_fd, *str_pending, *str_limit, *str_closed;
static PyObject *str_pid, *str_hold;
/* ring_buffer.HOLD_MS: how long a thread is held after a fatal signal */
#define FNT_HOLD_MS 10000

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

/* The list's payloads into the dict, each under its record's sequence number: before
 * anything reads or trims the dict, or writes in a way the list does not follow.
 * 0, or -1 with an exception set (the list then keeps what was not moved). */
static int
rb_settle(RingBufferObject *rb)
{
    PyObject *l = rb->paylist;
    if (l == NULL || PyList_GET_SIZE(l) == 0)
        return 0;
    if (rb->payloads == NULL || !PyDict_Check(rb->payloads)) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer payloads are not set up");
        return -1;
    }
    if (rb->data == NULL || !PyByteArray_Check(rb->data)
            || PyByteArray_GET_SIZE(rb->data) < rb->nrec * FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer data is not set up");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(l), j = 0;
    const char *data = PyByteArray_AS_STRING(rb->data);
    Py_INCREF(l);
    /* (the records are still there: a buffer with a list never overwrites) */
    for (long long q = rb->list_from; q < rb->seq && j < n; q++) {
        const record_t *rec = (const record_t *)(data + (q % rb->nrec) * FNT_RECORD_SIZE);
        if (!(rec->flags & FNT_HAS_PAYLOAD))
            continue;
        PyObject *k = PyLong_FromLongLong(q);
        if (k == NULL || PyDict_SetItem(rb->payloads, k, PyList_GET_ITEM(l, j)) < 0) {
            Py_XDECREF(k);
            PyList_SetSlice(l, 0, j, NULL);
            rb->list_from = q;
            Py_DECREF(l);
            return -1;
        }
        Py_DECREF(k);
        j++;
    }
    PyList_SetSlice(l, 0, PY_SSIZE_T_MAX, NULL);
    rb->list_from = rb->seq;
    Py_DECREF(l);
    return 0;
}

/* Does the record `seq` carry a payload that is not in `payloads` yet?  (A pure-Python
 * writer stores the payload just after the record: a reader on another thread may see
 * the record first.  The native writer does both at once, so this is only ever true
 * for the twin; kept here so both behave alike.) */
static int
rb_payload_missing(RingBufferObject *rb, long long seq)
{
    if (rb_settle(rb) < 0) {
        PyErr_Clear();
        return 0;
    }
    const record_t *rec = (const record_t *)(PyByteArray_AS_STRING(rb->data)
                                             + (seq % rb->nrec) * FNT_RECORD_SIZE);
    if (!(rec->flags & FNT_HAS_PAYLOAD))
        return 0;
    if (rb->payloads == NULL || !PyDict_Check(rb->payloads))
        return 0;
    PyObject *k = PyLong_FromLongLong(seq);
    if (k == NULL) {
        PyErr_Clear();
        return 0;
    }
    int has = PyDict_Contains(rb->payloads, k);
    Py_DECREF(k);
    if (has < 0) {
        PyErr_Clear();
        return 0;
    }
    return !has;
}

/* A quiet hand-over (a thread that ended hands its last records over) does not wake
 * the reader while less than this is pending: a program of many short threads would
 * have it wake, and write a block, for each.  What waits is written at the reader's
 * next wake (a full buffer's hand-over, a tick, the end of the recording, a fork);
 * always below the limit a writer waits at (its twin: ring_buffer.py quiet_pending). */
#define QUIET_PENDING(limit) ((limit) > 0 ? (limit) / 4 : (1LL << 18))

/* RingBuffer.handoff (ring_buffer._PyRingBufferBase.handoff): the records not handed
 * over yet, copied out as one chunk and appended to the sink's ChunkQueue, its reader
 * poked through notify_fd.  No Python frame runs here: a thread at its recursion limit
 * hands its chunk over like any other.
 *
 * `wait`: the buffer's own thread (it was full) waits for the reader while the queue is
 * over its limit; another thread flushing it (the reader itself, every few ms, so a
 * live reader sees events of an idle thread) does not wait, and leaves a last record
 * whose payload is still being stored for the next hand-over.
 *
 * The reader-page swap is atomic for other threads: every object that can start the
 * cyclic GC (which may run finalizers, and so switch threads) is made before the
 * buffer's state is read, and the state (read, payloads) is updated before anything
 * else can run.  0, or -1 with an exception set. */
static int
rb_handoff(RingBufferObject *rb, int wait, int quiet, int full)
{
    PyObject *q = rb->sink;
    if (q == NULL || q == Py_None)
        return 0;
    if (rb->seq <= rb->read)
        return 0;
    /* A forked child hands nothing over to its parent's queue: no thread of the child
     * drains it (a child that goes on recording has a queue of its own) */
    long long qpid = attr_ll(q, str_pid);
    if (qpid == -1 && PyErr_Occurred())
        return -1;
    if (qpid != (long long)getpid())
        return 0;
    if (rb->data == NULL || !PyByteArray_Check(rb->data)
            || PyByteArray_GET_SIZE(rb->data) < rb->nrec * FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "ring buffer data is not set up");
        return -1;
    }
    /* both the list and the dict hold payloads (something read `payloads` since the
     * last hand-over): the dict's way, below */
    if (rb->paylist != NULL && PyList_GET_SIZE(rb->paylist) && rb->payloads != NULL
            && PyDict_Check(rb->payloads) && PyDict_GET_SIZE(rb->payloads) && rb_settle(rb) < 0)
        return -1;
    PyObject *items = PyObject_GetAttr(q, str_items);
    if (items == NULL)
        return -1;
    /* GC-tracked objects first (their allocation may collect).  The new dict is the
     * buffer's next one (see `whole` below).  When a full buffer hands over (`full`:
     * the thread writes on), it is made the size this one grew to: with -A/-R every
     * record has a payload, and growing a dict to a chunk's tens of thousands of
     * entries again each chunk cost ~600 instructions a payload.  A flush (a thread's
     * end, the run's) leaves it small: nothing may follow. */
    Py_ssize_t presize = full && rb->payloads != NULL && PyDict_CheckExact(rb->payloads)
        ? PyDict_GET_SIZE(rb->payloads) : 0;
#if PY_VERSION_HEX < 0x030E0000
    PyObject *pay = presize ? _PyDict_NewPresized(presize) : PyDict_New();
#else
    PyObject *pay = PyDict_New();
    (void)presize;
#endif
    PyObject *item = PyTuple_New(4);
    /* the buffer's next payload list, if it keeps one (made here, with the others) */
    PyObject *nlist = rb->paylist != NULL ? PyList_New(0) : NULL;
    if (pay == NULL || item == NULL || (rb->paylist != NULL && nlist == NULL)) {
        Py_XDECREF(pay);
        Py_XDECREF(item);
        Py_XDECREF(nlist);
        Py_DECREF(items);
        return -1;
    }
    /* every payload still to hand over is in the list: the list goes whole, and no
     * record's payload can be missing (the native writer stores it with its record) */
    int listed = rb->paylist != NULL && PyList_GET_SIZE(rb->paylist)
        && (rb->payloads == NULL || !PyDict_Check(rb->payloads) || !PyDict_GET_SIZE(rb->payloads));
    long long start = rb->seq - rb->nrec > rb->read ? rb->seq - rb->nrec : rb->read;
    long long end = rb->seq;
    if (!listed && !wait && end > start && rb_payload_missing(rb, end - 1))
        end--;
    if (end <= start) {
        Py_DECREF(pay);
        Py_DECREF(item);
        Py_XDECREF(nlist);
        Py_DECREF(items);
        return 0;
    }
    Py_ssize_t n = (Py_ssize_t)(end - start), nrec = rb->nrec, s = (Py_ssize_t)(start % nrec);
    /* A whole buffer from its first slot (a full buffer's hand-over, the common one):
     * the page itself goes to the reader and the buffer writes on in a new one, as the
     * kernel swaps its reader page; no record is copied.  (Not a bytearray subclass, not
     * shared through a buffer export: those are copied.)  A new bytearray starts no
     * collection, so nothing runs between this and the swap below. */
    PyObject *fresh = NULL;
    if (s == 0 && n == nrec && PyByteArray_CheckExact(rb->data)
            && ((PyByteArrayObject *)rb->data)->ob_exports == 0) {
        fresh = PyByteArray_FromStringAndSize(NULL, nrec * FNT_RECORD_SIZE);
        if (fresh == NULL) {
            Py_DECREF(pay);
            Py_DECREF(item);
            Py_XDECREF(nlist);
            Py_DECREF(items);
            return -1;
        }
    }
    PyObject *chunk = fresh ? Py_NewRef(rb->data) : PyBytes_FromStringAndSize(NULL, n * FNT_RECORD_SIZE);
    PyObject *first = PyLong_FromLongLong(start);
    PyObject *cpu = PyLong_FromSsize_t(rb->cpu);
    if (chunk == NULL || first == NULL || cpu == NULL) {
        Py_XDECREF(nlist);
        Py_XDECREF(fresh);
        Py_XDECREF(chunk);
        Py_XDECREF(first);
        Py_XDECREF(cpu);
        Py_DECREF(pay);
        Py_DECREF(item);
        Py_DECREF(items);
        return -1;
    }
    PyTuple_SET_ITEM(item, 0, cpu);
    PyTuple_SET_ITEM(item, 1, chunk);
    PyTuple_SET_ITEM(item, 2, first);
    char *dst = fresh ? NULL : PyBytes_AS_STRING(chunk), *src = PyByteArray_AS_STRING(rb->data);
    if (fresh) {
        PyObject *old = rb->data;
        rb->data = fresh;               /* the chunk holds the old one */
        Py_DECREF(old);
    }
    else if (s + n <= nrec)
        memcpy(dst, src + s * FNT_RECORD_SIZE, (size_t)n * FNT_RECORD_SIZE);
    else {
        Py_ssize_t k = nrec - s;
        memcpy(dst, src + s * FNT_RECORD_SIZE, (size_t)k * FNT_RECORD_SIZE);
        memcpy(dst + k * FNT_RECORD_SIZE, src, (size_t)(n - k) * FNT_RECORD_SIZE);
    }
    /* nothing between the check and the swap can run code that writes a payload */
    int whole = !listed && rb->payloads != NULL && PyDict_CheckExact(rb->payloads)
        && PyDict_GET_SIZE(rb->payloads) && payloads_within(rb->payloads, start, end);
    if (listed) {
        /* the chunk's payloads are the list, in its flagged records' order */
        PyObject *held = rb->paylist;
        rb->paylist = nlist;
        nlist = NULL;
        rb->list_from = end;
        Py_DECREF(pay);
        pay = held;
    }
    else if (whole) {
        /* every payload held is this chunk's (the rule while a sink is attached): the
         * dict itself goes, the buffer keeps the new one, no entry is moved */
        PyObject *held = rb->payloads;
        rb->payloads = pay;
        pay = held;
    }
    else if (rb->payloads != NULL && PyDict_GET_SIZE(rb->payloads)) {
        /* keys are ints: no __eq__ runs; a value moved keeps a reference, so no
         * finalizer runs either */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        PyObject *moved[64];
        int nmoved = 0, more = 1;
        while (more) {
            more = 0;
            nmoved = 0;
            pos = 0;
            while (PyDict_Next(rb->payloads, &pos, &key, &value)) {
                long long k = PyLong_Check(key) ? PyLong_AsLongLong(key) : -1;
                if (k == -1 && PyErr_Occurred()) {
                    PyErr_Clear();
                    continue;
                }
                if (k < start || k >= end)
                    continue;
                if (PyDict_SetItem(pay, key, value) < 0) {
                    PyErr_Clear();
                    continue;
                }
                if (nmoved == 64) {
                    more = 1;
                    break;
                }
                Py_INCREF(key);
                moved[nmoved++] = key;
            }
            for (int i = 0; i < nmoved; i++) {
                if (PyDict_DelItem(rb->payloads, moved[i]) < 0)
                    PyErr_Clear();
                Py_DECREF(moved[i]);
            }
        }
    }
    rb->read = end;
    if (nlist != NULL) {
        /* (unused: the list stays; it holds nothing of this chunk) */
        Py_DECREF(nlist);
    }
    PyTuple_SET_ITEM(item, 3, pay);
    /* The chunk and its payloads wait in the queue for the writer thread, which frees
     * them: the program must not count them among its objects (gc.get_objects() in
     * CPython's test_descr counts before and after a few calls, and a hand-over between
     * the two would be two more).  Neither can be part of a cycle: nothing but the
     * queue, and then the writer, refers to them, and payloads refer to nothing of
     * fntrace's.  The buffer's next payload list or dict, made above, takes the place
     * of the one that goes: the count the program sees is the same. */
    PyObject_GC_UnTrack(item);
    PyObject_GC_UnTrack(pay);      /* (a dict of strings may be untracked already) */
    long long npay = (long long)(PyList_Check(pay) ? PyList_GET_SIZE(pay) : PyDict_GET_SIZE(pay));
    PyObject *r = PyObject_CallMethodOneArg(items, str_append, item);
    Py_DECREF(items);
    Py_DECREF(item);
    if (r == NULL)
        return -1;      /* (deque.append fails only out of memory) */
    Py_DECREF(r);
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
    long long limit = attr_ll(q, str_limit);
    if (limit == -1 && PyErr_Occurred())
        return -1;
    if (fd >= 0 && !(quiet && pend < QUIET_PENDING(limit))) {
        ssize_t w = write((int)fd, "c", 1);     /* a full pipe: the reader is awake */
        (void)w;
    }
    if (!wait)
        return 0;
    /* A slow disk slows the program rather than losing records: wait, without the
     * GIL, for the reader to take chunks off (unless it has gone). */
    for (long held_ms = 0;; ) {
        /* hold: a fatal signal ends the recording; the thread stays here (stopped
         * where it is) until the reader has gone */
        long long hold = attr_ll(q, str_hold);
        if (hold == -1 && PyErr_Occurred())
            return -1;
        int h = hold != 0 && (unsigned long)hold != PyThread_get_thread_ident()
            && held_ms++ < FNT_HOLD_MS;
        if (!h && !(limit > 0 && pend > limit))
            break;
        if (!h) {
            PyObject *closed = PyObject_GetAttr(q, str_closed);
            if (closed == NULL)
                return -1;
            int c = PyObject_IsTrue(closed);
            Py_DECREF(closed);
            if (c)
                break;
        }
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
        pend = attr_ll(q, str_pending);
        if (pend == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *
RingBuffer_handoff(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int wait = 1, quiet = 0;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "handoff(wait=True, quiet=False)");
        return NULL;
    }
    if (nargs >= 1 && (wait = PyObject_IsTrue(args[0])) < 0)
        return NULL;
    if (nargs == 2 && (quiet = PyObject_IsTrue(args[1])) < 0)
        return NULL;
    if (rb_handoff(self, wait, quiet, 0) < 0)
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
/* the clocks a record keeps as the writer read it: one test on every write */
#define FNT_CLOCK_AS_GIVEN(c) ((unsigned)(c) < 32 && ((1u << (c)) & ((1u << FNT_CLOCK_LOCAL) \
    | (1u << FNT_CLOCK_GLOBAL) | (1u << FNT_CLOCK_PERF) | (1u << FNT_CLOCK_MONO))))

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

/* ring_data(nbytes): a buffer's record storage, a bytearray whose bytes are not set.
 * bytearray(n) writes every byte: a thread's first event paid 1.4 M instructions and
 * a fault of every page of its 1.4 MB buffer, used or not.  Nothing reads a slot
 * before it is written (every reader takes [lo, seq)), and malloc maps a fresh block
 * this large from zero pages the system only provides when they are first written:
 * a thread that records ten calls costs a page, not its whole buffer. */
static PyObject *
native_ring_data(PyObject *mod, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "ring_data: negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

/* One record's fields into its slot (both writes below). */
static inline __attribute__((always_inline)) void
rb_store(record_t *rec, long long ts, unsigned type, unsigned flags, unsigned long a,
         unsigned long b, unsigned long c, unsigned long long d)
{
    rec->ts = (unsigned long long)ts;
    rec->type = (unsigned short)type;
    rec->flags = (unsigned short)flags;
    rec->a = (unsigned int)a;
    rec->b = (unsigned int)b;
    rec->c = (unsigned int)c;
    rec->d = d;
}

/* rb_write()'s every case: a full buffer (hand-over, overwrite or drop), a trace_clock
 * read at write time, data not set up. */
static long long
rb_write_slow_held(RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
                   unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    long long seq = rb->seq;
    if (seq - rb->read >= rb->nrec) {
        /* the slot still holds a record nobody has read */
        if (rb->sink != NULL && rb->sink != Py_None) {
            if (rb_handoff(rb, 1, 0, 1) < 0) {
                /* out of memory, say: this record is lost, counted, never raised */
                PyErr_Clear();
                rb->dropped++;
                return -1;
            }
        }
        else if (rb->overwrite) {
            /* (a sink taken away with payloads listed: the dict keeps them from now) */
            if (rb_settle(rb) < 0)
                return -2;
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
    rb_store(rec, ts, type, flags, a, b, c, d);
    rb->seq = seq + 1;
    return seq;
}

/* The callbacks write to a buffer they borrow (buf_get): a hand-over makes objects, and
 * the collector that may start then runs finalizers, so the buffer is held here. */
static __attribute__((noinline)) long long
rb_write_slow(RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
              unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    Py_INCREF(rb);
    long long seq = rb_write_slow_held(rb, ts, type, flags, a, b, c, d);
    Py_DECREF(rb);
    return seq;
}

/* Append one record; returns its sequence number, -1 if dropped, -2 on error.  Inlined
 * into each tracer's callback: the common case (room left, a clock the caller already
 * read, the bytearray in place) is a handful of stores, without a call's prologue; all
 * else is rb_write_slow's. */
static inline __attribute__((always_inline)) long long
rb_write_fast(RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
              unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    long long seq = rb->seq;
    PyObject *data = rb->data;
    if (__builtin_expect(seq - rb->read >= rb->nrec || data == NULL
                         || !PyByteArray_CheckExact(data)
                         || PyByteArray_GET_SIZE(data) < rb->nrec * FNT_RECORD_SIZE
                         || !FNT_CLOCK_AS_GIVEN(rb->clock), 0))
        return -3;
    record_t *rec = (record_t *)(PyByteArray_AS_STRING(data) + (seq % rb->nrec) * FNT_RECORD_SIZE);
    rb_store(rec, ts, type, flags, a, b, c, d);
    rb->seq = seq + 1;
    return seq;
}

static inline __attribute__((always_inline)) long long
rb_write(RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
         unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    long long seq = rb_write_fast(rb, ts, type, flags, a, b, c, d);
    return __builtin_expect(seq != -3, 1) ? seq : rb_write_slow(rb, ts, type, flags, a, b, c, d);
}

/* rb_write() from a callback of thread `t`: only the slow path, which may let the GIL
 * go (a hand-over waiting for the reader), is marked busy for synchronize(); the fast
 * one runs no code and keeps the GIL, so no other thread can see it half done. */
static inline __attribute__((always_inline)) long long
rb_write_cb(thread_rec *t, RingBufferObject *rb, long long ts, unsigned type, unsigned flags,
            unsigned long a, unsigned long b, unsigned long c, unsigned long long d)
{
    long long seq = rb_write_fast(rb, ts, type, flags, a, b, c, d);
    if (__builtin_expect(seq != -3, 1))
        return seq;
    t->busy++;
    t->count++;
    seq = rb_write_slow(rb, ts, type, flags, a, b, c, d);
    t->busy--;
    return seq;
}

/* RingBuffer.write_payload: the record, then its payload keyed by sequence number. */
static long long
rb_write_payload(RingBufferObject *rb, long long ts, unsigned type, unsigned long a,
                 unsigned long b, unsigned long c, unsigned long long d, PyObject *payload)
{
    long long seq = rb_write(rb, ts, type, FNT_HAS_PAYLOAD, a, b, c, d);
    if (seq >= 0 && rb->paylist != NULL && !rb->list_off && rb->sink != NULL
            && rb->sink != Py_None && rb->payloads != NULL && PyDict_CheckExact(rb->payloads)
            && PyDict_GET_SIZE(rb->payloads) == 0) {
        /* handed to a sink: listed (no allocation here can start a collection) */
        if (PyList_GET_SIZE(rb->paylist) == 0)
            rb->list_from = seq;
        if (PyList_Append(rb->paylist, payload) < 0) {
            /* its record says so no more: a record without its payload is one
             * the list would pair with the next payload */
            record_t *rec = (record_t *)(PyByteArray_AS_STRING(rb->data)
                                         + (seq % rb->nrec) * FNT_RECORD_SIZE);
            rec->flags &= (unsigned short)~FNT_HAS_PAYLOAD;
            return -2;
        }
        return seq;
    }
    if (seq >= 0 && rb_settle(rb) < 0)
        return -2;
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

/* write() and write_payload(), one body: a record from Python ints, ts, type, flags, a,
 * b, c, d; or ts, type, a, b, c, d and the payload beside it. */
static inline PyObject *
rb_write_call(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs, int payload)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, payload ? "write_payload(ts, type, a, b, c, d, payload)"
                                                 : "write(ts, type, flags, a, b, c, d)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    unsigned long type = PyLong_AsUnsignedLong(args[1]);
    unsigned long flags = payload ? 0 : PyLong_AsUnsignedLong(args[2]);
    PyObject *const *f = payload ? args + 2 : args + 3;
    unsigned long a = PyLong_AsUnsignedLong(f[0]);
    unsigned long b = PyLong_AsUnsignedLong(f[1]);
    unsigned long c = PyLong_AsUnsignedLong(f[2]);
    unsigned long long d = PyLong_AsUnsignedLongLong(f[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!payload && (flags & FNT_HAS_PAYLOAD)) {
        /* a flagged record with no payload from here: the list could not pair them */
        self->list_off = 1;
        if (rb_settle(self) < 0)
            return NULL;
    }
    long long seq = payload ? rb_write_payload(self, ts, type, a, b, c, d, args[6])
                            : rb_write(self, ts, type, flags, a, b, c, d);
    return seq == -2 ? NULL : PyLong_FromLongLong(seq);
}

static PyObject *
RingBuffer_write(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return rb_write_call(self, args, nargs, 0);
}

static PyObject *
RingBuffer_write_payload(RingBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return rb_write_call(self, args, nargs, 1);
}

static int
RingBuffer_traverse(RingBufferObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    Py_VISIT(self->sink);
    Py_VISIT(self->payloads);
    Py_VISIT(self->paylist);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
RingBuffer_clear(RingBufferObject *self)
{
    Py_CLEAR(self->data);
    Py_CLEAR(self->sink);
    Py_CLEAR(self->payloads);
    Py_CLEAR(self->paylist);
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

/* RingBuffer(cpu, size_kb, overwrite=True, sink=None, clock=0): the Python twin's
 * __init__ (ring_buffer._PyRingBufferBase), in one call: a thread's first event makes
 * its buffer here, and a dozen attribute stores from bytecode cost it ten thousand
 * instructions.  Payloads start in list mode, as the twin's `payloads = {}` sets it. */
static int
RingBuffer_init(RingBufferObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cpu", "size_kb", "overwrite", "sink", "clock", NULL};
    Py_ssize_t cpu, size_kb;
    int overwrite = 1, clock = 0;
    PyObject *sink = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nn|pOi:RingBuffer", kwlist, &cpu,
                                     &size_kb, &overwrite, &sink, &clock))
        return -1;
    Py_ssize_t nrec = size_kb > 0 && size_kb <= PY_SSIZE_T_MAX / 1024
        ? size_kb * 1024 / FNT_RECORD_SIZE : (size_kb > 0 ? PY_SSIZE_T_MAX / FNT_RECORD_SIZE : 1);
    if (nrec < 1)
        nrec = 1;
    PyObject *data = PyByteArray_FromStringAndSize(NULL, nrec * FNT_RECORD_SIZE);
    if (data == NULL)
        return -1;
    PyObject *payloads = PyDict_New();
    PyObject *paylist = PyList_New(0);
    if (payloads == NULL || paylist == NULL) {
        Py_DECREF(data);
        Py_XDECREF(payloads);
        Py_XDECREF(paylist);
        return -1;
    }
    self->cpu = cpu;
    self->clock = clock;
    self->read_events = 0;
    self->nrec = nrec;
    Py_XSETREF(self->data, data);
    self->seq = self->read = self->overrun = self->dropped = 0;
    self->overwrite = (char)overwrite;
    Py_XSETREF(self->sink, Py_NewRef(sink));
    Py_XSETREF(self->payloads, payloads);
    Py_XSETREF(self->paylist, paylist);
    self->list_from = 0;
    self->list_off = 0;
    return 0;
}

static PyMethodDef RingBuffer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))RingBuffer_write, METH_FASTCALL,
     "write(ts, type, flags, a, b, c, d) -> seq (-1 if dropped)"},
    {"write_payload", (PyCFunction)(void (*)(void))RingBuffer_write_payload, METH_FASTCALL,
     "write_payload(ts, type, a, b, c, d, payload) -> seq"},
    {"handoff", (PyCFunction)(void (*)(void))RingBuffer_handoff, METH_FASTCALL,
     "handoff(wait=True, quiet=False): the records not handed over yet, as one chunk, to "
     "the sink"},
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
    {"read_events", T_LONGLONG, offsetof(RingBufferObject, read_events), 0, NULL},
    {NULL}
};

/* `payloads`: the dict of every payload held, the listed ones settled into it first. */
static PyObject *
RingBuffer_get_payloads(RingBufferObject *self, void *closure)
{
    if (rb_settle(self) < 0)
        return NULL;
    return Py_NewRef(self->payloads ? self->payloads : Py_None);
}

static int
RingBuffer_set_payloads(RingBufferObject *self, PyObject *value, void *closure)
{
    if (self->paylist == NULL) {
        /* made here, from Python, not on a write (a collection could start there) */
        self->paylist = PyList_New(0);
        if (self->paylist == NULL)
            return -1;
        self->list_from = self->seq;
    }
    Py_XINCREF(value);
    Py_XSETREF(self->payloads, value);
    return 0;
}

static PyGetSetDef RingBuffer_getset[] = {
    {"payloads", (getter)RingBuffer_get_payloads, (setter)RingBuffer_set_payloads,
     "dict seq -> payload of the records held", NULL},
    {NULL}
};

static PyType_Slot RingBuffer_slots[] = {
    {Py_tp_dealloc, RingBuffer_dealloc},
    {Py_tp_traverse, RingBuffer_traverse},
    {Py_tp_clear, RingBuffer_clear},
    {Py_tp_methods, RingBuffer_methods},
    {Py_tp_members, RingBuffer_members},
    {Py_tp_getset, RingBuffer_getset},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, RingBuffer_init},
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

