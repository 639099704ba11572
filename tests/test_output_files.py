"""The files a trace goes in (src/fntrace/outfile.py): 0600 whatever the umask, --mode
to widen them; in a sticky directory every user can write to (/tmp), another user's
symlink is not followed and another user's file is not written into."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

PROG = "def work(x):\n    return x\n\nfor i in range(3):\n    work(i)\n"
FORK = ("import os\ndef work(x):\n    return x\nwork(1)\npid = os.fork()\n"
        "if pid == 0:\n    work(2)\n    os._exit(0)\nos.waitpid(pid, 0)\n")


def mode_of(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_trace_files_and_exports_are_0600(tmp_path, run_fntrace, umask022):
    (tmp_path / "p.py").write_text(FORK)
    (tmp_path / "t.dat").write_text("an older file, 0644")
    os.chmod(tmp_path / "t.dat", 0o644)
    r = run_fntrace("record", "-o", "t.dat", "-F", "*:mod:__main__", "p.py")
    assert r.returncode == 0, r.stderr
    children = [p for p in tmp_path.iterdir() if p.name.startswith("t.dat.")]
    assert children
    for p in [tmp_path / "t.dat", *children]:
        assert mode_of(p) == 0o600, p
    for fmt in ("chrome", "perfetto"):
        x = run_fntrace("export", "t.dat", "-f", fmt, "-o", f"t.{fmt}")
        assert x.returncode == 0, x.stderr
        assert mode_of(tmp_path / f"t.{fmt}") == 0o600
    # --mode widens on purpose
    r = run_fntrace("record", "--mode", "0644", "-o", "w.dat", "-F", "*:mod:__main__", "p.py")
    assert r.returncode == 0, r.stderr
    assert {mode_of(p) for p in tmp_path.iterdir() if p.name.startswith("w.dat")} == {0o644}
    x = run_fntrace("export", "w.dat", "-f", "chrome", "-o", "w.json", "--mode", "640")
    assert x.returncode == 0 and mode_of(tmp_path / "w.json") == 0o640
    bad = run_fntrace("record", "--mode", "0999", "-o", "x.dat", "p.py")
    assert bad.returncode == 2 and "--mode '0999'" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x.dat").exists()


def test_the_api_writes_0600(tmp_path, umask022):
    import fntrace
    with fntrace.trace(output=str(tmp_path / "api.dat")):
        pass
    assert mode_of(tmp_path / "api.dat") == 0o600


@pytest.fixture
def sticky(tmp_path):
    """A directory as /tmp is: world-writable and sticky."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def _nobody() -> int:
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: making a file another user owns needs root: the sticky "
                    "directory refusals were NOT tested")
    return 65534


def test_another_users_symlink_in_a_sticky_dir_is_not_followed(sticky, tmp_path, run_fntrace):
    uid = _nobody()
    secret = tmp_path / "secret"
    secret.write_text("root's file\n")
    link = sticky / "fntrace.dat"
    link.symlink_to(secret)
    os.lchown(link, uid, uid)
    (tmp_path / "p.py").write_text(PROG)
    for cmd in (["record", "-o", str(link), "p.py"],):
        r = run_fntrace(*cmd)
        assert r.returncode != 0
        assert r.stderr.count("\n") == 1 and "symbolic link" in r.stderr, r.stderr
    assert secret.read_text() == "root's file\n"
    # an export to such a name is refused the same way
    assert run_fntrace("record", "-o", "ok.dat", "p.py").returncode == 0
    x = run_fntrace("export", "ok.dat", "-f", "chrome", "-o", str(link))
    assert x.returncode != 0 and "symbolic link" in x.stderr, x.stderr
    assert secret.read_text() == "root's file\n" and link.is_symlink()
    # our own symlink there is followed, as the kernel's fs.protected_symlinks allows
    mine = sticky / "mine.dat"
    mine.symlink_to(tmp_path / "target.dat")
    assert run_fntrace("record", "-o", str(mine), "p.py").returncode == 0
    assert (tmp_path / "target.dat").stat().st_size > 0


def test_another_users_file_in_a_sticky_dir_is_not_written(sticky, tmp_path, run_fntrace):
    uid = _nobody()
    planted = sticky / "fntrace.dat"
    planted.write_text("theirs\n")
    os.chmod(planted, 0o666)
    os.chown(planted, uid, uid)
    (tmp_path / "p.py").write_text(PROG)
    r = run_fntrace("record", "-A", "-o", str(planted), "p.py")
    assert r.returncode != 0 and "belongs to user 65534" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert planted.read_text() == "theirs\n"
    # outside a sticky directory, root writes where it is told
    plain = tmp_path / "theirs.dat"
    plain.write_text("x")
    os.chown(plain, uid, uid)
    assert run_fntrace("record", "-o", str(plain), "p.py").returncode == 0


def _drain(path, got: list) -> "threading.Thread":
    import threading

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_a_pipe_or_a_link_is_written_through_not_replaced(tmp_path, run_fntrace):
    """``-o /dev/null`` must leave /dev/null a device: a name that is not a regular file
    (a FIFO here, as /dev/null and /dev/stdout are not) is written in place, and a
    symbolic link stays a link with the file it names written."""
    (tmp_path / "p.py").write_text(PROG)
    r = run_fntrace("record", "-o", "t.dat", "-F", "*:mod:__main__", "p.py")
    assert r.returncode == 0, r.stderr
    whole = run_fntrace("export", "t.dat", "-f", "chrome", "-o", "whole.json")
    assert whole.returncode == 0, whole.stderr
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list = []
    t = _drain(fifo, got)
    x = run_fntrace("export", "t.dat", "-f", "chrome", "-o", "pipe")
    t.join(30)
    assert x.returncode == 0, x.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got == [(tmp_path / "whole.json").read_bytes()]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    (tmp_path / "real.json").write_text("old")
    os.symlink("real.json", tmp_path / "link.json")
    x = run_fntrace("export", "t.dat", "-f", "chrome", "-o", "link.json")
    assert x.returncode == 0, x.stderr
    assert os.path.islink(tmp_path / "link.json")
    assert (tmp_path / "real.json").read_bytes() == (tmp_path / "whole.json").read_bytes()

    import fntrace
    got = []
    t = _drain(fifo, got)
    with fntrace.trace(output=str(fifo)):
        pass
    t.join(30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got and got[0][:4] == (tmp_path / "t.dat").read_bytes()[:4]
