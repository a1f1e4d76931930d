"""Golden check for simulator changes that must not change results.

    python benches/sim_golden.py save DIR     # with the build before the change
    python benches/sim_golden.py check DIR    # with the build after it

Runs some twenty varied, short configurations (the published scenarios of docs/sources.md under
fair, cfs and gang scheduling, ebizzy under every built-in policy and a Python
one, pcpu_is_idle with both placements, halt polling, background load,
unpinned threads, other lock kinds, traces) and saves every frame as
Parquet; ``check`` compares each frame with polars ``equals`` (bit for bit; columns added since
the save are listed, not compared) and exits non-zero on any difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from vcpulab import sim
from vcpulab.sim import policies as P
from vcpulab.sim import presets
from vcpulab.sim import scenarios as S
from vcpulab.sim._config import Background, Compute, Guest, HaltPoll, Host, Ipi, Lock, Ple, Pv, Sleep, Vm, Workload

MS = 1_000_000


def configs() -> dict[str, sim.Config]:
    c: dict[str, sim.Config] = {}
    for sched in ("fair", "gang"):
        for vms, vcpus in ((8, 20), (16, 10)):
            c[f"map_{sched}_{vms}x{vcpus}"] = S.sched_map_2012(
                vms, vcpus, scheduler=sched, duration_ns=30 * MS, warmup_ns=10 * MS, seed=3
            ).replace(trace=True)
    c["map_fair_8x20_oracle"] = S.sched_map_2012(
        8, 20, policy=P.oracle(), duration_ns=20 * MS, warmup_ns=5 * MS, seed=1
    )
    c["map_fair_8x20_bug"] = S.sched_map_2012(
        8, 20, policy=P.upstream(last_boosted_bug=True), duration_ns=20 * MS, warmup_ns=5 * MS, seed=2
    )
    # the fair class before v6.6 (flat cfs_rq; Cfs.vm_groups off)
    for vms, vcpus in ((8, 20), (4, 10)):
        c[f"map_cfs_{vms}x{vcpus}"] = S.sched_map_2012(
            vms, vcpus, scheduler="cfs", duration_ns=20 * MS, warmup_ns=5 * MS, seed=10
        ).replace(trace=True)
    policies = {
        "baseline": P.baseline_2011(),
        "dy": P.dy_eligible(),
        "dy3": P.dy_eligible(esrch_budget=3),
        "upstream": P.upstream(),
        "random": P.random(),
        "oracle": P.oracle(),
        "none": P.no_yield(),
    }
    for name, pol in policies.items():
        c[f"ebizzy2_{name}"] = S.ebizzy_2012(2, pol, duration_ns=10 * MS, seed=4)
    c["ebizzy1_dy"] = S.ebizzy_2012(1, P.dy_eligible(), duration_ns=15 * MS, seed=5).replace(trace=True)
    c["ebizzy2_python"] = S.ebizzy_2012(2, P.python(P.DyEligibleInPython()), duration_ns=5 * MS, seed=4)
    for placement in ("available_idle", "pcpu_is_idle"):
        c[f"pcpu_idle_{placement}"] = S.pcpu_is_idle_2021(placement, 0.2, iterations=10, compute_ns=200_000, seed=6)
    for hp in ("fixed", "block-time"):
        c[f"halt_poll_{hp}".replace("block-time", "dynamic")] = sim.Config(
            host=Host(n_pcpus=8, background=Background(utilization=0.1)),
            vms=(
                Vm(
                    vcpus=8,
                    count=2,
                    workload=presets.parsec_barrier_like(compute_ns=50_000, iterations=0),
                    halt_poll=HaltPoll(policy=hp),
                ),
            ),
            duration_ns=20 * MS,
            seed=7,
            trace=True,
        )
    mixed = Workload(
        name="mixed",
        phases=(
            Compute(30_000, dist="exp"),
            Lock(0, "pv_queued", 2_000),
            Compute(10_000, mode="kernel"),
            Lock(1, "mutex", 3_000),
            Ipi(targets=2, handler_ns=2_000),
            Sleep(20_000, dist="exp", prob=0.3),
            Lock(2, "tas", 1_000),
        ),
    )
    c["mixed_all_affinity"] = sim.Config(
        host=Host(n_pcpus=12, affinity="all", next_buddy="never", background=Background(utilization=0.3)),
        vms=(
            Vm(vcpus=8, count=2, workload=mixed, policy=P.upstream()),
            Vm(vcpus=6, workload=presets.kernbench_like(), ple=Ple.svm(), pv=Pv(placement="pcpu_is_idle")),
        ),
        duration_ns=20 * MS,
        seed=8,
        trace=True,
    )
    c["mixed_round_robin"] = sim.Config(
        host=Host(n_pcpus=10, affinity="round_robin", yield_penalty="deadline", next_buddy="always"),
        vms=(
            Vm(vcpus=10, count=2, workload=mixed, policy=P.dy_eligible(esrch_budget=3), ple=Ple.fixed()),
            Vm(vcpus=4, workload=presets.sysbench_oltp_like(), ple=Ple.off()),
        ),
        duration_ns=20 * MS,
        seed=9,
    )
    # the kernel lock model (kernel/locking/qspinlock_paravirt.h's queue, halts, kicks and steals)
    # under 3x overcommit, with each pv_wait_early rule
    contended = Workload(
        name="contended",
        phases=(
            Compute(20_000, dist="exp"),
            Lock(0, "pv_queued", 4_000, dist="exp", irqs_off=True),
            Ipi(targets=0, handler_ns=1_000, prob=0.2, tlb_flush=True),
        ),
    )
    for early in ("prev_halted", "prev_halted_or_preempted"):
        c[f"kernel_locks_{early}"] = sim.Config(
            host=Host(n_pcpus=8, affinity="all"),
            vms=(
                Vm(
                    vcpus=8,
                    count=3,
                    threads=16,
                    workload=contended,
                    guest=Guest(lock_model="kernel", pv_wait_early=early),
                ),
                Vm(vcpus=4, workload=mixed, guest=Guest(lock_model="kernel")),
            ),
            duration_ns=20 * MS,
            seed=11,
            trace=early == "prev_halted",
        )
    # vcpulab's own schedulers (src/sim/tokens.rs) with the real programs' halt and wake
    # brackets: halting vCPUs beside a directed-yield VM on a ticket lock
    halting = Workload(name="halting", phases=(Compute(200_000, dist="exp"), Sleep(300_000, dist="exp")))
    spinning = Workload(name="spinning", phases=(Compute(20_000, dist="exp"), Lock(0, "ticket", 10_000, dist="exp")))
    for sched in ("round_robin", "relaxed_co", "balance"):
        c[f"tokens_{sched}"] = sim.Config(
            host=Host(
                n_pcpus=3,
                scheduler=sched,
                token_slice_ns=2 * MS,
                token_skew_ns=300_000,
                token_halt_bracket=True,
                token_wake_exit_ns=20_000,
            ),
            vms=(
                Vm(vcpus=3, workload=halting),
                Vm(vcpus=3, workload=spinning, policy=P.dy_eligible(), ple=Ple.fixed()),
            ),
            duration_ns=30 * MS,
            seed=12,
            trace=True,
        )
    return c


def frames(r: sim.Result) -> dict[str, pl.DataFrame]:
    out = {"summary": r.summary, "vms": r.vms, "vcpus": r.vcpus, "pcpus": r.pcpus}
    if r.trace is not None:
        out["trace"] = r.trace
    if getattr(r, "schedule", None) is not None:
        out["schedule"] = r.schedule
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("save", "check"), help="save the frames, or check them against a save")
    ap.add_argument("dir", type=Path, help="the folder of the saved frames")
    args = ap.parse_args()
    mode, root = args.mode, args.dir
    if mode == "check" and not root.is_dir():
        ap.error(f"{root}: no saved frames (run `save` with the build before the change first)")
    bad = 0
    new_cols: set[str] = set()
    for name, cfg in configs().items():
        r = sim.run(cfg)
        for part, df in frames(r).items():
            path = root / f"{name}.{part}.parquet"
            if mode == "save":
                path.parent.mkdir(parents=True, exist_ok=True)
                df.write_parquet(path)
            else:
                # columns added since the save are new outputs, not changes:
                # every saved column must be identical, and listed in order
                if not path.exists():
                    # a frame added since the save (not compared)
                    new_cols.add(f"{part} (a new frame)")
                    continue
                saved = pl.read_parquet(path)
                if not set(saved.columns) <= set(df.columns) or not df.select(saved.columns).equals(saved):
                    bad += 1
                    print(f"DIFFERENT: {name} {part}")
                elif len(df.columns) > len(saved.columns):
                    new_cols.update(c for c in df.columns if c not in saved.columns)
        print(f"{name}: {int(r.summary['events'][0]):,} events")
    if mode == "check":
        if new_cols:
            print(f"new columns (not compared): {sorted(new_cols)}")
        print("all identical" if not bad else f"{bad} frames differ")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
