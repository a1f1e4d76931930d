"""The one interruption contract (vcpulab._interrupt): Ctrl-C during any long
call raises KeyboardInterrupt within about a second, and the work that had
finished is on the exception as ``e.partial``, in the call's own shape.

Each test runs the call in a child process and sends SIGINT at a random
moment after the child says READY (the seed is in the test id; a failure
replays with ``VCPULAB_INTERRUPT_SEED=<seed>``). The child stamps CLOCK_MONOTONIC (shared by the processes)
when the KeyboardInterrupt reaches it, so the latency excludes the child's
exit. The bound asserted is 1.5 s: the contract is 1 s, and a loaded 2-CPU
machine may delay the signal's delivery or the child's wake-up; the measured
latencies are printed (-s) and are typically 0.05-0.3 s here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from _subproc import ENV

#: the most a KeyboardInterrupt may take to reach the caller after SIGINT, s
#: (the contract's 1 s, plus the delivery delays of a loaded 2-CPU machine)
LATE_S = 1.5

PRELUDE = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import logging
logging.disable(logging.WARNING)

def describe(p):
    import polars as pl
    if p is None:
        return {"type": "None"}
    if isinstance(p, pl.DataFrame):
        return {"type": "DataFrame", "rows": p.height, "columns": p.columns}
    if isinstance(p, list):
        return {"type": "list", "len": len(p), "of": sorted({type(x).__name__ for x in p})}
    d = {"type": type(p).__name__}
    for a in ("runs", "cells", "real_runs"):
        if hasattr(p, a):
            v = getattr(p, a)
            d[a] = v.height if hasattr(v, "height") else len(v)
    return d

def main(call):
    print("READY", flush=True)
    try:
        call()
    except KeyboardInterrupt as e:
        caught = time.monotonic()
        print(json.dumps({"caught": caught, "partial": describe(getattr(e, "partial", None))}), flush=True)
        return
    print(json.dumps({"caught": None}), flush=True)
"""


def interrupt(code: str, delay_s: float, timeout_s: float = 120) -> tuple[float, dict[str, Any], str]:
    """Run PRELUDE + ``code`` (which calls ``main(lambda: ...)``), SIGINT
    ``delay_s`` after READY; (latency s, the child's report, its stderr)."""
    p = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert p.stdout is not None and p.stderr is not None
        line = p.stdout.readline()
        assert line.strip() == "READY", (line, p.stderr.read())
        time.sleep(delay_s)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=timeout_s)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        # a failed read leaves the pipes open: close them here, not in a later test's gc
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()
    assert p.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["caught"] is not None, f"the call finished before the interrupt (raise its length): {err[-500:]}"
    return report["caught"] - sent, report["partial"], err


def _delay(seed: int, lo: float, hi: float) -> float:
    return random.Random(seed).uniform(lo, hi)


#: one random moment per call and test session (VCPULAB_INTERRUPT_SEED=N replays one): five runs of the suite
#: try five moments of each call
SEEDS = [int(os.environ.get("VCPULAB_INTERRUPT_SEED", random.SystemRandom().randrange(1 << 30)))]


@pytest.mark.parametrize("seed", SEEDS)
def test_sim_sweep(seed: int) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import sim
    base = sim.Config(host=sim.Host(n_pcpus=4), vms=(sim.Vm(vcpus=8),), duration_ns=40_000_000)
    cfgs = [base.replace(seed=s) for s in range(3000)]
    main(lambda: sim.sweep(cfgs, progress=False))
    """,
        _delay(seed, 0.3, 1.5),
    )
    print(f"sim.sweep: {late:.3f} s, {partial}")
    assert late < LATE_S
    # (a moment before the first point ran keeps an empty frame)
    assert partial["type"] == "DataFrame" and partial["rows"] < 3000
    assert partial["rows"] == 0 or "config_hash" in partial["columns"]


@pytest.mark.parametrize("seed", SEEDS)
def test_sim_run(seed: int) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import sim
    from vcpulab.sim import scenarios
    main(lambda: sim.run(scenarios.sched_map_2012(8, 20, duration_ns=10_000_000_000, warmup_ns=0)))
    """,
        _delay(seed, 0.1, 1.0),
    )
    print(f"sim.run: {late:.3f} s, {partial}")
    assert late < LATE_S and partial["type"] == "None"  # one run: nothing had finished


@pytest.mark.parametrize("seed", SEEDS)
def test_validate(seed: int) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import validation
    main(lambda: validation.validate(seeds=5))
    """,
        _delay(seed, 0.5, 3.0),
    )
    print(f"validation.validate: {late:.3f} s, {partial}")
    assert late < LATE_S
    assert partial["type"] == "DataFrame" and "case" in partial["columns"] and "sim_mean" in partial["columns"]


@pytest.mark.parametrize("seed", SEEDS)
def test_sensitivity(seed: int) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab.validation import sensitivity as S
    main(lambda: S.sensitivity(["ple2012_ebizzy_1x", "ple2012_kernbench_1x"], seeds=2, duration_scale=0.5))
    """,
        _delay(seed, 0.5, 2.5),
    )
    print(f"validation.sensitivity: {late:.3f} s, {partial}")
    assert late < LATE_S
    assert partial["type"] == "DataFrame" and "param" in partial["columns"]


@pytest.mark.parametrize("seed", SEEDS)
def test_experiment_run(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab.experiment import SpinLock, run
    main(lambda: run(SpinLock(kind="ticket"), vcpus=2, pcpus=[0], duration_s=30))
    """,
        _delay(seed, 0.2, 1.0),
    )
    print(f"experiment.run: {late:.3f} s, {partial}")
    assert late < LATE_S and partial["type"] == "None"


@pytest.mark.parametrize("seed", SEEDS)
def test_experiment_run_repeat(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab.experiment import Spin, run
    main(lambda: run(Spin(), vcpus=1, pcpus=[0], duration_s=0.2, repeat=100))
    """,
        _delay(seed, 0.6, 1.5),
    )
    print(f"experiment.run(repeat=100): {late:.3f} s, {partial}")
    assert late < LATE_S
    # a moment inside the first trial leaves nothing (None); later ones keep the trials
    assert partial["type"] == "None" or (partial["type"] == "Trials" and 1 <= partial["runs"] < 100)


@pytest.mark.parametrize("seed", SEEDS)
def test_calibrate_halt_poll(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import calibrate
    main(lambda: calibrate.halt_poll(gaps_us=[300, 1000], max_poll_ns=[0, 200000], min_cell_s=0.4,
                                     sim_replicas=1, warn_quality=False))
    """,
        _delay(seed, 0.1, 1.5),
    )
    print(f"calibrate.halt_poll: {late:.3f} s, {partial}")
    assert late < LATE_S
    assert partial["type"] == "DataFrame" and partial["rows"] < 4


@pytest.mark.parametrize("seed", SEEDS)
def test_twins_compare(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import twins
    from vcpulab.experiment import Spin
    cal = twins.reference_calibration()  # the interrupt is the subject: no need to measure (~10 s)
    main(lambda: twins.compare(twins.Experiment(Spin(), 2, (0,), duration_s=0.2), trials=50, seeds=1, cal=cal))
    """,
        _delay(seed, 0.3, 1.5),
    )
    print(f"twins.compare: {late:.3f} s, {partial}")
    assert late < LATE_S
    assert partial["type"] == "list" and partial["len"] < 50 and set(partial["of"]) <= {"Run"}


@pytest.mark.parametrize("seed", SEEDS)
def test_twins_grid(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import twins
    from vcpulab.experiment import Spin
    cal = twins.reference_calibration()  # the interrupt is the subject: no need to measure (~10 s)
    cells = [twins.Experiment(Spin(), v, (0,), duration_s=0.2) for v in (1, 2, 3, 4)] * 5
    main(lambda: twins.grid(cells, trials=1, seeds=1, cal=cal, interleave=False))
    """,
        _delay(seed, 0.5, 2.0),
    )
    print(f"twins.grid: {late:.3f} s, {partial}")
    assert late < LATE_S
    assert partial["type"] == "Grid" and partial["cells"] >= 0


@pytest.mark.parametrize("seed", SEEDS)
def test_twins_grid_interleaved(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import twins
    from vcpulab.experiment import Spin
    cal = twins.reference_calibration()  # the interrupt is the subject: no need to measure (~10 s)
    cells = [twins.Experiment(Spin(), v, (0,), duration_s=0.2) for v in (1, 2, 3, 4)]
    main(lambda: twins.grid(cells, trials=10, seeds=1, cal=cal, interleave=True))
    """,
        _delay(seed, 0.5, 2.0),
    )
    print(f"twins.grid(interleave=True): {late:.3f} s, {partial}")
    assert late < LATE_S
    # interrupted in its real trials: no cell compared yet, every cell's runs so far kept
    assert partial["type"] == "Grid" and partial["cells"] == 0 and partial["real_runs"] == 4


@pytest.mark.parametrize("seed", SEEDS)
def test_experiment_run_under_vcpulabs_scheduler(seed: int, kvm_host: Any) -> None:
    late, partial, _ = interrupt(
        """
    from vcpulab import sched
    from vcpulab.experiment import SpinLock, run
    from vcpulab.sim import policies as P
    main(lambda: run(SpinLock(kind="ticket"), vcpus=3, pcpus=[0], duration_s=30,
                     scheduler=sched.directed_yield(P.dy_eligible())))
    """,
        _delay(seed, 0.2, 1.0),
    )
    print(f"experiment.run(scheduler=directed_yield): {late:.3f} s, {partial}")
    assert late < LATE_S and partial["type"] == "None"


# a VMM that ran a vCPU once and then waits (its vCPU thread stays alive for watch to sample)
_VMM = """
import time
from vcpulab.kvm import Host
vm = Host().create_vm(memory_mib=4); v = vm.create_vcpu(0)
v.start(vm.load("pause_loop", iterations=10)); v.run_program(timeout_s=30)
print("ready", flush=True); time.sleep(120)
"""


@pytest.mark.parametrize("seed", SEEDS)
def test_vcpulab_watch(seed: int, kvm_host: Any, tmp_path: Any) -> None:
    """`vcpulab watch PID --parquet F`: Ctrl-C ends it (status 0) and F holds
    every sample it had taken, the ones it printed (and at most one taken but
    not yet printed). The latency is to the process's exit, parquet written."""
    import polars as pl

    target = subprocess.Popen([sys.executable, "-c", _VMM], stdout=subprocess.PIPE, text=True, env=ENV)
    w = None
    out_file = tmp_path / "watch.parquet"
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        w = subprocess.Popen(
            [sys.executable, "-m", "vcpulab.cli", "watch", str(target.pid), "--interval-s", "0.1"]
            + ["--parquet", str(out_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV, "PYTHONUNBUFFERED": "1"},
        )
        assert w.stdout is not None
        assert w.stdout.readline().startswith(f"watching pid {target.pid}")
        time.sleep(_delay(seed, 0.1, 1.5))
        sent = time.monotonic()
        w.send_signal(signal.SIGINT)
        out, err = w.communicate(timeout=60)
        late = time.monotonic() - sent
    finally:
        for p in (w, target):
            if p is not None:
                if p.poll() is None:
                    p.kill()
                p.communicate(timeout=30)
    tables = sum(1 for line in out.splitlines() if line.startswith("-- ") and "exited" not in line)
    print(f"vcpulab watch: {late:.3f} s to exit, {tables} tables printed")
    assert w.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert late < LATE_S + 1.0  # + the parquet write and the interpreter's exit
    if tables == 0 and not out_file.exists():
        return  # interrupted before its first sample: nothing to keep, and nothing written
    assert f"wrote {out_file}" in out, out
    samples = pl.read_parquet(out_file)["t_ns"].n_unique()
    assert tables <= samples <= tables + 1, (tables, samples)


_ONE_CTRL_C = """
import os, signal, threading, time
import polars as pl
from vcpulab._interrupt import sigint_to_python
took = sigint_to_python()
df = pl.DataFrame({"a": pl.int_range(0, 2_000_000, eager=True).shuffle(seed=1)}).with_row_index("b")
raised = []
threading.Timer(0.15, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
for step in ("queries", "the except clause's aftermath"):
    try:
        if step == "queries":  # ~0.3 s each here: SIGINT lands inside one of them
            for _ in range(10):
                df.join(df, on="a").sort("b")
        else:
            for _ in range(30):
                time.sleep(0.01)
    except KeyboardInterrupt:
        raised.append(step)
        print("raised in", step, round(time.monotonic() - t0, 3), flush=True)
print(json.dumps({"took": took, "raised": raised}), flush=True)
"""


def test_one_ctrl_c_inside_a_polars_query_raises_once() -> None:
    """polars hooks SIGINT and raises KeyboardInterrupt from the query the
    signal lands in, while Python's handler stays pending and raises again at
    the next line (pola-rs/polars#23988): `vcpulab watch` exited 130 instead of
    writing its parquet when Ctrl-C landed in a polars join. After
    `_interrupt.sigint_to_python()` (what the CLI runs first) one Ctrl-C is one
    KeyboardInterrupt, raised in the loop it landed in and not again after."""
    p = subprocess.run(
        [sys.executable, "-c", "import json\n" + _ONE_CTRL_C], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report == {"took": True, "raised": ["queries"]}, p.stdout


_HELD = """
import json, os, signal, threading, time
from vcpulab._interrupt import held
out = {}
try:
    with held():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the signal is in: nothing is raised here
        out["block_ended"] = True
except KeyboardInterrupt:
    out["raised_after"] = True
out["handler_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
try:
    with held():
        pass
    out["quiet_block_raises_nothing"] = True
except KeyboardInterrupt:
    out["quiet_block_raises_nothing"] = False
seen = []
def other():
    with held():  # not the main thread: nothing to hold, nothing installed
        seen.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
t = threading.Thread(target=other); t.start(); t.join()
out["thread_untouched"] = seen == [True]
print(json.dumps(out), flush=True)
"""


def test_held_raises_a_ctrl_c_of_the_block_after_it() -> None:
    """`_interrupt.held()`, around the frames of a finished run: a KeyboardInterrupt
    raised inside polars' callbacks into Python comes out as a TypeError
    (measured: experiment.run's samples frame), so a SIGINT in the block is
    raised as it ends; the default handler is back after it."""
    p = subprocess.run([sys.executable, "-c", _HELD], capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {
        "block_ended": True,
        "raised_after": True,
        "handler_back": True,
        "quiet_block_raises_nothing": True,
        "thread_untouched": True,
    }
