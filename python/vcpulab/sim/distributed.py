"""Checkpointed and distributed sweeps: the public API.

:func:`vcpulab.sim.sweep` with ``out=`` or ``executor=`` delegates here; call
these directly for the rest::

    from vcpulab.sim.distributed import dask_executor, read_dataset, run_sweep

    with dask_executor("tcp://scheduler:8786") as ex:            # or any Executor, or None
        df = run_sweep(base, {"seed": range(100)}, executor=ex, out="sweep-out")
    df = read_dataset("sweep-out")                               # later, or elsewhere

* :func:`run_sweep` — a sweep on any :class:`concurrent.futures.Executor`,
  each finished point written to ``out`` as its own Parquet file; a rerun
  computes only the missing (and the failed) points;
* :func:`read_dataset` — a dataset folder back as one frame;
* :func:`dask_executor` / :func:`executor_from_address` — a Dask cluster
  as an executor (``pip install 'vcpulab[dask]'``);
* :func:`point_hash` — the stable name of a point (its file's name);
* :func:`expand` — the (params, Config) points of a grid;
* :data:`EXTRA_COLUMNS` — the columns such a sweep adds to the local one's.

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
