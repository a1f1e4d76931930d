"""Tracing real runs (docs/tracing.md): the frames of ``run(..., trace=True)``
against KVM's own counters of the same run, their invariants and dtypes, the
bounds (truncation flag) and clean-up on every path.

Counts are compared exactly (every event of the window is recorded unless the
trace says it is truncated); nothing here asserts on a timing a busy CPU can
flip. Skips only where tracefs cannot be had (not root and not mounted)."""

from __future__ import annotations

import json
import os
import time
import warnings

import numpy as np
import polars as pl
import pytest
from _subproc import attach_when_running, interrupt_after_ready

from vcpulab import _core, tracing
from vcpulab.experiment import IdleTicks, MsiPingPong, Spin, run
from vcpulab.quality import QualityWarning


@pytest.fixture(scope="module")
def traceable(kvm_host):  # type: ignore[no-untyped-def]
    try:
        tracing.Trace([os.sched_getaffinity(0).__iter__().__next__()]).close()
    except _core.TraceUnavailableError as e:
        pytest.skip(f"kernel tracing unavailable: {e}")
    return kvm_host


def perf_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "perf_event" in os.readlink(f"/proc/self/fd/{fd}"):
                n += 1
        except OSError:
            pass
    return n


def _cpu() -> int:
    return max(os.sched_getaffinity(0))


def _delta(r, stat: str) -> int:  # type: ignore[no-untyped-def]
    s = r.samples.sort("t_ns")
    return int(s[stat][-1] - s[stat][0])


def _halted_ns(  # type: ignore[no-untyped-def]
    r, vcpu: int | None = None, stats: tuple[str, ...] = ("halt_poll_fail_ns", "halt_wait_ns")
) -> int:
    """ns KVM accounted to halts in ``stats`` over the run (default: those of halts that waited)."""
    s = r.samples if vcpu is None else r.samples.filter(pl.col("vcpu") == vcpu)
    s = s.sort("t_ns")
    return sum(int(s.group_by("vcpu").agg(pl.col(c).max() - pl.col(c).min())[c].sum()) for c in stats)


def _quiet_run(**kw):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", QualityWarning)
        return run(**kw)


def test_halts_match_kvm_stats_and_frames_have_their_dtypes(traceable) -> None:  # type: ignore[no-untyped-def]
    r = _quiet_run(
        workload=MsiPingPong(rounds=200, gap_us=50),
        vcpus=1,
        pcpus=[_cpu()],
        duration_s=10,
        halt_poll_ns=200_000,
        host=traceable,
        trace=True,
    )
    assert not r.trace_info["truncated"], r.trace_info
    assert dict(r.trace.schema) == tracing.TRACE_SCHEMA
    assert dict(r.wakeups.schema) == tracing.WAKEUPS_SCHEMA
    assert dict(r.exits.schema) == tracing.EXITS_SCHEMA
    assert dict(r.halts.schema) == tracing.HALTS_SCHEMA
    # every halt of the run is one kvm_vcpu_wakeup, whose ns is the halt's length. For a
    # halt that waited, kvm_vcpu_halt adds the same ktime differences to halt_poll_fail_ns
    # and halt_wait_ns: they agree to the ns. A halt that did not wait counts its poll time
    # in halt_poll_success_ns, and its length may include a block check after the poll.
    waited = r.halts.filter(~pl.col("polled"))
    assert int(waited["ns"].sum()) == _halted_ns(r, stats=("halt_poll_fail_ns", "halt_wait_ns"))
    polled = r.halts.filter(pl.col("polled"))
    assert int(polled["ns"].sum()) >= _halted_ns(r, stats=("halt_poll_success_ns",))
    # the halts that ended in the poll loop are exactly halt_successful_poll; every halt
    # follows an HLT exit (one that finds an interrupt already pending does not halt)
    assert int(r.halts["polled"].sum()) == _delta(r, "halt_successful_poll")
    assert _delta(r, "halt_attempted_poll") <= r.halts.height <= _delta(r, "halt_exits") == 200
    assert int((~r.halts["valid"]).sum()) == _delta(r, "halt_poll_invalid")
    # the window after each halt is what kvm_halt_poll_ns traced: grow_halt_poll_ns may
    # overshoot the VM's maximum once (kvm_vcpu_halt clamps it, untraced, at the next halt)
    with open("/sys/module/kvm/parameters/halt_poll_ns_grow") as f:
        grow = int(f.read())
    w = r.halts["window_ns"].drop_nulls()
    assert w.len() > 0 and w.min() >= 0 and w.max() <= 200_000 * max(grow, 1)
    # every exit that reached user space is one row (the DONE ucall here); the run's vCPU
    # threads time their own KVM_RUNs, so the kernel's two records per exit are not recorded
    assert "kvm:kvm_userspace_exit" not in r.trace_info["counts"] and "kvm:kvm_fpu" not in r.trace_info["counts"]
    assert not set(tracing.RUN_LOOP_REPLACES) & set(r.config["trace"]["events"])
    if r.trace_info["exits_source"] == "kvm_exit":
        assert r.exits.height == _delta(r, "exits")
    else:
        assert r.trace_info["exits_source"] == "run_loop"
        assert r.exits.height == int(r.threads["user_exits"].sum()) == r.trace_info["counts"]["vcpulab:kvm_run"]
    assert r.quality is not None and r.quality.source == "trace"


@pytest.fixture(scope="module")
def idle_run(traceable):  # type: ignore[no-untyped-def]
    """3 vCPUs of an idle guest (1000 Hz ticks) on the last two CPUs, traced."""
    cpus = sorted(os.sched_getaffinity(0))[-2:]
    return _quiet_run(workload=IdleTicks(hz=1000), vcpus=3, pcpus=cpus, duration_s=0.3, host=traceable, trace=True)


def test_slices_lie_in_the_run_and_do_not_overlap(idle_run) -> None:  # type: ignore[no-untyped-def]
    r = idle_run
    cpus = r.trace_info["cpus"]
    wall_ns = r.trace_info["window_ns"]
    t = r.trace
    assert t.height > 0
    assert (t["start_ns"] >= 0).all() and (t["end_ns"] <= wall_ns).all() and (t["start_ns"] < t["end_ns"]).all()
    assert set(t["pcpu"].unique().to_list()) <= set(cpus)
    # one task at a time on each CPU
    for (cpu,), g in t.sort("start_ns").group_by(["pcpu"]):
        assert (g["end_ns"].head(-1) <= g["start_ns"].tail(-1)).all(), f"overlapping slices on CPU {cpu}"
    # the vCPU threads' slices carry their tids, on the CPUs they were pinned to
    vt = t.filter(pl.col("vm") >= 0)
    tids = dict(zip(zip(r.threads["vm"], r.threads["vcpu"]), r.threads["tid"]))
    for (vm, vcpu, tid), _ in vt.group_by(["vm", "vcpu", "tid"]):
        assert tids[(vm, vcpu)] == tid
    assert set(vt["vcpu"].unique().to_list()) == {0, 1, 2}
    assert set(vt["tid"].unique().to_list()) == set(r.threads["tid"].to_list())
    # every halt ends with its vCPU running: its kvm_vcpu_wakeup lies in a slice of that
    # vCPU (also where the kernel wrote no switch-in record and the slice was inferred)
    h = r.halts.filter((pl.col("time_ns") >= 0) & (pl.col("time_ns") < wall_ns))
    assert h.height > 0
    covered = h.join(vt.select("vcpu", "start_ns", "end_ns"), on="vcpu").filter(
        (pl.col("start_ns") <= pl.col("time_ns")) & (pl.col("time_ns") <= pl.col("end_ns"))
    )
    assert covered.select("vcpu", "time_ns").unique().height == h.select("vcpu", "time_ns").unique().height
    # a halt that waited put its thread to sleep: after each, a new slice (inferred or not)
    for v in (0, 1, 2):
        assert vt.filter(pl.col("vcpu") == v).height >= h.filter((pl.col("vcpu") == v) & ~pl.col("polled")).height
    # each inferred switch-in starts one of the trace's slices
    assert isinstance(r.trace_info["inferred_switch_ins"], int) and r.trace_info["inferred_switch_ins"] <= t.height
    # wake-ups: each is of a vCPU thread, and it ran at or after it was woken (the kernel
    # may write no record of a wake-up from idle, so not every waited halt has one)
    w = r.wakeups
    assert (w["latency_ns"] >= 0).all() and set(w["tid"].unique().to_list()) <= set(tids.values())
    # halts: per vCPU, the traced lengths of the halts that waited sum to what KVM accounted to them
    waited = r.halts.filter(~pl.col("polled"))
    for v in (0, 1, 2):
        assert int(waited.filter(pl.col("vcpu") == v)["ns"].sum()) == _halted_ns(r, v)


@pytest.mark.parametrize("timed_by", ["kernel", "run_loop"])
def test_io_exits_are_each_one_row(traceable, timed_by) -> None:  # type: ignore[no-untyped-def]
    """Exits of a vCPU driven by hand: every IO exit is one row, named as the
    kernel names it, whether the kernel's records time them or the vCPU's
    own run loop (``Trace(vcpus=[v])``, two clock reads per ``KVM_RUN``)."""
    import threading

    with traceable.create_vm(memory_mib=2, irqchip=False) as vm:
        prog = vm.load("io_loop", port=0x80, count=500)
        v = vm.create_vcpu(0)
        v.start(prog)
        before = v.stats()
        own = [v] if timed_by == "run_loop" else None
        with tracing.Trace(sorted(os.sched_getaffinity(0)), vcpus=own) as tr:
            t0 = _core.monotonic_ns()
            res = v.run_until("io", count=500, port=0x80, timeout_s=60)
            t1 = _core.monotonic_ns()
            after = v.stats()
            f = tr.frames(t0, t1, [(threading.get_native_id(), 0, 0)])
        if timed_by == "run_loop":
            # a vCPU whose trace stopped times its exits into the next trace that asks, only
            with tracing.Trace(sorted(os.sched_getaffinity(0)), vcpus=[v]) as tr2:
                v.start(prog)
                assert v.run_until("io", count=10, port=0x80, timeout_s=60).matches == 10
                assert tr2.stop()["counts"]["vcpulab:kvm_run"] == 10
    assert res.matches == 500 and not f.info["truncated"]
    io = f.exits.filter(pl.col("reason").is_in(["KVM_EXIT_IO", "IO_INSTRUCTION", "io"]))
    assert io.height == 500
    # KVM's exits stat counts these and any exit handled in the kernel
    assert after["exits"] - before["exits"] >= io.height
    done = f.exits.drop_nulls("entry_ns")
    assert (done["handling_ns"] > 0).all() and done.height >= 499
    if f.info["exits_source"] == "kvm_userspace_exit":
        assert timed_by == "kernel"
        # one guest-FPU load per KVM_RUN (the one that ends an exit's row); its puts are not kept
        assert 500 <= f.info["counts"]["kvm:kvm_fpu"] <= 502, f.info["counts"]
    if timed_by == "run_loop":
        assert f.info["exits_source"] in ("run_loop", "kvm_exit")
        assert not set(tracing.RUN_LOOP_REPLACES) & set(f.info["counts"]), f.info["counts"]
        # one row per KVM_RUN the run loop issued, each inside the window, on the vCPU's clock
        assert (done["exit_ns"] >= 0).all() and (done["entry_ns"] <= t1 - t0).all()
        assert f.info["counts"]["vcpulab:kvm_run"] == 500  # the second trace's 10 went to it only


def test_a_trace_without_kvm_events_keeps_the_sched_map_and_no_exits(traceable) -> None:  # type: ignore[no-untyped-def]
    """``trace_kvm_events=False``: the scheduler's tracepoints only. The
    vCPU's slices and wake-ups are there (an idle-ticking vCPU halts and wakes
    1,000 times a second); exits and halts are empty, and nothing of KVM was
    recorded or counted."""
    cpu = _cpu()
    r = _quiet_run(
        workload=IdleTicks(hz=1000),
        vcpus=1,
        pcpus=[cpu],
        duration_s=0.2,
        host=traceable,
        trace=True,
        trace_kvm_events=False,
    )
    assert r.trace_info is not None and not r.trace_info["truncated"]
    assert r.trace_info["exits_source"] == "none"
    assert not any(k.startswith("kvm:") for k in r.trace_info["counts"]), r.trace_info["counts"]
    assert r.trace_info["counts"].get("sched:sched_switch", 0) > 0
    assert r.exits is not None and r.exits.height == 0
    assert r.halts is not None and r.halts.height == 0
    mine = r.trace.filter(pl.col("vcpu") == 0)
    assert mine.height > 50 and (mine["pcpu"] == cpu).all()
    assert r.wakeups is not None and r.wakeups.height > 50
    assert r.config["trace"]["events"] == ["sched:sched_switch", "sched:sched_wakeup"]
    with pytest.raises((TypeError, ValueError), match="trace_kvm_events"):
        run(Spin(), vcpus=1, duration_s=0.1, host=traceable, trace=True, trace_kvm_events="no")
    with pytest.raises((TypeError, ValueError), match="kvm_events"):
        tracing.Trace([cpu], kvm_events=None)  # type: ignore[arg-type]


def test_the_trace_stop_is_outside_the_runs_clock(traceable, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Trace.stop() takes 0.3-0.4 s here (an RCU grace period per perf fd); it
    # ran inside the timed window, so a traced 1 s run had wall_s 1.41 s and
    # every rate over wall_s (twins' acquisitions per second) came out low.
    # A stop made 1 s slower must not show in wall_s.
    stop = tracing.Trace.stop
    stopped = []

    def slow_stop(self):  # type: ignore[no-untyped-def]
        time.sleep(1.0)
        stopped.append(True)
        return stop(self)

    monkeypatch.setattr(tracing.Trace, "stop", slow_stop)
    r = _quiet_run(workload=Spin(), vcpus=1, pcpus=[_cpu()], duration_s=0.2, host=traceable, trace=True)
    assert stopped and r.trace is not None  # frames() stops too (idempotent)
    assert r.wall_s < 0.2 + 0.9, r.wall_s
    assert r.trace_info["window_ns"] <= r.wall_s * 1e9


@pytest.mark.parametrize("cap", [5, 300])
def test_a_capped_trace_says_so_and_is_not_trusted(traceable, cap) -> None:  # type: ignore[no-untyped-def]
    # a trace that reached its cap warns, cuts its frames where its records stop
    # (no CPU's last slice stretched to the run's end) and is not the source of
    # Run.quality, which calls a trace exact
    with pytest.warns(tracing.TraceTruncatedWarning, match="incomplete: .* dropped"):
        r = _quiet_run(
            workload=IdleTicks(hz=1000),
            vcpus=2,
            pcpus=[_cpu()],
            duration_s=0.3,
            host=traceable,
            trace=True,
            trace_max_events=cap,
        )
    ti = r.trace_info
    assert ti["truncated"] and ti["dropped"] > 0 and ti["events"] == cap
    window = ti["window_ns"]
    assert 0 <= ti["complete_until_ns"] < window
    assert ti["first_dropped_ns"] is not None
    # the run's CPU switched ~600 times (2 vCPUs, 1000 Hz ticks), far past the cap:
    # its slices end where its buffer's first record was dropped, before the window's end
    assert r.trace.height == 0 or r.trace["end_ns"].max() < window
    assert r.quality.source != "trace" and r.quality.trace_truncated is not None
    assert "trace is incomplete" in r.quality.line()


def test_bad_cpus_and_limits_are_value_errors(traceable) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="not online"):
        tracing.Trace([100_000])
    with pytest.raises(ValueError, match="at least one"):
        tracing.Trace([])
    with pytest.raises(ValueError, match="cpus"):
        tracing.Trace([-1])
    with pytest.raises(ValueError, match="max_events"):
        tracing.Trace([0], max_events=0)
    with pytest.raises(TypeError, match="vcpulab.kvm.Vcpu"):
        tracing.Trace([0], vcpus=[0])
    with pytest.raises(ValueError):
        run(Spin(), vcpus=1, pcpus=[100_000], duration_s=0.1, host=traceable, trace=True)
    with pytest.raises(ValueError, match="trace_max_events"):
        run(Spin(), vcpus=1, duration_s=0.1, host=traceable, trace=True, trace_max_events=0)
    assert perf_fds() == 0


def test_deadline_and_errors_leave_no_perf_fds(traceable) -> None:  # type: ignore[no-untyped-def]
    assert perf_fds() == 0
    r = _quiet_run(workload=Spin(), vcpus=1, pcpus=[_cpu()], duration_s=0.2, host=traceable, trace=True)
    assert r.threads["outcome"].to_list() == ["deadline"]
    assert r.trace.filter(pl.col("vm") == 0).height > 0
    assert perf_fds() == 0
    tr = tracing.Trace([_cpu()])
    assert perf_fds() > 0
    del tr  # dropped without stop
    import gc

    gc.collect()
    assert perf_fds() == 0


def test_ctrl_c_leaves_no_perf_fds(traceable) -> None:  # type: ignore[no-untyped-def]
    code = f"""
        import os, warnings
        from vcpulab.experiment import run, Spin
        def perf():
            n = 0
            for fd in os.listdir("/proc/self/fd"):
                try:
                    n += "perf_event" in os.readlink(f"/proc/self/fd/{{fd}}")
                except OSError:
                    pass
            return n
        warnings.simplefilter("ignore")
        print("READY", flush=True)
        try:
            run(Spin(), vcpus=1, pcpus=[{_cpu()}], duration_s=30, trace=True)
        except KeyboardInterrupt:
            print("interrupted", perf())
    """
    _, out, err, rc = interrupt_after_ready(code, 0.5)
    assert rc == 0, err
    assert out.split() == ["interrupted", "0"], (out, err)


def test_views_of_a_traced_run(idle_run) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    from vcpulab import analysis, plot

    r = idle_run
    by = analysis.exits_by_reason(r)
    assert by["count"].sum() == r.exits.height
    assert by.columns[:3] == ["reason", "count", "share"]
    lat = analysis.wakeup_latency(r)
    assert lat["count"].sum() == r.wakeups.height and lat.height == r.wakeups["tid"].n_unique()
    assert (lat["latency_p50_ns"] <= lat["latency_p99_ns"]).all()
    m = plot.sched_map(r, us_per_pixel=100)
    # one row per host CPU of the run (4 px, taller for a map of few CPUs: the band fills plot.MIN_MAP_PX);
    # the vCPUs in the simulator's colours, other tasks black
    n = len(r.trace_info["cpus"])
    assert m.image.shape[0] == n * max(4, -(-plot.MIN_MAP_PX // n))
    colours = {tuple(c) for c in m.image.reshape(-1, 3).tolist()}
    # a slice at least one column (100 µs) long covers a column's midpoint, so its colour shows
    longest = r.trace.group_by(["vm", "vcpu"]).agg((pl.col("end_ns") - pl.col("start_ns")).max().alias("ns"))
    for vm, vcpu, ns in longest.iter_rows():
        if ns >= 100_000:
            assert (plot.BLACK if vm < 0 else plot.vcpu_color(vm, vcpu, 1, 3)) in colours
    codes = plot.sched_map_codes(r.trace.with_columns(pl.col("pcpu") - min(r.trace_info["cpus"])), 100.0)
    # the map's vCPU codes are the traced vCPUs', and every vCPU with a slice of a column or more is on it
    shown = {int(c) for c in set(codes.ravel().tolist()) if c >= 0}
    traced = {
        vm * 65536 + vcpu for vm, vcpu in r.trace.filter(pl.col("vm") >= 0).select("vm", "vcpu").unique().iter_rows()
    }
    assert shown <= traced
    assert {vm * 65536 + vcpu for vm, vcpu, ns in longest.iter_rows() if vm >= 0 and ns >= 100_000} <= shown
    # the raster of the run itself has the figure's rows: one per traced CPU, in CPU order
    assert np.array_equal(plot.sched_map_codes(r, 100.0), codes)
    assert plot.sched_map_image(r, 100.0).shape[0] == n
    for fig in (plot.exit_handling(r), plot.halt_poll_window(r), plot.wakeup_latency(r)):
        assert isinstance(fig, Figure)
    with pytest.raises(ValueError, match="trace=True"):
        analysis.exits_by_reason(type("R", (), {"exits": None})())


VMM = """
import os
from vcpulab.experiment import IdleTicks, run
print(os.getpid(), flush=True)
run(IdleTicks(hz=1000), vcpus=2, pcpus=[%d], duration_s=20, warn_quality=False)
"""


def test_attach_traces_another_process(traceable, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """attach(pid).trace(): a separate process's vCPU threads, into the frames of a traced Run."""
    import subprocess
    import sys

    cpu = _cpu()
    p = subprocess.Popen([sys.executable, "-c", VMM % cpu], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        pid = int(p.stdout.readline())
        a = attach_when_running(pid, 2)
        f = a.trace(duration_s=1.0)
        # the same from the command line, frames written as Parquet
        out = tmp_path / "tr"
        cli = subprocess.run(
            [sys.executable, "-m", "vcpulab.cli", "trace", str(pid), "--duration-s", "0.3", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        assert "exits by reason" in cli.stdout and "wake-up to run" in cli.stdout, cli.stdout
        assert dict(pl.read_parquet(out / "halts.parquet").schema) == tracing.HALTS_SCHEMA
        # an empty exit table says why (an idle-ticking guest's exits are all handled in the kernel)
        no_exits = pl.read_parquet(out / "exits.parquet").height == 0
        assert ("(no exits to user space in the trace:" in cli.stdout) == no_exits, cli.stdout
        # --json: one object on stdout saying what was traced and written, the tables on stderr
        jout = tmp_path / "tj"
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "vcpulab.cli",
                "trace",
                str(pid),
                "--duration-s",
                "0.3",
                "--out",
                str(jout),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        doc = json.loads(cli.stdout)
        assert doc["pid"] == pid and doc["vcpu_threads"] == 2 and doc["cpus"] == [cpu]
        assert doc["duration_s"] == 0.3 and doc["window_ns"] == 300_000_000
        assert doc["events"] == sum(doc["counts"].values()) and doc["truncated"] is False
        names = ("trace", "wakeups", "exits", "halts")
        assert doc["files"] == [str(jout / f"{n}.parquet") for n in names]
        assert doc["rows"] == {n: pl.read_parquet(jout / f"{n}.parquet").height for n in names}
        assert doc["rows"]["halts"] > 0
        assert "exits by reason" in cli.stderr and "wake-up to run" in cli.stderr
    finally:
        p.kill()
        p.wait()
        assert p.stdout is not None
        p.stdout.close()
    assert not f.info["truncated"] and f.info["cpus"] == [cpu]
    assert dict(f.trace.schema) == tracing.TRACE_SCHEMA and dict(f.halts.schema) == tracing.HALTS_SCHEMA
    tids = dict(zip(a.vcpus["tid"], a.vcpus["vcpu"]))
    vt = f.trace.filter(pl.col("vcpu") >= 0)
    assert set(vt["tid"].to_list()) == set(tids) and all(tids[t] == v for t, v in zip(vt["tid"], vt["vcpu"]))
    assert (f.trace["start_ns"] >= 0).all() and (f.trace["end_ns"] <= 1_000_000_000).all()
    # an idle guest at 1000 Hz halts between ticks (only its vCPUs' halts are kept)
    assert f.halts.height > 0 and set(f.halts["vcpu"].to_list()) <= {0, 1}
    assert set(f.wakeups["tid"].to_list()) <= set(tids)
    assert perf_fds() == 0


def test_a_hog_on_the_run_cpu_is_seen_by_name_and_in_quality(traceable) -> None:  # type: ignore[no-untyped-def]
    """Another process spinning on the run's CPU: its slices are in Run.trace under its
    pid and name, black in the sched map's terms (vm = -1), and Run.quality counts them."""
    import subprocess
    import sys

    cpu = _cpu()
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, [{cpu}]); print(1, flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "1"  # pinned and spinning
        r = _quiet_run(workload=Spin(), vcpus=1, pcpus=[cpu], duration_s=0.3, host=traceable, trace=True)
    finally:
        hog.kill()
        hog.wait()
        assert hog.stdout is not None
        hog.stdout.close()
    mine = r.trace.filter(pl.col("tid") == hog.pid)
    assert mine.height > 0 and set(mine["pcpu"].to_list()) == {cpu} and (mine["vm"] == -1).all()
    assert set(mine["comm"].to_list()) == {"python"} or all(c.startswith("python") for c in mine["comm"])
    q = r.quality
    assert q is not None and q.source == "trace"
    assert q.other_busy_ns[cpu] >= int((mine["end_ns"] - mine["start_ns"]).sum())


def test_trials_keep_each_trial_trace(traceable) -> None:  # type: ignore[no-untyped-def]
    tr = _quiet_run(workload=Spin(), vcpus=1, pcpus=[_cpu()], duration_s=0.1, host=traceable, trace=True, repeat=2)
    assert tr.trace is not None and sorted(tr.trace["trial"].unique().to_list()) == [0, 1]
    assert tr.halts is not None and tr.exits is not None and tr.wakeups is not None
    assert perf_fds() == 0


def test_a_trace_whose_records_do_not_decode_is_not_a_clean_run(traceable, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # format files that do not describe the records (every field offset moved, as
    # a kernel whose layout vcpulab misreads would give): every record is
    # malformed, and the run must say its trace is incomplete instead of reading
    # as an empty, undisturbed run. A private mount namespace keeps the host's
    # tracefs untouched.
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    code = (
        "import sys, warnings\n"
        "from vcpulab.quality import QualityWarning\n"
        "warnings.simplefilter('ignore', QualityWarning)\n"
        "from vcpulab import tracing\n"
        "from vcpulab.experiment import run, IdleTicks\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always', tracing.TraceTruncatedWarning)\n"
        "    r = run(IdleTicks(hz=1000), vcpus=2, pcpus=[0], duration_s=0.2, trace=True)\n"
        "ti = r.trace_info\n"
        "print(ti['malformed'], ti['truncated'], r.quality.source, r.quality.trace_truncated is not None,\n"
        "      any(issubclass(x.category, tracing.TraceTruncatedWarning) for x in w))\n"
    )
    script = f"""
set -e
umount /sys/kernel/debug/tracing 2>/dev/null || true
umount /sys/kernel/tracing 2>/dev/null || true
mkdir -p {tmp_path}/real; mount -t tracefs nodev {tmp_path}/real
mount -t tmpfs none /sys/kernel/tracing
cd {tmp_path}/real/events
for d in sched/* kvm/*; do
  [ -f $d/format ] || continue
  mkdir -p /sys/kernel/tracing/events/$d; cp $d/id /sys/kernel/tracing/events/$d/id
  sed -E 's/offset:([0-9]+);\\tsize:/offset:\\1000;\\tsize:/' $d/format > /sys/kernel/tracing/events/$d/format
done
cd /
RUST_BACKTRACE=0 {sys.executable} -c "$CODE"
"""
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CODE": code},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    malformed, truncated, source, noted, warned = p.stdout.split()
    assert int(malformed) > 0 and truncated == "True" and source != "trace" and noted == "True" and warned == "True"
