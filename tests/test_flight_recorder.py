"""The flight recorder (fntrace/flight.py): ``record --flight-recorder KB --dump-on WHEN``
and ``fntrace.flight_recorder()`` trace into overwrite buffers and write a trace file
only when a trigger fires -- an uncaught exception in a worker thread, a raise of a
type, a signal, a slow call, a non-zero exit -- each read back with report and stat as
any trace; the program's output and exit status are those of its untraced run."""
from __future__ import annotations

import re
import time

import pytest

from support import fntrace_cli, run_python
import test_serve
from test_serve import _pure_311, ctl, ok, wait_for

served = test_serve.served      # the served program's fixture, shared

SERVICE = """\
import os
import signal
import sys
import threading
import time

def leaf(i):
    return i + 1

def handle(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

def slow():
    time.sleep(0.06)

class Miss(Exception):
    pass

def lookup(d, k):
    try:
        if k not in d:
            raise Miss(k)
        return d[k]
    except Miss:
        return None

def worker():
    handle(100_000)
    raise ValueError("bad request")

print("serving", flush=True)
handle(10)
if "--signal" in sys.argv:
    os.kill(os.getpid(), signal.SIGUSR2)
    print("still serving", flush=True)
if "--slow" in sys.argv:
    slow()
if "--lookup" in sys.argv:
    for _ in range(4):
        lookup({}, "missing")
t = threading.Thread(target=worker, name="worker-1")
t.start()
t.join()
print("done", flush=True)
sys.exit(3 if "--fail" in sys.argv else 0)
"""


def dumps(d) -> list:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("fntrace-"))


def fly(d, *args, prog_args=()):
    return fntrace_cli("record", "--flight-recorder", "64", "-F", "__main__.*", *args,
                       "svc.py", *prog_args, cwd=d)


@pytest.fixture
def svc(tmp_path):
    (tmp_path / "svc.py").write_text(SERVICE)
    return tmp_path


def test_an_uncaught_exception_in_a_worker_leaves_one_dump(svc):
    p = fly(svc)
    plain = run_python("svc.py", cwd=svc)
    assert (p.returncode, p.stdout) == (plain.returncode, plain.stdout) == (0, "serving\ndone\n")
    # the program's own report of the exception is there, as without fntrace
    assert "ValueError: bad request" in p.stderr
    names = dumps(svc)
    assert len(names) == 1
    assert re.fullmatch(r"fntrace-\d+-\d{8}T\d{6}-exception_ValueError_in_worker-1\.dat",
                        names[0])
    assert "fntrace: flight recorder (exception ValueError in worker-1): " in p.stderr
    rep = fntrace_cli("report", names[0], cwd=svc, check=True).stdout
    # the worker's last calls, the reason and the traceback, in that order
    assert rep.index("__main__.leaf();") < rep.index("} /* __main__.worker */") \
        < rep.index("/* flight recorder: exception ValueError in worker-1 */") \
        < rep.index("/*     raise ValueError(\"bad request\") */") \
        < rep.index("/* ValueError: bad request */")
    # 10^5 calls do not fit in 64 KB: the oldest were overwritten, and the file says so
    assert re.search(r"LOST EVENTS: \d+", rep)
    st = fntrace_cli("stat", names[0], cwd=svc, check=True).stdout
    hits = {ln.split()[0]: int(ln.split()[1]) for ln in st.splitlines()
            if ln.strip().startswith("__main__.")}
    assert 0 < hits["__main__.leaf"] < 100_000


def test_memory_stays_at_the_size_given(svc):
    fly(svc, "--dump-on", "signal:SIGUSR2", prog_args=["--signal"])
    small = dumps(svc)
    assert len(small) == 1
    size64 = (svc / small[0]).stat().st_size
    (svc / small[0]).unlink()
    fntrace_cli("record", "--flight-recorder", "512", "-F", "__main__.*", "--dump-on",
                "exception", "svc.py", cwd=svc)
    big = dumps(svc)
    assert len(big) == 1
    # a dump holds what a buffer holds, whatever the number of calls before it
    assert size64 < 64 * 1024 + 16 * 1024
    assert (svc / big[0]).stat().st_size > size64


def test_signal_dumps_on_demand_and_the_program_goes_on(svc):
    p = fly(svc, "--dump-on", "signal:SIGUSR2", prog_args=["--signal"])
    assert p.returncode == 0
    assert p.stdout == "serving\nstill serving\ndone\n"
    names = dumps(svc)
    assert len(names) == 1 and names[0].endswith("-signal_SIGUSR2.dat")
    rep = fntrace_cli("report", names[0], cwd=svc, check=True).stdout
    assert "__main__.handle" in rep and "/* flight recorder: signal SIGUSR2 */" in rep
    # the worker had not run yet
    assert "__main__.worker" not in rep


def test_a_raise_of_a_type_a_slow_call_a_nonzero_exit_and_max_dumps(svc):
    p = fly(svc, "--dump-on", "slow:__main__.slow>30", "--dump-on", "exit:nonzero",
            prog_args=["--slow", "--fail"])
    assert p.returncode == 3
    names = dumps(svc)
    assert len(names) == 2, names
    assert any(re.search(r"-slow___main__\.slow_\d+\.\dms_30ms\.dat$", n) for n in names)
    assert any(n.endswith("-exit_3.dat") for n in names)
    for n in names:
        (svc / n).unlink()
    # four caught raises of the program's Miss, two dumps allowed: the rest counted
    # and said
    p = fly(svc, "--dump-on", "exception:__main__.Miss", "--max-dumps", "2",
            prog_args=["--lookup"])
    assert p.returncode == 0
    names = dumps(svc)
    assert len(names) == 2
    assert "fntrace: flight recorder: 2 more dumps not written (--max-dumps 2)" in p.stderr
    rep = fntrace_cli("report", names[0], cwd=svc, check=True).stdout
    assert "type=__main__.Miss" in rep
    assert "/* flight recorder: exception:__main__.Miss */" in rep


def test_a_bad_trigger_is_refused_before_the_program_runs(svc):
    p = fly(svc, "--dump-on", "slow:__main__.slow")
    assert p.returncode == 2
    assert "slow:FUNC>MS" in p.stderr and "^" in p.stderr
    assert "serving" not in p.stdout and "Traceback" not in p.stderr
    p = fly(svc, "--dump-on", "signal:SIGNOPE")
    assert p.returncode == 2 and "no such signal 'SIGNOPE'" in p.stderr
    # what a flight recording cannot honour is refused, not ignored
    p = fly(svc, "-o", "x.dat", "-R")
    assert p.returncode == 2 and "--flight-recorder does not take -o, -R" in p.stderr
    assert dumps(svc) == [] and not (svc / "x.dat").exists()


# a service's module: three steps, then an upstream timeout it handles
APP = ("def step(i):\n    return i\n\n"
       "def serve(n):\n"
       "    for i in range(n):\n        step(i)\n"
       "    try:\n        raise TimeoutError('upstream')\n    except TimeoutError:\n"
       "        return 'degraded'\n")


def test_the_api_in_a_service(tmp_path):
    code = """\
import fntrace

rec = fntrace.flight_recorder("app.*", size_kb=128, dump_on=["exception:TimeoutError"])
import app
app.serve(3)
rec.stop()
print(len(rec.dumps), rec.dumps[0].endswith("-exception_TimeoutError.dat"))
try:
    fntrace.flight_recorder(dump_on=["exit:nonzero"])
except fntrace.UsageError as e:
    print("refused:", e)
"""
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "svc.py").write_text(code)
    p = run_python("svc.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "1 True"
    assert "refused: --dump-on exit:nonzero is fntrace record's" in p.stdout
    name = dumps(tmp_path)[0]
    rep = fntrace_cli("report", name, cwd=tmp_path, check=True).stdout
    # app was imported after the recorder started: its functions were traced
    assert rep.count("app.step();") == 3


def test_a_snapshot_function_command_on_a_flight_recorder_dumps_when_it_fires(tmp_path):
    """GLOB:snapshot:1 in the recorder's set_ftrace_filter: the recorder's snapshot is a
    dump, made when the command fires (nothing is allocated when it is registered)."""
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "svc.py").write_text("""\
import fntrace
rec = fntrace.flight_recorder("app.*", size_kb=128, dump_on=["exception:TimeoutError"])
import app
rec.fs.write("set_ftrace_filter", "app.step:snapshot:1")
print(len(rec.dumps))
app.serve(3)
rec.stop()
print(len(rec.dumps))
""")
    p = run_python("svc.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    # none when registered; the command's (once), then the exception's
    assert p.stdout.split() == ["0", "2"]
    assert len(dumps(tmp_path)) == 2


def test_a_task_exception_never_retrieved_dumps_before_asyncio_logs_it(tmp_path):
    (tmp_path / "aio.py").write_text("""\
import asyncio
import gc

async def boom():
    raise ConnectionError("peer went away")

async def main():
    t = asyncio.ensure_future(boom())
    await asyncio.sleep(0.01)
    del t
    gc.collect()
    await asyncio.sleep(0)

asyncio.run(main())
print("ok")
""")
    p = fntrace_cli("record", "--flight-recorder", "64", "-F", "__main__.*", "aio.py",
                    cwd=tmp_path)
    plain = run_python("aio.py", cwd=tmp_path)
    assert (p.returncode, p.stdout) == (plain.returncode, plain.stdout) == (0, "ok\n")
    assert "Task exception was never retrieved" in p.stderr
    # the dump is said before asyncio's own report of it
    assert p.stderr.index("fntrace: flight recorder (exception ConnectionError in asyncio)") \
        < p.stderr.index("Task exception was never retrieved")
    names = dumps(tmp_path)
    assert len(names) == 1 and names[0].endswith("-exception_ConnectionError_in_asyncio.dat")
    rep = fntrace_cli("report", names[0], cwd=tmp_path, check=True).stdout
    assert "__main__.boom();" in rep
    assert "/* asyncio: Task exception was never retrieved */" in rep
    assert "/* ConnectionError: peer went away */" in rep


def test_from_another_shell_through_ctl(served, tmp_path):
    # a served program (fntrace.serve(): as an attached one is) gets a recorder, dumps on
    # demand, refuses a bad write with a caret, and stops it -- and goes on running
    p = served()
    ok(ctl(p.pid, "flight_recorder", "size=64 dump_on=exception filter=__main__.work"))
    state = ok(ctl(p.pid, "flight_recorder"))
    assert "size=64" in state and "dump_on=exception" in state and "dumps=0" in state
    time.sleep(0.2)
    ok(ctl(p.pid, "flight_recorder", "dump"))
    names = wait_for(lambda: dumps(tmp_path), what="a dump")
    assert len(names) == 1 and names[0].endswith("-requested.dat")
    assert names[0] in ok(ctl(p.pid, "flight_recorder"))
    rep = fntrace_cli("report", names[0], cwd=tmp_path, check=True).stdout
    assert "__main__.other" not in rep
    # (3.11's pure hook cannot be put on a thread already running: the recorder, started
    # from the control thread, does not reach the program's main thread there)
    assert ("__main__.work();" in rep) != _pure_311()
    r = ctl(p.pid, "flight_recorder", "size=64 dump_on=exception")
    assert r.returncode != 0 and "write 0 first" in r.stderr
    ok(ctl(p.pid, "flight_recorder", "0"))
    assert ok(ctl(p.pid, "flight_recorder")) == "0\n"
    r = ctl(p.pid, "flight_recorder", "size=64 dump_on=slow:x")
    assert r.returncode != 0 and "slow:FUNC>MS" in r.stderr and "^" in r.stderr
    r = ctl(p.pid, "flight_recorder", "dump_on=signal:SIGUSR2")
    assert r.returncode != 0 and "main thread" in r.stderr
    assert "flight_recorder" in ok(ctl(p.pid, "error_log"))
