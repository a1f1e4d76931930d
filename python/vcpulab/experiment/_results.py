"""What a real run returns: [`Run`][vcpulab.experiment.Run] (one run's frames),
[`Trials`][vcpulab.experiment.Trials] (``run(repeat=N)``) and
[`t_critical`][vcpulab.experiment.t_critical]. Imports nothing else of the package."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from vcpulab import analysis as _analysis
from vcpulab._checks import check_type
from vcpulab.quality import Quality


@dataclass
class Run:
    """What [`run`][vcpulab.experiment.run] produced; every frame carries ``vm`` and ``vcpu``."""

    #: t_ns (the sample's time), read_ns (when this row's steal area was read: later than t_ns when
    #: the sampling thread was preempted between rows), vm, vcpu, steal_ns, preempted, is_idle (the
    #: steal area's bytes), and every scalar vCPU stat
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
    #: the per-item log of a program that hands out items (``WakePlacement``: the first 4,096 of
    #: each VM): vm, item, target (the worker chosen), pass (1 its ``is_idle`` byte set, 2 its
    #: ``preempted`` byte clear, 3 any idle worker), preempted, is_idle (the chosen worker's
    #: bytes at the choice), wake_us, round_us; None for other workloads
    items: pl.DataFrame | None = None

    def deltas(self) -> pl.DataFrame:
        """Per-interval deltas of the cumulative columns (steal_ns and the
        stats), one row per (vm, vcpu, interval), with ``dt_ns``."""
        cum = [
            c
            for c in self.samples.columns
            if c not in ("t_ns", "read_ns", "vm", "vcpu", "preempted", "is_idle", "blocking", "guest_mode")
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
            for n, f in (
                ("exits", self.exits),
                ("halts", self.halts),
                ("wakeups", self.wakeups),
                ("trace", self.trace),
                ("items", self.items),
            )
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
    ``wakeups``, ``exits``, ``halts``; for a program that logs items,
    ``items``; under vcpulab's scheduler, ``schedule`` and ``spins``) are the
    trials' frames stacked with a ``trial`` column; ``quality`` has one row per trial;
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
    def items(self) -> pl.DataFrame | None:
        """The trials' ``Run.items`` (a program's per-item log) with a ``trial`` column."""
        return self._traced("items")

    @property
    def schedule(self) -> pl.DataFrame | None:
        """The trials' ``Run.schedule`` (vcpulab's scheduler's decisions) with a ``trial`` column."""
        return self._traced("schedule")

    @property
    def spins(self) -> pl.DataFrame | None:
        """The trials' ``Run.spins`` (pv spin exits under vcpulab's scheduler) with a ``trial`` column."""
        return self._traced("spins")

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
        and the ``ci_low``/``ci_high`` of the mean (``confidence``
        0.90/0.95/0.99; NaN with one trial), formed by
        [`bounded_interval`][vcpulab.analysis.bounded_interval] inside the
        range the column cannot leave ([`value_range`][vcpulab.analysis.value_range]:
        a count, a duration or a rate is never negative), so a small sample
        of counts never gets a negative bound; ``interval`` names the method
        (``"log-t"`` for those, ``"t"`` for a column with no known range).
        ``columns``: result columns (default: every numeric one);
        ``include_disturbed=False`` leaves out trials whose quality says other
        tasks disturbed them."""
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
            pl.col("value").cast(pl.Float64).alias("values"),
        )
        ranges = {c: _analysis.value_range(c, res.schema[c]) for c in cols}
        bounds = [
            _analysis.bounded_interval(v, confidence, *ranges[c])[1:] for c, v in zip(agg["column"], agg["values"])
        ]
        return (
            agg.drop("values")
            .with_columns(
                pl.Series("ci_low", [b[0] for b in bounds], dtype=pl.Float64),
                pl.Series("ci_high", [b[1] for b in bounds], dtype=pl.Float64),
                pl.Series("interval", [_analysis.interval_method(*ranges[c]) for c in agg["column"]], dtype=pl.String),
            )
            .sort(["vm", "vcpu", "column"])
        )

    def __repr__(self) -> str:
        d = sum(1 for r in self.runs if r.quality.disturbed)
        return f"<Trials n={len(self.runs)} disturbed={d} {self.runs[0]!r}>"
