"""tracefs: the control and output files, in process (fs.py)."""
from .fs import ErrorLog, Tracefs, tracefs

__all__ = ["ErrorLog", "Tracefs", "tracefs"]
