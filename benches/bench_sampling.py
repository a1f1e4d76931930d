"""Cost of watching: live sampling of 16 vCPUs at 1 kHz on real KVM.

Runs the same CPU-bound workload (16 vCPUs spinning on PAUSE, sharing this
host's CPUs) without sampling and with a sample every 1 ms, and reports the
sampler's CPU time per sample and per vCPU, and the change in guest progress.

    python benches/bench_sampling.py [--vcpus 16] [--duration-s 2]
"""

from __future__ import annotations

import argparse
import time

from vcpulab.experiment import Spin, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vcpus", type=int, default=16)
    ap.add_argument("--duration-s", "--seconds", dest="duration_s", type=float, default=2.0)
    a = ap.parse_args()
    rows = []
    for every in (None, 0.001):
        c0 = time.thread_time()
        r = run(Spin(), vcpus=a.vcpus, duration_s=a.duration_s, sample_every_s=every)
        cpu = time.thread_time() - c0
        n = r.samples["t_ns"].n_unique()
        rows.append((every, n, cpu, r.results["pauses"].sum() / r.wall_s, r.wall_s))
    (_, n0, cpu0, p0, _), (_, n1, cpu1, p1, wall) = rows
    per_sample = (cpu1 - cpu0) / max(n1 - n0, 1)
    print(f"{a.vcpus} vCPUs, {a.duration_s} s; sampling every 1 ms took {n1} samples in {wall:.2f} s")
    print(
        f"sampler CPU time: {per_sample * 1e6:.1f} us per sample = {per_sample / a.vcpus * 1e6:.2f} us per vCPU "
        f"({(cpu1 - cpu0) / wall:.1%} of one CPU)"
    )
    print(f"guest progress (PAUSEs/s): {p0:,.0f} unsampled, {p1:,.0f} sampled ({p1 / p0 - 1:+.1%})")


if __name__ == "__main__":
    main()
