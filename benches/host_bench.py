"""Host-model benchmark (not a test): speed of 8 × 20 under PLE with the
host-model options off and on, and the lock-step / starvation numbers of
unpinned 8 × 20 (gang/PLE ratio, per-VM throughput spread, Jain's index).

    python benches/host_bench.py               # speed and lock-step
    python benches/host_bench.py --only speed  # or lockstep
    python benches/host_bench.py --quick

Speed is CPU seconds of the simulating thread (time.thread_time), minimum of
``--repeat`` runs; the machine is shared, so compare runs made together.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from vcpulab import sim
from vcpulab.sim import scenarios as S

HOST_OPTIONS: dict[str, dict] = {
    "off": {},
    "time": dict(
        seeded_ties=True,
        tick_skew=True,
        wakeup_ipi_ns=1500,
        wakeup_jitter=0.5,
        idle_states=((2_000, 2_000), (10_000, 20_000), (133_000, 600_000)),
    ),
}
HOST_OPTIONS["time+noise"] = (
    {**HOST_OPTIONS["time"], "noise": sim.HostNoise.typical()} if hasattr(sim, "HostNoise") else {}
)
HOST_OPTIONS["all"] = {
    **HOST_OPTIONS["time+noise"],
    "sockets": 2,
    "threads_per_core": 2,
    "wake_placement": "select_task_rq_fair",
    "load_balance": True,
    "start_placement": "shuffled",
    # bench values that exercise the cold-migration path (no era turns it on)
    "migration_cold_core_ns": 10_000,
    "migration_cold_llc_ns": 100_000,
}


def jain(x: list[float]) -> float:
    s = sum(x)
    return s * s / (len(x) * sum(v * v for v in x)) if s > 0 else 0.0


def config(scheduler: str, options: str, affinity: str, dur: int, seed: int = 1) -> sim.Config:
    cfg = S.sched_map_2012(8, 20, scheduler=scheduler, duration_ns=dur, warmup_ns=40_000_000, seed=seed)
    return dataclasses.replace(cfg, host=dataclasses.replace(cfg.host, affinity=affinity, **HOST_OPTIONS[options]))


def bench_speed(quick: bool, repeat: int) -> None:
    dur = 200_000_000 if quick else 500_000_000
    cases = [("fair", "off")]
    if hasattr(sim, "HostNoise"):
        cases += [("fair", "time+noise"), ("fair", "all"), ("cfs", "off"), ("cfs", "time+noise"), ("cfs", "all")]
    cases = [(s, o, "pinned") for s, o in cases] + [
        ("fair", "off", "all"),
        ("fair", "all", "all"),
        ("cfs", "all", "all"),
    ]
    for sched, opt, aff in cases:
        best = float("inf")
        for _ in range(repeat):
            cfg = config(sched, opt, aff, dur)
            t = time.thread_time()
            r = sim.run(cfg)
            best = min(best, time.thread_time() - t)
        ev = int(r.summary["events"][0])
        print(
            f"speed 8x20 {aff:6} {sched:4} {opt:11}: {dur / 1e9 / best:.3f} simulated s per CPU s "
            f"({ev:,} events, {r.summary['ple_exits'][0]:,} PLE exits)",
            flush=True,
        )


def bench_lockstep(quick: bool) -> None:
    dur = 100_000_000 if quick else 200_000_000
    seeds = (1, 2) if quick else (1, 2, 3, 4)
    for sched in ("fair", "cfs"):
        for opt in ("off", "time", "time+noise", "all"):
            ratios, jains, mins = [], [], []
            for seed in seeds:
                gang = sum(sim.run(config("gang", "off", "all", dur, seed)).vms["throughput_ops_s"])
                thr = sim.run(config(sched, opt, "all", dur, seed)).vms["throughput_ops_s"].to_list()
                ratios.append(gang / sum(thr))
                jains.append(jain(thr))
                mins.append(min(thr) / (sum(thr) / len(thr)))
            print(
                f"unpinned 8x20 {sched:4} {opt:11}: gang/PLE "
                + " ".join(f"{x:.2f}" for x in ratios)
                + "  Jain "
                + " ".join(f"{x:.3f}" for x in jains)
                + "  min VM/mean "
                + " ".join(f"{x:.2f}" for x in mins),
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="speed,lockstep")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    only = a.only.split(",")
    if "speed" in only:
        bench_speed(a.quick, a.repeat)
    if "lockstep" in only and hasattr(sim, "HostNoise"):
        bench_lockstep(a.quick)


if __name__ == "__main__":
    main()
