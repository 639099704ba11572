"""``fntrace ls``: available_filter_functions for a target.

By default the target is not run: its own functions are compiled and listed, and the
modules it imports at top level are imported (module bodies run, ``__main__`` does not),
so what a filter may name is known before tracing.  ``--run`` runs the program first
(its output goes where it always goes) and lists everything it imported.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import sys
from collections.abc import Iterator

from ..core.hash import FtraceHash, ftrace_process_regex, hash_contains
from ..core.records import record_table, scan_code_as
from ..errors import FilterError, UsageError
from .args import add_target, target_of
from .target import Target, run_target

__all__ = ["list_functions", "EPILOG", "add_arguments", "run"]


def _top_level_imports(code_source: str) -> list[str]:
    try:
        tree = ast.parse(code_source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def _select(patterns: list[str], label: str) -> FtraceHash:
    h = FtraceHash()
    for pat in patterns:
        try:
            ftrace_process_regex(h, pat, record_table.records, mod_cache=[], pending=None,
                                 allow_commands=False,
                                 loaded_modules=record_table.loaded_modules())
        except FilterError as e:
            raise UsageError(f"{label} {pat!r}: {e.msg}") from None
    return h


def list_functions(target: Target, filters: list[str], notrace: list[str],
                   run: bool) -> Iterator[str]:
    main = sys.modules.get("__main__")
    if main is not None:
        record_table.scanned.add("__main__")
        record_table.module_ids["__main__"] = id(main)
    record_table.main_alias = target.module if target.module != "__main__" else None
    if run:
        def start(mod, code):
            record_table.module_ids["__main__"] = id(mod)
            scan_code_as(code, "__main__")
        run_target(target, start)
    else:
        scan_code_as(target.code, "__main__")
        if target.kind == "script":
            path0 = target.path0
            sys.path.insert(0, path0)
            try:
                with open(target.code.co_filename, encoding="utf-8", errors="replace") as f:
                    src = f.read()
                for name in _top_level_imports(src):
                    try:
                        importlib.import_module(name)
                    except Exception:
                        pass          # listing must not fail on an import the program guards
            finally:
                sys.path.remove(path0)
    record_table.refresh()
    flt = _select(filters, "-F") if filters else FtraceHash()
    nt = _select(notrace, "-N") if notrace else FtraceHash()
    for rec in record_table.records:
        if hash_contains(rec, flt, nt):
            yield rec.name


# -- the command ---------------------------------------------------------------------
EPILOG = """\
examples:
  fntrace ls examples/shop_demo.py              # available_filter_functions of a script
  fntrace ls -F 'shop.pricing.*' examples/shop_demo.py
  fntrace ls --run -m json.tool data.json       # what it imports while it runs"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                   help="list only what this filter selects")
    p.add_argument("-N", "--notrace", action="append", default=[], metavar="GLOB",
                   help="leave out what this selects")
    p.add_argument("--run", action="store_true",
                   help="run the target first (lists what it imports at run time)")
    add_target(p)


def run(args, at_exit: bool) -> int:
    for line in list_functions(target_of(args), args.filter, args.notrace, args.run):
        sys.stdout.write(line + "\n")
    return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
