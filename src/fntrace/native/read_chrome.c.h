/* -- ChromeCalls: the Chrome trace JSON's calls --------------------------------------
 *
 * The native twin of output/chrome_json.py's loop for a trace of calls (the blocks
 * text_ok accepts): the records merged by time as GraphText merges them, each slot's
 * calls paired as CallBuilder pairs them (read_pair.c.h; without losses: the Chrome
 * export shows a loss as an instant and pairs across it), each call written as its complete event
 * when it ends, a loss as a "lost events" instant at the slot's next record, then the
 * calls left open (slots in the order their first record was read, innermost first)
 * and the losses nothing was read after.  With ``values`` (a -A/-R trace) each call
 * carries its arguments and return value from the blocks' payloads, in ``args`` as
 * json.dumps(ensure_ascii=True) writes the exporter's dict.
 */

typedef struct {
    uint64_t last_any;      /* the exporter's last[slot]: the last record's time */
    const char *tail;       /* "pid":P,"tid":T */
    Py_ssize_t tail_len;
} cslot_t;

typedef struct {
    MERGE_WALK_HEAD         /* the blocks, as GraphText's */
    pair_t pr;              /* the calls (no losses: the Chrome export pairs across them) */
    cslot_t *cs;
    names_t names;          /* id -> its name as a JSON string */
    PyObject *keep;
    PyObject *canon;
    tbuf_t t;
    int done;
    int values;             /* the blocks come with their payloads */
    uint64_t n_calls, n_incomplete, n_instants;
    long long min_ns;       /* --min-duration: shorter calls are left out (counted) */
    uint64_t n_short;
} ChromeCalls;

static inline void
put_us(tbuf_t *t, uint64_t ns, int always_decimals)
{
    char *p = t->buf + t->blen;
    p += u64_text(p, ns / 1000);
    unsigned rest = (unsigned)(ns % 1000);
    if (rest || always_decimals) {
        *p++ = '.';
        *p++ = (char)('0' + rest / 100);
        *p++ = (char)('0' + rest / 10 % 10);
        *p++ = (char)('0' + rest % 10);
    }
    t->blen = p - t->buf;
}

/* the next NUL-ended piece of an argument text at *i (the last one ends at len) */
static inline Py_ssize_t
arg_piece(const char *s, Py_ssize_t len, Py_ssize_t i, Py_ssize_t *end)
{
    const char *e = memchr(s + i, 0, (size_t)(len - i));
    *end = e ? e - s : len;
    return e ? *end + 1 : -1;       /* where the next piece starts (-1: none) */
}

/* {"name":"value",...}: dict(args_pairs(text)) -- pairs in the order their names first
 * come, a name given twice keeping its last value; "{}" when no pair is whole */
static int
put_args_dict(tbuf_t *t, const char *s, Py_ssize_t len)
{
    /* the whole pairs: name start/end, value start/end */
    Py_ssize_t npairs = 0, cap = 8;
    Py_ssize_t *at = PyMem_Malloc(sizeof(Py_ssize_t) * 4 * (size_t)cap);
    if (at == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t i = 0;
    while (i >= 0 && i <= len && len) {
        Py_ssize_t nend, vend;
        Py_ssize_t next = arg_piece(s, len, i, &nend);
        if (next < 0)
            break;                      /* a name with no value: dropped */
        Py_ssize_t after = arg_piece(s, len, next, &vend);
        if (npairs == cap) {
            cap *= 2;
            Py_ssize_t *more = PyMem_Realloc(at, sizeof(Py_ssize_t) * 4 * (size_t)cap);
            if (more == NULL) {
                PyMem_Free(at);
                PyErr_NoMemory();
                return -1;
            }
            at = more;
        }
        Py_ssize_t *q = at + 4 * npairs++;
        q[0] = i, q[1] = nend, q[2] = next, q[3] = vend;
        i = after;
    }
    TB_LIT(t, "{");
    int first = 1;
    for (Py_ssize_t k = 0; k < npairs; k++) {
        Py_ssize_t *q = at + 4 * k, nl = q[1] - q[0];
        int seen = 0;
        for (Py_ssize_t j = 0; j < k && !seen; j++)
            seen = at[4 * j + 1] - at[4 * j] == nl && !memcmp(s + at[4 * j], s + q[0], nl);
        if (seen)
            continue;
        Py_ssize_t *v = q;          /* the last pair of this name gives the value */
        for (Py_ssize_t j = k + 1; j < npairs; j++)
            if (at[4 * j + 1] - at[4 * j] == nl && !memcmp(s + at[4 * j], s + q[0], nl))
                v = at + 4 * j;
        if (!first)
            TB_LIT(t, ",");
        first = 0;
        put_json_str(t, 1, s + q[0], nl);
        TB_LIT(t, ":");
        put_json_str(t, 1, s + v[2], v[3] - v[2]);
    }
    TB_LIT(t, "}");
    PyMem_Free(at);
    return 0;
}

/* does the argument text hold a whole pair (args_pairs non-empty)? */
static inline int
args_any(const char *s, Py_ssize_t len)
{
    return s != NULL && len && memchr(s, 0, (size_t)len) != NULL;
}

/* _Writer.call: ",\n" then the complete event */
static int
put_call(ChromeCalls *c, Py_ssize_t slot, uint32_t id, int64_t start, int64_t end,
         int incomplete, int entry_lost, const char *args, Py_ssize_t alen,
         const pvalue_t *ret)
{
    if (end - start < c->min_ns) {
        c->n_short++;
        return 0;
    }
    char tmp[24];
    Py_ssize_t nlen;
    const char *name = names_get(&c->names, id, &nlen, tmp, "\"0x%x\"");
    cslot_t *s = &c->cs[slot];
    int has_args = args_any(args, alen), has_ret = ret != NULL && ret->has;
    Py_ssize_t more = (has_args ? 9 * alen + 16 : 0) + (has_ret ? 6 * ret->len + 48 : 0);
    if (tb_reserve(&c->t, 160 + nlen + s->tail_len + more) < 0)
        return -1;
    tbuf_t *t = &c->t;
    TB_LIT(t, ",\n{\"ph\":\"X\",\"name\":");
    tb_put(t, name, nlen);
    TB_LIT(t, ",\"cat\":\"function\",\"ts\":");
    put_us(t, (uint64_t)start, 1);
    TB_LIT(t, ",\"dur\":");
    put_us(t, (uint64_t)(end - start), 1);
    TB_LIT(t, ",");
    tb_put(t, s->tail, s->tail_len);
    if (has_args || has_ret) {
        /* the exporter's dict, in its order: args, retval, incomplete, entry_lost */
        TB_LIT(t, ",\"args\":{");
        if (has_args) {
            TB_LIT(t, "\"args\":");
            if (put_args_dict(t, args, alen) < 0)
                return -1;
        }
        if (has_ret) {
            if (has_args)
                TB_LIT(t, ",");
            TB_LIT(t, "\"retval\":");
            /* _retval: an int JavaScript holds exactly as a number, else its text */
            int64_t v = ret->iv;
            int exact = v >= -((int64_t)1 << 53) + 1 && v <= ((int64_t)1 << 53) - 1;
            if (ret->kind == PAY_INT && exact)
                t->blen += PyOS_snprintf(t->buf + t->blen, 32, "%lld", (long long)v);
            else if (ret->kind == PAY_INT)
                t->blen += PyOS_snprintf(t->buf + t->blen, 32, "\"%lld\"", (long long)v);
            else
                put_json_str(t, 1, ret->s, ret->len);
        }
        if (incomplete)
            TB_LIT(t, ",\"incomplete\":true");
        if (entry_lost)
            TB_LIT(t, ",\"entry_lost\":true");
        TB_LIT(t, "}}");
    }
    else if (incomplete)
        TB_LIT(t, ",\"args\":{\"incomplete\":true}}");
    else if (entry_lost)
        TB_LIT(t, ",\"args\":{\"entry_lost\":true}}");
    else
        TB_LIT(t, "}");
    c->n_calls++;
    c->n_incomplete += incomplete;
    return 0;
}

/* the lost events instant of a slot, at ``ts`` */
static int
put_lost(ChromeCalls *c, Py_ssize_t slot, uint64_t ts, long long lost)
{
    cslot_t *s = &c->cs[slot];
    if (tb_reserve(&c->t, 160 + s->tail_len) < 0)
        return -1;
    tbuf_t *t = &c->t;
    TB_LIT(t, ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":\"lost events\",\"cat\":\"lost\",\"ts\":");
    put_us(t, ts, 0);
    TB_LIT(t, ",");
    tb_put(t, s->tail, s->tail_len);
    t->blen += PyOS_snprintf(t->buf + t->blen, 40, ",\"args\":{\"lost\":%lld}}", lost);
    c->n_instants++;
    return 0;
}

/* a function tracer hit: a thread-scoped instant, its caller and its arguments (the
 * arguments' text of its payload, ``v``) in args as _Writer.instant writes them */
static int
put_hit(ChromeCalls *c, Py_ssize_t slot, uint32_t id, uint32_t parent, uint64_t ts,
        const pvalue_t *v)
{
    char tmp[24], ptmp[24];
    Py_ssize_t nlen, plen = 0;
    const char *name = names_get(&c->names, id, &nlen, tmp, "\"0x%x\"");
    const char *pname = parent ? names_get(&c->names, parent, &plen, ptmp, "\"0x%x\"")
                               : NULL;
    int has_args = v->has && v->kind == PAY_STR && args_any(v->s, v->len);
    cslot_t *s = &c->cs[slot];
    if (tb_reserve(&c->t, 160 + nlen + plen + s->tail_len + (has_args ? 9 * v->len : 0))
            < 0)
        return -1;
    tbuf_t *t = &c->t;
    TB_LIT(t, ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":");
    tb_put(t, name, nlen);
    TB_LIT(t, ",\"cat\":\"function\",\"ts\":");
    put_us(t, ts, 0);
    TB_LIT(t, ",");
    tb_put(t, s->tail, s->tail_len);
    if (pname != NULL || has_args) {
        TB_LIT(t, ",\"args\":{");
        if (pname != NULL) {
            TB_LIT(t, "\"parent\":");
            tb_put(t, pname, plen);
        }
        if (has_args) {
            if (pname != NULL)
                TB_LIT(t, ",");
            TB_LIT(t, "\"args\":");
            if (put_args_dict(t, v->s, v->len) < 0)
                return -1;
        }
        TB_LIT(t, "}");
    }
    TB_LIT(t, "}");
    c->n_instants++;
    return 0;
}

/* a marker or an event: an instant, as the loop writes them -- an event named by its
 * name, its text in args.fields; a marker named by its text (its trailing newlines
 * cut; "trace_marker" when none is left), its writer in args.writer.  The payload is
 * "name\0text" or the text alone (ring_buffer.text_parts). */
static int
put_event(ChromeCalls *c, Py_ssize_t slot, const record_t *r, const pvalue_t *v)
{
    const char *name, *text;
    Py_ssize_t nlen, tlen;
    text_parts(v->has ? v->s : NULL, v->has ? v->len : 0, &name, &nlen, &text, &tlen);
    cslot_t *s = &c->cs[slot];
    if (tb_reserve(&c->t, 160 + s->tail_len + 6 * (nlen + tlen)) < 0)
        return -1;
    tbuf_t *t = &c->t;
    TB_LIT(t, ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":");
    int event = r->type == FNT_TRACE_EVENT;
    if (event) {
        put_json_str(t, 1, name, nlen);
    } else {
        Py_ssize_t shown = tlen;
        while (shown && text[shown - 1] == '\n')
            shown--;
        if (shown)
            put_json_str(t, 1, text, shown);
        else
            TB_LIT(t, "\"trace_marker\"");
    }
    if (event)
        TB_LIT(t, ",\"cat\":\"event\",\"ts\":");
    else
        TB_LIT(t, ",\"cat\":\"marker\",\"ts\":");
    put_us(t, r->ts, 0);
    TB_LIT(t, ",");
    tb_put(t, s->tail, s->tail_len);
    if (event && tlen) {
        TB_LIT(t, ",\"args\":{\"fields\":");
        put_json_str(t, 1, text, tlen);
        TB_LIT(t, "}}");
    } else if (!event && nlen) {
        TB_LIT(t, ",\"args\":{\"writer\":");
        put_json_str(t, 1, name, nlen);
        TB_LIT(t, "}}");
    } else {
        TB_LIT(t, "}");
    }
    c->n_instants++;
    return 0;
}

/* a call ended: its complete event */
static int
cc_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    return put_call((ChromeCalls *)ctx, slot, p->id, p->start, p->end, !p->complete,
                    !p->entry_seen, p->args, p->alen, &p->ret);
}

/* the losses noted on a slot: one instant of their sum, at ``ts`` */
static int
cc_losses(ChromeCalls *c, Py_ssize_t slot, uint64_t ts)
{
    gslot_t *g = &c->m.slots[slot];
    long long sum = 0;
    for (Py_ssize_t i = 0; i < g->nmarks; i++)
        sum += g->marks[i];
    g->nmarks = 0;
    return put_lost(c, slot, ts, sum);
}

static int
cc_record(void *walk, Py_ssize_t best, Py_ssize_t *need)
{
    ChromeCalls *c = walk;
    record_t r;
    uint32_t id;
    merge_take(&c->m, best, &r, &id);
    gslot_t *g = &c->m.slots[best];
    c->cs[best].last_any = r.ts;
    if (g->nmarks && cc_losses(c, best, r.ts) < 0)
        return -1;
    pvalue_t v = record_value(&c->m, best, &r, c->values);
    if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT) {
        pvalue_t ev = record_value(&c->m, best, &r, 1);
        return put_event(c, best, &r, &ev);
    }
    if (r.type == FNT_TRACE_FN) {
        /* (trace_set's ids: the process's base added to the caller too) */
        gblock_t *b = &g->q[g->head];
        return put_hit(c, best, r.a + b->ibase, r.b ? r.b + b->ibase : 0, r.ts, &v);
    }
    uint32_t cid = id;
    if (canon_lookup(c->canon, &cid) < 0)
        return -1;
    return pair_record(&c->pr, best, &r, id, cid, &v);
}

/* builder.finish(), then the losses nothing was read after */
static int
cc_end(void *walk)
{
    ChromeCalls *c = walk;
    if (pair_finish(&c->pr) < 0)
        return -1;
    for (Py_ssize_t k = 0; k < c->m.nslots; k++)
        if (c->m.slots[k].nmarks && cc_losses(c, k, c->cs[k].last_any) < 0)
            return -1;
    return 0;
}

static PyObject *
cc_step(ChromeCalls *c, PyObject *unused)
{
    Py_ssize_t need;
    if (merge_step(&c->m, &c->t, &c->done, &need, c, cc_record, cc_end) < 0)
        return NULL;
    return step_out(PyUnicode_DecodeUTF8(c->t.buf, c->t.blen, "strict"), need);
}

static PyObject *
cc_counts(ChromeCalls *c, PyObject *unused)
{
    return Py_BuildValue("(KKKLK)", (unsigned long long)c->n_calls,
                         (unsigned long long)c->n_incomplete,
                         (unsigned long long)c->n_instants, c->lost_fed,
                         (unsigned long long)c->n_short);
}

/* ChromeCalls(slots, names, canon, tails, values=False, min_ns=0): names id -> the name
 * as a JSON string, canon as StatWalk's, tails slot -> '"pid":P,"tid":T'; a call shorter
 * than min_ns is not written (counted: counts()'s last) */
static int
cc_init(ChromeCalls *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots;
    PyObject *names, *canon, *tails;
    int values = 0;
    long long min_ns = 0;
    if (!PyArg_ParseTuple(args, "nO!OO!|pL:ChromeCalls", &nslots, &PyDict_Type, &names, &canon,
                          &PyDict_Type, &tails, &values, &min_ns))
        return -1;
    c->values = values;
    c->min_ns = min_ns;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "ChromeCalls: bad slot count (or made twice)");
        return -1;
    }
    if (canon_arg(canon, &c->canon, "ChromeCalls") < 0)
        return -1;
    c->keep = PyList_New(0);
    Py_ssize_t n1 = nslots ? nslots : 1;
    if (c->keep == NULL || merge_init(&c->m, nslots) < 0)
        return -1;
    c->cs = PyMem_Calloc((size_t)n1, sizeof(cslot_t));
    if (c->cs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (pair_init(&c->pr, nslots, cc_emit, c) < 0)
        return -1;
    if (names_init(&c->names, names) < 0)
        return -1;
    Py_ssize_t pos = 0, slot;
    PyObject *v;
    int more;
    while ((more = slot_item(tails, nslots, &pos, &slot, &v)) > 0) {
        cslot_t *s = &c->cs[slot];
        s->tail = kept_bytes(c->keep, PyUnicode_AsUTF8String(v), &s->tail_len);
        if (s->tail == NULL)
            return -1;
    }
    if (more < 0)
        return -1;
    for (Py_ssize_t i = 0; i < nslots; i++)
        if (c->cs[i].tail == NULL) {
            PyErr_SetString(PyExc_ValueError, "ChromeCalls: a slot without its pid and tid");
            return -1;
        }
    return 0;
}

static void
cc_dealloc(ChromeCalls *c)
{
    merge_free(&c->m);
    pair_free(&c->pr);
    PyMem_Free(c->cs);
    names_free(&c->names);
    PyMem_Free(c->t.buf);
    Py_XDECREF(c->keep);
    Py_XDECREF(c->canon);
    read_free((PyObject *)c);
}

static PyMethodDef cc_methods[] = {
    MERGE_FEED_METHOD,
    {"step", (PyCFunction)cc_step, METH_NOARGS,
     "step() -> (text, need): events, and the slot to feed before more (-1: none)"},
    {"counts", (PyCFunction)cc_counts, METH_NOARGS,
     "counts() -> (calls, incomplete calls, instants, lost events, calls left out)"},
    {NULL}
};

READ_TYPE(cc, ChromeCalls,
          "ChromeCalls(slots, names, canon, tails, values=False, min_ns=0): the Chrome "
          "trace JSON's calls of a trace file (output/chrome_json.py's twin)");
