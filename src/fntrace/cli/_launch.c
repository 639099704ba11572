/*
 * fntrace.cli._launch: the native part of the launcher (cli/target.py, cli/guard.py).
 *
 * Not part of the hot path: it is used whether or not FNTRACE_PURE is set, and
 * everything here has a Python fallback for when the extension was not built
 * (a C compiler missing at install time).
 *
 *   run_clean(code, globals, credit=0)
 *                              exec the program so that its first frame starts the
 *                              stack, as under `python script.py`: no launcher frame
 *                              below it (f_back is None, tracebacks and stack depth
 *                              are the program's own) and the whole recursion limit
 *                              is the program's (plus `credit` frames the program
 *                              does not see).  Python fallback: exec().
 *   credit(n)                  n more frames for the calling thread.
 *   call_clean(func)           func() the same way (the program's atexit functions).
 *   call_untraced(func)        func() with this thread's tracing suspended
 *                              (threading._shutdown: the interpreter's work).
 *   fatal_signals_install(fd, signals)
 *                              for each signal whose disposition is SIG_DFL, a C
 *                              handler that writes the signal number to fd (the
 *                              trace writer's pipe) so the trace can be written out
 *                              before the process dies of it.  Python's own table of
 *                              handlers is not touched: signal.getsignal() still says
 *                              SIG_DFL and a handler the program installs replaces
 *                              this one, as it would replace the default.  Python
 *                              fallback: signal.signal() (visible to getsignal()).
 *   fatal_signals_restore()    SIG_DFL again wherever this handler still is.
 *   call_in_main(func)         func() on the main thread at its next bytecode (a pending
 *                              call, as CPython runs its signal handlers): the writer
 *                              thread stops the program there when a fatal signal
 *                              came, as the signal's default action would have.
 *   wrap_fork(real, before, after)
 *                              os.fork (or os.forkpty) that calls before() first and,
 *                              in the parent, after() once real() has returned: the
 *                              trace writer's thread is not there while CPython counts
 *                              the process's threads for its "multi-threaded fork()"
 *                              warning, which 3.13 does after the at-fork hooks.  A C
 *                              function, so the warning (stacklevel 1) still names the
 *                              program's line, and the same type, name and signature
 *                              as the real one.  No Python fallback: without it the
 *                              writer comes back in the at-fork hook.
 *   callback_shell(func)       func as CPython calls the pure-Python hot path's
 *                              callbacks (sys.monitoring, sys.setprofile), in a C shell:
 *                              the frames func needs are lent for its duration (the
 *                              program keeps its whole recursion limit, as under the
 *                              native hot path), and an exception that leaves it -- a
 *                              program's signal handler that CPython ran inside it --
 *                              is handed to the program at its next bytecode check,
 *                              where CPython would have run the handler, not raised at
 *                              the traced event.  No Python fallback: the callbacks
 *                              then run bare, with a standing credit of frames.
 *   compile_program(source, filename)
 *                              the program's code as `python script.py` compiles it:
 *                              no future statement of the launcher's own modules
 *                              inherited (compile() takes its caller's: `from
 *                              __future__ import annotations` would turn the
 *                              program's annotations into strings), and not through
 *                              compile(), whose test for an AST argument first builds
 *                              every _ast type (11 M instructions, a quarter of
 *                              Python's own start-up).  None for a source with a NUL
 *                              byte: the fallback, compile(..., dont_inherit=True),
 *                              raises the interpreter's own error for it.
 *   ident(obj)                 id(obj) without its "builtins.id" audit event (the pure
 *                              callbacks' id(), which a program's audit hook would see).
 *   callback_shell_setup(own_dir, from_handler)
 *                              the directory of fntrace's own sources (their frames
 *                              are cut from a handed-over exception's traceback), and
 *                              from_handler(exc): a Python signal handler raised it.
 *
 * CPython quirk: run_clean reaches into PyThreadState's public-but-unstable fields —
 * the frame the next frame links to (cframe->current_frame on 3.11 and 3.12,
 * current_frame on 3.13+) and the recursion counters (recursion_remaining on 3.11,
 * py_recursion_remaining on 3.12+).  Other versions exec with the launcher's frames
 * below the program, as the fallback does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000       /* 3.11 */
#define CLEAN_STACK 1
#define CUR_FRAME(ts) ((ts)->cframe->current_frame)
#define REC_REMAINING(ts) ((ts)->recursion_remaining)
#define REC_LIMIT(ts) ((ts)->recursion_limit)
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000     /* 3.12 */
#define CLEAN_STACK 1
#define CUR_FRAME(ts) ((ts)->cframe->current_frame)
#define REC_REMAINING(ts) ((ts)->py_recursion_remaining)
#define REC_LIMIT(ts) ((ts)->py_recursion_limit)
#elif PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030F0000     /* 3.13, 3.14 */
#define CLEAN_STACK 1
#define CUR_FRAME(ts) ((ts)->current_frame)
#define REC_REMAINING(ts) ((ts)->py_recursion_remaining)
#define REC_LIMIT(ts) ((ts)->py_recursion_limit)
#else
#define CLEAN_STACK 0
#endif

/* What a fresh stack needs: no previous frame, the whole limit.  The launcher's own
 * depth is given back afterwards, measured against the limit then in force (the
 * program may have changed it: sys.setrecursionlimit keeps each thread's depth). */
typedef struct {
#if CLEAN_STACK
    void *frame;
    int depth;
#endif
    int dummy;
} saved_stack;

static void
stack_detach(saved_stack *s, int credit)
{
#if CLEAN_STACK
    PyThreadState *ts = PyThreadState_Get();
    s->frame = (void *)CUR_FRAME(ts);
    s->depth = REC_LIMIT(ts) - REC_REMAINING(ts);
    CUR_FRAME(ts) = NULL;
    REC_REMAINING(ts) = REC_LIMIT(ts) + credit;
#else
    (void)s;
    (void)credit;
#endif
}

static void
stack_attach(saved_stack *s)
{
#if CLEAN_STACK
    PyThreadState *ts = PyThreadState_Get();
    CUR_FRAME(ts) = s->frame;
    /* A limit the program lowered below the launcher's depth would make the launcher's
     * next call a RecursionError: leave it room (the program has ended). */
    if (REC_LIMIT(ts) < s->depth + 100)
        Py_SetRecursionLimit(s->depth + 100);
    REC_REMAINING(ts) = REC_LIMIT(ts) - s->depth;
#else
    (void)s;
#endif
}

static PyObject *
run_clean(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !PyCode_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "run_clean(code, globals, credit=0)");
        return NULL;
    }
    int credit = 0;
    if (nargs == 3) {
        credit = (int)PyLong_AsLong(args[2]);
        if (credit == -1 && PyErr_Occurred())
            return NULL;
    }
    saved_stack s;
    stack_detach(&s, credit);
    PyObject *r = PyEval_EvalCode(args[0], args[1], args[1]);
    stack_attach(&s);
    return r;
}

static PyObject *
call_clean(PyObject *self, PyObject *func)
{
    saved_stack s;
    stack_detach(&s, 0);
    PyObject *r = PyObject_CallNoArgs(func);
    stack_attach(&s);
    return r;
}

/* credit(n): n more frames of recursion for this thread, not counted against the
 * limit the program sees (the pure-Python hot path's callbacks run on its stack). */
static PyObject *
credit(PyObject *self, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
#if CLEAN_STACK
    PyThreadState *ts = PyThreadState_Get();
    REC_REMAINING(ts) += (int)n;
#endif
    Py_RETURN_NONE;
}

/* func() with this thread's tracing suspended (PyThreadState_EnterTracing: what the
 * interpreter does around a trace or profile function, so no monitoring event and no
 * profile call reaches fntrace from this thread meanwhile).  Other threads are traced
 * as before. */
static PyObject *
call_untraced(PyObject *self, PyObject *func)
{
    PyThreadState *ts = PyThreadState_Get();
    PyThreadState_EnterTracing(ts);
    PyObject *r = PyObject_CallNoArgs(func);
    PyThreadState_LeaveTracing(ts);
    return r;
}

/* -- fatal signals ------------------------------------------------------------------ */

#define MAX_SIG 65
static volatile sig_atomic_t g_fd = -1;
static volatile sig_atomic_t g_pid = 0;
static volatile sig_atomic_t g_seen[MAX_SIG];
static char g_ours[MAX_SIG];

static void
on_fatal_signal(int sig)
{
    int saved_errno = errno;
    /* A forked child (a multiprocessing worker, say) inherits this handler but not the
     * trace: it dies of the signal as it would have.  So does a second delivery, when
     * writing the trace out takes too long for whoever sent it. */
    if (getpid() != (pid_t)g_pid || g_fd < 0 || sig <= 0 || sig >= MAX_SIG || g_seen[sig]) {
        signal(sig, SIG_DFL);
        raise(sig);
        errno = saved_errno;
        return;
    }
    g_seen[sig] = 1;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write((int)g_fd, &b, 1);
    (void)w;
    errno = saved_errno;
}

static PyObject *
fatal_signals_install(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fatal_signals_install(fd, signals)");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(args[1], "signals must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *done = PyList_New(0);
    if (done == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    g_fd = (sig_atomic_t)fd;
    g_pid = (sig_atomic_t)getpid();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        long sig = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (sig == -1 && PyErr_Occurred())
            goto error;
        if (sig <= 0 || sig >= MAX_SIG)
            continue;
        struct sigaction cur;
        if (sigaction((int)sig, NULL, &cur) < 0 || cur.sa_handler != SIG_DFL
                || (cur.sa_flags & SA_SIGINFO))
            continue;           /* the program (or its parent) chose something else */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        if (sigaction((int)sig, &sa, NULL) < 0)
            continue;
        g_seen[sig] = 0;
        g_ours[sig] = 1;
        PyObject *n = PyLong_FromLong(sig);
        if (n == NULL || PyList_Append(done, n) < 0) {
            Py_XDECREF(n);
            goto error;
        }
        Py_DECREF(n);
    }
    Py_DECREF(seq);
    return done;
error:
    Py_DECREF(seq);
    Py_DECREF(done);
    return NULL;
}

static PyObject *
fatal_signals_restore(PyObject *self, PyObject *unused)
{
    for (int sig = 1; sig < MAX_SIG; sig++) {
        if (!g_ours[sig])
            continue;
        g_ours[sig] = 0;
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) == 0 && cur.sa_handler == on_fatal_signal) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = SIG_DFL;
            sigemptyset(&sa.sa_mask);
            sigaction(sig, &sa, NULL);
        }
    }
    g_fd = -1;
    Py_RETURN_NONE;
}

/* -- call_in_main ------------------------------------------------------------------ */

static int
pending_call(void *arg)
{
    PyObject *func = (PyObject *)arg;
    PyObject *r = PyObject_CallNoArgs(func);
    if (r == NULL)
        PyErr_WriteUnraisable(func);
    Py_XDECREF(r);
    Py_DECREF(func);
    return 0;
}

static PyObject *
call_in_main(PyObject *self, PyObject *func)
{
    Py_INCREF(func);
    if (Py_AddPendingCall(pending_call, func) < 0) {
        Py_DECREF(func);
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* -- wrap_fork --------------------------------------------------------------------- */

/* One method definition per wrapped name (fork, forkpty), made once: a builtin
 * function keeps a pointer to it for as long as it lives. */
static PyMethodDef g_fork_defs[2];

static PyObject *
forked_call(PyObject *self, PyObject *unused)
{
    /* self: a module object named like the real one's, holding the three callables */
    PyObject *d = PyModule_GetDict(self);
    PyObject *real = d ? PyDict_GetItemString(d, "real") : NULL;
    PyObject *before = d ? PyDict_GetItemString(d, "before") : NULL;
    PyObject *after = d ? PyDict_GetItemString(d, "after") : NULL;
    if (real == NULL || before == NULL || after == NULL) {
        PyErr_SetString(PyExc_SystemError, "fork wrapper is not set up");
        return NULL;
    }
    Py_INCREF(real);
    Py_INCREF(after);
    /* fntrace's own steps never raise into the program */
    PyObject *r = PyObject_CallNoArgs(before);
    if (r == NULL)
        PyErr_WriteUnraisable(before);
    Py_XDECREF(r);
    PyObject *result = PyObject_CallNoArgs(real);
    Py_DECREF(real);
    int child = 0;
    if (result != NULL) {
        /* fork() -> pid; forkpty() -> (pid, fd) */
        PyObject *pid = PyTuple_Check(result) && PyTuple_GET_SIZE(result) > 0
            ? PyTuple_GET_ITEM(result, 0) : result;
        child = PyLong_Check(pid) && PyLong_AsLong(pid) == 0;
        if (PyErr_Occurred())
            PyErr_Clear();
    }
    if (!child) {
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *exc = PyErr_GetRaisedException();
#else
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
#endif
        r = PyObject_CallNoArgs(after);
        if (r == NULL)
            PyErr_WriteUnraisable(after);
        Py_XDECREF(r);
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_Restore(et, ev, tb);
#endif
    }
    Py_DECREF(after);
    return result;
}

static PyObject *
wrap_fork(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "wrap_fork(real, before, after)");
        return NULL;
    }
    PyObject *real = args[0];
    PyObject *name = PyObject_GetAttrString(real, "__name__");
    if (name == NULL)
        return NULL;
    const char *cname = PyUnicode_AsUTF8(name);
    if (cname == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    int slot = strcmp(cname, "fork") == 0 ? 0 : strcmp(cname, "forkpty") == 0 ? 1 : -1;
    if (slot < 0) {
        Py_DECREF(name);
        PyErr_SetString(PyExc_ValueError, "wrap_fork: only fork and forkpty");
        return NULL;
    }
    PyMethodDef *def = &g_fork_defs[slot];
    if (def->ml_name == NULL) {
        /* the real one's doc, signature line included (inspect.signature, help()) */
        PyObject *doc = PyObject_GetAttrString(real, "__doc__");
        PyObject *sig = PyObject_GetAttrString(real, "__text_signature__");
        PyErr_Clear();
        PyObject *full;
        if (sig != NULL && PyUnicode_Check(sig) && doc != NULL && PyUnicode_Check(doc))
            full = PyUnicode_FromFormat("%U%U\n--\n\n%U", name, sig, doc);
        else if (doc != NULL && PyUnicode_Check(doc))
            full = Py_NewRef(doc);
        else
            full = PyUnicode_FromString("");
        Py_XDECREF(doc);
        Py_XDECREF(sig);
        if (full == NULL) {
            Py_DECREF(name);
            return NULL;
        }
        const char *text = PyUnicode_AsUTF8(full);
        char *kept = text ? strdup(text) : NULL;
        Py_DECREF(full);
        if (kept == NULL) {
            Py_DECREF(name);
            return PyErr_NoMemory();
        }
        def->ml_doc = kept;
        def->ml_flags = METH_NOARGS;
        def->ml_meth = (PyCFunction)forked_call;
        def->ml_name = slot == 0 ? "fork" : "forkpty";
    }
    Py_DECREF(name);
    PyObject *modname = PyObject_GetAttrString(real, "__module__");
    if (modname == NULL)
        return NULL;
    if (!PyUnicode_Check(modname)) {
        Py_DECREF(modname);
        modname = PyUnicode_FromString("posix");
        if (modname == NULL)
            return NULL;
    }
    PyObject *holder = PyModule_NewObject(modname);
    if (holder == NULL) {
        Py_DECREF(modname);
        return NULL;
    }
    PyObject *d = PyModule_GetDict(holder);
    if (PyDict_SetItemString(d, "real", real) < 0
            || PyDict_SetItemString(d, "before", args[1]) < 0
            || PyDict_SetItemString(d, "after", args[2]) < 0) {
        Py_DECREF(holder);
        Py_DECREF(modname);
        return NULL;
    }
    PyObject *f = PyCFunction_NewEx(def, holder, modname);
    Py_DECREF(holder);
    Py_DECREF(modname);
    return f;
}

/* -- callback_shell ------------------------------------------------------------------
 *
 * The pure-Python hot path's callbacks are Python frames on the program's stack, and
 * CPython runs pending signal handlers at the bytecode checks inside them.  The shell:
 *
 *   - lends SHELL_FRAMES frames while the callback runs, when fewer are left (the
 *     native hot path's CREDITED_CALL, native.h): the program meets its limit where it
 *     would untraced;
 *   - takes an exception a signal handler raised inside the callback (fntrace's own
 *     errors are contained inside it) and has CPython raise it on the main thread at
 *     its next check, the callback returning normally: a pending call, as the handler
 *     itself would have been (Py_AddPendingCall; handlers run on the main thread
 *     only).  Raised inside a later callback before the program got it, it comes back
 *     here and waits again.
 */
#define SHELL_FRAMES 100
#if PY_VERSION_HEX >= 0x030E0000
#define SH_LOW(ts) ((ts)->py_recursion_remaining < SHELL_FRAMES)
#define SH_ADD(ts, n) ((ts)->py_recursion_remaining += (n))
#elif PY_VERSION_HEX >= 0x030C0000
#define SH_LOW(ts) ((ts)->py_recursion_remaining < SHELL_FRAMES \
                    || (ts)->c_recursion_remaining < SHELL_FRAMES)
#define SH_ADD(ts, n) ((ts)->py_recursion_remaining += (n), (ts)->c_recursion_remaining += (n))
#elif PY_VERSION_HEX >= 0x030B0000
#define SH_LOW(ts) ((ts)->recursion_remaining < SHELL_FRAMES)
#define SH_ADD(ts, n) ((ts)->recursion_remaining += (n))
#else
#define SH_LOW(ts) 0
#define SH_ADD(ts, n) ((void)0)
#endif

static unsigned long g_main_ident;  /* the main thread, where signal handlers run */
static PyObject *g_own_dir;         /* fntrace's sources: cut from tracebacks */
static PyObject *g_from_handler;    /* from_handler(exc): a Python handler's frame in it */

typedef struct {
    PyObject_HEAD
    PyObject *func;
    vectorcallfunc vectorcall;
} CallbackShell;

/* the traceback without its first entries that are fntrace's own frames (read from
 * the structs: tb.tb_frame and frame.f_code raise audit events the program's hooks
 * would see) */
static PyObject *
own_frames_cut(PyObject *tb)
{
    while (tb != NULL && tb != Py_None && g_own_dir != NULL && PyTraceBack_Check(tb)) {
        PyTracebackObject *t = (PyTracebackObject *)tb;
        PyCodeObject *code = t->tb_frame ? PyFrame_GetCode(t->tb_frame) : NULL;
        int own = 0;
        if (code != NULL) {
            PyObject *fn = code->co_filename;
            own = PyUnicode_Check(fn) && PyUnicode_Tailmatch(fn, g_own_dir, 0,
                                                             PY_SSIZE_T_MAX, -1) == 1;
            Py_DECREF(code);
        }
        if (!own)
            break;
        tb = t->tb_next ? (PyObject *)t->tb_next : Py_None;
    }
    return tb;
}

/* Did a signal handler raise exc inside the callback?  Where CPython ran a handler
 * written in C (KeyboardInterrupt from default_int_handler), the innermost frame is
 * fntrace's own: the check it stopped at.  A handler written in Python is among the
 * traceback's frames (g_from_handler, core/dispatch.py).  Otherwise it is what program
 * code the user asked to run raised (a __repr__ under --repr): raised at the event, as
 * it would have been raised where that code was called.  1 yes, 0 no, -1 error. */
static int
from_handler(PyObject *exc)
{
    PyObject *tb = PyException_GetTraceback(exc);
    if (tb == NULL)
        return 0;
    PyObject *last = tb;
    while (PyTraceBack_Check(last) && ((PyTracebackObject *)last)->tb_next != NULL)
        last = (PyObject *)((PyTracebackObject *)last)->tb_next;
    PyObject *cut = own_frames_cut(last);
    Py_DECREF(tb);
    if (cut == Py_None)
        return 1;               /* the innermost frame is fntrace's */
    if (g_from_handler == NULL)
        return 0;
    PyObject *r = PyObject_CallOneArg(g_from_handler, exc);
    if (r == NULL) {
        PyErr_Clear();
        return 0;
    }
    int yes = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (yes < 0)
        PyErr_Clear();
    return yes > 0;
}

/* At the main thread's next bytecode check (a pending call, as CPython runs signal
 * handlers, and only on the main thread, where they run): exc raised there, chained to
 * what the program handles at that point, with the handler's own frames. */
static int
handover_pending(void *arg)
{
    PyObject *exc = (PyObject *)arg;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return -1;
}

/* exc, without fntrace's frames and its context, raised at the main thread's next check */
static int
handover(PyObject *exc)
{
    if (PyThread_get_thread_ident() != g_main_ident)
        return -1;
    PyObject *tb = PyException_GetTraceback(exc);
    if (tb != NULL) {
        PyObject *cut = own_frames_cut(tb);
        if (cut != tb)
            PyException_SetTraceback(exc, cut);
        Py_DECREF(tb);
    }
    PyException_SetContext(exc, NULL);
    Py_INCREF(exc);
    if (Py_AddPendingCall(handover_pending, exc) < 0) {
        Py_DECREF(exc);
        return -1;
    }
    return 0;
}

static PyObject *
shell_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    CallbackShell *sh = (CallbackShell *)self;
    PyThreadState *ts = PyThreadState_Get();
    int lent = 0;
    if (SH_LOW(ts)) {
        SH_ADD(ts, SHELL_FRAMES);
        lent = 1;
    }
    PyObject *r = PyObject_Vectorcall(sh->func, args, nargsf, kwnames);
    if (lent)
        SH_ADD(ts, -SHELL_FRAMES);
    if (r != NULL)
        return r;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyErr_NormalizeException(&et, &ev, &etb);
    if (etb != NULL && ev != NULL)
        PyException_SetTraceback(ev, etb);
    Py_XDECREF(et);
    Py_XDECREF(etb);
    PyObject *exc = ev;
#endif
    if (exc == NULL)
        Py_RETURN_NONE;
    if (!from_handler(exc) || handover(exc) < 0) {
        /* could not keep it: raised here, as without the shell */
        PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
#endif
        return NULL;
    }
    Py_DECREF(exc);
    Py_RETURN_NONE;
}

static PyObject *
shell_call(PyObject *self, PyObject *args, PyObject *kw)
{
    return PyVectorcall_Call(self, args, kw);
}

static int
shell_traverse(CallbackShell *sh, visitproc visit, void *arg)
{
    Py_VISIT(sh->func);
    Py_VISIT(Py_TYPE(sh));
    return 0;
}

static int
shell_clear(CallbackShell *sh)
{
    Py_CLEAR(sh->func);
    return 0;
}

static void
shell_dealloc(CallbackShell *sh)
{
    PyTypeObject *tp = Py_TYPE(sh);
    PyObject_GC_UnTrack(sh);
    shell_clear(sh);
    tp->tp_free((PyObject *)sh);
    Py_DECREF(tp);
}

static PyObject *
shell_repr(CallbackShell *sh)
{
    return PyUnicode_FromFormat("<fntrace callback %R>", sh->func);
}

static PyObject *
shell_get_wrapped(CallbackShell *sh, void *closure)
{
    return Py_NewRef(sh->func);
}

static PyGetSetDef shell_getset[] = {
    {"__wrapped__", (getter)shell_get_wrapped, NULL, "the callback inside", NULL},
    {NULL}
};

static PyMemberDef shell_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CallbackShell, vectorcall), READONLY},
    {NULL}
};

static PyType_Slot shell_slots[] = {
    {Py_tp_doc, "a pure-Python callback as CPython calls it (see callback_shell)"},
    {Py_tp_call, shell_call},
    {Py_tp_traverse, shell_traverse},
    {Py_tp_clear, shell_clear},
    {Py_tp_dealloc, shell_dealloc},
    {Py_tp_repr, shell_repr},
    {Py_tp_getset, shell_getset},
    {Py_tp_members, shell_members},
    {0, NULL},
};

static PyType_Spec shell_spec = {
    "fntrace.cli._launch.CallbackShell", sizeof(CallbackShell), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, shell_slots,
};

static PyObject *g_shell_type;

static PyObject *
callback_shell(PyObject *self, PyObject *func)
{
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "callback_shell(func): func is not callable");
        return NULL;
    }
    CallbackShell *sh = PyObject_GC_New(CallbackShell, (PyTypeObject *)g_shell_type);
    if (sh == NULL)
        return NULL;
    Py_INCREF(g_shell_type);     /* a heap type's instances hold it */
    sh->func = Py_NewRef(func);
    sh->vectorcall = shell_vectorcall;
    PyObject_GC_Track(sh);
    return (PyObject *)sh;
}

static PyObject *
callback_shell_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "callback_shell_setup(own_dir, from_handler)");
        return NULL;
    }
    Py_XSETREF(g_own_dir, Py_NewRef(args[0]));
    Py_XSETREF(g_from_handler, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static void
main_ident_in_child(void)
{
    g_main_ident = PyThread_get_thread_ident();
}

static int
shell_types_init(PyObject *m)
{
    g_shell_type = PyType_FromSpec(&shell_spec);
    if (g_shell_type == NULL)
        return -1;
    g_main_ident = PyThread_get_thread_ident();    /* imported on the main thread */
    /* a forked child's only thread is its main thread (CPython makes it so) */
    pthread_atfork(NULL, NULL, main_ident_in_child);
    return 0;
}

/* ident(obj): id(obj) without its audit event ("builtins.id"), which the program's
 * audit hooks would see each time a pure-Python callback looks a code object up */
static PyObject *
ident(PyObject *self, PyObject *obj)
{
    return PyLong_FromVoidPtr(obj);
}

static PyObject *
compile_program(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "compile_program(source, filename: str)");
        return NULL;
    }
    /* as builtin compile() sets them: a str is UTF-8 already (its coding cookie is
     * not read again); bytes are decoded by their cookie, UTF-8 without one */
    PyCompilerFlags cf = _PyCompilerFlags_INIT;
    cf.cf_flags = PyCF_SOURCE_IS_UTF8;
    const char *s;
    Py_ssize_t n;
    if (PyBytes_Check(args[0])) {
        s = PyBytes_AS_STRING(args[0]);
        n = PyBytes_GET_SIZE(args[0]);
    }
    else if (PyUnicode_Check(args[0])) {
        s = PyUnicode_AsUTF8AndSize(args[0], &n);
        if (s == NULL)
            return NULL;
        cf.cf_flags |= PyCF_IGNORE_COOKIE;
    }
    else {
        PyErr_SetString(PyExc_TypeError, "compile_program: source must be bytes or str");
        return NULL;
    }
    if (memchr(s, '\0', (size_t)n) != NULL)
        Py_RETURN_NONE;
    return Py_CompileStringObject(s, args[1], Py_file_input, &cf, -1);
}

static PyMethodDef launch_methods[] = {
    {"run_clean", (PyCFunction)(void (*)(void))run_clean, METH_FASTCALL,
     "run_clean(code, globals): exec code on a fresh stack (see the module doc)"},
    {"call_clean", call_clean, METH_O, "call_clean(func): func() on a fresh stack"},
    {"credit", credit, METH_O,
     "credit(n): n more frames of recursion for this thread, beyond the limit it sees"},
    {"call_untraced", call_untraced, METH_O,
     "call_untraced(func): func() with this thread's tracing suspended"},
    {"fatal_signals_install", (PyCFunction)(void (*)(void))fatal_signals_install,
     METH_FASTCALL, "fatal_signals_install(fd, signals) -> the signals now handled"},
    {"fatal_signals_restore", fatal_signals_restore, METH_NOARGS,
     "SIG_DFL again wherever fatal_signals_install's handler still is"},
    {"call_in_main", call_in_main, METH_O,
     "call_in_main(func) -> bool: func() on the main thread at its next bytecode"},
    {"ident", ident, METH_O, "ident(obj) -> id(obj), without the builtins.id audit event"},
    {"compile_program", (PyCFunction)(void (*)(void))compile_program, METH_FASTCALL,
     "compile_program(source, filename) -> the program's code object, compiled as the "
     "interpreter compiles a script (None: a NUL byte in it, see the module doc)"},
    {"callback_shell", callback_shell, METH_O,
     "callback_shell(func) -> func in a C shell: frames lent, a handler's exception "
     "handed to the program (see the module doc)"},
    {"callback_shell_setup", (PyCFunction)(void (*)(void))callback_shell_setup, METH_FASTCALL,
     "callback_shell_setup(own_dir, from_handler): fntrace's sources (cut from handed-over "
     "tracebacks), and the test for a Python signal handler's frame in a traceback"},
    {"wrap_fork", (PyCFunction)(void (*)(void))wrap_fork, METH_FASTCALL,
     "wrap_fork(real, before, after) -> os.fork (or forkpty) with before()/after() "
     "around it (after: in the parent only)"},
    {NULL}
};

static struct PyModuleDef launch_module = {
    PyModuleDef_HEAD_INIT, "fntrace.cli._launch",
    "The native part of fntrace's launcher: a fresh stack for the program, fatal "
    "signal handlers that let the trace be written out.",
    -1, launch_methods,
};

PyMODINIT_FUNC
PyInit__launch(void)
{
    PyObject *m = PyModule_Create(&launch_module);
    if (m == NULL)
        return NULL;
    if (shell_types_init(m) < 0 || PyModule_AddIntConstant(m, "CLEAN_STACK", CLEAN_STACK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
