/*
 * The reading path's native walks (part of fntrace._native).
 *
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fntrace_record_format.h"

/* |durations| at or above this leave the walk to Python: the sums of their squares
 * must stay exact in 128 bits (2^48 ns is more than three days) */
#define DUR_LIMIT ((int64_t)1 << 48)
#define SLOT_LIMIT (1 << 20)

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
} row_t;

/* Call paths: path 0 is the empty one, path k (k >= 1) is path parent[k] then func[k] */
typedef struct {
    uint32_t *parent, *func;
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
} StatWalk;

static void
walk_fail(StatWalk *w, const char *why)
{
    if (!w->unsure) {
        w->unsure = 1;
        w->why = why;
    }
}

static inline uint64_t
mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
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
    if (w->nrows == w->caprows) {
        Py_ssize_t cap = w->caprows ? w->caprows * 2 : 256;
        row_t *rows = PyMem_Realloc(w->rows, (size_t)cap * sizeof(row_t));
        if (rows == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        w->rows = rows;
        w->caprows = cap;
    }
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
static uint32_t
trie_path(trie_t *t, uint32_t parent, uint32_t func)
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
        uint32_t *p = PyMem_Realloc(t->parent, (size_t)cap * sizeof(uint32_t));
        if (p == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        t->parent = p;
        uint32_t *f = PyMem_Realloc(t->func, (size_t)cap * sizeof(uint32_t));
        if (f == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        t->func = f;
        t->cap = cap;
    }
    Py_ssize_t i = ++t->n;
    t->parent[i] = parent;
    t->func[i] = func;
    t->table[h] = i;
    return (uint32_t)i;
}

static void
trie_free(trie_t *t)
{
    PyMem_Free(t->parent);
    PyMem_Free(t->func);
    PyMem_Free(t->table);
}

/* StatWalk's path, with its counters */
static uint32_t
node_of(StatWalk *w, uint32_t parent, uint32_t func)
{
    uint32_t k = trie_path(&w->tr, parent, func);
    if (k == 0)
        return 0;
    if (w->capcounts <= (Py_ssize_t)k) {
        Py_ssize_t cap = w->tr.cap;
        __int128 *se = PyMem_Realloc(w->n_self, (size_t)cap * sizeof(__int128));
        if (se == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        w->n_self = se;
        uint64_t *c = PyMem_Realloc(w->n_calls, (size_t)cap * sizeof(uint64_t));
        if (c == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        w->n_calls = c;
        for (Py_ssize_t i = w->capcounts; i < cap; i++) {
            w->n_self[i] = 0;
            w->n_calls[i] = 0;
        }
        w->capcounts = cap;
    }
    return k;
}

static int
push(slot_t *s, uint32_t func, int64_t depth, int64_t start, uint32_t node)
{
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        frame_t *st = PyMem_Realloc(s->st, (size_t)cap * sizeof(frame_t));
        if (st == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->st = st;
        s->cap = cap;
    }
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
static void
close_deeper(StatWalk *w, slot_t *s, int64_t depth, int64_t ts)
{
    while (s->n && s->st[s->n - 1].depth >= depth) {
        frame_t *f = &s->st[--s->n];
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
}

static slot_t *
slot_of(StatWalk *w, Py_ssize_t cpu)
{
    if (cpu >= w->nslots) {
        Py_ssize_t n = cpu + 1;
        slot_t *slots = PyMem_Realloc(w->slots, (size_t)n * sizeof(slot_t));
        if (slots == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        memset(slots + w->nslots, 0, (size_t)(n - w->nslots) * sizeof(slot_t));
        w->slots = slots;
        w->nslots = n;
    }
    return &w->slots[cpu];
}

/* ``*id`` made the id its name is walked under (``canon``: id -> id for the ids that
 * share a name with another, or NULL when none do) */
static int
canon_lookup(PyObject *canon, uint32_t *id)
{
    if (canon == NULL)
        return 0;
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
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "feed(cpu, records, lost, ibase)");
        return NULL;
    }
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
        close_deeper(w, s, -1, s->last_ts);
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
            walk_fail(w, "function hits");      /* folded's hit stacks: Python's */
            break;
        }
        if (type == FNT_TRACE_FN) {
            row_t *row = row_of(w, func, cpu, r.ts, seq);
            if (row == NULL)
                goto error;
            row->hit++;
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
            if (s->n && s->st[s->n - 1].depth >= depth)
                close_deeper(w, s, depth, ts);
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
        if (s->n && s->st[s->n - 1].depth > depth)
            close_deeper(w, s, depth + 1, ts);
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].func != func)
            close_deeper(w, s, depth, ts);          /* its return was lost */
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
            if (f->start <= ts)
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

/* finish() -> (rows, no_return, no_entry): CallBuilder.finish's open calls counted,
 * then the rows in first-hit order, each (id, slot or None, hit, time, time_squared,
 * self_ns, timed) */
static PyObject *
walk_finish(StatWalk *w, PyObject *unused)
{
    for (Py_ssize_t c = 0; c < w->nslots; c++) {
        slot_t *s = &w->slots[c];
        close_deeper(w, s, -1, s->has_last ? s->last_ts : 0);
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
    static char *names[] = {"per_thread", "canon", "stacks", NULL};
    int per_thread = 0, stacks = 0;
    PyObject *canon = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pOp:StatWalk", names, &per_thread, &canon,
                                     &stacks))
        return -1;
    if (w->tr.n || w->nrows) {
        PyErr_SetString(PyExc_ValueError, "StatWalk: made twice");
        return -1;
    }
    w->stacks = stacks;
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
    PyTypeObject *tp = Py_TYPE(w);
    for (Py_ssize_t c = 0; c < w->nslots; c++)
        PyMem_Free(w->slots[c].st);
    PyMem_Free(w->slots);
    PyMem_Free(w->rows);
    PyMem_Free(w->table);
    trie_free(&w->tr);
    PyMem_Free(w->n_self);
    PyMem_Free(w->n_calls);
    Py_XDECREF(w->canon);
    tp->tp_free((PyObject *)w);
    Py_DECREF(tp);
}

static PyMethodDef walk_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))walk_feed, METH_FASTCALL,
     "feed(cpu, records, lost, ibase) -> bool: one block of a slot's decoded records"},
    {"finish", (PyCFunction)walk_finish, METH_NOARGS,
     "finish() -> (rows, no_return, no_entry), or None when the walk cannot be exact"},
    {NULL}
};

static PyGetSetDef walk_getset[] = {
    {"why", (getter)walk_why, NULL, "why the walk cannot be exact (None: it is)", NULL},
    {NULL}
};

static PyType_Slot walk_slots[] = {
    {Py_tp_doc, "StatWalk(per_thread=False, canon=None, stacks=False): fntrace stat's walk "
                "over decoded records (output/stat.py's twin); with stacks, folded's "
                "(output/folded.py's): finish() -> ([(parent, id, self_ns, calls)], "
                "incomplete), path k being list item k - 1"},
    {Py_tp_init, walk_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, walk_dealloc},
    {Py_tp_methods, walk_methods},
    {Py_tp_getset, walk_getset},
    {0, NULL},
};

static PyType_Spec walk_spec = {
    "fntrace._native.StatWalk", sizeof(StatWalk), 0, Py_TPFLAGS_DEFAULT, walk_slots,
};

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
    char *buf;
    Py_ssize_t blen, bcap;
} tbuf_t;

typedef struct {
    PyObject *data;         /* bytes of records */
    const record_t *rec;
    Py_ssize_t n, pos;
    long long lost;
    uint32_t ibase;
} gblock_t;

typedef struct {
    gblock_t *q;            /* fed, not yet read */
    Py_ssize_t head, n, cap;
    int eof;
    long long *marks;       /* loss notes waiting for the slot's next record */
    Py_ssize_t nmarks, capmarks;
    const char *comm;       /* the proc column's text */
    Py_ssize_t comm_len;
    long long pid;
    uint64_t *enter;        /* depth -> 1 + the (canonical) id opened there, 0: none */
    Py_ssize_t nenter;
} gslot_t;

/* the slots of a time-ordered walk, their blocks fed as it asks */
typedef struct {
    gslot_t *slots;
    Py_ssize_t nslots;
} merge_t;

typedef struct {
    uint32_t id;
    const char *s;
    Py_ssize_t len;
} gname_t;

/* id -> a name's UTF-8 bytes (open addressing), the bytes kept alive by ``keep`` */
typedef struct {
    gname_t *t;
    Py_ssize_t cap;
    PyObject *keep;
} names_t;

typedef struct {
    PyObject_HEAD
    int o_cpu, o_overhead, o_proc, o_duration, o_abstime, o_tail;
    int cpu_width;
    merge_t m;
    names_t names;
    PyObject *keep;         /* the procs' bytes objects */
    PyObject *canon;
    tbuf_t t;               /* the text made by this step */
    int done;
} GraphText;

static int
tb_reserve(tbuf_t *g, Py_ssize_t more)
{
    if (g->blen + more <= g->bcap)
        return 0;
    Py_ssize_t cap = g->bcap ? g->bcap : 1 << 16;
    while (cap < g->blen + more)
        cap *= 2;
    char *b = PyMem_Realloc(g->buf, (size_t)cap);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    g->buf = b;
    g->bcap = cap;
    return 0;
}

/* the caller reserved room */
static inline void
tb_put(tbuf_t *g, const char *s, Py_ssize_t n)
{
    memcpy(g->buf + g->blen, s, (size_t)n);
    g->blen += n;
}

static inline void
tb_spaces(tbuf_t *g, Py_ssize_t n)
{
    memset(g->buf + g->blen, ' ', (size_t)n);
    g->blen += n;
}

static inline Py_ssize_t
u64_text(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

/* trace_find_mark, then trace_print_graph_duration and the bar: "+ 61.770 us   |  " */
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

/* a string literal put whole (the caller reserved room) */
#define TB_LIT(t, lit) tb_put((t), (lit), (Py_ssize_t)sizeof(lit) - 1)

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

/* names_t from a dict id -> str */
static int
names_init(names_t *n, PyObject *names)
{
    n->keep = PyList_New(0);
    if (n->keep == NULL)
        return -1;
    Py_ssize_t cap = 16;
    while (cap < PyDict_GET_SIZE(names) * 2)
        cap *= 2;
    n->t = PyMem_Calloc((size_t)cap, sizeof(gname_t));
    if (n->t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    n->cap = cap;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(names, &pos, &k, &v)) {
        unsigned long id = PyLong_AsUnsignedLong(k);
        if (id == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        PyObject *b = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
        if (b == NULL || PyList_Append(n->keep, b) < 0) {
            Py_XDECREF(b);
            return -1;
        }
        Py_DECREF(b);
        Py_ssize_t h = (Py_ssize_t)(mix(id) & (uint64_t)(cap - 1));
        while (n->t[h].s)
            h = (h + 1) & (cap - 1);
        n->t[h].id = (uint32_t)id;
        n->t[h].s = PyBytes_AS_STRING(b);
        n->t[h].len = PyBytes_GET_SIZE(b);
    }
    return 0;
}

static void
names_free(names_t *n)
{
    PyMem_Free(n->t);
    Py_CLEAR(n->keep);
}

/* the name of ``id``, or the kernel's raw address (``fmt``: "0x%x", or quoted for
 * JSON) when it has none, written into ``tmp`` (24 bytes) */
static const char *
names_get(const names_t *n, uint32_t id, Py_ssize_t *len, char *tmp, const char *fmt)
{
    if (n->cap) {
        Py_ssize_t h = (Py_ssize_t)(mix(id) & (uint64_t)(n->cap - 1));
        while (n->t[h].s) {
            if (n->t[h].id == id) {
                *len = n->t[h].len;
                return n->t[h].s;
            }
            h = (h + 1) & (n->cap - 1);
        }
    }
    *len = PyOS_snprintf(tmp, 24, fmt, id);
    return tmp;
}

static inline uint32_t
rec_id(const gblock_t *b, const record_t *r)
{
    return r->a ? r->a + b->ibase : 0;
}

/* The slot's next record, its block made current (loss notes of blocks passed on the
 * way queued); 0: there is none now, -1 the slot needs a block fed, 1 found */
static int
slot_next(gslot_t *s, gblock_t **blk)
{
    while (s->n) {
        gblock_t *b = &s->q[s->head];
        if (b->pos == 0 && b->lost) {
            if (s->nmarks == s->capmarks) {
                Py_ssize_t cap = s->capmarks ? s->capmarks * 2 : 4;
                long long *m = PyMem_Realloc(s->marks, (size_t)cap * sizeof(long long));
                if (m == NULL) {
                    PyErr_NoMemory();
                    return -2;
                }
                s->marks = m;
                s->capmarks = cap;
            }
            s->marks[s->nmarks++] = b->lost;
            b->lost = 0;
        }
        if (b->pos < b->n) {
            *blk = b;
            return 1;
        }
        Py_CLEAR(b->data);
        s->head = (s->head + 1) % s->cap;
        s->n--;
    }
    return s->eof ? 0 : -1;
}

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
static int
slot_peek(gslot_t *s, const record_t **nxt, gblock_t **nb)
{
    gblock_t *b = &s->q[s->head];
    if (b->pos + 1 < b->n) {
        *nxt = &b->rec[b->pos + 1];
        *nb = b;
        return 1;
    }
    for (Py_ssize_t i = 1; i < s->n; i++) {
        gblock_t *b2 = &s->q[(s->head + i) % s->cap];
        if (b2->lost)
            return 0;
        if (b2->n) {
            *nxt = b2->rec;
            *nb = b2;
            return 1;
        }
    }
    return s->eof ? 0 : -1;
}

static int
merge_init(merge_t *m, Py_ssize_t nslots)
{
    m->slots = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(gslot_t));
    if (m->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    m->nslots = nslots;
    return 0;
}

static void
merge_free(merge_t *m)
{
    for (Py_ssize_t k = 0; k < m->nslots; k++) {
        gslot_t *s = &m->slots[k];
        for (Py_ssize_t i = 0; i < s->n; i++)
            Py_XDECREF(s->q[(s->head + i) % s->cap].data);
        PyMem_Free(s->q);
        PyMem_Free(s->marks);
        PyMem_Free(s->enter);
    }
    PyMem_Free(m->slots);
    m->slots = NULL;
    m->nslots = 0;
}

/* a walk's feed(cpu[, lost, records, ibase]): the slot's next block, or (cpu alone)
 * that it has no more; ``*lost_sum`` counts the losses fed */
static PyObject *
merge_feed(merge_t *m, PyObject *const *args, Py_ssize_t nargs, long long *lost_sum)
{
    if (nargs != 1 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "feed(cpu[, lost, records, ibase])");
        return NULL;
    }
    Py_ssize_t cpu = PyLong_AsSsize_t(args[0]);
    if (cpu == -1 && PyErr_Occurred())
        return NULL;
    if (cpu < 0 || cpu >= m->nslots) {
        PyErr_SetString(PyExc_ValueError, "feed: not a slot of this trace");
        return NULL;
    }
    gslot_t *s = &m->slots[cpu];
    if (nargs == 1) {
        s->eof = 1;
        Py_RETURN_NONE;
    }
    long long lost = PyLong_AsLongLong(args[1]);
    unsigned long ibase = PyLong_AsUnsignedLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyBytes_Check(args[2]) || PyBytes_GET_SIZE(args[2]) % FNT_RECORD_SIZE) {
        PyErr_SetString(PyExc_TypeError, "feed: records are bytes of 32-byte records");
        return NULL;
    }
    if (lost > 0)
        *lost_sum += lost;
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 4;
        gblock_t *q = PyMem_Malloc((size_t)cap * sizeof(gblock_t));
        if (q == NULL)
            return PyErr_NoMemory();
        for (Py_ssize_t i = 0; i < s->n; i++)
            q[i] = s->q[(s->head + i) % s->cap];
        PyMem_Free(s->q);
        s->q = q;
        s->cap = cap;
        s->head = 0;
    }
    gblock_t *b = &s->q[(s->head + s->n) % s->cap];
    b->data = Py_NewRef(args[2]);
    b->rec = (const record_t *)PyBytes_AS_STRING(args[2]);
    b->n = PyBytes_GET_SIZE(args[2]) / FNT_RECORD_SIZE;
    b->pos = 0;
    b->lost = lost;
    b->ibase = (uint32_t)ibase;
    s->n++;
    Py_RETURN_NONE;
}

/* heapq.merge's choice: the slot of the least (time, slot) among the slots' next
 * records.  1: ``*best`` is it; 0: every slot is read; -1: slot ``*need`` must be fed
 * first; -2: an exception */
static int
merge_pick(merge_t *m, Py_ssize_t *best, Py_ssize_t *need)
{
    Py_ssize_t found = -1;
    uint64_t best_ts = 0;
    for (Py_ssize_t k = 0; k < m->nslots; k++) {
        gblock_t *b;
        int r = slot_next(&m->slots[k], &b);
        if (r == -2)
            return -2;
        if (r < 0) {
            *need = k;
            return -1;
        }
        if (r == 0)
            continue;
        uint64_t ts = b->rec[b->pos].ts;
        if (found < 0 || ts < best_ts) {
            found = k;
            best_ts = ts;
        }
    }
    if (found < 0)
        return 0;
    *best = found;
    return 1;
}

/* step() -> (text, need): the lines that could be made (each ending in a newline),
 * and the slot whose next block must be fed before more can be made (-1: none; the
 * text is the last when it is empty and need is -1) */
static PyObject *
gt_step(GraphText *g, PyObject *unused)
{
    g->t.blen = 0;
    Py_ssize_t need = -1;
    char tmp[24];
    while (!g->done && g->t.blen < (1 << 16)) {
        Py_ssize_t best = -1;
        int picked = merge_pick(&g->m, &best, &need);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            break;
        if (picked == 0) {
            /* every slot read: the losses nothing was read after, slot by slot */
            for (Py_ssize_t c = 0; c < g->m.nslots; c++)
                if (put_marks(g, c) < 0)
                    return NULL;
            g->done = 1;
            break;
        }
        gslot_t *s = &g->m.slots[best];
        gblock_t *b = &s->q[s->head];
        record_t r;
        memcpy(&r, &b->rec[b->pos], sizeof(r));
        uint32_t id = rec_id(b, &r), cid = id;
        if (canon_lookup(g->canon, &cid) < 0)
            return NULL;
        int64_t depth = (int64_t)r.b;
        Py_ssize_t nlen;
        const char *name = names_get(&g->names, id, &nlen, tmp, "0x%x");
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            /* get_return_for_leaf: the slot's next item, if it is this call's return */
            const record_t *nxt = NULL;
            gblock_t *nb = NULL;
            int pk = slot_peek(s, &nxt, &nb);
            if (pk < 0) {
                need = best;
                break;
            }
            int leaf = 0;
            if (pk == 1 && nxt->type == FNT_TRACE_GRAPH_RET) {
                uint32_t a = rec_id(nb, nxt);
                if (canon_lookup(g->canon, &a) < 0)
                    return NULL;
                leaf = a == cid;
            }
            if (put_marks(g, best) < 0)
                return NULL;
            if (tb_reserve(&g->t, 128 + nlen + depth * 2 + s->comm_len) < 0)
                return NULL;
            put_prologue(g, best, r.ts);
            b->pos++;
            if (leaf) {
                int64_t dur = (int64_t)nxt->ts - (int64_t)nxt->d;
                if (g->o_duration)
                    put_duration(g, dur < 0 ? 0 : dur);
                if (set_enter(s, depth, 0) < 0)
                    return NULL;
                nb->pos++;              /* the return is this line's */
            } else {
                if (g->o_duration)
                    tb_put(&g->t, DURATION_FILL, sizeof(DURATION_FILL) - 1);
                if (set_enter(s, depth, (uint64_t)cid + 1) < 0)
                    return NULL;
            }
            tb_spaces(&g->t, depth * 2);
            tb_put(&g->t, name, nlen);
            if (leaf)
                TB_LIT(&g->t, "();\n");
            else
                TB_LIT(&g->t, "() {\n");
            continue;
        }
        /* a return: "}" when it closes the block opened at its depth by the same
         * function, else it names its function */
        if (put_marks(g, best) < 0)
            return NULL;
        b->pos++;
        int match = depth < s->nenter && s->enter[depth] == (uint64_t)cid + 1;
        if (set_enter(s, depth, 0) < 0)
            return NULL;
        if (tb_reserve(&g->t, 128 + nlen + depth * 2 + s->comm_len) < 0)
            return NULL;
        put_prologue(g, best, r.ts);
        int64_t dur = (int64_t)r.ts - (int64_t)r.d;
        if (g->o_duration)
            put_duration(g, dur < 0 ? 0 : dur);
        tb_spaces(&g->t, depth * 2);
        if (match && !g->o_tail) {
            TB_LIT(&g->t, "}\n");
        } else {
            TB_LIT(&g->t, "} /* ");
            tb_put(&g->t, name, nlen);
            TB_LIT(&g->t, " */\n");
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8(g->t.buf, g->t.blen, "surrogateescape");
    if (text == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", text, need);
}

/* feed(cpu, lost, records, ibase): slot ``cpu``'s next block; feed(cpu) alone: the slot
 * has no more */
static PyObject *
gt_feed(GraphText *g, PyObject *const *args, Py_ssize_t nargs)
{
    long long lost = 0;
    return merge_feed(&g->m, args, nargs, &lost);
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
    int o[6];
    if (!PyArg_ParseTuple(args, "nO!O(pppppp)nO!:GraphText", &nslots, &PyDict_Type, &names,
                          &canon, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &width,
                          &PyDict_Type, &procs))
        return -1;
    if (g->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "GraphText: bad slot count (or made twice)");
        return -1;
    }
    g->o_cpu = o[0], g->o_overhead = o[1], g->o_proc = o[2], g->o_duration = o[3];
    g->o_abstime = o[4], g->o_tail = o[5];
    g->cpu_width = (int)width;
    if (canon != Py_None) {
        if (!PyDict_Check(canon)) {
            PyErr_SetString(PyExc_TypeError, "GraphText: canon is a dict or None");
            return -1;
        }
        if (PyDict_GET_SIZE(canon))
            g->canon = Py_NewRef(canon);
    }
    g->keep = PyList_New(0);
    if (g->keep == NULL)
        return -1;
    if (merge_init(&g->m, nslots) < 0)
        return -1;
    if (names_init(&g->names, names) < 0)
        return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(procs, &pos, &k, &v)) {
        Py_ssize_t c = PyLong_AsSsize_t(k);
        if (c == -1 && PyErr_Occurred())
            return -1;
        if (c < 0 || c >= nslots)
            continue;
        PyObject *b = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
        if (b == NULL || PyList_Append(g->keep, b) < 0) {
            Py_XDECREF(b);
            return -1;
        }
        Py_DECREF(b);
        g->m.slots[c].comm = PyBytes_AS_STRING(b);
        g->m.slots[c].comm_len = PyBytes_GET_SIZE(b);
    }
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
    PyTypeObject *tp = Py_TYPE(g);
    merge_free(&g->m);
    names_free(&g->names);
    PyMem_Free(g->t.buf);
    Py_XDECREF(g->keep);
    Py_XDECREF(g->canon);
    tp->tp_free((PyObject *)g);
    Py_DECREF(tp);
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
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

static PyMethodDef gt_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))gt_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase]): a slot's next block, or that it has no more"},
    {"step", (PyCFunction)gt_step, METH_NOARGS,
     "step() -> (text, need): lines, and the slot to feed before more (-1: none)"},
    {NULL}
};

static PyType_Slot gt_slots[] = {
    {Py_tp_doc, "GraphText(slots, names, canon, options, cpu_width, procs): function_graph's "
                "text of a trace file (output/function_graph.py's twin)"},
    {Py_tp_init, gt_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, gt_dealloc},
    {Py_tp_methods, gt_methods},
    {0, NULL},
};

static PyType_Spec gt_spec = {
    "fntrace._native.GraphText", sizeof(GraphText), 0, Py_TPFLAGS_DEFAULT, gt_slots,
};

/* -- ChromeCalls: the Chrome trace JSON's calls --------------------------------------
 *
 * The native twin of output/chrome_json.py's loop for a trace of calls (the blocks
 * text_ok accepts): the records merged by time as GraphText merges them, each slot's
 * calls paired as CallBuilder pairs them (without losses: the Chrome export shows a
 * loss as an instant and pairs across it), each call written as its complete event
 * when it ends, a loss as a "lost events" instant at the slot's next record, then the
 * calls left open (slots in the order their first record was read, innermost first)
 * and the losses nothing was read after.
 */

typedef struct {
    uint32_t id;            /* the record's id (its name) */
    uint32_t cid;           /* canonical: what pairs */
    int64_t depth, start, children;
} cframe_t;

typedef struct {
    cframe_t *st;
    Py_ssize_t n, cap;
    int64_t last_ts;        /* CallBuilder.last_ts */
    int seen;               /* read a graph record (CallBuilder._stacks has it) */
    uint64_t last_any;      /* the exporter's last[slot]: the last record's time */
    const char *tail;       /* "pid":P,"tid":T */
    Py_ssize_t tail_len;
} cslot_t;

typedef struct {
    PyObject_HEAD
    merge_t m;              /* the blocks, as GraphText's */
    cslot_t *cs;
    Py_ssize_t *order;      /* slots in the order of their first graph record */
    Py_ssize_t norder;
    names_t names;          /* id -> its name as a JSON string */
    PyObject *keep;
    PyObject *canon;
    tbuf_t t;
    int done;
    uint64_t n_calls, n_incomplete, n_instants;
    long long lost_total;
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

/* _Writer.call: ",\n" then the complete event */
static int
put_call(ChromeCalls *c, Py_ssize_t slot, uint32_t id, int64_t start, int64_t end,
         int incomplete, int entry_lost)
{
    char tmp[24];
    Py_ssize_t nlen;
    const char *name = names_get(&c->names, id, &nlen, tmp, "\"0x%x\"");
    cslot_t *s = &c->cs[slot];
    if (tb_reserve(&c->t, 160 + nlen + s->tail_len) < 0)
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
    if (incomplete)
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

static int
cc_close_deeper(ChromeCalls *c, Py_ssize_t slot, int64_t depth, int64_t ts)
{
    cslot_t *s = &c->cs[slot];
    while (s->n && s->st[s->n - 1].depth >= depth) {
        cframe_t f = s->st[--s->n];
        int64_t dur = ts - f.start;
        if (dur < 0)
            dur = 0;
        if (put_call(c, slot, f.id, f.start, f.start + dur, 1, 0) < 0)
            return -1;
        if (s->n)
            s->st[s->n - 1].children += dur;
    }
    return 0;
}

static PyObject *
cc_step(ChromeCalls *c, PyObject *unused)
{
    c->t.blen = 0;
    Py_ssize_t need = -1;
    while (!c->done && c->t.blen < (1 << 16)) {
        Py_ssize_t best = -1;
        int picked = merge_pick(&c->m, &best, &need);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            break;
        if (picked == 0) {
            /* builder.finish(), then the losses nothing was read after */
            for (Py_ssize_t i = 0; i < c->norder; i++) {
                Py_ssize_t k = c->order[i];
                if (cc_close_deeper(c, k, -1, c->cs[k].last_ts) < 0)
                    return NULL;
            }
            for (Py_ssize_t k = 0; k < c->m.nslots; k++) {
                gslot_t *g = &c->m.slots[k];
                if (g->nmarks) {
                    long long sum = 0;
                    for (Py_ssize_t i = 0; i < g->nmarks; i++)
                        sum += g->marks[i];
                    g->nmarks = 0;
                    if (put_lost(c, k, c->cs[k].last_any, sum) < 0)
                        return NULL;
                }
            }
            c->done = 1;
            break;
        }
        gslot_t *g = &c->m.slots[best];
        cslot_t *s = &c->cs[best];
        gblock_t *b = &g->q[g->head];
        record_t r;
        memcpy(&r, &b->rec[b->pos], sizeof(r));
        b->pos++;
        s->last_any = r.ts;
        if (g->nmarks) {
            long long sum = 0;
            for (Py_ssize_t i = 0; i < g->nmarks; i++)
                sum += g->marks[i];
            g->nmarks = 0;
            if (put_lost(c, best, r.ts, sum) < 0)
                return NULL;
        }
        uint32_t id = rec_id(b, &r), cid = id;
        if (canon_lookup(c->canon, &cid) < 0)
            return NULL;
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        if (!s->seen) {
            s->seen = 1;
            c->order[c->norder++] = best;
        }
        s->last_ts = ts;
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (s->n && s->st[s->n - 1].depth >= depth && cc_close_deeper(c, best, depth, ts) < 0)
                return NULL;
            if (s->n == s->cap) {
                Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
                cframe_t *st = PyMem_Realloc(s->st, (size_t)cap * sizeof(cframe_t));
                if (st == NULL)
                    return PyErr_NoMemory();
                s->st = st;
                s->cap = cap;
            }
            cframe_t *f = &s->st[s->n++];
            f->id = id;
            f->cid = cid;
            f->depth = depth;
            f->start = ts;
            f->children = 0;
            continue;
        }
        if (s->n && s->st[s->n - 1].depth > depth && cc_close_deeper(c, best, depth + 1, ts) < 0)
            return NULL;
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid != cid
                && cc_close_deeper(c, best, depth, ts) < 0)
            return NULL;
        int64_t start = (int64_t)r.d, dur;
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid == cid) {
            cframe_t f = s->st[--s->n];
            if (f.start <= ts)
                start = f.start;
            dur = ts - start;
            if (put_call(c, best, id, start, ts, 0, 0) < 0)
                return NULL;
        } else {
            dur = ts - start;
            if (put_call(c, best, id, start, ts, 0, 1) < 0)
                return NULL;
        }
        if (s->n)
            s->st[s->n - 1].children += dur;
    }
    PyObject *text = PyUnicode_DecodeUTF8(c->t.buf, c->t.blen, "strict");
    if (text == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", text, need);
}

static PyObject *
cc_feed(ChromeCalls *c, PyObject *const *args, Py_ssize_t nargs)
{
    return merge_feed(&c->m, args, nargs, &c->lost_total);
}

static PyObject *
cc_counts(ChromeCalls *c, PyObject *unused)
{
    return Py_BuildValue("(KKKL)", (unsigned long long)c->n_calls,
                         (unsigned long long)c->n_incomplete,
                         (unsigned long long)c->n_instants, c->lost_total);
}

/* ChromeCalls(slots, names, canon, tails, last): names id -> the name as a JSON string,
 * canon as StatWalk's, tails slot -> '"pid":P,"tid":T', last slot -> the time the
 * exporter's last[slot] starts at */
static int
cc_init(ChromeCalls *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots;
    PyObject *names, *canon, *tails;
    if (!PyArg_ParseTuple(args, "nO!OO!:ChromeCalls", &nslots, &PyDict_Type, &names, &canon,
                          &PyDict_Type, &tails))
        return -1;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "ChromeCalls: bad slot count (or made twice)");
        return -1;
    }
    if (canon != Py_None) {
        if (!PyDict_Check(canon)) {
            PyErr_SetString(PyExc_TypeError, "ChromeCalls: canon is a dict or None");
            return -1;
        }
        if (PyDict_GET_SIZE(canon))
            c->canon = Py_NewRef(canon);
    }
    c->keep = PyList_New(0);
    Py_ssize_t n1 = nslots ? nslots : 1;
    if (c->keep == NULL || merge_init(&c->m, nslots) < 0)
        return -1;
    c->cs = PyMem_Calloc((size_t)n1, sizeof(cslot_t));
    c->order = PyMem_Calloc((size_t)n1, sizeof(Py_ssize_t));
    if (c->cs == NULL || c->order == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (names_init(&c->names, names) < 0)
        return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(tails, &pos, &k, &v)) {
        Py_ssize_t slot = PyLong_AsSsize_t(k);
        if (slot == -1 && PyErr_Occurred())
            return -1;
        if (slot < 0 || slot >= nslots)
            continue;
        PyObject *b = PyUnicode_AsUTF8String(v);
        if (b == NULL || PyList_Append(c->keep, b) < 0) {
            Py_XDECREF(b);
            return -1;
        }
        Py_DECREF(b);
        c->cs[slot].tail = PyBytes_AS_STRING(b);
        c->cs[slot].tail_len = PyBytes_GET_SIZE(b);
    }
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
    PyTypeObject *tp = Py_TYPE(c);
    for (Py_ssize_t k = 0; k < c->m.nslots; k++)
        PyMem_Free(c->cs[k].st);
    merge_free(&c->m);
    PyMem_Free(c->cs);
    PyMem_Free(c->order);
    names_free(&c->names);
    PyMem_Free(c->t.buf);
    Py_XDECREF(c->keep);
    Py_XDECREF(c->canon);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyMethodDef cc_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))cc_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase]): a slot's next block, or that it has no more"},
    {"step", (PyCFunction)cc_step, METH_NOARGS,
     "step() -> (text, need): events, and the slot to feed before more (-1: none)"},
    {"counts", (PyCFunction)cc_counts, METH_NOARGS,
     "counts() -> (calls, incomplete calls, instants, lost events)"},
    {NULL}
};

static PyType_Slot cc_slots[] = {
    {Py_tp_doc, "ChromeCalls(slots, names, canon, tails): the Chrome trace JSON's calls of a "
                "trace file (output/chrome_json.py's twin)"},
    {Py_tp_init, cc_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, cc_dealloc},
    {Py_tp_methods, cc_methods},
    {0, NULL},
};

static PyType_Spec cc_spec = {
    "fntrace._native.ChromeCalls", sizeof(ChromeCalls), 0, Py_TPFLAGS_DEFAULT, cc_slots,
};

/* -- CallRows: the Parquet table's calls ----------------------------------------------
 *
 * The native twin of output/parquet.py's write_parquet for a trace of calls (the
 * blocks text_ok accepts): the records merged by time as GraphText merges them, each
 * slot's calls paired as CallBuilder pairs them, losses included (what is open is closed
 * at the slot's last time, and a return after the gap starts no earlier than it), each
 * call a row of column buffers when it ends -- slot, ts, dur, self_dur, depth, path,
 * complete -- in batches of ``rows`` rows.  A call's names (function, parent, stack)
 * are its path's, which the caller turns into strings once per path.
 */

typedef struct {
    uint32_t cid;
    uint32_t path;
    int64_t depth, start, children;
} rframe_t;

typedef struct {
    rframe_t *st;
    Py_ssize_t n, cap;
    int64_t last_ts;
    int seen;               /* a graph record was read (CallBuilder._stacks has the slot) */
    int64_t gap;
    int has_gap;
} rslot_t;

typedef struct {
    PyObject_HEAD
    merge_t m;
    rslot_t *rs;
    Py_ssize_t *order;
    Py_ssize_t norder;
    PyObject *canon;
    trie_t tr;
    Py_ssize_t batch;       /* rows a batch */
    int32_t *c_slot, *c_depth, *c_path;
    int64_t *c_ts, *c_dur, *c_self;
    uint8_t *c_complete;
    Py_ssize_t nrows, caprows;
    int done, finished;
    long long lost;
    uint64_t incomplete;
} CallRows;

static int
row_out(CallRows *c, Py_ssize_t slot, uint32_t path, int64_t depth, int64_t start,
        int64_t dur, int64_t self, int complete)
{
    Py_ssize_t i = c->nrows++;
    c->c_slot[i] = (int32_t)slot;
    c->c_ts[i] = start;
    c->c_dur[i] = dur;
    c->c_self[i] = self;
    c->c_depth[i] = (int32_t)depth;
    c->c_path[i] = (int32_t)path;
    c->c_complete[i] = (uint8_t)complete;
    c->incomplete += !complete;
    return 0;
}

/* closes as CallBuilder._close_deeper; the caller made room for every open frame */
static void
cr_close_deeper(CallRows *c, Py_ssize_t slot, int64_t depth, int64_t ts)
{
    rslot_t *s = &c->rs[slot];
    while (s->n && s->st[s->n - 1].depth >= depth) {
        rframe_t f = s->st[--s->n];
        int64_t dur = ts - f.start;
        if (dur < 0)
            dur = 0;
        int64_t self = dur - f.children;
        row_out(c, slot, f.path, f.depth, f.start, dur, self < 0 ? 0 : self, 0);
        if (s->n)
            s->st[s->n - 1].children += dur;
    }
}

/* a loss note of ``slot`` read: CallBuilder.feed(LostEvents) */
static void
cr_lost(CallRows *c, Py_ssize_t slot)
{
    rslot_t *s = &c->rs[slot];
    if (!s->seen)
        return;
    s->gap = s->last_ts;
    s->has_gap = 1;
    cr_close_deeper(c, slot, -1, s->last_ts);
}

/* room for ``more`` rows */
static int
cr_reserve(CallRows *c, Py_ssize_t more)
{
    if (c->nrows + more <= c->caprows)
        return 0;
    Py_ssize_t cap = c->caprows ? c->caprows : 1024;
    while (cap < c->nrows + more)
        cap *= 2;
#define GROW(f, size) do { void *p_ = PyMem_Realloc(c->f, (size_t)cap * (size)); \
        if (p_ == NULL) { PyErr_NoMemory(); return -1; } c->f = p_; } while (0)
    GROW(c_slot, 4);
    GROW(c_depth, 4);
    GROW(c_path, 4);
    GROW(c_ts, 8);
    GROW(c_dur, 8);
    GROW(c_self, 8);
    GROW(c_complete, 1);
#undef GROW
    c->caprows = cap;
    return 0;
}

/* the first ``n`` rows as a batch; the rest move to the front */
static PyObject *
cr_batch(CallRows *c, Py_ssize_t n)
{
    PyObject *out = Py_BuildValue(
        "(ny#y#y#y#y#y#y#)", n,
        (const char *)c->c_slot, n * 4, (const char *)c->c_ts, n * 8,
        (const char *)c->c_dur, n * 8, (const char *)c->c_self, n * 8,
        (const char *)c->c_depth, n * 4, (const char *)c->c_path, n * 4,
        (const char *)c->c_complete, n);
    if (out == NULL)
        return NULL;
    Py_ssize_t rest = c->nrows - n;
    if (rest) {
        memmove(c->c_slot, c->c_slot + n, (size_t)rest * 4);
        memmove(c->c_depth, c->c_depth + n, (size_t)rest * 4);
        memmove(c->c_path, c->c_path + n, (size_t)rest * 4);
        memmove(c->c_ts, c->c_ts + n, (size_t)rest * 8);
        memmove(c->c_dur, c->c_dur + n, (size_t)rest * 8);
        memmove(c->c_self, c->c_self + n, (size_t)rest * 8);
        memmove(c->c_complete, c->c_complete + n, (size_t)rest);
    }
    c->nrows = rest;
    return out;
}

/* step() -> (batch or None, need): a batch of ``rows`` rows each time that many have
 * been made (the last one shorter), as (n, slot, ts, dur, self_dur, depth, path,
 * complete) buffers -- write_parquet's row groups; need: the slot to feed before more
 * (-1: none); (None, -1): done */
static PyObject *
cr_step(CallRows *c, PyObject *unused)
{
    Py_ssize_t need = -1;
    for (;;) {
        if (c->nrows >= c->batch) {
            PyObject *batch = cr_batch(c, c->batch);
            return batch == NULL ? NULL : Py_BuildValue("(Nn)", batch, (Py_ssize_t)-1);
        }
        if (c->done) {
            if (c->nrows == 0)
                return Py_BuildValue("(On)", Py_None, (Py_ssize_t)-1);
            PyObject *batch = cr_batch(c, c->nrows);
            return batch == NULL ? NULL : Py_BuildValue("(Nn)", batch, (Py_ssize_t)-1);
        }
        /* room for a record's rows: every open frame of every slot, and one more */
        Py_ssize_t most = 1;
        for (Py_ssize_t k = 0; k < c->m.nslots; k++)
            most += c->rs[k].n;
        if (cr_reserve(c, most) < 0)
            return NULL;
        Py_ssize_t best = -1;
        int picked = merge_pick(&c->m, &best, &need);
        if (picked == -2)
            return NULL;
        if (picked < 0)
            return Py_BuildValue("(On)", Py_None, need);
        if (picked == 0) {
            /* the losses nothing was read after, slot by slot; then builder.finish() */
            for (Py_ssize_t k = 0; k < c->m.nslots; k++) {
                gslot_t *g = &c->m.slots[k];
                for (Py_ssize_t i = 0; i < g->nmarks; i++)
                    cr_lost(c, k);
                g->nmarks = 0;
            }
            for (Py_ssize_t i = 0; i < c->norder; i++) {
                Py_ssize_t k = c->order[i];
                cr_close_deeper(c, k, -1, c->rs[k].last_ts);
            }
            c->done = 1;
            continue;
        }
        gslot_t *g = &c->m.slots[best];
        rslot_t *s = &c->rs[best];
        gblock_t *b = &g->q[g->head];
        record_t r;
        memcpy(&r, &b->rec[b->pos], sizeof(r));
        b->pos++;
        for (Py_ssize_t i = 0; i < g->nmarks; i++)
            cr_lost(c, best);
        g->nmarks = 0;
        uint32_t id = rec_id(b, &r), cid = id;
        if (canon_lookup(c->canon, &cid) < 0)
            return NULL;
        int64_t ts = (int64_t)r.ts, depth = (int64_t)r.b;
        if (!s->seen) {
            s->seen = 1;
            c->order[c->norder++] = best;
        }
        s->last_ts = ts;
        if (r.type == FNT_TRACE_GRAPH_ENT) {
            if (s->n && s->st[s->n - 1].depth >= depth)
                cr_close_deeper(c, best, depth, ts);
            uint32_t path = trie_path(&c->tr, s->n ? s->st[s->n - 1].path : 0, cid);
            if (path == 0)
                return NULL;
            if (s->n == s->cap) {
                Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
                rframe_t *st = PyMem_Realloc(s->st, (size_t)cap * sizeof(rframe_t));
                if (st == NULL)
                    return PyErr_NoMemory();
                s->st = st;
                s->cap = cap;
            }
            rframe_t *f = &s->st[s->n++];
            f->cid = cid;
            f->path = path;
            f->depth = depth;
            f->start = ts;
            f->children = 0;
            continue;
        }
        if (s->n && s->st[s->n - 1].depth > depth)
            cr_close_deeper(c, best, depth + 1, ts);
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid != cid)
            cr_close_deeper(c, best, depth, ts);
        int64_t start = (int64_t)r.d, dur, self;
        uint32_t path;
        if (s->n && s->st[s->n - 1].depth == depth && s->st[s->n - 1].cid == cid) {
            rframe_t f = s->st[--s->n];
            if (f.start <= ts)
                start = f.start;
            dur = ts - start;
            self = dur - f.children;
            if (self < 0)
                self = 0;
            path = f.path;
        } else {
            if (s->has_gap && start < s->gap)
                start = s->gap;
            dur = ts - start;
            self = dur;
            path = trie_path(&c->tr, s->n ? s->st[s->n - 1].path : 0, cid);
            if (path == 0)
                return NULL;
        }
        if (s->n)
            s->st[s->n - 1].children += dur;
        row_out(c, best, path, depth, start, dur, self, 1);
    }
}

static PyObject *
cr_feed(CallRows *c, PyObject *const *args, Py_ssize_t nargs)
{
    return merge_feed(&c->m, args, nargs, &c->lost);
}

/* paths(first) -> [(parent, id)] of paths first, first + 1, ... (path k: item k - first) */
static PyObject *
cr_paths(CallRows *c, PyObject *arg)
{
    Py_ssize_t first = PyLong_AsSsize_t(arg);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    if (first < 1)
        first = 1;
    Py_ssize_t n = c->tr.n - first + 1;
    PyObject *out = PyList_New(n > 0 ? n : 0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(kk)", (unsigned long)c->tr.parent[first + i],
                                    (unsigned long)c->tr.func[first + i]);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *
cr_counts(CallRows *c, PyObject *unused)
{
    return Py_BuildValue("(LK)", c->lost, (unsigned long long)c->incomplete);
}

/* CallRows(slots, canon, rows) */
static int
cr_init(CallRows *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, batch;
    PyObject *canon;
    if (!PyArg_ParseTuple(args, "nOn:CallRows", &nslots, &canon, &batch))
        return -1;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || batch < 1) {
        PyErr_SetString(PyExc_ValueError, "CallRows: bad slots or rows (or made twice)");
        return -1;
    }
    if (canon != Py_None) {
        if (!PyDict_Check(canon)) {
            PyErr_SetString(PyExc_TypeError, "CallRows: canon is a dict or None");
            return -1;
        }
        if (PyDict_GET_SIZE(canon))
            c->canon = Py_NewRef(canon);
    }
    Py_ssize_t n1 = nslots ? nslots : 1;
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->rs = PyMem_Calloc((size_t)n1, sizeof(rslot_t));
    c->order = PyMem_Calloc((size_t)n1, sizeof(Py_ssize_t));
    c->batch = batch;
    if (!c->rs || !c->order) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
cr_dealloc(CallRows *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    for (Py_ssize_t k = 0; k < c->m.nslots; k++)
        PyMem_Free(c->rs[k].st);
    merge_free(&c->m);
    PyMem_Free(c->rs);
    PyMem_Free(c->order);
    PyMem_Free(c->c_slot);
    PyMem_Free(c->c_depth);
    PyMem_Free(c->c_path);
    PyMem_Free(c->c_ts);
    PyMem_Free(c->c_dur);
    PyMem_Free(c->c_self);
    PyMem_Free(c->c_complete);
    trie_free(&c->tr);
    Py_XDECREF(c->canon);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyMethodDef cr_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))cr_feed, METH_FASTCALL,
     "feed(cpu[, lost, records, ibase]): a slot's next block, or that it has no more"},
    {"step", (PyCFunction)cr_step, METH_NOARGS,
     "step() -> (batch or None, need): a batch of rows, and the slot to feed (-1: none)"},
    {"paths", (PyCFunction)cr_paths, METH_O,
     "paths(first) -> [(parent, id)]: the call paths from path ``first`` on"},
    {"counts", (PyCFunction)cr_counts, METH_NOARGS,
     "counts() -> (lost events, incomplete calls)"},
    {NULL}
};

static PyType_Slot cr_slots[] = {
    {Py_tp_doc, "CallRows(slots, canon, rows): the Parquet table's calls of a trace file, "
                "in column batches (output/parquet.py's twin)"},
    {Py_tp_init, cr_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, cr_dealloc},
    {Py_tp_methods, cr_methods},
    {0, NULL},
};

static PyType_Spec cr_spec = {
    "fntrace._native.CallRows", sizeof(CallRows), 0, Py_TPFLAGS_DEFAULT, cr_slots,
};

/* -- DatPages: trace-cmd's ring-buffer pages -----------------------------------------
 *
 * The native twin of output/trace_dat.py's _CpuBuffer fed by the exporter's loop, for
 * the function tracer's and function_graph's records: each slot's events as the
 * kernel's writer packs them into 4 kB pages (rb_reserve_next_event: the time since
 * the previous event in 27 bits, a time extend when it does not fit, a new page when
 * the event does not), a page after a loss flagged RB_MISSED_EVENTS with the count
 * when there is room.  A slot's pages depend on its own records only, so slots are
 * walked one after another.  The page layout's numbers come from trace_dat.py.
 */

typedef struct {
    unsigned char *data;    /* the page being filled, PAGE_DATA bytes */
    Py_ssize_t len;
    uint64_t page_ts, last_ts;
    int has_lost;
    long long lost;
    long long pid;
} dslot_t;

typedef struct {
    PyObject_HEAD
    dslot_t *slots;
    Py_ssize_t nslots;
    PyObject *addrs;        /* id -> address */
    PyObject *used;         /* set of the ids written */
    Py_ssize_t page_size, page_header, page_data, max_small;
    int ts_shift;
    uint64_t ts_mask;
    uint32_t time_extend;
    uint64_t missed_events, missed_stored;
    tbuf_t out;             /* the pages this call completed */
    int unsure;
} DatPages;

static int
dp_flush(DatPages *d, dslot_t *s)
{
    if (s->len == 0)
        return 0;
    if (tb_reserve(&d->out, d->page_size) < 0)
        return -1;
    unsigned char *p = (unsigned char *)d->out.buf + d->out.blen;
    uint64_t commit = (uint64_t)s->len;
    uint64_t flags = 0;
    int tail = 0;
    if (s->has_lost) {
        flags |= d->missed_events;
        if (s->lost > 0 && s->len + 8 <= d->page_data) {
            flags |= d->missed_stored;
            tail = 1;
        }
        s->has_lost = 0;
    }
    uint64_t v = commit | flags;
    memcpy(p, &s->page_ts, 8);
    memcpy(p + 8, &v, 8);
    memcpy(p + d->page_header, s->data, (size_t)s->len);
    Py_ssize_t used = d->page_header + s->len;
    if (tail) {
        uint64_t lost = (uint64_t)s->lost;
        memcpy(p + used, &lost, 8);
        used += 8;
    }
    memset(p + used, 0, (size_t)(d->page_size - used));
    d->out.blen += d->page_size;
    s->len = 0;
    return 0;
}

static inline void
dp_u32(dslot_t *s, uint32_t v)
{
    memcpy(s->data + s->len, &v, 4);
    s->len += 4;
}

/* _CpuBuffer.add */
static int
dp_add(DatPages *d, dslot_t *s, uint64_t ts, const unsigned char *payload, Py_ssize_t n)
{
    if (s->len && n <= d->max_small) {
        int64_t delta = (int64_t)(ts - s->last_ts);
        if (ts >= s->last_ts && (uint64_t)delta <= d->ts_mask
                && s->len + n + 4 <= d->page_data) {
            dp_u32(s, (uint32_t)((uint64_t)(n >> 2) | (uint64_t)delta << 5));
            memcpy(s->data + s->len, payload, (size_t)n);
            s->len += n;
            s->last_ts = ts;
            return 0;
        }
    }
    /* _add: the payloads here are all small (at most 40 bytes) */
    Py_ssize_t size = 4 + n;
    if (s->len == 0)
        s->page_ts = s->last_ts = ts;
    uint64_t delta = ts >= s->last_ts ? ts - s->last_ts : 0;
    int extend = delta > d->ts_mask;
    if (s->len + size + (extend ? 8 : 0) > d->page_data) {
        if (dp_flush(d, s) < 0)
            return -1;
        s->page_ts = s->last_ts = ts;
        delta = 0;
        extend = 0;
    }
    if (extend) {
        if (delta >> d->ts_shift > 0xffffffffULL) {
            d->unsure = 1;          /* the Python writer cannot pack it either */
            return 0;
        }
        dp_u32(s, d->time_extend | (uint32_t)((delta & d->ts_mask) << 5));
        dp_u32(s, (uint32_t)(delta >> d->ts_shift));
        delta = 0;
    }
    dp_u32(s, (uint32_t)((uint64_t)(n >> 2) | delta << 5));
    memcpy(s->data + s->len, payload, (size_t)n);
    s->len += n;
    s->last_ts = ts;
    return 0;
}

static int
dp_addr(DatPages *d, uint32_t id, uint64_t *addr)
{
    PyObject *k = PyLong_FromUnsignedLong(id);
    if (k == NULL)
        return -1;
    PyObject *v = PyDict_GetItemWithError(d->addrs, k);
    if (v == NULL) {
        Py_DECREF(k);
        if (PyErr_Occurred())
            return -1;
        d->unsure = 1;              /* a name with no symbol: a fresh address, Python's */
        return 0;
    }
    int r = PySet_Add(d->used, k);
    Py_DECREF(k);
    if (r < 0)
        return -1;
    *addr = PyLong_AsUnsignedLongLong(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int
dp_slot(DatPages *d, Py_ssize_t cpu, dslot_t **out)
{
    if (cpu < 0 || cpu >= d->nslots) {
        PyErr_SetString(PyExc_ValueError, "DatPages: not a slot of this trace");
        return -1;
    }
    dslot_t *s = &d->slots[cpu];
    if (s->data == NULL) {
        s->data = PyMem_Malloc((size_t)d->page_data + 16);
        if (s->data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    *out = s;
    return 0;
}

static PyObject *
dp_result(DatPages *d)
{
    if (d->unsure)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(d->out.buf, d->out.blen);
}

/* feed(cpu, lost, records, ibase) -> the pages completed (bytes), None: the trace holds
 * what the Python exporter writes (any other record, a name with no symbol) */
static PyObject *
dp_feed(DatPages *d, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "feed(cpu, lost, records, ibase)");
        return NULL;
    }
    Py_ssize_t cpu = PyLong_AsSsize_t(args[0]);
    long long lost = PyLong_AsLongLong(args[1]);
    unsigned long ibase = PyLong_AsUnsignedLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    dslot_t *s;
    if (dp_slot(d, cpu, &s) < 0)
        return NULL;
    d->out.blen = 0;
    if (d->unsure)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (lost) {
        /* mark_lost */
        if (dp_flush(d, s) < 0)
            goto error;
        if (lost > 0)
            s->lost = (s->has_lost ? s->lost : 0) + lost;
        else if (!s->has_lost)
            s->lost = -1;
        s->has_lost = 1;
    }
    const record_t *rec = view.buf;
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    for (Py_ssize_t i = 0; i < n && !d->unsure; i++) {
        record_t r;
        memcpy(&r, &rec[i], sizeof(r));
        unsigned char pl[40];
        Py_ssize_t len;
        uint16_t id16;
        int32_t pid = (int32_t)s->pid;
        uint64_t ip = 0, parent = 0;
        if (r.type == FNT_TRACE_FN) {
            if (dp_addr(d, r.a + (uint32_t)ibase, &ip) < 0)
                goto error;
            if (r.b && dp_addr(d, r.b + (uint32_t)ibase, &parent) < 0)
                goto error;
            id16 = 1;
            memcpy(pl, &id16, 2);
            pl[2] = pl[3] = 0;
            memcpy(pl + 4, &pid, 4);
            memcpy(pl + 8, &ip, 8);
            memcpy(pl + 16, &parent, 8);
            len = 24;
        } else if (r.type == FNT_TRACE_GRAPH_ENT || r.type == FNT_TRACE_GRAPH_RET) {
            if (r.b > INT32_MAX) {
                d->unsure = 1;
                break;
            }
            if (dp_addr(d, r.a ? r.a + (uint32_t)ibase : 0, &ip) < 0)
                goto error;
            int32_t depth = (int32_t)r.b;
            id16 = r.type == FNT_TRACE_GRAPH_ENT ? 11 : 10;
            memcpy(pl, &id16, 2);
            pl[2] = pl[3] = 0;
            memcpy(pl + 4, &pid, 4);
            memcpy(pl + 8, &ip, 8);
            memcpy(pl + 16, &depth, 4);
            len = 20;
            if (r.type == FNT_TRACE_GRAPH_RET) {
                uint32_t overrun = r.c;
                uint64_t calltime = r.d, rettime = r.ts;
                memcpy(pl + 20, &overrun, 4);
                memcpy(pl + 24, &calltime, 8);
                memcpy(pl + 32, &rettime, 8);
                len = 40;
            }
        } else {
            d->unsure = 1;
            break;
        }
        if (!d->unsure && dp_add(d, s, r.ts, pl, len) < 0)
            goto error;
    }
    PyBuffer_Release(&view);
    return dp_result(d);
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* flush(cpu) -> the slot's last page (b"" when it has none) */
static PyObject *
dp_flush_slot(DatPages *d, PyObject *arg)
{
    Py_ssize_t cpu = PyLong_AsSsize_t(arg);
    if (cpu == -1 && PyErr_Occurred())
        return NULL;
    dslot_t *s;
    if (dp_slot(d, cpu, &s) < 0)
        return NULL;
    d->out.blen = 0;
    if (dp_flush(d, s) < 0)
        return NULL;
    return dp_result(d);
}

/* DatPages(slots, addrs, pids, layout): addrs id -> address, pids slot -> common_pid,
 * layout (PAGE_SIZE, PAGE_HEADER, TS_SHIFT, RINGBUF_TYPE_TIME_EXTEND,
 * RB_MAX_SMALL_DATA, RB_MISSED_EVENTS, RB_MISSED_STORED) */
static int
dp_init(DatPages *d, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots, page_size, page_header, max_small;
    int ts_shift;
    unsigned int time_extend;
    unsigned long long missed_events, missed_stored;
    PyObject *addrs, *pids;
    if (!PyArg_ParseTuple(args, "nO!O!(nniInKK):DatPages", &nslots, &PyDict_Type, &addrs,
                          &PyDict_Type, &pids, &page_size, &page_header, &ts_shift,
                          &time_extend, &max_small, &missed_events, &missed_stored))
        return -1;
    if (d->slots != NULL || nslots < 0 || nslots > SLOT_LIMIT || page_size <= page_header + 64
            || ts_shift < 1 || ts_shift > 32) {
        PyErr_SetString(PyExc_ValueError, "DatPages: bad arguments (or made twice)");
        return -1;
    }
    d->slots = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(dslot_t));
    d->used = PySet_New(NULL);
    if (d->slots == NULL || d->used == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->nslots = nslots;
    d->addrs = Py_NewRef(addrs);
    d->page_size = page_size;
    d->page_header = page_header;
    d->page_data = page_size - page_header;
    d->max_small = max_small;
    d->ts_shift = ts_shift;
    d->ts_mask = ((uint64_t)1 << ts_shift) - 1;
    d->time_extend = time_extend;
    d->missed_events = missed_events;
    d->missed_stored = missed_stored;
    for (Py_ssize_t k = 0; k < nslots; k++) {
        PyObject *key = PyLong_FromSsize_t(k);
        if (key == NULL)
            return -1;
        PyObject *v = PyDict_GetItemWithError(pids, key);
        Py_DECREF(key);
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        long long pid = PyLong_AsLongLong(v);
        if (pid == -1 && PyErr_Occurred())
            return -1;
        if (pid < INT32_MIN || pid > INT32_MAX)
            d->unsure = 1;
        d->slots[k].pid = pid;
    }
    return 0;
}

static PyObject *
dp_used(DatPages *d, void *closure)
{
    return Py_NewRef(d->used);
}

static void
dp_dealloc(DatPages *d)
{
    PyTypeObject *tp = Py_TYPE(d);
    for (Py_ssize_t k = 0; k < d->nslots; k++)
        PyMem_Free(d->slots[k].data);
    PyMem_Free(d->slots);
    PyMem_Free(d->out.buf);
    Py_XDECREF(d->addrs);
    Py_XDECREF(d->used);
    tp->tp_free((PyObject *)d);
    Py_DECREF(tp);
}

static PyMethodDef dp_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))dp_feed, METH_FASTCALL,
     "feed(cpu, lost, records, ibase) -> the pages completed, or None (Python's to write)"},
    {"flush", (PyCFunction)dp_flush_slot, METH_O,
     "flush(cpu) -> the slot's last page, b'' if none (None: Python's to write)"},
    {NULL}
};

static PyGetSetDef dp_getset[] = {
    {"used", (getter)dp_used, NULL, "the symbol ids written", NULL},
    {NULL}
};

static PyType_Slot dp_slots[] = {
    {Py_tp_doc, "DatPages(slots, addrs, pids, layout): trace-cmd's ring-buffer pages of a "
                "trace file's calls and hits (output/trace_dat.py's twin)"},
    {Py_tp_init, dp_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, dp_dealloc},
    {Py_tp_methods, dp_methods},
    {Py_tp_getset, dp_getset},
    {0, NULL},
};

static PyType_Spec dp_spec = {
    "fntrace._native.DatPages", sizeof(DatPages), 0, Py_TPFLAGS_DEFAULT, dp_slots,
};

static PyMethodDef read_functions[] = {
    {"text_ok", text_ok, METH_O,
     "text_ok(records) -> bool: GraphText prints this block as the Python printer does"},
    {NULL}
};
/* called by the module's init */
int
fntrace_add_read_types(PyObject *m)
{
    PyObject *t = PyType_FromSpec(&walk_spec);
    if (t == NULL)
        return -1;
    if (PyModule_AddObject(m, "StatWalk", t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    t = PyType_FromSpec(&gt_spec);
    if (t == NULL)
        return -1;
    if (PyModule_AddObject(m, "GraphText", t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    t = PyType_FromSpec(&dp_spec);
    if (t == NULL)
        return -1;
    if (PyModule_AddObject(m, "DatPages", t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    t = PyType_FromSpec(&cr_spec);
    if (t == NULL)
        return -1;
    if (PyModule_AddObject(m, "CallRows", t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    t = PyType_FromSpec(&cc_spec);
    if (t == NULL)
        return -1;
    if (PyModule_AddObject(m, "ChromeCalls", t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return PyModule_AddFunctions(m, read_functions);
}
