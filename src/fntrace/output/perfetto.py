"""A trace as Perfetto's own format: ``fntrace export FILE --format perfetto``.

The file is a stream of TracePackets (Perfetto's trace.proto), built with the
``perfetto`` package's TraceProtoBuilder and protos and opened in ui.perfetto.dev
(Open trace file) or by Perfetto's trace processor.  What goes in::

    process track      ProcessDescriptor: pid, argv (cmdline), the program's name
      thread tracks    ThreadDescriptor per thread: pid, tid = native id, thread name
        slices         a call: TYPE_SLICE_BEGIN at its entry, TYPE_SLICE_END at its
                       return; args (funcgraph-args) as the debug annotation "args"
                       on the begin, the return value as "retval" on the end
        instants       a function tracer hit (annotation "parent"), a dynamic or
                       static event (its name; "fields"), a trace_marker write (its
                       text; "writer" when a function wrote it), a stack trace (an
                       interned callstack: the frames' functions, outermost first),
                       lost events ("lost")
    counter tracks     under the process: "events lost" (the events lost so far: one
                       step at each loss, the instants' counts added up; written after
                       the rest), "buffer fill (%)" (the bytes the ring buffers
                       handed the file's writer and it had not written yet, as a share
                       of what it holds before the program waits for it: sampled at
                       each chunk written), "gc collections (generation N)" (one more
                       at each gc:gc_start event of that generation, with -e
                       gc:gc_start)
    flows              with -e threads:thread_start: from an instant "start thread
                       NAME" on the thread that started it (inside its Thread.start
                       caller's slice) to the new thread's thread_start instant; of
                       a trace that followed forked children: from an instant "fork
                       PID" on the parent's thread that forked, when it did, to the
                       child's first event; with -e asyncio:task_create: from a
                       Task's creation to its first step (the asyncio:task_switch
                       that names its id); with -e futures:submit -e futures:run: from
                       a submit to a thread pool to the worker's run of that item

A trace is written as it is read: the builder's packets are serialized every
``BATCH_PACKETS`` and the builder started afresh.  A Perfetto trace is the repeated
``packet`` field of a Trace message, so serialized Trace messages one after the other
are one trace; memory holds one batch, the open calls of each thread, and the
interning tables (one entry per distinct function and event name).

Names are interned (TracePacket.interned_data, one sequence for the whole trace):
a function's name is written once, then referred to by number, as the Perfetto SDK
does; so are annotation names and a function tracer hit's parent.

Clocks: the timestamps are the trace's clock in ns.  A ClockSnapshot makes that clock
the trace's own (primary_trace_clock), so nothing is converted; it also declares a
sequence-scoped incremental clock that reads the same, which the sequence's packet
defaults name: a packet's timestamp is the delta from the packet before (a call's
begin that lies before it, made from a return whose entry was lost, is written
absolute, naming the trace's clock).  The trace's clock: local, global, perf and mono are CLOCK_MONOTONIC, mono_raw is
CLOCK_MONOTONIC_RAW, boot is CLOCK_BOOTTIME.  uptime counts jiffies (10 ms) of the
boot clock: they are scaled to ns on CLOCK_BOOTTIME.  counter is no clock at all
(one count per event): its counts are written as nanoseconds of the trace's own time
and the export says so.

Calls come out of the entry stream with CallBuilder (output/calls.py), which keeps
what a real trace does from breaking the nesting a thread track needs: a call whose
return was not recorded ends where its thread's stack says it must (annotation
"unfinished"), and one whose entry was not recorded (overwritten) begins at its
recorded calltime (annotation "entry_lost"); where records were lost, the calls open
across the gap end at its start and go on as new slices after it.
"""
from __future__ import annotations

import fnmatch
import itertools
import os
from collections.abc import Mapping

from .calls import Call, CallBuilder
from .entry import (
    LOST_EVENTS_UNKNOWN, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET,
    TRACE_PRINT, TRACE_STACK, LostEvents,
)
from .task_view import EVENT as TASK_EVENT, task_of_text
from .registry import Exporter, register_exporter

__all__ = ["PerfettoExporter", "BATCH_PACKETS", "SEQUENCE_ID", "INCREMENTAL_CLOCK", "PROCESS_UUID",
           "CLOCKS", "LOST_NAME", "LOST_COUNTER", "FILL_COUNTER", "STACK_NAME", "MARKER_NAME", "GC_EVENT"]

# Packets per serialized Trace message: large enough that the per-message cost is
# nothing, small enough that a batch is a few hundred KB.
BATCH_PACKETS = 4096
# The one packet sequence of the file (any non-zero id; the interning tables are
# scoped to it).
SEQUENCE_ID = 1
# A clock of the sequence (ids 64-127 are sequence-scoped) whose timestamps are deltas
# from the sequence's last one: 1-3 bytes a packet instead of 7.
INCREMENTAL_CLOCK = 64
# Track uuids: the process, then its threads numbered from 2 as they are met (small
# numbers: a track_uuid is in every event).
PROCESS_UUID = 1
# asyncio Task tracks (--task-tracks): above the threads' and processes' uuids
TASK_UUID = 1 << 40
# counter tracks (gc collections): above the Tasks'
COUNTER_UUID = 1 << 41

# trace_clock -> (perfetto BuiltinClock name, ns per unit); None: not a clock
CLOCKS: Mapping[str, tuple[str, int] | None] = {
    "local": ("BUILTIN_CLOCK_MONOTONIC", 1),
    "global": ("BUILTIN_CLOCK_MONOTONIC", 1),
    "perf": ("BUILTIN_CLOCK_MONOTONIC", 1),
    "mono": ("BUILTIN_CLOCK_MONOTONIC", 1),
    "mono_raw": ("BUILTIN_CLOCK_MONOTONIC_RAW", 1),
    "boot": ("BUILTIN_CLOCK_BOOTTIME", 1),
    "uptime": ("BUILTIN_CLOCK_BOOTTIME", 10_000_000),     # jiffies of USER_HZ = 100
    "counter": None,
}

# Instant names of the entries that have no function name of their own.
LOST_NAME = "lost events"
# The counter track of the events lost so far, one per process that lost any
LOST_COUNTER = "events lost"
# The writer's backlog as a share of its limit, one per process (STAT's "backlog")
FILL_COUNTER = "buffer fill (%)"
# The counter tracks: a gc:gc_start event counts a collection of its generation
GC_EVENT = "gc_start"          # (gc:gc_start: an entry names the event only)
# threads:thread_start: a flow from the thread that started it
THREAD_EVENT = "thread_start"
# The hand-off events (events/handoff_events.py): a flow from each event of the first
# kind to the event of the second that has its ``id=`` (in the same process): a Task's
# creation to its first step, a submit to a pool to the worker's run
HANDOFF_FROM = {"task_create": "task", "submit": "futures"}
HANDOFF_TO = {TASK_EVENT: "task", "run": "futures"}
# Events the loop makes more of than an instant (counters, flows): a trace recorded
# with any of them is the loop's, not the native walk's
LOOP_EVENTS = ("gc:gc_start", "threads:thread_start", "asyncio:task_create",
               "futures:submit", "futures:run")
STACK_NAME = "<stack trace>"
MARKER_NAME = "trace_marker"


def _field(text: str, name: str) -> str:
    """The value of ``name=VALUE`` in an event's text ("?" when it has none)."""
    for word in text.split():
        if word.startswith(name + "="):
            return word[len(name) + 1:]
    return "?"


def _any_enabled(patterns, names) -> bool:
    """Does any event pattern of a trace's header (``-e``: ``SYS:NAME`` globs, or a
    system alone) name one of ``names``?"""
    for p in patterns:
        p = str(p)
        if ":" not in p:
            p += ":*"
        if any(fnmatch.fnmatchcase(n, p) for n in names):
            return True
    return False


def _utf8(s: str) -> str:
    """``s`` as a protobuf string field takes it: a lone surrogate (a name or repr
    decoded with surrogateescape) would be refused, so it becomes '?'."""
    return s if s.isascii() else s.encode("utf-8", "replace").decode("utf-8")


class _Writer:
    """One export: the builder of the current batch, the interning tables, the tracks."""

    def __init__(self, source, out, pb, builder_class, task_tracks: bool = False) -> None:
        self.source = source
        # --task-tracks: a call's slice goes on a track of its asyncio Task (an async
        # track of the process), so a Task's steps line up and the others' do not
        # interleave
        self.task_tracks = task_tracks
        self.task_of_cpu: dict[int, tuple[str, str] | None] = {}
        self.task_uuids: dict[tuple[int, str, str], int] = {}
        self.out = out
        self.pb = pb
        self.builder_class = builder_class
        self.builder = builder_class()
        self.n = 0
        te = pb.TrackEvent
        self.BEGIN, self.END, self.INSTANT, self.COUNTER = (
            te.TYPE_SLICE_BEGIN, te.TYPE_SLICE_END, te.TYPE_INSTANT, te.TYPE_COUNTER)
        self.NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        # interning: string -> iid, per InternedData table
        self.event_names: dict[str, int] = {}
        self.ann_names: dict[str, int] = {}
        self.str_values: dict[str, int] = {}
        # a stack trace's frames: function name -> iid (one frame per function), and
        # the frames' ids (outermost first) -> callstack iid
        self.frames: dict[str, int] = {}
        self.callstacks: dict[tuple[int, ...], int] = {}
        # counter tracks by name -> [uuid, value so far]
        self.counters: dict[str, list[int]] = {}
        # flows made so far (their ids: 1, 2 ...); a forked child's main thread id ->
        # the flow its first event ends; a fork flow's (time, thread, child); the flows
        # an event ended
        self.flows = 0
        self.flow_into: dict[int, int] = {}
        self.fork_from: dict[int, tuple[int, int, int]] = {}
        self.flows_ended: list[int] = []
        # (kind, pid, id) -> the flow a hand-off event started and its other end ends
        self.handoffs: dict[tuple[str, int, str], int] = {}
        # native thread id -> track uuid
        self.tracks: dict[int, int] = {}
        self.lost_total = 0
        self.unknown_loss = False
        # each loss shown, (time, thread, count): the "events lost" counter tracks
        self.losses: list[tuple[int, int, int]] = []
        clock = CLOCKS.get(source.trace_clock, CLOCKS["local"])
        self.clock_id = getattr(pb.BuiltinClock, clock[0]) if clock else None
        self.scale = clock[1] if clock else 1
        # the time of the last packet on INCREMENTAL_CLOCK (None: no such clock)
        self.last_ts: int | None = None

    # -- packets -------------------------------------------------------------------

    def packet(self, **fields):
        """A new packet of the current batch (the batch written first if full), on
        the sequence, with ``fields`` set (given at once: cheaper than one by one)."""
        if self.n >= BATCH_PACKETS:
            self.flush()
        self.n += 1
        return self.builder.trace.packet.add(trusted_packet_sequence_id=SEQUENCE_ID,
                                             **fields)

    def flush(self) -> None:
        if self.n:
            data = self.builder.serialize()
            self.out.write(data)
            self.builder = self.builder_class()
            self.n = 0

    def ts(self, t: int) -> int:
        # uint64 on the wire: a calltime before the clock's zero (counter) is clamped
        t *= self.scale
        return t if t > 0 else 0

    # -- interning -----------------------------------------------------------------

    def name_iid(self, p, name: str) -> int:
        """The iid of an event name, defined in ``p`` when new; ``p`` refers to the
        sequence's interned data from now on."""
        p.sequence_flags = self.NEEDS
        iid = self.event_names.get(name)
        if iid is None:
            iid = self.event_names[name] = len(self.event_names) + 1
            p.interned_data.event_names.add(iid=iid, name=_utf8(name))
        return iid

    def ann_iid(self, p, name: str) -> int:
        p.sequence_flags = self.NEEDS
        iid = self.ann_names.get(name)
        if iid is None:
            iid = self.ann_names[name] = len(self.ann_names) + 1
            p.interned_data.debug_annotation_names.add(iid=iid, name=_utf8(name))
        return iid

    def value_iid(self, p, value: str) -> int:
        p.sequence_flags = self.NEEDS
        iid = self.str_values.get(value)
        if iid is None:
            iid = self.str_values[value] = len(self.str_values) + 1
            p.interned_data.debug_annotation_string_values.add(
                iid=iid, str=value.encode("utf-8", "surrogateescape"))
        return iid

    def callstack_iid(self, p, frames: list[str]) -> int:
        """The iid of a callstack (``frames`` innermost first, as a stack trace's text
        lists them), its functions, frames and itself defined in ``p`` when new."""
        p.sequence_flags = self.NEEDS
        ids = []
        for name in reversed(frames):           # (a Callstack lists the root first)
            iid = self.frames.get(name)
            if iid is None:
                iid = self.frames[name] = len(self.frames) + 1
                p.interned_data.function_names.add(iid=iid, str=_utf8(name).encode())
                p.interned_data.frames.add(iid=iid, function_name_id=iid)
            ids.append(iid)
        key = tuple(ids)
        iid = self.callstacks.get(key)
        if iid is None:
            iid = self.callstacks[key] = len(self.callstacks) + 1
            p.interned_data.callstacks.add(iid=iid, frame_ids=ids)
        return iid

    def count(self, name: str, ts: int, add: int) -> None:
        """One more step of a counter track of the process (made when first met): its
        value goes up by ``add`` at ``ts``."""
        c = self.counters.get(name)
        if c is None:
            c = self.counters[name] = [self.counter_track(name, PROCESS_UUID), 0]
        c[1] += add
        p, te = self.event(self.COUNTER, ts, 0, "", uuid=c[0])
        te.counter_value = c[1]

    def counter_track(self, name: str, parent: int, unit: str = "") -> int:
        """A new counter track under track ``parent`` (its descriptor written): its
        uuid."""
        uuid = COUNTER_UUID + len(self.counters)
        td = self.packet().track_descriptor
        td.uuid = uuid
        td.parent_uuid = parent
        td.name = name
        if unit:
            td.counter.unit_name = unit
        else:
            td.counter.SetInParent()
        return uuid

    def counter_at(self, uuid: int, ts: int, value: float, double: bool = False) -> None:
        """A counter's value at ``ts``, on the trace's own clock (the counters written
        after the rest: the incremental clock's deltas are the walk's)."""
        clock = {} if self.clock_id is None else {"timestamp_clock_id": self.clock_id}
        p = self.packet(timestamp=self.ts(ts), **clock,
                        track_event={"type": self.COUNTER, "track_uuid": uuid})
        if double:
            p.track_event.double_counter_value = value
        else:
            p.track_event.counter_value = int(value)

    def thread_flow(self, e) -> int:
        """For a thread_start event (on the new thread): an instant "start thread
        NAME" on the thread that started it, at the same time (inside the call that
        started it: Thread.start waits there for the new thread), whose flow the
        event's instant ends; the flow's id (0: the parent is not known)."""
        text = e.text or ""
        parent = _field(text, "parent")
        if not parent.isdigit() or int(parent) == e.pid:
            return 0
        self.flows += 1
        tid = int(parent)
        _, src = self.instant(e.ts, tid, self.comm_of_tid.get(tid, "<...>"),
                              f"start thread {_field(text, 'name')}")
        src.flow_ids.append(self.flows)
        return self.flows

    def annotate(self, p, te, name: str, value) -> None:
        """A debug annotation: an int, a bool, a string, or (name, value) pairs (a
        dictionary, as args are)."""
        a = te.debug_annotations.add()
        a.name_iid = self.ann_iid(p, name)
        self.set_value(p, a, value)

    def annotate_interned(self, p, te, name: str, value: str) -> None:
        """A string annotation whose value repeats (a caller's name): interned."""
        a = te.debug_annotations.add()
        a.name_iid = self.ann_iid(p, name)
        a.string_value_iid = self.value_iid(p, value)

    def set_value(self, p, a, value) -> None:
        if isinstance(value, bool):
            a.bool_value = value
        elif isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
            a.int_value = value
        elif isinstance(value, list):
            for k, v in value:
                d = a.dict_entries.add()
                d.name_iid = self.ann_iid(p, k)
                self.set_value(p, d, v)
        else:
            a.string_value = _utf8(str(value))

    # -- tracks --------------------------------------------------------------------

    def start(self, first_ts: int | None) -> None:
        """The sequence's first packets: the clock, the defaults, the process and the
        threads the file lists."""
        pb, src = self.pb, self.source
        p = self.packet()
        p.first_packet_on_sequence = True
        p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        if self.clock_id is not None:
            # Before any timestamp: the trace's time is this clock's (nothing is
            # converted), and the sequence's timestamps are deltas on a clock of its
            # own that reads the same (the Perfetto SDK's incremental timestamps).
            t0 = self.ts(first_ts or 0)
            p.trace_packet_defaults.timestamp_clock_id = INCREMENTAL_CLOCK
            snap = p.clock_snapshot
            snap.primary_trace_clock = self.clock_id
            snap.clocks.add(clock_id=self.clock_id, timestamp=t0)
            snap.clocks.add(clock_id=INCREMENTAL_CLOCK, timestamp=t0, is_incremental=True)
            self.last_ts = t0
        # (a packet with a clock snapshot carries nothing else the reader would read)
        p = self.packet()
        # a process track per process (a trace that followed several), its threads
        # under it
        self.proc_uuid: dict[int, int] = {}
        procs = getattr(src, "processes", None) or [{"pid": src.pid,
                                                     "argv": src.header.get("argv")}]
        for i, pr in enumerate(procs):
            pid = int(pr.get("pid") or 0)
            if pid in self.proc_uuid:
                continue
            if i:
                p = self.packet()
            uuid = self.proc_uuid[pid] = PROCESS_UUID + (i << 24)
            td = p.track_descriptor
            td.uuid = uuid
            proc = td.process
            proc.pid = pid
            argv = [str(a) for a in (pr.get("argv") or [])]
            if argv:
                proc.cmdline.extend(_utf8(a) for a in argv)
                proc.process_name = _utf8(os.path.basename(argv[0]) or argv[0])
        of = getattr(src, "process_of", lambda cpu: src.pid)
        self.pid_of_tid = {tid: of(cpu) for cpu, (tid, _) in src.threads.items()}
        self.comm_of_tid = {tid: comm for tid, comm in src.threads.values()}
        self.forks()
        for cpu in sorted(src.threads):
            tid, name = src.threads[cpu]
            self.track(tid, name)

    def track(self, tid: int, name: str) -> int:
        """The uuid of a thread's track, its descriptor written when first met."""
        uuid = self.tracks.get(tid)
        if uuid is None:
            uuid = self.tracks[tid] = len(self.tracks) + PROCESS_UUID + 1
            p = self.packet()
            td = p.track_descriptor
            td.uuid = uuid
            pid = self.pid_of_tid.get(tid, self.source.pid)
            td.parent_uuid = self.proc_uuid.get(pid, PROCESS_UUID)
            th = td.thread
            th.pid = pid
            th.tid = tid
            th.thread_name = _utf8(name)
        return uuid

    # -- events --------------------------------------------------------------------

    def task_track(self, tid: int, comm: str, task: tuple[str, str]) -> int:
        """The uuid of a Task's track (``task``: its name and id), its descriptor written
        when first met: an async track of the process, so that the steps a Task runs on
        several threads line up on it."""
        pid = self.pid_of_tid.get(tid, self.source.pid)
        key = (pid, *task)
        uuid = self.task_uuids.get(key)
        if uuid is None:
            self.track(tid, comm)
            uuid = self.task_uuids[key] = TASK_UUID + len(self.task_uuids)
            p = self.packet()
            td = p.track_descriptor
            td.uuid = uuid
            td.parent_uuid = self.proc_uuid.get(pid, PROCESS_UUID)
            td.name = _utf8(f"task {task[0]}")
        return uuid

    def event(self, typ: int, ts: int, tid: int, comm: str, task: tuple[str, str] | None = None,
              uuid: int | None = None):
        """A track event on a thread's track (its Task's, given one; track ``uuid``,
        given one): (packet, track_event)."""
        if uuid is None:
            uuid = self.track(tid, comm) if task is None else self.task_track(tid, comm, task)
        ts = self.ts(ts)
        last = self.last_ts
        if last is None:
            # no clock: the trace's own time, absolute
            p = self.packet(timestamp=ts, track_event={"type": typ, "track_uuid": uuid})
        elif ts >= last:
            p = self.packet(timestamp=ts - last, track_event={"type": typ, "track_uuid": uuid})
            self.last_ts = ts
        else:
            # Earlier than the packet before (the begin of a call whose entry was
            # lost): absolute, on the trace's clock; the deltas go on from ``last``.
            p = self.packet(timestamp=ts, timestamp_clock_id=self.clock_id,
                            track_event={"type": typ, "track_uuid": uuid})
        return p, p.track_event

    def begin(self, ts: int, tid: int, comm: str, func: str, args,
              entry_lost: bool = False, cpu: int | None = None) -> None:
        # (cpu None, no slot known: no Task, as the dict holds no None key)
        p, te = self.event(self.BEGIN, ts, tid, comm,
                           self.task_of_cpu.get(cpu))  # type: ignore[arg-type]
        te.name_iid = self.name_iid(p, func)
        if self.flow_into and tid in self.flow_into:
            self.flow_end(te, tid)
        if args:
            self.annotate(p, te, "args", args)
        if entry_lost:
            self.annotate(p, te, "entry_lost", True)

    def end(self, c: Call) -> None:
        """A call's end (and its begin too when its entry was not in the trace)."""
        if not c.entry_seen:
            self.begin(c.start, c.pid, c.comm, c.func, c.args, entry_lost=True, cpu=c.cpu)
        p, te = self.event(self.END, c.end, c.pid, c.comm, self.task_of_cpu.get(c.cpu))
        if c.has_retval:
            self.annotate(p, te, "retval", c.retval)
        if not c.complete:
            self.annotate(p, te, "unfinished", True)

    def instant(self, ts: int, tid: int, comm: str, name: str):
        p, te = self.event(self.INSTANT, ts, tid, comm)
        te.name_iid = self.name_iid(p, name)
        if self.flow_into and tid in self.flow_into:
            self.flow_end(te, tid)
        return p, te

    # -- flows: os.fork -> the child's first event ----------------------------------------

    def forks(self) -> None:
        """The forked children of a trace that followed them (each file's header: its
        parent and the parent's thread that forked, the time it began): a flow into
        each child's first event, from an instant on that thread when it forked."""
        files = getattr(getattr(self.source, "tf", None), "files", None) or ()
        for f in files:
            h = f.header
            tid, pid, at = h.get("parent_tid"), h.get("pid"), h.get("start_mono")
            if h.get("follow") != "fork" or not tid or not pid or at is None:
                continue
            self.flows += 1
            # (a forked child's main thread is the one that forked: its id is the pid)
            self.flow_into[int(pid)] = self.flows
            self.fork_from[self.flows] = (int(at), int(tid), int(pid))

    def flow_end(self, te, tid: int) -> None:
        flow = self.flow_into.pop(tid)
        te.terminating_flow_ids.append(flow)
        self.flows_ended.append(flow)

    def fork_flows(self) -> None:
        """The fork flows' starts, of the flows a child's event ended (written last:
        the reader sorts events by time)."""
        for flow in self.flows_ended:
            if flow in self.fork_from:
                at, tid, pid = self.fork_from[flow]
                _, te = self.instant(at, tid, self.comm_of_tid.get(tid, "<...>"),
                                     f"fork {pid}")
                te.flow_ids.append(flow)

    def handoff(self, e, te) -> None:
        """A hand-off event's flow: started at a Task's creation or a submit, ended at
        the Task's first switch to it or the worker's run with the same id."""
        func = e.func
        kind = HANDOFF_FROM.get(func)
        start = kind is not None
        if kind is None:
            kind = HANDOFF_TO.get(func)
            if kind is None or not self.handoffs:
                return
        hid = _field(e.text or "", "id")
        if hid == "?":
            return
        key = (kind, self.pid_of_tid.get(e.pid, self.source.pid), hid)
        if start:
            self.flows += 1
            self.handoffs[key] = self.flows
            te.flow_ids.append(self.flows)
        else:
            flow = self.handoffs.pop(key, 0)
            if flow:
                te.terminating_flow_ids.append(flow)

    def lost(self, lost: int, ts: int, tid: int, comm: str) -> None:
        self.losses.append((ts, tid, lost))
        if lost == LOST_EVENTS_UNKNOWN:
            self.unknown_loss = True
        else:
            self.lost_total += lost
        p, te = self.instant(ts, tid, comm, LOST_NAME)
        self.annotate(p, te, "lost", "unknown" if lost == LOST_EVENTS_UNKNOWN else lost)

    def loss_counters(self) -> None:
        """A counter track "events lost" per process that lost any: the events lost
        so far, one step at each loss (a loss of unknown size is a step of 0; the
        notes say "or more").  Written last, by both walks, with timestamps on the
        trace's own clock: the incremental one's deltas are the walk's."""
        per_pid: dict[int, list[tuple[int, int]]] = {}
        for ts, tid, lost in self.losses:
            pid = self.pid_of_tid.get(tid, self.source.pid)
            per_pid.setdefault(pid, []).append(
                (ts, 0 if lost == LOST_EVENTS_UNKNOWN else lost))
        for pid, steps in sorted(per_pid.items()):
            key = f"{LOST_COUNTER} ({pid})"
            uuid = self.counter_track(LOST_COUNTER, self.proc_uuid.get(pid, PROCESS_UUID))
            self.counters[key] = [uuid, 0]
            total = 0
            for ts, n in sorted(steps, key=lambda s: s[0]):
                total += n
                self.counter_at(uuid, ts, total)

    def fill_counters(self) -> None:
        """A counter track "buffer fill (%)" per process whose file has the writer's
        backlog (tracefile/sink.py): the bytes handed over by the ring buffers and not
        yet written, as a share of what the writer holds before the program waits for
        it.  Its samples are CLOCK_MONOTONIC readings: drawn on a trace of that clock."""
        clock = CLOCKS.get(self.source.trace_clock, CLOCKS["local"])
        if clock is None or clock != CLOCKS["local"]:
            return
        tf = getattr(self.source, "tf", None)
        for f in getattr(tf, "files", None) or ([tf] if tf is not None else []):
            backlog = (getattr(f, "stats", None) or {}).get("backlog") or {}
            limit, samples = backlog.get("limit"), backlog.get("samples")
            if not isinstance(limit, int) or limit <= 0 or not isinstance(samples, list):
                continue
            pid = int((f.header or {}).get("pid") or self.source.pid or 0)
            uuid = self.counter_track(FILL_COUNTER, self.proc_uuid.get(pid, PROCESS_UUID),
                                      unit="%")
            self.counters[f"{FILL_COUNTER} ({pid})"] = [uuid, 0]
            for sample in samples:
                if (isinstance(sample, list) and len(sample) == 2
                        and all(isinstance(v, int) for v in sample)):
                    self.counter_at(uuid, sample[0], round(100 * sample[1] / limit, 3),
                                    double=True)

    # -- the stream ----------------------------------------------------------------

    def run(self) -> dict | None:
        entries = iter(self.source.entries())
        first = next(entries, None)
        first_ts = None if first is None or isinstance(first, LostEvents) else first.ts
        self.start(first_ts)
        if self._native_calls(first_ts):
            return self.notes()
        calls = CallBuilder()
        feed = calls.feed
        # LostEvents come before the next entry of their thread slot: shown there
        lost_pending: dict[int, int] = {}
        tid_of_cpu = {cpu: t[0] for cpu, t in self.source.threads.items()}
        last_ts: dict[int, int] = {}
        for e in itertools.chain((first,), entries) if first is not None else ():
            if isinstance(e, LostEvents):
                for c in feed(e):           # what was open there ends before the gap
                    self.end(c)
                had = lost_pending.get(e.cpu, 0)
                lost_pending[e.cpu] = (LOST_EVENTS_UNKNOWN
                                       if LOST_EVENTS_UNKNOWN in (had, e.lost)
                                       else had + e.lost)
                continue
            cpu = e.cpu
            tid_of_cpu[cpu] = e.pid
            last_ts[cpu] = e.ts
            if lost_pending and cpu in lost_pending:
                self.lost(lost_pending.pop(cpu), e.ts, e.pid, e.comm)
            typ = e.type
            if typ == TRACE_GRAPH_ENT or typ == TRACE_GRAPH_RET:
                for c in feed(e):
                    self.end(c)
                if typ == TRACE_GRAPH_ENT:
                    self.begin(e.ts, e.pid, e.comm, e.func, e.args, cpu=cpu)
            elif typ == TRACE_FN:
                p, te = self.instant(e.ts, e.pid, e.comm, e.func)
                if e.parent:
                    self.annotate_interned(p, te, "parent", e.parent)
                if e.args:
                    self.annotate(p, te, "args", e.args)
            elif typ == TRACE_EVENT:
                if self.task_tracks and e.func == TASK_EVENT:
                    name = task_of_text(e.text or "")
                    self.task_of_cpu[cpu] = None if name is None else \
                        (name, _field(e.text or "", "id"))
                # (a flow's start first: the reader meets it before its end)
                flow = self.thread_flow(e) if e.func == THREAD_EVENT else 0
                p, te = self.instant(e.ts, e.pid, e.comm, e.func)
                self.annotate(p, te, "fields", e.text)
                if flow:
                    te.terminating_flow_ids.append(flow)
                self.handoff(e, te)
                if e.func == GC_EVENT:
                    gen = _field(e.text or "", "generation")
                    self.count(f"gc collections (generation {gen})", e.ts, 1)
            elif typ == TRACE_PRINT:
                # The text is the name: what the writer wants seen.  Not interned:
                # markers are as many as the program writes.
                p, te = self.event(self.INSTANT, e.ts, e.pid, e.comm)
                te.name = _utf8(e.text.rstrip("\n")) or MARKER_NAME
                if e.func:
                    self.annotate_interned(p, te, "writer", e.func)
            elif typ == TRACE_STACK:
                p, te = self.instant(e.ts, e.pid, e.comm, STACK_NAME)
                te.callstack_iid = self.callstack_iid(
                    p, e.text.split("\n") if e.text else [])
        for c in calls.finish():
            self.end(c)
        for cpu, lost in sorted(lost_pending.items()):
            tid = tid_of_cpu.get(cpu, 0)
            comm = self.source.threads.get(cpu, (tid, "<...>"))[1]
            self.lost(lost, last_ts.get(cpu, first_ts or 0), tid, comm)
        self.fork_flows()
        self.loss_counters()
        self.fill_counters()
        self.flush()
        return self.notes()

    def notes(self) -> dict | None:
        notes = []
        if self.lost_total or self.unknown_loss:
            n = f"{self.lost_total}" + (" or more" if self.unknown_loss else "")
            notes.append(f"{n} events were lost while recording: marked as "
                         f"'{LOST_NAME}' instants on their threads")
        if self.clock_id is None:
            notes.append(f"trace_clock {self.source.trace_clock} counts events, not "
                         "time: Perfetto shows each count as 1 ns")
        return {"notes": notes} if notes else None

    def _native_calls(self, first_ts: int | None) -> bool:
        """The loop above for a trace of calls (graph entries and returns, with their
        arguments and return values as text or 64-bit ints), function tracer hits,
        markers and events after start(), made natively (_native_read.c's
        PerfettoCalls) and written out; False, with nothing written, when there is no
        native twin or the trace holds more than that (stack traces, values kept as
        JSON, a thread the header does not name), the clock is scaled (uptime) or calls
        go on their Tasks' tracks: the loop above writes it."""
        from .. import _env
        from .walk import calls_only, canon_ids, drive
        native = _env.native()
        src = self.source
        if native is None or self.task_tracks or self.scale != 1:
            return False
        # the gc counter tracks and the flows (threads, forks, hand-offs) are the loop's
        if self.flow_into or _any_enabled((src.header or {}).get("events") or (),
                                          LOOP_EVENTS):
            return False
        slots = calls_only(src, native.calls_hits_ok, True)
        if slots is None or not slots.issubset(src.threads):
            return False
        nslots = max(slots | set(src.threads), default=-1) + 1
        # (a slot the header does not list has no record: any track)
        uuids = {slot: self.tracks[src.threads[slot][0]] if slot in src.threads
                 else PROCESS_UUID for slot in range(nslots)}
        syms = src.symbols
        names = {ip: _utf8(sym[0]) for ip, sym in syms.items()}
        if any(names[ip] != sym[0] for ip, sym in syms.items() if not sym[0].isascii()):
            # a name with a lone surrogate: written '?' as an event name, but as its
            # bytes as a hit's interned "parent" value (value_iid): the loop above
            return False
        # an event named as a function shares its name's iid (name_iid keys by name)
        cid_of_name: dict[bytes, int] = {}
        for ip, name in names.items():
            cid_of_name.setdefault(name.encode("utf-8"), ip)
        calls = native.PerfettoCalls(
            nslots, names, canon_ids(syms), uuids,
            None if self.last_ts is None else self.clock_id, self.last_ts or 0,
            first_ts or 0, LOST_EVENTS_UNKNOWN, True, cid_of_name)
        self.flush()            # the first packets, made by the protobuf runtime
        write = self.out.write
        for data in drive(calls, src, nslots, payloads=True):
            write(data)
        self.lost_total, self.unknown_loss = calls.counts()
        self.losses = [(ts, src.threads.get(slot, (0,))[0], lost)
                       for ts, slot, lost in calls.losses()]
        self.loss_counters()
        self.fill_counters()
        self.flush()
        return True


class PerfettoExporter(Exporter):
    name = "perfetto"
    summary = "Perfetto trace (protobuf): open in ui.perfetto.dev"
    binary = True
    suffix = ".perfetto-trace"
    extra = "perfetto"
    requires = ("perfetto",)
    options: Mapping[str, object] = {"task_tracks": False}

    def write(self, source, out, options: Mapping[str, object]) -> dict | None:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder
        return _Writer(source, out, pb, TraceProtoBuilder,
                       bool(options.get("task_tracks"))).run()


register_exporter(PerfettoExporter())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
