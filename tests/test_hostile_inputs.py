"""Hostile inputs to the public API (issue 24): a fast subset of
benches/hostile_inputs.py (in its worker subprocesses, so a crash or a hang
fails a test instead of pytest), and one regression test per class of fix:
numpy scalars accepted where a number is wanted, flags that must be bools,
sequences that must not be a str / bytes / mapping / scalar, numbers checked
before they are compared or converted, messages that name the argument, and
arguments checked before any work (a lookup, a calibration, a real trial).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vcpulab import analysis, experiment, plot, quality, sim, twins
from vcpulab.validation import validate
from vcpulab.validation.sensitivity import sensitivity

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "benches" / "hostile_inputs.py"
CASE = "haltpoll2015_always_vs_off_idle250hz"


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location("hostile_inputs", HARNESS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hostile_inputs"] = mod
    spec.loader.exec_module(mod)
    return mod


def tiny() -> sim.Config:
    return sim.Config(host=sim.Host(n_pcpus=1), vms=(sim.Vm(vcpus=1),), duration_ns=1_000_000)


# --------------------------------------------------------------------------- the harness


#: the harness's simulator, quality, analysis and plot targets: no real KVM, a few seconds in all
FAST = "sim config,sim.run,sim.sweep,Config.with_path,Config.replace,quality.snapshot,quality.quality,analysis,plot.sched_map_codes"


def test_harness_fast_subset_is_clean(tmp_path: Path) -> None:
    out = tmp_path / "hostile.json"
    env = _harness().child_env()
    r = subprocess.run(
        [sys.executable, str(HARNESS), "--quick", "--only", FAST, "--timeout", "20", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    total = res["total"]
    bad = [c for c in res["cases"] if c["outcome"] in ("silent", "hang", "crash", "unclear")]
    assert sum(total.values()) > 500, total  # the subset really ran
    for kind in ("silent", "hang", "crash"):
        assert total.get(kind, 0) == 0, [c for c in bad if c["outcome"] == kind][:10]
    assert res["clean_pct"] >= 98.0, bad[:20]


def test_harness_is_reproducible() -> None:
    h = _harness()
    a = [c.key for c in h.enumerate_cases(True, 24, ["sim.Host"])]
    b = [c.key for c in h.enumerate_cases(True, 24, ["sim.Host"])]
    assert a == b and len(a) > 100
    assert a != [c.key for c in h.enumerate_cases(True, 25, ["sim.Host"])]


# --------------------------------------------------------------------------- numpy scalars


def test_numpy_scalars_are_numbers_in_configs_and_sweeps() -> None:
    a = sim.Host(n_pcpus=np.int64(4), wakeup_jitter=np.float32(0.5), tick_ns=np.uint32(4_000_000))
    b = sim.Host(n_pcpus=4, wakeup_jitter=0.5)
    assert type(a.n_pcpus) is int and type(a.wakeup_jitter) is float
    assert sim.Config(host=a).config_hash() == sim.Config(host=b).config_hash()
    assert sim.Compute(np.int64(1000), prob=np.float32(1.0)).prob == 1.0
    df = sim.sweep(tiny(), {"seed": np.arange(2)}, threads=np.int64(1), max_points=np.int64(5), progress=False)
    assert df["seed"].to_list() == [0, 1]
    with pytest.raises(ValueError, match="Host.n_pcpus must be an int"):
        sim.Host(n_pcpus=np.bool_(True))


def test_numpy_scalars_elsewhere() -> None:
    assert validate([CASE], seeds=np.int64(1), duration_scale=np.float32(0.02)).height == 1
    assert analysis.gang_share(sim.run(tiny().replace(trace=True)), step_ns=np.int64(20_000)) >= 0.0
    cfg = twins.Experiment(experiment.SpinLock(), vcpus=np.int64(1), pcpus=(np.int64(0),), duration_s=np.float32(0.1))
    assert cfg.vcpus == 1


# --------------------------------------------------------------------------- bools


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: sim.run(tiny(), trace=1), "trace"),
        (lambda: sim.sweep(tiny(), progress="no"), "progress"),
        (lambda: sim.sweep(tiny(), progress=False, results=0), "results"),
        (lambda: twins.calibrate(refresh="yes"), "refresh"),
        (lambda: experiment.run(experiment.Spin(), duration_s=0.01, warn_quality=0), "warn_quality"),
        (lambda: analysis.compare([1.0, 2.0], [2.0, 3.0], paired=1), "paired"),
        (lambda: plot.sched_map(sim.run(tiny().replace(trace=True)), compact=1), "compact"),
    ],
)
def test_flags_must_be_bools(call: Any, name: str) -> None:
    with pytest.raises(TypeError, match=f"{name} must be a bool"):
        call()


# --------------------------------------------------------------------------- sequences


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: sim.sweep(5, progress=False), "points must be a Config"),
        (lambda: sim.sweep("", progress=False), "points must be a Config"),
        (lambda: sim.sweep(tiny(), 5, progress=False), "grid must map"),
        (lambda: sim.sweep(tiny(), {"seed": "01"}, progress=False), "grid axis 'seed' must be a list"),
        (lambda: sim.sweep(tiny(), {"seed": []}, progress=False), "grid axis 'seed' is empty"),
        (lambda: quality.snapshot(0), "cpus must be a sequence"),
        (lambda: quality.snapshot([0], tids="12"), "tids must be a sequence"),
        (lambda: validate(cases=[]), "cases must hold at least one item"),
        (lambda: validate([CASE], seeds="1"), "seeds must be a sequence"),
        (lambda: validate([CASE], seeds=10**30), "seeds must be <= 1000"),
        (lambda: sensitivity([CASE], factors=b"x"), "factors must be a sequence"),
        (lambda: analysis.compare("12", [1.0]), "compare: a must be a sequence"),
        (lambda: analysis.mean_interval(3.0), "values must be a sequence"),
        (lambda: analysis.stat_deltas(None, stats=[]), "stats must hold at least one item"),
    ],
)
def test_sequences_refuse_scalars_strings_and_empties(call: Any, needle: str) -> None:
    with pytest.raises((TypeError, ValueError), match=needle):
        call()


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: experiment.SpinLock(hold="x").check(2, True), "SpinLock.hold must be an int"),
        (lambda: experiment.IdleTicks(hz=None).check(1, True), "IdleTicks.hz must be an int"),
        (lambda: experiment.PvSpinLock(kick_vector=[]).check(2, True), "kick_vector must be an int"),
        (lambda: analysis.compare([1.0], [2.0], alpha="x"), "alpha must be a number"),
        (lambda: analysis.compare([1.0], [2.0], n_resamples=10**30), "n_resamples must be <="),
        (lambda: analysis.mean_interval([1.0, 2.0], confidence=None), "confidence must be a number"),
        (lambda: plot.sched_map_codes(sim.run(tiny().replace(trace=True)), start_ns=0.5), "start_ns must be an int"),
        (lambda: plot.sched_map_codes(sim.run(tiny().replace(trace=True)), n_pcpus=0), "n_pcpus must be >= 1"),
        (lambda: validate([CASE], seeds=1, duration_scale=1e308), "duration_scale must be <="),
    ],
)
def test_numbers_are_checked_before_use(call: Any, needle: str) -> None:
    with pytest.raises((TypeError, ValueError), match=needle):
        call()


def test_a_sched_map_with_fewer_rows_than_the_trace_names_n_pcpus() -> None:
    res = sim.run(sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=3),), duration_ns=1_000_000, trace=True))
    with pytest.raises(ValueError, match="n_pcpus=1 rows cannot hold"):
        plot.sched_map_codes(res, n_pcpus=1)


# --------------------------------------------------------------------------- messages


def test_messages_name_the_argument() -> None:
    offline = max(os.sched_getaffinity(0)) + 4096  # no machine here has it
    with pytest.raises(ValueError, match="^cpus: host CPU"):
        quality.snapshot([offline])
    with pytest.raises(ValueError, match="^pcpus: host CPUs"):
        experiment.run(experiment.Spin(), vcpus=1, pcpus=[offline], duration_s=0.01)
    with pytest.raises(ValueError, match="^placement: host CPUs"):
        experiment.run(experiment.Spin(), vcpus=1, placement=[[offline]], duration_s=0.01)
    import polars as pl

    df = pl.DataFrame({"policy": ["a", "b"], "seed": [0, 0], "m": [1.0, 2.0]})
    with pytest.raises(ValueError, match="^metric: column 'x'"):
        plot.policy_comparison(df, "x")
    with pytest.raises(ValueError, match="^by: column"):
        plot.policy_comparison(df, "m", by=3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- checked before any work


def test_compare_and_grid_refuse_before_calibrating(monkeypatch: pytest.MonkeyPatch) -> None:
    def no(*a: Any, **k: Any) -> Any:
        raise AssertionError("calibrated (or ran a real trial) before refusing an argument")

    # twin, compare and grid look calibrate up in their own modules of the twins package
    from vcpulab.twins import _grid, _running, _twin

    for mod in (_twin, _running, _grid):
        monkeypatch.setattr(mod, "calibrate", no)
    monkeypatch.setattr(experiment, "run", no)
    exp = twins.Experiment(experiment.SpinLock(), vcpus=1, pcpus=(0,), duration_s=0.02)
    t0 = time.monotonic()
    for bad in (0, "", [], {}):  # falsy: `cal or calibrate()` measured for these
        with pytest.raises(TypeError, match="cal must be a Calibration"):
            twins.compare(exp, cal=bad)
        with pytest.raises(TypeError, match="cal must be a Calibration"):
            twins.grid([exp], cal=bad)
    with pytest.raises(ValueError, match="real must hold at least one item"):
        twins.compare(exp, real=[])
    with pytest.raises(TypeError, match="experiments must be a sequence"):
        twins.grid("x")
    with pytest.raises(TypeError, match="other_load must be a OtherLoad"):
        twins.twin(exp, other_load=0.5)
    assert time.monotonic() - t0 < 1.0


def test_attached_checks_before_looking_for_vcpu_threads(kvm_host: Any) -> None:
    from vcpulab import kvm

    with kvm_host.create_vm(memory_mib=4) as vm:
        vm.create_vcpu(0)
        with kvm.attach(os.getpid()) as a:
            with pytest.raises(TypeError, match="cpus must be a sequence"):
                a.trace(pcpus="0")
            with pytest.raises(ValueError, match="max_events must be >= 1"):
                a.trace(max_events=0)
            t0 = time.monotonic()
            with pytest.raises(ValueError, match="duration_s must be <= 86400"):
                a.sample(duration_s=1e308)  # it slept for ever
            with pytest.raises(TypeError, match="every_s must be a number"):
                a.sample(every_s="x")
            assert time.monotonic() - t0 < 1.0


def test_kvm_objects_refuse_what_they_accepted(kvm_host: Any) -> None:
    with pytest.raises(TypeError, match="irqchip must be a bool"):
        kvm_host.create_vm(memory_mib=4, irqchip=2**63)
    with kvm_host.create_vm(memory_mib=4) as vm:
        vm.halt_poll_ns = np.int64(1000)
        assert vm.halt_poll_ns == 1000
        with pytest.raises(TypeError, match="hlt must be a bool"):
            vm.disable_exits(pause=True, hlt="no")
        c = vm.create_vcpu(0)
        with pytest.raises(ValueError, match="cr8 must be <= 15"):
            c.set_sregs(cr8=2**63)  # KVM drops the reserved bits without a word
        with pytest.raises(TypeError, match="regs must be a Regs or a mapping"):
            c.regs = 5  # type: ignore[assignment]
        with pytest.raises(TypeError, match="values must map MSR indices"):
            c.set_msrs([1])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="MSR index must be an int"):
            c.set_msr([], 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="kind must be a sequence of exit kinds"):
            c.run_until(5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    env.pop("VCPULAB_TRACEBACK", None)
    return subprocess.run(
        [sys.executable, "-m", "vcpulab.cli", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_cli_bounds_threads_and_interval(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text("[config]\nduration_ns = 1_000_000\n")
    r = _cli("sim", str(spec), "--threads", str(2**64), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "--threads" in r.stderr and "at most" in r.stderr, r.stderr
    r = _cli("watch", "1", "--interval-s", "1e308")
    assert r.returncode == 2 and "--interval-s" in r.stderr and "at most" in r.stderr, r.stderr
