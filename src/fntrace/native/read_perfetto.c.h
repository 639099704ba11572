/* -- PerfettoCalls: the Perfetto trace's calls ----------------------------------------
 *
 * The native twin of output/perfetto.py's loop for a trace of calls (the blocks text_ok
 * accepts), after the Python side has written the sequence's first packets (the clock,
 * the process and thread tracks): the records merged by time as GraphText merges them,
 * each slot's calls paired as CallBuilder pairs them (read_pair.c.h), losses included
 * (what is open is closed at the slot's last time, a return after the gap starts no
 * earlier than it),
 * each call a TYPE_SLICE_BEGIN packet at its entry and a TYPE_SLICE_END at its end, a
 * loss a "lost events" instant at the slot's next record; names interned as the Python
 * writer interns them, timestamps as deltas on the sequence's incremental clock.
 *
 * The packets are written as the protobuf runtime serializes the same messages (fields
 * in field-number order), each as one ``packet`` field of a Trace message:
 *
 *     0a LEN TracePacket
 *        40 timestamp          (delta; absolute when earlier than the last packet)
 *        50 01                 trusted_packet_sequence_id = 1
 *        5a LEN TrackEvent
 *               22 LEN DebugAnnotation  (08 name_iid, then 10 bool | 20 int | 32 string)
 *               48 type                 (1 begin, 2 end, 3 instant)
 *               50 name_iid
 *               58 track_uuid
 *        62 LEN InternedData   (12 LEN EventName | 1a LEN DebugAnnotationName: 08 iid
 *                               12 LEN name | ea 01 LEN InternedString: 08 iid
 *                               12 LEN str), the names this packet uses first
 *        68 02                 sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE (interned
 *                              names used)
 *        d0 03 clock_id        timestamp_clock_id (an absolute timestamp)
 *
 * A function tracer hit (a trace of the default tracer) is an instant named after its
 * function, with its caller's name as the interned string annotation "parent" (88 01
 * string_value_iid) and its arguments as "args", as _Writer's loop writes it; so are
 * markers and events (pf_event).  ``cid_of_name`` (a function's name -> its id) lets an
 * event named as a function share its name's iid, as name_iid does.
 */

#define PF_BEGIN 1
#define PF_END 2
#define PF_INSTANT 3
/* the annotations a call or a loss may carry (their names: pf_ann_names) */
#define PF_ANN_ENTRY_LOST 0
#define PF_ANN_UNFINISHED 1
#define PF_ANN_LOST 2

typedef struct {
    int64_t last_any;       /* the exporter's last_ts[cpu] */
    int has_any;
    uint64_t uuid;          /* the thread's track */
} pslot_t;

/* an event's name, resolved by its caller (pf_event): its iid, and its bytes when
 * this packet defines it */
typedef struct {
    uint32_t iid;
    const char *fresh;
    Py_ssize_t len;
} pfname_t;

/* annotation name -> iid (open addressing; iid 0: free) */
typedef struct {
    char *name;
    Py_ssize_t len;
    uint64_t hash;
    uint32_t iid;
} annent_t;

typedef struct {
    annent_t *e;
    Py_ssize_t cap, n;
} annmap_t;

/* cid -> iid (open addressing; 0: free) */
typedef struct {
    uint32_t *key, *val;
    Py_ssize_t cap, n;
} iidmap_t;

typedef struct {
    MERGE_WALK_HEAD
    pair_t pr;
    pslot_t *ps;
    names_t names;
    PyObject *canon;
    iidmap_t iids;
    uint32_t next_name_iid, next_ann_iid, next_val_iid;
    uint32_t lost_iid;                  /* "lost events" */
    annmap_t anns;                      /* annotation names: fixed ones and arguments' */
    annmap_t vals;                      /* interned annotation values (hits' callers) */
    annmap_t evnames;                   /* events' names -> their iids */
    PyObject *cid_of_name;              /* a function's name (bytes) -> its id */
    tbuf_t te, da, in, sv;              /* a packet's TrackEvent, an annotation, and the
                                           annotation names and values it interns */
    int values;                         /* the blocks come with their payloads */
    int64_t last;                       /* the last packet's time on the incremental clock */
    int incremental;                    /* 0: no clock: absolute timestamps, no clock id */
    uint32_t clock_id;
    int64_t first_ts;                   /* where a slot nothing was read from shows its loss */
    long long unknown_mark;
    tbuf_t t;
    int done;
    long long lost_total;               /* counted losses shown */
    int unknown_loss;
    PyObject *losses;                   /* [(ts, slot, lost)] as shown: the counter track's */
} PerfettoCalls;

static const char *const pf_ann_names[3] = {"entry_lost", "unfinished", "lost"};

static inline Py_ssize_t
pb_varint(uint8_t *p, uint64_t v)
{
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static int
iid_get(PerfettoCalls *c, uint32_t cid, uint32_t *iid)
{
    iidmap_t *m = &c->iids;
    if ((m->n + 1) * 2 > m->cap) {
        Py_ssize_t cap = m->cap ? m->cap * 2 : 256;
        uint32_t *k = PyMem_Calloc((size_t)cap, sizeof(uint32_t));
        uint32_t *v = PyMem_Calloc((size_t)cap, sizeof(uint32_t));
        if (k == NULL || v == NULL) {
            PyMem_Free(k);
            PyMem_Free(v);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < m->cap; i++)
            if (m->val[i]) {
                Py_ssize_t h = (Py_ssize_t)(mix(m->key[i]) & (uint64_t)(cap - 1));
                while (v[h])
                    h = (h + 1) & (cap - 1);
                k[h] = m->key[i];
                v[h] = m->val[i];
            }
        PyMem_Free(m->key);
        PyMem_Free(m->val);
        m->key = k;
        m->val = v;
        m->cap = cap;
    }
    Py_ssize_t h = (Py_ssize_t)(mix(cid) & (uint64_t)(m->cap - 1));
    while (m->val[h]) {
        if (m->key[h] == cid) {
            *iid = m->val[h];
            return 0;
        }
        h = (h + 1) & (m->cap - 1);
    }
    *iid = 0;       /* new: the caller defines it */
    m->key[h] = cid;
    m->val[h] = ++c->next_name_iid;
    m->n++;
    return 0;
}

/* the entry of ``name`` in ``m``: its own, or (iid 0) the free one it would take,
 * with the name's hash (the map grown first when it is half full); NULL when memory
 * runs out */
static annent_t *
annmap_find(annmap_t *m, const char *name, Py_ssize_t len, uint64_t *hash)
{
    if ((m->n + 1) * 2 > m->cap) {
        Py_ssize_t cap = m->cap ? m->cap * 2 : 64;
        annent_t *e = PyMem_Calloc((size_t)cap, sizeof(annent_t));
        if (e == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (Py_ssize_t i = 0; i < m->cap; i++)
            if (m->e[i].iid) {
                Py_ssize_t h = (Py_ssize_t)(m->e[i].hash & (uint64_t)(cap - 1));
                while (e[h].iid)
                    h = (h + 1) & (cap - 1);
                e[h] = m->e[i];
            }
        PyMem_Free(m->e);
        m->e = e;
        m->cap = cap;
    }
    *hash = hash_bytes((const uint8_t *)name, len);
    Py_ssize_t h = (Py_ssize_t)(*hash & (uint64_t)(m->cap - 1));
    while (m->e[h].iid) {
        annent_t *x = &m->e[h];
        if (x->hash == *hash && x->len == len && !memcmp(x->name, name, (size_t)len))
            return x;
        h = (h + 1) & (m->cap - 1);
    }
    return &m->e[h];
}

/* ``name`` into the free entry ``x`` of ``m`` (annmap_find's), as ``iid`` */
static int
annmap_put(annmap_t *m, annent_t *x, const char *name, Py_ssize_t len, uint64_t hash,
           uint32_t iid)
{
    char *copy = PyMem_Malloc(len ? (size_t)len : 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(copy, name, (size_t)len);
    x->name = copy;
    x->len = len;
    x->hash = hash;
    x->iid = iid;
    m->n++;
    return 0;
}

/* the iid of a string in ``m`` (numbered by ``*next`` in the order first met); a new
 * one is also written to ``to`` as an InternedData entry (field ``tag``: 08 iid 12
 * LEN string) */
static int
intern_of(annmap_t *m, uint32_t *next, const char *tag, Py_ssize_t ntag, tbuf_t *to,
          const char *name, Py_ssize_t len, uint32_t *out)
{
    uint64_t hash;
    annent_t *x = annmap_find(m, name, len, &hash);
    if (x == NULL)
        return -1;
    if (x->iid) {
        *out = x->iid;
        return 0;
    }
    if (annmap_put(m, x, name, len, hash, *next + 1) < 0)
        return -1;
    ++*next;
    *out = x->iid;
    /* tag LEN { 08 iid 12 LEN name } */
    uint8_t body[24];
    Py_ssize_t nb = 0;
    body[nb++] = 0x08;
    nb += pb_varint(body + nb, x->iid);
    body[nb++] = 0x12;
    nb += pb_varint(body + nb, (uint64_t)len);
    if (tb_reserve(to, 14 + nb + len) < 0)
        return -1;
    uint8_t head[14];
    Py_ssize_t nh = 0;
    memcpy(head, tag, (size_t)ntag);
    nh = ntag;
    nh += pb_varint(head + nh, (uint64_t)(nb + len));
    tb_put(to, (const char *)head, nh);
    tb_put(to, (const char *)body, nb);
    tb_put(to, name, len);
    return 0;
}

/* the iid of an annotation name (the Python writer's ann_iid: one numbering for the
 * fixed names and the arguments' names, in the order they are first used); a new
 * name is also written to ``c->in`` as an InternedData debug_annotation_names entry */
static int
ann_iid_of(PerfettoCalls *c, const char *name, Py_ssize_t len, uint32_t *out)
{
    return intern_of(&c->anns, &c->next_ann_iid, "\x1a", 1, &c->in, name, len, out);
}

static inline Py_ssize_t
pb_varint_len(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* one TrackEvent debug annotation (22 LEN DebugAnnotation) into c->te: the name's iid,
 * then a bool (kind 'b'), an int ('i'), a string ('s') or, for the arguments ('a'), a
 * dict entry per (name, value) pair of the NUL-joined text, as set_value writes them */
static int
pf_annotation(PerfettoCalls *c, const char *name, char kind, long long iv, const char *sv,
              Py_ssize_t slen)
{
    uint32_t iid;
    if (ann_iid_of(c, name, (Py_ssize_t)strlen(name), &iid) < 0)
        return -1;
    tbuf_t *d = &c->da;
    d->blen = 0;
    if (tb_reserve(d, 32 + (kind == 'a' || kind == 's' ? 2 * slen + 16 : 0)) < 0)
        return -1;
    uint8_t tmp[24];
    Py_ssize_t n = 0;
    tmp[n++] = 0x08;
    n += pb_varint(tmp + n, iid);
    if (kind == 'b') {
        tmp[n++] = 0x10;
        tmp[n++] = 0x01;
    } else if (kind == 'i') {
        tmp[n++] = 0x20;
        n += pb_varint(tmp + n, (uint64_t)iv);
    } else if (kind == 's') {
        tmp[n++] = 0x32;
        n += pb_varint(tmp + n, (uint64_t)slen);
    }
    tb_put(d, (const char *)tmp, n);
    if (kind == 's')
        tb_put(d, sv, slen);
    if (kind == 'a') {
        /* args_pairs(text): the pieces two by two, an odd last one dropped */
        Py_ssize_t i = 0;
        while (i <= slen) {
            const char *e = memchr(sv + i, 0, (size_t)(slen - i));
            if (e == NULL)
                break;
            Py_ssize_t nend = e - sv, v0 = nend + 1;
            const char *e2 = memchr(sv + v0, 0, (size_t)(slen - v0));
            Py_ssize_t vend = e2 ? e2 - sv : slen;
            uint32_t kiid;
            if (ann_iid_of(c, sv + i, nend - i, &kiid) < 0)
                return -1;
            Py_ssize_t vl = vend - v0;
            Py_ssize_t elen = 1 + pb_varint_len(kiid) + 1 + pb_varint_len((uint64_t)vl) + vl;
            if (tb_reserve(d, 32 + elen) < 0)
                return -1;
            n = 0;
            tmp[n++] = 0x5a;
            n += pb_varint(tmp + n, (uint64_t)elen);
            tmp[n++] = 0x08;
            n += pb_varint(tmp + n, kiid);
            tmp[n++] = 0x32;
            n += pb_varint(tmp + n, (uint64_t)vl);
            tb_put(d, (const char *)tmp, n);
            tb_put(d, sv + v0, vl);
            if (e2 == NULL)
                break;
            i = vend + 1;
        }
    }
    if (tb_reserve(&c->te, 12 + d->blen) < 0)
        return -1;
    n = 0;
    tmp[n++] = 0x22;
    n += pb_varint(tmp + n, (uint64_t)d->blen);
    tb_put(&c->te, (const char *)tmp, n);
    tb_put(&c->te, d->buf, d->blen);
    return 0;
}

/* a string annotation whose value repeats (a caller's name, a marker's writer): 22 LEN
 * { 08 name_iid 88 01 string_value_iid }, the value interned (annotate_interned) */
static int
pf_interned_annotation(PerfettoCalls *c, const char *name, const char *value,
                       Py_ssize_t vlen)
{
    uint32_t niid, viid;
    if (ann_iid_of(c, name, (Py_ssize_t)strlen(name), &niid) < 0
            || intern_of(&c->vals, &c->next_val_iid, "\xea\x01", 2, &c->sv, value, vlen,
                         &viid) < 0)
        return -1;
    uint8_t a[32];
    Py_ssize_t n = 0, body = 1 + pb_varint_len(niid) + 2 + pb_varint_len(viid);
    a[n++] = 0x22;
    n += pb_varint(a + n, (uint64_t)body);
    a[n++] = 0x08;
    n += pb_varint(a + n, niid);
    a[n++] = 0x88;
    a[n++] = 0x01;
    n += pb_varint(a + n, viid);
    if (tb_reserve(&c->te, n) < 0)
        return -1;
    tb_put(&c->te, (const char *)a, n);
    return 0;
}

/* the iid of an event's name (the Python writer's name_iid, by the name: a function's
 * of the same name is its iid) */
static int
pf_event_name(PerfettoCalls *c, const char *name, Py_ssize_t len, pfname_t *nm)
{
    uint64_t hash;
    annent_t *x = annmap_find(&c->evnames, name, len, &hash);
    if (x == NULL)
        return -1;
    if (x->iid) {
        nm->iid = x->iid;
        return 0;
    }
    /* new here: a function's name (cid_of_name: its iid, defined now if it was not),
     * or a name of its own */
    uint32_t iid = 0;
    int fresh = 1;
    if (c->cid_of_name != NULL) {
        PyObject *key = PyBytes_FromStringAndSize(name, len);
        if (key == NULL)
            return -1;
        PyObject *cid = PyDict_GetItemWithError(c->cid_of_name, key);
        Py_DECREF(key);
        if (cid == NULL && PyErr_Occurred())
            return -1;
        if (cid != NULL) {
            unsigned long k = PyLong_AsUnsignedLong(cid);
            if (k == (unsigned long)-1 && PyErr_Occurred())
                return -1;
            if (iid_get(c, (uint32_t)k, &iid) < 0)
                return -1;
            if (iid)
                fresh = 0;
            else
                iid = c->next_name_iid;     /* (numbered by iid_get) */
        }
    }
    if (!iid)
        iid = ++c->next_name_iid;
    if (annmap_put(&c->evnames, x, name, len, hash, iid) < 0)
        return -1;
    nm->iid = iid;
    nm->fresh = fresh ? name : NULL;
    nm->len = len;
    return 0;
}

/* One packet.  name: the event's name (its id, or the lost events name when lost_name),
 * none for an end; ann: one of PF_ANN_* or -1; aval/astr: its value (an int; a string
 * when astr); args/alen: a begin's arguments (NULL: none), ret: an end's return value
 * (NULL: none) -- written before ann, as the Python writer annotates */
static int pf_packet_end(PerfettoCalls *c, int type, int64_t ts, uint64_t uuid,
                         int has_name, uint32_t id, uint32_t cid, int lost_name,
                         int annotated, const pfname_t *given, const char *lit,
                         Py_ssize_t llen);

static int
pf_packet(PerfettoCalls *c, int type, int64_t ts, uint64_t uuid, int has_name, uint32_t id,
          uint32_t cid, int lost_name, int ann, long long aval, const char *astr,
          const char *args, Py_ssize_t alen, const pvalue_t *ret)
{
    c->te.blen = 0;
    c->in.blen = 0;
    c->sv.blen = 0;
    int annotated = 0;
    if (args != NULL && alen && memchr(args, 0, (size_t)alen) != NULL) {
        if (pf_annotation(c, "args", 'a', 0, args, alen) < 0)
            return -1;
        annotated = 1;
    }
    if (ret != NULL && ret->has) {
        if (ret->kind == PAY_INT ? pf_annotation(c, "retval", 'i', (long long)ret->iv, NULL, 0)
                                 : pf_annotation(c, "retval", 's', 0, ret->s, ret->len))
            return -1;
        annotated = 1;
    }
    if (ann >= 0) {
        const char *an = pf_ann_names[ann];
        int err;
        if (astr != NULL)
            err = pf_annotation(c, an, 's', 0, astr, (Py_ssize_t)strlen(astr));
        else if (ann == PF_ANN_LOST)
            err = pf_annotation(c, an, 'i', aval, NULL, 0);
        else
            err = pf_annotation(c, an, 'b', 0, NULL, 0);
        if (err)
            return -1;
        annotated = 1;
    }
    return pf_packet_end(c, type, ts, uuid, has_name, id, cid, lost_name, annotated, NULL,
                         NULL, 0);
}

/* a function tracer hit of ``id`` (``cid``) called from ``parent`` (0: not known), its
 * arguments' text ``args`` (NULL: none): an instant, annotated "parent" (interned)
 * then "args" */
static int
pf_hit(PerfettoCalls *c, int64_t ts, uint64_t uuid, uint32_t id, uint32_t cid,
       uint32_t parent, const char *args, Py_ssize_t alen)
{
    c->te.blen = 0;
    c->in.blen = 0;
    c->sv.blen = 0;
    int annotated = 0;
    if (parent) {
        char ptmp[24];
        Py_ssize_t plen;
        const char *pname = names_get(&c->names, parent, &plen, ptmp, "0x%x");
        if (pf_interned_annotation(c, "parent", pname, plen) < 0)
            return -1;
        annotated = 1;
    }
    if (args != NULL && alen && memchr(args, 0, (size_t)alen) != NULL) {
        if (pf_annotation(c, "args", 'a', 0, args, alen) < 0)
            return -1;
        annotated = 1;
    }
    return pf_packet_end(c, PF_INSTANT, ts, uuid, 1, id, cid, 0, annotated, NULL, NULL, 0);
}

/* _Writer's loop for a marker or an event (the payload ``v``: "name\0text" or the text
 * alone): an event is an instant named after it (interned as function names are: an
 * event named as a function shares its iid) with its text as "fields"; a marker an
 * instant named by its text (not interned; trailing newlines cut, "trace_marker" when
 * none is left), its writer an interned "writer" value */
static int
pf_event(PerfettoCalls *c, const record_t *r, int64_t ts, uint64_t uuid, const pvalue_t *v)
{
    const char *name, *text;
    Py_ssize_t nlen, tlen;
    text_parts(v->s, v->len, &name, &nlen, &text, &tlen);
    c->te.blen = 0;
    c->in.blen = 0;
    c->sv.blen = 0;
    if (r->type == FNT_TRACE_EVENT) {
        pfname_t nm = {0, NULL, 0};
        if (pf_event_name(c, name, nlen, &nm) < 0
                || pf_annotation(c, "fields", 's', 0, text, tlen) < 0)
            return -1;
        return pf_packet_end(c, PF_INSTANT, ts, uuid, 1, 0, 0, 0, 1, &nm, NULL, 0);
    }
    int annotated = 0;
    if (nlen) {
        if (pf_interned_annotation(c, "writer", name, nlen) < 0)
            return -1;
        annotated = 1;
    }
    Py_ssize_t shown = tlen;
    while (shown && text[shown - 1] == '\n')
        shown--;
    return pf_packet_end(c, PF_INSTANT, ts, uuid, 0, 0, 0, 0, annotated, NULL,
                         shown ? text : "trace_marker", shown ? shown : 12);
}

/* the packet whose annotations (c->te) and interned annotation names and values
 * (c->in, c->sv) are made: its name, type, track and time */
static int
pf_packet_end(PerfettoCalls *c, int type, int64_t ts, uint64_t uuid, int has_name,
              uint32_t id, uint32_t cid, int lost_name, int annotated, const pfname_t *given,
              const char *lit, Py_ssize_t llen)
{
    const char *name = NULL;
    Py_ssize_t name_len = 0;
    char tmp[24];
    uint32_t name_iid = 0, new_name = 0;
    if (has_name && given != NULL) {
        name_iid = given->iid;
        if (given->fresh != NULL) {
            new_name = 1;
            name = given->fresh;
            name_len = given->len;
        }
    } else if (has_name) {
        if (lost_name) {
            if (!c->lost_iid) {
                c->lost_iid = ++c->next_name_iid;
                new_name = 1;
                name = "lost events";
                name_len = 11;
            }
            name_iid = c->lost_iid;
        } else {
            if (iid_get(c, cid, &name_iid) < 0)
                return -1;
            if (!name_iid) {
                new_name = 1;
                name_iid = c->next_name_iid;
                name = names_get(&c->names, id, &name_len, tmp, "0x%x");
            }
        }
    }
    if (tb_reserve(&c->te, 40) < 0)
        return -1;
    uint8_t te[40];
    Py_ssize_t nte = 0;
    te[nte++] = 0x48;
    te[nte++] = (uint8_t)type;
    if (has_name) {
        te[nte++] = 0x50;
        nte += pb_varint(te + nte, name_iid);
    }
    te[nte++] = 0x58;
    nte += pb_varint(te + nte, uuid);
    if (lit != NULL) {
        /* ba 01 LEN name: a name not interned (a marker's text) */
        te[nte++] = 0xba;
        te[nte++] = 0x01;
        nte += pb_varint(te + nte, (uint64_t)llen);
    }
    tb_put(&c->te, (const char *)te, nte);
    if (lit != NULL) {
        if (tb_reserve(&c->te, llen) < 0)
            return -1;
        tb_put(&c->te, lit, llen);
    }
    /* interned data: the event name (field 2) before the annotation names (field 3);
     * a name's bytes go straight to the output, so only the heads are made here */
    uint8_t nhead[24];
    Py_ssize_t nnh = 0, ename_len = 0;
    if (new_name) {
        uint8_t body[16];
        Py_ssize_t nb = 0;
        body[nb++] = 0x08;
        nb += pb_varint(body + nb, name_iid);
        body[nb++] = 0x12;
        nb += pb_varint(body + nb, (uint64_t)name_len);
        ename_len = nb + name_len;
        nhead[nnh++] = 0x12;
        nnh += pb_varint(nhead + nnh, (uint64_t)ename_len);
        memcpy(nhead + nnh, body, (size_t)nb);
        nnh += nb;
    }
    Py_ssize_t nin = c->in.blen, nsv = c->sv.blen;
    Py_ssize_t interned = (new_name ? nnh + name_len : 0) + nin + nsv;
    /* the timestamp */
    uint64_t tsv;
    int absolute = 0;
    if (ts < 0)
        ts = 0;
    if (!c->incremental)
        tsv = (uint64_t)ts;
    else if (ts >= c->last) {
        tsv = (uint64_t)(ts - c->last);
        c->last = ts;
    } else {
        tsv = (uint64_t)ts;
        absolute = 1;
    }
    Py_ssize_t nte_all = c->te.blen;
    uint8_t head[64];
    Py_ssize_t nh = 0;
    head[nh++] = 0x40;
    nh += pb_varint(head + nh, tsv);
    head[nh++] = 0x50;
    head[nh++] = 0x01;
    head[nh++] = 0x5a;
    nh += pb_varint(head + nh, (uint64_t)nte_all);
    uint8_t tail[32];
    Py_ssize_t nt = 0;
    if (has_name || annotated) {
        tail[nt++] = 0x68;
        tail[nt++] = 0x02;
    }
    if (absolute) {
        tail[nt++] = 0xd0;
        tail[nt++] = 0x03;
        nt += pb_varint(tail + nt, c->clock_id);
    }
    uint8_t ihead[12];
    Py_ssize_t nih = 0;
    if (interned) {
        ihead[nih++] = 0x62;
        nih += pb_varint(ihead + nih, (uint64_t)interned);
    }
    Py_ssize_t plen = nh + nte_all + nih + interned + nt;
    tbuf_t *t = &c->t;
    uint8_t ph[12];
    Py_ssize_t nph = 0;
    ph[nph++] = 0x0a;
    nph += pb_varint(ph + nph, (uint64_t)plen);
    if (tb_reserve(t, nph + plen) < 0)
        return -1;
    tb_put(t, (const char *)ph, nph);
    tb_put(t, (const char *)head, nh);
    tb_put(t, c->te.buf, nte_all);
    if (interned) {
        tb_put(t, (const char *)ihead, nih);
        if (new_name) {
            tb_put(t, (const char *)nhead, nnh);
            tb_put(t, name, name_len);
        }
        tb_put(t, c->in.buf, nin);
        tb_put(t, c->sv.buf, nsv);
    }
    tb_put(t, (const char *)tail, nt);
    return 0;
}

/* _Writer.lost: the instant of a slot's losses, at ``ts`` */
static int
pf_lost(PerfettoCalls *c, Py_ssize_t slot, int64_t ts, long long lost)
{
    if (c->losses == NULL && (c->losses = PyList_New(0)) == NULL)
        return -1;
    PyObject *item = Py_BuildValue("(LnL)", (long long)ts, slot, lost);
    if (item == NULL || PyList_Append(c->losses, item) < 0) {
        Py_XDECREF(item);
        return -1;
    }
    Py_DECREF(item);
    if (lost == c->unknown_mark) {
        c->unknown_loss = 1;
        return pf_packet(c, PF_INSTANT, ts, c->ps[slot].uuid, 1, 0, 0, 1, PF_ANN_LOST, 0,
                         "unknown", NULL, 0, NULL);
    }
    c->lost_total += lost;
    return pf_packet(c, PF_INSTANT, ts, c->ps[slot].uuid, 1, 0, 0, 1, PF_ANN_LOST, lost, NULL,
                     NULL, 0, NULL);
}

/* _Writer.end: a call ended (its begin first when its entry was not in the trace) */
static int
pf_emit(void *ctx, Py_ssize_t slot, const paired_t *p)
{
    PerfettoCalls *c = (PerfettoCalls *)ctx;
    uint64_t uuid = c->ps[slot].uuid;
    if (!p->entry_seen && pf_packet(c, PF_BEGIN, p->start, uuid, 1, p->id, p->cid, 0,
                                    PF_ANN_ENTRY_LOST, 0, NULL, p->args, p->alen, NULL) < 0)
        return -1;
    return pf_packet(c, PF_END, p->end, uuid, 0, 0, 0, 0,
                     p->complete ? -1 : PF_ANN_UNFINISHED, 0, NULL, NULL, 0, &p->ret);
}

/* the loss notes a slot has: CallBuilder.feed(LostEvents) for each, and the count that
 * waits for the slot's next record (lost_pending) */
static int
pf_marks(PerfettoCalls *c, Py_ssize_t slot, long long *pending, int *has_pending)
{
    gslot_t *g = &c->m.slots[slot];
    for (Py_ssize_t i = 0; i < g->nmarks; i++) {
        if (pair_lost(&c->pr, slot) < 0)
            return -1;
        long long m = g->marks[i];
        if (!*has_pending)
            *pending = m;
        else if (*pending == c->unknown_mark || m == c->unknown_mark)
            *pending = c->unknown_mark;
        else
            *pending += m;
        *has_pending = 1;
    }
    g->nmarks = 0;
    return 0;
}

static int
pf_record(void *walk, Py_ssize_t best, Py_ssize_t *need)
{
    PerfettoCalls *c = walk;
    record_t r;
    uint32_t id;
    merge_take(&c->m, best, &r, &id);
    pslot_t *s = &c->ps[best];
    int64_t ts = (int64_t)r.ts;
    if (c->m.slots[best].nmarks) {
        long long pending = 0;
        int has = 0;
        if (pf_marks(c, best, &pending, &has) < 0 || pf_lost(c, best, ts, pending) < 0)
            return -1;
    }
    s->last_any = ts;
    s->has_any = 1;
    uint32_t cid = id;
    if (canon_lookup(c->canon, &cid) < 0)
        return -1;
    pvalue_t v = record_value(&c->m, best, &r, c->values);
    if (r.type == FNT_TRACE_EVENT || r.type == FNT_TRACE_PRINT) {
        pvalue_t ev = record_value(&c->m, best, &r, 1);
        return pf_event(c, &r, ts, s->uuid, &ev);
    }
    int has_args = v.has && v.kind == PAY_STR;
    if (r.type == FNT_TRACE_FN) {
        /* (trace_set's ids: the process's base added to the caller too) */
        gslot_t *g = &c->m.slots[best];
        uint32_t parent = r.b ? r.b + g->q[g->head].ibase : 0;
        return pf_hit(c, ts, s->uuid, id, cid, parent, has_args ? v.s : NULL,
                      has_args ? v.len : 0);
    }
    if (pair_record(&c->pr, best, &r, id, cid, &v) < 0)
        return -1;
    if (r.type != FNT_TRACE_GRAPH_ENT)
        return 0;
    return pf_packet(c, PF_BEGIN, ts, s->uuid, 1, id, cid, 0, -1, 0, NULL,
                     has_args ? v.s : NULL, has_args ? v.len : 0, NULL);
}

/* the losses nothing was read after, slot by slot; builder.finish(); then their
 * instants, at each slot's last time */
static int
pf_end(void *walk)
{
    PerfettoCalls *c = walk;
    Py_ssize_t ns = c->m.nslots;
    long long *pend = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(long long));
    int *has = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(int));
    if (pend == NULL || has == NULL) {
        PyMem_Free(pend);
        PyMem_Free(has);
        PyErr_NoMemory();
        return -1;
    }
    int err = 0;
    for (Py_ssize_t k = 0; k < ns && !err; k++)
        if (c->m.slots[k].nmarks)
            err = pf_marks(c, k, &pend[k], &has[k]) < 0;
    if (!err)
        err = pair_finish(&c->pr) < 0;
    for (Py_ssize_t k = 0; k < ns && !err; k++)
        if (has[k])
            err = pf_lost(c, k, c->ps[k].has_any ? c->ps[k].last_any : c->first_ts,
                          pend[k]) < 0;
    PyMem_Free(pend);
    PyMem_Free(has);
    return err ? -1 : 0;
}

static PyObject *
pf_step(PerfettoCalls *c, PyObject *unused)
{
    Py_ssize_t need;
    if (merge_step(&c->m, &c->t, &c->done, &need, c, pf_record, pf_end) < 0)
        return NULL;
    return step_out(PyBytes_FromStringAndSize(c->t.buf, c->t.blen), need);
}

static PyObject *
pf_counts(PerfettoCalls *c, PyObject *unused)
{
    return Py_BuildValue("(LO)", c->lost_total, c->unknown_loss ? Py_True : Py_False);
}

static PyObject *
pf_losses(PerfettoCalls *c, PyObject *unused)
{
    return c->losses != NULL ? Py_NewRef(c->losses) : PyList_New(0);
}

/* PerfettoCalls(slots, names, canon, uuids, clock, t0, first_ts, unknown, values=False,
 * cid_of_name=None):
 * names id -> its name (as the Python writer writes it), canon as StatWalk's, uuids
 * slot -> its thread's track uuid, clock the trace clock's id (None: no clock, absolute
 * timestamps), t0 the incremental clock's start, first_ts where a slot nothing was read
 * from shows its losses, unknown the loss count that means "unknown" */
static int
pf_init(PerfettoCalls *c, PyObject *args, PyObject *kw)
{
    Py_ssize_t nslots;
    PyObject *names, *canon, *uuids, *clock, *cid_of_name = Py_None;
    long long t0, first_ts, unknown;
    int values = 0;
    if (!PyArg_ParseTuple(args, "nO!OO!OLLL|pO:PerfettoCalls", &nslots, &PyDict_Type, &names,
                          &canon, &PyDict_Type, &uuids, &clock, &t0, &first_ts, &unknown,
                          &values, &cid_of_name))
        return -1;
    if (cid_of_name != Py_None) {
        if (!PyDict_Check(cid_of_name)) {
            PyErr_SetString(PyExc_TypeError, "PerfettoCalls: cid_of_name is a dict or None");
            return -1;
        }
        c->cid_of_name = Py_NewRef(cid_of_name);
    }
    c->values = values;
    if (c->m.slots != NULL || nslots < 0 || nslots > SLOT_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "PerfettoCalls: bad slot count (or made twice)");
        return -1;
    }
    if (canon_arg(canon, &c->canon, "PerfettoCalls") < 0)
        return -1;
    if (clock == Py_None) {
        c->incremental = 0;
    } else {
        unsigned long id = PyLong_AsUnsignedLong(clock);
        if (id == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        c->incremental = 1;
        c->clock_id = (uint32_t)id;
    }
    c->last = t0 < 0 ? 0 : t0;
    c->first_ts = first_ts;
    c->unknown_mark = unknown;
    Py_ssize_t n1 = nslots ? nslots : 1;
    if (merge_init(&c->m, nslots) < 0)
        return -1;
    c->ps = PyMem_Calloc((size_t)n1, sizeof(pslot_t));
    if (c->ps == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (pair_init(&c->pr, nslots, pf_emit, c) < 0)
        return -1;
    if (names_init(&c->names, names) < 0)
        return -1;
    Py_ssize_t pos = 0, seen = 0, slot;
    PyObject *v;
    int more;
    while ((more = slot_item(uuids, nslots, &pos, &slot, &v)) > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (u == 0)
            continue;
        if (!c->ps[slot].uuid)
            seen++;
        c->ps[slot].uuid = u;
    }
    if (more < 0)
        return -1;
    if (seen != nslots) {
        PyErr_SetString(PyExc_ValueError, "PerfettoCalls: a slot without its track");
        return -1;
    }
    return 0;
}

static void
pf_dealloc(PerfettoCalls *c)
{
    merge_free(&c->m);
    pair_free(&c->pr);
    PyMem_Free(c->ps);
    names_free(&c->names);
    PyMem_Free(c->iids.key);
    PyMem_Free(c->iids.val);
    for (annmap_t *m = &c->anns; m <= &c->evnames; m++) {
        for (Py_ssize_t i = 0; i < m->cap; i++)
            PyMem_Free(m->e[i].name);
        PyMem_Free(m->e);
    }
    PyMem_Free(c->te.buf);
    PyMem_Free(c->da.buf);
    PyMem_Free(c->in.buf);
    PyMem_Free(c->sv.buf);
    PyMem_Free(c->t.buf);
    Py_XDECREF(c->canon);
    Py_XDECREF(c->cid_of_name);
    Py_XDECREF(c->losses);
    read_free((PyObject *)c);
}

static PyMethodDef pf_methods[] = {
    MERGE_FEED_METHOD,
    {"step", (PyCFunction)pf_step, METH_NOARGS,
     "step() -> (packets, need): serialized packets, and the slot to feed before more "
     "(-1: none)"},
    {"counts", (PyCFunction)pf_counts, METH_NOARGS,
     "counts() -> (lost events shown, a loss of unknown size was shown)"},
    {"losses", (PyCFunction)pf_losses, METH_NOARGS,
     "losses() -> [(ts, slot, lost)]: each loss shown, in the order shown"},
    {NULL}
};

READ_TYPE(pf, PerfettoCalls,
          "PerfettoCalls(slots, names, canon, uuids, clock, t0, first_ts, unknown, "
          "values=False, cid_of_name=None): the Perfetto trace's call packets of a trace "
          "file (output/perfetto.py's twin)");
