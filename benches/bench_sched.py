"""vcpulab's own vCPU scheduler, measured (numbers for the notes; not a test).

1. **Throughput under round_robin vs the host's scheduler** on a CPU-bound
   guest (``Spin``: every vCPU executes PAUSE in a loop), N vCPUs on one host
   CPU, 4 ms slices: the ratio of the guest's total PAUSEs per second,
   paired runs alternating host / round_robin (goal: >= 0.95).
2. **Token hand-off latency on one host CPU**: from a pv spin exit to the
   candidate's thread entering KVM_RUN (``Run.spins.latency_ns``) under
   ``directed_yield(dy_eligible)`` with a ticket lock: median and p99.
3. **The cost of a Python policy call per spin exit**: ``Run.spins.policy_ns``
   of the built-in ``dy_eligible`` against the same policy written in Python
   (``policies.DyEligibleInPython``).

    python benches/bench_sched.py [--pairs 5] [--duration-s 1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import numpy as np
import polars as pl

from vcpulab import sched
from vcpulab.experiment import Spin, SpinLock, run
from vcpulab.quality import QualityWarning
from vcpulab.sim import policies as P


def pauses_per_s(r) -> float:  # type: ignore[no-untyped-def]
    return float(r.results["pauses"].sum()) / r.wall_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration-s", type=float, default=1.0)
    ap.add_argument("--vcpus", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    a = ap.parse_args()
    warnings.simplefilter("ignore", QualityWarning)
    print(f"load average before: {os.getloadavg()}")

    ratios, disturbed = [], 0
    for _ in range(a.pairs):
        h = run(Spin(), vcpus=a.vcpus, pcpus=[a.cpu], duration_s=a.duration_s)
        s = run(Spin(), vcpus=a.vcpus, pcpus=[a.cpu], duration_s=a.duration_s, scheduler=sched.round_robin(4000))
        disturbed += int(h.quality.disturbed) + int(s.quality.disturbed)
        ratios.append(pauses_per_s(s) / pauses_per_s(h))
    r = np.asarray(ratios)
    print(
        f"1. round_robin / host, Spin, {a.vcpus} vCPUs on CPU {a.cpu}, 4 ms slices, {a.duration_s:g} s x {a.pairs} pairs: "
        f"median {np.median(r):.3f} (min {r.min():.3f}, max {r.max():.3f}); {disturbed} of {2 * a.pairs} runs disturbed"
    )

    lats, pyc, rsc = [], [], []
    for _ in range(a.pairs):
        rr = run(
            SpinLock(kind="ticket"),
            vcpus=3,
            pcpus=[a.cpu],
            duration_s=a.duration_s,
            scheduler=sched.directed_yield(P.dy_eligible()),
        )
        lats += rr.spins.filter(pl.col("latency_ns") > 0)["latency_ns"].to_list()
        rsc += rr.spins["policy_ns"].to_list()
        rp = run(
            SpinLock(kind="ticket"),
            vcpus=3,
            pcpus=[a.cpu],
            duration_s=a.duration_s,
            scheduler=sched.directed_yield(P.python(P.DyEligibleInPython(), name="dy_eligible_py")),
        )
        pyc += rp.spins["policy_ns"].to_list()
    lat = np.asarray(lats) / 1e3
    print(
        f"2. hand-off latency (spin exit -> candidate enters KVM_RUN), one CPU, {lat.size} yields: "
        f"median {np.median(lat):.1f} µs, p90 {np.percentile(lat, 90):.1f} µs, p99 {np.percentile(lat, 99):.1f} µs"
    )
    print(
        f"3. policy call per spin exit: built-in dy_eligible median {statistics.median(rsc) / 1e3:.2f} µs "
        f"({len(rsc)} exits); the same in Python median {statistics.median(pyc) / 1e3:.1f} µs, "
        f"p99 {np.percentile(pyc, 99) / 1e3:.1f} µs ({len(pyc)} exits)"
    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
