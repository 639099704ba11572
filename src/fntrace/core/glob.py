"""lib/glob.c: the glob matcher of set_ftrace_filter, set_graph_function, event
filters' ``~`` and every other place ftrace takes a glob.

It is data-only (a pattern and a string in, a bool out), so the views can match
names the way the control files do without loading the filter machinery:
core/hash.py uses it for set_ftrace_filter, output/filters.py for the report-time
filters.
"""
from __future__ import annotations

__all__ = ["glob_match"]


def glob_match(pattern: str, s: str) -> bool:
    """lib/glob.c glob_match(): '*', '?', '[abc]', '[a-z]', '[!x]' and '\\'
    escaping, case-sensitive, '*' also matches '.' (nothing is a separator).

    Like the kernel, a malformed class ('[' with no closing ']') is a literal
    '[', a class may start with ']' ('[]a]'), '-' first or last in a class is
    literal, and a trailing lone '\\' stands for the end of the string.
    Backtracks only to the
    last '*', so it is linear per '*' and cannot blow up.
    """
    np, ns = len(pattern), len(s)
    p = i = 0
    back_p = -1          # pattern index just after the last '*'
    back_i = 0           # where in s that '*' currently stops
    while True:
        c = s[i] if i < ns else ""           # "" plays the C string's NUL
        i += 1
        d = pattern[p] if p < np else ""
        p += 1

        if d == "?":                          # anything but end of string
            if not c:
                return False
            continue
        if d == "*":
            if p >= np:                       # trailing '*' matches the rest
                return True
            back_p = p
            i -= 1                            # allow a zero-length match
            back_i = i
            continue

        if d == "[" and c == "":
            # A class never matches the end of the string (the fix lib/glob.c got:
            # "[!a]" used to match past the end).
            return False
        if d == "[":
            inverted = p < np and pattern[p] == "!"
            k = p + inverted
            a = pattern[k] if k < np else ""
            k += 1
            matched = malformed = False
            while True:                       # one span per turn: 'a' or 'a-b'
                if not a:
                    malformed = True
                    break
                b = a
                if k < np and pattern[k] == "-" and (k + 1 >= np or pattern[k + 1] != "]"):
                    b = pattern[k + 1] if k + 1 < np else ""
                    if not b:
                        malformed = True
                        break
                    k += 2
                if c and a <= c <= b:
                    matched = True
                a = pattern[k] if k < np else ""
                k += 1
                if a == "]":
                    break
            if not malformed:
                if matched != inverted:
                    p = k
                    continue
                # fall through to backtrack
            elif c == "[":                    # malformed class: literal '['
                continue
        else:
            if d == "\\":
                d = pattern[p] if p < np else ""
                p += 1
            if c == d:                        # literal character
                if not d:
                    return True
                continue

        # backtrack: retry from the last '*', one character later in s
        if not c or back_p < 0:
            return False
        p = back_p
        back_i += 1
        i = back_i


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
