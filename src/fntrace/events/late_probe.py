"""An fprobe on functions of a module the program may not have imported yet, and the
events its handlers write (``note``).

fntrace's own trackers (events/task_switch.py, events/otel_context.py) probe library
functions — asyncio's ``Handle._run``, OpenTelemetry's ``attach``/``detach`` — from
the start of a recording, whether or not the program has imported the library yet.
Loaded: probed at once.  Not loaded: the discovery trap is asked to watch that one
module name (core/records.py set_scope), whose records are made when its body starts,
and the probe is registered on them then; the watch ends there.
"""
from __future__ import annotations

import sys
from time import monotonic_ns

from ..core.ops import sync_discovery
from ..core.records import record_table
from ..fprobe import Fprobe, register_fprobe_ips, unregister_fprobe
from ..ring_buffer import PAYLOAD_SEP, TRACE_EVENT
from .core import event_buffer_of

__all__ = ["LateProbe", "note"]


def note(tr, name: str, text: str) -> bool:
    """Write event ``name: text`` into the calling thread's buffer of instance ``tr``
    (False: a thread the instance's event filters leave out)."""
    buf = event_buffer_of(tr)
    if buf is None:
        return False
    buf.write_payload(monotonic_ns(), TRACE_EVENT, 0, 0, 0, 0, name + PAYLOAD_SEP + text)
    return True


class LateProbe:
    """``fp`` on ``module``'s functions named ``qualnames`` (module-relative), as
    soon as they exist; ``stop()`` unregisters it."""

    def __init__(self, fp: Fprobe, module: str, qualnames: tuple[str, ...]) -> None:
        self.fp = fp
        self.module = module
        self.names = {f"{module}.{q}" for q in qualnames}
        self.qualnames = qualnames
        self.bound = False

    def start(self) -> None:
        mod = sys.modules.get(self.module)
        if mod is not None:
            funcs = []
            for q in self.qualnames:
                obj: object = mod
                for part in q.split("."):
                    obj = getattr(obj, part, None)
                if obj is not None and record_table.lookup(obj) is not None:
                    funcs.append(obj)
            if len(funcs) == len(self.qualnames):
                self._bind(funcs)
                return
        record_table.listeners.append(self._on_load)
        record_table.set_scope(self, lambda name: name == self.module)
        sync_discovery()

    def stop(self) -> None:
        self._unwatch()
        if self.bound:
            self.bound = False
            try:
                unregister_fprobe(self.fp)
            except Exception:
                pass

    def _unwatch(self) -> None:
        try:
            record_table.listeners.remove(self._on_load)
        except ValueError:
            return
        record_table.set_scope(self, False)
        sync_discovery()

    def _on_load(self, name: str, new) -> None:
        if self.bound or name != self.module:
            return
        recs = [r for r in new if r.name in self.names]
        if len(recs) == len(self.names):
            self._bind(recs)
            self._unwatch()

    def _bind(self, what) -> None:
        register_fprobe_ips(self.fp, what)
        self.bound = True


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
