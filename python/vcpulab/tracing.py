"""Kernel traces of real runs, as polars frames (the Rust side is
``src/kvm/trace/``; docs/tracing.md describes events, frames and costs;
the tracepoints and perf interface are [K8] of docs/sources.md).

[`Trace`][vcpulab.tracing.Trace] records the scheduler and KVM tracepoints of some host CPUs
(``perf_event_open``, one ring buffer per CPU) and turns them into the frames
a [`Run`][vcpulab.experiment.Run] carries when ``run(..., trace=True)``:

* ``trace``: one row per interval a task ran on a traced CPU —
  ``pcpu, start_ns, end_ns, vm, vcpu, tid, comm`` (``vm = vcpu = -1`` for
  tasks that are not the run's vCPU threads; the idle task is no row), the
  columns of the simulator's ``Result.trace`` plus ``tid`` and ``comm``, so
  [`vcpulab.plot.sched_map`][] draws both;
* ``wakeups``: ``vm, vcpu, tid, wake_ns, run_ns, latency_ns`` — from each
  ``sched_wakeup`` of a sleeping vCPU thread to its next ``sched_switch`` in;
* ``exits``: ``vm, vcpu, reason, exit_ns, entry_ns, handling_ns`` — each
  ``kvm_exit`` of a vCPU thread (reason named by the kernel's own print
  format) and its next ``kvm_entry`` (null when the window ended first);
* ``halts``: ``vm, vcpu, time_ns, polled, ns, valid, window_ns`` — each
  ``kvm_vcpu_wakeup`` (the end of a halt: ``ns`` is the halt's length,
  polling included; ``polled`` when it ended in the poll loop), and the
  vCPU's halt-poll window after it from the last ``kvm_halt_poll_ns`` (null
  before the first). The window is the kernel's traced value:
  ``grow_halt_poll_ns`` can set it above the VM's maximum, which
  ``kvm_vcpu_halt`` clamps at the start of the next halt without a trace
  event (virt/kvm/kvm_main.c).

Times are ns from the run's start. Memory is bounded (``max_events``, and the
kernel's ring buffers); ``info["truncated"]`` says when events are missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from vcpulab import _core, _mounts
from vcpulab._checks import PCPUS_RENAMED, renamed_since

if TYPE_CHECKING:
    from vcpulab.kvm import Vcpu

__all__ = [
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_MAX_EVENTS",
    "EVENTS",
    "EXITS_SCHEMA",
    "HALTS_SCHEMA",
    "PID_MAX",
    "RUN_LOOP_REPLACES",
    "TRACE_SCHEMA",
    "Trace",
    "TraceFrames",
    "TraceTruncatedWarning",
    "WAKEUPS_SCHEMA",
    "other_busy_ns",
]

#: events a trace keeps unless told (about 40 bytes each); more are counted as dropped
DEFAULT_MAX_EVENTS: int = _core.TRACE_DEFAULT_MAX_EVENTS
#: the largest pid Linux hands out (PID_MAX_LIMIT on 64-bit, include/linux/threads.h)
PID_MAX = 4_194_304
#: the kernel ring buffer of each traced CPU unless told, bytes
DEFAULT_BUFFER_BYTES: int = _core.TRACE_DEFAULT_BUFFER_BYTES
#: the tracepoints recorded (optional ones are skipped where the kernel lacks them)
EVENTS: tuple[str, ...] = tuple(_core.TRACE_EVENTS)
#: the tracepoints a trace with ``vcpus=`` does not record: those vCPUs' run loop times their exits
RUN_LOOP_REPLACES: tuple[str, ...] = tuple(_core.TRACE_RUN_LOOP_REPLACES)

#: columns of ``Run.trace``: one row per interval a task ran on a traced CPU (vm = vcpu = -1: not a vCPU)
TRACE_SCHEMA = {
    "pcpu": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "vm": pl.Int64,
    "vcpu": pl.Int64,
    "tid": pl.Int64,
    "comm": pl.Utf8,
}
#: columns of ``Run.wakeups``: one row per wake-up of a vCPU thread and when it then ran
WAKEUPS_SCHEMA = {
    "vm": pl.Int64,
    "vcpu": pl.Int64,
    "tid": pl.Int64,
    "wake_ns": pl.Int64,
    "run_ns": pl.Int64,
    "latency_ns": pl.Int64,
}
#: columns of ``Run.exits``: one row per KVM exit of a vCPU thread, its reason and handling time
EXITS_SCHEMA = {
    "vm": pl.Int64,
    "vcpu": pl.Int64,
    "reason": pl.Utf8,
    "exit_ns": pl.Int64,
    "entry_ns": pl.Int64,
    "handling_ns": pl.Int64,
}
#: columns of ``Run.halts``: one row per halt of a vCPU (polled or blocked, and for how long)
HALTS_SCHEMA = {
    "vm": pl.Int64,
    "vcpu": pl.Int64,
    "time_ns": pl.Int64,
    "polled": pl.Boolean,
    "ns": pl.Int64,
    "valid": pl.Boolean,
    "window_ns": pl.Int64,
}


def _null(c: str) -> pl.Expr:
    return pl.when(pl.col(c) == _core.TRACE_NULL).then(None).otherwise(pl.col(c)).alias(c)


def _df(cols: dict[str, Any], schema: dict[str, Any]) -> pl.DataFrame:
    data = {k: (cols[k] if isinstance(cols[k], list) else np.asarray(cols[k])) for k in cols}
    return pl.DataFrame(data, schema={k: schema[k] for k in cols})


@dataclass
class TraceFrames:
    """The four frames of one traced window and what the trace recorded."""

    trace: pl.DataFrame
    wakeups: pl.DataFrame
    exits: pl.DataFrame
    halts: pl.DataFrame
    #: events, lost (kernel buffer full), dropped (max_events reached), malformed
    #: (records the format files do not describe), truncated (any of the three),
    #: first_dropped_ns, complete_until_ns (where the frames end, ns from the
    #: window's start: earlier than the window's end when the cap was reached),
    #: counts per tracepoint, cpus, exits_source, inferred_switch_ins (switches onto
    #: a traced CPU the kernel wrote no record of, inferred from the task's next record)
    info: dict[str, Any] = field(default_factory=dict)

    def describe_truncation(self) -> str | None:
        """One sentence on what is missing from a truncated trace, or None."""
        i = self.info
        if not i.get("truncated"):
            return None
        parts = []
        if i.get("dropped"):
            parts.append(
                f"{i['dropped']} events past the cap were dropped, so the frames end at "
                f"{i['complete_until_ns'] / 1e6:.1f} ms"
            )
        if i.get("lost"):
            parts.append(f"the kernel lost {i['lost']} records (its ring buffer was full): the frames have gaps")
        if i.get("malformed"):
            parts.append(f"{i['malformed']} records did not match their format files and were not decoded")
        return "; ".join(parts)


class TraceTruncatedWarning(UserWarning):
    """A traced run's trace misses events (``Run.trace_info["truncated"]``):
    its frames are incomplete, and ``Run.quality`` was measured without it."""


class Trace:
    """Records the tracepoints of ``pcpus`` until [`stop`][vcpulab.tracing.Trace.stop] (or [`close`][vcpulab.tracing.Trace.close]).

    Args:
        pcpus: host CPUs whose scheduler and KVM events are recorded (wake-ups
            aimed at them are recorded on every CPU; ``cpus=`` before
            2026-12-01, still accepted with a DeprecationWarning).
        max_events: cap on events kept (about 40 bytes each); more are counted
            as dropped and the trace is flagged truncated.
        buffer_bytes: kernel ring buffer per CPU.
        kvm_pid: keep KVM events only of this process's threads (default: this process).
        kvm_events: record the KVM tracepoints (exits, halts, halt-poll
            windows, MSIs, IPIs). False records only ``sched_switch`` and
            ``sched_wakeup``: the slices and wake-ups a sched map needs, with
            ``exits`` and ``halts`` empty and ``info["exits_source"] ==
            "none"``, and none of the two records per exit that the KVM
            events cost (docs/tracing.md, "Costs and bounds").
        vcpus: vCPUs of this process ([`Vcpu`][vcpulab.kvm.Vcpu]) whose exits
            to user space their own run loop times: two clock reads per
            ``KVM_RUN``, instead of the two kernel records per exit
            (``kvm_userspace_exit``, ``kvm_fpu``), which are then not recorded
            for any thread. Where the kernel emits no ``kvm_exit`` (this
            project's host) the exits' rows are then the run loop's
            (``info["exits_source"] == "run_loop"``); where it does, ``kvm_exit``
            stays their source. ``run(..., trace=True)`` passes its vCPUs.
            A vCPU times its exits into the latest trace that asked, until
            that trace stops; one running in another thread is taken when its
            current ``run`` call returns (the constructor waits for it).

    Raises ValueError for a CPU that is not online, ``TraceUnavailableError``
    where tracefs cannot be had. As root, tracefs is mounted at
    /sys/kernel/tracing where missing (by mount(2); it stays mounted and the
    ``vcpulab`` logger says so once: ``vcpulab._mounts``).
    """

    @renamed_since(PCPUS_RENAMED, "one name for host CPU lists everywhere", name="Trace", cpus="pcpus")
    def __init__(
        self,
        pcpus: Iterable[int],
        max_events: int = DEFAULT_MAX_EVENTS,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        kvm_pid: int | None = None,
        kvm_events: bool = True,
        vcpus: Iterable[Vcpu] | None = None,
    ) -> None:
        import os

        from vcpulab._checks import check_bool, check_int, check_seq
        from vcpulab.kvm import Vcpu

        cpus = check_seq("pcpus", pcpus, "host CPU ids", min_len=1)
        for c in cpus:
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
                raise ValueError(f"pcpus must be host CPU ids >= 0, got {c!r}")
            check_int("pcpus entry", c, 0, 2**32 - 1)  # a u32; the core says which are not online
        check_int("max_events", max_events, 1, 1 << 32)
        check_int("buffer_bytes", buffer_bytes, 4096, 1 << 30)
        if kvm_pid is not None:
            check_int("kvm_pid", kvm_pid, 1, PID_MAX)
        check_bool("kvm_events", kvm_events)
        own: list[_core.Vcpu] | None = None
        if vcpus is not None:
            own = []
            for v in vcpus:
                if not isinstance(v, Vcpu):
                    raise TypeError(f"vcpus must be vcpulab.kvm.Vcpu objects, got {type(v).__name__}")
                own.append(v._vcpu)
        try:
            self._t = _core.Tracer(
                [int(c) for c in cpus],
                int(max_events),
                int(buffer_bytes),
                os.getpid() if kvm_pid is None else int(kvm_pid),
                bool(kvm_events),
                own,
            )
        finally:
            _mounts.announce()  # a Tracer mounts tracefs where it is missing (root); said once
        self.info: dict[str, Any] | None = None

    def stop(self) -> dict[str, Any]:
        """Stops recording (idempotent); returns `info`."""
        self.info = dict(self._t.stop())
        return self.info

    def close(self) -> None:
        """Stops and frees everything (idempotent)."""
        self._t.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frames(self, start_ns: int, end_ns: int, vcpus: Sequence[tuple[int, int, int]]) -> TraceFrames:
        """The frames of the window [start_ns, end_ns) (``time.monotonic_ns``
        clock), for the vCPU threads ``vcpus`` = [(tid, vm, vcpu)]."""
        info = self.stop()
        f = self._t.frames(int(start_ns), int(end_ns), [(int(t), int(m), int(c)) for t, m, c in vcpus])
        trace = _df(f["trace"], TRACE_SCHEMA).sort(["pcpu", "start_ns"])
        wakeups = _df(f["wakeups"], WAKEUPS_SCHEMA).with_columns(
            (pl.col("run_ns") - pl.col("wake_ns")).alias("latency_ns")
        )
        exits = (
            _df(f["exits"], EXITS_SCHEMA)
            .with_columns(_null("entry_ns"))
            .with_columns((pl.col("entry_ns") - pl.col("exit_ns")).alias("handling_ns"))
        )
        halts = _df(f["halts"], HALTS_SCHEMA).with_columns(_null("window_ns"))
        info["exits_source"] = f["exits_source"]
        info["inferred_switch_ins"] = f["inferred_switch_ins"]
        info["complete_until_ns"] = f["complete_until_ns"]
        return TraceFrames(trace=trace, wakeups=wakeups, exits=exits, halts=halts, info=info)


@renamed_since(PCPUS_RENAMED, "one name for host CPU lists everywhere", cpus="pcpus")
def other_busy_ns(trace: pl.DataFrame, pcpus: Iterable[int], own_tids: Iterable[int]) -> dict[int, int]:
    """Per CPU of ``pcpus``: ns that tasks other than ``own_tids`` ran there, from a trace frame (exact)."""
    own = list(own_tids)
    t = trace.filter(~pl.col("tid").is_in(own)).group_by("pcpu").agg((pl.col("end_ns") - pl.col("start_ns")).sum())
    got = {int(r[0]): int(r[1]) for r in t.iter_rows()}
    return {int(c): got.get(int(c), 0) for c in pcpus}
