"""What the event filter (events/filter.py) and the probe-command parser
(events/probe_parse.py) share: the kernel's kstrtoull and the internal failure that
carries an error kind and the caret's position up to the parser's entry point."""
from __future__ import annotations

__all__ = ["ParseFail", "kstrtoull"]

_HEX = "0123456789abcdefABCDEF"
_DIGITS = {8: "01234567", 10: "0123456789", 16: _HEX}


class ParseFail(Exception):
    """Internal: an error kind (the kernel's error name) and its absolute position; the
    parser's entry point turns it into its user-facing error, adding the command."""

    def __init__(self, kind: str, pos: int):
        super().__init__(kind, pos)
        self.kind = kind
        self.pos = pos


def kstrtoull(s: str) -> int | None:
    """kstrtoull(s, 0, ...): the whole string, 0x hex, 0 octal, else decimal; None if it
    is not a number or does not fit 64 bits."""
    if s[:1] == "+":
        s = s[1:]
    if len(s) >= 3 and s[0] == "0" and s[1] in "xX" and s[2] in _HEX:
        base, s = 16, s[2:]
    elif s[:1] == "0":
        base = 8
    else:
        base = 10
    if not s or any(c not in _DIGITS[base] for c in s):
        return None
    v = int(s, base)
    return v if v < 1 << 64 else None


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
