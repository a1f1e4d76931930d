"""Real KVM vs the simulator's twins, over a grid of experiments.

    python benches/twins_grid.py [--small | --policies | --coscheduling | --wake-placement [--poll 0,400] [--work N]] [--trials 3] [--seeds 3] [--load measured|one_task|none]
                                 [--per-cell-calibration | --sequential | --order-seed N] [--speed-step 0.1] [--out DIR] [--markdown FILE]

Calibrates this host (vcpulab.twins.calibrate), runs every cell of
vcpulab.twins.default_grid on real KVM (``--trials`` times, each recording what
else ran on its CPUs) and its twin (``--seeds`` seeds), and prints every cell,
the between-cell directions and the agreement line. ``--out`` writes the cells
and directions as Parquet, ``--markdown`` the tables as Markdown (docs/twins.md
quotes one). ``--policies`` runs vcpulab.twins.policy_grid instead: the same
lock under vcpulab's own vCPU scheduler, one cell per policy; ``--coscheduling``
vcpulab.twins.coscheduling_grid (3 vCPUs on 2 CPUs under round_robin,
relaxed_co and pinned); ``--wake-placement`` vcpulab.twins.wake_placement_grid
(WakePlacement's two rules under pinned, round_robin and the host's scheduler; ``--poll`` the
workers' mailbox polls, one set of cells each; ``--work`` the loop iterations per item, by default chosen
from the calibration so that the waker's halt is twice KVM's halt-polling window, vcpulab.twins.wake_work). The machine's other load changes real results: every cell reports
the largest share of its CPUs' time other tasks took.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import polars as pl

from vcpulab import twins


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="the CI's reduced grid")
    ap.add_argument(
        "--policies",
        action="store_true",
        help="the policy axis instead (twins.policy_grid: one ticket-lock VM under vcpulab's scheduler, "
        "round_robin and directed_yield with each simulator policy; docs/scheduler.md)",
    )
    ap.add_argument(
        "--coscheduling",
        action="store_true",
        help="the co-scheduling axis instead (twins.coscheduling_grid: one ticket-lock VM of 3 vCPUs on 2 CPUs "
        "under round_robin, relaxed_co and pinned)",
    )
    ap.add_argument(
        "--wake-placement",
        action="store_true",
        help="the wake-up placement axis instead (twins.wake_placement_grid: WakePlacement's two rules, 3 vCPUs "
        "on 2 CPUs, under pinned, round_robin and the host's scheduler)",
    )
    ap.add_argument(
        "--poll",
        default="0",
        help="with --wake-placement: the workers' mailbox polls before they halt (WakePlacement.poll), "
        "comma-separated, one set of cells each (default 0)",
    )
    ap.add_argument(
        "--work",
        type=int,
        default=None,
        help="with --wake-placement: loop iterations per item (WakePlacement.work; default: from the "
        "calibration, twins.wake_work: the waker's halt at twice KVM's halt-polling window)",
    )
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--duration-s",
        "--duration",
        dest="duration_s",
        type=float,
        default=1.0,
        help="seconds per real run, spin-lock and timer cells (--duration: the former name)",
    )
    ap.add_argument("--load", choices=("measured", "one_task", "none"), default="measured")
    ap.add_argument(
        "--trace",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="trace the real trials (run(trace=True)) and compare run slices and wake-up latencies (KS); "
        "off by default: tracing slows this host's emulated guests (docs/twins.md, section 4)",
    )
    ap.add_argument(
        "--per-cell-calibration",
        action="store_true",
        help="calibrate again right before each cell's real trials; that cell's twin uses it "
        "(twins.grid(per_cell_calibration=True): the host drifts between a grid's first calibration and its last cell)",
    )
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="run each cell's trials together, cell after cell, every twin at the calibration's costs "
        "(twins.grid(interleave=False), the grid before 0.3.33); by default the trials run in rounds over the "
        "cells, shuffled each round, a cost pair before each, and every twin gets the pairs' median costs "
        "(docs/twins.md item 16)",
    )
    ap.add_argument("--order-seed", type=int, default=0, help="the seed of the interleaved rounds' order")
    ap.add_argument(
        "--host-speed",
        choices=("process", "work", "off"),
        default="process",
        help="the twins' host speed (twins.twin's host_speed): the calibration's speed process on the guest's "
        "work and the host's paths (default), on the work only, or one speed",
    )
    ap.add_argument(
        "--speed-step",
        type=float,
        default=None,
        help="also run every twin with its emulated instructions this much faster and slower (e.g. 0.1) and "
        "name the cells whose metrics flip (twins.grid(speed_step=...), docs/twins.md item 13)",
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--markdown", type=Path)
    a = ap.parse_args()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("twins_grid: /dev/kvm is not usable here; nothing to compare")
        return 0
    t0 = time.time()
    cal = twins.calibrate()
    with pl.Config(tbl_rows=100, tbl_cols=10, tbl_width_chars=250, fmt_str_lengths=200, float_precision=3):
        print(cal.frame())
    if a.policies:
        exps = twins.policy_grid(duration_s=a.duration_s)
    elif a.coscheduling:
        exps = twins.coscheduling_grid(duration_s=a.duration_s)
    elif a.wake_placement:
        exps = twins.wake_placement_grid(
            duration_s=a.duration_s, poll=[int(x) for x in a.poll.split(",")], work=a.work, cal=cal
        )
        print(f"wake grid: {exps[0].workload.work} loop iterations per item")  # type: ignore[attr-defined]
    else:
        exps = twins.default_grid(small=a.small, duration_s=a.duration_s)
    g = twins.grid(
        exps,
        trials=a.trials,
        seeds=a.seeds,
        cal=cal,
        load=a.load,
        trace=a.trace,
        per_cell_calibration=a.per_cell_calibration,
        interleave=None if not a.sequential else False,
        order_seed=a.order_seed,
        host_speed={"process": True, "work": "work", "off": False}[a.host_speed],
        speed_step=a.speed_step,
    )
    print(g.table())
    with pl.Config(tbl_rows=200, tbl_cols=10, tbl_width_chars=250, fmt_str_lengths=60, float_precision=3):
        print(g.directions.filter(pl.col("significant")))
    for name, why in g.no_twin:
        print(f"no twin: {name}: {why}")
    for name, why in g.no_real:
        print(f"no real result: {name}: {why}")
    for edge in g.summary().get("speed_edges", []):
        print(f"on a speed edge: {edge}")
    print(f"({time.time() - t0:.0f} s, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(g.line())
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        g.cells.write_parquet(a.out / "twins_cells.parquet")
        g.directions.write_parquet(a.out / "twins_directions.parquet")
        cal.frame().write_parquet(a.out / "twins_calibration.parquet")
        if g.cost_pairs is not None:
            g.cost_pairs.write_parquet(a.out / "twins_cost_pairs.parquet")
    if a.markdown:
        d = g.directions.filter(pl.col("significant"))
        dl = ["| metric | factor | low → high | real diff | sim diff | agree |", "|---|---|---|---|---|---|"]
        for r in d.iter_rows(named=True):
            dl.append(
                f"| {r['metric']} | {r['factor']} | {r['low']} → {r['high']} | {r['real_diff']:.3g} | "
                f"{r['sim_diff']:.3g} | {'yes' if r['agree'] else '**no**'} |"
            )
        a.markdown.write_text(
            f"{g.line()}\n\n## Cells\n\n{g.table()}\n\n## Directions (significant in real)\n\n"
            + "\n".join(dl)
            + "\n"
            + "".join(f"\nno twin: {n}: {w}\n" for n, w in g.no_twin)
            + "".join(f"\nno real result: {n}: {w}\n" for n, w in g.no_real)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
