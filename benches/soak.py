"""Soak benchmark (not a test): randomised create / run / kick / close / sweep
for a while, on a few threads, watching for leaks and stuck calls.

    python benches/soak.py                 # ~10 minutes, 2 worker threads
    python benches/soak.py --minutes 3 --threads 2 --seed 1

Each worker repeatedly picks an action at random:

* ``vm``: create a VM with 1-4 vCPUs, load a program, run vCPUs on helper
  threads with short timeouts, kick them from another thread, read stats and
  steal time, close the VM (sometimes while vCPUs still run, sometimes by
  dropping the last reference);
* ``msi``: a short MSI ping-pong with a guest halting on another thread;
* ``experiment``: a short ``experiment.run`` (Spin / SpinLock / MsiPingPong);
* ``sweep``: a small simulator sweep (sometimes checkpointed to a temp dir);
* ``halt_poll``: a halt-poll model run;
* ``bad``: calls with invalid arguments (must raise an Exception).

Every action runs under a deadline; an action that takes longer counts as
stuck. Prints fds, RSS, threads at the start, every minute and at the end
(after closing everything and a garbage collection), and the per-action
counts of successes, expected errors and unexpected ones.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

from vcpulab import experiment, sim
from vcpulab.kvm import Host
from vcpulab.sim import halt_poll as hp


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def snapshot(label: str, t0: float) -> dict[str, Any]:
    gc.collect()
    s = {
        "t_s": round(time.monotonic() - t0, 1),
        "fds": fds(),
        "rss_mib": round(rss_mib(), 1),
        "threads": threading.active_count(),
    }
    print(
        f"[{label:>5}] t={s['t_s']:>7.1f} s  fds={s['fds']:>4}  rss={s['rss_mib']:>8.1f} MiB  threads={s['threads']:>3}",
        flush=True,
    )
    return s


class Soak:
    def __init__(self, host: Host, seed: int) -> None:
        self.host = host
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.unexpected: list[str] = []
        self.max_s: dict[str, float] = {}

    def note(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    # ------------------------------------------------------------------ actions

    def act_vm(self, rng: random.Random) -> None:
        vm = self.host.create_vm(rng.choice([2, 4, 16]), irqchip=rng.random() < 0.9)
        n = rng.randint(1, 4)
        vcpus = [vm.create_vcpu(i) for i in range(n)]
        name = rng.choice(["pause_loop", "endless_loop", "halt"])
        prog = vm.load(name, **({"iterations": rng.choice([0, 10_000])} if name == "pause_loop" else {}))
        runners = []
        for v in vcpus:
            v.start(prog)
            if rng.random() < 0.5:
                v.enable_steal_time()

            def go(v: Any = v) -> None:
                try:
                    v.run_until("ucall", timeout_s=rng.uniform(0.01, 0.3))
                except Exception:
                    pass

            t = threading.Thread(target=go, daemon=True)
            t.start()
            runners.append(t)
        time.sleep(rng.uniform(0, 0.05))
        for v in vcpus:
            if rng.random() < 0.5:
                v.kick()
            v.stats()
            if v.steal_gpa is not None:
                v.steal_time  # noqa: B018
        vm.stats()
        how = rng.random()
        if how < 0.4:
            vm.close()  # while vCPUs may still run: they are kicked
        elif how < 0.7:
            for t in runners:
                t.join(1.0)
            vm.close()
        else:
            for t in runners:
                t.join(1.0)
            del vcpus, v, vm  # closed by the last reference
        for t in runners:
            t.join(2.0)
            if t.is_alive():
                raise RuntimeError("a vCPU thread outlived its VM's close")

    def act_msi(self, rng: random.Random) -> None:
        with self.host.create_vm(4) as vm:
            v = vm.create_vcpu(0)
            rounds = rng.randint(2, 40)
            prog = vm.load("wait_interrupts", vector=0x40, count=rounds)
            v.start(prog)

            def guest() -> None:
                try:
                    v.run_program(timeout_s=3.0)
                except Exception:
                    pass

            t = threading.Thread(target=guest, daemon=True)
            t.start()
            try:
                vm.msi_ping(v, prog, 0x40, rounds, rng.uniform(0, 200), timeout_s=2.0)
            finally:
                vm.close()
                t.join(3.0)

    def act_experiment(self, rng: random.Random) -> None:
        w = rng.choice(
            [
                experiment.Spin(),
                experiment.SpinLock(kind=rng.choice(["tas", "ticket"])),
                experiment.MsiPingPong(rounds=20, gap_us=50),
            ]
        )
        vcpus = 1 if isinstance(w, experiment.MsiPingPong) else rng.randint(1, 3)
        experiment.run(
            w,
            vcpus=vcpus,
            pcpus=[rng.choice([0, 1])],
            duration_s=rng.uniform(0.05, 0.3),
            sample_every_s=rng.choice([None, 0.01]),
            host=self.host,
        )

    def act_sweep(self, rng: random.Random) -> None:
        base = sim.Config(
            host=sim.Host(n_pcpus=rng.randint(1, 8)),
            vms=(sim.Vm(vcpus=rng.randint(1, 16)),),
            duration_ns=rng.randint(100_000, 5_000_000),
        )
        grid = {"seed": list(range(rng.randint(1, 6)))}
        if rng.random() < 0.3:
            d = tempfile.mkdtemp(prefix="vcpulab-soak-")
            try:
                sim.sweep(base, grid, threads=2, progress=False, out=d)
            finally:
                shutil.rmtree(d, ignore_errors=True)
        else:
            sim.sweep(base, grid, threads=rng.randint(1, 4), progress=False, results=rng.random() < 0.3)

    def act_halt_poll(self, rng: random.Random) -> None:
        hp.run(
            hp.Scenario(
                sim.HaltPoll(policy="block-time", max_ns=rng.choice([0, 50_000, 200_000])),
                vcpus=(hp.Message(gap_ns=rng.randint(1_000, 500_000)),),
                rounds=rng.randint(10, 2_000),
                seed=rng.randint(0, 2**32),
            )
        )

    def act_bad(self, rng: random.Random) -> None:
        bad: list[Callable[[], Any]] = [
            lambda: self.host.create_vm(-1),
            lambda: sim.sweep(sim.Config(), {"seed": [0]}, threads=10**6, progress=False),
            lambda: experiment.run(experiment.Spin(), vcpus=300, duration_s=0.1),
            lambda: hp.run(hp.Scenario(rounds=-1)),
            lambda: sim.Config().with_path("vms.-1.vcpus", 2),
        ]
        f = rng.choice(bad)
        try:
            f()
        except Exception:
            return
        raise RuntimeError("an invalid call was accepted")

    # ------------------------------------------------------------------ loop

    ACTIONS = {"vm": 4, "msi": 2, "experiment": 2, "sweep": 2, "halt_poll": 1, "bad": 1}
    DEADLINE_S = {"vm": 5, "msi": 6, "experiment": 10, "sweep": 60, "halt_poll": 20, "bad": 2}

    def worker(self, wid: int, t_end: float) -> None:
        rng = random.Random(self.rng.randint(0, 2**63) + wid)
        names = list(self.ACTIONS)
        weights = [self.ACTIONS[n] for n in names]
        while time.monotonic() < t_end:
            name = rng.choices(names, weights)[0]
            t0 = time.monotonic()
            try:
                getattr(self, f"act_{name}")(rng)
                self.note(f"{name}: ok")
            except Exception as e:
                expected = isinstance(e, (TimeoutError, ValueError)) or type(e).__name__ in ("KvmIoctlError",)
                self.note(f"{name}: {'expected ' if expected else 'UNEXPECTED '}{type(e).__name__}")
                if expected and self.counts[f"{name}: expected {type(e).__name__}"] == 1:
                    print(f"  (first expected {type(e).__name__} of {name}: {str(e)[:150]})", flush=True)
                if not expected:
                    with self.lock:
                        self.unexpected.append(f"{name}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            dt = time.monotonic() - t0
            with self.lock:
                self.max_s[name] = max(self.max_s.get(name, 0.0), dt)
                if dt > self.DEADLINE_S[name]:
                    self.counts[f"{name}: STUCK (> {self.DEADLINE_S[name]} s)"] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.monotonic()
    host = Host()
    soak = Soak(host, args.seed)
    # warm up the process-wide, one-time resources (thread pools, caches) first
    soak.act_experiment(random.Random(0))
    soak.act_sweep(random.Random(0))
    start = snapshot("start", t0)
    t_end = time.monotonic() + args.minutes * 60
    ws = [threading.Thread(target=soak.worker, args=(i, t_end), daemon=True) for i in range(args.threads)]
    for w in ws:
        w.start()
    next_report = time.monotonic() + 60
    while any(w.is_alive() for w in ws):
        time.sleep(1.0)
        if time.monotonic() >= next_report:
            snapshot("run", t0)
            next_report += 60
    for w in ws:
        w.join()
    end = snapshot("end", t0)
    print("\nactions:")
    for k, v in sorted(soak.counts.items()):
        print(f"  {k:<40} {v:>7}")
    print("slowest action (s):", {k: round(v, 2) for k, v in sorted(soak.max_s.items())})
    print(f"\nstart: fds={start['fds']} rss={start['rss_mib']} MiB threads={start['threads']}")
    print(f"end:   fds={end['fds']} rss={end['rss_mib']} MiB threads={end['threads']}")
    if soak.unexpected:
        print(f"\n{len(soak.unexpected)} unexpected errors; the first ones:")
        for u in soak.unexpected[:5]:
            print(u)


if __name__ == "__main__":
    main()
