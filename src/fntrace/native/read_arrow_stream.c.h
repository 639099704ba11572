/*
 * arrow_stream: the Parquet table's batches handed to DuckDB as an Arrow C stream
 * (the Arrow C data interface's ArrowArrayStream in a PyCapsule, what
 * ``__arrow_c_stream__`` returns), made from the native walk's column buffers with no
 * pyarrow loaded: ``fntrace sql`` over a .dat then costs DuckDB's memory and a batch,
 * not pyarrow's 28 MB besides (cli/sql.py).
 *
 *     arrow_stream(names, kinds, next) -> capsule "arrow_array_stream"
 *
 *     kinds  one letter a column: l int64, i int32, b bool, d dictionary<int32, utf8>
 *     next() -> None at the end, or (n, columns), a column being
 *              l i b   (validity | None, values)          values: 8n / 4n bytes, n bits
 *              d       (validity | None, indices, dict_offsets, dict_data)
 *
 *     struct array (n rows) ── child per column ── buffers point into the batch's bytes
 *                                └─ d: dictionary ─ utf8 array (offsets, data)
 *
 * Every array of a batch holds the batch (its bytes stay alive) until the last of them
 * is released, on whatever thread the consumer releases it.  ``next`` runs with the
 * GIL taken on the consumer's thread; its exception becomes the stream's error
 * ("Type: message") and the query's.  Buffers are checked against n and every index
 * and offset against its dictionary before a batch is handed out.
 */

#include <errno.h>

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

#define AS_FLAG_NULLABLE 2

typedef struct {
    PyObject *next;
    Py_ssize_t ncols;
    char *kinds;
    char **names;
    char *error;
} as_stream_t;

/* -- the schema ----------------------------------------------------------------------- */

static void
as_schema_release(struct ArrowSchema *s)
{
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c->release != NULL)
            c->release(c);
        free(c);
    }
    free(s->children);
    if (s->dictionary != NULL) {
        if (s->dictionary->release != NULL)
            s->dictionary->release(s->dictionary);
        free(s->dictionary);
    }
    free((void *)s->name);
    s->release = NULL;
}

static const char *
as_format(char kind)
{
    switch (kind) {
    case 'l': return "l";
    case 'i': return "i";
    case 'b': return "b";
    default: return "i";        /* d: the indices; the dictionary is utf8 */
    }
}

static int
as_get_schema(struct ArrowArrayStream *stream, struct ArrowSchema *out)
{
    as_stream_t *st = stream->private_data;
    memset(out, 0, sizeof(*out));
    out->format = "+s";
    out->n_children = st->ncols;
    out->children = calloc(st->ncols ? st->ncols : 1, sizeof(struct ArrowSchema *));
    out->release = as_schema_release;
    if (out->children == NULL)
        goto nomem;
    for (Py_ssize_t i = 0; i < st->ncols; i++) {
        struct ArrowSchema *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            out->n_children = i;
            goto nomem;
        }
        out->children[i] = c;
        c->format = as_format(st->kinds[i]);
        c->name = strdup(st->names[i]);
        c->flags = AS_FLAG_NULLABLE;
        c->release = as_schema_release;
        if (c->name == NULL) {
            out->n_children = i + 1;
            goto nomem;
        }
        if (st->kinds[i] == 'd') {
            struct ArrowSchema *d = calloc(1, sizeof(*d));
            if (d == NULL) {
                out->n_children = i + 1;
                goto nomem;
            }
            d->format = "u";
            d->flags = AS_FLAG_NULLABLE;
            d->release = as_schema_release;
            c->dictionary = d;
        }
    }
    return 0;
nomem:
    as_schema_release(out);
    return ENOMEM;
}

/* -- a batch ------------------------------------------------------------------------ */

typedef struct {
    PyObject *batch;            /* the (n, columns) tuple: owns every buffer */
    Py_buffer *views;
    Py_ssize_t nviews;
    int refs;                   /* arrays of the batch not released yet */
    struct ArrowArray *nodes;   /* the struct array, a child per column, dictionaries */
    struct ArrowArray **child_ptrs;
    const void **bufs;
} as_batch_t;

static void
as_batch_free(as_batch_t *b)
{
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        for (Py_ssize_t i = 0; i < b->nviews; i++)
            PyBuffer_Release(&b->views[i]);
        Py_XDECREF(b->batch);
        PyGILState_Release(g);
    }
    free(b->views);
    free(b->nodes);
    free(b->child_ptrs);
    free(b->bufs);
    free(b);
}

static void
as_array_release(struct ArrowArray *a)
{
    as_batch_t *b = a->private_data;
    for (int64_t i = 0; i < a->n_children; i++)
        if (a->children[i]->release != NULL)
            a->children[i]->release(a->children[i]);
    if (a->dictionary != NULL && a->dictionary->release != NULL)
        a->dictionary->release(a->dictionary);
    a->release = NULL;
    if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0)
        as_batch_free(b);
}

static int64_t
as_nulls(const uint8_t *bits, Py_ssize_t n)
{
    if (bits == NULL)
        return 0;
    int64_t set = 0;
    Py_ssize_t whole = n / 8;
    for (Py_ssize_t i = 0; i < whole; i++)
        set += __builtin_popcount(bits[i]);
    for (Py_ssize_t r = whole * 8; r < n; r++)
        set += (bits[r >> 3] >> (r & 7)) & 1;
    return n - set;
}

/* the i-th view of the batch, at least `need` bytes (NULL with an error otherwise) */
static const void *
as_view(as_batch_t *b, PyObject *o, Py_ssize_t need, const char *what, Py_ssize_t col)
{
    Py_buffer *v = &b->views[b->nviews];
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0)
        return NULL;
    b->nviews++;
    if (v->len < need) {
        PyErr_Format(PyExc_ValueError, "arrow_stream: column %zd: %s of %zd bytes, %zd "
                     "wanted", col, what, v->len, need);
        return NULL;
    }
    /* a zero-length buffer still needs an address */
    return v->len ? v->buf : (const void *)"";
}

/* The batch's arrays, filled in from next()'s (n, columns); -1 with an exception. */
static int
as_fill(as_stream_t *st, PyObject *item, struct ArrowArray *out)
{
    Py_ssize_t ncols = st->ncols;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2
            || !PyTuple_Check(PyTuple_GET_ITEM(item, 1))
            || PyTuple_GET_SIZE(PyTuple_GET_ITEM(item, 1)) != ncols) {
        PyErr_Format(PyExc_TypeError, "arrow_stream: next() must give (n, a tuple of %zd "
                     "columns) or None", ncols);
        return -1;
    }
    Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
    if (n < 0 || n > INT32_MAX) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "arrow_stream: bad row count");
        return -1;
    }
    PyObject *cols = PyTuple_GET_ITEM(item, 1);
    as_batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* nodes: [0] the struct array, [1..ncols] the columns, then a dictionary each */
    b->nodes = calloc(1 + 2 * ncols, sizeof(struct ArrowArray));
    b->child_ptrs = calloc(ncols ? ncols : 1, sizeof(struct ArrowArray *));
    b->bufs = calloc(1 + 3 * (2 * ncols), sizeof(void *));
    b->views = calloc(4 * ncols + 1, sizeof(Py_buffer));
    if (b->nodes == NULL || b->child_ptrs == NULL || b->bufs == NULL || b->views == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    const void **bufs = b->bufs;
    struct ArrowArray *top = &b->nodes[0];
    top->length = n;
    top->n_buffers = 1;
    top->buffers = bufs;
    bufs[0] = NULL;
    bufs += 1;
    top->n_children = ncols;
    top->children = b->child_ptrs;
    Py_ssize_t nd = 0;          /* dictionaries used */
    Py_ssize_t bits = (n + 7) / 8;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *col = PyTuple_GET_ITEM(cols, i);
        char kind = st->kinds[i];
        Py_ssize_t want = kind == 'd' ? 4 : 2;
        if (!PyTuple_Check(col) || PyTuple_GET_SIZE(col) != want) {
            PyErr_Format(PyExc_TypeError, "arrow_stream: column %zd: a tuple of %zd "
                         "buffers wanted", i, want);
            goto fail;
        }
        struct ArrowArray *a = &b->nodes[1 + i];
        b->child_ptrs[i] = a;
        a->length = n;
        a->n_buffers = 2;
        a->buffers = bufs;
        bufs += 2;
        const uint8_t *valid = NULL;
        if (PyTuple_GET_ITEM(col, 0) != Py_None) {
            valid = as_view(b, PyTuple_GET_ITEM(col, 0), bits, "validity", i);
            if (valid == NULL)
                goto fail;
        }
        a->buffers[0] = valid;
        a->null_count = as_nulls(valid, n);
        Py_ssize_t width = kind == 'l' ? 8 : kind == 'b' ? 0 : 4;
        const void *data = as_view(b, PyTuple_GET_ITEM(col, 1), width ? width * n : bits,
                                   "values", i);
        if (data == NULL)
            goto fail;
        a->buffers[1] = data;
        if (kind != 'd')
            continue;
        Py_buffer *ov = &b->views[b->nviews];
        const int32_t *off = as_view(b, PyTuple_GET_ITEM(col, 2), 4, "dictionary offsets", i);
        if (off == NULL)
            goto fail;
        Py_ssize_t dlen = ov->len / 4 - 1;
        Py_buffer *dv = &b->views[b->nviews];
        const void *ddata = as_view(b, PyTuple_GET_ITEM(col, 3), 0, "dictionary data", i);
        if (ddata == NULL)
            goto fail;
        if (off[0] != 0)
            goto bad_dict;
        for (Py_ssize_t k = 0; k < dlen; k++)
            if (off[k + 1] < off[k])
                goto bad_dict;
        if (off[dlen] > dv->len)
            goto bad_dict;
        const int32_t *idx = data;
        for (Py_ssize_t r = 0; r < n; r++)
            if ((valid == NULL || ((valid[r >> 3] >> (r & 7)) & 1))
                    && (idx[r] < 0 || idx[r] >= dlen)) {
                PyErr_Format(PyExc_ValueError, "arrow_stream: column %zd: row %zd's index "
                             "%d is outside its dictionary of %zd", i, r, (int)idx[r], dlen);
                goto fail;
            }
        struct ArrowArray *d = &b->nodes[1 + ncols + nd++];
        d->length = dlen;
        d->n_buffers = 3;
        d->buffers = bufs;
        bufs += 3;
        d->buffers[0] = NULL;
        d->buffers[1] = off;
        d->buffers[2] = ddata;
        a->dictionary = d;
        continue;
bad_dict:
        PyErr_Format(PyExc_ValueError, "arrow_stream: column %zd: dictionary offsets out "
                     "of order or past its data", i);
        goto fail;
    }
    Py_INCREF(item);
    b->batch = item;
    b->refs = (int)(1 + ncols + nd);
    for (Py_ssize_t k = 0; k < 1 + ncols + nd; k++) {
        b->nodes[k].release = as_array_release;
        b->nodes[k].private_data = b;
    }
    *out = *top;
    /* the struct array is moved to *out: its node stays as the block's, released */
    top->release = NULL;
    return 0;
fail:
    for (Py_ssize_t k = 0; k < b->nviews; k++)
        PyBuffer_Release(&b->views[k]);
    free(b->views);
    free(b->nodes);
    free(b->child_ptrs);
    free(b->bufs);
    free(b);
    return -1;
}

static PyObject *
as_take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

static void
as_set_error(as_stream_t *st)
{
    PyObject *exc = as_take_exception();
    free(st->error);
    st->error = NULL;
    PyObject *msg = exc != NULL ? PyObject_Str(exc) : NULL;
    const char *text = msg != NULL ? PyUnicode_AsUTF8(msg) : NULL;
    const char *type = exc != NULL ? Py_TYPE(exc)->tp_name : "error";
    const char *dot = strrchr(type, '.');
    type = dot != NULL ? dot + 1 : type;
    if (text == NULL)
        text = "(no message)";
    size_t len = strlen(type) + strlen(text) + 3;
    st->error = malloc(len);
    if (st->error != NULL)
        snprintf(st->error, len, "%s: %s", type, text);
    PyErr_Clear();
    Py_XDECREF(msg);
    Py_XDECREF(exc);
}

static int
as_get_next(struct ArrowArrayStream *stream, struct ArrowArray *out)
{
    as_stream_t *st = stream->private_data;
    memset(out, 0, sizeof(*out));
    if (!Py_IsInitialized())
        return EIO;
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = 0;
    PyObject *item = PyObject_CallNoArgs(st->next);
    if (item == NULL) {
        as_set_error(st);
        rc = EIO;
    }
    else if (item == Py_None) {
        out->release = NULL;            /* the end */
    }
    else if (as_fill(st, item, out) < 0) {
        as_set_error(st);
        rc = EIO;
    }
    Py_XDECREF(item);
    PyGILState_Release(g);
    return rc;
}

static const char *
as_get_last_error(struct ArrowArrayStream *stream)
{
    as_stream_t *st = stream->private_data;
    return st->error;
}

static void
as_stream_release(struct ArrowArrayStream *stream)
{
    as_stream_t *st = stream->private_data;
    if (st != NULL) {
        if (Py_IsInitialized()) {
            PyGILState_STATE g = PyGILState_Ensure();
            Py_XDECREF(st->next);
            PyGILState_Release(g);
        }
        for (Py_ssize_t i = 0; i < st->ncols; i++)
            free(st->names[i]);
        free(st->names);
        free(st->kinds);
        free(st->error);
        free(st);
    }
    stream->release = NULL;
}

static void
as_capsule_free(PyObject *capsule)
{
    struct ArrowArrayStream *s = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (s == NULL) {
        PyErr_Clear();
        return;
    }
    if (s->release != NULL)
        s->release(s);
    free(s);
}

/* arrow_stream(names, kinds, next) -> capsule */
static PyObject *
arrow_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[0]) || !PyUnicode_Check(args[1])
            || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "arrow_stream(names: tuple, kinds: str, next)");
        return NULL;
    }
    Py_ssize_t ncols = PyTuple_GET_SIZE(args[0]), klen;
    const char *kinds = PyUnicode_AsUTF8AndSize(args[1], &klen);
    if (kinds == NULL)
        return NULL;
    if (klen != ncols || strspn(kinds, "libd") != (size_t)klen) {
        PyErr_SetString(PyExc_ValueError, "arrow_stream: one kind (l, i, b, d) a name");
        return NULL;
    }
    as_stream_t *st = calloc(1, sizeof(*st));
    struct ArrowArrayStream *s = calloc(1, sizeof(*s));
    if (st == NULL || s == NULL)
        goto nomem;
    st->kinds = strdup(kinds);
    st->names = calloc(ncols ? ncols : 1, sizeof(char *));
    if (st->kinds == NULL || st->names == NULL)
        goto nomem;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *o = PyTuple_GET_ITEM(args[0], i);
        const char *name = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
        if (name == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "arrow_stream: names must be str");
            goto fail;
        }
        st->names[i] = strdup(name);
        st->ncols = i + 1;
        if (st->names[i] == NULL)
            goto nomem;
    }
    st->ncols = ncols;
    Py_INCREF(args[2]);
    st->next = args[2];
    s->get_schema = as_get_schema;
    s->get_next = as_get_next;
    s->get_last_error = as_get_last_error;
    s->release = as_stream_release;
    s->private_data = st;
    PyObject *cap = PyCapsule_New(s, "arrow_array_stream", as_capsule_free);
    if (cap == NULL) {
        as_stream_release(s);
        free(s);
    }
    return cap;
nomem:
    PyErr_NoMemory();
fail:
    if (st != NULL) {
        for (Py_ssize_t i = 0; i < st->ncols; i++)
            free(st->names[i]);
        free(st->names);
        free(st->kinds);
        free(st);
    }
    free(s);
    return NULL;
}
