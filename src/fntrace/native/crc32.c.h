/* fntrace._native, part crc32.c.h (included by _native.c after native.h; see there).
 * Python twin: zlib.crc32 (tracefile/blocks.py) */

/* -- CRC-32 of trace-file blocks (tracefile/blocks.py) ---------------------------------------
 *
 * The same CRC as zlib.crc32 (the reflected 0xEDB88320 polynomial), which a trace file
 * of function_graph events spends a fair share of the recording in (zlib's byte-wise
 * code runs at about 3.8 instructions a byte).  Where the CPU has carry-less multiply,
 * 64-byte blocks are folded with PCLMULQDQ (Gopal et al., "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ Instruction", Intel 2009; the constants are the
 * paper's for this polynomial, as zlib's and Chromium's SIMD paths use them); the rest
 * goes through a table.  tests/test_tracefile.py checks it against zlib.crc32. */
static uint32_t crc_table[256];

static void
crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t
crc32_bytes(uint32_t crc, const unsigned char *p, size_t n)
{
    /* crc is the running register (not inverted) */
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1

/* len >= 64 and a multiple of 16; crc is the running register */
__attribute__((target("pclmul,sse4.1")))
static uint32_t
crc32_clmul(const unsigned char *buf, size_t len, uint32_t crc)
{
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {            /* four folds in parallel */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);      /* fold the four into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);       /* 128 -> 64 bits */
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);    /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int g_have_clmul;

/* The running register over n bytes at p.  Other threads run meanwhile only for long
 * data: letting the GIL go and taking it back costs more than a small block's CRC. */
static uint32_t
crc32_run(uint32_t crc, const unsigned char *p, size_t n)
{
    PyThreadState *save = n >= (64u << 10) ? PyEval_SaveThread() : NULL;
#ifdef HAVE_CLMUL_PATH
    if (g_have_clmul && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        crc = crc32_clmul(p, chunk, crc);
        p += chunk;
        n -= chunk;
    }
#endif
    crc = crc32_bytes(crc, p, n);
    if (save != NULL)
        PyEval_RestoreThread(save);
    return crc;
}

static PyObject *
native_crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* crc32(data, value=0): zlib.crc32's result */
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, value=0)");
        return NULL;
    }
    unsigned long v = 0;
    if (nargs == 2) {
        v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    size_t n = (size_t)view.len;
    uint32_t crc = crc32_run(~(uint32_t)v, p, n);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(~crc & 0xffffffffu);
}

/* block(tag, *parts) -> bytes: one block of the trace file, framed -- its head (tag,
 * length), the parts joined, and the CRC-32 of head and body (tracefile/writer.py
 * _write_block's bytes, its pure twin: the layout is blocks.py's BLOCK_HEAD and CRC).
 * The writer thread frames every block with it, a thread's THRD and last CHNK among
 * them. */
static PyObject *
native_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || !PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != 4) {
        PyErr_SetString(PyExc_TypeError, "block(tag, *parts): tag is 4 bytes");
        return NULL;
    }
    enum { MAXP = 8 };
    if (nargs - 1 > MAXP) {
        PyErr_SetString(PyExc_TypeError, "block(tag, *parts): at most 8 parts");
        return NULL;
    }
    Py_buffer views[MAXP];
    Py_ssize_t nv = 0, len = 0;
    PyObject *out = NULL;
    for (Py_ssize_t i = 1; i < nargs; i++, nv++) {
        if (PyObject_GetBuffer(args[i], &views[nv], PyBUF_SIMPLE) < 0)
            goto done;
        len += views[nv].len;
    }
    if ((unsigned long long)len > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_OverflowError, "block(tag, *parts): longer than 4 GB");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 8 + len + 4);
    if (out == NULL)
        goto done;
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(out), *q = b + 8;
    memcpy(b, PyBytes_AS_STRING(args[0]), 4);
    for (int k = 0; k < 4; k++)
        b[4 + k] = (unsigned char)((unsigned long long)len >> (8 * k));
    for (Py_ssize_t i = 0; i < nv; i++) {
        memcpy(q, views[i].buf, (size_t)views[i].len);
        q += views[i].len;
    }
    uint32_t crc = ~crc32_run(~0u, b, (size_t)(8 + len));
    for (int k = 0; k < 4; k++)
        q[k] = (unsigned char)(crc >> (8 * k));
done:
    for (Py_ssize_t i = 0; i < nv; i++)
        PyBuffer_Release(&views[i]);
    return out;
}


/* chunk_block(tag, cpu, records, first_seq, lost, max_len) -> (block, first ts, last ts):
 * a CHNK block of records with no payloads, framed, in one call (tracefile/writer.py
 * _py_chunk_block, its pure twin: head varints, the body's length, the encoded records).
 * A short-lived thread's records are one such block: the writer made it in a dozen
 * Python steps. */
static PyObject *
native_chunk_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "chunk_block(tag, cpu, records, first_seq, lost, max_len)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = view.len / FNT_RECORD_SIZE;
    PyObject *res = NULL, *body = NULL, *head = NULL, *blen = NULL, *count = NULL;
    PyObject *block = NULL;
    if (view.len % FNT_RECORD_SIZE || n == 0) {
        PyErr_Format(PyExc_ValueError, "chunk_block: records length %zd is not a positive "
                     "multiple of %d", view.len, FNT_RECORD_SIZE);
        goto done;
    }
    const record_t *r = (const record_t *)view.buf;
    unsigned long long t0 = r[0].ts, t1 = r[n - 1].ts;
    long long max_len = PyLong_AsLongLong(args[5]);
    if (max_len == -1 && PyErr_Occurred())
        goto done;
    body = fntrace_encode_records(self, &args[2], 1);
    count = PyLong_FromSsize_t(n);
    if (body == NULL || count == NULL)
        goto done;
    PyObject *hv[4] = {args[1], count, args[3], args[4]};
    head = fntrace_varints(self, hv, 4);
    if (head == NULL)
        goto done;
    if ((long long)(PyBytes_GET_SIZE(head) + PyBytes_GET_SIZE(body)) + 10 > max_len) {
        PyErr_SetString(PyExc_ValueError, "chunk payloads too large for one block");
        goto done;
    }
    PyObject *blv = PyLong_FromSsize_t(PyBytes_GET_SIZE(body));
    if (blv == NULL)
        goto done;
    blen = fntrace_varints(self, &blv, 1);
    Py_DECREF(blv);
    if (blen == NULL)
        goto done;
    PyObject *parts[4] = {args[0], head, blen, body};
    block = native_block(self, parts, 4);
    if (block == NULL)
        goto done;
    res = Py_BuildValue("(OKK)", block, t0, t1);
    if (res != NULL)
        PyObject_GC_UnTrack(res);   /* (the writer thread's: see pack_payloads) */
done:
    Py_XDECREF(block);
    Py_XDECREF(blen);
    Py_XDECREF(head);
    Py_XDECREF(count);
    Py_XDECREF(body);
    PyBuffer_Release(&view);
    return res;
}
