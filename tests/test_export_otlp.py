"""``fntrace export --format otlp``: OpenTelemetry spans as OTLP/JSON lines (output/otlp.py),
and ``--format otlp-proto``: the same requests as OTLP protobuf.

Each line is parsed by the OpenTelemetry protos (``ExportTraceServiceRequest``, after the
OTLP/JSON hex ids are turned back into protobuf JSON's base64, as a Collector's
receiver does), and the spans are compared with the calls of the text report: the same
calls, durations and nesting.
"""
from __future__ import annotations

import base64
import json
import re
import sys
import textwrap
from collections import Counter

import pytest

pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto (the otlp extra) "
                                                  "is not installed")
from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status  # noqa: E402

from support import CALLS_PROG, export_as, report_calls, run_python  # noqa: E402

HEX = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def parse(path) -> list[ExportTraceServiceRequest]:
    reqs = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    for key, n in HEX.items():
                        if key in sp:
                            assert re.fullmatch(f"[0-9a-f]{{{n}}}", sp[key]), (key, sp[key])
                            sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
        reqs.append(json_format.ParseDict(d, ExportTraceServiceRequest()))
    return reqs


def spans_of(reqs) -> list[Span]:
    return [s for r in reqs for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


def attrs(s) -> dict:
    out = {}
    for kv in s.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


def export(run_fntrace, dat, out, *more):
    return export_as("otlp", run_fntrace, dat, out, *more)


def test_spans_are_the_reports_calls_nested(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "s.json")
    reqs = parse(tmp_path / "s.json")
    res = {kv.key: kv.value for kv in reqs[0].resource_spans[0].resource.attributes}
    assert res["service.name"].string_value == "prog.py"
    assert res["process.pid"].int_value > 0
    spans = spans_of(reqs)
    want = report_calls(run_fntrace, calls_dat)
    assert Counter(s.name for s in spans) == Counter(f for _, f, _, _ in want)
    assert len({s.trace_id for s in spans}) == 1
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)                  # every span its own id
    roots = [s for s in spans if not s.parent_span_id]
    assert sorted(s.name for s in roots) == ["__main__.main", "__main__.mid"]
    assert len({attrs(s)["thread.id"] for s in roots}) == 2
    for s in spans:
        assert s.kind == Span.SPAN_KIND_INTERNAL
        assert s.start_time_unix_nano <= s.end_time_unix_nano
        if s.parent_span_id:
            p = by_id[s.parent_span_id]
            assert p.start_time_unix_nano <= s.start_time_unix_nano
            assert s.end_time_unix_nano <= p.end_time_unix_nano
            assert attrs(p)["thread.id"] == attrs(s)["thread.id"]
    leafs = [s for s in spans if s.name == "__main__.leaf"]
    assert {by_id[s.parent_span_id].name for s in leafs} == {"__main__.mid"}
    mids = [s for s in spans if s.name == "__main__.mid"]
    assert sorted(attrs(s)["fntrace.args"] for s in mids) == ["n=1", "n=2", "n=3", "n=3", "n=4"]
    a = attrs(leafs[0])
    assert a["code.file.path"].endswith("prog.py") and a["code.line.number"] == 5
    assert a["thread.name"] in ("MainThread", "worker")
    # durations as the report prints them (us, 3 decimals)
    durations = Counter((s.name, round((s.end_time_unix_nano - s.start_time_unix_nano) / 1000, 3))
                        for s in spans)
    for _, f, _, us in want:
        # the report cuts a duration to the kernel's width (14332.94 for 14332.946 us):
        # within one unit of its last printed digit
        unit = 10.0 ** us.as_tuple().exponent
        assert any(name == f and abs(d - float(us)) <= unit + 0.0001
                   for name, d in durations), (f, us)
    # an exception leaving a call: status ERROR with its text
    fails = next(s for s in spans if s.name == "__main__.fails")
    assert fails.status.code == Status.STATUS_CODE_ERROR
    # (3.11's setprofile hook sees that an exception left the call, not which one)
    assert fails.status.message == ("ValueError('no')" if sys.version_info >= (3, 12)
                                    else "")
    assert all(s.status.code == Status.STATUS_CODE_UNSET for s in spans if s is not fails
               and "fntrace.retval" in attrs(s)
               and not attrs(s)["fntrace.retval"].startswith("raised"))


def test_times_are_wall_clock_of_the_recording(calls_dat, run_fntrace, tmp_path):
    from fntrace.output.source import open_trace
    export(run_fntrace, calls_dat, tmp_path / "s.json")
    spans = spans_of(parse(tmp_path / "s.json"))
    start_wall = open_trace(calls_dat).header["start_wall"]
    first = min(s.start_time_unix_nano for s in spans) / 1e9
    # the program's first call comes after the recording starts, within seconds
    assert start_wall <= first < start_wall + 30, (start_wall, first)


def test_the_same_trace_exports_the_same_spans(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "a.json")
    export(run_fntrace, calls_dat, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()


def test_min_duration_keeps_slow_calls_and_their_parents(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "all.json")
    spans = spans_of(parse(tmp_path / "all.json"))
    durs = sorted(s.end_time_unix_nano - s.start_time_unix_nano for s in spans)
    cut_us = durs[len(durs) // 2] / 1000
    r = export(run_fntrace, calls_dat, tmp_path / "slow.json", "--min-duration", str(cut_us))
    kept = spans_of(parse(tmp_path / "slow.json"))
    assert 0 < len(kept) < len(spans)
    assert all(s.end_time_unix_nano - s.start_time_unix_nano >= cut_us * 1000 for s in kept)
    assert len(kept) == sum(d >= cut_us * 1000 for d in durs)
    ids = {s.span_id for s in kept}
    assert all(not s.parent_span_id or s.parent_span_id in ids for s in kept)
    assert f"{len(spans) - len(kept)} of {len(spans)} call(s) under" in r.stderr


def test_batches_of_spans_are_lines(tmp_script, run_fntrace, tmp_path):
    prog = tmp_script("def f(i):\n    return i\n\nfor i in range(12_000):\n    f(i)\n")
    r = run_fntrace("record", "-p", "function_graph", "-F", "__main__.f", "-o", "b.dat", prog)
    assert r.returncode == 0, r.stderr
    export(run_fntrace, "b.dat", "b.json")
    reqs = parse(tmp_path / "b.json")
    assert [len(spans_of([q])) for q in reqs] == [5000, 5000, 2000]
    export_as("otlp-proto", run_fntrace, "b.dat", "b.pb")
    assert parse_proto(tmp_path / "b.pb") == reqs


def parse_proto(path) -> list[ExportTraceServiceRequest]:
    """The requests of an otlp-proto export: each after its length, 4 bytes big-endian
    (the Collector file exporter's ``format: proto``)."""
    data = path.read_bytes()
    reqs, at = [], 0
    while at < len(data):
        n = int.from_bytes(data[at:at + 4], "big")
        assert at + 4 + n <= len(data), "a request cut short"
        reqs.append(ExportTraceServiceRequest.FromString(data[at + 4:at + 4 + n]))
        at += 4 + n
    return reqs


def test_protobuf_is_the_same_requests_as_json(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "s.json")
    r = export_as("otlp-proto", run_fntrace, calls_dat, tmp_path / "s.pb")
    assert r.returncode == 0, r.stderr
    as_json, as_proto = parse(tmp_path / "s.json"), parse_proto(tmp_path / "s.pb")
    assert as_proto == as_json and spans_of(as_proto)
    assert (tmp_path / "s.pb").stat().st_size * 2 < (tmp_path / "s.json").stat().st_size
    # --min-duration as for JSON; the default name: the trace's, .dat made .otlp.pb
    cut = export_as("otlp-proto", run_fntrace, calls_dat, tmp_path / "cut.pb",
                    "--min-duration", "1000000")
    assert parse_proto(tmp_path / "cut.pb") == [] and "left out" in cut.stderr
    r = run_fntrace("export", str(calls_dat), "--format", "otlp-proto")
    assert r.returncode == 0, r.stderr
    assert parse_proto(calls_dat.parent / (calls_dat.stem + ".otlp.pb")) == as_json


def test_a_function_trace_has_no_spans(tmp_script, run_fntrace, tmp_path):
    prog = tmp_script(CALLS_PROG)
    r = run_fntrace("record", "-p", "function", "-F", "__main__.*", "-o", "f.dat", prog)
    assert r.returncode == 0, r.stderr
    r = export(run_fntrace, "f.dat", "f.json")
    assert "no spans" in r.stderr and (tmp_path / "f.json").read_text() == ""


def test_missing_extra_is_named(calls_dat):
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "from fntrace.cli.main import main\n"
            f"sys.exit(main(['export', {str(calls_dat)!r}, '--format', 'otlp', '-o', 'x.json']))\n")
    r = run_python("-c", code, cwd=calls_dat.parent)
    assert r.returncode == 1 and "pip install 'fntrace[otlp]'" in r.stderr, r.stderr
    assert not (calls_dat.parent / "x.json").exists()


OTEL_PROG = textwrap.dedent("""\
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("shop")

    def price(n):
        return helper(n) * 2

    def helper(n):
        return n + 1

    def handle(n):
        with tracer.start_as_current_span("request") as span:
            ctx = span.get_span_context()
            print(f"span {ctx.trace_id:032x} {ctx.span_id:016x}")
            return price(n)

    def main():
        handle(1)
        handle(2)
        price(3)            # outside any span

    main()
    """)


def _spans_of(path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out.extend(ss["spans"])
    return out


@pytest.mark.parametrize("flag", [True, False])
def test_otel_context_joins_the_programs_trace(tmp_path, run_fntrace, flag):
    pytest.importorskip("opentelemetry.sdk.trace")
    (tmp_path / "ot.py").write_text(OTEL_PROG)
    r = run_fntrace("record", "-o", "t.dat", "-p", "function_graph",
                    *(["--otel-context"] if flag else []), "-F", "*:mod:__main__", "ot.py")
    assert r.returncode == 0, r.stderr
    theirs = [tuple(line.split()[1:]) for line in r.stdout.splitlines()
              if line.startswith("span ")]
    assert len(theirs) == 2
    rep = run_fntrace("report", "t.dat")
    assert ("otel:context: trace_id=" in rep.stdout) == flag
    ex = run_fntrace("export", "t.dat", "--format", "otlp", "-o", "t.json")
    assert ex.returncode == 0, ex.stderr
    spans = _spans_of(tmp_path / "t.json")
    by_id = {s["spanId"]: s for s in spans}
    prices = [s for s in spans if s["name"] == "__main__.price"]
    assert len(prices) == 3
    main = next(s for s in spans if s["name"] == "__main__.main")
    for s in spans:
        if s["name"] == "__main__.helper":      # always under its price()
            assert by_id[s["parentSpanId"]]["name"] == "__main__.price"
            assert by_id[s["parentSpanId"]]["traceId"] == s["traceId"]
    if flag:
        # the two calls made in the program's spans are those spans' children, in
        # their traces; the third is in fntrace's own trace, under main()
        joined = {(s["traceId"], s["parentSpanId"]) for s in prices}
        assert set(theirs) <= joined
        outside = [s for s in prices if (s["traceId"], s["parentSpanId"]) not in theirs]
        assert len(outside) == 1 and outside[0]["traceId"] == main["traceId"]
        assert by_id[outside[0]["parentSpanId"]]["name"] == "__main__.main"
    else:
        assert all(s["traceId"] == main["traceId"] for s in spans)
        assert all(by_id[s["parentSpanId"]]["name"] in ("__main__.handle", "__main__.main")
                   for s in prices)
