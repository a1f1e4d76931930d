"""Running: the real trials of an experiment ([`run_real`][vcpulab.twins.run_real]), its twin's seeds
([`run_sim`][vcpulab.twins.run_sim]) and the comparison of the two, metric by metric
([`compare`][vcpulab.twins.compare], [`ks_distance`][vcpulab.twins.ks_distance], [`FLOORS`][vcpulab.twins.FLOORS])."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import polars as pl

from vcpulab import sim
from vcpulab._checks import check_bool, check_float, check_int, check_seq, check_type
from vcpulab._interrupt import keep_partial, partial_of
from vcpulab.analysis import bounded_interval, value_range
from vcpulab.experiment import IpiPingPong, Run
from vcpulab.twins._calibration import calibrate
from vcpulab.twins._distributions import sim_wakeups, vcpu_slices
from vcpulab.twins._experiment import Experiment
from vcpulab.twins._load import OtherLoad, _task_schedstat, _VmmProbe
from vcpulab.twins._metrics import (
    _DISTS,
    METRICS,
    _metrics_of,
    real_metrics,
    real_steal_intervals,
    sim_metrics,
    sim_steal_intervals,
)
from vcpulab.twins._speed import check_host_speed
from vcpulab.twins._twin import _RUNNABLE, start_gap_of, twin, vcpu_start_of
from vcpulab.twins._values import Calibration, Value, host_knobs
from vcpulab.validation._score import bimodal


def run_real(
    exp: Experiment,
    trials: int = 3,
    failures: list[str] | None = None,
    cal: Calibration | None = None,
    trace: bool = False,
) -> list[Run]:
    """``trials`` real runs of ``exp`` (each records its [`Quality`][vcpulab.quality.Quality]
    and, in ``Run.config["other_load"]``, the other tasks' [`OtherLoad`][vcpulab.twins.OtherLoad]
    as a dict; the short/long boundary is ``cal``'s base slice, else [`host_knobs`][vcpulab.twins.host_knobs]').

    A trial that misses its deadline (``TimeoutError``: an MSI ping-pong whose
    vCPU other tasks kept off its CPU) is left out and its message appended to
    ``failures``; when every trial fails the last error is raised. ``trace``:
    each trial records the kernel's trace (``run(trace=True)``: ``Run.trace``,
    ``Run.wakeups``; docs/tracing.md)."""
    check_int("trials", trials, 1, 1000)
    exp.check_runnable()
    out: list[Run] = []
    last: TimeoutError | None = None
    base_slice = cal["base_slice_ns"] if cal is not None else float(host_knobs()["base_slice_ns"].value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quality is recorded in each Run and reported per cell
        for _ in range(trials):
            try:
                me = {int(t) for t in os.listdir("/proc/self/task")}
                before = _task_schedstat()
                with _VmmProbe(exp.duration_s) as probe:
                    r = exp.run(trace=True) if trace else exp.run()
                after = _task_schedstat()
                own = me | {int(t) for t in r.threads["tid"]} | {int(t) for t in os.listdir("/proc/self/task")}
                share = r.quality.other_share
                window = (r.wall_s * 1e9, len(r.quality.cpus) or len(exp.pcpus))
                r.config["other_load"] = OtherLoad.measure(
                    before, after, own, share, base_slice, probe.result(), window
                ).as_dict()
                out.append(r)
            except TimeoutError as e:
                last = e
                if failures is not None:
                    failures.append(str(e))
            except KeyboardInterrupt as e:
                keep_partial(e, out, call="twins.run_real", done=len(out), total=trials, unit="real trials")
                raise
    if not out and last is not None:
        raise last
    return out


def run_sim(
    exp: Experiment,
    cal: Calibration,
    seeds: int = 3,
    trace: bool = True,
    other_share: float | None = None,
    other_burst_ns: float | None = None,
    other_load: OtherLoad | None = None,
    trace_all: bool = False,
    start_gap_ns: float | None = None,
    vcpu_start_ns: float | None = None,
    host_speed: bool | str = True,
) -> list[tuple[sim.Config, sim.Result]]:
    """The twin run with seeds 0..seeds-1 (``other_share``, ``other_load``,
    ``start_gap_ns``, ``vcpu_start_ns``, ``host_speed``: see [`twin`][vcpulab.twins.twin]).
    ``trace``: traced where a compared quantity needs it; ``trace_all``: every run."""
    check_int("seeds", seeds, 1, 1000)
    out = []
    for s in range(seeds):
        traced = trace_all or type(exp.workload) in _DISTS or isinstance(exp.workload, IpiPingPong)
        cfg = twin(
            exp,
            cal,
            seed=s,
            trace=trace and traced,
            other_share=other_share,
            other_burst_ns=other_burst_ns,
            other_load=other_load,
            start_gap_ns=start_gap_ns,
            vcpu_start_ns=vcpu_start_ns,
            host_speed=host_speed,
        )
        out.append((cfg, sim.run(cfg)))
    return out


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance: the largest difference between
    the two empirical distribution functions (NaN if a sample is empty)."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if a.size == 0 or b.size == 0:
        return float("nan")
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.abs(fa - fb).max())


#: below these (absolute) values on both sides a metric is "uninformative" (0 vs 0)
FLOORS: dict[str, float] = {
    "acq_per_s": 1.0,
    "wait_per_acq_us": 0.0,
    "steal_fraction": 0.02,
    "ctx_switches_per_vcpu_s": 5.0,
    "halt_exits_per_s": 5.0,
    "polled_per_halt": 0.05,
    "poll_hit_share": 0.05,
    "rtt_median_us": 0.0,
    "ticks_per_s": 1.0,
}


#: the calibration's costs of emulated guest instructions: what
#: [`scaled_costs`][vcpulab.twins.scaled_costs] scales together (a faster or
#: slower emulation; the host's own paths, wake-ups and exits, are left alone)
EMULATION_COST_KEYS = ("path_insn_ns", "loop_insn_ns", "spin_iter_ns", "wake_poll_iter_ns")

#: a twin's metric whose change over ±``speed_step`` of the emulation's speed is
#: more than this many times the step (relative to the metric, or to its floor)
#: sits on a regime's edge ([`compare`][vcpulab.twins.compare]'s ``speed_edge``): a rate of
#: CPU-bound guest code moves about once the step, a halt-poll window crossed
#: from caught to blocked many times it
SPEED_EDGE_GAIN = 3.0

#: the smallest size [`speed_gain`][vcpulab.twins.speed_gain] measures a share's change
#: against (a first-worker share of 0.0003 moving to 0.0004 is not a regime's edge)
SPEED_SHARE_FLOOR = 0.05


def scaled_costs(cal: Calibration, factor: float) -> Calibration:
    """``cal`` with every emulated instruction's cost
    ([`EMULATION_COST_KEYS`][vcpulab.twins.EMULATION_COST_KEYS]) times ``factor`` (0.1-10): the
    same host with its guest code emulated that much slower (> 1) or faster."""
    check_type("cal", cal, Calibration)
    factor = check_float("scaled_costs: factor", factor, 0.1, 10.0)
    vals = dict(cal.values)
    for k in EMULATION_COST_KEYS:
        if k in vals:
            v = vals[k]
            vals[k] = Value(float(v.value) * factor, v.unit, f"{v.how}; scaled x{factor:g} (twins.scaled_costs)")
    return dataclasses.replace(cal, values=vals)


def median_costs(cal: Calibration, pairs: Sequence[tuple[float, float]], where: str = "") -> Calibration:
    """``cal`` with its emulated instructions' costs taken over a span of
    time: ``path_insn_ns`` and ``loop_insn_ns`` the medians of ``pairs``
    (``(path_insn_ns, loop_insn_ns)`` of cost pairs measured across it, as
    step 1 of [`calibrate`][vcpulab.twins.calibrate] measures one), and the other emulated
    costs ([`EMULATION_COST_KEYS`][vcpulab.twins.EMULATION_COST_KEYS]: ``spin_iter_ns``,
    ``wake_poll_iter_ns``, loops of a few instructions) scaled with the loop
    cost; the host's own paths (wake-ups, exits) are left alone. ``where``
    says where the pairs were measured (kept in each value's ``how``). The
    interleaved [`grid`][vcpulab.twins.grid] gives its twins this: the cost of
    an emulated instruction here drifts by up to ~1.6x in spells of
    minutes (docs/twins.md, item 16), and costs measured across the same
    minutes as the real trials stand for the speed those trials ran at."""
    check_type("cal", cal, Calibration)
    ps = check_seq("pairs", pairs, "(path_insn_ns, loop_insn_ns) pairs", min_len=1)
    a_s, b_s = [], []
    for p in ps:
        if not (isinstance(p, (tuple, list)) and len(p) == 2):
            raise ValueError(f"median_costs: each pair must be (path_insn_ns, loop_insn_ns), got {p!r}")
        a_s.append(check_float("median_costs: path_insn_ns", p[0], 0.0, 1e9, lo_open=True))
        b_s.append(check_float("median_costs: loop_insn_ns", p[1], 0.0, 1e9, lo_open=True))
    a, b = float(np.median(a_s)), float(np.median(b_s))
    old_b = float(cal["loop_insn_ns"])
    how = (
        f"the median of {len(ps)} cost pairs{' ' + where if where else ''} "
        f"(path {min(a_s):.0f}-{max(a_s):.0f} ns, loop {min(b_s):.0f}-{max(b_s):.0f} ns; twins.median_costs)"
    )
    vals = dict(cal.values)
    vals["path_insn_ns"] = Value(a, "ns", how)
    vals["loop_insn_ns"] = Value(b, "ns", how)
    for k in EMULATION_COST_KEYS:
        if k in vals and k not in ("path_insn_ns", "loop_insn_ns"):
            v = vals[k]
            f = b / old_b if old_b > 0 else 1.0
            vals[k] = Value(float(v.value) * f, v.unit, f"{v.how}; scaled x{f:.3g} with loop_insn_ns ({how})")
    return dataclasses.replace(cal, values=vals)


def speed_gain(metric: str, base: float, faster: float, slower: float, step: float) -> float:
    """How far a twin's ``metric`` moves when the emulation runs ``step``
    faster or slower (``faster``, ``slower``: its means there), in units of
    the step: the larger of the two changes, over ``step`` and over the
    metric's size ``|base|``, taken at least as the metric's
    [`FLOORS`][vcpulab.twins.FLOORS] value and, for a share, as
    [`SPEED_SHARE_FLOOR`][vcpulab.twins.SPEED_SHARE_FLOOR] (so that a quantity near 0 is not
    divided by ~0). NaN where a value is missing."""
    if not all(x == x for x in (base, faster, slower)):
        return float("nan")
    floor = FLOORS.get(metric, 0.0)
    if value_range(metric)[1] == 1.0:
        # a share: changes of a share near 0 are measured against SPEED_SHARE_FLOOR
        floor = max(floor, SPEED_SHARE_FLOOR)
    size = max(abs(base), floor)
    if size == 0:
        return 0.0 if faster == base == slower else float("inf")
    return max(abs(faster - base), abs(slower - base)) / (size * step)


def _on_edge(gain: float, base: float, lo: float, hi: float, faster: float, slower: float) -> bool:
    """``speed_edge``: the gain above [`SPEED_EDGE_GAIN`][vcpulab.twins.SPEED_EDGE_GAIN], and a
    change the seeds' spread does not explain: the shifted runs draw the
    seeds' noise afresh, so a shifted mean must lie farther from ``base``
    than the width of the twin's interval over seeds (``lo`` … ``hi``; NaN
    with one seed: no spread to explain it)."""
    width = hi - lo
    beyond = any(not abs(x - base) <= width for x in (faster, slower))
    return bool(gain > SPEED_EDGE_GAIN and beyond)


def _interval(metric: str, values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of one metric over trials or seeds, inside the range the
    metric cannot leave ([`value_range`][vcpulab.analysis.value_range]: rates and
    times at least 0, shares within [0, 1]). A measured share a hair above 1
    (steal-time area against wall time, clocks read apart) is measurement noise,
    not a new range: then the plain t interval."""
    lo, hi = value_range(metric)
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if (lo is not None and (x < lo).any()) or (hi is not None and (x > hi).any()):
        lo = hi = None
    return bounded_interval(x, 0.95, lo, hi)


def compare(
    exp: Experiment,
    trials: int = 3,
    seeds: int = 3,
    cal: Calibration | None = None,
    real: Sequence[Run] | None = None,
    load: Literal["measured", "one_task", "none"] = "measured",
    trace: bool = False,
    host_speed: bool | str = True,
    speed_step: float | None = None,
) -> pl.DataFrame:
    """Real vs twin, one row per metric (and per KS-compared distribution).

    ``load="measured"`` (default) gives the twin the other load the real
    trials measured: their [`OtherLoad`][vcpulab.twins.OtherLoad] pooled, short tasks as host
    noise and long ones as a background task ([`host_load_for`][vcpulab.twins.host_load_for]);
    ``"one_task"`` the previous model, all of the measured share as one
    background task per CPU ([`background_for`][vcpulab.twins.background_for]); ``"none"`` simulates
    an idle host. The twin's vCPU threads start as the real trials' did
    ([`start_gap_of`][vcpulab.twins.start_gap_of]), and under vcpulab's
    scheduler each twin vCPU runs the real vCPUs' measured start
    ([`vcpu_start_of`][vcpulab.twins.vcpu_start_of]).

    Columns: ``metric``, ``unit``, ``real`` (mean over trials) with
    ``real_lo``/``real_hi`` (95 % t interval inside the metric's range,
    [`bounded_interval`][vcpulab.analysis.bounded_interval]; NaN with one trial), ``sim``
    with ``sim_lo``/``sim_hi`` (over seeds), ``rel_err`` = |sim − real| /
    |real|, ``informative`` (False when both sides are below the metric's
    floor, e.g. 0 vs 0 halts), ``ks`` (two-sample Kolmogorov-Smirnov
    distance, distributions only), ``real_values`` / ``sim_values`` (the
    metric per real trial and per twin seed, behind the means; empty on the
    distribution rows) with ``real_bimodal`` / ``sim_bimodal`` (those values
    split in two groups by a gap, [`bimodal`][vcpulab.validation.bimodal]:
    False with fewer than 4), ``disturbed_trials`` (real trials whose
    [`Quality`][vcpulab.quality.Quality] crossed a threshold) and
    ``other_share_max`` (the largest share of the run's CPU time other tasks
    took), ``other_share_twin`` (the mean share the twin was given),
    ``other_short_fraction`` and ``other_burst_ns`` (the short tasks' part of
    the others' CPU time and their mean burst, ns, pooled over the trials:
    [`OtherLoad`][vcpulab.twins.OtherLoad]), ``steal_by_construction``, and what the twin's start
    was given, measured on the real trials: ``start_gap_ns``
    ([`start_gap_of`][vcpulab.twins.start_gap_of]) and ``vcpu_start_ns``
    ([`vcpu_start_of`][vcpulab.twins.vcpu_start_of], under vcpulab's
    scheduler; NaN where none). Pass ``real`` to reuse real runs of ``exp``.

    ``trace=True``: the real trials are traced (``run(trace=True)``) and two
    more rows compare distributions ([`distributions`][vcpulab.twins.distributions], trials and seeds
    pooled): ``slice_ns`` (every vCPU run slice) and ``wakeup_latency_ns``
    (guest timer → vCPU running); ``real``/``sim`` are the medians, ``ks``
    the two-sample KS statistic. The twin's wake-ups are derived from its
    guest's timer ([`sim_wakeups`][vcpulab.twins.sim_wakeups]), so workloads woken otherwise (IPI,
    spin locks, MSI with polling on) have none: NaN there. ``real`` runs
    passed in are used as they are (traced or not).

    ``host_speed``: the twin's host speed ([`twin`][vcpulab.twins.twin]: True, the
    calibration's speed process on the guest's work and the host's paths;
    ``"work"``, on the guest's work only; False, one speed).

    ``speed_step`` (e.g. 0.1; default None: not run): the twin again with
    its emulated instructions' costs times 1 − step and 1 + step
    ([`scaled_costs`][vcpulab.twins.scaled_costs], the same seeds and load), in columns
    ``sim_faster`` / ``sim_slower`` (the metrics' means there), ``speed_gain``
    ([`speed_gain`][vcpulab.twins.speed_gain]: the larger change in units of the step) and
    ``speed_edge`` (gain above [`SPEED_EDGE_GAIN`][vcpulab.twins.SPEED_EDGE_GAIN], and a shifted
    mean farther from ``sim`` than the width of the twin's interval over
    seeds, ``sim_hi`` − ``sim_lo``: the shifted runs draw the seeds' noise
    afresh, which on a small count is not an edge): a metric
    that flips with a few percent of speed, as a halt whose length sits at
    ``halt_poll_ns`` does, compares the regime the calibration's moment put
    the twin in more than the model (docs/twins.md, item 13). Without it
    the four columns are null.

    The twin runs at ``cal``'s costs (default: this process's cached
    [`calibrate`][vcpulab.twins.calibrate], which may be minutes or hours old, while this host's
    emulation speed drifts in spells of minutes): measure again
    (``calibrate(refresh=True)``) before comparing in another spell. A
    [`grid`][vcpulab.twins.grid] of many cells gives its twins the median of cost pairs
    measured across all its trials instead (docs/twins.md item 16); for one
    cell its 15 pairs did no better than a fresh calibration here.

    Every argument (and that ``exp`` has a twin) is checked before the real
    trials. Ctrl-C: ``KeyboardInterrupt`` within a second whose ``partial``
    is the list of finished real runs; ``compare(exp, real=e.partial)``
    goes on from them.
    """
    check_type("exp", exp, Experiment)
    check_int("trials", trials, 1, 1000)
    check_int("seeds", seeds, 1, 1000)
    check_bool("trace", trace)
    check_host_speed(host_speed)
    if speed_step is not None:
        speed_step = check_float("speed_step", speed_step, 0.0, 0.5, lo_open=True)
    if load not in ("measured", "one_task", "none"):
        raise ValueError(f"load must be 'measured', 'one_task' or 'none', got {load!r}")
    if real is not None:
        real = check_seq("real", real, "Runs (None: run the real trials)", min_len=1)
        for r in real:
            check_type("real entry", r, Run)
    if cal is not None:
        check_type("cal", cal, Calibration)  # before calibrate() would measure for a falsy one
    cal = cal or calibrate()
    twin(exp, cal)  # an experiment without a twin is refused before its real trials run
    failures: list[str] = []
    if real is None:
        try:
            runs = run_real(exp, trials, failures, cal, trace=trace)
        except KeyboardInterrupt as e:
            # the finished real trials: compare(exp, real=e.partial) resumes from them
            keep_partial(
                e,
                partial_of(e),
                call="twins.compare",
                done=len(partial_of(e) or []),
                total=trials,
                unit="real trials (pass them back as compare(exp, real=e.partial))",
            )
            raise
    else:
        runs = real
    try:
        return _compare_rows(exp, runs, failures, seeds, cal, load, trace, host_speed, speed_step)
    except KeyboardInterrupt as e:
        keep_partial(
            e,
            runs,
            call="twins.compare",
            done=len(runs),
            total=len(runs),
            unit="real trials (the twin was interrupted; pass them back as compare(exp, real=e.partial))",
        )
        raise


@dataclasses.dataclass(frozen=True)
class _TwinInputs:
    """What the twin takes from the real trials: the other tasks' mean share
    and pooled load, the threads' start gap, the vCPUs' first token hold, and
    those as [`run_sim`][vcpulab.twins.run_sim]'s keywords (``kw``)."""

    share: float
    other_load: OtherLoad | None
    start_gap_ns: float | None
    vcpu_start_ns: float | None
    kw: dict[str, Any]


def _twin_inputs(runs: list[Run], load: str) -> _TwinInputs:
    """The ``_TwinInputs`` of ``runs``; ``load``: ``"measured"`` (the pooled other
    load), ``"one_task"`` (its share as one task) or ``"none"``, as in
    [`compare`][vcpulab.twins.compare]."""
    shares = [r.quality.other_share for r in runs if r.quality.measured]
    share = float(np.mean(shares)) if (load != "none" and shares) else 0.0
    ol = OtherLoad.pooled([OtherLoad(**r.config["other_load"]) for r in runs if r.config.get("other_load")])
    gap, vstart = start_gap_of(runs), vcpu_start_of(runs)
    load_kw: dict[str, Any] = {"other_load": ol} if (load == "measured" and ol is not None) else {"other_share": share}
    return _TwinInputs(share, ol, gap, vstart, {"start_gap_ns": gap, "vcpu_start_ns": vstart, **load_kw})


def run_both(
    exp: Experiment,
    trials: int = 3,
    seeds: int = 3,
    cal: Calibration | None = None,
    load: Literal["measured", "one_task", "none"] = "measured",
    trace_all: bool = True,
) -> tuple[list[Run], list[sim.Result]]:
    """``trials`` real runs of ``exp`` and its twin with ``seeds`` seeds, the
    twin given what the trials measured as [`compare`][vcpulab.twins.compare]
    gives it (the other load per ``load``, the threads' start gap, the vCPUs'
    first token hold). ``trace_all`` (default True): every simulated run
    traced, so that under vcpulab's schedulers each keeps its decision log
    for [`compare_schedules`][vcpulab.twins.compare_schedules]::

        real, twin = twins.run_both(exp)
        twins.compare_schedules(real, twin)

    ``cal``: the calibration (default: [`calibrate`][vcpulab.twins.calibrate]).
    A trial that misses its deadline is left out as in [`run_real`][vcpulab.twins.run_real]."""
    if load not in ("measured", "one_task", "none"):
        raise ValueError(f"load must be 'measured', 'one_task' or 'none', got {load!r}")
    check_int("seeds", seeds, 1, 1000)
    check_bool("trace_all", trace_all)
    if cal is not None:
        check_type("cal", cal, Calibration)
    cal = cal or calibrate()
    twin(exp, cal)  # an experiment without a twin is refused before its real trials run
    runs = run_real(exp, trials, None, cal)
    sims = run_sim(exp, cal, seeds, trace_all=trace_all, **_twin_inputs(runs, load).kw)
    return runs, [r for _, r in sims]


def _compare_rows(
    exp: Experiment,
    runs: list[Run],
    failures: list[str],
    seeds: int,
    cal: Calibration,
    load: str,
    trace: bool,
    host_speed: bool | str = True,
    speed_step: float | None = None,
) -> pl.DataFrame:
    """[`compare`][vcpulab.twins.compare]'s frame from its real runs and the twin's seeds."""
    inp = _twin_inputs(runs, load)
    share, ol, gap, vstart = inp.share, inp.other_load, inp.start_gap_ns, inp.vcpu_start_ns
    burst = ol.short_burst_ns if ol is not None else None

    def sims_at(c: Calibration, every_run_traced: bool) -> list[tuple[sim.Config, sim.Result]]:
        # traced where a metric needs it; every run only for the compared distributions
        return run_sim(exp, c, seeds, trace_all=every_run_traced, host_speed=host_speed, **inp.kw)

    sims = sims_at(cal, trace)
    rm = [real_metrics(exp, r) for r in runs]
    sm = [sim_metrics(exp, c, s, cal) for c, s in sims]
    # the twin at a faster and a slower emulation (speed_step): {metric: mean}
    shifted: list[dict[str, float]] = []
    for f in () if speed_step is None else (1.0 - speed_step, 1.0 + speed_step):
        cf = scaled_costs(cal, f)
        ms = [sim_metrics(exp, c, r, cf) for c, r in sims_at(cf, False)]
        shifted.append({m: _interval(m, [x[m] for x in ms if m in x])[0] for m in _metrics_of(exp)})
    dist = sum(1 for r in runs if r.quality.disturbed)
    other = max((r.quality.other_share for r in runs if r.quality.measured), default=float("nan"))
    rows = []
    for m in _metrics_of(exp):
        rv = [x[m] for x in rm if m in x]
        sv = [x[m] for x in sm if m in x]
        r_m, r_lo, r_hi = _interval(m, rv)
        s_m, s_lo, s_hi = _interval(m, sv)
        fl = FLOORS.get(m, 0.0)
        informative = bool(r_m == r_m and s_m == s_m and (abs(r_m) > fl or abs(s_m) > fl))
        rel = abs(s_m - r_m) / abs(r_m) if (r_m == r_m and s_m == s_m and r_m != 0) else float("nan")
        edge: dict[str, Any] = {}
        if shifted:
            fast, slow = shifted[0].get(m, float("nan")), shifted[1].get(m, float("nan"))
            assert speed_step is not None
            gain = speed_gain(m, s_m, fast, slow, speed_step)
            edge = dict(
                sim_faster=fast,
                sim_slower=slow,
                speed_gain=gain,
                speed_edge=_on_edge(gain, s_m, s_lo, s_hi, fast, slow),
            )
        rows.append(
            dict(
                **edge,
                metric=m,
                unit=METRICS[m][0],
                real=r_m,
                real_lo=r_lo,
                real_hi=r_hi,
                sim=s_m,
                sim_lo=s_lo,
                sim_hi=s_hi,
                rel_err=rel,
                informative=informative,
                ks=float("nan"),
                # the distributions behind the means: per real trial, per twin seed
                real_values=[float(x) for x in rv],
                sim_values=[float(x) for x in sv],
                real_bimodal=bimodal(rv),
                sim_bimodal=bimodal(sv),
            )
        )
    for d in _DISTS.get(type(exp.workload), ()):
        rs = np.concatenate([real_steal_intervals(r) for r in runs]) if runs else np.empty(0)
        ss = np.concatenate([sim_steal_intervals(s) for _, s in sims if s.trace is not None]) if sims else np.empty(0)
        ks = ks_distance(rs, ss)
        rows.append(
            dict(
                metric=d,
                unit="",
                real=float(rs.mean()) if rs.size else float("nan"),
                real_lo=float("nan"),
                real_hi=float("nan"),
                sim=float(ss.mean()) if ss.size else float("nan"),
                sim_lo=float("nan"),
                sim_hi=float("nan"),
                rel_err=float("nan"),
                informative=bool(rs.size and ss.size),
                ks=ks,
            )
        )
    if trace:
        rows += _trace_rows(runs, [s for _, s in sims])
    for row in rows:  # the distribution rows pool every interval: no per-run values
        for side in ("real", "sim"):
            row.setdefault(f"{side}_values", [])
            row.setdefault(f"{side}_bimodal", False)
        for k in ("sim_faster", "sim_slower", "speed_gain"):
            row.setdefault(k, None)
        row.setdefault("speed_edge", None)
    values = pl.List(pl.Float64)
    overrides: dict[str, Any] = {
        "real_values": values,
        "sim_values": values,
        "sim_faster": pl.Float64,
        "sim_slower": pl.Float64,
        "speed_gain": pl.Float64,
        "speed_edge": pl.Boolean,
    }
    return pl.DataFrame(rows, schema_overrides=overrides).with_columns(
        pl.lit(dist).alias("disturbed_trials"),
        pl.lit(len(runs)).alias("trials"),
        pl.lit(len(failures)).alias("failed_trials"),
        pl.lit(float(other)).alias("other_share_max"),
        pl.lit(share).alias("other_share_twin"),
        pl.lit(burst, dtype=pl.Float64).alias("other_burst_ns"),
        pl.lit(ol.short_fraction if ol is not None else float("nan"), dtype=pl.Float64).alias("other_short_fraction"),
        pl.lit(bool(share > 0 and isinstance(exp.workload, _RUNNABLE))).alias("steal_by_construction"),
        pl.lit(float("nan") if gap is None else gap, dtype=pl.Float64).alias("start_gap_ns"),
        pl.lit(float("nan") if vstart is None or exp.scheduler is None else vstart, dtype=pl.Float64).alias(
            "vcpu_start_ns"
        ),
    )


def _trace_rows(runs: Sequence[Run], sims: Sequence[sim.Result]) -> list[dict[str, Any]]:
    """compare()'s distribution rows of traced real runs: run slices and
    wake-up latencies (medians and the KS statistic, [`distributions`][vcpulab.twins.distributions])."""
    nan = float("nan")
    real = [r for r in runs if getattr(r, "trace", None) is not None]
    traced = [s for s in sims if s.trace is not None]
    r_sl = np.concatenate([vcpu_slices(r.trace) for r in real]) if real else np.empty(0)  # type: ignore[arg-type]
    r_wk = np.concatenate(
        [
            r.wakeups.filter(pl.col("vcpu") >= 0)["latency_ns"].cast(pl.Float64).to_numpy()
            for r in real
            if r.wakeups is not None
        ]
        or [np.empty(0)]
    )
    s_sl = np.concatenate([vcpu_slices(s.trace) for s in traced]) if traced else np.empty(0)  # type: ignore[arg-type]
    try:
        s_wk = np.concatenate(
            [sim_wakeups(s)["latency_ns"].cast(pl.Float64).to_numpy() for s in traced] or [np.empty(0)]
        )
    except ValueError:  # a guest woken by something other than its timer: no simulated wake-ups to compare
        s_wk = np.empty(0)
    rows = []
    for q, a, b in (("slice_ns", r_sl, s_sl), ("wakeup_latency_ns", r_wk, s_wk)):
        ok = bool(a.size and b.size)
        rows.append(
            dict(
                metric=q,
                unit="ns",
                real=float(np.median(a)) if a.size else nan,
                real_lo=nan,
                real_hi=nan,
                sim=float(np.median(b)) if b.size else nan,
                sim_lo=nan,
                sim_hi=nan,
                rel_err=nan,
                informative=ok,
                ks=ks_distance(a, b) if ok else nan,
            )
        )
    return rows
