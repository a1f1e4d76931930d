"""Pictures of runs (matplotlib).

* [`sched_map`][vcpulab.plot.sched_map] — the ``perf sched map`` bitmap of [S4]: host CPUs as
  rows, time as columns, one hue per VM and one brightness per vCPU, black for
  non-vCPU work, white for no data (idle). [`sched_map_image`][vcpulab.plot.sched_map_image] gives the
  raw pixels.
* [`time_breakdown`][vcpulab.plot.time_breakdown] — stacked bars of where each vCPU's (or VM's) time went.
* [`policy_comparison`][vcpulab.plot.policy_comparison] — a metric per policy (or its gain over a baseline
  policy) with t / permutation-test intervals over seeds, a second factor as hue.
* [`steal_over_time`][vcpulab.plot.steal_over_time] (with the fair-share line), [`stats_over_time`][vcpulab.plot.stats_over_time]
  (one axes per stat) — real-KVM runs over time.
* [`exit_handling`][vcpulab.plot.exit_handling], [`halt_poll_window`][vcpulab.plot.halt_poll_window], [`wakeup_latency`][vcpulab.plot.wakeup_latency] —
  a traced real run (``run(..., trace=True)``, docs/tracing.md): exit
  handling-time histograms per reason, the halt-poll window over time,
  wake-up-to-run latency distributions per vCPU thread. [`sched_map`][vcpulab.plot.sched_map]
  draws a traced real run too (one row per host CPU of the run).
* [`validation`][vcpulab.plot.validation] — published vs simulated, case by case, with 95 % CIs
  (a [`vcpulab.validation.validate`][] frame).
"""

from __future__ import annotations

import colorsys
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from matplotlib.figure import Figure as _MplFigure

from vcpulab import _frames
from vcpulab._checks import N_PCPUS_RENAMED, check_bool, check_float, check_int, check_seq, check_type, renamed_since

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

__all__ = [
    "AUTO_MAP_COLUMNS",
    "DEFAULT_US_PER_PIXEL",
    "MAX_MAP_COLUMNS",
    "MAX_ROW_PX",
    "MAX_MAP_PCPUS",
    "MIN_MAP_PX",
    "BACKGROUND",
    "BLACK",
    "Figure",
    "IDLE",
    "MAX_US_PER_PIXEL",
    "SchedMap",
    "TIME_CATEGORIES",
    "WHITE",
    "auto_us_per_pixel",
    "exit_handling",
    "fair_share_steal_fraction",
    "halt_poll_window",
    "policy_comparison",
    "sched_map",
    "sched_map_codes",
    "sched_map_image",
    "stats_over_time",
    "steal_over_time",
    "time_breakdown",
    "validation",
    "vcpu_color",
    "wakeup_latency",
]


#: RGB of an idle host CPU in a sched map
WHITE = (255, 255, 255)
#: RGB of a non-vCPU task in a sched map
BLACK = (0, 0, 0)


class Figure(_MplFigure):  # type: ignore[misc,valid-type]
    """A matplotlib figure that shows exactly once in Jupyter.

    Figures are made through pyplot (so ``plt.show()`` shows them in a
    script, and a plot made in the middle of a cell shows at its end). As the
    value of a cell (``plot.sched_map(r)`` as a statement) it is shown as PNG
    and handed back from pyplot, so the inline backend does not show it a
    second time. vcpulab never selects a backend (no ``matplotlib.use``).
    """

    def _repr_png_(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=self.dpi)
        return buf.getvalue()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        plt = _plt()
        if "inline" in plt.get_backend():
            plt.close(self)  # the cell's value shows it; the backend would show it again
        display({"image/png": self._repr_png_(), "text/plain": repr(self)}, raw=True)


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    return plt


def _subplots(**kw: Any) -> tuple[Figure, Any]:
    return _plt().subplots(FigureClass=Figure, **kw)  # type: ignore[no-any-return]


def _figure(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """``ax``'s figure and ``ax``, or a new figure of ``figsize`` and its axes."""
    if ax is None:
        return _subplots(figsize=figsize)
    return ax.figure, ax


def vcpu_color(vm: int, vcpu: int, n_vms: int, n_vcpus: int) -> tuple[int, int, int]:
    """The colour of (vm, vcpu): hue by VM (evenly spaced), brightness by vCPU
    (from darker to lighter, never black or white). ``vm < 0``: black."""
    if vm < 0 or vcpu < 0:
        return BLACK
    hue = (vm % max(n_vms, 1)) / max(n_vms, 1)
    light = 0.30 + 0.45 * (vcpu / max(n_vcpus - 1, 1)) if n_vcpus > 1 else 0.5
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.85)
    return (round(r * 255), round(g * 255), round(b * 255))


def _as_int(x: Any) -> int:
    """A frame's scalar (``max()``, ``min()``) as an int."""
    return int(x)


def _rgb01(c: tuple[int, int, int]) -> tuple[float, float, float]:
    return (c[0] / 255, c[1] / 255, c[2] / 255)


def _trace_of(obj: Any) -> pl.DataFrame:
    trace = getattr(obj, "trace", obj)
    if trace is None:
        raise ValueError(
            "this result has no trace: run the simulation with trace=True (Config.trace), "
            "or a real run with vcpulab.experiment.run(..., trace=True)"
        )
    if not isinstance(trace, pl.DataFrame):
        raise TypeError(f"sched_map needs a Result with a trace or a trace DataFrame, got {type(obj).__name__}")
    need = {"pcpu", "start_ns", "end_ns", "vm", "vcpu"}
    missing = need - set(trace.columns)
    if missing:
        raise ValueError(f"trace is missing columns {sorted(missing)}")
    return trace


#: Code of [`sched_map_codes`][vcpulab.plot.sched_map_codes] for a non-vCPU task (a vCPU is ``vm * 65536 + vcpu``).
BACKGROUND = -1
#: Code of [`sched_map_codes`][vcpulab.plot.sched_map_codes] for an idle host CPU.
IDLE = -2


#: most columns (time bins) of a sched map
MAX_MAP_COLUMNS = 200_000
#: the widest column a sched map takes, µs (1000 s: wider says nothing a
#: single column would not)
MAX_US_PER_PIXEL = 1e9
#: the column width a sched map is drawn with when ``us_per_pixel`` is not
#: given and the window is short, µs (a 10-ms window: 1,000 columns)
DEFAULT_US_PER_PIXEL = 10.0
#: the most columns a sched map is drawn with when ``us_per_pixel`` is not
#: given: a longer window gets wider columns (1, 2 or 5 × 10^k µs)
AUTO_MAP_COLUMNS = 2000
#: most host-CPU rows of a sched map
MAX_MAP_PCPUS = 65536
#: most pixels a sched map's row may be tall
MAX_ROW_PX = 1024
#: fewest pixels a sched map's raster band is tall (rows of a map of few host CPUs are taller by default,
#: and a shorter raster gets blank margins), so that its axis labels do not run into the title
MIN_MAP_PX = 48


#: why ``pcpus=`` became ``n_pcpus=`` here (the DeprecationWarnings say it)
_COUNT_NAME = "a count of host CPUs; pcpus is a list of host CPU ids everywhere else"


def auto_us_per_pixel(span_ns: int) -> float:
    """The column width [`sched_map`][vcpulab.plot.sched_map] draws a window of
    ``span_ns`` with by default, µs: [`DEFAULT_US_PER_PIXEL`][vcpulab.plot.DEFAULT_US_PER_PIXEL],
    or for a window longer than [`AUTO_MAP_COLUMNS`][vcpulab.plot.AUTO_MAP_COLUMNS] such
    columns, the narrowest of 1, 2 or 5 × 10^k µs that fits it in that many."""
    need = max(int(span_ns), 0) / 1000.0 / AUTO_MAP_COLUMNS
    if need <= DEFAULT_US_PER_PIXEL:
        return DEFAULT_US_PER_PIXEL
    k = 10.0 ** np.floor(np.log10(need))  # k <= need < 10 k
    return float(min(next(m * k for m in (1.0, 2.0, 5.0, 10.0) if m * k >= need), MAX_US_PER_PIXEL))


def _check_window(start_ns: Any, end_ns: Any, n_pcpus: Any) -> None:
    """A sched map's window (ns, >= 0) and row count, checked before the trace is read."""
    if start_ns is not None:
        check_int("start_ns", start_ns, 0, 2**63 - 1)
    if end_ns is not None:
        check_int("end_ns", end_ns, 0, 2**63 - 1)
    if n_pcpus is not None:
        check_int("n_pcpus", n_pcpus, 1, MAX_MAP_PCPUS)


@renamed_since(N_PCPUS_RENAMED, _COUNT_NAME, pcpus="n_pcpus")
def sched_map_codes(
    obj: Any,
    us_per_pixel: float = 10.0,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    n_pcpus: int | None = None,
) -> np.ndarray:
    """What ran where: an int64 array of shape (n_pcpus, columns).

    Column ``c`` covers ``[start + c*w, start + (c+1)*w)`` with ``w =
    us_per_pixel`` µs and holds what ran on that host CPU at the column's
    midpoint: ``vm * 65536 + vcpu``, [`BACKGROUND`][vcpulab.plot.BACKGROUND] (-1) for a non-vCPU
    task, [`IDLE`][vcpulab.plot.IDLE] (-2) for nothing. ``obj`` is a simulator Result with a
    trace, a traced real Run, or a trace frame (pcpu, start_ns, end_ns, vm,
    vcpu). ``n_pcpus`` rows (default: as [`sched_map`][vcpulab.plot.sched_map] draws them, one
    per host CPU of the run: every host CPU of a simulator Result, idle
    ones included; a real run's traced CPUs in CPU order, row i the i-th of
    them; for a bare trace, rows up to its highest CPU; ``pcpus=`` before
    2026-12-05).
    """
    check_float("us_per_pixel", us_per_pixel, 0.0, MAX_US_PER_PIXEL, lo_open=True, unit="µs")
    _check_window(start_ns, end_ns, n_pcpus)
    trace, cpus = _run_rows(obj, n_pcpus)
    if cpus is not None:
        n_pcpus = len(cpus)
    elif n_pcpus is None:
        n_pcpus = _run_extent(obj)[0]
    if n_pcpus is not None and trace.height and _as_int(trace["pcpu"].max()) >= n_pcpus:
        raise ValueError(
            f"n_pcpus={n_pcpus} rows cannot hold this trace's host CPUs 0..{_as_int(trace['pcpu'].max())}: "
            "pass at least that many (or None: from the trace)"
        )
    n_rows = n_pcpus if n_pcpus is not None else (_as_int(trace["pcpu"].max()) + 1 if trace.height else 1)
    t0 = (_as_int(trace["start_ns"].min()) if trace.height else 0) if start_ns is None else int(start_ns)
    t1 = (_as_int(trace["end_ns"].max()) if trace.height else t0 + 1) if end_ns is None else int(end_ns)
    if t1 <= t0:
        raise ValueError(f"end_ns ({t1}) must be after start_ns ({t0})")
    w = us_per_pixel * 1000.0
    cols = int(np.ceil((t1 - t0) / w))
    if cols > MAX_MAP_COLUMNS:
        raise ValueError(
            f"{cols} columns is too wide (at most {MAX_MAP_COLUMNS}): raise us_per_pixel or narrow start_ns/end_ns"
        )
    out = np.full((n_rows, cols), IDLE, dtype=np.int64)
    if start_ns is not None or end_ns is not None:
        # a window: only its rows reach numpy (a 30 ms map of a one-second
        # 80-CPU trace is 3 % of its 11 M rows)
        trace = trace.filter((pl.col("end_ns") > t0) & (pl.col("start_ns") < t1))
    if not trace.height:
        return out
    start = trace["start_ns"].to_numpy().astype(np.float64)
    end = trace["end_ns"].to_numpy().astype(np.float64)
    # columns whose midpoint t0 + (c + 0.5) w lies in [start, end)
    c0 = np.clip(np.ceil((start - t0) / w - 0.5), 0, cols).astype(np.int64)
    c1 = np.clip(np.ceil((end - t0) / w - 0.5), 0, cols).astype(np.int64)
    n = np.maximum(0, c1 - c0)
    if n.sum() == 0:
        return out
    vm = trace["vm"].to_numpy().astype(np.int64)
    code = np.where(vm < 0, BACKGROUND, vm * 65536 + trace["vcpu"].to_numpy().astype(np.int64))
    rows = np.repeat(trace["pcpu"].to_numpy().astype(np.int64), n)
    offs = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    out[rows, np.repeat(c0, n) + offs] = np.repeat(code, n)
    return out


def _palette_size(trace: pl.DataFrame) -> tuple[int, int]:
    """(VMs, vCPUs a VM) the sched-map colours are spread over: the trace's
    largest VM and vCPU numbers + 1 (a non-vCPU row's -1 is never the
    largest where a vCPU ran), read from whole columns, not from filtered
    copies of the trace (a one-second 80-CPU trace is 11 M rows)."""
    top_vm, top_vcpu = (trace[c].max() for c in ("vm", "vcpu"))
    n_vms = max(_as_int(top_vm) + 1, 1) if top_vm is not None else 1
    n_vcpus = max(_as_int(top_vcpu) + 1, 1) if top_vcpu is not None else 1
    return n_vms, n_vcpus


@renamed_since(N_PCPUS_RENAMED, _COUNT_NAME, pcpus="n_pcpus")
def sched_map_image(
    obj: Any,
    us_per_pixel: float = 10.0,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    row_px: int = 1,
    n_pcpus: int | None = None,
) -> np.ndarray:
    """The sched-map raster: a (n_pcpus*row_px, columns, 3) uint8 RGB array of
    [`sched_map_codes`][vcpulab.plot.sched_map_codes] coloured by [`vcpu_color`][vcpulab.plot.vcpu_color] (one hue per VM, one
    brightness per vCPU), black for a non-vCPU task, white for idle."""
    check_int("row_px", row_px, 1, MAX_ROW_PX)
    codes = sched_map_codes(obj, us_per_pixel, start_ns=start_ns, end_ns=end_ns, n_pcpus=n_pcpus)
    n_vms, n_vcpus = _palette_size(_trace_of(obj))
    # one colour per distinct code, then one look-up per pixel
    uniq, inverse = np.unique(codes, return_inverse=True)
    palette = np.array(
        [
            WHITE if c == IDLE else BLACK if c == BACKGROUND else vcpu_color(c // 65536, c % 65536, n_vms, n_vcpus)
            for c in uniq.tolist()
        ],
        dtype=np.uint8,
    ).reshape(-1, 3)
    img = palette[inverse.reshape(codes.shape)]
    return np.repeat(img, row_px, axis=0)


class SchedMap(Figure):
    """A rendered sched map: a [`Figure`][vcpulab.plot.Figure] (it displays as a cell's value in
    Jupyter) that also holds the raster.

    Attributes:
        image: the RGB raster, (host CPUs × ``row_px``, columns, 3) uint8.
        us_per_pixel: µs of simulated time per column.
        start_ns: simulated time of the first column's left edge, ns.
        raster_origin_px: (x, y) of the raster's top-left pixel in the saved
            PNG (it is placed pixel for pixel, unscaled).
    """

    image: np.ndarray
    us_per_pixel: float
    start_ns: int
    raster_origin_px: tuple[int, int]

    def save(self, path: str | Path) -> Path:
        """Save the figure as PNG (the raster is placed pixel for pixel)."""
        p = Path(path)
        self.savefig(p, dpi=self.dpi)
        return p


def _real_cpus(obj: Any) -> list[int] | None:
    """The traced host CPUs of a real run (``Run.trace_info``), or None."""
    info = getattr(obj, "trace_info", None)
    return sorted(int(c) for c in info["cpus"]) if isinstance(info, dict) and info.get("cpus") else None


def _run_rows(obj: Any, n_pcpus: int | None) -> tuple[pl.DataFrame, list[int] | None]:
    """``obj``'s trace with one row per host CPU of a traced real run (its CPUs
    in CPU order, ``pcpu`` renumbered to the row) and those CPUs; the trace as
    it is, and None, for a simulator Result, a bare frame, or an explicit
    ``n_pcpus``."""
    trace = _trace_of(obj)
    cpus = _real_cpus(obj) if n_pcpus is None else None
    if cpus is None:
        return trace, None
    row = {c: i for i, c in enumerate(cpus)}
    return trace.filter(pl.col("pcpu").is_in(cpus)).with_columns(
        pl.col("pcpu").replace_strict(row, return_dtype=pl.Int64)
    ), cpus


def _run_extent(obj: Any) -> tuple[int | None, int | None, int | None]:
    """(host CPUs, start_ns, end_ns) of a simulator Result or a traced real
    run, or Nones for a bare trace."""
    info = getattr(obj, "trace_info", None)
    if isinstance(info, dict) and "window_ns" in info:
        return None, 0, int(info["window_ns"])
    summary = getattr(obj, "summary", None)
    if isinstance(summary, pl.DataFrame) and summary.height and "n_pcpus" in summary.columns:
        end = int(summary["duration_ns"][0]) if "duration_ns" in summary.columns else None
        return int(summary["n_pcpus"][0]), 0, end
    return None, None, None


@renamed_since(N_PCPUS_RENAMED, _COUNT_NAME, pcpus="n_pcpus")
def sched_map(
    obj: Any,
    path: str | Path | None = None,
    *,
    us_per_pixel: float | None = None,
    row_px: int | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    n_pcpus: int | None = None,
    legend: bool | None = None,
    title: str | None = None,
    compact: bool = False,
) -> SchedMap:
    """Draw a simulator result's trace as a sched map and optionally save it
    to ``path`` (PNG).

    The ``perf sched map`` picture of the 2012 PLE threads (see
    docs/sources.md): rows are host CPUs (every host CPU of the run, also
    those that stayed idle), columns are time (the x axis is labelled in ms
    of simulated time); one hue per VM, one brightness per vCPU; black: a
    non-vCPU task; white: idle. The raster is placed pixel for pixel, each
    column is ``us_per_pixel`` µs (default: 10 µs, or for a window longer
    than 20 ms the narrowest 1, 2 or 5 × 10^k µs that draws it in at most
    2,000 columns, [`auto_us_per_pixel`][vcpulab.plot.auto_us_per_pixel]:
    a one-second run is 2,000 columns of 500 µs) and each host CPU ``row_px`` pixels tall
    (default 4, or taller for a map of fewer than 12 host CPUs so the rows
    fill [`MIN_MAP_PX`][vcpulab.plot.MIN_MAP_PX]; 1 in ``compact`` mode, which also drops the legend and
    thins the CPU labels: a dense overview of a large host). A raster
    shorter than ``MIN_MAP_PX`` gets blank margins above and below, so the
    title and the axis labels never overlap. By default the
    whole run is drawn (``start_ns``/``end_ns`` narrow it); ``n_pcpus``
    (``pcpus=`` before 2026-12-05) overrides the number of rows for a bare
    trace frame.

    Returns a [`SchedMap`][vcpulab.plot.SchedMap], a matplotlib figure: as the last statement
    of a Jupyter cell it displays.
    """
    if us_per_pixel is not None:
        check_float("us_per_pixel", us_per_pixel, 0.0, MAX_US_PER_PIXEL, lo_open=True, unit="µs")
    _check_window(start_ns, end_ns, n_pcpus)
    if row_px is not None:
        check_int("row_px", row_px, 1, MAX_ROW_PX)
    if legend is not None:
        check_bool("legend", legend)
    if title is not None:
        check_type("title", title, str)
    check_bool("compact", compact)
    if path is not None:
        check_type("path", path, (str, os.PathLike))
    plt = _plt()
    from matplotlib.patches import Patch

    run_pcpus, run_start, run_end = _run_extent(obj)
    # a real run: one row per host CPU it used, labelled with the CPU's number
    trace, cpu_labels = _run_rows(obj, n_pcpus)
    if cpu_labels is not None:
        run_pcpus = len(cpu_labels)
    if n_pcpus is None:
        n_pcpus = run_pcpus
    if n_pcpus is None:
        n_pcpus = _as_int(trace["pcpu"].max()) + 1 if trace.height else 1
    t0 = (
        start_ns
        if start_ns is not None
        else (run_start if run_start is not None else (_as_int(trace["start_ns"].min()) if trace.height else 0))
    )
    t1 = end_ns if end_ns is not None else run_end
    if us_per_pixel is None:
        last = t1 if t1 is not None else (_as_int(trace["end_ns"].max()) if trace.height else t0 + 1)
        us_per_pixel = auto_us_per_pixel(last - t0)
    # a map of few host CPUs (a real run on one CPU) gets taller rows by default, so it is no thin strip
    rpx = row_px if row_px is not None else (1 if compact else max(4, -(-MIN_MAP_PX // max(n_pcpus, 1))))
    show_legend = (not compact) if legend is None else legend
    img = sched_map_image(trace, us_per_pixel, start_ns=t0, end_ns=t1, row_px=rpx, n_pcpus=n_pcpus)
    h, w = img.shape[:2]
    t1 = t0 + int(round(w * us_per_pixel * 1000))
    vm_ids = sorted(int(v) for v in trace["vm"].unique().drop_nulls() if v >= 0)
    n_vms, n_vcpus = _palette_size(trace)
    dpi = 100
    left, right = (44, 12)
    # the raster is placed unscaled; a short one gets blank margins above and below, so that the band
    # is at least MIN_MAP_PX tall and the vertical "host CPU" label ends below the title and above the time axis
    pad = max(0, MIN_MAP_PX - h)
    top = (22 if title else 8) + pad // 2
    bottom = 36 + pad - pad // 2  # the time axis
    legend_px = (30 + 16 * ((len(vm_ids) + 2 + 3) // 4)) if show_legend else 0
    fig_w, fig_h = left + max(w, 280) + right, top + h + bottom + legend_px
    fig = plt.figure(FigureClass=SchedMap, figsize=(fig_w / dpi, fig_h / dpi), dpi=dpi)
    assert isinstance(fig, SchedMap)
    y0 = bottom + legend_px  # the raster's bottom edge, from the figure's bottom
    # as opaque RGBA: matplotlib resamples an RGB raster through float
    # copies of twice the size (1.2 GB against 0.6 GB to save a
    # 30,000-column map, measured); the pixels are the same
    rgba = np.empty(img.shape[:2] + (4,), dtype=np.uint8)
    rgba[..., :3], rgba[..., 3] = img, 255
    fig.figimage(rgba, xo=left, yo=y0, origin="upper")
    # an invisible axes exactly over the raster carries the time and host-CPU axes
    ax = fig.add_axes((left / fig_w, y0 / fig_h, w / fig_w, h / fig_h))
    ax.patch.set_alpha(0)
    for sp in ax.spines.values():
        sp.set_visible(False)
    ax.set_xlim(t0 / 1e6, t1 / 1e6)
    ax.set_ylim(n_pcpus, 0)
    ax.tick_params(direction="out", labelsize=7, length=3)
    step = max(1, int(np.ceil(n_pcpus / max(1, h / 12))))  # labels at least 12 px apart
    names = cpu_labels if cpu_labels is not None else list(range(n_pcpus))
    ax.set_yticks(np.arange(0, n_pcpus, step) + 0.5, [str(names[i]) for i in range(0, n_pcpus, step)])
    ax.set_ylabel("host CPU", fontsize=7)
    ax.set_xlabel("time since the run's start (ms)" if cpu_labels is not None else "simulated time (ms)", fontsize=7)
    if title:
        fig.text(0.01, 1 - 4 / fig_h, title, va="top", ha="left", fontsize=9)
    if show_legend:
        handles = [
            Patch(facecolor=_rgb01(vcpu_color(v, n_vcpus // 2, n_vms, n_vcpus)), label=f"VM {v}") for v in vm_ids
        ]
        handles += [
            Patch(facecolor="black", label="non-vCPU task"),
            Patch(facecolor="white", edgecolor="grey", label="idle"),
        ]
        fig.legend(
            handles=handles,
            loc="lower left",
            ncol=4,
            fontsize=7,
            frameon=False,
            title=f"{n_pcpus} host CPUs × {w} columns of {us_per_pixel:g} µs; vCPUs shaded by id",
            title_fontsize=7,
        )
    fig.image = img
    fig.us_per_pixel = us_per_pixel
    fig.start_ns = t0
    fig.raster_origin_px = (left, top)
    if path is not None:
        fig.save(path)
    return fig


#: The simulator's per-vCPU time categories (they sum to the run's duration),
#: from the Rust engine: [`vcpulab.sim.TIME_CATEGORIES`][].
TIME_CATEGORIES = _frames.TIME_CATEGORIES
_CATEGORY_LABELS = {
    "wait_ns": "runnable, waiting (steal)",
    "idle_poll_ns": "guest idle poll",
    "polling_ns": "host halt polling",
    "ple_ns": "PLE exits",
}


def time_breakdown(
    obj: Any, by: str = "vcpu", ax: Axes | None = None, categories: Sequence[str] | None = None
) -> _MplFigure:
    """Stacked bars of time categories per vCPU (``by="vcpu"``) or VM (``"vm"``)
    from a simulator Result (its ``vcpus`` frame) or such a frame."""
    df = getattr(obj, "vcpus", obj)
    if not isinstance(df, pl.DataFrame):
        raise ValueError("time_breakdown needs a simulator Result or its vcpus DataFrame")
    if categories is not None:
        categories = check_seq("categories", categories, "time-category column names (None: all)", min_len=1)
        unknown = [c for c in categories if not isinstance(c, str) or c not in df.columns]
        if unknown:
            raise ValueError(
                f"categories: {unknown} are not columns of the frame; time categories are {TIME_CATEGORIES}"
            )
    cats = [c for c in (categories or TIME_CATEGORIES) if c in df.columns]
    if not cats:
        raise ValueError(f"no time-category columns found; expected some of {TIME_CATEGORIES}")
    if by == "vm":
        df = df.group_by("vm", maintain_order=True).agg([pl.col(c).sum() for c in cats]).sort("vm")
        labels = [str(v) for v in df["vm"]]  # the axis label says "VM"
    elif by == "vcpu":
        labels = [f"{vm}.{vc}" for vm, vc in zip(df["vm"], df["vcpu"])]
    else:
        raise ValueError(f"by must be 'vcpu' or 'vm', got {by!r}")
    total = sum(df[c].to_numpy().astype(float) for c in cats)
    total = np.where(total > 0, total, 1.0)
    fig, ax = _figure(ax, figsize=(max(4, 0.25 * len(labels) + 1) + 2.2, 3.2))
    bottom = np.zeros(len(labels))
    for c in cats:
        frac = df[c].to_numpy().astype(float) / total
        ax.bar(
            range(len(labels)), frac, bottom=bottom, label=_CATEGORY_LABELS.get(c, c.removesuffix("_ns")), width=0.85
        )
        bottom += frac
    ax.set_ylabel("fraction of time")
    ax.set_ylim(0, 1)
    ax.set_xlabel("vCPU (vm.vcpu)" if by == "vcpu" else "VM")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    _bar_ticks(ax, labels, fontsize=7)
    return fig


def _bar_ticks(ax: Any, labels: Sequence[str], fontsize: float) -> None:
    """Tick labels for one bar each, sized to the axes' width: level if
    they fit side by side, upright if not, and only every k-th one if even
    upright ones would touch. The width is the axes' now; an axes shrunk
    later (a figure's ``tight_layout`` with more panels) is measured at 80 %
    of it, which covers a legend or a neighbour taking room."""
    n = len(labels)
    width_pt = 0.8 * ax.get_window_extent().width * 72 / ax.figure.dpi
    per_bar = width_pt / max(n, 1)
    char_pt = 0.62 * fontsize  # a digit's advance in the default sans-serif font
    widest = max((len(t) for t in labels), default=0) * char_pt + 0.2 * fontsize
    line = 1.4 * fontsize
    rotation = 0 if widest <= per_bar else 90
    step = 1 if (rotation == 0 or line <= per_bar) else int(np.ceil(line / per_bar))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=rotation, fontsize=fontsize)


def policy_comparison(
    df: pl.DataFrame,
    metric: str,
    by: str = "policy",
    seed: str = "seed",
    ax: Axes | None = None,
    *,
    baseline: Any = None,
    hue: str | None = None,
    pair_by: str | None = None,
    confidence: float = 0.95,
) -> _MplFigure:
    """``metric`` per level of ``by`` (bars), with confidence intervals over
    the rows (seeds/repetitions) of each group.

    * Without ``baseline``: the mean per group with its t-interval
      ([`vcpulab.analysis.mean_interval`][], Student's t from scipy; no
      interval for a single row).
    * With ``baseline`` (a level of ``by``, e.g. ``"no_yield"``): the gain of
      every other level over it, in %, with the interval of
      [`vcpulab.analysis.compare`][] (``relative_ci``; ``pair_by="seed"``
      pairs runs with the same seed, the tighter design when seeds share
      their random draws). A line marks 0: bars crossing it are not gains.
    * ``hue``: a second factor (e.g. ``"overcommit"``): one bar per level,
      side by side, and the baseline is taken within each hue level.

    ``seed`` names the repetition column in the title.
    """
    import warnings

    from vcpulab.analysis import LowPowerWarning, compare, mean_interval

    check_type("df", df, pl.DataFrame)
    check_float("confidence", confidence, 0.0, 1.0, lo_open=True)
    if confidence >= 1.0:
        raise ValueError(f"confidence must be below 1, got {confidence}")
    need = (
        [("metric", metric), ("by", by)] + ([("hue", hue)] if hue else []) + ([("pair_by", pair_by)] if pair_by else [])
    )
    for arg, col in need:
        if not isinstance(col, str) or col not in df.columns:
            raise ValueError(f"{arg}: column {col!r} not in the frame (columns: {df.columns})")
    levels = list(dict.fromkeys(df[by].to_list()))
    hues = list(dict.fromkeys(df[hue].to_list())) if hue else [None]
    if baseline is not None:
        if baseline not in levels:
            raise ValueError(f"baseline {baseline!r} is not a level of {by!r} ({levels})")
        levels = [lv for lv in levels if lv != baseline]
    fig, ax = _figure(ax, figsize=(max(3.5, 0.9 * len(levels) * max(1, len(hues) * 0.6) + 2.0), 3.2))
    width = 0.8 / len(hues)
    for j, h in enumerate(hues):
        sub = df if h is None else df.filter(pl.col(hue) == h)  # type: ignore[arg-type]
        ys, lo, hi = [], [], []
        for lv in levels:
            rows = sub.filter(pl.col(by) == lv)
            if baseline is None:
                v = rows[metric].cast(pl.Float64).to_numpy()
                m = float(v.mean()) if len(v) else float("nan")
                ci = mean_interval(v, confidence)
            else:
                base_rows = sub.filter(pl.col(by) == baseline)
                if rows.height == 0 or base_rows.height == 0:
                    m, ci = float("nan"), (float("nan"), float("nan"))
                else:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", LowPowerWarning)  # the plot shows intervals, not p
                        cmp = compare(base_rows, rows, metric, pair_by=pair_by, confidence=confidence)
                    m, ci = 100 * cmp.relative, (100 * cmp.relative_ci[0], 100 * cmp.relative_ci[1])
            ys.append(m)
            lo.append(m - ci[0] if np.isfinite(ci[0]) else 0.0)
            hi.append(ci[1] - m if np.isfinite(ci[1]) else 0.0)
        x = np.arange(len(levels)) + (j - (len(hues) - 1) / 2) * width
        ax.bar(
            x,
            ys,
            width=width * 0.95,
            yerr=[lo, hi],
            capsize=3,
            label=None if h is None else str(h),
            color=None if hue else "#4878a8",
        )
    ax.set_xticks(range(len(levels)), [str(x) for x in levels], rotation=20, fontsize=8)
    interval = f"{confidence:.0%} CI over {seed}s" + (f", paired by {pair_by}" if pair_by else "")
    if baseline is None:
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} by {by} (mean ± {interval})", fontsize=9)
    else:
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel(f"gain over {baseline} (%)")
        ax.set_title(f"{metric}: gain over {baseline} ({interval})", fontsize=9)
    if hue:
        ax.legend(title=hue, fontsize=7, title_fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def fair_share_steal_fraction(placement: Any) -> float:
    """The steal fraction each vCPU would see if the host CPUs of a run were
    shared fairly among its vCPUs: ``1 - min(1, CPUs / vCPUs)`` over the
    union of the placement's CPUs (``Run.placement`` or a mapping
    ``(vm, vcpu) -> [cpus]``). Exact for the common case where every vCPU may
    run on the same CPUs; an estimate otherwise."""
    mapping = getattr(placement, "placement", placement)
    if not mapping:
        raise ValueError("fair_share_steal_fraction needs a placement (vm, vcpu) -> host CPUs")
    cpus = {c for cs in mapping.values() for c in cs}
    return 1.0 - min(1.0, len(cpus) / len(mapping))


def steal_over_time(run: Any, ax: Axes | None = None, fair_share: bool = True) -> _MplFigure:
    """Steal time (ms) of each vCPU of a real-KVM [`vcpulab.experiment.Run`][]
    over time, with the fair-share line (dashed: the steal each vCPU would
    accumulate if the run's host CPUs were shared fairly, see
    [`fair_share_steal_fraction`][vcpulab.plot.fair_share_steal_fraction])."""
    s = run.samples
    fig, ax = _figure(ax, figsize=(6, 3))
    multi_vm = s["vm"].n_unique() > 1
    t_end_ms = 0.0
    for (vm, vcpu), rows in s.sort("t_ns").group_by(["vm", "vcpu"], maintain_order=True):
        t = (rows["t_ns"] - rows["t_ns"][0]).to_numpy() / 1e6
        t_end_ms = max(t_end_ms, float(t[-1]) if len(t) else 0.0)
        label = f"VM {vm} vCPU {vcpu}" if multi_vm else f"vCPU {vcpu}"
        ax.plot(t, (rows["steal_ns"] - rows["steal_ns"][0]).to_numpy() / 1e6, label=label)
    if fair_share and getattr(run, "placement", None):
        f = fair_share_steal_fraction(run)
        ax.plot([0, t_end_ms], [0, f * t_end_ms], "k--", lw=1, label=f"fair share ({f:.0%} steal)")
    ax.set_xlabel("time since the first sample (ms)")
    ax.set_ylabel("steal (ms)")
    ax.legend(fontsize=7, ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def _active_intervals(run: Any, stats: Sequence[str]) -> pl.DataFrame:
    """One row per sampling interval of a real run: its end ``t_ns``, each
    stat summed over the vCPUs, and ``active_ns``, the part of the interval
    in which the vCPUs ran: from the first thread's start (``Run.threads``'
    start_ns) to the last thread's end (start_ns + wall_ns) or the run's
    deadline (``config["duration_s"]``), whichever is first.

    The last sample is taken after the threads are joined, so the last
    interval is mostly (often wholly) after the vCPUs stopped: its delta is
    about 0 and its rate a drop to 0 that the guest never saw. Intervals
    less than half inside the threads' span are dropped; the others' rates
    divide by ``active_ns``."""
    d = run.deltas()
    g = d.group_by("t_ns").agg([pl.col(s).sum() for s in stats] + [pl.col("dt_ns").max()]).sort("t_ns")
    g = g.with_columns(pl.col("dt_ns").cast(pl.Int64).alias("active_ns"))
    th = getattr(run, "threads", None)
    if isinstance(th, pl.DataFrame) and th.height and {"start_ns", "wall_ns"} <= set(th.columns):
        lo = _as_int(th["start_ns"].min())
        hi = _as_int((th["start_ns"] + th["wall_ns"]).max())
        # a thread's wall time includes its teardown; its vCPU stopped at the run's deadline
        duration_s = (getattr(run, "config", None) or {}).get("duration_s")
        if isinstance(duration_s, (int, float)) and duration_s > 0:
            hi = min(hi, int(duration_s * 1e9))
        end = pl.min_horizontal(pl.col("t_ns").cast(pl.Int64), pl.lit(hi))
        begin = pl.max_horizontal(pl.col("t_ns").cast(pl.Int64) - pl.col("dt_ns"), pl.lit(lo))
        g = g.with_columns((end - begin).alias("active_ns")).filter(pl.col("active_ns") * 2 >= pl.col("dt_ns"))
    return g


def stats_over_time(run: Any, stats: Sequence[str], ax: Axes | None = None, per_second: bool = True) -> _MplFigure:
    """KVM vCPU stats of a real run over time, as rates per second (or raw
    counts per interval), summed over the vCPUs (the y label says so). Each
    stat gets its own axes (stacked, shared time axis), since stats differ by
    orders of magnitude; with ``ax`` given, all go on it.

    A rate is the interval's delta over the time the vCPU threads ran in it:
    the last interval, which ends after the threads were joined, is dropped
    when less than half of it is inside the run (it drew a drop to 0)."""
    stats = check_seq("stats", stats, "stat names", min_len=1)
    check_bool("per_second", per_second)
    missing = [s for s in stats if not isinstance(s, str) or s not in run.samples.columns]
    if missing:
        raise ValueError(f"unknown stats {missing}; the samples have {run.samples.columns}")
    if not stats:
        raise ValueError("stats_over_time needs at least one stat name")
    g = _active_intervals(run, stats)
    n = run.samples.select("vm", "vcpu").unique().height
    summed = f"sum of {n} vCPUs" if n > 1 else "1 vCPU"
    fig: Any
    if ax is None:
        fig, axs = _subplots(nrows=len(stats), sharex=True, figsize=(6, 1.2 + 1.4 * len(stats)), squeeze=False)
        axes = [row[0] for row in axs]
    else:
        fig, axes = ax.figure, [ax] * len(stats)
    t0 = int(run.samples["t_ns"].min()) if run.samples.height else 0
    for a, stat in zip(axes, stats):
        y = g[stat].to_numpy() / (g["active_ns"].to_numpy() / 1e9) if per_second else g[stat].to_numpy()
        a.plot((g["t_ns"].to_numpy() - t0) / 1e6, y, label=stat)
        a.set_ylabel(f"{stat}\n{'per s' if per_second else 'per interval'}\n({summed})", fontsize=8)
        if ax is not None:
            a.legend(fontsize=7)
    axes[-1].set_xlabel("time since the first sample (ms)")
    fig.tight_layout()
    return fig


def _frame_of(run: Any, name: str) -> pl.DataFrame:
    from vcpulab.analysis import _traced_frame

    return _traced_frame(run, name)


def _log_bins(v: np.ndarray, n: int = 40) -> np.ndarray:
    lo = max(float(v.min()), 1.0) if v.size else 1.0
    hi = max(float(v.max()), lo * 10) if v.size else 10.0
    return np.logspace(np.log10(lo), np.log10(hi), n)


def exit_handling(run: Any, top: int = 6, ax: Axes | None = None) -> _MplFigure:
    """Histograms of exit handling time (``kvm_exit`` to the next
    ``kvm_entry``, µs, log scale) of a traced real run, one per exit reason
    (the ``top`` most frequent), counts on the y axis; the legend gives each
    reason's count and p50 ([`vcpulab.analysis.exits_by_reason`][])."""
    from vcpulab.analysis import exits_by_reason

    check_int("top", top, 1, 1000)
    e = _frame_of(run, "exits").drop_nulls("handling_ns")
    fig, ax = _figure(ax, figsize=(6, 3))
    if not e.height:
        ax.text(
            0.5, 0.5, "no exits with a handling time in this trace", ha="center", va="center", transform=ax.transAxes
        )
        return fig  # type: ignore[no-any-return]
    summary = exits_by_reason(e).head(top)
    bins = _log_bins(e["handling_ns"].to_numpy() / 1e3).tolist()
    for r in summary.iter_rows(named=True):
        v = e.filter(pl.col("reason") == r["reason"])["handling_ns"].to_numpy() / 1e3
        ax.hist(
            v,
            bins=bins,
            histtype="step",
            lw=1.2,
            label=f"{r['reason']} (n={r['count']}, p50 {r['handling_p50_ns'] / 1e3:.1f} µs)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("handling time (µs)")
    ax.set_ylabel("exits")
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig  # type: ignore[no-any-return]


def halt_poll_window(run: Any, ax: Axes | None = None) -> _MplFigure:
    """The halt-poll window of each vCPU over a traced real run (µs, steps at
    each halt, from ``kvm_halt_poll_ns``), with each halt marked at its
    length: filled where it ended in the poll loop, hollow where it waited."""
    h = _frame_of(run, "halts")
    fig, ax = _figure(ax, figsize=(6, 3))
    multi_vm = h["vm"].n_unique() > 1
    for (vm, vcpu), g in h.sort("time_ns").group_by(["vm", "vcpu"], maintain_order=True):
        t = g["time_ns"].to_numpy() / 1e6
        label = f"VM {vm} vCPU {vcpu}" if multi_vm else f"vCPU {vcpu}"
        w = g["window_ns"].to_numpy().astype(float) / 1e3  # nulls become NaN: no step drawn
        (line,) = ax.step(t, w, where="post", label=f"{label} window")
        p = g["polled"].to_numpy()
        ns = g["ns"].to_numpy() / 1e3
        ax.scatter(t[p], ns[p], s=6, color=line.get_color(), label=f"{label} halt, polled")
        ax.scatter(t[~p], ns[~p], s=6, facecolors="none", edgecolors=line.get_color(), label=f"{label} halt, waited")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("time since the run's start (ms)")
    ax.set_ylabel("µs")
    ax.legend(fontsize=7, frameon=False, ncol=2)
    fig.tight_layout()
    return fig  # type: ignore[no-any-return]


def wakeup_latency(run: Any, ax: Axes | None = None) -> _MplFigure:
    """Wake-up-to-run latency distributions of a traced real run, one
    empirical CDF per vCPU thread (µs, log scale), coloured as in the sched
    map ([`vcpu_color`][vcpulab.plot.vcpu_color])."""
    w = _frame_of(run, "wakeups")
    fig, ax = _figure(ax, figsize=(6, 3))
    n_vms = int(w["vm"].to_numpy().max()) + 1 if w.height else 1
    n_vcpus = int(w["vcpu"].to_numpy().max()) + 1 if w.height else 1
    for (vm, vcpu), g in w.group_by(["vm", "vcpu"], maintain_order=True):
        v = np.sort(g["latency_ns"].to_numpy()) / 1e3
        y = np.arange(1, len(v) + 1) / len(v)
        c = np.array(vcpu_color(int(vm), int(vcpu), n_vms, n_vcpus)) / 255
        ax.step(
            np.maximum(v, 1e-3),
            y,
            where="post",
            color=c,
            label=f"VM {vm} vCPU {vcpu} (n={len(v)}, p50 {np.median(v):.1f} µs)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("wake-up to run (µs)")
    ax.set_ylabel("fraction of wake-ups")
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig  # type: ignore[no-any-return]


def _effect(metric: str, v: float | None) -> float:
    """A comparison's effect on one axis: the change for change metrics, ratio − 1 for ratios (0 = no effect)."""
    if v is None or not np.isfinite(v):
        return float("nan")
    return float(v) - 1.0 if metric == "ratio" else float(v)


#: the colours of [`validation`][vcpulab.plot.validation], one meaning in both panels
_VERDICT_COLOURS = {
    "right direction, within 2x": "#2e8b57",
    "right direction (or a share), not within 2x": "#e69500",
    "wrong direction": "#c0392b",
}


def _verdict_colour(direction_ok: bool | None, within_2x: bool | None) -> str:
    """A case's colour in [`validation`][vcpulab.plot.validation]: green, orange or red (a share has no direction)."""
    green, orange, red = _VERDICT_COLOURS.values()
    if direction_ok is False:
        return red
    return green if within_2x else orange


def _symlog_ticks(lim: float, linthresh: float) -> list[float]:
    """0 and ±10^k outside the linear band of a symlog axis reaching ±lim: the default
    locator also labels ±10^k inside the band, where the labels run into each other."""
    k0 = int(np.ceil(np.log10(linthresh)))
    k1 = int(np.floor(np.log10(max(lim, 10.0**k0))))
    pos = [10.0**k for k in range(k0, k1 + 1)]
    return [-x for x in reversed(pos)] + [0.0] + pos


def validation(df: pl.DataFrame, path: str | Path | None = None) -> Figure:
    """Published vs simulated for a [`vcpulab.validation.validate`][] frame.

    Left: each simulated comparison with a published magnitude, published
    effect (x) against the simulated mean (y) with its 95 % CI, on symlog
    axes (effect = the change for change metrics, ratio − 1 for ratios); the
    diagonal is agreement and the dashed lines bound "within 2x". Right:
    simulated ÷ published per case (log scale; the band is within 2x),
    shares included. The colours mean the same in both panels (one legend):
    green: right direction and within 2x, orange: right direction (or a
    share, which has no direction) but not within 2x, red: wrong direction.
    Saved as PNG when ``path`` is given."""
    need = {"case", "metric", "published", "sim_mean", "ci_low", "ci_high", "direction_ok", "within_2x", "status"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"validation: not a validate() frame, missing columns {sorted(missing)}")
    sim = df.filter(
        (pl.col("status") == "simulated") & pl.col("published").is_not_null() & pl.col("sim_mean").is_not_null()
    )
    fig, (ax, bx) = _subplots(
        nrows=1, ncols=2, figsize=(12, max(4.0, 0.22 * sim.height + 1.5)), gridspec_kw={"width_ratios": [1.1, 1]}
    )
    comp = sim.filter(pl.col("metric") != "share")
    lim = 1e-3
    for r in comp.iter_rows(named=True):
        m = r["metric"]
        x, y = _effect(m, r["published"]), _effect(m, r["sim_mean"])
        lo, hi = _effect(m, r["ci_low"]), _effect(m, r["ci_high"])
        err = [[max(0.0, y - lo) if np.isfinite(lo) else 0.0], [max(0.0, hi - y) if np.isfinite(hi) else 0.0]]
        c = _verdict_colour(r["direction_ok"], r["within_2x"])
        ax.errorbar([x], [y], yerr=err, fmt="o", color=c, ms=4, capsize=2, gid=f"case {r['case']}")
        lim = max(lim, abs(x), abs(y))
    t = np.linspace(-lim * 1.2, lim * 1.2, 400)
    ax.plot(t, t, color="0.3", lw=0.8)
    for f in (2.0, 0.5):
        ax.plot(t, f * t, color="0.6", lw=0.7, ls="--")
    ax.axhline(0, color="0.8", lw=0.6)
    ax.axvline(0, color="0.8", lw=0.6)
    ax.set_xscale("symlog", linthresh=0.05)
    ax.set_yscale("symlog", linthresh=0.05)
    ticks = _symlog_ticks(lim * 1.2, 0.05)
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xlim(-lim * 1.2, lim * 1.2)
    ax.set_ylim(-lim * 1.2, lim * 1.2)
    ax.tick_params(labelsize=7)
    ax.set_xlabel("published effect (change, or ratio − 1)")
    ax.set_ylabel("simulated effect (mean, 95 % CI)")
    ax.set_title(f"{comp.height} comparisons: published vs simulated effect", fontsize=8)
    rat = sim.filter(pl.col("sim_over_pub").is_not_null() & (pl.col("sim_over_pub") > 0))
    ys = np.arange(rat.height)
    vals = rat["sim_over_pub"].to_numpy()
    cols = [_verdict_colour(d, w) for d, w in zip(rat["direction_ok"].to_list(), rat["within_2x"].to_list())]
    bars = bx.barh(ys, vals, color=cols, left=0)
    for b, name in zip(bars, rat["case"].to_list()):
        b.set_gid(f"case {name}")
    bx.set_xscale("log")
    bx.axvspan(0.5, 2.0, color="#2e8b57", alpha=0.12)
    bx.axvline(1.0, color="0.3", lw=0.8)
    bx.set_yticks(ys, rat["case"].to_list(), fontsize=6)
    bx.invert_yaxis()
    bx.set_xlabel("simulated ÷ published (log)")
    bx.set_title("magnitude per case (band: within 2x); opposite-sign cases are not shown", fontsize=8)
    from matplotlib.patches import Patch

    fig.legend(
        handles=[Patch(facecolor=c, label=k) for k, c in _VERDICT_COLOURS.items()],
        loc="lower center",
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    if path is not None:
        fig.savefig(str(path), dpi=110)
    return fig
