"""Twins: a real-KVM experiment and its simulated configuration, side by side.

The structural tests need no KVM (a calibration given by hand). The real-KVM
tests check what must hold on this host: the counted guest instructions equal
KVM's ``insn_emulation``; the twin of a real run has the run's CPUs, pinning
and vCPUs; steal agrees within 0.10 for N vCPUs on one CPU; the directions
between cells (more vCPUs → less throughput per vCPU, ticket below TAS under
preemption) agree. Timing checks go through ``vcpulab.testing.remeasure``
(at most 3 measurements, each with its ``Run.quality``); the directions are
checked where both sides differ by a factor of 2 or more, never on a knife-edge.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from vcpulab import sim, twins
from vcpulab.experiment import IdleTicks, IpiPingPong, MsiPingPong, PvSpinLock, SpinLock, WakePlacement
from vcpulab.kvm import Host
from vcpulab.testing import remeasure
from vcpulab.twins import Calibration, Experiment, Value


def fake_cal(path: float = 400.0, loop: float = 250.0) -> Calibration:
    """A calibration given by hand (costs of the order measured here)."""
    v = {
        "base_slice_ns": 1_500_000,
        "tick_ns": 4_000_000,
        "halt_poll_ns": 200_000,
        "halt_poll_ns_grow": 2,
        "halt_poll_ns_grow_start": 10_000,
        "halt_poll_ns_shrink": 2,
        "path_insn_ns": path,
        "loop_insn_ns": loop,
        "tsc_khz": 2_600_000,
        "wake_block_ns": 40_000,
        "wake_poll_ns": 30_000,
        "msi_round_insns": 41,
        "ipi_wake_ns": 40_000,
        "ipi_round_insns": 89,
    }
    return Calibration(values={k: Value(float(x), "", "given by the test") for k, x in v.items()}, cpu=0)


# ------------------------------------------------------------------- no KVM needed


def test_guest_path_counts_the_spin_lock_loops() -> None:
    p = twins.guest_path(SpinLock(kind="tas", hold=5, think=5, iterations=10), 1)
    # the count checked against insn_emulation on real KVM (test below): 49 per acquisition
    assert sum(p[k] for k in ("hold_loop", "hold_path", "think_loop", "think_path")) == 49
    p0 = twins.guest_path(SpinLock(hold=0, think=0), 1)
    assert p0["hold_loop"] == p0["think_loop"] == 0
    pv = twins.guest_path(PvSpinLock(hold=5, think=5), 4)
    assert pv["think_path"] - twins.guest_path(SpinLock(hold=5, think=5), 4)["think_path"] == 2 + 7 * 4
    with pytest.raises(ValueError, match="MsiPingPong"):
        twins.guest_path(MsiPingPong(), 1)
    # pcpu_is_idle under the host's scheduler: a first pass over every worker finds no is_idle byte
    for n, extra in ((3, 29), (5, 55)):
        pcpu, up = (
            twins.guest_path(WakePlacement(rule=r), n)["waker_path"] for r in ("pcpu_is_idle", "available_idle")
        )  # type: ignore[arg-type]
        assert pcpu - up == extra
        pv = [
            twins.guest_path(WakePlacement(rule=r), n, pv_exits=True)["waker_path"]
            for r in ("pcpu_is_idle", "available_idle")
        ]  # type: ignore[arg-type]
        assert pv[0] == pv[1]


@pytest.mark.parametrize(
    ("cpus", "pinning", "affinity"),
    [((1,), "one_each", "pinned"), ((0, 1), "one_each", "round_robin"), ((0, 1), "shared", "all")],
)
def test_twin_has_the_experiments_structure(cpus: tuple[int, ...], pinning: str, affinity: str) -> None:
    cal = fake_cal()
    exp = Experiment(SpinLock(kind="ticket", hold=50, think=20), vcpus=5, pcpus=cpus, pinning=pinning, duration_s=0.2)  # type: ignore[arg-type]
    cfg = twins.twin(exp, cal, seed=3)
    assert cfg.host.n_pcpus == len(cpus) and cfg.host.affinity == affinity
    assert cfg.host.tick_ns == 4_000_000 and cfg.host.base_slice_ns == 1_500_000 and cfg.host.tsc_khz == 2_600_000
    assert cfg.duration_ns == 200_000_000 and cfg.seed == 3
    (vm,) = cfg.vms
    assert vm.vcpus == 5 and vm.count == 1 and not vm.ple.enabled and vm.policy.kind == "no_yield"
    assert (
        vm.halt_poll.policy == "block-time" and vm.halt_poll.max_ns == 200_000 and vm.halt_poll.grow_start_ns == 10_000
    )
    think, lock = vm.workload.phases
    # counted instructions × the calibrated costs, nothing else
    assert think.ns == round(9 * 400 + 41 * 250) and lock.hold_ns == round(15 * 400 + 101 * 250)
    assert lock.lock_kind == "ticket"
    # drawn around those means (the real iteration's length varies: its phase at a tick is random)
    assert think.dist == lock.dist == twins.SPIN_PHASE_DIST == "uniform"
    assert cfg.host.background.utilization == 0.0  # idle host unless a measured load is given
    # the per-VM halt-poll maximum of the run wins over the module parameter; 0 turns polling off
    off = twins.twin(Experiment(IdleTicks(), 2, (0,), halt_poll_ns=0), cal)
    assert off.vms[0].halt_poll.policy == "off"


def test_twin_models_the_machine_around_the_runs_cpus() -> None:
    """With the machine's CPUs known (``machine_cpus``), a one_each twin has
    them all: its vCPUs on the run's CPUs (``Host.vcpu_pcpus``), the VMM
    thread and noise free to use the others; shared pinning over several
    CPUs and calibrations without the count keep the run's CPUs only. Its
    EEVDF notices expired slices at wake-ups, and the vCPU threads start as
    the real ones did (``start_gap_ns``)."""
    cal = fake_cal()
    cal.values["machine_cpus"] = Value(2.0, "", "given by the test")
    one = Experiment(SpinLock(kind="ticket"), vcpus=3, pcpus=(1,), duration_s=0.2)
    cfg = twins.twin(one, cal, start_gap_ns=30_000.4)
    assert cfg.host.n_pcpus == 2 and cfg.host.vcpu_pcpus == (0,) and cfg.host.affinity == "round_robin"
    assert cfg.host.slice_check_on_wakeup and cfg.host.run_to_parity and cfg.host.start_gap_ns == 30_000
    r = sim.run(cfg)
    assert r.vcpus["last_pcpu"].to_list() == [0, 0, 0]
    assert twins.twin(one, cal).host.start_gap_ns == 0
    for bad in (-1.0, float("nan"), 2e9, "30"):
        with pytest.raises(ValueError, match="start_gap_ns"):
            twins.twin(one, cal, start_gap_ns=bad)  # type: ignore[arg-type]
    shared = Experiment(SpinLock(), vcpus=3, pcpus=(0, 1), pinning="shared", duration_s=0.2)
    assert twins.twin(shared, cal).host.n_pcpus == 2 and twins.twin(shared, cal).host.vcpu_pcpus == ()
    cal.values["machine_cpus"] = Value(64.0, "", "given by the test")
    assert twins.twin_machine_cpus(one, cal) == twins.TWIN_MAX_MACHINE_CPUS
    del cal.values["machine_cpus"]
    assert twins.twin(one, cal).host.n_pcpus == 1
    # the VMM thread's time is no longer taken out of the long tasks' part
    # when it has CPUs of its own
    ol = twins.OtherLoad(
        share=0.5,
        short_fraction=0.0,
        short_burst_ns=0,
        long_burst_ns=3e6,
        short_tasks=0,
        long_tasks=3,
        base_slice_ns=1.5e6,
        vmm_wakeups_per_s=200.0,
        vmm_burst_ns=50_000,
    )
    alone, _ = twins.host_load_for(one, ol)
    machine, _ = twins.host_load_for(one, ol, machine_cpus=2)
    assert machine.weight == round(1024 * 3 * 0.5 / 0.5) and alone.weight == round(1024 * 3 * 0.49 / 0.5)


def test_a_twin_of_cpus_the_calibrated_machine_lacks_says_so() -> None:
    """A calibration of a 2-CPU machine and an experiment on CPU 9 come from
    two machines: the twin is built (by count of CPUs), with a warning that
    names both."""
    import warnings

    cal = fake_cal()
    cal.values["machine_cpus"] = Value(2.0, "", "given by the test")
    far = Experiment(SpinLock(kind="ticket"), vcpus=2, pcpus=(9,), duration_s=0.2)
    with pytest.warns(
        UserWarning, match=r"pcpus \(9,\) name host CPUs the calibrated machine does not have \(it has 2: 0-1\)"
    ):
        cfg = twins.twin(far, cal)
    assert cfg.host.n_pcpus == 2 and cfg.host.vcpu_pcpus == (0,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        twins.twin(Experiment(SpinLock(kind="ticket"), vcpus=2, pcpus=(1,), duration_s=0.2), cal)


def test_start_gap_is_the_median_gap_between_thread_starts() -> None:
    """start_gap_of: consecutive differences of each run's sorted thread
    starts, pooled, their median (a thread that waited ms for a busy CPU
    does not count more than once); None with one vCPU or no column."""
    from types import SimpleNamespace

    runs = [
        SimpleNamespace(threads=pl.DataFrame({"start_ns": [130, 100, 6_000_100]})),
        SimpleNamespace(threads=pl.DataFrame({"start_ns": [50, 90]})),
    ]
    assert twins.start_gap_of(runs) == 40.0  # gaps 30, 6e6, 40
    assert twins.start_gap_of([SimpleNamespace(threads=pl.DataFrame({"start_ns": [5]}))]) is None
    assert twins.start_gap_of([SimpleNamespace(threads=pl.DataFrame({"wall_ns": [5, 6]}))]) is None


def test_twin_of_other_workloads_and_the_ones_without() -> None:
    cal = fake_cal()
    msi = twins.twin(Experiment(MsiPingPong(gap_us=50), 1, (1,), halt_poll_ns=50_000), cal)
    sleep, work = msi.vms[0].workload.phases
    assert isinstance(sleep, sim.Sleep) and sleep.ns == 50_000 and work.ns == 41 * 400
    assert msi.vms[0].halt_poll.max_ns == 50_000
    ticks = twins.twin(Experiment(IdleTicks(hz=1000), 3, (0,)), cal)
    tick, handler = ticks.vms[0].workload.phases
    assert ticks.vms[0].vcpus == 3 and tick.ns == 1_000_000 and tick.periodic and handler.ns == 41 * 400
    pv = twins.twin(Experiment(PvSpinLock(), 2, (0,)), cal)
    assert pv.vms[0].workload.phases[1].lock_kind == "tas"  # the preempted byte is never set on this host
    with pytest.raises(ValueError, match="preempted_from_host"):
        twins.twin(Experiment(PvSpinLock(preempted_from_host=(0,)), 2, (0,)), cal)


def test_ipi_ping_pong_twin_is_an_initiator_beside_a_responder() -> None:
    """vCPU 0: gap + the 9 instructions outside its timed window, IPI, halt
    until the reply; vCPU 1: halt, the round's other instructions, reply.
    With polling off the twin's round trip is two measured IPI wake-ups and
    the timed instructions, read from the trace (not iteration − gap)."""
    cal = fake_cal()
    exp = Experiment(IpiPingPong(rounds=200, gap_us=50.0), 2, (0, 1), halt_poll_ns=0, duration_s=5.0)
    cfg = twins.twin(exp, cal, trace=True)
    w = cfg.vms[0].workload
    gap, send, recv = w.thread0_phases
    assert gap.ns == 50_000 + 9 * 400 and isinstance(send, sim.Send) and isinstance(recv, sim.Recv)
    r_recv, reply, r_send = w.phases
    assert isinstance(r_recv, sim.Recv) and reply.ns == (89 - 9) * 400 and isinstance(r_send, sim.Send)
    assert w.iterations == 200 and cfg.host.wakeup_ipi_ns == 40_000 and cfg.host.affinity == "round_robin"
    res = sim.run(cfg)
    assert res.vms["finished"][0] and res.vms["ops"][0] == 400  # 200 rounds, one iteration per thread each
    rtt = twins.sim_metrics(exp, cfg, res, cal)["rtt_median_us"]
    assert rtt == pytest.approx((2 * 40_000 + 80 * 400) / 1e3, rel=0.02)
    # a longer gap changes the round, not the round trip
    exp2 = Experiment(IpiPingPong(rounds=200, gap_us=500.0), 2, (0, 1), halt_poll_ns=0, duration_s=5.0)
    cfg2 = twins.twin(exp2, cal, trace=True)
    assert twins.sim_metrics(exp2, cfg2, sim.run(cfg2), cal)["rtt_median_us"] == pytest.approx(rtt, rel=0.02)
    assert "ipi gap50us 2v/2c poll0us" == twins.cell_name(exp)
    # with a 200 µs poll on an idle host the polls catch the replies: the round
    # trip loses vCPU 0's wake-up (the caught rounds count with their poll time)
    exp3 = Experiment(IpiPingPong(rounds=200, gap_us=50.0), 2, (0, 1), halt_poll_ns=200_000, duration_s=5.0)
    cfg3 = twins.twin(exp3, cal, trace=True)
    m3 = twins.sim_metrics(exp3, cfg3, sim.run(cfg3), cal)
    assert m3["polled_per_halt"] > 0.9 and m3["rtt_median_us"] < 0.7 * rtt


def test_the_ipi_wake_ups_spread_is_fitted_from_the_round_trips_and_drawn_by_ipi_twins() -> None:
    """``ipi_wake_spread`` is the log standard deviation of one wake-up whose
    pair spreads as the measured round trips did; a twin of an IPI workload
    draws each wake-up from that log-normal, its median set so that two keep
    the measured median round trip; other twins and calibrations without the
    value keep the fixed wake-up."""
    from vcpulab.twins import ipi_pair_median, ipi_wake_spread_of

    assert ipi_pair_median(0.0) == pytest.approx(2.0)
    assert ipi_wake_spread_of(0.0) == ipi_wake_spread_of(float("nan")) == 0.0 and ipi_wake_spread_of(50.0) == 1.0
    spreads = [ipi_wake_spread_of(w) for w in (0.2, 0.5, 0.9)]
    assert spreads == sorted(spreads) and 0 < spreads[0] < spreads[-1] < 1
    # the fit inverts the width: a pair drawn with the fitted spread spreads as asked
    rng = np.random.default_rng(1)
    pair = np.exp(spreads[1] * rng.standard_normal((2, 200_000))).sum(axis=0)
    q10, q50, q90 = np.percentile(pair, (10, 50, 90))
    assert (q90 - q10) / q50 == pytest.approx(0.5, abs=0.02)
    cal = fake_cal()
    spread = 0.4
    cal.values["ipi_wake_spread"] = Value(spread, "", "given by the test")
    exp = Experiment(IpiPingPong(rounds=200, gap_us=50.0), 2, (0, 1), halt_poll_ns=0, duration_s=5.0)
    h = twins.twin(exp, cal).host
    assert h.wakeup_dist == "lognormal" and h.wakeup_jitter == spread
    assert h.wakeup_ipi_ns == round(40_000 * 2 / ipi_pair_median(spread)) < 40_000
    # the median round trip stays the measured one (two wake-ups and the timed instructions)
    cfg = twins.twin(exp, cal, trace=True)
    rtt = twins.sim_metrics(exp, cfg, sim.run(cfg), cal)["rtt_median_us"]
    assert rtt == pytest.approx((2 * 40_000 + 80 * 400) / 1e3, rel=0.05)
    # not an IPI workload, or no measured spread: the fixed wake-up
    msi = twins.twin(Experiment(MsiPingPong(), 1, (0,), duration_s=0.2), cal).host
    assert msi.wakeup_jitter == 0.0 and msi.wakeup_dist == "uniform" and msi.wakeup_ipi_ns == 40_000
    plain = twins.twin(exp, fake_cal()).host
    assert plain.wakeup_jitter == 0.0 and plain.wakeup_ipi_ns == 40_000


def test_a_blocked_halts_cpu_is_the_cpu_difference_over_the_blocked_halts_difference() -> None:
    """``blocked_halt_ns``: two runs of one program, polling off and on: each
    spends its instructions plus ``switch`` per blocked halt, so the switch
    comes out whatever the instructions cost; too few halts caught by the
    polls, or a negative difference, give NaN with the reason."""
    from vcpulab.twins import blocked_halt_ns

    insns, switch = 45_000.0, 28_000.0
    got, how = blocked_halt_ns((insns + 1.0 * switch, 1.0), (insns + 0.1 * switch, 0.1))
    assert got == pytest.approx(switch) and "0.10" in how
    nan, why = blocked_halt_ns((73_000.0, 1.0), (70_000.0, 0.8))
    assert math.isnan(nan) and "blocked too" in why
    neg, why = blocked_halt_ns((50_000.0, 1.0), (60_000.0, 0.0))
    assert math.isnan(neg) and "not positive" in why


def test_a_measured_blocked_halt_cost_is_charged_on_the_wake_up_and_left_out_of_its_latency() -> None:
    """A calibration with ``halt_wake_ns``: every twin (under the host's
    scheduler and under vcpulab's) charges it when a vCPU is back from a
    blocked halt (``Pv.halt_wake_ns``) and takes it out of the wake-up
    latency that held it (drawn fixed: the spread lies in that CPU time,
    which the simulator charges fixed), so an IPI ping-pong keeps its round
    trip; calibrations without the value, or with NaN (not measured), are
    unchanged."""
    from vcpulab import sched

    cal = fake_cal()
    for k, x in (("halt_wake_ns", 30_000.0), ("ipi_wake_spread", 0.4), ("uexit_ns", 5_000.0)):
        cal.values[k] = Value(x, "", "given by the test")
    exp = Experiment(IpiPingPong(rounds=200, gap_us=50.0), 2, (0, 1), halt_poll_ns=0, duration_s=5.0)
    cfg = twins.twin(exp, cal, trace=True)
    h = cfg.host
    assert cfg.vms[0].pv.halt_wake_ns == 30_000 and h.switch_ns == 0
    assert h.wakeup_ipi_ns == 10_000 and h.wakeup_dist == "uniform"
    res = sim.run(cfg)
    rtt = twins.sim_metrics(exp, cfg, res, cal)["rtt_median_us"]
    assert rtt == pytest.approx((2 * 40_000 + 80 * 400) / 1e3, rel=0.05)
    # the cost is CPU time on the vCPU's host CPU: exit time, one per blocked halt
    vc = res.vcpus
    assert int(vc["exit_ns"].sum()) >= 30_000 * int(vc["halt_exits"].sum() - vc["halt_successful_poll"].sum()) - 60_000
    msi = twins.twin(Experiment(MsiPingPong(), 1, (0,), duration_s=0.2), cal)
    assert msi.vms[0].pv.halt_wake_ns == 30_000 and msi.host.wakeup_ipi_ns == 40_000 - 30_000
    wake = Experiment(WakePlacement(), 3, (0, 1), duration_s=0.2, scheduler=sched.round_robin())
    assert twins.twin(wake, cal).vms[0].pv.halt_wake_ns == 30_000
    # with the measured spread each return is drawn log-normal, its median set so that two keep the
    # median round trip
    from vcpulab.twins import ipi_pair_median

    cal.values["halt_wake_spread"] = Value(0.4, "", "given by the test")
    cfg = twins.twin(exp, cal, trace=True)
    pv = cfg.vms[0].pv
    assert pv.halt_wake_jitter == 0.4 and pv.halt_wake_ns == round(30_000 * 2 / ipi_pair_median(0.4)) < 30_000
    rtt = twins.sim_metrics(exp, cfg, sim.run(cfg), cal)["rtt_median_us"]
    assert rtt == pytest.approx((2 * 40_000 + 80 * 400) / 1e3, rel=0.08)
    cal.values["halt_wake_ns"] = Value(float("nan"), "ns", "not measured")
    assert twins.twin(exp, cal).vms[0].pv.halt_wake_ns == 0
    assert twins.twin(exp, fake_cal()).vms[0].pv.halt_wake_ns == 0


def test_twin_wait_counts_the_waits_still_open_at_the_end() -> None:
    """TAS with 8 vCPUs on one CPU: most vCPUs wait at the end of the run; the
    real guest finishes and counts those waits, so the twin's mean includes
    them (up to the end): the acquisitions' mean weighted with the open ones."""
    cal = fake_cal()
    exp = Experiment(SpinLock(kind="tas", hold=200, think=20), 8, (0,), duration_s=0.2)
    cfg = twins.twin(exp, cal)
    res = sim.run(cfg)
    vms = res.vms
    n_open, n = int(vms["lock_waits_open"][0]), int(vms["lock_acquisitions"][0])
    assert 1 <= n_open <= 8 and vms["lock_wait_open_mean_ns"][0] > 0
    mean = (vms["lock_wait_mean_ns"][0] * n + vms["lock_wait_open_mean_ns"][0] * n_open) / (n + n_open)
    window = twins.guest_path(exp.workload, 8)["wait_path"] * 400
    running = 1.0 - float(res.vcpus["wait_ns"].mean()) / cfg.duration_ns  # type: ignore[operator]
    got = twins.sim_metrics(exp, cfg, res, cal)["wait_per_acq_us"]
    assert got == pytest.approx((mean + window / running) / 1e3)
    assert got > (vms["lock_wait_mean_ns"][0] + window / running) / 1e3


def test_experiment_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="vcpus"):
        Experiment(SpinLock(), vcpus=0)
    with pytest.raises(ValueError, match="distinct"):
        Experiment(SpinLock(), pcpus=(0, 0))
    with pytest.raises(ValueError, match="pinning"):
        Experiment(SpinLock(), pinning="loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exactly two"):
        Experiment(IpiPingPong(), vcpus=3)
    with pytest.raises(ValueError, match="other_share"):
        twins.background_for(Experiment(SpinLock()), 1.0)


def test_measured_load_becomes_a_background_of_the_right_weight() -> None:
    """3 vCPUs on one CPU that lost 50 % to other tasks: the others weigh as
    much as the 3 vCPU threads; the twin's steal is then 1 − 1/6."""
    exp = Experiment(SpinLock(kind="tas", hold=50, think=50), vcpus=3, pcpus=(0,), duration_s=0.3)
    bg = twins.background_for(exp, 0.5)
    assert bg.weight == 3 * 1024 and bg.utilization > 0.99
    r = sim.run(twins.twin(exp, fake_cal(), other_share=0.5))
    steal = float(r.vcpus["wait_ns"].mean()) / r.config.duration_ns  # type: ignore[operator]
    assert abs(steal - 5 / 6) < 0.03
    halting = twins.background_for(Experiment(IdleTicks(), 1, (0,)), 0.5)
    assert halting.weight == 1024 and halting.utilization == 0.5


def test_other_load_classes_tasks_by_their_mean_burst() -> None:
    """Short tasks (mean burst < base slice) and long ones are told apart from
    two schedstat snapshots; the run's own threads are left out."""
    before = {1: (0, 0), 2: (0, 0), 3: (0, 0), 9: (0, 0)}
    after = {1: (10_000_000, 2), 2: (1_000_000, 50), 3: (0, 0), 9: (99_000_000, 1), 4: (1_000_000, 50)}
    ol = twins.OtherLoad.measure(before, after, own={9}, share=0.6, base_slice_ns=1_500_000, vmm=(200.0, 50_000.0))
    assert ol.short_tasks == 2 and ol.long_tasks == 1  # task 4 was born meanwhile; task 3 did not run
    assert ol.short_fraction == pytest.approx(2 / 12) and ol.short_burst_ns == pytest.approx(20_000)
    assert ol.long_burst_ns == pytest.approx(5_000_000) and ol.vmm_wakeups_per_s == 200.0
    pooled = twins.OtherLoad.pooled([ol, twins.OtherLoad(**{**ol.as_dict(), "share": 0.2})])
    assert pooled is not None and pooled.share == pytest.approx(0.4) and twins.OtherLoad.pooled([]) is None
    # a trial in which the others took nothing adds no short time: the pooled
    # load stays valid (a short fraction needs a short burst)
    idle = twins.OtherLoad(**{**ol.as_dict(), "share": 0.0, "short_fraction": 0.5, "short_burst_ns": 30_000.0})
    busy = twins.OtherLoad(**{**ol.as_dict(), "short_fraction": 0.0, "short_burst_ns": float("nan")})
    p2 = twins.OtherLoad.pooled([idle, busy])
    assert p2 is not None and p2.short_fraction == 0.0 and p2.share == pytest.approx(0.3)
    p3 = twins.OtherLoad.pooled([ol, twins.OtherLoad(**{**ol.as_dict(), "short_fraction": 0.0})])
    assert p3 is not None and p3.short_fraction == pytest.approx(1 / 12) and p3.short_burst_ns == pytest.approx(20_000)
    with pytest.raises(ValueError, match="share"):
        twins.OtherLoad(
            share=1.0, short_fraction=0, short_burst_ns=0, long_burst_ns=0, short_tasks=0, long_tasks=0, base_slice_ns=1
        )


def test_other_load_share_is_bounded_by_the_other_tasks_cpu_time() -> None:
    """cpuidle's share counts interrupt handling as busy; the twin's load is
    tasks: the share is at most the others' CPU time (plus the VMM thread's
    measured rate) over the run's CPUs and wall time."""
    before = {1: (0, 0), 2: (0, 0)}
    after = {1: (300_000, 30), 2: (200_000, 20)}  # 0.5 ms of other tasks
    one_cpu_25ms = (25e6, 1)
    ol = twins.OtherLoad.measure(before, after, own=set(), share=0.17, base_slice_ns=3e6, window=one_cpu_25ms)
    assert ol.share == pytest.approx(0.5e6 / 25e6) and ol.quality_share == pytest.approx(0.17)
    # the VMM thread's measured time counts too (200 wake-ups/s of 50 us: 1 % of a CPU)
    ol = twins.OtherLoad.measure(
        before, after, own=set(), share=0.17, base_slice_ns=3e6, vmm=(200.0, 50_000.0), window=one_cpu_25ms
    )
    assert ol.share == pytest.approx(0.02 + 0.01)
    # never raised above what was measured, and without a window nothing changes
    assert twins.OtherLoad.measure(before, after, set(), 0.005, 3e6, window=one_cpu_25ms).share == 0.005
    assert twins.OtherLoad.measure(before, after, set(), 0.17, 3e6).share == pytest.approx(0.17)


def test_measured_load_becomes_noise_vmm_thread_and_background() -> None:
    """host_load_for: short tasks → kernel-thread noise of the measured rate
    and length, the VMM loop → the VMM thread, the rest → the background task;
    the twin's vCPUs are then switched out more often than with one task
    (each noise wake-up may preempt), at about the same steal."""
    exp = Experiment(SpinLock(kind="tas", hold=50, think=50), vcpus=3, pcpus=(0,), duration_s=0.3)
    ol = twins.OtherLoad(
        share=0.5,
        short_fraction=0.1,
        short_burst_ns=50_000,
        long_burst_ns=3e6,
        short_tasks=10,
        long_tasks=3,
        base_slice_ns=1.5e6,
        vmm_wakeups_per_s=200.0,
        vmm_burst_ns=50_000,
    )
    bg, noise = twins.host_load_for(exp, ol)
    assert noise.kthread_ns == 50_000 and noise.kthread_hz == pytest.approx(0.05 / 50e-6)
    assert noise.vmm_io_hz == 200.0 and noise.vmm_io_ns == 50_000
    # each of the 10 short tasks is a noise task of its own, spread over the machine's CPUs
    assert noise.kthreads_per_cpu == math.ceil(10 / (os.cpu_count() or 1))
    # long share 0.5 − 0.05 − 0.01 against the vCPUs' 0.5: k = 3 × 0.44 / 0.5
    assert bg.weight == round(1024 * 3 * 0.44 / 0.5) and bg.utilization > 0.99
    cal = fake_cal()
    many = sim.run(twins.twin(exp, cal, other_load=ol))
    one = sim.run(twins.twin(exp, cal, other_share=0.5))
    steal = lambda r: float(r.vcpus["wait_ns"].mean()) / r.config.duration_ns
    assert abs(steal(many) - steal(one)) < 0.05
    assert float(many.vcpus["sched_in"].mean()) > 1.2 * float(one.vcpus["sched_in"].mean())  # type: ignore[arg-type]
    # halting workloads: the long part is a background of that utilization
    bg_h, _ = twins.host_load_for(Experiment(IdleTicks(), 1, (0,)), ol)
    assert bg_h.weight == 1024 and bg_h.utilization == pytest.approx(0.44)
    idle_bg, idle_noise = twins.host_load_for(exp, twins.OtherLoad(**{**ol.as_dict(), "share": 0.0}))
    assert idle_bg.utilization == 0.0 and idle_noise.kthread_hz == 0.0 and idle_noise.vmm_io_hz == 200.0


def test_distributions_of_frames_in_the_trace_schema() -> None:
    """distributions(): real frames in the tracing schema (here built from a
    simulated run) against twins; identical runs give KS 0, a different
    host gives a larger distance; wake-ups come from the guest's timer."""
    cal = fake_cal()
    exp = Experiment(IdleTicks(hz=1000), 2, (0,), duration_s=0.2, halt_poll_ns=0)
    a = sim.run(twins.twin(exp, cal, trace=True))
    fr = twins.sim_trace_frames(a)
    assert tuple(fr["trace"].columns) == twins.TRACE_COLUMNS and tuple(fr["wakeups"].columns) == twins.WAKEUP_COLUMNS
    w = fr["wakeups"]
    # every wake-up is on the 1 ms timer grid, and a vCPU runs at or after it
    assert w.height > 300 and (w["wake_ns"] % 1_000_000 == 0).all() and (w["latency_ns"] >= 0).all()
    same = twins.distributions(fr, a)
    assert same["quantity"].to_list() == ["slice_ns", "wakeup_latency_ns"]
    assert (same["ks"] == 0.0).all() and (same["n_real"] == same["n_sim"]).all()
    loaded = sim.run(twins.twin(exp, cal, seed=1, trace=True, other_share=0.8))
    d, fig = twins.distributions([fr], [loaded], plot=True)
    lat = d.row(by_predicate=pl.col("quantity") == "wakeup_latency_ns", named=True)
    assert lat["ks"] > 0.1 and lat["p_value"] < 0.01
    # the loaded host delays some wake-ups by whole milliseconds (a 0.8 background's slices)
    slow = twins.sim_trace_frames(loaded)["wakeups"]["latency_ns"]
    assert slow.quantile(0.99) > 10 * w["latency_ns"].quantile(0.99)  # type: ignore[operator]
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt

    plt.close(fig)
    # spin locks never block: slices only, no wake-ups on either side
    lk = sim.run(twins.twin(Experiment(SpinLock(), 2, (0,), duration_s=0.05), cal, trace=True))
    d2 = twins.distributions({"trace": twins.sim_trace_frames(lk)["trace"], "wakeups": None}, lk)
    assert d2["n_sim"][1] == 0 and np.isnan(d2["ks"][1]) and d2["ks"][0] == 0.0
    with pytest.raises(ValueError, match="columns"):
        twins.distributions({"trace": pl.DataFrame({"start_ns": [0]}), "wakeups": None}, lk)
    with pytest.raises(ValueError, match="halt polling off"):
        msi = Experiment(MsiPingPong(gap_us=50), 1, (0,), duration_s=0.05, halt_poll_ns=200_000)
        twins.sim_wakeups(sim.run(twins.twin(msi, cal, trace=True)))


def test_twin_of_a_fixed_number_of_iterations() -> None:
    """SpinLock(iterations=k): the twin runs k iterations per thread and ends
    when all are done, as the real guest does; rates are over its wall time."""
    cal = fake_cal()
    exp = Experiment(SpinLock(kind="tas", hold=50, think=50, iterations=40), 2, (0,), duration_s=5.0)
    cfg = twins.twin(exp, cal)
    assert cfg.vms[0].workload.iterations == 40
    r = sim.run(cfg)
    assert r.vms["lock_acquisitions"][0] == 80 and r.vms["wall_ns"][0] < cfg.duration_ns
    m = twins.sim_metrics(exp, cfg, r, cal)
    assert m["acq_per_s"] == pytest.approx(80 / (r.vms["wall_ns"][0] / 1e9))
    assert 0.0 <= m["steal_fraction"] < 1.0


def test_periodic_sleep_keeps_the_timer_grid() -> None:
    """A periodic Sleep wakes on multiples of its period whatever ran before
    it (a LAPIC periodic timer); a relative one drifts with the work."""
    work = sim.Compute(300_000, dist="exp")

    def starts(sleep: sim.Sleep) -> np.ndarray:
        cfg = sim.Config(
            host=sim.Host(n_pcpus=1),
            vms=(sim.Vm(vcpus=1, workload=sim.Workload(phases=(sleep, work))),),
            duration_ns=50_000_000,
            seed=1,
            trace=True,
        )
        t = sim.run(cfg).trace
        return t.filter(pl.col("vcpu") == 0)["start_ns"].to_numpy()[1:]

    periodic = starts(sim.Sleep(1_000_000, periodic=True))
    assert periodic.size >= 30 and (periodic % 1_000_000 == 0).all()
    relative = starts(sim.Sleep(700_000))
    assert (relative % 1_000_000 != 0).any()
    with pytest.raises(ValueError, match="periodic"):
        sim.Sleep(1000, dist="exp", periodic=True)
    # left out of the JSON when off, so existing configurations keep their hash
    assert "periodic" not in sim.Sleep(1000).to_dict() and sim.Sleep(1000, periodic=True).to_dict()["periodic"]


def test_sim_lock_wait_metric() -> None:
    """The simulator's lock wait (Lock phase start → running with the lock):
    zero without contention, the preempted holder's slices with it."""
    cal = fake_cal()
    one = sim.run(twins.twin(Experiment(SpinLock(kind="ticket"), 1, (0,), duration_s=0.1), cal))
    assert one.vms["lock_wait_mean_ns"][0] == 0.0 and one.vms["lock_acquisitions"][0] > 0
    three = sim.run(twins.twin(Experiment(SpinLock(kind="ticket"), 3, (0,), duration_s=0.1), cal))
    assert three.vms["lock_wait_mean_ns"][0] > 1e6  # ms: the next ticket's vCPU waits for its slice
    assert three.vms["lock_wait_p99_ns"][0] >= three.vms["lock_wait_p50_ns"][0]


def test_sim_steal_intervals_publish_at_sched_in() -> None:
    cal = fake_cal()
    r = sim.run(twins.twin(Experiment(SpinLock(kind="tas"), 2, (0,), duration_s=0.1), cal, trace=True))
    x = twins.sim_steal_intervals(r)
    assert x.size == 2 * 10
    # everything waited is published (up to the last wait, still running at the end)
    total = float(r.vcpus["wait_ns"].sum())
    assert abs(x.sum() * 10_000_000 - total) <= 2 * 4_000_000 + 1
    with pytest.raises(ValueError, match="trace"):
        twins.sim_steal_intervals(sim.run(twins.twin(Experiment(SpinLock(), 1, (0,), duration_s=0.02), cal)))


def test_real_steal_under_vcpulabs_scheduler_is_the_wait_for_a_token() -> None:
    """A scheduled run's guest sees only the kernel's run delay in its steal
    area (its waits for a token are sleeps): the steal intervals then come
    from the decision log, each wait published at the grant that ends it, as
    the twin publishes its token waits at the sched-in."""
    from vcpulab.experiment import Run

    ms = 1_000_000
    # 2 vCPUs on one CPU, 4 ms slices, 40 ms: vCPU 0 holds [0, 4), [8, 12), ...; vCPU 1 [4, 8), ...
    rows = [
        dict(
            t_ns=t * ms,
            pcpu=0,
            out_vm=0,
            out_vcpu=(t // 4 + 1) % 2 if t else -1,
            in_vm=0,
            in_vcpu=(t // 4) % 2,
            why="slice" if t else "start",
        )
        for t in range(0, 40, 4)
    ]
    rows.insert(3, dict(t_ns=9 * ms, pcpu=0, out_vm=0, out_vcpu=0, in_vm=0, in_vcpu=0, why="watchdog"))
    empty = pl.DataFrame()
    r = Run(samples=empty, results=empty, threads=empty, wall_s=0.04, placement={}, config={"vcpus": 2})
    r.schedule = pl.DataFrame(rows)
    x = twins.real_steal_intervals(r).reshape(2, 4)
    # vCPU 0: grants at 0 (waited 0), 8, 16, 24, 32 (4 ms each); vCPU 1: at 4 (4 ms from the start), 12, 20, 28, 36
    assert x[0].tolist() == pytest.approx([0.4, 0.4, 0.4, 0.4])
    assert x[1].tolist() == pytest.approx([0.4, 0.4, 0.8, 0.4])
    # the steal fraction of the same log: half the run without a token
    held, _ = twins._metrics._token_time(r)
    assert held == [20 * ms, 20 * ms]


def test_directions_pair_cells_that_differ_in_one_factor() -> None:
    base = dict(
        workload="SpinLock",
        kind="tas",
        cpus=1,
        hold=50,
        think=50,
        halt_poll_ns=-1,
        gap_us=-1.0,
        hz=-1,
        real_lo=float("nan"),
        real_hi=float("nan"),
        sim_lo=float("nan"),
        sim_hi=float("nan"),
        metric="acq_per_s",
    )
    rows = [
        {**base, "cell": "a", "vcpus": 1, "real": 3000.0, "sim": 3500.0},
        {**base, "cell": "b", "vcpus": 3, "real": 2400.0, "sim": 3100.0},
        {**base, "cell": "c", "vcpus": 3, "kind": "ticket", "real": 700.0, "sim": 1900.0},
    ]
    d = twins.directions(pl.DataFrame(rows))
    by = {(r["factor"], r["low"], r["high"]): r for r in d.iter_rows(named=True)}
    v = by[("vcpus", "a", "b")]
    assert v["metric"] == "acq_per_vcpu_s" and v["real_diff"] == 800 - 3000 and v["agree"] and v["significant"]
    k = by[("kind", "b", "c")]  # "tas" < "ticket"
    assert k["real_diff"] < 0 and k["sim_diff"] < 0 and k["agree"]
    assert len(d) == 2


def test_the_speed_process_is_fitted_from_a_probes_samples() -> None:
    """fit_speed: two CPUs' 5-ms costs per instruction, fast (1,000 ns) with a
    slow stretch (1,500 ns) of 20 samples on CPU 0 and two of 10 on CPU 1, one
    isolated spike (smoothed away): the levels relative to the median, each
    state's time over the changes out of it; no slow stretch → off."""
    dt = 5_000_000
    c0 = [1000.0] * 40 + [1500.0] * 20 + [1000.0] * 40
    c1 = [1000.0] * 30 + [1500.0] * 10 + [1000.0] * 20 + [1500.0] * 10 + [1000.0] * 30
    c1[5] = 2000.0  # one sample: not a stretch
    rows = [(cpu, i * dt, x) for cpu, xs in ((0, c0), (1, c1)) for i, x in enumerate(xs)]
    samples = pl.DataFrame(rows, schema=["pcpu", "t_ns", "insn_ns"], orient="row")
    out, vals = twins.fit_speed(samples, float(dt))
    assert out["slow"].sum() == 40
    assert vals["speed_fast_pct"].value == pytest.approx(100.0)
    assert vals["speed_slow_pct"].value == pytest.approx(100 * 1000 / 1500)
    # 40 slow samples over 3 changes out of slow; 160 fast ones over 3 changes out of fast
    assert vals["speed_slow_dwell_ns"].value == pytest.approx(40 * dt / 3)
    assert vals["speed_fast_dwell_ns"].value == pytest.approx(160 * dt / 3)
    hs = twins.host_speed_of(vals)
    assert (hs.fast_pct, hs.slow_pct, hs.slow_dwell_ns) == (100, 67, round(40 * dt / 3))
    # a steady host: no process, and a twin of it runs at one speed
    flat = samples.with_columns(pl.lit(1000.0).alias("insn_ns"))
    _, vals = twins.fit_speed(flat, float(dt))
    assert not twins.host_speed_of(vals).is_on and "no two-state process" in vals["speed_fast_pct"].how


def test_a_twin_runs_at_its_calibrations_speed_process() -> None:
    """twin(): a calibration with a speed probe gives every twin's host its
    process (host_speed=False, or a calibration without one: one speed)."""
    exp = Experiment(SpinLock(kind="ticket", hold=50, think=50), vcpus=2, pcpus=(0,))
    cal = fake_cal()
    assert twins.twin(exp, cal).host.speed == sim.HostSpeed()
    probe = {"speed_fast_pct": 101.0, "speed_slow_pct": 70.4, "speed_fast_dwell_ns": 8e8, "speed_slow_dwell_ns": 1.5e8}
    vals = dict(cal.values) | {k: Value(v, "", "given by the test") for k, v in probe.items()}
    with_speed = Calibration(values=vals, cpu=0)
    hs = twins.twin(exp, with_speed).host.speed
    assert hs == sim.HostSpeed(
        fast_pct=101, slow_pct=70, fast_dwell_ns=800_000_000, slow_dwell_ns=150_000_000, host_paths=True
    )
    assert not twins.twin(exp, with_speed, host_speed="work").host.speed.host_paths
    # CPUs that slow each other when they run together: the threads of one core
    two = Experiment(SpinLock(kind="ticket", hold=50, think=50), vcpus=2, pcpus=(0, 1), pinning="one_each")
    corun = Calibration(values=vals | {"corun_speed_pct": Value(92.4, "%", "given by the test")}, cpu=0)
    h = twins.twin(two, corun).host
    assert (h.n_pcpus, h.threads_per_core, h.smt_speed_pct) == (2, 2, 92)
    assert twins.twin(two, corun, host_speed=False).host.threads_per_core == 1
    assert twins.twin(exp, corun).host.threads_per_core == 1  # one CPU: nothing beside it
    # a twin of the run's CPUs alone (here: under vcpulab's scheduler) counts those
    # (a machine of 2 CPUs, a scheduled run on one of them: the twin models that one)
    sched = {"uexit_ns": 8_000.0, "sched_handoff_ns": 20_000.0, "spin_iter_ns": 5_000.0, "machine_cpus": 2.0}
    corun = Calibration(values=corun.values | {k: Value(v, "ns", "given by the test") for k, v in sched.items()}, cpu=0)
    for e in (*twins.policy_grid(duration_s=0.2), *twins.coscheduling_grid(duration_s=0.2)):
        h = twins.twin(e, corun).host
        assert h.threads_per_core == (h.n_pcpus if h.n_pcpus >= 2 else 1), twins.cell_name(e)
    assert twins.twin(exp, with_speed, host_speed=False).host.speed == sim.HostSpeed()
    with pytest.raises(ValueError, match="host_speed must be True, False or 'work'"):
        twins.twin(exp, with_speed, host_speed="paths")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host_speed must be True, False or 'work', got 1"):
        twins.compare(exp, cal=with_speed, host_speed=1)  # type: ignore[arg-type]
    # the process lowers an uncontended lock's rate (its slow stretches' work takes
    # longer); contended cells need not move one way (the tick meets other phases)
    alone = Experiment(SpinLock(kind="tas", hold=50, think=50), vcpus=1, pcpus=(0,), duration_s=2.0)

    def acq(c: Calibration) -> float:
        return sum(float(sim.run(twins.twin(alone, c, seed=k)).vms["throughput_ops_s"][0]) for k in range(3))

    assert acq(with_speed) < 0.99 * acq(cal)


# ---------------------------------------------------------------------- real KVM


def test_calibration_counts_match_kvm(kvm_host: Host) -> None:
    """Every guest instruction is emulated here, so KVM's insn_emulation counts
    them: the program's count (guest_path) must match it exactly (± the run's
    start and end, < 0.1 per acquisition); the costs are positive."""
    cal = twins.calibrate()
    assert abs(cal["insns_per_acq_measured"] - cal["insns_per_acq_counted"]) < 0.1
    assert cal["path_insn_ns"] > 0 and cal["loop_insn_ns"] > 0
    assert cal["tick_ns"] in (1_000_000, 2_000_000, 3_333_333, 4_000_000, 10_000_000)
    assert cal.frame().height == len(cal.values) and all(cal.frame()["how"].str.len_chars() > 0)
    assert twins.calibrate() is cal  # cached per process
    # the IPI wake-ups' spread, from the same run's round trips (a log standard deviation)
    assert 0.0 <= cal["ipi_wake_spread"] <= 1.0 and "p10-p90" in cal.values["ipi_wake_spread"].how
    # a blocked halt's CPU beyond a polled one: measured (a few to some tens of µs here), or NaN
    # with the reason where the polled run's halts blocked as well (a busy host)
    halt_wake = cal["halt_wake_ns"]
    assert 0 < halt_wake < 1e6 if math.isfinite(halt_wake) else "not measured" in cal.values["halt_wake_ns"].how
    spread = cal["halt_wake_spread"]
    assert 0.0 <= spread <= 1.0 if math.isfinite(halt_wake) else math.isnan(spread)
    # the speed probe: a two-state process or none, each value explained
    hs = twins.host_speed_of(cal.values)
    assert all(k in cal.values and cal.values[k].how for k in twins.SPEED_KEYS)
    assert hs.slow_pct <= hs.fast_pct and (hs.is_on or cal["speed_slow_dwell_ns"] == 0)


def test_the_speed_probe_reads_every_cpus_cost_per_instruction(kvm_host: Host) -> None:
    """speed_probe: one Spin vCPU pinned per CPU, one row per CPU and 5-ms
    sample, each a cost per emulated instruction of the order calibrate
    measures (~0.2-5 µs here); bad input is refused before a VM is made."""
    from vcpulab.kvm import allowed_cpus

    cpus = allowed_cpus()
    p = twins.speed_probe(duration_s=0.3, alone_s=0.2)
    assert sorted(p.samples["pcpu"].unique().to_list()) == cpus
    per_cpu = p.samples.group_by("pcpu").len()["len"]
    assert (per_cpu >= 40).all(), per_cpu  # ~58 samples of 5 ms in 0.3 s, less the first two
    assert p.samples["insn_ns"].min() > 50 and p.samples["insn_ns"].median() < 20_000  # type: ignore[operator]
    assert set(p.values) == {*twins.SPEED_KEYS, "corun_speed_pct"}
    assert p.host_speed().slow_pct <= p.host_speed().fast_pct
    # with two CPUs or more, a CPU's speed beside the others over its speed alone
    assert 10 <= p.values["corun_speed_pct"].value <= 100
    assert ("alone" in p.values["corun_speed_pct"].how) == (len(cpus) >= 2)
    with pytest.raises(ValueError, match="duration_s"):
        twins.speed_probe(duration_s=0.01)
    with pytest.raises(ValueError, match="at least 10 samples"):
        twins.speed_probe(duration_s=0.2, sample_every_s=0.05)


def test_twin_of_a_real_run_matches_its_structure(kvm_host: Host) -> None:
    from vcpulab.experiment import run

    r = run(
        SpinLock(kind="ticket", hold=20, think=20),
        vcpus=3,
        placement=[[0], [1], [0]],
        duration_s=0.1,
        host=kvm_host,
        warn_quality=False,
    )
    exp = Experiment.from_run(r)
    assert exp.vcpus == 3 and exp.pcpus == (0, 1) and exp.pinning == "one_each" and exp.duration_s == 0.1
    cfg = twins.twin(r)
    assert cfg.host.n_pcpus == max(2, min(len(os.sched_getaffinity(0)), twins.TWIN_MAX_MACHINE_CPUS))
    assert cfg.host.affinity == "round_robin" and cfg.vms[0].vcpus == 3
    # each thread's start, after the run's and before its end; the twin's gap from them
    st = r.threads["start_ns"]
    assert st.min() >= 0 and st.max() < r.wall_s * 1e9  # type: ignore[operator]
    assert cfg.host.start_gap_ns == round(twins.start_gap_of([r]) or 0)
    shared = run(SpinLock(), vcpus=2, pcpus=[0, 1], duration_s=0.05, host=kvm_host, warn_quality=False)
    assert twins.twin(shared).host.affinity == "all"
    with pytest.raises(ValueError, match="placement"):
        Experiment.from_run(
            run(SpinLock(), vcpus=2, placement=[[0], [0, 1]], duration_s=0.05, host=kvm_host, warn_quality=False)
        )
    ticks = run(
        IdleTicks(hz=500), vcpus=2, pcpus=[1], duration_s=0.05, host=kvm_host, halt_poll_ns=0, warn_quality=False
    )
    t = twins.twin(ticks)
    assert (
        t.host.vcpu_pcpus == ((0,) if t.host.n_pcpus > 1 else ())
        and t.vms[0].vcpus == 2
        and t.vms[0].halt_poll.policy == "off"
    )
    assert t.vms[0].workload.phases[0].ns == 2_000_000 and t.vms[0].workload.phases[0].periodic
    msi = run(MsiPingPong(rounds=20, gap_us=30), vcpus=1, pcpus=[1], duration_s=3.0, host=kvm_host, warn_quality=False)
    assert twins.twin(msi).vms[0].workload.phases[0].ns == 30_000


@pytest.mark.parametrize("n", [2, 3])
def test_steal_agrees_for_n_vcpus_on_one_cpu(kvm_host: Host, n: int) -> None:
    """N always-runnable vCPUs on one CPU: steal ≈ 1 − 1/N on an idle host,
    more when other tasks take the CPU too; the twin (with the load the run
    measured) must be within 0.10."""
    exp = Experiment(SpinLock(kind="tas", hold=50, think=50), vcpus=n, pcpus=(1,), duration_s=0.3)
    cal = twins.calibrate()

    def check(r) -> None:  # type: ignore[no-untyped-def]
        real = float(r.steal_fraction()["steal_fraction"].mean())
        sim_r = sim.run(twins.twin(r, cal))
        simulated = float(sim_r.vcpus["wait_ns"].mean()) / sim_r.config.duration_ns  # type: ignore[operator]
        print(f"{n} vCPUs on 1 CPU: steal real {real:.3f}, twin {simulated:.3f}; {r.quality.line()}")
        assert abs(real - simulated) <= 0.10

    remeasure(lambda: exp.run(host=kvm_host, warn_quality=False), check, lambda r: r.quality)


def test_directions_agree_on_one_cpu(kvm_host: Host) -> None:
    """1 vs 3 vCPUs on one CPU: throughput per vCPU falls (by ~3x: the CPU is
    shared); 3 vCPUs, ticket vs TAS: ticket falls further (a preempted next
    ticket holds everyone up; measured here 3-10x). Both in real and in the twin."""
    cal = twins.calibrate()
    cells = {
        (kind, n): Experiment(SpinLock(kind=kind, hold=50, think=50), vcpus=n, pcpus=(1,), duration_s=0.3)  # type: ignore[arg-type]
        for kind, n in (("tas", 1), ("tas", 3), ("ticket", 3))
    }

    def measure():  # type: ignore[no-untyped-def]
        return {k: e.run(host=kvm_host, warn_quality=False) for k, e in cells.items()}

    def per_vcpu(k, real) -> tuple[float, float]:  # type: ignore[no-untyped-def]
        r = real[k]
        re = float(r.results["acquisitions"].sum()) / cells[k].duration_s / cells[k].vcpus
        s = sim.run(twins.twin(r, cal))
        si = float(s.vms["lock_acquisitions"][0]) / cells[k].duration_s / cells[k].vcpus
        return re, si

    def check(real) -> None:  # type: ignore[no-untyped-def]
        v = {k: per_vcpu(k, real) for k in cells}
        print({f"{k[0]} {k[1]}v": (round(a), round(b)) for k, (a, b) in v.items()})
        for side in (0, 1):
            assert v[("tas", 3)][side] * 2 < v[("tas", 1)][side], (
                f"more vCPUs, less per vCPU ({'real sim'.split()[side]})"
            )
            assert v[("ticket", 3)][side] * 1.5 < v[("tas", 3)][side], f"ticket below TAS ({'real sim'.split()[side]})"

    def worst(real):  # type: ignore[no-untyped-def]
        return max((r.quality for r in real.values()), key=lambda q: q.other_share)

    # each real run is compared with its own twin, built with the load that run
    # measured, so a disturbed run that passes is as good as a clean one
    remeasure(measure, check, worst, pass_when_disturbed=True)


def test_compare_frame(kvm_host: Host) -> None:
    cal = twins.calibrate()
    exp = Experiment(SpinLock(kind="tas", hold=20, think=20), vcpus=2, pcpus=(1,), duration_s=0.1)
    c = twins.compare(exp, trials=2, seeds=2, cal=cal)
    assert c["metric"].to_list() == [
        "acq_per_s",
        "wait_per_acq_us",
        "steal_fraction",
        "ctx_switches_per_vcpu_s",
        "steal_per_10ms",
    ]
    assert {
        "real",
        "real_lo",
        "real_hi",
        "sim",
        "sim_lo",
        "sim_hi",
        "rel_err",
        "informative",
        "ks",
        "disturbed_trials",
        "other_share_max",
        "steal_by_construction",
        "start_gap_ns",
        "vcpu_start_ns",
    } <= set(c.columns)
    # two vCPUs: the twin was given the trials' measured start gap; under the host's scheduler no vCPU start
    assert c["start_gap_ns"].n_unique() == 1 and 0 < c["start_gap_ns"][0] < 1e9
    assert c["vcpu_start_ns"].is_nan().all()
    row = c.row(by_predicate=pl.col("metric") == "acq_per_s", named=True)
    assert row["real"] > 0 and row["sim"] > 0 and row["real_lo"] <= row["real"] <= row["real_hi"]
    # the values behind the means: one per real trial, one per twin seed
    assert len(row["real_values"]) == 2 and len(row["sim_values"]) == 2
    assert row["real"] == pytest.approx(np.mean(row["real_values"]))
    assert row["sim"] == pytest.approx(np.mean(row["sim_values"]))
    assert row["real_bimodal"] is False and row["sim_bimodal"] is False, "2 values cannot show two modes"
    ks_row = c.row(by_predicate=pl.col("metric") == "steal_per_10ms", named=True)
    assert 0.0 <= ks_row["ks"] <= 1.0
    assert ks_row["real_values"] == [] and ks_row["sim_values"] == [] and c.schema["sim_values"] == pl.List(pl.Float64)
    m = twins.compare(
        Experiment(MsiPingPong(rounds=100, gap_us=100), 1, (1,), duration_s=3.0, halt_poll_ns=0),
        trials=1,
        seeds=1,
        cal=cal,
    )
    assert m["metric"].to_list() == ["rtt_median_us", "polled_per_halt"]
    assert np.isnan(m["real_lo"][0])  # one trial: no interval
    # halt polling off: no halt ends in the poll loop, on either side
    assert m.row(by_predicate=pl.col("metric") == "polled_per_halt", named=True)["real"] == 0.0
    assert m.row(by_predicate=pl.col("metric") == "polled_per_halt", named=True)["sim"] == 0.0
    # without speed_step the speed columns are there and null
    assert c["speed_edge"].is_null().all() and c["sim_faster"].is_null().all()
    # speed_step: the twin again at 10 % faster and slower emulation, the same seeds and load
    e = twins.compare(exp, trials=1, seeds=2, cal=cal, speed_step=0.1)
    row = e.row(by_predicate=pl.col("metric") == "acq_per_s", named=True)
    assert row["sim_faster"] > row["sim_slower"] > 0, row
    assert row["speed_gain"] >= 0 and isinstance(row["speed_edge"], bool)
    assert e.filter(pl.col("metric") == "steal_per_10ms")["speed_edge"].is_null().all(), "a distribution row"
    for bad in (0.0, -0.1, 0.6, True):
        with pytest.raises((ValueError, TypeError), match="speed_step"):
            twins.compare(exp, trials=1, seeds=1, cal=cal, speed_step=bad)


def _trace_evidence(r: Any, where: Path) -> str:
    """What a traced real run recorded, for a failure message; its frames are
    written to ``where`` (pytest keeps the last three runs' tmp_path)."""
    for name in ("trace", "wakeups", "halts"):
        f = getattr(r, name)
        if f is not None:
            f.write_parquet(where / f"{name}.parquet")
    return (
        f"trace_info={r.trace_info}\nquality: {r.quality.line()}\nthreads={r.threads.to_dicts()}\n"
        f"rows: trace {r.trace.height}, wakeups {r.wakeups.height}, halts {r.halts.height}; frames in {where}"
    )


def test_compare_with_real_traces(kvm_host: Host, tmp_path: Path) -> None:
    """trace=True: the real trials are traced and the cell gets run-slice and
    wake-up-latency rows (medians, KS in [0, 1]); an IdleTicks guest is woken
    by its timer on both sides, so both distributions have samples. An IPI
    ping-pong's twin has no timer wake-ups: its wake-up row is NaN, its slices
    are compared. Structure only: the distances themselves depend on the load."""
    cal = twins.calibrate()
    exp = Experiment(IdleTicks(hz=500), 2, (1,), duration_s=0.2, halt_poll_ns=0)
    (real,) = twins.run_real(exp, trials=1, cal=cal, trace=True)
    c = twins.compare(exp, seeds=1, cal=cal, real=[real], trace=True)
    assert c["metric"].to_list()[-2:] == ["slice_ns", "wakeup_latency_ns"]
    for q in ("slice_ns", "wakeup_latency_ns"):
        row = c.row(by_predicate=pl.col("metric") == q, named=True)
        if not (row["informative"] and row["real"] > 0 and row["sim"] > 0 and 0.0 <= row["ks"] <= 1.0):
            # this failed once in 20 fresh-clone runs with its message lost: the
            # evidence (the real trace and what it recorded) is kept and named
            raise AssertionError(f"{q}: {row}\n{_trace_evidence(real, tmp_path)}")
    ipi = twins.compare(
        Experiment(IpiPingPong(rounds=50, gap_us=100.0), 2, (0, 1), duration_s=3.0, halt_poll_ns=0),
        trials=1,
        seeds=1,
        cal=cal,
        trace=True,
    )
    sl = ipi.row(by_predicate=pl.col("metric") == "slice_ns", named=True)
    wk = ipi.row(by_predicate=pl.col("metric") == "wakeup_latency_ns", named=True)
    assert sl["informative"] and 0.0 <= sl["ks"] <= 1.0
    assert not wk["informative"] and np.isnan(wk["sim"]) and np.isnan(wk["ks"])
    assert ipi.row(by_predicate=pl.col("metric") == "rtt_median_us", named=True)["sim"] > 0


def test_real_runs_record_the_other_load_and_the_vmm_loop(kvm_host: Host) -> None:
    """run_real records each trial's OtherLoad; the probe sees the run loop's
    wake-ups (it wakes every 5 ms to check for Ctrl-C, whatever the load:
    a busy CPU delays those wake-ups but does not remove them)."""
    cal = twins.calibrate()
    exp = Experiment(SpinLock(kind="tas", hold=20, think=20), vcpus=2, pcpus=(1,), duration_s=0.3)
    (r,) = twins.run_real(exp, trials=1, cal=cal)
    ol = twins.OtherLoad(**r.config["other_load"])
    assert ol.base_slice_ns == cal["base_slice_ns"] and 0.0 <= ol.short_fraction <= 1.0
    assert ol.vmm_wakeups_per_s > 0 and ol.vmm_burst_ns > 0
    # the measured share, bounded by what the other tasks' CPU time allows (never raised)
    assert ol.quality_share == pytest.approx(min(r.quality.other_share, 0.99))  # type: ignore[union-attr]
    assert 0.0 <= ol.share <= ol.quality_share
    # the twin built from it has the measured VMM thread
    cfg = twins.twin(exp, cal, other_load=ol)
    assert cfg.host.noise.vmm_io_hz == pytest.approx(min(ol.vmm_wakeups_per_s, 0.499e9 / cfg.host.noise.vmm_io_ns))


def test_a_calibration_travels_and_a_twin_then_needs_no_kvm(tmp_path: Path, monkeypatch, twin_calibration) -> None:  # type: ignore[no-untyped-def]
    """A saved calibration loads back value for value, with its provenance;
    a twin simulated from it (the reference one vcpulab ships, through the
    plugin's fixture) opens no /dev/kvm and measures nothing."""
    import vcpulab.kvm
    from vcpulab.twins import _calibration, _grid, _running, _twin

    ref = twins.reference_calibration()
    assert ref.provenance is not None and ref.provenance["virtualization"]
    assert twin_calibration.values.keys() == ref.values.keys()
    p = ref.save(tmp_path / "cal.json")
    back = Calibration.load(p)
    assert back.cpu == ref.cpu and back.provenance == ref.provenance and list(back.values) == list(ref.values)
    for k, v in ref.values.items():
        w = back.values[k]
        assert (w.unit, w.how) == (v.unit, v.how)
        assert (math.isnan(v.value) and math.isnan(w.value)) or w.value == v.value, k

    def no_kvm(*a: Any, **k: Any) -> Any:
        raise AssertionError("a twin from a stored calibration touched real KVM")

    for mod in (_calibration, _twin, _running, _grid):
        monkeypatch.setattr(mod, "calibrate", no_kvm, raising=False)
    monkeypatch.setattr(vcpulab.kvm, "Host", no_kvm)
    exp = Experiment(SpinLock(kind="ticket", hold=50, think=20), vcpus=3, pcpus=(1,), duration_s=0.05)
    runs = twins.run_sim(exp, back, seeds=1)
    assert len(runs) == 1 and runs[0][1].summary["throughput_ops_s"][0] > 0


def test_a_file_that_is_not_a_calibration_is_refused_naming_why(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        Calibration.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a calibration file"):
        Calibration.load(bad)
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match=twins.CALIBRATION_FORMAT):
        Calibration.load(bad)
    import json

    bad.write_text(
        json.dumps(
            {"format": twins.CALIBRATION_FORMAT, "cpu": 1, "values": {"x": {"value": "1", "unit": "", "how": "h"}}}
        )
    )
    with pytest.raises(ValueError, match="'x'"):
        Calibration.load(bad)
    with pytest.raises(ValueError, match="does not exist"):
        twins.reference_calibration().save(tmp_path / "no" / "cal.json")


def test_the_twin_of_a_scheduled_run_runs_vcpulabs_scheduler(twin_calibration) -> None:  # type: ignore[no-untyped-def]
    """A run under sched.round_robin is twinned by the simulator's model of
    vcpulab's scheduler (run tokens, FIFO, wall-time slices), not by the fair
    scheduler. Its mechanism with a ticket lock of 3 vCPUs on one CPU: a
    token's holder takes the lock once per slice (it is next in line at its
    slice's start and behind both others after one acquisition), so about one
    acquisition per slice once every vCPU has queued (more at the start);
    other load competes with the holder alone."""
    from vcpulab import sched

    exp = twins.Experiment(
        SpinLock(kind="ticket", hold=50, think=50), 3, (0,), scheduler=sched.round_robin(slice_us=4000)
    )
    cfg = twins.twin(exp, twin_calibration, seed=0)
    assert cfg.host.scheduler == "round_robin" and cfg.host.token_slice_ns == 4_000_000
    # the second half of the run (a run is deterministic per seed: the first half is the same run cut short)
    half = cfg.duration_ns // 2
    per_slice = []
    for s in range(3):
        c = twins.twin(exp, twin_calibration, seed=s)
        acq = [sim.run(c.replace(duration_ns=d)).vms["lock_acquisitions"][0] for d in (half, 2 * half)]
        per_slice.append((acq[1] - acq[0]) / (half / cfg.host.token_slice_ns))
    assert all(0.9 <= x <= 1.15 for x in per_slice), per_slice
    # other load takes its share from the one holder: weight of k = 1 · s / (1 − s) nice-0 tasks
    bg = twins.background_for(exp, 0.25)
    assert bg.weight == round(1024 * 0.25 / 0.75)
    unscheduled = twins.Experiment(SpinLock(kind="ticket", hold=50, think=50), 3, (0,))
    assert twins.background_for(unscheduled, 0.25).weight == round(1024 * 3 * 0.25 / 0.75)


def test_relaxed_co_and_balance_runs_are_twinned_by_the_simulators_own_token_policies(twin_calibration) -> None:  # type: ignore[no-untyped-def]
    """sched.relaxed_co and sched.balance twin as the simulator's relaxed
    co-scheduling and balance scheduling (src/sim/tokens.rs) with the run's
    slice and skew. Their mechanisms, ticket lock of one VM: three vCPUs on
    two CPUs under relaxed co-scheduling with a 1 ms skew are co-stopped
    whenever one leads, so a token stays free and steal rises above round
    robin's (the twins' share of the run without a token: 0.50 against 0.33,
    seeds 0-2; on the AMD EPYC host of 2026-12-02 the real runs' steal
    fractions were 0.50 against 0.34, their acquisitions 517 against 576 per
    s, the twins' 480 and 663); under balance scheduling two vCPUs on two
    CPUs each have a CPU of their own and never wait for a token (real
    10,573 acquisitions per s, twin 10,384)."""
    from vcpulab import sched

    lock = SpinLock(kind="ticket", hold=50, think=50)
    co = twins.Experiment(lock, 3, (0, 1), scheduler=sched.relaxed_co(skew_us=1000))
    rr = twins.Experiment(lock, 3, (0, 1), scheduler=sched.round_robin())
    bal = twins.Experiment(lock, 2, (0, 1), scheduler=sched.balance(slice_us=2000))
    c_co, c_rr, c_bal = (twins.twin(e, twin_calibration, seed=0) for e in (co, rr, bal))
    assert (c_co.host.scheduler, c_co.host.token_skew_ns, c_co.host.token_slice_ns) == (
        "relaxed_co",
        1_000_000,
        4_000_000,
    )
    assert (c_bal.host.scheduler, c_bal.host.token_slice_ns) == ("balance", 2_000_000)
    assert c_rr.host.scheduler == "round_robin"

    def steal(cfg: sim.Config) -> float:
        r = sim.run(cfg)
        return float(r.vcpus["steal_ns"].sum()) / (cfg.duration_ns * r.vcpus.height)

    for seed in range(3):
        assert steal(c_co.replace(seed=seed)) > steal(c_rr.replace(seed=seed)) + 0.05, seed
    assert steal(c_bal) < 0.05
    # the twin counts token grants as the real decision log does (one each
    # here: nobody else ever waits), not the holder's switch-ins around
    # host noise (3.3 grants per vCPU and second real and twin)
    b = sim.run(c_bal).vcpus
    assert b["token_grants"].to_list() == [1, 1], b["token_grants"].to_list()
    m = twins.sim_metrics(bal, c_bal, sim.run(c_bal), twin_calibration)
    assert m["ctx_switches_per_vcpu_s"] * c_bal.duration_ns / 1e9 == 1.0


def test_pinned_runs_are_twinned_with_one_token_queue_per_cpu(twin_calibration) -> None:  # type: ignore[no-untyped-def]
    """sched.pinned twins as the simulator's per-CPU token queues with vCPU i
    pinned to CPU i mod n. Ticket lock, 3 vCPUs on 2 CPUs: vCPU 1 has CPU 1
    to itself, vCPUs 0 and 2 share CPU 0, so the run's steal is a third of its
    vCPU time, all of it theirs (on the AMD EPYC host of 2026-12-02, twins
    coscheduling grid, 3 trials: steal 0.335 real against 0.344 twin,
    acquisitions 420 against 435 per s, token grants 83.5 against 83.7 per
    vCPU and second)."""
    from vcpulab import sched

    lock = SpinLock(kind="ticket", hold=50, think=50)
    e = twins.Experiment(lock, 3, (0, 1), scheduler=sched.pinned(slice_us=2000))
    c = twins.twin(e, twin_calibration, seed=0)
    h = c.host
    assert (h.scheduler, h.affinity, h.vcpu_pcpus, h.token_slice_ns) == ("pinned", "pinned", (0, 1, 0), 2_000_000)
    v = sim.run(c).vcpus.sort("vcpu")
    share = (v["steal_ns"] / c.duration_ns).to_list()
    assert share[1] < 0.02 and all(0.4 < share[i] < 0.6 for i in (0, 2)), share
    assert [x.scheduler.name for x in twins.coscheduling_grid((0, 1))] == ["round_robin", "relaxed_co", "pinned"]


def test_wake_placement_twins_as_a_bound_waker_beside_one_worker_thread(twin_calibration) -> None:  # type: ignore[no-untyped-def]
    """WakePlacement's twin: the waker bound to vCPU 0 (``thread0_bound``) and
    one worker thread the guest's placement moves by the rule. Under
    sched.pinned with vCPUs 0 and 1 at home on CPU 0 and vCPU 2 on CPU 1,
    upstream's rule keeps the previous worker (vCPU 1, behind the waker) and
    pcpu_is_idle sends every item to vCPU 2, whose CPU is idle, as the real
    scheduler does (tests/test_wake_placement.py checks the real side)."""
    from vcpulab import sched
    from vcpulab.experiment import WakePlacement

    share = {}
    for rule in ("available_idle", "pcpu_is_idle"):
        e = Experiment(WakePlacement(rule=rule), 3, (0, 1), scheduler=sched.pinned(), homes=(0, 0, 1))  # type: ignore[arg-type]
        c = twins.twin(e, twin_calibration, seed=0)
        v, w = c.vms[0], c.vms[0].workload
        assert (c.host.scheduler, c.host.vcpu_pcpus) == ("pinned", (0, 0, 1))
        assert (v.threads, v.pv.placement, w.thread0_bound, w.iterations) == (2, rule, True, 0)
        # each side's instructions after its IPI run beside the other's wake-up
        assert [type(p).__name__ for p in w.thread0_phases] == ["Compute", "Send", "Compute", "Recv"]
        assert [type(p).__name__ for p in w.phases] == ["Recv", "Compute", "Send", "Compute"]
        res = sim.run(c)
        m = twins.sim_metrics(e, c, res, twin_calibration)
        share[rule] = m["first_worker_share"]
        assert 500 < m["items_per_s"] < 5000 and m["round_median_us"] > 0
        assert m["round_p90_us"] >= m["round_median_us"]
        # the waker never left vCPU 0: it halts there once per item
        halts = res.vcpus.sort("vcpu")["halt_exits"].to_list()
        assert abs(halts[0] - (halts[1] + halts[2])) <= 2
    assert share["available_idle"] > 0.95 and share["pcpu_is_idle"] < 0.05, share
    # under the host's scheduler KVM writes no is_idle byte: both rules choose alike
    host = Experiment(WakePlacement(rule="pcpu_is_idle"), 3, (0, 1), pinning="shared")
    assert twins.twin(host, twin_calibration).vms[0].pv.placement == "available_idle"
    with pytest.raises(ValueError, match="rounds > 0"):
        twins.twin(Experiment(WakePlacement(rounds=10), 3, (0, 1)), twin_calibration)
    with pytest.raises(ValueError, match="homes is for scheduler=sched.pinned"):
        Experiment(WakePlacement(), 3, (0, 1), homes=(0, 0, 1))
    with pytest.raises(ValueError, match="one CPU per vCPU"):
        Experiment(WakePlacement(), 3, (0, 1), scheduler=sched.pinned(), homes=(0, 1))
    with pytest.raises(ValueError, match=r"CPU\(s\) \[5\]"):
        Experiment(WakePlacement(), 3, (0, 1), scheduler=sched.pinned(), homes=(0, 5, 1))


def test_wake_placement_mailbox_polling_twins_as_the_workers_guest_idle_poll(twin_calibration) -> None:  # type: ignore[no-untyped-def]
    """``WakePlacement(poll=n)``: the workers poll their mailbox n failed checks
    before they halt; the twin idle-polls the workers' vCPUs (not the
    waker's) for n × ``wake_poll_iter_ns``. Under sched.pinned (vCPUs 0 and 1
    at home on CPU 0, vCPU 2 on CPU 1), pcpu_is_idle sends every item to
    worker 2, alone on its CPU: with a long poll it is still polling when
    the next item comes, so nearly every item is a hit and the round loses
    the worker's wake-up (host halt polling off); a one-check poll catches nothing. Upstream's rule
    keeps worker 1, which shares CPU 0 with the waker: its poll holds the
    CPU's token while the waker waits for it, so polling slows the items."""
    from vcpulab import sched
    from vcpulab.experiment import WakePlacement

    iter_ns = twins.wake_poll_iter_ns(twin_calibration)
    vals = dict(twin_calibration.values)
    b = vals["loop_insn_ns"].value
    if "wake_poll_iter_ns" in vals:
        assert iter_ns == vals["wake_poll_iter_ns"].value
    # without the measurement (older calibrations, or a run that hit: NaN) it is derived
    for measured in ({}, {"wake_poll_iter_ns": Value(math.nan, "ns", "a run hit")}):
        base = {k: v for k, v in vals.items() if k not in ("wake_poll_iter_ns", "spin_iter_ns")} | measured
        # the calibration's 9-instruction spin iteration (no window) less 2 loop instructions; never below 7
        for spin_ns, want in ((20 * b, 18 * b), (8 * b, 7 * b)):
            cal = Calibration(values={**base, "spin_iter_ns": Value(spin_ns, "ns", "test")}, cpu=0)
            assert twins.wake_poll_iter_ns(cal) == pytest.approx(want)
        assert twins.wake_poll_iter_ns(Calibration(values=base, cpu=0)) == pytest.approx(7 * b)
    assert twins.guest_path(WakePlacement(poll=50), 3)["poll_iter"] == twins.WAKE_POLL_ITER_INSNS == 7
    m: dict[tuple[str, int], dict[str, float]] = {}
    for rule in ("pcpu_is_idle", "available_idle"):
        for poll in (0, 1, 400):
            w = WakePlacement(rule=rule, poll=poll)  # type: ignore[arg-type]
            # host halt polling off: without it a blocked halt pays the whole wake-up
            e = Experiment(w, 3, (0, 1), scheduler=sched.pinned(), homes=(0, 0, 1), halt_poll_ns=0)
            c = twins.twin(e, twin_calibration, seed=0)
            pv = c.vms[0].pv
            if poll:
                assert pv.guest_idle_poll_ns == max(round(poll * iter_ns), 1) and pv.guest_idle_poll_vcpus == (1, 2)
            else:
                assert pv.guest_idle_poll_ns == 0
            res = sim.run(c)
            assert res.vcpus.sort("vcpu")["idle_poll_ns"][0] == 0, "the waker halts at once"
            m[rule, poll] = twins.sim_metrics(e, c, res, twin_calibration)
    for poll in (0, 1, 400):
        assert m["pcpu_is_idle", poll]["first_worker_share"] < 0.05, m
        assert m["available_idle", poll]["first_worker_share"] > 0.95, m
    fast, slow = m["pcpu_is_idle", 400], m["pcpu_is_idle", 0]
    assert slow["poll_hit_share"] == 0.0 and m["pcpu_is_idle", 1]["poll_hit_share"] < 0.05, m
    assert fast["poll_hit_share"] > 0.95, fast
    assert fast["items_per_s"] > slow["items_per_s"] and fast["round_median_us"] < slow["round_median_us"], m
    assert m["available_idle", 400]["items_per_s"] < 0.5 * m["available_idle", 0]["items_per_s"], m
    assert twins.cell_name(e) == "wake available_idle mailbox400 3v/2c poll0us [pinned:0,0,1]"
    grid = twins.wake_placement_grid((0, 1), poll=(0, 400))
    assert len(grid) == 12 and {x.workload.poll for x in grid} == {0, 400}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="at least one poll count"):
        twins.wake_placement_grid((0, 1), poll=())


def test_a_grid_shows_its_progress_only_when_asked_or_on_a_terminal(twin_calibration, capsys) -> None:  # type: ignore[no-untyped-def]
    # no twin (the host-forced preempted byte is not modelled): no real run
    exps = [twins.Experiment(PvSpinLock(preempted_from_host=(1,)), 2, (0,))]
    g = twins.grid(exps, cal=twin_calibration, progress=True)
    err = capsys.readouterr().err
    assert g.no_twin and "[1/1]" in err and "no twin" in err and "vcpulab.twins.grid" in err
    twins.grid(exps, cal=twin_calibration)  # pytest's stderr is no terminal: no bar, no lines
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="progress"):
        twins.grid(exps, cal=twin_calibration, progress="yes")  # type: ignore[arg-type]


def test_a_grid_calibrated_per_cell_gives_each_twin_the_calibration_measured_before_its_trials(
    kvm_host: Host, twin_calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`grid(per_cell_calibration=True)` calibrates on the grid calibration's
    CPU before each cell and that cell's twin uses it: the cell's ``cal_*``
    columns and `Grid.cell_calibrations` say which; without it every cell
    carries the one calibration. (The measurement itself is stubbed here, two
    known calibrations in turn; `calibrate` has its own real-KVM tests.)"""
    import dataclasses

    from vcpulab import _core
    from vcpulab.twins import _grid

    base = dataclasses.replace(twin_calibration, cpu=sorted(_core.allowed_cpus())[-1])
    made: list[Calibration] = []
    asked: list[tuple[int, bool]] = []

    def stub(cpu: int, *, refresh: bool = False) -> Calibration:
        asked.append((cpu, refresh))
        scale = 1.0 + 0.5 * len(made)  # 1.0, then 1.5 × the base's path cost
        v = dict(base.values)
        v["path_insn_ns"] = dataclasses.replace(v["path_insn_ns"], value=base["path_insn_ns"] * scale)
        made.append(dataclasses.replace(base, values=v))
        return made[-1]

    monkeypatch.setattr(_grid, "calibrate", stub)
    exps = [
        Experiment(SpinLock(kind=kind, hold=50, think=20), vcpus=2, pcpus=(base.cpu,), duration_s=0.1)
        for kind in ("ticket", "tas")
    ]
    names = [twins.cell_name(e) for e in exps]
    g = twins.grid(exps, trials=1, seeds=1, cal=base, per_cell_calibration=True)
    assert asked == [(base.cpu, True), (base.cpu, True)]
    assert [g.cell_calibrations[n] for n in names] == made and g.calibration is base
    per_cell = g.cells.group_by("cell").agg(pl.col("cal_path_insn_ns").unique())
    got = {r["cell"]: r["cal_path_insn_ns"] for r in per_cell.iter_rows(named=True)}
    assert got == {n: [c["path_insn_ns"]] for n, c in zip(names, made)}
    assert g.summary()["calibration_spread"] == pytest.approx(1.5)
    assert "calibrated per cell (path_insn_ns spread 1.50x)" in g.line()
    assert g.config["per_cell_calibration"] is True

    shared = twins.grid(exps[:1], trials=1, seeds=1, cal=base, interleave=False)
    assert len(asked) == 2, "no calibration without per_cell_calibration"
    assert shared.cells["cal_path_insn_ns"].unique().to_list() == [base["path_insn_ns"]]
    # every drifting value has its column; one the calibration lacks reads NaN
    assert shared.cells["cal_ipi_wake_ns"].unique().to_list() == [base["ipi_wake_ns"]]
    spread = shared.cells["cal_ipi_wake_spread"].unique().to_list()
    assert spread == [base["ipi_wake_spread"]] if "ipi_wake_spread" in base.values else math.isnan(spread[0])
    halt_wake = shared.cells["cal_halt_wake_ns"].unique().to_list()
    want = base["halt_wake_ns"] if "halt_wake_ns" in base.values else float("nan")
    assert halt_wake == [want] if math.isfinite(want) else math.isnan(halt_wake[0])
    assert shared.cell_calibrations == {names[0]: base} and shared.summary()["calibration_spread"] == 1.0
    assert "calibrated per cell" not in shared.line()

    elsewhere = dataclasses.replace(base, cpu=4095)
    with pytest.raises(ValueError, match="per_cell_calibration measures on cal's CPU 4095"):
        twins.grid(exps, cal=elsewhere, per_cell_calibration=True)
    with pytest.raises(TypeError, match="per_cell_calibration"):
        twins.grid(exps, cal=base, per_cell_calibration="yes")  # type: ignore[arg-type]
    assert len(asked) == 2, "refused before any calibration"


def test_an_interleaved_grid_runs_rounds_of_every_cell_and_twins_them_at_the_rounds_median_costs(
    kvm_host: Host, twin_calibration: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`grid(interleave=True)`: one real trial of every cell per round, the
    cells in the order `random.Random(order_seed)` shuffles them each round,
    a cost pair before every trial, and every twin at the pairs' median
    costs (`median_costs`). The cost pairs are stubbed (known values in a
    known order; `_cost_pair` is `calibrate`'s step 1, tested with it); the
    trials are real."""
    import dataclasses
    import random

    from vcpulab import _core
    from vcpulab.twins import _grid

    base = dataclasses.replace(twin_calibration, cpu=sorted(_core.allowed_cpus())[-1])
    log: list[str] = []
    # six trials: MIN_COST_PAIRS (15) asks for ceil(15 / 6) = 3 pairs before each
    assert twins.MIN_COST_PAIRS == 15
    values = [(400.0, 300.0), (900.0, 700.0), (500.0, 350.0), (800.0, 600.0), (600.0, 450.0), (700.0, 500.0)]
    pairs = iter([v for v in values for _ in range(3)])

    def pair(cpu: int) -> tuple[float, float, list[Any]]:
        assert cpu == base.cpu
        log.append("pair")
        a, b = next(pairs)
        return a, b, []

    real_run_real = _grid.run_real

    def logged(exp: Experiment, trials: int = 3, *args: Any, **kw: Any) -> list[Any]:
        assert trials == 1, "one trial of a cell at a time"
        log.append(twins.cell_name(exp))
        return real_run_real(exp, trials, *args, **kw)

    monkeypatch.setattr(_grid, "_cost_pair", pair)
    monkeypatch.setattr(_grid, "run_real", logged)
    exps = [
        Experiment(SpinLock(kind=kind, hold=50, think=20), vcpus=v, pcpus=(base.cpu,), duration_s=0.1)
        for kind, v in (("ticket", 2), ("tas", 2), ("tas", 1))
    ]
    names = [twins.cell_name(e) for e in exps]
    g = twins.grid(exps, trials=2, seeds=1, cal=base, interleave=True, order_seed=7, keep_runs=True)

    rng = random.Random(7)
    want: list[str] = []
    for _ in range(2):
        order = list(names)
        rng.shuffle(order)
        want += [x for n in order for x in ("pair", "pair", "pair", n)]
    assert log == want
    assert g.cost_pairs is not None
    assert g.cost_pairs["path_insn_ns"].to_list() == [v[0] for v in values for _ in range(3)]
    assert g.cost_pairs["t_s"].is_sorted()
    # every twin at the medians: path 650, loop 475; the loop-like costs scaled with the loop cost
    assert g.cells["cal_path_insn_ns"].unique().to_list() == [650.0]
    assert g.cells["cal_loop_insn_ns"].unique().to_list() == [475.0]
    used = g.cell_calibrations[names[0]]
    assert used["spin_iter_ns"] == pytest.approx(base["spin_iter_ns"] * 475.0 / base["loop_insn_ns"])
    assert used["uexit_ns"] == base["uexit_ns"], "the host's own paths are not emulated instructions"
    assert "the median of 18 cost pairs" in used.values["path_insn_ns"].how
    assert g.calibration is base
    assert sorted(g.cells["cell"].unique().to_list()) == sorted(names)
    assert set(g.cells["trials"].unique().to_list()) == {2}
    assert {n: len(r) for n, r in g.real_runs.items()} == {n: 2 for n in names}
    assert g.config["interleave"] is True and g.config["order_seed"] == 7
    s = g.summary()
    assert s["cost_pairs"] == 18 and s["cost_pairs_path_median_ns"] == 650.0 and s["cost_pairs_spread"] == 2.25
    assert "interleaved (18 cost pairs across the trials: path_insn_ns median 650 ns, spread 2.25x)" in g.line()

    # without keep_runs the runs are not kept; a sequential grid has no cost pairs
    pairs = iter([(500.0, 400.0)] * 16)  # two trials: 8 pairs before each
    lean = twins.grid(exps[:1], trials=2, seeds=1, cal=base)  # interleaved by default
    assert lean.real_runs == {} and lean.cells["cal_path_insn_ns"].unique().to_list() == [500.0]
    assert lean.config["interleave"] is True and lean.cost_pairs is not None and lean.cost_pairs.height == 16
    seq = twins.grid(exps[:1], trials=1, seeds=1, cal=base, interleave=False)
    assert seq.cost_pairs is None and "interleaved" not in seq.line() and seq.config["order_seed"] is None

    # a cell whose every trial misses its deadline: in no_real with run_real's message, the others compared
    def timing_out(exp: Experiment, trials: int = 3, failures: Any = None, *args: Any, **kw: Any) -> list[Any]:
        if twins.cell_name(exp) == names[0]:
            failures.append("deadline missed (stub)")
            raise TimeoutError("deadline missed (stub)")
        return real_run_real(exp, trials, failures, *args, **kw)

    monkeypatch.setattr(_grid, "run_real", timing_out)
    pairs = iter([(500.0, 400.0)] * 16)
    late = twins.grid(exps[:2], trials=2, seeds=1, cal=base)
    assert late.no_real == [(names[0], "deadline missed (stub)")]
    assert late.cells["cell"].unique().to_list() == [names[1]]

    with pytest.raises(ValueError, match="interleave and per_cell_calibration exclude each other"):
        twins.grid(exps, cal=base, interleave=True, per_cell_calibration=True)
    with pytest.raises(ValueError, match="order_seed"):
        twins.grid(exps, cal=base, interleave=True, order_seed=-1)
    with pytest.raises(TypeError, match="interleave"):
        twins.grid(exps, cal=base, interleave=1)  # type: ignore[arg-type]


def test_median_costs_takes_the_pairs_medians_and_scales_the_loop_like_costs(twin_calibration: Calibration) -> None:
    cal = twin_calibration
    got = twins.median_costs(cal, [(100.0, 80.0), (300.0, 60.0), (200.0, 100.0)], "on CPU 1")
    assert got["path_insn_ns"] == 200.0 and got["loop_insn_ns"] == 80.0
    f = 80.0 / cal["loop_insn_ns"]
    for k in twins.EMULATION_COST_KEYS:
        if k in cal.values and k not in ("path_insn_ns", "loop_insn_ns"):
            assert got[k] == pytest.approx(cal[k] * f), k
    for k in ("uexit_ns", "ipi_wake_ns", "base_slice_ns"):
        assert got[k] == cal[k], k
    assert "the median of 3 cost pairs on CPU 1 (path 100-300 ns, loop 60-100 ns" in got.values["path_insn_ns"].how
    assert cal["path_insn_ns"] != 200.0, "the calibration passed in is not changed"
    with pytest.raises(ValueError, match="pairs"):
        twins.median_costs(cal, [])
    with pytest.raises(ValueError, match=r"each pair must be \(path_insn_ns, loop_insn_ns\)"):
        twins.median_costs(cal, [(1.0, 2.0, 3.0)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="path_insn_ns"):
        twins.median_costs(cal, [(0.0, 2.0)])
    with pytest.raises(ValueError, match="loop_insn_ns"):
        twins.median_costs(cal, [(1.0, float("nan"))])


def test_scaled_costs_scales_the_emulated_instructions_only() -> None:
    cal = twins.reference_calibration()
    slow = twins.scaled_costs(cal, 1.25)
    for k in twins.EMULATION_COST_KEYS:
        if k in cal.values:
            assert slow[k] == pytest.approx(cal[k] * 1.25) and "scaled x1.25" in slow.values[k].how
    for k in ("ipi_wake_ns", "wake_block_ns", "halt_poll_ns", "uexit_ns"):
        assert slow[k] == cal[k], k
    assert cal["path_insn_ns"] == twins.reference_calibration()["path_insn_ns"], "the original is left as it was"
    for bad in (0.0, 0.05, 11.0, float("nan")):
        with pytest.raises(ValueError, match="factor"):
            twins.scaled_costs(cal, bad)


def test_speed_gain_is_a_metric_s_change_in_units_of_the_speed_step() -> None:
    # a rate proportional to the speed moves about once the step; a share that flips many times it
    assert twins.speed_gain("items_per_s", 1000.0, 1100.0, 910.0, 0.1) == pytest.approx(1.0)
    assert twins.speed_gain("polled_per_halt", 0.99, 0.99, 0.5, 0.1) == pytest.approx(0.49 / 0.099)
    # a share near 0 is measured against SPEED_SHARE_FLOOR, not against itself
    assert twins.speed_gain("first_worker_share", 0.0003, 0.0004, 0.0002, 0.1) < 0.1
    assert math.isnan(twins.speed_gain("items_per_s", 1000.0, float("nan"), 900.0, 0.1))


def test_a_speed_edge_is_a_large_gain_beyond_the_seeds_spread() -> None:
    from vcpulab.twins._running import _on_edge

    nan = float("nan")
    # the wake cell of docs/twins.md item 13: 0.49 on every seed, 0.95 faster
    assert _on_edge(9.4, 0.49, 0.488, 0.491, 0.95, 0.49) is True
    # a 1-vCPU cell's context switches: 38 per second with seeds from 12 to 115, 98 slower: noise
    assert _on_edge(15.8, 38.0, 12.5, 115.5, 38.0, 98.0) is False
    assert _on_edge(2.0, 0.49, 0.49, 0.49, 0.6, 0.49) is False, "a small gain is no edge"
    assert _on_edge(5.0, 10.0, nan, nan, 15.0, 10.0) is True, "one seed: no spread to explain it"


def test_the_wake_twin_s_polled_share_flips_where_the_waker_s_halt_crosses_halt_poll_ns() -> None:
    # docs/twins.md item 13: the waker halts until its worker's completion; near this project's Intel host's
    # speed (the reference calibration's costs x 0.55: ~530 ns per path instruction) that halt sits at the
    # 200 us poll maximum, and 10 % of speed moves the twin between caught polls and blocked halts. At the
    # reference machine's own speed it is far from it.
    from vcpulab.twins._metrics import sim_metrics

    cal = twins.reference_calibration()
    exp = twins.wake_placement_grid(pcpus=(0, 1), duration_s=0.3)[1]  # pinned, pcpu_is_idle
    assert isinstance(exp.workload, WakePlacement) and exp.workload.rule == "pcpu_is_idle"

    def polled(f: float) -> float:
        c = twins.scaled_costs(cal, f)
        return float(np.mean([sim_metrics(exp, g, r, c)["polled_per_halt"] for g, r in twins.run_sim(exp, c, 2)]))

    near = [polled(f) for f in (0.55 * 0.9, 0.55, 0.55 * 1.1)]
    far = [polled(f) for f in (0.9, 1.0, 1.1)]
    assert twins.speed_gain("polled_per_halt", near[1], near[0], near[2], 0.1) > twins.SPEED_EDGE_GAIN, near
    assert twins.speed_gain("polled_per_halt", far[1], far[0], far[2], 0.1) < 1.0, far


def test_wake_work_puts_the_waker_s_halt_at_twice_the_poll_window_from_the_calibration() -> None:
    import dataclasses

    from vcpulab.twins._values import Value

    cal = twins.reference_calibration()
    p = twins.guest_path(WakePlacement(work=0), 3)
    fixed = cal["ipi_wake_ns"] + (p["worker_path"] - p["worker_after_ipi"] - p["waker_after_ipi"]) * cal["path_insn_ns"]
    for halt in (None, 150e3, 400e3, 1e6):
        work = twins.wake_work(cal, halt)
        want = (halt if halt is not None else twins.WAKE_HALT_POLL_MULTIPLE * cal["halt_poll_ns"]) - fixed
        # the smallest whole count that reaches the halt
        assert 2 * work * cal["loop_insn_ns"] >= want > 2 * (work - 1) * cal["loop_insn_ns"], (halt, work)
    # a faster host needs more loop iterations for the same halt
    assert twins.wake_work(twins.scaled_costs(cal, 0.55)) > twins.wake_work(cal)
    assert twins.wake_work(cal, 1.0) == 1, "a halt shorter than the fixed path: one iteration"
    no_window = dataclasses.replace(
        cal, values={**cal.values, "halt_poll_ns": Value(0.0, "ns", "halt polling off (test)")}
    )
    assert twins.wake_work(no_window) == WakePlacement().work, "no window to keep away from: the default"
    no_ipi = dataclasses.replace(cal, values={k: v for k, v in cal.values.items() if k != "ipi_wake_ns"})
    with pytest.raises(ValueError, match="needs the calibration's ipi_wake_ns"):
        twins.wake_work(no_ipi)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="halt_ns"):
            twins.wake_work(cal, bad)
    with pytest.raises(TypeError, match="cal"):
        twins.wake_work({"path_insn_ns": 500.0})  # type: ignore[arg-type]

    grid = twins.wake_placement_grid((0, 1), cal=cal)
    assert {x.workload.work for x in grid} == {twins.wake_work(cal)}  # type: ignore[attr-defined]
    assert {twins.cell_factors(x)["work"] for x in grid} == {twins.wake_work(cal)}
    assert {x.workload.work for x in twins.wake_placement_grid((0, 1), work=50, cal=cal)} == {50}  # type: ignore[attr-defined]
    assert {x.workload.work for x in twins.wake_placement_grid((0, 1))} == {WakePlacement().work}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="work"):
        twins.wake_placement_grid((0, 1), work=-1)
    with pytest.raises(TypeError, match="cal"):
        twins.wake_placement_grid((0, 1), cal="here.json")  # type: ignore[arg-type]


def test_the_wake_grid_built_from_its_calibration_is_off_the_poll_window_s_edge() -> None:
    # the host of test_the_wake_twin_s_polled_share_flips_where_the_waker_s_halt_crosses_halt_poll_ns, whose
    # default work put the waker's halt at the window: with the work chosen from that host's calibration
    # the same cell's polled share no longer moves with 10 % of speed
    from vcpulab.twins._metrics import sim_metrics

    cal = twins.scaled_costs(twins.reference_calibration(), 0.55)
    exp = twins.wake_placement_grid(pcpus=(0, 1), duration_s=0.3, cal=cal)[1]  # pinned, pcpu_is_idle
    assert isinstance(exp.workload, WakePlacement) and exp.workload.work == twins.wake_work(cal) > 200

    def polled(f: float) -> float:
        c = twins.scaled_costs(cal, f)
        return float(np.mean([sim_metrics(exp, g, r, c)["polled_per_halt"] for g, r in twins.run_sim(exp, c, 2)]))

    shares = [polled(f) for f in (0.9, 1.0, 1.1)]
    assert twins.speed_gain("polled_per_halt", shares[1], shares[0], shares[2], 0.1) < 1.0, shares
