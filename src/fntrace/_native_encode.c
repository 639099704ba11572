/*
 * The compact trace-file encoding of ring-buffer records (part of fntrace._native):
 * encode_records(records) -> bytes and decode_records(data, n) -> bytes, the native
 * twins of tracefile/codec.py's py_encode / py_decode, byte for byte (the format is described
 * there and in docs/tracefile-format.md).  The trace file's writer thread runs the
 * encoder on every record the program produces.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "fntrace_record_format.h"

typedef struct {
    unsigned char *p;
    Py_ssize_t n, cap;
} obuf;

static int
ob_reserve(obuf *o, Py_ssize_t more)
{
    if (o->n + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->n + more)
        cap *= 2;
    unsigned char *p = PyMem_Realloc(o->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    o->cap = cap;
    return 0;
}

/* the caller has reserved 10 bytes */
static inline __attribute__((always_inline)) void
put_uv(obuf *o, uint64_t v)
{
    unsigned char *p = o->p + o->n;
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    o->n = p - o->p;
}

static inline uint64_t
zz(uint64_t delta)
{
    int64_t s = (int64_t)delta;
    return ((uint64_t)s << 1) ^ (uint64_t)(s >> 63);
}

static inline uint64_t
unzz(uint64_t v)
{
    return (v >> 1) ^ (0 - (v & 1));
}

typedef struct {
    uint32_t ip, depth;
    uint64_t ts;
} ent_t;

PyObject *
fntrace_encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "encode_records(records)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len % FNT_RECORD_SIZE) {
        PyErr_Format(PyExc_ValueError, "records length %zd is not a multiple of %d",
                     view.len, FNT_RECORD_SIZE);
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t n = view.len / FNT_RECORD_SIZE, i = 0, sp = 0;
    if (n == 0) {
        PyBuffer_Release(&view);
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    const record_t *r = (const record_t *)view.buf;
    obuf o = {NULL, 0, 0};
    ent_t *stack = PyMem_Malloc(sizeof(ent_t) * (size_t)n);
    PyObject *res = NULL;
    if (stack == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t prev = r[0].ts, depth = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (r[k].type == FNT_TRACE_GRAPH_ENT) {
            depth = r[k].b;
            break;
        }
    if (ob_reserve(&o, 20) < 0)
        goto done;
    put_uv(&o, prev);
    put_uv(&o, depth);
    Py_BEGIN_ALLOW_THREADS
    while (i < n) {
        /* the longest record: tag + 6 varints of up to 10 bytes */
        if (o.n + 64 > o.cap) {
            Py_BLOCK_THREADS
            int rc = ob_reserve(&o, 64 + (n - i) * 4);
            Py_UNBLOCK_THREADS
            if (rc < 0)
                break;
        }
        const record_t *e = &r[i++];
        uint64_t ts = e->ts;
        unsigned pay = (e->flags & FNT_HAS_PAYLOAD) ? FNT_FILE_PAY0 : 0;
        int ty = (e->flags & ~FNT_HAS_PAYLOAD & 0xFFFF) ? -1 : e->type;
        if (ty == FNT_TRACE_GRAPH_ENT && e->c == 0 && e->d == 0) {
            if (i < n) {
                const record_t *x = &r[i];
                if (x->type == FNT_TRACE_GRAPH_RET && !(x->flags & ~FNT_HAS_PAYLOAD & 0xFFFF)
                        && x->a == e->a && x->b == e->b && x->d == ts && x->ts >= ts) {
                    unsigned tag = FNT_FILE_LEAF | pay | (x->flags ? FNT_FILE_PAY1 : 0);
                    if (e->b != depth)
                        tag |= FNT_FILE_EXPLICIT;
                    if (x->c)
                        tag |= FNT_FILE_OVERRUN;
                    o.p[o.n++] = (unsigned char)tag;
                    put_uv(&o, zz(ts - prev));
                    put_uv(&o, x->ts - ts);
                    put_uv(&o, e->a);
                    if (e->b != depth)
                        put_uv(&o, e->b);
                    if (x->c)
                        put_uv(&o, x->c);
                    prev = x->ts;
                    depth = e->b;
                    i++;
                    continue;
                }
            }
            unsigned tag = FNT_TRACE_GRAPH_ENT | pay | (e->b != depth ? FNT_FILE_EXPLICIT : 0);
            o.p[o.n++] = (unsigned char)tag;
            put_uv(&o, zz(ts - prev));
            put_uv(&o, e->a);
            if (e->b != depth)
                put_uv(&o, e->b);
            stack[sp].ip = e->a;
            stack[sp].depth = e->b;
            stack[sp].ts = ts;
            sp++;
            prev = ts;
            depth = (uint64_t)e->b + 1;
        }
        else if (ty == FNT_TRACE_GRAPH_RET) {
            int implied = sp > 0 && stack[sp - 1].ip == e->a && stack[sp - 1].depth == e->b
                && stack[sp - 1].ts == e->d;
            unsigned tag = FNT_TRACE_GRAPH_RET | pay | (implied ? 0 : FNT_FILE_EXPLICIT)
                | (e->c ? FNT_FILE_OVERRUN : 0);
            o.p[o.n++] = (unsigned char)tag;
            put_uv(&o, zz(ts - prev));
            if (!implied) {
                put_uv(&o, e->a);
                put_uv(&o, e->b);
                put_uv(&o, zz(ts - e->d));
            }
            if (e->c)
                put_uv(&o, e->c);
            while (sp > 0 && stack[sp - 1].depth >= e->b)
                sp--;
            prev = ts;
            depth = e->b;
        }
        else if (ty == FNT_TRACE_FN && e->c == 0 && e->d == 0) {
            o.p[o.n++] = (unsigned char)(FNT_TRACE_FN | pay);
            put_uv(&o, zz(ts - prev));
            put_uv(&o, e->a);
            put_uv(&o, e->b);
            prev = ts;
        }
        else if ((ty == FNT_TRACE_PRINT || ty == FNT_TRACE_STACK || ty == FNT_TRACE_EVENT)
                 && e->b == 0 && e->c == 0 && e->d == 0) {
            o.p[o.n++] = (unsigned char)(ty | pay);
            put_uv(&o, zz(ts - prev));
            put_uv(&o, e->a);
            prev = ts;
        }
        else {
            o.p[o.n++] = FNT_FILE_RAW;
            put_uv(&o, zz(ts - prev));
            put_uv(&o, e->type);
            put_uv(&o, e->flags);
            put_uv(&o, e->a);
            put_uv(&o, e->b);
            put_uv(&o, e->c);
            put_uv(&o, e->d);
            prev = ts;
        }
    }
    Py_END_ALLOW_THREADS
    if (i >= n && !PyErr_Occurred())
        res = PyBytes_FromStringAndSize((const char *)o.p, o.n);
done:
    PyMem_Free(stack);
    PyMem_Free(o.p);
    PyBuffer_Release(&view);
    return res;
}

/* -- decoding ------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos, size;
    const char *err;
} ibuf;

static inline uint64_t
get_uv(ibuf *in)
{
    /* most of a trace's varints (ids, depths, small time steps) are one or two bytes */
    if (in->pos + 1 < in->size) {
        unsigned b0 = in->p[in->pos];
        if (b0 < 0x80) {
            in->pos++;
            return b0;
        }
        unsigned b1 = in->p[in->pos + 1];
        if (b1 < 0x80) {
            in->pos += 2;
            return (b0 & 0x7F) | ((uint64_t)b1 << 7);
        }
    }
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (in->pos >= in->size) {
            in->err = "varint runs past the end";
            return 0;
        }
        unsigned b = in->p[in->pos++];
        if (shift == 63 && (b & 0x7E)) {
            in->err = "varint above 64 bits";
            return 0;
        }
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            return v;
        shift += 7;
        if (shift >= 70) {
            in->err = "varint longer than 10 bytes";
            return 0;
        }
    }
}

static inline void
put_rec(record_t *out, uint64_t ts, unsigned type, unsigned flags, uint64_t a, uint64_t b,
        uint64_t c, uint64_t d)
{
    out->ts = ts;
    out->type = (unsigned short)type;
    out->flags = (unsigned short)flags;
    out->a = (unsigned int)a;
    out->b = (unsigned int)b;
    out->c = (unsigned int)c;
    out->d = d;
}

#define U32_MAX_ 0xFFFFFFFFull

/* A field a record's 32 bits cannot hold: 1, the message written. */
static inline int
too_wide(char *msg, size_t n, Py_ssize_t i, uint64_t a, uint64_t b, uint64_t c)
{
    if ((a | b | c) <= U32_MAX_)
        return 0;
    snprintf(msg, n, "record %zd: field above 32 bits", i);
    return 1;
}

PyObject *
fntrace_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode_records(data, n)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > PY_SSIZE_T_MAX / FNT_RECORD_SIZE / 2) {
        PyErr_SetString(PyExc_ValueError, "impossible record count");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *res = NULL;
    ent_t *stack = NULL;
    if (n == 0) {
        if (view.len)
            PyErr_Format(PyExc_ValueError, "%zd bytes of records where none were announced",
                         view.len);
        else
            res = PyBytes_FromStringAndSize(NULL, 0);
        PyBuffer_Release(&view);
        return res;
    }
    /* Every file record is at least 2 bytes and stands for at most 2 records: a count
     * the data cannot hold is refused before anything is allocated for it. */
    if (n > view.len) {
        PyErr_Format(PyExc_ValueError, "records end after 0 of %zd", n);
        PyBuffer_Release(&view);
        return NULL;
    }
    res = PyBytes_FromStringAndSize(NULL, n * FNT_RECORD_SIZE);
    stack = PyMem_Malloc(sizeof(ent_t) * (size_t)n);
    if (res == NULL || stack == NULL) {
        if (stack == NULL)
            PyErr_NoMemory();
        Py_CLEAR(res);
        goto done;
    }
    record_t *out = (record_t *)PyBytes_AS_STRING(res);
    ibuf in = {(const unsigned char *)view.buf, 0, view.len, NULL};
    char msg[120];
    msg[0] = 0;
    Py_ssize_t i = 0, sp = 0;
    /* C over buffers this call holds: a block of any size is decoded without the GIL,
     * so that another thread (the browser's screen, a reader's next step) runs meanwhile */
    PyThreadState *unlocked = n >= 4096 ? PyEval_SaveThread() : NULL;
    uint64_t prev = get_uv(&in);
    uint64_t depth = get_uv(&in);
    while (i < n && !in.err) {
        if (in.pos >= in.size) {
            snprintf(msg, sizeof msg, "records end after %zd of %zd", i, n);
            break;
        }
        unsigned tag = in.p[in.pos++];
        unsigned kind = tag & FNT_FILE_KIND_MASK;
        unsigned fl = (tag & FNT_FILE_PAY0) ? 1 : 0;
        if (tag & FNT_FILE_RESERVED) {
            snprintf(msg, sizeof msg, "record %zd: bad tag %#04x", i, tag);
            break;
        }
        uint64_t ts = prev + unzz(get_uv(&in));
        if (kind == FNT_FILE_LEAF) {
            if (i + 2 > n) {
                snprintf(msg, sizeof msg, "record %zd: a leaf call where one record is left", i);
                break;
            }
            uint64_t dur = get_uv(&in), a = get_uv(&in), b = depth, c = 0;
            if (tag & FNT_FILE_EXPLICIT)
                b = get_uv(&in);
            if (tag & FNT_FILE_OVERRUN)
                c = get_uv(&in);
            if (in.err || too_wide(msg, sizeof msg, i, a, b, c))
                break;
            put_rec(&out[i], ts, FNT_TRACE_GRAPH_ENT, fl, a, b, 0, 0);
            put_rec(&out[i + 1], ts + dur, FNT_TRACE_GRAPH_RET,
                    (tag & FNT_FILE_PAY1) ? 1 : 0, a, b, c, ts);
            i += 2;
            prev = ts + dur;
            depth = b;
            continue;
        }
        if (tag & FNT_FILE_PAY1) {
            snprintf(msg, sizeof msg, "record %zd: bad tag %#04x", i, tag);
            break;
        }
        if (kind == FNT_TRACE_GRAPH_ENT) {
            uint64_t a = get_uv(&in), b = depth;
            if (tag & FNT_FILE_EXPLICIT)
                b = get_uv(&in);
            if (in.err)
                break;
            if ((tag & FNT_FILE_OVERRUN) || a > U32_MAX_ || b > U32_MAX_) {
                snprintf(msg, sizeof msg, "record %zd: bad entry record", i);
                break;
            }
            put_rec(&out[i], ts, FNT_TRACE_GRAPH_ENT, fl, a, b, 0, 0);
            stack[sp].ip = (uint32_t)a;
            stack[sp].depth = (uint32_t)b;
            stack[sp].ts = ts;
            sp++;
            depth = b + 1;
        }
        else if (kind == FNT_TRACE_GRAPH_RET) {
            uint64_t a, b, c = 0, d;
            if (tag & FNT_FILE_EXPLICIT) {
                a = get_uv(&in);
                b = get_uv(&in);
                d = ts - unzz(get_uv(&in));
            }
            else if (sp > 0) {
                a = stack[sp - 1].ip;
                b = stack[sp - 1].depth;
                d = stack[sp - 1].ts;
            }
            else {
                snprintf(msg, sizeof msg, "record %zd: a return with no entry to close", i);
                break;
            }
            if (tag & FNT_FILE_OVERRUN)
                c = get_uv(&in);
            if (in.err || too_wide(msg, sizeof msg, i, a, b, c))
                break;
            put_rec(&out[i], ts, FNT_TRACE_GRAPH_RET, fl, a, b, c, d);
            while (sp > 0 && stack[sp - 1].depth >= b)
                sp--;
            depth = b;
        }
        else if (kind == FNT_TRACE_FN) {
            if (tag & (FNT_FILE_EXPLICIT | FNT_FILE_OVERRUN)) {
                snprintf(msg, sizeof msg, "record %zd: bad tag %#04x", i, tag);
                break;
            }
            uint64_t a = get_uv(&in), b = get_uv(&in);
            if (in.err || too_wide(msg, sizeof msg, i, a, b, 0))
                break;
            put_rec(&out[i], ts, FNT_TRACE_FN, fl, a, b, 0, 0);
        }
        else if (kind == FNT_FILE_RAW) {
            if (tag != FNT_FILE_RAW) {
                snprintf(msg, sizeof msg, "record %zd: bad tag %#04x", i, tag);
                break;
            }
            uint64_t ty = get_uv(&in), f = get_uv(&in), a = get_uv(&in), b = get_uv(&in);
            uint64_t c = get_uv(&in), d = get_uv(&in);
            if (in.err)
                break;
            if (ty > 0xFFFF || f > 0xFFFF || a > U32_MAX_ || b > U32_MAX_ || c > U32_MAX_) {
                snprintf(msg, sizeof msg, "record %zd: field out of range", i);
                break;
            }
            put_rec(&out[i], ts, (unsigned)ty, (unsigned)f, a, b, c, d);
        }
        else {                                  /* PRINT / STACK / EVENT */
            if (tag & (FNT_FILE_EXPLICIT | FNT_FILE_OVERRUN)) {
                snprintf(msg, sizeof msg, "record %zd: bad tag %#04x", i, tag);
                break;
            }
            uint64_t a = get_uv(&in);
            if (in.err || too_wide(msg, sizeof msg, i, a, 0, 0))
                break;
            put_rec(&out[i], ts, kind, fl, a, 0, 0, 0);
        }
        prev = ts;
        i++;
    }
    if (!msg[0] && in.err)
        snprintf(msg, sizeof msg, "%s", in.err);
    if (!msg[0] && in.pos != in.size)
        snprintf(msg, sizeof msg, "%zd stray bytes after the last record", in.size - in.pos);
    if (unlocked != NULL)
        PyEval_RestoreThread(unlocked);
    if (msg[0]) {
        PyErr_SetString(PyExc_ValueError, msg);
        Py_CLEAR(res);
    }
done:
    PyMem_Free(stack);
    PyBuffer_Release(&view);
    return res;
}

/* -- payloads ------------------------------------------------------------------------ */

/* pack_payloads(records, first_seq, payloads, step, dumps) -> list of bytes: the payload
 * part of TraceFileWriter.write_chunk (tracefile/writer.py's _py_payload_tails is the twin, byte
 * for byte, with the same errors in the same order): every key of the dict `payloads`
 * is checked against the chunk's records (inside the chunk, flagged TF_HAS_PAYLOAD),
 * then the payloads of each `step` records, ordered by index, are packed as
 * tracefile/writer.py's _pack_payloads packs them: one bytes per piece, b"" for a piece without.
 * str and int are packed here; anything else is dumps(obj) (JSON bytes).  None when a
 * key is not an int: the Python twin then decides what that means. */

#define PAY_STR 0
#define PAY_INT 1
#define PAY_JSON 2

typedef struct {
    Py_ssize_t i;
    PyObject *obj;          /* a reference */
} pay_t;

static int
pay_cmp(const void *x, const void *y)
{
    Py_ssize_t a = ((const pay_t *)x)->i, b = ((const pay_t *)y)->i;
    return (a > b) - (a < b);
}

static int
ob_bytes(obuf *o, const char *p, Py_ssize_t n)
{
    if (ob_reserve(o, n + 11) < 0)
        return -1;
    put_uv(o, (uint64_t)n);
    memcpy(o->p + o->n, p, (size_t)n);
    o->n += n;
    return 0;
}

/* one payload: kind byte, then the value; 0, or -1 with an exception set */
static int
pack_one(obuf *o, PyObject *obj, PyObject *dumps)
{
    if (ob_reserve(o, 11) < 0)
        return -1;
    if (PyUnicode_CheckExact(obj)) {
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(obj) < 0)
            return -1;
#endif
        o->p[o->n++] = PAY_STR;
        if (PyUnicode_IS_ASCII(obj))
            return ob_bytes(o, (const char *)PyUnicode_DATA(obj), PyUnicode_GET_LENGTH(obj));
        /* surrogatepass: file names decoded with surrogateescape must round-trip */
        PyObject *b = PyUnicode_AsEncodedString(obj, "utf-8", "surrogatepass");
        if (b == NULL)
            return -1;
        int rc = ob_bytes(o, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
        Py_DECREF(b);
        return rc;
    }
    if (PyLong_CheckExact(obj)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (!overflow) {
            o->p[o->n++] = PAY_INT;
            put_uv(o, zz((uint64_t)v));
            return 0;
        }
    }
    PyObject *b = PyObject_CallOneArg(dumps, obj);
    if (b == NULL)
        return -1;
    if (!PyBytes_Check(b)) {
        PyErr_Format(PyExc_TypeError, "dumps returned %.100s, not bytes", Py_TYPE(b)->tp_name);
        Py_DECREF(b);
        return -1;
    }
    o->p[o->n++] = PAY_JSON;
    int rc = ob_bytes(o, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
    Py_DECREF(b);
    return rc;
}

PyObject *
fntrace_pack_payloads(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !(PyDict_Check(args[2]) || PyList_CheckExact(args[2]))) {
        PyErr_SetString(PyExc_TypeError,
                        "pack_payloads(records, first_seq, payloads: dict | list, step, dumps)");
        return NULL;
    }
    long long first_seq = PyLong_AsLongLong(args[1]);
    if (first_seq == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t step = PyLong_AsSsize_t(args[3]);
    if (step == -1 && PyErr_Occurred())
        return NULL;
    if (step < 1) {
        PyErr_SetString(PyExc_ValueError, "step must be at least 1");
        return NULL;
    }
    PyObject *payloads = args[2], *dumps = args[4];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *res = NULL;
    pay_t *pays = NULL;
    obuf o = {NULL, 0, 0};
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    Py_ssize_t npieces = n ? (n + step - 1) / step : 1;
    int listed = PyList_CheckExact(payloads);
    Py_ssize_t m = listed ? PyList_GET_SIZE(payloads) : PyDict_GET_SIZE(payloads), k = 0, pos = 0;
    const record_t *r = (const record_t *)view.buf;
    if (m) {
        pays = PyMem_Malloc(sizeof(pay_t) * (size_t)m);
        if (pays == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    PyObject *key, *value;
    int sorted = 1;
    if (listed) {
        /* a native buffer's list: the payloads of the flagged records, in order
         * (ring_buffer.payloads_by_seq, the twin, says the same of a mismatch) */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!(r[i].flags & FNT_HAS_PAYLOAD))
                continue;
            if (k == m) {
                PyErr_Format(PyExc_ValueError,
                             "record %lld has the TF_HAS_PAYLOAD flag but the chunk's "
                             "%zd payloads are used up", first_seq + (long long)i, m);
                goto done;
            }
            pays[k].i = i;
            pays[k].obj = Py_NewRef(PyList_GET_ITEM(payloads, k));
            k++;
        }
        if (k < m) {
            PyErr_Format(PyExc_ValueError,
                         "%zd payloads for the chunk's %zd records with the TF_HAS_PAYLOAD flag",
                         m, k);
            goto done;
        }
    }
    while (!listed && k < m && PyDict_Next(payloads, &pos, &key, &value)) {
        if (!PyLong_Check(key)) {
            res = Py_NewRef(Py_None);
            goto done;
        }
        int overflow;
        long long seq = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (seq == -1 && PyErr_Occurred())
            goto done;
        /* i = seq - first_seq outside 0..n-1 (as unsigned: no overflow when seq >= first_seq) */
        if (overflow || seq < first_seq
                || (unsigned long long)seq - (unsigned long long)first_seq >= (unsigned long long)n) {
            PyErr_Format(PyExc_ValueError,
                         "payload for seq %S is outside the chunk (seqs %lld..%lld)",
                         key, first_seq, first_seq + (long long)n - 1);
            goto done;
        }
        Py_ssize_t i = (Py_ssize_t)(seq - first_seq);
        if (!(r[i].flags & FNT_HAS_PAYLOAD)) {
            PyErr_Format(PyExc_ValueError,
                         "payload for seq %S but the record has no TF_HAS_PAYLOAD flag", key);
            goto done;
        }
        if (k && pays[k - 1].i > i)
            sorted = 0;
        pays[k].i = i;
        pays[k].obj = Py_NewRef(value);  /* a dumps() that changes the dict frees nothing */
        k++;
    }
    if (!sorted)
        qsort(pays, (size_t)k, sizeof(pay_t), pay_cmp);
    res = PyList_New(npieces);
    if (res == NULL)
        goto done;
    Py_ssize_t j = 0;
    for (Py_ssize_t piece = 0; piece < npieces; piece++) {
        Py_ssize_t end = (piece + 1) * step, base = piece * step, prev = -1;
        o.n = 0;
        for (; j < k && pays[j].i < end; j++) {
            Py_ssize_t li = pays[j].i - base;
            if (ob_reserve(&o, 10) < 0)
                goto fail;
            put_uv(&o, (uint64_t)(li - prev - 1));
            prev = li;
            if (pack_one(&o, pays[j].obj, dumps) < 0)
                goto fail;
        }
        PyObject *b = PyBytes_FromStringAndSize((const char *)o.p, o.n);
        if (b == NULL)
            goto fail;
        PyList_SET_ITEM(res, piece, b);
    }
    /* (a list of bytes, in no cycle: the writer thread's, which the program's
     * gc.get_objects() must not count should the GIL go to it as this returns) */
    PyObject_GC_UnTrack(res);
    goto done;
fail:
    Py_CLEAR(res);
done:
    for (Py_ssize_t x = 0; x < k; x++)
        Py_DECREF(pays[x].obj);
    PyMem_Free(pays);
    PyMem_Free(o.p);
    PyBuffer_Release(&view);
    return res;
}

/* varints(*values) -> bytes: each value (0 <= v < 2**64) as LEB128, one after another
 * (tracefile/writer.py _varints, the pure twin: the heads of the file's blocks, a
 * thread's native id, the index's times).  ValueError for a value out of range, as the
 * twin's bytearray gives. */
PyObject *
fntrace_varints(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned char buf[10 * 16];
    buf[0] = 0;             /* (no value: an empty bytes, read from nothing) */
    unsigned char *out = nargs <= 16 ? buf : PyMem_Malloc((size_t)nargs * 10 + 1);
    if (out == NULL)
        return PyErr_NoMemory();
    unsigned char *p = out;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!PyLong_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "varints: an int is wanted, not %.100s",
                         Py_TYPE(args[i])->tp_name);
            goto fail;
        }
        int overflow = 0;
        long long s = PyLong_AsLongLongAndOverflow(args[i], &overflow);
        uint64_t v;
        if (overflow == 0 && s >= 0)
            v = (uint64_t)s;
        else if (overflow == 0 && s == -1 && PyErr_Occurred())
            goto fail;
        else {
            v = overflow > 0 ? PyLong_AsUnsignedLongLong(args[i]) : 0;
            if (overflow <= 0 || (v == (uint64_t)-1 && PyErr_Occurred())) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "varints: a value out of range(0, 2**64)");
                goto fail;
            }
        }
        while (v >= 0x80) {
            *p++ = (unsigned char)(v | 0x80);
            v >>= 7;
        }
        *p++ = (unsigned char)v;
    }
    PyObject *r = PyBytes_FromStringAndSize((const char *)out, p - out);
    if (out != buf)
        PyMem_Free(out);
    return r;
fail:
    if (out != buf)
        PyMem_Free(out);
    return NULL;
}
