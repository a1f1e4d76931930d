"""Wall time of one sweep: local rayon vs a checkpointed thread pool vs a
Dask LocalCluster on loopback (with and without a Parquet dataset), and the
time to resume a finished sweep from its dataset.

    python benches/bench_sweep_distributed.py [--points 400] [--duration-ms 200] [--workers 2]

Every engine gets the same points; the script checks that they return the
same numbers (the local sweep's columns).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from polars.testing import assert_frame_equal

from vcpulab import sim
from vcpulab.sim import policies as P
from vcpulab.sim.distributed import EXTRA_COLUMNS, run_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=400, help="points (a multiple of 8; default 400)")
    ap.add_argument("--duration-ms", type=float, default=200.0, help="simulated time per point (default 200 ms)")
    ap.add_argument("--workers", type=int, default=2, help="Dask workers, 1 thread each (default 2)")
    a = ap.parse_args()
    base = sim.Config(host=sim.Host(n_pcpus=4), vms=(sim.Vm(vcpus=4, count=2),), duration_ns=int(a.duration_ms * 1e6))
    grid = {
        "vms.0.policy": [P.upstream(), P.dy_eligible(), P.random(), P.oracle()],
        "host.n_pcpus": [2, 4],
        "seed": list(range(max(1, a.points // 8))),
    }
    n = 8 * len(grid["seed"])
    times: dict[str, float] = {}

    def timed(name, fn):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        df = fn()
        times[name] = time.perf_counter() - t
        return df

    ref = timed("local rayon (no dataset)", lambda: sim.sweep(base, grid, progress=False))
    with tempfile.TemporaryDirectory() as d:
        df = timed("thread pool + dataset", lambda: run_sweep(base, grid, out=f"{d}/tp", progress=False))
        assert_frame_equal(df.drop(EXTRA_COLUMNS), ref)
        timed("resume, all on disk", lambda: run_sweep(base, grid, out=f"{d}/tp", progress=False))

        from distributed import Client, LocalCluster

        t = time.perf_counter()
        with (
            LocalCluster(
                n_workers=a.workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            ) as cluster,
            Client(cluster) as client,
        ):
            times["(LocalCluster start)"] = time.perf_counter() - t
            ex = client.get_executor()
            df = timed("Dask LocalCluster (no dataset)", lambda: run_sweep(base, grid, executor=ex, progress=False))
            assert_frame_equal(df.drop(EXTRA_COLUMNS), ref)
            df = timed(
                "Dask LocalCluster + dataset", lambda: run_sweep(base, grid, executor=ex, out=f"{d}/dk", progress=False)
            )
            assert_frame_equal(df.drop(EXTRA_COLUMNS), ref)
    print(f"{n} points, {a.duration_ms:g} ms simulated each, {a.workers} Dask workers")
    for k, v in times.items():
        print(f"  {k:<34} {v:8.2f} s" + (f"   {1e3 * v / n:6.2f} ms/point" if not k.startswith("(") else ""))


if __name__ == "__main__":
    main()
