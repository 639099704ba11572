"""``fntrace live --patch 'mod.func=fix.py:new_func' script.py``: a program run with a
function replaced by a direct trampoline ``new_func(original, *args, **kwargs)``.

Every test runs the ``fntrace`` command in a child process, like a user would.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from support import EXAMPLES, fntrace_cli, run_python

SHOP_DEMO = EXAMPLES / "shop_demo.py"


def write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source))
    return path


def program_lines(stdout: str) -> list[str]:
    """The program's own output: everything before the trace header."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("# tracer:"):
            break
        out.append(line)
    return out


def receipt_totals(lines: list[str]) -> list[str]:
    """The amounts of a shop receipt (last column of each line after the first)."""
    return [line.split()[-1] for line in lines[1:] if line.strip()]


FIX = """
import sys


def flat(original, unit_cents, quantity):
    # Every bundle costs 10.00, whatever the product and quantity.
    return 1000


def counted(original, *args, **kwargs):
    print("tramp", *args, file=sys.stderr)
    return original(*args, **kwargs)


def plus(original, *args, **kwargs):
    return original(*args, **kwargs) + 1000


not_callable = 42
"""


@pytest.fixture
def fix(tmp_path):
    return write(tmp_path / "fix.py", FIX)


# ---------------------------------------------------------------------------------
# The shop example
# ---------------------------------------------------------------------------------


def test_patch_changes_the_printed_totals(tmp_path, fix):
    plain = run_python(SHOP_DEMO, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    p = fntrace_cli("live", "--patch", "shop.pricing.bundle_price=fix.py:flat", "-F",
                    "shop.pricing.bundle_price", SHOP_DEMO, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = program_lines(p.stdout)
    assert lines[0] == "Receipt: 6 items"
    # bundle 1000 per line, minus the line discount (books 5%, 3 pens 10%), then the
    # SAVE10 coupon on the 2850 subtotal.
    assert receipt_totals(lines) == ["9.50", "10.00", "9.00", "-2.85", "25.65"], p.stdout
    assert receipt_totals(lines) != receipt_totals(plain.stdout.splitlines())
    # The trampoline never calls the original: one traced call per cart line.
    traced = [ln for ln in p.stdout.splitlines()
              if re.search(r": shop\.pricing\.bundle_price <-", ln)]
    assert len(traced) == 3, p.stdout
    assert "never appeared" not in p.stderr


def test_pass_through_patch_keeps_the_output_and_sees_every_call(tmp_path, fix):
    plain = run_python(SHOP_DEMO, cwd=tmp_path)
    p = fntrace_cli("live", "--patch", "shop.pricing.bundle_price=fix.py:counted", "-F",
                    "shop.pricing.bundle_price", SHOP_DEMO, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert program_lines(p.stdout) == plain.stdout.splitlines()
    tramp_calls = [ln for ln in p.stderr.splitlines() if ln.startswith("tramp ")]
    traced = [ln for ln in p.stdout.splitlines()
              if re.search(r": shop\.pricing\.bundle_price <-", ln)]
    # bundle_price recurses pair by pair: quantities 1, 2, 3 make 1 + 2 + 2 calls,
    # and every one of them (recursive ones too) goes through the trampoline.
    assert len(tramp_calls) == 5, p.stderr
    assert len(traced) == 5, p.stdout


def test_patch_with_function_graph_shows_the_patched_return_value(tmp_path, fix):
    p = fntrace_cli("live", "--patch", "shop.pricing.bundle_price=fix.py:flat", "-p",
                    "function_graph", "-R", "-F", "shop.pricing.*", SHOP_DEMO, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert receipt_totals(program_lines(p.stdout)) == ["9.50", "10.00", "9.00", "-2.85", "25.65"]
    graph = [ln.split("|  ", 1)[1].strip() for ln in p.stdout.splitlines()
             if not ln.startswith("#") and "|  " in ln]
    bundle = [g for g in graph if g.startswith("shop.pricing.bundle_price")]
    assert bundle == ["shop.pricing.bundle_price(); /* ret=1000 */"] * 3, p.stdout
    # The callers see the patched value: price_line returns 1000 minus the discount.
    lines = [g for g in graph if g.startswith("} /* shop.pricing.price_line ret=")]
    assert lines == ["} /* shop.pricing.price_line ret=950 */",     # 950
                     "} /* shop.pricing.price_line ret=1000 */",     # 1000
                     "} /* shop.pricing.price_line ret=900 */"], p.stdout  # 900


# ---------------------------------------------------------------------------------
# Where the patched function lives
# ---------------------------------------------------------------------------------


PROG = """
import sys


def compute(x):
    return x * 2


def main():
    print("compute:", compute(21))
    import latemod
    print("late:", latemod.late(3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""

LATEMOD = """
def late(n):
    return n + 1
"""


@pytest.fixture
def prog(tmp_path):
    write(tmp_path / "latemod.py", LATEMOD)
    return write(tmp_path / "prog.py", PROG)


def test_patch_a_function_of_the_script_itself(tmp_path, fix, prog):
    """``__main__.func``: a function of the script itself is patched before the
    script's body can call it."""
    p = fntrace_cli("live", "--patch", "__main__.compute=fix.py:plus", "-F",
                    "__main__.compute", prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert program_lines(p.stdout)[:2] == ["compute: 1042", "late: 4"], p.stdout + p.stderr
    assert "never appeared" not in p.stderr


def test_patch_a_function_of_a_module_imported_later(tmp_path, fix, prog):
    p = fntrace_cli("live", "--patch", "latemod.late=fix.py:plus", "-F", "latemod.*", prog,
                    cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert program_lines(p.stdout)[:2] == ["compute: 42", "late: 1004"], p.stdout
    assert "never appeared" not in p.stderr
    traced = [ln for ln in p.stdout.splitlines() if re.search(r": latemod\.late <-", ln)]
    assert len(traced) == 1, p.stdout


def test_patch_applies_to_calls_made_while_the_module_is_imported(tmp_path, fix):
    """A function of a module imported later is patched before it can be called,
    calls made by the module's own body while it is imported included."""
    write(tmp_path / "importtime.py", """
        def late(n):
            return n + 1

        VALUE = late(1)
        """)
    script = write(tmp_path / "prog2.py", """
        import importtime
        print("import-time:", importtime.VALUE, "run-time:", importtime.late(1))
        """)
    p = fntrace_cli("live", "--patch", "importtime.late=fix.py:plus", "-F", "importtime.*",
                    script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert program_lines(p.stdout) == ["import-time: 1002 run-time: 1002"], p.stdout


def test_patch_a_module_imported_later_under_function_graph(tmp_path, fix, prog):
    p = fntrace_cli("live", "--patch", "latemod.late=fix.py:plus", "-p", "function_graph",
                    "-R", "-F", "latemod.*", prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "late: 1004" in program_lines(p.stdout)
    graph = [ln.split("|  ", 1)[1].strip() for ln in p.stdout.splitlines()
             if not ln.startswith("#") and "|  " in ln]
    assert graph == ["latemod.late(); /* ret=1004 */"], p.stdout


def test_two_patches_in_one_run(tmp_path, fix, prog):
    p = fntrace_cli("live", "--patch", "latemod.late=fix.py:plus", "--patch",
                    "shop.pricing.bundle_price=fix.py:flat", "-F", "latemod.*", prog,
                    cwd=tmp_path)
    # The second patch names a module the program never imports: a note, same status.
    assert p.returncode == 0
    assert "late: 1004" in program_lines(p.stdout)
    notes = [ln for ln in p.stderr.splitlines() if "never appeared" in ln]
    assert len(notes) == 1 and "shop.pricing.bundle_price" in notes[0], p.stderr


# ---------------------------------------------------------------------------------
# Bad specifications and patches that never apply
# ---------------------------------------------------------------------------------


MARKER_PROG = """
import pathlib
pathlib.Path("ran.txt").write_text("ran")
print("PROGRAM RAN")


def f():
    pass
"""


@pytest.mark.parametrize("spec, why", [
    ("marker.f", "missing '='"),
    ("marker.f=fix.py", "missing ':'"),
    ("marker.f=nosuchfile.py:plus", "missing file"),
    ("marker.f=fix.py:", "missing function name"),
    ("=fix.py:plus", "missing symbol"),
    ("marker.f=fix.py:nosuchfunc", "function not in the file"),
    ("marker.f=fix.py:not_callable", "not callable"),
    ("marker.f=broken.py:plus", "file fails to load"),
])
def test_bad_spec_is_a_one_line_error(tmp_path, fix, spec, why):
    write(tmp_path / "broken.py", "def plus(:\n")
    script = write(tmp_path / "marker.py", MARKER_PROG)
    p = fntrace_cli("live", "--patch", spec, script, cwd=tmp_path)
    assert p.returncode == 2, (why, p.stdout, p.stderr)
    err = p.stderr.splitlines()
    assert len(err) == 1, (why, p.stderr)
    assert err[0].startswith("fntrace: "), (why, err)
    assert "Traceback" not in p.stderr
    assert "PROGRAM RAN" not in p.stdout and p.stdout == ""
    assert not (tmp_path / "ran.txt").exists(), why


def test_bad_spec_with_record_too(tmp_path, fix):
    script = write(tmp_path / "marker.py", MARKER_PROG)
    p = fntrace_cli("record", "-o", tmp_path / "out.dat", "--patch", "marker.f=fix.py", script,
                    cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith("fntrace: ") and len(p.stderr.splitlines()) == 1
    assert not (tmp_path / "ran.txt").exists()


def test_patch_that_never_appears_keeps_the_exit_status(tmp_path, fix):
    script = write(tmp_path / "exits.py", """
        import sys
        print("hello")
        sys.exit(3)
        """)
    p = fntrace_cli("live", "--patch", "nosuchmodule.func=fix.py:plus", "-F", "nosuchmodule.*",
                    script, cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    assert program_lines(p.stdout) == ["hello"]
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("fntrace: ")]
    assert any("--patch 'nosuchmodule.func=fix.py:plus'" in ln and "never appeared" in ln
               for ln in notes), p.stderr


def test_patch_that_never_appears_in_a_program_that_succeeds(tmp_path, fix):
    p = fntrace_cli("live", "--patch", "shop.pricing.no_such_function=fix.py:plus", "-F",
                    "shop.pricing.bundle_price", SHOP_DEMO, cwd=tmp_path)
    plain = run_python(SHOP_DEMO, cwd=tmp_path)
    assert p.returncode == 0
    assert program_lines(p.stdout) == plain.stdout.splitlines()
    assert re.search(r"^fntrace: --patch 'shop\.pricing\.no_such_function=fix\.py:plus': "
                     r".*never appeared$", p.stderr, re.M), p.stderr
