"""vcpulab.sim.sweep on an executor (a Dask LocalCluster on loopback, or a
thread pool), checkpointed to a Parquet dataset: equality with the local
rayon sweep, a worker killed mid-sweep, Ctrl-C and resume, corrupt files.

The frames of a distributed sweep have four more columns than the local
sweep's (``EXTRA_COLUMNS``: error, config_json, vcpulab_version,
point_hash); comparisons drop exactly those — the local sweep has no such
columns — and compare everything else, dtypes and row order included.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal as _assert_frame_equal

import vcpulab
from vcpulab import sim
from vcpulab.sim import policies as P
from vcpulab.sim._distributed import EXTRA_COLUMNS, point_hash, read_dataset, run_sweep

# ------------------------------------------------------------------ helpers


def same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """Equal frames: columns, dtypes, row order and every value, floats bit for bit."""
    _assert_frame_equal(a, b, check_exact=True)


def base(duration_ns: int = 2_000_000) -> sim.Config:
    """Overcommitted and tiny: 2 VMs × 2 vCPUs on 2 host CPUs."""
    return sim.Config(host=sim.Host(n_pcpus=2), vms=(sim.Vm(vcpus=2, count=2),), duration_ns=duration_ns, seed=1)


# 5 policies (one written in Python) × 2 host sizes × 4 seeds = 40 points
GRID = {
    "vms.0.policy": [P.upstream(), P.dy_eligible(), P.random(), P.oracle(), P.python(P.DyEligibleInPython())],
    "host.n_pcpus": [1, 2],
    "seed": [1, 2, 3, 4],
}
N = 40


def local(cfg: sim.Config, grid: dict[str, list[Any]]) -> pl.DataFrame:
    return sim.sweep(cfg, grid, threads=2, progress=False)


def files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_file())


def expected_keys(cfg: sim.Config, grid: dict[str, list[Any]]) -> set[str]:
    from vcpulab.sim._distributed import expand

    return {point_hash(p, c) for p, c in expand(cfg, grid)}


class Counting(cf.Executor):
    """Wraps an executor; counts the points submitted (and which), and can
    call ``hook()`` just before the ``at``-th submission (0-based), or just
    after it (``hook_after``)."""

    def __init__(
        self,
        inner: cf.Executor,
        at: int | None = None,
        hook: Callable[[], None] | None = None,
        hook_after: bool = False,
    ) -> None:
        self.inner, self.at, self.hook, self.hook_after = inner, at, hook, hook_after
        self.submissions = 0
        self.points: list[str] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        hook = self.hook if self.hook is not None and self.submissions == self.at else None
        if hook is not None and not self.hook_after:
            hook()
        self.submissions += 1
        batch = args[0]
        self.points += [key for key, _json, _policies in batch]
        fut = self.inner.submit(fn, *args, **kwargs)
        if hook is not None and self.hook_after:
            hook()
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # the inner executor belongs to the test


@contextlib.contextmanager
def _cluster(**config: Any) -> Iterator[Any]:
    """A LocalCluster on loopback, 2 worker processes × 1 thread, and its
    client; both always closed."""
    # Not skipped when missing: the test extra installs dask[distributed].
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set(config):
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # Even without a dashboard the scheduler serves /health on port 8787
            # by default: a random loopback port lets two clusters coexist.
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        )
        try:
            client = Client(cluster)
            try:
                yield client
            finally:
                client.close()
        finally:
            cluster.close()


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with _cluster() as c:
        yield c


# ------------------------------------------------------------------ equality


def test_dask_sweep_of_40_points_equals_the_local_rayon_sweep(client, tmp_path):
    ref = local(base(), GRID)
    assert ref.height == N
    out = tmp_path / "ds"
    df = sim.sweep(base(), GRID, executor=client.get_executor(), out=out, progress=True)
    assert df.columns == ref.columns + list(EXTRA_COLUMNS)
    same(df.drop(EXTRA_COLUMNS), ref)
    assert df["error"].null_count() == N
    assert (df["vcpulab_version"] == vcpulab.__version__).all()
    assert [sim.Config.from_json(j).config_hash() for j in df["config_json"]] == df["config_hash"].to_list()
    # one file per point, named by its point hash, no temporary file left
    names = {p.name for p in files(out)}
    assert names == {f"{k}.parquet" for k in expected_keys(base(), GRID)}
    assert set(df["point_hash"]) == {n.removesuffix(".parquet") for n in names}
    # the dataset on its own holds the same rows (in file-name order)
    same(read_dataset(out).sort("point_hash"), df.sort("point_hash"))
    # without out: the same frame, built in memory
    same(sim.sweep(base(), GRID, executor=client.get_executor(), progress=False), df)


def test_checkpointed_thread_pool_sweep_equals_the_local_sweep(tmp_path):
    ref = local(base(), GRID)
    df = sim.sweep(base(), GRID, out=tmp_path, threads=2, progress=False)
    same(df.drop(EXTRA_COLUMNS), ref)
    # a list of configs: a "point" column, like the local sweep
    cfgs = [base().replace(seed=s) for s in (5, 6, 7)]
    lst = sim.sweep(cfgs, out=tmp_path / "list", progress=False)
    same(lst.drop(EXTRA_COLUMNS), sim.sweep(cfgs, progress=False))
    assert lst["point"].to_list() == [0, 1, 2]


def test_without_executor_or_out_the_sweep_is_the_local_one():
    ref = local(base(), {"seed": [1, 2]})
    assert "error" not in ref.columns
    same(run_sweep(base(), {"seed": [1, 2]}, progress=False, threads=2), ref)


def test_bad_arguments_raise_valueerror(tmp_path):
    with pytest.raises(ValueError, match="results=True is not available"):
        sim.sweep(base(), {"seed": [1]}, out=tmp_path, results=True)
    with pytest.raises(TypeError, match="executor must be a concurrent.futures.Executor"):
        sim.sweep(base(), {"seed": [1]}, executor=object())
    with pytest.raises(ValueError, match="batch_size"):
        run_sweep(base(), {"seed": [1]}, out=tmp_path, batch_size=0)
    with pytest.raises(ValueError, match="parameter 'x'"):
        sim.sweep([({"x": object()}, base())], out=tmp_path)


def test_point_hash_is_stable_across_processes_and_includes_params():
    cfg = base()
    h = point_hash({"seed": 1, "p": "upstream"}, cfg)
    # another interpreter, another string-hash salt: the same names
    code = (
        "from vcpulab import sim; from vcpulab.sim._distributed import point_hash; "
        f"c = sim.Config.from_json({cfg.to_json()!r}); "
        "print(c.config_hash(), point_hash({'p': 'upstream', 'seed': 1}, c))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60)
    assert got.stdout.split() == [cfg.config_hash(), h]
    h = point_hash({"seed": 1}, cfg)
    assert h == point_hash({"seed": 1}, sim.Config.from_json(cfg.to_json()))
    assert h != point_hash({"seed": 2}, cfg)
    assert h != point_hash({"seed": 1}, cfg.replace(seed=2))
    assert len(h) == 64 and set(h) <= set("0123456789abcdef")  # SHA-256, in hex


# ------------------------------------------------------------------ a dead worker


@pytest.mark.parametrize(
    "allowed_failures",
    [
        pytest.param(3, id="dask-reschedules"),  # Dask's default: the scheduler reruns the lost tasks
        pytest.param(0, id="vcpulab-resubmits"),  # the lost tasks raise KilledWorker; vcpulab resubmits them
    ],
)
@pytest.mark.slow  # ~6.5 s each, a worker process killed mid-sweep: the slow run, as CI does
def test_a_worker_killed_mid_sweep_every_point_exactly_once(allowed_failures, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="vcpulab.sim.sweep")
    cfg = base(duration_ns=2_000_000_000)  # ~40 ms a point: the worker dies while busy
    grid = {"vms.0.policy": [P.upstream(), P.dy_eligible(), P.random()], "seed": list(range(16))}
    n = 48
    ref = local(cfg, grid)
    out = tmp_path / "ds"
    with _cluster(**{"distributed.scheduler.allowed-failures": allowed_failures}) as client:
        pids = client.run(os.getpid)
        killed: list[tuple[str, int, int]] = []

        def kill_a_busy_worker() -> None:
            # right after a submission: that task at least is in flight (the
            # earlier ones may all have finished on a quiet host), so a worker
            # reports it within moments; waited for, within a bound
            done = len(files(out))
            deadline = time.monotonic() + 10.0
            while True:
                proc = client.processing()
                busy = [a for a in proc if proc[a]]
                if busy or time.monotonic() > deadline:
                    break
                time.sleep(0.002)
            assert busy, "no worker took the task just submitted within 10 s"
            addr = max(busy, key=lambda a: len(proc[a]))
            os.kill(pids[addr], signal.SIGKILL)
            killed.append((addr, pids[addr], done))

        # 2 workers → 4 tasks of 2 points in flight; by the 7th submission
        # 3 tasks (6 points) have finished and are on disk.
        ex = Counting(client.get_executor(), at=6, hook=kill_a_busy_worker, hook_after=True)
        df = run_sweep(cfg, grid, executor=ex, out=out, progress=False, batch_size=2)

        (addr, pid, done_before) = killed[0]
        assert 6 <= done_before < n
        client.wait_for_workers(2, timeout=60)
        assert pid not in client.run(os.getpid).values()  # it really died (the nanny started another)
    same(df.drop(EXTRA_COLUMNS), ref)
    assert df["error"].null_count() == n
    names = [p.name for p in files(out)]
    assert sorted(names) == sorted(f"{k}.parquet" for k in expected_keys(cfg, grid))  # exactly once, no tmp
    resubmitted = [r for r in caplog.records if "resubmitting" in r.getMessage()]
    if allowed_failures == 0:
        assert resubmitted and "KilledWorker" in resubmitted[0].getMessage()
        assert len(ex.points) > n  # the lost points were submitted again
    else:
        assert not resubmitted and len(ex.points) == n


# ------------------------------------------------------------------ Ctrl-C and resume


def test_an_interrupted_sweep_resumes_computing_only_the_missing_points(client, tmp_path):
    ref = local(base(), GRID)
    out = tmp_path / "ds"

    def ctrl_c() -> None:  # a real SIGINT to the main thread, as a terminal sends it
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    first = Counting(client.get_executor(), at=8, hook=ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(base(), GRID, executor=first, out=out, progress=False, batch_size=2)
    on_disk = files(out)
    m = len(on_disk)
    assert 0 < m < N
    assert not [p for p in on_disk if p.name.startswith(".")]  # no temporary file left behind
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in on_disk}

    second = Counting(client.get_executor())
    df = run_sweep(base(), GRID, executor=second, out=out, progress=False)
    assert len(second.points) == N - m  # only the missing points were computed
    assert {f"{k}.parquet" for k in second.points}.isdisjoint(stamps)
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files(out) if p.name in stamps} == stamps
    same(df.drop(EXTRA_COLUMNS), ref)
    assert len(files(out)) == N

    third = Counting(client.get_executor())
    same(run_sweep(base(), GRID, executor=third, out=out, progress=False), df)
    assert third.points == []  # all on disk: nothing to compute


def test_ctrl_c_in_a_checkpointed_thread_pool_sweep(tmp_path):
    grid = {"seed": list(range(12))}
    pool = cf.ThreadPoolExecutor(max_workers=2)
    try:
        first = Counting(pool, at=5, hook=lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
        with pytest.raises(KeyboardInterrupt):
            run_sweep(base(), grid, executor=first, out=tmp_path, progress=False, batch_size=1)
        m = len(files(tmp_path))
        assert 0 < m < 12
        second = Counting(pool)
        df = run_sweep(base(), grid, executor=second, out=tmp_path, progress=False)
        assert len(second.points) == 12 - m
        same(df.drop(EXTRA_COLUMNS), local(base(), grid))
    finally:
        pool.shutdown()


# ------------------------------------------------------------------ a damaged dataset


def test_corrupt_partial_and_foreign_files_are_recomputed_never_read(tmp_path):
    grid = {"seed": list(range(8))}
    pool = cf.ThreadPoolExecutor(max_workers=2)
    try:
        full = run_sweep(base(), grid, executor=pool, out=tmp_path, progress=False)
        keys = full["point_hash"].to_list()
        path = {k: tmp_path / f"{k}.parquet" for k in keys}
        path[keys[0]].write_bytes(b"PAR1 this is not parquet")  # garbage
        data = path[keys[1]].read_bytes()
        path[keys[1]].write_bytes(data[: len(data) // 2])  # truncated
        path[keys[2]].write_bytes(path[keys[3]].read_bytes())  # a valid file of another point
        # a crash between write and rename: a partial temp file, no final file
        (tmp_path / f".{keys[4]}.4242.1.tmp").write_bytes(data[:100])
        path[keys[4]].unlink()
        # a stray file of another sweep is not this sweep's business
        (tmp_path / "notes.txt").write_text("hello")

        again = Counting(pool)
        df = run_sweep(base(), grid, executor=again, out=tmp_path, progress=False)
        assert sorted(again.points) == sorted(keys[:3] + [keys[4]])
        same(df, full)
        quarantined = sorted(p.name.split(".")[0] for p in (tmp_path / ".quarantine").iterdir())
        assert quarantined == sorted(keys[:3])
        assert (tmp_path / f".{keys[4]}.4242.1.tmp").exists()  # ignored, not read
        same(read_dataset(tmp_path).sort("point_hash"), full.sort("point_hash"))
    finally:
        pool.shutdown()


# ------------------------------------------------------------------ failed points

FAIL = {"on": True}


def flaky_policy(spinner, candidates):  # type: ignore[no-untyped-def]
    """Returns an index that is not a candidate (the simulator raises) while FAIL["on"]."""
    if FAIL["on"]:
        return 99
    return None


def test_failed_points_are_recorded_with_their_error_and_retried(tmp_path):
    cfg = base(duration_ns=20_000_000)  # long enough for both seeds to call the policy
    grid = {"vms.0.policy": [P.upstream(), P.python(flaky_policy, name="flaky")], "seed": [1, 2]}
    with pytest.raises(ValueError, match="not a candidate"):
        local(cfg, grid)  # the local sweep raises
    pool = cf.ThreadPoolExecutor(max_workers=2)
    try:
        FAIL["on"] = True
        df = run_sweep(cfg, grid, executor=pool, out=tmp_path, progress=False)
        assert df.height == 4
        bad = df.filter(pl.col("error").is_not_null())
        assert bad["vms.0.policy"].to_list() == ["python:flaky", "python:flaky"]
        # the error names where the policy failed (which of the VMs sharing it, the vCPU, the instant)
        assert bad["error"].str.starts_with("ValueError: directed-yield policy failed: VM ").all()
        assert bad["error"].str.contains("'s policy 'flaky' raised on the pause-loop exit of vCPU ", literal=True).all()
        assert bad["error"].str.contains("a directed-yield policy returned 99", literal=True).all()
        assert bad["ops"].null_count() == 2  # no metrics for a failed point
        assert df.filter(pl.col("error").is_null())["ops"].null_count() == 0
        assert len(files(tmp_path)) == 4  # failed points are on disk too
        assert df.columns[:3] == ["vms.0.policy", "seed", "duration_ns"]
        assert df.columns[-5:] == ["config_hash", *EXTRA_COLUMNS]

        FAIL["on"] = False
        again = Counting(pool)
        df2 = run_sweep(cfg, grid, executor=again, out=tmp_path, progress=False)
        assert sorted(again.points) == sorted(bad["point_hash"])  # only the failed points are retried
        assert df2["error"].null_count() == 4
        same(df2.filter(pl.col("vms.0.policy") == "upstream"), df.filter(pl.col("vms.0.policy") == "upstream"))
        same(df2.drop(EXTRA_COLUMNS), local(cfg, grid))
    finally:
        FAIL["on"] = True
        pool.shutdown()


class LockedPolicy:
    """A Python policy that cannot leave this process (it holds a lock)."""

    __name__ = "locked"

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, spinner, candidates):  # type: ignore[no-untyped-def]
        return None


def test_an_unpicklable_python_policy_raises_a_clear_valueerror(client, tmp_path):
    grid = {"vms.0.policy": [P.upstream(), P.python(LockedPolicy())]}
    ex = Counting(client.get_executor())
    with pytest.raises(ValueError, match="Python policy 'locked'.*cannot be sent to other processes"):
        run_sweep(base(), grid, executor=ex, out=tmp_path, progress=False)
    assert ex.points == []  # nothing was submitted
    # in a thread pool nothing is pickled, but each point needs its own deep
    # copy (shared state would make a seed's result depend on the other points)
    with pytest.raises(ValueError, match="Python policy 'locked'.*cannot be deep-copied"):
        run_sweep(base(), grid, out=tmp_path, threads=2, progress=False)


def test_points_of_another_version_are_reused_with_a_warning(tmp_path, caplog):
    grid = {"seed": [1, 2, 3]}
    pool = cf.ThreadPoolExecutor(max_workers=2)
    try:
        full = run_sweep(base(), grid, executor=pool, out=tmp_path, progress=False)
        k = full["point_hash"][1]
        p = tmp_path / f"{k}.parquet"
        pl.read_parquet(p).with_columns(pl.lit("0.0.1").alias("vcpulab_version")).write_parquet(p)
        caplog.set_level(logging.WARNING, logger="vcpulab.sim.sweep")
        again = Counting(pool)
        df = run_sweep(base(), grid, executor=again, out=tmp_path, progress=False)
        assert again.points == []
        assert df["vcpulab_version"].to_list() == [vcpulab.__version__, "0.0.1", vcpulab.__version__]
        assert any("1 point(s)" in r.getMessage() and "0.0.1: 1" in r.getMessage() for r in caplog.records)
    finally:
        pool.shutdown()


class Failing(cf.Executor):
    """Wraps an executor; the tasks of the first ``n`` submissions fail as
    a lost worker's would, with ``exc`` (the task never ran)."""

    def __init__(self, inner: cf.Executor, n: int, exc: BaseException) -> None:
        self.inner, self.n, self.exc = inner, n, exc
        self.submissions = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.submissions += 1
        if self.submissions <= self.n:
            f: cf.Future[Any] = cf.Future()
            f.set_exception(self.exc)
            return f
        return self.inner.submit(fn, *args, **kwargs)


@pytest.mark.parametrize("exc", [cf.CancelledError(), ConnectionResetError("worker gone")], ids=["cancelled", "comm"])
def test_lost_tasks_are_resubmitted_point_by_point(exc, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="vcpulab.sim.sweep")
    grid = {"seed": list(range(8))}
    pool = cf.ThreadPoolExecutor(max_workers=2)
    try:
        ex = Failing(pool, n=2, exc=exc)  # the first two tasks (4 points) are lost
        df = run_sweep(base(), grid, executor=ex, out=tmp_path, progress=False, batch_size=2)
        same(df.drop(EXTRA_COLUMNS), local(base(), grid))
        assert ex.submissions == 4 + 4  # 4 tasks of 2, then the 4 lost points one by one
        assert len([r for r in caplog.records if "resubmitting" in r.getMessage()]) == 2
        assert len(files(tmp_path)) == 8
    finally:
        pool.shutdown()


def test_a_task_that_keeps_failing_is_recorded_then_retried_on_the_next_run(tmp_path):
    grid = {"seed": [1, 2, 3]}
    pool = cf.ThreadPoolExecutor(max_workers=2)
    try:
        ex = Failing(pool, n=10**6, exc=ConnectionResetError("scheduler gone"))
        df = run_sweep(base(), grid, executor=ex, out=tmp_path, progress=False, batch_size=3, retries=2)
        assert ex.submissions == 1 + 3  # one task of 3, then each point once more
        assert df["error"].to_list() == ["ConnectionResetError: the task failed 2 times: scheduler gone"] * 3
        assert df.columns == ["seed", "config_hash", *EXTRA_COLUMNS]  # no point ran: no summary columns
        again = Counting(pool)
        df = run_sweep(base(), grid, executor=again, out=tmp_path, progress=False)
        assert len(again.points) == 3
        same(df.drop(EXTRA_COLUMNS), local(base(), grid))
    finally:
        pool.shutdown()


def test_the_cli_helpers_connect_by_address_and_close_the_client(client, tmp_path):
    from vcpulab.sim._distributed import dask_executor

    addr = client.scheduler.address
    assert addr.startswith("tcp://127.0.0.1:")
    with dask_executor(addr) as ex:
        df = run_sweep(base(), {"seed": [1, 2, 3, 4]}, executor=ex, out=tmp_path, progress=False)
        assert ex._client.scheduler.address == addr  # a second client of the same cluster
    assert ex._client.status == "closed"
    same(df.drop(EXTRA_COLUMNS), local(base(), {"seed": [1, 2, 3, 4]}))


@pytest.mark.slow
def test_cli_sweep_on_a_dask_cluster_resumes_from_its_checkpoints(tmp_path):
    """`vcpulab sim SPEC.toml --dask ADDRESS --out DIR`, then the same again:
    the rerun finds every point on disk and returns the same frame."""
    import subprocess
    import sys

    spec = tmp_path / "spec.toml"
    spec.write_text(
        "[config]\nduration_ns = 1_000_000\n[config.host]\nn_pcpus = 2\n[[config.vms]]\nvcpus = 2\ncount = 2\n"
        "[grid]\nseed = [0, 1, 2, 3]\n'vms.0.policy' = ['dy_eligible', 'upstream']\n"
    )
    with _cluster() as c:
        address = c.scheduler.address
        run = lambda: subprocess.run(
            [
                sys.executable,
                "-m",
                "vcpulab.cli",
                "sim",
                str(spec),
                "--out",
                str(tmp_path / "o"),
                "--dask",
                address,
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        first = run()
        assert first.returncode == 0, first.stderr
        points = sorted((tmp_path / "o" / "points").glob("*.parquet"))
        assert len(points) == 8
        mtimes = [p.stat().st_mtime_ns for p in points]
        df1 = pl.read_parquet(tmp_path / "o" / "sweep.parquet")
        second = run()
        assert second.returncode == 0, second.stderr
        assert [p.stat().st_mtime_ns for p in points] == mtimes  # nothing recomputed
        same(pl.read_parquet(tmp_path / "o" / "sweep.parquet"), df1)
