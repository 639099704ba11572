/*
 * The text of a traced value (core/fetch.py value_repr), made natively for the values
 * -A/-R meet most: None, bools, ints, floats, complex numbers, str, bytes, bytearray,
 * ranges and the exact built-in containers (tuple, list, dict, set, frozenset) of
 * those.  Part of fntrace._native.
 *
 * No Python code runs here, the program's or fntrace's: only exact types are read, by
 * their C layout or their type's C slot (a subclass of int or list is the program's
 * type and goes the Python way, which shows it by its base's value).  The text goes into
 * a fixed character buffer, not into intermediate str objects: the whole text is cut at
 * MAX_REPR characters, so the walk stops as soon as the buffer holds more than that.
 *
 * The Python twin is the reference: for every value handled here the text is the same
 * character for character (tests/test_args_cost.py compares them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* core/fetch.py's limits */
#define MAX_REPR 64
#define MAX_STRING 40
#define MAX_ITEMS 6
#define MAX_LEVEL 3
#define MAX_INT_BITS 256

/* Characters kept: one more than MAX_REPR says the text is longer than that. */
#define KEEP (MAX_REPR + 1)

/* KEEP characters at c: the caller's (fntrace_value_text_buf writes into the payload's
 * own buffer, no copy) or store */
typedef struct {
    Py_UCS4 *c;
    int n;
    Py_UCS4 store[KEEP];
} vbuf;

static inline int
full(vbuf *w)
{
    return w->n >= KEEP;
}

static inline void
put(vbuf *w, Py_UCS4 ch)
{
    if (w->n < KEEP)
        w->c[w->n++] = ch;
}

static void
puts_ascii(vbuf *w, const char *s)
{
    while (*s && w->n < KEEP)
        w->c[w->n++] = (unsigned char)*s++;
}

static void
puts_ascii_n(vbuf *w, const char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n && w->n < KEEP; i++)
        w->c[w->n++] = (unsigned char)s[i];
}

/* the characters [start, end) of a str object (a loop for each kind: names, the
 * common case, are one byte a character) */
static void
put_str_range(vbuf *w, PyObject *s, Py_ssize_t start, Py_ssize_t end)
{
    if (end - start > KEEP - w->n)
        end = start + (KEEP - w->n);
    if (end <= start)
        return;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_UCS4 *out = w->c + w->n;
    w->n += (int)(end - start);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        for (Py_ssize_t i = start; i < end; i++)
            *out++ = p[i];
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *p = (const Py_UCS2 *)data;
        for (Py_ssize_t i = start; i < end; i++)
            *out++ = p[i];
    }
    else
        memcpy(out, (const Py_UCS4 *)data + start, (size_t)(end - start) * sizeof(Py_UCS4));
}

/* _cut(s, MAX_STRING) of an ASCII text */
static void
put_cut_ascii(vbuf *w, const char *s, Py_ssize_t n)
{
    if (n <= MAX_STRING) {
        puts_ascii_n(w, s, n);
        return;
    }
    Py_ssize_t head = (MAX_STRING - 3) / 2;
    puts_ascii_n(w, s, head);
    puts_ascii(w, "...");
    Py_ssize_t tail = MAX_STRING - 3 - head;
    puts_ascii_n(w, s + n - tail, tail);
}

static const char hexdigits[] = "0123456789abcdef";

/* one character of a str's repr (unicode_repr's rules), `quote` the repr's */
static void
put_repr_char(vbuf *w, Py_UCS4 ch, Py_UCS4 quote)
{
    if (ch == quote || ch == '\\') {
        put(w, '\\');
        put(w, ch);
    }
    else if (ch == '\t') {
        put(w, '\\');
        put(w, 't');
    }
    else if (ch == '\n') {
        put(w, '\\');
        put(w, 'n');
    }
    else if (ch == '\r') {
        put(w, '\\');
        put(w, 'r');
    }
    else if (ch < ' ' || ch == 0x7f) {
        put(w, '\\');
        put(w, 'x');
        put(w, hexdigits[(ch >> 4) & 0xf]);
        put(w, hexdigits[ch & 0xf]);
    }
    else if (ch < 0x7f)
        put(w, ch);
    else if (Py_UNICODE_ISPRINTABLE(ch))
        put(w, ch);
    else if (ch <= 0xff) {
        put(w, '\\');
        put(w, 'x');
        put(w, hexdigits[(ch >> 4) & 0xf]);
        put(w, hexdigits[ch & 0xf]);
    }
    else if (ch <= 0xffff) {
        put(w, '\\');
        put(w, 'u');
        for (int sh = 12; sh >= 0; sh -= 4)
            put(w, hexdigits[(ch >> sh) & 0xf]);
    }
    else {
        put(w, '\\');
        put(w, 'U');
        for (int sh = 28; sh >= 0; sh -= 4)
            put(w, hexdigits[(ch >> sh) & 0xf]);
    }
}

/* str.__repr__ of s[start:end] (unicode_repr's rules), without its first character
 * (the opening quote) if skip_open, without its last (the closing quote) if
 * skip_close.  A str of one byte a character (most) has its own loop: the quotes
 * found by memchr, a printable ASCII character put as it is. */
static void
put_str_repr(vbuf *w, PyObject *s, Py_ssize_t start, Py_ssize_t end, int skip_open,
             int skip_close)
{
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    int sq = 0, dq = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data + start;
        sq = end > start && memchr(p, '\'', (size_t)(end - start)) != NULL;
        dq = end > start && memchr(p, '"', (size_t)(end - start)) != NULL;
    }
    else
        for (Py_ssize_t i = start; i < end; i++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, i);
            if (ch == '\'')
                sq = 1;
            else if (ch == '"')
                dq = 1;
        }
    Py_UCS4 quote = (sq && !dq) ? '"' : '\'';
    if (!skip_open)
        put(w, quote);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        for (Py_ssize_t i = start; i < end && !full(w); i++) {
            Py_UCS1 ch = p[i];
            if (ch >= ' ' && ch < 0x7f && ch != quote && ch != '\\')
                w->c[w->n++] = ch;
            else
                put_repr_char(w, ch, quote);
        }
    }
    else
        for (Py_ssize_t i = start; i < end && !full(w); i++)
            put_repr_char(w, PyUnicode_READ(kind, data, i), quote);
    if (!skip_close)
        put(w, quote);
}

/* core/fetch.py _str_text */
static void
put_str(vbuf *w, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n <= MAX_STRING) {
        put_str_repr(w, s, 0, n, 0, 0);
        return;
    }
    Py_ssize_t head = (MAX_STRING - 3) / 2;
    put_str_repr(w, s, 0, head, 0, 1);
    puts_ascii(w, "...");
    put_str_repr(w, s, n - head, n, 1, 0);
}

/* the characters [skip, len - drop) of the text of an (exact, C-level) repr slot */
static int
put_slot_repr(vbuf *w, PyObject *v, reprfunc f, Py_ssize_t skip, Py_ssize_t drop)
{
    PyObject *r = f(v);
    if (r == NULL)
        return -1;
    if (!PyUnicode_Check(r)) {
        Py_DECREF(r);
        return 0;
    }
    put_str_range(w, r, skip, PyUnicode_GET_LENGTH(r) - drop);
    Py_DECREF(r);
    return 1;
}

/* core/fetch.py _bytes_text, for exact bytes and bytearray */
static int
put_bytes(vbuf *w, PyObject *v)
{
    int is_bytes = PyBytes_CheckExact(v);
    reprfunc f = Py_TYPE(v)->tp_repr;
    Py_ssize_t n = is_bytes ? PyBytes_GET_SIZE(v) : PyByteArray_GET_SIZE(v);
    if (n <= MAX_STRING)
        return put_slot_repr(w, v, f, 0, 0);
    const char *data = is_bytes ? PyBytes_AS_STRING(v) : PyByteArray_AS_STRING(v);
    Py_ssize_t head = (MAX_STRING - 3) / 2;
    PyObject *h = is_bytes ? PyBytes_FromStringAndSize(data, head)
                           : PyByteArray_FromStringAndSize(data, head);
    if (h == NULL)
        return -1;
    int rc = put_slot_repr(w, h, f, 0, 1);
    Py_DECREF(h);
    if (rc <= 0)
        return rc;
    puts_ascii(w, "...");
    PyObject *t = is_bytes ? PyBytes_FromStringAndSize(data + n - head, head)
                           : PyByteArray_FromStringAndSize(data + n - head, head);
    if (t == NULL)
        return -1;
    rc = put_slot_repr(w, t, f, is_bytes ? 2 : 11, 0);
    Py_DECREF(t);
    return rc;
}

/* core/fetch.py _int_text, for an exact int */
static int
put_int(vbuf *w, PyObject *v)
{
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow) {
        if (x == -1 && PyErr_Occurred())
            return -1;
        char tmp[24];
        int k = 0;
        unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        do {
            tmp[k++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (x < 0)
            put(w, '-');
        while (k)
            put(w, (Py_UCS4)tmp[--k]);
        return 1;
    }
    int64_t bits = (int64_t)_PyLong_NumBits(v);
    if (bits < 0)
        return -1;
    if (bits > MAX_INT_BITS) {
        char tmp[64];
        PyOS_snprintf(tmp, sizeof(tmp), "<int of %lld bits>", (long long)bits);
        puts_ascii(w, tmp);
        return 1;
    }
    PyObject *r = PyLong_Type.tp_repr(v);
    if (r == NULL)
        return -1;
    const char *s = PyUnicode_AsUTF8AndSize(r, NULL);
    if (s == NULL) {
        Py_DECREF(r);
        return -1;
    }
    put_cut_ascii(w, s, PyUnicode_GET_LENGTH(r));
    Py_DECREF(r);
    return 1;
}

/* repr(x) without the general shortest-digits search (dtoa: ~1,900 instructions a
 * float) for the floats programs pass most, those with at most 6 decimals: the fewest
 * decimals k whose rounded n = x * 10**k gives x back.  That n / 10**k (both exact
 * doubles, so the division is correctly rounded, as strtod of the text is) equals x
 * exactly when the text "n e-k" reads back as x; the first k that does is repr's
 * shortest form, and 1e-4 <= |x| < 1e15 is where repr writes it without an exponent.
 * 0 when x is not such a float (the caller takes the general path). */
static int
short_float_text(double x, char *out)
{
    static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6};
    static const unsigned long long u10[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
    int neg = signbit(x) != 0;
    double ax = neg ? -x : x;
    int len = 0;
    if (ax == 0.0) {
        memcpy(out, neg ? "-0.0" : "0.0", neg ? 5 : 4);
        return neg ? 4 : 3;
    }
    if (!(ax >= 1e-4 && ax < 1e15))
        return 0;
    for (int k = 0; k < 7; k++) {
        double y = ax * p10[k];
        if (y >= 4503599627370496.0)       /* 2**52: n and y's rounding stay exact */
            return 0;
        unsigned long long n = (unsigned long long)(y + 0.5);
        if ((double)n / p10[k] != ax)
            continue;
        char tmp[32];
        int t = 0;
        unsigned long long ip = n / u10[k], fp = n % u10[k];
        if (neg)
            out[len++] = '-';
        do {
            tmp[t++] = (char)('0' + ip % 10);
            ip /= 10;
        } while (ip);
        while (t)
            out[len++] = tmp[--t];
        out[len++] = '.';
        if (k == 0)
            out[len++] = '0';
        for (int d = k - 1; d >= 0; d--) {
            out[len + d] = (char)('0' + fp % 10);
            fp /= 10;
        }
        len += k;
        out[len] = '\0';
        return len;
    }
    return 0;
}

static int
put_float(vbuf *w, PyObject *v)
{
    char fast[48];
    if (short_float_text(PyFloat_AS_DOUBLE(v), fast)) {
        puts_ascii(w, fast);
        return 1;
    }
    /* float_repr: repr's shortest round-trip form */
    char *s = PyOS_double_to_string(PyFloat_AS_DOUBLE(v), 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL)
        return -1;
    puts_ascii(w, s);
    PyMem_Free(s);
    return 1;
}

static int put_value(vbuf *w, PyObject *v, int level);

/* core/fetch.py _repr of an exception: BaseException.__repr__'s form, "Name(arg, ...)",
 * the arguments shown the same safe way, no method of the exception called (its type's
 * __qualname__ and BaseException's own args slot are read).  A RecursionError leaving a
 * call at the recursion limit is shown from here, where no Python frame can be pushed. */
static int
put_exception(vbuf *w, PyObject *v, int level)
{
    PyTypeObject *t = Py_TYPE(v);
    PyObject *qn;
    if (t->tp_flags & Py_TPFLAGS_HEAPTYPE)
        qn = Py_NewRef(((PyHeapTypeObject *)t)->ht_qualname);
    else {
        const char *dot = strrchr(t->tp_name, '.');
        qn = PyUnicode_FromString(dot ? dot + 1 : t->tp_name);
    }
    if (qn == NULL)
        return -1;
    if (!PyUnicode_Check(qn) || !PyUnicode_IS_ASCII(qn)) {
        Py_DECREF(qn);             /* a name puts_ascii cannot write: the Python twin */
        return 0;
    }
    PyObject *args = ((PyBaseExceptionObject *)v)->args;
    if (args != NULL && !PyTuple_CheckExact(args)) {
        Py_DECREF(qn);
        return 0;
    }
    Py_XINCREF(args);
    const char *name = PyUnicode_AsUTF8(qn);
    int rc = 1;
    if (name == NULL)
        rc = -1;
    else {
        puts_ascii(w, name);
        if (level >= MAX_LEVEL)
            puts_ascii(w, "(...)");
        else {
            put(w, '(');
            Py_ssize_t n = args ? PyTuple_GET_SIZE(args) : 0;
            for (Py_ssize_t i = 0; i < n && rc == 1; i++) {
                if (i)
                    puts_ascii(w, ", ");
                rc = put_value(w, PyTuple_GET_ITEM(args, i), level + 1);
            }
            put(w, ')');
        }
    }
    Py_XDECREF(args);
    Py_DECREF(qn);
    return rc;
}

/* core/fetch.py _seq_text over n items of an array */
static int
put_items(vbuf *w, PyObject *const *items, Py_ssize_t n, const char *open, const char *close,
          int level, int single)
{
    puts_ascii(w, open);
    if (level >= MAX_LEVEL) {
        puts_ascii(w, "...");
        puts_ascii(w, close);
        return 1;
    }
    for (Py_ssize_t i = 0; i < n && !full(w); i++) {
        if (i)
            puts_ascii(w, ", ");
        if (i >= MAX_ITEMS) {
            puts_ascii(w, "...");
            break;
        }
        int rc = put_value(w, items[i], level + 1);
        if (rc <= 0)
            return rc;
    }
    if (single && n == 1)
        put(w, ',');
    puts_ascii(w, close);
    return 1;
}

static int
put_set(vbuf *w, PyObject *v, int level)
{
    int frozen = PyFrozenSet_CheckExact(v);
    if (PySet_GET_SIZE(v) == 0) {
        puts_ascii(w, frozen ? "frozenset()" : "set()");
        return 1;
    }
    if (frozen)
        puts_ascii(w, "frozenset(");
    put(w, '{');
    if (level >= MAX_LEVEL)
        puts_ascii(w, "...");
    else {
        /* the set's own iterator: C code, no hashing or comparison of the items */
        PyObject *it = PyObject_GetIter(v);
        if (it == NULL)
            return -1;
        PyObject *x;
        Py_ssize_t i = 0;
        while (!full(w) && (x = PyIter_Next(it)) != NULL) {
            if (i)
                puts_ascii(w, ", ");
            if (i++ >= MAX_ITEMS) {
                Py_DECREF(x);
                puts_ascii(w, "...");
                break;
            }
            int rc = put_value(w, x, level + 1);
            Py_DECREF(x);
            if (rc <= 0) {
                Py_DECREF(it);
                return rc;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            return -1;
    }
    put(w, '}');
    if (frozen)
        put(w, ')');
    return 1;
}

static int
put_dict(vbuf *w, PyObject *v, int level)
{
    if (level >= MAX_LEVEL) {
        puts_ascii(w, "{...}");
        return 1;
    }
    put(w, '{');
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *x;
    while (!full(w) && PyDict_Next(v, &pos, &k, &x)) {
        if (i)
            puts_ascii(w, ", ");
        if (i++ >= MAX_ITEMS) {
            puts_ascii(w, "...");
            break;
        }
        /* held: nothing here runs code that could change the dict, but be safe */
        Py_INCREF(k);
        Py_INCREF(x);
        int rc = put_value(w, k, level + 1);
        if (rc > 0) {
            puts_ascii(w, ": ");
            rc = put_value(w, x, level + 1);
        }
        Py_DECREF(k);
        Py_DECREF(x);
        if (rc <= 0)
            return rc;
    }
    put(w, '}');
    return 1;
}

/* An exact str's characters as they are (an f-string's {name} of it); 0 for anything
 * else (a subclass's formatting is its own code: the Python twin decides). */
static int
put_plain_str(vbuf *w, PyObject *s)
{
    if (s == NULL || !PyUnicode_CheckExact(s))
        return 0;
    put_str_range(w, s, 0, PyUnicode_GET_LENGTH(s));
    return 1;
}

static int
ascii_only(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return 0;
    return 1;
}

/* core/fetch.py _type_qualname / _type_name of t, as type's own getters give them
 * (__qualname__: ht_qualname, or tp_name after its last dot; __module__: the type's
 * namespace entry, or tp_name before the dot, or "builtins"): 1, 0 where the Python
 * twin decides (an odd or missing __module__, a name that is not plain text), -1. */
static int
put_type_names(vbuf *w, PyTypeObject *t, int with_module)
{
    if (t->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        PyObject *qn = ((PyHeapTypeObject *)t)->ht_qualname;
        if (qn == NULL || !PyUnicode_CheckExact(qn))
            return 0;
        if (with_module) {
            static PyObject *key;
            if (key == NULL && (key = PyUnicode_InternFromString("__module__")) == NULL)
                return -1;
            PyObject *d = t->tp_dict;
            PyObject *mod = d != NULL ? PyDict_GetItemWithError(d, key) : NULL;
            if (mod == NULL)
                return PyErr_Occurred() ? -1 : 0;
            if (!PyUnicode_CheckExact(mod))
                return 0;
            if (!(PyUnicode_GET_LENGTH(mod) == 8 && PyUnicode_KIND(mod) == PyUnicode_1BYTE_KIND
                  && memcmp(PyUnicode_DATA(mod), "builtins", 8) == 0)) {
                put_str_range(w, mod, 0, PyUnicode_GET_LENGTH(mod));
                put(w, '.');
            }
        }
        put_str_range(w, qn, 0, PyUnicode_GET_LENGTH(qn));
        return 1;
    }
    if (!ascii_only(t->tp_name))
        return 0;
    const char *dot = strrchr(t->tp_name, '.');
    if (dot == NULL)
        puts_ascii(w, t->tp_name);          /* module "builtins": the name alone */
    else if (with_module && !(dot - t->tp_name == 8 && strncmp(t->tp_name, "builtins", 8) == 0))
        puts_ascii(w, t->tp_name);          /* "module.qualname" as tp_name has it */
    else
        puts_ascii(w, dot + 1);
    return 1;
}

/* The values core/fetch.py names without a repr of theirs: functions, built-in
 * functions, bound methods, modules, code objects and classes ("<function f>", "<class
 * 'mod.C'>"...), and a subclass of int, str or tuple by its base's value ("Color(1)",
 * "Match((0, 0, 2))"), read by the base's C layout: no method of the subclass runs.
 * 1, 0 (not one of these: the Python twin), -1. */
static int
put_named(vbuf *w, PyObject *v, PyTypeObject *t, int level)
{
    size_t mark = (size_t)w->n;
    int rc = 0;
    if (t == &PyFunction_Type) {
        puts_ascii(w, "<function ");
        rc = put_plain_str(w, ((PyFunctionObject *)v)->func_qualname);
        put(w, '>');
    }
    else if (t == &PyCFunction_Type) {
        const char *name = ((PyCFunctionObject *)v)->m_ml->ml_name;
        if (name != NULL && ascii_only(name)) {
            puts_ascii(w, "<built-in function ");
            puts_ascii(w, name);
            put(w, '>');
            rc = 1;
        }
    }
    else if (t == &PyMethod_Type) {
        PyObject *func = PyMethod_GET_FUNCTION(v);
        if (Py_IS_TYPE(func, &PyFunction_Type)) {
            puts_ascii(w, "<bound method ");
            rc = put_type_names(w, Py_TYPE(PyMethod_GET_SELF(v)), 1);
            put(w, '.');
            if (rc > 0)
                rc = put_plain_str(w, ((PyFunctionObject *)func)->func_name);
            put(w, '>');
        }
    }
    else if (t == &PyModule_Type) {
        static PyObject *key;
        if (key == NULL && (key = PyUnicode_InternFromString("__name__")) == NULL)
            return -1;
        PyObject *d = PyModule_GetDict(v);             /* borrowed */
        PyObject *name = d != NULL ? PyDict_GetItemWithError(d, key) : NULL;
        if (name == NULL && PyErr_Occurred())
            return -1;
        if (name != NULL && PyUnicode_CheckExact(name)) {
            puts_ascii(w, "<module ");
            put_str_range(w, name, 0, PyUnicode_GET_LENGTH(name));
            put(w, '>');
        }
        else
            puts_ascii(w, "<module>");
        rc = 1;
    }
#if PY_VERSION_HEX >= 0x030B0000
    else if (t == &PyCode_Type) {
        puts_ascii(w, "<code ");
        rc = put_plain_str(w, ((PyCodeObject *)v)->co_qualname);
        put(w, '>');
    }
#endif
    else if (PyType_Check(v)) {
        puts_ascii(w, "<class '");
        rc = put_type_names(w, (PyTypeObject *)v, 1);
        puts_ascii(w, "'>");
    }
    else if (PyLong_Check(v) || PyUnicode_Check(v) || PyTuple_Check(v)) {
        /* (exact ones, bool and exceptions were taken before) */
        rc = put_type_names(w, t, 0);
        if (rc > 0) {
            put(w, '(');
            if (PyLong_Check(v))
                rc = put_int(w, v);
            else if (PyUnicode_Check(v))
                put_str(w, v);
            else
                rc = put_items(w, &PyTuple_GET_ITEM(v, 0), PyTuple_GET_SIZE(v), "(", ")",
                               level, 1);
            put(w, ')');
        }
    }
    if (rc <= 0)
        w->n = (int)mark;
    return rc;
}

/* Is v shown by core/fetch.py _repr's last line ("<module.Qualname object at 0x...>"),
 * being of none of the types it shows otherwise (its subclasses of the value types by
 * their base's value, which put_named reads for int, str and tuple only)? */
int
fntrace_is_plain_object(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return !(PyType_FastSubclass(t, Py_TPFLAGS_LONG_SUBCLASS | Py_TPFLAGS_LIST_SUBCLASS
                                 | Py_TPFLAGS_TUPLE_SUBCLASS | Py_TPFLAGS_BYTES_SUBCLASS
                                 | Py_TPFLAGS_UNICODE_SUBCLASS | Py_TPFLAGS_DICT_SUBCLASS
                                 | Py_TPFLAGS_BASE_EXC_SUBCLASS | Py_TPFLAGS_TYPE_SUBCLASS)
             || PyFloat_Check(v) || PyAnySet_Check(v) || PyComplex_Check(v)
             || PyByteArray_Check(v) || PyRange_Check(v) || PyFunction_Check(v)
             || PyCFunction_Check(v) || PyMethod_Check(v) || PyModule_Check(v)
             || PyCode_Check(v) || v == Py_Ellipsis || v == Py_NotImplemented
             || v == Py_None);
}

/* "<module.Qualname object at 0x...>": 1, or 0 where the Python twin decides (an odd
 * __module__, a name that is not plain text) */
static int
put_plain(vbuf *w, PyObject *v)
{
    size_t mark = (size_t)w->n;
    put(w, '<');
    int rc = put_type_names(w, Py_TYPE(v), 1);
    if (rc <= 0) {
        w->n = (int)mark;
        return rc;
    }
    puts_ascii(w, " object at 0x");
    char hex[2 * sizeof(uintptr_t) + 1];
    int k = 0;
    uintptr_t a = (uintptr_t)v;
    do {
        hex[k++] = hexdigits[a & 0xf];
        a >>= 4;
    } while (a);
    while (k)
        put(w, (Py_UCS4)hex[--k]);
    put(w, '>');
    return 1;
}

/* 1 written, 0 not a value this file shows (the caller goes the Python way), -1 error.
 * An object of a program's class is shown by its type and address, at any depth: the
 * text core/fetch.py gives it while no program code may run (with --repr, the callers
 * take only a scalar's text from here: payloads.c.h fast_safe_repr). */
static int
put_value(vbuf *w, PyObject *v, int level)
{
    if (full(w))
        return 1;                  /* cut anyway: what would follow is not shown */
    PyTypeObject *t = Py_TYPE(v);
    const char *name = v == Py_None ? "None" : v == Py_True ? "True" : v == Py_False ? "False"
                     : v == Py_Ellipsis ? "Ellipsis"
                     : v == Py_NotImplemented ? "NotImplemented" : NULL;
    if (name != NULL) {
        puts_ascii(w, name);
        return 1;
    }
    if (t == &PyLong_Type)
        return put_int(w, v);
    if (t == &PyFloat_Type)
        return put_float(w, v);
    if (t == &PyUnicode_Type) {
        put_str(w, v);
        return 1;
    }
    if (t == &PyTuple_Type)
        return put_items(w, &PyTuple_GET_ITEM(v, 0), PyTuple_GET_SIZE(v), "(", ")", level, 1);
    if (t == &PyList_Type) {
        /* a copy of the item pointers, held: the list cannot change under the walk
         * (nothing here runs code), but its array may not be read after a failure */
        Py_ssize_t n = PyList_GET_SIZE(v);
        if (n > MAX_ITEMS + 1)
            n = MAX_ITEMS + 1;
        PyObject *items[MAX_ITEMS + 1] = {NULL};
        for (Py_ssize_t i = 0; i < n; i++)
            items[i] = Py_NewRef(PyList_GET_ITEM(v, i));
        int rc = put_items(w, items, n, "[", "]", level, 0);
        for (Py_ssize_t i = 0; i < n; i++)
            Py_DECREF(items[i]);
        return rc;
    }
    if (t == &PyDict_Type)
        return put_dict(w, v, level);
    if (t == &PySet_Type || t == &PyFrozenSet_Type)
        return put_set(w, v, level);
    if (t == &PyBytes_Type || t == &PyByteArray_Type)
        return put_bytes(w, v);
    if (t == &PyComplex_Type || t == &PyRange_Type)
        return put_slot_repr(w, v, t->tp_repr, 0, 0);
    if (PyExceptionInstance_Check(v))
        return put_exception(w, v, level);
    int rc = put_named(w, v, t, level);
    if (rc != 0 || !fntrace_is_plain_object(v))
        return rc;
    return put_plain(w, v);
}

/* A str of the n characters at c, whose bits ORed are `bits` (or more of the same
 * class: below 0x80, 0x100, 0x10000 or not): the highest bit set of an OR is the
 * highest of the largest character, which decides the str's kind, so this is
 * PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, ...) without its pass that looks for
 * the largest (every -A/-R payload is made here). */
PyObject *
fntrace_ucs4_str(const Py_UCS4 *c, Py_ssize_t n, Py_UCS4 bits)
{
    PyObject *s = PyUnicode_New(n, bits > 0x10ffff ? 0x10ffff : bits);
    if (s == NULL)
        return NULL;
    int kind = PyUnicode_KIND(s);
    void *d = PyUnicode_DATA(s);
    Py_ssize_t i = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        Py_UCS1 *o = (Py_UCS1 *)d;
#ifdef __SSE2__
        /* sixteen at a time: every character is below 0x100 here, so the signed
         * saturating packs keep them as they are */
        for (; i + 16 <= n; i += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(c + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(c + i + 4));
            __m128i e = _mm_loadu_si128((const __m128i *)(c + i + 8));
            __m128i f = _mm_loadu_si128((const __m128i *)(c + i + 12));
            _mm_storeu_si128((__m128i *)(o + i),
                             _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(e, f)));
        }
#endif
        for (; i < n; i++)
            o[i] = (Py_UCS1)c[i];
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        Py_UCS2 *o = (Py_UCS2 *)d;
        for (; i < n; i++)
            o[i] = (Py_UCS2)c[i];
    }
    else
        memcpy(d, c, (size_t)n * sizeof(Py_UCS4));
    return s;
}

/* the bits of the n characters at c ORed (fntrace_ucs4_str's `bits`) */
Py_UCS4
fntrace_ucs4_or(const Py_UCS4 *c, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    Py_UCS4 r = 0;
#ifdef __SSE2__
    __m128i m = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8)
        m = _mm_or_si128(m, _mm_or_si128(_mm_loadu_si128((const __m128i *)(c + i)),
                                         _mm_loadu_si128((const __m128i *)(c + i + 4))));
    m = _mm_or_si128(m, _mm_srli_si128(m, 8));
    m = _mm_or_si128(m, _mm_srli_si128(m, 4));
    r = (Py_UCS4)_mm_cvtsi128_si32(m);
#endif
    for (; i < n; i++)
        r |= c[i];
    return r;
}

/* core/fetch.py value_repr(v) for the values above, into out (room for KEEP,
 * MAX_REPR + 1, characters: the text is made there): its length, or -1 (no exception) for any other value (the Python twin
 * decides).  An error while reading one (out of memory) is its "(fault)", as
 * value_repr's. */
int
fntrace_value_text_buf(PyObject *v, Py_UCS4 *out)
{
    vbuf w;
    w.c = out;
    w.n = 0;
    int rc = put_value(&w, v, 0);
    if (rc == 0)
        return -1;
    if (rc < 0) {
        PyErr_Clear();
        w.n = 0;
        puts_ascii(&w, "(fault)");
    }
    else if (w.n > MAX_REPR) {
        /* value_repr: s[:MAX_REPR - 3] + "..." */
        w.n = MAX_REPR - 3;
        w.c[w.n++] = '.';
        w.c[w.n++] = '.';
        w.c[w.n++] = '.';
    }
    return w.n;
}

/* core/fetch.py _repr's last line, "<module.Qualname object at 0x...>", cut as
 * value_repr cuts it, for an object the caller found to be of none of the types shown
 * otherwise (payloads.c.h plain_object_repr); NULL without an exception where the
 * Python twin decides (an odd __module__, a name that is not plain text). */
PyObject *
fntrace_plain_text(PyObject *v)
{
    vbuf w;
    w.c = w.store;
    w.n = 0;
    if (put_plain(&w, v) <= 0)
        return NULL;
    if (w.n > MAX_REPR) {
        w.n = MAX_REPR - 3;
        w.c[w.n++] = '.';
        w.c[w.n++] = '.';
        w.c[w.n++] = '.';
    }
    return fntrace_ucs4_str(w.c, w.n, fntrace_ucs4_or(w.c, w.n));
}

/* the same as a new str; NULL without an exception for a value not shown here */
PyObject *
fntrace_value_text(PyObject *v)
{
    Py_UCS4 out[KEEP];
    int n = fntrace_value_text_buf(v, out);
    if (n < 0)
        return NULL;
    return fntrace_ucs4_str(out, n, fntrace_ucs4_or(out, n));
}
