/* The log-linear histogram of call durations, one definition for the native twins that
 * keep one: ``fntrace stat``'s walk (read_stat.c.h) and the function profiler
 * (function_profile.c.h).  Python twin: output/stat.py's hist_index/hist_value, which
 * say why it is shaped so:
 *
 *     duration (ns)   0 .. 63        64 .. 127     128 .. 255    ...   2^e .. 2^(e+1)-1
 *     bucket          one per ns     32, 2 ns      32, 4 ns            32, 2^(e-5) ns
 *
 * A histogram is kept as the run of buckets between its least and greatest used one
 * (``lo`` .. ``lo + n - 1``), grown when a call falls outside it. */
#ifndef FNTRACE_LOG_HIST_H
#define FNTRACE_LOG_HIST_H

#include <stdint.h>
#include <string.h>

#define HIST_SUB_BITS 5

static inline int32_t
hist_index(int64_t d)
{
    if (d < (1 << (HIST_SUB_BITS + 1)))
        return d < 0 ? 0 : (int32_t)d;
    int e = 63 - __builtin_clzll((uint64_t)d);
    return (int32_t)(((e - HIST_SUB_BITS + 1) << HIST_SUB_BITS)
                     | ((d >> (e - HIST_SUB_BITS)) & ((1 << HIST_SUB_BITS) - 1)));
}

typedef struct {
    uint64_t *h;
    int32_t lo, n;
} log_hist;

/* one more call of ``d`` ns; -1 (and a MemoryError) when memory runs out */
static inline int
hist_add(log_hist *hs, int64_t d)
{
    int32_t i = hist_index(d);
    if (hs->n == 0 || i < hs->lo || i >= hs->lo + hs->n) {
        /* the run grows to take i, with room on the side it grew (a few more calls
         * further out do not each copy it) */
        int32_t lo = hs->n ? (i < hs->lo ? i : hs->lo) : i;
        int32_t hi = hs->n ? (i >= hs->lo + hs->n ? i + 1 : hs->lo + hs->n) : i + 1;
        if (hs->n && i < hs->lo)
            lo = lo > 16 ? lo - 16 : 0;
        else
            hi += 16;
        uint64_t *h = PyMem_RawCalloc((size_t)(hi - lo), sizeof(uint64_t));
        if (h == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (hs->n)
            memcpy(h + (hs->lo - lo), hs->h, (size_t)hs->n * sizeof(uint64_t));
        PyMem_RawFree(hs->h);
        hs->h = h;
        hs->lo = lo;
        hs->n = hi - lo;
    }
    hs->h[i - hs->lo]++;
    return 0;
}

static inline void
hist_free(log_hist *hs)
{
    PyMem_RawFree(hs->h);
    hs->h = NULL;
    hs->lo = hs->n = 0;
}

/* {bucket: calls} of the used buckets, as output/stat.py keeps a histogram */
static inline PyObject *
hist_dict(const log_hist *hs)
{
    PyObject *d = PyDict_New();
    for (int32_t i = 0; d != NULL && i < hs->n; i++) {
        if (hs->h[i] == 0)
            continue;
        PyObject *k = PyLong_FromLong(hs->lo + i);
        PyObject *v = PyLong_FromUnsignedLongLong(hs->h[i]);
        if (k == NULL || v == NULL || PyDict_SetItem(d, k, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

#endif
