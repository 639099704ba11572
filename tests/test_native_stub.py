"""_native.pyi describes the built module: the same names at the top level and the same
methods and members on each type, so that the stub cannot drift from the C."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import fntrace

try:
    from fntrace import _native
except ImportError:                 # the pure install: nothing to compare against
    _native = None

STUB = Path(fntrace.__file__).with_name("_native.pyi")

pytestmark = pytest.mark.skipif(_native is None, reason="the native module is not built")


def _stub_names() -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(STUB.read_text())
    top: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, ast.ClassDef):
            top.add(node.name)
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("__"):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            classes[node.name] = members
    return top, classes


def test_stub_names_what_the_module_has() -> None:
    top, _ = _stub_names()
    built = {n for n in dir(_native) if not n.startswith("_")}
    assert top == built, (f"only in the stub: {sorted(top - built)}; "
                          f"only in the module: {sorted(built - top)}")


def test_stub_types_have_the_built_types_members() -> None:
    _, classes = _stub_names()
    for name, members in classes.items():
        cls = getattr(_native, name)
        assert inspect.isclass(cls)
        built = {n for n in vars(cls) if not n.startswith("_")}
        assert members == built, (f"{name}: only in the stub: {sorted(members - built)}; "
                                  f"only in the module: {sorted(built - members)}")
