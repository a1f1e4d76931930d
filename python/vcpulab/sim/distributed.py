"""Checkpointed and distributed sweeps: the public API.

[`vcpulab.sim.sweep`][] with ``out=`` or ``executor=`` delegates here; call
these directly for the rest::

    from vcpulab.sim.distributed import dask_executor, read_dataset, run_sweep

    with dask_executor("tcp://scheduler:8786") as ex:            # or any Executor, or None
        df = run_sweep(base, {"seed": range(100)}, executor=ex, out="sweep-out")
    df = read_dataset("sweep-out")                               # later, or elsewhere

* [`run_sweep`][vcpulab.sim.distributed.run_sweep] — a sweep on any `concurrent.futures.Executor`,
  each finished point written to ``out`` as its own Parquet file; a rerun
  computes only the missing (and the failed) points;
* [`read_dataset`][vcpulab.sim.distributed.read_dataset] — a dataset folder back as one frame;
* [`dask_executor`][vcpulab.sim.distributed.dask_executor] / [`executor_from_address`][vcpulab.sim.distributed.executor_from_address] — a Dask cluster
  as an executor (``pip install 'vcpulab[dask]'``);
* [`point_hash`][vcpulab.sim.distributed.point_hash] — the stable name of a point (its file's name);
* [`expand`][vcpulab.sim.distributed.expand] — the (params, Config) points of a grid;
* [`EXTRA_COLUMNS`][vcpulab.sim.distributed.EXTRA_COLUMNS] — the columns such a sweep adds to the local one's.

docs/sweeps.md describes the dataset's layout, retries and limits.
"""

from __future__ import annotations

from vcpulab.sim._distributed import (
    EXTRA_COLUMNS,
    dask_executor,
    executor_from_address,
    point_hash,
    read_dataset,
    run_sweep,
)
from vcpulab.sim._points import expand

__all__ = [
    "EXTRA_COLUMNS",
    "dask_executor",
    "executor_from_address",
    "expand",
    "point_hash",
    "read_dataset",
    "run_sweep",
]
