"""_native.pyi and cli/_launch.pyi describe the built modules: the same names at the top
level and the same methods and members on each type, so that a stub cannot drift from
the C."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import fntrace

try:
    from fntrace import _native
    from fntrace.cli import _launch
except ImportError:                 # the pure install: nothing to compare against
    _native = _launch = None

HERE = Path(fntrace.__file__).parent
STUBS = [("_native", HERE / "_native.pyi"), ("_launch", HERE / "cli" / "_launch.pyi")]

pytestmark = pytest.mark.skipif(_native is None, reason="the native module is not built")


def _module(name: str):
    return {"_native": _native, "_launch": _launch}[name]


def _stub_names(stub: Path) -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(stub.read_text())
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


@pytest.mark.parametrize("name,stub", STUBS)
def test_stub_names_what_the_module_has(name, stub) -> None:
    top, _ = _stub_names(stub)
    built = {n for n in dir(_module(name)) if not n.startswith("_")}
    assert top == built, (f"only in the stub: {sorted(top - built)}; "
                          f"only in the module: {sorted(built - top)}")


@pytest.mark.parametrize("module,stub", STUBS)
def test_stub_types_have_the_built_types_members(module, stub) -> None:
    _, classes = _stub_names(stub)
    for name, members in classes.items():
        cls = getattr(_module(module), name)
        assert inspect.isclass(cls)
        built = {n for n in vars(cls) if not n.startswith("_")}
        assert members == built, (f"{name}: only in the stub: {sorted(members - built)}; "
                                  f"only in the module: {sorted(built - members)}")
