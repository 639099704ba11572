/* -- FunctionText: the function tracer's text ------------------------------------------
 *
 * The native twin of output/ftrace_text.py's render_function_trace over a trace file's
 * records merged by time (output/reader.py's entries_from_file), for what a function
 * tracer's trace holds: function hits (with their arguments' text when recorded) and
 * the buffers' losses.  The caller checks first (``function_text_ok``) that every
 * block is of that kind; anything else is printed by the Python printer.
 *
 * A line is trace_fn_trace's:
 *
 *       MainThread-12428   [000]   1066.974829: mod.mid(x=1) <-mod.top
 *     '---- context (per slot, made in Python) ---''- time -''- name, args, parent
 *
 * The context up to the time is the same for every line of a thread slot, so the
 * Python side makes it (trace_print_context's text: the comm cut and padded as
 * Python does it) and only the time is formatted here.  Loss notes go out as the
 * merge meets them (read_merge.c.h), as GraphText's do.
 */

typedef struct {
    MERGE_WALK_HEAD
    int print_parent, time_in_ns;
    names_t names;
    PyObject *keep;         /* the contexts' bytes objects */
    tbuf_t t;
    int done;
} FunctionText;

static int
ft_marks(FunctionText *f, Py_ssize_t cpu)
{
    gslot_t *s = &f->m.slots[cpu];
    for (Py_ssize_t i = 0; i < s->nmarks; i++) {
        if (tb_reserve(&f->t, 64) < 0)
            return -1;
        /* format_lost_events: a loss of an unknown size says so */
        if (s->marks[i] < 0)
            f->t.blen += PyOS_snprintf(f->t.buf + f->t.blen, 64, "CPU:%zd [LOST EVENTS]\n",
                                       cpu);
        else
            f->t.blen += PyOS_snprintf(f->t.buf + f->t.blen, 64,
                                       "CPU:%zd [LOST %lld EVENTS]\n", cpu, s->marks[i]);
    }
    s->nmarks = 0;
    return 0;
}

/* trace_print_context's time: " %5lu.%06lu: " of the time rounded to the microsecond,
 * or the raw count as "%12llu: " under a clock that does not count nanoseconds */
static void
ft_time(FunctionText *f, uint64_t ts)
{
    char *p = f->t.buf + f->t.blen;
    char num[24];
    if (!f->time_in_ns) {
        Py_ssize_t n = u64_text(num, ts);
        for (Py_ssize_t i = n; i < 12; i++)
            *p++ = ' ';
        memcpy(p, num, (size_t)n);
        p += n;
    } else {
        uint64_t usecs = (ts + 500) / 1000;
        uint64_t secs = usecs / 1000000, rem = usecs % 1000000;
        Py_ssize_t n = u64_text(num, secs);
        for (Py_ssize_t i = n; i < 5; i++)
            *p++ = ' ';
        memcpy(p, num, (size_t)n);
        p += n;
        *p++ = '.';
        for (int i = 5; i >= 0; i--) {
            p[i] = (char)('0' + rem % 10);
            rem /= 10;
        }
        p += 6;
    }
    *p++ = ':';
    *p++ = ' ';
    f->t.blen = p - f->t.buf;
}

static int
ft_record(void *walk, Py_ssize_t best, Py_ssize_t *need)
{
    FunctionText *f = walk;
    char tmp[24], ptmp[24];
    gslot_t *s = &f->m.slots[best];
    gblock_t *b = &s->q[s->head];
    record_t r;
    memcpy(&r, &b->rec[b->pos], sizeof(r));
    if (ft_marks(f, best) < 0)
        return -1;
    /* (trace_set's ids: the process's base added to the function and its caller) */
    Py_ssize_t nlen, plen = 0;
    const char *name = names_get(&f->names, r.a + b->ibase, &nlen, tmp, "0x%x");
    const char *parent = NULL;
    if (f->print_parent && r.b)
        parent = names_get(&f->names, r.b + b->ibase, &plen, ptmp, "0x%x");
    int akind = -1;
    const char *as = NULL;
    Py_ssize_t alen = 0;
    int64_t aiv = 0;
    int has_args = pay_get(b, b->pos, &r, &akind, &as, &alen, &aiv);
    b->pos++;
    if (tb_reserve(&f->t, 64 + s->comm_len + nlen + plen + 2 * alen) < 0)
        return -1;
    tb_put(&f->t, s->comm, s->comm_len);
    ft_time(f, r.ts);
    tb_put(&f->t, name, nlen);
    if (has_args)
        put_args(&f->t, akind == PAY_STR ? as : NULL, alen);
    if (parent != NULL) {
        TB_LIT(&f->t, " <-");
        tb_put(&f->t, parent, plen);
    }
    TB_LIT(&f->t, "\n");
    return 0;
}

/* every slot read: the losses nothing was read after, slot by slot */
static int
ft_end(void *walk)
{
    FunctionText *f = walk;
    for (Py_ssize_t c = 0; c < f->m.nslots; c++)
        if (ft_marks(f, c) < 0)
            return -1;
    return 0;
}

static PyObject *
ft_step(FunctionText *f, PyObject *unused)
{
    Py_ssize_t need;
    if (merge_step(&f->m, &f->t, &f->done, &need, f, ft_record, ft_end) < 0)
        return NULL;
    return step_out(PyUnicode_DecodeUTF8(f->t.buf, f->t.blen, "surrogateescape"), need);
}

/* FunctionText(slots, names, print_parent, time_in_ns, contexts): names a dict id ->
 * name, contexts a dict slot -> its lines' text up to the time */
static int
ft_init(FunctionText *f, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots;
    PyObject *names, *contexts;
    int print_parent, time_in_ns;
    if (!PyArg_ParseTuple(args, "nO!ppO!:FunctionText", &nslots, &PyDict_Type, &names,
                          &print_parent, &time_in_ns, &PyDict_Type, &contexts))
        return -1;
    if (f->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "FunctionText: bad slot count (or made twice)");
        return -1;
    }
    f->print_parent = print_parent;
    f->time_in_ns = time_in_ns;
    f->keep = PyList_New(0);
    if (f->keep == NULL || merge_init(&f->m, nslots) < 0 || names_init(&f->names, names) < 0
            || slot_comms(&f->m, contexts, f->keep) < 0)
        return -1;
    for (Py_ssize_t c = 0; c < nslots; c++)
        if (f->m.slots[c].comm == NULL) {
            PyErr_Format(PyExc_ValueError, "FunctionText: no context for slot %zd", c);
            return -1;
        }
    return 0;
}

static void
ft_dealloc(FunctionText *f)
{
    merge_free(&f->m);
    names_free(&f->names);
    PyMem_Free(f->t.buf);
    Py_XDECREF(f->keep);
    read_free((PyObject *)f);
}

/* function_text_ok(records, payloads) -> bool: a block FunctionText prints as the
 * Python printer does: function hits only, times in range, a payload only as the
 * arguments' text (strict UTF-8) */
static PyObject *
function_text_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return calls_ok(args, nargs, OK_HITS);
}

static PyMethodDef ft_methods[] = {
    MERGE_FEED_METHOD,
    {"step", (PyCFunction)ft_step, METH_NOARGS,
     "step() -> (text, need): lines, and the slot to feed before more (-1: none)"},
    {NULL}
};

READ_TYPE(ft, FunctionText,
          "FunctionText(slots, names, print_parent, time_in_ns, contexts): the "
          "function tracer's text of a trace file (output/ftrace_text.py's twin)");
