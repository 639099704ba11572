/*
 * fntrace._native's reading path: the native twins of the views that read a whole
 * trace file, one part per walk, compiled here as one translation unit (the module's
 * init calls fntrace_add_read_types).  Each walk reads the file's blocks as
 * TraceFile.record_blocks() hands them out -- a chunk's records decoded to the 32-byte
 * form, with the records its buffer lost before them -- and never makes a Python object
 * per record.  Each has its Python twin, the reference, which a walk leaves the view to
 * when it cannot give the same bytes (docs/internals.md, "The native reading path").
 *
 *     native/read_common.c.h      what every reader shares: its type, init's arguments
 *     native/read_stat.c.h        StatWalk: stat's rows, folded's call paths
 *     native/read_merge.c.h       the blocks of each slot, merged by time as heapq.merge
 *     native/read_graph_text.c.h  GraphText: function_graph's text (report)
 *     native/read_function_text.c.h  FunctionText: the function tracer's text (report)
 *     native/read_pair.c.h        entries and returns paired into calls (CallBuilder)
 *     native/read_chrome.c.h      ChromeCalls: the Chrome trace JSON's calls
 *     native/read_call_rows.c.h   CallRows: the Parquet table's calls (export, sql)
 *     native/read_dat_pages.c.h   DatPages: trace-cmd's ring-buffer pages
 *     native/read_perfetto.c.h    PerfettoCalls: the Perfetto trace's call packets
 *     native/read_index_rows.c.h  IndexRows: the browser's index of calls
 *     native/read_otlp.c.h        OtlpCalls: OpenTelemetry spans
 *     native/read_filter.c.h      RecordFilter: report's and stat's filters on the blocks
 *     native/read_columns.c.h     the Parquet table's column kernels (no pyarrow.compute)
 *     native/read_arrow_stream.c.h  those columns as an Arrow C stream (sql, no pyarrow)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fntrace_record_format.h"

#include "native/read_common.c.h"
#include "native/read_stat.c.h"
#include "native/read_merge.c.h"
#include "native/read_columns.c.h"
#include "native/read_graph_text.c.h"
#include "native/read_function_text.c.h"
#include "native/read_pair.c.h"
#include "native/read_chrome.c.h"
#include "native/read_call_rows.c.h"
#include "native/read_dat_pages.c.h"
#include "native/read_perfetto.c.h"
#include "native/read_index_rows.c.h"
#include "native/read_otlp.c.h"
#include "native/read_filter.c.h"
#include "native/read_arrow_stream.c.h"

static PyMethodDef read_functions[] = {
    {"text_ok", text_ok, METH_O,
     "text_ok(records) -> bool: GraphText prints this block as the Python printer does"},
    {"graph_text_ok", (PyCFunction)(void (*)(void))graph_text_ok, METH_FASTCALL,
     "graph_text_ok(records, payloads) -> bool: text_ok, arguments and return values "
     "allowed"},
    {"graph_events_ok", (PyCFunction)(void (*)(void))graph_events_ok, METH_FASTCALL,
     "graph_events_ok(records, payloads) -> bool: graph_text_ok, events and markers "
     "allowed (GraphText's comments)"},
    {"calls_hits_ok", (PyCFunction)(void (*)(void))calls_hits_ok, METH_FASTCALL,
     "calls_hits_ok(records, payloads) -> bool: graph_events_ok, function tracer hits "
     "allowed"},
    {"calls_or_hits_ok", (PyCFunction)(void (*)(void))calls_or_hits_ok, METH_FASTCALL,
     "calls_or_hits_ok(records, payloads) -> bool: graph_text_ok, function tracer hits "
     "allowed (CallRows' rows)"},
    {"function_text_ok", (PyCFunction)(void (*)(void))function_text_ok, METH_FASTCALL,
     "function_text_ok(records, payloads) -> bool: FunctionText prints this block as the "
     "Python printer does"},
    {"dict_encode_i32", dict_encode_i32, METH_O,
     "dict_encode_i32(values) -> (indices, dictionary): int32 values, distinct in the "
     "order they first come"},
    {"dict_encode_str", (PyCFunction)(void (*)(void))dict_encode_str, METH_FASTCALL,
     "dict_encode_str(n, validity, offsets, data) -> (indices, validity, dict_offsets, "
     "dict_data)"},
    {"gather_i32", (PyCFunction)(void (*)(void))gather_i32, METH_FASTCALL,
     "gather_i32(table, indices) -> (values, validity): negative table values are null"},
    {"gather_i64", (PyCFunction)(void (*)(void))gather_i64, METH_FASTCALL,
     "gather_i64(table, indices) -> values"},
    {"arrow_stream", (PyCFunction)(void (*)(void))arrow_stream, METH_FASTCALL,
     "arrow_stream(names, kinds, next) -> an Arrow C stream's PyCapsule"},
    {"bits_of_bytes", bits_of_bytes, METH_O,
     "bits_of_bytes(data) -> bitmap: bit r set where data[r] != 0"},
    {"index_visible", (PyCFunction)(void (*)(void))index_visible, METH_FASTCALL,
     "index_visible(parents, depths, r0, fold_depth, chain, shows_children) -> "
     "(rows, chain): the browser's rows that show (tui/graph.py)"},
    {NULL}
};

/* the walks' types, each under its name in the module (its spec's after the dot) */
static PyType_Spec *read_types[] = {
    &walk_spec, &gt_spec, &ft_spec, &dp_spec, &cr_spec, &cc_spec, &pf_spec, &oc_spec,
    &ir_spec, &rf_spec,
};

/* called by the module's init */
int
fntrace_add_read_types(PyObject *m)
{
    for (size_t i = 0; i < sizeof(read_types) / sizeof(read_types[0]); i++) {
        PyObject *t = PyType_FromSpec(read_types[i]);
        if (t == NULL)
            return -1;
        if (PyModule_AddObject(m, strrchr(read_types[i]->name, '.') + 1, t) < 0) {
            Py_DECREF(t);
            return -1;
        }
    }
    return PyModule_AddFunctions(m, read_functions);
}
