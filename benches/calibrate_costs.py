"""The declared calibration of the hardware cost profile (not a test).

    python benches/calibrate_costs.py                 # ple2012_1x at its own settings (3 seeds, 0.5 x lengths)
    python benches/calibrate_costs.py --set ple2012_1x --seeds 3 --scale 0.5
    python benches/calibrate_costs.py --set haltpoll2015_commit   # the adopted one (10 s)
    python benches/calibrate_costs.py --set parsec2021_barrier --adoption   # and the adoption rule for rank 1

Scores every combination of the calibration set's grid on the set's cases
only (vcpulab.validation.calibration.fit) and prints the ranked table as
Markdown, with the machine's load and the time taken; ``--adoption`` then
runs the adoption rule for rank 1's values (calibration.adoption: every
robustness probe today and with them, 2 seeds, full lengths) and prints it. The values of rank 1
are what vcpulab.validation.eras writes as the set's fitted values; the
held-out score is then what `python benches/validation_full.py` reports.
"""

from __future__ import annotations

import argparse
import os
import time

from vcpulab.validation import calibration
from vcpulab.validation.eras import SETS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="ple2012_1x", choices=sorted(SETS))
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--adoption", action="store_true", help="run the adoption rule for rank 1's values")
    a = ap.parse_args()
    cs = SETS[a.set]
    t0, c0 = time.time(), time.process_time()
    df = calibration.fit(cs.name, seeds=a.seeds, duration_scale=a.scale)
    wall, cpu = time.time() - t0, time.process_time() - c0
    print(f"calibration set {cs.name}: {', '.join(cs.cases)}")
    print(f"rule: {cs.rule}")
    cols = df.columns
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in df.iter_rows():
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    print(
        f"({df.height} combinations, {wall:.0f} s wall, {cpu:.0f} s CPU, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    if a.adoption:
        best = {p: df[p][0] for p in cs.grid}
        t0 = time.time()
        ad = calibration.adoption(cs.name, best)
        print(f"\nadoption rule for rank 1 ({best}), {time.time() - t0:.0f} s:")
        print("| " + " | ".join(ad.columns) + " |")
        print("|" + "---|" * len(ad.columns))
        for r in ad.iter_rows():
            print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r) + " |")
        broken = ad.filter(ad["breaks"])["probe"].to_list()
        print("breaks: " + (", ".join(broken) if broken else "none (the rule allows adoption)"))


if __name__ == "__main__":
    main()
