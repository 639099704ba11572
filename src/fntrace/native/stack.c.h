/*
 * The stack tracer's measure (twin: tracers/stack.py _walk): stack_bytes(frame), the
 * bytes of CPython's data stack the frames from `frame` down take, fntrace's own frames
 * left out.  The walk reads the interpreter frames (_native_frame.c, where CPython's
 * internal layout may be included) instead of making a frame object per level.
 */

/* _native_frame.c */
long long fntrace_stack_bytes(PyObject *frame);

static PyObject *
stack_bytes(PyObject *self, PyObject *frame)
{
    long long n = fntrace_stack_bytes(frame);
    if (n < 0) {
        PyErr_SetString(PyExc_TypeError, "stack_bytes(frame): not a frame this build can walk");
        return NULL;
    }
    return PyLong_FromLongLong(n);
}
