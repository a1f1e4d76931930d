"""Real KVM vs the simulator's twins, decision by decision, under vcpulab's schedulers.

    python benches/schedule_twins.py [--policies | --coscheduling | --wake-placement] [--trials 3] [--seeds 3]
                                     [--by why_out|why_in] [--rank] [--markdown FILE]

Calibrates this host (vcpulab.twins.calibrate) once, then for every cell of the
chosen grid under one of vcpulab's schedulers (default: the wake-placement
grid's round_robin and pinned cells, vcpulab.twins.wake_placement_grid with its
work from the calibration; ``--policies``: vcpulab.twins.policy_grid;
``--coscheduling``: vcpulab.twins.coscheduling_grid) runs the real trials and
the traced twin (vcpulab.twins.run_both) and prints
vcpulab.twins.compare_schedules: per vCPU and reason, the token holds per
second and their medians, 90th percentiles and KS distance (``--rank``: each
run's vCPUs named by their rank in it, for cells whose roles fall on different
vCPUs in different runs, as ``oracle``'s starved vCPU). The summary line
counts the per-vCPU rows with at least 20 holds on each side whose rate and
median hold agree within 25 %, and those whose KS distance is below 0.3.
The machine's other load changes real results: each cell prints the largest
share of its CPUs' time other tasks took.
"""

from __future__ import annotations

import argparse
import sys
import time

import polars as pl

from vcpulab import twins

#: fewest holds on each side for a per-vCPU row to be scored
MIN_HOLDS = 20
#: a rate or median hold "agrees" within this relative error
AGREE = 0.25
#: a hold distribution "agrees" below this KS distance
KS_AGREE = 0.3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--policies", action="store_true", help="twins.policy_grid (directed-yield policies, one CPU)")
    g.add_argument("--coscheduling", action="store_true", help="twins.coscheduling_grid (3 vCPUs on 2 CPUs)")
    g.add_argument("--wake-placement", action="store_true", help="twins.wake_placement_grid (the default)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--by", choices=("why_out", "why_in"), default="why_out")
    ap.add_argument("--rank", action="store_true", help="name each run's vCPUs by their rank in it (0: most holds)")
    ap.add_argument("--markdown", help="write the tables as Markdown to this file")
    args = ap.parse_args()

    t0 = time.time()
    cal = twins.calibrate()
    if args.policies:
        cells = twins.policy_grid()
    elif args.coscheduling:
        cells = twins.coscheduling_grid()
    else:
        cells = [e for e in twins.wake_placement_grid(cal=cal) if e.scheduler is not None]
    pl.Config.set_tbl_rows(60)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(220)
    print(
        f"calibration: path_insn_ns {cal['path_insn_ns']:.0f}, loop_insn_ns {cal['loop_insn_ns']:.0f}; "
        f"{len(cells)} cells, {args.trials} trials, {args.seeds} seeds"
    )
    md: list[str] = []
    scored = rate_ok = hold_ok = ks_ok = 0
    for exp in cells:
        name = twins.cell_name(exp)
        real, sims = twins.run_both(exp, trials=args.trials, seeds=args.seeds, cal=cal)
        other = max((r.quality.other_share for r in real if r.quality.measured), default=float("nan"))
        c = twins.compare_schedules(real, sims, by=args.by, rank=args.rank)
        print(f"\n== {name}  (other tasks' share, largest trial: {other:.1%})")
        print(c)
        per = c.filter((pl.col("vcpu") >= 0) & (pl.col("n_real") >= MIN_HOLDS) & (pl.col("n_sim") >= MIN_HOLDS))
        for row in per.iter_rows(named=True):
            scored += 1
            rate_ok += abs(row["ratio"] - 1) <= AGREE
            hold_ok += abs(row["sim_hold_median_us"] / row["real_hold_median_us"] - 1) <= AGREE
            ks_ok += row["ks"] < KS_AGREE
        md.append(f"**{name}** (other tasks' share {other:.1%})\n\n{_markdown(c)}\n")
    line = (
        f"per-vCPU rows with >= {MIN_HOLDS} holds on both sides: {scored}; rate within {AGREE:.0%}: {rate_ok}; "
        f"median hold within {AGREE:.0%}: {hold_ok}; KS < {KS_AGREE}: {ks_ok}  ({time.time() - t0:.0f} s)"
    )
    print("\n" + line)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(md) + "\n" + line + "\n")
    return 0


def _markdown(c: pl.DataFrame) -> str:
    cols = ["vm", "vcpu", "why", "real_per_s", "sim_per_s", "real_hold_median_us", "sim_hold_median_us"]
    cols += ["real_hold_p90_us", "sim_hold_p90_us", "ks"]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)
    rows = []
    for r in c.select(cols).iter_rows():
        rows.append("| " + " | ".join(_fmt(x) for x in r) + " |")
    return head + "\n" + "\n".join(rows)


def _fmt(x: object) -> str:
    if isinstance(x, float):
        return "–" if x != x else f"{x:.3g}" if abs(x) < 10 else f"{x:,.0f}"
    return str(x)


if __name__ == "__main__":
    sys.exit(main())
