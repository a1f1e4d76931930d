"""The grid: the benchmark's experiments ([`default_grid`][vcpulab.twins.default_grid],
[`policy_grid`][vcpulab.twins.policy_grid]) run and compared cell by cell
([`grid`][vcpulab.twins.grid] → [`Grid`][vcpulab.twins.Grid]), the cells' factors and names, and the
between-cell directions ([`directions`][vcpulab.twins.directions])."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from vcpulab import sim
from vcpulab._checks import PCPUS_RENAMED, check_bool, check_float, check_int, check_seq, check_type, renamed_since
from vcpulab._interrupt import keep_partial
from vcpulab._progress import Bar
from vcpulab.experiment import IdleTicks, IpiPingPong, MsiPingPong, PvSpinLock, Run, SpinLock, WakePlacement
from vcpulab.twins._calibration import _cost_pair, calibrate
from vcpulab.twins._experiment import _ONE_NAME, Experiment
from vcpulab.twins._guest import guest_path
from vcpulab.twins._running import _compare_rows, median_costs, run_real
from vcpulab.twins._speed import check_host_speed
from vcpulab.twins._twin import twin
from vcpulab.twins._values import Calibration

#: the factors of a grid cell (columns of [`grid`][vcpulab.twins.grid]'s frames)
FACTORS = (
    "workload",
    "kind",
    "vcpus",
    "cpus",
    "hold",
    "think",
    "halt_poll_ns",
    "gap_us",
    "hz",
    "poll",
    "work",
    "scheduler",
)


def cell_factors(exp: Experiment) -> dict[str, Any]:
    """The grid factors of ``exp`` (NaN-free: -1 where a factor does not apply)."""
    w = exp.workload
    hp = exp.halt_poll_ns
    kind: str
    if isinstance(w, WakePlacement):
        kind = w.rule
    elif isinstance(w, PvSpinLock):
        kind = "pv"
    else:
        kind = getattr(w, "kind", "") if isinstance(w, SpinLock) else ""
    sched_label = _scheduler_label(exp.scheduler)
    if exp.homes is not None:
        sched_label += ":" + ",".join(str(exp.pcpus.index(h)) for h in exp.homes)
    return {
        "workload": type(w).__name__,
        "kind": kind,
        "vcpus": exp.vcpus,
        "cpus": len(exp.pcpus),
        "hold": getattr(w, "hold", -1),
        "think": getattr(w, "think", -1),
        "halt_poll_ns": -1 if hp is None else int(hp),
        "gap_us": float(getattr(w, "gap_us", -1.0)),
        "hz": int(getattr(w, "hz", -1)),
        "poll": int(getattr(w, "poll", -1)),
        "work": int(w.work) if isinstance(w, WakePlacement) else -1,
        "scheduler": sched_label,
    }


def _scheduler_label(s: Any) -> str:
    """``"host"``, ``"round_robin"``, ``"gang"``, or ``"directed_yield:<policy>"`` (a
    ``pinned`` cell with its own homes adds them by index in ``pcpus``: ``"pinned:0,0,1"``)."""
    if s is None:
        return "host"
    pol = getattr(s, "policy", None)
    return f"{s.name}:{sim.policies.label(pol)}" if pol is not None else s.name


def policy_grid(pcpu: int | None = None, duration_s: float = 1.0, vcpus: int = 3) -> list[Experiment]:
    """The policy axis of the twins grid: one ticket ``SpinLock`` VM of
    ``vcpus`` vCPUs on host CPU ``pcpu`` (default: the last this process may
    use) under vcpulab's scheduler, ``round_robin`` and ``directed_yield``
    with each directed-yield policy of the simulator (``no_yield``,
    ``baseline_2011``, ``dy_eligible``, ``upstream``, ``oracle``): the cells
    differ in ``scheduler`` alone, so [`directions`][vcpulab.twins.directions]
    compares every policy with the next (docs/scheduler.md)."""
    from vcpulab import _core, sched

    cpu = max(_core.allowed_cpus()) if pcpu is None else check_int("pcpu", pcpu, 0, 2**16)
    P = sim.policies
    policies = (P.no_yield(), P.baseline_2011(), P.dy_eligible(), P.upstream(), P.oracle())
    scheds = [sched.round_robin(), *(sched.directed_yield(p) for p in policies)]
    w = SpinLock(kind="ticket", hold=50, think=50)
    return [Experiment(w, vcpus, (cpu,), duration_s=duration_s, scheduler=s) for s in scheds]


def coscheduling_grid(pcpus: Sequence[int] | None = None, duration_s: float = 1.0, vcpus: int = 3) -> list[Experiment]:
    """The co-scheduling axis of the twins grid: one ticket ``SpinLock`` VM of
    ``vcpus`` vCPUs (default 3) on two host CPUs (default: the first two this
    process may use) under vcpulab's ``round_robin``, ``relaxed_co`` (1 ms
    skew) and ``pinned`` (vCPU i on CPU i mod 2). More vCPUs than CPUs, so a
    policy decides who waits; on one CPU no co-scheduling policy differs from
    round robin. The cells differ in ``scheduler`` alone, so
    [`directions`][vcpulab.twins.directions] compares each with the next.
    Balance and gang scheduling refuse a VM wider than the CPUs."""
    from vcpulab import _core, sched

    allowed = sorted(_core.allowed_cpus()) if pcpus is None else [check_int("pcpus entry", c, 0, 2**16) for c in pcpus]
    if len(set(allowed)) < 2:
        raise ValueError(f"the co-scheduling grid needs two host CPUs, got {allowed}")
    two = tuple(sorted(set(allowed))[:2])
    w = SpinLock(kind="ticket", hold=50, think=50)
    scheds = [sched.round_robin(), sched.relaxed_co(skew_us=1000), sched.pinned()]
    return [Experiment(w, vcpus, two, duration_s=duration_s, scheduler=s) for s in scheds]


#: how far above KVM's halt-polling window (``halt_poll_ns``) the wake grid's
#: waker halts by default, as a multiple of the window
#: ([`wake_work`][vcpulab.twins.wake_work]): a halt near the window is polled
#: or blocked as the emulation's speed moves a few percent (docs/twins.md
#: item 13: 196/219/267 µs p10/p50/p90 against 200 µs at ``work`` = 200 on the
#: Intel host), and the cell then compares regimes, not the model
WAKE_HALT_POLL_MULTIPLE = 2.0


def wake_work(cal: Calibration, halt_ns: float | None = None) -> int:
    """Loop iterations per item (``WakePlacement.work``) that make the waker's
    halt about ``halt_ns`` long on the host ``cal`` describes (default:
    [`WAKE_HALT_POLL_MULTIPLE`][vcpulab.twins.WAKE_HALT_POLL_MULTIPLE] ×
    the calibration's ``halt_poll_ns``).

    The waker halts from its ``hlt`` until the worker's completion IPI: the
    worker's wake-up (``ipi_wake_ns``), its path up to the completion IPI
    less the instructions the waker runs after its own IPI (counts from
    [`guest_path`][vcpulab.twins.guest_path] at ``path_insn_ns``) and the
    item's ``dec; jnz`` loop (2 instructions per iteration at
    ``loop_insn_ns``). The estimate leaves out the host's scheduler
    (vcpulab's schedulers add two halt brackets' exits per halt, a worker
    on the waker's CPU its switch), which only lengthen the halt, so the
    halt is at least ``halt_ns`` under any scheduler of
    [`wake_placement_grid`][vcpulab.twins.wake_placement_grid]. A
    calibration whose ``halt_poll_ns`` is 0 has no window to keep away
    from: ``WakePlacement``'s default (200) then, unless ``halt_ns`` is
    given. Raises ValueError for a non-positive ``halt_ns`` or a calibration
    without the costs."""
    check_type("cal", cal, Calibration)
    if halt_ns is None:
        window = float(cal["halt_poll_ns"])
        if not window > 0:
            return WakePlacement().work
        halt_ns = WAKE_HALT_POLL_MULTIPLE * window
    else:
        halt_ns = check_float("halt_ns", halt_ns, 0.0, 1e10, lo_open=True)
    keys = ("ipi_wake_ns", "path_insn_ns", "loop_insn_ns")
    missing = [k for k in keys if k not in cal.values]
    if missing:
        raise ValueError(f"wake_work needs the calibration's {', '.join(missing)}, which calibrate() measures")
    wake, a, b = (float(cal[k]) for k in keys)
    if not (np.isfinite(wake) and a > 0 and b > 0):
        raise ValueError(
            f"wake_work needs the calibration's ipi_wake_ns, path_insn_ns and loop_insn_ns, got {wake}, {a}, {b}"
        )
    p = guest_path(WakePlacement(work=0), 3)
    fixed_ns = wake + (p["worker_path"] - p["worker_after_ipi"] - p["waker_after_ipi"]) * a
    return max(int(np.ceil((halt_ns - fixed_ns) / (2 * b))), 1)


def wake_placement_grid(
    pcpus: Sequence[int] | None = None,
    duration_s: float = 1.0,
    poll: Sequence[int] = (0,),
    work: int | None = None,
    cal: Calibration | None = None,
) -> list[Experiment]:
    """The wake-up placement axis of the twins grid ([S3]): ``WakePlacement``
    (3 vCPUs: the waker and two workers) on two host CPUs (default: the first
    two this process may use), each rule (``available_idle``,
    ``pcpu_is_idle``) under ``sched.pinned`` with the waker and worker 1 at
    home on the first CPU and worker 2 on the second (the layout where the
    rules differ), under ``round_robin`` and under the host's scheduler
    (where this host's KVM writes no ``is_idle``, so the rules choose alike).
    Cells of one scheduler differ in the rule alone, so
    [`directions`][vcpulab.twins.directions] compares the rules. ``poll``:
    the workers' mailbox polls before they halt (``WakePlacement.poll``), one
    set of cells per value (default: none). ``work``: the loop iterations of
    an item (``WakePlacement.work``) in every cell; None (default): from
    ``cal`` where one is given ([`wake_work`][vcpulab.twins.wake_work]: the
    waker's halt at twice the calibration's halt-polling window, away from
    the window's edge), else ``WakePlacement``'s default (200)."""
    from vcpulab import _core, sched

    polls = [check_int("poll entry", p, 0, 2**32) for p in check_seq("poll", poll, "poll counts")]
    if not polls:
        raise ValueError("wake_placement_grid: poll must list at least one poll count, got an empty list")
    if work is not None:
        work = check_int("work", work, 0, 2**63)
    if cal is not None:
        check_type("cal", cal, Calibration)
        if work is None:
            work = wake_work(cal)
    if work is None:
        work = WakePlacement().work

    allowed = sorted(_core.allowed_cpus()) if pcpus is None else [check_int("pcpus entry", c, 0, 2**16) for c in pcpus]
    if len(set(allowed)) < 2:
        raise ValueError(f"the wake-placement grid needs two host CPUs, got {allowed}")
    a, b = sorted(set(allowed))[:2]
    out = []
    for kw in (
        {"scheduler": sched.pinned(), "homes": (a, a, b)},
        {"scheduler": sched.round_robin()},
        {"pinning": "shared"},
    ):
        for p in polls:
            for rule in ("available_idle", "pcpu_is_idle"):
                w = WakePlacement(rule=rule, poll=p, work=work)
                out.append(Experiment(w, 3, (a, b), duration_s=duration_s, **kw))  # type: ignore[arg-type]
    return out


@renamed_since(PCPUS_RENAMED, _ONE_NAME, cpus="pcpus")
def default_grid(pcpus: Sequence[int] | None = None, small: bool = False, duration_s: float = 1.0) -> list[Experiment]:
    """The grid of the benchmark (``small``: the CI's reduced grid) on the
    host CPUs ``pcpus`` (default: every CPU this process may use; ``cpus=``
    before 2026-12-01, still accepted with a DeprecationWarning).

    SpinLock ticket/TAS × vCPUs 1-8 × 1-2 host CPUs (one CPU each, round
    robin) × hold/think (50/50, 200/20 loop iterations); PvSpinLock 2 and 4
    vCPUs on one CPU; MsiPingPong gap 50/500 µs × max poll 0/200 µs;
    IdleTicks 250/1000 Hz × 1/4 vCPUs × max poll 0/200 µs. One-CPU cells use
    the last usable CPU (MsiPingPong's host driver then runs on the other).

    ``duration_s`` (default 1 s) is each spin-lock and timer run's length. A
    contended ticket run makes only 50-300 acquisitions a second here, and
    its first few ms (vCPUs that have not queued yet let the first one take
    the lock dozens of times) weigh differently in the real start-up and the
    simulator's (every vCPU queued at t = 0): at 0.3 s that start decides the
    count; at 1 s it is diluted (docs/twins.md, "Measured here").
    """
    from vcpulab import _core

    allowed = sorted(_core.allowed_cpus()) if pcpus is None else list(pcpus)
    one = (allowed[-1],)
    two = tuple(allowed[:2]) if len(allowed) >= 2 else None
    out: list[Experiment] = []
    if small:
        for kind in ("tas", "ticket"):
            for n in (1, 3):
                out.append(Experiment(SpinLock(kind=kind, hold=50, think=50), n, one, "one_each", duration_s))  # type: ignore[arg-type]
        out.append(Experiment(_msi(50.0), 1, one, "one_each", MSI_DEADLINE_S, 200_000))
        return out
    for kind in ("tas", "ticket"):
        for hold, think in ((50, 50), (200, 20)):
            for cp in (one, two):
                if cp is None:
                    continue
                for n in (1, 2, 3, 4, 8):
                    if n < len(cp):
                        continue
                    out.append(Experiment(SpinLock(kind=kind, hold=hold, think=think), n, cp, "one_each", duration_s))  # type: ignore[arg-type]
    for n in (2, 4):
        out.append(Experiment(PvSpinLock(hold=50, think=50), n, one, "one_each", duration_s))
    for gap in (50.0, 500.0):
        for hp in (0, 200_000):
            out.append(Experiment(_ipi(gap), 2, two or one, "one_each", MSI_DEADLINE_S, hp))
    for gap in (50.0, 500.0):
        for hp in (0, 200_000):
            out.append(Experiment(_msi(gap), 1, one, "one_each", MSI_DEADLINE_S, hp))
    for hz in (250, 1000):
        for n in (1, 4):
            for hp in (0, 200_000):
                out.append(Experiment(IdleTicks(hz=hz), n, one, "one_each", duration_s, hp))
    return out


#: deadline of the grid's MSI ping-pong cells, s: 200 rounds take 20-120 ms on an
#: idle host, but rounds of 1-20 ms were seen while other tasks held the vCPU's CPU
MSI_DEADLINE_S = 5.0


def _ipi(gap_us: float) -> IpiPingPong:
    """The grid's IPI ping-pong: 200 rounds."""
    return IpiPingPong(rounds=200, gap_us=gap_us)


def _msi(gap_us: float) -> MsiPingPong:
    """The grid's MSI ping-pong: 200 rounds (its metrics are per round)."""
    return MsiPingPong(rounds=200, gap_us=gap_us)


@dataclass
class Grid:
    """What [`grid`][vcpulab.twins.grid] returns.

    ``cells``: one row per (cell, metric): the factors, then [`compare`][vcpulab.twins.compare]'s
    columns. ``directions``: one row per pair of cells that differ in one
    factor and per direction metric: the real and simulated differences, the
    real difference's significance, and whether the signs agree.
    ``no_twin``: experiments without a twin and why. ``calibration``: the
    [`Calibration`][vcpulab.twins.Calibration] measured before the first cell
    (every cell's, unless ``per_cell_calibration``); ``cell_calibrations``:
    the one each cell's twin used, by cell name (the cells' ``cal_*`` columns
    carry its main values). ``no_real``: cells whose every real trial
    missed its deadline; ``failed``: cells whose comparison raised
    (``"ValueError: …"``), the other cells kept.
    """

    cells: pl.DataFrame
    directions: pl.DataFrame
    no_twin: list[tuple[str, str]]
    calibration: Calibration
    #: cells whose every real trial missed its deadline, with the error
    no_real: list[tuple[str, str]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    #: cells whose comparison raised, with the exception's type and message
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: the calibration each compared cell's twin used, by cell name
    cell_calibrations: dict[str, Calibration] = field(default_factory=dict)
    #: an interleaved grid's cost pairs, in the order measured: ``t_s`` (from
    #: the first real trial), ``path_insn_ns``, ``loop_insn_ns``; None otherwise
    cost_pairs: pl.DataFrame | None = None
    #: the real runs behind each cell, by cell name: kept with ``keep_runs``,
    #: and in the partial grid of an interleaved grid interrupted before its
    #: twins (whose cells are not compared yet)
    real_runs: dict[str, list[Run]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The agreement numbers (see [`line`][vcpulab.twins.Grid.line])."""
        c = self.cells.filter(pl.col("informative"))
        out: dict[str, Any] = {"cells": self.cells["cell"].n_unique()}
        for m in (
            "acq_per_s",
            "wait_per_acq_us",
            "rtt_median_us",
            "halt_exits_per_s",
            "polled_per_halt",
            "ticks_per_s",
            "ctx_switches_per_vcpu_s",
            "items_per_s",
            "first_worker_share",
            "poll_hit_share",
        ):
            g = c.filter(pl.col("metric") == m)
            out[f"{m}_informative"] = g.height
            out[f"{m}_within_25pct"] = float((g["rel_err"] <= 0.25).mean()) if g.height else float("nan")  # type: ignore[arg-type]
        st = self.cells.filter(pl.col("metric") == "steal_fraction")
        out["steal_cells"] = st.height
        out["steal_within_0.10"] = float(((st["sim"] - st["real"]).abs() <= 0.10).mean()) if st.height else float("nan")  # type: ignore[arg-type]
        out["steal_by_construction"] = int(st["steal_by_construction"].sum()) if st.height else 0
        for key, metric in (
            ("ks_median", "steal_per_10ms"),
            ("ks_slice_median", "slice_ns"),
            ("ks_wakeup_median", "wakeup_latency_ns"),
        ):
            ks = self.cells.filter((pl.col("metric") == metric) & pl.col("ks").is_not_nan())["ks"]
            out[key] = float(ks.median()) if ks.len() else float("nan")  # type: ignore[arg-type]
        d = self.directions.filter(pl.col("significant"))
        out["directions"] = d.height
        out["directions_agree"] = int(d["agree"].sum()) if d.height else 0
        per_cell = self.cells.group_by("cell").agg(
            pl.col("disturbed_trials").first(), pl.col("trials").first(), pl.col("other_share_max").first()
        )
        out["cells_disturbed"] = int((per_cell["disturbed_trials"] > 0).sum())
        if "cal_path_insn_ns" in self.cells.columns and self.cells.height:
            # how far the host moved between the cells' calibrations (1.0 with one shared calibration)
            p = self.cells["cal_path_insn_ns"].cast(pl.Float64)
            out["calibration_spread"] = float(p.max()) / float(p.min())  # type: ignore[arg-type]
        out["other_share_median"] = float(per_cell["other_share_max"].median())  # type: ignore[arg-type]
        if self.cost_pairs is not None and self.cost_pairs.height:
            # how far the emulation's cost moved over an interleaved grid's trials
            a = self.cost_pairs["path_insn_ns"].cast(pl.Float64)
            out["cost_pairs"] = self.cost_pairs.height
            out["cost_pairs_path_median_ns"] = float(a.median())  # type: ignore[arg-type]
            out["cost_pairs_spread"] = float(a.max()) / float(a.min())  # type: ignore[arg-type]
        if self.config.get("speed_step") is not None and "speed_edge" in self.cells.columns:
            # cells whose twin moves a compared metric by more than SPEED_EDGE_GAIN x the speed step
            edge = c.filter(pl.col("speed_edge").fill_null(False))
            out["speed_edge_cells"] = edge["cell"].n_unique()
            out["speed_edges"] = sorted(f"{r['cell']}: {r['metric']}" for r in edge.iter_rows(named=True))
        return out

    def line(self) -> str:
        """One line of agreement numbers (the CI prints it)."""
        s = self.summary()
        pct = lambda x: "n/a" if x != x else f"{x:.0%}"
        return (
            f"twins: {s['cells']} cells; within 25 %: throughput {pct(s['acq_per_s_within_25pct'])} of "
            f"{s['acq_per_s_informative']}, wait {pct(s['wait_per_acq_us_within_25pct'])} of {s['wait_per_acq_us_informative']}, "
            f"MSI/IPI rtt {pct(s['rtt_median_us_within_25pct'])} of {s['rtt_median_us_informative']}, "
            f"halt exits {pct(s['halt_exits_per_s_within_25pct'])} of {s['halt_exits_per_s_informative']}, "
            f"polled share {pct(s['polled_per_halt_within_25pct'])} of {s['polled_per_halt_informative']}"
            + (
                f", wake items {pct(s['items_per_s_within_25pct'])} of {s['items_per_s_informative']}"
                if s["items_per_s_informative"]
                else ""
            )
            + "; "
            f"steal within 0.10: {pct(s['steal_within_0.10'])} of {s['steal_cells']} "
            f"({s['steal_by_construction']} by construction); directions agree {s['directions_agree']}/{s['directions']}; "
            f"KS median {s['ks_median']:.2f}"
            + (
                f" (run slices {s['ks_slice_median']:.2f}, wake-ups {s['ks_wakeup_median']:.2f})"
                if s["ks_slice_median"] == s["ks_slice_median"]
                else ""
            )
            + f"; real cells disturbed {s['cells_disturbed']}/{s['cells']} "
            f"(other tasks' share median {s['other_share_median']:.0%})"
            + (
                f"; calibrated per cell (path_insn_ns spread {s['calibration_spread']:.2f}x)"
                if self.config.get("per_cell_calibration") and "calibration_spread" in s
                else ""
            )
            + (
                f"; interleaved ({s['cost_pairs']} cost pairs across the trials: path_insn_ns median "
                f"{s['cost_pairs_path_median_ns']:.0f} ns, spread {s['cost_pairs_spread']:.2f}x)"
                if "cost_pairs" in s
                else ""
            )
            + (
                f"; on a speed edge (±{self.config['speed_step']:.0%} emulation speed): "
                f"{s['speed_edge_cells']}/{s['cells']} cells"
                if "speed_edge_cells" in s
                else ""
            )
        )

    def table(self, metrics: Sequence[str] | None = None) -> str:
        """Every cell as a Markdown table: factors, real [CI], sim [CI], relative error, KS."""
        c = self.cells if metrics is None else self.cells.filter(pl.col("metric").is_in(list(metrics)))

        def num(x: float) -> str:
            if x != x:
                return "–"
            return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"

        lines = [
            "| cell | metric | real [95 % CI] | sim [95 % CI] | rel. err | KS | other load |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in c.iter_rows(named=True):
            ci_r = f" [{num(r['real_lo'])}, {num(r['real_hi'])}]" if r["real_lo"] == r["real_lo"] else ""
            ci_s = f" [{num(r['sim_lo'])}, {num(r['sim_hi'])}]" if r["sim_lo"] == r["sim_lo"] else ""
            flag = "" if r["informative"] else " (uninformative)"
            rel = "–" if r["rel_err"] != r["rel_err"] else f"{r['rel_err']:.0%}"
            lines.append(
                f"| {r['cell']} | {r['metric']}{flag} | {num(r['real'])}{ci_r} | {num(r['sim'])}{ci_s} | {rel} | "
                f"{num(r['ks'])} | {r['other_share_max']:.0%} |"
            )
        return "\n".join(lines)


def cell_name(exp: Experiment) -> str:
    """A grid cell's short name for tables, from [`cell_factors`][vcpulab.twins.cell_factors]
    (e.g. ``"tas 50/50 3v/1c"``: 3 vCPUs on 1 host CPU)."""
    f = cell_factors(exp)
    w = f["workload"]
    hp = "" if f["halt_poll_ns"] < 0 else f" poll{f['halt_poll_ns'] // 1000}us"
    if f["scheduler"] != "host":
        hp += f" [{f['scheduler']}]"
    if w in ("SpinLock", "PvSpinLock"):
        return f"{f['kind']} {f['hold']}/{f['think']} {f['vcpus']}v/{f['cpus']}c{hp}"
    if w == "MsiPingPong":
        return f"msi gap{f['gap_us']:g}us{hp}"
    if w == "IpiPingPong":
        return f"ipi gap{f['gap_us']:g}us {f['vcpus']}v/{f['cpus']}c{hp}"
    if w == "IdleTicks":
        return f"ticks {f['hz']}Hz {f['vcpus']}v/{f['cpus']}c{hp}"
    if w == "WakePlacement":
        mailbox = f" mailbox{f['poll']}" if f["poll"] > 0 else ""
        return f"wake {f['kind']}{mailbox} {f['vcpus']}v/{f['cpus']}c{hp}"
    return f"{w} {f['vcpus']}v/{f['cpus']}c{hp}"


#: (factor, metric, expected sign of metric(high level) − metric(low level) or 0 if not asserted)
DIRECTION_METRICS = (
    "acq_per_vcpu_s",
    "wait_per_acq_us",
    "polled_per_halt",
    "halt_exits_per_s",
    "rtt_median_us",
    "items_per_s",
    "first_worker_share",
    "poll_hit_share",
)


def directions(cells: pl.DataFrame) -> pl.DataFrame:
    """Between-cell comparisons: for each pair of cells that differ in exactly
    one factor (adjacent levels) and each metric of [`DIRECTION_METRICS`][vcpulab.twins.DIRECTION_METRICS],
    the real and the simulated difference (high level − low level), whether
    the real one is significant (the trials' 95 % intervals do not overlap,
    or, with one trial, it exceeds 10 % of the larger value) and whether the
    signs agree."""
    c = cells.with_columns(
        pl.when(pl.col("metric") == "acq_per_s")
        .then(pl.lit("acq_per_vcpu_s"))
        .otherwise(pl.col("metric"))
        .alias("metric"),
        *[
            pl.when(pl.col("metric") == "acq_per_s").then(pl.col(x) / pl.col("vcpus")).otherwise(pl.col(x)).alias(x)
            for x in ("real", "real_lo", "real_hi", "sim", "sim_lo", "sim_hi")
        ],
    ).filter(pl.col("metric").is_in(list(DIRECTION_METRICS)))
    rows = []
    recs = c.iter_rows(named=True)
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        by_metric.setdefault(r["metric"], []).append(r)
    present = [f for f in FACTORS if f in cells.columns]
    factors = [f for f in present if f != "workload"]
    for m, rs in by_metric.items():
        for fac in factors:
            groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
            for r in rs:
                key = tuple(r[f] for f in present if f != fac)
                groups.setdefault(key, []).append(r)
            for g in groups.values():
                g = sorted(g, key=lambda r: r[fac])
                for lo, hi in zip(g, g[1:]):
                    dr, ds = hi["real"] - lo["real"], hi["sim"] - lo["sim"]
                    if dr != dr or ds != ds:
                        continue
                    if lo["real_lo"] == lo["real_lo"] and hi["real_lo"] == hi["real_lo"]:
                        sig = hi["real_lo"] > lo["real_hi"] or lo["real_lo"] > hi["real_hi"]
                    else:
                        sig = abs(dr) > 0.10 * max(abs(hi["real"]), abs(lo["real"]), 1e-12)
                    rows.append(
                        dict(
                            metric=m,
                            factor=fac,
                            low=lo["cell"],
                            high=hi["cell"],
                            real_diff=dr,
                            sim_diff=ds,
                            significant=bool(sig),
                            agree=bool(np.sign(dr) == np.sign(ds)),
                        )
                    )
    schema = {
        "metric": pl.Utf8,
        "factor": pl.Utf8,
        "low": pl.Utf8,
        "high": pl.Utf8,
        "real_diff": pl.Float64,
        "sim_diff": pl.Float64,
        "significant": pl.Boolean,
        "agree": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def grid(
    experiments: Sequence[Experiment] | None = None,
    trials: int = 3,
    seeds: int = 3,
    cal: Calibration | None = None,
    load: Literal["measured", "one_task", "none"] = "measured",
    progress: bool | None = None,
    trace: bool = False,
    per_cell_calibration: bool = False,
    host_speed: bool | str = True,
    speed_step: float | None = None,
    interleave: bool | None = None,
    order_seed: int = 0,
    keep_runs: bool = False,
) -> Grid:
    """Run every experiment on real KVM (``trials`` times) and its twin
    (``seeds`` seeds), compare ([`compare`][vcpulab.twins.compare]) and derive the between-cell
    directions. ``experiments`` default: [`default_grid`][vcpulab.twins.default_grid]. ``trace``: the
    real trials are traced and each cell gets its run-slice and wake-up
    latency KS rows ([`compare`][vcpulab.twins.compare]).

    ``per_cell_calibration``: measure the host again
    ([`calibrate`][vcpulab.twins.calibrate], on ``cal``'s CPU, about 10 s)
    right before each cell's real trials, and give that cell's twin this
    calibration. The emulated instruction's cost here drifts by up to ~40 %
    within minutes, and a twin follows its calibration; measured seconds
    before the trials it follows the host the trials ran on. The grid's
    ``summary()`` reports ``calibration_spread`` (the largest over the
    smallest ``path_insn_ns`` of the cells). ``host_speed``: the twins'
    host speed, as [`compare`][vcpulab.twins.compare]'s. ``speed_step`` (e.g. 0.1):
    every cell's twin also at a faster and a slower emulation, as
    [`compare`][vcpulab.twins.compare]'s; ``summary()`` then counts the cells with a metric on
    a regime's edge (``speed_edge_cells``) and the line says how many.

    ``interleave`` (None, the default: True unless ``per_cell_calibration``;
    until 0.3.33 every grid ran cell after cell, ``interleave=False``): the
    real trials run in rounds, one trial of every cell
    per round in an order shuffled afresh each round (``order_seed`` seeds
    it; kept in ``config``), and before each trial one cost pair on
    ``cal``'s CPU (the last usable one for a calibration of CPUs this
    process may not use; step 1 of [`calibrate`][vcpulab.twins.calibrate], ~0.2 s; a grid of fewer than
    [`MIN_COST_PAIRS`][vcpulab.twins.MIN_COST_PAIRS] trials measures that many pairs in all,
    spread evenly before its trials); after the last
    round every cell's twin runs with the pairs' median costs
    ([`median_costs`][vcpulab.twins.median_costs]; in ``Grid.cost_pairs``, and the line
    gives their median and spread). Each cell's trials and the costs its
    twin is given then span the same minutes, so a slow spell of the host
    (the cost of an emulated instruction here moves up to ~1.6x for
    minutes, docs/twins.md items 13 and 16) falls on every cell and on the
    twins alike, instead of on the cells that happened to run in it or on
    every twin through the calibration's moment; and the cells' order no
    longer lines up with the host's drift, which a between-cell direction
    would otherwise read as an effect. Not with ``per_cell_calibration``
    (ValueError). ``keep_runs``: keep every cell's real runs in
    ``Grid.real_runs``.

    Every argument is checked before the first real trial; a cell on CPUs
    this process may not use is recorded in [`Grid.no_real`][vcpulab.twins.Grid.no_real], and one
    whose comparison fails in [`Grid.failed`][vcpulab.twins.Grid.failed]; the grid goes on. Ctrl-C raises
    ``KeyboardInterrupt`` within about a second; its ``partial`` is the
    [`Grid`][vcpulab.twins.Grid] of the cells that had finished. ``progress``: a progress
    bar over the cells (tqdm, on stderr) with a line per cell (its other
    tasks' share, or why it has no comparison); None (default): on in a
    terminal or Jupyter, off otherwise. An interleaved grid interrupted
    before its twins ran has compared no cell: its ``partial`` keeps the
    real runs so far in ``real_runs`` (and the cost pairs)."""
    check_int("trials", trials, 1, 1000)
    check_int("seeds", seeds, 1, 1000)
    check_bool("trace", trace)
    check_bool("per_cell_calibration", per_cell_calibration)
    if interleave is None:
        interleave = not per_cell_calibration
    check_bool("interleave", interleave)
    check_bool("keep_runs", keep_runs)
    order_seed = check_int("order_seed", order_seed, 0, 2**63 - 1)
    if interleave and per_cell_calibration:
        raise ValueError(
            "interleave and per_cell_calibration exclude each other: an interleaved grid's cells have no "
            "'right before' (its twins take the costs measured across all the trials)"
        )
    check_host_speed(host_speed)
    if speed_step is not None:
        speed_step = check_float("speed_step", speed_step, 0.0, 0.5, lo_open=True)
    if progress is not None:
        check_bool("progress", progress)
    if load not in ("measured", "one_task", "none"):
        raise ValueError(f"load must be 'measured', 'one_task' or 'none', got {load!r}")
    if cal is not None:
        check_type("cal", cal, Calibration)  # before calibrate() would measure for a falsy one
    exps = check_seq("experiments", experiments, "Experiments") if experiments is not None else None
    for e in exps or ():
        check_type("experiments entry", e, Experiment)
    if per_cell_calibration and cal is not None:
        from vcpulab import _core

        if cal.cpu not in _core.allowed_cpus():
            raise ValueError(
                f"per_cell_calibration measures on cal's CPU {cal.cpu}, which this process may not use "
                f"(allowed: {sorted(_core.allowed_cpus())})"
            )
    cal = cal or calibrate()
    if exps is None:
        exps = default_grid()
    frames: list[pl.DataFrame] = []
    no_twin: list[tuple[str, str]] = []
    no_real: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    cell_cals: dict[str, Calibration] = {}
    config = {
        "trials": trials,
        "seeds": seeds,
        "load": load,
        "trace": trace,
        "per_cell_calibration": per_cell_calibration,
        "speed_step": speed_step,
        "interleave": interleave,
        "order_seed": order_seed if interleave else None,
    }
    cost_rows: list[dict[str, float]] = []
    real_runs: dict[str, list[Run]] = {}

    def result() -> Grid:
        cells = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        first = ["cell", *FACTORS]
        cells = cells.select(first + [c for c in cells.columns if c not in first]) if frames else cells
        return Grid(
            cells=cells,
            directions=directions(cells) if frames else pl.DataFrame(),
            no_twin=no_twin,
            calibration=cal,
            no_real=no_real,
            config=config,
            failed=failed,
            cell_calibrations=dict(cell_cals),
            cost_pairs=pl.DataFrame(
                cost_rows, schema={"t_s": pl.Float64, "path_insn_ns": pl.Float64, "loop_insn_ns": pl.Float64}
            )
            if interleave
            else None,
            real_runs={k: list(v) for k, v in real_runs.items()},
        )

    def state(bar: Bar) -> _GridRun:
        return _GridRun(seeds, load, trace, host_speed, speed_step, bar, frames, no_twin, no_real, failed, cell_cals)

    if interleave:
        with Bar(len(exps) * (trials + 1), "vcpulab.twins.grid", progress) as bar:
            _interleaved(state(bar), exps, cal, trials, order_seed, keep_runs, cost_rows, real_runs, result)
        return result()

    with Bar(len(exps), "vcpulab.twins.grid", progress) as bar:
        st = state(bar)
        try:
            for i, exp in enumerate(exps):
                try:
                    _grid_cell(
                        st, i, exp, len(exps), cal, per_cell_calibration, trials, real_runs if keep_runs else None
                    )
                finally:
                    bar.update(1)
        except KeyboardInterrupt as e:
            keep_partial(e, result(), call="twins.grid", done=len(frames), total=len(exps), unit="cells")
            raise
    return result()


#: the fewest cost pairs an interleaved [`grid`][vcpulab.twins.grid] measures: a grid of fewer
#: real trials measures ceil(MIN_COST_PAIRS / trials) before each. Measured here
#: (2026-12-07, 30 pairs back to back in 7.3 s): one pair's path cost scatters
#: with a coefficient of variation of 0.25 (375-964 ns), and the median of 15
#: such pairs by 0.12, of 3 by 0.20 (bootstrap); a grid's pairs spread 2.9-3.1x
#: (docs/twins.md item 16)
MIN_COST_PAIRS = 15

#: the calibration values each grid cell carries as ``cal_<key>`` columns
#: (the emulated instruction costs, vcpulab's scheduler costs and the IPI
#: wake-up with its spread, a blocked halt's CPU: those that drift with
#: the host; NaN where the calibration lacks one)
CELL_CALIBRATION_KEYS = (
    "path_insn_ns",
    "loop_insn_ns",
    "uexit_ns",
    "spin_iter_ns",
    "ipi_wake_ns",
    "ipi_wake_spread",
    "halt_wake_ns",
    "halt_wake_spread",
)


@dataclass
class _GridRun:
    """What every cell of one [`grid`][vcpulab.twins.grid] call shares: how its
    twins are compared (``seeds``, ``load``, ``trace``, ``host_speed``,
    ``speed_step``, as [`compare`][vcpulab.twins.compare]'s), its progress bar, and where
    its outcomes go (``frames``, ``no_twin``, ``no_real``, ``failed``,
    ``cell_cals``: the [`Grid`][vcpulab.twins.Grid]'s fields)."""

    seeds: int
    load: Literal["measured", "one_task", "none"]
    trace: bool
    host_speed: bool | str
    speed_step: float | None
    bar: Bar
    frames: list[pl.DataFrame]
    no_twin: list[tuple[str, str]]
    no_real: list[tuple[str, str]]
    failed: list[tuple[str, str]]
    cell_cals: dict[str, Calibration]

    def has_twin_and_runs(self, exp: Experiment, cal: Calibration, tag: str) -> bool:
        """Whether ``exp`` has a twin and can run here; else why not, appended to
        ``no_twin`` (a line above the bar) or ``no_real``."""
        name = cell_name(exp)
        try:
            twin(exp, cal)
        except ValueError as e:
            self.no_twin.append((name, str(e)))
            self.bar.write(f"{tag}{name}: no twin: {e}")
            return False
        try:
            exp.check_runnable()
        except ValueError as e:
            self.no_real.append((name, str(e)))
            return False
        return True

    def fail(self, name: str, e: BaseException, tag: str = "") -> None:
        """``name``'s comparison raised ``e``: into ``failed``, a line above the bar."""
        self.failed.append((name, f"{type(e).__name__}: {e}"))
        self.bar.write(f"{tag}{name}: failed: {type(e).__name__}: {e}")

    def compare_cell(self, exp: Experiment, runs: list[Run], failures: list[str], cal: Calibration, tag: str) -> None:
        """Compare a cell's real ``runs`` with its twin under ``cal`` and append the
        rows, with the cell's factors and ``cal_*`` columns, to ``frames`` (or why
        not to ``failed``)."""
        name = cell_name(exp)
        try:
            c = _compare_rows(
                exp, runs, failures, self.seeds, cal, self.load, self.trace, self.host_speed, self.speed_step
            )
        except (ValueError, RuntimeError, OSError) as e:
            self.fail(name, e, tag)
            return
        f = cell_factors(exp)
        cal_cols = {f"cal_{k}": cal[k] if k in cal.values else float("nan") for k in CELL_CALIBRATION_KEYS}
        self.frames.append(
            c.with_columns(
                pl.lit(name).alias("cell"),
                *[pl.lit(v).alias(k) for k, v in f.items()],
                *[pl.lit(v, dtype=pl.Float64).alias(k) for k, v in cal_cols.items()],
            )
        )
        self.cell_cals[name] = cal
        self.bar.write(f"{tag}{name}: other tasks {float(c['other_share_max'][0]):.0%}")


def _grid_cell(
    st: _GridRun,
    i: int,
    exp: Experiment,
    n: int,
    cal: Calibration,
    recalibrate: bool,
    trials: int,
    real_runs: dict[str, list[Run]] | None = None,
) -> None:
    """One cell of a sequential [`grid`][vcpulab.twins.grid]: its ``trials`` real runs, then
    `_GridRun.compare_cell`; ``recalibrate``: measure the host again on
    ``cal``'s CPU before the real trials. ``real_runs``: where to keep the
    cell's real runs (None: not kept)."""
    name, tag = cell_name(exp), f"[{i + 1}/{n}] "
    if not st.has_twin_and_runs(exp, cal, tag):
        return
    if recalibrate:
        cal = calibrate(cal.cpu, refresh=True)
    failures: list[str] = []
    try:
        runs = run_real(exp, trials, failures, cal, trace=st.trace)
    except TimeoutError as e:
        st.no_real.append((name, str(e)))
        st.bar.write(f"{tag}{name}: every real trial missed its deadline: {e}")
        return
    except (ValueError, RuntimeError, OSError) as e:
        st.fail(name, e, tag)
        return
    if real_runs is not None:
        real_runs[name] = runs
    st.compare_cell(exp, runs, failures, cal, tag)


def _interleaved(
    st: _GridRun,
    exps: Sequence[Experiment],
    cal: Calibration,
    trials: int,
    order_seed: int,
    keep_runs: bool,
    cost_rows: list[dict[str, float]],
    real_runs: dict[str, list[Run]],
    result: Any,
) -> None:
    """The interleaved [`grid`][vcpulab.twins.grid]: ``trials`` rounds of one real trial per
    cell, each after a cost pair on ``cal``'s CPU, the cells shuffled each
    round (``random.Random(order_seed)``; at least [`MIN_COST_PAIRS`][vcpulab.twins.MIN_COST_PAIRS]
    pairs in all, several before each trial of a small grid); then every cell's twin with the
    pairs' median costs. Fills ``st``'s lists, ``cost_rows`` and ``real_runs`` in place; Ctrl-C raises
    ``KeyboardInterrupt`` whose ``partial`` is ``result()`` (the real runs
    and cost pairs so far, or the cells compared so far)."""
    from vcpulab import _core

    bar = st.bar
    live = []
    for i, e in enumerate(exps):
        if st.has_twin_and_runs(e, cal, f"[{i + 1}/{len(exps)}] "):
            live.append(e)
        else:
            bar.update(trials + 1)
    names = {id(e): cell_name(e) for e in live}
    fails: dict[str, list[str]] = {names[id(e)]: [] for e in live}
    for e in live:
        real_runs.setdefault(names[id(e)], [])
    allowed = sorted(_core.allowed_cpus())
    # the calibration's CPU, where calibrate measured its pairs; a calibration made
    # elsewhere (the reference one) on a CPU this process may not use: the last usable one
    pair_cpu = cal.cpu if cal.cpu in allowed else allowed[-1]
    rng = random.Random(order_seed)
    t0 = time.monotonic()
    n_trials = len(live) * trials
    per_trial = max(1, -(-MIN_COST_PAIRS // max(n_trials, 1)))  # ceil
    dropped: set[str] = set()  # cells whose real trial raised: in st.failed, no more trials
    done = 0
    try:
        for rnd in range(trials):
            order = list(live)
            rng.shuffle(order)
            for exp in order:
                name = names[id(exp)]
                if name not in dropped:
                    for _ in range(per_trial):
                        a, b, _ = _cost_pair(pair_cpu)
                        cost_rows.append({"t_s": time.monotonic() - t0, "path_insn_ns": a, "loop_insn_ns": b})
                    try:
                        real_runs[name] += run_real(exp, 1, fails[name], cal, trace=st.trace)
                    except TimeoutError:
                        pass  # run_real put its message in fails[name]
                    except (ValueError, RuntimeError, OSError) as e:
                        st.fail(name, e)
                        dropped.add(name)
                done += 1
                bar.update(1)
            bar.write(f"round {rnd + 1}/{trials}: {done}/{n_trials} real trials")
    except KeyboardInterrupt as e:
        keep_partial(e, result(), call="twins.grid", done=done, total=n_trials, unit="real trials (none compared)")
        raise
    span = median_costs(
        cal,
        [(r["path_insn_ns"], r["loop_insn_ns"]) for r in cost_rows] or [(cal["path_insn_ns"], cal["loop_insn_ns"])],
        f"measured on CPU {pair_cpu} before each of the grid's real trials",
    )
    try:
        for k, exp in enumerate(live):
            name = names[id(exp)]
            runs = real_runs[name]
            if name in dropped:
                pass
            elif not runs:
                msg = fails[name][-1] if fails[name] else "no real trial"
                st.no_real.append((name, msg))
                bar.write(f"{name}: every real trial missed its deadline: {msg}")
            else:
                st.compare_cell(exp, runs, fails[name], span, f"[{k + 1}/{len(live)}] ")
            bar.update(1)
    except KeyboardInterrupt as e:
        keep_partial(e, result(), call="twins.grid", done=len(st.frames), total=len(live), unit="cells")
        raise
    if not keep_runs:
        real_runs.clear()
