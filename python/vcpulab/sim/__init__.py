"""vcpulab's overcommit simulator: host scheduler, pause-loop exits,
directed-yield policies and pv hints, deterministic and fast::

    >>> from vcpulab import sim
    >>> cfg = sim.Config(host=sim.Host(n_pcpus=4), vms=(sim.Vm(vcpus=4, count=2),), duration_ns=10_000_000)
    >>> r = sim.run(cfg)
    >>> r.summary["ops"][0] > 0
    True

* [`run`][vcpulab.sim.run] runs one [`Config`][vcpulab.sim.Config] → [`Result`][vcpulab.sim.Result] (polars frames);
* [`sweep`][vcpulab.sim.sweep] runs many in parallel (GIL released) → one DataFrame;
* [`vcpulab.sim.policies`][] holds the directed-yield policies, including
  policies written in Python; [`vcpulab.sim.presets`][] the workloads;
  [`vcpulab.sim.scenarios`][] the published experiments it reproduces
  (docs/sources.md);
* [`config_schema`][vcpulab.sim.config_schema] is the JSON Schema of a configuration, generated
  from the Rust structs that validate it (limits, defaults, descriptions);
* [`vcpulab.sim.distributed`][] runs sweeps on a Dask cluster or any
  executor, checkpointed to Parquet and resumable ([`run_sweep`][vcpulab.sim.run_sweep],
  [`read_dataset`][vcpulab.sim.read_dataset], [`dask_executor`][vcpulab.sim.dask_executor]).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

import polars as pl

from vcpulab._checks import check_bool, guard_panics
from vcpulab.sim import distributed, policies, presets
from vcpulab.sim._config import (
    IDLE_STATES_SKX,
    Background,
    Barrier,
    Cfs,
    Compute,
    Config,
    Guest,
    HaltPoll,
    Host,
    HostNoise,
    HostSpeed,
    Ipi,
    Lock,
    Phase,
    Ple,
    Policy,
    Pv,
    Recv,
    Send,
    Sleep,
    TaskQueue,
    Vm,
    Workload,
    config_schema,
)
from vcpulab.sim._points import MAX_SWEEP_POINTS, expand
from vcpulab.sim._run import (
    MAX_THREADS,
    PCPU_TIME_CATEGORIES,
    TIME_CATEGORIES,
    TRACE_MAX_ROWS,
    Points,
    Result,
    Spinner,
    VcpuView,
    _check_threads,
    _check_trace_max_rows,
    local_sweep,
    run,
)
from vcpulab.sim.distributed import dask_executor, read_dataset, run_sweep

# the public names of what _run defines (reprs, pickles and the docs say vcpulab.sim.run, .Result)
run.__module__ = Result.__module__ = __name__

__all__ = [
    "IDLE_STATES_SKX",
    "MAX_THREADS",
    "MAX_SWEEP_POINTS",
    "Background",
    "Barrier",
    "Cfs",
    "Compute",
    "Config",
    "Guest",
    "HaltPoll",
    "Host",
    "HostNoise",
    "HostSpeed",
    "Ipi",
    "Lock",
    "Phase",
    "Ple",
    "Policy",
    "Pv",
    "Recv",
    "TaskQueue",
    "Result",
    "Send",
    "Sleep",
    "Spinner",
    "VcpuView",
    "Vm",
    "PCPU_TIME_CATEGORIES",
    "TIME_CATEGORIES",
    "Workload",
    "config_schema",
    "dask_executor",
    "distributed",
    "expand",
    "policies",
    "presets",
    "read_dataset",
    "run",
    "run_sweep",
    "sweep",
]


@overload
def sweep(
    points: Points,
    grid: Mapping[str, Iterable[Any]] | None = ...,
    *,
    threads: int | None = ...,
    progress: bool = ...,
    results: Literal[False] = ...,
    executor: Any = ...,
    out: Any = ...,
    trace_max_rows: int | None = ...,
    max_points: int | None = ...,
) -> pl.DataFrame: ...


@overload
def sweep(
    points: Points,
    grid: Mapping[str, Iterable[Any]] | None = ...,
    *,
    threads: int | None = ...,
    progress: bool = ...,
    results: Literal[True],
    executor: None = ...,
    out: None = ...,
    trace_max_rows: int | None = ...,
    max_points: int | None = ...,
) -> tuple[pl.DataFrame, list[Result]]: ...


@overload
def sweep(
    points: Points,
    grid: Mapping[str, Iterable[Any]] | None = ...,
    *,
    threads: int | None = ...,
    progress: bool = ...,
    results: bool,
    executor: Any = ...,
    out: Any = ...,
    trace_max_rows: int | None = ...,
    max_points: int | None = ...,
) -> pl.DataFrame | tuple[pl.DataFrame, list[Result]]: ...


@guard_panics
def sweep(
    points: Points,
    grid: Mapping[str, Iterable[Any]] | None = None,
    *,
    threads: int | None = None,
    progress: bool = True,
    results: bool = False,
    executor: Any = None,
    out: Any = None,
    trace_max_rows: int | None = TRACE_MAX_ROWS,
    max_points: int | None = MAX_SWEEP_POINTS,
) -> pl.DataFrame | tuple[pl.DataFrame, list[Result]]:
    """Run many configurations in parallel (rayon, GIL released).

    * ``sweep(base, {"host.n_pcpus": [16, 32], "vms.0.policy": [p1, p2]})``:
      the cartesian product of the grid applied to ``base`` (dotted paths,
      see [`Config.with_path`][vcpulab.sim.Config.with_path]; a policy or workload may be given by
      name, e.g. ``"vms.0.policy": ["baseline_2011", "dy_eligible"]``); the
      parameters become columns (a Policy appears as its label, the name of
      its constructor).
    * ``sweep([cfg1, cfg2, ...])``: a column ``point`` (0, 1, …).
    * ``sweep([(params, cfg), ...])``: your own parameter columns.

    Returns one DataFrame with one row per point: the parameters, then the
    summary columns, then ``config_hash``. ``threads``: worker threads (None:
    all cores). Results are identical whatever the number of threads.
    With ``results=True`` also returns the full [`Result`][vcpulab.sim.Result] of each point.

    ``executor`` (any ``concurrent.futures.Executor``, e.g. a Dask
    ``Client.get_executor()``) and/or ``out`` (a folder: one Parquet file per
    finished point, skipped when the sweep is run again) run the sweep
    through [`vcpulab.sim.distributed.run_sweep`][]; the frame gains the
    columns ``error``, ``config_json``, ``vcpulab_version``, ``point_hash``.

    Ctrl-C stops every running point within ~50 ms and raises
    ``KeyboardInterrupt``; the points that had finished are kept: locally as
    the exception's ``partial`` attribute (this function's return value for
    those points: a DataFrame, or ``(DataFrame, results)``), with ``out=``
    on disk. ``threads`` is at most [`MAX_THREADS`][vcpulab.sim.MAX_THREADS];
    ``trace_max_rows`` limits each point's trace as in [`run`][vcpulab.sim.run];
    a sweep of more than ``max_points`` points ([`MAX_SWEEP_POINTS`][vcpulab.sim.MAX_SWEEP_POINTS],
    100,000; None: no bound) is refused with a ValueError before any point
    is built.
    """
    threads = _check_threads(threads)
    _check_trace_max_rows(trace_max_rows)
    check_bool("progress", progress)
    check_bool("results", results)
    if executor is not None or out is not None:
        if results:
            raise ValueError(
                "sweep: results=True is not available with executor= or out= (the dataset keeps summary rows)"
            )
        return run_sweep(
            points, grid, executor=executor, out=out, threads=threads, progress=progress, max_points=max_points
        )

    return local_sweep(
        points,
        grid,
        threads=threads,
        progress=progress,
        results=results,
        trace_max_rows=trace_max_rows,
        max_points=max_points,
    )  # type: ignore[return-value]
