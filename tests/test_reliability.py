"""Reliability of the simulator, sweep and CLI APIs (issue 15): no panic,
abort or hang reaches the user, and no silent wrong result.

Anything that could abort the interpreter or hang runs in a subprocess with
a timeout, so a regression fails a test instead of killing pytest.
"""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pytest
from _subproc import ENV, fastest_interrupt, run_py

from vcpulab import sim
from vcpulab._checks import guard_panics
from vcpulab.sim import Config, Host, Vm
from vcpulab.sim import halt_poll as hp

VCPULAB = str(Path(sys.executable).with_name("vcpulab"))


def slow_config(duration_ns: int) -> Config:
    return Config(host=Host(n_pcpus=16), vms=(Vm(vcpus=32),), duration_ns=duration_ns)


# --------------------------------------------------------------------------- Ctrl-C


def test_sweep_ctrl_c_is_prompt_and_keeps_finished_points() -> None:
    # two quick points and two that would take minutes; Ctrl-C once the quick ones are done
    code = """
    from vcpulab import sim
    from vcpulab.sim import Config, Host, Vm
    base = Config(host=Host(n_pcpus=16), vms=(Vm(vcpus=32),))
    pts = [({"n": i}, base.replace(duration_ns=d, seed=i)) for i, d in enumerate([1_000_000, 1_000_000, 10**11, 10**11])]
    print("READY", flush=True)
    try:
        sim.sweep(pts, threads=4, progress=False)
        print("FINISHED")
    except KeyboardInterrupt as e:
        print("KI", sorted(e.partial["n"].to_list()))
    """

    def check(out: str, err: str) -> None:
        assert "KI [0, 1]" in out, (out, err)  # the finished points are kept
        assert "PanicException" not in err

    dt = fastest_interrupt(code, 2.0, check)
    assert dt < 1.0, f"the sweep took {dt:.2f} s to stop after Ctrl-C"


def test_checkpointed_sweep_ctrl_c_stops_running_points(tmp_path: Path) -> None:
    code = f"""
    from vcpulab import sim
    from vcpulab.sim import Config, Host, Vm
    base = Config(host=Host(n_pcpus=16), vms=(Vm(vcpus=32),))
    pts = [({{"n": i}}, base.replace(duration_ns=d, seed=i)) for i, d in enumerate([1_000_000, 10**11, 10**11])]
    print("READY", flush=True)
    try:
        sim.sweep(pts, threads=3, progress=False, out={str(tmp_path)!r})
    except KeyboardInterrupt:
        print("KI", flush=True)
    """

    def check(out: str, err: str) -> None:
        assert "KI" in out, (out, err)
        assert len(list(tmp_path.glob("*.parquet"))) == 1  # the finished point is on disk

    dt = fastest_interrupt(code, 2.0, check)
    # the process exits only when its pool threads end: the running points were stopped
    assert dt < 1.5, f"the process took {dt:.2f} s to exit after Ctrl-C"


def test_halt_poll_model_ctrl_c() -> None:
    code = """
    from vcpulab.sim import halt_poll as hp
    print("READY", flush=True)
    for f in (lambda: hp.run(hp.Scenario(rounds=50_000_000)),
              lambda: hp.sweep([hp.Scenario(rounds=50_000_000, seed=s) for s in range(2)])):
        try:
            f()
        except KeyboardInterrupt:
            print("KI", flush=True)
            break
    """

    def check(out: str, err: str) -> None:
        assert "KI" in out, (out, err)

    assert fastest_interrupt(code, 0.5, check) < 1.0


def test_daemon_thread_inside_sim_at_exit_is_clean() -> None:
    p = run_py("""
    import threading, time
    from vcpulab import sim
    cfg = sim.Config(host=sim.Host(n_pcpus=16), vms=(sim.Vm(vcpus=32),), duration_ns=2_000_000_000)
    threading.Thread(target=lambda: sim.run(cfg), daemon=True).start()
    threading.Thread(target=lambda: sim.sweep(cfg, {"seed": [0, 1]}, progress=False), daemon=True).start()
    time.sleep(0.3)
    """)
    assert p.returncode == 0, p.stderr


# --------------------------------------------------------------------------- limits


def test_sweep_threads_bounded() -> None:
    with pytest.raises(ValueError, match="threads must be at most"):
        sim.sweep(Config(duration_ns=100_000), {"seed": [0, 1]}, threads=10_000, progress=False)
    with pytest.raises(ValueError, match="threads"):
        sim.sweep(Config(duration_ns=100_000), {"seed": [0]}, threads=0, progress=False)


def test_trace_limit_names_the_option() -> None:
    cfg = Config(host=Host(n_pcpus=4), vms=(Vm(vcpus=8),), duration_ns=5_000_000, trace=True)
    full = sim.run(cfg)
    assert full.trace is not None and full.trace.height > 100
    # a limit above the trace's size changes nothing
    same = sim.run(cfg, trace_max_rows=full.trace.height)
    assert same.trace is not None and same.trace.equals(full.trace)
    with pytest.raises(ValueError, match="trace_max_rows=100 "):
        sim.run(cfg, trace_max_rows=100)
    with pytest.raises(ValueError, match="trace_max_rows"):
        sim.sweep(cfg, {"seed": [0, 1]}, trace_max_rows=100, progress=False)
    with pytest.raises(ValueError, match="trace_max_rows"):
        sim.run(cfg, trace_max_rows=0)


@pytest.mark.parametrize("limit_mb", [650, 900])
def test_trace_under_memory_pressure_never_aborts(limit_mb: int) -> None:
    # an address-space limit stands in for a full machine: a clear error, never
    # SIGABRT. The run's 5.7 M rows take 29 bytes each, the process ~535 MB of
    # address space before it: at 650 MB the trace's own growth fails (at 4.2 M
    # rows, 600-700 MB measured); at 900 MB the trace fits and turning it into
    # a frame must fail cleanly (800-1,600 MB measured: polars, which aborts
    # when an allocation fails, maps ~500 MB for its threads at its first
    # parallel step)
    p = run_py(
        f"""
    import resource
    from vcpulab import sim
    from vcpulab.sim import scenarios
    resource.setrlimit(resource.RLIMIT_AS, ({limit_mb} << 20, {limit_mb} << 20))
    cfg = scenarios.sched_map_2012(8, 20, duration_ns=500_000_000, warmup_ns=0).replace(trace=True)
    try:
        print("rows", sim.run(cfg, trace_max_rows=None).trace.height)
    except MemoryError as e:
        print("raised", type(e).__name__, e)
    """,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "raised MemoryError" in p.stdout and "trace_max_rows" in p.stdout, p.stdout


def test_sweep_points_bounded() -> None:
    # a grid is refused up front when its product (or one axis, even a
    # generator) passes max_points, naming the size and how to lift the bound
    base = Config(duration_ns=100_000)
    grid = {"seed": list(range(1000)), "host.tick_ns": [1_000_000 + i for i in range(1000)]}
    with pytest.raises(
        ValueError, match=r"1000000 \(1000 x 1000\) points, more than max_points=100000.*max_points=None"
    ):
        sim.sweep(base, grid, progress=False)
    endless = (s for s in iter(int, 1))  # a generator that never ends
    with pytest.raises(ValueError, match="axis 'seed' alone has more than 10 points"):
        sim.sweep(base, {"seed": endless}, progress=False, max_points=10)
    with pytest.raises(ValueError, match="list of points has 3 points, more than max_points=2"):
        sim.sweep([base] * 3, progress=False, max_points=2)
    with pytest.raises(ValueError, match="max_points must be"):
        sim.sweep(base, {"seed": [0]}, progress=False, max_points=0)
    with pytest.raises(ValueError, match="max_points=4"):
        sim.run_sweep(base, {"seed": range(5)}, out=None, executor=None, progress=False, max_points=4)
    assert sim.sweep(base, {"seed": range(3)}, progress=False, max_points=3).height == 3
    assert sim.sweep(base, {"seed": range(3)}, progress=False, max_points=None).height == 3


# --------------------------------------------------------------------------- silent wrong results


def test_with_path_refuses_negative_index() -> None:
    c = Config(vms=(Vm(vcpus=4), Vm(vcpus=8)))
    with pytest.raises(ValueError, match="-1"):
        c.with_path("vms.-1.vcpus", 2)
    with pytest.raises(ValueError):
        sim.sweep(c, {"vms.-1.count": [1, 2]}, progress=False)
    assert [v.vcpus for v in c.with_path("vms.1.vcpus", 2).vms] == [4, 2]


class _Counting:
    """A stateful policy that counts its deep copies (class-level)."""

    copies = 0

    def __init__(self) -> None:
        self.calls = 0

    def __deepcopy__(self, memo: dict[int, object]) -> _Counting:
        type(self).copies += 1
        n = _Counting()
        n.calls = self.calls
        return n

    def __call__(self, spinner, cands):  # type: ignore[no-untyped-def]
        self.calls += 1
        # state-dependent choice: a leak of state between runs changes results
        return cands[self.calls % len(cands)].index if cands else None


def _policy_cfg(fn: object, count: int = 3) -> Config:
    pol = sim.policies.python(fn, name="counting")  # type: ignore[arg-type]
    return Config(host=Host(n_pcpus=2), vms=(Vm(vcpus=4, count=count, policy=pol),), duration_ns=20_000_000)


def test_python_policy_one_copy_per_run_and_deterministic() -> None:
    fn = _Counting()
    cfg = _policy_cfg(fn)
    _Counting.copies = 0
    a = sim.run(cfg).summary
    assert _Counting.copies == 1  # one copy for the run, not one per VM
    b = sim.run(cfg).summary
    assert a.equals(b)  # the same seed gives the same result
    assert fn.calls == 0  # the caller's object is never mutated
    df = sim.sweep(cfg, {"host.n_pcpus": [2, 2, 2]}, progress=False)
    assert df["ops"].n_unique() == 1


def test_uncopyable_python_policy_is_refused() -> None:
    class Locked(_Counting):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

        def __deepcopy__(self, memo):  # type: ignore[no-untyped-def]
            return copy.deepcopy(self.lock)  # raises TypeError

    with pytest.raises(ValueError, match="cannot be deep-copied"):
        sim.run(_policy_cfg(Locked()))


def test_config_from_json_wrong_shapes_name_the_field() -> None:
    cases = {
        '{"vms": 5}': "Config.vms",
        '{"vms": null}': "Config.vms",
        '{"vms": [{"workload": {"phases": 5}}]}': "Workload.phases",
        '{"vms": [{"workload": {"phases": "compute"}}]}': "Workload.phases",
        '{"vms": [{"workload": {"phases": [{"kind": "compute"}]}}]}': "ns",
    }
    for text, name in cases.items():
        with pytest.raises(ValueError, match=name):
            Config.from_json(text)


def test_halt_poll_fast_background_runs() -> None:
    # 100 rounds: ~10^7 background events, ten times the old budget that called this a bug
    r = hp.run(hp.Scenario(background=hp.Background(busy_ns=1, idle_ns=1), rounds=100))
    assert r.end_ns > 0


# --------------------------------------------------------------------------- panics


def test_panic_guard_turns_panics_into_runtime_error() -> None:
    panic = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})

    @guard_panics
    class C:
        def boom(self) -> None:
            raise panic("index out of bounds")

        @property
        def prop(self) -> int:
            raise panic("overflow")

        def fine(self) -> int:
            return 3

    with pytest.raises(RuntimeError, match="bug.*index out of bounds"):
        C().boom()
    with pytest.raises(RuntimeError, match="overflow"):
        C().prop  # noqa: B018
    assert C().fine() == 3

    @guard_panics
    def f() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        f()


def test_a_ctrl_c_that_a_rust_extension_unwrapped_stays_a_ctrl_c() -> None:
    """A fresh-clone CI run (2026-12-06) sent SIGINT to a twins grid while
    polars, building a frame's ``pl.Enum`` dtype through Python, unwrapped the
    ``KeyboardInterrupt``: polars panicked, the guard made the panic a
    ``RuntimeError``, the grid recorded its cell as failed and ran on, and the
    Ctrl-C was lost. The guard raises such a panic as ``KeyboardInterrupt``
    (from the panic); any other panic stays a ``RuntimeError``."""
    from polars.exceptions import PanicException  # pyo3_runtime.PanicException, as polars raises it

    msg = (
        "called `Result::unwrap()` on an `Err` value: PyErr { type: <class 'KeyboardInterrupt'>, "
        'value: KeyboardInterrupt(), traceback: Some("Traceback (most recent call last):") }'
    )

    @guard_panics
    def frames() -> None:
        raise PanicException(msg)

    with pytest.raises(KeyboardInterrupt) as info:
        frames()
    assert isinstance(info.value.__cause__, PanicException)

    @guard_panics
    def other() -> None:
        # a traceback that merely mentions an interrupt elsewhere is still a bug
        raise PanicException("index out of bounds; traceback: ... KeyboardInterrupt() ...")

    with pytest.raises(RuntimeError, match="bug"):
        other()


# --------------------------------------------------------------------------- datasets and executors


def test_disk_full_gives_oserror_naming_the_file(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes writes fail (EFBIG) the way a full disk does (ENOSPC)
    p = run_py(f"""
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from vcpulab import sim
    from vcpulab.sim import Config, Host, Vm
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
    try:
        sim.sweep(Config(host=Host(n_pcpus=2), vms=(Vm(vcpus=4),), duration_ns=1_000_000), {{"seed": [0, 1]}},
                  out={str(tmp_path)!r}, progress=False, threads=1)
    except OSError as e:
        print("OSError", e.errno, e.filename)
    """)
    assert "OSError 27" in p.stdout, p.stdout + p.stderr
    assert str(tmp_path) in p.stdout
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind


def test_process_pool_losing_a_worker_records_failed_points(tmp_path: Path) -> None:
    p = run_py(
        f"""
    import concurrent.futures as cf, os, pathlib, signal, threading, time
    from vcpulab import sim
    from vcpulab.sim import Config, Host, Vm
    base = Config(host=Host(n_pcpus=8), vms=(Vm(vcpus=16),), duration_ns=100_000_000)
    ex = cf.ProcessPoolExecutor(max_workers=2)
    list(ex.map(abs, [1, 2]))
    victim = list(ex._processes)[0]
    out = pathlib.Path({str(tmp_path)!r})
    def kill_when_the_sweep_is_under_way():
        # kill once the first point is on disk: the sweep has started and most points are still to come,
        # however loaded the machine is (a fixed delay could fire before the first task or after the last)
        while not list(out.glob("*.parquet")):
            time.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
    threading.Thread(target=kill_when_the_sweep_is_under_way, daemon=True).start()
    df = sim.sweep(base, {{"seed": list(range(12))}}, executor=ex, out={str(tmp_path)!r}, progress=False)
    print("ROWS", df.height, "FAILED", df["error"].drop_nulls().str.contains("BrokenProcessPool").sum())
    """,
        timeout=120,
    )
    assert "ROWS 12" in p.stdout, p.stdout + p.stderr[-2000:]
    failed = int(p.stdout.split("FAILED")[1])
    assert failed >= 1
    # the rerun with a new executor computes the failed points
    df = sim.sweep(
        Config(host=Host(n_pcpus=8), vms=(Vm(vcpus=16),), duration_ns=100_000_000),
        {"seed": list(range(12))},
        out=tmp_path,
        progress=False,
        threads=2,
    )
    assert df["error"].null_count() == 12


# --------------------------------------------------------------------------- CLI


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VCPULAB, *args], capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("[config]\nvms = 5\n", "config.vms"),
        ("config = 5\n", "config must be a table"),
        (b"\xff\xfe\x00", "not a text"),
        ("[config]\nduration_ns = 1_000_000\n[output]\nus_per_pixel = 'x'\n", "us_per_pixel"),
        ("[config]\nduration_ns = 1_000_000\n[grid]\n'vms.-1.count' = [1, 2]\n", "-1"),
        ("[config]\nduration_ns = -5\n", "duration_ns"),
        ("[config]\nseed = 'x'\n", "seed"),
    ],
)
def test_cli_bad_spec_one_line(tmp_path: Path, spec: str | bytes, needle: str) -> None:
    f = tmp_path / "s.toml"
    f.write_bytes(spec if isinstance(spec, bytes) else spec.encode())
    p = cli("sim", str(f), "--out", str(tmp_path / "o"), "--quiet")
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert needle in p.stderr


def test_cli_bad_arguments_one_line(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text("[config]\nduration_ns = 1_000_000\n")
    for args in (
        ["kvm", "steal", "--seconds", "inf"],
        ["kvm", "steal", "--seconds", "nan"],
        ["sim", str(f), "--dask", "tcp://127.0.0.1:1"],
    ):
        p = cli(*args)
        assert p.returncode != 0, args
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)


def test_cli_out_holds_one_run_only(tmp_path: Path) -> None:
    a, b, out = tmp_path / "a.toml", tmp_path / "b.toml", tmp_path / "out"
    a.write_text("[config]\nduration_ns = 2_000_000\ntrace = true\n[config.host]\nn_pcpus = 2\n")
    b.write_text("[config]\nduration_ns = 2_000_000\n[config.host]\nn_pcpus = 8\n")
    assert cli("sim", str(a), "--out", str(out)).returncode == 0
    assert (out / "trace.parquet").exists() and (out / "sched_map.png").exists()
    assert cli("sim", str(b), "--out", str(out)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".vcpulab-outputs.json",
        "pcpus.parquet",
        "summary.parquet",
        "vcpus.parquet",
        "vms.parquet",
    ]
    assert pl.read_parquet(out / "summary.parquet")["n_pcpus"][0] == 8


def test_cli_closed_pipe(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text("[config]\nduration_ns = 1_000_000\n")
    p = subprocess.Popen(
        [VCPULAB, "sim", str(f), "--out", str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the command prints
    with p.stderr:
        err = p.stderr.read().decode()
    rc = p.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc != 0


# --------------------------------------------------------------------------- misc


def test_results_pickle_and_configs_copy() -> None:
    # plain data still copies and pickles (only kernel-resource owners refuse)
    cfg = Config(duration_ns=1_000_000)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert copy.deepcopy(cfg) == cfg
    json.loads(cfg.to_json())
