"""Back ends: how a site is patched on this interpreter (the kernel's arch/ code).

Every back end has the interface of ``Backend`` below; ``make_backend()`` picks the one
``_env.BACKEND`` names.  The update path (core/ops.py) talks to the back end only
through this interface, as the kernel's ftrace.c calls ftrace_make_call() and friends
without knowing the architecture.
"""
from __future__ import annotations

__all__ = ["Backend", "make_backend"]

TYPE_CHECKING = False
if TYPE_CHECKING:                       # typing is costly to import; only checkers need this
    from typing import Protocol

    from ..core.records import DynFtrace

    class Backend(Protocol):
        """What the update path needs from a back end."""
        name: str
        active: bool            # some site is patched (the hook or tool id is held)

        def start(self, call_ops: bool = True) -> None:
            """Take the hook; call_ops False: every site calls the one global target."""

        def stop(self) -> None:
            """Unpatch everything and give the hook back."""

        def kill(self) -> None:
            """ftrace_kill: no callback from now on, in O(1)."""

        def set_unwind(self, on: bool) -> None:
            """Report exceptions leaving a traced frame (a graph user is on)."""

        def set_trap(self, on: bool) -> None:
            """The discovery trap: list a module the first time one of its functions
            runs, instead of up front (docs/internals.md, "Set-up cost")."""

        def profile_taken(self) -> str | None:
            """Whom sys.setprofile was taken from, if this back end took it."""

        def make_call(self, rec: DynFtrace) -> None: ...

        def modify_call(self, rec: DynFtrace) -> None: ...

        def make_nop(self, rec: DynFtrace) -> None: ...
else:
    Backend = object


def make_backend() -> "Backend":
    """The back end of this interpreter (FNTRACE_BACKEND=profile forces setprofile)."""
    from .. import _env
    if _env.BACKEND == "monitoring":
        from .monitoring import MonitoringBackend
        return MonitoringBackend()
    from .profile import ProfileBackend
    return ProfileBackend()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
