/*
 * The few Arrow column kernels the Parquet table's native walk needs (output/parquet.py,
 * _native_batches), so that making its record batches loads no pyarrow.compute: that
 * module's kernels are 10 MB of a reader's memory and its calls a sixth of the export's
 * time, for four simple loops over int32 and string columns.
 *
 *     dict_encode_i32   pyarrow.compute.dictionary_encode of an int32 array without
 *                       nulls: the distinct values in the order they first come
 *     dict_encode_str   the same for a string array (validity, offsets, data); nulls
 *                       stay null (null_encoding="mask")
 *     gather_i32        pyarrow.compute.take of an int32 table whose negative values
 *                       are null; gather_i64: of an int64 table, no nulls
 *     bits_of_bytes     a bool column's bitmap from one byte per row (not_equal 0)
 *
 * Arrays go in and come out as their buffers (bytes): little-endian, LSB-first bitmaps,
 * as Arrow lays them out.  tests/test_sql_parquet.py compares the tables with the ones
 * pyarrow.compute makes.
 */

/* -- a table of distinct keys, each with its index in first-come order ------------- */

typedef struct {
    int32_t *slot;          /* index into the distinct keys, -1: empty */
    Py_ssize_t mask;
    Py_ssize_t n;           /* distinct keys so far */
} memo_t;

static int
memo_init(memo_t *m, Py_ssize_t hint)
{
    Py_ssize_t size = 64;
    while (size < 2 * hint)
        size <<= 1;
    m->slot = PyMem_Malloc(size * sizeof(int32_t));
    if (m->slot == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(m->slot, 0xff, size * sizeof(int32_t));
    m->mask = size - 1;
    m->n = 0;
    return 0;
}

static inline uint64_t
hash_bytes(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;         /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return mix(h ^ (uint64_t)n);
}

/* grow to twice the slots, rehashing the keys by their hashes (hashes[index]) */
static int
memo_grow(memo_t *m, const uint64_t *hashes)
{
    Py_ssize_t size = 2 * (m->mask + 1);
    int32_t *slot = PyMem_Malloc(size * sizeof(int32_t));
    if (slot == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(slot, 0xff, size * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < m->n; k++) {
        Py_ssize_t i = (Py_ssize_t)(hashes[k] & (uint64_t)(size - 1));
        while (slot[i] >= 0)
            i = (i + 1) & (size - 1);
        slot[i] = (int32_t)k;
    }
    PyMem_Free(m->slot);
    m->slot = slot;
    m->mask = size - 1;
    return 0;
}

static int
buffer_of(PyObject *o, Py_buffer *v, Py_ssize_t width, const char *what)
{
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0)
        return -1;
    if (v->len % width) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte "
                     "values", what, v->len, width);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* dict_encode_i32(values) -> (indices, dictionary) */
static PyObject *
dict_encode_i32(PyObject *self, PyObject *arg)
{
    Py_buffer v;
    if (buffer_of(arg, &v, 4, "dict_encode_i32") < 0)
        return NULL;
    Py_ssize_t n = v.len / 4;
    const int32_t *in = v.buf;
    PyObject *idx = PyBytes_FromStringAndSize(NULL, n * 4);
    int32_t *keys = NULL;
    uint64_t *hashes = NULL;
    PyObject *res = NULL;
    memo_t m = {NULL, 0, 0};
    Py_ssize_t cap = 64;
    if (idx == NULL || memo_init(&m, 64) < 0)
        goto done;
    keys = PyMem_Malloc(cap * sizeof(int32_t));
    hashes = PyMem_Malloc(cap * sizeof(uint64_t));
    if (keys == NULL || hashes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t *out = (int32_t *)PyBytes_AS_STRING(idx);
    for (Py_ssize_t r = 0; r < n; r++) {
        int32_t x = in[r];
        uint64_t h = mix((uint64_t)(uint32_t)x * 0x9e3779b97f4a7c15ULL);
        Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)m.mask);
        int32_t k;
        while ((k = m.slot[i]) >= 0 && keys[k] != x)
            i = (i + 1) & m.mask;
        if (k < 0) {
            if (m.n == cap) {
                cap *= 2;
                if (ARRAY_RESIZE(keys, cap) < 0 || ARRAY_RESIZE(hashes, cap) < 0)
                    goto done;
            }
            k = (int32_t)m.n++;
            keys[k] = x;
            hashes[k] = h;
            m.slot[i] = k;
            if (2 * m.n > m.mask && memo_grow(&m, hashes) < 0)
                goto done;
        }
        out[r] = k;
    }
    PyObject *dict = PyBytes_FromStringAndSize((const char *)keys, m.n * 4);
    if (dict != NULL)
        res = PyTuple_Pack(2, idx, dict);
    Py_XDECREF(dict);
done:
    PyMem_Free(m.slot);
    PyMem_Free(keys);
    PyMem_Free(hashes);
    Py_XDECREF(idx);
    PyBuffer_Release(&v);
    return res;
}

static inline int
bit_at(const uint8_t *bits, Py_ssize_t i)
{
    return (bits[i >> 3] >> (i & 7)) & 1;
}

/* dict_encode_str(n, validity, offsets, data) -> (indices, validity, dict_offsets,
 * dict_data): validity None (or b"") means no nulls, and comes back as it went in */
static PyObject *
dict_encode_str(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs_check(nargs, 4, "dict_encode_str(n, validity, offsets, data)") < 0)
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "dict_encode_str: n < 0");
        return NULL;
    }
    Py_buffer vb = {0}, ob = {0}, db = {0};
    int has_valid = args[1] != Py_None;
    PyObject *res = NULL, *idx = NULL;
    int32_t *starts = NULL, *lens = NULL;
    uint64_t *hashes = NULL;
    memo_t m = {NULL, 0, 0};
    if (has_valid && PyObject_GetBuffer(args[1], &vb, PyBUF_SIMPLE) < 0)
        return NULL;
    if (has_valid && vb.len == 0)
        has_valid = 0;
    if (buffer_of(args[2], &ob, 4, "dict_encode_str offsets") < 0)
        goto fail_vb;
    if (PyObject_GetBuffer(args[3], &db, PyBUF_SIMPLE) < 0)
        goto fail_ob;
    const uint8_t *valid = has_valid ? vb.buf : NULL;
    const int32_t *off = ob.buf;
    const uint8_t *data = db.buf;
    if (ob.len / 4 < n + 1 || (has_valid && vb.len * 8 < n)) {
        PyErr_SetString(PyExc_ValueError, "dict_encode_str: buffers shorter than n rows");
        goto done;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        if (off[r] < 0 || off[r + 1] < off[r] || off[r + 1] > db.len) {
            PyErr_SetString(PyExc_ValueError, "dict_encode_str: offsets out of the data");
            goto done;
        }
    }
    idx = PyBytes_FromStringAndSize(NULL, n * 4);
    Py_ssize_t cap = 64;
    starts = PyMem_Malloc(cap * sizeof(int32_t));
    lens = PyMem_Malloc(cap * sizeof(int32_t));
    hashes = PyMem_Malloc(cap * sizeof(uint64_t));
    if (idx == NULL || starts == NULL || lens == NULL || hashes == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    if (memo_init(&m, 64) < 0)
        goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(idx);
    Py_ssize_t total = 0;           /* the dictionary's bytes */
    for (Py_ssize_t r = 0; r < n; r++) {
        if (valid != NULL && !bit_at(valid, r)) {
            out[r] = 0;
            continue;
        }
        const uint8_t *s = data + off[r];
        int32_t len = off[r + 1] - off[r];
        uint64_t h = hash_bytes(s, len);
        Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)m.mask);
        int32_t k;
        while ((k = m.slot[i]) >= 0 && !(hashes[k] == h && lens[k] == len
                                         && memcmp(data + starts[k], s, len) == 0))
            i = (i + 1) & m.mask;
        if (k < 0) {
            if (m.n == cap) {
                cap *= 2;
                if (ARRAY_RESIZE(starts, cap) < 0 || ARRAY_RESIZE(lens, cap) < 0
                        || ARRAY_RESIZE(hashes, cap) < 0)
                    goto done;
            }
            k = (int32_t)m.n++;
            starts[k] = off[r];
            lens[k] = len;
            hashes[k] = h;
            total += len;
            m.slot[i] = k;
            if (2 * m.n > m.mask && memo_grow(&m, hashes) < 0)
                goto done;
        }
        out[r] = k;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "dict_encode_str: dictionary over 2 GB");
        goto done;
    }
    PyObject *doff = PyBytes_FromStringAndSize(NULL, (m.n + 1) * 4);
    PyObject *ddata = PyBytes_FromStringAndSize(NULL, total);
    if (doff != NULL && ddata != NULL) {
        int32_t *o = (int32_t *)PyBytes_AS_STRING(doff);
        char *d = PyBytes_AS_STRING(ddata);
        int32_t at = 0;
        for (Py_ssize_t k = 0; k < m.n; k++) {
            o[k] = at;
            memcpy(d + at, data + starts[k], lens[k]);
            at += lens[k];
        }
        o[m.n] = at;
        res = PyTuple_Pack(4, idx, has_valid ? args[1] : Py_None, doff, ddata);
    }
    Py_XDECREF(doff);
    Py_XDECREF(ddata);
done:
    PyMem_Free(m.slot);
    PyMem_Free(starts);
    PyMem_Free(lens);
    PyMem_Free(hashes);
    Py_XDECREF(idx);
    PyBuffer_Release(&db);
fail_ob:
    PyBuffer_Release(&ob);
fail_vb:
    if (vb.obj != NULL)
        PyBuffer_Release(&vb);
    return res;
}

/* the arguments of gather_i32 and gather_i64 (``name``): the table's buffer (values of
 * ``width`` bytes) and the int32 indices' */
static int
gather_args(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_buffer *tb,
            Py_ssize_t width, Py_buffer *ib)
{
    char what[32];
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s(table, indices)", name);
        return -1;
    }
    PyOS_snprintf(what, sizeof(what), "%s table", name);
    if (buffer_of(args[0], tb, width, what) < 0)
        return -1;
    PyOS_snprintf(what, sizeof(what), "%s indices", name);
    if (buffer_of(args[1], ib, 4, what) < 0) {
        PyBuffer_Release(tb);
        return -1;
    }
    return 0;
}

/* gather_i32(table, indices) -> (values, validity): table[i] for each index, null where
 * the table's value is negative (validity None when none is) */
static PyObject *
gather_i32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer tb, ib;
    if (gather_args("gather_i32", args, nargs, &tb, 4, &ib) < 0)
        return NULL;
    Py_ssize_t n = ib.len / 4, nt = tb.len / 4;
    const int32_t *t = tb.buf, *ix = ib.buf;
    PyObject *res = NULL, *valid = NULL;
    PyObject *vals = PyBytes_FromStringAndSize(NULL, n * 4);
    if (vals == NULL)
        goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(vals);
    Py_ssize_t nulls = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        int32_t i = ix[r];
        if (i < 0 || i >= nt) {
            PyErr_Format(PyExc_IndexError, "gather_i32: index %d out of a table of %zd",
                         (int)i, nt);
            goto done;
        }
        int32_t x = t[i];
        nulls += x < 0;
        out[r] = x < 0 ? 0 : x;
    }
    if (nulls) {
        valid = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (valid == NULL)
            goto done;
        uint8_t *b = (uint8_t *)PyBytes_AS_STRING(valid);
        memset(b, 0, (n + 7) / 8);
        for (Py_ssize_t r = 0; r < n; r++)
            if (t[ix[r]] >= 0)
                b[r >> 3] |= (uint8_t)(1 << (r & 7));
    }
    res = PyTuple_Pack(2, vals, valid != NULL ? valid : Py_None);
done:
    Py_XDECREF(vals);
    Py_XDECREF(valid);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&ib);
    return res;
}

/* gather_i64(table, indices) -> values: table[i] for each int32 index */
static PyObject *
gather_i64(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer tb, ib;
    if (gather_args("gather_i64", args, nargs, &tb, 8, &ib) < 0)
        return NULL;
    Py_ssize_t n = ib.len / 4, nt = tb.len / 8;
    const int64_t *t = tb.buf;
    const int32_t *ix = ib.buf;
    PyObject *vals = PyBytes_FromStringAndSize(NULL, n * 8);
    if (vals != NULL) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(vals);
        for (Py_ssize_t r = 0; r < n; r++) {
            int32_t i = ix[r];
            if (i < 0 || i >= nt) {
                PyErr_Format(PyExc_IndexError, "gather_i64: index %d out of a table of "
                             "%zd", (int)i, nt);
                Py_CLEAR(vals);
                break;
            }
            out[r] = t[i];
        }
    }
    PyBuffer_Release(&tb);
    PyBuffer_Release(&ib);
    return vals;
}

/* bits_of_bytes(data) -> bitmap: bit r set where data[r] is not 0 */
static PyObject *
bits_of_bytes(PyObject *self, PyObject *arg)
{
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t n = v.len;
    const uint8_t *in = v.buf;
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (bits != NULL) {
        uint8_t *b = (uint8_t *)PyBytes_AS_STRING(bits);
        memset(b, 0, (n + 7) / 8);
        for (Py_ssize_t r = 0; r < n; r++)
            if (in[r])
                b[r >> 3] |= (uint8_t)(1 << (r & 7));
    }
    PyBuffer_Release(&v);
    return bits;
}
