/*
 * fntrace._native: the module -- its method table and init.  The machinery is in the
 * parts native/<part>.c.h, one per mechanism, compiled here as one translation unit (why, and
 * which Python each part twins: native/native.h).
 */
#include "native/native.h"
#include "native/task.c.h"
#include "native/dispatch.c.h"
#include "native/c_calls.c.h"
#include "native/profile.c.h"
#include "native/ring_buffer.c.h"
#include "native/function.c.h"
#include "native/fgraph.c.h"
#include "native/fgraph_lane.c.h"
#include "native/function_graph.c.h"
#include "native/function_profile.c.h"
#include "native/payloads.c.h"
#include "native/crc32.c.h"
#include "native/profile_shim.c.h"
#include "native/stack.c.h"

/* the reading path's types (_native_read.c) */
int fntrace_add_read_types(PyObject *m);

/* -- init ---------------------------------------------------------------------------- */

static PyObject *
native_init(PyObject *self, PyObject *ns)
{
    if (!PyDict_Check(ns)) {
        PyErr_SetString(PyExc_TypeError, "init(namespace dict)");
        return NULL;
    }
    PyObject *rec_type, *G_type, *ops_type, *regs_type, *v;
    GET("sites", g_sites);
    GET("by_code", g_by_code);
    GET("no_site", g_no_site);
    g_sites_dict_for_cache = g_sites;
    g_by_code_dict_for_cache = g_by_code;
    g_no_site_dict_for_cache = g_no_site;
    GET("c_calls", g_c_calls);
    g_c_calls_dict_for_cache = g_c_calls;
    GET("c_sym", g_c_sym);
    GET("ROOT", g_root);
    GET("G", g_G);
    GET("contain", g_contain);
    GET("callback_errors", g_callback_errors);
    GET("parent_slow", g_parent_slow);
    GET("return_offsets", g_return_offsets);
    GET("NO_RETVAL", g_no_retval);
    GET("DISABLE", g_disable);
    GET("profile_resume", g_profile_resume);
    GET("profile_return", g_profile_return);
    GET("profile_chain", g_chain);
    GET("profile_chain_skip", g_chain_skip);
    GET("FtraceRegs", regs_type);
    g_regs_type = (PyTypeObject *)regs_type;
    GET("DynFtrace", rec_type);
    GET("Global", G_type);
    GET("Ops", ops_type);
    GET("REGS_EN", v);
    g_REGS_EN = PyLong_AsLongLong(v);
    GET("RET_EN", v);
    g_RET_EN = PyLong_AsLongLong(v);
    OFF(rec_type, "func", off_rec_func);
    OFF(rec_type, "ops", off_rec_ops);
    OFF(rec_type, "flags", off_rec_flags);
    OFF(rec_type, "ip", off_rec_ip);
    OFF(rec_type, "gen_start", off_rec_gen_start);
    OFF(G_type, "trace_function", off_G_trace_function);
    OFF(G_type, "trace_op", off_G_trace_op);
    OFF(G_type, "ret_handler", off_G_ret_handler);
    OFF(G_type, "resume_handler", off_G_resume_handler);
    OFF(G_type, "trap", off_G_trap);
    OFF(G_type, "c_calls", off_G_c_calls);
    OFF(regs_type, "frame", off_regs_frame);
    OFF(regs_type, "rec", off_regs_rec);
    OFF(regs_type, "regs", off_regs_regs);
    OFF(regs_type, "retval", off_regs_retval);
    OFF(ops_type, "private", off_ops_private);
    Py_RETURN_NONE;
}

/* bind_trace_array(TraceArray): the slots of the trace array that the tracers' native
 * callbacks read.  Called by trace.py, which defines the type: the hot path below it
 * learns the layout from it instead of importing it. */
static PyObject *
bind_trace_array(PyObject *self, PyObject *tr_type)
{
    if (!PyType_Check(tr_type)) {
        PyErr_SetString(PyExc_TypeError, "bind_trace_array(type)");
        return NULL;
    }
    OFF(tr_type, "tracing_on", off_tr_tracing_on);
    OFF(tr_type, "local", off_tr_local);
    OFF(tr_type, "serial", off_tr_serial);
    OFF(tr_type, "graph_fops", off_tr_graph_fops);
    OFF(tr_type, "graph_notrace_fops", off_tr_graph_notrace_fops);
    OFF(tr_type, "max_graph_depth", off_tr_max_graph_depth);
    OFF(tr_type, "tracing_thresh", off_tr_tracing_thresh);
    OFF(tr_type, "sleep_time", off_tr_sleep_time);
    OFF(tr_type, "lane_plain", off_tr_lane_plain);
    OFF(tr_type, "graph_args", off_tr_graph_args);
    OFF(tr_type, "graph_retval", off_tr_graph_retval);
    Py_RETURN_NONE;
}

static PyMethodDef native_methods[] = {
    {"init", native_init, METH_O, "init(namespace): share the Python side's state"},
    {"bind_trace_array", bind_trace_array, METH_O,
     "bind_trace_array(type): the trace array's slots the tracers' callbacks read"},
    {"ring_data", native_ring_data, METH_O,
     "ring_data(nbytes): a ring buffer's record storage (a bytearray, its bytes not set)"},
    {"trace_clock_now", native_trace_clock_now, METH_O,
     "trace_clock_now(clock): a reading of trace_clock number `clock` (trace.TRACE_CLOCKS)"},
    {"on_py_start", (PyCFunction)(void (*)(void))on_py_start, METH_FASTCALL, NULL},
    {"on_py_start_global", (PyCFunction)(void (*)(void))on_py_start_global, METH_FASTCALL, NULL},
    {"on_py_return", (PyCFunction)(void (*)(void))on_py_return, METH_FASTCALL, NULL},
    {"on_py_unwind", (PyCFunction)(void (*)(void))on_py_unwind, METH_FASTCALL, NULL},
    {"on_py_resume", (PyCFunction)(void (*)(void))on_py_resume, METH_FASTCALL, NULL},
    {"on_py_throw", (PyCFunction)(void (*)(void))on_py_throw, METH_FASTCALL, NULL},
    {"on_call", (PyCFunction)(void (*)(void))on_call, METH_FASTCALL, NULL},
    {"on_c_return", (PyCFunction)(void (*)(void))on_c_return, METH_FASTCALL, NULL},
    {"on_c_raise", (PyCFunction)(void (*)(void))on_c_raise, METH_FASTCALL, NULL},
    {"function_trace_call", (PyCFunction)(void (*)(void))function_trace_call, METH_FASTCALL, NULL},
    {"forget_cpu_buffer", forget_cpu_buffer, METH_NOARGS, NULL},
    {"busy_threads", busy_threads, METH_NOARGS, NULL},
    {"thread_exit", thread_exit, METH_NOARGS,
     "thread_exit(): the calling thread ends; its native state is freed"},
    {"cache_clear", cache_clear, METH_NOARGS, "forget the pointer caches (an entry was removed)"},
    {"cache_forget", cache_forget, METH_O, "forget one address (id) in the pointer caches"},
    {"init_fgraph", native_init_fgraph, METH_O, NULL},
    {"set_graph_twins", (PyCFunction)(void (*)(void))set_graph_twins, METH_FASTCALL, NULL},
    {"function_graph_enter", (PyCFunction)(void (*)(void))function_graph_enter, METH_FASTCALL, NULL},
    {"fgraph_return", (PyCFunction)(void (*)(void))fgraph_return, METH_FASTCALL, NULL},
    {"graph_entry", (PyCFunction)(void (*)(void))graph_entry, METH_FASTCALL, NULL},
    {"graph_return", (PyCFunction)(void (*)(void))graph_return, METH_FASTCALL, NULL},
    {"thread_count", thread_count, METH_O, NULL},
    {"profile_graph_entry", (PyCFunction)(void (*)(void))profile_graph_entry, METH_FASTCALL,
     "profile_graph_entry(trace, gops, fregs): the function profiler's entryfunc"},
    {"profile_graph_return", (PyCFunction)(void (*)(void))profile_graph_return, METH_FASTCALL,
     "profile_graph_return(trace, gops, fregs): the function profiler's retfunc"},
    {"bind_function_profiler", bind_function_profiler, METH_O,
     "bind_function_profiler(type): the profiler's slots its callbacks read"},
    {"value_text", value_text, METH_O,
     "value_text(v): core.fetch.value_repr's text made natively, None if not handled"},
    {"stack_bytes", stack_bytes, METH_O,
     "stack_bytes(frame): the data-stack bytes of the frames from frame down"},
    {"frame_var", (PyCFunction)(void (*)(void))frame_var, METH_FASTCALL,
     "frame_var(frame, name): a local's value without the f_locals snapshot"},
    {"crc32", (PyCFunction)(void (*)(void))native_crc32, METH_FASTCALL,
     "crc32(data, value=0): the same value as zlib.crc32, faster"},
    {"block", (PyCFunction)(void (*)(void))native_block, METH_FASTCALL,
     "block(tag, *parts): a trace file block, framed (head, body, CRC-32)"},
    {"chunk_block", (PyCFunction)(void (*)(void))native_chunk_block, METH_FASTCALL,
     "chunk_block(tag, cpu, records, first_seq, lost, max_len): a CHNK block of records "
     "without payloads, framed, with its first and last times"},
    {"fg_sync", (PyCFunction)(void (*)(void))fg_sync, METH_FASTCALL,
     "fg_sync(lane_tr, fast, epoch): who owns fgraph's fast lane"},
    {"encode_records", (PyCFunction)(void (*)(void))fntrace_encode_records, METH_FASTCALL,
     "encode_records(records): tracefile/codec.py's py_encode bytes, faster"},
    {"decode_records", (PyCFunction)(void (*)(void))fntrace_decode_records, METH_FASTCALL,
     "decode_records(data, n): tracefile/codec.py's py_decode records, faster"},
    {"varints", (PyCFunction)(void (*)(void))fntrace_varints, METH_FASTCALL,
     "varints(*values): tracefile/writer.py's _varints bytes, faster"},
    {"pack_payloads", (PyCFunction)(void (*)(void))fntrace_pack_payloads, METH_FASTCALL,
     "pack_payloads(records, first_seq, payloads, step, dumps): write_chunk's payload bytes"},
    {NULL}
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "fntrace._native",
    "The native twin of fntrace's hot path (see the Python modules it mirrors).",
    -1, native_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    crc_table_init();
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    g_have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    if (PyType_Ready(&ProfileHook_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL)
        return NULL;
    RingBuffer_Type = (PyTypeObject *)PyType_FromSpec(&RingBuffer_spec);
    if (RingBuffer_Type == NULL)
        return NULL;
    Py_INCREF(RingBuffer_Type);
    if (PyModule_AddObject(m, "RingBufferBase", (PyObject *)RingBuffer_Type) < 0)
        return NULL;
    Py_INCREF(&ProfileHook_Type);
    if (PyModule_AddObject(m, "ProfileHook", (PyObject *)&ProfileHook_Type) < 0)
        return NULL;
    if (PyType_Ready(&Shim_Type) < 0)
        return NULL;
    Py_INCREF(&Shim_Type);
    if (PyModule_AddObject(m, "ProfileShim", (PyObject *)&Shim_Type) < 0)
        return NULL;
    /* the function_graph tracer's fast-lane pair, handed to fgraph through FgraphOps */
    PyObject *lane = PyCapsule_New((void *)&graph_lane, LANE_CAPSULE, NULL);
    if (lane == NULL || PyModule_AddObject(m, "graph_lane", lane) < 0)
        return NULL;
    /* the function profiler's pair and its per-thread table */
    PyObject *plane = PyCapsule_New((void *)&profile_lane, LANE_CAPSULE, NULL);
    if (plane == NULL || PyModule_AddObject(m, "profile_lane", plane) < 0)
        return NULL;
    ProfileStat_Type = (PyTypeObject *)PyType_FromSpec(&ProfileStat_spec);
    if (ProfileStat_Type == NULL)
        return NULL;
    Py_INCREF(ProfileStat_Type);
    if (PyModule_AddObject(m, "ProfileStat", (PyObject *)ProfileStat_Type) < 0)
        return NULL;
    str_thread_stat = PyUnicode_InternFromString("thread_stat");
    if (str_thread_stat == NULL)
        return NULL;
    if (fntrace_add_read_types(m) < 0)
        return NULL;
    if (PyModule_AddStringConstant(m, "RECORD_FORMAT_ID", FNT_FORMAT_ID) < 0)
        return NULL;
    str_buf = PyUnicode_InternFromString("buf");
    str_cpu_buffer = PyUnicode_InternFromString("cpu_buffer");
    str_items = PyUnicode_InternFromString("items");
    str_append = PyUnicode_InternFromString("append");
    str_notify_fd = PyUnicode_InternFromString("notify_fd");
    str_pending = PyUnicode_InternFromString("pending");
    str_limit = PyUnicode_InternFromString("limit");
    str_closed = PyUnicode_InternFromString("closed");
    str_pid = PyUnicode_InternFromString("pid");
    str_hold = PyUnicode_InternFromString("hold");
    str_st = PyUnicode_InternFromString("st");
    str_entryfunc = PyUnicode_InternFromString("entryfunc");
    str_retfunc = PyUnicode_InternFromString("retfunc");
    str_ops = PyUnicode_InternFromString("ops");
    str_idx = PyUnicode_InternFromString("idx");
    str_private = PyUnicode_InternFromString("private");
    g_args_sep = PyUnicode_FromStringAndSize("\0", 1);
    if (g_args_sep == NULL)
        return NULL;
    if (str_buf == NULL || str_cpu_buffer == NULL || str_items == NULL || str_append == NULL
            || str_notify_fd == NULL || str_pending == NULL || str_limit == NULL
            || str_closed == NULL || str_pid == NULL || str_hold == NULL)
        return NULL;
    g_function_trace_call = PyObject_GetAttrString(m, "function_trace_call");
    if (g_function_trace_call == NULL)
        return NULL;
    g_fgraph_enter_fn = PyObject_GetAttrString(m, "function_graph_enter");
    g_fgraph_return_fn = PyObject_GetAttrString(m, "fgraph_return");
    g_zero = PyLong_FromLong(0);
    if (g_fgraph_enter_fn == NULL || g_fgraph_return_fn == NULL || g_zero == NULL)
        return NULL;
    return m;
}
