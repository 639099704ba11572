/* -- OtlpCalls: the OpenTelemetry export's spans -------------------------------------
 *
 * The native twin of output/otlp.py's loop for a trace of calls (the blocks text_ok
 * accepts, or graph_events_ok's with no --otel-context event: the events and markers
 * are passed over, as the loop passes them):
 * the records merged by time as GraphText merges them, each slot's calls paired as
 * CallBuilder pairs them, losses included (read_pair.c.h, as CallRows), and each call
 * that lasted ``min_ns`` or more written as its span when it ends, OTLP/JSON as
 * protobuf's json_format writes it, ``batch`` spans a line:
 *
 *     PREFIX {span},{span},... SUFFIX \n        PREFIX: '{"resourceSpans":[{... "spans":['
 *
 * A span's id is otlp.py's span_id (a 64-bit mix of the process, slot, depth and
 * start); its parent's is made from the frame open under it when it ends, which is
 * the parent call (output/calls.py's parent_key).  Names, code attributes and thread
 * attributes come as JSON text made by the Python side (json.dumps), so strings are
 * escaped exactly as the Python loop escapes them.  With ``values`` (a -A/-R trace)
 * a span carries ``fntrace.args`` (function_args_text) and ``fntrace.retval`` (str),
 * escaped here as json.dumps(ensure_ascii=False) does, and a return value "raised ..."
 * is the span's error status.
 */

typedef struct {
    const char *tail;       /* ',{"key":"thread.id",...},{"key":"thread.name",...}' */
    Py_ssize_t tail_len;
} oslot_t;

typedef struct {
    PyObject_HEAD
    merge_t m;
    pair_t pr;
    oslot_t *os;
    names_t names;          /* id -> its name as a JSON string */
    names_t code;           /* id -> ',{code.file.path},{code.line.number}' */
    PyObject *keep;
    PyObject *canon;
    const char *prefix, *suffix, *trace_id;
    Py_ssize_t prefix_len, suffix_len;
    tbuf_t t;
    uint64_t pid;
    int64_t min_ns, offset, wall_ns;
    int has_offset, guessed;
    Py_ssize_t batch, in_line;
    int done;
    int values;             /* the blocks come with their payloads */
    tbuf_t a;               /* an argument text being made */
    uint64_t total, kept;
    long long lost;
} OtlpCalls;

/* otlp.py's span_id: splitmix64's finalizer over the four values */
static inline uint64_t
otlp_mix(uint64_t h)
{
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
    return h ^ (h >> 31);
}

static inline uint64_t
otlp_span_id(uint64_t pid, uint64_t cpu, uint64_t depth, uint64_t start)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    h = otlp_mix((h ^ pid) + 0x9E3779B97F4A7C15ULL);
    h = otlp_mix((h ^ cpu) + 0x9E3779B97F4A7C15ULL);
    h = otlp_mix((h ^ depth) + 0x9E3779B97F4A7C15ULL);
    h = otlp_mix((h ^ start) + 0x9E3779B97F4A7C15ULL);
    return h ? h : 1;
}

static inline void
put_hex16(tbuf_t *t, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char *p = t->buf + t->blen;
    for (int i = 15; i >= 0; i--) {
        p[i] = hex[v & 15];
        v >>= 4;
    }
    t->blen += 16;
}

static inline void
put_i64(tbuf_t *t, int64_t v)
{
    char *p = t->buf + t->blen;
    if (v < 0) {
        *p++ = '-';
        p += u64_text(p, (uint64_t)0 - (uint64_t)v);
    } else {
        p += u64_text(p, (uint64_t)v);
    }
    t->blen = p - t->buf;
}

static int
oc_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    OtlpCalls *c = (OtlpCalls *)ctx;
    c->total++;
    if (p->end - p->start < c->min_ns)
        return 0;
    char tmp[24];
    Py_ssize_t nlen, clen;
    const char *name = names_get(&c->names, p->id, &nlen, tmp, "\"0x%x\"");
    char ctmp[24];
    const char *code = names_get(&c->code, p->id, &clen, ctmp, "%.0u");
    if (code == ctmp)
        clen = 0;           /* no code attributes */
    oslot_t *s = &c->os[slot];
    /* the arguments' text first (function_args_text), then room for all of it */
    Py_ssize_t more = 0;
    if (p->args != NULL) {
        c->a.blen = 0;
        if (tb_reserve(&c->a, 2 * p->alen + 4) < 0)
            return -1;
        put_args_text(&c->a, p->args, p->alen);
        more += 6 * c->a.blen + 64;
    }
    if (p->ret.has)
        more += 2 * 6 * p->ret.len + 160;
    if (tb_reserve(&c->t, 400 + 2 * nlen + clen + s->tail_len + c->prefix_len
                   + c->suffix_len + more) < 0)
        return -1;
    tbuf_t *t = &c->t;
    if (c->in_line == 0)
        tb_put(t, c->prefix, c->prefix_len);
    else
        TB_LIT(t, ",");
    TB_LIT(t, "{\"traceId\":\"");
    tb_put(t, c->trace_id, 32);
    TB_LIT(t, "\",\"spanId\":\"");
    put_hex16(t, otlp_span_id(c->pid, (uint64_t)slot, (uint64_t)p->depth, (uint64_t)p->start));
    call_frame_t *top = pair_top(&c->pr, slot);
    if (top != NULL) {
        TB_LIT(t, "\",\"parentSpanId\":\"");
        put_hex16(t, otlp_span_id(c->pid, (uint64_t)slot, (uint64_t)top->depth,
                                  (uint64_t)top->start));
    }
    TB_LIT(t, "\",\"name\":");
    tb_put(t, name, nlen);
    TB_LIT(t, ",\"kind\":1");
    /* (json_format leaves out what is 0: a time before the recording's start) */
    int64_t st = p->start + c->offset, en = p->end + c->offset;
    if (st > 0) {
        TB_LIT(t, ",\"startTimeUnixNano\":\"");
        put_i64(t, st);
        TB_LIT(t, "\"");
    }
    if (en > 0) {
        TB_LIT(t, ",\"endTimeUnixNano\":\"");
        put_i64(t, en);
        TB_LIT(t, "\"");
    }
    TB_LIT(t, ",\"attributes\":[{\"key\":\"code.function.name\",\"value\":{\"stringValue\":");
    tb_put(t, name, nlen);
    TB_LIT(t, "}}");
    tb_put(t, s->tail, s->tail_len);
    tb_put(t, code, clen);
    if (p->args != NULL) {
        TB_LIT(t, ",{\"key\":\"fntrace.args\",\"value\":{\"stringValue\":");
        put_json_str(t, 0, c->a.buf, c->a.blen);
        TB_LIT(t, "}}");
    }
    const char *raised = NULL;
    Py_ssize_t raised_len = 0;
    if (p->ret.has) {
        TB_LIT(t, ",{\"key\":\"fntrace.retval\",\"value\":{\"stringValue\":");
        if (p->ret.kind == PAY_INT) {
            char num[32];
            int n = PyOS_snprintf(num, sizeof(num), "%lld", (long long)p->ret.iv);
            put_json_str(t, 0, num, n);
        } else {
            put_json_str(t, 0, p->ret.s, p->ret.len);
            /* _status_error: "raised" or "raised <what>" */
            if (p->ret.len >= 6 && !memcmp(p->ret.s, "raised", 6)
                    && (p->ret.len == 6 || p->ret.s[6] == ' ')) {
                raised = p->ret.s + (p->ret.len == 6 ? 6 : 7);
                raised_len = p->ret.len - (p->ret.len == 6 ? 6 : 7);
            }
        }
        TB_LIT(t, "}}");
    }
    if (!p->complete)
        TB_LIT(t, ",{\"key\":\"fntrace.incomplete\",\"value\":{\"boolValue\":true}}");
    TB_LIT(t, "]");
    if (raised != NULL) {
        /* Status: json_format leaves out an empty message */
        TB_LIT(t, ",\"status\":{");
        if (raised_len) {
            TB_LIT(t, "\"message\":");
            put_json_str(t, 0, raised, raised_len);
            TB_LIT(t, ",");
        }
        TB_LIT(t, "\"code\":2}");
    }
    TB_LIT(t, "}");
    c->kept++;
    if (++c->in_line >= c->batch) {
        tb_put(t, c->suffix, c->suffix_len);
        c->in_line = 0;
    }
    return 0;
}

/* step() -> (text, need): the next piece of the export's text, UTF-8 (b"" when there is
 * none now); need: the slot to feed before more (-1: none); (b"", -1): done */
static PyObject *
oc_step(OtlpCalls *c, PyObject *unused)
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
            if (pair_end(&c->pr, &c->m) < 0)
                return NULL;
            if (c->in_line) {
                if (tb_reserve(&c->t, c->suffix_len) < 0)
                    return NULL;
                tb_put(&c->t, c->suffix, c->suffix_len);
                c->in_line = 0;
            }
            c->done = 1;
            break;
        }
        if (!c->has_offset) {
            /* no clock pair: the trace's first event is the recording's start */
            c->offset = c->wall_ns - (int64_t)r.ts;
            c->has_offset = 1;
            c->guessed = 1;
        }
        if (pair_marks(&c->pr, &c->m, best) < 0)
            return NULL;
        if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT || r.type == FNT_TRACE_FN)
            continue;           /* (no span: the caller checked none is --otel-context's;
                                 * a function tracer hit has no duration) */
        uint32_t cid = id;
        if (canon_lookup(c->canon, &cid) < 0)
            return NULL;
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        pvalue_t v = record_value(&c->m, best, &r, c->values);
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (pair_enter_close(&c->pr, best, depth, ts) < 0
                    || pair_push(&c->pr, best, id, cid, depth, ts, 0) < 0
                    || pair_entry_value(&c->pr, best, &v) < 0)
                return NULL;
        } else if (pair_return_value(&c->pr, best, id, cid, depth, ts, (int64_t)r.d, &v) < 0) {
            return NULL;
        }
    }
    /* UTF-8 bytes: a file written in UTF-8 takes them as they are (gigabytes of
     * spans are not decoded here only to be encoded again) */
    PyObject *text = PyBytes_FromStringAndSize(c->t.buf, c->t.blen);
    if (text == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", text, need);
}

static PyObject *
oc_feed(OtlpCalls *c, PyObject *const *args, Py_ssize_t nargs)
{
    return merge_feed(&c->m, args, nargs, &c->lost);
}

/* counts() -> (calls, spans written, whether the clock's offset was guessed) */
static PyObject *
oc_counts(OtlpCalls *c, PyObject *unused)
{
    return Py_BuildValue("(KKO)", (unsigned long long)c->total, (unsigned long long)c->kept,
                         c->guessed ? Py_True : Py_False);
}

static const char *
oc_keep(OtlpCalls *c, PyObject *s, Py_ssize_t *len)
{
    PyObject *b = PyUnicode_AsUTF8String(s);
    if (b == NULL || PyList_Append(c->keep, b) < 0) {
        Py_XDECREF(b);
        return NULL;
    }
    Py_DECREF(b);
    *len = PyBytes_GET_SIZE(b);
    return PyBytes_AS_STRING(b);
}

/* OtlpCalls(slots, names, code, canon, tails, prefix, suffix, trace_id, pid, min_ns,
 * offset, wall_ns, batch, values=False): names id -> the name as a JSON string, code id -> its code
 * attributes' JSON (ids without: none), canon as StatWalk's, tails slot -> its thread
 * attributes' JSON, trace_id 32 hex digits, offset None: made from wall_ns and the
 * first span's start */
static int
oc_init(OtlpCalls *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, batch;
    PyObject *names, *code, *canon, *tails, *prefix, *suffix, *trace_id, *offset;
    unsigned long long pid;
    long long min_ns, wall_ns;
    int values = 0;
    if (!PyArg_ParseTuple(args, "nO!O!OO!UUUKLOLn|p:OtlpCalls", &nslots, &PyDict_Type, &names,
                          &PyDict_Type, &code, &canon, &PyDict_Type, &tails, &prefix, &suffix,
                          &trace_id, &pid, &min_ns, &offset, &wall_ns, &batch, &values))
        return -1;
    c->values = values;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || batch < 1) {
        PyErr_SetString(PyExc_ValueError, "OtlpCalls: bad slots or batch (or made twice)");
        return -1;
    }
    if (canon != Py_None) {
        if (!PyDict_Check(canon)) {
            PyErr_SetString(PyExc_TypeError, "OtlpCalls: canon is a dict or None");
            return -1;
        }
        if (PyDict_GET_SIZE(canon))
            c->canon = Py_NewRef(canon);
    }
    c->keep = PyList_New(0);
    if (c->keep == NULL)
        return -1;
    Py_ssize_t tlen;
    if ((c->prefix = oc_keep(c, prefix, &c->prefix_len)) == NULL
            || (c->suffix = oc_keep(c, suffix, &c->suffix_len)) == NULL
            || (c->trace_id = oc_keep(c, trace_id, &tlen)) == NULL)
        return -1;
    if (tlen != 32) {
        PyErr_SetString(PyExc_ValueError, "OtlpCalls: trace_id is 32 hex digits");
        return -1;
    }
    if (offset != Py_None) {
        c->offset = PyLong_AsLongLong(offset);
        if (c->offset == -1 && PyErr_Occurred())
            return -1;
        c->has_offset = 1;
    }
    c->pid = pid;
    c->min_ns = min_ns;
    c->wall_ns = wall_ns;
    c->batch = batch;
    if (names_init(&c->names, names) < 0 || names_init(&c->code, code) < 0)
        return -1;
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->os = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(oslot_t));
    if (c->os == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(tails, &pos, &k, &v)) {
        Py_ssize_t slot = PyLong_AsSsize_t(k);
        if (slot == -1 && PyErr_Occurred())
            return -1;
        if (slot < 0 || slot >= nslots || !PyUnicode_Check(v))
            continue;
        if ((c->os[slot].tail = oc_keep(c, v, &c->os[slot].tail_len)) == NULL)
            return -1;
    }
    return pair_init(&c->pr, nslots, oc_emit, c);
}

static void
oc_dealloc(OtlpCalls *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    merge_free(&c->m);
    pair_free(&c->pr);
    names_free(&c->names);
    names_free(&c->code);
    PyMem_Free(c->os);
    PyMem_Free(c->t.buf);
    PyMem_Free(c->a.buf);
    Py_XDECREF(c->keep);
    Py_XDECREF(c->canon);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyMethodDef oc_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))oc_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase]): a slot's next block, or that it has no more"},
    {"step", (PyCFunction)oc_step, METH_NOARGS,
     "step() -> (text, need): the export's next text (UTF-8), and the slot to feed (-1: none)"},
    {"counts", (PyCFunction)oc_counts, METH_NOARGS,
     "counts() -> (calls, spans written, offset guessed)"},
    {NULL}
};

static PyType_Slot oc_slots[] = {
    {Py_tp_doc, "OtlpCalls(...): the OTLP/JSON spans of a trace file of calls "
                "(output/otlp.py's twin)"},
    {Py_tp_init, oc_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, oc_dealloc},
    {Py_tp_methods, oc_methods},
    {0, NULL},
};

static PyType_Spec oc_spec = {
    "fntrace._native.OtlpCalls", sizeof(OtlpCalls), 0, Py_TPFLAGS_DEFAULT, oc_slots,
};
