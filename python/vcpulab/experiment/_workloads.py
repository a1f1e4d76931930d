"""The workloads of [`vcpulab.experiment`][]: a guest program each (assembled in Rust,
``src/kvm/guest/program.rs``) plus what the host does around it, and the limits of an
experiment (``GRACE_S``, ``MAX_VCPUS``, ``MAX_DURATION_S``). Imports nothing else of the package."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from vcpulab import _core
from vcpulab._checks import check_float, check_int, check_seq
from vcpulab.kvm import Program, Vcpu, Vm

#: Extra wall time after ``duration`` for workloads that stop gracefully (s).
GRACE_S = 3.0


class Workload:
    """Base class: a guest program plus what the host does around it."""

    program: ClassVar[str]
    #: True when the guest finishes by itself after the host sets a stop flag
    #: (then the run waits up to GRACE_S for it); False when the deadline ends it.
    graceful: ClassVar[bool] = False

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        raise NotImplementedError

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        """Raise ValueError for a configuration the workload cannot run."""

    def stop(self, vm: Vm, prog: Program) -> None:
        """Ask the guest to finish (graceful workloads)."""

    @property
    def forced_bytes(self) -> dict[int, dict[int, int]]:
        """Steal-time bytes the host writes for the whole run, {vCPU id: {offset in the
        vCPU's steal-time area: value}}; those vCPUs' steal-time MSR stays disabled."""
        return {}

    @property
    def pv_exits(self) -> bool:
        """True when the guest program takes ``pv_exits`` (its halt brackets, and spin
        exits where it spins), which vcpulab's scheduler turns on."""
        return False

    def host_driver(self, vm: Vm, vcpus: Sequence[Vcpu], prog: Program, duration: float) -> Any:
        """Work the host does while the vCPUs run (called on its own thread)."""
        return None

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        raise NotImplementedError

    def items(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu]) -> dict[str, Any] | None:
        """One VM's per-item log, one array per column (``Run.items``); None
        for a program that logs no items."""
        return None

    def config(self) -> dict[str, Any]:
        return {"workload": self.program, **asdict(self)}  # type: ignore[call-overload]


class _StopFlag(Workload):
    """A program that finishes its iteration when the host sets its ``stop``
    result field, and brackets its halts (and spin exits) for vcpulab's scheduler."""

    graceful: ClassVar[bool] = True

    def stop(self, vm: Vm, prog: Program) -> None:
        vm.write_u64(_field(prog, "stop")["gpa"], 1)

    @property
    def pv_exits(self) -> bool:
        return True


@dataclass(frozen=True)
class SpinLock(_StopFlag):
    """Lock contention: vCPUs repeatedly acquire one lock, increment a shared
    counter non-atomically inside a critical section of ``hold`` loop
    iterations, release, then run ``think`` iterations.

    ``kind``: ``"tas"`` (test-and-test-and-set with PAUSE) or ``"ticket"``
    (FIFO; exposes lock-waiter preemption). ``iterations``: acquisitions per
    vCPU, 0 = until the duration ends (the host then sets a stop flag and each
    vCPU finishes its current iteration).

    Result columns per vCPU: acquisitions, pauses (PAUSEs while waiting),
    max_wait_us, wait_per_acq_us (TSC-timed in the guest), and the VM's
    ``counter`` (equal to the VM's summed acquisitions when mutual exclusion holds).
    """

    kind: Literal["tas", "ticket"] = "tas"
    #: loop iterations inside the critical section (≈ 2 emulated instructions each)
    hold: int = 50
    #: loop iterations between release and the next acquire
    think: int = 50
    iterations: int = 0
    program: ClassVar[str] = "spin_lock"

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        if self.kind not in ("tas", "ticket"):
            raise ValueError(f"SpinLock.kind must be 'tas' or 'ticket', got {self.kind!r}")
        for f in ("hold", "think", "iterations"):
            check_int(f"{type(self).__name__}.{f}", getattr(self, f), 0, 2**64 - 1)
        if n_vcpus > 64:
            raise ValueError(f"spin-lock workloads support at most 64 vCPUs per VM, got {n_vcpus}")

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        return {
            "kind": self.kind,
            "hold": self.hold,
            "think": self.think,
            "iterations": self.iterations,
            "vcpus": n_vcpus,
        }

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        r = vm.results(prog)
        khz = vcpus[0].tsc_khz
        ids = [v.id for v in vcpus]
        acq = r["acquisitions"][ids]
        out: dict[str, list[Any]] = {
            "acquisitions": acq.tolist(),
            "pauses": r["pauses"][ids].tolist(),
            "max_wait_us": (r["max_wait_cycles"][ids] / khz * 1e3).tolist(),
            "wait_per_acq_us": np.where(
                acq > 0, r["total_wait_cycles"][ids] / np.maximum(acq, 1) / khz * 1e3, np.nan
            ).tolist(),
            "counter": [int(r["counter"][0])] * len(ids),
        }
        if self.program == "pv_spin_lock":
            out["halts"] = r["halts"][ids].tolist()
            out["kicks"] = r["kicks"][ids].tolist()
        return out


@dataclass(frozen=True)
class PvSpinLock(SpinLock):
    """``SpinLock`` whose waiters read the holder's steal-time ``preempted``
    byte every ``check_every`` PAUSEs and, when it is set, halt until the
    unlocker kicks them with an IPI (vector ``kick_vector``): the guest side of
    ``vcpu_is_preempted`` ([S2]). Extra columns: halts, kicks.

    Hosts with VMX/SVM set ``preempted`` themselves; this host never does
    (measured here: it emulates every guest instruction), so ``preempted_from_host`` writes the byte of the
    listed vCPUs from the host for the whole run (their steal-time MSR is then
    left disabled, so KVM does not clear it).
    """

    #: only "tas": the pv lock is a test-and-set lock (the guest kernel's pv
    #: qspinlock is not modelled in the real guest; the simulator has it)
    kind: Literal["tas"] = "tas"  # type: ignore[assignment]
    check_every: int = 64
    kick_vector: int = 0xF0
    preempted_from_host: tuple[int, ...] = ()
    program: ClassVar[str] = "pv_spin_lock"

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        if self.kind != "tas":
            raise ValueError(f"PvSpinLock.kind must be 'tas' (a pv test-and-set lock), got {self.kind!r}")
        super().check(n_vcpus, irqchip)
        if not irqchip:
            raise ValueError("PvSpinLock needs irqchip=True (its kick is an IPI)")
        check_int("PvSpinLock.check_every", self.check_every, 1, 2**64 - 1)
        check_int("PvSpinLock.kick_vector", self.kick_vector, 32, 255)
        for v in check_seq("PvSpinLock.preempted_from_host", self.preempted_from_host, "vCPU ids"):
            check_int("PvSpinLock.preempted_from_host entry", v, 0)
            if not 0 <= v < n_vcpus:
                raise ValueError(f"PvSpinLock.preempted_from_host names vCPU {v}, but there are {n_vcpus}")

    @property
    def forced_bytes(self) -> dict[int, dict[int, int]]:
        return {v: {_core.STEAL_OFF_PREEMPTED: 1} for v in self.preempted_from_host}

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        return {
            "hold": self.hold,
            "think": self.think,
            "iterations": self.iterations,
            "check_every": self.check_every,
            "kick_vector": self.kick_vector,
            "vcpus": n_vcpus,
        }


@dataclass(frozen=True)
class MsiPingPong(Workload):
    """Host → vCPU messages: the guest halts; ``gap_us`` after it announced
    its halt the host sends an MSI; ``rounds`` times (2 to 16,384: the guest
    records every round's halt in its data area). Needs one vCPU per VM.

    Result columns: rounds, rtt_median_us / rtt_p99_us (host-timed, MSI sent →
    guest about to halt again), halt_median_us (guest-timed with RDTSC and
    KVM's TSC frequency).
    """

    rounds: int = 1000
    gap_us: float = 50.0
    vector: int = 0x40
    program: ClassVar[str] = "msi_pong"

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        if n_vcpus != 1:
            raise ValueError(f"MsiPingPong runs on exactly one vCPU per VM, got {n_vcpus}")
        if not irqchip:
            raise ValueError("MsiPingPong needs irqchip=True")
        check_int("MsiPingPong.rounds", self.rounds, 2, _core.MAX_PROGRAM_ROUNDS)
        check_float("MsiPingPong.gap_us", self.gap_us, 0.0, unit="µs")
        check_int("MsiPingPong.vector", self.vector, 32, 255)
        if self.rounds < 2 or self.gap_us < 0:
            raise ValueError(f"MsiPingPong needs rounds >= 2 and gap_us >= 0, got {self.rounds}, {self.gap_us}")

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        return {"vector": self.vector, "count": self.rounds}

    def host_driver(self, vm: Vm, vcpus: Sequence[Vcpu], prog: Program, duration: float) -> Any:
        halts = _field(prog, "halts")["gpa"]
        return vm._vm.msi_ping(vcpus[0].id, self.vector, self.rounds, int(self.gap_us * 1000), halts, duration)

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        khz = vcpus[0].tsc_khz
        halt = vm.results(prog)["halt_cycles"] / khz * 1e3
        rtt = np.asarray(driver if driver is not None else [], dtype=float) / 1e3
        return {
            "rounds": [int(len(rtt) + 1 if len(rtt) else 0)],
            "rtt_median_us": [float(np.median(rtt)) if len(rtt) else float("nan")],
            "rtt_p99_us": [float(np.percentile(rtt, 99)) if len(rtt) else float("nan")],
            "halt_median_us": [float(np.median(halt[halt > 0])) if (halt > 0).any() else float("nan")],
        }


@dataclass(frozen=True)
class IpiPingPong(Workload):
    """vCPU ↔ vCPU messages: vCPU 0 waits ``gap_us`` (spinning on RDTSC), sends
    an IPI to vCPU 1 and halts until its reply; ``rounds`` times (at most
    16,384: the guest records every round). Needs two vCPUs.

    Result columns (on vCPU 0's row): rounds, rtt_median_us, rtt_p10_us,
    rtt_p90_us, rtt_p99_us (guest RDTSC, converted with KVM's TSC frequency);
    vCPU 1's row has replies.
    """

    rounds: int = 1000
    gap_us: float = 50.0
    vector_base: int = 0x60
    program: ClassVar[str] = "ipi_ping_pong"

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        if n_vcpus != 2:
            raise ValueError(f"IpiPingPong runs on exactly two vCPUs per VM, got {n_vcpus}")
        if not irqchip:
            raise ValueError("IpiPingPong needs irqchip=True")
        check_int("IpiPingPong.rounds", self.rounds, 1, _core.MAX_PROGRAM_ROUNDS)
        check_float("IpiPingPong.gap_us", self.gap_us, 0.0, unit="µs")
        check_int("IpiPingPong.vector_base", self.vector_base, 32, 254)
        if self.rounds < 1 or self.gap_us < 0:
            raise ValueError(f"IpiPingPong needs rounds >= 1 and gap_us >= 0, got {self.rounds}, {self.gap_us}")

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        # gap in TSC cycles is filled in by run() once the TSC frequency is known
        return {"rounds": self.rounds, "vector_base": self.vector_base}

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        r = vm.results(prog)
        khz = vcpus[0].tsc_khz
        done = int(r["rounds_done"][0])
        rtt = r["rtt_cycles"][:done] / khz * 1e3
        med = float(np.median(rtt)) if done else float("nan")
        p10, p90, p99 = (float(np.percentile(rtt, q)) if done else float("nan") for q in (10, 90, 99))
        return {
            "rounds": [done, 0],
            "replies": [0, int(r["replies"][0])],
            "rtt_median_us": [med, float("nan")],
            "rtt_p10_us": [p10, float("nan")],
            "rtt_p90_us": [p90, float("nan")],
            "rtt_p99_us": [p99, float("nan")],
        }


@dataclass(frozen=True)
class IdleTicks(Workload):
    """The idle guest of [S5]: each vCPU's LAPIC timer fires at ``hz``
    and the vCPU halts in between (until the duration ends).

    Result columns: ticks (timer interrupts taken, all vCPUs of the VM),
    halts (per vCPU).
    """

    hz: int = 250
    vector: int = 0xEC
    program: ClassVar[str] = "idle_ticks"

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        if not irqchip:
            raise ValueError("IdleTicks needs irqchip=True (the LAPIC timer)")
        check_int("IdleTicks.hz", self.hz, 1, 100_000)
        check_int("IdleTicks.vector", self.vector, 32, 255)

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        return {"hz": self.hz, "ticks": 0, "vector": self.vector}

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        halts = vm.results(prog)["halts"]
        ticks = int(vm.irq_counts()[self.vector])
        return {"ticks": [ticks] * len(vcpus), "halts": [int(halts[v.id]) for v in vcpus]}


@dataclass(frozen=True)
class Spin(Workload):
    """A CPU-bound guest: every vCPU executes PAUSE in a loop until the
    duration ends (a vCPU that always wants its CPU, for steal-time studies).

    Result column: pauses (PAUSEs executed by each vCPU).
    """

    program: ClassVar[str] = "pause_loop"

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        return {"iterations": 0}

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        counter = vm.results(prog)["counter"]
        return {"pauses": [int(counter[v.id]) for v in vcpus]}


@dataclass(frozen=True)
class WakePlacement(_StopFlag):
    """The guest's wake-up placement of [S3]: vCPU 0 is a waker that hands one
    work item at a time to a worker (vCPUs 1, 2, …), chosen as the guest
    scheduler's ``select_idle_sibling`` would, over the workers in order from
    the one that ran the previous item (the wakee's ``prev``):

    * ``rule="available_idle"``: the first idle worker whose steal-time
      ``preempted`` byte is clear (``available_idle_cpu()``, upstream);
    * ``rule="pcpu_is_idle"``: first an idle worker whose ``is_idle`` byte is
      set (the host CPU it last ran on is idle: the 2021 ``pcpu_is_idle``
      proposal), then as ``available_idle`` (the simulator's
      ``Pv.placement="pcpu_is_idle"``);

    and, when neither finds one, any idle worker. The waker wakes it with an
    IPI of ``vector`` and halts until the worker's completion IPI. A worker
    runs ``work`` loop iterations per item, then polls its mailbox ``poll``
    PAUSEs and halts. Needs at least two vCPUs per VM (at most 64).

    The waker starts once every worker is idle, then waits 128 PAUSEs
    (~0.3-0.6 ms here) before its first scan, so that the workers' halt
    brackets under vcpulab's scheduler have freed their CPUs: without the wait
    the first choice followed a race between the last worker's bracket and
    the scan (docs/twins.md, "Where the twin still disagrees", item 10), and
    every later item follows the first.

    Only vcpulab's scheduler writes ``is_idle`` (``sched.pinned`` and the
    other token schedulers, while the CPU a vCPU last ran on holds no token);
    on this host (kvm_pvm) KVM writes neither byte, so under ``sched.host()``
    both rules choose alike. ``preempted_from_host`` / ``is_idle_from_host``
    write a byte of the listed workers from the host for the whole run (their
    steal-time MSR is then left disabled, so KVM does not touch it): a
    controlled check of the rule.

    Result columns: on the waker's row rounds (items completed),
    wake_median_us / wake_p99_us (the waker's wake-up → the worker running
    the item, guest TSC), round_median_us, chose_is_idle / chose_preempted
    (shares of items whose chosen worker had that byte set at the choice),
    fallback_share (items no rule placed); the latencies and shares are over
    the first 4,096 items, which the guest logs one by one (``Run.items``:
    that log, one row per item: the worker chosen, how, its bytes at the
    choice, the item's wake-up and round). On the workers'
    rows items (items it ran: every item is run by the worker chosen for it),
    halts and poll_hits.
    """

    rule: Literal["available_idle", "pcpu_is_idle"] = "available_idle"
    #: loop iterations a worker runs per item (≈ 2 emulated instructions each)
    work: int = 200
    #: PAUSEs a worker polls its mailbox before it halts
    poll: int = 0
    #: items per VM, 0 = until the duration ends
    rounds: int = 0
    vector: int = 0x70
    preempted_from_host: tuple[int, ...] = ()
    is_idle_from_host: tuple[int, ...] = ()
    program: ClassVar[str] = "wake_placement"

    def check(self, n_vcpus: int, irqchip: bool) -> None:
        if self.rule not in ("available_idle", "pcpu_is_idle"):
            raise ValueError(f"WakePlacement.rule must be 'available_idle' or 'pcpu_is_idle', got {self.rule!r}")
        for f in ("work", "poll", "rounds"):
            check_int(f"WakePlacement.{f}", getattr(self, f), 0, 2**64 - 1)
        check_int("WakePlacement.vector", self.vector, 32, 255)
        if not 2 <= n_vcpus <= 64:
            raise ValueError(f"WakePlacement needs 2 to 64 vCPUs per VM (a waker and its workers), got {n_vcpus}")
        if not irqchip:
            raise ValueError("WakePlacement needs irqchip=True (its wake-ups are IPIs)")
        for name in ("preempted_from_host", "is_idle_from_host"):
            for v in check_seq(f"WakePlacement.{name}", getattr(self, name), "vCPU ids"):
                check_int(f"WakePlacement.{name} entry", v, 0)
                if not 1 <= v < n_vcpus:
                    raise ValueError(f"WakePlacement.{name} names vCPU {v}; the workers are 1..{n_vcpus - 1}")

    @property
    def forced_bytes(self) -> dict[int, dict[int, int]]:
        """{vCPU id: {steal-area offset: 1}} of the bytes written from the host."""
        out: dict[int, dict[int, int]] = {}
        for v in self.preempted_from_host:
            out.setdefault(v, {})[_core.STEAL_OFF_PREEMPTED] = 1
        for v in self.is_idle_from_host:
            out.setdefault(v, {})[_core.STEAL_OFF_IS_IDLE] = 1
        return out

    def params(self, n_vcpus: int) -> dict[str, int | str]:
        return {
            "rule": self.rule,
            "work": self.work,
            "poll": self.poll,
            "rounds": self.rounds,
            "vector": self.vector,
            "vcpus": n_vcpus,
        }

    def items(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu]) -> dict[str, Any]:
        """The waker's log of the first 4,096 items: item, target (the worker
        chosen), pass (how: 1 its ``is_idle`` byte set, 2 its ``preempted``
        byte clear, 3 any idle worker), preempted / is_idle (the chosen
        worker's bytes at the choice), wake_us (the waker's wake-up → the
        worker running the item; NaN where the two vCPUs' TSCs disagree),
        round_us (the wake-up → the waker seeing the completion)."""
        return self._log(vm.results(prog), vcpus[0].tsc_khz)

    @staticmethod
    def _log(r: dict[str, np.ndarray], khz: float) -> dict[str, np.ndarray]:
        n = min(int(r["rounds_done"][0]), len(r["target"]))
        bytes_ = r["target_bytes"][:n]
        # a wake-up read across vCPUs whose TSCs disagree would wrap: not a latency
        wake = r["wake_cycles"][:n].astype(np.float64)
        wake[r["wake_cycles"][:n] >= 2**63] = np.nan
        return {
            "item": np.arange(n, dtype=np.int64),
            "target": r["target"][:n].astype(np.int64),
            "pass": r["pass"][:n].astype(np.int64),
            "preempted": (bytes_ & 1) != 0,
            "is_idle": (bytes_ & 2) != 0,
            "wake_us": wake / khz * 1e3,
            "round_us": r["round_cycles"][:n] / khz * 1e3,
        }

    def results(self, vm: Vm, prog: Program, vcpus: Sequence[Vcpu], driver: Any) -> dict[str, list[Any]]:
        r = vm.results(prog)
        ids = [v.id for v in vcpus]
        done = int(r["rounds_done"][0])
        log = self._log(r, vcpus[0].tsc_khz)
        n = len(log["item"])
        wake_us, round_us = log["wake_us"], log["round_us"]

        def q(x: np.ndarray, p: float) -> float:
            x = x[np.isfinite(x)]
            return float(np.percentile(x, p)) if len(x) else float("nan")

        def share(mask: np.ndarray) -> float:
            return float(mask.mean()) if n else float("nan")

        nan = float("nan")
        return {
            "rounds": [done] + [0] * (len(ids) - 1),
            "items": [int(r["items"][i]) for i in ids],
            "halts": [int(r["halts"][i]) for i in ids],
            "poll_hits": [int(r["poll_hits"][i]) for i in ids],
            "wake_median_us": [q(wake_us, 50)] + [nan] * (len(ids) - 1),
            "wake_p99_us": [q(wake_us, 99)] + [nan] * (len(ids) - 1),
            "round_median_us": [q(round_us, 50)] + [nan] * (len(ids) - 1),
            "chose_is_idle": [share(log["is_idle"])] + [nan] * (len(ids) - 1),
            "chose_preempted": [share(log["preempted"])] + [nan] * (len(ids) - 1),
            "fallback_share": [share(log["pass"] == 3)] + [nan] * (len(ids) - 1),
        }


#: Most vCPUs per VM of an experiment: guest programs address vCPUs by their
#: 8-bit xAPIC id (and keep one result slot per id below 256).
MAX_VCPUS = 256
#: Longest experiment, s (a run's hard deadline must fit in a day).
MAX_DURATION_S = 86_400.0 - GRACE_S


def _field(prog: Program, name: str) -> dict[str, Any]:
    return next(r for r in prog.results if r["name"] == name)


def _record_gpa(prog: Program, name: str, vcpu: int) -> int:
    """The guest-physical address of vCPU ``vcpu``'s entry of a per-vCPU result field."""
    f = _field(prog, name)
    return int(f["gpa"]) + vcpu * int(f["stride"])
