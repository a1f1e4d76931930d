"""The twins' host speed, A/B on the same real trials: a grid's agreement line
with the calibration's speed process (on the guest's work and the host's
paths), on the work only, and at one speed.

    python benches/twins_speed_ab.py [--grid default|small|wake|policies|coscheduling] [--trials 3] [--seeds 3]
                                     [--duration-s 1.0]

One calibration (vcpulab.twins.calibrate, with its speed probe), then per cell
the real trials once (vcpulab.twins.run_real) and three twins of them
(vcpulab.twins.compare with ``real=`` and ``host_speed`` True, "work",
False): the three lines differ only in the twin's host speed, not in the
host the real trials met (a grid run twice would compare two calibrations
and two sets of trials on a host whose speed moves; docs/twins.md item 11).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import polars as pl

from vcpulab import twins

VARIANTS: dict[str, bool | str] = {"speed process": True, "process, work only": "work", "one speed": False}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=("default", "small", "wake", "policies", "coscheduling"), default="default")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=1.0)
    a = ap.parse_args()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("twins_speed_ab: /dev/kvm is not usable here; nothing to compare")
        return 0
    t0 = time.time()
    cal = twins.calibrate()
    hs = twins.host_speed_of(cal.values)
    share = hs.slow_dwell_ns / max(hs.slow_dwell_ns + hs.fast_dwell_ns, 1)
    print(
        f"calibration: path_insn_ns {cal['path_insn_ns']:.0f}, loop_insn_ns {cal['loop_insn_ns']:.0f}; "
        f"speed fast {hs.fast_pct} %, slow {hs.slow_pct} % ({share:.0%} of the time, stretches "
        f"{hs.slow_dwell_ns / 1e6:.0f} ms)",
        flush=True,
    )
    d = a.duration_s
    exps = {
        "default": lambda: twins.default_grid(duration_s=d),
        "small": lambda: twins.default_grid(small=True, duration_s=d),
        "wake": lambda: twins.wake_placement_grid(duration_s=d),
        "policies": lambda: twins.policy_grid(duration_s=d),
        "coscheduling": lambda: twins.coscheduling_grid(duration_s=d),
    }[a.grid]()
    frames: dict[str, list[pl.DataFrame]] = {k: [] for k in VARIANTS}
    for i, e in enumerate(exps):
        name = twins.cell_name(e)
        try:
            twins.twin(e, cal)
            real = twins.run_real(e, trials=a.trials, cal=cal)
        except (ValueError, TimeoutError) as err:
            print(f"[{i + 1}/{len(exps)}] {name}: skipped: {err}", flush=True)
            continue
        for k, v in VARIANTS.items():
            c = twins.compare(e, trials=a.trials, seeds=a.seeds, cal=cal, real=real, host_speed=v)
            f = twins.cell_factors(e)
            frames[k].append(c.with_columns(pl.lit(name).alias("cell"), *[pl.lit(x).alias(n) for n, x in f.items()]))
        print(f"[{i + 1}/{len(exps)}] {name}", flush=True)
    for k, fs in frames.items():
        cells = pl.concat(fs, how="diagonal_relaxed")
        first = ["cell", *twins.FACTORS]
        cells = cells.select(first + [c for c in cells.columns if c not in first])
        g = twins.Grid(cells=cells, directions=twins.directions(cells), no_twin=[], calibration=cal)
        print(f"{k}: {g.line()}")
    print(f"({time.time() - t0:.0f} s, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
