"""The values tracefs files take, parsed as the kernel parses them (kstrtoul, the 0/1
of a switch), and the error a write fails with.  Every file's handler uses them, in
fs.py and in the mechanisms' own modules."""
from __future__ import annotations

from ..errors import FntraceError

__all__ = ["ulong", "short", "errno_error", "parse_bool"]


def ulong(s: str) -> int | None:
    """kstrtoul: an unsigned long in decimal, or None (EINVAL; the kernel's ERANGE for
    one past 2**64 - 1 is EINVAL here, as the write's other failures).  The length is
    looked at before int(), which refuses strings of more than 4300 digits."""
    if not s.isdigit() or not s.isascii() or len(s.lstrip("0")) > 20:
        return None
    n = int(s)
    return n if n < 1 << 64 else None


def short(s: str) -> str:
    """A value for a message: a 9,600-digit write is not quoted whole."""
    return s if len(s) <= 40 else s[:40] + "..."


def errno_error(code: int, msg: str, command: str = "") -> FntraceError:
    e = FntraceError(msg, command=command)
    e.errno = code
    return e


def parse_bool(data: str, name: str) -> bool:
    s = data.strip()
    if s in ("0", "1"):
        return s == "1"
    raise FntraceError(f"{name}: expected 0 or 1, got {s!r}")
