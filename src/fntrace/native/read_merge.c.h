/* What the time-ordered walks share: a text buffer, the blocks of each thread slot
 * fed as a walk asks for them, the merge that picks the next record (heapq.merge's
 * order), and the id -> name table. */

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
    PyObject *pay;          /* bytes: the block's payloads, as the file has them (or NULL) */
    int32_t *poff;          /* record -> where its payload's kind byte is in pay, -1 none */
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
    int64_t cdepth;         /* GraphText: the depth a comment is indented under */
} gslot_t;

/* the slots of a time-ordered walk, their blocks fed as it asks; ``run``: the slot
 * picked last (-1: none), which goes on being picked without a look at the others
 * while its next record is before (run_ts, run_next), the least of theirs */
typedef struct {
    gslot_t *slots;
    Py_ssize_t nslots;
    Py_ssize_t run, run_next;
    uint64_t run_ts;
} merge_t;

/* What the object of a time-ordered walk starts with: its slots' blocks, and the
 * losses fed (merge_walk_feed's) */
#define MERGE_WALK_HEAD \
    PyObject_HEAD       \
    merge_t m;          \
    long long lost_fed;

typedef struct {
    MERGE_WALK_HEAD
} merge_walk_t;

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

static int
tb_reserve(tbuf_t *g, Py_ssize_t more)
{
    if (g->blen + more <= g->bcap)
        return 0;
    Py_ssize_t cap = cap_for(g->blen + more, g->bcap, 1 << 16);
    if (ARRAY_RESIZE(g->buf, cap) < 0)
        return -1;
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

/* a string literal put whole (the caller reserved room) */
#define TB_LIT(t, lit) tb_put((t), (lit), (Py_ssize_t)sizeof(lit) - 1)

/* A JSON string of strict UTF-8 text (graph_text_ok checked it) as json.dumps writes
 * it: the quote, the backslash and the control characters escaped, and with
 * ``ascii`` (ensure_ascii=True) DEL and everything beyond ASCII as \uXXXX (a surrogate
 * pair beyond the BMP).  At most 6 bytes out a byte in, and the quotes: the caller
 * reserved them. */
static void
put_json_str(tbuf_t *t, int ascii, const char *s, Py_ssize_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    char *p = t->buf + t->blen;
    *p++ = '"';
    for (Py_ssize_t i = 0; i < n;) {
        unsigned char ch = u[i];
        uint32_t cp;
        if (ch >= 0x20 && ch != '"' && ch != '\\' && (ch < 0x7f || !ascii)) {
            *p++ = (char)ch;
            i++;
            continue;
        }
        *p++ = '\\';
        if (ch < 0x80) {
            i++;
            switch (ch) {
            case '"': *p++ = '"'; continue;
            case '\\': *p++ = '\\'; continue;
            case '\n': *p++ = 'n'; continue;
            case '\r': *p++ = 'r'; continue;
            case '\t': *p++ = 't'; continue;
            case '\b': *p++ = 'b'; continue;
            case '\f': *p++ = 'f'; continue;
            }
            cp = ch;
        }
        else if (ch < 0xe0) {
            cp = (uint32_t)(ch & 0x1f) << 6 | (u[i + 1] & 0x3f);
            i += 2;
        }
        else if (ch < 0xf0) {
            cp = (uint32_t)(ch & 0x0f) << 12 | (uint32_t)(u[i + 1] & 0x3f) << 6
                 | (u[i + 2] & 0x3f);
            i += 3;
        }
        else {
            cp = (uint32_t)(ch & 0x07) << 18 | (uint32_t)(u[i + 1] & 0x3f) << 12
                 | (uint32_t)(u[i + 2] & 0x3f) << 6 | (u[i + 3] & 0x3f);
            i += 4;
            cp -= 0x10000;
            uint32_t hi = 0xd800 | (cp >> 10);
            *p++ = 'u';
            *p++ = hex[hi >> 12];
            *p++ = hex[(hi >> 8) & 15];
            *p++ = hex[(hi >> 4) & 15];
            *p++ = hex[hi & 15];
            *p++ = '\\';
            cp = 0xdc00 | (cp & 0x3ff);
        }
        *p++ = 'u';
        *p++ = hex[cp >> 12];
        *p++ = hex[(cp >> 8) & 15];
        *p++ = hex[(cp >> 4) & 15];
        *p++ = hex[cp & 15];
    }
    *p++ = '"';
    t->blen = p - t->buf;
}


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
        Py_ssize_t len;
        const char *s = kept_bytes(n->keep, PyBytes_Check(v) ? Py_NewRef(v)
                                   : PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape"),
                                   &len);
        if (s == NULL)
            return -1;
        Py_ssize_t h = (Py_ssize_t)(mix(id) & (uint64_t)(cap - 1));
        while (n->t[h].s)
            h = (h + 1) & (cap - 1);
        n->t[h].id = (uint32_t)id;
        n->t[h].s = s;
        n->t[h].len = len;
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

/* the slots' proc column or line context from a dict slot -> str, as UTF-8
 * (surrogateescape) kept alive by ``keep``; a slot not in it keeps comm NULL */
static int
slot_comms(merge_t *m, PyObject *texts, PyObject *keep)
{
    Py_ssize_t pos = 0, slot;
    PyObject *v;
    int more;
    while ((more = slot_item(texts, m->nslots, &pos, &slot, &v)) > 0) {
        gslot_t *s = &m->slots[slot];
        s->comm = kept_bytes(keep, PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape"),
                             &s->comm_len);
        if (s->comm == NULL)
            return -1;
    }
    return more;
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
            if (ARRAY_ROOM(s->marks, s->nmarks, s->capmarks, 4) < 0)
                return -2;
            s->marks[s->nmarks++] = b->lost;
            b->lost = 0;
        }
        if (b->pos < b->n) {
            *blk = b;
            return 1;
        }
        Py_CLEAR(b->data);
        Py_CLEAR(b->pay);
        PyMem_Free(b->poff);
        b->poff = NULL;
        s->head = (s->head + 1) % s->cap;
        s->n--;
    }
    return s->eof ? 0 : -1;
}


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
    m->run = -1;
    return 0;
}

static void
merge_free(merge_t *m)
{
    for (Py_ssize_t k = 0; k < m->nslots; k++) {
        gslot_t *s = &m->slots[k];
        for (Py_ssize_t i = 0; i < s->n; i++) {
            gblock_t *b = &s->q[(s->head + i) % s->cap];
            Py_XDECREF(b->data);
            Py_XDECREF(b->pay);
            PyMem_Free(b->poff);
        }
        PyMem_Free(s->q);
        PyMem_Free(s->marks);
        PyMem_Free(s->enter);
    }
    PyMem_Free(m->slots);
    m->slots = NULL;
    m->nslots = 0;
}

/* A block's payloads (tracefile/writer.py's encoding: a varint index gap, a kind byte, the
 * value: a varint length and UTF-8 text, a zigzag varint, or a varint length and JSON):
 * poff[i], for each of its n records, the offset of record i's kind byte, or -1.
 * 0, or -1 when they do not parse (nothing raised). */
#define PAY_STR 0
#define PAY_INT 1
#define PAY_JSON 2

static int
get_uvarint(const unsigned char *p, Py_ssize_t size, Py_ssize_t *at, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*at >= size)
            return -1;
        unsigned char c = p[(*at)++];
        if (shift == 63 && c > 1)
            return -1;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int
pay_index(const unsigned char *p, Py_ssize_t size, Py_ssize_t n, int32_t *poff)
{
    for (Py_ssize_t i = 0; i < n; i++)
        poff[i] = -1;
    Py_ssize_t at = 0;
    int64_t idx = -1;
    uint64_t v;
    if (size > INT32_MAX)
        return -1;
    while (at < size) {
        if (get_uvarint(p, size, &at, &v) < 0 || v >= (uint64_t)n)
            return -1;
        idx += (int64_t)v + 1;
        if (idx >= n || at >= size)
            return -1;
        poff[idx] = (int32_t)at;
        unsigned char kind = p[at++];
        if (kind == PAY_INT) {
            if (get_uvarint(p, size, &at, &v) < 0)
                return -1;
        }
        else if (kind == PAY_STR || kind == PAY_JSON) {
            if (get_uvarint(p, size, &at, &v) < 0 || v > (uint64_t)(size - at))
                return -1;
            at += (Py_ssize_t)v;
        }
        else
            return -1;
    }
    return 0;
}

/* record i's payload, when it has the flag and one: its kind, and its text (STR, JSON)
 * or value (INT); 0 when it has none */
static int
pay_get(const gblock_t *b, Py_ssize_t i, const record_t *r, int *kind, const char **s,
        Py_ssize_t *len, int64_t *iv)
{
    if (b->poff == NULL || !(r->flags & FNT_HAS_PAYLOAD) || b->poff[i] < 0)
        return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(b->pay);
    Py_ssize_t size = PyBytes_GET_SIZE(b->pay), at = b->poff[i];
    uint64_t v = 0;
    *kind = p[at++];
    get_uvarint(p, size, &at, &v);      /* parsed when fed */
    if (*kind == PAY_INT) {
        *iv = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        return 1;
    }
    *s = (const char *)p + at;
    *len = (Py_ssize_t)v;
    return 1;
}

/* ring_buffer.text_parts of a marker's or an event's payload text: "name\0text", or
 * the text alone (no name) */
static inline void
text_parts(const char *s, Py_ssize_t len, const char **name, Py_ssize_t *nlen,
           const char **text, Py_ssize_t *tlen)
{
    const char *sep = len ? memchr(s, 0, (size_t)len) : NULL;
    if (sep == NULL) {
        *name = "";
        *nlen = 0;
        *text = len ? s : "";
        *tlen = len;
        return;
    }
    *name = s;
    *nlen = sep - s;
    *text = sep + 1;
    *tlen = len - *nlen - 1;
}

/* the payload of the record merge_next just took from ``slot`` (pay_get's answer) */
static int
merge_last_payload(merge_t *m, Py_ssize_t slot, const record_t *r, int *kind, const char **s,
                   Py_ssize_t *len, int64_t *iv)
{
    gslot_t *g = &m->slots[slot];
    gblock_t *b = &g->q[g->head];
    return pay_get(b, b->pos - 1, r, kind, s, len, iv);
}

/* a walk's feed(cpu[, lost, records, ibase[, payloads]]): the slot's next block, or
 * (cpu alone) that it has no more; ``*lost_sum`` counts the losses fed.  Payloads it
 * cannot index are a ValueError, or with ``bad``: *bad set and nothing fed. */
static PyObject *
merge_feed_or_bad(merge_t *m, PyObject *const *args, Py_ssize_t nargs, long long *lost_sum,
                  int *bad)
{
    if (nargs != 1 && nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "feed(cpu[, lost, records, ibase[, payloads]])");
        return NULL;
    }
    Py_ssize_t cpu = PyLong_AsSsize_t(args[0]);
    if (cpu == -1 && PyErr_Occurred())
        return NULL;
    if (cpu < 0 || cpu >= m->nslots) {
        PyErr_SetString(PyExc_ValueError, "feed: not a slot of this trace");
        return NULL;
    }
    m->run = -1;
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
    PyObject *pay = nargs == 5 ? args[4] : NULL;
    int32_t *poff = NULL;
    if (pay != NULL && pay != Py_None) {
        if (!PyBytes_Check(pay)) {
            PyErr_SetString(PyExc_TypeError, "feed: payloads are bytes");
            return NULL;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(args[2]) / FNT_RECORD_SIZE;
        if (PyBytes_GET_SIZE(pay)) {
            poff = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
            if (poff == NULL)
                return PyErr_NoMemory();
            if (pay_index((const unsigned char *)PyBytes_AS_STRING(pay), PyBytes_GET_SIZE(pay),
                          n, poff) < 0) {
                PyMem_Free(poff);
                if (bad != NULL) {
                    *bad = 1;
                    Py_RETURN_NONE;
                }
                PyErr_SetString(PyExc_ValueError, "feed: bad payloads");
                return NULL;
            }
        }
    }
    if (lost > 0)
        *lost_sum += lost;
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 4;
        gblock_t *q = PyMem_Malloc((size_t)cap * sizeof(gblock_t));
        if (q == NULL) {
            PyMem_Free(poff);
            return PyErr_NoMemory();
        }
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
    b->poff = poff;
    b->pay = poff != NULL ? Py_NewRef(pay) : NULL;
    s->n++;
    Py_RETURN_NONE;
}

static PyObject *
merge_feed(merge_t *m, PyObject *const *args, Py_ssize_t nargs, long long *lost_sum)
{
    return merge_feed_or_bad(m, args, nargs, lost_sum, NULL);
}

/* the feed method of a time-ordered walk (MERGE_WALK_HEAD) */
static PyObject *
merge_walk_feed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    merge_walk_t *w = (merge_walk_t *)self;
    return merge_feed(&w->m, args, nargs, &w->lost_fed);
}

#define MERGE_FEED_METHOD                                                               \
    {"feed", (PyCFunction)(void (*)(void))merge_walk_feed, METH_FASTCALL,               \
     "feed(cpu[, lost, records, ibase[, payloads]]): a slot's next block, or that it "   \
     "has no more"}

/* heapq.merge's choice: the slot of the least (time, slot) among the slots' next
 * records.  1: ``*best`` is it; 0: every slot is read; -1: slot ``*need`` must be fed
 * first; -2: an exception.
 *
 * The slot picked keeps being picked while its next record, in the block being read,
 * comes before the others' next ones (which nothing but a pick or a feed moves): one
 * comparison a record instead of a look at every slot -- a thread's run of calls
 * between two of another thread's is read at the speed of a single slot. */
static __attribute__((noinline)) int merge_pick_all(merge_t *m, Py_ssize_t *best,
                                                   Py_ssize_t *need);

static inline int
merge_pick(merge_t *m, Py_ssize_t *best, Py_ssize_t *need)
{
    if (m->run >= 0) {
        gslot_t *g = &m->slots[m->run];
        if (g->n) {
            gblock_t *b = &g->q[g->head];
            /* (pos 0: a block's first record may carry a loss, slot_next's to note) */
            if (b->pos > 0 && b->pos < b->n) {
                uint64_t ts = b->rec[b->pos].ts;
                if (ts < m->run_ts || (ts == m->run_ts && m->run < m->run_next)) {
                    *best = m->run;
                    return 1;
                }
            }
        }
    }
    return merge_pick_all(m, best, need);
}

/* merge_pick's look at every slot */
static __attribute__((noinline)) int
merge_pick_all(merge_t *m, Py_ssize_t *best, Py_ssize_t *need)
{
    m->run = -1;
    Py_ssize_t found = -1, second = -1;
    uint64_t best_ts = 0, second_ts = 0;
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
            second = found;
            second_ts = best_ts;
            found = k;
            best_ts = ts;
        }
        else if (second < 0 || ts < second_ts) {
            second = k;
            second_ts = ts;
        }
    }
    if (found < 0)
        return 0;
    *best = found;
    m->run = found;
    m->run_ts = second < 0 ? UINT64_MAX : second_ts;
    m->run_next = second < 0 ? m->nslots : second;
    return 1;
}

/* the record merge_pick picked on ``slot`` taken from its block (``*id``: its id, the
 * block's base added) */
static inline void
merge_take(merge_t *m, Py_ssize_t slot, record_t *r, uint32_t *id)
{
    gslot_t *g = &m->slots[slot];
    gblock_t *b = &g->q[g->head];
    memcpy(r, &b->rec[b->pos], sizeof(*r));
    b->pos++;
    *id = rec_id(b, r);
}

/* merge_pick, then merge_take: 1 (``*slot``, ``*r``, ``*id``), 0 every slot is read, -1
 * slot ``*need`` must be fed first, -2 an exception.  The loss notes met on the way
 * stay queued on the slot (``nmarks``) for the walk, which says where they go. */
static inline int
merge_next(merge_t *m, Py_ssize_t *slot, Py_ssize_t *need, record_t *r, uint32_t *id)
{
    int picked = merge_pick(m, slot, need);
    if (picked != 1) {
        *id = 0;                /* (never read: for the compiler that cannot tell) */
        return picked;
    }
    merge_take(m, *slot, r, id);
    return 1;
}

/* step() -> (text, need): the lines that could be made (each ending in a newline),
 * and the slot whose next block must be fed before more can be made (-1: none; the
 * text is the last when it is empty and need is -1) */
static inline PyObject *
step_out(PyObject *text, Py_ssize_t need)
{
    if (text == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", text, need);
}

/* A step of the walks that make text: the slots picked in the merge's order, each
 * handed to the walk's ``record`` -- which takes the slot's record, or leaves it and
 * ends the step (1, ``*need`` set) -- until the text holds 64 kB or a slot must be
 * fed; ``end`` once every slot is read, and the walk is done.  0, or -1 with an
 * exception.  Always inlined, so that a walk's calls of its own parts are direct (and
 * inlined) in the loop every record goes through. */
typedef int (*walk_record_fn)(void *walk, Py_ssize_t slot, Py_ssize_t *need);
typedef int (*walk_end_fn)(void *walk);

static inline __attribute__((always_inline)) int
merge_step(merge_t *m, tbuf_t *t, int *done, Py_ssize_t *need, void *walk,
           walk_record_fn record, walk_end_fn end)
{
    t->blen = 0;
    *need = -1;
    while (!*done && t->blen < (1 << 16)) {
        Py_ssize_t slot = -1;
        int picked = merge_pick(m, &slot, need);
        if (picked == -2)
            return -1;
        if (picked < 0)
            break;
        if (picked == 0) {
            if (end(walk) < 0)
                return -1;
            *done = 1;
            break;
        }
        int r = record(walk, slot, need);
        if (r < 0)
            return -1;
        if (r > 0)
            break;
    }
    return 0;
}
