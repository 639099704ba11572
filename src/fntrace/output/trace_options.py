"""The names of ``trace_options`` and the grammar of a write to it: tracefs's file
(tracefs/fs.py) and the report's ``-O`` take the same words.  Apart from the
tracefs tree, so that a reader of trace files checks its options without loading the
tracer."""
from __future__ import annotations

from ..errors import FntraceError

__all__ = ["OPTIONS", "GRAPH_OPTIONS", "parse_trace_options"]

OPTIONS = ("print-parent", "irq-info", "overwrite", "markers", "function-trace",
           "object-repr", "function-fork", "event-fork", "sleep-time", "func-c-calls")
# function_graph's options (trace_functions_graph.c trace_opts) and their defaults.
GRAPH_OPTIONS = {"funcgraph-overrun": False, "funcgraph-cpu": True,
                 "funcgraph-overhead": True, "funcgraph-proc": False,
                 "funcgraph-duration": True, "funcgraph-abstime": False,
                 "funcgraph-tail": False, "funcgraph-retval": False,
                 "funcgraph-retval-hex": False, "funcgraph-args": False}


def parse_trace_options(data: str) -> list[tuple[str, bool]]:
    """The words of a ``trace_options`` write: [(option, on)], ``noNAME`` turning
    NAME off; an unknown name is an error (EINVAL) at its position, nothing applied."""
    out = []
    for word in data.split():
        on = not word.startswith("no")
        name = word[2:] if not on else word
        if name not in OPTIONS and name not in GRAPH_OPTIONS:
            raise FntraceError(f"no such option {word!r}", command=data, pos=data.find(word))
        out.append((name, on))
    return out


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
