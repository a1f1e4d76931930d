"""What the 6.x era's EEVDF rules change (not part of the test suite).

    python benches/eevdf_rules.py                 # seeds 0-2, 60 ms runs (the first 20 ms not counted)
    python benches/eevdf_rules.py --seeds 5 --run-ms 200

The 6.x era's host (EEVDF, per-VM yield scope, select_task_rq_fair
placement, balancing, noise) with 8 VMs x 20 vCPUs of the spin-lock
microbenchmark on 80 CPUs, pinned and unpinned, under four rule sets:
neither option, ``Host.slice_check_on_wakeup`` alone, ``Host.run_to_parity``
alone, both (the era). Per seed it prints the fair scheduler's throughput,
gang / fair, successful yields, PLE exits, the share of instants at which a
VM runs all or none of its vCPUs (gang-like: near 1), the poorest VM's share
of the mean, and the CPU time of the fair run (speed: the issue's goal is no
worse than 1.5x the rules-off time).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from vcpulab import analysis, sim
from vcpulab import validation as V
from vcpulab.sim import presets
from vcpulab.validation.cases import Ctx

RULES = {
    "neither": dict(slice_check_on_wakeup=False, run_to_parity=False),
    "slice_check": dict(slice_check_on_wakeup=True, run_to_parity=False),
    "run_to_parity": dict(slice_check_on_wakeup=False, run_to_parity=True),
    "both (era)": dict(slice_check_on_wakeup=True, run_to_parity=True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--run-ms", type=int, default=60, help="run length, ms (> 20: its first 20 ms are a warm-up)")
    a = ap.parse_args()
    if a.run_ms <= 20:
        ap.error(f"--run-ms must be > 20 (the warm-up), got {a.run_ms}")
    ctx = Ctx(V.era("6.x"), V.COSTS["hardware"], 1.0, 1.0, frozenset({"host.scheduler"}))
    vm = ctx.vm(workload=presets.spinlock_microbench(), vcpus=20, count=8)
    print(
        "| rules | placement | seed | fair Mops/s | gang/fair | yields ok | PLE exits | all-or-none | poorest VM | fair CPU s |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    medians = []
    for name, rules in RULES.items():
        for aff in ("all", "pinned"):
            ratios = []
            for seed in range(a.seeds):
                out = {}
                for s in ("fair", "gang"):
                    host = dataclasses.replace(ctx.host(n_pcpus=80, scheduler=s, affinity=aff), **rules)
                    cfg = sim.Config(
                        host=host,
                        vms=(vm,),
                        duration_ns=a.run_ms * 1_000_000,
                        warmup_ns=20_000_000,
                        seed=seed,
                        trace=s == "fair",
                    )
                    t0 = time.thread_time()
                    out[s] = (sim.run(cfg), time.thread_time() - t0)
                (f, cpu_s), g = out["fair"], out["gang"][0].summary
                fs = f.summary
                ratio = g["throughput_ops_s"][0] / fs["throughput_ops_s"][0]
                ratios.append(ratio)
                ops = f.vms["ops"].to_list()
                print(
                    f"| {name} | {aff} | {seed} | {fs['throughput_ops_s'][0] / 1e6:.2f} | {ratio:.2f} | "
                    f"{fs['yield_ok'][0]} | {fs['ple_exits'][0]} | {analysis.gang_share(f):.2f} | "
                    f"{min(ops) / (sum(ops) / len(ops)):.2f} | {cpu_s:.2f} |",
                    flush=True,
                )
            medians.append((name, aff, statistics.median(ratios)))
    print()
    for name, aff, m in medians:
        print(f"median gang/fair, {name}, {aff}: {m:.2f}")


if __name__ == "__main__":
    main()
