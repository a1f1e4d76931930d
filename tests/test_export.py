"""Traces out: vcpulab.export.to_perfetto writes Chrome trace-event JSON that
Perfetto opens; these tests parse it back and hold it against the trace."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import polars as pl
import pytest

from vcpulab import _core, sim, tracing
from vcpulab.export import HOST_PID, to_perfetto


def _sim_result() -> sim.Result:
    cfg = sim.Config(
        host=sim.Host(n_pcpus=2),
        vms=(sim.Vm(vcpus=3, count=2),),
        duration_ns=3_000_000,
        trace=True,
    )
    return sim.run(cfg)


def _load(p: Path) -> tuple[list[dict], dict]:
    doc = json.loads(p.read_text())
    return doc["traceEvents"], doc


def test_a_simulated_trace_round_trips_as_vcpu_and_host_cpu_slices(tmp_path: Path) -> None:
    r = _sim_result()
    assert r.trace is not None and r.trace.height > 0
    p = to_perfetto(r, tmp_path / "sim.json")
    events, doc = _load(p)
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["producer"] == "vcpulab"
    slices = [e for e in events if e["ph"] == "X"]
    host = [e for e in slices if e["pid"] == HOST_PID]
    vcpu = [e for e in slices if e["pid"] != HOST_PID]
    # one slice per trace row on its host CPU's track, and one on its vCPU's thread
    assert len(host) == r.trace.height == len(vcpu)
    total_us = float((r.trace["end_ns"] - r.trace["start_ns"]).sum()) / 1000.0
    assert sum(e["dur"] for e in host) == pytest.approx(total_us)
    assert min(e["ts"] for e in slices) == 0.0
    # VM v is process v + 1, its vCPUs its threads; host CPUs are threads of process 0
    names = {(e["pid"], e.get("tid"), e["name"]): e["args"] for e in events if e["ph"] == "M"}
    assert names[(HOST_PID, None, "process_name")] == {"name": "host CPUs"}
    for vm, v in set(zip(r.trace["vm"].to_list(), r.trace["vcpu"].to_list())):
        assert names[(vm + 1, v, "thread_name")] == {"name": f"vCPU {v}"}
        assert names[(vm + 1, None, "process_name")] == {"name": f"VM {vm}"}
    for c in set(r.trace["pcpu"].to_list()):
        assert names[(HOST_PID, c, "thread_name")] == {"name": f"CPU {c}"}
    # a slice says what ended it
    assert {e["args"]["why"] for e in host} <= set(r.trace["why"].to_list())
    first = r.trace.sort("start_ns").row(0, named=True)
    assert any(e["name"] == f"VM {first['vm']} vCPU {first['vcpu']}" and e["tid"] == first["pcpu"] for e in host)


def test_a_window_keeps_the_slices_that_overlap_it(tmp_path: Path) -> None:
    r = _sim_result()
    assert r.trace is not None
    lo, hi = 1_000_000, 1_500_000
    p = to_perfetto(r, tmp_path / "w.json", start_ns=lo, end_ns=hi)
    events, _ = _load(p)
    host = [e for e in events if e["ph"] == "X" and e["pid"] == HOST_PID]
    want = r.trace.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)).height
    assert len(host) == want > 0
    with pytest.raises(ValueError, match="after start_ns"):
        to_perfetto(r, tmp_path / "x.json", start_ns=hi, end_ns=lo)
    with pytest.raises(ValueError, match="overlaps"):
        to_perfetto(r, tmp_path / "x.json", start_ns=10**15)
    assert not (tmp_path / "x.json").exists()


def test_bad_input_names_the_problem_and_leaves_no_file(tmp_path: Path) -> None:
    untraced = sim.run(sim.Config(host=sim.Host(n_pcpus=1), vms=(sim.Vm(vcpus=1),), duration_ns=1_000_000))
    with pytest.raises(ValueError, match="no trace"):
        to_perfetto(untraced, tmp_path / "a.json")
    with pytest.raises(TypeError, match="Run, a sim.Result or a trace frame"):
        to_perfetto(42, tmp_path / "a.json")
    with pytest.raises(ValueError, match="columns"):
        to_perfetto(pl.DataFrame({"pcpu": [0]}), tmp_path / "a.json")
    with pytest.raises(ValueError, match="does not exist"):
        to_perfetto(_sim_result(), tmp_path / "no" / "such" / "a.json")
    with pytest.raises(ValueError, match="start_ns"):
        to_perfetto(_sim_result(), tmp_path / "a.json", start_ns=-1)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def traceable(kvm_host):  # type: ignore[no-untyped-def]
    try:
        tracing.Trace([next(iter(os.sched_getaffinity(0)))]).close()
    except _core.TraceUnavailableError as e:
        pytest.skip(f"kernel tracing unavailable: {e}")
    return kvm_host


def test_a_real_trace_round_trips_with_its_exits_and_halts(traceable, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from vcpulab.experiment import MsiPingPong, run
    from vcpulab.quality import QualityWarning

    cpu = max(os.sched_getaffinity(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", QualityWarning)
        r = run(MsiPingPong(rounds=100, gap_us=50), vcpus=1, pcpus=[cpu], trace=True, duration_s=5.0)
    assert r.trace is not None and r.exits is not None and r.halts is not None
    p = to_perfetto(r, tmp_path / "real.json")
    events, _ = _load(p)
    slices = [e for e in events if e["ph"] == "X"]
    host = [e for e in slices if e["pid"] == HOST_PID]
    on_vcpu = [e for e in slices if e["pid"] == 1 and e["tid"] == 0]
    assert len(host) == r.trace.height
    vcpu_rows = r.trace.filter(pl.col("vm") >= 0).height
    exit_rows = r.exits.filter(pl.col("vm") >= 0).height
    # the vCPU's thread: its run slices, one per exit, one per halt
    assert len(on_vcpu) == vcpu_rows + exit_rows + r.halts.height
    assert r.halts.height > 0 and any(e["name"].startswith("halt (") for e in on_vcpu)
    # another task on the vCPU's CPU is named by its comm, with its tid
    for e in host:
        if not e["name"].startswith("VM "):
            assert e["args"].get("tid") is not None


def test_the_cli_writes_a_simulated_runs_trace_for_perfetto(tmp_path: Path) -> None:
    import subprocess
    import sys

    spec = tmp_path / "traced.toml"
    spec.write_text("[config]\nduration_ns = 2_000_000\ntrace = true\n")
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "vcpulab.cli", "sim", str(spec), "--out", str(out), "--quiet", "--perfetto"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    events, _ = _load(out / "trace.perfetto.json")
    assert any(e["ph"] == "X" for e in events)
    untraced = tmp_path / "plain.toml"
    untraced.write_text("[config]\nduration_ns = 2_000_000\n")
    r = subprocess.run(
        [sys.executable, "-m", "vcpulab.cli", "sim", str(untraced), "--out", str(tmp_path / "o2"), "--perfetto"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "config.trace = true" in r.stderr
