"""Guest workloads of the simulator: the phase classes (``Compute``,
``Lock``, ``Ipi``, ``Barrier``, ``Sleep``, ``Send``, ``Recv``,
``TaskQueue``) and [`Workload`][vcpulab.sim.Workload].

On ``_base``; imported by ``_config`` (``Vm.workload``) and by
[`vcpulab.sim.presets`][]. Public as ``vcpulab.sim.<name>``; ``_config``
re-exports them and stays their ``__module__`` (pickles and reprs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from vcpulab.sim._base import _NEW, _Base, _int, _limits, _plain_seq, max_items

DISTS = ("fixed", "exp", "uniform")
LOCK_KINDS = ("tas", "ticket", "queued", "pv_queued", "mutex", "rwsem_read", "rwsem_write")


@dataclass(frozen=True)
class Compute(_Base):
    """Useful work.

    Attributes:
        ns: Mean duration, ns.
        dist: Distribution of the duration. Default ``"fixed"``.
        mode: CPL of the work (recorded as preempted in kernel mode). Default ``"user"``.
        prob: Probability that the phase runs in an iteration. Default ``1.0``.
    """

    kind: ClassVar[str] = "compute"
    # BEGIN GENERATED FIELDS (Compute): python -m vcpulab._codegen
    ns: int
    dist: str = "fixed"
    mode: str = "user"
    prob: float = 1.0
    # END GENERATED FIELDS


@dataclass(frozen=True)
class Lock(_Base):
    """Acquire guest lock ``lock``, hold it ``hold_ns`` (kernel mode), release.

    ``kind``: ``"tas"`` (virt_spin_lock test-and-set: a running spinner takes
    it at release), ``"ticket"`` (FIFO; the next ticket must run),
    ``"queued"`` (native qspinlock, MCS-like FIFO hand-off), ``"pv_queued"``
    (spin SPIN_THRESHOLD iterations, then halt until kicked; the kick
    directed-yields to the kicked vCPU, [K5]), ``"mutex"`` (optimistic
    spinning while the owner is on a CPU and, with steal time, not preempted;
    otherwise sleep), ``"rwsem_read"`` / ``"rwsem_write"`` (the two sides of
    one reader-writer semaphore, kernel/locking/rwsem.c, 5.x: readers share
    it while no writer holds it — a newcomer reader waits if anyone waits —,
    a writer needs it free; a waiter spins while a writer owns it and runs,
    else sleeps; the last reader out or the writer wakes a spinning waiter, or
    the first sleeper — a writer alone, or every waiting reader). With
    ``sites`` > 1 each acquisition takes one of the locks ``lock`` …
    ``lock + sites - 1``, drawn uniformly (one lock class at many instances).
    Simplified: no lock stealing for queued kinds; the PV predecessor check
    happens when a waiter (re)starts spinning; nobody spins on a reader-owned
    semaphore.

    Attributes:
        lock: Lock id within the VM. Default ``0``.
        lock_kind: The lock's kind (all phases using one lock agree). Default ``"ticket"``.
        hold_ns: Mean hold time, ns. Default ``1000``.
        dist: Distribution of the hold time. Default ``"fixed"``.
        prob: Probability that the phase runs in an iteration. Default ``1.0``.
        sites: Lock sites: each acquisition takes one of the locks `lock` … `lock + sites − 1`,
            chosen uniformly at random, all of this kind and hold (a lock class taken at many
            instances: per-row or per-inode locks, the futex hash's bucket locks). 1 (default): lock
            `lock` only.
        irqs_off: Interrupts off from the acquisition to the release (`spin_lock_irqsave` /
            `spin_lock_irq`): while its thread waits for or holds the lock, the vCPU runs no
            interrupt handler (its IPIs wait for the release), and a waiter halted in `pv_wait`
            (`kvm_wait`'s `halt()` with IF=0) is woken by its kick only, not by an IPI
            (`kvm_arch_interrupt_allowed` is false). Spinlocks only. Default false.
    """

    kind: ClassVar[str] = "lock"
    # BEGIN GENERATED FIELDS (Lock): python -m vcpulab._codegen
    lock: int = 0
    lock_kind: str = "ticket"
    hold_ns: int = 1000
    dist: str = "fixed"
    prob: float = 1.0
    sites: int = field(default=1, metadata=_NEW)
    irqs_off: bool = field(default=False, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        # the last site, lock + sites - 1, is a lock id too
        _int(self, "sites", hi=int(_limits("Lock", "lock")[1]) - self.lock + 1)


@dataclass(frozen=True)
class Ipi(_Base):
    """Send a call-function IPI (TLB shootdown / smp_call_function) to
    ``targets`` random other vCPUs (0 = all others) and spin until each has
    run its ``handler_ns`` handler (ns, default 1000; the VM's first Ipi
    phase sets the handler length for all). ``targets`` default 0 (all
    others); ``prob`` default 1.0. ``tlb_flush``: the IPI is a TLB
    shootdown (``flush_tlb_multi``), which PV TLB flush (``Pv.tlb_flush``)
    skips for preempted targets; default False.

    Attributes:
        targets: Number of other vCPUs targeted; 0 = all others (smp_call_function). Less than
            `vcpus`. Default ``0``.
        handler_ns: Length of the IPI handler, ns (the VM's first Ipi phase sets it for all).
            Default ``1000``.
        prob: Probability that the phase runs in an iteration. Default ``1.0``.
        tlb_flush: A TLB shootdown (flush_tlb_mm_range → flush_tlb_multi): with PV TLB flush,
            preempted targets are skipped and flush at sched-in. Default ``False``.
    """

    kind: ClassVar[str] = "ipi"
    # BEGIN GENERATED FIELDS (Ipi): python -m vcpulab._codegen
    targets: int = 0
    handler_ns: int = 1000
    prob: float = 1.0
    tlb_flush: bool = False
    # END GENERATED FIELDS


@dataclass(frozen=True)
class Barrier(_Base):
    """Block until every (unfinished) thread of the VM arrives (pthread/futex
    barrier: waiters sleep; the vCPU halts if it has nothing else).
    ``prob`` must be 1.0 (a skipped barrier deadlocks).

    Attributes:
        prob: Always 1 (a skipped barrier deadlocks). Default ``1.0``.
    """

    kind: ClassVar[str] = "barrier"
    # BEGIN GENERATED FIELDS (Barrier): python -m vcpulab._codegen
    prob: float = 1.0
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if self.prob != 1.0:
            raise ValueError(f"Barrier.prob must be 1.0 (a skipped barrier deadlocks), got {self.prob}")


@dataclass(frozen=True)
class Sleep(_Base):
    """Block until a timer (I/O, timed waits): ``ns`` mean, ns (default
    100000); ``dist`` default ``"fixed"``; ``prob`` default 1.0.

    ``periodic``: if True, wake at the next multiple of ``ns`` since the run's
    start instead (a periodic timer such as the LAPIC's: a late wake-up does
    not shift the later ones, and periods that pass while the thread is not
    waiting are skipped, like coalesced timer interrupts); needs ``ns > 0``
    and ``dist="fixed"``. Default False (left out of the JSON when False, so
    existing configurations keep their hash).

    Attributes:
        ns: Mean sleep, ns. Default ``100_000``.
        dist: Distribution of the sleep. Default ``"fixed"``.
        prob: Probability that the phase runs in an iteration. Default ``1.0``.
        periodic: Wake at the next multiple of `ns` since the run's start (a periodic timer: a
            late wake-up does not shift the later ones). Default ``False``.
    """

    kind: ClassVar[str] = "sleep"
    # BEGIN GENERATED FIELDS (Sleep): python -m vcpulab._codegen
    ns: int = 100_000
    dist: str = "fixed"
    prob: float = 1.0
    periodic: bool = False
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if self.periodic and (self.ns == 0 or self.dist != "fixed"):
            raise ValueError(f"Sleep.periodic needs ns > 0 and dist 'fixed', got ns={self.ns}, dist={self.dist!r}")

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if not self.periodic:
            d.pop("periodic")
        return d


@dataclass(frozen=True)
class Send(_Base):
    """Post a message to thread (i + ``to``) mod threads (``to`` default 1),
    waking it if it waits in Recv; ``prob`` default 1.0.

    Attributes:
        to: Distance to the receiving thread, in [1, threads). Default ``1``.
        prob: Probability that the phase runs in an iteration. Default ``1.0``.
    """

    kind: ClassVar[str] = "send"
    # BEGIN GENERATED FIELDS (Send): python -m vcpulab._codegen
    to: int = 1
    prob: float = 1.0
    # END GENERATED FIELDS


@dataclass(frozen=True)
class Recv(_Base):
    """Block until a message is available (halt until a message); ``prob``
    default 1.0.

    Attributes:
        prob: Probability that the phase runs in an iteration. Default ``1.0``.
    """

    kind: ClassVar[str] = "recv"
    # BEGIN GENERATED FIELDS (Recv): python -m vcpulab._codegen
    prob: float = 1.0
    # END GENERATED FIELDS


@dataclass(frozen=True)
class TaskQueue(_Base):
    """Take the next task of the VM's task queue; the phases after it are the
    task (put the queue's lock, a ``Lock``, before it). When the frame's
    tasks are all taken the thread waits (it sleeps; its vCPU halts if it has
    nothing else) until every unfinished thread has found the queue empty:
    the frame's end. Then the queue refills, or, after ``frames`` frames,
    every thread ends. Threads that finish their tasks early take more: the
    dynamic load balancing of a task queue, as SPLASH-2's volrend and
    raytrace have (Woo et al., "The SPLASH-2 Programs: Characterization and
    Methodological Considerations", ISCA 1995). Simplified: one queue per
    VM, no per-thread queues to steal from (the stealing's effect, work
    moving to idle threads, is what one shared queue gives).

    At most one per workload, with no ``Barrier``, no ``thread0_phases`` and
    ``iterations`` 0 (the frames end the run). Each pass through the phases
    is one operation (a task).

    Attributes:
        tasks: Tasks per frame, all threads together.
        frames: Frames; 0 = until the end of the run. Default ``0``.
        prob: Always 1 (a skipped take would lose the frame's end). Default ``1.0``.
    """

    kind: ClassVar[str] = "task_queue"
    # BEGIN GENERATED FIELDS (TaskQueue): python -m vcpulab._codegen
    tasks: int
    frames: int = 0
    prob: float = 1.0
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        self._check_fields()
        if self.prob != 1.0:
            raise ValueError(f"TaskQueue.prob must be 1.0 (a skipped take loses the frame's end), got {self.prob}")


#: one step of a guest thread's loop: any of the phase classes
Phase = Compute | Lock | Ipi | Barrier | Sleep | Send | Recv | TaskQueue
_PHASES: dict[str, Any] = {c.kind: c for c in (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv, TaskQueue)}


def _phase_to_dict(p: Any) -> dict[str, Any]:
    return {"kind": p.kind, **p.to_dict()}


def _phase_from_dict(d: Mapping[str, Any]) -> Any:
    if not isinstance(d, Mapping) or "kind" not in d:
        raise ValueError(f"a phase must be a mapping with a 'kind', got {d!r}")
    kind = d["kind"]
    if kind not in _PHASES:
        raise ValueError(f"phase kind must be one of {sorted(_PHASES)}, got {kind!r}")
    return _PHASES[kind].from_dict({k: v for k, v in d.items() if k != "kind"})


@dataclass(frozen=True)
class Workload(_Base):
    """What each guest thread runs: ``phases`` in order, one iteration at a time.

    Attributes:
        phases: A tuple of phases (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv, TaskQueue).
            Default ``(Compute(ns=20_000, dist="exp"), Lock(hold_ns=2000))``.
        name: A label for tables. Default `"custom"`.
        iterations: Iterations per thread; 0 loops until the end of the run (throughput), > 0
            ends the run when every VM is done (wall time). Default ``0``.
        guest_slice_ns: Guest round-robin slice between threads sharing a vCPU, ns. Default
            4000000 (assumption: a 4 ms guest CFS slice).
        spin_iter_cycles: Cycles per spin-loop iteration (turns SPIN_THRESHOLD into time).
            Default 40 (assumption: PAUSE + load on older Xeons).
        spin_threshold: PV queued-lock SPIN_THRESHOLD, iterations. Default 32768 (kernel, [K5]).
        thread0_phases: Thread 0 of each VM runs these phases instead of `phases` (empty, the
            default: every thread runs `phases`). An initiator beside responders, e.g. a ping-pong:
            thread 0 `[Compute, Send{to: 1}, Recv]`, the others `[Recv, Compute, Send{to: 1}]`. Only
            compute, sleep, barrier, send and receive phases (locks and IPIs are set up from
            `phases`).
        thread0_bound: Thread 0 of each VM is bound to the VM's vCPU 0 (the guest's
            `kthread_bind` / `sched_setaffinity` to one CPU): its wake-ups skip the guest's
            placement and load balancing never moves it. Other threads are placed as before (on vCPU
            0 too, where the rule finds it available). Default false. A waker that stays on its
            vCPU, as vcpulab's wake-placement guest program's vCPU 0.
    """

    # BEGIN GENERATED FIELDS (Workload): python -m vcpulab._codegen
    phases: tuple[Phase, ...] = (Compute(ns=20_000, dist="exp"), Lock(hold_ns=2000))
    name: str = "custom"
    iterations: int = 0
    guest_slice_ns: int = 4_000_000
    spin_iter_cycles: int = 40
    spin_threshold: int = 32_768
    thread0_phases: tuple[Phase, ...] = field(default=(), metadata=_NEW)
    thread0_bound: bool = field(default=False, metadata=_NEW)
    # END GENERATED FIELDS

    def __post_init__(self) -> None:
        if isinstance(self.phases, list):
            object.__setattr__(self, "phases", tuple(self.phases))
        if isinstance(self.thread0_phases, list):
            object.__setattr__(self, "thread0_phases", tuple(self.thread0_phases))
        if not isinstance(self.thread0_phases, tuple):
            raise ValueError(f"Workload.thread0_phases must be a tuple of phases, got {self.thread0_phases!r}")
        for i, p in enumerate(self.thread0_phases):
            if type(p) not in (Compute, Sleep, Barrier, Send, Recv):
                raise ValueError(
                    f"Workload.thread0_phases[{i}] must be a Compute, Sleep, Barrier, Send or Recv phase, got {p!r}"
                )
        if self.thread0_phases and not any(
            isinstance(p, (Compute, Sleep)) and p.ns > 0 and p.prob == 1.0 for p in self.thread0_phases
        ):
            raise ValueError(
                "Workload.thread0_phases must include a compute or sleep phase that takes time with prob 1.0"
            )
        most = max_items("Workload", "thread0_phases")
        if len(self.thread0_phases) > most:
            raise ValueError(f"Workload.thread0_phases must hold <= {most} phases, got {len(self.thread0_phases)}")
        if not isinstance(self.phases, tuple) or not self.phases:
            raise ValueError(f"Workload.phases must be a non-empty tuple of phases, got {self.phases!r}")
        for i, p in enumerate(self.phases):
            if type(p) not in _PHASES.values():
                raise ValueError(f"Workload.phases[{i}] must be a phase object, got {p!r}")
        timed = [
            p
            for p in self.phases
            if p.prob == 1.0
            and ((isinstance(p, (Compute, Sleep)) and p.ns > 0) or (isinstance(p, Lock) and p.hold_ns > 0))
        ]
        if not timed:
            raise ValueError(
                "Workload.phases must include a compute, lock or sleep phase that takes time (ns/hold_ns > 0) "
                "with prob 1.0"
            )
        most = max_items("Workload", "phases")
        if len(self.phases) > most:
            raise ValueError(f"Workload.phases must hold <= {most} phases, got {len(self.phases)}")
        kinds: dict[int, str] = {}
        for i, p in enumerate(self.phases):
            if isinstance(p, Lock):
                for lock in range(p.lock, p.lock + p.sites):
                    first = kinds.setdefault(lock, p.lock_kind)
                    if first != p.lock_kind and not (first.startswith("rwsem") and p.lock_kind.startswith("rwsem")):
                        raise ValueError(
                            f"Workload.phases[{i}].lock_kind differs from an earlier phase using lock {lock}"
                        )
        if any(isinstance(p, Recv) for p in self.phases) and not any(isinstance(p, Send) for p in self.phases):
            raise ValueError("Workload.phases: a Recv phase needs a Send phase")
        self._check_fields()
        queues = sum(isinstance(p, TaskQueue) for p in self.phases)
        if queues and (
            queues > 1 or any(isinstance(p, Barrier) for p in self.phases) or self.thread0_phases or self.iterations
        ):
            raise ValueError(
                "Workload.phases: a task_queue phase must be the only one, with no barrier phase, no thread0_phases "
                "and iterations 0 (its frames end the run)"
            )

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["phases"] = [_phase_to_dict(p) for p in self.phases]
        if "thread0_phases" in d:
            d["thread0_phases"] = [_phase_to_dict(p) for p in self.thread0_phases]
        return d

    @classmethod
    def _field_from_plain(cls, name: str, v: Any) -> Any:
        if name in ("phases", "thread0_phases"):
            return tuple(_phase_from_dict(p) for p in _plain_seq("Workload", name, v))
        return v
