"""Pictures of runs (matplotlib, imported lazily).

* :func:`sched_map` — the ``perf sched map`` bitmap of digest §4: host CPUs as
  rows, time as columns, one hue per VM and one brightness per vCPU, black for
  non-vCPU work, white for no data (idle). :func:`sched_map_image` gives the
  raw pixels.
* :func:`time_breakdown` — stacked bars of where each vCPU's (or VM's) time went.
* :func:`policy_comparison` — a metric per policy with 95 % error bars over seeds.
* :func:`steal_over_time`, :func:`stats_over_time` — real-KVM runs over time.
* :func:`validation` — published vs simulated, case by case, with 95 % CIs
  (a :func:`vcpulab.validation.validate` frame).
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import polars as pl

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "BACKGROUND",
    "IDLE",
    "SchedMap",
    "policy_comparison",
    "sched_map",
    "sched_map_codes",
    "sched_map_image",
    "stats_over_time",
    "steal_over_time",
    "time_breakdown",
    "validation",
    "vcpu_color",
]

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline") and not _has_display():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _has_display() -> bool:
    import os

    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def vcpu_color(vm: int, vcpu: int, n_vms: int, n_vcpus: int) -> tuple[int, int, int]:
    """The colour of (vm, vcpu): hue by VM (evenly spaced), brightness by vCPU
    (from darker to lighter, never black or white). ``vm < 0``: black."""
    if vm < 0 or vcpu < 0:
        return BLACK
    hue = (vm % max(n_vms, 1)) / max(n_vms, 1)
    light = 0.30 + 0.45 * (vcpu / max(n_vcpus - 1, 1)) if n_vcpus > 1 else 0.5
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.85)
    return (round(r * 255), round(g * 255), round(b * 255))


def _trace_of(obj: Any) -> pl.DataFrame:
    trace = getattr(obj, "trace", obj)
    if trace is None:
        raise ValueError("this result has no trace: run the simulation with trace=True (Config.trace)")
    if not isinstance(trace, pl.DataFrame):
        raise ValueError(f"sched_map needs a Result with a trace or a trace DataFrame, got {type(obj).__name__}")
    need = {"pcpu", "start_ns", "end_ns", "vm", "vcpu"}
    missing = need - set(trace.columns)
    if missing:
        raise ValueError(f"trace is missing columns {sorted(missing)}")
    return trace


#: Codes of :func:`sched_map_codes`: ``vm * 65536 + vcpu`` for a vCPU, and these.
BACKGROUND, IDLE = -1, -2


def sched_map_codes(
    obj: Any,
    us_per_pixel: float = 10.0,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    pcpus: int | None = None,
) -> np.ndarray:
    """What ran where: an int64 array of shape (pcpus, columns).

    Column ``c`` covers ``[start + c*w, start + (c+1)*w)`` with ``w =
    us_per_pixel`` µs and holds what ran on that host CPU at the column's
    midpoint: ``vm * 65536 + vcpu``, :data:`BACKGROUND` (-1) for a non-vCPU
    task, :data:`IDLE` (-2) for nothing. ``obj`` is a simulator Result with a
    trace, or a trace frame (pcpu, start_ns, end_ns, vm, vcpu).
    """
    if not us_per_pixel > 0:
        raise ValueError(f"us_per_pixel must be positive, got {us_per_pixel}")
    trace = _trace_of(obj)
    n_pcpus = pcpus if pcpus is not None else (int(trace["pcpu"].max()) + 1 if trace.height else 1)
    t0 = (int(trace["start_ns"].min()) if trace.height else 0) if start_ns is None else int(start_ns)
    t1 = (int(trace["end_ns"].max()) if trace.height else t0 + 1) if end_ns is None else int(end_ns)
    if t1 <= t0:
        raise ValueError(f"end_ns ({t1}) must be after start_ns ({t0})")
    w = us_per_pixel * 1000.0
    cols = int(np.ceil((t1 - t0) / w))
    if cols > 200_000:
        raise ValueError(f"{cols} columns is too wide: raise us_per_pixel or narrow start_ns/end_ns")
    out = np.full((n_pcpus, cols), IDLE, dtype=np.int64)
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


def sched_map_image(
    obj: Any,
    us_per_pixel: float = 10.0,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    row_px: int = 1,
    pcpus: int | None = None,
) -> np.ndarray:
    """The sched-map raster: a (pcpus*row_px, columns, 3) uint8 RGB array of
    :func:`sched_map_codes` coloured by :func:`vcpu_color` (one hue per VM, one
    brightness per vCPU), black for a non-vCPU task, white for idle."""
    if row_px < 1:
        raise ValueError(f"row_px must be >= 1, got {row_px}")
    codes = sched_map_codes(obj, us_per_pixel, start_ns=start_ns, end_ns=end_ns, pcpus=pcpus)
    trace = _trace_of(obj).filter(pl.col("vm") >= 0)
    n_vms = int(trace["vm"].max()) + 1 if trace.height else 1
    n_vcpus = int(trace["vcpu"].max()) + 1 if trace.height else 1
    img = np.full(codes.shape + (3,), 255, dtype=np.uint8)
    for c in np.unique(codes).tolist():
        if c == IDLE:
            continue
        img[codes == c] = BLACK if c == BACKGROUND else vcpu_color(c // 65536, c % 65536, n_vms, n_vcpus)
    return np.repeat(img, row_px, axis=0)


@dataclass
class SchedMap:
    """A rendered sched map: the raster, and the figure with its legend."""

    image: np.ndarray
    figure: Figure
    us_per_pixel: float
    start_ns: int

    def save(self, path: str | Path) -> Path:
        """Save the figure as PNG (the raster is placed pixel for pixel)."""
        p = Path(path)
        self.figure.savefig(p, dpi=100)
        return p

    def _repr_png_(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def sched_map(
    obj: Any,
    path: str | Path | None = None,
    *,
    us_per_pixel: float = 10.0,
    row_px: int = 4,
    start_ns: int | None = None,
    end_ns: int | None = None,
    legend: bool = True,
    title: str | None = None,
) -> SchedMap:
    """Draw a simulator result's trace as a sched map (digest §4) and
    optionally save it to ``path`` (PNG).

    The raster is placed with ``figimage`` so each pixel is one column of
    ``us_per_pixel`` µs on one host CPU (``row_px`` pixels tall); the legend
    (one entry per VM, shaded by vCPU; black: non-vCPU task; white: idle) sits
    below it.
    """
    plt = _plt()
    from matplotlib.patches import Patch

    trace = _trace_of(obj)
    t0 = int(trace["start_ns"].min()) if start_ns is None else start_ns
    img = sched_map_image(trace, us_per_pixel, start_ns=t0, end_ns=end_ns, row_px=row_px)
    h, w = img.shape[:2]
    vm_ids = sorted(int(v) for v in trace.filter(pl.col("vm") >= 0)["vm"].unique())
    n_vms = (max(vm_ids) + 1) if vm_ids else 1
    n_vcpus = int(trace.filter(pl.col("vm") >= 0)["vcpu"].max() or 0) + 1
    legend_px = (40 + 16 * ((len(vm_ids) + 2 + 3) // 4)) if legend else 0
    title_px = 24 if title else 0
    dpi = 100
    fig = plt.figure(figsize=(max(w, 320) / dpi, (h + legend_px + title_px) / dpi), dpi=dpi)
    fig.figimage(img, xo=0, yo=legend_px, origin="upper")
    if title:
        fig.text(0.01, 1 - 4 / (h + legend_px + title_px), title, va="top", ha="left", fontsize=9)
    if legend:
        handles = [Patch(facecolor=np.array(vcpu_color(v, n_vcpus // 2, n_vms, n_vcpus)) / 255, label=f"VM {v}") for v in vm_ids]
        handles += [Patch(facecolor="black", label="non-vCPU task"), Patch(facecolor="white", edgecolor="grey", label="idle")]
        fig.legend(handles=handles, loc="lower left", ncol=4, fontsize=7, frameon=False,
                   title=f"{h // row_px} host CPUs × {w} columns of {us_per_pixel:g} µs; vCPUs shaded by id",
                   title_fontsize=7)  # fmt: skip
    sm = SchedMap(image=img, figure=fig, us_per_pixel=us_per_pixel, start_ns=t0)
    if path is not None:
        sm.save(path)
    return sm


#: The simulator's per-vCPU time categories; they sum to the run's duration.
TIME_CATEGORIES = ("useful_ns", "spin_ns", "ple_ns", "exit_ns", "idle_poll_ns", "wait_ns", "halted_ns")
_CATEGORY_LABELS = {"wait_ns": "runnable, waiting (steal)", "idle_poll_ns": "guest idle poll", "ple_ns": "PLE exits"}


def time_breakdown(obj: Any, by: str = "vcpu", ax: Axes | None = None, categories: Sequence[str] | None = None) -> Figure:
    """Stacked bars of time categories per vCPU (``by="vcpu"``) or VM (``"vm"``)
    from a simulator Result (its ``vcpus`` frame) or such a frame."""
    plt = _plt()
    df = getattr(obj, "vcpus", obj)
    if not isinstance(df, pl.DataFrame):
        raise ValueError("time_breakdown needs a simulator Result or its vcpus DataFrame")
    cats = [c for c in (categories or TIME_CATEGORIES) if c in df.columns]
    if not cats:
        raise ValueError(f"no time-category columns found; expected some of {TIME_CATEGORIES}")
    if by == "vm":
        df = df.group_by("vm", maintain_order=True).agg([pl.col(c).sum() for c in cats]).sort("vm")
        labels = [f"VM {v}" for v in df["vm"]]
    elif by == "vcpu":
        labels = [f"{vm}.{vc}" for vm, vc in zip(df["vm"], df["vcpu"])]
    else:
        raise ValueError(f"by must be 'vcpu' or 'vm', got {by!r}")
    total = sum(df[c].to_numpy().astype(float) for c in cats)
    total = np.where(total > 0, total, 1.0)
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4, 0.25 * len(labels) + 1) + 2.2, 3.2))
    else:
        fig = ax.figure
    bottom = np.zeros(len(labels))
    for c in cats:
        frac = df[c].to_numpy().astype(float) / total
        ax.bar(range(len(labels)), frac, bottom=bottom, label=_CATEGORY_LABELS.get(c, c.removesuffix("_ns")), width=0.85)
        bottom += frac
    ax.set_xticks(range(len(labels)), labels, rotation=90 if len(labels) > 16 else 0, fontsize=7)
    ax.set_ylabel("fraction of time")
    ax.set_ylim(0, 1)
    ax.set_xlabel("vCPU (vm.vcpu)" if by == "vcpu" else "")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def policy_comparison(
    df: pl.DataFrame, metric: str, by: str = "policy", seed: str = "seed", ax: Axes | None = None
) -> Figure:
    """Mean of ``metric`` per ``by`` group with 95 % confidence intervals over
    the rows (seeds/repetitions) of each group (t-interval; a single row has none)."""
    plt = _plt()
    for c in (metric, by):
        if c not in df.columns:
            raise ValueError(f"column {c!r} not in the frame (columns: {df.columns})")
    g = df.group_by(by, maintain_order=True).agg(
        pl.col(metric).mean().alias("mean"), pl.col(metric).std().alias("std"), pl.len().alias("n")
    )
    from math import sqrt

    t975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
    err = [
        (t975.get(int(n) - 1, 1.96) * float(s) / sqrt(n)) if n > 1 and s is not None else 0.0
        for s, n in zip(g["std"], g["n"])
    ]
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(3.5, 0.9 * g.height + 1.5), 3.2))
    else:
        fig = ax.figure
    ax.bar(range(g.height), g["mean"].to_numpy(), yerr=err, capsize=4, color="#4878a8")
    ax.set_xticks(range(g.height), [str(x) for x in g[by]], rotation=20, fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by {by} (mean ± 95 % CI over {seed}s)", fontsize=9)
    fig.tight_layout()
    return fig


def steal_over_time(run: Any, ax: Axes | None = None) -> Figure:
    """Steal time (ms) of each vCPU of a real-KVM :class:`vcpulab.experiment.Run` over time."""
    plt = _plt()
    s = run.samples
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3))
    else:
        fig = ax.figure
    for (vm, vcpu), rows in s.sort("t_ns").group_by(["vm", "vcpu"], maintain_order=True):
        ax.plot(rows["t_ns"].to_numpy() / 1e6, (rows["steal_ns"] - rows["steal_ns"][0]).to_numpy() / 1e6, label=f"{vm}.{vcpu}")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("steal (ms)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    return fig


def stats_over_time(run: Any, stats: Sequence[str], ax: Axes | None = None, per_second: bool = True) -> Figure:
    """KVM vCPU stats of a real run over time, as rates per second (or raw counts)."""
    plt = _plt()
    missing = [s for s in stats if s not in run.samples.columns]
    if missing:
        raise ValueError(f"unknown stats {missing}; the samples have {run.samples.columns}")
    d = run.deltas()
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3))
    else:
        fig = ax.figure
    for stat in stats:
        g = d.group_by("t_ns").agg(pl.col(stat).sum(), pl.col("dt_ns").max()).sort("t_ns")
        y = g[stat].to_numpy() / (g["dt_ns"].to_numpy() / 1e9) if per_second else g[stat].to_numpy()
        ax.plot(g["t_ns"].to_numpy() / 1e6, y, label=stat)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("per second (all vCPUs)" if per_second else "per interval")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _effect(metric: str, v: float | None) -> float:
    """A comparison's effect on one axis: the change for change metrics, ratio − 1 for ratios (0 = no effect)."""
    if v is None or not np.isfinite(v):
        return float("nan")
    return float(v) - 1.0 if metric == "ratio" else float(v)


def validation(df: pl.DataFrame, path: str | Path | None = None) -> Figure:
    """Published vs simulated for a :func:`vcpulab.validation.validate` frame.

    Left: each simulated comparison with a published magnitude, published
    effect (x) against the simulated mean (y) with its 95 % CI, on symlog
    axes (effect = the change for change metrics, ratio − 1 for ratios); the
    diagonal is agreement and the dashed lines bound "within 2x"; green: right
    direction and within 2x, orange: right direction only, red: wrong
    direction. Right: simulated ÷ published per case (log scale; the band is
    within 2x), shares included. Saved as PNG when ``path`` is given."""
    need = {"case", "metric", "published", "sim_mean", "ci_low", "ci_high", "direction_ok", "within_2x", "status"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"validation: not a validate() frame, missing columns {sorted(missing)}")
    plt = _plt()
    sim = df.filter((pl.col("status") == "simulated") & pl.col("published").is_not_null() & pl.col("sim_mean").is_not_null())
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, max(4.0, 0.22 * sim.height + 1.5)), gridspec_kw={"width_ratios": [1.1, 1]})
    comp = sim.filter(pl.col("metric") != "share")
    lim = 1e-3
    for r in comp.iter_rows(named=True):
        m = r["metric"]
        x, y = _effect(m, r["published"]), _effect(m, r["sim_mean"])
        lo, hi = _effect(m, r["ci_low"]), _effect(m, r["ci_high"])
        err = [[max(0.0, y - lo) if np.isfinite(lo) else 0.0], [max(0.0, hi - y) if np.isfinite(hi) else 0.0]]
        c = "#2e8b57" if r["direction_ok"] and r["within_2x"] else ("#e69500" if r["direction_ok"] else "#c0392b")
        ax.errorbar([x], [y], yerr=err, fmt="o", color=c, ms=4, capsize=2)
        lim = max(lim, abs(x), abs(y))
    t = np.linspace(-lim * 1.2, lim * 1.2, 400)
    ax.plot(t, t, color="0.3", lw=0.8)
    for f in (2.0, 0.5):
        ax.plot(t, f * t, color="0.6", lw=0.7, ls="--")
    ax.axhline(0, color="0.8", lw=0.6)
    ax.axvline(0, color="0.8", lw=0.6)
    ax.set_xscale("symlog", linthresh=0.05)
    ax.set_yscale("symlog", linthresh=0.05)
    ax.set_xlabel("published effect (change, or ratio − 1)")
    ax.set_ylabel("simulated effect (mean, 95 % CI)")
    ax.set_title(f"{comp.height} comparisons: green = right direction and within 2x, orange = direction only, red = wrong",
                 fontsize=8)  # fmt: skip
    rat = sim.filter(pl.col("sim_over_pub").is_not_null() & (pl.col("sim_over_pub") > 0))
    ys = np.arange(rat.height)
    vals = rat["sim_over_pub"].to_numpy()
    cols = ["#2e8b57" if w else "#c0392b" for w in rat["within_2x"].to_list()]
    bx.barh(ys, vals, color=cols, left=0)
    bx.set_xscale("log")
    bx.axvspan(0.5, 2.0, color="#2e8b57", alpha=0.12)
    bx.axvline(1.0, color="0.3", lw=0.8)
    bx.set_yticks(ys, rat["case"].to_list(), fontsize=6)
    bx.invert_yaxis()
    bx.set_xlabel("simulated ÷ published (log)")
    bx.set_title("magnitude per case (band: within 2x); wrong-sign cases are not shown", fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(str(path), dpi=110)
    return fig
