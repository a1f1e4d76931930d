"""Distributions: a simulated run in the tracing schema of a real one
([`TRACE_COLUMNS`][vcpulab.twins.TRACE_COLUMNS], [`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS],
[`sim_trace_frames`][vcpulab.twins.sim_trace_frames], [`sim_wakeups`][vcpulab.twins.sim_wakeups]), run slices
([`vcpu_slices`][vcpulab.twins.vcpu_slices]) and the real-vs-simulated comparison of run-slice and
wake-up-latency distributions ([`distributions`][vcpulab.twins.distributions])."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np
import polars as pl

from vcpulab import sim, tracing

#: columns of a real run's trace (``Run.trace``; their one home is
#: ``vcpulab.tracing.TRACE_SCHEMA``); [`sim_trace_frames`][vcpulab.twins.sim_trace_frames] gives a
#: simulated run the same trace and wake-up frames
TRACE_COLUMNS = tuple(tracing.TRACE_SCHEMA)
#: columns of a run's wake-ups (``Run.wakeups``, and [`sim_wakeups`][vcpulab.twins.sim_wakeups] for a simulated run;
#: ``vcpulab.tracing.WAKEUPS_SCHEMA``)
WAKEUP_COLUMNS = tuple(tracing.WAKEUPS_SCHEMA)


def _sleep_phase(res: sim.Result) -> tuple[int, bool] | None:
    """(ns, periodic) of the twin's one Sleep phase, or None when the
    simulated guest blocks in anything else (or in more than one way)."""
    vms = res.config.vms
    if len(vms) != 1:
        return None
    ph = vms[0].workload.phases
    sleeps = [p for p in ph if isinstance(p, sim.Sleep)]
    blocking = [p for p in ph if isinstance(p, (sim.Recv, sim.Barrier))]
    if len(sleeps) != 1 or blocking or sleeps[0].dist != "fixed" or sleeps[0].prob != 1.0:
        return None
    return int(sleeps[0].ns), bool(sleeps[0].periodic)


def sim_wakeups(res: sim.Result) -> pl.DataFrame:
    """The wake-ups of a simulated run's vCPUs in the schema of a real run's
    ``Run.wakeups`` ([`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]; ``tid`` is -1), derived from its
    trace (``trace=True``) and its guest's timer.

    The simulator's trace records when each vCPU ran, not when it was woken.
    A vCPU interval that ended because the vCPU blocked in a halt (``why`` =
    ``"halt"``) at ``h`` was woken by its guest's timer at:

    * ``Sleep(ns, periodic=True)`` (the twin of ``IdleTicks``): the first
      multiple of ``ns`` after ``h`` (the timer's grid; a grid point between
      the sleep's start and ``h`` would have ended the halt-poll loop instead);
    * ``Sleep(ns)`` (``MsiPingPong``): ``h + ns``, exact only when the vCPU
      blocked at once, i.e. with halt polling off; with polling on a
      ``ValueError`` says so.

    ``run_ns`` is the start of the vCPU's next interval, ``latency_ns`` the
    difference (the simulator's wake-up latencies, ``Host.wakeup_ipi_ns`` and
    idle-state exits, plus any wait for the CPU). Workloads whose vCPUs never
    block (spin locks) have no wake-ups: an empty frame. Other blocking
    phases (``Recv``, ``Barrier``) raise ``ValueError``: their wake-up times
    are not in the trace.
    """
    if res.trace is None:
        raise ValueError("sim_wakeups needs a run with trace=True")
    schema = dict(tracing.WAKEUPS_SCHEMA)  # the real runs' wake-up columns: one schema for both
    t = res.trace.filter(pl.col("vcpu") >= 0).sort(["vm", "vcpu", "start_ns"])
    if t.filter(pl.col("why") == "halt").height == 0:
        return pl.DataFrame(schema=schema)
    sp = _sleep_phase(res)
    if sp is None:
        raise ValueError(
            "sim_wakeups derives wake-ups from a guest whose only blocking phase is one fixed Sleep; "
            "this run's guest blocks otherwise (Recv, Barrier, several or random sleeps)"
        )
    ns, periodic = sp
    if not periodic and res.config.vms[0].halt_poll.policy != "off":
        raise ValueError(
            "sim_wakeups: with a non-periodic Sleep the wake time is exact only with halt polling off "
            f"(this run's policy is {res.config.vms[0].halt_poll.policy!r})"
        )
    rows: dict[str, list[int]] = {k: [] for k in schema}
    for (vm, vcpu), g in t.group_by(["vm", "vcpu"], maintain_order=True):
        st, en, why = g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["why"].to_list()
        for i in range(len(st) - 1):
            if why[i] != "halt":
                continue
            h = int(en[i])
            wake = (h // ns + 1) * ns if periodic else h + ns
            run = int(st[i + 1])
            if run < wake:  # woken by something other than the timer
                continue
            for k, v in zip(schema, (int(vm), int(vcpu), -1, wake, run, run - wake)):  # type: ignore[call-overload]
                rows[k].append(v)
    return pl.DataFrame(rows, schema=schema)


def sim_trace_frames(res: sim.Result) -> dict[str, pl.DataFrame]:
    """A simulated run as a real run's trace frames: ``{"trace": …, "wakeups": …}``
    with [`TRACE_COLUMNS`][vcpulab.twins.TRACE_COLUMNS] (``tid`` -1, ``comm`` ``"CPU n/KVM"`` for vCPUs
    as vcpulab names its vCPU threads, ``"other"`` for host tasks) and
    [`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]. Tests and notebooks use it to exercise
    [`distributions`][vcpulab.twins.distributions] without a real trace."""
    if res.trace is None:
        raise ValueError("sim_trace_frames needs a run with trace=True")
    tr = res.trace.select(
        pl.col("pcpu").cast(pl.Int64),
        pl.col("start_ns").cast(pl.Int64),
        pl.col("end_ns").cast(pl.Int64),
        pl.col("vm").cast(pl.Int64),
        pl.col("vcpu").cast(pl.Int64),
        pl.lit(-1, dtype=pl.Int64).alias("tid"),
        pl.when(pl.col("vcpu") >= 0)
        .then(pl.format("CPU {}/KVM", pl.col("vcpu")))
        .otherwise(pl.lit("other"))
        .alias("comm"),
    )
    return {"trace": tr, "wakeups": sim_wakeups(res)}


def _frames_of(x: Any) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(trace, wakeups) of a Run (attributes), a mapping, or a (trace, wakeups) pair."""
    if isinstance(x, Mapping):
        return x.get("trace"), x.get("wakeups")
    if isinstance(x, tuple) and len(x) == 2:
        return x[0], x[1]
    return getattr(x, "trace", None), getattr(x, "wakeups", None)


def _check_cols(df: pl.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks the columns {missing} (has {df.columns})")


def vcpu_slices(trace: pl.DataFrame) -> np.ndarray:
    """Run-slice lengths of the vCPU threads, ns: ``end_ns − start_ns`` of every
    trace row with ``vcpu >= 0`` (a real trace's or [`sim_trace_frames`][vcpulab.twins.sim_trace_frames]')."""
    _check_cols(trace, ("start_ns", "end_ns", "vcpu"), "trace")
    t = trace.filter(pl.col("vcpu") >= 0)
    return (t["end_ns"] - t["start_ns"]).cast(pl.Float64).to_numpy()


@overload
def distributions(
    real_frames: Any, sim_result: sim.Result | Sequence[sim.Result], plot: Literal[False] = ...
) -> pl.DataFrame: ...
@overload
def distributions(
    real_frames: Any, sim_result: sim.Result | Sequence[sim.Result], plot: Literal[True]
) -> tuple[pl.DataFrame, Any]: ...
def distributions(
    real_frames: Any,
    sim_result: sim.Result | Sequence[sim.Result],
    plot: bool = False,
) -> pl.DataFrame | tuple[pl.DataFrame, Any]:
    """Real vs simulated distributions, two-sample Kolmogorov-Smirnov per quantity.

    ``real_frames``: a real [`Run`][vcpulab.experiment.Run] with ``trace``
    ([`TRACE_COLUMNS`][vcpulab.twins.TRACE_COLUMNS]) and ``wakeups`` ([`WAKEUP_COLUMNS`][vcpulab.twins.WAKEUP_COLUMNS]) frames,
    a mapping ``{"trace": …, "wakeups": …}``, a (trace, wakeups) pair, or a
    list of these (trials, pooled). ``sim_result``: one or several (seeds,
    pooled) simulated runs with ``trace=True``.

    Quantities: ``slice_ns`` (every vCPU run slice, [`vcpu_slices`][vcpulab.twins.vcpu_slices]) and
    ``wakeup_latency_ns`` (real ``latency_ns``; simulated from
    [`sim_wakeups`][vcpulab.twins.sim_wakeups]). One row each: ``quantity``, ``n_real``, ``n_sim``,
    the medians and 90th percentiles of both sides (ns), ``ks`` (the
    two-sample KS statistic, ``scipy.stats.ks_2samp``) and ``p_value``
    (its exact/asymptotic p-value; NaN with an empty side). A quantity with
    no real frame (``wakeups`` None) or no sample on either side gets NaN.
    ``plot=True`` returns ``(frame, matplotlib Figure)``: both quantities'
    empirical distribution functions, real and simulated, log-scaled time.
    """
    from scipy import stats

    reals = list(real_frames) if isinstance(real_frames, list) else [real_frames]
    sims = [sim_result] if isinstance(sim_result, sim.Result) else list(sim_result)
    if not reals or not sims:
        raise ValueError("distributions needs at least one real and one simulated run")
    samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    r_sl, r_wk = [], []
    for rf in reals:
        tr, wk = _frames_of(rf)
        if tr is not None:
            _check_cols(tr, TRACE_COLUMNS, "real trace")
            r_sl.append(vcpu_slices(tr))
        if wk is not None:
            _check_cols(wk, WAKEUP_COLUMNS, "real wakeups")
            w = wk.filter(pl.col("vcpu") >= 0) if "vcpu" in wk.columns else wk
            r_wk.append(w["latency_ns"].cast(pl.Float64).to_numpy())
    s_sl, s_wk = [], []
    for s in sims:
        f = sim_trace_frames(s)
        s_sl.append(vcpu_slices(f["trace"]))
        s_wk.append(f["wakeups"]["latency_ns"].cast(pl.Float64).to_numpy())
    cat = lambda xs: np.concatenate(xs) if xs else np.empty(0)
    samples["slice_ns"] = (cat(r_sl), cat(s_sl))
    samples["wakeup_latency_ns"] = (cat(r_wk), cat(s_wk))
    rows = []
    for q, (a, b) in samples.items():
        if a.size and b.size:
            res = stats.ks_2samp(a, b)
            ks, pv = float(res.statistic), float(res.pvalue)
        else:
            ks = pv = float("nan")
        rows.append(
            dict(
                quantity=q,
                n_real=int(a.size),
                n_sim=int(b.size),
                real_median_ns=_pct(a, 50),
                sim_median_ns=_pct(b, 50),
                real_p90_ns=_pct(a, 90),
                sim_p90_ns=_pct(b, 90),
                ks=ks,
                p_value=pv,
            )
        )
    frame = pl.DataFrame(rows)
    if not plot:
        return frame
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, (q, (a, b)) in zip(axes, samples.items()):
        for x, lab, st in ((a, "real", "-"), (b, "twin", "--")):
            if x.size:
                _step_ecdf(ax, x / 1e3, st, lab)
        row = frame.filter(pl.col("quantity") == q).row(0, named=True)
        ks_txt = "–" if row["ks"] != row["ks"] else f"{row['ks']:.2f}"
        ax.set(xscale="log", xlabel=f"{q.removesuffix('_ns')} (µs)", ylabel="fraction ≤ x", title=f"{q}: KS {ks_txt}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return frame, fig


def _pct(x: np.ndarray, p: float) -> float:
    """The ``p``-th percentile of ``x``; NaN for an empty sample."""
    return float(np.percentile(x, p)) if x.size else float("nan")


def _step_ecdf(ax: Any, x: np.ndarray, style: str, label: str) -> None:
    """The empirical distribution function of ``x`` on ``ax``, labelled with its size."""
    xs = np.sort(x)
    ax.step(xs, np.arange(1, xs.size + 1) / max(xs.size, 1), style, where="post", label=f"{label} (n={xs.size})")
