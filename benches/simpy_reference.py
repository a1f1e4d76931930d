"""A hand-written SimPy model of the 8 x 20 PLE yield storm: the reference
that ``benches/sim_bench.py --only simpy`` times vcpulab's simulator against
(issue #28: "≥ 300x the SimPy model of the same mix, run back to back").

A reference, not a model of record and not a dependency of vcpulab (``pip
install simpy`` to run it). It is written the way a researcher would write
such a model in an afternoon: one SimPy process per vCPU, interrupted when
its CPU is taken from it, and one per host CPU for the time slices. The mix
is ``sim.scenarios.sched_map_2012(8, 20)``'s: 8 VMs x 20 vCPUs pinned two to
a CPU on 80 CPUs; each vCPU computes for an exponential 20 us, then takes
its VM's ticket lock and holds it 1 us; a waiter spins, and after a PLE
window of 4096 cycles at 2.1 GHz (1.95 us of spinning on the CPU) exits
(1 us) and yields to a preempted sibling (round-robin from the VM's last
boosted vCPU, as ``kvm_vcpu_on_spin``), which then runs on its CPU in place
of whatever ran there. Simplified, and so only comparable in speed: round-robin
slices of 3 ms instead of CFS/EEVDF (no vruntime, no buddies), no lock
hand-off latency, no halts, no steal-time or pv features, no run-queue locks.

    python benches/simpy_reference.py [--sim-ms 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Generator
from typing import Any

try:
    import simpy
except ImportError as e:  # pragma: no cover - a reference, installed on demand
    raise SystemExit("benches/simpy_reference.py needs SimPy: pip install simpy") from e

VMS, VCPUS, CPUS = 8, 20, 80
COMPUTE_NS = 20_000  # exponential mean (the preset's compute phase)
HOLD_NS = 1_000  # the ticket lock's hold
PLE_WINDOW_NS = round(4096 / 2.1)  # 4096 cycles at 2.1 GHz (times are integer ns: no float residues)
EXIT_NS = 1_000  # the PLE exit's handler (Ple.exit_ns)
SLICE_NS = 3_000_000  # the host's time slice (base_slice_ns)


class Counting(simpy.Environment):
    """A SimPy environment that counts the events it processes."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    def step(self) -> None:
        self.events += 1
        super().step()


class Lock:
    def __init__(self, env: simpy.Environment) -> None:
        self.next_ticket = 0
        self.serving = 0
        self.turn: dict[int, simpy.Event] = {}
        self.env = env

    def event_for(self, ticket: int) -> simpy.Event:
        if ticket not in self.turn:
            self.turn[ticket] = self.env.event()
        return self.turn[ticket]

    def release(self) -> None:
        self.turn.pop(self.serving, None)
        self.serving += 1
        ev = self.turn.get(self.serving)
        if ev is not None and not ev.triggered:
            ev.succeed()


class Model:
    def __init__(self, seed: int) -> None:
        self.env = Counting()
        self.rng = random.Random(seed)
        self.locks = [Lock(self.env) for _ in range(VMS)]
        self.last_boosted = [0] * VMS
        n = VMS * VCPUS
        # vCPU g = vm * VCPUS + i on CPU g % CPUS: two vCPUs of different VMs per CPU
        self.cpu_of = [g % CPUS for g in range(n)]
        self.on_cpu: list[int | None] = [None] * CPUS
        self.members: list[list[int]] = [[] for _ in range(CPUS)]
        for g in range(n):
            self.members[self.cpu_of[g]].append(g)
        self.resume = [self.env.event() for _ in range(n)]
        self.in_timeout = [False] * n
        self.procs = [self.env.process(self.vcpu(g)) for g in range(n)]
        self.ple_exits = 0
        self.yields = 0
        self.acquisitions = 0
        for c in range(CPUS):
            # which vCPU starts, and where in its slice, differ per CPU (the host's
            # slices are not aligned across CPUs: a VM runs partly, its lock holders get preempted)
            self.switch_to(c, self.members[c][self.rng.randrange(2)])
            self.env.process(self.slices(c, self.rng.randrange(1, SLICE_NS)))

    # ---- the host
    def running(self, g: int) -> bool:
        return self.on_cpu[self.cpu_of[g]] == g

    def switch_to(self, c: int, g: int) -> None:
        """CPU ``c`` runs vCPU ``g`` from now: its current vCPU is interrupted."""
        cur = self.on_cpu[c]
        if cur == g:
            return
        self.on_cpu[c] = g
        if cur is not None and self.in_timeout[cur]:
            self.in_timeout[cur] = False  # one interrupt: a second switch at this instant sends none
            self.procs[cur].interrupt()
        ev = self.resume[g]
        if not ev.triggered:
            ev.succeed()

    def slices(self, c: int, first_ns: int) -> Generator[Any, Any, None]:
        yield self.env.timeout(first_ns)
        while True:
            a, b = self.members[c]
            self.switch_to(c, b if self.on_cpu[c] == a else a)
            yield self.env.timeout(SLICE_NS)

    def directed_yield(self, g: int) -> None:
        """kvm_vcpu_on_spin: the next preempted sibling after the last boosted one runs."""
        vm = g // VCPUS
        start = self.last_boosted[vm]
        for k in range(1, VCPUS + 1):
            i = (start + k) % VCPUS
            t = vm * VCPUS + i
            if t == g or self.running(t):
                continue
            self.last_boosted[vm] = i
            self.yields += 1
            self.switch_to(self.cpu_of[t], t)
            c = self.cpu_of[g]
            if self.on_cpu[c] == g:  # the yielder gives its CPU to the other vCPU there
                a, b = self.members[c]
                self.switch_to(c, b if g == a else a)
            return

    # ---- a vCPU: its guest only runs while it has its CPU
    def wait_cpu(self, g: int) -> Generator[Any, Any, None]:
        while not self.running(g):
            if self.resume[g].triggered:
                self.resume[g] = self.env.event()
            yield self.resume[g]

    def run_for(self, g: int, ns: int, until: simpy.Event | None = None) -> Generator[Any, Any, bool]:
        """Runs ``ns`` of guest time (ends early when ``until`` fires: True)."""
        env = self.env
        while ns > 0:
            if until is not None and until.triggered:
                return True
            yield from self.wait_cpu(g)
            t0 = env.now
            self.in_timeout[g] = True
            try:
                if until is None:
                    yield env.timeout(ns)
                else:
                    yield env.any_of([env.timeout(ns), until])
            except simpy.Interrupt:
                pass
            finally:
                self.in_timeout[g] = False
            ns -= env.now - t0
        return until is not None and until.triggered

    def vcpu(self, g: int) -> Generator[Any, Any, None]:
        lock = self.locks[g // VCPUS]
        while True:
            yield from self.run_for(g, max(1, round(self.rng.expovariate(1 / COMPUTE_NS))))
            ticket = lock.next_ticket
            lock.next_ticket += 1
            if lock.serving != ticket:
                turn = lock.event_for(ticket)
                while not (yield from self.run_for(g, PLE_WINDOW_NS, until=turn)):
                    self.ple_exits += 1
                    yield from self.run_for(g, EXIT_NS)
                    self.directed_yield(g)
            yield from self.run_for(g, HOLD_NS)
            self.acquisitions += 1
            lock.release()


def run(sim_ms: float, seed: int) -> dict[str, float]:
    m = Model(seed)
    t = time.thread_time()
    m.env.run(until=sim_ms * 1e6)
    cpu_s = time.thread_time() - t
    sim_s = sim_ms / 1e3
    return {
        "simulated_s": sim_s,
        "cpu_s": round(cpu_s, 3),
        "sim_s_per_cpu_s": sim_s / cpu_s,
        "events_per_sim_s": m.env.events / sim_s,
        "ple_exits_per_sim_s": m.ple_exits / sim_s,
        "acquisitions_per_sim_s": m.acquisitions / sim_s,
        "ns_per_event": cpu_s * 1e9 / max(m.env.events, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-ms", type=float, default=20.0, help="simulated time, ms")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print(json.dumps(run(a.sim_ms, a.seed), indent=1))


if __name__ == "__main__":
    main()
