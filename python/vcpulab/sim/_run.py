"""Running the simulator on this machine: [`run`][vcpulab.sim.run] (one configuration),
`local_sweep` (many, in parallel) and their [`Result`][vcpulab.sim.Result]. Re-exported
by [`vcpulab.sim`][], whose [`sweep`][vcpulab.sim.sweep] adds the distributed
and checkpointed cases ([`vcpulab.sim.distributed`][]), which use this
module in turn: no import cycle."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from vcpulab import _core
from vcpulab._checks import check_bool, guard_panics
from vcpulab._core import Spinner as Spinner  # re-exported by vcpulab.sim: what a Python policy receives
from vcpulab._core import VcpuView as VcpuView
from vcpulab._frames import PCPU_TIME_CATEGORIES as PCPU_TIME_CATEGORIES  # re-exported by vcpulab.sim
from vcpulab._frames import TIME_CATEGORIES as TIME_CATEGORIES
from vcpulab._frames import TRACE_KEY_DTYPE
from vcpulab._frames import frame as _frame
from vcpulab._interrupt import keep_partial, partial_of
from vcpulab.sim import policies
from vcpulab.sim._config import Config
from vcpulab.sim._points import MAX_SWEEP_POINTS, expand


@dataclass(frozen=True)
class Result:
    """What a run returns, with its provenance.

    Attributes:
        config: the full configuration (seed included).
        version: the vcpulab version that produced it.
        summary: one row: duration, ops, throughput, host-time fractions, counters.
        vms: one row per VM: ops, throughput, latency percentiles (log-linear
            histogram, < 1.6 % error), wall time, time categories, counters.
        vcpus: one row per vCPU: time in useful work, spinning, PLE exits,
            other exits, guest idle polling, runnable-but-waiting (steal),
            halted; PLE exits; yield_to attempts and outcomes; preemptions
            reported / other; halt exits and wake-ups; PLE window.
        pcpus: one row per host CPU: the same running categories, background
            and idle time, context switches.
        trace: with ``Config.trace``: one row per interval a task ran on a
            host CPU (pcpu, start_ns, end_ns, vm, vcpu (-1: background
            task), why the interval ended), in the order the intervals
            ended (``end_ns`` never decreases). Compact: ``pcpu``, ``vm``
            and ``vcpu`` are ``Int32`` and ``why`` a ``pl.Enum``, 29 bytes
            a row (32 with polars before its one-byte enums). Otherwise None.
        schedule: with ``Config.trace`` under one of vcpulab's schedulers
            (``Host.scheduler`` ``round_robin``, ``relaxed_co``, ``balance``,
            ``pinned``): one row per run-token hand-off, the columns and
            reasons of a real run's ``Run.schedule`` — t_ns, pcpu, out_vm,
            out_vcpu (-1: the token was free), in_vm, in_vcpu (-1: it falls
            free), why ([`vcpulab.sched.WHY`][vcpulab.sched.WHY]), in time
            order, over the trace's window (``trace_from_ns`` /
            ``trace_until_ns``); keys ``Int32`` and ``why`` a ``pl.Enum``
            as in the trace. Otherwise None. Simplified: a vCPU gives its
            token up as ``done`` when every guest thread on it has ended
            (the real program's thread stops), and the simulator's gang
            scheduler (``gang``) keeps no log.
    """

    config: Config
    version: str
    summary: pl.DataFrame
    vms: pl.DataFrame
    vcpus: pl.DataFrame
    pcpus: pl.DataFrame
    trace: pl.DataFrame | None = field(default=None)
    schedule: pl.DataFrame | None = field(default=None)

    @property
    def config_hash(self) -> str:
        return self.config.config_hash()

    @property
    def provenance(self) -> dict[str, Any]:
        """Where this result came from ([`vcpulab.provenance`][]): vcpulab
        version and build, dependency versions, timestamp, command line, the
        machine (CPU model, kernel, KVM module parameters), seed and config hash."""
        from vcpulab.provenance import provenance

        return {**provenance(), "seed": self.config.seed, "config_hash": self.config_hash}

    def _repr_html_(self) -> str:
        from vcpulab._display import table

        s = self.summary.row(0, named=True)
        vms = ", ".join(
            f"{v.count}×{v.vcpus} vCPUs ({v.workload.name or 'workload'}, {policies.label(v.policy)})"
            for v in self.config.vms
        )
        prov = self.provenance
        rows = [
            ("host", f"{self.config.host.n_pcpus} CPUs, scheduler {self.config.host.scheduler}"),
            ("VMs", vms),
            (
                "simulated",
                f"{self.config.duration_ns / 1e6:g} ms (warm-up {self.config.warmup_ns / 1e6:g} ms), seed {self.config.seed}",
            ),
            ("throughput", f"{s.get('throughput_ops_s', float('nan')):,.0f} ops/s"),
            (
                "host time",
                f"useful {s.get('useful_frac', 0):.1%}, spin {s.get('spin_frac', 0):.1%}, "
                f"PLE {s.get('ple_frac', 0):.1%}, idle {s.get('idle_frac', 0):.1%}",
            ),
            ("config hash", self.config_hash[:16]),
            (
                "computed by",
                f"vcpulab {prov['vcpulab_version']} on {prov['host_cpu_model']}, kernel {prov['kernel_release']}",
            ),
        ]
        return table(
            "simulated run",
            rows,
            [("summary", self.summary), ("vms", self.vms), ("vcpus", self.vcpus), ("pcpus", self.pcpus)],
        )

    def sched_map(self, bin_ns: int = 10_000, *, start_ns: int = 0, end_ns: int | None = None) -> np.ndarray:
        """The sched map of [S4] (docs/sources.md) as an int array of shape (n_pcpus, bins):
        for each host CPU and time bin of ``bin_ns``, what ran at the middle
        of the bin: ``vm * 65536 + vcpu``, -1 for a background task, -2 for
        idle (see [`vcpulab.plot.sched_map_codes`][]). Needs ``trace=True``.
        ``start_ns`` / ``end_ns`` (default: the whole run) choose a window;
        only the trace's rows that overlap it are read."""
        from vcpulab.plot import sched_map_codes

        return sched_map_codes(self, **self._bins(bin_ns, start_ns, end_ns))

    def sched_map_rgb(self, bin_ns: int = 10_000, *, start_ns: int = 0, end_ns: int | None = None) -> np.ndarray:
        """[`sched_map`][vcpulab.sim.Result.sched_map] as an RGB image (uint8, shape (n_pcpus, bins, 3)),
        coloured as in [S4]: one hue per VM, one brightness per
        vCPU, black for background host tasks, white for idle. For a picture
        with a legend, saved as PNG, use [`vcpulab.plot.sched_map`][]."""
        from vcpulab.plot import sched_map_image

        return sched_map_image(self, **self._bins(bin_ns, start_ns, end_ns))

    def _bins(self, bin_ns: int, start_ns: int, end_ns: int | None) -> dict[str, Any]:
        from vcpulab._checks import check_int

        if self.trace is None:
            raise ValueError("Result.sched_map needs a run with trace=True")
        if isinstance(bin_ns, bool) or not isinstance(bin_ns, int) or bin_ns < 1:
            raise ValueError(f"sched_map: bin_ns must be an int >= 1, got {bin_ns!r}")
        duration_ns = int(self.summary["duration_ns"][0])
        start = check_int("start_ns", start_ns, 0, duration_ns - 1)
        end = duration_ns if end_ns is None else check_int("end_ns", end_ns, start + 1, duration_ns)
        return {
            "us_per_pixel": bin_ns / 1000,
            "start_ns": start,
            "end_ns": end,
            "n_pcpus": int(self.summary["n_pcpus"][0]),
        }


#: Default of ``trace_max_rows``: most trace rows one run keeps. A row takes
#: 29 bytes in the run and the same 29 in ``Result.trace``, which takes the
#: run's columns without copying them, so the default bounds a trace at
#: about 700 MB; a traced one-second [S4] 8 × 20 yield storm
#: (``scenarios.sched_map_2012(8, 20)``, 80 host CPUs) keeps about 12 M rows
#: (``benches/sim_trace_bench.py``). ``None`` lifts the limit.
TRACE_MAX_ROWS = 24_000_000

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
        except Exception as e:
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
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or int(threads) < 1:
        raise ValueError(f"sweep: threads must be an int >= 1 or None, got {threads!r}")
    n = int(threads)
    if n > MAX_THREADS:
        raise ValueError(f"sweep: threads must be at most {MAX_THREADS}, got {n}")
    return n


def _result(cfg: Config, d: Mapping[str, Any]) -> Result:
    # the trace first: its memory check (which counts the address space
    # polars' threads take at polars' first parallel step) must come before
    # any frame starts them, or a short address space aborts inside polars
    trace = _frame(d["trace"], key_dtype=TRACE_KEY_DTYPE)
    return Result(
        config=cfg,
        version=_core.__version__,
        summary=_frame(d["summary"]),  # type: ignore[arg-type]
        vms=_frame(d["vms"]),  # type: ignore[arg-type]
        vcpus=_frame(d["vcpus"]),  # type: ignore[arg-type]
        pcpus=_frame(d["pcpus"]),  # type: ignore[arg-type]
        trace=trace,
        schedule=_frame(d["schedule"], key_dtype=TRACE_KEY_DTYPE),
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
        raise TypeError(f"run() needs a vcpulab.sim.Config, got {type(config).__name__}")
    limit = _check_trace_max_rows(trace_max_rows)
    if trace is not None:
        config = config.replace(trace=check_bool("trace", trace))
    d = _core.sim_run(config.to_json(), _policies_for(config), None, limit)
    return _result(config, d)


Points = Config | Sequence[Config] | Sequence[tuple[Mapping[str, Any], Config]]


def _sweep_frame(done: list[tuple[tuple[dict[str, Any], Config], Any]], results: bool) -> Any:
    """The sweep's frame (one row per finished point: its parameters, its
    summary, ``config_hash``), and with ``results`` every point's Result.

    The summary columns are concatenated as arrays, not built point by point:
    this is also the frame a Ctrl-C keeps, and it must be ready at once
    (row-by-row frames cost ~3 ms a point)."""
    if results:
        res = [_result(cfg, d) for (_, cfg), d in done]
        summaries = [r.summary for r in res]
    else:
        res = []
        summaries = None
    if not done:
        return (pl.DataFrame(), res) if results else pl.DataFrame()
    params = [p for (p, _), _ in done]
    keys = list(dict.fromkeys(k for p in params for k in p))
    if summaries is not None:
        summary = pl.concat(summaries, how="diagonal_relaxed")
    else:
        cols = done[0][1]["summary"]
        summary = _frame({k: np.concatenate([d["summary"][k] for _, d in done]) for k in cols})  # type: ignore[assignment]
    summary = summary.drop([k for k in keys if k in summary.columns])  # type: ignore[union-attr]
    summary = summary.with_columns(pl.Series("config_hash", [cfg.config_hash() for (_, cfg), _ in done]))
    df = pl.concat([pl.DataFrame(params, infer_schema_length=None), summary], how="horizontal") if keys else summary
    return (df, res) if results else df


def local_sweep(
    points: Points,
    grid: Mapping[str, Iterable[Any]] | None = None,
    *,
    threads: int | None = None,
    progress: bool = True,
    results: bool = False,
    trace_max_rows: int | None = TRACE_MAX_ROWS,
    max_points: int | None = MAX_SWEEP_POINTS,
) -> pl.DataFrame | tuple[pl.DataFrame, list[Result]]:
    """[`vcpulab.sim.sweep`][] on this machine (rayon threads): its
    arguments, less ``executor`` and ``out`` (those go through
    [`vcpulab.sim.distributed.run_sweep`][], which calls this for its
    local case)."""
    threads = _check_threads(threads)
    limit = _check_trace_max_rows(trace_max_rows)
    check_bool("progress", progress)
    check_bool("results", results)
    labelled = expand(points, grid, max_points)
    try:
        # thousands of points take a while to serialise: Ctrl-C here keeps the (empty) frame too
        jsons = [c.to_json() for _, c in labelled]
        pols: list[dict[str, Any] | None] = [_policies_for(c) for _, c in labelled]
    except KeyboardInterrupt as e:
        keep_partial(e, _sweep_frame([], results), call="sim.sweep", done=0, total=len(labelled), unit="points")
        raise
    bar = None
    cb = None
    if progress and labelled:
        try:
            from tqdm.auto import tqdm

            tq = tqdm(total=len(labelled), desc="vcpulab.sim.sweep", leave=False)
            bar = tq

            def cb(done: int) -> None:
                tq.n = done
                tq.refresh()
        except ImportError:  # pragma: no cover - tqdm is a dependency
            bar = None
    try:
        out = _core.sim_sweep(jsons, pols, threads or 0, cb, limit)
    except KeyboardInterrupt as e:
        partial = partial_of(e)
        kept = [(lc, d) for lc, d in zip(labelled, partial) if d is not None] if isinstance(partial, list) else []
        keep_partial(
            e, _sweep_frame(kept, results), call="sim.sweep", done=len(kept), total=len(labelled), unit="points"
        )
        raise
    finally:
        if bar is not None:
            bar.close()
    return _sweep_frame(list(zip(labelled, out)), results)
