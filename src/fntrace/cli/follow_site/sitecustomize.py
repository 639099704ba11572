"""fntrace's bootstrap in a Python process a traced program started (fntrace/cli/follow.py).

This directory is first on PYTHONPATH while fntrace follows a program's processes.  It
takes itself off ``sys.path``, runs the sitecustomize it hides (if there is one), then
starts this process's recording; an interpreter without this fntrace is left alone.
"""


def _fntrace_follow() -> None:
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the program's own, found further on)
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    spec = os.environ.get("FNTRACE_FOLLOW")
    if not spec or not _main_interpreter():
        # (a subinterpreter the program makes imports site too: the process is traced
        # by its main interpreter, and signals, threads and files are that one's)
        return
    try:
        from fntrace.cli.follow_child import start_child
    except ImportError:
        return
    start_child(spec)


def _main_interpreter() -> bool:
    """Is this the process's main interpreter (not one the program made)?"""
    try:
        import _interpreters as interp             # 3.13
    except ImportError:
        # (the checker knows _interpreters from 3.13 on and _xxsubinterpreters never:
        # for an older target both are unknown, and nothing is redefined)
        try:
            import _xxsubinterpreters as interp    # type: ignore[no-redef, unused-ignore]  # 3.12
        except ImportError:
            return True

    def num(x):
        return int(x[0] if isinstance(x, tuple) else x)
    try:
        return num(interp.get_current()) == num(interp.get_main())
    except Exception:
        return True


_fntrace_follow()
del _fntrace_follow, _main_interpreter
