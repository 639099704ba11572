"""fprobe dynamic events through tracefs: ports of tools/testing/selftests/ftrace/test.d/dynevent/

  add_remove_fprobe.tc      f:myevent1 SYM, f:myevent2 SYM%return, -:myevent2,
                            echo > dynamic_events
  fprobe_entry_arg.tc       $arg1 on entry and on %return record the same value
  dynevent_limitations.tc   128 fetchargs accepted, 129 rejected
  add_remove_btfarg.tc      parameter names, $argN named after its parameter, $arg*
  fprobe_syntax_errors.tc   each parse error: error_log caret (ftrace_errlog_check), and
                            the events already defined are left alone

and fprobetrace.rst: default event names, fetchargs (attribute and item access, $comm,
$stack, $retval, types), the entry/exit line formats in ``trace`` alone, among function
tracer lines and as comments in a function_graph trace; EBUSY for an event in use; a SYM
in a module imported later; the ``fntrace`` command's ``-e``.  Also: dynamic_events and
the event's definition list each fetcharg as written (trace_fprobe_show prints
parg->comm), and the types annotations name play BTF (NO_RETVAL, NO_PTR_STRCT,
NO_BTF_FIELD, BAD_TYPE4STR), read from the source without evaluating it.
"""
from __future__ import annotations

import errno
import re
import textwrap
import threading

import pytest

from fntrace.errors import FntraceError
from fntrace.events.probe_parse import ERRORS
from fntrace.tracefs import Tracefs

from support import EVENT_LINE, entry_texts, errlog_check, run_python, trace_texts

MOD = """
    def work(a, b='x'):
        return a

    def caller():
        r = work(1, 'x')
        return r

    def mutate(a):
        a = a + 100
        return a

    def vfs_read(file, buf, count, pos):
        return count

    def kfree(object):
        return None

    class Req:
        def __init__(self, host, name):
            self.headers = {'Host': host}
            self.name = name
            self.parts = ['p0', 'p1']

    def handle(req):
        return req.name

    class Shop:
        def price(self, item, qty=1):
            return qty * 2

    def outer():
        def inner(q):
            return q * 3
        return inner(5)

    def values(v):
        return v

    class BadRepr:
        def __repr__(self):
            raise RuntimeError("no repr")

        def __str__(self):
            raise RuntimeError("no str")

    class Huge:
        def __repr__(self):
            return "h" * 100000

        def __str__(self):
            return "s" * 100000

    def comp():
        return [work(i) for i in range(1)]

    def depth2():
        return caller()
"""


# ---------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("new_fs")


@pytest.fixture
def fs(new_fs):
    return new_fs()


@pytest.fixture
def m(write_module):
    return write_module(MOD, hint="dynmod")


def listing(fs: Tracefs) -> list[str]:
    return fs.read("dynamic_events").splitlines()


def line_of(mod, func: str, needle: str) -> int:
    """Line offset of ``needle`` inside ``func``'s source, from its def line."""
    src = textwrap.dedent(MOD).splitlines()
    start = next(i for i, l in enumerate(src) if l.lstrip().startswith(f"def {func}("))
    return next(i for i in range(start, len(src)) if needle in src[i]) - start


# ---------------------------------------------------------------------------------
# add_remove_fprobe.tc
# ---------------------------------------------------------------------------------

def test_add_remove_fprobe(fs, m):
    sym = f"{m.__name__}.work"
    fs.write("dynamic_events", f"f:myevent1 {sym}", append=True)
    fs.write("dynamic_events", f"f:myevent2 {sym}%return", append=True)
    assert listing(fs) == [f"f:fprobes/myevent1 {sym}", f"f:fprobes/myevent2 {sym}%return"]
    assert {"myevent1", "myevent2"} <= set(fs.ls("events/fprobes"))
    for ev in ("myevent1", "myevent2"):
        assert set(fs.ls(f"events/fprobes/{ev}")) >= {"enable", "filter", "trigger", "format", "id"}
        assert fs.read(f"events/fprobes/{ev}/enable") == "0\n"
    assert "fprobes:myevent1" in fs.read("available_events").splitlines()

    fs.write("dynamic_events", "-:myevent2", append=True)
    assert listing(fs) == [f"f:fprobes/myevent1 {sym}"]
    assert "myevent2" not in fs.ls("events/fprobes")
    assert "myevent1" in fs.ls("events/fprobes")
    with pytest.raises(FntraceError):
        fs.read("events/fprobes/myevent2/enable")

    fs.write("dynamic_events", f"f:myevent3 {sym}", append=True)
    fs.write("dynamic_events", "-:fprobes/myevent3", append=True)
    assert listing(fs) == [f"f:fprobes/myevent1 {sym}"]

    fs.write("dynamic_events", "")
    assert fs.read("dynamic_events") == ""
    assert "fprobes" not in fs.ls("events")


def test_removing_an_unknown_event_fails(fs, m):
    fs.write("dynamic_events", f"f:keep {m.__name__}.work", append=True)
    with pytest.raises(FntraceError) as ei:
        fs.write("dynamic_events", "-:no_such_event", append=True)
    assert ei.value.errno == errno.ENOENT
    assert listing(fs) == [f"f:fprobes/keep {m.__name__}.work"]


def test_dynamic_events_is_shared_but_event_files_are_per_instance(fs, m, new_fs):
    other = new_fs()
    fs.write("dynamic_events", f"f:shared {m.__name__}.work a", append=True)
    assert listing(other) == listing(fs)
    fs.write("events/fprobes/shared/enable", "1")
    assert other.read("events/fprobes/shared/enable") == "0\n"
    m.work(1)
    assert trace_texts(fs) == [f"shared: ({m.__name__}.work+0) a=1"]
    assert trace_texts(other) == []
    other.write("events/fprobes/shared/enable", "1")
    m.work(2)
    assert trace_texts(other) == [f"shared: ({m.__name__}.work+0) a=2"]
    assert len(trace_texts(fs)) == 2


def test_event_ids_are_unique(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:ida {n}.work\nf:idb {n}.values\n", append=True)
    fs.write("dynamic_events", "-:ida", append=True)
    fs.write("dynamic_events", f"f:idc {n}.work", append=True)
    ids = [fs.read(f"events/fprobes/{e}/id").strip() for e in ("idb", "idc")]
    assert all(i.isdigit() for i in ids)
    assert ids[0] != ids[1], "two live events share an id"


# ---------------------------------------------------------------------------------
# fprobe_entry_arg.tc, dynevent_limitations.tc, add_remove_btfarg.tc
# ---------------------------------------------------------------------------------

def test_fprobe_entry_arg(fs, m):
    sym = f"{m.__name__}.mutate"
    fs.write("dynamic_events", f"f:ent {sym} arg=$arg1\nf:ret {sym}%return arg=$arg1 r=$retval\n",
             append=True)
    fs.write("events/fprobes/enable", "1")
    assert m.mutate(5) == 105
    texts = trace_texts(fs)
    assert len(texts) == 2
    assert texts[0] == f"ent: ({sym}+0) arg=5"
    # the %return probe records the value the argument had at entry
    assert texts[1].startswith("ret: (") and texts[1].endswith(f" <- {sym}) arg=5 r=105")


def test_dynevent_limitations_128_args(fs, m):
    sym = f"{m.__name__}.vfs_read"
    cmd = f"f:lim {sym} " + " ".join(f"\\{i}" for i in range(1, 129))
    fs.write("dynamic_events", cmd, append=True)
    assert len(listing(fs)[0].split()) == 2 + 128
    fs.write("events/fprobes/lim/enable", "1")
    m.vfs_read(1, 2, 3, 4)
    (text,) = trace_texts(fs)
    assert text.endswith(" arg128=128")
    fs.write("events/fprobes/lim/enable", "0")
    fs.write("dynamic_events", "")
    fs.write("error_log", "")
    with pytest.raises(FntraceError):
        fs.write("dynamic_events", cmd + " \\129", append=True)
    assert fs.read("dynamic_events") == ""
    log = fs.read("error_log")
    assert "trace_fprobe: error: " + ERRORS["TOO_MANY_ARGS"] in log
    # the caret under the first argument (trace_probe_log_set_index(2))
    assert len(log.splitlines(keepends=True)[-1]) == 13 + cmd.index("\\1")


def test_btfarg_parameter_names(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:fpevent {n}.kfree object", append=True)
    fs.write("dynamic_events", f"f:fpevent2 {n}.kfree $arg1", append=True)
    fs.write("dynamic_events", f"f:fpevent3 {n}.vfs_read $arg*", append=True)
    fs.write("dynamic_events", f"f:fpevent4 {n}.vfs_read%return $retval $arg3", append=True)
    fs.write("dynamic_events", f"f:fpevent5 {n}.handle%return name=$retval:string", append=True)
    assert listing(fs) == [
        f"f:fprobes/fpevent {n}.kfree object=object",
        f"f:fprobes/fpevent2 {n}.kfree object=object",
        f"f:fprobes/fpevent3 {n}.vfs_read file=file buf=buf count=count pos=pos",
        f"f:fprobes/fpevent4 {n}.vfs_read%return arg1=$retval count=count",
        f"f:fprobes/fpevent5 {n}.handle%return name=$retval:string",
    ]
    fs.write("events/fprobes/enable", "1")
    m.kfree("obj")
    m.vfs_read("f", "b", 3, 0)
    m.handle(m.Req("h", "nm"))
    texts = trace_texts(fs)
    assert texts[0] == f"fpevent: ({n}.kfree+0) object='obj'"
    assert texts[1] == f"fpevent2: ({n}.kfree+0) object='obj'"
    assert texts[2] == f"fpevent3: ({n}.vfs_read+0) file='f' buf='b' count=3 pos=0"
    assert texts[3].startswith("fpevent4: (") and texts[3].endswith(
        f" <- {n}.vfs_read) arg1=3 count=3")
    assert texts[4].endswith(f" <- {n}.handle) name=\"nm\"")


def test_default_event_names_make_dots_safe(fs, m):
    n = m.__name__
    safe = n.replace(".", "_")
    fs.write("dynamic_events", f"f {n}.Shop.price item\nf {n}.Shop.price%return $retval\n"
             f"f {n}.outer.<locals>.inner q\n", append=True)
    events = set(fs.ls("events/fprobes"))
    assert {f"{safe}_Shop_price__entry", f"{safe}_Shop_price__exit",
            f"{safe}_outer__locals__inner__entry"} <= events
    for e in events:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", e)
    fs.write("events/fprobes/enable", "1")
    assert m.Shop().price("apple", qty=3) == 6
    assert m.outer() == 15
    texts = trace_texts(fs)
    assert texts[0] == f"{safe}_Shop_price__entry: ({n}.Shop.price+0) item='apple'"
    assert texts[1].startswith(f"{safe}_Shop_price__exit: (") and texts[1].endswith(
        f" <- {n}.Shop.price) arg1=6")
    assert texts[2] == f"{safe}_outer__locals__inner__entry: ({n}.outer.<locals>.inner+0) q=5"


# ---------------------------------------------------------------------------------
# Fetchargs
# ---------------------------------------------------------------------------------

def test_attribute_and_item_access(fs, m):
    n = m.__name__
    fs.write("dynamic_events",
             f"f:acc {n}.handle host=req.headers['Host'] h2=req.headers[\"Host\"] "
             f"nm=req->name nm2=req.name:string p=req.parts[1] last=req.parts[-1]",
             append=True)
    assert listing(fs) == [
        f"f:fprobes/acc {n}.handle host=req.headers['Host'] h2=req.headers[\"Host\"] "
        f"nm=req->name nm2=req.name:string p=req.parts[1] last=req.parts[-1]"]
    fs.write("events/fprobes/acc/enable", "1")
    assert m.handle(m.Req("example.org", "req1")) == "req1"
    assert trace_texts(fs) == [
        f"acc: ({n}.handle+0) host='example.org' h2='example.org' nm='req1' "
        f"nm2=\"req1\" p='p1' last='p1'"]


def test_fetchargs_read_back_as_written(fs, m):
    # trace_fprobe_show() prints "name=comm" for each argument, parg->comm being the
    # FETCHARG (and its :TYPE) as written; an unnamed $argN is the parameter's name
    # (traceprobe_expand_meta_args rewrote the word before it was parsed).
    n = m.__name__
    cmds = [f"f:g/e {n}.handle%return path=$retval->name:string",
            f"f:g/acc {n}.handle h=req.headers[\"Host\"] i=req->parts[0x1] c=$COMM:string "
            f"$arg1->name x=$arg1->parts[-0x1]:repr",
            f"f:g/imm {n}.work \\+5:s8 \\\"ab\" s=$stack"]
    want = [f"f:g/e {n}.handle%return path=$retval->name:string",
            f"f:g/acc {n}.handle h=req.headers[\"Host\"] i=req->parts[0x1] c=$COMM:string "
            f"arg4=req->name x=$arg1->parts[-0x1]:repr",
            f"f:g/imm {n}.work arg1=\\+5:s8 arg2=\\\"ab\" s=$stack"]
    for cmd in cmds:
        fs.write("dynamic_events", cmd, append=True)
    assert listing(fs) == want
    # the event's own definition says the same
    from fntrace.events.core import find_event_call
    assert [find_event_call("g", e).definition for e in ("e", "acc", "imm")] == want
    # and what is listed defines the same events again
    fs.write("dynamic_events", "")
    fs.write("dynamic_events", "\n".join(want) + "\n", append=True)
    assert listing(fs) == want
    fs.write("events/g/acc/enable", "1")
    m.handle(m.Req("example.org", "req1"))
    assert trace_texts(fs) == [f"acc: ({n}.handle+0) h='example.org' i='p1' c=\"MainThread\" "
                               f"arg4='req1' x='p1'"]


def test_the_same_argument_written_another_way_joins_the_event(fs, m):
    # trace_probe_compare_arg_type compares names and types, not how they are written
    n = m.__name__
    fs.write("dynamic_events", f"f:fprobes/multi {n}.work x=a->real", append=True)
    fs.write("dynamic_events", f"f:fprobes/multi {n}.mutate x=a.real", append=True)
    assert listing(fs) == [f"f:fprobes/multi {n}.work x=a->real",
                           f"f:fprobes/multi {n}.mutate x=a.real"]


def test_self_attribute(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:meth {n}.Shop.price cls=self.__class__.__name__ item qty",
             append=True)
    fs.write("events/fprobes/meth/enable", "1")
    m.Shop().price("pear")
    assert trace_texts(fs) == [f"meth: ({n}.Shop.price+0) cls='Shop' item='pear' qty=1"]


def test_comm_stack_and_retval(fs, m):
    n = m.__name__
    fs.write("dynamic_events",
             f"f:ctx {n}.work c=$comm:string c2=$comm s0=$stack0 s1=$stack1 "
             f"d=$stack\nf:rv {n}.work%return r=$retval r2=$retval:s64\n", append=True)
    fs.write("events/fprobes/enable", "1")
    t = threading.Thread(target=m.depth2, name="fetcher")
    t.start()
    t.join(60)
    texts = trace_texts(fs)
    assert len(texts) == 2
    head = f"ctx: ({n}.work+0) c=\"fetcher\" c2="
    assert texts[0].startswith(head)
    rest = texts[0][len(head):]
    mt = re.fullmatch(r"(?P<c2>\S+) s0='(?P<s0>[^']*)' s1='(?P<s1>[^']*)' d=(?P<d>\d+)", rest)
    assert mt, texts[0]
    assert "fetcher" in mt.group("c2")
    assert mt.group("s0") == f"{n}.caller"
    assert mt.group("s1") == f"{n}.depth2"
    assert int(mt.group("d")) >= 3
    assert texts[1].endswith(f" <- {n}.work) r=1 r2=1")


def test_each_thread_is_named_in_its_event_lines(fs, m):
    # The comm column (and the comm the filters see) is the name of the thread that
    # fired the event, also for a thread started after another one has ended (threads
    # that do not overlap in time often get the same threading.get_ident()).
    n = m.__name__
    fs.write("dynamic_events", f"f:who {n}.values v c=$comm:string", append=True)
    fs.write("events/fprobes/who/enable", "1")
    names = [f"seq{i}" for i in range(12)]
    for name in names:
        t = threading.Thread(target=m.values, args=(name,), name=name)
        t.start()
        t.join(60)
    got = []
    for line in fs.read("trace").splitlines():
        mt = EVENT_LINE.match(line)
        if mt:
            got.append((mt.group("comm").strip(), mt.group("text")))
    assert [c for c, _ in got] == names
    assert [t for _, t in got] == [f"who: ({n}.values+0) v='{x}' c=\"{x}\"" for x in names]


def test_immediates(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:imm {n}.values i=\\123 h=\\0x1f:x8 neg=\\-1:s8 s=\\\"hi\"",
             append=True)
    fs.write("events/fprobes/imm/enable", "1")
    m.values(0)
    (text,) = trace_texts(fs)
    assert text.startswith(f"imm: ({n}.values+0) i=123 h=0x1f neg=-1 s=")
    assert "hi" in text.split(" s=", 1)[1]


TYPE_CASES = [
    (-5, "s64", "-5"),
    (5, "s64", "5"),
    (-1, "u64", str(2 ** 64 - 1)),
    (255, "x64", "0xff"),
    (-1, "x32", "0xffffffff"),
    (200, "s8", "-56"),
    (300, "u8", "44"),
    (0x1234, "x8", "0x34"),
    ([], "bool", "0"),
    ([0], "bool", "1"),
    ("abc", "len", "3"),
    ({"k": 1, "j": 2}, "len", "2"),
    (42, "string", '"42"'),
    ("plain", "string", '"plain"'),
    ("q", "repr", "'q'"),
    ([1, 2], "repr", "[1, 2]"),
    (True, "s64", "1"),
]


@pytest.mark.parametrize("value,typ,text", TYPE_CASES,
                         ids=[f"{t}-{v!r}" for v, t, _ in TYPE_CASES])
def test_fetcharg_types(fs, m, value, typ, text):
    n = m.__name__
    fs.write("dynamic_events", f"f:typed {n}.values v=v:{typ}", append=True)
    fs.write("events/fprobes/typed/enable", "1")
    assert m.values(value) is value
    assert trace_texts(fs) == [f"typed: ({n}.values+0) v={text}"]


def test_untyped_values_are_reprs(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:untyped {n}.values v", append=True)
    fs.write("events/fprobes/untyped/enable", "1")
    for v in (1, "x", None, (1, "a")):
        m.values(v)
    assert trace_texts(fs) == [f"untyped: ({n}.values+0) v={r}"
                               for r in ("1", "'x'", "None", "(1, 'a')")]


def test_faults_never_reach_the_program(fs, m):
    n = m.__name__
    fs.write("dynamic_events",
             f"f:flt {n}.values miss=v.no_such_attr key=v['nokey'] idx=v[7] num=v:s64 "
             f"ln=v:len s=v:string r=v", append=True)
    fs.write("events/fprobes/flt/enable", "1")
    bad = m.BadRepr()
    huge = m.Huge()
    big_list = list(range(100000))
    for v in (bad, huge, big_list, 3):
        assert m.values(v) is v
    texts = trace_texts(fs)
    assert len(texts) == 4
    for text in texts:
        assert len(text) < 2000, text[:300]
    fields = [dict(re.findall(r"(\w+)=((?:\"[^\"]*\"|'[^']*'|<[^>]*>|\[[^\]]*\]|\S)+)", t))
              for t in texts]
    for f in fields:
        assert f["miss"] == "(fault)"
        assert f["key"] == "(fault)"
    assert fields[0]["num"] == "(fault)" and fields[0]["ln"] == "(fault)"
    assert fields[0]["s"] == "(fault)"               # str() raised
    assert fields[1]["ln"] == "(fault)"
    assert fields[2]["ln"] == "100000"
    assert fields[3]["idx"] == "(fault)" and fields[3]["num"] == "3"
    assert fields[3]["ln"] == "(fault)"


# ---------------------------------------------------------------------------------
# Line formats
# ---------------------------------------------------------------------------------

def test_entry_and_exit_line_format(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:ein {n}.work a b\nf:eout {n}.work%return a $retval\n",
             append=True)
    fs.write("events/fprobes/enable", "1")
    assert m.caller() == 1
    off = line_of(m, "caller", "work(1, 'x')")
    lines = [l for l in fs.read("trace").splitlines() if not l.startswith("#")]
    assert len(lines) == 2
    assert re.fullmatch(
        rf" {{6}}MainThread-\d+ +\[\d{{3}}\] +\d+\.\d{{6}}: ein: \({re.escape(n)}\.work\+0\) "
        rf"a=1 b='x'", lines[0]), lines[0]
    assert re.fullmatch(
        rf" {{6}}MainThread-\d+ +\[\d{{3}}\] +\d+\.\d{{6}}: eout: "
        rf"\({re.escape(n)}\.caller\+{off} <- {re.escape(n)}\.work\) a=1 arg2=1",
        lines[1]), lines[1]
    header = [l for l in fs.read("trace").splitlines() if l.startswith("#")]
    assert header[0] == "# tracer: nop"


def test_exit_line_of_a_call_made_in_a_list_comprehension(fs, m):
    # The return address is in the function around the comprehension on every version
    # (3.11 runs a comprehension in a frame of its own, 3.12+ inlines it).
    n = m.__name__
    fs.write("dynamic_events", f"f:cx {n}.work%return a", append=True)
    fs.write("events/fprobes/cx/enable", "1")
    m.comp()
    off = line_of(m, "comp", "work(i)")
    assert trace_texts(fs) == [f"cx: ({n}.comp+{off} <- {n}.work) a=0"]


def test_trace_pipe_gives_the_same_lines_and_consumes_them(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:pp {n}.work a", append=True)
    fs.write("events/fprobes/pp/enable", "1")
    m.work(4)
    assert trace_texts(fs, "trace_pipe") == [f"pp: ({n}.work+0) a=4"]
    assert trace_texts(fs, "trace_pipe") == []


def test_events_interleave_with_function_tracer_lines(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:fin {n}.work a\nf:fout {n}.work%return r=$retval\n",
             append=True)
    fs.write("set_ftrace_filter", f"{n}.caller {n}.work")
    fs.write("current_tracer", "function")
    fs.write("events/fprobes/enable", "1")
    m.caller()
    fs.write("tracing_on", "0")
    raw = [l for l in fs.read("trace").splitlines() if not l.startswith("#")]
    texts = [EVENT_LINE.match(l).group("text") for l in raw]
    ts = [float(EVENT_LINE.match(l).group("ts")) for l in raw]
    assert ts == sorted(ts)
    assert len(texts) == 4, texts
    i_caller = next(i for i, t in enumerate(texts) if t.startswith(f"{n}.caller <-"))
    i_work = texts.index(f"{n}.work <-{n}.caller")
    i_in = texts.index(f"fin: ({n}.work+0) a=1")
    i_out = next(i for i, t in enumerate(texts) if t.startswith("fout: ("))
    assert i_caller < i_work < i_out
    assert i_caller < i_in < i_out
    assert i_out == 3


def test_events_are_comments_in_a_function_graph_trace(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:gin {n}.work a\nf:gout {n}.work%return r=$retval\n",
             append=True)
    fs.write("set_ftrace_filter", f"{n}.caller {n}.work")
    fs.write("current_tracer", "function_graph")
    fs.write("events/fprobes/enable", "1")
    m.caller()
    fs.write("tracing_on", "0")
    lines = [l for l in fs.read("trace").splitlines() if not l.startswith("#")]
    body = [l.split("|", 1)[1].strip() if "|" in l else l.strip() for l in lines]
    i_caller = body.index(f"{n}.caller() {{")
    i_work = next(i for i, b in enumerate(body) if b in (f"{n}.work() {{", f"{n}.work();"))
    i_in = body.index(f"/* gin: ({n}.work+0) a=1 */")
    off = line_of(m, "caller", "work(1, 'x')")
    i_out = body.index(f"/* gout: ({n}.caller+{off} <- {n}.work) r=1 */")
    # Both comments inside caller's block, in the order the events happened; where they
    # fall relative to work's own line depends on which callback was registered first.
    assert i_caller < i_in < i_out < len(body) - 1
    assert i_caller < i_work
    assert body[-1] == "}"
    assert len(body) in (5, 6)


def test_format_file(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:fmt {n}.work a b\nf:fmtr {n}.work%return r=$retval\n",
             append=True)
    text = fs.read("events/fprobes/fmt/format")
    assert text.startswith("name: fmt\nID: ")
    assert "__probe_ip;" in text and " a;" in text and " b;" in text
    fmt_line = [l for l in text.splitlines() if l.startswith("print fmt: ")]
    assert fmt_line and "REC->__probe_ip" in fmt_line[0] and "REC->a" in fmt_line[0]
    assert "REC->r" in fs.read("events/fprobes/fmtr/format")


# ---------------------------------------------------------------------------------
# Busy events and parse errors
# ---------------------------------------------------------------------------------

def test_removing_an_enabled_event_is_ebusy_and_changes_nothing(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:busy {n}.work a\nf:idle {n}.values v\n", append=True)
    fs.write("events/fprobes/busy/enable", "1")
    before = listing(fs)
    for cmd, append in (("-:busy", True), ("-:fprobes/busy", True), ("", False),
                        (f"f:new {n}.values", False)):
        with pytest.raises(FntraceError) as ei:
            fs.write("dynamic_events", cmd, append=append)
        assert ei.value.errno == errno.EBUSY
        assert listing(fs) == before
    m.work(7)
    assert trace_texts(fs) == [f"busy: ({n}.work+0) a=7"]
    assert fs.read("events/fprobes/busy/enable") == "1\n"
    fs.write("events/fprobes/busy/enable", "0")
    fs.write("dynamic_events", "-:busy", append=True)
    assert listing(fs) == [f"f:fprobes/idle {n}.values v=v"]


def test_an_event_with_a_trigger_is_busy(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:trg {n}.work a", append=True)
    fs.write("events/fprobes/trg/trigger", "traceoff")
    with pytest.raises(FntraceError) as ei:
        fs.write("dynamic_events", "-:trg", append=True)
    assert ei.value.errno == errno.EBUSY
    fs.write("events/fprobes/trg/trigger", "!traceoff")
    fs.write("dynamic_events", "-:trg", append=True)
    assert listing(fs) == []


SYNTAX_ERRORS = [
    # fprobe_syntax_errors.tc with vfs_read/kfree written in Python
    ("f^100 {V}", "BAD_MAXACT"),
    ("f^1a111 {V}", "BAD_MAXACT"),
    ("f ^{N}.non_exist_func", "BAD_PROBE_ADDR"),
    ("f ^{V}+10", "BAD_PROBE_ADDR"),
    ("f:^/bar {V}", "NO_GROUP_NAME"),
    ("f:^" + "1234567890" * 6 + "12345/bar {V}", "GROUP_TOO_LONG"),
    ("f:^foo.1/bar {V}", "BAD_GROUP_NAME"),
    ("f:^ {V}", "NO_EVENT_NAME"),
    ("f:foo/^" + "1234567890" * 6 + "12345 {V}", "EVENT_TOO_LONG"),
    ("f:foo/^bar.1 {V}", "BAD_EVENT_NAME"),
    ("f {V} ^$stack10000", "BAD_STACK_NUM"),
    ("f {V} ^$arg10000", "BAD_ARG_NUM"),
    ("f {V} ^$none_var", "BAD_VAR"),
    ("f {V} ^%ax", "BAD_VAR"),
    ("f {V} ^@12345678abcde", "BAD_MEM_ADDR"),
    ("f {V} ^@+10", "FILE_ON_KPROBE"),
    ("f {V} arg1=\\^x", "BAD_IMM"),
    ("f {V} arg1=\\\"abcd^", "IMMSTR_NO_CLOSE"),
    ("f {V} ^+0@0)", "DEREF_NEED_BRACE"),
    ("f {V} ^+0ab1(@0)", "BAD_DEREF_OFFS"),
    ("f {V} +0(+0(@0^)", "DEREF_OPEN_BRACE"),
    ("f {V} +0(^$comm)", "COMM_CANT_DEREF"),
    ("f {V} ^&1", "BAD_FETCH_ARG"),
    ("f {V} file:^unknown_type", "BAD_TYPE"),
    ("f {V} $stack0:^string", "BAD_STRING"),
    ("f {V} count:^b10@a/16", "BAD_BITFIELD"),
    ("f {V} ^arg123456789012345678901234567890=file", "ARG_NAME_TOO_LONG"),
    ("f {V} ^=file", "NO_ARG_NAME"),
    ("f {V} ^var.1=file", "BAD_ARG_NAME"),
    ("f {V} var1=file ^var1=buf", "USED_ARG_NAME"),
    ("f {V} arg1=^", "NO_ARG_BODY"),
    ("f {V}^%hoge", "BAD_ADDR_SUFFIX"),
    ("f {V} args=^$arg*", "BAD_VAR_ARGS"),
    ("f {V} +0(^$arg*)", "BAD_VAR_ARGS"),
    ("f {V} $arg* ^$arg*", "DOUBLE_ARGS"),
    ("f {V} ^hoge", "NO_BTFARG"),
    ("f {K} ^$arg10", "NO_BTFARG"),
    ("f {V} file^-.foo", "BAD_HYPHEN"),
    ("f {V} ^$retval", "RETVAL_ON_PROBE"),
]


@pytest.mark.parametrize("cmd,kind", SYNTAX_ERRORS, ids=[f"{k}:{c}" for c, k in SYNTAX_ERRORS])
def test_syntax_errors_log_the_caret_and_leave_events_alone(fs, m, cmd, kind):
    n = m.__name__
    fs.write("dynamic_events", f"f:keep {n}.work a\nf:keep2 {n}.work%return $retval\n",
             append=True)
    fs.write("events/fprobes/keep/enable", "1")
    before = listing(fs)
    log = errlog_check(fs, "trace_fprobe",
                       cmd.replace("{V}", f"{n}.vfs_read").replace("{K}", f"{n}.kfree")
                       .replace("{N}", n), "dynamic_events", append=True)
    assert ERRORS[kind] in log
    assert listing(fs) == before
    assert fs.read("events/fprobes/keep/enable") == "1\n"
    m.work(3)
    assert trace_texts(fs) == [f"keep: ({n}.work+0) a=3"]


def test_a_second_probe_point_with_the_same_arguments_joins_the_event(fs, m):
    # append_trace_fprobe: same kind, same arguments, another function
    n = m.__name__
    fs.write("dynamic_events", f"f:fprobes/multi {n}.work x=\\1", append=True)
    fs.write("dynamic_events", f"f:fprobes/multi {n}.values x=\\1", append=True)
    assert listing(fs) == [f"f:fprobes/multi {n}.work x=\\1", f"f:fprobes/multi {n}.values x=\\1"]
    assert fs.ls("events/fprobes").count("multi") == 1
    fs.write("events/fprobes/multi/enable", "1")
    m.work(1)
    m.values(2)
    assert trace_texts(fs) == [f"multi: ({n}.work+0) x=1", f"multi: ({n}.values+0) x=1"]
    fs.write("events/fprobes/multi/enable", "0")
    fs.write("dynamic_events", "-:multi", append=True)
    assert listing(fs) == []


@pytest.mark.parametrize("second, error", [
    ("^f:fprobes/testevent {n}.work%return", "DIFF_PROBE_TYPE"),
    ("^f:fprobes/testevent {n}.work a=\\1", "SAME_PROBE"),
    # fprobe_syntax_errors.tc multiprobe errors: DIFF_ARG_TYPE at the argument
    ("f:fprobes/testevent {n}.work ^b=\\1", "DIFF_ARG_TYPE"),
    ("f:fprobes/testevent {n}.work ^a=\\1:u8", "DIFF_ARG_TYPE"),
])
def test_a_second_probe_of_an_event_that_does_not_fit_it(fs, m, second, error):
    n = m.__name__
    fs.write("dynamic_events", f"f:fprobes/testevent {n}.work a=\\1", append=True)
    before = listing(fs)
    log = errlog_check(fs, "trace_fprobe", second.format(n=n), "dynamic_events", append=True)
    assert ERRORS[error] in log
    assert listing(fs) == before


def test_error_log_keeps_each_failed_command(fs, m):
    n = m.__name__
    fs.write("error_log", "")
    for cmd in (f"f {n}.work nope1", f"f {n}.work nope2"):
        with pytest.raises(FntraceError):
            fs.write("dynamic_events", cmd, append=True)
    log = fs.read("error_log")
    assert log.count("trace_fprobe: error: ") == 2
    assert f"  Command: f {n}.work nope1\n" in log and f"  Command: f {n}.work nope2\n" in log
    fs.write("error_log", "")
    assert fs.read("error_log") == ""


# ---------------------------------------------------------------------------------
# Types from annotations (the kernel's BTF checks: NO_RETVAL, NO_PTR_STRCT,
# NO_BTF_FIELD, BAD_TYPE4STR), read from the source, never evaluated
# ---------------------------------------------------------------------------------

TYPED = """
    import dataclasses
    from dataclasses import dataclass

    EVALUATED = []

    def side(tag):
        EVALUATED.append(tag)
        return int

    class Req:
        kind = 'http'

        def __init__(self, host: str, name):
            self.host = host
            self.name = name
            self.size: int = 0

        @property
        def url(self) -> str:
            return 'http://' + self.host

        def reply(self) -> 'Req':
            return self

    class Slotted:
        __slots__ = ('a', 'b')

    class Dynamic:
        def __getattr__(self, name):
            return name

    @dataclass
    class Point:
        x: int
        y: int = 0

    class Sub(Req):
        def __init__(self, host, name):
            super().__init__(host, name)
            self.extra = 1

    class Text(str):
        pass

    class Twice:
        a = 1

    class Twice:
        b = 2

    def handle(req: Req, count: int, label: str, free, dyn: Dynamic, pt: Point, sub: Sub,
               sl: Slotted, t: Text, tw: Twice, *rest: int, **kw: str) -> None:
        return None

    def make(host: str) -> Req:
        r = Req(host, 'n')
        r.tag = 'made'
        return r

    def fmt(x: int) -> str:
        return str(x)

    def later(x: "Req") -> "None":
        return None

    def lazy(x: "side('param')") -> "side('return')":
        return x

    def nothing(x):
        return x

    async def coro() -> None:
        return None

    def gen() -> None:
        yield 1

    def outer():
        class Req:
            pass

        def inner(r: Req) -> Req:
            return r
        return inner
"""

FUTURE = """
    from __future__ import annotations

    class Node:
        def __init__(self, value: int):
            self.value: int = value
            self.next: Node | None = None

    def push(node: Node, value: int) -> None:
        return None

    def head(node: Node) -> Node:
        return node
"""


@pytest.fixture
def tm(write_module):
    return write_module(TYPED, hint="typedmod")


TYPE_ERRORS = [
    ("f {N}.handle%return ^$retval", "NO_RETVAL"),
    ("f {N}.later%return x=^$retval", "NO_RETVAL"),
    ("f {N}.make%return $retval->^nosuch", "NO_BTF_FIELD"),
    ("f {N}.fmt%return $retval->^foo", "NO_PTR_STRCT"),
    ("f {N}.handle count->^foo", "NO_PTR_STRCT"),
    ("f {N}.handle req->^hots", "NO_BTF_FIELD"),
    ("f {N}.handle req->url->^nope", "NO_PTR_STRCT"),
    ("f {N}.handle req->size.^nope", "NO_PTR_STRCT"),
    ("f {N}.handle pt->^z", "NO_BTF_FIELD"),
    ("f {N}.handle sl->^c", "NO_BTF_FIELD"),
    ("f {N}.handle sub->^nosuch", "NO_BTF_FIELD"),
    ("f {N}.handle $arg1->^nope", "NO_BTF_FIELD"),
    ("f {N}.handle rest->^foo", "NO_PTR_STRCT"),
    ("f {N}.later x->^nosuch", "NO_BTF_FIELD"),
    ("f {N}.handle ^count:string", "BAD_TYPE4STR"),
    ("f {N}.handle ^req:string", "BAD_TYPE4STR"),
    ("f {N}.handle req->^size:string", "BAD_TYPE4STR"),
    ("f {N}.handle ^$arg*:string", "BAD_VAR_ARGS"),
    ("f {N}.fmt%return ^$arg1:string", "BAD_TYPE4STR"),
]


@pytest.mark.parametrize("cmd,kind", TYPE_ERRORS, ids=[c for c, _ in TYPE_ERRORS])
def test_annotations_play_btf(fs, tm, cmd, kind):
    n = tm.__name__
    fs.write("dynamic_events", f"f:keep {n}.nothing x", append=True)
    before = listing(fs)
    log = errlog_check(fs, "trace_fprobe", cmd.replace("{N}", n), "dynamic_events", append=True)
    assert ERRORS[kind] in log
    assert listing(fs) == before


@pytest.mark.parametrize("cmd", [
    "f {N}.handle req->host:string req->name req->kind req->url:string req->reply "
    "req->__class__ req->__dict__ label:string free->anything:string dyn->whatever "
    "sub->extra sub->host pt->x pt->y sl->a t:string t->upper tw->anything",
    "f {N}.handle count->real count->bit_length kw:len rest[0]->foo label->upper",
    "f {N}.handle x=$arg2:string",          # a named $argN has no type (a register)
    "f {N}.coro%return $retval",             # a coroutine's resumes return values
    "f {N}.gen%return $retval",
    "f {N}.nothing%return $retval->x x:string x->y",
    "f {N}.make%return $retval->size $retval->reply->url:string",
    "f {N}.make%return $retval->tag",        # assigned outside the class, in the module
    "f {N}.lazy%return $retval->foo x->bar x:string",    # never evaluated: not known
    "f {N}.outer.<locals>.inner%return $retval->anything r->anything",
    "f {N}.Req.reply%return $retval->host self->anything",
])
def test_what_annotations_cannot_rule_out_is_accepted(fs, tm, cmd):
    n = tm.__name__
    fs.write("dynamic_events", cmd.replace("{N}", n), append=True)
    assert tm.EVALUATED == []


def test_annotations_are_read_from_the_source_not_evaluated(fs, tm):
    n = tm.__name__
    fs.write("dynamic_events", f"f {n}.lazy%return $retval->foo x->bar", append=True)
    assert tm.EVALUATED == []
    fs.write("events/fprobes/enable", "1")
    assert tm.lazy(3) == 3
    assert tm.EVALUATED == []


def test_postponed_annotations(fs, write_module):
    n = write_module(FUTURE, hint="futmod").__name__
    for cmd, kind in [(f"f {n}.push%return ^$retval", "NO_RETVAL"),
                      (f"f {n}.push node->^nxt", "NO_BTF_FIELD"),
                      (f"f {n}.head%return $retval->value->^x", "NO_PTR_STRCT")]:
        log = errlog_check(fs, "trace_fprobe", cmd, "dynamic_events", append=True)
        assert ERRORS[kind] in log
    fs.write("dynamic_events", f"f {n}.push node->next->value value", append=True)
    assert listing(fs) == [f"f:fprobes/{n}_push__entry {n}.push arg1=node->next->value "
                           f"value=value"]


# ---------------------------------------------------------------------------------
# A SYM imported later
# ---------------------------------------------------------------------------------

def test_sym_in_a_module_imported_later_binds_on_import(tmp_path):
    # A fresh interpreter: nothing but tracefs and the event has run, so nothing else
    # can have set up the module-load notifier.
    (tmp_path / "latemod_dyn.py").write_text("def f(x, y=2):\n    return x * y\n")
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from fntrace.tracefs import Tracefs
        fs = Tracefs()
        fs.write("dynamic_events", "f:late latemod_dyn.f x\\n"
                                   "f:lateret latemod_dyn.f%return x r=$retval\\n")
        fs.write("events/fprobes/enable", "1")
        import latemod_dyn
        latemod_dyn.f(3)
        fs.write("events/fprobes/enable", "0")
        sys.stdout.write(fs.read("trace"))
        sys.stdout.write("LISTING\\n" + fs.read("dynamic_events"))
    """))
    p = run_python(script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    texts = [mt.group("text") for l in p.stdout.splitlines() if (mt := EVENT_LINE.match(l))]
    assert texts[:1] == ["late: (latemod_dyn.f+0) x=3"], p.stdout
    assert len(texts) == 2 and texts[1].endswith(" <- latemod_dyn.f) x=3 r=6"), p.stdout


def test_sym_in_a_module_imported_later_in_process(fs, write_module):
    # The binding itself, with the module-load notifier set up (the test above checks
    # that defining and enabling the event is enough for that in a fresh interpreter).
    from fntrace.core.records import record_table
    record_table.install_import_hook()
    name = write_module("def g(z):\n    return z + 1\n", hint="latedyn", import_it=False)
    fs.write("dynamic_events", f"f:lateg {name}.g z\nf:lategr {name}.g%return $retval\n",
             append=True)
    fs.write("events/fprobes/enable", "1")
    import importlib
    mod = importlib.import_module(name)
    mod.g(1)
    texts = trace_texts(fs)
    assert texts[0] == f"lateg: ({name}.g+0) z=1"
    assert texts[1].endswith(f" <- {name}.g) arg1=2")


def test_sym_of_a_loaded_module_that_does_not_exist_is_refused(fs, m):
    with pytest.raises(FntraceError):
        fs.write("dynamic_events", f"f {m.__name__}.not_there", append=True)
    assert listing(fs) == []


# ---------------------------------------------------------------------------------
# The fntrace command
# ---------------------------------------------------------------------------------

PROG = """
    import sys

    def work(a, b):
        return a

    def main():
        for i in range(3):
            work(i, 'x' * i)
        print("program ran", file=sys.stderr)

    main()
"""


def test_cli_live_prints_event_lines(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f __main__.work a b", script)
    assert p.returncode == 0, p.stderr
    assert "# tracer: nop" in p.stdout.splitlines()
    assert entry_texts(p.stdout) == [
        "__main___work__entry: (__main__.work+0) a=0 b=''",
        "__main___work__entry: (__main__.work+0) a=1 b='x'",
        "__main___work__entry: (__main__.work+0) a=2 b='xx'",
    ]


def test_cli_live_return_event_and_named_group(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f:app/done __main__.work%return a r=$retval", script)
    assert p.returncode == 0, p.stderr
    texts = entry_texts(p.stdout)
    assert [t.split(" <- ")[1] for t in texts] == [
        "__main__.work) a=0 r=0", "__main__.work) a=1 r=1", "__main__.work) a=2 r=2"]
    assert all(t.startswith("done: (__main__.main+2 <- ") for t in texts)


def test_cli_record_then_report(run_fntrace, tmp_script, tmp_path):
    script = tmp_script(PROG)
    out = tmp_path / "ev.dat"
    p = run_fntrace("record", "-o", out, "-e", "f __main__.work a", script)
    assert p.returncode == 0, p.stderr
    r = run_fntrace("report", out)
    assert r.returncode == 0, r.stderr
    assert entry_texts(r.stdout) == [f"__main___work__entry: (__main__.work+0) a={i}"
                                    for i in range(3)]


@pytest.mark.parametrize("bad,caret", [
    ("f:bad.1 __main__.work", 6),
    ("f __main__.work%hoge", 15),
    ("f __main__.work a=", 18),
])
def test_cli_bad_event_definition(run_fntrace, tmp_script, bad, caret):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", bad, script)
    assert p.returncode == 2
    assert "program ran" not in p.stderr
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert lines[0].startswith("fntrace: ")
    # the command, then the caret under the offending character
    i = next(k for k, l in enumerate(lines) if l.strip() == bad)
    col = lines[i].index(bad)
    assert lines[i + 1].rstrip() == " " * (col + caret) + "^"


def test_cli_reports_a_sym_that_never_appeared(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f:gone nomod_never.zz", "-e", "f __main__.work a", script)
    assert p.returncode == 0, p.stderr
    assert "program ran" in p.stderr
    err = [l for l in p.stderr.splitlines() if "gone" in l]
    assert err and "nomod_never.zz" in err[0]
    assert len(entry_texts(p.stdout)) == 3


def test_cli_events_only_default_to_the_nop_tracer(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f __main__.work a", script)
    assert p.returncode == 0
    assert p.stdout.splitlines()[0] == "# tracer: nop"
    p = run_fntrace("live", "-p", "function", "-F", "__main__.*", "-e", "f __main__.work a",
                    script)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "# tracer: function"
    texts = entry_texts(p.stdout)
    assert "__main___work__entry: (__main__.work+0) a=1" in texts
    assert "__main__.work <-__main__.main" in texts
