"""Property tests over the four grammars tracefs parses: set_ftrace_filter patterns,
dynamic_events commands, event triggers and event filters.

For any text — grammar pieces in any order, arbitrary characters, nesting as deep as
a page holds and deeper — a write either succeeds or raises a FntraceError whose
.pos lies inside the command it reports; and a refused write leaves the file reading
back exactly as before (the kernel's "a failed write changes nothing").  Each write
is one line: dynamic_events applies the lines of a write one by one, as the kernel
does, so only a one-line write is all or nothing.
"""
from __future__ import annotations

import importlib
import os
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fntrace.errors import FntraceError
from fntrace.events.fprobe_event import resolve_symbol
from fntrace.events.probe_parse import ProbeError, ProbeSpec, RemoveSpec, parse_probe_command
from fntrace.tracefs import Tracefs

from support import unique_module_name

FUZZ_SRC = """
    class Item:
        def __init__(self, sku: str, qty: int):
            self.sku = sku
            self.qty = qty

    def work(a: int, name: str, item: Item, *rest, **kw) -> None:
        return None

    def price(item: Item, n) -> int:
        return n

    def other(x):
        return x
"""

# Modest by default; FNTRACE_FUZZ_EXAMPLES=5000 for a longer search.
EXAMPLES = int(os.environ.get("FNTRACE_FUZZ_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# No line breaks (str.splitlines() would cut the write in several commands).
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
ANY_CHAR = st.characters(blacklist_characters=_LINE_BREAKS, blacklist_categories=("Cs",))


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory):
    """The module the commands name, and a Tracefs with fuzz/ev (on work) and fuzz/tgt
    (on other) defined."""
    d = tmp_path_factory.mktemp("fuzzmods")
    name = unique_module_name("fuzzmod")
    (d / f"{name}.py").write_text(textwrap.dedent(FUZZ_SRC))
    sys.path.insert(0, str(d))
    importlib.invalidate_caches()
    mod = importlib.import_module(name)
    fs = Tracefs()
    _define(fs, name)
    try:
        yield fs, name
    finally:
        try:
            _reset_triggers(fs)
            fs.write("dynamic_events", "")
        finally:
            sys.path.remove(str(d))
            sys.modules.pop(name, None)
            del mod


def _define(fs: Tracefs, n: str) -> None:
    fs.write("dynamic_events", "")
    fs.write("dynamic_events", f"f:fuzz/ev {n}.work a name item\nf:fuzz/tgt {n}.other x\n",
             append=True)


def _reset_triggers(fs: Tracefs) -> None:
    for ev in ("ev", "tgt"):
        for line in fs.read(f"events/fuzz/{ev}/trigger").splitlines():
            if line and not line.startswith("#"):
                fs.write(f"events/fuzz/{ev}/trigger", "!" + line.split(" if ", 1)[0])


def _check_refusal(e: BaseException, text: str) -> None:
    """A refusal is a FntraceError with an errno and a caret inside its command."""
    assert isinstance(e, FntraceError), f"{type(e).__name__}: {e} for {text!r}"
    assert isinstance(e.errno, int) and e.errno > 0
    command = e.command if e.command is not None else text
    assert e.pos is not None, f"no position: {e.msg!r} for {text!r}"
    assert 0 <= e.pos <= len(command), f"pos {e.pos} outside {command!r}"


def _write(fs: Tracefs, path: str, text: str, read_back: list[str], append: bool = True
           ) -> bool:
    """Write; True if it succeeded.  A refusal must leave every file in read_back as
    it was."""
    before = [fs.read(p) for p in read_back]
    try:
        fs.write(path, text, append=append)
    except Exception as e:       # noqa: BLE001 -- anything but a FntraceError is a bug
        _check_refusal(e, text)
        assert [fs.read(p) for p in read_back] == before, text
        return False
    return True


def _joined(pieces: list[str], n: str) -> str:
    return "".join(pieces).replace("{N}", n)


# --------------------------------------------------------------------------------------
# dynamic_events

PROBE_PIECES = st.sampled_from([
    "f", "f:", "f:fuzz/", "f:g.e", "f10", "-:", "-:fuzz/", " ", " ", "  ", "%return",
    "%hoge", "$arg", "$arg*", "$arg1", "$arg9", "$argx", "$retval", "$comm", "$COMM",
    "$stack", "$stack3", "$stack99999", "@", "@0x10", "@12ab", "@+1", "@sym", "+0(", "-8(",
    "+u0(", "+x(", ")", "(", ":", ":string", ":u8", ":s64", ":b4@2/8", ":b9@0/8", ":x64[3]",
    ":u8[", "[", "]", "[0]", "['k']", '["k"]', "[-0x1]", "->", ".", "-", "=", "\\", '\\"',
    '"', "'", "a", "name", "item", "sku", "qty", "nosuch", "rest", "kw", "x" * 70,
    "{N}.work", "{N}.price", "{N}.other", "{N}.nosuch", "{N}", "noimport.mod.f",
    "common_pid", "0", "1", "0x1f", "-1", "*", "%", "&", "^", "é", "\t", "fuzz", "ev",
])
PROBE_TEXT = st.one_of(
    st.lists(PROBE_PIECES, max_size=14),
    st.lists(st.text(ANY_CHAR, max_size=30), max_size=3),
    st.tuples(st.sampled_from(["f {N}.work ", "f {N}.price%return ", "f:fuzz/x {N}.other "]),
              st.integers(0, 40), st.sampled_from(["@0", "@s", "a", "$comm", "\\1", ""]),
              st.sampled_from(["", ":u8", ":b4@0/8", ":string", ":u8[2]"]))
    .map(lambda t: [t[0] + "+0(" * t[1] + t[2] + ")" * t[1] + t[3]]),
    st.tuples(st.sampled_from(["f {N}.work ", "f {N}.price ", "f {N}.work%return $retval"]),
              st.integers(0, 30), st.sampled_from(["->", "."]),
              st.sampled_from(["item", "a", "name", "$arg3", "x=$arg3"]))
    .map(lambda t: [t[0] + t[3] + (t[2] + "sku") * t[1]]),
)


@SETTINGS
@given(pieces=PROBE_TEXT)
@example(pieces=["f {N}.work " + "+0(" * 14 + "@0" + ")" * 14])
@example(pieces=["f {N}.work x=@1 x=@2"])
@example(pieces=["f:fuzz/ev {N}.price a"])
@example(pieces=["-:fuzz/ev"])
def test_dynamic_events_writes(fuzz, pieces):
    fs, n = fuzz
    text = _joined(pieces, n)
    if _write(fs, "dynamic_events", text, ["dynamic_events", "available_events"]):
        _define(fs, n)              # whatever it added or removed is undone


@SETTINGS
@given(pieces=PROBE_TEXT)
@example(pieces=["f {N}.work%return $retval"])
@example(pieces=["f {N}.price item->nosuch n:string"])
def test_probe_command_parse(fuzz, pieces):
    _, n = fuzz
    text = _joined(pieces, n)
    try:
        spec = parse_probe_command(text, resolve_symbol)
    except Exception as e:       # noqa: BLE001
        _check_refusal(e, text)
        assert isinstance(e, ProbeError) and e.command == text
        return
    assert isinstance(spec, (ProbeSpec, RemoveSpec))
    if isinstance(spec, ProbeSpec):
        # what dynamic_events lists defines the same event again
        again = parse_probe_command(spec.normalized(), resolve_symbol)
        assert again.normalized() == spec.normalized()


# --------------------------------------------------------------------------------------
# triggers

TRIGGER_PIECES = st.sampled_from([
    "traceon", "traceoff", "stacktrace", "snapshot", "enable_event", "disable_event",
    "hist", "!", ":", "fuzz", "tgt", "ev", "nosuch", "count=", "3", "0", "unlimited",
    " if ", " if", "if", "a", "name", "comm", "common_pid", "==", "!=", "~", ">", "<=", "&",
    "&&", "||", "(", ")", "'x*'", '"', "'", "1", "-", " ", "  ", "0x10", "*", "é", "\t",
])
TRIGGER_TEXT = st.one_of(
    st.lists(TRIGGER_PIECES, max_size=14).map("".join),
    st.text(ANY_CHAR, max_size=40),
    st.tuples(st.sampled_from(["traceoff if ", "!traceon if ", "enable_event:fuzz:tgt if ",
                               "snapshot:2 if "]),
              st.integers(0, 2100), st.sampled_from(["a == 1", "name ~ 'x*'", "a ==", ""]),
              st.integers(-1, 1))
    .map(lambda t: t[0] + "(" * t[1] + t[2] + ")" * max(0, t[1] + t[3])),
)


@SETTINGS
@given(text=TRIGGER_TEXT)
@example(text="enable_event")
@example(text="!  traceoff:1:2")
@example(text="traceoff if " + "(" * 2100 + "a == 1" + ")" * 2100)
@example(text="traceon if " + "(" * 2000 + "a == 1" + ")" * 2000)
def test_trigger_writes(fuzz, text):
    fs, _ = fuzz
    files = ["events/fuzz/ev/trigger", "events/fuzz/tgt/trigger", "events/fuzz/ev/enable",
             "events/fuzz/tgt/enable"]
    try:
        if _write(fs, "events/fuzz/ev/trigger", text, files):
            # and a second write of the same: EEXIST or success, never anything else
            _write(fs, "events/fuzz/ev/trigger", text, files)
    finally:
        _reset_triggers(fs)


# --------------------------------------------------------------------------------------
# event filters

FILTER_PIECES = st.sampled_from([
    "a", "name", "item", "comm", "common_pid", "common_cpu", "nosuch", "==", "!=", "<",
    "<=", ">", ">=", "&", "~", "=", "!", "&&", "||", "(", ")", "'", '"', "'x*'", '"a?"',
    "'[ab]'", "1", "-1", "0x1f", "08", "18446744073709551616", "x", " ", "  ", "0", "\t",
    "{", "}", "é", "x" * 260,
])


def _deep(t: tuple[str, int, str, int]) -> str:
    kind, k, leaf, extra = t
    if kind == "paren":
        return "(" * k + leaf + ")" * max(0, k + extra)
    if kind == "not":
        return "!(" * k + leaf + ")" * max(0, k + extra)
    text = leaf
    for i in range(k):
        text = f"a > {i} {'&&' if i % 2 else '||'} ({text})"
    return text


FILTER_TEXT = st.one_of(
    st.lists(FILTER_PIECES, max_size=16).map("".join),
    st.text(ANY_CHAR, max_size=40),
    st.tuples(st.sampled_from(["paren", "not", "alternate"]), st.integers(0, 2100),
              st.sampled_from(["a == 1", "name ~ 'x*'", "a == ", "nosuch == 1", "a == 1 a"]),
              st.integers(-1, 1))
    .filter(lambda t: t[0] != "alternate" or t[1] <= 400)
    .map(_deep),
)


@SETTINGS
@given(text=FILTER_TEXT, previous=st.sampled_from(["0", "a == 1", "name ~ 'x*' || a > 2"]))
@example(text="(" * 400 + "a == 1" + ")" * 400, previous="a == 1")
@example(text="a == 1 && (" * 200 + "a == 1" + ")" * 200, previous="a == 1")
@example(text="(" * 2100 + "a == 1" + ")" * 2100, previous="a == 1")
def test_event_filter_writes(fuzz, text, previous):
    fs, _ = fuzz
    fs.write("events/fuzz/ev/filter", previous)
    try:
        if _write(fs, "events/fuzz/ev/filter", text, ["events/fuzz/ev/filter"], append=False):
            got = fs.read("events/fuzz/ev/filter")
            assert got == (text.strip() if text.strip() not in ("", "0") else "none") + "\n"
    finally:
        fs.write("events/fuzz/ev/filter", "0")


# --------------------------------------------------------------------------------------
# set_ftrace_filter

HASH_PIECES = st.sampled_from([
    "{N}.work", "{N}.*", "*work*", "{N}.o?her", "{N}.[op]rice", "!", ":mod:", "{N}",
    "nosuchmod", "noimport*", "*", "?", "[a-z]", "[", "]", "\\", "1", "0", "99999999",
    ":", ":traceon", ":traceoff:3", " ", "  ", "work", "other", "é", "\t", "!*", ":mod:!",
])
HASH_TEXT = st.one_of(
    st.lists(HASH_PIECES, max_size=10),
    st.lists(st.text(ANY_CHAR, max_size=30), max_size=2),
)


@settings(max_examples=max(1, EXAMPLES // 2), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(pieces=HASH_TEXT, append=st.booleans())
def test_set_ftrace_filter_writes(fuzz, pieces, append):
    fs, n = fuzz
    fs.write("set_ftrace_filter", f"{n}.price *:mod:noimport_{n}")
    try:
        _write(fs, "set_ftrace_filter", _joined(pieces, n), ["set_ftrace_filter"],
               append=append)
    finally:
        fs.write("set_ftrace_filter", "")
