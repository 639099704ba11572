/* -- GraphText: function_graph's text ------------------------------------------------
 *
 * The native twin of output/function_graph.py's GraphPrinter over a trace file's
 * records merged by time (output/reader.py's entries_from_file), for what a trace of
 * calls holds: graph entries and returns, and the buffers' losses.  The caller checks
 * first (``text_ok``) that every block is of that kind and the options are ones this
 * printer has (cpu, overhead, proc, duration, abstime, tail); anything else is printed
 * by the Python printer.
 *
 * The merge is heapq.merge's: the least (time, slot) of the slots' next records, a
 * slot's records in their order; a loss note goes out just before the first record
 * read after it, or after everything when nothing was read after it.  The leaf test
 * (get_return_for_leaf) peeks at the slot's next item, which the slot's blocks hold:
 * where the Python printer holds an entry back until its slot's next item arrives,
 * this one reads that item from the slot itself, and the lines come out in the same
 * order.  When a slot's next item is in a block not fed yet, ``step`` asks for it.
 */

typedef struct {
    MERGE_WALK_HEAD
    int o_cpu, o_overhead, o_proc, o_duration, o_abstime, o_tail;
    int o_args, o_retval, o_retval_hex;
    int cpu_width;
    names_t names;
    PyObject *keep;         /* the procs' bytes objects */
    PyObject *canon;
    tbuf_t t;               /* the text made by this step */
    int done;
} GraphText;

static void
put_duration(GraphText *g, int64_t dur)
{
    char *p = g->t.buf + g->t.blen;
    char mark = ' ';
    if (g->o_overhead) {
        if (dur > 1000000000LL) mark = '$';
        else if (dur > 100000000LL) mark = '@';
        else if (dur > 10000000LL) mark = '*';
        else if (dur > 1000000LL) mark = '#';
        else if (dur > 100000LL) mark = '!';
        else if (dur > 10000LL) mark = '+';
    }
    *p++ = mark;
    *p++ = ' ';
    uint64_t usecs = (uint64_t)dur / 1000, rem = (uint64_t)dur % 1000;
    Py_ssize_t length = u64_text(p, usecs);
    p += length;
    if (length < 7) {
        Py_ssize_t slen = 8 - length < 5 ? 8 - length : 5;
        char ns[3] = {(char)('0' + rem / 100), (char)('0' + rem / 10 % 10), (char)('0' + rem % 10)};
        /* snprintf(.., min(5, 8 - len), "%03lu"): at most the three digits there are */
        Py_ssize_t k = slen - 1 < 3 ? slen - 1 : 3;
        *p++ = '.';
        memcpy(p, ns, (size_t)k);
        p += k;
        length += k + 1;
    }
    memcpy(p, " us ", 4);
    p += 4;
    for (Py_ssize_t i = length; i < 8; i++)
        *p++ = ' ';
    memcpy(p, "|  ", 3);
    p += 3;
    g->t.blen = p - g->t.buf;
}

static const char DURATION_FILL[] = "              |  ";

/* print_graph_prologue: [abstime][cpu][proc] */
static void
put_prologue(GraphText *g, Py_ssize_t cpu, uint64_t ts)
{
    char *p = g->t.buf + g->t.blen;
    if (g->o_abstime) {
        uint64_t secs = ts / 1000000000ULL, us = ts % 1000000000ULL / 1000;
        char num[24];
        Py_ssize_t n = u64_text(num, secs);
        for (Py_ssize_t i = n; i < 5; i++)
            *p++ = ' ';
        memcpy(p, num, (size_t)n);
        p += n;
        *p++ = '.';
        for (int i = 5; i >= 0; i--) {
            p[i] = (char)('0' + us % 10);
            us /= 10;
        }
        p += 6;
        memcpy(p, " |  ", 4);
        p += 4;
    }
    if (g->o_cpu) {
        char num[24];
        Py_ssize_t n = u64_text(num, (uint64_t)cpu);
        *p++ = ' ';
        for (Py_ssize_t i = n; i < g->cpu_width; i++)
            *p++ = ' ';
        memcpy(p, num, (size_t)n);
        p += n;
        *p++ = ')';
        *p++ = ' ';
    }
    if (g->o_proc) {
        gslot_t *s = &g->m.slots[cpu];
        memcpy(p, s->comm, (size_t)s->comm_len);
        p += s->comm_len;
        memcpy(p, " | ", 3);
        p += 3;
    }
    g->t.blen = p - g->t.buf;
}

/* print_function_args(): "(a=1, b='x')" of an entry's payload, its names and values
 * joined by NULs (args_pairs: an odd last piece is dropped); "()" without one.  The
 * caller reserved 2 * len + 4. */
static void
put_args_text(tbuf_t *t, const char *s, Py_ssize_t len);

static void
put_args(tbuf_t *t, const char *s, Py_ssize_t len)
{
    TB_LIT(t, "(");
    put_args_text(t, s, len);
    TB_LIT(t, ")");
}

/* function_args_text(): "a=1, b='x'" (put_args without its parentheses) */
static void
put_args_text(tbuf_t *t, const char *s, Py_ssize_t len)
{
    if (s != NULL && len) {
        Py_ssize_t i = 0, piece = 0;
        while (1) {
            const char *e = memchr(s + i, 0, (size_t)(len - i));
            Py_ssize_t end = e ? e - s : len;
            if (piece % 2 == 0) {
                /* a name: only when its value follows */
                if (e == NULL)
                    break;
                if (piece)
                    TB_LIT(t, ", ");
                tb_put(t, s + i, end - i);
                TB_LIT(t, "=");
            }
            else
                tb_put(t, s + i, end - i);
            piece++;
            if (e == NULL)
                break;
            i = end + 1;
        }
    }
}

/* format_retval(): a str as given, an int in decimal or (retval-hex) as its 64-bit
 * two's complement in hex.  The caller reserved len + 24. */
static void
put_retval(GraphText *g, int kind, const char *s, Py_ssize_t len, int64_t v)
{
    if (kind != PAY_INT) {
        tb_put(&g->t, s, len);
        return;
    }
    char *p = g->t.buf + g->t.blen;
    if (g->o_retval_hex)
        g->t.blen += PyOS_snprintf(p, 24, "0x%llx", (unsigned long long)v);
    else
        g->t.blen += PyOS_snprintf(p, 24, "%lld", (long long)v);
}

/* names_t from a dict id -> str */

static int
put_marks(GraphText *g, Py_ssize_t cpu)
{
    gslot_t *s = &g->m.slots[cpu];
    for (Py_ssize_t i = 0; i < s->nmarks; i++) {
        if (tb_reserve(&g->t, 64) < 0)
            return -1;
        g->t.blen += PyOS_snprintf(g->t.buf + g->t.blen, 64, "CPU:%zd [LOST %lld EVENTS]\n",
                                 cpu, s->marks[i]);
    }
    s->nmarks = 0;
    return 0;
}


static int
set_enter(gslot_t *s, int64_t depth, uint64_t v)
{
    if (depth >= s->nenter) {
        if (v == 0)
            return 0;
        Py_ssize_t n = depth + 16;
        uint64_t *e = PyMem_Realloc(s->enter, (size_t)n * sizeof(uint64_t));
        if (e == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = s->nenter; i < n; i++)
            e[i] = 0;
        s->enter = e;
        s->nenter = n;
    }
    s->enter[depth] = v;
    return 0;
}

/* The slot's item after its current record: 1 and the record (and its block) when it
 * is a record, 0 when it is a loss note or there is none, -1 when a block must be fed
 * to know */

/* print_graph_comment: an event or a marker inside the graph, as a C comment,
 * indented one level below the innermost open block (none at depth 0):
 *
 *     0)               |            / * asyncio:task_switch: next=Task-1 id=7fb2 * /
 *     (the slash and star written apart here)
 *
 * Its payload (the blocks' check made sure it has one, as text) is "name\0text" or
 * the text alone (ring_buffer.text_parts); a marker shows its text, an event
 * "name: text"; one trailing newline is dropped. */
static int
put_comment(GraphText *g, Py_ssize_t cpu, gblock_t *b, const record_t *r)
{
    gslot_t *s = &g->m.slots[cpu];
    int kind = -1;
    const char *ps = NULL;
    Py_ssize_t plen = 0;
    int64_t iv = 0;
    pay_get(b, b->pos, r, &kind, &ps, &plen, &iv);
    const char *name, *text;
    Py_ssize_t nlen, tlen;
    text_parts(ps, plen, &name, &nlen, &text, &tlen);
    if (tlen && text[tlen - 1] == '\n')
        tlen--;
    int64_t depth = s->cdepth;
    if (tb_reserve(&g->t, 160 + s->comm_len + nlen + tlen + (depth > 0 ? 2 * depth + 2 : 0))
            < 0)
        return -1;
    put_prologue(g, cpu, r->ts);
    if (g->o_duration)
        tb_put(&g->t, DURATION_FILL, sizeof(DURATION_FILL) - 1);
    if (depth > 0)
        tb_spaces(&g->t, (depth + 1) * 2);
    TB_LIT(&g->t, "/* ");
    if (r->type == FNT_TRACE_EVENT) {
        tb_put(&g->t, name, nlen);
        TB_LIT(&g->t, ": ");
    }
    tb_put(&g->t, text, tlen);
    TB_LIT(&g->t, " */\n");
    return 0;
}

static int
gt_record(void *walk, Py_ssize_t best, Py_ssize_t *need)
{
    GraphText *g = walk;
    char tmp[24];
    gslot_t *s = &g->m.slots[best];
    gblock_t *b = &s->q[s->head];
    record_t r;
    memcpy(&r, &b->rec[b->pos], sizeof(r));
    if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT) {
        if (put_marks(g, best) < 0 || put_comment(g, best, b, &r) < 0)
            return -1;
        b->pos++;
        return 0;
    }
    uint32_t id = rec_id(b, &r), cid = id;
    if (canon_lookup(g->canon, &cid) < 0)
        return -1;
    int64_t depth = (int64_t)r.b;
    Py_ssize_t nlen;
    const char *name = names_get(&g->names, id, &nlen, tmp, "0x%x");
    if (r.type == FNT_TRACE_GRAPH_ENT) {
        /* get_return_for_leaf: the slot's next item, if it is this call's return */
        const record_t *nxt = NULL;
        gblock_t *nb = NULL;
        int pk = slot_peek(s, &nxt, &nb);
        if (pk < 0) {
            *need = best;       /* the leaf test waits for the slot's next block */
            return 1;
        }
        int leaf = 0;
        if (pk == 1 && nxt->type == FNT_TRACE_GRAPH_RET) {
            uint32_t a = rec_id(nb, nxt);
            if (canon_lookup(g->canon, &a) < 0)
                return -1;
            leaf = a == cid;
        }
        if (put_marks(g, best) < 0)
            return -1;
        /* the arguments' text and the leaf's return value, as the file has them */
        int akind = -1, rkind = -1;
        const char *as = NULL, *rs = NULL;
        Py_ssize_t alen = 0, rlen = 0;
        int64_t aiv = 0, riv = 0;
        if (g->o_args)
            pay_get(b, b->pos, &r, &akind, &as, &alen, &aiv);
        if (leaf && g->o_retval)
            pay_get(nb, nxt - nb->rec, nxt, &rkind, &rs, &rlen, &riv);
        if (tb_reserve(&g->t, 160 + nlen + depth * 2 + s->comm_len + 2 * alen + rlen) < 0)
            return -1;
        put_prologue(g, best, r.ts);
        b->pos++;
        if (leaf) {
            int64_t dur = (int64_t)nxt->ts - (int64_t)nxt->d;
            if (g->o_duration)
                put_duration(g, dur < 0 ? 0 : dur);
            if (set_enter(s, depth, 0) < 0)
                return -1;
            nb->pos++;              /* the return is this line's */
            s->cdepth = depth - 1;  /* comments after a leaf stay at its depth */
        } else {
            if (g->o_duration)
                tb_put(&g->t, DURATION_FILL, sizeof(DURATION_FILL) - 1);
            if (set_enter(s, depth, (uint64_t)cid + 1) < 0)
                return -1;
            s->cdepth = depth;
        }
        tb_spaces(&g->t, depth * 2);
        tb_put(&g->t, name, nlen);
        put_args(&g->t, akind == PAY_STR ? as : NULL, alen);
        if (leaf) {
            TB_LIT(&g->t, ";");
            if (rkind >= 0) {
                TB_LIT(&g->t, " /* ret=");
                put_retval(g, rkind, rs, rlen, riv);
                TB_LIT(&g->t, " */");
            }
            TB_LIT(&g->t, "\n");
        }
        else
            TB_LIT(&g->t, " {\n");
        return 0;
    }
    /* a return: "}" when it closes the block opened at its depth by the same
     * function, else it names its function */
    if (put_marks(g, best) < 0)
        return -1;
    int rkind = -1;
    const char *rs = NULL;
    Py_ssize_t rlen = 0;
    int64_t riv = 0;
    if (g->o_retval)
        pay_get(b, b->pos, &r, &rkind, &rs, &rlen, &riv);
    b->pos++;
    int match = depth < s->nenter && s->enter[depth] == (uint64_t)cid + 1;
    if (set_enter(s, depth, 0) < 0)
        return -1;
    s->cdepth = depth - 1;      /* comments after a return: at the bracket's level */
    if (tb_reserve(&g->t, 160 + nlen + depth * 2 + s->comm_len + rlen) < 0)
        return -1;
    put_prologue(g, best, r.ts);
    int64_t dur = (int64_t)r.ts - (int64_t)r.d;
    if (g->o_duration)
        put_duration(g, dur < 0 ? 0 : dur);
    tb_spaces(&g->t, depth * 2);
    if (g->o_retval) {
        TB_LIT(&g->t, "} /* ");
        tb_put(&g->t, name, nlen);
        if (rkind >= 0) {
            TB_LIT(&g->t, " ret=");
            put_retval(g, rkind, rs, rlen, riv);
        }
        TB_LIT(&g->t, " */\n");
    } else if (match && !g->o_tail) {
        TB_LIT(&g->t, "}\n");
    } else {
        TB_LIT(&g->t, "} /* ");
        tb_put(&g->t, name, nlen);
        TB_LIT(&g->t, " */\n");
    }
    return 0;
}

/* every slot read: the losses nothing was read after, slot by slot */
static int
gt_end(void *walk)
{
    GraphText *g = walk;
    for (Py_ssize_t c = 0; c < g->m.nslots; c++)
        if (put_marks(g, c) < 0)
            return -1;
    return 0;
}

static PyObject *
gt_step(GraphText *g, PyObject *unused)
{
    Py_ssize_t need;
    if (merge_step(&g->m, &g->t, &g->done, &need, g, gt_record, gt_end) < 0)
        return NULL;
    return step_out(PyUnicode_DecodeUTF8(g->t.buf, g->t.blen, "surrogateescape"), need);
}

/* GraphText(slots, names, canon, options, cpu_width): slots is the number of thread
 * slots, names a dict id -> name, canon as StatWalk's, options the tuple (cpu,
 * overhead, proc, duration, abstime, tail), procs a dict slot -> the proc column's
 * text */
static int
gt_init(GraphText *g, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, width;
    PyObject *names, *canon, *procs;
    int o[9];
    if (!PyArg_ParseTuple(args, "nO!O(ppppppppp)nO!:GraphText", &nslots, &PyDict_Type, &names,
                          &canon, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &width, &PyDict_Type, &procs))
        return -1;
    if (g->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "GraphText: bad slot count (or made twice)");
        return -1;
    }
    g->o_cpu = o[0], g->o_overhead = o[1], g->o_proc = o[2], g->o_duration = o[3];
    g->o_abstime = o[4], g->o_tail = o[5];
    g->o_args = o[6], g->o_retval = o[7], g->o_retval_hex = o[8];
    g->cpu_width = (int)width;
    if (canon_arg(canon, &g->canon, "GraphText") < 0)
        return -1;
    g->keep = PyList_New(0);
    if (g->keep == NULL || merge_init(&g->m, nslots) < 0 || names_init(&g->names, names) < 0
            || slot_comms(&g->m, procs, g->keep) < 0)
        return -1;
    for (Py_ssize_t c = 0; c < nslots; c++)
        if (g->m.slots[c].comm == NULL) {
            g->m.slots[c].comm = "";
            g->m.slots[c].comm_len = 0;
        }
    return 0;
}

static void
gt_dealloc(GraphText *g)
{
    merge_free(&g->m);
    names_free(&g->names);
    PyMem_Free(g->t.buf);
    Py_XDECREF(g->keep);
    Py_XDECREF(g->canon);
    read_free((PyObject *)g);
}

/* text_ok(records) -> bool: a block GraphText prints as the Python printer does:
 * graph entries and returns only, no payloads (arguments, return values), calltimes
 * not after their returns, depths and times in range */
static PyObject *
text_ok(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const record_t *rec = view.buf;
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    int ok = view.len % FNT_RECORD_SIZE == 0;
    Py_BEGIN_ALLOW_THREADS          /* (C over a buffer this call holds) */
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        record_t r;
        memcpy(&r, &rec[i], sizeof(r));
        if (r.flags & FNT_HAS_PAYLOAD || r.b > (1u << 16) || r.ts >= ((uint64_t)1 << 62))
            ok = 0;
        else if (r.type == FNT_TRACE_GRAPH_RET)
            ok = r.d <= r.ts;
        else
            ok = r.type == FNT_TRACE_GRAPH_ENT;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

/* strict UTF-8: what Python decodes without an error handler (no surrogates, no
 * overlong forms) */
static int
utf8_ok(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf)
            len = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            len = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            len = 4, cp = c & 0x07;
        else
            return 0;
        if (i + len > n)
            return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
            || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += len;
    }
    return 1;
}

/* graph_text_ok(records, payloads) -> bool: text_ok, with arguments and return values:
 * an entry's payload text, a return's text or 64-bit int, as GraphText prints them;
 * with ``hits``, function tracer hits too (their payload: the arguments' text) */
#define OK_CALLS 1           /* graph entries and returns */
#define OK_HITS 2            /* function tracer hits */
#define OK_EVENTS 4          /* markers and events, with their text */

/* 1 when every record of a block (``n`` records, its payloads ``pay``: bytes, maybe
 * empty, or NULL: none) is one a walk of ``kinds`` takes, 0 when one is not, -1 (an
 * exception) when memory runs out */
static int
block_ok(const record_t *rec, Py_ssize_t n, PyObject *pay, int kinds)
{
    int hits = kinds & OK_HITS, events = kinds & OK_EVENTS;
    gblock_t b = {0};
    b.rec = rec;
    b.n = n;
    if (pay != NULL && PyBytes_GET_SIZE(pay)) {
        b.poff = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (b.poff == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b.pay = pay;
        if (pay_index((const unsigned char *)PyBytes_AS_STRING(pay),
                      PyBytes_GET_SIZE(pay), n, b.poff) < 0) {
            PyMem_Free(b.poff);
            return 0;
        }
    }
    int ok = 1;
    /* C over the two bytes objects the caller holds (pay_get reads them as buffers) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        record_t r;
        memcpy(&r, &b.rec[i], sizeof(r));
        if (r.ts >= ((uint64_t)1 << 62))
            ok = 0;
        else if (hits && r.type == FNT_TRACE_FN)
            ok = 1;
        else if (events && (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT))
            ok = (r.flags & FNT_HAS_PAYLOAD) != 0;
        else if (!(kinds & OK_CALLS) || r.b > (1u << 16))
            ok = 0;
        else if (r.type == FNT_TRACE_GRAPH_RET)
            ok = r.d <= r.ts;
        else
            ok = r.type == FNT_TRACE_GRAPH_ENT;
        int kind;
        const char *s = NULL;
        Py_ssize_t len = 0;
        int64_t iv;
        if (ok && (r.flags & FNT_HAS_PAYLOAD) && pay_get(&b, i, &r, &kind, &s, &len, &iv)) {
            if (kind == PAY_STR)
                ok = utf8_ok((const unsigned char *)s, len);
            else
                ok = kind == PAY_INT && r.type == FNT_TRACE_GRAPH_RET;
        } else if (ok && (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT)) {
            ok = 0;             /* (an event's text is its payload) */
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(b.poff);
    return ok;
}

static PyObject *
calls_ok(PyObject *const *args, Py_ssize_t nargs, int kinds)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "graph_text_ok(records: bytes, payloads: bytes)");
        return NULL;
    }
    if (PyBytes_GET_SIZE(args[0]) % FNT_RECORD_SIZE)
        Py_RETURN_FALSE;
    int ok = block_ok((const record_t *)PyBytes_AS_STRING(args[0]),
                      PyBytes_GET_SIZE(args[0]) / FNT_RECORD_SIZE, args[1], kinds);
    return ok < 0 ? NULL : PyBool_FromLong(ok);
}

static PyObject *
graph_text_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return calls_ok(args, nargs, OK_CALLS);
}

/* graph_events_ok(records, payloads) -> bool: graph_text_ok, events and markers (with
 * their text) allowed: GraphText prints them as comments */
static PyObject *
graph_events_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return calls_ok(args, nargs, OK_CALLS | OK_EVENTS);
}

/* calls_hits_ok(records, payloads) -> bool: graph_events_ok's blocks, or function
 * tracer hits (ChromeCalls writes them all) */
static PyObject *
calls_hits_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return calls_ok(args, nargs, OK_CALLS | OK_HITS | OK_EVENTS);
}

/* calls_or_hits_ok(records, payloads) -> bool: graph_text_ok's blocks, or function
 * tracer hits, no events (CallRows makes a row of each) */
static PyObject *
calls_or_hits_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return calls_ok(args, nargs, OK_CALLS | OK_HITS);
}

static PyMethodDef gt_methods[] = {
    MERGE_FEED_METHOD,
    {"step", (PyCFunction)gt_step, METH_NOARGS,
     "step() -> (text, need): lines, and the slot to feed before more (-1: none)"},
    {NULL}
};

READ_TYPE(gt, GraphText,
          "GraphText(slots, names, canon, options, cpu_width, procs): function_graph's "
          "text of a trace file (output/function_graph.py's twin)");
