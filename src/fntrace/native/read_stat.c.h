/*
 * StatWalk is the native twin of ``fntrace stat``'s walk: output/calls.py's CallBuilder
 * pairing entries and returns, feeding output/stat.py's StatCollector, over the
 * decoded ring-buffer records of a trace file.  The Python pair turns every record
 * into a TraceEntry and every call into a Call; this walk keeps one small frame per
 * open call and one row per function, so a trace is profiled at the speed its blocks
 * decode.
 *
 *     TraceFile blocks (one thread slot's, in order)        rows, by symbol id
 *     lost | 32-byte records ...   --feed(cpu, ...)-->      hit, time, time^2, self,
 *     lost | 32-byte records ...       per-slot stack       timed, where first hit
 *
 * Slots are fed one after another, not merged by time: a slot's calls depend on its
 * own records only.  What the merge decides -- the order in which rows are first hit,
 * which breaks ties when the table is sorted -- is kept as the first hit's (time, slot,
 * index) and the rows come out sorted by it, which is the merge's order as long as each
 * slot's records are in time order.  When they are not, or a value leaves the range
 * the sums are exact in, ``feed`` says so (returns False) and the caller reads the
 * trace the Python way: the walk is exact or it is not used.
 *
 * Rows are keyed by symbol id, the Python walk by name; ``canon`` maps the ids that
 * share a name with another to one of them, so calls pair and rows add up as they do
 * by name.
 *
 * With ``stacks`` the same walk counts call paths instead of functions (folded
 * stacks, output/folded.py): a trie of paths (trie_t, shared with CallRows), the self
 * time and calls of each.
 *
 * With ``dist`` each row also keeps its calls' durations as a distribution (the
 * shortest, the longest, and a log-linear histogram: ``fntrace stat``'s percentiles,
 * ``fntrace diff``); with ``edges`` the walk counts the calls of each caller -> callee
 * edge (``fntrace diff``'s call paths that appear or vanish).
 * The histogram is log_hist.h's.
 */

#include "log_hist.h"

/* |durations| at or above this leave the walk to Python: the sums of their squares
 * must stay exact in 128 bits (2^48 ns is more than three days) */
#define DUR_LIMIT ((int64_t)1 << 48)

typedef struct {
    uint32_t func;
    uint32_t node;          /* stacks: the call path down to this frame */
    int64_t depth;
    int64_t start;
    int64_t children;
} frame_t;

typedef struct {
    frame_t *st;
    Py_ssize_t n, cap;
    int64_t last_ts;        /* CallBuilder.last_ts: graph records only */
    int has_last;
    int64_t gap;            /* where the slot's last loss began */
    int has_gap;
    uint64_t prev_ts;       /* any record: the time order check */
    uint64_t seq;           /* records of the slot so far */
    int used;
} slot_t;

typedef struct {
    uint64_t key;
    uint32_t func;
    int64_t cpu;
    uint64_t hit, timed;
    __int128 time, self;
    unsigned __int128 sq;
    uint64_t first_ts, first_seq;
    int64_t first_cpu;
    /* dist: the least and greatest duration, and their histogram */
    int64_t min, max;
    log_hist h;
} row_t;

typedef struct {
    uint32_t *parent, *func, *last;
    Py_ssize_t n, cap;          /* paths 1..n */
    Py_ssize_t *table;          /* open addressing by (parent, func): path, 0 empty */
    Py_ssize_t tcap;
} trie_t;

typedef struct {
    PyObject_HEAD
    int per_thread;
    PyObject *canon;        /* dict id -> id, or NULL */
    slot_t *slots;
    Py_ssize_t nslots;
    row_t *rows;
    Py_ssize_t nrows, caprows;
    Py_ssize_t *table;      /* open addressing: row index + 1, 0 empty */
    Py_ssize_t tcap;
    uint64_t no_return, no_entry;
    int unsure;             /* the walk cannot be exact: the caller reads the Python way */
    const char *why;
    /* stacks: a counter per call path (folded stacks) instead of a row per function;
     * path 0 is the empty one, path k (k >= 1) is path parent[k] then func[k] */
    int stacks;
    trie_t tr;
    __int128 *n_self;           /* per path */
    uint64_t *n_calls;
    Py_ssize_t capcounts;
    uint64_t incomplete;
    /* dist: the distributions in the rows; edges: the calls per edge, edge k of ``ed``
     * being (caller id + 1, or 0 for none: the trie's parent) -> callee */
    int dist, edges;
    int calltime;           /* durations from the returns' calltimes (stat --cpu) */
    trie_t ed;
    uint64_t *e_calls;
    Py_ssize_t cape;
} StatWalk;

static void
walk_fail(StatWalk *w, const char *why)
{
    if (!w->unsure) {
        w->unsure = 1;
        w->why = why;
    }
}

static int
table_grow(StatWalk *w)
{
    Py_ssize_t cap = w->tcap ? w->tcap * 2 : 1024;
    Py_ssize_t *t = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < w->nrows; i++) {
        Py_ssize_t h = (Py_ssize_t)(mix(w->rows[i].key) & (uint64_t)(cap - 1));
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = i + 1;
    }
    PyMem_Free(w->table);
    w->table = t;
    w->tcap = cap;
    return 0;
}

/* StatCollector._row: the row of (slot, func), made at its first touch */
static row_t *
row_of(StatWalk *w, uint32_t func, int64_t cpu, uint64_t ts, uint64_t seq)
{
    uint64_t key = w->per_thread ? (((uint64_t)cpu + 1) << 32) | func : func;
    if (w->nrows * 2 >= w->tcap && table_grow(w) < 0)
        return NULL;
    Py_ssize_t h = (Py_ssize_t)(mix(key) & (uint64_t)(w->tcap - 1));
    while (w->table[h]) {
        row_t *r = &w->rows[w->table[h] - 1];
        if (r->key == key) {
            /* slots are walked one after another: an earlier slot may touch the row
             * later in time than this one (the merge's first touch is the least) */
            if (ts < r->first_ts || (ts == r->first_ts && (cpu < r->first_cpu
                    || (cpu == r->first_cpu && seq < r->first_seq)))) {
                r->first_ts = ts;
                r->first_cpu = cpu;
                r->first_seq = seq;
            }
            return r;
        }
        h = (h + 1) & (w->tcap - 1);
    }
    if (ARRAY_ROOM(w->rows, w->nrows, w->caprows, 256) < 0)
        return NULL;
    row_t *r = &w->rows[w->nrows++];
    memset(r, 0, sizeof(*r));
    r->key = key;
    r->func = func;
    r->cpu = cpu;
    r->first_ts = ts;
    r->first_cpu = cpu;
    r->first_seq = seq;
    w->table[h] = w->nrows;
    return r;
}

/* the path ``parent`` then ``func``, made when first seen; 0 and an exception when
 * memory runs out */
static uint32_t trie_find(trie_t *t, uint32_t parent, uint32_t func);

static inline uint32_t
trie_path(trie_t *t, uint32_t parent, uint32_t func)
{
    if ((Py_ssize_t)parent <= t->n && t->last != NULL) {
        uint32_t k = t->last[parent];
        if (k && t->func[k] == func)
            return k;
    }
    uint32_t k = trie_find(t, parent, func);
    if (k && (Py_ssize_t)parent <= t->n)
        t->last[parent] = k;
    return k;
}

/* trie_path by the table (the path made when first seen) */
static uint32_t
trie_find(trie_t *t, uint32_t parent, uint32_t func)
{
    uint64_t key = ((uint64_t)parent << 32) | func;
    if ((t->n + 1) * 2 >= t->tcap) {
        Py_ssize_t cap = t->tcap ? t->tcap * 2 : 1024;
        Py_ssize_t *tab = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
        if (tab == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        for (Py_ssize_t i = 1; i <= t->n; i++) {
            uint64_t k = ((uint64_t)t->parent[i] << 32) | t->func[i];
            Py_ssize_t h = (Py_ssize_t)(mix(k) & (uint64_t)(cap - 1));
            while (tab[h])
                h = (h + 1) & (cap - 1);
            tab[h] = i;
        }
        PyMem_Free(t->table);
        t->table = tab;
        t->tcap = cap;
    }
    Py_ssize_t h = (Py_ssize_t)(mix(key) & (uint64_t)(t->tcap - 1));
    while (t->table[h]) {
        Py_ssize_t i = t->table[h];
        if (t->parent[i] == parent && t->func[i] == func)
            return (uint32_t)i;
        h = (h + 1) & (t->tcap - 1);
    }
    if (t->n + 1 >= t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 256;
        if (cap > 0x7fffffff) {
            PyErr_NoMemory();
            return 0;
        }
        if (ARRAY_RESIZE(t->parent, cap) < 0 || ARRAY_RESIZE(t->func, cap) < 0
                || ARRAY_RESIZE(t->last, cap) < 0)
            return 0;
        if (t->cap == 0)
            t->last[0] = 0;
        t->cap = cap;
    }
    Py_ssize_t i = ++t->n;
    t->parent[i] = parent;
    t->func[i] = func;
    t->last[i] = 0;
    t->table[h] = i;
    return (uint32_t)i;
}

static void
trie_free(trie_t *t)
{
    PyMem_Free(t->parent);
    PyMem_Free(t->func);
    PyMem_Free(t->last);
    PyMem_Free(t->table);
}

/* the first frame of a function tracer hit's path (folded's "\0hit"): no symbol id */
#define HIT_PATH UINT32_MAX

/* StatWalk's path, with its counters */
static uint32_t
node_of(StatWalk *w, uint32_t parent, uint32_t func)
{
    uint32_t k = trie_path(&w->tr, parent, func);
    if (k == 0)
        return 0;
    if (w->capcounts <= (Py_ssize_t)k) {
        Py_ssize_t cap = w->tr.cap;
        if (ARRAY_RESIZE(w->n_self, cap) < 0 || ARRAY_RESIZE(w->n_calls, cap) < 0)
            return 0;
        for (Py_ssize_t i = w->capcounts; i < cap; i++) {
            w->n_self[i] = 0;
            w->n_calls[i] = 0;
        }
        w->capcounts = cap;
    }
    return k;
}

/* edges: one more call of caller -> callee (``from``: the caller's id + 1, 0 for none) */
static int
edge_add(StatWalk *w, uint32_t from, uint32_t callee)
{
    uint32_t k = trie_path(&w->ed, from, callee);
    if (k == 0)
        return -1;
    if (w->cape <= (Py_ssize_t)k) {
        Py_ssize_t cap = w->ed.cap;
        if (ARRAY_RESIZE(w->e_calls, cap) < 0)
            return -1;
        memset(w->e_calls + w->cape, 0, (size_t)(cap - w->cape) * sizeof(uint64_t));
        w->cape = cap;
    }
    w->e_calls[k]++;
    return 0;
}

/* dist: one timed call of row ``r`` took ``dur`` */
static inline int
row_dist(row_t *r, int64_t dur)
{
    if (r->timed == 0 || dur < r->min)
        r->min = dur;
    if (r->timed == 0 || dur > r->max)
        r->max = dur;
    return hist_add(&r->h, dur);
}

/* edge_add's ``from`` of a call ending on slot ``s``: the frame open under it */
#define CALLER_OF(s) ((s)->n ? (s)->st[(s)->n - 1].func + 1 : 0)

static int
push(slot_t *s, uint32_t func, int64_t depth, int64_t start, uint32_t node)
{
    if (ARRAY_ROOM(s->st, s->n, s->cap, 64) < 0)
        return -1;
    frame_t *f = &s->st[s->n++];
    f->func = func;
    f->node = node;
    f->depth = depth;
    f->start = start;
    f->children = 0;
    return 0;
}

/* CallBuilder._close_deeper then StatCollector._add of each call it makes: the calls
 * are incomplete (no return read), entered (their rows exist), so they count only as
 * calls with no return; their durations go to the frames under them */
static int
close_deeper(StatWalk *w, slot_t *s, int64_t depth, int64_t ts)
{
    while (s->n && s->st[s->n - 1].depth >= depth) {
        frame_t *f = &s->st[--s->n];
        if (w->edges && edge_add(w, CALLER_OF(s), f->func) < 0)
            return -1;
        int64_t dur = ts - f->start;
        if (dur < 0)
            dur = 0;
        if (dur >= DUR_LIMIT)
            walk_fail(w, "a duration out of range");
        w->no_return++;
        if (w->stacks) {
            int64_t self = dur - f->children;
            w->n_self[f->node] += self < 0 ? 0 : self;
            w->n_calls[f->node]++;
            w->incomplete++;
        }
        if (s->n)
            s->st[s->n - 1].children += dur;
    }
    return 0;
}

static slot_t *
slot_of(StatWalk *w, Py_ssize_t cpu)
{
    if (cpu >= w->nslots) {
        Py_ssize_t n = cpu + 1;
        if (ARRAY_RESIZE(w->slots, n) < 0)
            return NULL;
        memset(w->slots + w->nslots, 0, (size_t)(n - w->nslots) * sizeof(slot_t));
        w->nslots = n;
    }
    return &w->slots[cpu];
}

/* ``*id`` made the id its name is walked under (``canon``: id -> id for the ids that
 * share a name with another, or NULL when none do) */
static int canon_find(PyObject *canon, uint32_t *id);

static inline int
canon_lookup(PyObject *canon, uint32_t *id)
{
    return canon == NULL ? 0 : canon_find(canon, id);
}

/* canon_lookup's look in the dict (every record of a walk asks: most traces have none) */
static int
canon_find(PyObject *canon, uint32_t *id)
{
    PyObject *k = PyLong_FromUnsignedLong(*id);
    if (k == NULL)
        return -1;
    PyObject *v = PyDict_GetItemWithError(canon, k);
    Py_DECREF(k);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    unsigned long c = PyLong_AsUnsignedLong(v);
    if (c == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    *id = (uint32_t)c;
    return 0;
}

/* feed(cpu, records, lost, ibase): one block of slot ``cpu``'s decoded records, after
 * ``lost`` records the buffer dropped; ``ibase`` is added to the symbol ids (a merged
 * trace of several processes).  False: the walk cannot be exact (see ``why``). */
static PyObject *
walk_feed(StatWalk *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs_check(nargs, 4, "feed(cpu, records, lost, ibase)") < 0)
        return NULL;
    Py_ssize_t cpu = PyLong_AsSsize_t(args[0]);
    long long lost = PyLong_AsLongLong(args[2]);
    unsigned long ibase = PyLong_AsUnsignedLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (cpu < 0 || cpu >= SLOT_LIMIT) {
        walk_fail(w, "a thread slot out of range");
        Py_RETURN_FALSE;
    }
    if (w->unsure)
        Py_RETURN_FALSE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len % FNT_RECORD_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "feed: records are 32 bytes each");
        return NULL;
    }
    slot_t *s = slot_of(w, cpu);
    if (s == NULL)
        goto error;
    if (lost && s->has_last) {
        /* CallBuilder.feed(LostEvents): close what is open at the slot's last time */
        s->gap = s->last_ts;
        s->has_gap = 1;
        if (close_deeper(w, s, -1, s->last_ts) < 0)
            goto error;
    }
    const record_t *rec = (const record_t *)view.buf;
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    int dups = w->canon != NULL && PyDict_GET_SIZE(w->canon) > 0;
    for (Py_ssize_t i = 0; i < n && !w->unsure; i++) {
        record_t r;
        memcpy(&r, &rec[i], sizeof(r));
        uint64_t seq = s->seq++;
        if (s->used && r.ts < s->prev_ts)
            walk_fail(w, "records out of time order");
        s->used = 1;
        s->prev_ts = r.ts;
        if (r.ts >= ((uint64_t)1 << 62))
            walk_fail(w, "a timestamp out of range");
        unsigned type = r.type;
        if (type != FNT_TRACE_FN && type != FNT_TRACE_GRAPH_ENT && type != FNT_TRACE_GRAPH_RET)
            continue;
        uint32_t func = r.a;
        if (type == FNT_TRACE_FN || func)
            func += (uint32_t)ibase;
        if (dups && canon_lookup(w->canon, &func) < 0)
            goto error;
        int64_t ts = (int64_t)r.ts;
        if (type == FNT_TRACE_FN && w->stacks) {
            /* folded's hit stacks: [HIT_PATH, caller,] function, counted apart from
             * the timed paths (a hit has no duration) */
            uint32_t caller = r.b ? r.b + (uint32_t)ibase : 0;
            if (caller && dups && canon_lookup(w->canon, &caller) < 0)
                goto error;
            uint32_t node = node_of(w, 0, HIT_PATH);
            if (node && caller)
                node = node_of(w, node, caller);
            if (node)
                node = node_of(w, node, func);
            if (node == 0)
                goto error;
            w->n_calls[node]++;
            continue;
        }
        if (type == FNT_TRACE_FN) {
            row_t *row = row_of(w, func, cpu, r.ts, seq);
            if (row == NULL)
                goto error;
            row->hit++;
            if (w->edges) {
                /* the function tracer's record names its caller */
                uint32_t caller = r.b ? r.b + (uint32_t)ibase : 0;
                if (caller && dups && canon_lookup(w->canon, &caller) < 0)
                    goto error;
                if (edge_add(w, caller ? caller + 1 : 0, func) < 0)
                    goto error;
            }
            continue;
        }
        int64_t depth = (int64_t)r.b;
        s->last_ts = ts;
        s->has_last = 1;
        if (type == FNT_TRACE_GRAPH_ENT) {
            if (!w->stacks) {
                row_t *row = row_of(w, func, cpu, r.ts, seq);
                if (row == NULL)
                    goto error;
                row->hit++;
            }
            if (s->n && s->st[s->n - 1].depth >= depth
                    && close_deeper(w, s, depth, ts) < 0)
                goto error;
            uint32_t node = 0;
            if (w->stacks) {
                node = node_of(w, s->n ? s->st[s->n - 1].node : 0, func);
                if (node == 0)
                    goto error;
            }
            if (push(s, func, depth, ts, node) < 0)
                goto error;
            continue;
        }
        /* a return */
        if (s->n && s->st[s->n - 1].depth > depth && close_deeper(w, s, depth + 1, ts) < 0)
            goto error;
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].func != func
                && close_deeper(w, s, depth, ts) < 0)       /* its return was lost */
            goto error;
        if (r.d > r.ts) {
            /* calltime after the return: the Python walk's arithmetic, not ours */
            walk_fail(w, "a calltime after its return");
            break;
        }
        int64_t start = (int64_t)r.d, dur, self;
        int entry_seen;
        uint32_t node = 0;
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].func == func) {
            frame_t *f = &s->st[--s->n];
            node = f->node;
            /* CallBuilder's: the return's calltime (calltime mode) when it lies
             * between the entry and the return, else the entry's time */
            if (!(w->calltime && f->start <= start) && f->start <= ts)
                start = f->start;
            dur = ts - start;
            self = dur - f->children;
            if (self < 0)
                self = 0;
            entry_seen = 1;
        } else {
            /* the entry is not in the trace: the call is made from its return */
            if (s->has_gap && start < s->gap)
                start = s->gap;
            dur = ts - start;
            self = dur;
            entry_seen = 0;
            if (w->stacks) {
                node = node_of(w, s->n ? s->st[s->n - 1].node : 0, func);
                if (node == 0)
                    goto error;
            }
        }
        if (dur >= DUR_LIMIT || dur <= -DUR_LIMIT) {
            walk_fail(w, "a duration out of range");
            break;
        }
        if (s->n)
            s->st[s->n - 1].children += dur;
        if (w->edges && edge_add(w, CALLER_OF(s), func) < 0)
            goto error;
        if (w->stacks) {
            w->n_self[node] += self;
            w->n_calls[node]++;
            continue;
        }
        row_t *row = row_of(w, func, cpu, r.ts, seq);
        if (row == NULL)
            goto error;
        if (!entry_seen) {
            row->hit++;
            w->no_entry++;
        }
        row->time += dur;
        row->sq += (unsigned __int128)((__int128)dur * dur);
        row->self += self;
        if (w->dist && row_dist(row, dur) < 0)
            goto error;
        row->timed++;
    }
    PyBuffer_Release(&view);
    if (w->unsure)
        Py_RETURN_FALSE;
    Py_RETURN_TRUE;
error:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *
int128_long(__int128 v)
{
    if (v >= INT64_MIN && v <= INT64_MAX)
        return PyLong_FromLongLong((long long)v);
    int neg = v < 0;
    unsigned __int128 u = neg ? (unsigned __int128)(-v) : (unsigned __int128)v;
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(u >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)u);
    PyObject *sh = PyLong_FromLong(64);
    PyObject *a = NULL, *b = NULL, *out = NULL;
    if (hi && lo && sh && (a = PyNumber_Lshift(hi, sh)) && (b = PyNumber_Or(a, lo)))
        out = neg ? PyNumber_Negative(b) : (Py_INCREF(b), b);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sh);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

static PyObject *
uint128_long(unsigned __int128 v)
{
    if (v <= UINT64_MAX)
        return PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *sh = PyLong_FromLong(64);
    PyObject *a = NULL, *out = NULL;
    if (hi && lo && sh && (a = PyNumber_Lshift(hi, sh)))
        out = PyNumber_Or(a, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sh);
    Py_XDECREF(a);
    return out;
}

static int
first_order(const void *pa, const void *pb)
{
    const row_t *a = pa, *b = pb;
    if (a->first_ts != b->first_ts)
        return a->first_ts < b->first_ts ? -1 : 1;
    if (a->first_cpu != b->first_cpu)
        return a->first_cpu < b->first_cpu ? -1 : 1;
    if (a->first_seq != b->first_seq)
        return a->first_seq < b->first_seq ? -1 : 1;
    return 0;
}

/* finish(firsts=False) -> (rows, no_return, no_entry): CallBuilder.finish's open calls
 * counted, then the rows in first-hit order, each (id, slot or None, hit, time,
 * time_squared, self_ns, timed), and with ``firsts`` the first hit's (time, slot,
 * index): what orders the rows of several walks added up (tracefile/parallel.py) */
static PyObject *
walk_finish(StatWalk *w, PyObject *args)
{
    int firsts = 0;
    if (!PyArg_ParseTuple(args, "|p:finish", &firsts))
        return NULL;
    for (Py_ssize_t c = 0; c < w->nslots; c++) {
        slot_t *s = &w->slots[c];
        if (close_deeper(w, s, -1, s->has_last ? s->last_ts : 0) < 0)
            return NULL;
    }
    if (w->unsure)
        Py_RETURN_NONE;
    if (w->stacks) {
        PyObject *nodes = PyList_New(w->tr.n);
        if (nodes == NULL)
            return NULL;
        for (Py_ssize_t i = 1; i <= w->tr.n; i++) {
            PyObject *t = Py_BuildValue("(kkNK)", (unsigned long)w->tr.parent[i],
                                        (unsigned long)w->tr.func[i], int128_long(w->n_self[i]),
                                        (unsigned long long)w->n_calls[i]);
            if (t == NULL) {
                Py_DECREF(nodes);
                return NULL;
            }
            PyList_SET_ITEM(nodes, i - 1, t);
        }
        return Py_BuildValue("(NK)", nodes, (unsigned long long)w->incomplete);
    }
    qsort(w->rows, (size_t)w->nrows, sizeof(row_t), first_order);
    PyObject *rows = PyList_New(w->nrows);
    if (rows == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < w->nrows; i++) {
        row_t *r = &w->rows[i];
        PyObject *cpu = w->per_thread ? PyLong_FromLongLong(r->cpu) : Py_NewRef(Py_None);
        PyObject *t = Py_BuildValue("(kNKNNNK)", (unsigned long)r->func, cpu,
                                    (unsigned long long)r->hit, int128_long(r->time),
                                    uint128_long(r->sq), int128_long(r->self),
                                    (unsigned long long)r->timed);
        if (t != NULL && firsts) {
            PyObject *more = Py_BuildValue("(KLK)", (unsigned long long)r->first_ts,
                                           (long long)r->first_cpu,
                                           (unsigned long long)r->first_seq);
            Py_XSETREF(t, more ? PySequence_Concat(t, more) : NULL);
            Py_XDECREF(more);
        }
        if (t != NULL && w->dist) {
            PyObject *more = Py_BuildValue("(LLN)", (long long)r->min, (long long)r->max,
                                           hist_dict(&r->h));
            Py_XSETREF(t, more ? PySequence_Concat(t, more) : NULL);
            Py_XDECREF(more);
        }
        if (t == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        PyList_SET_ITEM(rows, i, t);
    }
    /* the rows are out: the hash table is not needed again (a row found after this
     * is made anew by table_grow) */
    PyMem_Free(w->table);
    w->table = NULL;
    w->tcap = 0;
    if (w->unsure) {
        Py_DECREF(rows);
        Py_RETURN_NONE;
    }
    if (w->edges) {
        PyObject *edges = PyList_New(w->ed.n);
        if (edges == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        for (Py_ssize_t i = 1; i <= w->ed.n; i++) {
            PyObject *t = Py_BuildValue("(kkK)", (unsigned long)w->ed.parent[i],
                                        (unsigned long)w->ed.func[i],
                                        (unsigned long long)w->e_calls[i]);
            if (t == NULL) {
                Py_DECREF(rows);
                Py_DECREF(edges);
                return NULL;
            }
            PyList_SET_ITEM(edges, i - 1, t);
        }
        return Py_BuildValue("(NKKN)", rows, (unsigned long long)w->no_return,
                             (unsigned long long)w->no_entry, edges);
    }
    return Py_BuildValue("(NKK)", rows, (unsigned long long)w->no_return,
                         (unsigned long long)w->no_entry);
}

static PyObject *
walk_why(StatWalk *w, void *closure)
{
    if (!w->unsure)
        Py_RETURN_NONE;
    return PyUnicode_FromString(w->why);
}

static int
walk_init(StatWalk *w, PyObject *args, PyObject *kw)
{
    static char *names[] = {"per_thread", "canon", "stacks", "dist", "edges", "calltime",
                            NULL};
    int per_thread = 0, stacks = 0, dist = 0, edges = 0, calltime = 0;
    PyObject *canon = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pOpppp:StatWalk", names, &per_thread,
                                     &canon, &stacks, &dist, &edges, &calltime))
        return -1;
    if (w->tr.n || w->nrows) {
        PyErr_SetString(PyExc_ValueError, "StatWalk: made twice");
        return -1;
    }
    w->stacks = stacks;
    w->dist = dist && !stacks;
    w->edges = edges && !stacks;
    w->calltime = calltime;
    if (canon != Py_None && !PyDict_Check(canon)) {
        PyErr_SetString(PyExc_TypeError, "StatWalk: canon is a dict or None");
        return -1;
    }
    w->per_thread = per_thread;
    Py_XSETREF(w->canon, canon == Py_None ? NULL : Py_NewRef(canon));
    return 0;
}

static void
walk_dealloc(StatWalk *w)
{
    for (Py_ssize_t c = 0; c < w->nslots; c++)
        PyMem_Free(w->slots[c].st);
    PyMem_Free(w->slots);
    for (Py_ssize_t i = 0; i < w->nrows; i++)
        hist_free(&w->rows[i].h);
    PyMem_Free(w->rows);
    trie_free(&w->ed);
    PyMem_Free(w->e_calls);
    PyMem_Free(w->table);
    trie_free(&w->tr);
    PyMem_Free(w->n_self);
    PyMem_Free(w->n_calls);
    Py_XDECREF(w->canon);
    read_free((PyObject *)w);
}

static PyMethodDef walk_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))walk_feed, METH_FASTCALL,
     "feed(cpu, records, lost, ibase) -> bool: one block of a slot's decoded records"},
    {"finish", (PyCFunction)walk_finish, METH_VARARGS,
     "finish(firsts=False) -> (rows, no_return, no_entry), or None when the walk cannot "
     "be exact"},
    {NULL}
};

static PyGetSetDef walk_getset[] = {
    {"why", (getter)walk_why, NULL, "why the walk cannot be exact (None: it is)", NULL},
    {NULL}
};

READ_TYPE_GETSET(walk, StatWalk,
                 "StatWalk(per_thread=False, canon=None, stacks=False, dist=False, "
                 "edges=False, calltime=False): fntrace stat's walk over decoded records "
                 "(output/stat.py's twin); with stacks, folded's (output/folded.py's): "
                 "finish() -> ([(parent, id, self_ns, calls)], incomplete), path k being "
                 "list item k - 1; with dist, each row ends in (min, max, {bucket: "
                 "calls}); with edges, finish() adds [(caller id + 1 or 0, id, calls)]");
