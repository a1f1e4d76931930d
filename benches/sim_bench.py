"""Benchmarks of vcpulab's simulator (not part of the test suite).

    python benches/sim_bench.py            # everything, a few minutes on 2 cores
    python benches/sim_bench.py --quick    # shorter runs
    python benches/sim_bench.py --only speed,scale,sweep,pypolicy,scenarios
    python benches/sim_bench.py --only simpy   # needs `pip install simpy`

Prints a report and writes it as JSON to bench-out/sim_bench.json.

* speed: simulated seconds per wall second on one core, [S4] 8 × 20 scenario;
* scale: steady-state CPU per vCPU per simulated second from 64 to 1024 vCPUs
  (2x overcommit, 16-vCPU VMs; the same vCPU-seconds at each size);
* sweep: speed-up of sweep() on 2 threads over 1;
* pypolicy: cost of a Python directed-yield policy per call;
* scenarios: the published experiments (docs/sources.md), longer than in the
  tests, next to the published numbers;
* simpy: the speed of the 8 × 20 PLE scenario against a hand-written SimPy
  model of the same mix (benches/simpy_reference.py), run back to back (not
  in the default set: SimPy is no dependency of vcpulab).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from vcpulab import sim
from vcpulab.sim import policies as P
from vcpulab.sim import presets
from vcpulab.sim import scenarios as S


def timed(cfg: sim.Config) -> tuple[float, sim.Result]:
    """CPU time of this thread (the run happens on it): on a shared machine
    this is what one core would take; wall time is printed where it matters."""
    t = time.thread_time()
    r = sim.run(cfg)
    return time.thread_time() - t, r


def bench_speed(quick: bool) -> dict:
    out = {}
    for sched in ("fair", "gang"):
        dur = 200_000_000 if quick else 1_000_000_000
        cfg = S.sched_map_2012(8, 20, scheduler=sched, duration_ns=dur, warmup_ns=40_000_000, seed=1)
        wall, r = timed(cfg)
        out[sched] = {
            "simulated_s": dur / 1e9,
            "cpu_s": round(wall, 3),
            "sim_s_per_wall_s": round(dur / 1e9 / wall, 3),
            "events": int(r.summary["events"][0]),
            "events_per_s": round(r.summary["events"][0] / wall),
            "ple_exits": int(r.summary["ple_exits"][0]),
        }
        print(
            f"speed 8x20 {sched:5}: {out[sched]['sim_s_per_wall_s']:.3f} simulated s per CPU s "
            f"({out[sched]['events']:,} events, {out[sched]['events_per_s']:,.0f} events/s)"
        )
    return out


def scale_config(n: int, dur: int) -> sim.Config:
    return sim.Config(
        host=sim.Host(n_pcpus=n // 2),
        vms=(sim.Vm(vcpus=16, count=n // 16, workload=presets.spinlock_microbench()),),
        duration_ns=dur,
        seed=1,
    )


#: rounds of the scaling benchmark: each round runs every size, once over a window
#: and once over three times it, so a size is compared with 64 vCPUs measured
#: seconds apart, not minutes (this 2-CPU VM's speed drifts by 10-40 % over
#: minutes; best-of-4 runs per size, measured minutes apart, put 128 vCPUs at
#: 0.26x and 1024 at 1.17x of 64 in one run on 2026-12-06)
SCALE_ROUNDS = 5


def _cpu_and_events(n: int, dur: int) -> tuple[float, int]:
    """CPU seconds of one run of ``n`` vCPUs over ``dur`` ns, and its events."""
    c, r = timed(scale_config(n, dur))
    return c, int(r.summary["events"][0])


def cpu_caches() -> dict[str, str]:
    """This CPU's caches from sysfs (``{"L1d": "48K", "L2": "2048K", ...}``; empty where unreadable):
    the scaling runs are bound by memory accesses, so their ratios depend on these."""
    out: dict[str, str] = {}
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((d / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        out[f"L{level}{dict(Data='d', Instruction='i').get(kind, '')}"] = size
    return out


def bench_scale(quick: bool) -> dict:
    """Cost per vCPU per simulated second from 64 to 1024 vCPUs, in the
    steady state: each size simulates the same vCPU-seconds, once over a
    window and once over three times it, and the difference is charged to the
    last two windows (the start, where every vCPU begins in step and spins
    less, costs less per vCPU-second than the steady state, and a run of the
    same length is mostly start for few vCPUs and not for many). Every round
    runs every size; a size's ratio to 64 vCPUs is the median over rounds of
    the ratio within a round (``SCALE_ROUNDS``), on this thread's CPU clock.
    ``--quick``'s windows (6 ms at 1024 vCPUs) are too short for its steady
    state: use the full run."""
    budget = 6.4 if quick else 25.6  # vCPU-seconds of the window
    sizes = (64, 128, 256, 512, 1024)
    per: dict[int, list[tuple[float, int]]] = {n: [] for n in sizes}
    for _ in range(SCALE_ROUNDS):
        for n in sizes:
            dur = int(budget / n * 1e9)
            (c1, e1), (c3, e3) = _cpu_and_events(n, dur), _cpu_and_events(n, 3 * dur)
            per[n].append(((c3 - c1) / (2 * budget), (e3 - e1)))
    out: dict = {}
    for n in sizes:
        costs = [c for c, _ in per[n]]
        events = statistics.median(e for _, e in per[n]) / (2 * budget)
        cost = statistics.median(costs)
        ratios = [c / b for c, b in zip(costs, (c for c, _ in per[64]))]
        out[n] = {
            "window_ns": int(budget / n * 1e9),
            "cpu_s_per_vcpu_s": round(cost, 5),
            "cpu_s_per_vcpu_s_rounds": [round(c, 5) for c in costs],
            "events_per_vcpu_s": round(events),
            "ns_per_event": round(cost / max(events, 1) * 1e9, 1),
            "over_64": round(statistics.median(ratios), 2),
            "over_64_rounds": [round(r, 2) for r in ratios],
        }
        print(
            f"scale {n:5} vCPUs on {n // 2:4} CPUs: {cost * 1e3:.2f} ms CPU per vCPU-s in the steady state "
            f"(median of {SCALE_ROUNDS} rounds; {out[n]['over_64']:.2f}x 64's, rounds "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f"; {out[n]['events_per_vcpu_s']:,} events per vCPU-s, {out[n]['ns_per_event']:.0f} ns each)"
        )
    # the per-vCPU state (~1.3 KB: vCPU 768 B, its thread and host task 192 B each, half a run
    # queue 192 B) outgrows the L1 data cache between 64 and 128 vCPUs and fits L2 up to ~1024
    print(f"caches: {cpu_caches()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return out


def bench_sweep(quick: bool) -> dict:
    base = S.ebizzy_2012(2, P.upstream(), duration_ns=40_000_000 if quick else 100_000_000)
    grid = {"vms.0.policy": [P.upstream(), P.dy_eligible(), P.baseline_2011(), P.random()], "seed": [1, 2]}
    t = time.perf_counter()
    a = sim.sweep(base, grid, threads=1, progress=False)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    c0 = time.process_time()
    b = sim.sweep(base, grid, threads=2, progress=False)
    t2 = time.perf_counter() - t
    parallelism = (time.process_time() - c0) / t2
    assert a.equals(b), "sweep results differ between 1 and 2 threads"
    load = os.getloadavg()[0]
    out = {
        "points": a.height,
        "wall_1_thread_s": round(t1, 3),
        "wall_2_threads_s": round(t2, 3),
        "speedup": round(t1 / t2, 2),
        "cpus": os.cpu_count(),
        "load_avg_1min": load,
        "cpu_time_over_wall_2_threads": round(parallelism, 2),
    }
    print(
        f"sweep {a.height} points: 1 thread {t1:.2f} s, 2 threads {t2:.2f} s, speed-up {t1 / t2:.2f}x, "
        f"CPU time / wall on 2 threads {parallelism:.2f} (identical results; load average {load:.1f} "
        f"on {os.cpu_count()} CPUs)"
    )
    return out


CALLS = 0


class CountingDyEligible(P.DyEligibleInPython):
    __name__ = "counting_dy_eligible"

    def __call__(self, spinner, candidates):
        global CALLS
        CALLS += 1
        return super().__call__(spinner, candidates)


def bench_pypolicy(quick: bool) -> dict:
    global CALLS
    cfg = S.ebizzy_2012(2, P.dy_eligible(), duration_ns=10_000_000 if quick else 30_000_000)
    w_builtin, ra = timed(cfg)
    CALLS = 0
    w_py, rb = timed(cfg.with_path("vms.0.policy", P.python(CountingDyEligible())))
    assert ra.vcpus.equals(rb.vcpus), "Python dy_eligible differs from the built-in"
    per_call_us = (w_py - w_builtin) / max(CALLS, 1) * 1e6
    n = cfg.vms[0].vcpus
    out = {
        "calls": CALLS,
        "wall_builtin_s": round(w_builtin, 3),
        "wall_python_s": round(w_py, 3),
        "us_per_call": round(per_call_us, 2),
        "candidates_per_call": n - 1,
    }
    print(
        f"python policy: {CALLS:,} calls, {per_call_us:.1f} µs per call ({n - 1} candidates each), "
        f"same results as the built-in"
    )
    return out


def bench_scenarios(quick: bool) -> dict:
    out: dict = {}
    dur = 50_000_000 if quick else 200_000_000
    # (a)
    a = {}
    for oc in (1, 2):
        th = {}
        for name, pol in [
            ("baseline2011", P.baseline_2011()),
            ("dy_eligible", P.dy_eligible()),
            ("upstream", P.upstream()),
            ("random", P.random()),
            ("oracle", P.oracle()),
        ]:
            th[name] = sim.run(S.ebizzy_2012(oc, pol, duration_ns=dur, seed=1)).summary["throughput_ops_s"][0]
        a[f"{oc}x"] = {k: round(v) for k, v in th.items()}
        gain = th["dy_eligible"] / th["baseline2011"] - 1
        a[f"{oc}x"]["dy_eligible_gain_pct"] = round(100 * gain, 1)
        print(
            f"(a) ebizzy-like {oc}x: baseline {th['baseline2011']:,.0f}/s, dy_eligible {th['dy_eligible']:,.0f}/s "
            f"({100 * gain:+.0f} %; [S1], 1x only: 1129 -> 2317 records/s, +105 %); upstream {th['upstream']:,.0f}, "
            f"random {th['random']:,.0f}, oracle {th['oracle']:,.0f}"
        )
    out["a"] = a
    # (b)
    b = {}
    for n, v in ((8, 20), (16, 10)):
        th = {
            s: sim.run(S.sched_map_2012(n, v, scheduler=s, duration_ns=max(dur, 100_000_000), seed=1)).summary[
                "throughput_ops_s"
            ][0]
            for s in ("fair", "gang")
        }
        b[f"{n}x{v}"] = {
            "ple": round(th["fair"]),
            "gang": round(th["gang"]),
            "gang_over_ple": round(th["gang"] / th["fair"], 2),
        }
        print(
            f"(b) {n} x {v} on 80 CPUs: PLE {th['fair']:,.0f}/s, gang {th['gang']:,.0f}/s: gang = "
            f"{th['gang'] / th['fair']:.2f}x PLE ([S4]: 3.88x at 8 x 20; 16 x 10 'clean, good')"
        )
    out["b"] = b
    # (c)
    c = {}
    for threads in (12, 16):
        for burst in (100_000, 500_000):
            for bg in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
                w = {}
                for placement in ("available_idle", "pcpu_is_idle"):
                    walls = [
                        sim.run(S.pcpu_is_idle_2021(placement, bg, threads=threads, burst_ns=burst, seed=s)).vms[
                            "wall_ns"
                        ][0]
                        for s in range(3 if quick else 8)
                    ]
                    w[placement] = sum(walls) / len(walls) / 1e6
                red = 1 - w["pcpu_is_idle"] / w["available_idle"]
                c[f"{threads}t_burst{burst // 1000}us_bg{bg}"] = {
                    "available_idle_ms": round(w["available_idle"], 2),
                    "pcpu_is_idle_ms": round(w["pcpu_is_idle"], 2),
                    "reduction_pct": round(100 * red, 1),
                }
                print(
                    f"(c) 16 vCPUs, {threads} threads, host load {bg:.2f} in {burst // 1000} us bursts: wall "
                    f"{w['available_idle']:.1f} -> {w['pcpu_is_idle']:.1f} ms ({-100 * red:+.0f} %; "
                    "[S3], idle host, 16 threads: -50 to -84 %)"
                )
    for bg in (0.1, 0.4):
        w = {}
        for placement in ("available_idle", "pcpu_is_idle"):
            walls = [
                sim.run(S.pcpu_is_idle_2021(placement, bg, affinity="all", seed=s)).vms["wall_ns"][0]
                for s in range(3 if quick else 8)
            ]
            w[placement] = sum(walls) / len(walls) / 1e6
        red = 1 - w["pcpu_is_idle"] / w["available_idle"]
        c[f"12t_unpinned_bg{bg}"] = {
            "available_idle_ms": round(w["available_idle"], 2),
            "pcpu_is_idle_ms": round(w["pcpu_is_idle"], 2),
            "reduction_pct": round(100 * red, 1),
        }
        print(
            f"(c) 16 unpinned vCPUs, 12 threads, host load {bg:.2f}: wall {w['available_idle']:.1f} -> "
            f"{w['pcpu_is_idle']:.1f} ms ({-100 * red:+.0f} %)"
        )
    out["c"] = c
    return out


def bench_simpy(quick: bool) -> dict:
    """vcpulab's simulator and the SimPy reference on the 8 × 20 PLE mix,
    back to back, alternated (``rounds`` of each), each timed by its thread's
    CPU time; the ratio of simulated seconds per CPU second, and each side's
    PLE exits and lock acquisitions per simulated second to show the mixes
    are comparable."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import simpy_reference  # optional: SimPy is installed by hand

    dur = 200_000_000 if quick else 1_000_000_000
    simpy_ms = 5.0 if quick else 20.0
    ours, ref = [], []
    for _ in range(3):
        cfg = S.sched_map_2012(8, 20, scheduler="fair", duration_ns=dur, warmup_ns=40_000_000, seed=1)
        cpu, r = timed(cfg)
        ours.append(
            {
                "sim_s_per_cpu_s": dur / 1e9 / cpu,
                "events_per_sim_s": r.summary["events"][0] / (dur / 1e9),
                "ple_exits_per_sim_s": r.summary["ple_exits"][0] / (dur / 1e9),
                # lock acquisitions per simulated second after the warm-up (the preset's ops)
                "acquisitions_per_sim_s": float(r.summary["throughput_ops_s"][0]),
            }
        )
        ref.append(simpy_reference.run(simpy_ms, seed=1))
    med = lambda rows, k: statistics.median(x[k] for x in rows)
    out = {
        "vcpulab": {k: med(ours, k) for k in ours[0]},
        "simpy": {
            k: med(ref, k)
            for k in (
                "sim_s_per_cpu_s",
                "events_per_sim_s",
                "ple_exits_per_sim_s",
                "acquisitions_per_sim_s",
                "ns_per_event",
            )
        },
        "ratio_rounds": [round(a["sim_s_per_cpu_s"] / b["sim_s_per_cpu_s"], 1) for a, b in zip(ours, ref)],
    }
    out["ratio"] = statistics.median(out["ratio_rounds"])
    v, p = out["vcpulab"], out["simpy"]
    print(
        f"simpy 8x20 PLE: vcpulab {v['sim_s_per_cpu_s']:.3f} simulated s per CPU s, SimPy reference "
        f"{p['sim_s_per_cpu_s']:.5f}: {out['ratio']:.0f}x (rounds {out['ratio_rounds']}); per simulated s: PLE exits "
        f"{v['ple_exits_per_sim_s'] / 1e6:.1f} M vs {p['ple_exits_per_sim_s'] / 1e6:.1f} M, acquisitions "
        f"{v['acquisitions_per_sim_s'] / 1e6:.2f} M vs {p['acquisitions_per_sim_s'] / 1e6:.2f} M"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="speed,scale,sweep,pypolicy,scenarios")
    args = ap.parse_args()
    report = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "vcpulab": sim.Result.__module__ and __import__("vcpulab").__version__,
        "quick": args.quick,
        "caches": cpu_caches(),
    }
    for name in args.only.split(","):
        report[name] = globals()[f"bench_{name}"](args.quick)
    Path("bench-out").mkdir(exist_ok=True)
    Path("bench-out/sim_bench.json").write_text(json.dumps(report, indent=2, default=str))
    print("wrote bench-out/sim_bench.json")


if __name__ == "__main__":
    main()
