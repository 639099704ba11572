"""asyncio Tasks: each call placed under the Task it ran in.

Black-box: ``fntrace record`` of programs running named Tasks, then ``report``
(the switch events, ``--task``, ``-O nofuncgraph-task``), ``stat --task``, the Parquet
``task`` column through ``fntrace sql``, and Perfetto's ``--task-tracks``.
"""
from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

from support import fn_lines, fntrace_cli, run_python

AIO = textwrap.dedent("""\
    import asyncio

    async def fetch(n):
        await asyncio.sleep(0.005 * n)
        return parse(n)

    def parse(n):
        return n * 2

    async def worker(n):
        total = 0
        for i in range(n):
            total += await fetch(i)
        return total

    async def main():
        res = await asyncio.gather(asyncio.create_task(worker(2), name="alpha"),
                                   asyncio.create_task(worker(3), name="beta"))
        print(res)

    asyncio.run(main())
    """)


def _graph_calls(text: str, name: str) -> int:
    """Entries of ``name`` in a function_graph text (``name();`` and ``name() {``)."""
    return len(re.findall(rf"\|\s+{re.escape(name)}\(\)", text))


@pytest.fixture
def recorded(tmp_path, run_fntrace):
    (tmp_path / "aio.py").write_text(AIO)
    r = run_fntrace("record", "-o", "t.dat", "-p", "function_graph", "-F", "*:mod:__main__",
                    "aio.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2, 6]"
    return tmp_path


def test_switches_name_the_task_of_each_step(recorded, run_fntrace):
    rep = run_fntrace("report", "t.dat")
    assert rep.returncode == 0, rep.stderr
    names = re.findall(r"/\* asyncio:task_switch: next=(\S+)", rep.stdout)
    assert {"alpha", "beta"} <= set(names)
    # every step of a worker comes after a switch to its Task: alpha 1 + 2 resumes,
    # beta 1 + 3 (fetch(0) sleeps 0 s but still yields once)
    assert _graph_calls(rep.stdout, "__main__.parse") == 2 + 3
    lines = rep.stdout.splitlines()
    task = None
    steps: dict[str, int] = {}
    for line in lines:
        m = re.search(r"next=(\S+)", line)
        if m:
            task = m.group(1)
        elif re.search(r"\|\s+__main__\.worker\(\) \{", line):
            steps[task] = steps.get(task, 0) + 1
    assert steps["alpha"] >= 2 and steps["beta"] >= 3
    hidden = run_fntrace("report", "t.dat", "-O", "nofuncgraph-task")
    assert "task_switch" not in hidden.stdout
    assert _graph_calls(hidden.stdout, "__main__.fetch") == _graph_calls(rep.stdout,
                                                                          "__main__.fetch")


def test_one_task_alone(recorded, run_fntrace):
    alpha = run_fntrace("report", "t.dat", "--task", "alpha")
    beta = run_fntrace("report", "t.dat", "--task", "b*")
    both = run_fntrace("report", "t.dat")
    assert alpha.returncode == beta.returncode == 0
    assert set(re.findall(r"next=(\S+)", alpha.stdout)) == {"alpha"}
    assert set(re.findall(r"next=(\S+)", beta.stdout)) == {"beta"}
    assert _graph_calls(alpha.stdout, "__main__.parse") == 2     # parse(0), parse(1)
    assert _graph_calls(beta.stdout, "__main__.parse") == 3      # parse(0) .. parse(2)
    for name in ("__main__.worker", "__main__.fetch"):
        assert (_graph_calls(alpha.stdout, name) + _graph_calls(beta.stdout, name)
                == _graph_calls(both.stdout, name))
    assert "__main__.main" not in alpha.stdout
    st = run_fntrace("stat", "t.dat", "--task", "beta")
    assert re.search(r"__main__\.parse +3 ", st.stdout), st.stdout
    none = run_fntrace("report", "t.dat", "--task", "gamma")
    assert none.returncode == 0 and "__main__" not in none.stdout


def test_parquet_task_column_agrees_with_the_report(recorded, run_fntrace):
    pytest.importorskip("duckdb")
    q = run_fntrace("sql", "t.dat", "--json",
                    "SELECT task, count(*) AS n FROM calls WHERE function = "
                    "'__main__.fetch' GROUP BY task ORDER BY task")
    assert q.returncode == 0, q.stderr
    got = {row["task"]: row["n"] for row in map(json.loads, q.stdout.splitlines())}
    for task in ("alpha", "beta"):
        rep = run_fntrace("report", "t.dat", "--task", task)
        # a call per fetch() entry and per resume, as the graph shows them
        assert got[task] == _graph_calls(rep.stdout, "__main__.fetch"), (task, got)


def test_perfetto_task_tracks(recorded, run_fntrace):
    pytest.importorskip("perfetto")
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
    ex = run_fntrace("export", "t.dat", "--format", "perfetto", "--task-tracks",
                     "-o", "t.pftrace")
    assert ex.returncode == 0, ex.stderr
    t = Trace()
    t.ParseFromString((recorded / "t.pftrace").read_bytes())
    tds = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet
           if p.HasField("track_descriptor")}
    tasks = {td.name: uuid for uuid, td in tds.items() if td.name.startswith("task ")}
    assert {"task alpha", "task beta"} <= set(tasks)
    for uuid in tasks.values():
        # an async track of the process: a Task's steps line up whichever thread ran them
        assert tds[tds[uuid].parent_uuid].HasField("process")
    begins = [p.track_event.track_uuid for p in t.packet
              if p.HasField("track_event") and p.track_event.type == 1]
    rep = run_fntrace("report", "t.dat", "--task", "beta")
    n_beta = sum(_graph_calls(rep.stdout, f)
                 for f in ("__main__.worker", "__main__.fetch", "__main__.parse"))
    assert begins.count(tasks["task beta"]) == n_beta
    plain = run_fntrace("export", "t.dat", "--format", "perfetto", "-o", "p.pftrace")
    assert plain.returncode == 0
    t2 = Trace()
    t2.ParseFromString((recorded / "p.pftrace").read_bytes())
    assert not any(p.track_descriptor.name.startswith("task ") for p in t2.packet
                   if p.HasField("track_descriptor"))


def test_function_tracer_shows_switches_too(tmp_path, run_fntrace):
    (tmp_path / "aio.py").write_text(AIO)
    r = run_fntrace("live", "-F", "*:mod:__main__", "aio.py")
    assert r.returncode == 0, r.stderr
    assert re.search(r"asyncio:task_switch: next=alpha", r.stdout)
    only = [f.func for f in fn_lines(r.stdout)]
    assert "__main__.parse" in only


def test_programs_without_asyncio_are_unchanged(tmp_path, run_fntrace):
    (tmp_path / "p.py").write_text("def f():\n    return 1\n\nf()\n")
    r = run_fntrace("live", "-p", "function_graph", "-F", "*:mod:__main__", "p.py")
    assert r.returncode == 0 and "task_switch" not in r.stdout


def test_the_program_sees_the_same_stack_and_no_get_name_runs(tmp_path, run_fntrace):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import asyncio, sys

        class MyTask(asyncio.Task):
            def get_name(self):
                print("get_name ran")
                return super().get_name()

        def depth():
            f, n = sys._getframe(), 0
            while f is not None:
                f, n = f.f_back, n + 1
            return n

        async def job():
            await asyncio.sleep(0)
            return depth()

        async def main():
            loop = asyncio.get_running_loop()
            loop.set_task_factory(lambda loop, coro, **kw: MyTask(coro, loop=loop, **kw))
            print(await asyncio.create_task(job(), name="mine"))

        asyncio.run(main())
        """))
    plain = run_python("prog.py", cwd=tmp_path)
    r = run_fntrace("record", "-o", "t.dat", "-p", "function_graph", "-F", "*:mod:__main__",
                    "prog.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    assert "get_name ran" not in r.stdout
    rep = run_fntrace("report", "t.dat")
    assert "next=mine" in rep.stdout


def test_tui_shows_each_task_as_a_thread(recorded):
    pytest.importorskip("textual")
    from fntrace.output.source import open_trace
    from fntrace.output.task_view import tasks_as_threads
    from fntrace.tui.index import TraceIndex
    ix = TraceIndex(tasks_as_threads(open_trace(recorded / "t.dat")))
    ix.build()
    by_name = {t.comm: t for t in ix.threads.values()}
    assert {"alpha", "beta"} <= set(by_name)

    def count(t, name: str) -> int:
        return sum(1 for f in t.func[:t.n] if ix.names[f] == name)
    assert count(by_name["alpha"], "__main__.parse") == 2
    assert count(by_name["beta"], "__main__.parse") == 3
    # each Task's steps are its own rows: none of the other's calls among them
    assert all(ix.names[f] != "__main__.main" for f in by_name["alpha"].func[:by_name["alpha"].n])


def test_task_comm_names_the_task_in_the_task_column(tmp_path, run_fntrace):
    (tmp_path / "aio.py").write_text(AIO)
    r = run_fntrace("record", "-o", "f.dat", "-F", "*:mod:__main__", "aio.py")
    assert r.returncode == 0, r.stderr
    rep = run_fntrace("report", "f.dat", "-O", "task-comm", "-O", "nofuncgraph-task")
    assert rep.returncode == 0, rep.stderr
    lines = fn_lines(rep.stdout)
    assert {f.comm for f in lines if f.func == "__main__.parse"} == {"alpha", "beta"}
    assert sum(f.comm == "beta" for f in lines if f.func == "__main__.parse") == 3
    assert not any("task_switch" in f.func for f in lines)
    plain = run_fntrace("report", "f.dat")
    assert {f.comm for f in fn_lines(plain.stdout) if f.func == "__main__.parse"} == \
        {"MainThread"}


def test_html_report_has_a_flame_graph_per_task(recorded, run_fntrace, tmp_path):
    """The HTML report's Tasks: each Task's calls, as `report --task` shows them, and the
    timeline's bars each tagged with its Task; the native walk and the pure one agree."""
    env = {k: v for k, v in os.environ.items() if k != "FNTRACE_PURE"}
    pages = []
    for pure in ("0", "1"):
        out = recorded / f"r{pure}.html"
        r = fntrace_cli("export", "t.dat", "--format", "html", "-o", out, cwd=recorded,
                        env=dict(env, FNTRACE_PURE=pure))
        assert r.returncode == 0, r.stderr
        pages.append(out.read_bytes())
    assert pages[0] == pages[1]
    data = json.loads(re.search(rb'<script id="data" type="application/json">(.*?)</script>',
                                pages[0], re.S).group(1))
    names, st = data["names"], data["stacks"]
    tasks = [t["name"] for t in data["tasks"]]
    assert tasks == sorted(tasks) and {"Task-1", "alpha", "beta"} <= set(tasks)
    for t in data["tasks"]:
        flat = t["nodes"]
        fetch = sum(flat[i + 1] for i in range(0, len(flat), 4)
                    if names[st[2 * flat[i] + 1]] == "__main__.fetch")
        rep = run_fntrace("report", "t.dat", "--task", t["name"])
        assert fetch == _graph_calls(rep.stdout, "__main__.fetch"), t["name"]
        assert (fetch > 0) == (t["name"] in ("alpha", "beta")), t["name"]
    # every bar has its Task; fetch's bars are the Tasks'
    bars = sum(len(b) // 5 for b in data["bars"].values())
    assert sum(len(t) for t in data["bar_tasks"].values()) == bars
    fetch_tasks = {data["tasks"][task - 1]["name"]
                   for slot, flat in data["bars"].items()
                   for i, task in enumerate(data["bar_tasks"][slot])
                   if names[st[2 * flat[5 * i + 3] + 1]] == "__main__.fetch"}
    assert fetch_tasks == {"alpha", "beta"}
