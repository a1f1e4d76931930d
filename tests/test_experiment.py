"""Overcommit experiments on real KVM (the issue's "what it must show").

Timing checks go through ``vcpulab.testing.remeasure``: each run carries
``Run.quality`` (what else ran on its CPUs); a failed check on a disturbed run
is measured again (at most 3 times, then the test skips naming the measured
disturbance), a failed check on a clean run fails. Where two runs are
compared, the quality that decides is the run that other load pushes towards
failing the check (e.g. the halt-polling run of an on/off pair)."""

from __future__ import annotations

import textwrap
import time

import pytest
from conftest import interrupt_script

from vcpulab.experiment import IdleTicks, IpiPingPong, MsiPingPong, PvSpinLock, Spin, SpinLock, run
from vcpulab.kvm import Host
from vcpulab.testing import remeasure


@pytest.mark.parametrize("kind", ["tas", "ticket"])
@pytest.mark.parametrize("pcpus", [[0], [0, 1]], ids=["1cpu", "2cpus"])
def test_mutual_exclusion_holds_under_overcommit(kvm_host: Host, kind: str, pcpus: list[int]) -> None:
    r = run(
        SpinLock(kind=kind, hold=40, think=40), vcpus=4, pcpus=pcpus, duration_s=0.4, host=kvm_host, warn_quality=False
    )
    res = r.results
    acq = res["acquisitions"]
    print(f"{kind} on {pcpus}: acquisitions {acq.to_list()}, counter {res['counter'][0]}")
    assert res["counter"][0] == acq.sum()  # no lost update
    assert (acq > 0).all()  # every vCPU made progress
    assert set(r.threads["outcome"]) == {"done"}
    assert r.threads["cpus"].to_list() == [pcpus] * 4


def test_overcommit_is_visible(kvm_host: Host) -> None:
    """Ticket lock, 2 vCPUs: on one CPU a waiter spins away its time slice
    whenever the holder (or, after a hand-off, the next owner) is preempted,
    so throughput falls by an order of magnitude and waits grow from µs to ms.

    (With 4 vCPUs on 1 vs 2 CPUs both runs are overcommitted and the ratio
    swings with how the host's slices line up with the ticket order: measured
    here 1.3-2.5x, once inverted. 2 vCPUs on 1 vs 2 CPUs: 300-630 vs ~15,000
    acquisitions/s.)"""
    w = SpinLock(kind="ticket", hold=40, think=40)

    def measure():  # type: ignore[no-untyped-def]
        one = run(w, vcpus=2, pcpus=[0], duration_s=0.6, host=kvm_host, warn_quality=False)
        two = run(w, vcpus=2, pcpus=[0, 1], duration_s=0.6, host=kvm_host, warn_quality=False)
        return one, two

    def check(p) -> None:  # type: ignore[no-untyped-def]
        one, two = p
        rate = {n: r.results["acquisitions"].sum() / r.wall_s for n, r in (("1cpu", one), ("2cpus", two))}
        wait = {n: r.results["wait_per_acq_us"].mean() for n, r in (("1cpu", one), ("2cpus", two))}
        print(f"acquisitions/s {rate}; wait per acquisition (us) {wait}; 2 CPUs {two.quality.line()}")
        assert 5 * rate["1cpu"] < rate["2cpus"], f"acquisitions/s {rate}"
        assert wait["1cpu"] > 10 * wait["2cpus"], f"wait per acquisition {wait}"

    # other load on the 2-CPU run overcommits it too (towards failing); on the 1-CPU run it only widens the gap
    remeasure(measure, check, quality=lambda p: p[1].quality)


def test_two_vcpus_on_one_cpu_steal_half_the_wall_time(kvm_host: Host) -> None:
    def measure():  # type: ignore[no-untyped-def]
        w = SpinLock(kind="tas", hold=40, think=40)
        return run(w, vcpus=2, pcpus=[0], duration_s=0.6, sample_every_s=0.01, host=kvm_host, warn_quality=False)

    def check(r) -> None:  # type: ignore[no-untyped-def]
        frac = r.steal_fraction()["steal_fraction"].to_list()
        # each of the two gets half of what other tasks leave of CPU 0 (half of it on a quiet CPU)
        fair = 1 - (1 - r.quality.other_share) / 2
        print(f"steal fraction {frac}, fair share {fair:.2f}; {r.quality.line()}")
        assert all(abs(f - fair) <= 0.2 for f in frac), f"steal fractions {frac}, fair share {fair:.2f}"

    r = remeasure(measure, check, quality=lambda r: r.quality)
    # the samples grow monotonically and carry every vCPU stat
    d = r.deltas()
    assert (d["steal_ns"] >= 0).all()
    assert {"exits", "halt_exits", "insn_emulation", "preemption_other"} <= set(r.samples.columns)
    # the thread report agrees: each thread waited on the run queue about half the time
    t = r.threads
    assert ((t["run_delay_ns"] / t["wall_ns"]) > 0.3).all()


def test_pv_spin_lock_halts_instead_of_spinning_when_the_holder_is_preempted(kvm_host: Host) -> None:
    """A waiter that reads a preempted holder halts: far fewer PAUSEs per acquisition.

    The flagged-to-unflagged ratio of PAUSEs per acquisition swings with how
    the host's slices line up with the lock's hand-overs (3 vCPUs on 2 CPUs,
    0.5 s each): measured here 0.17-0.42 over 8 quiet pairs (2026-12-06), and
    0.52 once in a fresh-clone CI run, so the bound is two thirds, not one
    half. Re-measured when either run was disturbed."""
    base = PvSpinLock(hold=40, think=40)
    flagged = PvSpinLock(hold=40, think=40, preempted_from_host=(0, 1, 2))

    def measure():  # type: ignore[no-untyped-def]
        r0 = run(base, vcpus=3, pcpus=[0, 1], duration_s=0.5, host=kvm_host, warn_quality=False)
        r1 = run(flagged, vcpus=3, pcpus=[0, 1], duration_s=0.5, host=kvm_host, warn_quality=False)
        return r0, r1

    def check(p) -> None:  # type: ignore[no-untyped-def]
        r0, r1 = p
        for r in (r0, r1):
            assert r.results["counter"][0] == r.results["acquisitions"].sum()
        p0 = r0.results["pauses"].sum() / r0.results["acquisitions"].sum()
        p1 = r1.results["pauses"].sum() / r1.results["acquisitions"].sum()
        halts = r1.results["halts"].sum()
        halt_exits = r1.samples.group_by("vcpu").agg(__import__("polars").col("halt_exits").max())["halt_exits"].sum()
        print(
            f"PAUSEs per acquisition: {p0:.1f} unflagged vs {p1:.1f} flagged ({p1 / p0:.2f}); "
            f"guest halts {halts}, halt exits {halt_exits}; {r0.quality.line()}; {r1.quality.line()}"
        )
        assert r0.results["halts"].sum() == 0  # this host never sets `preempted` itself
        assert halts > 0
        assert halt_exits >= halts * 0.9
        assert r1.results["kicks"].sum() >= halts * 0.9
        assert p1 < p0 * 2 / 3, f"PAUSEs per acquisition {p1:.1f} flagged vs {p0:.1f} unflagged"

    remeasure(measure, check, quality=lambda p: p[0].quality if p[0].quality.disturbed else p[1].quality)


def _halt_exits(r) -> int:  # type: ignore[no-untyped-def]
    return int(
        r.deltas().group_by(["vm", "vcpu"]).agg(__import__("polars").col("halt_exits").sum())["halt_exits"].sum()
    )


def test_msi_ping_pong_latency_and_halt_stats(kvm_host: Host) -> None:
    w = MsiPingPong(rounds=800, gap_us=50)
    pairs = 3  # alternated off/on runs: a slow spell of this VM's host falls on one pair, not on one side

    def measure():  # type: ignore[no-untyped-def]
        runs: dict[str, list] = {"off": [], "on": []}
        for _ in range(pairs):
            for side, poll_ns in (("off", 0), ("on", 200_000)):
                runs[side].append(
                    run(w, vcpus=1, pcpus=[1], duration_s=10, halt_poll_ns=poll_ns, host=kvm_host, warn_quality=False)
                )
        return runs

    def worst(runs):  # type: ignore[no-untyped-def]
        return max((r.quality for r in runs["on"]), key=lambda q: q.other_share)

    def check(runs) -> None:  # type: ignore[no-untyped-def]
        rtt = {side: [r.results["rtt_median_us"][0] for r in rs] for side, rs in runs.items()}
        print(f"rtt medians off {rtt['off']} us, on {rtt['on']} us; worst polling run {worst(runs).line()}")
        for side, rs in runs.items():
            for r in rs:
                assert r.results["rounds"][0] == 800
                assert _halt_exits(r) == 800  # one halt per message
                last = r.samples.filter(r.samples["t_ns"] == r.samples["t_ns"].max())
                polled = last["halt_successful_poll"][0]
                if side == "off":
                    assert polled == 0
                else:
                    assert polled > 400, f"{polled} of 800 halts polled"
        # polling saves the wake-up from sleep (~5 us of ~37 here): lower in most pairs
        assert sum(on < off for off, on in zip(rtt["off"], rtt["on"])) >= 2, rtt

    # other load on CPU 1 stops polling in the polling runs (towards failing)
    remeasure(measure, check, quality=worst)


def test_the_calling_thread_gets_its_cpus_back_after_creating_the_vcpu_threads(kvm_host: Host) -> None:
    import os

    # run() creates each vCPU thread from the calling thread pinned to that
    # vCPU's CPUs (a thread created on a host driver's CPU waited there for a
    # slice before it could pin itself), then gives the caller its CPUs back
    before = os.sched_getaffinity(0)
    r = run(Spin(), vcpus=2, placement=[[1], [0]], duration_s=0.05, host=kvm_host, warn_quality=False)
    assert os.sched_getaffinity(0) == before
    assert sorted(r.threads["cpus"].to_list()) == [[0], [1]]
    os.sched_setaffinity(0, {0})
    try:
        run(Spin(), vcpus=1, pcpus=[0], duration_s=0.05, host=kvm_host, warn_quality=False)
        assert os.sched_getaffinity(0) == {0}  # what it was, not every CPU of the machine
    finally:
        os.sched_setaffinity(0, before)


def test_ipi_ping_pong_latency(kvm_host: Host) -> None:
    w = IpiPingPong(rounds=400, gap_us=50)

    def measure():  # type: ignore[no-untyped-def]
        off = run(w, vcpus=2, placement=[[0], [1]], duration_s=10, halt_poll_ns=0, host=kvm_host, warn_quality=False)
        on = run(
            w, vcpus=2, placement=[[0], [1]], duration_s=10, halt_poll_ns=200_000, host=kvm_host, warn_quality=False
        )
        return off, on

    def check(p) -> None:  # type: ignore[no-untyped-def]
        off, on = p
        r_off, r_on = off.results["rtt_median_us"][0], on.results["rtt_median_us"][0]
        print(f"IPI rtt median: halt_poll_ns=0 {r_off:.1f} us, 200000 {r_on:.1f} us; polling run {on.quality.line()}")
        assert off.results["rounds"][0] == on.results["rounds"][0] == 400
        assert off.results["replies"][1] == 400
        # the round trips' spread, in order (the twins' calibration reads p10-p90)
        q = [off.results[f"rtt_{k}_us"][0] for k in ("p10", "median", "p90", "p99")]
        assert 0 < q[0] <= q[1] <= q[2] <= q[3], q
        # vCPU 0 halts once per round; vCPU 1 once per request (+ the final wake-up)
        assert _halt_exits(off) >= 800
        assert r_on < r_off, f"IPI rtt median with polling {r_on:.1f} us, without {r_off:.1f} us"

    remeasure(measure, check, quality=lambda p: p[1].quality)


def test_idle_ticks_at_250hz(kvm_host: Host) -> None:
    def check(r) -> None:  # type: ignore[no-untyped-def]
        ticks = r.results["ticks"][0]
        last = r.samples.filter(r.samples["t_ns"] == r.samples["t_ns"].max())
        wait_frac = last["halt_wait_ns"][0] / last["t_ns"][0]
        print(f"ticks {ticks} in {r.wall_s:.3f} s; halt_wait_ns {wait_frac:.0%} of the run; {r.quality.line()}")
        assert 225 <= ticks <= 275, f"{ticks} ticks"
        assert wait_frac > 0.8, f"halted {wait_frac:.0%} of the run"  # an idle guest: blocked almost all the time

    r = remeasure(
        lambda: run(IdleTicks(hz=250), vcpus=1, pcpus=[1], duration_s=1.0, host=kvm_host, warn_quality=False),
        check,
        quality=lambda r: r.quality,
    )
    assert r.threads["outcome"][0] == "deadline"
    last = r.samples.filter(r.samples["t_ns"] == r.samples["t_ns"].max())
    # everything happened in the kernel (HLT blocks there, the LAPIC timer is
    # emulated there): KVM counted exits, none reached user space
    assert last["exits"][0] > 0
    assert r.threads["user_exits"][0] == 0


def test_a_run_that_never_finishes_stops_at_its_deadline(kvm_host: Host) -> None:
    t0 = time.monotonic()
    r = run(IdleTicks(hz=1000), vcpus=3, pcpus=[0], duration_s=0.3, host=kvm_host, warn_quality=False)
    assert time.monotonic() - t0 < 2.0
    assert r.threads.height == 3
    assert set(r.threads["outcome"]) == {"deadline"}


def test_ctrl_c_stops_all_vcpus_within_a_second(kvm_host: Host) -> None:
    code = textwrap.dedent(
        """
        import os, time
        from vcpulab.experiment import SpinLock, run
        print("ready", flush=True)
        t0 = time.monotonic()
        try:
            run(SpinLock(kind="ticket"), vcpus=4, pcpus=[0], duration_s=30)
        except KeyboardInterrupt:
            print(f"interrupted {time.monotonic() - t0:.3f} fds {len(os.listdir('/proc/self/fd'))}", flush=True)
        """
    )
    out = interrupt_script(code, after_s=1.0, within_s=1.5)
    assert "interrupted" in out, out
    fds = int(out.split("fds")[1])
    assert fds < 10  # every VM, vCPU and stats fd was closed


def test_ctrl_c_stops_a_host_driven_ping_pong_promptly(kvm_host: Host) -> None:
    code = textwrap.dedent(
        """
        import time
        from vcpulab.experiment import MsiPingPong, run
        print("ready", flush=True)
        try:
            run(MsiPingPong(rounds=16_000, gap_us=2000), vcpus=1, pcpus=[1], duration_s=60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    assert "interrupted" in interrupt_script(code, after_s=1.0, within_s=1.5)


def test_bad_experiment_arguments(kvm_host: Host) -> None:
    with pytest.raises(ValueError, match="one CPU list per vCPU"):
        run(SpinLock(), vcpus=2, placement=[[0]], host=kvm_host)
    with pytest.raises(ValueError, match="not usable"):
        run(SpinLock(), vcpus=2, pcpus=[999], host=kvm_host)
    with pytest.raises(ValueError, match="exactly one vCPU"):
        run(MsiPingPong(), vcpus=2, host=kvm_host)
    with pytest.raises(ValueError, match="kind"):
        run(SpinLock(kind="mcs"), vcpus=2, host=kvm_host)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duration"):
        run(SpinLock(), vcpus=2, duration_s=0, host=kvm_host)
    with pytest.raises(ValueError, match="test-and-set"):
        run(PvSpinLock(kind="ticket"), vcpus=2, host=kvm_host)  # type: ignore[arg-type]


def test_a_vcpu_threads_guest_assertion_reaches_the_caller_as_its_own_exception(kvm_host: Host) -> None:
    """A vCPU thread's error crosses the FFI as the exception its core error
    converts to (src/py/errors.rs), with the guest's message, not as a class
    name looked up by string: the program is told it runs on one vCPU fewer
    than it does, so the last vCPU's guest code asserts on its id."""
    import vcpulab

    class TooFewSlots(SpinLock):
        def params(self, n_vcpus: int) -> dict[str, int | str]:
            return {**super().params(n_vcpus), "vcpus": n_vcpus - 1}

    t0 = time.monotonic()
    with pytest.raises(vcpulab.GuestAssertionError, match="vCPU id below the program's vcpus parameter: got 0x1"):
        run(TooFewSlots(iterations=1), vms=1, vcpus=2, pcpus=[1], duration_s=5.0)
    # both threads end (one done, one failed) long before the run's deadline
    assert time.monotonic() - t0 < 5.0
