"""Tests for events/probe_parse.py: the fprobe dynamic-event grammar.

The error cases port selftests/ftrace/test.d/dynevent/fprobe_syntax_errors.tc: each
command carries a '^' where the kernel puts the caret, ftrace_errlog_check style.
The good cases follow fprobetrace.rst, add_remove_fprobe.tc, add_remove_btfarg.tc
and dynevent_limitations.tc.
"""
from __future__ import annotations

import errno

import pytest

from fntrace.errors import FntraceError
from fntrace.events.probe_parse import (
    ERRORS,
    MAX_TRACE_ARGS,
    UNRESOLVED,
    FetchArg,
    ProbeError,
    ProbeSpec,
    RemoveSpec,
    parse_probe_command,
)

# The Python signatures play BTF.
SIGNATURES = {
    "vfs_read": ["file", "buf", "count", "pos"],
    "kfree": ["object"],
    "getname_flags": ["filename", "flags"],
    "noargs": [],
    "pkg.mod.Class.method": ["self", "x", "args", "kwargs"],
    "mod.outer.<locals>.inner": ["a"],
    "__main__.work": ["n"],
}


def resolve(symbol: str):
    if symbol.startswith("notyet."):
        return UNRESOLVED
    return SIGNATURES.get(symbol)


def parse(cmd: str):
    return parse_probe_command(cmd, resolve)


def check_error(cmd_with_caret: str, kind: str) -> ProbeError:
    """ftrace_errlog_check: the command without '^' fails with the caret there."""
    pos = cmd_with_caret.index("^")
    cmd = cmd_with_caret[:pos] + cmd_with_caret[pos + 1:]
    with pytest.raises(ProbeError) as ei:
        parse(cmd)
    e = ei.value
    assert (e.kind, e.pos) == (kind, pos), f"{cmd!r}: got {e.kind} at {e.pos}"
    assert e.msg == ERRORS[kind]
    assert e.command == cmd
    assert e.errno == errno.EINVAL
    assert isinstance(e, FntraceError)
    return e


LONG = "12345678901234567890123456789012345678901234567890123456789012345"   # 65

# fprobe_syntax_errors.tc, every case that has a Python meaning, in the file's order.
SELFTEST_CASES = [
    ("f^100 vfs_read", "BAD_MAXACT"),
    ("f ^non_exist_func", "BAD_PROBE_ADDR"),
    ("f ^vfs_read+10", "BAD_PROBE_ADDR"),
    ("f:^/bar vfs_read", "NO_GROUP_NAME"),
    (f"f:^{LONG}/bar vfs_read", "GROUP_TOO_LONG"),
    ("f:^foo.1/bar vfs_read", "BAD_GROUP_NAME"),
    ("f:^ vfs_read", "NO_EVENT_NAME"),
    (f"f:foo/^{LONG} vfs_read", "EVENT_TOO_LONG"),
    ("f:foo/^bar.1 vfs_read", "BAD_EVENT_NAME"),
    ("f vfs_read ^$stack10000", "BAD_STACK_NUM"),
    ("f vfs_read ^$arg10000", "BAD_ARG_NUM"),
    ("f vfs_read ^$none_var", "BAD_VAR"),
    ("f vfs_read ^%ax", "BAD_VAR"),
    ("f vfs_read ^@12345678abcde", "BAD_MEM_ADDR"),
    ("f vfs_read ^@+10", "FILE_ON_KPROBE"),
    ("f vfs_read arg1=\\^x", "BAD_IMM"),
    ('f vfs_read arg1=\\"abcd^', "IMMSTR_NO_CLOSE"),
    ("f vfs_read ^+0@0)", "DEREF_NEED_BRACE"),
    ("f vfs_read ^+0ab1(@0)", "BAD_DEREF_OFFS"),
    ("f vfs_read +0(+0(@0^)", "DEREF_OPEN_BRACE"),
    ("f vfs_read +0(^$comm)", "COMM_CANT_DEREF"),
    ("f vfs_read ^&1", "BAD_FETCH_ARG"),
    ("f vfs_read +0(@11):u8[10^", "ARRAY_NO_CLOSE"),
    ("f vfs_read +0(@11):u8[10]^a", "BAD_ARRAY_SUFFIX"),
    ("f vfs_read +0(@11):u8[^10a]", "BAD_ARRAY_NUM"),
    ("f vfs_read +0(@11):u8[^256]", "ARRAY_TOO_BIG"),
    ("f vfs_read @11:^unknown_type", "BAD_TYPE"),
    ("f vfs_read $stack0:^string", "BAD_STRING"),
    # the selftest's base is @11, which is BAD_MEM_ADDR here before the type is looked at
    ("f vfs_read file:^b10@a/16", "BAD_BITFIELD"),
    ("f vfs_read ^arg123456789012345678901234567890=@11", "ARG_NAME_TOO_LONG"),
    ("f vfs_read ^=@11", "NO_ARG_NAME"),
    ("f vfs_read ^var.1=@11", "BAD_ARG_NAME"),
    # @11 would fail first; two parameters show the second use of the name
    ("f vfs_read var1=file ^var1=buf", "USED_ARG_NAME"),
    # MAX_ARGSTR_LEN is 255 here (the kernel's 63 is too short for access chains)
    ("f vfs_read ^file" + ".attr" * 51, "ARG_TOO_LONG"),
    ("f vfs_read arg1=^", "NO_ARG_BODY"),
    ("f vfs_read^%hoge", "BAD_ADDR_SUFFIX"),
    ("f vfs_read args=^$arg*", "BAD_VAR_ARGS"),
    ("f vfs_read +0(^$arg*)", "BAD_VAR_ARGS"),
    ("f vfs_read $arg* ^$arg*", "DOUBLE_ARGS"),
    ("f vfs_read ^hoge", "NO_BTFARG"),
    ("f kfree ^$arg10", "NO_BTFARG"),
    ("f vfs_read file^-.foo", "BAD_HYPHEN"),
]


@pytest.mark.parametrize("cmd,kind", SELFTEST_CASES, ids=[k for _, k in SELFTEST_CASES])
def test_fprobe_syntax_errors(cmd, kind):
    check_error(cmd, kind)


MORE_ERRORS = [
    # MAXACTIVE: vestigial, only a %return probe may carry one, and it must be a number
    ("f^0 vfs_read%return", "BAD_MAXACT"),
    ("f^x vfs_read", "BAD_MAXACT"),
    ("f^10:grp/ev vfs_read", "BAD_MAXACT"),
    # the symbol: a dotted Python name the resolver knows
    ("f ^pkg..mod", "BAD_PROBE_ADDR"),
    ("f ^pkg.mod.Class.method+0x4%return", "BAD_PROBE_ADDR"),
    ("f ^%return", "BAD_PROBE_ADDR"),
    ("f vfs_read^%entry", "BAD_ADDR_SUFFIX"),
    ("f:foo/^bar-1 vfs_read", "BAD_EVENT_NAME"),
    ("f:^1grp/ev vfs_read", "BAD_GROUP_NAME"),
    # $-variables
    ("f vfs_read ^$retval", "RETVAL_ON_PROBE"),
    ("f vfs_read x=^$retval.name", "RETVAL_ON_PROBE"),
    ("f vfs_read%return ^$retvals", "BAD_VAR"),
    ("f vfs_read ^$arg0", "BAD_ARG_NUM"),
    ("f vfs_read x=^$arg129", "BAD_ARG_NUM"),
    ("f vfs_read x=^$arg5", "NO_BTFARG"),
    ("f vfs_read ^$argx", "BAD_VAR"),
    ("f vfs_read ^$arg", "BAD_VAR"),
    ("f vfs_read ^$arg*:u8", "BAD_VAR_ARGS"),
    ("f vfs_read ^$arg*.x", "BAD_VAR_ARGS"),
    ("f vfs_read ^$stack1x", "BAD_VAR"),
    ("f vfs_read ^$stack1000", "BAD_STACK_NUM"),
    ("f vfs_read $stack:^string", "BAD_STRING"),
    ("f vfs_read $comm:^u8", "NEED_STRING_TYPE"),
    ('f vfs_read x=\\"abc":^s32', "NEED_STRING_TYPE"),
    # immediates
    ("f vfs_read x=\\^08", "BAD_IMM"),
    ("f vfs_read x=\\^0x", "BAD_IMM"),
    ("f vfs_read x=\\^99999999999999999999999", "BAD_IMM"),
    # access chains
    ("f vfs_read file[0^", "ARRAY_NO_CLOSE"),
    ("f vfs_read file['k'^", "ARRAY_NO_CLOSE"),
    ("f vfs_read file[^x]", "BAD_ARRAY_NUM"),
    ("f vfs_read file[0]^x", "BAD_ARRAY_SUFFIX"),
    ("f vfs_read file.^1", "NO_BTF_FIELD"),
    ("f vfs_read file->^", "NO_BTF_FIELD"),
    ("f vfs_read ^file+1", "NO_BTFARG"),
    ("f vfs_read file.^a+1", "NO_BTF_FIELD"),
    ("f vfs_read ^$comm+1", "BAD_VAR"),
    ("f vfs_read file.a^-b", "BAD_HYPHEN"),
    # kernel-only forms
    ("f vfs_read ^@jiffies", "BAD_MEM_ADDR"),
    ("f vfs_read ^+0(file)", "BAD_FETCH_ARG"),
    ("f vfs_read +0(^+8(file))", "BAD_FETCH_ARG"),
    ("f vfs_read ^-8(file)", "BAD_FETCH_ARG"),
    ("f vfs_read +0(^$arg9)", "NO_BTFARG"),
    ('f vfs_read +0(^\\"x")', "COMM_CANT_DEREF"),
    ("f vfs_read +u0(^$comm)", "COMM_CANT_DEREF"),
    ("f vfs_read ^123", "BAD_FETCH_ARG"),
    # types
    ("f vfs_read file:^", "BAD_TYPE"),
    ("f vfs_read file:^ustring", "BAD_TYPE"),
    ("f vfs_read file:^b4@0/12", "BAD_TYPE"),
    ("f vfs_read file:^b12@0/8", "BAD_BITFIELD"),
    ("f vfs_read file:^u8[4]", "BAD_STRING"),
    # names
    ("f vfs_read ^common_pid=file", "USED_ARG_NAME"),
    ("f vfs_read ^__probe_ip=file", "USED_ARG_NAME"),
    ("f vfs_read $comm ^arg1=file", "USED_ARG_NAME"),
    ("f vfs_read count ^$arg3", "USED_ARG_NAME"),
    ("f vfs_read count ^$arg*", "USED_ARG_NAME"),
    ("f vfs_read file:string ^file:char", "USED_ARG_NAME"),
    # the $arg pre-pass runs over every argument before any is parsed
    ("f vfs_read $none_var ^$argx", "BAD_VAR"),
    ("f kfree @1 ^$arg2", "NO_BTFARG"),
    # removal
    ("-:^/ev", "NO_GROUP_NAME"),
    ("-:^", "NO_EVENT_NAME"),
    ("-:grp/^", "NO_EVENT_NAME"),
]


@pytest.mark.parametrize("cmd,kind", MORE_ERRORS, ids=[c for c, _ in MORE_ERRORS])
def test_more_errors(cmd, kind):
    check_error(cmd, kind)


def test_caret_counts_the_command_as_written():
    # two blanks between words: the caret still sits under the offending word
    e = check_error("f   vfs_read  ^hoge", "NO_BTFARG")
    assert e.command == "f   vfs_read  hoge"


def test_errors_the_kernel_does_not_log_have_no_kind():
    for cmd in ["", "   ", "f", "f:grp/ev", "p:kprobe vfs_read", "t kfree", "-x"]:
        with pytest.raises(ProbeError) as ei:
            parse(cmd)
        assert ei.value.kind is None
        assert ei.value.errno == errno.EINVAL


def test_error_kinds_have_the_kernel_texts():
    assert ERRORS["BAD_PROBE_ADDR"] == "Invalid probed address or symbol"
    assert ERRORS["BAD_VAR"] == "Invalid $-valiable specified"
    assert ERRORS["IMMSTR_NO_CLOSE"] == "String is not closed with '\"'"
    assert ERRORS["BAD_VAR_ARGS"] == "$arg* must be an independent parameter without name etc."


# --------------------------------------------------------------------------------------
# Good commands and what dynamic_events lists for them

LISTINGS = [
    # fprobetrace.rst
    ("f vfs_read $arg*", "f:fprobes/vfs_read__entry vfs_read file=file buf=buf count=count pos=pos"),
    ("f vfs_read%return $retval", "f:fprobes/vfs_read__exit vfs_read%return arg1=$retval"),
    ("f:myprobe vfs_read count pos", "f:fprobes/myprobe vfs_read count=count pos=pos"),
    # add_remove_fprobe.tc
    ("f:myevent1 vfs_read", "f:fprobes/myevent1 vfs_read"),
    ("f:myevent2 vfs_read%return", "f:fprobes/myevent2 vfs_read%return"),
    # add_remove_btfarg.tc: an unnamed $argN is the parameter's name
    ("f:fpevent kfree object", "f:fprobes/fpevent kfree object=object"),
    ("f:fpevent kfree $arg1", "f:fprobes/fpevent kfree object=object"),
    ("f:fpevent kfree $arg*", "f:fprobes/fpevent kfree object=object"),
    ("f:fpevent getname_flags%return path=$retval->name:string",
     "f:fprobes/fpevent getname_flags%return path=$retval.name:string"),
    # names, groups, types
    ("f:grp/ev vfs_read", "f:grp/ev vfs_read"),
    ("f:grp.ev vfs_read", "f:grp/ev vfs_read"),
    ("f:grp/ vfs_read", "f:grp/vfs_read__entry vfs_read"),
    ("f:ev vfs_read x=$arg2 $arg3:u32", "f:fprobes/ev vfs_read x=$arg2 count=count:u32"),
    ("f vfs_read $comm $stack2 $stack", "f:fprobes/vfs_read__entry vfs_read arg1=$comm arg2=$stack2 arg3=$stack"),
    ("f vfs_read $COMM:string", "f:fprobes/vfs_read__entry vfs_read arg1=$comm:string"),
    ("f vfs_read \\123 \\0x1f:x8 \\-1:s8 s=\\\"hi_there\"",
     "f:fprobes/vfs_read__entry vfs_read arg1=\\123 arg2=\\0x1f:x8 arg3=\\-1:s8 s=\\\"hi_there\""),
    ("f vfs_read file->f_path.dentry[0]['name'][\"k'\"][-1]:repr",
     "f:fprobes/vfs_read__entry vfs_read arg1=file.f_path.dentry[0]['name'][\"k'\"][-1]:repr"),
    ("f vfs_read file:string buf:len count:bool pos:symbol c=file:char",
     "f:fprobes/vfs_read__entry vfs_read file=file:string buf=buf:len count=count:bool "
     "pos=pos:symbol c=file:char"),
    ("f vfs_read count:b4@2/8", "f:fprobes/vfs_read__entry vfs_read count=count:b4@2/8"),
    ('f vfs_read x=\\"a:b":string', 'f:fprobes/vfs_read__entry vfs_read x=\\"a:b":string'),
    ("f vfs_read d=file['a:b']:repr", "f:fprobes/vfs_read__entry vfs_read d=file['a:b']:repr"),
    # MAXACTIVE on a %return probe is accepted and dropped
    ("f100 vfs_read%return", "f:fprobes/vfs_read__exit vfs_read%return"),
    ("f8:grp/ev vfs_read%return", "f:grp/ev vfs_read%return"),
    # Python symbols: default event names lose what a C identifier cannot hold
    ("f pkg.mod.Class.method $arg*",
     "f:fprobes/pkg_mod_Class_method__entry pkg.mod.Class.method self=self x=x args=args kwargs=kwargs"),
    ("f mod.outer.<locals>.inner%return $retval a",
     "f:fprobes/mod_outer__locals__inner__exit mod.outer.<locals>.inner%return arg1=$retval a=a"),
    ("f __main__.work n", "f:fprobes/__main___work__entry __main__.work n=n"),
    ("f noargs $arg*", "f:fprobes/noargs__entry noargs"),
    ("  f   vfs_read   count  ", "f:fprobes/vfs_read__entry vfs_read count=count"),
]


@pytest.mark.parametrize("cmd,listing", LISTINGS, ids=[c for c, _ in LISTINGS])
def test_normalized_listing(cmd, listing):
    spec = parse(cmd)
    assert isinstance(spec, ProbeSpec)
    assert spec.normalized() == listing
    assert spec.command == cmd
    # what we list parses back to itself
    again = parse(listing)
    assert again.normalized() == listing


def test_default_names_and_spec_fields():
    spec = parse("f vfs_read%return $retval count")
    assert (spec.group, spec.event, spec.symbol, spec.is_return) == (
        "fprobes", "vfs_read__exit", "vfs_read", True)
    assert spec.resolved
    assert spec.args == [
        FetchArg("arg1", ("retval",), None, "$retval", False),
        FetchArg("count", ("param", "count"), None, "count", True),
    ]


def test_long_symbols_get_a_truncated_default_event_name():
    sym = "pkg." + "x" * 80
    spec = parse_probe_command(f"f {sym}", lambda s: ["a"])
    assert len(spec.event) == 63
    assert spec.event == ("pkg_" + "x" * 80)[:63]


def test_expr_trees():
    spec = parse("f pkg.mod.Class.method self->items[2].name x['k'] $arg2.real \\\"s\" \\0x10 $stack3")
    assert [a.expr for a in spec.args] == [
        ("attr", ("item", ("attr", ("param", "self"), "items"), 2), "name"),
        ("item", ("param", "x"), "k"),
        ("attr", ("param", "x"), "real"),          # unnamed $argN: the parameter
        ("imm", "s"),
        ("imm", 16),
        ("stack", 3),
    ]
    assert [a.name for a in spec.args] == ["arg1", "arg2", "arg3", "arg4", "arg5", "arg6"]
    assert [a.text for a in spec.args] == [
        "self.items[2].name", "x['k']", "x.real", '\\"s"', "\\0x10", "$stack3"]


def test_named_argn_stays_positional():
    spec = parse("f kfree o=$arg1 $arg1")
    assert [(a.name, a.expr, a.text) for a in spec.args] == [
        ("o", ("arg", 1), "$arg1"), ("object", ("param", "object"), "object")]


def test_entry_values_on_return_probes_are_marked():
    spec = parse("f vfs_read%return count x=$arg1 file.f_pos $retval $comm \\1")
    assert [a.at_entry for a in spec.args] == [True, True, True, False, False, False]
    assert not any(a.at_entry for a in parse("f vfs_read count $arg1").args)


def test_arg_star_expands_where_it_stands():
    spec = parse("f vfs_read $comm $arg* x=\\1")
    assert [a.name for a in spec.args] == ["arg1", "file", "buf", "count", "pos", "x"]
    assert spec.args[1].expr == ("param", "file")


def test_arg_star_expansion_counts_against_the_limit():
    many = " ".join(f"\\{i}" for i in range(MAX_TRACE_ARGS - 3))
    parse(f"f vfs_read $arg* {many[:many.rfind(' ')]}")      # 4 + 124 = 128
    check_error(f"f vfs_read ^$arg* {many}", "TOO_MANY_ARGS")   # 4 + 125


def test_dynevent_limitations_128_args():
    """dynevent_limitations.tc: 128 fetchargs accepted, 129 rejected."""
    cmd = "f vfs_read " + " ".join(f"\\{i}" for i in range(1, MAX_TRACE_ARGS + 1))
    spec = parse(cmd)
    assert len(spec.args) == MAX_TRACE_ARGS
    assert spec.args[-1].name == "arg128"
    check_error("f vfs_read ^" + " ".join(f"\\{i}" for i in range(1, MAX_TRACE_ARGS + 2)),
                "TOO_MANY_ARGS")


def test_unresolved_symbol_defers_parameter_checks():
    spec = parse("f notyet.mod.func%return $arg* $arg3 anything.attr $retval")
    assert not spec.resolved
    assert spec.args[0] == FetchArg("", ("varargs",), None, "$arg*")
    assert spec.args[1].expr == ("arg", 3) and spec.args[1].name == "arg2"
    assert spec.args[2].expr == ("attr", ("param", "anything"), "attr")
    assert [a.at_entry for a in spec.args[1:]] == [True, True, False]
    assert spec.normalized() == ("f:fprobes/notyet_mod_func__exit notyet.mod.func%return "
                                 "$arg* arg2=$arg3 arg3=anything.attr arg4=$retval")
    # syntax is still checked
    check_error("f notyet.mod.func ^$arg0", "BAD_ARG_NUM")
    check_error("f notyet.mod.func ^$arg129", "BAD_ARG_NUM")
    check_error("f notyet.mod.func x^-y", "BAD_HYPHEN")
    check_error("f notyet.mod.func $arg* ^$arg*", "DOUBLE_ARGS")


def test_resolver_is_asked_for_the_symbol_only():
    asked = []

    def res(sym):
        asked.append(sym)
        return ["a"]
    parse_probe_command("f:g/e pkg.f%return a", res)
    assert asked == ["pkg.f"]
    asked.clear()
    with pytest.raises(ProbeError):
        parse_probe_command("f pkg.f+4", res)      # never a name the resolver could know
    assert asked == []


def test_removal_specs():
    assert parse("-:myevent2") == RemoveSpec(None, "myevent2")
    assert parse("-:fprobes/test1") == RemoveSpec("fprobes", "test1")
    assert parse("  -:grp/ev  a=1 b ") == RemoveSpec("grp", "ev", ("a=1", "b"))
