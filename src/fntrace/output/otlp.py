"""OpenTelemetry: ``fntrace export FILE --format otlp [--min-duration USEC] -o spans.json``.

One span per call of a function_graph trace, nested as the calls were, written as
OTLP/JSON: JSON lines, each an ``ExportTraceServiceRequest`` of up to ``BATCH`` spans
(the OpenTelemetry Collector's file exporter and its ``otlpjsonfile`` receiver read
this form), built with the OpenTelemetry protos (``opentelemetry-proto``) and turned
into JSON by protobuf's ``json_format`` with the OTLP/JSON rules: ids as hex strings,
enums as integers, field names in lowerCamelCase::

    {"resourceSpans": [{"resource": {"attributes": [service.name, process.pid, ...]},
       "scopeSpans": [{"scope": {"name": "fntrace", "version": ...},
         "spans": [{"traceId": "5b8e...", "spanId": "1f2a...", "parentSpanId": "...",
                    "name": "shop.pricing.price_line", "kind": 1,
                    "startTimeUnixNano": "...", "endTimeUnixNano": "...",
                    "attributes": [code.function.name, thread.id, ...]}, ...]}]}]}

- the recording is one trace (one ``traceId``, made from the process id and the
  recording's start): its threads' outermost calls are its root spans;
- a span's id is made from its thread, depth and start, so its children, which end
  first, name it before it is written, and the same trace exports the same ids;
- times are Unix epoch ns: the trace clock (CLOCK_MONOTONIC for local, global, mono
  and perf) mapped through the recording's ``start_wall``/``start_mono`` pair; a trace
  without them, or on another clock, is aligned by its first event (said in a note);
- attributes: ``code.function.name``, ``code.file.path``, ``code.line.number``,
  ``thread.id``, ``thread.name``, and ``fntrace.args`` / ``fntrace.retval`` when
  recorded; a call an exception left has status ERROR with the exception's text
  (3.11's setprofile back end does not see which exception: no text there);
- ``--min-duration USEC`` keeps only calls that long or longer.  A parent lasts at
  least as long as its children, so a kept span's parent is kept too.

``--format otlp-proto`` writes the same requests as OTLP protobuf, each after its
length (4 bytes, big-endian): the Collector's file exporter's ``format: proto``, and
each request the body OTLP/HTTP posts as ``application/x-protobuf``.

A trace of calls alone (no arguments, return values or events) is written by the
native twin (_native_read.c's OtlpCalls, native/read_otlp.c.h) from the same pieces of
JSON, made here by the protos: the same bytes, a hundred times as fast.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .calls import Call, CallBuilder
from .entry import TRACE_EVENT, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents
from .ftrace_text import function_args_text
from .registry import Exporter, register_exporter
from .task_view import SwitchPoints

__all__ = ["OtlpExporter", "OtlpProtoExporter", "BATCH", "span_id", "trace_id"]

BATCH = 5_000

# trace clocks read from CLOCK_MONOTONIC (ring_buffer.TRACE_CLOCKS)
_MONOTONIC_CLOCKS = ("local", "global", "mono", "perf")


def _digest(n: int, *parts: object) -> bytes:
    d = hashlib.blake2b(repr(parts).encode(), digest_size=n).digest()
    return d if any(d) else b"\x01" + d[1:]         # an all-zero id is invalid


def trace_id(pid: int, start: object) -> bytes:
    return _digest(16, "trace", pid, start)


_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(h: int) -> int:
    """splitmix64's finalizer."""
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _M64
    return h ^ (h >> 31)


def span_id(pid: int, cpu: int, depth: int, start: int) -> bytes:
    """A call's span id: a 64-bit mix of what names it (its process, thread slot, depth
    and start), the same in the native twin (native/read_otlp.c.h): one per call of a
    trace, the same each time the trace is exported, never zero."""
    h = _GOLDEN
    for v in (pid, cpu, depth, start):
        h = _mix(((h ^ (v & _M64)) + _GOLDEN) & _M64)
    return (h or 1).to_bytes(8, "big")


_GUESSED = ("the trace does not say how its clock maps to wall time: its first event is "
            "placed at the recording's start")


def _status_error(retval: object) -> str | None:
    """The exception's text of a call an exception left ("raised X"; "raised" alone
    where the back end does not see the exception: the setprofile hook on 3.11)."""
    if isinstance(retval, str) and (retval == "raised" or retval.startswith("raised ")):
        return retval[len("raised "):]
    return None


class OtlpExporter(Exporter):
    name = "otlp"
    summary = "OpenTelemetry spans, OTLP/JSON lines: the Collector, Jaeger, Tempo"
    binary = False
    suffix = ".otlp.json"
    extra = "otlp"
    requires = ("opentelemetry.proto", "google.protobuf")
    options = {"min_duration": 0.0}
    proto = False

    # options: the command's values (min_duration a number), converted as read
    def write(self, source, out, options: Mapping[str, Any]) -> dict | None:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        from opentelemetry.proto.common.v1.common_pb2 import (
            AnyValue, InstrumentationScope, KeyValue,
        )
        from opentelemetry.proto.resource.v1.resource_pb2 import Resource
        from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

        __version__ = _version()

        min_ns = int(float(options.get("min_duration") or 0) * 1000)
        if min_ns < 0:
            raise ValueError("min_duration must be 0 or more")
        header = source.header or {}
        pid = int(source.pid or 0)
        notes: list[str] = []
        if source.tracer != "function_graph":
            notes.append(f"a {source.tracer} trace has no calls with durations: no spans "
                         "(record with -p function_graph)")

        def kv(key: str, value: object) -> KeyValue:
            if isinstance(value, bool):
                v = AnyValue(bool_value=value)
            elif isinstance(value, int):
                v = AnyValue(int_value=value)
            else:
                v = AnyValue(string_value=str(value))
            return KeyValue(key=key, value=v)

        argv = [str(a) for a in header.get("argv") or []]
        service = os.path.basename(argv[0]) if argv else "python"
        rattrs = [kv("service.name", service), kv("process.pid", pid),
                  kv("process.runtime.name", "cpython"),
                  kv("process.runtime.version", str(header.get("python", ""))),
                  kv("telemetry.sdk.name", "fntrace"),
                  kv("telemetry.sdk.version", __version__)]
        if argv:
            rattrs.append(kv("process.command_line", " ".join(argv)))
        resource = Resource(attributes=rattrs)
        scope = InstrumentationScope(name="fntrace", version=__version__)
        tid = trace_id(pid, header.get("start_wall"))
        where = source.places()

        # trace clock ns -> Unix ns
        offset: int | None = None
        wall, mono = header.get("start_wall"), header.get("start_mono")
        if wall is not None and mono is not None and source.trace_clock in _MONOTONIC_CLOCKS:
            offset = int(float(wall) * 1e9) - int(mono)

        spans: list = []
        kept = 0

        def flush() -> None:
            nonlocal spans
            if not spans:
                return
            req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
                resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])])
            if self.proto:
                b = req.SerializeToString(deterministic=True)
                out.write(len(b).to_bytes(4, "big") + b)
            else:
                out.write(_json(_request_dict(req, json_format)) + "\n")
            spans = []

        def span(c: Call) -> None:
            nonlocal kept
            if c.end - c.start < min_ns:
                return
            attrs = [kv("code.function.name", c.func), kv("thread.id", c.pid),
                     kv("thread.name", c.comm)]
            w = where.get(c.func)
            if w is not None:
                attrs += [kv("code.file.path", w[0]), kv("code.line.number", int(w[1]))]
            if c.args is not None:
                attrs.append(kv("fntrace.args", function_args_text(c.args)))
            if c.has_retval:
                attrs.append(kv("fntrace.retval", str(c.retval)))
            if not c.complete:
                attrs.append(kv("fntrace.incomplete", True))
            # --otel-context: in a span of the program's own, the call is in its trace,
            # and the outermost call made in it is that span's child
            ctx = otel.at(c.cpu, c.start) if otel.points else None
            s = Span(trace_id=ctx[0].to_bytes(16, "big") if ctx else tid,
                     span_id=span_id(pid, c.cpu, c.depth, c.start),
                     name=c.func, kind=Span.SPAN_KIND_INTERNAL,
                     # offset is set before the first entry is fed (the loop below)
                     start_time_unix_nano=max(0, c.start + offset),  # type: ignore[operator]
                     end_time_unix_nano=max(0, c.end + offset),  # type: ignore[operator]
                     attributes=attrs)
            if c.parent_key is not None and (
                    ctx is None or otel.at(c.cpu, c.parent_key[1]) == ctx):
                s.parent_span_id = span_id(pid, c.cpu, *c.parent_key)
            elif ctx is not None:
                s.parent_span_id = ctx[1].to_bytes(8, "big")
            err = _status_error(c.retval) if c.has_retval else None
            if err is not None:
                s.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=err))
            spans.append(s)
            kept += 1
            if len(spans) >= BATCH:
                flush()

        walked = _native_spans(source, out, resource, scope, tid, pid, min_ns, offset,
                               int(float(wall or 0) * 1e9), self.proto, flush_request=(
                                   ExportTraceServiceRequest, ResourceSpans, ScopeSpans,
                                   Span, json_format))
        if walked is not None:
            return _result(notes, *walked, min_ns)

        builder = CallBuilder()
        otel = SwitchPoints()
        total = 0
        guessed = False
        for e in source.entries():
            if offset is None and not isinstance(e, LostEvents):
                # no clock pair: the trace's first event is the recording's start
                offset = int(float(wall or 0) * 1e9) - e.ts
                guessed = True
            if isinstance(e, LostEvents) or e.type == TRACE_GRAPH_ENT or \
                    e.type == TRACE_GRAPH_RET:
                for c in builder.feed(e):
                    total += 1
                    span(c)
            elif e.type == TRACE_EVENT and e.func == OTEL_EVENT:
                otel.add(e.cpu, e.ts, otel_context_of(e.text or ""))
        for c in builder.finish():
            total += 1
            span(c)
        flush()
        return _result(notes, total, kept, guessed, min_ns)


def _result(notes: list[str], total: int, kept: int, guessed: bool, min_ns: int) -> dict | None:
    """The export's notes: how its clock was placed, what --min-duration left out."""
    if guessed and kept:
        notes.append(_GUESSED)
    if min_ns and total > kept:
        notes.append(f"{total - kept} of {total} call(s) under "
                     f"{min_ns / 1000:g} us left out (--min-duration)")
    return {"notes": notes} if notes else None


def _request_dict(req, json_format) -> dict:
    """An ExportTraceServiceRequest as OTLP/JSON's object."""
    d = json_format.MessageToDict(req, use_integers_for_enums=True)
    # OTLP/JSON: trace and span ids are hex, not protobuf JSON's base64
    for rs in d.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for sp in ss.get("spans", ()):
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in sp:
                        sp[k] = _b64_to_hex(sp[k])
    return d


def _json(d) -> str:
    import json
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


def _native_spans(source, out, resource, scope, tid: bytes, pid: int, min_ns: int,
                  offset: int | None, wall_ns: int, proto: bool,
                  flush_request) -> tuple[int, int, bool] | None:
    """The export of a trace of calls (graph entries and returns, with their arguments
    and return values as text or 64-bit ints; events, markers and function tracer hits
    passed over: they are no spans) by the native twin
    (_native_read.c's OtlpCalls): the same text as the loop in OtlpExporter.write.  (calls, spans, offset guessed); None, with
    nothing written, when there is no native twin or the trace holds more than calls.

    What is the same for every span (the resource and scope around a line of spans),
    the names and the attributes of each function and thread are made here, by the
    same protos and json.dumps as the loop's, and the walk puts them together."""
    import json

    from .. import _env
    from .registry import name_of
    from .walk import calls_only, canon_ids, drive
    native = _env.native()
    if native is None:
        return None
    # events and markers are passed over, unless one is a span's context (the
    # payloads are looked at as bytes: an argument holding the name declines too)
    otel = OTEL_EVENT.encode() + b"\0"

    def ok(records: bytes, payloads: bytes) -> bool:
        return native.calls_hits_ok(records, payloads) and otel not in payloads
    slots = calls_only(source, ok, True)
    if slots is None:
        return None
    Request, ResourceSpans, ScopeSpans, Span, json_format = flush_request
    if proto:
        return _native_proto_spans(native, source, out, slots, resource, scope, tid, pid,
                                   min_ns, offset, wall_ns, ResourceSpans, ScopeSpans, Span)
    # a line of one span, cut around it: what comes before and after the spans
    probe = Span(trace_id=tid, span_id=b"\x01" * 8, name="-", kind=Span.SPAN_KIND_INTERNAL)
    d = _request_dict(Request(resource_spans=[ResourceSpans(
        resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=[probe])])]),
        json_format)
    line = _json(d)
    one = _json(d["resourceSpans"][0]["scopeSpans"][0]["spans"][0])
    head, sep, tail = line.partition(one)
    if not sep or one in tail:
        return None                 # (the protos changed their JSON: the loop writes it)
    syms = source.symbols
    where = source.places()

    def js(v: str) -> str:
        return json.dumps(v, ensure_ascii=False)
    names: dict[int, str] = {}
    code: dict[int, str] = {}
    for ip in syms:
        name = name_of(ip, syms)
        names[ip] = js(name)
        w = where.get(name)
        if w is not None:
            code[ip] = (',{"key":"code.file.path","value":{"stringValue":' + js(str(w[0]))
                        + '}},{"key":"code.line.number","value":{"intValue":"'
                        + str(int(w[1])) + '"}}')
    threads = source.threads
    nslots = max(slots | set(threads), default=-1) + 1
    tails = {}
    for k in range(nslots):
        t, comm = threads.get(k, (0, "<...>"))
        tails[k] = (',{"key":"thread.id","value":{"intValue":"' + str(int(t))
                    + '"}},{"key":"thread.name","value":{"stringValue":' + js(comm) + '}}')
    walker = native.OtlpCalls(nslots, names, code, canon_ids(syms), tails, head,
                              tail + "\n", tid.hex(), pid & _M64, min_ns, offset, wall_ns,
                              BATCH, True)
    raw = _utf8_buffer(out)
    if raw is not None:
        out.flush()                 # (what the stream holds goes first)
        write = raw.write
    else:
        def write(b: bytes) -> None:
            out.write(b.decode("utf-8"))
    for text in drive(walker, source, nslots, payloads=True):
        write(text)
    return walker.counts()


def _native_proto_spans(native, source, out, slots, resource, scope, tid: bytes, pid: int,
                        min_ns: int, offset: int | None, wall_ns: int, ResourceSpans,
                        ScopeSpans, Span) -> tuple[int, int, bool]:
    """_native_spans for OTLP protobuf: the fields that are the same for many spans
    (the resource's, the scope's, a thread's and a function's code attributes) are
    serialized here by the protos, and the walk puts them together."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from .registry import name_of
    from .walk import canon_ids, drive

    def fields(**kw) -> bytes:
        return Span(**kw).SerializeToString(deterministic=True)

    def kv(key: str, value: object) -> KeyValue:
        v = AnyValue(int_value=value) if isinstance(value, int) else \
            AnyValue(string_value=str(value))
        return KeyValue(key=key, value=v)
    syms = source.symbols
    where = source.places()
    names: dict[int, str] = {}
    code: dict[int, bytes] = {}
    for ip in syms:
        name = name_of(ip, syms)
        names[ip] = name
        w = where.get(name)
        if w is not None:
            code[ip] = fields(attributes=[kv("code.file.path", str(w[0])),
                                          kv("code.line.number", int(w[1]))])
    threads = source.threads
    nslots = max(slots | set(threads), default=-1) + 1
    tails = {}
    for k in range(nslots):
        t, comm = threads.get(k, (0, "<...>"))
        tails[k] = fields(attributes=[kv("thread.id", int(t)), kv("thread.name", comm)])
    walker = native.OtlpCalls(
        nslots, names, code, canon_ids(syms), tails,
        ResourceSpans(resource=resource).SerializeToString(deterministic=True),
        ScopeSpans(scope=scope).SerializeToString(deterministic=True), tid.hex(),
        pid & _M64, min_ns, offset, wall_ns, BATCH, True, True)
    for data in drive(walker, source, nslots, payloads=True):
        out.write(data)
    return walker.counts()


def _utf8_buffer(out):
    """The binary file under a text stream that writes UTF-8 (the CLI's), else None."""
    import codecs
    raw = getattr(out, "buffer", None)
    enc = getattr(out, "encoding", None)
    try:
        if raw is not None and enc and codecs.lookup(enc).name == "utf-8":
            return raw
    except LookupError:
        pass
    return None


def _version() -> str:
    # (not fntrace.__version__: importing the package would load the tracing machinery)
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("fntrace")
    except PackageNotFoundError:
        return "unknown"


def _b64_to_hex(s: str) -> str:
    import base64
    return base64.b64decode(s).hex()


class OtlpProtoExporter(OtlpExporter):
    """The same spans as OTLP protobuf: each ExportTraceServiceRequest after its length
    (4 bytes, big-endian), as the OpenTelemetry Collector's file exporter writes them
    with ``format: proto``; one request is the body OTLP/HTTP posts as
    application/x-protobuf.  Under half of OTLP/JSON's size (about 220 bytes a span
    against 530), and its walk and encoding a fraction of the JSON's."""
    name = "otlp-proto"
    summary = ("OpenTelemetry spans, OTLP protobuf (length-prefixed requests, the "
               "Collector file exporter's format: proto)")
    binary = True
    suffix = ".otlp.pb"
    proto = True


register_exporter(OtlpExporter())
register_exporter(OtlpProtoExporter())


OTEL_EVENT = "otel:context"


def otel_context_of(text: str) -> tuple[int, int] | None:
    """(trace id, span id) of an otel:context event's text; None outside any span."""
    f = dict(w.split("=", 1) for w in text.split() if "=" in w)
    try:
        return int(f["trace_id"], 16), int(f["span_id"], 16)
    except (KeyError, ValueError):
        return None


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
