"""Overcommit experiments on real KVM: guest workloads, pinned vCPU threads,
live sampling.

::

    from vcpulab.experiment import SpinLock, run

    r = run(SpinLock(kind="ticket", hold=40, think=40), vcpus=4, pcpus=[0], duration_s=1.0)
    r.results          # one row per vCPU: acquisitions, pauses, waits …
    r.samples          # t_ns, vm, vcpu, steal_ns, preempted, every vCPU stat
    r.deltas()         # the same, per sampling interval
    r.threads          # per vCPU thread: CPU time, run delay, context switches

Every vCPU runs on its own OS thread, pinned with ``sched_setaffinity`` to the
host CPUs of its placement, with the GIL released; the calling thread samples
steal time (a memory read) and the vCPU stats (one ``pread`` per vCPU). Every
run has a hard deadline; Ctrl-C stops all vCPUs within ``poll_every`` and raises
``KeyboardInterrupt`` after the threads are joined.

Workloads are guest programs assembled in Rust (``src/kvm/guest/program.rs``);
each class below documents its parameters (units: loop iterations of the
emulated guest, µs, Hz) and the result columns it returns.
"""

from __future__ import annotations

import numbers
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np
import polars as pl

from vcpulab import _core, tracing
from vcpulab import analysis as _analysis
from vcpulab import sched as _sched
from vcpulab._checks import check_type, frames_in_package, guard_panics, renamed
from vcpulab._frames import with_key_dtypes
from vcpulab._interrupt import keep_partial
from vcpulab.experiment._args import QUALITY_THRESHOLDS, _check_run_args, _check_scheduler
from vcpulab.experiment._workloads import (
    GRACE_S,
    MAX_DURATION_S,
    MAX_VCPUS,
    IdleTicks,
    IpiPingPong,
    MsiPingPong,
    PvSpinLock,
    Spin,
    SpinLock,
    Workload,
    _record_gpa,
)
from vcpulab.kvm import Host, Program, Vcpu, Vm
from vcpulab.quality import Quality, QualityWarning, quality, snapshot
from vcpulab.sched import Scheduler

__all__ = [
    "CONFIDENCE_LEVELS",
    "GRACE_S",
    "IdleTicks",
    "IpiPingPong",
    "MAX_DURATION_S",
    "MAX_VCPUS",
    "MsiPingPong",
    "PvSpinLock",
    "QUALITY_THRESHOLDS",
    "QualityWarning",
    "Run",
    "Spin",
    "SpinLock",
    "Trials",
    "Workload",
    "machine_provenance",
    "provenance",
    "run",
    "t_critical",
]


def _schedule_frames(d: dict[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    dec = pl.DataFrame({k: (v if isinstance(v, list) else np.asarray(v)) for k, v in d["decisions"].items()})
    spins = pl.DataFrame({k: np.asarray(v) for k, v in d["spins"].items()})
    return dec, spins, {"dropped": int(d["dropped"]), "watchdog_kicks": int(d["watchdog_kicks"])}


# --------------------------------------------------------------------------- runner


@dataclass
class Run:
    """What [`run`][vcpulab.experiment.run] produced; every frame carries ``vm`` and ``vcpu``."""

    #: t_ns, vm, vcpu, steal_ns, preempted, is_idle (the steal area's bytes), and every scalar vCPU stat
    samples: pl.DataFrame
    #: the workload's per-vCPU counters (see the workload class)
    results: pl.DataFrame
    #: per vCPU thread: host CPUs, cpu_ns, run_delay_ns, timeslices, context
    #: switches, wall_ns, start_ns (when the thread began, ns after the run's
    #: start, just before it pinned itself to its CPUs), user_exits (exits
    #: that reached user space), outcome
    threads: pl.DataFrame
    wall_s: float
    #: {(vm, vcpu): [host CPUs]}
    placement: dict[tuple[int, int], list[int]]
    #: the full configuration and provenance of this run
    config: dict[str, Any] = field(default_factory=dict)
    #: what else ran on the run's CPUs (vcpulab.quality.Quality): always
    #: measured by run(); a Run built by hand gets Quality.not_measured()
    quality: Quality = field(default_factory=Quality.not_measured)
    #: with ``trace=True`` (docs/tracing.md): one row per interval a task ran on one of
    #: the run's CPUs — pcpu, start_ns, end_ns, vm, vcpu, tid, comm (vm = vcpu = -1:
    #: not a vCPU thread of this run), the simulator's ``Result.trace`` columns
    trace: pl.DataFrame | None = None
    #: wake-up-to-run latency of each vCPU thread: vm, vcpu, tid, wake_ns, run_ns, latency_ns
    wakeups: pl.DataFrame | None = None
    #: every exit: vm, vcpu, reason (the kernel's name), exit_ns, entry_ns, handling_ns
    exits: pl.DataFrame | None = None
    #: every halt: vm, vcpu, time_ns, polled, ns, valid, window_ns (the poll window after it)
    halts: pl.DataFrame | None = None
    #: what the trace recorded: events, lost, dropped, truncated, counts per tracepoint
    trace_info: dict[str, Any] | None = None
    #: under a vcpulab scheduler (``run(scheduler=...)``, [`vcpulab.sched`][vcpulab.sched]): one row per
    #: token hand-off — t_ns (after the run's start), pcpu, out_vm, out_vcpu (-1: the CPU was
    #: idle), in_vm, in_vcpu (-1: it falls idle), why ([`vcpulab.sched.WHY`][vcpulab.sched.WHY])
    schedule: pl.DataFrame | None = None
    #: one row per pv spin exit — t_ns, vm, vcpu, holder (the vCPU the guest named, -1:
    #: unknown), attempts (yield_to calls), yielded_to (-1: kept its token), window (the
    #: spin window after the exit, iterations), latency_ns (exit → the candidate entering KVM_RUN),
    #: policy_ns (the directed-yield policy's call)
    spins: pl.DataFrame | None = None
    #: dropped (log rows past max_decisions), watchdog_kicks
    schedule_info: dict[str, Any] | None = None

    def deltas(self) -> pl.DataFrame:
        """Per-interval deltas of the cumulative columns (steal_ns and the
        stats), one row per (vm, vcpu, interval), with ``dt_ns``."""
        cum = [
            c
            for c in self.samples.columns
            if c not in ("t_ns", "vm", "vcpu", "preempted", "is_idle", "blocking", "guest_mode")
        ]
        s = self.samples.sort(["vm", "vcpu", "t_ns"])
        d = s.with_columns(
            [pl.col("t_ns").diff().over(["vm", "vcpu"]).alias("dt_ns")]
            + [pl.col(c).cast(pl.Int64).diff().over(["vm", "vcpu"]).alias(c) for c in cum]
        )
        return d.filter(pl.col("dt_ns").is_not_null())

    def steal_fraction(self) -> pl.DataFrame:
        """Steal time as a fraction of wall time, per vCPU, over the whole run."""
        s = self.samples.group_by(["vm", "vcpu"]).agg(
            (
                (pl.col("steal_ns").max() - pl.col("steal_ns").min()) / (pl.col("t_ns").max() - pl.col("t_ns").min())
            ).alias("steal_fraction")
        )
        return s.sort(["vm", "vcpu"])

    def _repr_html_(self) -> str:
        from vcpulab._display import table

        prov = self.config.get("provenance", {})
        rows = [
            ("workload", self.config.get("workload")),
            ("VMs × vCPUs", f"{self.config.get('vms')} × {self.config.get('vcpus')}"),
            ("placement", self.config.get("placement")),
            ("wall time", f"{self.wall_s:.3f} s"),
            (
                "halt_poll_ns",
                self.config.get("halt_poll_ns") if self.config.get("halt_poll_ns") is not None else "module default",
            ),
            ("vcpulab", prov.get("vcpulab_version")),
            (
                "host",
                f"{prov.get('host_cpu_model')}, kernel {prov.get('kernel_release')}, {prov.get('virtualization')}",
            ),
        ]
        frames = [("results", self.results), ("threads", self.threads), ("samples", self.samples)]
        frames += [
            (n, f)
            for n, f in (("exits", self.exits), ("halts", self.halts), ("wakeups", self.wakeups), ("trace", self.trace))
            if f is not None
        ]
        return table("real-KVM run", rows, frames)

    def __repr__(self) -> str:
        return (
            f"<Run {self.config.get('workload', {}).get('workload')} vms={self.config.get('vms')} "
            f"vcpus={self.config.get('vcpus')} wall={self.wall_s:.3f}s samples={self.samples.height}>"
        )


#: the confidence levels Trials.summary offers
CONFIDENCE_LEVELS = (0.90, 0.95, 0.99)


def t_critical(confidence: float, df: int) -> float:
    """Two-sided Student t critical value for ``confidence`` (0.90, 0.95 or
    0.99) and ``df`` >= 1 degrees of freedom
    ([`vcpulab.analysis.t_critical`][], scipy)."""
    if confidence not in CONFIDENCE_LEVELS:
        raise ValueError(f"confidence must be one of {list(CONFIDENCE_LEVELS)}, got {confidence!r}")
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return _analysis.t_critical(confidence, df)


@dataclass
class Trials:
    """What [`run`][vcpulab.experiment.run] with ``repeat=N`` produced: N independent runs of the
    same configuration (a fresh VM each), every trial's frames kept.

    ``results``, ``samples`` and ``threads`` (and, for traced runs, ``trace``,
    ``wakeups``, ``exits``, ``halts``) are the trials' frames stacked with a
    ``trial`` column; ``quality`` has one row per trial;
    [`summary`][vcpulab.experiment.Trials.summary] gives per-vCPU means with Student-t confidence intervals
    across trials.
    """

    runs: list[Run]

    def __post_init__(self) -> None:
        self.runs = list(self.runs)
        if not self.runs:
            raise ValueError("Trials needs at least one Run (got none)")
        for r in self.runs:
            check_type("Trials.runs entry", r, Run)

    def _stack(self, name: str) -> pl.DataFrame:
        return pl.concat(
            [getattr(r, name).with_columns(pl.lit(i, dtype=pl.UInt32).alias("trial")) for i, r in enumerate(self.runs)],
            how="diagonal_relaxed",
        )

    @property
    def results(self) -> pl.DataFrame:
        return self._stack("results")

    @property
    def samples(self) -> pl.DataFrame:
        return self._stack("samples")

    @property
    def threads(self) -> pl.DataFrame:
        return self._stack("threads").drop("cpus")

    def _traced(self, name: str) -> pl.DataFrame | None:
        if any(getattr(r, name) is None for r in self.runs):
            return None
        return self._stack(name)

    @property
    def trace(self) -> pl.DataFrame | None:
        """The trials' ``Run.trace`` frames with a ``trial`` column (None without ``trace=True``)."""
        return self._traced("trace")

    @property
    def wakeups(self) -> pl.DataFrame | None:
        """The trials' ``Run.wakeups`` with a ``trial`` column."""
        return self._traced("wakeups")

    @property
    def exits(self) -> pl.DataFrame | None:
        """The trials' ``Run.exits`` with a ``trial`` column."""
        return self._traced("exits")

    @property
    def halts(self) -> pl.DataFrame | None:
        """The trials' ``Run.halts`` with a ``trial`` column."""
        return self._traced("halts")

    @property
    def quality(self) -> pl.DataFrame:
        """One row per trial: other_share, alone_delay_share, steal_excess,
        psi_cpu_some_share, disturbed, reasons (see vcpulab.quality)."""
        rows = []
        for i, r in enumerate(self.runs):
            q = r.quality
            m = q.measured
            rows.append(
                {
                    "trial": i,
                    "wall_s": r.wall_s,
                    "other_share": q.other_share if m else None,
                    "alone_delay_share": q.alone_delay_share if m else None,
                    "steal_excess": q.steal_excess if m else None,
                    "psi_cpu_some_share": q.psi_cpu_some_share if m else None,
                    "disturbed": q.disturbed if m else None,
                    "reasons": "; ".join(q.reasons) if m else "",
                }
            )
        return pl.DataFrame(rows)

    def summary(
        self, columns: Sequence[str] | None = None, confidence: float = 0.95, include_disturbed: bool = True
    ) -> pl.DataFrame:
        """Per (vm, vcpu, column): ``n`` trials, ``mean``, ``std`` (sample),
        and the ``ci_low``/``ci_high`` of the mean (Student t, ``confidence``
        0.90/0.95/0.99; NaN with one trial). ``columns``: result columns
        (default: every numeric one); ``include_disturbed=False`` leaves out
        trials whose quality says other tasks disturbed them."""
        res = self.results
        if not include_disturbed:
            keep = [i for i, r in enumerate(self.runs) if not r.quality.disturbed]
            res = res.filter(pl.col("trial").is_in(keep))
        num = [c for c, t in res.schema.items() if t.is_numeric() and c not in ("vm", "vcpu", "trial")]
        cols = list(columns) if columns is not None else num
        bad = [c for c in cols if c not in num]
        if bad:
            raise ValueError(f"columns {bad} are not numeric result columns; these are: {num}")
        t_critical(confidence, 1)  # validates confidence
        long = res.unpivot(index=["vm", "vcpu", "trial"], on=cols, variable_name="column", value_name="value")
        agg = long.group_by(["vm", "vcpu", "column"], maintain_order=True).agg(
            pl.len().alias("n"),
            pl.col("value").cast(pl.Float64).mean().alias("mean"),
            pl.col("value").cast(pl.Float64).std().alias("std"),
        )
        half = [
            t_critical(confidence, n - 1) * sd / np.sqrt(n) if n > 1 and sd is not None else float("nan")
            for n, sd in zip(agg["n"], agg["std"])
        ]
        return agg.with_columns(
            (pl.col("mean") - pl.Series(half)).alias("ci_low"), (pl.col("mean") + pl.Series(half)).alias("ci_high")
        ).sort(["vm", "vcpu", "column"])

    def __repr__(self) -> str:
        d = sum(1 for r in self.runs if r.quality.disturbed)
        return f"<Trials n={len(self.runs)} disturbed={d} {self.runs[0]!r}>"


def _placement(
    n_vms: int, n_vcpus: int, pcpus: Sequence[int] | None, placement: Sequence[Sequence[int]] | None
) -> dict[tuple[int, int], list[int]]:
    allowed = set(_core.allowed_cpus())
    total = n_vms * n_vcpus
    if placement is not None:
        if len(placement) != total:
            raise ValueError(f"placement needs one CPU list per vCPU ({total}), got {len(placement)}")
        lists = [list(p) for p in placement]
    else:
        cpus = sorted(allowed) if pcpus is None else list(pcpus)
        if not cpus:
            raise ValueError("pcpus must name at least one host CPU")
        lists = [cpus] * total
    name = "pcpus" if placement is None else "placement"
    for cl in lists:
        bad = [c for c in cl if c not in allowed]
        if not cl:
            raise ValueError(f"{name}: a vCPU's list of host CPUs is empty; this process may run on {sorted(allowed)}")
        if bad:
            raise ValueError(f"{name}: host CPUs {bad} are not usable; this process may run on {sorted(allowed)}")
    return {(i // n_vcpus, i % n_vcpus): lists[i] for i in range(total)}


@overload
def run(
    workload: Workload,
    vcpus: int = ...,
    pcpus: Sequence[int] | None = ...,
    placement: Sequence[Sequence[int]] | None = ...,
    duration_s: float = ...,
    sample_every_s: float | None = ...,
    vms: int = ...,
    memory_mib: int = ...,
    halt_poll_ns: int | None = ...,
    steal_time: bool = ...,
    host: Host | None = ...,
    poll_every_s: float = ...,
    warn_quality: bool = ...,
    quality_thresholds: dict[str, float] | None = ...,
    repeat: None = ...,
    trace: bool = ...,
    trace_max_events: int = ...,
    scheduler: Scheduler | None = ...,
) -> Run: ...


@overload
def run(
    workload: Workload,
    vcpus: int = ...,
    pcpus: Sequence[int] | None = ...,
    placement: Sequence[Sequence[int]] | None = ...,
    duration_s: float = ...,
    sample_every_s: float | None = ...,
    vms: int = ...,
    memory_mib: int = ...,
    halt_poll_ns: int | None = ...,
    steal_time: bool = ...,
    host: Host | None = ...,
    poll_every_s: float = ...,
    warn_quality: bool = ...,
    quality_thresholds: dict[str, float] | None = ...,
    *,
    repeat: int,
    trace: bool = ...,
    trace_max_events: int = ...,
    scheduler: Scheduler | None = ...,
) -> Trials: ...


@renamed(duration="duration_s", sample_every="sample_every_s", poll_every="poll_every_s")
@guard_panics
def run(
    workload: Workload,
    vcpus: int = 2,
    pcpus: Sequence[int] | None = None,
    placement: Sequence[Sequence[int]] | None = None,
    duration_s: float = 1.0,
    sample_every_s: float | None = 0.01,
    vms: int = 1,
    memory_mib: int = 16,
    halt_poll_ns: int | None = None,
    steal_time: bool = True,
    host: Host | None = None,
    poll_every_s: float = 0.05,
    warn_quality: bool = True,
    quality_thresholds: dict[str, float] | None = None,
    repeat: int | None = None,
    trace: bool = False,
    trace_max_events: int = tracing.DEFAULT_MAX_EVENTS,
    scheduler: Scheduler | None = None,
) -> Run | Trials:
    """Run ``workload`` on ``vms`` VMs of ``vcpus`` vCPUs each.

    Args:
        pcpus: host CPUs every vCPU thread is pinned to (default: all this
            process may use). ``placement`` instead gives one CPU list per vCPU
            (VM-major order).
        duration_s: seconds; graceful workloads then get up to ``GRACE_S`` more
            to finish their current iteration.
        sample_every_s: sampling period in seconds (None: first and last sample only).
        halt_poll_ns: per-VM maximum halt-poll time (None: the module parameter).
        steal_time: register each vCPU's steal-time area (MSR_KVM_STEAL_TIME).
        warn_quality: issue a [`QualityWarning`][vcpulab.quality.QualityWarning] when
            other tasks disturbed the run (``Run.quality`` says how; it is
            recorded either way).
        quality_thresholds: ``max_other_share`` / ``max_alone_delay_share``
            for [`vcpulab.quality.quality`][] (default 0.02 each).
        poll_every_s: how often the run checks for Ctrl-C, s (at most 1).
        repeat: run ``repeat`` independent trials (fresh VMs each) and return
            [`Trials`][vcpulab.experiment.Trials] (every trial's frames, means with confidence
            intervals) instead of one [`Run`][vcpulab.experiment.Run]. Ctrl-C stops within a
            second; ``KeyboardInterrupt.partial`` is the [`Trials`][vcpulab.experiment.Trials] of
            the finished trials (None before the first).
        trace: record the run's scheduler and KVM tracepoints (docs/tracing.md):
            ``Run.trace``, ``Run.wakeups``, ``Run.exits``, ``Run.halts``, and
            ``Run.quality`` takes other tasks' time from the trace (exact).
            Needs tracefs (mounted when absent and root; else
            ``TraceUnavailableError``).
        trace_max_events: cap on traced events kept; beyond it the trace is
            flagged ``Run.trace_info["truncated"]``.
        scheduler: who schedules the vCPU threads ([`vcpulab.sched`][vcpulab.sched]):
            ``sched.host()`` (None, the default) leaves them to the kernel;
            ``sched.round_robin()``, ``gang()``, ``relaxed_co()``,
            ``balance()`` or ``directed_yield(policy)`` run them under
            vcpulab's own scheduler on the ``pcpus`` (one run token each), and
            the Run gains ``schedule`` (every token hand-off), ``spins`` (every
            pv spin exit) and ``schedule_info``. Spin-lock workloads then make
            pv spin exits and halt brackets; the kernel-halting workloads
            (MsiPingPong, IpiPingPong, IdleTicks) are not scheduled yet.

    Every argument is checked before anything is created (TypeError /
    ValueError naming it): at most ``MAX_VCPUS`` vCPUs per VM, a duration of
    at most ``MAX_DURATION_S``, a message gap shorter than the run.
    """
    _check_run_args(
        workload,
        vcpus,
        vms,
        duration_s,
        sample_every_s,
        memory_mib,
        halt_poll_ns,
        steal_time,
        poll_every_s,
        pcpus,
        placement,
        host,
        quality_thresholds,
        trace,
        trace_max_events,
        warn_quality,
    )
    scheduler = _check_scheduler(scheduler, workload, vcpus, vms, pcpus, placement)
    if repeat is not None:
        if isinstance(repeat, bool) or not isinstance(repeat, numbers.Integral) or not 1 <= repeat <= 1000:
            raise ValueError(f"repeat must be an int in [1, 1000], got {repeat!r}")
        repeat = int(repeat)
        kw = dict(
            vcpus=vcpus,
            pcpus=pcpus,
            placement=placement,
            duration_s=duration_s,
            sample_every_s=sample_every_s,
            vms=vms,
            memory_mib=memory_mib,
            halt_poll_ns=halt_poll_ns,
            steal_time=steal_time,
            host=host,
            poll_every_s=poll_every_s,
            warn_quality=warn_quality,
            quality_thresholds=quality_thresholds,
            trace=trace,
            trace_max_events=trace_max_events,
            scheduler=scheduler,
        )
        done: list[Run] = []
        try:
            for _ in range(repeat):
                done.append(run(workload, **kw))  # type: ignore[call-overload]
        except KeyboardInterrupt as e:
            keep_partial(
                e, Trials(done) if done else None, call="experiment.run", done=len(done), total=repeat, unit="trials"
            )
            raise
        return Trials(done)
    vcpus, vms, duration_s = int(vcpus), int(vms), float(duration_s)
    workload.check(vcpus, True)
    where = _placement(vms, vcpus, pcpus, placement)
    host = host or Host()
    vm_objs: list[Vm] = []
    tracer: tracing.Trace | None = None
    scheduled = not scheduler.is_host
    window_gpas: list[int | None] = []
    try:
        plan = []
        progs: list[Program] = []
        groups: list[list[Vcpu]] = []
        for i in range(vms):
            vm = host.create_vm(memory_mib=memory_mib)
            vm_objs.append(vm)
            if halt_poll_ns is not None:
                vm.halt_poll_ns = halt_poll_ns
            vs = [vm.create_vcpu(j) for j in range(vcpus)]
            params = dict(workload.params(vcpus))
            if scheduled and isinstance(workload, SpinLock):
                params["pv_exits"] = 1
            if isinstance(workload, IpiPingPong):
                params["gap_cycles"] = int(workload.gap_us * vs[0].tsc_khz / 1e3)
            prog = vm.load(workload.program, **params)  # type: ignore[arg-type]
            pv_forced = getattr(workload, "preempted_from_host", ())
            for v in vs:
                v.start(prog)
                if steal_time and v.id not in pv_forced:
                    v.enable_steal_time()
                elif v.id in pv_forced:
                    # the `preempted` byte of its (default) steal-time area
                    vm.write_u8(_core.STEAL_AREA_ADDR + 64 * v.id + 16, 1)
                plan.append((v._vcpu, i, where[(i, v.id)]))
                if scheduled:
                    window_gpas.append(
                        _record_gpa(prog, "spin_window", v.id) if isinstance(workload, SpinLock) else None
                    )
            progs.append(prog)
            groups.append(vs)

        hard = duration_s + (GRACE_S if workload.graceful else 0.0)
        stoppers: list[threading.Timer] = []
        if workload.graceful:
            for vm, prog in zip(vm_objs, progs):
                t = threading.Timer(duration_s, workload.stop, args=(vm, prog))
                t.daemon = True
                stoppers.append(t)
        vcpu_cpus = {c for cl in where.values() for c in cl}
        driver_cpus = sorted(set(_core.allowed_cpus()) - vcpu_cpus)
        drivers: list[_Driver] = [
            _Driver(workload, vm, vs, prog, hard, driver_cpus) for vm, vs, prog in zip(vm_objs, groups, progs)
        ]
        tracer = tracing.Trace(sorted(vcpu_cpus), max_events=trace_max_events) if trace else None
        snap0 = snapshot(vcpu_cpus)
        t0 = time.perf_counter()
        for t in stoppers:
            t.start()
        for d in drivers:
            d.start()
        try:
            sched_cfg = _sched._core_config(scheduler, sorted(vcpu_cpus), window_gpas, vms)
            rep = _core.run_experiment(plan, hard, sample_every_s, poll_every_s, scheduler=sched_cfg)
            # the run's clock and host counters stop with its vCPUs, before the
            # trace's stop (0.3-0.4 s here: an RCU grace period per perf fd
            # closed) and the drivers' join, which are not part of the run
            wall = time.perf_counter() - t0
            snap1 = snapshot(vcpu_cpus)
            if tracer is not None:
                tracer.stop()
        except BaseException:
            # Ctrl-C or an error: closing the VMs stops every host driver at
            # once (they poll for it), then they are joined.
            if tracer is not None:
                tracer.close()
            for vm in vm_objs:
                vm.close()
            raise
        finally:
            for t in stoppers:
                t.cancel()
            for vm, prog in zip(vm_objs, progs):
                if workload.graceful and not vm.closed:
                    workload.stop(vm, prog)
            for d in drivers:
                d.join(timeout=hard + 5)
        if "error" in rep:
            # the first vCPU thread's error, already the exception it converts to
            raise rep["error"]
        for d in drivers:
            if d.error is not None:
                raise d.error

        # key columns (vm, vcpu) are Int64 in every frame (vcpulab._frames)
        samples = with_key_dtypes(pl.DataFrame({k: np.asarray(v) for k, v in rep["samples"].items()}))
        threads = pl.DataFrame(
            {
                k: [t[k] for t in rep["threads"]]
                for k in (
                    "vm",
                    "vcpu",
                    "tid",
                    "cpu_ns",
                    "run_delay_ns",
                    "timeslices",
                    "voluntary_ctxt_switches",
                    "nonvoluntary_ctxt_switches",
                    "wall_ns",
                    "start_ns",
                    "user_exits",
                    "outcome",
                )
            }
        ).with_columns(pl.Series("cpus", [t["cpus"] for t in rep["threads"]]))
        res_rows: dict[str, list[Any]] = {"vm": [], "vcpu": []}
        for i, (vm, vs, prog, d) in enumerate(zip(vm_objs, groups, progs, drivers)):
            cols = workload.results(vm, prog, vs, d.result)
            res_rows["vm"] += [i] * len(vs)
            res_rows["vcpu"] += [v.id for v in vs]
            for k, col in cols.items():
                res_rows.setdefault(k, []).extend(col)
        results = pl.DataFrame(res_rows)
        tf = None
        if tracer is not None:
            try:
                start = int(rep["start_mono_ns"])
                tf = tracer.frames(
                    start, start + int(rep["wall_ns"]), [(t["tid"], t["vm"], t["vcpu"]) for t in rep["threads"]]
                )
                tf.info["window_ns"] = int(rep["wall_ns"])
            finally:
                tracer.close()
        q = _run_quality(snap0, snap1, threads, drivers, samples, steal_time, quality_thresholds, tf)
        config = {
            "workload": workload.config(),
            "vms": vms,
            "vcpus": vcpus,
            "placement": {f"{k[0]}.{k[1]}": v for k, v in where.items()},
            "duration_s": duration_s,
            "sample_every_s": sample_every_s,
            "memory_mib": memory_mib,
            "halt_poll_ns": halt_poll_ns,
            "steal_time": steal_time,
            "scheduler": scheduler.config(),
            "provenance": provenance(),
        }
        r = Run(
            samples=samples, results=results, threads=threads, wall_s=wall, placement=where, config=config, quality=q
        )
        if "schedule" in rep:
            r.schedule, r.spins, r.schedule_info = _schedule_frames(rep["schedule"])
        if tf is not None:
            config["trace"] = {"max_events": trace_max_events, "events": list(tracing.EVENTS)}
            r.trace, r.wakeups, r.exits, r.halts, r.trace_info = tf.trace, tf.wakeups, tf.exits, tf.halts, tf.info
        if tf is not None and tf.info["truncated"]:
            warnings.warn(
                tracing.TraceTruncatedWarning(
                    f"the trace of run({type(workload).__name__}, vcpus={vcpus}) is incomplete: "
                    f"{tf.describe_truncation()}; Run.quality was measured from the {q.source} counters instead "
                    "(raise trace_max_events, or shorten the run)"
                ),
                stacklevel=frames_in_package() + 1,
            )
        if warn_quality:
            # stack: Quality.warn <- run <- its wrappers (guard_panics, renamed) <- the caller, whose line it names
            q.warn(
                f"run({type(workload).__name__}, vcpus={vcpus}, pcpus={sorted(vcpu_cpus)})",
                stacklevel=frames_in_package() + 2,
            )  # Quality.warn's frame, then run's wrappers, then the caller
        return r
    finally:
        if tracer is not None:
            tracer.close()  # idempotent: stops and frees the trace on every path
        for vm in vm_objs:
            vm.close()


def _run_quality(
    snap0: Any,
    snap1: Any,
    threads: pl.DataFrame,
    drivers: Sequence[_Driver],
    samples: pl.DataFrame,
    steal_time: bool,
    thresholds: dict[str, float] | None,
    tf: tracing.TraceFrames | None = None,
) -> Quality:
    """The run's [`Quality`][vcpulab.quality.Quality]: vCPU threads (CPU time and
    run delay from the Rust report, over each thread's life) and host drivers
    count as the run's own; only the vCPU threads compete in the fair share of
    steal. With a trace, other tasks' time on the run's CPUs
    comes from it (exact) instead of cpuidle."""
    placement: dict[int, Sequence[int]] = {}
    cpu_ns: dict[int, int] = {}
    delay: dict[int, int] = {}
    for t in threads.iter_rows(named=True):
        placement[t["tid"]] = t["cpus"]
        cpu_ns[t["tid"]], delay[t["tid"]] = t["cpu_ns"], t["run_delay_ns"]
    for d in drivers:
        if d.tid and d.cpu_ns is not None:
            placement[d.tid] = d.cpus or sorted(_core.allowed_cpus())
            cpu_ns[d.tid], delay[d.tid] = d.cpu_ns, d.run_delay_ns
    steal: list[tuple[Sequence[int], float]] = []
    if steal_time and samples.height:
        s = samples.group_by(["vm", "vcpu"]).agg(
            (
                (pl.col("steal_ns").max() - pl.col("steal_ns").min()) / (pl.col("t_ns").max() - pl.col("t_ns").min())
            ).alias("f")
        )
        cpus_of = {(t["vm"], t["vcpu"]): t["cpus"] for t in threads.iter_rows(named=True)}
        steal = [(cpus_of[(r["vm"], r["vcpu"])], float(r["f"])) for r in s.iter_rows(named=True) if r["f"] == r["f"]]
    traced = None
    untrusted = tf.describe_truncation() if tf is not None else None
    if tf is not None and untrusted is None:
        # an incomplete trace says nothing exact about other tasks: the counters are used instead
        cpus = sorted({c for cl in threads["cpus"].to_list() for c in cl})
        traced = tracing.other_busy_ns(tf.trace, cpus, placement)
    q = quality(
        snap0,
        snap1,
        placement,
        own_cpu_ns=cpu_ns,
        own_run_delay_ns=delay,
        steal_fraction=steal,
        traced_other_ns=traced,
        traced_wall_ns=(tf.info["window_ns"] if tf is not None and traced is not None else None),
        vcpu_threads=threads["tid"].to_list(),
        **(thresholds or {}),
    )
    return replace(q, trace_truncated=untrusted) if untrusted is not None else q


class _Driver(threading.Thread):
    """Runs a workload's host side (if any) beside the vCPUs, pinned to the
    host CPUs no vCPU uses (when there are such CPUs): a host sender spinning
    on a vCPU's CPU would stop KVM's halt polling there
    (``single_task_running()`` turns false) and distort what is measured."""

    def __init__(
        self, workload: Workload, vm: Vm, vcpus: list[Vcpu], prog: Program, duration: float, cpus: Sequence[int]
    ) -> None:
        super().__init__(daemon=True)
        self.args = (vm, vcpus, prog, duration)
        self.workload = workload
        self.cpus = list(cpus)
        self.result: Any = None
        self.error: BaseException | None = None
        self.tid = 0
        self.cpu_ns: int | None = None
        self.run_delay_ns = 0

    def run(self) -> None:
        import os

        from vcpulab.quality import thread_schedstat

        self.tid = threading.get_native_id()
        c0, d0, _ = thread_schedstat(self.tid)
        try:
            if self.cpus and type(self.workload).host_driver is not Workload.host_driver:
                os.sched_setaffinity(0, self.cpus)
            else:
                self.cpus = []
            self.result = self.workload.host_driver(*self.args)
        except BaseException as e:
            self.error = e
        finally:
            c1, d1, _ = thread_schedstat(self.tid)
            self.cpu_ns, self.run_delay_ns = c1 - c0, d1 - d0


def provenance() -> dict[str, Any]:
    """Where a real run came from ([`vcpulab.provenance.provenance`][]):
    vcpulab version and build, dependency versions, timestamp, command line,
    host CPU model, kernel, KVM module parameters, virtualization backend."""
    from vcpulab.provenance import provenance as _provenance

    return _provenance()


def machine_provenance() -> dict[str, Any]:
    """The machine part of provenance ([`vcpulab.provenance.machine`][])."""
    from vcpulab.provenance import machine

    return machine()
