"""The browser index's columns (tui/column.py) against a list: rows added, set, read,
searched, with chunks of a few rows and a cache of a few bytes, so most of what is
read comes back from the file; and the rows a thread's view shows (tui/graph.py's
catch_up, native and pure) against what folding means."""
from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from fntrace import _env
from fntrace.tui.column import Column, Spill

VALUES = st.integers(-3, 5)
OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), VALUES),
    st.tuples(st.just("extend"), st.lists(VALUES, max_size=40)),
    st.tuples(st.just("frombytes"), st.lists(VALUES, max_size=40)),
    st.tuples(st.just("fill"), st.integers(0, 20)),
    st.tuples(st.just("set"), st.integers(0, 10**6), VALUES),
), max_size=40)


@settings(max_examples=int(os.environ.get("COLUMN_EXAMPLES", "300")), deadline=None)
@given(ops=OPS, shift=st.integers(0, 3), budget=st.sampled_from([0, 16, 64, 1 << 20]),
       probes=st.lists(st.tuples(VALUES, st.integers(0, 10**6), st.integers(0, 10**6)),
                       max_size=6),
       ids=st.sets(VALUES, max_size=10))
def test_a_column_is_a_list(ops, shift, budget, probes, ids):
    from array import array
    sp = Spill(budget, shift)
    cols = [Column(sp, "q", -1), Column(sp, "i")]
    model: list[int] = []
    for op in ops:
        for c in cols:
            if op[0] == "append":
                c.append(op[1])
            elif op[0] == "extend":
                c.extend(op[1])
            elif op[0] == "frombytes":
                c.frombytes(array(c.code, op[1]).tobytes())
            elif op[0] == "fill":
                if c.fill is not None:
                    c.extend_fill(op[1])
                else:
                    c.extend([-1] * op[1])
            elif model:
                c[op[1] % len(model)] = op[2]
        if op[0] == "append":
            model.append(op[1])
        elif op[0] in ("extend", "frombytes"):
            model.extend(op[1])
        elif op[0] == "fill":
            model.extend([-1] * op[1])
        elif model:
            model[op[1] % len(model)] = op[2]
    n = len(model)
    for c in cols:
        assert len(c) == n
        assert list(c) == model
        assert [c[r] for r in range(n)] == model
        assert [c[r] for r in range(-n, 0)] == model
        assert list(c[:]) == model and bytes(c) == array(c.code, model).tobytes()
        for v, a, b in probes:
            a, b = (a % (n + 1), b % (n + 1)) if n else (0, 0)
            a, b = min(a, b), max(a, b)
            assert list(c[a:b]) == model[a:b]
            at = a
            for r0, seg in c.segments(a, b):
                assert r0 == at and list(seg) == model[at:at + len(seg)] and seg
                at += len(seg)
            assert at == max(a, b)
            want = next((r for r in range(a, b) if model[r] == v), None)
            if want is None:
                try:
                    c.index(v, a, b)
                    raise AssertionError("found what is not there")
                except ValueError:
                    pass
            else:
                assert c.index(v, a, b) == want
            assert c.rindex(v, b) == max((r for r in range(b) if model[r] == v), default=-1)
            assert c.find_any(ids, a, b) == \
                next((r for r in range(a, b) if model[r] in ids), -1)
            assert c.find_any(ids, a, b, reverse=True) == \
                next((r for r in range(b - 1, a - 1, -1) if model[r] in ids), -1)
    if budget == 0 and n >= 4 << shift:
        assert sp.written > 0       # (the file was used)
    sp.close()


TREE = st.lists(st.sampled_from("((()"), max_size=120)


@settings(max_examples=int(os.environ.get("COLUMN_EXAMPLES", "300")), deadline=None)
@given(tree=TREE, fold_depth=st.integers(0, 3), shift=st.integers(0, 3),
       cuts=st.lists(st.integers(0, 200), max_size=4), toggles=st.lists(
           st.integers(0, 10**6), max_size=6), native=st.booleans())
def test_the_rows_a_view_shows_are_those_under_no_folded_call(tree, fold_depth, shift, cuts,
                                                              toggles, native):
    """Rows arrive in pieces (the index is read while it is built) and calls are
    toggled between them: after each catch_up, ``vis`` is every row none of whose
    enclosing calls is folded, in row order."""
    import pytest
    pytest.importorskip("textual", reason="LOUD SKIP: textual is not installed (the tui "
                                          "extra)")
    from fntrace.tui import graph
    from fntrace.tui.index import ThreadIndex
    mod = _env.native_module() if native else None
    if native and (mod is None or _env.PURE):
        return
    parents, depths, stack = [], [], []
    ends: dict[int, int] = {}
    for ch in tree:
        if ch == "(":
            parents.append(stack[-1] if stack else -1)
            depths.append(len(stack))
            stack.append(len(parents) - 1)
        elif stack:
            ends[stack.pop()] = len(parents)
    n = len(parents)
    t = ThreadIndex(0, 1, "t", Spill(64, shift))
    t.parent.extend(parents)
    t.depth.extend(depths)
    t.subend.extend([ends.get(r, -1) for r in range(n)])
    view = graph.ThreadView(t, fold_depth)
    real = _env.native
    _env.native = (lambda: mod)
    try:
        for step, cut in enumerate(sorted(c % (n + 1) for c in cuts) + [n]):
            t.n = max(t.n, cut)
            view.catch_up()
            if toggles and view.vis:
                view.toggle(view.vis[toggles[step % len(toggles)] % len(view.vis)])
            def folded(a: int) -> bool:
                return (depths[a] >= fold_depth) != (a in view.toggled)
            want = []
            for r in range(t.n):
                a = parents[r]
                while a >= 0 and not folded(a):
                    a = parents[a]
                if a < 0:
                    want.append(r)
            assert list(view.vis) == want
    finally:
        _env.native = real
