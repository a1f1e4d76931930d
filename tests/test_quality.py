"""Run quality: what else ran on a run's CPUs (vcpulab.quality), the
QualityWarning, and the re-measuring helper of vcpulab.testing."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from typing import Any

import polars as pl
import pytest
from _subproc import attach_when_running

from vcpulab import quality as vq
from vcpulab.experiment import MsiPingPong, QualityWarning, Run, run
from vcpulab.kvm import Host
from vcpulab.testing import REMEASURES, remeasure


def _snap(t_ns: int, idle_ns: dict[int, int], threads: dict[int, tuple[int, int]] | None = None) -> vq.Snapshot:
    return vq.Snapshot(t_ns=t_ns, source="cpuidle", counters=idle_ns, psi_some_us=0, threads=threads or {})


def test_other_time_is_busy_time_minus_the_runs_own_threads() -> None:
    # 100 ms on CPUs 0 and 1: CPU 0 idle 40 ms, CPU 1 idle 90 ms; thread 7
    # (pinned to CPU 0) ran 50 ms, thread 8 (CPU 1) 10 ms and waited 5 ms
    a = _snap(0, {0: 0, 1: 0}, {7: (0, 0), 8: (0, 0)})
    b = _snap(100_000_000, {0: 40_000_000, 1: 90_000_000}, {7: (50_000_000, 0), 8: (10_000_000, 5_000_000)})
    q = vq.quality(a, b, {7: [0], 8: [1]})
    assert q.other_busy_ns == {0: 10_000_000, 1: 0}
    assert q.other_share == pytest.approx(0.05)
    # both threads are alone on their CPU: 5 ms of run delay over 2 × 100 ms
    assert q.alone_run_delay_ns == 5_000_000
    assert q.alone_delay_share == pytest.approx(0.025)
    assert q.disturbed
    assert any("other tasks ran 5.0%" in r for r in q.reasons)
    assert any("waited 2.5%" in r for r in q.reasons)
    assert "DISTURBED" in q.line()


def test_threads_sharing_a_cpu_are_not_alone_and_thresholds_are_parameters() -> None:
    a = _snap(0, {0: 0}, {1: (0, 0), 2: (0, 0)})
    b = _snap(100_000_000, {0: 0}, {1: (50_000_000, 50_000_000), 2: (49_000_000, 50_000_000)})
    q = vq.quality(a, b, {1: [0], 2: [0]}, steal_fraction=[([0], 0.5), ([0], 0.5)])
    assert q.alone_delay_share is None  # two threads on one CPU wait for each other
    assert q.other_busy_ns == {0: 1_000_000}
    assert not q.disturbed and q.line().startswith("quality: clean")
    assert q.steal_excess == pytest.approx(0.0)  # half of the time is the fair share of 2 on 1
    strict = vq.quality(a, b, {1: [0], 2: [0]}, max_other_share=0.005)
    assert strict.disturbed


def test_the_fair_share_of_steal_counts_vcpu_threads_only() -> None:
    # two vCPU threads on CPU 0 and a host driver thread allowed on every CPU
    # (it sleeps): the fair share is 1 - 1/2, not 1 - 1/3
    a = _snap(0, {0: 0}, {1: (0, 0), 2: (0, 0), 3: (0, 0)})
    b = _snap(100_000_000, {0: 0}, {1: (50_000_000, 50_000_000), 2: (49_000_000, 50_000_000), 3: (0, 0)})
    placement = {1: [0], 2: [0], 3: [0, 1]}
    steal = [([0], 0.5), ([0], 0.5)]
    q = vq.quality(a, b, placement, steal_fraction=steal, vcpu_threads=[1, 2])
    assert q.steal_excess == pytest.approx(0.0)
    # without vcpu_threads every thread of the placement competes (the old reading)
    assert vq.quality(a, b, placement, steal_fraction=steal).steal_excess == pytest.approx(0.5 - 2 / 3)


@pytest.mark.parametrize("vcpus", [2, 3, 4])
def test_steal_of_vcpus_sharing_one_cpu_is_their_fair_share(kvm_host: Host, vcpus: int) -> None:
    # N always-runnable vCPUs on CPU 0: each waits 1 - 1/N of the time for its
    # siblings. run()'s fair share counts those N threads only, never vcpulab's
    # own (unpinned, sleeping) driver thread: with it, 2 vCPUs read -17 %
    # against 2/3 instead of 1/2 (3: -9 %, 4: -6 %). Measured on the project's
    # 2-CPU host (kvm_pvm, 2026-12-01, 0.5 s runs): -0.6 %, -1.2 %, -1.5 %.
    # The fair share the quality used is checked exactly on every measurement (whatever else runs:
    # a wrong fair share fails even on a busy CPU); the bound is loose, as a busy CPU adds steal, and
    # a run it fails on is measured again when other tasks disturbed it.
    from vcpulab.experiment import Spin

    def measure():  # type: ignore[no-untyped-def]
        r = run(Spin(), vcpus=vcpus, pcpus=[0], duration_s=0.4, sample_every_s=0.02, host=kvm_host, warn_quality=False)
        mean = r.steal_fraction()["steal_fraction"].mean()
        assert r.quality.steal_excess == pytest.approx(mean - (1 - 1 / vcpus), abs=1e-9), (r.quality.steal_excess, mean)
        return r

    def check(r):  # type: ignore[no-untyped-def]
        assert abs(r.quality.steal_excess) < 0.1, r.quality.line()

    remeasure(measure, check, quality=lambda r: r.quality)


def test_remeasure_fails_a_clean_run_retries_a_disturbed_one_and_skips_naming_it() -> None:
    clean = vq.quality(_snap(0, {0: 0}), _snap(100, {0: 100}), {})
    dirty = vq.quality(_snap(0, {0: 0}), _snap(100, {0: 0}), {})
    assert not clean.disturbed and dirty.disturbed

    def fail(_: object) -> None:
        raise AssertionError("too slow")

    with pytest.raises(AssertionError, match="too slow"):
        remeasure(lambda: clean, fail, quality=lambda q: q, name="t-clean")
    assert REMEASURES["t-clean"] == [1]
    seq = iter([dirty, dirty, clean])
    got = remeasure(
        lambda: next(seq), lambda q: None if not q.disturbed else fail(q), quality=lambda q: q, name="t-retry"
    )
    assert got is clean and REMEASURES["t-retry"] == [3]
    with pytest.raises(pytest.skip.Exception, match="disturbed in all 2 measurements: other tasks ran 100.0%"):
        remeasure(lambda: dirty, fail, quality=lambda q: q, tries=2, name="t-skip")
    # a disturbed measurement that passes is accepted only where other load pushes towards failing
    seq2 = iter([dirty, clean])
    assert (
        remeasure(lambda: next(seq2), lambda q: None, quality=lambda q: q, pass_when_disturbed=False, name="t-strict")
        is clean
    )
    for k in ("t-clean", "t-retry", "t-skip", "t-strict"):
        REMEASURES.pop(k, None)


def _census(cpu_ns: dict[int, int], forks: tuple[int, int]) -> vq.Census:
    return vq.Census(cpu_ns=cpu_ns, forks_first=forks[0], forks_last=forks[1])


def test_other_tasks_time_counts_every_task_but_the_runs_and_only_when_none_was_missed() -> None:
    # tasks 1-3 ran before; between the censuses task 7 (another process's)
    # was born and still runs, the run's driver 9 was born and runs, its
    # vCPU thread 8 was born and went: three births, all accounted for
    before = _census({1: 100, 2: 1_000, 3: 50}, (10, 10))
    after = _census({1: 400, 2: 1_500, 3: 50, 7: 30, 9: 5}, (13, 13))
    assert vq.other_tasks_ns(before, after, own={8, 9}, born=[8, 9]) == 300 + 500 + 0 + 30
    # one birth more than it can see: a task born and gone (a compiler of a build) is in neither census
    assert vq.other_tasks_ns(before, _census(after.cpu_ns, (13, 14)), own={8, 9}, born=[8, 9]) is None
    # the run's own births it did not name are unseen births too
    assert vq.other_tasks_ns(before, after, own={8, 9}, born=[9]) is None
    # another task went between them: its last CPU time is unknown
    gone = {t: v for t, v in after.cpu_ns.items() if t != 3}
    assert vq.other_tasks_ns(before, _census(gone, (13, 13)), own={8, 9}, born=[8, 9]) is None
    # one of the run's own threads going is no gap (its time is the run's)
    assert vq.other_tasks_ns(before, _census(gone, (13, 13)), own={3, 8, 9}, born=[8, 9]) == 830


def test_the_censuses_bound_the_cpuidle_estimate_but_not_a_trace() -> None:
    # 100 ms on CPUs 0 and 1, no thread of the run: busy 4 ms and 2 ms, which
    # cpuidle counts as other tasks' time; the censuses saw every task, and
    # the others ran 3 ms (the rest was interrupt handling and idle exits)
    a = _snap(0, {0: 0, 1: 0})
    b = _snap(100_000_000, {0: 96_000_000, 1: 98_000_000})
    c0 = _census({1: 0, 2: 0, 50: 0}, (5, 5))
    c1 = _census({1: 2_000_000, 2: 1_000_000, 50: 7_000_000}, (5, 5))
    plain = vq.quality(a, b, {})
    assert plain.other_busy_ns == {0: 4_000_000, 1: 2_000_000} and plain.other_tasks_ns is None
    assert plain.disturbed
    # thread 50 ran the run (its loop): the run's own, left out
    q = vq.quality(a, b, {}, census=(c0, c1), run_tids=[50])
    assert q.other_tasks_ns == 3_000_000
    assert q.other_busy_ns == {0: 2_000_000, 1: 1_000_000}  # scaled down together
    assert q.other_share == pytest.approx(0.015) and not q.disturbed
    strict = vq.quality(a, b, {}, census=(c0, c1), run_tids=[50], max_other_share=0.01)
    assert any("at most the other tasks' CPU time" in r for r in strict.reasons)
    # a bound above the estimate changes nothing; an incomplete census is no bound
    assert vq.quality(a, b, {}, census=(c0, c1)).other_busy_ns == plain.other_busy_ns
    assert vq.quality(a, b, {}, census=(c0, None)).other_busy_ns == plain.other_busy_ns
    # a trace is exact: it stays as traced
    traced = vq.quality(a, b, {}, census=(c0, c1), run_tids=[50], traced_other_ns={0: 5_000_000, 1: 0})
    assert traced.source == "trace" and traced.other_busy_ns == {0: 5_000_000, 1: 0}
    assert not any("at most" in r for r in traced.reasons)


def test_census_arguments_are_checked() -> None:
    a, b = _snap(0, {0: 0}), _snap(1_000, {0: 0})
    with pytest.raises(TypeError, match="census"):
        vq.quality(a, b, {}, census=(1, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="census must be a"):
        vq.quality(a, b, {}, census=(None,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="born entry"):
        vq.quality(a, b, {}, born=[0])


def test_a_census_sees_every_task_of_this_machine_or_says_it_cannot() -> None:
    import os
    import threading

    from vcpulab import _procfs

    c = vq.census()
    if not _procfs.proc_shows_every_task():
        # a child PID namespace or a /proc with hidepid: nothing it reads is complete
        assert c is None
        return
    assert c is not None
    assert threading.get_native_id() in c.cpu_ns and os.getpid() in c.cpu_ns
    assert 0 < c.forks_first <= c.forks_last


def test_snapshot_reads_this_hosts_counters() -> None:
    s = vq.snapshot([0])
    assert s.source in ("cpuidle", "/proc/stat") and 0 in s.counters


HOG = "import os, sys, time\nos.sched_setaffinity(0, {int(sys.argv[1])})\nprint('ready', flush=True)\nt = time.monotonic()\nwhile time.monotonic() - t < 20: pass\n"


def _ping_on_cpu1(kvm_host: Host, rounds: int, halt_poll_ns: int, **kw: Any) -> Run:
    """An MSI ping-pong (50 µs after each halt) of one vCPU on CPU 1."""
    return run(
        MsiPingPong(rounds=rounds, gap_us=50),
        vcpus=1,
        pcpus=[1],
        duration_s=10,
        halt_poll_ns=halt_poll_ns,
        host=kvm_host,
        **kw,
    )


def test_a_cpu_hog_on_the_runs_cpu_is_named_in_a_quality_warning(kvm_host: Host) -> None:
    hog = subprocess.Popen([sys.executable, "-c", HOG, "1"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        with pytest.warns(QualityWarning, match=r"other tasks ran .*CPU 1"):
            r = _ping_on_cpu1(kvm_host, 300, 200_000)
    finally:
        hog.kill()
        hog.wait()
        assert hog.stdout is not None
        hog.stdout.close()
    q = r.quality
    assert q is not None
    print(q.line())
    assert q.disturbed
    # the hog shares CPU 1 with the vCPU thread: the scheduler gives it a large
    # part of the run (the vCPU thread halts most of the time)
    assert q.other_busy_ns[1] > 0.2 * q.wall_ns
    # the censuses see the hog (it ran before the run and after it): no bound hides it
    assert q.other_tasks_ns is None or q.other_tasks_ns >= q.other_busy_ns[1]
    assert q.alone_delay_share is not None and q.alone_delay_share > 0
    assert q.as_dict()["disturbed"] is True


def test_a_runs_other_time_is_at_most_what_the_other_tasks_ran(kvm_host: Host) -> None:
    from vcpulab import _procfs

    # 200 halts woken by MSIs: each wake-up's interrupt and idle exit on CPU 1
    # is busy time of no task, which cpuidle alone counted as other tasks'
    measured = []
    for _ in range(5):
        q = _ping_on_cpu1(kvm_host, 200, 0, warn_quality=False).quality
        print(q.line(), q.other_tasks_ns)
        if q.other_tasks_ns is not None:
            assert sum(q.other_busy_ns.values()) <= q.other_tasks_ns
            measured.append(q.other_tasks_ns)
            break
    if _procfs.proc_shows_every_task():
        # a census pair misses tasks only when another task was born and went
        # during the run; five runs of ~20 ms each saw that every time: a
        # machine that starts processes without pause, which this is not
        assert measured, "every census pair of five runs missed a task"


def test_repeat_runs_trials_and_gives_means_with_confidence_intervals(kvm_host: Host) -> None:
    from vcpulab.experiment import Spin, Trials, t_critical

    tr = run(Spin(), vcpus=2, pcpus=[0], duration_s=0.2, repeat=3, host=kvm_host, warn_quality=False)
    assert isinstance(tr, Trials) and len(tr.runs) == 3
    assert sorted(set(tr.results["trial"])) == [0, 1, 2]
    assert tr.results.height == 6 and tr.samples["trial"].n_unique() == 3
    q = tr.quality
    assert q.height == 3 and set(q.columns) >= {"trial", "other_share", "disturbed", "reasons"}
    s = tr.summary(["pauses"])
    assert s.height == 2 and (s["n"] == 3).all()
    # pauses are a count: the interval is the t interval of log(mean), mapped back
    # (it cannot go below 0, as the symmetric one can on a few trials)
    v = tr.results.filter(pl.col("vcpu") == 0)["pauses"].cast(pl.Float64)
    row = s.filter(pl.col("vcpu") == 0).row(0, named=True)
    assert row["interval"] == "log-t"
    assert row["mean"] == pytest.approx(v.mean())
    if v.mean() > 0:
        f = math.exp(t_critical(0.95, 2) * v.std() / 3**0.5 / v.mean())
        assert row["ci_low"] == pytest.approx(v.mean() / f) and row["ci_high"] == pytest.approx(v.mean() * f)
    else:  # no pauses in any trial: the point interval at 0
        assert row["ci_low"] == row["ci_high"] == 0.0
    assert 0 <= row["ci_low"] <= row["mean"] <= row["ci_high"]
    with pytest.raises(ValueError, match="repeat"):
        run(Spin(), vcpus=1, repeat=0, host=kvm_host)
    with pytest.raises(ValueError, match="confidence"):
        tr.summary(confidence=0.5)
    with pytest.raises(ValueError, match="not numeric"):
        tr.summary(["nope"])


VMM = """
import os, sys
from vcpulab.experiment import Spin, run
print(os.getpid(), flush=True)
run(Spin(), vcpus=2, pcpus=[0], duration_s=20, warn_quality=False)
"""


def test_attach_finds_another_process_vcpu_threads_and_stats(kvm_host: Host, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """vcpulab.kvm.attach and `vcpulab watch` on a separate process running a vcpulab VM."""
    from vcpulab.kvm import attach

    p = subprocess.Popen([sys.executable, "-c", VMM], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        pid = int(p.stdout.readline())
        a = attach_when_running(pid, 2)
        print(a, a.vcpus, a.notes)
        assert sorted(a.vcpus["vcpu"]) == [0, 1]
        assert set(a.vcpus["name"]) == {"CPU 0/KVM", "CPU 1/KVM"}  # named like QEMU's
        threads, _ = a.sample(duration_s=0.5, every_s=0.1)
        assert threads.height >= 4 and {"cpu_ns", "run_delay_ns", "nonvoluntary_ctxt_switches"} <= set(threads.columns)
        first, last = (threads.filter(pl.col("t_ns") == f(threads["t_ns"])) for f in (pl.Series.min, pl.Series.max))
        assert last["cpu_ns"].sum() > first["cpu_ns"].sum()  # the vCPUs ran
        # the process holds vCPU stats fds: KVM's own counters, read through pidfd_getfd
        assert "insn_emulation" in threads.columns and last["insn_emulation"].sum() > first["insn_emulation"].sum()
        out = tmp_path / "w.parquet"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "vcpulab.cli",
                "watch",
                str(pid),
                "--interval-s",
                "0.2",
                "--count",
                "2",
                "--parquet",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        print(r.stdout, r.stderr)
        assert r.returncode == 0, r.stderr
        assert "cpu_%" in r.stdout and "run_delay_%" in r.stdout and "exits_per_s" in r.stdout
        assert pl.read_parquet(out).height >= 2
    finally:
        p.kill()
        p.wait()
        assert p.stdout is not None
        p.stdout.close()
    with pytest.raises(ProcessLookupError):
        attach(pid)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(LookupError, match="holds no KVM VM"):
            attach(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.raises(ValueError, match="pid"):
        attach(0)


def test_unpinned_threads_are_subtracted_from_their_cpus_together() -> None:
    from vcpulab.quality import _other_busy

    # measured on 2026-12-02: an unpinned worker polled CPU 1 all run (981 ms), the
    # waker ran 247 ms on CPU 0; the CPUs were busy 240 and 1000 ms
    busy = {0: 240_000_000, 1: 1_000_000_000}
    own = {10: 247_000_000, 11: 981_000_000, 12: 162_000}
    free = {t: [0, 1] for t in own}
    other = _other_busy(busy, own, free)
    assert abs(sum(other.values()) - 11_838_000) <= 2  # the rounding of the split
    # split in proportion to busy time
    assert other[1] > other[0] > 0
    # pinned threads: each CPU alone, clamped at 0 there
    pinned = {10: [0], 11: [1], 12: [1]}
    assert _other_busy(busy, own, pinned) == {0: 0, 1: 1_000_000_000 - 981_162_000}
    # two threads link three CPUs into one group: its other time (busy 600 - own 300)
    # is split in proportion to busy time, wherever each thread ran
    linked = _other_busy({0: 100, 1: 200, 2: 300}, {5: 250, 6: 50}, {5: [0, 1], 6: [1, 2]})
    assert linked == {0: 50, 1: 100, 2: 150}
    # an idle group splits its (clamped) rest evenly
    assert _other_busy({0: 0, 1: 0}, {5: 10}, {5: [0, 1]}) == {0: 0, 1: 0}
