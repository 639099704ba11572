"""Tests for events/probe_parse.py: the fprobe dynamic-event grammar.

The error cases port selftests/ftrace/test.d/dynevent/fprobe_syntax_errors.tc: each
command carries a '^' where the kernel puts the caret, ftrace_errlog_check style.
The good cases follow fprobetrace.rst, add_remove_fprobe.tc, add_remove_btfarg.tc
and dynevent_limitations.tc.  Also: the BTF checks with a resolver that knows types
(FuncProto, BtfType), the kernel's order of checks around @ADDR/@SYM/+OFFS() forms
(refused only once the kernel would have taken the command), FETCH_INSN_MAX and
MAX_ARGSTR_LEN, and each argument listed as written (parg->comm).
"""
from __future__ import annotations

import errno

import pytest

from fntrace.errors import FntraceError
from fntrace.events.probe_parse import (
    BTF_ANY,
    BTF_VOID,
    ERRORS,
    MAX_ARGSTR_LEN,
    MAX_TRACE_ARGS,
    UNRESOLVED,
    BtfType,
    FetchArg,
    FuncProto,
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


# The same functions with BTF: what the kernel knows of vfs_read(struct file *file,
# char __user *buf, size_t count, loff_t *pos) -> ssize_t, kfree() -> void and
# getname_flags() -> struct filename *.
LONG_T = BtfType("long", "value", lambda n: BTF_ANY if hasattr(int, n) else None)
CHARP = BtfType("char *", "value", {}, string=True)
FILE = BtfType("file", "struct", {"f_path": BTF_ANY, "f_pos": LONG_T, "f_flags": LONG_T})
FILENAME = BtfType("filename", "struct", {"name": CHARP, "refcnt": LONG_T})
PROTOS = {
    "vfs_read": FuncProto(("file", "buf", "count", "pos"),
                          {"file": FILE, "buf": CHARP, "count": LONG_T, "pos": LONG_T}, LONG_T),
    "kfree": FuncProto(("object",), {}, BTF_VOID),
    "getname_flags": FuncProto(("filename", "flags"), {"flags": LONG_T}, FILENAME),
}


def resolve_btf(symbol: str):
    return PROTOS.get(symbol) or resolve(symbol)


def check_error(cmd_with_caret: str, kind: str, resolver=resolve) -> ProbeError:
    """ftrace_errlog_check: the command without '^' fails with the caret there."""
    pos = cmd_with_caret.index("^")
    cmd = cmd_with_caret[:pos] + cmd_with_caret[pos + 1:]
    with pytest.raises(ProbeError) as ei:
        parse_probe_command(cmd, resolver)
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
    ("f vfs_read +0(^+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(@0))))))))))))))", "TOO_MANY_OPS"),
    ("f vfs_read +0(@11):u8[10^", "ARRAY_NO_CLOSE"),
    ("f vfs_read +0(@11):u8[10]^a", "BAD_ARRAY_SUFFIX"),
    ("f vfs_read +0(@11):u8[^10a]", "BAD_ARRAY_NUM"),
    ("f vfs_read +0(@11):u8[^256]", "ARRAY_TOO_BIG"),
    ("f vfs_read @11:^unknown_type", "BAD_TYPE"),
    ("f vfs_read $stack0:^string", "BAD_STRING"),
    ("f vfs_read @11:^b10@a/16", "BAD_BITFIELD"),
    ("f vfs_read ^arg123456789012345678901234567890=@11", "ARG_NAME_TOO_LONG"),
    ("f vfs_read ^=@11", "NO_ARG_NAME"),
    ("f vfs_read ^var.1=@11", "BAD_ARG_NAME"),
    ("f vfs_read var1=@11 ^var1=@12", "USED_ARG_NAME"),
    ("f vfs_read ^+1234567(+1234567(+1234567(+1234567(+1234567(+1234567(@1234))))))",
     "ARG_TOO_LONG"),
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


# fprobe_syntax_errors.tc's "BTF arguments errors", with the types the kernel has.
SELFTEST_BTF_CASES = [
    ("f kfree%return ^$retval", "NO_RETVAL"),
    ("f vfs_read%return $retval->^foo", "NO_PTR_STRCT"),
    ("f vfs_read file->^foo", "NO_BTF_FIELD"),
    ("f vfs_read file^-.foo", "BAD_HYPHEN"),
    ("f vfs_read ^file:string", "BAD_TYPE4STR"),
]


@pytest.mark.parametrize("cmd,kind", SELFTEST_BTF_CASES, ids=[k for _, k in SELFTEST_BTF_CASES])
def test_fprobe_btf_syntax_errors(cmd, kind):
    check_error(cmd, kind, resolve_btf)
    # without BTF the kernel accepts them (the parse is all it can check)
    if kind != "BAD_HYPHEN":
        parse(cmd.replace("^", ""))


BTF_ERRORS = [
    ("f kfree%return x=^$retval.x:string", "NO_RETVAL"),
    ("f kfree%return object ^$retval", "NO_RETVAL"),
    ("f vfs_read file.^foo", "NO_BTF_FIELD"),
    ("f vfs_read file->f_pos->^x", "NO_PTR_STRCT"),
    ("f vfs_read file.f_pos.^nope.x", "NO_PTR_STRCT"),
    ("f vfs_read count.^x", "NO_PTR_STRCT"),
    ("f vfs_read $arg1->^nope", "NO_BTF_FIELD"),           # an unnamed $argN is the parameter
    ("f vfs_read ^count:string", "BAD_TYPE4STR"),
    ("f vfs_read file->^f_pos:string", "BAD_TYPE4STR"),
    ("f vfs_read ^$arg*:string", "BAD_VAR_ARGS"),
    ("f getname_flags%return $retval->^nope", "NO_BTF_FIELD"),
    ("f getname_flags%return $retval->name.^x", "NO_PTR_STRCT"),
    # the kernel's order: a field is looked up once the separator after it is known good
    ("f vfs_read file->foo^-x", "BAD_HYPHEN"),
    ("f vfs_read file->^foo->x-y", "NO_BTF_FIELD"),
    # types are checked before the finalising checks (BAD_STRING, BAD_BITFIELD)
    ("f vfs_read file->^f_pos:string", "BAD_TYPE4STR"),
]


@pytest.mark.parametrize("cmd,kind", BTF_ERRORS, ids=[c for c, _ in BTF_ERRORS])
def test_btf_type_errors(cmd, kind):
    check_error(cmd, kind, resolve_btf)


@pytest.mark.parametrize("cmd", [
    "f vfs_read file->f_path.dentry.anything[0].x:string",   # BTF_ANY: anything goes
    "f vfs_read buf:string file->f_pos:u32 count:x64 pos",
    "f vfs_read file.f_pos.real count.bit_length",  # what an int has
    "f vfs_read x=$arg1->nope",          # a named $argN is a register: no BTF type
    "f vfs_read%return $retval $retval.real $retval:s32",
    "f getname_flags%return $retval->name:string $retval->refcnt",
    "f kfree object->anything:string",   # no type known: accepted
    "f kfree%return object",
])
def test_btf_types_accept_what_they_know(cmd):
    assert isinstance(parse_probe_command(cmd, resolve_btf), ProbeSpec)


def test_a_resolver_may_still_answer_parameter_names_only():
    spec = parse_probe_command("f kfree%return $retval->x:string object:string",
                               lambda s: ["object"])
    assert [a.name for a in spec.args] == ["arg1", "object"]


def test_btf_type_members():
    assert FILE.member("f_pos") is LONG_T and FILE.member("nope") is None
    assert BTF_ANY.member("anything") is BTF_ANY and BTF_ANY.string
    assert BtfType("x", "struct").member("y") is BTF_ANY        # members not known
    lazy = BtfType("x", "struct", lambda n: LONG_T if n == "n" else None)
    assert lazy.member("n") is LONG_T and lazy.member("m") is None
    assert FuncProto(("a",)).retval is BTF_ANY and dict(FuncProto(("a",)).types) == {}


MEMORY_ORDER = [
    # @ADDR, @SYM and +OFFS(...) have no Python meaning, but the kernel parses them
    # through: an error it reports later in the command still wins, at its own caret.
    ("f vfs_read @jiffies ^hoge", "NO_BTFARG"),
    ("f vfs_read +0(@11):u8[10] ^$arg9", "NO_BTFARG"),
    ("f vfs_read x=@1 ^x=file", "USED_ARG_NAME"),
    ("f vfs_read @sym arg2=^" + "x" * (MAX_ARGSTR_LEN + 1), "ARG_TOO_LONG"),
    ("f vfs_read +0(@sym):^b9@0/8", "BAD_BITFIELD"),
    ("f vfs_read @sym:string[2]^x", "BAD_ARRAY_SUFFIX"),
    # and when the kernel has nothing to say, the first of them is refused
    ("f vfs_read file ^@jiffies +0(file)", "BAD_MEM_ADDR"),
    ("f vfs_read file ^+0(file) @jiffies", "BAD_FETCH_ARG"),
    ("f vfs_read +0(^@1)", "BAD_MEM_ADDR"),
    ("f vfs_read ^@0x10:u8", "BAD_MEM_ADDR"),
    ("f vfs_read +0(^@sym):u8[10]", "BAD_MEM_ADDR"),
    ("f vfs_read ^@sym:string", "BAD_MEM_ADDR"),
    ("f notyet.mod.func ^@sym", "BAD_MEM_ADDR"),
    # TOO_MANY_OPS: FETCH_INSN_MAX instructions, whatever the base
    ("f vfs_read " + "+0(^" + "+0(" * 14 + "\\1" + ")" * 15, "TOO_MANY_OPS"),
    ("f vfs_read " + "+0(^" + "+0(" * 12 + "@s" + ")" * 13, "TOO_MANY_OPS"),
    ("f vfs_read +0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(@0))))))))))))):^b1@0/8",
     "BAD_BITFIELD"),
]


@pytest.mark.parametrize("cmd,kind", MEMORY_ORDER, ids=[c for c, _ in MEMORY_ORDER])
def test_memory_fetchargs_in_the_kernels_order(cmd, kind):
    check_error(cmd, kind)


def test_fetch_instructions_up_to_the_limit():
    # 13 dereferences of @0 fill FETCH_INSN_MAX - 1 instructions: the kernel accepts
    # it, so the refusal is ours, at the innermost memory fetch
    check_error("f vfs_read " + "+0(" * 13 + "^@0" + ")" * 13, "BAD_MEM_ADDR")
    check_error("f vfs_read " + "+0(" * 13 + "^+0(\\1" + ")" * 14, "BAD_FETCH_ARG")
    # a chain of 14 '->' on a parameter (one instruction each) fits too
    chain = "file" + "->f" * 14
    assert len(chain) <= MAX_ARGSTR_LEN
    parse(f"f vfs_read {chain}")
    check_error("f vfs_read file" + "->f" * 14 + "->^f", "TOO_MANY_OPS")


def test_max_argstr_len_is_the_kernels():
    assert MAX_ARGSTR_LEN == 63
    body = "file" + ".a" * 29 + "b"                 # 63 characters
    assert len(body) == 63
    parse(f"f vfs_read {body}")
    parse(f"f vfs_read name={body}")                  # NAME= does not count
    check_error(f"f vfs_read ^{body}b", "ARG_TOO_LONG")
    check_error(f"f vfs_read name=^{body}b", "ARG_TOO_LONG")


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
     "f:fprobes/fpevent getname_flags%return path=$retval->name:string"),
    # names, groups, types
    ("f:grp/ev vfs_read", "f:grp/ev vfs_read"),
    ("f:grp.ev vfs_read", "f:grp/ev vfs_read"),
    ("f:grp/ vfs_read", "f:grp/vfs_read__entry vfs_read"),
    ("f:ev vfs_read x=$arg2 $arg3:u32", "f:fprobes/ev vfs_read x=$arg2 count=count:u32"),
    ("f vfs_read $comm $stack2 $stack", "f:fprobes/vfs_read__entry vfs_read arg1=$comm arg2=$stack2 arg3=$stack"),
    ("f vfs_read $COMM:string", "f:fprobes/vfs_read__entry vfs_read arg1=$COMM:string"),
    ("f vfs_read \\123 \\0x1f:x8 \\-1:s8 s=\\\"hi_there\"",
     "f:fprobes/vfs_read__entry vfs_read arg1=\\123 arg2=\\0x1f:x8 arg3=\\-1:s8 s=\\\"hi_there\""),
    # trace_fprobe_show() prints each argument as written (parg->comm)
    ("f vfs_read file->f_path.dentry[0]['name'][\"k'\"][-1]:repr",
     "f:fprobes/vfs_read__entry vfs_read arg1=file->f_path.dentry[0]['name'][\"k'\"][-1]:repr"),
    ("f vfs_read a=file[\"k\"] b=file[0x1] c=file->f_pos d=file.f_pos e=$arg1->x",
     "f:fprobes/vfs_read__entry vfs_read a=file[\"k\"] b=file[0x1] c=file->f_pos "
     "d=file.f_pos e=$arg1->x"),
    ("f vfs_read%return r=$retval->name.x:b4@2/8 \\+5:s8",
     "f:fprobes/vfs_read__exit vfs_read%return r=$retval->name.x:b4@2/8 arg2=\\+5:s8"),
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
        "self->items[2].name", "x['k']", "x.real", '\\"s"', "\\0x10", "$stack3"]


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
