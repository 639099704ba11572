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
 *
 * With ``proto`` the same spans are OTLP protobuf, as the Collector's file exporter
 * writes them (``format: proto``): each batch one ExportTraceServiceRequest after its
 * length, 4 bytes big-endian; the fields of every message in field-number order, as
 * the protobuf runtime serializes them (the Python loop's SerializeToString):
 *
 *     len32 | 0a LEN ResourceSpans{ PREFIX | 12 LEN ScopeSpans{ SUFFIX | 12 LEN Span ... } }
 *             PREFIX: the resource field (0a LEN Resource), SUFFIX: the scope's (0a LEN)
 *
 * A batch's spans are made in ``sp`` first: the lengths around them are known at its
 * end.  Names come as text, thread and code attributes as their fields' bytes.
 */

typedef struct {
    const char *tail;       /* ',{"key":"thread.id",...},{"key":"thread.name",...}' */
    Py_ssize_t tail_len;
} oslot_t;

typedef struct {
    MERGE_WALK_HEAD
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
    int proto;              /* OTLP protobuf, not JSON */
    tbuf_t sp;              /* proto: the spans of the batch being made */
    Py_ssize_t t_off;       /* proto: where the step's text starts in ``t`` */
    uint8_t tid_raw[16];
    uint64_t total, kept;
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

/* What both forms of a span start with: the call counted, and 0 when it is shorter
 * than min_ns; else 1, its name (``fmt`` for an id without one) and code attributes
 * (none: clen 0) in ``o``, its arguments' text (function_args_text) in c->a. */
typedef struct {
    const char *name, *code;
    Py_ssize_t nlen, clen;
    char tmp[24], ctmp[24];
} ospan_t;

static int
oc_span_start(OtlpCalls *c, const paired_t *p, ospan_t *o, const char *fmt)
{
    c->total++;
    if (p->end - p->start < c->min_ns)
        return 0;
    o->name = names_get(&c->names, p->id, &o->nlen, o->tmp, fmt);
    o->code = names_get(&c->code, p->id, &o->clen, o->ctmp, "%.0u");
    if (o->code == o->ctmp)
        o->clen = 0;
    c->a.blen = 0;
    if (p->args != NULL) {
        if (tb_reserve(&c->a, 2 * p->alen + 4) < 0)
            return -1;
        put_args_text(&c->a, p->args, p->alen);
    }
    return 1;
}

/* _status_error: the exception's text of a return value "raised" or "raised <what>"
 * (NULL: the call returned) */
static const char *
oc_raised(const paired_t *p, Py_ssize_t *len)
{
    if (p->ret.kind == PAY_INT || p->ret.len < 6 || memcmp(p->ret.s, "raised", 6)
            || (p->ret.len > 6 && p->ret.s[6] != ' '))
        return NULL;
    Py_ssize_t skip = p->ret.len == 6 ? 6 : 7;
    *len = p->ret.len - skip;
    return p->ret.s + skip;
}

static int
oc_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    OtlpCalls *c = (OtlpCalls *)ctx;
    ospan_t o;
    int go = oc_span_start(c, p, &o, "\"0x%x\"");
    if (go <= 0)
        return go;
    const char *name = o.name, *code = o.code;
    Py_ssize_t nlen = o.nlen, clen = o.clen;
    oslot_t *s = &c->os[slot];
    /* room for all of it */
    Py_ssize_t more = p->args != NULL ? 6 * c->a.blen + 64 : 0;
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
            raised = oc_raised(p, &raised_len);
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

/* -- proto ------------------------------------------------------------------------ */

/* The writers below put a field at ``p`` (the caller reserved room) and return the
 * byte after it: a local pointer, where a store through the buffer's own would make
 * the compiler reload it after every byte. */

static inline uint8_t *
pb_len(uint8_t *p, uint8_t tag, uint64_t n)
{
    *p++ = tag;
    return p + pb_varint(p, n);
}

static inline uint8_t *
pb_raw(uint8_t *p, const void *s, Py_ssize_t n)
{
    memcpy(p, s, (size_t)n);
    return p + n;
}

/* 8 bytes, little-endian (``be``: big-endian), in one store where the host allows */
static inline void
pb_put64(uint8_t *p, uint64_t v, int be)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (be)
        v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
#else
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * (be ? 7 - i : i)));
#endif
}

static inline uint8_t *
pb_fixed64(uint8_t *p, uint8_t tag, uint64_t v)
{
    *p++ = tag;
    pb_put64(p, v, 0);
    return p + 8;
}

static inline uint8_t *
pb_id(uint8_t *p, uint8_t tag, uint64_t v)
{
    *p++ = tag;
    *p++ = 8;
    pb_put64(p, v, 1);                              /* big-endian, as its hex */
    return p + 8;
}

/* a span's attribute: 4a LEN KeyValue{0a key, 12 LEN AnyValue{0a string}} */
static inline uint8_t *
pb_str_attr(uint8_t *p, const char *key, Py_ssize_t klen, const char *s, Py_ssize_t n)
{
    Py_ssize_t av = 1 + pb_varint_len((uint64_t)n) + n;
    Py_ssize_t kv = 1 + pb_varint_len((uint64_t)klen) + klen + 1
                    + pb_varint_len((uint64_t)av) + av;
    p = pb_len(p, 0x4a, (uint64_t)kv);
    p = pb_len(p, 0x0a, (uint64_t)klen);
    p = pb_raw(p, key, klen);
    p = pb_len(p, 0x12, (uint64_t)av);
    p = pb_len(p, 0x0a, (uint64_t)n);
    return pb_raw(p, s, n);
}

#define PB_LIT(p, lit) pb_raw((p), (lit), (Py_ssize_t)sizeof(lit) - 1)
#define PB_STR_ATTR(p, lit, s, n) pb_str_attr((p), (lit), (Py_ssize_t)sizeof(lit) - 1, (s), (n))

/* Room kept before a batch's spans in ``sp`` for what goes in front of them: the
 * length, the request's, the ResourceSpans' and the ScopeSpans' tags and lengths */
#define PB_HEAD_ROOM(c) (4 + 2 * 11 + (c)->prefix_len + (c)->suffix_len)

/* the batch made: its request, after its length, into the step's text.  The head is
 * written into the room before the spans, so the request is copied once. */
static int
oc_frame(OtlpCalls *c)
{
    Py_ssize_t room = PB_HEAD_ROOM(c);
    Py_ssize_t spans = c->sp.blen - room;
    Py_ssize_t ss = c->suffix_len + spans;
    Py_ssize_t rs = c->prefix_len + 1 + pb_varint_len((uint64_t)ss) + ss;
    Py_ssize_t req = 1 + pb_varint_len((uint64_t)rs) + rs;
    if (req > 0xffffffffLL) {
        PyErr_SetString(PyExc_OverflowError, "OtlpCalls: a batch over 4 GB");
        return -1;
    }
    Py_ssize_t head = 4 + req - spans;
    uint8_t *p = (uint8_t *)c->sp.buf + room - head, *start = p;
    for (int i = 3; i >= 0; i--)
        *p++ = (uint8_t)((uint64_t)req >> (8 * i));
    p = pb_len(p, 0x0a, (uint64_t)rs);
    p = pb_raw(p, c->prefix, c->prefix_len);
    p = pb_len(p, 0x12, (uint64_t)ss);
    p = pb_raw(p, c->suffix, c->suffix_len);
    assert(p == (uint8_t *)c->sp.buf + room);
    if (c->t.blen == 0) {
        /* the step's text is this request: the buffers change places (no copy) */
        tbuf_t t = c->t;
        c->t = c->sp;
        c->t_off = (const char *)start - c->t.buf;
        c->sp = t;
    } else {
        if (tb_reserve(&c->t, 4 + req) < 0)
            return -1;
        tb_put(&c->t, (const char *)start, 4 + req);
    }
    c->sp.blen = 0;
    c->in_line = 0;
    return 0;
}

static int
oc_emit_pb(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    OtlpCalls *c = (OtlpCalls *)ctx;
    ospan_t o;
    int go = oc_span_start(c, p, &o, "0x%x");
    if (go <= 0)
        return go;
    const char *name = o.name, *code = o.code;
    Py_ssize_t nlen = o.nlen, clen = o.clen;
    oslot_t *s = &c->os[slot];
    Py_ssize_t more = p->args != NULL ? c->a.blen + 64 : 0;
    if (p->ret.has)
        more += 2 * p->ret.len + 160;
    tbuf_t *sp = &c->sp;
    if (c->in_line == 0) {
        sp->blen = 0;
        if (tb_reserve(sp, PB_HEAD_ROOM(c)) < 0)
            return -1;
        sp->blen = PB_HEAD_ROOM(c);
    }
    if (tb_reserve(sp, 210 + 2 * nlen + clen + s->tail_len + more) < 0)
        return -1;
    /* 12 LEN Span: two bytes kept for the length, which is mostly 128..16383 */
    uint8_t *at = (uint8_t *)sp->buf + sp->blen;
    uint8_t *q = at + 3;
    q = pb_len(q, 0x0a, 16);
    q = pb_raw(q, c->tid_raw, 16);
    q = pb_id(q, 0x12, otlp_span_id(c->pid, (uint64_t)slot, (uint64_t)p->depth,
                                   (uint64_t)p->start));
    call_frame_t *top = pair_top(&c->pr, slot);
    if (top != NULL)
        q = pb_id(q, 0x22, otlp_span_id(c->pid, (uint64_t)slot, (uint64_t)top->depth,
                                       (uint64_t)top->start));
    q = pb_len(q, 0x2a, (uint64_t)nlen);
    q = pb_raw(q, name, nlen);
    q = PB_LIT(q, "\x30\x01");                      /* kind: SPAN_KIND_INTERNAL */
    /* (proto3 leaves out what is 0: a time before the recording's start) */
    int64_t st = p->start + c->offset, en = p->end + c->offset;
    if (st > 0)
        q = pb_fixed64(q, 0x39, (uint64_t)st);
    if (en > 0)
        q = pb_fixed64(q, 0x41, (uint64_t)en);
    q = PB_STR_ATTR(q, "code.function.name", name, nlen);
    q = pb_raw(q, s->tail, s->tail_len);
    q = pb_raw(q, code, clen);
    if (p->args != NULL)
        q = PB_STR_ATTR(q, "fntrace.args", c->a.buf, c->a.blen);
    const char *raised = NULL;
    Py_ssize_t raised_len = 0;
    if (p->ret.has) {
        if (p->ret.kind == PAY_INT) {
            char num[32];
            int n = PyOS_snprintf(num, sizeof(num), "%lld", (long long)p->ret.iv);
            q = PB_STR_ATTR(q, "fntrace.retval", num, n);
        } else {
            q = PB_STR_ATTR(q, "fntrace.retval", p->ret.s, p->ret.len);
            raised = oc_raised(p, &raised_len);
        }
    }
    if (!p->complete)       /* 4a LEN {0a "fntrace.incomplete", 12 02 {10 01}} */
        q = PB_LIT(q, "\x4a\x18\x0a\x12" "fntrace.incomplete" "\x12\x02\x10\x01");
    if (raised != NULL) {
        /* 7a LEN Status{12 message (left out when empty), 18 02: STATUS_CODE_ERROR} */
        Py_ssize_t st_len = 2 + (raised_len ? 1 + pb_varint_len((uint64_t)raised_len)
                                 + raised_len : 0);
        q = pb_len(q, 0x7a, (uint64_t)st_len);
        if (raised_len) {
            q = pb_len(q, 0x12, (uint64_t)raised_len);
            q = pb_raw(q, raised, raised_len);
        }
        q = PB_LIT(q, "\x18\x02");
    }
    Py_ssize_t len = q - (at + 3);
    Py_ssize_t lsize = pb_varint_len((uint64_t)len);
    if (lsize != 2)
        memmove(at + 1 + lsize, at + 3, (size_t)len);
    pb_len(at, 0x12, (uint64_t)len);
    sp->blen += 1 + lsize + len;
    c->kept++;
    if (++c->in_line >= c->batch)
        return oc_frame(c);
    return 0;
}

static int
oc_record(void *walk, Py_ssize_t best, Py_ssize_t *need)
{
    OtlpCalls *c = walk;
    record_t r;
    uint32_t id;
    merge_take(&c->m, best, &r, &id);
    if (!c->has_offset) {
        /* no clock pair: the trace's first event is the recording's start */
        c->offset = c->wall_ns - (int64_t)r.ts;
        c->has_offset = 1;
        c->guessed = 1;
    }
    if (pair_marks(&c->pr, &c->m, best) < 0)
        return -1;
    if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT || r.type == FNT_TRACE_FN)
        return 0;               /* (no span: the caller checked none is --otel-context's;
                                 * a function tracer hit has no duration) */
    uint32_t cid = id;
    if (canon_lookup(c->canon, &cid) < 0)
        return -1;
    pvalue_t v = record_value(&c->m, best, &r, c->values);
    return pair_record(&c->pr, best, &r, id, cid, &v);
}

/* the losses nothing was read after, builder.finish(), then the last batch's end */
static int
oc_end(void *walk)
{
    OtlpCalls *c = walk;
    if (pair_end(&c->pr, &c->m) < 0)
        return -1;
    if (c->in_line && c->proto)
        return oc_frame(c);
    if (c->in_line) {
        if (tb_reserve(&c->t, c->suffix_len) < 0)
            return -1;
        tb_put(&c->t, c->suffix, c->suffix_len);
        c->in_line = 0;
    }
    return 0;
}

/* step() -> (text, need): the next piece of the export's text, UTF-8 (b"" when there is
 * none now); need: the slot to feed before more (-1: none); (b"", -1): done */
static PyObject *
oc_step(OtlpCalls *c, PyObject *unused)
{
    Py_ssize_t need;
    c->t_off = 0;
    if (merge_step(&c->m, &c->t, &c->done, &need, c, oc_record, oc_end) < 0)
        return NULL;
    /* UTF-8 bytes: a file written in UTF-8 takes them as they are (gigabytes of
     * spans are not decoded here only to be encoded again) */
    return step_out(PyBytes_FromStringAndSize(c->t.buf + c->t_off, c->t.blen - c->t_off),
                    need);
}

/* counts() -> (calls, spans written, whether the clock's offset was guessed) */
static PyObject *
oc_counts(OtlpCalls *c, PyObject *unused)
{
    return Py_BuildValue("(KKO)", (unsigned long long)c->total, (unsigned long long)c->kept,
                         c->guessed ? Py_True : Py_False);
}

/* the UTF-8 of a str, or a bytes object (proto's fields) as it is */
static const char *
oc_keep(OtlpCalls *c, PyObject *s, Py_ssize_t *len)
{
    return kept_bytes(c->keep, PyBytes_Check(s) ? Py_NewRef(s) : PyUnicode_AsUTF8String(s),
                      len);
}

/* OtlpCalls(slots, names, code, canon, tails, prefix, suffix, trace_id, pid, min_ns,
 * offset, wall_ns, batch, values=False, proto=False): names id -> the name as a JSON
 * string, code id -> its code attributes' JSON (ids without: none), canon as StatWalk's,
 * tails slot -> its thread attributes' JSON, trace_id 32 hex digits, offset None: made
 * from wall_ns and the first span's start.  proto: names are the names, code and tails
 * their attribute fields' bytes, prefix and suffix the resource's and the scope's */
static int
oc_init(OtlpCalls *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, batch;
    PyObject *names, *code, *canon, *tails, *prefix, *suffix, *trace_id, *offset;
    unsigned long long pid;
    long long min_ns, wall_ns;
    int values = 0, proto = 0;
    if (!PyArg_ParseTuple(args, "nO!O!OO!OOUKLOLn|pp:OtlpCalls", &nslots, &PyDict_Type, &names,
                          &PyDict_Type, &code, &canon, &PyDict_Type, &tails, &prefix, &suffix,
                          &trace_id, &pid, &min_ns, &offset, &wall_ns, &batch, &values,
                          &proto))
        return -1;
    c->values = values;
    c->proto = proto;
    if (!(PyUnicode_Check(prefix) || PyBytes_Check(prefix))
            || !(PyUnicode_Check(suffix) || PyBytes_Check(suffix))) {
        PyErr_SetString(PyExc_TypeError, "OtlpCalls: prefix and suffix are str or bytes");
        return -1;
    }
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || batch < 1) {
        PyErr_SetString(PyExc_ValueError, "OtlpCalls: bad slots or batch (or made twice)");
        return -1;
    }
    if (canon_arg(canon, &c->canon, "OtlpCalls") < 0)
        return -1;
    c->keep = PyList_New(0);
    if (c->keep == NULL)
        return -1;
    Py_ssize_t tlen;
    if ((c->prefix = oc_keep(c, prefix, &c->prefix_len)) == NULL
            || (c->suffix = oc_keep(c, suffix, &c->suffix_len)) == NULL
            || (c->trace_id = oc_keep(c, trace_id, &tlen)) == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < tlen; i++) {
        int h = c->trace_id[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
        if (d < 0)
            tlen = -1;
        else if (i < 32)
            c->tid_raw[i / 2] = (uint8_t)(c->tid_raw[i / 2] << 4 | d);
    }
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
    Py_ssize_t pos = 0, slot;
    PyObject *v;
    int more;
    while ((more = slot_item(tails, nslots, &pos, &slot, &v)) > 0) {
        if (!(PyUnicode_Check(v) || PyBytes_Check(v)))
            continue;
        if ((c->os[slot].tail = oc_keep(c, v, &c->os[slot].tail_len)) == NULL)
            return -1;
    }
    if (more < 0)
        return -1;
    return pair_init(&c->pr, nslots, proto ? oc_emit_pb : oc_emit, c);
}

static void
oc_dealloc(OtlpCalls *c)
{
    merge_free(&c->m);
    pair_free(&c->pr);
    names_free(&c->names);
    names_free(&c->code);
    PyMem_Free(c->os);
    PyMem_Free(c->t.buf);
    PyMem_Free(c->a.buf);
    PyMem_Free(c->sp.buf);
    Py_XDECREF(c->keep);
    Py_XDECREF(c->canon);
    read_free((PyObject *)c);
}

static PyMethodDef oc_methods[] = {
    MERGE_FEED_METHOD,
    {"step", (PyCFunction)oc_step, METH_NOARGS,
     "step() -> (text, need): the export's next text (UTF-8), and the slot to feed (-1: none)"},
    {"counts", (PyCFunction)oc_counts, METH_NOARGS,
     "counts() -> (calls, spans written, offset guessed)"},
    {NULL}
};

READ_TYPE(oc, OtlpCalls,
          "OtlpCalls(...): the OTLP/JSON or protobuf spans of a trace file of calls "
          "(output/otlp.py's twin)");
