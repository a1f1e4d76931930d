"""Speed of the halt-polling model: simulated halts per second of wall time.

Runs a message-passing scenario (one vCPU, 20 µs gaps, block-time) and an
idle scenario (eight 1000 Hz ticking vCPUs on one CPU, fixed polling), each
for one simulated second, and a 15-cell × 8-seed sweep like the calibration.

    python benches/bench_halt_poll.py
"""

from __future__ import annotations

import time

from vcpulab import sim
from vcpulab.sim import halt_poll as hp


def bench(name: str, sc: hp.Scenario, reps: int = 5) -> None:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        r = hp.run(sc)
        best = min(best, time.perf_counter() - t0)
    halts = int(r.stats["halt_exits"].sum())
    print(f"{name:<40} {halts:>9} halts  {best * 1e3:8.2f} ms  {halts / best / 1e6:6.2f} M halts/s")


def main() -> None:
    bench(
        "message 20 us, block-time, 1 s",
        hp.Scenario(
            sim.HaltPoll(policy="block-time", vm_max_ns=200_000), vcpus=(hp.Message(20_000),), duration_ns=1_000_000_000
        ),
    )
    bench(
        "8 x idle 1000 Hz on one CPU, fixed, 1 s",
        hp.Scenario(
            sim.HaltPoll(policy="fixed", vm_max_ns=200_000), vcpus=(hp.Timer(1000),) * 8, duration_ns=1_000_000_000
        ),
    )
    scs = [
        hp.Scenario(
            sim.HaltPoll(policy="block-time", vm_max_ns=m),
            vcpus=(hp.Message(g * 1000),),
            rounds=200,
            seed=s,
            background=hp.Background.from_fraction(0.2),
        )
        for g in (20, 50, 100, 300, 1000)
        for m in (0, 50_000, 200_000)
        for s in range(8)
    ]
    t0 = time.perf_counter()
    hp.sweep(scs)
    print(f"{'calibration-sized sweep (120 runs)':<40} {(time.perf_counter() - t0) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
