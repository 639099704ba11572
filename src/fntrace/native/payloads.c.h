/* fntrace._native, part payloads.c.h (included by _native.c after native.h; see there).
 * Python twin: core/fetch.py, tracers/function_graph.py: args/retval payloads */

/* -- funcgraph-args / funcgraph-retval payloads (tracers/function_graph.py) ----------- */

/* core/fetch.py _repr's last line, "<module.Qualname object at 0x...>", for an object of
 * none of the types it shows otherwise; NULL without an exception for those (the
 * Python path then).  No Python code runs: a callback that ran bytecode could run a
 * signal handler of the program's there, and the KeyboardInterrupt would be raised at
 * the wrong place (test_generators SignalAndYieldFromTest). */
PyObject *fntrace_plain_text(PyObject *v);     /* _native_value.c */
int fntrace_is_plain_object(PyObject *v);

static PyObject *
plain_object_repr(PyObject *v)
{
    if (!fntrace_is_plain_object(v))
        return NULL;
#if PY_VERSION_HEX < 0x030B0000
    return NULL;
#else
    return fntrace_plain_text(v);
#endif
}

/* core/fetch.settings.allow_program_code (--repr): then value_repr calls the program's
 * __repr__, and the Python path decides.  Read from sys.modules and the slot: no
 * bytecode runs. */
static PyObject *g_fetch_settings;   /* core.fetch.settings, found on first use */
static Py_ssize_t off_settings_allow; /* its allow_program_code slot */

/* --repr: may program code run in a callback?  Read from fetch.settings' slot, as the
 * Python twin reads the attribute (a getattr here costs ~400 instructions a call, the
 * type's MRO walked each time; the slot is one load). */
static int
program_code_allowed(void)
{
    if (g_fetch_settings == NULL) {
        PyObject *name = PyUnicode_FromString("fntrace.core.fetch");
        if (name == NULL)
            return -1;
        PyObject *mod = PyImport_GetModule(name);
        Py_DECREF(name);
        if (mod == NULL)
            return PyErr_Occurred() ? -1 : 1;   /* not imported: the Python path */
        PyObject *settings = PyObject_GetAttrString(mod, "settings");
        Py_DECREF(mod);
        if (settings == NULL)
            return -1;
        Py_ssize_t off = slot_offset((PyObject *)Py_TYPE(settings), "allow_program_code");
        if (off < 0) {
            Py_DECREF(settings);
            return -1;
        }
        off_settings_allow = off;
        g_fetch_settings = settings;
    }
    PyObject *on = SLOT(g_fetch_settings, off_settings_allow);
    if (on == Py_True)
        return 1;
    if (on == Py_False || on == NULL)
        return 0;
    return PyObject_IsTrue(on);
}

/* _native_value.c */
PyObject *fntrace_value_text(PyObject *v);

/* safe_repr(v): the native text where the Python twin would give the same (see
 * below), else the Python safe_repr.  New reference. */
static PyObject *
fast_safe_repr(PyObject *v)
{
    /* core/fetch.py value_repr: natively for the built-in scalars and the exact
     * containers of them (_native_value.c); the rest there */
    PyObject *s = fntrace_value_text(v);
    if (s != NULL) {
        /* With --repr value_repr calls repr(): the same text for a scalar whose text
         * was not cut (at most MAX_STRING characters), anything else goes there. */
        if (PyUnicode_GET_LENGTH(s) <= 40 && (v == Py_None || v == Py_True || v == Py_False
                || PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_CheckExact(v)))
            return s;
    }
    else if (PyErr_Occurred())
        return NULL;
    int allowed = program_code_allowed();
    if (allowed < 0) {
        Py_XDECREF(s);
        return NULL;
    }
    if (!allowed) {
        if (s != NULL)
            return s;
        s = plain_object_repr(v);
        if (s != NULL || PyErr_Occurred())
            return s;
    }
    Py_XDECREF(s);
    return PyObject_CallOneArg(g_safe_repr, v);
}

/* value_text(v): fntrace_value_text from Python, None where the Python twin decides
 * (tests compare the two) */
static PyObject *
value_text(PyObject *self, PyObject *v)
{
    PyObject *s = fntrace_value_text(v);
    if (s == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return s;
}

/* _native_frame.c */
PyObject *fntrace_frame_var(PyObject *frame, PyObject *name);
/* _native_encode.c: the trace file's compact record encoding (tracefile/codec.py) */
PyObject *fntrace_encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fntrace_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fntrace_pack_payloads(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fntrace_varints(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

static PyObject *
frame_var(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "frame_var(frame, name)");
        return NULL;
    }
    return fntrace_frame_var(args[0], args[1]);
}

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* _native_value.c */
PyObject *fntrace_ucs4_str(const Py_UCS4 *c, Py_ssize_t n, Py_UCS4 bits);
Py_UCS4 fntrace_ucs4_or(const Py_UCS4 *c, Py_ssize_t n);

/* The payload's characters: a stack buffer, moved to the heap when it fills; `bits`,
 * its characters' bits ORed (the str's kind: fntrace_ucs4_str). */
typedef struct {
    Py_UCS4 *c;
    Py_ssize_t n, cap;
    Py_UCS4 bits;
    Py_UCS4 stack[512];
} ubuf;

static int
ubuf_room(ubuf *b, Py_ssize_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    Py_ssize_t cap = (b->n + more) * 2;
    Py_UCS4 *c = b->c == b->stack ? PyMem_Malloc(cap * sizeof(Py_UCS4))
                                  : PyMem_Realloc(b->c, cap * sizeof(Py_UCS4));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->c == b->stack)
        memcpy(c, b->stack, b->n * sizeof(Py_UCS4));
    b->c = c;
    b->cap = cap;
    return 0;
}

/* s's characters appended (a loop for each kind, not PyUnicode_AsUCS4's general one:
 * a parameter's name, one byte a character, is most of them) */
static int
ubuf_put_str(ubuf *b, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (ubuf_room(b, n) < 0)
        return -1;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_UCS4 *out = b->c + b->n;
    /* (a str is canonical: its kind, and ASCII or not, says the class of its largest) */
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        Py_ssize_t i = 0;
#ifdef __SSE2__
        /* sixteen at a time, widened with zeros */
        const __m128i z = _mm_setzero_si128();
        for (; i + 16 <= n; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
            _mm_storeu_si128((__m128i *)(out + i), _mm_unpacklo_epi16(lo, z));
            _mm_storeu_si128((__m128i *)(out + i + 4), _mm_unpackhi_epi16(lo, z));
            _mm_storeu_si128((__m128i *)(out + i + 8), _mm_unpacklo_epi16(hi, z));
            _mm_storeu_si128((__m128i *)(out + i + 12), _mm_unpackhi_epi16(hi, z));
        }
#endif
        for (; i < n; i++)
            out[i] = p[i];
        b->bits |= PyUnicode_IS_ASCII(s) ? 0 : 0x80;
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *p = (const Py_UCS2 *)data;
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = p[i];
        b->bits |= 0x100;
    }
    else {
        memcpy(out, data, (size_t)n * sizeof(Py_UCS4));
        b->bits |= 0x10000;
    }
    b->n += n;
    return 0;
}

/* _native_value.c */
int fntrace_value_text_buf(PyObject *v, Py_UCS4 *out);

/* fast_safe_repr(val)'s text appended; *allowed: program_code_allowed(), read once
 * when needed (-2 before) */
static int
ubuf_put_value(ubuf *b, PyObject *val, int *allowed)
{
    if (ubuf_room(b, 65) < 0)       /* (MAX_REPR + 1: fntrace_value_text_buf) */
        return -1;
    int n = fntrace_value_text_buf(val, b->c + b->n);
    if (n >= 0) {
        /* as fast_safe_repr: a scalar's uncut text is repr()'s too, the rest is used
         * only when --repr is off */
        int scalar = n <= 40 && (val == Py_None || val == Py_True || val == Py_False
                                 || PyLong_CheckExact(val) || PyFloat_CheckExact(val)
                                 || PyUnicode_CheckExact(val));
        if (!scalar && *allowed == -2 && (*allowed = program_code_allowed()) < 0)
            return -1;
        if (scalar || !*allowed) {
            b->bits |= fntrace_ucs4_or(b->c + b->n, n);
            b->n += n;
            return 0;
        }
    }
    PyObject *r = fast_safe_repr(val);
    if (r == NULL)
        return -1;
    int rc = PyUnicode_Check(r) ? ubuf_put_str(b, r) : 0;
    Py_DECREF(r);
    return rc;
}

/* "name\0repr\0name\0repr..." over the parameters (regs._param_names order), a
 * value unbound yet being None as with f_locals.get().  One str, as the Python twin
 * (tracers/function_graph.py) makes: it is not a container the cyclic GC tracks, so
 * what waits in the buffer does not show in the program's gc.get_objects() (test_descr
 * counts them).  The names come from co_localsplusnames, where the parameters come
 * first: co_varnames would build (and cache) a tuple on the code object.  The text is
 * made in one character buffer, no str per value. */
/* _native_frame.c */
int fntrace_iframe_local(void *iframe, PyObject *code, Py_ssize_t i, PyObject **out);

static PyObject *args_text(PyCodeObject *code, PyObject *frame, void *iframe);

static PyObject *
args_payload(PyObject *frame)
{
    if (frame == NULL || !PyFrame_Check(frame))
        return PyUnicode_FromStringAndSize(NULL, 0);
    PyCodeObject *code = PyFrame_GetCode((PyFrameObject *)frame);
    PyObject *out = args_text(code, frame, NULL);
    Py_DECREF(code);
    return out;
}

/* args_payload of the running interpreter frame `iframe` of `code` (the fast lane's
 * key under sys.monitoring): no frame object made; NULL without an exception where
 * that cannot be read (the caller makes the frame object). */
static PyObject *
args_payload_iframe(void *iframe, PyObject *code)
{
    PyObject *probe;
    if (fntrace_iframe_local(iframe, code, -1, &probe) < 0)
        return NULL;
    return args_text((PyCodeObject *)code, NULL, iframe);
}

/* the payload's text: the values read from `frame`, or from `iframe` when frame is
 * NULL */
static PyObject *
args_text(PyCodeObject *code, PyObject *frame, void *iframe)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *names = Py_NewRef(code->co_localsplusnames);
#else
    PyObject *names = PyCode_GetVarnames(code);
#endif
    PyObject *out = NULL;
    ubuf b;
    b.c = b.stack;
    b.n = 0;
    b.cap = (Py_ssize_t)(sizeof(b.stack) / sizeof(b.stack[0]));
    b.bits = 0;
    int allowed = -2;
    if (names == NULL)
        goto done;
    int npos = code->co_argcount, nkw = code->co_kwonlyargcount, flags = code->co_flags;
    Py_ssize_t order[260];
    int n = 0, i = npos + nkw;
    for (int k = 0; k < npos && n < 256; k++)
        order[n++] = k;
    if (flags & CO_VARARGS)
        order[n++] = i++;
    for (int k = npos; k < npos + nkw && n < 258; k++)
        order[n++] = k;
    if (flags & CO_VARKEYWORDS)
        order[n++] = i;

    for (int k = 0; k < n; k++) {
        if (order[k] >= PyTuple_GET_SIZE(names))
            break;
        PyObject *name = PyTuple_GET_ITEM(names, order[k]);
        PyObject *val = NULL;
        if (frame == NULL) {
            if (fntrace_iframe_local(iframe, (PyObject *)code, order[k], &val) < 0)
                val = NULL;
        }
        else {
            /* no f_locals snapshot: it would keep every local alive (_native_frame.c) */
            val = fntrace_frame_var(frame, name);
            if (val == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_NameError))
                    goto done;
                PyErr_Clear();
            }
        }
        if (val == NULL)
            val = Py_NewRef(Py_None);
        int rc = 0;
        if (k > 0) {
            rc = ubuf_room(&b, 1);
            if (rc == 0)
                b.c[b.n++] = 0;
        }
        if (rc == 0)
            rc = ubuf_put_str(&b, name);
        if (rc == 0)
            rc = ubuf_room(&b, 1);
        if (rc == 0) {
            b.c[b.n++] = 0;
            rc = ubuf_put_value(&b, val, &allowed);
        }
        Py_DECREF(val);
        if (rc < 0)
            goto done;
    }
    out = fntrace_ucs4_str(b.c, b.n, b.bits);
done:
    if (b.c != b.stack)
        PyMem_Free(b.c);
    Py_XDECREF(names);
    return out;
}

/* retval_payload(v, unwind): ints as ints, else a short safe repr ("raised ..." on
 * unwind, in Python). */
static PyObject *
retval_payload(PyObject *v, PyObject *unwind)
{
    if (unwind == Py_True && v != NULL && v != Py_None) {
        /* function_graph.retval_payload's "raised X": the exception's text made here
         * when it can be (a RecursionError leaving a call at the limit cannot call into
         * Python), else by the twin */
        PyObject *s = fntrace_value_text(v);
        if (s != NULL) {
            int allowed = program_code_allowed();
            if (allowed == 0) {
                PyObject *r = PyUnicode_FromFormat("raised %U", s);
                Py_DECREF(s);
                return r;
            }
            Py_DECREF(s);
            if (allowed < 0)
                return NULL;
        }
        else if (PyErr_Occurred())
            return NULL;
    }
    if (unwind == Py_True || v == NULL)
        return PyObject_CallFunctionObjArgs(g_retval_payload, v ? v : Py_None,
                                            unwind ? unwind : Py_False, NULL);
    if (PyLong_CheckExact(v)) {
        /* core/fetch.py int_payload: kept as an int while it fits 64 bits */
        int overflow = 0;
        PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow || (overflow > 0 && _PyLong_NumBits(v) <= 64))
            return Py_NewRef(v);
    }
    return fast_safe_repr(v);
}

/* st.task_vars[gops.idx] (new reference) */
static PyObject *
graph_var(PyObject *gops)
{
    PyObject *st = get_stack(1);
    if (st == NULL)
        return NULL;
    PyObject *idx = PyObject_GetAttr(gops, str_idx);
    if (idx == NULL) {
        Py_DECREF(st);
        return NULL;
    }
    PyObject *tv = PyList_GetItem(SLOT(st, off_st_task_vars), PyLong_AsSsize_t(idx));
    Py_XINCREF(tv);
    Py_DECREF(idx);
    Py_DECREF(st);
    return tv;
}

/* The shadow-stack frame being entered gets `ts` as its calltime (graph_entry). */
static int
set_calltime(long long ts)
{
    PyObject *st = get_stack(0);
    if (st == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *cur = SLOT(st, off_st_cur);
    if (cur != NULL && cur != Py_None) {
        PyObject *v = PyLong_FromLongLong(ts);
        if (v == NULL) {
            Py_DECREF(st);
            return -1;
        }
        set_slot(cur, off_fr_calltime, v);
    }
    Py_DECREF(st);
    return 0;
}

/* A graph record to this thread's buffer, its payload (stolen) beside it when there is
 * one: 0 written, dropped, or the thread ignored since the call's entry (a thread filter
 * changed); -1 on error.  An entry is stamped here, after the set-up (a thread's first
 * buffer, the arguments): one reading, its timestamp and the call's start, so neither
 * counts in the call's duration. */
static inline __attribute__((always_inline)) int
graph_record(PyObject *tr, unsigned type, long long ts, PyObject *func, long long depth,
             unsigned long ov, unsigned long long d, PyObject *payload)
{
    RingBufferObject *buf = cpu_buffer(tr);
    int rc = buf == NULL ? -1 : 0;
    if (buf != NULL && !BUF_IGNORED(buf)) {
        PyObject *ipo = SLOT(func, off_rec_ip);
        unsigned long ip = ipo ? (unsigned long)fast_ll(ipo) : 0;
        if (type == FNT_TRACE_GRAPH_ENT) {
            ts = now_ns();
            rc = set_calltime(ts);
        }
        if (rc == 0) {
            long long w = payload
                ? rb_write_payload(buf, ts, type, ip, (unsigned long)depth, ov, d, payload)
                : rb_write(buf, ts, type, 0, ip, (unsigned long)depth, ov, d);
            rc = w == -2 ? -1 : 0;
        }
    }
    Py_XDECREF(payload);
    Py_XDECREF(buf);
    return rc;
}

/* graph_entry past its start (graph_call): tr the trace array, tv the graph variable. */
static inline __attribute__((always_inline)) PyObject *
graph_entry_in(PyObject *const *args, Py_ssize_t nargs, PyObject *tr, PyObject *tv)
{
    PyObject *trace = args[0], *gops = args[1];
    PyObject *gf = SLOT(tr, off_tr_graph_fops);
    PyObject *cached = gf ? SLOT(gf, off_ops_filter_cached) : NULL;
    PyObject *func = SLOT(trace, off_ent_func);
    long long v = slot_ll(tv, off_tv_value);
    long long depth = slot_ll(trace, off_ent_depth);
    if (v & TRACE_GRAPH_NOTRACE)
        return Py_NewRef(Py_False);
    PyObject *gn = SLOT(tr, off_tr_graph_notrace_fops);
    if (gn && hash_has(SLOT(gn, off_ops_filter_hash), func)) {
        /* skip this function and what it calls; its return clears the bit */
        set_slot(tv, off_tv_value, PyLong_FromLongLong(
            v | TRACE_GRAPH_NOTRACE | ((depth & DEPTH_MASK) << (DEPTH_SHIFT + 20))));
        return Py_NewRef(Py_True);
    }
    if (gf && (!hash_empty(SLOT(gf, off_ops_filter_hash)) || (cached && PyObject_IsTrue(cached)))
            && !(v & TRACE_GRAPH_FL)) {
        if (!hash_has(SLOT(gf, off_ops_filter_hash), func))
            return Py_NewRef(Py_False);
        PyObject *uops = PyObject_GetAttr(gops, str_ops);
        int lazy = uops == gf;
        Py_XDECREF(uops);
        if (lazy)               /* the lazy start: rare, done by the Python twin */
            return PyObject_Vectorcall(g_graph_entry_py, args, nargs, NULL);
        v = v | TRACE_GRAPH_FL | ((depth & DEPTH_MASK) << DEPTH_SHIFT);
        set_slot(tv, off_tv_value, PyLong_FromLongLong(v));
    }
    long long maxd = slot_ll(tr, off_tr_max_graph_depth);
    if (maxd && depth >= maxd)
        return Py_NewRef(Py_False);
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (slot_ll(tr, off_tr_tracing_thresh) || on == NULL || !PyObject_IsTrue(on))
        return Py_NewRef(Py_True);
    PyObject *payload = NULL;
    if (slot_ll(tr, off_tr_graph_args)) {
        /* the arguments ride beside the record */
        payload = args_payload(SLOT(args[2], off_regs_frame));
        if (payload == NULL)
            return NULL;
    }
    if (graph_record(tr, FNT_TRACE_GRAPH_ENT, 0, func, depth, 0, 0, payload) < 0)
        return NULL;
    return Py_NewRef(Py_True);
}

/* graph_return past its start (graph_call) */
static inline __attribute__((always_inline)) PyObject *
graph_return_in(PyObject *const *args, PyObject *tr, PyObject *tv)
{
    PyObject *trace = args[0];
    long long v = slot_ll(tv, off_tv_value);
    long long depth = slot_ll(trace, off_ret_depth);
    if (v & TRACE_GRAPH_NOTRACE) {
        if (((v >> (DEPTH_SHIFT + 20)) & DEPTH_MASK) == depth)
            set_slot(tv, off_tv_value, PyLong_FromLongLong(
                v & ~TRACE_GRAPH_NOTRACE & ~(DEPTH_MASK << (DEPTH_SHIFT + 20))));
        Py_RETURN_NONE;
    }
    if ((v & TRACE_GRAPH_FL) && ((v >> DEPTH_SHIFT) & DEPTH_MASK) == depth)
        set_slot(tv, off_tv_value, PyLong_FromLongLong(
            v & ~TRACE_GRAPH_FL & ~(DEPTH_MASK << DEPTH_SHIFT)));
    long long calltime = slot_ll(trace, off_ret_calltime);
    long long rettime = slot_ll(trace, off_ret_rettime);
    long long thresh = slot_ll(tr, off_tr_tracing_thresh);
    if (thresh && rettime - calltime < thresh)
        Py_RETURN_NONE;
    PyObject *on = SLOT(tr, off_tr_tracing_on);
    if (on == NULL || !PyObject_IsTrue(on))
        Py_RETURN_NONE;
    PyObject *payload = NULL;
    if (slot_ll(tr, off_tr_graph_retval)) {
        /* the return value rides beside the record */
        payload = retval_payload(SLOT(trace, off_ret_retval), SLOT(trace, off_ret_unwind));
        if (payload == NULL)
            return NULL;
    }
    if (graph_record(tr, FNT_TRACE_GRAPH_RET, rettime, SLOT(trace, off_ret_func), depth,
                     (unsigned long)slot_ll(trace, off_ret_overrun),
                     (unsigned long long)calltime, payload) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* graph_entry and graph_return (trace, gops, fregs), one body: `ret` is a constant at
 * each call, as in dispatch's callbacks.  The halves and graph_record are inlined into
 * each: calls of their own cost the profiler+graph pair ~0.4% per traced call. */
static inline __attribute__((always_inline)) PyObject *
graph_call(PyObject *const *args, Py_ssize_t nargs, int ret)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, ret ? "graph_return(trace, gops, fregs)"
                                             : "graph_entry(trace, gops, fregs)");
        return NULL;
    }
    PyObject *tr = PyObject_GetAttr(args[1], str_private);
    if (tr == NULL)
        return NULL;
    if (ll_zero(SLOT(tr, off_tr_sleep_time))) {
        /* sleep-time 0: the thread's CPU clock kept on the shadow stack, by the twin */
        Py_DECREF(tr);
        return PyObject_Vectorcall(ret ? g_graph_return_py : g_graph_entry_py, args, nargs,
                                   NULL);
    }
    if (!ret) {
        /* the thread filters first: an ignored thread's calls are not pushed */
        RingBufferObject *b = cpu_buffer(tr);
        if (b == NULL || BUF_IGNORED(b)) {
            Py_XDECREF(b);
            Py_DECREF(tr);
            return b == NULL ? NULL : Py_NewRef(Py_False);
        }
        Py_DECREF(b);
    }
    PyObject *tv = graph_var(args[1]);
    if (tv == NULL) {
        Py_DECREF(tr);
        return NULL;
    }
    PyObject *r = ret ? graph_return_in(args, tr, tv) : graph_entry_in(args, nargs, tr, tv);
    Py_DECREF(tv);
    Py_DECREF(tr);
    return r;
}

static PyObject *
graph_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return graph_call(args, nargs, 0);
}

static PyObject *
graph_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return graph_call(args, nargs, 1);
}

static PyObject *
set_graph_twins(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "set_graph_twins(graph_entry, safe_repr, retval_payload, graph_return)");
        return NULL;
    }
    Py_XSETREF(g_graph_entry_py, Py_NewRef(args[0]));
    Py_XSETREF(g_safe_repr, Py_NewRef(args[1]));
    Py_XSETREF(g_retval_payload, Py_NewRef(args[2]));
    Py_XSETREF(g_graph_return_py, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyObject *
native_init_fgraph(PyObject *self, PyObject *ns)
{
    PyObject *S_type, *st_type, *fr_type, *ent_type, *ret_type, *ops_type, *hash_type, *tv_type,
             *v;
    GET("S", g_S);
    GET("tls", g_tls);
    GET("shadow_stack", g_shadow_stack);
    GET("fgraph_array", g_fgraph_array);
    GET("contain", g_fg_contain);
    GET("missed", g_fg_missed);
    GET("resume", g_py_fgraph_resume);
    GET("graph_ops", g_graph_ops);
    GET("State", S_type);
    GET("ShadowStack", st_type);
    GET("FgraphFrame", fr_type);
    g_frame_type = (PyTypeObject *)fr_type;
    GET("FtraceGraphEnt", ent_type);
    g_ent_type = (PyTypeObject *)ent_type;
    GET("FtraceGraphRet", ret_type);
    g_ret_type = (PyTypeObject *)ret_type;
    GET("Ops", ops_type);
    GET("FtraceHash", hash_type);
    GET("TaskVar", tv_type);
    GET("MAX_DEPTH", v);
    g_max_depth = PyLong_AsLong(v);
    OFF(S_type, "users", off_S_users);
    OFF(S_type, "epoch", off_S_epoch);
    OFF(st_type, "frames", off_st_frames);
    OFF(st_type, "task_vars", off_st_task_vars);
    OFF(st_type, "overrun", off_st_overrun);
    OFF(st_type, "epoch", off_st_epoch);
    OFF(st_type, "cur", off_st_cur);
    OFF(st_type, "ret", off_st_ret);
    OFF(fr_type, "frame", off_fr_frame);
    OFF(fr_type, "rec", off_fr_rec);
    OFF(fr_type, "depth", off_fr_depth);
    OFF(fr_type, "bitmap", off_fr_bitmap);
    OFF(fr_type, "data", off_fr_data);
    OFF(fr_type, "calltime", off_fr_calltime);
    OFF(ent_type, "func", off_ent_func);
    OFF(ent_type, "depth", off_ent_depth);
    OFF(ret_type, "func", off_ret_func);
    OFF(ret_type, "depth", off_ret_depth);
    OFF(ret_type, "retval", off_ret_retval);
    OFF(ret_type, "calltime", off_ret_calltime);
    OFF(ret_type, "rettime", off_ret_rettime);
    OFF(ret_type, "overrun", off_ret_overrun);
    OFF(ret_type, "unwind", off_ret_unwind);
    OFF(ops_type, "flags", off_ops_flags);
    OFF(ops_type, "filter_hash", off_ops_filter_hash);
    OFF(ops_type, "notrace_hash", off_ops_notrace_hash);
    OFF(ops_type, "filter_cached", off_ops_filter_cached);
    OFF(hash_type, "entries", off_hash_entries);
    OFF(tv_type, "value", off_tv_value);
    Py_RETURN_NONE;
}

