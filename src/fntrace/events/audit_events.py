"""audit:<name> — CPython's audit events (PEP 578) as static events.

The interpreter raises an audit event at the points the documentation lists
(https://docs.python.org/3/library/audit_events.html): ``open`` with (path, mode,
flags), ``socket.connect`` with (self, address), ``subprocess.Popen``, ``import``,
``exec``, ``compile`` and about a hundred more.  Each name of the table below is one
event ``audit/<event>/`` whose fields are the documented arguments, in order.

Names.  An event name under ``events/`` is a C identifier in the kernel, so every
character of the audit name that is not a letter, a digit or ``_`` becomes ``_``:

    open                   audit:open
    socket.connect         audit:socket_connect
    builtins.input/result  audit:builtins_input_result
    object.__setattr__     audit:object___setattr__

and the same for argument names (``sys.path`` is the field ``sys_path``).  Audit
events not in the table are not events (their arguments are not documented).

The hook.  An audit hook cannot be removed (sys.addaudithook), so ONE is installed, the
first time an audit event is enabled, and stays.  With no audit event enabled it costs
one call and one dict test per audit event the program raises (``_hook``'s first
line).  It never raises into the program, calls none of the program's code (values are
shown by core/fetch.py's value_repr, which reads built-in values and names anything
else by its type), and ignores the events fntrace's own code and threads raise.
"""
from __future__ import annotations

import re
import sys
import threading
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

from .core import EventCall
from .static_emit import emit, program_frame

__all__ = ["AUDIT_TABLE", "event_name", "audit_calls"]

# name: documented arguments (":int" / ":str" where the type is always that one; the
# others are any value).  PYVERSIONS: names of 3.11-3.13, Windows-only ones left out.
AUDIT_TABLE = """
_thread.start_new_thread function args kwargs
array.__new__ typecode initializer
builtins.breakpoint breakpointhook
builtins.id id:int
builtins.input prompt
builtins.input/result result
code.__new__ code filename name argcount posonlyargcount kwonlyargcount nlocals stacksize flags
compile source filename
cpython.PyInterpreterState_Clear
cpython.PyInterpreterState_New
cpython._PySys_ClearAuditHooks
cpython.run_command command:str
cpython.run_file filename
cpython.run_interactivehook hook
cpython.run_module module_name:str
cpython.run_startup filename
cpython.run_stdin
ctypes.addressof obj
ctypes.call_function func_pointer arguments
ctypes.cdata address:int
ctypes.cdata/buffer pointer size offset
ctypes.create_string_buffer init size
ctypes.create_unicode_buffer init size
ctypes.dlopen name
ctypes.dlsym library name
ctypes.dlsym/handle handle name
ctypes.get_errno
ctypes.memmove dst src len
ctypes.memset dst c len
ctypes.seh_exception code
ctypes.set_errno errno:int
ctypes.string_at ptr size
ctypes.wstring_at ptr size
ensurepip.bootstrap root
exec code_object
fcntl.fcntl fd:int cmd:int arg
fcntl.flock fd:int operation:int
fcntl.ioctl fd:int request:int arg
fcntl.lockf fd:int cmd:int len start whence
ftplib.connect self host port
ftplib.sendcmd self cmd
function.__new__ code
gc.get_objects generation:int
gc.get_referents objs
gc.get_referrers objs
glob.glob pathname recursive
glob.glob/2 pathname recursive root_dir dir_fd
http.client.connect self host port
http.client.send self data
imaplib.open self host port
imaplib.send self data
import module:str filename sys.path sys.meta_path sys.path_hooks
marshal.dumps value version:int
marshal.load
marshal.loads bytes
mmap.__new__ fileno length access offset
nntplib.connect self host port
nntplib.putline self line
object.__delattr__ obj name:str
object.__getattr__ obj name:str
object.__setattr__ obj name:str value
open path mode flags:int
os.chdir path
os.chflags path flags:int
os.chmod path mode:int dir_fd
os.chown path uid:int gid:int dir_fd
os.exec path args env
os.fork
os.forkpty
os.fwalk top topdown onerror follow_symlinks dir_fd
os.getxattr path attribute
os.kill pid:int sig:int
os.killpg pgid:int sig:int
os.link src dst src_dir_fd dst_dir_fd
os.listdir path
os.listxattr path
os.lockf fd:int cmd:int len
os.mkdir path mode:int dir_fd
os.posix_spawn path argv env
os.putenv key value
os.remove path dir_fd
os.removexattr path attribute
os.rename src dst src_dir_fd dst_dir_fd
os.rmdir path dir_fd
os.scandir path
os.setxattr path attribute value flags:int
os.spawn mode path args env
os.symlink src dst dir_fd
os.system command
os.truncate fd length:int
os.unsetenv key
os.utime path times ns dir_fd
os.walk top topdown onerror followlinks
pathlib.Path.glob self pattern
pathlib.Path.rglob self pattern
pdb.Pdb
pickle.find_class module:str name:str
poplib.connect self host port
poplib.putline self line
pty.spawn argv
resource.prlimit pid limits
resource.setrlimit resource limits
setopencode
shutil.chown path user group
shutil.copyfile src dst
shutil.copymode src dst
shutil.copystat src dst
shutil.copytree src dst
shutil.make_archive base_name format root_dir base_dir
shutil.move src dst
shutil.rmtree path dir_fd
shutil.unpack_archive filename extract_dir format
signal.pthread_kill thread_id:int signalnum:int
smtplib.connect self host port
smtplib.send self data
socket.__new__ self family type protocol
socket.bind self address
socket.connect self address
socket.getaddrinfo host port family type protocol
socket.gethostbyaddr ip_address
socket.gethostbyname hostname
socket.gethostname
socket.getnameinfo sockaddr
socket.getservbyname servicename protocolname
socket.getservbyport port protocolname
socket.sendmsg self address
socket.sendto self address
socket.sethostname name
sqlite3.connect database
sqlite3.connect/handle connection_handle
sqlite3.enable_load_extension connection enabled
sqlite3.load_extension connection path
subprocess.Popen executable args cwd env
sys._current_exceptions
sys._current_frames
sys._getframe frame_object
sys._getframemodulename depth:int
sys.addaudithook
sys.excepthook hook type value traceback
sys.monitoring.register_callback func
sys.set_asyncgen_hooks_finalizer
sys.set_asyncgen_hooks_firstiter
sys.setprofile
sys.settrace
sys.unraisablehook hook unraisable
syslog.closelog
syslog.openlog ident logoption facility
syslog.setlogmask maskpri
syslog.syslog priority message
tempfile.mkdtemp fullpath
tempfile.mkstemp fullpath
time.sleep secs
urllib.Request fullurl data headers method
webbrowser.open url
"""


# \W: what is not alphanumeric (str.isalnum) or "_"; one pass in C (the whole table is
# named at every recording's start)
_NOT_WORD = re.compile(r"\W")


def event_name(audit_name: str) -> str:
    """The event (or field) name of an audit name: see the module docstring."""
    return _NOT_WORD.sub("_", audit_name)


def _parse_table() -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for line in AUDIT_TABLE.strip().splitlines():
        words = line.split()
        fields = []
        for w in words[1:]:
            name, _, kind = w.partition(":")
            fields.append((event_name(name), kind or "any"))
        out.append((words[0], fields))
    return out


# audit name -> (EventCall, field names) of the events enabled now: the hook's one test
_on: dict[str, tuple[EventCall, tuple[str, ...]]] = {}
_installed = False
_busy: set[int] = set()          # threads inside the hook (it raises audit events itself)
_get_ident = threading.get_ident


def _hook(event: str, args: tuple, _on=_on, _busy=_busy, _get_ident=_get_ident) -> None:
    # The hook outlives this module: an audit hook cannot be removed, and the
    # interpreter's finalization sets module globals to None while audit events still
    # fire. So everything it touches before the try is bound here, not looked up.
    if event not in _on:
        return                  # the cost when nothing (or another event) is enabled
    me = _get_ident()
    if me in _busy:
        return
    _busy.add(me)
    try:
        _fire(event, args)
    except BaseException:
        pass                    # never into the program (a KeyboardInterrupt included)
    finally:
        _busy.discard(me)


def _fire(event: str, args: tuple) -> None:
    ent = _on.get(event)
    if ent is None:
        return
    call, names = ent
    frame = program_frame(sys._getframe(2))
    if frame is None:
        return
    n = len(args) if type(args) is tuple else 0
    values = {name: (args[i] if i < n else None) for i, name in enumerate(names)}
    _emit(call, values, frame)


def _emit(call, values, frame) -> None:
    global _emit
    _emit = emit
    emit(call, values, frame)


def _install() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def _make_hook(audit_name: str, names: tuple[str, ...],
               call_ref: list[EventCall]) -> Callable[[bool], None]:
    def hook(on: bool) -> None:
        if on:
            _install()
            _on[audit_name] = (call_ref[0], names)
        else:
            _on.pop(audit_name, None)
    return hook


def audit_calls() -> list[EventCall]:
    """The EventCalls of the table (not registered: static_events.py does that)."""
    calls = []
    for audit_name, fields in _parse_table():
        ref: list[EventCall] = []
        call = EventCall("audit", event_name(audit_name), dict(fields),
                         hook=_make_hook(audit_name, tuple(n for n, _ in fields), ref),
                         definition=audit_name)
        ref.append(call)
        calls.append(call)
    return calls


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
