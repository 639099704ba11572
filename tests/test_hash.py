"""Tests for core/hash.py: FtraceHash and the set_ftrace_filter grammar.

Mirrors kernel/trace/ftrace.c (ftrace_process_regex, match_records,
ftrace_mod_callback), lib/glob.c (lib/globtest.c cases) and the selftest
test.d/ftrace/func-filter-glob.tc.
"""
from __future__ import annotations

import errno
import fnmatch
import inspect
import re
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fntrace.core.hash import (
    EMPTY_HASH,
    MATCH_END_ONLY,
    MATCH_FRONT_ONLY,
    MATCH_FULL,
    MATCH_GLOB,
    MATCH_INDEX,
    MATCH_MIDDLE_ONLY,
    FtraceHash,
    ModCacheEntry,
    PendingPattern,
    apply_mod_cache,
    apply_pending,
    filter_parse_regex,
    ftrace_match,
    ftrace_process_regex,
    glob_match,
    hash_contains,
    hash_lines,
    module_scope,
)
from fntrace.errors import FilterError

ALL_ENABLED = "#### all functions enabled ####"
NONE_DISABLED = "#### no functions disabled ####"


@dataclass(eq=False)
class Rec:
    """A stand-in for core/records.py DynFtrace: hashable by identity."""

    module: str
    qualname: str
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"{self.module}.{self.qualname}" if self.module else self.qualname


def recs(*names: str) -> list[Rec]:
    """'json.encoder:JSONEncoder.encode' -> Rec(module, qualname)."""
    out = []
    for n in names:
        mod, _, qual = n.partition(":")
        out.append(Rec(mod, qual))
    return out


RECORDS = recs(
    "json.encoder:JSONEncoder.encode",            # 1
    "json.encoder:JSONEncoder.iterencode",        # 2
    "json.encoder:JSONEncoder.default",           # 3
    "json.encoder:py_encode_basestring",          # 4
    "json.encoder:_make_iterencode",              # 5
    "json.decoder:JSONDecoder.decode",            # 6
    "json.decoder:JSONDecoder.raw_decode",        # 7
    "json.decoder:py_scanstring",                 # 8
    "json.scanner:py_make_scanner",               # 9
    "collections:OrderedDict.popitem",            # 10
    "collections:Counter.most_common",            # 11
    "re:compile",                                 # 12
    "re:_compile",                                # 13
    "re:sub",                                     # 14
)
LOADED = ("json", "json.encoder", "json.decoder", "json.scanner", "collections", "re")


def names(h: FtraceHash, order=RECORDS) -> list[str]:
    return [r.name for r in order if r in h]


def write(h: FtraceHash, buf: str, records=RECORDS, **kw) -> FtraceHash:
    kw.setdefault("mod_cache", [])
    kw.setdefault("loaded_modules", LOADED)
    ftrace_process_regex(h, buf, records, **kw)
    return h


# ---------------------------------------------------------------------------
# filter_parse_regex / ftrace_match
# ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    "buff, expected",
    [
        ("encode", (MATCH_FULL, "encode", False)),
        ("encode*", (MATCH_FRONT_ONLY, "encode", False)),
        ("*encode", (MATCH_END_ONLY, "encode", False)),
        ("*encode*", (MATCH_MIDDLE_ONLY, "encode", False)),
        ("*", (MATCH_END_ONLY, "", False)),
        ("**", (MATCH_MIDDLE_ONLY, "", False)),
        ("en*de", (MATCH_GLOB, "en*de", False)),
        ("*en*de", (MATCH_GLOB, "*en*de", False)),
        ("[Jj]SON", (MATCH_GLOB, "[Jj]SON", False)),
        ("enc?de", (MATCH_GLOB, "enc?de", False)),
        ("a\\*", (MATCH_GLOB, "a\\*", False)),
        ("!encode*", (MATCH_FRONT_ONLY, "encode", True)),
        ("!*", (MATCH_END_ONLY, "", True)),
        ("12", (MATCH_INDEX, "12", False)),
        ("!3x", (MATCH_INDEX, "3x", True)),
        ("", (MATCH_FULL, "", False)),
    ],
)
def test_filter_parse_regex_types(buff, expected):
    assert filter_parse_regex(buff) == expected


def test_filter_parse_regex_unicode_digit_is_not_an_index():
    # The kernel's isdigit() is ASCII only.
    assert filter_parse_regex("\u0663x")[0] == MATCH_FULL


@pytest.mark.parametrize(
    "s, mtype, search, result",
    [
        ("JSONEncoder.encode", MATCH_FULL, "JSONEncoder.encode", True),
        ("JSONEncoder.encode", MATCH_FULL, "JSONEncoder", False),
        ("JSONEncoder.encode", MATCH_FRONT_ONLY, "JSON", True),
        ("JSONEncoder.encode", MATCH_FRONT_ONLY, "encode", False),
        ("JSONEncoder.encode", MATCH_END_ONLY, "encode", True),
        ("JSONEncoder.encode", MATCH_END_ONLY, "JSON", False),
        ("JSONEncoder.encode", MATCH_END_ONLY, "", True),
        ("JSONEncoder.encode", MATCH_MIDDLE_ONLY, "Enc", True),
        ("JSONEncoder.encode", MATCH_MIDDLE_ONLY, "Dec", False),
        ("JSONEncoder.encode", MATCH_GLOB, "JSON*.enc?de", True),
        ("JSONEncoder.encode", MATCH_GLOB, "json*", False),
        ("JSONEncoder.encode", MATCH_INDEX, "1", False),
    ],
)
def test_ftrace_match_each_type(s, mtype, search, result):
    assert ftrace_match(s, mtype, search) is result


# lib/globtest.c
GLOBTEST = [
    (True, "a", "a"), (False, "a", "b"), (False, "a", "aa"), (False, "a", ""),
    (True, "", ""), (False, "", "a"),
    (True, "[a]", "a"), (False, "[a]", "b"), (False, "[!a]", "a"), (True, "[!a]", "b"),
    (True, "[ab]", "a"), (True, "[ab]", "b"), (False, "[ab]", "c"), (True, "[!ab]", "c"),
    (True, "[a-c]", "b"), (False, "[a-c]", "d"),
    (True, "[a-c-e-g]", "-"), (False, "[a-c-e-g]", "d"), (True, "[a-c-e-g]", "f"),
    (True, "[]a-ceg-ik[]", "a"), (True, "[]a-ceg-ik[]", "]"), (True, "[]a-ceg-ik[]", "["),
    (True, "[]a-ceg-ik[]", "h"), (False, "[]a-ceg-ik[]", "f"),
    (False, "[!]a-ceg-ik[]", "h"), (False, "[!]a-ceg-ik[]", "]"), (True, "[!]a-ceg-ik[]", "f"),
    (True, "?", "a"), (False, "?", "aa"), (False, "??", "a"),
    (True, "?x?", "axb"), (False, "?x?", "abx"), (False, "?x?", "xab"),
    (False, "*??", "a"), (True, "*??", "ab"), (True, "*??", "abc"), (True, "*??", "abcd"),
    (False, "??*", "a"), (True, "??*", "ab"), (True, "??*", "abc"), (True, "??*", "abcd"),
    (False, "?*?", "a"), (True, "?*?", "ab"), (True, "?*?", "abc"), (True, "?*?", "abcd"),
    (True, "*b", "b"), (True, "*b", "ab"), (False, "*b", "ba"), (True, "*b", "bb"),
    (True, "*b", "abb"), (True, "*b", "bab"),
    (True, "*bc", "abbc"), (True, "*bc", "bc"), (True, "*bc", "bbc"), (True, "*bc", "bcbc"),
    (True, "*ac*", "abacadaeafag"), (True, "*ac*ae*ag*", "abacadaeafag"),
    (True, "*a*b*[bc]*[ef]*g*", "abacadaeafag"), (False, "*a*b*[ef]*[cd]*g*", "abacadaeafag"),
    (True, "*abcd*", "abcabcabcabcdefg"), (True, "*ab*cd*", "abcabcabcabcdefg"),
    (True, "*abcd*abcdef*", "abcabcdabcdeabcdefg"),
    (False, "*abcd*", "abcabcabcabcefg"), (False, "*ab*cd*", "abcabcabcabcefg"),
]


@pytest.mark.parametrize("expected, pattern, s", GLOBTEST)
def test_glob_match_globtest_cases(expected, pattern, s):
    assert glob_match(pattern, s) is expected


@pytest.mark.parametrize(
    "pattern, s, expected",
    [
        ("a\\*", "a*", True),        # escaped '*' is literal
        ("a\\*", "ab", False),
        ("a\\?", "a?", True),
        ("\\[x]", "[x]", True),
        ("a\\", "a", True),          # trailing lone backslash: end of string
        ("a\\", "ab", False),
        ("[a", "[a", True),          # malformed class: literal '['
        ("*[a", "xx[a", True),
        ("[a-", "[a-", True),
        ("Enc*", "enc", False),      # case-sensitive
        ("a*", "a.b.c", True),       # '*' crosses '.'
    ],
)
def test_glob_match_escapes_and_malformed(pattern, s, expected):
    assert glob_match(pattern, s) is expected


# ---------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------

# No glob metacharacters, no leading digit or '!': the four non-glob forms.
_plain = st.text(alphabet="abcAB_.<>", max_size=6)
_subject = st.text(alphabet="abcAB_.<>", max_size=10)


@settings(max_examples=400, deadline=None)
@given(search=_plain, form=st.sampled_from(["full", "front", "end", "middle"]), s=_subject)
def test_ftrace_match_agrees_with_fnmatch_and_regex(search, form, s):
    pattern = {"full": search, "front": search + "*", "end": "*" + search,
               "middle": "*" + search + "*"}[form]
    mtype, parsed, negate = filter_parse_regex(pattern)
    assert not negate
    if form != "full" or search:
        assert mtype != MATCH_GLOB
    regex = {"full": "{}", "front": "{}.*", "end": ".*{}", "middle": ".*{}.*"}[form]
    expected = re.fullmatch(regex.format(re.escape(search)), s, re.S) is not None
    assert ftrace_match(s, mtype, parsed) is expected
    assert fnmatch.fnmatchcase(s, pattern) is expected


# fnmatch and lib/glob.c agree except on '\' (fnmatch has no escape) and
# '[!' (fnmatch reads '[!]' differently from the kernel's "class may start
# with ']'").
_glob_pattern = st.text(alphabet="ab-[]*?c", max_size=8).filter(lambda p: "[!" not in p)
_glob_subject = st.text(alphabet="ab-[]*?c!", max_size=8)


@settings(max_examples=1000, deadline=None)
@given(pattern=_glob_pattern, s=_glob_subject)
def test_glob_match_agrees_with_fnmatchcase(pattern, s):
    assert glob_match(pattern, s) is fnmatch.fnmatchcase(s, pattern)


# module_scope() may narrow which modules are listed before a filter is matched: it must
# never leave out a module one of whose functions a word selects.
_mod_name = st.text(alphabet="ab_.", min_size=1, max_size=5).filter(
    lambda m: not m.startswith(".") and not m.endswith("."))
_qualname = st.text(alphabet="ab_.<>", min_size=1, max_size=5)
_word = st.text(alphabet="ab_.*?[]!", min_size=1, max_size=7).filter(
    lambda w: not w[0].isdigit())


@settings(max_examples=1500, deadline=None)
@given(module=_mod_name, qualname=_qualname, words=st.lists(_word, min_size=1, max_size=3),
       mod_glob=st.one_of(st.none(), st.text(alphabet="ab_.*", min_size=1, max_size=4)))
def test_module_scope_never_leaves_out_a_match(module, qualname, words, mod_glob):
    name = f"{module}.{qualname}"
    if mod_glob is not None:
        words = words + [f"{words[0].lstrip('!') or '*'}:mod:{mod_glob}"]
    buf = " ".join(words)
    scope = module_scope(buf)
    h = FtraceHash()

    class Rec:
        pass
    rec = Rec()
    rec.name, rec.module, rec.qualname = name, module, qualname
    try:
        ftrace_process_regex(h, buf, [rec], mod_cache=[], pending=[], allow_commands=False,
                             loaded_modules=[module])
    except FilterError:
        return
    if rec in h.entries:
        assert scope is None or scope(module), (buf, name)


def test_module_scope_narrows_plain_names():
    scope = module_scope("shop.checkout shop.cart.* json.encoder.*")
    assert scope("shop") and scope("shop.cart") and scope("json.encoder") and scope("json")
    assert not scope("shopping") and not scope("os") and not scope("json.decoder")
    assert module_scope("*checkout") is None          # any module may end so
    assert module_scope("1") is None                  # an index: the whole list
    assert module_scope("f:traceon") is None          # a command
    only = module_scope("!shop.x")                    # removes only: lists nothing
    assert only is not None and not only("shop")
    by_mod = module_scope("*:mod:shop*")
    assert by_mod("shop") and by_mod("shopping") and not by_mod("os")


# ---------------------------------------------------------------------------
# FtraceHash and EMPTY_HASH
# ---------------------------------------------------------------------------

def test_ftrace_hash_is_a_set_by_identity():
    a, b = Rec("m", "f"), Rec("m", "f")     # equal fields, different records
    h = FtraceHash([a])
    assert a in h and b not in h
    assert len(h) == h.count == 1 and bool(h)
    h.add(b)
    h.add(b)
    assert h.count == 2 and set(h) == {a, b}
    h.discard(a)
    h.discard(a)
    assert list(h) == [b]
    c = h.copy()
    c.clear()
    assert not c and h.count == 1


def test_empty_hash_is_read_only_and_copies_to_mutable():
    assert not EMPTY_HASH and len(EMPTY_HASH) == 0 and EMPTY_HASH.count == 0
    with pytest.raises(RuntimeError):
        EMPTY_HASH.add(RECORDS[0])
    c = EMPTY_HASH.copy()
    assert type(c) is FtraceHash
    c.add(RECORDS[0])
    assert RECORDS[0] in c and not EMPTY_HASH


def test_process_regex_will_not_fill_empty_hash():
    with pytest.raises(RuntimeError):
        write(EMPTY_HASH, "re.sub")
    write(EMPTY_HASH, "   ")            # a no-op write is fine
    assert not EMPTY_HASH


def test_hash_contains_empty_filter_matches_all_notrace_wins():
    r1, r2 = RECORDS[0], RECORDS[1]
    assert hash_contains(r1, EMPTY_HASH, EMPTY_HASH)
    assert hash_contains(r1, FtraceHash([r1]), EMPTY_HASH)
    assert not hash_contains(r2, FtraceHash([r1]), EMPTY_HASH)
    assert not hash_contains(r1, EMPTY_HASH, FtraceHash([r1]))
    assert hash_contains(r2, EMPTY_HASH, FtraceHash([r1]))
    assert not hash_contains(r1, FtraceHash([r1]), FtraceHash([r1]))


# ---------------------------------------------------------------------------
# ftrace_process_regex: plain patterns
# ---------------------------------------------------------------------------

def test_match_full():
    assert names(write(FtraceHash(), "re.compile")) == ["re.compile"]


def test_match_front_only():
    assert names(write(FtraceHash(), "json.decoder.*")) == [
        "json.decoder.JSONDecoder.decode", "json.decoder.JSONDecoder.raw_decode",
        "json.decoder.py_scanstring"]


def test_match_end_only():
    assert names(write(FtraceHash(), "*compile")) == ["re.compile", "re._compile"]


def test_match_middle_only():
    assert names(write(FtraceHash(), "*iterencode*")) == [
        "json.encoder.JSONEncoder.iterencode", "json.encoder._make_iterencode"]


def test_match_glob():
    assert names(write(FtraceHash(), "json.*.py_*")) == [
        "json.encoder.py_encode_basestring", "json.decoder.py_scanstring",
        "json.scanner.py_make_scanner"]
    assert names(write(FtraceHash(), "re.[cs]*")) == ["re.compile", "re.sub"]
    assert names(write(FtraceHash(), "re.su?")) == ["re.sub"]


def test_star_matches_everything():
    assert names(write(FtraceHash(), "*")) == [r.name for r in RECORDS]


def test_bang_removes_matches():
    h = write(FtraceHash(), "json.*")
    write(h, "!*decode*")
    assert names(h) == [
        "json.encoder.JSONEncoder.encode", "json.encoder.JSONEncoder.iterencode",
        "json.encoder.JSONEncoder.default", "json.encoder.py_encode_basestring",
        "json.encoder._make_iterencode", "json.scanner.py_make_scanner"]


def test_bang_on_records_not_in_hash_is_not_an_error():
    # enter_record(): removing an absent entry does nothing; it still "matched".
    h = write(FtraceHash(), "re.sub")
    write(h, "!json.*")
    assert names(h) == ["re.sub"]


def test_later_words_apply_after_earlier_ones():
    h = write(FtraceHash(), "re.* !re._compile re.sub")
    assert names(h) == ["re.compile", "re.sub"]
    h = write(FtraceHash(), "!re.sub re.*")
    assert names(h) == ["re.compile", "re._compile", "re.sub"]


def test_index_selects_available_filter_functions_line():
    h = write(FtraceHash(), "1 12")
    assert names(h) == ["json.encoder.JSONEncoder.encode", "re.compile"]
    write(h, "!1")
    assert names(h) == ["re.compile"]


def test_index_accepts_kstrtoul_bases():
    # add_rec_by_index() uses kstrtoul(..., 0): 0x hex and leading-0 octal.
    assert names(write(FtraceHash(), "0xe")) == ["re.sub"]
    assert names(write(FtraceHash(), "010")) == [RECORDS[7].name]


def test_whitespace_separates_patterns():
    h = write(FtraceHash(), "  re.sub\tre.compile\n\n*scanner* \r\v\f")
    assert names(h) == ["json.scanner.py_make_scanner", "re.compile", "re.sub"]


def test_empty_write_does_nothing():
    h = write(FtraceHash(), "re.sub")
    cache = [ModCacheEntry("f", "yaml")]
    for buf in ("", "   ", "\n\t"):
        write(h, buf, mod_cache=cache)
    assert names(h) == ["re.sub"] and cache == [ModCacheEntry("f", "yaml")]


# ---------------------------------------------------------------------------
# Errors: position, errno, all-or-nothing
# ---------------------------------------------------------------------------

def test_no_match_error_position_and_errno():
    buf = "re.sub  nosuch_function"
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), buf)
    e = ei.value
    assert e.pos == 8 and e.command == buf and e.errno == errno.EINVAL
    assert buf[e.pos:].startswith("nosuch_function")


def test_negated_no_match_is_an_error():
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), "re.sub !nosuch")
    assert ei.value.pos == 7


@pytest.mark.parametrize(
    "buf, pos",
    [
        ("0", 0),              # index 0: the index starts at 1
        ("re.sub 15", 7),      # one past the last record
        ("re.sub  3x", 8),     # not a number
        ("re.sub !08", 7),     # bad octal
        ("1 2 99999", 4),
    ],
)
def test_bad_index_error_position(buf, pos):
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), buf)
    assert ei.value.pos == pos and ei.value.command == buf


def test_unknown_command_error_points_at_command():
    buf = "re.sub re.compile:bogus:3"
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), buf)
    assert ei.value.pos == 18 and buf[18:].startswith("bogus")


def test_commands_refused_when_not_allowed_but_mod_accepted():
    calls = []
    cmds = {"traceoff": lambda *a: calls.append(a)}
    buf = "re.sub:traceoff"
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), buf, commands=cmds, allow_commands=False)
    assert ei.value.pos == 7 and not calls
    h = write(FtraceHash(), "sub:mod:re", commands=cmds, allow_commands=False)
    assert names(h) == ["re.sub"]


def test_state_unchanged_after_error():
    h = write(FtraceHash(), "re.sub")
    before = set(h)
    cache = [ModCacheEntry("load", "yaml")]
    pending = [PendingPattern("x.y", False)]
    for buf in ("re.* !re.sub foo*:mod:toml nosuch",
                "re.* 99",
                "!load:mod:yaml re.compile:bogus",
                "json.*:mod:json* zzz:mod:json.encoder"):
        with pytest.raises(FilterError):
            write(h, buf, mod_cache=cache)
        assert set(h) == before
        assert cache == [ModCacheEntry("load", "yaml")]
    with pytest.raises(FilterError):
        write(h, "more:mod:toml nothing_here 0", mod_cache=cache, pending=pending)
    assert set(h) == before and cache == [ModCacheEntry("load", "yaml")]
    assert pending == [PendingPattern("x.y", False)]


# ---------------------------------------------------------------------------
# :mod:
# ---------------------------------------------------------------------------

def test_mod_func_glob_matches_qualname():
    h = write(FtraceHash(), "JSONEncoder.*:mod:json.encoder")
    assert names(h) == ["json.encoder.JSONEncoder.encode", "json.encoder.JSONEncoder.iterencode",
                        "json.encoder.JSONEncoder.default"]
    # FUNC is matched against the qualname, not the full name
    with pytest.raises(FilterError):
        write(FtraceHash(), "json.encoder.*:mod:json.encoder")


def test_mod_module_glob():
    h = write(FtraceHash(), "*decode:mod:json*")
    assert names(h) == ["json.decoder.JSONDecoder.decode", "json.decoder.JSONDecoder.raw_decode"]
    h = write(FtraceHash(), "py_*:mod:json.[ds]*")
    assert names(h) == ["json.decoder.py_scanstring", "json.scanner.py_make_scanner"]


def test_mod_all_functions_of_module():
    h = write(FtraceHash(), "*:mod:re")
    assert names(h) == ["re.compile", "re._compile", "re.sub"]
    # blank FUNC, like the kernel's "blank search means all funcs in the mod"
    h = write(FtraceHash(), ":mod:collections")
    assert names(h) == ["collections.OrderedDict.popitem", "collections.Counter.most_common"]


def test_mod_star_star_selects_every_module():
    h = write(FtraceHash(), "*:mod:*")
    assert names(h) == [r.name for r in RECORDS]


def test_mod_bang_module_means_every_module_except():
    h = write(FtraceHash(), "*:mod:!json*")
    assert names(h) == ["collections.OrderedDict.popitem", "collections.Counter.most_common",
                        "re.compile", "re._compile", "re.sub"]
    # every *compile is in re: nothing matches outside it
    with pytest.raises(FilterError):
        write(FtraceHash(), "*compile:mod:!re")


def test_bang_star_mod_bang_json_keeps_only_json():
    h = write(FtraceHash(), "*")
    write(h, "!*:mod:!json*")
    assert names(h) == [r.name for r in RECORDS if r.module.startswith("json")]


def test_bang_func_mod_removes():
    h = write(FtraceHash(), "*:mod:json.encoder")
    write(h, "!*iterencode*:mod:json.encoder")
    assert names(h) == ["json.encoder.JSONEncoder.encode", "json.encoder.JSONEncoder.default",
                        "json.encoder.py_encode_basestring"]


def test_mod_star_and_bang_star_with_module_less_records():
    # A record with no module plays a core-kernel function: '*' is "every
    # module", '!*' is "no module" (ftrace_match_record's blank module glob).
    core = Rec("", "builtin_func")
    records = [*RECORDS, core]
    assert core not in write(FtraceHash(), "*:mod:*", records)
    assert names(write(FtraceHash(), "*:mod:!*", records), records) == ["builtin_func"]


def test_mod_in_loaded_module_with_no_func_match_is_an_error():
    buf = "re.sub nosuch:mod:json.encoder"
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), buf)
    assert ei.value.pos == 7


def test_mod_with_bang_module_and_no_match_is_an_error():
    with pytest.raises(FilterError) as ei:
        write(FtraceHash(), "nosuch:mod:!yaml")
    assert ei.value.pos == len("nosuch:mod:")


def test_mod_missing_module_is_an_error():
    for buf, pos in (("sub:mod", 4), ("sub:mod:", 8)):
        with pytest.raises(FilterError) as ei:
            write(FtraceHash(), buf)
        assert ei.value.pos == pos


def test_mod_index_is_an_error():
    with pytest.raises(FilterError):
        write(FtraceHash(), "3:mod:re")


def test_mod_module_loaded_without_records_is_not_cached():
    # "json" is imported (in loaded_modules) but owns no record here.
    with pytest.raises(FilterError):
        write(FtraceHash(), "dumps:mod:json")


# ---------------------------------------------------------------------------
# :mod: caching for modules not imported yet (func_mod_trace.tc)
# ---------------------------------------------------------------------------

def test_mod_for_unloaded_module_is_cached_and_listed():
    h, cache = FtraceHash(), []
    write(h, "non_exist_func:mod:non_exist_module", mod_cache=cache)
    assert not h
    assert cache == [ModCacheEntry("non_exist_func", "non_exist_module")]
    assert hash_lines(h, RECORDS, cache, empty_line=ALL_ENABLED) == [
        "non_exist_func:mod:non_exist_module"]
    # writing it again does not list it twice
    write(h, "non_exist_func:mod:non_exist_module", mod_cache=cache)
    assert len(cache) == 1


def test_cached_mod_applies_when_module_loads():
    h, cache = write(FtraceHash(), "re.sub"), []
    write(h, "*:mod:yaml load*:mod:toml*", mod_cache=cache)
    assert [str(e) for e in cache] == ["*:mod:yaml", "load*:mod:toml*"]
    yaml = recs("yaml:load", "yaml:dump", "yaml.nodes:Node.__init__")
    assert apply_mod_cache(h, cache, yaml) == 2         # yaml.nodes is another module
    tomllib = recs("tomllib._parser:loads", "tomllib._parser:load", "tomllib._parser:parse")
    assert apply_mod_cache(h, cache, tomllib) == 2
    assert names(h, RECORDS + yaml + tomllib) == [
        "re.sub", "yaml.load", "yaml.dump", "tomllib._parser.loads", "tomllib._parser.load"]
    # entries stay cached; applying again adds nothing new
    assert len(cache) == 2
    assert apply_mod_cache(h, cache, yaml) == 0


def test_mod_cache_entry_matches_like_mod_filter():
    e = ModCacheEntry("Node.*", "yaml*")
    assert e.matches(Rec("yaml.nodes", "Node.__init__"))
    assert not e.matches(Rec("yaml.nodes", "ScalarNode.__init__"))
    assert not e.matches(Rec("json", "Node.x"))
    assert ModCacheEntry("*", "!json*").matches(Rec("yaml", "load"))
    assert not ModCacheEntry("*", "!json*").matches(Rec("json.decoder", "x"))
    assert str(e) == "Node.*:mod:yaml*"


def test_bang_mod_removes_cached_entry():
    cache = []
    write(FtraceHash(), "load:mod:yaml dump:mod:yaml x:mod:toml", mod_cache=cache)
    write(FtraceHash(), "!load:mod:yaml", mod_cache=cache)
    assert [str(e) for e in cache] == ["dump:mod:yaml", "x:mod:toml"]
    # '!*' removes every cached entry for that module (cache_mod)
    write(FtraceHash(), "!*:mod:yaml", mod_cache=cache)
    assert [str(e) for e in cache] == ["x:mod:toml"]
    # nothing to remove and nothing matched: error
    with pytest.raises(FilterError):
        write(FtraceHash(), "!load:mod:yaml", mod_cache=cache)
    assert [str(e) for e in cache] == ["x:mod:toml"]


def test_cached_glob_module_not_cached_when_a_loaded_module_matches():
    with pytest.raises(FilterError):
        write(FtraceHash(), "nosuch:mod:json.*", mod_cache=[])


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

class RecordingCommand:
    def __init__(self):
        self.calls = []

    def __call__(self, hash, func_glob, cmd, param, enable, negate, records):
        self.calls.append((func_glob, cmd, param, enable, negate))


def test_command_is_called_with_parsed_parts():
    cmd = RecordingCommand()
    cmds = {"traceoff": cmd, "enable_event": cmd}
    h = write(FtraceHash(), "re.sub *lock*:traceoff !sched*:traceoff:0 "
              "schedule:enable_event:sched:sched_switch:3", commands=cmds)
    assert names(h) == ["re.sub"]
    assert cmd.calls == [
        ("*lock*", "traceoff", None, True, False),
        ("sched*", "traceoff", "0", True, True),
        ("schedule", "enable_event", "sched:sched_switch:3", True, False),
    ]


def test_command_not_called_when_a_later_word_fails():
    cmd = RecordingCommand()
    with pytest.raises(FilterError):
        write(FtraceHash(), "schedule:traceoff nosuch", commands={"traceoff": cmd})
    assert cmd.calls == []


def test_command_error_gets_position_and_leaves_hash_unchanged():
    def bad(hash, func_glob, cmd, param, enable, negate, records):
        hash.add(RECORDS[0])
        raise FilterError("bad count")

    h = FtraceHash()
    buf = "re.sub x:bad:y"
    with pytest.raises(FilterError) as ei:
        write(h, buf, commands={"bad": bad})
    assert ei.value.pos == 7 and ei.value.command == buf
    assert not h


# ---------------------------------------------------------------------------
# CLI mode: pending patterns
# ---------------------------------------------------------------------------

def test_pending_keeps_every_plain_pattern_for_later_modules():
    # CLI mode: a plain pattern also applies to modules imported later, whether it
    # matched something already (re.sub) or not yet (mypkg.*); `matched` tells which.
    pending: list[PendingPattern] = []
    h = write(FtraceHash(), "re.sub mypkg.* !mypkg.slow", pending=pending)
    assert names(h) == ["re.sub"]
    assert pending == [PendingPattern("re.sub", False, True), PendingPattern("mypkg.*", False),
                       PendingPattern("mypkg.slow", True)]


def test_pending_does_not_cover_bad_index_or_commands():
    with pytest.raises(FilterError):
        write(FtraceHash(), "99", pending=[])
    with pytest.raises(FilterError):
        write(FtraceHash(), "x:bogus", pending=[])


def test_apply_pending_on_module_load():
    pending: list[PendingPattern] = []
    h = write(FtraceHash(), "mypkg.* !mypkg.slow other.f", pending=pending)
    mypkg = recs("mypkg:fast", "mypkg:slow", "mypkg:Cls.m")
    assert apply_pending(h, pending, mypkg) == 2
    assert names(h, mypkg) == ["mypkg.fast", "mypkg.Cls.m"]
    assert [p.matched for p in pending] == [True, True, False]


# ---------------------------------------------------------------------------
# Reading the files
# ---------------------------------------------------------------------------

def test_hash_lines_empty():
    assert hash_lines(FtraceHash(), RECORDS, [], empty_line=ALL_ENABLED) == [ALL_ENABLED]
    assert hash_lines(EMPTY_HASH, RECORDS, [], empty_line=NONE_DISABLED) == [NONE_DISABLED]


def test_hash_lines_in_available_filter_functions_order_then_mod_cache():
    h, cache = FtraceHash(), []
    write(h, "re.sub json.encoder.JSONEncoder.encode nosuch:mod:yaml re.compile", mod_cache=cache)
    assert hash_lines(h, RECORDS, cache, empty_line=ALL_ENABLED) == [
        "json.encoder.JSONEncoder.encode", "re.compile", "re.sub", "nosuch:mod:yaml"]


# ---------------------------------------------------------------------------
# test.d/ftrace/func-filter-glob.tc
# ---------------------------------------------------------------------------

def _stdlib_records() -> list[Rec]:
    """Every function and method defined in a few stdlib modules, in a fixed
    order: a realistic available_filter_functions."""
    import collections
    import json.decoder
    import json.encoder
    import json.scanner
    import string
    import textwrap

    out = []
    for mod in (json.encoder, json.decoder, json.scanner, collections, string, textwrap):
        for obj in vars(mod).values():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                out.append(Rec(mod.__name__, obj.__qualname__))
            elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
                for attr in vars(obj).values():
                    if inspect.isfunction(attr):
                        out.append(Rec(mod.__name__, attr.__qualname__))
    return out


STDLIB = _stdlib_records()


@pytest.mark.parametrize(
    "glob, regex",
    [
        ("*encode", r"^.*encode$"),
        ("*encode*", r"^.*encode.*$"),
        ("json.encoder.*", r"^json\.encoder\..*$"),
        ("*JSON*code", r"^.*JSON.*code$"),
        ("collections.*Ordered*", r"^collections\..*Ordered.*"),
        ("json.*.py_*", r"^json\..*\.py_.*"),
        ("*.__init__", r"^.*\.__init__$"),
        ("[Tt]ext*fill", r"^[Tt]ext.*fill$"),
        ("textwrap.[Tt]extWrapper.*", r"^textwrap\.[Tt]extWrapper\..*"),
        ("*.dedent", r"^.*\.dedent$"),
        ("*wra?", r"^.*wra.$"),
        ("json.encoder.JSONEncoder.?ncode", r"^json\.encoder\.JSONEncoder\..ncode$"),
    ],
)
def test_func_filter_glob(glob, regex):
    """ftrace - function glob filters"""
    h = write(FtraceHash(), glob, STDLIB)
    actual = hash_lines(h, STDLIB, [], empty_line=ALL_ENABLED)
    expected = [r.name for r in STDLIB if re.search(regex, r.name)]
    assert expected, f"{glob!r} selects nothing; the test would prove nothing"
    assert actual == expected
