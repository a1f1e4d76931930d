"""The 2019 ebizzy -M anchor as a map (not a test): the simulated rate of one
80-vCPU VM on the 80-thread host over the LRU lock's hold and the record's work.

    python benches/ebizzy2019_anchor.py                        # 3 holds x 5 works, 3 seeds (~1 min on 2 CPUs)
    python benches/ebizzy2019_anchor.py --holds 500 1000 --works 1500000 2425034 --seeds 5

What it asks: the 2019 preset derives the record's work
(``presets.EBIZZY_2019_RECORD_NS``) from the 1-VM row of d73eb57b80b9 taken
as CPU-bound, and the era's declared calibration fits the LRU lock's hold
(``programs.ebizzy_lru_hold_ns``) on the set's ratios. Two published tables
say the 1-VM run was not CPU-bound (the queue-head commit's boosted 2 VMs
made more records than its 1 VM; the revert's 3 VMs ~1.8x). So: for which
(hold, work) does the model's 1-VM run reach the published 21,443
records/s, and where does it stop being CPU-bound? Each cell runs the
``boost_ready2019_ebizzy_1vm`` case's configuration (the era with that hold,
the record's work replaced) at its nominal length: the base ('preempted'
gate), the new gate's change beside it, and the CPU-bound rate the work
alone would give (80 vCPUs x smt_speed_pct / work).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import time

from vcpulab import sim
from vcpulab.sim import presets
from vcpulab.validation import Case, calibration
from vcpulab.validation.eras import COSTS

CASE = "boost_ready2019_ebizzy_1vm"
PUBLISHED_1VM = 21_443  # records/s, d73eb57b80b9's 1-VM base ('preempted' gate)


@functools.cache
def case_for(hold_ns: int) -> Case:
    """The 1-VM case with the era's hold replaced (as the calibration's candidates are built)."""
    (case,) = [
        c
        for c in calibration.candidate_cases("boost2019_ready", {"programs.ebizzy_lru_hold_ns": hold_ns})
        if c.name == CASE
    ]
    return case


def config(hold_ns: int, work_ns: int, variant: str, seed: int, scale: float) -> sim.Config:
    """The case's configuration with the record's work replaced."""
    case = case_for(hold_ns)
    cfg = case.build(case.ctx(COSTS[case.costs], scale), variant, seed)
    wl = presets.ebizzy_no_mmap_like(lru_hold_ns=hold_ns, record_ns=work_ns)
    return dataclasses.replace(cfg, vms=tuple(dataclasses.replace(vm, workload=wl) for vm in cfg.vms))


def cpu_bound_rate(cfg: sim.Config, work_ns: int) -> float:
    """Records/s the work alone allows: every vCPU busy, at the host's SMT speed (both threads busy)."""
    vcpus = sum(vm.vcpus * vm.count for vm in cfg.vms)
    return vcpus * cfg.host.smt_speed_pct / 100 / work_ns * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holds", type=int, nargs="+", default=[1_000, 1_500, 2_000], help="LRU hold means, ns")
    ap.add_argument(
        "--works",
        type=int,
        nargs="+",
        default=[1_000_000, 1_500_000, 2_000_000, presets.EBIZZY_2019_RECORD_NS, 3_000_000],
        help="record works, ns of a core alone",
    )
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="times the case's nominal lengths")
    a = ap.parse_args()
    t0 = time.time()
    print(
        f"{CASE}: 1 VM of 80 vCPUs, 80 CPUs; published base {PUBLISHED_1VM:,} records/s; "
        f"{a.seeds} seeds, {a.scale} x nominal length; load {os.getloadavg()[0]:.2f}\n"
    )
    print("| hold (ns) | work (ns) | CPU-bound rate | base records/s (per seed) | base / CPU-bound | 'ready' change |")
    print("|---|---|---|---|---|---|")
    for h in a.holds:
        for w in a.works:
            runs = {v: [config(h, w, v, s, a.scale) for s in range(a.seeds)] for v in ("base", "new")}
            base, new = ([float(sim.run(c).summary["throughput_ops_s"][0]) for c in runs[v]] for v in ("base", "new"))
            ideal = cpu_bound_rate(runs["base"][0], w)
            b, n = statistics.mean(base), statistics.mean(new)
            seeds = ", ".join(f"{x:,.0f}" for x in base)
            print(
                f"| {h:,} | {w:,} | {ideal:,.0f} | {b:,.0f} ({seeds}) | {b / ideal:.2f} | {100 * (n / b - 1):+.1f} % |"
            )
    print(f"\n{time.time() - t0:.0f} s wall, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
