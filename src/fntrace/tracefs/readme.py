"""The README file of the top level: the kernel's mini-HOWTO (trace.c readme_msg), with
the files and words this tracefs has."""
from __future__ import annotations

__all__ = ["README"]

README = """\
tracing mini-HOWTO (fntrace: ftrace for Python programs):

# echo 0 > tracing_on : quick way to disable tracing
# echo 1 > tracing_on : quick way to re-enable tracing

 Important files:
  trace\t\t\t- The static contents of the buffer
\t\t\t  To clear the buffer write into this file: echo > trace
  trace_pipe\t\t- A consuming read to see the contents of the buffer
  current_tracer\t- function and latency tracers
  available_tracers\t- list of configured tracers for current_tracer
  error_log\t- error log for failed commands (that support it)
  buffer_size_kb\t- view and modify size of per thread buffer
  buffer_total_size_kb  - view total size of all thread buffers

  trace_clock\t\t- change the clock used to order events
       local:   Per cpu clock but may not be synced across CPUs
      global:   Synced across CPUs but slows tracing down.
     counter:   Not a clock, but just an increment
      uptime:   Jiffy counter from time of boot
        perf:   Same clock that perf events use
        mono:   Monotonic clock (CLOCK_MONOTONIC)
    mono_raw:   Monotonic clock not adjusted by NTP (CLOCK_MONOTONIC_RAW)
        boot:   Monotonic clock that counts suspend too (CLOCK_BOOTTIME)
\t\t\t  (in one process local, global, perf and mono are one clock)
\t\t\t  Setting a clock clears the buffers and the snapshot

  trace_marker\t\t- Writes into this file writes into the trace buffer
  tracing_cpumask\t- Limit which threads to trace (by thread index, the CPU column)
  instances\t\t- Make sub-buffers with: mkdir instances/foo
\t\t\t  Remove sub-buffer with rmdir
  trace_options\t\t- Set format or modify how tracing happens
\t\t\t  Disable an option by prefixing 'no' to the
\t\t\t  option name
  saved_cmdlines\t- the thread id and name of every thread seen: "<tid> <comm>"
  saved_cmdlines_size\t- echo command number in here to store comm-pid list
  per_thread/<tid>/\t- one thread's buffer (the kernel's per_cpu/cpuN/):
      trace\t\t- like trace, that thread's events only
      trace_pipe\t- like trace_pipe, that thread's events only
      stats\t\t- entries, overrun, bytes, timestamps, dropped and read events
      buffer_size_kb\t- that thread's buffer size (buffer_size_kb then reads X)

  available_filter_functions - list of functions that can be filtered on
  available_filter_functions_addrs - list of functions that can be filtered on, with
\t\t\t  the id fntrace gives each (in place of an address)
  dyn_ftrace_total_info\t- how many functions are known (records)
  set_ftrace_filter\t- echo function name in here to only trace these
\t\t\t  functions
\t     accepts: func_full_name or glob-matching-pattern
\t     modules: Can select a group via module
\t      Format: :mod:<module-name>
\t     example: echo :mod:json > set_ftrace_filter
\t    triggers: a command to perform when function is hit
\t      Format: <function>:<trigger>[:count]
\t     trigger: traceon, traceoff
\t\t      enable_event:<system>:<event>
\t\t      disable_event:<system>:<event>
\t\t      stacktrace
\t\t      snapshot
\t\t      dump
\t\t      cpudump
\t     example: echo json.loads:traceoff > set_ftrace_filter
\t              echo json.dumps:traceoff:3 > set_ftrace_filter
\t     The first one will disable tracing every time json.loads is hit
\t     The second will disable tracing at most 3 times when json.dumps is hit
\t       The first time json.dumps is hit and it disables tracing, the
\t       counter will decrement to 2. If tracing is already disabled,
\t       the counter will not decrement. It only decrements when the
\t       trigger did work
\t     To remove trigger without count:
\t       echo '!<function>:<trigger> > set_ftrace_filter
\t     To remove trigger with a count:
\t       echo '!<function>:<trigger>:0 > set_ftrace_filter
\t\t    To remove a function: echo '!<function>' >> set_ftrace_filter
  set_ftrace_notrace\t- echo function name in here to never trace.
\t    accepts: func_full_name, *func_end, func_begin*, *func_middle*
\t    modules: Can select a group via module command :mod:
\t    Does not accept triggers
  set_ftrace_pid\t- Write pid(s) to only function trace those pids
\t\t    (function)
\t\t    (here: native thread ids; options/function-fork adds new threads)
  set_ftrace_notrace_pid\t- Write pid(s) to not function trace those pids
\t\t    (function)
  set_event_pid\t\t- Write pid(s) to only trace events of those pids
\t\t    (options/event-fork adds new threads)
  set_event_notrace_pid\t- Write pid(s) to not trace events of those pids
  set_ftrace_comm\t- thread-name globs, one a line: those threads are traced as if
\t\t\t  their ids were in set_ftrace_pid (not in the kernel)
  set_event_comm\t- the same for events (set_event_pid)
  enabled_functions\t- list of functions with a callback attached
  touched_functions\t- list of functions that ever had a callback attached
  function_profile_enabled - echo 1 to start the function profiler, 0 to stop it
  trace_stat/function<N>\t- the profile of thread N: Function, Hit, Time, Avg, s^2
  set_graph_function\t- Trace the nested calls of a function (function_graph)
  set_graph_notrace\t- Do not trace the nested calls of a function (function_graph)
  max_graph_depth\t- Trace a limited depth of nested calls (0 is unlimited)
  tracing_thresh\t- function_graph: only returns that took longer (usecs)

  snapshot\t\t- Like 'trace' but shows the content of the static
\t\t\t  snapshot buffer. Read the contents for more
\t\t\t  information
  stack_trace\t\t- Shows the max stack trace when active
  stack_max_size\t- Shows current max stack size that was traced
\t\t\t  Write into this file to reset the max size (trigger a
\t\t\t  new trace)
  stack_trace_filter\t- Like set_ftrace_filter but limits what stack_trace
\t\t\t  traces
  dynamic_events\t\t- Create/append/remove/show the generic dynamic events
\t\t\t  Write into this file to define/undefine new trace events.
\t  Format: f[:[<group>/][<event>]] <func-name>[%return] [<args>]
\t\t    args: <name>=fetcharg[:type]
\t\tfetcharg: <argname>[->field[->field|.field...]], $arg<N>, $arg*, $comm,
\t\t\t  $retval, $stack<index>, $stack, \\imm-value, \\"imm-string"
\t\t\t  (<argname> a parameter by name: the signature is the BTF)
\t\t    type: s8/16/32/64, u8/16/32/64, x8/16/32/64, char, string, symbol,
\t\t\t  bool, repr, len, b<bit-width>@<bit-offset>/<container-size>
\t\t  p[:[<group>/][<event>]] <func-name>[+<lines>]|<file>:<line> [<args>]
\t\t\t  (a line probe; <args> may name local variables)
\t\t  r[:[<group>/][<event>]] <func-name> [<args>] (a return probe)
\t\t  e[:[<egroup>/][<eevent>]] <system>.<event> [<args>] [if <filter>] (an event probe;
\t\t\t  args: $<field>, $comm, \\imm-value)
\t\t  s:[synthetic/]<event> <field>[;field] (a synthetic event)
  synthetic_events\t- Create/append/remove/show synthetic events
\t\t\t  Write into this file to define/undefine new synthetic events.
\t\t\t  example: echo 'myevent u64 lat; char name[]' >> synthetic_events
\t\t\t  (a field may also be long[], a stack trace)
  kprobe_events\t\t- Create/append/remove/show the p: and r: probes
  kprobe_profile\t- each p:/r: probe's hits and misses
  available_events\t- list of the events that can be enabled
  set_event\t\t- enables events by name written into it
\t\t\t  Format: [<system>:]<event> ('!' in front disables it)

  events/\t\t- Directory containing all trace event subsystems:
      enable\t\t- Write 0/1 to enable/disable tracing of all events
  events/<system>/\t- Directory containing all trace events for <system>:
      enable\t\t- Write 0/1 to enable/disable tracing of all <system>
\t\t\t  events
  events/<system>/<event>/\t- Directory containing control files for
\t\t\t  <event>:
      enable\t\t- Write 0/1 to enable/disable tracing of <event>
      filter\t\t- If set, only events passing filter are traced
      trigger\t\t- If set, a command to perform when event is hit
\t    Format: <trigger>[:count][if <filter>]
\t   trigger: traceon, traceoff
\t            enable_event:<system>:<event>
\t            disable_event:<system>:<event>
\t            enable_hist:<system>:<event>
\t            disable_hist:<system>:<event>
\t\t    stacktrace
\t\t    snapshot
\t\t    hist (see below)
\t   To remove a trigger without a count:
\t     echo '!<trigger> > <system>/<event>/trigger
\t   To remove a trigger with a count:
\t     echo '!<trigger>:0 > <system>/<event>/trigger
\t   Filters can be ignored when removing a trigger.
      hist trigger\t- If set, event hits are aggregated into a hash table
\t    Format: hist:keys=<field1[,field2,...]>
\t            [:<var1>=<field|var_ref|numeric_literal>[,<var2>=...]]
\t            [:values=<field1[,field2,...]>]
\t            [:sort=<field1[,field2,...]>]
\t            [:size=#entries]
\t            [:pause][:continue][:clear]
\t            [:name=histname1]
\t            [:nohitcount]
\t            [:<handler>.<action>]
\t            [if <filter>]
\t    The available handlers are:
\t        onmatch(matching.event)  - invoke on addition or update
\t        onmax(var)               - invoke if var exceeds current max
\t        onchange(var)            - invoke action if var changes
\t    The available actions are:
\t        trace(<synthetic_event>,param list)  - generate synthetic event
\t        save(field,...)                      - save current event fields
\t        snapshot()                           - snapshot the trace buffer
  stack_tracer_enabled\t- 1 to measure stacks (sizes in bytes of the Python
\t\t\t  frames on the thread's data stack), 0 to stop
"""
