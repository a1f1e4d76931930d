"""The wake-up placement of [S3] on real vCPUs, measured (numbers for the notes; not a test).

One VM of three vCPUs on two host CPUs, pinned as ``placement=[[0], [0], [1]]``:
the waker (vCPU 0) and worker 1 share CPU 0, worker 2 has CPU 1 to itself.
The waker hands one item at a time to a worker chosen by ``available_idle``
(upstream's ``available_idle_cpu()``) or ``pcpu_is_idle`` (the 2021 proposal),
under the host's scheduler (which writes no ``is_idle`` byte here) and under
``sched.pinned`` (which writes it at every hand-off). Trials alternate the
cells; per cell: items per second, the wake-up latency (the waker's wake-up →
the worker running the item, guest TSC) median and p99, and where the items went.

    python benches/wake_placement.py [--trials 3] [--duration-s 1.0] [--work 200]
"""

from __future__ import annotations

import argparse
import statistics
import warnings

from vcpulab import _core, sched
from vcpulab.experiment import WakePlacement, run
from vcpulab.quality import QualityWarning


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=1.0)
    ap.add_argument("--work", type=int, default=200, help="loop iterations per item")
    a = ap.parse_args()
    cpus = sorted(_core.allowed_cpus())[:2]
    if len(cpus) < 2:
        raise SystemExit(f"needs two host CPUs, this process may use {cpus}")
    place = [[cpus[0]], [cpus[0]], [cpus[1]]]
    cells = [(s, rule) for s in ("host", "pinned") for rule in ("available_idle", "pcpu_is_idle")]
    out: dict[tuple[str, str], list[dict[str, float]]] = {c: [] for c in cells}
    for _ in range(a.trials):
        for s, rule in cells:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", QualityWarning)
                r = run(
                    WakePlacement(rule=rule, work=a.work),  # type: ignore[arg-type]
                    vcpus=3,
                    placement=place,
                    duration_s=a.duration_s,
                    scheduler=sched.pinned() if s == "pinned" else sched.host(),
                )
            row = r.results.sort("vcpu")
            out[(s, rule)].append(
                {
                    "items_per_s": row["rounds"][0] / r.wall_s,
                    "wake_median_us": row["wake_median_us"][0],
                    "wake_p99_us": row["wake_p99_us"][0],
                    "to_worker_2": row["items"][2] / max(row["rounds"][0], 1),
                    "chose_is_idle": row["chose_is_idle"][0],
                    "disturbed": float(r.quality.disturbed),
                }
            )
    print(
        f"{'scheduler':8} {'rule':15} {'items/s':>9} {'wake med us':>12} {'wake p99 us':>12} "
        f"{'to worker 2':>12} {'is_idle':>8} {'disturbed':>9}"
    )
    for (s, rule), rows in out.items():

        def med(k: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(x[k] for x in rows)

        per = "/".join(f"{x['wake_median_us']:.0f}" for x in rows)
        print(
            f"{s:8} {rule:15} {med('items_per_s'):9.0f} {med('wake_median_us'):12.1f} {med('wake_p99_us'):12.1f} "
            f"{med('to_worker_2'):12.2f} {med('chose_is_idle'):8.2f} {sum(x['disturbed'] for x in rows):9.0f}"
            f"   (per trial wake med: {per})"
        )


if __name__ == "__main__":
    main()
