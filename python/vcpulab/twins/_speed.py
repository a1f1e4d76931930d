"""The host's speed over time ([`speed_probe`][vcpulab.twins.speed_probe]): how long an emulated
instruction takes on each host CPU, 5 ms at a time, and the two-state process
([`vcpulab.sim.HostSpeed`][]) a twin runs its host at.

On the project's machines (a VM whose guest code KVM emulates, itself under a
hypervisor) an emulated instruction costs ~1,070 ns in fast stretches of
0.2-2 s and ~1,400-1,800 ns in slow ones of ~0.1-0.4 s, on each CPU
independently (measured 2026-12-07, docs/twins.md item 11): a twin that runs
at the calibration's one speed sits in one state while the real run moves
between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from vcpulab import sim
from vcpulab._checks import check_float
from vcpulab.twins._values import Value

if TYPE_CHECKING:
    from vcpulab.experiment import Run

#: a 5-ms sample is in the slow state when its cost per instruction (the median
#: of it and its two neighbours) is at least this many times the fast level (the
#: samples' 25th percentile). Assumption: the fast state's samples scatter by
#: ±3 % here (1,066-1,090 ns) and the slow stretches' lie 1.3-1.7x above it.
SLOW_THRESHOLD = 1.2

#: samples dropped at the probe's start (the vCPUs' first entry and page faults)
SKIP_SAMPLES = 2

#: the keys [`speed_probe`][vcpulab.twins.speed_probe] adds to a calibration
SPEED_KEYS = ("speed_fast_pct", "speed_slow_pct", "speed_fast_dwell_ns", "speed_slow_dwell_ns")


@dataclass(frozen=True)
class SpeedProbe:
    """What [`speed_probe`][vcpulab.twins.speed_probe] measured.

    ``samples``: one row per host CPU and 5-ms sample (``pcpu``, ``t_ns`` from
    the run's start, ``insn_ns``: ns per emulated instruction over the sample,
    ``slow``: classified slow). ``values``: the process as
    [`Value`][vcpulab.twins.Value]s (``speed_fast_pct``, ``speed_slow_pct``: each state's
    speed, percent of the speed at the samples' median cost, the cost a
    calibration's medians stand for; ``speed_fast_dwell_ns``,
    ``speed_slow_dwell_ns``: each state's mean stretch, the time spent in it
    over the changes out of it seen; all four 0 / 100 where no slow stretch
    began and ended inside the probe) and ``corun_speed_pct`` (a CPU's speed
    while the other probed CPUs run too, percent of its speed alone).
    """

    samples: pl.DataFrame
    values: dict[str, Value]

    def host_speed(self) -> sim.HostSpeed:
        """The process as the simulator's [`HostSpeed`][vcpulab.sim.HostSpeed] (off where none was seen)."""
        return host_speed_of(self.values)


def check_host_speed(host_speed: object) -> None:
    """A twin's ``host_speed`` argument: True, False or ``"work"`` (ValueError naming it)."""
    # (1 == True and 0 == False: a number is refused by its type)
    if not (isinstance(host_speed, bool) or host_speed == "work"):
        raise ValueError(f"host_speed must be True, False or 'work', got {host_speed!r}")


def host_speed_of(values: dict[str, Value], host_paths: bool = True) -> sim.HostSpeed:
    """[`HostSpeed`][vcpulab.sim.HostSpeed] from a calibration's (or a probe's) ``speed_*``
    values: off where they are absent (calibrations before 0.3.26) or say none."""
    if not all(k in values for k in SPEED_KEYS):
        return sim.HostSpeed()
    fast_dwell, slow_dwell = float(values["speed_fast_dwell_ns"]), float(values["speed_slow_dwell_ns"])
    if not (fast_dwell >= 1 and slow_dwell >= 1):
        return sim.HostSpeed()
    fast, slow = int(round(float(values["speed_fast_pct"]))), int(round(float(values["speed_slow_pct"])))
    return sim.HostSpeed(
        fast_pct=fast,
        slow_pct=min(slow, fast),
        fast_dwell_ns=int(round(fast_dwell)),
        slow_dwell_ns=int(round(slow_dwell)),
        host_paths=host_paths,
    )


def speed_not_measured(why: str) -> dict[str, Value]:
    """The ``speed_*`` values of one speed (the process off), each saying ``why``."""
    return {
        "speed_fast_pct": Value(100.0, "%", why),
        "speed_slow_pct": Value(100.0, "%", "as speed_fast_pct"),
        "speed_fast_dwell_ns": Value(0.0, "ns", "as speed_fast_pct"),
        "speed_slow_dwell_ns": Value(0.0, "ns", "as speed_fast_pct"),
    }


def fit_speed(samples: pl.DataFrame, sample_ns: float) -> tuple[pl.DataFrame, dict[str, Value]]:
    """The two-state process of a probe's samples (columns ``pcpu``, ``t_ns``,
    ``insn_ns``; ``sample_ns`` apart): each CPU's series smoothed by a running
    median of 3, a sample slow where that is at least
    [`SLOW_THRESHOLD`][vcpulab.twins.SLOW_THRESHOLD] x the pooled 25th percentile; each state's
    level the median of its raw samples, as a speed relative to the pooled
    median; each state's mean dwell its samples' time over the changes out of it
    (the exponential's estimate with the probe's two ends censored). Returns
    the samples with ``slow`` and the values."""
    cost = samples["insn_ns"].to_numpy()
    base = float(np.percentile(cost, 25))
    median = float(np.median(cost))
    slow_col: list[np.ndarray] = []
    exits = {True: 0, False: 0}
    for _, g in samples.group_by("pcpu", maintain_order=True):
        x = g["insn_ns"].to_numpy()
        sm = x.copy()
        if len(x) >= 3:
            sm[1:-1] = np.median(np.stack([x[:-2], x[1:-1], x[2:]]), axis=0)
        s = sm >= SLOW_THRESHOLD * base
        slow_col.append(s)
        for a, b in zip(s[:-1], s[1:]):
            if a != b:
                exits[bool(a)] += 1
    slow = np.concatenate(slow_col) if slow_col else np.zeros(0, dtype=bool)
    out = samples.with_columns(pl.Series("slow", slow))
    n_slow, n_fast = int(slow.sum()), int((~slow).sum())
    how_common = (
        f"{samples.height} samples of {sample_ns / 1e6:g} ms on CPUs {sorted(set(samples['pcpu'].to_list()))}: "
        f"{n_slow} slow (running median of 3 >= {SLOW_THRESHOLD:g} x the 25th percentile, {base:.0f} ns/insn), "
        f"{exits[True]} slow stretches ended, {exits[False]} fast ones"
    )
    if n_slow == 0 or n_fast == 0 or exits[True] == 0 or exits[False] == 0:
        return out, speed_not_measured(f"no two-state process seen: {how_common}")
    fast_cost = float(np.median(cost[~slow]))
    slow_cost = float(np.median(cost[slow]))
    vals = {
        "speed_fast_pct": Value(
            100.0 * median / fast_cost,
            "%",
            f"the pooled median cost ({median:.0f} ns/insn) over the fast samples' median ({fast_cost:.0f}); "
            + how_common,
        ),
        "speed_slow_pct": Value(
            100.0 * median / slow_cost,
            "%",
            f"the pooled median cost ({median:.0f} ns/insn) over the slow samples' median ({slow_cost:.0f})",
        ),
        "speed_fast_dwell_ns": Value(
            n_fast * sample_ns / exits[False],
            "ns",
            f"{n_fast} fast samples x {sample_ns:g} ns / {exits[False]} changes",
        ),
        "speed_slow_dwell_ns": Value(
            n_slow * sample_ns / exits[True], "ns", f"{n_slow} slow samples x {sample_ns:g} ns / {exits[True]} changes"
        ),
    }
    return out, vals


def _costs(r: Run) -> pl.DataFrame:
    """A probe run's samples, per vCPU in time order after its first
    ``SKIP_SAMPLES``: ``vcpu``, ``t_ns``, ``dt_ns``, ``insn_ns`` (wall
    ns per emulated instruction) and ``emulated`` (at least 100 emulated
    instructions in the sample, else the cost means nothing)."""
    d = r.deltas().filter(pl.col("dt_ns") > 0).sort(["vcpu", "t_ns"])
    return d.filter(pl.int_range(pl.len()).over("vcpu") >= SKIP_SAMPLES).select(
        "vcpu",
        "t_ns",
        "dt_ns",
        (pl.col("dt_ns") / pl.col("insn_emulation")).alias("insn_ns"),
        (pl.col("insn_emulation") >= 100).alias("emulated"),
    )


def speed_probe(
    pcpus: Sequence[int] | None = None,
    duration_s: float = 5.0,
    sample_every_s: float = 0.005,
    alone_s: float = 1.0,
) -> SpeedProbe:
    """Measure each host CPU's speed over time: a [`Spin`][vcpulab.experiment.Spin] guest (PAUSE in a
    loop, every instruction emulated here) with one vCPU pinned to each of
    ``pcpus`` (default: every CPU this process may use) for ``duration_s``,
    KVM's ``insn_emulation`` read every ``sample_every_s``: wall ns per
    emulated instruction per sample, and the two-state process fitted to them
    ([`fit_speed`][vcpulab.twins.fit_speed]). Wall time, not CPU time: what a twin's
    phase lengths stand for. A host whose guest code runs natively executes
    few emulated instructions, and its probe says so (ValueError).

    With two CPUs or more it then runs the same guest on the last CPU alone
    for ``alone_s``: ``corun_speed_pct`` is that CPU's speed while the others
    run too, percent of its speed alone (the medians' ratio, at most 100;
    this host's CPUs slow each other by 1-14 % when both run, as the threads
    of one core do).
    """
    from vcpulab import _core
    from vcpulab.experiment import Spin, run

    duration_s = check_float("duration_s", duration_s, 0.1, 60.0)
    alone_s = check_float("alone_s", alone_s, 0.0, 60.0)
    sample_every_s = check_float("sample_every_s", sample_every_s, 0.001, 0.1)
    if duration_s < 10 * sample_every_s:
        raise ValueError(f"duration_s must hold at least 10 samples of {sample_every_s} s, got {duration_s}")
    cpus = sorted(_core.allowed_cpus()) if pcpus is None else [int(c) for c in pcpus]
    if not cpus:
        raise ValueError("pcpus must name at least one host CPU")
    r = run(
        Spin(),
        vcpus=len(cpus),
        placement=[[c] for c in cpus],
        duration_s=duration_s,
        sample_every_s=sample_every_s,
        warn_quality=False,
    )
    d = _costs(r)
    if d.height == 0 or (~d["emulated"]).sum() > d.height // 2:
        raise ValueError(
            "speed_probe: the Spin guest emulated fewer than 100 instructions per sample: this host runs guest "
            "code natively, and the probe measures emulation speed (nothing to probe)"
        )
    t0 = int(d["t_ns"].to_numpy().min())
    samples = d.filter(pl.col("emulated")).select(
        pl.col("vcpu").replace_strict(list(range(len(cpus))), cpus, return_dtype=pl.Int64).alias("pcpu"),
        (pl.col("t_ns") - t0).alias("t_ns"),
        "insn_ns",
    )
    sample_ns = float(np.median(d["dt_ns"].to_numpy()))
    out, vals = fit_speed(samples, sample_ns)
    other = getattr(r.quality, "other_share", None)
    if other is not None and math.isfinite(float(other)):
        v = vals["speed_fast_pct"]
        vals["speed_fast_pct"] = Value(v.value, v.unit, v.how + f"; other tasks' share of the CPUs {float(other):.1%}")
    vals["corun_speed_pct"] = Value(100.0, "%", "one CPU probed (or alone_s 0): nothing ran beside it")
    if len(cpus) >= 2 and alone_s >= 10 * sample_every_s:
        last = cpus[-1]
        a = run(Spin(), vcpus=1, pcpus=[last], duration_s=alone_s, sample_every_s=sample_every_s, warn_quality=False)
        da = _costs(a).filter(pl.col("emulated"))
        both = samples.filter(pl.col("pcpu") == last)["insn_ns"].to_numpy()
        if da.height >= 10 and len(both):
            alone = float(np.median(da["insn_ns"].to_numpy()))
            together = float(np.median(both))
            vals["corun_speed_pct"] = Value(
                min(100.0, 100.0 * alone / together),
                "%",
                f"CPU {last}: the median cost per emulated instruction alone ({alone:.0f} ns, {alone_s:g} s) over "
                f"the same while every probed CPU ran ({together:.0f} ns)",
            )
    return SpeedProbe(samples=out, values=vals)
