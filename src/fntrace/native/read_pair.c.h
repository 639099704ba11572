/* -- Pairing: entries and returns made into calls, as CallBuilder makes them ----------
 *
 * The one native twin of output/calls.py's CallBuilder, shared by the time-ordered
 * walks that write calls (ChromeCalls, CallRows, PerfettoCalls).  Per thread slot, a
 * stack of open frames; a walk feeds each graph record of a slot in time order and is
 * handed every call as it ends (``emit``), in CallBuilder's order:
 *
 *     entry   pair_enter_close (what it ends: deeper frames, incomplete), then the walk
 *             looks at the caller (pair_top) and pair_push-es the frame
 *     return  pair_return: deeper frames and a different function at its depth closed
 *             incomplete, then the call -- from its frame, or from the return alone
 *             (its entry is not in the trace: it starts at the recorded calltime, no
 *             earlier than the slot's last loss)
 *     loss    pair_lost: what is open closed at the slot's last time (a walk that
 *             pairs across losses, as the Chrome export does, never calls it)
 *     end     pair_finish: what is still open, slots in the order of their first
 *             graph record, innermost first
 *
 * A frame carries a walk's ``path`` (CallRows: the call path's number in its trie),
 * and the arguments' text its walk gave it (pair_args: a copy, freed when the call is
 * handed out); a return's value, given before pair_return (``p->ret``), goes with the
 * call it ends.
 */

typedef struct {
    uint32_t id;            /* the record's id (its name) */
    uint32_t cid;           /* canonical: what pairs */
    uint32_t path;          /* the walk's own */
    int64_t depth, start, children;
    char *args;             /* the arguments' text (NUL-joined pairs), or NULL */
    Py_ssize_t alen;
} call_frame_t;

/* a recorded value: text, or (PAY_INT) an int */
typedef struct {
    int has, kind;
    const char *s;
    Py_ssize_t len;
    int64_t iv;
} pvalue_t;

/* a call as it ends (a Call of calls.py) */
typedef struct {
    uint32_t id, cid, path; /* path: the frame's; 0 for a call made from its return */
    int64_t depth, start, end, self;
    int complete;           /* its return was read */
    int entry_seen;         /* its entry was read */
    const char *args;       /* its frame's arguments (NULL: none recorded) */
    Py_ssize_t alen;
    pvalue_t ret;           /* its return value (ret.has 0: none recorded) */
} paired_t;

typedef struct {
    call_frame_t *st;
    Py_ssize_t n, cap;
    int64_t last_ts;        /* CallBuilder.last_ts */
    int seen;               /* a graph record was read (CallBuilder._stacks has the slot) */
    int64_t gap;            /* CallBuilder._gap: where the slot's last loss began */
    int has_gap;
} pair_slot_t;

typedef int (*pair_emit_fn)(void *ctx, Py_ssize_t slot, const paired_t *c);

typedef struct {
    pair_slot_t *s;
    Py_ssize_t nslots;
    Py_ssize_t *order;      /* slots in the order of their first graph record */
    Py_ssize_t norder;
    pair_emit_fn emit;
    void *ctx;
    pvalue_t ret;           /* the value of the return pair_return is given next */
    Py_ssize_t nopen;       /* frames open on all the slots */
} pair_t;

static int
pair_init(pair_t *p, Py_ssize_t nslots, pair_emit_fn emit, void *ctx)
{
    Py_ssize_t n1 = nslots ? nslots : 1;
    p->s = PyMem_Calloc((size_t)n1, sizeof(pair_slot_t));
    p->order = PyMem_Calloc((size_t)n1, sizeof(Py_ssize_t));
    if (p->s == NULL || p->order == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p->nslots = nslots;
    p->emit = emit;
    p->ctx = ctx;
    return 0;
}

static void
pair_free(pair_t *p)
{
    if (p->s != NULL)
        for (Py_ssize_t k = 0; k < p->nslots; k++) {
            for (Py_ssize_t i = 0; i < p->s[k].n; i++)
                PyMem_Free(p->s[k].st[i].args);
            PyMem_Free(p->s[k].st);
        }
    PyMem_Free(p->s);
    PyMem_Free(p->order);
    p->s = NULL;
    p->order = NULL;
}

static inline call_frame_t *
pair_top(pair_t *p, Py_ssize_t slot)
{
    pair_slot_t *s = &p->s[slot];
    return s->n ? &s->st[s->n - 1] : NULL;
}

/* every frame still open on the slots (the room a walk may need for what they end) */
static inline Py_ssize_t
pair_open(const pair_t *p)
{
    return p->nopen;
}

/* CallBuilder._close_deeper: every open frame at ``depth`` or deeper, incomplete at ts */
static int
pair_close_deeper(pair_t *p, Py_ssize_t slot, int64_t depth, int64_t ts)
{
    pair_slot_t *s = &p->s[slot];
    while (s->n && s->st[s->n - 1].depth >= depth) {
        call_frame_t f = s->st[--s->n];
        p->nopen--;
        int64_t dur = ts - f.start;
        if (dur < 0)
            dur = 0;
        int64_t self = dur - f.children;
        paired_t c = {f.id, f.cid, f.path, f.depth, f.start, f.start + dur,
                      self < 0 ? 0 : self, 0, 1, f.args, f.alen};
        if (s->n)
            s->st[s->n - 1].children += dur;
        int r = p->emit(p->ctx, slot, &c);
        PyMem_Free(f.args);
        if (r < 0)
            return -1;
    }
    return 0;
}

static inline void
pair_seen(pair_t *p, Py_ssize_t slot, int64_t ts)
{
    pair_slot_t *s = &p->s[slot];
    if (!s->seen) {
        s->seen = 1;
        p->order[p->norder++] = slot;
    }
    s->last_ts = ts;
}

/* CallBuilder.feed(LostEvents): the slot's calls end where it was last read */
static int
pair_lost(pair_t *p, Py_ssize_t slot)
{
    pair_slot_t *s = &p->s[slot];
    if (!s->seen)
        return 0;
    s->gap = s->last_ts;
    s->has_gap = 1;
    return pair_close_deeper(p, slot, -1, s->last_ts);
}

/* an entry at ``depth``: what it ends (frames at its depth or deeper) */
static int
pair_enter_close(pair_t *p, Py_ssize_t slot, int64_t depth, int64_t ts)
{
    pair_seen(p, slot, ts);
    pair_slot_t *s = &p->s[slot];
    if (s->n && s->st[s->n - 1].depth >= depth)
        return pair_close_deeper(p, slot, depth, ts);
    return 0;
}

/* then its frame */
static int
pair_push(pair_t *p, Py_ssize_t slot, uint32_t id, uint32_t cid, int64_t depth, int64_t ts,
          uint32_t path)
{
    pair_slot_t *s = &p->s[slot];
    if (ARRAY_ROOM(s->st, s->n, s->cap, 64) < 0)
        return -1;
    call_frame_t *f = &s->st[s->n++];
    p->nopen++;
    f->id = id;
    f->cid = cid;
    f->path = path;
    f->depth = depth;
    f->start = ts;
    f->children = 0;
    f->args = NULL;
    f->alen = 0;
    return 0;
}

/* the arguments' text of the frame just pushed */
static int
pair_args(pair_t *p, Py_ssize_t slot, const char *s, Py_ssize_t len)
{
    call_frame_t *f = pair_top(p, slot);
    f->args = PyMem_Malloc(len ? (size_t)len : 1);
    if (f->args == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(f->args, s, (size_t)len);
    f->alen = len;
    return 0;
}

/* a return: what it ends, then its call (``calltime``: the record's own) */
static int
pair_return(pair_t *p, Py_ssize_t slot, uint32_t id, uint32_t cid, int64_t depth, int64_t ts,
            int64_t calltime)
{
    pair_seen(p, slot, ts);
    pair_slot_t *s = &p->s[slot];
    if (s->n && s->st[s->n - 1].depth > depth && pair_close_deeper(p, slot, depth + 1, ts) < 0)
        return -1;
    if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid != cid
            && pair_close_deeper(p, slot, depth, ts) < 0)
        return -1;
    paired_t c;
    int64_t dur;
    char *args = NULL;
    if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid == cid) {
        call_frame_t f = s->st[--s->n];
        p->nopen--;
        int64_t start = f.start <= ts ? f.start : calltime;
        dur = ts - start;
        int64_t self = dur - f.children;
        c = (paired_t){id, cid, f.path, depth, start, ts, self < 0 ? 0 : self, 1, 1,
                       f.args, f.alen};
        args = f.args;
    } else {
        /* the entry is not in the trace: the call is made from its return */
        int64_t start = calltime;
        if (s->has_gap && start < s->gap)
            start = s->gap;
        dur = ts - start;
        c = (paired_t){id, cid, 0, depth, start, ts, dur, 1, 0};
    }
    c.ret = p->ret;
    p->ret.has = 0;
    if (s->n)
        s->st[s->n - 1].children += dur;
    int r = p->emit(p->ctx, slot, &c);
    PyMem_Free(args);
    return r;
}

/* CallBuilder.finish: what is still open, at each slot's last time */
static int
pair_finish(pair_t *p)
{
    for (Py_ssize_t i = 0; i < p->norder; i++) {
        Py_ssize_t k = p->order[i];
        if (pair_close_deeper(p, k, -1, p->s[k].last_ts) < 0)
            return -1;
    }
    return 0;
}

/* CallBuilder fed the LostEvents queued on a slot of the merge: each closes what is
 * open (the walks that pair with losses: CallRows, OtlpCalls) */
static inline int
pair_marks(pair_t *p, merge_t *m, Py_ssize_t slot)
{
    gslot_t *g = &m->slots[slot];
    if (g->nmarks == 0)         /* (every record of a walk asks) */
        return 0;
    for (Py_ssize_t i = 0; i < g->nmarks; i++)
        if (pair_lost(p, slot) < 0)
            return -1;
    g->nmarks = 0;
    return 0;
}

/* the end of such a walk: the losses nothing was read after, slot by slot; then
 * builder.finish() */
static int
pair_end(pair_t *p, merge_t *m)
{
    for (Py_ssize_t k = 0; k < m->nslots; k++)
        if (pair_marks(p, m, k) < 0)
            return -1;
    return pair_finish(p);
}

/* The value a walk's record carries, when the walk takes values (a -A/-R trace, its
 * blocks fed with their payloads): an entry's arguments, a return's value. */
static inline pvalue_t
record_value(merge_t *m, Py_ssize_t slot, const record_t *r, int values)
{
    pvalue_t v = {0};
    if (values)
        v.has = merge_last_payload(m, slot, r, &v.kind, &v.s, &v.len, &v.iv);
    return v;
}

/* an entry's arguments (text) kept with the frame just pushed */
static inline int
pair_entry_value(pair_t *p, Py_ssize_t slot, const pvalue_t *v)
{
    return v->has && v->kind == PAY_STR ? pair_args(p, slot, v->s, v->len) : 0;
}

/* a return, with its value going to the call it ends */
static inline int
pair_return_value(pair_t *p, Py_ssize_t slot, uint32_t id, uint32_t cid, int64_t depth,
                  int64_t ts, int64_t calltime, const pvalue_t *v)
{
    p->ret = *v;
    return pair_return(p, slot, id, cid, depth, ts, calltime);
}

/* A graph record (``id``, ``cid`` what pairs) of a walk whose frames carry no path, with
 * its value: an entry's frame pushed after what it ends, or a return's call made */
static inline int
pair_record(pair_t *p, Py_ssize_t slot, const record_t *r, uint32_t id, uint32_t cid,
            const pvalue_t *v)
{
    int64_t ts = (int64_t)r->ts, depth = (int64_t)r->b;
    if (r->type != FNT_TRACE_GRAPH_ENT)
        return pair_return_value(p, slot, id, cid, depth, ts, (int64_t)r->d, v);
    if (pair_enter_close(p, slot, depth, ts) < 0
            || pair_push(p, slot, id, cid, depth, ts, 0) < 0)
        return -1;
    return pair_entry_value(p, slot, v);
}
