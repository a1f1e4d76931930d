"""Is a twin's miss the model's or the host's? Paired calibrations and trials.

    python benches/twins_paired.py [--grid wake|policies|coscheduling] [--rounds 10] [--cells 1,2,4]
                                   [--duration-s 0.3] [--window-trace] [--out FILE]

Each round calibrates this host afresh (vcpulab.twins.calibrate) and at once
runs one real trial of each chosen cell of a grid (``--grid``: by default
vcpulab.twins.wake_placement_grid, by index: 0-5 with the default poll;
``policies`` / ``coscheduling``: twins.policy_grid / coscheduling_grid, a
ticket lock under vcpulab's scheduler) and its twin from that calibration
(seed 0), so every twin is made from a measurement seconds before its trial.
It prints each pair (the wake cells' items per second, the spin-lock cells'
acquisitions per second), then per cell the median of twin / real,
its range, how many pairs the twin is above, and the correlation of twin and
real across rounds: a miss that leans one way is the model's or the
calibration's; one that goes both ways and follows the host (a low
correlation) is this host's drift (docs/twins.md, "Where the twin still
disagrees", item 11).

``--window-trace`` also runs one more trial of the first cell with KVM's
``kvm_vcpu_wakeup`` and ``kvm_halt_poll_ns`` tracepoints on (tracefs, mounted
where missing; needs root) and prints, per vCPU, its halts caught by the poll
and blocked, the halts' lengths and the poll window's changes: where a
worker's gaps sit against ``halt_poll_ns``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable

import numpy as np
import polars as pl

from vcpulab import twins

#: each grid's cells and the throughput its pairs compare
GRIDS: dict[str, tuple[Callable[..., list[twins.Experiment]], str]] = {
    "wake": (twins.wake_placement_grid, "items_per_s"),
    "policies": (twins.policy_grid, "acq_per_s"),
    "coscheduling": (twins.coscheduling_grid, "acq_per_s"),
}


def without_corun(cal: twins.Calibration) -> twins.Calibration:
    """``cal`` less its co-run speed: its twins' CPUs do not slow each other."""
    vals = {k: v for k, v in cal.values.items() if k != "corun_speed_pct"}
    return twins.Calibration(values=vals, cpu=cal.cpu, provenance=cal.provenance)


#: the twins of each real trial: (name, column suffix)
VARIANTS = (("speed process and co-run", ""), ("process, no co-run", "_no_corun"), ("one speed", "_one_speed"))


def pairs(grid: str, cells: list[int] | None, rounds: int, duration_s: float, seeds: int) -> pl.DataFrame:
    make, metric = GRIDS[grid]
    exps = make(duration_s=duration_s)
    exps = [exps[i] for i in cells] if cells is not None else exps
    rows = []
    for k in range(rounds):
        cal = twins.calibrate(refresh=True)
        speed = twins.host_speed_of(cal.values)
        corun = float(cal["corun_speed_pct"]) if "corun_speed_pct" in cal.values else float("nan")
        for e in exps:
            real_runs = twins.run_real(e, trials=1, cal=cal)
            sims = []
            for c_, hs in ((cal, True), (without_corun(cal), True), (cal, False)):
                c = twins.compare(e, trials=1, seeds=seeds, cal=c_, real=real_runs, load="measured", host_speed=hs)
                m = c.filter(pl.col("metric") == metric)
                real = float(m["real"][0])
                sims.append(float(m["sim"][0]))
            row = dict(
                round=k,
                cell=twins.cell_name(e),
                metric=metric,
                path_insn_ns=cal["path_insn_ns"],
                slow_pct=speed.slow_pct,
                slow_share=speed.slow_dwell_ns / max(speed.slow_dwell_ns + speed.fast_dwell_ns, 1),
                corun_speed_pct=corun,
                real=real,
            )
            for (_, suffix), s_ in zip(VARIANTS, sims):
                row[f"twin{suffix}"] = s_
                row[f"ratio{suffix}"] = s_ / real if real > 0 else float("nan")
            rows.append(row)
            print(
                f"round {k} {row['cell']}: path_insn_ns {cal['path_insn_ns']:.0f}, slow {speed.slow_pct} % "
                f"{row['slow_share']:.1%} of the time, co-run {corun:.0f} %; {metric} real {real:.0f}; "
                + ", ".join(f"{n} {s_:.0f} ({s_ / real:.2f})" for (n, _), s_ in zip(VARIANTS, sims)),
                flush=True,
            )
    return pl.DataFrame(rows)


def summary(df: pl.DataFrame) -> pl.DataFrame:
    """Per cell and twin (``VARIANTS``): the median twin / real, its range,
    pairs the twin is above, within 25 %, and the twin's correlation with the
    real trial across rounds."""
    out = []
    for cell in df["cell"].unique(maintain_order=True):
        d = df.filter(pl.col("cell") == cell)
        for name, suffix in VARIANTS:
            twin_col, ratio_col = f"twin{suffix}", f"ratio{suffix}"
            r, s = d["real"].to_numpy(), d[twin_col].to_numpy()
            corr = float(np.corrcoef(r, s)[0, 1]) if len(r) > 2 and r.std() > 0 and s.std() > 0 else float("nan")
            out.append(
                dict(
                    cell=cell,
                    twin=name,
                    pairs=d.height,
                    median_ratio=float(d[ratio_col].median()),  # type: ignore[arg-type]
                    min_ratio=float(d[ratio_col].min()),  # type: ignore[arg-type]
                    max_ratio=float(d[ratio_col].max()),  # type: ignore[arg-type]
                    twin_above=int((d[ratio_col] > 1).sum()),
                    within_25pct=int(((d[ratio_col] - 1).abs() <= 0.25).sum()),
                    corr_real_twin=corr,
                )
            )
    return pl.DataFrame(out)


_WAKE = re.compile(r"-(\d+)\s+\[\d+\].*?: kvm_vcpu_wakeup: (wait|poll) time (\d+) ns")
_WINDOW = re.compile(r"-(\d+)\s+\[\d+\].*?: kvm_halt_poll_ns: vcpu \d+: halt_poll_ns (\d+) \((grow|shrink)")


def window_trace(cell: int, duration_s: float) -> None:
    """One traced trial of ``cell``: each vCPU's halts and its poll window's changes."""
    from vcpulab import _mounts

    try:
        _mounts.ensure_mounted("tracefs")
    except OSError as err:
        print(f"window trace: no tracefs ({err}; mounting it needs root)")
        return
    root = "/sys/kernel/tracing" if os.path.exists("/sys/kernel/tracing/events") else "/sys/kernel/debug/tracing"
    events = ("kvm/kvm_vcpu_wakeup", "kvm/kvm_halt_poll_ns")

    def w(p: str, v: str) -> None:
        with open(f"{root}/{p}", "w") as f:
            f.write(v)

    e = twins.wake_placement_grid(duration_s=duration_s)[cell]
    w("tracing_on", "0")
    w("trace", "")
    for ev in events:
        w(f"events/{ev}/enable", "1")
    try:
        w("tracing_on", "1")
        r = e.run()
    finally:
        w("tracing_on", "0")
        for ev in events:
            w(f"events/{ev}/enable", "0")
    with open(f"{root}/trace") as f:
        text = f.read()
    w("trace", "")
    vcpu_of = {int(t): int(v) for t, v in zip(r.threads["tid"], r.threads["vcpu"])}
    items = float(r.results["rounds"][0])
    print(f"\nwindow trace: {twins.cell_name(e)}, {items / r.wall_s:.0f} items/s")
    halts: dict[int, list[tuple[str, int]]] = {}
    changes: dict[int, list[str]] = {}
    for line in text.splitlines():
        if m := _WAKE.search(line):
            v = vcpu_of.get(int(m.group(1)))
            if v is not None:
                halts.setdefault(v, []).append((m.group(2), int(m.group(3))))
                changes.setdefault(v, []).append(f"{m.group(2)[0]}{int(m.group(3)) // 1000}")
        elif m := _WINDOW.search(line):
            v = vcpu_of.get(int(m.group(1)))
            if v is not None:
                changes.setdefault(v, []).append(f"{m.group(3)[0]}{int(m.group(2)) // 1000}")
    for v in sorted(halts):
        ns = np.array([x[1] for x in halts[v]]) / 1e3
        polled = sum(1 for x in halts[v] if x[0] == "poll")
        n_changes = sum(1 for x in changes[v] if x[0] in "gs")
        print(
            f"vCPU {v}: {len(ns)} halts, {polled} caught by the poll, lengths p10/p50/p90 "
            f"{np.percentile(ns, 10):.0f}/{np.median(ns):.0f}/{np.percentile(ns, 90):.0f} us, "
            f"{n_changes} window changes"
        )
        print("   first 60 (p: caught, w: blocked, halt length in us; g/s: the window grown/shrunk to, us):")
        print("   " + " ".join(changes[v][:60]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=sorted(GRIDS), default="wake")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument(
        "--cells",
        help="indices into the grid's cells, comma-separated (default: 1,2,4 of the wake grid, every cell of the others)",
    )
    ap.add_argument("--duration-s", type=float, default=0.3)
    ap.add_argument("--seeds", type=int, default=3, help="twin seeds per pair (default 3)")
    ap.add_argument(
        "--probe-s", type=float, help="seconds of each calibration's speed probe (default twins.SPEED_PROBE_S)"
    )
    ap.add_argument("--window-trace", action="store_true")
    ap.add_argument("--out", help="Parquet file for the pairs")
    a = ap.parse_args()
    cells = [int(x) for x in a.cells.split(",")] if a.cells else ([1, 2, 4] if a.grid == "wake" else None)
    if a.window_trace and a.grid != "wake":
        ap.error("--window-trace traces a wake cell's halts: use it with --grid wake")
    if a.probe_s is not None:
        import vcpulab.twins._calibration as _cal

        _cal.SPEED_PROBE_S = a.probe_s
    t0 = time.monotonic()
    df = pairs(a.grid, cells, a.rounds, a.duration_s, a.seeds)
    with pl.Config(tbl_width_chars=200, fmt_str_lengths=50):
        print(summary(df))
    if a.out:
        df.write_parquet(a.out)
    if a.window_trace:
        window_trace(cells[0] if cells else 1, a.duration_s)
    print(f"({time.monotonic() - t0:.0f} s, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
