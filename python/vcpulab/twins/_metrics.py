"""Metrics: what is compared ([`METRICS`][vcpulab.twins.METRICS], per workload), its value in one real
run ([`real_metrics`][vcpulab.twins.real_metrics]) and in one simulated run
([`sim_metrics`][vcpulab.twins.sim_metrics]), and the per-10 ms steal intervals of both
([`real_steal_intervals`][vcpulab.twins.real_steal_intervals], [`sim_steal_intervals`][vcpulab.twins.sim_steal_intervals])."""

from __future__ import annotations

import numpy as np
import polars as pl

from vcpulab import sim
from vcpulab.experiment import IdleTicks, IpiPingPong, MsiPingPong, PvSpinLock, Run, Spin, SpinLock, WakePlacement
from vcpulab.twins._calibration import _stat_delta
from vcpulab.twins._experiment import Experiment
from vcpulab.twins._guest import guest_path
from vcpulab.twins._schedule import token_holds
from vcpulab.twins._values import Calibration

#: the simulator's models of vcpulab's own schedulers (``Host.scheduler``)
TOKEN_SCHEDULERS = ("round_robin", "relaxed_co", "balance", "pinned")

#: metric → (unit, what it is on both sides)
METRICS: dict[str, tuple[str, str]] = {
    "acq_per_s": ("1/s", "lock acquisitions per second, all vCPUs (real: guest counters / wall time of the run)"),
    "wait_per_acq_us": (
        "us",
        "mean wait per acquisition (real: guest RDTSC; sim: Lock phase start → lock held, waits still open at the end counted up to the end, + the timed wait_path instructions stretched by the running share)",
    ),
    "steal_fraction": (
        "",
        "steal time / wall time, mean over vCPUs (real: steal-time area; sim: runnable-not-running; under vcpulab's "
        "schedulers both: the share of the run without a token)",
    ),
    "ctx_switches_per_vcpu_s": (
        "1/s",
        "times a vCPU thread was switched in, per vCPU and second (real: voluntary + involuntary switches)",
    ),
    "halt_exits_per_s": ("1/s", "halt exits per second, all vCPUs (KVM stat halt_exits)"),
    "polled_per_halt": ("", "share of halts that ended in the poll loop (KVM stats halt_successful_poll / halt_exits)"),
    "rtt_median_us": (
        "us",
        "MSI / IPI round trip, median (real: MSI host-timed sent → next cue, IPI guest RDTSC; sim: iteration latency − the initiator's own time)",
    ),
    "ticks_per_s": ("1/s", "timer interrupts taken per second, all vCPUs"),
    "items_per_s": ("1/s", "WakePlacement items completed per second (real: the waker's count / wall time)"),
    "round_median_us": (
        "us",
        "WakePlacement round, median: the waker's wake-up of a worker → the completion seen (real: guest RDTSC; sim: "
        "the iteration latency median − the waker's instructions outside the round)",
    ),
    "round_p90_us": (
        "us",
        "WakePlacement round, 90th percentile: its slow items (real: Run.items' round_us, the first 4,096 items; "
        "sim: the iteration latency p90 − the waker's instructions outside the round)",
    ),
    "first_worker_share": (
        "",
        "share of WakePlacement items run by vCPU 1, the first worker (real: the workers' item counts; sim: the "
        "workers' halts and guest idle polls that got the next item: one of the two per item)",
    ),
    "poll_hit_share": (
        "",
        "share of a WakePlacement worker's items found while it polled its mailbox, before halting (real: the "
        "workers' poll_hits / items; sim: the workers' guest_idle_poll_hits / (hits + misses)); 0 with poll = 0",
    ),
}
#: metrics per workload class
_BY_WORKLOAD: dict[type, tuple[str, ...]] = {
    SpinLock: ("acq_per_s", "wait_per_acq_us", "steal_fraction", "ctx_switches_per_vcpu_s"),
    PvSpinLock: ("acq_per_s", "wait_per_acq_us", "steal_fraction", "ctx_switches_per_vcpu_s", "halt_exits_per_s"),
    MsiPingPong: ("rtt_median_us", "polled_per_halt"),
    IpiPingPong: ("rtt_median_us", "polled_per_halt"),
    IdleTicks: ("ticks_per_s", "halt_exits_per_s", "polled_per_halt", "ctx_switches_per_vcpu_s"),
    Spin: ("steal_fraction", "ctx_switches_per_vcpu_s"),
    WakePlacement: (
        "items_per_s",
        "round_median_us",
        "round_p90_us",
        "first_worker_share",
        "polled_per_halt",
        "poll_hit_share",
    ),
}
#: KS-compared distributions
_DISTS: dict[type, tuple[str, ...]] = {
    SpinLock: ("steal_per_10ms",),
    PvSpinLock: ("steal_per_10ms",),
    Spin: ("steal_per_10ms",),
}


def _metrics_of(exp: Experiment) -> tuple[str, ...]:
    return _BY_WORKLOAD[type(exp.workload)]


def _token_holds(r: Run) -> list[list[tuple[int, int]]]:
    """Per vCPU of a scheduled run (vCPU order): the intervals [start, end)
    ns it held a token, in time order (from ``Run.schedule``,
    [`token_holds`][vcpulab.twins.token_holds])."""
    assert r.schedule is not None
    n = int(r.config["vcpus"])
    holds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    h = token_holds(r.schedule, int(r.wall_s * 1e9)).sort("start_ns", "end_ns")
    for v, a, b in zip(h["vcpu"], h["start_ns"], h["end_ns"]):
        holds[v].append((a, b))
    return holds


def _token_time(r: Run) -> tuple[list[float], list[int]]:
    """Per vCPU of a scheduled run (vCPU order): ns it held a token, and how
    many times it got one (from ``Run.schedule``)."""
    holds = _token_holds(r)
    return [float(sum(b - a for a, b in h)) for h in holds], [len(h) for h in holds]


def real_metrics(exp: Experiment, r: Run) -> dict[str, float]:
    """The compared metrics of one real run."""
    res, th = r.results, r.threads
    out: dict[str, float] = {}
    names = _metrics_of(exp)
    if "acq_per_s" in names:
        acq = res["acquisitions"].cast(pl.Float64)
        # over the whole run: after ``duration`` every vCPU still finishes its
        # iteration (one more acquisition), which under overcommit takes a while
        out["acq_per_s"] = float(acq.sum()) / r.wall_s
        w = res["wait_per_acq_us"].fill_nan(0.0)
        out["wait_per_acq_us"] = float((w * acq).sum() / max(float(acq.sum()), 1.0))  # type: ignore[operator]
    if r.schedule is not None and ("steal_fraction" in names or "ctx_switches_per_vcpu_s" in names):
        # under vcpulab's scheduler a waiting vCPU thread sleeps, so the kernel's steal
        # time and context switches do not see its waits: the decision log does
        held, grants = _token_time(r)
        if "steal_fraction" in names:
            out["steal_fraction"] = float(np.mean([1.0 - h / max(r.wall_s * 1e9, 1.0) for h in held]))
        if "ctx_switches_per_vcpu_s" in names:
            out["ctx_switches_per_vcpu_s"] = float(np.mean(grants)) / r.wall_s
    else:
        if "steal_fraction" in names:
            out["steal_fraction"] = float(r.steal_fraction()["steal_fraction"].mean())  # type: ignore[arg-type]
        if "ctx_switches_per_vcpu_s" in names:
            sw = th["voluntary_ctxt_switches"] + th["nonvoluntary_ctxt_switches"]
            secs = th["wall_ns"].cast(pl.Float64) / 1e9
            out["ctx_switches_per_vcpu_s"] = float((sw / secs).mean())  # type: ignore[arg-type]
    if "halt_exits_per_s" in names:
        out["halt_exits_per_s"] = _stat_delta(r, "halt_exits") / r.wall_s
    if "polled_per_halt" in names:
        out["polled_per_halt"] = _stat_delta(r, "halt_successful_poll") / max(_stat_delta(r, "halt_exits"), 1)
    if "rtt_median_us" in names:
        out["rtt_median_us"] = float(res["rtt_median_us"][0])
    if "ticks_per_s" in names:
        out["ticks_per_s"] = float(res["ticks"][0]) / r.wall_s
    if "items_per_s" in names:
        out["items_per_s"] = float(res["rounds"][0]) / r.wall_s
        out["round_median_us"] = float(res["round_median_us"][0])
        rounds = r.items.filter(pl.col("vm") == 0)["round_us"].to_numpy() if r.items is not None else np.array([])
        out["round_p90_us"] = float(np.percentile(rounds, 90)) if len(rounds) else float("nan")
        items = res["items"].cast(pl.Float64).to_numpy()[1:]
        out["first_worker_share"] = float(items[0] / items.sum()) if items.sum() > 0 else float("nan")
        out["poll_hit_share"] = float(res["poll_hits"].cast(pl.Float64)[1:].sum()) / max(float(items.sum()), 1.0)
    return out


def sim_metrics(exp: Experiment, cfg: sim.Config, res: sim.Result, cal: Calibration) -> dict[str, float]:
    """The compared metrics of one simulated run."""
    vms, vc = res.vms, res.vcpus
    # a run of a fixed number of iterations ends when every thread is done
    # (as the real one does): rates over its wall time
    dur = (float(vms["wall_ns"][0]) if cfg.vms[0].workload.iterations > 0 else cfg.duration_ns) / 1e9
    out: dict[str, float] = {}
    names = _metrics_of(exp)
    if "acq_per_s" in names:
        out["acq_per_s"] = float(vms["lock_acquisitions"][0]) / dur
        if "lock_wait_mean_ns" in vms.columns:
            # the real wait is timed around wait_path instructions that the
            # simulated Lock phase does not execute; they run at the vCPU's
            # running share, so on average they last window / (1 - steal)
            window = (
                guest_path(exp.workload, exp.vcpus, pv_exits=exp.scheduler is not None)["wait_path"]
                * cal["path_insn_ns"]
            )
            running = 1.0 - float(vc["wait_ns"].mean()) / (dur * 1e9)  # type: ignore[operator, arg-type]
            # the real guest, told to stop, finishes every wait still open and
            # counts it: the twin's waits open at the end count too (up to the
            # end, a lower bound of what they would have lasted)
            mean = float(vms["lock_wait_mean_ns"][0])
            if "lock_waits_open" in vms.columns:
                closed, n_open = float(vms["lock_acquisitions"][0]), float(vms["lock_waits_open"][0])
                if closed + n_open > 0:
                    mean = (mean * closed + float(vms["lock_wait_open_mean_ns"][0]) * n_open) / (closed + n_open)
            out["wait_per_acq_us"] = (mean + window / max(running, 1e-3)) / 1e3
    if "steal_fraction" in names:
        out["steal_fraction"] = float(vc["wait_ns"].mean()) / (dur * 1e9)  # type: ignore[operator, arg-type]
    if "ctx_switches_per_vcpu_s" in names:
        # under vcpulab's schedulers the real side counts token grants (the
        # decision log): so does the twin; otherwise every switch-in
        col = "token_grants" if cfg.host.scheduler in TOKEN_SCHEDULERS else "sched_in"
        out["ctx_switches_per_vcpu_s"] = float(vc[col].mean()) / dur  # type: ignore[operator, arg-type]
    if "halt_exits_per_s" in names:
        out["halt_exits_per_s"] = float(vc["halt_exits"].sum()) / dur
    if "polled_per_halt" in names:
        out["polled_per_halt"] = float(vc["halt_successful_poll"].sum()) / max(float(vc["halt_exits"].sum()), 1.0)
    if "rtt_median_us" in names:
        w = exp.workload
        assert isinstance(w, (MsiPingPong, IpiPingPong))
        ipi = _sim_ipi_rtt_ns(res) if isinstance(w, IpiPingPong) else None
        if ipi is not None:
            out["rtt_median_us"] = ipi / 1e3
        else:
            # a round = the initiator's own time outside the round trip + the round trip
            if isinstance(w, IpiPingPong):
                first = cfg.vms[0].workload.thread0_phases[0]
                assert isinstance(first, sim.Compute)  # the initiator's own work, then the round trip
                own: float = first.ns
            else:
                own = w.gap_us * 1000
            out["rtt_median_us"] = (float(vms["lat_p50_ns"][0]) - own) / 1e3
    if "ticks_per_s" in names:
        out["ticks_per_s"] = float(vms["ops"][0]) / dur
    if "items_per_s" in names:
        # the waker's and the worker's iterations each span one item
        out["items_per_s"] = float(vms["ops"][0]) / 2 / dur
        p = guest_path(exp.workload, exp.vcpus, pv_exits=exp.scheduler is not None)
        outside = p["waker_outside"] * cal["path_insn_ns"]
        out["round_median_us"] = (float(vms["lat_p50_ns"][0]) - outside) / 1e3
        out["round_p90_us"] = (float(vms["lat_p90_ns"][0]) - outside) / 1e3
        # each item a worker runs ends in its idle poll catching the next item or in a halt
        hits = vc["guest_idle_poll_hits"].cast(pl.Float64).to_numpy()[1:]
        items = vc["halt_exits"].cast(pl.Float64).to_numpy()[1:] + hits
        out["first_worker_share"] = float(items[0] / items.sum()) if items.sum() > 0 else float("nan")
        polls = hits.sum() + float(vc["guest_idle_poll_misses"].cast(pl.Float64)[1:].sum())
        out["poll_hit_share"] = float(hits.sum()) / max(polls, 1.0)
    return out


def _sim_ipi_rtt_ns(res: sim.Result) -> float | None:
    """The median round trip of an IpiPingPong twin. vCPU 0 halts right after
    its IPI, so each round trip is one of its halts:

    * a halt that blocked: from the trace, its interval that ended in the
      blocking halt at ``h`` and its next interval at ``r`` give ``r − h``,
      plus the mean failed poll before blocking (``halt_poll_fail_ns`` over
      the blocked halts; 0 with polling off) and the switch back in and the
      block's return (``Host.switch_ns``, ``Pv.halt_wake_ns``: charged at the
      start of the next interval, before the guest's code resumes; a drawn
      return, ``Pv.halt_wake_jitter``, counted at its median);
    * a halt a poll caught (no halt in the trace: the vCPU stays on its CPU):
      the mean successful poll (``halt_poll_success_ns`` /
      ``halt_successful_poll``), once per such halt.

    Not the iteration latency minus the gap: the real gap is RDTSC (wall)
    time, the twin's a Compute that other tasks stretch. Simplification: the
    polls' per-halt lengths are their means. None without a trace or a halt.
    """
    if res.trace is None:
        return None
    t = res.trace.filter((pl.col("vm") == 0) & (pl.col("vcpu") == 0)).sort("start_ns")
    st, en, why = t["start_ns"].to_numpy(), t["end_ns"].to_numpy(), t["why"].to_list()
    blocked = [float(st[i + 1]) - float(en[i]) for i in range(len(st) - 1) if why[i] == "halt"]
    v0 = res.vcpus.row(0, named=True)
    n_succ = int(v0["halt_successful_poll"])
    fail = float(v0["halt_poll_fail_ns"]) / len(blocked) if blocked else 0.0
    back = float(res.config.host.switch_ns) + float(getattr(res.config.vms[0].pv, "halt_wake_ns", 0))
    rtt = [b + fail + back for b in blocked]
    if n_succ > 0:
        rtt += [float(v0["halt_poll_success_ns"]) / n_succ] * n_succ
    return float(np.median(rtt)) if rtt else None


def real_steal_intervals(r: Run, bin_ns: int = 10_000_000) -> np.ndarray:
    """Steal as the guest sees it, per ``bin_ns`` bin and vCPU: the growth of
    each vCPU's steal-time area over the bin / ``bin_ns``. The sampler's
    irregular samples are put on a fixed grid (the last sample at or before
    each bin edge), so that a late sample does not turn into a short interval
    with a huge ratio. KVM publishes steal at vCPU entry
    (``record_steal_time``), so a bin can show more than its length in steal
    and the next none; not clipped.

    Under vcpulab's scheduler (``Run.schedule``) a vCPU waiting for a token
    sleeps, and its steal-time area shows only the kernel's run delay (2-19 %
    of the run here, against 34-50 % without a token); the intervals are then
    the waits between its tokens, from the decision log, each published at
    the grant that ends it, as ``steal_fraction`` there is the share of the
    run without a token (the simulator's twin publishes its token waits at
    the sched-in alike)."""
    if r.schedule is not None:
        nb = int(r.wall_s * 1e9) // bin_ns
        if nb < 1:
            return np.empty(0)
        per = []
        for h in _token_holds(r):
            held = np.array(h, dtype=np.int64).reshape(-1, 2)
            per.append(_waits_per_bin(held[:, 0], held[:, 1], 0, nb, bin_ns))
        return np.concatenate(per) if per else np.empty(0)
    out = []
    for _, g in r.samples.sort("t_ns").group_by(["vm", "vcpu"], maintain_order=True):
        t = g["t_ns"].to_numpy().astype(np.int64)
        st = g["steal_ns"].to_numpy().astype(float)
        if t.size < 2:
            continue
        edges = np.arange(t[0], t[-1] + 1, bin_ns)
        if edges.size < 2:
            continue
        cum = st[np.searchsorted(t, edges, side="right") - 1]
        out.append(np.diff(cum) / bin_ns)
    return np.concatenate(out) if out else np.empty(0)


def _waits_per_bin(starts: np.ndarray, ends: np.ndarray, origin_ns: int, nb: int, bin_ns: int) -> np.ndarray:
    """One vCPU's runs (time-ordered ``starts``/``ends``, ns): each wait before
    a run (the first from 0) published at that run's start, summed per
    ``bin_ns`` bin from ``origin_ns`` (``nb`` bins) / ``bin_ns``."""
    st, en = starts.astype(np.int64), ends.astype(np.int64)
    if st.size == 0:
        return np.zeros(nb)
    gaps = np.concatenate([[st[0]], st[1:] - en[:-1]]).astype(float)
    k = (st - origin_ns) // bin_ns
    ok = (k >= 0) & (k < nb)
    return np.bincount(k[ok], weights=gaps[ok], minlength=nb)[:nb] / bin_ns


def sim_steal_intervals(res: sim.Result, bin_ns: int = 10_000_000) -> np.ndarray:
    """The same from a simulated run's trace, for always-runnable vCPUs: each
    wait between two runs of a vCPU is published at the start of the second
    (its sched-in, as KVM does), and summed per ``bin_ns`` bin / ``bin_ns``."""
    if res.trace is None:
        raise ValueError("sim_steal_intervals needs a run with trace=True")
    warm = res.config.warmup_ns  # bins from the end of the warm-up
    dur = res.config.duration_ns - warm
    nb = dur // bin_ns
    if nb < 1:
        return np.empty(0)
    t = res.trace.filter(pl.col("vcpu") >= 0).sort(["vm", "vcpu", "start_ns"])
    out = []
    seen = 0
    for _, g in t.group_by(["vm", "vcpu"], maintain_order=True):
        seen += 1
        out.append(_waits_per_bin(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), warm, nb, bin_ns))
    for _ in range(res.vcpus.height - seen):  # a vCPU that never ran publishes nothing
        out.append(np.zeros(nb))
    return np.concatenate(out) if out else np.empty(0)
