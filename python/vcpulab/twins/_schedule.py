"""Decision by decision: a real run's ``Run.schedule`` against its twin's
``sim.Result.schedule`` ([`token_holds`][vcpulab.twins.token_holds],
[`compare_schedules`][vcpulab.twins.compare_schedules]).

Both logs have one row per run-token hand-off with the same columns and
reasons ([`vcpulab.sched.WHY`][vcpulab.sched.WHY]); a token *hold* is the
time from one row that gives a CPU's token to a vCPU to the next row on that
CPU. The rates of each reason and the holds that end in it say whether the
twin's scheduler decides as often, for the same reasons, as the real one:
the metrics of [`compare`][vcpulab.twins.compare] (throughput, waits) are
the sum of those decisions and cannot tell which decision differs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np
import polars as pl

from vcpulab import sim
from vcpulab._checks import check_bool, check_int
from vcpulab.sched import WHY
from vcpulab.twins._distributions import _pct, _step_ecdf

__all__ = ["SCHEDULE_COLUMNS", "compare_schedules", "token_holds"]

#: the columns a decision log needs
SCHEDULE_COLUMNS = ("t_ns", "pcpu", "out_vm", "out_vcpu", "in_vm", "in_vcpu", "why")


def token_holds(schedule: pl.DataFrame, end_ns: int) -> pl.DataFrame:
    """One row per token hold of a decision log (a real ``Run.schedule`` or
    a simulated ``Result.schedule``): ``vm``, ``vcpu``, ``pcpu``,
    ``start_ns``, ``end_ns``, ``held_ns``, ``why_in`` (the reason of the
    grant), ``why_out`` (the reason of the next decision on that CPU;
    ``"end"`` for a hold still open at ``end_ns``, which closes it). A
    ``watchdog`` row (the real watchdog kicked a holder that overran its
    slice; it keeps the token) ends nothing. ``end_ns``: the run's end on
    the log's clock (a real run: its deadline, or ``wall_s`` × 1e9 if its
    programs ended first; a simulated one: its duration or, with an
    iteration count, its wall time); decisions after it (a real run's
    threads handing their tokens on as each sees the deadline pass, logged
    ``done``) are not the run's, and a hold open at it is closed there."""
    missing = [c for c in SCHEDULE_COLUMNS if c not in schedule.columns]
    if missing:
        raise ValueError(f"token_holds needs a decision log with columns {SCHEDULE_COLUMNS}; missing {missing}")
    end_ns = check_int("end_ns", end_ns, 0, 2**63 - 1)
    d = (
        schedule.filter((pl.col("why").cast(pl.String) != "watchdog") & (pl.col("t_ns") <= end_ns))
        .with_row_index("_row")
        .with_columns(pl.col("why").cast(pl.String), pl.col("t_ns").cast(pl.Int64), pl.col("pcpu").cast(pl.Int64))
        .sort(["pcpu", "t_ns", "_row"])
    )
    d = d.with_columns(
        pl.col("t_ns").shift(-1).over("pcpu").alias("_next_t"),
        pl.col("why").shift(-1).over("pcpu").alias("_next_why"),
    )
    holds = d.filter(pl.col("in_vcpu") >= 0).select(
        pl.col("in_vm").cast(pl.Int64).alias("vm"),
        pl.col("in_vcpu").cast(pl.Int64).alias("vcpu"),
        "pcpu",
        pl.col("t_ns").alias("start_ns"),
        pl.col("_next_t").fill_null(pl.lit(end_ns, pl.Int64)).clip(upper_bound=end_ns).alias("end_ns"),
        pl.col("why").alias("why_in"),
        pl.col("_next_why").fill_null(pl.lit("end")).alias("why_out"),
    )
    holds = holds.with_columns(pl.max_horizontal(pl.col("end_ns"), pl.col("start_ns")).alias("end_ns"))
    return holds.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("held_ns")).sort(["start_ns", "pcpu"])


def _sim_end_ns(r: sim.Result) -> int:
    """A simulated run's end: its duration, or its VMs' wall time when a
    VM has an iteration count (the run ends when every thread is done)."""
    if any(v.workload.iterations > 0 for v in r.config.vms):
        return int(r.vms["wall_ns"].max())  # type: ignore[arg-type]
    return int(r.config.duration_ns)


#: a real run's threads see its deadline on their own clocks, up to ~0.1 ms
#: before the decision log's clock reaches ``duration_s`` (measured: the
#: first ``done`` 44 µs early): a ``done`` this close to the deadline is the stop
STOP_MARGIN_NS = 1_000_000


def _real_end_ns(r: Any) -> int:
    """A real run's end on its log's clock: its deadline (``duration_s``),
    or its wall time if its programs ended before it; the first ``done``
    within ``STOP_MARGIN_NS`` before that end is the stop, and the run ends
    just before it."""
    wall = float(r.wall_s)
    duration = (getattr(r, "config", None) or {}).get("duration_s")
    end = int(min(wall, float(duration)) * 1e9) if duration is not None else int(wall * 1e9)
    done = r.schedule.filter(pl.col("why").cast(pl.String) == "done")["t_ns"]
    if done.len() and end - STOP_MARGIN_NS <= int(done.min()) < end:
        end = int(done.min()) - 1
    return end


def _logs(runs: Sequence[Any], real: bool) -> list[tuple[pl.DataFrame, int]]:
    out = []
    for r in runs:
        d = getattr(r, "schedule", None)
        if d is None:
            side = (
                "real Run of experiment.run(..., scheduler=...)" if real else "sim.Result of a traced run (trace=True)"
            )
            raise ValueError(f"compare_schedules needs a decision log on every run: a {side} under vcpulab's scheduler")
        out.append((d, _real_end_ns(r) if real else _sim_end_ns(r)))
    return out


@overload
def compare_schedules(
    real_runs: Any, sim_results: Any, by: str = ..., plot: Literal[False] = ..., rank: bool = ...
) -> pl.DataFrame: ...
@overload
def compare_schedules(
    real_runs: Any, sim_results: Any, by: str, plot: Literal[True], rank: bool = ...
) -> tuple[pl.DataFrame, Any]: ...
@overload
def compare_schedules(
    real_runs: Any, sim_results: Any, *, plot: Literal[True], rank: bool = ...
) -> tuple[pl.DataFrame, Any]: ...
def compare_schedules(
    real_runs: Any, sim_results: Any, by: str = "why_out", plot: bool = False, rank: bool = False
) -> pl.DataFrame | tuple[pl.DataFrame, Any]:
    """The token holds of real runs against their twins', vCPU by vCPU and
    reason by reason.

    ``real_runs``: a [`Run`][vcpulab.experiment.Run] under one of vcpulab's
    schedulers, or a list (trials, pooled); ``sim_results``: a
    ``sim.Result`` with ``trace=True`` under the matching token scheduler
    ([`twin`][vcpulab.twins.twin] makes it; [`run_sim`][vcpulab.twins.run_sim]
    with ``trace_all=True``), or a list (seeds, pooled).

    The holds ([`token_holds`][vcpulab.twins.token_holds]) are classed by
    ``by``: ``"why_out"`` (default), the decision that ended the hold (a
    ``halt`` hold is a run until the vCPU halted, a ``slice`` hold a full
    slice, a ``yield`` hold a grant to the holder's directed yield, ``end``
    a hold the run's end closed), or ``"why_in"``, the decision that granted
    it (``wake``: a woken vCPU took a free token; ``halt``: another vCPU's
    halt handed it on; ``start``; …).

    One row per (vm, vcpu, reason) seen on either side, then the same
    reasons over every vCPU (``vm`` = ``vcpu`` = -1; their hold times pool
    vCPUs that do different work, a mixture whose median can fall between
    its modes: read the per-vCPU rows for times; and the runs are pooled
    by vCPU index, so a mode in which a different vCPU plays one role in
    each run, e.g. starves, averages out: compare one run with one seed to
    see it, or pass ``rank=True``). Columns: ``real_per_s``
    and ``sim_per_s`` (holds per second of run, pooled: holds / summed run
    time), ``ratio`` (sim / real; NaN where the real side has none),
    ``n_real``, ``n_sim``, the medians and 90th percentiles of the holds
    (µs) and ``ks`` (two-sample Kolmogorov-Smirnov distance between the
    two sides' holds; NaN with fewer than 5 on a side). ``plot=True``
    returns ``(frame, matplotlib Figure)``: the empirical distribution
    functions of both sides' holds, one panel per vCPU and reason with at
    least 20 holds on each side (at most 6, the most frequent), log-scaled
    time.

    ``rank=True``: each run's vCPUs are named by their rank in it instead of
    their index, 0 the one with the most holds (ties by index; ``vm`` keeps
    its index), so that a run in which some vCPU starves or hogs the CPUs
    compares with runs in which another vCPU does: the rows read "the
    busiest vCPU", "the next", …"""
    if by not in ("why_out", "why_in"):
        raise ValueError(f"by must be 'why_out' or 'why_in', got {by!r}")
    reals = _logs(real_runs if isinstance(real_runs, list | tuple) else [real_runs], real=True)
    sims = _logs(sim_results if isinstance(sim_results, list | tuple) else [sim_results], real=False)
    if not reals or not sims:
        raise ValueError("compare_schedules needs at least one real and one simulated run")

    check_bool("rank", rank)

    def side(logs: list[tuple[pl.DataFrame, int]]) -> tuple[pl.DataFrame, float]:
        holds = pl.concat([_ranked(token_holds(d, e)) if rank else token_holds(d, e) for d, e in logs])
        return holds.rename({by: "why"}), sum(e for _, e in logs) / 1e9

    rh, rs = side(reals)
    sh, ss = side(sims)
    order = {w: i for i, w in enumerate((*WHY, "end"))}
    keys = pl.concat([rh.select("vm", "vcpu", "why"), sh.select("vm", "vcpu", "why")]).unique()
    per_vcpu = sorted(keys.iter_rows(), key=lambda k: (k[0], k[1], order.get(k[2], 99)))
    pooled = sorted({k[2] for k in per_vcpu}, key=lambda w: order.get(w, 99))
    rows = []
    for vm, vcpu, why in per_vcpu + [(-1, -1, w) for w in pooled]:
        sel = pl.col("why") == why
        if vm >= 0:
            sel = sel & (pl.col("vm") == vm) & (pl.col("vcpu") == vcpu)
        a = rh.filter(sel)["held_ns"].cast(pl.Float64).to_numpy() / 1e3
        b = sh.filter(sel)["held_ns"].cast(pl.Float64).to_numpy() / 1e3
        rr = a.size / rs if rs > 0 else float("nan")
        sr = b.size / ss if ss > 0 else float("nan")
        rows.append(
            dict(
                vm=vm,
                vcpu=vcpu,
                why=why,
                real_per_s=rr,
                sim_per_s=sr,
                ratio=sr / rr if a.size and rr > 0 else float("nan"),
                n_real=int(a.size),
                n_sim=int(b.size),
                real_hold_median_us=_pct(a, 50),
                sim_hold_median_us=_pct(b, 50),
                real_hold_p90_us=_pct(a, 90),
                sim_hold_p90_us=_pct(b, 90),
                ks=_ks(a, b),
            )
        )
    frame = pl.DataFrame(rows)
    return (frame, _plot_holds(frame, rh, sh)) if plot else frame


def _ranked(holds: pl.DataFrame) -> pl.DataFrame:
    """One run's holds with each vCPU renamed by its rank in the run's VM
    (0: the most holds; ties by index)."""
    counts = holds.group_by("vm", "vcpu").len().sort(["vm", "len", "vcpu"], descending=[False, True, False])
    ranks = counts.with_columns(pl.int_range(pl.len()).over("vm").cast(pl.Int64).alias("_rank")).select(
        "vm", "vcpu", "_rank"
    )
    return holds.join(ranks, on=["vm", "vcpu"]).with_columns(pl.col("_rank").alias("vcpu")).drop("_rank")


def _plot_holds(frame: pl.DataFrame, rh: pl.DataFrame, sh: pl.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    shown = (
        frame.filter((pl.col("vcpu") >= 0) & (pl.col("n_real") >= 20) & (pl.col("n_sim") >= 20))
        .sort("n_real", descending=True)
        .head(6)
        .sort("vm", "vcpu")
    )
    n = max(shown.height, 1)
    fig, axes = plt.subplots(1, n, figsize=(3.4 * n, 3.0), squeeze=False)
    if not shown.height:
        axes[0][0].text(0.5, 0.5, "no vCPU and reason with 20 holds on both sides", ha="center", va="center")
        axes[0][0].set_axis_off()
    for ax, row in zip(axes[0], shown.iter_rows(named=True)):
        sel = (pl.col("vm") == row["vm"]) & (pl.col("vcpu") == row["vcpu"]) & (pl.col("why") == row["why"])
        for f, lab, st in ((rh, "real", "-"), (sh, "twin", "--")):
            _step_ecdf(ax, f.filter(sel)["held_ns"].cast(pl.Float64).to_numpy() / 1e3, st, lab)
        ks = "–" if row["ks"] != row["ks"] else f"{row['ks']:.2f}"
        ax.set(
            xscale="log", xlabel="token hold (µs)", title=f"VM {row['vm']} vCPU {row['vcpu']}: {row['why']}, KS {ks}"
        )
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("fraction ≤ x")
    fig.tight_layout()
    return fig


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    from vcpulab.twins._running import ks_distance

    return ks_distance(a, b) if a.size >= 5 and b.size >= 5 else float("nan")
