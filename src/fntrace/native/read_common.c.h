/* What every reader of the reading path shares: the Python-facing type's making and
 * end, the arguments its init takes the same way, and the arrays it grows. */

/* thread slots a walk takes at the most (its tables are per slot) */
#define SLOT_LIMIT (1 << 20)

static inline uint64_t
mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* -- the type ------------------------------------------------------------------------
 *
 * A reader PRE is a heap type made from PRE_spec by fntrace_add_read_types, under the
 * name given here; PRE_init, PRE_dealloc and PRE_methods are its own, and its dealloc
 * ends in read_free. */

#define READ_SLOTS(pre, doc)                                                            \
    {Py_tp_doc, doc}, {Py_tp_init, pre##_init}, {Py_tp_new, PyType_GenericNew},          \
    {Py_tp_dealloc, pre##_dealloc}, {Py_tp_methods, pre##_methods}

#define READ_SPEC(pre, Type)                                                            \
    static PyType_Spec pre##_spec = {                                                   \
        "fntrace._native." #Type, sizeof(Type), 0, Py_TPFLAGS_DEFAULT, pre##_slots,      \
    }

#define READ_TYPE(pre, Type, doc)                                                       \
    static PyType_Slot pre##_slots[] = {READ_SLOTS(pre, doc), {0, NULL}};               \
    READ_SPEC(pre, Type)

/* the same with attributes: PRE_getset */
#define READ_TYPE_GETSET(pre, Type, doc)                                                \
    static PyType_Slot pre##_slots[] = {                                                \
        READ_SLOTS(pre, doc), {Py_tp_getset, pre##_getset}, {0, NULL}};                 \
    READ_SPEC(pre, Type)

/* the end of a dealloc, the reader's own parts freed: the object, then the reference
 * it holds to its heap type */
static inline void
read_free(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* -- arguments ------------------------------------------------------------------------ */

/* a METH_FASTCALL function's argument count: 0 when it is ``n``, else -1 with a
 * TypeError that gives ``usage`` */
static inline int
nargs_check(Py_ssize_t nargs, Py_ssize_t n, const char *usage)
{
    if (nargs == n)
        return 0;
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
}

/* canon (a dict id -> id, or None), kept in ``*keep`` when it maps any id: the ids
 * that share a name with another, mapped to one of them */
static int
canon_arg(PyObject *canon, PyObject **keep, const char *type)
{
    if (canon == Py_None)
        return 0;
    if (!PyDict_Check(canon)) {
        PyErr_Format(PyExc_TypeError, "%s: canon is a dict or None", type);
        return -1;
    }
    if (PyDict_GET_SIZE(canon))
        *keep = Py_NewRef(canon);
    return 0;
}

/* a callback (a callable, or None: ``*keep`` stays NULL) */
static int
callable_arg(PyObject *fn, PyObject **keep, const char *type, const char *what)
{
    if (fn == Py_None)
        return 0;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "%s: %s is callable or None", type, what);
        return -1;
    }
    *keep = Py_NewRef(fn);
    return 0;
}

/* The next item of a dict slot -> value (a slot's text, its track): 1 and ``*slot``,
 * ``*v``; 0 at the end; -1 with an exception.  Keys that are no slot of ``nslots``
 * are passed over. */
static int
slot_item(PyObject *dict, Py_ssize_t nslots, Py_ssize_t *pos, Py_ssize_t *slot,
          PyObject **v)
{
    PyObject *k;
    while (PyDict_Next(dict, pos, &k, v)) {
        *slot = PyLong_AsSsize_t(k);
        if (*slot == -1 && PyErr_Occurred())
            return -1;
        if (*slot >= 0 && *slot < nslots)
            return 1;
    }
    return 0;
}

/* The bytes of ``b`` (a new reference, or NULL with an exception), kept alive by the
 * list ``keep`` as long as the reader: NULL with an exception */
static const char *
kept_bytes(PyObject *keep, PyObject *b, Py_ssize_t *len)
{
    if (b == NULL || PyList_Append(keep, b) < 0) {
        Py_XDECREF(b);
        return NULL;
    }
    Py_DECREF(b);
    *len = PyBytes_GET_SIZE(b);
    return PyBytes_AS_STRING(b);
}

/* -- arrays ----------------------------------------------------------------------------
 *
 * An array of a reader is a pointer, its items' count and its capacity.  The helpers
 * take the pointer's address (any T **: copied through memcpy, not read as a void *)
 * and the item's size; the macros give both from the array. */

/* the array at ``*arrp`` made ``cap`` items of ``size`` bytes long: 0, or -1 with
 * MemoryError (the array as it was) */
static int
array_resize(void *arrp, Py_ssize_t cap, size_t size)
{
    void *p;
    memcpy(&p, arrp, sizeof(p));
    p = PyMem_Realloc(p, (size_t)cap * size);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(arrp, &p, sizeof(p));
    return 0;
}

#define ARRAY_RESIZE(arr, cap) array_resize(&(arr), (cap), sizeof(*(arr)))

/* the capacity that holds ``need`` items: ``cap`` (``first`` the first time) doubled
 * as often as it takes, so that growing item by item costs a copy an item at most */
static inline Py_ssize_t
cap_for(Py_ssize_t need, Py_ssize_t cap, Py_ssize_t first)
{
    if (cap == 0)
        cap = first;
    while (cap < need)
        cap *= 2;
    return cap;
}

/* room for item ``n`` of the array (``*cap`` items) */
static inline int
array_room(void *arrp, Py_ssize_t n, Py_ssize_t *cap, size_t size, Py_ssize_t first)
{
    if (n < *cap)
        return 0;
    Py_ssize_t more = cap_for(n + 1, *cap, first);
    if (array_resize(arrp, more, size) < 0)
        return -1;
    *cap = more;
    return 0;
}

#define ARRAY_ROOM(arr, n, cap, first) array_room(&(arr), (n), &(cap), sizeof(*(arr)), (first))
