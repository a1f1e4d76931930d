"""vcpulab's overcommit simulator: host scheduler, pause-loop exits,
directed-yield policies and pv hints, deterministic and fast::

    >>> from vcpulab import sim
    >>> cfg = sim.Config(host=sim.Host(pcpus=4), vms=(sim.Vm(vcpus=4, count=2),), duration_ns=10_000_000)
    >>> r = sim.run(cfg)
    >>> r.summary["ops"][0] > 0
    True

* :func:`run` runs one :class:`Config` → :class:`Result` (polars frames);
* :func:`sweep` runs many in parallel (GIL released) → one DataFrame;
* :mod:`vcpulab.sim.policies` holds the directed-yield policies, including
  policies written in Python; :mod:`vcpulab.sim.presets` the workloads;
  :mod:`vcpulab.sim.scenarios` the published experiments it reproduces
  (docs/sources.md);
* :func:`config_schema` is the JSON Schema of a configuration, generated
  from the Rust structs that validate it (limits, defaults, descriptions);
* :mod:`vcpulab.sim.distributed` runs sweeps on a Dask cluster or any
  executor, checkpointed to Parquet and resumable (:func:`run_sweep`,
  :func:`read_dataset`, :func:`dask_executor`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np
import polars as pl

from vcpulab import _core
from vcpulab._checks import guard_panics
from vcpulab._frames import frame as _frame
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
    Ipi,
    Lock,
    Phase,
    Ple,
    Policy,
    Pv,
    Recv,
    Send,
    Sleep,
    Vm,
    Workload,
    config_schema,
)
from vcpulab.sim._points import expand
from vcpulab.sim._points import param_value as _param_value
from vcpulab.sim.distributed import dask_executor, read_dataset, run_sweep

__all__ = [
    "IDLE_STATES_SKX",
    "Background",
    "Barrier",
    "Cfs",
    "Compute",
    "Config",
    "Guest",
    "HaltPoll",
    "Host",
    "HostNoise",
    "Ipi",
    "Lock",
    "Phase",
    "Ple",
    "Policy",
    "Pv",
    "Recv",
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

VcpuView = _core.VcpuView
Spinner = _core.Spinner

#: Where a vCPU's time goes, the columns of :attr:`Result.vcpus` that sum to
#: the run's duration (useful work, lock spinning, PLE exits, other exits,
#: guest idle polling, host halt polling, runnable-but-waiting, halted).
#: Read from the Rust engine (``sim::metrics``), so it cannot drift.
TIME_CATEGORIES: tuple[str, ...] = tuple(_core.SIM_VCPU_TIME_CATEGORIES)
#: The same for a host CPU (:attr:`Result.pcpus`): running categories, then
#: background tasks and idle.
PCPU_TIME_CATEGORIES: tuple[str, ...] = tuple(_core.SIM_PCPU_TIME_CATEGORIES)


@dataclass(frozen=True)
class Result:
    """What a run returns, with its provenance.

    Attributes:
        config: the full configuration (seed included).
        version: the vcpulab version that produced it.
        summary: one row: duration, ops, throughput, host-time fractions, counters.
        vms: one row per VM: ops, throughput, latency percentiles (log-linear
            histogram, < 6.25 % error), wall time, time categories, counters.
        vcpus: one row per vCPU: time in useful work, spinning, PLE exits,
            other exits, guest idle polling, runnable-but-waiting (steal),
            halted; PLE exits; yield_to attempts and outcomes; preemptions
            reported / other; halt exits and wake-ups; PLE window.
        pcpus: one row per host CPU: the same running categories, background
            and idle time, context switches.
        trace: with ``Config.trace``: one row per interval a task ran on a
            host CPU (pcpu, start_ns, end_ns, vm, vcpu (-1: background
            task), why the interval ended). Otherwise None.
    """

    config: Config
    version: str
    summary: pl.DataFrame
    vms: pl.DataFrame
    vcpus: pl.DataFrame
    pcpus: pl.DataFrame
    trace: pl.DataFrame | None = field(default=None)

    @property
    def config_hash(self) -> str:
        return self.config.config_hash()

    @property
    def provenance(self) -> dict[str, Any]:
        """Where this result came from (:mod:`vcpulab.provenance`): vcpulab
        version and build, dependency versions, timestamp, command line, the
        machine (CPU model, kernel, KVM module parameters), seed and config hash."""
        from vcpulab.provenance import provenance

        return {**provenance(), "seed": self.config.seed, "config_hash": self.config_hash}

    def _repr_html_(self) -> str:
        from vcpulab._display import table

        s = self.summary.row(0, named=True)
        vms = ", ".join(f"{v.count}×{v.vcpus} vCPUs ({v.workload.name or 'workload'}, {policies.label(v.policy)})" for v in self.config.vms)
        prov = self.provenance
        rows = [
            ("host", f"{self.config.host.pcpus} CPUs, scheduler {self.config.host.scheduler}"),
            ("VMs", vms),
            ("simulated", f"{self.config.duration_ns / 1e6:g} ms (warm-up {self.config.warmup_ns / 1e6:g} ms), seed {self.config.seed}"),
            ("throughput", f"{s.get('throughput_ops_s', float('nan')):,.0f} ops/s"),
            ("host time", f"useful {s.get('useful_frac', 0):.1%}, spin {s.get('spin_frac', 0):.1%}, "
                          f"PLE {s.get('ple_frac', 0):.1%}, idle {s.get('idle_frac', 0):.1%}"),
            ("config hash", self.config_hash[:16]),
            ("computed by", f"vcpulab {prov['vcpulab_version']} on {prov['host_cpu_model']}, kernel {prov['kernel_release']}"),
        ]  # fmt: skip
        return table("simulated run", rows, [("summary", self.summary), ("vms", self.vms), ("vcpus", self.vcpus), ("pcpus", self.pcpus)])

    def sched_map(self, bin_ns: int = 10_000) -> np.ndarray:
        """The sched map of [S4] (docs/sources.md) as an int array of shape (pcpus, bins):
        for each host CPU and time bin of ``bin_ns``, what ran at the middle
        of the bin: ``vm * 65536 + vcpu``, -1 for a background task, -2 for
        idle (see :func:`vcpulab.plot.sched_map_codes`). Needs ``trace=True``."""
        from vcpulab.plot import sched_map_codes

        return sched_map_codes(self, **self._bins(bin_ns))

    def sched_map_rgb(self, bin_ns: int = 10_000) -> np.ndarray:
        """:meth:`sched_map` as an RGB image (uint8, shape (pcpus, bins, 3)),
        coloured as in [S4]: one hue per VM, one brightness per
        vCPU, black for background host tasks, white for idle. For a picture
        with a legend, saved as PNG, use :func:`vcpulab.plot.sched_map`."""
        from vcpulab.plot import sched_map_image

        return sched_map_image(self, **self._bins(bin_ns))

    def _bins(self, bin_ns: int) -> dict[str, Any]:
        if self.trace is None:
            raise ValueError("Result.sched_map needs a run with trace=True")
        if isinstance(bin_ns, bool) or not isinstance(bin_ns, int) or bin_ns < 1:
            raise ValueError(f"sched_map: bin_ns must be an int >= 1, got {bin_ns!r}")
        return {
            "us_per_pixel": bin_ns / 1000,
            "start_ns": 0,
            "end_ns": int(self.summary["duration_ns"][0]),
            "pcpus": int(self.summary["pcpus"][0]),
        }


#: Default of ``trace_max_rows``: most trace rows one run keeps (~200 bytes a
#: row at the peak, measured: sched_map_2012(8, 20) over 100 ms makes 1.24 M
#: rows and peaks at 313 MB RSS). ``None`` lifts the limit.
TRACE_MAX_ROWS = 5_000_000

#: Most worker threads of a local sweep (more only adds memory and contention).
MAX_THREADS = 1024


def _policies_for(cfg: Config) -> dict[str, Callable[..., Any]]:
    """One deep copy of each Python policy per run, shared by the VMs of that
    run (a policy keeping state per VM keys it by ``spinner.vm``): state never
    leaks from one run (or sweep point) to another, so a seed gives the same
    result every time, and memory does not grow with the number of VMs. A
    policy that cannot be deep-copied is refused (ValueError) rather than
    shared between runs."""
    import copy

    out = {}
    for name, fn in cfg.python_policies().items():
        try:
            out[name] = copy.deepcopy(fn)
        except Exception as e:  # noqa: BLE001 - any failure to copy
            raise ValueError(
                f"the Python policy {name!r} ({fn!r}) cannot be deep-copied ({type(e).__name__}: {e}); each run "
                "needs its own copy so that runs are independent and deterministic. Keep its state in plain "
                "attributes (or define __deepcopy__)"
            ) from e
    return out


def _check_trace_max_rows(v: Any) -> int | None:
    from vcpulab._checks import check_int

    return None if v is None else check_int("trace_max_rows", v, 1, 2**63 - 1)


def _check_threads(threads: Any) -> int | None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"sweep: threads must be an int >= 1 or None, got {threads!r}")
    if threads is not None and threads > MAX_THREADS:
        raise ValueError(f"sweep: threads must be at most {MAX_THREADS}, got {threads}")
    return threads


def _result(cfg: Config, d: Mapping[str, Any]) -> Result:
    return Result(
        config=cfg,
        version=_core.__version__,
        summary=_frame(d["summary"]),  # type: ignore[arg-type]
        vms=_frame(d["vms"]),  # type: ignore[arg-type]
        vcpus=_frame(d["vcpus"]),  # type: ignore[arg-type]
        pcpus=_frame(d["pcpus"]),  # type: ignore[arg-type]
        trace=_frame(d["trace"]),
    )


@guard_panics
def run(config: Config, *, trace: bool | None = None, trace_max_rows: int | None = TRACE_MAX_ROWS) -> Result:
    """Run one configuration. ``trace`` overrides ``config.trace``.

    Deterministic: the same config (seed included) gives identical frames.
    The GIL is released while the simulator runs; Python policies take it
    only while they are called. Ctrl-C stops it (``KeyboardInterrupt``).

    ``trace_max_rows``: a run whose trace would exceed this many rows stops
    with a ValueError naming it (None: no limit; a trace that cannot get
    memory raises MemoryError). It never changes a result that stays below.
    """
    if not isinstance(config, Config):
        raise ValueError(f"run() needs a vcpulab.sim.Config, got {type(config).__name__}")
    limit = _check_trace_max_rows(trace_max_rows)
    if trace is not None:
        config = config.replace(trace=bool(trace))
    d = _core.sim_run(config.to_json(), _policies_for(config), None, limit)
    return _result(config, d)


Points = Config | Sequence[Config] | Sequence[tuple[Mapping[str, Any], Config]]


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
) -> tuple[pl.DataFrame, list[Result]]: ...


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
) -> pl.DataFrame | tuple[pl.DataFrame, list[Result]]:
    """Run many configurations in parallel (rayon, GIL released).

    * ``sweep(base, {"host.pcpus": [16, 32], "vms.0.policy": [p1, p2]})``:
      the cartesian product of the grid applied to ``base`` (dotted paths,
      see :meth:`Config.with_path`; a policy or workload may be given by
      name, e.g. ``"vms.0.policy": ["baseline_2011", "dy_eligible"]``); the
      parameters become columns (a Policy appears as its label, the name of
      its constructor).
    * ``sweep([cfg1, cfg2, ...])``: a column ``point`` (0, 1, …).
    * ``sweep([(params, cfg), ...])``: your own parameter columns.

    Returns one DataFrame with one row per point: the parameters, then the
    summary columns, then ``config_hash``. ``threads``: worker threads (None:
    all cores). Results are identical whatever the number of threads.
    With ``results=True`` also returns the full :class:`Result` of each point.

    ``executor`` (any ``concurrent.futures.Executor``, e.g. a Dask
    ``Client.get_executor()``) and/or ``out`` (a folder: one Parquet file per
    finished point, skipped when the sweep is run again) run the sweep
    through :func:`vcpulab.sim.distributed.run_sweep`; the frame gains the
    columns ``error``, ``config_json``, ``vcpulab_version``, ``point_hash``.

    Ctrl-C stops every running point within ~50 ms and raises
    ``KeyboardInterrupt``; the points that had finished are kept: locally as
    the exception's ``partial`` attribute (this function's return value for
    those points: a DataFrame, or ``(DataFrame, results)``), with ``out=``
    on disk. ``threads`` is at most :data:`MAX_THREADS`;
    ``trace_max_rows`` limits each point's trace as in :func:`run`.
    """
    _check_threads(threads)
    limit = _check_trace_max_rows(trace_max_rows)
    if executor is not None or out is not None:
        if results:
            raise ValueError("sweep: results=True is not available with executor= or out= (the dataset keeps summary rows)")
        return run_sweep(points, grid, executor=executor, out=out, threads=threads, progress=progress)

    labelled = expand(points, grid)
    jsons = [c.to_json() for _, c in labelled]
    pols = [_policies_for(c) for _, c in labelled]
    bar = None
    cb = None
    if progress and labelled:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(labelled), desc="vcpulab.sim.sweep", leave=False)

            def cb(done: int) -> None:
                bar.n = done
                bar.refresh()
        except ImportError:  # pragma: no cover - tqdm is a dependency
            bar = None
    try:
        out = _core.sim_sweep(jsons, pols, threads or 0, cb, limit)
    except KeyboardInterrupt as e:
        partial = getattr(e, "partial", None)
        if isinstance(partial, list):
            kept = [(lc, d) for lc, d in zip(labelled, partial) if d is not None]
            e.partial = _sweep_frame(kept, results)  # type: ignore[attr-defined]
            import logging

            logging.getLogger("vcpulab.sim.sweep").warning(
                "vcpulab.sim.sweep: interrupted; %d of %d points had finished (kept in KeyboardInterrupt.partial)",
                len(kept), len(labelled),
            )
        raise
    finally:
        if bar is not None:
            bar.close()
    return _sweep_frame(list(zip(labelled, out)), results)


def _sweep_frame(done: list[tuple[tuple[dict[str, Any], Config], Any]], results: bool) -> Any:
    rows = []
    res = []
    for (params, cfg), d in done:
        r = _result(cfg, d)
        res.append(r)
        row = r.summary.drop([k for k in params if k in r.summary.columns])
        row = row.with_columns(pl.lit(cfg.config_hash()).alias("config_hash"))
        prm = pl.DataFrame([params]) if params else None
        rows.append(pl.concat([prm, row], how="horizontal") if prm is not None else row)
    df = pl.concat(rows, how="diagonal_relaxed") if rows else pl.DataFrame()
    return (df, res) if results else df
