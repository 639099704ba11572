"""Filter hashes and the set_ftrace_filter grammar (kernel/trace/ftrace.c).

An FtraceHash is the set of records an ops filters on (filter_hash) or skips
(notrace_hash). ftrace_process_regex() is what a write to set_ftrace_filter or
set_ftrace_notrace does: it splits the text into words and, for each, adds or
removes the matching records, runs a `func:cmd[:param]` command, or caches a
`func:mod:module` filter for a module that is not imported yet.

Pattern forms (filter_parse_regex, kernel/trace/trace_events_filter.c):

    !pat       remove what pat matches instead of adding it
    12         MATCH_INDEX: the 12th line of available_filter_functions
    name       MATCH_FULL
    name*      MATCH_FRONT_ONLY
    *name      MATCH_END_ONLY
    *name*     MATCH_MIDDLE_ONLY
    a*b, [..], ?, \\   MATCH_GLOB (lib/glob.c)

A plain pattern is matched against a record's full name (`module.qualname`); in
`FUNC:mod:MOD`, FUNC is matched against the qualname and MOD against the module.

This is the control path: it runs when a filter is written or a module is
imported, never per traced call. The per-call test is hash_contains().
"""
from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from functools import lru_cache

# typing is not imported at run time (it is a fifth of fntrace's import cost): the
# annotations are strings, and the two protocols below are plain classes at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    Protocol = object

from fntrace.errors import FilterError, FntraceError

from .glob import glob_match

__all__ = [
    "MATCH_FULL",
    "MATCH_FRONT_ONLY",
    "MATCH_MIDDLE_ONLY",
    "MATCH_END_ONLY",
    "MATCH_GLOB",
    "MATCH_INDEX",
    "RegexType",
    "FilterRecord",
    "FtraceHash",
    "EMPTY_HASH",
    "filter_parse_regex", "regex_type",
    "ftrace_match",
    "glob_match",
    "ModCacheEntry",
    "PendingPattern",
    "FilterCommand",
    "ftrace_process_regex",
    "apply_mod_cache",
    "apply_pending",
    "hash_lines",
    "hash_contains",
]


class RegexType(IntEnum):
    """enum regex_type (kernel/trace/trace.h), same order and values."""

    MATCH_FULL = 0
    MATCH_FRONT_ONLY = 1
    MATCH_MIDDLE_ONLY = 2
    MATCH_END_ONLY = 3
    MATCH_GLOB = 4
    MATCH_INDEX = 5


MATCH_FULL = RegexType.MATCH_FULL
MATCH_FRONT_ONLY = RegexType.MATCH_FRONT_ONLY
MATCH_MIDDLE_ONLY = RegexType.MATCH_MIDDLE_ONLY
MATCH_END_ONLY = RegexType.MATCH_END_ONLY
MATCH_GLOB = RegexType.MATCH_GLOB
MATCH_INDEX = RegexType.MATCH_INDEX


class FilterRecord(Protocol):
    """What the filter grammar needs from a record (core/records.py DynFtrace)."""

    @property
    def name(self) -> str: ...        # "json.encoder.JSONEncoder.encode"
    @property
    def module(self) -> str: ...      # "json.encoder"
    @property
    def qualname(self) -> str: ...    # "JSONEncoder.encode"


# ---------------------------------------------------------------------------
# Hashes
# ---------------------------------------------------------------------------

class FtraceHash:
    """struct ftrace_hash: a set of records. Records hash by identity, like an ip."""

    __slots__ = ("entries",)

    def __init__(self, entries: Iterable[Any] = ()) -> None:
        self.entries: set[Any] = set(entries)

    def __contains__(self, rec: object) -> bool:
        return rec in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.entries)

    def __bool__(self) -> bool:
        # ftrace_hash_empty(): an empty filter hash means "every function".
        return bool(self.entries)

    @property
    def count(self) -> int:
        return len(self.entries)

    def add(self, rec: Any) -> None:
        self.entries.add(rec)

    def discard(self, rec: Any) -> None:
        self.entries.discard(rec)

    def clear(self) -> None:
        self.entries.clear()

    def copy(self) -> FtraceHash:
        # Always a plain mutable hash, also when copying EMPTY_HASH
        # (alloc_and_copy_ftrace_hash).
        return FtraceHash(self.entries)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} count={len(self.entries)}>"


class _EmptyHash(FtraceHash):
    """The one EMPTY_HASH. The kernel keeps it in read-only memory so a stray
    write faults; here a stray add() raises instead of silently filtering every
    ops that shares the sentinel."""

    __slots__ = ()

    def __init__(self) -> None:
        # frozenset: even hash.entries.add() on the sentinel fails
        self.entries = frozenset()  # type: ignore[assignment]

    def add(self, rec: Any) -> None:
        raise RuntimeError("EMPTY_HASH is read-only; copy() it first")

    def discard(self, rec: Any) -> None:
        pass  # nothing is ever in it

    def clear(self) -> None:
        pass

    def __repr__(self) -> str:
        return "EMPTY_HASH"


EMPTY_HASH: FtraceHash = _EmptyHash()


def hash_contains(rec: Any, filter_hash: FtraceHash, notrace_hash: FtraceHash) -> bool:
    """hash_contains_ip(): the record is a match if it is in the filter hash
    and not in the notrace hash. An empty filter hash matches everything; an
    empty notrace hash excludes nothing."""
    return (not filter_hash.entries or rec in filter_hash.entries) and rec not in notrace_hash.entries


# ---------------------------------------------------------------------------
# Pattern parsing and matching
# ---------------------------------------------------------------------------

def filter_parse_regex(buff: str) -> tuple[int, str, bool]:
    """(match type, search string, not) as kernel/trace/trace_events_filter.c
    filter_parse_regex. For MATCH_GLOB and MATCH_INDEX the search string is the
    whole pattern after any '!'; for the others the '*'s are stripped off."""
    negate = buff[:1] == "!"
    if negate:
        buff = buff[1:]
    # isdigit() in the kernel is ASCII only; str.isdigit() is not.
    if "0" <= buff[:1] <= "9":
        return MATCH_INDEX, buff, negate
    mtype, buff = regex_type(buff)
    return mtype, buff, negate


def regex_type(buff: str) -> tuple[int, str]:
    """(match type, search string) of a pattern whose '!' is already taken off, with no
    index form: the part of filter_parse_regex the event filter's '~' uses too."""
    mtype = MATCH_FULL
    last = len(buff) - 1
    for i, ch in enumerate(buff):
        if ch == "*":
            if i == 0:
                mtype = MATCH_END_ONLY
            elif i == last:
                mtype = MATCH_MIDDLE_ONLY if mtype == MATCH_END_ONLY else MATCH_FRONT_ONLY
                buff = buff[:i]
                break
            else:  # pattern continues past the '*': full glob
                return MATCH_GLOB, buff
        elif ch in "[?\\":
            return MATCH_GLOB, buff
    if buff[:1] == "*":
        buff = buff[1:]
    return mtype, buff


@lru_cache(maxsize=256)
def _parse(buff: str) -> tuple[int, str, bool]:
    # Module loads re-apply the same few cached patterns to every new record.
    return filter_parse_regex(buff)


def ftrace_match(s: str, mtype: int, search: str) -> bool:
    """ftrace_match(): does s match search under match type mtype.
    MATCH_INDEX never matches a string (the kernel has no case for it)."""
    if mtype == MATCH_FULL:
        return s == search
    if mtype == MATCH_FRONT_ONLY:
        return s.startswith(search)
    if mtype == MATCH_MIDDLE_ONLY:
        return search in s
    if mtype == MATCH_END_ONLY:
        return s.endswith(search)
    if mtype == MATCH_GLOB:
        return glob_match(search, s)
    return False


def _parse_index(search: str) -> int | None:
    """kstrtoul(search, 0): decimal, 0x hex or leading-0 octal, like
    add_rec_by_index(). None if it is not a number."""
    m = _INDEX_RE.fullmatch(search)
    if m is None:
        return None
    if search[:2] in ("0x", "0X"):
        return int(search, 16)
    if len(search) > 1 and search[0] == "0":
        return int(search, 8)
    return int(search, 10)


_INDEX_RE = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")

# trace_get_user() splits on isspace().
_WORD_RE = re.compile(r"[^ \t\n\v\f\r]+")


def _mod_match(modname: str | None, mod_g: tuple[int, str], exclude_mod: bool) -> bool:
    """The module half of ftrace_match_record(). modname None plays a
    core-kernel function (no module): a blank MOD glob ('*') matches every
    record that has a module, '!*' only those that have none."""
    mtype, msearch = mod_g
    if not msearch:
        # blank module globbing: modname xor exclude_mod
        return (not exclude_mod) != (modname is None)
    mod_matches = modname is not None and ftrace_match(modname, mtype, msearch)
    # exclude_mod traces everything but MOD: a match rejects, and without
    # exclude_mod a non-match rejects.
    return mod_matches != exclude_mod


def _name_match(rec: FilterRecord, mtype: int, search: str) -> bool:
    """A plain pattern against the record's full name — or, for the module a ``-m``
    target runs as ``__main__``, against the name Python gives it there too."""
    if ftrace_match(rec.name, mtype, search):
        return True
    alias = getattr(rec, "alias", "")
    return bool(alias) and ftrace_match(f"{alias}.{rec.qualname}", mtype, search)


def _mod_record_match(rec: FilterRecord, func_g: tuple[int, str], mod_g: tuple[int, str],
                      exclude_mod: bool) -> bool:
    """ftrace_match_record() with a module glob: MOD against rec.module (or its alias,
    ``__main__`` for a ``-m`` target), FUNC against rec.qualname."""
    alias = getattr(rec, "alias", "")
    if alias and not exclude_mod and _mod_match(alias, mod_g, False):
        pass
    elif not _mod_match(rec.module or None, mod_g, exclude_mod):
        return False
    elif alias and exclude_mod and not _mod_match(alias, mod_g, True):
        return False
    ftype, fsearch = func_g
    if not fsearch:  # blank search: every function in the module
        return True
    return ftrace_match(rec.qualname, ftype, fsearch)


def module_scope(buf: str) -> Callable[[str], bool] | None:
    """Which modules a write of ``buf`` can select functions from, judged from the text
    alone: a predicate on module names, or None for "any".  Conservative: a module it
    rejects has no function any word could match.  Lets a filter on one function avoid
    listing every function of every module first (the registration's set-up cost).

    A word's literal head (up to the first glob character) must agree with
    ``module + "."`` (a record's name is ``module.qualname``); ``FUNC:mod:MOD`` names
    its modules by the MOD glob; a ``!`` word only removes what is listed already; an
    index, a middle or end match, or another command may select anything."""
    heads: list[str] = []
    mods: list[tuple[int, str]] = []
    for m in _WORD_RE.finditer(buf):
        word = m.group()
        func, sep, rest = word.partition(":")
        if sep:
            cmd, sep2, param = rest.partition(":")
            if cmd != "mod" or not param or param.startswith("!"):
                return None
            if func.startswith("!"):
                continue
            mods.append(_parse_mod(param)[0])
            continue
        mtype, search, negate = _parse(word)
        if negate:
            continue
        if mtype in (MATCH_FULL, MATCH_FRONT_ONLY):
            head = search
        elif mtype == MATCH_GLOB:
            head = re.split(r"[*?\[\\]", search, maxsplit=1)[0]
        else:
            return None
        if not head:
            return None
        heads.append(head)

    def in_scope(name: str) -> bool:
        dotted = name + "."
        for h in heads:
            if dotted.startswith(h) or h.startswith(dotted):
                return True
        return any(_mod_match(name, g, False) for g in mods)
    return in_scope


def _parse_mod(module: str) -> tuple[tuple[int, str], bool]:
    mtype, msearch, exclude = _parse(module)
    if mtype == MATCH_INDEX:
        # No module name starts with a digit; read it literally rather than
        # as the kernel's never-matching index type.
        mtype = MATCH_FULL
    return (mtype, msearch), exclude


# ---------------------------------------------------------------------------
# Cached :mod: filters, pending CLI patterns, commands
# ---------------------------------------------------------------------------

class ModCacheEntry(namedtuple("ModCacheEntry", "func module")):
    """struct ftrace_mod_load: a `FUNC:mod:MOD` that matched nothing because
    MOD is not imported yet (cache_mod). Only positive filters are cached.

    func    the FUNC glob, matched against rec.qualname
    module  the MOD glob as written, may start with '!'"""
    __slots__ = ()

    def matches(self, rec: FilterRecord) -> bool:
        ftype, fsearch, _ = _parse(self.func)
        mod_g, exclude = _parse_mod(self.module)
        return _mod_record_match(rec, (ftype, fsearch), mod_g, exclude)

    def __str__(self) -> str:
        # t_mod_show()
        return f"{self.func}:mod:{self.module}"


class PendingPattern:
    """A plain pattern kept for modules imported later (CLI mode only): the function
    may live in a module the traced program has not imported yet.  ``matched`` says
    whether it selected anything so far."""
    __slots__ = ("pattern", "negate", "matched")

    def __init__(self, pattern: str, negate: bool, matched: bool = False) -> None:
        self.pattern = pattern          # as written, without the leading '!'
        self.negate = negate
        self.matched = matched

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PendingPattern):
            return NotImplemented
        return (self.pattern, self.negate, self.matched) == (other.pattern, other.negate,
                                                             other.matched)

    __hash__ = None     # type: ignore[assignment]  # mutable, so unhashable (object.__hash__ is a method)

    def __repr__(self) -> str:
        return (f"PendingPattern(pattern={self.pattern!r}, negate={self.negate!r}, "
                f"matched={self.matched!r})")


class FilterCommand(Protocol):
    """struct ftrace_func_command .func: runs `FUNC:cmd[:param]`.

    func_glob has no leading '!'; negate says whether it had one. param is the
    text after the second ':' (itself possibly containing ':'), None if absent.
    enable is True for set_ftrace_filter (commands are never run for
    set_ftrace_notrace). Raise FilterError to reject the command."""

    def __call__(self, hash: FtraceHash, func_glob: str, cmd: str, param: str | None,
                 enable: bool, negate: bool, records: Sequence[FilterRecord]) -> None: ...


def _enter_record(hash: FtraceHash, rec: Any, clear_filter: bool) -> None:
    # enter_record()
    if clear_filter:
        hash.entries.discard(rec)
    else:
        hash.entries.add(rec)


# ---------------------------------------------------------------------------
# ftrace_process_regex
# ---------------------------------------------------------------------------

def ftrace_process_regex(
    hash: FtraceHash,
    buf: str,
    records: Sequence[FilterRecord],
    *,
    mod_cache: list[ModCacheEntry],
    pending: list[PendingPattern] | None = None,
    commands: Mapping[str, FilterCommand] | None = None,
    allow_commands: bool = True,
    loaded_modules: Collection[str] = (),
) -> None:
    """Apply one write to set_ftrace_filter / set_ftrace_notrace to hash.

    ftrace_regex_write + ftrace_process_regex + ftrace_mod_callback. Words are
    separated by whitespace and applied in order. `records` is in
    available_filter_functions order (MATCH_INDEX counts from 1 there).

    pending not None is CLI mode: a plain pattern that matches nothing is
    appended there instead of failing. commands maps extra command names
    (traceon, ...) to their callbacks; 'mod' is built in and is the only one
    accepted when allow_commands is False (set_ftrace_notrace,
    ftrace_set_filter()). loaded_modules names the imported modules; modules
    that own a record in `records` count as imported too.

    All or nothing: on FilterError, hash, mod_cache and pending are as they
    were. Commands run only after every word has been parsed, so a bad later
    word never leaves a trigger half-registered.

    Raises FilterError with .pos (0-based offset in buf of the offending word,
    or of the command or module part of it) and .command = buf.
    """
    work = hash.copy()
    cache = list(mod_cache)
    new_pending = None if pending is None else list(pending)
    deferred: list[tuple[Callable[..., None], str, str, str | None, bool, int]] = []
    loaded: set[str] | None = None

    def fail(msg: str, pos: int) -> FilterError:
        return FilterError(msg, pos=pos, command=buf)

    for m in _WORD_RE.finditer(buf):
        word = m.group()
        pos = m.start()
        func, sep, rest = word.partition(":")

        if not sep:
            mtype, search, negate = _parse(word)
            if mtype == MATCH_INDEX:
                idx = _parse_index(search)
                if idx is None:
                    raise fail(f"'{word}': a pattern starting with a digit must be an index", pos)
                if not 1 <= idx <= len(records):
                    raise fail(f"'{word}': index out of range 1..{len(records)}", pos)
                _enter_record(work, records[idx - 1], negate)
                continue
            if not search and mtype == MATCH_FULL:
                raise fail(f"'{word}': empty pattern", pos)
            found = False
            for rec in records:
                if _name_match(rec, mtype, search):
                    _enter_record(work, rec, negate)
                    found = True
            if new_pending is not None:
                # CLI mode: the pattern also applies to modules the program imports
                # later, whether or not it matched something already.
                new_pending.append(PendingPattern(word[1:] if negate else word, negate, found))
            elif not found:
                raise fail(f"'{word}': no function matches", pos)
            continue

        cmd, sep2, param_s = rest.partition(":")
        param = param_s if sep2 else None
        cmd_pos = pos + len(func) + 1

        if cmd == "mod":
            mod_pos = cmd_pos + 4
            if not param:
                raise fail(f"'{word}': missing module name after ':mod:'", mod_pos if sep2 else cmd_pos)
            ftype, fsearch, negate = _parse(func)
            if ftype == MATCH_INDEX:
                raise fail(f"'{word}': an index cannot be combined with ':mod:'", pos)
            mod_g, exclude = _parse_mod(param)
            found = False
            for rec in records:
                if _mod_record_match(rec, (ftype, fsearch), mod_g, exclude):
                    _enter_record(work, rec, negate)
                    found = True
            if negate:
                # cache_mod(): '!FUNC:mod:MOD' also drops the cached filters
                # it names; '!*' drops every cached filter for MOD.
                bare = func[1:]
                kept = [e for e in cache if not (e.module == param and (bare == "*" or e.func == bare))]
                if not found and len(kept) == len(cache):
                    raise fail(f"'{word}': no function matches and no cached filter to remove", pos)
                cache = kept
                continue
            if found:
                continue
            if exclude:
                raise fail(f"'{word}': no function matches outside module '{param[1:]}'", mod_pos)
            if loaded is None:
                loaded = set(loaded_modules)
                loaded.update(rec.module for rec in records if rec.module)
            if any(_mod_match(name, mod_g, False) for name in loaded):
                raise fail(f"'{word}': no function in module '{param}' matches '{func}'", pos)
            # cache_mod(): the module is not imported yet; apply on import.
            entry = ModCacheEntry(func, param)
            if entry not in cache:
                cache.append(entry)
            continue

        if not allow_commands:
            raise fail(f"'{word}': only ':mod:' is accepted here, not ':{cmd}'", cmd_pos)
        fn = commands.get(cmd) if commands is not None else None
        if fn is None:
            raise fail(f"'{word}': unknown command '{cmd}'", cmd_pos)
        negate = func[:1] == "!"
        deferred.append((fn, func[1:] if negate else func, cmd, param, negate, pos))

    for fn, glob, cmd, param, negate, pos in deferred:
        try:
            fn(work, glob, cmd, param, True, negate, records)
        except FntraceError as e:
            if e.pos is None:
                e.pos = pos
            if e.command is None:
                e.command = buf
            raise

    if isinstance(hash, _EmptyHash):
        if work.entries:
            raise RuntimeError("EMPTY_HASH is read-only; copy() it first")
    else:
        hash.entries = work.entries
    mod_cache[:] = cache
    if pending is not None and new_pending is not None:
        pending[:] = new_pending


# ---------------------------------------------------------------------------
# Module load, and reading the filter files
# ---------------------------------------------------------------------------

def apply_mod_cache(hash: FtraceHash, mod_cache: list[ModCacheEntry], new_records: Iterable[FilterRecord]) -> int:
    """A module was loaded: add its records that match cached :mod: entries
    (process_cached_mods); return how many were added. The entries stay
    cached, so a glob MOD keeps applying to later imports."""
    if not mod_cache:
        return 0
    added = 0
    entries = hash.entries
    for rec in new_records:
        if rec not in entries and any(e.matches(rec) for e in mod_cache):
            hash.add(rec)
            added += 1
    return added


def apply_pending(hash: FtraceHash, pending: list[PendingPattern], new_records: Iterable[FilterRecord]) -> int:
    """A module was loaded: apply plain pending patterns to its records, in
    the order they were written; mark those that matched. Returns how many
    of new_records are in or out of the hash now that were not before."""
    if not pending:
        return 0
    new_records = list(new_records)
    before = [rec in hash.entries for rec in new_records]
    for pp in pending:
        mtype, search, _ = _parse(pp.pattern)
        for rec in new_records:
            if _name_match(rec, mtype, search):
                pp.matched = True
                if pp.negate:
                    hash.discard(rec)
                else:
                    hash.add(rec)
    return sum((rec in hash.entries) != was for rec, was in zip(new_records, before))


def hash_lines(hash: FtraceHash, records_order: Sequence[FilterRecord], mod_cache: Sequence[ModCacheEntry],
               *, empty_line: str) -> list[str]:
    """What reading set_ftrace_filter / set_ftrace_notrace prints (t_show,
    t_mod_show): `empty_line` ('#### all functions enabled ####' or
    '#### no functions disabled ####') when the hash and the cache are both
    empty; otherwise one record name per line in records_order order, then
    each cached `func:mod:module`."""
    if not hash.entries and not mod_cache:
        return [empty_line]
    entries = hash.entries
    lines = [rec.name for rec in records_order if rec in entries]
    lines.extend(str(e) for e in mod_cache)
    return lines


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
